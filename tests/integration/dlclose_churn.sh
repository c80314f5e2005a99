#!/usr/bin/env bash
# Libraries loaded and unloaded while the CPU profiler runs (C mode, 1 kHz). The profiler's
# writer thread learns unwind rules for addresses the handler met, reading the unwind
# tables of the objects they are in; a library unloaded meanwhile (an FFI library
# collected, every C module at lua_close) left it reading unmapped memory: the program
# was killed by SIGSEGV in agent_unwind_learn, within two seconds in the first case, about
# one run in five in the second.
#  ffi      ffi.load a copy of the library (a new file name each time, variant K%7), call
#           work_V, drop it and collect it (dlclose); 3 s, three times;
#  loadlib  package.loadlib 300 copies (never unloaded until lua_close closes them all at
#           exit), calling each one's l_work_V; five times.
# Every run must end normally; in loadlib's runs (each copy at an address of its own),
# samples in the library must be named after the variant that ran (the caller's line says
# which). Not checked in ffi's (a library loaded every 0.1 to 0.7 ms): that the samples of
# libraries loaded one after the other at one address are named after the one that ran is
# dlclose_names.sh's.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof.so luaprof
luajit_dev "$t/apt.log" || skip "$why"
have luajit || skip "no luajit"

for v in 0 1 2 3 4 5 6; do
	cc_test "$t/v$v.so" tests/integration/$name.c -O1 -fPIC -shared -I"$inc" -DV=$v || exit 1
done
mkdir -p "$t/c"
for k in $(seq 1 300); do cp "$t/v$((k % 7)).so" "$t/c/lib_$k.so"; done

cat >"$t/churn.lua" <<'LUA'
local mode, secs, n, dir = arg[1], tonumber(arg[2]), tonumber(arg[3]), arg[4]
local ffi = require("ffi")
for v = 0, 6 do ffi.cdef("unsigned work_" .. v .. "(unsigned n);") end
local function call(v, f)
  if v == 0 then local r = f(100000) return r
  elseif v == 1 then local r = f(200000) return r
  elseif v == 2 then local r = f(300000) return r
  elseif v == 3 then local r = f(400000) return r
  elseif v == 4 then local r = f(500000) return r
  elseif v == 5 then local r = f(600000) return r
  else local r = f(700000) return r end
end
local t_end, k = os.clock() + secs, 0
while os.clock() < t_end do
  k = k + 1
  if mode == "loadlib" and k > n then break end
  local kk = (k - 1) % n + 1
  local v, path = kk % 7, dir .. "/lib_" .. kk .. ".so"
  if mode == "loadlib" then
    call(v, assert(package.loadlib(path, "luaopen_churn"))())
  else
    local lib = ffi.load(path)
    call(v, lib["work_" .. v])
    lib = nil
    collectgarbage()
  end
end
LUA

# check FOLDED: every frame work_X / l_work_X above call()'s line for variant V has X == V
# (call() is on line 4; variant V's call is on line 5 + V).
check() {
	awk '{ n = $NF; split($0, f, ";"); v = -1
		for (i = 1; i <= length(f); i++) {
			fr = f[i]; sub(/ [0-9]+$/, "", fr)
			if (fr ~ /^@.*\/churn\.lua:[0-9]+$/) { v = substr(fr, match(fr, /:[0-9]+$/) + 1) - 5; continue }
			if (v >= 0 && v <= 6 && fr ~ /^(l_)?work_[0-9]$/) {
				if (substr(fr, length(fr)) + 0 == v) ok += n; else bad += n
			}
		} } END { print ok + 0, bad + 0 }' "$1"
}

run() { # LABEL ARGS...
	local label=$1
	shift
	build/luaprof record -q --rate 1000 --clock wall -f collapsed -o "$t/$label.folded" \
		-- luajit "$t/churn.lua" "$@" "$t/c" >"$t/$label.out" 2>&1
	local rc=$?
	if [ $rc -ne 0 ]; then
		fail "$label: exit $rc: $(grep -m1 -i 'killed\|error' "$t/$label.out")"
		return
	fi
	read -r ok bad < <(check "$t/$label.folded")
	case $label in loadlib*)
		[ "$bad" -eq 0 ] || fail "$label: $bad samples in the library named after another variant"
		echo "$label: exit 0, $ok samples in the library named after their variant" ;;
	*)	echo "$label: exit 0" ;;
	esac
}

for i in 1 2 3; do run ffi$i ffi 3 300; done
for i in 1 2 3 4 5; do run loadlib$i loadlib 60 300; done
tot=$(cat "$t"/*.folded | awk '/work_/ { n += $NF } END { print n + 0 }')
[ "$tot" -gt 0 ] || fail "no sample in the library's functions"

[ $fails -eq 0 ] && echo "PASS $name" && exit 0
echo "FAIL $name ($fails)"
exit 1
