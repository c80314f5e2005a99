#!/usr/bin/env bash
# The agent's scan of package.loaded for the names of C functions (cnames.c), which runs at
# lua_close before the CPU profiler stops, is the agent's time, not the program's: its
# ticks are counted in meta agent_ticks, not sampled. With 500 modules of 2000 fields each
# (a million fields, the scan's bound) the scan took ~5% of a 10 kHz profile, all of it in
# the sentinel's finalizer (anchor_gc;agent_cnames_scan;lua_next...).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init

need_x86_64
need_build luaprof luaprof.so
have luajit || skip "no luajit"

cat >"$t/scan.lua" <<'LUA'
local p = print
for i = 1, 500 do
	local t = {}
	for j = 1, 2000 do t["f" .. j] = p end
	package.loaded["m" .. i] = t
end
local x = 0
for i = 1, 3e7 do x = x + i % 7 end
LUA
build/luaprof record -q -r 10000 -f collapsed -o "$t/scan.folded" -- luajit "$t/scan.lua" \
	>"$t/record.out" 2>&1 || fail "record exited $?: $(head -3 "$t/record.out")"
[ -s "$t/scan.folded" ] || { echo "FAIL: no profile"; exit 1; }
n=$(awk '/agent_cnames_scan/ { n += $NF } END { print n + 0 }' "$t/scan.folded")
[ "$n" = 0 ] || fail "$n samples in the agent's scan of C names"
build/luaprof report -q -f info "$t/scan.bin" >"$t/info" 2>&1 || fail "report -f info exited $?"
own=$(sed -n 's/^meta\.agent_ticks: //p' "$t/info")
[ "${own:-0}" -gt 0 ] || fail "the scan's ticks not counted (meta agent_ticks: ${own:-none})"

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
