#!/bin/sh
# Benchmark: overhead of the memory profiler in exact mode (luaprof.memprof.start(path): one
# event per allocation, reallocation and free), on allocation-heavy workloads and one
# CPU-bound one, JIT on and off; prints Markdown tables.
#
#   bench/memprof_overhead.sh
#
# Same method as bench/agent_overhead.sh (its "one process" design), with short runs. Every
# workload does a fixed amount of work, sized once by calibration to take about BENCH_SECS
# unprofiled, and times that work itself (bench/memprof_overhead.lua), from after
# memprof.start() returned to before memprof.stop(). Per workload and JIT setting,
# BENCH_PROCS processes each run a warm-up, then their share of BENCH_REPEAT rounds of four
# runs back to back: base (unprofiled), exact (memprof), sampled (memprof sampled mode at
# 512 KiB) and control (unprofiled again); the order rotates every round. Several processes
# because the traces a process forms differ from one to the next (LuaJIT randomizes the
# penalties of aborted traces), and with them the share of events from traces and from the
# interpreter: one process's figures moved by 5-10 points from run to run of this script,
# which the rounds within it could not average out. A ratio is a run's time over the base
# run's of the same round, so both saw the same machine: this host's speed drifts by
# 10-40 % over seconds (other tenants), and many short pairs average that out better than
# a few long ones. The tables give the median ratio over the rounds with its min..max, the
# CPU-time median ratio, events per second of profiled wall time, and bytes per event
# (profile size minus the fixed part of an empty profile, over events). The control's
# ratio is the method's own error: an overhead within it is not resolved.
#
# Workloads:
#   bintrees  binary trees of small tables, depth 14, built, walked and dropped
#   binarytrees  the whole binary-trees program (a stretch tree, a long-lived tree
#             kept throughout, trees of each depth) at depth 14
#   strings   concatenation, string.format, table.concat, string.upper
#   tables    short-lived tables with array and hash parts, table.insert / table.remove
#   life      Conway's life, 64x64, new rows and a rendered string every generation
#   fib       recursive fib(20): CPU-bound, nearly no allocation
#
# Environment:
#   BENCH_REPEAT     rounds (default 21)
#   BENCH_PROCS      processes the rounds are shared between (default 3)
#   BENCH_SECS       unprofiled seconds per run, for calibration (default 0.25)
#   BENCH_WORKLOADS  default "bintrees binarytrees strings tables life fib"
#   BENCH_JIT        default "on off"
#   BENCH_OUT        output directory (default bench/out/, git-ignored); this script writes
#                    memprof/ there: runs.tsv (every run), results.md
#   BENCH_STREAM_DIR where the profiles go, each deleted after its run (default /dev/shm,
#                    a tmpfs, else BENCH_OUT)
# The allocator wrappers' own cost per call (bench/memprof_floor.c, no Lua code around it)
# is measured too; times a workload's allocator calls per unprofiled second (its exact-mode
# events over the base run's time) it gives the "sampled floor" column: the least overhead
# the sampled wrapper's test can have on that workload before any capture.
#
# Time: about BENCH_REPEAT x workloads x JIT settings x BENCH_SECS x ~5 (~5 min).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${BENCH_OUT:-$root/bench/out}/memprof
repeat=${BENCH_REPEAT:-21}
procs=${BENCH_PROCS:-3}
secs=${BENCH_SECS:-0.25}
workloads=${BENCH_WORKLOADS:-bintrees binarytrees strings tables life fib}
jits=${BENCH_JIT:-on off}
mkdir -p "$out"
sdir=${BENCH_STREAM_DIR:-}
if [ -z "$sdir" ]; then
	if [ -d /dev/shm ] && [ -w /dev/shm ]; then sdir=/dev/shm; else sdir=$out; fi
fi
stream=$sdir/luaprof-memprof-bench-$$

command -v luajit >/dev/null 2>&1 || { echo "bench: luajit is required (apt-get install luajit)" >&2; exit 1; }
make build/luaprof.so >&2 || echo "bench: 'make build/luaprof.so' failed; using the existing build" >&2
[ -f build/luaprof.so ] || { echo "bench: build/luaprof.so is missing (run make)" >&2; exit 1; }

L="luajit bench/memprof_overhead.lua build"
floor_ns=
if make build/bench/memprof_floor >&2; then
	build/bench/memprof_floor "build/?.so" >"$out/floor.md" &&
		floor_ns=$(awk -F'|' '$2 ~ /^ sampled $/ { split($4, a, " "); print a[1] + 0 }' "$out/floor.md")
else
	echo "bench: 'make build/bench/memprof_floor' failed (libluajit-5.1-dev?); no floor column" >&2
fi
median3() { sort -n | sed -n 2p; }
values() { sed 's/[a-z0-9]*=//g'; }
steal() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print $9, t; exit }' /proc/stat; }

# -- Calibration: N for ~BENCH_SECS unprofiled (median of 3); the profile's fixed part --------
sizes=$out/sizes.txt
: >"$sizes"
fixed=$($L fib on 1 "$stream" empty </dev/null | sed -n 's/.* bytes=\([0-9]*\).*/\1/p')
echo "bench: an exact-mode profile without work takes $fixed bytes" >&2
for w in $workloads; do
	for j in $jits; do
		n=$(for _ in 1 2 3; do $L "$w" "$j" "$secs" x calib </dev/null | sed 's/^n=//'; done | median3)
		echo "$w $j $n" >>"$sizes"
		echo "bench: $w JIT $j: N=$n" >&2
	done
done

tsv=$out/runs.tsv
echo "round workload jit n seg mode wall cpu start stop events allocs frees reallocs bytes" >"$tsv"
t_begin=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
# shellcheck disable=SC2046
set -- $(steal)
s0=$1 t0=$2
while read -r w j n; do
	echo "bench: $w JIT $j" >&2
	r=0
	while [ $r -lt "$repeat" ]; do
		# This process's share of the rounds (the last one may get fewer).
		k=$(( (repeat + procs - 1) / procs ))
		[ $((r + k)) -le "$repeat" ] || k=$((repeat - r))
		modes=warm
		i=0
		while [ $i -lt $k ]; do
			case $(((r + i) % 4)) in
			0) modes="$modes base exact sampled control" ;;
			1) modes="$modes exact sampled control base" ;;
			2) modes="$modes sampled control base exact" ;;
			*) modes="$modes control base exact sampled" ;;
			esac
			i=$((i + 1))
		done
		# shellcheck disable=SC2086
		$L "$w" "$j" "$n" "$stream" $modes </dev/null >"$out/seg.out" ||
			{ rm -f "$stream"-*; echo "bench: failed: $w $j" >&2; exit 1; }
		# segment 1 is the warm-up; segments 4i-2 .. 4i+1 are the process's round i
		values <"$out/seg.out" | awk -v w="$w" -v j="$j" -v n="$n" -v r0="$r" \
			'{ printf "%d %s %s %s %s\n", r0 + int(($1 + 2) / 4), w, j, n, $0 }' >>"$tsv"
		r=$((r + k))
	done
done <"$sizes"
rm -f "$stream"-*
# shellcheck disable=SC2046
set -- "$s0" "$t0" $(steal)
stolen=$(awk -v s=$(($3 - $1)) -v t=$(($4 - $2)) 'BEGIN { printf "%.1f%%", t ? 100 * s / t : 0 }')
load1=$(cut -d' ' -f1-3 /proc/loadavg)
minutes=$(awk -v s=$(($(date +%s) - t_begin)) 'BEGIN { printf "%.1f", s / 60 }')

# -- Report ------------------------------------------------------------------------------------
report() { # JIT setting -> Markdown table
	awk -v jit="$1" -v fixed="$fixed" -v order="$workloads" -v floor="$floor_ns" '
	function med(a, k,   i, j, t) { # sort a[1..k] in place, return the median
		for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
		return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
	}
	# "median (min..max)" of mode m / base over the rounds of workload w; column 7 wall, 8 CPU
	function ratio(m, w, col,   r, k, q, md) {
		k = 0
		for (r = 1; r <= maxr; r++)
			if ((w, r, "base") in v && (w, r, m) in v) {
				split(v[w, r, "base"], bb, " "); split(v[w, r, m], mm, " ")
				q[++k] = mm[col] / bb[col]
			}
		if (!k) return "n/a"
		md = med(q, k)
		return col == 1 ? sprintf("%.3f (%.2f..%.2f)", md, q[1], q[k]) : sprintf("%.3f", md)
	}
	NR > 1 && $3 == jit {
		w = $2; r = $1
		v[w, r, $6] = $7 " " $8
		if ($6 == "exact") { ew[w, r] = $7; ev[w, r] = $11; by[w, r] = $15 }
		if ($6 == "base") bw[w, r] = $7
		if (r > maxr) maxr = r
	}
	END {
		print "| workload | exact: wall ratio, median (min..max) | CPU | events/s | bytes/event | sampled 512 KiB: wall ratio | CPU | control (unprofiled): wall ratio | CPU | allocator calls/s unprofiled | sampled floor |"
		print "|---|---|---|---|---|---|---|---|---|---|---|"
		nw = split(order, ws, " ")
		for (i = 1; i <= nw; i++) {
			w = ws[i]; k = 0
			for (r = 1; r <= maxr; r++) {
				if (!((w, r) in ew)) continue
				k++
				e[k] = ev[w, r] / ew[w, r]; b[k] = ev[w, r] ? (by[w, r] - fixed) / ev[w, r] : 0
				n[k] = ev[w, r]
				c[k] = (w, r) in bw && bw[w, r] > 0 ? ev[w, r] / bw[w, r] : 0
			}
			if (!k) continue
			cps = med(c, k)
			printf "| %s | %s | %s | %.2fM | %s | %s | %s | %s | %s | %.2fM | %s |\n", w,
				ratio("exact", w, 1), ratio("exact", w, 2), med(e, k) / 1e6,
				(med(n, k) >= 1000 ? sprintf("%.1f", med(b, k)) : "n/a"),
				ratio("sampled", w, 1), ratio("sampled", w, 2),
				ratio("control", w, 1), ratio("control", w, 2), cps / 1e6,
				(floor != "" ? sprintf("+%.1f %%", 100 * floor * cps / 1e9) : "n/a")
		}
	}' "$tsv"
}
{
	echo "Host: $(nproc) CPUs, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)," \
		"Linux $(uname -r), $(luajit -v | cut -d' ' -f1-2), $(date -u +%Y-%m-%d)"
	echo "Rounds: $repeat; runs sized to ~${secs} s unprofiled; profiles in $sdir; measuring took" \
		"$minutes min; CPU time stolen by the hypervisor: $stolen; load average before: $load0," \
		"after: $load1; fixed part of a profile (symbol table): $fixed bytes."
	for j in $jits; do
		echo
		echo "JIT $j:"
		echo
		report "$j"
	done
	if [ -n "$floor_ns" ]; then
		echo
		echo "Allocator wrappers per call (build/bench/memprof_floor; sampled floor = the" \
			"sampled wrapper's paired median over direct, $floor_ns ns, x calls/s):"
		echo
		cat "$out/floor.md"
	fi
} >"$out/results.md"
cat "$out/results.md"
