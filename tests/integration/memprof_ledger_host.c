/*
** memprof_ledger_host: runs memprof_ledger.lua in a state of its own under exact-mode
** memory profiling started through the C API with a writer of the host's (so the agent
** encodes each event in the wrapper, not on its writer thread), for memprof_ledger.sh.
**
** usage: memprof_ledger_host SCRIPT STREAM on|off
** Exit 0, or 1 with a message on stderr.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "luaprof.h"

static uint8_t buf[1 << 20];
static int out_fd = -1;

/* Tarantool's writer contract: write what it can of len bytes at *data, return how many
 * (0 stops the profile), and leave *data at the buffer to fill next. */
static size_t writer(const void **data, size_t len, void *ctx)
{
	(void)ctx;
	const uint8_t *p = *data;
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(out_fd, p + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return 0;
		done += (size_t)n;
	}
	return done;
}

static int on_stop(void *ctx, uint8_t *b)
{
	(void)ctx;
	(void)b;
	return close(out_fd);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: memprof_ledger_host SCRIPT STREAM on|off\n");
		return 1;
	}
	out_fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out_fd < 0) {
		fprintf(stderr, "%s: %s\n", argv[2], strerror(errno));
		return 1;
	}
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	lua_pushboolean(L, 1);
	lua_setglobal(L, "LEDGER_HOST");
	lua_createtable(L, 1, 0);
	lua_pushstring(L, argv[3]);
	lua_rawseti(L, -2, 1);
	lua_setglobal(L, "arg");
	struct luaprof_memprof_options o = { .buf = buf, .len = sizeof(buf), .writer = writer,
					     .on_stop = on_stop };
	if (luaprof_memprof_start(L, &o) != LUAPROF_PROFILE_SUCCESS) {
		fprintf(stderr, "memprof start: %s\n", luaprof_memprof_error());
		return 1;
	}
	if (luaL_dofile(L, argv[1]) != 0) {
		fprintf(stderr, "%s\n", lua_tostring(L, -1));
		return 1;
	}
	if (luaprof_memprof_stop(L) != LUAPROF_PROFILE_SUCCESS) {
		fprintf(stderr, "memprof stop: %s\n", luaprof_memprof_error());
		return 1;
	}
	lua_close(L);
	return 0;
}
