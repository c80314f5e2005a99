/*
** Minimal unit-test harness. Each test is a void function run with RUN(); it prints
** "PASS name" or "FAIL name" lines that tests/run.sh counts, and every failed check prints
** where and why. main() returns non-zero if any test failed.
*/
#ifndef LP_UNIT_H
#define LP_UNIT_H

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int unit_test_failed;  /* failures in the running test */
static int unit_tests_failed; /* failed tests in this binary */

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "  %s:%d: check failed: %s\n", __FILE__, __LINE__, \
				#cond);                                               \
			unit_test_failed++;                                           \
		}                                                                     \
	} while (0)

#define CHECK_EQ(a, b)                                                                     \
	do {                                                                               \
		unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b); \
		if (a_ != b_) {                                                            \
			fprintf(stderr, "  %s:%d: %s == %s failed: %llu != %llu\n", __FILE__, \
				__LINE__, #a, #b, a_, b_);                                 \
			unit_test_failed++;                                                \
		}                                                                          \
	} while (0)

#define CHECK_STR(a, b)                                                                   \
	do {                                                                              \
		const char *a_ = (a), *b_ = (b);                                          \
		if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                  \
			fprintf(stderr, "  %s:%d: %s == %s failed:\n    got:  \"%s\"\n    want: \"%s\"\n", \
				__FILE__, __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)"); \
			unit_test_failed++;                                               \
		}                                                                         \
	} while (0)

#define RUN(fn)                                                         \
	do {                                                            \
		unit_test_failed = 0;                                   \
		fn();                                                   \
		printf("%s %s\n", unit_test_failed ? "FAIL" : "PASS", #fn); \
		fflush(stdout);                                         \
		if (unit_test_failed)                                   \
			unit_tests_failed++;                            \
	} while (0)

#define UNIT_RESULT() (unit_tests_failed ? 1 : 0)

/* Pseudo-random numbers for tests that draw many cases (xorshift64): the same sequence
 * on every run, so a failure repeats. */
static uint64_t unit_rng = 0x9e3779b97f4a7c15ull;

static inline uint64_t unit_rand(void)
{
	unit_rng ^= unit_rng << 13;
	unit_rng ^= unit_rng >> 7;
	unit_rng ^= unit_rng << 17;
	return unit_rng;
}

#endif
