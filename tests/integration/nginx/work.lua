-- A request handler of known shape, for nginx_lua.sh (content_by_lua_file): n strings
-- new to the VM (the request's id in each), then a loop the JIT compiles. Markers name
-- the lines.
local function build(n, id)
	local parts = {}
	for i = 1, n do
		parts[#parts + 1] = string.format("%05d:%s:%s", i, ("x"):rep(i % 17), id) --@fmt
	end
	return table.concat(parts, ",")
end

local function spin(n)
	local s = 0
	for i = 1, n do s = s + (i % 7) * (i % 13) end --@spin
	return s
end

local n = tonumber(ngx.var.arg_n) or 2000
local s = build(n, ngx.var.request_id) --@build
ngx.say(#s, " ", spin(n * 100)) --@call_spin
