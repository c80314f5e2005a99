#!/usr/bin/env bash
# Runs every unit test binary and integration script and prints one closing line:
# "N passed, N failed, N skipped".
#
# Unit binaries (build/tests/test_*) print "PASS name" / "FAIL name" per test, and
# "SKIP name: why" for a test whose input is absent (Tarantool's vectors in ../shared).
# Integration scripts (tests/integration/*.sh) are one test each: exit 0 pass,
# 1 fail, 2 skip (they print why). Run from the repository root after `make unit`.
cd "$(dirname "$0")/.."
passed=0 failed=0 skipped=0
failures=()

for t in build/tests/test_*; do
	[ -x "$t" ] || continue
	out=$("$t" 2>&1)
	rc=$?
	echo "$out" | grep -E '^(PASS|FAIL|SKIP) ' | sed "s|^|$(basename "$t"): |"
	p=$(echo "$out" | grep -c '^PASS ')
	f=$(echo "$out" | grep -c '^FAIL ')
	k=$(echo "$out" | grep -c '^SKIP ')
	passed=$((passed + p))
	failed=$((failed + f))
	skipped=$((skipped + k))
	if [ "$f" -gt 0 ] || { [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; }; then
		echo "$out" | grep -v '^PASS ' | sed 's/^/    /'
		[ "$f" -eq 0 ] && failed=$((failed + 1))  # crashed without reporting
		failures+=("$(basename "$t")")
	fi
done

for t in tests/integration/*.sh; do
	[ -f "$t" ] || continue
	name=$(basename "$t" .sh)
	start=$(date +%s)
	out=$(bash "$t" 2>&1)
	rc=$?
	secs=$(( $(date +%s) - start ))
	case $rc in
	0) echo "PASS $name (${secs}s)"; passed=$((passed + 1)) ;;
	2) echo "SKIP $name: $(echo "$out" | tail -n 1)"; skipped=$((skipped + 1)) ;;
	*) echo "FAIL $name (${secs}s)"; echo "$out" | tail -n 30 | sed 's/^/    /'
	   failed=$((failed + 1)); failures+=("$name") ;;
	esac
done

[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
