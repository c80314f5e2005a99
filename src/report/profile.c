/*
** Aggregated profile: interned frames, distinct stacks and their values.
*/
#include "report/profile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libiberty/demangle.h>

#include "util/addrmap.h"
#include "util/grow.h"
#include "util/iset.h"

struct stack {
	size_t off;      /* into stackbuf */
	uint32_t depth;
	uint32_t hash;
};

struct lp_profile {
	unsigned nvalues;
	struct lp_value_type types[LP_MAX_VALUES];
	struct lp_profile_meta meta;

	char **strs;               /* interned strings */
	size_t nstrs, strcap;
	struct lp_iset strset;

	struct lp_frame *frames;
	size_t nframes, framecap;
	struct lp_iset frameset;

	struct stack *stacks;
	size_t nstacks, stackcap;
	uint32_t *stackbuf;
	size_t stackbuflen, stackbufcap;
	int64_t *values;           /* nvalues per stack */
	size_t valuecap;
	struct lp_iset stackset;

	struct lp_addrmap demangled; /* interned C++ symbol -> its interned readable name */
};

struct lp_profile *lp_profile_new(unsigned nvalues, const struct lp_value_type *types)
{
	if (nvalues == 0 || nvalues > LP_MAX_VALUES)
		return NULL;
	struct lp_profile *p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->nvalues = nvalues;
	memcpy(p->types, types, nvalues * sizeof(*types));
	return p;
}

void lp_profile_free(struct lp_profile *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->nstrs; i++)
		free(p->strs[i]);
	free(p->strs);
	lp_iset_free(&p->strset);
	free(p->frames);
	lp_iset_free(&p->frameset);
	lp_addrmap_free(&p->demangled);
	free(p->stacks);
	free(p->stackbuf);
	free(p->values);
	lp_iset_free(&p->stackset);
	free(p);
}

/* -- Strings ---------------------------------------------------------------- */

struct str_key {
	const struct lp_profile *p;
	const char *s;
};

static int str_eq(const void *ctx, uint32_t idx)
{
	const struct str_key *k = ctx;
	return strcmp(k->p->strs[idx], k->s) == 0;
}

static const char *intern(struct lp_profile *p, const char *s)
{
	if (!s)
		return NULL;
	struct str_key k = { p, s };
	uint64_t h = lp_hash_bytes(s, strlen(s), 0);
	uint32_t idx;
	if (lp_iset_find(&p->strset, h, str_eq, &k, &idx))
		return p->strs[idx];
	if (lp_grow((void **)&p->strs, &p->strcap, p->nstrs + 1, sizeof(*p->strs)))
		return NULL;
	char *copy = strdup(s);
	if (!copy)
		return NULL;
	if (lp_iset_insert(&p->strset, h, (uint32_t)p->nstrs)) {
		free(copy);
		return NULL;
	}
	p->strs[p->nstrs++] = copy;
	return copy;
}

/* -- Frames ----------------------------------------------------------------- */

/* Interned strings compare by pointer once both sides are interned. */
static int frame_same(const struct lp_frame *a, const struct lp_frame *b)
{
	return a->kind == b->kind && a->line == b->line && a->traceno == b->traceno &&
	       a->fline == b->fline && a->tline == b->tline && a->addr == b->addr &&
	       a->name == b->name && a->file == b->file && a->func == b->func;
}

struct frame_key {
	const struct lp_profile *p;
	const struct lp_frame *f;
};

static int frame_eq(const void *ctx, uint32_t idx)
{
	const struct frame_key *k = ctx;
	return frame_same(&k->p->frames[idx], k->f);
}

static uint64_t frame_hash(const struct lp_frame *f)
{
	uint64_t h = lp_hash_u64((uint64_t)(uintptr_t)f->name ^ ((uint64_t)f->kind << 56));
	h = lp_hash_u64(h ^ (uint64_t)(uintptr_t)f->file);
	h = lp_hash_u64(h ^ ((uint64_t)f->line << 32 | f->traceno) ^ ((uint64_t)f->fline << 17) ^
			((uint64_t)f->tline << 7));
	h = lp_hash_u64(h ^ f->addr);
	return h;
}

/*
** A C frame's name as people read it: a C++ host's symbols (dnsdist, game engines) are
** mangled in the stream, as in the ELF files, and shown demangled, as perf and gdb show
** them (libiberty's demangler, with its recursion limit against hostile names). name is
** interned; each distinct one is demangled once. NULL when out of memory.
*/
static const char *readable_c(struct lp_profile *p, const char *name)
{
	if (name[0] != '_' || name[1] != 'Z')
		return name;
	const struct lp_addrmap_entry *e = lp_addrmap_get(&p->demangled, (uintptr_t)name);
	if (e)
		return (const char *)(uintptr_t)e->a;
	char *d = cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI);
	const char *out = d ? intern(p, d) : name;
	free(d);
	if (!out || lp_addrmap_put(&p->demangled, (uintptr_t)name, (uintptr_t)out, 0))
		return NULL;
	return out;
}

int lp_profile_frame_id(struct lp_profile *p, const struct lp_frame *f, uint32_t *id)
{
	struct lp_frame fr = *f;
	fr.name = intern(p, f->name ? f->name : "");
	if (fr.name && fr.kind == LP_FK_C)
		fr.name = readable_c(p, fr.name);
	if (!fr.name || (f->file && !(fr.file = intern(p, f->file))))
		return -ENOMEM;
	struct frame_key k = { p, &fr };
	uint64_t h = frame_hash(&fr);
	if (lp_iset_find(&p->frameset, h, frame_eq, &k, id))
		return 0;
	if (lp_grow((void **)&p->frames, &p->framecap, p->nframes + 1, sizeof(*p->frames)))
		return -ENOMEM;
	if (lp_iset_insert(&p->frameset, h, (uint32_t)p->nframes))
		return -ENOMEM;
	p->frames[p->nframes] = fr;
	*id = (uint32_t)p->nframes++;
	return 0;
}

/* -- Stacks ----------------------------------------------------------------- */

struct stack_key {
	const struct lp_profile *p;
	const uint32_t *frames;
	size_t depth;
};

static int stack_eq(const void *ctx, uint32_t idx)
{
	const struct stack_key *k = ctx;
	const struct stack *s = &k->p->stacks[idx];
	return s->depth == k->depth &&
	       memcmp(k->p->stackbuf + s->off, k->frames, k->depth * sizeof(uint32_t)) == 0;
}

int lp_profile_add(struct lp_profile *p, const uint32_t *frames, size_t depth,
		   const int64_t *values)
{
	if (depth > LP_PROFILE_MAX_DEPTH) {
		frames += depth - LP_PROFILE_MAX_DEPTH;
		depth = LP_PROFILE_MAX_DEPTH;
		p->meta.cut++;
	}
	struct stack_key k = { p, frames, depth };
	uint64_t h = lp_hash_bytes(frames, depth * sizeof(uint32_t), depth);
	uint32_t idx;
	if (!lp_iset_find(&p->stackset, h, stack_eq, &k, &idx)) {
		if (depth > UINT32_MAX ||
		    lp_grow((void **)&p->stacks, &p->stackcap, p->nstacks + 1, sizeof(*p->stacks)) ||
		    lp_grow((void **)&p->values, &p->valuecap, (p->nstacks + 1) * p->nvalues,
			 sizeof(*p->values)) ||
		    lp_grow((void **)&p->stackbuf, &p->stackbufcap, p->stackbuflen + depth,
			 sizeof(*p->stackbuf)))
			return -ENOMEM;
		if (lp_iset_insert(&p->stackset, h, (uint32_t)p->nstacks))
			return -ENOMEM;
		idx = (uint32_t)p->nstacks++;
		struct stack *s = &p->stacks[idx];
		s->off = p->stackbuflen;
		s->depth = (uint32_t)depth;
		s->hash = (uint32_t)h;
		if (depth)
			memcpy(p->stackbuf + s->off, frames, depth * sizeof(uint32_t));
		p->stackbuflen += depth;
		memset(p->values + (size_t)idx * p->nvalues, 0, p->nvalues * sizeof(int64_t));
	}
	int64_t *v = p->values + (size_t)idx * p->nvalues;
	for (unsigned i = 0; i < p->nvalues; i++)
		v[i] = lp_sat_add(v[i], values[i]);
	return 0;
}

/* -- Accessors -------------------------------------------------------------- */

unsigned lp_profile_nvalues(const struct lp_profile *p)
{
	return p->nvalues;
}

const struct lp_value_type *lp_profile_value_type(const struct lp_profile *p, unsigned i)
{
	return i < p->nvalues ? &p->types[i] : NULL;
}

size_t lp_profile_nframes(const struct lp_profile *p)
{
	return p->nframes;
}

const struct lp_frame *lp_profile_frame(const struct lp_profile *p, uint32_t id)
{
	return id < p->nframes ? &p->frames[id] : NULL;
}

size_t lp_profile_nstacks(const struct lp_profile *p)
{
	return p->nstacks;
}

void lp_profile_stack(const struct lp_profile *p, size_t i, const uint32_t **frames,
		      size_t *depth, const int64_t **values)
{
	const struct stack *s = &p->stacks[i];
	*frames = p->stackbuf + s->off;
	*depth = s->depth;
	*values = p->values + i * p->nvalues;
}

int64_t lp_profile_total(const struct lp_profile *p, unsigned v)
{
	int64_t t = 0;
	for (size_t i = 0; i < p->nstacks; i++)
		t = lp_sat_add(t, p->values[i * p->nvalues + v]);
	return t;
}

struct lp_profile_meta *lp_profile_meta(struct lp_profile *p)
{
	return &p->meta;
}

const struct lp_profile_meta *lp_profile_cmeta(const struct lp_profile *p)
{
	return &p->meta;
}

/* -- Labels ----------------------------------------------------------------- */

const char *lp_frame_kind_name(enum lp_frame_kind k)
{
	static const char *const names[LP_FK__MAX] = {
		"Lua", "C", "builtin", "trace", "vmstate", "internal"
	};
	return (unsigned)k < LP_FK__MAX ? names[k] : "?";
}

int lp_frame_lua_same(const struct lp_frame *a, const struct lp_frame *b)
{
	return a->kind == LP_FK_LUA && b->kind == LP_FK_LUA && a->line == b->line &&
	       a->func == b->func && a->nosym == b->nosym && strcmp(a->name, b->name) == 0;
}

int lp_frame_label(const struct lp_frame *f, char *buf, size_t len)
{
	switch (f->kind) {
	case LP_FK_LUA:
		/* A function as Lua's tracebacks name one: "@app.lua:10" would read as a
		 * line, and a main chunk's as line 0. */
		if (f->func && f->line)
			return snprintf(buf, len, "function <%s:%" PRIu32 ">", f->name, f->line);
		if (f->func)
			return snprintf(buf, len, "main chunk <%s>", f->name);
		/* An unknown prototype by function: its stand-in name alone, no line 0. */
		if (f->nosym && !f->line)
			return snprintf(buf, len, "%s", f->name);
		return snprintf(buf, len, "%s:%" PRIu32, f->name, f->line);
	case LP_FK_TRACE:
		return snprintf(buf, len, "TRACE [%" PRIu32 "] %s:%" PRIu32, f->traceno, f->name,
				f->line);
	default:
		return snprintf(buf, len, "%s", f->name);
	}
}

struct lp_profile *lp_profile_remap(const struct lp_profile *p, lp_frame_map_fn fn, void *ctx)
{
	struct lp_profile *q = lp_profile_new(p->nvalues, p->types);
	uint32_t *map = malloc((p->nframes + 1) * sizeof(*map));
	uint32_t *tmp = NULL;
	size_t tmpcap = 0;
	char buf[512];
	if (!q || !map)
		goto fail;
	q->meta = p->meta;
	for (size_t i = 0; i < p->nframes; i++) {
		struct lp_frame f = p->frames[i];
		fn(ctx, &f, buf, sizeof(buf));
		if (lp_profile_frame_id(q, &f, &map[i]))
			goto fail;
	}
	for (size_t i = 0; i < p->nstacks; i++) {
		const uint32_t *fr;
		size_t depth;
		const int64_t *v;
		lp_profile_stack(p, i, &fr, &depth, &v);
		if (lp_grow((void **)&tmp, &tmpcap, depth + 1, sizeof(*tmp)))
			goto fail;
		for (size_t d = 0; d < depth; d++)
			tmp[d] = map[fr[d]];
		if (lp_profile_add(q, tmp, depth, v))
			goto fail;
	}
	free(map);
	free(tmp);
	return q;
fail:
	free(map);
	free(tmp);
	lp_profile_free(q);
	return NULL;
}

/*
** Lua frames by function, and a trace's frames at its lines as one: at the line where it
** starts, as the flame graphs name it under C code (else its function's first line). Code of a known object that no symbol covers ("libm.so.6+0x705a9": static
** functions of a stripped library, in a stream without the agent's names for them) has no
** function to rank by; its addresses are one row per object, "libm.so.6 (no symbol)",
** rather than a row per address. Functions the agent named after their start (from the
** unwind table) are functions: a row each.
*/
static void to_function(void *ctx, struct lp_frame *f, char *buf, size_t buflen)
{
	(void)ctx;
	if (f->kind == LP_FK_LUA || f->kind == LP_FK_TRACE) {
		f->line = f->kind == LP_FK_TRACE && f->tline ? f->tline : f->fline;
		/* A prototype the symbol table does not know has no first line: not a
		 * function named by where it is defined, nor a main chunk. */
		f->func = f->kind == LP_FK_LUA && !f->nosym;
		return;
	}
	if (f->kind != LP_FK_C || !f->file || !f->nosym)
		return;
	const char *base = strrchr(f->file, '/');
	base = base ? base + 1 : f->file;
	size_t n = strlen(base);
	if (strncmp(f->name, base, n) || strncmp(f->name + n, "+0x", 3))
		return;
	snprintf(buf, buflen, "%s (no symbol)", base);
	f->name = buf;
	f->addr = 0;
}

struct lp_profile *lp_profile_by_function(const struct lp_profile *p)
{
	return lp_profile_remap(p, to_function, NULL);
}
