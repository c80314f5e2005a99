-- Two functions whose loops compile to trace 1 in turn, a flush between them: trace
-- numbers and machine code addresses are reused, as in a program whose traces outgrow the
-- machine code area. Each loop calls C code from its trace (string.format's helpers) and
-- allocates from it (a table an iteration). arg[1]: rounds (default 40).
local fmt = string.format
local sink
local function f(n)
  local s
  for i = 1, n do s = fmt("%d:%d", i, i); sink = { i } end --@f
  return s
end
local function g(n)
  local s
  for i = 1, n do s = fmt("%x", i) .. "y"; sink = { i, i } end --@g
  return s
end
for _ = 1, tonumber(arg[1]) or 40 do
  f(2e4); jit.flush() --@call_f
  g(2e4); jit.flush() --@call_g
end
