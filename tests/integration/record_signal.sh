#!/usr/bin/env bash
# `luaprof record` of a program that dies of SIGTERM or SIGHUP (timeout, a service manager,
# kill; record passes them on) writes the CPU profile's end first: its epilogue and the
# extension that gives TRACE samples their stacks. Before, a JIT-compiled loop stopped so
# showed its trace as a root with nothing under it; a sampled memory profile, written at
# stop, had no sample at all. The program still dies of the signal
# (record's status 128+N); a forked child dies of it at once; a program that ignores the
# signal keeps running. Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/record.sh
record_setup

# A compiled loop that runs until killed; it says when it runs (its output file, which
# holds the signals it ignores: /proc's SigIgn mask).
cat >"$t/loop.lua" <<'LUA'
local function f(n) local s = 0 for i = 1, n do s = s + math.sqrt(i) end return s end
local ign = "" for l in io.lines("/proc/self/status") do ign = l:match("^SigIgn:%s*(%x+)") or ign end local up = io.open(arg[1] .. ".tmp", "w") up:write(ign) up:close() os.rename(arg[1] .. ".tmp", arg[1])
local t = os.clock() while os.clock() - t < 60 do f(1e5) end
LUA
# started FILE: waits up to 10 s for it.
started() { for _ in $(seq 100); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }

# stop NAME SIG PAUSE RECORD-ARGS...: runs record (in $t, its profile NAME.*) until the
# program says it runs ("up"), PAUSE s more, then sends record SIG and waits for it. Sets
# rc (record's status) and ms (from the signal to record's end); NAME.info is the raw
# stream's `report -f info`.
stop() {
	local v=$1 sig=$2 pause=$3 rec t0
	shift 3
	rm -f "$t/up"
	(cd "$t" && exec "$lp" record "$@") >"$t/$v.out" 2>&1 &
	rec=$!
	started "$t/up" || fail "$v: the program never ran"
	sleep "$pause"
	t0=$(now_ms)
	kill -"$sig" $rec
	wait $rec
	rc=$?
	ms=$(($(now_ms) - t0))
	"$lp" report "$t/$v.bin" -f info >"$t/$v.info" 2>&1
}
# finished NAME SIG: record exited 128+SIG and the profile is whole, stopped by the signal.
finished() {
	local v=$1 num
	num=$(kill -l "$2")
	[ $rc = $((128 + num)) ] || fail "$v: record exited $rc, not $((128 + num)): $(head -3 "$t/$v.out")"
	stopped_whole "$v"
}

# Whether SIGHUP is ignored in mask MASK (hexadecimal, as /proc's SigIgn): 1 or 0.
hup_in() { echo $(((0x$1 >> ($(kill -l HUP) - 1)) & 1)); }
# Run with SIGHUP ignored (nohup bash record_signal.sh), the program inherits that, as it
# would without record, and keeps it: record's SIGHUP then ends nothing.
hup_ignored=$(hup_in "$(sed -n 's/^SigIgn:[[:space:]]*//p' /proc/$$/status)")
for sig in TERM HUP; do
	if [ $sig = HUP ] && [ "$hup_ignored" = 1 ]; then
		rm -f "$t/up"
		(cd "$t" && exec "$lp" record -f collapsed -o HUP.folded -- luajit loop.lua up) \
			>"$t/HUP.out" 2>&1 &
		rec=$!
		started "$t/up" || fail "HUP ignored: the program never ran"
		[ "$(hup_in "$(cat "$t/up")")" = 1 ] ||
			fail "HUP ignored: the program does not ignore SIGHUP (SigIgn $(cat "$t/up"))"
		kill -HUP $rec
		sleep 1
		kill -0 $rec 2>/dev/null || fail "HUP ignored: SIGHUP ended record: $(head -3 "$t/HUP.out")"
		kill -TERM $rec
		wait $rec
		rc=$?
		"$lp" report "$t/HUP.bin" -f info >"$t/HUP.info" 2>&1
		finished HUP TERM
		echo "note: SIGHUP is ignored here (nohup?): checked that it stays so"
		continue
	fi
	stop $sig $sig 2 -f collapsed -o $sig.folded -- luajit loop.lua up
	[ "$(hup_in "$(cat "$t/up")")" = "$hup_ignored" ] ||
		fail "SIG$sig: the program's SIGHUP disposition is not the one record had (SigIgn $(cat "$t/up"))"
	finished $sig $sig
	grep -q "killed by signal $(kill -l $sig)" "$t/$sig.out" ||
		fail "SIG$sig: no word of the signal: $(head -2 "$t/$sig.out")"
	# The trace's samples under the loop's Lua frames and the host's main.
	read -r under total < <(awk '{ t += $NF; if ($0 ~ /^_start;.*main;.*@loop\.lua:3;@loop\.lua:1;TRACE \[/) n += $NF }
		END { print n + 0, t + 0 }' "$t/$sig.folded")
	[ "$total" -ge 50 ] && [ $((under * 100)) -ge $((total * 90)) ] ||
		fail "SIG$sig: $under of $total samples with the trace's full stack (want 90 % of at least 50)"
done

# Ctrl-C, twice, to the process group of record and the program. luajit's own SIGINT
# handler (set while the script runs) resets SIGINT to its default action and only asks
# the VM to stop at its next interpreted instruction, which a compiled loop never reaches:
# the second Ctrl-C killed the program with the profile cut short (SIGINT was at luajit's
# handler when the profile started, and never armed). Now it is finished.
cat >"$t/spin.lua" <<'LUA'
local function f(n) local s = 0 for i = 1, n do s = s + math.sqrt(i) end return s end
io.open(arg[1], "w"):close()
local x = 0
for _ = 1, 3e5 do x = x + f(1e5) end -- a minute or so, all of it in compiled code
LUA
if command -v setsid >/dev/null 2>&1; then
	rm -f "$t/up"
	(cd "$t" && exec setsid "$lp" record -f collapsed -o int.folded -- luajit spin.lua up) \
		>"$t/int.out" 2>&1 &
	rec=$!
	started "$t/up" || fail "SIGINT: the program never ran"
	pg=$(ps -o pgid= -p $rec | tr -d ' ')
	[ "$pg" = $rec ] || fail "SIGINT: record is not its process group's leader ($pg)"
	sleep 1
	kill -INT -$rec
	sleep 0.5
	kill -0 $rec 2>/dev/null || fail "SIGINT: the compiled loop stopped at the first Ctrl-C"
	kill -INT -$rec
	wait $rec
	rc=$?
	[ $rc = 130 ] || fail "SIGINT: record exited $rc, not 130: $(head -3 "$t/int.out")"
	"$lp" report "$t/int.bin" -f info >"$t/int.info" 2>&1
	grep -q '^complete: yes$' "$t/int.info" || fail "SIGINT twice: profile cut short: $(head -5 "$t/int.info")"
	grep -q '^meta.stopped_by: signal$' "$t/int.info" || fail "SIGINT: stopped_by: $(grep stopped_by "$t/int.info")"
	grep -q '^_start;.*@spin\.lua:4;@spin\.lua:1;TRACE \[' "$t/int.folded" ||
		fail "SIGINT: no trace sample with its stack: $(head -2 "$t/int.folded")"
fi

# SIGTERM to record of a wrapper script (a service's start script that runs luajit without
# exec): record passes it on to both, the script dies of it at once and luajit once its
# profile is finished, tens of ms later. record said that luajit "still runs: waiting for
# it", as for one a script leaves running; now it waits a second before saying so.
stop wrap TERM 0.5 -f collapsed -o wrap.folded -- sh -c 'luajit loop.lua up; echo after'
finished wrap TERM
grep -q 'still runs' "$t/wrap.out" && fail "wrapper: luajit said to still run: $(grep 'still runs' "$t/wrap.out")"

# A sampled memory profile, whose samples are all written at stop: there are some.
cat >"$t/churn.lua" <<'LUA'
io.open(arg[1], "w"):close()
local keep = {}
local function mk(i) return { i, tostring(i) } end
local t = os.clock()
while os.clock() - t < 60 do
	for i = 1, 1000 do keep[i % 500 + 1] = mk(i) end
end
LUA
stop mem TERM 1 --memory --sample 64K -o mem.txt -- luajit churn.lua up
finished mem TERM
n=$(sed -n 's/^samples: \([0-9]*\)$/\1/p' "$t/mem.info")
[ "${n:-0}" -ge 1000 ] || fail "memory: ${n:-no} samples in a second of churn at 64 KiB"
grep -q '@churn\.lua:[36]' "$t/mem.txt" || fail "memory: the churn's lines missing: $(head -8 "$t/mem.txt")"
# Sampling every 16 bytes, the program is nearly always in the wrapper's sampling path,
# where a stop would meet its tables half changed: the signal killed it there with nothing
# written (4 runs of 4). It now waits for the path's end, then stops the profile.
stop rare TERM 0.5 --memory --sample 16 -o rare.txt -- luajit churn.lua up
finished rare TERM

# An exact memory profile of a program that allocated 100,000 tables and then computes
# (a server idle after its start): its events were written 2 MiB at a time and the
# signal lost them all ("killed before the profiler wrote anything"); now every event,
# the profile whole.
cat >"$t/aidle.lua" <<'LUA'
io.open(arg[1], "w"):close()
local keep = {}
for i = 1, 100000 do keep[i] = { i } end
local t = os.clock()
while os.clock() - t < 60 do local x = 0 for i = 1, 1e6 do x = x + i end end
LUA
stop exact TERM 1 --memory -o exact.txt -- luajit aidle.lua up
finished exact TERM
n=$(sed -n 's/^events: \([0-9]*\)$/\1/p' "$t/exact.info")
[ "${n:-0}" -ge 100000 ] || fail "exact: ${n:-no} events for 100,000 tables"
grep -q '@aidle\.lua:3' "$t/exact.txt" || fail "exact: the tables' line missing: $(head -8 "$t/exact.txt")"

# SIGTERM during the memory profile's own stop: the program's memprof.stop(), exit's
# (os.exit) or lua_close's at the script's end. The stop under way closes its file, then
# the signal takes its course; before, it killed the program at once under the stop (an
# exact profile without its epilogue, a sampled one with nothing written). A million live
# tables make the stop long (it writes every sample; exact mode's last events); a timer
# sends SIGTERM 1 ms after the stop begins. A run whose signal came before the stop
# (stopped_by: signal) proves nothing and is run again.
cat >"$t/mstop.lua" <<'LUA'
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long sec, nsec; } lp_ts;
typedef struct { lp_ts interval, value; } lp_its;
typedef struct { long val; int signo, notify; int pad[12]; } lp_sigev;
int timer_create(int, lp_sigev *, void **);
int timer_settime(void *, int, const lp_its *, lp_its *);
]]
local keep = {}
for i = 1, 1000000 do keep[i] = { i } end
local ev = ffi.new("lp_sigev", { signo = 15, notify = 0 }) -- SIGEV_SIGNAL: the process
local id = ffi.new("void *[1]")
assert(ffi.C.timer_create(1, ev, id) == 0) -- CLOCK_MONOTONIC
local its = ffi.new("lp_its")
its.value.nsec = 1000000
assert(ffi.C.timer_settime(id[0], 0, its, nil) == 0)
if arg[1] == "program" then
	require("luaprof").memprof.stop()
	while true do end -- the signal's course, once the file is closed
elseif arg[1] == "exit" then
	os.exit(0)
end
LUA
for run in exact:program exact:exit exact:close sampled:program sampled:exit sampled:close; do
	mode=${run%:*} cause=${run#*:} v=mstop-${run/:/-}
	args=--memory
	[ "$mode" = sampled ] && args="--memory --sample 16"
	for _ in 1 2 3; do
		rm -f "$t/$v.bin" "$t/$v.txt"
		# shellcheck disable=SC2086
		(cd "$t" && exec "$lp" record $args -o $v.txt -- luajit mstop.lua $cause) >"$t/$v.out" 2>&1
		rc=$?
		"$lp" report "$t/$v.bin" -f info >"$t/$v.info" 2>&1
		grep -q '^meta.stopped_by: signal$' "$t/$v.info" || break
	done
	[ $rc = 143 ] || fail "$v: record exited $rc, not 143: $(head -3 "$t/$v.out")"
	grep -q '^complete: yes$' "$t/$v.info" ||
		fail "$v: profile cut short: $(head -4 "$t/$v.info" | tr '\n' ' ') $(head -2 "$t/$v.out")"
	grep -q "^meta.stopped_by: $cause\$" "$t/$v.info" ||
		fail "$v: stopped_by: $(grep stopped_by "$t/$v.info") (the signal never came during the stop)"
	grep -v '^meta\.' "$t/$v.info" "$t/$v.out" | grep -Eiq 'truncated|cut short|warning' &&
		fail "$v: warned: $(grep -v '^meta\.' "$t/$v.info" "$t/$v.out" | grep -Ei 'truncated|cut short|warning' | head -2)"
done

# SIGTERM during the program's own memprof.stop() whose file's writer is blocked for good (a
# FIFO nobody reads): the signal, held until the stop closes its file, was held for ever,
# the program ended by SIGKILL alone. It now takes its course after 5 s, said on stderr.
mkfifo "$t/fifo"
exec 3<>"$t/fifo" # a reader that never reads: the writes block once the pipe is full
cat >"$t/fifo.lua" <<'LUA'
local ffi = require("ffi")
ffi.cdef[[int getpid(void);]]
local mp = require("luaprof").memprof
assert(mp.stop())
assert(mp.start(arg[1]))
local keep = {}
for i = 1, 1000 do keep[i] = { i } end
local f = io.open(arg[2] .. ".tmp", "w") f:write(ffi.C.getpid()) f:close()
os.rename(arg[2] .. ".tmp", arg[2])
mp.stop() -- blocks: the FIFO takes 64 KiB of the stream, then no more
LUA
rm -f "$t/up"
(cd "$t" && exec timeout -s KILL 20 "$lp" record --memory -o fifo-rec.txt -- luajit fifo.lua fifo up) \
	>"$t/fifo.out" 2>&1 &
rec=$!
if started "$t/up"; then
	sleep 0.5
	t0=$(now_ms)
	kill -TERM "$(cat "$t/up")"
	wait $rec
	rc=$?
	ms=$(($(now_ms) - t0))
	[ $rc = 143 ] || fail "fifo: record exited $rc, not 143, after $ms ms: $(head -3 "$t/fifo.out")"
	[ $ms -ge 4500 ] && [ $ms -lt 15000 ] || fail "fifo: the program ended $ms ms after SIGTERM (want 5 s)"
	grep -q '^luaprof: SIGTERM held 5.0 s for the profile.s start or stop' "$t/fifo.out" ||
		fail "fifo: no word of the held signal: $(head -3 "$t/fifo.out")"
	kill -KILL "$(cat "$t/up")" 2>/dev/null # one that outlived record's timeout
else
	fail "fifo: the program never ran: $(head -3 "$t/fifo.out")"
	kill $rec
	wait $rec
fi
exec 3<&-

# SIGTERM on another thread than the memory profile's (pthread_kill: a host's thread, or
# one that calls abort()): that thread cannot stop the profile (the VM's thread would go
# on allocating under the stop), and died of it at once, the profile cut short (an exact
# one without its end, a sampled one with nothing written). It is now sent on to the VM's
# thread, which stops the profile, and the program dies of it. When the VM's thread blocks
# it (the program has the other take it), it still ends the program at once, cut short.
cat >"$t/mother.lua" <<'LUA'
local ffi = require("ffi")
ffi.cdef[[
typedef struct { unsigned long v[16]; } lp_sigset;
int sigemptyset(lp_sigset *); int sigaddset(lp_sigset *, int);
int pthread_sigmask(int, const lp_sigset *, lp_sigset *);
int pthread_create(unsigned long *, const void *, void *(*)(void *), void *);
int pthread_kill(unsigned long, int); int pause(void);
]]
local th = ffi.new("unsigned long[1]")
assert(ffi.C.pthread_create(th, nil, ffi.cast("void *(*)(void *)", ffi.C.pause), nil) == 0)
if arg[1] == "block" then
	local set = ffi.new("lp_sigset")
	ffi.C.sigemptyset(set)
	ffi.C.sigaddset(set, 15)
	ffi.C.pthread_sigmask(0, set, nil) -- SIG_BLOCK
end
local keep = {}
for i = 1, 200000 do keep[i % 5000 + 1] = { i } end
ffi.C.pthread_kill(th[0], 15)
local t = os.clock()
while os.clock() - t < 10 do for i = 1, 1000 do keep[i % 5000 + 1] = { i } end end
LUA
for run in exact sampled exact-block; do
	args=--memory
	[ $run = sampled ] && args="--memory --sample 4K"
	t0=$(now_ms)
	# shellcheck disable=SC2086
	(cd "$t" && exec "$lp" record $args -o mother-$run.txt -- luajit mother.lua ${run#exact-}) \
		>"$t/mother-$run.out" 2>&1
	rc=$?
	ms=$(($(now_ms) - t0))
	"$lp" report "$t/mother-$run.bin" -f info >"$t/mother-$run.info" 2>&1
	if [ $run = exact-block ]; then
		grep -q "killed by signal 15" "$t/mother-$run.out" ||
			fail "mother-$run: not killed by SIGTERM: $(head -3 "$t/mother-$run.out")"
		[ $ms -lt 3000 ] || fail "mother-$run: record took $ms ms (the 10 s loop, or a 5 s wait)"
	else
		finished mother-$run TERM
	fi
done

# SIGTERM while the program is inside malloc (FFI, as a host's C code would be): the
# interrupted thread holds the allocator's lock until it dies, and the stop's frees waited
# for it, 10 s, in about half the runs (before: 3 runs of 5 took 10.1 s). The signal now
# takes its course once the file is closed. Each run: within 3 s, the profile whole.
cat >"$t/malloc.lua" <<'LUA'
local ffi = require("ffi")
ffi.cdef[[void *malloc(size_t); void free(void *);]]
local pool = {}
for i = 1, 4096 do pool[i] = ffi.C.malloc(1100 + (i * 7919) % 60000) end
io.open(arg[1], "w"):close()
local t, k = os.clock(), 1
while os.clock() - t < 60 do
	for _ = 1, 1000 do
		k = (k * 1103515245 + 12345) % 2147483648
		local j = k % 4096 + 1
		ffi.C.free(pool[j])
		pool[j] = ffi.C.malloc(1100 + k % 60000)
	end
end
LUA
# (The bound is a hang check: the stop's 5 s wait for a lock, against tens of ms.)
for run in cpu1 cpu2 cpu3 mem1 mem2; do
	case $run in
	cpu*) args="-f collapsed" ;;
	*) args="--memory --sample 64K" ;;
	esac
	# shellcheck disable=SC2086
	stop malloc-$run TERM 0.3 $args -o malloc-$run.txt -- luajit malloc.lua up
	finished malloc-$run TERM
	[ $ms -lt 3000 ] || fail "malloc-$run: record took $ms ms to end after SIGTERM"
done

# A host with a thread of its own that takes SIGTERM (the VM's thread blocks it): a CPU
# profile is finished from any thread. With `exit`, the VM's thread exits right after the
# signal, its exit's stop racing the signal's: either ends the process, the profile whole
# (before, 1 run in 4 was cut short: exit ended the process under the signal's stop, or
# the signal killed it under exit's).
cat >"$t/mt.lua" <<'LUA'
local ffi = require("ffi")
ffi.cdef[[
typedef struct { unsigned long v[16]; } lp_sigset;
int sigemptyset(lp_sigset *); int sigaddset(lp_sigset *, int);
int pthread_sigmask(int, const lp_sigset *, lp_sigset *);
int pthread_create(unsigned long *, const void *, void *(*)(void *), void *);
int pause(void); int kill(int, int); int getpid(void);
]]
local th = ffi.new("unsigned long[1]")
assert(ffi.C.pthread_create(th, nil, ffi.cast("void *(*)(void *)", ffi.C.pause), nil) == 0)
local function f(n) local s = 0 for i = 1, n do s = s + math.sqrt(i) end return s end
local t = os.clock() while os.clock() - t < 0.5 do f(1e5) end
local set = ffi.new("lp_sigset")
ffi.C.sigemptyset(set)
ffi.C.sigaddset(set, 15)
ffi.C.pthread_sigmask(0, set, nil) -- SIG_BLOCK: the other thread takes it
ffi.C.kill(ffi.C.getpid(), 15)
if arg[1] == "exit" then os.exit(0) end
while true do f(1e5) end
LUA
for run in stay exit1 exit2 exit3 exit4; do
	(cd "$t" && "$lp" record -q -f collapsed -o mt-$run.folded --raw mt-$run.bin -- luajit mt.lua ${run%[0-9]}) \
		>"$t/mt-$run.out" 2>&1
	rc=$?
	"$lp" report "$t/mt-$run.bin" -f info >"$t/mt-$run.info" 2>&1
	case $run:$rc in
	stay:143 | exit*:143 | exit*:0) ;;
	*) fail "mt-$run: record exited $rc: $(head -3 "$t/mt-$run.out")" ;;
	esac
	grep -q '^complete: yes$' "$t/mt-$run.info" || fail "mt-$run: profile cut short: $(head -5 "$t/mt-$run.info")"
done

# A program that dies of its own signal: a crash (SIGSEGV through the FFI, abort()) or a
# write to a pipe whose reader left (`luaprof record ... | head`). The profile was cut
# short (no epilogue: TRACE samples as roots, builtins as builtin#N; a sampled memory
# profile had nothing at all, "killed before the profiler wrote anything"); now it is
# finished first, and the program still dies of the signal.
cat >"$t/crash.lua" <<'LUA'
local ffi = require("ffi")
ffi.cdef[[void abort(void);]]
local function f(n) local s = 0 for i = 1, n do s = s + math.sqrt(i) end return s end
local keep, t = {}, os.clock()
while os.clock() - t < 0.5 do f(1e4) for i = 1, 100 do keep[i] = { i } end end
if arg[1] == "segv" then ffi.cast("int *", 0)[0] = 1 end
if arg[1] == "abrt" then ffi.C.abort() end
io.stdout:setvbuf("no")
while true do io.stdout:write("x\n") end -- the reader is gone: SIGPIPE
LUA
# crashed NAME SIG RECORD-ARGS...: record (in $t, its profile NAME.*) of crash.lua, its
# standard output a pipe nobody reads; sets rc, writes NAME.info.
crashed() {
	local v=$1 sig=$2
	shift 2
	(cd "$t" && exec "$lp" record "$@" -- luajit crash.lua "$(echo "$sig" | tr A-Z a-z)") \
		2>"$t/$v.out" | true
	rc=${PIPESTATUS[0]}
	"$lp" report "$t/$v.bin" -f info >"$t/$v.info" 2>&1
	finished "$v" "$sig"
	grep -q "killed by signal $(kill -l "$sig")" "$t/$v.out" ||
		fail "$v: no word of the signal: $(head -3 "$t/$v.out")"
}
for sig in SEGV ABRT PIPE; do
	crashed crash-$sig $sig -f collapsed -o crash-$sig.folded
	grep -q '^_start;.*main;.*@crash\.lua:5;@crash\.lua:3;TRACE \[' "$t/crash-$sig.folded" ||
		fail "crash-$sig: no trace sample with its stack: $(grep TRACE "$t/crash-$sig.folded" | head -2)"
done
crashed crash-mem SEGV --memory --sample 4K -o crash-mem.txt
grep -q '@crash\.lua:5' "$t/crash-mem.txt" || fail "crash-mem: the tables' line missing: $(head -8 "$t/crash-mem.txt")"
crashed crash-exact PIPE --memory -o crash-exact.txt
grep -q '@crash\.lua:5' "$t/crash-exact.txt" || fail "crash-exact: the tables' line missing: $(head -8 "$t/crash-exact.txt")"

# A forked child (FFI fork) that kills itself: dies of SIGTERM at once, not after the
# parent's profile; the parent goes on and ends normally.
cat >"$t/fork.lua" <<'LUA'
local ffi = require("ffi")
ffi.cdef[[int fork(void); int getpid(void); int kill(int, int); int waitpid(int, int *, int);
	void _exit(int);]]
local pid = ffi.C.fork()
if pid == 0 then
	ffi.C.kill(ffi.C.getpid(), 15)
	ffi.C._exit(3) -- not reached: the signal's default action ends the child
end
local st = ffi.new("int[1]")
local t0 = os.time()
ffi.C.waitpid(pid, st, 0)
print(("child status %d after %d s"):format(st[0], os.time() - t0))
LUA
(cd "$t" && "$lp" record -q -f collapsed -o fork.folded -- luajit fork.lua) >"$t/fork.out" 2>&1 ||
	fail "fork.lua: record exited $?: $(head -3 "$t/fork.out")"
grep -Eq '^child status 15 after [01] s$' "$t/fork.out" ||
	fail "the forked child did not die of SIGTERM at once: $(head -3 "$t/fork.out")"

# A program that ignores SIGTERM after the profile started: its choice stands.
cat >"$t/ignore.lua" <<'LUA'
local ffi = require("ffi")
ffi.cdef[[typedef void (*sighandler_t)(int); sighandler_t signal(int, sighandler_t);
	int getpid(void); int kill(int, int);]]
ffi.C.signal(15, ffi.cast("sighandler_t", 1)) -- SIG_IGN
ffi.C.kill(ffi.C.getpid(), 15)
print("still running")
LUA
(cd "$t" && "$lp" record -q -f collapsed -o ignore.folded -- luajit ignore.lua) >"$t/ignore.out" 2>&1 ||
	fail "ignore.lua: record exited $?: $(head -3 "$t/ignore.out")"
grep -q '^still running$' "$t/ignore.out" || fail "SIGTERM ignored by the program killed it: $(head -3 "$t/ignore.out")"

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
