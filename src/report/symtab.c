/*
** Symbol table built from a stream.
*/
#include "report/symtab.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luaprof/format.h"
#include "util/addrmap.h"
#include "util/grow.h"
#include "util/iset.h"

struct lua_entry {
	uint64_t proto;
	struct lp_sym_lua sym;
	int redef;           /* the key named something else before */
	uint64_t defined;    /* when it was last named otherwise (defs): 0 never */
};

struct trace_entry {
	uint64_t traceno;
	struct lp_sym_trace sym;
	int redef;
	uint64_t defined;    /* when its symbol was last written (defs) */
};

struct map {
	uint64_t start, end, offset;
	char *path;
};

struct alias {
	char *alias;
	const char *chunk;
};

struct lp_symtab {
	char **chunks;              /* distinct chunk display names */
	size_t nchunks, chunkcap;
	struct lp_iset chunkset;    /* keyed by the raw chunk name */
	char **rawchunks;           /* raw names, parallel to chunks */
	char **tchunks;             /* Tarantool's display names, parallel to chunks: the
				     * raw name, or an alias owned by aliases[] */

	struct lua_entry *lua;
	size_t nlua, luacap;
	uint64_t defs; /* symbol definitions so far: their order */
	uint64_t luagen;            /* bumped by every lp_symtab_add_lua */
	uint64_t redefs;            /* symbols replaced by another content */
	struct lp_iset luaset;

	struct trace_entry *traces;
	size_t ntraces, tracecap;
	struct lp_iset traceset;

	struct lp_sym_c *csyms;     /* sorted by start when !cdirty */
	size_t ncsyms, ccap;
	int cdirty;
	char **cnames;              /* owned names, in insertion order */
	size_t ncnames, cnamecap;
	uint64_t crun;              /* the current run of C symbols (lp_symtab_c_event) */
	int cadded;                 /* a C symbol was added in it */
	int credef;                 /* ... one that named an address anew */
	struct lp_addrmap clive;    /* C symbol address -> its latest run + 1, and the hash
				     * of the first name that run gave it */
	struct lp_addrmap cnamed;   /* hash(address, name) -> the run + 1 that gave that
				     * address that name besides its first, and the address */
	struct lp_addrmap calias;   /* the addresses the current run named again with names
				     * their latest run gave them -> its first symbol there */
	uint64_t credefs;           /* symbols at an address an earlier run named */
	uint64_t *cepochs;          /* C epoch k >= 1 began after run cepochs[k - 1] closed */
	size_t ncepochs, cepochcap;

	struct alias *aliases;
	size_t naliases, aliascap;

	uint64_t ncsizes;           /* csize records seen (luaprof extension) */
	uint64_t vm_begin, vm_end;  /* the latest lj_vm_asm_begin and lj_vm_ffi_call, + 1
				     * (0: none) */
	struct map *maps;           /* sorted by start when !mdirty */
	size_t nmaps, mapcap;
	int mdirty;

	struct tcode {
		uint64_t start, end, traceno;
		int bad;
		int keyed;                /* a kcode record's: its start in sym */
		struct lp_sym_trace sym;
	} *tcodes; /* by start when !tdirty */
	size_t ntcodes, tcodecap, nkcodes;
	int tdirty;
};

struct lp_symtab *lp_symtab_new(void)
{
	return calloc(1, sizeof(struct lp_symtab));
}

void lp_symtab_free(struct lp_symtab *st)
{
	if (!st)
		return;
	/* Display names are either the raw name itself or a name of their own. */
	for (size_t i = 0; i < st->nchunks; i++) {
		if (st->chunks[i] != st->rawchunks[i])
			free(st->chunks[i]);
		free(st->rawchunks[i]);
	}
	free(st->chunks);
	free(st->rawchunks);
	free(st->tchunks);
	lp_iset_free(&st->chunkset);
	free(st->lua);
	lp_iset_free(&st->luaset);
	free(st->traces);
	lp_iset_free(&st->traceset);
	for (size_t i = 0; i < st->ncnames; i++)
		free(st->cnames[i]);
	free(st->cnames);
	free(st->csyms);
	lp_addrmap_free(&st->clive);
	lp_addrmap_free(&st->cnamed);
	lp_addrmap_free(&st->calias);
	free(st->cepochs);
	for (size_t i = 0; i < st->naliases; i++)
		free(st->aliases[i].alias);
	free(st->aliases);
	for (size_t i = 0; i < st->nmaps; i++)
		free(st->maps[i].path);
	free(st->maps);
	free(st->tcodes);
	free(st);
}

/* -- Chunk names -------------------------------------------------------------- */

struct chunk_key {
	const struct lp_symtab *st;
	const char *s;
	size_t len;
};

static int chunk_eq(const void *ctx, uint32_t idx)
{
	const struct chunk_key *k = ctx;
	const char *c = k->st->rawchunks[idx];
	return strlen(c) == k->len && memcmp(c, k->s, k->len) == 0;
}

/* The first n bytes of s and "...", malloc'd. */
static char *strndup_dots(const char *s, size_t n)
{
	char *out = malloc(n + 4);
	if (out) {
		memcpy(out, s, n);
		memcpy(out + n, "...", 4);
	}
	return out;
}

/* LuaJIT's name for a chunk loaded from a string, as its tracebacks show it: the text up
 * to its first control character (at most 48 bytes, or 45 and "..." when cut) in
 * [string "..."]. */
static char *string_chunk_name(const char *s, size_t len)
{
	size_t n = 0;
	while (n < len && n < 48 && (unsigned char)s[n] >= ' ')
		n++;
	int cut = n < len;
	if (cut && n > 45)
		n = 45;
	size_t size = n + sizeof("[string \"...\"]");
	char *out = malloc(size);
	if (out)
		snprintf(out, size, "[string \"%.*s%s\"]", (int)n, s, cut ? "..." : "");
	return out;
}

/* "@file" or "=name" with a newline in it (a host's own chunk name): up to the first
 * control character, then "...", so that no graph gets a line break. */
static char *cut_chunk_name(const char *s, size_t len)
{
	size_t n = 0;
	while (n < len && (unsigned char)s[n] >= ' ')
		n++;
	return n < len ? strndup_dots(s, n) : strndup(s, len);
}

/* Interns a raw chunk name: its index in chunks[], or -1 without memory. NUL bytes inside
 * a name cut it short: the rest cannot be shown anyway. A chunk loaded from a string (a
 * name that is not "@file" or "=name": the source itself, which can be kilobytes) is shown
 * as LuaJIT shows it, but for "?", which the agent writes for a name it could not read;
 * Tarantool's report shows it as it is, but a multi-line one as an alias. */
static int64_t chunk_name(struct lp_symtab *st, const char *s, size_t len)
{
	size_t nul = strnlen(s, len);
	len = nul;
	struct chunk_key k = { st, s, len };
	uint64_t h = lp_hash_bytes(s, len, 1);
	uint32_t idx;
	if (lp_iset_find(&st->chunkset, h, chunk_eq, &k, &idx))
		return idx;
	if (lp_grow((void **)&st->chunks, &st->chunkcap, st->nchunks + 1, sizeof(char *)))
		return -1;
	char **rc = realloc(st->rawchunks, st->chunkcap * sizeof(char *));
	if (!rc)
		return -1;
	st->rawchunks = rc;
	rc = realloc(st->tchunks, st->chunkcap * sizeof(char *));
	if (!rc)
		return -1;
	st->tchunks = rc;
	char *raw = strndup(s, len);
	if (!raw)
		return -1;
	char *display = raw, *tdisplay = raw;
	if (len == 0 || (raw[0] != '@' && raw[0] != '=' && strcmp(raw, "?")))
		display = string_chunk_name(raw, len);
	else if (memchr(s, '\n', len))
		display = cut_chunk_name(raw, len);
	if (display && strlen(display) > LP_SYMTAB_MAX_NAME) {
		/* Shown cut: a name that long is no path (PATH_MAX) anyone reads, and every
		 * frame and label would copy, hash and print it whole. */
		char *cut = strndup_dots(display, LP_SYMTAB_MAX_NAME - 3);
		if (display != raw)
			free(display);
		display = cut;
	}
	if (!display) {
		free(raw);
		return -1;
	}
	if (display != raw && len > LP_SYMTAB_MAX_NAME && (raw[0] == '@' || raw[0] == '='))
		tdisplay = display; /* the memprof report's name, cut the same way */
	if (memchr(s, '\n', len)) {
		char buf[40];
		snprintf(buf, sizeof(buf), "function_alias_%zu", st->naliases + 1);
		if (lp_grow((void **)&st->aliases, &st->aliascap, st->naliases + 1,
			    sizeof(*st->aliases)) ||
		    !(tdisplay = strdup(buf))) {
			if (display != raw)
				free(display);
			free(raw);
			return -1;
		}
		st->aliases[st->naliases].alias = tdisplay;
		st->aliases[st->naliases].chunk = raw;
		st->naliases++;
	}
	if (lp_iset_insert(&st->chunkset, h, (uint32_t)st->nchunks)) {
		if (tdisplay != raw && tdisplay != display) /* an alias was added */
			st->naliases--, free(tdisplay);
		if (display != raw)
			free(display);
		free(raw);
		return -1;
	}
	st->rawchunks[st->nchunks] = raw;
	st->tchunks[st->nchunks] = tdisplay;
	st->chunks[st->nchunks] = display;
	return (int64_t)st->nchunks++;
}

/* -- Lua prototypes and traces ---------------------------------------------------- */

struct u64_key {
	const void *arr;
	size_t stride;
	uint64_t key;
};

static int u64_eq(const void *ctx, uint32_t idx)
{
	const struct u64_key *k = ctx;
	const uint64_t *v = (const uint64_t *)((const char *)k->arr + idx * k->stride);
	return *v == k->key;
}

static uint32_t clamp32(uint64_t v)
{
	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

int lp_symtab_add_lua(struct lp_symtab *st, uint64_t proto, const char *chunk, size_t len,
		      uint64_t firstline)
{
	int64_t ci = chunk_name(st, chunk, len);
	if (ci < 0)
		return -ENOMEM;
	const char *name = st->chunks[ci];
	struct u64_key k = { st->lua, sizeof(*st->lua), proto };
	uint64_t h = lp_hash_u64(proto);
	uint32_t idx;
	if (!lp_iset_find(&st->luaset, h, u64_eq, &k, &idx)) {
		if (lp_grow((void **)&st->lua, &st->luacap, st->nlua + 1, sizeof(*st->lua)) ||
		    lp_iset_insert(&st->luaset, h, (uint32_t)st->nlua))
			return -ENOMEM;
		idx = (uint32_t)st->nlua++;
		st->lua[idx].proto = proto;
		st->lua[idx].redef = 0;
		st->lua[idx].defined = 0;
	} else if (st->lua[idx].sym.chunk != name ||
		   st->lua[idx].sym.firstline != clamp32(firstline)) {
		st->redefs++;
		st->lua[idx].redef = 1;
		st->lua[idx].defined = ++st->defs;
	}
	st->lua[idx].sym.chunk = name;
	st->lua[idx].sym.tchunk = st->tchunks[ci];
	st->lua[idx].sym.firstline = clamp32(firstline);
	st->luagen++;
	return 0;
}

int lp_symtab_add_trace(struct lp_symtab *st, uint64_t traceno, uint64_t proto, uint64_t line)
{
	struct u64_key k = { st->traces, sizeof(*st->traces), traceno };
	uint64_t h = lp_hash_u64(traceno);
	uint32_t idx;
	if (!lp_iset_find(&st->traceset, h, u64_eq, &k, &idx)) {
		if (lp_grow((void **)&st->traces, &st->tracecap, st->ntraces + 1,
			 sizeof(*st->traces)) ||
		    lp_iset_insert(&st->traceset, h, (uint32_t)st->ntraces))
			return -ENOMEM;
		idx = (uint32_t)st->ntraces++;
		st->traces[idx].traceno = traceno;
		st->traces[idx].redef = 0;
	} else if (st->traces[idx].sym.proto != proto ||
		   st->traces[idx].sym.line != clamp32(line)) {
		st->redefs++;
		st->traces[idx].redef = 1;
	}
	st->traces[idx].defined = ++st->defs;
	st->traces[idx].sym.proto = proto;
	st->traces[idx].sym.line = clamp32(line);
	return 0;
}

const struct lp_sym_lua *lp_symtab_lua(const struct lp_symtab *st, uint64_t proto)
{
	struct u64_key k = { st->lua, sizeof(*st->lua), proto };
	uint32_t idx;
	if (!lp_iset_find(&st->luaset, lp_hash_u64(proto), u64_eq, &k, &idx))
		return NULL;
	return &st->lua[idx].sym;
}

const struct lp_sym_trace *lp_symtab_trace(const struct lp_symtab *st, uint64_t traceno)
{
	struct u64_key k = { st->traces, sizeof(*st->traces), traceno };
	uint32_t idx;
	if (!lp_iset_find(&st->traceset, lp_hash_u64(traceno), u64_eq, &k, &idx))
		return NULL;
	return &st->traces[idx].sym;
}

static const struct lp_sym_lua *trace_start(const struct lp_symtab *st, uint64_t traceno,
					   const struct lp_sym_trace **trace, int certain)
{
	struct u64_key tk = { st->traces, sizeof(*st->traces), traceno };
	uint32_t ti, li;
	if (!lp_iset_find(&st->traceset, lp_hash_u64(traceno), u64_eq, &tk, &ti) ||
	    (certain && st->traces[ti].redef))
		return NULL;
	uint64_t proto = st->traces[ti].sym.proto;
	struct u64_key lk = { st->lua, sizeof(*st->lua), proto };
	if (!lp_iset_find(&st->luaset, lp_hash_u64(proto), u64_eq, &lk, &li) ||
	    (certain && st->lua[li].redef))
		return NULL;
	/* The prototype's address named another function since the trace's symbol was
	 * written: that symbol may be the old function's (a writer that did not write it
	 * again, its trace number, code and start address being the same), its line too. */
	if (st->lua[li].defined > st->traces[ti].defined)
		return NULL;
	*trace = &st->traces[ti].sym;
	return &st->lua[li].sym;
}

const struct lp_sym_lua *lp_symtab_trace_start(const struct lp_symtab *st, uint64_t traceno,
					      const struct lp_sym_trace **trace)
{
	return trace_start(st, traceno, trace, 1);
}

const struct lp_sym_lua *lp_symtab_trace_start_now(const struct lp_symtab *st,
						  uint64_t traceno,
						  const struct lp_sym_trace **trace)
{
	return trace_start(st, traceno, trace, 0);
}

/* -- C symbols ------------------------------------------------------------------ */

/* The key of name hash h at addr in cnamed. */
static uint64_t cnamed_key(uint64_t addr, uint64_t h)
{
	return lp_hash_u64(addr ^ h * 0x9e3779b97f4a7c15ull);
}

/* Whether run + 1 (a clive entry's a) gave addr the name of hash h. */
static int cnamed_by(const struct lp_symtab *st, const struct lp_addrmap_entry *e,
		     uint64_t addr, uint64_t h)
{
	if (e->b == h)
		return 1;
	const struct lp_addrmap_entry *n = lp_addrmap_get(&st->cnamed, cnamed_key(addr, h));
	return n && n->a == e->a && n->b == addr;
}

int lp_symtab_add_cfunc(struct lp_symtab *st, uint64_t addr, const char *name, size_t len)
{
	if (lp_grow((void **)&st->csyms, &st->ccap, st->ncsyms + 1, sizeof(*st->csyms)) ||
	    lp_grow((void **)&st->cnames, &st->cnamecap, st->ncnames + 1, sizeof(char *)))
		return -ENOMEM;
	/*
	** A later run's names at an address replace the earlier run's there. Names the latest
	** run gave it, given again (the agent names a builtin's entry again once it rescans
	** the objects, and every function of a library unloaded and loaded again at its
	** address), are aliases, as are the names of one run: those keep the run of the
	** names they stand with. One name it did not give makes the run's names there its
	** own, those given before it included.
	*/
	static const char begin[] = "lj_vm_asm_begin", ffi[] = "lj_vm_ffi_call";
	if (len == sizeof(begin) - 1 && !memcmp(name, begin, len))
		st->vm_begin = addr + 1;
	else if (len == sizeof(ffi) - 1 && !memcmp(name, ffi, len))
		st->vm_end = addr + 1;
	uint64_t h = lp_hash_bytes(name, len, 3), def = st->crun;
	struct lp_addrmap_entry *e = lp_addrmap_get(&st->clive, addr);
	int redef = 0;
	if (!e) {
		if (lp_addrmap_put(&st->clive, addr, st->crun + 1, h))
			return -ENOMEM;
	} else if (e->a - 1 == st->crun) {
		if (e->b != h && lp_addrmap_put(&st->cnamed, cnamed_key(addr, h), e->a, addr))
			return -ENOMEM;
	} else if (cnamed_by(st, e, addr, h)) {
		def = e->a - 1;
		if (!lp_addrmap_get(&st->calias, addr) &&
		    lp_addrmap_put(&st->calias, addr, st->ncsyms, 0))
			return -ENOMEM;
	} else {
		uint64_t was = e->a - 1;
		if (lp_addrmap_put(&st->clive, addr, st->crun + 1, h))
			return -ENOMEM;
		/* This run's names there given before: its own now. */
		const struct lp_addrmap_entry *a = lp_addrmap_get(&st->calias, addr);
		for (size_t i = a ? a->a : st->ncsyms; i < st->ncsyms; i++) {
			struct lp_sym_c *c = &st->csyms[i];
			if (c->start != addr || c->def != was)
				continue;
			c->def = st->crun;
			uint64_t ch = lp_hash_bytes(c->name, strlen(c->name), 3);
			if (ch != h && lp_addrmap_put(&st->cnamed, cnamed_key(addr, ch),
						      st->crun + 1, addr))
				return -ENOMEM;
		}
		if (a)
			lp_addrmap_remove(&st->calias, addr);
		redef = 1;
	}
	char *copy = strndup(name, len);
	if (!copy)
		return -ENOMEM;
	st->cnames[st->ncnames++] = copy;
	st->csyms[st->ncsyms].name = copy;
	st->csyms[st->ncsyms].start = addr;
	st->csyms[st->ncsyms].size = 0;
	st->csyms[st->ncsyms].def = def;
	st->csyms[st->ncsyms].standin = NULL;
	st->ncsyms++;
	st->cdirty = 1;
	st->cadded = 1;
	if (redef) {
		st->credefs++;
		st->credef = 1;
	}
	return 0;
}

int lp_symtab_c_event(struct lp_symtab *st)
{
	if (!st->cadded)
		return 0;
	/* A run that named an address anew starts an epoch: what was read before it is
	 * named as before it. */
	if (st->credef) {
		if (lp_grow((void **)&st->cepochs, &st->cepochcap, st->ncepochs + 1,
			    sizeof(*st->cepochs)))
			return -ENOMEM;
		st->cepochs[st->ncepochs++] = st->crun;
		st->credef = 0;
	}
	st->crun++;
	st->cadded = 0;
	if (st->calias.count)
		lp_addrmap_clear(&st->calias);
	return 0;
}


uint32_t lp_symtab_c_epoch(const struct lp_symtab *st)
{
	return st->ncepochs > UINT32_MAX ? UINT32_MAX : (uint32_t)st->ncepochs;
}

/* The last run whose names epoch sees (UINT32_MAX: every run). */
static uint64_t epoch_run(const struct lp_symtab *st, uint32_t epoch)
{
	if (epoch == UINT32_MAX || epoch > st->ncepochs)
		return UINT64_MAX;
	return epoch ? st->cepochs[epoch - 1] : 0;
}

static int csym_cmp(const void *a, const void *b)
{
	const struct lp_sym_c *x = a, *y = b;
	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	/* Names of one address by the run that gave them (a library loaded where another
	 * was: csym_in picks the run in effect at an event). */
	if (x->def != y->def)
		return x->def < y->def ? -1 : 1;
	/* Aliases at one address: a real name before a stand-in for code with no symbol
	 * ("object+0xoffset": the agent names a builtin's entry in a stripped VM, which has
	 * one), then a stable, readable choice (shortest, then name). */
	int px = strstr(x->name, "+0x") != NULL, py = strstr(y->name, "+0x") != NULL;
	if (px != py)
		return px - py;
	size_t lx = strlen(x->name), ly = strlen(y->name);
	if (lx != ly)
		return lx < ly ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Sorts the C symbols by address: the current run's are no longer where it added them. */
static void csort(struct lp_symtab *st)
{
	qsort(st->csyms, st->ncsyms, sizeof(*st->csyms), csym_cmp);
	st->cdirty = 0;
	if (st->calias.count)
		lp_addrmap_clear(&st->calias);
}

static const struct map *map_of(struct lp_symtab *st, uint64_t addr);
static const struct lp_sym_c *csym_in(struct lp_symtab *st, uint64_t addr,
				      const struct map *m, uint64_t run);

const struct lp_sym_c *lp_symtab_c(struct lp_symtab *st, uint64_t addr)
{
	return csym_in(st, addr, st->nmaps ? map_of(st, addr) : NULL, UINT64_MAX);
}

const struct lp_sym_c *lp_symtab_c_at(struct lp_symtab *st, uint64_t addr, uint32_t epoch)
{
	return csym_in(st, addr, st->nmaps ? map_of(st, addr) : NULL, epoch_run(st, epoch));
}

/* The first of csyms[lo, hi) whose def is above run (hi if none): they are sorted by it. */
static size_t def_above(const struct lp_symtab *st, size_t lo, size_t hi, uint64_t run)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (st->csyms[mid].def <= run)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
** lp_symtab_c with addr's mapped object m already looked up (NULL: none, or no maps), as
** the names were after run closed: at each address the name of the latest run up to
** then, or when none had named it yet the first run that did (the agent names a library
** loaded while sampling once it sees it: samples before that are its code).
*/
static const struct lp_sym_c *csym_in(struct lp_symtab *st, uint64_t addr,
				      const struct map *m, uint64_t run)
{
	if (st->cdirty)
		csort(st);
	size_t lo = 0, hi = st->ncsyms;
	while (lo < hi) { /* first symbol with start > addr */
		size_t mid = lo + (hi - lo) / 2;
		if (st->csyms[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	/* The first alias at that address: a search, not a walk back, which a stream of many
	 * aliases made quadratic. */
	uint64_t at = st->csyms[lo - 1].start;
	size_t first = 0, end = lo, last = lo - 1;
	while (first < last) {
		size_t mid = first + (last - first) / 2;
		if (st->csyms[mid].start < at)
			first = mid + 1;
		else
			last = mid;
	}
	if (addr - at > LP_SYMTAB_MAX_CSPAN)
		return NULL;
	/* With the mapped objects known, only a symbol of addr's own object names it. */
	if (st->nmaps && (!m || at < m->start))
		return NULL;
	/* Only the names of one run (lp_symtab_c_event), the preferred first (qsort put it
	 * there). With sizes known, an address past the end of every alias is in unnamed
	 * code. */
	if (st->credefs) {
		size_t k = def_above(st, first, end, run);
		uint64_t def = st->csyms[k > first ? k - 1 : first].def;
		end = def_above(st, first, end, def);
		if (def > 0)
			first = def_above(st, first, end, def - 1);
	}
	for (const struct lp_sym_c *a = st->csyms + first; a < st->csyms + end; a++)
		if (!a->size || addr - a->start < a->size)
			return a;
	return NULL;
}

/* The first C symbol (sorted) with start >= addr. */
static size_t first_at(const struct lp_symtab *st, uint64_t addr)
{
	size_t lo = 0, hi = st->ncsyms;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (st->csyms[mid].start < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

void lp_symtab_set_csize(struct lp_symtab *st, uint64_t addr, uint64_t size)
{
	st->ncsizes++;
	if (st->cdirty)
		csort(st);
	size_t lo = first_at(st, addr);
	for (; lo < st->ncsyms && st->csyms[lo].start == addr; lo++)
		if (!st->csyms[lo].size || size > st->csyms[lo].size)
			st->csyms[lo].size = size;
}

int lp_symtab_set_cname(struct lp_symtab *st, uint64_t addr, const char *name, size_t len)
{
	const struct lp_addrmap_entry *e = lp_addrmap_get(&st->clive, addr);
	if (!e || !len)
		return 0;
	uint64_t def = e->a - 1; /* the run that named addr last */
	if (st->cdirty)
		csort(st);
	size_t lo = first_at(st, addr);
	size_t first = lo, n = 0;
	for (; lo < st->ncsyms && st->csyms[lo].start == addr; lo++) {
		if (st->csyms[lo].def != def)
			continue;
		if (!strstr(st->csyms[lo].name, "+0x"))
			return 0; /* a real symbol */
		n++;
	}
	if (!n)
		return 0;
	if (lp_grow((void **)&st->cnames, &st->cnamecap, st->ncnames + 1, sizeof(char *)))
		return -ENOMEM;
	char *copy = strndup(name, len);
	if (!copy)
		return -ENOMEM;
	st->cnames[st->ncnames++] = copy;
	for (lo = first; lo < st->ncsyms && st->csyms[lo].start == addr; lo++)
		if (st->csyms[lo].def == def && !st->csyms[lo].standin) {
			st->csyms[lo].standin = st->csyms[lo].name;
			st->csyms[lo].name = copy;
		}
	return 0;
}

uint64_t lp_symtab_lua_generation(const struct lp_symtab *st)
{
	return st->luagen;
}

uint64_t lp_symtab_redefinitions(const struct lp_symtab *st)
{
	return st->redefs + st->credefs;
}

int lp_symtab_has_extents(const struct lp_symtab *st)
{
	return st->nmaps > 0 || st->ncsizes > 0;
}

int lp_symtab_vm_block(const struct lp_symtab *st, uint64_t *lo, uint64_t *hi)
{
	if (!st->vm_begin || st->vm_end <= st->vm_begin ||
	    st->vm_end - st->vm_begin > LP_SYMTAB_MAX_CSPAN)
		return 0;
	*lo = st->vm_begin - 1;
	*hi = st->vm_end - 1;
	return 1;
}

size_t lp_symtab_ncsyms(const struct lp_symtab *st)
{
	return st->ncsyms;
}

size_t lp_symtab_naliases(const struct lp_symtab *st)
{
	return st->naliases;
}

void lp_symtab_alias(const struct lp_symtab *st, size_t i, const char **alias,
		     const char **chunk)
{
	*alias = st->aliases[i].alias;
	*chunk = st->aliases[i].chunk;
}

/* -- Mapped objects ------------------------------------------------------------------ */

int lp_symtab_add_map(struct lp_symtab *st, uint64_t start, uint64_t end, uint64_t offset,
		      const char *path)
{
	if (lp_grow((void **)&st->maps, &st->mapcap, st->nmaps + 1, sizeof(*st->maps)))
		return -ENOMEM;
	char *copy = strdup(path);
	if (!copy)
		return -ENOMEM;
	st->maps[st->nmaps++] = (struct map){ start, end, offset, copy };
	st->mdirty = 1;
	return 0;
}

static int map_cmp(const void *a, const void *b)
{
	const struct map *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

static const struct map *map_of(struct lp_symtab *st, uint64_t addr)
{
	if (st->mdirty) {
		qsort(st->maps, st->nmaps, sizeof(*st->maps), map_cmp);
		st->mdirty = 0;
	}
	size_t lo = 0, hi = st->nmaps;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (st->maps[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || addr >= st->maps[lo - 1].end)
		return NULL;
	return &st->maps[lo - 1];
}

int lp_symtab_mapped(struct lp_symtab *st, uint64_t addr)
{
	if (!st->nmaps)
		return -1;
	return map_of(st, addr) != NULL;
}

const char *lp_symtab_name_c(struct lp_symtab *st, uint64_t addr, char *buf, size_t len,
			     uint64_t *start, const char **object)
{
	return lp_symtab_name_c_at(st, addr, UINT32_MAX, buf, len, start, object);
}

const char *lp_symtab_name_c_at(struct lp_symtab *st, uint64_t addr, uint32_t epoch, char *buf,
				size_t len, uint64_t *start, const char **object)
{
	/* Trace code keyed by a trace no kcode record names with certainty: the address. */
	if (st->nkcodes && LP_HOST_KEYED(addr)) {
		*object = NULL;
		*start = LP_HOST_UNKEYED(addr);
		snprintf(buf, len, "0x%llx", (unsigned long long)*start);
		return buf;
	}
	const struct map *m = st->nmaps ? map_of(st, addr) : NULL;
	const struct lp_sym_c *sym = csym_in(st, addr, m, epoch_run(st, epoch));
	*object = m ? m->path : NULL;
	if (sym) {
		/* Its own name, not a copy in buf: a C++ symbol may be longer than any buffer,
		 * and two cut alike would read (and merge) as one function. */
		*start = sym->start;
		return sym->name;
	}
	*start = addr;
	if (m) {
		const char *base = strrchr(m->path, '/');
		snprintf(buf, len, "%s+0x%llx", base ? base + 1 : m->path,
			 (unsigned long long)(addr - m->start + m->offset));
	} else {
		snprintf(buf, len, "0x%llx", (unsigned long long)addr);
	}
	return buf;
}

/* -- Machine code of traces (luaprof extension) ---------------------------------------- */

/* Appends extent t (its fields checked by the caller): 0 or -ENOMEM. */
static int add_extent(struct lp_symtab *st, struct tcode t)
{
	if (lp_grow((void **)&st->tcodes, &st->tcodecap, st->ntcodes + 1, sizeof(*st->tcodes)))
		return -ENOMEM;
	st->tcodes[st->ntcodes++] = t;
	st->nkcodes += (size_t)t.keyed;
	st->tdirty = 1;
	return 0;
}

int lp_symtab_add_tcode(struct lp_symtab *st, uint64_t traceno, uint64_t start, uint64_t size)
{
	if (!size || start + size < start)
		return 0;
	return add_extent(st, (struct tcode){ start, start + size, traceno, 0, 0, { 0, 0 } });
}

int lp_symtab_add_kcode(struct lp_symtab *st, uint64_t traceno, uint64_t key, uint64_t size,
			uint64_t proto, uint64_t line)
{
	if (!size || key + size < key || !LP_HOST_KEYED(key))
		return 0;
	return add_extent(st, (struct tcode){ key, key + size, traceno, 0, 1,
					      { proto, clamp32(line) } });
}

static int tcode_cmp(const void *a, const void *b)
{
	const struct tcode *x = a, *y = b;
	return x->start < y->start ? -1 : x->start > y->start;
}

/* Extents still open at a point of the sweep below past which every open one is taken for
 * ambiguous: a crafted stream's thousands of nested extents stay linear. */
#define TCODE_OPEN_MAX 64

/* Sorts the extents and marks the ambiguous ones: overlapping an extent of another trace
 * number (code reused by another trace: which one ran there is unknown). Extents of one
 * number at several places (the trace compiled again after a flush) name that number;
 * which start it had is the symbols' question (lp_symtab_tcode asks it). */
static void tcode_sort(struct lp_symtab *st)
{
	st->tdirty = 0;
	if (!st->ntcodes)
		return;
	qsort(st->tcodes, st->ntcodes, sizeof(*st->tcodes), tcode_cmp);
	size_t open[TCODE_OPEN_MAX], nopen = 0;
	uint64_t given_up = 0; /* the end of the extents given up: all ambiguous up to there */
	for (size_t i = 0; i < st->ntcodes; i++) {
		struct tcode *t = &st->tcodes[i];
		if (t->start < given_up)
			t->bad = 1;
		size_t k = 0;
		for (size_t j = 0; j < nopen; j++) {
			struct tcode *o = &st->tcodes[open[j]];
			if (o->end <= t->start)
				continue; /* closed before t */
			/* Keyed extents (one tag a trace) overlap only in a crafted stream:
			 * any two are ambiguous. */
			if (o->traceno != t->traceno || o->keyed || t->keyed)
				o->bad = t->bad = 1;
			open[k++] = open[j];
		}
		nopen = k;
		if (nopen == TCODE_OPEN_MAX) {
			for (size_t j = 0; j < nopen; j++) {
				st->tcodes[open[j]].bad = 1;
				if (st->tcodes[open[j]].end > given_up)
					given_up = st->tcodes[open[j]].end;
			}
			t->bad = 1;
			if (t->end > given_up)
				given_up = t->end;
			nopen = 0;
		}
		open[nopen++] = i;
	}
}

/* The extent that holds addr, unless none does or it is ambiguous. */
static const struct tcode *tcode_at(struct lp_symtab *st, uint64_t addr)
{
	if (st->tdirty)
		tcode_sort(st);
	size_t lo = 0, hi = st->ntcodes;
	while (lo < hi) { /* first extent starting above addr */
		size_t mid = lo + (hi - lo) / 2;
		if (st->tcodes[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || addr >= st->tcodes[lo - 1].end || st->tcodes[lo - 1].bad)
		return NULL;
	return &st->tcodes[lo - 1];
}

int lp_symtab_kcode(struct lp_symtab *st, uint64_t addr, uint64_t *traceno,
		    const struct lp_sym_trace **trace)
{
	const struct tcode *t = LP_HOST_KEYED(addr) ? tcode_at(st, addr) : NULL;
	if (!t || !t->keyed)
		return -1;
	*traceno = t->traceno;
	*trace = &t->sym;
	return 0;
}

int lp_symtab_tcode(struct lp_symtab *st, uint64_t addr, uint64_t *traceno,
		    const struct lp_sym_trace **trace, const struct lp_sym_lua **fn)
{
	const struct tcode *t = tcode_at(st, addr);
	if (!t)
		return -1;
	if (t->keyed) {
		struct u64_key lk = { st->lua, sizeof(*st->lua), t->sym.proto };
		uint32_t li;
		if (!lp_iset_find(&st->luaset, lp_hash_u64(t->sym.proto), u64_eq, &lk, &li) ||
		    st->lua[li].redef)
			return -1;
		*traceno = t->traceno;
		*trace = &t->sym;
		*fn = &st->lua[li].sym;
		return 0;
	}
	/* Named only by symbols that never named anything else: resolved after the whole
	 * stream, an extent could not tell which of two definitions it went with. */
	uint64_t n = t->traceno;
	const struct lp_sym_trace *tr;
	const struct lp_sym_lua *f = lp_symtab_trace_start(st, n, &tr);
	if (!f)
		return -1;
	*traceno = n;
	*trace = tr;
	*fn = f;
	return 0;
}
