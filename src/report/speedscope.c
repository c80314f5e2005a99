/*
** speedscope renderer: the profile as speedscope JSON, one sampled profile per value column.
**
** Follows speedscope's src/lib/file-format-spec.ts: a top-level object with "$schema",
** shared frames, "sampled" profiles (samples = frame-index arrays root first, weights
** aligned with them), "name", "activeProfileIndex" and "exporter". The current spec has no
** "version" field, so none is written. Output is streamed; memory is one label buffer.
*/
#include "report/render.h"
#include "util/iset.h"
#include "util/utf8.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define SCHEMA_URL "https://www.speedscope.app/file-format-schema.json"

/* -- JSON strings ----------------------------------------------------------- */

/* Writes s (n bytes) as a quoted JSON string, ill-formed UTF-8 replaced by U+FFFD. */
static void json_str(FILE *out, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	putc('"', out);
	while (i < n) {
		unsigned char c = u[i];
		size_t len, bad;
		if (c == '"' || c == '\\') {
			putc('\\', out);
			putc(c, out);
			i++;
		} else if (c < 0x20 || c == 0x7f) {
			fprintf(out, "\\u%04x", c);
			i++;
		} else if ((len = lp_utf8_seq(u + i, n - i, &bad, NULL))) {
			fwrite(u + i, 1, len, out);
			i += len;
		} else {
			fputs("\\ufffd", out);
			i += bad;
		}
	}
	putc('"', out);
}

static void json_cstr(FILE *out, const char *s)
{
	json_str(out, s, strlen(s));
}

/* -- Frames ----------------------------------------------------------------- */

/* speedscope's units are none, nanoseconds, microseconds, milliseconds, seconds, bytes. */
static const char *unit_name(const char *unit)
{
	static const char *const known[] = {
		"nanoseconds", "microseconds", "milliseconds", "seconds", "bytes"
	};
	for (size_t i = 0; unit && i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(unit, known[i]) == 0)
			return known[i];
	return "none";
}

/* The label buffer grows to the longest label; returns -ENOMEM on failure. */
static int write_frame(FILE *out, const struct lp_frame *f, char **buf, size_t *cap)
{
	int n = lp_frame_label(f, *buf, *cap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= *cap) {
		size_t ncap = (size_t)n + 1;
		char *nb = realloc(*buf, ncap);
		if (!nb)
			return -ENOMEM;
		*buf = nb;
		*cap = ncap;
		lp_frame_label(f, *buf, *cap);
	}
	fputs("{\"name\":", out);
	json_str(out, *buf, (size_t)n);
	const char *file = NULL;
	int has_line = 0;
	if (f->kind == LP_FK_LUA || f->kind == LP_FK_TRACE) {
		/* Lua chunk names: "@path" for files, "=name" for special sources. */
		file = f->name;
		if (file[0] == '@' || file[0] == '=')
			file++;
		has_line = f->line != 0;
	} else if (f->kind == LP_FK_C) {
		file = f->file;
	}
	if (file && file[0]) {
		fputs(",\"file\":", out);
		json_cstr(out, file);
	}
	if (has_line)
		fprintf(out, ",\"line\":%" PRIu32, f->line);
	putc('}', out);
	return 0;
}

/* A Lua frame that reads as one written before (lp_frame_lua_same). */
struct same_key {
	const struct lp_profile *p;
	const struct lp_frame *f;
};

static int same_eq(const void *ctx, uint32_t idx)
{
	const struct same_key *k = ctx;
	return lp_frame_lua_same(lp_profile_frame(k->p, idx), k->f);
}

/* -- Profiles --------------------------------------------------------------- */

/* A sample count's weight in nanoseconds of the sampling interval (saturating). */
static int64_t scaled(int64_t v, uint64_t scale)
{
	if (scale <= 1)
		return v;
	return (uint64_t)v > (uint64_t)INT64_MAX / scale ? INT64_MAX : v * (int64_t)scale;
}

/*
** Stacks with a non-positive weight are left out: speedscope cannot draw them. A CPU
** profile's sample counts are written as time (count x interval, in nanoseconds), so that
** speedscope shows seconds, as pprof's cpu/nanoseconds column does: scale is the interval,
** else 1.
*/
static void write_profile(FILE *out, const struct lp_profile *p, unsigned v, const char *name,
			  const uint32_t *ids)
{
	const struct lp_value_type *t = lp_profile_value_type(p, v);
	const struct lp_profile_meta *m = lp_profile_cmeta(p);
	uint64_t scale = 1;
	const char *type = t->type, *unit = unit_name(t->unit);
	if (!strcmp(t->type, "samples") && !strcmp(t->unit, "count") && m->period_ns &&
	    m->event && !strcmp(m->event, "cpu") && m->period_ns <= INT64_MAX) {
		scale = m->period_ns;
		type = m->wall_clock ? "wall time" : "cpu time";
		unit = "nanoseconds";
	}
	size_t nstacks = lp_profile_nstacks(p);
	int64_t end = 0;
	for (size_t i = 0; i < nstacks; i++) {
		const uint32_t *fr;
		size_t depth;
		const int64_t *val;
		lp_profile_stack(p, i, &fr, &depth, &val);
		if (val[v] > 0)
			end = lp_sat_add(end, scaled(val[v], scale));
	}

	fputs("{\"type\":\"sampled\",\"name\":", out);
	size_t nlen = strlen(name), tlen = strlen(type);
	char *pname = malloc(nlen + tlen + 4);
	if (pname) {
		snprintf(pname, nlen + tlen + 4, "%s (%s)", name, type);
		json_cstr(out, pname);
		free(pname);
	} else {
		json_cstr(out, type);
	}
	fputs(",\"unit\":", out);
	json_cstr(out, unit);
	fprintf(out, ",\"startValue\":0,\"endValue\":%" PRId64 ",\n\"samples\":[", end);
	int first = 1;
	for (size_t i = 0; i < nstacks; i++) {
		const uint32_t *fr;
		size_t depth;
		const int64_t *val;
		lp_profile_stack(p, i, &fr, &depth, &val);
		if (val[v] <= 0)
			continue;
		fputs(first ? "\n[" : ",\n[", out);
		first = 0;
		for (size_t d = 0; d < depth; d++)
			fprintf(out, d ? ",%" PRIu32 : "%" PRIu32, ids[fr[d]]);
		putc(']', out);
	}
	fputs("],\n\"weights\":[", out);
	first = 1;
	for (size_t i = 0; i < nstacks; i++) {
		const uint32_t *fr;
		size_t depth;
		const int64_t *val;
		lp_profile_stack(p, i, &fr, &depth, &val);
		if (val[v] <= 0)
			continue;
		fprintf(out, first ? "%" PRId64 : ",%" PRId64, scaled(val[v], scale));
		first = 0;
	}
	fputs("]}", out);
}

int lp_render_speedscope(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
			 char *err, size_t errlen)
{
	unsigned nvalues = lp_profile_nvalues(p);
	unsigned active = o ? o->value : 0;
	int rc = lp_render_check_value(p, active, err, errlen);
	if (rc)
		return rc;
	const struct lp_profile_meta *m = lp_profile_cmeta(p);
	const char *name = o && o->title && *o->title ? o->title : /* "": the default */
			   m->title ? m->title :
			   m->source ? m->source : "luaprof";

	/* Only the frames some stack uses (a stack cut to the deepest kept leaves the rest of
	 * its frames in the profile), numbered in their order. */
	size_t nframes = lp_profile_nframes(p), nstacks = lp_profile_nstacks(p);
	uint32_t *ids = malloc((nframes + 1) * sizeof(*ids));
	size_t cap = 256;
	char *buf = malloc(cap);
	if (!ids || !buf) {
		free(ids);
		free(buf);
		lp_render_err(err, errlen, "speedscope: out of memory");
		return -ENOMEM;
	}
	memset(ids, 0, (nframes + 1) * sizeof(*ids));
	for (size_t i = 0; i < nstacks; i++) {
		const uint32_t *fr;
		size_t depth;
		const int64_t *val;
		lp_profile_stack(p, i, &fr, &depth, &val);
		for (size_t d = 0; d < depth; d++)
			ids[fr[d]] = 1;
	}
	fputs("{\"$schema\":\"" SCHEMA_URL "\",\n\"shared\":{\"frames\":[", out);
	/* Lua frames that read the same are one frame: speedscope keys frames by their index,
	 * so an exact memory profile's two @app.lua:17 were two rows of its Sandwich view. */
	struct lp_iset lua = { 0 };
	uint32_t next = 0;
	for (size_t i = 0; i < nframes; i++) {
		if (!ids[i])
			continue;
		const struct lp_frame *f = lp_profile_frame(p, (uint32_t)i);
		if (f->kind == LP_FK_LUA) {
			struct same_key k = { p, f };
			uint64_t h = lp_hash_bytes(f->name, strlen(f->name), f->line);
			uint32_t first;
			if (lp_iset_find(&lua, h, same_eq, &k, &first)) {
				ids[i] = ids[first];
				continue;
			}
			if (lp_iset_insert(&lua, h, (uint32_t)i))
				goto oom;
		}
		fputs(next ? ",\n" : "\n", out);
		ids[i] = next++;
		if (write_frame(out, f, &buf, &cap))
			goto oom;
	}
	lp_iset_free(&lua);
	free(buf);
	fputs("]},\n\"profiles\":[", out);
	for (unsigned v = 0; v < nvalues; v++) {
		if (v)
			fputs(",\n", out);
		write_profile(out, p, v, name, ids);
	}
	free(ids);
	fputs("],\n\"name\":", out);
	json_cstr(out, name);
	fprintf(out, ",\n\"activeProfileIndex\":%u,\n\"exporter\":\"luaprof\"}\n", active);
	return lp_render_flushed(out, "speedscope", err, errlen);
oom:
	lp_iset_free(&lua);
	free(ids);
	free(buf);
	lp_render_err(err, errlen, "speedscope: out of memory");
	return -ENOMEM;
}
