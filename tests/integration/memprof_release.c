/*
** memprof_release.sh's host: the memory the sampled memory profiler keeps (malloc's bytes in
** use, as mallinfo2 counts them) once memprof.stop() returned.
**
** Usage: memprof_release CPATH OUTDIR N
** A state with LuaJIT's own allocator (its arena is not malloc's: the program's tables do
** not count) is profiled once to load and warm everything, then profiled in sampled mode
** with every allocation sampled (sample = 1) into OUTDIR/rel.bin while 100 loaded chunks
** each keep N tables (100 x N live samples at stop), and stopped. Prints "held BYTES":
** malloc's bytes in use after that stop minus before that start. The profile's tables
** (stacks, samples, the live map) are written at stop and must go with it: the difference
** may not grow with N.
*/
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static int run(lua_State *L, const char *code)
{
	if (luaL_dostring(L, code)) {
		fprintf(stderr, "memprof_release: %s\n", lua_tostring(L, -1));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: memprof_release CPATH OUTDIR N\n");
		return 1;
	}
	lua_State *L = luaL_newstate();
	if (!L) {
		fprintf(stderr, "memprof_release: cannot create a Lua state\n");
		return 1;
	}
	luaL_openlibs(L);
	lua_getglobal(L, "package");
	lua_pushstring(L, argv[1]);
	lua_setfield(L, -2, "cpath");
	lua_pop(L, 1);
	char code[4400];
	snprintf(code, sizeof(code),
		 "mp = require 'luaprof'.memprof\n"
		 "assert(mp.start('%s/warm.bin', { sample = 1 }))\n"
		 "local t = {} for i = 1, 100 do t[i] = { i } end\n"
		 "assert(mp.stop())\n"
		 "makers = {}\n"
		 "for i = 1, 100 do makers[i] = assert(load('return function(t, n) for j = 1, n do "
		 "t[#t + 1] = { j } end end', '=maker' .. i))() end\n"
		 "KEEP = {} collectgarbage() collectgarbage()", argv[2]);
	if (run(L, code))
		return 1;
	size_t before = mallinfo2().uordblks;
	snprintf(code, sizeof(code),
		 "assert(mp.start('%s/rel.bin', { sample = 1 }))\n"
		 "for i = 1, 100 do makers[i](KEEP, %d) end\n"
		 "assert(mp.stop())", argv[2], atoi(argv[3]));
	if (run(L, code))
		return 1;
	size_t after = mallinfo2().uordblks;
	printf("held %lld\n", (long long)after - (long long)before);
	lua_close(L);
	return 0;
}
