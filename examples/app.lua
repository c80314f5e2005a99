-- A small CPU-bound program for the demo: recursion, string building, a C builtin
-- calling back into Lua (table.sort with a comparator), coroutines and pcall.
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end

local function build(n)
  local parts = {}
  for i = 1, n do parts[#parts + 1] = string.format("%05d:%s", i, tostring(i * 3)) end
  return table.concat(parts, ",")
end

local function sort_records(n)
  local t = {}
  for i = 1, n do t[i] = { key = (i * 7919) % n, name = "r" .. i } end
  table.sort(t, function(a, b) return a.key < b.key end)
  return t[1].key
end

local function pingpong(n)
  local co = coroutine.wrap(function()
    local s = 0
    while true do s = s + fib(12); coroutine.yield(s) end
  end)
  local total = 0
  for _ = 1, n do total = total + co() end
  return total
end

local t0, sum = os.clock(), 0
while os.clock() - t0 < (tonumber(arg and arg[1]) or 2) do
  sum = sum + fib(22)
  sum = sum + #build(2000)
  sum = sum + sort_records(3000)
  local ok, v = pcall(pingpong, 50)
  if ok then sum = sum + v end
end
print(("done: %d"):format(sum % 1000))
