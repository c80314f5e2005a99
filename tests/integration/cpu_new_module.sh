#!/usr/bin/env bash
# C modules required while the CPU profiler samples (C mode), each calling its C function at
# once: the first samples in a module came before the profiler's writer thread had read the
# objects again, and their host stacks were cut at the module's frame (said to be cut, the
# frames below it lost: one to three samples a module, 39-44 of 40 modules' first ones). The
# handler finds such code through the loader's lock-free lookup (_dl_find_object) and walks
# on by the module's unwind table.
#  40 copies of one module (m1-burn.so ... m40-burn.so: `require "mK-burn"` opens
#  luaopen_burn), each required and its burn(20) run for 20 ms of CPU time; at 1 kHz and at
#  4 kHz. No sample may have a stack cut short (meta.truncated, written by the agent), and
#  most modules' burn must be in the profile under its own file (not a vacuous pass).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof luaprof.so
luajit_dev "$t/apt.log" || skip "$why"
# _dl_find_object came with glibc 2.35: before it, such samples are still cut.
v=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
case $v in 2.[0-9] | 2.[0-2][0-9] | 2.3[0-4] | "") skip "glibc ${v:-unknown} has no _dl_find_object (2.35+)" ;; esac

mkdir -p "$t/c"
cc_test "$t/burn.so" tests/integration/$name.c -O2 -fPIC -shared -I"$inc" || exit 1
for k in $(seq 1 40); do cp "$t/burn.so" "$t/c/m$k-burn.so"; done
cat >"$t/run.lua" <<'LUA'
package.cpath = "./c/?.so"
for k = 1, 40 do require("m" .. k .. "-burn").burn(20) end
LUA

for rate in 1000 4000; do
	(cd "$t" && "$OLDPWD/build/luaprof" record -q --rate $rate -f collapsed -o r$rate.folded \
		--raw r$rate.bin -- luajit run.lua) >"$t/r$rate.out" 2>&1 ||
		{ fail "$rate Hz: record exited $?: $(head -3 "$t/r$rate.out")"; continue; }
	cut=$(build/luaprof report "$t/r$rate.bin" -f info 2>/dev/null |
		awk -F': ' '$1 == "meta.truncated" { print $2 }')
	mods=$(build/luaprof report "$t/r$rate.bin" -f top -n 200 2>/dev/null |
		grep -c ' burn (m[0-9]*-burn\.so)$')
	samples=$(awk '/;burn( |;)/ { n += $NF } END { print n + 0 }' "$t/r$rate.folded")
	if [ -z "$cut" ]; then
		fail "$rate Hz: no meta.truncated in the stream"
	elif [ "$cut" -ne 0 ]; then
		fail "$rate Hz: $cut samples with stacks cut short, want 0: $(grep -v '^_start' \
			"$t/r$rate.folded" | head -2 | tr '\n' '|')"
	fi
	[ "$mods" -ge 35 ] || fail "$rate Hz: burn named in $mods modules of 40, want 35+"
	echo "$rate Hz: ${cut:-?} cut, $samples samples in burn, named in $mods modules of 40"
done

[ "$fails" = 0 ] && echo "PASS $name" || exit 1
