#!/bin/sh
# Builds the seed corpus shared by every fuzz target into OUTDIR (created if needed).
#
#   tests/fuzz/make_corpus.sh OUTDIR
#
# Seeds: small valid memprof/sysprof streams from tests/fuzz/make_corpus.c (written with
# src/stream/writer.h), plus slimmed, cut and head-only copies of the real Tarantool streams in
# $LUAPROF_VECTORS (default: ../shared/vectors/tarantool beside the repository), if present,
# and of streams recorded here from tests/fuzz/seed_streams.lua when build/luaprof, its agent
# and luajit are there (sampled and exact memory, CPU with FFI libraries loaded and unloaded:
# the record kinds the agent writes now). LUAPROF_SEED_RECORD=0 skips the recording.
set -eu

if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR" >&2
	exit 2
fi
out=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
vectors=${LUAPROF_VECTORS:-$(dirname "$root")/shared/vectors/tarantool}
cc=${CC:-cc}

mkdir -p "$out"
tool=$(mktemp "${TMPDIR:-/tmp}/make_corpus.XXXXXX")
trap 'rm -f "$tool"' EXIT
# Only the stream library is needed; compile it in so this works before `make`.
"$cc" -std=c11 -O1 -Wall -Wextra -Werror -Wno-unused-parameter -D_GNU_SOURCE \
	-I"$root/include" -I"$root/src" -o "$tool" \
	"$root/tests/fuzz/make_corpus.c" "$root"/src/stream/*.c

rec=$(mktemp -d "${TMPDIR:-/tmp}/make_corpus.XXXXXX")
trap 'rm -f "$tool"; rm -rf "$rec"' EXIT
set --
for f in "$vectors"/*.bin; do
	[ -f "$f" ] && set -- "$@" "$f"
done
[ $# -eq 0 ] && echo "make_corpus: no vectors in $vectors" >&2

# Real streams of this build's agent (a failed recording is left out, not an error).
lp=$root/build/luaprof
if [ "${LUAPROF_SEED_RECORD:-1}" != 0 ] && [ -x "$lp" ] && [ -f "$root/build/luaprof.so" ] &&
	command -v luajit >/dev/null 2>&1; then
	# At most 30 s each where timeout(1) is there: a seed is not worth a hung build.
	limit=
	command -v timeout >/dev/null 2>&1 && limit="timeout 30"
	libs=
	for v in 0 1 2; do
		# shellcheck disable=SC2086 # LUA_CFLAGS: flags, one word each
		"$cc" -O1 -fPIC -shared ${LUA_CFLAGS:--I/usr/include/luajit-2.1} -DV=$v -o "$rec/libw$v.so" \
			"$root/tests/integration/dlclose_churn.c" 2>/dev/null &&
			libs="$libs $rec/libw$v.so"
	done
	lua=$root/tests/fuzz/seed_streams.lua
	$limit "$lp" record -q --memory --sample 2K --raw "$rec/rec-mem-sampled.bin" -o /dev/null \
		-- luajit "$lua" 0.2 >/dev/null 2>&1
	$limit "$lp" record -q --memory --raw "$rec/rec-mem-exact.bin" -o /dev/null \
		-- luajit "$lua" 0.05 >/dev/null 2>&1
	# shellcheck disable=SC2086 # the libraries' paths, one word each
	$limit "$lp" record -q --rate 1000 --clock wall --raw "$rec/rec-cpu.bin" -o /dev/null \
		-- luajit "$lua" 0.4 $libs >/dev/null 2>&1
	for f in "$rec"/rec-*.bin; do
		[ -s "$f" ] && set -- "$@" "$f"
	done
fi
[ $# -eq 0 ] && echo "make_corpus: hand-made seeds only" >&2
"$tool" "$out" "$@"
echo "make_corpus: $(ls "$out" | wc -l) seeds in $out" >&2
