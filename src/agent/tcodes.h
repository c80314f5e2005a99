/*
** Trace code extents: the machine code of the traces a profile's stacks met, written as the
** extension's tcode records so that the report names a trace's frame in a host stack after
** the trace (docs/FORMAT.md, "tcode").
*/
#ifndef AGENT_TCODES_H
#define AGENT_TCODES_H

#include <stdint.h>

#include "stream/wbuf.h"
#include "vm/luajit_trace.h"

#define AGENT_TCODE_SLOTS 1024

/* Open addressing by trace number, zeroed to start; an extent that finds no room within a
 * few probes is not kept (its frames stay raw addresses, or are left out). */
struct agent_tcodes {
	struct agent_tcode {
		uint64_t mcode; /* 0 = empty */
		uint32_t size, traceno;
	} slot[AGENT_TCODE_SLOTS];
};

/* Notes t's code (nothing for a trace without code). Async-signal-safe: no allocation. */
void agent_tcodes_note(struct agent_tcodes *s, const struct lp_lj_trace *t);
/* The same from a trace's number and code. */
void agent_tcodes_note_code(struct agent_tcodes *s, uint32_t traceno, uint64_t mcode,
			    uint32_t size);
/* One tcode record per extent noted. */
void agent_tcodes_write(const struct agent_tcodes *s, struct lp_wbuf *w);

#endif
