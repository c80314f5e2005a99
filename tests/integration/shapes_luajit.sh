#!/usr/bin/env bash
# Known stack shapes, with exact frame order and current lines, in C-mode profiles of real
# programs (issue 3). shapes_luajit.lua runs one workload per shape in which one stack
# dominates (a burn on a marked line for SHAPES_SECS seconds, 1 kHz wall clock): recursive
# Lua, pcall, xpcall, coroutine.resume and coroutine.wrap continuing into the resumer, an
# FFI call into a C library (shapes_lib.c), an FFI callback (qsort with a Lua comparator), a
# C builtin calling back (table.sort), __index and __add in Lua, errors unwound by pcall
# (through Lua and through a C builtin), a line whose time goes to the interpreter's C
# helpers (JIT off: VM state INTERP, frames from the walk's registers; in C mode the
# samples in the helpers must have the full stack, in L mode the line), ffi.cast with a
# type string (its parser runs under a VM entry of its own, which must not take the Lua
# frames; JIT off), an FFI callback doing almost nothing (its entry and exit carry the
# caller's frames), and, in the
# embedding host (shapes_host.c),
# Lua -> C function -> lua_call -> Lua and errors unwound through it; with the JIT off and
# on (then the burn is a trace calling shapes_burn, plus a pure Lua loop seen as TRACE).
#
# Runners: Debian's /usr/bin/luajit and shapes_host on Debian's libluajit-5.1.so, then
# OpenResty's luajit2 (its /usr/bin/luajit and its libluajit-5.1.so under shapes_host)
# extracted from the .debs when apt-get can download them (cached in build/shapes/).
#
# For each profile `luaprof report -f collapsed` is reduced to its named frames: raw
# addresses, object+offset frames (static code of stripped objects) and lj_vm_* frames are
# VM-internal and dropped. The most frequent reduced stack must then be exactly, from
# `main` on, the expected sequence: no frame missing, duplicated or out of order, Lua
# frames as @chunk:current-line. Also checked: in that stack static C code (object+offset)
# never directly follows a Lua frame (VM-internal frames out of place), no stack has Lua
# frames before `main` (a Lua segment not spliced at its C entry), unwound frames never
# appear under a later burn,
# the unnamed frame that calls shapes_burn from a trace lies in that trace's machine code
# (jit.util.tracemc), and the stream names the expected VM build.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
[ -z "${SHAPES_KEEP:-}" ] || trap test_end EXIT # SHAPES_KEEP=1 keeps $t
secs=${SHAPES_SECS:-0.2}  # per shape; SHAPES_VERBOSE=1 prints every dominant stack
src=tests/integration/shapes_luajit.lua

need_x86_64
need_build luaprof.so luaprof

# -- Debian's luajit and libluajit-5.1-dev, installed when missing and allowed.
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/libshapes.so" tests/integration/shapes_lib.c -O2 -fPIC -shared || exit 1
cc_test "$t/shapes_host" tests/integration/shapes_host.c -O1 -I$inc -lluajit-5.1 || exit 1

# -- OpenResty's luajit2, extracted from its .debs (tests/integration/lib/luajit.sh).
luajit2_fetch "$t/dl.log"

# -- Marker lines of the workload: "--@name" at the end of a line.
declare -A at
read_markers $src

# Expected frames after `main`'s VM entry. "@m" is the Lua frame at marker m's line; "a|b"
# accepts either name. LEAF is the burn: the Lua loop with the JIT off; with it on, the
# trace's line in cspin and the C function it calls.
body() { # SHAPE
	case $1 in
	loop) echo "@run @loop @spin" ;;
	recursive) echo "@run @recursive @rec_call @rec_call @rec_call @rec_base LEAF" ;;
	pcall) echo "@run @pcall pcall @protected LEAF" ;;
	xpcall) echo "@run @xpcall xpcall @protected LEAF" ;;
	resume) echo "@run @resume coroutine.resume @cobody LEAF" ;;
	wrap) echo "@run @wrap coroutine.wrap_aux @cobody LEAF" ;;
	ffi) echo "@run @ffi ffi.meta.__call shapes_burn" ;;
	qsort) echo "@run @qsort ffi.meta.__call qsort|qsort_r @cmp LEAF" ;;
	sort) echo "@run @sort table.sort @lcmp LEAF" ;;
	index) echo "@run @index @index_mm LEAF" ;;
	add) echo "@run @add @add_mm LEAF" ;;
	unwind) echo "@run @unwind LEAF" ;;
	helpers) echo "@run @helpers @rec_call @rec_call @rec_base @helpers_line" ;;
	ffi_cast) echo "@run @ffi_cast @cast_line ffi.cast" ;;
	host) echo "@run @host shapes_host_call @hostcb LEAF" ;;
	host_unwind) echo "@run @host_unwind LEAF" ;;
	esac
}

# expand SEQUENCE JIT: marker names to @chunk:line, LEAF to the burn's frames, ';'-joined.
expand() {
	local out="" tok leaf x
	if [ "$2" = off ]; then leaf="@spin"; else leaf="@cspin shapes_burn"; fi
	for tok in $1; do
		[ "$tok" = LEAF ] && tok=$leaf
		for x in $tok; do
			case $x in
			@*) x="@$src:${at[${x#@}]}" ;;
			esac
			out="$out${out:+;}$x"
		done
	done
	echo "$out"
}

# reduce FOLDED: "count<TAB>reduced<TAB>raw" per reduced stack (VM-internal frames dropped),
# most frequent first, raw being its most frequent unreduced stack; first "total<TAB>N".
reduce() {
	awk '{
		n = $NF; stack = substr($0, 1, length($0) - length($NF) - 1)
		k = split(stack, f, ";"); out = ""
		for (i = 1; i <= k; i++) {
			# (the frame of a trace below C code it called: TRACE [n] not at the leaf;
			# the qsort internals of glibc, named from the libc6-dbg debug file where it is
			# installed, else libc.so.6+0xOFFSET)
			if (f[i] ~ /^0x[0-9a-f]+$/ || f[i] ~ /^[^@;]+\+0x[0-9a-f]+$/ || f[i] ~ /^lj_vm_/ ||
			    (f[i] ~ /^TRACE \[/ && i < k) || f[i] ~ /^(msort_with_tmp|_quicksort)(\.|$)/)
				continue
			out = out (out == "" ? "" : ";") f[i]
		}
		sum[out] += n; total += n
		if (n > rawn[out]) { rawn[out] = n; raw[out] = stack }
	} END {
		print "total\t" total
		for (s in sum) print sum[s] "\t" s "\t" raw[s] | "sort -t\"\t\" -k1,1nr"
	}' "$1"
}

# matches REDUCED EXPECTED: the reduced stack from `main` on equals EXPECTED, where an
# expected frame "a|b" accepts a or b.
matches() {
	awk -v got="$1" -v want="$2" 'BEGIN {
		i = index(";" got, ";main;"); if (i == 0) exit 1
		ng = split(substr(got, i), g, ";"); nw = split(want, w, ";")
		if (ng != nw) exit 1
		for (j = 1; j <= nw; j++) {
			na = split(w[j], alt, "|"); ok = 0
			for (a = 1; a <= na; a++) if (g[j] == alt[a]) ok = 1
			if (!ok) exit 1
		}
	}'
}

# misplaced RAW: prints the first static-code frame (object+offset) that follows a Lua frame
# with only VM code between: C code the VM runs for a Lua frame belongs under the builtin
# or C function that the Lua stack shows, so there it was spliced in the wrong place.
misplaced() {
	echo "$1" | awk -F';' '{
		after_lua = 0
		for (i = 1; i <= NF; i++) {
			if ($i ~ /^@/) after_lua = 1
			else if ($i ~ /^0x[0-9a-f]+$/ || $i ~ /^lj_vm_/ || $i ~ /^TRACE \[/) continue
			else if ($i ~ /^[^@;]+\+0x[0-9a-f]+$/ && after_lua) { print $i; exit }
			else after_lua = 0
		}
	}'
}

# check RUNNER JIT DIR PREFIX VMNAME: asserts every profile of one run.
check() {
	local runner=$1 jit=$2 dir=$3 prefix=$4 vmname=$5 shape f top red raw share want bad
	local nok=0 n=0
	for f in "$dir"/*.bin; do
		shape=$(basename "$f" .bin)
		n=$((n + 1))
		local what="$runner, JIT $jit, $shape"
		if ! build/luaprof report -q "$f" -f collapsed >"$dir/$shape.folded" 2>"$t/err"; then
			fail "$what: luaprof report exited $?: $(head -3 "$t/err")"
			continue
		fi
		grep -aq "$vmname" "$f" || fail "$what: the stream does not name the VM '$vmname'"
		case $shape in
		helpers | qsort_glue) # by VM state: the collector's samples left out
			build/luaprof report -q "$f" --split -f collapsed >"$dir/$shape.split" 2>/dev/null ;;
		esac
		if [ "$shape" = helpers ]; then
			# Samples whose leaf is static C code (object+offset) outside the collector:
			# the helpers. Nearly all must have exactly the expected stack (every
			# recursion level, the marked line); before the helpers' frames were read off
			# the walk's registers they had no Lua frame. The collector's samples, half
			# of this shape, are left out (--split's GC root).
			want="$prefix;$(expand "$(body "$shape")" "$jit")"
			grep -v '^GC;' "$dir/$shape.split" |
				awk '{ k = split($0, f, ";"); sub(/ [0-9]+$/, "", f[k])
					if (f[k] ~ /^[^@;]+\+0x[0-9a-f]+$/) print }' |
				sed 's/^[A-Z]*;//' >"$dir/$shape.helpers"
			reduce "$dir/$shape.helpers" >"$dir/$shape.hreduced"
			htotal=$(head -1 "$dir/$shape.hreduced" | cut -f2)
			hok=$(awk -F'\t' 'NR > 1 { print $1 "\t" $2 }' "$dir/$shape.hreduced" |
				while IFS="$(printf '\t')" read -r c r; do
					matches "$r" "$want" && echo "$c"; done | awk '{ n += $1 } END { print n + 0 }')
			if [ "${htotal:-0}" -ge 20 ] && [ $((hok * 100)) -ge $((htotal * 80)) ]; then
				nok=$((nok + 1))
				[ -z "${SHAPES_VERBOSE:-}" ] ||
					echo "ok $what: $hok of $htotal samples in the helpers with the full stack"
			else
				fail "$what: $hok of ${htotal:-0} samples in the helpers have the stack
	$want
  most frequent: $(sed -n 2p "$dir/$shape.hreduced" | cut -f1,2)"
			fi
			continue
		fi
		if [ "$shape" = qsort_glue ]; then
			# Of the samples under qsort outside the collector, nearly all carry the
			# calling line before qsort (the callback's entry and exit included), and
			# hardly any has it spliced after qsort's C code.
			read -r qt qok qbad < <(grep -v '^GC;' "$dir/$shape.split" 2>/dev/null |
				awk -v want="@$src:${at[qsort_glue]};" '{ n = $NF
				if ($0 !~ /;qsort(_r)?;/) next
				t += n; i = index($0, want); q = match($0, /;qsort(_r)?;/)
				if (i && i < q) ok += n
				if (substr($0, q) ~ /;@[^;]*:'"${at[qsort_glue]}"';/) bad += n }
				END { print t + 0, ok + 0, bad + 0 }')
			# (The comparator's trace sampled in its exit handler, VM code run below the
			# callback's C frame, used to put the caller's frames after qsort: 4-7 per
			# 1000 samples under qsort; a CI run once drew 3 of 93 and failed here).
			# JIT off, 95 %: a builtin's entry with the PC register at its first
			# instruction (not yet past it) used to lose the Lua frames of 4-10 %.
			qmin=90
			[ $jit = off ] && qmin=95
			if [ "$qt" -ge 20 ] && [ $((qok * 100)) -ge $((qt * qmin)) ] &&
				[ $((qbad * 100)) -le $((qt * 3)) ]; then
				nok=$((nok + 1))
				[ -z "${SHAPES_VERBOSE:-}" ] ||
					echo "ok $what: $qok of $qt samples under qsort below the calling line, $qbad after it"
			else
				fail "$what: $qok of $qt samples under qsort have the calling line before it, $qbad after it"
			fi
			continue
		fi
		if [ "$shape" = helpers_leaf ]; then
			# L mode: a sample is the leaf Lua frame, then the host leaf; most must be
			# the marked line (before the helpers' frames were read off the walk's
			# registers, most were the host leaf alone).
			share=$(awk -v want="@$src:${at[helpers_line]}" '{ t += $NF
				if (index($0, want ";") == 1 || index($0, want " ") == 1) n += $NF }
				END { print t ? int(n * 100 / t) : 0 }' "$dir/$shape.folded")
			if [ "$share" -ge 40 ]; then
				nok=$((nok + 1))
				[ -z "${SHAPES_VERBOSE:-}" ] || echo "ok $what: $share% at the line"
			else
				fail "$what: $share% of L-mode samples at @$src:${at[helpers_line]}: $(sort -t' ' -k2 -nr "$dir/$shape.folded" | head -3 | tr '\n' '|')"
			fi
			continue
		fi
		reduce "$dir/$shape.folded" >"$dir/$shape.reduced"
		total=$(head -1 "$dir/$shape.reduced" | cut -f2)
		top=$(sed -n 2p "$dir/$shape.reduced")
		share=$(( ${top%%	*} * 100 / (total > 0 ? total : 1) ))
		red=$(echo "$top" | cut -f2)
		raw=$(echo "$top" | cut -f3)
		bad=""
		if [ "$jit" = on ] && [ "$shape" = loop ]; then
			# The trace's frame under the Lua frames below it (C mode's full stack).
			want="$prefix;$(expand "$(body "$shape")" "$jit");TRACE [N] @$src:${at[spin]}"
			echo "$red" | grep -Eq ";TRACE \[[0-9]+\] @$src:${at[spin]}\$" || bad=1
			matches "${red%;TRACE *}" "${want%;TRACE *}" || bad=1
		else
			want="$prefix;$(expand "$(body "$shape")" "$jit")"
			matches "$red" "$want" || bad=1
		fi
		[ "$share" -ge 40 ] || bad=1
		if [ -n "$bad" ]; then
			fail "$what: dominant stack ($share% of $total samples) is
	$red
  want (from main, VM-internal frames dropped)
	$want"
		else
			nok=$((nok + 1))
			[ -z "${SHAPES_VERBOSE:-}" ] ||
				echo "ok $what: $share% of $total samples: ${red#*;lua_pcall;}"
		fi
		# VM-internal frames in place too: static C code never right after a Lua frame.
		bad=$(misplaced "$raw")
		[ -z "$bad" ] || fail "$what: $bad follows a Lua frame in ${raw:0:600}"
		# Lua frames are spliced after their C entry, never ahead of the host stack.
		bad=$(awk '{ s = $0; sub(/ [0-9]+$/, "", s); i = index(s, ";main;")
			pre = i ? substr(s, 1, i) : s
			if (s ~ /^@/ || (i && pre ~ /(^|;)@/)) n += $NF; t += $NF }
			END { if (n * 50 > t) print n " of " t }' "$dir/$shape.folded")
		[ -z "$bad" ] || fail "$what: $bad samples have Lua frames ahead of the host stack"
		# ffi.cast's own VM entry (a protected call of its type parser) takes no Lua
		# frames: the first Lua frame never follows static C code.
		if [ "$shape" = ffi_cast ]; then
			bad=$(awk '{ n = $NF; s = $0; sub(/ [0-9]+$/, "", s); k = split(s, f, ";")
				t += n
				for (i = 1; i <= k && f[i] !~ /^@/; i++) ;
				for (j = i - 1; j > 0 && (f[j] ~ /^lj_vm_/ || f[j] ~ /^0x[0-9a-f]+$/ ||
							f[j] ~ /^TRACE \[/); j--) ;
				if (i <= k && j > 0 && f[j] ~ /^[^@;]+\+0x[0-9a-f]+$/) b += n }
				END { if (b * 100 > t) print b " of " t }' "$dir/$shape.folded")
			[ -z "$bad" ] || fail "$what: $bad samples have Lua frames spliced inside ffi.cast's C code"
		fi
		# A coroutine resumed by an assembler builtin runs on a C frame of its own (the
		# resume's, VM code): right after the builtin in every sample, whatever the leaf.
		# Samples in C code that the coroutine's trace called (shapes_burn, JIT on) had
		# it after the coroutine's Lua frames instead: two towers for one path (then
		# 85 % of a wrap loop's samples).
		case $shape in
		resume | wrap)
			bad=$(awk -v b="$(body "$shape" | awk '{ print $3 }')" '{ n = $NF; t += n
				s = $0; sub(/ [0-9]+$/, "", s); k = split(s, f, ";")
				for (i = 1; i < k; i++)
					if (f[i] == b && f[i + 1] !~ /^lj_vm_/) { m += n; break } }
				END { if (m * 100 > t * 2) print m " of " t }' "$dir/$shape.folded")
			[ -z "$bad" ] || fail "$what: $bad samples have no VM frame right after the resuming builtin"
			;;
		esac
		# No stale frames: nothing of the unwound calls under a later burn.
		case $shape in
		unwind | host_unwind)
			if grep -E "@$src:(${at[thrower]}|${at[badcmp]}|${at[unwind_pcall]}|${at[unwind_sort]}|${at[host_unwind_pcall]});(.*;)?(@$src:(${at[spin]}|${at[cspin]})|shapes_burn)( |;)" \
				"$dir/$shape.folded" >"$t/stale"; then
				fail "$what: unwound frames under a burn: $(head -c 300 "$t/stale")"
			fi ;;
		esac
		# JIT on: the burn's stack has the trace's frame (the trace runs on the native
		# frame of the VM entry that started it): named after a live trace, or an
		# unnamed address inside one's machine code.
		if [ "$jit" = on ] && [ "$shape" != loop ] && [ "$shape" != ffi ]; then
			local addr addrs ok named tn
			addrs=$(echo "$raw" | tr ';' '\n' | grep -E '^0x[0-9a-f]+$')
			named=$(echo "$raw" | awk -F';' '{ for (i = 1; i < NF; i++)
				if ($i ~ /^TRACE \[[0-9]+\] /) { sub(/^TRACE \[/, "", $i); sub(/\].*/, "", $i); print $i } }')
			[ -n "$addrs$named" ] || fail "$what: no trace frame in ${raw:0:600}"
			for addr in $addrs; do
				ok=0
				while read -r lo hi tn; do
					[ $((addr)) -ge "$lo" ] && [ $((addr)) -lt "$hi" ] && ok=1
				done <"$dir/$shape.traces"
				[ $ok = 1 ] || fail "$what: frame $addr is not in any trace's machine code: ${raw:0:600}"
			done
			for tn in $named; do
				awk -v n="$tn" '$3 == n { f = 1 } END { exit !f }' "$dir/$shape.traces" ||
					fail "$what: frame of trace $tn, which is not alive: ${raw:0:600}"
			done
		fi
	done
	echo "$runner, JIT $jit: $nok of $n dominant stacks as expected"
}

# run RUNNER PREFIX VMNAME CMD...: both JIT modes of one interpreter.
run() {
	local runner=$1 prefix=$2 vmname=$3 jit
	shift 3
	for jit in off on; do
		local dir="$t/$runner-$jit"
		mkdir -p "$dir"
		if ! "$@" $src build "$dir" $jit "$t/libshapes.so" "$secs" >"$dir/out" 2>&1; then
			fail "$runner, JIT $jit: the workload failed: $(tail -5 "$dir/out")"
			continue
		fi
		# Every shape runs; only the host's own shapes are skipped outside the host, and
		# the interpreter's (helpers) with the JIT on.
		if grep -Ev '^skip (host|helpers|ffi_cast)' "$dir/out" | grep -q '^skip' ||
			{ [ "${runner%host}" != "$runner" ] &&
			  grep -Ev '^skip (helpers|ffi_cast)' "$dir/out" | grep -q '^skip'; }; then
			fail "$runner, JIT $jit: shapes skipped: $(grep '^skip' "$dir/out" | tr '\n' ' ')"
		fi
		check "$runner" $jit "$dir" "$prefix" "$vmname"
	done
}

debvm="Debian luajit 2.1.0~beta3"
lj2vm="Debian luajit2 (OpenResty)"
run luajit "main;lua_cpcall;lua_pcall" "$debvm" luajit
run host "main;lua_pcall" "$debvm" "$t/shapes_host"
if [ -x "$lj2" ] && [ -f "$lj2lib/libluajit-5.1.so.2" ]; then
	run luajit2 "main;lua_cpcall;lua_pcall" "$lj2vm" "$lj2"
	run luajit2-host "main;lua_pcall" "$lj2vm" env LD_LIBRARY_PATH="$lj2lib" "$t/shapes_host"
else
	echo "note: luajit2 not checked (apt-get download luajit2 libluajit2-5.1-2 failed: $(tail -n 1 "$t/dl.log" 2>/dev/null))"
fi

# A C module required while sampling, its code running at once: until the writer thread
# has read the module's unwind table, walks through its frames cannot go on. They used to
# end there unmarked (the report then rooted the samples at the Lua frames: a quarter of
# them on a short run); now the handler wakes the writer at the first such walk and the
# walk is counted as cut (meta truncated): a sample or two, none when the writer happened
# to read the table before the module's code was first sampled.
mkdir -p "$t/cmod"
cc_test "$t/cmod/memprof_cmod.so" tests/integration/memprof_cmod.c -O2 -fPIC -shared -I$inc ||
	fails=$((fails + 1))
cat >"$t/cmodcpu.lua" <<'EOF'
package.cpath = arg[1] .. "/?.so;" .. package.cpath
local m = require "memprof_cmod"
m.spin(0.3) --@spin
EOF
build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/cmodcpu.folded" -- \
	luajit "$t/cmodcpu.lua" "$t/cmod" >/dev/null 2>"$t/err" || fail "record cmodcpu.lua: $(cat "$t/err")"
read -r whole rooted < <(awk '/memprof_cmod_spin/ { w += $NF
	if ($0 ~ /(^|;)main;.*lua_pcall;@[^;]*cmodcpu\.lua:3;(lj_vm[^;]*;)?memprof_cmod_spin(;|$)/) r += $NF }
	END { print w + 0, r + 0 }' "$t/cmodcpu.folded")
cut=$(build/luaprof report -f info "$t/cmodcpu.bin" 2>/dev/null | sed -n 's/^meta.truncated: //p')
[ "$whole" -ge 100 ] && [ $((whole - rooted)) -le 5 ] && [ "${cut:-99}" -le 5 ] ||
	fail "C module required while sampling: $rooted of $whole samples in memprof_cmod_spin rooted at main, ${cut:-?} cut:
$(grep memprof_cmod_spin "$t/cmodcpu.folded" | grep -Ev "(^|;)main;" | sort -t' ' -k2 -nr | head -3)"

# A C function that resumes a coroutine with lua_resume (a scheduler written in C):
# nothing links the coroutine to it, and the coroutine's samples had none of the frames
# outside it (rooted at the VM entry, "lj_vm_asm_begin;memprof_cmod_resume;..."). The
# thread running that C code is found from the main thread down the coroutines its top
# frames run, and taken when the native stack confirms it. Lines: 6 the coroutine's burn,
# 10 its body; the main chunk resumes it from C (20), through a coroutine resumed from C
# (22, that coroutine 13), through coroutine.wrap (24, its body 16), or through a
# coroutine resumed by C code whose argument names no thread (26): that coroutine is not
# found, the main thread's C code is a guess the native stack refutes, and the main
# chunk's frames must not be put right above the inner coroutine's (its own missing).
# The burn's % runs in a helper of the interpreter's block (JIT off): the coroutine's
# interpreter behind it counted as a second anchor, and a fifth of the wrap shape's
# samples had the main chunk's line one segment in.
cat >"$t/csched.lua" <<'EOF'
package.cpath = arg[1] .. "/?.so;" .. package.cpath
local m = require "memprof_cmod"
local clock = os.clock
local function burn(s)
  local t0, x = clock(), 0
  repeat for i = 1, 2000 do x = x + i % 7 end until clock() - t0 >= s
  return x
end
local inner = coroutine.create(function()
  while true do burn(0.002) coroutine.yield() end
end)
local outer = coroutine.create(function()
  while true do m.resume(inner) coroutine.yield() end
end)
local wrapped = coroutine.wrap(function()
  while true do m.resume(inner) coroutine.yield() end
end)
local t0, how = clock(), arg[2]
if how == "c" then
  while clock() - t0 < 0.3 do m.resume(inner) end
elseif how == "cc" then
  while clock() - t0 < 0.3 do m.resume(outer) end
elseif how == "wrap" then
  while clock() - t0 < 0.3 do wrapped() end
else
  while clock() - t0 < 0.3 do m.resume_in({ outer }) end
end
EOF
R='(lj_vm[^;]*;)?memprof_cmod_resume;@[^;]*csched\.lua'
for jit in on off; do
	for how in c cc wrap hidden; do
		build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/csched.$how.folded" -- \
			luajit -j$jit "$t/csched.lua" "$t/cmod" $how >/dev/null 2>"$t/err" ||
			fail "record csched.lua $how, JIT $jit: $(cat "$t/err")"
		case $how in
		c) want=":20;$R:10;" ;;
		cc) want=":22;$R:13;$R:10;" ;;
		wrap) want=":24;coroutine\.wrap_aux;lj_vm[^;]*;@[^;]*csched\.lua:16;$R:10;" ;;
		hidden) want="" ;;
		esac
		read -r all rooted skipped < <(awk -v want="$want" '/csched\.lua:10;@[^;]*csched\.lua:6(;| )/ {
				a += $NF
				if (want != "" && $0 ~ ("(^|;)main;.*lua_pcall;@[^;]*csched\\.lua" want)) r += $NF
				if ($0 ~ /csched\.lua:26;/ && $0 !~ /csched\.lua:13;/) s += $NF }
			END { print a + 0, r + 0, s + 0 }' "$t/csched.$how.folded")
		if [ "$how" = hidden ]; then
			[ "$all" -ge 100 ] && [ "$skipped" = 0 ] ||
				fail "C scheduler, JIT $jit, $how: $skipped of $all samples of the inner coroutine put under the main chunk's frames without the coroutine between:
$(grep 'csched.lua:26;' "$t/csched.$how.folded" | grep -v 'csched.lua:13;' | sort -t' ' -k2 -nr | head -3)"
		else
			[ "$all" -ge 100 ] && [ $((rooted * 100)) -ge $((all * 95)) ] ||
				fail "C scheduler, JIT $jit, $how: $rooted of $all samples of a coroutine resumed from C under main..lua_pcall and every frame between:
$(sort -t' ' -k2 -nr "$t/csched.$how.folded" | head -3)"
		fi
	done
done

# The C function's own time after its lua_resume returned: the VM's current thread is
# still the coroutine (yielded, no C frame) and vmstate still INTERP from the resume. The
# function's thread is found as above and the samples are the function's (CFUNC), under
# the line calling it, from the main chunk (line 5) and from a coroutine.wrap (7, the
# main chunk's call 9). They were rooted at the VM entry, "lj_vm_asm_begin;...resume_spin".
cat >"$t/cafter.lua" <<'EOF'
package.cpath = arg[1] .. "/?.so;" .. package.cpath
local m = require "memprof_cmod"
local function idle() return coroutine.create(function() coroutine.yield() end) end
for _ = 1, 50 do
  m.resume_spin(idle(), 0.003)
  local w = coroutine.wrap(function()
    m.resume_spin(idle(), 0.003)
  end)
  w()
end
EOF
R='lj_vm[^;]*;memprof_cmod_resume_spin(;[^;@]+)*'
for jit in on off; do
	build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/cafter.folded" -- \
		luajit -j$jit "$t/cafter.lua" "$t/cmod" >/dev/null 2>"$t/err" ||
		fail "record cafter.lua, JIT $jit: $(cat "$t/err")"
	read -r all top wrapped < <(awk -v r="$R" '/memprof_cmod_resume_spin/ { a += $NF
			if ($0 ~ ("(^|;)main;.*lua_pcall;@[^;]*cafter\\.lua:5;" r " [0-9]+$")) t += $NF
			if ($0 ~ ("(^|;)main;.*lua_pcall;@[^;]*cafter\\.lua:9;coroutine\\.wrap_aux;lj_vm[^;]*;@[^;]*cafter\\.lua:7;" r " [0-9]+$")) w += $NF }
		END { print a + 0, t + 0, w + 0 }' "$t/cafter.folded")
	[ "$all" -ge 100 ] && [ "$top" -ge $((all * 3 / 10)) ] && [ "$wrapped" -ge $((all * 3 / 10)) ] &&
		[ $(((top + wrapped) * 100)) -ge $((all * 95)) ] ||
		fail "C code after its lua_resume, JIT $jit: $top (main chunk) + $wrapped (coroutine) of $all samples under the calling line:
$(grep memprof_cmod_resume_spin "$t/cafter.folded" | sort -t' ' -k2 -nr | head -3)"
done

# The interpreter back from a C call that clobbered its BASE register (lj_tab_len for
# `#t`), before it restores BASE from rbp: the sample is the running line's, in the main
# thread and in a coroutine (1.8-2.5 % of the samples had no Lua frame, and in the
# coroutine no root).
cat >"$t/len.lua" <<'EOF'
local function fill(n) local t = {} for i = 1, n do t[#t+1] = i end return t end
local w = coroutine.wrap(function() while true do fill(3000) coroutine.yield() end end)
for i = 1, 6000 do fill(3000) w() end
EOF
build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/len.folded" -- \
	luajit -joff "$t/len.lua" >/dev/null 2>"$t/err" || fail "record len.lua: $(cat "$t/err")"
# Samples at the loop's own lines with nothing above them (the main chunk's line 3, the
# coroutine's line 2: its yield, the resume) are the running line's too, and so are those
# in the switch's builtins: the main chunk in coroutine.wrap_aux, the coroutine in
# coroutine.yield under it (3 in 1,336 on a faster host, which the test took for lost).
read -r all lost < <(awk '{ a += $NF }
		!/(^|;)main;.*lua_pcall;@[^;]*len\.lua:3;(coroutine\.wrap_aux;lj_vm[^;]*;@[^;]*len\.lua:2;)?@[^;]*len\.lua:1( |;)/ &&
		!/(^|;)main;.*lua_pcall;@[^;]*len\.lua:3(;coroutine\.wrap_aux;lj_vm[^;]*;@[^;]*len\.lua:2)? [0-9]+$/ &&
		!/(^|;)main;.*lua_pcall;@[^;]*len\.lua:3;coroutine\.wrap_aux(;(lj_vm[^;]*;)?@[^;]*len\.lua:2;coroutine\.yield)? [0-9]+$/ { l += $NF }
	END { print a + 0, l + 0 }' "$t/len.folded")
[ "$all" -ge 300 ] && [ $((lost * 500)) -le "$all" ] ||
	fail "\`#t\` in the interpreter: $lost of $all samples not at the filling line under its callers:
$(grep -v 'len\.lua:1[ ;]' "$t/len.folded" | sort -t' ' -k2 -nr | head -3 | cut -c1-300)"

# A generator loop that does little but switch coroutines: samples in the VM's switch
# code (lj_vm_resume's entry and exit, the resuming builtin around it) keep the frames of
# the thread the switch stored (coroutine.wrap_aux under the calling line, or the
# coroutine's yield); they had none (12-15 % of the samples INTERP with no Lua frame, now
# 0-2 %). A coroutine yielding, its C frame already cleared, is found under the builtin
# that resumed it (2-3 % were rootless; now none with the JIT on, 1-2 % of the
# interpreter's switch code still are with it off, README).
cat >"$t/gen.lua" <<'EOF'
local function gen(n) return coroutine.wrap(function() for i=1,n do coroutine.yield(i) end end) end
local s = 0
for r=1,1500 do for v in gen(20000) do s = s + v end end
print(s)
EOF
for jit in on off; do
	build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/gen.folded" -- \
		luajit -j$jit "$t/gen.lua" >/dev/null 2>"$t/err" || fail "record gen.lua, JIT $jit: $(cat "$t/err")"
	read -r all nolua rootless < <(awk '{ a += $NF } !/@/ { n += $NF } !/(^|;)main;/ { r += $NF }
		END { print a + 0, n + 0, r + 0 }' "$t/gen.folded")
	[ $jit = on ] && most=1 || most=4
	[ "$all" -ge 300 ] && [ $((nolua * 25)) -le "$all" ] && [ $((rootless * 100)) -le $((all * most)) ] ||
		fail "generator loop, JIT $jit: $nolua of $all samples with no Lua frame, $rootless rootless:
$(grep -v '@' "$t/gen.folded" | sort -t' ' -k2 -nr | head -3 | cut -c1-300)"
done

# Functions a trace inlined (JIT on): g inlined into f inlined into driver's loop. A TRACE
# sample at g's line has the whole path, each frame at its call line (the frame links of
# the trace's snapshot), as the interpreter's samples have it; it had driver at its first
# line (12) and neither f nor g.
cat >"$t/inl.lua" <<'EOF'
local tbl = {}
for k = 1, 100 do tbl[k] = (k % 3 == 0) and "a" or k end
local function g(x)
  local s = 0
  for j = 1, 3 do local v = tbl[(x + j) % 100 + 1]; if type(v) == "number" then s = s + v end end
  return s
end
local function f(i)
  local r = g(i) + 1
  return r
end
local function driver(n)
  local t = 0
  for i = 1, n do
    t = t + f(i)
  end
  return t
end
print(driver(30000000))
EOF
build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/inl.folded" -- \
	luajit -jon "$t/inl.lua" >/dev/null 2>"$t/err" || fail "record inl.lua: $(cat "$t/err")"
# In g: g's frame right under the trace's (which is then named where the trace starts),
# or the trace's frame at g's line when g's frame is left out.
read -r in_g whole bad < <(awk '/inl\.lua:5;TRACE \[[0-9]+\] @[^;]*:[0-9]+ [0-9]+$/ ||
	/TRACE \[[0-9]+\] @[^;]*inl\.lua:5 [0-9]+$/ { g += $NF
	if ($0 ~ /inl\.lua:19;[^;]*inl\.lua:15;[^;]*inl\.lua:9;[^;]*inl\.lua:5;TRACE \[[0-9]+\] @[^;]*:[0-9]+ [0-9]+$/) w += $NF }
	(/;@[^;]*inl\.lua:9;/ && !/inl\.lua:15;@[^;]*inl\.lua:9;/) ||
	(/;@[^;]*inl\.lua:5;/ && !/inl\.lua:9;@[^;]*inl\.lua:5;/) { b += $NF }
	END { print g + 0, w + 0, b + 0 }' "$t/inl.folded")
# Code running after an inlined call returned, before the next guard, is still under the
# callee's snapshot: such samples keep only the frames sure to be running (a side trace
# starting in g shows 19;15;TRACE at g's line). The whole path was on 49-61 % of these
# samples over ten runs, with today's agent and daa34e0's alike (55 of 113 failed a 50 %
# bound in one CI run): at least 40 % is asked.
[ "$in_g" -ge 50 ] && [ $((whole * 5)) -ge $((in_g * 2)) ] && [ "$bad" -eq 0 ] ||
	fail "inlined functions: $whole of $in_g TRACE samples at g's line have the path 19;15;9;5, $bad have f or g off it:
$(grep 'inl\.lua:5 [0-9]*$' "$t/inl.folded" | grep -v 'inl\.lua:15;[^;]*inl\.lua:9;' | sort -t' ' -k2 -nr | head -3 | cut -c1-300)"

# C code a trace calls, and the collector's steps it runs, in a side trace that started
# inside an inlined function (g, at its return) and went on into driver's loop: the
# trace's base frame is driver's, at its call of f (line 13) by the snapshot, not at its
# first line (10: the trace's start is in g, not in driver; ~7 % of the samples were).
cat >"$t/side.lua" <<'EOF'
local function g(x)
  local t = {}
  for j = 1, 4 do t[j] = x + j end
  return t
end
local function f(i)
  local r = #g(i) + 1
  return r
end
local function driver(n)
  local t = 0
  for i = 1, n do
    t = t + f(i)
  end
  return t
end
print(driver(20000000))
EOF
build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/side.folded" -- \
	luajit -jon "$t/side.lua" >/dev/null 2>"$t/err" || fail "record side.lua: $(cat "$t/err")"
read -r called first at_call < <(awk '/TRACE \[[0-9]+\] [^;]*;/ { c += $NF
	if ($0 ~ /side\.lua:10;TRACE/) f += $NF; if ($0 ~ /side\.lua:13;TRACE/) k += $NF }
	END { print c + 0, f + 0, k + 0 }' "$t/side.folded")
[ "$called" -ge 300 ] && [ $((first * 100)) -le "$called" ] && [ "$at_call" -gt 0 ] ||
	fail "C code called from a side trace: $first of $called samples with driver at its first line, $at_call at its call:
$(grep 'side\.lua:10;TRACE' "$t/side.folded" | sort -t' ' -k2 -nr | head -3 | cut -c1-300)"

# Side traces entered from their parent and linking back (c3's branches, JIT on): a
# sample while one adjusts the stack pointer to or from its parent's still walks out of
# the trace to main (the formula CFA = sp + CFRAME_SIZE_JIT + spadjust put ~2.5 % of
# them off their walk: a stray address, then no main).
cat >"$t/sd.lua" <<'EOF'
local K = { 0, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5, 9.5 }
local keep = {}
local function c3(i)
  K[1] = i
  if i % 3 == 0 then
    keep[i % 64 + 1] = { i, 3 }
  elseif i % 5 == 0 then
    keep[i % 64 + 1] = { i, 5, 5 }
  else
    K[2] = K[i % 8 + 2] + 1
  end
  return K[i % 7 + 2]
end
local function c2(i)
  K[1] = i
  if i % 2 == 0 then
    return c3(i) + K[i % 8 + 2]
  end
  return K[i % 8 + 2]
end
local function c1(i)
  local r = c2(i)
  K[1] = r
  return r + K[i % 6 + 2]
end
local function driver(n)
  local s = 0
  for i = 1, n do s = s + c1(i) end
  return s
end
for _ = 1, 4000 do driver(10000) end
EOF
build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/sd.folded" -- \
	luajit -jon "$t/sd.lua" >/dev/null 2>"$t/err" || fail "record sd.lua: $(cat "$t/err")"
read -r all rootless < <(awk '{ a += $NF } !/(^|;)main;/ { r += $NF } END { print a + 0, r + 0 }' "$t/sd.folded")
[ "$all" -ge 300 ] && [ $((rootless * 200)) -le "$all" ] ||
	fail "side traces: $rootless of $all samples do not reach main:
$(grep -v '\(^\|;\)main;' "$t/sd.folded" | sort -t' ' -k2 -nr | head -3 | cut -c1-300)"

# Coroutines dying by an error: while the C++ unwinder runs, LuaJIT has cleared the
# coroutine's C frame; the samples keep its frames (error under line 1) under the
# coroutine.resume that ran it (line 2). 5-8 % of them were rootless; now 0-2 samples of
# ~200 (a host walk that loses its way above a trace now and then: 1 in ~1,500 samples
# here, README's known limits), so up to 1.5 % (2 of 200 failed the 1 % of before once).
cat >"$t/coerr.lua" <<'EOF'
local f = function() local t = {} for i = 1, 10 do t[i] = i end error("x") end
for i = 1, 150000 do local co = coroutine.create(f) coroutine.resume(co) end
EOF
for jit in on off; do
	build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/coerr.folded" -- \
		luajit -j$jit "$t/coerr.lua" >/dev/null 2>"$t/err" || fail "record coerr.lua, JIT $jit: $(cat "$t/err")"
	read -r all unwinding rootless < <(awk '{ a += $NF } !/(^|;)main;/ { r += $NF }
		/(^|;)main;.*lua_pcall;@[^;]*coerr\.lua:2;coroutine\.resume;(lj_vm[^;]*;)?@[^;]*coerr\.lua:1;error;.*_Unwind_RaiseException/ { u += $NF }
		END { print a + 0, u + 0, r + 0 }' "$t/coerr.folded")
	[ "$all" -ge 150 ] && [ "$unwinding" -ge $((all / 20)) ] && [ $((rootless * 200)) -le $((all * 3)) ] ||
		fail "errors in coroutines, JIT $jit: $rootless of $all samples rootless, $unwinding in the unwinder under the resume:
$(grep -v '^_start;' "$t/coerr.folded" | sort -t' ' -k2 -nr | head -3 | cut -c1-300)"
done

# Coroutines nested 30 deep (a recursive generator: one coroutine.wrap per level), work
# at every level: every sample is rooted at the calling line (line 11). The walks
# followed 16 resumers and knew 64 of the interpreter's C frames: samples deeper than
# that lost their root (half of them), and a memory walk cut there was reused by later
# ones.
cat >"$t/deepco.lua" <<'EOF'
local function walk(t)
  return coroutine.wrap(function()
    local s = 0
    for i = 1, 4e6 do s = s + i % 7 end
    coroutine.yield(s)
    if t.l then for v in walk(t.l) do coroutine.yield(v) end end
  end)
end
local tree = {}
for i = 1, 30 do tree = {l = tree} end
for _ in walk(tree) do end
EOF
for jit in on off; do
	build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/deepco.folded" \
		--raw "$t/deepco.bin" -- luajit -j$jit "$t/deepco.lua" >/dev/null 2>"$t/err" ||
		fail "record deepco.lua, JIT $jit: $(cat "$t/err")"
	read -r all rooted deep < <(awk '{ a += $NF }
			/(^|;)main;.*lua_pcall;@[^;]*deepco\.lua:11;/ { r += $NF
				if (gsub(/coroutine\.wrap_aux/, "&") >= 20) d += $NF }
		END { print a + 0, r + 0, d + 0 }' "$t/deepco.folded")
	[ "$all" -ge 100 ] && [ $((rooted * 100)) -ge $((all * 99)) ] && [ "$deep" -ge $((all / 5)) ] ||
		fail "coroutines 30 deep, JIT $jit: $rooted of $all samples rooted at the calling line, $deep more than 20 deep:
$(sort -t' ' -k2 -nr "$t/deepco.folded" | grep -v 'deepco\.lua:11;' | head -3 | cut -c1-300)"
done

# A coroutine resumed by coroutine.resume that calls through pcall (no C frame) and
# table.sort with a Lua comparator (a C frame, then the comparator's interpreter): the
# resume's frame right after coroutine.resume in every sample, the coroutine's lines
# before table.sort, the comparator after its C code. pcall took the resume's place as
# the segment boundary (46 % of the samples), the sort's comparator took the
# coroutine's frames into its segment (75 %). Lines: 3 the comparator, 8 pcall, 9 sort.
cat >"$t/cosort.lua" <<'EOF'
local function leaf(n) local s = 0 for i = 1, n do s = s + math.sin(i) end return s end
local function cmp(a, b)
  return math.sin(a) + leaf(20) < math.sin(b) + leaf(20)
end
local co = coroutine.create(function()
  while true do
    local t = {} for i = 1, 200 do t[i] = (i * 7919) % 211 end
    pcall(leaf, 3000)
    table.sort(t, cmp)
    coroutine.yield()
  end
end)
local t0 = os.clock()
while os.clock() - t0 < 0.4 do coroutine.resume(co) end
EOF
for jit in on off; do
	build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/cosort.folded" -- \
		luajit -j$jit "$t/cosort.lua" >/dev/null 2>"$t/err" ||
		fail "record cosort.lua, JIT $jit: $(cat "$t/err")"
	read -r all placed cmp sorted < <(awk '{ n = $NF; s = $0; sub(/ [0-9]+$/, "", s)
		i = index(s, "coroutine.resume;"); if (!i) next
		all += n; if (substr(s, i + 17) ~ /^lj_vm_/) p += n
		if (s ~ /cosort\.lua:3(;|$)/) { c += n
			if (s ~ /coroutine\.resume;lj_vm_[^;]*;@[^;]*cosort\.lua:9;table\.sort;.*;@[^;]*cosort\.lua:3(;|$)/) o += n } }
		END { print all + 0, p + 0, c + 0, o + 0 }' "$t/cosort.folded")
	[ "$all" -ge 200 ] && [ $((placed * 100)) -ge $((all * 98)) ] && [ "$cmp" -ge 50 ] &&
		[ $((sorted * 100)) -ge $((cmp * 95)) ] ||
		fail "pcall and table.sort in a coroutine, JIT $jit: $placed of $all samples with the resume's frame after coroutine.resume, $sorted of $cmp in the comparator under the coroutine's line 9 and table.sort:
$(sort -t' ' -k2 -nr "$t/cosort.folded" | head -4)"
done

[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "ok"
