#!/usr/bin/env bash
# Hosts whose VM the agent does not profile, from Debian's packages:
#   - tarantool 2.6: its own LuaJIT fork linked in, built without GC64;
#   - lua5.1: PUC Lua, not LuaJIT at all.
# In each the agent loads; both profilers (and the misc.memprof it installs) refuse to
# start with a message naming the reason and errno 22; a file given as the path keeps its
# contents and none is created (start opened it with O_TRUNC before it knew the VM, and
# emptied the file); the host goes on and exits 0. The checks run inside the host
# (unsupported/refuse.lua).
# Later PUC Luas, whose C API is not LuaJIT's: lua5.4, lua5.3 and rpm (Lua 5.3 embedded,
# run by `rpm --eval '%{lua:...}'`). require "luaprof" fails with an error naming the VM;
# `luaprof record -- lua5.4 script` runs the script unprofiled and says why, as for lua5.1.
# Found: the module did not load there ("undefined symbol: lua_pcall"), and record's
# LUA_INIT ended the program with that error before the script ran.
# A missing host is skipped; exit 2 when all are. Exit 0 pass, 1 fail, 2 skip.
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
# check_later LABEL VERSION COMMAND...: COMMAND runs Lua code given as its last argument.
check_later() {
	local label=$1 ver=$2 out
	shift 2
	ran=$((ran + 1))
	out=$("$@" "package.cpath = '$PWD/build/?.so;' .. package.cpath
		print('require:', pcall(require, 'luaprof'))" 2>&1)
	case $out in
	*"require:"*false*"luaprof: cannot load: profiler misuse: not a LuaJIT VM (PUC Lua $ver,"*)
		echo "ok $label: require refused: ${out#*false}" ;;
	*) fail "$label: require "luaprof" said: $out" ;;
	esac
}
later=0
for v in 5.3 5.4; do
	have lua$v || continue
	later=1
	check_later lua$v $v lua$v -e
	# record: the script runs to its end (its output, its status told), the agent's
	# message says why there is no profile, and record exits 1 for that. The user's own
	# LUA_INIT runs too (record's loader ran it with loadstring, which 5.2 removed).
	printf 'print("script ran")\nos.exit(7)\n' >"$t/script.lua"
	LUA_INIT='print("user init")' build/luaprof record -o "$t/later.svg" -- lua$v "$t/script.lua" \
		>"$t/rec.out" 2>&1
	rc=$?
	if [ $rc = 1 ] && grep -qx "user init" "$t/rec.out" && grep -qx "script ran" "$t/rec.out" &&
		grep -q "lua$v exited with status 7" "$t/rec.out" &&
		grep -q "^luaprof: not profiling: profiler misuse: not a LuaJIT VM (PUC Lua $v," "$t/rec.out" &&
		grep -q "wrote no profile: the profiler did not start" "$t/rec.out"; then
		echo "ok record -- lua$v: the script ran unprofiled (status 7), with the reason"
	else
		fail "record -- lua$v (exit $rc, want 1):
$(cat "$t/rec.out")"
	fi
done
[ $later = 1 ] || echo "$name: neither lua5.3 nor lua5.4 is installed (scripts/setup.sh --test): not checked"
if have rpm; then
	rpm_lua() { rpm --eval "%{lua: $1}"; }
	check_later rpm 5.3 rpm_lua
else
	echo "$name: rpm is not installed (scripts/setup.sh --test): not checked"
fi
[ $ran -gt 0 ] || skip "none of tarantool, lua5.1, lua5.3, lua5.4 and rpm is installed"
[ $fails -eq 0 ] || exit 1
echo "PASS $name"
