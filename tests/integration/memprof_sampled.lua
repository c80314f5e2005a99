-- Workload of memprof_sampled.sh: two call paths allocate a known share of the bytes.
--   luajit memprof_sampled.lua MODE OUT JIT
-- MODE "exact" or a sampling interval in bytes. Per iteration path A allocates one table
-- with 23 array slots (64 + 192 bytes: the array is separate above 16 slots) and path B
-- three with 7 (128 bytes each, colocated): A has 256 of every 640 bytes, 40%. Both keep
-- their tables in a ring (512 live at stop) so the JIT cannot sink the allocations.
package.cpath = "build/?.so;" .. package.cpath
local mode, out, jitmode = arg[1], arg[2], arg[3]
if jitmode == "off" then jit.off() else jit.on() end
require "table.new"
local mp = require("luaprof").memprof
local ring, n = {}, 0

local function path_a()
  local t = table.new(23, 0) --@a
  n = n + 1; ring[n % 512] = t
end

local function path_b()
  local t = table.new(7, 0) --@b
  n = n + 1; ring[n % 512] = t
end

local function run(iters)
  for i = 1, iters do
    path_a() --@call_a
    path_b(); path_b(); path_b() --@call_b
  end
end

run(1000) -- warm up (traces, the ring) before the profile
local opts = mode ~= "exact" and { sample = tonumber(mode) } or nil
assert(mp.start(out, opts))
run(200000) --@run
assert(mp.stop())
