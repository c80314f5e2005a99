-- Like-for-like check of the memory profiler's exact mode against Tarantool's memprof:
-- the same binary-trees work timed unprofiled and profiled, interleaved, CPU time.
--
--   luajit bench/memprof_vs_tarantool.lua lp [ROUNDS]            # luaprof, stock LuaJIT
--   <tarantool/luajit build>/src/luajit bench/memprof_vs_tarantool.lua tt [ROUNDS]
--
-- `tt` uses the interpreter's own misc.memprof (Tarantool's LuaJIT fork, built from
-- tarantool/luajit with -DLUAJIT_ENABLE_GC64=ON); `lp` loads build/luaprof.so. Add -joff
-- before the script for the interpreter only. Prints the median, min and max of the
-- profiled / unprofiled ratio over ROUNDS rounds (default 7). Profiles go to /dev/shm.
local mode, rounds = arg[1], tonumber(arg[2]) or 7
assert(mode == "lp" or mode == "tt", "usage: memprof_vs_tarantool.lua lp|tt [ROUNDS]")

local B = dofile((arg[0]:match("^(.*)/") or ".") .. "/benchlib.lua")
local work = B.bintrees

local mp
if mode == "lp" then
	package.cpath = "build/?.so;" .. package.cpath
	mp = require("luaprof").memprof
else
	mp = assert(misc and misc.memprof, "this interpreter has no misc.memprof")
end
local path = "/dev/shm/memprof_vs_tarantool.bin"
work(20)
local ratios = {}
for _ = 1, rounds do
	collectgarbage()
	local t0 = os.clock()
	work(60)
	local base = os.clock() - t0
	collectgarbage()
	assert(mp.start(path))
	t0 = os.clock()
	work(60)
	local prof = os.clock() - t0
	assert(mp.stop())
	ratios[#ratios + 1] = prof / base
end
os.remove(path)
table.sort(ratios)
print(string.format("%s: median %.3f min %.3f max %.3f (%d rounds)", mode,
	ratios[math.floor((#ratios + 1) / 2)], ratios[1], ratios[#ratios], rounds))
