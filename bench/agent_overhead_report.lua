-- Markdown tables for bench/agent_overhead.sh from its raw runs.
--
--   luajit bench/agent_overhead_report.lua runs.tsv fixed.txt
--
-- runs.tsv: a header line of column names, then one run per line; design "inproc" (the modes
-- interleaved in one process) or "procs" (one process per run). fixed.txt: "workload jit
-- bytes" per line, the size of a stream started and stopped at once. Ratios are paired: a
-- profiled run divided by the unprofiled run of the same design, round, workload and JIT.
local tsv, fixedf = arg[1], arg[2]

local rows, cols = {}, nil
for line in io.lines(tsv) do
	local f = {}
	for x in line:gmatch("%S+") do f[#f + 1] = x end
	if not cols then
		cols = f
	else
		local r = {}
		for i, c in ipairs(cols) do r[c] = tonumber(f[i]) or f[i] end
		rows[#rows + 1] = r
	end
end
local empty, order = {}, {}
for line in io.lines(fixedf) do
	local w, j, e = line:match("^(%S+) (%S+) (%S*)")
	empty[w .. " " .. j] = tonumber(e)
	order[#order + 1] = { w, j }
end

-- runs[design][key][mode][round] = row
local runs = { inproc = {}, procs = {} }
for _, r in ipairs(rows) do
	local d = runs[r.design]
	local k = r.workload .. " " .. r.jit
	d[k] = d[k] or {}
	d[k][r.mode] = d[k][r.mode] or {}
	d[k][r.mode][r.round] = r
end
local run = next(runs.inproc) and runs.inproc or runs.procs

local function sorted(t)
	local s = {}
	for _, v in ipairs(t) do if v == v then s[#s + 1] = v end end
	table.sort(s)
	return s
end
local function median(t)
	local s = sorted(t)
	local n = #s
	if n == 0 then return nil end
	return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end
local function spread(t, fmt)
	local s = sorted(t)
	if #s == 0 then return "–" end
	return string.format(fmt .. " (" .. fmt .. ".." .. fmt .. ")", median(s), s[1], s[#s])
end
local function med(t, fmt)
	local m = median(t)
	return m and string.format(fmt, m) or "–"
end

-- Values of f(row) over a mode's runs; pairs(f) over rounds where both runs exist.
local function values(k, mode, f, d)
	local run = d or run
	local out = {}
	for _, r in pairs(run[k] and run[k][mode] or {}) do out[#out + 1] = f(r) end
	return out
end
local function ratios(k, mode, field, into, d)
	local run = d or run
	local out = {}
	local base = run[k] and run[k].base or {}
	for round, r in pairs(run[k] and run[k][mode] or {}) do
		local b = base[round]
		if b and b[field] > 0 then
			out[#out + 1] = r[field] / b[field]
			if into then into[#into + 1] = r[field] / b[field] end
		end
	end
	return out
end

local names = {
	fib = "Lua: recursive fib(20)",
	nbody = "Lua: nbody (float loops)",
	strings = "Lua: string building",
	tables = "Lua: table churn",
	coro = "Lua: coroutine ping-pong",
	ffi = "C-heavy: FFI C fib(18) + dot products",
	mixed = "mixed: FFI C fib + Lua fib + strings/tables",
}

-- Tables 1 and 2: ratios with spread, per design.
local function ratio_table(d, title)
	if not next(d) then return end
	print(title)
	print()
	print("| workload | JIT | unprofiled s | wall, 100 Hz | wall, 1 kHz | CPU, 100 Hz | CPU, 1 kHz |")
	print("|---|---|---|---|---|---|---|")
	local all = {}
	for _, wj in ipairs(order) do
		local k = wj[1] .. " " .. wj[2]
		local a = all[wj[2]] or { w100 = {}, w1k = {}, c100 = {}, c1k = {} }
		all[wj[2]] = a
		print(string.format("| %s | %s | %s | %s | %s | %s | %s |", names[wj[1]] or wj[1], wj[2],
			spread(values(k, "base", function(r) return r.wall end, d), "%.2f"),
			spread(ratios(k, "c100", "wall", a.w100, d), "%.3f"),
			spread(ratios(k, "c1k", "wall", a.w1k, d), "%.3f"),
			spread(ratios(k, "c100", "pcpu", a.c100, d), "%.3f"),
			spread(ratios(k, "c1k", "pcpu", a.c1k, d), "%.3f")))
	end
	for _, j in ipairs({ "on", "off" }) do
		local a = all[j]
		if a then
			print(string.format("| **all workloads** (every pair) | %s | | %s | %s | %s | %s |", j,
				spread(a.w100, "%.3f"), spread(a.w1k, "%.3f"), spread(a.c100, "%.3f"),
				spread(a.c1k, "%.3f")))
		end
	end
	print()
end
print("Ratios are profiled / unprofiled, paired by round, as median (min..max) over the rounds:")
print("wall time of the workload, and CPU time of the process over the same span (the agent's")
print("writer thread included; time the hypervisor stole is not CPU time). 100 Hz = C mode on the")
print("CPU clock, 1 kHz = C mode on the wall clock.")
print()
ratio_table(runs.inproc, "**Table 1. One process per workload, the modes interleaved in it.**")
ratio_table(runs.procs, "**Table 2. A fresh process per run.** With the JIT on, every process compiles its own\n" ..
	"traces, and they differ from one process to the next (LuaJIT randomizes its trace-abort\n" ..
	"penalties): this table mixes that with the profiler's cost.")

-- Table 3: the cost accounted for, independent of the machine's noise.
print("**Table 3. Where the time goes** (medians). From the one-process runs: time inside the")
print("signal handler (the agent's own clock) as a share of the workload's wall time, and per")
print("sample. From the fresh processes: the whole-process wall-time ratio (exec to exit: loading")
print("the agent, start() and stop() included), and the first start() and the stop() in ms.")
print()
print("| workload | JIT | handler share 100 Hz | handler share 1 kHz | handler µs/sample 100 Hz | handler µs/sample 1 kHz | process ratio 100 Hz | process ratio 1 kHz | start ms | stop ms |")
print("|---|---|---|---|---|---|---|---|---|---|")
for _, wj in ipairs(order) do
	local k = wj[1] .. " " .. wj[2]
	local function hshare(m) return med(values(k, m, function(r) return 100 * r.handler / r.wall end), "%.2f%%") end
	local function hus(m) return med(values(k, m, function(r) return r.samples > 0 and 1e6 * r.handler / r.samples or 0 / 0 end), "%.0f") end
	local st, sp = {}, {}
	for _, m in ipairs({ "c100", "c1k" }) do
		for _, r in pairs(runs.procs[k] and runs.procs[k][m] or {}) do
			st[#st + 1] = 1000 * r.start
			sp[#sp + 1] = 1000 * r.stop
		end
	end
	print(string.format("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |", wj[1], wj[2],
		hshare("c100"), hshare("c1k"), hus("c100"), hus("c1k"),
		med(ratios(k, "c100", "procwall", nil, runs.procs), "%.3f"),
		med(ratios(k, "c1k", "procwall", nil, runs.procs), "%.3f"),
		med(st, "%.1f"), med(sp, "%.1f")))
end
print()

-- Table 3: the stream.
print("**Table 4. Stream** (one-process runs, medians): samples per run; bytes per sample as stream file size /")
print("samples; the fixed part, a C-mode stream started and stopped at once in a fresh process of")
print("the same script (header, symbol table of every loaded object and live Lua function,")
print("extension); and the")
print("cost per sample without it, (size - fixed) / samples: the samples plus the trace and new")
print("symbols they bring.")
print()
print("| workload | JIT | samples 100 Hz | samples 1 kHz | B/sample 100 Hz | B/sample 1 kHz | fixed KB | per sample B, 100 Hz | per sample B, 1 kHz | dropped (all runs) | overruns 1 kHz (all runs) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for _, wj in ipairs(order) do
	local k = wj[1] .. " " .. wj[2]
	local e = empty[k] or 0
	local function bps(m) return med(values(k, m, function(r) return r.samples > 0 and r.bytes / r.samples or 0 / 0 end), "%.0f") end
	local function marg(m) return med(values(k, m, function(r) return r.samples > 0 and (r.bytes - e) / r.samples or 0 / 0 end), "%.0f") end
	local dropped, over = 0, 0
	for _, m in ipairs({ "c100", "c1k" }) do
		for _, r in pairs(run[k] and run[k][m] or {}) do dropped = dropped + r.dropped end
	end
	for _, r in pairs(run[k] and run[k].c1k or {}) do over = over + r.overruns end
	print(string.format("| %s | %s | %s | %s | %s | %s | %.1f | %s | %s | %d | %d |", wj[1], wj[2],
		med(values(k, "c100", function(r) return r.samples end), "%.0f"),
		med(values(k, "c1k", function(r) return r.samples end), "%.0f"),
		bps("c100"), bps("c1k"), e / 1000, marg("c100"), marg("c1k"), dropped, over))
end
