/*
** Sizes as users write them (size.h).
*/
#include "util/size.h"

#include <errno.h>
#include <stdlib.h>

int lp_size_parse(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	unsigned long long n = strtoull(s, &end, 10);
	unsigned shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20
		       : *end == 'G' || *end == 'g' ? 30 : *end == 'T' || *end == 't' ? 40 : 0;
	if (shift)
		end++;
	if (errno || *end || n == 0 || n > max >> shift)
		return -1;
	*out = (uint64_t)n << shift;
	return 0;
}
