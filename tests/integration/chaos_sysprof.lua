-- Chaos workload for chaos_sysprof.sh (issue 3, robustness): for CHAOS_SECONDS seconds of
-- wall time (default 60) one loop mixes, in a shuffled order each round, coroutines
-- (create/resume/yield/wrap, some dying with string and table errors), pcall/xpcall/error,
-- GC pressure (short-lived tables and strings, a ring of live objects, GC steps and full
-- collections, __gc on userdata and FFI finalizers), JIT traces created and flushed
-- (hot loops with side exits, fresh chunks, jit.flush, jit.off/jit.on), a coroutine with
-- 50 locals recursing so that its stack grows (and once in a while overflows), FFI calls
-- and FFI callbacks (qsort with a Lua comparator), string operations (string.rep, gsub
-- with a function, nested gsub callbacks deepening the C stack) and table.sort with a
-- comparator. Every result is checked: the profiler must not change what the program
-- computes.
--
-- The profile is normally started by `luaprof record` (LUA_INIT; 10 kHz needs its
-- --rate, the Lua API's interval is in whole milliseconds) or by an embedding host
-- (chaos_host.c, C API); when no profile runs, the script starts one itself at 1 kHz
-- into CHAOS_PATH (default chaos.bin) with the luaprof module found on LUA_CPATH.
--
-- CHAOS_DEPTH (default 900) is the largest recursion depth of the 50-local coroutine.
--
-- CHAOS_END says how the run ends, the profiler still running in the first three cases:
--   return  the main chunk returns: the host (luajit's main) calls lua_close;
--   exit    os.exit(0, true) from deep inside a coroutine: lua_close with Lua frames live;
--   error   an error raised deep inside a coroutine ends the chunk (the host then closes);
--   stop    sysprof.stop() first, then return.
-- Before ending it prints one line "chaos: key=value ..." (counters of the workload and
-- the profiler's report()/stats() at that moment).
local secs = tonumber(os.getenv("CHAOS_SECONDS") or "") or 60
local finish = os.getenv("CHAOS_END") or "return"
local max_depth = tonumber(os.getenv("CHAOS_DEPTH") or "") or 900 -- see deep_stack
assert(finish == "return" or finish == "exit" or finish == "error" or finish == "stop",
       "CHAOS_END must be return, exit, error or stop")

local ffi = require "ffi"
local jit = require "jit"
local sp = require("luaprof").sysprof

local started, err = sp.start { mode = "C", interval = 1, clock = "wall",
                                path = os.getenv("CHAOS_PATH") or "chaos.bin" }
assert(started or err == "profiler is running already", err)

ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } chaos_timespec;
int clock_gettime(int clk, chaos_timespec *ts);
size_t strlen(const char *s);
int abs(int x);
void qsort(void *base, size_t nmemb, size_t size, int (*cmp)(const void *, const void *));
]]
local C = ffi.C
local ts = ffi.new("chaos_timespec")
local function now()
  C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

math.randomseed(42)
local rnd = math.random
local cnt = setmetatable({}, { __index = function() return 0 end })
local function count(k, n) cnt[k] = cnt[k] + (n or 1) end

-- Traces alive (counted before each flush; trace numbers restart after a flush).
local traceinfo = require("jit.util").traceinfo
local function live_traces()
  local n = 0
  for tr = 1, 5000 do
    if traceinfo(tr) then n = n + 1 end
  end
  return n
end

-- -- Coroutines ------------------------------------------------------------------------------

local function gen(n)
  return coroutine.wrap(function()
    for i = 1, n do coroutine.yield(i) end --@co_gen
  end)
end

local function coroutines()
  local s = 0
  for v in gen(40) do s = s + v end
  assert(s == 820)
  -- Values passed both ways.
  local co = coroutine.create(function(a)
    local b = coroutine.yield(a + 1)
    local c = coroutine.yield(b * 2)
    return c .. "!"
  end)
  local ok, v = coroutine.resume(co, 1); assert(ok and v == 2)
  ok, v = coroutine.resume(co, 5); assert(ok and v == 10)
  ok, v = coroutine.resume(co, "x"); assert(ok and v == "x!")
  assert(coroutine.status(co) == "dead")
  ok, v = coroutine.resume(co); assert(not ok and v:find("dead"))
  -- Dying with a string error, with a table error, with a runtime error, after yields.
  co = coroutine.create(function() coroutine.yield(1) error("co boom") end)
  assert(coroutine.resume(co))
  ok, v = coroutine.resume(co); assert(not ok and v:find("co boom"))
  co = coroutine.create(function() coroutine.yield(1) error({ code = 42 }) end)
  assert(coroutine.resume(co))
  ok, v = coroutine.resume(co); assert(not ok and v.code == 42)
  co = coroutine.create(function(t) coroutine.yield() return t.x.y end)
  assert(coroutine.resume(co, {}))
  ok, v = coroutine.resume(co); assert(not ok and v:find("attempt to index"))
  count("co_errors", 3)
  -- A wrapped coroutine's error goes through its resumer.
  ok, v = pcall(coroutine.wrap(function() coroutine.yield() end)); assert(ok)
  ok, v = pcall(coroutine.wrap(function() error("wrap boom") end))
  assert(not ok and v:find("wrap boom"))
  count("co_errors")
  -- Yield across pcall, an error caught inside the coroutine, a nested coroutine.
  co = coroutine.create(function()
    local ok2, e = pcall(function()
      coroutine.yield("in pcall")
      error("caught inside")
    end)
    assert(not ok2 and e:find("caught inside"))
    local inner = coroutine.wrap(function() coroutine.yield("inner") return "done" end)
    coroutine.yield(inner())
    return inner()
  end)
  ok, v = coroutine.resume(co); assert(ok and v == "in pcall")
  ok, v = coroutine.resume(co); assert(ok and v == "inner")
  ok, v = coroutine.resume(co); assert(ok and v == "done")
  count("coroutines", 9)
end

-- -- A coroutine with 50 locals growing its stack ------------------------------------------

-- Each level holds 50 locals (over 50 stack slots), so a fresh coroutine's stack is
-- reallocated many times on the way down while the sampler reads it; at the bottom it
-- yields and stays suspended (the GC may shrink its stack meanwhile) until resumed later.
-- deep(n) returns (what the bottom received) + 49 * n.
local function deep(n)
  local l01, l02, l03, l04, l05, l06, l07, l08, l09, l10, l11, l12, l13, l14, l15, l16, l17,
        l18, l19, l20, l21, l22, l23, l24, l25, l26, l27, l28, l29, l30, l31, l32, l33, l34,
        l35, l36, l37, l38, l39, l40, l41, l42, l43, l44, l45, l46, l47, l48, l49, l50 =
        n + 1, n + 2, n + 3, n + 4, n + 5, n + 6, n + 7, n + 8, n + 9, n + 10, n + 11, n + 12,
        n + 13, n + 14, n + 15, n + 16, n + 17, n + 18, n + 19, n + 20, n + 21, n + 22, n + 23,
        n + 24, n + 25, n + 26, n + 27, n + 28, n + 29, n + 30, n + 31, n + 32, n + 33, n + 34,
        n + 35, n + 36, n + 37, n + 38, n + 39, n + 40, n + 41, n + 42, n + 43, n + 44, n + 45,
        n + 46, n + 47, n + 48, n + 49, n + 50
  if n > 0 then
    local r = deep(n - 1) --@deep_call
    return r + (l50 - l01)
  end
  assert(l25 - l24 == 1 and l49 - l02 == 47 and l17 + l33 == 2 * l25)
  local got = coroutine.yield(l25) --@deep_yield
  return got
end

local suspended = {} -- deep coroutines waiting at their bottom
local function deep_stack()
  -- Finish the oldest suspended one.
  if #suspended >= 3 then
    local s = table.remove(suspended, 1)
    local ok, v = coroutine.resume(s.co, s.depth)
    assert(ok and v == s.depth + 49 * s.depth, v)
    assert(coroutine.status(s.co) == "dead")
  end
  local depth = rnd(math.min(50, max_depth), max_depth)
  local co = coroutine.create(deep)
  local ok, v = coroutine.resume(co, depth)
  assert(ok and v == 25, v)
  suspended[#suspended + 1] = { co = co, depth = depth }
  count("deep_levels", depth)
  if depth > cnt.deep_max then cnt.deep_max = depth end
  -- Once in a while past the VM's stack limit (about 1200 levels): the coroutine dies with
  -- "stack overflow". Only at the default depth: a smaller CHAOS_DEPTH keeps every Lua
  -- stack short (a diagnosis aid: sampling cost grows with the depth).
  if max_depth >= 900 and rnd(20) == 1 then
    co = coroutine.create(deep)
    ok, v = coroutine.resume(co, 3000)
    assert(not ok and tostring(v):find("stack overflow"), v)
    count("stack_overflows")
  end
end

-- -- Errors ------------------------------------------------------------------------------------

local function thrower(n, e)
  if n == 0 then error(e) end
  local r = thrower(n - 1, e) --@thrower
  return r
end
local errobj = setmetatable({}, { __tostring = function() return "errobj" end })
local strict = setmetatable({}, { __index = function(_, k) error("no field " .. k, 2) end })

local function errors()
  local ok, e = pcall(error, "plain"); assert(not ok and e == "plain")
  ok, e = pcall(error, { code = 7 }); assert(not ok and e.code == 7)
  ok, e = pcall(thrower, 30, "deep"); assert(not ok and e:find("deep"))
  ok, e = pcall(thrower, 10, errobj); assert(not ok and tostring(e) == "errobj")
  ok, e = pcall(function() local x; return x.y end)
  assert(not ok and e:find("attempt to index"))
  ok, e = pcall(function() return 1 + {} end); assert(not ok and e:find("arithmetic"))
  ok, e = xpcall(thrower, debug.traceback, 15, "traced")
  assert(not ok and e:find("stack traceback"))
  ok, e = pcall(function() return strict.missing end)
  assert(not ok and e:find("no field missing"))
  local ok2
  ok, ok2, e = pcall(pcall, error, "nested"); assert(ok and not ok2 and e == "nested")
  ok, e = pcall(string.rep) ; assert(not ok and e:find("bad argument"))
  count("errors", 10)
end

-- -- GC pressure -------------------------------------------------------------------------------

local ring, ring_i = {}, 0 -- live objects, replaced all the time
local weak = setmetatable({}, { __mode = "k" })
local function on_gc() count("gc_finalized") local t = {} for i = 1, 8 do t[i] = i end end

local function gc_pressure()
  for i = 1, 400 do
    local t = { i, i + 1, tostring(i), { x = i } }
    local s = "k" .. i .. ":" .. rnd(1000)
    weak[t] = s
  end
  for _ = 1, 40 do
    ring_i = ring_i % 4096 + 1
    ring[ring_i] = { ring_i, string.rep("r", ring_i % 64), { ring_i } }
  end
  -- Userdata with __gc and cdata with finalizers; some stay live until lua_close.
  local p = newproxy(true)
  getmetatable(p).__gc = on_gc
  ring[rnd(4096)] = p
  ring[rnd(4096)] = ffi.gc(ffi.new("int[4]"), on_gc)
  collectgarbage("step", 64)
  count("gc_steps")
  if rnd(60) == 1 then
    collectgarbage("collect")
    count("gc_full")
  end
end

-- -- JIT: traces created, exited, flushed ------------------------------------------------------

local mixed = { 1, 2.5, "3", 4, true, 5, "seven" }
local function hot_loops(n)
  local s = 0
  for i = 1, n do s = s + (i % 7) * 0.5 end --@jit_num
  local t = {}
  for i = 1, n / 10 do t[i] = i end
  local u = 0
  for _, v in ipairs(t) do u = u + v end --@jit_ipairs
  for k = 1, n / 10 do -- type-unstable: side exits
    local v = mixed[k % #mixed + 1]
    if type(v) == "number" then u = u + v elseif type(v) == "string" then u = u + #v end --@jit_exit
  end
  return s, u
end

local chunks = 0
local function jit_work()
  local n = 2000 * rnd(1, 5)
  local s, u = hot_loops(n)
  local want = 0
  for i = 1, n do want = want + (i % 7) * 0.5 end
  assert(s == want)
  assert(u > n / 10)
  -- A fresh chunk: new prototypes, new traces, old ones collected (addresses reused).
  if rnd(6) == 1 then
    chunks = chunks + 1
    local k = rnd(9)
    local f = assert(loadstring(("local s = 0 for i = 1, 20000 do s = s + i * %d end return s")
                                :format(k), "=chaos_chunk"))
    assert(f() == k * 20000 * 20001 / 2)
    count("chunks")
  end
end

-- -- FFI calls and callbacks ---------------------------------------------------------------

local function icmp(a, b)
  local x, y = ffi.cast("const int *", a)[0], ffi.cast("const int *", b)[0]
  return x < y and -1 or (x > y and 1 or 0) --@ffi_cmp
end
local cmp_cb = ffi.cast("int (*)(const void *, const void *)", icmp)

local function ffi_hot() -- compiled: the trace calls C
  local s = 0
  for i = 1, 3000 do s = s + C.abs(-i) end --@ffi_abs
  return s
end

local arr = ffi.new("int[?]", 128)
local cbuf = ffi.new("char[?]", 64, "chaos sysprof")
local function ffi_work()
  local n = rnd(16, 128)
  for i = 0, n - 1 do arr[i] = rnd(0, 1000) end
  C.qsort(arr, n, 4, cmp_cb) --@qsort
  for i = 1, n - 1 do assert(arr[i - 1] <= arr[i]) end
  if rnd(10) == 1 then -- a callback made and freed
    local cb = ffi.cast("int (*)(const void *, const void *)", icmp)
    C.qsort(arr, n, 4, cb)
    cb:free()
  end
  assert(ffi_hot() == 3000 * 3001 / 2)
  assert(C.strlen(cbuf) == 13)
  count("qsorts")
end
-- A C function that calls back must never be called from a trace ("bad callback"): the
-- caller of qsort stays interpreted (its callee icmp is compiled all the same).
jit.off(ffi_work)

-- -- Strings ------------------------------------------------------------------------------------

-- Lua -> gsub (a C builtin calling back) -> Lua ..., n times: a deep C stack.
local function nest(n)
  if n == 0 then return "x" end
  return (("a"):gsub("a", function() return nest(n - 1) end)) --@nest
end

local function strings()
  local reps = 100 + rnd(200)
  local s = string.rep("ab", reps)
  local seen = 0
  local r = s:gsub("a", function(c) seen = seen + 1 return c:upper() end) --@gsub_fn
  assert(seen == reps and #r == #s and r:sub(1, 2) == "Ab")
  local parts = {}
  for i = 1, 100 do parts[i] = string.format("%d:%s:%.2f", i, s:sub(i, i + 2), i / 3) end
  local joined = table.concat(parts, ",")
  assert(select(2, joined:gsub(",", ",")) == 99)
  local b = 0
  for i = 1, #s, 7 do b = b + s:byte(i) end
  assert(b > 0)
  assert(s:find("(b+)a", 1) == 2 and s:upper():lower() == s)
  assert(nest(rnd(20, 60)) == "x")
  count("strings")
end

-- -- table.sort with a comparator ---------------------------------------------------------

local function desc(a, b) return a > b end --@sort_cmp
local function sorts()
  local t = {}
  for i = 1, 200 + rnd(200) do t[i] = rnd(100000) end
  table.sort(t, desc) --@sort
  for i = 2, #t do assert(t[i - 1] >= t[i]) end
  local ok, e = pcall(table.sort, { 3, 1, 2, 5, 4 }, function() error({ sorterr = true }) end)
  assert(not ok and e.sorterr)
  count("sorts")
end

-- -- Metamethods -------------------------------------------------------------------------------

local vec = {}
vec.__index = vec
vec.__add = function(a, b) return setmetatable({ x = a.x + b.x }, vec) end
vec.__call = function(self, k) return self.x * k end
vec.__concat = function(a, b) return tostring(a.x) .. "|" .. tostring(b.x) end
local function metas()
  local a, b = setmetatable({ x = 1 }, vec), setmetatable({ x = 2 }, vec)
  local c = a
  for _ = 1, 200 do c = c + b end
  assert(c.x == 401 and c(2) == 802 and (a .. b) == "1|2")
  count("metas")
end

-- -- The loop ------------------------------------------------------------------------------------

local steps = { coroutines, deep_stack, errors, gc_pressure, jit_work, ffi_work, strings,
                sorts, metas }
local order = {}
for i = 1, #steps do order[i] = i end

local t0 = now()
local t_end = t0 + secs
local rounds = 0
while now() < t_end do
  rounds = rounds + 1
  for i = #order, 2, -1 do
    local j = rnd(i)
    order[i], order[j] = order[j], order[i]
  end
  for _, k in ipairs(order) do
    if rnd(3) == 1 then
      coroutine.wrap(steps[k])() -- the same work inside a coroutine
    else
      steps[k]()
    end
  end
  if rounds % 25 == 0 then
    count("traces_flushed", live_traces())
    jit.flush()
    count("flushes")
  end
  if rounds % 40 == 0 then
    jit.off()
    count("jit_off")
  elseif rounds % 40 == 10 then
    jit.on()
  end
end
jit.on()

local rep, st = sp.report(), sp.stats()
local out = { ("chaos: end=%s seconds=%.2f rounds=%d"):format(finish, now() - t0, rounds) }
out[#out + 1] = ("samples=%.0f"):format(rep.samples)
for _, k in ipairs { "INTERP", "LFUNC", "FFUNC", "CFUNC", "GC", "EXIT", "RECORD", "OPT",
                     "ASM", "TRACE" } do
  out[#out + 1] = k .. "=" .. ("%.0f"):format(rep.vmstate[k])
end
out[#out + 1] = ("dropped=%.0f overruns=%.0f paced=%.0f truncated=%.0f handler=%.2f duration=%.2f")
                :format(st.dropped, st.overruns, st.paced, st.truncated, st.handler, st.duration)
local keys = {}
for k in pairs(cnt) do keys[#keys + 1] = k end
table.sort(keys)
for _, k in ipairs(keys) do out[#out + 1] = k .. "=" .. ("%.0f"):format(cnt[k]) end
print(table.concat(out, " "))
io.stdout:flush()

if finish == "stop" then
  assert(sp.stop())
elseif finish == "exit" then
  -- lua_close from inside a coroutine 200 Lua frames deep (with the deep coroutines still
  -- suspended at their bottom), then exit(0).
  coroutine.wrap(function()
    local function down(n)
      if n == 0 then os.exit(0, true) end --@exit
      local l = { depth = n }
      return down(n - 1), l
    end
    down(200)
  end)()
  error("os.exit returned")
elseif finish == "error" then
  local co = coroutine.wrap(function()
    thrower(100, "chaos: ended by an error") --@end_error
  end)
  co()
end
