#!/usr/bin/env bash
# C functions in package.preload (loaders: LuaJIT's own table.new, table.clear, ffi; a
# host's preloaded C modules) are named as the program's Lua reaches them,
# package.preload["table.new"], where no symbol names them: on Debian's stripped luajit
# require("table.new")'s loader read luajit+0x5ff30 (the agent's scan of C names, cnames.c,
# read package.loaded's modules and _G, not package.preload).
#  - Exact memory profile of require("table.new") under record, stopped at lua_close (the
#    names read through the Lua API), by os.exit and by SIGTERM (read from the VM's
#    memory): the loader's allocation is at package.preload["table.new"] (or at
#    luaopen_table_new, where luajit has its symbols: checked, but that passed before too).
#  - CPU profile of a stripped C module's preloaded loader (cnames_preload.c) spinning,
#    under record, stopped at lua_close and by os.exit: most samples are in
#    package.preload["cpre.slow"] (they read cpre.so+0x...).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
. tests/integration/lib/record.sh
record_setup

# -- LuaJIT's own loaders, exact memory profiles stopped three ways.
cat >"$t/tn.lua" <<'LUA'
local new = require("table.new")
local t = new(100, 0)
if STOP == "exit" then os.exit(0) end
if STOP == "term" then
	os.execute("kill -TERM $PPID")
	while true do end
end
LUA
site='^(package\.preload\["table\.new"\]|luaopen_table_new):0x[0-9a-f]+: 1 events'
for stop in close exit term; do
	want=0
	[ $stop = term ] && want=143
	(cd "$t" && "$lp" record -q --memory -o tn$stop.txt -- luajit -e "STOP = '$stop'" tn.lua) \
		>"$t/tn$stop.out" 2>&1
	rc=$?
	[ $rc = $want ] || fail "table.new, stopped by $stop: record exited $rc, want $want: $(head -3 "$t/tn$stop.out")"
	if grep -Eq "$site" "$t/tn$stop.txt"; then
		echo "ok table.new's loader, stopped by $stop: $(grep -Em1 "$site" "$t/tn$stop.txt")"
	else
		fail "table.new's loader, stopped by $stop: not named: $(sed -n '/^ALLOCATIONS/,/^$/p' "$t/tn$stop.txt" | tr '\n' '|')"
	fi
done

# -- A stripped C module's preloaded loader, CPU profiles.
luajit_dev "$t/apt.log" || skip "$why"
mkdir -p "$t/strip"
cc_test "$t/cpre.so" tests/integration/cnames_preload.c -O2 -I"$inc" -fPIC -shared || exit 1
strip --strip-all -o "$t/strip/cpre.so" "$t/cpre.so" || { echo "FAIL: strip"; exit 1; }
cat >"$t/slow.lua" <<'LUA'
package.cpath = "./strip/?.so"
require "cpre"
local m = require "cpre.slow"
assert(#m == 1000)
if STOP == "exit" then os.exit(0) end
LUA
# FOLDED NAME: the share (percent) of samples with a frame NAME, and the samples.
share() {
	awk -v f="$2" '{ n = $NF; all += n; s = ";" $0; sub(/ [0-9]+$/, ";", s)
		if (index(s, ";" f ";")) in_f += n }
		END { printf "%d %d\n", all ? 100 * in_f / all : 0, all }' "$1"
}
for stop in close exit; do
	(cd "$t" && "$lp" record -q --rate 1000 -f collapsed -o slow$stop.folded -- \
		luajit -e "STOP = '$stop'" slow.lua) >"$t/slow$stop.out" 2>&1 ||
		fail "cpre.slow, stopped by $stop: record exited $?: $(head -3 "$t/slow$stop.out")"
	read -r pct all < <(share "$t/slow$stop.folded" 'package.preload["cpre.slow"]')
	if [ "$all" -lt 100 ]; then fail "cpre.slow, stopped by $stop: $all samples"
	elif [ "$pct" -lt 50 ]; then
		fail "cpre.slow, stopped by $stop: $pct % of $all samples in package.preload[\"cpre.slow\"], want 50 %+: $(sort -t' ' -k2 -nr "$t/slow$stop.folded" | head -2 | tr '\n' '|')"
	else echo "ok cpre.slow, stopped by $stop: $pct % of $all samples"; fi
done

[ "$fails" = 0 ] || exit 1
echo "ok"
exit 0
