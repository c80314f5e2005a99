/*
** UTF-8 validation for text that leaves luaprof in formats requiring it (pprof, JSON, XML).
**
** Frame names come from arbitrary programs and streams; every renderer replaces ill-formed
** sequences the same way, by one U+FFFD per maximal ill-formed subpart (Unicode's
** recommended practice, as Python's and WHATWG's decoders do).
*/
#ifndef LP_UTF8_H
#define LP_UTF8_H

#include <stddef.h>
#include <stdint.h>

#define LP_UTF8_REPLACEMENT "\xef\xbf\xbd"

/*
** Length (1..4) of the well-formed sequence at s, of which n bytes may be read (n >= 1),
** with its code point in *cp when cp is not NULL; or 0, with *bad set to the number of
** bytes (>= 1) to replace by one U+FFFD.
*/
size_t lp_utf8_seq(const unsigned char *s, size_t n, size_t *bad, uint32_t *cp);

#endif
