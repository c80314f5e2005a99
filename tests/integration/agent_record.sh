#!/usr/bin/env bash
# `luaprof record -- luajit app.lua`: an unmodified script profiled through LUA_INIT, the raw
# stream kept and rendered, the summary, the program's exit status passed on, the program's
# own LUA_INIT still run and its children left alone, a program killed mid-run still
# rendered (truncated), destinations checked before the program runs, and the usage errors.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
lp=$PWD/build/luaprof

have luajit || skip "luajit is not installed (apt-get install luajit)"
need_build luaprof luaprof.so

cat >"$t/app.lua" <<'EOF'
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
local function work(secs)
  local t, acc = os.clock(), 0
  while os.clock() - t < secs do acc = acc + fib(18) end
  return acc
end
local ok, lp = pcall(require, "luaprof")
local _, msg = lp.sysprof.start()
print("nested start:", msg)
print("result", work(tonumber(arg[1]) or 0.5) > 0)
if arg[2] then os.exit(tonumber(arg[2])) end
EOF

# -- The plain case: flame graph, raw stream, summary, program output untouched.
(cd "$t" && "$lp" record -o out.svg -- luajit app.lua 0.6) >"$t/stdout" 2>"$t/stderr"
rc=$?
[ $rc = 0 ] || fail "record exited $rc: $(cat "$t/stderr")"
grep -q '^result	true$' "$t/stdout" || fail "program output: $(cat "$t/stdout")"
grep -q '^nested start:	profiler is running already$' "$t/stdout" ||
	fail "the program's require \"luaprof\" is not the recording instance: $(cat "$t/stdout")"
[ -s "$t/out.svg" ] && head -c 100 "$t/out.svg" | grep -q '<svg\|<?xml' || fail "out.svg"
[ -s "$t/out.bin" ] || fail "out.bin (raw stream next to the output) missing"
# The summary line; the duration is at least the 0.6 s of CPU time the script burns (the
# wall time it took depends on the machine's load, so no upper bound).
grep -Eq '^luaprof record: [0-9]+\.[0-9]+ s profiled, [0-9]+ samples \([0-9]+ per second, 100 asked\), [0-9]+ dropped' \
	"$t/stderr" || fail "summary line: $(head -3 "$t/stderr")"
dur=$(sed -n 's/^luaprof record: \([0-9.]*\) s profiled.*/\1/p' "$t/stderr")
awk -v d="${dur:-0}" 'BEGIN { exit !(d >= 0.55) }' || fail "profiled duration ${dur:-?} s, want >= 0.55"
grep -q 'VM states:' "$t/stderr" || fail "summary without VM states"
grep -q '%self' "$t/stderr" || fail "summary without top frames"
grep -q "@app.lua:1" "$t/stderr" || fail "top frames do not name fib (app.lua:1): $(cat "$t/stderr")"
"$lp" report -q "$t/out.bin" -f collapsed >"$t/out.folded" || fail "raw stream does not parse"
grep -q 'lua_pcall;@app.lua:[0-9]*;@app.lua:4;@app.lua:1' "$t/out.folded" ||
	grep -q 'TRACE \[[0-9]*\] @app.lua:1' "$t/out.folded" ||
	grep -q '@app.lua:1;TRACE \[[0-9]*\] @app.lua:' "$t/out.folded" ||
	fail "no main -> work:4 -> fib:1 stack and no fib trace: $(head -c 300 "$t/out.folded")"
# report -f info names what the agent recorded: its extension and meta.
"$lp" report -q -f info "$t/out.bin" >"$t/info.txt" || fail "report -f info on the raw stream"
grep -q '^format: ljp v[0-9]*, luaprof extension$' "$t/info.txt" &&
	grep -q '^meta\.interval_ns: 10000000$' "$t/info.txt" &&
	grep -q '^meta\.cmdline: luajit app\.lua 0\.6$' "$t/info.txt" &&
	grep -Eq '^samples: [1-9][0-9]*$' "$t/info.txt" ||
	fail "report -f info: $(head -12 "$t/info.txt")"
# The start time (Unix ns, for pprof's time_nanos): within the minute of this run.
started=$(sed -n 's/^meta\.start_unix_ns: //p' "$t/info.txt")
now=$(date +%s)
[ -n "$started" ] && [ $((started / 1000000000)) -le "$now" ] &&
	[ $((started / 1000000000)) -ge $((now - 60)) ] ||
	fail "meta.start_unix_ns '$started', now $now"

# -n with -f top is the list's length (it was ignored for CPU profiles: 20 rows), 20 by
# default, every row for -n 0 (as report's -n 0); --limit is the same option. A list shows
# min(N, frames) rows and says how many more it left out.
(cd "$t" && "$lp" record -q -f top -n 3 -o top3.txt -- luajit app.lua 0.2 &&
	"$lp" record -q -f top --limit 3 -o top3b.txt -- luajit app.lua 0.2 &&
	"$lp" record -q -f top -o top20.txt -- luajit app.lua 0.2 &&
	"$lp" record -q -f top -n 0 -o top0.txt -- luajit app.lua 0.2) >/dev/null 2>"$t/err" ||
	fail "record -f top -n 3: $(cat "$t/err")"
# top_ok FILE N: the list in FILE has min(N, all) rows, all = rows + those left out.
top_ok() {
	local rows more
	rows=$(grep -Ec '^ *[0-9.]+% +[0-9]+ +[0-9.]+%' "$1")
	more=$(sed -n 's/^\.\.\. \([0-9]*\) more frames omitted.*/\1/p' "$1")
	more=${more:-0}
	[ "$rows" -eq "$(( rows + more < $2 ? rows + more : $2 ))" ] && [ "$rows" -gt 0 ]
}
top_ok "$t/top3.txt" 3 && top_ok "$t/top3b.txt" 3 && top_ok "$t/top20.txt" 20 &&
	top_ok "$t/top0.txt" 1000000 && grep -q 'more frames omitted' "$t/top3.txt" ||
	fail "record -f top: -n 3, --limit 3, default and -n 0 lists: $(grep -c % "$t/top3.txt") $(grep -c % "$t/top3b.txt") $(grep -c % "$t/top20.txt") $(grep -c % "$t/top0.txt") lines with %"

# -- Options: format to standard output, L mode, rate, wall clock, --raw.
(cd "$t" && "$lp" record -q -f collapsed -o - --mode L --rate 500 --clock wall --raw r.bin \
	-- luajit app.lua 0.3) >"$t/l.out" 2>"$t/l.err" || fail "record L: $(cat "$t/l.err")"
# The profile owns standard output: the program's own output goes to standard error.
grep -q '^result' "$t/l.err" || fail "program output missing from stderr with -o -"
grep -q '^result' "$t/l.out" && fail "program output mixed into the profile with -o -"
grep -q '@app.lua:1' "$t/l.out" || fail "collapsed stacks on standard output: $(head -3 "$t/l.out")"
[ -s "$t/r.bin" ] || fail "--raw r.bin not written"
# Standard output without -f: the top list (once came out as gzipped pprof).
(cd "$t" && "$lp" record -q -o - --raw t.bin -- luajit app.lua 0.2) >"$t/t.out" 2>"$t/t.err" ||
	fail "record -o -: $(cat "$t/t.err")"
grep -q '%self' "$t/t.out" || fail "record -o - without -f is not the top list: $(head -c 200 "$t/t.out" | od -c | head -3)"
n=$(grep -v '^result\|^nested' "$t/l.out" | awk '{s += $NF} END {print s + 0}')
[ "$n" -ge 60 ] || fail "--rate 500 --clock wall over 0.3 s gave $n samples"
# The wall clock's ticks, a signal, end a program's sleeps early (nanosleep is not
# restarted after a handler): --help says so (it spoke only of "elapsed time").
"$lp" record --help | tr -s ' \n' '  ' | grep -q 'sleeps end early, and calls not restarted after a signal (nanosleep, poll, epoll_wait) return EINTR' ||
	fail "record --help does not say that --clock wall's ticks end sleeps early"
# -r is --rate, py-spy's and rbspy's letter for it.
(cd "$t" && "$lp" record -q -r 250 --clock wall -f collapsed -o r250.folded -- luajit app.lua 0.1) \
	>/dev/null 2>"$t/r250.err" || fail "record -r 250: $(cat "$t/r250.err")"
"$lp" report -f info "$t/r250.bin" 2>/dev/null | grep -qx 'meta.interval_ns: 4000000' ||
	fail "record -r 250 did not sample every 4 ms: $("$lp" report -f info "$t/r250.bin" 2>&1 | grep interval)"

# Samples in folded stacks FILE, and how many of them reach main: "ALL ROOTED".
reach_main() { awk '{ t += $NF; if ($0 ~ /(^|;)main;/) r += $NF } END { print t + 0, r + 0 }' "$1"; }

# -- A coroutine whose stack grows in trace exits (recursion, JIT on): samples taken
# while it exits a trace or compiles one (host stack only) go on through its resumer's
# C frames to main. Without them 1.4-2.8 % of the samples stopped at the interpreter.
co=$PWD/tests/integration/coro_exits.lua
(cd "$t" && "$lp" record -q -f collapsed -o co.folded --rate 1000 --clock wall \
	-- luajit -jon "$co") >/dev/null 2>"$t/co.err" || fail "record coro_exits.lua: $(cat "$t/co.err")"
read -r all rooted < <(reach_main "$t/co.folded")
[ "$all" -ge 500 ] && [ $((rooted * 1000)) -ge $((all * 990)) ] ||
	fail "coroutine with trace exits: $rooted of $all samples reach main:
$(grep -v '\(^\|;\)main;' "$t/co.folded" | sort -t' ' -k2 -nr | head -3)"

# -- A coroutine deeper than the Lua frames a sample keeps (512): the Lua part is cut, the
# native part still goes through the resumer's C frames to main. All but 1 of 250 samples
# stopped at the coroutine's VM entry before (the resumers' frames were looked up only by
# a walk that reached the coroutine's bottom).
cat >"$t/deep.lua" <<'EOF'
local function burn(n) local x = 0 for i = 1, n do x = x + i % 7 end return x end
local function rec(d) if d == 0 then return burn(2e5) end return rec(d - 1) + 1 end
local co = coroutine.wrap(function()
  local t = os.clock()
  while os.clock() - t < 0.5 do rec(700) end
end)
co()
EOF
for j in off on; do
	(cd "$t" && "$lp" record -q -f collapsed -o deep.folded --rate 500 -- luajit -j$j deep.lua) \
		>/dev/null 2>"$t/deep.err" || fail "record deep.lua (JIT $j): $(cat "$t/deep.err")"
	read -r all rooted < <(reach_main "$t/deep.folded")
	[ "$all" -ge 50 ] && [ $((rooted * 100)) -ge $((all * 98)) ] ||
		fail "deep coroutine (JIT $j): $rooted of $all samples reach main:
$(grep -v '\(^\|;\)main;' "$t/deep.folded" | sort -t' ' -k2 -nr | head -2 | cut -c1-300)"
done

# -- Samples that land in a function's epilogue: its unwind table still places the popped
# registers in the red zone below the stack pointer, which the walk must read. Refusing
# those reads stopped 0.7 % of the demo program's samples at their leaf.
app=$PWD/examples/app.lua
(cd "$t" && "$lp" record -q -f collapsed -o demo.folded --rate 1000 --clock wall \
	-- luajit "$app" 2) >/dev/null 2>"$t/demo.err" ||
	fail "record examples/app.lua: $(cat "$t/demo.err")"
read -r all rooted < <(reach_main "$t/demo.folded")
[ "$all" -ge 1000 ] && [ $((rooted * 1000)) -ge $((all * 995)) ] ||
	fail "examples/app.lua: $rooted of $all samples reach main:
$(grep -v '\(^\|;\)main;' "$t/demo.folded" | sort -t' ' -k2 -nr | head -3)"


# -- Stripped code is named per function: Debian's luajit has no symbols for its own C
# functions (string.format's formatter, the collector...), and each sampled address there
# used to be a frame of its own ("luajit+0x2c01b"), tens of slivers for one function. Every
# such frame must now be a function's start in the binary's unwind table (readelf's FDEs),
# and the interpreter's block keeps its name.
exe=$(readlink -f "$(command -v luajit)")
cat >"$t/fmt.lua" <<'EOF'
local keep = {} for i = 1, 100000 do keep[i] = { i } end
local t, n, s = os.clock(), 0, {}
while os.clock() - t < 1 do n = n + 1; s[n % 64 + 1] = { n, string.format("%d:%g", n, n / 3) } end
print(n > 0, #keep)
EOF
(cd "$t" && "$lp" record -q -f collapsed -o fmt.folded --rate 1000 -- luajit -joff fmt.lua) \
	>/dev/null 2>"$t/fmt.err" || fail "record fmt.lua: $(cat "$t/fmt.err")"
if command -v readelf >/dev/null 2>&1; then
	# File offsets of the function starts: the FDEs' pc, through the executable segment.
	readelf -lW "$exe" | awk '$1 == "LOAD" && $7 ~ /E/ { print $2, $3 }' >"$t/text.seg"
	readelf -wf "$exe" 2>/dev/null | sed -n 's/.* FDE .* pc=\([0-9a-f]*\)\.\..*/\1/p' |
		while read -r pc; do
			read -r off va <"$t/text.seg"
			printf '0x%x\n' $((0x$pc - va + off))
		done | sort -u >"$t/fde.starts"
	base=$(basename "$exe")
	tr ';' '\n' <"$t/fmt.folded" | sed 's/ [0-9]*$//' | grep -E "^$base\+0x[0-9a-f]+$" |
		sed "s/^$base+//" | sort -u >"$t/fmt.frames"
	nfr=$(wc -l <"$t/fmt.frames")
	bad=$(comm -23 "$t/fmt.frames" "$t/fde.starts" | head -n 3 | tr '\n' ' ')
	[ "$nfr" -ge 2 ] || fail "fmt.lua: $nfr frames in $base's unnamed code, want some (stripped?)"
	[ -z "$bad" ] || fail "fmt.lua: frames of $base not at a function's start: $bad"
	grep -q ';lj_vm_asm_begin;' "$t/fmt.folded" ||
		fail "fmt.lua: the interpreter's block lost its name: $(head -c 300 "$t/fmt.folded")"
fi
# The collector's samples (an eighth of this loop's: 100,000 live tables to mark) are
# under the line whose allocation ran the step, with a GC frame on top; they used to
# have no Lua frame.
"$lp" report -q --split -f collapsed "$t/fmt.bin" >"$t/fmt.split" 2>/dev/null
read -r gtot gline < <(awk '/^GC;/ { t += $NF; if ($0 ~ /;@fmt\.lua:3;/) l += $NF }
	END { print t + 0, l + 0 }' "$t/fmt.split")
[ "$gtot" -ge 10 ] && [ $((gline * 100)) -ge $((gtot * 90)) ] ||
	fail "fmt.lua: $gline of $gtot GC samples under @fmt.lua:3:
$(grep '^GC;' "$t/fmt.split" | sort -t' ' -k2 -nr | head -n 2 | cut -c1-300)"
grep -Eq ';@fmt\.lua:3;.*;GC [0-9]+$' "$t/fmt.folded" ||
	fail "fmt.lua: no GC frame on top of the collector's samples: $(grep ';GC ' "$t/fmt.folded" | head -n 1)"
# -- The program's exit status is passed on, the profile written all the same.
(cd "$t" && "$lp" record -q -o st.svg -- luajit app.lua 0.1 5) >/dev/null 2>"$t/err"
rc=$?
[ $rc = 5 ] || fail "program exit status 5 passed on as $rc: $(cat "$t/err")"
[ -s "$t/st.svg" ] && [ -s "$t/st.bin" ] || fail "profile of a program exiting 5"

# -- LUA_INIT of the user still runs; child processes are not profiled.
cat >"$t/child.lua" <<'EOF'
print("child", os.getenv("LUAPROF_RECORD"), os.getenv("LUA_INIT"))
local p = io.popen("luajit -e 'print(os.getenv(\"LUAPROF_RECORD\"), os.getenv(\"LUA_INIT\"), misc)'")
print("grandchild", (p:read("*a"):gsub("\n", "|")))
p:close()
EOF
(cd "$t" && LUA_INIT='init_ran = true print("init ran")' "$lp" record -q -o c.svg -- luajit child.lua) \
	>"$t/c.out" 2>"$t/c.err" || fail "record child.lua: $(cat "$t/c.err")"
grep -q '^init ran$' "$t/c.out" || fail "the user's LUA_INIT did not run: $(cat "$t/c.out")"
grep -q '^child	nil	init_ran = true print("init ran")$' "$t/c.out" ||
	fail "LUAPROF_RECORD / LUA_INIT seen by the program: $(cat "$t/c.out")"
grep -q '^grandchild	init ran|nil	init_ran = true print("init ran")	nil|$' "$t/c.out" ||
	fail "a child process was touched: $(cat "$t/c.out")"

# -- Killed mid-run: the stream is cut; what reached the disk is still rendered, and the
# exit status is the program's (128 + SIGKILL), named on standard error.
cat >"$t/kill.lua" <<'EOF'
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
local t = os.clock() while os.clock() - t < 1.5 do fib(18) end
local pid = io.open("/proc/self/stat"):read("*n")
os.execute("kill -9 " .. pid)
EOF
(cd "$t" && "$lp" record -q -f collapsed -o k.folded -- luajit kill.lua) >/dev/null 2>"$t/err"
rc=$?
[ $rc = 137 ] || fail "killed program: record exited $rc, want 137: $(cat "$t/err")"
grep -q 'luajit was killed by signal 9' "$t/err" || fail "killing signal not named: $(cat "$t/err")"
grep -q 'truncated' "$t/err" || fail "no truncation warning: $(cat "$t/err")"
[ -s "$t/k.folded" ] || fail "nothing rendered from the killed program's stream"
# The samples lost with the cut (up to a quarter second: most of a short run) are not time
# off the CPU (the summary said the program slept or waited).
sed 's/< 1.5 do/< 0.4 do/' "$t/kill.lua" >"$t/kill2.lua"
(cd "$t" && "$lp" record -n 0 -f collapsed -o k2.folded -- luajit kill2.lua) >/dev/null 2>"$t/err"
grep -q 'slept or waited' "$t/err" && fail "killed program: $(grep slept "$t/err")"

# -- --memory: the memprof report on standard output, a flame graph with -o, exit status.
cat >"$t/mem.lua" <<'EOF'
local keep = {}
for i = 1, 100 do keep[i] = { i } end
local s = string.rep("m", 4000)
if arg[1] then os.exit(tonumber(arg[1])) end
EOF
(cd "$t" && "$lp" record --memory -- luajit mem.lua) >"$t/mem.out" 2>"$t/err"
rc=$?
[ $rc = 0 ] || fail "record --memory exited $rc: $(cat "$t/err")"
grep -q '^ALLOCATIONS$' "$t/mem.out" && grep -q '^HEAP SUMMARY:$' "$t/mem.out" ||
	fail "record --memory: no memprof report on stdout: $(head -5 "$t/mem.out")"
# 100 one-slot tables at line 2 (the JIT may run the loop: a trace started there).
grep -Eq '^(@mem.lua:2|TRACE \[[0-9]+\] started at @mem.lua:2): [0-9]+ events' "$t/mem.out" ||
	fail "record --memory: no event at mem.lua:2: $(head -8 "$t/mem.out")"
grep -q '^@mem.lua:3: 1 events	+4028B' "$t/mem.out" ||
	fail "record --memory: string.rep not at its line: $(grep mem.lua:3 "$t/mem.out")"
[ -s "$t/luaprof.bin" ] || fail "record --memory: no raw stream luaprof.bin"
# The summary: the events the profile holds (memprof.report() would say the same).
grep -Eq '^luaprof record: [0-9.]+ s profiled, [1-9][0-9]* events \(allocations, reallocations and frees; [1-3]?[0-9]\.[0-9] bytes of stream each, the symbol table aside\), [0-9.]+ ([KMG]i)?B recorded$' \
	"$t/err" && grep -q '^luaprof record: wrote standard output (memprof) and .*luaprof.bin (raw stream' \
	"$t/err" || fail "record --memory summary: $(cat "$t/err")"
# Most bytes from JIT traces: record and report say that exact mode names them by each
# trace's start, and where their lines are; not with the JIT off.
printf 'local keep = {}\nfor i = 1, 200000 do keep[i %% 100 + 1] = { i } end\n' >"$t/hot.lua"
for j in on off; do
	(cd "$t" && "$lp" record --memory -o hot.txt -- luajit -j$j hot.lua) >/dev/null 2>"$t/err" ||
		fail "record --memory hot.lua (JIT $j): $(cat "$t/err")"
	"$lp" report -f top "$t/hot.bin" >/dev/null 2>"$t/err2"
	n=$(cat "$t/err" "$t/err2" | grep -c '% of the bytes were allocated by JIT traces, which exact mode names by where each trace starts')
	[ $j = on ] && [ "$n" != 2 ] && fail "JIT on: $n notes on trace allocations, want 2: $(cat "$t/err" "$t/err2")"
	# The loop's first iterations ran in the interpreter, before its trace: most bytes
	# but not all are the trace's, which reads ">99.9%" at most (it read "100%").
	[ $j = on ] && grep -q ' 100\(\.0\)\?% of the bytes were allocated by JIT' "$t/err" "$t/err2" &&
		fail "JIT on: a note says all bytes were the traces': $(grep note "$t/err" "$t/err2")"
	[ $j = off ] && [ "$n" != 0 ] && fail "JIT off: a note on trace allocations: $(cat "$t/err")"
done
# What is still held, in one command: --leak-only prints the HEAP SUMMARY alone (the
# hundred kept tables at line 2, or the trace started there, and string.rep's string at
# 3, with the VM's string buffer it grew); --value inuse_objects the graphs of it (line 2:
# the tables and keep's array).
(cd "$t" && "$lp" record -q --memory --leak-only -- luajit mem.lua) >"$t/leak.out" 2>"$t/err" ||
	fail "record --memory --leak-only: $(cat "$t/err")"
[ "$(head -1 "$t/leak.out")" = "HEAP SUMMARY:" ] && ! grep -q '^ALLOCATIONS' "$t/leak.out" &&
	grep -Eq '^(@mem.lua:2|TRACE \[[0-9]+\] started at @mem.lua:2) holds [0-9]+B: ' "$t/leak.out" &&
	awk '/^@mem.lua:3 holds [0-9]+B: / { b = substr($3, 1, length($3) - 2) + 0 } END { exit !(b >= 4028) }' "$t/leak.out" ||
	fail "record --memory --leak-only: $(head -5 "$t/leak.out")"
(cd "$t" && "$lp" record -q --memory --value inuse_objects -f collapsed -o - -- luajit -joff mem.lua) \
	>"$t/inuse.out" 2>"$t/err" || fail "record --memory --value inuse_objects: $(cat "$t/err")"
grep -q '^@mem.lua:2 101$' "$t/inuse.out" ||
	fail "record --memory --value inuse_objects: $(sort -t' ' -k2 -nr "$t/inuse.out" | head -3)"
grep -q 'stopped the profile itself' "$t/err" &&
	fail "record: a profile stopped at the program's end told as stopped by the program"
# The program's globals are as without record: no `misc` (code that looks for Tarantool
# by it), no luaprof loaded, until the program's own require, which gives it the running
# agent and misc.memprof / misc.sysprof.
printf 'print(misc, package.loaded.luaprof)\nlocal lp = require "luaprof"\nprint(misc.memprof == lp.memprof, package.loaded.luaprof == lp)\n' >"$t/globals.lua"
"$lp" record -q -f collapsed -o "$t/globals.out" -- luajit "$t/globals.lua" >"$t/globals.txt" 2>"$t/err" ||
	fail "record globals.lua: $(cat "$t/err")"
[ "$(cat "$t/globals.txt")" = "$(printf 'nil\tnil\ntrue\ttrue')" ] ||
	fail "record: the program's globals changed, or require gave another module: $(cat "$t/globals.txt")"
# The memprof report's sizes in units, as report --human-readable gives them.
"$lp" record -q --memory --human-readable --leak-only -o "$t/human.txt" -- luajit "$t/mem.lua" \
	>/dev/null 2>"$t/err" || fail "record --memory --human-readable: $(cat "$t/err")"
grep -Eq '^@[^ ]*mem\.lua:[0-9]+ holds [0-9.]+(KiB|MiB)' "$t/human.txt" ||
	fail "record --memory --human-readable: $(head -5 "$t/human.txt")"
# A program that stops the profile itself: record says the profile ends there.
printf 'local t = {} for i = 1, 100 do t[i] = { i } end\nrequire "luaprof"\nmisc.memprof.stop()\n' >"$t/selfstop.lua"
(cd "$t" && "$lp" record -n 0 --memory -o selfstop.txt -- luajit selfstop.lua) >/dev/null 2>"$t/err" ||
	fail "record selfstop.lua: $(cat "$t/err")"
grep -q 'the program stopped the profile itself (memprof.stop)' "$t/err" ||
	fail "record: a profile the program stopped is not told: $(cat "$t/err")"
# The CPU profiler the same (it was not told, and its stream had no stopped_by).
cat >"$t/cpustop.lua" <<'EOF'
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
local t = os.clock()
while os.clock() - t < 0.2 do fib(18) end
require "luaprof"
misc.sysprof.stop()
t = os.clock()
while os.clock() - t < 0.2 do fib(18) end
EOF
(cd "$t" && "$lp" record -o cpustop.svg -- luajit cpustop.lua) >/dev/null 2>"$t/err" ||
	fail "record cpustop.lua: $(cat "$t/err")"
grep -q 'the program stopped the profile itself (sysprof.stop)' "$t/err" &&
	"$lp" report -f info "$t/cpustop.bin" 2>/dev/null | grep -qx 'meta.stopped_by: program' ||
	fail "record: a CPU profile the program stopped is not told: $(cat "$t/err")"
"$lp" report -f info "$t/out.bin" 2>/dev/null | grep -Eqx 'meta.stopped_by: (close|exit)' ||
	fail "record: the CPU profile stopped at the program's end: $("$lp" report -f info "$t/out.bin" | grep stopped)"
# Sampled: how many samples, at what interval, what taking them cost. The script allocates
# 15-18 KB: at 1 KiB intervals (drawn at random) no sample at all has odds of about e^-15
# (at 4 KiB it was e^-4.5, and a CI run drew it).
(cd "$t" && "$lp" record --memory --sample 1K -o s.folded -- luajit mem.lua) >/dev/null 2>"$t/err"
rc=$?
[ $rc = 0 ] || fail "record --memory --sample 1K exited $rc: $(cat "$t/err")"
grep -Eq '^luaprof record: [0-9.]+ s profiled, [1-9][0-9]* sampled allocations \(one per 1024 bytes allocated on average; taking them cost [0-9.]+ ms, [0-9.]+% of the run\)$' \
	"$t/err" || fail "record --memory --sample summary: $(cat "$t/err")"
# os.exit with a status: the stream is finished at exit and the status passed on.
(cd "$t" && "$lp" record --memory -o heap.svg -- luajit mem.lua 7) >/dev/null 2>"$t/err"
rc=$?
[ $rc = 7 ] || fail "record --memory, os.exit(7): exit $rc: $(cat "$t/err")"
head -c 100 "$t/heap.svg" | grep -q '<svg\|<?xml' || fail "record --memory -o heap.svg"
# A graph's summary lists the top allocation sites, -n of them (it used to ignore -n).
grep -q '%self' "$t/err" && grep -Eq '^ *[0-9.]+%.*@mem\.lua:' "$t/err" ||
	fail "record --memory -o heap.svg: no top list in the summary: $(cat "$t/err")"
(cd "$t" && "$lp" record --memory -n 1 -o heap1.svg -- luajit mem.lua) >/dev/null 2>"$t/err"
rows=$(grep -cE '^ *[0-9.]+% ' "$t/err")
[ "$rows" = 1 ] || fail "record --memory -n 1: $rows rows in the summary: $(cat "$t/err")"
(cd "$t" && "$lp" record --memory -n 0 -o heap0.svg -- luajit mem.lua) >/dev/null 2>"$t/err"
grep -q '%self' "$t/err" && fail "record --memory -n 0: a top list: $(cat "$t/err")"
"$lp" report -q "$t/heap.bin" -f memprof >/dev/null 2>"$t/err" ||
	fail "record --memory after os.exit: the stream does not parse: $(cat "$t/err")"

# -- Stopping from a script (record --help): SIGINT sent to record alone is ignored, the
# program runs on (as under time(1)); SIGTERM is passed on, and what the program recorded
# is rendered, with its status.
(cd "$t" && exec "$lp" record -q -f collapsed -o sig.folded -- luajit app.lua 30) >/dev/null 2>"$t/sig.err" &
rp=$!
sleep 1
kill -INT $rp
sleep 0.5
kill -0 $rp 2>/dev/null || fail "record died of a SIGINT sent to it alone: $(cat "$t/sig.err")"
kill -TERM $rp
wait $rp
rc=$?
[ $rc = 143 ] || fail "record sent SIGTERM: exit $rc, want 143: $(cat "$t/sig.err")"
grep -q 'luajit was killed by signal 15' "$t/sig.err" && [ -s "$t/sig.folded" ] ||
	fail "record sent SIGTERM: no profile, or not told: $(cat "$t/sig.err")"

# -- No agent: luajit -E ignores LUA_INIT; through a wrapper, found out once it has run.
(cd "$t" && "$lp" record -q -o e.svg -- sh -c 'exec luajit -E app.lua 0.1') >/dev/null 2>"$t/err"
rc=$?
[ $rc = 1 ] || fail "luajit -E: exit $rc, want 1"
grep -q 'wrote no profile: it never loaded the agent, which record gives LuaJIT.s standalone interpreter through LUA_INIT (`luajit -E` ignores' "$t/err" ||
	fail "luajit -E message: $(cat "$t/err")"
# luajit itself given arguments that keep it from running LUA_INIT (-E, or a usage error
# it stops at before: -e without its chunk, an unknown option) is refused before it runs,
# naming the argument: record ran it and blamed LUA_INIT, or -E, after its usage message.
for args in "-E app.lua 0.1|luajit -E ignores LUA_INIT, through which record loads the profiler" \
	"-e|luajit -e needs a chunk of Lua code" "-jon -e|luajit -e needs a chunk of Lua code" \
	"-l|luajit -l needs a module name" "-x app.lua|luajit has no option '-x'" \
	"-e print(1) -bl app.lua|luajit -b .bytecode. must be its first option"; do
	# shellcheck disable=SC2086
	(cd "$t" && "$lp" record -q -o e.svg -- luajit ${args%%|*}) >"$t/out" 2>"$t/err"
	rc=$?
	[ $rc = 1 ] && grep -Eq "^luaprof record: ${args#*|}" "$t/err" && [ ! -s "$t/out" ] &&
		[ "$(wc -l <"$t/err")" = 1 ] ||
		fail "luajit ${args%%|*}: exit $rc: $(cat "$t/out" "$t/err" | head -5)"
done
# What luajit runs LUA_INIT with is let through: -b first, -O, -j with its argument, -e
# with its chunk, a script's own options after its name.
(cd "$t" && "$lp" record -q -o e.svg -- luajit -O3 -jon -e 'x = 1' app.lua 0.3 -E -x) >"$t/out" 2>"$t/err" &&
	grep -q '^result	true$' "$t/out" || fail "luajit -O3 -jon -e CODE app.lua -E -x: $(cat "$t/err")"
# A program killed before it loaded the agent (a shell): said so, not that the profiler
# had no time to write.
(cd "$t" && "$lp" record -q -o k.svg -- sh -c 'kill -9 $$') >/dev/null 2>"$t/err"
grep -q 'sh wrote no profile: it was killed before it loaded the agent' "$t/err" ||
	fail "sh killed: $(cat "$t/err")"
# A host that does not run LUA_INIT at all: said as plainly.
if command -v tarantool >/dev/null 2>&1; then
	printf 'print("hi")\n' >"$t/tt.lua"
	(cd "$t" && "$lp" record -q -o tt.svg -- tarantool tt.lua) >/dev/null 2>"$t/err"
	grep -q 'tarantool wrote no profile: it never loaded the agent' "$t/err" ||
		fail "tarantool: $(cat "$t/err")"
fi
# The agent loaded, its start refused (a PUC Lua): its own message says why, record does
# not blame the loading. And the agent's pipe to record is closed before the program
# runs: its children have the descriptors they would have without record.
if command -v lua5.1 >/dev/null 2>&1; then
	(cd "$t" && "$lp" record -q -o e.svg -- lua5.1 app.lua 0.1) >/dev/null 2>"$t/err"
	grep -q 'not profiling: .*not a LuaJIT VM' "$t/err" &&
		grep -q 'lua5.1 wrote no profile: the profiler did not start, or could not write (its message above says why)$' "$t/err" ||
		fail "lua5.1: $(cat "$t/err")"
fi
printf 'local p = io.popen("ls /proc/self/fd") local n = 0 for _ in p:lines() do n = n + 1 end p:close() print(n)\n' >"$t/fds.lua"
[ "$("$lp" record -q -f collapsed -o "$t/fds.folded" -- luajit "$t/fds.lua" 2>"$t/err")" = "$(luajit "$t/fds.lua")" ] ||
	fail "the program's children inherit a descriptor under record: $(cat "$t/err")"
# The pipe is a hint that never gets in the way: with standard input and output closed
# (it took descriptor 1, and the program's output went into it), and with a wrapper that
# puts a file of its own where the pipe was (the agent wrote into it).
"$lp" record -q -f collapsed -o "$t/closed.folded" -- luajit "$t/app.lua" 0.3 <&- >&- 2>"$t/err" &&
	[ -s "$t/closed.folded" ] || fail "record with standard input and output closed: $(cat "$t/err")"
: >"$t/wlog"
"$lp" record -q -f collapsed -o "$t/wrap.folded" -- bash -c \
	'for fd in $(seq 200 220); do eval "exec $fd>>\"$1\""; done; exec luajit "$2" 0.3' x "$t/wlog" "$t/app.lua" \
	>/dev/null 2>"$t/err" && [ -s "$t/wrap.folded" ] || fail "record through a wrapper owning descriptors 200-220: $(cat "$t/err")"
[ -s "$t/wlog" ] && fail "the agent wrote into a wrapper's file: $(od -c "$t/wlog" | head -2)"
# Several LuaJIT processes under one record (a wrapper script): the first to start is
# profiled, the others run as without record, and the summary says so; one after the
# other and at once, in both profilers. (The second used to overwrite the first's profile.)
for w in alpha beta; do
	printf 'local function %s() local t, n, k = os.clock(), 0, {} while os.clock() - t < 0.3 do n = n + 1 k[n %% 64 + 1] = { n } end return n end\nprint(%s() > 0)\n' $w $w >"$t/$w.lua"
done
for how in 'luajit "$1"; luajit "$2"' 'luajit "$1" & sleep 0.1; luajit "$2"; wait' \
	'(sleep 0.2; luajit "$1") & luajit "$2"; wait'; do
	for prof in cpu mem; do
		rm -f "$t/two.folded" "$t/two.bin"
		if [ $prof = cpu ]; then set -- -f collapsed; else set -- --memory --sample 4K -f collapsed; fi
		"$lp" record "$@" -o "$t/two.folded" -- sh -c "$how" x "$t/alpha.lua" "$t/beta.lua" >"$t/out" 2>"$t/err" ||
			fail "record of two processes ($how, $prof): $(cat "$t/err")"
		first=alpha other=beta
		case $how in '(sleep'*) first=beta other=alpha ;; esac
		grep -q "$first" "$t/two.folded" || fail "two processes ($how, $prof): the first's $first is not in the profile: $(head -3 "$t/two.folded")"
		grep -q "$other" "$t/two.folded" && fail "two processes ($how, $prof): the second's $other is in the profile"
		grep -q '^luaprof record: 1 more LuaJIT process under sh ran without the profiler: record profiles the first one that starts' "$t/err" ||
			fail "two processes ($how, $prof): no word of the process left out: $(cat "$t/err")"
		grep -q 'not profiling' "$t/err" && fail "two processes ($how, $prof): the second one complained: $(cat "$t/err")"
		[ "$(grep -c '^true$' "$t/out")" = 2 ] || fail "two processes ($how, $prof): output $(cat "$t/out")"
	done
done
set --
# Wrappers that close every descriptor they do not know (Python's subprocess does) or take
# 200 for their own (`exec 200>lock`) cut nothing: the claim and the status are files
# beside the profile (they were pipes at descriptors 200 and up: both processes profiled
# into one file, or the note on the second lost). No descriptor of record's reaches the
# wrapper's other children.
for how in 'for fd in $(seq 3 255); do eval "exec $fd>&-"; done; luajit "$1"; luajit "$2"' \
	'exec 200>"$3"; luajit "$1"; luajit "$2"'; do
	"$lp" record -f collapsed -o "$t/cl.folded" -- bash -c "$how" x "$t/alpha.lua" "$t/beta.lua" "$t/lockf" \
		>/dev/null 2>"$t/err" || fail "record through a wrapper ($how): $(cat "$t/err")"
	grep -q alpha "$t/cl.folded" && ! grep -q beta "$t/cl.folded" ||
		fail "record through a wrapper ($how): not the first process's profile: $(grep -c alpha "$t/cl.folded") alpha, $(grep -c beta "$t/cl.folded") beta"
	grep -q '^luaprof record: 1 more LuaJIT process under bash ran without the profiler' "$t/err" ||
		fail "record through a wrapper ($how): no word of the second process: $(cat "$t/err")"
done
[ "$("$lp" record -q -f collapsed -o "$t/fd.folded" -- sh -c 'ls /proc/self/fd | wc -l; luajit -e "local x = 1"' 2>/dev/null | head -1)" = \
	"$(sh -c 'ls /proc/self/fd | wc -l')" ] || fail "record: the wrapper's other children inherit descriptors of record's"
ls "$t" | grep -q 'claim\|status' && fail "record left its claim or status file: $(ls "$t")"
# A record killed by SIGKILL leaves its claim and status; the next record in the directory
# removes them (they were left forever), never those of a record still running there, nor
# a file of another name. Made to look old: a file a few seconds young is not judged.
mkdir "$t/stale"
recfiles() { find "$t/stale" -maxdepth 1 -name '.luaprof-*' -printf '%f\n' | sort; }
(cd "$t/stale" && exec "$lp" record -q -o /dev/null --raw dead.bin -- sleep 60) >/dev/null 2>&1 &
dead=$!
for _ in $(seq 100); do
	child=$(cat /proc/$dead/task/$dead/children 2>/dev/null)
	[ -n "$child" ] && break
	sleep 0.05
done
{ kill -KILL $dead; wait $dead; } 2>/dev/null
for c in $child; do kill -KILL "$c" 2>/dev/null; done
recfiles >"$t/dead.list"
(cd "$t/stale" && exec "$lp" record -q -o /dev/null --raw live.bin -- sleep 60) >/dev/null 2>&1 &
live=$!
for _ in $(seq 100); do [ "$(recfiles | wc -l)" = 4 ] && break; sleep 0.05; done
recfiles | comm -13 "$t/dead.list" - >"$t/live.list"
: >"$t/stale/.luaprof-status.kept"  # not mkostemp's name
touch -d '-1 hour' "$t/stale/".luaprof-*
"$lp" record -q -f collapsed -o "$t/stale/next.folded" -- luajit "$t/alpha.lua" >/dev/null 2>"$t/err" ||
	fail "record beside stale files: $(cat "$t/err")"
[ "$(wc -l <"$t/dead.list")" = 2 ] && [ "$(wc -l <"$t/live.list")" = 2 ] ||
	fail "killed and live records' files: $(cat "$t/dead.list" "$t/live.list")"
[ -z "$(recfiles | comm -12 "$t/dead.list" -)" ] ||
	fail "the files of a record killed by SIGKILL were left: $(recfiles | comm -12 "$t/dead.list" - | tr '\n' ' ')"
[ "$(recfiles | comm -12 "$t/live.list" - | wc -l)" = 2 ] ||
	fail "a running record's files were removed: $(cat "$t/live.list" | tr '\n' ' '), left: $(recfiles | tr '\n' ' ')"
[ -e "$t/stale/.luaprof-status.kept" ] || fail "a file of another name than record's removed"
kill -TERM $live
wait $live 2>/dev/null
rm -f "$t/stale/.luaprof-status.kept"
[ -z "$(recfiles)" ] || fail "files left in the directory: $(recfiles | tr '\n' ' ')"
# A profiled process a wrapper leaves running when it exits: record waits for it (its
# profile is written when it ends), says so, and the profile is whole (it was rendered cut
# short while the process went on writing it).
"$lp" record -f collapsed -o "$t/bg.folded" -- sh -c 'luajit "$1" & sleep 0.1' x "$t/alpha.lua" >/dev/null 2>"$t/err" ||
	fail "record of a wrapper that leaves luajit running: $(cat "$t/err")"
grep -q '^luaprof record: sh ended, but the process it profiles (pid [0-9]*) still runs: waiting for it' "$t/err" ||
	fail "record of a wrapper that leaves luajit running: no word of the wait: $(cat "$t/err")"
grep -q 'truncated\|without finishing' "$t/err" && fail "record of a wrapper that leaves luajit running: cut short: $(cat "$t/err")"
grep -q alpha "$t/bg.folded" || fail "record of a wrapper that leaves luajit running: no alpha in the profile"
"$lp" record -q -f collapsed -o "$t/bg.folded" -- sh -c 'luajit "$1" & sleep 0.1' x "$t/alpha.lua" >/dev/null 2>"$t/err"
[ -s "$t/err" ] && fail "record -q of a wrapper that leaves luajit running said: $(cat "$t/err")"
# ...found by the lock it holds on record's status file, not by the id it wrote: in a pid
# namespace of its own (unshare) that id is 1 (record waited for its own pid 1, forever).
if unshare -pf true 2>/dev/null; then
	timeout 60 "$lp" record -q -f collapsed -o "$t/ns.folded" -- unshare -pf luajit "$t/alpha.lua" >/dev/null 2>"$t/err"
	rc=$?
	[ $rc = 0 ] && grep -q alpha "$t/ns.folded" || fail "record of luajit in a pid namespace: exit $rc: $(cat "$t/err")"
else
	echo "note: unshare -pf not permitted here: the pid namespace case not checked"
fi
# A process that ignores every signal, left running: Ctrl-C to record stops the wait (after
# a second: the terminal's ^C reaches the process too, and one that ends on it finishes its
# profile, which record then renders whole). The wrapper gives it time to load the agent
# (without, under load, it had not when the wrapper ended: record took it for a program
# that never would).
printf 'local t = os.clock() while os.clock() - t < (tonumber(arg[1]) or 1) do end\n' >"$t/busy30.lua"
"$lp" record -f collapsed -o "$t/st.folded" -- sh -c 'trap "" INT TERM HUP; luajit "$1" 30 & sleep 0.3' x "$t/busy30.lua" \
	>/dev/null 2>"$t/err" &
rp=$!
# (command grep: the file may not be made yet; common.sh's grep fails the test on that.)
for i in $(seq 50); do command grep -qs 'still runs: waiting' "$t/err" && break; sleep 0.1; done
kill -INT $rp
for i in $(seq 50); do kill -0 $rp 2>/dev/null || break; sleep 0.1; done
kill -0 $rp 2>/dev/null && { fail "record did not stop waiting on Ctrl-C: $(cat "$t/err")"; kill -9 $rp; }
wait $rp 2>/dev/null
grep -q 'the process it profiles (pid [0-9]*) still runs (record stopped waiting for it): what its profile holds so far is rendered' "$t/err" ||
	fail "record stopping its wait on Ctrl-C: $(cat "$t/err")"
pkill -f "$t/busy30.lua" 2>/dev/null
# The profiled process killed under a wrapper that goes on: not "exec or _exit".
printf 'local t = os.clock() while os.clock() - t < 0.5 do end\nos.execute("kill -9 " .. io.open("/proc/self/stat"):read("*n"))\n' >"$t/selfkill.lua"
"$lp" record -q -f collapsed -o "$t/sk.folded" -- sh -c 'luajit "$1"; echo after' x "$t/selfkill.lua" >/dev/null 2>"$t/err"
grep -q 'the process it profiled (pid [0-9]*) ended without finishing its profile: it was killed, executed another program, or left through _exit' "$t/err" ||
	fail "record of a wrapper whose luajit is killed: $(cat "$t/err")"
# record inside the program of another record: the inner one profiles (its LUA_INIT
# chain ran the outer's loader as the user's, forever); the user's own LUA_INIT runs once.
out=$(cd "$t" && LUA_INIT='io.write("init ")' timeout 60 "$lp" record -q -f collapsed -o outer.folded -- \
	"$lp" record -q -f collapsed -o inner.folded -- luajit "$t/alpha.lua" 2>"$t/err")
rc=$?
[ $rc != 124 ] || fail "record inside record: hung"
[ "$out" = "init true" ] || fail "record inside record: output '$out': $(cat "$t/err")"
grep -q alpha "$t/inner.folded" || fail "record inside record: the inner profile has no alpha: $(cat "$t/err")"
# A record the program runs, writing the same raw stream as the outer one: the outer does
# not rename its own over it, and says where its own is.
(cd "$t" && "$lp" record -q -f collapsed -o same.folded -- luajit "$t/alpha.lua") >/dev/null 2>&1
(cd "$t" && "$lp" record -q -f collapsed -o same.folded -- luajit -e \
	"os.execute('$lp record -q -f collapsed -o same.folded -- luajit $t/beta.lua >/dev/null 2>&1') dofile('$t/alpha.lua')") \
	>/dev/null 2>"$t/err" && fail "record over a raw stream another record wrote meanwhile: exit 0"
grep -q "^luaprof record: same.bin changed while luajit ran (another luaprof record writing it?): it is left as it is, and this profile is in same.bin\." "$t/err" ||
	fail "record over a raw stream another record wrote meanwhile: $(cat "$t/err")"
"$lp" report -q -f collapsed "$t/same.bin" 2>/dev/null | grep -q beta || fail "record over a raw stream another record wrote meanwhile: the inner profile was replaced"
rm -f "$t"/same.bin.*

# A program of the user's own named luaprof.lua, on package.path, is what its require
# gets, as without record.
mkdir -p "$t/own"
printf 'return { mine = true }\n' >"$t/own/luaprof.lua"
printf 'package.path = "%s/own/?.lua;" .. package.path\nprint(require("luaprof").mine, misc)\n' "$t" >"$t/own.lua"
[ "$("$lp" record -q -f collapsed -o "$t/own.folded" -- luajit "$t/own.lua" 2>"$t/err")" = "$(printf 'true\tnil')" ] ||
	fail "record: the program's own luaprof.lua was not what its require got: $(cat "$t/err")"

# -- -f top --lines ranks Lua lines, as report's does, in both profilers: the function
# lines (work.s loop, line 4), not functions.
for m in "" "--memory --sample 512"; do
	(cd "$t" && "$lp" record -q $m -f top --lines -n 50 -- luajit app.lua 0.3) >"$t/lines.out" 2>"$t/err" ||
		fail "record $m -f top --lines: $(cat "$t/err")"
	grep -q 'frame (by line)' "$t/lines.out" || fail "record $m -f top --lines: not by line: $(head -5 "$t/lines.out")"
	grep -q '@app.lua:4$' "$t/lines.out" || fail "record $m -f top --lines: no line 4 (work's loop; by function, work is app.lua:2): $(head -12 "$t/lines.out")"
done

# -- Usage errors.
expect() {
	local pat=$1
	shift
	"$lp" record "$@" >/dev/null 2>"$t/err"
	local rc=$?
	[ $rc = 1 ] || fail "record $*: exit $rc, want 1"
	grep -q -- "$pat" "$t/err" || fail "record $*: message $(cat "$t/err")"
}
expect 'no program to run' -o x.svg
expect '-o needs a file name before --' -f top -o -- luajit app.lua
expect "-o needs a file name ('-' for standard output)" -o '' -- luajit app.lua
expect '--human-readable applies to the memprof text report' --memory --sample 1K --human-readable -- luajit app.lua
expect '--human-readable applies to the memprof text report' --human-readable -- luajit app.lua
expect "cannot tell the format from 'p.bin'; use -f (record writes the raw stream too: --raw names it)" -o p.bin -- luajit app.lua
expect '--rate expects' --rate 0 -- luajit app.lua
expect '--lines applies to -f top (rank lines, not functions), not to -f flamegraph' --lines -o x.svg -- luajit app.lua
# LUAPROF_AGENT naming no shared library: said before the program runs (luajit failed to
# load it, and record blamed LUA_INIT).
LUAPROF_AGENT=/etc/passwd "$lp" record -q -o x.svg -- luajit app.lua >/dev/null 2>"$t/err"
rc=$?
[ $rc = 1 ] && grep -q 'the agent /etc/passwd is not a shared library (LUAPROF_AGENT names it' "$t/err" ||
	fail "LUAPROF_AGENT=/etc/passwd: exit $rc: $(cat "$t/err")"
# Standard output closed, or open read-only, for a report that goes there: refused before
# the program runs (it ran, then "write error").
"$lp" record -q -f top -- luajit app.lua 0.1 >&- 2>"$t/err"
rc=$?
[ $rc = 1 ] && grep -q 'cannot write standard output: Bad file descriptor' "$t/err" ||
	fail "record with standard output closed: exit $rc: $(cat "$t/err")"
"$lp" record -q -f top -- luajit app.lua 0.1 1</dev/null 2>"$t/err"
rc=$?
[ $rc = 1 ] && grep -q 'cannot write standard output' "$t/err" ||
	fail "record with standard output read-only: exit $rc: $(cat "$t/err")"

# --raw with a graph's extension gets the raw stream, and is told so.
(cd "$t" && "$lp" record -q -o rg.folded --raw rg.svg -- luajit app.lua 0.2) >/dev/null 2>"$t/err" ||
	fail "record --raw rg.svg: $(cat "$t/err")"
grep -q 'note: --raw rg.svg gets the raw stream (binary: .*extension (.svg) is that of -f flamegraph' "$t/err" ||
	fail "record --raw rg.svg: no note: $(cat "$t/err")"
"$lp" report -q -f info "$t/rg.svg" >/dev/null || fail "record --raw rg.svg: not a raw stream"

# -o /dev/null (the raw stream alone): the summary keeps its top list (it rendered the
# list into /dev/null and left it out of the summary).
printf 'local t = {} for i = 1, 2e5 do t[i %% 100 + 1] = { i } end\n' >"$t/churn.lua"
(cd "$t" && "$lp" record -o /dev/null --raw dn.bin -- luajit app.lua 0.3) >/dev/null 2>"$t/err" ||
	fail "record -o /dev/null: $(cat "$t/err")"
grep -q '%self' "$t/err" || fail "record -o /dev/null: no top list in the summary: $(cat "$t/err")"
(cd "$t" && "$lp" record --memory --sample 4K -o /dev/null --raw dn.bin -- luajit churn.lua) \
	>/dev/null 2>"$t/err" || fail "record --memory --sample 4K -o /dev/null: $(cat "$t/err")"
grep -q '%self' "$t/err" ||
	fail "record --memory --sample 4K -o /dev/null: no top list in the summary: $(cat "$t/err")"

# -- Stacks cut short (recursion deeper than the profiler keeps) are said to be in the
# reports: report's summary, the top list's header and the flame graph's subtitle, with
# the count record's meta gives (they hung from lua_pcall without a word).
cat >"$t/deep.lua" <<'EOF'
local function rec(d) if d == 0 then local x = 0 for i = 1, 3e7 do x = x + i % 3 end return x end return rec(d - 1) + 0 end
for _ = 1, 4 do rec(3000) end
EOF
(cd "$t" && "$lp" record -q -o deep.svg -- luajit -joff deep.lua) >/dev/null 2>"$t/err" ||
	fail "record deep.lua: $(cat "$t/err")"
ncut=$("$lp" report -q -f info "$t/deep.bin" | sed -n 's/^meta.truncated: //p')
if [ "${ncut:-0}" -gt 0 ]; then
	"$lp" report "$t/deep.bin" -f top -o "$t/deep.top" 2>"$t/err"
	grep -Eq "^luaprof report: note: $ncut (samples have stacks|sample has its stack) cut short" "$t/err" ||
		fail "report: no note on $ncut cut stacks: $(cat "$t/err")"
	grep -q "^Stacks cut short: $ncut " "$t/deep.top" ||
		fail "top list: no line on $ncut cut stacks: $(head -3 "$t/deep.top")"
	grep -q "| $ncut with stacks cut short" "$t/deep.svg" ||
		fail "flame graph: no word on $ncut cut stacks"
else
	fail "deep.lua: no sample with a cut stack (recursion 3000 deep): the case tests nothing"
fi

# -- A CPU clock's POSIX timer at a rate above the kernel's tick (250 Hz on Debian): the
# kernel merges expirations (meta.overruns), so each sample stands for more than the
# interval asked; the flame graph and pprof give the period on average, not the one asked.
# (The perf clock, which the agent takes where it may, merges none: cpu_timer.sh.)
printf 'local x = 0 for i = 1, 3e8 do x = x + i %% 7 end\n' >"$t/busy.lua"
(cd "$t" && LUAPROF_TIMER=posix "$lp" record -q --rate 1000 -o busy.pb.gz -- luajit -joff busy.lua) >/dev/null 2>"$t/err" ||
	fail "record --rate 1000: $(cat "$t/err")"
"$lp" report -q "$t/busy.bin" -o "$t/busy.svg"
over=$("$lp" report -q -f info "$t/busy.bin" | awk -F': ' '$1 == "meta.overruns" || $1 == "meta.paced" || $1 == "meta.dropped" { n += $2 } END { print n + 0 }')
nsmp=$("$lp" report -q -f info "$t/busy.bin" | sed -n 's/^samples: //p')
if [ "${over:-0}" -gt 0 ]; then
	want=$(( 1000000 * (nsmp + over) / nsmp ))
	command -v go >/dev/null 2>&1 &&
		! go tool pprof -raw "$t/busy.pb.gz" 2>/dev/null | grep -q "^Period: $want\$" &&
		fail "pprof period with $over merged ticks over $nsmp samples: not $want ns: $(go tool pprof -raw "$t/busy.pb.gz" 2>&1 | grep Period)"
	grep -q 'on average (1.0 ms asked: some ticks took no sample of their own)' "$t/busy.svg" ||
		fail "flame graph: the period asked is shown as the period: $(grep -o 'every[^|]*' "$t/busy.svg" | head -1)"
else
	grep -q 'on average' "$t/busy.svg" && fail "flame graph: an average period with no merged tick"
fi
expect '--lines applies to -f top (rank lines, not functions), not to -f memprof' --memory --lines -- luajit app.lua
expect '--mode D keeps counters' --mode D -- luajit app.lua
expect '--mode must be L or C' --mode X -- luajit app.lua
expect '--clock must be' --clock sun -- luajit app.lua
expect "cannot tell the format" -o x.png -- luajit app.lua
expect "unknown format" -f png -- luajit app.lua
# A program that cannot be run is refused before it is started: record says so itself (the
# child's execvp did, after the output was made and removed, and on a terminal after the
# line announcing the run). Without PATH, execvp's default path is searched.
(cd "$t" && "$lp" record -q -o n.svg -- no-such-program-xyz) >/dev/null 2>"$t/err"
[ $? = 1 ] && grep -q '^luaprof record: cannot run no-such-program-xyz: no such program in PATH$' "$t/err" ||
	fail "missing program: $(cat "$t/err")"
mkdir -p "$t/pbin/no-such-program-xyz"
(cd "$t" && PATH="$t/pbin:/bin" "$lp" record -q -o n.svg -- no-such-program-xyz) >/dev/null 2>"$t/err"
[ $? = 1 ] && grep -q '^luaprof record: cannot run no-such-program-xyz: Permission denied$' "$t/err" ||
	fail "a directory in PATH named as the program: $(cat "$t/err")"
mkdir -p "$t/pbin2" && printf '#!/bin/sh\nexit 0\n' >"$t/pbin2/only-in-path" && chmod +x "$t/pbin2/only-in-path"
(cd "$t" && env -u PATH "$lp" record -q -o n.svg -- only-in-path) >/dev/null 2>"$t/err"
[ $? = 1 ] && grep -q '^luaprof record: cannot run only-in-path: no such program in PATH$' "$t/err" ||
	fail "PATH unset: $(cat "$t/err")"
(cd "$t" && "$lp" record -q -o n.svg -- "$t") >/dev/null 2>"$t/err"
[ $? = 1 ] && grep -q "^luaprof record: cannot run $t: Is a directory$" "$t/err" ||
	fail "a directory as the program: $(cat "$t/err")"
(cd "$t" && "$lp" record -q -o n.svg -- ./app.lua) >/dev/null 2>"$t/err"
[ $? = 1 ] && grep -q "^luaprof record: cannot run ./app.lua: Permission denied$" "$t/err" ||
	fail "a script that is not executable: $(cat "$t/err")"
# An empty program name (a variable unset in a script: "$LUAJIT"): said so; it was
# "cannot run : Permission denied", from the directories of PATH.
(cd "$t" && "$lp" record -q -o n.svg -- '' app.lua) >/dev/null 2>"$t/err"
[ $? = 1 ] && grep -q "^luaprof record: the program's name is empty" "$t/err" ||
	fail "an empty program name: $(cat "$t/err")"
if command -v script >/dev/null 2>&1; then
	(cd "$t" && script -qec "$lp record -o n.svg -- no-such-program-xyz" /dev/null) >"$t/tty.out" 2>&1
	[ "$(tr -d '\r' <"$t/tty.out")" = "luaprof record: cannot run no-such-program-xyz: no such program in PATH" ] ||
		fail "missing program on a terminal: $(cat "$t/tty.out")"
else
	echo "skipped the terminal checks: no script(1) (apt-get install bsdutils)"
fi
expect '--rate applies to the CPU profiler, not to --memory' --memory --rate 10 -- luajit app.lua
expect '--rate applies to the CPU profiler, not to --memory' --memory -r 10 -- luajit app.lua
# What py-spy and rbspy users type for a running process: what to do instead (their -d,
# --duration: record_duration.sh).
expect 'no -p option: luaprof cannot attach to a running process yet' -p 1234
expect 'no --pid option: .*require "luaprof"' --pid 1234
expect '--clock applies to the CPU profiler' --memory --clock wall -- luajit app.lua
expect '--sample expects a size from 1 byte to 1P (2^50 bytes)' --memory --sample 1.5M -- luajit app.lua
expect '--sample expects a size' --memory --sample 2G5 -- luajit app.lua
expect "unknown --value 'held'" --memory --value held -- luajit app.lua
expect '--value applies to the memory profiler: add --memory' --value inuse_space -- luajit app.lua
expect '--leak-only applies to the memory profiler' --leak-only -- luajit app.lua
expect '--leak-only shows what is still held' --memory --leak-only --value alloc_objects -- luajit app.lua
expect '--value applies to the graphs, pprof, top and annotate' --memory --value inuse_space -f memprof -- luajit app.lua
# The agent's refusal of LUAPROF_ALLOCSTUB, made before the program runs unprofiled.
cat >"$t/mark.lua" <<'EOF'
io.open(arg[1], "w"):close()
EOF
expect '--human-readable applies to the memprof text report' --memory --human-readable \
	-o "$t/hh.svg" -- luajit "$t/mark.lua" "$t/ran9"
[ -e "$t/ran9" ] && fail "record ran the program although --human-readable with an SVG was refused"
expect '--raw needs a file name before --' --raw -- luajit "$t/mark.lua" "$t/ran9"
LUAPROF_ALLOCSTUB=yes expect "LUAPROF_ALLOCSTUB is 'yes': 1 for the generated wrapper" \
	--memory --sample 64K -o "$t/s.svg" -- luajit "$t/mark.lua" "$t/ran0"
[ -e "$t/ran0" ] && fail "record ran the program although LUAPROF_ALLOCSTUB was refused"

# -- Destinations are checked before the program runs: it must not run for nothing.
expect "cannot write $t/nodir/x.svg: No such file or directory" \
	--memory -o "$t/nodir/x.svg" -- luajit "$t/mark.lua" "$t/ran1"
[ -e "$t/ran1" ] && fail "record ran the program although -o could not be written"
# A directory whose permission bits let root write but which takes no file (/proc): it ran
# the program, then could not write the profile.
if [ "$(id -u)" = 0 ] && [ -d /proc/self ]; then
	expect "cannot write /proc/x.svg" -o /proc/x.svg -- luajit "$t/mark.lua" "$t/ran1"
	[ -e "$t/ran1" ] && fail "record ran the program although -o /proc/x.svg could not be written"
fi
# A directory that refuses new files other than by permission (immutable: EPERM) holding a
# writable output: refused before the program runs (the check fell back to writing in
# place, which only a permission refusal allows, and the write failed after the run).
# An append-only directory takes new files but no rename or removal: refused too (the
# program ran, then the rename failed, leaving the temporary, claim and status files).
mkdir "$t/imm" && : >"$t/imm/out.svg"
for flag in i a; do
	command -v chattr >/dev/null 2>&1 && chattr +$flag "$t/imm" 2>/dev/null || continue
	expect "cannot write $t/imm/out.svg: Operation not permitted" -o "$t/imm/out.svg" -- \
		luajit "$t/mark.lua" "$t/ran1"
	chattr -$flag "$t/imm"
	[ -e "$t/ran1" ] && fail "record ran the program although -o's directory (chattr +$flag) cannot take it"
	[ "$(ls -A "$t/imm")" = out.svg ] || fail "record -o in a chattr +$flag directory left: $(ls -A "$t/imm")"
done
expect "cannot write the raw stream $t/nodir/r.bin" \
	-o "$t/r.svg" --raw "$t/nodir/r.bin" -- luajit "$t/mark.lua" "$t/ran2"
[ -e "$t/ran2" ] && fail "record ran the program although --raw could not be written"
# -o to a device: the raw stream is not put beside it (no /dev/null.bin), but in luaprof.bin.
devnull_bin=0
[ -e /dev/null.bin ] && devnull_bin=1
rm -f "$t/luaprof.bin"
(cd "$t" && "$lp" record -q --memory -f collapsed -o /dev/null -- luajit mem.lua) >/dev/null 2>"$t/err" ||
	fail "record -o /dev/null: $(cat "$t/err")"
[ $devnull_bin = 0 ] && [ -e /dev/null.bin ] && { rm -f /dev/null.bin; fail "record made /dev/null.bin"; }
[ -s "$t/luaprof.bin" ] || fail "record -o /dev/null: no raw stream luaprof.bin"
# A report that cannot be written: record says so under its own name, exit 1.
if [ -w /dev/full ]; then
	(cd "$t" && "$lp" record -q --memory -o /dev/full -- luajit mem.lua) >/dev/null 2>"$t/err"
	rc=$?
	[ $rc = 1 ] && grep -q '^luaprof record: cannot write /dev/full: No space left on device' "$t/err" ||
		fail "record -o /dev/full: exit $rc: $(cat "$t/err")"
fi
# Interpreted code calling builtins (JIT off): nearly every sample has its Lua frames. A
# builtin's entry (PC at its first instruction) and its return (its result stored over
# its function slot) used to leave 7 % of them with the host stack alone.
cat >"$t/builtins.lua" <<'EOF'
local function a(n) local s = 0 for i = 1, n do s = s + math.sin(i) * math.cos(i) end return s end
local function b(n) local s = 0 for i = 1, n do s = s + string.byte("abc", 1 + i % 3) end return s end
local t = os.clock()
while os.clock() - t < 1 do a(20000) b(10000) end
EOF
(cd "$t" && "$lp" record -q --rate 1000 --clock wall -f collapsed -o builtins.folded -- luajit -joff builtins.lua) \
	>/dev/null 2>"$t/err" || fail "record builtins.lua: $(cat "$t/err")"
read -r nolua total < <(awk '{ t += $NF; if ($0 !~ /@builtins\.lua:/) n += $NF } END { print n + 0, t + 0 }' \
	"$t/builtins.folded")
[ "$total" -ge 500 ] && [ $((nolua * 100)) -le $((total * 2)) ] ||
	fail "interpreted builtin calls: $nolua of $total samples without a Lua frame (want at most 2 %)"
# --clock cpu on a program that sleeps: the summary says why the samples are few.
cat >"$t/sleepy.lua" <<'EOF'
local t = os.clock() while os.clock() - t < 0.3 do end
os.execute("sleep 1")
EOF
(cd "$t" && "$lp" record -n 0 -o sl.folded -- luajit sleepy.lua) >/dev/null 2>"$t/err" ||
	fail "record sleepy.lua: $(cat "$t/err")"
grep -Eq '^luaprof record: --clock cpu samples only while the program runs on the CPU: (about )?0\.[2-4][0-9] s of the 1\.[2-9][0-9] s' \
	"$t/err" || fail "no note on time off the CPU: $(cat "$t/err")"
(cd "$t" && "$lp" record -n 0 -o busy.folded -- luajit app.lua 0.5) >/dev/null 2>"$t/err"
grep -q 'samples only while the program runs on the CPU' "$t/err" &&
	fail "a note on time off the CPU for a busy program: $(cat "$t/err")"
# A CPU-bound program kept from the CPU by another (both on one CPU): it waited for a CPU,
# which --clock wall would not help; it was told it "slept or waited".
if have taskset; then
	taskset -c 0 luajit -e 'local t = os.clock() while os.clock() - t < 8 do end' &
	spin=$!
	(cd "$t" && taskset -c 0 "$lp" record -n 0 -o starved.folded -- luajit app.lua 0.4) \
		>/dev/null 2>"$t/err" || fail "record app.lua beside a spinner: $(cat "$t/err")"
	# One that sleeps too keeps the note on time off the CPU, the wait for a CPU set apart.
	(cd "$t" && taskset -c 0 "$lp" record -n 0 -o starved-sl.folded -- luajit sleepy.lua) \
		>/dev/null 2>"$t/err-sl" || fail "record sleepy.lua beside a spinner: $(cat "$t/err-sl")"
	kill "$spin" 2>/dev/null
	wait "$spin" 2>/dev/null
	grep -Eq '^luaprof record: --clock cpu samples only while the program runs on the CPU: 0\.[2-4][0-9] s of the [0-9.]+ s \(the rest it slept or waited, but for [0-9.]+ s waiting for a CPU that other processes held; --clock wall samples that too, but its ticks end sleeps early: see --help\)' \
		"$t/err-sl" || fail "a program that sleeps and waits for a CPU: $(cat "$t/err-sl")"
	grep -Eq '^luaprof record: the program ran 0\.[3-5][0-9] s of the [0-9.]+ s on the CPU: it waited [0-9.]+ s for one while other processes ran \(a busy machine\)' \
		"$t/err" && ! grep -q 'slept or waited' "$t/err" ||
		fail "a program waiting for a CPU: $(cat "$t/err")"
	"$lp" report -f info "$t/starved.bin" 2>/dev/null | grep -Eq '^meta\.run_delay_ns: [1-9]' ||
		fail "no meta.run_delay_ns: $("$lp" report -f info "$t/starved.bin" 2>&1 | grep meta)"
fi
# A device or FIFO as -o needs no -f: it gets what standard output would (the top list).
(cd "$t" && "$lp" record -q -o /dev/null -- luajit app.lua 0.1) >/dev/null 2>"$t/err" ||
	fail "record -o /dev/null without -f: $(cat "$t/err")"
# The rendered profile must not overwrite the raw stream.
expect "the rendered profile and the raw stream would both be $t/same.bin" \
	-o "$t/same.bin" -f collapsed -- luajit "$t/mark.lua" "$t/ran3"
expect "the rendered profile and the raw stream would both be .*same.svg" \
	-o "$t/same.svg" --raw "$t/./same.svg" -- luajit "$t/mark.lua" "$t/ran3"
[ -e "$t/ran3" ] && fail "record ran the program although -o and --raw were the same file"
# --sample takes G too.
(cd "$t" && "$lp" record -q --memory --sample 1G -o g.folded -- luajit mem.lua) >/dev/null 2>"$t/err" ||
	fail "record --sample 1G: $(cat "$t/err")"
"$lp" report -f info "$t/g.bin" 2>/dev/null | grep -q '^meta.sample_bytes: 1073741824$' ||
	fail "record --sample 1G: not 2^30 bytes"

# -- The raw stream replaces only an earlier profile, and only once the program has left
# one: a device or FIFO (it used to unlink /dev/null as root and put a file there), a file
# of the user's (the script itself), are refused before the program runs; a symbolic link
# is written through; a run that records nothing leaves the previous profile and report.
mkfifo "$t/fifo"
expect "$t/fifo is not a regular file" --memory --raw "$t/fifo" -o "$t/f.txt" -- \
	luajit "$t/mark.lua" "$t/ran4"
[ -p "$t/fifo" ] || fail "record --raw FIFO: the FIFO was replaced"
cp "$t/mark.lua" "$t/keep.lua"
expect "$t/keep.lua exists and is not a profile" --memory --raw "$t/keep.lua" -o "$t/k.txt" -- \
	luajit "$t/mark.lua" "$t/ran4"
cmp -s "$t/mark.lua" "$t/keep.lua" || fail "record --raw SCRIPT: the script was changed"
[ -e "$t/ran4" ] && fail "record ran the program although --raw was refused"
# Nor does the rendering replace the script (or any file the program is given) named as -o
# by mistake, a spelling of it with a directory too.
expect "-o $t/keep.lua is $t/keep.lua, which the program is given" -f top -o "$t/keep.lua" -- \
	luajit "$t/keep.lua" "$t/ran4"
(cd "$t" && "$lp" record --memory -f top -o ./keep.lua -- luajit "$t/keep.lua" "$t/ran4") \
	>/dev/null 2>"$t/err" && fail "record -o ./SCRIPT: exit 0"
grep -q -- "-o ./keep.lua is $t/keep.lua, which the program is given" "$t/err" ||
	fail "record -o ./SCRIPT: $(cat "$t/err")"
cmp -s "$t/mark.lua" "$t/keep.lua" || fail "record -o SCRIPT: the script was changed"
[ -e "$t/ran4" ] && fail "record ran the program although -o was refused"
# A text file whose first word starts with the symbol table's magic is no profile either.
printf 'ljs notes\n' >"$t/notes.txt"
expect "$t/notes.txt exists and is not a profile" --memory --raw "$t/notes.txt" -o "$t/n.txt" -- \
	luajit "$t/mark.lua" "$t/ran4"
grep -q '^ljs notes$' "$t/notes.txt" || fail "record --raw TEXT: the text file was changed"
ln -s target.bin "$t/link.bin"
(cd "$t" && "$lp" record -q --memory --raw link.bin -o l.txt -- luajit mem.lua) >/dev/null 2>"$t/err" ||
	fail "record --raw LINK: $(cat "$t/err")"
[ -L "$t/link.bin" ] && [ -s "$t/target.bin" ] || fail "record --raw LINK: not written through the link"
cp "$t/target.bin" "$t/before.bin"
cp "$t/l.txt" "$t/before.txt"
expect "true wrote no profile" --memory --raw "$t/link.bin" -o "$t/l.txt" -- true
cmp -s "$t/target.bin" "$t/before.bin" && cmp -s "$t/l.txt" "$t/before.txt" ||
	fail "a run that recorded nothing changed the previous profile or its report"
ls "$t" | grep -q 'target\.bin\.' && fail "a temporary raw file was left: $(ls "$t")"
# A CPU profile of a run too short for one sample says so, and what to do.
"$lp" record -f collapsed -o "$t/short.folded" -- luajit -e 'local x = 1' >/dev/null 2>"$t/err" ||
	fail "record of a short run: $(cat "$t/err")"
grep -q 'no sample: the program ran [0-9.]* s on the CPU, less than a sampling interval (0.010 s at --rate 100) - raise --rate or use --clock wall' "$t/err" ||
	fail "record of a short run: no hint: $(cat "$t/err")"
# A program that fails at once (a misspelt script name, no earlier profile): said to have
# failed before the first sample, not advised to raise --rate or profile a longer run; no
# file left (record_failed_start.sh checks each mode).
(cd "$t" && "$lp" record -f collapsed -o miss.folded -- luajit no-such-script.lua) >/dev/null 2>"$t/err"
[ $? = 1 ] && grep -q '^luaprof record: luajit recorded nothing (no CPU sample: it exited with status 1 before the first one): no file is written$' "$t/err" &&
	! grep -q 'raise --rate' "$t/err" && [ ! -e "$t/miss.folded" ] && [ ! -e "$t/miss.bin" ] ||
	fail "record of a misspelt script: $(cat "$t/err")"
# A program that executes another program (through the FFI) or leaves through _exit
# skips the profile's end: said so, not "killed" nor "did not start".
cat >"$t/exec.lua" <<'EOF'
local ffi = require "ffi"
ffi.cdef [[int execvp(const char *file, char *const argv[]); void _exit(int);]]
local t, s = {}, 0
local t0 = os.clock() while os.clock() - t0 < 0.6 do s = s + 1 t[s % 100 + 1] = { s } end
io.stdout:flush()
if arg[1] == "exit" then ffi.C._exit(0) end
local argv = ffi.new("char *[2]") -- zero-filled: argv[1] is the NULL that ends it
argv[0] = ffi.cast("char *", "true")
ffi.C.execvp("true", argv)
os.exit(9)
EOF
unfinished='the program ended without finishing its profile: it executed another program, or left through _exit, which skip the profiler.s end; '
for how in exec exit; do
	"$lp" record -q -f collapsed -o "$t/ex$how.folded" -- luajit "$t/exec.lua" $how >/dev/null 2>"$t/err"
	rc=$?
	[ $rc = 3 ] || fail "record of a program that calls $how: exit $rc, want 3 (truncated): $(cat "$t/err")"
	grep -q "the file is truncated.*; ${unfinished}what the profiler had not yet written (up to a quarter second) is lost\$" "$t/err" ||
		fail "record of a program that calls $how: $(cat "$t/err")"
	"$lp" record -q --memory --sample 4K -f collapsed -o "$t/exs.folded" -- luajit "$t/exec.lua" $how >/dev/null 2>"$t/err"
	grep -q "^luaprof record: luajit wrote no profile: ${unfinished}sampled mode writes its stacks at the end: there are none\$" "$t/err" ||
		fail "record --sample of a program that calls $how: $(cat "$t/err")"
done
# Over an earlier profile, a run whose samples were all in its lost last quarter second.
sed 's/0\.6 do/0.05 do/' "$t/exec.lua" >"$t/exec2.lua"
"$lp" record -q -f collapsed -o "$t/exexit.folded" -- luajit "$t/exec2.lua" exit \
	>/dev/null 2>"$t/err" && fail "record of a short program that calls _exit, over an earlier profile: exit 0"
grep -q "^luaprof record: luajit recorded nothing before its stream ended: ${unfinished}what the profiler had not yet written (up to a quarter second) is lost; the earlier profile $t/exexit.bin is kept\$" "$t/err" ||
	fail "record of a short program that calls _exit, over an earlier profile: $(cat "$t/err")"
# A program that stops the profile itself before the first sample is told so, not to
# raise the rate; with an earlier profile at the raw path, that one is kept, and said why.
printf 'require("luaprof").%s.stop()\nlocal s, t = 0, os.clock() while os.clock() - t < 0.2 do s = s + 1 end local k = {} for i = 1, 1e5 do k[i] = {} end\n' sysprof >"$t/stop0.lua"
printf 'require("luaprof").%s.stop()\nlocal s, t = 0, os.clock() while os.clock() - t < 0.2 do s = s + 1 end local k = {} for i = 1, 1e5 do k[i] = {} end\n' memprof >"$t/mstop0.lua"
"$lp" record -f collapsed -o "$t/stop0.folded" -- luajit "$t/stop0.lua" >/dev/null 2>"$t/err" ||
	fail "record of a program stopping at once: $(cat "$t/err")"
grep -q '^luaprof record: no sample: the program stopped the profile itself (sysprof.stop) after 0.0[0-9]* s, before the first sample$' "$t/err" ||
	fail "record of a program stopping at once: $(cat "$t/err")"
grep -q 'raise --rate' "$t/err" && fail "record of a program stopping at once: advice on the rate: $(cat "$t/err")"
"$lp" record -f collapsed -o "$t/stop0.folded" -- luajit "$t/stop0.lua" >/dev/null 2>"$t/err" &&
	fail "record of a program stopping at once, over an earlier profile: exit 0"
grep -q "^luaprof record: luajit recorded nothing: it stopped the profile itself (sysprof.stop) before the first sample: the earlier profile $t/stop0.bin is kept$" "$t/err" ||
	fail "record of a program stopping at once, over an earlier profile: $(cat "$t/err")"
"$lp" record --memory --sample 1G -f collapsed -o "$t/mstop0.folded" -- luajit "$t/mstop0.lua" >/dev/null 2>&1
"$lp" record --memory --sample 1G -f collapsed -o "$t/mstop0.folded" -- luajit "$t/mstop0.lua" >/dev/null 2>"$t/err" &&
	fail "record --sample of a program stopping at once, over an earlier profile: exit 0"
grep -q "^luaprof record: luajit recorded nothing: it stopped the profile itself (memprof.stop) before the first sampled allocation: the earlier profile $t/mstop0.bin is kept$" "$t/err" ||
	fail "record --sample of a program stopping at once, over an earlier profile: $(cat "$t/err")"
# Exact mode: a program that succeeded made a profile even if its Lua code allocated
# nothing itself (print, a C module's luaopen): it replaces the earlier one.
"$lp" record -q --memory -f memprof --raw "$t/pr.bin" -o "$t/pr.txt" -- luajit "$t/mem.lua" \
	>/dev/null 2>"$t/err" || fail "record --memory mem.lua: $(cat "$t/err")"
cp "$t/pr.bin" "$t/before.bin"
"$lp" record -q --memory -f memprof --raw "$t/pr.bin" -o "$t/pr.txt" -- luajit -e 'print("x")' \
	>/dev/null 2>"$t/err" || fail "record --memory of print: $(cat "$t/err")"
cmp -s "$t/pr.bin" "$t/before.bin" && fail "record --memory of a program that succeeded kept the earlier profile"
# The same for a program whose agent ran but that ran no Lua code (a misspelt script
# name): its stream has no CPU sample, no allocation by Lua code, no sampled allocation
# (they replaced the earlier profile and report with an empty one).
for mode in cpu exact sampled; do
	case $mode in
	cpu) opts="-f collapsed"; what="no CPU sample" ;;
	exact) opts="--memory -f memprof"; what="no allocation by Lua code" ;;
	sampled) opts="--memory --sample 1K -f collapsed"; what="no sampled allocation" ;;
	esac
	"$lp" record -q $opts --raw "$t/n$mode.bin" -o "$t/n$mode.out" -- luajit "$t/mem.lua" \
		>/dev/null 2>"$t/err" || fail "record $opts mem.lua: $(cat "$t/err")"
	cp "$t/n$mode.bin" "$t/before.bin"
	cp "$t/n$mode.out" "$t/before.txt"
	expect "luajit recorded nothing ($what.*the earlier profile $t/n$mode.bin is kept" \
		$opts --raw "$t/n$mode.bin" -o "$t/n$mode.out" -- luajit "$t/no-such-script.lua"
	cmp -s "$t/n$mode.bin" "$t/before.bin" && cmp -s "$t/n$mode.out" "$t/before.txt" ||
		fail "record $opts of a script that does not exist replaced the earlier profile"
	ls "$t" | grep -q "n$mode\.bin\." && fail "a temporary raw file was left: $(ls "$t")"
done
# An earlier profile replaced keeps its permissions; a raw path that is a link to nothing
# yet, naming -o, is refused like the same path.
chmod 600 "$t/target.bin"
(cd "$t" && "$lp" record -q --memory --raw link.bin -o l.txt -- luajit mem.lua) >/dev/null 2>"$t/err" ||
	fail "record --raw LINK again: $(cat "$t/err")"
[ "$(stat -c %a "$t/target.bin")" = 600 ] || fail "the replaced profile's mode is $(stat -c %a "$t/target.bin"), was 600"
ln -s dl.svg "$t/dl.bin"
expect "would both be $t/dl.svg" --memory -o "$t/dl.svg" --raw "$t/dl.bin" -- luajit "$t/mark.lua" "$t/ran5"
# record itself terminated (timeout, a closed terminal): the program gets the signal and
# record keeps what it recorded, where it is looked for (it used to stay in a temporary file).
cat >"$t/long.lua" <<'EOF'
local keep, t = {}, os.clock()
while os.clock() - t < 20 do keep[#keep % 1000 + 1] = { 1 } end
EOF
(cd "$t" && timeout 1 "$lp" record -q --memory -o long.txt -- luajit long.lua) >/dev/null 2>"$t/err"
[ -s "$t/long.bin" ] && ! ls "$t" | grep -q '^long\.bin\.' ||
	fail "record terminated: no long.bin, or a temporary file left: $(ls "$t" | grep long)"
grep -q 'killed by signal 15' "$t/err" || fail "record terminated: $(cat "$t/err")"
# An inherited SIGCHLD of SIG_IGN (a parent that ignores its children) must not lose the
# program's status (waitpid found no child, and the status was read uninitialised).
(cd "$t" && perl -e '$SIG{CHLD} = "IGNORE"; exec @ARGV' "$lp" record -q --memory -o ig.txt -- \
	luajit mem.lua 3) >/dev/null 2>"$t/err"
rc=$?
[ $rc = 3 ] || fail "record with SIGCHLD ignored: exit $rc, want 3: $(cat "$t/err")"
# A directory that cannot take a temporary file beside the earlier profile (another user's,
# as an unprivileged user): the profile is written in place, and only by a run that records:
# one that records nothing leaves it whole (it used to be emptied before the program ran).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
	nb=$t/nobody
	mkdir -p "$nb/ro" "$nb/out"
	cp build/luaprof build/luaprof.so "$t/mem.lua" "$nb/"
	cp "$t/target.bin" "$nb/ro/p.bin"
	cp "$nb/ro/p.bin" "$nb/before.bin"
	chmod 755 "$t" "$nb" "$nb/ro"
	chown nobody "$nb/ro/p.bin" "$nb/out"
	memsite="^(@mem.lua:2|TRACE \[[0-9]+\] started at @mem.lua:2): [0-9]+ events"
	as_nobody() { (cd "$nb" && setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"); }
	as_nobody ./luaprof record -q --memory --raw ro/p.bin -o out/a.txt -- true >/dev/null 2>"$t/err"
	[ $? = 1 ] && grep -q 'true wrote no profile' "$t/err" || fail "as nobody, nothing recorded: $(cat "$t/err")"
	cmp -s "$nb/ro/p.bin" "$nb/before.bin" ||
		fail "as nobody: a run that recorded nothing changed the profile written in place"
	as_nobody ./luaprof record -q --memory --raw ro/p.bin -o out/b.txt -- luajit mem.lua \
		>/dev/null 2>"$t/err" || fail "as nobody, in place: $(cat "$t/err")"
	! cmp -s "$nb/ro/p.bin" "$nb/before.bin" && grep -Eq "$memsite" "$nb/out/b.txt" &&
		build/luaprof report -q "$nb/ro/p.bin" 2>&1 | grep -Eq "$memsite" ||
		fail "as nobody: the profile written in place is not the new run's: $(head -3 "$nb/out/b.txt")"
	[ "$(ls "$nb/ro")" = p.bin ] || fail "as nobody: files left beside the profile: $(ls "$nb/ro")"
	# Another user's writable profile and report in a sticky directory (a shared /tmp):
	# nothing can be renamed over them, so both are written in place (the run's profile was
	# dropped after the program ran: "cannot write the raw stream: Operation not permitted").
	mkdir -p "$nb/st"
	chmod 1777 "$nb/st"
	cp "$t/target.bin" "$nb/st/s.bin"
	echo old >"$nb/st/s.txt"
	chmod 666 "$nb/st/s.bin" "$nb/st/s.txt"
	as_nobody ./luaprof record -q --memory -o st/s.txt -- luajit mem.lua >/dev/null 2>"$t/err" ||
		fail "as nobody, another user's files in a sticky directory: $(cat "$t/err")"
	grep -Eq "$memsite" "$nb/st/s.txt" && build/luaprof report -q "$nb/st/s.bin" 2>&1 | grep -Eq "$memsite" ||
		fail "as nobody, sticky directory: not the new run's: $(head -3 "$nb/st/s.txt")"
	[ "$(stat -c %U "$nb/st/s.bin" "$nb/st/s.txt" | sort -u)" = root ] &&
		[ "$(ls -A "$nb/st" | tr '\n' ' ')" = "s.bin s.txt " ] ||
		fail "as nobody, sticky directory: files replaced or left: $(ls -lA "$nb/st")"
	as_nobody ./luaprof report -q st/s.bin -f memprof -o st/s.txt 2>"$t/err" &&
		grep -Eq "$memsite" "$nb/st/s.txt" || fail "as nobody, report into a sticky directory: $(cat "$t/err")"
else
	echo "note: the in-place replacement check needs root (to run as nobody) and setpriv"
fi
# The raw stream's default name drops only the format's extension: run.v1.svg and
# run.v2.svg keep two streams (both were run.bin), .hidden.svg gives .hidden.bin.
(cd "$t" && for o in run.v1.svg run.v2.svg .hidden.svg; do
	"$lp" record -q -o $o -- luajit app.lua 0.05 >/dev/null 2>&1 || echo "record -o $o failed"
done) >"$t/err"
[ -s "$t/run.v1.bin" ] && [ -s "$t/run.v2.bin" ] && [ -s "$t/.hidden.bin" ] && [ ! -s "$t/err" ] ||
	fail "raw names for run.v1.svg, run.v2.svg, .hidden.svg: $(cat "$t/err") $(ls -a "$t" | grep -E 'run|hidden' | tr '\n' ' ')"
# A symbolic link to standard output is written through, not replaced (as root, -o
# /dev/stdout used to replace /dev/stdout with a regular file and write /dev/stdout.bin).
ln -s /proc/self/fd/1 "$t/so"
(cd "$t" && "$lp" record -q -f collapsed -o so -- luajit app.lua 0.2) >"$t/so.folded" 2>"$t/err" ||
	fail "record -o LINK-TO-STDOUT: $(cat "$t/err")"
[ -L "$t/so" ] && grep -q '@app.lua:1' "$t/so.folded" && [ -s "$t/luaprof.bin" ] && [ ! -e "$t/so.bin" ] ||
	fail "record -o LINK-TO-STDOUT: $(ls -l "$t/so"), $(head -c 200 "$t/so.folded")"
# ... and the program's own output goes to standard error, as with -o - (it was written
# into the profile).
grep -q '^result' "$t/so.folded" && fail "record -o LINK-TO-STDOUT: the program's output is in the profile"
grep -q '^result' "$t/err" || fail "record -o LINK-TO-STDOUT: the program's output is not on standard error"
# A dangling -o link that names the raw stream is the same file (the raw stream was then
# overwritten by the rendering).
ln -s dlraw.bin "$t/dl.svg"
expect "the rendered profile and the raw stream would both be $t/dlraw.bin" \
	-o "$t/dl.svg" --raw "$t/dlraw.bin" -- luajit app.lua 0.01
if command -v script >/dev/null 2>&1; then
	(cd "$t" && script -qec "$lp record -q -f pprof -o - -- luajit mark.lua ran6" /dev/null) >"$t/tty.out" 2>&1
	grep -q "pprof output is binary; give a file with -o" "$t/tty.out" && [ ! -e "$t/ran6" ] ||
		fail "record -f pprof to a terminal: $(head -c 200 "$t/tty.out" | od -c | head -2)"
fi
# On a terminal, one line before the program starts says what is recorded (nothing while
# it runs: the terminal is the program's); not with -q, nor when standard error is no
# terminal, as everywhere above. A stream past 256 MiB in exact mode is followed by the
# hint to sample. The program allocates for 0.7 s, then sleeps.
if command -v script >/dev/null 2>&1; then
	cat >"$t/long.lua" <<'EOF'
local t0, keep = os.clock(), {}
while os.clock() - t0 < 0.7 do for i = 1, 1000 do keep[i % 64 + 1] = { i } end end
print("program output")
os.execute("sleep 1")
EOF
	(cd "$t" && script -qec "$lp record --memory -n 0 -o /dev/null --raw long.bin -- luajit long.lua" /dev/null) \
		>"$t/tty.out" 2>&1
	size=$(stat -c %s "$t/long.bin" 2>/dev/null || echo 0)
	first=$(head -1 "$t/tty.out" | tr -d '\r')
	[ "$first" = "luaprof record: recording every allocation, reallocation and free of luajit long.lua (exact mode); the report follows when it exits" ] &&
		[ "$(sed -n 2p "$t/tty.out" | tr -d '\r')" = "program output" ] ||
		fail "record on a terminal: no line before the program's output: $(head -3 "$t/tty.out")"
	if [ "$size" -ge $((256 << 20)) ]; then
		grep -aq 'for long runs, --sample 512K records the stacks' "$t/tty.out" ||
			fail "record: a $size-byte exact stream without the hint to sample"
	else
		echo "note: the 0.7 s loop wrote only $size bytes: the hint to sample not checked"
	fi
	# Reading a large stream back to render it takes seconds: on a terminal the reading's
	# progress shows (record's rendering was silent), not elsewhere.
	if [ "$size" -ge $((64 << 20)) ]; then
		grep -aq 'luaprof record: reading .*long.bin: *[0-9]*% (' "$t/tty.out" ||
			fail "record: a $size-byte stream read back without progress on a terminal: $(cat -v "$t/tty.out" | head -5)"
		(cd "$t" && "$lp" record --memory -n 0 -o /dev/null --raw long.bin -- luajit long.lua) \
			>/dev/null 2>"$t/err"
		grep -aq 'reading' "$t/err" && fail "record: progress on no terminal: $(cat -v "$t/err" | head -3)"
	else
		echo "note: the 0.7 s loop wrote only $size bytes: the progress of reading it not checked"
	fi
	# The same for a CPU profile (rendered in silence): a 66 MiB stream of bench's
	# generator, which a stand-in program writes where record asks for the profile.
	if make -s build/bench/gen_stream >"$t/make.out" 2>&1 &&
		build/bench/gen_stream sysprof -n 340000 -o "$t/gen.bin" >/dev/null 2>&1; then
		printf '#!/bin/sh\ncat "$1" >"${LUAPROF_RECORD#*,path=}"\n' >"$t/writes.sh"
		chmod +x "$t/writes.sh"
		(cd "$t" && script -qec "$lp record -n 0 -o /dev/null --raw cpu.bin -- ./writes.sh gen.bin" /dev/null) \
			>"$t/tty.out" 2>&1
		grep -aq 'luaprof record: reading .*cpu.bin: *[0-9]*% (' "$t/tty.out" ||
			fail "record: a CPU stream of $(stat -c %s "$t/gen.bin") bytes read back without progress on a terminal: $(cat -v "$t/tty.out" | head -5)"
		grep -aq 'luaprof record: 0.[0-9]* s profiled, 340000 samples' "$t/tty.out" ||
			fail "record: the generated CPU stream: $(cat -v "$t/tty.out" | head -5)"
		(cd "$t" && "$lp" record -n 0 -o /dev/null --raw cpu.bin -- ./writes.sh gen.bin) \
			>/dev/null 2>"$t/err"
		grep -aq 'reading' "$t/err" && fail "record: CPU progress on no terminal: $(cat -v "$t/err" | head -3)"
		rm -f "$t/gen.bin" "$t/cpu.bin"
	else
		echo "note: no bench/gen_stream ($(tail -1 "$t/make.out")): the progress of reading a CPU stream not checked"
	fi
	rm -f "$t/long.bin"
	(cd "$t" && script -qec "$lp record -n 0 --memory --sample 1M -o /dev/null --raw long.bin -- luajit long.lua" /dev/null) \
		>"$t/tty.out" 2>&1
	grep -aq '^luaprof record: sampling the allocations of luajit long.lua, one per 1 MiB on average' "$t/tty.out" ||
		fail "record --sample on a terminal: $(head -2 "$t/tty.out")"
	(cd "$t" && script -qec "$lp record -q --memory -o /dev/null --raw long.bin -- luajit long.lua" /dev/null) \
		>"$t/tty.out" 2>&1
	grep -aq 'luaprof record' "$t/tty.out" && fail "record -q on a terminal: $(head -3 "$t/tty.out")"
	rm -f "$t/long.bin"
fi
# -f without -o: a file named for the format (it used to be luaprof.svg whatever the format).
(cd "$t" && rm -f luaprof.pb.gz && "$lp" record -q --memory -f pprof -- luajit mem.lua) >/dev/null 2>"$t/err" ||
	fail "record -f pprof: $(cat "$t/err")"
[ "$(head -c2 "$t/luaprof.pb.gz" | od -An -tx1 | tr -d ' ')" = 1f8b ] ||
	fail "record -f pprof without -o: no gzip luaprof.pb.gz"

# -- A program that blocks the profiler's signal, or changes its disposition: the summary
# says so (it said the program slept or waited), the stream has the thread's CPU time,
# and a disposition changed stops the sampling (its ticks went to the program's handler,
# and stop put the old handler back over the program's). The signal set back to SIG_DFL
# must not kill the program with a tick the kernel parked while it was ignored.
# The program blocks every signal, or ignores the profiler's (SIGURG for the perf clock,
# a real-time signal for the POSIX timer: each clock in turn).
cat >"$t/sig.lua" <<'EOF'
local ffi = require "ffi"
ffi.cdef [[ typedef struct { unsigned long v[16]; } sigset_t;
int sigfillset(sigset_t *s); int pthread_sigmask(int how, const sigset_t *s, sigset_t *o);
typedef void (*sighandler_t)(int); sighandler_t signal(int signum, sighandler_t handler);
int __libc_current_sigrtmin(void); ]]
local SIGURG = 23
local function burn(s) local t = os.clock() local x = 0 while os.clock() - t < s do x = x + 1 end end
burn(0.3)
if arg[1] == "block" then
  local s = ffi.new("sigset_t") ffi.C.sigfillset(s) ffi.C.pthread_sigmask(2, s, nil)
else
  local rt = ffi.C.__libc_current_sigrtmin()
  for i = rt, rt + 30 do ffi.C.signal(i, ffi.cast("sighandler_t", 1)) end
  ffi.C.signal(SIGURG, ffi.cast("sighandler_t", 1))
end
burn(1)
if arg[1] == "ign" then
  local rt = ffi.C.__libc_current_sigrtmin()
  io.write("after: ", tonumber(ffi.cast("intptr_t", ffi.C.signal(rt + 4, nil))), " ",
    tonumber(ffi.cast("intptr_t", ffi.C.signal(SIGURG, nil))), "\n")
end
EOF
for timer in auto posix; do
	(cd "$t" && LUAPROF_TIMER=$timer "$lp" record -o sigb.svg -- luajit sig.lua block) >/dev/null 2>"$t/err" ||
		fail "record sig.lua block ($timer): $(cat "$t/err")"
	grep -Eq 'on the CPU sampled as 0\.[0-9]+ s: the program blocked or ignored the profiler.s signal (SIGRTMIN\+[0-9]+|SIGURG) for part of it' "$t/err" &&
		! grep -q 'slept or waited' "$t/err" &&
		"$lp" report -f info "$t/sigb.bin" 2>/dev/null | grep -Eq '^meta.thread_cpu_ns: 1[0-9]{9}$' ||
		fail "record of a program blocking the signal ($timer): $(cat "$t/err")"
	(cd "$t" && LUAPROF_TIMER=$timer "$lp" record -o sigi.svg -- luajit sig.lua ign) >"$t/out" 2>"$t/err" ||
		fail "record sig.lua ign ($timer): $(cat "$t/err")"
	grep -Eq 'the program changed what the profiler.s signal \((SIGRTMIN\+[0-9]+|SIGURG)\) does .* after 0\.[0-9]+ s: sampling stopped there' "$t/err" &&
		grep -qx 'after: 1 1' "$t/out" ||
		fail "record of a program ignoring the signal ($timer): $(cat "$t/err") $(cat "$t/out")"
done

# A low rate: whole ticks, the first an interval in, are not a blocked signal (at --rate 1
# a 1.6 s run, at --rate 10 a 0.29 s one, were said to have blocked it).
for rs in 1:1.6 10:0.29; do
	r=${rs%%:*}
	(cd "$t" && "$lp" record --rate $r -n 0 -o lowrate.svg -- luajit app.lua ${rs#*:}) >/dev/null 2>"$t/err" ||
		fail "record --rate $r: $(cat "$t/err")"
	grep -q 'blocked or ignored' "$t/err" && fail "record --rate $r: $(cat "$t/err")"
done

# -n with the memprof report did nothing (no summary list, the report lists every site).
(cd "$t" && "$lp" record --memory -n 3 -o mn.txt -- luajit app.lua 0.01) >"$t/out" 2>"$t/err"
[ $? = 1 ] && grep -q -- '-n applies to -f top (its length) and to the summary' "$t/err" &&
	! grep -q result "$t/out" || fail "record --memory -n 3: $(cat "$t/err")"
# Both profilers into one pipe: the second is refused (the streams interleaved).
cat >"$t/both.lua" <<'EOF'
local lp = require "luaprof"
lp.sysprof.stop() -- record's own profile
local a = lp.sysprof.start{mode = "C", path = arg[1]}
local b, msg = lp.memprof.start(arg[1])
io.stderr:write("both: ", tostring(a), " ", tostring(b), " ", tostring(msg), "\n")
if a then lp.sysprof.stop() end
if b then lp.memprof.stop() end
EOF
(cd "$t" && "$lp" record -q -o both.svg -- luajit both.lua /dev/stdout | cat >/dev/null) 2>"$t/err"
grep -q 'both: true nil /dev/stdout: a running profile writes to this file' "$t/err" ||
	fail "two profiles into one pipe: $(grep both: "$t/err")"

(cd "$t" && "$lp" record --raw - -o rd.svg -- luajit app.lua 0.01) >/dev/null 2>"$t/err"
[ $? = 1 ] && grep -q -- "--raw needs a file name" "$t/err" && [ ! -e "$t/-" ] ||
	fail "record --raw -: $(cat "$t/err"), $(ls "$t" | grep -c '^-$') file(s) named -"

# A program that removes its own raw stream: record says so (it blamed the agent).
cat >"$t/rm.lua" <<'EOF'
local t = os.clock() while os.clock() - t < 0.1 do end
os.remove(arg[1])
EOF
(cd "$t" && "$lp" record -o rm.svg -- luajit rm.lua rm.bin) >/dev/null 2>"$t/err"
rc=$?
[ $rc = 1 ] && grep -q "luajit wrote no profile that is left: the raw stream .*rm.bin was removed while it ran" "$t/err" ||
	fail "record of a program removing its raw stream: exit $rc: $(cat "$t/err")"

# -- Sampled mode writes its stacks at the end: a program killed before that leaves no
# profile, and record says so (not that the agent was not loaded) with the program's status.
cat >"$t/skill.lua" <<'EOF'
local keep = {}
for i = 1, 20000 do keep[i % 100] = { i } end
os.execute("kill -9 " .. io.open("/proc/self/stat"):read("*n"))
EOF
(cd "$t" && "$lp" record --memory --sample 4K -o sk.txt -- luajit skill.lua) >/dev/null 2>"$t/err"
rc=$?
[ $rc = 1 ] || fail "sampled, killed: exit $rc, want 1: $(cat "$t/err")"
grep -q 'luajit was killed by signal 9' "$t/err" &&
	grep -q 'it was killed before the profiler wrote anything (sampled mode writes its stacks when the program ends)' "$t/err" ||
	fail "sampled, killed: message $(cat "$t/err")"
grep -q 'agent was not loaded' "$t/err" && fail "sampled, killed: blamed the agent: $(cat "$t/err")"
# With an earlier profile at the raw path: it is kept, and said so.
(cd "$t" && "$lp" record -q --memory --sample 4K -o sk2.txt -- luajit mem.lua) >/dev/null 2>&1 ||
	fail "record --memory --sample 4K mem.lua"
(cd "$t" && "$lp" record --memory --sample 4K -o sk2.txt -- luajit skill.lua) >/dev/null 2>"$t/err"
grep -q 'sampled mode writes its stacks when the program ends); the earlier profile is kept$' "$t/err" ||
	fail "sampled, killed, an earlier profile: not said kept: $(cat "$t/err")"

# CPU, killed over an earlier profile before its first samples were written (the writer
# drains them every quarter second): kept, and said why, record's status the program's
# (137); no "message above" to point at.
cat >"$t/ckill.lua" <<'EOF'
local s, t = 0, os.clock() while os.clock() - t < 0.1 do s = s + 1 end
os.execute("kill -9 " .. io.open("/proc/self/stat"):read("*n"))
EOF
(cd "$t" && "$lp" record -q -f collapsed -o ck.folded -- luajit app.lua 0.3) >/dev/null 2>&1 ||
	fail "record app.lua into ck.folded"
(cd "$t" && "$lp" record -f collapsed -o ck.folded -- luajit ckill.lua) >/dev/null 2>"$t/err"
rc=$?
[ $rc = 137 ] && grep -q 'luajit was killed by signal 9' "$t/err" &&
	grep -q "^luaprof record: luajit recorded nothing before its stream ended: it was killed before the profiler wrote what it recorded (up to a quarter second of it is lost): the earlier profile ck.bin is kept\$" "$t/err" ||
	fail "CPU, killed, an earlier profile: exit $rc: $(cat "$t/err")"
grep -q 'message above' "$t/err" && fail "CPU, killed: points at a message that is not there: $(cat "$t/err")"

# -- Two records into one new file: the second is refused before its program runs (it ran
# unprofiled, and was told the agent was not loaded). (Into an earlier profile each writes
# a file of its own beside it, renamed over it at its end.)
cat >"$t/long.lua" <<'EOF'
local t = os.clock() while os.clock() - t < 3 do local x = {} end
EOF
(cd "$t" && "$lp" record -q --memory -o twice.txt -- luajit long.lua) >/dev/null 2>"$t/err1" &
first=$!
# Until its agent holds the file: its lock in /proc/locks (a probe taking a lock of its own
# could make that agent's non-blocking one fail).
held() { [ -e "$t/twice.bin" ] && grep -q ":$(stat -c %i "$t/twice.bin") " /proc/locks; }
for _ in $(seq 100); do held && break; sleep 0.05; done
(cd "$t" && "$lp" record --memory -o twice.txt -- luajit -e 'print("ran")') >"$t/out2" 2>"$t/err2"
rc=$?
[ $rc = 1 ] && grep -q 'twice.bin is being written by a profile running in another process' "$t/err2" ||
	fail "a second record into a file being written: exit $rc: $(cat "$t/err2")"
grep -q "^ran$" "$t/out2" && fail "the second record ran its program; the first: $(cat "$t/err1")"
wait $first || fail "the first record failed: $(cat "$t/err1")"
"$lp" report -q "$t/twice.bin" >/dev/null || fail "the first record's profile does not read"

# -- A report of a profile still being written (a look at it while record runs): said to
# be in progress, not a file "truncated" by a profiler that "did not finish the stream".
# One sample is one sample, not "1 samples", in record's and report's summaries and the
# flame graph's subtitle: 1.5 s of CPU at --rate 1.
cat >"$t/one.lua" <<'EOF'
local t = os.clock() while os.clock() - t < 1.5 do end
EOF
(cd "$t" && "$lp" record --rate 1 -n 0 -o one.svg -- luajit one.lua) >/dev/null 2>"$t/stderr"
"$lp" report "$t/one.bin" -f collapsed -o "$t/one.folded" 2>>"$t/stderr"
n=$(awk '{ n += $NF } END { print n + 0 }' "$t/one.folded")
if [ "$n" = 1 ]; then
	grep -Eq '^luaprof record: [0-9.]+ s profiled, 1 sample \(' "$t/stderr" &&
		grep -q ': 1 CPU sample (' "$t/stderr" && grep -q '| 1 sample, 0 dropped' "$t/one.svg" ||
		fail "one sample said in the plural: $(cat "$t/stderr"; grep -o '| [0-9]* sample[^|]*' "$t/one.svg")"
else
	echo "note: --rate 1 over 1.5 s of CPU gave $n samples: the singular not checked"
fi
(cd "$t" && "$lp" record -q -f collapsed -o peek.folded -- luajit app.lua 1.5) >/dev/null 2>&1 &
first=$!
held() { [ -e "$t/peek.bin" ] && grep -q ":$(stat -c %i "$t/peek.bin") " /proc/locks; }
for _ in $(seq 100); do held && break; sleep 0.05; done
sleep 0.6 # the writer's first samples (every quarter second)
"$lp" report -f collapsed "$t/peek.bin" >/dev/null 2>"$t/err"
rc=$?
[ $rc = 3 ] && grep -q 'still being written' "$t/err" && ! grep -q 'did not finish' "$t/err" ||
	fail "report of a profile being written: exit $rc: $(cat "$t/err")"
wait $first || fail "the record being looked at failed"
"$lp" report "$t/peek.bin" >/dev/null 2>"$t/err" && ! grep -q 'still being written' "$t/err" ||
	fail "report of a finished profile: $(cat "$t/err")"

[ $fails = 0 ] || exit 1
echo "ok"
