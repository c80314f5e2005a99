#!/usr/bin/env bash
# CPU samples of a C module calling Lua back (lpeg's match running a capture function, a
# C library's callback) while the VM enters or leaves the Lua function: a module's
# each(n, f) calling f through lua_call, on Debian's luajit, 2 s at 1 kHz each.
#  - In the VM's state still C, before the callee's frame is linked or after it was
#    unlinked, the report took that VM code for the entry of the innermost Lua frames and
#    put the main chunk's line there, as called from inside the C function (3 % of an lpeg
#    loop with capture functions): the loop's line is never after each's frame now, and
#    such samples show the VM's code on top of each (its cost of calling Lua).
#  - The samples in the VM's entry from C right before it stores the callee's frame link
#    (vm_call_dispatch_f), and in its return to C while the results move down over a
#    builtin's slot (vm_returnc, after tonumber's fallback synced L->base), were dropped
#    (1.5 % and 1.3 % of these loops): at most 0.2 % dropped.
#  - The samples between the entry's first push and the link of its C frame, and between
#    the exit's unlink and its ret, were stepped past each's frame to the outer entry of
#    the interpreter, or cut (5 % of the loop): each as a Lua frame right after the
#    loop's line, no host frame of it. None now, and at most 0.2 % of the stacks cut
#    (the first samples in the module, before the agent has read its unwind table).
#  - The samples in the VM's return to C from tonumber's C fallback (its result over its
#    function slot, PC its frame link: 3.4 % of that loop had no Lua frame, 0.5 % were
#    dropped), and in the VM's call of a C function and its return to Lua around it
#    (17 % of a loop calling a trivial C function): none without a Lua frame in the
#    interpreter's loops now (at most 0.2 %), on Debian's luajit and OpenResty's luajit2
#    (when it can be fetched).
#  - A C function that reaches its C code by a tail call (luasocket's methods jump to their
#    buffer's), with no native frame of its own, was shown between the Lua line and the
#    interpreter, as if it had called back into Lua: after the interpreter now, on top of
#    the code it jumped to (each_tail's each).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof luaprof.so
luajit_dev "$t/apt.log" || skip "$why"
luajit2_fetch "$t/dl.log"
cc_test "$t/cbmod.so" tests/integration/cpu_cmod_callback.c -O2 -I"$inc" -fPIC -shared || exit 1

cat >"$t/lua.lua" <<'LUA'
local m = require "cbmod"
local function f(i) return i % 7 end
local t, s = os.clock(), 0
while os.clock() - t < 2 do s = s + m.each(10000, f) end
LUA
cat >"$t/tonum.lua" <<'LUA'
local m = require "cbmod"
local t, s = os.clock(), 0
while os.clock() - t < 2 do s = s + m.each(10000, tonumber, "1") end
LUA
cat >"$t/tail.lua" <<'LUA'
local m = require "cbmod"
local function f(i) return i % 7 end
local t, s = os.clock(), 0
while os.clock() - t < 2 do s = s + m.each_tail(10000, f) end
LUA
# A loop calling a C function that returns at once: the VM's call and return around it.
cat >"$t/cfun.lua" <<'LUA'
local m = require "cbmod"
local function f(i) return i end
local t, s = os.clock(), 0
while os.clock() - t < 2 do for i = 1, 1000 do s = s + m.each(0, f) end end
LUA
check() { # NAME SCRIPT JIT [INTERPRETER LIBDIR]
	local v=$1 script=$2 jit=$3 lj=${4:-luajit}
	(cd "$t" && LUA_CPATH="./?.so" LD_LIBRARY_PATH=${5:-} "$OLDPWD/build/luaprof" record -q \
		--rate 1000 --clock wall -f collapsed -o $v.folded --raw $v.bin -- "$lj" -j$jit \
		$script.lua) >"$t/$v.out" 2>&1 ||
		{ fail "$v: record exited $?: $(head -3 "$t/$v.out")"; return; }
	# Samples: all; with the loop's line (4 or 3) after each's frame; whole (from _start)
	# with each as a Lua frame right after that line (no host frame of it); with VM code
	# on top of each; cut short (not from _start); of the program's run (under lua_pcall)
	# with no Lua frame.
	local all inside skipped vm cut tbad tgood bare d
	read -r all inside skipped vm cut tbad tgood bare < <(awk '{ n = $NF; all += n; s = $0; sub(/ [0-9]+$/, "", s)
		if (s ~ /^_start;.*;lua_pcall;/ && s !~ /;[@=][^;]*:[0-9]+(;|$)/) bare += n
		k = index(s, ";each;"); if (k && substr(s, k) ~ /\.lua:[34](;|$)/) inside += n
		if (s !~ /^_start;/) cut += n
		else if (s ~ /\.lua:[34];each(;|$)/) skipped += n
		if (s ~ /;each;lj_vm_asm_begin$/) vm += n
		if (s ~ /;each_tail;lj_vm_asm_begin/) tbad += n
		if (s ~ /;lj_vm_asm_begin;each_tail;each(;|$)/) tgood += n }
		END { print all + 0, inside + 0, skipped + 0, vm + 0, cut + 0, tbad + 0, tgood + 0, bare + 0 }' \
		"$t/$v.folded")
	[ "$all" -ge 1500 ] || fail "$v: $all samples in 2 s at 1 kHz"
	build/luaprof report -f info "$t/$v.bin" >"$t/$v.info" 2>&1
	d=$(sed -n 's/^meta.dropped: \([0-9]*\)$/\1/p' "$t/$v.info")
	[ -n "$d" ] && [ "$d" -le $((all / 500)) ] || fail "$v: ${d:-?} of $all samples dropped"
	[ "$inside" -eq 0 ] || fail "$v: $inside of $all samples have the loop's line inside each:" \
		"$(grep -m1 ';each;.*\.lua:[34]' "$t/$v.folded")"
	[ "$skipped" -eq 0 ] || fail "$v: $skipped of $all samples have each with no host frame:" \
		"$(grep -m1 '\.lua:[34];each' "$t/$v.folded")"
	[ "$vm" -ge 1 ] || [ "$script" = cfun ] || fail "$v: no sample of each's calls in the VM's code, of $all"
	[ "$jit" = on ] || [ $((bare * 500)) -le "$all" ] ||
		fail "$v: $bare of $all samples have no Lua frame:" \
			"$(awk '/^_start;.*;lua_pcall;/ && !/;[@=][^;]*:[0-9]+( |;|$)/' "$t/$v.folded" | head -1)"
	# (Not the C function loop's: its few stacks cut short, 0-5 a run, are not this test's subject.)
	[ "$cut" -le $((all / 500)) ] || [ "$script" = cfun ] || fail "$v: $cut of $all stacks cut short:" \
		"$(grep -m1 -v '^_start;' "$t/$v.folded")"
	if [ "$script" = tail ]; then
		[ "$tbad" -eq 0 ] || fail "$v: $tbad of $all samples have each_tail before the VM's code:" \
			"$(grep -m1 ';each_tail;lj_vm_asm_begin' "$t/$v.folded")"
		[ "$tgood" -ge $((all / 10)) ] ||
			fail "$v: $tgood of $all samples have each_tail on top of the VM's code, in each"
		echo "$v: $tbad with each_tail before the VM's code, $tgood after it"
	fi
	echo "$v: $all samples, ${d:-?} dropped, $inside with the loop's line inside each," \
		"$skipped with each unwound past, $vm in the VM's code under each, $cut cut, $bare without a Lua frame"
}
check lua-jit-on lua on
check lua-jit-off lua off
check tonumber-jit-off tonum off
check tail-jit-off tail off
check cfun-jit-off cfun off
if [ -n "${lj2:-}" ] && [ -x "$lj2" ]; then
	check tonumber2-jit-off tonum off "$PWD/$lj2" "$PWD/$lj2lib"
	check cfun2-jit-off cfun off "$PWD/$lj2" "$PWD/$lj2lib"
fi
[ $fails -eq 0 ] || exit 1
echo "PASS $name"
