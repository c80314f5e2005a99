/*
** Full stacks of TRACE, GC and JIT compiler samples: from the handler through a ring to
** the writer thread, kept as a dictionary until stop, written as the extension's stack,
** tsample, gsample and jsample records.
**
** Why not in the sample itself: ljp v2 gives a TRACE sample its trace number and location
** only, and a GC or compiler (RECORD, OPT, ASM) sample its host stack only, and
** Tarantool's parser must keep reading our files. So the sample stays as the format says, and its Lua frames plus its host stack
** travel on the side, keyed by the sample's ordinal among the samples of its kind.
**
** Cost: stacks repeat (a hot loop's trace is sampled under the same callers), so each
** distinct one is kept once and a sample costs the writer thread two ULEB128s, mostly 2-4
** bytes, held in memory until stop. When the ring is full (the writer thread is behind)
** or the dictionary reaches its cap, the sample keeps only its trace frame and is counted
** in agent_tstacks_lost.
*/
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "luaprof/format.h"
#include "stream/writer.h"
#include "util/grow.h"

/* Ring: records of [length:u32][kind:u8 ordinal:uleb body]; head and tail only grow. */
#define RING_CAP (2u << 20)
/* The dictionary's bytes, past which new distinct stacks are not kept. */
#define DICT_MAX (64u << 20)
/* tsample records are cut at about this size (the reader's limit is 1 MiB). */
#define TSAMPLE_CHUNK (60u << 10)

/* The (gap id) pairs of one kind of sample, cut into records of about TSAMPLE_CHUNK. */
struct pairs {
	uint8_t *buf;
	size_t n, cap;
	size_t *cuts;                   /* offsets in buf where a record ends */
	size_t ncuts, cutcap;
	size_t chunk_start;
	uint64_t next_ordinal;
};

static struct {
	uint8_t *ring;
	_Atomic size_t head, tail;      /* producer (handler), consumer (writer thread) */
	_Atomic uint64_t lost;
	/* Writer thread only. */
	struct agent_stackdict dict;    /* the distinct stacks */
	struct pairs kind[AGENT_TSTACK__MAX];
	uint8_t *rec;                   /* one record out of the ring */
} tsq;

int agent_tstacks_init(void)
{
	agent_tstacks_free();
	tsq.ring = malloc(RING_CAP);
	tsq.rec = malloc(AGENT_SAMPLE_MAX + 16);
	if (!tsq.ring || !tsq.rec) {
		agent_tstacks_free();
		return -1;
	}
	return 0;
}

void agent_tstacks_free(void)
{
	free(tsq.ring);
	free(tsq.rec);
	agent_stackdict_free(&tsq.dict);
	for (int k = 0; k < AGENT_TSTACK__MAX; k++) {
		free(tsq.kind[k].buf);
		free(tsq.kind[k].cuts);
	}
	memset(&tsq, 0, sizeof(tsq));
}

uint64_t agent_tstacks_lost(void)
{
	return atomic_load(&tsq.lost);
}

int agent_tstacks_put(const uint8_t *rec, size_t len)
{
	if (!tsq.ring)
		return -1;
	size_t head = atomic_load_explicit(&tsq.head, memory_order_relaxed);
	size_t tail = atomic_load_explicit(&tsq.tail, memory_order_acquire);
	if (len > UINT32_MAX || RING_CAP - (head - tail) < len + 4) {
		atomic_fetch_add_explicit(&tsq.lost, 1, memory_order_relaxed);
		return -1;
	}
	uint8_t hdr[4] = { (uint8_t)len, (uint8_t)(len >> 8), (uint8_t)(len >> 16),
			   (uint8_t)(len >> 24) };
	/* Byte loops: memcpy is not on POSIX's async-signal-safe list. */
	for (size_t i = 0; i < 4; i++)
		tsq.ring[(head + i) & (RING_CAP - 1)] = hdr[i];
	for (size_t i = 0; i < len; i++)
		tsq.ring[(head + 4 + i) & (RING_CAP - 1)] = rec[i];
	atomic_store_explicit(&tsq.head, head + 4 + len, memory_order_release);
	return (head + 4 + len) - tail > RING_CAP / 2; /* 1: time to wake the writer thread */
}

static int append_pair(struct pairs *q, uint64_t ordinal, uint64_t id)
{
	uint8_t tmp[20];
	size_t n = lp_uleb_encode(ordinal - q->next_ordinal, tmp);
	n += lp_uleb_encode(id, tmp + n);
	if (lp_grow((void **)&q->buf, &q->cap, q->n + n, 1))
		return -1;
	memcpy(q->buf + q->n, tmp, n);
	q->n += n;
	q->next_ordinal = ordinal + 1;
	if (q->n - q->chunk_start >= TSAMPLE_CHUNK) {
		if (lp_grow((void **)&q->cuts, &q->cutcap, q->ncuts + 1, sizeof(*q->cuts)))
			return -1;
		q->cuts[q->ncuts++] = q->chunk_start = q->n;
	}
	return 0;
}

/* One record: kind, ordinal (uleb), then the body. */
static void take(const uint8_t *rec, size_t len)
{
	uint64_t ordinal = 0;
	size_t i = 1;
	if (len < 2 || rec[0] >= AGENT_TSTACK__MAX) {
		atomic_fetch_add(&tsq.lost, 1); /* cannot happen: the handler writes them */
		return;
	}
	struct pairs *q = &tsq.kind[rec[0]];
	for (unsigned shift = 0; i < len && i < 11; shift += 7) {
		uint8_t b = rec[i++];
		ordinal |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80))
			break;
	}
	uint32_t id;
	if (agent_stackdict_intern(&tsq.dict, rec + i, len - i, 0, DICT_MAX, &id) != 0) {
		atomic_fetch_add(&tsq.lost, 1);
		return;
	}
	if (ordinal < q->next_ordinal || append_pair(q, ordinal, id))
		atomic_fetch_add(&tsq.lost, 1);
}

void agent_tstacks_drain(void)
{
	if (!tsq.ring)
		return;
	size_t tail = atomic_load_explicit(&tsq.tail, memory_order_relaxed);
	size_t head = atomic_load_explicit(&tsq.head, memory_order_acquire);
	while (head - tail >= 4) {
		size_t len = 0;
		for (size_t i = 0; i < 4; i++)
			len |= (size_t)tsq.ring[(tail + i) & (RING_CAP - 1)] << (8 * i);
		if (len > AGENT_SAMPLE_MAX + 16 || head - tail < 4 + len)
			break; /* cannot happen: the producer publishes whole records */
		for (size_t i = 0; i < len; i++)
			tsq.rec[i] = tsq.ring[(tail + 4 + i) & (RING_CAP - 1)];
		tail += 4 + len;
		atomic_store_explicit(&tsq.tail, tail, memory_order_release);
		take(tsq.rec, len);
	}
}

void agent_tstacks_write(struct lp_wbuf *w)
{
	static const uint8_t type[AGENT_TSTACK__MAX] = { LP_EXT_TSAMPLE, LP_EXT_GSAMPLE,
							 LP_EXT_JSAMPLE, LP_EXT_XSAMPLE };
	agent_stackdict_write(&tsq.dict, w);
	for (int k = 0; k < AGENT_TSTACK__MAX; k++) {
		const struct pairs *q = &tsq.kind[k];
		size_t from = 0;
		for (size_t c = 0; c <= q->ncuts; c++) {
			size_t to = c < q->ncuts ? q->cuts[c] : q->n;
			if (to > from)
				lp_write_ext_record(w, type[k], q->buf + from, to - from);
			from = to;
		}
	}
}
