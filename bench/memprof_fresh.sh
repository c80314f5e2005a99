#!/bin/sh
# Benchmark: the memory profiler's overhead measured the way Tarantool measured its memprof
# (+16 % on binary-trees, +76 % on life, in its RFC): the whole benchmark program, a fresh
# process per run, timed from outside; here interleaved with unprofiled runs, as a median
# ratio with its spread. Prints a Markdown table.
#
#   bench/memprof_fresh.sh
#
# Program: the Benchmarks Game's binary-trees at depth BENCH_DEPTH (bench/benchlib.lua's
# binary_trees, the program and size of LuaJIT's benchmark suite). Per round and JIT
# setting, in a rotating order: the program alone (base), under each mode, and alone again
# (control). The profiler is started before the script's first line and stopped at exit as
# `luaprof record` does it (LUA_INIT loads build/luaprof.so); the time is the whole
# process's, start-up, the profile's symbols and its last writes included. A ratio is a
# run's time over the base run's of the same round; the control's ratio is the method's
# own error (fresh processes drift more than bench/memprof_overhead.sh's in-process runs).
#
# Environment:
#   BENCH_ROUNDS   rounds (default 21)
#   BENCH_DEPTH    binary-trees depth (default 16: ~0.9 s unprofiled on a 2020s x86_64)
#   BENCH_JIT      default "on off"
#   BENCH_MODES    exact (the profile to BENCH_STREAM_DIR), null (exact to /dev/null),
#                  sampled (512 KiB), loaded (the agent loaded by LUA_INIT, no profile:
#                  what a late-loaded library costs LuaJIT's young heap, docs/OVERHEAD.md);
#                  default "exact sampled loaded"
#   BENCH_STREAM_DIR  where the profile goes (default /dev/shm, else /tmp)
#   BENCH_OUT      output directory (default bench/out/): memprof_fresh.md
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
rounds=${BENCH_ROUNDS:-21}
depth=${BENCH_DEPTH:-16}
jits=${BENCH_JIT:-on off}
modes=${BENCH_MODES:-exact sampled loaded}
sdir=${BENCH_STREAM_DIR:-/dev/shm}
[ -d "$sdir" ] && [ -w "$sdir" ] || sdir=${TMPDIR:-/tmp}
out=${BENCH_OUT:-$root/bench/out}
command -v luajit >/dev/null 2>&1 || { echo "bench: luajit is required (apt-get install luajit)" >&2; exit 1; }
make build/luaprof.so >&2 || { echo "bench: the agent does not build" >&2; exit 1; }
mkdir -p "$out"
for m in $modes; do
	case $m in exact | null | sampled | loaded) ;;
	*) echo "bench: unknown mode '$m' (exact, null, sampled, loaded)" >&2; exit 1 ;; esac
done
for j in $jits; do
	case $j in on | off) ;; *) echo "bench: BENCH_JIT takes on and off, not '$j'" >&2; exit 1 ;; esac
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/memprof_fresh.XXXXXX")
trap 'rm -rf "$tmp"; rm -f "$sdir/memprof_fresh.$$.bin"' EXIT
prog=$tmp/binary-trees.lua
cat >"$prog" <<EOF
local B = dofile("$root/bench/benchlib.lua")
io.write(B.binary_trees(tonumber(arg[1])), "\n")
EOF
init="package.loaded.luaprof=assert(package.loadlib('$root/build/luaprof.so','luaopen_luaprof'))('luaprof')"

now_ns() { date +%s%N; }

# run JIT MODE: prints the run's wall time in ns.
run() {
	jflag=
	[ "$1" = off ] && jflag=-joff
	case $2 in
	base | control) rec= ;;
	loaded) rec=none ;;
	exact) rec="profiler=memory,sample=0,path=$sdir/memprof_fresh.$$.bin" ;;
	null) rec="profiler=memory,sample=0,path=/dev/null" ;;
	sampled) rec="profiler=memory,sample=524288,path=$sdir/memprof_fresh.$$.bin" ;;
	esac
	s=$(now_ns)
	if [ -z "$rec" ]; then
		luajit $jflag "$prog" "$depth" >/dev/null
	elif [ "$rec" = none ]; then
		env LUA_INIT="$init" luajit $jflag "$prog" "$depth" >/dev/null
	else
		env LUA_INIT="$init" LUAPROF_RECORD="$rec" luajit $jflag "$prog" "$depth" >/dev/null
	fi
	e=$(now_ns)
	echo $((e - s))
}

# median_spread FILE: "median (min..max)" of the numbers in FILE.
median_spread() {
	sort -g "$1" | awk '{ v[NR] = $1 } END { printf "%.3f (%.3f..%.3f)", v[int((NR + 1) / 2)], v[1], v[NR] }'
}

res=$out/memprof_fresh.md
{
	echo "binary-trees $depth, fresh process per run, $rounds rounds ($(date -u +%Y-%m-%d), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs)"
	echo
	printf '| JIT | base s (median) |'
	for m in $modes control; do printf ' %s: wall ratio, median (min..max) |' "$m"; done
	echo
	printf '|---|---|'
	for m in $modes control; do printf -- '---|'; done
	echo
} >"$res"
for j in $jits; do
	set -- base $modes control
	n=$#
	for m in base $modes control; do : >"$tmp/$j.$m"; done
	run "$j" base >/dev/null # warm the page cache
	r=0
	while [ $r -lt "$rounds" ]; do
		# Rotate the order: round r starts at entry r mod n.
		i=0
		for m in base $modes control; do
			eval "o$(( (i - r % n + n) % n ))=$m"
			i=$((i + 1))
		done
		k=0
		while [ $k -lt $n ]; do
			eval "m=\$o$k"
			eval "t_$m=$(run "$j" "$m")"
			k=$((k + 1))
		done
		eval "b=\$t_base"
		echo "$b" >>"$tmp/$j.base"
		for m in $modes control; do
			eval "v=\$t_$m"
			awk -v v="$v" -v b="$b" 'BEGIN { printf "%.4f\n", v / b }' >>"$tmp/$j.$m"
		done
		r=$((r + 1))
		printf 'bench: JIT %s, round %d of %d\r' "$j" "$r" "$rounds" >&2
	done
	echo >&2
	{
		printf '| %s | %s |' "$j" "$(sort -n "$tmp/$j.base" | awk '{ v[NR] = $1 } END { printf "%.3f", v[int((NR + 1) / 2)] / 1e9 }')"
		for m in $modes control; do printf ' %s |' "$(median_spread "$tmp/$j.$m")"; done
		echo
	} >>"$res"
done
cat "$res"
