/*
** Unit tests of the agent's core (src/agent/sysprof.c): the double buffer and its writer
** thread, the handler's bookkeeping, the stream it produces, I/O failures, and the C API's
** validation. The VM side is replaced by stubs that hand the handler scripted samples, and
** the handler is called directly (the timer is armed with an interval of an hour), so the
** tests are deterministic and need no Lua VM.
*/
#include "../../src/agent/sysprof.c"
#include "../../src/agent/ticker.c"
#include "../../src/agent/tstacks.c"
#include "../../src/agent/stackdict.c"
/* termstop.c's handler beside sysprof.c's, its state beside the tests' timespecs. */
#define on_signal termstop_on_signal
#define ts        termstop_state
#define HOLD_MAX_NS 1000000000ull /* a held signal's bound, shortened: MEM_STOP_BLOCKED */
#include "../../src/agent/termstop.c"
#undef on_signal
#undef ts

#include <fcntl.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "report/load.h"
#include "stream/input.h"
#include "unit.h"

/* -- Stubs for the VM, objects, symbols and Lua sides ----------------------------------- */

static struct {
	int fail;          /* agent_vm_sample returns -1 */
	uint64_t line;     /* the sample's single Lua frame: line */
	int newsym;        /* introduce a symbol with the sample */
	int attach_fail;
} stub;

static struct lua_State *attached_L;

int agent_vm_attach(struct lua_State *L, char *err, size_t errlen)
{
	if (stub.attach_fail) {
		snprintf(err, errlen, "unsupported LuaJIT build (test)");
		return -1;
	}
	attached_L = L;
	return 0;
}

void agent_vm_detach(void)
{
	attached_L = NULL;
}

int agent_vm_sample(const ucontext_t *uc, int mode, struct agent_sample *s)
{
	static const char name[] = "@unit.lua";
	if (stub.fail)
		return -1;
	s->vmstate = LP_VMST_LFUNC;
	s->nlua = 1;
	s->lua[0] = (struct lp_lua_frame){ LP_FRAME_LFUNC, 0x1000, stub.line };
	s->lua_truncated = 0;
	s->nsyms = 0;
	if (stub.newsym) {
		s->nsyms = 1;
		s->syms[0] = (struct agent_sym){ LP_SYSPROF_SYM_LFUNC, 0x1000, 1, 0, name,
						 sizeof(name) - 1 };
	}
	return 0;
}

/* Which samples the core says it dropped (their symbols are then forgotten by the real
 * sampler). */
static uint64_t dropped_calls;

/* The stub's samples name no trace. */
void agent_vm_key_trace_code(const struct agent_sample *s, uint64_t *host, size_t n)
{
	(void)s;
	(void)host;
	(void)n;
}

void agent_vm_sample_dropped(const struct agent_sample *s)
{
	(void)s;
	dropped_calls++;
}

/* The stub's samples are LFUNC already: nothing for the helper step to add. */
int agent_vm_sample_helper(struct agent_sample *s, int mode)
{
	return 0;
}

int agent_vm_helper_pending(void)
{
	return 0;
}

/* Nor is any of them a GC sample, nor has a trace's frame. */
void agent_vm_after_walk(struct agent_sample *s)
{
	(void)s;
}

void agent_vm_tcodes_write(struct lp_wbuf *w)
{
	(void)w;
}

size_t agent_vm_omit_empty(uint64_t *pcs, size_t n)
{
	return n;
}

void agent_vm_symbols(struct lp_wbuf *w)
{
}

void agent_vm_ffnames(char *buf, size_t len)
{
	snprintf(buf, len, "Lua C assert");
}

/* No VM: no Lua names of C functions (cnames.c). */
void agent_vm_cnames_scan(void)
{
}

int agent_cnames_ready(void)
{
	return 0;
}

void agent_cnames_clear(void)
{
}

const char *agent_vm_name(void)
{
	return "stub";
}

/* The profile file (pfile.c), which a failed start tells: the tests' writers are not it. */
size_t agent_pfile_write(const void **data, size_t len, void *ctx)
{
	(void)data;
	(void)ctx;
	return len;
}

void agent_pfile_refused(struct agent_pfile *f)
{
	(void)f;
}

int agent_vm_frame(uint64_t ip, uint64_t *regs, int in_object)
{
	return 0;
}

int agent_unwind_init(char *err, size_t errlen)
{
	return 0;
}

size_t agent_unwind(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated)
{
	pcs[0] = 0x400000;
	pcs[1] = 0x400100;
	return 2;
}

int agent_objects_init(char *err, size_t errlen)
{
	return 0;
}

void agent_objects_fini(void)
{
}

void agent_objects_refresh(void)
{
}

void agent_unwind_learn(void)
{
}

void agent_unwind_objects_changed(void)
{
}

/* Objects the handler finds stale (scripted: the sample at stale_at, counted from 1). */
static struct {
	uint64_t samples, stale_at;
	unsigned long long changes; /* agent_objects_changes */
	int pending;
} objs_stub = { 0, 0, 1, 0 };

int agent_objects_check(const uint64_t *ips, size_t n)
{
	(void)ips;
	(void)n;
	if (++objs_stub.samples != objs_stub.stale_at)
		return 0;
	objs_stub.changes++; /* what the loader would say by then */
	objs_stub.pending = 1;
	return 1;
}

void agent_objects_locked(void (*fn)(const struct objtab *, void *), void *arg)
{
	fn(NULL, arg);
}

int agent_objects_note_stale(void)
{
	return 0;
}

int agent_objects_take_stale(void)
{
	int p = objs_stub.pending;
	objs_stub.pending = 0;
	return p;
}

unsigned long long agent_objects_changes(void)
{
	return objs_stub.changes;
}

/* The symbol table names main; an object loaded later (objs_stub) names lib_fn. */
void agent_symtab_cfuncs(struct lp_wbuf *w, struct agent_objseen *seen, int kind)
{
	static const char name[] = "main", lib[] = "lib_fn";
	if (kind == AGENT_SYMS_SYMTAB)
		lp_write_sym_cfunc(w, 0x400000, name, sizeof(name) - 1);
	else if (kind == AGENT_SYMS_SYSPROF)
		lp_write_sys_sym_cfunc(w, 0x400100, lib, sizeof(lib) - 1);
}

void agent_maps_reset(int other_running)
{
	(void)other_running;
}

int agent_memprof_uses_native(void)
{
	return 0;
}

int agent_memprof_running(void)
{
	return 0;
}

void agent_maps_note(void)
{
}

void agent_write_extension(struct lp_wbuf *w, void (*extra)(struct lp_wbuf *w),
			   const char *const *meta, int other_running)
{
	(void)other_running;
	lp_write_ext_prologue(w);
	if (extra)
		extra(w);
	for (size_t i = 0; meta && meta[i] && meta[i + 1]; i += 2)
		lp_write_ext_meta(w, meta[i], meta[i + 1]);
	lp_write_ext_end(w);
}

void agent_cmdline(char *buf, size_t len)
{
	snprintf(buf, len, "unit");
}

/* No profile here is luaprof record's (the Lua side's autostart). */
void agent_record_stopped(int memory, uint64_t run_id, int rc, int e)
{
}

/* termstop.c's memory side: a scripted memory profiler, for the memory scenarios of
 * test_signal_during_stop (none runs elsewhere). */
static struct {
	int running;
	_Atomic long stop_tid;            /* a stop under way on that thread */
	volatile sig_atomic_t rare, held; /* in the wrapper's rare path; a signal held there */
} mstub;

static void note(char c);

int agent_memprof_signal_unsafe(void)
{
	return mstub.rare != 0;
}

int agent_memprof_hold_signal(void)
{
	if (!mstub.rare)
		return 0;
	mstub.held = 1;
	return 1;
}

long agent_memprof_stop_tid(void)
{
	return atomic_load(&mstub.stop_tid);
}

int agent_memprof_stop_wait(uint64_t max_ns)
{
	struct timespec step = { 0, 1000000 };
	for (uint64_t waited = 0; atomic_load(&mstub.stop_tid); waited += 1000000) {
		if (waited >= max_ns)
			return -1;
		nanosleep(&step, NULL);
	}
	return 0;
}

/* As memprof.c's: refused in the rare path, with no profile, or with a stop under way. */
int agent_memprof_stop_for_signal(void)
{
	if (mstub.rare || !mstub.running || atomic_load(&mstub.stop_tid))
		return -1;
	mstub.running = 0;
	note('G'); /* the signal's stop wrote the file */
	agent_termstop_written();
	return 0;
}

static uint64_t owner = 1;
static struct lua_State *const FAKE_L = (struct lua_State *)&owner;
static struct lua_State *const OTHER_L = (struct lua_State *)&stub;

/* The VM profiled is the one attached (stop reads L's global state). */
int agent_vm_attached_to(struct lua_State *L)
{
	return attached_L && L == attached_L;
}

int agent_lua_anchor(struct lua_State *L, uint64_t run_id)
{
	owner = run_id;
	return 0;
}

/* -- A writer into memory, optionally slow or failing ------------------------------------- */

static struct {
	uint8_t *data;
	size_t len, cap;
	unsigned delay_us;      /* per call: lets the handler fill both halves */
	size_t fail_after;      /* accept this many bytes, then ENOSPC (0 = never) */
	int stop_after;         /* set *data = NULL at this call (0 = never) */
	int calls, on_stop_calls;
	void (*on_stop_hook)(void); /* run by on_stop */
} sink;

/* While set, the writer waits before writing anything: the handler fills both halves. */
static _Atomic int sink_hold;

static size_t mem_writer(const void **data, size_t len, void *ctx)
{
	while (atomic_load(&sink_hold)) {
		struct timespec ts = { 0, 100000 };
		nanosleep(&ts, NULL);
	}
	sink.calls++;
	if (sink.delay_us) {
		struct timespec ts = { 0, (long)sink.delay_us * 1000 };
		nanosleep(&ts, NULL);
	}
	if (sink.stop_after && sink.calls >= sink.stop_after) {
		*data = NULL;
		return 0;
	}
	size_t n = len;
	if (sink.fail_after && sink.len + n > sink.fail_after) {
		n = sink.fail_after - sink.len;
		errno = ENOSPC;
	}
	if (sink.len + n > sink.cap) {
		sink.cap = (sink.len + n) * 2;
		sink.data = realloc(sink.data, sink.cap);
	}
	memcpy(sink.data + sink.len, *data, n);
	sink.len += n;
	return n;
}

static int mem_on_stop(void *ctx, uint8_t *buf)
{
	sink.on_stop_calls++;
	if (sink.on_stop_hook)
		sink.on_stop_hook();
	return 0;
}

static void sink_reset(void)
{
	free(sink.data);
	memset(&sink, 0, sizeof(sink));
	memset(&stub, 0, sizeof(stub));
}

/* -- Parsing the result ------------------------------------------------------------------- */

struct seen {
	uint64_t samples, syms, last_line, meta_dropped;
	uint64_t cfunc_at;  /* samples read before the first C symbol event (UINT64_MAX: none) */
	int ordered, sym_before_sample;
	char ffnames[64];
};

static int on_sample(void *ctx, const struct lp_sys_sample *s)
{
	struct seen *v = ctx;
	if (s->nlua != 1 || s->lua[0].line <= v->last_line || s->nhost != 2)
		v->ordered = 0;
	v->last_line = s->nlua ? s->lua[0].line : v->last_line;
	if (v->samples == 0 && v->syms == 0)
		v->sym_before_sample = 0;
	v->samples++;
	return 0;
}

static int on_sym(void *ctx, uint64_t addr, const char *chunk, size_t len, uint64_t line)
{
	struct seen *v = ctx;
	v->syms++;
	return 0;
}

static int on_cfunc(void *ctx, uint64_t addr, const char *name, size_t len)
{
	struct seen *v = ctx;
	if (v->cfunc_at == UINT64_MAX && len == 6 && !memcmp(name, "lib_fn", 6))
		v->cfunc_at = v->samples;
	return 0;
}

static int on_meta(void *ctx, const char *key, const char *value)
{
	struct seen *v = ctx;
	if (!strcmp(key, "dropped"))
		v->meta_dropped = strtoull(value, NULL, 10);
	if (!strcmp(key, "ffnames"))
		snprintf(v->ffnames, sizeof(v->ffnames), "%s", value);
	return 0;
}

static int parse_sink(struct seen *v, struct lp_parse_stats *st)
{
	memset(v, 0, sizeof(*v));
	v->ordered = v->sym_before_sample = 1;
	v->cfunc_at = UINT64_MAX;
	char path[] = "/tmp/test_agent_core.XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || write(fd, sink.data, sink.len) != (ssize_t)sink.len)
		return -1;
	lseek(fd, 0, SEEK_SET);
	struct lp_input in;
	lp_input_open_fd(&in, fd, path);
	struct lp_parse_handlers h = { .ctx = v, .sys_sample = on_sample, .sym_lua = on_sym,
				       .sym_cfunc = on_cfunc, .ext_meta = on_meta };
	int rc = lp_parse_stream(&in, &h, st);
	lp_input_close(&in);
	close(fd);
	unlink(path);
	return rc;
}

/* -- Driving the handler ------------------------------------------------------------------ */

static uint8_t buf[LUAPROF_SYSPROF_BUF_MIN];

static int start(uint8_t mode)
{
	luaprof_sysprof_set_writer(mem_writer);
	luaprof_sysprof_set_on_stop(mem_on_stop);
	struct luaprof_sysprof_options o = { .mode = mode, .interval = 3600 * 1000, .buf = buf,
					     .len = sizeof(buf) };
	return luaprof_sysprof_start(FAKE_L, &o);
}

/* One timer expiry, as the kernel would deliver it to the sampled thread: from a POSIX
 * timer, or from the perf clock's file (where the process may open one). */
static void tick(void)
{
	siginfo_t si;
	ucontext_t uc;
	memset(&si, 0, sizeof(si));
	memset(&uc, 0, sizeof(uc));
	uc.uc_mcontext.gregs[REG_RIP] = 0x400000; /* in main: L mode's leaf (0 ends a stack) */
	if (sp.ticker.kind == AGENT_TICKER_PERF) {
		si.si_code = POLL_IN;
		si.si_fd = sp.ticker.fd;
	} else {
		si.si_code = SI_TIMER;
		si.si_value.sival_ptr = &sp;
	}
	on_signal(sp.signo, &si, &uc);
}

/* -- Tests ---------------------------------------------------------------------------------- */

/* Many samples through the smallest buffer and a slow writer: every sample either reaches
 * the stream, in order, or is counted as dropped. The writer is held during the first half
 * of the ticks, so drops happen however fast this machine ticks (with only the delay, a
 * fast machine's writer sometimes kept up and the test failed), and writes during the
 * second half. */
static void test_double_buffer_order_and_drops(void)
{
	sink_reset();
	sink.delay_us = 2000;
	pace_factor = 0; /* every tick is a sample: the buffers are what is tested */
	CHECK_EQ(start(LUAPROF_SYSPROF_CALLGRAPH), LUAPROF_PROFILE_SUCCESS);
	const uint64_t n = 20000;
	dropped_calls = 0;
	atomic_store(&sink_hold, 1);
	for (uint64_t i = 1; i <= n; i++) {
		stub.line = i;
		stub.newsym = i == 1;
		tick();
		if (i == n / 2)
			atomic_store(&sink_hold, 0);
	}
	struct luaprof_sysprof_counters c;
	struct luaprof_sysprof_stats s;
	luaprof_sysprof_report(&c);
	CHECK_EQ(c.samples, n);
	CHECK_EQ(c.vmst_lfunc, n);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
	luaprof_sysprof_stats(&s);
	struct seen v;
	struct lp_parse_stats st;
	CHECK_EQ(parse_sink(&v, &st), LP_OK);
	CHECK(st.complete && st.extension);
	CHECK(v.ordered);
	CHECK(v.sym_before_sample);
	CHECK_EQ(v.samples + s.dropped, n);
	CHECK(s.dropped > 0); /* the held writer could not keep up */
	/* Each sample dropped has its symbols forgotten. */
	CHECK_EQ(dropped_calls, s.dropped);
	CHECK_EQ(v.meta_dropped, s.dropped);
	CHECK_EQ(s.bytes, sink.len);
	CHECK_STR(v.ffnames, "Lua C assert");
	CHECK_EQ(sink.on_stop_calls, 1);
}

/* A library loaded where another was (objs_stub: the handler finds the 5th sample in an
 * object the table does not know): the writer thread reads the objects, and their symbols
 * go into the stream right before that sample, after the 4 before it, though all of them
 * were in the half being filled when it looked. */
static void test_objects_before_sample(void)
{
	sink_reset();
	pace_factor = 0;
	objs_stub.samples = 0;
	objs_stub.stale_at = 5;
	CHECK_EQ(start(LUAPROF_SYSPROF_CALLGRAPH), LUAPROF_PROFILE_SUCCESS);
	for (uint64_t i = 1; i <= 10; i++) {
		stub.line = i;
		stub.newsym = i == 1;
		hs_objcheck_ns = 0; /* each sample checks, as ticks 0.5 ms apart would */
		tick();
		/* The writer thread, woken by the 5th, has read the objects before the 6th. */
		for (int k = 0; i == 5 && k < 2000 && objs_adds != objs_stub.changes; k++) {
			struct timespec ts = { 0, 1000000 };
			nanosleep(&ts, NULL);
		}
	}
	CHECK_EQ(objs_adds, objs_stub.changes);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
	objs_stub.stale_at = 0;
	struct seen v;
	struct lp_parse_stats st;
	CHECK_EQ(parse_sink(&v, &st), LP_OK);
	CHECK(st.complete);
	CHECK(v.ordered);
	CHECK_EQ(v.samples, 10);
	CHECK_EQ(v.cfunc_at, 4);
}

/* Ticks back to back: the objects are checked once, not at every sample, until
 * OBJ_CHECK_NS has passed. */
static void test_objects_check_rate(void)
{
	sink_reset();
	pace_factor = 0;
	objs_stub.samples = 0;
	hs_objcheck_ns = 0;
	CHECK_EQ(start(LUAPROF_SYSPROF_CALLGRAPH), LUAPROF_PROFILE_SUCCESS);
	uint64_t t0 = agent_now_ns();
	for (int i = 0; i < 50; i++)
		tick();
	uint64_t took = agent_now_ns() - t0;
	if (took < OBJ_CHECK_NS)
		CHECK_EQ(objs_stub.samples, 1);
	struct timespec ts = { 0, (long)OBJ_CHECK_NS };
	nanosleep(&ts, NULL);
	uint64_t before = objs_stub.samples;
	tick();
	CHECK_EQ(objs_stub.samples, before + 1);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
}

/* Ticks back to back (shorter than a sample takes) are paced: the handler skips ticks for
 * three times the last sample's duration, and every tick is either a sample or paced. */
static void test_pacing(void)
{
	sink_reset();
	pace_factor = 3;
	CHECK_EQ(start(LUAPROF_SYSPROF_CALLGRAPH), LUAPROF_PROFILE_SUCCESS);
	const uint64_t n = 5000;
	for (uint64_t i = 1; i <= n; i++) {
		stub.line = i;
		stub.newsym = i == 1;
		tick();
	}
	struct luaprof_sysprof_counters c;
	struct luaprof_sysprof_stats s;
	luaprof_sysprof_report(&c);
	luaprof_sysprof_stats(&s);
	CHECK(s.paced > 0);
	CHECK(c.samples > 0);
	/* The stub refuses no sample: a tick is a sample (counted, even when a full buffer
	 * then drops it) or paced. */
	CHECK_EQ(c.samples + s.paced, n);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
	struct seen v;
	struct lp_parse_stats st;
	CHECK_EQ(parse_sink(&v, &st), LP_OK);
	CHECK_EQ(v.samples, c.samples - s.dropped);
	pace_factor = 0;
}

/* Loads the first len bytes of the sink as the report does; *complete as info shows it. */
static int load_prefix(size_t len, int *complete)
{
	struct lp_input in;
	lp_input_open_mem(&in, sink.data, len, "cut");
	struct lp_loaded l;
	int rc = lp_load(&in, NULL, &l);
	*complete = l.stats.complete;
	lp_loaded_free(&l);
	lp_input_close(&in);
	return rc;
}

/* A stream cut where its extension starts (a copy taken while stop wrote the file, a disk
 * that filled there) ends at its epilogue, as Tarantool's streams do; the agent always
 * writes its extension there, so it reads as cut, not as a whole profile: one with no
 * sample, and one of L mode (innermost frames only), which hold no host address only the
 * agent writes, read as whole before. The whole stream reads whole. */
static void test_cut_before_extension(void)
{
	static const uint8_t end[] = { LP_SYSPROF_EPILOGUE, 'l', 'p', 'x', LP_EXT_VERSION };
	static const struct { uint8_t mode; int ticks; } runs[] = {
		{ LUAPROF_SYSPROF_CALLGRAPH, 0 },
		{ LUAPROF_SYSPROF_LEAF, 5 },
		{ LUAPROF_SYSPROF_CALLGRAPH, 5 },
	};
	for (size_t r = 0; r < sizeof(runs) / sizeof(runs[0]); r++) {
		sink_reset();
		pace_factor = 0;
		CHECK_EQ(start(runs[r].mode), LUAPROF_PROFILE_SUCCESS);
		for (int i = 1; i <= runs[r].ticks; i++) {
			stub.line = (uint64_t)i;
			stub.newsym = i == 1;
			tick();
		}
		CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
		const uint8_t *x = memmem(sink.data, sink.len, end, sizeof(end));
		CHECK(x != NULL);
		if (!x)
			continue;
		size_t cut = (size_t)(x - sink.data) + 1;
		int complete = -1;
		CHECK_EQ(load_prefix(sink.len, &complete), LP_OK);
		CHECK_EQ(complete, 1);
		CHECK_EQ(load_prefix(cut, &complete), LP_ERR_TRUNCATED);
		CHECK_EQ(complete, 0);
	}
}

/* Samples the VM side refuses are dropped, not counted in any state. */
static void test_unsafe_samples_dropped(void)
{
	sink_reset();
	CHECK_EQ(start(LUAPROF_SYSPROF_DEFAULT), LUAPROF_PROFILE_SUCCESS);
	stub.line = 1;
	tick();
	stub.fail = 1;
	tick();
	tick();
	struct luaprof_sysprof_counters c;
	struct luaprof_sysprof_stats s;
	luaprof_sysprof_report(&c);
	luaprof_sysprof_stats(&s);
	CHECK_EQ(c.samples, 1);
	CHECK_EQ(s.dropped, 2);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
	CHECK_EQ(sink.len, 0); /* D mode writes nothing */
}

/* Spends about ns of this thread's CPU time. */
static void burn_cpu_ns(uint64_t ns)
{
	uint64_t t0 = agent_clock_ns(CLOCK_THREAD_CPUTIME_ID);
	while (agent_clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0 < ns)
		;
}

/* A refused sample whose signal of the perf clock stands for several intervals (a system
 * call longer than one, the signal blocked) drops them all: one was counted, and the rest
 * of that CPU time was in no count. The clock's count is read against a 1 ms interval
 * here (the event itself ticks hourly), after 5 ms of CPU time. */
static void test_unsafe_merged_ticks_dropped(void)
{
	sink_reset();
	CHECK_EQ(start(LUAPROF_SYSPROF_DEFAULT), LUAPROF_PROFILE_SUCCESS);
	if (sp.ticker.kind != AGENT_TICKER_PERF) {
		CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
		return; /* the POSIX timer's signal is one interval: test_unsafe_samples_dropped */
	}
	sp.ticker.interval_ns = 1000000;
	sp.ticks_max = 1000;
	burn_cpu_ns(5000000);
	stub.fail = 1;
	tick();
	stub.fail = 0;
	struct luaprof_sysprof_counters c;
	struct luaprof_sysprof_stats s;
	luaprof_sysprof_report(&c);
	luaprof_sysprof_stats(&s);
	CHECK_EQ(c.samples, 0);
	CHECK(s.dropped >= 4 && s.dropped <= 50);
	CHECK_EQ(s.overruns, 0);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
}

/* The disk fills while sampling: sampling stops, stop reports ENOSPC, on_stop still runs,
 * and a new profile can start. */
static void test_io_error(void)
{
	sink_reset();
	sink.fail_after = 40000;
	CHECK_EQ(start(LUAPROF_SYSPROF_CALLGRAPH), LUAPROF_PROFILE_SUCCESS);
	for (uint64_t i = 1; i <= 20000 && atomic_load(&sp.state) == ST_RUNNING; i++) {
		stub.line = i;
		tick();
		if (i % 1000 == 0) {
			struct timespec ts = { 0, 2000000 };
			nanosleep(&ts, NULL); /* let the writer thread write */
		}
	}
	for (int k = 0; k < 200 && atomic_load(&sp.state) == ST_RUNNING; k++) {
		struct timespec ts = { 0, 10000000 };
		nanosleep(&ts, NULL);
	}
	CHECK_EQ(atomic_load(&sp.state), ST_HALT);
	struct luaprof_sysprof_counters before, after;
	luaprof_sysprof_report(&before);
	tick();
	luaprof_sysprof_report(&after);
	CHECK_EQ(after.samples, before.samples); /* sampling stopped */
	errno = 0;
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_ERRIO);
	CHECK_EQ(errno, ENOSPC);
	CHECK_EQ(sink.on_stop_calls, 1);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_ERRRUN);
	sink.fail_after = 0;
	CHECK_EQ(start(LUAPROF_SYSPROF_LEAF), LUAPROF_PROFILE_SUCCESS);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
}

/* A writer that sets *data to NULL stops the profile with ECANCELED. */
static void test_writer_stop_request(void)
{
	sink_reset();
	sink.stop_after = 2; /* the symbol table is call 1 */
	CHECK_EQ(start(LUAPROF_SYSPROF_LEAF), LUAPROF_PROFILE_SUCCESS);
	for (uint64_t i = 1; i <= 3000; i++) {
		stub.line = i;
		tick();
	}
	errno = 0;
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_ERRIO);
	CHECK_EQ(errno, ECANCELED);
}

/* Tarantool's validation codes; on_stop runs on every failed start. */
static void test_validation(void)
{
	sink_reset();
	luaprof_sysprof_set_writer(mem_writer);
	luaprof_sysprof_set_on_stop(mem_on_stop);
	struct luaprof_sysprof_options o = { .mode = 0x40, .interval = 10 };
	CHECK_EQ(luaprof_sysprof_start(FAKE_L, &o), LUAPROF_PROFILE_ERRUSE);
	o.mode = LUAPROF_SYSPROF_CALLGRAPH;
	CHECK_EQ(luaprof_sysprof_start(FAKE_L, &o), LUAPROF_PROFILE_ERRUSE);
	o.mode = LUAPROF_SYSPROF_DEFAULT;
	o.interval = 0;
	CHECK_EQ(luaprof_sysprof_start(FAKE_L, &o), LUAPROF_PROFILE_ERRUSE);
	CHECK_STR(luaprof_sysprof_error(), "profiler interval must be greater than 1");
	o.interval = 0;
	o.interval_ns = 99999;
	CHECK_EQ(luaprof_sysprof_start(FAKE_L, &o), LUAPROF_PROFILE_ERRUSE);
	CHECK_STR(luaprof_sysprof_error(), "interval_ns must be at least 100000 (0.1 ms)");
	o.interval_ns = 0;
	o.interval = UINT64_MAX / 1000000ull + 1;
	CHECK_EQ(luaprof_sysprof_start(FAKE_L, &o), LUAPROF_PROFILE_ERRUSE);
	CHECK_STR(luaprof_sysprof_error(), "profiler interval must be at most 18446744073709 (ms)");
	o.interval_ns = 0;
	o.interval = 10;
	stub.attach_fail = 1;
	CHECK_EQ(luaprof_sysprof_start(FAKE_L, &o), LUAPROF_PROFILE_ERRUSE);
	CHECK_STR(luaprof_sysprof_error(), "unsupported LuaJIT build (test)");
	stub.attach_fail = 0;
	CHECK_EQ(sink.on_stop_calls, 6);
	CHECK_EQ(luaprof_sysprof_start(FAKE_L, &o), LUAPROF_PROFILE_SUCCESS);
	CHECK_EQ(luaprof_sysprof_start(FAKE_L, &o), LUAPROF_PROFILE_ERRRUN);
	CHECK_EQ(luaprof_sysprof_set_writer(mem_writer), LUAPROF_PROFILE_ERRUSE);
	CHECK_EQ(luaprof_sysprof_stop(OTHER_L), LUAPROF_PROFILE_ERRUSE); /* another VM */
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_ERRRUN);
}

/* A stray signal of the same number, not from our timer, is ignored. */
static void test_foreign_signal_ignored(void)
{
	sink_reset();
	CHECK_EQ(start(LUAPROF_SYSPROF_DEFAULT), LUAPROF_PROFILE_SUCCESS);
	siginfo_t si;
	ucontext_t uc;
	memset(&si, 0, sizeof(si));
	memset(&uc, 0, sizeof(uc));
	si.si_code = SI_USER;
	on_signal(sp.signo, &si, &uc);
	/* Another file's I/O signal, or another timer's. */
	si.si_code = POLL_IN;
	si.si_fd = sp.ticker.kind == AGENT_TICKER_PERF ? sp.ticker.fd + 1 : 0;
	on_signal(sp.signo, &si, &uc);
	si.si_code = SI_TIMER;
	si.si_value.sival_ptr = &si;
	on_signal(sp.signo, &si, &uc);
	struct luaprof_sysprof_counters c;
	luaprof_sysprof_report(&c);
	CHECK_EQ(c.samples, 0);
	tick();
	luaprof_sysprof_report(&c);
	CHECK_EQ(c.samples, 1);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
}

/* LUAPROF_TIMER: posix keeps the POSIX timer; anything but auto or empty is refused with
 * its name. Where perf events may be opened (root here, unless a filter forbids them),
 * the default is the perf clock. */
static void test_timer_choice(void)
{
	sink_reset();
	setenv("LUAPROF_TIMER", "posix", 1);
	CHECK_EQ(start(LUAPROF_SYSPROF_DEFAULT), LUAPROF_PROFILE_SUCCESS);
	CHECK_EQ(sp.ticker.kind, AGENT_TICKER_POSIX);
	CHECK_STR(sp.timer_name, "posix cpu");
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
	setenv("LUAPROF_TIMER", "hrtimer", 1);
	CHECK_EQ(start(LUAPROF_SYSPROF_DEFAULT), LUAPROF_PROFILE_ERRUSE);
	CHECK(strstr(luaprof_sysprof_error(), "LUAPROF_TIMER is 'hrtimer'") != NULL);
	unsetenv("LUAPROF_TIMER");
	CHECK_EQ(start(LUAPROF_SYSPROF_DEFAULT), LUAPROF_PROFILE_SUCCESS);
	int perf = (int)syscall(SYS_perf_event_open, &(struct perf_event_attr){
		.size = sizeof(struct perf_event_attr), .type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_TASK_CLOCK, .disabled = 1 }, 0, -1, -1, 0);
	CHECK_EQ(sp.ticker.kind, perf >= 0 ? AGENT_TICKER_PERF : AGENT_TICKER_POSIX);
	if (perf >= 0)
		close(perf);
	tick();
	struct luaprof_sysprof_counters c;
	luaprof_sysprof_report(&c);
	CHECK_EQ(c.samples, 1);
	CHECK_EQ(luaprof_sysprof_stop(FAKE_L), LUAPROF_PROFILE_SUCCESS);
}

/* -- A terminating signal under record (termstop.c) during another stop ---------------- */

static int ts_pipe[2];          /* what the child's on_stop got to, for the parent */
static _Atomic int in_on_stop;
static pthread_t helper;        /* a thread that takes the signal the profile's thread blocks */

static void note(char c)
{
	if (write(ts_pipe[1], &c, 1) != 1)
		_exit(101);
}

static void sleep_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&t, &t) != 0 && errno == EINTR)
		;
}

static void *helper_main(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

/* The signal interrupts the stop on the stop's own thread, before its file is closed. */
static void raise_in_on_stop(void)
{
	raise(SIGTERM);
	note('W');
}

/* The signal reaches another thread while the stop's file is being closed. */
static void kill_helper_in_on_stop(void)
{
	pthread_kill(helper, SIGTERM);
	sleep_ms(200);
	note('W');
}

static void slow_on_stop(void)
{
	atomic_store(&in_on_stop, 1);
	sleep_ms(200);
	note('W');
}

/* The stop itself crashes (a fault in the agent, or in what it runs). */
static void fault_in_on_stop(void)
{
	note('F');
	volatile uintptr_t bad = 8;
	*(volatile int *)bad = 1;
	note('W');
}

enum { OWN_STOP, OTHER_THREAD, EXIT_DURING, FAULT_IN_STOP, MEM_OWN_STOP, MEM_RARE,
       MEM_FAULT_IN_STOP, MEM_OTHER_THREAD, MEM_OTHER_BLOCKED, MEM_STOP_BLOCKED };

/* The memory scenarios: termstop armed for a memory profile of this thread, which stops
 * it itself (as memprof.c's stops: named until the file is closed, then the held signal
 * delivered again) or is in the wrapper's rare path. */
static void memory_child(int scenario)
{
	mstub.running = 1;
	if (agent_termstop_arm(1) != 0)
		_exit(100);
	alarm(10);
	if (scenario == MEM_OTHER_THREAD || scenario == MEM_OTHER_BLOCKED) {
		if (pthread_create(&helper, NULL, helper_main, NULL) != 0)
			_exit(102);
		if (scenario == MEM_OTHER_BLOCKED) {
			sigset_t set;
			sigemptyset(&set);
			sigaddset(&set, SIGTERM);
			pthread_sigmask(SIG_BLOCK, &set, NULL);
		}
	}
	switch (scenario) {
	case MEM_OTHER_THREAD:
	case MEM_OTHER_BLOCKED:
		/* The helper takes the signal while this thread stops the profile. */
		atomic_store(&mstub.stop_tid, (long)syscall(SYS_gettid));
		pthread_kill(helper, SIGTERM);
		sleep_ms(300);
		mstub.running = 0;
		note('W');
		atomic_store(&mstub.stop_tid, 0);
		agent_termstop_redeliver();
		sleep_ms(2000); /* the signal's course */
		break;
	case MEM_OWN_STOP:
	case MEM_FAULT_IN_STOP:
		atomic_store(&mstub.stop_tid, (long)syscall(SYS_gettid));
		if (scenario == MEM_FAULT_IN_STOP)
			fault_in_on_stop();
		raise(SIGTERM);
		mstub.running = 0;
		note('W'); /* the stop's file closed */
		atomic_store(&mstub.stop_tid, 0);
		agent_termstop_redeliver();
		break;
	case MEM_STOP_BLOCKED:
		/* The stop's writer blocks for good: the signal, held, never came back. Its
		 * word on stderr goes to the parent with the rest. */
		dup2(ts_pipe[1], STDERR_FILENO);
		atomic_store(&mstub.stop_tid, (long)syscall(SYS_gettid));
		raise(SIGTERM);
		for (;;)
			pause();
	case MEM_RARE:
		mstub.rare = 1;
		raise(SIGTERM);
		note('H'); /* held: the path goes on */
		mstub.rare = 0;
		if (mstub.held) {
			mstub.held = 0;
			agent_termstop_redeliver();
		}
		break;
	}
	note('S');
	_exit(0);
}

/* Runs the scenario in a child that profiles under termstop; out: what its on_stop wrote
 * ('W' once the file is closed) and 'S' if it outlived the stop; *status: its end. */
static void signal_child(int scenario, char *out, size_t cap, int *status)
{
	fflush(stdout);
	fflush(stderr);
	out[0] = '\0';
	*status = -1;
	if (pipe(ts_pipe) != 0)
		return;
	pid_t pid = fork();
	if (pid == 0 && scenario >= MEM_OWN_STOP) {
		close(ts_pipe[0]);
		memory_child(scenario);
	}
	if (pid == 0) {
		close(ts_pipe[0]);
		sink_reset();
		if (start(LUAPROF_SYSPROF_CALLGRAPH) != LUAPROF_PROFILE_SUCCESS ||
		    agent_termstop_arm(0) != 0)
			_exit(100);
		alarm(10); /* a child that hangs dies of SIGALRM */
		if (scenario != OWN_STOP) {
			sigset_t set;
			sigemptyset(&set);
			sigaddset(&set, SIGTERM);
			if (pthread_create(&helper, NULL, helper_main, NULL) != 0)
				_exit(102);
			pthread_sigmask(SIG_BLOCK, &set, NULL);
		}
		switch (scenario) {
		case OWN_STOP:
			sink.on_stop_hook = raise_in_on_stop;
			(void)luaprof_sysprof_stop(FAKE_L);
			break;
		case OTHER_THREAD:
			sink.on_stop_hook = kill_helper_in_on_stop;
			(void)luaprof_sysprof_stop(FAKE_L);
			sleep_ms(2000); /* the signal's course, on the helper */
			break;
		case FAULT_IN_STOP:
			sink.on_stop_hook = fault_in_on_stop;
			(void)luaprof_sysprof_stop(FAKE_L);
			break;
		case EXIT_DURING:
			/* The helper's signal stops the profile (termstop's thread); this thread
			 * exits meanwhile. */
			sink.on_stop_hook = slow_on_stop;
			pthread_kill(helper, SIGTERM);
			while (!atomic_load(&in_on_stop))
				sleep_ms(1);
			exit(0);
		}
		note('S');
		_exit(0);
	}
	close(ts_pipe[1]);
	size_t n = 0;
	ssize_t k;
	while (pid > 0 && n + 1 < cap && (k = read(ts_pipe[0], out + n, cap - 1 - n)) > 0)
		n += (size_t)k;
	out[n] = '\0';
	close(ts_pipe[0]);
	if (pid > 0)
		waitpid(pid, status, 0);
}

/*
** Under record, a terminating signal during a stop already under way (exit's, the
** program's own) lets that stop close its file, then takes its course: the stop had it
** cut short, the signal's stop finding nothing to stop and the signal killing the process
** at once; and exit ended the process under the signal's stop (1 run in 4 of a program
** exiting as another of its threads took SIGTERM).
*/
static void test_signal_during_stop(void)
{
	char out[8];
	int status;
	signal_child(OWN_STOP, out, sizeof(out), &status);
	CHECK_STR(out, "W");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	signal_child(OTHER_THREAD, out, sizeof(out), &status);
	CHECK_STR(out, "W");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	/* Exit or the signal, whichever ends the process first; the file closed before. */
	signal_child(EXIT_DURING, out, sizeof(out), &status);
	CHECK_STR(out, "W");
	CHECK((WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) ||
	      (WIFEXITED(status) && WEXITSTATUS(status) == 0));
	/* A fault on the thread that stops is not deferred: returning from the handler
	 * raised it again at the same instruction, for ever. It dies of it at once. */
	signal_child(FAULT_IN_STOP, out, sizeof(out), &status);
	CHECK_STR(out, "F");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
	/* A memory profile: the signal is held while this thread's stop closes its file,
	 * then delivered again, and the handler finds nothing left to stop (before: the
	 * signal's stop found the stop's lock held and the process died at once, "": the
	 * file cut short). */
	signal_child(MEM_OWN_STOP, out, sizeof(out), &status);
	CHECK_STR(out, "W");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	/* In the wrapper's rare path: held until the path is left, then the signal's stop
	 * writes the file (before: the process died at once, the profile not stopped). */
	signal_child(MEM_RARE, out, sizeof(out), &status);
	CHECK_STR(out, "HG");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	/* A fault in the memory profile's stop is not held, nor waited on: at once. */
	uint64_t t0 = agent_now_ns();
	signal_child(MEM_FAULT_IN_STOP, out, sizeof(out), &status);
	CHECK_STR(out, "F");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV);
	CHECK(agent_now_ns() - t0 < 2000000000ull);
	/* The signal on another thread during the memory profile's stop: sent on to the
	 * profile's thread, held there until the file is closed, then taken (before: the
	 * other thread died of it at once, ""). */
	signal_child(MEM_OTHER_THREAD, out, sizeof(out), &status);
	CHECK_STR(out, "W");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	/* Unless the profile's thread blocks it: the other thread takes it within 50 ms,
	 * not after STOP_WAIT_NS (the profile cut short: nothing can stop it). */
	t0 = agent_now_ns();
	signal_child(MEM_OTHER_BLOCKED, out, sizeof(out), &status);
	CHECK_STR(out, "");
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	CHECK(agent_now_ns() - t0 < 2000000000ull);
	/* A stop that never ends (its writer blocked): the held signal takes its course after
	 * HOLD_MAX_NS (1 s here), said on stderr (before: held for good, the child ended by
	 * its 10 s alarm, SIGALRM). */
	char msg[512];
	t0 = agent_now_ns();
	signal_child(MEM_STOP_BLOCKED, msg, sizeof(msg), &status);
	uint64_t took = agent_now_ns() - t0;
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
	CHECK(took >= 900000000ull && took < 4000000000ull);
	CHECK(strstr(msg, "luaprof: SIGTERM held 1.0 s") != NULL);
	CHECK(strstr(msg, "the profile cut short") != NULL);
}

/*
** The stack dictionary: one id per distinct (body, tag); the tag is part of the key only
** (the compiler's RECORD and ASM phases allocating at the same frames get an id each, but
** the records written carry the body alone), and bodies differing in one byte differ.
*/
static void test_stackdict_tags(void)
{
	struct agent_stackdict d;
	memset(&d, 0, sizeof(d));
	static const uint8_t a[] = { 1, 2, 3 }, b[] = { 1, 2, 4 };
	uint32_t id[5];
	CHECK_EQ(agent_stackdict_intern(&d, a, 3, 0, SIZE_MAX, &id[0]), 0);
	CHECK_EQ(agent_stackdict_intern(&d, a, 3, 4, SIZE_MAX, &id[1]), 0);
	CHECK_EQ(agent_stackdict_intern(&d, a, 3, 6, SIZE_MAX, &id[2]), 0);
	CHECK_EQ(agent_stackdict_intern(&d, b, 3, 4, SIZE_MAX, &id[3]), 0);
	CHECK_EQ(agent_stackdict_intern(&d, a, 3, 4, SIZE_MAX, &id[4]), 0);
	CHECK_EQ(id[0], 0);
	CHECK_EQ(id[1], 1);
	CHECK_EQ(id[2], 2);
	CHECK_EQ(id[3], 3);
	CHECK_EQ(id[4], 1);
	/* A new entry past max_bytes is refused; a known one is still found. */
	uint32_t x;
	CHECK_EQ(agent_stackdict_intern(&d, b, 3, 9, 12, &x), -1);
	CHECK_EQ(agent_stackdict_intern(&d, b, 3, 4, 12, &x), 0);
	CHECK_EQ(x, 3);
	uint8_t out[64];
	struct lp_wbuf w;
	lp_wbuf_init(&w, out, sizeof(out), NULL, NULL);
	agent_stackdict_write(&d, &w);
	CHECK(lp_wbuf_ok(&w));
	/* Per entry: type, length, id, body. */
	static const uint8_t want[] = { LP_EXT_STACK, 4, 0, 1, 2, 3, LP_EXT_STACK, 4, 1, 1, 2, 3,
					LP_EXT_STACK, 4, 2, 1, 2, 3, LP_EXT_STACK, 4, 3, 1, 2, 4 };
	CHECK_EQ((size_t)(w.pos - w.buf), sizeof(want));
	CHECK(memcmp(out, want, sizeof(want)) == 0);
	agent_stackdict_free(&d);
}

int main(void)
{
	RUN(test_stackdict_tags);
	RUN(test_validation);
	RUN(test_double_buffer_order_and_drops);
	RUN(test_pacing);
	RUN(test_objects_before_sample);
	RUN(test_cut_before_extension);
	RUN(test_unsafe_samples_dropped);
	RUN(test_unsafe_merged_ticks_dropped);
	RUN(test_io_error);
	RUN(test_writer_stop_request);
	RUN(test_foreign_signal_ignored);
	RUN(test_objects_check_rate);
	RUN(test_timer_choice);
	RUN(test_signal_during_stop);
	sink_reset();
	return UNIT_RESULT();
}
