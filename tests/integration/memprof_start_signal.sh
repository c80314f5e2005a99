#!/usr/bin/env bash
# A terminating signal during a memory profile's start, under `luaprof record` (termstop.c:
# the profile is finished before the program dies of it): the start is done first (its
# header and symbol table written, the allocator swapped), then the signal stops the
# profile and the program dies of it, the file whole. Before, the signal's stop found the
# start's lock held and the process died at once, the file empty: the program's own
# memprof.start after record's profile, at either point and from either thread; and
# record's own start, whose signal was still at its default action (no handler until the
# start returned). start_signal_host.c sends SIGTERM at a chosen point of the start.
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
	assert(lp.memprof.stop())
	arm_signal(arg[3])
	local n = tonumber(arg[4])
	local ok, err = lp.memprof.start(arg[2], { sample = n > 0 and n or nil })
	assert(ok or arg[3]:match("^cpcall:"), err) -- (cpcall: refused, below)
	if not ok then print("refused: " .. err) end
end
local keep = {}
for i = 1, 1000 do keep[i] = { i } end
print("the signal did not end the program")
LUA

# run NAME MODE SPEC SAMPLE: the host in MODE, SIGTERM at SPEC; NAME.bin is the start's
# profile. It must die of SIGTERM, the profile whole and stopped by the signal.
run() {
	local v=$1 mode=$2 spec=$3 sample=$4 prof=$t/$1.bin first=$t/$1.first.bin rc
	local env=(LP_SO="$PWD/build/luaprof.so")
	if [ "$mode" = record ]; then
		env+=(LUAPROF_RECORD="profiler=memory,sample=$sample,path=$prof" LP_TEST_SIGNAL="$spec")
	else
		env+=(LUAPROF_RECORD="profiler=memory,sample=$sample,path=$first")
	fi
	# (bash's word of the signal to the standard error kept out of the test's output)
	{ (cd "$t" && exec env "${env[@]}" timeout 20 ./host start.lua "$mode" "$prof" "$spec" \
		"$sample") >"$t/$v.out" 2>&1; } 2>/dev/null
	rc=$?
	[ $rc = 143 ] || fail "$v: the host exited $rc, not 143 (SIGTERM): $(head -3 "$t/$v.out")"
	"$lp" report -f info "$prof" >"$t/$v.info" 2>&1 ||
		fail "$v: report failed: $(head -3 "$t/$v.info")"
	grep -q '^complete: yes$' "$t/$v.info" || fail "$v: profile cut short: $(head -3 "$t/$v.info")"
	grep -q '^meta.stopped_by: signal$' "$t/$v.info" ||
		fail "$v: not stopped by the signal: $(grep -m1 stopped_by "$t/$v.info")"
}

for sample in 0 4096; do
	for spec in phdr:raise:1 setallocf:raise:1 phdr:thread:1 setallocf:thread:1; do
		run "restart-$sample-${spec//:/-}" restart "$spec" $sample
	done
	# record's own start: the host's other thread has no handler to send it on yet.
	for spec in phdr:raise:1 setallocf:raise:1; do
		run "record-$sample-${spec//:/-}" record "$spec" $sample
	done
done

# A start refused with the signal held meanwhile (cpcall: the anchor's lua_cpcall fails,
# as out of memory): as without the signal (none), the file the start made is removed and
# one that was there is left as it was; the program dies of the signal. Before, the held
# signal ended the process as the start returned, before the file was removed: empty.
# refused NAME SPEC SAMPLE [OLD]: OLD, the contents of a file there before.
refused() {
	local v=$1 spec=$2 sample=$3 old=${4-} prof=$t/$1.bin rc want=143
	rm -f "$prof"
	[ -z "$old" ] || printf '%s' "$old" >"$prof"
	local env=(LP_SO="$PWD/build/luaprof.so"
		LUAPROF_RECORD="profiler=memory,sample=$sample,path=$t/$v.first.bin")
	case $spec in *:none:*) want=0 ;; esac
	{ (cd "$t" && exec env "${env[@]}" timeout 20 ./host start.lua restart "$prof" "$spec" \
		"$sample") >"$t/$v.out" 2>&1; } 2>/dev/null
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
for sample in 0 4096; do
	for how in none raise thread; do
		refused "refused-$sample-$how" "cpcall:$how:1" $sample
		refused "refused-old-$sample-$how" "cpcall:$how:1" $sample "an older file"
	done
done

# The same under `luaprof record --memory --sample` itself: the profile is whole and has no
# sample, and record says the program was killed as it started, not that it "allocated too
# little" for the sampling interval.
{ (cd "$t" && exec env LP_TEST_SIGNAL=setallocf:raise:1 "$lp" record --memory --sample 4K \
	-o rec.txt -- ./host start.lua underrecord) >"$t/rec.out" 2>&1; } 2>/dev/null
rc=$?
[ $rc = 143 ] || fail "record: exited $rc, not 143: $(head -3 "$t/rec.out")"
"$lp" report -f info "$t/rec.bin" 2>&1 | grep -q '^meta.stopped_by: signal$' ||
	fail "record: the profile is not one the signal stopped: $(head -3 "$t/rec.out")"
grep -q 'no allocation was sampled: the program was killed by SIGTERM' "$t/rec.out" ||
	fail "record: no word of the signal in the summary: $(grep -v '^$' "$t/rec.out" | head -4)"

# SIGTERM to record after it made the stream's file, before the program runs (the shim
# sends it as record makes its claim file): passed on to the program once it runs, which dies of it;
# record says so and leaves no file, or a whole profile where the program got as far as
# starting it. Before, it killed record itself, silently, and left the file empty
# (`report` refused it) and its claim file beside it.
cc_test "$t/shim.so" tests/integration/claim_signal_shim.c -shared -fPIC -ldl || exit 1
cat >"$t/churn.lua" <<'LUA'
local keep = {}
for i = 1, 1e6 do keep[i % 500 + 1] = { i } end
LUA
mkdir "$t/claim"
for args in --memory "--memory --sample 4K"; do
	rm -f "$t/claim/"*
	# shellcheck disable=SC2086
	{ (cd "$t/claim" && exec env LD_PRELOAD="$t/shim.so" LP_TEST_CLAIM_SIGNAL=1 "$lp" record \
		$args -o p.txt -- luajit ../churn.lua) >"$t/claim.out" 2>&1; } 2>/dev/null
	rc=$?
	v="claim ($args)"
	case $rc in 143 | 1) ;; *) fail "$v: record exited $rc: $(head -3 "$t/claim.out")" ;; esac
	grep -q 'killed by signal 15' "$t/claim.out" ||
		fail "$v: record did not tell of the signal: $(head -3 "$t/claim.out")"
	if [ -e "$t/claim/p.bin" ]; then
		"$lp" report -f info "$t/claim/p.bin" >"$t/claim.info" 2>&1
		grep -q '^complete: yes$' "$t/claim.info" ||
			fail "$v: p.bin is no whole profile: $(head -3 "$t/claim.info")"
	fi
	left=$(find "$t/claim" -mindepth 1 ! -name p.bin ! -name p.txt -printf '%f ')
	[ -z "$left" ] || fail "$v: left behind: $left"
done

# SIGTERM to record --memory at random times in its first 8 ms, 20 runs a mode: each leaves
# a whole profile, or says the program died before it loaded the agent, or (record killed
# before it made a file) leaves nothing. Before, 27 and 36 runs of 80 said "killed before
# the profiler wrote anything": the signal in the agent's start, or before its handler.
cat >"$t/busy.lua" <<'LUA'
local keep = {}
local t = os.clock()
while os.clock() - t < 5 do for i = 1, 1000 do keep[i % 500 + 1] = { i } end end
LUA
mkdir "$t/rnd"
for args in --memory "--memory --sample 4K"; do
	for _ in $(seq 20); do
		rm -rf "$t/rnd" && mkdir "$t/rnd"
		us=$(((RANDOM * 32768 + RANDOM) % 8000))
		# shellcheck disable=SC2086
		(cd "$t/rnd" && exec "$lp" record $args -o p.txt -- luajit ../busy.lua) \
			>"$t/rnd.out" 2>&1 &
		rec=$!
		sleep "0.$(printf %06d $us)"
		kill -TERM $rec
		wait $rec
		v="random ($args, ${us} us)"
		if [ -e "$t/rnd/p.bin" ]; then
			"$lp" report -f info "$t/rnd/p.bin" 2>&1 | grep -q '^complete: yes$' ||
				fail "$v: p.bin is no whole profile: $(head -3 "$t/rnd.out")"
		elif [ -s "$t/rnd.out" ]; then
			grep -q 'killed before it loaded the agent' "$t/rnd.out" ||
				fail "$v: no profile: $(grep -v 'killed by signal' "$t/rnd.out" | head -2)"
		fi
		left=$(find "$t/rnd" -mindepth 1 ! -name p.bin ! -name p.txt -printf '%f ')
		[ -z "$left" ] || fail "$v: left behind: $left"
	done
done

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
