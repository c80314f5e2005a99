/*
** libFuzzer target for the whole report path: arbitrary bytes loaded as a stream, then
** aggregated and rendered in every format (memprof text, collapsed, flame graph, pprof,
** speedscope, top by function and by line, annotate, info; the memprof report whole and
** --leak-only), with and without --split and per-function merging.
** (annotate reads the source files the stream's chunk names name: only regular files,
** at most 16 MiB.)
**
** Whatever the bytes, this must not crash, leak or hang; a stream that loads (even
** truncated) must render in every format without error.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "report/info.h"
#include "report/load.h"
#include "report/render.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void render_all(struct lp_profile *p)
{
	/* top twice: by function, and by line (--lines). */
	static const lp_render_fn fns[] = { lp_render_collapsed, lp_render_flamegraph,
					    lp_render_pprof, lp_render_speedscope, lp_render_top,
					    lp_render_top, lp_render_annotate };
	for (unsigned v = 0; v < lp_profile_nvalues(p); v++) {
		for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
			char *buf = NULL, err[256];
			size_t len = 0;
			FILE *f = open_memstream(&buf, &len);
			if (!f)
				abort();
			struct lp_render_opts o = { .value = v, .lines = (int)(i & 1) };
			if (fns[i](p, &o, f, err, sizeof(err)) != 0)
				abort(); /* rendering a loaded profile never fails for lack of input */
			fclose(f);
			free(buf);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	for (int split = 0; split < 2; split++) {
		struct lp_input in;
		struct lp_loaded l;
		struct lp_sysprof_opts so = { .split = split };
		lp_input_open_mem(&in, data, size, "fuzz");
		int rc = lp_load(&in, &so, &l);
		int sys = l.kind == LP_STREAM_SYSPROF;
		if (rc == LP_OK || rc == LP_ERR_TRUNCATED) {
			/* info describes any loaded prefix, profile section or not. */
			char *buf = NULL;
			size_t len = 0;
			FILE *f = open_memstream(&buf, &len);
			if (!f || lp_info_report(&l, "fuzz", f) != 0)
				abort();
			fclose(f);
			free(buf);
		}
		if ((rc == LP_OK || rc == LP_ERR_TRUNCATED) && l.kind) {
			if (l.mem) {
				char *buf = NULL;
				size_t len = 0;
				FILE *f = open_memstream(&buf, &len);
				if (!f)
					abort();
				/* Both sections' forms: the whole report in bytes, the heap
				 * summary alone in units (a memory stream has one pass). */
				for (int leak = 0; leak < 2; leak++) {
					struct lp_memprof_opts mo = { leak, leak };
					if (lp_memprof_report(l.mem, &mo, f) != 0)
						abort();
				}
				fclose(f);
				free(buf);
			}
			struct lp_profile *p = lp_loaded_profile(&l, "fuzz");
			if (!p)
				abort();
			render_all(p);
			struct lp_profile *q = lp_profile_by_function(p);
			if (!q)
				abort();
			render_all(q);
			lp_profile_free(q);
			lp_profile_free(p);
		}
		lp_loaded_free(&l);
		lp_input_close(&in);
		if (!sys)
			break; /* --split changes only CPU profiles */
	}
	return 0;
}
