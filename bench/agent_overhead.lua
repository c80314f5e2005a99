-- Runs for bench/agent_overhead.sh: a workload of fixed size, one or more times in this
-- process, each time unprofiled or under the agent started from inside the process, each
-- run ("segment") timing itself.
--
--   luajit bench/agent_overhead.lua BUILD_DIR LIB WORKLOAD on|off N STREAM MODE...
--
-- WORKLOAD: fib nbody strings tables coro ffi mixed; N: its size; STREAM: a path prefix for
-- the profiles (removed after each segment). One segment per MODE, in order:
--   warm   unprofiled, not reported (JIT and GC warm-up)
--   base   unprofiled (the agent is loaded only when another MODE needs it)
--   c100   C mode, 100 Hz on the CPU clock (interval = 10, the default clock)
--   c1k    C mode, 1 kHz on the wall clock (interval = 1, the highest rate of the Lua API)
--   empty  C mode started and stopped at once, no work: the stream's fixed part
--   calib  (alone) unprofiled; prints "n=K", the size that makes the workload take about
--          N seconds
-- Prints one line of key=value facts per segment (times in seconds):
--   seg, mode
--   wall     monotonic clock over the workload only (after start() returned, before stop())
--   cpu      this thread's CPU time over the same span (signal handler included)
--   pcpu     the process's CPU time over the same span (plus the agent's writer thread)
--   start, stop   the two calls' own wall time
--   samples, bytes (stream file size), handler (s in the handler), dropped, overruns,
--   nivcsw   involuntary context switches of this thread during the workload (others' jobs)
local build, lib, workload, jitmode, n, stream = unpack(arg, 1, 6)
local modes = { unpack(arg, 7) }
n = tonumber(n)
package.cpath = build .. "/?.so;" .. package.cpath

local ffi = require "ffi"
ffi.cdef [[
double agent_bench_cfib(double n);
double agent_bench_dot(const double *a, const double *b, size_t n);
typedef struct { long sec, usec; } agent_bench_tv;
typedef struct { agent_bench_tv ru_utime, ru_stime; long f[14]; } agent_bench_rusage;
int getrusage(int who, agent_bench_rusage *ru);
]]
-- Loaded in every mode, so that all runs map the same objects.
local C = ffi.load(lib)
local B = dofile((arg[0]:match("^(.*)/") or ".") .. "/benchlib.lua")
local now, MONO, PCPU, TCPU = B.setup(jitmode), B.MONO, B.PCPU, B.TCPU
local ru = ffi.new("agent_bench_rusage")
local function nivcsw()
	ffi.C.getrusage(1 --[[RUSAGE_THREAD]], ru)
	return tonumber(ru.f[13])
end

-- -- Workloads: W[name](n) does n units of work and returns a number ----------------------

local W = {}

-- CPU-bound, nearly no allocation (benchlib.lua).
local fib = B.fib_n
W.fib = B.fib

-- nbody (the Benchmarks Game's, five bodies): float arithmetic in tight loops.
local sqrt = math.sqrt
local PI = math.pi
local SOLAR_MASS = 4 * PI * PI
local DAYS = 365.24
local function bodies()
	return {
		{ x = 0, y = 0, z = 0, vx = 0, vy = 0, vz = 0, mass = SOLAR_MASS },
		{ x = 4.84143144246472090e+00, y = -1.16032004402742839e+00, z = -1.03622044471123109e-01,
		  vx = 1.66007664274403694e-03 * DAYS, vy = 7.69901118419740425e-03 * DAYS,
		  vz = -6.90460016972063023e-05 * DAYS, mass = 9.54791938424326609e-04 * SOLAR_MASS },
		{ x = 8.34336671824457987e+00, y = 4.12479856412430479e+00, z = -4.03523417114321381e-01,
		  vx = -2.76742510726862411e-03 * DAYS, vy = 4.99852801234917238e-03 * DAYS,
		  vz = 2.30417297573763929e-05 * DAYS, mass = 2.85885980666130812e-04 * SOLAR_MASS },
		{ x = 1.28943695621391310e+01, y = -1.51111514016986312e+01, z = -2.23307578892655734e-01,
		  vx = 2.96460137564761618e-03 * DAYS, vy = 2.37847173959480950e-03 * DAYS,
		  vz = -2.96589568540237556e-05 * DAYS, mass = 4.36624404335156298e-05 * SOLAR_MASS },
		{ x = 1.53796971148509165e+01, y = -2.59193146099879641e+01, z = 1.79258772950371181e-01,
		  vx = 2.68067772490389322e-03 * DAYS, vy = 1.62824170038242295e-03 * DAYS,
		  vz = -9.51592254519715870e-05 * DAYS, mass = 5.15138902046611451e-05 * SOLAR_MASS },
	}
end
local function advance(b, nb, dt)
	for i = 1, nb do
		local bi = b[i]
		local bix, biy, biz, bimass = bi.x, bi.y, bi.z, bi.mass
		local bivx, bivy, bivz = bi.vx, bi.vy, bi.vz
		for j = i + 1, nb do
			local bj = b[j]
			local dx, dy, dz = bix - bj.x, biy - bj.y, biz - bj.z
			local d2 = dx * dx + dy * dy + dz * dz
			local mag = sqrt(d2)
			mag = dt / (mag * d2)
			local bm = bj.mass * mag
			bivx = bivx - (dx * bm); bivy = bivy - (dy * bm); bivz = bivz - (dz * bm)
			bm = bimass * mag
			bj.vx = bj.vx + (dx * bm); bj.vy = bj.vy + (dy * bm); bj.vz = bj.vz + (dz * bm)
		end
		bi.vx = bivx; bi.vy = bivy; bi.vz = bivz
		bi.x = bix + dt * bivx; bi.y = biy + dt * bivy; bi.z = biz + dt * bivz
	end
end
function W.nbody(units)
	local b = bodies()
	for _ = 1, units * 100 do advance(b, #b, 0.01) end
	return b[1].x + 1
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
		s = s + #str:upper() + #str:rep(2)
	end
	return s
end

-- Table churn: many small tables, a hash of them, removals; keeps the GC busy.
function W.tables(units)
	local s = 0
	for i = 1, units do
		local t, h = {}, {}
		for j = 1, 200 do t[j] = { j, i, k = "k" .. j } end
		for j = 1, 200 do h[t[j].k] = t[j] end
		for _ = 1, 100 do table.remove(t) end
		s = s + #t + (h.k7 and 1 or 0)
	end
	return s
end

-- Coroutine ping-pong: every step is a resume and a yield.
function W.coro(units)
	local co = coroutine.wrap(function(x)
		while true do x = coroutine.yield(x + 1) end
	end)
	local x = 0
	for _ = 1, units * 1000 do x = co(x) end
	return x
end

-- C-heavy: deep recursion in C and a flat loop over buffers, through the FFI.
local N = 1024
local va, vb = ffi.new("double[?]", N), ffi.new("double[?]", N)
for i = 0, N - 1 do va[i], vb[i] = i / N, 1 - i / N end
function W.ffi(units)
	local s = 0
	for _ = 1, units do
		s = s + C.agent_bench_cfib(18)
		for _ = 1, 8 do s = s + C.agent_bench_dot(va, vb, N) end
	end
	return s
end

-- Mixed: seed 000's C fib alternating with Lua fib, plus a little string and table work.
function W.mixed(units)
	local s = 0
	for i = 1, units do
		s = s + C.agent_bench_cfib(16) + fib(16)
		local t = {}
		for j = 1, 10 do t[j] = { j, tostring(i + j) } end
		s = s + #table.concat({ t[1][2], t[10][2], "x" }, "-")
	end
	return s
end

local f = assert(W[workload], "unknown workload " .. tostring(workload))

if modes[1] == "calib" then
	B.calibrate(f, n)
	return
end

local opts = {
	c100 = { mode = "C", interval = 10 },
	c1k = { mode = "C", interval = 1, clock = "wall" },
	empty = { mode = "C", interval = 10 },
}
local sp
for i = 1, #modes do
	if modes[i] ~= "base" and modes[i] ~= "warm" then
		assert(opts[modes[i]], "unknown mode " .. tostring(modes[i]))
		sp = require("luaprof").sysprof
	end
end

-- One segment: the workload under one mode.
local function segment(seg, mode)
	local path = stream .. "-" .. seg .. ".bin"
	local ts0 = now(MONO)
	if opts[mode] then
		opts[mode].path = path
		assert(sp.start(opts[mode]))
	end
	local w0, c0, p0, v0 = now(MONO), now(TCPU), now(PCPU), nivcsw()
	local r = mode == "empty" and 1 or f(n)
	local w1, c1, p1, v1 = now(MONO), now(TCPU), now(PCPU), nivcsw()
	local samples, handler, dropped, overruns, bytes = 0, 0, 0, 0, 0
	if opts[mode] then
		local st = sp.stats()
		assert(sp.stop())
		samples = sp.report().samples
		handler, dropped, overruns = st.handler, st.dropped, st.overruns
		bytes = B.take_size(path)
	end
	local ts1 = now(MONO)
	assert(r == r and r ~= 0)
	if mode ~= "warm" then
		print(string.format("seg=%d mode=%s wall=%.6f cpu=%.6f pcpu=%.6f start=%.6f stop=%.6f " ..
			"samples=%d bytes=%d handler=%.6f dropped=%d overruns=%d nivcsw=%d",
			seg, mode, w1 - w0, c1 - c0, p1 - p0, w0 - ts0, ts1 - w1, samples, bytes, handler,
			dropped, overruns, v1 - v0))
		io.stdout:flush()
	end
end

for i = 1, #modes do segment(i, modes[i]) end
