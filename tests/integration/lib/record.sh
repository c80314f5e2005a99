# shellcheck shell=bash
# What the scripts of `luaprof record` running luajit share (sourced after common.sh's
# test_init; bash): their first checks and the CLI's path; timing and checking a program's
# stop (record_duration.sh, record_signal.sh). Call from the repository root.

# record_setup: skips unless the machine is x86_64 (the agent's only target) and luajit is
# installed, fails when the CLI or the agent is not built; then $lp is the CLI's absolute
# path (the scripts run record from $t).
record_setup() {
	need_x86_64
	need_build luaprof luaprof.so
	have luajit || skip "no luajit"
	lp=$PWD/build/luaprof
}

# now_ms: the wall clock in milliseconds.
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# stopped_whole NAME: $t/NAME.info (the raw stream's `report -f info`) is of a whole profile
# that a signal stopped.
stopped_whole() {
	grep -q '^complete: yes$' "$t/$1.info" || fail "$1: profile cut short: $(head -5 "$t/$1.info")"
	grep -q '^meta.stopped_by: signal$' "$t/$1.info" || fail "$1: stopped_by: $(grep stopped_by "$t/$1.info")"
}
