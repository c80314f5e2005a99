/*
** top renderer: a jit.p-style text ranking of frames by self and total value.
**
** self = value of the stacks whose leaf is the frame; total = value of the stacks that
** contain it, each stack counted once however often the frame recurs in it. Lua frames are
** ranked by function unless o->lines asks for current lines. A function's row is named as
** Lua's tracebacks name one, "function <@app.lua:2>" (the line where it is defined), or
** "main chunk <@app.lua>": "@app.lua:2" would read as a line, and an exact memory
** profile's report names the allocating line so (the rows add up all of the function's).
*/
#include "report/render.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "report/text.h"

#define DEFAULT_LIMIT 20

struct row {
	uint32_t id;     /* frame id in the ranked profile */
	int64_t self;    /* value of the stacks ending in the frame */
	int64_t total;   /* value of the stacks containing it, each counted once */
	char *label;     /* display label, control bytes replaced */
	enum lp_frame_kind kind;
};

static int label_cmp(const void *a, const void *b)
{
	const struct row *x = *(const struct row *const *)a, *y = *(const struct row *const *)b;
	return strcmp(x->label, y->label);
}

/* Rows of C frames with one label but different functions (clock_gettime in the vDSO and
 * in libc): each gets its object's name appended, or the rows would look the same. 0, or
 * -1 on ENOMEM. */
static int tell_apart(const struct lp_profile *q, struct row *rows, size_t nrows)
{
	struct row **by = malloc((nrows + 1) * sizeof(*by));
	if (!by)
		return -1;
	for (size_t i = 0; i < nrows; i++)
		by[i] = &rows[i];
	qsort(by, nrows, sizeof(*by), label_cmp);
	int rc = 0;
	for (size_t i = 0, j; i < nrows && !rc; i = j) {
		size_t nc = 0;
		for (j = i; j < nrows && !strcmp(by[i]->label, by[j]->label); j++)
			nc += lp_profile_frame(q, by[j]->id)->kind == LP_FK_C;
		for (size_t k = i; nc > 1 && k < j && !rc; k++) {
			const struct lp_frame *f = lp_profile_frame(q, by[k]->id);
			if (f->kind != LP_FK_C || !f->file)
				continue;
			const char *slash = strrchr(f->file, '/'), *obj = slash ? slash + 1 : f->file;
			size_t n = strlen(by[k]->label) + strlen(obj) + 4;
			char *l = malloc(n);
			if (!l) {
				rc = -1;
				break;
			}
			snprintf(l, n, "%s (%s)", by[k]->label, obj);
			lp_text_clean(l);
			free(by[k]->label);
			by[k]->label = l;
		}
	}
	free(by);
	return rc;
}

/* By self, then by total (as pprof -top): most frames of a sampled memory profile have no
 * self, and among them the callers of the most bytes come first. */
static int row_cmp(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	int c = strcmp(x->label, y->label);
	if (c)
		return c;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	return x->id < y->id ? -1 : x->id > y->id;
}

/* -- Output ----------------------------------------------------------------- */

static void write_rows(FILE *out, const struct lp_profile_meta *m, const struct row *rows,
		       size_t nrows, size_t limit, const struct lp_value_type *t, int64_t grand,
		       int lines)
{
	/* "No samples" under "Samples: N" read as a profile that caught nothing. */
	const char *held = nrows ? NULL : lp_text_nothing_held(m, t);
	if (held) {
		fprintf(out, "%s\n", held);
		return;
	}
	if (nrows == 0) {
		fputs("No samples.\n", out);
		return;
	}
	fprintf(out, "\n%7s %10s %7s %10s  %-8s %s\n", "%self", "self", "%total", "total",
		"kind", lines ? "frame (by line)" : "frame (by function)");
	size_t shown = nrows < limit ? nrows : limit;
	for (size_t i = 0; i < shown; i++) {
		const struct row *r = &rows[i];
		char self[64], total[64], pself[16], ptotal[16];
		lp_text_value(self, sizeof(self), r->self, t->unit);
		lp_text_value(total, sizeof(total), r->total, t->unit);
		lp_text_pct(pself, sizeof(pself), r->self, grand);
		lp_text_pct(ptotal, sizeof(ptotal), r->total, grand);
		fprintf(out, "%7s %10s %7s %10s  %-8s %s\n", pself, self, ptotal, total,
			lp_frame_kind_name(r->kind), r->label);
	}
	if (nrows > shown)
		fprintf(out, "... %zu more frame%s omitted (-n to show more)\n", nrows - shown,
			nrows - shown == 1 ? "" : "s");
}

/* -- Ranking ---------------------------------------------------------------- */

static int key_label_cmp(const void *a, const void *b, void *arg)
{
	char *const *labels = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = strcmp(labels[x], labels[y]);
	return c ? c : (x > y) - (x < y);
}

/*
** By line, a Lua line is one row however many functions run at it: a callback defined on
** the line that calls it (table.sort's comparator), two functions on one line. key[id] is
** the lowest id of the Lua frames with id's label (its chunk and line), else id. 0, or -1
** on ENOMEM.
*/
static int line_keys(const struct lp_profile *q, uint32_t *key)
{
	size_t nframes = lp_profile_nframes(q), nlua = 0;
	char **labels = calloc(nframes + 1, sizeof(*labels));
	uint32_t *lua = malloc((nframes + 1) * sizeof(*lua));
	int rc = -1;
	if (!labels || !lua)
		goto out;
	for (size_t id = 0; id < nframes; id++) {
		key[id] = (uint32_t)id;
		if (lp_profile_frame(q, (uint32_t)id)->kind != LP_FK_LUA)
			continue;
		if (!(labels[id] = lp_text_label(lp_profile_frame(q, (uint32_t)id))))
			goto out;
		lua[nlua++] = (uint32_t)id;
	}
	qsort_r(lua, nlua, sizeof(*lua), key_label_cmp, labels);
	for (size_t i = 1; i < nlua; i++)
		if (!strcmp(labels[lua[i]], labels[lua[i - 1]]))
			key[lua[i]] = key[lua[i - 1]];
	rc = 0;
out:
	for (size_t id = 0; labels && id < nframes; id++)
		free(labels[id]);
	free(labels);
	free(lua);
	return rc;
}

/* f's label in a top list by function: a Lua function by where it is defined. NULL on
 * ENOMEM. */
static char *function_label(const struct lp_frame *f)
{
	if (f->kind != LP_FK_LUA || f->nosym) /* an unknown prototype: its stand-in name */
		return lp_text_label(f);
	size_t n = strlen(f->name) + 32;
	char *s = malloc(n);
	if (!s)
		return NULL;
	if (f->line)
		snprintf(s, n, "function <%s:%" PRIu32 ">", f->name, f->line);
	else
		snprintf(s, n, "main chunk <%s>", f->name);
	lp_text_clean(s);
	return s;
}

/* Fills *rows with the frames of q that carry any value in column v, sorted; by_line: Lua
 * frames of one chunk and line are one row (line_keys). */
static int rank(const struct lp_profile *q, unsigned v, int by_line, struct row **rowsp,
		size_t *nrowsp)
{
	size_t nframes = lp_profile_nframes(q), nstacks = lp_profile_nstacks(q);
	int64_t *self = calloc(nframes + 1, sizeof(*self));
	int64_t *total = calloc(nframes + 1, sizeof(*total));
	size_t *seen = calloc(nframes + 1, sizeof(*seen)); /* last stack index + 1 */
	uint32_t *key = malloc((nframes + 1) * sizeof(*key));
	struct row *rows = NULL;
	size_t nrows = 0;
	int rc = -ENOMEM;
	if (!self || !total || !seen || !key)
		goto out;
	for (size_t id = 0; id < nframes; id++)
		key[id] = (uint32_t)id;
	if (by_line && line_keys(q, key))
		goto out;
	for (size_t i = 0; i < nstacks; i++) {
		const uint32_t *fr;
		size_t depth;
		const int64_t *val;
		lp_profile_stack(q, i, &fr, &depth, &val);
		if (!depth || !val[v])
			continue;
		uint32_t leaf = key[fr[depth - 1]];
		self[leaf] = lp_sat_add(self[leaf], val[v]);
		for (size_t d = 0; d < depth; d++) {
			uint32_t k = key[fr[d]];
			if (seen[k] == i + 1)
				continue;
			seen[k] = i + 1;
			total[k] = lp_sat_add(total[k], val[v]);
		}
	}
	rows = calloc(nframes + 1, sizeof(*rows));
	if (!rows)
		goto out;
	for (size_t id = 0; id < nframes; id++) {
		if (!self[id] && !total[id])
			continue;
		const struct lp_frame *f = lp_profile_frame(q, (uint32_t)id);
		struct row *r = &rows[nrows];
		r->id = (uint32_t)id;
		r->self = self[id];
		r->total = total[id];
		r->kind = f->kind;
		if (!(r->label = by_line ? lp_text_label(f) : function_label(f)))
			goto out;
		nrows++;
	}
	if (tell_apart(q, rows, nrows))
		goto out;
	qsort(rows, nrows, sizeof(*rows), row_cmp);
	rc = 0;
out:
	if (rc) {
		for (size_t i = 0; rows && i < nrows; i++)
			free(rows[i].label);
		free(rows);
		rows = NULL;
		nrows = 0;
	}
	free(self);
	free(total);
	free(seen);
	free(key);
	*rowsp = rows;
	*nrowsp = nrows;
	return rc;
}

int lp_render_top(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
		  char *err, size_t errlen)
{
	unsigned v = o ? o->value : 0;
	int rc = lp_render_check_value(p, v, err, errlen);
	if (rc)
		return rc;
	size_t limit = o && o->limit ? o->limit : DEFAULT_LIMIT;
	struct lp_profile *byfn = NULL;
	const struct lp_profile *q = p;
	if (!(o && o->lines)) {
		if (!(byfn = lp_profile_by_function(p))) {
			lp_render_err(err, errlen, "top: out of memory");
			return -ENOMEM;
		}
		q = byfn;
	}
	struct row *rows;
	size_t nrows;
	if (rank(q, v, o && o->lines, &rows, &nrows)) {
		lp_profile_free(byfn);
		lp_render_err(err, errlen, "top: out of memory");
		return -ENOMEM;
	}
	const struct lp_value_type *t = lp_profile_value_type(p, v);
	int64_t grand = lp_profile_total(p, v);
	lp_text_header(out, lp_profile_cmeta(p), t, grand);
	write_rows(out, lp_profile_cmeta(p), rows, nrows, limit, t, grand, o && o->lines);
	for (size_t i = 0; i < nrows; i++)
		free(rows[i].label);
	free(rows);
	lp_profile_free(byfn);
	return lp_render_flushed(out, "top", err, errlen);
}
