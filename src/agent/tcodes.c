/*
** Trace code keys for the extension's kcode records.
*/
#include "agent/tcodes.h"

#include <string.h>

#include "stream/writer.h"

/* Slots looked at for a trace before it is given up: a full table only leaves frames
 * unnamed. */
#define PROBES 16

_Static_assert(AGENT_TCODE_SLOTS < (1u << (64 - LP_HOST_KEY_SHIFT)), "tags fit above addresses");

struct agent_tcode *agent_tcodes_slot(struct agent_tcodes *s, const struct agent_tcode_id *id,
				      int *fresh)
{
	*fresh = 0;
	if (!id->mcode || !id->size || LP_HOST_KEYED(id->mcode + id->size))
		return NULL;
	uint64_t h = (id->mcode ^ (uint64_t)id->traceno << 32) * UINT64_C(0x9e3779b97f4a7c15);
	for (unsigned i = 0; i < PROBES; i++) {
		struct agent_tcode *c = &s->slot[((h >> 40) + i) & (AGENT_TCODE_SLOTS - 1)];
		if (!c->id.mcode) {
			c->id = *id;
			c->proto = id->startpt;
			c->line = 0;
			s->used++;
			*fresh = 1;
			return c;
		}
		if (c->id.mcode == id->mcode && c->id.traceno == id->traceno &&
		    c->id.size == id->size && c->id.startpt == id->startpt &&
		    c->id.startpc == id->startpc)
			return c;
	}
	return NULL;
}

void agent_tcodes_reset(struct agent_tcodes *s)
{
	if (s->used)
		memset(s, 0, sizeof(*s));
}

void agent_tcodes_write(const struct agent_tcodes *s, struct lp_wbuf *w)
{
	for (size_t i = 0; s->used && i < AGENT_TCODE_SLOTS; i++) {
		const struct agent_tcode *c = &s->slot[i];
		uint8_t rec[64];
		size_t n;
		if (!c->id.mcode)
			continue;
		n = lp_uleb_encode(c->id.traceno, rec);
		n += lp_uleb_encode(agent_tcodes_key(s, c, c->id.mcode), rec + n);
		n += lp_uleb_encode(c->id.size, rec + n);
		n += lp_uleb_encode(c->proto, rec + n);
		n += lp_uleb_encode(c->line, rec + n);
		lp_write_ext_record(w, LP_EXT_KCODE, rec, n);
	}
}
