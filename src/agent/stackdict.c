/*
** Dictionary of distinct stacks ("lua-stack host-stack" bodies, as the stream encodes
** them), numbered in first-seen order and written as the extension's stack records. Used
** outside the signal handler: by the CPU profiler's writer thread (full stacks of TRACE
** samples) and by the memory profiler's sampled mode.
*/
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "luaprof/format.h"
#include "util/grow.h"

struct eqctx {
	const struct agent_stackdict *d;
	const uint8_t *p;
	size_t len;
	unsigned tag;
};

static int eq(const void *ctx, uint32_t idx)
{
	const struct eqctx *c = ctx;
	const struct agent_stackdict *d = c->d;
	return d->ent[idx].len == c->len && d->ent[idx].tag == c->tag &&
	       memcmp(d->body + d->ent[idx].off, c->p, c->len) == 0;
}

int agent_stackdict_intern(struct agent_stackdict *d, const uint8_t *body, size_t len,
			   unsigned tag, size_t max_bytes, uint32_t *id)
{
	struct eqctx c = { d, body, len, tag };
	uint64_t h = lp_hash_bytes(body, len, 0x5eed + tag);
	if (lp_iset_find(&d->index, h, eq, &c, id))
		return 0;
	if (d->nbody + len > max_bytes || d->nent >= UINT32_MAX - 1 ||
	    lp_grow((void **)&d->body, &d->bodycap, d->nbody + len, 1) ||
	    lp_grow((void **)&d->ent, &d->entcap, d->nent + 1, sizeof(*d->ent)) ||
	    lp_iset_insert(&d->index, h, (uint32_t)d->nent))
		return -1;
	memcpy(d->body + d->nbody, body, len);
	d->ent[d->nent].off = d->nbody;
	d->ent[d->nent].len = len;
	d->ent[d->nent].tag = tag;
	d->nbody += len;
	*id = (uint32_t)d->nent++;
	return 0;
}

void agent_stackdict_write_one(const struct agent_stackdict *d, struct lp_wbuf *w, size_t id)
{
	uint8_t tmp[10];
	size_t n = lp_uleb_encode(id, tmp);
	lp_wbuf_u8(w, LP_EXT_STACK);
	lp_wbuf_uleb(w, n + d->ent[id].len);
	lp_wbuf_bytes(w, tmp, n);
	lp_wbuf_bytes(w, d->body + d->ent[id].off, d->ent[id].len);
}

void agent_stackdict_write(const struct agent_stackdict *d, struct lp_wbuf *w)
{
	for (size_t i = 0; i < d->nent; i++)
		agent_stackdict_write_one(d, w, i);
}

void agent_stackdict_free(struct agent_stackdict *d)
{
	free(d->body);
	free(d->ent);
	lp_iset_free(&d->index);
	memset(d, 0, sizeof(*d));
}
