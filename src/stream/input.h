/*
** Buffered reading of an untrusted profile stream: bytes, ULEB128 and strings, with the
** byte offset of every failure.
**
** Nothing read from the stream is trusted: lengths are bounded, ULEB128 is checked for
** 64-bit overflow, and end of input inside an item is reported as truncation (distinct
** from malformed data) so callers can still use what was read before it.
*/
#ifndef LP_INPUT_H
#define LP_INPUT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Status codes shared by every stream reader. */
enum lp_status {
	LP_OK = 0,
	LP_ERR_IO = -1,        /* the operating system failed a read */
	LP_ERR_FORMAT = -2,    /* the bytes do not follow the grammar */
	LP_ERR_TRUNCATED = -3, /* input ended before the stream did */
	LP_ERR_VERSION = -4,   /* a section has a version this reader does not know */
	LP_ERR_NOMEM = -5,
	LP_ERR_ABORT = -6      /* a consumer callback asked to stop; message set by it */
};

/* Longest string (chunk name, symbol name) accepted; a longer length is malformed. */
#define LP_INPUT_MAX_STRING (16u << 20)

struct lp_input {
	int fd;              /* source, or -1 for a memory buffer */
	const char *name;    /* shown in messages */
	uint8_t *buf;        /* window of the stream */
	size_t cap;          /* capacity of buf (0 for a memory buffer) */
	size_t pos, len;     /* read position and valid bytes in buf */
	uint64_t base;       /* stream offset of buf[0] */
	int eof;             /* no more bytes beyond buf[len] */
	char *str;           /* scratch for the last string read */
	size_t strcap;
	int status;          /* first failure, LP_OK until then */
	uint64_t err_offset; /* stream offset the failure refers to */
	char err[512];       /* "what went wrong", without file and offset */
	/* Where an fd input's bytes come from: read(2) on fd when NULL, else this, which
	 * answers as read(2) does (a decompressor: the CLI's gzip). On failure it may record
	 * its own message with lp_input_fail before returning -1. */
	ssize_t (*read_fn)(void *ctx, struct lp_input *in, void *buf, size_t n);
	void *read_ctx;
};

int lp_input_open_fd(struct lp_input *in, int fd, const char *name);
void lp_input_open_mem(struct lp_input *in, const void *data, size_t len, const char *name);
void lp_input_close(struct lp_input *in);

/* Stream offset of the next byte to be read. */
static inline uint64_t lp_input_offset(const struct lp_input *in)
{
	return in->base + in->pos;
}

/* Whether the stream has no more bytes; may read to find out. */
int lp_input_at_eof(struct lp_input *in);

/* Each returns LP_OK or a status (also kept in in->status with the message). */
int lp_input_u8(struct lp_input *in, uint8_t *out);
int lp_input_uleb(struct lp_input *in, uint64_t *out);
int lp_input_bytes(struct lp_input *in, void *out, size_t n);
/* Reads a length-prefixed string into scratch owned by `in`, valid until the next call. */
int lp_input_string(struct lp_input *in, const char **s, size_t *len);

/* Records a failure at `offset` (first one wins) and returns `status`. */
int lp_input_fail(struct lp_input *in, int status, uint64_t offset, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/* Formats "NAME: byte OFFSET: MESSAGE" for the recorded failure. */
void lp_input_message(const struct lp_input *in, char *out, size_t outlen);

#endif
