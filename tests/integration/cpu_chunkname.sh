#!/usr/bin/env bash
# CPU profiles name a function by its chunk's name whole (a sample's new names share 64 KiB,
# a name that does not fit waits for a later sample), as memory profiles do: the sampler
# cut names at 511 bytes, so a path of 600 bytes lost its end (two files in one deep
# directory were one function). Four functions on one stack whose names take 30 KiB each
# and one 70 KiB (more than a sample's room) are all named, and no sample is dropped.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init

need_x86_64
need_build luaprof luaprof.so
have luajit || skip "no luajit"

# A loop in a chunk named by a 600-byte path ending in "tail.lua".
cat >"$t/path.lua" <<'LUA'
local path = "@" .. string.rep("d/", 296) .. "tail.lua"
assert(load("local t = os.clock() while os.clock() - t < 0.4 do local s = 0 " ..
	"for i = 1, 1e5 do s = s + i end end", path))()
LUA
# Functions calling each other from chunks with long names: three of 30 KiB (two fit in a
# sample's room, the third waits) and one of 70 KiB (cut at the room). The innermost's loop,
# where the time goes, is its chunk's line 2; the others are one line each.
cat >"$t/deep.lua" <<'LUA'
local function chunk(tag, body)
	return assert(load(body, "@" .. string.rep("p/", 15000) .. tag .. ".lua"))
end
local f3 = chunk("three", "return function() local s = 0\nfor i = 1, 2e5 do s = s + i % 3 end\nreturn s end")()
local f2 = chunk("two", "local f = ... return function() return f() + 1 end")(f3)
local f1 = chunk("one", "local f = ... return function() return f() + 1 end")(f2)
local huge = assert(load("local f = ... return function() return f() + 1 end",
	"@" .. string.rep("h", 70000)))(f1)
local t = os.clock()
while os.clock() - t < 0.4 do huge() end
LUA
for s in path deep; do
	(cd "$t" && "$OLDPWD/build/luaprof" record -q -f collapsed -o $s.folded -- luajit -joff $s.lua) \
		>"$t/$s.out" 2>&1 || fail "record $s.lua exited $?: $(head -3 "$t/$s.out")"
done
[ -s "$t/path.folded" ] && [ -s "$t/deep.folded" ] || { echo "FAIL: no profile"; exit 1; }

n=$(grep -c 'd/d/tail\.lua:1 ' "$t/path.folded")
[ "$n" -ge 1 ] || fail "the 600-byte path lost its end: $(grep -o '.\{20\}:1 [0-9]*$' "$t/path.folded" | head -2)"

! grep -q 'unknown function' "$t/deep.folded" ||
	fail "a function left unnamed: $(grep -o '\[unknown function[^;]*' "$t/deep.folded" | sort -u | head -3)"
# The samples in the innermost function's lines 2-3 (its loop and return; the folded names
# are cut at 4 KiB, the line kept) all go through the four long-named frames: the 70 KiB
# name shown cut (4 KiB), the others too. Samples elsewhere are real and may have fewer
# (5 runs in 120 failed on one, 100 Hz): in the loop's line 10 itself (its bytecodes,
# os.clock and its system call), in the outer three's `return f() + 1` after the call
# returned (PC in their own bytecode, BASE their frame), and in lua_close. (The agent's
# scan of C functions' names before it stops is no longer sampled: cpu_cnames_scan.sh.)
n=$(awk '{ k = $NF; sub(/ [0-9]+$/, ""); m = split($0, f, ";") }
	f[m] !~ /^@p\/.*:[23]$/ { next }
	{ c = gsub(/;@(p\/)+/, "&"); h = gsub(/;@hhhh+/, "&"); if (c == 3 && h == 1) n += k; all += k }
	END { print n + 0, all + 0 }' "$t/deep.folded")
total=${n#* } n=${n% *}
[ "$n" -ge 20 ] && [ "$n" = "$total" ] ||
	fail "samples in the innermost loop through the four long-named frames: $n of $total"
build/luaprof report "$t/deep.bin" -f top -n 1 >"$t/top" 2>&1 || fail "report exited $?"
grep -q 'Dropped: 0$' "$t/top" || fail "samples dropped: $(head -1 "$t/top")"

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
