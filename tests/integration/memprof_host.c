/*
** An embedding host for memprof_luajit.sh: lua_close while the memory profiler runs.
**
** Usage: memprof_host MODE CPATH OUTDIR ITERATIONS
** Each iteration creates a state (luaL_newstate, luaL_openlibs), runs a chunk and closes the
** state with lua_close:
**   memprof  the chunk requires luaprof (package.cpath = CPATH), starts luaprof.memprof
**            into OUTDIR/host-I.bin, allocates on line 3 of chunk "=host" and returns
**            without stopping: lua_close must stop the profiler and put LuaJIT's allocator
**            back before the heap is freed;
**   memprof_malloc  the same with lua_newstate and a malloc/realloc/free allocator instead
**            of LuaJIT's own arena, so that valgrind sees every block of the Lua heap:
**            each must be freed exactly once, whichever allocator the wrapper chained to;
**   putback  the same, but the profile is stopped while a counting allocator sits over
**            the wrapper, which the host then puts back (what it found) before lua_close:
**            the wrapper, passing through, must not keep LuaJIT from destroying its arena;
**   plain    the same chunk without the profiler (the baseline);
**   control  no profiler, but a pass-through allocator installed with lua_setallocf just
**            before lua_close: what a wrapper left in place at close does (LuaJIT then frees
**            its state through it and never destroys its own arena), to show that the
**            measurement below sees such a leak.
** Prints "vmsize_kib FIRST LAST": the process's mapped memory (VmSize) after the third
** iteration (the first ones load libraries and let malloc settle: glibc serves the
** profiler's 4 MiB buffer by mmap once, then from a heap it keeps) and after the last. Exit 0, or 1 with a message on stderr.
**
** Usage: memprof_host stale CPATH OUTDIR
** An allocator kept from lua_getallocf while the exact-mode profiler ran (as a C library
** that caches the state's allocator does), called from a C function after memprof.stop()
** and after a shared object was loaded (which would make the profiler name C functions
** anew): it must pass straight through to the VM's allocator. Prints "survived".
**
** Usage: memprof_host oom CPATH OUTDIR on|off
** Out of memory while profiling: a malloc allocator that refuses any block that would take
** the state's live bytes past a limit (8 MiB over what the profile starts with), and a
** chunk (JIT on or off) that runs into it four ways inside pcall: growing an array, new
** tables in a loop, doubling a string, a table.concat. Each failed call must leave no
** event. Prints the chunk's facts: "counters EVENTS ALLOCS FREES REALLOCS ALLOC_BYTES
** FREE_BYTES" (memprof.report() after stop), "live_delta N" (the allocator's own count of
** live bytes at the stop minus at the start, which the profile's alloc_bytes - free_bytes
** must equal), "oom N" (pcalls that failed with "not enough memory") and "refused N" (calls
** the allocator refused), then "ran oom".
**
** Usage: memprof_host closing CPATH OUTDIR -
** A finalizer of the program's own that starts the profilers while lua_close runs the
** finalizers: after the profilers' own sentinels were finalized, nothing would stop such a
** profile before the heap is freed, so start must refuse (the state is closing). Prints
** "closing memprof ..." and "closing sysprof ..." with what start returned (ok, message,
** errno), then "after memprof ..." and "after sysprof ..." for a start and stop in a new
** state: the profilers must not be left running for the rest of the process.
**
** Usage: memprof_host fork CPATH OUTDIR -
** A forked child of a process whose state A runs a sampled memory profile (which holds the
** stack sampler for A): the child is not profiling, so the sampler is not held for it, and
** the child's CPU profiler may sample a state B of its own. Prints the child's
** "child sysprof OK MSG" (start on B), "child memprof OK MSG" (a sampled start on B, after
** that CPU profile stopped), then the parent's "parent memprof OK" (A's stop).
**
** Usage: memprof_host migrate CPATH OUTDIR -
** A state whose CPU profile (C mode, 1 ms of wall time) and sampled memory profile start on
** the main thread, then runs on a second thread while the main one waits: the sampled
** allocations of that thread are lost (counted), not walked while the CPU profiler's handler
** walks the main thread with the same walker state; back on the main thread, with the CPU
** profile stopped, they are taken again. Prints "migrate ok".
**
** Usage: memprof_host deadsampler CPATH OUTDIR -
** The CPU profiler started on a thread that then exits, while the state's sampled memory
** profile goes on on the main thread: no handler can run any more, so no sampled
** allocation is lost for it. Prints "deadsampler ok".
**
** Usage: memprof_host exitsampler CPATH OUTDIR -
** The same, but the thread's exit is held in a thread-specific data destructor of the
** host's (run after luaprof's) for 300 ms while the main thread runs: past the destructors
** a thread runs no Lua and takes no sample, though the kernel still finds it (as it does
** for a while after pthread_join returns, which lost samples under load). Writes
** OUTDIR/exiting.bin and prints "exitsampler ok".
**
** Usage: memprof_host closeshared CPATH OUTDIR -|exact
** A state B, profiled once, then given the allocator of a state A that runs a sampled
** profile (the profiler's generated stub, from lua_getallocf; with exact, an exact profile
** and its wrapper), which B then shares: B's blocks are counted in A's profile, and
** lua_close(B) must free them through the stub or wrapper (the profiler's closing step must
** not put its original back), so that A's profile no longer holds them as in use. B keeps
** about 400 KiB; A almost nothing. Writes A's profile to OUTDIR/cs.bin (exact:
** OUTDIR/cs-exact.bin) and prints "closeshared ok".
**
** Usage: memprof_host duefree CPATH OUTDIR -
** A state A's wrapper kept from a sampled profile (lua_getallocf), then a state B profiled
** with every allocation sampled (sample = 1), its collector stopped halfway through
** sweeping 1000 garbage tables (line 3 of its chunk), and a block allocated and freed
** through A's kept wrapper: its bytes count B's countdown below 0, so that B's next
** allocator call, a free of one of those tables, has a sample due. B's collection then
** finishes: none of the tables may stay in use in B's profile (OUTDIR/duefree.bin; the
** free was taken as a sample, and the block stayed live until stop). Prints "duefree ok".
**
** Usage: memprof_host chain CPATH OUTDIR exact|sampled
** The profiler's wrapper among other allocators, in the given mode:
**   scoped   a counting allocator installed over the profiler's wrapper while it runs, the
**            profile stopped inside that scope, then the counting allocator taken away
**            (giving back what it found: the profiler's wrapper) and a profile started
**            again: it must not wrap its own wrapper (it recursed forever, or spun in a
**            sampled stub); the counting allocator must go on being called after the
**            first stop (stop used to drop it);
**   foreign  state A's wrapper kept, A's profile stopped, a block allocated through it;
**            state B (its own allocator, which tags its blocks) profiled, in either mode,
**            and A's block freed through A's kept wrapper: it must reach A's allocator
**            (it reached B's), and B's profile must hold none of A's events.
**   many     100 states alive at once, each profiled once: every start succeeds (the
**            wrappers' records were a table of 64);
**   shared   (exact mode) states A and B made with the same allocator and ud; A's wrapper
**            left under a counting allocator when A's profile stops, then B profiled
**            while A allocates: none of A's events may be in B's profile.
** Prints "scoped ok COUNT", "foreign ok FOREIGN B_EVENTS" (FOREIGN: foreign blocks B's
** allocator saw, which must be 0), "many ok 100", and in exact mode "shared ok B_EVENTS".
*/
#define _POSIX_C_SOURCE 200809L
#include <dlfcn.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static lua_Alloc orig_f;
static void *orig_ud;

static void *passthrough(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	return orig_f(orig_ud, ptr, osize, nsize);
}

static void *malloc_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	(void)osize;
	if (nsize == 0) {
		free(ptr);
		return NULL;
	}
	return realloc(ptr, nsize);
}

/* The oom mode's allocator: live bytes, and a limit on them (0: none). */
static size_t live, limit, refused;

static void *limit_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	if (!ptr)
		osize = 0;
	if (nsize == 0) {
		free(ptr);
		live -= osize;
		return NULL;
	}
	if (limit && nsize > osize && live + (nsize - osize) > limit) {
		refused++;
		return NULL;
	}
	void *np = realloc(ptr, nsize);
	if (np)
		live += nsize - osize;
	return np;
}

static int l_live(lua_State *L)
{
	lua_pushnumber(L, (lua_Number)live);
	return 1;
}

static int l_limit(lua_State *L)
{
	limit = (size_t)lua_tonumber(L, 1);
	return 0;
}

static const char chunk_oom[] =
	"local path, jitmode = ...\n"
	"if jitmode == 'off' then jit.off() else jit.on() end\n"
	"local mp = require 'luaprof'.memprof\n"
	"assert(mp.start(path))\n"
	"local live0 = host_live()\n"
	"host_limit(live0 + 8 * 1024 * 1024)\n"
	"local oom = 0\n"
	"local function try(f)\n"
	"  local ok, err = pcall(f)\n"
	"  if not ok and tostring(err):find('not enough memory') then oom = oom + 1 end\n"
	"  collectgarbage()\n"
	"end\n"
	"try(function() local t = {} for i = 1, 1e8 do t[i] = i end end)\n"
	"try(function() local t = {} for i = 1, 1e8 do t[i] = {i} end end)\n"
	"try(function() local s = 'x' for i = 1, 64 do s = s .. s end end)\n"
	"try(function() local p = {} for i = 1, 1e8 do p[i] = 'p' .. i end end)\n"
	"local live1 = host_live()\n"
	"host_limit(0)\n"
	"local ok, msg = mp.stop()\n"
	"assert(ok, msg)\n"
	"local r = mp.report()\n"
	"print(string.format('counters %d %d %d %d %d %d', r.events, r.allocs, r.frees,\n"
	"  r.reallocs, r.alloc_bytes, r.free_bytes))\n"
	"print(string.format('live_delta %d', live1 - live0))\n"
	"print('oom ' .. oom)\n";

/* chain mode: a counting allocator over another, and an allocator tagging its blocks. */
static lua_Alloc under_f;
static void *under_ud;
static long counted;

static void *counting(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	counted++;
	return under_f(under_ud, ptr, osize, nsize);
}

#define TAG 0x5441475441475441ull
static long foreign;

static void *tagging(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	(void)osize;
	unsigned long long *h = ptr ? (unsigned long long *)ptr - 2 : NULL;
	if (h && h[0] != TAG) {
		foreign++;
		return NULL;
	}
	if (nsize == 0) {
		free(h);
		return NULL;
	}
	unsigned long long *n = realloc(h, nsize + 16);
	if (!n)
		return NULL;
	n[0] = TAG;
	return n + 2;
}

/* stale mode: the allocator kept while profiling. */
static lua_Alloc kept_f;
static void *kept_ud;

static int l_use_kept(lua_State *L)
{
	for (int i = 0; i < 1000; i++) {
		void *p = kept_f(kept_ud, NULL, 0, 64);
		if (!p)
			return luaL_error(L, "the kept allocator failed");
		p = kept_f(kept_ud, p, 64, 128);
		if (!p)
			return luaL_error(L, "the kept allocator failed to grow a block");
		kept_f(kept_ud, p, 128, 0);
	}
	return 0;
}

/* L with the standard libraries and package.cpath set, or NULL (a message said why). */
static lua_State *host_state(lua_State *L, const char *cpath)
{
	if (!L) {
		fprintf(stderr, "memprof_host: cannot create a Lua state\n");
		return NULL;
	}
	luaL_openlibs(L);
	lua_getglobal(L, "package");
	lua_pushstring(L, cpath);
	lua_setfield(L, -2, "cpath");
	lua_pop(L, 1);
	return L;
}

/* stale mode: 0, or 1 with a message. */
static int run_stale(const char *cpath, const char *out)
{
	lua_State *L = host_state(luaL_newstate(), cpath);
	if (!L)
		return 1;
	lua_register(L, "use_kept", l_use_kept);
	char path[4096];
	snprintf(path, sizeof(path), "%s/stale.bin", out);
	static const char start[] = "assert(require 'luaprof'.memprof.start(...))";
	static const char stop[] = "assert(require 'luaprof'.memprof.stop())";
	if (luaL_loadbuffer(L, start, strlen(start), "=start") ||
	    (lua_pushstring(L, path), lua_pcall(L, 1, 0, 0))) {
		fprintf(stderr, "memprof_host: %s\n", lua_tostring(L, -1));
		return 1;
	}
	kept_f = lua_getallocf(L, &kept_ud);
	if (luaL_dostring(L, stop)) {
		fprintf(stderr, "memprof_host: %s\n", lua_tostring(L, -1));
		return 1;
	}
	if (!dlopen("libz.so.1", RTLD_NOW)) {
		fprintf(stderr, "memprof_host: dlopen libz.so.1: %s\n", dlerror());
		return 1;
	}
	if (luaL_dostring(L, "use_kept() use_kept()")) {
		fprintf(stderr, "memprof_host: %s\n", lua_tostring(L, -1));
		return 1;
	}
	lua_close(L);
	printf("survived\n");
	return 0;
}

static int run_lua(lua_State *L, const char *code)
{
	if (luaL_dostring(L, code)) {
		fprintf(stderr, "memprof_host: %s\n", lua_tostring(L, -1));
		return 1;
	}
	return 0;
}

/* chain mode: 0, or 1 with a message. */
static int run_chain(const char *cpath, const char *out, const char *mode)
{
	char start[4400], work[] = "local t = {} for i = 1, 2000 do t[i] = { i } end";
	int sampled = !strcmp(mode, "sampled");
	/* scoped */
	lua_State *L = host_state(luaL_newstate(), cpath);
	if (!L)
		return 1;
	snprintf(start, sizeof(start), "assert(require 'luaprof'.memprof.start('%s/chain.bin'%s))",
		 out, sampled ? ", { sample = 4096 }" : "");
	if (run_lua(L, start))
		return 1;
	under_f = lua_getallocf(L, &under_ud);
	lua_setallocf(L, counting, NULL);
	if (run_lua(L, work) || run_lua(L, "assert(require 'luaprof'.memprof.stop())"))
		return 1;
	long before = counted;
	if (run_lua(L, work))
		return 1;
	if (counted == before) {
		fprintf(stderr, "memprof_host: stop took away the allocator installed over the "
			"profiler's\n");
		return 1;
	}
	lua_setallocf(L, under_f, under_ud);
	if (run_lua(L, start) || run_lua(L, work) ||
	    run_lua(L, "assert(require 'luaprof'.memprof.stop())") || run_lua(L, work))
		return 1;
	lua_close(L);
	printf("scoped ok %ld\n", counted - before);

	/* foreign */
	lua_State *A = host_state(luaL_newstate(), cpath);
	lua_State *B = host_state(lua_newstate(tagging, NULL), cpath);
	if (!A || !B)
		return 1;
	if (run_lua(A, start))
		return 1;
	kept_f = lua_getallocf(A, &kept_ud);
	if (run_lua(A, "assert(require 'luaprof'.memprof.stop())"))
		return 1;
	void *p = kept_f(kept_ud, NULL, 0, 64);
	snprintf(start, sizeof(start), "assert(require 'luaprof'.memprof.start('%s/chainb.bin'%s))",
		 out, sampled ? "" : ", { sample = 4096 }");
	/* B in the other mode, then in the same: A's kept wrapper is neither's. */
	for (int round = 0; round < 2; round++) {
		if (run_lua(B, start))
			return 1;
		for (int i = 0; i < 2000; i++) {
			void *q = kept_f(kept_ud, NULL, 0, 48);
			kept_f(kept_ud, q, 48, 0);
		}
		if (round == 1)
			kept_f(kept_ud, p, 64, 0);
		if (run_lua(B, "local mp = require 'luaprof'.memprof\n"
			       "B_EVENTS = mp.report().events\n"
			       "assert(mp.stop())"))
			return 1;
		snprintf(start, sizeof(start),
			 "assert(require 'luaprof'.memprof.start('%s/chainb.bin'%s))", out,
			 sampled ? ", { sample = 4096 }" : "");
	}
	lua_getglobal(B, "B_EVENTS");
	long events = (long)lua_tonumber(B, -1);
	lua_close(A);
	lua_close(B);
	printf("foreign ok %ld %ld\n", foreign, events);

	/* many */
	enum { MANY = 100 };
	static lua_State *many[MANY];
	snprintf(start, sizeof(start), "assert(require 'luaprof'.memprof.start('%s/many.bin'%s))",
		 out, sampled ? ", { sample = 4096 }" : "");
	for (int i = 0; i < MANY; i++) {
		if (!(many[i] = host_state(luaL_newstate(), cpath)) || run_lua(many[i], start) ||
		    run_lua(many[i], work) ||
		    run_lua(many[i], "assert(require 'luaprof'.memprof.stop())"))
			return 1;
	}
	for (int i = 0; i < MANY; i++)
		lua_close(many[i]);
	printf("many ok %d\n", MANY);
	if (sampled)
		return 0;

	/* shared: the generated sampled stub cannot tell such states apart (memprof.c) */
	A = host_state(lua_newstate(malloc_alloc, NULL), cpath);
	B = host_state(lua_newstate(malloc_alloc, NULL), cpath);
	if (!A || !B)
		return 1;
	snprintf(start, sizeof(start), "assert(require 'luaprof'.memprof.start('%s/shared%%s.bin'))",
		 out);
	char sa[4500], sb[4500];
	snprintf(sa, sizeof(sa), start, "a");
	snprintf(sb, sizeof(sb), start, "b");
	if (run_lua(A, sa))
		return 1;
	under_f = lua_getallocf(A, &under_ud);
	lua_setallocf(A, counting, NULL);
	if (run_lua(A, "assert(require 'luaprof'.memprof.stop())") || run_lua(B, sb) ||
	    run_lua(A, work) || run_lua(A, work) ||
	    run_lua(B, "local mp = require 'luaprof'.memprof\n"
		       "B_EVENTS = mp.report().events\n"
		       "assert(mp.stop())"))
		return 1;
	lua_getglobal(B, "B_EVENTS");
	events = (long)lua_tonumber(B, -1);
	lua_setallocf(A, under_f, under_ud);
	lua_close(A);
	lua_close(B);
	printf("shared ok %ld\n", events);
	return 0;
}

/* closing mode: 0, or 1 with a message. */
static int run_closing(const char *cpath, const char *out)
{
	static const char setup[] =
		"local out = ...\n"
		"local lp = require 'luaprof'\n"
		"local function show(what, ok, msg, e) print(what, tostring(ok), msg, e) end\n"
		"-- The finalizer is made first: lua_close runs finalizers newest first.\n"
		"FIN = newproxy(true)\n"
		"getmetatable(FIN).__gc = function()\n"
		"  show('closing memprof', lp.memprof.start(out .. '/closing-mem.bin'))\n"
		"  show('closing sysprof', lp.sysprof.start{mode = 'C', path = out .. '/closing-cpu.bin'})\n"
		"end\n"
		"assert(lp.memprof.start(out .. '/closing-a.bin')) assert(lp.memprof.stop())\n"
		"assert(lp.sysprof.start{mode = 'C', path = out .. '/closing-b.bin'})\n"
		"assert(lp.sysprof.stop())\n";
	static const char after[] =
		"local out = ...\n"
		"local lp = require 'luaprof'\n"
		"local ok, msg = lp.memprof.start(out .. '/closing-c.bin')\n"
		"print('after memprof', tostring(ok), msg, ok and lp.memprof.stop())\n"
		"ok, msg = lp.sysprof.start{mode = 'C', path = out .. '/closing-d.bin'}\n"
		"print('after sysprof', tostring(ok), msg, ok and lp.sysprof.stop())\n";
	const char *chunks[2] = { setup, after };
	for (int i = 0; i < 2; i++) {
		lua_State *L = host_state(luaL_newstate(), cpath);
		if (!L)
			return 1;
		if (luaL_loadbuffer(L, chunks[i], strlen(chunks[i]), "=closing") ||
		    (lua_pushstring(L, out), lua_pcall(L, 1, 0, 0))) {
			fprintf(stderr, "memprof_host: %s\n", lua_tostring(L, -1));
			return 1;
		}
		fflush(stdout);
		lua_close(L);
	}
	return 0;
}

/* A state whose global OUT is the output directory, or NULL. */
static lua_State *out_state(const char *cpath, const char *out)
{
	lua_State *L = host_state(luaL_newstate(), cpath);
	if (L)
		lua_pushstring(L, out), lua_setglobal(L, "OUT");
	return L;
}

/* fork mode: 0, or 1 with a message. */
static int run_fork(const char *cpath, const char *out)
{
	static const char parent[] =
		"local out = OUT\n"
		"assert(require('luaprof').memprof.start(out .. '/fork-a.bin', {sample = 4096}))\n"
		"KEEP = {} for i = 1, 1000 do KEEP[i] = {i} end\n";
	static const char child[] =
		"local out = OUT\n"
		"local lp = require 'luaprof'\n"
		"local ok, msg = lp.sysprof.start{mode = 'C', path = out .. '/fork-b.bin'}\n"
		"print('child sysprof', tostring(ok), msg, ok and lp.sysprof.stop())\n"
		"ok, msg = lp.memprof.start(out .. '/fork-c.bin', {sample = 4096})\n"
		"print('child memprof', tostring(ok), msg, ok and lp.memprof.stop())\n";
	lua_State *A = out_state(cpath, out);
	if (!A || run_lua(A, parent))
		return 1;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		lua_State *B = out_state(cpath, out);
		int rc = !B || run_lua(B, child);
		fflush(stdout);
		_exit(rc);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "memprof_host: the child failed (status %#x)\n", st);
		return 1;
	}
	int rc = run_lua(A, "local ok, msg = require('luaprof').memprof.stop()\n"
			    "print('parent memprof', tostring(ok), msg)\n");
	lua_close(A);
	return rc;
}

struct thread_chunk {
	lua_State *L;
	const char *code;
};

static sem_t exit_sem;   /* exitsampler: the thread is in its last destructor */

static void held_exit(void *arg)
{
	(void)arg;
	sem_post(&exit_sem);
	struct timespec ts = { 0, 300 * 1000 * 1000 };
	nanosleep(&ts, NULL);
}

static void *thread_main(void *arg)
{
	const struct thread_chunk *c = arg;
	return (void *)(intptr_t)run_lua(c->L, c->code);
}

/* exitsampler: made after `during` started the CPU profiler, so after luaprof's key. */
static void *thread_main_held(void *arg)
{
	pthread_key_t key;
	void *rc = thread_main(arg);
	if (pthread_key_create(&key, held_exit) || pthread_setspecific(key, arg)) {
		sem_post(&exit_sem);
		return (void *)1;
	}
	return rc;
}

/* migrate, deadsampler and exitsampler modes: a state runs `before` on the main thread,
 * `during` on a second thread while the main one waits, then `after` back on the main
 * thread once the second has exited (held: once it is in its last destructor); 0, or 1
 * with a message. */
static int run_two_threads(const char *cpath, const char *out, const char *before,
			   const char *during, const char *after, int held)
{
	lua_State *A = out_state(cpath, out);
	if (!A || run_lua(A, before))
		return 1;
	struct thread_chunk c = { A, during };
	pthread_t th;
	void *rc = NULL;
	int bad = held && sem_init(&exit_sem, 0, 0);
	if (bad || pthread_create(&th, NULL, held ? thread_main_held : thread_main, &c) ||
	    (held && sem_wait(&exit_sem)) || (!held && (pthread_join(th, &rc) || rc))) {
		fprintf(stderr, "memprof_host: the second thread failed\n");
		return 1;
	}
	bad = run_lua(A, after);
	if (held && (pthread_join(th, &rc) || rc)) {
		fprintf(stderr, "memprof_host: the second thread failed\n");
		bad = 1;
	}
	lua_close(A);
	return bad;
}

static int run_migrate(const char *cpath, const char *out)
{
	return run_two_threads(cpath, out,
			       "lp = require 'luaprof'\n"
			       "assert(lp.sysprof.start{mode = 'C', interval = 1, clock = 'wall', "
			       "path = OUT .. '/mig-cpu.bin'})\n"
			       "assert(lp.memprof.start(OUT .. '/mig.bin', {sample = 256}))\n",
			       "local t = {} for i = 1, 300000 do "
			       "t[i % 5000 + 1] = { i, tostring(i) } end\n",
			       "assert(lp.sysprof.stop())\n"
			       "local t = {} for i = 1, 20000 do t[i] = { i } end\n"
			       "assert(lp.memprof.stop())\n"
			       "print('migrate ok')\n", 0);
}

/* The CPU profiler's start on the second thread, which then exits (held: is exiting). */
static int run_deadsampler(const char *cpath, const char *out, int held)
{
	return run_two_threads(cpath, out,
			       held ? "lp = require 'luaprof'\n"
				      "assert(lp.memprof.start(OUT .. '/exiting.bin', {sample = 256}))\n"
				    : "lp = require 'luaprof'\n"
				      "assert(lp.memprof.start(OUT .. '/dead.bin', {sample = 256}))\n",
			       "assert(lp.sysprof.start{mode = 'C', path = OUT .. '/dead-cpu.bin'})\n",
			       held ? "local t = {} for i = 1, 20000 do t[i] = { i } end\n"
				      "assert(lp.memprof.stop())\n"
				      "lp.sysprof.stop()\n"
				      "print('exitsampler ok')\n"
				    : "local t = {} for i = 1, 20000 do t[i] = { i } end\n"
				      "assert(lp.memprof.stop())\n"
				      "lp.sysprof.stop()\n"
				      "print('deadsampler ok')\n",
			       held);
}

/* closeshared mode: 0, or 1 with a message. */
static int run_closeshared(const char *cpath, const char *out, int exact)
{
	char code[4400];
	/* B first, profiled once: its sentinel is what lua_close(B) runs the profiler's
	 * closing step from. */
	lua_State *B = host_state(lua_newstate(malloc_alloc, NULL), cpath);
	snprintf(code, sizeof(code), "local mp = require 'luaprof'.memprof\n"
		 "assert(mp.start('%s/csb.bin')) assert(mp.stop())", out);
	if (!B || run_lua(B, code))
		return 1;
	lua_State *A = host_state(lua_newstate(malloc_alloc, NULL), cpath);
	snprintf(code, sizeof(code), "assert(require 'luaprof'.memprof.start('%s/cs%s.bin'%s))",
		 out, exact ? "-exact" : "", exact ? "" : ", { sample = 256 }");
	if (!A || run_lua(A, code))
		return 1;
	void *ud;
	lua_Alloc stub = lua_getallocf(A, &ud);
	lua_setallocf(B, stub, ud);
	if (run_lua(B, "KEEP = {} for i = 1, 4000 do KEEP[i] = { i, i, i } end"))
		return 1;
	lua_close(B);
	if (run_lua(A, "assert(require 'luaprof'.memprof.stop())"))
		return 1;
	lua_close(A);
	printf("closeshared ok\n");
	return 0;
}

/* duefree mode: 0, or 1 with a message. */
static int run_duefree(const char *cpath, const char *out)
{
	lua_State *A = host_state(luaL_newstate(), cpath);
	lua_State *B = host_state(luaL_newstate(), cpath);
	if (!A || !B ||
	    run_lua(A, "assert(require 'luaprof'.memprof.start('/dev/null', { sample = 4096 }))"))
		return 1;
	void *ud;
	lua_Alloc kept = lua_getallocf(A, &ud);
	if (run_lua(A, "assert(require 'luaprof'.memprof.stop())"))
		return 1;
	char code[4400];
	snprintf(code, sizeof(code), "jit.off() collectgarbage() collectgarbage('stop')\n"
		 "assert(require 'luaprof'.memprof.start('%s/duefree.bin', { sample = 1 }))\n"
		 "for i = 1, 1000 do local t = {} end", out);
	if (run_lua(B, code))
		return 1;
	/* Steps until one frees more than a few blocks: the sweep of the objects (the
	 * strings' sweep and the string table's shrink come before, a few hundred bytes). */
	int total = lua_gc(B, LUA_GCCOUNT, 0) * 1024 + lua_gc(B, LUA_GCCOUNTB, 0), swept = 0;
	for (int i = 0; i < 100000 && !swept; i++) {
		lua_gc(B, LUA_GCSTEP, 0);
		int now = lua_gc(B, LUA_GCCOUNT, 0) * 1024 + lua_gc(B, LUA_GCCOUNTB, 0);
		swept = now < total - 2000;
		total = now;
	}
	if (!swept) {
		fprintf(stderr, "memprof_host: B's collector never swept\n");
		return 1;
	}
	void *p = kept(ud, NULL, 0, 64);
	kept(ud, p, 64, 0);
	lua_gc(B, LUA_GCCOLLECT, 0);
	if (run_lua(B, "assert(require 'luaprof'.memprof.stop())"))
		return 1;
	lua_close(B);
	lua_close(A);
	printf("duefree ok\n");
	return 0;
}

/* oom mode: 0, or 1 with a message. */
static int run_oom(const char *cpath, const char *out, const char *jit)
{
	lua_State *L = host_state(lua_newstate(limit_alloc, NULL), cpath);
	if (!L)
		return 1;
	lua_register(L, "host_live", l_live);
	lua_register(L, "host_limit", l_limit);
	char path[4096];
	snprintf(path, sizeof(path), "%s/oom-%s.bin", out, jit);
	if (luaL_loadbuffer(L, chunk_oom, strlen(chunk_oom), "=oom") ||
	    (lua_pushstring(L, path), lua_pushstring(L, jit), lua_pcall(L, 2, 0, 0))) {
		fprintf(stderr, "memprof_host: %s\n", lua_tostring(L, -1));
		return 1;
	}
	lua_close(L);
	printf("refused %zu\nran oom\n", refused);
	return 0;
}

static long vmsize_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "VmSize:", 7)) {
			v = strtol(line + 7, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static const char chunk_memprof[] =
	"local mp = require 'luaprof'.memprof\n"
	"assert(mp.start(...))\n"
	"local t = {} for i = 1, 2000 do t[i] = {i} end KEEP = t\n";

static const char chunk_plain[] =
	"local path = ...\n"
	"\n"
	"local t = {} for i = 1, 2000 do t[i] = {i} end KEEP = t\n";

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: memprof_host memprof|memprof_malloc|plain|control CPATH "
			"OUTDIR N\n       memprof_host oom CPATH OUTDIR on|off\n"
			"       memprof_host stale|closing|fork|closeshared|duefree CPATH OUTDIR -\n"
			"       memprof_host closeshared CPATH OUTDIR exact\n"
			"       memprof_host chain CPATH OUTDIR exact|sampled\n");
		return 1;
	}
	const char *mode = argv[1], *cpath = argv[2], *out = argv[3];
	if (!strcmp(mode, "oom"))
		return run_oom(cpath, out, argv[4]);
	if (!strcmp(mode, "stale"))
		return run_stale(cpath, out);
	if (!strcmp(mode, "closing"))
		return run_closing(cpath, out);
	if (!strcmp(mode, "fork"))
		return run_fork(cpath, out);
	if (!strcmp(mode, "migrate"))
		return run_migrate(cpath, out);
	if (!strcmp(mode, "deadsampler"))
		return run_deadsampler(cpath, out, 0);
	if (!strcmp(mode, "exitsampler"))
		return run_deadsampler(cpath, out, 1);
	if (!strcmp(mode, "closeshared"))
		return run_closeshared(cpath, out, !strcmp(argv[4], "exact"));
	if (!strcmp(mode, "duefree"))
		return run_duefree(cpath, out);
	if (!strcmp(mode, "chain"))
		return run_chain(cpath, out, argv[4]);
	int n = atoi(argv[4]);
	int use_malloc = !strcmp(mode, "memprof_malloc"), putback = !strcmp(mode, "putback");
	int profile = use_malloc || putback || !strcmp(mode, "memprof");
	int control = !strcmp(mode, "control");
	if (!profile && !control && strcmp(mode, "plain")) {
		fprintf(stderr, "memprof_host: unknown mode %s\n", mode);
		return 1;
	}
	long first = -1;
	for (int i = 1; i <= n; i++) {
		lua_State *L = host_state(use_malloc ? lua_newstate(malloc_alloc, NULL)
						     : luaL_newstate(), cpath);
		if (!L)
			return 1;
		const char *code = profile ? chunk_memprof : chunk_plain;
		char path[4096];
		snprintf(path, sizeof(path), "%s/host-%d.bin", out, i);
		if (luaL_loadbuffer(L, code, strlen(code), "=host") || (lua_pushstring(L, path),
		    lua_pcall(L, 1, 0, 0))) {
			fprintf(stderr, "memprof_host: %s\n", lua_tostring(L, -1));
			return 1;
		}
		if (control) {
			orig_f = lua_getallocf(L, &orig_ud);
			lua_setallocf(L, passthrough, NULL);
		}
		if (putback) {
			under_f = lua_getallocf(L, &under_ud);
			lua_setallocf(L, counting, NULL);
			if (run_lua(L, "assert(require 'luaprof'.memprof.stop())"))
				return 1;
			lua_setallocf(L, under_f, under_ud);
		}
		lua_close(L);
		if (i == (n < 3 ? n : 3))
			first = vmsize_kib();
	}
	printf("vmsize_kib %ld %ld\n", first, vmsize_kib());
	return 0;
}
