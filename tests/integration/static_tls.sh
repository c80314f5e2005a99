#!/usr/bin/env bash
# luaprof.so must not need static TLS (DF_STATIC_TLS): a module dlopen'ed by require takes its
# whole TLS block (360 bytes) from the small surplus glibc keeps for such libraries, and then
# require fails ("cannot allocate memory in static TLS block") in a process whose other
# dlopen'ed libraries use most of it, or they fail after it. dc9c177 made rare_mine
# initial-exec. Check: the flag, and require after a library that leaves < 360 bytes of it.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
need_build luaprof.so
command -v luajit >/dev/null || skip "no luajit"

if readelf -dW build/luaprof.so | grep -q 'STATIC_TLS'; then
	fail "build/luaprof.so has DF_STATIC_TLS (initial-exec TLS in a dlopen'ed module)"
fi
# The surplus left to dlopen: the largest initial-exec block that loads alone (glibc 2.36: ~1.6 KiB).
big=0
for n in 2048 1792 1664 1600 1536 1472 1408 1344 1280; do
	printf 'static __thread char b[%d] __attribute__((tls_model("initial-exec")));\nint f(int i) { return ++b[i %% %d]; }\n' $n $n >"$t/f.c"
	${CC:-cc} -shared -fPIC -o "$t/f$n.so" "$t/f.c" || exit 1
	if luajit -e "assert(package.loadlib('$t/f$n.so', '*'))" 2>/dev/null; then big=$n; break; fi
done
[ $big != 0 ] || skip "no initial-exec library loads here"
out=$(luajit -e "assert(package.loadlib('$t/f$big.so', '*'))
package.cpath = 'build/?.so'
local ok, e = pcall(require, 'luaprof')
print(ok and 'loaded' or e)" 2>&1)
[ "$out" = loaded ] || fail "require 'luaprof' after a $big-byte initial-exec library: $out"

[ $fails = 0 ] || exit 1
echo "ok"
exit 0
