-- A dnsjit script for dnsjit_lua.sh: reads a pcap of DNS queries PASSES times through
-- dnsjit's own modules (input.pcap, filter.layer, core.object.dns: C code called through
-- the FFI, and dnsjit's embedded Lua), counting the query names in a Lua table, under the
-- profiler MODE asks for, started and stopped through the API as a user would:
--   dnsjit profile.lua gen PCAP N            writes N queries to PCAP
--   dnsjit profile.lua run PCAP MODE OUT PASSES   MODE: none, cpu, exact or sampled
-- Prints the counts (the same whatever the mode) on standard output, and on standard error
-- the thread's blocked signals before the start and after the stop (dnsjit blocks every
-- signal on the thread that runs its script).
if arg[2] == "gen" then
	local function u16be(v) return string.char(math.floor(v / 256) % 256, v % 256) end
	local function u16le(v) return string.char(v % 256, math.floor(v / 256) % 256) end
	local function u32le(v) return u16le(v % 65536) .. u16le(math.floor(v / 65536)) end
	local f = assert(io.open(arg[3], "wb"))
	f:write(u32le(0xa1b2c3d4), u16le(2), u16le(4), u32le(0), u32le(0), u32le(65535), u32le(1))
	for i = 0, tonumber(arg[4]) - 1 do
		local name = string.char(4 + #tostring(i)) .. "host" .. i .. "\7example\3com\0"
		local dns = u16be(i % 65536) .. u16be(0x0100) .. u16be(1) .. u16be(0) .. u16be(0) ..
			u16be(0) .. name .. u16be(1) .. u16be(1)
		local udp = u16be(10000 + i % 1000) .. u16be(53) .. u16be(8 + #dns) .. u16be(0) .. dns
		local ip = "\69\0" .. u16be(20 + #udp) .. u16be(i % 65536) .. "\0\0\64\17\0\0" ..
			"\10\0\0\1\10\0\0\2" -- no checksum: dnsjit's layer does not check it
		local frame = "\0\17\34\51\68\85\102\119\136\153\170\187\8\0" .. ip .. udp
		f:write(u32le(1700000000 + math.floor(i / 1000)), u32le(i % 1000 * 1000),
			u32le(#frame), u32le(#frame), frame)
	end
	f:close()
	return
end

local pcapf, mode, out, passes = arg[3], arg[4], arg[5], tonumber(arg[6])
local function sigblk()
	local f = io.open("/proc/thread-self/status")
	local s = f and f:read("*a") or ""
	if f then f:close() end
	return s:match("SigBlk:%s*(%x+)") or "?"
end
io.stderr:write("sigblk before ", sigblk(), "\n")
local lp
if mode ~= "none" then
	package.cpath = os.getenv("LUAPROF_CPATH") .. ";" .. package.cpath
	lp = require("luaprof")
end
if mode == "cpu" then
	assert(lp.sysprof.start{ mode = "C", interval = 1, path = out })
elseif mode == "exact" then
	assert(lp.memprof.start(out))
elseif mode == "sampled" then
	assert(lp.memprof.start(out, { sample = "16K" }))
end

local object = require("dnsjit.core.objects")
local label = require("dnsjit.core.object.dns.label")
local counts = {}
local function count_name(dns, labels)
	local name = label.tooffstr(dns, labels, 16) --@name
	counts[name] = (counts[name] or 0) + 1
end
local function pass()
	local input = require("dnsjit.input.pcap").new()
	local layer = require("dnsjit.filter.layer").new()
	local dns = require("dnsjit.core.object.dns").new()
	input:open_offline(pcapf)
	layer:producer(input)
	local producer, ctx = layer:produce()
	local n = 0
	while true do
		local obj = producer(ctx)
		if obj == nil then break end
		if obj:type() == "payload" and obj:cast().len > 0 then
			dns.obj_prev = obj
			local rc, qs, labels = dns:parse() --@parse
			if rc == 0 and labels then
				count_name(dns, labels[1]) --@count
				n = n + 1
			end
		end
	end
	return n
end
local total = 0
for _ = 1, passes do total = total + pass() end --@pass
local distinct = 0
for _ in pairs(counts) do distinct = distinct + 1 end

if mode == "cpu" then
	assert(lp.sysprof.stop())
elseif mode ~= "none" then
	assert(lp.memprof.stop())
end
io.stderr:write("sigblk after ", sigblk(), "\n")
print("queries", total, "distinct", distinct)
