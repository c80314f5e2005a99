-- What the Lua halves of the benchmarks share: clocks, the calibration of a workload's
-- size, the workloads both overhead benchmarks run (fib) or the memory ones do (binary
-- trees, life), and a profile's size.
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


-- The whole binary-trees program of the Benchmarks Game (and of the benchmark suites
-- Tarantool measured its memprof with), for a maximum depth: a stretch tree one deeper, a
-- long-lived tree kept throughout (the collector traverses it every cycle), then
-- 2^(max - d + 4) trees of each depth d = 4, 6 .. max built and checked. Returns the sum
-- of the checks.
function B.binary_trees(maxdepth)
	local mindepth = 4
	if maxdepth < mindepth + 2 then maxdepth = mindepth + 2 end
	local s = check(bottom_up(maxdepth + 1))
	local longlived = bottom_up(maxdepth)
	for d = mindepth, maxdepth, 2 do
		for _ = 1, 2 ^ (maxdepth - d + mindepth) do
			s = s + check(bottom_up(d))
		end
	end
	return s + check(longlived)
end

-- Conway's game of life, in the style of LuaJIT's life.lua: a 64x64 torus whose every
-- generation is a new array of new rows, rendered to a string (one string per row, then
-- table.concat) each generation.
local LW, LH = 64, 64
local function life_grid()
	local g = {}
	for y = 1, LH do
		local row = {}
		for x = 1, LW do row[x] = 0 end
		g[y] = row
	end
	-- a glider, an R-pentomino and a blinker
	g[2][3], g[3][4], g[4][2], g[4][3], g[4][4] = 1, 1, 1, 1, 1
	g[30][31], g[30][32], g[31][30], g[31][31], g[32][31] = 1, 1, 1, 1, 1
	g[50][10], g[50][11], g[50][12] = 1, 1, 1
	return g
end
local function life_step(g)
	local ng = {}
	for y = 1, LH do
		local up, row, dn = g[(y - 2) % LH + 1], g[y], g[y % LH + 1]
		local nr = {}
		for x = 1, LW do
			local l, r = (x - 2) % LW + 1, x % LW + 1
			local c = up[l] + up[x] + up[r] + row[l] + row[r] + dn[l] + dn[x] + dn[r]
			nr[x] = (c == 3 or (c == 2 and row[x] == 1)) and 1 or 0
		end
		ng[y] = nr
	end
	return ng
end
local function life_render(g)
	local lines = {}
	for y = 1, LH do
		local row, cells = g[y], {}
		for x = 1, LW do cells[x] = row[x] == 1 and "O" or "." end
		lines[y] = table.concat(cells)
	end
	return table.concat(lines, "\n")
end
function B.life(units)
	local g, s = life_grid(), 0
	for _ = 1, units do
		g = life_step(g)
		s = s + #life_render(g)
	end
	return s
end

-- Recursive fib(20) per unit: CPU-bound, nearly no allocation.
local function fib(k)
	if k < 2 then return k end
	return fib(k - 1) + fib(k - 2)
end
B.fib_n = fib -- fib(k) itself
function B.fib(units)
	local s = 0
	for _ = 1, units do s = s + fib(20) end
	return s
end

-- The size of a profile just written, which is then removed.
function B.take_size(path)
	local fh = assert(io.open(path, "rb"))
	local bytes = fh:seek("end")
	fh:close()
	os.remove(path)
	return bytes
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

-- A benchmark script's set-up: the JIT off (and its traces flushed) when jitmode is "off",
-- and the clocks. Returns B.now.
function B.setup(jitmode)
	if jitmode == "off" then
		jit.off()
		jit.flush()
	end
	B.clocks()
	return B.now
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

-- Table churn: many short-lived tables with array and hash parts, grown by table.insert.
function B.tables(units)
	local s = 0
	for i = 1, units do
		local list, h = {}, {}
		for j = 1, 100 do
			local e = { j, i, name = "k" .. j, x = j * 0.5 }
			table.insert(list, e)
			h[e.name] = e
			local tmp = {}
			for k = 1, 8 do table.insert(tmp, k) end
			tmp.sum = #tmp
			s = s + tmp.sum
		end
		for _ = 1, 50 do table.remove(list) end
		s = s + #list + (h.k7 and 1 or 0)
	end
	return s
end

return B
