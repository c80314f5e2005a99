#!/usr/bin/env bash
# A terminating signal during a memory profile's start, under `luaprof record` (termstop.c:
# the profile is finished before the program dies of it): the start is done first (its
# header and symbol table written, the allocator swapped), then the signal stops the
# profile and the program dies of it, the file whole. Before, the signal's stop found the
# start's lock held and the process died at once, the file empty: the program's own
# memprof.start after record's profile, at either point and from either thread; and
# record's own start, whose signal was still at its default action (no handler until the
# start returned). start_signal_host.c sends SIGTERM at a chosen point of the start.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
. tests/integration/lib/start_signal.sh

start_signal_setup

for sample in 0 4096; do
	for spec in phdr:raise:1 setallocf:raise:1 phdr:thread:1 setallocf:thread:1; do
		start_signal_run "restart-$sample-${spec//:/-}" restart "$spec" $sample
	done
	# record's own start: the host's other thread has no handler to send it on yet.
	for spec in phdr:raise:1 setallocf:raise:1; do
		start_signal_run "record-$sample-${spec//:/-}" record "$spec" $sample
	done
done

# A child forked (by another thread) while the signal is held for the start: the child has
# no signal pending (fork's), and its own profile's start and stop go through. Before, it
# inherited termstop's held signal, and its first start delivered it: the child died of
# SIGTERM, sent to its parent before it was made. The parent still dies of its signal, its
# profile whole.
for sample in 0 4096; do
	v=fork-$sample
	rm -f "$t/fork_child.bin"
	start_signal_run $v restart phdr:fork:1 $sample
	grep -q '^fork child: exit 0$' "$t/$v.out" ||
		fail "$v: $(grep '^fork child' "$t/$v.out" || head -3 "$t/$v.out")"
	"$lp" report -f info "$t/fork_child.bin" 2>&1 | grep -q '^complete: yes$' ||
		fail "$v: the child's profile is no whole profile"
done

# A start refused with the signal held meanwhile, and (memory) a signal as the start's
# file is made, before the start: no file left (start_signal_nofile).
for sample in 0 4096; do
	for how in none raise thread; do
		start_signal_nofile "refused-$sample-$how" "cpcall:$how:1" $sample
		start_signal_nofile "refused-old-$sample-$how" "cpcall:$how:1" $sample "an older file"
	done
	for how in raise thread; do
		start_signal_nofile "early-$sample-$how" "pthread:$how:1" $sample
		start_signal_nofile "early-old-$sample-$how" "pthread:$how:1" $sample "an older file"
	done
done

# The same with the script ending right after the start, the signal on the host's other
# thread (sent on to the profile's: exit's handler raises one still pending, as for the
# CPU profiler, cpu_start_signal.sh).
for sample in 0 4096; do
	for spec in phdr:thread:1 setallocf:thread:1; do
		start_signal_run "exit-$sample-${spec//:/-}" exit "$spec" $sample
	done
	start_signal_nofile "exit-refused-$sample" cpcall:thread:1 $sample "" exit
done

# The same under `luaprof record --memory --sample` itself: the profile is whole and has no
# sample, and record says the program was killed as it started, not that it "allocated too
# little" for the sampling interval.
{ (cd "$t" && exec env LP_TEST_SIGNAL=setallocf:raise:1 "$lp" record --memory --sample 4K \
	-o rec.txt -- ./host start.lua underrecord) >"$t/rec.out" 2>&1; } 2>/dev/null
rc=$?
[ $rc = 143 ] || fail "record: exited $rc, not 143: $(head -3 "$t/rec.out")"
"$lp" report -f info "$t/rec.bin" 2>&1 | grep -q '^meta.stopped_by: signal$' ||
	fail "record: the profile is not one the signal stopped: $(head -3 "$t/rec.out")"
grep -q 'no allocation was sampled: the program was killed by SIGTERM' "$t/rec.out" ||
	fail "record: no word of the signal in the summary: $(grep -v '^$' "$t/rec.out" | head -4)"

# SIGTERM to record after it made the stream's file, before the program runs (the shim
# sends it as record makes its claim file): passed on to the program once it runs, which dies of it;
# record says so and leaves no file, or a whole profile where the program got as far as
# starting it. Before, it killed record itself, silently, and left the file empty
# (`report` refused it) and its claim file beside it.
cc_test "$t/shim.so" tests/integration/claim_signal_shim.c -shared -fPIC -ldl || exit 1
cat >"$t/churn.lua" <<'LUA'
local keep = {}
for i = 1, 1e6 do keep[i % 500 + 1] = { i } end
LUA
mkdir "$t/claim"
for args in --memory "--memory --sample 4K"; do
	rm -f "$t/claim/"*
	# shellcheck disable=SC2086
	{ (cd "$t/claim" && exec env LD_PRELOAD="$t/shim.so" LP_TEST_CLAIM_SIGNAL=1 "$lp" record \
		$args -o p.txt -- luajit ../churn.lua) >"$t/claim.out" 2>&1; } 2>/dev/null
	rc=$?
	v="claim ($args)"
	case $rc in 143 | 1) ;; *) fail "$v: record exited $rc: $(head -3 "$t/claim.out")" ;; esac
	grep -q 'killed by signal 15' "$t/claim.out" ||
		fail "$v: record did not tell of the signal: $(head -3 "$t/claim.out")"
	if [ -e "$t/claim/p.bin" ]; then
		"$lp" report -f info "$t/claim/p.bin" >"$t/claim.info" 2>&1
		grep -q '^complete: yes$' "$t/claim.info" ||
			fail "$v: p.bin is no whole profile: $(head -3 "$t/claim.info")"
	fi
	left=$(find "$t/claim" -mindepth 1 ! -name p.bin ! -name p.txt -printf '%f ')
	[ -z "$left" ] || fail "$v: left behind: $left"
done

# SIGTERM to record --memory at random times in its first 8 ms, 20 runs a mode: each leaves
# a whole profile, or says the program died before it loaded the agent, or (record killed
# before it made a file) leaves nothing. Before, 27 and 36 runs of 80 said "killed before
# the profiler wrote anything": the signal in the agent's start, or before its handler.
for args in --memory "--memory --sample 4K"; do
	# shellcheck disable=SC2086
	start_signal_random 20 $args
done

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
