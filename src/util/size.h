/*
** Sizes as users write them: a whole number of bytes, optionally with K, M, G or T (powers of
** 1024), as `luaprof record --sample` and memprof.start's sample option take them.
*/
#ifndef LP_UTIL_SIZE_H
#define LP_UTIL_SIZE_H

#include <stdint.h>

/* Parses s ("524288", "512K", "4m", "1G") into *out, from 1 to max. 0, or -1 for anything
 * else (a sign, a fraction, another suffix, 0, more than max). */
int lp_size_parse(const char *s, uint64_t max, uint64_t *out);

#endif
