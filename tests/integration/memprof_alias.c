/*
** memprof_alias.sh's host: sampled blocks at addresses the live marks alias.
**
** Usage: memprof_alias CPATH OUTDIR count COUNT
**        memprof_alias CPATH OUTDIR null
** A sampled profile into OUTDIR/alias.bin of a state whose allocator the host wraps. With
** the profile running, the host calls the state's allocator (the profiler's wrapper)
** itself for blocks of 1 GiB, each a sample: its own allocator answers those calls with
** addresses that nothing ever reads or writes (the profiler keeps addresses only).
**   count: COUNT blocks 16 MiB apart (the marks' aliasing period), all on one granule
**     of the marks, one sample per 4 KiB; then frees them all through the wrapper. Prints
**     "fake COUNT".
**   null: one block in the granule of the null pointer (which every new block's call
**     tests), one sample per 64 MiB; with it live, the Lua code makes 200,000 tables
**     (JIT off: none sunk), then the block is freed. Prints "null".
** Then it stops the profile.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#define FAKE_SIZE ((size_t)1 << 30)
#define FAKE_NULL ((uintptr_t)1 << 44) /* 16 TiB: above any heap, below 2^47; granule 0 */
#define FAKE_BASE (FAKE_NULL + 4096)   /* granule 16 */
#define FAKE_STEP ((uintptr_t)1 << 24) /* the marks' aliasing period */

static lua_Alloc kept_f;
static void *kept_ud;
static int fake; /* the host's own calls: addresses, no memory */
static uintptr_t next_fake;

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
	int null = argc == 4 && !strcmp(argv[3], "null");
	if (!null && !(argc == 5 && !strcmp(argv[3], "count"))) {
		fprintf(stderr, "usage: memprof_alias CPATH OUTDIR count COUNT | null\n");
		return 1;
	}
	size_t n = null ? 1 : (size_t)strtoul(argv[4], NULL, 10);
	next_fake = null ? FAKE_NULL : FAKE_BASE;
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
		 "jit.off()\n"
		 "assert(mp.start('%s/alias.bin', { sample = %d }))",
		 argv[2], null ? 64 << 20 : 4096);
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
	fake = 0;
	if (null && run(L, "local keep = {}\n"
			   "for i = 1, 200000 do keep[i % 100 + 1] = {} end"))
		return 1;
	fake = 1;
	for (size_t i = 0; i < n; i++)
		f(ud, blocks[i], FAKE_SIZE, 0);
	fake = 0;
	if (run(L, "assert(mp.stop())"))
		return 1;
	lua_close(L);
	free(blocks);
	if (null)
		printf("null\n");
	else
		printf("fake %zu\n", n);
	return 0;
}
