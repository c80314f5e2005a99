/*
** Tests for the speedscope renderer: output parsed by Python's json module and checked exactly.
*/
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "report/render.h"
#include "unit.h"

/*
** Parses the JSON file strictly (UTF-8, no control characters in strings) and prints a
** canonical summary: top-level keys, one line per frame and per profile (sorted keys,
** ASCII-escaped), then "ok" if every profile is self-consistent.
*/
static const char checker[] =
	"import json, sys\n"
	"with open(sys.argv[1], encoding='utf-8', errors='strict') as f:\n"
	"    d = json.load(f)\n"
	"print(','.join(sorted(d)))\n"
	"print(d['$schema'], d['name'], d['activeProfileIndex'], d['exporter'])\n"
	"fr = d['shared']['frames']\n"
	"for x in fr:\n"
	"    print(json.dumps(x, sort_keys=True))\n"
	"good = True\n"
	"for p in d['profiles']:\n"
	"    print(json.dumps(p, sort_keys=True, separators=(',', ':')))\n"
	"    good = good and len(p['samples']) == len(p['weights'])\n"
	"    good = good and p['endValue'] - p['startValue'] == sum(p['weights'])\n"
	"    good = good and all(0 <= i < len(fr) for s in p['samples'] for i in s)\n"
	"print('ok' if good else 'inconsistent')\n";

/* Renders p and returns the checker's output (malloc'd), or NULL. */
static char *render_and_parse(const struct lp_profile *p, const struct lp_render_opts *o)
{
	char json[] = "/tmp/lp_speedscope_XXXXXX", py[] = "/tmp/lp_speedscope_py_XXXXXX";
	int fd = mkstemp(json), pfd = mkstemp(py);
	char *res = NULL;
	CHECK(fd >= 0 && pfd >= 0);
	if (fd < 0 || pfd < 0)
		return NULL;
	FILE *out = fdopen(fd, "w"), *pf = fdopen(pfd, "w");
	char err[256] = "";
	int rc = lp_render_speedscope(p, o, out, err, sizeof(err));
	CHECK_EQ(rc, 0);
	fclose(out);
	fputs(checker, pf);
	fclose(pf);

	char cmd[256];
	snprintf(cmd, sizeof(cmd), "python3 %s %s 2>&1", py, json);
	FILE *in = popen(cmd, "r");
	CHECK(in != NULL);
	if (in) {
		size_t cap = 1 << 16, len = 0, n;
		res = malloc(cap);
		while (res && (n = fread(res + len, 1, cap - 1 - len, in)) > 0)
			len += n;
		if (res)
			res[len] = '\0';
		CHECK_EQ(pclose(in), 0);
	}
	unlink(json);
	unlink(py);
	return res;
}

static uint32_t frame(struct lp_profile *p, enum lp_frame_kind kind, const char *name,
		      const char *file, uint32_t line, uint32_t fline, uint32_t traceno)
{
	struct lp_frame f = { .kind = kind, .name = name, .file = file, .line = line,
			      .fline = fline, .traceno = traceno };
	uint32_t id = UINT32_MAX;
	CHECK_EQ(lp_profile_frame_id(p, &f, &id), 0);
	return id;
}

static void add(struct lp_profile *p, const uint32_t *fr, size_t depth, int64_t a, int64_t b)
{
	int64_t v[2] = { a, b };
	CHECK_EQ(lp_profile_add(p, fr, depth, v), 0);
}

static void test_two_columns(void)
{
	static const struct lp_value_type types[] = {
		{ "alloc_objects", "count" }, { "alloc_space", "bytes" }
	};
	struct lp_profile *p = lp_profile_new(2, types);
	lp_profile_meta(p)->source = "mem.bin";
	uint32_t m = frame(p, LP_FK_LUA, "@main.lua", NULL, 3, 1, 0);
	uint32_t c = frame(p, LP_FK_C, "lj_gc_step", "/usr/lib/libluajit.so", 0, 0, 0);
	uint32_t b = frame(p, LP_FK_FFUNC, "pcall", NULL, 0, 0, 0);
	uint32_t t = frame(p, LP_FK_TRACE, "@app.lua", NULL, 7, 5, 3);
	uint32_t g = frame(p, LP_FK_VMSTATE, "GC", NULL, 0, 0, 0);
	uint32_t s = frame(p, LP_FK_LUA, "=stdin", NULL, 0, 0, 0);
	CHECK_EQ(m, 0);
	CHECK_EQ(s, 5);
	add(p, (uint32_t[]){ m, c }, 2, 2, 0);
	add(p, (uint32_t[]){ m, b, t }, 3, 0, 100);
	add(p, (uint32_t[]){ m }, 1, 5, 50);
	add(p, (uint32_t[]){ g }, 1, 1, 8);
	add(p, (uint32_t[]){ m, c }, 2, 1, 0); /* merges into the first stack */
	add(p, (uint32_t[]){ s, m }, 2, 0, 0); /* zero everywhere: in no profile */
	add(p, (uint32_t[]){ s }, 1, 3, -4);   /* negative weight: left out */

	struct lp_render_opts o = { .value = 1 };
	char *res = render_and_parse(p, &o);
	CHECK_STR(res,
		  "$schema,activeProfileIndex,exporter,name,profiles,shared\n"
		  "https://www.speedscope.app/file-format-schema.json mem.bin 1 luaprof\n"
		  "{\"file\": \"main.lua\", \"line\": 3, \"name\": \"@main.lua:3\"}\n"
		  "{\"file\": \"/usr/lib/libluajit.so\", \"name\": \"lj_gc_step\"}\n"
		  "{\"name\": \"pcall\"}\n"
		  "{\"file\": \"app.lua\", \"line\": 7, \"name\": \"TRACE [3] @app.lua:7\"}\n"
		  "{\"name\": \"GC\"}\n"
		  "{\"file\": \"stdin\", \"name\": \"=stdin:0\"}\n"
		  "{\"endValue\":12,\"name\":\"mem.bin (alloc_objects)\",\"samples\":[[0,1],[0],[4],[5]],"
		  "\"startValue\":0,\"type\":\"sampled\",\"unit\":\"none\",\"weights\":[3,5,1,3]}\n"
		  "{\"endValue\":158,\"name\":\"mem.bin (alloc_space)\",\"samples\":[[0,2,3],[0],[4]],"
		  "\"startValue\":0,\"type\":\"sampled\",\"unit\":\"bytes\",\"weights\":[100,50,8]}\n"
		  "ok\n");
	free(res);

	/* An empty title is no title: the default name, not "". */
	o.title = "";
	res = render_and_parse(p, &o);
	CHECK(res && strstr(res, "schema.json mem.bin 1 luaprof\n"));
	CHECK(res && strstr(res, "\"name\":\"mem.bin (alloc_space)\""));
	free(res);
	lp_profile_free(p);
}

/* Lua frames that read the same (one line of a chunk in two functions: a closure made on
 * the line that runs it) are one frame, which speedscope's Sandwich view lists once: an
 * exact memory profile had two frames "@app.lua:17". A trace at that line stays apart. */
static void test_same_line_one_frame(void)
{
	static const struct lp_value_type types[] = {
		{ "alloc_objects", "count" }, { "alloc_space", "bytes" }
	};
	struct lp_profile *p = lp_profile_new(2, types);
	lp_profile_meta(p)->source = "mem.bin";
	uint32_t m = frame(p, LP_FK_LUA, "@app.lua", NULL, 17, 0, 0);
	uint32_t c = frame(p, LP_FK_LUA, "@app.lua", NULL, 17, 17, 0);
	uint32_t o = frame(p, LP_FK_LUA, "@app.lua", NULL, 18, 0, 0);
	uint32_t t = frame(p, LP_FK_TRACE, "@app.lua", NULL, 17, 17, 1);
	CHECK(m != c);
	add(p, (uint32_t[]){ m }, 1, 4, 512);
	add(p, (uint32_t[]){ o }, 1, 1, 72);
	add(p, (uint32_t[]){ c }, 1, 1, 104);
	add(p, (uint32_t[]){ t }, 1, 1, 88);
	struct lp_render_opts opts = { .value = 1 };
	char *res = render_and_parse(p, &opts);
	CHECK_STR(res,
		  "$schema,activeProfileIndex,exporter,name,profiles,shared\n"
		  "https://www.speedscope.app/file-format-schema.json mem.bin 1 luaprof\n"
		  "{\"file\": \"app.lua\", \"line\": 17, \"name\": \"@app.lua:17\"}\n"
		  "{\"file\": \"app.lua\", \"line\": 18, \"name\": \"@app.lua:18\"}\n"
		  "{\"file\": \"app.lua\", \"line\": 17, \"name\": \"TRACE [1] @app.lua:17\"}\n"
		  "{\"endValue\":7,\"name\":\"mem.bin (alloc_objects)\",\"samples\":[[0],[1],[0],[2]],"
		  "\"startValue\":0,\"type\":\"sampled\",\"unit\":\"none\",\"weights\":[4,1,1,1]}\n"
		  "{\"endValue\":776,\"name\":\"mem.bin (alloc_space)\",\"samples\":[[0],[1],[0],[2]],"
		  "\"startValue\":0,\"type\":\"sampled\",\"unit\":\"bytes\",\"weights\":[512,72,104,88]}\n"
		  "ok\n");
	free(res);
	lp_profile_free(p);
}

static void test_nasty_names(void)
{
	static const struct lp_value_type types[] = { { "cpu", "nanoseconds" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_render_opts o = { .title = "t\"i\\tle\n" };
	/* quote, backslash, control bytes, DEL, valid 2/3/4-byte UTF-8 */
	uint32_t a = frame(p, LP_FK_C, "q\"b\\n\n\x01\x1f\x7f \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
			   "/lib/\"x\".so", 0, 0, 0);
	/* stray continuation, overlong, surrogate, above U+10FFFF, cut-short sequence */
	uint32_t b = frame(p, LP_FK_C, "\xff|\x80|\xc0\xaf|\xe0\x80|\xed\xa0\x80|\xf4\x90\x80\x80"
				       "|\xe2\x82|\xf0\x9f\x98", NULL, 0, 0, 0);
	uint32_t c = frame(p, LP_FK_LUA, "@dir/\xe2\x82", NULL, 9, 1, 0);
	for (int i = 0; i < 3; i++) {
		int64_t v = 10 + i;
		uint32_t st[] = { a, b, c };
		CHECK_EQ(lp_profile_add(p, st, (size_t)i + 1, &v), 0);
	}
	char *res = render_and_parse(p, &o);
	CHECK_STR(res,
		  "$schema,activeProfileIndex,exporter,name,profiles,shared\n"
		  "https://www.speedscope.app/file-format-schema.json t\"i\\tle\n 0 luaprof\n"
		  "{\"file\": \"/lib/\\\"x\\\".so\", \"name\": "
		  "\"q\\\"b\\\\n\\n\\u0001\\u001f\\u007f \\u00e9\\u20ac\\ud83d\\ude00\"}\n"
		  "{\"name\": \"\\ufffd|\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd|\\ufffd\\ufffd\\ufffd|"
		  "\\ufffd\\ufffd\\ufffd\\ufffd|\\ufffd|\\ufffd\"}\n"
		  "{\"file\": \"dir/\\ufffd\", \"line\": 9, \"name\": \"@dir/\\ufffd:9\"}\n"
		  "{\"endValue\":33,\"name\":\"t\\\"i\\\\tle\\n (cpu)\",\"samples\":[[0],[0,1],[0,1,2]],"
		  "\"startValue\":0,\"type\":\"sampled\",\"unit\":\"nanoseconds\",\"weights\":[10,11,12]}\n"
		  "ok\n");
	free(res);
	lp_profile_free(p);
}

/* A CPU profile's samples as time: count x interval in nanoseconds, named after the
 * clock (speedscope showed bare counts, unit none). */
static void test_cpu_time(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	for (int wall = 0; wall <= 1; wall++) {
		struct lp_profile *p = lp_profile_new(1, types);
		lp_profile_meta(p)->event = "cpu";
		lp_profile_meta(p)->period_ns = 4000000;
		lp_profile_meta(p)->wall_clock = wall;
		uint32_t a = frame(p, LP_FK_LUA, "@a.lua", "a.lua", 3, 1, 0);
		int64_t three = 3, five = 5;
		uint32_t b = frame(p, LP_FK_C, "lj_str_new", NULL, 0, 0, 0);
		CHECK_EQ(lp_profile_add(p, (uint32_t[]){ a }, 1, &three), 0);
		CHECK_EQ(lp_profile_add(p, (uint32_t[]){ a, b }, 2, &five), 0);
		struct lp_render_opts o = { .title = "t" };
		char *res = render_and_parse(p, &o);
		char want[1024];
		snprintf(want, sizeof(want),
			 "$schema,activeProfileIndex,exporter,name,profiles,shared\n"
			 "https://www.speedscope.app/file-format-schema.json t 0 luaprof\n"
			 "{\"file\": \"a.lua\", \"line\": 3, \"name\": \"@a.lua:3\"}\n"
			 "{\"name\": \"lj_str_new\"}\n"
			 "{\"endValue\":32000000,\"name\":\"t (%s time)\",\"samples\":[[0],[0,1]],"
			 "\"startValue\":0,\"type\":\"sampled\",\"unit\":\"nanoseconds\","
			 "\"weights\":[12000000,20000000]}\n"
			 "ok\n", wall ? "wall" : "cpu");
		CHECK_STR(res, want);
		free(res);
		lp_profile_free(p);
	}
}

static void test_empty(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	char *res = render_and_parse(p, NULL);
	CHECK_STR(res,
		  "$schema,activeProfileIndex,exporter,name,profiles,shared\n"
		  "https://www.speedscope.app/file-format-schema.json luaprof 0 luaprof\n"
		  "{\"endValue\":0,\"name\":\"luaprof (samples)\",\"samples\":[],"
		  "\"startValue\":0,\"type\":\"sampled\",\"unit\":\"none\",\"weights\":[]}\n"
		  "ok\n");
	free(res);
	lp_profile_free(p);
}

static void test_bad_value(void)
{
	static const struct lp_value_type types[] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, types);
	struct lp_render_opts o = { .value = 1 };
	char err[128] = "";
	char *buf = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&buf, &len);
	CHECK_EQ(lp_render_speedscope(p, &o, out, err, sizeof(err)), -EINVAL);
	fclose(out);
	CHECK_EQ(len, 0);
	CHECK_STR(err, "value column 1 out of range (the profile has 1)");
	free(buf);
	lp_profile_free(p);
}

int main(void)
{
	RUN(test_two_columns);
	RUN(test_same_line_one_frame);
	RUN(test_nasty_names);
	RUN(test_cpu_time);
	RUN(test_empty);
	RUN(test_bad_value);
	return UNIT_RESULT();
}
