-- Workloads for memprof_luajit.sh's self-check: a profile by an agent built with
-- -DLP_MEMPROF_SELFCHECK, whose every event written by a light path of the exact-mode
-- wrapper is compared with what the general path would write (meta selfcheck_events and
-- selfcheck_bad in the profile).
--
-- Usage: luajit memprof_selfcheck.lua AGENT_DIR OUT on|off
-- Shapes: new tables in a recursion (binary trees), string building with builtins and
-- concatenation, arrays and hash parts grown by table.insert and by stores, a coroutine
-- allocating between yields, and full collections (the collector's frees); then errors
-- through pcall, yields across pcall, finalizers, __index and __concat metamethods, a
-- table.sort comparator, an FFI callback under qsort, loadstring and string.dump,
-- varargs, and C functions and builtins entered where the stack grows, all allocating;
-- last, a stack overflow caught by xpcall.
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
local ffi = require "ffi"
ffi.cdef [[ void qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)); ]]
for _ = 1, 10 do
  for i = 1, 200 do pcall(function() local t = { i } error({ t }) end) end
  local yielder = coroutine.wrap(function()
    for i = 1, 100 do pcall(function() coroutine.yield({ i, tostring(i) }) end) end
  end)
  for _ = 1, 100 do s = s + #yielder() end
  for i = 1, 50 do
    local u = newproxy(true)
    getmetatable(u).__gc = function() local t = { "gc", i } s = s + #t end
  end
  local mt = { __index = function(t, k) local v = { k } rawset(t, k, v) return v end,
               __concat = function(a, b) return tostring(a) .. "|" .. tostring(b) end }
  local o = setmetatable({}, mt)
  for i = 1, 200 do s = s + #o[i] + #(o .. i) end
  local arr = {}
  for i = 1, 300 do arr[i] = (i * 7919) % 1000 end
  table.sort(arr, function(a, b) local tmp = { a, b } return tmp[1] < tmp[2] end)
  local buf = ffi.new("int[64]")
  for i = 0, 63 do buf[i] = (i * 37) % 64 end
  local cb = ffi.cast("int (*)(const void *, const void *)", function(a, b)
    local t = { 1 }
    return ffi.cast("const int *", a)[0] - ffi.cast("const int *", b)[0] + #t - 1
  end)
  ffi.C.qsort(buf, 64, 4, cb)
  cb:free()
  local f = loadstring("local x = {...} return #x")
  s = s + f(1, 2, 3) + #string.dump(f)
  local function va(...) local t = { ... } return select("#", ...) + #t end
  for i = 1, 100 do s = s + va(unpack({ i, i + 1, i + 2 })) end
  -- C functions and builtins written in C entered where the stack must grow (in a fresh
  -- coroutine, in a recursion): the interpreter grows it with their frame on top, in
  -- state INTERP, the C frame's saved PC left by other Lua code.
  local function deep(n, ...)
    local t = { ... }
    if n > 0 then deep(n - 1, n, unpack(t)) end
    local ok, fs = pcall(string.format, "%d-%s", n, "x")
    return #fs + #require("string").rep("y", n % 5) + os.time() % 2 + select(2, 1, n, 3)
  end
  for i = 1, 40 do s = s + coroutine.wrap(deep)(i) + deep(i % 20) end
  collectgarbage()
end
-- A stack overflow found as a trace exits (JIT on), caught by xpcall with a handler: the
-- exit fails before the C frame's saved PC is set, with L->base at a restored frame.
local function rec(n) return 1 + rec(n + 1) end
for _ = 1, 2 do
  local t = { s }
  xpcall(rec, debug.traceback, 1)
  s = s + #t
end
assert(mp.stop())
print("ran " .. s)
