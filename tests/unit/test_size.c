/*
** Unit tests for util/size: sizes as users write them (`luaprof record --sample`, the
** memprof.start sample option).
*/
#include "unit.h"
#include "util/size.h"

static uint64_t parsed(const char *s, uint64_t max)
{
	uint64_t v = 0;
	return lp_size_parse(s, max, &v) == 0 ? v : 0;
}

static void test_suffixes(void)
{
	CHECK_EQ(parsed("524288", 1ull << 40), 524288);
	CHECK_EQ(parsed("512K", 1ull << 40), 512ull << 10);
	CHECK_EQ(parsed("4m", 1ull << 40), 4ull << 20);
	CHECK_EQ(parsed("1G", 1ull << 40), 1ull << 30);
	/* The CLI's limit, 1T, written as it is documented. */
	CHECK_EQ(parsed("1T", 1ull << 40), 1ull << 40);
	CHECK_EQ(parsed("1024G", 1ull << 40), 1ull << 40);
	CHECK_EQ(parsed("2t", 1ull << 50), 2ull << 40);
}

static void test_refused(void)
{
	uint64_t v = 7;
	static const char *const bad[] = { "", "0", "-1", "+1", "1.5M", "2G5", "1KB", "K",
					   " 1", "1 ", "2T", "1025G", "99999999999999999999" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (lp_size_parse(bad[i], 1ull << 40, &v) != -1)
			fprintf(stderr, "  accepted '%s'\n", bad[i]), unit_test_failed++;
	}
	CHECK_EQ(v, 7); /* untouched on failure */
}

int main(void)
{
	RUN(test_suffixes);
	RUN(test_refused);
	return UNIT_RESULT();
}
