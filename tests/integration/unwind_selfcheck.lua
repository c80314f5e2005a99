-- Workload of memprof_sampled.sh's unwinder self-check: allocations and CPU time under
-- recursion, builtins, a coroutine and a sort comparator (Lua called back from C),
-- profiled by an agent built with -DLP_UNWIND_SELFCHECK, which takes every compact step
-- by libunwind too and counts the frames where the two differ (meta unwind_compact_*).
--   luajit unwind_selfcheck.lua BUILD_DIR MEMOUT CPUOUT on|off
local build, memout, cpuout, jitmode = arg[1], arg[2], arg[3], arg[4]
package.cpath = build .. "/?.so;" .. package.cpath
if jitmode == "off" then jit.off() else jit.on() end
local lp = require("luaprof")

local function tree(d)
	if d == 0 then return {} end
	return { tree(d - 1), tree(d - 1) }
end
local function strings(n)
	local t = {}
	for i = 1, n do t[#t + 1] = string.format("%d:%s", i, string.rep("x", i % 40)) end
	return table.concat(t, ",")
end
local function work()
	local s = 0
	for _ = 1, 20 do s = s + #tree(10) end
	s = s + #strings(2000)
	local co = coroutine.wrap(function()
		for i = 1, 200 do coroutine.yield(#tree(4) + #strings(20) + i) end
	end)
	for _ = 1, 200 do s = s + co() end
	local t = {}
	for i = 1, 2000 do t[i] = tostring(i * 7) end
	table.sort(t, function(a, b) return #a .. a < #b .. b end)
	return s
end

assert(lp.memprof.start(memout, { sample = 1024 }))
for _ = 1, 5 do work() end
assert(lp.memprof.stop())

assert(lp.sysprof.start({ mode = "C", interval = 1, clock = "wall", path = cpuout }))
local t0 = os.clock()
while os.clock() - t0 < 0.5 do work() end
assert(lp.sysprof.stop())
print("ran")
