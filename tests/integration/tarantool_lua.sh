#!/usr/bin/env bash
# A host whose VM the agent does not support: Debian's tarantool 2.6, its own LuaJIT fork
# linked in, built without GC64. The agent loads in it; both profilers (and misc.memprof,
# installed when Tarantool has none) refuse to start with a message naming the reason and
# errno 22; a file given as the path keeps its contents and none is created (start opened
# it with O_TRUNC before it knew the VM, and emptied the file); tarantool goes on and exits 0.
# The checks run inside tarantool (tarantool/refuse.lua). Exit 0 pass, 1 fail, 2 skip.
set -u
cd "$(dirname "$0")/../.." || exit 1
name=tarantool_lua
t=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX") || exit 1
trap 'rm -rf "$t"' EXIT
[ -x build/luaprof ] && [ -f build/luaprof.so ] || { echo "build/ is incomplete (run make)"; exit 1; }
command -v tarantool >/dev/null 2>&1 || { echo "SKIP $name: tarantool is not installed (scripts/setup.sh --test)"; exit 2; }

printf 'precious\n' >"$t/old.bin"
(cd "$t" && tarantool "$OLDPWD/tests/integration/tarantool/refuse.lua" "$t" "$OLDPWD/build/?.so") \
	>"$t/out" 2>&1
rc=$?
cat "$t/out"
[ $rc = 0 ] || { echo "FAIL: tarantool exited $rc"; exit 1; }
grep -q '^FAIL' "$t/out" && exit 1
[ "$(grep -c '^ok ' "$t/out")" -ge 8 ] || { echo "FAIL: fewer checks ran than expected"; exit 1; }
echo "PASS $name"
