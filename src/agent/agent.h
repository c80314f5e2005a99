/*
** In-process agent: internal interfaces between the profiler core, the VM sampler, the
** host unwinder and the stream helpers.
**
** Everything here is compiled into build/luaprof.so with -fvisibility=hidden; only
** include/luaprof.h is exported.
*/
#ifndef LP_AGENT_H
#define LP_AGENT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <ucontext.h>

#include "agent/tcodes.h"
#include "luaprof.h"
#include "stream/parse.h"
#include "stream/wbuf.h"
#include "util/iset.h"

#define AGENT_VERSION "0.1.0"

/* A clock's reading in ns, 0 when it cannot be read (a CPU-time clock of a thread that has
 * exited). Async-signal-safe. */
static inline uint64_t agent_clock_ns(clockid_t c)
{
	struct timespec ts;
	if (clock_gettime(c, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC in ns (async-signal-safe). */
static inline uint64_t agent_now_ns(void)
{
	return agent_clock_ns(CLOCK_MONOTONIC);
}

/* The Unix time in ns, read at start for the streams' start time (not derived from the
 * monotonic clock at stop: that one stops while the machine is suspended). */
static inline uint64_t agent_unix_now_ns(void)
{
	return agent_clock_ns(CLOCK_REALTIME);
}

/* Depth limits of one sample: deeper stacks keep their innermost frames and are counted
 * as truncated. They bound the size of an encoded sample (AGENT_SAMPLE_MAX). */
#define AGENT_MAX_LUA   512
#define AGENT_MAX_HOST  256
/* Coroutines followed from the sampled one out to the main thread (resumed by builtins:
 * recursive generators nest one per level); a sample nested deeper is cut there. */
#define AGENT_MAX_RESUMES 128
/* Symbols a sample may introduce (functions first seen by the sampler). Their chunk names
 * share AGENT_NAMES_MAX bytes a sample (at most, see agent_sample.name_room): a name that
 * does not fit waits for a later sample, which has the room to itself; one longer than the
 * whole room is cut there. AGENT_NAME_MAX bounds the C symbols' names (elfsyms.c). */
#define AGENT_MAX_NEWSYMS 32
#define AGENT_NAMES_MAX   (64u << 10)
#define AGENT_NAME_MAX    512
/* Upper bound of one encoded sample without its symbols:
 * header + Lua frames (1 + 10 + 10 each) + 0x80 + host frames (10 each) + 0. */
#define AGENT_SAMPLE_MAX (1 + AGENT_MAX_LUA * 21 + 1 + AGENT_MAX_HOST * 10 + 10 + 64)
/* And of its symbols, but for the names' bytes: per symbol 1 + 10 + (10 + name) + 10. */
#define AGENT_SYMS_FIXED (AGENT_MAX_NEWSYMS * 31)

/* Register numbers of a native frame, as libunwind's UNW_X86_64_* (checked in unwind.c). */
enum {
	AGENT_RAX, AGENT_RDX, AGENT_RCX, AGENT_RBX, AGENT_RSI, AGENT_RDI, AGENT_RBP, AGENT_RSP,
	AGENT_R8, AGENT_R9, AGENT_R10, AGENT_R11, AGENT_R12, AGENT_R13, AGENT_R14, AGENT_R15,
	AGENT_RIP, AGENT_NREGS
};

/* -- What the VM sampler hands to the core (filled inside the signal handler) ----- */

struct agent_sym {
	uint8_t event;      /* LP_SYSPROF_SYM_LFUNC or LP_SYSPROF_SYM_TRACE */
	uint64_t addr;      /* proto address (LFUNC), start proto (TRACE) */
	uint64_t line;      /* first line (LFUNC), start line (TRACE) */
	uint64_t traceno;   /* TRACE */
	const char *name;   /* LFUNC chunk name, in the sampler's static storage */
	size_t len;
};

struct agent_sample {
	uint8_t vmstate;                      /* enum lp_vmstate, 0..9 */
	size_t nlua;                          /* Lua frames, innermost first */
	struct lp_lua_frame lua[AGENT_MAX_LUA];
	int lua_truncated;                    /* the Lua stack went deeper than AGENT_MAX_LUA */
	uint64_t traceno, trace_proto, trace_line; /* vmstate == LP_VMST_TRACE */
	size_t nsyms;                         /* symbols to emit before the sample */
	struct agent_sym syms[AGENT_MAX_NEWSYMS];
	/* The bytes the symbols' names may take (set by the caller, at most AGENT_NAMES_MAX:
	 * what the stream's buffer holds beside the rest of the sample), and have taken. */
	size_t name_room, name_used;
	/* The traces the sample names (their symbols queued or written before): their frames
	 * in its host stack are keyed (agent_vm_key_trace_code). */
	size_t ncodes;
	struct agent_tcode_id codes[4];
	/* The VM's state runs on another thread's C stack than the one sampled (the thread
	 * that started the profile): the sample is the host stack alone (agent_vm_sample). */
	int elsewhere;
};

/* -- VM sampler (vmsample.c): the only part that knows LuaJIT's memory layout --------- */

/*
** Detects and validates the VM that L belongs to, outside the handler. Returns 0, or -1
** with a one-line reason in err ("unsupported LuaJIT build (...)").
*/
int agent_vm_attach(struct lua_State *L, char *err, size_t errlen);
/* After a refused detection: replaces err with a plainer reason when the process has no
 * LuaJIT at all (a PUC Lua host). */
void agent_vm_explain(char *err, size_t errlen);
void agent_vm_detach(void);
int agent_vm_attached(void);
/* 1 if the sampler is attached to L's VM. The CPU profiler and memprof's sampled mode
 * share one sampler, so they must profile the same VM. */
int agent_vm_attached_to(struct lua_State *L);
/*
** Outside the handler, on the VM thread, with the handler's signal blocked (memprof's
** sampled mode): prepares agent_vm_frame for a walk of the current native stack of thread
** L in VM state vmstate (its interpreter C frames; the running trace when vmstate > 0).
*/
void agent_vm_prepare_walk(uint64_t L, int32_t vmstate);

/*
** Called in the signal handler with the interrupted context. Fills s for the mode
** (LUAPROF_SYSPROF_DEFAULT: vmstate only; _LEAF: plus the innermost Lua frame; _CALLGRAPH:
** plus every Lua frame). Returns 0, or -1 when the VM state cannot be read safely (the
** sample is then dropped, never guessed).
*/
int agent_vm_sample(const ucontext_t *uc, int mode, struct agent_sample *s);
/* After agent_vm_sample: the sample did not go into the stream (its symbols are
 * forgotten, so that the next sample that needs them writes them: a dropped sample's
 * symbols were named in no stream). Async-signal-safe. */
void agent_vm_sample_dropped(const struct agent_sample *s);
/* In the handler once the host walk is done (C mode): host[0, n)'s frames in the code of
 * the traces s names, as keyed addresses (tcodes.h), for the kcode records
 * (agent_vm_tcodes_write). Async-signal-safe. */
void agent_vm_key_trace_code(const struct agent_sample *s, uint64_t *host, size_t n);

/*
** In the handler after the host walk (C mode, or L mode's walk to the first VM frame):
** the Lua frames of a sample in C code the interpreter called, as mode wants them, when
** the walk's registers at the VM frame show them valid (see vmsample.c). Returns 1 when
** it filled them in s and set s->vmstate to LFUNC, FFUNC or CFUNC; 0 when s stays as
** agent_vm_sample left it. agent_vm_helper_pending: agent_vm_sample left such a sample.
*/
int agent_vm_sample_helper(struct agent_sample *s, int mode);
int agent_vm_helper_pending(void);
/*
** In the handler after the host walk (C mode; with a host's backtracer too): the trace
** whose machine code the walk met is named (a symbol event, and its code's extent for
** agent_vm_tcodes_write); a GC sample keeps its Lua frames only when the walk met that
** thread's Lua code, and one whose step a trace ran gets the trace's start line for its
** innermost Lua frame (the trace stored no PC there).
*/
void agent_vm_after_walk(struct agent_sample *s);
/* At stop, after the last sample: the extension's kcode records, one per trace whose
 * machine code the samples met since attach. */
void agent_vm_tcodes_write(struct lp_wbuf *w);
/*
** After the host walk of a sample with Lua frames, or of a memprof capture in a C function:
** drops from its host stack pcs[0..n) the return address of each VM entry the walk met
** that runs no Lua frame of the sample (a builtin's protected call of C, the JIT
** compiler's), which the report would take for the entry of a Lua segment. Returns the
** new count.
*/
size_t agent_vm_omit_empty(uint64_t *pcs, size_t n);
/* After agent_vm_prepare_walk: the thread's C frames include a VM entry without Lua frames
 * (the walk must then meet every frame: no suffix reuse). */
int agent_vm_expects_empty(void);

/*
** This build's fast-function names in id order, separated by spaces ("-" for an unnamed
** id), for the extension's meta "ffnames": the stream itself carries builtins by id only.
*/
void agent_vm_ffnames(char *buf, size_t len);
/* The detected build, e.g. "Debian luajit 2.1.0~beta3+git20220320 (x86_64 GC64)". */
const char *agent_vm_name(void);

/* Writes symtab entries for the VM's own code (outside the handler). */
void agent_vm_symbols(struct lp_wbuf *w);

/* The host walk's leaf at lj_vm_ffi_call's entry or its `ret`, where the VM's unwind entry
 * for it is wrong: steps regs (AGENT_* indices) to the caller and returns 1; else 0. */
int agent_vm_ffi_call_edge(uint64_t ip, uint64_t *regs);

/*
** Unwinder hook, in the handler after agent_vm_sample: decides how to step the native
** frame at ip, with the frame's registers in regs (indexed by AGENT_R*; in_object: ip
** lies in a loaded object's text). Returns 0 when the object's DWARF unwind table applies;
** 1 when it stepped the frame itself and left the caller's ip, sp and callee-saved
** registers in regs (JIT trace code: CFA = sp + CFRAME_SIZE_JIT + spadjust; a helper the
** interpreter called at the end of its code block); -1 when the frame cannot be stepped
** safely (the walk ends there).
*/
int agent_vm_frame(uint64_t ip, uint64_t *regs, int in_object);
/* 1 when agent_vm_frame may do more than return 0 for this frame (the interpreter's block
 * or code outside any object): only then does it need the registers. */
int agent_vm_frame_special(uint64_t ip, int in_object);
/* Frames a cached walk copied from an earlier one (ips and their stack pointers, innermost
 * first), which agent_vm_frame did not see: what the confirmation of a coroutine's C
 * resumer (agent_vm_c_resumer_confirmed) needs to know of them. */
void agent_vm_frames_copied(const uint64_t *ips, const uint64_t *sps, size_t n);
/* After the walk that agent_vm_prepare_walk prepared: how many of the threads taken for
 * the C code that resumed the walked coroutine, and in turn for the C code that resumed
 * those (lp_lj_c_resumer, innermost first), the walk confirmed: it came to each one's
 * interpreter at its C frame, through VM code at known C frames only. */
unsigned agent_vm_c_resumer_confirmed(void);
/* After that walk: 1 and the first trace whose code it stepped through (the trace that ran
 * the collector's step, or called the C code, the walk started in), else 0. */
int agent_vm_walk_trace(struct lp_lj_trace *t);

/* -- Host unwinder (unwind.c) --------------------------------------------------------- */

/* Loads and primes libunwind on the calling (sampled) thread, after agent_objects_init
 * (objects.h). Returns 0 or -1 with a message. */
int agent_unwind_init(char *err, size_t errlen);

/*
** In the handler: the host stack of the interrupted context, innermost first (pcs[0] is
** the interrupted instruction). Returns the number of frames; *truncated is set when the
** walk stopped at max frames.
*/
size_t agent_unwind(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated);
/* The same, outside the handler, on the VM thread with the handler's signal blocked:
 * stepping through a cache of unwind rules kept by this module (no libunwind lock, no
 * system call per frame). reuse: the frames below one of a recent walk are copied from it
 * (agent_vm_frame does not see them). */
size_t agent_unwind_cached(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated,
			   int reuse);
/* What takes the registers of the calling frame for agent_unwind_cached: libunwind's
 * getcontext, which (unlike libc's) makes no system call for the signal mask; libc's
 * before agent_unwind_init. Call the result from the frame the walk starts in: a frame
 * that has returned is not on the stack any more. */
typedef int (*agent_getcontext_fn)(ucontext_t *uc);
agent_getcontext_fn agent_unwind_getcontext(void);
/* Writer thread: learns the unwind rules of the addresses the handler's walks stepped
 * without one, so that later walks take the cheap path. */
void agent_unwind_learn(void);
/* Writer thread, after it refreshed the objects table: the rules of the objects unloaded
 * or replaced are dropped now (until then the handler uses none). */
void agent_unwind_objects_changed(void);
#ifdef LP_UNWIND_SELFCHECK
/* Test build: the steps taken by a compact rule since the last call, and how many of them
 * libunwind's step by the same rule disagreed with, in decimal for a profile's meta (both
 * counts then start again). */
void agent_unwind_selfcheck(char steps[32], char bad[32]);
#endif
/* Handler: asks the CPU profiler's writer thread for a round now (async-signal-safe). */
void agent_writer_wake(void);

/* -- Symbols and mappings (elfsyms.c, maps.c) ----------------------------------------- */

/* The loaded objects already named in one stream. */
#define AGENT_MAX_OBJS 1024
/* The objects a stream has named: those loaded at the last walk (key), and the walk's own
 * (now). An object is keyed by its program headers' address and its name, so that one
 * loaded where an unloaded one was is named anew, and one unloaded and loaded again too. */
struct agent_objseen {
	uint64_t key[AGENT_MAX_OBJS];
	size_t n;
	uint64_t now[AGENT_MAX_OBJS];
	size_t nnow;
};

enum { AGENT_SYMS_SYMTAB, AGENT_SYMS_SYSPROF, AGENT_SYMS_MEMPROF, AGENT_SYMS_SIZES };

/*
** Writes an entry for every named function symbol of the loaded objects (ELF .symtab,
** else the .symtab of a separate debug file, else .dynsym; the vDSO from memory): with AGENT_SYMS_SYMTAB, symtab entries for all of
** them (and `seen` starts afresh); with AGENT_SYMS_SYSPROF / _MEMPROF, mid-stream symbol
** events for the objects not in `seen` yet (loaded while profiling). Not for the handler.
*/
void agent_symtab_cfuncs(struct lp_wbuf *w, struct agent_objseen *seen, int kind);
/* The VM's interpreter block [lo, hi] and the FFI call routine at hi, which the profilers
 * name themselves: the functions there are not named "object+0xoffset" from the unwind
 * table. Set before the symbols are written (the same for every state: code, not data). */
void agent_symtab_vm_block(uint64_t lo, uint64_t hi);
/* Writes the extents of those symbols as lpx csize records (objects loaded now). */
void agent_symtab_csizes(struct lp_wbuf *w);
/* The dynamic loader's count of objects ever loaded and unloaded (dlpi_adds + dlpi_subs):
 * changes when one is. */
unsigned long long agent_objects_changes(void);

/* Records the executable mappings of /proc/self/maps (with build-ids) seen now; the
 * extension lists every mapping recorded since the last reset. The record is shared by the
 * two profilers (the CPU profiler's writer thread notes objects as they are loaded, the
 * memory profiler notes them on the VM's thread), under a lock: a profiler resets it only
 * when the other does not run (other_running 0), so neither wipes what the other saw. */
void agent_maps_reset(int other_running);
void agent_maps_note(void);
/* Writes the lpx extension: the recorded mappings and the current ones, C symbol sizes,
 * the meta records given as NULL-terminated key/value pairs, then the records `extra`
 * writes (if not NULL); then resets the record as agent_maps_reset(other_running). */
/* Lua names of C functions (cnames.c). agent_cnames_scan: on L's thread, from inside a C
** function or a finalizer of L (the VM runs no Lua code), collects package.loaded's names
** of C functions for the extension this thread writes next (agent_cnames_write, from
** agent_write_extension); agent_cnames_clear forgets them. */
void agent_cnames_scan(struct lua_State *L);
void agent_cnames_write(struct lp_wbuf *w);
void agent_cnames_clear(void);
/* The same names read from the VM's memory by its model, for a stop with no Lua call to
 * run in, while the VM's thread stands still and no sample is taken (cnames.c); allocates
 * nothing. memory: the memory profiler's stop (each profiler has a store of its own).
 * agent_cnames_ready: this thread has names for its next extension. */
struct lp_lj_vm;
struct lp_mem;
void agent_cnames_scan_vm(const struct lp_lj_vm *vm, const struct lp_mem *m, int memory);
int agent_cnames_ready(void);
/* agent_cnames_scan_vm on the sampler's VM, if attached: with the CPU profiler's handler
 * done (its page cache is used), while the VM's thread stands still. */
void agent_vm_cnames_scan(void);
/* Offset of GCfunc.ffid in the attached VM (the sampler's, the memory profile's), or -1. */
int agent_vm_ffid_offset(void);
int agent_memprof_ffid_offset(void);
void agent_write_extension(struct lp_wbuf *w, void (*extra)(struct lp_wbuf *w),
			   const char *const *meta, int other_running);

/* -- Distinct stacks for the extension (stackdict.c) ------------------------------------ */

struct agent_stackdict {
	uint8_t *body;                      /* the bodies, back to back */
	size_t nbody, bodycap;
	struct agent_stackent { size_t off, len; unsigned tag; } *ent; /* by id */
	size_t nent, entcap;
	struct lp_iset index;
};

/* The id of body (an encoded "lua-stack host-stack") with tag, added if new; -1 when it is
 * new and would take the dictionary past max_bytes, or without memory. Not for the
 * handler. The tag is part of the key, not of the record written: one body under two tags
 * (a stack the compiler's RECORD and ASM phases both allocate at) gets two ids, which
 * records of their own (astate) tell apart. */
int agent_stackdict_intern(struct agent_stackdict *d, const uint8_t *body, size_t len,
			   unsigned tag, size_t max_bytes, uint32_t *id);
/* One extension stack record (04) per entry, in id order. */
void agent_stackdict_write(const struct agent_stackdict *d, struct lp_wbuf *w);
/* Entry id's stack record alone (id < d->nent). */
void agent_stackdict_write_one(const struct agent_stackdict *d, struct lp_wbuf *w, size_t id);
/* Frees and empties the dictionary (a zeroed one is empty too). */
void agent_stackdict_free(struct agent_stackdict *d);

/* -- Full stacks of TRACE, GC, JIT compiler and trace exit samples (tstacks.c) ---------- */

/* Which samples a record's ordinal counts: its first byte (JIT: RECORD, OPT and ASM). */
enum { AGENT_TSTACK_TRACE, AGENT_TSTACK_GC, AGENT_TSTACK_JIT, AGENT_TSTACK_EXIT,
       AGENT_TSTACK__MAX };

/* Before sampling (allocates the ring): 0 or -1. */
int agent_tstacks_init(void);
void agent_tstacks_free(void);
/*
** Handler: queues one record: its kind (AGENT_TSTACK_*, a byte), the sample's ordinal
** among the samples of that kind (ULEB128), then its "lua-stack host-stack" body. Returns
** 0, 1 when the writer thread should be woken (the ring is over half full), or -1 when it
** did not fit (counted as lost).
*/
int agent_tstacks_put(const uint8_t *rec, size_t len);
/* Writer thread: moves queued records into the dictionary. */
void agent_tstacks_drain(void);
/* After the last drain: the extension's stack, tsample, gsample and jsample records. */
void agent_tstacks_write(struct lp_wbuf *w);
/* TRACE samples that keep only their trace frame, GC and compiler samples that keep only
 * their host stack (ring full, dictionary cap). */
uint64_t agent_tstacks_lost(void);

/* The process's command line, arguments joined by spaces, into buf. */
void agent_cmdline(char *buf, size_t len);

/* The CPU profiler runs and samples another thread than this one: its handler
 * may walk stacks at any moment, over the walker state a walk from this thread would
 * use (a Lua state its host moved to another thread since the profile started). */
int agent_sampling_elsewhere(void);

/* Blocks the CPU profiler's signal on this thread (if installed), saving the mask in old;
 * returns 1 if it blocked (restore with pthread_sigmask(SIG_SETMASK, old, NULL)). */
int agent_block_signal(sigset_t *old);

/* -- Memory profiler (memprof.c), used by the Lua binding ------------------------------ */

/* A memory profile runs in L's VM (L is only read). */
int agent_memprof_runs_in(struct lua_State *L);
/* The same, or the calling thread is inside a start or stop (a finalizer that start's own
 * allocations ran): a start refused now was refused for L's own profile. */
int agent_memprof_busy_in(struct lua_State *L);
int agent_memprof_running(void);
/* The VM of the profile being started has its FFI state (g->ctype_state): loading the
 * FFI again would reset it. */
int agent_memprof_ffi_loaded(void);
/* L is closing (its memory sentinel's finalizer runs, before the heap is freed): a wrapper
 * of this profiler left as its allocator after its profile stopped (put back by a host
 * that had installed an allocator over it) is replaced by the allocator it wraps, so that
 * lua_close still destroys LuaJIT's own arena. */
void agent_memprof_closing(struct lua_State *L);
/* Stops the memory profile of L because L is closing (meta stopped_by: close). */
void agent_memprof_stop_at_close(struct lua_State *L);
/* memprof's sampled mode holds the VM sampler and the objects table (shared with sysprof). */
int agent_memprof_uses_native(void);
uint64_t agent_memprof_run_id(void);
/* A stop at exit or at lua_close of profile run_id (memory: of the memory profiler) ended
 * with rc and errno e: if that is the profile `luaprof record` asked for (LUAPROF_RECORD)
 * and it could not be written, says so on standard error (nobody else sees the result;
 * record names the file). */
void agent_record_stopped(int memory, uint64_t run_id, int rc, int e);
/* termstop.c: under `luaprof record`, a CPU or (memory) memory profile is finished before
 * the program dies of a terminating signal left at its default action (SIGTERM, SIGHUP,
 * SIGINT, SIGQUIT, SIGPIPE, and a crash's: SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT;
 * stopped_by "signal"). Once per process, on the thread that started the profile, after
 * it started; 0, or -1 when it cannot (no thread). */
int agent_termstop_arm(int memory);
/* The terminating signal a handler of this process took and has yet to raise (the
 * profile's stop under way, or waited for), or 0: a stop at exit or lua_close then says
 * the signal stopped the profile. */
int agent_termstop_pending(void);
/* The end of the exit handler of the memory profiler (memory) or the CPU one: a signal
 * pending as above takes its course now, once termstop's stop is done (the process ends
 * of it), not ended by exit's status. */
void agent_termstop_exit(int memory);
/* 1 when thread tid waits in the terminating signal's handler for termstop's stop to write
 * the file (it runs nothing else until then). */
int agent_termstop_holds(long tid);
/* The terminating signals it arms for that are sent, not a fault's nor abort()'s (SIGTERM,
 * SIGHUP, SIGINT, SIGQUIT, SIGPIPE), in *set: those a start may hold back until it arms. */
void agent_termstop_sent(sigset_t *set);
/* The stop's file is written and closed: the signal takes its course without waiting
 * for the frees that follow, which take the allocator's locks, held for good when the
 * signal interrupted malloc (a 10 s wait). From the profilers' stops, after on_stop;
 * nothing unless termstop.c's stop is under way, or a terminating signal interrupted this
 * thread's stop of a CPU profile: that signal is taken here (the process ends). */
void agent_termstop_written(void);
/* A terminating signal that interrupted this thread's stop of a CPU profile is taken now
 * (the stop found nothing to stop after all); nothing if there is none. */
void agent_termstop_deferred(void);
/* A terminating signal held while this thread started or stopped the memory profile (or
 * started the CPU profile), or was in its wrapper's rare or general path, is delivered
 * again now, to the handler (which stops the profile if one still runs, then lets the
 * signal take its course); nothing if there is none. From memprof.c and sysprof.c, once
 * the start is done, the stop's file closed or the path left. */
void agent_termstop_redeliver(void);
/* The file at path that agent_pfile_open has just made for a start of the Lua API, until
 * the start names its thread (from there a terminating signal is held for the start, and
 * a refused start removes the file: agent_pfile_refused): a signal that takes its course
 * meanwhile removes it (it left it empty). NULL: none any more (the start named its
 * thread or returned, or the open failed). */
void agent_termstop_newfile(const char *path);
/* memprof.c, for termstop.c: 1 while the wrapper is in its rare or general path on this
 * thread (a stop now would meet its tables or a record half changed); and the stop itself,
 * from another thread while the profile's is held in a signal handler (-1: no profile,
 * the API's lock held, or in the middle of such a path). */
int agent_memprof_signal_unsafe(void);
int agent_memprof_stop_for_signal(void);
/* In the handler (async-signal-safe): 1 when this thread is in such a path, which then
 * delivers the signal again as it leaves it (agent_termstop_redeliver); else 0. */
int agent_memprof_hold_signal(void);
/* The thread of a stop of the memory profile (the program's, exit's, lua_close's) that
 * has not closed its file yet, or of a start not yet done (0: none; async-signal-safe): a
 * terminating signal that interrupts it is delivered again once the file is closed, or
 * the start's header written and the allocator swapped. agent_memprof_stop_wait
 * waits up to max_ns for that to be none (0, or -1 after max_ns). */
long agent_memprof_stop_tid(void);
int agent_memprof_stop_wait(uint64_t max_ns);
/* lua.c: anchors the finalizer that stops the memory profile before lua_close frees the
 * heap (0, -1 without memory, or AGENT_LUA_CLOSING). */
int agent_lua_memprof_anchor(struct lua_State *L, uint64_t run_id);
/* The anchors' answer when the state is closing: its sentinel's finalizer has run (a
 * finalizer of the program's own starts a profile during lua_close), so nothing would stop
 * a profile started now before the heap is freed. */
#define AGENT_LUA_CLOSING (-2)

/* -- Core (sysprof.c), used by the Lua binding ---------------------------------------- */

/*
** The agent's own work on the sampled thread begins (on = 1) or ends (0): the CPU
** profiler's handler counts its ticks (meta agent_ticks) instead of sampling them, as
** they are not the program's time (agent_cnames_scan's walk of package.loaded at
** lua_close, say). Marks the calling thread: on another than the one sampled it changes
** nothing. Not nested.
*/
void agent_sysprof_own_work(int on);

/*
** Starts with explicit callbacks (the Lua API passes its file writer; the C API the
** configured ones). Same contract as luaprof_sysprof_start.
*/
int agent_start(struct lua_State *L, const struct luaprof_sysprof_options *opt,
		luaprof_sysprof_writer writer, luaprof_sysprof_on_stop on_stop);
/* Stops whatever runs, from any thread, without a lua_State (VM close, exit, a terminating
 * signal); cause is the stream's meta stopped_by ("close", "exit", "signal"). */
int agent_stop_any(const char *cause);
/* The thread of a stop under way that has not written its file yet, or of a start not yet
 * done (0: none); async-signal safe. agent_stop_wait waits up to max_ns for that to be none (0, or -1 after max_ns). */
long agent_stop_tid(void);
int agent_stop_wait(uint64_t max_ns);
/* How long a stop on another thread is waited for (a terminating signal's, at exit): one that
 * takes longer cannot finish (a lock the interrupted thread holds). */
#define AGENT_STOP_WAIT_NS 5000000000ull
/* The run id of the current (or last) profile; identifies the profiled VM. */
uint64_t agent_run_id(void);
int agent_running(void);

/* Lua module: the sentinel that stops the profile when its VM closes (0, -1 without
 * memory, or AGENT_LUA_CLOSING). */
int agent_lua_anchor(struct lua_State *L, uint64_t run_id);

#endif
