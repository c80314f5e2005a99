/*
** Report renderers: each turns an aggregated profile into one output format.
**
** Renderers write to a FILE* opened by the caller and never print diagnostics: on failure
** they return a negative errno-style code and put a one-line message in err.
*/
#ifndef LP_RENDER_H
#define LP_RENDER_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>

#include "report/profile.h"

/* lp_render_opts.limit for no limit (-n 0): more rows than any profile has. */
#define LP_LIMIT_ALL UINT_MAX

struct lp_render_opts {
	unsigned value;        /* value column rendered by single-value formats */
	const char *title;     /* heading (flame graph title); NULL or "" for a default */
	int lines;             /* top: rank Lua frames by line rather than by function */
	unsigned limit;        /* top: rows to print; annotate: files; 0 = default,
				* LP_LIMIT_ALL: every one */
	const char *source_dir; /* annotate: where to look for the source files first */
	unsigned context;      /* annotate: lines around each profiled one + 1; 0 = default */
	int html;              /* flame graph: an HTML page holding the SVG (-o x.html) */
};

/* Shared by the renderers: err gets the message (printf-style; NULL or 0 bytes: none). */
void lp_render_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* 0 when p has value column v, else -EINVAL with the message. */
int lp_render_check_value(const struct lp_profile *p, unsigned v, char *err, size_t errlen);
/* Flushes out: 0, or -errno with "FORMAT: write error: ..." when something written was
 * lost. */
int lp_render_flushed(FILE *out, const char *format, char *err, size_t errlen);

typedef int (*lp_render_fn)(const struct lp_profile *p, const struct lp_render_opts *o,
			    FILE *out, char *err, size_t errlen);

/* "frame;frame;frame count" lines, root first, sorted, as flamegraph.pl reads them. */
int lp_render_collapsed(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
			char *err, size_t errlen);
/* Self-contained interactive SVG flame graph (o->html: in an HTML page, as async-profiler's
 * flamegraph.html is; the SVG and its script are the same). */
int lp_render_flamegraph(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
			 char *err, size_t errlen);
/* gzipped profile.proto (all value columns). */
int lp_render_pprof(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
		    char *err, size_t errlen);
/* speedscope JSON (file-format schema), one sampled profile per value column. */
int lp_render_speedscope(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
			 char *err, size_t errlen);
/* jit.p-style ranking by self and total. */
int lp_render_top(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
		  char *err, size_t errlen);

/* The profile on the program's Lua source: each file's profiled lines with their self and
 * total, and lines of context around them. */
int lp_render_annotate(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
		       char *err, size_t errlen);

#endif
