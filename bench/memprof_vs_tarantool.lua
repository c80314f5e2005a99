-- Like-for-like check of the memory profiler's exact mode against Tarantool's memprof: the
-- same work timed unprofiled and profiled, interleaved, CPU time, in one process.
--
--   luajit bench/memprof_vs_tarantool.lua lp [ROUNDS [WORKLOAD...]]   # luaprof, stock LuaJIT
--   <tarantool/luajit build>/src/luajit bench/memprof_vs_tarantool.lua tt [ROUNDS [WORKLOAD...]]
--
-- `tt` uses the interpreter's own misc.memprof (Tarantool's LuaJIT fork, built from
-- tarantool/luajit with -DLUAJIT_ENABLE_GC64=ON); `lp` loads build/luaprof.so. Add -joff
-- before the script for the interpreter only. Workloads (benchlib.lua), default all:
--   binary-trees  the Benchmarks Game program (Tarantool's published +16 %) at depth 15,
--                 a smaller run of binary-trees-16
--   bintrees      binary trees without the long-lived tree: the densest allocation
--   life          Conway's life, 64x64, a new grid and a rendered string per generation
--                 (Tarantool published +76 % on LuaJIT's life.lua)
--   binary-trees-16  the same program at depth 16, the size LuaJIT's benchmark suite
--                 gives it on x86 (PARAM_x86.txt) and Tarantool's memprof benchmark ran;
--                 with MEMPROF_OUT=/dev/null this is that benchmark's method
-- Prints per workload the median, min and max of the profiled / unprofiled ratio of process
-- CPU time (os.clock: luaprof's writer thread included) over ROUNDS rounds (default 9),
-- the median ratio of wall time (where luaprof's writer thread runs beside the program on
-- a second CPU; Tarantool's memprof writes on the program's thread, so its two agree),
-- and the events per second of wall time. Profiles go to MEMPROF_OUT
-- (default /dev/shm/memprof_vs_tarantool.bin, removed at the end); each round runs jit.flush() and a full
-- collection before each run.
local mode, rounds = arg[1], tonumber(arg[2]) or 9
assert(mode == "lp" or mode == "tt",
	"usage: memprof_vs_tarantool.lua lp|tt [ROUNDS [WORKLOAD...]]")

local B = dofile((arg[0]:match("^(.*)/") or ".") .. "/benchlib.lua")
B.clocks()
local works = {
	["binary-trees"] = function() return B.binary_trees(15) end,
	["binary-trees-16"] = function() return B.binary_trees(16) end,
	bintrees = function() return B.bintrees(150) end,
	life = function() return B.life(2000) end,
}
local order = { select(3, unpack(arg)) }
if #order == 0 then order = { "binary-trees", "bintrees", "life" } end

local mp
if mode == "lp" then
	package.cpath = "build/?.so;" .. package.cpath
	mp = require("luaprof").memprof
else
	mp = assert(misc and misc.memprof, "this interpreter has no misc.memprof")
end
local path = os.getenv("MEMPROF_OUT") or "/dev/shm/memprof_vs_tarantool.bin"
local own_path = not os.getenv("MEMPROF_OUT")

-- Events in a profile: luaprof counts them; Tarantool's API does not (nil).
local function events()
	return mode == "lp" and mp.report().events or nil
end

for _, name in ipairs(order) do
	local work = assert(works[name], "unknown workload " .. name)
	work()
	local ratios, walls, evs = {}, {}, {}
	for r = 1, rounds do
		local base, prof, wbase, wprof
		for _, profiled in ipairs(r % 2 == 0 and { false, true } or { true, false }) do
			jit.flush()
			collectgarbage()
			if profiled then assert(mp.start(path)) end
			local t0, w0 = os.clock(), B.now(B.MONO)
			work()
			local dt, wt = os.clock() - t0, B.now(B.MONO) - w0
			if profiled then
				assert(mp.stop())
				prof, wprof = dt, wt
				local n = events()
				if n then evs[#evs + 1] = n / wt end
			else
				base, wbase = dt, wt
			end
		end
		ratios[#ratios + 1] = prof / base
		walls[#walls + 1] = wprof / wbase
	end
	table.sort(ratios)
	table.sort(walls)
	table.sort(evs)
	print(string.format("%s %s: median %.3f min %.3f max %.3f, wall %.3f (%d rounds)%s",
		mode, name, ratios[math.floor((#ratios + 1) / 2)], ratios[1], ratios[#ratios],
		walls[math.floor((#walls + 1) / 2)], rounds,
		#evs > 0 and string.format(", %.1fM events/s", evs[math.floor((#evs + 1) / 2)] / 1e6)
			or ""))
end
if own_path then os.remove(path) end
