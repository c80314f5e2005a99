#!/usr/bin/env bash
# A real multi-threaded host whose Lua states change threads: wrk (Debian's package, on
# Debian's libluajit-5.1.so), against a local HTTP server (python3). wrk runs a script's
# init on its main thread and the requests on its worker threads (wrk/profile.lua).
#   - init: a CPU profile started in init samples the main thread, which runs no Lua code
#     while the workers run the requests (but its own call of the first request, to check
#     it): none of the workers' Lua frames, the samples counted in meta lua_elsewhere and
#     explained by report. They had the worker's Lua frames above _start
#     (vm_other_thread.sh has the details).
#   - initmem: a sampled memory profile started in init: the allocations of the worker
#     that runs the state, under its event loop (aeMain) and the request's Lua frames, no
#     stack cut (they were all cut at their first frame: Lua frames alone).
#   - response: CPU and sampled memory profiles started in the first response, on a
#     worker: the request's Lua frames under the worker's aeMain, in both.
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_build luaprof luaprof.so
have wrk || skip "wrk is not installed (scripts/setup.sh --test)"
have python3 || skip "python3 is not installed (scripts/setup.sh --test): no HTTP server"
src=$PWD/tests/integration/wrk/profile.lua
declare -A at
read_markers "$src"
export LUAPROF_CPATH="$PWD/build/?.so" OUT=$t

# A keep-alive HTTP server on a free port, which it writes to $t/port.
python3 - "$t/port" >"$t/server.log" 2>&1 <<'PY' &
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(s.server_address[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
s.serve_forever()
PY
server=$!
trap 'test_end; kill $server 2>/dev/null; wait $server 2>/dev/null; rm -rf "$t"' EXIT
for _ in $(seq 50); do [ -s "$t/port" ] && break; sleep 0.1; done
[ -s "$t/port" ] || { echo "FAIL: the HTTP server did not start: $(cat "$t/server.log")"; exit 1; }
url=http://127.0.0.1:$(cat "$t/port")/

run() { # run MODE
	MODE=$1 timeout 60 wrk -t2 -c2 -d2s -s "$src" "$url" >"$t/$1.out" 2>&1 ||
		{ fail "$1: wrk failed (status $?): $(tail -n 3 "$t/$1.out")"; return 1; }
	grep -q "requests in" "$t/$1.out" || { fail "$1: wrk made no requests: $(cat "$t/$1.out")"; return 1; }
}
complete() { # complete FILE
	build/luaprof report -q -f info "$1" 2>/dev/null | grep -qx "complete: yes" ||
		{ fail "$(basename "$1"): not a complete profile"; return 1; }
}

# -- init: the main thread's samples --------------------------------------------------------
if run init && complete "$t/init.bin"; then
	build/luaprof report -f collapsed -o "$t/init.folded" "$t/init.bin" 2>"$t/init.err"
	total=$(awk '{ n += $NF } END { print n + 0 }' "$t/init.folded")
	# Lua frames on the main thread come from its own call of the first request
	# (script_verify_request); any other stack with a Lua frame has another thread's.
	lua=$(awk -v s="@$src" '{ i = index($0, s) } i && !index(substr($0, 1, i), ";script_request;") { n++ }
		END { print n + 0 }' "$t/init.folded")
	n=$(build/luaprof report -q -f info "$t/init.bin" | awk -F': ' '$1 == "meta.lua_elsewhere" { print $2 + 0 }')
	[ "$total" -ge 20 ] || fail "init: $total samples, want at least 20"
	[ "$lua" = 0 ] || fail "init: $lua stacks with Lua frames of another thread:
$(grep "@$src" "$t/init.folded" | grep -v ';script_request;' | head -n 2)"
	[ "${n:-0}" -gt 0 ] || fail "init: no sample counted in meta lua_elsewhere"
	grep -q "found the Lua state running on another thread" "$t/init.err" ||
		fail "init: report does not say the state ran on another thread: $(cat "$t/init.err")"
	[ $fails = 0 ] && echo "ok init: $total samples of the main thread, ${n:-0} while a worker ran the state, none with its Lua frames"
fi

# shape FOLDED: "total with-make make-under-host": the weight of all stacks, of those on
# make's line, and of those with request's line and the host's call before it: a worker's
# event loop (aeMain), or the main thread's check of the first request.
shape() {
	awk -v m="@$src:${at[make]}" -v r="@$src:${at[request]}" '{
		v = $NF; tot += v
		i = index($0, m)
		if (i) { mk += v; p = substr($0, 1, i); if ((index(p, ";aeMain;") || index(p, ";script_verify_request;")) && index(p, r))
			under += v }
	} END { printf "%d %d %d\n", tot, mk, under }' "$1"
}
# memory LABEL FILE: the sampled allocations of make's line, all under the worker's frames.
memory() {
	local f1=$fails tot mk under cut
	build/luaprof report -q -f collapsed -o "$2.folded" "$2"
	read -r tot mk under < <(shape "$2.folded")
	cut=$(build/luaprof report -q -f info "$2" | awk -F': ' '$1 == "meta.truncated" { print $2 + 0 }')
	[ "$mk" -gt 0 ] || fail "$1, memory: no bytes on make's line"
	[ $((mk * 2)) -ge "$tot" ] || fail "$1, memory: $mk of $tot bytes on make's line, want half"
	[ "$under" = "$mk" ] || fail "$1, memory: $((mk - under)) of $mk bytes of make's line not under the host's aeMain or script_verify_request and request's line:
$(grep "@$src:${at[make]}" "$2.folded" | head -n 2)"
	[ "${cut:-0}" = 0 ] || fail "$1, memory: $cut stacks cut short"
	[ $fails = $f1 ] && echo "ok $1, memory: $((mk * 100 / (tot > 0 ? tot : 1)))% of the bytes on make's line, all under the worker's frames, none cut"
}

# -- initmem: the workers' allocations, the profile started on the main thread ----------------
run initmem && complete "$t/initmem.bin" && memory initmem "$t/initmem.bin"

# -- response: a worker's profiles ----------------------------------------------------------
f0=$fails
if run response && complete "$t/cpu.bin" && complete "$t/mem.bin"; then
	build/luaprof report -q -f collapsed -o "$t/cpu.folded" "$t/cpu.bin"
	read -r tot mk under < <(shape "$t/cpu.folded")
	[ "$tot" -ge 50 ] || fail "response, CPU: $tot samples, want at least 50"
	[ $((mk * 5)) -ge "$tot" ] || fail "response, CPU: $mk of $tot samples on make's line ${at[make]}, want a fifth"
	# All of them: a sample in a trace's exit stub had its Lua frames alone, cut short
	# (cpu_exit_stub.sh).
	[ "$under" = "$mk" ] || fail "response, CPU: $((mk - under)) of $mk samples of make's line not under the host's aeMain or script_verify_request and request's line:
$(grep "@$src:${at[make]}" "$t/cpu.folded" | grep -v aeMain | head -n 2)"
	[ $fails = $f0 ] && echo "ok response, CPU: $tot samples, $mk on make's line, all under the worker's aeMain and request"

	memory response "$t/mem.bin"
fi

[ $fails -eq 0 ] || exit 1
echo "PASS $name"
