/*
** memprof_exit_thread.sh's second host: exact-mode exit() cases that events_close
** (ffb849a) handled badly.
**
** Usage: memprof_exit_late2 PROFILE mid|oom
**   mid: a thread runs a Lua loop under an exact profile (C API, file writer, 4 MiB
**     buffer); the host's allocator under the wrapper holds one new block's call; the
**     main thread calls exit(0). The stop's first writer call (its final flush, the
**     epilogue in the buffer) lets the held call return and waits until the VM thread
**     calls the allocator again (the held event's record is finished by then), then
**     writes the buffer: the late event's tail lands in the epilogue, as it does whenever
**     a call is held between ~1 ms and the end of the stop.
**   oom: the host's allocator under the wrapper calls exit(0) (as an allocator that
**     exits when out of memory does) in a call that came through the wrapper's general
**     path (an allocation by a lua_CFunction), on the VM's own thread.
**   null: as memprof_exit_thread.sh's "late" (Lua API, profile file), but the held call
**     is a reallocation's (event_call in the raw stream too), and fails (returns NULL)
**     once the profiler's exit handler has run: event_call read the record's header (*h)
**     in the stream buffer the stop unmapped. JIT off (see start).
*/
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "luaprof.h"

static uint8_t buf[4 << 20];
static int fd = -1;
static atomic_int hold, held, release, back, exiting, die, fail_held;
static lua_Alloc under_f;
static void *under_ud;
static lua_State *L;
static atomic_int started;

static void *under_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	if (atomic_load(&die) && !ptr && nsize)
		exit(0);
	if (atomic_load(&release) && atomic_load(&held))
		atomic_store(&back, 1);
	if ((atomic_load(&fail_held) ? ptr && osize && nsize : !ptr && nsize) &&
	    atomic_load(&hold) && !atomic_exchange(&held, 1)) {
		struct timespec step = { 0, 100000 };
		while (!atomic_load(&release))
			nanosleep(&step, NULL);
		if (atomic_load(&fail_held))
			return NULL;
	}
	return under_f(under_ud, ptr, osize, nsize);
}

static size_t writer(const void **data, size_t len, void *ctx)
{
	(void)ctx;
	if (atomic_load(&exiting) && atomic_load(&held) && !atomic_load(&release)) {
		atomic_store(&release, 1);
		struct timespec step = { 0, 100000 };
		for (int i = 0; i < 20000 && !atomic_load(&back); i++)
			nanosleep(&step, NULL);
	}
	const uint8_t *p = *data;
	size_t n = 0;
	while (n < len) {
		ssize_t w = write(fd, p + n, len - n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return 0;
		n += (size_t)w;
	}
	return n;
}

static int closer(void *ctx, uint8_t *b)
{
	(void)ctx;
	(void)b;
	return close(fd);
}

static int l_die(lua_State *S)
{
	atomic_store(&die, 1);
	lua_newuserdata(S, 64);
	return 1;
}

static const char *path;

/* null: registered before the profiler's exit handler, so run after it. */
static void after_profiler(void)
{
	atomic_store(&release, 1);
	nanosleep(&(struct timespec){ 0, 100000000 }, NULL);
}

static void start(void)
{
	L = luaL_newstate();
	under_f = lua_getallocf(L, &under_ud);
	lua_setallocf(L, under_alloc, NULL);
	luaL_openlibs(L);
	lua_register(L, "die", l_die);
	if (atomic_load(&fail_held)) {
		char code[1024];
		/* JIT off: LuaJIT 2.1 (Debian's) cannot unwind a trace's failed allocation (its
		 * "not enough memory" error crashes in the unwinder, profiled or not). */
		snprintf(code, sizeof(code), "package.cpath = 'build/?.so'\n"
			 "jit.off()\n"
			 "assert(require 'luaprof'.memprof.start('%s'))", path);
		if (luaL_dostring(L, code)) {
			fprintf(stderr, "start: %s\n", lua_tostring(L, -1));
			exit(1);
		}
		return;
	}
	struct luaprof_memprof_options o = { buf, sizeof(buf), NULL, writer, closer, 0 };
	if (luaprof_memprof_start(L, &o) != LUAPROF_PROFILE_SUCCESS) {
		fprintf(stderr, "start: %s\n", luaprof_memprof_error());
		exit(1);
	}
}

static void *vm_main(void *arg)
{
	(void)arg;
	start();
	atomic_store(&started, 1);
	/* null: tables grown in the interpreter, whose array's reallocation is an event
	 * of the light path (realloc_call_raw), not of the general one the stop waits for. */
	(void)luaL_dostring(L, atomic_load(&fail_held)
			       ? "while true do local x = {} for j = 1, 64 do x[j] = j end end"
			       : "local t, i = {}, 0\n"
				 "while true do i = i + 1 t[i % 5000] = { i, ('x'):rep(i % 300) .. i } end");
	if (atomic_load(&exiting))
		for (;;)
			pause();
	fprintf(stderr, "the loop ended: %s\n", lua_tostring(L, -1));
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 1;
	path = argv[1];
	if (!strcmp(argv[2], "null")) {
		atomic_store(&fail_held, 1);
		atexit(after_profiler);
	}
	fd = open(argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		return 1;
	if (!strcmp(argv[2], "oom")) {
		start();
		(void)luaL_dostring(L, "local t = {} for i = 1, 10000 do t[i] = {} end die()");
		fprintf(stderr, "not exited: %s\n", lua_tostring(L, -1));
		return 1;
	}
	pthread_t th;
	if (pthread_create(&th, NULL, vm_main, NULL) != 0)
		return 1;
	struct timespec step = { 0, 1000000 };
	while (!atomic_load(&started))
		nanosleep(&step, NULL);
	nanosleep(&(struct timespec){ 0, 30000000 }, NULL);
	atomic_store(&hold, 1);
	for (int i = 0; i < 5000 && !atomic_load(&held); i++)
		nanosleep(&step, NULL);
	if (!atomic_load(&held)) {
		fprintf(stderr, "no allocation held\n");
		return 1;
	}
	atomic_store(&exiting, 1);
	exit(0);
}
