-- For unsupported_vms.sh, run by a host whose VM the agent does not profile: tarantool
-- 2.6 (its own LuaJIT fork, without GC64) or PUC Lua 5.1. The agent loads, and both
-- profilers refuse the VM with a message that names the reason (arg[3] is a part of it);
-- a file given as the path is left as it was, and none is created. Prints one line per
-- check: "ok ..." or "FAIL ...".
local dir, reason = arg[1], arg[3]
package.cpath = arg[2] .. ";" .. package.cpath
local ok, lp = pcall(require, "luaprof")
if not ok then
	print("FAIL require: " .. tostring(lp))
	os.exit(1)
end
local function check(what, cond, detail)
	print((cond and "ok " or "FAIL ") .. what .. (cond and "" or ": " .. tostring(detail)))
end
local function refused(what, r, msg, errno)
	check(what .. " refused", r == nil and type(msg) == "string" and
		msg:find(reason, 1, true) and errno == 22,
		string.format("%s, %s, %s", tostring(r), tostring(msg), tostring(errno)))
end
local old, new = dir .. "/old.bin", dir .. "/new.bin"
refused("sysprof.start (existing file)", lp.sysprof.start{ mode = "C", path = old })
refused("memprof.start (existing file)", lp.memprof.start(old))
refused("memprof.start sampled (new file)", lp.memprof.start(new, { sample = true }))
refused("sysprof.start (new file)", lp.sysprof.start{ mode = "L", path = new })
-- Installed as misc.memprof / misc.sysprof when there is none (Tarantool 2.6, PUC Lua).
check("misc.memprof installed", misc and misc.memprof == lp.memprof, misc)
if misc and misc.memprof then refused("misc.memprof.start", misc.memprof.start(new)) end
local f = io.open(old, "rb")
local body = f and f:read("*a")
if f then f:close() end
check("the existing file is as it was", body == "precious\n", body)
check("no file was created", io.open(new, "rb") == nil, new)
local r, msg = lp.sysprof.stop()
check("sysprof.stop: not running", r == nil and msg == "profiler is not running", msg)
r, msg = lp.memprof.stop()
check("memprof.stop: not running", r == nil and msg == "profiler is not running", msg)
os.exit(0)
