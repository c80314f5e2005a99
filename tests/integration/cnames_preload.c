/*
** cnames_preload.c: a C module for cnames_preload.sh. Loading it puts a loader of its own in
** package.preload["cpre.slow"], as a host preloads its C modules: cpre_slow, a static
** function that stripping leaves unnamed, spins on the CPU for half a second and makes
** tables through the C API before it returns its module, so that its time and its
** allocations are its own in the profiles.
*/
#include <time.h>

#include <lauxlib.h>
#include <lua.h>

__attribute__((noinline)) static int cpre_slow(lua_State *L)
{
	clock_t end = clock() + CLOCKS_PER_SEC / 2;
	volatile unsigned long acc = 0;
	while (clock() < end)
		for (unsigned long i = 0; i < 100000; i++)
			acc += i ^ (acc >> 3);
	lua_newtable(L);
	for (int i = 1; i <= 1000; i++) {
		lua_createtable(L, 4, 4);
		lua_rawseti(L, -2, i);
	}
	return 1;
}

int luaopen_cpre(lua_State *L);
int luaopen_cpre(lua_State *L)
{
	lua_getglobal(L, "package");
	lua_getfield(L, -1, "preload");
	lua_pushcfunction(L, cpre_slow);
	lua_setfield(L, -2, "cpre.slow");
	lua_pop(L, 2);
	lua_newtable(L);
	return 1;
}
