#!/usr/bin/env bash
# Hosts whose VM the agent does not profile, from Debian's packages:
#   - tarantool 2.6: its own LuaJIT fork linked in, built without GC64;
#   - lua5.1: PUC Lua, not LuaJIT at all.
# In each the agent loads; both profilers (and the misc.memprof it installs) refuse to
# start with a message naming the reason and errno 22; a file given as the path keeps its
# contents and none is created (start opened it with O_TRUNC before it knew the VM, and
# emptied the file); the host goes on and exits 0. The checks run inside the host
# (unsupported/refuse.lua). A missing host is skipped; exit 2 when both are.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
need_build luaprof luaprof.so
ran=0

check_host() { # check_host LABEL REASON COMMAND...
	local label=$1 reason=$2 rc
	shift 2
	mkdir -p "$t/$label"
	printf 'precious\n' >"$t/$label/old.bin"
	"$@" tests/integration/unsupported/refuse.lua "$t/$label" "$PWD/build/?.so" "$reason" \
		>"$t/$label.out" 2>&1
	rc=$?
	sed "s/^/$label: /" "$t/$label.out"
	ran=$((ran + 1))
	if [ $rc != 0 ] || grep -q '^FAIL' "$t/$label.out" ||
		[ "$(grep -c '^ok ' "$t/$label.out")" -lt 10 ]; then
		echo "FAIL: $label (exit $rc)"
		fails=$((fails + 1))
	fi
}

if command -v tarantool >/dev/null 2>&1; then
	check_host tarantool "unsupported LuaJIT build (non-GC64" tarantool
else
	echo "$name: tarantool is not installed (scripts/setup.sh --test): not checked"
fi
if command -v lua5.1 >/dev/null 2>&1; then
	check_host lua5.1 "not a LuaJIT VM" lua5.1
else
	echo "$name: lua5.1 is not installed (scripts/setup.sh --test): not checked"
fi
[ $ran -gt 0 ] || skip "neither tarantool nor lua5.1 is installed"
[ $fails -eq 0 ] || exit 1
echo "PASS $name"
