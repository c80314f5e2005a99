/*
** A C module for memprof_luajit.sh, loaded with require only after memprof.start: its one
** lua_CFunction allocates a 100-byte userdata, which the memory profiler must charge to
** the function by address and name by its symbol (memprof_cmod_newud), proving that a
** library loaded while profiling is symbolized.
*/
#include <lua.h>
#include <lauxlib.h>

/* Not static: the symbol the report must show. */
int memprof_cmod_newud(lua_State *L);
int luaopen_memprof_cmod(lua_State *L);

int memprof_cmod_newud(lua_State *L)
{
	lua_newuserdata(L, 100);
	return 1;
}

int luaopen_memprof_cmod(lua_State *L)
{
	lua_createtable(L, 0, 1);
	lua_pushcfunction(L, memprof_cmod_newud);
	lua_setfield(L, -2, "newud");
	return 1;
}
