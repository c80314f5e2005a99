#!/usr/bin/env bash
# CPU samples taken as the interpreter enters a trace keep their Lua frames: BC_JLOOP (the
# J instructions and J function headers jump to it) jumps to the trace's machine code with
# vmstate still INTERP, which the trace's head sets to its number. A sample at the entry
# was left INTERP with the host stack only, the trace's frame (named by its code) right on
# lua_pcall: 5-12 of the ~120 trace samples of this workload at 1 kHz, whose hot
# metamethods, closure and pcall'd function are function traces entered by BC_JFUNCF. They
# are TRACE samples now, under the Lua frames from jit_base. Debian's luajit and OpenResty's
# luajit2 (when it can be fetched), JIT on, 3 s at 1 kHz each: every sample whose innermost
# frame is a trace has a Lua frame below it.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof luaprof.so
both_builds "$t/dl.log"

cat >"$t/mix.lua" <<'LUA'
local mt = { __index = function(t, k) return k * 2 end, __add = function(a, b) return a.v + b.v end }
local function va(...) return select('#', ...) + select(1, ...) end
local obj = setmetatable({ v = 1 }, mt)
local C = {} C.__index = C function C:m(x) return self.k + x end
local o = setmetatable({ k = 3 }, C)
local function clos(n) return function(x) return x + n end end
local function work()
	local s = 0
	for i = 1, 200 do
		s = s + va(i, i, i) + obj[i] + (obj + obj) + o:m(i) + clos(i)(i)
		s = s + select(2, pcall(function(a) return a + 1 end, i))
		local t = { i, i + 1, i + 2 } s = s + #t + (#tostring(i))
		local str = "x" .. i s = s + #str:upper()
		for k, v in ipairs(t) do s = s + v end
		for k, v in pairs(t) do s = s + k end
	end
	return s
end
local t = os.clock() while os.clock() - t < 3 do work() end
LUA
check() { # NAME INTERPRETER [LIBDIR]
	local v=$1 lj=$2
	(cd "$t" && LD_LIBRARY_PATH=${3:-} "$OLDPWD/build/luaprof" record -q --rate 1000 --clock wall \
		-f collapsed -o $v.folded --raw $v.bin -- "$lj" mix.lua) >"$t/$v.out" 2>&1 ||
		{ fail "$v: record exited $?: $(head -3 "$t/$v.out")"; return; }
	# Samples whose innermost frame is a trace, and those of them with no Lua frame
	# (a chunk's line) below it.
	read -r bare all < <(awk '{ n = $NF; s = $0; sub(/ [0-9]+$/, "", s)
		k = split(s, f, ";"); if (f[k] !~ /^TRACE \[/) next
		a += n; lua = 0
		for (i = 1; i < k; i++) if (f[i] ~ /^@mix\.lua:[0-9]+$/) lua = 1
		if (!lua) b += n }
		END { print b + 0, a + 0 }' "$t/$v.folded")
	[ "$all" -ge 30 ] || fail "$v: $all trace samples in 3 s at 1 kHz (want 30 at least)"
	# None is left: the last one (1-3 a run on some hosts) was the interpreter's, on
	# the instruction of lj_vm_exit_interp between clearing jit_base and storing INTERP.
	[ "$bare" = 0 ] || {
		fail "$v: $bare of $all trace samples without a Lua frame:"
		awk '{ s = $0; sub(/ [0-9]+$/, "", s); if (s ~ /;TRACE \[[^;]*$/ && s !~ /;@mix\.lua:/)
			print "  " $0 }' "$t/$v.folded" | head -5
	}
}
on_both_builds check mix

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
