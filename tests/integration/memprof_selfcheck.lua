-- Workloads for memprof_luajit.sh's self-check: a profile by an agent built with
-- -DLP_MEMPROF_SELFCHECK, whose every event written by a light path of the exact-mode
-- wrapper is compared with what the general path would write (meta selfcheck_events and
-- selfcheck_bad in the profile).
--
-- Usage: luajit memprof_selfcheck.lua AGENT_DIR OUT on|off
-- Shapes: new tables in a recursion (binary trees), string building with builtins and
-- concatenation, arrays and hash parts grown by table.insert and by stores, a coroutine
-- allocating between yields, and full collections (the collector's frees).
local dir, out, jitmode = arg[1], arg[2], arg[3]
assert(dir and out and (jitmode == "on" or jitmode == "off"),
       "usage: memprof_selfcheck.lua AGENT_DIR OUT on|off")
package.cpath = dir .. "/?.so;" .. package.cpath
if jitmode == "off" then jit.off() else jit.on() end
local mp = require("luaprof").memprof

local function tree(d)
  if d == 0 then return {} end
  return { tree(d - 1), tree(d - 1) }
end

local function strings(n)
  local acc = {}
  for i = 1, n do
    local s = "k" .. i .. "=" .. string.format("%d:%.1f", i, i / 7)
    acc[#acc + 1] = s:upper() .. string.rep("x", i % 17)
  end
  return table.concat(acc, ",")
end

local function grow(n)
  local list, map = {}, {}
  for i = 1, n do
    table.insert(list, { i, name = "n" .. i })
    map["m" .. i] = i
  end
  for _ = 1, n / 2 do table.remove(list) end
  return #list
end

local co = coroutine.wrap(function()
  while true do
    local t = {}
    for i = 1, 64 do t[i] = { i } end
    coroutine.yield(#t)
  end
end)

assert(mp.start(out))
local s = 0
for _ = 1, 20 do
  s = s + #tree(10) + #strings(500) + grow(500) + co()
  collectgarbage()
end
assert(mp.stop())
print("ran " .. s)
