# shellcheck shell=bash
# What cpu_start_signal.sh and memprof_start_signal.sh share (sourced after common.sh's
# test_init; bash): a terminating signal at a chosen point of a profile's start
# (start_signal_host.c), and SIGTERM to `luaprof record` at random times in its first
# milliseconds. Call from the repository root.

# start_signal_setup: the checks both scripts begin with, then $lp (the CLI), $t/host
# (start_signal_host.c) and $t/start.lua, which the host runs as
#   start.lua MODE PROFILE SPEC WHAT
# MODE record: the agent loaded from record's LUA_INIT (LUAPROF_RECORD) made the start
# that SPEC (LP_TEST_SIGNAL) signals; restart: the program stops record's profile and
# starts its own into PROFILE, the signal at SPEC (arm_signal), a start that cpcall
# refuses going on with "refused: MESSAGE" printed; exit: as restart, the script ending
# right after the start (the host returns from main); underrecord: `luaprof record` runs
# the host. WHAT: cpu for the CPU profiler (a 0.3 s busy loop after the start, not in
# exit), else the memory profiler with that sampling interval in bytes, 0 for exact (1000
# tables).
start_signal_setup() {
	need_x86_64
	need_build luaprof luaprof.so
	luajit_dev "$t/apt.log" || skip "$why"
	lp=$PWD/build/luaprof
	cc_test "$t/host" tests/integration/start_signal_host.c -O1 -I"$inc" -rdynamic \
		-lluajit-5.1 -ldl -lpthread || exit 1
	cat >"$t/start.lua" <<'LUA'
local lp = arg[1] ~= "underrecord"
	and assert(package.loadlib(os.getenv("LP_SO"), "luaopen_luaprof"))("luaprof")
local cpu = arg[4] == "cpu"
if arg[1] == "restart" or arg[1] == "exit" then
	local prof = cpu and lp.sysprof or lp.memprof
	assert(prof.stop())
	arm_signal(arg[3])
	local ok, err
	if cpu then
		ok, err = lp.sysprof.start({ mode = "C", interval = 1, path = arg[2] })
	else
		local n = tonumber(arg[4])
		ok, err = lp.memprof.start(arg[2], { sample = n > 0 and n or nil })
	end
	assert(ok or arg[3]:match("^cpcall:"), err)
	if not ok then print("refused: " .. err) end
	if arg[1] == "exit" then return end
end
if cpu then
	local x, t = 0, os.clock()
	while os.clock() - t < 0.3 do x = x + 1 end
else
	local keep = {}
	for i = 1, 1000 do keep[i] = { i } end
end
print("the signal did not end the program")
LUA
}

# start_signal_host NAME MODE PROFILE SPEC WHAT: the host runs start.lua in $t with those
# arguments (above), LUAPROF_RECORD's profile in $t/NAME.first.bin unless MODE is record
# (then PROFILE); its output in $t/NAME.out, its exit status in $rc.
start_signal_host() {
	local v=$1 mode=$2 prof=$3 spec=$4 what=$5 first=$t/$1.first.bin
	local rec="profiler=memory,sample=$what"
	[ "$what" != cpu ] || rec="mode=C,interval_ns=1000000"
	local env=(LP_SO="$PWD/build/luaprof.so")
	if [ "$mode" = record ]; then
		env+=(LUAPROF_RECORD="$rec,path=$prof" LP_TEST_SIGNAL="$spec")
	else
		env+=(LUAPROF_RECORD="$rec,path=$first")
	fi
	# (bash's word of the signal to the standard error kept out of the test's output)
	{ (cd "$t" && exec env "${env[@]}" timeout 20 ./host start.lua "$mode" "$prof" "$spec" \
		"$what") >"$t/$v.out" 2>&1; } 2>/dev/null
	rc=$?
}

# start_signal_run NAME MODE SPEC WHAT: the host in MODE, SIGTERM at SPEC; NAME.bin is the
# start's profile. It must die of SIGTERM, the profile whole and stopped by the signal.
start_signal_run() {
	local v=$1 prof=$t/$1.bin
	start_signal_host "$v" "$2" "$prof" "$3" "$4"
	[ $rc = 143 ] || fail "$v: the host exited $rc, not 143 (SIGTERM): $(head -3 "$t/$v.out")"
	"$lp" report -f info "$prof" >"$t/$v.info" 2>&1 ||
		fail "$v: report failed: $(head -3 "$t/$v.info")"
	grep -q '^complete: yes$' "$t/$v.info" || fail "$v: profile cut short: $(head -3 "$t/$v.info")"
	grep -q '^meta.stopped_by: signal$' "$t/$v.info" ||
		fail "$v: not stopped by the signal: $(grep -m1 stopped_by "$t/$v.info")"
}

# start_signal_nofile NAME SPEC WHAT [OLD [MODE]]: the program's start refused (SPEC
# cpcall:HOW:N, the anchor's lua_cpcall failing as out of memory) with SIGTERM held
# meanwhile (HOW raise or thread), or none (HOW none); or SIGTERM before the start began,
# as its file was made (pthread:HOW:1 for the memory profiler: the file's writer thread).
# As without the signal, the file the start made is removed, and one that was there (OLD,
# its contents) is left as it was; the program dies of the signal, or says the start was
# refused. Before, the signal ended the process as the start returned (held), or before it
# began, and the file the start made was left empty. MODE: restart (the default) or exit.
start_signal_nofile() {
	local v=$1 spec=$2 old=${4-} mode=${5:-restart} prof=$t/$1.bin want=143
	rm -f "$prof"
	[ -z "$old" ] || printf '%s' "$old" >"$prof"
	case $spec in *:none:*) want=0 ;; esac
	start_signal_host "$v" "$mode" "$prof" "$spec" "$3"
	[ $rc = $want ] || fail "$v: the host exited $rc, not $want: $(head -3 "$t/$v.out")"
	[ $want = 143 ] || grep -q '^refused: not enough memory' "$t/$v.out" ||
		fail "$v: the start was not refused: $(head -3 "$t/$v.out")"
	if [ -n "$old" ]; then
		[ "$(cat "$prof" 2>/dev/null)" = "$old" ] ||
			fail "$v: the file that was there is not as it was: $(head -c 60 "$prof" 2>&1)"
	else
		[ ! -e "$prof" ] || fail "$v: the start left the file it made ($(stat -c %s "$prof") bytes)"
	fi
}

# start_signal_random RUNS RECORD_ARGS...: SIGTERM to `luaprof record RECORD_ARGS -o p.txt --
# luajit busy.lua` (5 s of allocating) at random times in its first 8 ms, RUNS runs: each
# leaves a whole profile, or says the program died before it loaded the agent, or (record
# killed before it made a file) leaves nothing. The time counts from record's exec: a
# signal to the shell forked for it, before the exec, ran the test's traps there (exit, $t
# removed), and every run after it checked nothing and passed (most runs of these scripts
# under load).
start_signal_random() {
	local runs=$1 us rec v left comm n
	shift
	cat >"$t/busy.lua" <<'LUA'
local keep = {}
local t = os.clock()
while os.clock() - t < 5 do for i = 1, 1000 do keep[i % 500 + 1] = { i } end end
LUA
	for _ in $(seq "$runs"); do
		rm -rf "$t/rnd" && mkdir "$t/rnd"
		us=$(((RANDOM * 32768 + RANDOM) % 8000))
		(cd "$t/rnd" && exec "$lp" record "$@" -o p.txt -- luajit ../busy.lua) \
			>"$t/rnd.out" 2>&1 &
		rec=$!
		for ((n = 0; n < 200000; n++)); do
			read -r comm 2>/dev/null </proc/$rec/comm && [ "$comm" = luaprof ] && break
		done
		sleep "0.$(printf %06d $us)"
		kill -TERM $rec
		wait $rec
		v="random ($*, ${us} us)"
		[ -d "$t" ] || { echo "FAIL: $v: the test's directory is gone"; exit 1; }
		if [ -e "$t/rnd/p.bin" ]; then
			"$lp" report -f info "$t/rnd/p.bin" 2>&1 | grep -q '^complete: yes$' ||
				fail "$v: p.bin is no whole profile: $(grep -v '^$' "$t/rnd.out" | head -3)"
		elif [ -s "$t/rnd.out" ]; then
			grep -q 'killed before it loaded the agent' "$t/rnd.out" ||
				fail "$v: no profile: $(grep -v 'killed by signal' "$t/rnd.out" | head -2)"
		fi
		left=$(find "$t/rnd" -mindepth 1 ! -name p.bin ! -name p.txt -printf '%f ')
		[ -z "$left" ] || fail "$v: left behind: $left"
	done
}
