-- What the Lua halves of the benchmarks share: clocks, the calibration of a workload's
-- size, and the binary-trees workload of the memory benchmarks.
--
--   local B = dofile((arg[0]:match("^(.*)/") or ".") .. "/benchlib.lua")
local B = {}

-- Binary trees (the Benchmarks Game's): per unit, a tree of depth 14 of small tables
-- built, walked and dropped, plus a short-lived tree of depth 4. Plain Lua: it also runs
-- under interpreters without the FFI.
local function bottom_up(depth)
	if depth == 0 then return {} end
	depth = depth - 1
	return { bottom_up(depth), bottom_up(depth) }
end
local function check(tree)
	if tree[1] then return 1 + check(tree[1]) + check(tree[2]) end
	return 1
end
function B.bintrees(units)
	local s = 0
	for _ = 1, units do
		s = s + check(bottom_up(14)) + check(bottom_up(4))
	end
	return s
end

-- Clocks (clock_gettime ids): monotonic, process CPU time, this thread's CPU time.
B.MONO, B.PCPU, B.TCPU = 1, 2, 3
function B.clocks()
	local ffi = require "ffi"
	ffi.cdef [[
	typedef struct { long tv_sec; long tv_nsec; } bench_ts;
	int clock_gettime(int clk, bench_ts *ts);
	]]
	local ts = ffi.new("bench_ts")
	B.now = function(clk)
		ffi.C.clock_gettime(clk, ts)
		return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
	end
end

-- Prints "n=K": the size that makes f(K) take about target seconds (doubling until a run
-- lasts 0.25 s, then scaling).
function B.calibrate(f, target)
	local k = 1
	while true do
		local t0 = B.now(B.MONO)
		f(k)
		local dt = B.now(B.MONO) - t0
		if dt >= 0.25 then
			print(string.format("n=%d", math.max(1, math.floor(k * target / dt + 0.5))))
			return
		end
		k = k * 2
	end
end

return B
