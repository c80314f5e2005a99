#!/bin/sh
# Benchmark: in-process A/B of the memory profiler between revisions, for changes whose
# effect is a few percent, below what separate processes resolve on a host whose speed
# drifts (bench/memprof_overhead.sh measures one build against no profiler).
#
#   bench/memprof_ab.sh [REV...]      # default: HEAD and the work tree (.)
#
# Each REV (a commit, or . for the work tree as it is) is built into its own luaprof.so
# (a git worktree under BENCH_OUT for commits); bench/memprof_ab.lua then loads them all side
# by side in one luajit and times the same work unprofiled, under each build and mode, and
# unprofiled again (control), in an order that rotates every round. A ratio is a run's time
# over the unprofiled run's of the same round; the table gives the median with min..max of
# wall and process CPU time. Two identical builds read within about a point of each other
# here (A/A); the control row is the method's own error.
#
# Environment:
#   BENCH_ROUNDS    rounds (default 31)
#   BENCH_SECS      unprofiled seconds per run, for calibration (default 0.15)
#   BENCH_JIT       on or off (default on)
#   BENCH_WORKLOAD  bintrees (default), tables, life or binary-trees (the whole program, depth 16)
#   BENCH_MODES     per build: exact (to /dev/shm), null (exact to /dev/null), sampled
#                   (512 KiB) or sampled=BYTES (default "exact sampled")
#   BENCH_OUT       output directory (default bench/out/, git-ignored): ab/ holds the
#                   builds and results.md
# Time: about BENCH_ROUNDS x (1 + builds x modes + 1) x BENCH_SECS x 1.3, plus the builds.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${BENCH_OUT:-$root/bench/out}/ab
rounds=${BENCH_ROUNDS:-31}
secs=${BENCH_SECS:-0.15}
jit=${BENCH_JIT:-on}
workload=${BENCH_WORKLOAD:-bintrees}
modes=${BENCH_MODES:-exact sampled}
[ $# -gt 0 ] || set -- HEAD .
command -v luajit >/dev/null 2>&1 || { echo "bench: luajit is required (apt-get install luajit)" >&2; exit 1; }
mkdir -p "$out"

# -- Builds: one directory with a luaprof.so per REV ------------------------------------------
i=0
runs=
for rev in "$@"; do
	i=$((i + 1))
	dir=$out/build$i
	rm -rf "$dir"
	mkdir -p "$dir"
	if [ "$rev" = . ]; then
		make build/luaprof.so >&2 || { echo "bench: the work tree does not build" >&2; exit 1; }
		cp build/luaprof.so "$dir/"
		echo "bench: build$i = the work tree ($(git rev-parse --short HEAD 2>/dev/null || echo ?) + changes)" >&2
	else
		sha=$(git rev-parse --verify --quiet "$rev^{commit}") ||
			{ echo "bench: '$rev' is not a commit" >&2; exit 1; }
		wt=$out/tree-$sha
		[ -d "$wt" ] || git worktree add --detach "$wt" "$sha" >&2
		make -C "$wt" build/luaprof.so >&2 ||
			{ echo "bench: $rev ($sha) does not build" >&2; exit 1; }
		cp "$wt/build/luaprof.so" "$dir/"
		echo "bench: build$i = $rev ($(git rev-parse --short "$sha"))" >&2
	fi
	for m in $modes; do runs="$runs $dir:$m"; done
done

# -- Calibration, then the rounds ---------------------------------------------------------------
L="luajit bench/memprof_ab.lua $jit"
units=$($L 0 "$secs" "$workload" | sed 's/^n=//')
echo "bench: $workload, JIT $jit: $units units for ~$secs s; $rounds rounds" >&2
# shellcheck disable=SC2086
$L "$rounds" "$units" "$workload" control $runs >"$out/table.md"
{
	echo "Host: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(uname -sr), $(date +%F)"
	i=0
	for rev in "$@"; do
		i=$((i + 1))
		if [ "$rev" = . ]; then
			echo "build$i: the work tree"
		else
			echo "build$i: $rev ($(git rev-parse --short "$rev"))"
		fi
	done
	echo
	sed "s#$out/##g" "$out/table.md"
} >"$out/results.md"
cat "$out/results.md"
