#!/usr/bin/env bash
# `luaprof record --memory --sample SIZE` takes the range memprof.start and
# luaprof_memprof_start take, 1 byte to 2^50 (1P; it stopped at 1T): 2^50 written in
# bytes, with P and in T runs the program with that interval; a byte more is refused with
# the range, before the program runs. Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/record.sh
record_setup

echo 'local f = io.open(arg[1], "w") f:write("ran") f:close()' >"$t/mark.lua"
for size in 1125899906842624 1P 1PiB 1024T; do
	rm -f "$t/ran" "$t/s.txt" "$t/s.bin" # none to keep: nothing is sampled
	(cd "$t" && "$lp" record -q --memory --sample $size -o s.txt -- luajit mark.lua ran) \
		>/dev/null 2>"$t/err"
	rc=$?
	[ $rc = 0 ] && [ -e "$t/ran" ] || fail "--sample $size: exit $rc: $(cat "$t/err")"
	"$lp" report -f info "$t/s.bin" >"$t/info" 2>&1
	grep -qx 'meta.sample_bytes: 1125899906842624' "$t/info" ||
		fail "--sample $size: $(grep sample_bytes "$t/info")"
done
for size in 1125899906842625 2P 1025T 1PB; do
	rm -f "$t/ran"
	(cd "$t" && "$lp" record -q --memory --sample $size -o r.txt -- luajit mark.lua ran) \
		>/dev/null 2>"$t/err"
	rc=$?
	[ $rc = 1 ] || fail "--sample $size: exit $rc, want 1"
	grep -qxF "luaprof record: --sample expects a size from 1 byte to 1P (2^50 bytes): a whole number of bytes, or with K, M, G, T or P, binary (e.g. 524288, 512K, 512KiB, 1M), not '$size'" "$t/err" ||
		fail "--sample $size: said $(cat "$t/err")"
	[ -e "$t/ran" ] && fail "--sample $size: the program ran"
done
"$lp" record --help | tr -s ' \n' ' ' | grep -q 'with K, M, G, T or P, as 512K or 512KiB; 1 to 1P, 2^50)' ||
	fail "record --help does not give --sample's range"

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "record_sample_range: all checks passed"
