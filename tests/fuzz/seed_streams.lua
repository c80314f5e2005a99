-- Workload that tests/fuzz/make_corpus.sh profiles (when build/luaprof and luajit are
-- there) so the seed corpus has real streams of the newest record kinds: sampled memory
-- mode's stack records each followed by their asample and afreed records, exact mode's
-- long chunk names (past 4 KiB; the agent writes up to 64 KiB), and CPU streams' C
-- symbols of libraries loaded and unloaded while sampling (C epochs), maps and meta.
--
--   luajit seed_streams.lua [SECONDS [LIB...]]   LIB: shared objects with work_V(n)
local secs, libs = tonumber(arg[1]) or 0.3, { select(2, ...) }
local keep = {}
local names = { "@" .. string.rep("long/dir/", 600) .. "x.lua", "=" .. string.rep("n", 5000),
		"code from a string\nsecond line" }
local src = "local t = {} for i = 1, 64 do t[i] = { i, tostring(i) } end return t"
local t_end = os.clock() + secs
local ffi = #libs > 0 and require("ffi")
for v = 0, #libs - 1 do ffi.cdef("unsigned work_" .. v .. "(unsigned n);") end
local k = 0
repeat
	k = k + 1
	local f = assert(loadstring(src, names[k % #names + 1]))
	keep[k % 50] = f() -- freed once replaced: afreed records in sampled mode
	keep[50 + k % 7] = string.rep("x", k % 300 + 1)
	if ffi then
		local v = k % #libs
		local l = ffi.load(libs[v + 1])
		l["work_" .. v](20000)
		l = nil
		collectgarbage()
	end
until os.clock() > t_end
