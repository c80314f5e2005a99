#!/usr/bin/env bash
# A real multi-threaded host: sysbench (Debian's package, on Debian's libluajit-5.1.so),
# whose worker threads each run their own LuaJIT VM on a 64 KiB stack. Thread 0 profiles
# its VM from the script (sysbench/profile.lua) while thread 1 runs other code unprofiled:
#   - run 1: the CPU profiler (C mode) and the sampled memory profiler together;
#   - run 2: the exact memory profiler.
# Checks: sysbench exits 0; the profiles are complete, with enough samples or events;
# every stack has the same root (the thread's start) and the script's Lua frames under
# the lua_pcall that sysbench runs them with; thread 0's function holds the time, the
# sampled bytes and the allocations, and thread 1's never appears.
# Found: a capture inside a trace read a snapshot's frame constant that was no function
# (an integer, 22) as an object, and stop built a 60 KiB record on the thread's stack:
# both killed sysbench with SIGSEGV. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof luaprof.so
have sysbench || skip "sysbench is not installed (scripts/setup.sh --test)"
src=$PWD/tests/integration/sysbench/profile.lua
declare -A at
read_markers "$src"
export LUAPROF_CPATH="$PWD/build/?.so" OUT=$t

run() { # run MODE
	(cd "$t" && MODE=$1 sysbench --threads=2 --time=1 "$src" run) >"$t/$1.out" 2>&1 ||
		{ fail "$1: sysbench failed (status $?): $(tail -n 3 "$t/$1.out")"; return 1; }
}
complete() { # complete FILE: the file is whole
	build/luaprof report -q -f info "$1" 2>/dev/null | grep -qx "complete: yes" ||
		{ fail "$(basename "$1"): not a complete profile"; return 1; }
}
# shape FOLDED: "total one-root under-pcall lua a b": the weight of all stacks, of those
# with the most common root, of those with a script frame that have lua_pcall before it,
# of those with a script frame, and of those on work_a's and work_b's lines.
shape() {
	awk -v src="@$src:" -v a="@$src:${at[a]}" -v b="@$src:${at[b]}" '{
		v = $NF; tot += v; split($0, f, ";"); root[f[1]] += v
		i = index($0, src)
		if (i) { lua += v; if (index(substr($0, 1, i), ";lua_pcall;")) under += v }
		if (index($0, a)) A += v
		if (index($0, b)) B += v
	} END { for (r in root) if (root[r] > top) top = root[r]
		printf "%d %d %d %d %d %d\n", tot, top, under, lua, A, B }' "$1"
}

# -- Run 1: CPU and sampled memory --------------------------------------------------------
if run cpu+sampled && complete "$t/cpu.bin" && complete "$t/sampled.bin"; then
	build/luaprof report -q -f collapsed -o "$t/cpu.folded" "$t/cpu.bin"
	read -r tot top under lua a b < <(shape "$t/cpu.folded")
	[ "$tot" -ge 50 ] || fail "CPU: $tot samples, want at least 50"
	# None under another root: a sample in a trace's exit stub had the script's frames
	# alone (4 in 5,074 in a 15 s run; cpu_exit_stub.sh).
	[ "$top" = "$tot" ] || fail "CPU: $((tot - top)) of $tot samples under another root:
$(cut -d';' -f1 "$t/cpu.folded" | sort | uniq -c | sort -rn | head -n 3)"
	[ "$under" = "$lua" ] || fail "CPU: $((lua - under)) of $lua samples of the script not under lua_pcall"
	[ $((a * 2)) -ge "$tot" ] || fail "CPU: $a of $tot samples on work_a's line ${at[a]}, want half"
	[ "$b" = 0 ] || fail "CPU: $b samples of thread 1's work_b"
	echo "ok CPU: $tot samples, $top under one root, $lua in the script under lua_pcall, $a on work_a, none on work_b"

	build/luaprof report -q -f collapsed -o "$t/sampled.folded" "$t/sampled.bin"
	read -r tot top under lua a b < <(shape "$t/sampled.folded")
	nsmp=$(build/luaprof report -q -f info "$t/sampled.bin" | awk -F': ' '$1 == "samples" { print $2 + 0 }')
	[ "${nsmp:-0}" -ge 50 ] || fail "memory, sampled: ${nsmp:-0} samples, want at least 50"
	[ "$top" = "$tot" ] || fail "memory, sampled: $((tot - top)) of $tot bytes under another root"
	[ "$under" = "$lua" ] || fail "memory, sampled: $((lua - under)) of $lua bytes of the script not under lua_pcall"
	[ $((a * 10)) -ge $((tot * 8)) ] || fail "memory, sampled: $a of $tot bytes on work_a's line, want 80%"
	[ "$b" = 0 ] || fail "memory, sampled: $b bytes of thread 1's work_b"
	echo "ok memory, sampled: $nsmp samples, one root, $((a * 100 / (tot > 0 ? tot : 1)))% of bytes on work_a, none on work_b"
fi

# -- Run 2: exact memory --------------------------------------------------------------------
if run exact && complete "$t/exact.bin"; then
	build/luaprof report -q -f memprof -o "$t/exact.txt" "$t/exact.bin"
	# Allocations at work_a's line or in traces that start in work_a (lines a-1..a+1).
	read -r a b < <(awk -v src="@$src:" -v a="${at[a]}" -v b="${at[b]}" '
		/^ALLOCATIONS/ { on = 1; next } /^$/ { on = 0 }
		on && index($0, src) {
			line = substr($0, index($0, src) + length(src)); sub(/:.*/, "", line)
			n = $0; sub(/.*: /, "", n); n += 0
			if (line >= a - 2 && line <= a) A += n
			if (line >= b - 2 && line <= b) B += n
		} END { printf "%d %d\n", A, B }' "$t/exact.txt")
	events=$(build/luaprof report -q -f info "$t/exact.bin" | awk -F': ' '$1 == "events" { print $2 + 0 }')
	[ "$a" -ge 2000 ] || fail "memory, exact: $a allocations in work_a, want at least one event's 2000 strings:
$(head -n 6 "$t/exact.txt")"
	[ "$b" = 0 ] || fail "memory, exact: $b allocations of thread 1's work_b"
	echo "ok memory, exact: $events events, $a in work_a, none in work_b"
fi

[ $fails -eq 0 ] || exit 1
echo "PASS $name"
