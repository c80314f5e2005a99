/*
** memprof_restart.sh's host: a sampled profile started again after the program set an
** allocator of its own over the first profile's wrapper.
**
** Usage: memprof_restart CPATH OUTDIR SAMPLE
** A state with LuaJIT's own allocator is profiled in sampled mode (one sample per SAMPLE
** bytes), then the host puts an allocator of its own (counting, chained to the wrapper it
** found) over the profiler's, so memprof.stop() cannot put the original back: that
** wrapper stays in the chain, under the host's. A second sampled profile into
** OUTDIR/restart.bin wraps the host's allocator while the program allocates strings; the
** host counts the bytes that profile saw asked for (every call's new size, as sampled mode
** counts them) and prints "asked BYTES". The profile's estimate of the bytes allocated
** must match it: the first wrapper, still called under the host's, may not count them too.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static lua_Alloc kept_f;
static void *kept_ud;
static int counting;
static uint64_t asked;

static void *host_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	if (counting)
		asked += nsize;
	return kept_f(kept_ud, ptr, osize, nsize);
}

static int run(lua_State *L, const char *code)
{
	if (luaL_dostring(L, code)) {
		fprintf(stderr, "memprof_restart: %s\n", lua_tostring(L, -1));
		return 1;
	}
	return 0;
}

static int count(lua_State *L)
{
	counting = lua_toboolean(L, 1);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: memprof_restart CPATH OUTDIR SAMPLE\n");
		return 1;
	}
	lua_State *L = luaL_newstate();
	if (!L) {
		fprintf(stderr, "memprof_restart: cannot create a Lua state\n");
		return 1;
	}
	luaL_openlibs(L);
	lua_getglobal(L, "package");
	lua_pushstring(L, argv[1]);
	lua_setfield(L, -2, "cpath");
	lua_pop(L, 1);
	lua_register(L, "count", count);
	char code[1024];
	snprintf(code, sizeof(code),
		 "mp = require 'luaprof'.memprof\n"
		 "assert(mp.start('%s/first.bin', { sample = %s }))\n"
		 "local t = {} for i = 1, 1000 do t[i] = { i } end",
		 argv[2], argv[3]);
	if (run(L, code))
		return 1;
	kept_f = lua_getallocf(L, &kept_ud);
	lua_setallocf(L, host_alloc, NULL);
	snprintf(code, sizeof(code),
		 "assert(mp.stop())\n"
		 "assert(mp.start('%s/restart.bin', { sample = %s }))\n"
		 "count(true)\n"
		 "local r = {} for i = 1, 200000 do r[i %% 1000] = ('x'):rep(300 + i %% 100) .. i end\n"
		 "count(false)\n"
		 "assert(mp.stop())",
		 argv[2], argv[3]);
	if (run(L, code))
		return 1;
	printf("asked %llu\n", (unsigned long long)asked);
	lua_close(L);
	return 0;
}
