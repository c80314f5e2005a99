/*
** For vm_other_thread.sh: a host that makes a Lua state and runs its script's init on the
** main thread, which starts a profile, then runs the state's work on a thread of its own
** while the main thread waits in pthread_join, as wrk does (a script's init on its main
** thread, the requests on its worker threads).
** Usage: cpu_other_thread SCRIPT AGENT_CPATH PROFILE. Exit 0 when the script ran.
*/
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static lua_State *L;

static int call(const char *fn)
{
	lua_getglobal(L, fn);
	if (lua_pcall(L, 0, 0, 0) != 0) {
		fprintf(stderr, "%s: %s\n", fn, lua_tostring(L, -1));
		return -1;
	}
	return 0;
}

static void *worker(void *arg)
{
	(void)arg;
	return call("work") == 0 ? arg : (void *)1;
}

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	L = luaL_newstate();
	luaL_openlibs(L);
	lua_pushstring(L, argv[2]);
	lua_setglobal(L, "CPATH");
	lua_pushstring(L, argv[3]);
	lua_setglobal(L, "PROFILE");
	if (luaL_dofile(L, argv[1]) != 0) {
		fprintf(stderr, "%s\n", lua_tostring(L, -1));
		return 1;
	}
	if (call("init") != 0)
		return 1;
	pthread_t th;
	void *ret;
	if (pthread_create(&th, NULL, worker, NULL) != 0 || pthread_join(th, &ret) != 0 || ret)
		return 1;
	lua_close(L); /* finishes the profile */
	return 0;
}
