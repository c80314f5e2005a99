/*
** Objects replaced on disk while loaded, for replaced_object.sh: the profilers name C
** functions from each object's file, which a package upgrade may have replaced with
** another build since the process loaded it. Built four ways from this one file:
**
**   -DMODULE            the Lua C module replaced_mod: luaopen returns a table of two
**                       lua_CFunctions that each allocate one userdata, alloc (exported,
**                       100 bytes) and hidden (static, 200 bytes: named from .symtab only);
**   -DMODULE -DVARIANT  another build of it: other functions first (other_alloc where
**                       alloc was, longer, then other_hidden), so that the loaded build's
**                       addresses fall in them;
**   (neither)           a host, the main program (with test_host.c): replaced_host PATH
**                       CPATH OUT renames PATH over its own executable, then runs a
**                       chunk that starts the exact-mode memory profiler into OUT and
**                       calls host_alloc (static, a 300-byte userdata) 10 times, then
**                       stops it;
**   -DVARIANT           another build of the host, with host_other where host_alloc was.
**
** -fno-toplevel-reorder keeps the functions in source order: a variant's first function
** then sits where the original's first one is.
*/
#define _GNU_SOURCE /* realpath */
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>

#include "test_host.h"

#ifdef MODULE

#ifdef VARIANT
int other_alloc(lua_State *L);
int other_alloc(lua_State *L)
{
	lua_newuserdata(L, 12);
	lua_newuserdata(L, 34);
	return 2;
}

static int other_hidden(lua_State *L)
{
	lua_newuserdata(L, 56);
	lua_newuserdata(L, 78);
	lua_newuserdata(L, 90);
	return 3;
}
#endif

int alloc(lua_State *L);
int alloc(lua_State *L)
{
	lua_newuserdata(L, 100);
	return 1;
}

static int hidden(lua_State *L)
{
	lua_newuserdata(L, 200);
	return 1;
}

int luaopen_replaced_mod(lua_State *L);
int luaopen_replaced_mod(lua_State *L)
{
	lua_createtable(L, 0, 2);
	lua_pushcfunction(L, alloc);
	lua_setfield(L, -2, "alloc");
	lua_pushcfunction(L, hidden);
	lua_setfield(L, -2, "hidden");
#ifdef VARIANT
	lua_pushcfunction(L, other_alloc);
	lua_setfield(L, -2, "other_alloc");
	lua_pushcfunction(L, other_hidden);
	lua_setfield(L, -2, "other_hidden");
#endif
	return 1;
}

#else /* the host */

#ifdef VARIANT
static int host_other(lua_State *L)
{
	lua_newuserdata(L, 11);
	lua_newuserdata(L, 22);
	return 2;
}
#endif

static int host_alloc(lua_State *L)
{
	lua_newuserdata(L, 300);
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: replaced_host PATH CPATH OUT\n");
		return 2;
	}
	char self[4096];
	if (!realpath("/proc/self/exe", self) || rename(argv[1], self) != 0) {
		perror("replaced_host: putting PATH over the executable");
		return 1;
	}
	lua_State *L = test_host_open();
	if (!L)
		return 1;
	lua_pushcfunction(L, host_alloc);
	lua_setglobal(L, "host_alloc");
#ifdef VARIANT
	lua_pushcfunction(L, host_other);
	lua_setglobal(L, "host_other");
#endif
	lua_pushstring(L, argv[2]);
	lua_setglobal(L, "CPATH");
	lua_pushstring(L, argv[3]);
	lua_setglobal(L, "OUT");
	const char *chunk = "package.cpath = CPATH\n"
			    "local mp = require('luaprof').memprof\n"
			    "assert(mp.start(OUT))\n"
			    "for _ = 1, 10 do host_alloc() end\n"
			    "assert(mp.stop())\n";
	return test_host_end(L, luaL_dostring(L, chunk), "replaced_host");
}

#endif
