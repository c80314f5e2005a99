/*
** Tests for the collapsed (folded) renderer: the text flamegraph.pl, inferno and Pyroscope
** read, line by line, exactly.
*/
#include <stdlib.h>
#include <string.h>

#include "report/render.h"
#include "unit.h"

/* Renders column v of p into a malloc'd string; NULL if the renderer failed. */
static char *render(const struct lp_profile *p, unsigned v)
{
	char *buf = NULL, err[128] = "";
	size_t len = 0;
	struct lp_render_opts o = { .value = v };
	FILE *out = open_memstream(&buf, &len);
	int rc = lp_render_collapsed(p, &o, out, err, sizeof(err));
	fclose(out);
	CHECK_EQ(rc, 0);
	if (rc) {
		printf("    %s\n", err);
		free(buf);
		return NULL;
	}
	return buf;
}

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

static struct lp_profile *new_profile(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	return lp_profile_new(1, types);
}

/* Whether s is well-formed UTF-8 without C0 controls other than the newlines ending lines
 * (what flamegraph.pl's "use open qw(:std :utf8)" and inferno's read_to_string need). */
static int clean_text(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	for (size_t i = 0; u[i];) {
		unsigned c = u[i], n = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3
			 : (c & 0xf8) == 0xf0 ? 4 : 0;
		if (!n || (c < 0x20 && c != '\n') || c == 0x7f)
			return 0;
		for (unsigned k = 1; k < n; k++)
			if ((u[i + k] & 0xc0) != 0x80)
				return 0;
		i += n;
	}
	return 1;
}

/* Separators: ';' in a label would split the frame, a newline the line. */
static void test_separators(void)
{
	struct lp_profile *p = new_profile();
	uint32_t root = frame(p, LP_FK_C, "main", 0);
	uint32_t a = frame(p, LP_FK_LUA, "=a;b c\nd", 2);
	uint32_t b = frame(p, LP_FK_LUA, "@x\r.lua", 3);
	add(p, (uint32_t[]){ root, a }, 2, 3);
	add(p, (uint32_t[]){ root, b }, 2, 4);
	char *s = render(p, 0);
	CHECK_STR(s, "main;=a:b c d:2 3\nmain;@x .lua:3 4\n");
	free(s);
	lp_profile_free(p);
}

/*
** Chunk names are any bytes: a string chunk whose first line is not ASCII is cut by LuaJIT
** after 45 bytes, inside a character; a chunk may be named with control characters. The
** folded text is UTF-8 (ill-formed bytes as U+FFFD, as pprof and speedscope write them)
** without control characters (as spaces): flamegraph.pl died on the first and wrote the
** second into an SVG no XML parser reads; inferno refused the whole file.
*/
static void test_not_utf8_nor_controls(void)
{
	struct lp_profile *p = new_profile();
	uint32_t root = frame(p, LP_FK_C, "main", 0);
	/* "[string "--- Расчёт..."]": the cut left the first byte of a 'т' (d1 82). */
	uint32_t cut = frame(p, LP_FK_LUA, "[string \"--- \xd0\xa0\xd0\xb0\xd1...\"]", 2);
	uint32_t bad = frame(p, LP_FK_LUA, "=bad\xff\xfeutf8", 4);
	uint32_t ctl = frame(p, LP_FK_LUA, "=ctl\x01\x1b[31mred\x7f\tx", 5);
	uint32_t ok = frame(p, LP_FK_LUA, "@\xd0\xbc\xd0\xbe\xd0\xb4.lua", 6); /* "мод.lua" */
	add(p, (uint32_t[]){ root, cut }, 2, 1);
	add(p, (uint32_t[]){ root, bad }, 2, 2);
	add(p, (uint32_t[]){ root, ctl }, 2, 3);
	add(p, (uint32_t[]){ root, ok }, 2, 4);
	char *s = render(p, 0);
	CHECK(s && clean_text(s));
	CHECK_STR(s, "main;=bad\xef\xbf\xbd\xef\xbf\xbdutf8:4 2\n"
		     "main;=ctl  [31mred  x:5 3\n"
		     "main;@\xd0\xbc\xd0\xbe\xd0\xb4.lua:6 4\n"
		     "main;[string \"--- \xd0\xa0\xd0\xb0\xef\xbf\xbd...\"]:2 1\n");
	free(s);
	lp_profile_free(p);
}

/* A label is written whole, however long (chunk names may be 4 KiB): it was cut at 1023
 * bytes, which took the line with it and merged two lines of the chunk into one frame. */
static void test_long_label(void)
{
	char chunk[3001];
	chunk[0] = '@';
	for (size_t i = 1; i < sizeof(chunk) - 1; i++)
		chunk[i] = "dir/"[i % 4];
	chunk[sizeof(chunk) - 1] = '\0';
	struct lp_profile *p = new_profile();
	uint32_t l5 = frame(p, LP_FK_LUA, chunk, 5), l6 = frame(p, LP_FK_LUA, chunk, 6);
	add(p, (uint32_t[]){ l5 }, 1, 32);
	add(p, (uint32_t[]){ l6 }, 1, 64);
	char *s = render(p, 0), want[8192];
	snprintf(want, sizeof(want), "%s:5 32\n%s:6 64\n", chunk, chunk);
	CHECK_STR(s, want);
	free(s);
	lp_profile_free(p);
}

/* A C++ host's C frames show demangled (a clone suffix as GCC's tools show it); a name that
 * is not a valid mangling, and a C name, as they are; one frame per mangled name. */
static void test_cxx_demangled(void)
{
	struct lp_profile *p = new_profile();
	uint32_t root = frame(p, LP_FK_C, "main", 0);
	uint32_t m = frame(p, LP_FK_C, "_ZNK9LuaActionclEP11DNSQuestion", 0);
	CHECK_EQ(frame(p, LP_FK_C, "_ZNK9LuaActionclEP11DNSQuestion", 0), m);
	uint32_t cold = frame(p, LP_FK_C, "_Z3fooi.cold", 0);
	uint32_t bad = frame(p, LP_FK_C, "_Zfoo", 0);
	uint32_t lua = frame(p, LP_FK_LUA, "@_Z3fooi.lua", 4);
	add(p, (uint32_t[]){ root, m }, 2, 3);
	add(p, (uint32_t[]){ root, cold, lua }, 3, 2);
	add(p, (uint32_t[]){ root, bad }, 2, 1);
	char *s = render(p, 0);
	CHECK_STR(s, "main;LuaAction::operator()(DNSQuestion*) const 3\n"
		     "main;_Zfoo 1\n"
		     "main;foo(int) [clone .cold];@_Z3fooi.lua:4 2\n");
	free(s);
	lp_profile_free(p);
}

int main(void)
{
	RUN(test_separators);
	RUN(test_cxx_demangled);
	RUN(test_not_utf8_nor_controls);
	RUN(test_long_label);
	return UNIT_RESULT();
}
