#!/usr/bin/env bash
# C functions named after the library that ran them when libraries are loaded and unloaded
# at the same address while the CPU profiler runs (C mode, 1 kHz, wall clock). Seven
# libraries built from dlclose_churn.c (the same code, so the same layout: each is loaded
# where the one before was unloaded), each with its own name for the function (work_V);
# the script loads one with ffi.load, calls work_V (about 1.5 ms), drops and collects it
# (dlclose), then the next, each from its own line, for 3 s. The report named every one
# after the first library it saw at that address (work_0 for about 97% of the samples): the
# symbols of a library the agent saw loaded later were aliases of the first's, and the
# agent looked for new libraries four times a second, missing most of them.
# Checked: on each line, most of the samples in a work_* frame (at least 75%) are named
# work_V of that line's library, and every line has some.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
have luajit || skip "no luajit"

for v in 0 1 2 3 4 5 6; do
	cc_test "$t/libw$v.so" tests/integration/dlclose_churn.c -O1 -fPIC -shared -I"$inc" \
		-DV=$v || exit 1
done

cat >"$t/names.lua" <<'LUA'
local dir, secs, n = arg[1], tonumber(arg[2]), tonumber(arg[3])
local ffi = require("ffi")
for v = 0, 6 do ffi.cdef("unsigned work_" .. v .. "(unsigned n);") end
local function load(v) return ffi.load(dir .. "/libw" .. v .. ".so") end
local t_end = os.clock() + secs
while os.clock() < t_end do
  local l
  l = load(0) l.work_0(n) l = nil collectgarbage() --@v0
  l = load(1) l.work_1(n) l = nil collectgarbage() --@v1
  l = load(2) l.work_2(n) l = nil collectgarbage() --@v2
  l = load(3) l.work_3(n) l = nil collectgarbage() --@v3
  l = load(4) l.work_4(n) l = nil collectgarbage() --@v4
  l = load(5) l.work_5(n) l = nil collectgarbage() --@v5
  l = load(6) l.work_6(n) l = nil collectgarbage() --@v6
end
LUA
declare -A at
read_markers "$t/names.lua"

build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/names.folded" \
	-- luajit "$t/names.lua" "$t" 3 2000000 >"$t/record.out" 2>&1 ||
	{ echo "FAIL: record exited $?: $(tail -3 "$t/record.out")"; exit 1; }

# Per line of a library's call: "V right wrong", counting the samples in a work_* frame
# above that line (the innermost one of the script's lines on the stack).
for v in 0 1 2 3 4 5 6; do
	awk -v line="${at[v$v]}" -v v=$v '{ n = $NF; split($0, f, ";"); here = 0
		for (i = 1; i <= length(f); i++) {
			fr = f[i]; sub(/ [0-9]+$/, "", fr)
			if (fr ~ /\/names\.lua:[0-9]+$/) { here = fr ~ (":" line "$"); continue }
			if (here && fr ~ /^work_[0-9]$/) {
				if (fr == "work_" v) ok += n; else bad += n
				break
			}
		} } END { print v, ok + 0, bad + 0 }' "$t/names.folded"
done >"$t/lines"

while read -r v ok bad; do
	echo "line of libw$v: $ok samples named work_$v, $bad after another library"
	if [ $((ok + bad)) -lt 20 ]; then
		fail "libw$v's line has $((ok + bad)) samples in a work_* frame (at least 20 expected)"
	elif [ $((ok * 100)) -lt $(((ok + bad) * 75)) ]; then
		fail "libw$v's line: $ok of $((ok + bad)) samples named work_$v (75% expected)"
	fi
done <"$t/lines"

[ $fails -eq 0 ] && echo "PASS $name" && exit 0
echo "FAIL $name ($fails)"
exit 1
