-- A mixed allocation workload for memprof_ledger.sh: every kind of allocation LuaJIT makes
-- from Lua, builtins, C functions, traces (and their exits), the compiler, the collector
-- and finalizers, with a collection forced in the middle.
--   luajit memprof_ledger.lua STREAM on|off   profiles itself through luaprof.memprof
-- Under memprof_ledger_host the host starts and stops the profile around the chunk
-- (LEDGER_HOST is set, arg holds only the JIT mode).
local out, jitmode
if LEDGER_HOST then
  jitmode = arg[1]
else
  out, jitmode = arg[1], arg[2]
  package.cpath = "build/?.so;" .. package.cpath
end
if jitmode == "off" then jit.off() else jit.on() end
local ffi = require "ffi"
ffi.cdef [[ typedef struct { double x, y; int n; } ledger_pt; ]]

local mp
if not LEDGER_HOST then
  mp = require("luaprof").memprof
  assert(mp.start(out))
end

local keep, sink = {}, nil

-- Tables: new, grown (array and hash parts reallocated), shrunk by a collection.
for i = 1, 20000 do
  local t = {}
  for k = 1, i % 40 do t[k] = k end
  for k = 1, i % 17 do t["k" .. k] = k end
  keep[i % 500 + 1] = t
end
-- Strings: concatenation, builtins, formatting, patterns.
for i = 1, 20000 do
  local s = "s" .. i .. ("x"):rep(i % 64)
  s = string.format("%s:%d:%g", s, i, i / 3)
  sink = s:gsub("x", "y"):upper()
  keep[i % 300 + 501] = tostring(i * 1.5)
end
sink = table.concat(keep, ",", 501, 800)
-- Closures and upvalues; coroutines made, resumed, left suspended or dead.
local function counter()
  local n = 0
  return function() n = n + 1 return n end
end
for i = 1, 5000 do
  local c = counter()
  c()
  local co = coroutine.create(function(a)
    local t = { a }
    for k = 1, 3 do t[#t + 1] = coroutine.yield(#t) end
    return t
  end)
  for k = 1, i % 5 do coroutine.resume(co, k) end
  keep[i % 100 + 801] = i % 3 == 0 and co or c
end
local gen = coroutine.wrap(function()
  for i = 1, 10000 do coroutine.yield({ i }) end
end)
for _ = 1, 10000 do sink = gen() end
-- Chunks compiled while profiling (from source and from bytecode), and errors with their
-- messages.
for i = 1, 300 do
  local f = assert(load("local a = ... return { a, '" .. i .. "' }"))
  sink = f(i)
  -- Bytecode loaded: the lexer frees buffers it never allocated, as (NULL, 0).
  sink = assert(load(string.dump(f)))(i)
  local ok, err = pcall(error, { code = i })
  ok, err = pcall(function() return nil .. i end)
  sink = err
end
-- FFI: cdata, variable-length arrays, finalizers, strings from C memory.
local freed = 0
for i = 1, 20000 do
  local p = ffi.new("ledger_pt", i, i, i)
  local a = ffi.new("double[?]", i % 100 + 1)
  a[0] = p.x
  if i % 10 == 0 then
    keep[i % 50 + 901] = ffi.gc(ffi.new("int[4]"), function() freed = freed + 1 end)
  end
  sink = ffi.string(ffi.cast("const char *", "abc"), 2)
end
-- Userdata finalizers that allocate while the collector runs them.
for i = 1, 2000 do
  local u = newproxy(true)
  getmetatable(u).__gc = function() sink = { i, "gc" .. i } end
  keep[i % 50 + 951] = u
end
collectgarbage("collect")
-- Hot loops the JIT compiles: allocations in traces, sunk ones restored at side exits.
local function hot(n)
  local acc = 0
  for i = 1, n do
    local v = { i, i + 1 }
    if i % 97 == 0 then keep[i % 64 + 1001] = v end
    acc = acc + v[1] + v[2]
  end
  return acc
end
for _ = 1, 50 do sink = hot(20000) end
local parts = {}
for i = 1, 50000 do parts[#parts + 1] = i % 10 end
sink = table.concat(parts)
for i = 1, 200 do collectgarbage("step", 10) keep[i] = nil end

if mp then assert(mp.stop()) end
print("ran", freed > 0)
