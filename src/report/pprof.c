/*
** pprof renderer: the aggregated profile as a gzipped profile.proto message.
**
** The message is streamed, not built whole: protobuf merges concatenated messages by
** appending their repeated fields, so we pack a series of partial Profiles (the sample
** types, then one per sample, location and function, then the string table in batches and
** the scalars last) with protobuf-c and deflate each straight into the output. Memory is
** the string table, the function index and one frame-to-function entry per frame, plus
** scratch for the deepest stack and the largest chunk; never the whole encoded profile.
**
** Mapping to pprof:
**   - every value column is a sample_type; default_sample_type is column o->value;
**   - a CPU profile's sample counts get a second sample type, the time they stand for
**     (count x period, saturating): cpu/nanoseconds, wall/nanoseconds with --clock wall,
**     as Go's CPU profiles carry samples/count and cpu/nanoseconds; it is the default
**     type, so that readers show time (go tool pprof, Pyroscope). Only the encoding has
**     it: the other renderers keep the model's one column. Without a period (Tarantool's
**     streams) there is no time to give, and the counts stay alone;
**   - one Sample per distinct stack, location_id leaf first;
**   - one Location per frame, id = frame id + 1, with one Line, all in one Mapping marked
**     as symbolized (so readers do not try to symbolize addresses we cannot resolve);
**   - Lua frames share the Function of their Lua function ("chunk:firstline", filename =
**     chunk without its '@'/'=' prefix, start_line = first line, a main chunk's 1) and
**     their Line carries the current line (by function, the first line), so pprof's
**     function view merges lines and -lines separates them;
**   - C frames: Function = symbol (+ object file), Location.address = frame address;
**   - builtins, traces, VM states and INTERNAL: one Function per display label;
**   - period: CPU profiles cpu/nanoseconds (the sampling interval; wall/nanoseconds with
**     --clock wall), memory profiles
**     space/bytes (the sampling interval, 1 for exact mode), as Go's profiles give them.
**     A CPU profile without an interval (Tarantool's) has no period, and a comment says
**     its values are sample counts.
** All strings are made valid UTF-8 (invalid sequences become U+FFFD): protobuf `string`
** fields must be, and readers built on generated code (protobuf-go, ...) reject the
** message otherwise; frame names come from the traced process and may be any bytes.
*/
#include "report/render.h"
#include "util/utf8.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profile.pb-c.h"
#include "util/grow.h"
#include "util/iset.h"

typedef Perftools__Profiles__Profile PbProfile;
typedef Perftools__Profiles__ValueType PbValueType;
typedef Perftools__Profiles__Sample PbSample;
typedef Perftools__Profiles__Mapping PbMapping;
typedef Perftools__Profiles__Location PbLocation;
typedef Perftools__Profiles__Line PbLine;
typedef Perftools__Profiles__Function PbFunction;

#define ZBUF_SIZE 65536
#define STR_BATCH 4096 /* strings per packed chunk of the string table */

struct func {
	int64_t name;       /* string index */
	int64_t file;       /* string index, 0 if none */
	int64_t start_line; /* 0 if unknown */
};

struct pp {
	const struct lp_profile *p;
	FILE *out;
	char *err;
	size_t errlen;

	char **strs;              /* string table; strs[0] = "" */
	size_t nstrs, strcap;
	struct lp_iset strset;

	struct func *funcs;       /* function id = index + 1 */
	size_t nfuncs, funccap;
	struct lp_iset funcset;

	uint64_t *frame_func;     /* per frame: function id */
	int64_t vtype[LP_MAX_VALUES + 1][2]; /* sample types: type and unit string indices */
	unsigned ntypes;          /* the profile's value columns, + 1 with the time column */
	int64_t period;           /* time column: nanoseconds per sample counted */

	char *tmp;                /* scratch: formatted names */
	size_t tmpcap;
	char *san;                /* scratch: sanitized string being interned */
	size_t sancap;
	uint8_t *pack;            /* scratch: one packed chunk */
	size_t packcap;
	uint64_t *locs;           /* scratch: location ids of one sample */
	size_t loccap;

	z_stream z;
	int zinit;                /* deflateInit2 succeeded */
	unsigned char *zbuf;      /* ZBUF_SIZE bytes of compressed output */
};

static int fail(struct pp *w, int rc, const char *fmt, ...)
{
	if (w->err && w->errlen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(w->err, w->errlen, fmt, ap);
		va_end(ap);
	}
	return rc;
}

static int nomem(struct pp *w)
{
	return fail(w, -ENOMEM, "pprof: out of memory");
}

/* -- UTF-8 ------------------------------------------------------------------ */

/* Copies s into w->san with ill-formed sequences replaced by U+FFFD; sets its length. */
static int sanitize(struct pp *w, const char *s, size_t *outlen)
{
	size_t n = strlen(s);
	/* Each replaced byte grows to at most 3 bytes. */
	if (n > (SIZE_MAX - 1) / 3 || lp_grow((void **)&w->san, &w->sancap, 3 * n + 1, 1))
		return -ENOMEM;
	const unsigned char *u = (const unsigned char *)s;
	char *o = w->san;
	for (size_t i = 0; i < n;) {
		size_t bad = 0, len = lp_utf8_seq(u + i, n - i, &bad, NULL);
		if (len) {
			memcpy(o, u + i, len);
			o += len;
			i += len;
		} else {
			memcpy(o, "\xEF\xBF\xBD", 3);
			o += 3;
			i += bad;
		}
	}
	*o = '\0';
	*outlen = (size_t)(o - w->san);
	return 0;
}

/* -- String table ----------------------------------------------------------- */

struct str_key {
	const struct pp *w;
	const char *s;
};

static int str_eq(const void *ctx, uint32_t idx)
{
	const struct str_key *k = ctx;
	return strcmp(k->w->strs[idx], k->s) == 0;
}

/* Index of the sanitized string s in the string table; NULL and "" are index 0. */
static int intern(struct pp *w, const char *s, int64_t *idx)
{
	size_t len;
	if (!s || !*s) {
		*idx = 0;
		return 0;
	}
	if (sanitize(w, s, &len))
		return -ENOMEM;
	struct str_key k = { w, w->san };
	uint64_t h = lp_hash_bytes(w->san, len, 0);
	uint32_t found;
	if (lp_iset_find(&w->strset, h, str_eq, &k, &found)) {
		*idx = found;
		return 0;
	}
	if (w->nstrs >= UINT32_MAX ||
	    lp_grow((void **)&w->strs, &w->strcap, w->nstrs + 1, sizeof(*w->strs)))
		return -ENOMEM;
	char *copy = malloc(len + 1);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, w->san, len + 1);
	if (lp_iset_insert(&w->strset, h, (uint32_t)w->nstrs)) {
		free(copy);
		return -ENOMEM;
	}
	w->strs[w->nstrs] = copy;
	*idx = (int64_t)w->nstrs++;
	return 0;
}

/* printf into w->tmp. */
static int format(struct pp *w, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(w->tmp, w->tmpcap, fmt, ap);
		va_end(ap);
		if (n < 0)
			return -EINVAL;
		if ((size_t)n < w->tmpcap)
			return 0;
		if (lp_grow((void **)&w->tmp, &w->tmpcap, (size_t)n + 1, 1))
			return -ENOMEM;
	}
}

static int frame_label(struct pp *w, const struct lp_frame *f)
{
	for (;;) {
		int n = lp_frame_label(f, w->tmp, w->tmpcap);
		if (n < 0)
			return -EINVAL;
		if ((size_t)n < w->tmpcap)
			return 0;
		if (lp_grow((void **)&w->tmp, &w->tmpcap, (size_t)n + 1, 1))
			return -ENOMEM;
	}
}

/* Lua chunk name as a file name: "@app.lua" and "=stdin" lose their prefix. */
static const char *chunk_file(const char *chunk)
{
	return chunk[0] == '@' || chunk[0] == '=' ? chunk + 1 : chunk;
}

/* -- Functions -------------------------------------------------------------- */

struct func_key {
	const struct pp *w;
	const struct func *f;
};

static int func_eq(const void *ctx, uint32_t idx)
{
	const struct func_key *k = ctx;
	const struct func *a = &k->w->funcs[idx];
	return a->name == k->f->name && a->file == k->f->file &&
	       a->start_line == k->f->start_line;
}

static int func_id(struct pp *w, const struct func *fn, uint64_t *id)
{
	struct func_key k = { w, fn };
	uint64_t h = lp_hash_u64((uint64_t)fn->name ^ lp_hash_u64((uint64_t)fn->file) ^
				 ((uint64_t)fn->start_line << 40));
	uint32_t found;
	if (lp_iset_find(&w->funcset, h, func_eq, &k, &found)) {
		*id = (uint64_t)found + 1;
		return 0;
	}
	if (w->nfuncs >= UINT32_MAX ||
	    lp_grow((void **)&w->funcs, &w->funccap, w->nfuncs + 1, sizeof(*w->funcs)) ||
	    lp_iset_insert(&w->funcset, h, (uint32_t)w->nfuncs))
		return -ENOMEM;
	w->funcs[w->nfuncs] = *fn;
	*id = (uint64_t)++w->nfuncs;
	return 0;
}

/*
** The first line of a Lua frame's function for pprof's Function.start_line, and the line
** of its frame by function (lp_profile_by_function): a main chunk's is 1, where the chunk
** starts (LuaJIT's first line 0 marks a main chunk; pprof's readers take 0 for no line at
** all: go tool pprof -list left the chunk's samples on none, -raw read it ":0"); a
** prototype the symbol table does not know has none (0).
*/
static uint32_t first_line(const struct lp_frame *f)
{
	return f->fline ? f->fline : f->nosym ? 0 : 1;
}

/* The Function a frame belongs to. */
static int frame_func(struct pp *w, const struct lp_frame *f, uint64_t *id)
{
	struct func fn = { 0, 0, 0 };
	int rc = 0;
	switch (f->kind) {
	case LP_FK_LUA:
		/* A function is its chunk and first line (0 for a main chunk; prototypes the
		 * symtab does not know are named apart by the reader), named as a function:
		 * "@app.lua:2" read as a line (an exact memory profile's report names the
		 * allocating line so), a main chunk's as line 0. Not the top list's "function
		 * <@app.lua:2>": go tool pprof takes what is between <> or () in a name it
		 * cannot demangle for C++ template or call arguments and drops it. */
		if (f->fline)
			rc = format(w, "function %s:%" PRIu32, f->name, f->fline);
		else if (!f->nosym)
			rc = format(w, "main chunk %s", f->name);
		else /* a prototype the symbol table does not know: its stand-in name */
			rc = format(w, "%s", f->name);
		fn.start_line = first_line(f);
		if (!rc)
			rc = intern(w, w->tmp, &fn.name);
		if (!rc)
			rc = intern(w, chunk_file(f->name), &fn.file);
		break;
	case LP_FK_C:
		rc = intern(w, f->name, &fn.name);
		if (!rc)
			rc = intern(w, f->file, &fn.file);
		break;
	case LP_FK_TRACE:
		rc = frame_label(w, f);
		if (!rc)
			rc = intern(w, w->tmp, &fn.name);
		if (!rc)
			rc = intern(w, chunk_file(f->name), &fn.file);
		break;
	default:
		rc = frame_label(w, f);
		if (!rc)
			rc = intern(w, w->tmp, &fn.name);
		break;
	}
	if (rc)
		return rc;
	return func_id(w, &fn, id);
}

/* -- Output ----------------------------------------------------------------- */

static int write_out(struct pp *w, size_t have)
{
	if (!have)
		return 0;
	errno = 0;
	if (fwrite(w->zbuf, 1, have, w->out) != have || ferror(w->out)) {
		int e = errno ? errno : EIO;
		return fail(w, -e, "pprof: write error: %s", strerror(e));
	}
	return 0;
}

/* Deflates len bytes (flush = Z_NO_FLUSH) or finishes the gzip stream (Z_FINISH). */
static int zwrite(struct pp *w, const void *data, size_t len, int flush)
{
	const unsigned char *d = data;
	do {
		uInt chunk = len > UINT_MAX ? UINT_MAX : (uInt)len;
		int last = chunk == len;
		int fl = last ? flush : Z_NO_FLUSH;
		w->z.next_in = (Bytef *)d;
		w->z.avail_in = chunk;
		int zr;
		do {
			w->z.next_out = w->zbuf;
			w->z.avail_out = ZBUF_SIZE;
			zr = deflate(&w->z, fl);
			if (zr == Z_STREAM_ERROR)
				return fail(w, -EIO, "pprof: zlib deflate failed: %s",
					    w->z.msg ? w->z.msg : "stream error");
			int rc = write_out(w, ZBUF_SIZE - w->z.avail_out);
			if (rc)
				return rc;
		} while (w->z.avail_out == 0 || (fl == Z_FINISH && zr != Z_STREAM_END));
		if (chunk) /* the final flush passes no data at all */
			d += chunk;
		len -= chunk;
	} while (len);
	return 0;
}

/* Packs one partial Profile and appends it to the stream. */
static int emit(struct pp *w, const PbProfile *part)
{
	size_t n = perftools__profiles__profile__get_packed_size(part);
	if (lp_grow((void **)&w->pack, &w->packcap, n, 1))
		return nomem(w);
	size_t got = perftools__profiles__profile__pack(part, w->pack);
	if (got != n)
		return fail(w, -EINVAL, "pprof: protobuf-c packed %zu bytes, expected %zu", got, n);
	return zwrite(w, w->pack, n, Z_NO_FLUSH);
}

static int emit_sample_types(struct pp *w)
{
	unsigned nv = w->ntypes;
	PbValueType vt[LP_MAX_VALUES + 1];
	PbValueType *vtp[LP_MAX_VALUES + 1];
	for (unsigned i = 0; i < nv; i++) {
		perftools__profiles__value_type__init(&vt[i]);
		vt[i].type = w->vtype[i][0];
		vt[i].unit = w->vtype[i][1];
		vtp[i] = &vt[i];
	}
	PbProfile part = PERFTOOLS__PROFILES__PROFILE__INIT;
	part.n_sample_type = nv;
	part.sample_type = vtp;
	return emit(w, &part);
}

/* v x period, clamped to the int64_t range: counts come from untrusted streams. */
static int64_t times(int64_t v, int64_t period)
{
	int64_t r;
	if (__builtin_mul_overflow(v, period, &r))
		return v < 0 ? INT64_MIN : INT64_MAX;
	return r;
}

static int emit_samples(struct pp *w)
{
	size_t ns = lp_profile_nstacks(w->p);
	unsigned nv = lp_profile_nvalues(w->p);
	int64_t vals[LP_MAX_VALUES + 1];
	for (size_t i = 0; i < ns; i++) {
		const uint32_t *frames;
		const int64_t *v;
		size_t depth;
		lp_profile_stack(w->p, i, &frames, &depth, &v);
		if (lp_grow((void **)&w->locs, &w->loccap, depth + 1, sizeof(*w->locs)))
			return nomem(w);
		for (size_t d = 0; d < depth; d++)
			w->locs[d] = (uint64_t)frames[depth - 1 - d] + 1; /* leaf first */
		memcpy(vals, v, nv * sizeof(*vals));
		if (w->ntypes > nv)
			vals[nv] = times(v[0], w->period);
		PbSample s = PERFTOOLS__PROFILES__SAMPLE__INIT;
		PbSample *sp = &s;
		s.n_location_id = depth;
		s.location_id = w->locs;
		s.n_value = w->ntypes;
		s.value = vals;
		PbProfile part = PERFTOOLS__PROFILES__PROFILE__INIT;
		part.n_sample = 1;
		part.sample = &sp;
		int rc = emit(w, &part);
		if (rc)
			return rc;
	}
	return 0;
}

/*
** One mapping for every location, flagged as already symbolized: without it pprof invents
** an anonymous mapping and tries (and fails) to symbolize it ("Main binary filename not
** available."). The model keeps no object ranges or build ids, so it covers no addresses.
** Its file is the profiled program, the command line's first word when the stream has
** one (go tool pprof prints it as "File:").
*/
static int emit_mapping(struct pp *w)
{
	PbMapping m = PERFTOOLS__PROFILES__MAPPING__INIT;
	PbMapping *mp = &m;
	const char *title = lp_profile_cmeta(w->p)->title;
	if (title && *title) {
		char prog[256];
		size_t n = strcspn(title, " \t");
		snprintf(prog, sizeof(prog), "%.*s", (int)(n < sizeof(prog) ? n : sizeof(prog) - 1),
			 title);
		if (intern(w, prog, &m.filename))
			return nomem(w);
	}
	m.id = 1;
	m.has_functions = 1;
	m.has_filenames = 1;
	m.has_line_numbers = 1;
	PbProfile part = PERFTOOLS__PROFILES__PROFILE__INIT;
	part.n_mapping = 1;
	part.mapping = &mp;
	return emit(w, &part);
}

static int emit_locations(struct pp *w)
{
	size_t nf = lp_profile_nframes(w->p);
	for (size_t i = 0; i < nf; i++) {
		const struct lp_frame *f = lp_profile_frame(w->p, (uint32_t)i);
		PbLine line = PERFTOOLS__PROFILES__LINE__INIT;
		PbLine *linep = &line;
		line.function_id = w->frame_func[i];
		if (f->kind == LP_FK_LUA && f->func)
			line.line = first_line(f); /* a function as a whole: its first line */
		else if (f->kind == LP_FK_LUA || f->kind == LP_FK_TRACE)
			line.line = f->line;
		PbLocation loc = PERFTOOLS__PROFILES__LOCATION__INIT;
		PbLocation *locp = &loc;
		loc.id = (uint64_t)i + 1;
		loc.mapping_id = 1;
		if (f->kind == LP_FK_C)
			loc.address = f->addr;
		loc.n_line = 1;
		loc.line = &linep;
		PbProfile part = PERFTOOLS__PROFILES__PROFILE__INIT;
		part.n_location = 1;
		part.location = &locp;
		int rc = emit(w, &part);
		if (rc)
			return rc;
	}
	return 0;
}

static int emit_functions(struct pp *w)
{
	for (size_t i = 0; i < w->nfuncs; i++) {
		PbFunction fn = PERFTOOLS__PROFILES__FUNCTION__INIT;
		PbFunction *fnp = &fn;
		fn.id = (uint64_t)i + 1;
		fn.name = w->funcs[i].name;
		fn.system_name = w->funcs[i].name;
		fn.filename = w->funcs[i].file;
		fn.start_line = w->funcs[i].start_line;
		PbProfile part = PERFTOOLS__PROFILES__PROFILE__INIT;
		part.n_function = 1;
		part.function = &fnp;
		int rc = emit(w, &part);
		if (rc)
			return rc;
	}
	return 0;
}

static int emit_strings(struct pp *w)
{
	for (size_t i = 0; i < w->nstrs; i += STR_BATCH) {
		PbProfile part = PERFTOOLS__PROFILES__PROFILE__INIT;
		part.n_string_table = w->nstrs - i < STR_BATCH ? w->nstrs - i : STR_BATCH;
		part.string_table = w->strs + i;
		int rc = emit(w, &part);
		if (rc)
			return rc;
	}
	return 0;
}

/* -- Renderer --------------------------------------------------------------- */

static void pp_free(struct pp *w)
{
	for (size_t i = 0; i < w->nstrs; i++)
		free(w->strs[i]);
	free(w->strs);
	lp_iset_free(&w->strset);
	free(w->funcs);
	lp_iset_free(&w->funcset);
	free(w->frame_func);
	free(w->tmp);
	free(w->san);
	free(w->pack);
	free(w->locs);
	if (w->zinit)
		deflateEnd(&w->z);
	free(w->zbuf);
}

/* Interns every string and function first, then streams the message. */
static int render(struct pp *w, unsigned value)
{
	const struct lp_profile *p = w->p;
	const struct lp_profile_meta *m = lp_profile_cmeta(p);
	size_t nf = lp_profile_nframes(p);
	unsigned nv = lp_profile_nvalues(p);
	int rc;

	if (value >= nv)
		return fail(w, -EINVAL, "pprof: value column %u out of range (profile has %u)",
			    value, nv);
	w->strs = malloc(64 * sizeof(*w->strs));
	w->frame_func = malloc((nf + 1) * sizeof(*w->frame_func));
	w->zbuf = malloc(ZBUF_SIZE);
	if (!w->strs || !w->frame_func || !w->zbuf)
		return nomem(w);
	w->strcap = 64;
	w->strs[0] = calloc(1, 1); /* string_table[0] = "" */
	if (!w->strs[0])
		return nomem(w);
	w->nstrs = 1;

	for (unsigned i = 0; i < nv; i++) {
		const struct lp_value_type *t = lp_profile_value_type(p, i);
		if (intern(w, t->type, &w->vtype[i][0]) || intern(w, t->unit, &w->vtype[i][1]))
			return nomem(w);
	}
	w->ntypes = nv;
	int cpu = m->event ? strcmp(m->event, "cpu") == 0 : m->period_ns != 0;
	/* The time the counts stand for: period_ns is the mean interval a sample stands for
	 * (the interval asked, or more with ticks that have no sample of their own: the POSIX
	 * timer's overruns, paced and dropped ticks), and a signal of the perf clock standing
	 * for several intervals is in the counts as that many samples; so count x period_ns
	 * is the time sampled, as pprof's period says. */
	const struct lp_value_type *t0 = lp_profile_value_type(p, 0);
	if (cpu && nv == 1 && m->period_ns && m->period_ns <= INT64_MAX &&
	    !strcmp(t0->type, "samples") && !strcmp(t0->unit, "count")) {
		if (intern(w, m->wall_clock ? "wall" : "cpu", &w->vtype[nv][0]) ||
		    intern(w, "nanoseconds", &w->vtype[nv][1]))
			return nomem(w);
		w->period = (int64_t)m->period_ns;
		w->ntypes = nv + 1;
	}
	for (size_t i = 0; i < nf; i++) {
		rc = frame_func(w, lp_profile_frame(p, (uint32_t)i), &w->frame_func[i]);
		if (rc == -ENOMEM)
			return nomem(w);
		if (rc)
			return fail(w, rc, "pprof: cannot format frame %zu", i);
	}

	/* The scalars go last: time_nanos and duration_nanos from the agent's meta (0, so
	 * absent, for streams without them: Tarantool's). */
	PbValueType period_type = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
	PbProfile tail = PERFTOOLS__PROFILES__PROFILE__INIT;
	tail.time_nanos = m->start_unix_ns > INT64_MAX ? INT64_MAX : (int64_t)m->start_unix_ns;
	tail.duration_nanos = m->duration_ns > INT64_MAX ? INT64_MAX : (int64_t)m->duration_ns;
	int64_t comments[2];
	size_t ncomments = 0;
	if (m->title && *m->title) {
		if (intern(w, m->title, &comments[ncomments++]))
			return nomem(w);
	}
	if (cpu && !m->period_ns) {
		/* No interval (Tarantool's streams record none): no period to give, and a
		 * period of 0 cpu nanoseconds would read as a measured one. The comment is
		 * where pprof's readers show it (-raw, -comments). */
		if (intern(w, "sampling interval unknown (the stream records none): values are "
			      "sample counts, not time", &comments[ncomments++]))
			return nomem(w);
	} else if (cpu) {
		if (intern(w, m->wall_clock ? "wall" : "cpu", &period_type.type) ||
		    intern(w, "nanoseconds", &period_type.unit))
			return nomem(w);
		tail.period_type = &period_type;
		tail.period = m->period_ns > INT64_MAX ? INT64_MAX : (int64_t)m->period_ns;
	} else if (m->event && !strncmp(m->event, "memory", 6) && m->period_bytes) {
		/* As Go's heap profiles say it: bytes allocated between two samples. */
		if (intern(w, "space", &period_type.type) || intern(w, "bytes", &period_type.unit))
			return nomem(w);
		tail.period_type = &period_type;
		tail.period = m->period_bytes > INT64_MAX ? INT64_MAX : (int64_t)m->period_bytes;
	}
	tail.n_comment = ncomments;
	tail.comment = comments;
	tail.default_sample_type = w->vtype[w->ntypes > nv ? nv : value][0];

	int zr = deflateInit2(&w->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
			      Z_DEFAULT_STRATEGY);
	if (zr != Z_OK)
		return fail(w, zr == Z_MEM_ERROR ? -ENOMEM : -EIO, "pprof: zlib init failed: %s",
			    zError(zr));
	w->zinit = 1;

	/* Fields in number order, as protobuf encoders write them. */
	if ((rc = emit_sample_types(w)) || (rc = emit_samples(w)) || (rc = emit_mapping(w)) ||
	    (rc = emit_locations(w)) || (rc = emit_functions(w)) || (rc = emit_strings(w)) ||
	    (rc = emit(w, &tail)) || (rc = zwrite(w, NULL, 0, Z_FINISH)))
		return rc;
	errno = 0;
	if (fflush(w->out) || ferror(w->out)) {
		int e = errno ? errno : EIO;
		return fail(w, -e, "pprof: write error: %s", strerror(e));
	}
	return 0;
}

int lp_render_pprof(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
		    char *err, size_t errlen)
{
	struct pp w;
	memset(&w, 0, sizeof(w));
	w.p = p;
	w.out = out;
	w.err = err;
	w.errlen = errlen;
	int rc = render(&w, o ? o->value : 0);
	pp_free(&w);
	return rc;
}
