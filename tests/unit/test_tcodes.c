/*
** The agent's trace code keys (src/agent/tcodes.c): a tag per trace identity, found again
** while the identity is in the table, a new one once the table was emptied, none when the
** tags are spent; one kcode record per tag.
*/
#include "../../src/agent/tcodes.c"

#include <stdlib.h>

#include "unit.h"

static struct agent_tcodes tc;

static struct agent_tcode_id id_of(uint32_t n)
{
	/* A flush's traces: numbers from 1 again, code at the same few places. */
	return (struct agent_tcode_id){ 0x5500000000ull + (n % 64) * 0x1000, 0x7f0000 + n * 64,
					0x7f0040 + n * 64, 0x200, 1 + n % 100 };
}

/* Every identity gets a tag of its own (tags 1, 2, ...), the same one while the table holds
 * it; the table is emptied every AGENT_TCODE_SLOTS / 2 identities, so thousands of
 * traces met over a profile all keep tags (the first version kept 8192 in all, and a
 * flushing program's frames went raw once they were used: 34 % of one's samples). */
static void test_tags(void)
{
	agent_tcodes_reset(&tc);
	CHECK(tc.tag != NULL);
	const uint32_t n = 3 * AGENT_TCODE_SLOTS;
	uint64_t prev_key = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct agent_tcode_id id = id_of(i);
		int fresh = 0;
		struct agent_tcode *c = agent_tcodes_slot(&tc, &id, &fresh);
		CHECK(c != NULL && fresh);
		if (!c)
			return;
		c->line = i;
		uint64_t key = agent_tcodes_key(&tc, c, id.mcode + 8);
		CHECK_EQ(key >> LP_HOST_KEY_SHIFT, (uint64_t)i + 1);
		CHECK_EQ(LP_HOST_UNKEYED(key), id.mcode + 8);
		CHECK(key != prev_key);
		prev_key = key;
		/* Met again: the same record. */
		struct agent_tcode *again = agent_tcodes_slot(&tc, &id, &fresh);
		CHECK(again == c && !fresh);
	}
	CHECK_EQ(tc.ntags, n);
	/* The first identity left the table long ago: a new tag names it. */
	struct agent_tcode_id first = id_of(0);
	int fresh = 0;
	struct agent_tcode *c = agent_tcodes_slot(&tc, &first, &fresh);
	CHECK(c != NULL && fresh);
	CHECK_EQ(tc.ntags, n + 1);
	/* No code, or code above user addresses: no tag. */
	struct agent_tcode_id none = { 0, 1, 2, 16, 3 };
	CHECK(agent_tcodes_slot(&tc, &none, &fresh) == NULL);
	struct agent_tcode_id high = { 1ull << LP_HOST_KEY_SHIFT, 1, 2, 16, 3 };
	CHECK(agent_tcodes_slot(&tc, &high, &fresh) == NULL);
	/* Tags spent: frames stay plain. */
	tc.ntags = AGENT_TCODE_TAGS;
	struct agent_tcode_id last = id_of(n + 5);
	last.traceno = 100000;
	CHECK(agent_tcodes_slot(&tc, &last, &fresh) == NULL);
	tc.ntags = n + 1;
}

static size_t into(const void **data, size_t len, void *ctx)
{
	(void)data;
	(void)ctx;
	return len;
}

/* One kcode record per tag, in tag order: type, length, traceno key size proto line. */
static void test_records(void)
{
	agent_tcodes_reset(&tc);
	for (uint32_t i = 0; i < 3; i++) {
		struct agent_tcode_id id = id_of(i);
		int fresh;
		struct agent_tcode *c = agent_tcodes_slot(&tc, &id, &fresh);
		c->proto = 0x1000 + i;
		c->line = 10 + i;
	}
	static uint8_t buf[4096];
	struct lp_wbuf w;
	lp_wbuf_init(&w, buf, sizeof(buf), into, NULL);
	agent_tcodes_write(&tc, &w);
	const uint8_t *p = buf;
	for (uint32_t i = 0; i < 3; i++) {
		CHECK_EQ(p[0], LP_EXT_KCODE);
		size_t len = p[1];
		const uint8_t *f = p + 2;
		uint64_t v[5];
		for (int k = 0; k < 5; k++) {
			v[k] = 0;
			for (unsigned sh = 0;; sh += 7) {
				v[k] |= (uint64_t)(*f & 0x7f) << sh;
				if (!(*f++ & 0x80))
					break;
			}
		}
		CHECK_EQ((size_t)(f - p - 2), len);
		struct agent_tcode_id id = id_of(i);
		CHECK_EQ(v[0], id.traceno);
		CHECK_EQ(v[1], id.mcode | (uint64_t)(i + 1) << LP_HOST_KEY_SHIFT);
		CHECK_EQ(v[2], id.size);
		CHECK_EQ(v[3], 0x1000 + i);
		CHECK_EQ(v[4], 10 + i);
		p = f;
	}
	CHECK_EQ((size_t)(p - buf), (size_t)(w.pos - buf));
	agent_tcodes_free(&tc);
	CHECK(tc.tag == NULL && tc.ntags == 0);
}

int main(void)
{
	RUN(test_tags);
	RUN(test_records);
	return UNIT_RESULT();
}
