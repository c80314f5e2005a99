#!/usr/bin/env bash
# A sampled memory profile of JIT-compiled code: an allocation in a trace is placed at the
# line of the trace's snapshot, often an earlier line than the allocating statement (the
# loop's), and functions the trace inlined may be left out. A leak made by string.format
# in a function a loop calls was charged to the loop's line alone. record and report say
# so when most sampled bytes come from traces, and that luajit -joff places them exactly
# (with the JIT off the same profile names the line and string.format); not for a profile
# made with the JIT off.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/record.sh
record_setup

cat >"$t/leak.lua" <<'LUA'
local cache = {}
local function handle(id)
	local body = string.format("%d-%s", id, string.rep("z", 200))
	if id % 4 == 0 then cache[id] = body end
end
for i = 1, 40000 do handle(i) end
collectgarbage()
LUA
note='of the sampled bytes were allocated in JIT traces'

(cd "$t" && "$lp" record --memory --sample 16K -o on.svg -- luajit -jon leak.lua) >/dev/null 2>"$t/err" ||
	fail "record (JIT on): $(cat "$t/err")"
[ "$(grep -c "$note" "$t/err")" = 1 ] && grep -q 'luajit -joff places them exactly' "$t/err" ||
	fail "record (JIT on): not one note on trace lines: $(cat "$t/err")"
"$lp" report "$t/on.bin" --leak-only -f top >/dev/null 2>"$t/err" && grep -q "^luaprof report: note: [<>]\?[0-9.]*% $note" "$t/err" ||
	fail "report (JIT on): no note on trace lines: $(cat "$t/err")"

(cd "$t" && "$lp" record --memory --sample 16K --leak-only -f top --lines -o off.txt -- luajit -joff leak.lua) \
	>/dev/null 2>"$t/err" || fail "record (JIT off): $(cat "$t/err")"
grep -q "$note" "$t/err" && fail "record (JIT off): the note on trace lines: $(grep note "$t/err")"
# What the note promises: with the JIT off, the line that allocates.
grep -q 'string.format' "$t/off.txt" && grep -q '@leak.lua:3$' "$t/off.txt" ||
	fail "JIT off: the allocating line not ranked: $(head -8 "$t/off.txt")"

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
