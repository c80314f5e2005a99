-- Loops compiled to traces in coroutines (one a side trace), calling FFI and string.format
-- from their code and allocating, a flush every 10 rounds: the collector's steps run from
-- the traces' code, and allocate there (state GC, the trace's frame deeper in the host
-- stack). arg[1]: seconds (default 1).
local ffi = require("ffi")
ffi.cdef[[ size_t strlen(const char *s); double sin(double); ]]
local C = ffi.C
local fmt = string.format
local sink
local function worker(tag)
  return coroutine.wrap(function(n)
    while true do
      local acc = 0
      for i = 1, n do
        acc = acc + tonumber(C.strlen("hello world")) + C.sin(i) --@loop
        if i % 4 == 0 then sink = fmt("%s%d", tag, i) end --@side
      end
      n = coroutine.yield(acc)
    end
  end)
end
local ws = {}
for k = 1, 8 do ws[k] = worker("w" .. k) end
local t0 = os.clock()
local r = 0
while os.clock() - t0 < (tonumber(arg[1]) or 1) do
  r = r + 1
  for k = 1, 8 do sink = ws[k](2000) end
  if r % 10 == 0 then jit.flush() end
end
