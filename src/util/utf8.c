/*
** UTF-8 validation.
*/
#include "util/utf8.h"

size_t lp_utf8_seq(const unsigned char *s, size_t n, size_t *bad, uint32_t *cp)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	size_t len;
	uint32_t v;
	if (c < 0x80) {
		if (cp)
			*cp = c;
		return 1;
	}
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		v = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		v = c & 0x0f;
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		else if (c == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		v = c & 0x07;
		if (c == 0xf0)
			lo = 0x90; /* overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* above U+10FFFF */
	} else {
		*bad = 1;
		return 0;
	}
	size_t i = 1;
	for (; i < len && i < n; i++) {
		if (s[i] < lo || s[i] > hi)
			break;
		v = v << 6 | (s[i] & 0x3f);
		lo = 0x80;
		hi = 0xbf;
	}
	if (i == len) {
		if (cp)
			*cp = v;
		return len;
	}
	*bad = i;
	return 0;
}
