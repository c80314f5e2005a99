#!/bin/sh
# Builds the seed corpus shared by every fuzz target into OUTDIR (created if needed).
#
#   tests/fuzz/make_corpus.sh OUTDIR
#
# Seeds: small valid memprof/sysprof streams from tests/fuzz/make_corpus.c (written with
# src/stream/writer.h), plus slimmed, cut and head-only copies of the real Tarantool streams in
# $LUAPROF_VECTORS (default: ../shared/vectors/tarantool beside the repository), if present.
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

set --
for f in "$vectors"/*.bin; do
	[ -f "$f" ] && set -- "$@" "$f"
done
[ $# -eq 0 ] && echo "make_corpus: no vectors in $vectors; hand-made seeds only" >&2
"$tool" "$out" "$@"
echo "make_corpus: $(ls "$out" | wc -l) seeds in $out" >&2
