/*
** memprof_alias.sh's host: more live samples on one granule of the live marks than a
** 16-bit count holds.
**
** Usage: memprof_alias CPATH OUTDIR COUNT
** A sampled profile (one sample per 4 KiB) into OUTDIR/alias.bin of a state whose
** allocator the host wraps. With the profile running, the host calls the state's
** allocator (the profiler's wrapper) itself COUNT times for 1 GiB each: its own allocator
** answers those calls with addresses 16 MiB apart that nothing ever reads or writes (the
** profiler keeps addresses only), all on one granule of the marks, each a sample. Then it
** frees them all through the wrapper and stops: no sample of them may be left in use.
** Prints "fake COUNT" when done.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#define FAKE_SIZE ((size_t)1 << 30)
#define FAKE_BASE ((uintptr_t)1 << 44) /* 16 TiB: above any heap, below 2^47 */
#define FAKE_STEP ((uintptr_t)1 << 24) /* the marks' aliasing period */

static lua_Alloc kept_f;
static void *kept_ud;
static int fake; /* the host's own calls: addresses, no memory */
static uintptr_t next_fake = FAKE_BASE;

static void *host_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	(void)ud;
	if (!fake)
		return kept_f(kept_ud, ptr, osize, nsize);
	if (nsize == 0)
		return NULL;
	if (ptr) {
		fprintf(stderr, "memprof_alias: unexpected realloc of a fake block\n");
		exit(1);
	}
	void *p = (void *)next_fake;
	next_fake += FAKE_STEP;
	return p;
}

static int run(lua_State *L, const char *code)
{
	if (luaL_dostring(L, code)) {
		fprintf(stderr, "memprof_alias: %s\n", lua_tostring(L, -1));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: memprof_alias CPATH OUTDIR COUNT\n");
		return 1;
	}
	size_t n = (size_t)strtoul(argv[3], NULL, 10);
	void **blocks = calloc(n ? n : 1, sizeof(*blocks));
	lua_State *L = luaL_newstate();
	if (!L || !blocks) {
		fprintf(stderr, "memprof_alias: cannot create a Lua state\n");
		return 1;
	}
	kept_f = lua_getallocf(L, &kept_ud);
	lua_setallocf(L, host_alloc, NULL);
	luaL_openlibs(L);
	lua_getglobal(L, "package");
	lua_pushstring(L, argv[1]);
	lua_setfield(L, -2, "cpath");
	lua_pop(L, 1);
	char code[1024];
	snprintf(code, sizeof(code),
		 "mp = require 'luaprof'.memprof\n"
		 "assert(mp.start('%s/alias.bin', { sample = 4096 }))",
		 argv[2]);
	if (run(L, code))
		return 1;
	void *ud;
	lua_Alloc f = lua_getallocf(L, &ud);
	fake = 1;
	for (size_t i = 0; i < n; i++)
		if (!(blocks[i] = f(ud, NULL, 0, FAKE_SIZE))) {
			fprintf(stderr, "memprof_alias: the wrapper returned NULL\n");
			return 1;
		}
	for (size_t i = 0; i < n; i++)
		f(ud, blocks[i], FAKE_SIZE, 0);
	fake = 0;
	if (run(L, "assert(mp.stop())"))
		return 1;
	lua_close(L);
	free(blocks);
	printf("fake %zu\n", n);
	return 0;
}
