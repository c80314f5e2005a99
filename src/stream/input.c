/*
** Buffered reading of an untrusted profile stream.
*/
#include "stream/input.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INPUT_BUFSIZE (1u << 20)

int lp_input_open_fd(struct lp_input *in, int fd, const char *name)
{
	memset(in, 0, sizeof(*in));
	in->fd = fd;
	in->name = name;
	in->buf = malloc(INPUT_BUFSIZE);
	if (!in->buf)
		return lp_input_fail(in, LP_ERR_NOMEM, 0, "out of memory");
	in->cap = INPUT_BUFSIZE;
	return LP_OK;
}

void lp_input_open_mem(struct lp_input *in, const void *data, size_t len, const char *name)
{
	memset(in, 0, sizeof(*in));
	in->fd = -1;
	in->name = name;
	in->buf = (uint8_t *)data;
	in->len = len;
	in->eof = 1;
}

void lp_input_close(struct lp_input *in)
{
	if (in->fd >= 0)
		free(in->buf);
	free(in->str);
	in->buf = NULL;
	in->str = NULL;
}

int lp_input_fail(struct lp_input *in, int status, uint64_t offset, const char *fmt, ...)
{
	if (in->status != LP_OK)
		return in->status;
	in->status = status;
	in->err_offset = offset;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(in->err, sizeof(in->err), fmt, ap);
	va_end(ap);
	return status;
}

void lp_input_message(const struct lp_input *in, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s: byte %llu: %s", in->name ? in->name : "<input>",
		 (unsigned long long)in->err_offset, in->err);
}

/* Refills the window keeping unread bytes; returns bytes now available past pos. */
static size_t fill(struct lp_input *in)
{
	if (in->eof || in->status != LP_OK)
		return in->len - in->pos;
	if (in->pos > 0) {
		memmove(in->buf, in->buf + in->pos, in->len - in->pos);
		in->base += in->pos;
		in->len -= in->pos;
		in->pos = 0;
	}
	while (in->len < in->cap) {
		ssize_t n = in->read_fn ? in->read_fn(in->read_ctx, in, in->buf + in->len,
						      in->cap - in->len)
					: read(in->fd, in->buf + in->len, in->cap - in->len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			lp_input_fail(in, LP_ERR_IO, lp_input_offset(in), "read failed: %s",
				      strerror(errno));
			break;
		}
		if (n == 0) {
			in->eof = 1;
			break;
		}
		in->len += (size_t)n;
		if (in->len - in->pos >= 64)
			break; /* enough for any fixed item; avoid blocking on pipes */
	}
	return in->len - in->pos;
}

static int truncated(struct lp_input *in)
{
	if (in->status != LP_OK)
		return in->status;
	return lp_input_fail(in, LP_ERR_TRUNCATED, lp_input_offset(in), "unexpected end of input");
}

int lp_input_at_eof(struct lp_input *in)
{
	if (in->pos < in->len)
		return 0;
	return fill(in) == 0;
}

int lp_input_u8(struct lp_input *in, uint8_t *out)
{
	if (in->pos >= in->len && fill(in) == 0)
		return truncated(in);
	*out = in->buf[in->pos++];
	return LP_OK;
}

int lp_input_uleb(struct lp_input *in, uint64_t *out)
{
	uint64_t start = lp_input_offset(in), v = 0;
	for (unsigned shift = 0;; shift += 7) {
		uint8_t b = 0;
		int rc = lp_input_u8(in, &b);
		if (rc != LP_OK)
			return rc;
		/* The 10th byte may only carry the top bit of a 64-bit value. */
		if (shift == 63 && (b & 0xfe))
			return lp_input_fail(in, LP_ERR_FORMAT, start,
					     "ULEB128 value does not fit in 64 bits");
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			break;
	}
	*out = v;
	return LP_OK;
}

int lp_input_bytes(struct lp_input *in, void *out, size_t n)
{
	uint8_t *dst = out;
	while (n > 0) {
		size_t avail = in->len - in->pos;
		if (avail == 0 && (avail = fill(in)) == 0)
			return truncated(in);
		size_t k = avail < n ? avail : n;
		memcpy(dst, in->buf + in->pos, k);
		in->pos += k;
		dst += k;
		n -= k;
	}
	return LP_OK;
}

int lp_input_string(struct lp_input *in, const char **s, size_t *len)
{
	uint64_t start = lp_input_offset(in), n;
	int rc = lp_input_uleb(in, &n);
	if (rc != LP_OK)
		return rc;
	if (n > LP_INPUT_MAX_STRING)
		return lp_input_fail(in, LP_ERR_FORMAT, start,
				     "string length %llu exceeds the %u-byte limit",
				     (unsigned long long)n, LP_INPUT_MAX_STRING);
	/* Grow the scratch gradually so a lying length cannot force a large allocation
	 * before the bytes are actually there. */
	size_t have = 0;
	while (have < n) {
		size_t want = (size_t)n - have;
		if (want > 65536)
			want = 65536;
		if (have + want + 1 > in->strcap) {
			size_t cap = in->strcap ? in->strcap : 256;
			while (cap < have + want + 1)
				cap *= 2;
			char *p = realloc(in->str, cap);
			if (!p)
				return lp_input_fail(in, LP_ERR_NOMEM, start, "out of memory");
			in->str = p;
			in->strcap = cap;
		}
		rc = lp_input_bytes(in, in->str + have, want);
		if (rc != LP_OK)
			return rc;
		have += want;
	}
	if (!in->str) {
		in->str = malloc(256);
		if (!in->str)
			return lp_input_fail(in, LP_ERR_NOMEM, start, "out of memory");
		in->strcap = 256;
	}
	in->str[n] = '\0';
	*s = in->str;
	*len = (size_t)n;
	return LP_OK;
}
