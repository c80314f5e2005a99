/*
** A host for api_stop_path.sh: a profile the C API started, with a writer of the host's
** that fails, stopped from Lua (memprof.stop(), sysprof.stop()) after the Lua API had run
** a profile of its own into a file. The failure must not be blamed on that file.
**
** Usage: api_stop_path CPATH DIR
** The Lua API starts and stops a memory and a CPU profile into DIR/lua-mem.bin and
** DIR/lua-cpu.bin; then, for memprof and sysprof in turn, the C API starts a profile whose
** writer then fails (ENOSPC) and Lua's stop reports it: prints "memprof stop" and
** "sysprof stop" followed by stop's results, tab-separated as print does.
** Exit 0, or 1 with a message on stderr.
*/
#include <errno.h>
#include <stdio.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "luaprof.h"

static int failing;

/* Takes everything until failing is set, then fails as a full disk does. */
static size_t writer(const void **data, size_t len, void *ctx)
{
	(void)data;
	(void)ctx;
	if (failing) {
		errno = ENOSPC;
		return 0;
	}
	return len;
}

static int on_stop(void *ctx, uint8_t *buf)
{
	(void)ctx;
	(void)buf;
	return 0;
}

static uint8_t mbuf[LUAPROF_MEMPROF_BUF_MIN], sbuf[LUAPROF_SYSPROF_BUF_MIN];

static int run(lua_State *L, const char *what, const char *chunk)
{
	if (luaL_dostring(L, chunk) == 0)
		return 0;
	fprintf(stderr, "%s: %s\n", what, lua_tostring(L, -1));
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: api_stop_path CPATH DIR\n");
		return 1;
	}
	char chunk[2048];
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	snprintf(chunk, sizeof(chunk),
		 "package.cpath = '%s;' .. package.cpath\n"
		 "lp = require 'luaprof'\n"
		 "assert(lp.memprof.start('%s/lua-mem.bin'))\n"
		 "assert(lp.memprof.stop())\n"
		 "assert(lp.sysprof.start{mode = 'C', path = '%s/lua-cpu.bin'})\n"
		 "assert(lp.sysprof.stop())\n", argv[1], argv[2], argv[2]);
	if (run(L, "the Lua API's profiles", chunk))
		return 1;

	struct luaprof_memprof_options mo = { .buf = mbuf, .len = sizeof(mbuf),
					      .writer = writer, .on_stop = on_stop };
	failing = 0;
	if (luaprof_memprof_start(L, &mo) != LUAPROF_PROFILE_SUCCESS) {
		fprintf(stderr, "memprof start: %s\n", luaprof_memprof_error());
		return 1;
	}
	failing = 1;
	if (run(L, "memprof", "local t = {} for i = 1, 20000 do t[i] = {i} end\n"
		    "print('memprof stop', lp.memprof.stop())"))
		return 1;

	struct luaprof_sysprof_options so = { .mode = LUAPROF_SYSPROF_CALLGRAPH, .interval = 1,
					      .buf = sbuf, .len = sizeof(sbuf) };
	failing = 0;
	if (luaprof_sysprof_set_writer(writer) != LUAPROF_PROFILE_SUCCESS ||
	    luaprof_sysprof_set_on_stop(on_stop) != LUAPROF_PROFILE_SUCCESS ||
	    luaprof_sysprof_start(L, &so) != LUAPROF_PROFILE_SUCCESS) {
		fprintf(stderr, "sysprof start: %s\n", luaprof_sysprof_error());
		return 1;
	}
	failing = 1;
	if (run(L, "sysprof", "print('sysprof stop', lp.sysprof.stop())"))
		return 1;
	lua_close(L);
	return 0;
}
