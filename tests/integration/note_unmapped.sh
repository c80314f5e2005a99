#!/usr/bin/env bash
# An object whose note segment (PT_NOTE) the program headers place where nothing of it is
# mapped: the dynamic loader maps only PT_LOAD segments and ignores the note, and so must
# the agents. Both read build-ids from the loaded notes (the objects table for the CPU
# profiler's check of replaced objects, and the mappings written to the stream): they
# read the note's address, and the program was killed by SIGSEGV when such a library was
# loaded while profiling. A library with its PT_NOTE moved to an unmapped address is
# loaded with ffi.load while the CPU profiler and then the memory profiler run.
# Checked: luajit exits 0 under `luaprof record` and `record --memory`, and the CPU
# profile names the library's function.
# Exit 0 pass, 1 fail, 2 skip (reason on the last line).
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
. tests/integration/lib/luajit.sh

need_x86_64
need_build luaprof.so luaprof
have luajit || skip "no luajit"
have python3 || skip "no python3"

cat >"$t/spin.c" <<'C'
unsigned note_spin(unsigned n);
unsigned note_spin(unsigned n)
{
	volatile unsigned x = 0;
	for (unsigned i = 0; i < n; i++)
		x += i * i;
	return x;
}
C
cc_test "$t/libok.so" "$t/spin.c" -O1 -fPIC -shared -Wl,--build-id || exit 1
# Every PT_NOTE of the copy at 112 MiB past the object's base, where it maps nothing.
python3 - "$t/libok.so" "$t/libnote.so" <<'PY' || { echo "FAIL: cannot patch the library"; exit 1; }
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read())
phoff = struct.unpack_from('<Q', d, 0x20)[0]
phentsize, phnum = struct.unpack_from('<HH', d, 0x36)
moved = 0
for i in range(phnum):
    o = phoff + i * phentsize
    if struct.unpack_from('<I', d, o)[0] == 4:
        struct.pack_into('<QQ', d, o + 16, 0x7000000, 0x7000000)
        moved += 1
open(sys.argv[2], 'wb').write(d)
sys.exit(0 if moved else 1)
PY
luajit -e "local ffi = require('ffi') ffi.cdef('unsigned note_spin(unsigned n);')
	ffi.load('$t/libnote.so').note_spin(10)" || skip "the loader does not take the patched library"

cat >"$t/note.lua" <<'LUA'
local ffi = require("ffi")
ffi.cdef("unsigned note_spin(unsigned n);")
local l = ffi.load(arg[1])
local t = os.clock()
while os.clock() - t < 1 do l.note_spin(100000) end
LUA

build/luaprof record -q --rate 1000 -f collapsed -o "$t/cpu.folded" \
	-- luajit "$t/note.lua" "$t/libnote.so" >"$t/cpu.out" 2>&1 ||
	fail "record exited $?: $(tail -3 "$t/cpu.out")"
grep -q "note_spin" "$t/cpu.folded" 2>/dev/null || fail "no note_spin frame in the CPU profile"
build/luaprof record -q --memory -f collapsed -o "$t/mem.folded" \
	-- luajit "$t/note.lua" "$t/libnote.so" >"$t/mem.out" 2>&1 ||
	fail "record --memory exited $?: $(tail -3 "$t/mem.out")"

[ $fails -eq 0 ] && echo "PASS $name" && exit 0
echo "FAIL $name ($fails)"
exit 1
