/*
** memprof_restart.sh's host: a sampled profile started again after the program set an
** allocator of its own over the first profile's wrapper.
**
** Usage: memprof_restart CPATH OUTDIR SAMPLE [other]
** A state A with LuaJIT's own allocator is profiled in sampled mode (one sample per SAMPLE
** bytes), then the host puts an allocator of its own (chained to the wrapper it found)
** over the profiler's, so memprof.stop() cannot put the original back: that wrapper stays
** in A's chain, under the host's. A second sampled profile into OUTDIR/restart.bin runs
** while the program allocates strings: of A again (wrapping the host's allocator), or with
** "other" of a second state B (wrapping B's own allocator, the same function as A's with
** another ud), whose loop makes A allocate as much between its own allocations. The host counts the bytes the second
** profile's wrapper is asked for (an allocator of its own over it counts every call's new
** size, as sampled mode counts them) and prints "asked BYTES". The profile's estimate of
** the bytes allocated must match it: the first wrapper, still called under the host's in
** A, may not count A's bytes into the second profile.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

/* The allocator the program put over the profiler's, one per state: counts what it is asked
 * while counting is on, and passes every call on to what it found. */
struct over {
	lua_Alloc f;
	void *ud;
};
static struct over over_a, over_b;
static int counting;
static uint64_t asked;

static void *host_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	struct over *o = ud;
	if (counting && o == &over_b)
		asked += nsize;
	return o->f(o->ud, ptr, osize, nsize);
}

static void put_over(lua_State *L, struct over *o)
{
	o->f = lua_getallocf(L, &o->ud);
	lua_setallocf(L, host_alloc, o);
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

/* other(i), B's: a string of about as many bytes as B's own allocates, made in A, so that
 * A's allocator calls come between B's, as two states' on one thread do. */
static lua_State *other_state;

static int other(lua_State *L)
{
	static char buf[512];
	int i = (int)lua_tointeger(L, 1);
	memset(buf, 'x', sizeof(buf));
	int n = snprintf(buf, sizeof(buf), "%d", i);
	buf[n] = 'x';
	lua_pushlstring(other_state, buf, (size_t)(300 + i % 100 + n));
	lua_pop(other_state, 1);
	return 0;
}

static lua_State *state(const char *cpath)
{
	lua_State *L = luaL_newstate();
	if (!L) {
		fprintf(stderr, "memprof_restart: cannot create a Lua state\n");
		exit(1);
	}
	luaL_openlibs(L);
	lua_getglobal(L, "package");
	lua_pushstring(L, cpath);
	lua_setfield(L, -2, "cpath");
	lua_pop(L, 1);
	lua_register(L, "count", count);
	lua_register(L, "other", other);
	if (run(L, "mp = require 'luaprof'.memprof"))
		exit(1);
	return L;
}

#define WORK "local r = {} for i = 1, 200000 do r[i % 1000] = ('x'):rep(300 + i % 100) .. i end\n"
#define WORK_OTHER                                                                                \
	"local r = {} for i = 1, 200000 do\n"                                                    \
	"  r[i % 1000] = ('x'):rep(300 + i % 100) .. i other(i)\n"                               \
	"end\n"

int main(int argc, char **argv)
{
	if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "other"))) {
		fprintf(stderr, "usage: memprof_restart CPATH OUTDIR SAMPLE [other]\n");
		return 1;
	}
	lua_State *A = state(argv[1]), *B = argc == 5 ? state(argv[1]) : A;
	char code[1024];
	snprintf(code, sizeof(code),
		 "assert(mp.start('%s/first.bin', { sample = %s }))\n"
		 "local t = {} for i = 1, 1000 do t[i] = { i } end",
		 argv[2], argv[3]);
	if (run(A, code))
		return 1;
	put_over(A, &over_a);
	if (run(A, "assert(mp.stop())"))
		return 1;
	snprintf(code, sizeof(code), "assert(mp.start('%s/restart.bin', { sample = %s }))",
		 argv[2], argv[3]);
	if (run(B, code))
		return 1;
	/* The second profile wraps what it finds: A's allocator, or B's own (other). */
	put_over(B, &over_b);
	other_state = A;
	if (run(B, A == B ? "count(true)\n" WORK "count(false)"
			  : "count(true)\n" WORK_OTHER "count(false)"))
		return 1;
	if (run(B, "assert(mp.stop())"))
		return 1;
	printf("asked %llu\n", (unsigned long long)asked);
	if (A != B)
		lua_close(B);
	lua_close(A);
	return 0;
}
