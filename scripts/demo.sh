#!/usr/bin/env bash
# The main job: sets everything up, then renders the bundled example profiles.
#
# examples/fib-cpu.bin and examples/leak-mem.bin were written by Tarantool's LuaJIT
# (misc.sysprof / misc.memprof) running examples/fib.lua and examples/leak.lua.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=build/demo
mkdir -p "$out"
build/luaprof report examples/fib-cpu.bin -o "$out/fib-cpu.svg"
build/luaprof report examples/fib-cpu.bin -f top -n 10
build/luaprof report examples/leak-mem.bin -o "$out/leak-mem.txt"
build/luaprof report examples/leak-mem.bin --leak-only -o "$out/leak-mem.svg"
cat "$out/leak-mem.txt"
echo
echo "Flame graph:    $out/fib-cpu.svg  (open it in a browser: hover, click to zoom, Ctrl-F to search)"
echo "Memory report:  $out/leak-mem.txt"
echo "Live heap:      $out/leak-mem.svg"
