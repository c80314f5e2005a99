#!/usr/bin/env bash
# Self-checks of lib/common.sh, the preamble every integration script shares. Its awk and
# grep wrappers end a script whose tool exits 2 (a program that does not parse, a bad
# pattern, a file that cannot be read) with status 1, from the script's own shell, a command
# substitution or a background subshell alike. And a wrapped tool still running when the
# script exits (a poller of a file in $t, which the EXIT trap removes) does not count: its
# file vanishing turned a passing script into "FAIL: grep exited 2" (status 1) and left $t
# behind (the wrapper's message recreated a file in it as rm -rf emptied it).
# Each case is a small script in $t/tests/integration run by bash, as tests/run.sh runs
# them, with its own temporary directory under $t/tmp.
# Exit 0 pass, 1 fail.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
lib=$PWD/tests/integration/lib/common.sh
mkdir -p "$t/tests/integration" "$t/tmp"

# run_case NAME BODY: runs BODY after the preamble as the script NAME; its status in $rc,
# its output in $t/NAME.out and $t/NAME.err. TMPDIR is $case_tmpdir if set.
run_case() {
	printf '. "%s" || exit 1\ntest_init\n%s\n' "$lib" "$2" >"$t/tests/integration/$1.sh"
	TMPDIR=${case_tmpdir:-$t/tmp} bash "$t/tests/integration/$1.sh" >"$t/$1.out" 2>"$t/$1.err"
	rc=$?
}

# expect_tool_fail NAME TOOL: the case ended with status 1 at once, saying which tool failed.
expect_tool_fail() {
	[ $rc = 1 ] && grep -q "^FAIL: $2 exited 2: $2 " "$t/$1.out" && ! grep -q after "$t/$1.out" ||
		fail "$1: status $rc, not 1 with \"FAIL: $2 exited 2\" before going on: $(cat "$t/$1.out" "$t/$1.err")"
}

run_case body 'grep -q "a\{" /dev/null; echo after'
expect_tool_fail body grep
run_case subst 'x=$(awk "BEGIN {" </dev/null); echo after'
expect_tool_fail subst awk
run_case background '(grep -q x "$t/missing") & wait $!; echo after'
expect_tool_fail background grep
# A relative TMPDIR (tmp, from the repository's root where test_init goes: here $t) and a
# tool failing after cd "$t": the marker $t/.live was looked for relative to the new
# directory, not found, and the failure went unreported.
case_tmpdir=tmp run_case relative '(cd "$t" && grep -q "a\{" /dev/null); echo after'
expect_tool_fail relative grep
left=$(ls -A "$t/tmp")
[ -z "$left" ] || fail "relative: the script's temporary directory was left: $left"

# A poller greps four of 3000 files in $t until one is gone, then says so; the script exits
# meanwhile and its EXIT trap removes $t, which takes long enough for the poller to see its
# files go (grep exits 2) while the trap runs. Before the fix 6 runs in 6 ended with status
# 1. A run whose poller saw $t vanish at once tested nothing: up to three runs.
race='mkdir "$t/d"
i=0; while [ $i -lt 3000 ]; do : >"$t/d/$i"; i=$((i + 1)); done
(while [ -d "$t" ]; do
	grep -q x "$t/d/1" "$t/d/700" "$t/d/1500" "$t/d/2200" || [ $? = 1 ] || break
done; echo poller done) &
sleep 0.2
exit 0'
tested=0
for try in 1 2 3; do
	run_case race "$race"
	for i in $(seq 100); do grep -q '^poller done$' "$t/race.out" && break; sleep 0.1; done
	grep -q '^poller done$' "$t/race.out" || { fail "race: the poller did not end in 10 s"; break; }
	[ $rc = 0 ] && ! grep -q FAIL "$t/race.out" ||
		{ fail "race: a tool failing on a file the exit removed made the status $rc: $(cat "$t/race.out")"; break; }
	left=$(ls -A "$t/tmp")
	[ -z "$left" ] || { fail "race: the script's temporary directory was left: $left"; break; }
	grep -q 'No such file or directory' "$t/race.err" && { tested=1; break; }
done
[ $fails != 0 ] || [ $tested = 1 ] || fail "race: in 3 runs the poller never saw its file vanish"

[ $fails = 0 ] || exit 1
echo "lib_common: ok"
