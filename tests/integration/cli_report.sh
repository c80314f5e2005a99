#!/usr/bin/env bash
# `luaprof report` end to end: Tarantool's own streams give Tarantool's own reports, every
# format is produced from them, and bad input gets a one-line message naming the file and
# byte offset with the documented exit status, leaving an existing output untouched.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
lp=build/luaprof
vec=../shared/vectors/tarantool
ex=examples
# expect STATUS PATTERN -- command...: checks exit status and that stderr matches.
expect() {
	local want=$1 pat=$2
	shift 3
	"$@" >"$t/out" 2>"$t/err"
	local rc=$?
	[ "$rc" -eq "$want" ] || fail "$* exited $rc, want $want: $(cat "$t/err")"
	grep -Eq -- "$pat" "$t/err" || fail "$*: stderr does not match /$pat/: $(cat "$t/err")"
}

need_build luaprof
# The bundled examples are copies of the vectors; use the vectors when shared/ is there.
[ -d $vec ] || vec=""
mp=${vec:+$vec/mp_leak.bin}; mp=${mp:-$ex/leak-mem.bin}
sp=${vec:+$vec/sp_fib_L.bin}; sp=${sp:-$ex/fib-cpu.bin}

# -- Tarantool's memprof vectors: byte-identical reports.
if [ -n "$vec" ]; then
	$lp report -q $mp >"$t/mp.txt" || fail "memprof report failed"
	cmp -s "$t/mp.txt" $vec/mp_leak.expected.txt || fail "memprof report differs: $(diff "$t/mp.txt" $vec/mp_leak.expected.txt | head)"
	$lp report -q --leak-only $mp >"$t/leak.txt" || fail "leak-only report failed"
	cmp -s "$t/leak.txt" $vec/mp_leak.leak.expected.txt || fail "leak-only report differs"
fi
$lp report -q $mp -f memprof --human-readable | grep -q '^@mp_leak.lua:5 holds 20.41KiB: 309 allocs, 8 frees$' \
	|| fail "human-readable HEAP SUMMARY"

# -- The sysprof vector parses completely, with the VM-state split Tarantool recorded.
$lp report $sp -f top >"$t/top.txt" 2>"$t/err" || fail "sysprof top failed: $(cat "$t/err")"
# Its summary starts as report's notes and errors do ("luaprof report:"; it was "luaprof:").
grep -qx "luaprof report: $sp: 106 CPU samples (INTERP 44.3%, LFUNC 54.7%, FFUNC 0.9%), 5719 symbols" "$t/err" || fail "sysprof summary: $(cat "$t/err")"
$lp report -q $sp --split -f collapsed >"$t/split.txt" || fail "split"
[ "$(awk '{s += $NF} END {print s}' "$t/split.txt")" = 106 ] || fail "split counts do not add up to 106"
for st in INTERP LFUNC FFUNC; do
	grep -q "^$st;\|^$st " "$t/split.txt" || fail "--split has no $st root"
done
grep -q '^LFUNC;pmain;@sp_fib.lua:0;@sp_fib.lua:3;@sp_fib.lua:2;@sp_fib.lua:2' "$t/split.txt" \
	|| fail "merged Lua stack missing: $(head -3 "$t/split.txt")"

# Tarantool's streams record no count of dropped samples: nothing is said of drops ("Dropped:
# 0" claimed none), in the text reports and the flame graph's subtitle.
$lp report -q $sp -f flamegraph -o "$t/fg.svg" || fail "sysprof flamegraph"
$lp report -q $mp -f top >"$t/mtop.txt" || fail "memprof top"
! grep -qi 'dropped' "$t/top.txt" "$t/mtop.txt" "$t/fg.svg" ||
	fail "Tarantool's streams record no drops: $(grep -hi -m1 'dropped' "$t/top.txt" "$t/mtop.txt" "$t/fg.svg" | cut -c1-160)"

# -- Every format, inferred from the extension.
for out in cpu.svg cpu.folded cpu.pb.gz cpu.json cpu.txt; do
	$lp report -q $sp -o "$t/$out" || fail "report -o $out"
	[ -s "$t/$out" ] || fail "$out is empty"
done
head -c 5 "$t/cpu.svg" | grep -q '<?xml\|<svg' || fail "svg output is not SVG"
# .html (async-profiler's habit): the same flame graph in a web page, not refused.
$lp report -q $sp -o "$t/cpu.html" || fail "report -o cpu.html"
[ "$(head -n 1 "$t/cpu.html")" = '<!DOCTYPE html>' ] && grep -q '^<svg xmlns' "$t/cpu.html" &&
	[ "$(tail -n 1 "$t/cpu.html")" = '</body></html>' ] && ! grep -q '<?xml' "$t/cpu.html" ||
	fail "report -o cpu.html is not the flame graph in a page: $(head -c 200 "$t/cpu.html")"
gzip -t "$t/cpu.pb.gz" || fail "pprof output is not gzip"
# A stream without a sampling interval (Tarantool's) gives counts, not time: said as it is
# converted to the formats that otherwise give time.
for f in pprof speedscope; do
	$lp report $sp -f $f -o "$t/noiv.$f" 2>"$t/err" &&
		grep -qx "luaprof report: note: $sp records no sampling interval (Tarantool's sysprof streams do not): the $f profile has sample counts, not time" "$t/err" ||
		fail "-f $f of a stream without an interval: $(cat "$t/err")"
done
$lp report $sp -f top -o "$t/noiv.txt" 2>"$t/err" && ! grep -q "sampling interval" "$t/err" || fail "-f top: $(cat "$t/err")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["profiles"]' "$t/cpu.json" || fail "speedscope JSON"
grep -q '%self' "$t/cpu.txt" || fail "txt for a CPU stream should be top"
$lp report -q $mp -o "$t/mem.txt" && grep -q '^HEAP SUMMARY:' "$t/mem.txt" || fail "txt for a memory stream should be memprof"
$lp report -q $mp -o "$t/mem.folded" && grep -q '^@mp_leak.lua:8 168000$' "$t/mem.folded" || fail "memory collapsed alloc_space"
$lp report -q $mp --value inuse_objects -f collapsed | grep -q '^@mp_leak.lua:5 301$' || fail "inuse_objects"
cat $sp | $lp report -q - -f collapsed >/dev/null || fail "reading standard input"
# -f wins over the extension, with a note when they disagree (none with -q).
$lp report $mp -f collapsed -o "$t/odd.svg" 2>"$t/err" && grep -q '^@mp_leak.lua:8 168000$' "$t/odd.svg" &&
	grep -q "note: $t/odd.svg gets -f collapsed output, though its extension (.svg) is that of -f flamegraph" "$t/err" ||
	fail "-f collapsed -o x.svg: $(cat "$t/err")"
$lp report -q $mp -f collapsed -o "$t/odd.svg" 2>"$t/err" && [ ! -s "$t/err" ] || fail "-q: $(cat "$t/err")"
$lp report $mp -f collapsed -o "$t/ok.folded" 2>"$t/err" && ! grep -q 'gets -f' "$t/err" || fail "a note for .folded: $(cat "$t/err")"

# -- -f info: what a file holds, a "key: value" line per fact. Tarantool's streams carry
# no luaprof meta; the truncated case still describes what was read.
info() { awk -F': ' -v k="$1" '$1 == k { print substr($0, length(k) + 3) }' "$t/info.txt"; }
$lp report -q -f info $sp >"$t/info.txt" || fail "info on the sysprof vector"
[ "$(info kind)" = "cpu (sysprof samples)" ] && [ "$(info format)" = "ljp v2, no extension" ] &&
	[ "$(info complete)" = yes ] && [ "$(info samples)" = 106 ] &&
	[ "$(info bytes)" = "$(stat -c %s $sp)" ] &&
	[ "$(info vmstates)" = "INTERP 47 (44.3%), LFUNC 58 (54.7%), FFUNC 1 (0.9%)" ] ||
	fail "info on the sysprof vector: $(cat "$t/info.txt")"
! grep -q '^meta\.' "$t/info.txt" || fail "meta lines for a stream without an extension"
$lp report -q -f info $mp >"$t/info.txt" || fail "info on the memprof vector"
[ "$(info kind)" = "memory (every allocation event)" ] && [ "$(info events)" = 6335 ] ||
	fail "info on the memprof vector: $(cat "$t/info.txt")"
head -c 5000 $mp >"$t/sym5k.bin"
expect 3 "sym5k.bin: byte 5000: unexpected end of input" -- $lp report -f info "$t/sym5k.bin"
cp "$t/out" "$t/info.txt"
[ "$(info complete)" = "no (truncated after 5000 bytes)" ] &&
	[ "$(info kind)" = "unknown (no profile section)" ] ||
	fail "info on a truncated symbol table: $(cat "$t/info.txt")"
expect 1 "-f info describes the file and takes no rendering option" -- $lp report -f info --leak-only $mp

# -- Misuse.
expect 1 "cannot open .*nope.bin: No such file" -- $lp report "$t/nope.bin"
expect 1 "no input file" -- $lp report
expect 1 "unknown format 'png'" -- $lp report -f png $sp
# Format names in any case, as the extensions are (-f TOP was refused, -o X.SVG taken).
$lp report -q -f TOP $sp >"$t/TOP.txt" 2>"$t/err" && cmp -s "$t/TOP.txt" "$t/top.txt" ||
	fail "-f TOP: $(cat "$t/err")"
$lp report -q -f Speedscope $sp -o "$t/case.out" 2>"$t/err" && head -c 1 "$t/case.out" | grep -q '{' ||
	fail "-f Speedscope: $(cat "$t/err")"
# -o=FILE and -f=FMT (getopt keeps the '='): said so; -o=out.svg wrote a file "=out.svg".
(cd "$t" && "$OLDPWD/$lp" report -o=eq.svg "$OLDPWD/$sp") 2>"$t/err"
[ $? = 1 ] && [ ! -e "$t/=eq.svg" ] &&
	grep -qx "luaprof report: -o=eq.svg: -o takes no '=' (-o eq.svg, or --output=eq.svg); a file whose name starts with '=' is ./=eq.svg" "$t/err" ||
	fail "report -o=eq.svg: $(ls "$t" | grep eq.svg) $(cat "$t/err")"
expect 1 "^luaprof report: unknown format '=top' \(flamegraph, .*\); -f takes no '=': -f top, or --format=top$" -- $lp report -f=top $sp
expect 1 "^luaprof record: -o=x.svg: -o takes no '=' \(-o x.svg, or --output=x.svg\)" -- $lp record -o=x.svg -- luajit x.lua
expect 1 "^luaprof record: unknown format '=top' .*; -f takes no '=': -f top, or --format=top$" -- $lp record -f=top -- luajit x.lua
expect 1 "cannot tell the format from '.*x.png'; use -f, or an extension that names one \(\.svg \.html \.htm \.folded \.collapsed \.pb\.gz \.pprof \.pb \.speedscope\.json \.json \.txt\)$" -- $lp report -o "$t/x.png" $sp
expect 1 "^luaprof record: cannot tell the format from 'x.png'; use -f, or an extension that names one \(\.svg .* \.txt\)$" -- $lp record -o x.png -- luajit x.lua
expect 1 "memprof report needs a memory stream" -- $lp report -f memprof $sp
expect 1 "split applies to CPU streams" -- $lp report --split $mp
expect 1 "unknown --value 'bogus'" -- $lp report --value bogus -f collapsed $mp
# Every option given is used, or refused: none is parsed and then ignored.
expect 1 "unknown --value 'bogus'" -- $lp report --value bogus $mp
expect 1 "the memprof text report lists .*--value applies to the graphs" -- $lp report --value inuse_space $mp
expect 1 "--leak-only shows what is still held: it goes with --value inuse_space or inuse_objects, not alloc_space" \
	-- $lp report --leak-only --value alloc_space -f collapsed $mp
expect 1 "--human-readable applies to the memprof text report .*: this format is read by tools and keeps bytes" \
	-- $lp report --human-readable -f collapsed $mp
expect 1 "--human-readable applies to the memprof text report .*: top and flame graphs show KiB" \
	-- $lp report --human-readable -f top $mp
expect 1 "-n applies to -f top .*, not to -f memprof" -- $lp report -n 5 $mp
expect 1 "--limit applies to -f top .*, not to -f memprof" -- $lp report --limit 5 $mp
expect 1 "--top applies to -f top .*, not to -f collapsed" -- $lp report --top 5 -f collapsed $sp
expect 1 "-n applies to -f top .*, not to -f flamegraph" -- $lp report -n 5 -o "$t/n.svg" $sp
expect 1 "--lines applies to -f top .*, not to -f collapsed" -- $lp report --lines -f collapsed $sp
expect 1 "--lines applies to -f top .*, not to -f memprof" -- $lp report --lines $mp
expect 1 "--functions: -f top ranks functions already" -- $lp report -f top --functions $sp
# Refused before the input is read when -f or -o chose the format: a FIFO no one writes
# would hang a report that read first.
mkfifo "$t/never.fifo"
expect 1 "-n applies to -f top .*, not to -f flamegraph" -- timeout 10 $lp report -n 5 -o "$t/n.svg" "$t/never.fifo"
expect 1 "--title applies to -f flamegraph and speedscope, not to -f top" -- timeout 10 $lp report -f top --title x "$t/never.fifo"
expect 1 "--title applies to -f flamegraph and speedscope, not to -f top" -- $lp report --title x $sp
expect 1 "--functions applies to the graphs and pprof" -- $lp report --functions $mp
$lp report -q -n 3 --lines $sp >/dev/null || fail "-n with --lines on -f top"
$lp report -q --title T -f speedscope $sp | grep -q '"name":"T"' || fail "--title on speedscope"
# An empty title (a variable not set) is refused, not drawn as an empty heading.
expect 1 "--title is empty: give a heading, or leave --title out for the default one" \
	-- $lp report --title "" -o "$t/empty-title.svg" $sp
expect 1 "--title is empty" -- $lp report --title " " -f speedscope $sp
[ -e "$t/empty-title.svg" ] && fail "--title '': wrote $t/empty-title.svg"
# A new report gets the mode a plain creation would (umask); a replaced one keeps its own.
(umask 077; $lp report -q -f collapsed -o "$t/mode.folded" $sp) || fail "report with umask 077"
[ "$(stat -c %a "$t/mode.folded")" = 600 ] || fail "umask 077: mode $(stat -c %a "$t/mode.folded")"
chmod 640 "$t/mode.folded"
$lp report -q -f collapsed -o "$t/mode.folded" $sp || fail "report over a 0640 file"
[ "$(stat -c %a "$t/mode.folded")" = 640 ] || fail "replaced report: mode $(stat -c %a "$t/mode.folded"), was 640"
# The report must not replace its own input.
cp $sp "$t/self.bin"
expect 1 "-o .*self.bin is the input file" -- $lp report -f collapsed -o "$t/./self.bin" "$t/self.bin"
cmp -s $sp "$t/self.bin" || fail "report -o INPUT changed the input"
$lp report -q --leak-only --value inuse_objects -f collapsed $mp | grep -q '^@mp_leak.lua:5 301$' ||
	fail "--leak-only with --value inuse_objects"
expect 1 "unknown option '--bogus'" -- $lp report --bogus $sp
# A prefix of several options (getopt takes one of one) is said to be ambiguous, naming
# them; it was an "unknown option".
expect 1 "option '--li' is ambiguous: --limit, --lines" -- $lp report --li 5 $sp
expect 1 "option '--ra=100' is ambiguous: --raw, --rate" -- $lp record --ra=100 -- luajit x.lua
expect 1 "unknown option '--bogus' \\(see 'luaprof record --help'\\)" -- $lp record --bogus -- luajit x.lua
# An unknown short option is named as typed, in a cluster or with text after it (it was
# the argument before it: "unknown option 'report'").
expect 1 "unknown option '-z' \\(see 'luaprof report --help'\\)" -- $lp report -qz $sp
expect 1 "unknown option '-z' " -- $lp report -n 5 -zq $sp
expect 1 "unknown option '-x' \\(see 'luaprof record --help'\\)" -- $lp record -o a.svg -x5 -- luajit x.lua
expect 1 "option '--split' takes no value, not '1'" -- $lp report --split=1 $sp
expect 1 "cannot write .*no/such/dir" -- $lp report -o "$t/no/such/dir/x.svg" $sp
expect 1 "cannot write .*: Is a directory" -- $lp report -f collapsed -o "$t" $sp
# A FIFO (or a device such as /dev/null) is written in place, never renamed over.
mkfifo "$t/fifo"
cat "$t/fifo" >"$t/fromfifo" &
$lp report -q -f collapsed -o "$t/fifo" $sp || fail "writing to a FIFO"
wait
[ -p "$t/fifo" ] || fail "the FIFO was replaced by a file"
grep -q '@sp_fib.lua' "$t/fromfifo" || fail "nothing came through the FIFO"
$lp report -q -o /dev/null $sp || fail "report -o /dev/null without -f"
$lp report --help | grep -q 'Exit status' || fail "--help does not explain exit status"
# A command that takes no argument refuses one (`version extra` printed the version).
expect 1 "^luaprof version: takes no argument, not 'extra'$" -- $lp version extra
expect 1 "^luaprof --version: takes no argument, not 'x'$" -- $lp --version x
expect 1 "^luaprof help: one command at a time, not 'x' after 'report'" -- $lp help report x
[ -s "$t/out" ] && fail "help with an extra argument printed help: $(head -2 "$t/out")"
# Help and the version go to standard output: a write that fails there is an error (they
# exited 0 with nothing written).
if [ -w /dev/full ]; then
	for args in --help help "help report" "help record" "help version" version --version \
		"report --help" "record --help" "record -h"; do
		expect 1 "cannot write to standard output: No space left on device" -- \
			sh -c "exec $lp $args >/dev/full"
	done
fi

# -- Bad input: message names file and byte, exit 2 (malformed) or 3 (truncated).
: >"$t/empty.bin"
expect 2 "empty.bin: empty file" -- $lp report "$t/empty.bin"
# Most likely a sampled memory profile that never stopped (SIGKILL, the OOM killer): said.
expect 2 "empty.bin: empty file, not a profile stream \(.*a sampled memory profile whole when it stops: one whose process was killed by SIGKILL" -- $lp report "$t/empty.bin"
head -c 4000 /dev/urandom | sed '1s/^/x/' >"$t/garbage.bin"
expect 2 "garbage.bin: byte 0: not a profile stream .text: a report or collapsed stacks.*a sysprof or memprof stream .luaprof's or Tarantool's. starts with \"ljs\", this file with 0x78$" -- $lp report "$t/garbage.bin"
printf 'hello\n' >"$t/text.bin"
expect 2 "text.bin: byte 0: not a profile stream .text: .*with 0x68$" -- $lp report "$t/text.bin"
# A gzipped stream (gzip cpu.bin) is read decompressed, from a file or a pipe; it was taken
# for pprof ("gzip data: a pprof profile?"). Offsets are the decompressed stream's.
gzip -c $sp >"$t/sp.bin.gz"
$lp report -q "$t/sp.bin.gz" -f collapsed >"$t/gz.folded" 2>"$t/err" && cmp -s "$t/gz.folded" <($lp report -q $sp -f collapsed) ||
	fail "report of a gzipped stream: $(cat "$t/err")"
gzip -c $mp | $lp report -q - >"$t/gz.txt" 2>"$t/err" && cmp -s "$t/gz.txt" <($lp report -q $mp) ||
	fail "report of a gzipped memprof stream on standard input: $(cat "$t/err")"
$lp report -q $sp -o "$t/sp.pb.gz"
expect 2 "sp.pb.gz \(decompressed\): byte 0: not a profile stream.* \(.*sp.pb.gz is gzip data, read decompressed: a pprof profile\? luaprof reads the raw stream record wrote, plain or gzipped\)$" -- $lp report "$t/sp.pb.gz"
head -c $(($(stat -c %s "$t/sp.bin.gz") / 2)) "$t/sp.bin.gz" >"$t/cut.gz"
expect 3 "cut.gz \(decompressed\): byte [0-9]+: unexpected end of input \(the gzip data of .*cut.gz ends early" -- $lp report -f collapsed "$t/cut.gz"
printf '\037\213\010' >"$t/gz.bin"
expect 2 "gz.bin: gzip data cut short before anything it holds, not a profile stream" -- $lp report "$t/gz.bin"
# Gzip in gzip is said to be that (it was "gzip data: a pprof profile?"), from a file or a
# pipe; gunzip once more and it reads. What other gzip data holds is guessed as for a
# plain file, pprof only for a protobuf; corrupt gzip data is said to be, no more; a lone
# 0x1f is gzip cut short. Every one exits 2.
gzip -c "$t/sp.bin.gz" >"$t/twice.gz"
expect 2 "twice.gz: gzip data holding gzip data \(compressed twice\), not a profile stream: luaprof undoes one gzip; \`cat .*twice.gz \| gunzip \| luaprof report -\` reads what it holds$" -- $lp report "$t/twice.gz"
grep -q pprof "$t/err" && fail "gzip in gzip called pprof: $(cat "$t/err")"
expect 2 "^luaprof report: -: gzip data holding gzip data .*\.\.\. \| gunzip \| luaprof report -" -- sh -c "$lp report - <'$t/twice.gz'"
gunzip -c "$t/twice.gz" | $lp report -q - -f collapsed | cmp -s - "$t/gz.folded" || fail "gzip in gzip gunzipped once"
printf 'hello\n' | gzip -c >"$t/text.gz"
expect 2 "text.gz \(decompressed\): byte 0: not a profile stream \(text: .*with 0x68 \(.*text.gz is gzip data, read decompressed\)$" -- $lp report "$t/text.gz"
printf '\037\213\011\0\0\0\0\0\0\0\0\0' >"$t/method.gz"
expect 2 "method.gz \(decompressed\): byte 0: the gzip data is corrupt after 4 compressed bytes \(unknown compression method\)$" -- $lp report "$t/method.gz"
head -c 3000 /dev/zero | gzip -c | head -c 20 >"$t/cutz.gz"
expect 2 "cutz.gz: gzip data cut short before anything it holds, not a profile stream" -- $lp report "$t/cutz.gz"
: | gzip -c >"$t/empty.gz"
expect 2 "empty.gz: gzip data of nothing \(an empty file compressed\), not a profile stream" -- $lp report "$t/empty.gz"
printf '\037' >"$t/one.bin"
expect 2 "one.bin: gzip data cut short before anything it holds, not a profile stream" -- $lp report "$t/one.bin"
# Other compressors' data and archives are named (they were "text: a report or collapsed
# stacks?"), with how to read what they hold; so is a JPEG image.
for z in xz bzip2 zstd; do
	have $z || continue
	$z -c $sp >"$t/sp.$z"
	expect 2 "sp.$z: byte 0: not a profile stream \\($z-compressed data: luaprof reads plain or gzipped streams; decompress it first, $z -dc FILE \\| luaprof report -\\)" -- $lp report "$t/sp.$z"
	grep -q 'text' "$t/err" && fail "$z data called text: $(cat "$t/err")"
	$z -dc "$t/sp.$z" | $lp report -q - -f collapsed | cmp -s - "$t/gz.folded" || fail "$z -dc | report -"
done
(cd "$(dirname $sp)" && tar cf "$t/sp.tar" "$(basename $sp)")
expect 2 "sp.tar: byte 0: not a profile stream \\(a tar archive: extract the profile from it first\\)" -- $lp report "$t/sp.tar"
printf 'PK\003\004\024\0\0\0' >"$t/sp.zip"
expect 2 "sp.zip: byte 0: not a profile stream \\(a zip archive: extract the profile from it first\\)" -- $lp report "$t/sp.zip"
printf '\377\330\377\340\0\020JFIF' >"$t/photo.jpg"
expect 2 "photo.jpg: byte 0: not a profile stream \\(a JPEG image\\?\\)" -- $lp report "$t/photo.jpg"
printf '<svg' >"$t/svg.bin"
expect 2 "cpu.html: byte 0: not a profile stream \\(HTML: a flame graph page\\? luaprof reads the raw stream record wrote\\)" -- $lp report "$t/cpu.html"
expect 2 "svg.bin: byte 0: not a profile stream .XML: an SVG flame graph. " -- $lp report "$t/svg.bin"
printf 'local x' >"$t/lx.bin"
expect 2 "lx.bin: byte 0: not a profile stream .text: .*this file with 0x6c 0x6f$" -- $lp report "$t/lx.bin"
printf 'lj' >"$t/lj.bin"
expect 3 "lj.bin: byte 2: unexpected end of input" -- $lp report "$t/lj.bin"
expect 1 "-o needs a file name before --" -- $lp report -o -- "$t/lj.bin"
expect 1 "-o needs a file name .'-' for standard output." -- $lp report -o '' "$t/lj.bin"
{ printf 'ljs\004\0\0\0'; } >"$t/v4.bin"
expect 2 "v4.bin: byte 3: symtab version mismatch: luaprof expects 3, the file has 4" -- $lp report "$t/v4.bin"
size=$(stat -c %s $mp)
head -c $((size - 1)) $mp >"$t/cut.bin"    # no epilogue
echo "previous" >"$t/keep.txt"
expect 3 "cut.bin: byte $((size - 1)): the file is truncated \(no epilogue\)" -- $lp report -q "$t/cut.bin" -o "$t/keep.txt"
grep -q '^ALLOCATIONS' "$t/keep.txt" || fail "a truncated stream should still be reported"
# A CPU stream's are samples (they were "events", as the summary does not call them).
head -c $(($(stat -c %s $sp) - 100)) $sp >"$t/spcut.bin"
expect 3 "spcut.bin: byte [0-9]+: the file is truncated \(no epilogue\): the report covers the 105 samples read before this byte$" -- $lp report -f collapsed "$t/spcut.bin"
head -c $((size - 1000)) $mp >"$t/half.bin"
expect 3 "half.bin: byte [0-9]+: the file is truncated" -- $lp report -q "$t/half.bin" -f collapsed
head -c 5000 $mp >"$t/sym.bin"              # inside the symbol table
echo "previous" >"$t/keep2.txt"
expect 3 "sym.bin: byte 5000: unexpected end of input \(no profile section: nothing to report" -- $lp report "$t/sym.bin" -o "$t/keep2.txt"
[ "$(cat "$t/keep2.txt")" = previous ] || fail "an existing output was overwritten on failure"
{ cat $sp; printf 'junk'; } >"$t/trail.bin"
expect 2 "trail.bin: byte $(stat -c %s $sp): unexpected data after the epilogue" -- $lp report "$t/trail.bin"
# A sysprof stream whose first sample header is not a VM state.
python3 - "$sp" "$t/badhdr.bin" <<'PY'
import sys
d = bytearray(open(sys.argv[1], 'rb').read())
i = d.index(b'ljp\x02') + 7
d[i] = 0x3f
open(sys.argv[2], 'wb').write(d)
PY
expect 2 "badhdr.bin: byte [0-9]+: unknown sysprof sample header 0x3f" -- $lp report "$t/badhdr.bin"

# -- Destinations behind links: a symbolic link is written through (it used to be replaced
# by a regular file: as root, -o /dev/stdout replaced /dev/stdout), a link to this
# process's descriptor writes to that descriptor (at its offset: an appended log keeps its
# lines), and binary output to a terminal behind one is refused like standard output.
$lp report -q $sp -f collapsed >"$t/plain.folded"
echo old >"$t/real.folded"
ln -s real.folded "$t/latest.folded"
$lp report -q $sp -o "$t/latest.folded" || fail "report -o LINK failed"
[ -L "$t/latest.folded" ] && cmp -s "$t/real.folded" "$t/plain.folded" ||
	fail "report -o LINK: the link was not written through: $(ls -l "$t/latest.folded")"
ln -s /proc/self/fd/1 "$t/out1"
$lp report -q $sp -f collapsed -o "$t/out1" >"$t/via1.folded" || fail "report -o LINK-TO-FD-1 failed"
[ -L "$t/out1" ] && cmp -s "$t/via1.folded" "$t/plain.folded" ||
	fail "report -o LINK-TO-FD-1: $(ls -l "$t/out1"), $(wc -c <"$t/via1.folded") bytes on standard output"
echo first >"$t/log.txt"
# (a link of the test's own to /proc/self/fd/1, as /dev/stdout is: a regression replaces it,
# not the system's)
$lp report -q $sp -f collapsed -o "$t/out1" >>"$t/log.txt" || fail "report -o /dev/stdout >> LOG failed"
[ "$(head -1 "$t/log.txt")" = first ] && [ "$(tail -n +2 "$t/log.txt" | cmp - "$t/plain.folded" && echo same)" = same ] ||
	fail "report -o /dev/stdout >> LOG: the log's first line or the report is not there: $(head -2 "$t/log.txt")"
$lp report -q $sp -f collapsed -o /dev/fd/5 5>"$t/fd5.folded" && cmp -s "$t/fd5.folded" "$t/plain.folded" ||
	fail "report -o /dev/fd/5"
expect 1 "cannot write /dev/fd/9: Bad file descriptor" -- $lp report -q $sp -f collapsed -o /dev/fd/9
# Other spellings of a descriptor: written through it, not renamed over what it points to
# (an appended log lost its lines and the output after the report).
( echo first; $lp report -q $sp -f collapsed -o /dev/fd//1; $lp report -q $sp -f collapsed -o /dev/fd/./1
  echo after ) >>"$t/log2.txt"
[ "$(head -1 "$t/log2.txt")" = first ] && [ "$(tail -1 "$t/log2.txt")" = after ] &&
	[ "$(wc -l <"$t/log2.txt")" -eq $(( 2 + 2 * $(wc -l <"$t/plain.folded") )) ] ||
	fail "report -o /dev/fd//1, /dev/fd/./1 >> LOG: $(head -2 "$t/log2.txt") ... $(tail -1 "$t/log2.txt")"
[ "$($lp report -q $sp -f collapsed -o /dev/fd//1 | wc -l)" -eq "$(wc -l <"$t/plain.folded")" ] ||
	fail "report -o /dev/fd//1 into a pipe"
# An unwritable destination is refused before the input is read (a FIFO no one writes).
expect 1 "cannot write /nonexistent/x.svg: No such file or directory" -- timeout 10 $lp report "$t/never.fifo" -o /nonexistent/x.svg
# A link whose target's directory takes no new file (another user's), the target being
# the user's: written in place (it was refused, naming the link).
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null 2>&1; then
	mkdir -p "$t/nb/w" "$t/nb/ro"
	echo old >"$t/nb/ro/t.folded"
	ln -s ../ro/t.folded "$t/nb/w/l.folded"
	cp $sp "$t/nb/w/in.bin"
	chmod 755 "$t" "$t/nb" "$t/nb/ro"
	chmod 644 "$t/nb/w/in.bin"
	chown nobody "$t/nb/w" "$t/nb/ro/t.folded"
	(cd "$t/nb/w" && setpriv --reuid=nobody --regid=nogroup --clear-groups \
		"$OLDPWD/$lp" report -q in.bin -f collapsed -o l.folded) 2>"$t/err" ||
		fail "report -o LINK (target's directory not writable): $(cat "$t/err")"
	[ -L "$t/nb/w/l.folded" ] && cmp -s "$t/nb/ro/t.folded" "$t/plain.folded" ||
		fail "report -o LINK (target's directory not writable): not written in place"
fi
# A name of 249 to 255 bytes is valid, though the temporary file beside it (NAME.XXXXXX)
# cannot be made: written in place (it was refused as "File name too long").
long=$(printf '%0245d' 0)
$lp report -q $sp -f collapsed -o "$t/$long.txt" 2>"$t/err" && cmp -s "$t/$long.txt" "$t/plain.folded" ||
	fail "report -o NAME of 249 bytes: $(cat "$t/err")"
[ "$(ls "$t" | grep -c "^$long")" = 1 ] || fail "report -o NAME of 249 bytes: files left: $(ls "$t" | grep "^$long")"
expect 1 "File name too long" -- $lp report -q $sp -f collapsed -o "$t/${long}0123456789.txt"
if command -v script >/dev/null 2>&1; then
	script -qec "$lp report -q $sp -f pprof -o /dev/stdout" /dev/null >"$t/tty.out" 2>&1
	grep -q "pprof output is binary; give a file with -o" "$t/tty.out" ||
		fail "pprof to a terminal through /dev/stdout: $(head -c 200 "$t/tty.out" | od -c | head -2)"
	# A flame graph is markup for a browser: refused there too, as pprof is (it dumped its
	# SVG), by report and record alike, with record's before the program runs.
	script -qec "$lp report -q $sp -f flamegraph; echo status \$?" /dev/null >"$t/tty.out" 2>&1
	grep -q "luaprof report: the flame graph is SVG for a browser, not text; give a file with -o (-o out.svg, or -o out.html for a web page)" "$t/tty.out" &&
		grep -q "status 1" "$t/tty.out" && ! grep -q '<svg' "$t/tty.out" ||
		fail "flamegraph to a terminal: $(head -c 300 "$t/tty.out")"
	script -qec "$lp record -f flamegraph -o - -- sh -c 'echo ran'; echo status \$?" /dev/null >"$t/tty.out" 2>&1
	grep -q "luaprof record: the flame graph is SVG for a browser, not text; give a file with -o" "$t/tty.out" &&
		grep -q "status 1" "$t/tty.out" && ! grep -q '^ran' "$t/tty.out" ||
		fail "record -f flamegraph to a terminal: $(head -c 300 "$t/tty.out")"
	# speedscope's JSON is a document for speedscope.app: refused there as the flame graph
	# is (it dumped the JSON on the screen), to standard output or a path to it.
	for to in "" "-o /dev/stdout"; do
		script -qec "$lp report -q $sp -f speedscope $to; echo status \$?" /dev/null >"$t/tty.out" 2>&1
		grep -q "luaprof report: speedscope output is JSON for speedscope.app, not text; give a file with -o (-o out.speedscope.json)" "$t/tty.out" &&
			grep -q "status 1" "$t/tty.out" && ! grep -q 'schema' "$t/tty.out" ||
			fail "speedscope to a terminal ($to): $(head -c 300 "$t/tty.out")"
	done
	script -qec "$lp record -f speedscope -o - -- sh -c 'echo ran'; echo status \$?" /dev/null >"$t/tty.out" 2>&1
	grep -q "luaprof record: speedscope output is JSON for speedscope.app, not text; give a file with -o" "$t/tty.out" &&
		grep -q "status 1" "$t/tty.out" && ! grep -q '^ran' "$t/tty.out" ||
		fail "record -f speedscope to a terminal: $(head -c 300 "$t/tty.out")"
	# Not on a terminal: written (a pipe to jq).
	$lp report -q $sp -f speedscope | grep -q '"\$schema"' || fail "speedscope to a pipe"
fi

# -- Notes about one sample say "1 sample", not "1 samples" (a minetest profile started on
# its main thread had one sample of the Lua state running on the server thread): a stream of
# record's with its meta "truncated" made 1, and "thread_cpu_ns" made "lua_elsewhere" 1 (the
# same lengths, so the stream stays well formed).
if command -v luajit >/dev/null 2>&1 && command -v python3 >/dev/null 2>&1; then
	echo 'local x = 0 for i = 1, 3e7 do x = x + i % 3 end' >"$t/spin.lua"
	$lp record -q -o "$t/spin.folded" -- luajit "$t/spin.lua" ||
		fail "record of a loop failed"
	python3 - "$t/spin.bin" "$t/one.bin" <<'PY'
import sys
d = open(sys.argv[1], "rb").read()
d = d.replace(b"\ttruncated\x010", b"\ttruncated\x011", 1)
i = d.find(b"\rthread_cpu_ns")
n = d[i + 14]
d = d[:i] + b"\rlua_elsewhere" + bytes([n]) + b"0" * (n - 1) + b"1" + d[i + 15 + n:]
open(sys.argv[2], "wb").write(d)
PY
	$lp report "$t/one.bin" -o "$t/one.txt" 2>"$t/one.err" || fail "report of one.bin: $(cat "$t/one.err")"
	# record names the raw stream as the user named the output, or as --raw gave it (it
	# printed "wrote spin2.folded (collapsed) and /tmp/.../spin2.bin (raw stream)"), in its
	# messages and in what it renders.
	(cd "$t" && "$OLDPWD/$lp" record -o spin2.svg -- luajit spin.lua) 2>"$t/rec.err" ||
		fail "record -o spin2.svg: $(cat "$t/rec.err")"
	grep -qx "luaprof record: wrote spin2.svg (flamegraph) and spin2.bin (raw stream)" "$t/rec.err" ||
		fail "record's paths: $(tail -1 "$t/rec.err")"
	grep -q '>luaprof: spin2.bin (CPU)<' "$t/spin2.svg" || fail "record's title: $(grep -o '>luaprof: [^<]*<' "$t/spin2.svg")"
	(cd "$t" && "$OLDPWD/$lp" record -f top -o - --raw "$t/abs.bin" -- luajit spin.lua) 2>"$t/rec.err" >"$t/rec.out" ||
		fail "record --raw ABSOLUTE: $(cat "$t/rec.err")"
	grep -qx "luaprof record: wrote standard output (top) and $t/abs.bin (raw stream)" "$t/rec.err" &&
		grep -q "^Source: $t/abs.bin .*  Dropped: 0" "$t/rec.out" || fail "record --raw ABSOLUTE: $(tail -1 "$t/rec.err") $(head -1 "$t/rec.out")"
	# Over it, a program that fails at once: its status is the reason given, not the
	# sampling interval (it advised --clock wall).
	(cd "$t" && "$OLDPWD/$lp" record -o spin2.svg -- luajit -e 'error("boom")') 2>"$t/rec.err" &&
		fail "record of a failing program over an earlier profile: exit 0"
	grep -qx "luaprof record: luajit recorded nothing (no CPU sample: it exited with status 1 before the first one): the earlier profile spin2.bin is kept" "$t/rec.err" ||
		fail "record of a failing program over an earlier profile: $(tail -1 "$t/rec.err")"
	(cd "$t" && "$OLDPWD/$lp" record -f collapsed -o same.bin -- luajit spin.lua) 2>"$t/rec.err" &&
		fail "record -f collapsed -o same.bin: exit 0"
	grep -qx "luaprof record: the rendered profile and the raw stream would both be same.bin: give -o another name (or --raw)" "$t/rec.err" ||
		fail "record -f collapsed -o same.bin: $(cat "$t/rec.err")"
	# Samples ending in code of an object no symbol names (a stripped luajit's table.sort,
	# luajit+0x5c9f0): a tenth of them or more, and record says how to have it named.
	(cd "$t" && "$OLDPWD/$lp" record -n 0 -o ns.svg -- luajit "$OLDPWD/examples/app.lua" 0.3) \
		>/dev/null 2>"$t/rec.err" || fail "record app.lua: $(cat "$t/rec.err")"
	$lp report -q "$t/ns.bin" -f collapsed >"$t/ns.folded"
	share=$(awk '{ n = $NF; all += n; k = split($0, f, ";"); sub(/ [0-9]+$/, "", f[k]);
		       if (f[k] ~ /^luajit\+0x[0-9a-f]+$/) u += n } END { print all ? int(100 * u / all) : 0 }' "$t/ns.folded")
	# report of the stream says it too (it said nothing).
	$lp report "$t/ns.bin" -o "$t/ns.txt" 2>"$t/rep.err" || fail "report ns.bin: $(cat "$t/rep.err")"
	if [ "$share" -ge 10 ]; then
		grep -Eq "^luaprof record: note: [0-9.]+% of the samples end in code of .*/luajit[^ ]* that no symbol names here \(shown as luajit\+0xOFFSET\): with its separate debug file installed \(Debian: its package's -dbgsym\), a new profile names it$" "$t/rec.err" ||
			fail "$share% of the samples in luajit+0x... and no note: $(cat "$t/rec.err")"
		grep -Eq "^luaprof report: note: [0-9.]+% of the samples end in code of .*/luajit[^ ]* that no symbol names here" "$t/rep.err" ||
			fail "$share% of the samples in luajit+0x... and no note from report: $(cat "$t/rep.err")"
	else
		grep -q "no symbol names here" "$t/rec.err" "$t/rep.err" && fail "a note for $share% of the samples: $(cat "$t/rec.err" "$t/rep.err")"
		echo "cli_report: note: luajit here is named (${share}% of the samples unnamed): the note's presence not checked" >&2
	fi
	echo 'local t = {} for i = 1, 1000 do t[i] = {} end' >"$t/alloc.lua"
	(cd "$t" && "$OLDPWD/$lp" record --memory -o alloc.txt -- luajit alloc.lua) 2>"$t/rec.err" ||
		fail "record --memory: $(cat "$t/rec.err")"
	grep -Eqx "luaprof record: wrote alloc.txt \(memprof\) and alloc.bin \(raw stream, [0-9]+ bytes\)" "$t/rec.err" ||
		fail "record --memory's paths: $(tail -1 "$t/rec.err")"
	(cd "$t" && "$OLDPWD/$lp" record --memory --sample 1G -o alloc.txt -- luajit -e 'error("boom")') 2>"$t/rec.err" &&
		fail "record --sample of a failing program over an earlier profile: exit 0"
	grep -qx "luaprof record: luajit recorded nothing (no sampled allocation: it exited with status 1 before the first one): the earlier profile alloc.bin is kept" "$t/rec.err" ||
		fail "record --sample of a failing program over an earlier profile: $(tail -1 "$t/rec.err")"
	grep -q "note: 1 sample has its stack cut short (.*): its outermost frames are missing" "$t/one.err" ||
		fail "one sample cut short: $(grep "cut short" "$t/one.err")"
	grep -q "note: 1 sample ([0-9.]*%) found the Lua state running on another thread .*: it is that thread's C stack alone" "$t/one.err" ||
		fail "one sample elsewhere: $(grep "another thread" "$t/one.err")"
fi

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all report checks passed"
