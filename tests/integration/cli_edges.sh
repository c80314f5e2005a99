#!/usr/bin/env bash
# `luaprof record` and `luaprof report` at the edges of their options: an option that would
# be parsed and then do nothing is refused, with what it does and what to give instead,
# before the program runs. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/record.sh
record_setup

echo 'local f = io.open(arg[1], "w") f:write("ran") f:close()
local s, t = 0, os.clock() while os.clock() - t < 0.1 do s = s + 1 end' >"$t/mark.lua"

# refused MESSAGE ARGS...: record ARGS exits 1 with MESSAGE (a whole line), the program not run.
refused() {
	local msg=$1
	shift
	rm -f "$t/ran"
	(cd "$t" && "$lp" record "$@" -- luajit mark.lua ran) >/dev/null 2>"$t/err"
	local rc=$?
	[ $rc = 1 ] || fail "record $*: exit $rc, want 1"
	grep -qxF "luaprof record: $msg" "$t/err" || fail "record $*: said $(cat "$t/err")"
	[ -e "$t/ran" ] && fail "record $*: the program ran"
}
# ran ARGS...: record ARGS runs the program and exits 0.
ran() {
	rm -f "$t/ran"
	(cd "$t" && "$lp" record "$@" -- luajit mark.lua ran) >"$t/out" 2>"$t/err"
	local rc=$?
	[ $rc = 0 ] && [ -e "$t/ran" ] || fail "record $*: exit $rc: $(cat "$t/err")"
}

# -q leaves the summary out, and with it the list whose length -n gives (it was ignored).
refused "-n 5 is the length of the summary's list, which -q leaves out: give one or the other (-n is the list's length only with -f top)" \
	-q -n 5 -o q.svg
refused "-n 3 is the length of the summary's list, which -q leaves out: give one or the other (-n is the list's length only with -f top)" \
	--memory --sample 4K -q -n 3 -o q.folded
ran -q -n 0 -o q.svg
ran -q -n 5 -f top -o q.txt

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "cli_edges: all checks passed"
