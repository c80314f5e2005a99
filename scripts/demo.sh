#!/usr/bin/env bash
# The main job: sets everything up, profiles the bundled example program with Debian's
# luajit (C and Lua stacks merged, JIT traces with lines) and writes its flame graph, then
# its allocations (sampled memory profile, flame graph of bytes allocated by stack), then
# runs examples/leak.lua - written for Tarantool's misc.memprof - unchanged on the stock
# VM and prints the memprof leak report.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
out=build/demo
mkdir -p "$out"
build/luaprof record -o "$out/app-cpu.svg" -- luajit examples/app.lua 3
build/luaprof report -q "$out/app-cpu.bin" -f annotate -o "$out/app-cpu-source.txt"
build/luaprof record -q --memory --sample 64K -o "$out/app-mem.svg" -- luajit examples/app.lua 1
# Tarantool code as is: require "luaprof" provides misc.memprof on the stock VM.
root=$PWD
(cd "$out" && luajit -e "package.cpath = '$root/build/?.so;' .. package.cpath; require 'luaprof'" \
	"$root/examples/leak.lua")
build/luaprof report "$out/mp_leak.bin" -o "$out/leak-mem.txt"
build/luaprof report "$out/mp_leak.bin" --leak-only -o "$out/leak-mem.svg"
cat "$out/leak-mem.txt"
echo
echo "Flame graph:    $out/app-cpu.svg  (open it in a browser: hover, click to zoom, Ctrl-F to search)"
echo "Raw CPU stream: $out/app-cpu.bin  (luaprof report $out/app-cpu.bin -f top --lines)"
echo "Source view:    $out/app-cpu-source.txt  (examples/app.lua, each line's share of the CPU time)"
echo "Allocations:    $out/app-mem.svg  (sampled: bytes allocated by Lua + C stack)"
echo "Memory report:  $out/leak-mem.txt  (examples/leak.lua, every allocation: the leaking line)"
echo "Live heap:      $out/leak-mem.svg"
