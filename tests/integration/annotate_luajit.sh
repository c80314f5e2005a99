#!/usr/bin/env bash
# `-f annotate` on real profiles of Debian's luajit: the Lua source with each profiled
# line's self and total. CPU (JIT off): the loop's two lines hold the samples and the line
# that calls the loop holds them all as total, with little self (os.clock's); exact
# memory (JIT off): a line's allocation count is the memprof report's for it; exact memory
# with the JIT on marks the lines where allocating traces start; a sampled profile's
# stacks place the allocations at their line. And the options that make no sense with it
# are refused.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

have luajit || skip "luajit is not installed (apt-get install luajit)"
need_build luaprof luaprof.so
lp=$PWD/build/luaprof
src=tests/integration/annotate_luajit.lua
declare -A at p s tp tv
read_markers $src
cp $src "$t/w.lua"

# row FILE LINE: "self total" of the annotated row of LINE (self "-" when blank), or
# nothing when LINE has no value.
row() {
	python3 - "$1" "$2" <<'PY'
import re, sys
for l in open(sys.argv[1]):
    m = re.match(r'^( {7}|\s*[0-9.]+%) +(\S+(?: [KMG]?i?B)?)? +([0-9.]+)% +(\S+(?: [KMG]?i?B)?) +(\d+)( T)?( |$)', l)
    if m and m.group(5) == sys.argv[2]:
        self = m.group(2) if m.group(1).strip() else "-"
        print(m.group(1).strip() or "-", self, m.group(3), m.group(4), "T" if m.group(6) else "")
        break
PY
}

cd "$t" || exit 1
# -- CPU, JIT off: the loop's lines hold the samples; the calling line holds them all as
# total, with little self of its own.
$lp record -q -f annotate -o cpu.txt -- luajit -joff w.lua cpu >/dev/null 2>err ||
	fail "record -f annotate (cpu): $(cat err)"
for l in spin_for spin_body cpu_call; do read -r p[$l] s[$l] tp[$l] tv[$l] mark <<<"$(row cpu.txt ${at[$l]})"; done
loop=$(awk -v a="${p[spin_for]%\%}" -v b="${p[spin_body]%\%}" 'BEGIN { print a + b }')
awk -v x="$loop" 'BEGIN { exit !(x >= 90) }' || fail "the loop's lines hold $loop% of the samples, want >= 90: $(cat cpu.txt)"
# Its own self is os.clock's (a builtin it calls) and the loop's test: a few samples at most.
[ "${p[cpu_call]}" = - ] || awk -v x="${p[cpu_call]%\%}" 'BEGIN { exit !(x <= 5) }' ||
	fail "the calling line has self ${p[cpu_call]}, want 5 % at most: $(cat cpu.txt)"
awk -v x="${tp[cpu_call]}" 'BEGIN { exit !(x >= 90) }' || fail "the calling line's total is ${tp[cpu_call]}%, want >= 90"
grep -Eq "^ .* ${at[spin_body]}   {5}x = x \\+ \\(i % 7\\) \\* 3 --@spin_body$" cpu.txt || fail "the loop's source line is not shown: $(cat cpu.txt)"
grep -q '^== @w.lua: self' cpu.txt || fail "no section for @w.lua"

# -- Exact memory, JIT off: line counts as the memprof report's (events of the line in
# ALLOCATIONS and REALLOCATIONS).
$lp record -q --memory -o mem.txt -- luajit -joff w.lua mem || fail "record --memory"
want=$(awk -v site="@w.lua:${at[strings]}:" '/^(ALLOCATIONS|REALLOCATIONS|DEALLOCATIONS)/ { sec = $1 }
	sec != "DEALLOCATIONS" && $1 == site { n += $2 } END { print n + 0 }' mem.txt)
$lp report -q -f annotate --value alloc_objects mem.bin >objs.txt || fail "report -f annotate --value alloc_objects"
read -r sp sv tp tv mark <<<"$(row objs.txt ${at[strings]})"
[ "$want" -ge 3000 ] || fail "the memprof report has $want events at line ${at[strings]}, want >= 3000"
[ "$sv" = "$want" ] || fail "annotate has $sv objects at line ${at[strings]}, the memprof report $want: $(cat objs.txt)"
[ "$tv" = "$want" ] || fail "annotate's total at line ${at[strings]} is $tv, want $want"

# -- Exact memory, JIT on: trace events are charged where their traces start, marked T.
$lp record -q --memory -f annotate -o memj.txt -- luajit w.lua mem >/dev/null || fail "record --memory -f annotate (JIT on)"
grep -q '^T: JIT traces that start at the line' memj.txt || fail "no T legend with the JIT on: $(cat memj.txt)"
grep -Eq '^ .*%.* [0-9]+ T ' memj.txt || fail "no line marked T with the JIT on: $(cat memj.txt)"

# -- Sampled memory, JIT on: the stacks place the bytes at the allocating line.
$lp record -q --memory --sample 16K -f annotate -o sampled.txt -- luajit w.lua mem >/dev/null ||
	fail "record --memory --sample -f annotate"
read -r sp sv tp tv mark <<<"$(row sampled.txt ${at[strings]})"
awk -v x="${sp%\%}" 'BEGIN { exit !(x >= 90) }' || fail "sampled: line ${at[strings]} holds $sp of the bytes, want >= 90%: $(cat sampled.txt)"
read -r sp sv tp tv mark <<<"$(row sampled.txt ${at[mem_call]})"
[ "$sp" = - ] && awk -v x="$tp" 'BEGIN { exit !(x >= 95) }' ||
	fail "sampled: the calling line should hold the bytes as total alone, has self $sp total $tp%"

# -- Options: refused where they mean nothing, -n limits the files.
for bad in "--lines" "--functions" "--split"; do
	$lp report -q -f annotate $bad cpu.bin >/dev/null 2>err && fail "-f annotate $bad was accepted"
	grep -q "annotate" err || fail "-f annotate $bad: the message does not name annotate: $(cat err)"
done
cat >two.lua <<'LUA'
local t = {}
for i = 1, 2000 do t[i] = string.rep("y", 100) .. i end
loadfile("w.lua")("mem")
LUA
$lp record -q --memory -f annotate -o two.txt -- luajit -joff two.lua >/dev/null || fail "record two.lua"
[ "$(grep -c '^== ' two.txt)" = 2 ] || fail "two files allocate, annotate shows $(grep -c '^== ' two.txt): $(cat two.txt)"
$lp report -q -f annotate --context 1000 cpu.bin >all.txt || fail "-f annotate --context 1000"
# The line column is characters 38-44 of a row: every line of the file has one.
[ "$(sed -n '/^  %self/,$p' all.txt | cut -c38-44 | grep -c '[0-9]')" = "$(wc -l <w.lua)" ] &&
	! grep -q '^ *\.\.\.$' all.txt ||
	fail "--context 1000 does not show the whole file: $(cat all.txt)"
$lp report -q -f top --context 1 cpu.bin >/dev/null 2>err && fail "--context with -f top was accepted"
$lp report -q -f annotate -n 1 two.bin >n1.txt || fail "-f annotate -n 1"
[ "$(grep -c '^== ' n1.txt)" = 1 ] || fail "-n 1 shows $(grep -c '^== ' n1.txt) files"
grep -q '^== @w.lua: self' n1.txt || fail "-n 1 does not show the file with the most bytes first: $(cat n1.txt)"
grep -q '^\.\.\. 1 more file omitted' n1.txt || fail "-n 1 does not say a file was left out"
# -- From elsewhere, --source-dir finds the sources; without it they are named as missing.
mkdir -p elsewhere && cd elsewhere || exit 1
$lp report -q -f annotate ../cpu.bin >nodir.txt || fail "report -f annotate from another directory"
grep -q '^(no source shown: w.lua: No such file or directory)$' nodir.txt || fail "a missing source is not named: $(cat nodir.txt)"
grep -q '^1 source file not found here: --source-dir DIR looks for it under DIR$' nodir.txt ||
	fail "a missing source: no word of --source-dir: $(tail -3 nodir.txt)"
$lp report -q -f annotate --source-dir .. ../cpu.bin >dir.txt || fail "report -f annotate --source-dir"
grep -q '^(source: \.\./w.lua)$' dir.txt && grep -q -- '--@spin_body$' dir.txt || fail "--source-dir: $(cat dir.txt)"
$lp report -q -f top --source-dir .. ../cpu.bin >/dev/null 2>err && fail "--source-dir with -f top was accepted"
grep -q 'source-dir applies to -f annotate' err || fail "--source-dir with -f top: $(cat err)"
$lp report -q -f annotate --source-dir ../nothing ../cpu.bin >/dev/null 2>err && fail "a missing --source-dir was accepted"
grep -q 'source-dir ../nothing: No such file or directory' err || fail "missing --source-dir: $(cat err)"
cd / || exit 1
[ "$fails" -eq 0 ] && echo "PASS $name" && exit 0
exit 1
