/*
** Writes fixed CPU and memory profiles with lp_render_pprof for tests/integration/pprof_go.sh.
**
** Usage: pprof_driver cpu|wall|mem OUT.pb.gz
** The stacks below are what the script expects `go tool pprof` to show; keep them in sync.
*/
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report/profile.h"
#include "report/render.h"

#define PERIOD_NS 1000000

enum { F_MAIN, F_W12, F_W15, F_GC, F_MALLOC, F_TRACE, F_PCALL, F_VMGC, F_BAD, F_N };

static const struct lp_frame frames[F_N] = {
	[F_MAIN] = { LP_FK_LUA, "=stdin", NULL, 3, 1, 0, 0 },
	[F_W12] = { LP_FK_LUA, "@app.lua", NULL, 12, 10, 0, 0 },
	[F_W15] = { LP_FK_LUA, "@app.lua", NULL, 15, 10, 0, 0 },
	[F_GC] = { LP_FK_C, "lj_gc_step", "/usr/lib/libluajit-5.1.so.2", 0, 0, 0, 0x41000 },
	[F_MALLOC] = { LP_FK_C, "malloc", NULL, 0, 0, 0, 0x42000 },
	[F_TRACE] = { LP_FK_TRACE, "@app.lua", NULL, 7, 5, 3, 0 },
	[F_PCALL] = { LP_FK_FFUNC, "pcall", NULL, 0, 0, 0, 0 },
	[F_VMGC] = { LP_FK_VMSTATE, "GC", NULL, 0, 0, 0, 0 },
	[F_BAD] = { LP_FK_C, "bad\xff" "name", NULL, 0, 0, 0, 0x43000 },
};

/* Root first; -1 ends a stack. */
static const int stacks[][4] = {
	{ F_MAIN, F_W12, F_GC, -1 },
	{ F_MAIN, F_W15, F_MALLOC, -1 },
	{ F_MAIN, F_TRACE, -1 },
	{ F_PCALL, F_VMGC, -1 },
	{ F_BAD, -1 },
};
static const int64_t cpu_samples[] = { 30, 20, 40, 5, 5 };
static const int64_t mem_values[][4] = {
	/* alloc_space, alloc_objects, inuse_space, inuse_objects */
	{ 4096, 4, 1024, 1 },
	{ 65536, 16, 0, 0 },
	{ 512, 8, 256, 4 },
	{ 64, 1, 64, 1 },
	{ 128, 2, 0, 0 },
};
#define NSTACKS (sizeof(stacks) / sizeof(stacks[0]))

/* A CPU profile has its sample counts alone, as the loader makes it: the time column is
 * the renderer's. */
static const struct lp_value_type cpu_types[1] = { { "samples", "count" } };
static const struct lp_value_type mem_types[4] = {
	{ "alloc_space", "bytes" },
	{ "alloc_objects", "count" },
	{ "inuse_space", "bytes" },
	{ "inuse_objects", "count" },
};

int main(int argc, char **argv)
{
	if (argc != 3 || (strcmp(argv[1], "cpu") && strcmp(argv[1], "wall") &&
			  strcmp(argv[1], "mem"))) {
		fprintf(stderr, "usage: pprof_driver cpu|wall|mem OUT.pb.gz\n");
		return 2;
	}
	int wall = strcmp(argv[1], "wall") == 0, cpu = wall || strcmp(argv[1], "cpu") == 0;
	struct lp_profile *p = cpu ? lp_profile_new(1, cpu_types) : lp_profile_new(4, mem_types);
	if (!p) {
		fprintf(stderr, "pprof_driver: out of memory\n");
		return 1;
	}
	uint32_t ids[F_N];
	for (int i = 0; i < F_N; i++)
		if (lp_profile_frame_id(p, &frames[i], &ids[i])) {
			fprintf(stderr, "pprof_driver: out of memory\n");
			return 1;
		}
	for (size_t s = 0; s < NSTACKS; s++) {
		uint32_t st[4];
		size_t depth = 0;
		while (depth < 4 && stacks[s][depth] >= 0) {
			st[depth] = ids[stacks[s][depth]];
			depth++;
		}
		int64_t v[4];
		if (cpu) {
			v[0] = cpu_samples[s];
		} else {
			memcpy(v, mem_values[s], sizeof(v));
		}
		if (lp_profile_add(p, st, depth, v)) {
			fprintf(stderr, "pprof_driver: out of memory\n");
			return 1;
		}
	}
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->event = cpu ? "cpu" : "memory";
	m->period_ns = cpu ? PERIOD_NS : 0;
	m->wall_clock = wall;
	m->title = cpu ? "luajit app.lua (cpu)" : "luajit app.lua (memory)";

	struct lp_render_opts o = { .value = cpu ? 0 : 2 };
	FILE *out = fopen(argv[2], "wb");
	if (!out) {
		fprintf(stderr, "pprof_driver: %s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	char err[256] = "";
	int rc = lp_render_pprof(p, &o, out, err, sizeof(err));
	if (fclose(out) && !rc) {
		rc = -errno;
		snprintf(err, sizeof(err), "close: %s", strerror(errno));
	}
	lp_profile_free(p);
	if (rc) {
		fprintf(stderr, "pprof_driver: %s\n", err);
		return 1;
	}
	return 0;
}
