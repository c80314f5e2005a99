#!/usr/bin/env bash
# The main job: sets everything up, profiles the bundled example program with Debian's
# luajit (C and Lua stacks merged, JIT traces with lines) and writes its flame graph,
# then renders the bundled memory profile.
#
# examples/leak-mem.bin was written by Tarantool's LuaJIT (misc.memprof) running
# examples/leak.lua; the in-process memory profiler for stock LuaJIT comes next.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=build/demo
mkdir -p "$out"
build/luaprof record -o "$out/app-cpu.svg" -- luajit examples/app.lua 3
build/luaprof report examples/leak-mem.bin -o "$out/leak-mem.txt"
build/luaprof report examples/leak-mem.bin --leak-only -o "$out/leak-mem.svg"
cat "$out/leak-mem.txt"
echo
echo "Flame graph:    $out/app-cpu.svg  (open it in a browser: hover, click to zoom, Ctrl-F to search)"
echo "Raw CPU stream: $out/app-cpu.bin  (luaprof report $out/app-cpu.bin -f top --lines)"
echo "Memory report:  $out/leak-mem.txt"
echo "Live heap:      $out/leak-mem.svg"
