/*
** Trace code extents for the extension's tcode records.
*/
#include "agent/tcodes.h"

#include "stream/writer.h"

#define PROBES 8

void agent_tcodes_note(struct agent_tcodes *s, const struct lp_lj_trace *t)
{
	for (unsigned i = 0; t->mcode && t->szmcode && i < PROBES; i++) {
		struct agent_tcode *c = &s->slot[(t->traceno + i) & (AGENT_TCODE_SLOTS - 1)];
		if (c->mcode == t->mcode && c->traceno == t->traceno && c->size == t->szmcode)
			return;
		if (!c->mcode) {
			c->size = t->szmcode;
			c->traceno = t->traceno;
			c->mcode = t->mcode;
			return;
		}
	}
}

void agent_tcodes_write(const struct agent_tcodes *s, struct lp_wbuf *w)
{
	for (size_t i = 0; i < AGENT_TCODE_SLOTS; i++) {
		const struct agent_tcode *c = &s->slot[i];
		uint8_t rec[32];
		size_t n;
		if (!c->mcode)
			continue;
		n = lp_uleb_encode(c->traceno, rec);
		n += lp_uleb_encode(c->mcode, rec + n);
		n += lp_uleb_encode(c->size, rec + n);
		lp_write_ext_record(w, LP_EXT_TCODE, rec, n);
	}
}
