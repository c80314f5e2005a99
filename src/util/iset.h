/*
** Open-addressing hash index: maps a hash to indices of the caller's own array.
**
** The index stores no keys, only (hash, index) pairs; the caller supplies equality, so
** one structure serves strings, frames, stacks and addresses without copying them.
*/
#ifndef LP_ISET_H
#define LP_ISET_H

#include <stddef.h>
#include <stdint.h>

struct lp_iset_slot {
	uint32_t hash;
	uint32_t idx1; /* index + 1; 0 marks an empty slot */
};

struct lp_iset {
	struct lp_iset_slot *slots;
	size_t cap;    /* power of two, or 0 */
	size_t count;
};

typedef int (*lp_iset_eq)(const void *ctx, uint32_t idx);

void lp_iset_free(struct lp_iset *s);
/* Finds an index whose hash matches and eq() accepts; returns 1 and sets *idx if found. */
int lp_iset_find(const struct lp_iset *s, uint64_t hash, lp_iset_eq eq, const void *ctx,
		 uint32_t *idx);
/* Adds an index (not checked for presence). Returns 0 or -ENOMEM. */
int lp_iset_insert(struct lp_iset *s, uint64_t hash, uint32_t idx);

/* Hashing helpers. */
uint64_t lp_hash_bytes(const void *data, size_t len, uint64_t seed);
static inline uint64_t lp_hash_u64(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	x ^= x >> 33;
	return x;
}

#endif
