#!/usr/bin/env bash
# A terminating signal during a CPU profile's start, under `luaprof record` (termstop.c:
# the profile is finished before the program dies of it): the start is done first (its
# header written, its timer armed), then the signal stops the profile and the program dies
# of it, the file whole. Before, the signal's stop found the profile being set up and gave
# up, and the process died at once, the file's header all it held (or less): the
# program's own sysprof.start after record's profile, at either point and from either
# thread; and record's own start, whose signal was still at its default action (no
# handler until the start returned). start_signal_host.c sends SIGTERM at a chosen point
# of the start. Then SIGTERM to `luaprof record` at random times in its first 8 ms.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof luaprof.so
luajit_dev "$t/apt.log" || skip "$why"
lp=$PWD/build/luaprof
cc_test "$t/host" tests/integration/start_signal_host.c -O1 -I$inc -rdynamic \
	-lluajit-5.1 -ldl -lpthread || exit 1

# record: the agent loads as record's LUA_INIT has it (LUAPROF_RECORD, below), its start
# the one signalled. restart: the program stops record's profile and starts its own.
cat >"$t/start.lua" <<'LUA'
-- (underrecord: `luaprof record` runs the host, whose LUA_INIT loaded the agent)
local lp = arg[1] ~= "underrecord"
	and assert(package.loadlib(os.getenv("LP_SO"), "luaopen_luaprof"))("luaprof")
if arg[1] == "restart" then
	assert(lp.sysprof.stop())
	arm_signal(arg[3])
	local ok, err = lp.sysprof.start({ mode = "C", interval = 1, path = arg[2] })
	assert(ok or arg[3]:match("^cpcall:"), err) -- (cpcall: refused, below)
	if not ok then print("refused: " .. err) end
end
local x, t = 0, os.clock()
while os.clock() - t < 0.3 do x = x + 1 end
print("the signal did not end the program")
LUA

# run NAME MODE SPEC: the host in MODE, SIGTERM at SPEC; NAME.bin is the start's profile.
# It must die of SIGTERM, the profile whole and stopped by the signal.
run() {
	local v=$1 mode=$2 spec=$3 prof=$t/$1.bin first=$t/$1.first.bin rc
	local env=(LP_SO="$PWD/build/luaprof.so")
	if [ "$mode" = record ]; then
		env+=(LUAPROF_RECORD="mode=C,interval_ns=1000000,path=$prof" LP_TEST_SIGNAL="$spec")
	else
		env+=(LUAPROF_RECORD="mode=C,interval_ns=1000000,path=$first")
	fi
	# (bash's word of the signal to the standard error kept out of the test's output)
	{ (cd "$t" && exec env "${env[@]}" timeout 20 ./host start.lua "$mode" "$prof" "$spec") \
		>"$t/$v.out" 2>&1; } 2>/dev/null
	rc=$?
	[ $rc = 143 ] || fail "$v: the host exited $rc, not 143 (SIGTERM): $(head -3 "$t/$v.out")"
	"$lp" report -f info "$prof" >"$t/$v.info" 2>&1 ||
		fail "$v: report failed: $(head -3 "$t/$v.info")"
	grep -q '^complete: yes$' "$t/$v.info" || fail "$v: profile cut short: $(head -3 "$t/$v.info")"
	grep -q '^meta.stopped_by: signal$' "$t/$v.info" ||
		fail "$v: not stopped by the signal: $(grep -m1 stopped_by "$t/$v.info")"
}

for spec in phdr:raise:1 pthread:raise:1 phdr:thread:1 pthread:thread:1; do
	run "restart-${spec//:/-}" restart "$spec"
done
# record's own start: the host's other thread has no handler to send it on yet.
for spec in phdr:raise:1 pthread:raise:1; do
	run "record-${spec//:/-}" record "$spec"
done

# A start refused with the signal held meanwhile (cpcall: the anchor's lua_cpcall fails,
# as out of memory): as without the signal (none), the file the start made is removed and
# one that was there is left as it was; the program dies of the signal. Before, the held
# signal ended the process as the start returned, before the file was removed: empty.
# refused NAME SPEC [OLD]: OLD, the contents of a file there before.
refused() {
	local v=$1 spec=$2 old=${3-} prof=$t/$1.bin rc want=143
	local env=(LP_SO="$PWD/build/luaprof.so"
		LUAPROF_RECORD="mode=C,interval_ns=1000000,path=$t/$v.first.bin")
	rm -f "$prof"
	[ -z "$old" ] || printf '%s' "$old" >"$prof"
	case $spec in *:none:*) want=0 ;; esac
	{ (cd "$t" && exec env "${env[@]}" timeout 20 ./host start.lua restart "$prof" "$spec") \
		>"$t/$v.out" 2>&1; } 2>/dev/null
	rc=$?
	[ $rc = $want ] || fail "$v: the host exited $rc, not $want: $(head -3 "$t/$v.out")"
	[ $want = 143 ] || grep -q '^refused: not enough memory' "$t/$v.out" ||
		fail "$v: the start was not refused: $(head -3 "$t/$v.out")"
	if [ -n "$old" ]; then
		[ "$(cat "$prof" 2>/dev/null)" = "$old" ] ||
			fail "$v: the file that was there is not as it was: $(head -c 60 "$prof" 2>&1)"
	else
		[ ! -e "$prof" ] || fail "$v: the refused start left its file ($(stat -c %s "$prof") bytes)"
	fi
}
for how in none raise thread; do
	refused "refused-$how" "cpcall:$how:1"
	refused "refused-old-$how" "cpcall:$how:1" "an older file"
done

# The same under `luaprof record` itself: the profile is whole, stopped by the signal, and
# record says the program was killed, with no word of a cut stream.
{ (cd "$t" && exec env LP_TEST_SIGNAL=pthread:raise:1 "$lp" record -o rec.txt -- \
	./host start.lua underrecord) >"$t/rec.out" 2>&1; } 2>/dev/null
rc=$?
[ $rc = 143 ] || fail "record: exited $rc, not 143: $(head -3 "$t/rec.out")"
"$lp" report -f info "$t/rec.bin" 2>&1 | grep -q '^meta.stopped_by: signal$' ||
	fail "record: the profile is not one the signal stopped: $(head -3 "$t/rec.out")"
grep -q 'killed by signal 15' "$t/rec.out" ||
	fail "record: no word of the signal: $(grep -v '^$' "$t/rec.out" | head -4)"
! grep -q 'warning' "$t/rec.out" ||
	fail "record: $(grep -m1 warning "$t/rec.out")"

# SIGTERM to record (CPU) at random times in its first 8 ms, 40 runs: each leaves a whole
# profile, or says the program died before it loaded the agent, or (record killed before
# it made a file) leaves nothing. Before, 22 runs of 80 said "killed before the profiler
# wrote anything" and 8 left a stream with no end (record warned of it): the signal in the
# agent's start, or before its handler.
cat >"$t/busy.lua" <<'LUA'
local keep = {}
local t = os.clock()
while os.clock() - t < 5 do for i = 1, 1000 do keep[i % 500 + 1] = { i } end end
LUA
mkdir "$t/rnd"
for _ in $(seq 40); do
	rm -rf "$t/rnd" && mkdir "$t/rnd"
	us=$(((RANDOM * 32768 + RANDOM) % 8000))
	(cd "$t/rnd" && exec "$lp" record -f collapsed -o p.txt -- luajit ../busy.lua) \
		>"$t/rnd.out" 2>&1 &
	rec=$!
	sleep "0.$(printf %06d $us)"
	kill -TERM $rec
	wait $rec
	v="random (${us} us)"
	if [ -e "$t/rnd/p.bin" ]; then
		"$lp" report -f info "$t/rnd/p.bin" 2>&1 | grep -q '^complete: yes$' ||
			fail "$v: p.bin is no whole profile: $(grep -v '^$' "$t/rnd.out" | tail -1)"
	elif [ -s "$t/rnd.out" ]; then
		grep -q 'killed before it loaded the agent' "$t/rnd.out" ||
			fail "$v: no profile: $(grep -v 'killed by signal' "$t/rnd.out" | head -2)"
	fi
	left=$(find "$t/rnd" -mindepth 1 ! -name p.bin ! -name p.txt -printf '%f ')
	[ -z "$left" ] || fail "$v: left behind: $left"
done

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
