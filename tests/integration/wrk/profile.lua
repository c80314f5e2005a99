-- A wrk script for wrk_lua.sh (environment: OUT, MODE, LUAPROF_CPATH). wrk makes one
-- LuaJIT state per thread and runs its init (and a first request, to check it) on the main
-- thread, then the requests and responses on the thread's own.
--   MODE=init:     the CPU profile starts in init, on the main thread (wall clock): its
--                  samples are the main thread's; the state runs on the workers.
--   MODE=initmem:  the sampled memory profile starts in init: the allocations are the
--                  worker's.
--   MODE=response: the CPU profile (CPU clock) and the sampled memory profile start in
--                  the first response, on a worker thread: that thread's requests.
package.cpath = os.getenv("LUAPROF_CPATH") .. ";" .. package.cpath
local lp = require "luaprof"
local out, mode = os.getenv("OUT"), os.getenv("MODE")
local started

function init(args)
	-- Once for each thread's state: the first start wins, the second is told the
	-- profiler runs in another state.
	if mode == "init" then
		lp.sysprof.start{ mode = "C", interval = 1, clock = "wall", path = out .. "/init.bin" }
	elseif mode == "initmem" then
		lp.memprof.start(out .. "/initmem.bin", { sample = 16384 })
	end
end

function response(status, headers, body)
	if mode == "response" and started == nil then
		-- The other worker's state is told the profiler runs in another one.
		started = lp.sysprof.start{ mode = "C", interval = 1, path = out .. "/cpu.bin" }
			and lp.memprof.start(out .. "/mem.bin", { sample = 16384 }) or false
	end
end

local function make(n)
	local parts = {}
	for i = 1, n do parts[#parts + 1] = ("k%d=%d"):format(i, (i * 7919) % 1000) end --@make
	return table.concat(parts, "&")
end

-- Requests that keep the workers in Lua code most of the time: with init's wall clock the
-- profiler's first ticks end wrk's sleep on the main thread, so the run lasts about 0.1 s.
local size = mode == "init" and 100000 or 20000

function request()
	return wrk.format("GET", "/?" .. make(size):sub(1, 200)) --@request
end
