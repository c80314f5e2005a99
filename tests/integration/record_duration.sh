#!/usr/bin/env bash
# `luaprof record -d/--duration SECONDS -- PROGRAM`: the program is stopped SECONDS after it
# starts (SIGTERM to it and the processes it started; SIGKILL to those left 11 s later) and
# the profile, finished by the agent as the program dies, is rendered: whole, with the
# samples of where the program was, record's status 0 and nothing left running. A program
# that ends first, or is stopped first (Ctrl-C, SIGTERM to record), is as without -d. Bad
# values are refused before the program starts. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/record.sh
record_setup

# Each program writes its pid to the file arg[1] once it runs.
cat >"$t/loop.lua" <<'LUA'
local f = io.open(arg[1], "w") f:write(io.open("/proc/self/stat"):read("*n")) f:close()
local function g(n) local s = 0 for i = 1, n do s = s + math.sqrt(i) end return s end
local x = 0
while true do x = x + g(1e4) end -- line 4: compiled, forever
LUA
# Blocked in a C call (system's wait4) for its child, which writes its own pid.
cat >"$t/block.lua" <<'LUA'
local f = io.open(arg[1], "w") f:write(io.open("/proc/self/stat"):read("*n")) f:close()
os.execute("echo $$ >" .. arg[1] .. ".child; exec sleep 100") -- line 2
LUA
cat >"$t/churn.lua" <<'LUA'
local f = io.open(arg[1], "w") f:write(io.open("/proc/self/stat"):read("*n")) f:close()
local keep = {}
local function mk(i) return { i, tostring(i) } end
while true do
	for i = 1, 1000 do keep[i % 500 + 1] = mk(i) end -- line 5
end
LUA
# As block.lua, the shell and its sleep ignoring SIGTERM.
cat >"$t/stay.lua" <<'LUA'
local f = io.open(arg[1], "w") f:write(io.open("/proc/self/stat"):read("*n")) f:close()
os.execute("trap '' TERM; echo $$ >" .. arg[1] .. ".child; exec sleep 100")
LUA
# Ctrl-C's error caught (interpreted: stopped at the first), then a cleanup of 2-3 s, status 3.
cat >"$t/cleanup.lua" <<'LUA'
jit.off()
local f = io.open(arg[1], "w") f:write(io.open("/proc/self/stat"):read("*n")) f:close()
pcall(function() local x = 0 while true do x = x + math.sqrt(x + 1) end end)
local t, x = os.time(), 0
while os.time() - t < 3 do x = x + math.sqrt(x + 1) end
os.exit(3)
LUA
cat >"$t/short.lua" <<'LUA'
local f = io.open(arg[1], "w") f:write(io.open("/proc/self/stat"):read("*n")) f:close()
local t, x = os.clock(), 0
while os.clock() - t < 0.3 do x = x + math.sqrt(t) end
os.exit(tonumber(arg[2]) or 0)
LUA

# gone PID: the process has ended (no such process, or a zombie not yet reaped by init).
gone() { [ ! -e "/proc/$1/stat" ] || [ "$(sed 's/.*) \(.\).*/\1/' "/proc/$1/stat" 2>/dev/null)" = Z ]; }
# rec NAME RECORD-ARGS...: runs record in $t (timeout 60 as a safety net: a hang fails,
# never blocks the suite) with its output through a pipe, which a process left behind
# would hold open; sets rc and ms (elapsed); NAME.info is the raw stream's `report -f info`.
rec() {
	local v=$1 t0
	shift
	rm -f "$t/$v.pid" "$t/$v.pid.child"
	t0=$(now_ms)
	(cd "$t" && timeout -k 5 60 "$lp" record "$@" 2>&1; echo "rc=$?") | cat >"$t/$v.out"
	rc=$(sed -n 's/^rc=//p' "$t/$v.out")
	ms=$(($(now_ms) - t0))
	if [ -s "$t/$v.bin" ]; then "$lp" report "$t/$v.bin" -f info >"$t/$v.info" 2>&1; else : >"$t/$v.info"; fi
}
# stopped NAME LOW HIGH [PROGRAM]: record stopped PROGRAM (luajit) by -d as asked: status 0,
# within LOW..HIGH ms, the summary says so, the profile whole (stopped by the signal), the
# program gone.
stopped() {
	local v=$1 prog=${4:-luajit}
	[ "$rc" = 0 ] || fail "$v: record exited ${rc:-?}, not 0: $(head -3 "$t/$v.out")"
	[ "$ms" -ge "$2" ] && [ "$ms" -le "$3" ] || fail "$v: took $ms ms (want $2..$3)"
	grep -q "^luaprof record: --duration [0-9.]*: stopped $prog after [0-9.]* s (SIGTERM); the profile ends there$" "$t/$v.out" ||
		fail "$v: no word of the stop: $(head -3 "$t/$v.out")"
	grep -q 'killed by signal' "$t/$v.out" && fail "$v: told as killed: $(grep 'killed by' "$t/$v.out")"
	stopped_whole "$v"
	[ -s "$t/$v.pid" ] || fail "$v: the program never ran"
	[ -s "$t/$v.pid" ] && { gone "$(cat "$t/$v.pid")" || fail "$v: the program (pid $(cat "$t/$v.pid")) still runs"; }
}
# samples NAME: the profile's sample count (CPU: samples; memory: events or samples).
samples() { sed -n 's/^\(samples\|events\): \([0-9]*\)$/\2/p' "$t/$1.info" | head -1; }

# -- An infinite compiled loop, CPU time.
rec loop -d 1 -f collapsed -o loop.folded -- luajit loop.lua loop.pid
stopped loop 900 5000
n=$(samples loop)
[ "${n:-0}" -ge 30 ] || fail "loop: ${n:-no} samples in a second of CPU"
grep -q '@loop\.lua:4;@loop\.lua:2;TRACE \[' "$t/loop.folded" || fail "loop: the loop's line missing: $(head -2 "$t/loop.folded")"
# (The profile starts a little after the program, which -d times: 0.99 s is seen under load.)
grep -Eq '^luaprof record: (0\.[5-9]|1\.)[0-9]* s profiled' "$t/loop.out" || fail "loop: summary: $(grep profiled "$t/loop.out")"

# -- Blocked in os.execute("sleep 100"), wall clock, decimal seconds in the long form: the
# shell's sleep is stopped too (it held the pipe, so record's output, for 100 s).
rec block --duration=1.5 --clock wall -f collapsed -o block.folded -- luajit block.lua block.pid
stopped block 1400 5000
[ -s "$t/block.pid.child" ] || fail "block: the child never ran"
[ -s "$t/block.pid.child" ] && { gone "$(cat "$t/block.pid.child")" || fail "block: the program's child (sleep, pid $(cat "$t/block.pid.child")) still runs"; }
n=$(samples block)
[ "${n:-0}" -ge 100 ] || fail "block: ${n:-no} samples in 1.5 s of wall clock at 100 Hz"
grep -q '@block\.lua:2;os\.execute' "$t/block.folded" || fail "block: the blocked line missing: $(head -2 "$t/block.folded")"

# -- A process the program left behind, its parent ended (`sleep 20 &` in os.execute): it is
# record's (a child subreaper with -d) and stopped too. Before, its parent was init, no
# scan found it: it ran on, holding record's output open for its 20 s.
# leaver NAME <<LUA: NAME.lua writes its pid to arg[1], runs the Lua read from standard input
# (an os.execute that leaves a process behind, its pid in arg[1].child), then loops.
leaver() {
	{ echo 'local f = io.open(arg[1], "w") f:write(io.open("/proc/self/stat"):read("*n")) f:close()'
	  cat
	  echo 'local x = 0'
	  echo 'while true do x = x + math.sqrt(x + 1) end'; } >"$t/$1.lua"
}
# left_gone NAME: the process NAME's program left behind has ended (killed if not).
left_gone() {
	local c; c=$(cat "$t/$1.pid.child" 2>/dev/null)
	[ -n "$c" ] || return 0
	gone "$c" || { fail "$1: the process left (pid $c) still runs"; kill -KILL "$c"; }
}
leaver orphan <<'LUA'
os.execute("sleep 20 & echo $! >" .. arg[1] .. ".child")
LUA
rec orphan -d 1 -f collapsed -o orphan.folded -- luajit orphan.lua orphan.pid
stopped orphan 900 5000
[ -s "$t/orphan.pid.child" ] || fail "orphan: the process left never ran"
left_gone orphan
# The same, ignoring SIGTERM (and its sleep): waited for, killed 11 s later, said so.
leaver ostay <<'LUA'
os.execute("sh -c \"trap '' TERM; echo \\$\\$ >" .. arg[1] .. ".child; sleep 30\" &")
LUA
rec ostay -d 1 -f collapsed -o ostay.folded -- luajit ostay.lua ostay.pid
stopped ostay 11000 20000
grep -q '^luaprof record: --duration 1: 2 processes that luajit started did not end within 11 s of SIGTERM (ignoring or handling it): killed with SIGKILL$' "$t/ostay.out" ||
	fail "ostay: no word of the kill: $(grep -- --duration "$t/ostay.out")"
left_gone ostay
# Without -d, or ended before the deadline: left running, as it was (record does not wait).
cat >"$t/leave.lua" <<'LUA'
os.execute("sleep 3 >/dev/null 2>&1 & echo $! >" .. arg[1] .. ".child")
LUA
for d in "" "-d 5"; do
	rec leave $d -f collapsed -o leave.folded -- luajit leave.lua leave.pid
	[ "$ms" -le 2500 ] || fail "leave ${d:-without -d}: took $ms ms"
	[ -s "$t/leave.pid.child" ] && ! gone "$(cat "$t/leave.pid.child")" || fail "leave ${d:-without -d}: the process left was stopped"
	[ -s "$t/leave.pid.child" ] && kill -KILL "$(cat "$t/leave.pid.child")" 2>/dev/null
done
# A child record had before it ran the program (exec'd by a shell that left it): not the
# program's, not stopped (record adopts nothing then). Before, taken for one the program
# left when started in the same clock tick.
rm -f "$t/pre.pid"
(cd "$t" && timeout -k 5 60 sh -c 'sleep 5 & echo $! >pre.pid; exec "$0" record -d 1 -f collapsed -o pre.folded -- luajit loop.lua pre.lpid' "$lp") >"$t/pre.out" 2>&1 ||
	fail "pre: record exited $?: $(head -3 "$t/pre.out")"
[ -s "$t/pre.pid" ] && ! gone "$(cat "$t/pre.pid")" || fail "pre: record's own earlier child was stopped"
[ -s "$t/pre.pid" ] && kill -KILL "$(cat "$t/pre.pid")" 2>/dev/null

# -- The processes the program started are signalled through a pidfd, opened before their
# start time is checked, so that an id reused after the check is never signalled (record
# alone traced: the program, record's child, is sent kill() as before). Before: kill()
# after the check, no pidfd.
if have strace; then
	rm -f "$t/pidfd.pid" "$t/pidfd.pid.child"
	(cd "$t" && timeout -k 5 60 strace -o pidfd.trace -e trace=kill,pidfd_open,pidfd_send_signal \
		"$lp" record -d 1 --clock wall -f collapsed -o pidfd.folded -- luajit block.lua pidfd.pid) >"$t/pidfd.out" 2>&1
	c=$(cat "$t/pidfd.pid.child" 2>/dev/null)
	[ -n "$c" ] || fail "pidfd: the child never ran"
	[ -n "$c" ] && { grep -q "^pidfd_open($c, 0) *= [0-9]" "$t/pidfd.trace" &&
		grep -q '^pidfd_send_signal([0-9]*, SIGTERM, NULL, 0) *= 0' "$t/pidfd.trace" ||
		fail "pidfd: the child (pid $c) not signalled through a pidfd: $(cat "$t/pidfd.trace")"; }
	grep -q "^kill($c," "$t/pidfd.trace" && fail "pidfd: the child sent kill(): $(cat "$t/pidfd.trace")"
	[ -n "$c" ] && { gone "$c" || fail "pidfd: the program's child (pid $c) still runs"; }
fi

# -- A program that exits on its own right at the deadline, while record reads /proc for
# the processes to stop (record held there by gdb at lp_proctree_grow's first call, which is
# the deadline's, until the program is a zombie): its own exit, status 5, told as without
# -d. Before: "--duration 1: stopped luajit after 1.01 s (SIGTERM); it exited with status
# 5" and record's status 0, the SIGTERM sent to a zombie.
if have gdb && nm "$lp" 2>/dev/null | grep -q ' T lp_proctree_grow$'; then
	rm -f "$t/zgo"
	(cd "$t" && timeout -k 5 60 gdb -q -batch -ex 'break lp_proctree_grow' -ex run \
		-ex 'shell touch zgo; sleep 1' -ex delete -ex continue --args \
		"$lp" record -d 1 -f collapsed -o zexit.folded -- \
		luajit -e "while not io.open('zgo') do end os.exit(5)") >"$t/zexit.out" 2>&1
	grep -q '^\[Inferior 1 (process [0-9]*) exited with code 05\]$' "$t/zexit.out" ||
		fail "zexit: record's status not 5: $(grep -E 'Inferior|Breakpoint 1,' "$t/zexit.out")"
	grep -q '^luaprof record: luajit exited with status 5$' "$t/zexit.out" ||
		fail "zexit: no word of the exit: $(grep '^luaprof record:' "$t/zexit.out" | head -3)"
	grep -q -- '--duration' "$t/zexit.out" && fail "zexit: told as -d's: $(grep -- --duration "$t/zexit.out")"
fi

# -- A wrapper that runs luajit (not exec): both stopped, the profile whole.
rec wrap -d 0.5 -f collapsed -o wrap.folded -- sh -c 'luajit loop.lua wrap.pid; echo after'
stopped wrap 400 5000 sh
grep -q '^after$' "$t/wrap.out" && fail "wrap: the wrapper went on after luajit"
grep -q 'still runs' "$t/wrap.out" && fail "wrap: $(grep 'still runs' "$t/wrap.out")"

# -- A wrapper that leaves luajit running in the background and ends first (status 4):
# record waits for luajit, stops it at the deadline; the wrapper's status is record's.
rec bg -d 1 -f collapsed -o bg.folded -- sh -c 'luajit loop.lua bg.pid & sleep 0.3; exit 4'
[ "$rc" = 4 ] || fail "background: record exited ${rc:-?}, not the wrapper's 4: $(head -3 "$t/bg.out")"
[ "$ms" -ge 900 ] && [ "$ms" -le 5000 ] || fail "background: took $ms ms"
grep -q '^luaprof record: --duration 1: stopped the process it profiles (pid [0-9]*) after [0-9.]* s (SIGTERM); the profile ends there$' "$t/bg.out" ||
	fail "background: no word of the stop: $(head -3 "$t/bg.out")"
grep -q '^luaprof record: sh exited with status 4$' "$t/bg.out" || fail "background: the wrapper's status untold: $(head -3 "$t/bg.out")"
grep -q '^complete: yes$' "$t/bg.info" || fail "background: profile cut short: $(head -5 "$t/bg.info")"
[ -s "$t/bg.pid" ] && { gone "$(cat "$t/bg.pid")" || fail "background: luajit (pid $(cat "$t/bg.pid")) still runs"; }

# -- -q: nothing said (status 0 needs no explaining), the profile written all the same.
rec quiet -q -d 0.3 -f collapsed -o quiet.folded -- luajit loop.lua quiet.pid
[ "$rc" = 0 ] || fail "-q: record exited ${rc:-?}, not 0: $(head -3 "$t/quiet.out")"
[ "$(grep -cv '^rc=' "$t/quiet.out")" = 0 ] || fail "-q: said $(head -3 "$t/quiet.out")"
grep -q '^complete: yes$' "$t/quiet.info" || fail "-q: profile cut short: $(head -5 "$t/quiet.info")"

# -- Memory, exact and sampled.
rec mem -d 1 --memory -o mem.txt -- luajit churn.lua mem.pid
stopped mem 900 5000
n=$(samples mem)
[ "${n:-0}" -ge 1000 ] || fail "memory exact: ${n:-no} events"
grep -q '@churn\.lua:[35]' "$t/mem.txt" || fail "memory exact: the churn's lines missing: $(head -8 "$t/mem.txt")"
rec mems -d 1 --memory --sample 64K -o mems.txt -- luajit churn.lua mems.pid
stopped mems 900 5000
n=$(samples mems)
[ "${n:-0}" -ge 100 ] || fail "memory sampled: ${n:-no} samples"
grep -q '@churn\.lua:[35]' "$t/mems.txt" || fail "memory sampled: the churn's lines missing: $(head -8 "$t/mems.txt")"

# -- A program that ends first: its own status, no word of the duration.
rec short -d 30 -f collapsed -o short.folded -- luajit short.lua short.pid 5
[ "$rc" = 5 ] || fail "short: record exited ${rc:-?}, not the program's 5: $(head -3 "$t/short.out")"
[ "$ms" -lt 10000 ] || fail "short: took $ms ms: record waited for the duration"
grep -q -- '--duration' "$t/short.out" && fail "short: $(grep -- --duration "$t/short.out")"
grep -q '^meta.stopped_by: signal$' "$t/short.info" && fail "short: stopped by a signal"
grep -q '^complete: yes$' "$t/short.info" || fail "short: profile cut short: $(head -5 "$t/short.info")"

# -- A program that ignores SIGTERM (and its child): SIGKILL 11 s later, said so; the
# profile is cut short (status 3, as a truncated stream of a program that succeeded).
rec ign -d 0.5 --clock wall -f collapsed -o ign.folded -- sh -c "trap '' TERM; exec luajit block.lua ign.pid"
[ "$rc" = 3 ] || fail "ignored SIGTERM: record exited ${rc:-?}, not 3: $(head -3 "$t/ign.out")"
[ "$ms" -ge 11000 ] && [ "$ms" -le 20000 ] || fail "ignored SIGTERM: took $ms ms (want 11 s after 0.5 s)"
grep -q '^luaprof record: --duration 0.5: sh did not end within 11 s of SIGTERM (it ignores or handles it): killed with SIGKILL' "$t/ign.out" ||
	fail "ignored SIGTERM: no word of the kill: $(head -3 "$t/ign.out")"
for f in ign.pid ign.pid.child; do
	[ -s "$t/$f" ] && { gone "$(cat "$t/$f")" || fail "ignored SIGTERM: $f (pid $(cat "$t/$f")) still runs"; }
done

# -- A program that started more processes than record keeps track of (256): SIGTERM to
# the first 256 found, said so (the others may still run). Before, nothing was said.
rm -f "$t/many.kids"
rec many -d 3 --clock wall -f collapsed -o many.folded -- sh -c 'for i in $(seq 260); do sleep 100 >/dev/null 2>&1 & echo $! >>many.kids; done; exec luajit loop.lua many.pid'
stopped many 2900 10000 sh
grep -q '^luaprof record: --duration 3: sh had started 256 processes or more: SIGTERM went to the first 256 found, and some of the others may still run$' "$t/many.out" ||
	fail "many: no word of the processes left: $(head -3 "$t/many.out")"
left=0
for p in $(cat "$t/many.kids" 2>/dev/null); do
	gone "$p" || [ "$(cat "/proc/$p/comm" 2>/dev/null)" != sleep ] || { left=$((left + 1)); kill -KILL "$p"; }
done
[ "$left" -le 10 ] || fail "many: $left of the program's 260 processes were left running (256 stopped)"

# -- A wrapper that dies of -d's SIGTERM at once, the luajit it runs ignoring it: SIGKILL to
# luajit 11 s later, said of luajit, not of the wrapper (status 3, the profile cut short).
# Before: "sh did not end within 11 s of SIGTERM ... killed with SIGKILL", no word of sh's
# stop.
rec hold -d 0.5 -f collapsed -o hold.folded -- sh -c "(trap '' TERM; exec luajit loop.lua hold.pid); echo after"
[ "$rc" = 3 ] || fail "hold: record exited ${rc:-?}, not 3: $(head -3 "$t/hold.out")"
[ "$ms" -ge 11000 ] && [ "$ms" -le 20000 ] || fail "hold: took $ms ms (want 11 s after 0.5 s)"
grep -q '^luaprof record: --duration 0.5: stopped sh after [0-9.]* s (SIGTERM)$' "$t/hold.out" ||
	fail "hold: no word of the wrapper's stop: $(grep -- --duration "$t/hold.out")"
grep -q '^luaprof record: --duration 0.5: the process it profiles (pid [0-9]*) did not end within 11 s of SIGTERM (it ignores or handles it): killed with SIGKILL, its profile cut short$' "$t/hold.out" ||
	fail "hold: no word of luajit's kill: $(grep -- --duration "$t/hold.out")"
[ -s "$t/hold.pid" ] && { gone "$(cat "$t/hold.pid")" || fail "hold: luajit (pid $(cat "$t/hold.pid")) still runs"; }

# -- The other way round: the wrapper ignores SIGTERM, the luajit it runs dies of it, its
# profile whole; the wrapper (and its sleep) get SIGKILL 11 s later, not said to cut the
# profile short (before: "sh did not end ...: killed with SIGKILL, its profile cut short").
rec wkill -d 0.5 -f collapsed -o wkill.folded -- sh -c "trap '' TERM; sleep 100 & (trap - TERM; exec luajit loop.lua wkill.pid); wait"
[ "$ms" -ge 11000 ] && [ "$ms" -le 20000 ] || fail "wkill: took $ms ms (want 11 s after 0.5 s)"
grep -q '^luaprof record: --duration 0.5: sh did not end within 11 s of SIGTERM (it ignores or handles it): killed with SIGKILL (with 1 process it started)$' "$t/wkill.out" ||
	fail "wkill: $(grep -- --duration "$t/wkill.out")"
grep -q '^complete: yes$' "$t/wkill.info" || fail "wkill: profile cut short: $(head -5 "$t/wkill.info")"

# -- A program that handles SIGTERM and then starts a long child (after SIGTERM, so not
# among those it went to): SIGKILL 11 s later reaches that child too, and is said to. Before,
# it was neither killed nor waited for: it held record's output open for its 30 s.
rec late -d 0.5 -f collapsed -o late.folded -- sh -c "trap 'sleep 30 & echo \$! >late.pid.child; wait' TERM; luajit loop.lua late.pid"
[ "$ms" -ge 11000 ] && [ "$ms" -le 16000 ] || fail "late: took $ms ms (want 11 s after 0.5 s)"
grep -q '^luaprof record: --duration 0.5: sh did not end within 11 s of SIGTERM (it ignores or handles it): killed with SIGKILL (with 1 process it started after SIGTERM)$' "$t/late.out" ||
	fail "late: $(grep -- --duration "$t/late.out")"
stopped_whole late
[ -s "$t/late.pid.child" ] || fail "late: the child started after SIGTERM never ran"
[ -s "$t/late.pid.child" ] && { gone "$(cat "$t/late.pid.child")" || { fail "late: the child started after SIGTERM (pid $(cat "$t/late.pid.child")) still runs"; kill -KILL "$(cat "$t/late.pid.child")"; }; }

# -- A process the program started ignores SIGTERM (the program itself ends): SIGKILL 11 s
# later, said so; the program's stop and profile are as asked. Before, it was killed
# without a word.
rec stay -d 1 --clock wall -f collapsed -o stay.folded -- luajit stay.lua stay.pid
stopped stay 11000 20000
grep -q '^luaprof record: --duration 1: 1 process that luajit started did not end within 11 s of SIGTERM (ignoring or handling it): killed with SIGKILL$' "$t/stay.out" ||
	fail "stay: no word of the kill: $(head -3 "$t/stay.out")"
[ -s "$t/stay.pid.child" ] && { gone "$(cat "$t/stay.pid.child")" || fail "stay: the program's child (pid $(cat "$t/stay.pid.child")) still runs"; }

# -- Ctrl-C while record waits for the process it profiles, left running by a wrapper (its
# SIGINT ignored, as a background job's) and ignoring -d's SIGTERM: record stops waiting a
# second later, neither waiting out the rest of the 11 s nor killing it, and says so.
# Before, it went on for 10 s, killed it with SIGKILL and said it stopped it by SIGTERM,
# "the profile ends there".
if have setsid; then
	rm -f "$t/gave.pid"
	(cd "$t" && exec setsid "$lp" record -d 0.5 -f collapsed -o gave.folded -- sh -c "trap '' TERM; luajit loop.lua gave.pid & while [ ! -s gave.pid ]; do sleep 0.05; done; exit 4") >"$t/gave.out" 2>&1 &
	r=$!
	for _ in $(seq 100); do grep -q 'still runs: waiting for it' "$t/gave.out" && break; sleep 0.1; done
	sleep 1 # -d's SIGTERM sent
	t0=$(now_ms)
	kill -INT -- "-$r"
	wait $r
	rc=$?
	ms=$(($(now_ms) - t0))
	[ "$rc" = 4 ] || fail "Ctrl-C, waiting: record exited $rc, not the wrapper's 4: $(head -3 "$t/gave.out")"
	[ "$ms" -le 5000 ] || fail "Ctrl-C, waiting: record took $ms ms to stop waiting"
	grep -q '^luaprof record: --duration 0.5: sent the process it profiles (pid [0-9]*) SIGTERM after [0-9.]* s; record stopped waiting for it before it ended$' "$t/gave.out" ||
		fail "Ctrl-C, waiting: $(grep -- --duration "$t/gave.out")"
	grep -q 'SIGKILL\|the profile ends there' "$t/gave.out" && fail "Ctrl-C, waiting: $(grep 'SIGKILL\|ends there' "$t/gave.out")"
	if [ -s "$t/gave.pid" ]; then
		gone "$(cat "$t/gave.pid")" && fail "Ctrl-C, waiting: luajit was killed"
		kill -KILL "$(cat "$t/gave.pid")" 2>/dev/null
	else
		fail "Ctrl-C, waiting: luajit never ran: $(head -3 "$t/gave.out")"
	fi
fi

# -- Ctrl-C (twice: a compiled loop) during the duration: as without -d (status 130).
if have setsid; then
	rm -f "$t/int.pid"
	(cd "$t" && exec setsid "$lp" record -d 30 -f collapsed -o int.folded -- luajit loop.lua int.pid) >"$t/int.out" 2>&1 &
	r=$!
	for _ in $(seq 100); do [ -s "$t/int.pid" ] && break; sleep 0.1; done
	sleep 0.5
	kill -INT -$r
	sleep 0.5
	kill -INT -$r
	wait $r
	rc=$?
	[ "$rc" = 130 ] || fail "Ctrl-C: record exited $rc, not 130: $(head -3 "$t/int.out")"
	grep -q -- '--duration' "$t/int.out" && fail "Ctrl-C: $(grep -- --duration "$t/int.out")"
	grep -q 'killed by signal 2' "$t/int.out" || fail "Ctrl-C: no word of the signal: $(head -3 "$t/int.out")"
fi

# -- Stopped first by the user, the program still ending when the duration is up: that
# stop is left to take its course, told as without -d, its status record's. Before, -d's
# SIGTERM cut the program's cleanup after Ctrl-C short, or came on top of the SIGTERM
# passed on, and record said "--duration 1.5: stopped ..." with status 0.
# userstop NAME RC WANT: record exited RC, said WANT and nothing of the duration.
userstop() {
	[ "$rc" = "$2" ] || fail "$1: record exited ${rc:-?}, not $2: $(head -3 "$t/$1.out")"
	grep -q -- '--duration' "$t/$1.out" && fail "$1: $(grep -- --duration "$t/$1.out")"
	grep -q "^luaprof record: $3\$" "$t/$1.out" || fail "$1: no word of '$3': $(head -3 "$t/$1.out")"
}
# userkill NAME SIG: sends SIG to record (its process group for INT) 0.2 s after the program
# runs, waits for record; sets rc.
userkill() {
	local v=$1 sig=$2 r
	for _ in $(seq 100); do [ -s "$t/$v.pid" ] && break; sleep 0.1; done
	sleep 0.2
	r=$(cat "$t/$v.rec")
	if [ "$sig" = INT ]; then kill -INT -- "-$r"; else kill -"$sig" "$r"; fi
	wait "$r"
	rc=$?
}
if have setsid; then
	rm -f "$t/cint.pid"
	(cd "$t" && exec setsid "$lp" record -d 1.5 -f collapsed -o cint.folded -- luajit cleanup.lua cint.pid) >"$t/cint.out" 2>&1 &
	echo $! >"$t/cint.rec"
	userkill cint INT
	userstop cint 3 'luajit exited with status 3'
fi
# A wrapper handling SIGTERM: the SIGTERM to record is passed on to it and luajit; luajit
# dies of it at once, the wrapper's trap takes 2 s.
rm -f "$t/cterm.pid"
(cd "$t" && exec "$lp" record -d 1.5 -f collapsed -o cterm.folded -- sh -c "trap 'sleep 2; exit 3' TERM; luajit loop.lua cterm.pid") >"$t/cterm.out" 2>&1 &
echo $! >"$t/cterm.rec"
userkill cterm TERM
userstop cterm 3 'sh exited with status 3'

# -- On a terminal, the line saying what is being recorded says until when.
if have script; then
	(cd "$t" && script -qec "$lp record -d 0.5 -f collapsed -o tty.folded -- luajit loop.lua tty.pid" /dev/null) >"$t/tty.out" 2>&1
	grep -q 'the profile follows after 0.5 s (--duration), or when it exits or is stopped first (Ctrl-C)' "$t/tty.out" ||
		fail "terminal: $(head -2 "$t/tty.out")"
	# --leak-only: Ctrl-C is the wrong way to stop it (after its error luajit collects all
	# garbage, and nothing shows as held): the line says SIGTERM.
	for d in "" "-d 0.5"; do
		(cd "$t" && script -qec "$lp record $d --memory --leak-only -o leak.txt -- luajit short.lua leak.pid" /dev/null) >"$t/tty.out" 2>&1
		head -1 "$t/tty.out" | grep -q "stopped${d:+ first} with SIGTERM (not Ctrl-C: after its error luajit collects all garbage, so nothing would show as held)" &&
			! head -1 "$t/tty.out" | grep -q '(Ctrl-C)' ||
			fail "terminal, --leak-only $d: $(head -1 "$t/tty.out")"
	done
fi
"$lp" record --help | grep -q -- '-d, --duration SECS' || fail "--help does not describe -d"

# -- Bad values: refused before the program runs, the value named.
bad() {
	rm -f "$t/bad.pid"
	(cd "$t" && "$lp" record "$@" -f collapsed -o bad.folded -- luajit short.lua bad.pid) >"$t/bad.out" 2>&1
	local r=$?
	[ $r = 1 ] || fail "$*: record exited $r, not 1"
	[ -e "$t/bad.pid" ] && fail "$*: the program ran"
}
for v in 0 0.0 0.0009 -1 -0.5 abc 1e3 30s inf nan 0x10 1000001 99999999999999999999999 1.2.3 . '' ' 1'; do
	bad -d "$v"
	grep -qF "luaprof record: -d (--duration) expects seconds, a decimal number from 0.001 to 1000000 (e.g. 30 or 0.5), not '$v'" "$t/bad.out" ||
		fail "-d '$v': $(cat "$t/bad.out")"
done
"$lp" record --duration >"$t/bad.out" 2>&1
r=$?
[ $r = 1 ] && grep -q "^luaprof record: option '--duration' needs a value" "$t/bad.out" ||
	fail "--duration without a value: $r $(cat "$t/bad.out")"

[ $fails = 0 ] || exit 1
echo "PASS $name"
