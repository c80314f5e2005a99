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

#endif
