#!/usr/bin/env bash
# Exact memory profiles name a function by its chunk's name whole, as Tarantool's memprof
# writes it: a chunk loaded from a string is named by its source, which the memprof report
# lists under ALIASES, line by line. The agent cut names at 511 bytes: a template's lines
# past that were missing from the list, the line its allocations are charged to among them,
# and a path of 600 bytes lost its end (two files in one deep directory were one).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init

need_x86_64
need_build luaprof.so luaprof
have luajit || skip "no luajit"

# A template of 40 filler lines (about 1.6 KiB), then its table on line 42; a chunk named
# by a path of 600 bytes ending in "tail.lua".
cat >"$t/tmpl.lua" <<'LUA'
local lines = {}
for i = 1, 40 do lines[i] = ("local v%d = %d -- a filler line of the template"):format(i, i) end
lines[41] = "KEEP = {}"
lines[42] = "for i = 1, 100 do KEEP[i] = {i} end"
assert(load(table.concat(lines, "\n")))()
local path = "@" .. string.rep("d/", 296) .. "tail.lua"
assert(load("KEEP2 = {}", path))()
LUA
(cd "$t" && "$OLDPWD/build/luaprof" record --memory -q -o tmpl.txt -- luajit -joff tmpl.lua) \
	>"$t/out" 2>&1 || fail "record exited $?: $(head -3 "$t/out")"
[ -s "$t/tmpl.txt" ] || { cat "$t/out"; echo "FAIL: no report"; exit 1; }
n=$(sed -n 's/^function_alias_1:42: \([0-9]*\) events\t+[0-9]*B\t-0B$/\1/p' "$t/tmpl.txt" | head -1)
[ "${n:-0}" -ge 100 ] ||
	fail "not the 100 tables on function_alias_1:42: $(grep alias "$t/tmpl.txt" | head -3)"
grep -q $'^42\t| for i = 1, 100 do KEEP\\[i\\] = {i} end$' "$t/tmpl.txt" ||
	fail "ALIASES lack line 42 of the template: $(sed -n '/^ALIASES/,$p' "$t/tmpl.txt" | tail -3)"
grep -q 'd/d/tail\.lua:1: ' "$t/tmpl.txt" ||
	fail "the 600-byte path lost its end: $(grep -o '.\{30\}:1: [0-9]* events' "$t/tmpl.txt" | grep d/d | head -2)"

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
