#!/usr/bin/env bash
# A real C++ host: minetest's dedicated server (Debian's minetest-server, on Debian's
# libluajit-5.1.so), running the devtest game and a trusted mod (minetest/lpprof) that
# profiles itself through the API. minetest loads mods on its main thread and runs their
# globalsteps on its server thread; the mod starts the profile in its first globalstep,
# where its Lua code runs, and each step carves the map through a VoxelManip (C++ that
# reads and writes the map and builds a Lua table of its nodes) and builds strings:
#   - cpu: the globalstep's Lua frames under minetest's lua_pcall on the server thread,
#     with minetest's C++ frames on top of the calls into it;
#   - sampled: the bytes of VoxelManip:get_data's table under that line, in minetest's C++
#     code, and the strings' under their line;
#   - exact: every string, and minetest's C++ code among the allocating functions;
#   - term: SIGTERM while a CPU profile runs: minetest shuts down (status 0), the profile
#     is complete.
# Every run prints what the unprofiled one does and exits 0. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof luaprof.so
server=/usr/games/minetestserver
[ -x $server ] || skip "minetest-server is not installed (scripts/setup.sh --test)"
game=/usr/share/games/minetest/games/devtest
[ -f $game/game.conf ] || skip "minetest's devtest game is not installed (minetest-data)"
src=$PWD/tests/integration/minetest/lpprof/init.lua
declare -A at
read_markers "$src"
steps=24
mkdir -p "$t/world" "$t/home"
printf 'gameid = devtest\nbackend = sqlite3\nload_mod_lpprof = true\n' >"$t/world/world.mt"
printf 'secure.trusted_mods = lpprof\nserver_announce = false\ndedicated_server_step = 0.02\n' \
	>"$t/minetest.conf"
port=$((30000 + $$ % 20000))
export LUAPROF_CPATH="$PWD/build/?.so" MINETEST_MOD_PATH=$PWD/tests/integration/minetest HOME=$t/home

serve() { # serve MODE [STEPS]: the server, in the foreground, its log in $t/MODE.log
	MODE=$1 OUT=$t/$1.bin STEPS=${2:-$steps} timeout 120 $server --world "$t/world" \
		--config "$t/minetest.conf" --port $port --quiet >"$t/$1.log" 2>&1
}
complete() { # complete FILE: the file is whole
	build/luaprof report -q -f info "$1" 2>/dev/null | grep -qx "complete: yes" ||
		{ fail "$(basename "$1"): not a complete profile"; return 1; }
}
run() { # run MODE: the server exits 0 and prints what it does unprofiled
	serve "$1" || { fail "$1: minetestserver failed (status $?): $(tail -n 3 "$t/$1.log")"; return 1; }
	grep -x "lpprof: .*" "$t/$1.log" >"$t/$1.out"
	cmp -s "$t/none.out" "$t/$1.out" || fail "$1: the mod printed '$(cat "$t/$1.out")'"
	complete "$t/$1.bin"
}

serve none || { fail "minetestserver failed unprofiled (status $?): $(tail -n 3 "$t/none.log")"; exit 1; }
grep -x "lpprof: $steps steps, [0-9]* nodes" "$t/none.log" >"$t/none.out" ||
	{ fail "the mod printed nothing unprofiled: $(tail -n 3 "$t/none.log")"; exit 1; }

# shape FOLDED: "total one-root under-pcall lua carve cxx strings getdata": the weight of
# all stacks, of those with the most common root, of those with a frame of the mod that
# have lua_pcall before it, of those with such a frame, of those under the globalstep's
# call of carve, of those with minetest's C++ on top of carve's lines, and of those at the
# strings' line and at get_data's line (with minetest's C++ on top).
shape() {
	awk -v src="@$src:" -v c="@$src:${at[carve]};" -v s="@$src:${at[strings]}" \
		-v g="@$src:${at[get_data]};lj_vm_asm_begin;minetestserver+" \
		-v w="@$src:${at[write]};lj_vm_asm_begin;minetestserver+" '{
		v = $NF; tot += v; split($0, f, ";"); root[f[1]] += v
		i = index($0, src)
		if (i) { lua += v; if (index(substr($0, 1, i), ";lua_pcall;")) under += v }
		if (index($0, c)) C += v
		if (index($0, g) || index($0, w)) X += v
		if (index($0, s)) S += v
		if (index($0, g)) G += v
	} END { for (r in root) if (root[r] > top) top = root[r]
		printf "%d %d %d %d %d %d %d %d\n", tot, top, under, lua, C, X, S, G }' "$1"
}

# -- CPU ------------------------------------------------------------------------------------
if run cpu; then
	build/luaprof report -q -f collapsed -o "$t/cpu.folded" "$t/cpu.bin"
	read -r tot top under lua c x s g < <(shape "$t/cpu.folded")
	[ "$tot" -ge 50 ] || fail "CPU: $tot samples, want at least 50"
	[ $((tot - top)) -le $((tot / 50 > 1 ? tot / 50 : 1)) ] || fail "CPU: $((tot - top)) of $tot samples under another root:
$(cut -d';' -f1 "$t/cpu.folded" | sort | uniq -c | sort -rn | head -n 3)"
	[ "$under" = "$lua" ] || fail "CPU: $((lua - under)) of $lua samples of the mod not under lua_pcall"
	[ $((c * 2)) -ge "$tot" ] || fail "CPU: $c of $tot samples under the call of carve (line ${at[carve]}), want half"
	[ $((x * 10)) -ge $((tot * 3)) ] || fail "CPU: $x of $tot samples in minetest's C++ under get_data or write_to_map, want 30%"
	echo "ok CPU: $tot samples, $top under one root, $lua in the mod under lua_pcall, $c under carve, $x in the VoxelManip's C++"
fi

# -- Sampled memory ---------------------------------------------------------------------------
if run sampled; then
	build/luaprof report -q -f collapsed -o "$t/sampled.folded" "$t/sampled.bin"
	read -r tot top under lua c x s g < <(shape "$t/sampled.folded")
	nsmp=$(build/luaprof report -q -f info "$t/sampled.bin" | awk -F': ' '$1 == "samples" { print $2 + 0 }')
	[ "${nsmp:-0}" -ge 50 ] || fail "memory, sampled: ${nsmp:-0} samples, want at least 50"
	[ "$top" = "$tot" ] || fail "memory, sampled: $((tot - top)) of $tot bytes under another root"
	[ "$under" = "$lua" ] || fail "memory, sampled: $((lua - under)) of $lua bytes of the mod not under lua_pcall"
	[ $((g * 10)) -ge $((tot * 3)) ] || fail "memory, sampled: $g of $tot bytes in minetest's C++ under get_data (line ${at[get_data]}), want 30%"
	[ $((s * 10)) -ge $((tot * 1)) ] || fail "memory, sampled: $s of $tot bytes at the strings' line ${at[strings]}, want 10%"
	[ $(((g + s) * 10)) -ge $((tot * 8)) ] || fail "memory, sampled: $((g + s)) of $tot bytes in get_data and the strings, want 80%"
	echo "ok memory, sampled: $nsmp samples, one root, $((g * 100 / (tot > 0 ? tot : 1)))% of bytes in get_data's C++, $((s * 100 / (tot > 0 ? tot : 1)))% in the strings"
fi

# -- Exact memory -----------------------------------------------------------------------------
if run exact; then
	build/luaprof report -q -f memprof -o "$t/exact.txt" "$t/exact.bin"
	read -r strs cxx < <(awk -v src="@$src:" -v s="${at[strings]}" '
		/^ALLOCATIONS/ { on = 1; next } /^$/ { on = 0 }
		on && index($0, src) {
			line = substr($0, index($0, src) + length(src)); sub(/:.*/, "", line)
			n = $0; sub(/.*: /, "", n); n += 0
			if (line >= s - 2 && line <= s) S += n
		}
		on && /^minetestserver\+0x[0-9a-f]*: / { n = $0; sub(/.*: /, "", n); X += n + 0 }
		END { printf "%d %d\n", S, X }' "$t/exact.txt")
	[ "$strs" -ge $((steps * 4 * 2000)) ] || fail "memory, exact: $strs allocations at the strings' line, want one a string:
$(head -n 8 "$t/exact.txt")"
	[ "$cxx" -ge $((steps * 4)) ] || fail "memory, exact: $cxx allocations by minetest's C++ code, want one a get_data at least"
	echo "ok memory, exact: $strs allocations at the strings' line, $cxx by minetest's C++"
fi

# -- SIGTERM while profiling --------------------------------------------------------------------
MODE=cpu OUT=$t/term.bin STEPS=0 $server --world "$t/world" --config "$t/minetest.conf" \
	--port $port --quiet >"$t/term.log" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -e "$t/term.bin.started" ] && break; sleep 0.1; done
sleep 0.5
kill -TERM $pid 2>/dev/null
# minetest shuts down on SIGTERM; a hang is killed after 30 s (and fails).
for _ in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -KILL $pid 2>/dev/null
wait $pid
rc=$?
if [ ! -e "$t/term.bin.started" ]; then
	fail "term: the profile never started: $(tail -n 3 "$t/term.log")"
else
	[ $rc = 0 ] || fail "term: minetestserver exited with status $rc after SIGTERM: $(tail -n 3 "$t/term.log")"
	complete "$t/term.bin" &&
		echo "ok term: $(build/luaprof report -q -f info "$t/term.bin" | awk -F': ' '$1 == "samples" { print $2 }') samples, stopped by $(build/luaprof report -q -f info "$t/term.bin" | awk -F': ' '$1 == "meta.stopped_by" { print $2 }')"
fi

[ $fails -eq 0 ] || exit 1
echo "PASS $name"
