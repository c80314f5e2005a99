-- Workload for jit_compiler.sh: the JIT compiler runs most of the time. Many distinct
-- chunks ("=gen0" .. "=gen9", one line each), each a hot loop with a long body, are called
-- from one marked line; each call compiles a trace of its loop (recording, optimizing and
-- assembling forty statements), then runs it briefly.
--
-- Usage: luajit jit_compiler.lua [N]   (N chunks, default 8000)
local n = tonumber(arg[1]) or 8000
local body = {}
for j = 1, 40 do
  body[#body + 1] = ("s = s + (i * %d) %% 7 - t[%d]"):format(j, j % 5 + 1)
end
body = table.concat(body, " ")
local fs = {}
for k = 1, n do
  local src = ("local t = {1,2,3,4,5} local s = %d for i = 1, 100 do %s end return s")
  fs[k] = assert(load(src:format(k, body), "=gen" .. (k % 10)))
end
local function compile_all()
  local t = 0
  for k = 1, n do t = t + fs[k]() end --@call
  return t
end
print(compile_all())
