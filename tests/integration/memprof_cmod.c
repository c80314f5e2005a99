/*
** A C module for memprof_luajit.sh and memprof_sampled.sh. Loaded with require only after
** memprof.start, its newud allocates a 100-byte userdata, which the memory profiler must
** charge to the function by address and name by its symbol (memprof_cmod_newud), proving
** that a library loaded while profiling is symbolized. Its resume(co) runs a coroutine
** with the C API's lua_resume: what the coroutine allocates belongs to its own lines.
*/
#include <lua.h>
#include <lauxlib.h>

/* Not static: the symbol the report must show. */
int memprof_cmod_newud(lua_State *L);
int memprof_cmod_resume(lua_State *L);
int luaopen_memprof_cmod(lua_State *L);

int memprof_cmod_newud(lua_State *L)
{
	lua_newuserdata(L, 100);
	return 1;
}

/* resume(co): lua_resume(co, 0); returns its status (0 finished, LUA_YIELD yielded). */
int memprof_cmod_resume(lua_State *L)
{
	lua_State *co = lua_tothread(L, 1);
	luaL_argcheck(L, co != NULL, 1, "coroutine expected");
	lua_pushinteger(L, lua_resume(co, 0));
	return 1;
}

int luaopen_memprof_cmod(lua_State *L)
{
	lua_createtable(L, 0, 2);
	lua_pushcfunction(L, memprof_cmod_newud);
	lua_setfield(L, -2, "newud");
	lua_pushcfunction(L, memprof_cmod_resume);
	lua_setfield(L, -2, "resume");
	return 1;
}
