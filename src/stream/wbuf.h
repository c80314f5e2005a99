/*
** Write buffer for profile streams: ULEB128, strings and raw bytes into a caller-owned
** buffer, drained through a writer callback.
**
** Safe to use from a signal handler: it never allocates, locks or calls stdio. The writer
** contract follows Tarantool's lj_wbuf: the writer gets the buffer and returns how many
** bytes it consumed; a short count marks an I/O error, and setting *data to NULL stops
** the stream. Once stopped or failed, every add is a no-op, so producers need not check
** after each item.
*/
#ifndef LP_WBUF_H
#define LP_WBUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef size_t (*lp_wbuf_writer)(const void **data, size_t len, void *ctx);

enum { LP_WBUF_ERRIO = 1, LP_WBUF_STOP = 2 };

struct lp_wbuf {
	uint8_t *buf, *pos, *end;  /* buffer, write position, one past the last byte */
	lp_wbuf_writer writer;
	void *ctx;
	unsigned flags;            /* LP_WBUF_ERRIO | LP_WBUF_STOP */
	int saved_errno;           /* errno when the writer first failed */
	uint64_t written;          /* bytes accepted by the writer so far */
};

/* The buffer must hold at least 16 bytes. */
void lp_wbuf_init(struct lp_wbuf *w, uint8_t *buf, size_t len, lp_wbuf_writer writer, void *ctx);
void lp_wbuf_flush(struct lp_wbuf *w);
void lp_wbuf_u8(struct lp_wbuf *w, uint8_t b);
void lp_wbuf_uleb(struct lp_wbuf *w, uint64_t v);
void lp_wbuf_bytes(struct lp_wbuf *w, const void *data, size_t len);
void lp_wbuf_string(struct lp_wbuf *w, const char *s, size_t len);

static inline int lp_wbuf_ok(const struct lp_wbuf *w)
{
	return w->flags == 0;
}

/* Encodes v as ULEB128 into out (at least 10 bytes); returns the length. */
size_t lp_uleb_encode(uint64_t v, uint8_t *out);

/*
** ULEB128 straight into memory, for hot paths that reserve room for a whole record first
** and write it without a call per field. Each returns the position after the value.
*/

/* Any value; p has room for 10 bytes. */
static inline uint8_t *lp_uleb_put(uint8_t *p, uint64_t v)
{
	while (v >= 0x80) {
		*p++ = (uint8_t)(v | 0x80);
		v >>= 7;
	}
	*p++ = (uint8_t)v;
	return p;
}

/*
** Nonzero when lp_uleb_put_addr may spread a value's 7-bit groups with the x86 PDEP
** instruction (one instruction for fourteen): set by lp_uleb_fast_init on CPUs where PDEP
** is fast (Intel since Haswell, AMD since Zen 3; microcoded and slow on Zen 1 and 2).
*/
extern int lp_uleb_pdep;

/* Sets lp_uleb_pdep for this CPU; returns it. Cheap, and idempotent. */
int lp_uleb_fast_init(void);

/* Tuned for heap addresses: 2^42 <= v < 2^49 (x86_64 user space) takes 7 bytes, built in
 * a word and written with one store instead of seven, so p needs room for 8 bytes (the
 * eighth is left for the next value to overwrite); others as lp_uleb_put. */
static inline uint8_t *lp_uleb_put_addr(uint8_t *p, uint64_t v)
{
	if (v - (1ull << 42) < (1ull << 49) - (1ull << 42)) {
		uint64_t u;
#if defined(__x86_64__) && defined(__GNUC__)
		if (lp_uleb_pdep) {
			/* Inline assembly: the caller need not be built for BMI2. */
			__asm__("pdep %2, %1, %0" : "=r"(u) : "r"(v), "r"(0x7f7f7f7f7f7f7full));
			u |= 0x808080808080ull;
		} else
#endif
		u = (v & 0x7f) | (v << 1 & 0x7f00) | (v << 2 & 0x7f0000) | (v << 3 & 0x7f000000) |
		    (v << 4 & 0x7f00000000) | (v << 5 & 0x7f0000000000) |
		    (v << 6 & 0x7f000000000000) | 0x808080808080ull;
		memcpy(p, &u, sizeof(u)); /* little-endian: byte 0 first */
		return p + 7;
	}
	return lp_uleb_put(p, v);
}

/* Tuned for sizes, lines and counts: below 2^14 one store; others as lp_uleb_put. */
static inline uint8_t *lp_uleb_put_small(uint8_t *p, uint64_t v)
{
	if (v < 0x80) {
		*p = (uint8_t)v;
		return p + 1;
	}
	if (v < 0x4000) {
		uint16_t u = (uint16_t)((v & 0x7f) | 0x80 | (v << 1 & 0x7f00));
		memcpy(p, &u, sizeof(u));
		return p + 2;
	}
	return lp_uleb_put(p, v);
}

#endif
