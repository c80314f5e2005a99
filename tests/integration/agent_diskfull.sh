#!/usr/bin/env bash
# A full disk under the agent, on small tmpfs mounts (needs root and mount(8)):
#  - 64 KiB: the symbol table written at start does not fit: start returns
#    nil, "<path>: No space left on device", 28 and the program goes on;
#  - a few pages more than the symbol table: sampling fills the disk while running: the
#    profiler stops sampling, the program keeps running, stop() returns nil, msg, 28, the
#    profiler can be started again, and what reached the disk is a truncated stream that
#    `luaprof report` still reads (exit 3).
# Exit 0 pass, 1 fail, 2 skip.
set -u
cd "$(dirname "$0")/../.." || exit 1
name=agent_diskfull
t=$(mktemp -d "${TMPDIR:-/tmp}/$name.XXXXXX") || exit 1
mnt="$t/mnt"
mkdir -p "$mnt"
cleanup() { umount "$mnt" 2>/dev/null; rm -rf "$t"; }
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skip() { echo "SKIP $name: $*"; exit 2; }

command -v luajit >/dev/null 2>&1 || skip "luajit is not installed (apt-get install luajit)"
[ -f build/luaprof.so ] || { echo "build/luaprof.so is missing (run make)"; exit 1; }
[ "$(id -u)" = 0 ] || skip "mounting a small tmpfs needs root"
mount -t tmpfs -o size=64k tmpfs "$mnt" 2>"$t/err" || skip "mount -t tmpfs not permitted: $(cat "$t/err")"

cat >"$t/full.lua" <<'EOF'
package.cpath = "build/?.so;" .. package.cpath
local sp = require "luaprof".sysprof
local path, phase = arg[1], arg[2]
local function fib(n) if n < 2 then return n end return fib(n - 1) + fib(n - 2) end
local function burn(secs) local t = os.clock() while os.clock() - t < secs do fib(18) end end
if phase == "start" then
  local ok, msg, e = sp.start{mode = "C", path = path}
  print("start", tostring(ok), msg, e)
  burn(0.1)
  print("alive")
  return
end
-- Sampling at 1 kHz wall clock for up to 5 s: the writer thread hits ENOSPC.
assert(sp.start{mode = "C", interval = 1, clock = "wall", path = path})
local t = os.clock()
local before
repeat
  burn(0.1)
  local r = sp.report().samples
  if before == r then break end -- sampling stopped
  before = r
until os.clock() - t > 5
local frozen = sp.report().samples
burn(0.3)
print("frozen", tostring(frozen == sp.report().samples), frozen)
local ok, msg, e = sp.stop()
print("stop", tostring(ok), msg, e)
print("stop2", sp.stop())
print("restart", sp.start{mode = "D"})
burn(0.1)
print("restop", sp.stop())
print("alive")
EOF

# -- 64 KiB: the symbol table does not fit.
luajit "$t/full.lua" "$mnt/start.bin" start >"$t/out1" 2>&1 || fail "program failed: $(cat "$t/out1")"
grep -q "^start	nil	$mnt/start.bin: No space left on device	28$" "$t/out1" ||
	fail "start on a full disk: $(cat "$t/out1")"
grep -q '^alive$' "$t/out1" || fail "the program did not go on after a failed start"
umount "$mnt"

# -- Room for the symbol table and a little more: sampling fills the disk.
luajit "$t/full.lua" "$t/probe.bin" start >/dev/null 2>&1 # header size, on a real disk
# Only what is written before sampling counts: the extension comes at stop.
hdr=$(python3 -c 'import sys
d = open(sys.argv[1], "rb").read()
i = d.find(b"lpx\x01\x00\x00\x00")
print(i if i >= 0 else len(d))' "$t/probe.bin" 2>/dev/null || echo 0)
[ "$hdr" -gt 0 ] || fail "no stream written on a healthy disk"
size=$(( (hdr / 4096 + 9) * 4096 ))
mount -t tmpfs -o size=$size tmpfs "$mnt" || fail "mount size=$size"
luajit "$t/full.lua" "$mnt/run.bin" >"$t/out2" 2>&1 || fail "program failed: $(cat "$t/out2")"
grep -q '^frozen	true' "$t/out2" || fail "sampling did not stop at the full disk: $(cat "$t/out2")"
grep -q "^stop	nil	$mnt/run.bin: No space left on device	28$" "$t/out2" ||
	fail "stop after ENOSPC: $(cat "$t/out2")"
grep -q '^stop2	nil	profiler is not running	22$' "$t/out2" || fail "second stop: $(cat "$t/out2")"
grep -q '^restart	true$' "$t/out2" || fail "restart after ENOSPC: $(cat "$t/out2")"
grep -q '^restop	true$' "$t/out2" || fail "stop after restart: $(cat "$t/out2")"
grep -q '^alive$' "$t/out2" || fail "the program did not keep running"
build/luaprof report -q "$mnt/run.bin" -f collapsed >/dev/null 2>"$t/err"
rc=$?
[ $rc = 3 ] || fail "report of the cut stream exited $rc, want 3 (truncated): $(cat "$t/err")"

[ $fails = 0 ] || exit 1
echo "ok"
