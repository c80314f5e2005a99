-- A minetest mod for minetest_lua.sh (a trusted mod: it loads luaprof through the insecure
-- environment, as a mod must to load a C module). minetest loads mods on its main thread and
-- runs their globalsteps on its server thread: the profile starts in the first globalstep,
-- where the Lua code runs (environment: LUAPROF_CPATH, MODE = none, cpu, exact or sampled,
-- OUT the profile's path, STEPS). Each step carves spheres out of stone through a
-- VoxelManip (minetest's C++ reads and writes the map, builds the Lua table of its nodes)
-- and builds strings; after STEPS steps the profile stops and the server shuts down.
-- With STEPS = 0 it never stops: the server runs until a signal ends it (OUT .. ".started"
-- says when the profile runs).
local ie = assert(minetest.request_insecure_environment(), "lpprof is not a trusted mod")
local getenv = ie.os.getenv
local mode, out, steps_max = getenv("MODE") or "none", getenv("OUT"), tonumber(getenv("STEPS"))
local lp
if mode ~= "none" then
	ie.package.cpath = getenv("LUAPROF_CPATH") .. ";" .. ie.package.cpath
	lp = ie.require("luaprof")
end
local function start()
	if mode == "cpu" then
		assert(lp.sysprof.start{ mode = "C", interval = 1, path = out })
	elseif mode == "exact" then
		assert(lp.memprof.start(out))
	elseif mode == "sampled" then
		assert(lp.memprof.start(out, { sample = "16K" }))
	end
	if mode ~= "none" then
		local f = ie.io.open(out .. ".started", "w")
		f:close()
	end
end
local function stop()
	if mode == "cpu" then
		assert(lp.sysprof.stop())
	elseif mode ~= "none" then
		assert(lp.memprof.stop())
	end
end

local c_stone = minetest.get_content_id("basenodes:stone")
local c_air = minetest.CONTENT_AIR
local function carve(p0, r)
	local vm = minetest.get_voxel_manip()
	local e0, e1 = vm:read_from_map(vector.subtract(p0, r), vector.add(p0, r))
	local area = VoxelArea:new{ MinEdge = e0, MaxEdge = e1 }
	local data = vm:get_data() --@get_data
	local n = 0
	for z = p0.z - r, p0.z + r do
		for y = p0.y - r, p0.y + r do
			for x = p0.x - r, p0.x + r do
				local d = (x - p0.x) ^ 2 + (y - p0.y) ^ 2 + (z - p0.z) ^ 2
				data[area:index(x, y, z)] = d < r * r and c_air or c_stone
				n = n + 1
			end
		end
	end
	vm:set_data(data)
	vm:write_to_map() --@write
	return n
end
local names = {}
local function strings(k)
	local t = {}
	for i = 1, 2000 do t[#t + 1] = ("node_%d_%d"):format(k, i) end --@strings
	names[k % 50] = table.concat(t, ",")
end

local steps, total = 0, 0
minetest.register_globalstep(function(dtime)
	if steps == 0 then start() end
	steps = steps + 1
	for k = 1, 4 do
		total = total + carve({ x = steps % 8 * 20, y = 0, z = k * 20 }, 8) --@carve
		strings(steps * 4 + k)
	end
	if steps == steps_max then
		stop()
		print(("lpprof: %d steps, %d nodes"):format(steps, total))
		minetest.request_shutdown("done", false, 0)
	end
end)
