/*
** Hash map from 64-bit addresses to two 64-bit values, with removal.
**
** Used for live heap blocks (address -> size, allocation site) and address caches, where
** entries come and go at event rate; linear probing with backward-shift deletion keeps
** lookups short without tombstones.
*/
#ifndef LP_ADDRMAP_H
#define LP_ADDRMAP_H

#include <stddef.h>
#include <stdint.h>

struct lp_addrmap_entry {
	uint64_t key;
	uint64_t a, b;
	int used;
};

struct lp_addrmap {
	struct lp_addrmap_entry *slots;
	size_t cap, count;
};

void lp_addrmap_free(struct lp_addrmap *m);
void lp_addrmap_clear(struct lp_addrmap *m);
/* Returns the entry for key or NULL. The pointer is valid until the next put/remove. */
struct lp_addrmap_entry *lp_addrmap_get(const struct lp_addrmap *m, uint64_t key);
/* Inserts or overwrites. Returns 0 or -ENOMEM. */
int lp_addrmap_put(struct lp_addrmap *m, uint64_t key, uint64_t a, uint64_t b);
/* Removes key if present; returns 1 if it was. */
int lp_addrmap_remove(struct lp_addrmap *m, uint64_t key);

#endif
