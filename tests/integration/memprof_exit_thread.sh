#!/usr/bin/env bash
# exit() on another thread than the one running the profiled state, while that one goes
# on allocating (memprof_exit_thread.c; a host whose main thread ends the process, its
# Lua thread still at work). The profiler's exit handler stops the sampled profile there:
# it wrote the stream's end and freed the sample tables while the Lua thread's rare paths
# still took samples into them. With the host's allocator over the wrapper (which the stop
# cannot take out, so the thread's calls reach it throughout the stop), 4 runs of the 12
# below failed: one died of SIGSEGV, three left a profile that does not read ("sampled
# allocation with live flag 2"); 7 of 20 in an earlier trial. Each run must exit 0, its
# profile whole and stopped by exit: 12 runs with the host's allocator over the wrapper,
# 8 with it there too and the profile started on the main thread, which then exits
# ("migrate": a state moved to another thread), 4 without (then only the calls under way
# as the stop began could meet it).
# Then exact mode ("late": memprof_exit_thread.c), 4 runs: an event under way in the
# allocator under the wrapper, held there until the exit handler has stopped the profile,
# then let finish. It wrote the rest of its record through the stream the stop had emptied:
# SIGSEGV in every run. 2 more in sampled mode the same way, one sample per GiB (so that
# the call held is the wrapper's pass-through, not a rare path: a stop waits for one of
# those, and gives up after 5 s with the file empty).
# Then exact mode's cases of memprof_exit_late2.c, each failing before its fix:
# - mid (x3): a call held in the original allocator past the stop's millisecond of waiting
#   but not past the stop (released by the C API writer's final flush) wrote the rest of
#   its record into the stream as the stop wrote it: data after the epilogue.
# - oom: the host's allocator under the wrapper calls exit() inside a general-path call on
#   the VM's own thread: the stop waited 5 s for that path, then wrote nothing.
# - null (x2): a held reallocation that fails after the exit handler's stop read its
#   record's header in the buffer the stop had unmapped: SIGSEGV. JIT off (the host says
#   why).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/host" tests/integration/memprof_exit_thread.c -O1 -I$inc -lluajit-5.1 -lpthread ||
	exit 1
cc_test "$t/late2" tests/integration/memprof_exit_late2.c -O1 -Iinclude -I$inc \
	-Lbuild -l:luaprof.so -Wl,-rpath,"$PWD/build" -lluajit-5.1 -lpthread || exit 1

# Run V's host (the rest of the arguments) with PROFILE at $t/p.bin: it must exit 0, its
# profile whole and stopped by exit.
whole_at_exit() {
	local v=$1 rc
	shift
	rm -f "$t/p.bin"
	# (bash's word of a crash kept out of the test's output)
	{ timeout 30 "$@" >"$t/out" 2>&1; } 2>/dev/null
	rc=$?
	[ $rc = 0 ] || { fail "$v: exit $rc: $(head -3 "$t/out")"; return; }
	build/luaprof report -f info "$t/p.bin" >"$t/info" 2>&1 ||
		{ fail "$v: the profile does not read: $(head -3 "$t/info")"; return; }
	grep -q '^complete: yes$' "$t/info" || fail "$v: profile cut short: $(head -3 "$t/info")"
	grep -q '^meta.stopped_by: exit$' "$t/info" ||
		fail "$v: not stopped by exit: $(grep -m1 stopped_by "$t/info")"
}

for i in $(seq 30); do
	how=over sample=64
	[ $i -le 12 ] || how=migrate
	[ $i -le 20 ] || how=
	[ $i -le 24 ] || how=late
	[ $i -gt 28 ] || [ $i -le 24 ] || sample=nil
	[ $i -le 28 ] || sample=1073741824
	whole_at_exit "run $i${how:+ ($how)}, sample $sample" \
		"$t/host" "$PWD/build/?.so" "$t/p.bin" $sample $((10 + i * 3)) $how
done
for how in mid mid mid oom null null; do
	whole_at_exit "exact, $how" "$t/late2" "$t/p.bin" $how
done

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
