/*
** In-process CPU profiler core: options, timer and signal, the handler, the double buffer
** and its writer thread, start/stop/report (include/luaprof.h).
**
** Sadly the profiler state has to be static, as in Tarantool's and LuaJIT's profilers: a
** signal handler gets no user pointer. One profile runs at a time, in one VM, sampling the
** OS thread that started it.
**
** Why a writer thread and not write(2) from the handler: a write to a file can block for
** as long as the disk or the network file system likes, and the handler runs on the
** profiled thread, so it would stall the program and skew the very time being measured
** (in CPU-clock mode a blocked write is also invisible to the timer). The handler instead
** appends each complete sample to the active half of a double buffer; when the half is
** full it is handed to the writer thread (sem_post is async-signal-safe) and sampling
** continues in the other half. If the writer thread has not finished the other half yet,
** the sample is dropped and counted - never lost silently, never blocking. The writer
** thread also asks the handler every second to hand over a partly filled half, so the file
** grows while the program runs.
*/
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/objects.h"
#include "agent/pfile.h"
#include "agent/ticker.h"
#include "stream/writer.h"
#include "util/timerenv.h"


enum { ST_IDLE, ST_RUNNING, ST_HALT, ST_STOPPING };

/* Minimum interval: below 0.1 ms the handler would be most of what the thread does. */
#define MIN_INTERVAL_NS 100000ull

/* The CPU time one signal of the perf clock is written for at most, as that many samples
 * as intervals (agent_ticker_ticks: the intervals merged into it); beyond, its ticks are
 * counted as overruns. A system call of 0.1 s is sampled in full, at any rate; a thread
 * that blocked the signal for longer has the rest of its blocked time counted, not put
 * on the stack it unblocked at. */
#define TICKS_MAX_NS 100000000ull

/* A sample's symbols' names take what half of the stream's buffer leaves beside the rest of
 * it, up to AGENT_NAMES_MAX (agent_sample.name_room): 64 KiB with the profile files' 4 MiB
 * buffer, 17 KiB with the smallest. */
_Static_assert(AGENT_SAMPLE_MAX + AGENT_SYMS_FIXED + 16384 <= LUAPROF_SYSPROF_BUF_MIN / 2,
	       "one encoded sample must fit in half of the smallest stream buffer");

struct half {
	uint8_t *data;
	size_t len;          /* filled bytes: the handler's while !full, the writer's while full */
	uint64_t seq;        /* hand-over order */
	_Atomic int full;    /* handed to the writer thread */
	int objs_first;      /* its first sample met objects the table did not know, or was
			      * the first after the writer thread saw objects loaded (set by
			      * the handler before full): the symbols of the new objects read
			      * by then go before the half (emit_half) */
};

static struct {
	/* Configuration of the C API (luaprof_sysprof_set_*). */
	luaprof_sysprof_writer cfg_writer;
	luaprof_sysprof_on_stop cfg_on_stop;
	luaprof_sysprof_backtracer cfg_backtracer;

	_Atomic int state;               /* ST_* */
	_Atomic int busy;                /* the handler is between its two state checks */
	_Atomic long stop_tid;           /* the thread whose stop has not written the file yet */
	uint64_t run_id;                 /* increments at every start */

	/* The running profile. */
	int mode;
	int clock;
	uint64_t interval_ns;
	uint64_t ticks_max;              /* the most samples one signal is written as */
	luaprof_sysprof_writer writer;
	luaprof_sysprof_on_stop on_stop;
	luaprof_sysprof_backtracer backtracer;
	int leaf_walk;                   /* L mode: the unwinder is there for C helpers' frames */
	void *ctx;
	uint8_t *buf;
	pid_t tid;                       /* the sampled thread */
	_Atomic pid_t tid_exited;        /* set by that thread as it exits (sampled_exit) */

	/* Signal and timer. */
	int signo;
	int sig_installed;               /* our handler is in place (maybe left inert) */
	int sig_unblocked;               /* start unblocked it on the sampled thread, which
					  * blocked it (and every other free one) */
	_Atomic pid_t reblock_tid;       /* a stop on another thread left it unblocked on this
					  * thread (sig_unblocked): the handler run there blocks
					  * it again (reblock_remote) */
	struct sigaction oldsa;          /* what it replaced, restored on stop */
	struct agent_ticker ticker;      /* the sampling clock (ticker.h) */
	int timer_ok;                    /* ticker armed (kind other than NONE) */
	const char *timer_name;          /* which clock it was (meta timer) */
	pthread_mutex_t timer_lock;      /* the ticker, between teardown and the writer thread */
	_Atomic uint64_t sig_taken_ns;   /* the signal's disposition seen changed this long
					  * after start (the timer then deleted); 0 if not */

	/* The sampled thread's CPU time over the profile, for the record: samples are
	 * expected of it (a program that blocks the signal gets fewer). */
	clockid_t cpuclock;
	int cpuclock_ok;
	uint64_t cpu0_ns, cpu_ns;
	/* The whole process's, the same way: what the other threads ran beside it (a host
	 * that runs the Lua state on another thread, whose CPU time the CPU clock never
	 * samples: meta process_cpu_ns says it was spent). */
	uint64_t pcpu0_ns, pcpu_ns;
	/* The sampled thread's wait for a CPU while runnable (schedstat's run delay), for the
	 * record: CPU time short of the elapsed time on a busy machine is not sleep. */
	uint64_t delay0_ns, delay_ns;
	int delay_ok;                    /* the start could read it */

	/* Counters: a sequence lock makes a report consistent while the handler runs. */
	_Atomic uint32_t cnt_seq;
	_Atomic uint64_t counters[LP_VMST__MAX];
	_Atomic uint64_t samples;
	_Atomic uint64_t dropped, overruns, truncated, bytes, paced;
	_Atomic uint64_t elsewhere;      /* samples while the state ran on another thread */
	_Atomic pid_t own_work;          /* the thread running the agent's own work
					  * (agent_sysprof_own_work), or 0: on the sampled
					  * thread, its ticks are not samples */
	_Atomic uint64_t own_ticks;      /* ticks during it (meta agent_ticks) */
	_Atomic uint64_t handler_ns;     /* time spent in the handler (CLOCK_MONOTONIC) */
	uint64_t started_ns, stopped_ns;
	uint64_t started_unix_ns;       /* the Unix time at start (meta start_unix_ns) */

	/* Stream. */
	struct half half[2];
	size_t halfcap;
	int active;                      /* half the handler appends to */
	uint64_t seq;
	_Atomic int flush_req;           /* writer thread: hand over the active half */
	_Atomic int objs_req;            /* writer thread: the next sample starts a half, after
					  * the symbols of objects it saw loaded (new_objects) */
	_Atomic int io_errno;            /* first I/O failure, 0 if none */
	sem_t sem;
	_Atomic int sem_ok;              /* sem is initialised: agent_writer_wake may post */
	pthread_t wthread;
	int wthread_ok;
	_Atomic int wquit;

	char err[256];                   /* last start/stop failure */
} sp = { .timer_lock = PTHREAD_MUTEX_INITIALIZER };

/* Handler-only storage (the handler does not nest: its signal is blocked while it runs). */
static struct agent_sample hs_sample;
static uint64_t hs_host[AGENT_MAX_HOST + 64];
static uint8_t hs_scratch[AGENT_SAMPLE_MAX + AGENT_SYMS_FIXED + AGENT_NAMES_MAX];
static uint8_t hs_tstack[AGENT_SAMPLE_MAX + 16];
static uint64_t hs_ntrace;  /* TRACE samples in the stream so far: the next one's ordinal */
static uint64_t hs_ngc;     /* GC samples, likewise */
static uint64_t hs_njit;    /* JIT compiler samples (RECORD, OPT, ASM), likewise */
static uint64_t hs_nexit;   /* trace exit samples (EXIT), likewise */
/*
** Pacing: a sample costs from 2 us to a few hundred (deep stacks in C mode). Were the
** interval shorter than that, the handler would run back to back and the program would
** stop making progress. After a sample that took t, ticks are skipped for the next
** pace_factor * t, so the handler never takes more than 1 / (1 + pace_factor) of the
** thread's time; at ordinary rates (t well below the interval) nothing is skipped.
** Skipped ticks are counted apart ("paced"), not as dropped samples.
*/
static uint64_t pace_factor = 3; /* 0 turns pacing off (unit tests of the buffers) */
static uint64_t hs_resume_ns;
static size_t hs_bt_n;

/* Thread tid's run delay so far (the second field of its schedstat: time runnable but not
 * running) in *out: 0, or -1 when the kernel keeps none or the thread is gone.
 * Async-signal-safe (no stdio, no allocation): a terminating signal's stop calls it. */
static int run_delay_ns(pid_t tid, uint64_t *out)
{
	char path[48] = "/proc/self/task/", digits[12], buf[96];
	char *p = path + strlen(path);
	unsigned v = (unsigned)tid;
	int n = 0, saved = errno;
	do
		digits[n++] = (char)('0' + v % 10);
	while ((v /= 10) && n < (int)sizeof(digits));
	while (n)
		*p++ = digits[--n];
	memcpy(p, "/schedstat", sizeof("/schedstat"));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t r = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	errno = saved;
	if (r <= 0)
		return -1;
	buf[r] = 0;
	const char *s = strchr(buf, ' ');
	uint64_t d = 0;
	if (!s || s[1] < '0' || s[1] > '9')
		return -1;
	for (s++; *s >= '0' && *s <= '9'; s++)
		d = d * 10 + (uint64_t)(*s - '0');
	*out = d;
	return 0;
}

static pid_t gettid_raw(void)
{
	return (pid_t)syscall(SYS_gettid);
}

static void set_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(sp.err, sizeof(sp.err), fmt, ap);
	va_end(ap);
}

/* -- Stream output (writer thread, or the starting/stopping thread) ------------------- */

static void io_fail(int e)
{
	int zero = 0;
	if (!atomic_compare_exchange_strong(&sp.io_errno, &zero, e ? e : EIO))
		return;
	int running = ST_RUNNING;
	atomic_compare_exchange_strong(&sp.state, &running, ST_HALT);
	/* Sampling stops here; the timer itself is deleted by stop. */
	pthread_mutex_lock(&sp.timer_lock);
	if (sp.timer_ok)
		agent_ticker_pause(&sp.ticker);
	pthread_mutex_unlock(&sp.timer_lock);
}

static void emit(const uint8_t *p, size_t len)
{
	if (len == 0 || atomic_load(&sp.io_errno))
		return;
	const void *d = p;
	errno = 0;
	size_t n = sp.writer(&d, len, sp.ctx);
	atomic_fetch_add(&sp.bytes, n < len ? n : len);
	if (d == NULL)
		io_fail(ECANCELED);
	else if (n < len)
		io_fail(errno ? errno : EIO);
}

static size_t sync_writer(const void **data, size_t len, void *ctx)
{
	emit(*data, len);
	return atomic_load(&sp.io_errno) ? 0 : len;
}

static void emit_pending(void);

/* Writes half h, after the symbols of the objects loaded before its first sample if that
 * sample asked for them (objs_first): those read by then. Not read now: the objects may
 * have changed again since the sample (the writer thread, woken by the sample that asked,
 * has read them since, as a rule, before the half is handed over). */
static void emit_half(struct half *h)
{
	if (h->objs_first) {
		h->objs_first = 0;
		emit_pending();
	}
	emit(h->data, h->len);
	h->len = 0;
}

/* Writes every full half, oldest first. */
static void drain_full(void)
{
	for (;;) {
		struct half *h = NULL;
		for (int i = 0; i < 2; i++)
			if (atomic_load_explicit(&sp.half[i].full, memory_order_acquire) &&
			    (!h || sp.half[i].seq < h->seq))
				h = &sp.half[i];
		if (!h)
			return;
		emit_half(h);
		atomic_store_explicit(&h->full, 0, memory_order_release);
	}
}

/*
** Objects loaded since the last look (C modules required while sampling, a library loaded
** where another was unloaded): unwind tables for the handler, symbols for the stream.
** Writer thread only (and the stopping thread once it is gone).
**
** The report names a sample's C frames by the symbols written before it (a library loaded
** at the addresses of one unloaded replaces its names from there on), so the symbols are
** read as soon as the writer thread sees the change (the sooner, the likelier they are of
** the object the samples ran in), kept pending, and written right before the half whose
** first sample asked for them (objs_first): the first sample taken after the change was
** seen, or one that met the new object before. Samples taken before are in the half
** handed over ahead of it.
*/
static unsigned long long objs_adds;
static struct agent_objseen objs_seen;
static uint8_t objs_buf[64 * 1024];
static uint8_t *objs_pend;        /* symbol events not written yet */
static size_t objs_npend, objs_pendcap;

static size_t pend_writer(const void **data, size_t len, void *ctx)
{
	if (objs_npend + len > objs_pendcap) {
		size_t cap = objs_pendcap ? objs_pendcap : 64 * 1024;
		while (cap < objs_npend + len)
			cap *= 2;
		uint8_t *p = realloc(objs_pend, cap);
		if (!p)
			return 0; /* the symbols are lost: their code is named by address */
		objs_pend = p;
		objs_pendcap = cap;
	}
	memcpy(objs_pend + objs_npend, *data, len);
	objs_npend += len;
	return len;
}

/* Objects seen loaded during this profile (agent_objseen's keys, 0 = empty), so that their
 * mappings are read once, not at every load of a library loaded again and again. */
#define OBJS_EVER 4096
static uint64_t objs_ever[OBJS_EVER];
static size_t objs_never;

/* Whether an object of the last walk (objs_seen) was never seen before; notes them. */
static int objs_first_seen(void)
{
	int first = 0;
	for (size_t i = 0; i < objs_seen.n; i++) {
		uint64_t key = objs_seen.key[i] ? objs_seen.key[i] : 1;
		size_t h = (size_t)(key * 0x9e3779b97f4a7c15ull >> 52) % OBJS_EVER, k;
		for (k = 0; k < OBJS_EVER && objs_ever[h] && objs_ever[h] != key; k++)
			h = (h + 1) % OBJS_EVER;
		if (k == OBJS_EVER || objs_never >= OBJS_EVER / 2) {
			first = 1; /* full: every look reads the mappings, as before */
			continue;
		}
		if (!objs_ever[h]) {
			objs_ever[h] = key;
			objs_never++;
			first = 1;
		}
	}
	return first;
}

/* Under the loader's lock (agent_objects_locked): the handler's table, and the symbols of
 * the objects new since the last look. */
static void read_objects(const struct objtab *tab, void *arg)
{
	(void)tab;
	(void)arg;
	agent_objects_refresh();
	struct lp_wbuf w;
	lp_wbuf_init(&w, objs_buf, sizeof(objs_buf), pend_writer, NULL);
	agent_symtab_cfuncs(&w, &objs_seen, AGENT_SYMS_SYSPROF);
	lp_wbuf_flush(&w);
}

/* The handler's next sample asks for the symbols (it will be written after them): set
 * before the table changes, so that a sample in the new object asks too. */
static void new_objects(void)
{
	unsigned long long adds = agent_objects_changes();
	if (adds == objs_adds)
		return;
	objs_adds = adds;
	atomic_store(&sp.objs_req, 1);
	/* The table and the symbols of one set of objects: under the loader's lock, which
	 * no object is loaded or unloaded without. The mappings after it (maps.c has a lock
	 * of its own, taken before the loader's). */
	agent_objects_locked(read_objects, NULL);
	agent_unwind_objects_changed();
	/* Reading /proc/self/maps took most of the time the writer thread spent on a library
	 * loaded and unloaded in a loop. */
	if (objs_first_seen())
		agent_maps_note();
}

static void emit_pending(void)
{
	emit(objs_pend, objs_npend);
	objs_npend = 0;
}

static int signal_ours(void);

/*
** The program changed the sampling signal's disposition (a handler of its own, SIG_IGN,
** SIG_DFL: it used that signal too, or set every signal): the timer's ticks would go to
** its handler, or kill it (SIG_DFL: unless this sees it first). Sampling stops here, and
** the record says when (meta signal_taken_ns); stop leaves the program's handler. Writer
** thread, every round.
*/
/* Deletes the ticker (timer_lock held, timer_ok): paused first, then deleted once no
 * handler is between its checks (one may re-arm the perf clock, or use its file). */
static void ticker_delete(void)
{
	agent_ticker_pause(&sp.ticker);
	while (atomic_load(&sp.busy)) {
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
	agent_ticker_delete(&sp.ticker);
	sp.timer_ok = 0;
}

static void check_signal(void)
{
	if (atomic_load(&sp.sig_taken_ns))
		return;
	/* Only once the timer is armed (the handler installed before it): the writer
	 * thread starts first. Deleted, not disarmed: a tick the kernel parked while the
	 * signal was ignored would be delivered once the program sets it back to SIG_DFL
	 * (Linux 6.13 on), and kill it. */
	pthread_mutex_lock(&sp.timer_lock);
	if (sp.timer_ok && atomic_load(&sp.state) == ST_RUNNING && !signal_ours()) {
		ticker_delete();
		uint64_t t = agent_now_ns() - sp.started_ns;
		atomic_store(&sp.sig_taken_ns, t ? t : 1);
	}
	pthread_mutex_unlock(&sp.timer_lock);
}

static void *writer_main(void *arg)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	/* A flush at least every FLUSH_NS, however often the handler wakes this thread
	 * (full buffers, TRACE stacks, unwind rules to learn): what is on disk is at most a
	 * quarter of a second old if the program is killed (a second lost a third of a 3 s
	 * run stopped by SIGTERM). Four hand-overs a second cost nothing measurable. */
	const uint64_t FLUSH_NS = 250000000ull;
	uint64_t last_flush = agent_now_ns();
	for (;;) {
		struct timespec ts;
		uint64_t now = agent_now_ns(), due = last_flush + FLUSH_NS;
		uint64_t wait = due > now ? due - now : 0;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_sec += (time_t)(wait / 1000000000ull);
		ts.tv_nsec += (long)(wait % 1000000000ull);
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		(void)sem_timedwait(&sp.sem, &ts);
		now = agent_now_ns();
		if (now - last_flush >= FLUSH_NS) {
			atomic_store(&sp.flush_req, 1);
			last_flush = now;
		}
		drain_full();
		agent_tstacks_drain();
		new_objects();
		agent_unwind_learn();
		check_signal();
		if (atomic_load(&sp.wquit)) {
			drain_full();
			agent_tstacks_drain();
			return NULL;
		}
	}
}

/* -- Signal handler ------------------------------------------------------------------- */

static size_t scratch_overflow(const void **data, size_t len, void *ctx)
{
	return 0; /* cannot happen by the scratch's size; if it did, the sample is dropped */
}

/* Hands h to the writer thread. */
static void hand_over(struct half *h)
{
	h->seq = ++sp.seq;
	atomic_store_explicit(&h->full, 1, memory_order_release);
	sem_post(&sp.sem);
}

/*
** Appends one encoded sample; -1 when it cannot be placed without waiting. The half not
** being filled is either with the writer thread (full) or empty: the writer thread resets
** len before it clears full. objs: the sample met objects the table does not know (a
** library loaded since): it starts a half, which the writer thread writes after it named
** the objects loaded by then (emit_half), and the samples before it, in the half handed
** over, before that. When the other half is still with the writer thread it goes where it
** fits: the objects are named when the writer next looks, after or before it.
*/
static int push(const uint8_t *p, size_t n, int objs)
{
	struct half *h = &sp.half[sp.active], *o = &sp.half[!sp.active];
	if (!atomic_load_explicit(&h->full, memory_order_acquire)) {
		if (h->len + n <= sp.halfcap) {
			int flush = h->len > 0 && (objs || atomic_load(&sp.flush_req)) &&
				    !atomic_load_explicit(&o->full, memory_order_acquire);
			if (!flush)
				goto append;
			atomic_store(&sp.flush_req, 0);
		}
		if (h->len == 0)
			return -1; /* larger than a half: excluded by name_room */
		hand_over(h);
	}
	if (atomic_load_explicit(&o->full, memory_order_acquire))
		return -1;
	sp.active = !sp.active;
	h = o;
	if (h->len + n > sp.halfcap)
		return -1;
append:;
	if (objs && h->len == 0)
		h->objs_first = 1;
	else if (objs) /* the other half is with the writer thread: the next sample asks */
		atomic_store(&sp.objs_req, 1);
	/* A plain loop: memcpy is not on POSIX's async-signal-safe list. */
	uint8_t *dst = h->data + h->len;
	for (size_t i = 0; i < n; i++)
		dst[i] = p[i];
	h->len += n;
	return 0;
}

static void *bt_frame_writer(int frame_no, void *addr)
{
	if (hs_bt_n >= sizeof(hs_host) / sizeof(hs_host[0]))
		return NULL;
	hs_host[hs_bt_n++] = (uint64_t)(uintptr_t)addr;
	return &hs_bt_n;
}

/* Host stack through a user backtracer: its frames start inside this handler; the
 * interrupted instruction pointer marks where the sampled stack begins. */
static size_t user_backtrace(const ucontext_t *uc, int *truncated)
{
	uint64_t ip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	hs_bt_n = 0;
	sp.backtracer(bt_frame_writer);
	size_t i;
	for (i = 0; i < hs_bt_n && hs_host[i] != ip; i++)
		;
	if (i == hs_bt_n) {
		hs_host[0] = ip;
		*truncated = 1;
		return 1;
	}
	size_t n = hs_bt_n - i;
	if (n > AGENT_MAX_HOST) {
		n = AGENT_MAX_HOST;
		*truncated = 1;
	}
	for (size_t k = 0; k < n; k++)
		hs_host[k] = hs_host[i + k];
	return n;
}

static void count(uint8_t vmstate, uint64_t n)
{
	atomic_fetch_add_explicit(&sp.cnt_seq, 1, memory_order_acq_rel);
	atomic_fetch_add_explicit(&sp.counters[vmstate], n, memory_order_relaxed);
	atomic_fetch_add_explicit(&sp.samples, n, memory_order_relaxed);
	atomic_fetch_add_explicit(&sp.cnt_seq, 1, memory_order_acq_rel);
}

/* L mode's walk from a C helper to the interpreter's frame: helpers nest a few deep (a
 * metamethod's lookup, then lj_str_new, then memcpy). */
#define LEAF_WALK_MAX 16
static uint64_t hs_leafwalk[LEAF_WALK_MAX];
#define OBJ_CHECK_NS 500000ull
static uint64_t hs_objcheck_ns; /* the last agent_objects_check */

/* The stacks a sample written could not carry (C mode): a TRACE sample's, and a GC, JIT
 * compiler or trace exit sample's when it has Lua frames (the collector ran from Lua code,
 * the compiler compiles it, the exit restores its frames); and the sample's ordinal. */
static void side_stacks(const struct agent_sample *s, const struct lp_sys_sample *out,
			int trace)
{
	int gc = s->vmstate == LP_VMST_GC;
	int jit = LP_VMST_IS_COMPILER(s->vmstate);
	int ex = s->vmstate == LP_VMST_EXIT;
	if ((trace || ((gc || jit || ex) && s->nlua > 0)) && sp.mode == LUAPROF_SYSPROF_CALLGRAPH) {
		struct lp_wbuf w;
		lp_wbuf_init(&w, hs_tstack, sizeof(hs_tstack), scratch_overflow, NULL);
		lp_wbuf_u8(&w, trace ? AGENT_TSTACK_TRACE : gc ? AGENT_TSTACK_GC
				: jit ? AGENT_TSTACK_JIT : AGENT_TSTACK_EXIT);
		lp_wbuf_uleb(&w, trace ? hs_ntrace : gc ? hs_ngc : jit ? hs_njit : hs_nexit);
		lp_write_sys_stacks(&w, out);
		if (lp_wbuf_ok(&w) && agent_tstacks_put(hs_tstack, (size_t)(w.pos - w.buf)) > 0)
			sem_post(&sp.sem);
	}
	if (trace)
		hs_ntrace++;
	else if (gc)
		hs_ngc++;
	else if (jit)
		hs_njit++;
	else if (ex)
		hs_nexit++;
}

/*
** Takes one sample, written `copies` times (the ticks its signal stands for: the perf
** clock's merged into one while the signal was pending, TICKS_MAX_NS's worth at most):
** the CPU time of a system call longer than the interval keeps its share of the samples.
** now: the handler's clock reading at entry.
*/
static void take_sample(const ucontext_t *uc, uint64_t copies, uint64_t now)
{
	struct agent_sample *s = &hs_sample;
	s->name_room = sp.halfcap - AGENT_SAMPLE_MAX - AGENT_SYMS_FIXED;
	if (agent_vm_sample(uc, sp.mode, s) != 0 || s->vmstate >= LP_VMST__MAX) {
		agent_vm_sample_dropped(s);
		/* Every tick it stood for: the time is in no other count. */
		atomic_fetch_add_explicit(&sp.dropped, copies, memory_order_relaxed);
		return;
	}
	if (s->elsewhere)
		atomic_fetch_add_explicit(&sp.elsewhere, copies, memory_order_relaxed);
	if (sp.mode == LUAPROF_SYSPROF_DEFAULT) {
		agent_vm_sample_dropped(s); /* counted: nothing written */
		count(s->vmstate, copies);
		return;
	}

	int truncated = 0;
	struct lp_sys_sample out = {
		.traceno = s->traceno, .trace_addr = s->trace_proto, .trace_line = s->trace_line,
	};
	/* A TRACE sample's stacks go on the side (tstacks.c), in C mode. */
	int trace = s->vmstate == LP_VMST_TRACE;
	if (!trace || sp.mode == LUAPROF_SYSPROF_CALLGRAPH) {
		if (sp.mode == LUAPROF_SYSPROF_LEAF) {
			hs_host[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
			out.nhost = 1;
			/* C code the interpreter called: the walk to its VM frame gives the
			 * registers that show its Lua frame (the stream keeps the leaf only). */
			if (sp.leaf_walk && agent_vm_helper_pending()) {
				int t = 0;
				(void)agent_unwind(uc, hs_leafwalk, LEAF_WALK_MAX, &t);
				(void)agent_vm_sample_helper(s, sp.mode);
			}
		} else if (sp.backtracer) {
			out.nhost = user_backtrace(uc, &truncated);
			if (sp.mode == LUAPROF_SYSPROF_CALLGRAPH)
				agent_vm_after_walk(s);
		} else {
			out.nhost = agent_unwind(uc, hs_host, AGENT_MAX_HOST, &truncated);
			/* C code the interpreter called: its Lua frames, by the walk's registers;
			 * the collector run from a trace: its line. */
			if (sp.mode == LUAPROF_SYSPROF_CALLGRAPH) {
				(void)agent_vm_sample_helper(s, sp.mode);
				agent_vm_after_walk(s);
			}
			out.nhost = agent_vm_omit_empty(hs_host, out.nhost);
		}
		if (sp.mode == LUAPROF_SYSPROF_CALLGRAPH)
			agent_vm_key_trace_code(s, hs_host, out.nhost);
		out.host = hs_host;
		/* A library loaded where another was unloaded: its addresses are in the table,
		 * the other's build-id with them. The check's reads (about a microsecond an
		 * object) at most every OBJ_CHECK_NS: at 10 kHz over a stack through several
		 * loaded libraries they took a third of the handler's time; such a library is
		 * then seen within that time (every sample up to 2 kHz). */
		if (now - hs_objcheck_ns >= OBJ_CHECK_NS) {
			hs_objcheck_ns = now;
			(void)agent_objects_check(hs_host, out.nhost);
		}
	}
	/* Objects the table does not know (the walk met code outside it, or the check
	 * above): the writer thread, woken, reads them and names the new ones before this
	 * sample (push). */
	int objs = agent_objects_take_stale();
	if (atomic_load_explicit(&sp.objs_req, memory_order_relaxed) &&
	    atomic_exchange(&sp.objs_req, 0))
		objs |= 2;
	/* A host stack cut short says so (LP_HOST_CUT): the report then does not take its
	 * outermost VM entry for the program's first. */
	if (truncated && out.nhost && out.nhost < sizeof(hs_host) / sizeof(hs_host[0]))
		hs_host[out.nhost++] = LP_HOST_CUT;
	count(s->vmstate, copies);
	truncated |= s->lua_truncated;
	out.vmstate = s->vmstate;
	out.nlua = s->nlua;
	out.lua = s->lua;

	struct lp_wbuf w;
	lp_wbuf_init(&w, hs_scratch, sizeof(hs_scratch), scratch_overflow, NULL);
	for (size_t i = 0; i < s->nsyms; i++) {
		const struct agent_sym *y = &s->syms[i];
		if (y->event == LP_SYSPROF_SYM_LFUNC)
			lp_write_sys_sym_lua(&w, y->addr, y->name, y->len, y->line);
		else
			lp_write_sys_sym_trace(&w, y->traceno, y->addr, y->line);
	}
	size_t at = (size_t)(w.pos - w.buf); /* the sample after its symbols: the copies */
	lp_write_sys_sample(&w, &out);
	int pushed = lp_wbuf_ok(&w) && push(hs_scratch, (size_t)(w.pos - w.buf), objs) == 0;
	if (objs & 1)
		sem_post(&sp.sem); /* after the push: the writer reads the objects for this half */
	if (!pushed) {
		if (objs) /* the next sample asks for the objects' symbols */
			atomic_store(&sp.objs_req, 1);
		agent_vm_sample_dropped(s);
		atomic_fetch_add_explicit(&sp.dropped, copies, memory_order_relaxed);
		return;
	}
	size_t len = (size_t)(w.pos - w.buf) - at;
	for (uint64_t i = 0;; i++) {
		side_stacks(s, &out, trace);
		if (truncated)
			atomic_fetch_add_explicit(&sp.truncated, 1, memory_order_relaxed);
		if (i + 1 == copies)
			break;
		if (push(hs_scratch + at, len, 0) != 0) {
			atomic_fetch_add_explicit(&sp.dropped, copies - i - 1,
						  memory_order_relaxed);
			break;
		}
	}
}

static void on_signal(int sig, siginfo_t *si, void *ucv)
{
	int saved = errno;
	if (atomic_load(&sp.state) != ST_RUNNING || !agent_ticker_ours(&sp.ticker, si))
		goto out; /* not our tick (e.g. a stray kill): ignore */
	atomic_store(&sp.busy, 1);
	if (atomic_load(&sp.state) == ST_RUNNING && gettid_raw() == sp.tid) {
		uint64_t t0 = agent_now_ns();
		int posix_over = agent_ticker_overrun(&sp.ticker, si);
		uint64_t over = posix_over > 0 ? (uint64_t)posix_over : 0;
		/* Read before the sample, which the clock counts too. */
		uint64_t ticks = agent_ticker_ticks(&sp.ticker), most = sp.ticks_max;
		if (ticks > most) {
			over += ticks - most;
			ticks = most;
		}
		if (over > 0)
			atomic_fetch_add_explicit(&sp.overruns, over, memory_order_relaxed);
		if (atomic_load_explicit(&sp.own_work, memory_order_relaxed) == sp.tid) {
			/* The agent's time, not the program's: counted apart, and not in the
			 * period's extra ticks (load.c), which would spread it over the
			 * program's samples. Overruns stay overruns: the expirations one
			 * signal stood for may predate the agent's work. */
			atomic_fetch_add_explicit(&sp.own_ticks, ticks, memory_order_relaxed);
		} else if (t0 < hs_resume_ns) {
			atomic_fetch_add_explicit(&sp.paced, ticks, memory_order_relaxed);
		} else {
			take_sample((const ucontext_t *)ucv, ticks, t0);
			uint64_t t1 = agent_now_ns();
			atomic_fetch_add_explicit(&sp.handler_ns, t1 - t0, memory_order_relaxed);
			hs_resume_ns = t1 + pace_factor * (t1 - t0);
		}
	}
	atomic_store(&sp.busy, 0);
out:
	/* The thread a stop on another one left with this signal unblocked, which start
	 * had unblocked (reblock_remote): blocked again as the handler returns, by the mask
	 * the kernel restores then. */
	if (atomic_load_explicit(&sp.reblock_tid, memory_order_relaxed)) {
		pid_t me = gettid_raw();
		if (atomic_compare_exchange_strong(&sp.reblock_tid, &me, 0))
			sigaddset(&((ucontext_t *)ucv)->uc_sigmask, sig);
	}
	errno = saved;
}

/* -- Signal and timer set-up ---------------------------------------------------------- */

/* Our handler is still the signal's (a program may install its own over it). */
static int signal_ours(void)
{
	struct sigaction cur;
	return sigaction(sp.signo, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
	       cur.sa_sigaction == on_signal;
}

/* Our handler on signal s, when nobody handles or ignores it: 0, else -1. */
static int take_signal(int s)
{
	struct sigaction cur;
	if (sigaction(s, NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) ||
	    cur.sa_handler != SIG_DFL)
		return -1;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_RESTART | SA_SIGINFO;
	/* A terminating signal waits for the handler: record's stop on one (termstop.c)
	 * must not find the handler between its checks, which the stop waits for. (Not
	 * a fault's: this handler's own would then kill the process at once, where a
	 * host's handler of it should see it.) */
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, SIGTERM);
	sigaddset(&sa.sa_mask, SIGHUP);
	sigaddset(&sa.sa_mask, SIGINT);
	sigaddset(&sa.sa_mask, SIGQUIT);
	sigaddset(&sa.sa_mask, SIGPIPE);
	sigaddset(&sa.sa_mask, SIGABRT);
	return sigaction(s, &sa, &sp.oldsa);
}

/*
** For the POSIX timer, the first real-time signal from SIGRTMIN+4 upwards that nobody
** handles and the sampled thread does not block. glibc keeps two below SIGRTMIN for
** itself, and programs that use real-time signals tend to start at SIGRTMIN; SIGPROF stays
** with jit.p. For the perf clock (urg), SIGURG on the same terms, whose default action is
** to ignore it (agent_ticker_prepare); 1 when that is taken, so that the perf clock is
** armed, 0 for a real-time signal (the POSIX timer), -1 if none is free.
** A thread that blocks every one of them (dnsjit blocks all signals on the thread that
** runs its script, leaving them to another that waits for SIGINT and SIGTERM) has the
** first that nobody handles unblocked until the stop, which blocks it again (a stop on
** another thread has the handler on that one do it, reblock_remote): the ticks are aimed
** at this thread alone (ticker.c), so no signal the program waits for elsewhere is taken
** from it (a program that waited for that very one with sigwait or a signalfd would lose
** it: none does that with every free one blocked).
*/
/* Signal s unblocked on this thread if it blocks it: 1 then, else 0. */
static int unblock(int s, const sigset_t *blocked)
{
	if (!sigismember(blocked, s))
		return 0;
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, s);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	return 1;
}

static int install_signal(int urg)
{
	sigset_t blocked;
	pthread_sigmask(SIG_BLOCK, NULL, &blocked);
	/* Left in place (inert) by a stop on another thread: reused, whichever it is (the
	 * POSIX timer may send SIGURG too), and unblocked on this thread as a new one is.
	 * This thread's pending re-block (a stop on another thread of its last profile) is
	 * withdrawn first: its signal, delivered as the unblock returns, would block it. */
	if (sp.sig_installed && signal_ours()) {
		pid_t me = gettid_raw();
		atomic_compare_exchange_strong(&sp.reblock_tid, &me, 0);
		/* Read again: a re-block delivered before the withdrawal changed it. */
		pthread_sigmask(SIG_BLOCK, NULL, &blocked);
		sp.sig_unblocked = unblock(sp.signo, &blocked);
		return sp.signo == SIGURG;
	}
	sp.sig_installed = 0;
	sp.sig_unblocked = 0;
	for (int any = 0; any < 2; any++) {
		for (int s = urg ? SIGURG : SIGRTMIN + 4; s <= SIGRTMAX;
		     s = s == SIGURG ? SIGRTMIN + 4 : s + 1) {
			if ((!any && sigismember(&blocked, s)) || take_signal(s) != 0)
				continue;
			sp.sig_unblocked = unblock(s, &blocked);
			sp.signo = s;
			sp.sig_installed = 1;
			return s == SIGURG;
		}
	}
	set_err("no free signal for the sampling timer: the program handles or ignores %s"
		"every real-time signal from SIGRTMIN+4", urg ? "SIGURG and " : "");
	return -1;
}

/*
** A stop on another thread than the sampled one, which blocked the signal until start
** unblocked it (sig_unblocked): only that thread can change its mask, so the signal is
** sent to it, and the handler there blocks it again as it returns (on_signal). Before,
** the signal stayed unblocked on that thread for good. Not when the thread has exited
** (tid_exited: its exit blocked it), nor when the program took the signal over (its
** handler is not to be run). A thread that restores a mask it saved before the handler
** ran unblocks it again: nothing can be done about that one.
*/
static void reblock_remote(void)
{
	if (!sp.sig_unblocked)
		return;
	sp.sig_unblocked = 0;
	if (!sp.sig_installed || !signal_ours() || atomic_load(&sp.tid_exited) == sp.tid)
		return;
	atomic_store(&sp.reblock_tid, sp.tid);
	pid_t tid = sp.tid;
	/* A thread that exited meanwhile (sampled_exit marks it before withdrawing) takes
	 * no signal: the re-block would stay pending for good, the handler kept in place. */
	if (syscall(SYS_tgkill, getpid(), sp.tid, sp.signo) != 0 ||
	    atomic_load(&sp.tid_exited) == tid)
		atomic_compare_exchange_strong(&sp.reblock_tid, &tid, 0);
}

/*
** Restores the previous handler. A timer signal already queued for the sampled thread can
** only be withdrawn by that thread (sigtimedwait); from any other thread, restoring a
** default disposition could let that signal kill the process, so the (inert) handler
** stays until the next stop on the sampled thread.
*/
static void release_signal(int blocked, const sigset_t *oldmask)
{
	if (!blocked) {
		reblock_remote();
		return;
	}
	/* A disposition the program set since is the program's to keep, and so are the
	 * signals pending for it. A re-block sent to another thread that has not taken it
	 * yet (reblock_remote) keeps the (inert) handler in place for it, as a stop on
	 * another thread does: restored, the default action would end the process. */
	if (!signal_ours()) {
		sp.sig_installed = 0;
	} else if (!atomic_load(&sp.reblock_tid)) {
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, sp.signo);
		struct timespec zero = { 0, 0 };
		while (sigtimedwait(&set, NULL, &zero) > 0)
			;
		sigaction(sp.signo, &sp.oldsa, NULL);
		sp.sig_installed = 0;
	}
	sigset_t mask = *oldmask;
	/* The program's mask as it was: start unblocked the signal (install_signal). */
	if (sp.sig_unblocked)
		sigaddset(&mask, sp.signo);
	sp.sig_unblocked = 0;
	pthread_sigmask(SIG_SETMASK, &mask, NULL);
}

static int arm_timer(void)
{
	char err[160];
	pthread_mutex_lock(&sp.timer_lock); /* the writer thread reads ticker and timer_ok */
	int rc = agent_ticker_arm(&sp.ticker, sp.tid, sp.signo, &sp, sp.interval_ns, err,
				  sizeof(err));
	int e = errno;
	sp.timer_ok = sp.ticker.kind != AGENT_TICKER_NONE || sp.ticker.fd >= 0;
	sp.timer_name = agent_ticker_name(&sp.ticker);
	pthread_mutex_unlock(&sp.timer_lock);
	if (rc != 0) {
		set_err("%s", err);
		errno = e;
		return -1;
	}
	return 0;
}

/* -- Start and stop ------------------------------------------------------------------- */

/* Ends sampling and joins the writer thread. `blocked`: the caller is the sampled thread
** and has blocked the signal, saving its mask in oldmask. */
static void teardown(int blocked, const sigset_t *oldmask)
{
	pthread_mutex_lock(&sp.timer_lock);
	if (sp.timer_ok)
		ticker_delete();
	pthread_mutex_unlock(&sp.timer_lock);
	while (atomic_load(&sp.busy)) {
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
	if (sp.wthread_ok) {
		atomic_store(&sp.wquit, 1);
		sem_post(&sp.sem);
		pthread_join(sp.wthread, NULL);
		sp.wthread_ok = 0;
	}
	release_signal(blocked, oldmask);
	if (sp.sem_ok) {
		sp.sem_ok = 0;
		sem_destroy(&sp.sem);
	}
}

/* The VM sampler and the loaded-objects table are shared with memprof's sampled mode:
 * released only when that does not use them. */
static void native_release(void)
{
	if (agent_memprof_uses_native())
		return;
	agent_objects_fini();
	agent_vm_detach();
}

static const char *mode_name(int mode)
{
	return mode == LUAPROF_SYSPROF_LEAF ? "L" : mode == LUAPROF_SYSPROF_CALLGRAPH ? "C" : "D";
}

/* C mode's extension records after the meta: TRACE and GC samples' stacks, traces' code. */
static void write_c_mode(struct lp_wbuf *w)
{
	agent_tstacks_write(w);
	agent_vm_tcodes_write(w);
}

/* The rest of the stream after sampling: what is left in the halves, the epilogue, the
 * extension. Only once the handler and the writer thread are done. */
static void finish_stream(const char *cause)
{
	drain_full();
	/* Objects loaded since the writer thread last looked: before the samples that asked
	 * for them, else after every sample (at their addresses the report takes the first
	 * names for the earlier samples too). */
	new_objects();
	emit_half(&sp.half[sp.active]);
	emit_pending();
	if (atomic_load(&sp.io_errno))
		return;

	char cmdline[4096], interval[32], dropped[32], duration[32], overruns[32], truncated[32];
	char paced[32], cpu[32], taken[32], signo[16];
	char handler[32], tlost[32], own[32];
	static char ffnames[8192];
	agent_cmdline(cmdline, sizeof(cmdline));
	agent_vm_ffnames(ffnames, sizeof(ffnames));
	snprintf(interval, sizeof(interval), "%llu", (unsigned long long)sp.interval_ns);
	snprintf(dropped, sizeof(dropped), "%llu", (unsigned long long)atomic_load(&sp.dropped));
	snprintf(overruns, sizeof(overruns), "%llu", (unsigned long long)atomic_load(&sp.overruns));
	snprintf(paced, sizeof(paced), "%llu", (unsigned long long)atomic_load(&sp.paced));
	snprintf(truncated, sizeof(truncated), "%llu",
		 (unsigned long long)atomic_load(&sp.truncated));
	snprintf(handler, sizeof(handler), "%llu", (unsigned long long)atomic_load(&sp.handler_ns));
	snprintf(own, sizeof(own), "%llu", (unsigned long long)atomic_load(&sp.own_ticks));
	agent_tstacks_drain();
	snprintf(tlost, sizeof(tlost), "%llu", (unsigned long long)agent_tstacks_lost());
	snprintf(duration, sizeof(duration), "%llu",
		 (unsigned long long)(sp.stopped_ns - sp.started_ns));
	char start[32];
	snprintf(start, sizeof(start), "%llu", (unsigned long long)sp.started_unix_ns);
	snprintf(cpu, sizeof(cpu), "%llu", (unsigned long long)sp.cpu_ns);
	char pcpu[32], delay[32];
	snprintf(pcpu, sizeof(pcpu), "%llu", (unsigned long long)sp.pcpu_ns);
	snprintf(delay, sizeof(delay), "%llu", (unsigned long long)sp.delay_ns);
	snprintf(taken, sizeof(taken), "%llu", (unsigned long long)atomic_load(&sp.sig_taken_ns));
	snprintf(signo, sizeof(signo), "%d", sp.signo);
#ifdef LP_UNWIND_SELFCHECK
	char usc_steps[32], usc_bad[32];
	agent_unwind_selfcheck(usc_steps, usc_bad);
#endif
	const char *meta[] = {
		"cmdline", cmdline,
		"interval_ns", interval,
		"clock", sp.clock == LUAPROF_CLOCK_WALL ? "wall" : "cpu",
		"timer", sp.timer_name ? sp.timer_name : "none",
		"mode", mode_name(sp.mode),
		"duration_ns", duration,
		"start_unix_ns", start,
		"dropped", dropped,
		"overruns", overruns,
		"paced", paced,
		"truncated", truncated,
		"handler_ns", handler,
		"agent_ticks", own,
		"trace_stacks_lost", tlost,
		"stopped_by", cause,
		"signal", signo,
		"agent", "luaprof " AGENT_VERSION " in-process",
		"vm", agent_vm_name(),
		"ffnames", ffnames,
#ifdef LP_UNWIND_SELFCHECK
		"unwind_compact_steps", usc_steps,
		"unwind_compact_bad", usc_bad,
#endif
		NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, /* the optional ones below */
		NULL, NULL, NULL,
	};
	size_t k = sizeof(meta) / sizeof(meta[0]) - 11;
	if (sp.cpu_ns) {
		meta[k++] = "thread_cpu_ns";
		meta[k++] = cpu;
	}
	if (sp.pcpu_ns) {
		meta[k++] = "process_cpu_ns";
		meta[k++] = pcpu;
	}
	if (sp.delay_ns) {
		meta[k++] = "run_delay_ns";
		meta[k++] = delay;
	}
	if (atomic_load(&sp.sig_taken_ns)) {
		meta[k++] = "signal_taken_ns";
		meta[k++] = taken;
	}
	char elsewhere[32];
	snprintf(elsewhere, sizeof(elsewhere), "%llu",
		 (unsigned long long)atomic_load(&sp.elsewhere));
	if (atomic_load(&sp.elsewhere)) {
		meta[k++] = "lua_elsewhere";
		meta[k++] = elsewhere;
	}
	struct lp_wbuf w;
	lp_wbuf_init(&w, sp.half[0].data, sp.halfcap, sync_writer, NULL);
	lp_write_sysprof_epilogue(&w);
	agent_write_extension(&w, sp.mode == LUAPROF_SYSPROF_CALLGRAPH ? write_c_mode : NULL, meta,
			      agent_memprof_running());
	lp_wbuf_flush(&w);
}

/* cause: meta stopped_by (program: an API call; exit; close: lua_close). */
static int stop_locked(int from_state, const char *cause)
{
	int on_sampled = gettid_raw() == sp.tid;
	sigset_t oldmask;
	sigemptyset(&oldmask);
	int blocked = on_sampled && sp.sig_installed;
	if (blocked) {
		/* No more samples on this thread from here on, queued ones included. */
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, sp.signo);
		pthread_sigmask(SIG_BLOCK, &set, &oldmask);
	}
	sp.stopped_ns = agent_now_ns();
	/* The sampled thread's clock, from any thread; gone with a thread that exited. */
	uint64_t cpu = sp.cpuclock_ok ? agent_clock_ns(sp.cpuclock) : 0;
	sp.cpu_ns = cpu > sp.cpu0_ns ? cpu - sp.cpu0_ns : 0;
	uint64_t pcpu = agent_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	sp.pcpu_ns = sp.pcpu0_ns && pcpu > sp.pcpu0_ns ? pcpu - sp.pcpu0_ns : 0;
	uint64_t delay = 0;
	sp.delay_ns = sp.delay_ok && !run_delay_ns(sp.tid, &delay) && delay > sp.delay0_ns
		? delay - sp.delay0_ns : 0;
	teardown(blocked, &oldmask);
	/* The Lua names of C functions (cnames.c) where no Lua call read them (lua.c's stops
	 * do): from the VM's memory, the handler done, when the VM's thread stands still:
	 * this one (exit's stop, from os.exit or C code on it; a C host's stop there) or one
	 * held in a terminating signal's handler (termstop.c). Not while it may run Lua code
	 * (a stop from another thread): the tables could change under the reads. */
	int cnames = sp.mode != LUAPROF_SYSPROF_DEFAULT && !agent_cnames_ready() &&
		     (on_sampled || agent_termstop_holds(sp.tid));
	if (cnames)
		agent_vm_cnames_scan();
	if (sp.mode != LUAPROF_SYSPROF_DEFAULT)
		finish_stream(cause);
	if (cnames)
		agent_cnames_clear();
	/* on_stop (record's: the file closed) before the frees: a terminating signal's stop
	 * (termstop.c) need not wait for them, which may wait for an allocator lock held by
	 * the thread the signal interrupted. */
	int rc = LUAPROF_PROFILE_SUCCESS;
	int e = atomic_load(&sp.io_errno);
	if (sp.on_stop && sp.on_stop(sp.ctx, sp.buf) != 0 && !e)
		e = errno ? errno : EIO;
	atomic_store(&sp.stop_tid, 0);
	agent_termstop_written();
	agent_tstacks_free();
	native_release();
	if (e) {
		set_err("cannot write the profile: %s", strerror(e));
		rc = LUAPROF_PROFILE_ERRIO;
	}
	atomic_store(&sp.state, ST_IDLE);
	errno = e;
	return rc;
}

/* Moves RUNNING or HALT to STOPPING; returns the old state or -1. The stopping thread is
 * named first (stop_tid, until the file is written): a terminating signal that interrupts
 * it there is taken once the file is written, and a stop or exit on another thread waits
 * for that (termstop.c, at_exit). */
static int claim_stop(void)
{
	long none = 0;
	if (!atomic_compare_exchange_strong(&sp.stop_tid, &none, (long)gettid_raw()))
		return -1; /* a stop under way */
	for (;;) {
		int st = atomic_load(&sp.state);
		if (st != ST_RUNNING && st != ST_HALT) {
			atomic_store(&sp.stop_tid, 0);
			agent_termstop_deferred(); /* a signal in between: no file to wait for */
			return -1;
		}
		if (atomic_compare_exchange_strong(&sp.state, &st, ST_STOPPING))
			return st;
	}
}

long agent_stop_tid(void)
{
	return atomic_load(&sp.stop_tid);
}

int agent_stop_wait(uint64_t max_ns)
{
	struct timespec step = { 0, 1000000 };
	for (uint64_t waited = 0; atomic_load(&sp.stop_tid); waited += 1000000) {
		if (waited >= max_ns)
			return -1;
		nanosleep(&step, NULL);
	}
	return 0;
}

int agent_block_signal(sigset_t *old)
{
	sigemptyset(old);
	/* Only a running profile's handler walks stacks (a left-over inert handler returns
	 * at once); profiles start and stop on this thread, not during an allocation. */
	if (!sp.sig_installed || atomic_load(&sp.state) != ST_RUNNING)
		return 0;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sp.signo);
	return pthread_sigmask(SIG_BLOCK, &set, old) == 0;
}

int agent_sampling_elsewhere(void)
{
	int st = atomic_load(&sp.state);
	/* A sampled thread that has exited takes no signal (its timer went with it). */
	return (st == ST_RUNNING || st == ST_HALT) && gettid_raw() != sp.tid &&
	       atomic_load(&sp.tid_exited) != sp.tid &&
	       syscall(SYS_tgkill, getpid(), sp.tid, 0) == 0;
}

int agent_stop_any(const char *cause)
{
	int st = claim_stop();
	if (st < 0)
		return LUAPROF_PROFILE_ERRRUN;
	return stop_locked(st, cause);
}

uint64_t agent_run_id(void)
{
	return sp.run_id;
}

void agent_writer_wake(void)
{
	/* The handler, while the writer runs; and a walk outside it (the unwinder's priming
	 * walk at start, memprof's captures) when there may be no writer: nothing to wake. */
	if (sp.sem_ok)
		sem_post(&sp.sem);
}

int agent_running(void)
{
	int st = atomic_load(&sp.state);
	return st == ST_RUNNING || st == ST_HALT;
}

static int validate(const struct luaprof_sysprof_options *opt, luaprof_sysprof_writer writer,
		    luaprof_sysprof_on_stop on_stop)
{
	if (opt->mode > LUAPROF_SYSPROF_CALLGRAPH) {
		set_err("profiler mode must be 'D', 'L' or 'C'");
		return -1;
	}
	if (opt->interval_ns && opt->interval_ns < MIN_INTERVAL_NS) {
		set_err("interval_ns must be at least 100000 (0.1 ms)");
		return -1;
	}
	/* Tarantool's message, although 1 ms is accepted. */
	if (!opt->interval_ns && opt->interval == 0) {
		set_err("profiler interval must be greater than 1");
		return -1;
	}
	if (!opt->interval_ns && opt->interval > UINT64_MAX / 1000000ull) {
		set_err("profiler interval must be at most %llu (ms)",
			(unsigned long long)(UINT64_MAX / 1000000ull));
		return -1;
	}
	if (opt->clock > LUAPROF_CLOCK_WALL) {
		set_err("unknown profiler clock");
		return -1;
	}
	char err[160];
	if (lp_timerenv_read(err, sizeof(err)) == LP_TIMERENV_BAD) {
		set_err("%s", err);
		return -1;
	}
	if (opt->mode != LUAPROF_SYSPROF_DEFAULT) {
		if (!opt->buf || opt->len < LUAPROF_SYSPROF_BUF_MIN) {
			set_err("the stream buffer must hold at least 64 KiB");
			return -1;
		}
		if (!writer || !on_stop) {
			set_err("no writer or on_stop callback configured");
			return -1;
		}
	}
	return 0;
}

/* Writes the symbol table and the sysprof prologue synchronously, before sampling. */
static int write_header(void)
{
	struct lp_wbuf w;
	lp_wbuf_init(&w, sp.half[0].data, sp.halfcap, sync_writer, NULL);
	lp_write_symtab_prologue(&w);
	/* Lua functions and traces are named by symbol events in the sample stream the
	 * first time a sample meets them (vmsample.c). */
	objs_adds = agent_objects_changes();
	memset(objs_ever, 0, sizeof(objs_ever));
	objs_never = 0;
	agent_maps_reset(agent_memprof_running());
	agent_maps_note();
	agent_symtab_cfuncs(&w, &objs_seen, AGENT_SYMS_SYMTAB);
	agent_vm_symbols(&w);
	lp_write_symtab_final(&w);
	lp_write_sysprof_prologue_ext(&w);
	lp_wbuf_flush(&w);
	return atomic_load(&sp.io_errno) ? -1 : 0;
}

/* A profile still running at exit() (os.exit, or a host that never stops it) is finished
 * so that the file is complete. */
/* A stop under way on another thread (a terminating signal's, termstop.c) is waited for
 * until its file is written: exit went on and ended the process under it, the profile cut
 * short (1 run in 4 of a program exiting as its other thread took SIGTERM). That signal
 * then takes its course here (agent_termstop_exit). */
static void at_exit(void)
{
	uint64_t run = sp.run_id;
	int rc = agent_stop_any(agent_termstop_pending() ? "signal" : "exit");
	if (rc == LUAPROF_PROFILE_ERRRUN)
		(void)agent_stop_wait(AGENT_STOP_WAIT_NS);
	agent_record_stopped(0, run, rc, errno);
	agent_termstop_exit(0);
}

/* The timer's lock is held across fork(2), so that a child does not inherit it taken. */
static void at_fork_prepare(void)
{
	pthread_mutex_lock(&sp.timer_lock);
}

static void at_fork_parent(void)
{
	pthread_mutex_unlock(&sp.timer_lock);
}

/* A forked child has no timer and no writer thread: it is simply not profiling. */
static void at_fork_child(void)
{
	atomic_store(&sp.state, ST_IDLE);
	atomic_store(&sp.busy, 0); /* the parent's handler, running on another thread */
	atomic_store(&sp.stop_tid, 0); /* a stop on another thread of the parent */
	if (sp.timer_ok)
		agent_ticker_forget(&sp.ticker);
	sp.timer_ok = 0;
	sp.wthread_ok = 0;
	sp.sem_ok = 0;
	pthread_mutex_unlock(&sp.timer_lock);
}

/*
** The sampled thread says it is exiting, from its thread-specific data's destructor, which
** runs before its exit wakes pthread_join: a capture on another thread (memprof) must
** then walk. The kernel's view (tgkill) lags: the task stays found after the join returns
** until it is released, milliseconds under load (230 of 5,835 sampled allocations lost
** after a join in one CI run). Its signal is blocked first: after the mark, no handler may
** run on it beside a capture. Threads not made by pthread_create run no destructor: for
** those the kernel's view is still the test.
*/
static pthread_key_t exit_key;
static int exit_key_ok;

static void sampled_exit(void *arg)
{
	(void)arg;
	pid_t me = gettid_raw();
	if (me != sp.tid)
		return;
	if (sp.sig_installed) {
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, sp.signo);
		pthread_sigmask(SIG_BLOCK, &set, NULL);
	}
	atomic_store(&sp.tid_exited, me);
	/* A re-block on its way here is never delivered now (reblock_remote). */
	atomic_compare_exchange_strong(&sp.reblock_tid, &me, 0);
}

static void register_once(void)
{
	atexit(at_exit);
	pthread_atfork(at_fork_prepare, at_fork_parent, at_fork_child);
	exit_key_ok = pthread_key_create(&exit_key, sampled_exit) == 0;
}

/*
** A start names its thread as a stop does (stop_tid) until it is done, its failure's file
** closed: a terminating signal that interrupts it meanwhile (record's stop on one,
** termstop.c) is held, then delivered again (start_leave), and stops a whole profile
** (its header written, the timer armed) or finds none. Before, the signal's stop found the
** profile being set up, gave up, and the process died at once: the file empty or its
** symbol table cut. A signal's stop on another thread waits for the name to go
** (agent_stop_wait), then stops the profile the start left running. Named with the
** signals blocked from the state's change to the name: a signal in between would find a
** profile being set up and no one named. A stop's transient claim of the name (claim_stop,
** on another thread, finding no profile) is waited out.
*/
static int start_enter(void)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int st = ST_IDLE, rc = -1;
	if (atomic_compare_exchange_strong(&sp.state, &st, ST_STOPPING)) {
		long none = 0, me = (long)gettid_raw();
		while (!atomic_compare_exchange_weak(&sp.stop_tid, &none, me)) {
			none = 0;
			sched_yield();
		}
		agent_termstop_newfile(NULL); /* a signal is held for the start from here */
		rc = 0;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return rc;
}

/* After start_setup: the state is RUNNING or IDLE by now. */
static void start_leave(void)
{
	atomic_store(&sp.stop_tid, 0);
	agent_termstop_redeliver();
}

static int start_setup(struct lua_State *L, const struct luaprof_sysprof_options *opt,
		       luaprof_sysprof_writer writer, luaprof_sysprof_on_stop on_stop);

int agent_start(struct lua_State *L, const struct luaprof_sysprof_options *opt,
		luaprof_sysprof_writer writer, luaprof_sysprof_on_stop on_stop)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, register_once);
	sp.err[0] = '\0';
	if (start_enter() != 0) {
		set_err("profiler is running already");
		if (writer == agent_pfile_write)
			agent_pfile_refused(opt->ctx);
		if (on_stop)
			on_stop(opt->ctx, opt->buf);
		return LUAPROF_PROFILE_ERRRUN;
	}
	int rc = start_setup(L, opt, writer, on_stop);
	int e = errno;
	start_leave();
	errno = e;
	return rc;
}

/* agent_start once the state is ST_STOPPING, which doubles as "being set up": the handler
 * ignores it. */
static int start_setup(struct lua_State *L, const struct luaprof_sysprof_options *opt,
		       luaprof_sysprof_writer writer, luaprof_sysprof_on_stop on_stop)
{
	int rc = LUAPROF_PROFILE_ERRUSE, e = 0;
	if (validate(opt, writer, on_stop) != 0)
		goto fail_early;

	sp.run_id++;
	sp.mode = opt->mode;
	sp.clock = opt->clock;
	sp.interval_ns = opt->interval_ns ? opt->interval_ns : opt->interval * 1000000ull;
	sp.ticks_max = sp.interval_ns < TICKS_MAX_NS ? TICKS_MAX_NS / sp.interval_ns : 1;
	sp.writer = writer;
	sp.on_stop = on_stop;
	sp.backtracer = sp.cfg_backtracer;
	sp.ctx = opt->ctx;
	sp.buf = opt->buf;
	sp.tid = gettid_raw();
	atomic_store(&sp.tid_exited, 0);
	/* Any non-null value: the destructor runs only for one. */
	if (exit_key_ok)
		(void)pthread_setspecific(exit_key, &sp);
	sp.cpuclock_ok = pthread_getcpuclockid(pthread_self(), &sp.cpuclock) == 0;
	sp.cpu_ns = sp.pcpu_ns = sp.delay_ns = 0;
	atomic_store(&sp.sig_taken_ns, 0);
	/* Zeroed as the handler counts, so that a report read meanwhile is consistent. */
	atomic_fetch_add_explicit(&sp.cnt_seq, 1, memory_order_acq_rel);
	for (int i = 0; i < LP_VMST__MAX; i++)
		atomic_store(&sp.counters[i], 0);
	atomic_store(&sp.samples, 0);
	atomic_store(&sp.dropped, 0);
	atomic_store(&sp.overruns, 0);
	atomic_store(&sp.paced, 0);
	atomic_store(&sp.own_ticks, 0);
	atomic_fetch_add_explicit(&sp.cnt_seq, 1, memory_order_acq_rel);
	hs_resume_ns = 0;
	atomic_store(&sp.truncated, 0);
	atomic_store(&sp.elsewhere, 0);
	atomic_store(&sp.bytes, 0);
	atomic_store(&sp.handler_ns, 0);
	atomic_store(&sp.io_errno, 0);
	atomic_store(&sp.flush_req, 0);
	atomic_store(&sp.objs_req, 0);
	objs_npend = 0;
	atomic_store(&sp.wquit, 0);
	sp.stopped_ns = 0;
	sp.seq = 0;
	sp.active = 0;
	if (opt->mode != LUAPROF_SYSPROF_DEFAULT) {
		sp.halfcap = opt->len / 2;
		for (int i = 0; i < 2; i++) {
			sp.half[i].data = opt->buf + i * sp.halfcap;
			sp.half[i].len = 0;
			sp.half[i].seq = 0;
			sp.half[i].objs_first = 0;
			atomic_store(&sp.half[i].full, 0);
		}
	}

	if (agent_memprof_uses_native() && !agent_vm_attached_to(L)) {
		set_err("the memory profiler samples another Lua state with the "
			"same stack sampler; stop it first");
		goto fail_early;
	}
	if (agent_vm_attach(L, sp.err, sizeof(sp.err)) != 0)
		goto fail_early;
	int anchored = agent_lua_anchor(L, sp.run_id);
	if (anchored == AGENT_LUA_CLOSING) {
		rc = LUAPROF_PROFILE_ERRUSE;
		e = EINVAL;
		set_err("the Lua state is closing (its finalizers run): nothing would stop "
			"this profile");
		goto fail_native;
	}
	if (anchored != 0) {
		rc = LUAPROF_PROFILE_ERRMEM;
		e = ENOMEM;
		set_err("not enough memory");
		goto fail_native;
	}
	if (agent_objects_init(sp.err, sizeof(sp.err)) != 0) {
		rc = LUAPROF_PROFILE_ERRMEM;
		e = ENOMEM;
		goto fail_native;
	}
	if (opt->mode == LUAPROF_SYSPROF_CALLGRAPH && !sp.backtracer &&
	    agent_unwind_init(sp.err, sizeof(sp.err)) != 0) {
		e = ENOTSUP;
		goto fail_unwind; /* ERRUSE: C mode needs libunwind, and the message says so */
	}
	/* L mode takes the unwinder when it can (libunwind present), only to walk from a C
	 * helper of the interpreter to the VM frame it returns to; without it those samples
	 * keep no Lua frame. */
	sp.leaf_walk = opt->mode == LUAPROF_SYSPROF_LEAF &&
		       agent_unwind_init(sp.err, sizeof(sp.err)) == 0;
	sp.err[0] = '\0';
	hs_ntrace = hs_ngc = hs_njit = hs_nexit = 0;
	if (opt->mode == LUAPROF_SYSPROF_CALLGRAPH && agent_tstacks_init() != 0) {
		rc = LUAPROF_PROFILE_ERRMEM;
		e = ENOMEM;
		set_err("not enough memory");
		goto fail_unwind;
	}
	if (opt->mode != LUAPROF_SYSPROF_DEFAULT) {
		if (write_header() != 0) {
			rc = LUAPROF_PROFILE_ERRIO;
			e = atomic_load(&sp.io_errno);
			set_err("cannot write the profile: %s", strerror(e));
			goto fail_unwind;
		}
		if (sem_init(&sp.sem, 0, 0) != 0) {
			rc = LUAPROF_PROFILE_ERRMEM;
			e = errno;
			goto fail_unwind;
		}
		sp.sem_ok = 1;
		if ((e = pthread_create(&sp.wthread, NULL, writer_main, NULL)) != 0) {
			set_err("cannot start the writer thread: %s", strerror(e));
			rc = LUAPROF_PROFILE_ERRMEM;
			goto fail_unwind;
		}
		sp.wthread_ok = 1;
	}
	{
		char err[160];
		int posix_only = lp_timerenv_read(err, sizeof(err)) == LP_TIMERENV_POSIX;
		int perf = agent_ticker_prepare(&sp.ticker, sp.clock == LUAPROF_CLOCK_WALL,
						posix_only, sp.tid, sp.interval_ns);
		int urg = install_signal(perf);
		if (urg != 1)
			agent_ticker_unprepare(&sp.ticker);
		if (urg < 0) {
			e = EBUSY;
			goto fail_unwind;
		}
	}
	sp.started_ns = agent_now_ns();
	sp.started_unix_ns = agent_unix_now_ns();
	/* From the timer on: the stream's header and the writer's start are not samples'. */
	sp.cpu0_ns = sp.cpuclock_ok ? agent_clock_ns(sp.cpuclock) : 0;
	sp.pcpu0_ns = agent_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	sp.delay_ok = !run_delay_ns(sp.tid, &sp.delay0_ns);
	atomic_store(&sp.state, ST_RUNNING);
	if (arm_timer() != 0) {
		e = errno;
		atomic_store(&sp.state, ST_STOPPING);
		sigset_t oldmask;
		sigset_t set;
		sigemptyset(&set);
		sigaddset(&set, sp.signo);
		pthread_sigmask(SIG_BLOCK, &set, &oldmask);
		teardown(1, &oldmask);
		goto fail_native;
	}
	return LUAPROF_PROFILE_SUCCESS;

fail_unwind:
	agent_tstacks_free();
	if (sp.wthread_ok) {
		atomic_store(&sp.wquit, 1);
		sem_post(&sp.sem);
		pthread_join(sp.wthread, NULL);
		sp.wthread_ok = 0;
	}
	if (sp.sem_ok) {
		sp.sem_ok = 0;
		sem_destroy(&sp.sem);
	}
fail_native:
	native_release();
	goto fail_cb;
fail_early:
	e = EINVAL;
fail_cb:
	if (writer == agent_pfile_write)
		agent_pfile_refused(opt->ctx); /* its file gone before a held signal acts */
	if (on_stop)
		on_stop(opt->ctx, opt->buf);
	atomic_store(&sp.state, ST_IDLE);
	errno = e;
	return rc;
}

/* -- Public C API ----------------------------------------------------------------------- */

LUAPROF_API int luaprof_sysprof_set_writer(luaprof_sysprof_writer writer)
{
	if (atomic_load(&sp.state) != ST_IDLE || !writer)
		return LUAPROF_PROFILE_ERRUSE;
	sp.cfg_writer = writer;
	return LUAPROF_PROFILE_SUCCESS;
}

LUAPROF_API int luaprof_sysprof_set_on_stop(luaprof_sysprof_on_stop on_stop)
{
	if (atomic_load(&sp.state) != ST_IDLE || !on_stop)
		return LUAPROF_PROFILE_ERRUSE;
	sp.cfg_on_stop = on_stop;
	return LUAPROF_PROFILE_SUCCESS;
}

LUAPROF_API int luaprof_sysprof_set_backtracer(luaprof_sysprof_backtracer backtracer)
{
	if (atomic_load(&sp.state) != ST_IDLE)
		return LUAPROF_PROFILE_ERRUSE;
	sp.cfg_backtracer = backtracer;
	return LUAPROF_PROFILE_SUCCESS;
}

LUAPROF_API int luaprof_sysprof_start(struct lua_State *L, const struct luaprof_sysprof_options *opt)
{
	/* As luaprof_memprof_start: refused, not a crash (no ctx or buf for on_stop). */
	if (!opt) {
		set_err("no options given");
		errno = EINVAL;
		return LUAPROF_PROFILE_ERRUSE;
	}
	return agent_start(L, opt, sp.cfg_writer, sp.cfg_on_stop);
}

LUAPROF_API int luaprof_sysprof_stop(struct lua_State *L)
{
	int st = atomic_load(&sp.state);
	if (st != ST_RUNNING && st != ST_HALT) {
		set_err("profiler is not running");
		return LUAPROF_PROFILE_ERRRUN;
	}
	/* A read of L's global state, not an API call: stop may come from another thread
	 * while the VM runs on its own (pushing onto L's stack from here corrupted it). */
	if (!agent_vm_attached_to(L)) {
		set_err("the profile runs in another Lua state");
		return LUAPROF_PROFILE_ERRUSE;
	}
	if ((st = claim_stop()) < 0) {
		set_err("profiler is not running");
		return LUAPROF_PROFILE_ERRRUN;
	}
	return stop_locked(st, "program");
}

LUAPROF_API int luaprof_sysprof_report(struct luaprof_sysprof_counters *c)
{
	uint64_t v[LP_VMST__MAX], n;
	if (!c)
		return LUAPROF_PROFILE_ERRUSE;
	for (;;) {
		uint32_t s1 = atomic_load_explicit(&sp.cnt_seq, memory_order_acquire);
		if (s1 & 1) {
			/* The handler is counting on another thread; it takes nanoseconds. */
			sched_yield();
			continue;
		}
		for (int i = 0; i < LP_VMST__MAX; i++)
			v[i] = atomic_load_explicit(&sp.counters[i], memory_order_relaxed);
		n = atomic_load_explicit(&sp.samples, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&sp.cnt_seq, memory_order_relaxed) == s1)
			break;
	}
	c->vmst_interp = v[LP_VMST_INTERP];
	c->vmst_lfunc = v[LP_VMST_LFUNC];
	c->vmst_ffunc = v[LP_VMST_FFUNC];
	c->vmst_cfunc = v[LP_VMST_CFUNC];
	c->vmst_gc = v[LP_VMST_GC];
	c->vmst_exit = v[LP_VMST_EXIT];
	c->vmst_record = v[LP_VMST_RECORD];
	c->vmst_opt = v[LP_VMST_OPT];
	c->vmst_asm = v[LP_VMST_ASM];
	c->vmst_trace = v[LP_VMST_TRACE];
	c->samples = n;
	return LUAPROF_PROFILE_SUCCESS;
}

LUAPROF_API int luaprof_sysprof_stats(struct luaprof_sysprof_stats *s)
{
	if (!s)
		return LUAPROF_PROFILE_ERRUSE;
	s->dropped = atomic_load(&sp.dropped);
	s->overruns = atomic_load(&sp.overruns);
	s->paced = atomic_load(&sp.paced);
	s->truncated = atomic_load(&sp.truncated);
	s->bytes = atomic_load(&sp.bytes);
	s->handler_ns = atomic_load(&sp.handler_ns);
	s->started_ns = sp.started_ns;
	s->stopped_ns = sp.stopped_ns;
	return LUAPROF_PROFILE_SUCCESS;
}

LUAPROF_API const char *luaprof_sysprof_error(void)
{
	return sp.err;
}

void agent_sysprof_own_work(int on)
{
	atomic_store(&sp.own_work, on ? gettid_raw() : 0);
}
