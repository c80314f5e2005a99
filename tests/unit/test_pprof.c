/*
** Unit tests for the pprof renderer: render, gunzip, decode with protobuf-c, compare.
*/
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "profile.pb-c.h"
#include "report/profile.h"
#include "report/render.h"
#include "unit.h"

typedef Perftools__Profiles__Profile PbProfile;

/* -- Helpers ---------------------------------------------------------------- */

static uint32_t fid(struct lp_profile *p, enum lp_frame_kind kind, const char *name,
		    const char *file, uint32_t line, uint32_t fline, uint32_t traceno,
		    uint64_t addr)
{
	struct lp_frame f = { kind, name, file, line, fline, traceno, addr, 0, 0, 0 };
	uint32_t id = UINT32_MAX;
	CHECK_EQ(lp_profile_frame_id(p, &f, &id), 0);
	return id;
}

static void add(struct lp_profile *p, const uint32_t *frames, size_t depth, int64_t v0,
		int64_t v1, int64_t v2, int64_t v3)
{
	int64_t v[4] = { v0, v1, v2, v3 };
	CHECK_EQ(lp_profile_add(p, frames, depth, v), 0);
}

/* Renders p, checks the gzip magic, inflates and unpacks. NULL on failure. */
static PbProfile *render_decode(const struct lp_profile *p, unsigned value)
{
	struct lp_render_opts o = { .value = value };
	char err[256] = "";
	FILE *f = tmpfile();
	CHECK(f != NULL);
	if (!f)
		return NULL;
	int rc = lp_render_pprof(p, &o, f, err, sizeof(err));
	CHECK_EQ(rc, 0);
	if (rc) {
		fprintf(stderr, "  render: %s\n", err);
		fclose(f);
		return NULL;
	}
	long n = ftell(f);
	rewind(f);
	unsigned char *gz = malloc(n > 0 ? (size_t)n : 1);
	CHECK(gz != NULL);
	CHECK_EQ(fread(gz, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	CHECK(n > 2 && gz[0] == 0x1f && gz[1] == 0x8b);

	size_t cap = 1 << 16, len = 0;
	unsigned char *raw = malloc(cap);
	z_stream z;
	memset(&z, 0, sizeof(z));
	CHECK_EQ(inflateInit2(&z, 15 + 16), Z_OK);
	z.next_in = gz;
	z.avail_in = (uInt)n;
	int zr;
	do {
		if (len == cap) {
			cap *= 2;
			raw = realloc(raw, cap);
		}
		z.next_out = raw + len;
		z.avail_out = (uInt)(cap - len);
		zr = inflate(&z, Z_NO_FLUSH);
		len = cap - z.avail_out;
	} while (zr == Z_OK);
	CHECK_EQ(zr, Z_STREAM_END);
	CHECK_EQ(z.avail_in, 0); /* nothing after the gzip member */
	inflateEnd(&z);
	free(gz);

	PbProfile *pb = perftools__profiles__profile__unpack(NULL, len, raw);
	free(raw);
	CHECK(pb != NULL);
	return pb;
}

static const char *str(const PbProfile *pb, int64_t i)
{
	if (i < 0 || (size_t)i >= pb->n_string_table)
		return "(bad string index)";
	return pb->string_table[i];
}

static const Perftools__Profiles__Location *loc(const PbProfile *pb, uint64_t id)
{
	if (id - 1 < pb->n_location && pb->location[id - 1]->id == id)
		return pb->location[id - 1];
	for (size_t i = 0; i < pb->n_location; i++)
		if (pb->location[i]->id == id)
			return pb->location[i];
	return NULL;
}

static const Perftools__Profiles__Function *func(const PbProfile *pb, uint64_t id)
{
	if (id - 1 < pb->n_function && pb->function[id - 1]->id == id)
		return pb->function[id - 1];
	for (size_t i = 0; i < pb->n_function; i++)
		if (pb->function[i]->id == id)
			return pb->function[i];
	return NULL;
}

/* Strict UTF-8 check, written independently of the renderer's. */
static int valid_utf8(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	while (*u) {
		uint32_t cp;
		int n;
		if (u[0] < 0x80) {
			u++;
			continue;
		} else if ((u[0] & 0xE0) == 0xC0) {
			n = 1;
			cp = u[0] & 0x1F;
		} else if ((u[0] & 0xF0) == 0xE0) {
			n = 2;
			cp = u[0] & 0x0F;
		} else if ((u[0] & 0xF8) == 0xF0) {
			n = 3;
			cp = u[0] & 0x07;
		} else {
			return 0;
		}
		for (int i = 1; i <= n; i++) {
			if ((u[i] & 0xC0) != 0x80)
				return 0;
			cp = cp << 6 | (u[i] & 0x3F);
		}
		static const uint32_t min[4] = { 0, 0x80, 0x800, 0x10000 };
		if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		u += n + 1;
	}
	return 1;
}

/* Checks the invariants every rendered profile must satisfy; ntypes: its sample types. */
static void check_common(const PbProfile *pb, const struct lp_profile *p, size_t ntypes)
{
	CHECK(pb->n_string_table >= 1);
	if (pb->n_string_table)
		CHECK_STR(pb->string_table[0], "");
	for (size_t i = 0; i < pb->n_string_table; i++) {
		CHECK(valid_utf8(pb->string_table[i]));
		if (i > 0)
			CHECK(pb->string_table[i][0] != '\0');
	}
	CHECK_EQ(pb->n_location, lp_profile_nframes(p));
	for (size_t i = 0; i < pb->n_location; i++) {
		CHECK_EQ(pb->location[i]->id, i + 1);
		CHECK_EQ(pb->location[i]->mapping_id, 1);
		CHECK_EQ(pb->location[i]->n_line, 1);
		CHECK(func(pb, pb->location[i]->line[0]->function_id) != NULL);
	}
	for (size_t i = 0; i < pb->n_function; i++)
		CHECK_EQ(pb->function[i]->id, i + 1);
	CHECK_EQ(pb->n_sample, lp_profile_nstacks(p));
	CHECK_EQ(pb->n_sample_type, ntypes);
	for (size_t i = 0; i < pb->n_sample; i++)
		CHECK_EQ(pb->sample[i]->n_value, ntypes);
}

/* -- Tests ------------------------------------------------------------------ */

static const struct lp_value_type mem_types[4] = {
	{ "alloc_space", "bytes" },
	{ "alloc_objects", "count" },
	{ "inuse_space", "bytes" },
	{ "inuse_objects", "count" },
};

/* Frame ids of the memory fixture. */
enum { F_A12, F_A15, F_MAIN, F_GC, F_MALLOC, F_TRACE, F_PCALL, F_VMGC, F_BAD, F_INTERNAL, F_N };

static struct lp_profile *mem_fixture(uint32_t *ids)
{
	struct lp_profile *p = lp_profile_new(4, mem_types);
	CHECK(p != NULL);
	if (!p)
		return NULL;
	ids[F_A12] = fid(p, LP_FK_LUA, "@app.lua", NULL, 12, 10, 0, 0x7f00);
	ids[F_A15] = fid(p, LP_FK_LUA, "@app.lua", NULL, 15, 10, 0, 0x7f00);
	ids[F_MAIN] = fid(p, LP_FK_LUA, "=stdin", NULL, 3, 1, 0, 0x7e00);
	ids[F_GC] = fid(p, LP_FK_C, "lj_gc_step", "/usr/lib/libluajit-5.1.so.2", 0, 0, 0,
			0x1234);
	ids[F_MALLOC] = fid(p, LP_FK_C, "malloc", NULL, 0, 0, 0, 0x5678);
	ids[F_TRACE] = fid(p, LP_FK_TRACE, "@app.lua", NULL, 7, 5, 3, 0);
	ids[F_PCALL] = fid(p, LP_FK_FFUNC, "pcall", NULL, 0, 0, 0, 0);
	ids[F_VMGC] = fid(p, LP_FK_VMSTATE, "GC", NULL, 0, 0, 0, 0);
	/* invalid lead, truncated 2-byte, valid é, overlong '/', truncated 3-byte at end */
	ids[F_BAD] = fid(p, LP_FK_C, "bad\xff" "a\xc3" "n\xc3\xa9\xc0\xaf" "e\xe2\x82", NULL,
			 0, 0, 0, 0x9abc);
	ids[F_INTERNAL] = fid(p, LP_FK_INTERNAL, "INTERNAL", NULL, 0, 0, 0, 0);
	for (int i = 0; i < F_N; i++)
		CHECK_EQ(ids[i], i);

	uint32_t s0[] = { ids[F_MAIN], ids[F_A12], ids[F_GC] };
	uint32_t s1[] = { ids[F_MAIN], ids[F_A15], ids[F_MALLOC] };
	uint32_t s2[] = { ids[F_MAIN], ids[F_TRACE] };
	uint32_t s3[] = { ids[F_PCALL], ids[F_VMGC] };
	uint32_t s4[] = { ids[F_BAD] };
	uint32_t s5[] = { ids[F_INTERNAL] };
	add(p, s0, 3, 100, 1, 50, 1);
	add(p, s1, 3, 200, 2, 0, 0);
	add(p, s2, 2, 300, 3, 300, 3);
	add(p, s0, 3, 1000, 10, 500, 5); /* accumulates into s0 */
	add(p, s3, 2, 1, 1, 1, 1);
	add(p, s4, 1, 5, 1, 5, 1);
	add(p, s5, 1, 7, 1, 0, 0);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->event = "memory";
	m->title = "luajit app.lua \xff";
	return p;
}

static void test_memory_profile(void)
{
	uint32_t ids[F_N];
	struct lp_profile *p = mem_fixture(ids);
	if (!p)
		return;
	PbProfile *pb = render_decode(p, 2);
	if (!pb) {
		lp_profile_free(p);
		return;
	}
	check_common(pb, p, 4);

	/* Sample types, in column order. */
	CHECK_EQ(pb->n_sample_type, 4);
	for (size_t i = 0; i < pb->n_sample_type && i < 4; i++) {
		CHECK_STR(str(pb, pb->sample_type[i]->type), mem_types[i].type);
		CHECK_STR(str(pb, pb->sample_type[i]->unit), mem_types[i].unit);
	}
	CHECK_STR(str(pb, pb->default_sample_type), "inuse_space");
	CHECK(pb->period_type == NULL);
	CHECK_EQ(pb->period, 0);
	CHECK_EQ(pb->time_nanos, 0);
	CHECK_EQ(pb->duration_nanos, 0);
	CHECK_EQ(pb->n_comment, 1);
	if (pb->n_comment)
		CHECK_STR(str(pb, pb->comment[0]), "luajit app.lua \xEF\xBF\xBD");
	CHECK_EQ(pb->n_mapping, 1);
	if (pb->n_mapping == 1) {
		CHECK_EQ(pb->mapping[0]->id, 1);
		CHECK(pb->mapping[0]->has_functions);
		CHECK(pb->mapping[0]->has_filenames);
		CHECK(pb->mapping[0]->has_line_numbers);
		/* The program, the command line's first word (go tool pprof: "File:"). */
		CHECK_STR(str(pb, pb->mapping[0]->filename), "luajit");
	}

	/* Samples: insertion order, values summed, leaf first. */
	static const int64_t want_vals[7][4] = {
		{ 1100, 11, 550, 6 }, { 200, 2, 0, 0 }, { 300, 3, 300, 3 }, { 1, 1, 1, 1 },
		{ 5, 1, 5, 1 },       { 7, 1, 0, 0 },
	};
	static const int want_locs[7][3] = {
		{ F_GC, F_A12, F_MAIN }, { F_MALLOC, F_A15, F_MAIN }, { F_TRACE, F_MAIN, -1 },
		{ F_VMGC, F_PCALL, -1 }, { F_BAD, -1, -1 },           { F_INTERNAL, -1, -1 },
	};
	static const size_t want_depth[7] = { 3, 3, 2, 2, 1, 1 };
	CHECK_EQ(pb->n_sample, 6);
	for (size_t i = 0; i < pb->n_sample && i < 6; i++) {
		const Perftools__Profiles__Sample *s = pb->sample[i];
		CHECK_EQ(s->n_value, 4);
		for (size_t v = 0; v < s->n_value && v < 4; v++)
			CHECK_EQ(s->value[v], want_vals[i][v]);
		CHECK_EQ(s->n_location_id, want_depth[i]);
		for (size_t d = 0; d < s->n_location_id && d < want_depth[i]; d++)
			CHECK_EQ(s->location_id[d], ids[want_locs[i][d]] + 1);
		CHECK_EQ(s->n_label, 0);
	}

	/* Lua: one Function per Lua function, the current line in the Line. */
	const Perftools__Profiles__Location *l12 = loc(pb, ids[F_A12] + 1);
	const Perftools__Profiles__Location *l15 = loc(pb, ids[F_A15] + 1);
	CHECK(l12 && l15);
	if (l12 && l15) {
		CHECK_EQ(l12->line[0]->line, 12);
		CHECK_EQ(l15->line[0]->line, 15);
		CHECK_EQ(l12->line[0]->function_id, l15->line[0]->function_id);
		CHECK_EQ(l12->address, 0);
		const Perftools__Profiles__Function *fa = func(pb, l12->line[0]->function_id);
		CHECK(fa != NULL);
		if (fa) {
			CHECK_STR(str(pb, fa->name), "function @app.lua:10");
			CHECK_STR(str(pb, fa->filename), "app.lua");
			CHECK_EQ(fa->start_line, 10);
		}
	}
	const Perftools__Profiles__Location *lm = loc(pb, ids[F_MAIN] + 1);
	CHECK(lm != NULL);
	if (lm) {
		CHECK_EQ(lm->line[0]->line, 3);
		const Perftools__Profiles__Function *fm = func(pb, lm->line[0]->function_id);
		CHECK(fm != NULL);
		if (fm) {
			CHECK_STR(str(pb, fm->name), "function =stdin:1");
			CHECK_STR(str(pb, fm->filename), "stdin");
			CHECK_EQ(fm->start_line, 1);
		}
	}

	/* C: symbol, object file, address. */
	const Perftools__Profiles__Location *lg = loc(pb, ids[F_GC] + 1);
	const Perftools__Profiles__Location *lml = loc(pb, ids[F_MALLOC] + 1);
	CHECK(lg && lml);
	if (lg && lml) {
		CHECK_EQ(lg->address, 0x1234);
		CHECK_EQ(lml->address, 0x5678);
		CHECK_EQ(lg->line[0]->line, 0);
		const Perftools__Profiles__Function *fg = func(pb, lg->line[0]->function_id);
		const Perftools__Profiles__Function *fml = func(pb, lml->line[0]->function_id);
		CHECK(fg && fml);
		if (fg && fml) {
			CHECK_STR(str(pb, fg->name), "lj_gc_step");
			CHECK_STR(str(pb, fg->filename), "/usr/lib/libluajit-5.1.so.2");
			CHECK_STR(str(pb, fml->name), "malloc");
			CHECK_EQ(fml->filename, 0);
			CHECK_EQ(fml->start_line, 0);
		}
	}

	/* Trace, builtin, VM state, INTERNAL: functions by label. */
	static const struct {
		int frame;
		const char *name, *file;
		int64_t line;
	} labels[] = {
		{ F_TRACE, "TRACE [3] @app.lua:7", "app.lua", 7 },
		{ F_PCALL, "pcall", "", 0 },
		{ F_VMGC, "GC", "", 0 },
		{ F_INTERNAL, "INTERNAL", "", 0 },
		{ F_BAD, "bad\xEF\xBF\xBD" "a\xEF\xBF\xBD" "n\xc3\xa9\xEF\xBF\xBD\xEF\xBF\xBD"
			 "e\xEF\xBF\xBD", "", 0 },
	};
	for (size_t i = 0; i < sizeof(labels) / sizeof(labels[0]); i++) {
		const Perftools__Profiles__Location *l = loc(pb, ids[labels[i].frame] + 1);
		CHECK(l != NULL);
		if (!l)
			continue;
		CHECK_EQ(l->line[0]->line, labels[i].line);
		const Perftools__Profiles__Function *f = func(pb, l->line[0]->function_id);
		CHECK(f != NULL);
		if (!f)
			continue;
		CHECK_STR(str(pb, f->name), labels[i].name);
		CHECK_STR(str(pb, f->filename), labels[i].file);
	}
	const Perftools__Profiles__Location *lb = loc(pb, ids[F_BAD] + 1);
	if (lb)
		CHECK_EQ(lb->address, 0x9abc);

	/* 10 frames, 2 of them in the same Lua function. */
	CHECK_EQ(pb->n_function, 9);
	/* The string table has no duplicates. */
	for (size_t i = 0; i < pb->n_string_table; i++)
		for (size_t j = i + 1; j < pb->n_string_table; j++)
			CHECK(strcmp(pb->string_table[i], pb->string_table[j]) != 0);

	perftools__profiles__profile__free_unpacked(pb, NULL);
	lp_profile_free(p);
}

static void test_cpu_profile(void)
{
	static const struct lp_value_type t[1] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, t);
	CHECK(p != NULL);
	if (!p)
		return;
	uint32_t a = fid(p, LP_FK_LUA, "@x.lua", NULL, 4, 0, 0, 0); /* main chunk: first line 0 */
	uint32_t b = fid(p, LP_FK_LUA, "@x.lua", NULL, 9, 0, 0, 0);
	uint32_t s[2] = { a, b };
	int64_t v = 42;
	CHECK_EQ(lp_profile_add(p, s, 2, &v), 0);
	CHECK_EQ(lp_profile_add(p, s, 0, &v), 0); /* empty stack */
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->event = "cpu";
	m->period_ns = 1000000;
	m->start_unix_ns = 1795000000123456789ull;
	m->duration_ns = 2500000000ull;
	PbProfile *pb = render_decode(p, 0);
	if (pb) {
		check_common(pb, p, 2);
		/* Counts and the CPU time they stand for, as Go's CPU profiles give them. */
		if (pb->n_sample_type == 2) {
			CHECK_STR(str(pb, pb->sample_type[0]->type), "samples");
			CHECK_STR(str(pb, pb->sample_type[0]->unit), "count");
			CHECK_STR(str(pb, pb->sample_type[1]->type), "cpu");
			CHECK_STR(str(pb, pb->sample_type[1]->unit), "nanoseconds");
		}
		/* The agent's start time and duration, as Go's profiles carry them. */
		CHECK_EQ(pb->time_nanos, 1795000000123456789ll);
		CHECK_EQ(pb->duration_nanos, 2500000000ll);
		CHECK(pb->period_type != NULL);
		if (pb->period_type) {
			CHECK_STR(str(pb, pb->period_type->type), "cpu");
			CHECK_STR(str(pb, pb->period_type->unit), "nanoseconds");
		}
		CHECK_EQ(pb->period, 1000000);
		/* Time by default: go tool pprof shows "Type: cpu" and milliseconds. */
		CHECK_STR(str(pb, pb->default_sample_type), "cpu");
		CHECK_EQ(pb->n_comment, 0);
		/* Both lines belong to the main chunk's one function. */
		CHECK_EQ(pb->n_function, 1);
		const Perftools__Profiles__Location *la = loc(pb, a + 1);
		if (la) {
			const Perftools__Profiles__Function *f = func(pb, la->line[0]->function_id);
			if (f) {
				/* Not "@x.lua:0": a main chunk has no line 0; it starts at 1. */
				CHECK_STR(str(pb, f->name), "main chunk @x.lua");
				CHECK_EQ(f->start_line, 1);
			}
		}
		CHECK_EQ(pb->n_sample, 2);
		if (pb->n_sample == 2) {
			CHECK_EQ(pb->sample[0]->n_location_id, 2);
			CHECK_EQ(pb->sample[0]->location_id[0], b + 1);
			CHECK_EQ(pb->sample[0]->location_id[1], a + 1);
			CHECK_EQ(pb->sample[1]->n_location_id, 0);
			CHECK_EQ(pb->sample[1]->value[0], 42);
			/* 84 samples of 1 ms: the nanoseconds total is samples x interval. */
			int64_t count = 0, ns = 0;
			for (size_t i = 0; i < 2 && pb->sample[i]->n_value == 2; i++) {
				count += pb->sample[i]->value[0];
				ns += pb->sample[i]->value[1];
			}
			CHECK_EQ(count, 84);
			CHECK_EQ(ns, 84 * 1000000ll);
		}
		perftools__profiles__profile__free_unpacked(pb, NULL);
	}
	lp_profile_free(p);
}

/* One stack of `count` samples in a CPU profile of the given period and clock, rendered. */
static PbProfile *cpu_one(struct lp_profile **pp, int64_t count, uint64_t period_ns, int wall,
			  const char *event)
{
	static const struct lp_value_type t[1] = { { "samples", "count" } };
	struct lp_profile *p = *pp = lp_profile_new(1, t);
	CHECK(p != NULL);
	if (!p)
		return NULL;
	uint32_t a = fid(p, LP_FK_C, "main", NULL, 0, 0, 0, 0x400000);
	CHECK_EQ(lp_profile_add(p, &a, 1, &count), 0);
	struct lp_profile_meta *m = lp_profile_meta(p);
	m->event = event;
	m->period_ns = period_ns;
	m->wall_clock = wall;
	return render_decode(p, 0);
}

/* By function (--functions), a Lua frame's Line is its function's first line: a main
 * chunk's 1, where it starts (LuaJIT's first line 0 only marks it; go tool pprof -list
 * left a line 0's samples on no line), as its Function's start_line; an unknown
 * prototype's none (0). */
static void test_main_chunk_by_function(void)
{
	static const struct lp_value_type t[1] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, t);
	CHECK(p != NULL);
	if (!p)
		return;
	uint32_t m = fid(p, LP_FK_LUA, "@x.lua", NULL, 4, 0, 0, 0);
	uint32_t f = fid(p, LP_FK_LUA, "@x.lua", NULL, 12, 10, 0, 0);
	struct lp_frame uf = { LP_FK_LUA, "[unknown function 0x999000]", NULL, 7, 0, 0, 0, 1, 0,
			       0 };
	uint32_t u = UINT32_MAX;
	CHECK_EQ(lp_profile_frame_id(p, &uf, &u), 0);
	uint32_t s1[2] = { m, f }, s2[2] = { m, u };
	int64_t v = 5;
	CHECK_EQ(lp_profile_add(p, s1, 2, &v), 0);
	CHECK_EQ(lp_profile_add(p, s2, 2, &v), 0);
	lp_profile_meta(p)->event = "cpu";
	struct lp_profile *q = lp_profile_by_function(p);
	CHECK(q != NULL);
	PbProfile *pb = q ? render_decode(q, 0) : NULL;
	if (pb) {
		static const struct {
			const char *name;
			int64_t line, start;
		} want[] = { { "main chunk @x.lua", 1, 1 },
			     { "function @x.lua:10", 10, 10 },
			     { "[unknown function 0x999000]", 0, 0 } };
		size_t seen = 0;
		for (size_t i = 0; i < pb->n_location; i++) {
			const Perftools__Profiles__Location *l = pb->location[i];
			CHECK_EQ(l->n_line, 1);
			const Perftools__Profiles__Function *fn =
				l->n_line ? func(pb, l->line[0]->function_id) : NULL;
			CHECK(fn != NULL);
			for (size_t k = 0; fn && k < sizeof(want) / sizeof(want[0]); k++) {
				if (strcmp(str(pb, fn->name), want[k].name))
					continue;
				seen++;
				CHECK_EQ(l->line[0]->line, want[k].line);
				CHECK_EQ(fn->start_line, want[k].start);
			}
		}
		CHECK_EQ(seen, 3);
		perftools__profiles__profile__free_unpacked(pb, NULL);
	}
	lp_profile_free(q);
	lp_profile_free(p);
}

/* The time column's type follows the clock, its values the period (the mean one when the
 * loader made it more than the interval asked); no period, no time column. */
/* A prototype the symbol table does not know (nosym, no first line): its function is named
 * by its stand-in, not "main chunk [unknown function 0x999000]". */
static void test_unknown_function_name(void)
{
	static const struct lp_value_type t[1] = { { "samples", "count" } };
	struct lp_profile *p = lp_profile_new(1, t);
	CHECK(p != NULL);
	if (!p)
		return;
	struct lp_frame uf = { LP_FK_LUA, "[unknown function 0x999000]", NULL, 7, 0, 0, 0, 1, 0,
			       0 };
	uint32_t u = UINT32_MAX;
	CHECK_EQ(lp_profile_frame_id(p, &uf, &u), 0);
	int64_t v = 3;
	CHECK_EQ(lp_profile_add(p, &u, 1, &v), 0);
	lp_profile_meta(p)->event = "cpu";
	PbProfile *pb = render_decode(p, 0);
	if (pb) {
		const Perftools__Profiles__Location *l = loc(pb, u + 1);
		const Perftools__Profiles__Function *f = l ? func(pb, l->line[0]->function_id) : NULL;
		CHECK(f != NULL);
		if (f)
			CHECK_STR(str(pb, f->name), "[unknown function 0x999000]");
		perftools__profiles__profile__free_unpacked(pb, NULL);
	}
	lp_profile_free(p);
}

static void test_cpu_time_column(void)
{
	struct lp_profile *p;
	PbProfile *pb = cpu_one(&p, 7, 10000000, 1, "cpu");
	if (pb) {
		check_common(pb, p, 2);
		if (pb->n_sample_type == 2) {
			CHECK_STR(str(pb, pb->sample_type[1]->type), "wall");
			CHECK_STR(str(pb, pb->sample_type[1]->unit), "nanoseconds");
		}
		CHECK_STR(str(pb, pb->default_sample_type), "wall");
		CHECK_STR(str(pb, pb->period_type->type), "wall");
		if (pb->n_sample == 1 && pb->sample[0]->n_value == 2)
			CHECK_EQ(pb->sample[0]->value[1], 70000000);
		perftools__profiles__profile__free_unpacked(pb, NULL);
	}
	lp_profile_free(p);

	/* 1 ms asked, 1 tick in 160 paced: each sample stands for 1.00625 ms. */
	pb = cpu_one(&p, 160, 1006250, 0, "cpu");
	if (pb) {
		CHECK_EQ(pb->period, 1006250);
		if (pb->n_sample == 1 && pb->sample[0]->n_value == 2)
			CHECK_EQ(pb->sample[0]->value[1], 161000000);
		perftools__profiles__profile__free_unpacked(pb, NULL);
	}
	lp_profile_free(p);

	/* A crafted stream's count: the time saturates. */
	pb = cpu_one(&p, INT64_MAX / 2, 10000000, 0, "cpu");
	if (pb) {
		if (pb->n_sample == 1 && pb->sample[0]->n_value == 2) {
			CHECK_EQ(pb->sample[0]->value[0], INT64_MAX / 2);
			CHECK_EQ(pb->sample[0]->value[1], INT64_MAX);
		}
		perftools__profiles__profile__free_unpacked(pb, NULL);
	}
	lp_profile_free(p);

	/* Tarantool's streams have no interval: counts alone, the default; no period (a
	 * "cpu nanoseconds" period of 0 read as one measured), and a comment saying so. */
	pb = cpu_one(&p, 7, 0, 0, "cpu");
	if (pb) {
		check_common(pb, p, 1);
		CHECK_STR(str(pb, pb->default_sample_type), "samples");
		CHECK(pb->period_type == NULL);
		CHECK_EQ(pb->period, 0);
		CHECK_EQ(pb->n_comment, 1);
		if (pb->n_comment == 1)
			CHECK_STR(str(pb, pb->comment[0]), "sampling interval unknown (the stream "
				  "records none): values are sample counts, not time");
		perftools__profiles__profile__free_unpacked(pb, NULL);
	}
	lp_profile_free(p);
}

/* More strings than one string-table chunk and more output than one zlib buffer. */
static void test_large_profile(void)
{
	static const struct lp_value_type t[2] = { { "samples", "count" },
						   { "cpu", "nanoseconds" } };
	struct lp_profile *p = lp_profile_new(2, t);
	CHECK(p != NULL);
	if (!p)
		return;
	enum { N = 20000 };
	uint32_t root = fid(p, LP_FK_C, "main", NULL, 0, 0, 0, 0x400000);
	for (unsigned i = 0; i < N; i++) {
		char name[64];
		snprintf(name, sizeof(name), "fn_%u_%08x", i, i * 2654435761u);
		uint32_t s[2] = { root, fid(p, LP_FK_C, name, NULL, 0, 0, 0, 0x1000 + i) };
		int64_t v[2] = { i + 1, (int64_t)(i + 1) * 10000000 };
		CHECK_EQ(lp_profile_add(p, s, 2, v), 0);
	}
	lp_profile_meta(p)->period_ns = 10000000; /* no event: a period means CPU */
	PbProfile *pb = render_decode(p, 1);
	if (pb) {
		check_common(pb, p, 2); /* its own time column: no third one */
		CHECK_EQ(pb->n_function, N + 1);
		CHECK_EQ(pb->n_sample, N);
		CHECK(pb->period_type != NULL);
		CHECK_STR(str(pb, pb->default_sample_type), "cpu");
		int ok = 1;
		for (size_t i = 0; i < pb->n_sample && ok; i++) {
			const Perftools__Profiles__Sample *s = pb->sample[i];
			const Perftools__Profiles__Location *l = loc(pb, s->location_id[0]);
			char name[64];
			snprintf(name, sizeof(name), "fn_%zu_%08x", i, (unsigned)(i * 2654435761u));
			const Perftools__Profiles__Function *f =
				l ? func(pb, l->line[0]->function_id) : NULL;
			ok = s->value[0] == (int64_t)i + 1 && s->location_id[1] == root + 1 && f &&
			     strcmp(str(pb, f->name), name) == 0 && l->address == 0x1000 + i;
			CHECK(ok);
		}
		perftools__profiles__profile__free_unpacked(pb, NULL);
	}
	lp_profile_free(p);
}

/* Sanitizing follows Unicode's "maximal subpart" practice: one U+FFFD per broken sequence. */
static void test_utf8(void)
{
	static const struct lp_value_type t[1] = { { "samples\xff", "count" } };
	struct lp_profile *p = lp_profile_new(1, t);
	CHECK(p != NULL);
	if (!p)
		return;
	/* 4-byte emoji, truncated 4-byte, surrogate, above U+10FFFF, lone continuation */
	uint32_t a = fid(p, LP_FK_LUA, "@\xF0\x9F\x98\x80/\xF0\x9F\x98x\xED\xA0\x80"
			 "\xF4\x90\x80\x80\x80.lua", NULL, 2, 1, 0, 0);
	int64_t v = 1;
	CHECK_EQ(lp_profile_add(p, &a, 1, &v), 0);
	PbProfile *pb = render_decode(p, 0);
	if (pb) {
		check_common(pb, p, 1); /* no event, no period: not a CPU profile */
#define R "\xEF\xBF\xBD"
		const char *file = "\xF0\x9F\x98\x80/" R "x" R R R R R R R R ".lua";
		const Perftools__Profiles__Location *l = loc(pb, a + 1);
		const Perftools__Profiles__Function *f = l ? func(pb, l->line[0]->function_id) : NULL;
		CHECK(f != NULL);
		if (f) {
			char name[128];
			snprintf(name, sizeof(name), "function @%s:1", file);
			CHECK_STR(str(pb, f->name), name);
			CHECK_STR(str(pb, f->filename), file);
		}
		if (pb->n_sample_type == 1)
			CHECK_STR(str(pb, pb->sample_type[0]->type), "samples" R);
#undef R
		perftools__profiles__profile__free_unpacked(pb, NULL);
	}
	lp_profile_free(p);
}

static void test_errors(void)
{
	uint32_t ids[F_N];
	struct lp_profile *p = mem_fixture(ids);
	if (!p)
		return;
	struct lp_render_opts o = { .value = 0 };
	char err[256];

	/* A stream that cannot be written: fwrite fails with EBADF. */
	FILE *ro = fopen("/dev/null", "r");
	CHECK(ro != NULL);
	if (ro) {
		err[0] = '\0';
		int rc = lp_render_pprof(p, &o, ro, err, sizeof(err));
		CHECK(rc < 0);
		CHECK(strncmp(err, "pprof: write error", 18) == 0);
		CHECK(strchr(err, '\n') == NULL);
		fclose(ro);
	}
	/* A full device: the error shows up at the latest at fflush. */
	FILE *full = fopen("/dev/full", "w");
	if (full) {
		err[0] = '\0';
		int rc = lp_render_pprof(p, &o, full, err, sizeof(err));
		CHECK_EQ(rc, -ENOSPC);
		CHECK(strncmp(err, "pprof: write error", 18) == 0);
		fclose(full);
	}
	/* A value column the profile does not have. */
	o.value = 4;
	FILE *f = tmpfile();
	CHECK(f != NULL);
	if (f) {
		err[0] = '\0';
		CHECK_EQ(lp_render_pprof(p, &o, f, err, sizeof(err)), -EINVAL);
		CHECK(err[0] != '\0');
		fclose(f);
	}
	lp_profile_free(p);
}

int main(void)
{
	RUN(test_memory_profile);
	RUN(test_cpu_profile);
	RUN(test_unknown_function_name);
	RUN(test_main_chunk_by_function);
	RUN(test_cpu_time_column);
	RUN(test_large_profile);
	RUN(test_utf8);
	RUN(test_errors);
	return UNIT_RESULT();
}
