-- Workload for vm_calls_lua.sh: Lua code that C code with no frame on the Lua stack runs
-- on top of a Lua function: finalizers run by collector steps (from a compiled loop's
-- trace and from the interpreter's ffi.new), a jit.attach handler (run by the compiler)
-- and a debug hook (lib_debug's C hook calls the Lua one) in interpreted code.
--
-- Usage: luajit vm_calls_lua.lua [ROUNDS [alloc]]   (default 10, ~1.5 s; alloc: the
-- finalizer allocates too, and the hook is left out)
local ffi = require("ffi")
local rounds = tonumber(arg[1]) or 10
local alloc = arg[2] == "alloc"

local sink = {}
local function fin()
  local s = 0
  for i = 1, 3000 do s = s + i % 7 end --@fin
  if alloc then
    for i = 1, 20 do sink[i] = { i } end --@finalloc
  end
  return s
end

local function make(n)
  local keep = 0
  for i = 1, n do --@loop
    local u = ffi.gc(ffi.new("int[4]"), fin) --@alloc
    keep = keep + u[0]
  end
  return keep
end

local function hook()
  local s = 0
  for i = 1, 400 do s = s + i % 7 end --@hook
end

local function hooked(n)
  local s = 0
  for i = 1, n do s = s + i % 3 end --@hooked
  return s
end

for _ = 1, rounds do make(10000) end --@main_fin

-- A jit.attach handler, run by the compiler (its protected call of C) for the traces of
-- fresh chunks called from one line. It runs its work in a coroutine (the compiler's
-- entry is then on the resumer's C frames), and the work spends time in the C code the
-- interpreter calls (tostring, string interning), whose Lua frames are taken after the
-- host walk. With alloc, the handler also runs a loop compiled before (its allocations
-- are a trace's; called directly: LuaJIT 2.1 crashes running a trace in a coroutine
-- inside a handler) and parses C types (ffi.typeof allocates in the parser's protected
-- call of C).
local function work()
  local t = {}
  for i = 1, 20000 do t[i % 64] = tostring(i) .. "x" end --@attach
end
local function fill(n)
  local t = {}
  for i = 1, n do t[i % 64] = { i, i } end --@attach_trace
  return t
end
local ntypes = 0
local function handler()
  coroutine.wrap(work)() --@attach_wrap
  if alloc then
    fill(5000) --@attach_fill
    for _ = 1, 20 do
      ntypes = ntypes + 1
      ffi.typeof("struct { int a" .. ntypes .. "; double b; char n[" .. ntypes % 50 + 1 .. "]; }") --@attach_ffi
    end
  end
end
if alloc then
  for _ = 1, 50 do fill(2000) end
end
local gens = {}
for k = 1, 20 * rounds do
  gens[k] = assert(load("local s = 0 for i = 1, 100 do s = s + i end return s",
                        "=gen" .. (k % 4)))
end
jit.attach(handler, "trace")
for k = 1, #gens do gens[k]() end --@main_attach
jit.attach(handler)
if alloc then return end

jit.off() -- count hooks run in the interpreter only
debug.sethook(hook, "", 200)
hooked(rounds * 1000000) --@main_hook
debug.sethook()
