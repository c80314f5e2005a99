#!/bin/sh
# The agent, the CLI and the unit tests build with clang as well as GCC, warning-free under
# the project's -Wall -Wextra -Werror, and the unit tests pass in that build: a GCC-only
# construct (an attribute, an extension) fails here instead of on a user's machine with
# CC=clang. The build goes to a temporary directory; build/ is not touched.
. "$(dirname "$0")/lib/common.sh" || exit 1
test_init
have clang || skip "clang is not installed (scripts/setup.sh --test installs it)"
if ! make -s -j"$(nproc)" CC=clang BUILD="$t/b" all unit >"$t/log" 2>&1; then
	tail -n 30 "$t/log"
	fail "make CC=clang all unit failed (log above)"
	exit 1
fi
grep -E 'warning:' "$t/log" && fail "clang warned (above)"
n=0
for u in "$t"/b/tests/test_*; do
	[ -x "$u" ] || continue
	n=$((n + 1))
	"$u" >"$t/u.out" 2>&1 || { grep -v '^PASS ' "$t/u.out" | tail -n 10; fail "$(basename "$u") failed in the clang build"; }
done
[ "$n" -gt 0 ] || fail "the clang build made no unit test"
[ "$fails" = 0 ] || exit 1
echo "PASS $name: clang build of the agent, CLI and $n unit test programs, all passing"
