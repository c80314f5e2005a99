#!/usr/bin/env bash
# `luaprof record --memory` of a script that fails: luajit (luajit.c's docall) collects all
# garbage after the script's error, Ctrl-C's "interrupted!" included, and only then does
# lua_close stop the profile, so a leak held by the failed chunk's locals shows as freed.
# record says so, and how to keep it (SIGTERM), when the program exits with status 1 and
# lua_close stopped the profile; not after a success, nor after os.exit(1) (the profile
# stops at exit(), before any collection). SIGTERM keeps the leak held. Before, the HEAP
# SUMMARY of an interrupted leaking server was empty with nothing to say why.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/record.sh
record_setup

# 300 tables of 32 bytes ({i}) kept by a local of the main chunk, then the script's end.
for c in ok error exit; do
	case $c in
	ok) tail="" ;;
	error) tail='error("boom")' ;;
	exit) tail='os.exit(1)' ;;
	esac
	printf 'local keep = {}\nfor i = 1, 300 do keep[i] = {i} end\n%s\n' "$tail" >"$t/$c.lua"
	(cd "$t" && "$lp" record --memory --leak-only -o "$c.txt" -- luajit -joff "$c.lua") \
		>/dev/null 2>"$t/$c.err"
	echo "$?" >"$t/$c.rc"
done

note='after an error in the script'
[ "$(cat "$t/error.rc")" = 1 ] || fail "error.lua: record exited $(cat "$t/error.rc") (want 1)"
grep -q "$note" "$t/error.err" || fail "error.lua: no note on the collection: $(cat "$t/error.err")"
grep -q 'SIGTERM' "$t/error.err" || fail "error.lua: the note does not say what keeps the leak"
# The collection is real: the 300 tables are freed in the profile (what the note explains).
grep -q '^@error\.lua:2 holds' "$t/error.txt" &&
	fail "error.lua: the locals' tables were held: luajit no longer collects after an error?"
for c in ok exit; do
	grep -q "$note" "$t/$c.err" && fail "$c.lua: the note, after $c: $(grep note "$t/$c.err")"
	grep -q "^@$c\\.lua:2 holds [0-9]*B: 30[0-9] allocs" "$t/$c.txt" ||
		fail "$c.lua: the 300 tables not held: $(head -3 "$t/$c.txt")"
done

# SIGTERM instead: the profile stops at the signal, the loop's tables are held.
cat >"$t/server.lua" <<'LUA'
local sessions = {}
local n = 0
io.stderr:write("up\n")
while true do n = n + 1; sessions[n] = {n}; if n % 1000 == 0 then os.execute("sleep 0.01") end end
LUA
(cd "$t" && exec "$lp" record -q --memory --leak-only -o server.txt -- luajit -joff server.lua) \
	>/dev/null 2>"$t/server.err" &
rec=$!
# (command grep: the file may not be made yet; common.sh's grep fails the test on that.)
for _ in $(seq 100); do command grep -qs up "$t/server.err" && break; sleep 0.05; done
sleep 0.3
kill -TERM $rec
wait $rec
grep -q '^@server\.lua:4 holds' "$t/server.txt" ||
	fail "SIGTERM: the loop's tables not held: $(head -3 "$t/server.txt")"
grep -q "$note" "$t/server.err" && fail "SIGTERM: the note on errors: $(cat "$t/server.err")"

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
