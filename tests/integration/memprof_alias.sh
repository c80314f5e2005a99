#!/usr/bin/env bash
# Sampled blocks at addresses the live marks alias (memprof_alias.c).
# - More live sampled blocks on one granule of the marks than its 16-bit count holds
#   (65,636 blocks of 1 GiB 16 MiB apart, the marks' aliasing period, all sampled, then all
#   freed). The count wrapped past 65,535 and cleared the granule's mark while its blocks
#   were live: their frees passed the wrapper unseen, and the profile kept 65,536 of them in
#   use at stop (64 TiB of inuse_space). A count at its maximum now stays there, the mark
#   set until the profile ends: no fake block may be left in use.
# - A sampled block in the granule of the null pointer, live while the program makes
#   200,000 tables. Its mark sent every allocation (whose ptr is NULL) to the wrapper's
#   rare path: 200,000 rare calls or more, 4 ns each. Such a sample is now counted as
#   allocated and freed at once (samples_untracked), and the allocations stay on the one-
#   test path: a few rare calls (samples due, frees of marked granules), not thousands.
# Both with the generated stub and with the compiled wrapper (LUAPROF_ALLOCSTUB=0).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/memprof_alias" tests/integration/memprof_alias.c -O1 -I$inc -lluajit-5.1 || exit 1

n=$(((1 << 16) + 100))
for mode in 1 0; do
	rm -f "$t/alias.bin"
	LUAPROF_ALLOCSTUB=$mode "$t/memprof_alias" "$PWD/build/?.so" "$t" count $n >"$t/out" 2>&1 ||
		{ fail "ALLOCSTUB=$mode: exit $?: $(cat "$t/out")"; continue; }
	grep -q "^fake $n\$" "$t/out" || { fail "ALLOCSTUB=$mode: $(cat "$t/out")"; continue; }
	build/luaprof report -q "$t/alias.bin" -f info >"$t/info" 2>"$t/err" ||
		{ fail "ALLOCSTUB=$mode: the profile does not read: $(cat "$t/err")"; continue; }
	samples=$(sed -n 's/^meta.samples: //p' "$t/info")
	[ "${samples:-0}" -ge $n ] ||
		fail "ALLOCSTUB=$mode: $samples samples for $n fake blocks of 1 GiB"
	build/luaprof report -q "$t/alias.bin" -f collapsed --value inuse_space \
		-o "$t/inuse.folded" 2>"$t/err" ||
		{ fail "ALLOCSTUB=$mode: no inuse_space: $(cat "$t/err")"; continue; }
	inuse=$(awk '{ s += $NF } END { printf "%.0f", s }' "$t/inuse.folded")
	# The state's own heap is a few MB; one fake block left in use is 1 GiB.
	[ "$inuse" -lt $((1 << 30)) ] ||
		fail "ALLOCSTUB=$mode: $inuse bytes still in use at stop, the fake blocks all freed"
done

meta() { sed -n "s/^meta.$1: //p" "$t/info"; }
for mode in 1 0; do
	rm -f "$t/alias.bin"
	LUAPROF_ALLOCSTUB=$mode "$t/memprof_alias" "$PWD/build/?.so" "$t" null >"$t/out" 2>&1 ||
		{ fail "null, ALLOCSTUB=$mode: exit $?: $(cat "$t/out")"; continue; }
	grep -q "^null\$" "$t/out" || { fail "null, ALLOCSTUB=$mode: $(cat "$t/out")"; continue; }
	build/luaprof report -q "$t/alias.bin" -f info >"$t/info" 2>"$t/err" ||
		{ fail "null, ALLOCSTUB=$mode: the profile does not read: $(cat "$t/err")"; continue; }
	rare=$(meta sample_rare_calls) untracked=$(meta samples_untracked)
	[ -n "$rare" ] && [ "$rare" -lt 1000 ] ||
		fail "null, ALLOCSTUB=$mode: ${rare:-no} rare-path calls for 200,000 allocations" \
			"beside a sampled block in the null pointer's granule"
	[ "$untracked" = 1 ] ||
		fail "null, ALLOCSTUB=$mode: samples_untracked '${untracked}', expected 1"
	for v in alloc_space inuse_space; do
		build/luaprof report -q "$t/alias.bin" -f collapsed --value $v -o "$t/$v.folded" \
			2>"$t/err" || { fail "null, ALLOCSTUB=$mode: no $v: $(cat "$t/err")"; continue 2; }
	done
	alloc=$(awk '{ s += $NF } END { printf "%.0f", s }' "$t/alloc_space.folded")
	inuse=$(awk '{ s += $NF } END { printf "%.0f", s }' "$t/inuse_space.folded")
	[ "$alloc" -ge $((1 << 30)) ] ||
		fail "null, ALLOCSTUB=$mode: alloc_space $alloc, without the 1 GiB sample"
	[ "$inuse" -lt $((1 << 30)) ] ||
		fail "null, ALLOCSTUB=$mode: inuse_space $inuse: the freed 1 GiB sample in use"
done

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
