-- Starts and stops luaprof's profilers inside the nginx worker, for nginx_lua.sh:
-- /cpu/start?path=P, /cpu/stop, /mem/start?path=P[&sample=BYTES], /mem/stop. Answers
-- "true" or the profiler's message.
local lp = require "luaprof"
local what, verb = ngx.var[1], ngx.var[2]
local ok, err
if what == "cpu" and verb == "start" then
	ok, err = lp.sysprof.start{ mode = "C", interval = 1, path = ngx.var.arg_path }
elseif what == "cpu" then
	ok, err = lp.sysprof.stop()
elseif verb == "start" then
	local sample = tonumber(ngx.var.arg_sample)
	ok, err = lp.memprof.start(ngx.var.arg_path, sample and { sample = sample } or nil)
else
	ok, err = lp.memprof.stop()
end
ngx.say(ok and "true" or tostring(err))
