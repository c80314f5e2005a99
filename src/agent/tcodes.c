/*
** Trace code keys for the extension's kcode records.
*/
#include "agent/tcodes.h"

#include <stdlib.h>
#include <string.h>

#include "stream/writer.h"

/* Slots looked at for a trace before it goes without a tag. */
#define PROBES 16

struct agent_tcode *agent_tcodes_slot(struct agent_tcodes *s, const struct agent_tcode_id *id,
				      int *fresh)
{
	*fresh = 0;
	if (!s->tag || !id->mcode || !id->size || LP_HOST_KEYED(id->mcode + id->size))
		return NULL;
	uint64_t h = (id->mcode ^ (uint64_t)id->traceno << 32) * UINT64_C(0x9e3779b97f4a7c15);
	uint32_t *empty = NULL;
	for (unsigned i = 0; i < PROBES; i++) {
		uint32_t *t = &s->slot[((h >> 40) + i) & (AGENT_TCODE_SLOTS - 1)];
		if (!*t) {
			empty = t;
			break;
		}
		struct agent_tcode *c = &s->tag[*t - 1];
		if (c->id.mcode == id->mcode && c->id.traceno == id->traceno &&
		    c->id.size == id->size && c->id.startpt == id->startpt &&
		    c->id.startpc == id->startpc)
			return c;
	}
	if (s->ntags == AGENT_TCODE_TAGS)
		return NULL;
	/* A new trace: into a table that is at most half full (emptied else, its traces
	 * tagged anew when met again). */
	if (!empty || s->used >= AGENT_TCODE_SLOTS / 2) {
		memset(s->slot, 0, sizeof(s->slot));
		s->used = 0;
		empty = &s->slot[(h >> 40) & (AGENT_TCODE_SLOTS - 1)];
	}
	struct agent_tcode *c = &s->tag[s->ntags++];
	c->id = *id;
	c->proto = id->startpt;
	c->line = 0;
	*empty = s->ntags;
	s->used++;
	*fresh = 1;
	return c;
}

void agent_tcodes_reset(struct agent_tcodes *s)
{
	if (!s->tag)
		s->tag = malloc(AGENT_TCODE_TAGS * sizeof(*s->tag));
	if (s->used)
		memset(s->slot, 0, sizeof(s->slot));
	s->used = s->ntags = 0;
}

void agent_tcodes_free(struct agent_tcodes *s)
{
	free(s->tag);
	memset(s, 0, sizeof(*s));
}

void agent_tcodes_write(const struct agent_tcodes *s, struct lp_wbuf *w)
{
	for (uint32_t i = 0; i < s->ntags; i++) {
		const struct agent_tcode *c = &s->tag[i];
		uint8_t rec[64];
		size_t n = lp_uleb_encode(c->id.traceno, rec);
		n += lp_uleb_encode(agent_tcodes_key(s, c, c->id.mcode), rec + n);
		n += lp_uleb_encode(c->id.size, rec + n);
		n += lp_uleb_encode(c->proto, rec + n);
		n += lp_uleb_encode(c->line, rec + n);
		lp_write_ext_record(w, LP_EXT_KCODE, rec, n);
	}
}
