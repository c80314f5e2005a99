/*
** In-process memory profiler for stock LuaJIT: an allocator wrapper that attributes every
** allocation, reallocation and free as Tarantool's memprof does and writes "ljm" v3.
**
** The wrapper replaces g->allocf / g->allocd with lua_setallocf and chains every call to
** the pair it replaced (setallocf migrates nothing: blocks allocated before start are freed
** through the wrapper, and blocks allocated while profiling are freed by the original after
** stop). It is taken out again on stop, on an I/O failure, and before lua_close frees the
** heap (a finalizer anchored in the registry: with a wrapper in place at close, LuaJIT frees
** GG_State through it and never destroys its own arena).
**
** Attribution (what the event's source is) is decided before the original allocator runs:
** a stack reallocation moves the stack, and L->base is only updated after it returns. The
** rules, measured on both supported builds (vm-internals.md; the issue-4 notes):
**   - g->vmstate > 0: a trace is running: TRACE with that number (0: the VM has not run
**     yet, so no Lua code allocates: INTERNAL, as the host's own calls);
**   - INTERP, C or RECORD with a Lua function at L->base: LFUNC at the line of the C frame's
**     saved PC when that PC lies in the function's bytecode (TNEW, CAT, ... save it before
**     calling into C; the compiler's own work runs in lj_vm_cpcall, whose saved PC is L);
**   - a builtin at L->base called from Lua: the calling Lua line, from the frame link (as
**     Tarantool does; string.rep's allocations belong to the line that called it);
**   - a lua_CFunction, or a builtin not called from Lua: CFUNC with its address;
**   - anything else (GC, trace exits, the JIT compiler): INTERNAL.
** L is g->cur_L, the running coroutine, whoever resumed it (Lua, C or an FFI callback).
**
** The stream: with the Lua API (a profile file) and a CPU to spare, an event is stored as a
** raw record (rawev.h: fixed-width words, a few stores) that the file's thread encodes into
** ljm; otherwise it is encoded here. Each form has its own copy of the wrapper and its
** light paths. Raw records took binary trees from 1.21-1.23 to 1.14-1.19 of unprofiled
** wall time with the JIT on, 1.18-1.21 to 1.13-1.17 off (bench/memprof_ab.sh, 41 rounds),
** for 7-11 points more CPU time on the other core; they cost interpreted string building
** about 5 points (docs/OVERHEAD.md). Allowed one CPU, the file's thread would take it from
** the program (1.55 against 1.39), and encoding the records in batches on the VM's thread
** cost 1.47: so the events are encoded as they happen then, as before (1.33 against 1.34).
**
** Every read on this path is a plain load from VM state that LuaJIT itself keeps consistent
** whenever it may allocate: no checked reader (a system call per read would cost more than
** the allocation). Detection and symbol names use the checked reader, once per object.
*/
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <lua.h>

#include "agent/agent.h"
#include "agent/allocstub.h"
#include "agent/objects.h"
#include "agent/pfile.h"
#include "agent/rawev.h"
#include "agent/tcodes.h"
#include "luaprof/format.h"
#include "stream/writer.h"
#include "util/grow.h"
#include "util/addrmap.h"
#include "util/cpus.h"
#include "util/iset.h"
#include "util/stubenv.h"
#include "vm/luajit.h"
#include "vm/luajit_trace.h"
#include "vm/luajit_walk.h"

enum { MP_IDLE, MP_RUNNING, MP_HALTED };

static struct {
	/* The hot path's fields, in one cache line. */
	lua_Alloc orig_f;
	void *orig_ud;
	const void *chain;              /* the running profile's wrapper ud (struct chain), or
					 * NULL: a wrapper called with another records nothing */
	uintptr_t evmask;               /* all ones while chain is set, else 0 (set_chain) */
	int64_t *cd;                    /* sampled mode: the running wrapper's countdown */
	int state;
	int raw;                        /* exact mode writes raw events (see the stream below) */
	const int32_t *vmstate;         /* the VM's g->vmstate (exact mode's every event) */
	/* The profiled VM. */
	struct lp_lj_vm vm;
	lua_State *L;                   /* main thread */
	long tid;                       /* the thread that started the profile: the VM's */
	uint64_t run_id;
	uint64_t trace_gen;             /* trace numbers named in trace_seen[] are current in it */
	/* Stream. With raw, exact mode writes raw events (rawev.h) into w and everything else
	 * into sw, which carries it into w as blobs; w's writer is a profile file that encodes
	 * them on its thread. Otherwise (sampled mode, a C API writer, a process allowed one
	 * CPU) events and the rest go into w in ljm form: symw = &w. */
	struct lp_wbuf w, sw, *symw;
	/* event_call's record end while the original allocator runs: w.pos stays at the
	 * record's start until the record is whole (termstop.c may stop the profile then). */
	uint8_t *pend;
	luaprof_sysprof_writer writer;
	luaprof_sysprof_on_stop on_stop;
	void *ctx;
	uint8_t *buf;
	int io_errno;
	/* Symbols written so far: proto -> fingerprint, trace number -> fingerprint,
	 * C function addresses seen. */
	struct lp_addrmap protos, traces, cfuncs;
	struct agent_objseen seen;
	unsigned long long adds;        /* loader's count when the symbols were last written */
	unsigned long long objs_adds;   /* ... when the objects table was (sampled mode) */
	struct lp_mem checked;
	struct lp_mem_pid pid;
	/* Counters. */
	uint64_t allocs, frees, reallocs, alloc_bytes, free_bytes; /* events: their sum */
	uint64_t started_ns;
	uint64_t started_unix_ns;       /* the Unix time at start (meta start_unix_ns) */
	/* Sampled mode (sample_bytes > 0): stacks of about one allocation per sample_bytes. */
	uint64_t sample_bytes;
	uint64_t rng;
	int own_native;                 /* attached the VM sampler and objects table itself */
	uint64_t self_lo, self_hi;      /* this library's code: the wrapper's own frames */
	uint64_t vmobj_lo, vmobj_hi;    /* code of the object holding the VM: its allocation
					 * path (lj_mem_*, lj_alloc_*, lj_tab_new...) */
	struct agent_stackdict dict;    /* the distinct stacks */
	/* Sampled allocations still allocated, each by its address (live = 1), and the few
	 * freed ones that could not be counted in `freed` or followed to their free
	 * (live_trackable) (live = 0). A slot freed is put on
	 * a list (live = 2, stack = next free slot) and taken again: the table holds about
	 * the sampled part of the live heap, not every sample of the run. */
	struct asample { uint64_t size; uint32_t stack; uint8_t live; } *smp;
	size_t nsmp, smpcap;            /* slots used (free ones included), allocated */
	uint32_t smpfree;               /* first free slot, or UINT32_MAX */
	uint64_t nsampled;              /* samples kept in the run: live, freed and counted */
	struct lp_addrmap live;         /* sampled block still allocated -> index in smp */
	struct lp_addrmap freed;        /* (size << 32 | stack) -> count of freed samples */
	uint64_t nlost;                 /* samples not kept (no memory, or capture() refused) */
	uint64_t capture_ns;            /* time spent taking samples: the mode's main cost */
	uint64_t lookups;               /* frees and reallocs that looked the live map up */
	uint64_t rare_calls;            /* the running wrapper's calls that took its rare path */
	uint64_t untracked;             /* samples in the null pointer's granule (live_add) */
	uint64_t cut;                   /* samples whose stack was cut (too deep to keep) */
	int stub;                       /* the sampled wrapper is a generated stub (allocstub.h) */
	lua_Alloc installed_f;          /* what start installed, with installed_ud: restored */
	void *installed_ud;             /* from only while it is still the state's allocator */
} mp;

/*
** The running profile's wrapper ud, and with it evmask: an exact-mode event tests its
** original allocator's result against evmask, so that one whose profile was stopped
** meanwhile from another thread (events_close) writes nothing more, with no test more
** than its result's (a separate test of chain cost half a point of binary trees).
*/
static void set_chain(const void *c)
{
	mp.chain = c;
	mp.evmask = c ? UINTPTR_MAX : 0;
}

/*
** What an installed wrapper chains to, handed to it as its ud (the generated sampled stub
** excepted: it gets the original's ud and knows its original). A program may keep a
** wrapper from lua_getallocf and call it at any later time: after its profile stopped,
** while another runs in another state or another mode. So a wrapper records only when its
** ud is the running profile's (mp.chain), and otherwise passes the call on to the
** allocator it wrapped, with that allocator's ud. Never freed (a list, one record per
** state, allocator and form the process ever profiled: states closed and made again
** reuse them), and shared by the runs of a state that wrap the same allocator in the same
** form. The state is part of the key: two states may share an allocator and its ud
** (lua_newstate(f, NULL)), and one's kept wrapper must not record into the other's
** profile. The generated stub cannot tell them apart (it gets the original's ud): its
** countdown is the allocator's and its ud's (stub_cd below), so that a stub of an earlier
** profile of another state with the same allocator function, still in that state's chain
** (kept, or under an allocator installed over it), does not count down the running one's.
*/
enum { CHAIN_RAW, CHAIN_ENC, CHAIN_SAMPLED };
struct chain {
	lua_Alloc f;
	void *ud;
	uint64_t g;
	int form;
	struct chain *next;
	int64_t countdown;  /* CHAIN_SAMPLED: its own (stub_cd below), CD_NEVER when idle */
};

/*
** Sampled mode counts bytes down to the next sample in a countdown of the wrapper's own: the
** compiled wrapper's in its chain record, a generated stub's here, one per allocator and ud a
** stub was made for (the stub reads it at a 32-bit displacement from the marks, allocstub.h; a
** stub is made for each countdown, so a state of its own: two states with LuaJIT's allocator
** share the function, not the ud). A wrapper an earlier run left in the state's chain (under
** an allocator the program set over it, which stop cannot take off) is still called, and with
** one countdown for all it counted the running profile's bytes too: samples came twice as
** often and the estimates were twice the bytes (memprof_restart.sh). A countdown is CD_NEVER
** whenever its wrapper is not the running profile's: 2^63 bytes from a sample, so such a
** wrapper takes its rare path only for a block the marks name.
*/
#define CD_NEVER INT64_MAX
#define STUB_CD_MAX 8
static struct { lua_Alloc f; void *ud; int64_t left; } stub_cd[STUB_CD_MAX];

/* The stubs' countdown for allocator f with ud: the one it had, or a new one (CD_NEVER);
 * NULL when all are taken (the compiled wrapper runs then). claim 0: only an existing one. */
static int64_t *stub_countdown(lua_Alloc f, void *ud, int claim)
{
	for (int i = 0; i < STUB_CD_MAX; i++) {
		if (stub_cd[i].f == f && stub_cd[i].ud == ud)
			return &stub_cd[i].left;
		if (!stub_cd[i].f) {
			if (!claim)
				return NULL;
			stub_cd[i].f = f;
			stub_cd[i].ud = ud;
			stub_cd[i].left = CD_NEVER;
			return &stub_cd[i].left;
		}
	}
	return NULL;
}

/* The running sampled wrapper's countdown to never: the profile stopped, or is not the
 * process's any more (a forked child). A store: also from termstop's signal stop. */
static void countdown_disarm(void)
{
	if (mp.cd)
		*mp.cd = CD_NEVER;
}
static struct chain *chains;

/* The record for f/ud of the state with global state g in form, or NULL without memory. */
static struct chain *chain_for(lua_Alloc f, void *ud, uint64_t g, int form)
{
	struct chain *c;
	for (c = chains; c; c = c->next)
		if (c->f == f && c->ud == ud && c->g == g && c->form == form)
			return c;
	if (!(c = malloc(sizeof(*c))))
		return NULL;
	*c = (struct chain){ f, ud, g, form, chains, CD_NEVER };
	chains = c;
	return c;
}

/* Passes a call on to what a wrapper of another profile (or of none running) wrapped. */
static void *chain_on(const void *ud, void *ptr, size_t osize, size_t nsize)
{
	const struct chain *c = ud;
	return c->f(c->ud, ptr, osize, nsize);
}

/* Sampled mode: the machine code of the traces whose own code made a sampled allocation
 * (tcodes.h), so that the report shows such a sample under the trace's frame as it shows a
 * CPU sample in the trace; and the trace whose code made the capture's allocation, when
 * the stream names it (lua_frames: s_own_trace set). */
static struct agent_tcodes s_tcodes;
static struct lp_lj_trace s_own;
static int s_own_trace;

/* Scratch of one sampled stack (the VM thread only). */
static struct lp_lj_frame s_frames[AGENT_MAX_LUA];
static struct lp_lua_frame s_lua[AGENT_MAX_LUA];
static struct lp_lj_trace_frame s_tfr[LP_LJ_TRACE_MAX_INLINED]; /* a trace's inlined calls */
static uint64_t s_host[AGENT_MAX_HOST + 1]; /* + LP_HOST_CUT */
static uint8_t s_body[AGENT_SAMPLE_MAX]; /* a capture's stacks, encoded to intern them */
_Static_assert(sizeof(s_body) >= LP_SYS_STACKS_MAX(AGENT_MAX_LUA, AGENT_MAX_HOST + 1),
	       "s_body holds any stack capture() encodes");

/* -- Plain loads --------------------------------------------------------------------- */

static inline uint64_t ld64(uint64_t a)
{
	uint64_t v;
	memcpy(&v, (const void *)(uintptr_t)a, sizeof(v));
	return v;
}

static inline uint32_t ld32(uint64_t a)
{
	uint32_t v;
	memcpy(&v, (const void *)(uintptr_t)a, sizeof(v));
	return v;
}

static inline uint16_t ld16(uint64_t a)
{
	uint16_t v;
	memcpy(&v, (const void *)(uintptr_t)a, sizeof(v));
	return v;
}

static inline uint8_t ld8(uint64_t a)
{
	return *(const uint8_t *)(uintptr_t)a;
}

/* The function in the frame slot at a (base - 16), or 0 when the slot holds something else:
 * a builtin stores its first result there before it is done (coroutine.resume's false,
 * then the error message it allocates). */
static inline uint64_t slot_fn(uint64_t a)
{
	uint64_t tv = ld64(a);
	return (tv >> 47) == LP_LJ_ITYPE_FUNC ? tv & LP_LJ_GCVMASK : 0;
}

/* -- Symbols ------------------------------------------------------------------------- */

static void io_check(void);
/* The last failed start or stop's message, per thread: another thread's call may come
 * between a failed call and its caller's luaprof_memprof_error(). */
static _Thread_local char api_err[256];
static void set_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Symbols and other stream bytes written to mp.symw go into the stream now, before the
 * event that needs them (exact mode: into the raw stream, as a blob). */
static void sym_end(void)
{
	if (mp.symw != &mp.w)
		lp_wbuf_flush(&mp.sw);
}

/* Most events repeat a few functions: a direct-mapped cache of the prototype's fingerprint
 * fields in front of the map (re-read on every use but exact mode's light path, which
 * relies on frees instead: cached_proto; an address reused by another function misses).
 * The chunk name's string id is one of them: a chunk loaded again and
 * again (a reloaded handler: loadfile, call, collect) gets its prototype and its name's
 * string at the addresses the last one freed, with the same first line and size, and only
 * the name's content tells them apart (hf3..hf6 were all named hf3). Emptied at start. */
static struct proto_slot {
	uint64_t pt, chunk, key;
	uint32_t first, sizebc, sid;
} proto_cache[256];
/* The slots' pt, compact: frees look it up at random addresses (proto_freed). */
static uint64_t proto_at[256];

/*
** Exact mode's interpreter path by frame PC: the key and line of a PC met before, so that
** an event at a known PC reads neither the prototype nor its line info (five loads, two
** depending on others). A PC lies in the bytecode of one prototype at a time, and the
** cache holds only PCs of prototypes that proto_at holds: it is emptied whenever one
** leaves proto_at (freed: proto_freed; its slot taken by another: proto_miss), both rare.
*/
static struct pc_slot {
	uint64_t pc, key, bc; /* bc: the prototype's bytecode as its closures point to it */
	uint32_t line;
} pc_cache[256];

static void pc_cache_clear(void)
{
	memset(pc_cache, 0, sizeof(pc_cache));
}

/* The longest chunk name written (the bytes after it are left out). */
#define SYM_NAME_MAX (64u << 10)

/* The cache missed: the map, and the symbol when this function is new to the stream. */
static __attribute__((noinline)) uint64_t proto_miss(uint64_t pt, uint64_t chunk,
						     uint32_t first, uint32_t sizebc, uint32_t sid)
{
	static uint64_t generation;
	uint64_t fp = lp_hash_u64(chunk ^ ((uint64_t)first << 32) ^ sizebc ^
				  ((uint64_t)sid << 16)) | 1;
	struct lp_addrmap_entry *e = lp_addrmap_get(&mp.protos, pt);
	uint64_t key = pt;
	if (e && e->a == fp) {
		key = e->b;
	} else {
		/* Not the address with a generation in its high bits, as before: 16 bits of
		 * it wrapped after 65,536 reuses, and a template engine's sampled stacks were
		 * named after other templates that got the same key (0.6 % of the bytes of a
		 * six-minute run). Bit 63 keeps these keys apart from addresses. */
		if (e && mp.sample_bytes)
			key = UINT64_C(1) << 63 | ++generation;
		/* The chunk name whole, as Tarantool's memprof writes it: a chunk loaded from a
		 * string is named by its source, which the memprof report lists under ALIASES
		 * (cut at AGENT_NAME_MAX, a template's lines past its first 511 bytes were
		 * missing there, the lines its allocations are charged to among them). Not on
		 * the stack: the allocating thread's may be small. */
		static char name[SYM_NAME_MAX];
		size_t len = 0;
		if (lp_lj_str(&mp.vm, &mp.checked, chunk, name, sizeof(name), &len) != LP_LJ_OK) {
			snprintf(name, sizeof(name), "?");
			len = 1;
		}
		if (len >= sizeof(name))
			len = sizeof(name) - 1;
		lp_write_mem_sym_lua(mp.symw, key, name, len, first);
		sym_end();
		/* Without memory for the map the symbol is written again next time: still
		 * correct. */
		(void)lp_addrmap_put(&mp.protos, pt, fp, key);
	}
	struct proto_slot *c = &proto_cache[(pt >> 4) & 255];
	if (proto_at[(pt >> 4) & 255] && proto_at[(pt >> 4) & 255] != pt)
		pc_cache_clear(); /* the PCs of the prototype leaving the slot */
	c->pt = pt;
	c->chunk = chunk;
	c->first = first;
	c->sizebc = sizebc;
	c->sid = sid;
	c->key = key;
	proto_at[(pt >> 4) & 255] = pt;
	return key;
}

/*
** Writes the prototype's symbol unless this very function was named already, and returns
** the key that names it in the stream: its address, or, when the address was reused by
** another function during the profile (sampled mode), a key of its own, bit 63 set and a
** count that never repeats (user-space addresses fit in 47 bits). Events resolve names in
** stream order, but stacks (sampled mode) are resolved after the whole stream: a key per
** function keeps them right.
*/
static inline uint64_t need_proto(uint64_t pt)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	uint64_t chunk = ld64(pt + y->pt_chunkname);
	uint32_t first = ld32(pt + y->pt_firstline), sizebc = ld32(pt + y->pt_sizebc);
	uint32_t sid = ld32(chunk + y->str_sid);
	const struct proto_slot *c = &proto_cache[(pt >> 4) & 255];
	if (c->pt == pt && c->chunk == chunk && c->first == first && c->sizebc == sizebc &&
	    c->sid == sid)
		return c->key;
	return proto_miss(pt, chunk, first, sizebc, sid);
}

/*
** Exact mode's light path, in front of need_proto: the key when the cache has pt, else 0
** (keys are addresses, never 0). No fingerprint to read: in exact mode every free and
** reallocation passes the wrapper, which empties the slot of a prototype freed
** (proto_freed), so a slot that holds pt names the function still there. (A host that took
** the wrapper out with lua_setallocf and put it back without a stop and a start would have
** its frees in between unseen: not supported, the profile records nothing then either.)
** A free pays one load of proto_at for the five loads and compares of the fingerprint (and
** the chunk name's, a load that depends on another) saved on each event of the interpreter:
** in-process A/B against the build with the fingerprint, bintrees, 41 rounds: JIT off
** 1.188 -> 1.176 and 1.171 -> 1.160, JIT on 1.171 -> 1.161.
*/
static inline uint64_t cached_proto(uint64_t pt)
{
	unsigned i = (unsigned)(pt >> 4) & 255;
	return proto_at[i] == pt ? proto_cache[i].key : 0;
}

static inline void proto_freed(uint64_t ptr)
{
	unsigned i = (unsigned)(ptr >> 4) & 255;
	if (__builtin_expect(proto_at[i] == ptr, 0)) {
		proto_at[i] = 0;
		proto_cache[i].pt = 0;
		pc_cache_clear();
	}
}

/* pc_line's rare case (a link into a trace's start instruction): the model's general
 * rule. */
static __attribute__((noinline)) uint32_t pc_line_general(uint64_t pt, uint64_t pc)
{
	struct lp_lj_proto p;
	int32_t line;
	if (lp_lj_proto_read(&mp.vm, &mp.checked, pt, &p) != LP_LJ_OK ||
	    lp_lj_pc_line(&mp.vm, &mp.checked, &p, pc, &line) != LP_LJ_OK || line < 0)
		return 0;
	return (uint32_t)line;
}

/* The line of the instruction before pc (LuaJIT's frame convention) in prototype pt;
 * 0 when pc is not in its bytecode. */
static inline uint32_t pc_line_quick(uint64_t pt, uint64_t pc);

/* pc is a frame PC in pt's bytecode: after one of its instructions (the header's too). */
static inline int in_bytecode(uint64_t pt, uint64_t pc)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	uint64_t bc = pt + y->pt_size;
	return !(pc <= bc || pc > bc + 4ull * ld32(pt + y->pt_sizebc) || (pc - bc) % 4);
}

static inline uint32_t pc_line(uint64_t pt, uint64_t pc)
{
	return in_bytecode(pt, pc) ? pc_line_quick(pt, pc) : pc_line_general(pt, pc);
}

/* pc lies in pt's bytecode, which has no line info (stripped: `luajit -b`, string.dump
 * with strip): Tarantool's memprof charges its events to the function at line 0. */
static int stripped_at(uint64_t pt, uint64_t pc)
{
	return in_bytecode(pt, pc) && !ld64(pt + mp.vm.lay->pt_lineinfo);
}

/* pc_line for a pc inside pt's bytecode (checked by the caller): no call. */
static inline uint32_t pc_line_quick(uint64_t pt, uint64_t pc)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	uint64_t bc = pt + y->pt_size;
	uint32_t pos = (uint32_t)((pc - bc) / 4) - 1;
	uint64_t li = ld64(pt + y->pt_lineinfo);
	uint32_t first = ld32(pt + y->pt_firstline), numline = ld32(pt + y->pt_numline);
	if (!li)
		return 0;
	if (pos == 0)
		return first;
	/* lineinfo[i] is the line of instruction i + 1 (the header has none). */
	pos--;
	uint32_t d = numline < 256 ? ld8(li + pos) : numline < 65536 ? ld16(li + 2ull * pos)
		   : ld32(li + 4ull * pos);
	return first + d;
}

/*
** Which trace numbers the stream has named, as of which generation of the trace table.
** A trace number can only come to name another trace after the JIT compiler ran, and the
** compiler allocates (the trace it saves, at least) in a compiler vmstate: locate() starts
** a new generation on every such allocation, and start does too. So an event of a trace
** whose number was checked in the current generation needs no look at the trace table:
** two loads that depend only on the vmstate.
*/
static struct trace_seen { uint64_t gen; uint32_t traceno; } trace_seen[64];

/* The trace table's check, once per trace number and generation: the symbol when the
 * number names a trace the stream has not named yet. 1 when the stream names it (its
 * code may then be keyed for the kcode records), 0 when it is no trace now. */
static __attribute__((noinline)) int need_trace(uint32_t traceno)
{
	uint64_t J = mp.vm.J;
	const struct lp_lj_layout *y = mp.vm.lay;
	struct trace_seen *c = &trace_seen[traceno & 63];
	if (traceno >= ld32(J + y->j_sizetrace))
		return 0;
	uint64_t tr = ld64(ld64(J + y->j_trace) + 8ull * traceno) & LP_LJ_GCVMASK;
	if (!tr)
		return 0;
	/* The same block may hold another trace of the same number after a flush: the
	 * fingerprint takes its code and start too. */
	uint64_t fp = lp_hash_u64(tr ^ ld64(tr + y->t_mcode) * 0x9e3779b97f4a7c15ull ^
				  ld64(tr + y->t_startpc) << 1) | 1;
	struct lp_addrmap_entry *e = lp_addrmap_get(&mp.traces, traceno);
	if (!e || e->a != fp) {
		struct lp_lj_trace t;
		if (lp_lj_trace_read(&mp.vm, &mp.checked, traceno, &t) != LP_LJ_OK)
			return 0;
		uint64_t key = need_proto(t.startpt);
		lp_write_mem_sym_trace(mp.symw, traceno, key, pc_line(t.startpt, t.startpc + 4));
		sym_end();
		(void)lp_addrmap_put(&mp.traces, traceno, fp, 0);
	}
	c->traceno = traceno;
	c->gen = mp.trace_gen;
	return 1;
}

/*
** A C function address: objects loaded since the last look are named first. Looked at for
** every such event (a few nanoseconds, on events that take the general path), not only
** for an address not seen yet: a library unloaded and another loaded where it was (a
** plugin reloaded, dlclose) puts other functions at addresses seen before. (mp.cfuncs
** keeps the addresses need_builtin named: entries in the VM, which stays.)
*/
static void need_cfunc(uint64_t addr)
{
	unsigned long long adds = agent_objects_changes();
	if (adds != mp.adds) {
		mp.adds = adds;
		agent_symtab_cfuncs(mp.symw, &mp.seen, AGENT_SYMS_MEMPROF);
		sym_end();
		/* The object's mapping too, for the extension: a stop made by lua_close comes
		 * after the package library's finalizer unloaded the C modules. */
		agent_maps_note();
	}
	(void)lp_addrmap_put(&mp.cfuncs, addr, 1, 0);
}

/*
** A builtin that allocates with no Lua function below it (pcall(string.rep, ...),
** gsub(s, p, string.upper), a builtin called from C): Tarantool's rule charges its C entry,
** which has no symbol in a stripped VM (Debian's), where the reports read luajit+0x44aa0.
** It is named after the builtin instead (string.rep): a symbol at its entry, before the
** event, whose extent (a csize record at stop) is that address alone. Builtins may share
** an entry (LJLIB_ASM_: string.lower and string.upper take string.reverse's fallback
** handler), so the entries and the builtins at each are read before the profile starts
** (scan_builtins, from the library tables); need_builtin says how one is named.
*/
#define BUILTIN_SHARE 16 /* math.sqrt's entry has 14 */
static struct builtin_entry {
	uint64_t addr;
	uint8_t ffid[BUILTIN_SHARE], n, named;
} builtins[256];
static unsigned nbuiltins;

/* The entry at addr, or NULL. */
static struct builtin_entry *builtin_at(uint64_t addr)
{
	for (struct builtin_entry *b = builtins; b < builtins + nbuiltins; b++)
		if (b->addr == addr)
			return b;
	return NULL;
}

static void builtin_add(uint64_t addr, uint8_t ffid)
{
	struct builtin_entry *b = builtin_at(addr);
	if (!b) {
		if (nbuiltins == sizeof(builtins) / sizeof(builtins[0]))
			return;
		b = &builtins[nbuiltins++];
		b->addr = addr;
		b->n = b->named = 0;
	}
	unsigned i = 0;
	for (; i < b->n && i < BUILTIN_SHARE && b->ffid[i] < ffid; i++)
		;
	if (i < b->n && i < BUILTIN_SHARE && b->ffid[i] == ffid)
		return;
	/* In id order (the libraries' order, not the tables' iteration order). */
	if (i < BUILTIN_SHARE) {
		unsigned last = b->n < BUILTIN_SHARE ? b->n : BUILTIN_SHARE - 1;
		memmove(b->ffid + i + 1, b->ffid + i, last - i);
		b->ffid[i] = ffid;
	}
	b->n++; /* more than BUILTIN_SHARE: too many to name */
}

/* The fast functions of every library table in package.loaded (_G's too), by entry. */
static void scan_builtins(lua_State *L)
{
	int top = lua_gettop(L);
	if (!lua_checkstack(L, 6))
		return;
	lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
	if (lua_istable(L, -1)) {
		lua_pushnil(L);
		while (lua_next(L, -2)) {
			if (lua_istable(L, -1)) {
				lua_pushnil(L);
				while (lua_next(L, -2)) {
					/* Not lua_tocfunction: NULL for assembler
					 * builtins. */
					uint64_t fn = lua_iscfunction(L, -1)
						    ? (uint64_t)(uintptr_t)lua_topointer(L, -1) : 0;
					uint8_t ffid = fn ? ld8(fn + mp.vm.lay->fn_ffid) : 0;
					if (ffid != LP_LJ_FFID_LUA && ffid != LP_LJ_FFID_C)
						builtin_add(ld64(fn + mp.vm.lay->fn_f), ffid);
					lua_pop(L, 1);
				}
			}
			lua_pop(L, 1);
		}
	}
	lua_settop(L, top);
}

/* The entry the scan saw builtin ffid at: its address, 0 if it did not see it. */
static uint64_t scanned_at(unsigned ffid)
{
	for (const struct builtin_entry *b = builtins; b < builtins + nbuiltins; b++)
		for (unsigned i = 0; i < b->n && i < BUILTIN_SHARE; i++)
			if (b->ffid[i] == ffid)
				return b->addr;
	return 0;
}

/*
** The event proves that ffid runs at addr, which the scan may not have seen (a library
** loaded or a builtin dropped from its table before start). Builtins sharing an entry are
** a run of consecutive ids (each LJLIB_ASM_ takes the entry of the one before it), so one
** the scan did not see there joins the run it is next to, and one alone is named only
** when both its neighbours were seen elsewhere; else the entry keeps its stand-in name.
** A shared entry is named after the run, with the library's prefix once
** (string.reverse/lower/upper).
*/
static void need_builtin(uint64_t addr, uint8_t ffid)
{
	if (lp_addrmap_get(&mp.cfuncs, addr))
		return;
	need_cfunc(addr);
	uint8_t ids[BUILTIN_SHARE];
	unsigned n = 0, has = 0;
	struct builtin_entry *b = builtin_at(addr);
	if (b) {
		if (b->n > BUILTIN_SHARE)
			return;
		for (; n < b->n; n++) {
			ids[n] = b->ffid[n];
			has |= ids[n] == ffid;
		}
	}
	if (!has) {
		unsigned nff = mp.vm.lay->nffnames;
		if (n == BUILTIN_SHARE)
			return;
		if (n && ffid + 1 == ids[0]) {
			memmove(ids + 1, ids, n++);
			ids[0] = ffid;
		} else if (n && ffid == ids[n - 1] + 1) {
			ids[n++] = ffid;
		} else if (n || (ffid > LP_LJ_FFID_C + 1 && !scanned_at(ffid - 1u)) ||
			   (ffid + 1u < nff && !scanned_at(ffid + 1u))) {
			return;
		} else {
			ids[n++] = ffid;
		}
	}
	char name[BUILTIN_SHARE * 32];
	const char *first = lp_lj_ffname(mp.vm.lay, ids[0]), *dot;
	if (!first)
		return;
	/* The library's prefix, when every name has it. */
	size_t plen = (dot = strrchr(first, '.')) ? (size_t)(dot - first) + 1 : 0, len = 0, k;
	for (unsigned i = 0; i < n; i++) {
		const char *nm = lp_lj_ffname(mp.vm.lay, ids[i]);
		if (!nm)
			return;
		if (plen && strncmp(nm, first, plen) != 0)
			plen = 0;
	}
	for (unsigned i = 0; i < n; i++) {
		const char *nm = lp_lj_ffname(mp.vm.lay, ids[i]) + (i ? plen : 0);
		if ((k = strlen(nm)) + 1 > sizeof(name) - len)
			return;
		if (i)
			name[len++] = '/';
		memcpy(name + len, nm, k);
		len += k;
	}
	if (!b) {
		builtin_add(addr, ffid);
		if (!(b = builtin_at(addr)))
			return; /* no room to keep it */
	}
	b->named = 1;
	lp_write_mem_sym_cfunc(mp.symw, addr, name, len);
	sym_end();
}

/* -- Attribution --------------------------------------------------------------------- */

/* Plain reads for the frame walker, inline (mem.h): the VM state is consistent at an
 * allocation. */
static const struct lp_mem direct = { NULL, NULL };

#define VMST_INTERP (-1)
#define VMST_C      (-2)
#define VMST_GC     (-3)
#define VMST_RECORD (-5)
#define VMST_OPT    (-6)
#define VMST_ASM    (-7)

/* The base of the Lua frame that called the frame at base through a Lua frame link (a
 * return PC: the CALL before it names the callee's slot, A). */
static inline uint64_t caller_base(uint64_t base, uint64_t link)
{
	return base - 8ull * (2 + ((ld32(link - 4) >> 8) & 0xff));
}

/* The Lua function called at a Lua frame link (a return PC): its proto, or 0. */
static uint64_t caller_proto(uint64_t base, uint64_t link)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	uint64_t fn = slot_fn(caller_base(base, link) - 16);
	if (!fn || ld8(fn + y->fn_ffid) != LP_LJ_FFID_LUA)
		return 0;
	return ld64(fn + y->fn_pc) - y->pt_size;
}

/*
** The same for a builtin called through a continuation frame, as a trace stitched around
** it calls it (os.date, load... from JIT-compiled code), or a metamethod: the Lua function
** below, and in *pc the caller's PC the continuation saved (base-3; base-4 holds the
** continuation, 1 for an FFI callback's C entry, which has no Lua caller there). 0 when
** the frame below is not a Lua function's.
*/
static uint64_t cont_caller_proto(uint64_t base, uint64_t link, uint64_t stack, uint64_t *pc)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	uint64_t delta = link & ~7ull;
	if (delta < 32 || delta > base - stack - 16 || ld64(base - 32) == 1)
		return 0;
	uint64_t cbase = base - delta;
	uint64_t fn = slot_fn(cbase - 16);
	if (!fn || ld8(fn + y->fn_ffid) != LP_LJ_FFID_LUA)
		return 0;
	*pc = ld64(base - 24);
	return ld64(fn + y->fn_pc) - y->pt_size;
}

/*
** Whether the running builtin (its frame at base) is the error handler of the innermost
** xpcall below it: LuaJIT's xpcall keeps its handler in its first slot, 24 bytes below
** the protected function's base, whose frame it links by FRAME_PCALL with that delta
** (pcall's is 16). The frames are followed down as the VM's own search for the handler
** does (lj_err.c, finderrfcn); a C function's protected call on the way (FRAME_CP) ends it
** (the handler is then C's). At most 256 frames.
*/
static int is_xpcall_handler(uint64_t base, uint64_t stack)
{
	uint64_t self = ld64(base - 16), b = base;
	for (int i = 0; i < 256; i++) {
		uint64_t link = ld64(b - 8), nb;
		unsigned type = (unsigned)(link & 7);
		if ((link & 3) == LP_LJ_FRAME_LUA)
			nb = caller_base(b, link);
		else if (type == LP_LJ_FRAME_PCALL || type == LP_LJ_FRAME_PCALLH)
			return (link & ~7ull) == 24 && b - 24 >= stack && ld64(b - 24) == self;
		else if (type == LP_LJ_FRAME_CP)
			return 0;
		else
			nb = b - (link & ~7ull);
		if (nb >= b || nb < stack + 16)
			return 0;
		b = nb;
	}
	return 0;
}

/*
** The same for a builtin the VM's own C code called with lj_vm_call or lj_vm_pcall on top
** of a Lua function: an xpcall handler (`xpcall(f, debug.traceback)`, called where f
** raised the error), a finalizer the collector runs, a debug hook. The call made a C
** frame (cf, the running one) over the interpreter's, whose saved PC is where the Lua
** function below stopped: as Tarantool's memprof does (frame_prev, then the line from
** the C frames), the event is that function's, at that PC. Below an error handler
** (the thread's status LUA_ERRERR) may be the builtin or C function that raised the error
** (`error`, `assert`, a bad argument to string.rep, a C module's luaL_error): then, as
** for any builtin, the Lua line that called it, which the handler runs for (Tarantool's
** names the handler). That is so when the frame below is `error` or `assert` (neither
** calls anything from C) or the running builtin is xpcall's handler itself; any other
** builtin below (a Lua handler's gsub calling string.upper) is the running one's caller,
** as in Tarantool: 0 then, and when the frame below is a C function's outside an error
** handler or the PC is not in the Lua function's bytecode (another C frame between
** them: a C function's lua_pcall).
*/
static uint64_t vm_caller_proto(uint64_t L, uint64_t base, uint64_t link, uint64_t stack,
				uint64_t cf, uint64_t *pc)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	uint64_t delta = link & ~7ull;
	if (delta < 16 || delta > base - stack - 16)
		return 0;
	uint64_t pbase = base - delta, fn = slot_fn(pbase - 16);
	if (!fn)
		return 0;
	uint8_t ffid = ld8(fn + y->fn_ffid);
	if (ffid != LP_LJ_FFID_LUA) {
		if (ld8(L + y->l_status) != LUA_ERRERR)
			return 0;
		const char *name = ffid != LP_LJ_FFID_C ? lp_lj_ffname(y, ffid) : NULL;
		int raiser = name && (!strcmp(name, "error") || !strcmp(name, "assert"));
		if (!raiser && !is_xpcall_handler(base, stack))
			return 0;
		uint64_t plink = ld64(pbase - 8);
		*pc = plink;
		return (plink & 3) == LP_LJ_FRAME_LUA ? caller_proto(pbase, plink) : 0;
	}
	uint64_t prev = ld64(cf + y->cf_prev) & LP_LJ_CFRAME_RAWMASK;
	if (!prev)
		return 0;
	uint64_t pt = ld64(fn + y->fn_pc) - y->pt_size;
	*pc = ld64(prev + y->cf_pc);
	return in_bytecode(pt, *pc) ? pt : 0;
}

/* Where an event comes from: its source and the fields the stream gives that source (num
 * is the line of LFUNC, the number of TRACE). Small enough to come back in two registers. */
struct origin {
	uint64_t addr;
	uint32_t num;
	uint8_t source;
};

/*
** cur_L runs no Lua code: the host's own code allocates, between resumes. When that code
** is a lua_CFunction that resumed cur_L with lua_resume and goes on (a C scheduler,
** cqueues' step), on the main thread or in a coroutine (lp_lj_c_running), its event is
** that function's, as every other of a C function. Anything else, INTERNAL.
*/
static struct origin main_cfunc(uint64_t L)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	struct origin o = { 0, 0, LP_ASOURCE_INT };
	struct lp_lj_thread t;
	uint64_t fn;
	if (L == mp.vm.mainL || lp_lj_c_running(&mp.vm, &direct, L, &t, &fn) != LP_LJ_OK)
		return o;
	o.source = LP_ASOURCE_CFUNC;
	o.addr = ld64(fn + y->fn_f);
	need_cfunc(o.addr);
	return o;
}

static struct origin locate(void)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	uint64_t g = mp.vm.g;
	int32_t vmst = *mp.vmstate;
	struct origin o = { 0, 0, LP_ASOURCE_INT };
	if (vmst > 0) {
		const struct trace_seen *c = &trace_seen[vmst & 63];
		if (c->traceno != (uint32_t)vmst || c->gen != mp.trace_gen)
			need_trace((uint32_t)vmst);
		return (struct origin){ 0, (uint32_t)vmst, LP_ASOURCE_TRACE };
	}
	if (vmst <= VMST_RECORD)
		mp.trace_gen++; /* the compiler: trace numbers may change meaning */
	if (vmst != VMST_INTERP && vmst != VMST_C && vmst != VMST_RECORD)
		return o;
	uint64_t L = ld64(g + y->g_cur_L);
	if (!L)
		L = mp.vm.mainL;
	/* cur_L with no C frame: suspended (a yield) or dead (an error), so no Lua code of
	 * it runs; the host allocates in its own code, between resumes (it was charged to
	 * the coroutine's yielding line or C function): main_cfunc. Not its status: an
	 * error handler (xpcall's) runs with LUA_ERRERR, a finalizer a host's call set off
	 * on a yielded coroutine with LUA_YIELD, both on a C frame. */
	uint64_t cf0 = ld64(L + y->l_cframe) & LP_LJ_CFRAME_RAWMASK;
	if (!cf0)
		return main_cfunc(L);
	/* While a trace is recorded, vmstate RECORD stays as the interpreter runs the recorded
	 * bytecode (its allocations are the program's), and the recorder itself runs under
	 * lj_vm_cpcall, whose C frame has a negative NRES: the JIT compiler's work, INTERNAL.
	 * Recording a C function's entry (lj_dispatch_call) has the function's frame on top:
	 * its buffers were charged to the function, which may allocate nothing. */
	if (vmst == VMST_RECORD && (int32_t)ld32(cf0 + y->cf_nres) < 0)
		return o;
	uint64_t base = ld64(L + y->l_base), stack = ld64(L + y->l_stack);
	if (base < stack + 16)
		return o;
	/* No function in the slot: a builtin storing its results, charged to its caller as
	 * any builtin is. */
	uint64_t fn = slot_fn(base - 16);
	uint8_t ffid = fn ? ld8(fn + y->fn_ffid) : LP_LJ_FFID_C + 1;
	if (ffid == LP_LJ_FFID_LUA) {
		uint64_t cf = ld64(L + y->l_cframe) & LP_LJ_CFRAME_RAWMASK;
		if (!cf)
			return o;
		uint64_t pt = ld64(fn + y->fn_pc) - y->pt_size, pc = ld64(cf + y->cf_pc);
		uint32_t line = pc_line(pt, pc);
		if (!line && !stripped_at(pt, pc))
			return o;
		return (struct origin){ need_proto(pt), line, LP_ASOURCE_LFUNC };
	}
	if (ffid != LP_LJ_FFID_C) {
		uint64_t link = ld64(base - 8), pt = 0, pc = link;
		if ((link & 3) == LP_LJ_FRAME_LUA)
			pt = caller_proto(base, link);
		else if ((link & 7) == LP_LJ_FRAME_CONT)
			pt = cont_caller_proto(base, link, stack, &pc);
		else if ((link & 7) == LP_LJ_FRAME_C || (link & 7) == LP_LJ_FRAME_CP)
			pt = vm_caller_proto(L, base, link, stack, cf0, &pc);
		uint32_t line = pt ? pc_line(pt, pc) : 0;
		if (line || (pt && stripped_at(pt, pc)))
			return (struct origin){ need_proto(pt), line, LP_ASOURCE_LFUNC };
	}
	if (!fn)
		return o;
	o.source = LP_ASOURCE_CFUNC;
	o.addr = ld64(fn + y->fn_f);
	if (ffid == LP_LJ_FFID_C)
		need_cfunc(o.addr);
	else
		need_builtin(o.addr, ffid);
	return o;
}

/* -- Sampled mode ------------------------------------------------------------------------ */


/* Bytes to the next sample: exponential with mean sample_bytes, as Go's heap profiler
 * draws it, so that a periodic allocation pattern cannot alias with the sampling. */
static int64_t next_interval(void)
{
	mp.rng ^= mp.rng << 13;
	mp.rng ^= mp.rng >> 7;
	mp.rng ^= mp.rng << 17;
	double u = ((double)(mp.rng >> 11) + 1.0) / 9007199254740993.0; /* (0, 1] */
	double v = -log(u) * (double)mp.sample_bytes;
	return v > 4e18 ? INT64_MAX / 2 : (int64_t)v + 1;
}

/*
** The Lua frames of the running coroutine and its resumers, innermost first. While a trace
** runs (vmst > 0), its base frame is at g->jit_base and the allocating code is located
** from the trace's machine code on the native stack (host[0..nhost)): the snapshot there
** gives the line, in the base frame's function or in a function inlined into the trace
** (then shown on top of the base frame). c_resumers: how many threads the host walk
** confirmed as C code that resumed a coroutine (agent_vm_c_resumer_confirmed).
*/
static size_t lua_frames(uint64_t L, int32_t vmst, const uint64_t *host, size_t nhost,
			 unsigned c_resumers)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	struct lp_lj_thread t;
	if (lp_lj_thread_read(&mp.vm, &direct, L, &t) != LP_LJ_OK)
		return 0;
	/* cur_L with no C frame (suspended, or dead by an error): the host allocates in its
	 * own code (the VM's C API on another state), no Lua code of that coroutine runs. */
	if (vmst <= 0 && !t.cframe)
		return 0;
	uint64_t base = 0, leaf = 0;
	size_t n = 0;
	if (vmst <= 0 && t.base >= t.stack + 16 && !slot_fn(t.base - 16)) {
		/* A builtin storing its results (slot_fn): its caller, at the call, is the top. */
		uint64_t link = ld64(t.base - 8);
		if ((link & 3) == LP_LJ_FRAME_LUA && caller_proto(t.base, link)) {
			base = caller_base(t.base, link);
			leaf = link;
		}
	}
	if (vmst > 0) {
		struct lp_lj_trace tr;
		base = ld64(mp.vm.g + y->g_jit_base);
		if (!base || lp_lj_trace_read(&mp.vm, &direct, (uint32_t)vmst, &tr) != LP_LJ_OK)
			return 0;
		leaf = tr.startpc + 4;
		uint64_t fn = slot_fn(base - 16), base_pt = 0;
		if (fn && ld8(fn + y->fn_ffid) == LP_LJ_FFID_LUA)
			base_pt = ld64(fn + y->fn_pc) - y->pt_size;
		for (size_t i = 0; i < nhost; i++) {
			struct lp_lj_trace_loc loc;
			if (!lp_lj_trace_has(&tr, host[i]))
				continue;
			if (i == 0 && need_trace((uint32_t)vmst)) {
				/* The trace's code allocated: its symbol (checked against reuse:
				 * sampled mode has no generation of trace numbers); its frames
				 * are keyed once the walk is done (key_trace_frames). */
				s_own = tr;
				s_own_trace = 1;
			}
			/* The functions the trace inlined at the call, each at its line, and the
			 * base frame at the call into them; else (their snapshot does not check
			 * out) the location alone. */
			uint64_t bpc;
			int ni;
			if (lp_lj_trace_locate_inlined(&mp.vm, &direct, &tr, host[i], base_pt, &loc,
						       s_tfr, LP_LJ_TRACE_MAX_INLINED, &ni,
						       &bpc) != LP_LJ_OK)
				break;
			if (ni >= 0) {
				for (int k = 0; k < ni; k++) {
					const struct lp_lj_trace_frame *f = &s_tfr[k];
					struct lp_lua_frame *o = &s_lua[n++];
					o->type = f->ffid ? LP_FRAME_FFUNC : LP_FRAME_LFUNC;
					o->addr = f->ffid ? f->ffid : need_proto(f->pt);
					o->line = f->line > 0 ? (uint64_t)f->line : 0;
				}
				leaf = bpc;
			} else if (loc.pt) {
				if (loc.pt == base_pt && !loc.inlined) {
					leaf = loc.pc;
				} else if (loc.line > 0) {
					s_lua[n].type = LP_FRAME_LFUNC;
					s_lua[n].addr = need_proto(loc.pt);
					s_lua[n++].line = (uint64_t)loc.line;
				}
			}
			break;
		}
	}
	/* The key of the last prototype met: a recursion's frames repeat it, and it names the
	 * same function throughout a capture (nothing is freed meanwhile). */
	uint64_t last_pt = 0, last_key = 0;
	for (int level = 0; level < AGENT_MAX_RESUMES && n < AGENT_MAX_LUA; level++) {
		unsigned flags;
		unsigned k = lp_lj_walk(&mp.vm, &direct, &t, base, leaf, s_frames,
					(unsigned)(AGENT_MAX_LUA - n), &flags);
		for (unsigned i = 0; i < k && n < AGENT_MAX_LUA; i++) {
			const struct lp_lj_frame *f = &s_frames[i];
			struct lp_lua_frame *o = &s_lua[n++];
			o->type = f->kind;
			o->line = 0;
			if (f->kind == LP_FRAME_LFUNC) {
				if (f->addr != last_pt) {
					last_pt = f->addr;
					last_key = need_proto(f->addr);
				}
				o->addr = last_key;
				o->line = f->line > 0 ? (uint64_t)f->line : 0;
			} else if (f->kind == LP_FRAME_FFUNC) {
				o->addr = f->ffid;
			} else {
				o->addr = f->addr;
				need_cfunc(f->addr);
			}
			/* C code with no frame of its own that ran Lua here (a finalizer's
			 * collector step): a C frame, as the CPU profiler's samples have it. It
			 * takes a place of the AGENT_MAX_LUA, so that a stack that deep loses one
			 * more outer frame (memory stacks carry no mark of a cut). Only a VM
			 * entry's frame can have one: the call is made for those alone. */
			uint64_t ra = i + 1 < k && (f->flags & LP_LJ_FR_CENTRY)
				    ? lp_lj_entry_caller(&mp.vm, &direct, f, f + 1) : 0;
			if (ra && n < AGENT_MAX_LUA) {
				s_lua[n].type = LP_FRAME_CFUNC;
				s_lua[n].addr = ra;
				s_lua[n++].line = 0;
				need_cfunc(ra);
			}
		}
		if (!(flags & LP_LJ_WALK_BOTTOM))
			break;
		/* A coroutine continues into its resumer: a builtin's thread, or the thread
		 * whose C code called lua_resume (lp_lj_c_resumer), as the host walk
		 * confirmed. */
		struct lp_lj_thread r;
		if (lp_lj_resumer(&mp.vm, &direct, &t, &r, NULL) != LP_LJ_OK) {
			/* As many C resumers as the walk confirmed. */
			if (t.L == mp.vm.mainL || !c_resumers ||
			    lp_lj_c_resumer(&mp.vm, &direct, &t, &r, NULL) != LP_LJ_OK)
				break;
			c_resumers--;
		}
		t = r;
		base = leaf = 0;
	}
	return n;
}



/* Sampled mode: the frames of trace tr in a capture's host stack (the trace's own
 * allocation; a collector's step the trace ran, an FFI callback it called), keyed by the
 * trace as the CPU profiler keys them (else each was a raw address in the report), its
 * start named by its prototype's key. */
static void key_trace_frames(const struct lp_lj_trace *tr, uint64_t *host, size_t n)
{
	struct agent_tcode_id id = agent_tcodes_id(tr);
	struct agent_tcode *c = NULL;
	for (size_t i = 0; i < n; i++) {
		if (!agent_tcodes_has(&id, host[i]))
			continue;
		if (!c) {
			int fresh;
			c = agent_tcodes_slot(&s_tcodes, &id, &fresh);
			if (!c)
				return;
			if (fresh) {
				c->proto = need_proto(tr->startpt);
				c->line = pc_line(tr->startpt, tr->startpc + 4);
			}
		}
		host[i] = agent_tcodes_key(&s_tcodes, c, host[i]);
	}
}

/* The native stack from here, innermost first (the registers are this frame's: it stays
 * on the stack during the walk). */
static __attribute__((noinline)) size_t host_frames(uint64_t L, int32_t vmst, int *cut)
{
	ucontext_t uc;
	int trunc = 0;
	if (agent_unwind_getcontext()(&uc) != 0)
		return 0;
	agent_vm_prepare_walk(L, vmst);
	/* A VM entry without Lua frames (ffi.cast's parser, say) must be met by the walk to
	 * be left out: no frames copied from a recent walk then. */
	size_t n = agent_unwind_cached(&uc, s_host, AGENT_MAX_HOST, &trunc,
				       !agent_vm_expects_empty());
	*cut = trunc;
	return agent_vm_omit_empty(s_host, n);
}

/* The C code of the object holding the VM (its allocation path, lj_trace_exit...), not
 * the interpreter's block. */
static inline int vm_c_code(uint64_t pc)
{
	return pc >= mp.vmobj_lo && pc < mp.vmobj_hi && !lp_lj_in_vm(&mp.vm, pc);
}

/*
** The JIT compiler allocates (its IR, snapshots, machine code) in its protected call
** (lj_vm_cpcall from lj_trace_ins, which the interpreter's hook or hot counter called), and
** the loop optimizer in one more inside it: C frames whose NRES is negative (no Lua frame)
** on top of L's, in state RECORD, OPT, ASM, or INTERP while a trace starts (no Lua code
** runs in such a call; a builtin's own, ffi.cast's parser or load's, runs in state C). The
** sample is then shown as the outermost call's caller, on top of the Lua line being
** compiled: not as the line's own allocation, nor (the call's VM code taken for the Lua
** frames' entry) with the line above the compiler. Exact mode calls these bytes INTERNAL.
** Returns the index in s_host of that caller, or 0 when this is not the compiler.
*/
static size_t compiler_entry(uint64_t L, int32_t vmst, size_t skip, size_t nhost)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	if (vmst != VMST_INTERP && vmst != VMST_RECORD && vmst != VMST_OPT && vmst != VMST_ASM)
		return 0;
	unsigned k = 0;
	uint64_t cf = ld64(L + y->l_cframe) & LP_LJ_CFRAME_RAWMASK;
	for (; cf && k < 4 && (int32_t)ld32(cf + y->cf_nres) < 0; k++)
		cf = ld64(cf + y->cf_prev) & LP_LJ_CFRAME_RAWMASK;
	if (!k || !cf)
		return 0;
	/* Each of those calls is one return address into the VM's block on the way out. */
	for (size_t i = skip; i + 1 < nhost; i++)
		if (lp_lj_in_vm(&mp.vm, s_host[i]) && --k == 0)
			return i + 1;
	return 0;
}

/* The stack of the allocation about to happen, interned: its id, or -1. */
static int64_t capture(void)
{
	/* Objects loaded or unloaded since the last capture (a C module required while
	 * profiling): the unwinder's table of them, and the mappings the extension lists
	 * (a stop made by lua_close comes after the package library's finalizer unloaded
	 * the C modules), which the CPU profiler's writer thread keeps up to date while it
	 * runs. */
	if (!agent_running()) {
		unsigned long long adds = agent_objects_changes();
		if (adds != mp.objs_adds) {
			mp.objs_adds = adds;
			agent_objects_refresh();
			agent_maps_note();
		}
	}
	/* Blocking the CPU profiler's signal here keeps its handler out of the walk only when
	 * it samples this thread: elsewhere the sample is lost (counted) rather than walked
	 * over state the handler uses at the same time. */
	if (agent_sampling_elsewhere())
		return -1;
	sigset_t old;
	int blocked = agent_block_signal(&old);
	int32_t vmst = (int32_t)ld32(mp.vm.g + mp.vm.lay->g_vmstate);
	uint64_t L = ld64(mp.vm.g + mp.vm.lay->g_cur_L);
	if (!L)
		L = mp.vm.mainL;
	/* cur_L runs nothing (it yielded to a C function's lua_resume, which goes on): the
	 * thread running that function is the one to walk, as exact mode charges it
	 * (main_cfunc). */
	struct lp_lj_thread ct;
	uint64_t cfn;
	if (vmst <= 0 && L != mp.vm.mainL &&
	    !(ld64(L + mp.vm.lay->l_cframe) & LP_LJ_CFRAME_RAWMASK) &&
	    lp_lj_c_running(&mp.vm, &direct, L, &ct, &cfn) == LP_LJ_OK)
		L = ct.L;
	int cut = 0;
	/* The stack of the thread that allocates, which need not be the one that started
	 * (when it cannot be found, the walk is cut at its first frame, as it was). */
	struct agent_stack_save ss;
	(void)agent_objects_stack_here(&ss);
	size_t nhost = host_frames(L, vmst, &cut);
	agent_objects_stack_restore(&ss);
	/* Read while the CPU profiler's handler cannot run a walk of its own over it. */
	unsigned c_resumers = agent_vm_c_resumer_confirmed();
	struct lp_lj_trace wtr;
	int walked_trace = vmst <= 0 && agent_vm_walk_trace(&wtr);
	if (blocked)
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	/* The profiler's own frames (this function, the wrapper) are not the program's, nor
	 * the VM's allocation path below the code that allocates: Lua (the interpreter's
	 * block, a trace: kept as the leaf), or C outside the VM's object. */
	size_t skip = 0;
	while (skip < nhost && s_host[skip] >= mp.self_lo && s_host[skip] < mp.self_hi)
		skip++;
	size_t entry = compiler_entry(L, vmst, skip, nhost);
	if (entry)
		skip = entry;
	else if (vmst != VMST_GC) /* the collector's code is kept, as a CPU sample has it */
		while (skip + 1 < nhost && vm_c_code(s_host[skip]))
			skip++;
	/* A trace's exit restoring its snapshot (lj_trace_exit runs it under lj_vm_cpcall, an
	 * entry with no Lua frame): the exit handler, stepped to its entry's C frame (so there
	 * twice), made the allocation, as the trace would have. The cpcall's code was taken
	 * for an entry of the Lua frames: they went after lj_trace_exit. */
	if (skip + 3 < nhost && lp_lj_in_vm(&mp.vm, s_host[skip]) && vm_c_code(s_host[skip + 1]) &&
	    s_host[skip + 2] == s_host[skip + 3] && lp_lj_in_vm(&mp.vm, s_host[skip + 2]))
		skip += 2;
	s_own_trace = 0;
	size_t nlua = lua_frames(L, vmst, s_host + skip, nhost - skip, c_resumers);
	if (s_own_trace || walked_trace)
		key_trace_frames(s_own_trace ? &s_own : &wtr, s_host + skip, nhost - skip);
	/* The collector's step a trace ran: its base frame, the innermost, is at the line its
	 * C frame's SAVE_PC was left at long before; where the trace starts instead, as the
	 * CPU profiler has it (agent_vm_after_walk). */
	if (walked_trace && vmst == VMST_GC && nlua > 0 && s_lua[0].type == LP_FRAME_LFUNC &&
	    s_lua[0].addr == need_proto(wtr.startpt)) {
		uint32_t line = pc_line(wtr.startpt, wtr.startpc + 4);
		if (line > 0)
			s_lua[0].line = line;
	}
	if (cut || nlua == AGENT_MAX_LUA) /* the walk filled the array: deeper than kept */
		mp.cut++;
	if (cut && nhost > skip)
		s_host[nhost++] = LP_HOST_CUT;
	struct lp_sys_sample smp = { .lua = s_lua, .nlua = nlua, .host = s_host + skip,
				     .nhost = nhost - skip };
	size_t len = (size_t)(lp_put_sys_stacks(s_body, &smp) - s_body);
	/* The collector's and the compiler's allocations: their state goes on top in the
	 * report (astate record, from the dictionary's tags), as a CPU sample's does. The
	 * state is part of the stack's key: the compiler's phases allocate at the same
	 * frames. */
	uint8_t st = vmst == VMST_GC ? LP_VMST_GC
		   : !entry ? 0
		   /* INTERP: a trace starting (trace_start, J->trace grown), the compiler's
		    * state machine already in RECORD */
		   : vmst == VMST_RECORD || vmst == VMST_INTERP ? LP_VMST_RECORD
		   : vmst == VMST_OPT ? LP_VMST_OPT
		   : vmst == VMST_ASM ? LP_VMST_ASM : 0;
	uint32_t id;
	if (agent_stackdict_intern(&mp.dict, s_body, len, st, SIZE_MAX, &id))
		return -1;
	return id;
}

/*
** Live sampled blocks: a map, behind a mark per granule of LIVE_GRAIN bytes of address space
** (aliased every LIVE_GRANULES of them) that every free and realloc tests first (one load). A
** granule is marked while a live sampled block starts in it; a count per granule, touched
** on the rare path only, clears the mark when the last one goes. Granules rather than
** hashed addresses: the collector frees objects in runs of nearby addresses, so the tests
** of a run share a cache line of marks (a hash scattered them, and the load missed on about
** every free). A mark is a byte holding INT8_MIN rather than a bit: the hot path ORs it,
** sign extended, into the countdown and tests one sign (13 instructions against 16 with a
** bit test: about 0.3 ns less a call in bench/memprof_floor.c). A free from a marked
** granule looks the map up for nothing: about (live samples x LIVE_GRAIN / heap) of them.
*/
#define LIVE_GRANULES  (1u << 16)
#define LIVE_SHIFT 8 /* LIVE_GRAIN = 256 */
_Static_assert(LIVE_GRANULES == AGENT_ALLOCSTUB_MARKS, "the stubs index the marks by 16 bits");
static int8_t live_mark[LIVE_GRANULES];
static uint16_t live_count[LIVE_GRANULES];

static inline unsigned live_granule(const void *ptr)
{
	return (unsigned)((uintptr_t)ptr >> LIVE_SHIFT) & (LIVE_GRANULES - 1);
}

static inline int maybe_live(const void *ptr)
{
	return live_mark[live_granule(ptr)] != 0;
}

/*
** A granule's count saturates: granules alias every LIVE_GRANULES << LIVE_SHIFT bytes
** (16 MiB), so one index may hold any number of live samples: 65,536 of them from 32 GiB
** of heap (32 blocks of 8 bytes a granule) with every block sampled. Wrapped to 0, the
** count cleared the mark while sampled blocks were live, and their frees passed the hot
** path unseen: in use at stop (memprof_alias.sh). At its maximum a count stays there, the
** mark set until the tables are emptied (free_samples): correct, only frees there look
** the map up for nothing.
*/
#define LIVE_COUNT_STUCK UINT16_MAX

/*
** Whether a sampled block can be followed to its free: not when it lies in the granule of
** the null pointer, which every new block's call tests (an allocation's ptr is NULL).
** Marked, that granule sent every allocation of the program to the rare path for as long
** as the sample lived (memprof_alias.sh; 4 ns more an allocation, +13 % on a loop making
** tables with the JIT off). The chance is 1/65,536 for a small sampled block, 1/4,096 for
** a large one (page-aligned): a server holding thousands of samples may well have one.
** Such a sample is counted as allocated and freed at once (asample with live 0, meta
** samples_untracked): the in-use figures miss it, rather than show a block that may be
** long gone as a leak.
*/
static inline int live_trackable(const void *ptr)
{
	return live_granule(ptr) != live_granule(NULL);
}

static void live_add(const void *ptr)
{
	unsigned b = live_granule(ptr);
	if (live_count[b] == LIVE_COUNT_STUCK)
		return;
	if (live_count[b]++ == 0)
		live_mark[b] = INT8_MIN;
}

/*
** The size a freed sample is counted under. Exact while the count table holds fewer than
** FREED_EXACT keys, which every run with a few sizes to a stack stays under; past that,
** rounded to its nearest value with FREED_BITS significant bits (at most 1/128 = 0.8 % off,
** as often up as down), so that a long run of a program allocating many distinct sizes (a
** server's strings) adds at most ~32 keys an octave to a stack instead of one a size: the
** table grew 46-91 bytes a key for as long as the profile ran. The readers' weights (and
** so the estimates) move by as much as the size, which is well inside the sampling error
** of any one stack.
*/
#define FREED_EXACT 16384
#define FREED_BITS 6

static uint64_t freed_size(uint64_t size)
{
	if (mp.freed.count < FREED_EXACT || size >> FREED_BITS == 0)
		return size;
	int sh = 63 - __builtin_clzll(size) - (FREED_BITS - 1);
	return (size + (1ull << (sh - 1))) >> sh << sh;
}

/* A sampled block's address is no longer allocated (freed, or moved by a realloc). */
static void sampled_gone(void *ptr)
{
	mp.lookups++;
	struct lp_addrmap_entry *e = lp_addrmap_get(&mp.live, (uint64_t)(uintptr_t)ptr);
	if (!e)
		return;
	uint32_t i = (uint32_t)e->a;
	lp_addrmap_remove(&mp.live, (uint64_t)(uintptr_t)ptr);
	/* Counted by stack and size, which is all the reports use of a freed sample (its
	 * weight depends on the size): the slot is taken again. A size of 4 GiB or more, or
	 * no memory for the count, keeps the slot as it is. */
	uint64_t size = freed_size(mp.smp[i].size), key = size << 32 | mp.smp[i].stack;
	struct lp_addrmap_entry *f = size >> 32 ? NULL : lp_addrmap_get(&mp.freed, key);
	if (f)
		f->a++;
	if (f || (!(size >> 32) && !lp_addrmap_put(&mp.freed, key, 1, 0))) {
		mp.smp[i].live = 2;
		mp.smp[i].stack = mp.smpfree;
		mp.smpfree = i;
	} else {
		mp.smp[i].live = 0;
	}
	unsigned b = live_granule(ptr);
	if (live_count[b] != LIVE_COUNT_STUCK && --live_count[b] == 0)
		live_mark[b] = 0;
}

/* Set while the wrapper is in a rare or general path: sampled mode changing its tables (a
 * sample taken, a sampled block gone), exact mode's wrapper_any (symbols, flushes, records
 * written in steps). A terminating signal that interrupts the thread there does not stop
 * the profile (termstop.c), whose stop reads and writes them: it is held until the path
 * is left (rare_held), and delivered again then. */
static volatile sig_atomic_t rare_busy, rare_held;

static inline void rare_enter(void)
{
	rare_busy = 1;
	atomic_signal_fence(memory_order_seq_cst);
}

static inline void rare_leave(void)
{
	atomic_signal_fence(memory_order_seq_cst);
	rare_busy = 0;
	atomic_signal_fence(memory_order_seq_cst);
	if (__builtin_expect(rare_held, 0)) {
		rare_held = 0;
		agent_termstop_redeliver();
	}
}

/*
** Sampled mode's rare paths, entered: 1 when the profile still runs (the path may change the
** tables), 0 when it no longer does (pass the call on; rare_leave either way). The flag is
** stored, then the state loaded, across a full fence: a stop on another thread
** (rare_close) stores the state, then loads the flag, across another, so that one of the
** two sees the other's store. A full fence a sample or a lookup: both cost far more.
*/
static _Thread_local int rare_mine; /* this thread is in such a path (rare_open) */

/* The thread in exact mode's general path while rare_busy is set (wrapper_any). Not a flag
 * in thread-local storage: an initial-exec one (no call on the path) made the library need
 * static TLS, which a dlopen'ed module takes from a small surplus (static_tls.sh). */
static pthread_t general_owner;

/* This thread is inside one of the wrapper's paths that take rare_busy. */
static int in_own_path(void)
{
	return rare_mine || (rare_busy && pthread_equal(general_owner, pthread_self()));
}

static inline int rare_open(void)
{
	rare_enter();
	rare_mine = 1;
	atomic_thread_fence(memory_order_seq_cst);
	return mp.state == MP_RUNNING;
}

/* After rare_open. */
static inline void rare_shut(void)
{
	rare_mine = 0;
	rare_leave();
}

/* Polls busy() every millisecond until it is 0 (0), or max_ns have passed (-1). */
static int wait_while(int (*busy)(void), uint64_t max_ns)
{
	struct timespec step = { 0, 1000000 };
	for (uint64_t waited = 0; busy(); waited += 1000000) {
		if (waited >= max_ns)
			return -1;
		nanosleep(&step, NULL);
	}
	return 0;
}

/*
** Before a sampled profile's stop at exit, which another thread than the one running its
** state may make while that one still runs Lua code (exit() called on another thread; the
** thread that started the profile tells nothing: a state may move to another): the rare
** paths are closed (the profile halted, which rare_open tests) and the one under way, if
** any, waited for, so that the stop does not write the samples and free the tables as that
** path changes them. The stop did (memprof_exit_thread.sh: SIGSEGV, profiles unreadable).
** Not from inside such a path (rare_mine: a host's allocator that calls exit), which
** will not go on.
** The allocator is left as it is: the wrapper passes every call on from here, and putting
** the original back from this thread could let the VM read the new function with the
** wrapper's ud. -1 when the path did not end within AGENT_STOP_WAIT_NS (its writer
** blocked): no stop then, the file cut short rather than the tables freed under it.
** Exact mode's light paths have no such flag (a fence an event would cost too much):
** a stop there from another thread may still meet an event being written.
*/
static int rare_close(void)
{
	mp.state = MP_HALTED;
	atomic_thread_fence(memory_order_seq_cst);
	return wait_while(agent_memprof_signal_unsafe, AGENT_STOP_WAIT_NS);
}

/*
** Exact mode's counterpart of rare_close, before its stop at exit, which another thread
** than the one running the state may make while that one still allocates. The light paths
** take no flag (a fence an event would cost too much): the state is halted and the wrapper
** unhooked (set_chain: every call tests chain first, and an event under way tests evmask
** once its original allocator returns, then writes nothing more), and an event past its
** test is given time to end: until the stream's position has stayed put for a millisecond,
** at most 20 ms. Before, an event held in the allocator (a host's that blocks) wrote the
** rest of its record through the stream as the stop wrote or after it had emptied it
** (memprof_exit_thread.sh "late": SIGSEGV; memprof_exit_late2.c "mid": data after the
** epilogue; "null", a failed reallocation: its freed record read). The stop leaves the
** stream's pointers at scratch memory too (stop_profile_keep). What is left: a thread
** descheduled for longer than the millisecond inside the few instructions between one of
** those tests and its stores. The general path, which takes a flag but no fence, is waited
** for as rare_close waits, after that millisecond: the VM thread's store of the flag is
** seen by then, as its own fence would have made it (a barrier on every thread,
** membarrier(2), took 10-15 ms to register in a process with threads). -1 when it does not
** end in time (no stop then, the file cut short). Not called from inside this thread's own
** general path (in_own_path: a host's allocator that calls exit), which will not go on (the
** stop waited 5 s for it, memprof_exit_late2.c "oom"). The allocator is left as it is, as
** rare_close leaves it.
*/
static uint8_t *last_pos; /* events_close's last look at the stream's position */

/* The stream's position moved since the last look (at the first, from NULL: yes). */
static int pos_moved(void)
{
	uint8_t *now = *(uint8_t *volatile *)&mp.w.pos;
	int moved = now != last_pos;
	last_pos = now;
	return moved;
}

static int events_close(void)
{
	mp.state = MP_HALTED;
	set_chain(NULL);
	atomic_thread_fence(memory_order_seq_cst);
	last_pos = NULL;
	(void)wait_while(pos_moved, 20000000);
	return wait_while(agent_memprof_signal_unsafe, AGENT_STOP_WAIT_NS);
}

/* GCC's noipa keeps a rare path's calling convention and registers its own (no
 * interprocedural register allocation across it); clang has no such pass by default and
 * no such attribute: noinline is what is left. */
#if defined(__clang__)
#define RARE_PATH __attribute__((noinline))
#else
#define RARE_PATH __attribute__((noipa))
#endif

/* The rare paths of the sampled wrapper take its arguments in the same registers (no
 * shuffling on the hot path: without ud, GCC moved them there). A sample is due: */
static RARE_PATH void *sampled_due(void *ud, void *ptr, size_t osize,
						   size_t nsize)
{
	(void)ud; /* mp.orig_ud: the running profile's (sampled_rare) */
	/* Before the allocation: a stack reallocation moves the frames. */
	uint64_t t0 = agent_now_ns();
	*mp.cd = next_interval();
	int64_t id = capture();
	if (id < 0)
		mp.nlost++;
	mp.capture_ns += agent_now_ns() - t0;
	void *np = mp.orig_f(mp.orig_ud, ptr, osize, nsize);
	if (mp.state != MP_RUNNING)
		return np;
	if (ptr && osize && np && maybe_live(ptr))
		sampled_gone(ptr);
	if (id >= 0 && np) {
		int track = live_trackable(np);
		int64_t i = mp.smpfree != UINT32_MAX ? (int64_t)mp.smpfree : (int64_t)mp.nsmp;
		if ((i == (int64_t)mp.nsmp &&
		     (mp.nsmp >= UINT32_MAX - 1 ||
		      lp_grow((void **)&mp.smp, &mp.smpcap, mp.nsmp + 1, sizeof(*mp.smp)))) ||
		    (track && lp_addrmap_put(&mp.live, (uint64_t)(uintptr_t)np, (uint64_t)i, 0))) {
			mp.nlost++;
			return np;
		}
		if (i == (int64_t)mp.nsmp)
			mp.nsmp++;
		else
			mp.smpfree = mp.smp[i].stack;
		if (track)
			live_add(np);
		else
			mp.untracked++;
		mp.smp[i].size = nsize;
		mp.smp[i].stack = (uint32_t)id;
		mp.smp[i].live = (uint8_t)track;
		mp.nsampled++;
	}
	/* Symbols written while capturing may have failed the stream. */
	if (mp.w.flags)
		io_check();
	return np;
}

/*
** The hot path's test failed: a sample is due, or the block may be a live sampled one
** (or neither: an allocation, whose NULL tests granule 0's bit). A wrapper kept from
** lua_getallocf and called after stop passes straight through.
*/
static RARE_PATH void *sampled_rare(void *ud, void *ptr, size_t osize,
						    size_t nsize, agent_alloc_fn orig)
{
	/* Only for the running sampled profile's allocator: a wrapper kept from another's
	 * (another state, an earlier run) passes the call on to the one it wrapped. */
	if (mp.state == MP_RUNNING && mp.sample_bytes && orig == mp.orig_f && ud == mp.orig_ud) {
		mp.rare_calls++;
		/* A free is never a sample: a countdown below 0 at one stays so for the next
		 * allocation, and the free still looks its block up: taken as due, a live
		 * sample freed stayed in use until stop. */
		if (*mp.cd < 0 && nsize) {
			void *np = rare_open() ? sampled_due(ud, ptr, osize, nsize)
					       : orig(ud, ptr, osize, nsize);
			rare_shut();
			return np;
		}
		if (ptr && maybe_live(ptr)) {
			void *np = mp.orig_f(mp.orig_ud, ptr, osize, nsize);
			if (osize && (nsize == 0 || np)) {
				if (rare_open())
					sampled_gone(ptr);
				rare_shut();
			}
			return np;
		}
	}
	/* A stub's countdown below 0 when it is not the running profile's (a stop between
	 * its load and its store): never again, or every call would come here. */
	int64_t *cd = stub_countdown(orig, ud, 0);
	if (cd && *cd < 0 && !(mp.state == MP_RUNNING && mp.sample_bytes && cd == mp.cd))
		*cd = CD_NEVER;
	return orig(ud, ptr, osize, nsize);
}

/*
** The hot path: the countdown and the live mark, one test for both (a free subtracts 0; an
** allocation's ptr is NULL), then straight to the original allocator. Branch-free up to the
** test: separate tests for allocations and frees measured about 2 % slower on binary trees
** (14 M allocator calls/s). The event counters stay at zero in this mode: report() gives
** samples. Where allocstub.c can make one, the VM runs a generated copy of this test
** instead, whose last jump to the original is direct; this function is then the name CPU
** samples in the copy get, and the wrapper elsewhere.
*/
static void *sampled_wrapper(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct chain *c = ud;
	int64_t left = c->countdown - (int64_t)nsize;
	c->countdown = left;
	if (__builtin_expect((left | (int64_t)live_mark[live_granule(ptr)]) < 0, 0)) {
		/* As for a stub (sampled_rare). */
		if (left < 0 && (&c->countdown != mp.cd || mp.state != MP_RUNNING))
			c->countdown = CD_NEVER;
		return sampled_rare(c->ud, ptr, osize, nsize, c->f);
	}
	return c->f(c->ud, ptr, osize, nsize);
}

/* Sampled allocations as write_ext_records writes them, by stack: an entry of mp.smp
 * (freed 0) or a slot of mp.freed (freed 1). */
struct sref {
	uint32_t stack;
	uint32_t at; /* index << 1 | freed */
};

static int sref_cmp(const void *a, const void *b)
{
	const struct sref *x = a, *y = b;
	if (x->stack != y->stack)
		return x->stack < y->stack ? -1 : 1;
	return x->at < y->at ? -1 : x->at > y->at;
}

/* Records of up to 60 KiB. Not on the stack: stop runs on the host's thread, whose stack
 * may be small (sysbench's are 64 KiB). */
static uint8_t srec[2][61440 + 32];
static size_t slen[2];

static void put_samples_end(struct lp_wbuf *w)
{
	for (int f = 0; f < 2; f++)
		if (slen[f]) {
			lp_write_ext_record(w, f ? LP_EXT_AFREED : LP_EXT_ASAMPLE, srec[f], slen[f]);
			slen[f] = 0;
		}
}

/* Encodes entry i of mp.smp (freed 0) or slot i of mp.freed (freed 1) into its record,
 * written when full or by put_samples_end. */
static void put_sample(size_t i, int freed, struct lp_wbuf *w)
{
	uint8_t *p = srec[freed] + slen[freed];
	if (!freed) {
		p += lp_uleb_encode(mp.smp[i].stack, p);
		p += lp_uleb_encode(mp.smp[i].size, p);
		p += lp_uleb_encode(mp.smp[i].live, p);
	} else {
		const struct lp_addrmap_entry *f = &mp.freed.slots[i];
		p += lp_uleb_encode((uint32_t)f->key, p);
		p += lp_uleb_encode(f->key >> 32, p);
		p += lp_uleb_encode(f->a, p);
	}
	slen[freed] = (size_t)(p - srec[freed]);
	if (slen[freed] >= 61440) {
		lp_write_ext_record(w, freed ? LP_EXT_AFREED : LP_EXT_ASAMPLE, srec[freed],
				    slen[freed]);
		slen[freed] = 0;
	}
}

/* The extension's records besides the maps and meta, at stop: the extents of the builtins
** named (need_builtin), and sampled mode's stack records and allocations. */
static void write_ext_records(struct lp_wbuf *w)
{
	for (unsigned i = 0; i < nbuiltins; i++)
		if (builtins[i].named)
			lp_write_ext_csize(w, builtins[i].addr, 1);
	if (!mp.sample_bytes)
		return;
	static uint8_t rec[61440 + 32];
	size_t len = 0;
	agent_tcodes_write(&s_tcodes, w);
	/* astate records: (stack state)* for the stacks of the collector and the compiler,
	 * whose state is their tag in the dictionary. */
	for (size_t i = 0; i < mp.dict.nent; i++) {
		if (mp.dict.ent[i].tag) {
			len += lp_uleb_encode(i, rec + len);
			len += lp_uleb_encode(mp.dict.ent[i].tag, rec + len);
		}
		if (len && (len >= 61440 || i + 1 == mp.dict.nent)) {
			lp_write_ext_record(w, LP_EXT_ASTATE, rec, len);
			len = 0;
		}
	}
	/* Each stack's record, then its samples: asample (stack size live)* for the live ones
	 * (and freed ones not counted), afreed (stack size count)* for the freed ones. A file
	 * cut short loses the stacks written last with their samples, not every sample of
	 * stacks written after a cut (samples refer to their stack by id). Without memory
	 * for the order, all samples then all stacks. */
	size_t n = mp.freed.count;
	for (size_t i = 0; i < mp.nsmp; i++)
		n += mp.smp[i].live < 2;
	struct sref *refs = n ? malloc(n * sizeof(*refs)) : NULL;
	if (!refs) {
		for (size_t i = 0; i < mp.nsmp; i++)
			if (mp.smp[i].live < 2)
				put_sample(i, 0, w);
		for (size_t i = 0; i < mp.freed.cap; i++)
			if (mp.freed.slots[i].used)
				put_sample(i, 1, w);
		put_samples_end(w);
		agent_stackdict_write(&mp.dict, w);
		return;
	}
	size_t k = 0;
	for (size_t i = 0; i < mp.nsmp; i++)
		if (mp.smp[i].live < 2)
			refs[k++] = (struct sref){ mp.smp[i].stack, (uint32_t)(i << 1) };
	for (size_t i = 0; i < mp.freed.cap; i++)
		if (mp.freed.slots[i].used)
			refs[k++] = (struct sref){ (uint32_t)mp.freed.slots[i].key,
						   (uint32_t)(i << 1 | 1) };
	qsort(refs, n, sizeof(*refs), sref_cmp);
	for (size_t i = 0; i < n; i++) {
		if (i == 0 || refs[i - 1].stack != refs[i].stack) {
			put_samples_end(w);
			agent_stackdict_write_one(&mp.dict, w, refs[i].stack);
		}
		put_sample(refs[i].at >> 1, refs[i].at & 1, w);
	}
	put_samples_end(w);
	free(refs);
}

/* Sampled mode's tables (stacks, samples, the live and freed maps), emptied: at start, and
 * at stop once they are written (they hold about the sampled part of the live heap and every
 * distinct stack, megabytes that were kept until the next start, for good when there was
 * none). The run's count of samples goes too: a stop keeps it for luaprof_memprof_report. */
static void free_samples(void)
{
	agent_stackdict_free(&mp.dict);
	free(mp.smp);
	lp_addrmap_free(&mp.live);
	lp_addrmap_free(&mp.freed);
	memset(live_mark, 0, sizeof(live_mark));
	memset(live_count, 0, sizeof(live_count));
	mp.smp = NULL;
	mp.nsmp = mp.smpcap = 0;
	mp.smpfree = UINT32_MAX;
	mp.nsampled = 0;
	agent_tcodes_reset(&s_tcodes);
}

int agent_memprof_uses_native(void)
{
	return mp.own_native;
}

static void native_release_mp(void)
{
	if (!mp.own_native)
		return;
	mp.own_native = 0;
	if (!agent_running()) {
		agent_objects_fini();
		agent_vm_detach();
	}
}

/* Shares the CPU profiler's VM sampler, objects table and unwinder, attaching them when
 * it does not run. */
static int native_acquire(lua_State *L)
{
	if (agent_vm_attached() && !agent_vm_attached_to(L)) {
		if (agent_running()) {
			set_err("the CPU profiler samples another Lua state, and "
				"sampled mode walks stacks with its sampler (exact mode can run)");
			return -1;
		}
		/* Left attached by no profile of this process (a forked child's copy of its
		 * parent's): attached anew below. */
		agent_vm_detach();
	}
	if (!agent_vm_attached()) {
		if (agent_vm_attach(L, api_err, sizeof(api_err)) != 0)
			return -1;
		if (agent_objects_init(api_err, sizeof(api_err)) != 0) {
			agent_vm_detach();
			return -1;
		}
	}
	mp.own_native = 1;
	mp.objs_adds = agent_objects_changes();
	if (agent_unwind_init(api_err, sizeof(api_err)) != 0) {
		native_release_mp();
		return -1;
	}
	const struct objtab *tab = agent_objects_enter();
	const struct obj_text *tx = tab ? agent_objects_text(tab, (uint64_t)(uintptr_t)capture)
				       : NULL;
	mp.self_lo = tx ? tx->lo : 0;
	mp.self_hi = tx ? tx->hi : 0;
	tx = tab ? agent_objects_text(tab, mp.vm.vm_lo) : NULL;
	mp.vmobj_lo = tx ? tx->lo : 0;
	mp.vmobj_hi = tx ? tx->hi : 0;
	agent_objects_leave();
	return 0;
}

/* -- The wrapper ----------------------------------------------------------------------- */

static void *wrapper_raw(void *ud, void *ptr, size_t osize, size_t nsize);
static void *wrapper_enc(void *ud, void *ptr, size_t osize, size_t nsize);

/* Puts the original allocator back, unless something was installed over the wrapper since
 * start: that allocator chains to the wrapper, which passes every call on once the profile
 * no longer runs (mp.chain), and replacing it would drop it silently. */
static void restore_allocator(void)
{
	void *ud;
	if (mp.L && lua_getallocf(mp.L, &ud) == mp.installed_f && ud == mp.installed_ud)
		lua_setallocf(mp.L, mp.orig_f, mp.orig_ud);
}

/*
** The allocator under any of this profiler's wrappers at *f / *ud: what a wrapper found at
** an earlier start, when a program put it back since (a library that wrapped the
** allocator for a while and restored what it had found, a profile stopped meanwhile).
** Wrapped again, it would chain to itself.
*/
static void unwrap(lua_Alloc *f, void **ud)
{
	for (;;) {
		if (*f == wrapper_raw || *f == wrapper_enc || *f == sampled_wrapper) {
			const struct chain *c = *ud;
			*f = c->f;
			*ud = c->ud;
		} else {
			lua_Alloc orig = agent_allocstub_orig(*f);
			if (!orig)
				return;
			*f = orig; /* the stub passes the original's ud */
		}
	}
}

/* After a write: a failed or stopped stream ends profiling, the program goes on. */
static void io_check(void)
{
	if (lp_wbuf_ok(&mp.w) || mp.state != MP_RUNNING)
		return;
	mp.io_errno = mp.w.flags & LP_WBUF_STOP ? ECANCELED
		    : mp.w.saved_errno ? mp.w.saved_errno : EIO;
	restore_allocator();
	mp.state = MP_HALTED;
	set_chain(NULL);
	countdown_disarm();
}

/* sw's writer (exact mode): its bytes into the raw stream, as a blob. */
static size_t blob_flush(const void **data, size_t len, void *ctx)
{
	if ((size_t)(mp.w.end - mp.w.pos) < 8)
		lp_wbuf_flush(&mp.w);
	if (!lp_wbuf_ok(&mp.w))
		return 0;
	static const uint8_t zeros[8];
	mp.w.pos = agent_rawev_word(mp.w.pos, AGENT_RAWEV_BLOB | (uint64_t)len << 8);
	lp_wbuf_bytes(&mp.w, *data, len);
	lp_wbuf_bytes(&mp.w, zeros, AGENT_RAWEV_BLOB_PAD(len));
	return lp_wbuf_ok(&mp.w) ? len : 0;
}

/* Room for the longest event, raw (AGENT_RAWEV_MAX) or encoded (AGENT_RAWEV_ENC_MAX). */
#define EVENT_MAX 64

static __attribute__((noinline)) void *wrapper_any(void *ud, void *ptr, size_t osize,
						   size_t nsize);

/*
** A test build (make ... CFLAGS=-DLP_MEMPROF_SELFCHECK, memprof_luajit.sh) checks every
** event a light path writes against what the general path would have written:
** lp_write_mem_event's bytes for the origin locate() gives, against the light path's
** (its raw record encoded, with raw). The counts go into the profile's meta
** (selfcheck_events, selfcheck_bad).
*/
#ifdef LP_MEMPROF_SELFCHECK
static uint64_t selfcheck_events, selfcheck_bad;

static size_t selfcheck_nowrite(const void **data, size_t len, void *ctx)
{
	return 0;
}

static void selfcheck(struct origin o, const uint8_t *h, const uint8_t *end, void *ptr,
		      size_t osize, void *np, size_t nsize)
{
	uint8_t buf[128], enc[128];
	struct lp_wbuf w;
	lp_wbuf_init(&w, buf, sizeof(buf), selfcheck_nowrite, NULL);
	struct lp_mem_event e = { .source = o.source, .oaddr = (uintptr_t)ptr, .osize = osize,
				  .naddr = (uintptr_t)np, .nsize = nsize };
	e.event = ptr && osize ? (nsize ? LP_AEVENT_REALLOC : LP_AEVENT_FREE) : LP_AEVENT_ALLOC;
	if (e.event == LP_AEVENT_ALLOC)
		e.oaddr = e.osize = 0;
	if (e.event == LP_AEVENT_FREE)
		e.naddr = e.nsize = 0;
	if (o.source == LP_ASOURCE_TRACE)
		e.traceno = o.num;
	else if (o.source == LP_ASOURCE_LFUNC)
		e.loc_addr = o.addr, e.loc_line = o.num;
	else if (o.source == LP_ASOURCE_CFUNC)
		e.loc_addr = o.addr;
	lp_write_mem_event(&w, &e);
	struct agent_rawev_enc st = { 0 };
	size_t elen = (size_t)(end - h), used = elen;
	if (mp.raw)
		used = agent_rawev_encode(&st, h, (size_t)(end - h), enc, sizeof(enc), &elen);
	else
		memcpy(enc, h, elen);
	selfcheck_events++;
	if (st.bad || used != (size_t)(end - h) || (size_t)(w.pos - buf) != elen ||
	    memcmp(buf, enc, elen))
		selfcheck_bad++;
}
/* The light paths store parts of a record at mp.w.pos before the general path runs here:
 * it must write nothing there (no symbol is new to the stream on a light path). */
static struct origin selfcheck_locate(void)
{
	uint8_t *at = mp.w.pos;
	struct origin o = locate();
	if (mp.w.pos != at)
		selfcheck_bad++;
	return o;
}
#define SELFCHECK_ORIGIN() struct origin sc_o = selfcheck_locate()
#define SELFCHECK(h, end, ptr, osize, np, nsize) selfcheck(sc_o, h, end, ptr, osize, np, nsize)
#else
#define SELFCHECK_ORIGIN() (void)0
#define SELFCHECK(h, end, ptr, osize, np, nsize) (void)0
#endif

/*
** The light paths' common part, once the event's source is written (raw, a constant in each
** copy of the light paths, so that each form is straight-line code: w0 is the record's
** first word without the event, stored here; otherwise the header byte is at h) and p is
** after it: the old block's fields (a reallocation), the call, then the new block's. Only
** h and the sizes are kept across the call (p in mp.pend); the counters are taken back when
** the call fails (nothing happened: no event). Like every light path, it moves w.pos only
** once the record is whole: a terminating signal that stops the profile from another
** thread (termstop.c) while this thread is held anywhere in a light path finds the
** stream at a record's end.
*/
static inline __attribute__((always_inline)) void *event_call(int raw, uint8_t *h, uint64_t w0,
								uint8_t *p, void *ptr,
								size_t osize, size_t nsize)
{
	SELFCHECK_ORIGIN();
	unsigned event = LP_AEVENT_ALLOC;
	if (ptr && osize) {
		event = LP_AEVENT_REALLOC;
		mp.reallocs++;
		mp.free_bytes += osize;
		proto_freed((uintptr_t)ptr);
	} else {
		mp.allocs++;
	}
	if (raw) {
		agent_rawev_word_nt(h, w0 | event);
		if (event == LP_AEVENT_REALLOC) {
			p = agent_rawev_word_nt(p, (uintptr_t)ptr);
			p = agent_rawev_word_nt(p, osize);
		}
	} else {
		*h |= (uint8_t)event;
		if (event == LP_AEVENT_REALLOC) {
			p = lp_uleb_put_addr(p, (uintptr_t)ptr);
			p = lp_uleb_put_small(p, osize);
		}
	}
	mp.pend = p;
	void *np = mp.orig_f(mp.orig_ud, ptr, osize, nsize);
	if (__builtin_expect(!((uintptr_t)np & mp.evmask), 0)) {
		/* The call failed, or the profile was stopped meanwhile from another thread
		 * (events_close): the stream, h's buffer too, is no longer this event's (a
		 * reallocation has its old block's size then; LuaJIT passes a new block's
		 * as 0). Either way the counts are taken back. */
		if (mp.evmask ? (*h & LP_AEVENT_MASK) == LP_AEVENT_REALLOC : osize != 0) {
			mp.reallocs--;
			mp.free_bytes -= osize;
		} else {
			mp.allocs--;
		}
		return np;
	}
	p = mp.pend;
	if (raw) {
		mp.w.pos = agent_rawev_word_nt(p, (uintptr_t)np);
	} else {
		p = lp_uleb_put_addr(p, (uintptr_t)np);
		mp.w.pos = lp_uleb_put_small(p, nsize);
	}
	mp.alloc_bytes += nsize;
	SELFCHECK(h, mp.w.pos, ptr, osize, np, nsize);
	return np;
}

/*
** event_call for a new block (no old one) as a raw record whose first hdr bytes (w0, and
** the prototype's word for LFUNC) the caller stored at mp.w.pos without moving it: the
** record is taken into the buffer after the call, so that a failed call has nothing to
** undo and only nsize lives across the call (one saved register, not three). The original
** allocator does not write the buffer: nothing is stored there meanwhile.
*/
static inline __attribute__((always_inline)) void *alloc_call_raw(unsigned hdr, size_t nsize)
{
	SELFCHECK_ORIGIN();
	void *np = mp.orig_f(mp.orig_ud, NULL, 0, nsize);
	if (!((uintptr_t)np & mp.evmask)) /* or stopped meanwhile: as in event_call */
		return np;
	uint8_t *p = mp.w.pos;
	mp.w.pos = agent_rawev_word_nt(p + hdr, (uintptr_t)np);
	mp.allocs++;
	mp.alloc_bytes += nsize;
	SELFCHECK(p, mp.w.pos, NULL, 0, np, nsize);
	return np;
}

/* event_call for a grown block as a raw record (rare next to new blocks): apart, so that
 * the paths calling it for a new block's keep one register across their call. */
static __attribute__((noinline)) void *realloc_call_raw(uint8_t *h, uint64_t w0, uint8_t *p,
							void *ptr, size_t osize, size_t nsize)
{
	return event_call(1, h, w0, p, ptr, osize, nsize);
}

/*
** A new or grown block in a trace whose number the stream has named in this generation:
** most events of JIT-compiled allocation loops besides the collector's frees (in-process
** A/B, JIT on, against the build without the light paths: binary trees 1.226 against
** 1.238/1.226 (allocations alone: 1.222 against 1.271/1.262), tables 1.200 against
** 1.419/1.399, life 1.073 against 1.144/1.146). Anything else, wrapper_any.
*/
static inline __attribute__((always_inline)) void *trace_event(int raw, void *ud, void *ptr,
								 size_t osize, size_t nsize)
{
	uint32_t no = (uint32_t)*mp.vmstate;
	const struct trace_seen *c = &trace_seen[no & 63];
	if (c->traceno != no || c->gen != mp.trace_gen || no >= AGENT_RAWEV_NUM_LIMIT ||
	    nsize >= AGENT_RAWEV_SIZE_LIMIT || mp.w.end - mp.w.pos < EVENT_MAX || mp.w.flags)
		return wrapper_any(ud, ptr, osize, nsize);
	uint8_t *h = mp.w.pos;
	if (raw && !(ptr && osize)) {
		agent_rawev_word_nt(h, agent_rawev_w0(LP_ASOURCE_TRACE | LP_AEVENT_ALLOC, no, nsize));
		return alloc_call_raw(8, nsize);
	}
	if (raw)
		return realloc_call_raw(h, agent_rawev_w0(LP_ASOURCE_TRACE, no, nsize), h + 8, ptr,
					osize, nsize);
	*h = LP_ASOURCE_TRACE;
	return event_call(0, h, 0, lp_uleb_put_small(h + 1, no), ptr, osize, nsize);
}

/*
** A new or grown block made by the interpreter or a C function (JIT off, or code not
** compiled) in a Lua function or a builtin called from one: attributed as locate() does,
** when nothing rare is needed (a prototype already in the cache, a pc inside its
** bytecode). In-process A/B, JIT off, against the build without it: binary trees 1.195
** against 1.262/1.270, life 1.054 against 1.081/1.078. Anything else (a lua_CFunction's
** events too), wrapper_any.
*/
static inline __attribute__((always_inline)) void *lua_event(int raw, void *ud, void *ptr,
							       size_t osize, size_t nsize)
{
	const struct lp_lj_layout *y = mp.vm.lay;
	if (mp.w.end - mp.w.pos < EVENT_MAX || mp.w.flags)
		return wrapper_any(ud, ptr, osize, nsize);
	uint64_t L = ld64(mp.vm.g + y->g_cur_L);
	if (!L)
		L = mp.vm.mainL;
	uint64_t base = ld64(L + y->l_base);
	uint64_t cf = ld64(L + y->l_cframe) & LP_LJ_CFRAME_RAWMASK;
	if (base < ld64(L + y->l_stack) + 16 || !cf) /* no C frame: see locate() */
		return wrapper_any(ud, ptr, osize, nsize);
	/* As slot_fn, spelt out: with the expectations the running Lua function's case is
	 * straight-line code (as GCC laid it out without them, it cost 5 points of JIT-off
	 * binary trees). */
	uint64_t tv = ld64(base - 16);
	if (__builtin_expect((tv >> 47) != LP_LJ_ITYPE_FUNC, 0))
		return wrapper_any(ud, ptr, osize, nsize);
	uint64_t fn = tv & LP_LJ_GCVMASK;
	uint8_t ffid = ld8(fn + y->fn_ffid);
	uint64_t pc;
	if (__builtin_expect(ffid == LP_LJ_FFID_LUA, 1)) {
		/* The running Lua function, at the pc it saved. */
		pc = ld64(cf + y->cf_pc);
	} else if (ffid != LP_LJ_FFID_C) {
		/* A builtin: the Lua function that called it (caller_proto), at the call. */
		pc = ld64(base - 8);
		if ((pc & 3) != LP_LJ_FRAME_LUA)
			return wrapper_any(ud, ptr, osize, nsize);
		uint64_t cbase = caller_base(base, pc);
		fn = slot_fn(cbase - 16);
		if (!fn || ld8(fn + y->fn_ffid) != LP_LJ_FFID_LUA)
			return wrapper_any(ud, ptr, osize, nsize);
	} else {
		return wrapper_any(ud, ptr, osize, nsize);
	}
	/* A saved PC in the cache may still be another function's: a trace exit that fails
	 * (a stack overflow found restoring its frames) leaves the C frame's PC as it was
	 * while L->base is the restored frame's. The PC must be in fn's bytecode. An empty
	 * slot's pc is 0, as VM entries' SAVE_PC may be. */
	struct pc_slot *ps = &pc_cache[(pc >> 2) & 255];
	uint64_t key = ps->key, bc = ld64(fn + y->fn_pc);
	uint32_t line = ps->line;
	if (ps->pc != pc || !pc || ps->bc != bc) {
		uint64_t pt = bc - y->pt_size;
		key = cached_proto(pt);
		if (!key || !in_bytecode(pt, pc))
			return wrapper_any(ud, ptr, osize, nsize);
		line = pc_line_quick(pt, pc);
		if (!line || line >= AGENT_RAWEV_NUM_LIMIT)
			return wrapper_any(ud, ptr, osize, nsize);
		ps->pc = pc;
		ps->key = key;
		ps->bc = bc;
		ps->line = line;
	}
	if (nsize >= AGENT_RAWEV_SIZE_LIMIT)
		return wrapper_any(ud, ptr, osize, nsize);
	uint8_t *h = mp.w.pos;
	if (raw && !(ptr && osize)) {
		agent_rawev_word_nt(h, agent_rawev_w0(LP_ASOURCE_LFUNC | LP_AEVENT_ALLOC, line,
						      nsize));
		agent_rawev_word_nt(h + 8, key);
		return alloc_call_raw(16, nsize);
	}
	if (raw)
		return realloc_call_raw(h, agent_rawev_w0(LP_ASOURCE_LFUNC, line, nsize),
					agent_rawev_word_nt(h + 8, key), ptr, osize, nsize);
	*h = LP_ASOURCE_LFUNC;
	return event_call(0, h, 0, lp_uleb_put_small(lp_uleb_put_addr(h + 1, key), line), ptr,
			  osize, nsize);
}

/*
** Exact mode's entry. Half the events of an allocation-heavy program are the collector's
** frees (vmstate GC, so INTERNAL): they are written before the free, which cannot fail,
** and the original allocator is tail-called, all without a stack frame (in-process A/B,
** binary trees: 1.263 against 1.299 with the JIT on, 1.281 against 1.298 off). New and
** grown blocks go to trace_event in traces and to lua_event in the interpreter, everything
** else to wrapper_any.
*/
static __attribute__((noinline)) void *trace_event_raw(void *ud, void *ptr, size_t osize,
						       size_t nsize)
{
	return trace_event(1, ud, ptr, osize, nsize);
}

static __attribute__((noinline)) void *trace_event_enc(void *ud, void *ptr, size_t osize,
						       size_t nsize)
{
	return trace_event(0, ud, ptr, osize, nsize);
}

static __attribute__((noinline)) void *lua_event_raw(void *ud, void *ptr, size_t osize,
						     size_t nsize)
{
	return lua_event(1, ud, ptr, osize, nsize);
}

static __attribute__((noinline)) void *lua_event_enc(void *ud, void *ptr, size_t osize,
						     size_t nsize)
{
	return lua_event(0, ud, ptr, osize, nsize);
}

static inline __attribute__((always_inline)) void *wrapper(int raw, void *ud, void *ptr,
							     size_t osize, size_t nsize)
{
	/* Not the running profile's wrapper: one kept from lua_getallocf (a C library caching
	 * the state's allocator) may be called after stop, when the stream's buffer is gone
	 * and, after lua_close, the VM too; or while another profile runs (struct chain). */
	if (ud != mp.chain)
		return chain_on(ud, ptr, osize, nsize);
	if (!nsize && *mp.vmstate == VMST_GC && osize - 1 < AGENT_RAWEV_SIZE_LIMIT - 1 && ptr &&
	    mp.w.end - mp.w.pos >= EVENT_MAX && !mp.w.flags) {
		SELFCHECK_ORIGIN();
		uint8_t *h = mp.w.pos;
		if (raw) {
			uint8_t *p = agent_rawev_word_nt(h, agent_rawev_w0(LP_AEVENT_FREE |
									 LP_ASOURCE_INT, 0, osize));
			mp.w.pos = agent_rawev_word_nt(p, (uintptr_t)ptr);
		} else {
			*h = (uint8_t)(LP_AEVENT_FREE | LP_ASOURCE_INT);
			uint8_t *p = lp_uleb_put_addr(h + 1, (uintptr_t)ptr);
			mp.w.pos = lp_uleb_put_small(p, osize);
		}
		SELFCHECK(h, mp.w.pos, ptr, osize, NULL, 0);
		mp.frees++;
		mp.free_bytes += osize;
		proto_freed((uintptr_t)ptr);
		return mp.orig_f(mp.orig_ud, ptr, osize, nsize);
	}
	if (nsize) {
		int32_t vmst = *mp.vmstate;
		if (vmst > 0)
			return raw ? trace_event_raw(ud, ptr, osize, nsize)
				   : trace_event_enc(ud, ptr, osize, nsize);
		if (vmst == VMST_INTERP || vmst == VMST_C)
			return raw ? lua_event_raw(ud, ptr, osize, nsize)
				   : lua_event_enc(ud, ptr, osize, nsize);
	}
	return wrapper_any(ud, ptr, osize, nsize);
}

/* The wrapper installed: one copy for each form of the stream, so that no event tests
 * which form it takes. */
static void *wrapper_raw(void *ud, void *ptr, size_t osize, size_t nsize)
{
	return wrapper(1, ud, ptr, osize, nsize);
}

static void *wrapper_enc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	return wrapper(0, ud, ptr, osize, nsize);
}

/*
** Any event, as a raw record, or encoded from one at once: what lp_write_mem_event would
** write. The event count is the sum of the kinds' counts.
*/
static void *wrapper_general(void *ud, void *ptr, size_t osize, size_t nsize)
{
	if (mp.state != MP_RUNNING)
		return mp.orig_f(mp.orig_ud, ptr, osize, nsize);
	if (ptr && osize)
		proto_freed((uintptr_t)ptr);
	struct origin o = locate();
	void *np = mp.orig_f(mp.orig_ud, ptr, osize, nsize);
	if (mp.state != MP_RUNNING)
		return np;
	if (mp.w.end - mp.w.pos < EVENT_MAX || mp.w.flags) {
		/* A symbol written by locate() may have failed the stream already. */
		if (lp_wbuf_ok(&mp.w))
			lp_wbuf_flush(&mp.w);
		if (!lp_wbuf_ok(&mp.w)) {
			io_check();
			return np;
		}
	}
	unsigned event;
	if (ptr && osize) {
		if (!nsize) {
			event = LP_AEVENT_FREE;
			mp.frees++;
			mp.free_bytes += osize;
		} else {
			if (!np)
				return np; /* failed reallocation: the old block stays */
			event = LP_AEVENT_REALLOC;
			mp.reallocs++;
			mp.alloc_bytes += nsize;
			mp.free_bytes += osize;
		}
	} else if (nsize) {
		if (!np)
			return np; /* failed allocation: nothing happened */
		event = LP_AEVENT_ALLOC;
		mp.allocs++;
		mp.alloc_bytes += nsize;
	} else {
		/* lj_lex_cleanup frees an empty buffer as (NULL, 0, 0): Tarantool writes a free
		 * of nothing. */
		event = LP_AEVENT_FREE;
		ptr = NULL;
		mp.frees++;
	}
	uint8_t rec[AGENT_RAWEV_MAX];
	uint8_t *end = agent_rawev_put(mp.raw ? mp.w.pos : rec, event | o.source, o.num, o.addr,
				       (uintptr_t)ptr, osize, (uintptr_t)np, nsize);
	if (mp.raw) {
		mp.w.pos = end;
	} else {
		/* The rare path: the record encoded at once. */
		struct agent_rawev_enc e = { 0 };
		size_t olen;
		agent_rawev_encode(&e, rec, (size_t)(end - rec), mp.w.pos,
				   (size_t)(mp.w.end - mp.w.pos), &olen);
		mp.w.pos += olen;
	}
	return np;
}

/* The general path, flagged (rare_enter): it writes symbols, flushes the stream and
 * writes records in several steps, which a stop from another thread must not meet. */
static __attribute__((noinline)) void *wrapper_any(void *ud, void *ptr, size_t osize,
						   size_t nsize)
{
	general_owner = pthread_self();
	rare_enter();
	void *np = wrapper_general(ud, ptr, osize, nsize);
	rare_leave();
	return np;
}

/* -- Start and stop ---------------------------------------------------------------------- */


static void set_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(api_err, sizeof(api_err), fmt, ap);
	va_end(ap);
}

LUAPROF_API const char *luaprof_memprof_error(void)
{
	return api_err;
}

void agent_memprof_closing(lua_State *L)
{
	void *ud;
	lua_Alloc f = lua_getallocf(L, &ud), top = f;
	/* The running profile's wrapper (exact mode's, or the sampled stub), when this state,
	 * another than the profiled one, shares its allocator and ud (given them from
	 * lua_getallocf): its blocks are in that profile, and its frees still go through the
	 * wrapper, so that the profile sees them freed. (Exact mode put the original back
	 * here, and the profile held every block the state still had at close: a false leak
	 * in its HEAP SUMMARY.) */
	if (mp.state == MP_RUNNING && top == mp.installed_f && ud == mp.installed_ud &&
	    !agent_memprof_runs_in(L))
		return;
	unwrap(&f, &ud);
	if (f != top)
		lua_setallocf(L, f, ud);
}

int agent_memprof_running(void)
{
	return mp.state != MP_IDLE;
}

int agent_memprof_runs_in(lua_State *L)
{
	return mp.state != MP_IDLE && L &&
	       ld64((uint64_t)(uintptr_t)L + mp.vm.lay->l_glref) == mp.vm.g;
}

uint64_t agent_memprof_run_id(void)
{
	return mp.run_id;
}

int agent_memprof_ffi_loaded(void)
{
	return ld64(mp.vm.g + mp.vm.lay->g_ctype_state) != 0;
}

static void free_maps(void)
{
	lp_addrmap_free(&mp.protos);
	lp_addrmap_free(&mp.traces);
	lp_addrmap_free(&mp.cfuncs);
}

/*
** A forked child is not profiling: its events would go into the parent's file (the same
** open file, interleaved, after the parent's own epilogue or before it). The child gets the
** VM's allocator back and memprof.stop() says the profiler is not running; the parent's
** profile is untouched. What the child's copy holds (buffer, maps) is left, not freed: the
** locks that freeing would take may be held by parent threads that the child has not.
*/
static void at_fork_child(void)
{
	if (mp.state == MP_RUNNING)
		restore_allocator();
	if (mp.state != MP_IDLE) {
		mp.state = MP_IDLE;
		set_chain(NULL);
		mp.L = NULL;
		countdown_disarm();
	}
	/* The child's CPU profiler may sample any state: the stack sampler is not held for
	 * a profile the child does not have. */
	mp.own_native = 0;
	/* Its one thread's: a rare path of another thread of the parent's has no thread to
	 * end it here, and a later exit's stop waited for it (rare_close: 5 s, then none,
	 * memprof_fork_rare.sh). A signal held for such a path is the parent's (termstop.c
	 * forgets it in the child). Forked from inside a sampled path, the thread goes on in
	 * it: still set. */
	rare_busy = in_own_path();
	rare_held = 0;
}

/* What a stop hands to on_stop, called once the lock is released (api_lock). */
struct handback {
	luaprof_sysprof_on_stop on_stop; /* NULL: nothing to hand back */
	void *ctx;
	uint8_t *buf;
	int e;                           /* the stream's failure, 0 if none */
};

/* What a stopped profile no longer needs: the symbol maps, the shared sampler, sampled
 * mode's tables (the count of samples is kept: luaprof_memprof_report). */
static void free_run(void)
{
	uint64_t nsampled = mp.nsampled;
	free_maps();
	native_release_mp();
	free_samples();
	mp.nsampled = nsampled;
}

static int stop_profile(lua_State *L, const char *cause, struct handback *hb);
static int stop_profile_keep(lua_State *L, const char *cause, struct handback *hb, int keep);
static int hand_back(int rc, const struct handback *hb);

/*
** Start and stop, one at a time in the process: the profile is the process's, and each of
** a host's threads may run a Lua state of its own and start or stop from there (a start
** that ran while another thread's stop was tearing the profile down took the buffer and
** callbacks that stop was about to hand to on_stop). A call made inside another on the same
** thread (the writer calling stop, from an event or from the epilogue; a finalizer that
** start's allocation set off) is refused, not waited for: in_api. on_stop runs after the
** lock is released (it may start the next profile, or wait for a thread that does). The
** writer runs under it: a writer must not wait for another thread's start or stop. The
** allocation wrappers take no lock: stop still belongs on the thread that runs the VM, or
** to a time when it runs no Lua code.
*/
static pthread_mutex_t api_lock = PTHREAD_MUTEX_INITIALIZER;
static _Thread_local int in_api;    /* inside start, stop or the writer, on this thread */
static _Thread_local int lock_held; /* this thread holds api_lock */
static _Atomic long stop_tid;       /* the thread whose stop has not closed its file yet,
				    * or whose start is not done */

static int api_enter(void)
{
	if (in_api)
		return -1;
	pthread_mutex_lock(&api_lock);
	lock_held = in_api = 1;
	return 0;
}

static int api_try_enter(void)
{
	if (in_api || pthread_mutex_trylock(&api_lock) != 0)
		return -1;
	lock_held = in_api = 1;
	return 0;
}

static void api_leave(void)
{
	in_api = 0;
	if (lock_held) {
		lock_held = 0;
		pthread_mutex_unlock(&api_lock);
	}
}

/*
** A stop's api_enter, and a start's: the thread is named (stop_tid) until the stop's file is
** closed (stop_leave, after on_stop), or the start is done. A terminating signal that
** interrupts it meanwhile is held by termstop.c and delivered again by stop_leave: the stop
** or start under way finishes its file, then the signal acts (before, it killed the process
** at once, the profile cut short). A
** signal's stop on termstop's thread, finding the lock held, waits for the name to go
** (agent_memprof_stop_wait). Named under the lock, so that whoever stops is the one named,
** with the signals blocked from the lock to the name: a signal in between would find the
** lock held and no stop named, and cut the profile.
*/
static int stop_enter(void)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = api_enter();
	if (rc == 0)
		atomic_store(&stop_tid, (long)syscall(SYS_gettid));
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* After a stop_enter's stop handed its buffer back (hand_back), or its start is done. */
static void stop_leave(void)
{
	atomic_store(&stop_tid, 0);
	agent_termstop_redeliver();
}

int agent_memprof_busy_in(lua_State *L)
{
	return in_api || agent_memprof_runs_in(L);
}

/* The writer, called with in_api set: a stop it makes (as a writer that stops at a size
 * might) is refused instead of tearing the profile down under the event or the epilogue
 * being written. Such a writer stops the profile by setting *data to NULL. */
static size_t call_writer(const void **data, size_t len, void *ctx)
{
	int outer = in_api;
	in_api = 1;
	size_t n = mp.writer(data, len, ctx);
	in_api = outer;
	return n;
}

/*
** The Lua names of C functions (cnames.c) for a stop with no Lua call to read them in (lua.c's
** stops do), as the CPU profiler's: from the VM's memory by the profile's model, when the
** VM's thread stands still: this one (exit's stop, from os.exit or C code on it) or one
** held in a terminating signal's handler (termstop.c). Not while it may run Lua code (exit
** or a signal's stop with that thread running): the tables could change under the reads.
** Checked reads, nothing allocated (termstop's thread may not wait for an allocator lock).
** 1 when it read them: the caller clears them after the stop (agent_cnames_clear).
*/
static int scan_cnames(void)
{
	if (mp.state == MP_IDLE || agent_cnames_ready() ||
	    (syscall(SYS_gettid) != mp.tid && !agent_termstop_holds(mp.tid)))
		return 0;
	agent_cnames_scan_vm(&mp.vm, &mp.checked, 1);
	return 1;
}

/* A profile still running at exit() (os.exit does not close the state, nor does a host
 * that never stops it): the stream is finished so that the file is complete. The VM is
 * still whole then; the allocator no longer matters. The VM's thread may still run (exit()
 * on another thread): sampled mode's rare paths are closed first (rare_close). */
static void at_exit(void)
{
	struct handback hb = { 0 };
	uint64_t run = agent_memprof_run_id();
	if (mp.state != MP_IDLE && stop_enter() == 0) {
		if (mp.state == MP_RUNNING && !in_own_path() &&
		    (mp.sample_bytes ? rare_close() : events_close()) != 0) {
			api_leave();
			agent_record_stopped(1, run, LUAPROF_PROFILE_ERRIO, EBUSY);
		} else {
			/* A light path may still write into the buffer (events_close): mapped. */
			if (!mp.sample_bytes)
				agent_pfile_keep_mapped();
			int cnames = scan_cnames();
			int rc = stop_profile(NULL, agent_termstop_pending() ? "signal" : "exit", &hb);
			if (cnames)
				agent_cnames_clear();
			api_leave();
			rc = hand_back(rc, &hb);
			agent_record_stopped(1, run, rc, errno);
		}
		stop_leave();
	}
	agent_termstop_exit(1);
}

int agent_memprof_signal_unsafe(void)
{
	return rare_busy != 0;
}

int agent_memprof_hold_signal(void)
{
	if (!rare_busy)
		return 0;
	rare_held = 1;
	return 1;
}

long agent_memprof_stop_tid(void)
{
	return atomic_load(&stop_tid);
}

static int stop_named(void)
{
	return atomic_load(&stop_tid) != 0;
}

int agent_memprof_stop_wait(uint64_t max_ns)
{
	return wait_while(stop_named, max_ns);
}

/* As at_exit, from termstop.c's thread. The API's lock is not waited for (the signal may
 * have stopped its holder for good); the file is closed (on_stop) before the maps are
 * freed, which may wait for an allocator lock the interrupted thread holds: the signal
 * then takes its course without that wait. The frees stay under the lock, so that no
 * start meets the maps being freed. */
int agent_memprof_stop_for_signal(void)
{
	struct handback hb = { 0 };
	uint64_t run = agent_memprof_run_id();
	if (rare_busy || mp.state == MP_IDLE || api_try_enter() != 0)
		return -1;
	int cnames = scan_cnames();
	int rc = stop_profile_keep(NULL, "signal", &hb, 1);
	if (cnames)
		agent_cnames_clear();
	int stopped = rc == LUAPROF_PROFILE_SUCCESS;
	rc = hand_back(rc, &hb);
	int e = errno;
	agent_termstop_written();
	if (stopped)
		free_run();
	api_leave();
	agent_record_stopped(1, run, rc, e);
	return 0;
}

void agent_memprof_stop_at_close(lua_State *L)
{
	struct handback hb = { 0 };
	uint64_t run = agent_memprof_run_id();
	if (stop_enter() == 0) {
		int rc = stop_profile(L, agent_termstop_pending() ? "signal" : "close", &hb);
		api_leave();
		rc = hand_back(rc, &hb);
		agent_record_stopped(1, run, rc, errno);
		stop_leave();
	}
}

/* The child of a fork(2) made while a thread of the parent held the lock (another thread,
 * or this one from inside the writer) has that lock held by no thread of its own: a new
 * one. (Taking the lock around fork instead would hang a fork made by a thread that an
 * on_stop waits for.) */
static void at_fork_child_api(void)
{
	api_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
	in_api = lock_held = 0;
	atomic_store(&stop_tid, 0); /* a stop on another thread of the parent */
	at_fork_child();
}

static void register_once(void)
{
	atexit(at_exit);
	pthread_atfork(NULL, NULL, at_fork_child_api);
}

/* Exact mode's side buffer: the stream bytes that are not events, carried as blobs. */
static uint8_t s_sym[8192];

/* The process may run on two CPUs or more: its affinity mask and its cgroup's quota (a
 * container's CPU limit) allow it. On one, a thread that encodes the events would take
 * that CPU from the program, and with the hand-overs costs it more than encoding them on
 * its own thread. */
static int spare_cpu(void)
{
	return lp_cpus_allowed() >= 2;
}

/*
** The stream: ljm into the caller's buffer, or, in exact mode when the writer is a profile
** file and a CPU is spare for its thread, raw events that the file encodes there (with the
** bytes that are not events carried in blobs from the side buffer).
*/
static void stream_init(const struct luaprof_memprof_options *opt)
{
	lp_wbuf_init(&mp.w, opt->buf, opt->len, call_writer, opt->ctx);
	mp.symw = &mp.w;
	/* Raw records are stored as aligned words (rawev.h): the file's buffer is. */
	mp.raw = !mp.sample_bytes && opt->writer == agent_pfile_write &&
		 (((uintptr_t)opt->buf | opt->len) & 7) == 0 &&
		 agent_pfile_threaded(opt->ctx) && spare_cpu() && agent_pfile_raw(opt->ctx) == 0;
	if (mp.raw) {
		lp_wbuf_init(&mp.sw, s_sym, sizeof(s_sym), blob_flush, NULL);
		mp.symw = &mp.sw;
	}
}

static int start_profile(lua_State *L, const struct luaprof_memprof_options *opt);

/* A start made inside another start or stop on this thread (a finalizer run by a collector
 * step that start itself set off, the writer) is refused as a start while running: it
 * would have started a profile that the outer call then overwrote or tore down. A failed
 * start hands the buffer back through on_stop, once the lock is released (api_lock).
 * The thread is named as a stop's is (stop_enter) until the start is done, its failure's
 * buffer handed back: a terminating signal meanwhile is held, then delivered again, and
 * stops a whole profile (its header and symbol table written, the allocator swapped) or
 * finds none. Before, termstop's stop found the lock held and the signal ended the
 * process at once, the start's file cut short (empty, or part of its symbol table). */
LUAPROF_API int luaprof_memprof_start(lua_State *L, const struct luaprof_memprof_options *opt)
{
	int rc, named = stop_enter() == 0;
	if (named)
		agent_termstop_newfile(NULL); /* a signal is held for the start from here */
	if (!named) {
		set_err("profiler is running already");
		rc = LUAPROF_PROFILE_ERRRUN;
	} else {
		rc = start_profile(L, opt);
		api_leave();
	}
	if (rc != LUAPROF_PROFILE_SUCCESS && opt && opt->on_stop) {
		int e = errno;
		if (opt->writer == agent_pfile_write)
			agent_pfile_refused(opt->ctx);
		opt->on_stop(opt->ctx, opt->buf);
		errno = e;
	}
	if (named) {
		int e = errno;
		stop_leave();
		errno = e;
	}
	return rc;
}

static int start_profile(lua_State *L, const struct luaprof_memprof_options *opt)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, register_once);
	api_err[0] = '\0';
	if (mp.state != MP_IDLE) {
		set_err("profiler is running already");
		return LUAPROF_PROFILE_ERRRUN;
	}
	if (!opt || !opt->writer || !opt->on_stop || !opt->buf ||
	    opt->len < LUAPROF_MEMPROF_BUF_MIN) {
		set_err("options need a writer, on_stop and a buffer of at least "
			"LUAPROF_MEMPROF_BUF_MIN bytes");
		return LUAPROF_PROFILE_ERRUSE;
	}
	/* As the Lua API and record take it: past 2^50 bytes no program allocates a sample. */
	if (opt->sample_bytes > (UINT64_C(1) << 50)) {
		set_err("sample_bytes %llu is above 2^50", (unsigned long long)opt->sample_bytes);
		errno = EINVAL;
		return LUAPROF_PROFILE_ERRUSE;
	}
	if (opt->sample_bytes && lp_stubenv_read(api_err, sizeof(api_err)) == LP_STUBENV_BAD) {
		errno = EINVAL;
		return LUAPROF_PROFILE_ERRUSE;
	}
	lp_mem_pid_init(&mp.checked, &mp.pid, getpid());
	if (lp_lj_detect(&mp.vm, &mp.checked, (uint64_t)(uintptr_t)L, api_err, sizeof(api_err)) !=
	    LP_LJ_OK) {
		agent_vm_explain(api_err, sizeof(api_err));
		return LUAPROF_PROFILE_ERRUSE;
	}
	mp.run_id++;
	mp.vmstate = (const int32_t *)(uintptr_t)(mp.vm.g + mp.vm.lay->g_vmstate);
	int anchored = agent_lua_memprof_anchor(L, mp.run_id);
	if (anchored == AGENT_LUA_CLOSING) {
		set_err("the Lua state is closing (its finalizers run): nothing would stop "
			"this profile");
		errno = EINVAL;
		return LUAPROF_PROFILE_ERRUSE;
	}
	if (anchored != 0) {
		set_err("not enough memory");
		errno = ENOMEM;
		return LUAPROF_PROFILE_ERRMEM;
	}
	mp.L = (lua_State *)(uintptr_t)mp.vm.mainL;
	mp.tid = (long)syscall(SYS_gettid);
	mp.writer = opt->writer;
	mp.on_stop = opt->on_stop;
	mp.ctx = opt->ctx;
	mp.buf = opt->buf;
	mp.io_errno = 0;
	mp.allocs = mp.frees = mp.reallocs = mp.alloc_bytes = mp.free_bytes = 0;
	mp.sample_bytes = opt->sample_bytes;
	mp.nlost = 0;
	mp.capture_ns = 0;
	mp.lookups = 0;
	mp.rare_calls = 0;
	mp.untracked = 0;
	mp.cut = 0;
	free_samples();
	if (mp.sample_bytes && native_acquire(L) != 0) {
		return LUAPROF_PROFILE_ERRUSE;
	}
	mp.rng = (agent_now_ns() ^ ((uint64_t)getpid() << 32)) | 1;
	free_maps();
	memset(proto_cache, 0, sizeof(proto_cache));
	pc_cache_clear();
	memset(proto_at, 0, sizeof(proto_at));
	memset(trace_seen, 0, sizeof(trace_seen));
	mp.trace_gen = 1;
	lp_uleb_fast_init();
	mp.seen.n = 0;
	stream_init(opt);

	/* Symbol table: the C functions of every loaded object and the VM's own block. */
	lp_write_symtab_prologue(mp.symw);
	agent_symtab_vm_block(mp.vm.vm_lo, mp.vm.vm_hi);
	agent_symtab_cfuncs(mp.symw, &mp.seen, AGENT_SYMS_SYMTAB);
	static const char begin[] = "lj_vm_asm_begin", ffi[] = "lj_vm_ffi_call";
	lp_write_sym_cfunc(mp.symw, mp.vm.vm_lo, begin, sizeof(begin) - 1);
	lp_write_sym_cfunc(mp.symw, mp.vm.vm_hi, ffi, sizeof(ffi) - 1);
	lp_write_symtab_final(mp.symw);
	lp_write_memprof_prologue_ext(mp.symw);
	sym_end();
	mp.adds = agent_objects_changes();
	if (!lp_wbuf_ok(&mp.w)) {
		int e = mp.w.flags & LP_WBUF_STOP ? ECANCELED
		      : mp.w.saved_errno ? mp.w.saved_errno : EIO;
		set_err("cannot write the profile: %s", strerror(e));
		free_maps();
		native_release_mp();
		errno = e;
		return LUAPROF_PROFILE_ERRIO;
	}
	agent_maps_reset(agent_running());
	agent_maps_note();
	nbuiltins = 0;
	if (!mp.sample_bytes)
		scan_builtins(L);
	mp.orig_f = lua_getallocf(L, &mp.orig_ud);
	unwrap(&mp.orig_f, &mp.orig_ud);
	/* The sampled stub is handed the original's ud, which it passes on as it came: its
	 * generated form where one can be made (allocstub.h: the same test, then a direct jump
	 * to the original instead of an indirect one). The compiled wrappers get their
	 * chain record. */
	int64_t *cd = mp.sample_bytes ? stub_countdown(mp.orig_f, mp.orig_ud, 1) : NULL;
	lua_Alloc f = !cd ? NULL
		    : agent_allocstub_get(mp.orig_f, cd, live_mark, LIVE_SHIFT, sampled_rare,
					  sampled_wrapper);
	void *ud = mp.orig_ud;
	struct chain *c = NULL;
	mp.stub = f != NULL;
	if (!f) {
		f = mp.sample_bytes ? sampled_wrapper : mp.raw ? wrapper_raw : wrapper_enc;
		c = chain_for(mp.orig_f, mp.orig_ud, mp.vm.g, mp.sample_bytes ? CHAIN_SAMPLED
							    : mp.raw ? CHAIN_RAW : CHAIN_ENC);
		ud = (void *)c;
		if (!c) {
			set_err("not enough memory");
			free_maps();
			native_release_mp();
			errno = ENOMEM;
			return LUAPROF_PROFILE_ERRMEM;
		}
		if (mp.sample_bytes)
			cd = &c->countdown;
	}
	mp.cd = cd;
	if (cd)
		*cd = next_interval();
	set_chain(mp.sample_bytes ? NULL : c); /* the sampled paths test orig and ud instead */
	mp.installed_f = f;
	mp.installed_ud = ud;
	mp.state = MP_RUNNING;
	mp.started_ns = agent_now_ns();
	mp.started_unix_ns = agent_unix_now_ns();
	lua_setallocf(L, f, ud);
	return LUAPROF_PROFILE_SUCCESS;
}

LUAPROF_API int luaprof_memprof_stop(lua_State *L)
{
	if (stop_enter() != 0) {
		set_err("stop called from inside the profiler (its writer, or a finalizer that "
			"start or stop ran); a writer stops it by setting *data to NULL");
		return LUAPROF_PROFILE_ERRUSE;
	}
	struct handback hb = { 0 };
	int rc = stop_profile(L, "program", &hb);
	api_leave();
	rc = hand_back(rc, &hb);
	int e = errno;
	stop_leave();
	errno = e;
	return rc;
}

static int stop_profile(lua_State *L, const char *cause, struct handback *hb)
{
	return stop_profile_keep(L, cause, hb, 0);
}

/* Calls on_stop for a stop that stopped a profile; the final result of that stop. */
static int hand_back(int rc, const struct handback *hb)
{
	if (!hb->on_stop)
		return rc;
	int e = hb->e;
	errno = 0;
	if (hb->on_stop(hb->ctx, hb->buf) != 0 && !e)
		e = errno ? errno : EIO;
	if (e) {
		set_err("cannot write the profile: %s", strerror(e));
		errno = e;
		return LUAPROF_PROFILE_ERRIO;
	}
	return LUAPROF_PROFILE_SUCCESS;
}

/* cause: meta stopped_by (program: an API call; exit; close: lua_close). On success, *hb
 * is what on_stop gets. */
/* keep: the maps, the shared sampler and sampled mode's tables are left for the caller to release (after
 * on_stop, termstop.c's stop). */
static int stop_profile_keep(lua_State *L, const char *cause, struct handback *hb, int keep)
{
	api_err[0] = '\0';
	if (mp.state == MP_IDLE) {
		set_err("profiler is not running");
		return LUAPROF_PROFILE_ERRRUN;
	}
	if (L && ld64((uint64_t)(uintptr_t)L + mp.vm.lay->l_glref) != mp.vm.g) {
		set_err("the profile runs in another Lua state");
		return LUAPROF_PROFILE_ERRUSE;
	}
	if (mp.state == MP_RUNNING)
		restore_allocator();
	set_chain(NULL); /* a wrapper left under another allocator records no more */
	countdown_disarm();
	int e = mp.io_errno;
	if (!e) {
		char events[32], dur[32], every[32], nsmp[32], lost[32], cap[32], look[32], ncut[32];
		char held[32];
		static char ffnames[8192];
		ffnames[0] = '\0';
		if (mp.sample_bytes)
			agent_vm_ffnames(ffnames, sizeof(ffnames));
		snprintf(every, sizeof(every), "%llu", (unsigned long long)mp.sample_bytes);
		snprintf(nsmp, sizeof(nsmp), "%llu", (unsigned long long)mp.nsampled);
		snprintf(lost, sizeof(lost), "%llu", (unsigned long long)mp.nlost);
		snprintf(held, sizeof(held), "%llu", (unsigned long long)mp.nsmp);
		char fkeys[32];
		snprintf(fkeys, sizeof(fkeys), "%llu", (unsigned long long)mp.freed.count);
		snprintf(cap, sizeof(cap), "%llu", (unsigned long long)mp.capture_ns);
		snprintf(look, sizeof(look), "%llu", (unsigned long long)mp.lookups);
		char rcalls[32], untracked[32];
		snprintf(rcalls, sizeof(rcalls), "%llu", (unsigned long long)mp.rare_calls);
		snprintf(untracked, sizeof(untracked), "%llu", (unsigned long long)mp.untracked);
		snprintf(ncut, sizeof(ncut), "%llu", (unsigned long long)mp.cut);
		snprintf(events, sizeof(events), "%llu", (unsigned long long)(mp.allocs + mp.frees + mp.reallocs));
		snprintf(dur, sizeof(dur), "%llu",
			 (unsigned long long)(agent_now_ns() - mp.started_ns));
		char start[32];
		snprintf(start, sizeof(start), "%llu",
			 (unsigned long long)mp.started_unix_ns);
		char cmdline[4096];
		agent_cmdline(cmdline, sizeof(cmdline));
#ifdef LP_MEMPROF_SELFCHECK
		char sc_events[32], sc_bad[32];
		snprintf(sc_events, sizeof(sc_events), "%llu", (unsigned long long)selfcheck_events);
		snprintf(sc_bad, sizeof(sc_bad), "%llu", (unsigned long long)selfcheck_bad);
		selfcheck_events = selfcheck_bad = 0;
#endif
#ifdef LP_UNWIND_SELFCHECK
		char usc_steps[32], usc_bad[32];
		agent_unwind_selfcheck(usc_steps, usc_bad);
#endif
		const char *meta[] = {
			"cmdline", cmdline,
			"mode", mp.sample_bytes ? "sampled" : "exact",
			"encoded_on", mp.sample_bytes ? "profiled thread"
				    : mp.raw ? "writer thread" : "profiled thread",
			"wrapper", mp.stub ? "generated" : "compiled",
			"events", events,
			"sample_bytes", every,
			"samples", nsmp,
			"samples_lost", lost,
			"samples_held", held,
			"samples_freed_keys", fkeys,
			"sample_ns", cap,
			"sample_lookups", look,
			"sample_rare_calls", rcalls,
			"samples_untracked", untracked,
			"truncated", ncut,
			"stopped_by", cause,
			"ffnames", ffnames,
			"duration_ns", dur,
			"start_unix_ns", start,
			"agent", "luaprof " AGENT_VERSION " in-process",
			"vm", mp.vm.lay->name,
#ifdef LP_MEMPROF_SELFCHECK
			"selfcheck_events", sc_events,
			"selfcheck_bad", sc_bad,
#endif
#ifdef LP_UNWIND_SELFCHECK
			"unwind_compact_steps", usc_steps,
			"unwind_compact_bad", usc_bad,
#endif
			NULL,
		};
		lp_write_memprof_epilogue(mp.symw);
		agent_write_extension(mp.symw, write_ext_records, meta,
				      agent_running());
		sym_end();
		lp_wbuf_flush(&mp.w);
		if (!lp_wbuf_ok(&mp.w))
			e = mp.w.flags & LP_WBUF_STOP ? ECANCELED
			  : mp.w.saved_errno ? mp.w.saved_errno : EIO;
	}
	mp.state = MP_IDLE;
	mp.L = NULL;
	/* The buffer goes with on_stop: nothing may write into it any more. An exact-mode
	 * event still under way on another thread (events_close) ends its record here. */
	static uint64_t scratch[16];
	mp.w.buf = mp.w.pos = mp.w.end = mp.pend = (uint8_t *)scratch;
	mp.w.flags |= LP_WBUF_STOP;
	if (!keep)
		free_run();
	*hb = (struct handback){ mp.on_stop, mp.ctx, mp.buf, e };
	return LUAPROF_PROFILE_SUCCESS;
}

int agent_memprof_ffid_offset(void)
{
	return mp.state != MP_IDLE && mp.vm.lay ? mp.vm.lay->fn_ffid : -1;
}

LUAPROF_API int luaprof_memprof_report(struct luaprof_memprof_counters *c)
{
	if (!c)
		return LUAPROF_PROFILE_ERRUSE;
	c->events = mp.allocs + mp.frees + mp.reallocs;
	c->samples = mp.nsampled;
	c->allocs = mp.allocs;
	c->frees = mp.frees;
	c->reallocs = mp.reallocs;
	c->alloc_bytes = mp.alloc_bytes;
	c->free_bytes = mp.free_bytes;
	return LUAPROF_PROFILE_SUCCESS;
}
