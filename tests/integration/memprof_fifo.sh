#!/usr/bin/env bash
# memprof.start (and sysprof.start) on a FIFO: its stream goes to the process that reads
# it. One that nobody reads yet is refused at once, naming the problem: open(2) waited for
# a reader with the terminating signals held (the start holds them while it makes the
# file), so neither Ctrl-C nor SIGTERM ended the program, only SIGKILL. One with a reader
# gets the whole stream even when the reader is slower than the writer (the pipe fills:
# the writes wait, they do not fail with EAGAIN).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init

need_x86_64
need_build luaprof.so luaprof
have luajit || skip "no luajit"

mkfifo "$t/p" || skip "no mkfifo here"
cat >"$t/start.lua" <<LUA
package.cpath = "$PWD/build/?.so;" .. package.cpath
local lp = require "luaprof"
local what = arg[2] or "memprof"
local ok, msg, e
if what == "sysprof" then
	ok, msg, e = lp.sysprof.start{mode = "C", interval = 1, path = arg[1]}
else
	ok, msg, e = lp.memprof.start(arg[1])
end
print(ok, msg, e)
if not ok then return end
local keep = {}
for i = 1, 100000 do keep[i] = {i} end
print("stop", (what == "sysprof" and lp.sysprof or lp.memprof).stop())
LUA

# No reader: refused at once (killed after 10 s: it hung there).
for what in memprof sysprof; do
	timeout -s KILL 10 luajit -joff "$t/start.lua" "$t/p" $what >"$t/out" 2>&1
	rc=$?
	if [ $rc = 137 ]; then
		fail "$what.start on a FIFO with no reader hung (killed after 10 s)"
		continue
	fi
	grep -q "^nil	$t/p: a FIFO that no process reads" "$t/out" ||
		fail "$what.start on a FIFO with no reader: $(cat "$t/out")"
done

# A reader that opens the FIFO, then waits 1 s before reading: the 100,000 tables' events
# (about 1 MB) fill the pipe meanwhile.
(exec 3<"$t/p"; sleep 1; cat <&3 >"$t/got.bin") &
reader=$!
timeout -s KILL 20 luajit -joff "$t/start.lua" "$t/p" >"$t/out" 2>&1 ||
	fail "with a reader: exit $?: $(cat "$t/out")"
wait $reader
grep -q '^stop	true$' "$t/out" || fail "with a reader: $(cat "$t/out")"
build/luaprof report -q --leak-only "$t/got.bin" >"$t/rep" 2>"$t/err" ||
	fail "with a reader: the stream read does not parse: $(cat "$t/err")"
grep -q 'start.lua:13 holds' "$t/rep" || fail "with a reader: $(head -3 "$t/rep")"

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
