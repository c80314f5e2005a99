-- In-process A/B of memory profiler builds: several builds of luaprof.so loaded side by side
-- (each from its own directory, so each has its own state), the same work timed unprofiled
-- and under each build and mode, interleaved, in one process. Run by bench/memprof_ab.sh.
--
--   luajit bench/memprof_ab.lua JIT ROUNDS UNITS WORKLOAD RUN...
--
-- JIT: on or off. UNITS: the workload's size (benchlib.lua; calib prints one for ~0.15 s).
-- WORKLOAD: bintrees, tables, life or binary-trees (the whole program at depth 16, UNITS times).
-- RUN: DIR:MODE, where DIR holds a luaprof.so and MODE is exact (to /dev/shm), null (exact
-- to /dev/null), sampled (512 KiB) or sampled=BYTES; or "control", unprofiled like the base
-- run (its ratio is the method's own error). Every round runs the base and each RUN once, in
-- an order that rotates from round to round; a ratio is a run's time over the base run's of
-- the same round. Prints a Markdown table: wall and process CPU time, median (min..max).
local jitmode, rounds, units, workload = arg[1], tonumber(arg[2]), tonumber(arg[3]), arg[4]
local runs = { select(5, unpack(arg)) }
local B = dofile((arg[0]:match("^(.*)/") or ".") .. "/benchlib.lua")
local now, MONO, PCPU = B.setup(jitmode), B.MONO, B.PCPU
local works = {
	bintrees = B.bintrees,
	tables = B.tables,
	life = B.life,
	["binary-trees"] = function(u)
		local s = 0
		for _ = 1, u do s = s + B.binary_trees(16) end
		return s
	end,
}
local work = assert(works[workload], "unknown workload " .. tostring(workload))
if rounds == 0 then
	B.calibrate(work, tonumber(units))
	return
end

local modules, plan = {}, { { name = "base" } }
for _, r in ipairs(runs) do
	if r == "control" then
		plan[#plan + 1] = { name = r }
	else
		local dir, mode = r:match("^(.*):([%w=]+)$")
		assert(dir, "a run is DIR:MODE or control: " .. r)
		if not modules[dir] then
			local open = assert(package.loadlib(dir .. "/luaprof.so", "luaopen_luaprof"))
			modules[dir] = open().memprof
		end
		local p = { name = r, mp = modules[dir], path = "/dev/shm/luaprof-ab-" .. #plan }
		if mode == "null" then
			p.path = "/dev/null"
		elseif mode == "sampled" then
			p.opt = { sample = 512 * 1024 }
		elseif mode:match("^sampled=%d+$") then
			p.opt = { sample = tonumber(mode:match("%d+")) }
		else
			assert(mode == "exact", "unknown mode " .. mode)
		end
		plan[#plan + 1] = p
	end
end

local function once(p)
	collectgarbage()
	collectgarbage()
	if p.mp then assert(p.mp.start(p.path, p.opt)) end
	local w0, c0 = now(MONO), now(PCPU)
	work(units)
	local w1, c1 = now(MONO), now(PCPU)
	if p.mp then
		assert(p.mp.stop())
		if p.path ~= "/dev/null" then os.remove(p.path) end
	end
	return w1 - w0, c1 - c0
end

for _ = 1, 3 do once(plan[1]) end
local ratios = {}
for i = 1, #plan do ratios[i] = { wall = {}, cpu = {} } end
for r = 1, rounds do
	local t = {}
	for k = 1, #plan do
		local i = (k + r) % #plan + 1
		t[i] = { once(plan[i]) }
	end
	for i = 1, #plan do
		table.insert(ratios[i].wall, t[i][1] / t[1][1])
		table.insert(ratios[i].cpu, t[i][2] / t[1][2])
	end
end

local function median(a)
	table.sort(a)
	local n = #a
	local m = n % 2 == 1 and a[(n + 1) / 2] or (a[n / 2] + a[n / 2 + 1]) / 2
	return m, a[1], a[n]
end
print(string.format("%s, JIT %s, %d rounds of %s units:", workload, jitmode, rounds, units))
print("")
print("| run | wall: median (min..max) | CPU: median (min..max) |")
print("|---|---|---|")
for i = 2, #plan do
	local w, wl, wh = median(ratios[i].wall)
	local c, cl, ch = median(ratios[i].cpu)
	print(string.format("| %s | %.3f (%.3f..%.3f) | %.3f (%.3f..%.3f) |", plan[i].name, w, wl, wh,
			    c, cl, ch))
end
