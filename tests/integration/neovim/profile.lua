-- For neovim_lua.sh: run by nvim --headless (Debian's neovim, on libluajit-5.1.so). The
-- chunk profiles CPU (C mode) and memory (sampled) while vim.wait, a C function, runs
-- libuv's loop, which calls a timer callback through lua_pcall: Lua, C, Lua on one stack.
-- Environment: OUT (the profiles' directory), LUAPROF_CPATH (where luaprof.so is).
package.cpath = os.getenv("LUAPROF_CPATH") .. ";" .. package.cpath
local lp = require "luaprof"
local out = os.getenv("OUT")
assert(lp.sysprof.start{ mode = "C", interval = 1, path = out .. "/cpu.bin" })
assert(lp.memprof.start(out .. "/mem.bin", { sample = 16384 }))

local function cb_work(n)
	local t = {}
	for i = 1, n do t[#t + 1] = ("%d:%s"):format(i, ("y"):rep(i % 11)) end --@cb
	return #table.concat(t)
end

-- At least 60 callbacks and a quarter second of CPU time (a fixed count gave fewer samples
-- the faster the machine), at most 3000.
local done, finished, c0 = 0, false, os.clock()
local timer = vim.loop.new_timer()
timer:start(0, 5, function()
	cb_work(20000) --@call_cb
	done = done + 1
	if (done >= 60 and os.clock() - c0 >= 0.25) or done >= 3000 then
		finished = true
		timer:stop()
	end
end)
vim.wait(60000, function() return finished end, 5) --@wait
timer:close()
assert(lp.memprof.stop())
assert(lp.sysprof.stop())
io.stdout:write("done ", done, "\n")
