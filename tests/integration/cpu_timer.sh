#!/usr/bin/env bash
# The CPU profiler's CPU-time clock. Where the process may open a perf_event task clock
# (root, or kernel.perf_event_paranoid <= 1, and no seccomp filter against it) --clock cpu
# samples at the rate asked, above the kernel's tick (250 Hz on many kernels, where the
# POSIX CPU-time timer it used alone capped --rate 1000 at 250 a second); LUAPROF_TIMER=posix
# keeps the POSIX timer; any other value is refused before the program runs. A program
# that blocks the signal for a second at 10 kHz keeps running: the perf clock's signal,
# SIGURG, does not queue (a full queue of real-time signals makes the kernel send SIGIO,
# which kills). CPU time in system calls longer than the interval keeps its share of the
# samples. A forked child is not sampled and exits normally. A file the program opens at
# the clock's number after closing its descriptor is left alone (stop and fork).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init

need_build luaprof luaprof.so
have luajit || skip "luajit is not installed (apt-get install luajit)"
lp=$PWD/build/luaprof

cat >"$t/burn.lua" <<'LUA'
local function f(n) local s = 0 for i = 1, n do s = s + i % 7 end return s end
local t0 = os.clock()
while os.clock() - t0 < 1 do f(20000) end
LUA
# meta values of a raw stream: "timer samples thread_cpu_ns"
facts() {
	"$lp" report -q -f info "$1" | awk '
		/^meta.timer: / { sub(/^meta.timer: /, ""); tm = $0; gsub(/ /, "_", tm) }
		/^samples: / { n = $2 } /^meta.thread_cpu_ns: / { c = $2 }
		END { print tm, n + 0, c + 0 }'
}

# Can this process open a task clock for itself? (The agent's own test, by a run.)
"$lp" record -q --rate 1000 -f collapsed -o "$t/a.folded" -- luajit "$t/burn.lua" 2>"$t/err" ||
	fail "record --rate 1000: $(cat "$t/err")"
read -r timer n cpu < <(facts "$t/a.bin")
case $timer in
perf_task-clock)
	# Samples per second of the thread's CPU time: 1000 asked.
	rate=$(awk -v n="$n" -v c="$cpu" 'BEGIN { printf "%d", c ? n / (c / 1e9) : 0 }')
	if [ "$rate" -ge 900 ] && [ "$rate" -le 1100 ]; then
		echo "ok perf task-clock: $rate samples per CPU second at --rate 1000"
	else
		fail "perf task-clock at --rate 1000: $rate samples per CPU second ($n in $cpu ns)"
	fi
	# 10 kHz, and the signal blocked for a second of CPU time in the middle.
	cat >"$t/block.lua" <<'LUA'
local ffi = require "ffi"
ffi.cdef [[ typedef struct { unsigned long v[16]; } sigset_t;
int sigfillset(sigset_t *s); int pthread_sigmask(int how, const sigset_t *s, sigset_t *o); ]]
local function burn(s) local t = os.clock() local x = 0 while os.clock() - t < s do x = x + 1 end end
burn(0.2)
local s, old = ffi.new("sigset_t"), ffi.new("sigset_t")
ffi.C.sigfillset(s) ffi.C.pthread_sigmask(0, s, old)
burn(1)
ffi.C.pthread_sigmask(2, old, nil)
burn(0.2)
io.write("done\n")
LUA
	# A small queue of pending signals (ulimit -i), so that a flood would show at once.
	(cd "$t" && ulimit -i 64 && "$lp" record --rate 10000 -f collapsed -o b.folded -- \
		luajit block.lua) >"$t/out" 2>"$t/err"
	rc=$?
	[ $rc = 0 ] && grep -q '^done$' "$t/out" ||
		fail "10 kHz with the signal blocked for a second: exit $rc: $(cat "$t/out" "$t/err")"
	read -r timer n cpu < <(facts "$t/b.bin")
	# 0.4 s of CPU time unblocked at 10 kHz: some 4,000 samples (pacing may skip some),
	# and up to 0.1 s of the blocked time, as samples at the unblocking.
	if [ "$n" -ge 2000 ] && [ "$n" -le 6000 ]; then
		echo "ok 10 kHz with the signal blocked for a second: exit $rc, $n samples"
	else
		fail "10 kHz with the signal blocked: $n samples, want about 4000 (0.4 s unblocked)"
	fi
	# The summary says the signal was blocked: the perf clock's overruns are the blocked
	# time beyond 0.1 s, not expiries a slow kernel tick merged (it said so, and advised
	# allowing the perf events it used).
	if grep -q 'ticks slower than --rate' "$t/err" ||
		! grep -q "sampled as .*blocked or ignored the profiler's signal SIGURG" "$t/err"; then
		fail "10 kHz with the signal blocked: the summary: $(grep -v '^ ' "$t/err" | head -8)"
	fi
	# CPU time in system calls longer than the interval (a read of 32 MiB from the page
	# cache, some 4 ms, which no signal interrupts): the overflows while the signal is
	# pending merge into it, and its sample stands for them all. The clock stopped in
	# such a call once an allowance of 4 was spent, which then shrank to 1 for the rest
	# of the run: the reads had 40 % of their share, 740 samples per CPU second.
	head -c 33554432 /dev/zero >"$t/big.dat"
	cat >"$t/read.lua" <<LUA
local f = assert(io.open("$t/big.dat", "rb"))
local function burn(n) local s = 0 for i = 1, n do s = s + i % 7 end return s end
local tr, tall, t0 = 0, 0, os.clock()
while os.clock() - t0 < 1.5 do
	burn(3e6)
	local a = os.clock()
	f:seek("set", 0)
	assert(#f:read(33554432) == 33554432)
	tr = tr + os.clock() - a
end
io.write(string.format("%.3f\\n", tr / (os.clock() - t0)))
LUA
	(cd "$t" && "$lp" record -q --rate 1000 -f collapsed -o r.folded -- luajit read.lua) \
		>"$t/out" 2>"$t/err" || fail "reads: $(cat "$t/err")"
	read -r timer n cpu < <(facts "$t/r.bin")
	got=$(awk '{ t += $NF } / [0-9]+$/ && /io\.method\.read/ { r += $NF }
		END { printf "%.3f", t ? r / t : 0 }' "$t/r.folded")
	rate=$(awk -v n="$n" -v c="$cpu" 'BEGIN { printf "%d", c ? n / (c / 1e9) : 0 }')
	want=$(cat "$t/out")
	if awk -v g="$got" -v w="$want" -v r="$rate" 'BEGIN { exit !(g >= 0.75 * w && g <= 1.25 * w && r >= 900) }'; then
		echo "ok reads of 32 MiB: $got of the samples, $want of the CPU time; $rate a CPU second"
	else
		fail "reads of 32 MiB: $got of the samples, $want of the CPU time; $rate samples per CPU second at --rate 1000"
	fi
	;;
posix_cpu)
	echo "note: this process may not open a perf_event task clock (perf_event_paranoid" \
		"$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null), uid $(id -u)):" \
		"the POSIX timer's checks only" ;;
*)	fail "meta.timer is '$timer'" ;;
esac

# LUAPROF_TIMER=posix: the POSIX timer, whatever perf allows.
LUAPROF_TIMER=posix "$lp" record -q -f collapsed -o "$t/p.folded" -- luajit "$t/burn.lua" \
	2>"$t/err" || fail "LUAPROF_TIMER=posix: $(cat "$t/err")"
read -r timer n cpu < <(facts "$t/p.bin")
[ "$timer" = posix_cpu ] && [ "$n" -ge 50 ] ||
	fail "LUAPROF_TIMER=posix: timer '$timer', $n samples"
# --clock wall is the POSIX monotonic timer, whatever LUAPROF_TIMER says.
"$lp" record -q --clock wall -f collapsed -o "$t/w.folded" -- luajit "$t/burn.lua" 2>"$t/err" ||
	fail "--clock wall: $(cat "$t/err")"
read -r timer n cpu < <(facts "$t/w.bin")
[ "$timer" = posix_monotonic ] || fail "--clock wall: timer '$timer'"

# Any other value: refused before the program runs.
LUAPROF_TIMER=hrtimer "$lp" record -q -f collapsed -o "$t/x.folded" -- \
	luajit -e "io.open('$t/ran', 'w'):close()" >"$t/out" 2>"$t/err"
rc=$?
[ $rc = 1 ] && [ ! -e "$t/ran" ] && [ ! -e "$t/x.folded" ] &&
	grep -q "^luaprof record: LUAPROF_TIMER is 'hrtimer': auto for a perf_event task clock" "$t/err" ||
	fail "LUAPROF_TIMER=hrtimer: exit $rc, ran: $([ -e "$t/ran" ] && echo yes || echo no): $(cat "$t/err")"
# The Lua API refuses it at start with the same message.
LUAPROF_TIMER=hrtimer luajit -e "package.cpath = '$PWD/build/?.so;' .. package.cpath
	local ok, msg = require('luaprof').sysprof.start({ mode = 'C', path = '$t/api.bin' })
	io.write(tostring(ok), ' ', tostring(msg), '\n')" >"$t/out" 2>&1
grep -q "^nil .*LUAPROF_TIMER is 'hrtimer': auto for" "$t/out" || fail "sysprof.start with LUAPROF_TIMER=hrtimer: $(cat "$t/out")"

# A program that executes another one while sampled: a tick of the perf clock may be
# pending then (it counts the exec's kernel time, and pending signals outlive an exec,
# where a POSIX timer's are deleted with it): its signal is SIGURG, which the new program
# ignores by default. On a real-time signal, 10 kHz killed nearly every run.
cat >"$t/exec.lua" <<'LUA'
local ffi = require "ffi"
ffi.cdef [[int execvp(const char *file, char *const argv[]);]]
local t0, x = os.clock(), 0
while os.clock() - t0 < 0.05 do x = x + 1 end
local argv = ffi.new("char *[2]")
argv[0] = ffi.cast("char *", "true")
ffi.C.execvp("true", argv)
os.exit(9)
LUA
killed=0
for i in 1 2 3 4 5 6 7 8; do
	rm -f "$t/e.bin" "$t/e.folded"
	(cd "$t" && "$lp" record -q --rate 10000 -f collapsed -o e.folded -- luajit exec.lua) \
		>/dev/null 2>"$t/err"
	rc=$?
	# 3: the stream is cut short (exec skips the profile's end), as the program meant.
	[ $rc = 3 ] || { killed=$((killed + 1)); echo "exec run $i: exit $rc: $(head -2 "$t/err")"; }
done
[ $killed = 0 ] || fail "$killed of 8 runs that exec at 10 kHz did not end as the program meant"

# A forked child is not sampled (it closes its copy of the clock's file) and exits as it
# would without the profiler.
cat >"$t/fork.lua" <<'LUA'
local ffi = require "ffi"
ffi.cdef "int fork(void); int waitpid(int, int *, int); void _exit(int);"
local function burn(s) local t = os.clock() local x = 0 while os.clock() - t < s do x = x + 1 end end
burn(0.1)
local pid = ffi.C.fork()
if pid == 0 then burn(0.4) ffi.C._exit(7) end
burn(0.1)
local st = ffi.new("int[1]")
ffi.C.waitpid(pid, st, 0)
io.write("child ", st[0], "\n")
LUA
(cd "$t" && "$lp" record -q --rate 1000 -f collapsed -o f.folded -- luajit fork.lua) >"$t/out" 2>"$t/err"
rc=$?
# 7 << 8: exited with 7, not killed by a signal.
[ $rc = 0 ] && grep -q '^child 1792$' "$t/out" || fail "fork: exit $rc: $(cat "$t/out" "$t/err")"

# A program that closes descriptors it did not open (a daemon closing them all) and opens
# a file at the clock's number: the file is the program's. Stop closed it (the program's
# next write failed with EBADF), and so did a child forked after.
cat >"$t/closefd.lua" <<LUA
package.cpath = "$PWD/build/?.so;" .. package.cpath
local lp = require("luaprof")
local ffi = require "ffi"
ffi.cdef [[int close(int); long readlink(const char *, char *, unsigned long);
int open(const char *, int, int); long write(int, const void *, unsigned long);
int fork(void); int waitpid(int, int *, int); void _exit(int);]]
assert(lp.sysprof.start{mode = "C", interval = 1, path = "$t/cf.bin"})
local pfd
for fd = 0, 1023 do
	local b = ffi.new("char[256]")
	local n = ffi.C.readlink("/proc/self/fd/" .. fd, b, 255)
	if n > 0 and ffi.string(b, n) == "anon_inode:[perf_event]" then pfd = fd end
end
if not pfd then io.write("no perf clock\n") lp.sysprof.stop() return end
ffi.C.close(pfd)
local fd = ffi.C.open("$t/mine.txt", 577, 420) -- O_WRONLY | O_CREAT | O_TRUNC
assert(fd == pfd, "the program's file took another number")
local t = os.clock() while os.clock() - t < 0.05 do end
local pid = ffi.C.fork()
if pid == 0 then ffi.C._exit(ffi.C.write(fd, "c", 1) == 1 and 0 or 1) end
local st = ffi.new("int[1]")
ffi.C.waitpid(pid, st, 0)
io.write("child ", st[0], "\n")
assert(lp.sysprof.stop())
io.write("after stop ", tonumber(ffi.C.write(fd, "p", 1)), "\n")
LUA
luajit "$t/closefd.lua" >"$t/out" 2>&1
if ! grep -q '^no perf clock$' "$t/out"; then
	[ "$(cat "$t/out")" = "child 0
after stop 1" ] && [ "$(cat "$t/mine.txt" 2>/dev/null)" = cp ] ||
		fail "a file at the closed clock's number: $(cat "$t/out"), file '$(cat "$t/mine.txt" 2>/dev/null)'"
fi

[ $fails -eq 0 ] && echo "PASS $name" && exit 0
echo "FAIL $name ($fails)"
exit 1
