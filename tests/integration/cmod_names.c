/*
** cmod_names.c: a C module for cmod_names.sh. spin(n) loops n times in C code of its own;
** its function is cnm_spin, a static symbol that stripping removes, so that the module
** built with symbols shows the ELF name and the stripped one the Lua name (cnm.spin).
** alloc(n) makes n tables and strings through the C API (cnm_alloc, named alike), for the
** memory profiles: their allocations are charged to it.
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

__attribute__((noinline)) static int cnm_alloc(lua_State *L)
{
	lua_Integer n = luaL_checkinteger(L, 1);
	for (lua_Integer i = 0; i < n; i++) {
		lua_createtable(L, 4, 4);
		lua_pushfstring(L, "cnm-%d-%p", (int)i, (void *)L);
		lua_rawseti(L, -2, 1);
		lua_pop(L, 1);
	}
	lua_pushinteger(L, n);
	return 1;
}

int luaopen_cnm(lua_State *L);
int luaopen_cnm(lua_State *L)
{
	lua_newtable(L);
	lua_pushcfunction(L, cnm_spin);
	lua_setfield(L, -2, "spin");
	lua_pushcfunction(L, cnm_alloc);
	lua_setfield(L, -2, "alloc");
	return 1;
}
