/*
** Hash map from 64-bit addresses to two 64-bit values, with removal.
*/
#include "util/addrmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/iset.h"

void lp_addrmap_free(struct lp_addrmap *m)
{
	free(m->slots);
	m->slots = NULL;
	m->cap = m->count = 0;
}

void lp_addrmap_clear(struct lp_addrmap *m)
{
	if (m->slots)
		memset(m->slots, 0, m->cap * sizeof(*m->slots));
	m->count = 0;
}

static size_t home(const struct lp_addrmap *m, uint64_t key)
{
	return (size_t)lp_hash_u64(key) & (m->cap - 1);
}

struct lp_addrmap_entry *lp_addrmap_get(const struct lp_addrmap *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	for (size_t i = home(m, key);; i = (i + 1) & (m->cap - 1)) {
		struct lp_addrmap_entry *e = &m->slots[i];
		if (!e->used)
			return NULL;
		if (e->key == key)
			return e;
	}
}

static int resize(struct lp_addrmap *m, size_t ncap)
{
	struct lp_addrmap_entry *old = m->slots;
	size_t ocap = m->cap;
	m->slots = calloc(ncap, sizeof(*m->slots));
	if (!m->slots) {
		m->slots = old;
		return -ENOMEM;
	}
	m->cap = ncap;
	for (size_t i = 0; i < ocap; i++) {
		if (!old[i].used)
			continue;
		size_t j = home(m, old[i].key);
		while (m->slots[j].used)
			j = (j + 1) & (m->cap - 1);
		m->slots[j] = old[i];
	}
	free(old);
	return 0;
}

int lp_addrmap_put(struct lp_addrmap *m, uint64_t key, uint64_t a, uint64_t b)
{
	struct lp_addrmap_entry *e = lp_addrmap_get(m, key);
	if (e) {
		e->a = a;
		e->b = b;
		return 0;
	}
	if ((m->count + 1) * 10 > m->cap * 7 && resize(m, m->cap ? m->cap * 2 : 1024))
		return -ENOMEM;
	size_t i = home(m, key);
	while (m->slots[i].used)
		i = (i + 1) & (m->cap - 1);
	m->slots[i] = (struct lp_addrmap_entry){ key, a, b, 1 };
	m->count++;
	return 0;
}

int lp_addrmap_remove(struct lp_addrmap *m, uint64_t key)
{
	if (!m->cap)
		return 0;
	size_t mask = m->cap - 1, i = home(m, key);
	while (m->slots[i].used && m->slots[i].key != key)
		i = (i + 1) & mask;
	if (!m->slots[i].used)
		return 0;
	/* Backward-shift: pull later entries of the probe run into the hole. */
	size_t hole = i;
	for (size_t j = (i + 1) & mask; m->slots[j].used; j = (j + 1) & mask) {
		size_t h = home(m, m->slots[j].key);
		/* Move j into the hole unless its home lies cyclically in (hole, j]. */
		int stays = hole <= j ? (h > hole && h <= j) : (h > hole || h <= j);
		if (!stays) {
			m->slots[hole] = m->slots[j];
			hole = j;
		}
	}
	m->slots[hole].used = 0;
	m->count--;
	return 1;
}
