#!/usr/bin/env bash
# `luaprof record --memory` (exact mode) rendered as a graph (flame graph, collapsed, pprof,
# speedscope): each allocation is at its site alone, with no caller, so the "flame graph"
# is one level. record and report say so and that --sample records call stacks; not for
# the text reports (memprof, top, annotate), nor in sampled mode, nor when the trace note
# already sends the user to sampled mode. A user looking for who calls the leaking line had a flat
# graph and no word why.
# Also what a user reads of these sites elsewhere: go tool pprof's functions and lines
# (--functions: a main chunk at line 1), a short profile's length, and the note on bytes
# allocated in code no symbol names (a stripped luajit's pmain), in both modes.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/record.sh
record_setup

cat >"$t/calls.lua" <<'LUA'
local keep = {}
local function make(i) return { i } end
local function store(i) keep[#keep + 1] = make(i) end
for i = 1, 300 do store(i) end
LUA
note='exact mode records where each allocation is made, not who called it'
rec() { (cd "$t" && "$lp" record --memory "$@" -- luajit -joff calls.lua) >/dev/null 2>"$t/err"; }

for o in a.svg a.folded a.pb.gz a.json; do
	rec -o "$o" || fail "record --memory -o $o: $(cat "$t/err")"
	[ "$(grep -c "$note" "$t/err")" = 1 ] && grep -q -- '--sample 512K records call stacks' "$t/err" ||
		fail "record --memory -o $o: not one note on the one-frame stacks: $(cat "$t/err")"
done
# go tool pprof names the functions as functions (the rows add up their lines): the main
# chunk's was "@calls.lua:0", a line 0, make's "@calls.lua:2", read as the line of its
# definition, where the memprof report names allocating lines so.
if have go; then
	PPROF_TMPDIR="$t" go tool pprof -top -sample_index=alloc_space "$t/a.pb.gz" >"$t/pp.out" 2>"$t/pp.err" ||
		fail "go tool pprof -top: $(cat "$t/pp.err")"
	grep -Eq ' main chunk @calls\.lua$' "$t/pp.out" && grep -Eq ' function @calls\.lua:2$' "$t/pp.out" &&
		! grep -q 'calls\.lua:0' "$t/pp.out" || fail "go tool pprof -top: $(cat "$t/pp.out")"
	# By function (--functions), a function's line is its first one, the main chunk's 1,
	# where it starts: it was 0, which pprof takes for no line (-lines showed none, -list
	# put the chunk's bytes on no line).
	"$lp" report -q --functions "$t/a.bin" -o "$t/f.pb.gz" || fail "report --functions -o f.pb.gz"
	PPROF_TMPDIR="$t" go tool pprof -top -lines -sample_index=alloc_space "$t/f.pb.gz" >"$t/pp.out" 2>"$t/pp.err" ||
		fail "go tool pprof -top -lines: $(cat "$t/pp.err")"
	grep -Eq ' main chunk @calls\.lua calls\.lua:1$' "$t/pp.out" &&
		grep -Eq ' function @calls\.lua:2 calls\.lua:2$' "$t/pp.out" ||
		fail "go tool pprof -top -lines of --functions: $(cat "$t/pp.out")"
fi
# report says the same of a graph of the stream, not of its memprof report.
"$lp" report "$t/a.bin" -o "$t/b.svg" 2>"$t/err" && grep -q "^luaprof report: note: $note" "$t/err" ||
	fail "report -o b.svg: no note on the one-frame stacks: $(cat "$t/err")"
"$lp" report "$t/a.bin" >/dev/null 2>"$t/err" && ! grep -q "$note" "$t/err" ||
	fail "report (memprof): $(cat "$t/err")"
# The stacks are one frame deep indeed (what the note says).
grep -q ';' "$t/a.folded" && fail "exact mode's collapsed stacks have callers: $(head -3 "$t/a.folded")"
for a in "-o a.txt" "-f top -o a.top" "--leak-only"; do
	# shellcheck disable=SC2086
	rec $a || fail "record --memory $a: $(cat "$t/err")"
	grep -q "$note" "$t/err" && fail "record --memory $a: the note on graphs: $(grep note "$t/err")"
done
rec --sample 1K -o s.svg || fail "record --memory --sample 1K: $(cat "$t/err")"
grep -q "$note" "$t/err" && fail "sampled mode: the note on exact mode: $(grep note "$t/err")"
rec -q -o q.svg || fail "record -q --memory: $(cat "$t/err")"
[ -s "$t/err" ] && fail "record -q --memory: $(cat "$t/err")"

# A profile shorter than a millisecond (this tiny script's, about 0.3 ms here) gives its
# length, not "0.000 s profiled", as if nothing had run (a machine slow enough to take a
# millisecond passed before too).
printf 'local x = {}\n' >"$t/tiny.lua"
(cd "$t" && "$lp" record --memory -o tiny.txt -- luajit tiny.lua) >/dev/null 2>"$t/err" ||
	fail "record --memory tiny.lua: $(cat "$t/err")"
secs=$(sed -n 's/^luaprof record: \([0-9.]*\) s profiled, .*/\1/p' "$t/err")
awk -v s="$secs" 'BEGIN { exit !(s + 0 > 0) }' ||
	fail "record --memory tiny.lua: $(head -1 "$t/err")"

# Bytes allocated in code of an object no symbol names: a stripped luajit's pmain
# (luajit+0x92c0 on Debian's) runs luaL_openlibs and the rest of the startup, most of this
# tiny script's bytes. A tenth of them or more, and record and report say how to have it
# named, in either mode, as record of a CPU profile does (they said nothing).
nosym="^luaprof (record|report): note: [0-9.]+% of the bytes are allocated in code of .*/luajit[^ ]* that no symbol names here \(shown as luajit\+0xOFFSET\): with its separate debug file installed \(Debian: its package's -dbgsym\), a new profile names it$"
for mode in exact sampled; do
	opt=; [ $mode = sampled ] && opt="--sample 1"
	# shellcheck disable=SC2086
	(cd "$t" && "$lp" record --memory $opt -f top -o ns.top -- luajit tiny.lua) >/dev/null 2>"$t/rec.err" ||
		fail "record --memory $opt tiny.lua: $(cat "$t/rec.err")"
	"$lp" report "$t/ns.bin" -f top -o "$t/ns2.top" 2>"$t/rep.err" || fail "report $mode: $(cat "$t/rep.err")"
	"$lp" report -q "$t/ns.bin" -f collapsed >"$t/ns.folded" || fail "report -f collapsed ($mode)"
	share=$(awk '{ n = $NF; all += n; k = split($0, f, ";"); sub(/ [0-9]+$/, "", f[k]);
		       if (f[k] ~ /^luajit\+0x[0-9a-f]+$/) u += n } END { print all ? int(100 * u / all) : 0 }' "$t/ns.folded")
	[ $mode = exact ] && exact_share=$share
	if [ "$share" -ge 10 ]; then
		for e in rec rep; do
			grep -Eq "$nosym" "$t/$e.err" ||
				fail "$mode: $share% of the bytes in luajit+0x... and no note ($e): $(cat "$t/$e.err")"
		done
	else
		grep -q "no symbol names here" "$t/rec.err" "$t/rep.err" &&
			fail "$mode: a note for $share% of the bytes: $(cat "$t/rec.err" "$t/rep.err")"
		echo "$name: note: luajit here is named (${share}% of the bytes unnamed): the note's presence not checked" >&2
	fi
done
# The memprof report too, the exact mode's default, from record and from report.
(cd "$t" && "$lp" record --memory -o ns.txt -- luajit tiny.lua) >/dev/null 2>"$t/rec.err" ||
	fail "record --memory -o ns.txt: $(cat "$t/rec.err")"
"$lp" report "$t/ns.bin" -o "$t/ns2.txt" 2>"$t/rep.err" || fail "report ns.bin: $(cat "$t/rep.err")"
if [ "$exact_share" -ge 10 ]; then
	grep -Eq "$nosym" "$t/rec.err" && grep -Eq "$nosym" "$t/rep.err" ||
		fail "the memprof report: no note: $(cat "$t/rec.err" "$t/rep.err")"
fi

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
