#!/bin/sh
# Integration test: luaprof's pprof output read back by a real reader, `go tool pprof`.
#
# Builds tests/integration/pprof_driver.c against build/libluaprof.a, renders a CPU and a
# memory profile with fixed stacks, and checks -raw, -top, -traces and -sample_index output.
# Needs Go (Debian golang-go; installed with apt-get when missing and running as root).
# Works offline: HOME, GOCACHE, GOPATH live in a temp dir. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init

# fail here goes to stderr and counts in $failures (the closing line sums them up); die
# fails at once.
failures=0
die() {
	echo "FAIL pprof_go: $*"
	exit 1
}
fail() {
	echo "  $*" >&2
	failures=$((failures + 1))
}

# -- Go -----------------------------------------------------------------------

if ! have go; then
	if [ "$(id -u)" != 0 ] || ! have apt-get; then
		skip "go not found and golang-go cannot be installed (needs root and apt-get)"
	fi
	echo "pprof_go: installing golang-go" >&2
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y golang-go >"$t/apt.log" 2>&1; then
		DEBIAN_FRONTEND=noninteractive apt-get update >>"$t/apt.log" 2>&1
		DEBIAN_FRONTEND=noninteractive apt-get install -y golang-go >>"$t/apt.log" 2>&1 ||
			skip "apt-get install golang-go failed: $(tail -n 1 "$t/apt.log")"
	fi
	have go || skip "golang-go installed but no go in PATH"
fi

mkdir -p "$t/home" "$t/gocache" "$t/gopath" || exit 1
export HOME="$t/home" GOCACHE="$t/gocache" GOPATH="$t/gopath" GOFLAGS=-mod=mod \
	GOTOOLCHAIN=local GOPROXY=off GOTELEMETRY=off PPROF_TMPDIR="$t"
go tool -n pprof >/dev/null 2>&1 || skip "this Go ($(go version 2>&1)) has no 'go tool pprof'"

# -- Build ----------------------------------------------------------------------

make -s build/libluaprof.a >"$t/make.log" 2>&1 || {
	cat "$t/make.log" >&2
	die "make build/libluaprof.a failed"
}
${CC:-cc} -std=c11 -Iinclude -Isrc -Ibuild/gen -D_GNU_SOURCE tests/integration/pprof_driver.c \
	build/libluaprof.a $(make -s print-ldlibs) -o "$t/pprof_driver" 2>"$t/cc.log" || {
	cat "$t/cc.log" >&2
	die "cannot compile tests/integration/pprof_driver.c"
}
"$t/pprof_driver" cpu "$t/cpu.pb.gz" || die "pprof_driver cpu failed"
"$t/pprof_driver" mem "$t/mem.pb.gz" || die "pprof_driver mem failed"
"$t/pprof_driver" wall "$t/wall.pb.gz" || die "pprof_driver wall failed"

# -- Helpers --------------------------------------------------------------------

FFFD=$(printf '\357\277\275') # U+FFFD, what the driver's "bad\xffname" must become

# pp NAME ARGS...: runs go tool pprof ARGS into $t/NAME.out.
pp() {
	local name=$1
	shift
	if ! go tool pprof "$@" >"$t/$name.out" 2>"$t/$name.err"; then
		fail "go tool pprof $* failed:"
		sed 's/^/    /' "$t/$name.err" >&2
		return 1
	fi
	# pprof tries to symbolize locations unless the mapping says it need not.
	if grep -Eiq 'symboliz|binary filename' "$t/$name.err"; then
		fail "go tool pprof $* warned:"
		sed 's/^/    /' "$t/$name.err" >&2
	fi
	return 0
}

# expect_has NAME LINE: $t/NAME.out has this exact line.
expect_has() {
	grep -Fxq -- "$2" "$t/$1.out" || fail "$1: no line '$2'"
}

# expect_rows NAME KIND: compares the KIND rows of $t/NAME.out with stdin, unordered.
#   top:    "function|flat|cum" for every -top row
#   traces: "value|leaf;...;root" for every -traces sample
#   raw:    "v1 v2 ..." values of every -raw sample
expect_rows() {
	local name=$1 kind=$2
	sort >"$t/$name.want"
	case $kind in
	top)
		awk 'rows { n = $0; for (i = 0; i < 5; i++) sub(/^ *[^ ]+/, "", n)
			    sub(/^ +/, "", n); print n "|" $1 "|" $4 }
		     /^ *flat  *flat%/ { rows = 1 }' "$t/$name.out" ;;
	traces)
		awk 'function flush() { if (v != "") print v "|" s; v = ""; s = "" }
		     /^-+\+-+$/ { flush(); in_trace = 1; next }
		     in_trace && v == "" { v = $1; n = $0; sub(/^ *[^ ]+ +/, "", n); s = n; next }
		     in_trace { n = $0; sub(/^ +/, "", n); s = s ";" n }
		     END { flush() }' "$t/$name.out" ;;
	raw)
		awk '/^Locations/ { s = 0 } s == 2 { sub(/:.*/, ""); $1 = $1; print }
		     s == 1 { s = 2 } /^Samples:/ { s = 1 }' "$t/$name.out" ;;
	esac | sort >"$t/$name.got"
	if ! cmp -s "$t/$name.got" "$t/$name.want"; then
		fail "$name: $kind rows differ (- expected, + got):"
		diff -u "$t/$name.want" "$t/$name.got" | tail -n +3 | sed 's/^/    /' >&2
	fi
}

TOP="-nodecount=1000 -nodefraction=0 -edgefraction=0"

# -- CPU profile ----------------------------------------------------------------

# The CPU profile, and the same samples under the wall clock (wall.pb.gz): the clock names
# the period type and the time column, the rest is the same. The driver's profile has
# counts alone, as a loaded one: the time is the renderer's, the default, as in Go's CPU
# profiles.
for clock in cpu wall; do
	pp ${clock}_raw -raw "$t/$clock.pb.gz" || continue
	expect_has ${clock}_raw "PeriodType: $clock nanoseconds"
	expect_has ${clock}_raw "samples/count $clock/nanoseconds[dflt]"
	expect_has ${clock}_raw "Period: 1000000"
	expect_rows ${clock}_raw raw <<-EOF
		30 30000000
		20 20000000
		40 40000000
		5 5000000
		5 5000000
	EOF
	[ $clock = cpu ] || continue
	expect_has cpu_raw "Comment: luajit app.lua (cpu)"
	# Location lines without pprof's own id: address, mapping, function, file:line, start.
	sed 's/^ *[0-9]*: //' "$t/cpu_raw.out" >"$t/cpu_locs.out"
	expect_has cpu_locs "0x41000 M=1 lj_gc_step /usr/lib/libluajit-5.1.so.2:0 s=0"
	expect_has cpu_locs "0x42000 M=1 malloc :0 s=0"
	expect_has cpu_locs "0x0 M=1 function @app.lua:10 app.lua:12 s=10"
	expect_has cpu_locs "0x0 M=1 function @app.lua:10 app.lua:15 s=10"
	expect_has cpu_locs "0x0 M=1 function =stdin:1 stdin:3 s=1"
	expect_has cpu_locs "0x0 M=1 TRACE [3] @app.lua:7 app.lua:7 s=0"
	expect_has cpu_locs "0x43000 M=1 bad${FFFD}name :0 s=0"
	if grep -q "$(printf '\377')" "$t/cpu_raw.out"; then
		fail "cpu_raw: invalid UTF-8 byte 0xff reached pprof"
	fi
done

# By default, time: 100 samples of 1 ms.
for clock in cpu wall; do
	pp ${clock}_time -top $TOP "$t/$clock.pb.gz" || continue
	expect_has ${clock}_time "Type: $clock"
	expect_has ${clock}_time "Showing nodes accounting for 100ms, 100% of 100ms total"
	expect_rows ${clock}_time top <<-EOF
		TRACE [3] @app.lua:7|40ms|40ms
		lj_gc_step|30ms|30ms
		malloc|20ms|20ms
		GC|5ms|5ms
		bad${FFFD}name|5ms|5ms
		function =stdin:1|0|90ms
		function @app.lua:10|0|50ms
		pcall|0|5ms
	EOF
done

# Function view: both lines of function @app.lua:10 merge into one function (named as
# a function: "@app.lua:10" read as a line, a main chunk as line 0; no <> around the chunk,
# which go tool pprof drops as C++ template arguments).
if pp cpu_top -top -sample_index=samples $TOP "$t/cpu.pb.gz"; then
	expect_has cpu_top "Type: samples"
	expect_has cpu_top "Showing nodes accounting for 100, 100% of 100 total"
	expect_rows cpu_top top <<-EOF
		TRACE [3] @app.lua:7|40|40
		lj_gc_step|30|30
		malloc|20|20
		GC|5|5
		bad${FFFD}name|5|5
		function =stdin:1|0|90
		function @app.lua:10|0|50
		pcall|0|5
	EOF
fi

# Line view: the current lines of @app.lua:10 stay apart.
if pp cpu_lines -top -lines -sample_index=samples $TOP "$t/cpu.pb.gz"; then
	expect_rows cpu_lines top <<-EOF
		TRACE [3] @app.lua:7 app.lua:7|40|40
		lj_gc_step /usr/lib/libluajit-5.1.so.2|30|30
		malloc|20|20
		GC|5|5
		bad${FFFD}name|5|5
		function =stdin:1 stdin:3|0|90
		function @app.lua:10 app.lua:12|0|30
		function @app.lua:10 app.lua:15|0|20
		pcall|0|5
	EOF
fi

# Stacks, leaf first.
if pp cpu_traces -traces -sample_index=samples "$t/cpu.pb.gz"; then
	expect_rows cpu_traces traces <<-EOF
		30|lj_gc_step;function @app.lua:10;function =stdin:1
		20|malloc;function @app.lua:10;function =stdin:1
		40|TRACE [3] @app.lua:7;function =stdin:1
		5|GC;pcall
		5|bad${FFFD}name
	EOF
fi

# The second column.
if pp cpu_ns -top -sample_index=cpu -unit=ns $TOP "$t/cpu.pb.gz"; then
	expect_has cpu_ns "Type: cpu"
	expect_rows cpu_ns top <<-EOF
		TRACE [3] @app.lua:7|40000000ns|40000000ns
		lj_gc_step|30000000ns|30000000ns
		malloc|20000000ns|20000000ns
		GC|5000000ns|5000000ns
		bad${FFFD}name|5000000ns|5000000ns
		function =stdin:1|0|90000000ns
		function @app.lua:10|0|50000000ns
		pcall|0|5000000ns
	EOF
fi

# -- Memory profile -------------------------------------------------------------

if pp mem_raw -raw "$t/mem.pb.gz"; then
	expect_has mem_raw "Comment: luajit app.lua (memory)"
	expect_has mem_raw \
		"alloc_space/bytes alloc_objects/count inuse_space/bytes[dflt] inuse_objects/count"
	expect_rows mem_raw raw <<-EOF
		4096 4 1024 1
		65536 16 0 0
		512 8 256 4
		64 1 64 1
		128 2 0 0
	EOF
fi

# default_sample_type selects inuse_space.
if pp mem_top -top -unit=B $TOP "$t/mem.pb.gz"; then
	expect_has mem_top "Type: inuse_space"
	expect_has mem_top "Showing nodes accounting for 1344B, 100% of 1344B total"
	expect_rows mem_top top <<-EOF
		lj_gc_step|1024B|1024B
		TRACE [3] @app.lua:7|256B|256B
		GC|64B|64B
		function =stdin:1|0|1280B
		function @app.lua:10|0|1024B
		pcall|0|64B
	EOF
fi

if pp mem_alloc_space -top -sample_index=alloc_space -unit=B $TOP "$t/mem.pb.gz"; then
	expect_has mem_alloc_space "Type: alloc_space"
	expect_rows mem_alloc_space top <<-EOF
		malloc|65536B|65536B
		lj_gc_step|4096B|4096B
		TRACE [3] @app.lua:7|512B|512B
		bad${FFFD}name|128B|128B
		GC|64B|64B
		function =stdin:1|0|70144B
		function @app.lua:10|0|69632B
		pcall|0|64B
	EOF
fi

if pp mem_alloc_objects -traces -sample_index=alloc_objects "$t/mem.pb.gz"; then
	expect_has mem_alloc_objects "Type: alloc_objects"
	expect_rows mem_alloc_objects traces <<-EOF
		4|lj_gc_step;function @app.lua:10;function =stdin:1
		16|malloc;function @app.lua:10;function =stdin:1
		8|TRACE [3] @app.lua:7;function =stdin:1
		1|GC;pcall
		2|bad${FFFD}name
	EOF
fi

if pp mem_inuse_objects -top -sample_index=inuse_objects $TOP "$t/mem.pb.gz"; then
	expect_has mem_inuse_objects "Type: inuse_objects"
	expect_rows mem_inuse_objects top <<-EOF
		TRACE [3] @app.lua:7|4|4
		lj_gc_step|1|1
		GC|1|1
		function =stdin:1|0|5
		function @app.lua:10|0|1
		pcall|0|1
	EOF
fi

# -- A Tarantool CPU stream: no sampling interval --------------------------------

# Counts alone, no period (it was "PeriodType: cpu nanoseconds", "Period: 0"), and a comment
# saying why.
sp=../shared/vectors/tarantool/sp_fib_L.bin
[ -f $sp ] || sp=examples/fib-cpu.bin
if [ -x build/luaprof ] && build/luaprof report -q $sp -o "$t/sp.pb.gz" 2>"$t/sp.err"; then
	if pp sp_raw -raw "$t/sp.pb.gz"; then
		expect_has sp_raw "Comment: sampling interval unknown (the stream records none): values are sample counts, not time"
		expect_has sp_raw "samples/count[dflt]"
		grep -q "nanoseconds" "$t/sp_raw.out" && fail "sp_raw: nanoseconds without an interval: $(grep nanoseconds "$t/sp_raw.out")"
	fi
else
	fail "luaprof report $sp -o sp.pb.gz: $(cat "$t/sp.err")"
fi

# -- A recorded profile's clock -------------------------------------------------

# raw_sums NAME: "count ns period" of $t/NAME.out (-raw): the two columns' totals and the
# period.
raw_sums() {
	awk '/^Period:/ { p = $2 } /^Locations/ { s = 0 } s == 2 { sub(/:.*/, ""); c += $1; n += $2 }
	     s == 1 { s = 2 } /^Samples:/ { s = 1 } END { printf "%d %.0f %d\n", c, n, p }' \
		"$t/$1.out"
}

# info BIN KEY: the value of KEY in luaprof report -f info's output.
info() {
	build/luaprof report "$1" -f info 2>/dev/null | sed -n "s/^$2: //p"
}

# count BIN KEY: a count of luaprof report -f info's output, 0 when absent.
count() {
	local v
	v=$(info "$1" "$2")
	echo "${v:-0}"
}

# The loader passes the stream's clock on: a --clock wall profile's period is wall time,
# and its time column too. Each sample stands for the profile's interval: the nanoseconds
# total is samples x interval (x the ticks without a sample of their own, paced, dropped
# or overruns, over the samples: none here, on most runs).
if command -v luajit >/dev/null 2>&1 && [ -x build/luaprof ] && [ -f build/luaprof.so ]; then
	for clock in cpu wall; do
		build/luaprof record -q --clock $clock --raw "$t/rec-$clock.bin" \
			-o "$t/rec-$clock.pb.gz" -- \
			luajit -e 'local s = 0 for i = 1, 2e7 do s = s + i % 3 end' >/dev/null 2>"$t/rec.err" ||
			fail "record --clock $clock: $(cat "$t/rec.err")"
		pp rec_$clock -raw "$t/rec-$clock.pb.gz" || continue
		expect_has rec_$clock "PeriodType: $clock nanoseconds"
		expect_has rec_$clock "samples/count $clock/nanoseconds[dflt]"
		b=$t/rec-$clock.bin
		set -- $(raw_sums rec_$clock)
		n=$(info "$b" samples) iv=$(info "$b" meta.interval_ns)
		extra=$(($(count "$b" meta.overruns) + $(count "$b" meta.paced) + $(count "$b" meta.dropped)))
		[ "$1" = "$n" ] || fail "rec_$clock: $1 samples in pprof, $n in the profile"
		[ "$extra" != 0 ] || [ "$3" = "$iv" ] ||
			fail "rec_$clock: period $3, the profile's interval $iv"
		[ "$2" = "$(($1 * $3))" ] || fail "rec_$clock: $2 ns in all, not $1 samples x $3 ns"
		[ "$n" -gt 0 ] || fail "rec_$clock: no sample"
	done

	# time_matches NAME: the time column of $t/NAME.pb.gz adds up to the thread's CPU time
	# (meta.thread_cpu_ns of $t/NAME.bin), within 20 % (samples are whole intervals).
	time_matches() {
		pp $1 -raw "$t/$1.pb.gz" || return
		set -- $(raw_sums $1) "$1"
		local cpu
		cpu=$(count "$t/$4.bin" meta.thread_cpu_ns)
		if [ $(($2 * 10)) -lt $((cpu * 8)) ] || [ $(($2 * 10)) -gt $((cpu * 12)) ]; then
			fail "$4: $2 ns of time in $1 samples of $3 ns, the thread ran $cpu ns"
		fi
	}

	# A read of 64 MiB from /dev/zero is one system call longer than the 1 ms interval:
	# the perf clock's one signal at its end is written as a sample per interval it
	# lasted, each of which stands for the interval.
	cat >"$t/zero.lua" <<-'EOF'
		local f = assert(io.open("/dev/zero", "rb"))
		for i = 1, 10 do local s = f:read(64 * 1024 * 1024) end
		f:close()
	EOF
	build/luaprof record -q --rate 1000 --raw "$t/zero.bin" -o "$t/zero.pb.gz" -- \
		luajit "$t/zero.lua" >/dev/null 2>"$t/rec.err" || fail "record zero.lua: $(cat "$t/rec.err")"
	if [ "$(info "$t/zero.bin" meta.timer)" = "perf task-clock" ]; then
		time_matches zero
	else
		echo "pprof_go: note: no perf clock here, a system call's ticks not checked" >&2
	fi

	# The POSIX CPU timer at 1 kHz, checked at the kernel's tick (250 Hz on Debian): the
	# kernel merges expirations into one signal (meta.overruns), written as one sample, so
	# a sample stands for about 4 ms, not the 1 ms asked (pprof's period: the mean).
	printf 'local x = 0 for i = 1, 5e7 do x = x + i %% 7 end\n' >"$t/busy.lua"
	LUAPROF_TIMER=posix build/luaprof record -q --rate 1000 --raw "$t/busy.bin" \
		-o "$t/busy.pb.gz" -- luajit -joff "$t/busy.lua" >/dev/null 2>"$t/rec.err" ||
		fail "record busy.lua: $(cat "$t/rec.err")"
	time_matches busy
else
	echo "pprof_go: note: luajit or build/luaprof missing, a recorded profile's clock not checked" >&2
fi

if [ "$failures" -ne 0 ]; then
	echo "FAIL pprof_go: $failures check(s) failed ($(go version))"
	exit 1
fi
echo "PASS pprof_go ($(go version | cut -d' ' -f3))"
exit 0
