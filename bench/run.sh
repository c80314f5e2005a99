#!/bin/sh
# Benchmark: parser-only throughput and full reports on generated memprof and sysprof streams,
# two sizes each, so that flat memory can be seen; prints a Markdown table.
#
#   bench/run.sh
#
# Builds (make bench), generates the streams into $BENCH_OUT (default bench/out/, git-ignored;
# reused when already there), then runs each tool $BENCH_REPEAT times (default 3) under
# /usr/bin/time -v and reports the median and min..max of wall time and peak RSS.
#   - parse:  build/bench/parse_bench FILE   (lp_input_open_fd + lp_parse_stream, no report)
#   - report: build/luaprof report FILE -f collapsed|memprof -o /dev/null  (when it builds)
# Environment:
#   BENCH_MEM_SIZES      memprof sizes (default "100M 1G")
#   BENCH_SYS_SAMPLES    sysprof sample counts (default "1000000 10000000")
#   BENCH_REPEAT         runs per measurement (default 3)
#   BENCH_OUT            directory for the streams and results.md
#   BENCH_NO_REPORT=1    parser only
# Files are read from the page cache (each is read once before timing).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${BENCH_OUT:-$root/bench/out}
mem_sizes=${BENCH_MEM_SIZES:-100M 1G}
sys_samples=${BENCH_SYS_SAMPLES:-1000000 10000000}
repeat=${BENCH_REPEAT:-3}
mkdir -p "$out"

# -- Build -------------------------------------------------------------------------------
have_cli=0
if make bench >&2; then
	have_cli=1
else
	echo "bench: 'make bench' failed; building the benchmark tools alone" >&2
	make build/bench/gen_stream build/bench/parse_bench >&2
	make build/luaprof >&2 && have_cli=1 || true
fi
[ -x build/luaprof ] || have_cli=0
[ "${BENCH_NO_REPORT:-0}" = 1 ] && have_cli=0
[ $have_cli = 1 ] || echo "bench: no build/luaprof; parser-only figures" >&2

if [ ! -x /usr/bin/time ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y time >&2 ||
			{ apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y time >&2; }
	fi
	[ -x /usr/bin/time ] || { echo "bench: GNU time (/usr/bin/time) is required" >&2; exit 1; }
fi

# -- Streams -------------------------------------------------------------------------------
streams=
for s in $mem_sizes; do
	f=$out/memprof-$s.bin
	[ -s "$f" ] || build/bench/gen_stream memprof -s "$s" -o "$f"
	streams="$streams memprof:$s:$f"
done
for n in $sys_samples; do
	f=$out/sysprof-$n.bin
	[ -s "$f" ] || build/bench/gen_stream sysprof -n "$n" -o "$f"
	streams="$streams sysprof:$n:$f"
done

# -- Measuring ---------------------------------------------------------------------------
# Runs "$@" $repeat times; prints "wall_seconds rss_kib" per run.
measure() {
	i=0
	while [ $i -lt "$repeat" ]; do
		tv=$out/.time.$$
		t0=$(date +%s%N)
		if ! /usr/bin/time -v -o "$tv" "$@" >/dev/null 2>"$out/.err.$$"; then
			echo "bench: failed: $*" >&2
			cat "$out/.err.$$" >&2
			rm -f "$tv" "$out/.err.$$"
			return 1
		fi
		t1=$(date +%s%N)
		rss=$(awk -F: '/Maximum resident set size/ { gsub(/ /, "", $2); print $2 }' "$tv")
		echo "$t0 $t1 $rss" | awk '{ printf "%.3f %d\n", ($2 - $1) / 1e9, $3 }'
		rm -f "$tv" "$out/.err.$$"
		i=$((i + 1))
	done
}

# "median (min..max)" of one column of measure's output, given a scale and a format.
summary() {
	col=$1 scale=$2 fmt=$3
	awk -v c="$col" '{ print $c }' | sort -g | awk -v s="$scale" -v f="$fmt" '
		{ v[NR] = $1 / s }
		END {
			m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
			printf f " (" f ".." f ")", m, v[1], v[NR]
		}'
}

median() {
	awk -v c="$1" '{ print $c }' | sort -g | awk '{ v[NR] = $1 }
		END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

table=$out/results.md
{
	echo "| stream | size | events | tool | wall s, median (min..max) | MB/s (median) | peak RSS MiB, median (min..max) |"
	echo "|---|---|---|---|---|---|---|"
} >"$table"

status=0
for spec in $streams; do
	kind=${spec%%:*}
	rest=${spec#*:}
	param=${rest%%:*}
	file=${rest#*:}
	bytes=$(stat -c %s "$file")
	cat "$file" >/dev/null # into the page cache
	events=$(build/bench/parse_bench "$file" |
		sed -n 's/.* bytes, \([0-9]*\) events,.*/\1/p')
	label="$kind $param"
	[ "$kind" = sysprof ] && label="sysprof $param samples"
	fmt=collapsed
	[ "$kind" = memprof ] && fmt=memprof

	for tool in parse report; do
		if [ $tool = parse ]; then
			name="parse_bench"
			set -- build/bench/parse_bench "$file"
		else
			[ $have_cli = 1 ] || continue
			name="luaprof report -f $fmt"
			set -- build/luaprof report "$file" -f $fmt -o /dev/null -q
		fi
		echo "bench: $label: $name x$repeat" >&2
		if ! runs=$(measure "$@"); then
			echo "| $label | $((bytes / 1000000)) MB | $events | $name | failed | | |" >>"$table"
			status=1
			continue
		fi
		wall=$(echo "$runs" | summary 1 1 %.2f)
		rss=$(echo "$runs" | summary 2 1024 %.1f)
		mbps=$(echo "$runs" | median 1 | awk -v b="$bytes" '{ printf "%.0f", b / 1e6 / $1 }')
		echo "| $label | $((bytes / 1000000)) MB | $events | $name | $wall | $mbps | $rss |" \
			>>"$table"
	done
done

echo
echo "Host: $(nproc) CPUs, $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)," \
	"$(awk '/MemTotal/ { printf "%.0f GiB RAM", $2 / 1048576 }' /proc/meminfo), $(date -u +%Y-%m-%d)"
echo "Runs per figure: $repeat; files in the page cache; MB = 10^6 bytes."
echo
cat "$table"
exit $status
