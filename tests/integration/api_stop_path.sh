#!/usr/bin/env bash
# memprof.stop() / sysprof.stop() of a profile the C API started (a host's writer, no file)
# whose stream failed: the message is strerror alone, as Tarantool's luaL_fileresult(L, 0,
# NULL) gives it. It named the file of the last profile the Lua API had started, written
# whole long before ("DIR/lua-mem.bin: No space left on device").
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof.so
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/host" tests/integration/api_stop_path.c -O1 -Iinclude -I$inc -Lbuild \
	-l:luaprof.so -Wl,-rpath,"$PWD/build" -lluajit-5.1 || exit 1

"$t/host" "$PWD/build/?.so" "$t" >"$t/out" 2>&1 || fail "host exited $?: $(cat "$t/out")"
for p in memprof sysprof; do
	grep -qx "$p stop	nil	No space left on device	28" "$t/out" ||
		fail "$p.stop of the C API's failed profile: $(grep "^$p stop" "$t/out" || cat "$t/out")"
done

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
