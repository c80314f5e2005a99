/*
** Memory profile aggregation: events by allocation site, live heap blocks, and the
** memprof text report (ALLOCATIONS / REALLOCATIONS / DEALLOCATIONS / HEAP SUMMARY / ALIASES).
**
** The text report reproduces the sections, numbers and wording of Tarantool's
** `luajit -tm`. Where that parser's order is arbitrary (Lua's unstable table.sort over
** hash order) ties are broken deterministically: section entries by first appearance,
** HEAP SUMMARY entries by their latest allocation, newest first.
** Memory grows with the number of allocation sites and live blocks, not with events.
*/
#ifndef LP_MEMPROF_H
#define LP_MEMPROF_H

#include <stdio.h>

#include "report/profile.h"
#include "report/symtab.h"
#include "stream/parse.h"

struct lp_memprof;

struct lp_memprof_opts {
	int leak_only;       /* only HEAP SUMMARY (and ALIASES) */
	int human_readable;  /* B / KiB / MiB / GiB */
};

/* The symtab is borrowed and must outlive the aggregator. */
struct lp_memprof *lp_memprof_new(struct lp_symtab *st);
void lp_memprof_free(struct lp_memprof *m);
/* Accounts one alloc / free / realloc event. Returns 0 or -ENOMEM. */
int lp_memprof_event(struct lp_memprof *m, const struct lp_mem_event *ev);
/* Writes the text report; returns 0 or -errno on a write error. */
int lp_memprof_report(struct lp_memprof *m, const struct lp_memprof_opts *o, FILE *out);
/* Bytes allocated (new blocks and reallocations' new sizes), all and in JIT traces. */
void lp_memprof_alloc_bytes(const struct lp_memprof *m, uint64_t *all, uint64_t *traces);
/*
** Returns a profile with one single-frame stack per allocation site and the columns
** alloc_space, alloc_objects, inuse_space, inuse_objects (in-use = blocks still live at
** the end of the stream). NULL on ENOMEM.
*/
struct lp_profile *lp_memprof_profile(struct lp_memprof *m);

#endif
