/*
** Raw allocation events: the general producer and the encoder into ljm events.
*/
#include "agent/rawev.h"

#include "luaprof/format.h"
#include "stream/wbuf.h"

uint8_t *agent_rawev_put(uint8_t *p, unsigned header, uint64_t num, uint64_t loc_addr,
			 uint64_t oaddr, uint64_t osize, uint64_t naddr, uint64_t nsize)
{
	unsigned event = header & LP_AEVENT_MASK, source = header & LP_ASOURCE_MASK;
	uint64_t size1 = event == LP_AEVENT_FREE ? osize : nsize;
	if (num < AGENT_RAWEV_NUM_LIMIT && size1 < AGENT_RAWEV_SIZE_LIMIT) {
		p = agent_rawev_word(p, agent_rawev_w0(header, num, size1));
	} else {
		p = agent_rawev_word(p, header | AGENT_RAWEV_WIDE);
		p = agent_rawev_word(p, num);
		p = agent_rawev_word(p, size1);
	}
	if (source == LP_ASOURCE_LFUNC || source == LP_ASOURCE_CFUNC)
		p = agent_rawev_word(p, loc_addr);
	if (event != LP_AEVENT_ALLOC)
		p = agent_rawev_word(p, oaddr);
	if (event == LP_AEVENT_REALLOC)
		p = agent_rawev_word(p, osize);
	if (event != LP_AEVENT_FREE)
		p = agent_rawev_word(p, naddr);
	return p;
}

static inline uint64_t word(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* Words an event record has after w0 (0 for a header that is no event's). */
static size_t event_words(unsigned low)
{
	unsigned event = low & LP_AEVENT_MASK, source = low & LP_ASOURCE_MASK;
	if (event == LP_AEVENT_SYMTAB || (low & ~(AGENT_RAWEV_WIDE | LP_AEVENT_MASK |
						   LP_ASOURCE_MASK)))
		return 0;
	if (source != LP_ASOURCE_INT && source != LP_ASOURCE_LFUNC &&
	    source != LP_ASOURCE_CFUNC && source != LP_ASOURCE_TRACE)
		return 0;
	size_t n = (low & AGENT_RAWEV_WIDE) ? 2 : 0;
	n += source == LP_ASOURCE_LFUNC || source == LP_ASOURCE_CFUNC;
	n += event == LP_AEVENT_REALLOC ? 3 : 1;
	return n;
}

/* The general case of one event record at in (nw words after w0, all in the input);
 * returns the position after its encoding. */
static uint8_t *encode_any(const uint8_t *in, uint8_t *p)
{
	uint64_t w0 = word(in);
	const uint8_t *w = in + 8;
	unsigned low = (unsigned)(w0 & 0xff);
	unsigned event = low & LP_AEVENT_MASK, source = low & LP_ASOURCE_MASK;
	uint64_t num, size1;
	if (low & AGENT_RAWEV_WIDE) {
		num = word(w);
		size1 = word(w + 8);
		w += 16;
	} else {
		num = w0 >> 8 & (AGENT_RAWEV_NUM_LIMIT - 1);
		size1 = w0 >> 32;
	}
	*p++ = (uint8_t)(event | source);
	if (source == LP_ASOURCE_LFUNC) {
		p = lp_uleb_put(p, word(w));
		p = lp_uleb_put(p, num);
		w += 8;
	} else if (source == LP_ASOURCE_CFUNC) {
		p = lp_uleb_put(p, word(w));
		w += 8;
	} else if (source == LP_ASOURCE_TRACE) {
		p = lp_uleb_put(p, num);
	}
	if (event != LP_AEVENT_REALLOC) {
		/* FREE: oaddr osize; ALLOC: naddr nsize */
		p = lp_uleb_put(p, word(w));
		return lp_uleb_put(p, size1);
	}
	p = lp_uleb_put(p, word(w));
	p = lp_uleb_put(p, word(w + 8));
	p = lp_uleb_put(p, word(w + 16));
	return lp_uleb_put(p, size1);
}

size_t agent_rawev_encode(struct agent_rawev_enc *e, const uint8_t *in, size_t len,
			  uint8_t *out, size_t cap, size_t *olen)
{
	size_t i = 0;
	uint8_t *p = out, *pend = out + cap - AGENT_RAWEV_ENC_MAX;
	while (i < len && !e->bad) {
		if (e->blob_left) {
			size_t room = (size_t)(out + cap - p), k = len - i < room ? len - i : room;
			if (k > e->blob_left)
				k = (size_t)e->blob_left;
			if (k == 0)
				break;
			memcpy(p, in + i, k);
			i += k;
			p += k;
			e->blob_left -= k;
			continue;
		}
		if (e->blob_pad) {
			size_t k = len - i < e->blob_pad ? len - i : e->blob_pad;
			i += k;
			e->blob_pad -= (unsigned)k;
			continue;
		}
		if (len - i < 8) {
			e->bad = 1;
			break;
		}
		if (p > pend)
			break;
		/* Records are read once, from memory (their producer stored them past the
		 * caches): asked for ahead, without a place in the caches to keep them. */
		__builtin_prefetch(in + i + 2048, 0, 0);
		uint64_t w0 = word(in + i);
		unsigned low = (unsigned)(w0 & 0xff);
		/* The collector's frees, and allocations in traces and Lua functions: nearly
		 * every event of an allocation-heavy program, in straight-line code. */
		if (len - i >= 24) {
			if (low == (LP_AEVENT_FREE | LP_ASOURCE_INT)) {
				*p = (uint8_t)low;
				p = lp_uleb_put_addr(p + 1, word(in + i + 8));
				p = lp_uleb_put_small(p, w0 >> 32);
				i += 16;
				continue;
			}
			if (low == (LP_AEVENT_ALLOC | LP_ASOURCE_TRACE)) {
				*p = (uint8_t)low;
				p = lp_uleb_put_small(p + 1, w0 >> 8 & (AGENT_RAWEV_NUM_LIMIT - 1));
				p = lp_uleb_put_addr(p, word(in + i + 8));
				p = lp_uleb_put_small(p, w0 >> 32);
				i += 16;
				continue;
			}
			if (low == (LP_AEVENT_ALLOC | LP_ASOURCE_LFUNC)) {
				*p = (uint8_t)low;
				p = lp_uleb_put_addr(p + 1, word(in + i + 8));
				p = lp_uleb_put_small(p, w0 >> 8 & (AGENT_RAWEV_NUM_LIMIT - 1));
				p = lp_uleb_put_addr(p, word(in + i + 16));
				p = lp_uleb_put_small(p, w0 >> 32);
				i += 24;
				continue;
			}
		}
		if (low == AGENT_RAWEV_BLOB) {
			e->blob_left = w0 >> 8;
			e->blob_pad = (unsigned)AGENT_RAWEV_BLOB_PAD(e->blob_left);
			i += 8;
			continue;
		}
		size_t nw = event_words(low);
		if (nw == 0 || len - i < 8 * (nw + 1)) {
			e->bad = 1;
			break;
		}
		p = encode_any(in + i, p);
		i += 8 * (nw + 1);
	}
	if (e->bad)
		i = len;
	*olen = (size_t)(p - out);
	return i;
}
