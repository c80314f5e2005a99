#!/usr/bin/env bash
# A Lua state that runs on another thread than the one that started the profile
# (vm_other_thread.c, as wrk: a script's init on the main thread starts it, the work runs on
# a worker thread while the main thread waits in pthread_join).
#  - CPU (wall clock, 1 kHz): the samples are the main thread's, which runs no Lua code.
#    They read the worker's Lua frames and put them above the main thread's first frame
#    (`@w.lua:11;_start;...;pthread_join` under wrk), in the worker's VM state (INTERP);
#    with the CPU clock there were no samples, and nothing said why. Now: every stack
#    starts at _start with no Lua frame, the profile counts those samples (meta
#    lua_elsewhere) and report says what happened; with the CPU clock, it says the
#    process's CPU time was other threads' (meta process_cpu_ns).
#  - Sampled memory: the allocations are the worker's. Each stack was cut at its first
#    frame (the walk knew the main thread's stack only): Lua frames alone, every one of
#    them "cut short". Now under the worker's frames: worker;call;lua_pcall.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof luaprof.so
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/host" tests/integration/vm_other_thread.c -O1 -I"$inc" -lluajit-5.1 -lpthread ||
	exit 1

cat >"$t/script.lua" <<'LUA'
package.cpath = CPATH .. ";" .. package.cpath
local lp = require "luaprof"
function init()
	if PROFILE:find("cpu") then
		assert(lp.sysprof.start{ mode = "C", interval = 1, clock = "wall", path = PROFILE })
	else
		assert(lp.memprof.start(PROFILE, { sample = "16K" }))
	end
end
local function spin(n)
	local s = 0
	for i = 1, n do s = (s + i * i) % 1000003 end
	return s
end
function work()
	jit.off()
	local t = os.clock()
	while os.clock() - t < 0.4 do spin(10000) end
	local keep = {}
	for i = 1, 20000 do keep[i] = { i } end -- ALLOC
end
LUA
"$t/host" "$t/script.lua" "$PWD/build/?.so" "$t/cpu.bin" >"$t/host.out" 2>&1 ||
	{ echo "FAIL: the host failed (status $?): $(tail -n 3 "$t/host.out")"; exit 1; }
build/luaprof report -f collapsed -o "$t/cpu.folded" "$t/cpu.bin" 2>"$t/report.err" ||
	{ echo "FAIL: report: $(cat "$t/report.err")"; exit 1; }
total=$(awk '{ n += $NF } END { print n + 0 }' "$t/cpu.folded")
[ "$total" -ge 100 ] || fail "$total samples, want at least 100 (0.4 s at 1 kHz)"
# Lua frames of the script anywhere, and stacks that do not start at the host's _start.
lua=$(grep -c "@$t/script.lua" "$t/cpu.folded")
notroot=$(grep -vc '^_start;' "$t/cpu.folded")
[ "$lua" = 0 ] || fail "$lua stacks with the worker's Lua frames:
$(grep "@$t/script.lua" "$t/cpu.folded" | head -n 3)"
[ "$notroot" = 0 ] || fail "$notroot stacks not rooted at _start:
$(grep -v '^_start;' "$t/cpu.folded" | head -n 3)"
n=$(build/luaprof report -q -f info "$t/cpu.bin" | awk -F': ' '$1 == "meta.lua_elsewhere" { print $2 + 0 }')
[ "${n:-0}" -ge $((total / 2)) ] || fail "meta lua_elsewhere ${n:-none}, want at least half of $total"
grep -q "samples\? ([0-9.]*%) found the Lua state running on another thread" "$t/report.err" ||
	fail "report does not say the state ran on another thread: $(cat "$t/report.err")"
[ $fails -eq 0 ] && echo "ok CPU: $total samples, ${n:-0} while the state ran on the worker, none with its Lua frames"

# -- CPU clock: the main thread waits, the worker runs; no sample, and report said nothing
# of why. The stream has the process's CPU time beside the sampled thread's (meta
# process_cpu_ns), and report says the time was other threads' and what to do.
sed 's/clock = "wall"/clock = "cpu"/' "$t/script.lua" >"$t/script_cpu.lua"
"$t/host" "$t/script_cpu.lua" "$PWD/build/?.so" "$t/cpuclock.bin" >"$t/host.out" 2>&1 ||
	{ echo "FAIL: the host failed (status $?): $(tail -n 3 "$t/host.out")"; exit 1; }
build/luaprof report -f collapsed -o "$t/cpuclock.folded" "$t/cpuclock.bin" 2>"$t/report.err" ||
	fail "report of the CPU-clock profile: $(cat "$t/report.err")"
pcpu=$(build/luaprof report -q -f info "$t/cpuclock.bin" | awk -F': ' '$1 == "meta.process_cpu_ns" { print $2 + 0 }')
[ "${pcpu:-0}" -ge 300000000 ] || fail "meta process_cpu_ns ${pcpu:-none}, want 0.3 s at least (the worker's 0.4 s)"
grep -Eq '^luaprof report: note: the thread sampled, the one that started the profile, ran 0\.0[0-9]+ s on the CPU, the process.s other threads 0\.[3-9][0-9] s: --clock cpu samples that thread alone, while it runs \(no sample here\)\. If the Lua code runs on another thread .*start the profile on that thread, or use --clock wall \(clock = "wall" in sysprof\.start\)' "$t/report.err" ||
	fail "report of a CPU-clock profile whose Lua code ran on another thread does not say so: $(cat "$t/report.err")"
[ $fails -eq 0 ] && echo "ok CPU clock: the other threads' $pcpu ns said"

# -- record, CPU clock: a script whose Lua code a C module runs on a thread of its own as
# the main thread, which started the profile, waits in pthread_join: no sample; record
# advised a higher --rate, or said the program slept. It says the time was other threads'
# (meta process_cpu_ns) and what to do; a run over an earlier profile keeps it, saying so.
if have luajit; then
	cc_test "$t/vm_other_thread_mod.so" tests/integration/vm_other_thread_mod.c -shared -fPIC \
		-I"$inc" -lpthread || exit 1
	cat >"$t/thr.lua" <<'LUA'
package.cpath = arg[1] .. "/?.so;" .. package.cpath
local m = require "vm_other_thread_mod"
local function spin(n) local s = 0 for i = 1, n do s = (s + i * i) % 1000003 end return s end
assert(not m.run(function()
	local t = os.clock()
	while os.clock() - t < 0.4 do spin(10000) end
end))
LUA
	build/luaprof record -o /dev/null --raw "$t/thr.bin" -- luajit "$t/thr.lua" "$t" >/dev/null 2>"$t/err" ||
		fail "record of Lua code on another thread: $(cat "$t/err")"
	grep -Eq '^luaprof record: the thread sampled, the one that started the profile, ran 0\.0[0-9]+ s on the CPU, the process.s other threads 0\.[2-9][0-9] s: --clock cpu samples that thread alone, while it runs \(no sample here\)\. If the Lua code runs on another thread .*start the profile on that thread, or use --clock wall, which samples' "$t/err" &&
		! grep -q 'raise --rate\|slept or waited' "$t/err" ||
		fail "record of Lua code on another thread (--clock cpu): $(cat "$t/err")"
	cp "$t/thr.bin" "$t/thr.kept"
	build/luaprof record -o /dev/null --raw "$t/thr.bin" -- luajit "$t/thr.lua" "$t" >/dev/null 2>"$t/err"
	[ $? = 1 ] && grep -q '^luaprof record: the thread sampled, the one that started the profile' "$t/err" &&
		grep -q "^luaprof record: luajit recorded nothing (no CPU sample: the thread sampled hardly ran, see above): the earlier profile .*thr.bin is kept" "$t/err" &&
		cmp -s "$t/thr.bin" "$t/thr.kept" ||
		fail "record of Lua code on another thread, over an earlier profile: $(cat "$t/err")"
	[ $fails -eq 0 ] && echo "ok record, CPU clock: the other threads' time said"
else
	echo "note: no luajit: record of Lua code on another thread not checked"
fi

# -- Sampled memory -----------------------------------------------------------------------
"$t/host" "$t/script.lua" "$PWD/build/?.so" "$t/mem.bin" >"$t/host.out" 2>&1 ||
	{ echo "FAIL: the host failed (status $?): $(tail -n 3 "$t/host.out")"; exit 1; }
build/luaprof report -q -f collapsed -o "$t/mem.folded" "$t/mem.bin" ||
	{ echo "FAIL: report of the memory profile failed"; exit 1; }
alloc=$(grep -n -- '-- ALLOC' "$t/script.lua" | cut -d: -f1)
read -r all under < <(awk -v a="@$t/script.lua:$alloc" '{
	v = $NF; if (index($0, a)) { all += v; if (index($0, ";worker;call;lua_pcall;")) under += v }
} END { printf "%d %d\n", all, under }' "$t/mem.folded")
cut=$(build/luaprof report -q -f info "$t/mem.bin" | awk -F': ' '$1 == "meta.truncated" { print $2 + 0 }')
# 20,000 tables of 40 bytes or more.
[ "${all:-0}" -ge 400000 ] || fail "memory: ${all:-0} bytes at the allocating line $alloc, want 800 KB"
[ "${under:-0}" = "${all:-0}" ] || fail "memory: $((all - under)) of $all bytes of line $alloc not under worker;call;lua_pcall:
$(grep "@$t/script.lua:$alloc" "$t/mem.folded" | head -n 2)"
[ "${cut:-0}" = 0 ] || fail "memory: ${cut} sampled stacks cut short"
[ $fails -eq 0 ] || exit 1
echo "ok memory: $all bytes at line $alloc, all under the worker's frames, no stack cut"
echo "PASS $name"
