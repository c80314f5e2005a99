#!/usr/bin/env bash
# A profile started with almost no file descriptor left either starts or says that there
# is none ("Too many open files"): with one free, the CPU profiler said "cannot find the
# thread's stack" with errno ENOMEM (glibc reads /proc/self/maps for the main thread's
# stack). Both profilers, 1 to 6 descriptors free; each started one is stopped whole.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init

need_x86_64
need_build luaprof.so
have luajit || skip "no luajit"

cat >"$t/fd.lua" <<'LUA'
package.cpath = arg[1] .. "/?.so;" .. package.cpath
local lp = require("luaprof")
local ffi = require("ffi")
ffi.cdef[[int dup(int); int close(int);]]
local dir, bad, started = arg[2], 0, 0
local fds = {}
while true do local fd = ffi.C.dup(0) if fd < 0 then break end fds[#fds + 1] = fd end
local function run(what, k, start, stop)
	for _ = 1, k do ffi.C.close(table.remove(fds)) end
	local ok, msg, e = start()
	if ok then
		started = started + 1
		local sok, smsg = stop()
		if not sok then bad = bad + 1 print(what, k, "stop:", smsg) end
	elseif not tostring(msg):find("Too many open files", 1, true) then
		bad = bad + 1
		print(what, k, "refused with:", msg, e)
	end
	for _ = 1, k do local fd = ffi.C.dup(0) if fd >= 0 then fds[#fds + 1] = fd end end
end
for k = 1, 6 do
	run("cpu", k, function() return lp.sysprof.start({ mode = "C", path = dir .. "/c" .. k }) end,
	    lp.sysprof.stop)
	run("memory", k, function() return lp.memprof.start(dir .. "/m" .. k) end, lp.memprof.stop)
end
print(("started %d of 12, %d bad"):format(started, bad))
LUA
out=$(ulimit -n 64 && luajit "$t/fd.lua" "$PWD/build" "$t" 2>&1)
echo "$out" | grep -q '^started [1-9][0-9]* of 12, 0 bad$' || { echo "$out"; echo "FAIL: $(echo "$out" | tail -1)"; exit 1; }
echo "ok ($(echo "$out" | tail -1))"
exit 0
