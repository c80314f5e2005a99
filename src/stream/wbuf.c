/*
** Write buffer for profile streams.
*/
#include "stream/wbuf.h"

#include <errno.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

void lp_wbuf_init(struct lp_wbuf *w, uint8_t *buf, size_t len, lp_wbuf_writer writer, void *ctx)
{
	w->buf = w->pos = buf;
	w->end = buf + len;
	w->writer = writer;
	w->ctx = ctx;
	w->flags = 0;
	w->saved_errno = 0;
	w->written = 0;
}

void lp_wbuf_flush(struct lp_wbuf *w)
{
	if (w->flags) {
		w->pos = w->buf;
		return;
	}
	size_t len = (size_t)(w->pos - w->buf);
	if (len == 0)
		return;
	const void *data = w->buf;
	errno = 0;
	size_t n = w->writer(&data, len, w->ctx);
	w->written += n;
	if (data == NULL) {
		w->flags |= LP_WBUF_STOP;
	} else if (n < len) {
		w->flags |= LP_WBUF_ERRIO;
		w->saved_errno = errno ? errno : EIO;
	} else if (data != w->buf) {
		/* The writer handed over another buffer of the same size (double buffering). */
		size_t cap = (size_t)(w->end - w->buf);
		w->buf = (uint8_t *)data;
		w->end = w->buf + cap;
	}
	w->pos = w->buf;
}

static inline void reserve(struct lp_wbuf *w, size_t n)
{
	if ((size_t)(w->end - w->pos) < n)
		lp_wbuf_flush(w);
}

int lp_uleb_pdep;

int lp_uleb_fast_init(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
	unsigned a, b, c, d;
	char vendor[13];
	if (!__get_cpuid(0, &a, &b, &c, &d) || a < 7)
		return lp_uleb_pdep = 0;
	memcpy(vendor, &b, 4);
	memcpy(vendor + 4, &d, 4);
	memcpy(vendor + 8, &c, 4);
	vendor[12] = 0;
	unsigned maxleaf = a;
	__get_cpuid(1, &a, &b, &c, &d);
	unsigned family = (a >> 8 & 0xf) + ((a >> 8 & 0xf) == 0xf ? (a >> 20 & 0xff) : 0);
	if (maxleaf < 7 || !__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(b & (1u << 8)))
		return lp_uleb_pdep = 0; /* no BMI2 */
	/* PDEP is microcoded on AMD before Zen 3 (family 0x19): hundreds of cycles. */
	lp_uleb_pdep = strcmp(vendor, "GenuineIntel") == 0 ||
		       (strcmp(vendor, "AuthenticAMD") == 0 && family >= 0x19);
	return lp_uleb_pdep;
#else
	return lp_uleb_pdep = 0;
#endif
}

size_t lp_uleb_encode(uint64_t v, uint8_t *out)
{
	size_t n = 0;
	do {
		uint8_t b = v & 0x7f;
		v >>= 7;
		out[n++] = b | (v ? 0x80 : 0);
	} while (v);
	return n;
}

void lp_wbuf_u8(struct lp_wbuf *w, uint8_t b)
{
	if (w->flags)
		return;
	reserve(w, 1);
	*w->pos++ = b;
}

void lp_wbuf_uleb(struct lp_wbuf *w, uint64_t v)
{
	if (w->flags)
		return;
	reserve(w, 10);
	w->pos += lp_uleb_encode(v, w->pos);
}

void lp_wbuf_bytes(struct lp_wbuf *w, const void *data, size_t len)
{
	const uint8_t *p = data;
	while (len > 0 && !w->flags) {
		if (w->pos == w->end)
			lp_wbuf_flush(w);
		size_t room = (size_t)(w->end - w->pos);
		size_t k = len < room ? len : room;
		memcpy(w->pos, p, k);
		w->pos += k;
		p += k;
		len -= k;
	}
}

void lp_wbuf_string(struct lp_wbuf *w, const char *s, size_t len)
{
	lp_wbuf_uleb(w, len);
	lp_wbuf_bytes(w, s, len);
}
