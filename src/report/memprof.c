/*
** Memory profile aggregation and the memprof text report.
*/
#include "report/memprof.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "luaprof/format.h"
#include "util/addrmap.h"
#include "util/grow.h"
#include "util/iset.h"

enum { SEC_ALLOC, SEC_REALLOC, SEC_FREE, SEC__MAX };

/* What a Lua or trace location resolves to in the symbol table at an event: its chunk and
 * first line, and a trace's start (prototype and line); a C location, its symbol's name
 * (chunk: names are owned by the table, one pointer each) and start (proto). Zero for
 * INTERNAL and for what the table does not know. */
struct sym_content {
	const char *chunk;
	uint64_t proto;
	uint32_t line, first;
};

/* An allocation site as the stream identifies it (source, address, line, trace), and what
 * its symbols said when it was first seen: an address or trace number the VM reused for
 * another function or trace is another site. */
struct loc {
	uint8_t source;
	uint64_t addr, line, traceno;
	struct sym_content sym;
	uint32_t label;       /* index into labels */
	uint32_t frame;       /* frame description for profiles */
	uint32_t entry[3];    /* its line in each section, UINT32_MAX if none yet */
	uint64_t last_alloc;  /* sequence number of its latest allocation */
	struct lp_frame f;    /* name points into labels' storage or the symtab */
};

/* Per-label totals: the HEAP SUMMARY merges sites that print the same. */
struct label {
	char *text;
	int64_t dbytes;
	uint64_t nalloc, nfree;
	uint64_t last_alloc;  /* sequence number of the latest allocation */
};

/* One line of a section: events of one kind at one site. */
struct entry {
	uint32_t loc;
	uint64_t num, alloc, free;
	uint64_t first;       /* sequence number of its first event */
};

/* What an entry's reallocs / frees did to blocks allocated at another site. */
struct primary {
	uint32_t entry;       /* index into the section's entries */
	uint32_t origin;      /* loc that allocated the block */
	uint64_t allocated, freed, count;
};

/* A set of primaries, one per (entry, origin). */
struct prims {
	struct primary *v;
	size_t n, cap;
	struct lp_addrmap by;      /* (entry << 32 | origin) -> index in v */
};

/*
** Reallocs and frees are linked to a block's sites twice. As Tarantool's parser does, to the
** site that last allocated or reallocated it (prim: the Overrides lists). And to the site
** that first allocated it in the profile (held: the HEAP SUMMARY). Tarantool's heap summary
** uses the first kind too, which credits a realloc's new size to the block's last site but
** charges its later free to the realloc's own site: a table grown by a trace and freed
** stayed "held" by the line that grew it before (megabytes on a compiled fill loop), and
** the trace went negative, unlisted. With one holder per block every credit meets its
** debit; where a block's sites never change and no block predates the profile, the two
** sets are the same. A block from before the profile is held by the site that first
** reallocates it (Tarantool's rules credit its growth from the second realloc on).
*/
struct section {
	struct entry *entries;
	size_t n, cap;
	struct prims prim, held;
};

/* held's key for a realloc of a block the profile never saw (allocated before it began):
 * the reallocating site becomes the block's holder, credited its new size as if it had
 * allocated it, apart from the site's reallocs of blocks it holds (whose counts are an
 * allocation and a free each). */
#define HELD_ADOPTED (1u << 31)

struct lp_memprof {
	struct lp_symtab *st;
	struct loc *locs;
	size_t nlocs, loccap;
	struct lp_iset locset;
	struct label *labels;
	size_t nlabels, labelcap;
	struct lp_iset labelset;
	struct section sec[SEC__MAX];
	struct lp_addrmap heap;    /* live block address -> (size, loc | holder << 32) */
	uint64_t seq;
	uint32_t last;             /* site of the previous event (loops repeat sites) */
	int relabeled;
	int symhashed;             /* locset is keyed by the sites' symbols too (site_hash) */
};

struct lp_memprof *lp_memprof_new(struct lp_symtab *st)
{
	struct lp_memprof *m = calloc(1, sizeof(*m));
	if (m)
		m->st = st;
	return m;
}

void lp_memprof_free(struct lp_memprof *m)
{
	if (!m)
		return;
	free(m->locs);
	lp_iset_free(&m->locset);
	for (size_t i = 0; i < m->nlabels; i++)
		free(m->labels[i].text);
	free(m->labels);
	lp_iset_free(&m->labelset);
	for (int s = 0; s < SEC__MAX; s++) {
		free(m->sec[s].entries);
		free(m->sec[s].prim.v);
		lp_addrmap_free(&m->sec[s].prim.by);
		free(m->sec[s].held.v);
		lp_addrmap_free(&m->sec[s].held.by);
	}
	lp_addrmap_free(&m->heap);
	free(m);
}

/* -- Sites and their names ------------------------------------------------------- */

struct label_key {
	const struct lp_memprof *m;
	const char *s;
};

static int label_eq(const void *ctx, uint32_t idx)
{
	const struct label_key *k = ctx;
	return strcmp(k->m->labels[idx].text, k->s) == 0;
}

static int intern_label(struct lp_memprof *m, const char *s, uint32_t *idx)
{
	struct label_key k = { m, s };
	uint64_t h = lp_hash_bytes(s, strlen(s), 2);
	if (lp_iset_find(&m->labelset, h, label_eq, &k, idx))
		return 0;
	if (lp_grow((void **)&m->labels, &m->labelcap, m->nlabels + 1, sizeof(*m->labels)))
		return -ENOMEM;
	char *copy = strdup(s);
	if (!copy || lp_iset_insert(&m->labelset, h, (uint32_t)m->nlabels)) {
		free(copy);
		return -ENOMEM;
	}
	memset(&m->labels[m->nlabels], 0, sizeof(*m->labels));
	m->labels[m->nlabels].text = copy;
	*idx = (uint32_t)m->nlabels++;
	return 0;
}

/* A C site's label: "name:0xstart", as Tarantool's parser prints a symbol; a stand-in name
 * the agent gave a function with no symbol ("object+0xoffset") says where it is already,
 * and its absolute address would differ from run to run: the name alone. */
static int c_label(char *buf, size_t len, const char *name, uint64_t start)
{
	if (strstr(name, "+0x"))
		return snprintf(buf, len, "%s", name);
	return snprintf(buf, len, "%s:0x%" PRIx64, name, start);
}

/* Names a site the way Tarantool's memprof parser does, and describes it as a frame.
 * Returns the label's length (as snprintf: buf holds all of it only when it is below
 * len). */
static int describe(struct lp_memprof *m, struct loc *l, char *buf, size_t len)
{
	int n = 0;
	memset(&l->f, 0, sizeof(l->f));
	switch (l->source) {
	case LP_ASOURCE_INT:
		n = snprintf(buf, len, "INTERNAL");
		l->f.kind = LP_FK_INTERNAL;
		l->f.name = "INTERNAL";
		break;
	case LP_ASOURCE_LFUNC: {
		const struct lp_sym_lua *s = lp_symtab_lua(m->st, l->addr);
		l->f.kind = LP_FK_LUA;
		l->f.line = l->line > UINT32_MAX ? UINT32_MAX : (uint32_t)l->line;
		if (s) {
			n = snprintf(buf, len, "%s:%" PRIu64, s->tchunk, l->line);
			l->f.name = s->chunk;
			l->f.fline = s->firstline;
		} else {
			n = snprintf(buf, len, "LFUNC 0x%" PRIx64 ":%" PRIu64, l->addr, l->line);
			l->f.name = NULL; /* set to the label below */
			l->f.nosym = 1;
		}
		break;
	}
	case LP_ASOURCE_CFUNC: {
		const struct lp_sym_c *s = lp_symtab_c(m->st, l->addr);
		l->f.kind = LP_FK_C;
		if (s) {
			n = c_label(buf, len, s->name, s->start);
			l->f.name = s->name;
			l->f.addr = s->start;
		} else {
			n = snprintf(buf, len, "CFUNC 0x%" PRIx64, l->addr);
			l->f.addr = l->addr;
		}
		break;
	}
	case LP_ASOURCE_TRACE: {
		const struct lp_sym_trace *t = lp_symtab_trace(m->st, l->traceno);
		const struct lp_sym_lua *s = t ? lp_symtab_lua(m->st, t->proto) : NULL;
		l->f.kind = LP_FK_TRACE;
		l->f.traceno = l->traceno > UINT32_MAX ? UINT32_MAX : (uint32_t)l->traceno;
		if (t && s) {
			n = snprintf(buf, len, "TRACE [%" PRIu64 "] started at %s:%" PRIu32,
				     l->traceno, s->tchunk, t->line);
			l->f.name = s->chunk;
			l->f.line = l->f.tline = t->line;
			l->f.fline = s->firstline;
		} else if (t) {
			n = snprintf(buf, len,
				     "TRACE [%" PRIu64 "] started at LFUNC 0x%" PRIx64 ":%" PRIu32,
				     l->traceno, t->proto, t->line);
			l->f.name = "?";
			l->f.line = t->line;
		} else {
			n = snprintf(buf, len, "TRACE [%" PRIu64 "]", l->traceno);
			l->f.name = "?";
		}
		break;
	}
	}
	return n < 0 ? 0 : n;
}

struct loc_key {
	const struct lp_memprof *m;
	const struct lp_mem_event *ev;
	int full;               /* compare sym too: the stream has redefined a symbol */
	struct sym_content sym;
};

static int loc_eq(const void *ctx, uint32_t idx)
{
	const struct loc_key *k = ctx;
	const struct loc *l = &k->m->locs[idx];
	return l->source == k->ev->source && l->addr == k->ev->loc_addr &&
	       l->line == k->ev->loc_line && l->traceno == k->ev->traceno &&
	       (!k->full || (l->sym.chunk == k->sym.chunk && l->sym.proto == k->sym.proto &&
			     l->sym.line == k->sym.line && l->sym.first == k->sym.first));
}

/* The symbols an event's location resolves to now (chunk names are interned: equal names,
 * equal pointers). */
static struct sym_content sym_content(struct lp_memprof *m, const struct lp_mem_event *ev)
{
	struct sym_content c = { NULL, 0, 0, 0 };
	uint64_t proto = ev->loc_addr;
	if (ev->source == LP_ASOURCE_CFUNC) {
		const struct lp_sym_c *s = lp_symtab_c(m->st, ev->loc_addr);
		if (s) {
			c.chunk = s->name;
			c.proto = s->start;
		}
		return c;
	}
	if (ev->source == LP_ASOURCE_TRACE) {
		const struct lp_sym_trace *t = lp_symtab_trace(m->st, ev->traceno);
		if (!t)
			return c;
		c.proto = proto = t->proto;
		c.line = t->line;
	} else if (ev->source != LP_ASOURCE_LFUNC) {
		return c;
	}
	const struct lp_sym_lua *s = lp_symtab_lua(m->st, proto);
	if (s) {
		c.chunk = s->chunk;
		c.first = s->firstline;
	}
	return c;
}

/* A site's key in locset: its location, and once the stream has redefined a symbol its
 * symbols too. A program that loads code again and again (templates, a reloaded handler)
 * or flushes its traces has thousands of sites at one location (a reused prototype
 * address, a reused trace number): with the location alone they share one hash, and every
 * event at that location compared itself with all of them (a report quadratic in the
 * stream's length). */
static uint64_t site_hash(uint8_t source, uint64_t addr, uint64_t line, uint64_t traceno,
			  int full, const struct sym_content *sym)
{
	uint64_t h = lp_hash_u64(addr ^ lp_hash_u64(line ^ (traceno << 20)) ^ source);
	if (full)
		h = lp_hash_u64(h ^ lp_hash_u64((uint64_t)(uintptr_t)sym->chunk ^
						lp_hash_u64(sym->proto ^ ((uint64_t)sym->line << 32 |
									  sym->first))));
	return h;
}

/* The first redefinition: every site so far goes into the index again, keyed by its
 * symbols (a site keeps the symbols it was made with). */
static int rehash_sites(struct lp_memprof *m)
{
	lp_iset_free(&m->locset);
	memset(&m->locset, 0, sizeof(m->locset));
	for (size_t i = 0; i < m->nlocs; i++) {
		const struct loc *l = &m->locs[i];
		if (lp_iset_insert(&m->locset, site_hash(l->source, l->addr, l->line, l->traceno,
							  1, &l->sym), (uint32_t)i))
			return -ENOMEM;
	}
	m->symhashed = 1;
	return 0;
}

static int site(struct lp_memprof *m, const struct lp_mem_event *ev, uint32_t *idx)
{
	/* Until the stream redefines a symbol, a location has one site: no look-up. After,
	 * sites of one location differ by their symbols. */
	struct loc_key k = { m, ev, lp_symtab_redefinitions(m->st) != 0, { NULL, 0, 0, 0 } };
	if (k.full)
		k.sym = sym_content(m, ev);
	if (m->nlocs && loc_eq(&k, m->last)) {
		*idx = m->last;
		return 0;
	}
	if (k.full && !m->symhashed && rehash_sites(m))
		return -ENOMEM;
	uint64_t h = site_hash(ev->source, ev->loc_addr, ev->loc_line, ev->traceno, k.full,
			       &k.sym);
	if (lp_iset_find(&m->locset, h, loc_eq, &k, idx)) {
		m->last = *idx;
		return 0;
	}
	if (lp_grow((void **)&m->locs, &m->loccap, m->nlocs + 1, sizeof(*m->locs)))
		return -ENOMEM;
	struct loc *l = &m->locs[m->nlocs];
	l->source = ev->source;
	l->addr = ev->loc_addr;
	l->line = ev->loc_line;
	l->traceno = ev->traceno;
	l->sym = k.full ? k.sym : sym_content(m, ev);
	l->entry[0] = l->entry[1] = l->entry[2] = UINT32_MAX;
	/* A label as long as its chunk name (up to LP_SYMTAB_MAX_NAME) or C symbol: cut, two
	 * lines of one chunk would read (and merge) as one site. */
	char small[1024], *buf = small;
	int need = describe(m, l, buf, sizeof(small));
	if ((size_t)need >= sizeof(small)) {
		if (!(buf = malloc((size_t)need + 1)))
			return -ENOMEM;
		describe(m, l, buf, (size_t)need + 1);
	}
	int rc = intern_label(m, buf, &l->label);
	if (buf != small)
		free(buf);
	if (rc)
		return -ENOMEM;
	if (!l->f.name)
		l->f.name = m->labels[l->label].text;
	if (lp_iset_insert(&m->locset, h, (uint32_t)m->nlocs))
		return -ENOMEM;
	*idx = m->last = (uint32_t)m->nlocs++;
	return 0;
}

/*
** C sites are named while events are read after the closest symbol below them, as
** Tarantool's parser does. When the luaprof extension (after the epilogue) has given
** symbol extents or the mapped objects, a site outside its symbol is renamed after its
** object (object+0xoffset, or 0xaddr): never an unrelated function. Runs once, before
** reporting; sites that print the same merge in the heap summary, so its per-name
** recency is recomputed from the sites.
*/
static int relabel(struct lp_memprof *m)
{
	if (m->relabeled || !lp_symtab_has_extents(m->st))
		return 0;
	m->relabeled = 1;
	for (size_t i = 0; i < m->nlocs; i++) {
		struct loc *l = &m->locs[i];
		if (l->source != LP_ASOURCE_CFUNC)
			continue;
		char buf[64], small[600], *label = small;
		uint64_t start;
		const char *object;
		const char *name = lp_symtab_name_c(m->st, l->addr, buf, sizeof(buf), &start,
						    &object);
		/* Named by a symbol a later run replaced (a library unloaded and another loaded
		 * at its address): as it was when its events were read. */
		const struct lp_sym_c *was = l->sym.chunk ? lp_symtab_c(m->st, l->sym.proto) : NULL;
		if (was && was->name != l->sym.chunk && was->standin != l->sym.chunk)
			continue;
		const struct lp_sym_c *sym = lp_symtab_c(m->st, l->addr);
		int by_symbol = sym && sym->start == start && strcmp(sym->name, name) == 0;
		/* As long as the symbol's name (a C++ one may be longer than any buffer): cut,
		 * two functions named alike up to the cut would merge into one site. */
		int need = by_symbol ? c_label(label, sizeof(small), name, start)
				     : snprintf(label, sizeof(small), "%s", name);
		if ((size_t)need >= sizeof(small)) {
			if (!(label = malloc((size_t)need + 1)))
				return -ENOMEM;
			if (by_symbol)
				c_label(label, (size_t)need + 1, name, start);
			else
				snprintf(label, (size_t)need + 1, "%s", name);
		}
		int rc = intern_label(m, label, &l->label);
		if (label != small)
			free(label);
		if (rc)
			return -ENOMEM;
		l->f.name = by_symbol ? sym->name : m->labels[l->label].text;
		l->f.addr = start;
		/* The object's path, as a sampled profile's C frames have it: the renderings
		 * name it, and the CLI's note on code no symbol names needs it. */
		l->f.file = object;
	}
	for (size_t i = 0; i < m->nlabels; i++)
		m->labels[i].last_alloc = 0;
	for (size_t i = 0; i < m->nlocs; i++) {
		struct label *lb = &m->labels[m->locs[i].label];
		if (m->locs[i].last_alloc > lb->last_alloc)
			lb->last_alloc = m->locs[i].last_alloc;
	}
	return 0;
}

/* -- Events ------------------------------------------------------------------------ */

static struct entry *entry_for(struct lp_memprof *m, int sec, uint32_t loc, uint32_t *eidx)
{
	struct section *s = &m->sec[sec];
	uint32_t e = m->locs[loc].entry[sec];
	if (e != UINT32_MAX) {
		*eidx = e;
		return &s->entries[e];
	}
	if (lp_grow((void **)&s->entries, &s->cap, s->n + 1, sizeof(*s->entries)))
		return NULL;
	struct entry *en = &s->entries[s->n];
	memset(en, 0, sizeof(*en));
	en->loc = loc;
	en->first = m->seq;
	*eidx = m->locs[loc].entry[sec] = (uint32_t)s->n++;
	return en;
}

/* Adds a realloc's or free's effect on a block of origin's to entry eidx's primaries
 * (flag: HELD_ADOPTED or 0, kept apart in the key). */
static int add_primary(struct prims *ps, uint32_t eidx, uint32_t origin, uint32_t flag,
		       uint64_t nsize, uint64_t osize)
{
	uint64_t key = (uint64_t)eidx << 32 | origin | flag;
	struct lp_addrmap_entry *pe = lp_addrmap_get(&ps->by, key);
	struct primary *p;
	if (pe) {
		p = &ps->v[pe->a];
	} else {
		if (lp_grow((void **)&ps->v, &ps->cap, ps->n + 1, sizeof(*ps->v)) ||
		    lp_addrmap_put(&ps->by, key, ps->n, 0))
			return -ENOMEM;
		p = &ps->v[ps->n++];
		memset(p, 0, sizeof(*p));
		p->entry = eidx;
		p->origin = origin;
	}
	p->allocated += nsize;
	p->freed += osize;
	p->count++;
	return 0;
}

/* Links a realloc / free at site loc to the sites of the block; *holder gets the block's
 * holder from now on. A realloc of a block never seen adopts it (HELD_ADOPTED). */
static int link_previous(struct lp_memprof *m, struct section *s, uint32_t eidx, uint32_t loc,
			 uint64_t oaddr, uint64_t nsize, uint32_t *holder)
{
	struct lp_addrmap_entry *blk = lp_addrmap_get(&m->heap, oaddr);
	*holder = loc;
	if (!blk) {
		if (!nsize)
			return 0; /* a free of a block never seen: no site had it */
		if (add_primary(&s->held, eidx, loc, HELD_ADOPTED, nsize, 0))
			return -ENOMEM;
		m->labels[m->locs[loc].label].last_alloc = m->locs[loc].last_alloc = m->seq;
		return 0;
	}
	uint32_t origin = (uint32_t)blk->b, h = (uint32_t)(blk->b >> 32);
	uint64_t osize = blk->a;
	if (add_primary(&s->prim, eidx, origin, 0, nsize, osize) ||
	    add_primary(&s->held, eidx, h, 0, nsize, osize))
		return -ENOMEM;
	if (nsize > 0)
		m->labels[m->locs[h].label].last_alloc = m->locs[h].last_alloc = m->seq;
	*holder = h;
	return 0;
}

int lp_memprof_event(struct lp_memprof *m, const struct lp_mem_event *ev)
{
	uint32_t loc, eidx;
	m->seq++;
	if (lp_symtab_c_event(m->st) || site(m, ev, &loc))
		return -ENOMEM;
	int sec = ev->event == LP_AEVENT_ALLOC ? SEC_ALLOC
		: ev->event == LP_AEVENT_REALLOC ? SEC_REALLOC : SEC_FREE;
	struct section *s = &m->sec[sec];
	struct entry *en = entry_for(m, sec, loc, &eidx);
	if (!en)
		return -ENOMEM;
	en->num++;
	if (ev->event != LP_AEVENT_FREE)
		en->alloc += ev->nsize;
	if (ev->event != LP_AEVENT_ALLOC)
		en->free += ev->osize;

	uint32_t holder = loc;
	if (ev->event == LP_AEVENT_ALLOC) {
		if (ev->nsize > 0)
			m->labels[m->locs[loc].label].last_alloc = m->locs[loc].last_alloc = m->seq;
	} else {
		int rc = link_previous(m, s, eidx, loc, ev->oaddr,
				       ev->event == LP_AEVENT_REALLOC ? ev->nsize : 0, &holder);
		if (rc)
			return rc;
		lp_addrmap_remove(&m->heap, ev->oaddr);
	}
	if (ev->event != LP_AEVENT_FREE &&
	    lp_addrmap_put(&m->heap, ev->naddr, ev->nsize, loc | (uint64_t)holder << 32))
		return -ENOMEM;
	return 0;
}

/* -- Text report ---------------------------------------------------------------- */

static void fmt_bytes(char *buf, size_t len, uint64_t bytes, int human)
{
	if (!human) {
		snprintf(buf, len, "%" PRIu64 "B", bytes);
		return;
	}
	static const char *const units[] = { "B", "KiB", "MiB", "GiB" };
	double v = (double)bytes;
	int u = 0;
	while (v >= 1024 && u < 3) {
		v /= 1024;
		u++;
	}
	if (v == (double)(uint64_t)v)
		snprintf(buf, len, "%" PRIu64 "%s", (uint64_t)v, units[u]);
	else
		snprintf(buf, len, "%.2f%s", v, units[u]);
}

/* Sorting needs the aggregator; qsort has no context argument, so sort index arrays
 * through a file-level pointer set just before each qsort (reports are single-threaded). */
static const struct lp_memprof *sort_m;

/* A printed line of a section: the entries of the sites that print the same (two functions
 * defined on one line of a chunk, a chunk loaded twice), summed, as the HEAP SUMMARY merges
 * them; two lines named alike told the user nothing. */
struct row {
	uint32_t label;
	uint64_t num, alloc, free;
	uint64_t first;       /* sequence number of its first event */
};

/* One line of a row's Overrides: the label of a site whose blocks it reallocated or
 * freed. */
struct override {
	uint32_t row, label;
};

static int row_cmp(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	if (x->num != y->num)
		return x->num > y->num ? -1 : 1;
	return x->first < y->first ? -1 : x->first > y->first;
}

static int override_cmp(const void *a, const void *b)
{
	const struct override *x = a, *y = b;
	if (x->row != y->row)
		return x->row < y->row ? -1 : 1;
	return strcmp(sort_m->labels[x->label].text, sort_m->labels[y->label].text);
}

static int leak_cmp(const void *a, const void *b)
{
	const struct label *x = &sort_m->labels[*(const uint32_t *)a];
	const struct label *y = &sort_m->labels[*(const uint32_t *)b];
	if (x->dbytes != y->dbytes)
		return x->dbytes > y->dbytes ? -1 : 1;
	return x->last_alloc > y->last_alloc ? -1 : x->last_alloc < y->last_alloc;
}

static int render_section(struct lp_memprof *m, const char *title, const struct section *s,
			  const struct lp_memprof_opts *o, FILE *out)
{
	struct row *rows = malloc((s->n + 1) * sizeof(*rows));
	uint32_t *rowof = malloc((m->nlabels + 1) * sizeof(*rowof));
	struct override *ov = malloc((s->prim.n + 1) * sizeof(*ov));
	if (!rows || !rowof || !ov) {
		free(rows);
		free(rowof);
		free(ov);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->nlabels; i++)
		rowof[i] = UINT32_MAX;
	size_t nrows = 0;
	for (size_t i = 0; i < s->n; i++) {
		const struct entry *e = &s->entries[i];
		uint32_t lb = m->locs[e->loc].label;
		if (rowof[lb] == UINT32_MAX) {
			rowof[lb] = (uint32_t)nrows;
			rows[nrows++] = (struct row){ lb, 0, 0, 0, e->first };
		}
		struct row *r = &rows[rowof[lb]];
		r->num += e->num;
		r->alloc += e->alloc;
		r->free += e->free;
		if (e->first < r->first)
			r->first = e->first;
	}
	qsort(rows, nrows, sizeof(*rows), row_cmp);
	for (size_t i = 0; i < nrows; i++)
		rowof[rows[i].label] = (uint32_t)i;
	size_t nov = 0;
	for (size_t i = 0; i < s->prim.n; i++) {
		const struct primary *p = &s->prim.v[i];
		ov[nov++] = (struct override){ rowof[m->locs[s->entries[p->entry].loc].label],
					       m->locs[p->origin].label };
	}
	sort_m = m;
	qsort(ov, nov, sizeof(*ov), override_cmp);
	fprintf(out, "%s\n", title);
	for (size_t i = 0, j = 0; i < nrows; i++) {
		const struct row *r = &rows[i];
		char a[48], f[48];
		fmt_bytes(a, sizeof(a), r->alloc, o->human_readable);
		fmt_bytes(f, sizeof(f), r->free, o->human_readable);
		fprintf(out, "%s: %" PRIu64 " events\t+%s\t-%s\n", m->labels[r->label].text,
			r->num, a, f);
		if (j < nov && ov[j].row == i) {
			fprintf(out, "\tOverrides:\n");
			for (uint32_t last = UINT32_MAX; j < nov && ov[j].row == i; last = ov[j++].label)
				if (ov[j].label != last)
					fprintf(out, "\t\t%s\n", m->labels[ov[j].label].text);
			fprintf(out, "\n");
		}
	}
	fprintf(out, "\n");
	free(rows);
	free(rowof);
	free(ov);
	return 0;
}

static int64_t clamp64(uint64_t v)
{
	return v > INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* Net bytes per printed site, computed from the aggregates as Tarantool's
 * process.form_heap_delta does (so zero-sized events count the same way), with reallocs
 * and frees charged to the block's holder (struct section). */
static void heap_delta(struct lp_memprof *m)
{
	for (size_t i = 0; i < m->nlabels; i++) {
		m->labels[i].dbytes = 0;
		m->labels[i].nalloc = m->labels[i].nfree = 0;
	}
	const struct section *a = &m->sec[SEC_ALLOC];
	for (size_t i = 0; i < a->n; i++) {
		struct label *lb = &m->labels[m->locs[a->entries[i].loc].label];
		if (a->entries[i].alloc > 0) {
			lb->dbytes = lp_sat_add(lb->dbytes, clamp64(a->entries[i].alloc));
			lb->nalloc += a->entries[i].num;
		}
	}
	for (int sec = SEC_REALLOC; sec <= SEC_FREE; sec++) {
		const struct section *s = &m->sec[sec];
		for (size_t i = 0; i < s->held.n; i++) {
			const struct primary *p = &s->held.v[i];
			struct label *lb = &m->labels[m->locs[p->origin].label];
			if (p->allocated > 0) {
				lb->dbytes = lp_sat_add(lb->dbytes, clamp64(p->allocated));
				lb->nalloc += p->count;
			}
			if (p->freed > 0) {
				lb->dbytes = lp_sat_add(lb->dbytes, -clamp64(p->freed));
				lb->nfree += p->count;
			}
		}
	}
}

int lp_memprof_report(struct lp_memprof *m, const struct lp_memprof_opts *o, FILE *out)
{
	if (relabel(m))
		return -ENOMEM;
	if (!o->leak_only) {
		static const char *const titles[SEC__MAX] = { "ALLOCATIONS", "REALLOCATIONS",
							      "DEALLOCATIONS" };
		for (int s = 0; s < SEC__MAX; s++)
			if (render_section(m, titles[s], &m->sec[s], o, out))
				return -ENOMEM;
	}
	heap_delta(m);
	uint32_t *leaks = malloc((m->nlabels + 1) * sizeof(*leaks));
	if (!leaks)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < m->nlabels; i++)
		if (m->labels[i].dbytes > 0)
			leaks[n++] = (uint32_t)i;
	sort_m = m;
	qsort(leaks, n, sizeof(*leaks), leak_cmp);
	fprintf(out, "HEAP SUMMARY:\n");
	for (size_t i = 0; i < n; i++) {
		const struct label *l = &m->labels[leaks[i]];
		char b[48];
		fmt_bytes(b, sizeof(b), (uint64_t)l->dbytes, o->human_readable);
		fprintf(out, "%s holds %s: %" PRIu64 " allocs, %" PRIu64 " frees\n", l->text, b,
			l->nalloc, l->nfree);
	}
	fprintf(out, "\n");
	free(leaks);

	size_t na = lp_symtab_naliases(m->st);
	if (na)
		fprintf(out, "ALIASES:\n");
	for (size_t i = 0; i < na; i++) {
		const char *alias, *chunk;
		lp_symtab_alias(m->st, i, &alias, &chunk);
		fprintf(out, "%s:\n", alias);
		/* Empty lines are left out, as Tarantool's parser leaves them, but counted:
		 * the sites name the chunk's own lines (Tarantool's numbering went on
		 * without them, so that "function_alias_1:3" was listed as line 2). */
		unsigned lineno = 1;
		for (const char *p = chunk; *p; lineno++) {
			const char *nl = strchr(p, '\n');
			size_t len = nl ? (size_t)(nl - p) : strlen(p);
			if (len > 0)
				fprintf(out, "%u\t| %.*s\n", lineno, (int)len, p);
			p += len + (nl ? 1 : 0);
		}
		fprintf(out, "\n\n");
	}
	if (fflush(out) || ferror(out))
		return -(errno ? errno : EIO);
	return 0;
}

void lp_memprof_alloc_bytes(const struct lp_memprof *m, uint64_t *all, uint64_t *traces)
{
	*all = *traces = 0;
	for (int sec = SEC_ALLOC; sec <= SEC_REALLOC; sec++) {
		const struct section *s = &m->sec[sec];
		for (size_t i = 0; i < s->n; i++) {
			*all += s->entries[i].alloc;
			if (m->locs[s->entries[i].loc].source == LP_ASOURCE_TRACE)
				*traces += s->entries[i].alloc;
		}
	}
}

/* -- Profile --------------------------------------------------------------------- */

struct lp_profile *lp_memprof_profile(struct lp_memprof *m)
{
	static const struct lp_value_type types[4] = {
		{ "alloc_space", "bytes" }, { "alloc_objects", "count" },
		{ "inuse_space", "bytes" }, { "inuse_objects", "count" },
	};
	if (relabel(m))
		return NULL;
	struct lp_profile *p = lp_profile_new(4, types);
	if (!p)
		return NULL;
	lp_profile_meta(p)->event = "memory";
	for (size_t i = 0; i < m->nlocs; i++)
		if (lp_profile_frame_id(p, &m->locs[i].f, &m->locs[i].frame))
			goto fail;
	for (int s = SEC_ALLOC; s <= SEC_REALLOC; s++) {
		const struct section *sec = &m->sec[s];
		for (size_t i = 0; i < sec->n; i++) {
			const struct entry *e = &sec->entries[i];
			int64_t v[4] = { clamp64(e->alloc), clamp64(e->num), 0, 0 };
			if (lp_profile_add(p, &m->locs[e->loc].frame, 1, v))
				goto fail;
		}
	}
	for (size_t i = 0; i < m->heap.cap; i++) {
		const struct lp_addrmap_entry *b = &m->heap.slots[i];
		if (!b->used)
			continue;
		int64_t v[4] = { 0, 0, clamp64(b->a), 1 };
		if (lp_profile_add(p, &m->locs[(uint32_t)b->b].frame, 1, v))
			goto fail;
	}
	return p;
fail:
	lp_profile_free(p);
	return NULL;
}
