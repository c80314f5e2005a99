#!/bin/sh
# Bounded fuzzing run: builds every tests/fuzz/fuzz_*.c target (`make fuzz`), seeds the
# stream readers' with one shared corpus (tests/fuzz/make_corpus.sh) and the ELF reader's
# (fuzz_elfsyms) with small shared objects built here, and runs each for a fixed time.
#
#   tests/integration/fuzz_bounded.sh
#
# Exit status: 0 no crash, 1 a target crashed (or failed to build; the reproducer path is
# printed), 2 skipped (clang with libFuzzer is unavailable and cannot be installed).
#
# Environment:
#   FUZZ_BUDGET   seconds shared by all targets (default 80; each gets 10..45 s of it)
#   FUZZ_SECONDS  seconds per target, overriding the budget
#   FUZZ_KEEP=1   keep the temporary corpus directory
#   CLANG         compiler (default clang)
# Reproducers are copied to build/fuzz-artifacts/; rerun one with build/fuzz/TARGET FILE.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
root=$PWD
CLANG=${CLANG:-clang}
export CLANG

# -- Toolchain: clang with the libFuzzer runtime ---------------------------------------
probe_libfuzzer() {
	dir=$t/probe
	mkdir "$dir" || return 1
	cat >"$dir/p.c" <<'PROBE'
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }
PROBE
	"$CLANG" -fsanitize=fuzzer,address,undefined -o "$dir/p" "$dir/p.c" >/dev/null 2>&1
	rc=$?
	rm -rf "$dir"
	return $rc
}

if ! have "$CLANG" || ! probe_libfuzzer; then
	if [ "$(id -u)" = 0 ] && have apt-get; then
		echo "fuzz_bounded: installing clang and libclang-rt-14-dev" >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y clang libclang-rt-14-dev >&2 ||
			{ apt-get update >&2 && DEBIAN_FRONTEND=noninteractive \
				apt-get install -y clang libclang-rt-14-dev >&2; }
	fi
	if ! have "$CLANG" || ! probe_libfuzzer; then
		skip "$CLANG with -fsanitize=fuzzer is not available" >&2
	fi
fi

# -- Build -------------------------------------------------------------------------------
status=0
if ! make -k fuzz; then
	echo "FAIL fuzz_bounded: some fuzz targets did not build (running the others)" >&2
	status=1
fi

targets=
for bin in build/fuzz/fuzz_*; do
	[ -x "$bin" ] && [ -f "$bin" ] || continue
	target=${bin##*/}
	[ -f "tests/fuzz/$target.c" ] || continue  # stale binary of a removed target
	targets="$targets $bin"
done
if [ -z "$targets" ]; then
	echo "FAIL fuzz_bounded: no fuzz targets built" >&2
	exit 1
fi
ntargets=$(echo $targets | wc -w)

# -- Corpus and time budget ---------------------------------------------------------
work=$t
cleanup() {
	test_end
	if [ "${FUZZ_KEEP:-0}" = 1 ]; then
		echo "fuzz_bounded: kept $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
if ! tests/fuzz/make_corpus.sh "$work/seed"; then
	echo "FAIL fuzz_bounded: could not build the seed corpus" >&2
	exit 1
fi
# fuzz_elfsyms reads ELF files, not streams: its seeds are a small shared object with
# symbols, the same stripped (.dynsym and the unwind table only) and one linked without
# separate code segments.
mkdir -p "$work/seed-elf"
cat >"$work/elf.c" <<'ELF'
static int helper(int x) { return x * 3 + 1; }
int visible(int x) { return helper(x) + 2; }
int other(int a, int b) { return a > b ? visible(a) : helper(b); }
ELF
if ! ${CC:-cc} -O1 -shared -fPIC -o "$work/seed-elf/full.so" "$work/elf.c" ||
	! strip -o "$work/seed-elf/stripped.so" "$work/seed-elf/full.so" ||
	! ${CC:-cc} -O1 -shared -fPIC -Wl,-z,noseparate-code -o "$work/seed-elf/packed.so" \
		"$work/elf.c"; then
	echo "FAIL fuzz_bounded: could not build the ELF seeds" >&2
	exit 1
fi

if [ -n "${FUZZ_SECONDS:-}" ]; then
	per=$FUZZ_SECONDS
else
	per=$(( ${FUZZ_BUDGET:-80} / ntargets ))
	[ "$per" -lt 10 ] && per=10
	[ "$per" -gt 45 ] && per=45
fi
dict=
[ -f tests/fuzz/stream.dict ] && dict=-dict=tests/fuzz/stream.dict
artifacts=$root/build/fuzz-artifacts
mkdir -p "$artifacts"

# -- Run -------------------------------------------------------------------------------
for bin in $targets; do
	target=${bin##*/}
	mkdir -p "$work/$target"
	echo "fuzz_bounded: $target for ${per}s" >&2
	seeds=$work/seed with=$dict
	[ "$target" = fuzz_elfsyms ] && seeds=$work/seed-elf with=
	"$bin" -max_total_time="$per" -rss_limit_mb=2048 -timeout=5 -print_final_stats=1 \
		-artifact_prefix="$work/$target-" $with "$work/$target" "$seeds" \
		>"$work/$target.log" 2>&1
	rc=$?
	grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$work/$target.log" |
		sed "s/^/  $target /" >&2
	if [ $rc -ne 0 ]; then
		status=1
		tail -n 25 "$work/$target.log" >&2
		cp "$work/$target.log" "$artifacts/$target.log"
		echo "  log: $artifacts/$target.log" >&2
		found=0
		for a in "$work/$target"-*; do
			[ -f "$a" ] || continue
			cp "$a" "$artifacts/" && found=1
			echo "FAIL $target: reproducer $artifacts/${a##*/}" >&2
			echo "  rerun: $bin $artifacts/${a##*/}" >&2
		done
		[ $found = 1 ] || echo "FAIL $target: exit status $rc, no reproducer written" >&2
	else
		echo "PASS $target" >&2
	fi
done
exit $status
