#!/usr/bin/env bash
# The exact-mode memory profiler (luaprof.memprof) on real LuaJIT builds: exact events and
# bytes per line in `luaprof report`, on Debian's /usr/bin/luajit and OpenResty's luajit2
# (extracted from its .debs into build/shapes/, as shapes_luajit.sh does), JIT off and on.
# memprof_luajit.lua runs one case per process (GC stopped, stack and buffers grown
# beforehand) and marks the lines the report must show with "--@name".
#
# Every case: `luaprof report` exits 0; its section totals equal memprof.report()'s
# counters; the stream names the VM; no event of the test chunk is at line 0. Then:
#  tnew       table.new(20, 0): exactly 2 allocations, 232 B, on its line, nothing else;
#  concat     200 new strings by s .. "x": 200 allocations, sum of 24+((len+4)&~3) B, on
#             the line (JIT on: the line plus the traces started there, at least one);
#  rep        string.rep("x", 1000): exactly 1 allocation of 1028 B on its line;
#  coroutine  coroutine.create: 2 allocations (lua_State 96 B luajit / 112 B luajit2, stack
#             376 B) on its line; the coroutine's {} (64 B) on the coroutine's line; nothing
#             on the resume line;
#  deadresume coroutine.resume of a dead coroutine: its message (56 B) on its line (the
#             profiler read false in the frame's function slot as a function and crashed);
#  handler    xpcall(f, debug.traceback): the handler's traceback (and the error message) on
#             the line that failed (15 events, 1,168 B: an index of nil) or that called
#             error (9, 1,140 B) or that passed string.rep a bad argument (10, 1,380 B),
#             never on debug.traceback (the VM calls it from C); a Lua handler's gsub
#             calling string.upper leaves string.upper named (1 x 28 B), as outside a
#             handler, not charged to a line;
#  chandler   the same handler over an error a C function raised (luaL_error): the traceback
#             (15 events, 1,392 B) on the line that called it, the message (1 x 88 B) on
#             the C function, fail;
#  ffihidden  the FFI loaded, then taken out of package.loaded, before start: its declared
#             types, cdata and finalizers keep working (start loaded it anew, resetting it);
#  ffiblocked package.loaded.ffi set to a string before the FFI was ever loaded: start
#             leaves it (it loaded the FFI and put the module there);
#  load       the chunk's {} on "=memprof_chunk:2" (1, 64 B), the compile on the load line
#             (8 allocations 678 B, 4 frees 336 B, as measured on both builds), nothing
#             on the line calling the chunk, nothing INTERNAL;
#  cmod       a C module required after start: its lua_CFunction's 100-byte userdata is
#             one allocation of 148 B named memprof_cmod_newud; nothing on the calling line
#             (require's own allocations are charged to its C functions, not checked here);
#  dlreuse    a library loaded, its lua_CFunction called and the library unloaded, then a
#             second one loaded at its address: each function's userdata (1 / 148 B) under
#             its own name (the second library was not named: its address had been seen);
#  cresume    a coroutine resumed twice by lua_resume from C (memprof_cmod.c), yielding in
#             between: its {} (64 B) and {1, 2} (88 B) on their own lines (JIT on: or its
#             traces), nothing on the resuming lines; a C function that makes a table of
#             its own after lua_resume returned (the coroutine, yielded, still the VM's
#             current thread): 2 allocations, 312 B, charged to it (they were INTERNAL),
#             and as many again when a coroutine runs that function (were INTERNAL);
#             schedulers whose arguments name no thread they resume (taken from a table,
#             made with lua_newthread) on the main thread and in a coroutine: each of
#             their tables (and lua_newthread's thread and stack) charged to them
#             (2 x 312 B; 2 x (lua_State + 376 + 312 B): in a coroutine they were INTERNAL);
#  crecord    loops recorded by the JIT (hotloop=1) through calls of a C function that
#             allocates nothing: no allocation charged to it (the recorder's were; its
#             abort path's frees, run with vmstate C, still can be: not checked);
#  ffi_cb     qsort through the FFI with a Lua comparator making a {} per call: exactly one
#             64-byte allocation per call on that line (JIT on: that line plus the traces
#             started in the comparator), counted by the comparator itself;
#  hot        keep[i] = {i} x 300: 300 allocations, 26400 B; JIT on: TRACE [1] started at
#             the loop's line, line + trace totals still 300 / 26400 B;
#  stitch     keep[i] = os.date(...) x 300, a builtin the JIT stitches around (it runs on
#             a continuation frame): 300 allocations, 10800 B, on the line (and traces),
#             none charged to the builtin's C code;
#  builtin    builtins with no Lua caller (pcall(string.rep, ...), gsub's string.upper,
#             pcall(tostring, 12.5), pcall(table.concat, ...), pcall(string.reverse, ...)):
#             each one's allocations under its own name (string.rep:0x...: 1 / 1028 B;
#             tostring 1 / 32 B; table.concat 1 / 32 B), not object+offset; string.upper's
#             and string.reverse's entry, which they share with string.lower, under the
#             three names (3 / 100 B); bit.lshift's cdata under its entry's five names (an
#             entry of more than four); the rest on gsub's line;
#  builtin_drop  string.reverse dropped from its table before start, called before
#             string.upper: both (2 / 68 B) under string.reverse/lower/upper;
#  reload     a chunk loaded, run and collected four times ("=reloadK", same shape): each
#             run's table on its own chunk's line (the prototype and name's string reuse
#             the freed addresses);
#  reload_lines  the same, each chunk allocating at one PC three times on line k of
#             "=relinesK": each chunk's 4 allocations or more on its own line and none on
#             another (a PC's line remembered past its prototype's free gave the last
#             chunk's line);
#  stripped   string.dump(f, true) loaded and run: its table {4, 5} (88 B) and
#             string.rep's 1028-byte string on "=stripped:0", nothing INTERNAL or on the
#             builtin's C code;
#  retrace    two such loops with jit.flush() and a collection between: each line's
#             300 / 26400 B; JIT on: TRACE [1] started at each loop's line (the number
#             and the trace's block reused, named again)
#  fork       fork() while profiling: the child's stop() says "profiler is not running"
#             and its 1000 tables are not in the profile; the parent's 100 + 200 are;
#  leak       300 tables kept in a global, 500 dropped at another line, 2 full collections:
#             `report --leak-only` is the HEAP SUMMARY with the leaking line (and its
#             traces) holding 300 allocs / 26400 B and not the dropping line (INTERNAL
#             may hold VM blocks from before the profile that it resized); the dropping
#             line allocated exactly 500 / 44000 B (JIT off; JIT on its trace sinks the
#             unused tables) and all of it was freed; every free is INTERNAL;
#  grown      two tables made by table.new(20, 0) and grown to 20000 slots by a loop at another
#             line (JIT on: its trace), the first dropped, both collections done: the HEAP
#             SUMMARY holds the kept one (64 + 262152 B, 2 more allocs than frees) under the
#             line that made it and nothing under the other lines (Tarantool's way left the
#             dropped table's growth held and split the kept one's between the lines); a
#             third made before the profile and grown in it: its array (262152 B) held by
#             the growing line or its trace (Tarantool's way: all but the first growth);
#  misuse     Tarantool's messages and errno (start twice, stop idle, bad path, start({})
#             raises) checked in Lua; the profile around them is complete; start() with
#             no file name writes memprof.bin in the current directory, and misc.memprof
#             and misc.sysprof say available = true (Tarantool's final API);
#  close      start, allocate, exit without stop: exit 0 and a complete stream (report
#             exit 0) with exactly the allocation (table.new(50, 0): 472 B) and the 36-byte
#             string the script makes after the case, before luajit closes the state;
#             a userdata made after start (4 allocations, 200 B) whose finalizer allocates
#             at close: not that allocation (the profile stopped after it);
#  diskfull   (root, tmpfs) the profiler halts by itself on ENOSPC while the program
#             allocates; stop() returns nil, "<path>: No space left on device", 28; the
#             program goes on, can profile again, and its heap after full collections is
#             within 16 KiB of its size before; the cut stream reports as truncated (3);
#  selfcheck  an agent built with -DLP_MEMPROF_SELFCHECK runs memprof_selfcheck.lua (trees,
#             strings and builtins, growing tables, a coroutine, collections; errors,
#             yields across pcall, finalizers, metamethods, a sort comparator, an FFI
#             callback, load), JIT off and on: at least 90 % of its events take a light
#             path of the wrapper, and every one of them equals what the general path
#             writes (meta selfcheck_*); the events are encoded on the profile file's
#             thread, or, allowed one CPU (taskset), on the profiled thread;
#  exits      os.exit while profiling, exact and sampled: a complete stream; killed before
#             the first write: an empty file, not the previous profile at that path;
#  stale      memprof_host.c keeps the allocator from lua_getallocf while profiling and
#             calls it after stop and after loading libz: it passes straight through;
#  chain      memprof_host.c: the wrapper wrapped over and put back, then started again;
#             a wrapper kept from one state called while another is profiled
#  closing    memprof_host.c: a finalizer of the program's own starts both profilers while
#             lua_close runs finalizers: both refuse (the state is closing), and a new
#             state profiles as usual afterwards;
#  fork-host  memprof_host.c: a child forked while a sampled profile runs may profile a
#             state of its own, CPU and sampled memory (the sampler is not held for it);
#  closeshared memprof_host.c: a state closed while it shares the running sampled
#             profile's stub frees its blocks through it (none left in use in the profile);
#             the same with the running exact profile's wrapper (its HEAP SUMMARY held
#             them all);
#  duefree    memprof_host.c: a free whose sampled profile's countdown another state's kept
#             wrapper took below 0 is no sample, and its live sampled block is gone;
#  oom        memprof_host.c with an allocator that refuses blocks past a limit, JIT off and
#             on: four pcalls run out of memory (array growth, new tables, string doubling,
#             string keys); the profile's allocated - freed bytes equal the growth of the
#             allocator's own count of live bytes (a refused call is no event), and the
#             report's totals equal memprof.report()'s;
#  host       memprof_host.c: lua_close with the profiler running, 30 states in a row: the
#             process's mapped memory does not grow (a pass-through allocator left in place
#             at close, the control, leaks LuaJIT's arena each time and must grow it; nor
#             does it when a stopped profile's wrapper was put back as the allocator);
#             under valgrind (installed when missing and allowed), no error and no block
#             lost, with LuaJIT's allocator and with a malloc one.
# MEMPROF_VERBOSE=1 prints every report. Exit 0 pass, 1 fail, 2 skip (reason on the last
# line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh
mnt="$t/mnt"
cleanup() { test_end; umount "$mnt" 2>/dev/null; rm -rf "$t"; }
trap cleanup EXIT
src=tests/integration/memprof_luajit.lua

need_x86_64
need_build luaprof.so luaprof

# -- Debian's luajit and libluajit-5.1-dev, installed when missing and allowed.
luajit_dev "$t/apt.log" || skip "$why"
mkdir -p "$t/cmod"
cc_test "$t/cmod/memprof_cmod.so" tests/integration/memprof_cmod.c -O2 -fPIC -shared -I$inc ||
	exit 1
for r in a:alpha b:beta; do
	cc_test "$t/cmod/memprof_reuse_${r%%:*}.so" tests/integration/memprof_reuse.c -O2 -fPIC \
		-shared -I$inc -DREUSE_FN=memprof_reuse_${r#*:} || exit 1
done
cc_test "$t/memprof_host" tests/integration/memprof_host.c -O1 -I$inc -lluajit-5.1 -ldl -lpthread || exit 1

# -- OpenResty's luajit2, extracted from its .debs (tests/integration/lib/luajit.sh).
luajit2_fetch "$t/dl.log"

# -- Marker lines of the workload: "--@name" at the end of a line.
declare -A at
read_markers $src
L() { echo "@$src:${at[$1]}"; }                    # the label of marker $1's line
TR() { echo "TRACE \[[0-9]+\] started at @$src:${at[$1]}"; } # ERE: traces started there

# -- Reading reports.
# entries REPORT: "SEC<TAB>LABEL<TAB>EVENTS<TAB>PLUS<TAB>MINUS" per entry of ALLOCATIONS (A),
# REALLOCATIONS (R), DEALLOCATIONS (D); "H<TAB>LABEL<TAB>ALLOCS<TAB>BYTES<TAB>FREES" per
# HEAP SUMMARY line.
entries() {
	awk -F'\t' '
	/^ALLOCATIONS$/ { s = "A"; next }
	/^REALLOCATIONS$/ { s = "R"; next }
	/^DEALLOCATIONS$/ { s = "D"; next }
	/^HEAP SUMMARY:$/ { s = "H"; next }
	/^\t/ || /^$/ || s == "" { next }
	s == "H" {
		if (match($0, / holds [0-9]+B: [0-9]+ allocs, [0-9]+ frees$/)) {
			label = substr($0, 1, RSTART - 1); split(substr($0, RSTART + 7), a, /[^0-9]+/)
			print "H\t" label "\t" a[2] "\t" a[1] "\t" a[3]
		} else print "?\t" $0
		next
	}
	NF == 3 && $1 ~ /: [0-9]+ events$/ && $2 ~ /^\+[0-9]+B$/ && $3 ~ /^-[0-9]+B$/ {
		label = $1; sub(/: [0-9]+ events$/, "", label)
		ev = $1; sub(/^.*: /, "", ev); sub(/ events$/, "", ev)
		p = substr($2, 2, length($2) - 2); m = substr($3, 2, length($3) - 2)
		print s "\t" label "\t" ev "\t" p "\t" m
		next
	}
	{ print "?\t" $0 }' "$1"
}
# section ENTRIES SEC: "LABEL|EVENTS|PLUS|MINUS" lines, sorted (same labels summed).
section() {
	awk -F'\t' -v s="$2" '$1 == s { e[$2] += $3; p[$2] += $4; m[$2] += $5 }
		END { for (k in e) print k "|" e[k] "|" p[k] "|" m[k] }' "$1" | LC_ALL=C sort
}
# sum ENTRIES SEC ERE: "EVENTS PLUS MINUS" over the labels matching ERE (whole label).
sum() {
	awk -F'\t' -v s="$2" -v re="^($3)\$" '$1 == s && $2 ~ re { e += $3; p += $4; m += $5 }
		END { print e + 0, p + 0, m + 0 }' "$1"
}
# expect_section WHAT ENTRIES SEC "LABEL|EVENTS|PLUS|MINUS"...: the section is exactly these.
expect_section() {
	local what=$1 f=$2 s=$3 got want
	shift 3
	got=$(section "$f" "$s")
	want=$(printf '%s\n' "$@" | grep -v '^$' | LC_ALL=C sort)
	[ "$got" = "$want" ] || fail "$what: section $s is
$(echo "$got" | sed 's/^/	/')
  want
$(echo "$want" | sed 's/^/	/')"
}
# expect_sum WHAT ENTRIES SEC ERE "EVENTS PLUS MINUS"
expect_sum() {
	local got
	got=$(sum "$2" "$3" "$4")
	[ "$got" = "$5" ] || fail "$1: section $3, labels /$4/: got $got (events +bytes -bytes), want $5"
}
# only_labels WHAT ENTRIES SEC ERE: every label of the section matches ERE.
only_labels() {
	local bad
	bad=$(awk -F'\t' -v s="$3" -v re="^($4)\$" '$1 == s && $2 !~ re { print $2 }' "$2" | head -3)
	[ -z "$bad" ] || fail "$1: section $3 has unexpected entries: $bad"
}

# The expected bytes of NCAT strings "c" .. "x"*k (lengths 2 .. NCAT+1).
NCAT=200
catbytes=$(awk -v n=$NCAT 'BEGIN { for (l = 2; l <= n + 1; l++) s += 24 + int((l + 4) / 4) * 4; print s }')

# report RUNNER JIT DIR CASE [BIN]: renders BIN (default DIR/CASE.bin) into DIR/CASE.txt and
# DIR/CASE.ent and runs the checks every profile gets. Returns 1 when nothing to check.
report() {
	local what="$1, JIT $2, $4" dir=$3 c=$4 bin=${5:-$3/$4.bin} rc
	[ -s "$bin" ] || { fail "$what: no profile written ($bin)"; return 1; }
	build/luaprof report -q "$bin" >"$dir/$c.txt" 2>"$dir/$c.err"
	rc=$?
	[ $rc = 0 ] || { fail "$what: luaprof report exited $rc: $(head -3 "$dir/$c.err")"; return 1; }
	[ -z "${MEMPROF_VERBOSE:-}" ] || { echo "--- $what"; cat "$dir/$c.txt"; }
	entries "$dir/$c.txt" >"$dir/$c.ent"
	grep -q '^?' "$dir/$c.ent" && fail "$what: unparsed report lines: $(grep '^?' "$dir/$c.ent" | head -3)"
	grep -Eq "$src:0([^0-9]|\$)" "$dir/$c.txt" &&
		fail "$what: events of the test chunk at line 0: $(grep -E "$src:0([^0-9]|\$)" "$dir/$c.txt" | head -3)"
	grep -aq "$vmname" "$bin" || fail "$what: the stream does not name the VM '$vmname'"
	# The report's totals are memprof.report()'s counters.
	local want got
	want=""
	[ -f "$dir/$c.out" ] && want=$(grep '^counters ' "$dir/$c.out" | tail -1 | cut -d' ' -f2-)
	if [ -n "$want" ]; then
		got=$(awk -F'\t' '$1 == "A" { a += $3; ab += $4 } $1 == "R" { r += $3; ab += $4; fb += $5 }
			$1 == "D" { d += $3; fb += $5 }
			END { print a + r + d, a + 0, d + 0, r + 0, ab + 0, fb + 0 }' "$dir/$c.ent")
		[ "$got" = "$want" ] || fail "$what: report totals (events allocs frees reallocs alloc_bytes free_bytes) $got, memprof.report() $want"
	fi
	return 0
}

# runcase RUNNER JIT DIR CASE CMD...: runs one case; 1 if it failed.
runcase() {
	local runner=$1 jit=$2 dir=$3 c=$4
	shift 4
	"$@" $src "$c" "$dir" "$jit" "$t/cmod" >"$dir/$c.out" 2>&1
	local rc=$?
	if [ $rc != 0 ] || grep -q '^FAIL' "$dir/$c.out" || ! grep -q "^ran $c\$" "$dir/$c.out"; then
		fail "$runner, JIT $jit, $c: exit $rc: $(grep -v '^fact\|^counters' "$dir/$c.out" | head -10)"
		return 1
	fi
	return 0
}

# cases RUNNER JIT LSTATE CMD...: every case under one interpreter and JIT mode.
cases() {
	local runner=$1 jit=$2 lstate=$3 dir c e what
	shift 3
	dir="$t/$runner-$jit"
	mkdir -p "$dir"
	for c in tnew concat rep coroutine deadresume handler chandler ffihidden ffiblocked load cmod dlreuse cresume crecord ffi_cb hot stitch builtin builtin_drop reload reload_lines stripped retrace fork leak grown misuse close; do
		runcase "$runner" "$jit" "$dir" $c "$@" || continue
		report "$runner" "$jit" "$dir" $c || continue
		e="$dir/$c.ent"
		what="$runner, JIT $jit, $c"
		case $c in
		tnew)
			expect_section "$what" "$e" A "$(L tnew)|2|232|0"
			expect_section "$what" "$e" R
			expect_section "$what" "$e" D ;;
		concat)
			if [ "$jit" = off ]; then
				expect_section "$what" "$e" A "$(L concat)|$NCAT|$catbytes|0"
			else
				expect_sum "$what" "$e" A "$(L concat)|$(TR concat)" "$NCAT $catbytes 0"
				[ "$(sum "$e" A "$(TR concat)" | cut -d' ' -f1)" -gt 0 ] ||
					fail "$what: no allocation in a trace started at line ${at[concat]}"
				only_labels "$what" "$e" A "$(L concat)|$(TR concat)|INTERNAL"
			fi
			only_labels "$what" "$e" R "INTERNAL"
			only_labels "$what" "$e" D "INTERNAL" ;;
		rep)
			expect_section "$what" "$e" A "$(L rep)|1|1028|0"
			expect_section "$what" "$e" R
			expect_section "$what" "$e" D ;;
		coroutine)
			expect_section "$what" "$e" A "$(L cocreate)|2|$((lstate + 376))|0" "$(L cobody)|1|64|0"
			expect_section "$what" "$e" R
			expect_section "$what" "$e" D ;;
		deadresume)
			expect_section "$what" "$e" A "$(L deadresume)|1|56|0"
			expect_section "$what" "$e" R
			expect_section "$what" "$e" D ;;
		chandler)
			expect_sum "$what" "$e" A "$(L chandler_call)" "15 1392 0"
			expect_sum "$what" "$e" A "fail:0x[0-9a-f]+" "1 88 0"
			only_labels "$what" "$e" A "$(L chandler_call)|fail:0x[0-9a-f]+"
			expect_section "$what" "$e" R
			expect_section "$what" "$e" D ;;
		handler)
			local up='string\.reverse/lower/upper:0x[0-9a-f]+'
			expect_sum "$what" "$e" A "$(L handler_index)" "15 1168 0"
			expect_sum "$what" "$e" A "$(L handler_error)" "9 1140 0"
			expect_sum "$what" "$e" A "$up" "1 28 0"
			expect_sum "$what" "$e" A "$(L handler_badarg)" "10 1380 0"
			only_labels "$what" "$e" A \
				"$(L handler_index)|$(L handler_error)|$(L handler_badarg)|$up"
			expect_section "$what" "$e" R
			expect_section "$what" "$e" D ;;
		load)
			expect_section "$what" "$e" A "$(L load)|8|678|0" "=memprof_chunk:2|1|64|0"
			expect_section "$what" "$e" R
			expect_section "$what" "$e" D "$(L load)|4|0|336" ;;
		cmod)
			expect_sum "$what" "$e" A "memprof_cmod_newud:0x[0-9a-f]+" "1 148 0"
			expect_sum "$what" "$e" A "$(L cmod_call)" "0 0 0"
			expect_section "$what" "$e" R
			expect_section "$what" "$e" D ;;
		cresume)
			expect_sum "$what" "$e" A "$(L crbody1)" "1 64 0"
			expect_sum "$what" "$e" A "$(L crbody2)|$(TR crbody2)" "1 88 0"
			expect_sum "$what" "$e" A "memprof_cmod_resume_alloc:0x[0-9a-f]+" "4 624 0"
			expect_sum "$what" "$e" A "memprof_cmod_resume_in_alloc:0x[0-9a-f]+" "4 624 0"
			expect_sum "$what" "$e" A "memprof_cmod_newthread_resume:0x[0-9a-f]+" \
				"8 $((2 * (lstate + 376 + 312))) 0"
			only_labels "$what" "$e" A "$(L crbody1)|$(L crbody2)|$(TR crbody2)|memprof_cmod_(resume|resume_in|newthread)_(alloc|resume):0x[0-9a-f]+"
			expect_section "$what" "$e" R ;;
		dlreuse)
			[ "$(sed -n 's/^fact dlsame //p' "$dir/$c.out")" = 1 ] ||
				fail "$what: the second library's function was not at the first's address: the case tests nothing"
			expect_sum "$what" "$e" A "memprof_reuse_alpha:0x[0-9a-f]+" "1 148 0"
			expect_sum "$what" "$e" A "memprof_reuse_beta:0x[0-9a-f]+" "1 148 0" ;;
		crecord)
			expect_sum "$what" "$e" A "keepalloc:0x[0-9a-f]+" "0 0 0" ;;
		ffi_cb)
			n=$(sed -n 's/^fact cbcalls //p' "$dir/$c.out")
			if [ -z "$n" ] || [ "$n" -lt 64 ]; then
				fail "$what: the comparator ran ${n:-no} times"
			elif [ "$jit" = off ]; then
				expect_sum "$what" "$e" A "$(L cbtable)" "$n $((n * 64)) 0"
			else
				expect_sum "$what" "$e" A "$(L cbtable)|$(TR cbtable)|$(TR cbfunc)" \
					"$n $((n * 64)) 0"
			fi ;;
		hot)
			if [ "$jit" = off ]; then
				expect_section "$what" "$e" A "$(L hot)|300|26400|0"
				expect_section "$what" "$e" R
				expect_section "$what" "$e" D
			else
				expect_sum "$what" "$e" A "$(L hot)|$(TR hot)" "300 26400 0"
				grep -Eq "^TRACE \[1\] started at @$src:${at[hot]}: [0-9]+ events" "$dir/$c.txt" ||
					fail "$what: no 'TRACE [1] started at @$src:${at[hot]}' in $(grep TRACE "$dir/$c.txt" | head -3)"
				only_labels "$what" "$e" A "$(L hot)|$(TR hot)|INTERNAL"
				only_labels "$what" "$e" R "INTERNAL"
				only_labels "$what" "$e" D "INTERNAL"
			fi ;;
		reload)
			for k in 1 2 3 4; do
				[ "$(sum "$e" A "=reload$k:1" | cut -d' ' -f1)" -ge 1 ] ||
					fail "$what: nothing on =reload$k:1 (a reloaded chunk named after another): $(grep reload "$dir/$c.txt" | head -5)"
			done ;;
		reload_lines)
			for k in 1 2 3 4; do
				[ "$(sum "$e" A "=relines$k:$k" | cut -d' ' -f1)" -ge 4 ] ||
					fail "$what: fewer than 4 allocations on =relines$k:$k: $(grep relines "$dir/$c.txt" | head -5)"
			done
			! grep -Eq '=relines([0-9]):([0-9])' "$dir/$c.txt" ||
				! grep -E '=relines([0-9]):([0-9])' "$dir/$c.txt" | sed -E 's/.*=relines([0-9]):([0-9]).*/\1 \2/' |
				awk '$1 != $2 { bad = 1 } END { exit !bad }' ||
				fail "$what: a reloaded chunk's allocations on another chunk's line: $(grep relines "$dir/$c.txt" | head -8)" ;;
		stripped)
			expect_sum "$what" "$e" A "=stripped:0" "2 1116 0"
			only_labels "$what" "$e" A "=stripped:0" ;;
		builtin)
			local x='0x[0-9a-f]+'
			expect_sum "$what" "$e" A "string\.rep:$x" "1 1028 0"
			local s3='string\.reverse/lower/upper' b5='bit\.lshift/rshift/arshift/rol/ror'
			expect_sum "$what" "$e" A "$s3:$x" "3 100 0"
			[ "$(sum "$e" A "$b5:$x" | cut -d' ' -f1)" = 1 ] ||
				fail "$what: bit.lshift's cdata not under $b5: $(grep '^A' "$e" | cut -f2 | tr '\n' ' ')"
			expect_sum "$what" "$e" A "tostring:$x" "1 32 0"
			expect_sum "$what" "$e" A "table\.concat:$x" "1 32 0"
			only_labels "$what" "$e" A "$(L builtin_gsub)|(string\.rep|$s3|$b5|tostring|table\.concat):$x" ;;
		builtin_drop)
			expect_section "$what" "$e" A "string.reverse/lower/upper:$(grep -o '0x[0-9a-f]*' "$e" | head -1)|2|68|0" ;;
		stitch)
			expect_sum "$what" "$e" A "$(L stitch)|$(TR stitch)" "300 10800 0"
			only_labels "$what" "$e" A "$(L stitch)|$(TR stitch)|INTERNAL" ;;
		retrace)
			if [ "$jit" = off ]; then
				expect_section "$what" "$e" A "$(L retrace1)|300|26400|0" "$(L retrace2)|300|26400|0"
			else
				expect_sum "$what" "$e" A "$(L retrace1)|$(TR retrace1)" "300 26400 0"
				expect_sum "$what" "$e" A "$(L retrace2)|$(TR retrace2)" "300 26400 0"
				for m in retrace1 retrace2; do
					grep -Eq "^TRACE \[1\] started at @$src:${at[$m]}: [0-9]+ events" "$dir/$c.txt" ||
						fail "$what: no 'TRACE [1] started at @$src:${at[$m]}' in $(grep TRACE "$dir/$c.txt" | head -3)"
				done
			fi ;;
		fork)
			grep -qx "fact childstop nil|profiler is not running|22" "$dir/$c.out" ||
				fail "$what: the child's stop(): $(grep childstop "$dir/$c.out" || echo none)"
			if [ "$jit" = off ]; then
				expect_sum "$what" "$e" A "$(L fork_parent1)" "100 8800 0"
				expect_sum "$what" "$e" A "$(L fork_parent2)" "200 17600 0"
			else
				expect_sum "$what" "$e" A "$(L fork_parent1)|$(TR fork_parent1)" "100 8800 0"
				expect_sum "$what" "$e" A "$(L fork_parent2)|$(TR fork_parent2)" "200 17600 0"
			fi
			grep -q "$src:${at[fork_child]}" "$dir/$c.txt" &&
				fail "$what: the child's allocations are in the parent's profile" ;;
		leak)
			build/luaprof report -q --leak-only "$dir/leak.bin" >"$dir/leakonly.txt" 2>"$dir/leakonly.err" ||
				fail "$what: report --leak-only exited $?: $(head -3 "$dir/leakonly.err")"
			[ "$(head -1 "$dir/leakonly.txt")" = "HEAP SUMMARY:" ] &&
				! grep -q '^ALLOCATIONS\|^DEALLOCATIONS' "$dir/leakonly.txt" ||
				fail "$what: --leak-only is not the heap summary alone: $(head -3 "$dir/leakonly.txt")"
			entries "$dir/leakonly.txt" >"$dir/leakonly.ent"
			if [ "$jit" = off ]; then
				# (INTERNAL may hold the VM's own blocks from before the profile that
				# its collector grew or shrank in it: the string table, a stack.)
				expect_sum "$what --leak-only" "$dir/leakonly.ent" H "$(L leak)" "300 26400 0"
				only_labels "$what --leak-only" "$dir/leakonly.ent" H "$(L leak)|INTERNAL"
				expect_section "$what" "$e" A "$(L leak)|300|26400|0" "$(L drop)|500|44000|0"
			else
				expect_sum "$what --leak-only" "$dir/leakonly.ent" H "$(L leak)|$(TR leak)" "300 26400 0"
				only_labels "$what --leak-only" "$dir/leakonly.ent" H "$(L leak)|$(TR leak)|INTERNAL"
				expect_sum "$what" "$e" A "$(L leak)|$(TR leak)" "300 26400 0"
			fi
			# The dropping line allocated and all of it was freed, by the GC (INTERNAL).
			[ "$(sum "$e" A "$(L drop)" | cut -d' ' -f1)" -gt 0 ] ||
				fail "$what: nothing allocated on the dropping line ${at[drop]}"
			grep -q "$src:${at[drop]}" "$dir/leakonly.txt" &&
				fail "$what: the dropping line ${at[drop]} is in the heap summary: $(cat "$dir/leakonly.txt")"
			only_labels "$what" "$e" D "INTERNAL"
			[ "$(sum "$e" D "INTERNAL" | cut -d' ' -f1)" -ge "$(sum "$e" A "$(L drop)" | cut -d' ' -f1)" ] ||
				fail "$what: fewer INTERNAL frees than dropped tables: $(sum "$e" D INTERNAL)" ;;
		grown)
			# The kept table: its header (64 B) and its array (20000 slots: 32769 of 8 B)
			# held by the line that made them; as many reallocations as allocations
			# and frees beyond the two live blocks.
			read -r ha hb hf < <(sum "$e" H "$(L grownmake2)")
			[ "$hb" = $((64 + 32769 * 8)) ] && [ $((ha - hf)) = 2 ] ||
				fail "$what: the kept table's line holds $hb B in $ha allocs, $hf frees; want $((64 + 32769 * 8)) B, 2 more allocs than frees"
			read -r ha hb hf < <(sum "$e" H "$(L grownfill)|$(TR grownfill)")
			[ "$hb" = $((32769 * 8)) ] && [ $((ha - hf)) = 1 ] ||
				fail "$what: the table from before the profile: its growing line holds $hb B in $ha allocs, $hf frees; want $((32769 * 8)) B, 1 more alloc than frees"
			only_labels "$what" "$e" H "$(L grownmake2)|$(L grownfill)|$(TR grownfill)|INTERNAL" ;;
		misuse)
			mkdir -p "$dir/cwd"
			# The runner's paths made absolute: it runs in another directory.
			local run=() a root=$PWD
			for a in "$@"; do [ -e "$a" ] && a=$(realpath "$a"); run+=("$a"); done
			(cd "$dir/cwd" && "${run[@]}" -e "package.cpath = '$root/build/?.so;' .. package.cpath
				require 'luaprof' local tnew = require 'table.new'
				assert(misc.memprof.available == true and misc.sysprof.available == true)
				assert(misc.memprof.start() == true)
				local t = tnew(20, 0)
				assert(misc.memprof.stop() == true)") >"$dir/cwd.out" 2>&1 &&
				report "$runner" "$jit" "$dir" default "$dir/cwd/memprof.bin" &&
				grep -q '^=(command line):5: 2 events	+232B' "$dir/default.txt" ||
				fail "$what: start() without a file name: $(head -3 "$dir/cwd.out" "$dir/default.txt" 2>/dev/null)"
			expect_sum "$what" "$e" A "$(L misuse_alloc)" "1 64 0"
			report "$runner" "$jit" "$dir" misuse-final &&
				expect_section "$what (final)" "$dir/misuse-final.ent" A ;;
		close)
			expect_section "$what" "$e" A "$(L close_alloc)|2|472|0" "$(L close_fin)|4|200|0" \
				"@$src:$(grep -n '^print("ran " .. case)$' $src | cut -d: -f1)|1|36|0";;
		esac
	done
}

# diskfull RUNNER CMD...: a 256 KiB tmpfs under 2 MiB stream buffers: the first flush fails
# (the writer thread reports it at the next one).
diskfull() {
	local runner=$1 dir="$t/$1-diskfull" what="$1, diskfull"
	shift
	mkdir -p "$dir"
	mount -t tmpfs -o size=256k tmpfs "$mnt" 2>"$t/err" || { echo "note: $what not checked: mount -t tmpfs: $(cat "$t/err")"; return; }
	"$@" $src diskfull "$dir" off "$mnt/full.bin" >"$dir/diskfull.out" 2>&1
	local rc=$?
	[ $rc = 0 ] || fail "$what: exit $rc: $(head -10 "$dir/diskfull.out")"
	grep '^FAIL' "$dir/diskfull.out" | while read -r l; do echo "FAIL: $what: $l"; done
	grep -q '^FAIL' "$dir/diskfull.out" && fails=$((fails + 1))
	grep -q "^ran diskfull\$" "$dir/diskfull.out" || fail "$what: the program did not go on: $(tail -3 "$dir/diskfull.out")"
	grep -q "^stop	nil	$mnt/full.bin: No space left on device	28\$" "$dir/diskfull.out" ||
		fail "$what: stop() after ENOSPC: $(grep '^stop' "$dir/diskfull.out")"
	local before after
	before=$(awk '$1 == "fact" && $2 == "heap_kib_before" { print $3 }' "$dir/diskfull.out")
	after=$(awk '$1 == "fact" && $2 == "heap_kib_after" { print $3 }' "$dir/diskfull.out")
	awk -v b="${before:-0}" -v a="${after:-1e9}" 'BEGIN { exit !(a - b <= 16 && b - a <= 16) }' ||
		fail "$what: heap after full collections $after KiB, before the profile $before KiB"
	build/luaprof report -q "$mnt/full.bin" >/dev/null 2>"$dir/err"
	rc=$?
	[ $rc = 3 ] || fail "$what: report of the cut stream exited $rc, want 3 (truncated): $(head -3 "$dir/err")"
	umount "$mnt"
	grep '^counters ' "$dir/diskfull.out" >"$dir/diskfull-again.out"
	report "$runner" off "$dir" diskfull-again "$dir/diskfull-again.bin" &&
		expect_section "$what, profiling again" "$dir/diskfull-again.ent" A "$(L again)|1|64|0"
}

# host RUNNER [ENV...]: lua_close with the profiler running, in an embedding host.
host() {
	local runner=$1 dir="$t/$1-host" what="$1, host" m first last grow
	shift
	mkdir -p "$dir"
	declare -A growth
	for m in memprof putback plain control; do
		env "$@" "$t/memprof_host" $m "build/?.so" "$dir" 30 >"$dir/$m.out" 2>&1 ||
			{ fail "$what: memprof_host $m failed: $(head -5 "$dir/$m.out")"; continue; }
		read -r _ first last < <(grep '^vmsize_kib ' "$dir/$m.out")
		growth[$m]=$((last - first))
	done
	# LuaJIT's arena is at least 128 KiB a state: 27 leaked arenas are megabytes.
	[ "${growth[control]:-0}" -ge 2048 ] ||
		fail "$what: the control (allocator left in place at close) grew the process by ${growth[control]:-?} KiB: the measurement cannot see a leaked arena"
	[ "${growth[memprof]:-99999}" -le 256 ] ||
		fail "$what: 27 states closed while profiling grew the process by ${growth[memprof]:-?} KiB (plain: ${growth[plain]:-?} KiB, control: ${growth[control]:-?} KiB)"
	[ "${growth[plain]:-99999}" -le 256 ] || fail "$what: plain states grew the process by ${growth[plain]:-?} KiB"
	[ "${growth[putback]:-99999}" -le 256 ] ||
		fail "$what: 27 states closed with the stopped profile's wrapper put back as their allocator grew the process by ${growth[putback]:-?} KiB (their arenas leaked)"
	# The stream of the last state is complete, with the chunk's allocations in it.
	if report "$runner" host "$dir" host-30 "$dir/host-30.bin"; then
		[ "$(sum "$dir/host-30.ent" A "=host:3|TRACE \[[0-9]+\] started at =host:3" | cut -d' ' -f1)" -ge 2000 ] ||
			fail "$what: fewer than 2000 allocations at =host:3: $(head -5 "$dir/host-30.txt")"
	fi
	# The allocator kept from lua_getallocf, called after stop and after a new object.
	env "$@" "$t/memprof_host" stale "build/?.so" "$dir" - >"$dir/stale.out" 2>&1 &&
		grep -qx survived "$dir/stale.out" ||
		fail "$what: the kept allocator after stop: exit $?: $(head -5 "$dir/stale.out")"
	# The wrapper among other allocators: wrapped over, put back by a library and started
	# again; kept from one state and called while another is profiled, in either mode.
	for cm in exact sampled; do
		timeout 60 env "$@" "$t/memprof_host" chain "build/?.so" "$dir" $cm >"$dir/chain.out" 2>&1 ||
			{ fail "$what: memprof_host chain $cm: exit $?: $(head -5 "$dir/chain.out")"; continue; }
		grep -Eq '^scoped ok [1-9][0-9]*$' "$dir/chain.out" ||
			fail "$what: chain $cm, scoped: $(cat "$dir/chain.out")"
		read -r _ _ nforeign bevents < <(grep '^foreign ok' "$dir/chain.out")
		[ "${nforeign:-x}" = 0 ] && [ "${bevents:-4000}" -lt 2000 ] ||
			fail "$what: chain $cm: $nforeign of A's blocks reached B's allocator, B's profile has $bevents events (A's 4000 must not be there)"
		grep -qx 'many ok 100' "$dir/chain.out" || fail "$what: chain $cm, 100 states: $(tail -2 "$dir/chain.out")"
		if [ $cm = exact ]; then
			read -r _ _ shared < <(grep '^shared ok' "$dir/chain.out")
			[ "${shared:-9999}" -lt 2000 ] ||
				fail "$what: chain, shared allocator: B's profile has ${shared:-no} events (A's 4000+ must not be there)"
		fi
	done
	# Profilers started by a finalizer while lua_close runs them are refused: nothing would
	# stop them, and the process could never profile again.
	env "$@" "$t/memprof_host" closing "build/?.so" "$dir" - >"$dir/closing.out" 2>&1 ||
		fail "$what: memprof_host closing: exit $?: $(head -5 "$dir/closing.out")"
	local closing_msg='profiler misuse: the Lua state is closing (its finalizers run): nothing would stop this profile'
	grep -qx "closing memprof	nil	$closing_msg	22" "$dir/closing.out" &&
		grep -qx "closing sysprof	nil	$closing_msg	22" "$dir/closing.out" &&
		grep -qx 'after memprof	true	nil	true' "$dir/closing.out" &&
		grep -qx 'after sysprof	true	nil	true' "$dir/closing.out" ||
		fail "$what: profilers started while the state closes: $(cat "$dir/closing.out")"
	# A forked child of a process running a sampled profile is not profiling: the stack
	# sampler is not held for it, and its own state can be profiled either way.
	env "$@" "$t/memprof_host" fork "build/?.so" "$dir" - >"$dir/fork.out" 2>&1 ||
		fail "$what: memprof_host fork: exit $?: $(head -5 "$dir/fork.out")"
	grep -qx 'child sysprof	true	nil	true' "$dir/fork.out" &&
		grep -qx 'child memprof	true	nil	true' "$dir/fork.out" &&
		grep -qx 'parent memprof	true	nil' "$dir/fork.out" ||
		fail "$what: profilers in a forked child: $(cat "$dir/fork.out")"
	# A state that moves to another thread while both profilers run: that thread's sampled
	# allocations are lost (counted), never walked alongside the CPU profiler's handler on
	# the first thread; no crash; sampled again once the CPU profile stopped.
	env "$@" "$t/memprof_host" migrate "build/?.so" "$dir" - >"$dir/migrate.out" 2>&1 ||
		fail "$what: memprof_host migrate: exit $?: $(head -5 "$dir/migrate.out")"
	if grep -qx 'migrate ok' "$dir/migrate.out"; then
		mlost=$(build/luaprof report -q -f info "$dir/mig.bin" | sed -n 's/^meta.samples_lost: //p')
		msmp=$(build/luaprof report -q -f info "$dir/mig.bin" | sed -n 's/^samples: //p')
		[ "${mlost:-0}" -gt 100 ] && [ "${msmp:-0}" -gt 100 ] ||
			fail "$what: a state on another thread than the CPU profiler samples: $mlost sampled allocations lost (want > 100: the second thread's), $msmp kept (want > 100: the first thread's after the CPU profile)"
	else
		fail "$what: memprof_host migrate: $(cat "$dir/migrate.out")"
	fi
	# The CPU profiler's thread gone: nothing to keep the captures from walking.
	env "$@" "$t/memprof_host" deadsampler "build/?.so" "$dir" - >"$dir/deadsampler.out" 2>&1 &&
		grep -qx 'deadsampler ok' "$dir/deadsampler.out" ||
		fail "$what: memprof_host deadsampler: $(head -5 "$dir/deadsampler.out")"
	dlost=$(build/luaprof report -q -f info "$dir/dead.bin" 2>/dev/null | sed -n 's/^meta.samples_lost: //p')
	[ "${dlost:-x}" = 0 ] ||
		fail "$what: the CPU profiler's thread exited: $dlost sampled allocations lost (want 0)"
	# Its thread exiting (held in a destructor of the host's, which runs after luaprof's):
	# the kernel still finds it, as it does for a while after pthread_join under load;
	# every sample was lost before luaprof's own destructor marked the thread gone.
	env "$@" "$t/memprof_host" exitsampler "build/?.so" "$dir" - >"$dir/exitsampler.out" 2>&1 &&
		grep -qx 'exitsampler ok' "$dir/exitsampler.out" ||
		fail "$what: memprof_host exitsampler: $(head -5 "$dir/exitsampler.out")"
	dlost=$(build/luaprof report -q -f info "$dir/exiting.bin" 2>/dev/null | sed -n 's/^meta.samples_lost: //p')
	dsmp=$(build/luaprof report -q -f info "$dir/exiting.bin" 2>/dev/null | sed -n 's/^samples: //p')
	[ "${dlost:-x}" = 0 ] && [ "${dsmp:-0}" -gt 1000 ] ||
		fail "$what: the CPU profiler's thread exiting: $dlost sampled allocations lost (want 0), $dsmp kept (want > 1000)"
	# A state closed while it shares the running profile's allocator: the sampled profile's
	# stub, then exact mode's wrapper. Its blocks are freed through it, so the profile does
	# not hold them as in use (~400 KiB; exact mode's lua_close(B) freed them past the
	# wrapper, and A's HEAP SUMMARY held them all). B's blocks were sampled into A's
	# profile (about 400 KiB allocated), and are gone.
	for mode in - exact; do
		# The host names the sampled run's profile cs.bin, the exact one's cs-exact.bin.
		if [ "$mode" = exact ]; then
			cs=closeshared-exact bin=cs-exact.bin name="closeshared exact"
		else
			cs=closeshared bin=cs.bin name=closeshared
		fi
		env "$@" "$t/memprof_host" closeshared "build/?.so" "$dir" $mode >"$dir/$cs.out" 2>&1 ||
			fail "$what: memprof_host $name: exit $?: $(head -5 "$dir/$cs.out")"
		cs_inuse=x cs_alloc=x
		if grep -qx 'closeshared ok' "$dir/$cs.out" &&
			build/luaprof report -q -f collapsed --value inuse_space -o "$dir/$cs-inuse.folded" "$dir/$bin" &&
			build/luaprof report -q -f collapsed -o "$dir/$cs-alloc.folded" "$dir/$bin"; then
			cs_inuse=$(awk '{ s += $NF } END { print s + 0 }' "$dir/$cs-inuse.folded")
			cs_alloc=$(awk '{ s += $NF } END { print s + 0 }' "$dir/$cs-alloc.folded")
		fi
		[ "$cs_alloc" != x ] && [ "$cs_alloc" -ge 300000 ] && [ "$cs_inuse" -lt 65536 ] ||
			fail "$what: $name: $cs_alloc bytes allocated (want >= 300000: B's), $cs_inuse in use (want < 64 KiB: B's blocks freed)"
	done
	# A free whose state's countdown another allocator's kept wrapper took below 0: it is
	# no sample, and its block, a live sampled one, is gone (it stayed in use until stop).
	env "$@" "$t/memprof_host" duefree "build/?.so" "$dir" - >"$dir/duefree.out" 2>&1 ||
		fail "$what: memprof_host duefree: exit $?: $(head -5 "$dir/duefree.out")"
	df_inuse=$(grep -qx 'duefree ok' "$dir/duefree.out" &&
		build/luaprof report -q -f collapsed --value inuse_objects "$dir/duefree.bin" |
		awk '/\]:3 [0-9]+$/ { s += $NF } END { print s + 0 }')
	[ "${df_inuse:-x}" = 0 ] ||
		fail "$what: duefree: ${df_inuse:-no} of the 1000 garbage tables still in use at stop (want 0)"
	# Out of memory while profiling: a refused call leaves no event, the program goes on.
	local j net
	for j in off on; do
		env "$@" "$t/memprof_host" oom "build/?.so" "$dir" $j >"$dir/oom-$j.out" 2>&1 &&
			grep -q '^ran oom$' "$dir/oom-$j.out" ||
			{ fail "$what: memprof_host oom $j failed: $(head -5 "$dir/oom-$j.out")"; continue; }
		grep -qx 'oom 4' "$dir/oom-$j.out" ||
			fail "$what, oom JIT $j: not every pcall ran out of memory: $(grep '^oom\|^refused' "$dir/oom-$j.out")"
		read -r _ _ _ _ _ ab fb < <(grep '^counters ' "$dir/oom-$j.out")
		net=$(sed -n 's/^live_delta //p' "$dir/oom-$j.out")
		[ -n "$ab" ] && [ $((ab - fb)) = "$net" ] ||
			fail "$what, oom JIT $j: the profile's allocated - freed bytes $((ab - fb)), the allocator's live bytes grew by $net"
		report "$runner" "oom JIT $j" "$dir" oom-$j
	done
	[ -n "$valgrind" ] || return
	for m in memprof memprof_malloc; do
		env "$@" valgrind --leak-check=full --error-exitcode=99 "$t/memprof_host" $m "build/?.so" \
			"$dir" 2 >"$dir/vg-$m.log" 2>&1
		local rc=$?
		[ $rc = 0 ] && grep -q 'definitely lost: 0 bytes\|All heap blocks were freed' "$dir/vg-$m.log" &&
			! grep -q 'indirectly lost: [1-9]\|possibly lost: [1-9]' "$dir/vg-$m.log" ||
			fail "$what: valgrind $m (exit $rc): $(grep -A12 'ERROR SUMMARY\|LEAK SUMMARY\|Invalid\|lost in' "$dir/vg-$m.log" | head -30)"
	done
	report "$runner" valgrind "$dir" host-2 "$dir/host-2.bin" >/dev/null
}

# -- valgrind, installed when missing and allowed.
valgrind=""
if command -v valgrind >/dev/null 2>&1; then
	valgrind=valgrind
elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 &&
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >"$t/apt.log" 2>&1; then
	valgrind=valgrind
else
	echo "note: valgrind not available: the host's leak check uses mapped memory only"
fi
canmount=""
[ "$(id -u)" = 0 ] && command -v mount >/dev/null 2>&1 && mkdir -p "$mnt" && canmount=1
[ -n "$canmount" ] || echo "note: diskfull not checked (mounting a small tmpfs needs root)"

# -- The light paths against the general one: an agent built with -DLP_MEMPROF_SELFCHECK
# compares every event a light path writes with what the general path would write.
scdir=build/selfcheck
if ! make -s BUILD=$scdir CFLAGS="-O2 -g -DLP_MEMPROF_SELFCHECK" $scdir/luaprof.so \
	>"$t/selfcheck-build.log" 2>&1; then
	fail "the self-checking agent does not build: $(tail -5 "$t/selfcheck-build.log")"
	scdir=""
fi

# selfcheck RUNNER CMD...: memprof_selfcheck.lua, JIT off and on: at least 90 % of the
# events took a light path, and none differs from the general path's.
selfcheck() {
	local runner=$1 j f ev sc bad on
	shift
	[ -n "$scdir" ] || return
	for j in off on; do
		f="$t/$runner-selfcheck-$j.bin"
		"$@" tests/integration/memprof_selfcheck.lua $scdir "$f" $j >"$f.out" 2>&1 &&
			grep -q '^ran ' "$f.out" ||
			{ fail "$runner, JIT $j, selfcheck: $(head -5 "$f.out")"; continue; }
		build/luaprof report -f info "$f" >"$f.info" 2>&1 ||
			{ fail "$runner, JIT $j, selfcheck: report -f info failed: $(head -3 "$f.info")"; continue; }
		ev=$(sed -n 's/^meta.events: //p' "$f.info")
		sc=$(sed -n 's/^meta.selfcheck_events: //p' "$f.info")
		bad=$(sed -n 's/^meta.selfcheck_bad: //p' "$f.info")
		if [ -z "$ev" ] || [ -z "$sc" ] || [ "$bad" != 0 ] || [ $((sc * 10)) -lt $((ev * 9)) ]; then
			fail "$runner, JIT $j, selfcheck: $sc of $ev events on a light path, ${bad:-?} of them unlike the general path's"
		fi
		on=$(sed -n 's/^meta.encoded_on: //p' "$f.info")
		[ "$on" = "$encoder" ] ||
			fail "$runner, JIT $j, selfcheck: events encoded on the ${on:-?}, not the $encoder"
	done
	# Allowed one CPU, the profiled thread encodes the events itself: the same stream.
	f="$t/$runner-selfcheck-cpu1.bin"
	taskset -c "$cpu1" "$@" tests/integration/memprof_selfcheck.lua $scdir "$f" off >"$f.out" 2>&1 &&
		build/luaprof report -f info "$f" >"$f.info" 2>&1 &&
		grep -qx 'complete: yes' "$f.info" ||
		{ fail "$runner, one CPU, selfcheck: $(head -5 "$f.out" "$f.info")"; return; }
	bad=$(sed -n 's/^meta.selfcheck_bad: //p' "$f.info")
	on=$(sed -n 's/^meta.encoded_on: //p' "$f.info")
	[ "$bad" = 0 ] && [ "$on" = "profiled thread" ] ||
		fail "$runner, one CPU, selfcheck: ${bad:-?} events unlike the general path's, encoded on the ${on:-?}"
}
# Exact mode's events are encoded on the profile file's thread when the process may use two
# CPUs or more: its affinity mask (nproc, without OMP_* limits) and a cgroup v2 quota along
# its hierarchy (cpu.max, a container's CPU limit) allow it, as the agent reads them.
cpus_allowed() {
	local n rel q p
	n=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
	rel=$(sed -n 's/^0:://p' /proc/self/cgroup 2>/dev/null)
	while [ -n "$rel" ]; do
		if read -r q p 2>/dev/null <"/sys/fs/cgroup${rel%/}/cpu.max" && [ "$q" != max ] &&
			[ "$q" -lt $((2 * p)) ]; then
			n=1
		fi
		[ "$rel" = / ] && break
		rel=${rel%/*}
		[ -n "$rel" ] || rel=/
	done
	echo "$n"
}
encoder="writer thread"
[ "$(cpus_allowed)" -ge 2 ] || encoder="profiled thread"
# One CPU of those allowed, for the run confined to it.
cpu1=$(taskset -pc $$ | sed 's/.*: //; s/[-,].*//')

# exits CMD...: how the Lua API's file ends when the program does. os.exit while profiling
# (exact or sampled) finishes the stream: exit() stops the profile. A program killed before
# the first buffer half reached the file leaves an empty file, not the previous profile of
# the same path looking whole (the file is emptied when the profile starts).
exits() {
	local m f
	cat >"$t/exits.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require("luaprof").memprof
local how, path = arg[1], arg[2]
assert(mp.start(path, how == "sampled" and { sample = 4096 } or nil))
local keep = {}
for i = 1, 1000 do keep[i] = { i } end
if how == "kill" then os.execute("kill -9 " .. io.open("/proc/self/stat"):read("*n")) end
os.exit(0)
EOF
	for m in exact sampled; do
		f=$t/exit-$m.bin
		LUA_CPATH= "$@" "$t/exits.lua" $m "$f" >"$f.out" 2>&1 ||
			{ fail "$*: os.exit while profiling ($m): exit $?: $(head -3 "$f.out")"; continue; }
		build/luaprof report -f info "$f" >"$f.info" 2>&1 && grep -qx 'complete: yes' "$f.info" ||
			fail "$*: os.exit while profiling ($m): the stream is not complete: $(head -5 "$f.info")"
	done
	f=$t/exit-kill.bin
	cp "$t/exit-exact.bin" "$f"
	(LUA_CPATH= "$@" "$t/exits.lua" kill "$f" >"$f.out" 2>&1; :) 2>/dev/null # no "Killed" note
	[ -f "$f" ] && ! cmp -s "$f" "$t/exit-exact.bin" && [ ! -s "$f" ] ||
		fail "$*: killed before the first write: $f holds $(stat -c %s "$f" 2>/dev/null) bytes (the old profile: $(stat -c %s "$t/exit-exact.bin"))"
}

# runner RUNNER VMNAME LSTATE HOSTENV CMD...: everything on one build.
runner() {
	local r=$1 hostenv=$4
	vmname=$2
	local lstate=$3
	shift 4
	cases "$r" off "$lstate" "$@"
	cases "$r" on "$lstate" "$@"
	[ -z "$canmount" ] || diskfull "$r" "$@"
	host "$r" $hostenv
	selfcheck "$r" "$@"
	exits env $hostenv "$@"
}

runner luajit "Debian luajit 2.1.0~beta3" 96 "" luajit
if [ -x "$lj2" ] && [ -f "$lj2lib/libluajit-5.1.so.2" ]; then
	runner luajit2 "Debian luajit2 (OpenResty)" 112 "LD_LIBRARY_PATH=$lj2lib" "$lj2"
else
	echo "note: luajit2 not checked (apt-get download luajit2 libluajit2-5.1-2 failed: $(tail -n 1 "$t/dl.log" 2>/dev/null))"
fi

# -- Finalizers that start a profile, run by the collector steps start itself sets off
# (every pending finalizer runs inside the outer start here): refused as a start while
# running. They used to start a profile that the outer start then overwrote, so that the
# outer stop found nothing running.
cat >"$t/nested.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local mp = require "luaprof".memprof
local inner, inner_path, outer_path = {}, arg[1] .. "/inner.bin", arg[1] .. "/outer.bin"
collectgarbage("stop")
for _ = 1, 2000 do
  local u = newproxy(true)
  getmetatable(u).__gc = function()
    local ok, msg = mp.start(inner_path)
    inner[#inner + 1] = ok and "started" or msg
    if ok then mp.stop() end
  end
end
collectgarbage("restart")
collectgarbage("setpause", 0)
collectgarbage("setstepmul", 100000)
assert(mp.start(outer_path))
local seen = {}
for _, r in ipairs(inner) do seen[r] = (seen[r] or 0) + 1 end
for r, n in pairs(seen) do print("inner", r, n) end
print("outer stop", mp.stop())
EOF
LUA_CPATH= luajit "$t/nested.lua" "$t" >"$t/nested.out" 2>&1 ||
	fail "nested starts: $(head -3 "$t/nested.out")"
grep -q '^inner	started' "$t/nested.out" && fail "a finalizer's start succeeded inside another start"
grep -qx 'outer stop	true' "$t/nested.out" && grep -q '^inner	profiler is running already	' "$t/nested.out" ||
	fail "nested starts: $(cat "$t/nested.out")"

[ $fails = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "ok"
