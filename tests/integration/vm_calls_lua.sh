#!/usr/bin/env bash
# Lua code that C code with no frame on the Lua stack runs, in CPU profiles (C mode) and
# sampled memory profiles: vm_calls_lua.lua runs Lua finalizers from collector steps (a
# compiled loop's trace runs the step; the interpreter's ffi.new does), a jit.attach
# handler (run by the compiler) and a Lua debug hook (called by lib_debug's C hook),
# profiled by `luaprof record` under Debian's luajit and OpenResty's luajit2. The agent
# gives such C code a C frame in the Lua stack (its return address), so that the report
# splits the Lua frames there, and leaves protected calls of C that entered none of the
# sample's Lua frames out of the host stack (the compiler's, below the handler): before,
# the finalizer's callers went after the collector's C frames together with the
# finalizer, the hook's after the hook's C frames and the handler's after the compiler's.
#
# Checked per runner, on `luaprof report -f collapsed` of the raw stream, for the samples
# whose innermost Lua frame is the finalizer's, the handler's or the hook's marked line
# (at least 40 of each), and for the allocations of a sampled memory profile (`record
# --memory --sample`) made in the finalizer and in the handler (at least 1 MB of each,
# in its interpreted and its compiled loop; of its C type parsing, 100 KB): at least 90 %
# of them have the shape
#   <host frames>;lua_pcall;@...:<main line>;<caller>;<C frames>;@...:<leaf line>
# (the callers' Lua frames in one run right after the script's entry, then non-Lua frames,
# then the leaf). Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
src=tests/integration/vm_calls_lua.lua

need_x86_64
need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
luajit2_fetch "$t/dl.log"

declare -A at
read_markers $src
f="@$PWD/$src"

# classify FOLDED: "KIND<TAB>VERDICT<TAB>COUNT<TAB>STACK" for the stacks whose innermost Lua
# frame is the finalizer's (fin, finalloc), the handler's (attach, attach_trace,
# attach_ffi) or the hook's (hook) line. VERDICT: good (the shape above: two Lua callers, the main chunk's line and the
# caller's; for the handler's work, a third after C frames, the handler's line: the
# resume, after which C frames again, or the call of the compiled loop), root (no Lua caller: a finalizer run by lua_close), other (Lua callers before
# C frames, but not those: a finalizer run by load's collector step, the handler run for
# the main chunk's own loop) or bad (the Lua frames not right after lua_pcall, which runs
# the script, or no C frame between the callers and the leaf).
classify() {
	awk -v f="$f" -v fin="${at[fin]}" -v finalloc="${at[finalloc]}" -v hook="${at[hook]}" \
	    -v attach="${at[attach]}" -v mfin="${at[main_fin]}" -v loop="${at[loop]}" \
	    -v alloc="${at[alloc]}" -v mhook="${at[main_hook]}" -v hooked="${at[hooked]}" \
	    -v mattach="${at[main_attach]}" -v wrap="${at[attach_wrap]}" \
	    -v attachffi="${at[attach_ffi]}" -v atrace="${at[attach_trace]}" \
	    -v afill="${at[attach_fill]}" '{
		n = $NF; stack = substr($0, 1, length($0) - length($NF) - 1)
		k = split(stack, fr, ";")
		leaf = 0
		for (i = k; i > 0 && !leaf; i--) if (fr[i] ~ /^[@=]/) leaf = i
		if (!leaf) next
		c3 = ""; adj = 0
		if (fr[leaf] == f ":" fin || fr[leaf] == f ":" finalloc) {
			kind = fr[leaf] == f ":" fin ? "fin" : "finalloc"
			m = f ":" mfin; c1 = f ":" loop; c2 = f ":" alloc
		} else if (fr[leaf] == f ":" attach) {
			kind = "attach"; m = f ":" mattach; c1 = c2 = "=gen"; c3 = f ":" wrap
		} else if (fr[leaf] == f ":" atrace) {
			kind = "attach_trace"; m = f ":" mattach; c1 = c2 = "=gen"; c3 = f ":" afill
			adj = 1
		} else if (fr[leaf] == f ":" attachffi) {
			kind = "attach_ffi"; m = f ":" mattach; c1 = c2 = "=gen"
		} else if (fr[leaf] == f ":" hook) {
			kind = "hook"; m = f ":" mhook; c1 = c2 = f ":" hooked
		} else next
		lua = 0; first = 0; last = 0; second = 0
		for (i = 1; i < leaf; i++) {
			if (fr[i] !~ /^[@=]/) continue
			lua++; last = i
			if (!first) first = i
			else if (!second) second = i
		}
		if (!lua) v = "root"
		else if (first == 1 || fr[first - 1] != "lua_pcall" || (!adj && leaf == last + 1))
			v = "bad"
		else if (lua == (c3 == "" ? 2 : 3) && fr[first] == m && second == first + 1 &&
			 (fr[second] == c1 || fr[second] == c2 ||
			  (c1 == "=gen" && fr[second] ~ /^=gen[0-9]:1$/)) &&
			 (c3 == "" || (fr[last] == c3 && last > second + 1)) &&
			 (!adj || leaf == last + 1))
			v = "good"
		else v = "other"
		print kind "\t" v "\t" n "\t" stack
	}' "$1"
}

# check RUNNER CLS KIND MIN: at least MIN of KIND's weight good or bad, 90 % of it good.
check() {
	local runner=$1 cls=$2 kind=$3 min=$4 total good bad
	total=$(awk -F'\t' -v k=$kind '$1 == k && ($2 == "good" || $2 == "bad") { n += $3 } END { print n + 0 }' "$cls")
	good=$(awk -F'\t' -v k=$kind '$1 == k && $2 == "good" { n += $3 } END { print n + 0 }' "$cls")
	bad=$(awk -F'\t' -v k=$kind '$1 == k && $2 == "bad" { n += $3 } END { print n + 0 }' "$cls")
	if [ "$total" -lt "$min" ]; then
		fail "$runner: only $total of $kind under the marked Lua callers or out of place (want $min or more)"
		return
	fi
	if [ $((good * 100)) -ge $((total * 90)) ]; then
		echo "ok $runner: $good of $total $kind in place ($bad not)"
	else
		fail "$runner: $good of $total $kind with their callers before the C code that ran them (want 90 %): $(
			awk -F'\t' -v k=$kind '$1 == k && $2 == "bad" { print $3 " " $4 }' "$cls" | head -2)"
	fi
}

# run RUNNER LUAJIT: profiles the workload and checks its finalizer and hook samples, then
# the sampled memory profile of the finalizer's allocations.
run() {
	local runner=$1 lj=$2 dir="$t/$1"
	mkdir -p "$dir"
	if ! (cd "$dir" && "$OLDPWD/build/luaprof" record --rate 1000 -o out.folded \
		-- "$lj" "$OLDPWD/$src") >"$dir/out" 2>"$dir/err"; then
		fail "$runner: luaprof record failed: $(tail -3 "$dir/err")"
		return
	fi
	build/luaprof report -q -f collapsed "$dir/out.bin" >"$dir/report.folded" 2>"$dir/rerr" ||
		{ fail "$runner: luaprof report failed: $(head -3 "$dir/rerr")"; return; }
	classify "$dir/report.folded" >"$dir/cls"
	[ -z "${VM_CALLS_LUA_VERBOSE:-}" ] || { echo "--- $runner"; cut -f1-4 "$dir/cls" | sort | uniq -c; }
	check $runner "$dir/cls" fin 40
	check $runner "$dir/cls" attach 40
	check $runner "$dir/cls" hook 40
	# Sampled memory profile (allocated bytes): the stacks go through the same merge.
	if ! (cd "$dir" && "$OLDPWD/build/luaprof" record --memory --sample 16K -o mem.folded \
		-- "$lj" "$OLDPWD/$src" 10 alloc) >"$dir/mout" 2>"$dir/merr"; then
		fail "$runner: luaprof record --memory failed: $(tail -3 "$dir/merr")"
		return
	fi
	build/luaprof report -q -f collapsed "$dir/mem.bin" >"$dir/mreport.folded" 2>"$dir/rerr" ||
		{ fail "$runner: luaprof report (memory) failed: $(head -3 "$dir/rerr")"; return; }
	classify "$dir/mreport.folded" >"$dir/mcls"
	[ -z "${VM_CALLS_LUA_VERBOSE:-}" ] || cut -f1-4 "$dir/mcls" | sort | uniq -c
	check $runner "$dir/mcls" finalloc 1000000
	check $runner "$dir/mcls" attach 1000000
	check $runner "$dir/mcls" attach_trace 1000000
	check $runner "$dir/mcls" attach_ffi 100000
}

run luajit luajit
if [ -n "${lj2:-}" ] && [ -x "$lj2" ]; then
	run luajit2 "$PWD/$lj2"
else
	echo "note: luajit2 not checked (apt-get download luajit2 libluajit2-5.1-2 failed: $(tail -n 1 "$t/dl.log" 2>/dev/null))"
fi
[ $fails = 0 ] || exit 1
echo ok
