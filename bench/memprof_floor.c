/*
** Cost of the memory profiler's allocator wrappers per call, with no Lua code around them.
**
** Usage: memprof_floor CPATH [ROUNDS [BLOCKS]]
**
** An allocator wrapper is on the path of every allocation and free the VM makes, so its
** cost per call times the VM's calls per second is the least overhead any profile can have
** on a workload, whatever its captures or events cost. This measures that per-call cost for
** each allocator the VM can be left with, calling it directly in a loop: BLOCKS blocks of 16
** to 128 bytes allocated, then freed in address order (a collector's sweep), then again.
**   direct       LuaJIT's own allocator (what lua_getallocf gives before any profile)
**   passthrough  a wrapper that only loads the original and calls it (this file's)
**   sampled      luaprof's sampled-mode wrapper, interval 2^40 bytes: never captures, so
**                this is its countdown and live-block test alone (the generated stub on
**                x86-64, src/agent/allocstub.c)
**   sampled_compiled  the same with the compiled wrapper (LUAPROF_ALLOCSTUB=0 at start)
**   sampled512k  the same at the default 512 KiB interval, captures included (host stack
**                only: the loop is C)
**   exact        exact mode: an event per call, encoded into the stream (on /dev/shm);
**                the VM is outside any Lua call, so each event reads as the C caller's
** The variants run interleaved, ROUNDS rounds (default 101) of 2 x BLOCKS (default 8192)
** calls each, the order rotating every round; each timed round follows an untimed one of the
** same variant (the caches as the variant leaves them, and a new profile's first captures
** learn their unwind rules there; a profile starts before its variant's rounds). Prints
** each variant's median nanoseconds per call with min..max, and the median over the rounds
** of its difference from direct in the same round (paired: this host's speed drifts).
** CPATH is the package.cpath pattern that finds build/luaprof.so.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

static lua_Alloc orig_f;
static void *orig_ud;

static void *passthrough(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	return orig_f(orig_ud, ptr, osize, nsize);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One round: ns per call through f. */
static double round_ns(lua_Alloc f, void *ud, void **blk, size_t *sz, int n)
{
	double t0 = now();
	for (int i = 0; i < n; i++)
		blk[i] = f(ud, NULL, 0, sz[i]);
	for (int i = 0; i < n; i++)
		f(ud, blk[i], sz[i], 0);
	return (now() - t0) * 1e9 / (2.0 * n);
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int run(lua_State *L, const char *chunk)
{
	if (luaL_dostring(L, chunk)) {
		fprintf(stderr, "memprof_floor: %s\n", lua_tostring(L, -1));
		return -1;
	}
	return 0;
}

enum { DIRECT, PASS, SAMPLED, SAMPLEDC, SAMPLED512, EXACT, NV };
static const char *names[NV] = { "direct", "passthrough", "sampled", "sampled_compiled",
				 "sampled512k", "exact" };

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: memprof_floor CPATH [ROUNDS [BLOCKS]]\n");
		return 2;
	}
	int rounds = argc > 2 ? atoi(argv[2]) : 101, n = argc > 3 ? atoi(argv[3]) : 8192;
	if (rounds < 1 || n < 1) {
		fprintf(stderr, "memprof_floor: ROUNDS and BLOCKS must be positive\n");
		return 2;
	}
	void **blk = malloc(sizeof(*blk) * (size_t)n);
	size_t *sz = malloc(sizeof(*sz) * (size_t)n);
	double *t[NV], *d[NV];
	int ok = blk && sz;
	for (int v = 0; v < NV; v++) {
		t[v] = malloc(sizeof(double) * (size_t)rounds);
		d[v] = malloc(sizeof(double) * (size_t)rounds);
		ok = ok && t[v] && d[v];
	}
	if (!ok) {
		fprintf(stderr, "memprof_floor: out of memory\n");
		return 1;
	}
	srand(1);
	for (int i = 0; i < n; i++)
		sz[i] = 16 + 8 * (size_t)(rand() % 15);

	lua_State *L = luaL_newstate();
	if (!L)
		return 1;
	luaL_openlibs(L);
	lua_getglobal(L, "package");
	lua_pushstring(L, argv[1]);
	lua_setfield(L, -2, "cpath");
	lua_pop(L, 1);
	if (run(L, "mp = require('luaprof').memprof"))
		return 1;
	orig_f = lua_getallocf(L, &orig_ud);

	static const char *start[NV] = {
		NULL, NULL,
		"assert(mp.start('/dev/shm/memprof_floor.prof', {sample = 2^40}))",
		"assert(mp.start('/dev/shm/memprof_floor.prof', {sample = 2^40}))",
		"assert(mp.start('/dev/shm/memprof_floor.prof', {sample = 512 * 1024}))",
		"assert(mp.start('/dev/shm/memprof_floor.prof'))",
	};
	for (int r = -1; r < rounds; r++) { /* round -1 warms up */
		for (int k = 0; k < NV; k++) {
			int v = (k + (r < 0 ? 0 : r)) % NV;
			lua_Alloc f = orig_f;
			void *ud = orig_ud;
			if (v == PASS) {
				f = passthrough;
				ud = NULL;
			} else if (start[v]) {
				if (v == SAMPLEDC)
					setenv("LUAPROF_ALLOCSTUB", "0", 1);
				int bad = run(L, start[v]);
				unsetenv("LUAPROF_ALLOCSTUB");
				if (bad)
					return 1;
				f = lua_getallocf(L, &ud);
			}
			round_ns(f, ud, blk, sz, n);
			double ns = round_ns(f, ud, blk, sz, n);
			if (start[v] && run(L, "assert(mp.stop()) os.remove('/dev/shm/memprof_floor.prof')"))
				return 1;
			if (r >= 0)
				t[v][r] = ns;
		}
	}
	lua_close(L);

	printf("| allocator | ns per call, median (min..max) | over direct, same round: median "
	       "(min..max) |\n|---|---|---|\n");
	for (int v = NV - 1; v >= 0; v--) {
		for (int r = 0; r < rounds; r++)
			d[v][r] = t[v][r] - t[DIRECT][r];
		qsort(t[v], (size_t)rounds, sizeof(double), cmp);
		qsort(d[v], (size_t)rounds, sizeof(double), cmp);
	}
	for (int v = 0; v < NV; v++)
		printf("| %s | %.2f (%.2f..%.2f) | %+.2f (%+.2f..%+.2f) |\n", names[v],
		       t[v][rounds / 2], t[v][0], t[v][rounds - 1], d[v][rounds / 2], d[v][0],
		       d[v][rounds - 1]);
	return 0;
}
