-- Runs for bench/memprof_overhead.sh: a workload of fixed size, one or more times in this
-- process, each time unprofiled or under the memory profiler in exact mode (every
-- allocation, reallocation and free is an event), started from inside the process; each
-- run ("segment") times itself.
--
--   luajit bench/memprof_overhead.lua BUILD_DIR WORKLOAD on|off N STREAM MODE...
--
-- WORKLOAD: bintrees binarytrees strings tables life fib; N: its size; STREAM: a path prefix for the
-- profiles (each removed after its segment). One segment per MODE, in order:
--   warm   unprofiled, not reported (JIT and GC warm-up)
--   base   unprofiled
--   control  unprofiled too: its ratio to base is the method's own noise (an A/A test)
--   exact  luaprof.memprof.start(path) (exact mode) around the workload
--   sampled  luaprof.memprof.start(path, {sample = 512 KiB}) (sampled mode) around it
--   empty  exact mode started and stopped at once, no work: the profile's fixed part
--   calib  (alone) unprofiled; prints "n=K", the size that makes the workload take about
--          N seconds
-- Prints one line of key=value facts per segment (times in seconds):
--   seg, mode
--   wall     monotonic clock over the workload only (after start() returned, before stop())
--   cpu      the process's CPU time over the same span
--   start, stop   the two calls' own wall time
--   events, allocs, frees, reallocs (memprof.report()), bytes (profile file size)
local build, workload, jitmode, n, stream = unpack(arg, 1, 5)
local modes = { unpack(arg, 6) }
n = tonumber(n)
package.cpath = build .. "/?.so;" .. package.cpath

local B = dofile((arg[0]:match("^(.*)/") or ".") .. "/benchlib.lua")
local now, MONO, PCPU = B.setup(jitmode), B.MONO, B.PCPU

-- -- Workloads: W[name](n) does n units of work and returns a number ----------------------

local W = {}

-- Binary trees (benchlib.lua).
W.bintrees = B.bintrees

-- The Benchmarks Game's whole binary-trees program (benchlib.lua), at depth 14 per unit:
-- the kind of program Tarantool's published +16 % was measured on.
function W.binarytrees(units)
	local s = 0
	for _ = 1, units do s = s + B.binary_trees(14) end
	return s
end

-- String building: concatenation, string.format, table.concat, a library pass over it.
function W.strings(units)
	local s = 0
	for i = 1, units do
		local t = {}
		for j = 1, 50 do
			t[j] = "item" .. j .. "=" .. string.format("%d:%.2f", j * i, j / 3)
		end
		local str = table.concat(t, ",")
		local acc = ""
		for j = 1, 20 do acc = acc .. t[j] end
		s = s + #str:upper() + #acc
	end
	return s
end

-- Table churn (benchlib.lua).
W.tables = B.tables

-- Conway's game of life (benchlib.lua).
W.life = B.life

-- CPU-bound, nearly no allocation (benchlib.lua).
W.fib = B.fib

local f = assert(W[workload], "unknown workload " .. tostring(workload))

if modes[1] == "calib" then
	B.calibrate(f, n)
	return
end

local mp
for i = 1, #modes do
	if modes[i] ~= "base" and modes[i] ~= "control" and modes[i] ~= "warm" then mp = require("luaprof").memprof end
end

-- One segment: the workload under one mode.
local function segment(seg, mode)
	local path = stream .. "-" .. seg .. ".ljm"
	local exact = mode == "exact" or mode == "empty" or mode == "sampled"
	-- The same GC state before every segment, profiled or not.
	collectgarbage()
	local ts0 = now(MONO)
	if exact then
		assert(mp.start(path, mode == "sampled" and { sample = 512 * 1024 } or nil))
	end
	local w0, c0 = now(MONO), now(PCPU)
	local r = mode == "empty" and 1 or f(n)
	local w1, c1 = now(MONO), now(PCPU)
	local rep = { events = 0, allocs = 0, frees = 0, reallocs = 0 }
	local bytes = 0
	if exact then
		assert(mp.stop())
		rep = mp.report()
		bytes = B.take_size(path)
	end
	local ts1 = now(MONO)
	assert(r == r and r ~= 0)
	if mode ~= "warm" then
		print(string.format("seg=%d mode=%s wall=%.6f cpu=%.6f start=%.6f stop=%.6f " ..
			"events=%d allocs=%d frees=%d reallocs=%d bytes=%d",
			seg, mode, w1 - w0, c1 - c0, w0 - ts0, ts1 - w1, rep.events, rep.allocs,
			rep.frees, rep.reallocs, bytes))
		io.stdout:flush()
	end
end

for i = 1, #modes do
	assert(({ warm = 1, base = 1, control = 1, exact = 1, empty = 1, sampled = 1 })[modes[i]],
		"unknown mode " .. tostring(modes[i]))
	segment(i, modes[i])
end
