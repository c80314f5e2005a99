#!/usr/bin/env bash
# Sampled memory profiles of the collector's steps that traces run: trace_gc_memory.lua's
# loops (in coroutines, flushed every 10 rounds) run the collector from their code, and
# the collector allocates there (state GC: the trace's code is deeper in the host stack
# than the allocation). Profiled by `luaprof record --memory --sample 4K` under Debian's
# luajit and OpenResty's luajit2: such an allocation must be shown under its trace's frame
# (the agent keys that frame by the trace, kcode records, as the CPU profiler does), never
# with a raw 0x... address there; before, 0.3 to 1 % of the sampled bytes of every run were.
# Checked on `luaprof report -f collapsed`: no raw address frame; some GC allocation under
# a TRACE frame of the loops' function, whose Lua frame below it is at the trace's start.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
src=tests/integration/trace_gc_memory.lua

need_x86_64
need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
luajit2_fetch "$t/dl.log"

declare -A at
read_markers $src
chunk="@$src"

run() {
	local runner=$1 lj=$2 dir="$t/$1" out
	mkdir -p "$dir"
	if ! build/luaprof record -q --memory --sample 4K -o "$dir/mem.folded" -- "$lj" "$src" 1 \
		>"$dir/out" 2>"$dir/err"; then
		fail "$runner: luaprof record --memory failed: $(tail -3 "$dir/err")"
		return
	fi
	build/luaprof report -q -f collapsed "$dir/mem.bin" >"$dir/mem.rep" 2>"$dir/rerr" ||
		{ fail "$runner: luaprof report failed: $(head -3 "$dir/rerr")"; return; }
	out=$(awk -v c="$chunk" -v l="${at[loop]}" -v s="${at[side]}" '{
		n = $NF; stack = substr($0, 1, length($0) - length($NF) - 1)
		k = split(stack, fr, ";"); total += n
		for (i = 1; i <= k; i++)
			if (fr[i] ~ /^0x[0-9a-f]+$/) { raw += n; if (!ex) ex = stack; break }
		if (fr[k] != "GC") next
		for (i = 2; i <= k; i++) {
			if (fr[i] !~ /^TRACE \[/) continue
			line = fr[i]; sub(/.*:/, "", line) # where the trace starts
			if (fr[i] == "TRACE [" substr(fr[i], 8, index(fr[i], "]") - 8) "] " c ":" line &&
			    (line == l || line == s) && fr[i - 1] == c ":" line)
				gc += n
			else if (!wx) wx = stack
			break
		}
	} END { printf "%d %d %d\t%s\t%s\n", total, raw, gc, ex, wx }' "$dir/mem.rep")
	local total raw gc
	read -r total raw gc <<<"${out%%$'\t'*}"
	if [ "$raw" -gt 0 ]; then
		fail "$runner: $raw of $total bytes with a raw address frame: $(cut -f2 <<<"$out" | tr ';' ' ' | tail -c 300)"
	elif [ "$gc" -eq 0 ]; then
		fail "$runner: no GC allocation under a loop's TRACE frame at its start of $total bytes$(w=$(cut -f3 <<<"$out"); [ -n "$w" ] && echo ": $w" | tail -c 300)"
	else
		echo "ok $runner: $gc bytes of GC allocations under the loops' trace frames, none raw (of $total)"
	fi
}

run debian /usr/bin/luajit
if [ -x "${lj2:-}" ]; then
	run luajit2 "$lj2"
else
	echo "note: OpenResty's luajit2 could not be fetched (see above); Debian's luajit only"
fi
[ $fails -eq 0 ] || exit 1
echo "PASS $name"
