# shellcheck shell=bash
# What the scripts of `luaprof record` running luajit share (sourced after common.sh's
# test_init; bash): their first checks and the CLI's path. Call from the repository root.

# record_setup: skips unless the machine is x86_64 (the agent's only target) and luajit is
# installed, fails when the CLI or the agent is not built; then $lp is the CLI's absolute
# path (the scripts run record from $t).
record_setup() {
	need_x86_64
	need_build luaprof luaprof.so
	have luajit || skip "no luajit"
	lp=$PWD/build/luaprof
}
