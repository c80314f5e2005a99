#!/usr/bin/env bash
# A stopped sampled memory profile gives its memory back: its stacks, samples and live map
# (about the sampled part of the live heap) were kept after memprof.stop() until the next
# start, for good in a program that profiled once (8 MB more for 300,000 live samples than
# for 1,000). memprof_release.c measures malloc's bytes in use around a profile whose
# program keeps 1,000, then 300,000 sampled tables: the difference may not grow with them.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
cc_test "$t/memprof_release" tests/integration/memprof_release.c -O1 -I$inc -lluajit-5.1 ||
	exit 1

for n in 10 3000; do
	"$t/memprof_release" "$PWD/build/?.so" "$t" $n >"$t/out.$n" 2>&1 ||
		fail "N=$n: exit $?: $(cat "$t/out.$n")"
	build/luaprof report -q "$t/rel.bin" >/dev/null 2>"$t/err" ||
		fail "N=$n: the profile does not read: $(cat "$t/err")"
done
small=$(awk '/^held /{print $2}' "$t/out.10")
large=$(awk '/^held /{print $2}' "$t/out.3000")
if [ -z "$small" ] || [ -z "$large" ]; then
	fail "no measure: $(cat "$t/out.10" "$t/out.3000")"
elif [ $((large - small)) -gt $((1 << 20)) ]; then
	fail "a stopped profile of 300,000 live samples keeps $((large - small)) bytes more than one of 1,000"
fi

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
