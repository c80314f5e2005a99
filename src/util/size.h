/*
** Sizes as users write and read them: a whole number of bytes, optionally with K, M, G, T or
** P (powers of 1024), as `luaprof record --sample` and memprof.start's sample option take
** them; and byte counts scaled to KiB, MiB... for reports and summaries.
*/
#ifndef LP_UTIL_SIZE_H
#define LP_UTIL_SIZE_H

#include <stddef.h>
#include <stdint.h>

/* Parses s ("524288", "512K", "512KiB", "4m", "4mib", "1G", "1P") into *out, from 1 to max. 0, or -1 for
 * anything else (a sign, a fraction, another suffix, 0, more than max). "KB" is refused:
 * 1000 or 1024 bytes, the reader cannot tell which was meant. */
int lp_size_parse(const char *s, uint64_t max, uint64_t *out);

/* A whole figure loses its ".0" (prose: "one per 512 KiB"); without it every scaled
 * figure has one decimal, which lines up in columns ("3.0 MiB" over "1.5 KiB"). */
#define LP_SIZE_TRIM 1u

/* bytes for reading into buf: under 1 KiB (either sign) "N B", else "X.Y KiB" up to EiB. */
void lp_size_format(char *buf, size_t len, int64_t bytes, unsigned flags);

#endif
