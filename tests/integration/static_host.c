/*
** A plain C host of a Lua script (luaL_loadfile + lua_pcall, the script's arguments as its
** chunk's varargs), for static_luajit.sh, which links it with LuaJIT's static library.
*/
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s script [arg...]\n", argv[0]);
		return 2;
	}
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	if (luaL_loadfile(L, argv[1])) {
		fprintf(stderr, "%s\n", lua_tostring(L, -1));
		return 1;
	}
	for (int i = 2; i < argc; i++)
		lua_pushstring(L, argv[i]);
	if (lua_pcall(L, argc - 2, 0, 0)) {
		fprintf(stderr, "%s\n", lua_tostring(L, -1));
		return 1;
	}
	lua_close(L);
	return 0;
}
