#!/bin/sh
# Benchmark: overhead of the in-process agent (build/luaprof.so) in C mode, on CPU-bound Lua,
# C-heavy (FFI) and mixed workloads, JIT on and off; prints Markdown tables.
#
#   bench/agent_overhead.sh
#
# Every workload does a fixed amount of work, sized once by calibration to take about
# BENCH_SECS unprofiled, and times that work itself (bench/agent_overhead.lua), from after
# sysprof.start() returned to before sysprof.stop(), in three modes:
#   base   unprofiled
#   c100   C mode at 100 Hz, CPU clock (interval = 10: the default rate and clock)
#   c1k    C mode at 1 kHz, wall clock (interval = 1: the highest rate the Lua API takes)
# The agent is started from inside the Lua process (require "luaprof" in the benchmark
# script), so the process measures its own steady state: the ratio is the cost of sampling,
# the part that grows with the program's run time. The one-off costs are reported apart:
# start() (symbol table of every loaded object) and stop() (flush, extension) in ms, and the
# whole-process wall time (exec to exit, timed here) as a ratio.
#
# Two designs, both interleaved and repeated BENCH_REPEAT times:
#   one process   per workload and JIT setting: a warm-up run, then rounds of the three
#                 modes back to back in the same process. Same address space, same JIT
#                 traces and a few seconds between the runs compared: the least noisy.
#   separate processes   a fresh `luajit` per run; round r runs every workload and JIT
#                 setting, the three modes back to back. Includes what differs between
#                 processes: address-space layout (LuaJIT's hot counters and trace shapes
#                 depend on it), JIT warm-up under the profiler, a cold agent.
# The order of the three modes rotates every round (base c100 c1k, c100 c1k base, ...), so
# no mode always runs first. A ratio is profiled / unprofiled wall time of the same round;
# the tables give the median ratio over the rounds and its min..max.
#
# Environment:
#   BENCH_REPEAT     rounds (default 7)
#   BENCH_SECS       unprofiled seconds per run, for calibration (default 1)
#   BENCH_WORKLOADS  default "fib nbody strings tables coro ffi mixed"
#   BENCH_JIT        default "on off"
#   BENCH_DESIGNS    default "inproc procs" (one process, separate processes)
#   BENCH_OUT        output directory (default bench/out/, git-ignored); this script writes
#                    agent/ there: the FFI library, runs.tsv (every run), results.md
# Time: about BENCH_REPEAT x workloads x JIT settings x 3 x 2 x BENCH_SECS (~10 min).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${BENCH_OUT:-$root/bench/out}/agent
repeat=${BENCH_REPEAT:-7}
secs=${BENCH_SECS:-1}
workloads=${BENCH_WORKLOADS:-fib nbody strings tables coro ffi mixed}
jits=${BENCH_JIT:-on off}
designs=${BENCH_DESIGNS:-inproc procs}
mkdir -p "$out"

# -- Build -----------------------------------------------------------------------------------
if ! command -v luajit >/dev/null 2>&1; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y luajit >&2
	fi
	command -v luajit >/dev/null 2>&1 || { echo "bench: luajit is required (apt-get install luajit)" >&2; exit 1; }
fi
make build/luaprof.so >&2 || echo "bench: 'make build/luaprof.so' failed; using the existing build" >&2
[ -f build/luaprof.so ] || { echo "bench: build/luaprof.so is missing (run make)" >&2; exit 1; }
lib=$out/libagentffi.so
${CC:-cc} -std=c11 -O2 -g -fPIC -shared -Wall -Wextra -Werror -o "$lib" bench/agent_ffi.c

L="luajit bench/agent_overhead.lua build $lib"
median3() { sort -n | sed -n 2p; }
steal() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t; exit }' /proc/stat; }
rotate() { # round index -> the three modes, rotated
	case $((($1) % 3)) in
	0) echo "base c100 c1k" ;;
	1) echo "c100 c1k base" ;;
	*) echo "c1k base c100" ;;
	esac
}
# facts lines (key=value ...) -> values only
values() { sed 's/[a-z0-9]*=//g'; }

has_design() { case " $designs " in *" $1 "*) return 0 ;; esac; return 1; }
stolen() { # "steal total" at the start -> percentage of CPU time stolen since
	# shellcheck disable=SC2046
	set -- "$1" "$2" $(steal)
	awk -v s=$(($3 - $1)) -v t=$(($4 - $2)) 'BEGIN { printf "%.1f%%", t ? 100 * s / t : 0 }'
}

# -- Calibration: N for ~BENCH_SECS unprofiled (median of 3); the stream's fixed part ----------
sizes=$out/sizes.txt fixed=$out/fixed.txt
: >"$sizes"
: >"$fixed"
for w in $workloads; do
	for j in $jits; do
		n=$(for _ in 1 2 3; do $L "$w" "$j" "$secs" x calib </dev/null | sed 's/^n=//'; done | median3)
		e=$($L "$w" "$j" 0 "$out/stream" empty </dev/null | sed -n 's/.* bytes=\([0-9]*\) .*/\1/p')
		echo "$w $j $n" >>"$sizes"
		echo "$w $j $e" >>"$fixed"
		echo "bench: $w JIT $j: N=$n; a C-mode stream without samples takes $e bytes" >&2
	done
done

tsv=$out/runs.tsv
echo "design round workload jit n seg mode wall cpu pcpu start stop samples bytes handler dropped overruns nivcsw procwall" >"$tsv"
t_begin=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
steal_a="not run" steal_b="not run"

# -- One process per workload and JIT setting, the modes interleaved in it -------------------
if has_design inproc; then
	# shellcheck disable=SC2046
	set -- $(steal)
	s0=$1 t0=$2
	while read -r w j n; do
		echo "bench: one process: $w JIT $j" >&2
		modes=warm
		r=0
		while [ $r -lt "$repeat" ]; do
			modes="$modes $(rotate $r)"
			r=$((r + 1))
		done
		# shellcheck disable=SC2086
		$L "$w" "$j" "$n" "$out/stream" $modes </dev/null >"$out/seg.out" ||
			{ echo "bench: failed: $w $j" >&2; exit 1; }
		# segment 1 is the warm-up; segments 3r-1 .. 3r+1 are round r
		values <"$out/seg.out" | awk -v w="$w" -v j="$j" -v n="$n" \
			'{ printf "inproc %d %s %s %s %s NA\n", int(($1 - 2) / 3) + 1, w, j, n, $0 }' >>"$tsv"
	done <"$sizes"
	steal_a=$(stolen "$s0" "$t0")
fi

# -- A fresh process per run; round r runs every workload, JIT setting and mode ---------------
if has_design procs; then
	# shellcheck disable=SC2046
	set -- $(steal)
	s0=$1 t0=$2
	r=1
	while [ "$r" -le "$repeat" ]; do
		echo "bench: separate processes: round $r/$repeat" >&2
		k=0
		while read -r w j n; do
			for m in $(rotate $((r + k))); do
				p0=$(date +%s%N)
				facts=$($L "$w" "$j" "$n" "$out/stream" "$m" </dev/null) ||
					{ echo "bench: failed: $w $j $m" >&2; exit 1; }
				p1=$(date +%s%N)
				echo "procs $r $w $j $n $(echo "$facts" | values)" \
					"$(awk -v a="$p0" -v b="$p1" 'BEGIN { printf "%.6f", (b - a) / 1e9 }')" >>"$tsv"
			done
			k=$((k + 1))
		done <"$sizes"
		r=$((r + 1))
	done
	steal_b=$(stolen "$s0" "$t0")
fi
load1=$(cut -d' ' -f1-3 /proc/loadavg)
minutes=$(awk -v s=$(($(date +%s) - t_begin)) 'BEGIN { printf "%.1f", s / 60 }')

# -- Report ------------------------------------------------------------------------------------
{
	echo "Host: $(nproc) CPUs, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)," \
		"Linux $(uname -r), $(luajit -v | cut -d' ' -f1-2) ($(dpkg-query -W -f '${Version}' luajit 2>/dev/null || echo '?')), $(date -u +%Y-%m-%d)"
	echo "Rounds: $repeat; runs sized to ~${secs} s unprofiled; measuring took $minutes min;" \
		"CPU time stolen by the hypervisor (all CPUs): $steal_a during the one-process runs, $steal_b during the separate processes;" \
		"load average before: $load0, after: $load1."
	echo
	luajit bench/agent_overhead_report.lua "$tsv" "$fixed"
} >"$out/results.md"
cat "$out/results.md"
