/*
** Unit tests of exact-mode memprof's raw events (src/agent/rawev.c): every kind of event,
** narrow and wide, with and without PDEP, encodes to the bytes lp_write_mem_event writes;
** blobs pass through whole however the input and output are cut; bad input is reported.
*/
#include "../../src/agent/rawev.c"

#include <stdlib.h>

#include "luaprof/format.h"
#include "stream/wbuf.h"
#include "stream/writer.h"
#include "unit.h"

/* A value of a random magnitude: 0, small, around a form's limit, heap-like, or any. */
static uint64_t rnd_value(void)
{
	switch (unit_rand() % 8) {
	case 0: return 0;
	case 1: return unit_rand() % 128;
	case 2: return unit_rand() % 20000;
	case 3: return AGENT_RAWEV_NUM_LIMIT - 2 + unit_rand() % 4;
	case 4: return AGENT_RAWEV_SIZE_LIMIT - 2 + unit_rand() % 4;
	case 5: return 0x550000000000ull + unit_rand() % (1ull << 40);
	case 6: return 0x7f0000000000ull + unit_rand() % (1ull << 40);
	default: return unit_rand();
	}
}

static const unsigned sources[] = { LP_ASOURCE_INT, LP_ASOURCE_LFUNC, LP_ASOURCE_CFUNC,
				    LP_ASOURCE_TRACE };

static size_t discard(const void **data, size_t len, void *ctx)
{
	return 0;
}

/* A random event: its raw record at *raw, its ljm bytes at *enc (both advanced). */
static void random_event(uint8_t **raw, uint8_t **enc)
{
	struct lp_mem_event e = { 0 };
	e.event = (uint8_t)(1 + unit_rand() % 3);
	e.source = (uint8_t)sources[unit_rand() % 4];
	uint64_t num = e.source == LP_ASOURCE_LFUNC || e.source == LP_ASOURCE_TRACE ?
		       rnd_value() : 0;
	if (e.source == LP_ASOURCE_LFUNC || e.source == LP_ASOURCE_CFUNC)
		e.loc_addr = rnd_value();
	e.loc_line = e.traceno = num;
	if (e.event != LP_AEVENT_ALLOC) {
		e.oaddr = rnd_value();
		e.osize = rnd_value();
	}
	if (e.event != LP_AEVENT_FREE) {
		e.naddr = rnd_value();
		e.nsize = rnd_value();
	}
	*raw = agent_rawev_put(*raw, e.event | e.source, num, e.loc_addr, e.oaddr, e.osize,
			       e.naddr, e.nsize);
	struct lp_wbuf w;
	lp_wbuf_init(&w, *enc, 128, discard, NULL);
	lp_write_mem_event(&w, &e);
	*enc = w.pos;
}

/* A blob of len pattern bytes: raw at *raw, as they are at *enc. */
static void blob(uint8_t **raw, uint8_t **enc, size_t len)
{
	*raw = agent_rawev_word(*raw, AGENT_RAWEV_BLOB | (uint64_t)len << 8);
	for (size_t i = 0; i < len; i++)
		(*raw)[i] = (*enc)[i] = (uint8_t)(unit_rand() >> 24);
	*raw += len;
	*enc += len;
	/* The padding after it: not zeros, which the encoder must not copy all the same. */
	for (size_t i = 0; i < AGENT_RAWEV_BLOB_PAD(len); i++)
		*(*raw)++ = 0xee;
}

/* Encodes raw[0, len) in one call with room to spare: the output, its length in *olen. */
static uint8_t *encode_all(const uint8_t *raw, size_t len, size_t *olen, int *bad)
{
	size_t cap = 2 * len + 256;
	uint8_t *out = malloc(cap);
	struct agent_rawev_enc e = { 0 };
	size_t used = agent_rawev_encode(&e, raw, len, out, cap, olen);
	CHECK_EQ(used, len);
	*bad = e.bad;
	return out;
}

static void test_every_event_encodes_like_the_writer(void)
{
	for (int pdep = 0; pdep <= 1; pdep++) {
		lp_uleb_pdep = pdep && lp_uleb_fast_init();
		enum { N = 20000 };
		uint8_t *raw = malloc(N * AGENT_RAWEV_MAX), *want = malloc(N * 64);
		uint8_t *r = raw, *w = want;
		for (int i = 0; i < N; i++)
			random_event(&r, &w);
		size_t olen;
		int bad;
		uint8_t *out = encode_all(raw, (size_t)(r - raw), &olen, &bad);
		CHECK_EQ(bad, 0);
		CHECK_EQ(olen, (size_t)(w - want));
		CHECK(memcmp(out, want, olen) == 0);
		free(out);
		free(raw);
		free(want);
	}
}

/* The forms memprof's light paths store by hand (w0 and words) are what the general
 * producer stores, and encode the same. */
static void test_light_path_forms(void)
{
	lp_uleb_fast_init();
	uint8_t a[64], b[64];
	uint8_t *p = agent_rawev_word(a, agent_rawev_w0(LP_AEVENT_FREE | LP_ASOURCE_INT, 0, 48));
	p = agent_rawev_word(p, 0x7f12345678a0ull);
	uint8_t *q = agent_rawev_put(b, LP_AEVENT_FREE | LP_ASOURCE_INT, 0, 0, 0x7f12345678a0ull,
				     48, 0, 0);
	CHECK_EQ(p - a, 16);
	CHECK(q - b == p - a && memcmp(a, b, 16) == 0);
	p = agent_rawev_word(a, agent_rawev_w0(LP_ASOURCE_TRACE | LP_AEVENT_ALLOC, 17, 64));
	p = agent_rawev_word(p, 0x55aa00001230ull);
	q = agent_rawev_put(b, LP_AEVENT_ALLOC | LP_ASOURCE_TRACE, 17, 0, 0, 0,
			    0x55aa00001230ull, 64);
	CHECK(q - b == p - a && memcmp(a, b, (size_t)(p - a)) == 0);
	p = agent_rawev_word(a, agent_rawev_w0(LP_ASOURCE_LFUNC | LP_AEVENT_REALLOC, 300, 4096));
	p = agent_rawev_word(p, 0x7fee00000010ull);
	p = agent_rawev_word(p, 0x55aa00001230ull);
	p = agent_rawev_word(p, 2048);
	p = agent_rawev_word(p, 0x55aa00004000ull);
	q = agent_rawev_put(b, LP_AEVENT_REALLOC | LP_ASOURCE_LFUNC, 300, 0x7fee00000010ull,
			    0x55aa00001230ull, 2048, 0x55aa00004000ull, 4096);
	CHECK(q - b == p - a && memcmp(a, b, (size_t)(p - a)) == 0);
	/* A wide record: the line does not fit 24 bits. */
	q = agent_rawev_put(b, LP_AEVENT_ALLOC | LP_ASOURCE_LFUNC, 1u << 24, 0x10, 0, 0, 0x20, 8);
	CHECK_EQ(b[0], LP_AEVENT_ALLOC | LP_ASOURCE_LFUNC | AGENT_RAWEV_WIDE);
	CHECK_EQ(q - b, 5 * 8);
}

/*
** Events and blobs, the input cut at random record boundaries and inside blobs' bytes (what
** a producer may do), the output in random room from the least allowed up: the
** concatenated output is the stream.
*/
static void test_blobs_and_cuts(void)
{
	lp_uleb_fast_init();
	enum { N = 4000 };
	uint8_t *raw = malloc(N * (AGENT_RAWEV_MAX + 8 + 700)), *want = malloc(N * (64 + 700));
	/* Where each record ends in raw, and where its blob bytes start (0: an event). */
	size_t *ends = malloc(N * sizeof(*ends)), *bytes = malloc(N * sizeof(*bytes));
	size_t *pads = malloc(N * sizeof(*pads)); /* where a blob's padding starts */
	uint8_t *r = raw, *w = want;
	int nblobs = 0;
	for (int i = 0; i < N; i++) {
		bytes[i] = 0;
		if (unit_rand() % 4 == 0) {
			size_t len = unit_rand() % 3 == 0 ? 0 : unit_rand() % 700;
			blob(&r, &w, len);
			bytes[i] = (size_t)(r - raw);
			pads[i] = bytes[i] - AGENT_RAWEV_BLOB_PAD(len);
			nblobs++;
		} else {
			random_event(&r, &w);
		}
		ends[i] = (size_t)(r - raw);
	}
	for (int i = N - 1; i >= 0; i--)
		if (bytes[i]) /* blob(): bytes[i] was set after the payload: move it back */
			bytes[i] = (i ? ends[i - 1] : 0) + 8;
	CHECK(nblobs > N / 8);
	size_t total = (size_t)(r - raw), wlen = (size_t)(w - want);
	int inside = 0, in_pad = 0;
	for (int round = 0; round < 20; round++) {
		struct agent_rawev_enc e = { 0 };
		uint8_t *got = malloc(wlen + 64), out[512];
		size_t glen = 0, pos = 0;
		int rec = 0;
		while (pos < total && !e.bad) {
			int k = rec + (int)(unit_rand() % 7);
			if (k >= N)
				k = N - 1;
			size_t cut = ends[k];
			/* Inside the blob's bytes, past where the input stands. */
			size_t lo = (bytes[k] > pos ? bytes[k] : pos) + 1;
			if (bytes[k] && lo < ends[k] && unit_rand() % 2) {
				cut = lo + unit_rand() % (ends[k] - lo);
				inside++;
				in_pad += cut > pads[k];
				rec = k;
			} else {
				rec = k + 1;
			}
			while (pos < cut && !e.bad) {
				size_t cap = AGENT_RAWEV_ENC_MAX + unit_rand() % (sizeof(out) -
									  AGENT_RAWEV_ENC_MAX);
				size_t olen;
				pos += agent_rawev_encode(&e, raw + pos, cut - pos, out, cap, &olen);
				CHECK(olen <= cap);
				memcpy(got + glen, out, olen);
				glen += olen;
			}
		}
		CHECK_EQ(e.bad, 0);
		CHECK_EQ(e.blob_left, 0);
		CHECK_EQ(e.blob_pad, 0);
		CHECK_EQ(glen, wlen);
		CHECK(glen == wlen && memcmp(got, want, wlen) == 0);
		free(got);
	}
	CHECK(inside > 100);
	CHECK(in_pad > 10); /* some cuts fell inside a blob's padding */
	free(pads);
	free(bytes);
	free(ends);
	free(raw);
	free(want);
}

static void test_bad_input(void)
{
	uint8_t raw[64], out[128];
	size_t olen;
	/* An event cut short: bad, all of the input used. */
	struct agent_rawev_enc e = { 0 };
	uint8_t *p = agent_rawev_put(raw, LP_AEVENT_ALLOC | LP_ASOURCE_TRACE, 3, 0, 0, 0, 0x1000,
				     8);
	CHECK_EQ(agent_rawev_encode(&e, raw, (size_t)(p - raw) - 1, out, sizeof(out), &olen),
		 (size_t)(p - raw) - 1);
	CHECK_EQ(e.bad, 1);
	CHECK_EQ(olen, 0);
	/* A Lua function's allocation (24 bytes) cut to 16: the fast path must not read it. */
	e.bad = 0;
	p = agent_rawev_put(raw, LP_AEVENT_ALLOC | LP_ASOURCE_LFUNC, 12, 0x7f0000001000ull, 0, 0,
			    0x55aa00001230ull, 64);
	CHECK_EQ(p - raw, 24);
	CHECK_EQ(agent_rawev_encode(&e, raw, 16, out, sizeof(out), &olen), 16);
	CHECK_EQ(e.bad, 1);
	CHECK_EQ(olen, 0);
	/* A header that is no event's: the symbol table's, an unknown source. */
	unsigned heads[] = { LP_AEVENT_SYMTAB | LP_ASOURCE_LFUNC, LP_AEVENT_ALLOC | (5 << 2),
			     0x21, 0xff };
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		memset(raw, 0, sizeof(raw));
		raw[0] = (uint8_t)heads[i];
		e.bad = 0;
		e.blob_left = 0;
		CHECK_EQ(agent_rawev_encode(&e, raw, sizeof(raw), out, sizeof(out), &olen),
			 sizeof(raw));
		CHECK_EQ(e.bad, 1);
	}
	/* Fewer than 8 bytes where a record starts. */
	e.bad = 0;
	CHECK_EQ(agent_rawev_encode(&e, raw, 5, out, sizeof(out), &olen), 5);
	CHECK_EQ(e.bad, 1);
}

int main(void)
{
	RUN(test_every_event_encodes_like_the_writer);
	RUN(test_light_path_forms);
	RUN(test_blobs_and_cuts);
	RUN(test_bad_input);
	return UNIT_RESULT();
}
