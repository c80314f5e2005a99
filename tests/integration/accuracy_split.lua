-- Accuracy workload (seed 000): C fib through the FFI alternating with Lua fib, in chunks,
-- timing its own split with clock_gettime while the agent profiles it in C mode.
--
--   luajit accuracy_split.lua BUILD_DIR LIB OUT.bin on|off SECONDS INTERVAL_MS CLOCK
--
-- Prints one line of facts for accuracy_split.sh:
--   chunks=N c_cpu=S loop_cpu=S c_wall=S loop_wall=S samples=N nc=N nl=N
-- c_* is the time spent inside the C calls, loop_* the whole profiled loop (first to last
-- clock reading), on the thread's CPU clock and on the monotonic clock; nc / nl are the
-- argument of the C and of the Lua fib, calibrated so that one chunk takes a few ms.
local build, lib, out, jitmode, secs, interval, clock = unpack(arg)
secs, interval = tonumber(secs), tonumber(interval)
package.cpath = build .. "/?.so;" .. package.cpath

local ffi = require "ffi"
ffi.cdef [[
double lpacc_cfib(double n);
typedef struct { long tv_sec; long tv_nsec; } lpacc_timespec;
int clock_gettime(int clk, lpacc_timespec *ts);
]]
local C = ffi.load(lib)
local CLOCK_MONOTONIC, CLOCK_THREAD_CPUTIME_ID = 1, 3
local ts = ffi.new("lpacc_timespec")
local function now(clk)
	ffi.C.clock_gettime(clk, ts)
	return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

if jitmode == "off" then
	jit.off()
	jit.flush()
else
	jit.on()
end

local function lfib(n)
	if n < 2 then return n end
	return lfib(n - 1) + lfib(n - 2)
end
local cfib = C.lpacc_cfib

-- Calibration (JIT warmed up): the smallest n whose call takes at least target seconds.
local function calibrate(f, target)
	for _ = 1, 3 do f(20) end
	local n = 12
	while true do
		local t0 = now(CLOCK_THREAD_CPUTIME_ID)
		f(n)
		if now(CLOCK_THREAD_CPUTIME_ID) - t0 >= target or n >= 40 then return n end
		n = n + 1
	end
end
-- Unequal targets: the expected C share is not simply one half.
local nc = calibrate(cfib, 0.004)
local nl = calibrate(lfib, 0.006)

local sp = require("luaprof").sysprof
assert(sp.start{mode = "C", interval = interval, clock = clock, path = out})

local c_cpu, c_wall, chunks, sink = 0, 0, 0, 0
local cpu0, wall0 = now(CLOCK_THREAD_CPUTIME_ID), now(CLOCK_MONOTONIC)
local cpu1, wall1 = cpu0, wall0
while cpu1 - cpu0 < secs do
	-- C chunk, timed on both clocks.
	local a, w = now(CLOCK_THREAD_CPUTIME_ID), now(CLOCK_MONOTONIC)
	sink = sink + cfib(nc)
	local a2, w2 = now(CLOCK_THREAD_CPUTIME_ID), now(CLOCK_MONOTONIC)
	c_cpu, c_wall = c_cpu + (a2 - a), c_wall + (w2 - w)
	-- Lua chunk: the rest of the loop's time.
	sink = sink + lfib(nl)
	cpu1, wall1 = now(CLOCK_THREAD_CPUTIME_ID), now(CLOCK_MONOTONIC)
	chunks = chunks + 1
end

assert(sp.stop())
local samples = sp.report().samples
assert(sink > 0)
print(string.format("chunks=%d c_cpu=%.6f loop_cpu=%.6f c_wall=%.6f loop_wall=%.6f samples=%d nc=%d nl=%d",
	chunks, c_cpu, cpu1 - cpu0, c_wall, wall1 - wall0, samples, nc, nl))
