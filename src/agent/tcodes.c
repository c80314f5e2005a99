/*
** Trace code extents for the extension's tcode records.
*/
#include "agent/tcodes.h"

#include "stream/writer.h"

#define PROBES 8

void agent_tcodes_note_code(struct agent_tcodes *s, uint32_t traceno, uint64_t mcode,
			    uint32_t size)
{
	for (unsigned i = 0; mcode && size && i < PROBES; i++) {
		struct agent_tcode *c = &s->slot[(traceno + i) & (AGENT_TCODE_SLOTS - 1)];
		if (c->mcode == mcode && c->traceno == traceno && c->size == size)
			return;
		if (!c->mcode) {
			c->size = size;
			c->traceno = traceno;
			c->mcode = mcode;
			return;
		}
	}
}

void agent_tcodes_note(struct agent_tcodes *s, const struct lp_lj_trace *t)
{
	agent_tcodes_note_code(s, t->traceno, t->mcode, t->szmcode);
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
