/*
** Open-addressing hash index.
*/
#include "util/iset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void lp_iset_free(struct lp_iset *s)
{
	free(s->slots);
	s->slots = NULL;
	s->cap = s->count = 0;
}

int lp_iset_find(const struct lp_iset *s, uint64_t hash, lp_iset_eq eq, const void *ctx,
		 uint32_t *idx)
{
	if (!s->cap)
		return 0;
	uint32_t h = (uint32_t)hash;
	for (size_t i = h & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
		const struct lp_iset_slot *sl = &s->slots[i];
		if (!sl->idx1)
			return 0;
		if (sl->hash == h && eq(ctx, sl->idx1 - 1)) {
			*idx = sl->idx1 - 1;
			return 1;
		}
	}
}

static void put(struct lp_iset_slot *slots, size_t cap, uint32_t h, uint32_t idx1)
{
	size_t i = h & (cap - 1);
	while (slots[i].idx1)
		i = (i + 1) & (cap - 1);
	slots[i].hash = h;
	slots[i].idx1 = idx1;
}

int lp_iset_insert(struct lp_iset *s, uint64_t hash, uint32_t idx)
{
	if ((s->count + 1) * 4 > s->cap * 3) {
		size_t ncap = s->cap ? s->cap * 2 : 64;
		struct lp_iset_slot *ns = calloc(ncap, sizeof(*ns));
		if (!ns)
			return -ENOMEM;
		for (size_t i = 0; i < s->cap; i++)
			if (s->slots[i].idx1)
				put(ns, ncap, s->slots[i].hash, s->slots[i].idx1);
		free(s->slots);
		s->slots = ns;
		s->cap = ncap;
	}
	put(s->slots, s->cap, (uint32_t)hash, idx + 1);
	s->count++;
	return 0;
}

uint64_t lp_hash_bytes(const void *data, size_t len, uint64_t seed)
{
	/* Eight bytes per step: stacks hashed per sample make this hot. */
	const unsigned char *p = data;
	uint64_t h = 0x9e3779b97f4a7c15ULL ^ seed ^ (len * 0xff51afd7ed558ccdULL);
	for (; len >= 8; p += 8, len -= 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		h = (h ^ lp_hash_u64(w)) * 0x100000001b3ULL;
	}
	uint64_t tail = 0;
	memcpy(&tail, p, len);
	return lp_hash_u64(h ^ tail ^ ((uint64_t)len << 59));
}
