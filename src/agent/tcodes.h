/*
** Trace code keys: the machine code of each trace a profile's stacks met, under a tag of
** its own, so that the report names a trace's frame in a host stack after the trace that
** ran there when the stack was taken (docs/FORMAT.md, "kcode"). A flush reuses both trace
** numbers and code addresses; the host stacks carry the frames keyed by the tag.
*/
#ifndef AGENT_TCODES_H
#define AGENT_TCODES_H

#include <stdint.h>

#include "luaprof/format.h"
#include "stream/wbuf.h"
#include "vm/luajit_trace.h"

/* Tags 1..AGENT_TCODE_TAGS: a tag fills the 17 bits above a user address. */
#define AGENT_TCODE_TAGS ((1u << (64 - LP_HOST_KEY_SHIFT)) - 1)
/* The traces looked up by identity: emptied when half full (the traces of a program that
 * flushes are mostly gone by then; one met again gets a new tag, which names it too). */
#define AGENT_TCODE_SLOTS 8192

/* A trace as its frames are keyed: its number, code and start (the same trace compiled
 * again at the same place after a flush is the same: its frames read the same). */
struct agent_tcode_id {
	uint64_t mcode, startpt, startpc;
	uint32_t size, traceno;
};

/* What a tag names: one kcode record. */
struct agent_tcode {
	struct agent_tcode_id id;
	uint64_t proto; /* the key naming id.startpt in the stream */
	uint32_t line;  /* where the trace starts */
};

struct agent_tcodes {
	uint32_t ntags;                  /* tags given: tag[0, ntags) */
	uint32_t used;                   /* slots filled */
	uint32_t slot[AGENT_TCODE_SLOTS]; /* open addressing by code and number: a tag, 0 empty */
	struct agent_tcode *tag;         /* AGENT_TCODE_TAGS of them (agent_tcodes_reset) */
};

/* t's identity. */
static inline struct agent_tcode_id agent_tcodes_id(const struct lp_lj_trace *t)
{
	return (struct agent_tcode_id){ t->mcode, t->startpt, t->startpc, t->szmcode, t->traceno };
}

/* 1 if addr is in the code of trace id. */
static inline int agent_tcodes_has(const struct agent_tcode_id *id, uint64_t addr)
{
	return addr >= id->mcode && addr - id->mcode < id->size;
}

/*
** The record of trace id's code, made with id when new (*fresh then 1: the caller sets
** proto and line), or NULL when the trace has no code or no tag is left (its frames then
** stay plain addresses). Async-signal-safe: no allocation.
*/
struct agent_tcode *agent_tcodes_slot(struct agent_tcodes *s, const struct agent_tcode_id *id,
				      int *fresh);

/* addr, inside the code of the trace of record c, as host stacks carry it. */
static inline uint64_t agent_tcodes_key(const struct agent_tcodes *s,
					const struct agent_tcode *c, uint64_t addr)
{
	return addr | (uint64_t)(c - s->tag + 1) << LP_HOST_KEY_SHIFT;
}

/* Empties the table before a profile, its records' memory taken the first time (address
 * space: pages are used as tags are given). Without it, no trace is keyed. */
void agent_tcodes_reset(struct agent_tcodes *s);
/* Gives the records' memory back. */
void agent_tcodes_free(struct agent_tcodes *s);

/* One kcode record per tag given. */
void agent_tcodes_write(const struct agent_tcodes *s, struct lp_wbuf *w);

#endif
