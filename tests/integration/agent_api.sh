#!/usr/bin/env bash
# The in-process agent's Lua API with a real LuaJIT (Debian `luajit`, VM linked into
# /usr/bin/luajit; then OpenResty's luajit2 when its .deb can be downloaded): agent_api.lua checks messages, errno values, counters, misc.sysprof and
# jit.profile alongside; this script then checks that every L and C stream it wrote parses
# with `luaprof report` and holds Lua frames with current lines, and that a profile still
# running at os.exit() is finished. Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

# -- Interpreter: Debian's luajit, installed when missing and allowed.
luajit_install "$t/apt.log" || skip "$why"
need_build luaprof.so luaprof
luajit -e 'package.cpath="build/?.so;"..package.cpath require"luaprof"' 2>"$t/err" ||
	{ echo "FAIL: cannot load build/luaprof.so: $(cat "$t/err")"; exit 1; }

# -- The Lua-side checks. Once in a few dozen processes LuaJIT never compiles fib (its
# trace penalties are random per process; every stream then has fib interpreted, no TRACE
# sample): the run is made again once, as the trace checks below need a compiled fib.
for try in 1 2; do
	luajit tests/integration/agent_api.lua build "$t" >"$t/lua.out" 2>&1 ||
		fail "agent_api.lua: $(grep -v '^agent_api.lua:' "$t/lua.out" | head -20)"
	build/luaprof report -q -f info "$t/C_cpu.bin" 2>/dev/null | grep -q '^vmstates: .*TRACE' && break
	[ $try = 1 ] && echo "note: no TRACE sample in C_cpu.bin (fib not compiled): run again"
done

# -- Every stream parses completely; Lua frames carry current lines.
for f in L_cpu L_wall C_cpu C_wall C_joff with_jitp reuse same_cpu; do
	if [ ! -s "$t/$f.bin" ]; then
		fail "$f.bin was not written"
		continue
	fi
	build/luaprof report -q "$t/$f.bin" -f collapsed >"$t/$f.folded" 2>"$t/err" ||
		fail "luaprof report $f.bin exited $?: $(cat "$t/err")"
	[ -s "$t/$f.folded" ] || fail "$f.bin rendered nothing"
done
# Two processes given one path (two nginx workers, or an old one still writing the file a
# reloaded one opens): the second is refused (both wrote, and the file did not parse).
cat >"$t/xp.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local sp = require("luaprof").sysprof
local ok, msg, e = sp.start({ mode = "C", path = arg[1] })
io.write(tostring(ok), "|", tostring(msg), "|", tostring(e), "\n")
io.flush()
local t = os.clock() while os.clock() - t < tonumber(arg[2]) do end
if ok then sp.stop() end
EOF
luajit "$t/xp.lua" "$t/xp.bin" 1.0 >"$t/xpa.out" 2>&1 &
xpa=$!
for _ in $(seq 50); do [ -s "$t/xpa.out" ] && break; sleep 0.05; done
luajit "$t/xp.lua" "$t/xp.bin" 0.1 >"$t/xpb.out" 2>&1
wait $xpa
grep -qx 'true|nil|nil' "$t/xpa.out" &&
	grep -qx "nil|$t/xp.bin: a running profile writes to this file|16" "$t/xpb.out" &&
	build/luaprof report -f info "$t/xp.bin" 2>/dev/null | grep -qx 'complete: yes' ||
	fail "two processes, one path: A $(cat "$t/xpa.out"), B $(cat "$t/xpb.out"), $(build/luaprof report -f info "$t/xp.bin" 2>&1 | grep -E 'complete|byte' | head -2)"
# The CPU profile into a file the memory profiler was refused: whole, and CPU.
build/luaprof report -f info "$t/same_cpu.bin" 2>/dev/null | grep -qx 'kind: cpu (sysprof samples)' &&
	build/luaprof report -f info "$t/same_cpu.bin" 2>/dev/null | grep -qx 'complete: yes' ||
	fail "same_cpu.bin: $(build/luaprof report -f info "$t/same_cpu.bin" 2>&1 | head -4)"
src=tests/integration/agent_api.lua
fibline=$(grep -n '^local function fib' $src | cut -d: -f1)
burnline=$(grep -n 'while os.clock() - t < secs do f() end' $src | cut -d: -f1)
# JIT off, C mode: fib on its own line, called from burn's loop line, under the main chunk,
# all after the interpreter's C entry (lua_pcall) on the host side.
grep -q "lua_pcall;@$src:[0-9]*;@$src:$burnline;@$src:[0-9]*;@$src:$fibline;@$src:$fibline" \
	"$t/C_joff.folded" || fail "C_joff: no merged stack main -> burn:$burnline -> fib:$fibline: $(head -c 400 "$t/C_joff.folded")"
# Samples in JIT traces name the trace and the Lua line inside it.
# (A trace started elsewhere that runs fib, burn's loop with fib inlined, is named where
# it starts, with fib's frame at its line right under it.)
grep -Eq "(TRACE \[[0-9]+\] @$src:$fibline|@$src:$fibline;TRACE \[[0-9]+\] @$src:[0-9]+)( |;)" "$t/C_cpu.folded" ||
	fail "C_cpu: no TRACE [n] frame at or over $src:$fibline: $(grep TRACE "$t/C_cpu.folded" | head -3)"
# Fast functions are named from the VM's own list (the burn loops call os.clock and
# string.rep), not left as builtin#N.
grep -Eq '(^|;)(os\.clock|string\.rep)(;| )' "$t/C_cpu.folded" ||
	fail "C_cpu: no named builtin (os.clock, string.rep): $(grep -o 'builtin#[0-9]*' "$t/C_cpu.folded" | sort -u | head -3)"
# L mode: at most one Lua frame per stack.
if awk -v s="@$src:" '{ n = gsub(s, ""); if (n > 1) bad = 1 } END { exit !bad }' "$t/L_cpu.folded"; then
	fail "L_cpu: a stack with more than one Lua frame"
fi
# Functions loaded after start and collected are never named after a function that lived
# at the same address before: chunkN runs on line N + 1 only (0 = its definition line,
# while the call into it is being set up).
awk '{ line = $0; while (match(line, /chunk[0-9]+:[0-9]+/)) {
		split(substr(line, RSTART + 5, RLENGTH - 5), a, ":")
		seen++; if (a[2] != a[1] + 1 && a[2] != 0) { bad++; print "misnamed: " substr(line, RSTART, RLENGTH) }
		line = substr(line, RSTART + RLENGTH) } }
	END { if (seen < 20) print "only " seen + 0 " chunk frames"; exit (bad > 0 || seen < 20) }' \
	"$t/reuse.folded" >"$t/reuse.err" || fail "reuse: $(head -5 "$t/reuse.err")"
# The extension carries the recording facts.
build/luaprof report -q "$t/C_cpu.bin" -f top >"$t/top.txt" 2>&1 || fail "top report"
grep -q "luajit tests/integration/agent_api.lua" "$t/top.txt" ||
	grep -q "Total samples" "$t/top.txt" || fail "top report: $(head -3 "$t/top.txt")"

# -- A profile still running at os.exit() is finished by the exit handler.
cat >"$t/exit.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local sp = require "luaprof".sysprof
assert(sp.start{mode = "C", interval = 1, clock = "wall", path = arg[1]})
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
local t = os.clock() while os.clock() - t < 0.3 do fib(20) end
os.exit(7)
EOF
luajit "$t/exit.lua" "$t/exit.bin"
rc=$?
[ $rc = 7 ] || fail "os.exit(7) while profiling exited $rc"
build/luaprof report "$t/exit.bin" -f collapsed >/dev/null 2>"$t/err" ||
	fail "stream finished at exit does not parse completely: $(cat "$t/err")"
grep -Eq '[0-9]+ CPU samples?' "$t/err" || fail "exit stream summary: $(cat "$t/err")"

# -- os.exit(code, true) closes the state: the VM's sentinel stops the profile.
sed -i 's/os.exit(7)/os.exit(0, true)/' "$t/exit.lua"
luajit "$t/exit.lua" "$t/close.bin" || fail "os.exit(0, true) while profiling exited $?"
build/luaprof report -q "$t/close.bin" -f collapsed >/dev/null 2>"$t/err" ||
	fail "stream finished at lua_close does not parse: $(cat "$t/err")"

# -- The other supported build: OpenResty's luajit2 (Debian luajit2, VM linked into its
# /usr/bin/luajit), extracted from its .deb since it conflicts with luajit as a package.
if luajit2_fetch "$t/dl.log"; then
	mkdir -p "$t/lj2out"
	"$lj2" tests/integration/agent_api.lua build "$t/lj2out" >"$t/lj2.out" 2>&1 ||
		fail "agent_api.lua on luajit2: $(grep -v '^agent_api.lua:' "$t/lj2.out" | head -20)"
	for f in "$t"/lj2out/*.bin; do
		build/luaprof report -q "$f" -f collapsed >/dev/null 2>"$t/err" ||
			fail "luajit2 stream $(basename "$f") does not parse: $(cat "$t/err")"
	done
	echo "luajit2: checked too"
else
	echo "note: luajit2 not checked (apt-get download luajit2 failed: $(tail -n 1 "$t/dl.log" 2>/dev/null))"
fi

[ $fails = 0 ] || exit 1
echo "ok"
