#!/usr/bin/env bash
# A real program scripted in LuaJIT: dnsjit (Debian's package, on Debian's
# libluajit-5.1.so), which blocks every signal on the thread that runs its script (another
# thread waits for SIGINT and SIGTERM). dnsjit/profile.lua reads a pcap of DNS queries
# through dnsjit's modules (its C code through the FFI, its embedded Lua) and profiles
# itself through the API, as README.md says for a host:
#   - cpu: the CPU profiler (C mode, 1 kHz) starts, samples the script under dnsjit's
#     lua_pcall, and leaves the thread's signal mask as it was. It refused to start ("no
#     free real-time signal for the sampling timer": every one was blocked).
#   - exact and sampled: the memory profilers, their allocations in the script's calls.
#   - record: `luaprof record -- dnsjit` says dnsjit never loaded the agent (no LUA_INIT).
# Every run prints what the unprofiled one does and exits 0. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof luaprof.so
have dnsjit || skip "dnsjit is not installed (scripts/setup.sh --test)"
src=$PWD/tests/integration/dnsjit/profile.lua
declare -A at
read_markers "$src"
export LUAPROF_CPATH="$PWD/build/?.so"
passes=6

dnsjit "$src" gen "$t/q.pcap" 20000 || { fail "dnsjit could not write the pcap"; exit 1; }
dnsjit "$src" run "$t/q.pcap" none - $passes >"$t/none.out" 2>"$t/none.err" ||
	{ fail "dnsjit failed unprofiled: $(tail -n 3 "$t/none.err")"; exit 1; }
grep -qx "queries	$((passes * 20000))	distinct	20000" "$t/none.out" ||
	{ fail "dnsjit unprofiled printed $(cat "$t/none.out")"; exit 1; }

run() { # run MODE: dnsjit exits 0, prints what it does unprofiled, and the mask is kept
	dnsjit "$src" run "$t/q.pcap" "$1" "$t/$1.bin" $passes >"$t/$1.out" 2>"$t/$1.err" ||
		{ fail "$1: dnsjit failed (status $?): $(tail -n 3 "$t/$1.err")"; return 1; }
	cmp -s "$t/none.out" "$t/$1.out" || fail "$1: dnsjit printed $(cat "$t/$1.out")"
	local before after
	before=$(sed -n 's/^sigblk before //p' "$t/$1.err")
	after=$(sed -n 's/^sigblk after //p' "$t/$1.err")
	[ -n "$before" ] && [ "$before" = "$after" ] ||
		fail "$1: the thread's blocked signals were $before before the start, $after after the stop"
	build/luaprof report -q -f info "$t/$1.bin" 2>/dev/null | grep -qx "complete: yes" ||
		{ fail "$1: not a complete profile"; return 1; }
}
# shape FOLDED: "total one-root under-pcall lua pass work": the weight of all stacks, of
# those with the most common root, of those with a frame of the script that have dnsjit's
# lua_pcall before it, of those with such a frame, of those at the pass loop's line, and of
# those in its work: dns:parse or count_name's call of tooffstr.
shape() {
	awk -v src="@$src:" -v p="@$src:${at[pass]};" -v nm="@$src:${at[name]};" \
		-v pa="@$src:${at[parse]};" '{
		v = $NF; tot += v; split($0, f, ";"); root[f[1]] += v
		i = index($0, src)
		if (i) { lua += v; if (index(substr($0, 1, i), ";main;lua_pcall;")) under += v }
		if (index($0, p)) P += v
		if (index($0, nm) || index($0, pa)) N += v
	} END { for (r in root) if (root[r] > top) top = root[r]
		printf "%d %d %d %d %d %d\n", tot, top, under, lua, P, N }' "$1"
}

# -- CPU ----------------------------------------------------------------------------------
if run cpu; then
	grep -q "fffff" <(sed -n 's/^sigblk before //p' "$t/cpu.err") ||
		echo "note: dnsjit no longer blocks every signal on its script's thread"
	build/luaprof report -q -f collapsed -o "$t/cpu.folded" "$t/cpu.bin"
	read -r tot top under lua p nm < <(shape "$t/cpu.folded")
	[ "$tot" -ge 50 ] || fail "CPU: $tot samples, want at least 50"
	[ $((tot - top)) -le $((tot / 50 > 1 ? tot / 50 : 1)) ] || fail "CPU: $((tot - top)) of $tot samples under another root:
$(cut -d';' -f1 "$t/cpu.folded" | sort | uniq -c | sort -rn | head -n 3)"
	[ "$under" = "$lua" ] || fail "CPU: $((lua - under)) of $lua samples of the script not under main;lua_pcall"
	[ $((p * 10)) -ge $((tot * 8)) ] || fail "CPU: $p of $tot samples under the pass loop (line ${at[pass]}), want 80%"
	[ $((nm * 2)) -ge "$tot" ] || fail "CPU: $nm of $tot samples in dns:parse or tooffstr (lines ${at[parse]}, ${at[name]}), want half"
	echo "ok CPU: $tot samples, $top under one root, $lua in the script under lua_pcall, $p under the pass loop, $nm in dns:parse and tooffstr"
fi

# -- Exact memory ---------------------------------------------------------------------------
if run exact; then
	build/luaprof report -q -f memprof -o "$t/exact.txt" "$t/exact.bin"
	# Allocations by the script's lines and the traces that start in it or in dnsjit's
	# Lua (@core/...): nearly all of them, with the name strings of count_name.
	read -r all lua < <(awk '/^ALLOCATIONS/ { on = 1; next } /^$/ { on = 0 }
		on { n = $0; sub(/.*: /, "", n); n += 0; all += n; if (index($0, "@")) lua += n }
		END { printf "%d %d\n", all, lua }' "$t/exact.txt")
	[ "$all" -ge $((passes * 20000)) ] || fail "memory, exact: $all allocations, want one a query at least"
	[ $((lua * 10)) -ge $((all * 9)) ] || fail "memory, exact: $lua of $all allocations by Lua code, want 90%:
$(head -n 6 "$t/exact.txt")"
	echo "ok memory, exact: $all allocations, $lua by Lua lines and traces"
fi

# -- Sampled memory -----------------------------------------------------------------------
if run sampled; then
	build/luaprof report -q -f collapsed -o "$t/sampled.folded" "$t/sampled.bin"
	read -r tot top under lua p nm < <(shape "$t/sampled.folded")
	nsmp=$(build/luaprof report -q -f info "$t/sampled.bin" | awk -F': ' '$1 == "samples" { print $2 + 0 }')
	[ "${nsmp:-0}" -ge 50 ] || fail "memory, sampled: ${nsmp:-0} samples, want at least 50"
	# 2 %: a module's chunk parsed by require can be placed above the root (README).
	[ $((tot - top)) -le $((tot / 50)) ] || fail "memory, sampled: $((tot - top)) of $tot bytes under another root"
	[ $((p * 10)) -ge $((tot * 9)) ] || fail "memory, sampled: $p of $tot bytes under the pass loop, want 90%"
	[ $((nm * 10)) -ge $((tot * 8)) ] || fail "memory, sampled: $nm of $tot bytes in dns:parse or tooffstr, want 80%"
	echo "ok memory, sampled: $nsmp samples, $((p * 100 / (tot > 0 ? tot : 1)))% of bytes under the pass loop, $((nm * 100 / (tot > 0 ? tot : 1)))% in dns:parse and tooffstr"
fi

# -- record -----------------------------------------------------------------------------------
build/luaprof record -q -o "$t/rec.svg" -- dnsjit "$src" run "$t/q.pcap" none - 1 >"$t/rec.out" 2>"$t/rec.err"
rc=$?
[ $rc = 1 ] || fail "record: status $rc, want 1 (no profile)"
grep -q "dnsjit wrote no profile: it never loaded the agent" "$t/rec.err" ||
	fail "record: no word of the agent not loaded: $(cat "$t/rec.err")"
grep -qx "queries	20000	distinct	20000" "$t/rec.out" || fail "record: dnsjit printed $(cat "$t/rec.out")"
[ ! -e "$t/rec.svg" ] && [ ! -e "$t/rec.bin" ] || fail "record: wrote a profile anyway"

[ $fails -eq 0 ] || exit 1
echo "PASS $name"
