#!/usr/bin/env bash
# Sampled memory profiles (memprof sampled mode) on real interpreters: a workload whose two
# call paths allocate 40% / 60% of the bytes by construction (memprof_sampled.lua); the
# sampled profile's split is within 5 percentage points, its total within 10%, and the
# stacks run from the host's main through the Lua call path to table.new. With the JIT on
# the paths are inlined into one trace and lines inside it are approximate (a trace's
# allocation is placed at its snapshot): only the total and the frames below the trace
# are checked. Debian's luajit, and OpenResty's luajit2 when its .debs can be had.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

have luajit || skip "luajit is not installed (apt-get install luajit)"
need_build luaprof luaprof.so
src=tests/integration/memprof_sampled.lua
declare -A at
read_markers $src
total_true=128000000 # 200000 iterations x 640 bytes

runners=("luajit")
luajit2_fetch "$t/dl.log" && runners+=("luajit2")
# On x86-64 the wrapper is generated code next to the VM's allocator (meta wrapper:
# generated); luajit-compiled runs the same checks with the compiled one
# (LUAPROF_ALLOCSTUB=0), which other machines and W^X policies get.
[ "$(uname -m)" = x86_64 ] && want_wrapper=generated || want_wrapper=compiled

for runner in "${runners[@]}" luajit-compiled; do
	for jit in off on; do
		what="$runner, JIT $jit"
		f=$t/$runner-$jit.bin
		if [ $runner = luajit ]; then
			LUA_CPATH= luajit $src 65536 "$f" $jit >"$t/out" 2>&1
		elif [ $runner = luajit-compiled ]; then
			LUAPROF_ALLOCSTUB=0 LUA_CPATH= luajit $src 65536 "$f" $jit >"$t/out" 2>&1
		else
			LD_LIBRARY_PATH=$lj2lib LUA_CPATH= $lj2 $src 65536 "$f" $jit >"$t/out" 2>&1
		fi || { fail "$what: workload failed: $(head -5 "$t/out")"; continue; }
		build/luaprof report -q "$f" -f collapsed -o "$t/alloc.folded" 2>"$t/err" ||
			{ fail "$what: report failed: $(cat "$t/err")"; continue; }
		w=$(build/luaprof report -q -f info "$f" | sed -n 's/^meta.wrapper: //p')
		[ $runner = luajit-compiled ] && want=compiled || want=$want_wrapper
		[ "$w" = "$want" ] || fail "$what: the $w wrapper ran, not the $want one"
		# The agent keeps a sampled block only while it is allocated and counts the
		# freed ones by stack and size: what it holds follows the live heap (a ring of
		# 512 tables here, and the garbage not yet collected), not the run's length.
		read -r nsamp held < <(build/luaprof report -q -f info "$f" | awk '
			/^samples: / { s = $2 } /^meta.samples_held: / { h = $2 }
			END { print s + 0, h + 0 }')
		[ "$nsamp" -ge 1000 ] && [ "$held" -ge 1 ] && [ $((held * 20)) -le "$nsamp" ] ||
			fail "$what: the agent held $held sampled blocks at once for $nsamp samples"
		build/luaprof report -q "$f" -f collapsed --value inuse_space -o "$t/inuse.folded" \
			2>"$t/err" || fail "$what: --value inuse_space: $(cat "$t/err")"
		# Totals and the split by the path's line.
		read -r total a b nostack < <(awk -v a=";@$src:${at[call_a]};@$src:${at[a]};" \
			-v b=";@$src:${at[call_b]};@$src:${at[b]};" -v run=";@$src:${at[run]};" '{
				v = $NF; tot += v
				if (index($0, a)) A += v; else if (index($0, b)) B += v
				if (!index($0, run)) bad += v
			} END { printf "%d %d %d %d\n", tot, A, B, bad }' "$t/alloc.folded")
		pct_total=$(( total * 100 / total_true ))
		[ $pct_total -ge 90 ] && [ $pct_total -le 110 ] ||
			fail "$what: estimated total $total bytes, true $total_true ($pct_total%)"
		[ "$nostack" -eq 0 ] ||
			fail "$what: $nostack bytes in stacks without the call at line ${at[run]}"
		# inuse: only tables in the ring survive, a small part of what was allocated.
		inuse=$(awk '{ s += $NF } END { print s + 0 }' "$t/inuse.folded")
		[ "$inuse" -lt $(( total / 20 )) ] ||
			fail "$what: in-use estimate $inuse is not small next to $total allocated"
		if [ $jit = off ]; then
			share=$(( (a * 1000 / (total > 0 ? total : 1) + 5) / 10 ))
			[ $share -ge 35 ] && [ $share -le 45 ] ||
				fail "$what: path A has $share% of the sampled bytes, want 40% +- 5"
			# The exact shape of path A: host main ... lua_pcall, then the Lua path.
			grep -Eq "(^|;)main;.*lua_pcall;@$src:${at[run]};@$src:${at[call_a]};@$src:${at[a]};table.new [0-9]+\$" \
				"$t/alloc.folded" || fail "$what: no stack main..lua_pcall;run;path_a;table.new:
$(head -3 "$t/alloc.folded")"
			# Frees that had to look the live-sample map up stay a few per sample: the
			# bitmap in front of it forgets a sample once it is freed (a bitmap that
			# never forgot had 30-240 times the samples here, and grew with time).
			read -r nsmp looks < <(build/luaprof report -q -f info "$f" | awk -F': ' '
				$1 == "meta.samples" { s = $2 } $1 == "meta.sample_lookups" { l = $2 }
				END { print s + 0, l + 0 }')
			[ "$nsmp" -gt 0 ] && [ "$looks" -le $((4 * nsmp)) ] ||
				fail "$what: $looks live-map lookups for $nsmp samples, want at most 4 each"
			echo "ok $what: path A $share% (true 40%), total $pct_total% of true, in use $inuse B," \
				"$looks lookups for $nsmp samples"
		else
			# The loop runs as traces, whose own code allocates: those samples are
			# shown under the trace's frame, as CPU samples in a trace are.
			traced=$(awk -v src="@$src:" '{ if (index($0, "TRACE [") && index($0, src)) r += $NF }
				END { print r + 0 }' "$t/alloc.folded")
			[ $((traced * 10)) -ge $((total * 9)) ] ||
				fail "$what: $traced of $total sampled bytes under a TRACE frame, want 90 %:
$(sort -t' ' -k2 -nr "$t/alloc.folded" | head -2)"
			echo "ok $what: total $pct_total% of true, in use $inuse B," \
				"$((traced * 100 / (total > 0 ? total : 1)))% under a TRACE frame"
		fi
	done
done

# folded NAME WHAT SCRIPT [LUAJIT OPTION...]: runs SCRIPT with $t/NAME.bin as its profile
# and renders $t/NAME.folded (collapsed stacks).
folded() {
	local n=$1 what=$2 script=$3
	shift 3
	LUA_CPATH= luajit "$@" "$script" "$t/$n.bin" >"$t/$n.out" 2>&1 ||
		fail "$what workload: $(head -5 "$t/$n.out")"
	build/luaprof report -q "$t/$n.bin" -f collapsed -o "$t/$n.folded" 2>"$t/err" ||
		fail "$what profile: $(cat "$t/err")"
}

# -- A sampled profile that caught no allocation is still a sampled profile (it was read
# as an exact one that saw no event: an empty memprof report, "nothing was allocated").
LUA_CPATH= luajit -e "package.cpath = 'build/?.so;' .. package.cpath
	local mp = require('luaprof').memprof
	assert(mp.start('$t/none.bin', { sample = '1M' }))
	local t = {} for i = 1, 10 do t[i] = {} end
	assert(mp.stop())" 2>"$t/err" || fail "sampled profile without samples: $(cat "$t/err")"
build/luaprof report -q -f info "$t/none.bin" | grep -q '^kind: memory (sampled allocation stacks)$' ||
	fail "a sampled profile without samples: $(build/luaprof report -q -f info "$t/none.bin" | head -3)"
build/luaprof report -q -f memprof "$t/none.bin" >/dev/null 2>&1 &&
	fail "a sampled profile without samples was given the exact-mode memprof report"
build/luaprof report -q "$t/none.bin" | grep -q 'No samples' ||
	fail "a sampled profile without samples: $(build/luaprof report -q "$t/none.bin" | head -3)"
# Cut right before the extension (after the epilogue byte 0x80; the symbol table names
# luaprof.so's functions, some with "lpx" in them): its prologue says the agent wrote one,
# so the file reads as cut (it read as a whole exact profile of nothing).
at=$(python3 -c 'import sys; print(open(sys.argv[1], "rb").read().rfind(b"\x80lpx\x01") + 1)' "$t/none.bin")
head -c "$at" "$t/none.bin" >"$t/nocut.bin"
build/luaprof report -q -f info "$t/nocut.bin" 2>/dev/null | grep -q '^complete: no' ||
	fail "a sampled profile cut before its extension reads as complete: $(build/luaprof report -q -f info "$t/nocut.bin" 2>&1 | head -4)"
build/luaprof report -q "$t/nocut.bin" >/dev/null 2>"$t/err"
[ $? = 3 ] && grep -q 'warning: .*truncated before its luaprof extension' "$t/err" ||
	fail "a sampled profile cut before its extension: no truncation warning: $(cat "$t/err")"
# An older agent's (no flag in the prologue): nothing says it was sampled, the report warns.
python3 -c 'import sys
d = bytearray(open(sys.argv[1], "rb").read())
d[d.find(b"ljm\x03\x01\x00\x00") + 4] = 0
open(sys.argv[1], "wb").write(d)' "$t/nocut.bin"
build/luaprof report -q "$t/nocut.bin" >/dev/null 2>"$t/err"
grep -q 'warning: .* has no allocation event and no luaprof extension' "$t/err" ||
	fail "an older sampled profile cut before its extension: no warning: $(cat "$t/err")"

# -- A child forked while a sampled profile runs, once its parent has exited: its own
# sampled profile starts and has samples (the stack sampler it inherited read the VM
# through the parent's pid, and the start was refused as "the CPU profiler samples
# another Lua state").
cat >"$t/orphan.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local ffi = require "ffi"
ffi.cdef "int fork(void); int getpid(void); int getppid(void); int usleep(unsigned);"
local mp = require("luaprof").memprof
assert(mp.start(arg[1] .. "/orphan-parent.bin", { sample = "16K" }))
local parent = ffi.C.getpid()
if ffi.C.fork() ~= 0 then
  mp.stop()
  os.exit(0)
end
for _ = 1, 500 do
  if ffi.C.getppid() ~= parent then break end
  ffi.C.usleep(10000)
end
local ok, msg = mp.start(arg[1] .. "/orphan-child.bin", { sample = "4K" })
local t = {}
for i = 1, 20000 do t[i] = { i } end
local stopped = ok and mp.stop()
local f = io.open(arg[1] .. "/orphan.txt", "w")
f:write(tostring(ok), " ", tostring(msg), " ", tostring(stopped), "\n")
f:close()
EOF
rm -f "$t/orphan.txt"
LUA_CPATH= luajit "$t/orphan.lua" "$t" >"$t/orphan.out" 2>&1 || fail "orphan workload: $(head -5 "$t/orphan.out")"
for _ in $(seq 100); do [ -s "$t/orphan.txt" ] && break; sleep 0.1; done
if [ "$(cat "$t/orphan.txt" 2>/dev/null)" != "true nil true" ]; then
	fail "a forked child whose parent exited: start, message, stop: $(cat "$t/orphan.txt" 2>/dev/null || echo 'no answer')"
else
	build/luaprof report -q -f top "$t/orphan-child.bin" >"$t/orphan.top" 2>"$t/err" &&
		grep -q 'orphan\.lua' "$t/orphan.top" ||
		fail "the orphan child's profile: $(cat "$t/err") $(head -5 "$t/orphan.top")"
fi

# -- Stacks deeper than the profiler keeps are counted (meta truncated), not cut silently;
# the shallow ones of the workload above are not.
LUA_CPATH= luajit -e "package.cpath = 'build/?.so;' .. package.cpath
	local mp = require('luaprof').memprof
	local keep = {}
	local function r(n)
		if n == 0 then for i = 1, 2000 do keep[#keep + 1] = { i } end return 0 end
		return r(n - 1) + 0
	end
	assert(mp.start('$t/deep.bin', { sample = 4096 }))
	r(3000)
	assert(mp.stop())" 2>"$t/err" || fail "deep recursion: $(cat "$t/err")"
cut=$(build/luaprof report -q -f info "$t/deep.bin" | sed -n 's/^meta.truncated: //p')
[ "${cut:-0}" -gt 0 ] || fail "deep recursion: no sample counted as cut (meta.truncated '$cut')"
cut=$(build/luaprof report -q -f info "$t/luajit-off.bin" | sed -n 's/^meta.truncated: //p')
[ "$cut" = 0 ] || fail "shallow stacks counted as cut: meta.truncated '$cut'"

# -- lua_close with a sampled profile running: the stream is finished, samples and all.
cat >"$t/close.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
assert(require("luaprof").memprof.start(arg[1], { sample = 4096 }))
local keep = {}
for i = 1, 20000 do keep[i] = { i, tostring(i) } end
EOF
LUA_CPATH= luajit "$t/close.lua" "$t/close.bin" >"$t/close.out" 2>&1 ||
	fail "script exiting with a sampled profile running: $(cat "$t/close.out")"
build/luaprof report "$t/close.bin" -f top -n 3 -o "$t/close.txt" 2>"$t/err" ||
	fail "sampled profile closed by lua_close does not parse: $(cat "$t/err")"
grep -Eq 'Samples: [1-9][0-9]+' "$t/close.txt" || fail "no samples after lua_close: $(head -2 "$t/close.txt")"

# -- Allocations made while a trace exits (a collector step inside lj_trace_exit, under
# the exit handler's saved registers): their host stack goes on from the interpreter's C
# frame to main like every other (it used to stop in the exit handler, leaving ~4.5 % of
# this workload's bytes with their Lua frames as roots).
cat >"$t/texit.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
assert(mp.start(arg[1], { sample = 4096 }))
local function build(n)
  local parts = {}
  for i = 1, n do parts[#parts + 1] = string.format("%05d:%s", i, tostring(i * 3)) end
  return table.concat(parts, ",")
end
local s = 0
for _ = 1, 200 do s = s + #build(2000) end
assert(mp.stop())
EOF
folded texit trace-exit "$t/texit.lua"
read -r all rootless < <(awk '{ t += $NF; if ($0 !~ /(^|;)main;/) b += $NF }
	END { print t + 0, b + 0 }' "$t/texit.folded")
[ "$all" -gt 0 ] && [ "$rootless" -eq 0 ] ||
	fail "trace exits: $rootless of $all bytes in stacks that do not reach main:
$(grep -v '\(^\|;\)main;' "$t/texit.folded" | sort -t' ' -k2 -nr | head -3)"

# -- Functions a trace inlined (JIT on): their frames are only in the trace's snapshots,
# whose frame links hold each call's return PC. f's leak, inlined through g into driver's
# loop, made in a side trace started inside them, before a guard still in f: the whole
# path at its call lines (driver's frame was at its first line, 17, and g missing). After
# an inlined call returns, the code runs under the callee's snapshot until the next guard:
# after()'s table, made once h has returned, is never charged to h (it was, 99 % of the
# bytes, in a first version), its caller at the call or the line; nor g3 called again by
# its unrolled loop.
cat >"$t/inl.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
assert(mp.start(arg[1], { sample = 4096 }))
local keep = {}
local function f(i)
  local v = {i, i}
  if i % 10 == 0 then
    keep[#keep + 1] = v
  end
  if #keep < 0 then error("no") end
  return v
end
local function g(i)
  local v = f(i)
  return v
end
local function driver(n)
  for i = 1, n do
    g(i)
  end
end
driver(300000)
local st, kept = {0, 2.5}, {}
local function h(t, i)
  t[1] = i
  return t[2] + i
end
local function after(n)
  local s = 0
  for i = 1, n do
    local y = h(st, i)
    kept[i % 64 + 1] = { y, s }
    s = s + 1
  end
end
after(300000)
local sink = {}
local function g3(k, p)
  sink[1] = p
  if k % 7 == 3.5 then return 1 end
  return 2
end
local function caller(x)
  local p = "x"
  for j = 1, 3 do
    local r = g3(x + j, p)
    p = r .. x
  end
  return p
end
local function driver3(n)
  local s
  for i = 1, n do s = caller(i + 0.5) end
  return s
end
driver3(300000)
assert(mp.stop())
EOF
folded inl inlined "$t/inl.lua" -jon
read -r in_f whole after_t in_h < <(awk '/inl\.lua:8;TRACE / { f += $NF
	if ($0 ~ /inl\.lua:22;[^;]*inl\.lua:19;[^;]*inl\.lua:14;[^;]*inl\.lua:8;TRACE /) w += $NF }
	/inl\.lua:36;.*;TRACE / { a += $NF; if ($0 ~ /inl\.lua:2[56];/ || $0 !~ /inl\.lua:36;[^;]*inl\.lua:3[12];TRACE /) h += $NF }
	END { print f + 0, w + 0, a + 0, h + 0 }' "$t/inl.folded")
[ "$in_f" -gt 0 ] && [ $((whole * 100)) -ge $((in_f * 90)) ] ||
	fail "inlined functions: $whole of $in_f bytes at f's line in a trace have the path 22;19;14;8:
$(grep 'inl\.lua:8;TRACE ' "$t/inl.folded" | grep -v 'inl\.lua:19;[^;]*inl\.lua:14;' | sort -t' ' -k2 -nr | head -3)"
[ "$after_t" -gt 0 ] && [ "$in_h" -eq 0 ] ||
	fail "inlined call returned: $in_h of $after_t bytes made after h returned are under h, or not at after()'s lines:
$(grep 'inl\.lua:36;.*;TRACE ' "$t/inl.folded" | sort -t' ' -k2 -nr | head -3)"
# The same call site called again, in a loop the compiler unrolled (caller's j loop): the
# next snapshot holds g3's call link for link, but its arguments are new. caller's string
# (line 47), made once g3 returned, is never charged to g3 (68 % of it was).
read -r d3 in_g3 < <(awk '/inl\.lua:56;.*;TRACE / { d += $NF; if ($0 ~ /;@[^;]*inl\.lua:(39|40|41);/) g += $NF }
	END { print d + 0, g + 0 }' "$t/inl.folded")
[ "$d3" -gt 0 ] && [ "$in_g3" -eq 0 ] ||
	fail "a call site called again: $in_g3 of $d3 bytes under g3, which had returned:
$(grep 'inl\.lua:56;.*;TRACE ' "$t/inl.folded" | sort -t' ' -k2 -nr | head -3)"

# -- A pcall the trace inlined, and the function it runs: pcall is a frame of its own
# (the function it runs links to it by a pcall frame's type, not a PC). The whole path
# (the trace's start line, 16, and neither mid nor work before).
cat >"$t/pc.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
assert(mp.start(arg[1], { sample = 4096 }))
local keep = {}
local function work(i)
  local v = { i }
  keep[i % 64 + 1] = v
  return #v
end
local function mid(i)
  local ok, r = pcall(work, i)
  return r
end
local function driver(n)
  local s = 0
  for i = 1, n do
    s = s + mid(i)
  end
  return s
end
driver(300000)
assert(mp.stop())
EOF
folded pc pcall "$t/pc.lua" -jon
read -r traced whole < <(awk '/;TRACE / { t += $NF
	if ($0 ~ /pc\.lua:21;[^;]*pc\.lua:17;[^;]*pc\.lua:11;pcall;[^;]*pc\.lua:[5-7];TRACE /) w += $NF }
	END { print t + 0, w + 0 }' "$t/pc.folded")
[ "$traced" -gt 0 ] && [ $((whole * 100)) -ge $((traced * 90)) ] ||
	fail "pcall inlined: $whole of $traced bytes under a TRACE frame have the path 21;17;11;pcall;work:
$(grep ';TRACE ' "$t/pc.folded" | sort -t' ' -k2 -nr | head -3)"

# -- A coroutine whose stack grows in trace exits (recursion, JIT on): those allocations
# happen inside C frames the coroutine entered (lj_vm_cpcall), below its resume frame, and
# the walk found neither its resumer's Lua frames nor the native stack above it.
folded coro coroutine tests/integration/coro_exits.lua -jon
read -r all rootless body resumed < <(awk '{ t += $NF; if ($0 !~ /(^|;)main;/) b += $NF
	if ($0 ~ /coro_exits\.lua:9(;|$)/) { c += $NF; if ($0 ~ /coro_exits\.lua:12;coroutine\.wrap_aux;/) r += $NF } }
	END { print t + 0, b + 0, c + 0, r + 0 }' "$t/coro.folded")
[ "$all" -gt 0 ] && [ "$rootless" -eq 0 ] ||
	fail "coroutine: $rootless of $all bytes in stacks that do not reach main:
$(grep -v '\(^\|;\)main;' "$t/coro.folded" | sort -t' ' -k2 -nr | head -3)"
[ "$body" -gt 0 ] && [ "$resumed" -eq "$body" ] ||
	fail "coroutine: $resumed of $body bytes of its body under the resuming line (coro_exits.lua:12):
$(grep 'coro_exits\.lua:9' "$t/coro.folded" | grep -v 'coro_exits\.lua:12;coroutine\.wrap_aux;' | head -3)"

# -- ffi.typeof and ffi.cast parse their type strings under a VM entry of their own
# (lj_vm_cpcall) with no Lua frame above it: the parser's allocations keep their Lua frames
# where the builtin was called, right under lua_pcall, never after the builtin's C code
# (the report took that entry for the Lua frames' own, for ~80 % of these bytes).
cat >"$t/ctype.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local ffi = require("ffi")
local mp = require("luaprof").memprof
local arr = ffi.new("int[10]")
assert(mp.start(arg[1], { sample = 4096 }))
local s = 0
for j = 1, 20000 do
  s = s + ffi.cast("const int *", arr)[0] + ffi.sizeof(ffi.typeof("struct { int a" .. (j % 50) .. "; }"))
end
assert(mp.stop())
EOF
folded ctype ctype "$t/ctype.lua" -joff
read -r all placed < <(awk '{ t += $NF
	if ($0 ~ /;lua_pcall;(lj_vm_[^;]*;)*@[^;]*ctype\.lua:8;ffi\.(typeof|cast)(;| )/) p += $NF }
	END { print t + 0, p + 0 }' "$t/ctype.folded")
[ "$all" -gt 0 ] && [ $((placed * 100)) -ge $((all * 95)) ] ||
	fail "ffi type parsing: $placed of $all bytes with their Lua frames right under lua_pcall:
$(sort -t' ' -k2 -nr "$t/ctype.folded" | head -3)"

# -- A failed coroutine.resume stores false in its frame's function slot before it makes
# its message: every message (56 B each, a new string each round) is on the calling line,
# under lua_pcall (it had no Lua frame; exact mode crashed there).
cat >"$t/deadco.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local co = coroutine.create(function() end)
coroutine.resume(co)
assert(mp.start(arg[1], { sample = 1 }))
for _ = 1, 300 do
  coroutine.resume(co); collectgarbage() -- the message is freed: made anew each round
end
assert(mp.stop())
EOF
folded deadco dead-resume "$t/deadco.lua" -joff
placed=$(awk '$0 ~ /;lua_pcall;@[^;]*deadco\.lua:7 [0-9]+$/ { p += $NF } END { print p + 0 }' \
	"$t/deadco.folded")
[ "$placed" = $((300 * 56)) ] ||
	fail "failed coroutine.resume: $placed bytes on the calling line, not 300 x 56:
$(sort -t' ' -k2 -nr "$t/deadco.folded" | head -3)"

# -- Recursion through table.sort's comparator, 100 deep: each level adds a VM entry and
# four host frames, so the host walk (256 frames) is cut short about 60 levels in. The
# levels the cut host stack cannot reach stay at the root, the main chunk's line first
# (under the main chunk's caller, pmain, a C function of the Lua stack): never after host
# frames of the recursion (they took the outermost VM entry left for the program's first
# and hung the main chunk's line from it). Stacks not cut reach the host's main.
cat >"$t/deep.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local keep = {}
local function leaf() for i = 1, 20000 do keep[i % 500 + 1] = { i } end end
local function rec(n)
  if n == 0 then return leaf() end
  table.sort({ 2, 1 }, function(a, b) rec(n - 1); return a < b end)
end
assert(mp.start(arg[1], { sample = 2048 }))
rec(100)
assert(mp.stop())
EOF
folded deep deep-sort "$t/deep.lua" -joff
# Placed: the main chunk's line is the first Lua frame, right after lua_pcall (the host
# stack reaches it) or after at most one frame (pmain, a C function of the Lua stack).
placed='{ i = index($0, ";@"); n = split(substr($0, 1, i - 1), pre, ";")
	ok = index($0, "deep.lua:10;") && substr($0, i + 1) ~ /^@[^;]*deep\.lua:10;/ &&
	     (n <= 1 || pre[n] == "lua_pcall") }'
read -r all cut misplaced < <(awk "$placed"'{ t += $NF; if ($0 !~ /^_start;/) c += $NF
	if (!ok) m += $NF } END { print t + 0, c + 0, m + 0 }' "$t/deep.folded")
[ "$all" -gt 0 ] && [ "$cut" -gt 0 ] && [ "$misplaced" -eq 0 ] ||
	fail "cut stacks: $misplaced of $all bytes ($cut in cut stacks) with host frames before the main chunk's line:
$(awk "$placed"'!ok' "$t/deep.folded" | head -2 | cut -c1-300)"

# -- The same recursion 12 deep inside coroutine.wrap, the comparator calling through
# pcall: each level is a C frame of the coroutine (lj_vm_call) over its resume frame, and
# finding the resumer (the main thread's wrap call) stopped after 8 of them: every stack
# lost main and the wrap line. The leaf's bytes (line 4) all reach main through
# coroutine.wrap_aux (coroutine.wrap's own, on line 10, are the main thread's).
cat >"$t/deepco.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local keep = {}
local function leaf() for i = 1, 20000 do keep[i % 500 + 1] = { i } end end
local function rec(n)
  if n == 0 then return leaf() end
  table.sort({ 2, 1 }, function(a, b) pcall(rec, n - 1); return a < b end)
end
assert(mp.start(arg[1], { sample = 4096 }))
local co = coroutine.wrap(function() rec(12) end)
co()
assert(mp.stop())
EOF
folded deepco deep-sort-coroutine "$t/deepco.lua" -joff
re='(^|;)main;.*;@[^;]*deepco\.lua:11;coroutine\.wrap_aux;'
read -r all rooted < <(awk -v re="$re" '/deepco\.lua:4[; ]/ { t += $NF; if ($0 ~ re) r += $NF }
	END { print t + 0, r + 0 }' "$t/deepco.folded")
[ "$all" -gt 0 ] && [ "$rooted" -eq "$all" ] ||
	fail "coroutine, 12 comparators deep: $rooted of $all bytes of the leaf reach main through the wrap call:
$(grep 'deepco\.lua:4[; ]' "$t/deepco.folded" | grep -Ev "$re" | sort -t' ' -k2 -nr | head -2 | cut -c1-300)"

# -- The JIT compiler's allocations (IR, snapshots, machine code) happen in its protected
# call (lj_vm_cpcall from lj_trace_ins), a VM entry with no Lua frame, while it compiles a
# loop of Lua code that allocates nothing itself: they are shown on top of the compiled
# line, as the C code that made that call, never with the line as the leaf (all of these
# bytes were, the line placed after the compiler's frames; exact mode calls them INTERNAL).
cat >"$t/jitcomp.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
assert(mp.start(arg[1], { sample = 256 }))
local s = 0
for n = 1, 200 do
  local f = load("local s = 0 for i = 1, 300 do s = s + i % " .. (n % 7 + 3) .. " end return s", "=jitchunk")
  s = s + f()
end
assert(mp.stop())
EOF
folded jitcomp jitcomp "$t/jitcomp.lua"
read -r chunk leaf placed < <(awk '{ if (index($0, ";=jitchunk:1")) { c += $NF
		if ($0 ~ /;=jitchunk:1 [0-9]+$/) l += $NF
		if ($0 ~ /;lua_pcall;@[^;]*jitcomp\.lua:7;=jitchunk:1;[^@]* [0-9]+$/) p += $NF } }
	END { print c + 0, l + 0, p + 0 }' "$t/jitcomp.folded")
[ "$chunk" -gt 0 ] && [ "$leaf" = 0 ] && [ $((placed * 100)) -ge $((chunk * 95)) ] ||
	fail "JIT compiler: of $chunk bytes under the compiled chunk, $leaf with it as the leaf, $placed on top of it under lua_pcall:
$(grep jitchunk "$t/jitcomp.folded" | sort -t' ' -k2 -nr | head -3)"

# -- Chunks parsed inside a C function of the VM (require's loader, package.loaders[2],
# itself a lua_CFunction called by require through lua_call): sampled in the parser, below
# lua_loadx's protected call (no Lua frame: left out of the host stack), the capture's
# host stack starts at the VM code calling the loader, state C. The report took require's
# code there for the loader's own frame: every Lua part went one VM entry out, the main
# chunk's line after lua_cpcall and pmain above _start (~18 % of this loop's bytes). Each
# stack reaches main like the heaviest one, and the loops' lines follow lua_pcall: require
# under line 6, the loader called directly on line 7. Debian's luajit and luajit2.
mkdir -p "$t/reqmod"
echo 'local M = {} for i = 1, 50 do M["f" .. i] = function() return i end end return M' \
	>"$t/reqmod/reqmod.lua"
cat >"$t/req.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
package.path = arg[2] .. "/?.lua;" .. package.path
local mp = require("luaprof").memprof
local function load() package.loaded.reqmod = nil return require("reqmod") end
assert(mp.start(arg[1], { sample = 64 }))
for _ = 1, 200 do load() end
for _ = 1, 200 do package.loaders[2]("reqmod") end
assert(mp.stop())
EOF
for runner in "${runners[@]}"; do
	f=$t/req-$runner.bin
	if [ $runner = luajit ]; then
		LUA_CPATH= luajit "$t/req.lua" "$f" "$t/reqmod" >"$t/req.out" 2>&1
	else
		LD_LIBRARY_PATH=$lj2lib LUA_CPATH= $lj2 "$t/req.lua" "$f" "$t/reqmod" >"$t/req.out" 2>&1
	fi || { fail "require loop ($runner): $(head -5 "$t/req.out")"; continue; }
	build/luaprof report -q "$f" -f collapsed -o "$t/req.folded" 2>"$t/err" ||
		{ fail "require loop ($runner): $(cat "$t/err")"; continue; }
	f0=$fails
	root=$(sort -t' ' -k2 -nr "$t/req.folded" | head -1 | sed -n 's/^\(\(.*;\)\{0,1\}main;\).*/\1/p')
	read -r all rootless req reqbad ldr ldrbad < <(awk -v root="$root" \
		-v s="@$t/req.lua:" '{
			v = $NF; all += v
			if (root == "" || index($0, root) != 1) rootless += v
			if (index($0, ";require;")) {
				req += v
				if (!index($0, ";lua_pcall;" s "6;require;") &&
				    !index($0, ";lua_pcall;" s "6;lj_vm_asm_begin;require;"))
					reqbad += v
			}
			if (index($0, s "7")) {
				ldr += v
				if (!index($0, ";lua_pcall;" s "7;") && !index($0, ";lua_pcall;" s "7 "))
					ldrbad += v
			}
		} END { print all + 0, rootless + 0, req + 0, reqbad + 0, ldr + 0, ldrbad + 0 }' \
		"$t/req.folded")
	[ "$all" -gt 0 ] && [ "$rootless" -eq 0 ] ||
		fail "require loop ($runner): $rootless of $all bytes in stacks not rooted at '${root}':
$(awk -v root="$root" 'index($0, root) != 1' "$t/req.folded" | sort -t' ' -k2 -nr | head -2)"
	[ "$req" -gt 0 ] && [ "$reqbad" -eq 0 ] ||
		fail "require loop ($runner): $reqbad of $req bytes through require not at lua_pcall;line 6;require:
$(grep ';require;' "$t/req.folded" | grep -vF ";lua_pcall;@$t/req.lua:6;" | sort -t' ' -k2 -nr | head -2)"
	[ "$ldr" -gt 0 ] && [ "$ldrbad" -eq 0 ] ||
		fail "package.loaders[2] loop ($runner): $ldrbad of $ldr bytes of line 7 not right after lua_pcall:
$(grep -F "@$t/req.lua:7" "$t/req.folded" | grep -vF ";lua_pcall;@$t/req.lua:7" | sort -t' ' -k2 -nr | head -2)"
	[ "$fails" = "$f0" ] && echo "ok require loop ($runner): all $all bytes rooted at main, $req through require," \
		"$ldr of the loader's direct calls, in order"
done

# -- A C module required after start: the unwinder learns its unwind tables, so its
# function's samples hang under main ... lua_pcall and the calling Lua lines (without them
# the walk stopped in the module and the Lua frames were left as roots).
if luajit_dev "$t/apt.log"; then
	mkdir -p "$t/cmod"
	cc_test "$t/cmod/memprof_cmod.so" tests/integration/memprof_cmod.c -O2 -fPIC -shared \
		-I$inc || fails=$((fails + 1))
	cat >"$t/cmod.lua" <<'EOF'
package.cpath = "build/?.so;" .. arg[2] .. "/?.so;" .. package.cpath
local mp = require("luaprof").memprof
assert(mp.start(arg[1], { sample = 64 }))
local m = require "memprof_cmod"
local keep = {}
local function many()
  for i = 1, 2000 do keep[i % 100] = m.newud() end
end
many()
if not arg[3] then assert(mp.stop()) end
EOF
	# Stopped by the program, and by lua_close at the script's end: by then the package
	# library's finalizer has unloaded the module, whose mapping the profile must already
	# hold (it did not: raw addresses, and the module's frames below the Lua ones).
	for how in stop close; do
		LUA_CPATH= luajit "$t/cmod.lua" "$t/cmod.bin" "$t/cmod" ${how#stop} >"$t/cmod.out" 2>&1 ||
			fail "C module workload ($how): $(head -5 "$t/cmod.out")"
		build/luaprof report -q "$t/cmod.bin" -f collapsed -o "$t/cmod.folded" 2>"$t/err" ||
			fail "C module profile ($how): $(cat "$t/err")"
		read -r whole rooted < <(awk '/memprof_cmod_newud [0-9]+$/ { w += $NF
			if ($0 ~ /(^|;)main;.*lua_pcall;@[^;]*cmod\.lua:9;@[^;]*cmod\.lua:7;(lj_vm[^;]*;)?memprof_cmod_newud [0-9]+$/) r += $NF }
			END { print w + 0, r + 0 }' "$t/cmod.folded")
		[ "$whole" -gt 0 ] && [ $((rooted * 100)) -ge $((whole * 99)) ] ||
			fail "C module loaded after start ($how): $rooted of $whole bytes under main..lua_pcall;9;7;memprof_cmod_newud:
$(sort -t' ' -k2 -nr "$t/cmod.folded" | head -3)"
	done
	# A coroutine resumed by C code (the module's resume, lua_resume): its allocations
	# hang under the main chunk's call of that code, JIT on and off (they were rooted at
	# the VM entry: "lj_vm_asm_begin;memprof_cmod_resume;..."), and under a coroutine
	# resumed from C in turn with its frames. Line 8 allocates, 11 is the coroutine's
	# body, 12 the other's, 13 the main chunk's loop.
	cat >"$t/csched.lua" <<'EOF'
package.cpath = "build/?.so;" .. arg[2] .. "/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local m = require "memprof_cmod"
assert(mp.start(arg[1], { sample = 4096 }))
local keep = {}
local function alloc(n)
  local t = {}
  for i = 1, n do t[i] = { i } end
  return t
end
local co = coroutine.create(function() while true do keep[#keep % 8 + 1] = alloc(200) coroutine.yield() end end)
local outer = coroutine.create(function() while true do m.resume(co) coroutine.yield() end end)
for _ = 1, 2000 do if arg[3] then m.resume(outer) else m.resume(co) end end
assert(mp.stop())
EOF
	R='(lj_vm[^;]*;)?memprof_cmod_resume;@[^;]*csched\.lua'
	for jit in on off; do
		for how in c cc; do
			LUA_CPATH= luajit -j$jit "$t/csched.lua" "$t/csched.bin" "$t/cmod" ${how#c} \
				>"$t/cmod.out" 2>&1 ||
				fail "C scheduler workload (JIT $jit, $how): $(head -5 "$t/cmod.out")"
			build/luaprof report -q "$t/csched.bin" -f collapsed -o "$t/csched.folded" 2>"$t/err" ||
				fail "C scheduler profile (JIT $jit, $how): $(cat "$t/err")"
			want=":13;$R:11;"
			[ $how = cc ] && want=":13;$R:12;$R:11;"
			read -r whole rooted < <(awk -v want="$want" '/csched\.lua:11;/ { w += $NF
				if ($0 ~ ("(^|;)main;.*lua_pcall;@[^;]*csched\\.lua" want)) r += $NF }
				END { print w + 0, r + 0 }' "$t/csched.folded")
			[ "$whole" -gt 100000 ] && [ $((rooted * 100)) -ge $((whole * 95)) ] ||
				fail "C scheduler (JIT $jit, $how): $rooted of $whole bytes of a coroutine resumed from C under main..lua_pcall and every frame between:
$(sort -t' ' -k2 -nr "$t/csched.folded" | head -3)"
		done
	done
	# A C function's own allocations after its lua_resume returned, the coroutine (yielded)
	# still the VM's current thread: under the line calling the function, from the main
	# chunk (line 8) and from a coroutine.wrap (6; the main chunk's call, 9), JIT on and
	# off. They had no frame below the VM entry ("lj_vm_asm_begin;memprof_cmod_resume_alloc").
	cat >"$t/cafter.lua" <<'EOF'
package.cpath = "build/?.so;" .. arg[2] .. "/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local m = require "memprof_cmod"
assert(mp.start(arg[1], { sample = 1024 }))
local keep, co = {}, coroutine.create(function() while true do coroutine.yield() end end)
local w = coroutine.wrap(function() while true do keep[2] = m.resume_alloc(co) coroutine.yield() end end)
for _ = 1, 20000 do
  keep[1] = m.resume_alloc(co)
  w()
end
assert(mp.stop())
EOF
	R='(lj_vm[^;]*;)?memprof_cmod_resume_alloc [0-9]+$'
	for jit in on off; do
		LUA_CPATH= luajit -j$jit "$t/cafter.lua" "$t/cafter.bin" "$t/cmod" >"$t/cmod.out" 2>&1 ||
			fail "C code after its lua_resume, JIT $jit: $(head -5 "$t/cmod.out")"
		read -r whole top wrapped < <(build/luaprof report -q "$t/cafter.bin" -f collapsed 2>/dev/null |
			awk -v r="$R" '/memprof_cmod_resume_alloc [0-9]+$/ { w += $NF
				if ($0 ~ ("(^|;)main;.*lua_pcall;@[^;]*cafter\\.lua:8;" r)) t += $NF
				if ($0 ~ ("(^|;)main;.*lua_pcall;@[^;]*cafter\\.lua:9;coroutine\\.wrap_aux;(lj_vm[^;]*;)?@[^;]*cafter\\.lua:6;" r)) c += $NF }
			END { print w + 0, t + 0, c + 0 }')
		[ "$whole" -gt 1000000 ] && [ $((top * 10)) -ge $((whole * 3)) ] &&
			[ $((wrapped * 10)) -ge $((whole * 3)) ] && [ $(((top + wrapped) * 100)) -ge $((whole * 99)) ] ||
			fail "C code after its lua_resume, JIT $jit: $top (main chunk) + $wrapped (coroutine) of $whole bytes under the calling line:
$(build/luaprof report -q "$t/cafter.bin" -f collapsed | grep memprof_cmod_resume_alloc | sort -t' ' -k2 -nr | head -3)"
	done
	# The collector's own allocations (it shrinks the VM's 2 MiB string buffer, resizes
	# the string table) in a step that tostring's allocation (line 3) or a table's (4)
	# ran: under that line with the collector's C frames and a GC frame on top, as a CPU
	# sample has it. They were tostring's and the line's own bytes (18 MiB of tostring's
	# 40 small strings, 8 MiB more on line 4).
	cat >"$t/gcshrink.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
assert(mp.start(arg[1], { sample = 65536 }))
local sink
local function huge() for i = 1, 40 do sink = string.rep("x", 2 * 1024 * 1024 - 30, tostring(i)) end end
local function tiny() for i = 1, 2000000 do sink = {} end end
huge() sink = nil tiny()
assert(mp.stop())
EOF
	for jit in on off; do
		LUA_CPATH= luajit -j$jit "$t/gcshrink.lua" "$t/gcs.bin" >"$t/gcs.out" 2>&1 ||
			fail "collector allocations workload (JIT $jit): $(head -5 "$t/gcs.out")"
		read -r gc rooted tostr < <(build/luaprof report -q "$t/gcs.bin" -f collapsed 2>/dev/null |
			awk '/;GC [0-9]+$/ { g += $NF; if ($0 ~ /(^|;)main;.*lua_pcall;@[^;]*gcshrink\.lua:7;/) r += $NF }
			     /;tostring [0-9]+$/ { t += $NF }
			     END { print g + 0, r + 0, t + 0 }')
		[ "$gc" -gt $((4 << 20)) ] && [ "$rooted" = "$gc" ] && [ "$tostr" -lt $((1 << 20)) ] ||
			fail "collector allocations (JIT $jit): $gc bytes under GC ($rooted rooted at main), $tostr as tostring's own:
$(build/luaprof report -q "$t/gcs.bin" -f collapsed | sort -t' ' -k2 -nr | head -4)"
	done
	# Allocations of a trace's exit (sunk tables its snapshot restores, in lj_trace_exit
	# under lj_vm_cpcall, an entry with no Lua frame) in such a coroutine: the exit
	# handler made them (the cpcall's code was taken for the Lua frames' entry: the main
	# chunk's line went inside the coroutine, after lj_trace_exit, for 98 % of the bytes).
	# Line 18 is the coroutine's loop, 20 the main chunk's.
	cat >"$t/cexit.lua" <<'EOF'
package.cpath = "build/?.so;" .. arg[2] .. "/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local m = require "memprof_cmod"
jit.opt.start("hotexit=60000", "maxside=0")
assert(mp.start(arg[1], { sample = 64 }))
local keep = {}
local function f(n)
  local s = 0
  for i = 1, 200 do
    local t = { i, i + 1, i + 2 }
    if i == n then keep[1] = t end
    s = s + t[1] + t[3]
  end
  return s
end
local co = coroutine.create(function()
  local k = 0
  while true do k = k + 1 f(100 + k % 50) coroutine.yield() end
end)
for _ = 1, 3000 do m.resume(co) end
assert(mp.stop())
EOF
	LUA_CPATH= luajit -jon "$t/cexit.lua" "$t/cexit.bin" "$t/cmod" >"$t/cmod.out" 2>&1 ||
		fail "trace exits in a coroutine resumed from C: $(head -5 "$t/cmod.out")"
	read -r whole placed < <(build/luaprof report -q "$t/cexit.bin" -f collapsed 2>/dev/null |
		awk '/cexit\.lua:18;/ { w += $NF
			if ($0 ~ /(^|;)main;.*lua_pcall;@[^;]*cexit\.lua:20;(lj_vm[^;]*;)?memprof_cmod_resume;@[^;]*cexit\.lua:18;/) p += $NF }
		END { print w + 0, p + 0 }')
	[ "$whole" -gt 100000 ] && [ $((placed * 100)) -ge $((whole * 95)) ] ||
		fail "trace exits in a coroutine resumed from C: $placed of $whole bytes under main..lua_pcall;20;memprof_cmod_resume;18:
$(build/luaprof report -q "$t/cexit.bin" -f collapsed | sort -t' ' -k2 -nr | head -3)"
	# The same after calls of another C function from the same place, whose walks the
	# unwinder keeps and reuses below that place: the reused frames must confirm the main
	# thread too (the frame the reuse starts at was left out: the coroutine lost the main
	# chunk's frames in one run of four). Ten runs; line 8 allocates, 14 resumes.
	cat >"$t/cache.lua" <<'EOF'
package.cpath = "build/?.so;" .. arg[2] .. "/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local m = require "memprof_cmod"
assert(mp.start(arg[1], { sample = 64 }))
local keep = {}
local co = coroutine.create(function()
  while true do
    keep[1] = { 1, 2, 3, 4, 5, 6, 7, 8 }
    coroutine.yield()
  end
end)
for _ = 1, 20000 do
  for _ = 1, 8 do keep[2] = m.newud() end
  m.resume(co)
end
assert(mp.stop())
EOF
	bad=0
	for run in 1 2 3 4 5 6 7 8 9 10; do
		LUA_CPATH= luajit "$t/cache.lua" "$t/cache.bin" "$t/cmod" >"$t/cmod.out" 2>&1 ||
			fail "reused walks workload: $(head -5 "$t/cmod.out")"
		read -r whole rooted < <(build/luaprof report -q "$t/cache.bin" -f collapsed 2>/dev/null |
			awk '/cache\.lua:8( |;)/ { w += $NF; if ($0 ~ /cache\.lua:14;(lj_vm[^;]*;)?memprof_cmod_resume;@[^;]*cache\.lua:8( |;)/) r += $NF }
			END { print w + 0, r + 0 }')
		[ "$whole" -gt 100000 ] && [ "$rooted" = "$whole" ] || bad=$((bad + 1))
	done
	[ $bad = 0 ] || fail "reused walks: in $bad of 10 runs the coroutine resumed from C lost the main chunk's frames"
	# Exact mode, closed the same way: the module's function named in the memprof report.
	sed 's/, { sample = 64 }//' "$t/cmod.lua" >"$t/cmod-exact.lua"
	LUA_CPATH= luajit "$t/cmod-exact.lua" "$t/cmodx.bin" "$t/cmod" close >"$t/cmod.out" 2>&1 ||
		fail "C module workload (exact, close): $(head -5 "$t/cmod.out")"
	build/luaprof report -q "$t/cmodx.bin" 2>"$t/err" | grep -Eq '^memprof_cmod_newud:0x[0-9a-f]+: 2000 events' ||
		fail "exact mode, closed by lua_close: memprof_cmod_newud not named: $(build/luaprof report -q "$t/cmodx.bin" | head -4)"
	# A library that kept the allocator while a sampled profile ran (the wrapper) and uses
	# it after stop: the wrapper passes straight through, without sampling into a stream
	# that is finished; the next profile starts, and both files are whole.
	cat >"$t/kept.lua" <<'EOF'
package.cpath = "build/?.so;" .. arg[3] .. "/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local m = require "memprof_cmod"
assert(mp.start(arg[1], { sample = 64 }))
m.keepalloc()
assert(m.usealloc(100) == 100)
assert(mp.stop())
assert(m.usealloc(200000) == 200000)
assert(mp.start(arg[2], { sample = 4096 }))
local t = {}
for i = 1, 1000 do t[i] = { i } end
assert(mp.stop())
assert(m.usealloc(1000) == 1000)
print("ok")
EOF
	LUA_CPATH= luajit "$t/kept.lua" "$t/kept1.bin" "$t/kept2.bin" "$t/cmod" >"$t/kept.out" 2>&1 &&
		grep -q '^ok$' "$t/kept.out" || fail "allocator kept past stop: $(head -5 "$t/kept.out")"
	for f in kept1 kept2; do
		build/luaprof report -q -f info "$t/$f.bin" >"$t/$f.info" 2>"$t/err" &&
			grep -q '^complete: yes$' "$t/$f.info" &&
			grep -q '^samples: [1-9]' "$t/$f.info" ||
			fail "allocator kept past stop: $f.bin: $(cat "$t/err" "$t/$f.info" | head -5)"
	done
else
	echo "skipped the C module check: $why"
fi

# The compiler's allocations: its phases allocate under the same frames (the entry
# into the compiler, the loop's Lua frames), and each sample's state goes on top. The
# state is part of the stack's key: when it was not, a stack's last state (ASM) named
# the OPT and RECORD allocations made at it too (0 OPT samples of ~90). A trace starting
# (its number's array grown, still in state INTERP) is RECORD: the chunks run by line 6
# allocate nothing of their own, so all their stacks end in a state (before: ~2.4 KB
# showed as the loop line's own). The loading loop compiles too, stitched at load (line 5).
cat >"$t/compiler.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
assert(mp.start(arg[1], { sample = 64 }))
for k = 1, 300 do
  local f = load("local s = 0 for i = 1, 300 do s = s + i * " .. k .. " + (i % 7) end return s")
  f()
end
assert(mp.stop())
EOF
LUA_CPATH= luajit -jon "$t/compiler.lua" "$t/comp.bin" >"$t/comp.out" 2>&1 ||
	fail "compiler allocations workload: $(head -5 "$t/comp.out")"
read -r asm opt rec rooted stateless < <(build/luaprof report -q "$t/comp.bin" -f collapsed 2>/dev/null |
	awk '/;ASM [0-9]+$/ { a++ } /;OPT [0-9]+$/ { o++ } /;RECORD [0-9]+$/ { r++ }
	     /;(ASM|OPT|RECORD) [0-9]+$/ && /(^|;)main;.*;@[^;]*compiler\.lua:[56];/ { in56++ }
	     /compiler\.lua:6;\[string "local s = 0/ && !/;(ASM|OPT|RECORD|GC) [0-9]+$/ { n++ }
	     END { print a + 0, o + 0, r + 0, in56 + 0, n + 0 }')
[ "$asm" -ge 100 ] && [ "$opt" -ge 20 ] && [ "$rec" -ge 1 ] && [ "$rooted" = $((asm + opt + rec)) ] &&
	[ "$stateless" = 0 ] ||
	fail "compiler allocations: $asm ASM, $opt OPT and $rec RECORD stacks ($rooted under the loading line), $stateless in the loaded chunks without a state:
$(build/luaprof report -q "$t/comp.bin" -f collapsed | grep 'compiler\.lua:6;\[string' | grep -vE ';(ASM|OPT|RECORD|GC) [0-9]+$' | head -3)"

# Coroutines nested deep (a recursive generator: one coroutine.wrap per level), every
# allocation sampled: 60 deep, every stack is whole (rooted at the calling line, none
# cut); 200 deep, past what the walks follow (128 resumers), the deepest are cut and
# counted in meta truncated, and the allocations after them (line 13: one level) are
# rooted still. The walks followed 16 resumers: past that the stacks lost their root, and
# a host walk that stopped there was reused by every later one (all 50 of line 13's
# rootless).
cat >"$t/deepco.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local function walk(t)
  return coroutine.wrap(function()
    coroutine.yield({})
    if t.l then for v in walk(t.l) do coroutine.yield(v) end end
  end)
end
local tree = {}
for i = 1, tonumber(arg[2]) do tree = {l = tree} end
assert(mp.start(arg[1], {sample = 1}))
for _ in walk(tree) do end
for i = 1, 50 do coroutine.wrap(function() local t = {} end)() end
assert(mp.stop())
EOF
for depth in 60 200; do
	LUA_CPATH= luajit -joff "$t/deepco.lua" "$t/deepco.bin" $depth >"$t/deepco.out" 2>&1 ||
		{ fail "deep coroutines ($depth): $(head -5 "$t/deepco.out")"; continue; }
	cut=$(build/luaprof report -q -f info "$t/deepco.bin" | sed -n 's/^meta\.truncated: //p')
	read -r all rooted after < <(build/luaprof report -q -f collapsed --value alloc_objects \
		"$t/deepco.bin" 2>/dev/null | awk '{ a += $NF }
			/(^|;)main;.*lua_pcall;@[^;]*deepco\.lua:1[23](;| )/ { r += $NF }
			/(^|;)main;.*lua_pcall;@[^;]*deepco\.lua:13;coroutine\.wrap_aux;/ { w += $NF }
			END { print a + 0, r + 0, w + 0 }')
	if [ $depth = 60 ]; then
		[ "$all" -ge 400 ] && [ "$rooted" = "$all" ] && [ "$cut" = 0 ] ||
			fail "coroutines 60 deep: $rooted of $all sampled allocations rooted, $cut cut"
	else
		[ "$cut" -gt 0 ] && [ "$after" = 50 ] ||
			fail "coroutines 200 deep: $cut stacks cut, $after of line 13's 50 rooted after them"
	fi
done

# -- Compact unwind steps against libunwind's: an agent built with -DLP_UNWIND_SELFCHECK
# steps every frame that has a compact rule both ways and counts the differences, in
# memprof captures (the VM thread) and in the CPU profiler's handler, JIT off and on.
uscdir=build/unwind-selfcheck
if make -s BUILD=$uscdir CFLAGS="-O2 -g -DLP_UNWIND_SELFCHECK" $uscdir/luaprof.so \
	>"$t/usc-build.log" 2>&1; then
	for runner in "${runners[@]}"; do
		for jit in off on; do
			what="$runner, JIT $jit, unwind selfcheck"
			if [ $runner = luajit ]; then
				LUA_CPATH= luajit tests/integration/unwind_selfcheck.lua $uscdir \
					"$t/usc-m.bin" "$t/usc-c.bin" $jit >"$t/usc.out" 2>&1
			else
				LD_LIBRARY_PATH=$lj2lib LUA_CPATH= $lj2 tests/integration/unwind_selfcheck.lua \
					$uscdir "$t/usc-m.bin" "$t/usc-c.bin" $jit >"$t/usc.out" 2>&1
			fi && grep -q '^ran$' "$t/usc.out" ||
				{ fail "$what: workload failed: $(head -5 "$t/usc.out")"; continue; }
			for kind in m c; do
				read -r steps bad < <(build/luaprof report -q -f info "$t/usc-$kind.bin" |
					awk -F': ' '$1 == "meta.unwind_compact_steps" { s = $2 }
					$1 == "meta.unwind_compact_bad" { b = $2 } END { print s + 0, b + 0 }')
				# Thousands of frames a run: a handful would mean most rules lost
				# their compact form.
				[ "$steps" -ge 2000 ] && [ "$bad" -eq 0 ] ||
					fail "$what ($kind): $bad of $steps compact steps unlike libunwind's"
			done
			echo "ok $what"
		done
	done
else
	fail "the self-checking agent does not build: $(tail -5 "$t/usc-build.log")"
fi

# -- pprof for `go tool pprof` (when Go is installed): the four memory sample types.
if command -v go >/dev/null 2>&1; then
	mkdir -p "$t/home" "$t/gocache"
	# Every 4 KiB: the 80 KiB the workload holds at stop give about 20 live samples (at
	# the 64 KiB of the runs above, about one: none in a run of four, and the in-use
	# views had no table.new).
	f=$t/pprof.bin
	LUA_CPATH= luajit tests/integration/memprof_sampled.lua 4096 "$f" off >"$t/out" 2>&1 ||
		fail "pprof workload: $(head -5 "$t/out")"
	build/luaprof report -q "$f" -o "$t/mem.pb.gz" 2>"$t/err" || fail "pprof output: $(cat "$t/err")"
	for idx in alloc_space alloc_objects inuse_space inuse_objects; do
		HOME="$t/home" GOCACHE="$t/gocache" GOTOOLCHAIN=local GOPROXY=off GOTELEMETRY=off \
			PPROF_TMPDIR="$t" go tool pprof -sample_index=$idx -top "$t/mem.pb.gz" \
			>"$t/pp.out" 2>"$t/pp.err" || { fail "go tool pprof -sample_index=$idx: $(cat "$t/pp.err")"; continue; }
		grep -q 'table.new' "$t/pp.out" || fail "go tool pprof $idx: no table.new: $(head -8 "$t/pp.out")"
	done
	# The period, as Go's heap profiles give it: bytes between samples.
	HOME="$t/home" GOCACHE="$t/gocache" GOTOOLCHAIN=local GOPROXY=off GOTELEMETRY=off \
		PPROF_TMPDIR="$t" go tool pprof -raw "$t/mem.pb.gz" >"$t/pp.out" 2>"$t/pp.err" &&
		grep -q '^PeriodType: space bytes$' "$t/pp.out" && grep -q '^Period: 4096$' "$t/pp.out" ||
		fail "pprof period of a sampled profile: $(head -4 "$t/pp.out") $(cat "$t/pp.err")"
fi

# -- A sampled stream cut short inside its extension: reported as truncated, and the
# samples read keep their weights (the sampling interval is written before them). The
# agent writes each stack's record followed by its samples (live ones, then freed ones
# counted by size); this workload's two call paths end the file with some 120 bytes each:
# a cut of 120 bytes loses the last path and keeps the other's bytes whole. Unweighted,
# the estimate would be a hundredth of the whole file's.
f=$t/luajit-off.bin
if [ -s "$f" ]; then
	size=$(stat -c %s "$f")
	head -c $((size - 120)) "$f" >"$t/cut.bin"
	build/luaprof report -f info "$t/cut.bin" >"$t/cut.info" 2>"$t/err"
	rc=$?
	[ $rc = 3 ] && grep -q "^complete: no (truncated after $((size - 120)) bytes)$" "$t/cut.info" &&
		grep -q 'the file is truncated inside its luaprof extension' "$t/err" ||
		fail "info on a cut sampled stream: exit $rc: $(cat "$t/err") $(head -5 "$t/cut.info")"
	full=$(build/luaprof report -q -f collapsed "$f" | awk '{ s += $NF } END { print s + 0 }')
	cut=$(build/luaprof report -q -f collapsed "$t/cut.bin" 2>/dev/null | awk '{ s += $NF } END { print s + 0 }')
	[ "$cut" -ge $((full / 4)) ] && [ "$cut" -lt "$full" ] ||
		fail "a cut sampled stream estimates $cut bytes, the whole one $full"
fi

# -- The CPU profiler while a sampled memory profile runs (binary trees): its samples taken
# inside the allocator wrapper, generated or compiled, are named sampled_wrapper and their
# stacks go on through the VM's allocation path to main (a generated stub has no unwind
# table: without a rule of its own the walk stopped there, leaving the sample's callers out).
cat >"$t/both.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local lp = require("luaprof")
local function tree(d) if d == 0 then return {} end return { tree(d - 1), tree(d - 1) } end
local function check(t) if not t[1] then return 1 end return 1 + check(t[1]) + check(t[2]) end
assert(lp.memprof.start(arg[1], { sample = 524288 }))
assert(lp.sysprof.start({ mode = "C", interval = 1, clock = "wall", path = arg[2] }))
local t0, s = os.clock(), 0
while os.clock() - t0 < 2 do s = s + check(tree(12)) end
assert(lp.sysprof.stop())
assert(lp.memprof.stop())
print("ran")
EOF
for stub in 1 0; do
	LUAPROF_ALLOCSTUB=$stub LUA_CPATH= luajit "$t/both.lua" "$t/both-m.bin" "$t/both-c.bin" \
		>"$t/both.out" 2>&1 && grep -q '^ran$' "$t/both.out" ||
		{ fail "CPU and memory profiles together: $(head -5 "$t/both.out")"; continue; }
	w=$(build/luaprof report -q -f info "$t/both-m.bin" | sed -n 's/^meta.wrapper: //p')
	[ $stub = 0 ] && want=compiled || want=$want_wrapper
	[ "$w" = "$want" ] || fail "CPU and memory profiles together: the $w wrapper ran, not the $want one"
	build/luaprof report -q -f collapsed "$t/both-c.bin" -o "$t/both.folded" 2>"$t/err" ||
		{ fail "CPU profile with a sampled memory profile: $(cat "$t/err")"; continue; }
	read -r inwrap rooted < <(awk '/;sampled_wrapper(;GC)? [0-9]+$/ { w += $NF
		if ($0 ~ /(^|;)main;.*;sampled_wrapper(;GC)? [0-9]+$/) r += $NF }
		END { print w + 0, r + 0 }' "$t/both.folded")
	[ "$inwrap" -gt 0 ] && [ "$rooted" -eq "$inwrap" ] ||
		fail "CPU samples in the $w allocator wrapper: $rooted of $inwrap under main:
$(grep ';sampled_wrapper' "$t/both.folded" | grep -v '\(^\|;\)main;' | head -3)"
	# A sample in the wrapper while a trace allocates is C code the trace called, not
	# the trace's own code: its Lua frames go under the trace's VM entry, never below
	# the VM's C functions the trace called (when the generated stub, anonymous memory
	# as trace code is, was taken for trace code: 8 such stacks in 2,000 samples).
	below='TRACE \[[0-9]+\][^;]*;(luajit\+0x[0-9a-f]+;)+@'
	odd=$(grep -cE "$below" "$t/both.folded")
	[ "$odd" -eq 0 ] || fail "CPU samples with the $w allocator wrapper: $odd stacks with Lua frames below the C code a trace called:
$(grep -E "$below" "$t/both.folded" | head -2 | cut -c1-400)"
	echo "ok CPU samples in the $w allocator wrapper: $rooted of $inwrap under main"
done

# -- Freed samples are counted by stack and size: 50 call sites each making strings of
# 2,000 distinct sizes (each sampled at 64 bytes, then freed) kept 100,000 counts, 46-91
# bytes each, for as long as the profile ran. Past 16,384 counts sizes are rounded to 6
# significant bits: ~200 counts a site at most here, and the estimate of the bytes
# allocated stays within 1 % of the exact profile's (the rounding is at most 0.8 %, as
# often up as down).
cat >"$t/keys.lua" <<'EOF'
for k = 1, 50 do
  local f = load("local rep = string.rep return function(n) return #rep('x', n) end",
                 "@gen_" .. k .. ".lua")()
  for i = 1, 2000 do f(4 * i) end
end
EOF
# strbytes FILE: bytes of the stacks through a gen_ chunk, the collector's left out.
strbytes() {
	build/luaprof report -q -f collapsed "$1" |
		awk '/@gen_/ && !/;GC [0-9]+$/ { s += $NF } END { print s + 0 }'
}
f0=$fails
if build/luaprof record -q --memory --sample 64 -o "$t/keys.txt" -- luajit -joff "$t/keys.lua" \
	>"$t/keys.out" 2>&1 &&
	build/luaprof record -q --memory -o "$t/keys-exact.txt" -- luajit -joff "$t/keys.lua" \
		>>"$t/keys.out" 2>&1; then
	keys=$(build/luaprof report -q -f info "$t/keys.bin" |
		sed -n 's/^meta.samples_freed_keys: //p')
	[ -n "$keys" ] && [ "$keys" -le 30000 ] ||
		fail "distinct sizes: ${keys:-no} counts of freed samples, want at most 30,000"
	est=$(strbytes "$t/keys.bin") exact=$(strbytes "$t/keys-exact.bin")
	dev=$(((est - exact) * 1000 / (exact > 0 ? exact : 1)))
	[ "$exact" -gt 400000000 ] && [ "$dev" -ge -10 ] && [ "$dev" -le 10 ] ||
		fail "distinct sizes: sampled estimate $est bytes, exact $exact"
	[ $fails = "$f0" ] &&
		echo "ok distinct sizes: $keys counts of freed samples, estimate $est bytes, exact $exact"
else
	fail "distinct sizes: record failed: $(tail -3 "$t/keys.out")"
fi

# -- Blocks near the sampling interval: a live sample stands for 1 / q blocks (q = 1 -
# exp(-size / interval)), a fraction that must not be rounded away: rounded sample by
# sample, 5,000 strings of 6,028 bytes (1.30 each, sampled every 4 KiB) were counted as
# 1 each, 22 % low, and 10,000 of 2,088 bytes (2.50) as 3, 18 % high; rounded to nearest
# once per stack, the same 6 KiB strings made by 4,000 chunks of their own (a stack and
# a sample or none each) still came to 22 % low. Each line's estimated objects and bytes,
# allocated and in use, are within 8 % of the exact profile's (their sampling error is
# 1 to 2 %).
cat >"$t/near.lua" <<'EOF'
local tnew = require("table.new")
local n1, n2 = 5000, 10000
local ids = tnew(n2, 0)
for i = 1, n2 do ids[i] = tostring(10000 + i) end
local big, mid = tnew(n1, 0), tnew(n2, 0)
local a, b = string.rep("a", 5995), string.rep("b", 2055)
for i = 1, n1 do big[i] = a .. ids[i] end
for i = 1, n2 do mid[i] = b .. ids[i] end
local fs, gen, c = tnew(4000, 0), tnew(4000, 0), string.rep("c", 5995)
for k = 1, 4000 do fs[k] = load("local c, id, keep, k = ...\nkeep[k] = c .. id", "=gen" .. k) end
for k = 1, 4000 do fs[k](c, ids[k], gen, k) end
collectgarbage()
EOF
# nearval FILE VALUE ERE: VALUE of the stacks through a frame matching ERE (whole), the
# collector's left out.
nearval() {
	build/luaprof report -q -f collapsed --value "$2" "$1" | awk -v re="^($3)\$" '
		!/;GC [0-9]+$/ {
			n = split($0, f, /[; ]/)
			for (i = 1; i < n; i++) {
				k = f[i]; sub(/.*\//, "", k); sub(/^@/, "", k)
				if (k ~ re) { s += $NF; break }
			}
		} END { print s + 0 }'
}
f0=$fails
if build/luaprof record -q --memory --sample 4096 -o "$t/near.folded" -- luajit -joff \
	"$t/near.lua" >"$t/near.out" 2>&1 &&
	build/luaprof record -q --memory -o "$t/near-exact.folded" -- luajit -joff "$t/near.lua" \
		>>"$t/near.out" 2>&1; then
	got=
	for v in alloc_objects inuse_objects alloc_space inuse_space; do
		for l in near.lua:7 near.lua:8 '=?gen[0-9]+:2'; do
			est=$(nearval "$t/near.bin" $v "$l") exact=$(nearval "$t/near-exact.bin" $v "$l")
			dev=$(((est - exact) * 1000 / (exact > 0 ? exact : 1)))
			[ "$exact" -ge 4000 ] && [ "$dev" -ge -80 ] && [ "$dev" -le 80 ] ||
				fail "blocks near the interval: $l's $v estimated $est, exact $exact"
			got="$got $v@$l $est/$exact"
		done
	done
	[ $fails = "$f0" ] && echo "ok blocks near the interval (estimate/exact):$got"
else
	fail "blocks near the interval: record failed: $(tail -3 "$t/near.out")"
fi

# -- Misuse of the sampled option.
cat >"$t/bad.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
for _, o in ipairs({ { sample = 0 }, { sample = "x" }, { sample = -5 }, { sample = 1.5 },
		     { sample = 2^60 }, { sample = "1.5M" }, { sample = "0K" } }) do
  local ok, err, e = mp.start(arg[1], o)
  print(tostring(ok), err, e)
end
local ok, err, e = mp.start(arg[1], { sampel = 4096 })
print("unknown", tostring(ok), err, e)
for _, v in ipairs({ "64K", "1m", 4096 }) do
  local ok, err = mp.start(arg[1], { sample = v })
  print("good", tostring(ok), err, ok and mp.stop())
end
print(tostring(mp.start(arg[1], 5)))
EOF
LUA_CPATH= luajit "$t/bad.lua" "$t/bad.bin" >"$t/bad.out" 2>&1
n=$(grep -c "^nil	profiler misuse: memprof sample must be true, a whole number of bytes from 1 to 2^50, or a string such as '512K', '4M' or '1G'	22$" "$t/bad.out")
[ "$n" = 7 ] || fail "bad sample values: $(cat "$t/bad.out")"
grep -q "^unknown	nil	profiler misuse: unknown memprof option 'sampel' (the one option is sample)	22$" \
	"$t/bad.out" || fail "a misspelt option was not refused: $(cat "$t/bad.out")"
[ "$(grep -c '^good	true	nil	true$' "$t/bad.out")" = 3 ] ||
	fail "sizes in bytes, K or M refused: $(cat "$t/bad.out")"
grep -q '^nil$' "$t/bad.out" || fail "options not a table: $(cat "$t/bad.out")"

# LUAPROF_ALLOCSTUB takes 0 or 1: anything else is refused by a sampled start, which then
# leaves the file that was there as it was; exact mode has no wrapper to choose.
cat >"$t/stubenv.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
print(mp.start(arg[1], { sample = 65536 }))
print(io.open(arg[1]):read("*a"))
local ok, err = mp.start(arg[1])
print(ok, err, ok and mp.stop())
EOF
echo before >"$t/stubenv.bin"
LUAPROF_ALLOCSTUB=yes LUA_CPATH= luajit "$t/stubenv.lua" "$t/stubenv.bin" >"$t/stubenv.out" 2>&1
grep -q "^nil	profiler misuse: LUAPROF_ALLOCSTUB is 'yes': 1 for the generated wrapper where it can be made (the default), 0 for the compiled one	22$" \
	"$t/stubenv.out" || fail "LUAPROF_ALLOCSTUB=yes was not refused: $(cat "$t/stubenv.out")"
grep -q '^before$' "$t/stubenv.out" ||
	fail "a refused start changed the file: $(cat "$t/stubenv.out")"
grep -q '^true	nil	true$' "$t/stubenv.out" ||
	fail "exact mode refused under LUAPROF_ALLOCSTUB=yes: $(cat "$t/stubenv.out")"

[ $fails = 0 ] || exit 1
echo "ok"
