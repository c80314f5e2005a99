/*
** Growing a heap array.
*/
#include "util/grow.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

int lp_grow(void **arr, size_t *cap, size_t need, size_t elsize)
{
	if (need <= *cap)
		return 0;
	size_t ncap = *cap ? *cap : 16;
	while (ncap < need) {
		if (ncap > SIZE_MAX / 2)
			return -ENOMEM;
		ncap *= 2;
	}
	if (ncap > SIZE_MAX / elsize)
		return -ENOMEM;
	void *p = realloc(*arr, ncap * elsize);
	if (!p)
		return -ENOMEM;
	*arr = p;
	*cap = ncap;
	return 0;
}
