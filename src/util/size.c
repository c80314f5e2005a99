/*
** Sizes as users write them (size.h).
*/
#include "util/size.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lp_size_parse(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	unsigned shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20
		       : *end == 'G' || *end == 'g' ? 30 : *end == 'T' || *end == 't' ? 40
		       : *end == 'P' || *end == 'p' ? 50 : 0;
	if (shift) {
		end++;
		/* KiB, MiB...: the units reports print, in any case as K, M... are. */
		if ((end[0] == 'i' || end[0] == 'I') && (end[1] == 'B' || end[1] == 'b'))
			end += 2;
	}
	if (errno || *end || n == 0 || n > max >> shift)
		return -1;
	*out = (uint64_t)n << shift;
	return 0;
}

void lp_size_format(char *buf, size_t len, int64_t bytes, unsigned flags)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double x = (double)bytes, ax = x < 0 ? -x : x;
	unsigned i = 0;
	if (ax < 1024) {
		snprintf(buf, len, "%" PRId64 " B", bytes);
		return;
	}
	/* A figure that prints as 1024.0 goes on to the next unit ("1.0 MiB"). */
	while (ax >= 1023.95 && i + 1 < sizeof(unit) / sizeof(unit[0])) {
		ax /= 1024;
		x /= 1024;
		i++;
	}
	char tmp[32];
	snprintf(tmp, sizeof(tmp), "%.1f %s", x, unit[i]);
	/* Whole as printed: its ".0" goes. Trimmed before any cut to len. */
	char *dot = strstr(tmp, ".0 ");
	if ((flags & LP_SIZE_TRIM) && dot)
		memmove(dot, dot + 2, strlen(dot + 2) + 1);
	snprintf(buf, len, "%s", tmp);
}
