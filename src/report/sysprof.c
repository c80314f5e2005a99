/*
** CPU profile aggregation: sysprof samples into merged C + Lua stacks.
*/
#include "report/sysprof.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "luaprof/format.h"
#include "util/addrmap.h"
#include "util/grow.h"
#include "util/iset.h"

/* What a host address means for the merge. */
enum anchor {
	ANCHOR_NONE,
	ANCHOR_VM_CALL,    /* lj_vm_pcall / lj_vm_call / lj_vm_cpcall / luaV_execute */
	ANCHOR_VM_RESUME,  /* lj_vm_resume */
	ANCHOR_API_CALL,   /* lua_pcall / lua_call / lua_cpcall ...: used when no VM entry is named */
	ANCHOR_API_RESUME, /* lua_resume */
	ANCHOR_VM_BLOCK,   /* the interpreter's block (lj_vm_asm_begin..lj_vm_ffi_call) */
	ANCHOR_UNNAMED     /* no symbol covers it: JIT trace code, mostly */
};

static const struct {
	const char *name;
	enum anchor kind;
} anchor_names[] = {
	{ "lj_vm_pcall", ANCHOR_VM_CALL },   { "lj_vm_call", ANCHOR_VM_CALL },
	{ "lj_vm_cpcall", ANCHOR_VM_CALL },  { "luaV_execute", ANCHOR_VM_CALL },
	{ "lj_vm_resume", ANCHOR_VM_RESUME },
	{ "lua_pcall", ANCHOR_API_CALL },    { "lua_call", ANCHOR_API_CALL },
	{ "lua_cpcall", ANCHOR_API_CALL },   { "lua_pcallk", ANCHOR_API_CALL },
	{ "lua_callk", ANCHOR_API_CALL },
	{ "lua_resume", ANCHOR_API_RESUME },
};

/* Which samples a replacement's after[] counts. */
enum { REPL_TRACE, REPL_GC };

struct lp_sysprof {
	struct lp_symtab *st;
	struct lp_sysprof_opts opts;
	struct lp_profile *raw;       /* C frames still unnamed: name "", addr = address */
	uint64_t vmstate[LP_VMST__MAX];
	struct lp_addrmap anchors;    /* address -> (anchor kind, symbol start + 1 or 0) */
	size_t anchors_ncsyms;        /* symbol count the cache was built with */
	uint32_t vmframe[LP_VMST__MAX]; /* pseudo-frame ids, UINT32_MAX until made */
	/* Frame-id caches: interning hashes the frame's strings, too slow per frame. */
	struct lp_addrmap cframes;    /* raw address -> frame id, and the C epoch + 1 it is
				       * of (only cepoch's are used) */
	uint32_t cepoch;              /* the C symbols' epoch of the stacks being built
				       * (lp_symtab_c_epoch; UINT32_MAX: the latest names):
				       * raw C frames carry it as their line until named */
	struct lp_addrmap luaframes;  /* hash(proto, line) -> (proto, line << 32 | frame id) */
	uint64_t luagen;              /* symtab generation luaframes was filled with */
	/* Per-sample scratch, grown as needed. */
	uint32_t *out;
	size_t outcap;
	size_t *seg_start;            /* Lua index where each segment starts */
	size_t segcap;
	size_t *anchor_at;            /* host index of each usable anchor */
	size_t anchorcap;
	/* TRACE samples wait for the extension's full stacks (stack and tsample records come
	 * after every sample): added to the profile when it is built. */
	struct tframe {               /* the trace frame of each TRACE sample, in order: */
		uint32_t at;          /* at the prototype and line it executes */
		uint32_t start;       /* at the line where it starts */
		uint32_t cepoch;      /* the C symbols' epoch it was read in */
		uint64_t proto, line; /* what it executes */
	} *tframe;
	size_t ntframe, tframecap;
	struct pairs {                /* sample ordinal -> stack id (tsample, gsample) */
		struct pair { uint64_t ordinal, id; } *p;
		size_t n, cap;
	} tpairs;
	struct rawstack {
		size_t lua, nlua, host, nhost;  /* offsets and counts in the pools */
		size_t merged, nmerged;         /* cached merge in mpool, once done ... */
		int done;
		int cpu;                        /* a CPU sample's own stacks, not a record's */
		int cut;                        /* the host stack was cut short (LP_HOST_CUT) */
		uint64_t epoch;                 /* ... with the names of this overlay epoch */
	} *stacks;
	size_t nstacks, stackcap;
	struct lp_addrmap stack_ids;  /* id from the stream -> index in stacks */
	struct lp_lua_frame *lpool;
	size_t nlpool, lpoolcap;
	uint64_t *hpool;
	size_t nhpool, hpoolcap;
	uint32_t *mpool;
	size_t nmpool, mpoolcap;
	/*
	** CPU samples with Lua frames wait too: their merge classifies host addresses by the
	** symbols that cover them, and the extension's symbol sizes and mapped objects come
	** after every sample. Before those, a symbol of unknown extent covers 256 KiB above
	** it, and JIT machine code placed there (after a library's text) looked like a named
	** C function instead of a VM entry: the sample lost its anchor and its Lua frames
	** went to the root. Kept as counts of (raw stacks, VM state, symbol replacements
	** made before, C symbols' epoch): memory grows with distinct stacks, not with
	** samples.
	*/
	struct dsample {
		uint32_t stack, nrepl, cepoch;
		uint8_t vmstate;
		int64_t count;
	} *dsmp;
	size_t ndsmp, dsmpcap;
	struct lp_addrmap dedup;      /* hash of a sample's stacks -> index in stacks */
	/*
	** GC and JIT compiler samples (RECORD, OPT, ASM) wait as well: the extension may give
	** one the Lua + host stack of the code that ran the collector, or that is being
	** compiled (stack, gsample and jsample records), which the ljp v2 sample has no room
	** for. Each keeps its own host stack (interned, as dsmp's) for when it does not.
	*/
	struct gsmp { uint32_t stack, cepoch; uint8_t vmstate; } *gsmp; /* in order; stack: its
									  * host stack in stacks */
	size_t ngsmp, gsmpcap;
	struct pairs gpairs, jpairs;  /* GC samples' ordinals, compiler samples' */
	struct pairs xpairs;          /* trace exit samples' */
	struct lp_addrmap gside;      /* stack id -> index in stacks of its copy for them */
	struct lp_addrmap astate;     /* memory: stack id -> vmstate of the collector's or
				       * compiler's allocations (astate records) */
	struct lp_addrmap dkeys;      /* hash of a dsample's key -> index in dsmp */
	int finished;                 /* the deferred samples (TRACE, CPU or memory) were added */
	/* Memory samples. */
	int memory;
	uint64_t sample_bytes;
	struct msample { uint64_t id, size, count; int live; } *msmp;
	size_t nmsmp, msmpcap;
	uint64_t nsampled;              /* the samples msmp stands for (counts summed) */
	/* Lua symbols replaced while samples were read (a proto address reused), so that
	 * their stacks, resolved at the end, name frames as of their own time: replacement
	 * k happened after the first after[REPL_TRACE] TRACE samples and after[REPL_GC] GC
	 * and compiler samples, and before the deferred samples whose nrepl is above k. */
	struct replaced { uint64_t after[2], proto; struct lp_sym_lua old; } *repl;
	size_t nrepl, replcap;
	struct lp_addrmap overlay;    /* proto -> index in repl: its name at the current sample */
	uint64_t epoch;               /* bumped whenever overlay changes */
	char *ffbuf;                  /* fast-function names, NUL-separated ... */
	const char **ffnames;         /* ... indexed by id (NULL = unknown) */
	size_t nffnames;
};

struct lp_sysprof *lp_sysprof_new(struct lp_symtab *st, const struct lp_sysprof_opts *o)
{
	static const struct lp_value_type samples = { "samples", "count" };
	struct lp_sysprof *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	s->st = st;
	if (o)
		s->opts = *o;
	s->raw = lp_profile_new(1, &samples);
	if (!s->raw) {
		free(s);
		return NULL;
	}
	for (int i = 0; i < LP_VMST__MAX; i++)
		s->vmframe[i] = UINT32_MAX;
	return s;
}

void lp_sysprof_free(struct lp_sysprof *s)
{
	if (!s)
		return;
	lp_profile_free(s->raw);
	lp_addrmap_free(&s->anchors);
	lp_addrmap_free(&s->cframes);
	lp_addrmap_free(&s->luaframes);
	free(s->out);
	free(s->seg_start);
	free(s->anchor_at);
	free(s->ffbuf);
	free(s->ffnames);
	free(s->tframe);
	free(s->tpairs.p);
	free(s->gsmp);
	free(s->gpairs.p);
	free(s->jpairs.p);
	free(s->xpairs.p);
	lp_addrmap_free(&s->gside);
	lp_addrmap_free(&s->astate);
	free(s->dsmp);
	lp_addrmap_free(&s->dedup);
	lp_addrmap_free(&s->dkeys);
	free(s->stacks);
	lp_addrmap_free(&s->stack_ids);
	free(s->lpool);
	free(s->hpool);
	free(s->mpool);
	free(s->repl);
	lp_addrmap_free(&s->overlay);
	free(s->msmp);
	free(s);
}

int lp_sysprof_set_ffnames(struct lp_sysprof *s, const char *names)
{
	free(s->ffbuf);
	free(s->ffnames);
	s->ffnames = NULL;
	s->nffnames = 0;
	if (!(s->ffbuf = strdup(names)))
		return -ENOMEM;
	size_t cap = 0;
	for (char *save = NULL, *tok = strtok_r(s->ffbuf, " ", &save); tok;
	     tok = strtok_r(NULL, " ", &save)) {
		if (lp_grow((void **)&s->ffnames, &cap, s->nffnames + 1, sizeof(*s->ffnames)))
			return -ENOMEM;
		s->ffnames[s->nffnames++] = strcmp(tok, "-") ? tok : NULL;
	}
	return 0;
}

const uint64_t *lp_sysprof_vmstates(const struct lp_sysprof *s)
{
	return s->vmstate;
}

/* -- Frames ---------------------------------------------------------------------- */

static int push(struct lp_sysprof *s, size_t *n, uint32_t id)
{
	if (lp_grow((void **)&s->out, &s->outcap, *n + 1, sizeof(*s->out)))
		return -ENOMEM;
	s->out[(*n)++] = id;
	return 0;
}

/*
** A CPU sample's trace code keyed by the trace that ran there (kcode record), in the
** walks of the deferred samples at the end: the trace's frame, its prototype named as it
** was at the sample being walked (the overlay undoes the later redefinitions, as for Lua
** frames). The agent writes a prototype's symbol again before a sample once another
** function took its address (a chunk loaded, collected, and the next loaded there), and a
** trace keeps its prototype alive while its code is keyed: at the sample the symbol is
** the trace's. lp_symtab_tcode, which resolves after the whole stream, could only refuse
** such a prototype (the frame stayed a raw address). 0 and *f, or -1.
*/
static int keyed_trace(struct lp_sysprof *s, uint64_t addr, struct lp_frame *f)
{
	uint64_t traceno;
	const struct lp_sym_trace *tr;
	if (!s->finished || s->memory || !LP_HOST_KEYED(addr) ||
	    lp_symtab_kcode(s->st, addr, &traceno, &tr) || traceno > UINT32_MAX)
		return -1;
	const struct lp_addrmap_entry *o = s->nrepl ? lp_addrmap_get(&s->overlay, tr->proto)
						    : NULL;
	const struct lp_sym_lua *fn = o ? &s->repl[o->a].old : lp_symtab_lua(s->st, tr->proto);
	if (!fn)
		return -1;
	memset(f, 0, sizeof(*f));
	f->kind = LP_FK_TRACE;
	f->name = fn->chunk;
	f->fline = fn->firstline;
	f->line = f->tline = tr->line;
	f->traceno = (uint32_t)traceno;
	return 0;
}

/* Whether addr is a trace's code that the stream names with certainty (its frame is then
 * the trace's). */
static int trace_code(struct lp_sysprof *s, uint64_t addr)
{
	struct lp_frame f;
	uint64_t tn;
	const struct lp_sym_trace *tr;
	const struct lp_sym_lua *fn;
	return keyed_trace(s, addr, &f) == 0 || lp_symtab_tcode(s->st, addr, &tn, &tr, &fn) == 0;
}

/*
** The C epoch of the stacks built next: a library loaded where another was named anew
** (lp_symtab_c_epoch) names the frames of the samples read after it, not those before.
*/
static void set_cepoch(struct lp_sysprof *s, uint32_t cepoch)
{
	if (s->cepoch == cepoch)
		return;
	/* cframes is not emptied: a churn of libraries made an epoch of nearly every sample,
	 * and emptying a cache of every address seen, each time, most of a report's time. */
	s->cepoch = cepoch;
	s->epoch++; /* merged stacks are of another epoch's frames */
}

static int c_frame(struct lp_sysprof *s, uint64_t addr, uint32_t *id)
{
	struct lp_frame kf;
	if (keyed_trace(s, addr, &kf) == 0) /* named as at the sample: not from the cache */
		return lp_profile_frame_id(s->raw, &kf, id) ? -ENOMEM : 0;
	struct lp_addrmap_entry *e = lp_addrmap_get(&s->cframes, addr);
	if (e && e->b == (uint64_t)s->cepoch + 1) {
		*id = (uint32_t)e->a;
		return 0;
	}
	/* Unnamed until the end (name_c), as of its epoch. */
	struct lp_frame f = { .kind = LP_FK_C, .name = "", .addr = addr, .line = s->cepoch };
	if (lp_profile_frame_id(s->raw, &f, id))
		return -ENOMEM;
	return lp_addrmap_put(&s->cframes, addr, *id, (uint64_t)s->cepoch + 1);
}

static int lua_frame(struct lp_sysprof *s, const struct lp_lua_frame *lf, uint32_t *id)
{
	struct lp_frame f;
	char buf[64];
	memset(&f, 0, sizeof(f));
	switch (lf->type) {
	case LP_FRAME_LFUNC: {
		struct lp_addrmap_entry *o = s->nrepl ? lp_addrmap_get(&s->overlay, lf->addr) : NULL;
		if (o) {
			/* Named as it was at the sample: not from or into the cache. */
			const struct lp_sym_lua *old = &s->repl[o->a].old;
			f.kind = LP_FK_LUA;
			f.line = lf->line > UINT32_MAX ? UINT32_MAX : (uint32_t)lf->line;
			f.name = old->chunk;
			f.fline = old->firstline;
			return lp_profile_frame_id(s->raw, &f, id);
		}
		/* Cached by (prototype, line); a hash collision just misses the cache. */
		if (s->luagen != lp_symtab_lua_generation(s->st)) {
			lp_addrmap_clear(&s->luaframes);
			s->luagen = lp_symtab_lua_generation(s->st);
		}
		uint64_t line32 = lf->line > UINT32_MAX ? UINT32_MAX : lf->line;
		uint64_t key = lp_hash_u64(lf->addr ^ lp_hash_u64(line32));
		struct lp_addrmap_entry *e = lp_addrmap_get(&s->luaframes, key);
		if (e && e->a == lf->addr && e->b >> 32 == line32) {
			*id = (uint32_t)e->b;
			return 0;
		}
		const struct lp_sym_lua *sym = lp_symtab_lua(s->st, lf->addr);
		f.kind = LP_FK_LUA;

		f.line = lf->line > UINT32_MAX ? UINT32_MAX : (uint32_t)lf->line;
		if (sym) {
			f.name = sym->chunk;
			f.fline = sym->firstline;
		} else {
			snprintf(buf, sizeof(buf), "[unknown function 0x%" PRIx64 "]", lf->addr);
			f.name = buf;
			f.nosym = 1;
		}
		if (lp_profile_frame_id(s->raw, &f, id))
			return -ENOMEM;
		if (e)
			return 0; /* collision: keep the entry that is there */
		return lp_addrmap_put(&s->luaframes, key, lf->addr, line32 << 32 | *id);
	}
	case LP_FRAME_CFUNC:
		return c_frame(s, lf->addr, id);
	default: /* LP_FRAME_FFUNC: fast-function ids are build-specific, no names in v2 */
		snprintf(buf, sizeof(buf), "builtin#%" PRIu64, lf->addr);
		f.kind = LP_FK_FFUNC;
		f.name = buf;
		f.addr = lf->addr; /* the id, for naming once the producer's list is known */
		return lp_profile_frame_id(s->raw, &f, id);
	}
}

static int vm_frame(struct lp_sysprof *s, unsigned vmstate, uint32_t *id)
{
	if (s->vmframe[vmstate] == UINT32_MAX) {
		struct lp_frame f = { .kind = LP_FK_VMSTATE, .name = lp_vmstate_name(vmstate) };
		if (lp_profile_frame_id(s->raw, &f, &s->vmframe[vmstate]))
			return -ENOMEM;
	}
	*id = s->vmframe[vmstate];
	return 0;
}

/* -- Anchors ---------------------------------------------------------------------- */

/* Whether builtin ffid resumes a coroutine on a C frame of its own (by the stream's
 * ffnames; unknown without them). */
static int resume_builtin(const struct lp_sysprof *s, uint64_t ffid)
{
	const char *name = ffid < s->nffnames ? s->ffnames[ffid] : NULL;
	return name && (!strcmp(name, "coroutine.resume") || !strcmp(name, "coroutine.wrap_aux"));
}

/* The resuming builtins among lua[1..nl) (not the innermost frame: it resumes nothing
 * inside the sample). */
static size_t count_resumers(const struct lp_sysprof *s, const struct lp_lua_frame *lua,
			     size_t nl)
{
	size_t n = 0;
	for (size_t i = 1; i < nl; i++)
		n += lua[i].type == LP_FRAME_FFUNC && resume_builtin(s, lua[i].addr);
	return n;
}

/* Whether builtin ffid is pcall or xpcall, which call Lua from the interpreter's own
 * frame (by the stream's ffnames). */
static int protect_builtin(const struct lp_sysprof *s, uint64_t ffid)
{
	const char *name = ffid < s->nffnames ? s->ffnames[ffid] : NULL;
	return name && (!strcmp(name, "pcall") || !strcmp(name, "xpcall"));
}

/* Classifies a host address (cached; the cache is dropped when symbols are added). */
static enum anchor classify(struct lp_sysprof *s, uint64_t addr, uint64_t *symstart)
{
	if (s->anchors_ncsyms != lp_symtab_ncsyms(s->st)) {
		lp_addrmap_clear(&s->anchors);
		s->anchors_ncsyms = lp_symtab_ncsyms(s->st);
	}
	struct lp_addrmap_entry *e = lp_addrmap_get(&s->anchors, addr);
	if (e) {
		*symstart = e->b;
		return (enum anchor)e->a;
	}
	enum anchor kind = ANCHOR_NONE;
	const struct lp_sym_c *sym = lp_symtab_c(s->st, addr);
	*symstart = sym ? sym->start + 1 : 0;
	for (size_t i = 0; sym && i < sizeof(anchor_names) / sizeof(anchor_names[0]); i++)
		if (strcmp(sym->name, anchor_names[i].name) == 0)
			kind = anchor_names[i].kind;
	/* Unnamed code stands for a trace; with the mapped objects known, only code outside
	 * them is (a stripped library's static function is not). */
	/* The interpreter's block is one piece of VM code whatever names lie inside it: an
	 * unstripped LuaJIT (a host linked with the static library) names it after its
	 * handlers (lj_BC_FUNCC, lj_ff_*) and entries (lj_vm_pcall, which is never a
	 * return address: it jumps into the interpreter, whose handlers call C), and read
	 * as plain C code, no VM code anchored a segment and every sample's Lua frames went
	 * to the root, above _start. Its code keeps those names when shown: they say which
	 * bytecode or builtin ran. */
	uint64_t lo, hi;
	if (!sym)
		kind = lp_symtab_mapped(s->st, addr) == 1 ? ANCHOR_NONE : ANCHOR_UNNAMED;
	else if (strcmp(sym->name, "lj_vm_asm_begin") == 0 ||
		 (lp_symtab_vm_block(s->st, &lo, &hi) && addr >= lo && addr < hi))
		kind = ANCHOR_VM_BLOCK;
	/* A failed insert only costs a later lookup. */
	(void)lp_addrmap_put(&s->anchors, addr, kind, *symstart);
	return kind;
}

/* -- Merge -------------------------------------------------------------------------- */

static enum anchor c_frame_kind(struct lp_sysprof *s, uint64_t addr)
{
	uint64_t ss;
	return classify(s, addr, &ss);
}

/*
** host[k] is the recorder's copy of host[k - 1]: VM code run below its entry's C frame (a
** trace's exit handler) stepped to that C frame at the same address, where that code
** itself called C (lj_trace_exit and a collector step under it: a finalizer run from a
** trace), not VM code of another entry. Coroutines resumed by coroutine.wrap inside one
** that wrap resumed have the same return address twice too, each a resume running VM
** code: those stay.
*/
static int step_copy_at(struct lp_sysprof *s, const uint64_t *host, size_t k)
{
	uint64_t ss;
	if (k == 0 || host[k] != host[k - 1])
		return 0;
	if (k < 2)
		return 1;
	enum anchor in = classify(s, host[k - 2], &ss);
	return in != ANCHOR_VM_BLOCK && in != ANCHOR_UNNAMED;
}

/* Whether an API function (lua_call...) whose frame holds inner has not entered the VM yet:
 * inner is plain C code, not the interpreter's block or a trace (lua_call shifting its
 * arguments with memmove, through its PLT stub, before its tail call into the
 * interpreter; a stack growth). Only where the stream maps the objects (luaprof's agent,
 * which names the interpreter's block too); else unknown: no. */
static int api_prologue(struct lp_sysprof *s, uint64_t api, uint64_t inner)
{
	uint64_t ss;
	return lp_symtab_mapped(s->st, api) == 1 && classify(s, inner, &ss) == ANCHOR_NONE;
}

/* Whether host address addr is named as the code of a C function of the Lua stack other
 * than the innermost frame lua[0] (the stream names those functions: its cfunc symbols). */
static int outer_cfunc_code(struct lp_sysprof *s, const struct lp_lua_frame *lua, size_t nl,
			    uint64_t addr)
{
	uint64_t ss;
	classify(s, addr, &ss);
	if (!ss || ss == lua[0].addr + 1)
		return 0;
	for (size_t j = 1; j < nl; j++)
		if (lua[j].type == LP_FRAME_CFUNC && ss == lua[j].addr + 1)
			return 1;
	return 0;
}

/*
** An unstripped VM (a host linked with the static library) names the interpreter's code
** that calls a builtin written in C: lj_BC_FUNCC calling its lua_CFunction (table.sort's
** lj_cf_table_sort), lj_fff_fallback calling an assembler builtin's C half (lj_ffh_*).
** Those frames, between the builtin's Lua frame and the C code its function calls, are
** the builtin itself, which its Lua frame names already: they showed it twice
** (table.sort;lj_BC_FUNCC;lj_cf_table_sort), where a stripped VM shows its block and an
** unnamed function. Returns how many host frames from host[k] inward are that: VM code
** down to the frame calling C, then the C function; else 0 (a C function of the Lua
** stack called by lj_BC_FUNCC is no builtin, and keeps its frames: its Lua frame is not
** shown). k is the outermost frame inside the builtin's segment.
** An assembler builtin's own code (lj_ff_tostring, calling lj_strfmt_num; a resuming one,
** lj_ff_coroutine_resume, calling lj_vm_resume for the coroutine's frames) is the builtin
** too: the VM frames down to it are hidden, and what it calls stays
** (tostring;lj_strfmt_num, coroutine.resume;@co.lua:3). So are the tails the assembler
** builtins share (lj_fff_*: lj_fff_gcstep calling lj_gc_step for tostring or string.sub,
** lj_fff_newstr calling lj_str_new, the lj_fff_res* that return their results): only a
** builtin's code reaches them, its frame at BASE (tostring;lj_gc_step, not
** tostring;lj_fff_gcstep;lj_gc_step). The first of those names met going in decides: a
** coroutine's own lj_BC_FUNCC, further in, is its segment's.
*/
static size_t builtin_frames(struct lp_sysprof *s, const uint64_t *host, size_t k)
{
	uint64_t ss;
	for (size_t j = k + 1; j-- > 0;) {
		if (classify(s, host[j], &ss) != ANCHOR_VM_BLOCK)
			return 0;
		const struct lp_sym_c *sym = lp_symtab_c(s->st, host[j]);
		int fallback = sym && !strncmp(sym->name, "lj_fff_fallback", 15);
		if (sym && (!strncmp(sym->name, "lj_ff_", 6) ||
			    (!strncmp(sym->name, "lj_fff_", 7) && !fallback)))
			return k - j + 1;
		if (j > 0 && sym && (!strcmp(sym->name, "lj_BC_FUNCC") || fallback))
			return classify(s, host[j - 1], &ss) == ANCHOR_NONE ? k - j + 2 : 0;
	}
	return 0;
}

/* Whether the writer cut the host stack short: then *nhost leaves out its marker. */
static int host_cut(const uint64_t *host, size_t *nhost)
{
	if (!*nhost || host[*nhost - 1] != LP_HOST_CUT)
		return 0;
	--*nhost;
	return 1;
}

/*
** Builds the merged stack of a guest sample into s->out, root first.
** lua[] and host[] arrive innermost first, as in the stream. trace_leaf: host[0] is the
** machine code of the running trace (a TRACE sample's full stack): it is the VM entry of
** the innermost segment, and not shown, since the trace's own frame follows. cut: the
** writer cut the host stack short (its outermost frames are missing).
*/
static int merge_stack(struct lp_sysprof *s, const struct lp_sys_sample *smp, int trace_leaf,
		       int cut, size_t *n)
{
	size_t nl = smp->nlua, nh = smp->nhost;
	const struct lp_lua_frame *lua = smp->lua;   /* lua[nl-1] is the outermost */
	const uint64_t *host = smp->host;            /* host[nh-1] is the outermost */

	/* Segments, outermost first. A C function with Lua frames inside it is a definite
	 * boundary; a builtin with Lua inside is one only when the host stack has more
	 * anchors than definite segments (C-implemented builtins such as table.sort call
	 * back through lj_vm_call, assembler ones such as pcall do not), taken innermost
	 * first. Segment j covers lua indices [seg_start[j], seg_start[j+1]) in outermost-
	 * first order, where the boundary frame ends the outer segment. */
	/* inner_resumers: the resuming builtins inside the innermost C code that calls Lua (a
	 * C function, or a builtin that calls back from C code of its own: table.sort), the
	 * only ones that can have resumed the leaf's coroutine with no C frame between. */
	size_t definite = 0, optional = 0, protects = 0, inner_resumers = 0;
	size_t resumers = count_resumers(s, lua, nl);
	int c_seen = 0;
	for (size_t i = 1; i < nl; i++) { /* lua[i] has lua[i-1] inside it */
		if (lua[i].type == LP_FRAME_CFUNC) {
			definite++;
			c_seen = 1;
		} else if (lua[i].type == LP_FRAME_FFUNC) {
			optional++;
			int r = resume_builtin(s, lua[i].addr), p = protect_builtin(s, lua[i].addr);
			protects += p;
			inner_resumers += r && !c_seen;
			c_seen |= !r && !p;
		}
	}

	/* Usable anchors, outermost first: one tier only (VM entries when any is named,
	 * else API calls), and only from the innermost resume inwards.
	 * API tier (a stripped VM, where static code that follows an API function is
	 * named after it until the extension's sizes arrive): of consecutive API frames
	 * only the innermost, and not the leaf, since an anchor calls into the VM. C also
	 * enters the VM with no API frame of its own (lua_call tail-calls lj_vm_call, C
	 * builtins call it directly, FFI callbacks enter lj_vm_ffi_callback): VM code
	 * called by a named C frame that is no API frame is an anchor itself. VM code is
	 * the interpreter's block, or (when the stack needs more anchors than that gives)
	 * code no symbol covers: a trace running on the entry's native frame. */
	int have_vm = 0;
	for (size_t i = 0; i < nh; i++) {
		uint64_t ss;
		enum anchor a = classify(s, host[i], &ss);
		if (a == ANCHOR_VM_CALL || a == ANCHOR_VM_RESUME)
			have_vm = 1;
	}
	size_t na = 0, leaf_entry = 0;
	uint64_t ss0;
	/* VM code run below its entry's C frame (a trace's exit handler, its ExitState on the
	 * stack; a helper with data on the stack) is stepped by the agent to that C frame at
	 * the same address, so host[1] is host[0] again: that copy is neither shown nor an
	 * anchor, and what follows it is the entry's caller, as after trace code. Counted as
	 * an anchor, it took the next segment out: an FFI callback's trace had its caller's
	 * Lua frames placed inside the callback, after qsort. */
	int step_copy = trace_leaf && nh > 1 && host[1] == host[0];
	int leaf_is_trace = trace_leaf && nh &&
			    (step_copy || classify(s, host[0], &ss0) == ANCHOR_UNNAMED);
	for (size_t k = 1; trace_leaf && k < nh; k++) {
		uint64_t ss;
		enum anchor a = classify(s, host[k], &ss);
		if (a != ANCHOR_VM_BLOCK && a != ANCHOR_UNNAMED) {
			leaf_entry = k;
			break;
		}
	}
	/* Interpreter code between a leaf in the interpreter and its API frame, other than the
	 * step's copy, with a resuming builtin in the Lua stack: a coroutine resumed by an
	 * assembler builtin (coroutine.resume, wrap) runs on a C frame of its own, with no API
	 * frame, under the resumer's interpreter. The API frame is then the resumer's entry,
	 * not the leaf's: its segment belongs there (it was placed after the resumer's VM
	 * frame, splitting the program's root three ways). Any other builtin (pcall) makes
	 * no C frame: interpreter code there is a helper the leaf called, as without one;
	 * a stream without the builtins' names (ffnames) keeps that reading too. */
	int resumed = 0, all_vm = trace_leaf && !leaf_is_trace && !have_vm && leaf_entry > 1;
	size_t nvm = 0;
	for (size_t k = 1 + (size_t)step_copy; k < leaf_entry; k++) {
		uint64_t ss;
		int vm = classify(s, host[k], &ss) == ANCHOR_VM_BLOCK;
		resumed |= inner_resumers && vm && host[k] != host[0];
		all_vm &= vm;
		nvm += vm;
	}
	/* Otherwise that code is the leaf's entry calling a helper of its own (a rounding or
	 * modulo routine in the interpreter's block), and so are the frames right after the
	 * leaf beyond one a resume: not shown, so that the helper's samples share their Lua
	 * line's path (they went before the Lua frames, a root of their own). helper_end:
	 * host frames in [1, helper_end) are hidden. */
	/* A C function that is the innermost Lua frame and has a host frame of its own
	 * (cf_at) runs no Lua frame of the sample above that frame: VM code there is the VM
	 * entering a Lua function the C code calls (lua_call, before the callee's frame is
	 * linked) or leaving one (after it was unlinked), in the VM's state still C. Taken
	 * for the innermost segment's entry, it put the sample's Lua frames there, the main
	 * chunk's line shown as called from inside the C module (lpeg's match calling a
	 * capture function: 3 % of such a loop's samples); those frames belong to the
	 * entries outside the C function, and the VM code is shown as C code the C function
	 * called (its cost of calling Lua). */
	size_t cf_at = 0;
	int cf_found = 0;
	for (size_t k = 0; nl && lua[0].type == LP_FRAME_CFUNC && k < nh && !cf_found; k++) {
		uint64_t ss;
		classify(s, host[k], &ss);
		if (ss == lua[0].addr + 1) {
			cf_at = k;
			cf_found = 1;
		}
	}
	/* A C function that reached its code by a tail call has no frame of its own: its
	 * frame is then the innermost plain C code that VM code called. Not the code of a C
	 * function further out in the Lua stack: VM code inside that is the VM calling the
	 * innermost one or back from it (require's lua_call of package.loaders[2], state
	 * C), which has no host frame yet; taken for its frame, the leaf's VM code anchored
	 * nothing and every segment went one entry out, the outermost above _start. */
	for (size_t k = 0; nl && lua[0].type == LP_FRAME_CFUNC && k + 1 < nh && !cf_found; k++) {
		if (outer_cfunc_code(s, lua, nl, host[k]))
			break;
		enum anchor out = c_frame_kind(s, host[k + 1]);
		if (c_frame_kind(s, host[k]) == ANCHOR_NONE &&
		    (out == ANCHOR_VM_BLOCK || out == ANCHOR_UNNAMED)) {
			cf_at = k;
			cf_found = 1;
		}
	}
	/* That C function with no host frame at all, the leaf VM code calling it or back from
	 * it: that code is shown between the segment's Lua frames and the function, as in
	 * the function's own samples (it was hidden: "line;each" beside "line;VM;each"). */
	uint64_t ss_leaf;
	int vm_calls_cf = trace_leaf && !have_vm && !cf_found && nl &&
			  lua[0].type == LP_FRAME_CFUNC && nh &&
			  classify(s, host[0], &ss_leaf) == ANCHOR_VM_BLOCK;
	size_t helper_end = 0;
	if (all_vm)
		helper_end = !resumed ? leaf_entry
			   : nvm > inner_resumers ? 1 + (size_t)step_copy + (nvm - inner_resumers)
						  : 0;
	for (int unnamed = 0; unnamed < 2; unnamed++) {
		int unnamed_seen = 0;
		na = 0;
		for (size_t k = nh; k-- > 0;) {
			uint64_t ss;
			enum anchor a = classify(s, host[k], &ss);
			int call, resume;
			if (have_vm) {
				call = a == ANCHOR_VM_CALL;
				resume = a == ANCHOR_VM_RESUME;
			} else {
				enum anchor in = k > 0 ? classify(s, host[k - 1], &ss) : ANCHOR_NONE;
				enum anchor out = k + 1 < nh ? classify(s, host[k + 1], &ss)
							     : ANCHOR_UNNAMED;
				int api = k > 0 && in != ANCHOR_API_CALL && in != ANCHOR_API_RESUME &&
					  !(a == ANCHOR_API_CALL && api_prologue(s, host[k], host[k - 1]));
				call = api && a == ANCHOR_API_CALL;
				resume = api && a == ANCHOR_API_RESUME;
				if (out == ANCHOR_NONE && a == ANCHOR_VM_BLOCK)
					call = 1;
				/* Beyond the leaf's entry, interpreter code that runs VM code of
				 * another entry (an interpreter's call, a trace) and returns into
				 * an API frame or more interpreter code: a coroutine's resume, made
				 * by a resuming builtin (the resume's code is the builtin's). The
				 * leaf's own entry region is read below (resumed). */
				if (resumers && trace_leaf && k > leaf_entry &&
				    a == ANCHOR_VM_BLOCK &&
				    (in == ANCHOR_VM_BLOCK || in == ANCHOR_UNNAMED) &&
				    (out == ANCHOR_API_CALL || out == ANCHOR_API_RESUME ||
				     out == ANCHOR_VM_BLOCK) && !step_copy_at(s, host, k))
					call = 1;
				if (out == ANCHOR_NONE && a == ANCHOR_UNNAMED) {
					unnamed_seen = 1;
					call = unnamed;
				}
			}
			/* The leaf stands for the innermost segment's VM entry. On a stripped VM the
			 * API frame just outside it is that same entry (lua_pcall enters the
			 * interpreter's own frame), not a second anchor: counted twice, it took the
			 * next segment out (a memory sample of a nested callback lost its outer
			 * chunk's line to the inner lua_pcall). VM code between the two is the same
			 * entry too when the leaf is VM code (the interpreter and a helper it
			 * called), but not when the leaf is a trace: stepped from a trace, the
			 * next frame is its entry's caller, so VM code there is the interpreter
			 * of another entry (a coroutine's trace, resumed by coroutine.wrap), and
			 * the API frame is that one's. So it is after a step's copy of VM code
			 * (step_copy), the API frame right after the copy being the same entry. */
			if (trace_leaf && k == leaf_entry && !have_vm &&
			    (leaf_entry == 1 + (size_t)step_copy || (!leaf_is_trace && !resumed))) {
				if (resume)
					na = 0;
				call = resume = 0;
			}
			if (trace_leaf && k == 0) {
				call = 1;
				resume = 0;
			}
			if (step_copy && k == 1)
				call = resume = 0;
			/* The leaf's own interpreter, behind a helper it called: the leaf stands
			 * for it (counted twice, it took the next segment in: a comparator's or a
			 * C-resumed coroutine's samples in a helper put their callers' frames
			 * after the C code). */
			if (trace_leaf && k > 0 && k < helper_end)
				call = resume = 0;
			if (k < cf_at)
				call = resume = 0;
			if (resume)
				na = 0; /* frames outside belong to other coroutines */
			if (call || resume) {
				if (lp_grow((void **)&s->anchor_at, &s->anchorcap, na + 1,
					    sizeof(size_t)))
					return -ENOMEM;
				s->anchor_at[na++] = k;
			}
		}
		if (!unnamed_seen || na >= definite + optional + 1)
			break;
	}

	size_t nseg = definite + 1;
	size_t want_opt = na > nseg ? na - nseg : 0;
	if (want_opt > optional)
		want_opt = optional;
	/* A host stack cut short has lost its outer anchors: the count left says nothing of
	 * how many optional boundaries there are. Every builtin that calls back from C code
	 * of its own or resumes is then one (as on a whole stack), and the outer segments
	 * the anchors left cannot reach go to the root, not after the outermost anchor left
	 * (the main chunk's line shown as called from deep in a sort's comparator). */
	if (cut)
		want_opt = optional - protects;
	if (lp_grow((void **)&s->seg_start, &s->segcap, nseg + want_opt + 2, sizeof(size_t)))
		return -ENOMEM;
	/* Walk outermost first (o = 0 is lua[nl-1]); decide optional boundaries innermost
	 * first by counting how many optional boundaries lie further in, by kind: builtins
	 * that call back from C code of their own (table.sort) first, then resuming builtins,
	 * then pcall and xpcall, which make no C frame (a pcall inside a resumed coroutine
	 * took the resume's anchor; a resume whose frame anchors two segments, the C-resumed
	 * coroutine's and its own coroutine's, is one anchor short, and table.sort's
	 * comparator then took the resume's place). Without the builtins' names, all are of
	 * the first kind. */
	size_t others = optional - resumers - protects;
	size_t want_o = want_opt < others ? want_opt : others;
	size_t want_r = want_opt - want_o < resumers ? want_opt - want_o : resumers;
	size_t want_p = want_opt - want_o - want_r;
	size_t o_seen = 0, r_seen = 0, p_seen = 0, nsegs = 0;
	s->seg_start[nsegs++] = 0;
	for (size_t o = 0; o + 1 < nl; o++) {
		const struct lp_lua_frame *f = &lua[nl - 1 - o];
		int boundary = 0;
		if (f->type == LP_FRAME_CFUNC) {
			boundary = 1;
		} else if (f->type == LP_FRAME_FFUNC && resume_builtin(s, f->addr)) {
			r_seen++;
			boundary = resumers - r_seen < want_r;
		} else if (f->type == LP_FRAME_FFUNC && protect_builtin(s, f->addr)) {
			p_seen++;
			boundary = protects - p_seen < want_p;
		} else if (f->type == LP_FRAME_FFUNC) {
			o_seen++;
			boundary = others - o_seen < want_o;
		}
		if (boundary)
			s->seg_start[nsegs++] = o + 1;
	}
	s->seg_start[nsegs] = nl;

	size_t matched = na < nsegs ? na : nsegs;
	size_t first_seg = nsegs - matched;   /* segments before it have no anchor */
	size_t first_anchor = na - matched;   /* anchors before it own no segment */
	uint32_t id;

	/* Unmatched outer segments, with their boundary frames, form the root; with no
	 * anchor at all (L mode's single host frame) that is the whole Lua stack. */
	for (size_t o = 0; o < s->seg_start[first_seg]; o++) {
		if (lua_frame(s, &lua[nl - 1 - o], &id) || push(s, n, id))
			return -ENOMEM;
	}
	/* Host frames, outermost first, with matched segments after their anchors; a trace's
	 * code as the anchor (no API or VM frame: lua_resume enters the VM by a tail call)
	 * after its segment instead, as the trace runs inside the segment's innermost Lua
	 * frame (the trace's frame was shown above the whole Lua stack). Only code the
	 * stream names as a trace's (tcode): other code no symbol covers (another JIT's
	 * stub that calls lua_resume) stays before, as any caller of the VM. */
	size_t seg = first_seg, anc = first_anchor;
	size_t bi_lo = SIZE_MAX, bi_hi = 0; /* host frames [bi_lo, bi_hi]: builtin_frames */
	int late = 0;
	for (size_t k = nh; k-- > 0;) {
		/* VM code inside the running C function (cf_at) stands for no Lua frame: it is
		 * shown, on top of the C code that entered it. */
		int hidden = trace_leaf && ((k == 0 && !cf_at && !vm_calls_cf) ||
					    (step_copy && k == 1) || k < helper_end);
		hidden |= k >= bi_lo && k <= bi_hi;
		int anchor = anc < na && s->anchor_at[anc] == k;
		uint64_t sk;
		int after = anchor && !hidden && classify(s, host[k], &sk) == ANCHOR_UNNAMED &&
			    trace_code(s, host[k]);
		after |= anchor && k == 0 && vm_calls_cf;
		/* So is the interpreter's code that anchors a segment and calls C code or is
		 * called by it (a plain C frame inside or outside it): a VM entry C made by a
		 * tail call (lua_call, lua_resume) or directly (table.sort's comparator). It
		 * runs the segment, as the interpreter lua_pcall entered does (shown after its
		 * segment's Lua frames); the entry is named by the C frame outside it. The
		 * segment's own samples, whose leaf that code is, do not show it: before, the
		 * two went two ways. */
		uint64_t si;
		after |= anchor && !hidden && !have_vm && k > 0 &&
			 classify(s, host[k], &sk) == ANCHOR_VM_BLOCK &&
			 (classify(s, host[k - 1], &si) == ANCHOR_NONE ||
			  (k + 1 < nh && classify(s, host[k + 1], &si) == ANCHOR_NONE));
		/* The running C function when no host frame names it (it tail-called the C
		 * code there: luasocket's meth_send jumps to buffer_meth_send) goes before the
		 * first host frame inside its entry that is no VM code: after the interpreter
		 * that called it, not between the Lua line and the interpreter, as if it had
		 * called back into Lua. */
		if (late && !hidden && (c_frame_kind(s, host[k]) == ANCHOR_NONE ||
					c_frame_kind(s, host[k]) == ANCHOR_API_CALL)) {
			if (lua_frame(s, &lua[0], &id) || push(s, n, id))
				return -ENOMEM;
			late = 0;
		}
		if (!hidden && !after && (c_frame(s, host[k], &id) || push(s, n, id)))
			return -ENOMEM;
		if (anchor) {
			size_t from = s->seg_start[seg], to = s->seg_start[seg + 1];
			/* The boundary frame ending a segment is named by the host stack;
			 * a builtin's is not when the VM is stripped (static lj_cf_*). */
			if (seg + 1 < nsegs &&
			    (have_vm || lua[nl - to].type != LP_FRAME_FFUNC))
				to--;
			for (size_t o = from; o < to; o++) {
				const struct lp_lua_frame *f = &lua[nl - 1 - o];
				/* The running C function is named by the host frames inside. */
				if (o == nl - 1 && f->type == LP_FRAME_CFUNC &&
				    (k > 0 || vm_calls_cf)) {
					int named = 0;
					for (size_t j = k; j-- > 0 && !named;) {
						uint64_t ss;
						classify(s, host[j], &ss);
						named = ss == f->addr + 1;
					}
					if (named)
						continue;
					late = 1;
					continue;
				}
				if (lua_frame(s, f, &id) || push(s, n, id))
					return -ENOMEM;
			}
			/* A builtin shown last: the VM's frames running it, and its C function,
			 * are not (builtin_frames); from this anchor when it is VM code shown
			 * after the segment, else from the frame inside it. */
			size_t top = after ? k : k - 1;
			size_t nb = to > from && lua[nl - to].type == LP_FRAME_FFUNC &&
					    (after || k > 0)
					    ? builtin_frames(s, host, top) : 0;
			if (nb) {
				bi_lo = top + 1 - nb;
				bi_hi = top;
				after &= !(k >= bi_lo && k <= bi_hi);
			}
			seg++;
			anc++;
		}
		if (after && (c_frame(s, host[k], &id) || push(s, n, id)))
			return -ENOMEM;
	}
	if (late && (lua_frame(s, &lua[0], &id) || push(s, n, id)))
		return -ENOMEM;
	return 0;
}

/*
** Where C code that VM code called begins, for a sample whose leaf is C code in a
** coroutine that an assembler builtin resumed (coroutine.resume, wrap) on a stripped VM:
** the index of the innermost VM code (the interpreter's block, or a trace), when only
** plain C frames lie inside it; else 0. Under that code the stack is the one the
** interpreter's or the trace's own samples have, and merge_stack reads those rightly
** (the resume's frame, one more piece of the interpreter's block, is told from the
** calling code there); with the C frames on top it took the calling code for the resume
** and put the resume's frame after the coroutine's Lua frames.
*/
static size_t vm_caller(struct lp_sysprof *s, const struct lp_sys_sample *smp)
{
	if (!count_resumers(s, smp->lua, smp->nlua))
		return 0;
	size_t j = 0;
	for (size_t k = 0; k < smp->nhost; k++) {
		uint64_t ss;
		enum anchor a = classify(s, smp->host[k], &ss);
		if (a == ANCHOR_VM_CALL || a == ANCHOR_VM_RESUME)
			return 0; /* a VM with its entries named: merge_stack's other tier */
		if (!j && (a == ANCHOR_VM_BLOCK || a == ANCHOR_UNNAMED)) {
			if (k == 0)
				return 0;
			j = k;
		} else if (!j && a != ANCHOR_NONE) {
			return 0;
		}
	}
	return j;
}

/*
** Builds the merged stack of a guest sample into s->out, root first (merge_stack), C code
** that a coroutine's VM code called on top of the stack that VM code has (vm_caller).
*/
static int merge(struct lp_sysprof *s, const struct lp_sys_sample *smp, int trace_leaf,
		 int cut, size_t *n)
{
	size_t j = trace_leaf ? 0 : vm_caller(s, smp);
	if (!j)
		return merge_stack(s, smp, trace_leaf, cut, n);
	struct lp_sys_sample sub = *smp;
	sub.host += j;
	sub.nhost -= j;
	/* A running lua_CFunction is named by its host frame, above. */
	if (sub.lua[0].type == LP_FRAME_CFUNC) {
		for (size_t k = 0; k < j; k++) {
			uint64_t ss;
			classify(s, smp->host[k], &ss);
			if (ss == sub.lua[0].addr + 1) {
				sub.lua++;
				sub.nlua--;
				break;
			}
		}
	}
	if (merge_stack(s, &sub, 1, cut, n))
		return -ENOMEM;
	/* A builtin's VM code calling its C function: neither shown (builtin_frames). */
	size_t skip = smp->lua[0].type == LP_FRAME_FFUNC ? builtin_frames(s, smp->host, j) : 0;
	uint32_t id;
	for (size_t k = j + 1 - skip; k-- > 0;)
		if (c_frame(s, smp->host[k], &id) || push(s, n, id))
			return -ENOMEM;
	return 0;
}

static int defer(struct lp_sysprof *s, const struct lp_sys_sample *smp);
static int defer_gc(struct lp_sysprof *s, const struct lp_sys_sample *smp);

/* The states whose samples the extension may give a stack on the side (gsmp): the
 * collector, the JIT compiler and trace exits. */
static int side_state(unsigned vmstate)
{
	return vmstate == LP_VMST_GC || LP_VMST_IS_COMPILER(vmstate) || vmstate == LP_VMST_EXIT;
}

int lp_sysprof_sample(struct lp_sysprof *s, const struct lp_sys_sample *smp)
{
	size_t n = 0;
	uint32_t id;
	if (smp->vmstate >= LP_VMST__MAX)
		return 0;
	/* C symbols written after this sample are another run: a sample's C frames are named
	 * by those written before it (or, at an address none named yet, after it). */
	if (lp_symtab_c_event(s->st))
		return -ENOMEM;
	uint32_t cepoch = lp_symtab_c_epoch(s->st);
	s->vmstate[smp->vmstate]++;
	lp_profile_meta(s->raw)->vmstate[smp->vmstate]++;
	lp_profile_meta(s->raw)->samples++;
	if (side_state(smp->vmstate) && smp->nlua == 0)
		return defer_gc(s, smp);
	if (s->opts.split) {
		if (vm_frame(s, smp->vmstate, &id) || push(s, &n, id))
			return -ENOMEM;
	}
	size_t base = n;
	if (smp->vmstate == LP_VMST_TRACE) {
		const struct lp_sym_lua *sym = lp_symtab_lua(s->st, smp->trace_addr);
		char buf[64];
		struct lp_frame f = { .kind = LP_FK_TRACE };
		f.traceno = smp->traceno > UINT32_MAX ? UINT32_MAX : (uint32_t)smp->traceno;
		f.line = smp->trace_line > UINT32_MAX ? UINT32_MAX : (uint32_t)smp->trace_line;
		if (sym) {
			f.name = sym->chunk;
			f.fline = sym->firstline;
		} else {
			snprintf(buf, sizeof(buf), "[unknown function 0x%" PRIx64 "]", smp->trace_addr);
			f.name = buf;
		}
		/* As the trace is named where its code is under C code or a sampled allocation:
		 * its start, as the symbols written before the sample define it (a flush
		 * redefines the trace number). At a line of the function it starts in, the
		 * frame knows that start too (its row by function). */
		const struct lp_sym_trace *tr;
		const struct lp_sym_lua *start = lp_symtab_trace_start_now(s->st, smp->traceno,
									   &tr);
		if (start && f.traceno == smp->traceno && tr->proto == smp->trace_addr)
			f.tline = tr->line;
		if (lp_profile_frame_id(s->raw, &f, &id))
			return -ENOMEM;
		if (lp_grow((void **)&s->tframe, &s->tframecap, s->ntframe + 1, sizeof(*s->tframe)))
			return -ENOMEM;
		s->tframe[s->ntframe].at = s->tframe[s->ntframe].start = id;
		s->tframe[s->ntframe].cepoch = cepoch;
		s->tframe[s->ntframe].proto = smp->trace_addr;
		s->tframe[s->ntframe].line = smp->trace_line;
		if (start && f.traceno == smp->traceno) {
			f.name = start->chunk;
			f.fline = start->firstline;
			f.line = f.tline = tr->line;
			if (lp_profile_frame_id(s->raw, &f, &s->tframe[s->ntframe].start))
				return -ENOMEM;
		}
		s->ntframe++;
		return 0;
	} else if (smp->nlua > 0) {
		return defer(s, smp);
	} else {
		set_cepoch(s, cepoch);
		size_t nh = smp->nhost;
		(void)host_cut(smp->host, &nh);
		for (size_t k = nh; k-- > 0;)
			if (c_frame(s, smp->host[k], &id) || push(s, &n, id))
				return -ENOMEM;
	}
	/* A sample with no frames at all is still time spent: show its VM state. */
	if (n == base && !s->opts.split) {
		if (vm_frame(s, smp->vmstate, &id) || push(s, &n, id))
			return -ENOMEM;
	}
	int64_t one = 1;
	return lp_profile_add(s->raw, s->out, n, &one) ? -ENOMEM : 0;
}

/* -- Full stacks of TRACE samples (extension) ------------------------------------------ */

/* Appends a raw stack (its cut marker taken off into cut): its index in stacks, or
 * -ENOMEM. */
static int64_t add_rawstack(struct lp_sysprof *s, const struct lp_lua_frame *lua, size_t nlua,
			    const uint64_t *host, size_t nhost)
{
	int cut = host_cut(host, &nhost);
	if (lp_grow((void **)&s->stacks, &s->stackcap, s->nstacks + 1, sizeof(*s->stacks)) ||
	    lp_grow((void **)&s->lpool, &s->lpoolcap, s->nlpool + nlua, sizeof(*s->lpool)) ||
	    lp_grow((void **)&s->hpool, &s->hpoolcap, s->nhpool + nhost, sizeof(*s->hpool)))
		return -ENOMEM;
	struct rawstack *r = &s->stacks[s->nstacks];
	memset(r, 0, sizeof(*r));
	r->lua = s->nlpool;
	r->nlua = nlua;
	r->host = s->nhpool;
	r->nhost = nhost;
	r->cut = cut;
	if (nlua)
		memcpy(s->lpool + s->nlpool, lua, nlua * sizeof(*lua));
	if (nhost)
		memcpy(s->hpool + s->nhpool, host, nhost * sizeof(*host));
	s->nlpool += nlua;
	s->nhpool += nhost;
	return (int64_t)s->nstacks++;
}

int lp_sysprof_stack(struct lp_sysprof *s, uint64_t id, const struct lp_lua_frame *lua,
		     size_t nlua, const uint64_t *host, size_t nhost)
{
	if (lp_addrmap_get(&s->stack_ids, id))
		return 0; /* a repeated id: the first definition stands */
	int64_t k = add_rawstack(s, lua, nlua, host, nhost);
	if (k < 0 || lp_addrmap_put(&s->stack_ids, id, (uint64_t)k, 0))
		return -ENOMEM;
	return 0;
}

static int same_lua(const struct lp_lua_frame *a, const struct lp_lua_frame *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i].type != b[i].type || a[i].addr != b[i].addr || a[i].line != b[i].line)
			return 0;
	return 1;
}

/* The index in stacks of a CPU sample's own stacks (cpu = 1), shared by the samples that
 * have the same ones; -ENOMEM. */
static int64_t intern_stack(struct lp_sysprof *s, const struct lp_sys_sample *smp)
{
	size_t nh = smp->nhost;
	int cut = host_cut(smp->host, &nh);
	uint64_t h = lp_hash_u64(smp->nlua * 0x9e3779b97f4a7c15ull ^ smp->nhost);
	for (size_t i = 0; i < smp->nlua; i++)
		h = lp_hash_u64(h ^ smp->lua[i].addr ^ smp->lua[i].line << 20 ^ smp->lua[i].type);
	for (size_t i = 0; i < smp->nhost; i++)
		h = lp_hash_u64(h ^ smp->host[i]);
	struct lp_addrmap_entry *e = lp_addrmap_get(&s->dedup, h);
	if (e) {
		const struct rawstack *r = &s->stacks[e->a];
		if (r->nlua == smp->nlua && r->nhost == nh && r->cut == cut &&
		    (smp->nlua == 0 || same_lua(s->lpool + r->lua, smp->lua, smp->nlua)) &&
		    (nh == 0 || !memcmp(s->hpool + r->host, smp->host, nh * sizeof(*smp->host))))
			return (int64_t)e->a;
	}
	int64_t k = add_rawstack(s, smp->lua, smp->nlua, smp->host, smp->nhost);
	if (k < 0)
		return -ENOMEM;
	s->stacks[k].cpu = 1;
	/* A hash collision keeps the entry there: the new stack is just not shared. */
	if (!e && lp_addrmap_put(&s->dedup, h, (uint64_t)k, 0))
		return -ENOMEM;
	return k;
}

/* Keeps a CPU sample with Lua frames for the end (see dsmp): its stacks, interned. */
static int defer(struct lp_sysprof *s, const struct lp_sys_sample *smp)
{
	int64_t k = intern_stack(s, smp);
	if (k < 0)
		return -ENOMEM;
	uint32_t nrepl = (uint32_t)s->nrepl, cepoch = lp_symtab_c_epoch(s->st);
	uint64_t dk = lp_hash_u64(((uint64_t)k << 8 | smp->vmstate) ^
				  lp_hash_u64(nrepl ^ (uint64_t)cepoch << 32));
	struct lp_addrmap_entry *d = lp_addrmap_get(&s->dkeys, dk);
	if (d) {
		struct dsample *x = &s->dsmp[d->a];
		if (x->stack == (uint32_t)k && x->nrepl == nrepl && x->vmstate == smp->vmstate &&
		    x->cepoch == cepoch) {
			x->count++;
			return 0;
		}
	}
	if (lp_grow((void **)&s->dsmp, &s->dsmpcap, s->ndsmp + 1, sizeof(*s->dsmp)))
		return -ENOMEM;
	struct dsample *x = &s->dsmp[s->ndsmp];
	x->stack = (uint32_t)k;
	x->nrepl = nrepl;
	x->cepoch = cepoch;
	x->vmstate = (uint8_t)smp->vmstate;
	x->count = 1;
	/* A key collision keeps the entry there: the new one just counts on its own. */
	if (!d && lp_addrmap_put(&s->dkeys, dk, s->ndsmp, 0))
		return -ENOMEM;
	s->ndsmp++;
	return 0;
}

/* Keeps a GC or compiler sample for the end (see gsmp): its host stack, interned. */
static int defer_gc(struct lp_sysprof *s, const struct lp_sys_sample *smp)
{
	int64_t k = intern_stack(s, smp);
	if (k < 0 || lp_grow((void **)&s->gsmp, &s->gsmpcap, s->ngsmp + 1, sizeof(*s->gsmp)))
		return -ENOMEM;
	s->gsmp[s->ngsmp].stack = (uint32_t)k;
	s->gsmp[s->ngsmp].cepoch = lp_symtab_c_epoch(s->st);
	s->gsmp[s->ngsmp++].vmstate = (uint8_t)smp->vmstate;
	return 0;
}

static int pair_add(struct pairs *q, uint64_t ordinal, uint64_t id)
{
	if (lp_grow((void **)&q->p, &q->cap, q->n + 1, sizeof(*q->p)))
		return -ENOMEM;
	q->p[q->n].ordinal = ordinal;
	q->p[q->n++].id = id;
	return 0;
}

int lp_sysprof_gsample(struct lp_sysprof *s, uint64_t ordinal, uint64_t id)
{
	return pair_add(&s->gpairs, ordinal, id);
}

int lp_sysprof_jsample(struct lp_sysprof *s, uint64_t ordinal, uint64_t id)
{
	return pair_add(&s->jpairs, ordinal, id);
}

int lp_sysprof_xsample(struct lp_sysprof *s, uint64_t ordinal, uint64_t id)
{
	return pair_add(&s->xpairs, ordinal, id);
}

int lp_sysprof_lua_replaced(struct lp_sysprof *s, uint64_t proto, const struct lp_sym_lua *old)
{
	if (lp_grow((void **)&s->repl, &s->replcap, s->nrepl + 1, sizeof(*s->repl)))
		return -ENOMEM;
	s->repl[s->nrepl].after[REPL_TRACE] = s->ntframe;
	s->repl[s->nrepl].after[REPL_GC] = s->ngsmp;
	s->repl[s->nrepl].proto = proto;
	s->repl[s->nrepl++].old = *old;
	return 0;
}

int lp_sysprof_tsample(struct lp_sysprof *s, uint64_t ordinal, uint64_t id)
{
	return pair_add(&s->tpairs, ordinal, id);
}

static int by_ordinal(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;
	return x->ordinal < y->ordinal ? -1 : x->ordinal > y->ordinal;
}

/* Sorts q for pair_at, whose cursor *j starts at q->n (samples are walked last first). */
static size_t pairs_sort(struct pairs *q)
{
	if (q->n > 1)
		qsort(q->p, q->n, sizeof(*q->p), by_ordinal);
	return q->n;
}

/* The stack id paired with sample ordinal i: 1 and *id, or 0; i must not grow between
 * calls. */
static int pair_at(const struct pairs *q, size_t *j, uint64_t i, uint64_t *id)
{
	while (*j > 0 && q->p[*j - 1].ordinal > i)
		(*j)--;
	if (*j == 0 || q->p[*j - 1].ordinal != i)
		return 0;
	*id = q->p[*j - 1].id;
	return 1;
}

/* Before deferred sample i of kind REPL_*, walked last first: the names it was read with,
 * undoing the replacements made after it (cursor *u starts at nrepl). */
static int undo_after(struct lp_sysprof *s, int kind, uint64_t i, size_t *u)
{
	for (; *u > 0 && s->repl[*u - 1].after[kind] > i; (*u)--) {
		if (lp_addrmap_put(&s->overlay, s->repl[*u - 1].proto, *u - 1, 0))
			return -ENOMEM;
		s->epoch++;
	}
	return 0;
}

/* The merged frames of stack r (root first, without the trace frame), cached in mpool. */
static int stack_frames(struct lp_sysprof *s, struct rawstack *r)
{
	if (r->done && r->epoch == s->epoch)
		return 0;
	size_t n = 0;
	uint32_t id;
	const uint64_t *host = s->hpool ? s->hpool + r->host : NULL;
	if (r->nlua > 0) {
		struct lp_sys_sample smp = {
			.vmstate = LP_VMST_TRACE, .lua = s->lpool + r->lua, .nlua = r->nlua,
			.host = host, .nhost = r->nhost,
		};
		/* A memory sample's innermost host frame is the code that allocates: VM code
		 * (the interpreter, a trace) stands for the Lua frame and is not shown. So does
		 * a CPU sample's in the interpreter's block: the bytecode or assembler builtin
		 * of its innermost Lua frame (else every interpreted sample's self time went to
		 * lj_vm_asm_begin, none to a Lua line). Other C code a CPU sample is in is
		 * shown. */
		int leaf = !r->cpu, by_trace = 0;
		if (r->nhost) {
			uint64_t ss;
			enum anchor k = classify(s, host[0], &ss);
			leaf = s->memory ? k == ANCHOR_VM_BLOCK || k == ANCHOR_UNNAMED ||
					   k == ANCHOR_VM_CALL
					 : leaf || k == ANCHOR_VM_BLOCK;
			/* A memory sample made by a trace's own code: the trace's frame on top,
			 * as a TRACE sample of the CPU profiler has it (name_c names it), when
			 * the trace is certain (tcode record, symbols never reused); else the
			 * leaf stays hidden. */
			uint64_t tn;
			const struct lp_sym_trace *tr;
			const struct lp_sym_lua *fn;
			by_trace = s->memory && k == ANCHOR_UNNAMED &&
				   lp_symtab_tcode(s->st, host[0], &tn, &tr, &fn) == 0;
		}
		if (merge(s, &smp, leaf, r->cut, &n))
			return -ENOMEM;
		if (by_trace && (c_frame(s, host[0], &id) || push(s, &n, id)))
			return -ENOMEM;
	} else {
		/* A trace's own code (host[0]) is shown by the trace frame. */
		for (size_t k = r->nhost; k-- > (s->memory ? 0 : 1);)
			if (c_frame(s, host[k], &id) || push(s, &n, id))
				return -ENOMEM;
	}
	if (lp_grow((void **)&s->mpool, &s->mpoolcap, s->nmpool + n + 1, sizeof(*s->mpool)))
		return -ENOMEM;
	if (n)
		memcpy(s->mpool + s->nmpool, s->out, n * sizeof(*s->out));
	r->merged = s->nmpool;
	r->nmerged = n;
	s->nmpool += n;
	r->done = 1;
	r->epoch = s->epoch;
	return 0;
}

/* Starts a walk of deferred samples from the last: every name as the stream left it, and
 * anchors classified with all the symbols' sizes and the mapped objects known now. */
static void walk_begin(struct lp_sysprof *s)
{
	lp_addrmap_clear(&s->overlay);
	lp_addrmap_clear(&s->anchors);
	s->epoch++;
}

/* Adds the deferred CPU samples with Lua frames, last seen first (their nrepl never
 * decreases), undoing replacements as add_traces does. */
static int add_deferred(struct lp_sysprof *s)
{
	size_t u = s->nrepl;
	walk_begin(s);
	for (size_t i = s->ndsmp; i-- > 0;) {
		for (; u > s->dsmp[i].nrepl; u--) {
			if (lp_addrmap_put(&s->overlay, s->repl[u - 1].proto, u - 1, 0))
				return -ENOMEM;
			s->epoch++;
		}
		set_cepoch(s, s->dsmp[i].cepoch);
		struct rawstack *r = &s->stacks[s->dsmp[i].stack];
		if (stack_frames(s, r))
			return -ENOMEM;
		size_t n = 0;
		uint32_t id;
		if (s->opts.split && (vm_frame(s, s->dsmp[i].vmstate, &id) || push(s, &n, id)))
			return -ENOMEM;
		for (size_t k = 0; k < r->nmerged; k++)
			if (push(s, &n, s->mpool[r->merged + k]))
				return -ENOMEM;
		if (r->nmerged == 0 && !s->opts.split &&
		    (vm_frame(s, s->dsmp[i].vmstate, &id) || push(s, &n, id)))
			return -ENOMEM;
		if (lp_profile_add(s->raw, s->out, n, &s->dsmp[i].count))
			return -ENOMEM;
	}
	return 0;
}

/*
** Adds the TRACE samples, each under its full stack when the extension gave one. Walks
** them last to first, undoing the symbol replacements made after each, so a reused proto
** address names the function that lived there at the sample.
*/
static int add_traces(struct lp_sysprof *s)
{
	walk_begin(s);
	size_t j = pairs_sort(&s->tpairs), u = s->nrepl;
	int64_t one = 1;
	for (size_t i = s->ntframe; i-- > 0;) {
		struct rawstack *r = NULL;
		uint64_t sid;
		if (undo_after(s, REPL_TRACE, i, &u))
			return -ENOMEM;
		set_cepoch(s, s->tframe[i].cepoch);
		if (pair_at(&s->tpairs, &j, i, &sid)) {
			struct lp_addrmap_entry *e = lp_addrmap_get(&s->stack_ids, sid);
			if (e) {
				r = &s->stacks[e->a];
				if (stack_frames(s, r))
					return -ENOMEM;
			}
		}
		size_t n = 0;
		uint32_t id;
		if (s->opts.split && (vm_frame(s, LP_VMST_TRACE, &id) || push(s, &n, id)))
			return -ENOMEM;
		for (size_t k = 0; r && k < r->nmerged; k++)
			if (push(s, &n, s->mpool[r->merged + k]))
				return -ENOMEM;
		/* On a stack whose innermost Lua frame is where the trace executes, the frame
		 * has the line: the trace is named where it starts, as under C code and in
		 * memory profiles, one label for the trace. Anywhere else (no stack, or an
		 * inlined function's frame left out) the label is all there is of the line. */
		const struct tframe *tf = &s->tframe[i];
		const struct lp_lua_frame *top = r && r->nlua ? &s->lpool[r->lua] : NULL;
		int at_top = top && top->type == LP_FRAME_LFUNC && top->addr == tf->proto &&
			     top->line == tf->line;
		if (push(s, &n, at_top ? tf->start : tf->at) ||
		    lp_profile_add(s->raw, s->out, n, &one))
			return -ENOMEM;
	}
	return 0;
}

/* The index in stacks of stack id's copy for GC samples (a CPU sample's stack: its leaf,
 * the collector's code, is shown), made on first use; -1 if id has no stack record. */
static int64_t gc_stack(struct lp_sysprof *s, uint64_t id)
{
	struct lp_addrmap_entry *e = lp_addrmap_get(&s->gside, id);
	if (e)
		return (int64_t)e->a;
	e = lp_addrmap_get(&s->stack_ids, id);
	if (!e)
		return -1;
	size_t from = e->a;
	/* add_rawstack may move the pools: copy through offsets. */
	if (lp_grow((void **)&s->lpool, &s->lpoolcap, s->nlpool + s->stacks[from].nlua,
		    sizeof(*s->lpool)) ||
	    lp_grow((void **)&s->hpool, &s->hpoolcap, s->nhpool + s->stacks[from].nhost,
		    sizeof(*s->hpool)))
		return -ENOMEM;
	const struct rawstack r = s->stacks[from];
	int64_t k = add_rawstack(s, r.nlua ? s->lpool + r.lua : NULL, r.nlua,
				 r.nhost ? s->hpool + r.host : NULL, r.nhost);
	if (k < 0)
		return -ENOMEM;
	s->stacks[k].cpu = 1;
	s->stacks[k].cut = r.cut;
	if (lp_addrmap_put(&s->gside, id, (uint64_t)k, 0))
		return -ENOMEM;
	return k;
}

/*
** Adds the GC and compiler samples, last first, undoing replacements as add_traces does.
** One with a gsample (jsample) pair is shown under the merged stack of the code that ran
** the collector (that is being compiled), with a frame of its state on top (GC, RECORD,
** OPT, ASM: on a stripped VM nothing else says that the frames above the Lua line are the
** collector's or the compiler's); the others, by their own host stack as before.
*/
static int add_gc(struct lp_sysprof *s)
{
	walk_begin(s);
	size_t jg = pairs_sort(&s->gpairs), jj = pairs_sort(&s->jpairs), u = s->nrepl;
	size_t jx = pairs_sort(&s->xpairs);
	uint64_t ngc = 0, njit = 0, nexit = 0; /* each kind's ordinal, from the end */
	for (size_t i = 0; i < s->ngsmp; i++)
		s->gsmp[i].vmstate == LP_VMST_GC ? ngc++
		: s->gsmp[i].vmstate == LP_VMST_EXIT ? nexit++ : njit++;
	int64_t one = 1;
	for (size_t i = s->ngsmp; i-- > 0;) {
		int64_t k = -1;
		uint64_t sid;
		unsigned st = s->gsmp[i].vmstate;
		set_cepoch(s, s->gsmp[i].cepoch);
		int paired = st == LP_VMST_GC ? pair_at(&s->gpairs, &jg, --ngc, &sid)
			   : st == LP_VMST_EXIT ? pair_at(&s->xpairs, &jx, --nexit, &sid)
						: pair_at(&s->jpairs, &jj, --njit, &sid);
		if (undo_after(s, REPL_GC, i, &u) || (paired && (k = gc_stack(s, sid)) == -ENOMEM))
			return -ENOMEM;
		/* Merged first: the merge uses s->out as its scratch. */
		if (k >= 0 && stack_frames(s, &s->stacks[k]))
			return -ENOMEM;
		size_t n = 0;
		uint32_t id;
		if (s->opts.split && (vm_frame(s, st, &id) || push(s, &n, id)))
			return -ENOMEM;
		size_t base = n;
		if (k >= 0) {
			const struct rawstack *r = &s->stacks[k];
			for (size_t q = 0; q < r->nmerged; q++)
				if (push(s, &n, s->mpool[r->merged + q]))
					return -ENOMEM;
		} else {
			const struct rawstack *r = &s->stacks[s->gsmp[i].stack];
			for (size_t q = r->nhost; q-- > 0;)
				if (c_frame(s, s->hpool[r->host + q], &id) || push(s, &n, id))
					return -ENOMEM;
		}
		if ((k >= 0 || n == base) && !s->opts.split &&
		    (vm_frame(s, st, &id) || push(s, &n, id)))
			return -ENOMEM;
		if (lp_profile_add(s->raw, s->out, n, &one))
			return -ENOMEM;
	}
	return 0;
}

/* -- Memory samples ------------------------------------------------------------------ */

struct lp_sysprof *lp_sysprof_new_memory(struct lp_symtab *st)
{
	static const struct lp_value_type types[4] = {
		{ "alloc_space", "bytes" }, { "alloc_objects", "count" },
		{ "inuse_space", "bytes" }, { "inuse_objects", "count" },
	};
	struct lp_sysprof *s = lp_sysprof_new(st, NULL);
	if (!s)
		return NULL;
	lp_profile_free(s->raw);
	if (!(s->raw = lp_profile_new(4, types))) {
		free(s);
		return NULL;
	}
	s->memory = 1;
	s->cepoch = UINT32_MAX; /* resolved after the whole stream: the latest names */
	return s;
}

void lp_sysprof_set_sample_bytes(struct lp_sysprof *s, uint64_t sample_bytes)
{
	s->sample_bytes = sample_bytes;
}

uint64_t lp_sysprof_nasamples(const struct lp_sysprof *s)
{
	return s->nsampled;
}

int lp_sysprof_asample(struct lp_sysprof *s, uint64_t id, uint64_t size, int live,
		       uint64_t count)
{
	if (lp_grow((void **)&s->msmp, &s->msmpcap, s->nmsmp + 1, sizeof(*s->msmp)))
		return -ENOMEM;
	s->msmp[s->nmsmp].id = id;
	s->msmp[s->nmsmp].size = size;
	s->msmp[s->nmsmp].count = count;
	s->msmp[s->nmsmp++].live = live;
	s->nsampled += count;
	lp_profile_meta(s->raw)->samples += count;
	return 0;
}

int lp_sysprof_astate(struct lp_sysprof *s, uint64_t id, unsigned vmstate)
{
	return lp_addrmap_put(&s->astate, id, vmstate, 0) ? -ENOMEM : 0;
}

/* v rounded down after adding u (in [0, 1)): v's integer part, plus one with a probability
 * of its fraction when u is uniform. */
static int64_t sat64(double v, double u)
{
	return v >= 9.2e18 ? INT64_MAX : (int64_t)(v + u);
}

/* A number in [0, 1) that looks uniform over stacks, from the stack's id: the same in every
 * report of the file. */
static double stack_dither(uint64_t id)
{
	return (double)(lp_hash_u64(id ^ 0x9e3779b97f4a7c15ull) >> 11) * 0x1p-53;
}

static int msample_cmp(const void *a, const void *b)
{
	const struct msample *x = a, *y = b;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	if (x->size != y->size)
		return x->size < y->size ? -1 : 1;
	if (x->live != y->live)
		return x->live < y->live ? -1 : 1;
	return x->count < y->count ? -1 : x->count > y->count;
}

/*
** Adds the memory samples, each weighted for the allocations it stands for: a block of size
** s was sampled with probability q = 1 - exp(-s / sample_bytes), so it stands for 1 / q
** blocks and s / q bytes. The weights are summed by stack and rounded once per stack: a
** live sample is a record of its own, and rounded one by one a block near the interval
** (1 / q between 1 and 3) counted as 1, 2 or 3 objects, not 1.30 or 2.50 (an in-use
** estimate 22 % low for 6 KiB blocks sampled every 4 KiB, 18 % high for 2 KiB ones).
** Rounded up or down at random (stack_dither), with the chance of the fraction, so that
** the sum over many stacks of one sample each stays unbiased too: to nearest, 4,000
** stacks of one 6 KiB block each still came to 3,112 objects instead of 4,000. One number
** per stack for its four values keeps in use at most what was allocated.
*/
static int add_memory(struct lp_sysprof *s)
{
	if (s->finished)
		return 0;
	s->finished = 1;
	if (s->nmsmp)
		qsort(s->msmp, s->nmsmp, sizeof(*s->msmp), msample_cmp);
	for (size_t i = 0, j; i < s->nmsmp; i = j) {
		double sum[4] = { 0, 0, 0, 0 };
		uint64_t count = 0;
		for (j = i; j < s->nmsmp && s->msmp[j].id == s->msmp[i].id; j++) {
			const struct msample *m = &s->msmp[j];
			double w = 1.0;
			if (s->sample_bytes && m->size) {
				double q = 1.0 - exp(-(double)m->size / (double)s->sample_bytes);
				w = q > 0 ? 1.0 / q : 1.0;
			}
			double objs = (double)m->count * w;
			sum[0] += objs * (double)m->size;
			sum[1] += objs;
			if (m->live) {
				sum[2] += objs * (double)m->size;
				sum[3] += objs;
			}
			count += m->count;
		}
		struct lp_addrmap_entry *e = lp_addrmap_get(&s->stack_ids, s->msmp[i].id);
		if (!e) {
			lp_profile_meta(s->raw)->dropped += count;
			continue;
		}
		struct rawstack *r = &s->stacks[e->a];
		if (stack_frames(s, r))
			return -ENOMEM;
		double u = stack_dither(s->msmp[i].id);
		int64_t v[4] = { sat64(sum[0], u), sat64(sum[1], u), sat64(sum[2], u),
				 sat64(sum[3], u) };
		size_t n = 0;
		for (size_t k = 0; k < r->nmerged; k++)
			if (push(s, &n, s->mpool[r->merged + k]))
				return -ENOMEM;
		uint32_t id;
		const struct lp_addrmap_entry *st = lp_addrmap_get(&s->astate, s->msmp[i].id);
		if (st && (vm_frame(s, (unsigned)st->a, &id) || push(s, &n, id)))
			return -ENOMEM;
		if (n == 0 && (vm_frame(s, LP_VMST_INTERP, &id) || push(s, &n, id)))
			return -ENOMEM;
		if (lp_profile_add(s->raw, s->out, n, v))
			return -ENOMEM;
	}
	return 0;
}

/* -- Naming C frames ----------------------------------------------------------------- */

static void name_c(void *ctx, struct lp_frame *f, char *buf, size_t buflen)
{
	struct lp_sysprof *s = ctx;
	if (f->kind == LP_FK_FFUNC) {
		if (f->addr < s->nffnames && s->ffnames[f->addr])
			f->name = s->ffnames[f->addr];
		f->addr = 0;
		return;
	}
	if (f->kind != LP_FK_C || f->name[0] != '\0')
		return;
	/* A trace's machine code (C code it called is above it, a collector step it ran): the
	 * trace's frame, as a TRACE sample shows it at the trace's start, rather than one raw
	 * address per call site. Outside every mapped object only: trace code is anonymous. */
	uint64_t traceno;
	const struct lp_sym_trace *tr;
	const struct lp_sym_lua *fn;
	if (lp_symtab_mapped(s->st, f->addr) != 1 &&
	    lp_symtab_tcode(s->st, f->addr, &traceno, &tr, &fn) == 0) {
		if (traceno <= UINT32_MAX) {
			f->kind = LP_FK_TRACE;
			f->name = fn->chunk;
			f->fline = fn->firstline;
			f->line = f->tline = tr->line;
			f->traceno = (uint32_t)traceno;
			f->addr = 0;
			f->file = NULL;
			return;
		}
	}
	/* Named as at its epoch, then one frame with the others of its name. */
	uint32_t cepoch = f->line;
	f->line = 0;
	f->nosym = lp_symtab_c_at(s->st, f->addr, cepoch) == NULL;
	f->name = lp_symtab_name_c_at(s->st, f->addr, cepoch, buf, buflen, &f->addr, &f->file);
}

/* The samples kept for the end, once. */
static int add_cpu(struct lp_sysprof *s)
{
	if (s->finished)
		return 0;
	s->finished = 1;
	return add_deferred(s) || add_traces(s) || add_gc(s) ? -ENOMEM : 0;
}

struct lp_profile *lp_sysprof_profile(struct lp_sysprof *s)
{
	if (s->memory ? add_memory(s) : add_cpu(s))
		return NULL;
	return lp_profile_remap(s->raw, name_c, s);
}
