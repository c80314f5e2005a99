/*
** For vm_other_thread.sh: a C module whose run(f) calls f on a thread of its own while the
** calling thread waits in pthread_join, so that a script under `luaprof record` (whose
** profile the main thread started) runs its Lua code on another thread, as wrk's requests
** do. The calling thread runs no Lua code meanwhile: the state is used by one thread at a
** time. run returns f's error message, or nothing.
*/
#define _GNU_SOURCE
#include <pthread.h>

#include <lauxlib.h>
#include <lua.h>

static void *worker(void *arg)
{
	lua_State *L = arg;
	return lua_pcall(L, 0, 0, 0) == 0 ? NULL : arg;
}

static int run(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TFUNCTION);
	lua_settop(L, 1);
	pthread_t th;
	void *ret = NULL;
	if (pthread_create(&th, NULL, worker, L) != 0)
		return luaL_error(L, "pthread_create failed");
	pthread_join(th, &ret);
	return ret ? 1 : 0;
}

int luaopen_vm_other_thread_mod(lua_State *L)
{
	lua_newtable(L);
	lua_pushcfunction(L, run);
	lua_setfield(L, -2, "run");
	return 1;
}
