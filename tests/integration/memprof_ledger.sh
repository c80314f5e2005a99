#!/usr/bin/env bash
# Exact mode records every allocation, reallocation and free (issue 4's contract), on a
# mixed workload (memprof_ledger.lua: tables grown, strings, closures, coroutines, load,
# errors, FFI cdata and finalizers, userdata finalizers that allocate, traces and their
# exits, forced and stepped collections): memprof_ledger.c replays the stream as a ledger
# of blocks, where a missed free shows as a block made over a live one, and a missed or
# misreported allocation as an address freed twice or a free whose size disagrees. No fault may show, JIT on and off, with Debian's luajit and
# OpenResty's luajit2, through the Lua API (records encoded on the writer thread) and the
# C API with the host's writer (encoded in the wrapper, memprof_ledger_host.c).
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

have luajit || skip "luajit is not installed (apt-get install luajit)"
need_build luaprof.so libluaprof.a
cc_test "$t/ledger" tests/integration/memprof_ledger.c -O2 -Iinclude -Isrc \
	build/libluaprof.a -lm || exit 1
src=tests/integration/memprof_ledger.lua

# check WHAT STREAM: the ledger has no fault, and the workload's events are all there (JIT
# on, allocation sinking leaves about a quarter of them).
check() {
	local what=$1 f=$2 line
	line=$("$t/ledger" "$f" 2>&1)
	local rc=$?
	echo "$what: $line"
	[ $rc = 0 ] || { fail "$what: $line"; return; }
	read -r _ events _ allocs _ reallocs _ frees _ older _ < <(echo "$line")
	[ "$events" -gt 500000 ] && [ "$allocs" -gt 200000 ] && [ "$reallocs" -gt 50000 ] &&
		[ "$frees" -gt 200000 ] || fail "$what: too few events: $line"
	# Blocks from before the profile that it frees: the state's and the chunk's own (15
	# to 90); many more would be allocations the stream missed.
	[ "$older" -lt 1000 ] || fail "$what: $older frees of blocks the stream never made: $line"
}

runners=(luajit)
luajit2_fetch "$t/dl.log" && runners+=(luajit2)
for runner in "${runners[@]}"; do
	for jit in on off; do
		f=$t/$runner-$jit.bin
		if [ $runner = luajit ]; then
			LUA_CPATH= luajit $src "$f" $jit >"$t/out" 2>&1
		else
			LD_LIBRARY_PATH=$lj2lib LUA_CPATH= $lj2 $src "$f" $jit >"$t/out" 2>&1
		fi && grep -q '^ran	true$' "$t/out" ||
			{ fail "$runner, JIT $jit: workload failed: $(head -5 "$t/out")"; continue; }
		check "$runner, JIT $jit" "$f"
	done
done

if luajit_dev "$t/apt.log"; then
	cc_test "$t/host" tests/integration/memprof_ledger_host.c -O1 -Iinclude -I$inc \
		-Lbuild -l:luaprof.so -Wl,-rpath,"$PWD/build" -lluajit-5.1 || exit 1
	for jit in on off; do
		f=$t/host-$jit.bin
		"$t/host" $src "$f" $jit >"$t/out" 2>&1 && grep -q '^ran	true$' "$t/out" ||
			{ fail "host, JIT $jit: $(head -5 "$t/out")"; continue; }
		[ "$(build/luaprof report -q -f info "$f" | sed -n 's/^meta.encoded_on: //p')" = \
			"profiled thread" ] || fail "host, JIT $jit: events not encoded in the wrapper"
		check "C API host, JIT $jit" "$f"
	done
else
	echo "skipped the C API host: $why"
fi

[ $fails = 0 ] || exit 1
echo "ok"
