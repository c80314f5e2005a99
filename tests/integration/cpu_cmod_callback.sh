#!/usr/bin/env bash
# CPU samples of a C module calling Lua back (lpeg's match running a capture function, a
# C library's callback) keep the program's Lua frames outside the C function. While the
# VM enters the Lua function (lua_call, before the callee's frame is linked) or leaves it
# (after it was unlinked), in the VM's state still C, the report took that VM code for the
# entry of the innermost Lua frames and put the main chunk's line there, as called from
# inside the C function (3 % of an lpeg loop with capture functions; here, a module's
# each(n, f) calling f through lua_call). Debian's luajit, JIT on and off, 2 s at 1 kHz:
# the loop's line never after the module's frame, and some samples in the VM's code
# there, shown on top of the C function (its cost of calling Lua).
# And the samples taken in the VM's entry from C right before it stores the callee's frame
# link (vm_call_dispatch_f) are the callee's at its first line, as inside a Lua call:
# they were dropped (1.5 % of this loop, JIT off). At most 0.2 % dropped.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/integration/lib/luajit.sh
name=cpu_cmod_callback
t=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX") || exit 1
trap 'rm -rf "$t"' EXIT
trap 'exit 1' HUP INT TERM
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skip() { echo "SKIP $name: $*"; exit 2; }

[ "$(uname -m)" = x86_64 ] || skip "needs x86_64 (got $(uname -m))"
[ -x build/luaprof ] && [ -f build/luaprof.so ] || { echo "build/ is incomplete (run make)"; exit 1; }
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/cbmod.so" tests/integration/cpu_cmod_callback.c -O2 -I"$inc" -fPIC -shared || exit 1

cat >"$t/cb.lua" <<'LUA'
local m = require "cbmod"
local function f(i) return i % 7 end
local t, s = os.clock(), 0
while os.clock() - t < 2 do s = s + m.each(10000, f) end
LUA
for jit in on off; do
	(cd "$t" && LUA_CPATH="./?.so" "$OLDPWD/build/luaprof" record -q --rate 1000 --clock wall \
		-f collapsed -o $jit.folded --raw $jit.bin -- luajit -j$jit cb.lua) >"$t/$jit.out" 2>&1 ||
		{ fail "jit $jit: record exited $?: $(head -3 "$t/$jit.out")"; continue; }
	# Samples: all, with the loop's line (4) after the module's `each`, with each's
	# frame then VM code on top.
	read -r all inside vm < <(awk '{ n = $NF; all += n; s = $0; sub(/ [0-9]+$/, "", s)
		k = index(s, ";each;"); if (k && index(substr(s, k), "cb.lua:4")) inside += n
		if (s ~ /;each;lj_vm_asm_begin$/) vm += n }
		END { print all + 0, inside + 0, vm + 0 }' "$t/$jit.folded")
	[ "$all" -ge 1500 ] || fail "jit $jit: $all samples in 2 s at 1 kHz"
	build/luaprof report -f info "$t/$jit.bin" >"$t/$jit.info" 2>&1
	d=$(sed -n 's/^meta.dropped: \([0-9]*\)$/\1/p' "$t/$jit.info")
	[ -n "$d" ] && [ "$d" -le $((all / 500)) ] || fail "jit $jit: ${d:-?} of $all samples dropped"
	[ "$inside" -eq 0 ] ||
		fail "jit $jit: $inside of $all samples have the loop's line inside each: $(grep -m1 ';each;.*cb.lua:4' "$t/$jit.folded")"
	[ "$vm" -ge 1 ] || fail "jit $jit: no sample of each's calls in the VM's code, of $all"
	echo "jit $jit: $all samples, ${d:-?} dropped, $inside with the loop's line inside each, $vm in the VM's code under each"
done
[ $fails -eq 0 ] || exit 1
echo "PASS $name"
