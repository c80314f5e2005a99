#!/usr/bin/env bash
# A full disk under the agent, on small tmpfs mounts (needs root and mount(8)):
#  - 64 KiB: the symbol table written at start does not fit: start returns
#    nil, "<path>: No space left on device", 28 and the program goes on;
#  - a few pages more than the symbol table: sampling fills the disk while running: the
#    profiler stops sampling, the program keeps running, stop() returns nil, msg, 28, the
#    profiler can be started again, and what reached the disk is a truncated stream that
#    `luaprof report` still reads (exit 3).
# And under `luaprof record --memory` (the agent stops the profile at exit, where no
# caller sees the result):
#  - a disk that fills while events are written: the agent says it could not write the
#    profile (No space left on device), record renders what was read and exits 3;
#  - a disk too full for the symbol table: no profile; record says so, claims no output,
#    exits 1 and keeps an earlier profile at the raw path as it was (it was replaced by
#    the cut stream).
# Exit 0 pass, 1 fail, 2 skip.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
mnt="$t/mnt"
mkdir -p "$mnt"
cleanup() { test_end; umount "$mnt" 2>/dev/null; rm -rf "$t"; }
trap cleanup EXIT

have luajit || skip "luajit is not installed (apt-get install luajit)"
need_build luaprof.so
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
umount "$mnt"

# -- luaprof record --memory: the disk fills while events are written.
cat >"$t/alloc.lua" <<'EOF'
local keep = {}
for i = 1, 300000 do keep[i % 1000 + 1] = { i, tostring(i) } end
print("done")
EOF
mount -t tmpfs -o size=$((300 * 1024)) tmpfs "$mnt" || fail "mount 300k"
build/luaprof record --memory -o "$t/mid.txt" --raw "$mnt/mid.bin" -- luajit -joff "$t/alloc.lua" \
	>"$t/out3" 2>"$t/err3"
rc=$?
[ $rc = 3 ] || fail "record on a disk that fills exited $rc, want 3: $(cat "$t/err3")"
grep -q '^done$' "$t/out3" || fail "the program did not run to its end: $(cat "$t/out3" "$t/err3")"
grep -q '^luaprof: cannot write the profile: No space left on device (it is cut short there)$' "$t/err3" ||
	fail "the agent did not say why the profile is cut: $(cat "$t/err3")"
grep -q '^ALLOCATIONS$' "$t/mid.txt" || fail "what was read is not rendered: $(cat "$t/err3")"
umount "$mnt"

# -- No room for the symbol table: an earlier profile at the raw path is kept.
build/luaprof record -q --memory -o "$t/old.txt" --raw "$t/old.bin" -- luajit -joff -e 'local t = {1}' ||
	fail "record on a healthy disk"
mount -t tmpfs -o size=1m tmpfs "$mnt" || fail "mount 1m"
cp "$t/old.bin" "$mnt/old.bin"
head -c $((1024 * 1024 - $(stat -c %s "$t/old.bin") - 40 * 1024)) /dev/zero >"$mnt/filler" 2>/dev/null
build/luaprof record --memory -o "$t/new.txt" --raw "$mnt/old.bin" -- luajit -joff "$t/alloc.lua" \
	>"$t/out4" 2>"$t/err4"
rc=$?
[ $rc = 1 ] || fail "record with no room for the symbol table exited $rc, want 1: $(cat "$t/err4")"
cmp -s "$t/old.bin" "$mnt/old.bin" || fail "the earlier profile was replaced by a stream with no profile"
grep -q 'wrote no profile: its stream ended before the profile began.*the earlier profile is kept' "$t/err4" ||
	fail "record does not say the run left no profile: $(cat "$t/err4")"
grep 'wrote ' "$t/err4" | grep -qv 'wrote no profile' && fail "record claims an output: $(cat "$t/err4")"
[ -e "$t/new.txt" ] && fail "a report was written from no profile"
[ "$(ls "$mnt" | tr '\n' ' ')" = "filler old.bin " ] || fail "files left on the disk: $(ls "$mnt")"

[ $fails = 0 ] || exit 1
echo "ok"
