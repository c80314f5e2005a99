/*
** A host of a Lua script (luaL_loadfile + lua_pcall, the script's arguments as its chunk's
** varargs: test_host.h) with two C functions of its own, for debuginfo.sh, which strips it
** and puts its symbols in a separate debug file: spin(n) burns CPU in C, alloc(n) makes n
** tables through the VM. Static, so that only the symbol table (.symtab) names them;
** -DOTHER names them otherwise (another build, whose debug file must not name this one's
** code). -DMODULE builds the C module lpdbgmod instead, whose spin is lpdbg_mod_spin
** (without test_host.c).
*/
#include "test_host.h"

#include <lauxlib.h>
#include <stdint.h>

#if defined(MODULE)
#define SPIN lpdbg_mod_spin
#define ALLOC lpdbg_mod_alloc
#elif defined(OTHER)
#define SPIN lpdbg_other_spin
#define ALLOC lpdbg_other_alloc
#else
#define SPIN lpdbg_spin_in_c
#define ALLOC lpdbg_alloc_in_c
#endif

static volatile uint64_t sink;

static __attribute__((noinline)) int SPIN(lua_State *L)
{
	lua_Integer n = luaL_checkinteger(L, 1);
	uint64_t x = (uint64_t)n;
	for (lua_Integer i = 0; i < n; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	sink = x;
	return 0;
}

static __attribute__((noinline)) int ALLOC(lua_State *L)
{
	lua_Integer n = luaL_checkinteger(L, 1);
	for (lua_Integer i = 0; i < n; i++) {
		lua_createtable(L, 16, 4);
		lua_pop(L, 1);
	}
	return 0;
}

#ifdef MODULE
int luaopen_lpdbgmod(lua_State *L);

int luaopen_lpdbgmod(lua_State *L)
{
	lua_createtable(L, 0, 2);
	lua_pushcfunction(L, SPIN);
	lua_setfield(L, -2, "spin");
	lua_pushcfunction(L, ALLOC);
	lua_setfield(L, -2, "alloc");
	return 1;
}
#else
int main(int argc, char **argv)
{
	lua_State *L = test_host_open();
	if (!L)
		return 1;
	lua_register(L, "spin", SPIN);
	lua_register(L, "alloc", ALLOC);
	int nargs = test_host_load(L, argc, argv);
	if (nargs < 0)
		return -nargs;
	return test_host_end(L, lua_pcall(L, nargs, 0, 0), argv[0]);
}
#endif
