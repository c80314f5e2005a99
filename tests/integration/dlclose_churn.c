/*
** dlclose_churn.sh's C library, built in variants -DV=0..6: the same code (so the same
** layout: a copy loaded where another variant was unloaded has its functions at the same
** addresses) with the names work_V (exported, called through the FFI) and l_work_V (a
** lua_CFunction, for package.loadlib).
*/
#include <lauxlib.h>
#include <lua.h>

#define CAT2(a, b) a##b
#define CAT(a, b)  CAT2(a, b)

unsigned CAT(work_, V)(unsigned n);
int luaopen_churn(lua_State *L);

static volatile unsigned sink;

unsigned CAT(work_, V)(unsigned n)
{
	unsigned s = 0;
	for (unsigned i = 0; i < n; i++)
		s += (i * i) ^ (s >> 3);
	sink = s;
	return s;
}

static int CAT(l_work_, V)(lua_State *L)
{
	lua_pushinteger(L, CAT(work_, V)((unsigned)luaL_checkinteger(L, 1)));
	return 1;
}

int luaopen_churn(lua_State *L)
{
	lua_pushcfunction(L, CAT(l_work_, V));
	return 1;
}
