-- A sysbench script for sysbench_lua.sh: two worker threads, each with its own LuaJIT VM
-- (sysbench's threads have 64 KiB stacks). Thread 0 profiles its VM (environment:
-- OUT, MODE = "cpu+sampled" or "exact") and runs work_a; thread 1 runs work_b unprofiled,
-- so nothing of work_b may appear in the profiles.
local lp

function thread_init()
	package.cpath = os.getenv("LUAPROF_CPATH") .. ";" .. package.cpath
	lp = require "luaprof"
	if sysbench.tid ~= 0 then return end
	local out, mode = os.getenv("OUT"), os.getenv("MODE")
	if mode == "exact" then
		assert(lp.memprof.start(out .. "/exact.bin"))
	else
		assert(lp.sysprof.start{ mode = "C", interval = 1, path = out .. "/cpu.bin" })
		assert(lp.memprof.start(out .. "/sampled.bin", { sample = 65536 }))
	end
end

local function work_a(n)
	local t = {}
	for i = 1, n do t[#t + 1] = ("a%d:%d"):format(i, sysbench.tid) end --@a
	return #table.concat(t)
end

local function work_b(n)
	local t = {}
	for i = 1, n do t[#t + 1] = ("b%d:%d"):format(i, sysbench.tid) end --@b
	return #table.concat(t)
end

function event()
	if sysbench.tid == 0 then work_a(2000) else work_b(2000) end --@event
end

function thread_done()
	if sysbench.tid ~= 0 then return end
	assert(lp.memprof.stop())
	if os.getenv("MODE") ~= "exact" then assert(lp.sysprof.stop()) end
end
