/*
** C host for shapes_luajit.sh: embeds libluajit-5.1.so and runs a Lua script the way an
** application does (luaL_loadfile + lua_pcall), with the global arg table as luajit sets it
** and one C function, host_call(f, ...), which calls f(...) back through lua_call and returns
** its first result: the Lua -> C function -> lua_call -> Lua shape.
** Usage: shapes_host SCRIPT [ARGS...]; exit 1 with the error message if the script fails.
*/
#include <stdio.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

__attribute__((noinline)) int shapes_host_call(lua_State *L);

__attribute__((noinline)) int shapes_host_call(lua_State *L)
{
	int n = lua_gettop(L);
	luaL_checktype(L, 1, LUA_TFUNCTION);
	lua_call(L, n - 1, 1);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: shapes_host SCRIPT [ARGS...]\n");
		return 2;
	}
	lua_State *L = luaL_newstate();
	if (!L)
		return 1;
	luaL_openlibs(L);
	lua_register(L, "host_call", shapes_host_call);
	lua_createtable(L, argc, 0);
	for (int i = 0; i < argc; i++) {
		lua_pushstring(L, argv[i]);
		lua_rawseti(L, -2, i - 1);
	}
	lua_setglobal(L, "arg");
	int rc = 0;
	if (luaL_loadfile(L, argv[1]) != 0) {
		rc = 1;
	} else {
		for (int i = 2; i < argc; i++)
			lua_pushstring(L, argv[i]);
		rc = lua_pcall(L, argc - 2, 0, 0) != 0;
	}
	if (rc)
		fprintf(stderr, "shapes_host: %s\n", lua_tostring(L, -1));
	lua_close(L);
	return rc;
}
