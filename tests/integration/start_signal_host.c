/*
** start_signal_host: runs a Lua script (as luajit would: arg, the script's arguments) with
** a terminating signal sent at a chosen point inside the agent's memory or CPU profile
** start, for memprof_start_signal.sh and cpu_start_signal.sh. The host defines
** dl_iterate_phdr, lua_setallocf and pthread_create itself, ahead of libc's and libluajit's
** in the lookup order (linked -rdynamic), so that the agent's calls come here first: its
** start walks the loaded objects for the symbol table (and again for the maps) while it
** writes the file's header; the memory start swaps the allocator last; the CPU start
** makes its writer thread once the header is written, before it arms the timer.
**
** usage: start_signal_host SCRIPT [ARGS...]   (LUA_INIT run first, as luajit runs it)
** The point is armed by LP_TEST_SIGNAL (at start-up: for a start made as the agent loads)
** or by the script's arm_signal(SPEC), SPEC "POINT:HOW:N":
**   POINT  phdr: the agent's Nth call of dl_iterate_phdr from then on, before it runs;
**          setallocf: its Nth call of lua_setallocf, after the allocator is swapped;
**          pthread: its Nth call of pthread_create, after the thread is made;
**          cpcall: its Nth call of lua_cpcall (the start's anchor in the state), which then
**          fails as out of memory (LUA_ERRMEM) without running: a start refused
**   HOW    raise: SIGTERM on this thread; thread: SIGTERM to another thread of the host's,
**          which the agent sends on to this one (given 300 ms to, before the start goes on);
**          none: no signal (cpcall's failure alone);
**          fork: SIGTERM on this thread, then another thread forks while this one holds
**          it (the start under way), and waits for the child: the child (no signal
**          pending: fork's) starts and stops a sampled memory profile of a state of its
**          own into fork_child.bin, as any program's child may, and exits 0; "fork
**          child: exit N" or "fork child: signal N" on the standard output says how
**          it ended
** Exit 0 when the script ran (the signal did not end the process), 1 on an error.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static char point[16];
static int thread_kill, no_signal, fork_child, countdown;
static pthread_t helper;

static void *helper_main(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

static int arm(const char *spec)
{
	char how[16];
	if (sscanf(spec, "%15[a-z]:%15[a-z]:%d", point, how, &countdown) != 3 || countdown < 1 ||
	    (strcmp(point, "phdr") && strcmp(point, "setallocf") && strcmp(point, "pthread") &&
	     strcmp(point, "cpcall")) ||
	    (strcmp(how, "raise") && strcmp(how, "thread") && strcmp(how, "none") &&
	     strcmp(how, "fork"))) {
		point[0] = '\0';
		return -1;
	}
	thread_kill = !strcmp(how, "thread");
	no_signal = !strcmp(how, "none");
	fork_child = !strcmp(how, "fork");
	return 0;
}

/* HOW fork's child: a profile of its own, from the agent already loaded (LP_SO). */
static int child_profile(void)
{
	lua_State *L = luaL_newstate();
	if (!L)
		return 1;
	luaL_openlibs(L);
	int rc = luaL_dostring(L,
		"local lp = assert(package.loadlib(os.getenv('LP_SO'), 'luaopen_luaprof'))"
		"('luaprof')\n"
		"assert(lp.memprof.start('fork_child.bin', { sample = 4096 }))\n"
		"local keep = {} for i = 1, 1000 do keep[i] = { i } end\n"
		"assert(lp.memprof.stop())");
	if (rc)
		fprintf(stderr, "fork child: %s\n", lua_tostring(L, -1));
	lua_close(L);
	return rc != 0;
}

static void *forker_main(void *arg)
{
	(void)arg;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(child_profile());
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		printf("fork child: none\n");
	else if (WIFSIGNALED(st))
		printf("fork child: signal %d\n", WTERMSIG(st));
	else
		printf("fork child: exit %d\n", WEXITSTATUS(st));
	fflush(stdout);
	return NULL;
}

/* A call from the agent (luaprof.so) at the armed point: the signal, once; 1 then. */
static int maybe_fire(const char *at, const void *caller)
{
	Dl_info info;
	if (strcmp(point, at) || !dladdr(caller, &info) || !info.dli_fname ||
	    !strstr(info.dli_fname, "luaprof.so") || --countdown > 0)
		return 0;
	point[0] = '\0';
	if (no_signal)
		return 1;
	if (fork_child) {
		raise(SIGTERM);
		pthread_t th;
		if (pthread_create(&th, NULL, forker_main, NULL) == 0)
			pthread_join(th, NULL);
		return 1;
	}
	if (!thread_kill) {
		raise(SIGTERM);
		return 1;
	}
	pthread_kill(helper, SIGTERM);
	struct timespec left = { 0, 300000000L };
	while (nanosleep(&left, &left) != 0 && errno == EINTR)
		;
	return 1;
}

int dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
	static int (*real)(int (*)(struct dl_phdr_info *, size_t, void *), void *);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "dl_iterate_phdr");
	maybe_fire("phdr", __builtin_return_address(0));
	return real(cb, data);
}

void lua_setallocf(lua_State *L, lua_Alloc f, void *ud)
{
	static void (*real)(lua_State *, lua_Alloc, void *);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "lua_setallocf");
	real(L, f, ud);
	maybe_fire("setallocf", __builtin_return_address(0));
}

int pthread_create(pthread_t *th, const pthread_attr_t *attr, void *(*fn)(void *), void *arg)
{
	static int (*real)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "pthread_create");
	int rc = real(th, attr, fn, arg);
	maybe_fire("pthread", __builtin_return_address(0));
	return rc;
}

int lua_cpcall(lua_State *L, lua_CFunction fn, void *ud)
{
	static int (*real)(lua_State *, lua_CFunction, void *);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "lua_cpcall");
	if (maybe_fire("cpcall", __builtin_return_address(0)))
		return LUA_ERRMEM;
	return real(L, fn, ud);
}

static int l_arm_signal(lua_State *L)
{
	if (arm(luaL_checkstring(L, 1)) != 0)
		return luaL_error(L, "bad signal point '%s'", lua_tostring(L, 1));
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: start_signal_host SCRIPT [ARGS...]\n");
		return 1;
	}
	const char *env = getenv("LP_TEST_SIGNAL");
	if (env && arm(env) != 0) {
		fprintf(stderr, "start_signal_host: bad LP_TEST_SIGNAL '%s'\n", env);
		return 1;
	}
	if (pthread_create(&helper, NULL, helper_main, NULL) != 0) {
		fprintf(stderr, "start_signal_host: cannot create a thread\n");
		return 1;
	}
	lua_State *L = luaL_newstate();
	if (!L)
		return 1;
	luaL_openlibs(L);
	lua_register(L, "arm_signal", l_arm_signal);
	lua_createtable(L, argc, 0);
	for (int i = 1; i < argc; i++) {
		lua_pushstring(L, argv[i]);
		lua_rawseti(L, -2, i - 1);
	}
	lua_setglobal(L, "arg");
	/* As luajit: LUA_INIT first (`luaprof record` loads the agent there). */
	const char *init = getenv("LUA_INIT");
	if (init && *init &&
	    (init[0] == '@' ? luaL_dofile(L, init + 1) : luaL_dostring(L, init)) != 0) {
		fprintf(stderr, "start_signal_host: LUA_INIT: %s\n", lua_tostring(L, -1));
		lua_close(L);
		return 1;
	}
	if (luaL_dofile(L, argv[1]) != 0) {
		fprintf(stderr, "start_signal_host: %s\n", lua_tostring(L, -1));
		lua_close(L);
		return 1;
	}
	lua_close(L);
	return 0;
}
