/*
** A plain C host of a Lua script (luaL_loadfile + lua_pcall, the script's arguments as its
** chunk's varargs: test_host.h), for static_luajit.sh, which links it with LuaJIT's static
** library.
*/
#include "test_host.h"

int main(int argc, char **argv)
{
	lua_State *L = test_host_open();
	if (!L)
		return 1;
	int nargs = test_host_load(L, argc, argv);
	if (nargs < 0)
		return -nargs;
	return test_host_end(L, lua_pcall(L, nargs, 0, 0), argv[0]);
}
