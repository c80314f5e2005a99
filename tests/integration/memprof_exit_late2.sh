#!/usr/bin/env bash
# Exact mode, exit() while an allocator call is under way (memprof_exit_late2.c).
# - mid: a call held in the original allocator past events_close's millisecond but not
#   past the stop finishes its record into the live stream buffer while the stop writes
#   its epilogue there (mp.pend, mp.w.pos are not scratch yet): the file's end is spoilt.
# - oom: an allocator under the wrapper that calls exit() inside a general-path call (the
#   wrapper's rare_busy set by this very thread): events_close waits for the flag 5 s,
#   then no stop: the profile is cut short (before ffb849a: a whole profile, at once).
# - null: a held new block's call that fails after the exit handler's stop: event_call's
#   failure branch reads *h in the unmapped stream buffer (SIGSEGV).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/host" tests/integration/memprof_exit_late2.c -O1 -Iinclude -I$inc \
	-Lbuild -l:luaprof.so -Wl,-rpath,"$PWD/build" -lluajit-5.1 -lpthread || exit 1

for how in mid mid mid oom null null; do
	rm -f "$t/p.bin"
	t0=$(date +%s%N)
	{ timeout 30 "$t/host" "$t/p.bin" $how >"$t/out" 2>&1; } 2>/dev/null
	rc=$? ms=$((($(date +%s%N) - t0) / 1000000))
	[ $rc = 0 ] || { fail "$how: exit $rc: $(head -3 "$t/out")"; continue; }
	[ $ms -lt 2000 ] || fail "$how: exit took $ms ms"
	build/luaprof report -f info "$t/p.bin" >"$t/info" 2>&1 ||
		{ fail "$how: the profile does not read: $(head -3 "$t/info")"; continue; }
	grep -q '^complete: yes$' "$t/info" || fail "$how: profile cut short: $(head -3 "$t/info")"
	grep -q '^meta.stopped_by: exit$' "$t/info" ||
		fail "$how: not stopped by exit: $(grep -m1 stopped_by "$t/info")"
done

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
