-- A coroutine.wrap body recursing under the JIT: its stack grows in trace exits, inside C
-- frames the coroutine entered itself (lj_vm_cpcall). With a path: 3000 rounds under a
-- sampled memory profile written there (memprof_sampled.sh); without: a second of CPU time
-- (agent_record.sh profiles it from outside). The checks name lines 9 (body) and 12 (resume).
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
local function pingpong(n)
  local co = coroutine.wrap(function()
    local s = 0
    while true do s = s + fib(12); coroutine.yield(s) end
  end)
  local total = 0
  for _ = 1, n do total = total + co() end
  return total
end
local path, mp = arg[1], nil
if path then
  package.cpath = "build/?.so;" .. package.cpath
  mp = require("luaprof").memprof
  assert(mp.start(path, { sample = 1024 }))
end
local s, t0 = 0, os.clock()
if path then
  for _ = 1, 3000 do s = s + pingpong(5) end
  assert(mp.stop())
else
  while os.clock() - t0 < 1 do s = s + pingpong(5) end
end
