-- Lua API of the in-process agent (require "luaprof"), run by agent_api.sh with a real
-- LuaJIT: Tarantool's messages and errno values for every misuse, D-mode counters, report()
-- while running, misc.sysprof, L and C streams for `luaprof report`, jit.profile alongside.
-- Usage: luajit agent_api.lua AGENT_DIR OUT_DIR. Prints "FAIL: ..." lines; exit 1 if any.
local agent_dir, out = assert(arg[1]), assert(arg[2])
package.cpath = agent_dir .. "/?.so;" .. package.cpath

local fails = 0
local function check(cond, what)
  if not cond then
    fails = fails + 1
    print("FAIL: " .. what)
  end
end

-- Calls f and checks the nil, message, errno triple.
local function expect_err(what, msg, errno, f, ...)
  local ok, m, e = f(...)
  check(ok == nil and m == msg and e == errno,
        string.format("%s: got %s, %q, %s; want nil, %q, %s", what, tostring(ok),
                      tostring(m), tostring(e), msg, errno))
end

local function burn(secs, f)
  local t = os.clock()
  while os.clock() - t < secs do f() end
end

local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end

local function sum_states(r)
  local s = 0
  for _, v in pairs(r.vmstate) do s = s + v end
  return s
end

local STATES = { "INTERP", "LFUNC", "FFUNC", "CFUNC", "GC", "EXIT", "RECORD", "OPT", "ASM",
                 "TRACE" }

-- -- Module and misc.sysprof ---------------------------------------------------------
check(misc == nil, "misc exists before the module is loaded")
local lp = require "luaprof"
local sp = lp.sysprof
check(type(sp) == "table" and type(sp.start) == "function" and type(sp.stop) == "function"
      and type(sp.report) == "function", "luaprof.sysprof has start/stop/report")
check(type(misc) == "table" and misc.sysprof == sp, "misc.sysprof installed")
check(package.loaded.luaprof == lp, "package.loaded.luaprof")

-- -- Misuse: Tarantool's messages and errno ----------------------------------------------
local EINVAL, ENOENT = 22, 2
local MODE = "profiler misuse: profiler mode must be 'D', 'L' or 'C'"
local INTERVAL = "profiler misuse: profiler interval must be greater than 1"
expect_err("stop when not running", "profiler is not running", EINVAL, sp.stop)
expect_err("mode 'A'", MODE, EINVAL, sp.start, { mode = "A" })
expect_err("mode ''", MODE, EINVAL, sp.start, { mode = "" })
expect_err("mode 'CC'", MODE, EINVAL, sp.start, { mode = "CC" })
expect_err("mode 1", MODE, EINVAL, sp.start, { mode = 1 })
expect_err("interval -1", INTERVAL, EINVAL, sp.start, { interval = -1 })
expect_err("interval 0", INTERVAL, EINVAL, sp.start, { interval = 0 })
expect_err("interval 'x'", INTERVAL, EINVAL, sp.start, { interval = "x" })
expect_err("interval 2^54", "profiler misuse: profiler interval must be at most 2147483647 (ms)",
           EINVAL, sp.start, { interval = 2 ^ 54 })
expect_err("path 42", "profiler misuse: profiler path should be a string", EINVAL, sp.start,
           { mode = "C", path = 42 })
expect_err("clock 'x'", "profiler misuse: profiler clock must be 'cpu' or 'wall'", EINVAL,
           sp.start, { clock = "x" })
-- A misspelt option is refused (Tarantool ignores it: mode D, no file, or sysprof.bin),
-- after the known ones are checked, in Tarantool's order.
local UNKNOWN = "profiler misuse: unknown sysprof option '%s' (mode, interval, path, clock)"
expect_err("option mdoe", UNKNOWN:format("mdoe"), EINVAL, sp.start,
           { mdoe = "C", path = out .. "/typo.bin" })
expect_err("option pth", UNKNOWN:format("pth"), EINVAL, sp.start,
           { mode = "C", pth = out .. "/typo.bin" })
expect_err("option [1]", UNKNOWN:format("1"), EINVAL, sp.start, { "C" })
expect_err("bad mode and an unknown option", MODE, EINVAL, sp.start, { mode = "A", x = 1 })
local typo = io.open(out .. "/typo.bin")
check(typo == nil, "a start refused for an unknown option creates no file")
if typo then typo:close() end
expect_err("unwritable path", "/nonexistent/dir/x.bin: No such file or directory", ENOENT,
           sp.start, { mode = "C", path = "/nonexistent/dir/x.bin" })
expect_err("unwritable path in L mode", "/nonexistent/l.bin: No such file or directory", ENOENT,
           sp.start, { mode = "L", path = "/nonexistent/l.bin" })
-- An empty path is said to be one (it gave open's bare "No such file or directory").
local EMPTY = "the profile's path is empty (a file name is needed)"
expect_err("empty path", EMPTY, ENOENT, sp.start, { mode = "C", path = "" })
expect_err("memprof empty path", EMPTY, ENOENT, lp.memprof.start, "")
check(not pcall(sp.start, "D"), "a non-table argument raises")
check(not pcall(sp.start, nil), "an explicit nil raises (as lj_lib_checktab)")
-- D mode ignores the path, as Tarantool does.
check(sp.start({ mode = "D", path = "/nonexistent/d.bin" }) == true, "D mode ignores path")
expect_err("start twice", "profiler is running already", EINVAL, sp.start)
expect_err("start twice, other mode", "profiler is running already", EINVAL, sp.start,
           { mode = "C", path = out .. "/never.bin" })
local f = io.open(out .. "/never.bin")
check(f == nil, "a refused second start creates no file")
if f then f:close() end
check(sp.stop() == true, "stop after D start")
expect_err("stop twice", "profiler is not running", EINVAL, sp.stop)

-- Both profilers into one file: the second is refused (the two streams were interleaved
-- into one unreadable file), the first goes on and its file stays whole; /dev/null is shared.
local mp = lp.memprof
local same = out .. "/same.bin"
check(sp.start({ mode = "C", path = same }) == true, "CPU profile into same.bin")
expect_err("memory profile into the CPU profile's file", same ..
           ": a running profile writes to this file", 16, mp.start, same)
expect_err("the same file by another name", out .. "/./same.bin" ..
           ": a running profile writes to this file", 16, mp.start, out .. "/./same.bin")
burn(0.05, function() return fib(15) end)
check(sp.stop() == true, "stop the CPU profile into same.bin")
-- Kept for agent_api.sh, which checks that it is a whole CPU stream (same_cpu.bin).
do
  local fi, fo = io.open(same, "rb"), io.open(out .. "/same_cpu.bin", "wb")
  fo:write(fi:read("*a"))
  fi:close()
  fo:close()
end
check(mp.start(same) == true and mp.stop() == true, "same.bin is free once the CPU profile stopped")
check(sp.start({ mode = "C", path = "/dev/null" }) == true and mp.start("/dev/null") == true and
      mp.stop() == true and sp.stop() == true, "both profilers into /dev/null")

-- -- D mode: defaults, counters, report() while running ----------------------------------
check(sp.start() == true, "start() without arguments (mode D, 10 ms)")
burn(0.3, function() fib(20) end)
local mid = sp.report()
check(mid.samples > 0, "report() while running has samples: " .. mid.samples)
check(sum_states(mid) == mid.samples, "while running: states sum to samples")
for _, st in ipairs(STATES) do
  check(type(mid.vmstate[st]) == "number", "vmstate." .. st .. " is a number")
end
burn(0.2, function() fib(20) end)
check(sp.stop() == true, "stop D")
local r = sp.report()
check(r.samples >= mid.samples, "samples only grow")
check(r.samples >= 20 and r.samples <= 60,
      "0.5 s of CPU at 10 ms gives about 50 samples, got " .. r.samples)
check(sum_states(r) == r.samples, "after stop: states sum to samples")
check(r.vmstate.LFUNC + r.vmstate.TRACE + r.vmstate.INTERP + r.vmstate.GC > 0,
      "Lua work is LFUNC/TRACE/INTERP/GC")

-- Interval honoured: 1000 ms over 0.3 s of CPU gives no sample (Tarantool's check).
check(sp.start({ mode = "D", interval = 1000 }) == true, "start with 1 s interval")
burn(0.3, function() fib(20) end)
check(sp.stop() == true, "stop")
check(sp.report().samples == 0, "interval 1000 over 0.3 s: no samples, got " ..
      sp.report().samples)

-- States derived on a stock VM: C functions and builtins with the JIT off.
jit.off(); jit.flush()
check(sp.start({ mode = "D", interval = 1 }) == true, "start D 1 ms")
burn(0.4, function() sp.stats() end)                     -- a lua_CFunction (ffid 1)
burn(0.4, function() string.rep("abc", 20000) end)       -- a builtin
burn(0.4, function() fib(18) end)                        -- bytecode
check(sp.stop() == true, "stop")
r = sp.report()
check(r.vmstate.CFUNC > 0, "C function samples are CFUNC: " .. r.vmstate.CFUNC)
check(r.vmstate.FFUNC > 0, "builtin samples are FFUNC: " .. r.vmstate.FFUNC)
check(r.vmstate.LFUNC > 0, "bytecode samples are LFUNC: " .. r.vmstate.LFUNC)
check(r.vmstate.TRACE == 0, "no traces with the JIT off: " .. r.vmstate.TRACE)
check(sum_states(r) == r.samples, "states sum to samples")
jit.on()

-- C called from JIT-compiled code is CFUNC (the trace number stays in vmstate meanwhile).
local ffi = require "ffi"
ffi.cdef "void *memset(void *s, int c, size_t n);"
local block = ffi.new("char[?]", 1048576)
check(sp.start({ mode = "D", interval = 1 }) == true, "start D for FFI")
burn(0.5, function() ffi.C.memset(block, 1, 1048576) end)
check(sp.stop() == true, "stop")
r = sp.report()
check(r.vmstate.CFUNC > r.samples / 2, string.format(
      "FFI memset from a trace: CFUNC %d of %d samples (TRACE %d)", r.vmstate.CFUNC,
      r.samples, r.vmstate.TRACE))

-- -- L and C streams ------------------------------------------------------------------------
local function cpu_mix()
  burn(0.3, function() fib(20) end)
  burn(0.2, function() string.rep("abc", 20000) end)
  local co = coroutine.wrap(function() while true do fib(15); coroutine.yield() end end)
  burn(0.2, function() co() end)
end
for _, mode in ipairs({ "L", "C" }) do
  for _, clock in ipairs({ "cpu", "wall" }) do
    local path = string.format("%s/%s_%s.bin", out, mode, clock)
    check(sp.start({ mode = mode, interval = 2, path = path, clock = clock }) == true,
          "start " .. mode .. " " .. clock)
    cpu_mix()
    local rr = sp.report()
    check(rr.samples > 0 and sum_states(rr) == rr.samples, mode .. " counters while running")
    check(sp.stop() == true, "stop " .. mode .. " " .. clock)
    local s = sp.stats()
    check(s.bytes > 0, mode .. " stream bytes")
    check(s.dropped <= sp.report().samples / 10,
          mode .. " " .. clock .. ": dropped " .. s.dropped .. " of " .. sp.report().samples)
  end
end
-- The JIT off, C mode: Lua stacks with current lines (checked by agent_api.sh).
jit.off(); jit.flush()
check(sp.start({ mode = "C", interval = 1, clock = "wall", path = out .. "/C_joff.bin" }),
      "start C, JIT off")
burn(0.5, function() fib(20) end)
check(sp.stop() == true, "stop C, JIT off")
jit.on()

-- -- Functions created after start, collected, their memory reused by the next ones ----
-- Chunk i runs its loop on line i + 1, so a frame "chunkN:L" with L ~= N + 1 would be a
-- function named after another one that once lived at the same address (agent_api.sh).
check(sp.start({ mode = "C", interval = 1, clock = "wall", path = out .. "/reuse.bin" }),
      "start C for reuse")
for i = 1, 40 do
  local f = assert(loadstring(string.rep("\n", i) ..
    "local t = os.clock() while os.clock() - t < 0.02 do local x = 0 for k = 1, 50 do x = x + k end end",
    "=chunk" .. i))
  f()
  f = nil
  collectgarbage("collect")
end
check(sp.stop() == true, "stop C for reuse")

-- -- jit.profile (SIGPROF) and luaprof (its own timer and signal) at once --------------------
local prof = require "jit.profile"
local jp = 0
prof.start("fi1", function(th, n) jp = jp + n end)
check(sp.start({ mode = "C", interval = 5, path = out .. "/with_jitp.bin" }) == true,
      "start alongside jit.profile")
burn(0.5, function() fib(20) end)
local both = sp.report().samples
prof.stop()
check(sp.stop() == true, "stop alongside jit.profile")
check(jp > 10, "jit.profile still samples: " .. jp)
check(both > 10, "luaprof samples alongside jit.profile: " .. both)

-- -- A program that closes every descriptor it did not open, then opens a file of its own
-- (which gets the profile's number): the profile's bytes must not go into that file (they
-- did: its text with profile data between); the profile stops with EBADF. Last here: the
-- test's own descriptors are closed too.
do
  local ffi = require "ffi"
  ffi.cdef [[ int close(int fd); ]]
  local mine = out .. "/mine.txt"
  check(sp.start({ mode = "C", interval = 1, path = out .. "/closed_cpu.bin" }) == true,
        "start before the descriptors are closed")
  check(mp.start(out .. "/closed_mem.bin") == true, "memory profile too")
  burn(0.05, function() return fib(15) end)
  for fd = 3, 1023 do ffi.C.close(fd) end
  -- Files of the program's own on every low number, so that both profiles' descriptors
  -- are reused.
  local files = {}
  for i = 1, 12 do
    files[i] = assert(io.open(mine .. i, "w"))
    files[i]:write("hello\n")
    files[i]:flush()
  end
  local keep = {}
  burn(0.6, function() keep[#keep % 100 + 1] = { fib(12) } end) -- the writers' rounds
  for i = 1, 12 do
    files[i]:write("bye\n")
    files[i]:close()
  end
  local ok, msg, e = sp.stop()
  check(ok == nil and tostring(msg):match("Bad file descriptor$") and e == 9,
        string.format("CPU stop after the descriptor was closed: %s, %s, %s", tostring(ok),
                      tostring(msg), tostring(e)))
  ok, msg, e = mp.stop()
  check(ok == nil and tostring(msg):match("Bad file descriptor$") and e == 9,
        string.format("memory stop after the descriptor was closed: %s, %s, %s", tostring(ok),
                      tostring(msg), tostring(e)))
  for i = 1, 12 do
    local g = io.open(mine .. i, "rb")
    local text = g and g:read("*a")
    if g then g:close() end
    check(text == "hello\nbye\n", "the program's file " .. i .. " holds profile bytes: " ..
          (text and #text .. " bytes" or "unreadable"))
  end
  -- Cut streams, by design: not for the checks that every stream here parses.
  os.remove(out .. "/closed_cpu.bin")
  os.remove(out .. "/closed_mem.bin")
end

print(string.format("agent_api.lua: %d failures", fails))
os.exit(fails == 0 and 0 or 1)
