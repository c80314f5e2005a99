/*
** Tests for the top renderer: exact self/total figures, ordering, granularity and limits.
*/
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "report/render.h"
#include "unit.h"

/* Renders p into a malloc'd string; NULL if the renderer failed (err then holds why). */
static char *render(const struct lp_profile *p, const struct lp_render_opts *o, char *err,
		    size_t errlen)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	int rc = lp_render_top(p, o, out, err, errlen);
	fclose(out);
	if (rc) {
		free(buf);
		return NULL;
	}
	return buf;
}

static uint32_t frame(struct lp_profile *p, enum lp_frame_kind kind, const char *name,
		      uint32_t line, uint32_t fline)
{
	struct lp_frame f = { .kind = kind, .name = name, .line = line, .fline = fline };
	uint32_t id = UINT32_MAX;
	CHECK_EQ(lp_profile_frame_id(p, &f, &id), 0);
	return id;
}

static void add(struct lp_profile *p, const uint32_t *fr, size_t depth, int64_t v)
{
	CHECK_EQ(lp_profile_add(p, fr, depth, &v), 0);
}

/*
** main.lua:10 calls fib (first line 1) which recurses through its lines 3 and 5:
**   main fib:3 fib:5 fib:3   10   (recursion: fib counts once in total)
**   main fib:3                5
**   main fib:5 lj_str_new     3
**   main                      2
*/
static struct lp_profile *recursive_profile(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "fib.bin";
	m->event = "cpu";
	m->samples = 21;
	m->dropped = 1;
	m->truncated = 1;
	m->vmstate[0] = 15; /* INTERP */
	m->vmstate[4] = 5;  /* GC */
	uint32_t main10 = frame(p, LP_FK_LUA, "@main.lua", 10, 1);
	uint32_t fib3 = frame(p, LP_FK_LUA, "@fib.lua", 3, 1);
	uint32_t fib5 = frame(p, LP_FK_LUA, "@fib.lua", 5, 1);
	uint32_t str = frame(p, LP_FK_C, "lj_str_new", 0, 0);
	add(p, (uint32_t[]){ main10, fib3, fib5, fib3 }, 4, 10);
	add(p, (uint32_t[]){ main10, fib3 }, 2, 5);
	add(p, (uint32_t[]){ main10, fib5, str }, 3, 3);
	add(p, (uint32_t[]){ main10 }, 1, 2);
	return p;
}

#define RECURSIVE_HEADER                                                              \
	"Source: fib.bin  Total samples: 20  Samples: 21  Dropped: 1  (truncated)\n"  \
	"VM states: INTERP 75.0% GC 25.0%\n"                                          \
	"\n"

static void test_by_function(void)
{
	struct lp_profile *p = recursive_profile();
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	CHECK_STR(s, RECURSIVE_HEADER
		  "  %self       self  %total      total  kind     frame (by function)\n"
		  " 75.00%         15  90.00%         18  Lua      function <@fib.lua:1>\n"
		  " 15.00%          3  15.00%          3  C        lj_str_new\n"
		  " 10.00%          2 100.00%         20  Lua      function <@main.lua:1>\n");
	free(s);
	lp_profile_free(p);
}

/* A prototype the symbol table does not know (nosym: a stand-in name, no first line) is
 * not a main chunk: it read "main chunk <[unknown function 0x999000]>". */
static void test_unknown_function(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	lp_profile_meta(p)->event = "cpu";
	uint32_t m = frame(p, LP_FK_LUA, "@main.lua", 3, 0);
	struct lp_frame uf = { .kind = LP_FK_LUA, .name = "[unknown function 0x999000]",
			       .line = 7, .nosym = 1 };
	uint32_t u = UINT32_MAX;
	CHECK_EQ(lp_profile_frame_id(p, &uf, &u), 0);
	uint32_t st[] = { m, u };
	add(p, st, 2, 4);
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	CHECK(s && strstr(s, "Lua      [unknown function 0x999000]\n") != NULL);
	CHECK(s && strstr(s, "Lua      main chunk <@main.lua>\n") != NULL);
	free(s);
	lp_profile_free(p);
}

/* A trace sampled at two of its lines and as the caller of C code (the C frame named after
 * it, at its start): one row by function, three by line. */
static void test_trace_by_function(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_frame t = { .kind = LP_FK_TRACE, .name = "@t.lua", .line = 6, .fline = 3,
			      .traceno = 1 };
	uint32_t main = frame(p, LP_FK_LUA, "@t.lua", 13, 0), t6, t7, t5;
	CHECK_EQ(lp_profile_frame_id(p, &t, &t6), 0);
	t.line = 7;
	CHECK_EQ(lp_profile_frame_id(p, &t, &t7), 0);
	t.line = 5;
	CHECK_EQ(lp_profile_frame_id(p, &t, &t5), 0);
	uint32_t fmt = frame(p, LP_FK_C, "lj_strfmt_pushf", 0, 0);
	add(p, (uint32_t[]){ main, t6 }, 2, 4);
	add(p, (uint32_t[]){ main, t7 }, 2, 2);
	add(p, (uint32_t[]){ main, t5, fmt }, 3, 4);
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	int ok = s && strstr(s, " 60.00%          6 100.00%         10  trace    TRACE [1] @t.lua:3\n") &&
		 !strstr(s, "TRACE [1] @t.lua:6");
	if (!ok)
		printf("    got: %s\n", s ? s : err);
	CHECK(ok);
	free(s);
	lp_profile_free(p);
}

/* The same trace when the frames know where it starts (tline: the stream named its start):
 * its row by function is at that line, as the flame graphs name the trace under C code,
 * not at its function's first line (a label no search of the graph found). */
static void test_trace_by_function_start(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_frame t = { .kind = LP_FK_TRACE, .name = "@t.lua", .line = 6, .fline = 3,
			      .traceno = 1, .tline = 5 };
	uint32_t main = frame(p, LP_FK_LUA, "@t.lua", 13, 0), t6, t5;
	CHECK_EQ(lp_profile_frame_id(p, &t, &t6), 0);
	t.line = 5;
	CHECK_EQ(lp_profile_frame_id(p, &t, &t5), 0);
	uint32_t fmt = frame(p, LP_FK_C, "lj_strfmt_pushf", 0, 0);
	add(p, (uint32_t[]){ main, t6 }, 2, 4);
	add(p, (uint32_t[]){ main, t5, fmt }, 3, 4);
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	int ok = s && strstr(s, " 50.00%          4 100.00%          8  trace    TRACE [1] @t.lua:5\n") &&
		 !strstr(s, "TRACE [1] @t.lua:3") && !strstr(s, "TRACE [1] @t.lua:6");
	if (!ok)
		printf("    got: %s\n", s ? s : err);
	CHECK(ok);
	free(s);
	lp_profile_free(p);
}

/* Code of an object without a symbol: one row per object by function, per address by line. */
static void test_unnamed_code(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	const char *lib = "/usr/lib/x86_64-linux-gnu/libm.so.6";
	struct lp_frame fa = { .kind = LP_FK_C, .name = "libm.so.6+0x705a9", .file = lib,
			       .addr = 0x705a9, .nosym = 1 };
	struct lp_frame fb = { .kind = LP_FK_C, .name = "libm.so.6+0x70827", .file = lib,
			       .addr = 0x70827, .nosym = 1 };
	struct lp_frame fs = { .kind = LP_FK_C, .name = "sin", .file = lib, .addr = 0x1000 };
	/* A name that only looks like it: another object's. */
	struct lp_frame fo = { .kind = LP_FK_C, .name = "libm.so.6+0x1", .file = "/lib/libz.so.1",
			       .addr = 0x1 };
	/* A function the agent named after its start (unwind table): a function. */
	struct lp_frame fn = { .kind = LP_FK_C, .name = "libm.so.6+0x70ad0", .file = lib,
			       .addr = 0x70ad0 };
	uint32_t a, b, sn, o, named, top = frame(p, LP_FK_LUA, "@m.lua", 3, 1);
	CHECK_EQ(lp_profile_frame_id(p, &fn, &named), 0);
	add(p, (uint32_t[]){ top, named }, 2, 5);
	CHECK_EQ(lp_profile_frame_id(p, &fa, &a), 0);
	CHECK_EQ(lp_profile_frame_id(p, &fb, &b), 0);
	CHECK_EQ(lp_profile_frame_id(p, &fs, &sn), 0);
	CHECK_EQ(lp_profile_frame_id(p, &fo, &o), 0);
	add(p, (uint32_t[]){ top, a }, 2, 4);
	add(p, (uint32_t[]){ top, b }, 2, 3);
	add(p, (uint32_t[]){ top, sn }, 2, 2);
	add(p, (uint32_t[]){ top, o }, 2, 1);
	struct lp_render_opts lines = { .lines = 1 };
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	CHECK(s && strstr(s, " 46.67%          7  46.67%          7  C        libm.so.6 (no symbol)\n") &&
	      strstr(s, "C        sin\n") && strstr(s, "C        libm.so.6+0x1\n") &&
	      strstr(s, " 33.33%          5  33.33%          5  C        libm.so.6+0x70ad0\n") &&
	      !strstr(s, "libm.so.6+0x705a9"));
	free(s);
	s = render(p, &lines, err, sizeof(err));
	CHECK(s && strstr(s, "C        libm.so.6+0x705a9\n") && strstr(s, "C        libm.so.6+0x70827\n") &&
	      !strstr(s, "(no symbol)"));
	free(s);
	lp_profile_free(p);
}

/* Two functions of one name in two objects (clock_gettime in the vDSO and in libc): each
 * row says its object, or the list showed two rows that looked the same. A name alone
 * stays as it is. */
static void test_same_name(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_frame fv = { .kind = LP_FK_C, .name = "clock_gettime", .file = "[vdso]",
			       .addr = 0x10 };
	struct lp_frame fl = { .kind = LP_FK_C, .name = "clock_gettime",
			       .file = "/usr/lib/x86_64-linux-gnu/libc.so.6", .addr = 0x20 };
	struct lp_frame fs = { .kind = LP_FK_C, .name = "lj_str_new", .file = "/usr/bin/luajit",
			       .addr = 0x30 };
	uint32_t v, l, one, top = frame(p, LP_FK_LUA, "@m.lua", 3, 1);
	CHECK_EQ(lp_profile_frame_id(p, &fv, &v), 0);
	CHECK_EQ(lp_profile_frame_id(p, &fl, &l), 0);
	CHECK_EQ(lp_profile_frame_id(p, &fs, &one), 0);
	add(p, (uint32_t[]){ top, l, v }, 3, 9);
	add(p, (uint32_t[]){ top, l }, 2, 1);
	add(p, (uint32_t[]){ top, one }, 2, 1);
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	CHECK(s && strstr(s, " 81.82%          9  81.82%          9  C        clock_gettime ([vdso])\n") &&
	      strstr(s, "C        lj_str_new\n") &&
	      strstr(s, "  9.09%          1  90.91%         10  C        clock_gettime (libc.so.6)\n") &&
	      strstr(s, "Lua      function <@m.lua:1>\n"));
	free(s);
	lp_profile_free(p);
}

static void test_by_line(void)
{
	struct lp_profile *p = recursive_profile();
	struct lp_render_opts o = { .lines = 1 };
	char err[128] = "";
	char *s = render(p, &o, err, sizeof(err));
	CHECK_STR(s, RECURSIVE_HEADER
		  "  %self       self  %total      total  kind     frame (by line)\n"
		  " 75.00%         15  75.00%         15  Lua      @fib.lua:3\n"
		  " 15.00%          3  15.00%          3  C        lj_str_new\n"
		  " 10.00%          2 100.00%         20  Lua      @main.lua:10\n"
		  "  0.00%          0  65.00%         13  Lua      @fib.lua:5\n");
	free(s);
	lp_profile_free(p);
}

/*
** By line, one row per chunk and line, whichever function runs there: a comparator
** defined on the line that calls table.sort (first line 7, current line 7) under its
** caller (first line 1, at line 7). They were two rows with one label.
**   main:7 cmp:7          6
**   main:7 sort cmp:7     4
**   main:7                2
*/
static void test_by_line_merged(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	lp_profile_meta(p)->source = "s.bin";
	uint32_t main7 = frame(p, LP_FK_LUA, "@s.lua", 7, 1);
	uint32_t cmp7 = frame(p, LP_FK_LUA, "@s.lua", 7, 7);
	uint32_t sort = frame(p, LP_FK_C, "lj_cf_table_sort", 0, 0);
	add(p, (uint32_t[]){ main7, cmp7 }, 2, 6);
	add(p, (uint32_t[]){ main7, sort, cmp7 }, 3, 4);
	add(p, (uint32_t[]){ main7 }, 1, 2);
	struct lp_render_opts o = { .lines = 1 };
	char err[128] = "";
	char *s = render(p, &o, err, sizeof(err));
	CHECK_STR(s, "Source: s.bin  Total samples: 12  Events: 0  Dropped: 0\n"
		  "\n"
		  "  %self       self  %total      total  kind     frame (by line)\n"
		  "100.00%         12 100.00%         12  Lua      @s.lua:7\n"
		  "  0.00%          0  33.33%          4  C        lj_cf_table_sort\n");
	free(s);
	/* By function they stay two. */
	s = render(p, NULL, err, sizeof(err));
	CHECK(strstr(s, "function <@s.lua:1>\n") && strstr(s, "function <@s.lua:7>\n"));
	free(s);
	lp_profile_free(p);
}

static void test_limit(void)
{
	struct lp_profile *p = recursive_profile();
	struct lp_render_opts o = { .limit = 2 };
	char err[128] = "";
	char *s = render(p, &o, err, sizeof(err));
	CHECK_STR(s, RECURSIVE_HEADER
		  "  %self       self  %total      total  kind     frame (by function)\n"
		  " 75.00%         15  90.00%         18  Lua      function <@fib.lua:1>\n"
		  " 15.00%          3  15.00%          3  C        lj_str_new\n"
		  "... 1 more frame omitted (-n to show more)\n");
	free(s);
	o.lines = 1;
	s = render(p, &o, err, sizeof(err));
	CHECK(s && strstr(s, "lj_str_new\n... 2 more frames omitted (-n to show more)\n"));
	CHECK(s && !strstr(s, "@main.lua"));
	free(s);
	lp_profile_free(p);
}

/* 25 leaf frames with distinct self values and a tie broken by label. */
static void test_default_limit(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	char name[32];
	for (int i = 0; i < 25; i++) {
		snprintf(name, sizeof(name), "f%02d", i);
		uint32_t id = frame(p, LP_FK_C, name, 0, 0);
		add(p, &id, 1, i < 2 ? 100 : 50 - i);
	}
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	CHECK(s != NULL);
	if (s) {
		char *f00 = strstr(s, "f00"), *f01 = strstr(s, "f01"), *f02 = strstr(s, "f02");
		CHECK(f00 && f01 && f02 && f00 < f01 && f01 < f02);
		CHECK(strstr(s, "f19\n") != NULL);
		CHECK(strstr(s, "f20") == NULL);
		CHECK(strstr(s, "\n... 5 more frames omitted (-n to show more)\n") != NULL);
		int rows = 0;
		for (char *c = s; (c = strstr(c, "  C  ")); c++)
			rows++;
		CHECK_EQ(rows, 20);
	}
	free(s);
	lp_profile_free(p);
}

static void test_empty(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	lp_profile_meta(p)->event = "cpu";
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	CHECK_STR(s, "Source: -  Total samples: 0  Samples: 0  Dropped: 0\n"
		     "No samples.\n");
	free(s);
	/* a wall-clock profile says so: its samples include time off the CPU */
	lp_profile_meta(p)->wall_clock = 1;
	s = render(p, NULL, err, sizeof(err));
	CHECK_STR(s, "Source: -  Total samples: 0  Samples: 0  Dropped: 0  Clock: wall\n"
		     "No samples.\n");
	free(s);
	lp_profile_free(p);
}

/* A VM state with samples never reads 0.0% (taken for none), nor one short of all 100.0%:
 * one GC sample in 3001 was "GC 0.0%" beside "INTERP 100.0%". */
static void test_rare_vmstate(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "rare.bin";
	m->event = "cpu";
	m->samples = 3001;
	m->vmstate[0] = 3000; /* INTERP */
	m->vmstate[4] = 1;    /* GC */
	uint32_t a = frame(p, LP_FK_LUA, "@a.lua", 4, 2);
	add(p, &a, 1, 3001);
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	const char *want = "Source: rare.bin  Total samples: 3001  Samples: 3001  Dropped: 0\n"
			   "VM states: INTERP >99.9% GC <0.1%\n\n";
	int ok = s && !strncmp(s, want, strlen(want));
	if (!ok)
		printf("    got: %s\n", s ? s : err);
	CHECK(ok);
	free(s);
	lp_profile_free(p);
}

/* Memory profile: second value column in bytes, no VM state line, human-readable sizes. */
static void test_bytes(void)
{
	static const struct lp_value_type types[] = {
		{ "alloc_objects", "count" }, { "alloc_space", "bytes" }
	};
	struct lp_profile *p = lp_profile_new(2, types);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "mem.bin";
	m->event = "memory";
	m->samples = 7;
	m->vmstate[0] = 3; /* ignored outside CPU profiles */
	uint32_t a = frame(p, LP_FK_LUA, "@a.lua", 4, 2);
	uint32_t in = frame(p, LP_FK_INTERNAL, "INTERNAL", 0, 0);
	CHECK_EQ(lp_profile_add(p, &a, 1, (int64_t[]){ 2, 1536 }), 0);
	CHECK_EQ(lp_profile_add(p, (uint32_t[]){ a, in }, 2, (int64_t[]){ 5, 3 << 20 }), 0);
	struct lp_render_opts o = { .value = 1 };
	char err[128] = "";
	char *s = render(p, &o, err, sizeof(err));
	CHECK_STR(s, "Source: mem.bin  Total alloc_space: 3.0 MiB  Events: 7  Dropped: 0\n"
		     "\n"
		     "  %self       self  %total      total  kind     frame (by function)\n"
		     " 99.95%    3.0 MiB  99.95%    3.0 MiB  internal INTERNAL\n"
		     "  0.05%    1.5 KiB 100.00%    3.0 MiB  Lua      function <@a.lua:2>\n");
	free(s);
	o.value = 2;
	CHECK(render(p, &o, err, sizeof(err)) == NULL);
	CHECK_STR(err, "value column 2 out of range (the profile has 2)");
	lp_profile_free(p);
}

/* A sampled memory profile allocates in C leaves: the Lua frames above them have no self.
 * Rows of equal self are ranked by total, so the caller of most of the bytes (@z.lua, 90%)
 * comes before a caller of few (@a.lua, 10%); they were in alphabetical order. */
static void test_equal_self_by_total(void)
{
	static const struct lp_value_type types[] = { { "alloc_space", "bytes" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "mem.bin";
	m->event = "memory";
	m->samples = 2;
	uint32_t z = frame(p, LP_FK_LUA, "@z.lua", 3, 1);
	uint32_t a = frame(p, LP_FK_LUA, "@a.lua", 3, 1);
	uint32_t ud = frame(p, LP_FK_C, "lua_newuserdata", 0, 0);
	uint32_t ts = frame(p, LP_FK_C, "lj_tab_new", 0, 0);
	add(p, (uint32_t[]){ z, ud }, 2, 900);
	add(p, (uint32_t[]){ a, ts }, 2, 100);
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	CHECK_STR(s, "Source: mem.bin  Total alloc_space: 1000 B  Events: 2  Dropped: 0\n"
		     "\n"
		     "  %self       self  %total      total  kind     frame (by function)\n"
		     " 90.00%      900 B  90.00%      900 B  C        lua_newuserdata\n"
		     " 10.00%      100 B  10.00%      100 B  C        lj_tab_new\n"
		     "  0.00%        0 B  90.00%      900 B  Lua      function <@z.lua:1>\n"
		     "  0.00%        0 B  10.00%      100 B  Lua      function <@a.lua:1>\n");
	free(s);
	lp_profile_free(p);
}

/* A memory profile whose sampled allocations were all freed before it stopped: in-use
 * values are zero, which the list says; it said "No samples." under "Samples: 3". */
static void test_nothing_held(void)
{
	static const struct lp_value_type types[] = {
		{ "alloc_space", "bytes" }, { "inuse_space", "bytes" }
	};
	struct lp_profile *p = lp_profile_new(2, types);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "mem.bin";
	m->event = "memory (sampled)";
	m->samples = 3;
	uint32_t a = frame(p, LP_FK_LUA, "@a.lua", 4, 2);
	CHECK_EQ(lp_profile_add(p, &a, 1, (int64_t[]){ 3 << 20, 0 }), 0);
	struct lp_render_opts o = { .value = 1 };
	char err[128] = "";
	char *s = render(p, &o, err, sizeof(err));
	CHECK_STR(s, "Source: mem.bin  Total inuse_space: 0 B  Samples: 3  Dropped: 0\n"
		     "Nothing still held: every sampled allocation was freed before the profile "
		     "stopped.\n");
	free(s);
	m->event = "memory";
	s = render(p, &o, err, sizeof(err));
	CHECK_STR(s, "Source: mem.bin  Total inuse_space: 0 B  Events: 3  Dropped: 0\n"
		     "Nothing still held: every block allocated in the profile was freed before "
		     "it stopped.\n");
	free(s);
	lp_profile_free(p);
}

/* An exact memory profile: each event is one frame, the allocating line of its function.
 * By function, leak (defined at line 2, allocating at line 3) is one row named as a
 * function: "@leak.lua:2" read as the line allocating, which the memprof report names
 * @leak.lua:3. By line, the rows are the allocating lines. */
static void test_memory_function_names(void)
{
	static const struct lp_value_type types[] = { { "alloc_space", "bytes" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->source = "leak.bin";
	m->event = "memory";
	m->samples = 3;
	uint32_t l3 = frame(p, LP_FK_LUA, "@leak.lua", 3, 2);
	uint32_t l4 = frame(p, LP_FK_LUA, "@leak.lua", 4, 2);
	uint32_t main1 = frame(p, LP_FK_LUA, "@leak.lua", 1, 0);
	add(p, &l3, 1, 700);
	add(p, &l4, 1, 200);
	add(p, &main1, 1, 100);
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	CHECK_STR(s, "Source: leak.bin  Total alloc_space: 1000 B  Events: 3  Dropped: 0\n"
		     "\n"
		     "  %self       self  %total      total  kind     frame (by function)\n"
		     " 90.00%      900 B  90.00%      900 B  Lua      function <@leak.lua:2>\n"
		     " 10.00%      100 B  10.00%      100 B  Lua      main chunk <@leak.lua>\n");
	free(s);
	struct lp_render_opts o = { .lines = 1 };
	s = render(p, &o, err, sizeof(err));
	CHECK_STR(s, "Source: leak.bin  Total alloc_space: 1000 B  Events: 3  Dropped: 0\n"
		     "\n"
		     "  %self       self  %total      total  kind     frame (by line)\n"
		     " 70.00%      700 B  70.00%      700 B  Lua      @leak.lua:3\n"
		     " 20.00%      200 B  20.00%      200 B  Lua      @leak.lua:4\n"
		     " 10.00%      100 B  10.00%      100 B  Lua      @leak.lua:1\n");
	free(s);
	lp_profile_free(p);
}

/* One sample in 100,000: its row read "0.00%", taken for a frame without any; the other
 * frame's "100.00%" of self, for all of them. The VM-state line's rule, at two decimals. */
static void test_rare_share(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	lp_profile_meta(p)->source = "r.bin";
	uint32_t hot = frame(p, LP_FK_C, "hot", 0, 0);
	uint32_t rare = frame(p, LP_FK_C, "rare", 0, 0);
	add(p, &hot, 1, 99999);
	add(p, &rare, 1, 1);
	char err[128] = "";
	char *s = render(p, NULL, err, sizeof(err));
	CHECK_STR(s, "Source: r.bin  Total samples: 100000  Events: 0  Dropped: 0\n"
		     "\n"
		     "  %self       self  %total      total  kind     frame (by function)\n"
		     ">99.99%      99999 >99.99%      99999  C        hot\n"
		     " <0.01%          1  <0.01%          1  C        rare\n");
	free(s);
	lp_profile_free(p);
}

int main(void)
{
	RUN(test_by_function);
	RUN(test_unknown_function);
	RUN(test_trace_by_function);
	RUN(test_trace_by_function_start);
	RUN(test_unnamed_code);
	RUN(test_same_name);
	RUN(test_by_line);
	RUN(test_by_line_merged);
	RUN(test_limit);
	RUN(test_default_limit);
	RUN(test_empty);
	RUN(test_bytes);
	RUN(test_rare_vmstate);
	RUN(test_equal_self_by_total);
	RUN(test_nothing_held);
	RUN(test_memory_function_names);
	RUN(test_rare_share);
	return UNIT_RESULT();
}
