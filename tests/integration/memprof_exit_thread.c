/*
** memprof_exit_thread.sh's host: exit() on another thread than the one running the
** profiled Lua state, while it allocates.
**
** Usage: memprof_exit_thread CPATH PROFILE SAMPLE MS [over|migrate|late]
** A thread makes a state, starts a memory profile into PROFILE (one sample per SAMPLE
** bytes; nil: exact mode) and allocates in a loop that never ends; with "over", the host first puts
** an allocator of its own over the profiler's wrapper (passing every call on to it), so
** that the stop cannot take the wrapper out and the thread's calls go on reaching it during
** the stop; with "migrate", the main thread makes the state and starts the profile (with
** its allocator over the wrapper), and the other thread runs the loop. The main thread
** calls exit(0) MS milliseconds after the start: the profiler's exit handler stops the
** profile while the other thread allocates. With "late", the state's allocator under the
** profiler's wrapper is the host's: once the main thread is about to exit, it holds the
** next new block's call (the wrapper's event under way) until the profiler's exit handler
** has run (the host's own, registered before it, runs after it), then lets it return into
** the wrapper, and the process exits 100 ms later.
*/
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static const char *cpath, *profile, *sample;
static int over, migrate, late;
static atomic_int hold, held, release;
static lua_Alloc under_f;
static void *under_ud;
static lua_State *shared;
static atomic_int started;
static lua_Alloc kept_f;
static void *kept_ud;

static void *host_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	return kept_f(kept_ud, ptr, osize, nsize);
}

/* "late": the allocator under the wrapper. */
static void *under_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	if (!ptr && nsize && atomic_load(&hold) && !atomic_exchange(&held, 1)) {
		struct timespec step = { 0, 100000 };
		while (!atomic_load(&release))
			nanosleep(&step, NULL);
	}
	return under_f(under_ud, ptr, osize, nsize);
}

/* Registered before the profiler's exit handler, so run after it. */
static void after_profiler(void)
{
	if (!late)
		return;
	atomic_store(&release, 1);
	struct timespec t = { 0, 100 * 1000000L };
	nanosleep(&t, NULL);
}

static lua_State *start(void)
{
	lua_State *L = luaL_newstate();
	if (!L) {
		fprintf(stderr, "memprof_exit_thread: cannot create a Lua state\n");
		exit(1);
	}
	if (late) {
		under_f = lua_getallocf(L, &under_ud);
		lua_setallocf(L, under_alloc, NULL);
	}
	luaL_openlibs(L);
	lua_getglobal(L, "package");
	lua_pushstring(L, cpath);
	lua_setfield(L, -2, "cpath");
	lua_pop(L, 1);
	char code[1024];
	snprintf(code, sizeof(code),
		 "mp = require 'luaprof'.memprof\n"
		 "assert(mp.start('%s', { sample = %s }))", profile, sample);
	if (luaL_dostring(L, code)) {
		fprintf(stderr, "memprof_exit_thread: %s\n", lua_tostring(L, -1));
		exit(1);
	}
	if (over) {
		kept_f = lua_getallocf(L, &kept_ud);
		lua_setallocf(L, host_alloc, NULL);
	}
	return L;
}

static void *vm_main(void *arg)
{
	(void)arg;
	lua_State *L = migrate ? shared : start();
	atomic_store(&started, 1);
	(void)luaL_dostring(L, "local t, i = {}, 0\n"
			       "while true do i = i + 1 t[i % 5000] = { i, ('x'):rep(i % 300) .. i } end");
	fprintf(stderr, "memprof_exit_thread: the loop ended: %s\n", lua_tostring(L, -1));
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr,
			"usage: memprof_exit_thread CPATH PROFILE SAMPLE MS [over|migrate|late]\n");
		return 1;
	}
	cpath = argv[1];
	profile = argv[2];
	sample = argv[3];
	late = argc > 5 && !strcmp(argv[5], "late");
	over = argc > 5 && !late;
	migrate = over && !strcmp(argv[5], "migrate");
	atexit(after_profiler);
	if (migrate)
		shared = start();
	pthread_t th;
	if (pthread_create(&th, NULL, vm_main, NULL) != 0) {
		fprintf(stderr, "memprof_exit_thread: cannot create a thread\n");
		return 1;
	}
	struct timespec step = { 0, 1000000 };
	while (!atomic_load(&started))
		nanosleep(&step, NULL);
	struct timespec wait = { 0, atol(argv[4]) * 1000000L };
	nanosleep(&wait, NULL);
	if (late) {
		atomic_store(&hold, 1);
		for (int i = 0; i < 5000 && !atomic_load(&held); i++)
			nanosleep(&step, NULL);
		if (!atomic_load(&held)) {
			fprintf(stderr, "memprof_exit_thread: no allocation held in 5 s\n");
			exit(1);
		}
	}
	exit(0);
}
