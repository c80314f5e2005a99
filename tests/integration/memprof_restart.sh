#!/usr/bin/env bash
# A sampled profile started again after the program set an allocator of its own over the
# first profile's wrapper (memprof_restart.c): that wrapper stays in the chain under the
# program's allocator, and used to count the second profile's bytes down too, so samples
# came twice as often and the estimate of the bytes allocated was twice the true one
# (151 MB for 76.6 MB). Also with the second profile in another state with the same
# allocator function (LuaJIT's, another ud), whose loop makes the first state allocate
# between its own allocations: the generated stub counted the first state's bytes too
# (148 MB for 76.6 MB). The estimate must be within 10% of the bytes the program's
# allocator saw asked for (about 4,600 samples: a 1.5% standard error), with the generated
# stub and with the compiled wrapper (LUAPROF_ALLOCSTUB=0).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/memprof_restart" tests/integration/memprof_restart.c -O1 -I$inc -lluajit-5.1 ||
	exit 1

[ "$(uname -m)" = x86_64 ] && stub=generated || stub=compiled
for run in 1 0 "1 other" "0 other"; do
	read -r mode other <<<"$run"
	[ $mode = 1 ] && want=$stub || want=compiled
	want="$want${other:+, other state}"
	rm -f "$t/restart.bin"
	LUAPROF_ALLOCSTUB=$mode "$t/memprof_restart" "$PWD/build/?.so" "$t" 16384 $other \
		>"$t/out" 2>&1 || { fail "$want: exit $?: $(cat "$t/out")"; continue; }
	asked=$(awk '/^asked /{print $2}' "$t/out")
	build/luaprof report -q "$t/restart.bin" -f collapsed -o "$t/alloc.folded" 2>"$t/err" ||
		{ fail "$want: the profile does not read: $(cat "$t/err")"; continue; }
	w=$(build/luaprof report -q -f info "$t/restart.bin" | sed -n 's/^meta.wrapper: //p')
	[ "$w" = "${want%%,*}" ] || fail "the $w wrapper ran, not the ${want%%,*} one"
	est=$(awk '{ s += $NF } END { printf "%d", s }' "$t/alloc.folded")
	if [ -z "$asked" ] || [ "$asked" -lt 50000000 ]; then
		fail "$want: the program allocated too little to judge: $(cat "$t/out")"
	else
		pct=$((est * 100 / asked))
		[ $pct -ge 90 ] && [ $pct -le 110 ] ||
			fail "$want: estimated $est bytes allocated, the program asked for $asked ($pct%)"
	fi
done

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
