#!/usr/bin/env bash
# A terminating signal during a CPU profile's start, under `luaprof record` (termstop.c:
# the profile is finished before the program dies of it): the start is done first (its
# header written, its timer armed), then the signal stops the profile and the program dies
# of it, the file whole. Before, the signal's stop found the profile being set up and gave
# up, and the process died at once, the file's header all it held (or less): the
# program's own sysprof.start after record's profile, at either point and from either
# thread; and record's own start, whose signal was still at its default action (no
# handler until the start returned). start_signal_host.c sends SIGTERM at a chosen point
# of the start. Then SIGTERM to `luaprof record` at random times in its first 8 ms.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
. tests/integration/lib/start_signal.sh

start_signal_setup

for spec in phdr:raise:1 pthread:raise:1 phdr:thread:1 pthread:thread:1; do
	start_signal_run "restart-${spec//:/-}" restart "$spec" cpu
done
# record's own start: the host's other thread has no handler to send it on yet.
for spec in phdr:raise:1 pthread:raise:1; do
	start_signal_run "record-${spec//:/-}" record "$spec" cpu
done

# A child forked (by another thread) while the signal is held for the CPU start: the
# child's own memory profile goes through, no signal inherited (memprof_start_signal.sh's
# fork runs). Before, the child died of the parent's SIGTERM at its first start.
rm -f "$t/fork_child.bin"
start_signal_run fork restart phdr:fork:1 cpu
grep -q '^fork child: exit 0$' "$t/fork.out" ||
	fail "fork: $(grep '^fork child' "$t/fork.out" || head -3 "$t/fork.out")"

# A start refused with the signal held meanwhile: no file left (start_signal_nofile).
for how in none raise thread; do
	start_signal_nofile "refused-$how" "cpcall:$how:1" cpu
	start_signal_nofile "refused-old-$how" "cpcall:$how:1" cpu "an older file"
done

# The same with the script ending right after the start, the signal on the host's other
# thread: that thread's handler hands the stop over and looks every 10 ms for the file;
# the program dies of the signal, its profile whole (exit's handler raises it once the
# file is written: agent_termstop_exit). Before, exit ended the process first with
# status 0 (every run of 10 with either point, refused or not; 9 of 10 at phdr).
for i in 1 2 3 4 5; do
	for spec in phdr:thread:1 pthread:thread:1; do
		start_signal_run "exit-${spec//:/-}-$i" exit "$spec" cpu
	done
	start_signal_nofile "exit-refused-$i" cpcall:thread:1 cpu "" exit
done

# The same under `luaprof record` itself: the profile is whole, stopped by the signal, and
# record says the program was killed, with no word of a cut stream.
{ (cd "$t" && exec env LP_TEST_SIGNAL=pthread:raise:1 "$lp" record -o rec.txt -- \
	./host start.lua underrecord - - cpu) >"$t/rec.out" 2>&1; } 2>/dev/null
rc=$?
[ $rc = 143 ] || fail "record: exited $rc, not 143: $(head -3 "$t/rec.out")"
"$lp" report -f info "$t/rec.bin" 2>&1 | grep -q '^meta.stopped_by: signal$' ||
	fail "record: the profile is not one the signal stopped: $(head -3 "$t/rec.out")"
grep -q 'killed by signal 15' "$t/rec.out" ||
	fail "record: no word of the signal: $(grep -v '^$' "$t/rec.out" | head -4)"
! grep -q 'warning' "$t/rec.out" ||
	fail "record: $(grep -m1 warning "$t/rec.out")"

# SIGTERM to record (CPU) at random times in its first 8 ms, 40 runs: each leaves a whole
# profile, or says the program died before it loaded the agent, or (record killed before
# it made a file) leaves nothing. Before, 22 runs of 80 said "killed before the profiler
# wrote anything" and 8 left a stream with no end (record warned of it): the signal in the
# agent's start, or before its handler.
start_signal_random 40 -f collapsed

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
