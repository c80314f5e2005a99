#!/usr/bin/env bash
# A child forked by another thread while the profiled thread is inside the sampled
# wrapper's rare path (memprof_fork_rare.c: its writer, called there, has the other thread
# fork) inherits the path's flag (rare_busy) with no thread of its own in the path. The
# child's exit handler, stopping a sampled profile of its own, waited for that path to end
# (rare_close): 5 s, then no stop, the child's file cut short. The child's flag is its
# own thread's now: its profile must be whole, its exit quick (under 2 s).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/host" tests/integration/memprof_fork_rare.c -O1 -Iinclude -I$inc \
	-Lbuild -l:luaprof.so -Wl,-rpath,"$PWD/build" -lluajit-5.1 -lpthread || exit 1

timeout 60 "$t/host" "$t/parent.bin" "$t/child.bin" >"$t/out" 2>&1 ||
	fail "the host: exit $?: $(head -3 "$t/out")"
read -r _ how st ms < <(grep -m1 '^child ' "$t/out")
if [ "${how:-}" != exit ] || [ "${st:-}" != 0 ]; then
	fail "the child: $(head -3 "$t/out")"
else
	[ "$ms" -lt 2000 ] || fail "the child took $ms ms to exit"
	build/luaprof report -f info "$t/child.bin" 2>&1 | grep -q '^complete: yes$' ||
		fail "the child's profile is cut short ($ms ms)"
fi
build/luaprof report -f info "$t/parent.bin" 2>&1 | grep -q '^complete: yes$' ||
	fail "the parent's profile is cut short"

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
