#!/usr/bin/env bash
# C functions of a stripped C module (Debian's lua-cjson) are named after what the program's
# Lua calls them: package.loaded.cjson.encode's code is `cjson.encode`, where the profiles
# read `liblua5.1-cjson.so.0.0.0+0x45d0` (the agent's stand-in from the unwind table).
#  - CPU profile of a loop calling cjson.encode, under record (names read as lua_close
#    stops the profile) and through the Lua API (sysprof.stop): most samples are in
#    cjson.encode (its static helpers, which Lua has no name for, keep their stand-ins).
#  - Exact memory profile: the memprof report charges cjson.encode's allocation to it.
#  - A real ELF symbol wins: a module built with symbols shows its C name (cnm_spin), the
#    same module stripped its Lua name (cnm.spin).
#  - Stops with no Lua call to read the names in: os.exit's (at exit, on the VM's thread)
#    and SIGTERM's (termstop's thread, the VM's thread held in the signal's handler) read
#    them from the VM's memory: the stripped module's function is cnm.spin there too (it
#    was cnm.so+0x1150).
#  - The memory profiler's own stops of that kind, exact and sampled: cnm.alloc's allocations
#    (tables and strings made through the C API) are charged to cnm.alloc, stopped by os.exit
#    and by SIGTERM under record, and by os.exit through the Lua API (luaprof.memprof)
#    (they read cnm.so+0x...).
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof luaprof.so
luajit_dev "$t/apt.log" || skip "$why"
if ! [ -f /usr/lib/x86_64-linux-gnu/lua/5.1/cjson.so ]; then
	[ "$(id -u)" = 0 ] && have apt-get &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua-cjson >"$t/apt2.log" 2>&1 ||
		skip "lua-cjson is not installed (apt-get install lua-cjson, as root)"
fi
mkdir -p "$t/sym" "$t/strip"
cc_test "$t/sym/cnm.so" tests/integration/cmod_names.c -O2 -I"$inc" -fPIC -shared || exit 1
strip --strip-all -o "$t/strip/cnm.so" "$t/sym/cnm.so" || { echo "FAIL: strip"; exit 1; }

cat >"$t/enc.lua" <<'LUA'
local cjson = require "cjson"
local t = {a = {1, 2, 3, "x"}, b = "hello world", c = {d = true, e = 1.5}}
local c0, n = os.clock(), 0
while os.clock() - c0 < 1 do
	for _ = 1, 100 do n = n + #cjson.encode(t) end
end
LUA
cat >"$t/api.lua" <<LUA
package.cpath = "$PWD/build/?.so;" .. package.cpath
local sysprof = require("luaprof").sysprof
assert(sysprof.start{mode = "C", interval = 1, path = "api.bin"})
dofile("enc.lua")
assert(sysprof.stop())
LUA
cat >"$t/spin.lua" <<'LUA'
local m = require "cnm"
local c0 = os.clock()
while os.clock() - c0 < 0.5 do m.spin(100000) end
LUA
cat >"$t/exit.lua" <<'LUA'
local m = require "cnm"
local c0 = os.clock()
while os.clock() - c0 < 0.5 do m.spin(100000) end
os.exit(0)
LUA
# SIGTERM from a child of the program (its shell's parent), then spinning until it dies.
cat >"$t/term.lua" <<'LUA'
local m = require "cnm"
local c0 = os.clock()
while os.clock() - c0 < 0.5 do m.spin(100000) end
os.execute("kill -TERM $PPID")
while true do m.spin(100000) end
LUA
cat >"$t/memexit.lua" <<'LUA'
local m = require "cnm"
for _ = 1, 20 do m.alloc(1000) end
os.exit(0)
LUA
cat >"$t/memterm.lua" <<'LUA'
local m = require "cnm"
for _ = 1, 20 do m.alloc(1000) end
os.execute("kill -TERM $PPID")
while true do m.alloc(1000) end
LUA
cat >"$t/memapi.lua" <<LUA
package.cpath = "$PWD/build/?.so;./strip/?.so"
local memprof = require("luaprof").memprof
local m = require "cnm"
assert(memprof.start("memapi.bin", SAMPLE and {sample = 4096} or nil))
for _ = 1, 20 do m.alloc(1000) end
os.exit(0)
LUA
cat >"$t/mem.lua" <<'LUA'
local cjson = require "cjson"
local n = 0
for i = 1, 2000 do n = n + #cjson.encode({i, tostring(i)}) end
LUA

# FOLDED NAME: the share (percent) of samples with a frame NAME, and the samples.
share() {
	awk -v f="$2" '{ n = $NF; all += n; s = ";" $0; sub(/ [0-9]+$/, ";", s)
		if (index(s, ";" f ";")) in_f += n }
		END { printf "%d %d\n", all ? 100 * in_f / all : 0, all }' "$1"
}
# NAME SHARE ALL [UNIT]: at least 50 % of at least 100 samples (or UNIT) in the function.
check_share() {
	local u=${4:-samples}
	if [ "$3" -lt 100 ]; then fail "$1: $3 $u"
	elif [ "$2" -lt 50 ]; then fail "$1: $2 % of $3 $u in the function named, want 50 %+"
	else echo "ok $1: $2 % of $3 $u"; fi
}

# Under record: the names read at lua_close.
(cd "$t" && "$OLDPWD/build/luaprof" record -q --rate 1000 -f collapsed -o rec.folded \
	-- luajit enc.lua) >"$t/rec.out" 2>&1 || fail "record exited $?: $(head -3 "$t/rec.out")"
read -r pct all < <(share "$t/rec.folded" cjson.encode)
check_share "record cjson.encode" "$pct" "$all"

# Through the Lua API: the names read by sysprof.stop.
(cd "$t" && luajit api.lua) >"$t/api.out" 2>&1 || fail "api.lua exited $?: $(head -3 "$t/api.out")"
build/luaprof report "$t/api.bin" -f collapsed -o "$t/api.folded" >"$t/rep.out" 2>&1 ||
	fail "report of api.bin exited $?: $(head -3 "$t/rep.out")"
read -r pct all < <(share "$t/api.folded" cjson.encode)
check_share "sysprof.stop cjson.encode" "$pct" "$all"

# An ELF symbol wins over the Lua name; stripped, the Lua name.
for v in sym strip; do
	(cd "$t" && LUA_CPATH="./$v/?.so" "$OLDPWD/build/luaprof" record -q --rate 1000 -f collapsed \
		-o $v.folded -- luajit spin.lua) >"$t/$v.out" 2>&1 ||
		fail "$v: record exited $?: $(head -3 "$t/$v.out")"
done
read -r pct all < <(share "$t/sym.folded" cnm_spin)
check_share "module with symbols: cnm_spin" "$pct" "$all"
grep -q ";cnm\.spin" "$t/sym.folded" && fail "module with symbols: named cnm.spin"
read -r pct all < <(share "$t/strip.folded" cnm.spin)
check_share "stripped module: cnm.spin" "$pct" "$all"

# Stopped by os.exit and by SIGTERM (record passes on the program's status: 0, 143).
for v in exit term; do
	(cd "$t" && LUA_CPATH="./strip/?.so" "$OLDPWD/build/luaprof" record -q --rate 1000 \
		-f collapsed -o $v.folded -- luajit $v.lua) >"$t/$v.out" 2>&1
	rc=$?
	want=0
	[ $v = term ] && want=143
	[ $rc = $want ] || fail "$v: record exited $rc, want $want: $(head -3 "$t/$v.out")"
	read -r pct all < <(share "$t/$v.folded" cnm.spin)
	check_share "stripped module, stopped by $v: cnm.spin" "$pct" "$all"
done

# Exact memory profile: the memprof report names cjson.encode's allocation.
(cd "$t" && "$OLDPWD/build/luaprof" record -q --memory -o mem.txt -- luajit mem.lua) \
	>"$t/mem.out" 2>&1 || fail "record --memory exited $?: $(head -3 "$t/mem.out")"
if grep -q "^cjson\.encode:0x[0-9a-f]*: [0-9]* events" "$t/mem.txt"; then
	echo "ok memprof report: $(grep -m1 "^cjson\.encode" "$t/mem.txt")"
else
	fail "memprof report: no cjson.encode site: $(grep -m3 "cjson" "$t/mem.txt" | tr '\n' '|')"
fi

# Memory profiles of the stripped module stopped by os.exit and by SIGTERM: exact (the
# memprof report's site) and sampled (the share of allocated bytes under cnm.alloc).
for v in exit term; do
	want=0
	[ $v = term ] && want=143
	(cd "$t" && LUA_CPATH="./strip/?.so" "$OLDPWD/build/luaprof" record -q --memory \
		-o mem$v.txt -- luajit mem$v.lua) >"$t/mem$v.out" 2>&1
	rc=$?
	[ $rc = $want ] || fail "memory $v: record exited $rc, want $want: $(head -3 "$t/mem$v.out")"
	if grep -q "^cnm\.alloc:0x[0-9a-f]*: [0-9]* events" "$t/mem$v.txt"; then
		echo "ok exact memory, stopped by $v: $(grep -m1 "^cnm\.alloc" "$t/mem$v.txt")"
	else
		fail "exact memory, stopped by $v: no cnm.alloc site:" \
			"$(grep -m3 "cnm" "$t/mem$v.txt" | tr '\n' '|')"
	fi
	(cd "$t" && LUA_CPATH="./strip/?.so" "$OLDPWD/build/luaprof" record -q --memory \
		--sample 4K -f collapsed -o smp$v.folded -- luajit mem$v.lua) >"$t/smp$v.out" 2>&1
	rc=$?
	[ $rc = $want ] || fail "sampled $v: record exited $rc, want $want: $(head -3 "$t/smp$v.out")"
	read -r pct all < <(share "$t/smp$v.folded" cnm.alloc)
	check_share "sampled memory, stopped by $v: cnm.alloc" "$pct" "$all" bytes
done
# luaprof.memprof stopped by os.exit, exact and sampled.
for v in exact sampled; do
	init=
	[ $v = sampled ] && init="SAMPLE = true"
	rm -f "$t/memapi.bin"
	(cd "$t" && luajit -e "$init" memapi.lua) >"$t/api$v.out" 2>&1 ||
		fail "memapi.lua ($v) exited $?: $(head -3 "$t/api$v.out")"
	build/luaprof report "$t/memapi.bin" -f collapsed -o "$t/api$v.folded" >"$t/apirep.out" 2>&1 ||
		fail "report of memapi.bin ($v) exited $?: $(head -3 "$t/apirep.out")"
	read -r pct all < <(share "$t/api$v.folded" cnm.alloc)
	check_share "memprof.start ($v), stopped by os.exit: cnm.alloc" "$pct" "$all" bytes
done

[ "$fails" = 0 ] && echo "PASS $name" || exit 1
