/*
** Tests for the annotate renderer: each line's self and total, the context shown around
** profiled lines, trace frames, files that cannot be shown, ordering and limits.
*/
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "report/render.h"
#include "unit.h"

static char dir[] = "/tmp/lp_annotate_XXXXXX";

static char *render(const struct lp_profile *p, const struct lp_render_opts *o, int *rc)
{
	char *buf = NULL, err[128] = "";
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	*rc = lp_render_annotate(p, o, out, err, sizeof(err));
	fclose(out);
	return buf;
}

/* A frame of a main chunk (its first line 0, as LuaJIT's linedefined has it): the sources
 * written here hold no function. */
static uint32_t frame(struct lp_profile *p, enum lp_frame_kind kind, const char *name,
		      uint32_t line)
{
	struct lp_frame f = { .kind = kind, .name = name, .line = line };
	uint32_t id = UINT32_MAX;
	CHECK_EQ(lp_profile_frame_id(p, &f, &id), 0);
	return id;
}

static void add(struct lp_profile *p, const uint32_t *fr, size_t depth, int64_t v)
{
	CHECK_EQ(lp_profile_add(p, fr, depth, &v), 0);
}

/* Writes a source file into dir; returns its chunk name ("@" and the path), malloc'd. */
static char *source(const char *name, const char *text)
{
	char path[256], *chunk = malloc(300);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
	snprintf(chunk, 300, "@%s", path);
	return chunk;
}

static struct lp_profile *cpu_profile(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "cpu.bin";
	m->event = "cpu";
	m->samples = 20;
	return p;
}

/*
** fib.lua: main at line 12 calls fib, whose line 3 recurses through line 5; a C function
** under line 5; lines 20-21 far below (a "..." between). Stacks:
**   12 3 5 3      8  (recursion: 3 counts once in total)
**   12 5 C        6  (the C leaf's value is line 5's self)
**   12            2  (12's total: 16)
**   20            3
**   21 (trace)    1  (a trace frame over a Lua frame: the Lua frame's line counts)
*/
static void test_lines_and_context(void)
{
	char *chunk = source("fib.lua",
			     "local function fib(n)\n"    /* 1 */
			     "  if n < 2 then\n"          /* 2 */
			     "    return fib(n - 1)\n"    /* 3 */
			     "  end\n"                    /* 4 */
			     "  return\tfib(n - 2)\n"     /* 5: a tab */
			     "end\n"                      /* 6 */
			     "\n"                         /* 7 */
			     "--\n"                       /* 8 */
			     "--\n"                       /* 9 */
			     "--\n"                       /* 10 */
			     "--\n"                       /* 11 */
			     "print(fib(30))\n"           /* 12 */
			     "--\n" "--\n" "--\n" "--\n" "--\n" "--\n" "--\n" /* 13-19 */
			     "for i = 1, 10 do\n"         /* 20 */
			     "  x = i\n"                  /* 21 */
			     "end\n");                    /* 22 */
	struct lp_profile *p = cpu_profile();
	uint32_t m12 = frame(p, LP_FK_LUA, chunk, 12), f3 = frame(p, LP_FK_LUA, chunk, 3);
	uint32_t f5 = frame(p, LP_FK_LUA, chunk, 5), c = frame(p, LP_FK_C, "lj_str_new", 0);
	uint32_t m20 = frame(p, LP_FK_LUA, chunk, 20), m21 = frame(p, LP_FK_LUA, chunk, 21);
	uint32_t tr = frame(p, LP_FK_TRACE, chunk, 20);
	add(p, (uint32_t[]){ m12, f3, f5, f3 }, 4, 8);
	add(p, (uint32_t[]){ m12, f5, c }, 3, 6);
	add(p, (uint32_t[]){ m12 }, 1, 2);
	add(p, (uint32_t[]){ m20 }, 1, 3);
	add(p, (uint32_t[]){ m21, tr }, 2, 1);
	int rc;
	char *s = render(p, NULL, &rc), want[4096];
	CHECK_EQ(rc, 0);
	snprintf(want, sizeof(want),
		 "Source: cpu.bin  Total samples: 20  Samples: 20  Dropped: 0\n"
		 "self: at the line itself, with the builtins and C code it calls; total: with "
		 "the Lua functions it calls too\n"
		 "\n"
		 "== %s: self 100.00%% (20)\n"
		 "  %%self       self  %%total      total   line   source\n"
		 "                                           1   local function fib(n)\n"
		 "                                           2     if n < 2 then\n"
		 " 40.00%%          8  40.00%%          8      3       return fib(n - 1)\n"
		 "                                           4     end\n"
		 " 30.00%%          6  70.00%%         14      5     return        fib(n - 2)\n"
		 "                                           6   end\n"
		 "                                           7\n"
		 "                                         ...\n"
		 "                                          10   --\n"
		 "                                          11   --\n"
		 " 10.00%%          2  80.00%%         16     12   print(fib(30))\n"
		 "                                          13   --\n"
		 "                                          14   --\n"
		 "                                         ...\n"
		 "                                          18   --\n"
		 "                                          19   --\n"
		 " 15.00%%          3  15.00%%          3     20   for i = 1, 10 do\n"
		 "  5.00%%          1   5.00%%          1     21     x = i\n"
		 "                                          22   end\n",
		 chunk);
	CHECK_STR(s, want);
	free(s);
	lp_profile_free(p);
	free(chunk);
}

/* --context: no lines around the profiled ones with 0 ("..." between runs that are not
 * adjacent); the whole file with a number past its length. */
static void test_context(void)
{
	char *chunk = source("ctx.lua", "a\nb\nc\nd\ne\n");
	struct lp_profile *p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, chunk, 2) }, 1, 1);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, chunk, 4) }, 1, 1);
	struct lp_render_opts o = { .context = 0 + 1 };
	int rc;
	char *s = render(p, &o, &rc), want[1024];
	CHECK_EQ(rc, 0);
	snprintf(want, sizeof(want),
		 "  %%self       self  %%total      total   line   source\n"
		 " 50.00%%          1  50.00%%          1      2   b\n"
		 "                                         ...\n"
		 " 50.00%%          1  50.00%%          1      4   d\n");
	CHECK(s && strstr(s, want) && !strstr(s, "   a\n") && !strstr(s, "   e\n"));
	free(s);
	o.context = 1000 + 1;
	s = render(p, &o, &rc);
	CHECK(s && strstr(s, "      1   a\n") && strstr(s, "      3   c\n") &&
	      strstr(s, "      5   e\n") && !strstr(s, "..."));
	free(s);
	lp_profile_free(p);
	free(chunk);
}

/* An exact memory profile's trace events (a trace frame alone) are charged to the line
 * where the trace starts, marked T; the legend says so. Bytes are scaled. */
static void test_trace_events(void)
{
	char *chunk = source("loop.lua", "local t = {}\n"
					 "for i = 1, 100 do\n"
					 "  t[i] = {}\n"
					 "end\n");
	static const struct lp_value_type types[] = { { "alloc_space", "bytes" } };
	struct lp_profile *p = lp_profile_new(1, types);
	lp_profile_meta(p)->source = "mem.bin";
	lp_profile_meta(p)->event = "memory";
	lp_profile_meta(p)->samples = 3;
	add(p, (uint32_t[]){ frame(p, LP_FK_TRACE, chunk, 2) }, 1, 3 << 20);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, chunk, 3) }, 1, 1 << 20);
	add(p, (uint32_t[]){ frame(p, LP_FK_INTERNAL, "INTERNAL", 0) }, 1, 1024);
	int rc;
	char *s = render(p, NULL, &rc), want[2048];
	CHECK_EQ(rc, 0);
	snprintf(want, sizeof(want),
		 "Source: mem.bin  Total alloc_space: 4.0 MiB  Events: 3  Dropped: 0\n"
		 "self: at the line itself, with the builtins and C code it calls; total: the "
		 "same, as an exact memory profile keeps each allocation's line and not its "
		 "callers (--sample records call stacks)\n"
		 "T: JIT traces that start at the line, charged there wherever they ran (luajit "
		 "-joff, or a sampled profile's stacks, place their lines)\n"
		 "\n"
		 "== %s: self 99.98%% (4.0 MiB)\n"
		 "  %%self       self  %%total      total   line   source\n"
		 "                                           1   local t = {}\n"
		 " 74.98%%    3.0 MiB  74.98%%    3.0 MiB      2 T for i = 1, 100 do\n"
		 " 24.99%%    1.0 MiB  24.99%%    1.0 MiB      3     t[i] = {}\n"
		 "                                           4   end\n"
		 "\n"
		 "0.02%% (1.0 KiB) at no Lua line: C code or the VM with no Lua caller\n",
		 chunk);
	CHECK_STR(s, want);
	free(s);
	lp_profile_free(p);
	free(chunk);
}

/* Files that cannot be shown list their lines alone, saying why; line 0 and lines past
 * the end of the file are named. */
static void test_unshown(void)
{
	char *chunk = source("short.lua", "x = 1\n");
	char missing[300], notfile[300];
	snprintf(missing, sizeof(missing), "@%s/missing.lua", dir);
	snprintf(notfile, sizeof(notfile), "@%s", dir);
	struct lp_profile *p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, missing, 7) }, 1, 5);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, "=stdin", 2) }, 1, 4);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, notfile, 1) }, 1, 3);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, chunk, 0) }, 1, 2);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, chunk, 9) }, 1, 1);
	int rc;
	char *s = render(p, NULL, &rc), want[4096];
	CHECK_EQ(rc, 0);
	snprintf(want, sizeof(want),
		 "Source: cpu.bin  Total samples: 15  Samples: 20  Dropped: 0\n"
		 "self: at the line itself, with the builtins and C code it calls; total: with "
		 "the Lua functions it calls too\n"
		 "\n"
		 "== %s: self 33.33%% (5)\n"
		 "(no source shown: %s: No such file or directory)\n"
		 "  %%self       self  %%total      total   line\n"
		 " 33.33%%          5  33.33%%          5      7\n"
		 "\n"
		 "== =stdin: self 26.67%% (4)\n"
		 "(no source shown: the chunk was not loaded from a file)\n"
		 "  %%self       self  %%total      total   line\n"
		 " 26.67%%          4  26.67%%          4      2\n"
		 "\n"
		 "== %s: self 20.00%% (3)\n"
		 "(no source shown: %s: not a regular file)\n"
		 "  %%self       self  %%total      total   line\n"
		 " 20.00%%          3  20.00%%          3      1\n"
		 "\n"
		 "== %s: self 20.00%% (3)\n"
		 "  %%self       self  %%total      total   line   source\n"
		 " 13.33%%          2  13.33%%          2      -   (line 0: the main chunk's "
		 "entry, before its first line)\n"
		 "  6.67%%          1   6.67%%          1      9   (past the end of the file)\n"
		 "(1 line past the end of %s: the file has changed since the profile?)\n"
		 "\n"
		 "1 source file not found here: --source-dir DIR looks for it under DIR\n",
		 missing, missing + 1, notfile, notfile + 1, chunk, chunk + 1);
	CHECK_STR(s, want);
	free(s);
	lp_profile_free(p);
	free(chunk);
}

/* Line 0: stripped bytecode when it is the chunk's only line; else the main chunk's entry
 * (a sample as luajit's lua_pcall or require calls it, before its first line), which is
 * not said to be stripped. */
static void test_line_zero(void)
{
	char *main = source("main.lua", "local x = 1\nreturn x\n");
	char *strip = source("strip.lua", "return 1\n");
	struct lp_profile *p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, main, 0) }, 1, 1);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, main, 2) }, 1, 4);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, strip, 0) }, 1, 3);
	int rc;
	char *s = render(p, NULL, &rc), want[4096];
	CHECK_EQ(rc, 0);
	snprintf(want, sizeof(want),
		 "Source: cpu.bin  Total samples: 8  Samples: 20  Dropped: 0\n"
		 "self: at the line itself, with the builtins and C code it calls; total: with "
		 "the Lua functions it calls too\n"
		 "\n"
		 "== %s: self 62.50%% (5)\n"
		 "  %%self       self  %%total      total   line   source\n"
		 " 12.50%%          1  12.50%%          1      -   (line 0: the main chunk's "
		 "entry, before its first line)\n"
		 "                                           1   local x = 1\n"
		 " 50.00%%          4  50.00%%          4      2   return x\n"
		 "\n"
		 "== %s: self 37.50%% (3)\n"
		 "  %%self       self  %%total      total   line   source\n"
		 " 37.50%%          3  37.50%%          3      -   (no line information: stripped "
		 "bytecode)\n",
		 main, strip);
	CHECK_STR(s, want);
	free(s);
	lp_profile_free(p);
	free(main);
	free(strip);
}

/* Files by self; -n keeps the first N and says how many more there are; a column with no
 * Lua line says so; a column out of range is refused. */
static void test_limit_and_errors(void)
{
	struct lp_profile *p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, "=a", 1) }, 1, 1);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, "=b", 1) }, 1, 3);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, "=c", 1) }, 1, 2);
	struct lp_render_opts o = { .limit = 2 };
	int rc;
	char *s = render(p, &o, &rc);
	CHECK_EQ(rc, 0);
	const char *b = strstr(s, "== =b:"), *c = strstr(s, "== =c:");
	CHECK(b && c && b < c);
	CHECK(!strstr(s, "== =a:"));
	CHECK(strstr(s, "\n... 1 more file omitted (-n to show more)\n") != NULL);
	free(s);
	o.value = 1;
	s = render(p, &o, &rc);
	CHECK_EQ(rc, -EINVAL);
	free(s);
	lp_profile_free(p);

	p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_C, "main", 0) }, 1, 4);
	s = render(p, NULL, &rc);
	CHECK_EQ(rc, 0);
	CHECK_STR(s, "Source: cpu.bin  Total samples: 4  Samples: 20  Dropped: 0\n"
		     "\n"
		     "No Lua line in the profile.\n"
		     "\n"
		     "100.00% (4) at no Lua line: C code or the VM with no Lua caller\n");
	free(s);
	lp_profile_free(p);
}

/* With a source directory, a chunk's path is looked for under it, whole and then without
 * its leading directories; the file read is named. One found nowhere says where it was
 * looked for. */
static void test_source_dir(void)
{
	char sub[300];
	snprintf(sub, sizeof(sub), "%s/src", dir);
	CHECK_EQ(mkdir(sub, 0700), 0);
	free(source("src/app.lua", "local a = 1\nlocal b = 2\n"));
	struct lp_profile *p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, "@/srv/app/src/app.lua", 2) }, 1, 3);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, "@/srv/app/src/gone.lua", 1) }, 1, 1);
	struct lp_render_opts o = { .source_dir = dir };
	int rc;
	char *s = render(p, &o, &rc), want[2048];
	CHECK_EQ(rc, 0);
	snprintf(want, sizeof(want),
		 "== @/srv/app/src/app.lua: self 75.00%% (3)\n"
		 "(source: %s/src/app.lua)\n"
		 "  %%self       self  %%total      total   line   source\n"
		 "                                           1   local a = 1\n"
		 " 75.00%%          3  75.00%%          3      2   local b = 2\n"
		 "\n"
		 "== @/srv/app/src/gone.lua: self 25.00%% (1)\n"
		 "(no source shown: /srv/app/src/gone.lua: No such file or directory (nor under "
		 "%s))\n", dir, dir);
	CHECK(s && strstr(s, want) != NULL);
	if (s && !strstr(s, want))
		fprintf(stderr, "%s\nwant:\n%s", s, want);
	free(s);
	/* Without it, the path alone. */
	s = render(p, NULL, &rc);
	CHECK(s && strstr(s, "(no source shown: /srv/app/src/app.lua: No such file or "
			     "directory)\n"));
	free(s);
	lp_profile_free(p);

	/* A file of the name too short for the lines profiled is another one: passed over. */
	free(source("init.lua", "local a = 1\n"));
	p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, "@/usr/share/lua/5.1/mod/init.lua", 3) }, 1, 1);
	s = render(p, &o, &rc);
	CHECK(s && strstr(s, "(no source shown: /usr/share/lua/5.1/mod/init.lua: No such file or "
			     "directory (nor under "));
	free(s);
	free(source("init.lua", "local a = 1\nlocal b = 2\nlocal c = 3\n"));
	s = render(p, &o, &rc);
	snprintf(want, sizeof(want), "(source: %s/init.lua)\n", dir);
	CHECK(s && strstr(s, want));
	CHECK(s && strstr(s, "      3   local c = 3\n"));
	free(s);
	lp_profile_free(p);

	/* The chunk's whole path under the directory, shorter than the lines profiled, and
	 * the path itself missing: that file changed since the profile, shown as such (as a
	 * short file at the path itself is), not "No such file or directory (nor under
	 * DIR)" for a file that is there. */
	snprintf(sub, sizeof(sub), "%s/opt", dir);
	CHECK_EQ(mkdir(sub, 0700), 0);
	snprintf(sub, sizeof(sub), "%s/opt/app", dir);
	CHECK_EQ(mkdir(sub, 0700), 0);
	free(source("opt/app/short.lua", "local a = 1\n"));
	p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, "@/opt/app/short.lua", 3) }, 1, 1);
	s = render(p, &o, &rc);
	CHECK_EQ(rc, 0);
	snprintf(want, sizeof(want), "(source: %s/opt/app/short.lua)\n", dir);
	CHECK(s && strstr(s, want));
	CHECK(s && strstr(s, "      3   (past the end of the file)\n"));
	CHECK(s && !strstr(s, "No such file"));
	if (s && !strstr(s, want))
		fprintf(stderr, "%s\nwant:\n%s", s, want);
	free(s);
	/* A shorter candidate that has the lines is still preferred to that one. */
	snprintf(sub, sizeof(sub), "%s/app", dir);
	CHECK_EQ(mkdir(sub, 0700), 0);
	free(source("app/short.lua", "local a = 1\nlocal b = 2\nlocal c = 3\n"));
	s = render(p, &o, &rc);
	snprintf(want, sizeof(want), "(source: %s/app/short.lua)\n", dir);
	CHECK(s && strstr(s, want));
	CHECK(s && strstr(s, "      3   local c = 3\n"));
	free(s);
	lp_profile_free(p);
}

/* Lines as LuaJIT counts them: \r alone ends one, \r\n and \n\r are one end each; a NUL
 * inside a line shows as '?'. A chunk "@" names no file. */
static void test_line_ends(void)
{
	static const char text[] = "one\rtwo\r\nthree\n\rfo\0ur\n\nsix";
	char path[300], chunk[310], row[64];
	snprintf(path, sizeof(path), "%s/ends.lua", dir);
	snprintf(chunk, sizeof(chunk), "@%s", path);
	FILE *f = fopen(path, "wb");
	CHECK(f != NULL);
	if (!f)
		return;
	fwrite(text, 1, sizeof(text) - 1, f);
	fclose(f);
	struct lp_profile *p = cpu_profile();
	for (uint32_t line = 1; line <= 6; line++)
		add(p, (uint32_t[]){ frame(p, LP_FK_LUA, chunk, line) }, 1, 1);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, "@", 1) }, 1, 1);
	int rc;
	char *s = render(p, NULL, &rc);
	CHECK_EQ(rc, 0);
	static const char *const want[] = { "1   one\n", "2   two\n", "3   three\n",
					    "4   fo?ur\n", "5\n", "6   six\n" };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		snprintf(row, sizeof(row), "      %s", want[i]);
		CHECK(s && strstr(s, row) != NULL);
	}
	CHECK(s && !strstr(s, "past the end"));
	CHECK(s && strstr(s, "== @: self 14.29% (1)\n(no source shown: the chunk names no "
			     "file)\n"));
	free(s);
	lp_profile_free(p);
}

/* Writes a file of `size` bytes into dir whose first line is "x = 1"; its path in buf. */
static void sized(char *buf, size_t len, const char *name, long size)
{
	snprintf(buf, len, "%s/%s", dir, name);
	FILE *f = fopen(buf, "w");
	CHECK(f != NULL);
	if (!f)
		return;
	fputs("x = 1\n", f);
	for (long n = 6; n < size; n++)
		putc(n + 1 == size ? '\n' : '-', f);
	fclose(f);
}

/* Files of up to 16 MiB are read, larger ones are refused; a FIFO is not even opened (a
 * writer blocked opening it stays blocked: nothing it writes is taken). */
static void test_sizes_and_fifo(void)
{
	char exact[300], big[300], fifo[300];
	sized(exact, sizeof(exact), "16m.lua", 16l << 20);
	sized(big, sizeof(big), "big.lua", (16l << 20) + 1);
	snprintf(fifo, sizeof(fifo), "%s/fifo.lua", dir);
	CHECK_EQ(mkfifo(fifo, 0600), 0);
	pid_t w = fork();
	if (w == 0) { /* the writer: blocks in open until a reader opens the FIFO */
		int fd = open(fifo, O_WRONLY);
		_exit(fd >= 0 && write(fd, "x\n", 2) == 2 ? 0 : 1);
	}
	char cexact[310], cbig[310], cfifo[310];
	snprintf(cexact, sizeof(cexact), "@%s", exact);
	snprintf(cbig, sizeof(cbig), "@%s", big);
	snprintf(cfifo, sizeof(cfifo), "@%s", fifo);
	struct lp_profile *p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, cexact, 1) }, 1, 3);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, cbig, 1) }, 1, 2);
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, cfifo, 1) }, 1, 1);
	usleep(100000); /* the writer in its open */
	int rc;
	char *s = render(p, NULL, &rc), want[700];
	CHECK_EQ(rc, 0);
	CHECK(s && strstr(s, " 50.00%          3  50.00%          3      1   x = 1\n"));
	snprintf(want, sizeof(want), "(no source shown: %s: larger than 16 MiB)\n", big);
	CHECK(s && strstr(s, want));
	snprintf(want, sizeof(want), "(no source shown: %s: not a regular file)\n", fifo);
	CHECK(s && strstr(s, want));
	int st;
	CHECK_EQ(waitpid(w, &st, WNOHANG), 0); /* still blocked in its open */
	/* Released (non-blocking: if annotate took its line, nobody writes any more). */
	int fd = open(fifo, O_RDONLY | O_NONBLOCK);
	usleep(100000);
	char buf[4];
	CHECK_EQ(fd >= 0 && read(fd, buf, sizeof(buf)) == 2, 1);
	if (fd >= 0)
		close(fd);
	kill(w, SIGKILL);
	waitpid(w, &st, 0);
	free(s);
	lp_profile_free(p);
}

/* A source file written after the profile started, with no function start to check, is
 * said to be newer (its lines may have moved: they were shown without a word); one older
 * than the profile, or a profile that does not say when it started (Tarantool's), gets no
 * note. */
static void test_changed_source(void)
{
	char *chunk = source("changed.lua", "local x = 1\nx = x + 1\n");
	char path[256], want[512];
	snprintf(path, sizeof(path), "%s/changed.lua", dir);
	snprintf(want, sizeof(want), "(%s is newer than the profile: if it changed since, the "
		 "lines shown may not be the ones profiled)\n", path);
	struct lp_profile *p = cpu_profile();
	add(p, (uint32_t[]){ frame(p, LP_FK_LUA, chunk, 2) }, 1, 20);
	struct lp_profile_meta *m = lp_profile_meta(p);
	uint64_t written = (uint64_t)time(NULL) * 1000000000u;
	int rc;
	m->start_unix_ns = written - 3600 * 1000000000ull; /* an hour before the file */
	char *s = render(p, NULL, &rc);
	CHECK_EQ(rc, 0);
	CHECK(s && strstr(s, want) != NULL);
	if (s && !strstr(s, want))
		printf("    got: %s\n", s);
	free(s);
	m->start_unix_ns = written + 3600 * 1000000000ull; /* an hour after */
	s = render(p, NULL, &rc);
	CHECK(s && !strstr(s, "newer than"));
	free(s);
	m->start_unix_ns = 0; /* not known */
	s = render(p, NULL, &rc);
	CHECK(s && !strstr(s, "newer than") && strstr(s, "x = x + 1"));
	free(s);
	lp_profile_free(p);
	free(chunk);
}

/* Renders a profile of one sample in function f of chunk (first line fline, at line),
 * started an hour before now; whether the output holds want (NULL: no note at all). */
static int note_of(const char *chunk, uint32_t fline, uint32_t line, uint64_t start_ns,
		   const char *want)
{
	struct lp_profile *p = cpu_profile();
	struct lp_frame fr = { .kind = LP_FK_LUA, .name = chunk, .line = line, .fline = fline };
	uint32_t id = 0;
	CHECK_EQ(lp_profile_frame_id(p, &fr, &id), 0);
	add(p, &id, 1, 20);
	lp_profile_meta(p)->start_unix_ns = start_ns;
	int rc;
	char *s = render(p, NULL, &rc);
	CHECK_EQ(rc, 0);
	int ok = s && (want ? strstr(s, want) != NULL : !strstr(s, "the lines shown"));
	if (!ok)
		printf("    got: %s\n", s ? s : "(null)");
	free(s);
	lp_profile_free(p);
	return ok;
}

/* What the profile keeps of a source, its functions' first lines, tells whether a file is
 * the one profiled: a file newer than the profile whose profiled function still starts
 * where the profile says (a fresh checkout) gets no note (it was said to be modified); one
 * where the line holds no `function`, or that is shorter, is said not to match, whenever
 * it was written and whether or not the profile says when it started (it got no note, or
 * a maybe). A `function` on the line before (the parameters' "(" on a line of their own)
 * matches; a word containing it does not. A chunk not named .lua (Fennel's, MoonScript's)
 * is judged by its time alone. */
static void test_source_matches(void)
{
	char *chunk = source("fn.lua", "local x = 1\nlocal function f(a)\n  return a + 1\n"
					"end\nlocal g = function\n(b)\n  return b\nend\n"
					"local myfunction = 3\n");
	char *other = source("fn.fnl", "(local x 1)\n(fn f [a]\n  (+ a 1))\n");
	char path[256], want[512];
	snprintf(path, sizeof(path), "%s/fn.lua", dir);
	uint64_t before = ((uint64_t)time(NULL) - 3600) * 1000000000u;
	CHECK(note_of(chunk, 2, 3, before, NULL));
	CHECK(note_of(chunk, 6, 7, before, NULL));
	snprintf(want, sizeof(want), "(%s does not match the profile: a function profiled "
		 "starts at line 4, which has no 'function': the lines shown are not the ones "
		 "profiled)\n", path);
	CHECK(note_of(chunk, 4, 4, before, want));
	CHECK(note_of(chunk, 4, 4, 0, want));
	snprintf(want, sizeof(want), "(%s does not match the profile: a function profiled "
		 "starts at line 9, which has no 'function'", path);
	CHECK(note_of(chunk, 9, 9, 0, want));
	snprintf(want, sizeof(want), "(%s does not match the profile: a function profiled "
		 "starts at line 12, past its end: the lines shown are not the ones profiled)\n",
		 path);
	CHECK(note_of(chunk, 12, 12, 0, want));
	CHECK(note_of(other, 2, 3, 0, NULL));
	CHECK(note_of(other, 2, 3, before, "is newer than the profile"));
	free(chunk);
	free(other);
}

/* An in-use view of a memory profile whose sampled allocations were all freed says so; it
 * said "No Lua line in the profile." (a chunk's lines were in it, holding nothing). */
static void test_nothing_held(void)
{
	static const struct lp_value_type types[] = {
		{ "alloc_space", "bytes" }, { "inuse_space", "bytes" }
	};
	struct lp_profile *p = lp_profile_new(2, types);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "mem.bin";
	m->event = "memory (sampled)";
	m->samples = 2;
	uint32_t a = frame(p, LP_FK_LUA, "=a", 3);
	CHECK_EQ(lp_profile_add(p, &a, 1, (int64_t[]){ 4096, 0 }), 0);
	struct lp_render_opts o = { .value = 1 };
	int rc;
	char *s = render(p, &o, &rc);
	CHECK_EQ(rc, 0);
	CHECK_STR(s, "Source: mem.bin  Total inuse_space: 0 B  Samples: 2  Dropped: 0\n"
		     "\n"
		     "Nothing still held: every sampled allocation was freed before the profile "
		     "stopped.\n");
	free(s);
	lp_profile_free(p);
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_lines_and_context);
	RUN(test_trace_events);
	RUN(test_context);
	RUN(test_unshown);
	RUN(test_line_zero);
	RUN(test_limit_and_errors);
	RUN(test_source_dir);
	RUN(test_line_ends);
	RUN(test_sizes_and_fifo);
	RUN(test_changed_source);
	RUN(test_source_matches);
	RUN(test_nothing_held);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", dir);
	return UNIT_RESULT();
}
