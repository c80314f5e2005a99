-- Workloads for memprof_luajit.sh: one case per run, each profiled by the exact-mode memory
-- profiler (luaprof.memprof) into OUT/CASE.bin. Lines whose allocations the report must
-- show end in a marker comment `--@name`; memprof_luajit.sh finds their numbers by that
-- marker, so keep one per line and keep profiled statements on their own lines.
--
-- Usage: luajit memprof_luajit.lua CASE OUT JIT [ARG]
--   JIT: "off" (everything interpreted) or "on".
--   ARG: the directory of memprof_cmod.so (cases cmod, cresume), the profile path
--        (diskfull).
-- Prints "counters EVENTS ALLOCS FREES REALLOCS ALLOC_BYTES FREE_BYTES" (memprof.report()
-- after stop), case facts as "fact NAME VALUE" and "FAIL: ..." for a failed in-process
-- check; exits 1 after a failed check.
--
-- Determinism: nothing the profiled lines do may depend on history. GC is stopped before
-- start (except where a case collects on purpose), the Lua stack is grown beforehand (a
-- stack reallocation would be charged to whatever line needs it), the temporary string
-- buffer and the string hash table are grown beforehand where strings are made, and no
-- loop runs before a JIT case (so the hot loop's trace is the process's first).
local case, out, jitmode, extra = arg[1], arg[2], arg[3], arg[4]
assert(case and out and (jitmode == "on" or jitmode == "off"),
       "usage: memprof_luajit.lua CASE OUT on|off [ARG]")
local cmod_cases = { cmod = true, cresume = true, crecord = true, dlreuse = true, chandler = true }
package.cpath = "build/?.so;" .. (cmod_cases[case] and extra .. "/?.so;" or "") .. package.cpath
local lp = require "luaprof"
local mp = lp.memprof
require "table.new"
if jitmode == "off" then jit.off() else jit.on() end

local fails = 0
local function check(cond, what)
  if not cond then
    fails = fails + 1
    print("FAIL: " .. what)
  end
end

-- The nil, message, errno triple of a refused call.
local function expect_err(what, msg, errno, ok, m, e)
  check(ok == nil and m == msg and e == errno,
        string.format("%s: got %s, %q, %s; want nil, %q, %s", what, tostring(ok),
                      tostring(m), tostring(e), msg, errno))
end

-- Grows the Lua stack to a few thousand slots without a loop (no trace, no hot counter).
local function nargs(...) return select("#", ...) end
nargs(string.byte(string.rep("a", 4000), 1, -1))

local path = out .. "/" .. case .. ".bin"
local start_msg = "memprof.start(" .. path .. ")"

local function start()
  local ok, msg, e = mp.start(path)
  if ok ~= true then
    print(string.format("FAIL: %s: %s, %s, %s", start_msg, tostring(ok), tostring(msg),
                        tostring(e)))
    os.exit(1)
  end
end

local function stop()
  local ok, msg, e = mp.stop()
  check(ok == true, string.format("memprof.stop(): %s, %s, %s", tostring(ok),
                                  tostring(msg), tostring(e)))
  local r = mp.report()
  print(string.format("counters %d %d %d %d %d %d", r.events, r.allocs, r.frees, r.reallocs,
                      r.alloc_bytes, r.free_bytes))
end

local cases = {}

-- table.new (a C builtin): its two allocations (GCtab, array part) on the calling line.
cases.tnew = function()
  collectgarbage("stop")
  start()
  local t = table.new(20, 0) --@tnew
  stop()
  return t
end

-- N new strings by concatenation: N allocations on the line (JIT on: on the line and in
-- the loop's trace). The string table is grown beforehand (its resize would be an
-- allocation on the line too) and so is the temporary buffer.
local NCAT = 200
cases.concat = function()
  collectgarbage("stop")
  local warm = table.new(4096, 0)
  for i = 1, 4096 do warm[i] = "warm" .. i end
  local s = "c"
  local w = s .. string.rep("y", 2000)
  start()
  for _ = 1, NCAT do s = s .. "x" end --@concat
  stop()
  return warm, w, s
end

-- string.rep: one 1028-byte string on the calling line (the buffer grown beforehand).
cases.rep = function()
  collectgarbage("stop")
  local w = string.rep("y", 1000)
  start()
  local r = string.rep("x", 1000) --@rep
  stop()
  return w, r
end

-- coroutine.create: the lua_State and its stack on the calling line; what the coroutine
-- allocates, on the coroutine's own line.
cases.coroutine = function()
  collectgarbage("stop")
  local function body()
    local t = {} --@cobody
    return t
  end
  start()
  local co = coroutine.create(body) --@cocreate
  local ok, t = coroutine.resume(co) --@coresume
  stop()
  check(ok and type(t) == "table", "coroutine.resume")
  return co, t
end

-- A failed coroutine.resume (the coroutine is dead) stores false in its frame's function
-- slot, then makes its message: one string of 56 B (24 + 32) on the calling line. The
-- profiler took the slot for a function and crashed the program.
cases.deadresume = function()
  collectgarbage("stop")
  local warm = table.new(4096, 0)
  for i = 1, 4096 do warm[i] = "warm" .. i end
  local co = coroutine.create(function() end)
  coroutine.resume(co)
  start()
  local ok, msg = coroutine.resume(co) --@deadresume
  stop()
  check(ok == false and tostring(msg):find("dead", 1, true),
        "coroutine.resume of a dead coroutine: " .. tostring(msg))
  return warm, co
end

-- xpcall's handler as a builtin (`xpcall(f, debug.traceback)`): the VM calls it from C on
-- top of the function that raised the error, so its traceback is that function's, at the
-- failing line (an index of nil, raised in the VM's own code), or the line that called
-- the builtin that raised it (error): never debug.traceback's own.
cases.handler = function()
  collectgarbage("stop")
  local warm = table.new(4096, 0)
  for i = 1, 4096 do warm[i] = "warm" .. i end
  local function f() local x = nil; return x.y end --@handler_index
  local function g() error("boom") end --@handler_error
  local function h(e) return (string.gsub("qzx", "%w+", string.upper)) end --@handler_lua
  local function k() local r = string.rep(nil, 3); return r end --@handler_badarg
  start()
  local ok1, tb1 = xpcall(f, debug.traceback)
  local ok2, tb2 = xpcall(g, debug.traceback)
  local ok3, r3 = xpcall(g, h) --@handler_lua_call
  local ok4, tb4 = xpcall(k, debug.traceback)
  stop()
  check(not ok4 and tb4:find("bad argument", 1, true), "xpcall(k) handler: " .. tostring(tb4))
  check(not ok1 and tb1:find("stack traceback", 1, true), "xpcall(f) handler: " .. tostring(tb1))
  check(not ok2 and tb2:find("boom", 1, true), "xpcall(g) handler: " .. tostring(tb2))
  check(not ok3 and r3 == ("qzx"):upper(), "xpcall(g, h): " .. tostring(r3))
  return warm
end

-- The FFI loaded, then taken out of package.loaded (a sandbox hiding it): start must not
-- load it again (luaopen_ffi anew resets its state: declared types gone, cdata retyped,
-- finalizers dropped), as the sentinel's FFI finalizer did at first.
cases.ffihidden = function()
  local ffi = require "ffi"
  ffi.cdef "typedef struct { int a; double b; } lp_hidden_t;"
  local n = 0
  for _ = 1, 10 do ffi.gc(ffi.new("lp_hidden_t", 7, 2.5), function() n = n + 1 end) end
  local kept = ffi.new("lp_hidden_t", 3, 1.5)
  package.loaded.ffi = nil
  start()
  check(pcall(ffi.new, "lp_hidden_t", 1, 2), "ffi.new of a type declared before start")
  check(kept.a == 3 and kept.b == 1.5, "a cdata made before start read back")
  collectgarbage()
  collectgarbage()
  check(n == 10, "ffi.gc finalizers after start: " .. n .. " of 10 ran")
  stop()
end

-- package.loaded.ffi blocked by the program (a string there: require returns it) before the
-- FFI was ever loaded: start must not load it and put the real module in its place.
cases.ffiblocked = function()
  package.loaded.ffi = "blocked"
  start()
  stop()
  check(package.loaded.ffi == "blocked" and require("ffi") == "blocked",
        "package.loaded.ffi after start: " .. tostring(package.loaded.ffi))
end

-- load: the compile on the line calling load, the chunk's own allocation on its line.
cases.load = function()
  collectgarbage("stop")
  local code = "local a = 1\nlocal x = {}\nreturn x, a"
  start()
  local f = load(code, "=memprof_chunk") --@load
  local x = f() --@loadcall
  stop()
  return x
end

-- A lua_CFunction of a C module loaded after start: its userdata charged to it by address
-- and named by its symbol.
cases.cmod = function()
  collectgarbage("stop")
  check(package.loaded.memprof_cmod == nil, "memprof_cmod loaded before start")
  start()
  local cm = require "memprof_cmod" --@cmod_require
  local ud = cm.newud() --@cmod_call
  stop()
  check(type(ud) == "userdata", "newud returned " .. type(ud))
  return ud
end

-- xpcall's handler (debug.traceback) over an error a C function raised (luaL_error in
-- memprof_cmod.c): the traceback and the message on the line that called it.
cases.chandler = function()
  collectgarbage("stop")
  local warm = table.new(4096, 0)
  for i = 1, 4096 do warm[i] = "warm" .. i end
  local cm = require "memprof_cmod"
  local function c() local r = cm.fail(); return r end --@chandler_call
  start()
  local ok, tb = xpcall(c, debug.traceback)
  stop()
  check(not ok and tb:find("memprof_cmod failed", 1, true), "xpcall(c) handler: " .. tostring(tb))
  return warm
end

-- A coroutine resumed from C (lua_resume in memprof_cmod.c): its tables on its own lines,
-- across a yield, nothing on the line that resumes it.
cases.cresume = function()
  collectgarbage("stop")
  local cm = require "memprof_cmod"
  local function body()
    local a = {} --@crbody1
    coroutine.yield(a)
    local b = { 1, 2 } --@crbody2
    return b
  end
  local co = coroutine.create(body)
  local co2 = coroutine.create(function() coroutine.yield() end)
  local co3 = coroutine.create(function() coroutine.yield() end)
  -- The same C function run by a coroutine: after its lua_resume the VM's current thread
  -- is co3, and the coroutine running the function is found through the main thread's
  -- call of the wrapper.
  local inner = coroutine.wrap(function() return cm.resume_alloc(co3) end)
  -- Schedulers whose arguments name no thread they resume (one taken from a table, one
  -- made with lua_newthread), on the main thread and in a coroutine: the chain's thread
  -- in the deepest C frame runs them (their tables were INTERNAL in a coroutine).
  local function yielder() coroutine.yield() end
  local in1 = { coroutine.create(yielder) }
  local in2 = { coroutine.create(yielder) }
  local inner2 = coroutine.wrap(function()
    local a, s1 = cm.resume_in_alloc(in2)
    local b, s2 = cm.newthread_resume(yielder)
    return a, b, s1 + s2
  end)
  start()
  local st1 = cm.resume(co) --@crresume1
  local st2 = cm.resume(co) --@crresume2
  local t, st3 = cm.resume_alloc(co2) --@crresume3
  local t2, st4 = inner() --@crresume4
  local t3, st5 = cm.resume_in_alloc(in1) --@crresume5
  local t4, st6 = cm.newthread_resume(yielder) --@crresume6
  local t5, t6, st7 = inner2() --@crresume7
  stop()
  check(st1 == 1 and st2 == 0 and st3 == 1 and st4 == 1 and st5 == 1 and st6 == 1 and
        st7 == 2, string.format("lua_resume statuses %s %s %s %s %s %s %s", st1, st2, st3,
                                st4, st5, st6, st7))
  return co, co2, co3, t, t2, t3, t4, t5, t6
end

-- A library loaded, called and unloaded, then another loaded where it was (a plugin
-- reloaded): each function's userdata under its own name, the second library's symbols
-- written before its event (they were not: its address had been seen). "fact dlsame 1":
-- the second function was at the first's address, as the case needs.
cases.dlreuse = function()
  collectgarbage("stop")
  local cm = require "memprof_cmod"
  start()
  local ua, fa = cm.dlcall(extra .. "/memprof_reuse_a.so", "memprof_reuse_alpha")
  local ub, fb = cm.dlcall(extra .. "/memprof_reuse_b.so", "memprof_reuse_beta")
  stop()
  print("fact dlsame " .. (fa == fb and 1 or 0))
  return ua, ub
end

-- The JIT compiler's work is INTERNAL: with every loop hot at once, traces are recorded
-- through calls of a C function that allocates nothing (keepalloc); recording its entry
-- (lj_dispatch_call, under lj_vm_cpcall) has its frame on top, and the recorder's buffers
-- were charged to it.
cases.crecord = function()
  local cm = require "memprof_cmod"
  jit.opt.start("hotloop=1", "hotexit=1")
  start()
  for _ = 1, 200 do
    local f = load("local cm = ... for i = 1, 30 do cm.keepalloc() local t = { i } end")
    f(cm)
  end
  stop()
end

-- FFI callbacks: qsort calls a Lua comparator that makes a table per call: each on its
-- line (or in a trace started in the comparator), none on the line calling qsort. The
-- number of calls is qsort's business: the comparator counts them ("fact cbcalls N").
cases.ffi_cb = function()
  local ffi = require "ffi"
  ffi.cdef [[
  void qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));
  ]]
  local N = 64
  local arr = ffi.new("int[?]", N)
  for i = 0, N - 1 do arr[i] = (i * 37) % N end
  local calls, keep = 0, table.new(4096, 0)
  local cmp = ffi.cast("int (*)(const void *, const void *)", function(a, b) --@cbfunc
    calls = calls + 1
    keep[calls] = {} --@cbtable
    local x, y = ffi.cast("const int *", a)[0], ffi.cast("const int *", b)[0]
    return x < y and -1 or (x > y and 1 or 0)
  end)
  local qsort = ffi.C.qsort -- resolved (a cdata made) before start
  collectgarbage()
  collectgarbage("stop")
  start()
  qsort(arr, N, 4, cmp) --@qsort
  stop()
  for i = 1, N - 1 do check(arr[i - 1] <= arr[i], "qsort did not sort") break end
  print("fact cbcalls " .. calls)
  cmp:free()
  return keep
end

-- A hot loop storing tables (the target pre-sized: only the 300 tables are allocated).
cases.hot = function()
  collectgarbage("stop")
  local keep = table.new(300, 0)
  start()
  for i = 1, 300 do keep[i] = {i} end --@hot
  stop()
  return keep
end

-- A builtin the JIT does not compile (os.date), called from a hot loop: the trace is
-- stitched around it, and the builtin runs on a continuation frame above the loop's
-- function. Its one string per call (8 characters, distinct) is charged to the calling
-- line, as from the interpreter. The string table is grown beforehand, as in concat.
cases.stitch = function()
  collectgarbage("stop")
  local keep, warm = table.new(300, 0), table.new(4096, 0)
  for i = 1, 4096 do warm[i] = "warm" .. i end
  start()
  for i = 1, 300 do keep[i] = os.date("!%H:%M:%S", i) end --@stitch
  stop()
  return keep, warm
end

-- Builtins with no Lua function below them (pcall calls string.rep, tostring and
-- table.concat; gsub calls string.upper): Tarantool's rule charges each to its C entry,
-- which a stripped VM (Debian's) can name only by address; the report names them after
-- the builtin. string.rep 1 x 1028 B; tostring 1 x 32 B ("12.5"); table.concat 1 x 32 B
-- ("ab-cd"); string.upper 2 x 32 B ("QZXW", "JKWZ") and string.reverse 1 x 36 B ("dlrow
-- olleh"), one entry shared with string.lower (its name says so); gsub's own work on its
-- line.
cases.builtin = function()
  collectgarbage("stop")
  local w = string.rep("y", 1000)
  local t = { "ab", "cd" }
  start()
  local _, r = pcall(string.rep, "x", 1000)
  local g = ("qzxw jkwz"):gsub("%w+", string.upper) --@builtin_gsub
  local _, s = pcall(tostring, 12.5)
  local _, c = pcall(table.concat, t, "-")
  local _, v = pcall(string.reverse, "hello world")
  local _, b = pcall(bit.lshift, 1LL, 3)
  stop()
  return w, r, g, s, c, v, b
end

-- The same entry when the builtin that allocates first was dropped from its library table
-- before start (the profile learns the builtins from those tables): string.reverse (1 x
-- 36 B) still named with its entry's two others, before and after string.upper (1 x 32 B).
cases.builtin_drop = function()
  collectgarbage("stop")
  local w = string.rep("y", 1000)
  local rev = string.reverse
  string.reverse = nil
  start()
  local _, v = pcall(rev, "hello world")
  local _, u = pcall(string.upper, "qzxw")
  stop()
  string.reverse = rev
  return w, v, u
end

-- A chunk loaded, run and collected again and again (a reloaded handler): each time its
-- prototype and its name's string take the addresses the last ones freed, with the same
-- first line and size; each run's table must be on its own chunk's line.
cases.reload = function()
  collectgarbage("stop")
  local keep = {}
  start()
  for k = 1, 4 do
    local f = loadstring("local a = {" .. k .. "}\nreturn a", "=reload" .. k) --@reload_load
    keep[k] = f()
    f = nil
    collectgarbage()
    collectgarbage("stop")
  end
  stop()
  return keep
end

-- The same, each chunk allocating three times at one PC on line k (k - 1 empty lines
-- first): the same bytecode, often at the same addresses, so a line remembered for a PC of
-- a freed prototype would name the last chunk's line (and function).
cases.reload_lines = function()
  collectgarbage("stop")
  local keep = {}
  start()
  for k = 1, 4 do
    local src = ("\n"):rep(k - 1) .. "local a = {} for i = 1, 3 do a[i] = {" .. k .. "} end\nreturn a"
    local f = loadstring(src, "=relines" .. k)
    keep[k] = f()
    f = nil
    collectgarbage()
    collectgarbage("stop")
  end
  stop()
  return keep
end

-- Stripped bytecode (string.dump(f, true), as `luajit -b` writes by default): no line
-- info, so its allocations are the function's at line 0 (Tarantool's rule), also those
-- of a builtin it calls, not INTERNAL or the builtin's C code.
cases.stripped = function()
  collectgarbage("stop")
  local w = string.rep("y", 1000)
  local f = load(string.dump(function() return { 4, 5 }, string.rep("x", 1000) end, true),
                 "=stripped")
  start()
  local t, s = f()
  stop()
  return w, t, s
end

-- Trace numbers reused within one profile: the first hot loop's trace is trace 1,
-- jit.flush() drops it and the collection frees it, and the second loop's new trace is
-- trace 1 again, in the block the first one had (same size: the allocator reuses it, as
-- measured on both builds). Its events must name the second loop's line: the stream names
-- trace 1 a second time before them, although number and address are the same.
cases.retrace = function()
  collectgarbage("stop")
  local a, b = table.new(300, 0), table.new(300, 0)
  start()
  for i = 1, 300 do a[i] = {i} end --@retrace1
  jit.flush()
  collectgarbage()
  for i = 1, 300 do b[i] = {i} end --@retrace2
  stop()
  return { a, b }
end

-- Leak: NLEAK tables kept in a global on one line, NDROP dropped at another, two full
-- collections before stop. The GC runs only in those collections.
local NLEAK, NDROP = 300, 500
cases.leak = function()
  LEAK = table.new(NLEAK, 0)
  local function churn()
    for i = 1, NDROP do local tmp = {i, i} end --@drop
  end
  collectgarbage()
  collectgarbage()
  collectgarbage("stop")
  start()
  for i = 1, NLEAK do LEAK[i] = {i} end --@leak
  churn() --@churn
  collectgarbage() --@collect1
  collectgarbage() --@collect2
  stop()
end

-- Tables made at one line with a separate array part (table.new(20, 0): 21 slots, not kept
-- in the table's own block) and grown at another (reallocations on fill's line, or in its
-- trace with the JIT on): the first dropped and collected, the second kept. The HEAP SUMMARY
-- holds the kept one under the line that made it, at its final size, and nothing under
-- the other lines (Tarantool's summary left the dropped table's growth "held"). A third,
-- made before the profile and grown in it, is held by the growing line (or its trace).
cases.grown = function()
  local function fill(t, n)
    for i = 1, n do t[i] = i end --@grownfill
  end
  local c = table.new(20, 0)
  collectgarbage()
  collectgarbage()
  start()
  local a = table.new(20, 0) --@grownmake1
  fill(a, 20000)
  a = nil
  local b = table.new(20, 0) --@grownmake2
  fill(b, 20000)
  fill(c, 20000)
  collectgarbage() --@growncollect1
  collectgarbage() --@growncollect2
  stop()
  return b, c
end

-- Misuse: Tarantool's messages and errno values.
cases.misuse = function()
  local EINVAL, ENOENT = 22, 2
  check(misc and misc.memprof == mp, "misc.memprof is luaprof.memprof")
  expect_err("stop when not running", "profiler is not running", EINVAL, mp.stop())
  check(mp.start(path) == true, "first start")
  local again = out .. "/misuse-again.bin"
  expect_err("start twice", "profiler is running already", EINVAL, mp.start(again))
  expect_err("start twice, same path", "profiler is running already", EINVAL, mp.start(path))
  local f = io.open(again)
  check(f == nil, "a refused second start created " .. again)
  if f then f:close() end
  local keep = {} --@misuse_alloc
  check(mp.stop() == true, "stop")
  expect_err("stop twice", "profiler is not running", EINVAL, mp.stop())
  expect_err("bad path", "/nonexistent/dir/x.bin: No such file or directory", ENOENT,
             mp.start("/nonexistent/dir/x.bin"))
  check(not pcall(mp.start, {}), "start({}) does not raise")
  check(not pcall(mp.start, true), "start(true) does not raise")
  -- Nothing left running by the refusals.
  expect_err("stop after refusals", "profiler is not running", EINVAL, mp.stop())
  check(mp.start(out .. "/misuse-final.bin") == true, "start after refusals")
  check(mp.stop() == true, "stop after refusals")
  return keep
end

-- lua_close while profiling: start, allocate, return without stop (luajit then closes the
-- state; the profiler must finish the file before the heap goes away).
cases.close = function()
  collectgarbage("stop")
  print("fact close_started 1")
  start()
  -- A userdata made while profiling whose finalizer allocates when lua_close runs it: the
  -- profile stops before (it stopped after every userdata finalizer made since start,
  -- whose work showed as the program's allocations).
  local p = newproxy(true); getmetatable(p).__gc = function() KEEP_FIN = { 1, 2, 3 } end --@close_fin
  KEEP_PROXY = p
  local t = table.new(50, 0) --@close_alloc
  KEEP_AT_CLOSE = t
end

-- Full disk: ARG is a path on a small tmpfs. An allocation-heavy loop runs until the
-- profiler halts by itself (its counters freeze); then stop() reports ENOSPC, the program
-- goes on allocating, and after full collections the heap is back to its size before.
cases.diskfull = function()
  path = extra
  collectgarbage()
  collectgarbage()
  local before = collectgarbage("count")
  start()
  local last, rounds, hold = -1, 0, nil
  while rounds < 2000 do
    rounds = rounds + 1
    hold = {}
    for i = 1, 2000 do hold[i] = {i} end
    local ev = mp.report().events
    if ev == last then break end
    last = ev
  end
  hold = nil
  print("fact rounds " .. rounds)
  local frozen = mp.report().events
  check(frozen == last, "events still counted after the halt")
  -- The program goes on allocating: the VM's own allocator is back.
  local keep = {}
  for i = 1, 100000 do keep[i] = {i, -i} end
  check(#keep == 100000 and keep[77777][2] == -77777, "allocating after the halt")
  check(mp.report().events == frozen, "events counted after the halt")
  keep = nil
  local ok, msg, e = mp.stop()
  print(string.format("stop\t%s\t%s\t%s", tostring(ok), tostring(msg), tostring(e)))
  expect_err("stop twice", "profiler is not running", 22, mp.stop())
  -- And it can profile again.
  path = out .. "/diskfull-again.bin"
  start()
  local t = {} --@again
  stop()
  collectgarbage()
  collectgarbage()
  local after = collectgarbage("count")
  print(string.format("fact heap_kib_before %.1f", before))
  print(string.format("fact heap_kib_after %.1f", after))
  return t
end

-- fork(): the child is not profiling (its stop() says so) and writes nothing into the
-- parent's file; the parent's profile goes on and is complete.
cases.fork = function()
  local ffi = require "ffi"
  ffi.cdef [[ int fork(void); int waitpid(int pid, int *status, int options); ]]
  collectgarbage("stop")
  local keep = table.new(300, 0)
  start()
  for i = 1, 100 do keep[i] = {i} end --@fork_parent1
  local pid = ffi.C.fork()
  if pid == 0 then
    local t = table.new(1000, 0)
    for i = 1, 1000 do t[i] = {i} end --@fork_child
    local ok, msg, e = mp.stop()
    io.stdout:write(string.format("fact childstop %s|%s|%s\n", tostring(ok), tostring(msg),
                                  tostring(e)))
    io.stdout:flush()
    os.exit(0)
  end
  check(pid > 0, "fork failed")
  local st = ffi.new("int[1]")
  check(ffi.C.waitpid(pid, st, 0) == pid and st[0] == 0, "the child did not exit 0")
  for i = 101, 300 do keep[i] = {i} end --@fork_parent2
  stop()
  return keep
end

local f = cases[case]
assert(f, "unknown case " .. case)
f()
print("ran " .. case)
if fails > 0 then os.exit(1) end
