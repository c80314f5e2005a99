#!/usr/bin/env bash
# Issue 3, robustness: the profiler at its highest rate (C mode, wall clock, 10 kHz: the
# 0.1 ms minimum interval) on a chaos workload (chaos_sysprof.lua: coroutines, errors, GC
# pressure, JIT traces created and flushed, a coroutine with 50 locals growing its stack,
# FFI calls and callbacks, string ops, table.sort) with the state closed while sampling:
#   1. Debian's luajit under `luaprof record --rate 10000 --clock wall` for CHAOS_SECONDS
#      (default 60); the main chunk returns with the profile running, so luajit's
#      lua_close ends it;
#   2. OpenResty's luajit2 (extracted from its .debs as shapes_luajit.sh does, same cache)
#      for a third of that; the run ends by os.exit(0, true) from deep inside a coroutine:
#      lua_close with Lua frames live;
#   3. chaos_host.c on each build's libluajit-5.1.so: cycles of start (C API, same rate) /
#      chaos / lua_close while running in one process, with exact sample accounting.
# Asserted for every run: exit status 0 within a time limit (no crash, no signal, no
# live-lock), the workload's own checks and its progress (rounds, JIT flushes, fresh
# chunks, full GCs, stack overflows...), `luaprof report` exit 0 on the stream (complete,
# not truncated or malformed), the samples in the file against the agent's counters,
# at least 20% of the asked samples, under 5% dropped, samples in LFUNC, TRACE, GC and
# CFUNC or FFUNC, and frames at the workload's marked lines. One summary line per run.
#
# CHAOS_SECONDS (default 60) sets the durations; CHAOS_RATE (default 10000 Hz) and
# CHAOS_DEPTH (see chaos_sysprof.lua) are diagnosis aids. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
src=tests/integration/chaos_sysprof.lua
secs=${CHAOS_SECONDS:-60}
rate=${CHAOS_RATE:-10000}
lp=$PWD/build/luaprof
root=$PWD

case $secs in '' | *[!0-9]* | 0) echo "CHAOS_SECONDS must be a whole number of seconds"; exit 1 ;; esac
case $rate in '' | *[!0-9]* | 0) echo "CHAOS_RATE must be samples per second"; exit 1 ;; esac
need_x86_64
need_build luaprof luaprof.so libluaprof.a
have timeout || skip "no timeout(1)"

# -- Debian's luajit and libluajit-5.1-dev, installed when missing and allowed.
luajit_dev "$t/apt.log" || skip "$why"
${CC:-cc} -std=c11 -Wall -Wextra -Werror -Wno-unused-parameter -O1 -g -D_GNU_SOURCE \
	-Iinclude -Isrc -I$inc -o "$t/host" tests/integration/chaos_host.c build/libluaprof.a \
	-Lbuild -l:luaprof.so -Wl,-rpath,"$PWD/build" -lluajit-5.1 -lprotobuf-c -lz -lm \
	2>"$t/cc.log" || { echo "FAIL: cannot build chaos_host.c: $(head -20 "$t/cc.log")"; exit 1; }

# -- OpenResty's luajit2, extracted from its .debs (tests/integration/lib/luajit.sh).
luajit2_fetch "$t/dl.log"

# Marker lines of the workload ("--@name" at the end of a line) that every profile of a
# whole run must show as the current line of some frame.
declare -A at
read_markers $src
markers="deep_call thrower jit_num qsort nest gsub_fn sort"

# field NAME LINE: the value of NAME=value in a "key=value ..." line (empty if none).
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p" | head -1; }

# Time limit of a run of S seconds of workload: half as long again plus 30 s for starting
# and closing. Beyond it the program is killed and the run fails: at a rate it cannot
# sustain the sampler can starve the program (each handler call outlasting the interval).
limit() { echo $(($1 + $1 / 2 + 30)); }

# record RUN SECS END VMNAME LUAJIT [ENV...]: the workload under `luaprof record`, then
# the checks (VMNAME: the build the stream must name).
record() {
	local run=$1 s=$2 end=$3 vmname=$4 luajit=$5 d="$t/$1" lim rc t0 el
	shift 5
	mkdir -p "$d"
	lim=$(limit "$s")
	t0=$(date +%s)
	(cd "$d" && env "$@" CHAOS_SECONDS="$s" CHAOS_END="$end" \
		"$lp" record --rate "$rate" --clock wall -f collapsed -o rec.folded --raw chaos.bin \
		-- sh -c 'timeout -k 10 "$@"; echo $? >status' sh "$lim" "$luajit" "$root/$src") \
		>"$d/out" 2>"$d/err"
	rc=$?
	el=$(($(date +%s) - t0))
	local line prog
	line=$(grep '^chaos: ' "$d/out" | tail -1)
	prog=$(cat "$d/status" 2>/dev/null)
	if [ $rc != 0 ] || [ -z "$line" ]; then
		local why="record exited $rc, the program ${prog:-?}"
		[ "${prog:-0}" -gt 128 ] && why="the program was killed by signal $((prog - 128))"
		[ "$prog" = 124 ] || [ "$prog" = 137 ] &&
			why="the program did not finish within $lim s (killed; the sampler starving it?)"
		fail "$run: $why after $el s
	workload: ${line:-no chaos: line (it did not reach its end)}
	$(grep -E '^luaprof record: ([0-9.]+ s profiled|warning)|chaos_sysprof.lua:[0-9]+:' "$d/err" | head -4)"
		# Where it was when it failed.
		[ -s "$d/chaos.bin" ] && "$lp" report -q "$d/chaos.bin" -f top -n 5 2>/dev/null |
			head -9 | sed 's/^/	/'
		return
	fi
	check_stream "$run" "$d" "$d/chaos.bin" "$s" "$line" "$el"
	grep -aq "$vmname" "$d/chaos.bin" || fail "$run: the stream does not name the VM '$vmname'"
}

# check_stream RUN DIR FILE SECS CHAOSLINE ELAPSED
check_stream() {
	local run=$1 d=$2 f=$3 s=$4 line=$5 el=$6 rc
	# The workload ran its mix, not a single stuck step.
	local rounds flushes
	rounds=$(field rounds "$line")
	flushes=$(field flushes "$line")
	[ "${rounds:-0}" -ge $((2 * s)) ] ||
		fail "$run: only ${rounds:-0} rounds of the workload in $s s (want >= $((2 * s))): $line"
	local k never="" want="flushes chunks gc_full jit_off co_errors qsorts strings sorts deep_max
		traces_flushed"
	[ "${CHAOS_DEPTH:-900}" -lt 900 ] || want="$want stack_overflows"
	for k in $want; do
		[ "$(field $k "$line")" ] || never="$never $k"
	done
	[ -z "$never" ] || fail "$run: the workload never reached:$never"
	# The stream parses completely.
	"$lp" report -q "$f" -f collapsed -o "$d/rep.folded" 2>"$d/rep.err"
	rc=$?
	[ $rc = 0 ] || { fail "$run: luaprof report exited $rc: $(head -3 "$d/rep.err")"; return; }
	"$lp" report "$f" -f top -n 1 -o "$d/top.txt" 2>/dev/null ||
		{ fail "$run: luaprof report -f top failed"; return; }
	local head n dropped snap states
	head=$(head -1 "$d/top.txt")
	n=$(echo "$head" | sed -n 's/.*Total samples: \([0-9]*\).*/\1/p')
	dropped=$(echo "$head" | sed -n 's/.*Dropped: \([0-9]*\).*/\1/p')
	[ -n "$n" ] && [ -n "$dropped" ] || { fail "$run: no sample count in: $head"; return; }
	# Samples in the file against the agent's counters when the workload ended: at least
	# those, plus no more than the rest of the run (closing) can have taken.
	snap=$(field samples "$line")
	local dur dur_snap
	dur=$(sed -n 's/^luaprof record: \([0-9.]*\) s profiled.*/\1/p' "$d/err")
	dur_snap=$(field duration "$line")
	[ -n "$dur" ] || dur=$el
	[ "$n" -ge "$snap" ] || fail "$run: $n samples in the file, $snap counted before the end"
	local extra
	extra=$(awk -v a="$dur" -v b="$dur_snap" -v r="$rate" 'BEGIN { x = (a - b) * r * 1.2 + 100
		printf "%d", (x < 100 ? 100 : x) }')
	[ $((n - snap)) -le "$extra" ] ||
		fail "$run: $((n - snap)) samples after the workload's end, more than $extra possible"
	# Every tick is a sample, or skipped by the agent's pacing (a sample costing more than
	# a quarter of the interval: deep stacks at 10 kHz), or merged by the kernel.
	local paced overruns
	paced=$(field paced "$line")
	overruns=$(field overruns "$line")
	[ $(( (n + ${paced:-0} + ${overruns:-0}) * 5)) -ge $((s * rate)) ] ||
		fail "$run: $n samples + ${paced:-0} paced + ${overruns:-0} overruns, want at least 20% of $((s * rate)) ticks"
	# Pacing keeps the handler under a quarter of the time (with slack for the clock).
	awk -v h="$(field handler "$line")" -v d="$dur_snap" 'BEGIN { exit !(h <= d * 0.35) }' ||
		fail "$run: the handler took $(field handler "$line") s of $dur_snap s"
	[ $((dropped * 20)) -lt $((n + dropped)) ] || fail "$run: $dropped of $((n + dropped)) dropped"
	# Samples per VM state: the file (one root per state) and the counters.
	"$lp" report -q "$f" --split -f collapsed -o "$d/split.folded" ||
		fail "$run: luaprof report --split failed"
	states=$(awk '{ split($1, a, ";"); c[a[1]] += $NF } END { for (k in c) printf "%s=%d\n", k, c[k] }' \
		"$d/split.folded")
	local st v
	for st in LFUNC TRACE GC; do
		v=$(echo "$states" | sed -n "s/^$st=//p")
		[ "${v:-0}" -gt 0 ] || fail "$run: no $st samples in the file: $(echo $states)"
		[ "$(field $st "$line")" -gt 0 ] || fail "$run: no $st samples counted by the agent"
	done
	echo "$states" | grep -Eq '^(C|F)FUNC=[1-9]' || fail "$run: no CFUNC or FFUNC samples: $(echo $states)"
	# Frames at the marked lines: the profile shows the workload, not only its VM.
	local m missing=""
	for m in $markers; do
		grep -q "@[^;]*chaos_sysprof.lua:${at[$m]}[; ]" "$d/rep.folded" || missing="$missing $m:${at[$m]}"
	done
	[ -z "$missing" ] || fail "$run: no frame at the marked lines$missing"
	echo "$run: ${s}s of workload, $rounds rounds, $flushes JIT flushes; $n samples" \
		"($(awk -v n="$n" -v d="$dur" 'BEGIN { printf "%.0f", (d > 0 ? n / d : 0) }')/s of" \
		"$rate asked), $dropped dropped, overruns $(field overruns "$line"), paced $(field paced "$line")," \
		"handler $(field handler "$line") s of $dur s profiled; run took $el s"
}

# host RUN CYCLES SECS [ENV...]: chaos_host's cycles of lua_close while running.
host() {
	local run=$1 cycles=$2 s=$3 d="$t/$1" lim rc t0 el
	shift 3
	mkdir -p "$d"
	lim=$((cycles * $(limit "$s")))
	t0=$(date +%s)
	env "$@" timeout -k 10 "$lim" "$t/host" build "$src" "$d" "$cycles" "$s" \
		$((1000000000 / rate)) 200 >"$d/out" 2>&1
	rc=$?
	el=$(($(date +%s) - t0))
	if [ $rc != 0 ]; then
		local why="exited $rc"
		[ $el -ge "$lim" ] && why="did not finish within $lim s (killed)"
		[ $rc -gt 128 ] && [ $rc != 137 ] && why="killed by signal $((rc - 128))"
		fail "$run: $why: $(grep -v '^chaos: ' "$d/out" | head -10)"
		return
	fi
	local k f
	for k in $(seq 0 $((cycles - 1))); do
		f="$d/host-$k.bin"
		"$lp" report -q "$f" -f collapsed -o "$d/host-$k.folded" 2>"$d/rep.err" ||
			fail "$run: luaprof report host-$k.bin exited $?: $(head -3 "$d/rep.err")"
	done
	local line rounds
	while read -r line; do
		rounds=$(field rounds "$line")
		[ "${rounds:-0}" -ge $((2 * s)) ] ||
			fail "$run: only ${rounds:-0} rounds of the workload in $s s: $line"
	done < <(grep '^chaos: ' "$d/out")
	[ "$(grep -c '^chaos: ' "$d/out")" = "$cycles" ] || fail "$run: not every cycle ran the workload"
	grep '^host cycle' "$d/out" | sed "s/^/$run: /"
	echo "$run: $cycles cycles took $el s"
}

record luajit "$secs" return "Debian luajit 2.1.0~beta3" luajit
s2=$((secs / 3 > 5 ? secs / 3 : 5))
hs=$((secs / 20 > 2 ? secs / 20 : 2))
host luajit-host 2 "$hs"
if [ -x "$lj2" ] && [ -f "$lj2lib/libluajit-5.1.so.2" ]; then
	record luajit2 "$s2" exit "Debian luajit2 (OpenResty)" "$root/$lj2"
	host luajit2-host 2 "$hs" LD_LIBRARY_PATH="$root/$lj2lib"
else
	echo "note: luajit2 not checked (apt-get download luajit2 libluajit2-5.1-2 failed: $(tail -n 1 "$t/dl.log" 2>/dev/null))"
fi

[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "ok"
