#!/usr/bin/env bash
# Sampled memory profiles of a program that loads code again and again (a template engine):
# prototype addresses are reused by other functions all the time, and sampled stacks are
# resolved after the whole stream, so the agent gives each function met again at a reused
# address a key of its own. That key was the address with a 16-bit generation: after 65,536
# reuses keys repeated, and stacks were named after another chunk that had the same key
# (1.1 % of this program's bytes: 100,000 chunks at about 110 addresses). Chunk K (first
# line "-- c K", then 10*(K%7) empty lines) allocates at lines 2..4 of its block: every
# frame of a chunk must be in its own block. Debian's luajit, then OpenResty's luajit2 when
# it can be had.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof.so luaprof
have luajit || skip "no luajit"

cat >"$t/churn.lua" <<'LUA'
local load = loadstring or load
local keep
for k = 1, tonumber(arg[1]) do
  local f = assert(load("-- c " .. k .. "\n" .. string.rep("\n", 10 * (k % 7)) ..
    "return function()\n" ..
    "  local t = {} for i = 1, 64 do t[i] = i end return t\n" ..
    "end\n"))()
  keep = f()
  f = nil
  collectgarbage()
end
LUA

# check FOLDED: bytes in frames of a chunk inside / outside its own block.
check() {
	awk '{ n = $NF; s = $0
		while (match(s, /\[string "-- c [0-9]+\.\.\."\]:[0-9]+/)) {
			fr = substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
			k = fr; sub(/^\[string "-- c /, "", k); sub(/\..*/, "", k)
			l = fr; sub(/.*:/, "", l); d = l - 10 * (k % 7)
			if (d >= 2 && d <= 4) ok += n; else bad += n
		} } END { print ok + 0, bad + 0 }' "$1"
}

run() { # LABEL LUAJIT [env...]
	local label=$1 lj=$2
	build/luaprof record -q --memory --sample 1K -f collapsed -o "$t/$label.folded" \
		-- "$lj" "$t/churn.lua" 100000 >"$t/$label.out" 2>&1 ||
		{ fail "$label: record failed: $(tail -n 2 "$t/$label.out")"; return; }
	read -r ok bad < <(check "$t/$label.folded")
	[ "$ok" -gt 0 ] || fail "$label: no sampled allocation in the chunks"
	[ "$bad" -eq 0 ] || fail "$label: $bad bytes charged to a chunk whose block they are not in"
	echo "$label: $ok bytes in the chunks' own blocks, $bad elsewhere"
}

run luajit luajit
if luajit2_fetch "$t/dl.log"; then
	LD_LIBRARY_PATH=$lj2lib run luajit2 "$PWD/$lj2"
else
	echo "note: luajit2 not checked (apt-get download luajit2 failed: $(tail -n 1 "$t/dl.log" 2>/dev/null))"
fi

[ $fails -eq 0 ] && echo "PASS $name" && exit 0
echo "FAIL $name ($fails)"
exit 1
