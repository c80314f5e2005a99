#!/usr/bin/env bash
# A C host linked with Debian's static libluajit (static_host.c): LuaJIT's own symbols are
# kept there, so the interpreter's block is named after its handlers and routines (lj_BC_*,
# lj_ff_*, lj_vm_*) instead of the stripped library's single lj_vm_asm_begin. The report
# took that code for plain C code: no VM entry anchored the Lua frames, which all went to
# the root, above _start. CPU (sysprof C mode) and sampled memory profiles of a require
# loop and a sort, started by the script through require "luaprof": every stack is rooted
# at the heaviest one's main, the script's lines right after lua_pcall and the module's
# chunk right after require's C function. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
luajit_dev "$t/apt.log" || skip "$why"
lib=$(ls /usr/lib/*/libluajit-5.1.a 2>/dev/null | head -1)
[ -n "$lib" ] || skip "no static libluajit-5.1.a (apt-get install libluajit-5.1-dev)"
need_build luaprof luaprof.so
cc_test "$t/host" tests/integration/static_host.c tests/integration/test_host.c -O2 -I$inc \
	"$lib" -lm -ldl -rdynamic ||
	exit 1
nm "$t/host" | grep -q ' lj_BC_FUNCC$' || skip "the static library has no lj_BC_* symbols"

mkdir -p "$t/m"
echo 'local M = {} for i = 1, 50 do M["f" .. i] = function() return i end end return M' \
	>"$t/m/reqmod.lua"
# A coroutine's body, interpreted: tostring (an assembler builtin calling C), table.sort.
cat >"$t/m/gen.lua" <<'EOF'
local function gen(n)
	local t = {}
	for i = 1, n do
		t[#t + 1] = tostring(i * 0.5)
		if #t == 20 then table.sort(t) t = {} end
		coroutine.yield(i)
	end
end
jit.off(gen)
return gen
EOF
cat >"$t/s.lua" <<'EOF'
local dir, cpu, mem = ...
package.cpath = "build/?.so;" .. package.cpath
package.path = dir .. "/?.lua;" .. package.path
local luaprof = require("luaprof")
local function load() package.loaded.reqmod = nil return require("reqmod") end
local function work(n)
	local t = {}
	for i = 1, n do t[i] = tostring(i) .. "x" end
	table.sort(t)
	return t
end
-- The coroutine resumed by builtins: coroutine.resume, a wrap's function.
local gen = require("gen")
local function coro(n)
	local co, w = coroutine.create(gen), coroutine.wrap(gen)
	for _ = 1, n do coroutine.resume(co, n) w(n) end
end
assert(luaprof.sysprof.start{mode = "C", interval = 1, path = cpu})
local t0 = os.clock()
while os.clock() - t0 < 1 do load() work(200) coro(200) end
assert(luaprof.sysprof.stop())
assert(luaprof.memprof.start(mem, { sample = 64 }))
for _ = 1, 200 do load() end
assert(luaprof.memprof.stop())
EOF
LUA_CPATH= "$t/host" "$t/s.lua" "$t/m" "$t/cpu.bin" "$t/mem.bin" >"$t/run.log" 2>&1 ||
	{ echo "FAIL: the host failed: $(head -5 "$t/run.log")"; exit 1; }

for p in cpu mem; do
	build/luaprof report -q "$t/$p.bin" -f collapsed -o "$t/$p.folded" 2>"$t/err" ||
		{ fail "$p: $(cat "$t/err")"; continue; }
	root=$(sort -t' ' -k2 -nr "$t/$p.folded" | head -1 | sed -n 's/^\(\(.*;\)\{0,1\}main;\).*/\1/p')
	read -r all rootless script scriptbad mod modbad < <(awk -v root="$root" \
		-v s="@$t/s.lua:" -v m="@$t/m/reqmod.lua:" '{
			v = $NF; all += v
			if (root == "" || index($0, root) != 1) rootless += v
			if (index($0, s)) {
				script += v
				if (index($0, root "lua_pcall;" s) != 1)
					scriptbad += v
			}
			if (index($0, m)) {
				mod += v
				if (!index($0, ";lj_cf_package_require;" m))
					modbad += v
			}
		} END { print all + 0, rootless + 0, script + 0, scriptbad + 0, mod + 0,
			      modbad + 0 }' "$t/$p.folded")
	[ "$all" -gt 0 ] && [ "$rootless" -eq 0 ] && [ -n "$root" ] && [ "${root#*@}" = "$root" ] ||
		fail "$p: $rootless of $all in stacks not rooted at '$root':
$(grep -vF "$root" "$t/$p.folded" | sort -t' ' -k2 -nr | head -2)"
	[ "$script" -gt 0 ] && [ "$scriptbad" -eq 0 ] ||
		fail "$p: $scriptbad of $script with the script's lines not right after main's lua_pcall:
$(grep -F "@$t/s.lua:" "$t/$p.folded" | grep -vF "${root}lua_pcall;@$t/s.lua:" |
	sort -t' ' -k2 -nr | head -2)"
	[ "$mod" -gt 0 ] && [ "$modbad" -eq 0 ] ||
		fail "$p: $modbad of $mod with the module's chunk not right after require's C function:
$(grep -F "@$t/m/reqmod.lua:" "$t/$p.folded" |
	grep -vF ";lj_cf_package_require;@$t/m/reqmod.lua:" | sort -t' ' -k2 -nr | head -2)"
	echo "ok $p: all $all rooted at '$root', $script under the script's lines, $mod in the module"
done
# A builtin written in C: its Lua frame names it, then the C code its C function calls;
# the VM's lj_BC_FUNCC and the builtin's own lj_cf_table_sort are that builtin, not shown
# (they were: "table.sort;lj_BC_FUNCC;lj_cf_table_sort", the builtin twice). require, a
# C function the VM calls (no builtin), keeps its frames, as lj_vm_asm_begin;require
# under a stripped VM.
if [ -s "$t/cpu.folded" ]; then
	read -r sorts twice req < <(awk '{
		v = $NF
		if (index($0, ";table.sort;") || index($0, ";table.sort ")) sorts += v
		if (index($0, ";lj_cf_table_sort") || index($0, "table.sort;lj_BC_FUNCC")) twice += v
		if (index($0, ";lj_BC_FUNCC;lj_cf_package_require;")) req += v
	} END { print sorts + 0, twice + 0, req + 0 }' "$t/cpu.folded")
	if [ "$sorts" -eq 0 ] || [ "$twice" -gt 0 ]; then
		fail "cpu: $twice of $sorts table.sort samples show the VM's frames running it:
$(grep -F 'lj_cf_table_sort' "$t/cpu.folded" | sort -t' ' -k2 -nr | head -2)"
	elif [ "$req" -eq 0 ]; then
		fail "cpu: require's C function is not under lj_BC_FUNCC:
$(grep -F 'require' "$t/cpu.folded" | sort -t' ' -k2 -nr | head -2)"
	else
		echo "ok cpu: $sorts samples in table.sort, none with the VM's frames; $req in require"
	fi
fi
# An assembler builtin's own code (lj_ff_*) is the builtin too: its Lua frame, then what
# it calls (tostring;lj_strfmt_num, not tostring;lj_ff_tostring;lj_strfmt_num). So are the
# tails the builtins share (lj_fff_*): tostring's collector step, which its code calls
# through lj_fff_gcstep, is tostring;lj_gc_step (not tostring;lj_fff_gcstep;lj_gc_step). The
# resuming ones' (lj_ff_coroutine_resume, lj_ff_coroutine_wrap_aux) went between the
# builtin and the coroutine's frames: every sample of the coroutine has its frames right
# after the builtin that resumed it.
if [ -s "$t/cpu.folded" ]; then
	read -r ff tostr gcs co cobad < <(awk -v g="@$t/m/gen.lua:" '{
		v = $NF
		if ($0 ~ /;(tostring|coroutine\.resume|coroutine\.wrap_aux);lj_fff?_/) ff += v
		if (index($0, ";tostring;lj_strfmt_num")) tostr += v
		if (index($0, ";tostring;lj_gc_step;")) gcs += v
		if (index($0, g)) {
			co += v
			if (!index($0, ";coroutine.resume;" g) && !index($0, ";coroutine.wrap_aux;" g))
				cobad += v
		}
	} END { print ff + 0, tostr + 0, gcs + 0, co + 0, cobad + 0 }' "$t/cpu.folded")
	[ "$ff" -eq 0 ] && [ "$tostr" -gt 0 ] && [ "$gcs" -gt 0 ] ||
		fail "cpu: $ff samples show a builtin's lj_ff_* or lj_fff_* code after it, $tostr have tostring;lj_strfmt_num, $gcs tostring;lj_gc_step:
$(grep -E ';(tostring|coroutine\.resume|coroutine\.wrap_aux);lj_fff?_' "$t/cpu.folded" |
	sort -t' ' -k2 -nr | head -3)"
	[ "$co" -gt 0 ] && [ "$cobad" -eq 0 ] ||
		fail "cpu: $cobad of $co samples in the coroutine without its frames right after the resuming builtin:
$(grep -F "@$t/m/gen.lua:" "$t/cpu.folded" | grep -vF -e ";coroutine.resume;@$t/m/gen.lua:" \
	-e ";coroutine.wrap_aux;@$t/m/gen.lua:" | sort -t' ' -k2 -nr | head -3)"
	[ "$fails" = 0 ] &&
		echo "ok cpu: no lj_ff_* or lj_fff_* frame after its builtin, $tostr in tostring;lj_strfmt_num, $gcs in tostring;lj_gc_step, $co in the coroutine"
fi
# The resuming builtins' own code where BASE, PC and L->base are not where the walker
# looks, each about 1 in 1,000 samples of a loop of resumes: lj_ff_coroutine_resume and
# lj_ff_coroutine_wrap_aux from the first use of PC for the coroutine's stack (right after
# the last branch to lj_fff_fallback) until they store L->base, which holds the resumer's
# last call of C (another depth: res below); lj_ff_coroutine_resume's reload of PC from
# SAVE_PC, its first result already over its frame's link; a coroutine's start, which
# lj_vm_resume runs in lj_vm_call's code (once cur_L is the coroutine, and at
# lj_vm_call_dispatch) before the coroutine has a frame. Those samples had no Lua frame
# ("main;lua_pcall;lj_ff_coroutine_resume"), the start's no root either
# ("lj_ff_coroutine_resume;lj_vm_call"). exit_stub_bp.c stops the thread at those
# instructions until a tick is pending: every sample there is to have the resumer's
# frames, at res's line (13) or at coro's (16) for wrap's.
dis() { # FUNCTION: the host's disassembly of it
	objdump -d --no-show-raw-insn "$t/host" |
		awk -v f="<$1>:" '$0 ~ f { on = 1; next } on && /^$/ { exit } on { sub(/:$/, "", $1); print }'
}
bp_after_fallback() { # FUNCTION: the first two instructions after its last branch to lj_fff_fallback
	dis "$1" | awk '{ if (after) { at[n++] = $1; if (n == 2) after = 0 }
		if (/<lj_fff_fallback>/) { after = 1; n = 0 } } END { print at[0], at[1] }'
}
# bp_profile NAME HITS SCRIPT WHAT ADDRESS...: SCRIPT (bp.lua, bpm.lua) profiled by the host
# with exit_stub_bp.c's breakpoints at the ADDRESSes (the host's offsets) until HITS samples
# stopped there, WHAT its last argument; the profile rendered as $t/NAME.folded. Status 0
# when it is; 1 when not (after fail); 2 after a note when the machine has no hardware
# breakpoint for it (perf_event): nothing to check.
bp_profile() {
	local v=$1 hits=$2 lua=$3 what=$4
	shift 4
	LUA_CPATH= "$t/host" "$lua" "$t/$v.bin" "$t/libbp.so" "$pc_off" "$*" "$hits" "$what" \
		>"$t/$v.log" 2>&1
	local rc=$?
	if [ $rc = 3 ] || grep -q '^no breakpoint' "$t/$v.log"; then
		echo "note $v: no hardware breakpoint here (perf_event): not checked"
		return 2
	fi
	[ $rc = 0 ] && grep -q "^hits $hits\$" "$t/$v.log" ||
		{ fail "$v: breakpoints at '$*': $(head -3 "$t/$v.log")"; return 1; }
	build/luaprof report -q "$t/$v.bin" -f collapsed -o "$t/$v.folded" 2>"$t/err" ||
		{ fail "$v: $(cat "$t/err")"; return 1; }
}
bp_run() { # NAME HITS MIN_RESUME MIN_WRAP ADDRESS...
	local v=$1 hits=$2 minr=$3 minw=$4 bad rl wl
	shift 4
	bp_profile "$v" "$hits" "$t/bp.lua" "" "$@" || return
	read -r bad rl wl < <(awk -v b="@$t/bp.lua:" '{
		v = $NF
		if (!index($0, "main;lua_pcall;" b) || index($0, ";lj_ff_coroutine_")) bad += v
		if (index($0, ";" b "13;coroutine.resume ") || index($0, ";" b "13 ")) rl += v
		if (index($0, ";" b "16;coroutine.wrap_aux ")) wl += v
	} END { print bad + 0, rl + 0, wl + 0 }' "$t/$v.folded")
	[ "$bad" = 0 ] && [ "$rl" -ge "$minr" ] && [ "$wl" -ge "$minw" ] ||
		{ fail "$v: of $hits samples at the resuming builtins' instructions, $bad without the resumer's frames, $rl at res's line (want $minr), $wl at wrap's call (want $minw):
$(grep -vF "main;lua_pcall;@$t/bp.lua:" "$t/$v.folded" | sort -t' ' -k2 -nr | head -3)"; return; }
	echo "ok $v: $rl samples at coroutine.resume's instructions by res's line, $wl by wrap's call"
}
if [ -s "$t/cpu.folded" ] && command -v objdump >/dev/null &&
	"${CC:-cc}" -std=c11 -O2 -fPIC -shared -Wall -Wextra -Werror -o "$t/libbp.so" \
		tests/integration/exit_stub_bp.c 2>"$t/cc.log"; then
	read -r res res2 < <(bp_after_fallback lj_ff_coroutine_resume)
	read -r wrap _ < <(bp_after_fallback lj_ff_coroutine_wrap_aux)
	# PC back from SAVE_PC (the C frame's slot 0x18) after the results.
	reload=$(dis lj_ff_coroutine_resume | awk '/mov +0x18\(%rsp\),%rbx/ { print $1; exit }')
	# The instruction after the target of lj_vm_resume's jump into lj_vm_call (the switch
	# of cur_L to the coroutine).
	start=$(dis lj_vm_resume | awk '/j[a-z]+ +[0-9a-f]+ <lj_vm_call\+/ { print $(NF - 1); exit }')
	start=$(dis lj_vm_call | awk -v a="$start" 'go { print $1; exit } $1 == a { go = 1 }')
	dispatch=$(nm "$t/host" | awk '$3 == "lj_vm_call_dispatch" { sub(/^0+/, "", $1); print $1; exit }')
	pc_off=$(nm "$t/host" | awk '$3 == "lua_pcall" { print $1; exit }')
	cat >"$t/bp.lua" <<'EOF'
local cpu, lib, pc_off, addrs, want = ...
package.cpath = "build/?.so;" .. package.cpath
local luaprof = require("luaprof")
local ffi = require("ffi")
ffi.cdef[[int exit_stub_bp_arm_at(const uintptr_t *at, int nat, int n);
int exit_stub_bp_hits(void);
int lua_pcall(void *L, int nargs, int nresults, int errfunc);]]
local bp = ffi.load(lib)
local base = ffi.cast("uintptr_t", ffi.cast("void *", ffi.C.lua_pcall)) - tonumber(pc_off, 16)
local at, n = ffi.new("uintptr_t[4]"), 0
for a in addrs:gmatch("%x+") do at[n] = base + tonumber(a, 16) n = n + 1 end
local function gen() while true do coroutine.yield(1) end end
local function res(co) local ok = coroutine.resume(co) return ok end
local function coro(n)
	local co, w = coroutine.create(gen), coroutine.wrap(gen)
	for _ = 1, n do res(co) w() end
end
jit.off()
want = tonumber(want)
assert(luaprof.sysprof.start{mode = "C", interval = 1, path = cpu})
if bp.exit_stub_bp_arm_at(at, n, want) ~= 0 then print("no breakpoint") os.exit(3) end
local t0 = os.clock()
while bp.exit_stub_bp_hits() < want and os.clock() - t0 < 20 do coro(10) end
assert(luaprof.sysprof.stop())
print("hits " .. bp.exit_stub_bp_hits())
EOF
	if [ -z "$res2" ] || [ -z "$wrap" ] || [ -z "$reload" ] || [ -z "$start" ] ||
		[ -z "$dispatch" ]; then
		fail "the resuming builtins' instructions not found: '$res $res2 $wrap $reload $start $dispatch'"
	else
		bp_run switch 160 90 25 "$res" "$res2" "$reload" "$wrap"
		bp_run start 80 25 25 "$start" "$dispatch"
	fi
	# A metamethod at either end of its call where BASE is its frame and the walk from there
	# finds no caller: a C __index function's return to its continuation (lj_vm_returnp's
	# first two instructions, PC the link with FRAME_C toggled; lj_cont_dispatch's first
	# two, before BASE is the caller's), and the store of a metamethod's frame link
	# (lj_vm_call_dispatch_f's `mov [BASE-8], PC`, here a cdata's field read by the FFI's
	# __index builtin, inside a Lua __call of a cdata). Every sample there had no Lua
	# frame ("main;lua_pcall;lj_vm_returnp", "...;lj_vm_call_dispatch_f"); they are the
	# caller's, at the line of `t.x` (get) or `q.v` (the __call function). With a Lua
	# __index function the store's samples were dropped (2 samples of 20 hits, none of
	# them its): it goes on top of get, at its first line, as a called function does
	# before its link is stored.
	cat >"$t/bpm.lua" <<'EOF'
local cpu, lib, pc_off, addrs, want, what = ...
local rec = what:match("/rec") -- the loop recorded again and again: state RECORD
what = what:gsub("/rec.*$", "")
package.cpath = "build/?.so;" .. package.cpath
local luaprof = require("luaprof")
local ffi = require("ffi")
ffi.cdef[[int exit_stub_bp_arm_at(const uintptr_t *at, int nat, int n);
int exit_stub_bp_hits(void);
int lua_pcall(void *L, int nargs, int nresults, int errfunc);
typedef struct { int v; } pt;
int abs(int);]]
local bp = ffi.load(lib)
local arm, hits = bp.exit_stub_bp_arm_at, bp.exit_stub_bp_hits
local base = ffi.cast("uintptr_t", ffi.cast("void *", ffi.C.lua_pcall)) - tonumber(pc_off, 16)
local at, n = ffi.new("uintptr_t[4]"), 0
for a in addrs:gmatch("%x+") do at[n] = base + tonumber(a, 16) n = n + 1 end
local o = setmetatable({}, { __index = luaprof.sysprof.stats })
local lo = setmetatable({}, { __index = function(_, k) -- LINDEX
	return k
end })
local P = ffi.metatype("pt", { __call = function(q, x) -- CDCALLEE
	return q.v + x -- CALL
end })
local p = P(1)
local function get(t)
	local v = t.x -- GET
	return v
end
local function call(q) local r = q(2) return r end
local abs = ffi.C.abs
local function ccall(k)
	local r = abs(k) -- CCALL
	return r
end
local T = setmetatable({}, { __call = function(_, x) -- TCALLEE
	return x
end })
local function tcall()
	local r = T(2)
	return r
end
local function pf(x) return x end -- PF
local function pcalls()
	local ok, r = pcall(pf, 7) -- PCALL
	return ok and r
end
local function two(a) return a, a + 1 end -- TWO
local function mret(k)
	local x, y = two(k) -- MRET
	return x + y
end
local function one(a) return a end -- ONE
local function stale(k) -- y, left by two(k), in the slot of one's link; one's in two's
	do local x, y = two(k) end -- TWOCALL
	local r = one(k) -- STALE
	return r
end
local stats, tab = luaprof.sysprof.stats, { 1, 2, 3 }
local function len()
	local n = #tab -- LEN
	return n
end
local function work()
	for _ = 1, 10 do
		if what == "index" then get(o) elseif what == "lindex" then get(lo)
		elseif what == "ccall" then ccall(-3) elseif what == "tcall" then tcall()
		elseif what == "pcall" then pcalls() elseif what == "mret" then mret(1)
		elseif what == "stale" then stale(1) elseif what == "len" then len()
		elseif what == "cfunc" then stats() -- CFUNC
		else call(p) end
	end
end
-- Recorded: work's loop, not the main chunk's (its jit.flush call, in state RECORD, would
-- pass the call handlers' breakpoints).
if rec then jit.on() jit.off(true) jit.opt.start("hotloop=1") else jit.off() end
want = tonumber(want)
assert(luaprof.sysprof.start{mode = "C", interval = 1, path = cpu})
if arm(at, n, want) ~= 0 then print("no breakpoint") os.exit(3) end
local t0 = os.clock()
while hits() < want and os.clock() - t0 < 20 do
	if rec then jit.flush() end
	work()
end
assert(luaprof.sysprof.stop())
print("hits " .. hits())
EOF
	# bp_meta_run NAME HITS WORKLOAD MARK MIN ADDRESS...: no sample without Lua frames,
	# MIN at MARK's line. With WORKLOAD/rec, the loop is recorded by the JIT again and again
	# (its traces flushed): MIN samples in state RECORD (";RECORD" on top), the recorder's
	# interpreter running the same code, each with a frame at MARK's line. WORKLOAD/recany:
	# the same, where other calls pass the ADDRESSes too (the call handlers'): MIN of the
	# RECORD samples at MARK's line, the others anywhere with Lua frames.
	bp_meta_run() {
		local v=$1 hits=$2 what=$3 mark=$4 min=$5 line bad at recs recat
		shift 5
		line=$(grep -n -- "-- $mark\$" "$t/bpm.lua" | cut -d: -f1)
		bp_profile "$v" "$hits" "$t/bpm.lua" "$what" "$@" || return
		read -r bad at recs recat < <(awk -v b="@$t/bpm.lua:" -v l="$line" '{
			v = $NF
			if (!index($0, "main;lua_pcall;" b)) bad += v
			if (index($0, ";" b l " ")) at += v
			if ($0 ~ /;RECORD [0-9]+$/) {
				recs += v
				if (index($0, ";" b l ";")) recat += v
			}
		} END { print bad + 0, at + 0, recs + 0, recat + 0 }' "$t/$v.folded")
		if [ "${what%/recany}" != "$what" ]; then
			[ "$bad" = 0 ] && [ "$recat" -ge "$min" ] ||
				{ fail "$v: of $hits samples at the breakpoints ('$*'), $bad without Lua frames, $recs in state RECORD, $recat of them at line $line, $mark (want $min):
$(sort -t' ' -k2 -nr "$t/$v.folded" | head -4)"; return; }
			echo "ok $v: $recat of $recs samples in state RECORD at line $line ($mark), none without Lua frames"
			return
		fi
		if [ "${what%/rec}" != "$what" ]; then
			[ "$bad" = 0 ] && [ "$recs" -ge "$min" ] && [ "$recat" = "$recs" ] ||
				{ fail "$v: of $hits samples at the breakpoints ('$*'), $bad without Lua frames, $recs in state RECORD (want $min), $recat of them at line $line, $mark:
$(sort -t' ' -k2 -nr "$t/$v.folded" | head -4)"; return; }
			echo "ok $v: $recs samples at the breakpoints in state RECORD, at line $line ($mark)"
			return
		fi
		[ "$bad" = 0 ] && [ "$at" -ge "$min" ] ||
			{ fail "$v: of $hits samples at the metamethod's call or return ('$*'), $bad without Lua frames, $at at line $line, $mark (want $min):
$(sort -t' ' -k2 -nr "$t/$v.folded" | head -3)"; return; }
		echo "ok $v: $at samples at the metamethod's call or return, at line $line ($mark)"
	}
	returnp=$(dis lj_vm_returnp | awk 'NR <= 2 { print $1 }')
	contd=$(dis lj_cont_dispatch | awk 'NR <= 2 { print $1 }')
	# The C __index function's return before that: lj_vm_returnc's five instructions (PC the
	# link as stored) and lj_vm_return's three up to its branch to lj_vm_returnp (FRAME_C
	# toggled), four breakpoints a run. Every C function's return passes there: the loop's
	# os.clock and exit_stub_bp_hits (ffi.meta.__call) are theirs, at the loop's lines.
	returnc=$(dis lj_vm_returnc | awk 'NR <= 4 { print $1 }')
	returnc2=$(dis lj_vm_returnc | awk 'NR == 5 { print $1 }'
		dis lj_vm_return | awk 'NR <= 3 { print $1 }')
	# And the C __index function's call and return in lj_BC_FUNCC, state INTERP, BASE its
	# frame, PC its entry (the function's bytecode) or the instruction after: from
	# lj_vm_call_dispatch_f's load of that PC, after the link's store, to lj_BC_FUNCC's
	# state C, and from its state INTERP back to its load of the link into PC. Every
	# sample there had no Lua frame ("main;lua_pcall;lj_BC_FUNCC"), as in the return's
	# next steps.
	funcc=$(dis lj_vm_call_dispatch_f | awk '/mov +%rbx,-0x8\(%rdx\)/ { s = NR }
			s && NR == s + 2 { print $1 } s && /jmp/ { print $1; exit }'
		dis lj_BC_FUNCC | awk 'NR == 1 { print $1 }
			/movl +\$0xfffffffe,/ { print prev; exit } { prev = $1 }')
	funcc2=$(dis lj_BC_FUNCC | awk '{ at[NR] = $1 } /jmp .*<lj_vm_returnc>/ && NR > 4 {
		print at[NR - 4], at[NR - 3], at[NR - 2], at[NR - 1]; exit }')
	linkst=$(dis lj_vm_call_dispatch_f | awk '/mov +%rbx,-0x8\(%rdx\)/ { print $1; exit }')
	if [ -z "$returnp" ] || [ -z "$contd" ] || [ -z "$linkst" ] ||
		[ "$(echo $returnc $returnc2 $funcc $funcc2 | wc -w)" != 16 ]; then
		fail "the metamethods' instructions not found: '$returnp' '$contd' '$linkst' '$returnc' '$returnc2' '$funcc' '$funcc2'"
	else
		bp_meta_run metaret 40 index GET 20 $returnp $contd
		bp_meta_run metaretc 80 index GET 30 $returnc
		bp_meta_run metaretc2 80 index GET 35 $returnc2
		bp_meta_run metafuncc 80 index GET 30 $funcc
		bp_meta_run metafuncc2 80 index GET 30 $funcc2
		bp_meta_run metacall 20 cdata CALL 5 "$linkst"
		bp_meta_run metalcall 20 lindex LINDEX 8 "$linkst"
	fi
	# A Lua __call function called by ins_call outside the call handlers, BASE its frame
	# and PC its Lua link, at the store of that link and the load of its PC right after:
	# a cdata's (call(p): the FFI's __call builtin tail-calls it, lj_meta_tailcall, by
	# lj_cont_dispatch and lj_vm_call_tail to lj_vm_call_dispatch_f's) and a table's
	# (tcall: lj_vmeta_call's own). Their samples had the caller at the call's line but
	# not the function being called (walked from its frame, its PC outside it, the
	# function was taken for a result returned); they have it on top at its first line,
	# as a call's callee does in BC_CALL. The cdata's share the store with its `q.v`.
	tailst=$(dis lj_vm_call_dispatch_f | awk '/mov +%rbx,-0x8\(%rdx\)/ { s = NR; print $1 }
		s && NR == s + 1 { print $1; exit }')
	vmetast=$(dis lj_vmeta_call | awk '/mov +%rbx,-0x8\(%rdx\)/ { s = NR; print $1 }
		s && NR == s + 1 { print $1; exit }')
	if [ "$(echo $tailst $vmetast | wc -w)" != 4 ]; then
		fail "ins_call's link store not found: '$tailst' '$vmetast'"
	else
		bp_meta_run metatail 40 cdata CDCALLEE 8 $tailst
		bp_meta_run metatcall 40 tcall TCALLEE 15 $vmetast
	fi
	# A call of a C function's cdata, resolved by lj_meta_call: from its last steps (the
	# store of SAVE_PC, CARG3 in rdx) until the handler takes BASE back from L->base, with
	# L:RB from SAVE_L, rdx is no base. About half of the samples there had no Lua frame
	# ("main;lua_pcall;lj_vmeta_call"); they are ccall's, at the line of the call.
	metacall=$(dis lj_vmeta_call | awk '{ at[NR] = $1 } / call / { c = NR }
		END { if (c > 1) print at[c - 1], at[c], at[c + 1], at[c + 2] }')
	if [ -z "$metacall" ]; then
		fail "lj_vmeta_call's call not found"
	else
		bp_meta_run vmetacall 40 ccall CCALL 20 $metacall
	fi
	# The same instants in state RECORD: the JIT's recorder runs the interpreter's code,
	# registers and stack as in state INTERP, but the sampler's checks of those instants
	# ran in state INTERP only: the samples at ins_call's store after `q.v`'s metamethod,
	# the FFI's __index builtin (CONT link), and at lj_vmeta_call's call (the C function's
	# cdata) had no Lua frame ("main;lua_pcall;lj_vm_call_dispatch_f", "...;lj_vmeta_call"),
	# and a Lua __index function's at lj_vm_call_dispatch_f's first instruction (PC its
	# link, the caller's PC in the continuation's slot) had get at its first line, not at
	# `t.x`. They are the caller's at the call, as in state INTERP, with state RECORD.
	dispf=$(dis lj_vm_call_dispatch_f | awk 'NR == 1 { print $1; exit }')
	if [ -z "$dispf" ] || [ -z "$metacall" ] || [ "$(echo $tailst $vmetast | wc -w)" != 4 ]; then
		fail "the metamethods' instructions not found for state RECORD: '$dispf' '$tailst' '$vmetast' '$metacall'"
	else
		bp_meta_run metarec 60 cdata/rec CALL 5 $tailst
		bp_meta_run metareclindex 60 lindex/rec GET 5 "$dispf" "$linkst"
		bp_meta_run metarecccall 60 ccall/rec CCALL 5 $metacall
		bp_meta_run metarectcall 60 tcall/rec TCALLEE 5 $vmetast
	fi
	# State INTERP's other instants in state RECORD, where the walk from BASE finds no
	# frame or the wrong one; the sampler took them in state INTERP only. Each had no Lua
	# frame in state RECORD (39 of 60, 35 of 80, 26 of 40 and 12 of 60 samples in these
	# runs): pcall's call of its function, from its own code until the
	# link's store (lj_ff_pcall's jump, lj_vm_call_dispatch_f's first instruction and its
	# store: the function's copy in the link's slot), pcall at `pcall(pf, 7)`'s line; a
	# return of two values from its handler's load of PC (the link) through the moves
	# of the results over the returning frame (lj_BC_RET), the caller at `two(k)`'s line;
	# `#t` back from lj_tab_len, which clobbered BASE (saved in rbp); a C function being
	# called, from the load of its PC (lj_BC_CALL's dispatch of its first instruction), the
	# caller at the call. Their frames are the same as in state INTERP, state RECORD on top.
	pcallj=$(dis lj_ff_pcall | awk '/jmp .*<lj_vm_call_dispatch>/ { print $1; exit }')
	retat=$(dis lj_BC_RET | awk '{ at[NR] = $1 } /mov +-0x8\(%rdx\),%rbx/ && !p { p = NR }
		/mov +%rbp,-0x10\(%r/ && !s { s = NR }
		END { if (p && s) print at[p + 1], at[s - 1], at[s], at[s + 1] }')
	lenat=$(dis lj_BC_LEN | awk '/call .*<lj_tab_len>/ { c = NR; next } c { print $1; if (NR == c + 2) exit }')
	callst=$(dis lj_BC_CALL | awk '/mov +%rbx,-0x8\(%rdx\)/ { print $1; exit }')
	callt=$(dis lj_BC_CALL | awk '/mov +%rbx,-0x8\(%rdx\)/ { s = NR }
		s && (NR == s + 2 || NR == s + 4) { print $1 } s && /jmp/ { print $1; exit }')
	if [ -z "$pcallj" ] || [ -z "$dispf" ] || [ -z "$linkst" ] || [ -z "$callst" ] ||
		[ "$(echo $retat $lenat $callt | wc -w)" != 9 ]; then
		fail "the interpreter's instructions not found for state RECORD: '$pcallj' '$retat' '$lenat' '$callst' '$callt'"
	else
		bp_meta_run recpcall 60 pcall/rec PCALL 20 "$pcallj" "$dispf" "$linkst"
		bp_meta_run recmret 80 mret/rec MRET 17 $retat
		bp_meta_run reclen 40 len/rec LEN 13 $lenat
		bp_meta_run reccfunc 60 cfunc/recany CFUNC 6 $callt
	fi
	# The link store of a call (lj_BC_CALL's) whose slot holds no link: one(k)'s, where
	# two(k) left y, a number (no Lua frame in state RECORD before interp_sample), and
	# another call's link, older: two(k)'s, left there by one(k) the round before. The walk
	# from BASE went through the latter: two on top of the caller at one(k)'s line (11 of
	# 12 such samples in state INTERP, 8 of 8 in state RECORD); and in state RECORD
	# one(k)'s had the caller without one (L->base, synced by lj_vm_record, runs PC: 8 of
	# 8). Every sample there is the function being called, at its first line, on top of
	# the caller at that call's line, as at the other instants of a call.
	bp_stale_run() { # NAME HITS WORKLOAD MIN ADDRESS
		local v=$1 hits=$2 what=$3 min=$4 lt lo ltc ls wrong at one two rec
		shift 4
		bp_profile "$v" "$hits" "$t/bpm.lua" "$what" "$@" || return
		lt=$(grep -n -- "-- TWO\$" "$t/bpm.lua" | cut -d: -f1)
		lo=$(grep -n -- "-- ONE\$" "$t/bpm.lua" | cut -d: -f1)
		ltc=$(grep -n -- "-- TWOCALL\$" "$t/bpm.lua" | cut -d: -f1)
		ls=$(grep -n -- "-- STALE\$" "$t/bpm.lua" | cut -d: -f1)
		read -r wrong at one two rec < <(awk -v b="@$t/bpm.lua:" -v lt="$lt" -v lo="$lo" \
			-v ltc="$ltc" -v ls="$ls" 'function has(a, c) { # line a, then c on top of it
				return index($0, ";" b a ";" b c ";") || index($0, ";" b a ";" b c " ")
			} {
			v = $NF
			if (has(ls, lt)) wrong += v
			if (index($0, ";" b ls ";") || index($0, ";" b ls " ")) at += v
			if (has(ls, lo)) {
				one += v
				if ($0 ~ /;RECORD [0-9]+$/) rec += v
			}
			if (has(ltc, lt)) two += v
		} END { print wrong + 0, at + 0, one + 0, two + 0, rec + 0 }' "$t/$v.folded")
		[ "$wrong" = 0 ] && [ "$at" = "$one" ] && [ "$one" -ge "$min" ] && [ "$two" -ge "$min" ] &&
			{ [ "${what%/rec}" = "$what" ] || [ "$rec" -ge "$min" ]; } ||
			{ fail "$v: at lj_BC_CALL's link store, $wrong samples with two on top of one(k)'s line, $at at one(k)'s line, $one of them with one on top ($rec in state RECORD), $two with two on top of two(k)'s (want $min of each):
$(sort -t' ' -k2 -nr "$t/$v.folded" | head -5)"; return; }
		echo "ok $v: $one samples at one(k)'s link store with one on top ($rec in state RECORD), $two at two(k)'s with two"
	}
	if [ -n "$callst" ]; then
		bp_stale_run stalecall 40 stale 5 "$callst"
		bp_stale_run recstalecall 60 stale/rec 4 "$callst"
	fi
	# pcall's return to it (lj_vm_returnp, a PCALL link in PC): from `and PC, -8` until PC
	# is loaded with the builtin's own link, PC holds the delta alone, BASE the returning
	# function's, then from `sub BASE, PC` pcall's. Samples at the `lea` and `mov` after the
	# `sub` had no Lua frame ("main;lua_pcall;lj_vm_returnp": 0.5-1 % of an interpreted
	# pcall loop's samples on a faster host); they are pcall's, at `pcall(pf, 7)`'s line.
	# Before the `sub`, the function returning, pf, on top of it (its link still pcall's).
	pret=$(dis lj_vm_returnp | awk '/and +\$0xfffffffffffffff8,%rbx/ { s = NR }
		s && NR < s + 4 { printf "%s ", $1 }')
	if [ "$(echo $pret | wc -w)" != 4 ]; then
		fail "lj_vm_returnp's return to pcall not found: '$pret'"
	elif bp_profile pcallret 80 "$t/bpm.lua" pcall $pret; then
		lp=$(grep -n -- "-- PCALL\$" "$t/bpm.lua" | cut -d: -f1)
		lf=$(grep -n -- "-- PF\$" "$t/bpm.lua" | cut -d: -f1)
		read -r bad inpc inpf < <(awk -v b="@$t/bpm.lua:" -v lp="$lp" -v lf="$lf" '{
			v = $NF
			if (!index($0, "main;lua_pcall;" b)) bad += v
			if (index($0, ";" b lp ";pcall ")) inpc += v
			if (index($0, ";" b lp ";pcall;" b lf " ")) inpf += v
		} END { print bad + 0, inpc + 0, inpf + 0 }' "$t/pcallret.folded")
		if [ "$bad" = 0 ] && [ "$inpc" -ge 25 ] && [ "$inpf" -ge 25 ]; then
			echo "ok pcallret: $inpc samples at pcall's return in pcall at line $lp, $inpf in pf on top of it"
		else
			fail "pcallret: of 80 samples at lj_vm_returnp's return to pcall ('$pret'), $bad without Lua frames, $inpc in pcall at line $lp (want 25), $inpf in pf on top of it (want 25):
$(sort -t' ' -k2 -nr "$t/pcallret.folded" | head -4)"
		fi
	fi
elif [ -s "$t/cpu.folded" ]; then
	echo "note: no objdump or cannot build exit_stub_bp.c: the resuming builtins' windows not checked ($(head -1 "$t/cc.log" 2>/dev/null))"
fi
[ $fails = 0 ] || exit 1
echo "ok"
