#!/usr/bin/env bash
# `luaprof record` of a program that fails before anything is recorded (a misspelt script:
# luajit says "cannot open" and exits 1; a program killed at once): in every mode (CPU,
# --memory exact and --sample) no file is left (it used to leave a flame graph of no
# sample, or a report of luajit's own start-up, and the raw stream), one line says why
# and names the program's status, which is record's; an earlier profile at the path is
# kept, with the same exit status. A terminating signal the profiler caught is no failure:
# the profile it stopped is written (cmod_names.sh's and the start_signal tests' profiles
# were dropped when it was taken for one). Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/record.sh
record_setup

cat >"$t/work.lua" <<'EOF'
local s, t = 0, os.clock() while os.clock() - t < 0.2 do s = s + 1 end
local k = {} for i = 1, 1e5 do k[i] = { i } end
EOF
echo 'os.exit(3)' >"$t/exit3.lua"
echo 'os.execute("kill -TERM " .. io.open("/proc/self/stat"):read("*n"))' >"$t/term.lua"
echo 'os.execute("kill -KILL " .. io.open("/proc/self/stat"):read("*n"))' >"$t/kill.lua"

# run NAME ARGS...: record ARGS in $t, its status in $rc, its standard error in $t/NAME.err.
run() {
	local n=$1
	shift
	(cd "$t" && "$lp" record "$@") >"$t/$n.out" 2>"$t/$n.err"
	rc=$?
}

for mode in cpu exact sampled; do
	case $mode in
	cpu) opts=(-f collapsed); first="no CPU sample"; out=$mode.folded ;;
	exact) opts=(--memory -f memprof); first="no allocation by Lua code"; out=$mode.txt ;;
	sampled) opts=(--memory --sample 1K -f collapsed); first="no sampled allocation"; out=$mode.folded ;;
	esac
	mkdir "$t/$mode"
	# No earlier file: nothing left, one line (besides luajit's own) with the status.
	run $mode "${opts[@]}" -o "$mode/$out" -- luajit no-such-script.lua
	[ $rc = 1 ] || fail "$mode, misspelt script: exit $rc, want 1 (the program's)"
	left=$(ls -A "$t/$mode")
	[ -z "$left" ] || fail "$mode, misspelt script: files left: $left"
	[ -s "$t/$mode.out" ] && fail "$mode, misspelt script: a report on standard output: $(head -3 "$t/$mode.out")"
	want="luaprof record: luajit recorded nothing ($first: it exited with status 1 before the first one): no file is written"
	grep -v '^luajit: cannot open no-such-script.lua' "$t/$mode.err" >"$t/$mode.rest"
	[ "$(cat "$t/$mode.rest")" = "$want" ] || fail "$mode, misspelt script: said $(cat "$t/$mode.err")"
	# The program's own status, whatever it is (127 too, which a failed exec gives).
	for st in 3 127; do
		run $mode "${opts[@]}" -o "$mode/$out" -- luajit -e "os.exit($st)"
		[ $rc = $st ] || fail "$mode, os.exit($st) at once: exit $rc, want $st: $(cat "$t/$mode.err")"
		grep -qx "luaprof record: luajit recorded nothing ($first: it exited with status $st before the first one): no file is written" "$t/$mode.err" ||
			fail "$mode, os.exit($st) at once: said $(cat "$t/$mode.err")"
		left=$(ls -A "$t/$mode")
		[ -z "$left" ] || fail "$mode, os.exit($st) at once: files left: $left"
	done
	# Killed at once by SIGKILL (CPU mode: its stream begun, nothing in it): said, its
	# status passed on, nothing left. (The memory modes write nothing before SIGKILL: "no
	# profile", status 1, as --help says.)
	if [ $mode = cpu ]; then
		run $mode "${opts[@]}" -o "$mode/$out" -- luajit kill.lua
		[ $rc = 137 ] || fail "$mode, killed at once: exit $rc, want 137: $(cat "$t/$mode.err")"
		left=$(ls -A "$t/$mode")
		[ -z "$left" ] || fail "$mode, killed at once: files left: $left"
		grep -q "^luaprof record: luajit recorded nothing .*: no file is written$" "$t/$mode.err" ||
			fail "$mode, killed at once: said $(cat "$t/$mode.err")"
	fi
	# A SIGTERM at once is a stop the profiler caught (as Ctrl-C, or a SIGTERM to record):
	# the profile it stopped is whole, and written, with the program's status. (Sampled,
	# 1G keeps it unsampled.)
	kopts=("${opts[@]}")
	[ $mode = sampled ] && kopts=(--memory --sample 1G -f collapsed)
	run $mode "${kopts[@]}" -o "$mode/$out" -- luajit term.lua
	[ $rc = 143 ] || fail "$mode, SIGTERM at once: exit $rc, want 143: $(cat "$t/$mode.err")"
	[ -e "$t/$mode/$out" ] && "$lp" report -f info "$t/$mode/${out%.*}.bin" 2>&1 |
		grep -q '^meta.stopped_by: signal$' ||
		fail "$mode, SIGTERM at once: no profile the signal stopped: $(ls -A "$t/$mode"): $(cat "$t/$mode.err")"
	rm -f "$t/$mode"/*
	# An earlier profile: kept whole (stream and rendering), the same status and line.
	run $mode -q "${opts[@]}" -o "$mode/$out" -- luajit work.lua
	[ $rc = 0 ] || fail "$mode, work.lua: exit $rc: $(cat "$t/$mode.err")"
	base=${out%.*}
	cp "$t/$mode/$base.bin" "$t/$mode.bin.before"
	cp "$t/$mode/$out" "$t/$mode.out.before"
	run $mode "${opts[@]}" -o "$mode/$out" -- luajit exit3.lua
	[ $rc = 3 ] || fail "$mode, over an earlier profile: exit $rc, want 3 (the program's)"
	grep -qx "luaprof record: luajit recorded nothing ($first: it exited with status 3 before the first one): the earlier profile $mode/$base.bin is kept" "$t/$mode.err" &&
		[ "$(wc -l <"$t/$mode.err")" = 1 ] ||
		fail "$mode, over an earlier profile: said $(cat "$t/$mode.err")"
	cmp -s "$t/$mode/$base.bin" "$t/$mode.bin.before" && cmp -s "$t/$mode/$out" "$t/$mode.out.before" ||
		fail "$mode: a run that recorded nothing changed the earlier profile or its rendering"
	[ "$(ls -A "$t/$mode" | wc -l)" = 2 ] || fail "$mode: files left beside the earlier profile: $(ls -A "$t/$mode")"
	# A rendering at -o whose raw stream is new (--raw elsewhere) is not replaced either.
	run $mode "${opts[@]}" -o "$mode/$out" --raw "$mode/new.bin" -- luajit no-such-script.lua
	[ $rc = 1 ] || fail "$mode, --raw new: exit $rc, want 1"
	cmp -s "$t/$mode/$out" "$t/$mode.out.before" || fail "$mode, --raw new: the rendering at -o was replaced"
	[ -e "$t/$mode/new.bin" ] && fail "$mode, --raw new: the raw stream was left"
done
# A program that succeeds too briefly for a sample still leaves its (empty) profile, with
# the advice on the rate: it did run.
run short -f collapsed -o short.folded -- luajit -e 'local x = 1'
[ $rc = 0 ] && [ -e "$t/short.folded" ] && [ -s "$t/short.bin" ] ||
	fail "a short run that succeeded: exit $rc, files $(ls "$t" | grep short): $(cat "$t/short.err")"
ls -A "$t" | grep -q '^\.luaprof-' && fail "claim or status files left: $(ls -A "$t")"

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "record_failed_start: all checks passed"
