/*
** The embedding the integration tests' C hosts share (test_host.h).
*/
#include "test_host.h"

#include <lauxlib.h>
#include <lualib.h>
#include <stdio.h>

lua_State *test_host_open(void)
{
	lua_State *L = luaL_newstate();
	if (!L) {
		fprintf(stderr, "test host: cannot create a Lua state\n");
		return NULL;
	}
	luaL_openlibs(L);
	return L;
}

int test_host_load(lua_State *L, int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s script [arg...]\n", argv[0]);
		return -2;
	}
	if (luaL_loadfile(L, argv[1])) {
		fprintf(stderr, "%s\n", lua_tostring(L, -1));
		return -1;
	}
	for (int i = 2; i < argc; i++)
		lua_pushstring(L, argv[i]);
	return argc - 2;
}

int test_host_end(lua_State *L, int status, const char *who)
{
	if (status)
		fprintf(stderr, "%s: %s\n", who, lua_tostring(L, -1));
	lua_close(L);
	return status ? 1 : 0;
}
