#!/usr/bin/env bash
# The agent's C API from a C host embedding Debian's libluajit-5.1.so (agent_host.c):
# validation codes, a custom writer/on_stop/backtracer, the stream parsed back, and
# lua_close while profiling (Lua API and C API). Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

luajit_dev "$t/apt.log" || skip "$why"
need_build luaprof.so libluaprof.a

${CC:-cc} -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -O1 -g -D_GNU_SOURCE \
	-Iinclude -Isrc -I$inc -o "$t/host" tests/integration/agent_host.c build/libluaprof.a \
	-Lbuild -l:luaprof.so -Wl,-rpath,"$PWD/build" -lluajit-5.1 $(make -s print-ldlibs) \
	2>"$t/cc.log" || { echo "FAIL: cannot build agent_host.c: $(head -20 "$t/cc.log")"; exit 1; }
"$t/host" build "$t"
rc=$?
[ $rc = 0 ] || { echo "FAIL: agent_host exited $rc"; exit 1; }
