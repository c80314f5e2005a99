-- Workloads for shapes_luajit.sh: in each shape one known stack dominates, for SECS seconds
-- under the in-process profiler (C mode, 1 kHz wall clock), one stream per shape.
-- Lines that a profile must show as the CURRENT line of a frame end in a marker comment
-- `--@name`; shapes_luajit.sh finds their numbers by that marker, so keep one per line.
--
-- Usage: luajit shapes_luajit.lua AGENT_DIR OUT_DIR JIT LIBSHAPES SECS [SHAPE...]
--   JIT: "off" (everything interpreted) or "on" (hot loops compiled; see spin below).
--   LIBSHAPES: the shared object built from shapes_lib.c.
-- Writes OUT_DIR/SHAPE.bin (and SHAPE.traces) and prints "ran SHAPE" or "skip SHAPE:
-- reason" per shape. Also runs under shapes_host, which defines host_call.
local agent_dir, out, jitmode, libpath, secs = arg[1], arg[2], arg[3], arg[4], tonumber(arg[5])
assert(agent_dir and out and (jitmode == "on" or jitmode == "off") and libpath and secs,
       "usage: shapes_luajit.lua AGENT_DIR OUT_DIR on|off LIBSHAPES SECS [SHAPE...]")
package.cpath = agent_dir .. "/?.so;" .. package.cpath
local sp = require "luaprof".sysprof
local ffi = require "ffi"
ffi.cdef [[
double shapes_burn(double secs);
double shapes_now(void);
void qsort(void *base, size_t nmemb, size_t size, int (*cmp)(const void *, const void *));
]]
local lib = ffi.load(libpath)
local jutil = require "jit.util"
local clock = lib.shapes_now

if jitmode == "off" then jit.off() else jit.on() end

-- The burns. lspin: the interpreter (or, JIT on, a trace) on the marked loop line. cspin:
-- a loop calling shapes_burn through the FFI, compiled with the JIT on (the trace starts
-- on the marked line, calls shapes_burn, and is the sample's innermost Lua location).
-- spin, which the shapes call, is lspin with the JIT off and cspin with it on, so that
-- every shape ends in the same frames whatever the JIT does (a sample inside a trace ends
-- in the trace's frame; the loop shape checks that one).
local function lspin(s)
  local t0, x = clock(), 0
  repeat
    for i = 1, 20000 do x = x * 0.5 + i end --@spin
  until clock() - t0 >= s
  return x
end
local function cspin(s)
  local t0, x = clock(), 0
  repeat x = x + lib.shapes_burn(0.0002) until clock() - t0 >= s --@cspin
  return x
end
local spin = jitmode == "off" and lspin or cspin

local shapes = {}

-- A Lua loop: with the JIT on, samples inside its trace (TRACE [n] at the loop's line).
shapes.loop = function(s)
  local r = lspin(s) --@loop
  return r
end

-- Recursive Lua: three recursive calls, then the burn (or leaf(s), for the helpers shape).
local function rec(n, s, leaf)
  if n == 0 then local r = (leaf or spin)(s) return r end --@rec_base
  local r = rec(n - 1, s, leaf) --@rec_call
  return r
end
shapes.recursive = function(s)
  local r = rec(3, s) --@recursive
  return r
end

-- pcall / xpcall of a Lua function.
local function protected(s)
  local r = spin(s) --@protected
  return r
end
shapes.pcall = function(s)
  local ok, r = pcall(protected, s) --@pcall
  assert(ok, r)
end
shapes.xpcall = function(s)
  local ok, r = xpcall(protected, debug.traceback, s) --@xpcall
  assert(ok, r)
end

-- Coroutines: the coroutine's frames continue into its resumer.
local function cobody(s)
  local r = spin(s) --@cobody
  coroutine.yield(r)
end
shapes.resume = function(s)
  local co = coroutine.create(cobody)
  local ok, r = coroutine.resume(co, s) --@resume
  assert(ok, r)
end
shapes.wrap = function(s)
  local f = coroutine.wrap(cobody)
  local r = f(s) --@wrap
  return r
end

-- FFI call into a C library: the interpreter (or a trace) calls shapes_burn.
shapes.ffi = function(s)
  local r = lib.shapes_burn(s) --@ffi
  return r
end

-- FFI callback: libc's qsort calls a Lua comparator that burns.
local per
local function cmp(a, b)
  spin(per) --@cmp
  return ffi.cast("const int *", a)[0] - ffi.cast("const int *", b)[0]
end
shapes.qsort = function(s)
  local n = 32
  local arr = ffi.new("int[?]", n)
  for i = 0, n - 1 do arr[i] = (i * 7919) % n end
  per = s / 400 -- each sort of 32 elements makes over 100 comparisons
  local cb = ffi.cast("int (*)(const void *, const void *)", cmp)
  local t0 = clock()
  repeat
    ffi.C.qsort(arr, n, 4, cb) --@qsort
  until clock() - t0 >= s
  cb:free()
end

-- A C builtin calling back into Lua: table.sort with a Lua comparator.
local function lcmp(a, b)
  spin(per) --@lcmp
  return a < b
end
shapes.sort = function(s)
  local t = {}
  per = s / 400
  local t0 = clock()
  repeat
    for i = 1, 32 do t[i] = (i * 7919) % 32 end
    table.sort(t, lcmp) --@sort
  until clock() - t0 >= s
end

-- Metamethods implemented in Lua.
shapes.index = function(s)
  local obj = setmetatable({}, { __index = function(_, k)
    local r = spin(s) --@index_mm
    return r
  end })
  local v = obj.missing --@index
  return v
end
shapes.add = function(s)
  local mt = { __add = function(a, b)
    local r = spin(s) --@add_mm
    return r
  end }
  local a, b = setmetatable({}, mt), setmetatable({}, mt)
  local v = a + b --@add
  return v
end

-- Error unwinding: errors thrown deep in Lua (and through a C builtin's lua_call) and caught
-- by pcall, then a burn: the burn's stack must hold no frame of the unwound calls.
local function thrower(n)
  if n == 0 then error("boom") end
  local r = thrower(n - 1) --@thrower
  return r
end
local function badcmp() error("boom") end --@badcmp
shapes.unwind = function(s)
  local t0 = clock()
  repeat
    local ok = pcall(thrower, 20) --@unwind_pcall
    assert(not ok)
    ok = pcall(table.sort, { 3, 2, 1 }, badcmp) --@unwind_sort
    assert(not ok)
    spin(0.01) --@unwind
  until clock() - t0 >= s
end

-- The interpreter's C helpers (lj_meta_cat, lj_tab_new, lj_str_new...) called for one
-- line: with the JIT off most samples are in them, in VM state INTERP, and their Lua
-- frames come from the interpreter's registers at the VM frame (vmsample.c).
local function hwork(s)
  local t0, n, a = clock(), 0, {}
  for i = 1, 64 do a[i] = i end
  a.x = true -- a hash part too
  repeat
    -- A concatenation and a table (helpers that store BASE), a length and a string
    -- comparison (lj_tab_len keeps BASE in rbp; lj_meta_comp stores it).
    for i = 1, 100 do local t = { "k" .. i } n = n + #a + (t[1] < "k5" and 1 or 0) end --@helpers_line
  until clock() - t0 >= s
  return n
end
-- Two recursive calls first: a base the interpreter did not store for a helper's call
-- would name an outer call of the same function, and the stack would lose levels.
shapes.helpers = function(s)
  local r = rec(2, s, hwork) --@helpers
  return r
end
-- The same in L mode (the leaf Lua frame only), which walks from a helper to its VM frame
-- for the registers too.
shapes.helpers_leaf = shapes.helpers

-- An FFI callback that does almost nothing: most samples are in the callback's entry and
-- exit (lj_ccallback_enter / _leave, with the CTState in the PC register), whose Lua
-- frames are the caller's until the callback's own frame is set up.
local function tcmp(a, b)
  return ffi.cast("const int *", a)[0] - ffi.cast("const int *", b)[0]
end
shapes.qsort_glue = function(s)
  local n = 512
  local arr = ffi.new("int[?]", n)
  local cb = ffi.cast("int (*)(const void *, const void *)", tcmp)
  local t0 = clock()
  repeat
    for i = 0, n - 1 do arr[i] = (i * 7919) % n end
    ffi.C.qsort(arr, n, 4, cb) --@qsort_glue
  until clock() - t0 >= s
  cb:free()
end

-- A builtin that runs C under a protected call of its own: ffi.cast parses its type string
-- under lj_vm_cpcall, a VM entry on the native stack with no Lua frame above it (JIT off:
-- compiled, the cast is folded away).
local ctarr = ffi.new("int[4]")
local function castwork(s)
  local t0, n = clock(), 0
  repeat
    for _ = 1, 200 do n = n + ffi.cast("const int *", ctarr)[0] end --@cast_line
  until clock() - t0 >= s
  return n
end
shapes.ffi_cast = function(s)
  local r = castwork(s) --@ffi_cast
  return r
end

-- Lua -> C function -> lua_call -> Lua: needs the embedding host's host_call(f, ...),
-- which lua_calls f (shapes_host.c). Errors through it are the host's unwind test.
local function hostcb(s)
  local r = spin(s) --@hostcb
  return r
end
shapes.host = function(s)
  local r = host_call(hostcb, s) --@host
  return r
end
shapes.host_unwind = function(s)
  local t0 = clock()
  repeat
    local ok = pcall(host_call, thrower, 5) --@host_unwind_pcall
    assert(not ok)
    spin(0.01) --@host_unwind
  until clock() - t0 >= s
end

-- One stream per shape. With the JIT on, the shape runs once unprofiled first, so that its
-- loops are compiled before the profile starts.
local list = {}
for i = 6, #arg do list[#list + 1] = arg[i] end
if #list == 0 then
  list = { "loop", "recursive", "pcall", "xpcall", "resume", "wrap", "ffi", "qsort", "sort",
           "index", "add", "unwind", "helpers", "helpers_leaf", "ffi_cast", "qsort_glue",
           "host", "host_unwind" }
end
for _, name in ipairs(list) do
  local f = shapes[name]
  if not f then
    print("skip " .. name .. ": no such shape")
  elseif (name:match("^helpers") or name == "ffi_cast") and jitmode == "on" then
    print("skip " .. name .. ": the interpreter's shape")
  elseif name:match("^host") and not host_call then
    print("skip " .. name .. ": needs the embedding host (host_call)")
  else
    if jitmode == "on" then f(0.05) end
    local ok, err = sp.start { mode = name == "helpers_leaf" and "L" or "C",
                               interval = 1, clock = "wall",
                               path = out .. "/" .. name .. ".bin" }
    assert(ok, err)
    f(secs) --@run
    assert(sp.stop())
    -- The machine code of the traces alive now, for the script to check that unnamed
    -- host frames are trace code: "start end number" in decimal, one trace per line.
    local tf = assert(io.open(out .. "/" .. name .. ".traces", "w"))
    for tr = 1, 4000 do
      local mc, addr = jutil.tracemc(tr)
      if mc then tf:write(string.format("%.0f %.0f %d\n", addr, addr + #mc, tr)) end
    end
    tf:close()
    print("ran " .. name)
  end
end
