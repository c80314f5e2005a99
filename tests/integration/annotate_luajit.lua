-- Workload of annotate_luajit.sh: CPU time in spin's loop under one call line, and with
-- "mem" every string made at one line. The script checks the lines by their markers.
local function spin(n)
  local x = 0
  for i = 1, n do --@spin_for
    x = x + (i % 7) * 3 --@spin_body
  end
  return x
end

local function strings(n)
  local t = {}
  for i = 1, n do
    t[i] = string.rep("x", 1000) .. i --@strings
  end
  return t
end

if arg[1] == "cpu" then
  local t0 = os.clock()
  while os.clock() - t0 < 0.8 do spin(1e5) end --@cpu_call
else
  strings(3000) --@mem_call
end
