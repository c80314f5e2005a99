#!/usr/bin/env bash
# `luaprof record` and `luaprof report` at the edges of their options: an option that would
# be parsed and then do nothing is refused, with what it does and what to give instead,
# before the program runs. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/record.sh
record_setup

echo 'local f = io.open(arg[1], "w") f:write("ran") f:close()
local s, t = 0, os.clock() while os.clock() - t < 0.1 do s = s + 1 end' >"$t/mark.lua"

# refused MESSAGE ARGS...: record ARGS exits 1 with MESSAGE (a whole line), the program not run.
refused() {
	local msg=$1
	shift
	rm -f "$t/ran"
	(cd "$t" && "$lp" record "$@" -- luajit mark.lua ran) >/dev/null 2>"$t/err"
	local rc=$?
	[ $rc = 1 ] || fail "record $*: exit $rc, want 1"
	grep -qxF "luaprof record: $msg" "$t/err" || fail "record $*: said $(cat "$t/err")"
	[ -e "$t/ran" ] && fail "record $*: the program ran"
}
# ran ARGS...: record ARGS runs the program and exits 0.
ran() {
	rm -f "$t/ran"
	(cd "$t" && "$lp" record "$@" -- luajit mark.lua ran) >"$t/out" 2>"$t/err"
	local rc=$?
	[ $rc = 0 ] && [ -e "$t/ran" ] || fail "record $*: exit $rc: $(cat "$t/err")"
}

# -q leaves the summary out, and with it the list whose length -n gives (it was ignored).
refused "-n 5 is the length of the summary's list, which -q leaves out: give one or the other (-n is the list's length only with -f top)" \
	-q -n 5 -o q.svg
refused "-n 3 is the length of the summary's list, which -q leaves out: give one or the other (-n is the list's length only with -f top)" \
	--memory --sample 4K -q -n 3 -o q.folded
ran -q -n 0 -o q.svg
ran -q -n 5 -f top -o q.txt

# -n 0 on a top list is every row, in report (it was refused there) and in record -f top
# (it gave the default 20), CPU and memory alike; on annotate, every file. (record's -n 0
# on the summary's list: none, agent_record.sh.) app.lua's profile has more than 20 frames.
# rows FILE: the rows of the top list in FILE.
rows() { grep -Ec '^ *[0-9.]+% +[0-9.]+( [KMG]i?B| B)? +[0-9.]+%' "$1"; }
(cd "$t" && "$lp" record -q -f top -n 0 -o top0.txt --raw top0.bin -- luajit "$OLDPWD/examples/app.lua" 0.3) \
	>/dev/null 2>"$t/err" || fail "record -f top -n 0: $(cat "$t/err")"
"$lp" report -q "$t/top0.bin" -f top -n 1000000 >"$t/all.txt"
all=$(rows "$t/all.txt")
[ "$all" -gt 20 ] || fail "app.lua's profile has $all frames, not more than 20: -n 0 not told from 20"
[ "$(rows "$t/top0.txt")" = "$all" ] && ! grep -q omitted "$t/top0.txt" ||
	fail "record -f top -n 0: $(rows "$t/top0.txt") rows of $all: $(tail -2 "$t/top0.txt")"
for n in "-n 0" "--limit 0" "--top 0"; do
	"$lp" report -q "$t/top0.bin" -f top $n >"$t/r0.txt" 2>"$t/err" || fail "report -f top $n: $(cat "$t/err")"
	[ "$(rows "$t/r0.txt")" = "$all" ] && ! grep -q omitted "$t/r0.txt" ||
		fail "report -f top $n: $(rows "$t/r0.txt") rows of $all"
done
"$lp" report -q "$t/top0.bin" -f top -n 20 >"$t/r20.txt" && [ "$(rows "$t/r20.txt")" = 20 ] ||
	fail "report -f top -n 20: $(rows "$t/r20.txt") rows"
(cd "$t" && "$lp" record -q --memory --sample 1K -f top -n 0 -o mtop0.txt --raw mtop0.bin -- \
	luajit "$OLDPWD/examples/app.lua" 0.3) >/dev/null 2>"$t/err" || fail "record --memory -f top -n 0: $(cat "$t/err")"
"$lp" report -q "$t/mtop0.bin" -f top -n 1000000 >"$t/mall.txt"
[ "$(rows "$t/mtop0.txt")" = "$(rows "$t/mall.txt")" ] && ! grep -q omitted "$t/mtop0.txt" ||
	fail "record --memory -f top -n 0: $(rows "$t/mtop0.txt") rows, all: $(rows "$t/mall.txt")"
"$lp" report -q "$t/top0.bin" -f annotate -n 0 >"$t/a0.txt" 2>"$t/err" && ! grep -q omitted "$t/a0.txt" ||
	fail "report -f annotate -n 0: $(cat "$t/err") $(grep omitted "$t/a0.txt")"
"$lp" report -q "$t/top0.bin" -f collapsed -n 0 >/dev/null 2>"$t/err" &&
	fail "report -f collapsed -n 0: accepted"
grep -qx "luaprof report: -n applies to -f top (the number of rows) and -f annotate (of files), not to -f collapsed" "$t/err" ||
	fail "report -f collapsed -n 0: said $(cat "$t/err")"
"$lp" report -q "$t/top0.bin" -f top -n -1 >/dev/null 2>"$t/err" && fail "report -n -1: accepted"
grep -qx "luaprof report: -n (--limit, --top) expects a number from 0 (all) to 1000000, not '-1'" "$t/err" ||
	fail "report -n -1: said $(cat "$t/err")"
"$lp" report --help | grep -q 'top: print N rows (default 20, 0 all of them' ||
	fail "report --help does not say what -n 0 does"

# A rendering that cannot be written (a full disk): the message names where it went (it
# said "top: write error", "cannot write collapsed stacks" or "cannot write the report"),
# and record says the profile is kept in the raw stream, which renders.
if [ -w /dev/full ]; then
	for opts in "-f collapsed" "-f pprof" "--memory" "--memory -f collapsed" "--memory --sample 1K"; do
		rm -f "$t/luaprof.bin"
		(cd "$t" && "$lp" record -q $opts -o /dev/full -- luajit "$OLDPWD/examples/app.lua" 0.2) \
			>/dev/null 2>"$t/err"
		rc=$?
		[ $rc = 1 ] && grep -qx 'luaprof record: cannot write /dev/full: No space left on device' "$t/err" &&
			grep -qx 'luaprof record: the profile is kept in the raw stream luaprof.bin: `luaprof report luaprof.bin -o FILE` renders it' "$t/err" ||
			fail "record $opts -o /dev/full: exit $rc: $(cat "$t/err")"
		"$lp" report -q "$t/luaprof.bin" -f top >/dev/null 2>"$t/err" ||
			fail "record $opts -o /dev/full: the raw stream does not render: $(cat "$t/err")"
	done
	for f in top collapsed pprof flamegraph memprof info; do
		in=top0.bin
		[ $f = memprof ] && { (cd "$t" && "$lp" record -q --memory -o m.txt -- luajit mark.lua ran); in=m.bin; }
		"$lp" report -q "$t/$in" -f $f -o /dev/full 2>"$t/err"
		rc=$?
		[ $rc = 1 ] && grep -qx 'luaprof report: cannot write /dev/full: No space left on device' "$t/err" ||
			fail "report -f $f -o /dev/full: exit $rc: $(cat "$t/err")"
		[ $f = pprof ] || [ $f = flamegraph ] && continue # not to standard output: tested above
		"$lp" report -q "$t/$in" -f $f >/dev/full 2>"$t/err"
		rc=$?
		[ $rc = 1 ] && grep -qx 'luaprof report: cannot write standard output: No space left on device' "$t/err" ||
			fail "report -f $f >/dev/full: exit $rc: $(cat "$t/err")"
	done
fi

# A raw stream that cannot be read back (the program put a directory in its place) is no
# profile kept: record says why it cannot read it, not that the raw stream renders.
cat >"$t/dir.lua" <<'EOF'
local keep = {} for i = 1, 2000 do keep[i] = { i } end
os.remove(arg[1]) assert(os.execute("mkdir " .. arg[1]))
EOF
for opts in "--memory -o d.txt" "-o d.svg"; do
	rm -rf "$t/d.bin"
	(cd "$t" && "$lp" record -q $opts -- luajit dir.lua d.bin) >/dev/null 2>"$t/err"
	rc=$?
	[ $rc = 1 ] && grep -q 'd.bin.*Is a directory' "$t/err" && ! grep -q 'kept in the raw stream' "$t/err" ||
		fail "record $opts, the raw stream a directory: exit $rc: $(cat "$t/err")"
done
rm -rf "$t/d.bin"

# A profile at -o (another run's raw stream, a slip of the name) is not replaced by a
# rendering: report and record refuse it (record before the program runs); a text file
# that merely starts with "ljs" is no profile, and is replaced as any output is.
# kept_over NAME KEEP WHAT: report -o NAME and record -o NAME (a profile, WHAT) are refused,
# NAME left as KEEP, no raw stream made.
kept_over() {
	local name=$1 keep=$2 what=$3 rc
	"$lp" report -q "$t/top0.bin" -f top -o "$t/$name" >/dev/null 2>"$t/err"
	rc=$?
	[ $rc = 1 ] && grep -qx "luaprof report: -o $t/$name holds a profile (a raw stream): the report would replace it; give -o another name" "$t/err" ||
		fail "report -o $what: exit $rc: $(cat "$t/err")"
	cmp -s "$keep" "$t/$name" || fail "report -o $what: the profile was replaced"
	refused "-o $name holds a profile (a raw stream): the rendering would replace it; give -o another name (luaprof report $name renders it)" \
		-f collapsed -o "$name" --raw new.bin
	cmp -s "$keep" "$t/$name" || fail "record -o $what: the profile was replaced"
	[ -e "$t/new.bin" ] && fail "record -o $what: the raw stream was made"
}
cp "$t/top0.bin" "$t/other.bin"
kept_over other.bin "$t/top0.bin" PROFILE
ln -s other.bin "$t/link.txt"
"$lp" report -q "$t/top0.bin" -o "$t/link.txt" >/dev/null 2>"$t/err" && fail "report -o LINK-TO-PROFILE: exit 0"
cmp -s "$t/top0.bin" "$t/other.bin" || fail "report -o LINK-TO-PROFILE: the profile was replaced"
printf 'ljs notes\n' >"$t/notes.txt"
"$lp" report -q "$t/top0.bin" -f top -o "$t/notes.txt" 2>"$t/err" && grep -q '^Source:' "$t/notes.txt" ||
	fail "report -o TEXT starting with ljs: $(cat "$t/err")"
# A gzip-compressed profile (which report reads) is one too; gzipped text is not.
gzip -c "$t/top0.bin" >"$t/other.bin.gz"
cp "$t/other.bin.gz" "$t/keep.gz"
kept_over other.bin.gz "$t/keep.gz" GZIPPED-PROFILE
printf 'ljs notes\n' | gzip -c >"$t/notes.gz"
"$lp" report -q "$t/top0.bin" -f top -o "$t/notes.gz" 2>"$t/err" && grep -q '^Source:' "$t/notes.gz" ||
	fail "report -o GZIPPED-TEXT: $(cat "$t/err")"

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "cli_edges: all checks passed"
