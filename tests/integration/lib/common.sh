# shellcheck shell=sh
# The preamble and helpers every integration script shares (sourced, not run: tests/run.sh
# only runs tests/integration/*.sh). POSIX sh, as some scripts are #!/bin/sh.
#
# A script starts with
#   . "$(dirname "$0")/lib/common.sh" || exit 1
#   test_init
# then checks what it needs (need_x86_64, need_build, have ... || skip ...) in the order
# whose first failure should decide its outcome. Exit status of a script: 0 pass, 1 fail,
# 2 skip with the reason on the last line (skip prints it).

# test_init: turns on set -u, enters the repository root and sets name (the script's file
# name without .sh), t (a new temporary directory "$TMPDIR/NAME.XXXXXX") and fails=0. $t is
# removed at exit; HUP, INT and TERM end the script with status 1 once the running command
# returns, USR1 too after saying which tool failed (awk and grep below). A script with more
# to clean up sets its own EXIT trap after this, which calls test_end first and removes $t
# too (or keeps it, when asked to).
test_init() {
	set -u
	cd "$(dirname "$0")/../.." || exit 1
	name=$(basename "$0" .sh)
	t=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX") || exit 1
	# Absolute: with a relative TMPDIR a script's cd "$t" made every later "$t/..." name
	# another place (the tool wrappers' $t/.live among them: failures went unreported).
	case $t in /*) ;; *) t=$PWD/$t ;; esac
	: >"$t/.live" || exit 1
	trap 'test_end; rm -rf "$t"' EXIT
	trap 'exit 1' HUP INT TERM
	trap 'sed "s/^/FAIL: /" "$t/.tool_failed"; exit 1' USR1
	# SIGPIPE ignored by the parent (systemd services, some CI runners) stays ignored here.
	_sigign=$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status 2>/dev/null)
	_tool_env=
	[ $((0x${_sigign:-0} & 0x1000)) = 0 ] || _tool_env="env --default-signal=PIPE"
	fails=0
}

# test_end: what an EXIT trap does first. From there on a tool's failure is not reported: a
# wrapped tool still running in the background (a poller, a subshell nobody waits for) fails
# when its file goes with $t, and its report came while the trap ran (USR1's trap made a
# passing script's status 1), recreated .tool_failed in $t as rm -rf emptied it (so $t was
# left behind), or came after the script had gone (a signal to a pid that may be another
# process's by then). So USR1 is ignored and $t/.live, which the wrapper asks for before
# it reports, removed. The compromise: a tool really failing as the script exits is not
# reported, and a script's last checks run in the foreground or are waited for.
test_end() {
	trap '' USR1
	rm -f "$t/.live"
}

# awk and grep, as every script runs them: their exit status 2 (awk: its program does not
# parse, or an input file cannot be read; grep: a bad pattern or an unreadable file) ends
# the script with status 1 and "FAIL: TOOL exited 2: ARGS". Most checks read a tool's
# output or status, in a command substitution or a pipeline whose status nobody sees, and
# took a broken tool's empty output for "nothing wrong found": an awk program broken by an
# apostrophe in its comment printed errors and the script went on to print "ok". The tool
# may run in a subshell, so the script is told by a signal (USR1, test_init's trap) and the
# message is left in $t/.tool_failed; only while $t/.live is there (test_end). Other statuses (0, 1, a program's own exit N, 141
# for a closed pipe) are returned as they were. A tool writing into a pipe its reader
# closed (grep ... | head -1) dies of SIGPIPE, unless the script started with SIGPIPE
# ignored: then it would exit 2 on EPIPE, so it runs with SIGPIPE's default restored.
checked_tool() {
	command ${_tool_env:-} "$@"
	_tool_rc=$?
	if [ $_tool_rc = 2 ] && [ -n "${t:-}" ] && [ -f "$t/.live" ]; then
		printf '%s exited 2: %s\n' "$1" "$(printf '%s ' "$@" | tr '\n\t' '  ' | cut -c1-200)" \
			>>"$t/.tool_failed"
		kill -USR1 $$
	fi
	return $_tool_rc
}
awk() { checked_tool awk "$@"; }
grep() { checked_tool grep "$@"; }

# fail MESSAGE: prints "FAIL: MESSAGE" and counts it in $fails; the script goes on (it ends
# with [ $fails = 0 ] || exit 1 or the like).
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# skip REASON: prints "SKIP name: REASON" and exits 2.
skip() { echo "SKIP $name: $*"; exit 2; }

# have COMMAND: true when COMMAND is found on the PATH (or is a builtin or function).
have() { command -v "$1" >/dev/null 2>&1; }

# need_x86_64: skips unless the machine is x86_64.
need_x86_64() { [ "$(uname -m)" = x86_64 ] || skip "needs x86_64 (got $(uname -m))"; }

# need_build FILE...: each FILE of build/ is there (luaprof, the CLI, executable), or the
# script says "build/FILE is missing (run make)" for the first one that is not and exits 1:
# a build that is not there is a failure of the run, not a reason to skip.
need_build() {
	for _f in "$@"; do
		if [ "$_f" = luaprof ]; then [ -x build/luaprof ]; else [ -f "build/$_f" ]; fi ||
			{ echo "build/$_f is missing (run make)"; exit 1; }
	done
}
