/*
** Flame graph test driver: renders known profiles to SVG for flamegraph_browser.sh.
**
**   fg_driver demo OUT.svg    small mixed-kind profile whose shares the browser test asserts
**   fg_driver big OUT.svg     1000 stacks x 100 distinct frames = 100k boxes (script speed)
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/profile.h"
#include "report/render.h"

static struct lp_profile *prof;

static uint32_t fid(enum lp_frame_kind k, const char *name, uint32_t line, uint32_t traceno)
{
	struct lp_frame f = { .kind = k, .name = name, .line = line, .fline = line ? 1 : 0,
			      .traceno = traceno };
	uint32_t id;
	if (lp_profile_frame_id(prof, &f, &id)) {
		fprintf(stderr, "fg_driver: out of memory\n");
		exit(1);
	}
	return id;
}

static void add(const uint32_t *fr, size_t n, int64_t v)
{
	if (lp_profile_add(prof, fr, n, &v)) {
		fprintf(stderr, "fg_driver: out of memory\n");
		exit(1);
	}
}

/*
 * Total 100 samples:
 *   main > fib:3 > fib:3 > pcall > lj_gc_step   30
 *   main > fib:3 > fib:5                         20
 *   main > TRACE [3] @loop.lua:7                 25
 *   main > string.format > lj_str_new            10
 *   GC                                           10
 *   <script>&"'\n\xff (C)                         5
 * so /fib/ matches 50% (the nested fib:3 must not count twice).
 */
static void demo(void)
{
	uint32_t main_ = fid(LP_FK_LUA, "@main.lua", 1, 0);
	uint32_t fib3 = fid(LP_FK_LUA, "@fib.lua", 3, 0);
	uint32_t fib5 = fid(LP_FK_LUA, "@fib.lua", 5, 0);
	uint32_t pcall = fid(LP_FK_FFUNC, "pcall", 0, 0);
	uint32_t gcstep = fid(LP_FK_C, "lj_gc_step", 0, 0);
	uint32_t trace = fid(LP_FK_TRACE, "@loop.lua", 7, 3);
	uint32_t fmt = fid(LP_FK_FFUNC, "string.format", 0, 0);
	uint32_t strnew = fid(LP_FK_C, "lj_str_new", 0, 0);
	uint32_t gc = fid(LP_FK_VMSTATE, "GC", 0, 0);
	uint32_t nasty = fid(LP_FK_C, "<script>&\"'\n\xff", 0, 0);

	add((uint32_t[]){ main_, fib3, fib3, pcall, gcstep }, 5, 30);
	add((uint32_t[]){ main_, fib3, fib5 }, 3, 20);
	add((uint32_t[]){ main_, trace }, 2, 25);
	add((uint32_t[]){ main_, fmt, strnew }, 3, 10);
	add((uint32_t[]){ gc }, 1, 10);
	add((uint32_t[]){ nasty }, 1, 5);
	struct lp_profile_meta *m = lp_profile_meta(prof);
	m->source = "demo.lpf";
	m->event = "cpu";
	m->samples = 102;
	m->dropped = 2;
	m->period_ns = 1000000;
}

static void big(void)
{
	char name[64];
	uint32_t fr[100];
	for (int s = 0; s < 1000; s++) {
		for (int d = 0; d < 100; d++) {
			snprintf(name, sizeof(name), "@big%03d.lua", s);
			fr[d] = fid(LP_FK_LUA, name, (uint32_t)d + 1, 0);
		}
		add(fr, 100, 1);
	}
	lp_profile_meta(prof)->source = "big.lpf";
}

int main(int argc, char **argv)
{
	static const struct lp_value_type samples = { "samples", "count" };
	if (argc != 3 || (strcmp(argv[1], "demo") && strcmp(argv[1], "big"))) {
		fprintf(stderr, "usage: fg_driver demo|big OUT.svg|OUT.html\n");
		return 2;
	}
	prof = lp_profile_new(1, &samples);
	if (!prof)
		return 1;
	if (strcmp(argv[1], "demo") == 0)
		demo();
	else
		big();
	FILE *out = fopen(argv[2], "w");
	if (!out) {
		fprintf(stderr, "fg_driver: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	size_t n = strlen(argv[2]);
	struct lp_render_opts o = { .html = n > 5 && !strcmp(argv[2] + n - 5, ".html") };
	char err[256] = "";
	int rc = lp_render_flamegraph(prof, &o, out, err, sizeof(err));
	if (fclose(out) != 0 && rc == 0) {
		fprintf(stderr, "fg_driver: %s: %s\n", argv[2], strerror(errno));
		rc = -1;
	}
	if (rc)
		fprintf(stderr, "fg_driver: %s\n", err);
	lp_profile_free(prof);
	return rc ? 1 : 0;
}
