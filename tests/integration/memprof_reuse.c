/*
** A library for memprof_luajit.sh's dlreuse case, built twice (REUSE_FN names its one
** lua_CFunction): loaded, called and unloaded by memprof_cmod's dlcall, the second build
** maps where the first was, its function at the first's address. Each function's
** 100-byte userdata must be charged to its own name.
*/
#include <lua.h>

int REUSE_FN(lua_State *L);

int REUSE_FN(lua_State *L)
{
	lua_newuserdata(L, 100);
	return 1;
}
