/*
** C host for agent_api.sh: embeds the Debian libluajit-5.1.so, links build/luaprof.so and
** exercises the C API (include/luaprof.h) the way an embedder would:
**   - the timer signal: a free real-time signal, SIGPROF untouched, restored at stop (at
**     the next stop on the sampled thread when stopped from another thread); a sampled
**     thread that blocked it has it blocked again by a stop from another thread;
**   - Tarantool's validation codes (mode 0x40, no buffer, interval 0 -> ERRUSE; start twice,
**     stop twice -> ERRRUN), on_stop called on a failed start, stop from another VM;
**   - a CALLGRAPH profile through a custom writer into memory, parsed back with the stream
**     library: complete, as many samples as the counters say minus the dropped ones;
**   - a custom backtracer: frames of the handler are skipped by the interrupted IP, and a
**     backtracer that cannot be aligned leaves the leaf frame only (counted as truncated);
**   - lua_close while running, through the Lua API and through the C API: no crash, the
**     profile is finished (epilogue and extension), on_stop runs, the next start works;
**   - two VMs on one thread: the CPU profiler and sampled memprof refuse to start in a
**     VM other than the one whose stacks the other samples; exact memprof starts;
**   - the collector's samples: under the Lua code that ran a step, but with no Lua frame
**     when C code of the host allocates after a coroutine it resumed yielded (the VM's
**     current thread is then still the coroutine, which did not allocate).
** Prints "FAIL: ..." lines; exit status 1 if any.
*/
#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "luaprof.h"
#include "stream/input.h"
#include "stream/parse.h"

static int fails;

#define CHECK(cond, ...)                                   \
	do {                                               \
		if (!(cond)) {                             \
			fails++;                           \
			printf("FAIL: line %d: ", __LINE__); \
			printf(__VA_ARGS__);               \
			putchar('\n');                     \
		}                                          \
	} while (0)

/* -- A writer into memory --------------------------------------------------------------- */

static struct {
	uint8_t *data;
	size_t len, cap;
	int on_stop_calls;
	void *last_ctx;
} sink;

/* While set, the writer waits (a slow disk): the profile's buffer fills and samples are
 * dropped. */
static atomic_int sink_hold;

static size_t mem_writer(const void **data, size_t len, void *ctx)
{
	while (atomic_load(&sink_hold))
		usleep(1000);
	if (sink.len + len > sink.cap) {
		size_t cap = (sink.len + len) * 2;
		uint8_t *p = realloc(sink.data, cap);
		if (!p)
			return 0;
		sink.data = p;
		sink.cap = cap;
	}
	memcpy(sink.data + sink.len, *data, len);
	sink.len += len;
	return len;
}

static int mem_on_stop(void *ctx, uint8_t *buf)
{
	sink.on_stop_calls++;
	sink.last_ctx = ctx;
	return 0;
}

struct parsed {
	uint64_t samples, host_frames, one_host_frame, lua_frames, gc_samples, gc_pairs;
	uint64_t cut_marked; /* samples whose host stack ends in LP_HOST_CUT */
	int complete, extension, status;
};

static int on_gsample(void *ctx, uint64_t ordinal, uint64_t id)
{
	struct parsed *p = ctx;
	p->gc_pairs++;
	return 0;
}

static int on_sample(void *ctx, const struct lp_sys_sample *s)
{
	struct parsed *p = ctx;
	p->samples++;
	p->gc_samples += s->vmstate == LP_VMST_GC;
	/* A host stack cut short ends in LP_HOST_CUT, which is no frame. */
	size_t nh = s->nhost;
	int cut = nh && s->host[nh - 1] == LP_HOST_CUT;
	nh -= (size_t)cut;
	p->cut_marked += (uint64_t)cut;
	p->host_frames += nh;
	p->lua_frames += s->nlua;
	if (s->vmstate != LP_VMST_TRACE && nh == 1)
		p->one_host_frame++;
	return 0;
}

/* Parses a stream held in memory with handlers h; the parser's status. */
static int parse_mem(const uint8_t *data, size_t len, const struct lp_parse_handlers *h,
		     struct lp_parse_stats *st)
{
	struct lp_input in;
	lp_input_open_mem(&in, data, len, "agent_host");
	int rc = lp_parse_stream(&in, h, st);
	lp_input_close(&in);
	return rc;
}

static struct parsed parse_bytes(const uint8_t *data, size_t len)
{
	struct parsed p = { 0 };
	struct lp_parse_handlers h = { .ctx = &p, .sys_sample = on_sample, .ext_gsample = on_gsample };
	struct lp_parse_stats st;
	p.status = parse_mem(data, len, &h, &st);
	p.complete = st.complete;
	p.extension = st.extension;
	return p;
}

static struct parsed parse_file(const char *path)
{
	struct parsed p = { 0 };
	FILE *f = fopen(path, "rb");
	if (!f) {
		p.status = -1;
		return p;
	}
	static uint8_t buf[64 << 20];
	size_t n = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	return parse_bytes(buf, n);
}

/* -- Helpers ------------------------------------------------------------------------------ */

static lua_State *new_state(void)
{
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	return L;
}

/* Runs Lua code for about secs seconds of CPU. */
static void burn(lua_State *L, double secs, int jit)
{
	char code[512];
	snprintf(code, sizeof(code),
		 "%s local function fib(n) if n < 2 then return n end return fib(n-1)+fib(n-2) end "
		 "local t = os.clock() while os.clock() - t < %g do fib(18) end",
		 jit ? "" : "jit.off() jit.flush()", secs);
	if (luaL_dostring(L, code) != 0) {
		fails++;
		printf("FAIL: Lua: %s\n", lua_tostring(L, -1));
		lua_pop(L, 1);
	}
}

static uint64_t sum(const struct luaprof_sysprof_counters *c)
{
	return c->vmst_interp + c->vmst_lfunc + c->vmst_ffunc + c->vmst_cfunc + c->vmst_gc +
	       c->vmst_exit + c->vmst_record + c->vmst_opt + c->vmst_asm + c->vmst_trace;
}

static uint8_t stream_buf[1 << 20];

/* -- Backtracers ------------------------------------------------------------------------- */

/* glibc's backtrace(): starts inside the handler, so the agent has to find the interrupted
 * frame in it. Primed before use (its first call loads libgcc). */
static void glibc_backtracer(void *(*frame_writer)(int, void *))
{
	void *pcs[128];
	int n = backtrace(pcs, 128);
	for (int i = 0; i < n; i++)
		if (!frame_writer(i, pcs[i]))
			return;
}

/* Frames that never contain the interrupted instruction. */
static void bogus_backtracer(void *(*frame_writer)(int, void *))
{
	frame_writer(0, (void *)&bogus_backtracer);
	frame_writer(1, (void *)&glibc_backtracer);
}

/* -- Tests ------------------------------------------------------------------------------- */

static volatile sig_atomic_t taken_hits;
static void taken_handler(int sig)
{
	taken_hits++;
}

/* The agent takes a real-time signal nobody handles, and gives it back at stop. */
static void test_signals(void)
{
	struct sigaction sa, before[64], after;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = taken_handler;
	sigaction(SIGRTMIN + 4, &sa, NULL);
	sigaction(SIGRTMIN + 5, &sa, NULL);
	int nsig = SIGRTMAX - SIGRTMIN + 1;
	for (int i = 0; i < nsig && i < 64; i++)
		sigaction(SIGRTMIN + i, NULL, &before[i]);
	struct sigaction prof_before, prof_after;
	sigaction(SIGPROF, NULL, &prof_before);

	lua_State *L = new_state();
	struct luaprof_sysprof_options o = { .mode = LUAPROF_SYSPROF_DEFAULT, .interval = 1,
					     .clock = LUAPROF_CLOCK_WALL };
	CHECK(luaprof_sysprof_start(L, &o) == 0, "start D: %s", luaprof_sysprof_error());
	int used = -1;
	for (int i = 0; i < nsig && i < 64; i++) {
		sigaction(SIGRTMIN + i, NULL, &after);
		if (after.sa_handler != before[i].sa_handler)
			used = i;
	}
	sigaction(SIGPROF, NULL, &prof_after);
	CHECK(prof_after.sa_handler == prof_before.sa_handler, "SIGPROF left alone");
	CHECK(used > 5, "the agent took SIGRTMIN+%d; +4 and +5 were handled already", used);
	burn(L, 0.2, 1);
	CHECK(luaprof_sysprof_stop(L) == 0, "stop D");
	struct luaprof_sysprof_counters c;
	luaprof_sysprof_report(&c);
	CHECK(c.samples > 50, "samples with +4/+5 taken: %llu", (unsigned long long)c.samples);
	CHECK(taken_hits == 0, "the program's handlers got %d agent signals", (int)taken_hits);
	for (int i = 0; i < nsig && i < 64; i++) {
		sigaction(SIGRTMIN + i, NULL, &after);
		/* glibc adds its SA_RESTORER trampoline to whatever it installs. */
		int mask = ~0x04000000;
		CHECK(after.sa_handler == before[i].sa_handler &&
		      (after.sa_flags & mask) == (before[i].sa_flags & mask),
		      "SIGRTMIN+%d restored after stop: flags %#x, were %#x", i, after.sa_flags,
		      before[i].sa_flags);
	}
	lua_close(L);
	signal(SIGRTMIN + 4, SIG_DFL);
	signal(SIGRTMIN + 5, SIG_DFL);
}

static void *stop_thread(void *L)
{
	return (void *)(intptr_t)luaprof_sysprof_stop(L);
}

/* Stop from another thread than the sampled one: the profile ends; a timer signal may
 * still be queued for the sampled thread, so the agent's (inert) handler stays installed
 * until a stop on the sampled thread gives the original one back. */
static void test_stop_other_thread(void)
{
	struct sigaction before[64], after;
	int nsig = SIGRTMAX - SIGRTMIN + 1;
	for (int i = 0; i < nsig && i < 64; i++)
		sigaction(SIGRTMIN + i, NULL, &before[i]);
	lua_State *L = new_state();
	struct luaprof_sysprof_options o = { .mode = LUAPROF_SYSPROF_DEFAULT, .interval = 1,
					     .clock = LUAPROF_CLOCK_WALL };
	CHECK(luaprof_sysprof_start(L, &o) == 0, "start: %s", luaprof_sysprof_error());
	burn(L, 0.1, 1);
	pthread_t th;
	void *rc = NULL;
	pthread_create(&th, NULL, stop_thread, L);
	pthread_join(th, &rc);
	CHECK((intptr_t)rc == 0, "stop from another thread: %d", (int)(intptr_t)rc);
	burn(L, 0.1, 1); /* queued signals, if any, land in the inert handler */
	CHECK(luaprof_sysprof_start(L, &o) == 0, "restart: %s", luaprof_sysprof_error());
	burn(L, 0.1, 1);
	CHECK(luaprof_sysprof_stop(L) == 0, "stop on the sampled thread");
	for (int i = 0; i < nsig && i < 64; i++) {
		sigaction(SIGRTMIN + i, NULL, &after);
		CHECK(after.sa_handler == before[i].sa_handler, "SIGRTMIN+%d restored", i);
	}
	lua_close(L);
}

/* The signals blocked in a but not in b. */
static int newly_unblocked(const sigset_t *a, const sigset_t *b, int *which)
{
	int n = 0;
	for (int s = 1; s <= SIGRTMAX; s++) {
		if (sigismember(a, s) == 1 && sigismember(b, s) != 1) {
			n++;
			*which = s;
		}
	}
	return n;
}

struct blocked_run {
	lua_State *L;
	sem_t ready, stopped;
};

/* The thread that blocks every signal (dnsjit's script thread): starts, lets main stop
 * from its own thread, then checks its own mask; twice, the second a restart over the
 * handler the first stop left in place (it must sample again). */
static void *blocked_thread(void *arg)
{
	struct blocked_run *b = arg;
	sigset_t all, before, during, after;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, NULL);
	pthread_sigmask(SIG_BLOCK, NULL, &before);
	struct luaprof_sysprof_options o = { .mode = LUAPROF_SYSPROF_DEFAULT, .interval = 1,
					     .clock = LUAPROF_CLOCK_WALL };
	for (int round = 1; round <= 2; round++) {
		int signo = 0, left = 0;
		CHECK(luaprof_sysprof_start(b->L, &o) == 0, "blocked thread, start %d: %s", round,
		      luaprof_sysprof_error());
		pthread_sigmask(SIG_BLOCK, NULL, &during);
		CHECK(newly_unblocked(&before, &during, &signo) == 1 && signo,
		      "start %d on a thread blocking every signal unblocks one", round);
		burn(b->L, 0.1, 1);
		struct luaprof_sysprof_counters c;
		luaprof_sysprof_report(&c);
		CHECK(c.samples > 0, "start %d on a thread blocking every signal: no sample", round);
		sem_post(&b->ready);
		sem_wait(&b->stopped);
		pthread_sigmask(SIG_BLOCK, NULL, &after);
		CHECK(newly_unblocked(&before, &after, &left) == 0,
		      "stop %d from another thread left signal %d unblocked on the sampled thread "
		      "(which blocked it)", round, left);
	}
	return NULL;
}

/* A stop from another thread than the sampled one, which blocked every signal: its mask
 * is restored (the signal stayed unblocked there for good); and a later profile on a
 * thread that blocks nothing does not leave the signal blocked there at its stop (it did:
 * the stop on another thread left the first start's "unblocked it" behind). */
static void test_stop_other_thread_blocked(void)
{
	struct blocked_run b;
	b.L = new_state();
	sem_init(&b.ready, 0, 0);
	sem_init(&b.stopped, 0, 0);
	pthread_t th;
	pthread_create(&th, NULL, blocked_thread, &b);
	for (int round = 1; round <= 2; round++) {
		sem_wait(&b.ready);
		CHECK(luaprof_sysprof_stop(b.L) == 0, "stop %d from another thread: %s", round,
		      luaprof_sysprof_error());
		sem_post(&b.stopped);
	}
	pthread_join(th, NULL);
	sigset_t before, after;
	pthread_sigmask(SIG_BLOCK, NULL, &before);
	struct luaprof_sysprof_options o = { .mode = LUAPROF_SYSPROF_DEFAULT, .interval = 1,
					     .clock = LUAPROF_CLOCK_WALL };
	CHECK(luaprof_sysprof_start(b.L, &o) == 0, "start on main: %s", luaprof_sysprof_error());
	burn(b.L, 0.05, 1);
	CHECK(luaprof_sysprof_stop(b.L) == 0, "stop on main: %s", luaprof_sysprof_error());
	pthread_sigmask(SIG_BLOCK, NULL, &after);
	int which = 0;
	CHECK(newly_unblocked(&after, &before, &which) == 0,
	      "a profile on main after one on a blocking thread left signal %d blocked", which);
	lua_close(b.L);
	sem_destroy(&b.ready);
	sem_destroy(&b.stopped);
}

static volatile sig_atomic_t own_calls;

static void own_handler(int sig)
{
	(void)sig;
	own_calls++;
}

/* The program installs its own handler on the profiler's signal while a profile runs: its
 * handler stops receiving the profiler's ticks once the writer sees it (they went on to
 * the end), and stop leaves it in place (stop put the profiler's predecessor back over
 * it, and the program's next raise of its signal killed it). */
static void test_signal_taken(void)
{
	lua_State *L = new_state();
	static uint8_t buf[1 << 20];
	struct luaprof_sysprof_options o = { .mode = LUAPROF_SYSPROF_LEAF, .interval = 1,
					     .clock = LUAPROF_CLOCK_WALL, .buf = buf,
					     .len = sizeof(buf) };
	sink.len = 0;
	CHECK(luaprof_sysprof_start(L, &o) == 0, "start: %s", luaprof_sysprof_error());
	int signo = 0;
	for (int s = SIGRTMIN; s <= SIGRTMAX && !signo; s++) {
		struct sigaction cur;
		if (sigaction(s, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO))
			signo = s;
	}
	CHECK(signo != 0, "the profiler's signal not found");
	if (!signo) {
		luaprof_sysprof_stop(L);
		lua_close(L);
		return;
	}
	burn(L, 0.05, 1);
	signal(signo, own_handler);
	burn(L, 0.3, 1);
	sig_atomic_t during = own_calls;
	burn(L, 0.3, 1);
	CHECK(own_calls == during, "the profiler's ticks still reach the program's handler: "
	      "%d, then %d", (int)during, (int)own_calls);
	CHECK(luaprof_sysprof_stop(L) == 0, "stop: %s", luaprof_sysprof_error());
	struct sigaction cur;
	sigaction(signo, NULL, &cur);
	CHECK(cur.sa_handler == own_handler, "stop replaced the program's handler");
	sig_atomic_t before = own_calls;
	raise(signo);
	CHECK(own_calls == before + 1, "the program's own signal did not reach its handler");
	signal(signo, SIG_DFL);
	lua_close(L);
}

struct stopper {
	lua_State *L;
	unsigned delay_us;
	int rc;
};

static void *stop_later(void *arg)
{
	struct stopper *s = arg;
	usleep(s->delay_us);
	s->rc = luaprof_sysprof_stop(s->L);
	return NULL;
}

/* Stop from another thread while the sampled one runs Lua code: the stop only reads L
 * (it pushed onto L's stack from the stopping thread, and the VM crashed on a corrupted
 * frame every time). Each mode, 1 ms wall clock, stopped 5-25 ms into a 40 ms burn. */
static void test_stop_while_running(void)
{
	lua_State *L = new_state();
	static const int modes[] = { LUAPROF_SYSPROF_DEFAULT, LUAPROF_SYSPROF_LEAF,
				     LUAPROF_SYSPROF_CALLGRAPH };
	static uint8_t buf[1 << 20];
	for (int i = 0; i < 15; i++) {
		sink.len = 0;
		struct luaprof_sysprof_options o = { .mode = modes[i % 3], .interval = 1,
						     .clock = LUAPROF_CLOCK_WALL };
		if (o.mode != LUAPROF_SYSPROF_DEFAULT) {
			o.buf = buf;
			o.len = sizeof(buf);
		}
		CHECK(luaprof_sysprof_start(L, &o) == 0, "start %d: %s", i, luaprof_sysprof_error());
		struct stopper s = { L, 5000 + 5000 * (unsigned)(i % 5), -1 };
		pthread_t th;
		pthread_create(&th, NULL, stop_later, &s);
		burn(L, 0.04, 1);
		pthread_join(th, NULL);
		CHECK(s.rc == 0, "stop %d from another thread while running: %d (%s)", i, s.rc,
		      luaprof_sysprof_error());
	}
	burn(L, 0.02, 1); /* queued signals, if any, land in the inert handler */
	lua_close(L);
}

static void test_validation(void)
{
	lua_State *L = new_state();
	struct luaprof_sysprof_options o;
	CHECK(luaprof_sysprof_set_writer(NULL) == LUAPROF_PROFILE_ERRUSE, "set_writer(NULL)");
	CHECK(luaprof_sysprof_set_on_stop(NULL) == LUAPROF_PROFILE_ERRUSE, "set_on_stop(NULL)");
	CHECK(luaprof_sysprof_set_writer(mem_writer) == 0, "set_writer");
	CHECK(luaprof_sysprof_set_on_stop(mem_on_stop) == 0, "set_on_stop");
	CHECK(luaprof_sysprof_set_backtracer(NULL) == 0, "set_backtracer(NULL)");
	CHECK(luaprof_sysprof_report(NULL) == LUAPROF_PROFILE_ERRUSE, "sysprof_report(NULL)");
	CHECK(luaprof_memprof_report(NULL) == LUAPROF_PROFILE_ERRUSE, "memprof_report(NULL)");
	CHECK(luaprof_sysprof_stats(NULL) == LUAPROF_PROFILE_ERRUSE, "sysprof_stats(NULL)");

	int calls = sink.on_stop_calls;
	memset(&o, 0, sizeof(o));
	o.mode = 0x40;
	o.interval = 10;
	CHECK(luaprof_sysprof_start(L, &o) == LUAPROF_PROFILE_ERRUSE, "mode 0x40");
	CHECK(sink.on_stop_calls == calls + 1, "on_stop after a failed start");
	o.mode = LUAPROF_SYSPROF_CALLGRAPH;
	CHECK(luaprof_sysprof_start(L, &o) == LUAPROF_PROFILE_ERRUSE, "CALLGRAPH without buffer");
	o.buf = stream_buf;
	o.len = LUAPROF_SYSPROF_BUF_MIN - 1;
	CHECK(luaprof_sysprof_start(L, &o) == LUAPROF_PROFILE_ERRUSE, "buffer too small");
	o.mode = LUAPROF_SYSPROF_DEFAULT;
	o.interval = 0;
	CHECK(luaprof_sysprof_start(L, &o) == LUAPROF_PROFILE_ERRUSE, "interval 0");
	o.interval = 10;
	o.clock = 7;
	CHECK(luaprof_sysprof_start(L, &o) == LUAPROF_PROFILE_ERRUSE, "clock 7");
	CHECK(strstr(luaprof_sysprof_error(), "clock") != NULL, "message: %s",
	      luaprof_sysprof_error());
	/* No options: refused (it crashed), as luaprof_memprof_start does; nothing to give
	 * on_stop. */
	calls = sink.on_stop_calls;
	CHECK(luaprof_sysprof_start(L, NULL) == LUAPROF_PROFILE_ERRUSE, "start(L, NULL)");
	CHECK(sink.on_stop_calls == calls, "on_stop after start(L, NULL)");
	CHECK(strstr(luaprof_sysprof_error(), "no options") != NULL, "message: %s",
	      luaprof_sysprof_error());
	o.clock = LUAPROF_CLOCK_CPU;

	CHECK(luaprof_sysprof_stop(L) == LUAPROF_PROFILE_ERRRUN, "stop when idle");
	CHECK(luaprof_sysprof_start(L, &o) == 0, "start D: %s", luaprof_sysprof_error());
	CHECK(luaprof_sysprof_set_writer(mem_writer) == LUAPROF_PROFILE_ERRUSE,
	      "setters refuse while running");
	CHECK(luaprof_sysprof_start(L, &o) == LUAPROF_PROFILE_ERRRUN, "second start");
	lua_State *other = new_state();
	CHECK(luaprof_sysprof_stop(other) == LUAPROF_PROFILE_ERRUSE, "stop from another VM");
	CHECK(strcmp(luaprof_sysprof_error(), "the profile runs in another Lua state") == 0,
	      "message: %s", luaprof_sysprof_error());
	lua_close(other);
	burn(L, 0.2, 1);
	CHECK(luaprof_sysprof_stop(L) == 0, "stop D");
	CHECK(luaprof_sysprof_stop(L) == LUAPROF_PROFILE_ERRRUN, "second stop");
	struct luaprof_sysprof_counters c;
	CHECK(luaprof_sysprof_report(&c) == 0, "report");
	CHECK(c.samples > 0 && sum(&c) == c.samples, "D counters: %llu samples, sum %llu",
	      (unsigned long long)c.samples, (unsigned long long)sum(&c));
	lua_close(L);
}

/* C mode at 1 kHz of wall clock into the memory sink, emptied. */
static struct luaprof_sysprof_options callgraph_options(void)
{
	struct luaprof_sysprof_options o;
	memset(&o, 0, sizeof(o));
	o.mode = LUAPROF_SYSPROF_CALLGRAPH;
	o.interval = 1;
	o.clock = LUAPROF_CLOCK_WALL;
	o.buf = stream_buf;
	o.len = LUAPROF_SYSPROF_BUF_MIN; /* the smallest: halves hand over often */
	o.ctx = &sink;
	sink.len = 0;
	return o;
}

/* A CALLGRAPH profile through the writer; returns what was parsed. */
static struct parsed run_callgraph(luaprof_sysprof_backtracer bt, int jit,
				   struct luaprof_sysprof_counters *c,
				   struct luaprof_sysprof_stats *s)
{
	lua_State *L = new_state();
	struct luaprof_sysprof_options o = callgraph_options();
	int calls = sink.on_stop_calls;
	luaprof_sysprof_set_backtracer(bt);
	CHECK(luaprof_sysprof_start(L, &o) == 0, "start C: %s", luaprof_sysprof_error());
	burn(L, 0.5, jit);
	CHECK(luaprof_sysprof_stop(L) == 0, "stop C");
	CHECK(sink.on_stop_calls == calls + 1 && sink.last_ctx == &sink, "on_stop with ctx");
	luaprof_sysprof_report(c);
	luaprof_sysprof_stats(s);
	luaprof_sysprof_set_backtracer(NULL);
	lua_close(L);
	return parse_bytes(sink.data, sink.len);
}

/* Prototypes named in the stream so far, and Lua frames of samples naming one that was
 * not (the report shows those as [unknown function 0x...]). */
static struct {
	uint64_t named[4096];
	size_t nnamed, frames, unnamed;
} dropsyms;

static int drop_sym_lua(void *ctx, uint64_t addr, const char *chunk, size_t len, uint64_t line)
{
	if (dropsyms.nnamed < sizeof(dropsyms.named) / sizeof(dropsyms.named[0]))
		dropsyms.named[dropsyms.nnamed++] = addr;
	return 0;
}

static int drop_sample(void *ctx, const struct lp_sys_sample *s)
{
	for (size_t i = 0; i < s->nlua; i++) {
		if (s->lua[i].type != LP_FRAME_LFUNC)
			continue;
		size_t k = 0;
		while (k < dropsyms.nnamed && dropsyms.named[k] != s->lua[i].addr)
			k++;
		dropsyms.frames++;
		dropsyms.unnamed += k == dropsyms.nnamed;
	}
	return 0;
}

static int c_release(lua_State *L)
{
	atomic_store(&sink_hold, 0);
	return 0;
}

/*
** Functions first met by samples that a full buffer drops (the writer held up): their
** symbols went with those samples, and the sampler, which had taken them for written,
** never wrote them again: the report showed every later sample of theirs as an unknown
** function (and, after a flush, a trace under another trace's name). Every Lua frame of
** the samples in the stream must be named before it.
*/
static void test_dropped_symbols(void)
{
	lua_State *L = new_state();
	lua_register(L, "release", c_release);
	struct luaprof_sysprof_options o = callgraph_options();
	CHECK(luaprof_sysprof_start(L, &o) == 0, "start C: %s", luaprof_sysprof_error());
	atomic_store(&sink_hold, 1);
	const char *chunk =
		"jit.off()\n"
		"local function spin(fs, secs)\n"
		"  local t, s = os.clock(), 0\n"
		"  while os.clock() - t < secs do for k = 1, #fs do s = s + fs[k](300) end end\n"
		"  return s\n"
		"end\n"
		"local function made(first, last)\n"
		"  local fs = {}\n"
		"  for k = first, last do\n"
		"    fs[#fs + 1] = load('return function(n) local s = 0 for i = 1, n do s = s + i % ' ..\n"
		"                       (k + 2) .. ' end return s end', '=dropchunk' .. k)()\n"
		"  end\n"
		"  return fs\n"
		"end\n"
		"spin(made(1, 4), 0.8)\n"   /* fills the buffer: from here samples are dropped */
		"local fs = made(5, 44)\n"
		"spin(fs, 0.3)\n"           /* new functions, first met by dropped samples */
		"release()\n"
		"spin(fs, 0.4)\n";
	int rc = luaL_dostring(L, chunk);
	atomic_store(&sink_hold, 0);
	CHECK(rc == 0, "dropped symbols chunk: %s", rc ? lua_tostring(L, -1) : "");
	CHECK(luaprof_sysprof_stop(L) == 0, "stop C");
	struct luaprof_sysprof_stats s;
	luaprof_sysprof_stats(&s);
	lua_close(L);
	memset(&dropsyms, 0, sizeof(dropsyms));
	struct lp_parse_handlers h = { .sym_lua = drop_sym_lua, .sys_sample = drop_sample };
	struct lp_parse_stats st;
	CHECK(parse_mem(sink.data, sink.len, &h, &st) == LP_OK, "dropped symbols: stream parses");
	CHECK(s.dropped > 0 && dropsyms.frames > 0 && dropsyms.unnamed == 0,
	      "dropped symbols: %zu of %zu Lua frames name an unnamed function (%llu dropped)",
	      dropsyms.unnamed, dropsyms.frames, (unsigned long long)s.dropped);
}

static void test_callgraph(void)
{
	struct luaprof_sysprof_counters c;
	struct luaprof_sysprof_stats s;
	struct parsed p = run_callgraph(NULL, 1, &c, &s);
	CHECK(p.status == LP_OK && p.complete && p.extension, "stream parses: status %d", p.status);
	CHECK(c.samples > 100 && sum(&c) == c.samples, "counters: %llu",
	      (unsigned long long)c.samples);
	CHECK(p.samples <= c.samples && c.samples - p.samples <= s.dropped,
	      "stream samples %llu, counted %llu, dropped %llu", (unsigned long long)p.samples,
	      (unsigned long long)c.samples, (unsigned long long)s.dropped);
	CHECK(s.bytes == sink.len, "stats.bytes %llu == written %zu",
	      (unsigned long long)s.bytes, sink.len);

	/* glibc backtrace() with the JIT off (it cannot step through trace code). */
	void *prime[2];
	backtrace(prime, 2);
	p = run_callgraph(glibc_backtracer, 0, &c, &s);
	CHECK(p.status == LP_OK && p.complete, "glibc backtracer stream parses");
	CHECK(p.samples > 100 && p.one_host_frame < p.samples / 2,
	      "handler frames skipped: %llu of %llu samples have one host frame",
	      (unsigned long long)p.one_host_frame, (unsigned long long)p.samples);

	/* A backtracer whose frames never contain the interrupted IP: leaf only, truncated. */
	p = run_callgraph(bogus_backtracer, 1, &c, &s);
	CHECK(p.status == LP_OK && p.complete, "bogus backtracer stream parses");
	uint64_t nontrace = p.samples - c.vmst_trace;
	CHECK(p.one_host_frame >= nontrace - s.dropped && s.truncated >= p.one_host_frame,
	      "unaligned backtracer: %llu leaf-only samples, %llu truncated, %llu non-trace",
	      (unsigned long long)p.one_host_frame, (unsigned long long)s.truncated,
	      (unsigned long long)nontrace);
	/* Each says it was cut short (the report then keeps its Lua frames at the root). */
	CHECK(p.cut_marked >= p.one_host_frame,
	      "unaligned backtracer: %llu of %llu leaf-only samples marked cut short",
	      (unsigned long long)p.cut_marked, (unsigned long long)p.one_host_frame);
}

/* CPU seconds of this thread. */
static double cpu_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A C-mode profile of about secs of allocation by the host, on the main state, after a
 * coroutine it resumed yielded (parked), or by Lua code (not parked). */
static struct parsed run_gc(int parked, double secs)
{
	lua_State *L = new_state();
	struct luaprof_sysprof_options o = callgraph_options();
	/* Live tables for every cycle to mark: the collector's share of the time. */
	CHECK(luaL_dostring(L, "keep = {} for i = 1, 100000 do keep[i] = { i } end "
			       "return coroutine.create(function() local junk = {} "
			       "coroutine.yield() return junk end)") == 0,
	      "set-up: %s", lua_tostring(L, -1));
	lua_State *co = lua_tothread(L, -1);
	CHECK(luaprof_sysprof_start(L, &o) == 0, "start C: %s", luaprof_sysprof_error());
	if (parked) {
		CHECK(lua_resume(co, 0) == LUA_YIELD, "the coroutine yields");
		double t0 = cpu_now();
		for (int i = 0; cpu_now() - t0 < secs; i++) {
			lua_createtable(L, 4, 4);
			lua_pushfstring(L, "s%d", i);
			lua_settop(L, 1);
		}
	} else {
		char code[256];
		snprintf(code, sizeof(code), "local t, x = os.clock() "
			 "while os.clock() - t < %g do x = { t, tostring(x) } end", secs);
		CHECK(luaL_dostring(L, code) == 0, "Lua: %s", lua_tostring(L, -1));
	}
	CHECK(luaprof_sysprof_stop(L) == 0, "stop C");
	lua_close(L);
	return parse_bytes(sink.data, sink.len);
}

static void test_gc_stacks(void)
{
	struct parsed p = run_gc(0, 0.4);
	CHECK(p.status == LP_OK && p.complete && p.gc_samples >= 10 &&
	      p.gc_pairs * 10 >= p.gc_samples * 9,
	      "Lua code's collector: %llu of %llu GC samples with Lua frames",
	      (unsigned long long)p.gc_pairs, (unsigned long long)p.gc_samples);
	p = run_gc(1, 0.4);
	CHECK(p.status == LP_OK && p.complete && p.gc_samples >= 10 && p.gc_pairs == 0,
	      "the host's allocations after a yield: %llu of %llu GC samples given the "
	      "parked coroutine's Lua frames", (unsigned long long)p.gc_pairs,
	      (unsigned long long)p.gc_samples);
}

static void test_close_lua_api(const char *agent_dir, const char *out)
{
	lua_State *L = new_state();
	char code[1024];
	snprintf(code, sizeof(code),
		 "package.cpath = '%s/?.so;' .. package.cpath "
		 "assert(require('luaprof').sysprof.start{mode='C', interval=1, clock='wall', "
		 "path='%s/closed.bin'})",
		 agent_dir, out);
	CHECK(luaL_dostring(L, code) == 0, "start from Lua: %s", lua_tostring(L, -1));
	burn(L, 0.3, 1);
	lua_close(L); /* while running */
	char path[1024];
	snprintf(path, sizeof(path), "%s/closed.bin", out);
	struct parsed p = parse_file(path);
	CHECK(p.status == LP_OK && p.complete && p.extension && p.samples > 50,
	      "closed VM's stream: status %d, complete %d, %llu samples", p.status, p.complete,
	      (unsigned long long)p.samples);
	lua_State *L2 = new_state();
	struct luaprof_sysprof_options o = { .mode = LUAPROF_SYSPROF_DEFAULT, .interval = 10 };
	CHECK(luaprof_sysprof_start(L2, &o) == 0, "start after close: %s",
	      luaprof_sysprof_error());
	CHECK(luaprof_sysprof_stop(L2) == 0, "stop after close");
	lua_close(L2);
}

static void test_close_c_api(void)
{
	lua_State *L = new_state();
	struct luaprof_sysprof_options o;
	memset(&o, 0, sizeof(o));
	o.mode = LUAPROF_SYSPROF_LEAF;
	o.interval = 1;
	o.clock = LUAPROF_CLOCK_WALL;
	o.buf = stream_buf;
	o.len = sizeof(stream_buf);
	o.ctx = &sink;
	sink.len = 0;
	int calls = sink.on_stop_calls;
	CHECK(luaprof_sysprof_start(L, &o) == 0, "start L: %s", luaprof_sysprof_error());
	burn(L, 0.2, 1);
	lua_close(L); /* while running */
	CHECK(sink.on_stop_calls == calls + 1, "on_stop at lua_close");
	struct parsed p = parse_bytes(sink.data, sink.len);
	CHECK(p.status == LP_OK && p.complete && p.samples > 20, "L stream after close");
	CHECK(p.host_frames == p.one_host_frame && p.lua_frames <= p.samples,
	      "leaf mode: one host frame and at most one Lua frame per sample");
	lua_State *L2 = new_state();
	CHECK(luaprof_sysprof_stop(L2) == LUAPROF_PROFILE_ERRRUN, "nothing runs after close");
	lua_close(L2);
}

/*
** Two VMs on one thread: the CPU profiler and memprof's sampled mode share one stack
** sampler, attached to one VM. Each refuses a start in the other VM while the other runs
** (before, the second re-attached the sampler, and the first's stacks were walked with the
** wrong VM's state: memprof's lost every host frame); exact mode, which needs no sampler,
** starts.
*/
static uint8_t mem_buf[1 << 16];

static void test_two_vms(void)
{
	lua_State *A = new_state(), *B = new_state();
	struct luaprof_sysprof_options so;
	memset(&so, 0, sizeof(so));
	so.mode = LUAPROF_SYSPROF_DEFAULT;
	so.interval = 10;
	struct luaprof_memprof_options mo = {
		.buf = mem_buf, .len = sizeof(mem_buf), .writer = mem_writer, .on_stop = mem_on_stop,
		.sample_bytes = (UINT64_C(1) << 50) + 1,
	};
	/* Past 2^50, as the Lua API and record refuse it. */
	CHECK(luaprof_memprof_start(A, &mo) == LUAPROF_PROFILE_ERRUSE &&
	      strstr(luaprof_memprof_error(), "above 2^50") != NULL,
	      "sample_bytes 2^50 + 1: %s", luaprof_memprof_error());
	mo.sample_bytes = 4096;
	CHECK(luaprof_memprof_start(A, &mo) == 0, "sampled memprof in A: %s",
	      luaprof_memprof_error());
	CHECK(luaprof_sysprof_start(B, &so) == LUAPROF_PROFILE_ERRUSE, "sysprof in B");
	CHECK(strstr(luaprof_sysprof_error(), "another Lua state") != NULL, "message: %s",
	      luaprof_sysprof_error());
	CHECK(luaprof_sysprof_start(A, &so) == 0, "sysprof in A: %s", luaprof_sysprof_error());
	CHECK(luaprof_sysprof_stop(A) == 0, "sysprof stop");
	CHECK(luaprof_memprof_stop(A) == 0, "memprof stop: %s", luaprof_memprof_error());

	CHECK(luaprof_sysprof_start(A, &so) == 0, "sysprof in A: %s", luaprof_sysprof_error());
	CHECK(luaprof_memprof_start(B, &mo) == LUAPROF_PROFILE_ERRUSE, "sampled memprof in B");
	CHECK(strstr(luaprof_memprof_error(), "another Lua state") != NULL, "message: %s",
	      luaprof_memprof_error());
	mo.sample_bytes = 0;
	CHECK(luaprof_memprof_start(B, &mo) == 0, "exact memprof in B: %s",
	      luaprof_memprof_error());
	CHECK(luaprof_memprof_stop(A) == LUAPROF_PROFILE_ERRUSE, "memprof stop from A");
	CHECK(strcmp(luaprof_memprof_error(), "the profile runs in another Lua state") == 0,
	      "message: %s", luaprof_memprof_error());
	CHECK(luaprof_memprof_stop(B) == 0, "exact memprof stop: %s", luaprof_memprof_error());
	/* The Lua API in B while A's profiles run: Tarantool's message, saying where (B's
	 * code never started one: sysbench's threads were puzzled). */
	CHECK(luaprof_memprof_start(A, &mo) == 0, "exact memprof in A: %s",
	      luaprof_memprof_error());
	static const char check_b[] =
		"local lp = require 'luaprof'\n"
		"local ok, msg = lp.sysprof.start{mode = 'C', path = '/dev/null'}\n"
		"assert(msg == 'profiler is running already (in another Lua state)', msg)\n"
		"ok, msg = lp.memprof.start('/dev/null')\n"
		"assert(msg == 'profiler is running already (in another Lua state)', msg)\n";
	lua_getglobal(B, "package");
	lua_pushstring(B, "build/?.so");
	lua_setfield(B, -2, "cpath");
	lua_pop(B, 1);
	CHECK(luaL_dostring(B, check_b) == 0, "Lua API in B: %s", lua_tostring(B, -1));
	CHECK(luaprof_memprof_stop(A) == 0, "exact memprof stop: %s", luaprof_memprof_error());
	CHECK(luaprof_sysprof_stop(A) == 0, "sysprof stop");
	lua_close(B);
	lua_close(A);
}

/*
** Exact memprof through the C API with a writer that double-buffers, as Tarantool's writer
** contract allows: it gets its own buffers only, encoded events in them (raw records are
** for the Lua API's file alone), keeps the one it was handed and hands back the other;
** on_stop gets one of them. The smallest buffer allowed means thousands of
** hand-overs. The stream parses whole and holds exactly the events the counters give, and
** the allocating line's.
*/
static uint8_t dbuf[2][LUAPROF_MEMPROF_BUF_MIN];
static struct {
	uint64_t calls, foreign, events, line_allocs, traces, internal_allocs;
	uint64_t chunk; /* the test chunk's prototype keys (any of them) */
	const void *on_stop_buf;
} dw;

static size_t dbuf_writer(const void **data, size_t len, void *ctx)
{
	dw.calls++;
	if (*data != dbuf[0] && *data != dbuf[1])
		dw.foreign++;
	size_t n = mem_writer(data, len, ctx);
	*data = *data == dbuf[0] ? dbuf[1] : dbuf[0];
	return n;
}

static int dbuf_on_stop(void *ctx, uint8_t *buf)
{
	dw.on_stop_buf = buf;
	return mem_on_stop(ctx, buf);
}

static int on_mem_sym(void *ctx, uint64_t addr, const char *chunk, size_t len, uint64_t line)
{
	if (len == 7 && memcmp(chunk, "=dbuf_x", 7) == 0)
		dw.chunk = addr;
	return 0;
}

static int on_mem_event(void *ctx, const struct lp_mem_event *ev)
{
	dw.events++;
	if (ev->source == LP_ASOURCE_TRACE)
		dw.traces++;
	if (ev->event == LP_AEVENT_ALLOC && ev->source == LP_ASOURCE_INT)
		dw.internal_allocs++;
	if (ev->event == LP_AEVENT_ALLOC && ev->source == LP_ASOURCE_LFUNC &&
	    ev->loc_addr == dw.chunk && ev->loc_line == 1)
		dw.line_allocs++;
	return 0;
}

/* -- A coroutine suspended by a C function's lua_yield ---------------------------------- */

static int c_yield(lua_State *L)
{
	return lua_yield(L, 0);
}

static volatile double spun;

static __attribute__((noinline)) void host_spin(void)
{
	double x = 0;
	for (int i = 0; i < 20000; i++)
		x += i * 0.5;
	spun = x;
}

static struct {
	uint64_t lo, hi, in_host, with_lua, lua_allocs;
} yield_check;

static struct {
	uint64_t lo, hi, in_tb, with_lua;
} tb_check;

static int on_yield_sample(void *ctx, const struct lp_sys_sample *s)
{
	(void)ctx;
	for (size_t i = 0; i < s->nhost; i++)
		if (s->host[i] >= tb_check.lo && s->host[i] < tb_check.hi) {
			tb_check.in_tb++;
			tb_check.with_lua += s->nlua > 0;
			break;
		}
	for (size_t i = 0; i < s->nhost; i++)
		if (s->host[i] >= yield_check.lo && s->host[i] < yield_check.hi) {
			yield_check.in_host++;
			yield_check.with_lua += s->nlua > 0;
			break;
		}
	return 0;
}

/* Allocations of the host's own on the main state (a string per call). */
static __attribute__((noinline)) void host_alloc(lua_State *L)
{
	for (int i = 0; i < 20; i++) {
		lua_pushfstring(L, "host string %d of a size worth sampling, %d", i, i * 7);
		lua_pop(L, 1);
	}
}

/* Exact mode's events: in_host counts INTERNAL allocations, with_lua those charged to
 * the C function at yield_check.lo. */
static int on_yield_event(void *ctx, const struct lp_mem_event *ev)
{
	(void)ctx;
	if (ev->event != LP_AEVENT_ALLOC)
		return 0;
	yield_check.in_host += ev->source == LP_ASOURCE_INT;
	yield_check.with_lua += ev->source == LP_ASOURCE_CFUNC && ev->loc_addr == yield_check.lo;
	yield_check.lua_allocs += ev->source == LP_ASOURCE_LFUNC || ev->source == LP_ASOURCE_TRACE;
	return 0;
}

static int on_yield_stack(void *ctx, uint64_t id, const struct lp_lua_frame *lua, size_t nlua,
			  const uint64_t *host, size_t nhost)
{
	(void)ctx;
	(void)id;
	(void)lua;
	for (size_t i = 0; i < nhost; i++)
		if (host[i] >= yield_check.lo && host[i] < yield_check.hi) {
			yield_check.in_host++;
			yield_check.with_lua += nlua > 0;
			break;
		}
	return 0;
}

/* A C function that yields (as ngx.sleep and cosockets do) leaves vmstate naming it and
 * cur_L at the suspended coroutine while the host goes on in its own code: those samples
 * are the host's alone (they were put under the coroutine's Lua frames, below main). */
static void test_c_yield(void)
{
	lua_State *L = new_state();
	lua_register(L, "c_yield", c_yield);
	struct luaprof_sysprof_options o = callgraph_options();
	CHECK(luaprof_sysprof_start(L, &o) == 0, "start C: %s", luaprof_sysprof_error());
	double t0 = cpu_now();
	while (cpu_now() - t0 < 0.3) {
		lua_State *co = lua_newthread(L);
		CHECK(luaL_loadstring(co, "for k = 1, 5 do local s = 0 "
				      "for i = 1, 200 do s = s + i % 7 end c_yield() end") == 0,
		      "load: %s", lua_tostring(co, -1));
		int rc;
		while ((rc = lua_resume(co, 0)) == LUA_YIELD)
			host_spin();
		CHECK(rc == 0, "resume: %d", rc);
		lua_pop(L, 1);
		/* A coroutine dead by an error: cur_L stays at it too. */
		co = lua_newthread(L);
		luaL_loadstring(co, "local s = 0 for i = 1, 200 do s = s + i end error('x')");
		CHECK(lua_resume(co, 0) == LUA_ERRRUN, "the coroutine errs");
		host_spin();
		lua_pop(L, 1);
	}
	/* xpcall's handler runs with its thread's status LUA_ERRERR: its C code
	 * (luaL_traceback) keeps the Lua frames below it. */
	CHECK(luaL_dostring(L, "jit.off() local t = os.clock() while os.clock() - t < 0.2 do "
			       "xpcall(function() error('x') end, debug.traceback) end "
			       "jit.on()") == 0, "xpcall: %s", lua_tostring(L, -1));
	CHECK(luaprof_sysprof_stop(L) == 0, "stop C");
	lua_close(L);
	memset(&yield_check, 0, sizeof(yield_check));
	yield_check.lo = (uint64_t)(uintptr_t)host_spin;
	yield_check.hi = yield_check.lo + 256;
	memset(&tb_check, 0, sizeof(tb_check));
	tb_check.lo = (uint64_t)(uintptr_t)luaL_traceback;
	tb_check.hi = tb_check.lo + 0x300;
	struct lp_parse_handlers h = { .sys_sample = on_yield_sample };
	struct lp_parse_stats st;
	CHECK(parse_mem(sink.data, sink.len, &h, &st) == LP_OK, "the stream parses");
	CHECK(yield_check.in_host >= 100 && yield_check.with_lua == 0,
	      "after lua_yield from C: %llu of %llu samples in the host's code with Lua frames",
	      (unsigned long long)yield_check.with_lua, (unsigned long long)yield_check.in_host);
	CHECK(tb_check.in_tb >= 5 && tb_check.with_lua == tb_check.in_tb,
	      "xpcall's handler: %llu of %llu samples in luaL_traceback with Lua frames",
	      (unsigned long long)tb_check.with_lua, (unsigned long long)tb_check.in_tb);

	/* Sampled memory profiling the same way: the host allocates on the main state
	 * (host_alloc) between resumes; its sampled stacks (counted once each: the stream
	 * interns them) have no Lua frames either. */
	L = new_state();
	lua_register(L, "c_yield", c_yield);
	struct luaprof_memprof_options mo = {
		.buf = dbuf[0], .len = sizeof(dbuf[0]), .ctx = &sink, .writer = dbuf_writer,
		.on_stop = dbuf_on_stop, .sample_bytes = 256,
	};
	sink.len = 0;
	CHECK(luaprof_memprof_start(L, &mo) == 0, "memprof start: %s", luaprof_memprof_error());
	for (int n = 0; n < 200; n++) {
		lua_State *co = lua_newthread(L);
		CHECK(luaL_loadstring(co, "for k = 1, 5 do local t = { k } c_yield() end") == 0,
		      "load: %s", lua_tostring(co, -1));
		int rc;
		while ((rc = lua_resume(co, 0)) == LUA_YIELD)
			host_alloc(L);
		CHECK(rc == 0, "resume: %d", rc);
		lua_pop(L, 1);
	}
	CHECK(luaprof_memprof_stop(L) == 0, "memprof stop: %s", luaprof_memprof_error());
	lua_close(L);
	memset(&yield_check, 0, sizeof(yield_check));
	yield_check.lo = (uint64_t)(uintptr_t)host_alloc;
	yield_check.hi = yield_check.lo + 256;
	struct lp_parse_handlers mh = { .ext_stack = on_yield_stack };
	CHECK(parse_mem(sink.data, sink.len, &mh, &st) == LP_OK, "the memory stream parses");
	CHECK(yield_check.in_host >= 1 && yield_check.with_lua == 0,
	      "sampled, after lua_yield from C: %llu of %llu stacks in the host's code with Lua "
	      "frames", (unsigned long long)yield_check.with_lua,
	      (unsigned long long)yield_check.in_host);

	/* Exact mode: the host's allocations are no one's (INTERNAL), not c_yield's (every
	 * one of them was charged to the C function the coroutine yielded in). */
	L = new_state();
	lua_register(L, "c_yield", c_yield);
	mo.sample_bytes = 0;
	sink.len = 0;
	CHECK(luaprof_memprof_start(L, &mo) == 0, "exact start: %s", luaprof_memprof_error());
	for (int n = 0; n < 100; n++) {
		lua_State *co = lua_newthread(L);
		luaL_loadstring(co, "for k = 1, 5 do local t = { k } c_yield() end");
		int rc;
		while ((rc = lua_resume(co, 0)) == LUA_YIELD)
			host_alloc(L);
		CHECK(rc == 0, "resume: %d", rc);
		lua_pop(L, 1);
	}
	/* Lua code whose thread's status is not 0 still runs: xpcall's handler (LUA_ERRERR),
	 * in a coroutine and on the main state: its tables stay its lines' (interpreted: a
	 * trace's allocations are the trace's whatever the thread). */
	CHECK(luaL_dostring(L, "jit.off() local function h(m) local t = {} for j = 1, 100 do "
			       "t[j] = { j } end return m end "
			       "for i = 1, 20 do xpcall(function() error('x') end, h) end "
			       "local co = coroutine.wrap(function() for i = 1, 20 do "
			       "xpcall(function() error('y') end, h) end end) co() jit.on()") == 0,
	      "xpcall handlers: %s", lua_tostring(L, -1));
	CHECK(luaprof_memprof_stop(L) == 0, "exact stop: %s", luaprof_memprof_error());
	lua_close(L);
	memset(&yield_check, 0, sizeof(yield_check));
	yield_check.lo = (uint64_t)(uintptr_t)c_yield;
	struct lp_parse_handlers eh = { .mem_event = on_yield_event };
	CHECK(parse_mem(sink.data, sink.len, &eh, &st) == LP_OK, "the exact stream parses");
	CHECK(yield_check.in_host >= 100 && yield_check.with_lua == 0 &&
	      yield_check.lua_allocs >= 500 + 4000,
	      "exact, after lua_yield from C: %llu events charged to c_yield, %llu to INTERNAL, "
	      "%llu to Lua lines (want 500 in the coroutines and 4000 in xpcall's handlers)",
	      (unsigned long long)yield_check.with_lua, (unsigned long long)yield_check.in_host,
	      (unsigned long long)yield_check.lua_allocs);
}

/* Exact mode into dbuf's two buffers, with the sink and dw emptied. */
static struct luaprof_memprof_options dbuf_options(void)
{
	struct luaprof_memprof_options mo = {
		.buf = dbuf[0], .len = sizeof(dbuf[0]), .writer = dbuf_writer,
		.on_stop = dbuf_on_stop,
	};
	memset(&dw, 0, sizeof(dw));
	sink.len = 0;
	return mo;
}

static void test_memprof_c_writer(void)
{
	lua_State *L = new_state();
	struct luaprof_memprof_options mo = dbuf_options();
	CHECK(luaL_loadbuffer(L, "jit.off() local t = {} for i = 1, 20000 do t[i] = {} end",
			      56, "=dbuf_x") == 0, "load");
	CHECK(luaprof_memprof_start(L, &mo) == 0, "exact memprof: %s", luaprof_memprof_error());
	CHECK(lua_pcall(L, 0, 0, 0) == 0, "run");
	struct luaprof_memprof_counters c;
	luaprof_memprof_report(&c);
	CHECK(luaprof_memprof_stop(L) == 0, "stop: %s", luaprof_memprof_error());
	CHECK(dw.calls > 100 && dw.foreign == 0, "%llu writer calls, %llu not with its buffers",
	      (unsigned long long)dw.calls, (unsigned long long)dw.foreign);
	CHECK(dw.on_stop_buf == dbuf[0] || dw.on_stop_buf == dbuf[1], "on_stop's buffer");
	struct lp_parse_handlers h = { .mem_event = on_mem_event, .sym_lua = on_mem_sym };
	struct lp_parse_stats st;
	int rc = parse_mem(sink.data, sink.len, &h, &st);
	CHECK(rc == LP_OK && st.complete, "the stream parses whole: %d", rc);
	CHECK(dw.events == c.events, "%llu events in the stream, %llu counted",
	      (unsigned long long)dw.events, (unsigned long long)c.events);
	/* Each {} is a table: 20000 allocations at line 1 (and the array part's growth). */
	CHECK(dw.line_allocs >= 20000, "%llu allocations at =dbuf_x:1",
	      (unsigned long long)dw.line_allocs);
	lua_close(L);
}

/* A state the VM has not run yet (luaL_newstate, start, then luaL_openlibs): its vmstate
 * is still the zeroed 0, no trace. Both profilers start there; exact mode charges the
 * host's table made before the first run to INTERNAL (2 allocations), no event to a
 * trace, and the chunk's tables to its line. */
static void test_fresh_state(void)
{
	lua_State *L = luaL_newstate();
	struct luaprof_memprof_options mo = dbuf_options();
	CHECK(luaprof_memprof_start(L, &mo) == 0, "exact memprof on a new state: %s",
	      luaprof_memprof_error());
	lua_createtable(L, 100, 0);
	lua_pop(L, 1);
	luaL_openlibs(L);
	CHECK(luaL_loadbuffer(L, "jit.off() local t = {} for i = 1, 20000 do t[i] = {} end",
			      56, "=dbuf_x") == 0 && lua_pcall(L, 0, 0, 0) == 0, "run");
	CHECK(luaprof_memprof_stop(L) == 0, "stop: %s", luaprof_memprof_error());
	struct lp_parse_handlers h = { .mem_event = on_mem_event, .sym_lua = on_mem_sym };
	struct lp_parse_stats st;
	CHECK(parse_mem(sink.data, sink.len, &h, &st) == LP_OK && st.complete,
	      "the new state's stream parses whole");
	CHECK(dw.line_allocs >= 20000 && dw.traces == 0 && dw.internal_allocs >= 2,
	      "new state: %llu allocations at =dbuf_x:1, %llu events in traces, %llu INTERNAL "
	      "allocations (want >= 20000, 0, >= 2)", (unsigned long long)dw.line_allocs,
	      (unsigned long long)dw.traces, (unsigned long long)dw.internal_allocs);
	lua_close(L);

	L = luaL_newstate();
	struct luaprof_sysprof_options o = callgraph_options();
	CHECK(luaprof_sysprof_start(L, &o) == 0, "sysprof on a new state: %s",
	      luaprof_sysprof_error());
	luaL_openlibs(L);
	burn(L, 0.2, 1);
	CHECK(luaprof_sysprof_stop(L) == 0, "sysprof stop: %s", luaprof_sysprof_error());
	struct parsed p = parse_bytes(sink.data, sink.len);
	CHECK(p.status == LP_OK && p.complete && p.samples > 50,
	      "new state's CPU stream: status %d, %llu samples", p.status,
	      (unsigned long long)p.samples);
	lua_close(L);
}

/* -- Start and stop from several threads, and from inside the profiler ----------------- */

struct tctx {
	uint8_t buf[LUAPROF_MEMPROF_BUF_MIN];
	pthread_t self;
	unsigned long started, foreign_writes, foreign_stops, bad_stops, refused;
};
static struct tctx tctxs[2];
static _Thread_local struct tctx *my_tctx;

static size_t tctx_writer(const void **data, size_t len, void *ctx)
{
	if (ctx != my_tctx)
		__atomic_add_fetch(&tctxs[0].foreign_writes, 1, __ATOMIC_RELAXED);
	return len;
}

static int tctx_on_stop(void *ctx, uint8_t *buf)
{
	if (ctx != my_tctx || buf != my_tctx->buf)
		__atomic_add_fetch(&tctxs[0].foreign_stops, 1, __ATOMIC_RELAXED);
	return 0;
}

static void *tctx_thread(void *arg)
{
	my_tctx = arg;
	lua_State *L = new_state();
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (my_tctx->started >= 500 || now.tv_sec - t0.tv_sec >= 3)
			break;
		struct luaprof_memprof_options o = {
			.buf = my_tctx->buf, .len = sizeof(my_tctx->buf), .ctx = my_tctx,
			.writer = tctx_writer, .on_stop = tctx_on_stop,
		};
		int rc = luaprof_memprof_start(L, &o);
		if (rc != 0) {
			if (rc == LUAPROF_PROFILE_ERRRUN)
				my_tctx->refused++;
			else
				my_tctx->bad_stops++;
			continue;
		}
		my_tctx->started++;
		if (luaL_dostring(L, "local t = {} for i = 1, 100 do t[i] = {} end") != 0)
			my_tctx->bad_stops++;
		if (luaprof_memprof_stop(L) != 0)
			my_tctx->bad_stops++;
	}
	lua_close(L);
	return NULL;
}

/* A writer that calls stop once it has taken a few buffers (from an event's flush), then
 * stops the profile the documented way (*data = NULL). */
static struct {
	unsigned long calls; /* once armed, after start */
	int armed, stop_rc;
	char stop_msg[256];
} wstop;

static size_t stopping_writer(const void **data, size_t len, void *ctx)
{
	if (wstop.armed && ++wstop.calls == 3) {
		wstop.stop_rc = luaprof_memprof_stop((lua_State *)ctx);
		snprintf(wstop.stop_msg, sizeof(wstop.stop_msg), "%s", luaprof_memprof_error());
		*data = NULL;
	}
	return len;
}

static int plain_on_stop(void *ctx, uint8_t *buf)
{
	return 0;
}

static struct {
	lua_State *L, *other;
	int mode, inner_start, inner_stop, thread_start, child_status;
	uint8_t buf[LUAPROF_MEMPROF_BUF_MIN];
} rot;

static size_t null_writer(const void **data, size_t len, void *ctx)
{
	return len;
}

static void *rot_thread(void *arg)
{
	if (rot.mode == 2) {
		struct luaprof_memprof_options o = {
			.buf = rot.buf, .len = sizeof(rot.buf), .writer = null_writer,
			.on_stop = plain_on_stop,
		};
		rot.thread_start = luaprof_memprof_start(rot.other, &o);
		if (rot.thread_start == 0)
			luaprof_memprof_stop(rot.other);
	} else {
		pid_t pid = fork();
		if (pid == 0)
			_exit(0);
		int st = -1;
		if (pid > 0)
			waitpid(pid, &st, 0);
		rot.child_status = st;
	}
	return arg;
}

/* on_stop of rotation tests: mode 1 starts the next profile itself, 2 and 3 wait for a
 * thread that starts one on another state or forks. */
static int rot_on_stop(void *ctx, uint8_t *buf)
{
	if (rot.mode == 1) {
		struct luaprof_memprof_options o = {
			.buf = rot.buf, .len = sizeof(rot.buf), .writer = null_writer,
			.on_stop = plain_on_stop,
		};
		rot.mode = 0;
		rot.inner_start = luaprof_memprof_start(rot.L, &o);
		rot.inner_stop = rot.inner_start == 0 ? luaprof_memprof_stop(rot.L) : -1;
	} else if (rot.mode == 2 || rot.mode == 3) {
		pthread_t t;
		if (pthread_create(&t, NULL, rot_thread, NULL) == 0)
			pthread_join(t, NULL);
	}
	return 0;
}

/* A writer that forks once: the child reports what stop says there. */
static size_t forking_writer(const void **data, size_t len, void *ctx)
{
	if (rot.mode == 4) {
		rot.mode = 0;
		pid_t pid = fork();
		if (pid == 0)
			_exit(luaprof_memprof_stop(rot.L) == LUAPROF_PROFILE_ERRRUN ? 0 : 1);
		int st = -1;
		if (pid > 0)
			waitpid(pid, &st, 0);
		rot.child_status = st;
	}
	return len;
}

static size_t cancelling_writer(const void **data, size_t len, void *ctx)
{
	*data = NULL;
	return len;
}

/*
** Two threads, each with a state of its own, start and stop until each has run 500 profiles
** (3 s at most): every start either runs (and its start, its Lua code and its stop succeed)
** or is refused as running already; the writer and on_stop
** only ever get the calling thread's ctx and buffer. Then the profiler's own callbacks:
** a writer that calls stop (from an event's flush) is refused, not followed into a
** teardown under the event being written; a writer that asks to stop while start writes
** the symbol table fails start with ECANCELED, as it does stop. on_stop runs outside the
** profiler's lock: it may start the next profile (rotation), or wait for a thread that
** starts one or forks (that hung); a child forked from the writer is not profiling (its
** stop says so).
*/
static void test_memprof_threads(void)
{
	pthread_t t[2];
	memset(tctxs, 0, sizeof(tctxs));
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, tctx_thread, &tctxs[i]) == 0, "thread");
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++)
		CHECK(tctxs[i].started > 0 && tctxs[i].bad_stops == 0,
		      "thread %d: %lu started, %lu refused as running, %lu failed stops", i,
		      tctxs[i].started, tctxs[i].refused, tctxs[i].bad_stops);
	CHECK(tctxs[0].foreign_writes == 0 && tctxs[0].foreign_stops == 0,
	      "%lu writer calls and %lu on_stop calls with another thread's ctx or buffer",
	      tctxs[0].foreign_writes, tctxs[0].foreign_stops);

	lua_State *L = new_state();
	struct luaprof_memprof_options o = {
		.buf = dbuf[0], .len = sizeof(dbuf[0]), .ctx = L, .writer = stopping_writer,
		.on_stop = plain_on_stop,
	};
	memset(&wstop, 0, sizeof(wstop));
	CHECK(luaprof_memprof_start(L, &o) == 0, "start: %s", luaprof_memprof_error());
	wstop.armed = 1;
	CHECK(luaL_dostring(L, "local t = {} for i = 1, 20000 do t[i] = {} end") == 0, "run");
	CHECK(wstop.calls >= 3 && wstop.stop_rc == LUAPROF_PROFILE_ERRUSE &&
	      strstr(wstop.stop_msg, "inside the profiler") != NULL,
	      "stop from the writer: %lu writer calls, rc %d, '%s'", wstop.calls, wstop.stop_rc,
	      wstop.stop_msg);
	errno = 0;
	CHECK(luaprof_memprof_stop(L) == LUAPROF_PROFILE_ERRIO && errno == ECANCELED,
	      "stop after the writer's *data = NULL: %s", luaprof_memprof_error());
	CHECK(luaL_dostring(L, "local t = {} for i = 1, 1000 do t[i] = {} end") == 0,
	      "the program goes on");

	o.writer = cancelling_writer;
	errno = 0;
	CHECK(luaprof_memprof_start(L, &o) == LUAPROF_PROFILE_ERRIO && errno == ECANCELED &&
	      strstr(luaprof_memprof_error(), "Operation canceled") != NULL,
	      "start with a writer that cancels: errno %d, '%s'", errno, luaprof_memprof_error());

	/* A hang here is a failure: the watchdog ends the process. */
	alarm(60);
	memset(&rot, 0, sizeof(rot));
	rot.L = L;
	rot.other = new_state();
	o.writer = null_writer;
	o.on_stop = rot_on_stop;
	for (int mode = 1; mode <= 3; mode++) {
		rot.mode = mode;
		CHECK(luaprof_memprof_start(L, &o) == 0, "start (on_stop mode %d): %s", mode,
		      luaprof_memprof_error());
		CHECK(luaprof_memprof_stop(L) == 0, "stop (on_stop mode %d): %s", mode,
		      luaprof_memprof_error());
	}
	CHECK(rot.inner_start == 0 && rot.inner_stop == 0,
	      "the next profile started from on_stop: start %d, stop %d", rot.inner_start,
	      rot.inner_stop);
	CHECK(rot.thread_start == 0, "a start on another thread that on_stop waits for: %d",
	      rot.thread_start);
	CHECK(rot.child_status == 0, "a fork on a thread that on_stop waits for: status %d",
	      rot.child_status);
	rot.child_status = -1;
	rot.mode = 4;
	o.writer = forking_writer;
	o.on_stop = plain_on_stop;
	CHECK(luaprof_memprof_start(L, &o) == 0, "start (forking writer): %s",
	      luaprof_memprof_error());
	CHECK(luaprof_memprof_stop(L) == 0, "stop (forking writer): %s", luaprof_memprof_error());
	CHECK(rot.child_status == 0, "a child forked by the writer: stop there %s",
	      rot.child_status == -1 ? "not called" : "did not say 'not running'");
	alarm(0);
	lua_close(rot.other);
	lua_close(L);
}

/* -- Lua API starts racing in two states ----------------------------------------------- */

static pthread_barrier_t race_barrier;

static int l_barrier(lua_State *L)
{
	pthread_barrier_wait(&race_barrier);
	return 0;
}

struct racer {
	const char *agent_dir, *path;
	int wins, bad;
	char first_bad[256];
};

static void *racer_thread(void *arg)
{
	struct racer *r = arg;
	lua_State *L = new_state();
	lua_register(L, "barrier", l_barrier);
	char code[2048];
	snprintf(code, sizeof(code),
		 "package.cpath = '%s/?.so;' .. package.cpath\n"
		 "local mp, path = require('luaprof').memprof, '%s'\n"
		 "local wins, bad, first = 0, 0\n"
		 "local function wrong(what) bad = bad + 1 first = first or what end\n"
		 "for _ = 1, 40 do\n"
		 "  barrier()\n"
		 "  local ok, msg = mp.start(path)\n"
		 "  barrier()\n"
		 "  if ok then\n"
		 "    wins = wins + 1\n"
		 "    local t = {} for j = 1, 1000 do t[j] = {} end\n"
		 "    local sok, smsg = mp.stop()\n"
		 "    if path == '/dev/full' then\n"
		 "      if sok or not tostring(smsg):find('^/dev/full: ') then\n"
		 "        wrong('stop: ' .. tostring(smsg)) end\n"
		 "    elseif not sok then wrong('stop: ' .. tostring(smsg)) end\n"
		 "  elseif msg ~= 'profiler is running already (in another Lua state)' then\n"
		 "    wrong('start: ' .. tostring(msg))\n"
		 "  end\n"
		 "  barrier()\n"
		 "end\n"
		 "return wins, bad, first or ''",
		 r->agent_dir, r->path);
	if (luaL_dostring(L, code) != 0) {
		r->bad = -1;
		snprintf(r->first_bad, sizeof(r->first_bad), "%s", lua_tostring(L, -1));
	} else {
		r->wins = (int)lua_tointeger(L, -3);
		r->bad = (int)lua_tointeger(L, -2);
		snprintf(r->first_bad, sizeof(r->first_bad), "%s", lua_tostring(L, -1));
	}
	lua_close(L);
	return NULL;
}

/*
** Two states, each on its thread, start the memory profiler through the Lua API at the
** same moment, 40 times: one wins; the other is told the profiler runs in another Lua
** state (it was told "running already", as if its own state ran one, when both passed the
** module's check before the start), and the winner's stop names the winner's file (the
** loser's path had overwritten it: "other.bin: No space left on device" for /dev/full).
*/
static void test_lua_api_race(const char *agent_dir, const char *out)
{
	char other[1024];
	snprintf(other, sizeof(other), "%s/race.bin", out);
	struct racer r[2] = { { agent_dir, "/dev/full", 0, 0, "" }, { agent_dir, other, 0, 0, "" } };
	pthread_t t[2];
	alarm(120);
	pthread_barrier_init(&race_barrier, NULL, 2);
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&t[i], NULL, racer_thread, &r[i]) == 0, "racer thread");
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	pthread_barrier_destroy(&race_barrier);
	alarm(0);
	for (int i = 0; i < 2; i++)
		CHECK(r[i].bad == 0, "racer %s: %d wrong answers, the first: %s", r[i].path,
		      r[i].bad, r[i].first_bad);
	CHECK(r[0].wins + r[1].wins == 40, "%d + %d profiles ran in 40 rounds", r[0].wins,
	      r[1].wins);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: agent_host AGENT_DIR OUT_DIR\n");
		return 2;
	}
	test_signals();
	test_stop_other_thread();
	test_stop_other_thread_blocked();
	test_validation();
	test_callgraph();
	test_dropped_symbols();
	test_gc_stacks();
	test_close_lua_api(argv[1], argv[2]);
	test_close_c_api();
	test_two_vms();
	test_memprof_c_writer();
	test_fresh_state();
	test_memprof_threads();
	test_lua_api_race(argv[1], argv[2]);
	test_stop_while_running();
	test_signal_taken();
	test_c_yield();
	printf("agent_host: %d failures\n", fails);
	return fails ? 1 : 0;
}
