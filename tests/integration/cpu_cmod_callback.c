/*
** cpu_cmod_callback.c: a C module whose function calls a Lua function back through
** lua_call, as lpeg's match calls a capture function and cjson a hook: built as a module
** by cpu_cmod_callback.sh. each(n, f) returns the sum of f(i) for i = 1..n; each(n, f, s)
** the sum of f(s), a string (tonumber as f: a builtin that syncs L->base for its fallback).
** each_tail is each reached by a tail call, as luasocket's methods jump to their buffer's
** (no frame of its own on the native stack).
*/
#include <lauxlib.h>
#include <lua.h>

__attribute__((noinline)) static int each(lua_State *L)
{
	lua_Integer n = luaL_checkinteger(L, 1);
	luaL_checktype(L, 2, LUA_TFUNCTION);
	int str = lua_type(L, 3) == LUA_TSTRING;
	lua_Number sum = 0;
	for (lua_Integer i = 1; i <= n; i++) {
		lua_pushvalue(L, 2);
		if (str)
			lua_pushvalue(L, 3);
		else
			lua_pushinteger(L, i);
		lua_call(L, 1, 1);
		sum += lua_tonumber(L, -1);
		lua_pop(L, 1);
	}
	lua_pushnumber(L, sum);
	return 1;
}

__attribute__((optimize("optimize-sibling-calls"))) static int each_tail(lua_State *L)
{
	return each(L);
}

int luaopen_cbmod(lua_State *L);
int luaopen_cbmod(lua_State *L)
{
	lua_newtable(L);
	lua_pushcfunction(L, each);
	lua_setfield(L, -2, "each");
	lua_pushcfunction(L, each_tail);
	lua_setfield(L, -2, "each_tail");
	return 1;
}
