#!/usr/bin/env bash
# Trace frames after flushes: trace_flush.lua compiles two functions' loops to trace 1 in
# turn, flushing between them, so that trace numbers and machine code addresses are
# reused; each trace calls C code and allocates. Profiled under Debian's luajit and
# OpenResty's luajit2 by `luaprof record` in C mode (CPU) and in sampled memory mode.
# A trace's frame in a host stack (under the C code it calls, or at the allocation it
# made) must be named after the trace that ran there when the stack was taken: the agent
# keys such frames by trace (kcode records, docs/FORMAT.md). Before, every such frame was
# a raw 0x... address after the first flush (35 of 39 CPU samples), and no allocation was
# shown under its trace.
#
# Checked per runner on `luaprof report -f collapsed`: no raw address frame at all; every
# TRACE frame under f's loop line (or the line after it, its return: a sample on the
# loop's exit path) names f's loop line, g's likewise (never the other function's); at
# least 10 CPU samples and 80 % of the sampled bytes under a TRACE frame.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
src=tests/integration/trace_flush.lua

need_x86_64
need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
luajit2_fetch "$t/dl.log"

declare -A at
read_markers $src
chunk="@$src"

# check RUNNER WHAT FOLDED MIN_PERCENT MIN_WEIGHT
check() {
	local runner=$1 what=$2 folded=$3 minpct=$4 minw=$5 out
	out=$(awk -v c="$chunk" -v f="${at[f]}" -v g="${at[g]}" '{
		n = $NF; stack = substr($0, 1, length($0) - length($NF) - 1)
		k = split(stack, fr, ";"); total += n
		for (i = 1; i <= k; i++) {
			if (fr[i] ~ /^0x[0-9a-f]+$/) { raw += n; if (!ex) ex = stack; break }
			if (fr[i] !~ /^TRACE \[/) continue
			# Under the loop line, or the next (the return of its function: a sample on
			# the exit path of the loop).
			if (i > 1 && (fr[i - 1] == c ":" f || fr[i - 1] == c ":" f + 1) &&
			    fr[i] ~ (":" f "$")) good += n
			else if (i > 1 && (fr[i - 1] == c ":" g || fr[i - 1] == c ":" g + 1) &&
				 fr[i] ~ (":" g "$")) good += n
			else { wrong += n; if (!wx) wx = stack }
			break
		}
	} END { printf "%d %d %d %d\t%s\t%s\n", total, good, raw, wrong, ex, wx }' "$folded")
	local nums=${out%%$'\t'*} total good raw wrong
	read -r total good raw wrong <<<"$nums"
	if [ "$raw" -gt 0 ]; then
		fail "$runner $what: $raw of $total with a raw address frame: $(cut -f2 <<<"$out" | tr ';' ' ' | tail -c 300)"
	elif [ "$wrong" -gt 0 ]; then
		fail "$runner $what: $wrong of $total under a trace named elsewhere: $(cut -f3 <<<"$out" | tail -c 300)"
	elif [ "$good" -lt "$minw" ] || [ $((good * 100)) -lt $((total * minpct)) ]; then
		fail "$runner $what: $good of $total under the loops' trace frames (want $minpct % and $minw)"
	else
		echo "ok $runner $what: $good of $total under the right trace frame, none raw"
	fi
}

run() {
	local runner=$1 lj=$2 dir="$t/$1"
	mkdir -p "$dir"
	if ! build/luaprof record -q --rate 1000 -o "$dir/cpu.folded" -- "$lj" "$src" >"$dir/out" 2>"$dir/err"; then
		fail "$runner: luaprof record failed: $(tail -3 "$dir/err")"
		return
	fi
	build/luaprof report -q -f collapsed "$dir/cpu.bin" >"$dir/cpu.rep" 2>"$dir/rerr" ||
		{ fail "$runner: luaprof report failed: $(head -3 "$dir/rerr")"; return; }
	# Each sample in C code a loop's trace called (string.format's helpers, the
	# collector's steps) has the trace's frame: most of them are.
	check "$runner" cpu "$dir/cpu.rep" 50 10
	if ! build/luaprof record -q --memory --sample 4K -o "$dir/mem.folded" -- "$lj" "$src" 20 \
		>"$dir/mout" 2>"$dir/merr"; then
		fail "$runner: luaprof record --memory failed: $(tail -3 "$dir/merr")"
		return
	fi
	build/luaprof report -q -f collapsed "$dir/mem.bin" >"$dir/mem.rep" 2>"$dir/rerr" ||
		{ fail "$runner: luaprof report (memory) failed: $(head -3 "$dir/rerr")"; return; }
	check "$runner" memory "$dir/mem.rep" 80 1000000
}

run debian /usr/bin/luajit
if [ -x "${lj2:-}" ]; then
	run luajit2 "$lj2"
else
	echo "note: OpenResty's luajit2 could not be fetched (see above); Debian's luajit only"
fi
[ $fails -eq 0 ] || exit 1
echo "PASS $name"
