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
	CHECK_EQ(parsed("1T", 1ull << 40), 1ull << 40);
	CHECK_EQ(parsed("1024G", 1ull << 40), 1ull << 40);
	CHECK_EQ(parsed("2t", 1ull << 50), 2ull << 40);
	/* The limit of --sample and memprof.start's sample, 2^50, written as documented. */
	CHECK_EQ(parsed("1P", 1ull << 50), 1ull << 50);
	CHECK_EQ(parsed("1p", 1ull << 50), 1ull << 50);
	CHECK_EQ(parsed("1PiB", 1ull << 50), 1ull << 50);
	CHECK_EQ(parsed("1024T", 1ull << 50), 1ull << 50);
	CHECK_EQ(parsed("1125899906842624", 1ull << 50), 1ull << 50);
	/* The units the reports print. */
	CHECK_EQ(parsed("512KiB", 1ull << 40), 512ull << 10);
	CHECK_EQ(parsed("1MiB", 1ull << 40), 1ull << 20);
	CHECK_EQ(parsed("1TiB", 1ull << 40), 1ull << 40);
	/* In any case, as the letter alone is. */
	CHECK_EQ(parsed("512kib", 1ull << 40), 512ull << 10);
	CHECK_EQ(parsed("4MIB", 1ull << 40), 4ull << 20);
	CHECK_EQ(parsed("2gIb", 1ull << 40), 2ull << 30);
}

static void test_refused(void)
{
	uint64_t v = 7;
	static const char *const bad[] = { "", "0", "-1", "+1", "1.5M", "2G5", "1KB", "K",
					   "1Ki", "1KiBs", "1iB", "1ib", "1kb", "1kibs", "1MB", " 1", "1 ", "2T",
					   "1025G", "99999999999999999999" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (lp_size_parse(bad[i], 1ull << 40, &v) != -1)
			fprintf(stderr, "  accepted '%s'\n", bad[i]), unit_test_failed++;
	}
	CHECK_EQ(v, 7); /* untouched on failure */
	/* Past 2^50 by a byte, a suffix, a unit. */
	static const char *const above[] = { "1125899906842625", "2P", "1025T", "1PB", "1E" };
	for (size_t i = 0; i < sizeof(above) / sizeof(above[0]); i++) {
		if (lp_size_parse(above[i], 1ull << 50, &v) != -1)
			fprintf(stderr, "  accepted '%s'\n", above[i]), unit_test_failed++;
	}
	CHECK_EQ(v, 7);
}

static const char *formatted(int64_t v, unsigned flags)
{
	static char buf[32];
	lp_size_format(buf, sizeof(buf), v, flags);
	return buf;
}

/* Reports' columns keep one decimal; prose (LP_SIZE_TRIM) drops a ".0" as printed. */
static void test_format(void)
{
	CHECK_STR(formatted(0, 0), "0 B");
	CHECK_STR(formatted(1023, LP_SIZE_TRIM), "1023 B");
	CHECK_STR(formatted(-1023, 0), "-1023 B");
	CHECK_STR(formatted(1024, 0), "1.0 KiB");
	CHECK_STR(formatted(1024, LP_SIZE_TRIM), "1 KiB");
	CHECK_STR(formatted(1536, LP_SIZE_TRIM), "1.5 KiB");
	CHECK_STR(formatted(-2048, 0), "-2.0 KiB");
	CHECK_STR(formatted(512 << 10, LP_SIZE_TRIM), "512 KiB");
	/* 1023.96 KiB would print as 1024.0 KiB: the next unit. 1023.94 stays. */
	CHECK_STR(formatted(1048535, 0), "1.0 MiB");
	CHECK_STR(formatted(1048575, LP_SIZE_TRIM), "1 MiB");
	CHECK_STR(formatted(1073741823, LP_SIZE_TRIM), "1 GiB");
	CHECK_STR(formatted(1048514, 0), "1023.9 KiB");
	CHECK_STR(formatted(-1048575, 0), "-1.0 MiB");
	CHECK_STR(formatted(10 << 20, LP_SIZE_TRIM), "10 MiB");
	CHECK_STR(formatted(1ll << 40, LP_SIZE_TRIM), "1 TiB");
	CHECK_STR(formatted(INT64_MAX, 0), "8.0 EiB");
	CHECK_STR(formatted(INT64_MIN, LP_SIZE_TRIM), "-8 EiB");
	/* Trimmed, then cut to the buffer, terminated. */
	char small[8];
	lp_size_format(small, sizeof(small), -1075, LP_SIZE_TRIM);
	CHECK_STR(small, "-1 KiB");
	lp_size_format(small, 4, 3 << 20, LP_SIZE_TRIM);
	CHECK_STR(small, "3 M");
}

int main(void)
{
	RUN(test_suffixes);
	RUN(test_refused);
	RUN(test_format);
	return UNIT_RESULT();
}
