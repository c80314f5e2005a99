/*
** luaprof agent: C API of the in-process CPU and memory profilers for stock LuaJIT 2.1.
**
** The shape and the return codes are those of Tarantool's luaM_sysprof_* (lmisclib.h), so
** an embedder written for Tarantool's LuaJIT ports by renaming. The same profiler is
** reachable from Lua as require("luaprof").sysprof (and misc.sysprof when the host has
** none). There is one profiler per process, profiling one VM at a time, sampling the OS
** thread that called luaprof_sysprof_start.
**
** Sampling uses the agent's own POSIX timer and a real-time signal (never SIGPROF, so
** LuaJIT's jit.p keeps working alongside). The signal handler allocates nothing, takes
** no locks and writes complete samples into a double buffer that a writer thread drains
** through the writer callback; a sample that cannot be taken safely or that finds both
** halves full is counted as dropped.
**
** The API is exported by the agent, luaprof.so: link with -l:luaprof.so (libluaprof.a holds
** the stream reader and reports only).
**
** Stream written in LUAPROF_SYSPROF_LEAF / _CALLGRAPH modes: symtab "ljs" v3, sysprof
** "ljp" v2 (both byte-compatible with Tarantool's), then the luaprof extension "lpx" v1
** (mapped objects, command line, interval) - docs/FORMAT.md.
*/
#ifndef LUAPROF_H
#define LUAPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define LUAPROF_API __attribute__((visibility("default")))
#else
#define LUAPROF_API
#endif

struct lua_State;

/* -- Return codes (as Tarantool's PROFILE_*) -------------------------------- */

#define LUAPROF_PROFILE_SUCCESS 0
#define LUAPROF_PROFILE_ERRUSE  1 /* bad options, unconfigured, or another VM's profiler */
#define LUAPROF_PROFILE_ERRRUN  2 /* start: already running; stop: not running */
#define LUAPROF_PROFILE_ERRMEM  3 /* out of memory while setting up */
#define LUAPROF_PROFILE_ERRIO   4 /* the writer failed or asked to stop; errno is set */

/* -- Modes ------------------------------------------------------------------ */

#define LUAPROF_SYSPROF_DEFAULT   0 /* "D": per-VM-state counters only, no stream */
#define LUAPROF_SYSPROF_LEAF      1 /* "L": counters + innermost host and Lua frame */
#define LUAPROF_SYSPROF_CALLGRAPH 2 /* "C": counters + full host and Lua stacks */

/* -- Clocks (luaprof extension) --------------------------------------------- */

#define LUAPROF_CLOCK_CPU  0 /* CPU time of the sampled thread (default) */
#define LUAPROF_CLOCK_WALL 1 /* wall-clock time (CLOCK_MONOTONIC): also samples while
                                the thread is off-CPU, e.g. blocked in a system call */

/*
** The buffer given in the options is split into two halves used as a double buffer;
** it must hold at least this many bytes, so that any one sample fits in a half.
*/
#define LUAPROF_SYSPROF_BUF_MIN (64 * 1024)

/*
** Writer: consumes len bytes at *data and returns how many it wrote. A short count is an
** I/O error (errno as the writer left it is kept); setting *data to NULL asks the profiler
** to stop (errno ECANCELED). Either way sampling stops and luaprof_sysprof_stop returns
** LUAPROF_PROFILE_ERRIO. The agent double-buffers itself: any other change to *data is
** ignored. Called from the thread that starts or stops the profiler (symbol table,
** epilogue) and from the agent's writer thread (samples), never from the signal handler
** and never concurrently with itself.
*/
typedef size_t (*luaprof_sysprof_writer)(const void **data, size_t len, void *ctx);

/*
** Called once when a profile ends - by luaprof_sysprof_stop, when the profiled VM is
** closed while running (lua_close), at process exit - and, as in Tarantool, whenever
** luaprof_sysprof_start fails, with that call's ctx and buf, so the caller's resources can
** be released. Returns 0 on success; non-zero makes stop return LUAPROF_PROFILE_ERRIO.
*/
typedef int (*luaprof_sysprof_on_stop)(void *ctx, uint8_t *buf);

/*
** Host stack backtracer, called from the signal handler in CALLGRAPH mode: it must be
** async-signal-safe. It calls frame_writer(frame_no, addr) for each frame from the
** innermost outwards and stops when frame_writer returns NULL. Frames that belong to the
** signal handler itself are recognised by the agent and skipped (the interrupted
** instruction pointer marks where the sampled stack starts), so the backtracer may simply
** unwind from where it is. NULL restores the default: libunwind on a checked memory
** reader, stepping JIT trace frames by the VM's frame rule.
*/
typedef void (*luaprof_sysprof_backtracer)(void *(*frame_writer)(int frame_no, void *addr));

struct luaprof_sysprof_options {
	uint8_t mode;         /* LUAPROF_SYSPROF_DEFAULT / _LEAF / _CALLGRAPH */
	uint64_t interval;    /* sampling interval in ms, >= 1 (ignored if interval_ns) */
	uint8_t *buf;         /* stream buffer (LEAF / CALLGRAPH), >= LUAPROF_SYSPROF_BUF_MIN */
	size_t len;           /* its size in bytes */
	void *ctx;            /* passed to the writer and to on_stop */
	/* luaprof extensions; zero means the default. */
	uint8_t clock;        /* LUAPROF_CLOCK_CPU (default) or LUAPROF_CLOCK_WALL */
	uint64_t interval_ns; /* when non-zero, the interval in ns (>= 100000) */
};

/* Samples per VM state, in Tarantool's order; samples is their sum. */
struct luaprof_sysprof_counters {
	uint64_t vmst_interp;
	uint64_t vmst_lfunc;
	uint64_t vmst_ffunc;
	uint64_t vmst_cfunc;
	uint64_t vmst_gc;
	uint64_t vmst_exit;
	uint64_t vmst_record;
	uint64_t vmst_opt;
	uint64_t vmst_asm;
	uint64_t vmst_trace;
	uint64_t samples;
};

/* What the agent saw beyond Tarantool's counters. */
struct luaprof_sysprof_stats {
	uint64_t dropped;     /* timer expiries that produced no sample (unsafe state, both
	                         buffer halves full, VM not in a readable state) */
	uint64_t overruns;    /* expiries the kernel merged because the handler was late */
	uint64_t truncated;   /* samples whose host or Lua stack was cut at the depth limit */
	uint64_t bytes;       /* stream bytes accepted by the writer */
	uint64_t handler_ns;  /* time spent in the signal handler: the sampling overhead */
	uint64_t started_ns;  /* CLOCK_MONOTONIC at start */
	uint64_t stopped_ns;  /* CLOCK_MONOTONIC at stop, 0 while running */
	uint64_t paced;       /* expiries skipped to keep the handler under a quarter of the
	                         thread's time (intervals shorter than a sample takes) */
};

/*
** Setters fail with LUAPROF_PROFILE_ERRUSE while a profile runs (and for a NULL writer or
** on_stop). A writer and an on_stop callback are required for LEAF and CALLGRAPH modes:
** there are no defaults. The Lua API writes files with its own writer and on_stop, so
** those two setters do not affect it; the backtracer applies to both.
*/
LUAPROF_API int luaprof_sysprof_set_writer(luaprof_sysprof_writer writer);
LUAPROF_API int luaprof_sysprof_set_on_stop(luaprof_sysprof_on_stop on_stop);
LUAPROF_API int luaprof_sysprof_set_backtracer(luaprof_sysprof_backtracer backtracer);

/*
** Starts sampling the calling thread, which must be the one running L's VM.
** LUAPROF_PROFILE_ERRUSE: opt NULL (on_stop is not called), mode > 2, interval 0 (or interval_ns < 100000), LEAF/CALLGRAPH
** without buf, with len < LUAPROF_SYSPROF_BUF_MIN, or without writer/on_stop; an unknown
** clock; an unsupported LuaJIT build ("unsupported LuaJIT build (...)"); CALLGRAPH with
** the default backtracer where libunwind is missing; no free real-time signal.
** LUAPROF_PROFILE_ERRRUN: already running. LUAPROF_PROFILE_ERRMEM: setup failed (errno
** set). LUAPROF_PROFILE_ERRIO: the writer failed on the symbol table (errno set). On every
** failure on_stop(ctx, buf) is called when set. luaprof_sysprof_error() describes the last
** failure in one line.
**
** Lua functions and traces are named in the stream by symbol events written before the
** first sample that meets them (fingerprinted, so a function collected and replaced at the
** same address is named anew); C symbols of every loaded object are in the symbol table,
** and objects loaded while sampling are named by symbol events from the writer thread.
**
** A stock VM has no LFUNC/FFUNC/CFUNC states: they are derived from the interrupted
** instruction pointer and the top frame (bytecode -> LFUNC, an assembler builtin or a
** builtin's C code -> FFUNC, a lua_CFunction -> CFUNC). C code called from a JIT trace
** (FFI calls, library and VM helper functions) counts as CFUNC, with the Lua frames
** below the trace, where Tarantool's VM counts it as TRACE: TRACE is time in trace
** machine code only.
*/
LUAPROF_API int luaprof_sysprof_start(struct lua_State *L,
				      const struct luaprof_sysprof_options *opt);

/*
** Stops sampling, writes the epilogue and the extension, calls on_stop. May be called
** from any thread, the sampled one running Lua meanwhile or not: L is only read.
** LUAPROF_PROFILE_ERRRUN: not running. LUAPROF_PROFILE_ERRUSE: L belongs to another VM
** than the one profiled. LUAPROF_PROFILE_ERRIO: the stream failed while running or while
** finishing (errno is that of the first failure); the profiler is stopped all the same.
*/
LUAPROF_API int luaprof_sysprof_stop(struct lua_State *L);

/* Copies the counters; valid while running (a consistent snapshot: samples equals the
 * sum of the states) and after stop, until the next start. LUAPROF_PROFILE_ERRUSE when
 * counters is NULL, else LUAPROF_PROFILE_SUCCESS. */
LUAPROF_API int luaprof_sysprof_report(struct luaprof_sysprof_counters *counters);

/* Same for the extra statistics. LUAPROF_PROFILE_ERRUSE when stats is NULL. */
LUAPROF_API int luaprof_sysprof_stats(struct luaprof_sysprof_stats *stats);

/* One-line description of why the last start/stop failed; "" when it succeeded. */
LUAPROF_API const char *luaprof_sysprof_error(void);

/* -- Memory profiler ---------------------------------------------------------------- */

/*
** Exact mode, Tarantool's memprof on a stock VM: the VM's allocator is wrapped (chained to
** the one it replaces, restored on stop, on a stream failure and before lua_close frees
** the heap) and every allocation, reallocation and free is written as an "ljm" v3 event
** attributed to a Lua function at its current line, a C function, a trace or INTERNAL
** (GC, trace exits, the JIT compiler), with the symbols each event needs written before it.
** The stream is symtab "ljs" v3, memprof "ljm" v3, then the luaprof extension.
**
** Events are written from the thread running the VM, inside the allocation, through the
** writer (same contract as the CPU profiler's; a failure stops profiling and restores the
** allocator, the program goes on) whenever the buffer is full. The writer stops the profile
** by setting *data to NULL: a start or stop called from the writer is refused (ERRRUN,
** ERRUSE). on_stop may start the next profile.
**
** One profile at a time in the process: starts and stops from several threads (each with
** a Lua state of its own) are taken one after the other (a writer must not wait for another
** thread's start or stop), and a start while a profile runs is refused. Stop belongs on the
** thread that runs the profiled VM, or to a time when that thread runs no Lua code: the
** allocator wrapper takes no lock.
**
** After fork(2) the child is not profiling, with either profiler: the memory profiler's
** allocator is restored in it, stop() there returns LUAPROF_PROFILE_ERRRUN, and the child
** may start a profile of its own; the parent's profile goes on untouched.
*/
#define LUAPROF_MEMPROF_BUF_MIN 4096

struct luaprof_memprof_options {
	uint8_t *buf;                    /* stream buffer, >= LUAPROF_MEMPROF_BUF_MIN */
	size_t len;
	void *ctx;                       /* passed to the writer and to on_stop */
	luaprof_sysprof_writer writer;   /* required */
	luaprof_sysprof_on_stop on_stop; /* required; also called when start fails */
	/* luaprof extension: 0 for exact mode; else sampled mode, one allocation stack per
	 * this many bytes allocated on average, at most 2^50 (see below). */
	uint64_t sample_bytes;
};

/*
** Sampled mode: no per-event stream. About one allocation per sample_bytes allocated (the
** interval drawn at random, exponentially, as Go's heap profiler does, so periodic patterns
** do not alias) is recorded with its full merged Lua + C stack, and sampled blocks still
** allocated at stop are marked live. The stream is an ljm v3 with no events (symbols only)
** and the samples in the luaprof extension; reports give alloc_space / alloc_objects /
** inuse_space / inuse_objects, each sample weighted by 1 / (1 - exp(-size / sample_bytes)).
** Needs libunwind for the C frames, like the CPU profiler's C mode.
*/
#define LUAPROF_MEMPROF_SAMPLE_DEFAULT (512 * 1024)

/* Exact mode counts every event; sampled mode counts only its samples (the rest stay 0:
 * counting each allocation would cost what sampling saves). */
struct luaprof_memprof_counters {
	uint64_t events;      /* events written (exact mode) */
	uint64_t samples;     /* allocations sampled (sampled mode) */
	uint64_t allocs, frees, reallocs;  /* exact mode */
	uint64_t alloc_bytes; /* exact mode: bytes allocated (reallocations: their new size) */
	uint64_t free_bytes;  /* exact mode: bytes freed (reallocations: their old size) */
};

/*
** LUAPROF_PROFILE_ERRUSE: opt NULL (on_stop is not called), missing writer, on_stop or
** buffer, a buffer shorter than LUAPROF_MEMPROF_BUF_MIN, an L that is not a state of a
** supported LuaJIT build (or cannot be read), a Lua state that is closing, sample_bytes
** above 2^50, or (sampled mode) LUAPROF_ALLOCSTUB set to neither 0 nor 1 (errno EINVAL for
** the last three); LUAPROF_PROFILE_ERRRUN: already running (checked first);
** LUAPROF_PROFILE_ERRMEM (errno ENOMEM); and LUAPROF_PROFILE_ERRIO when the symbol table
** cannot be written (errno set; ECANCELED when the writer asked to stop). On every failure
** on_stop(ctx, buf) is called when set. luaprof_memprof_error() names the problem.
*/
LUAPROF_API int luaprof_memprof_start(struct lua_State *L,
				      const struct luaprof_memprof_options *opt);
/*
** Restores the allocator, writes the epilogue and the extension, calls on_stop.
** LUAPROF_PROFILE_ERRRUN: not running; LUAPROF_PROFILE_ERRUSE: L is another VM's, or the
** call came from inside the profiler (its writer); LUAPROF_PROFILE_ERRIO: the
** stream failed (errno set; ECANCELED when the writer asked to stop), now or while running.
*/
LUAPROF_API int luaprof_memprof_stop(struct lua_State *L);
/* Counters of the running or last profile. LUAPROF_PROFILE_ERRUSE when counters is NULL,
 * else LUAPROF_PROFILE_SUCCESS. */
LUAPROF_API int luaprof_memprof_report(struct luaprof_memprof_counters *counters);
/* One-line description of why the calling thread's last start/stop failed; "" when it
 * succeeded. */
LUAPROF_API const char *luaprof_memprof_error(void);

/* Lua module entry point: require "luaprof". */
LUAPROF_API int luaopen_luaprof(struct lua_State *L);

#ifdef __cplusplus
}
#endif

#endif
