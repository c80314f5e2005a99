/*
** cmod_names.c: a C module for cmod_names.sh. spin(n) loops n times in C code of its own;
** its function is cnm_spin, a static symbol that stripping removes, so that the module
** built with symbols shows the ELF name and the stripped one the Lua name (cnm.spin).
*/
#include <lauxlib.h>
#include <lua.h>

__attribute__((noinline)) static int cnm_spin(lua_State *L)
{
	lua_Integer n = luaL_checkinteger(L, 1);
	volatile lua_Integer acc = 0;
	for (lua_Integer i = 0; i < n; i++)
		acc += i ^ (acc >> 3);
	lua_pushnumber(L, (lua_Number)acc);
	return 1;
}

int luaopen_cnm(lua_State *L);
int luaopen_cnm(lua_State *L)
{
	lua_newtable(L);
	lua_pushcfunction(L, cnm_spin);
	lua_setfield(L, -2, "spin");
	return 1;
}
