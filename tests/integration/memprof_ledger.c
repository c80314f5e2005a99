/*
** memprof_ledger: checks that an exact-mode memory stream is a complete ledger of the heap
** (memprof_ledger.sh). Every block the stream allocates is tracked; a free or reallocation
** must name it with the size it was given, a new block must not start where a live one
** does, and an address freed must not be freed again before a block is made there. A
** missed free shows as a new block over a live one; a missed allocation, as a second free
** of its address (or a size that disagrees, when a block of the stream's was there); frees
** of blocks made before the profile are counted (of-older) for the caller to bound. Prints
** the counts (and the first few faults) and exits 1 on any fault, 2 when the stream cannot
** be read.
**
** usage: memprof_ledger STREAM
*/
#define _GNU_SOURCE
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "stream/input.h"
#include "stream/parse.h"
#include "util/addrmap.h"

#include "luaprof/format.h"

struct ledger {
	struct lp_addrmap live;  /* address -> size (a), 1 (b): blocks the stream made */
	struct lp_addrmap dead;  /* addresses freed since (blocks of the stream's and older
				  * ones), until a block is made there again */
	uint64_t allocs, reallocs, frees, events;
	uint64_t before;         /* frees and reallocations of blocks made before the profile */
	uint64_t faults;
	uint64_t live_bytes;
};

static void fault(struct ledger *l, const struct lp_mem_event *ev, const char *what,
		  uint64_t addr, uint64_t want, uint64_t got)
{
	if (l->faults++ < 8)
		printf("fault at offset %" PRIu64 ": %s: block 0x%" PRIx64 " size %" PRIu64
		       ", event says %" PRIu64 "\n",
		       ev->offset, what, addr, want, got);
}

/* The old block of a free or reallocation goes. */
static int gone(struct ledger *l, const struct lp_mem_event *ev)
{
	/* LuaJIT frees what it never allocated as (NULL, 0): the lexer's buffers after
	 * loading bytecode. Recorded as is (so does Tarantool's memprof). */
	if (!ev->oaddr && !ev->osize)
		return 0;
	struct lp_addrmap_entry *e = lp_addrmap_get(&l->live, ev->oaddr);
	if (e) {
		if (e->a != ev->osize)
			fault(l, ev, "freed with another size than it was made with", ev->oaddr,
			      e->a, ev->osize);
		l->live_bytes -= e->a;
		lp_addrmap_remove(&l->live, ev->oaddr);
	} else if (lp_addrmap_get(&l->dead, ev->oaddr)) {
		/* Freed before and not made since: its allocation was missed. */
		fault(l, ev, "freed twice with no allocation between", ev->oaddr, 0, ev->osize);
	} else {
		l->before++; /* made before the profile */
	}
	return lp_addrmap_put(&l->dead, ev->oaddr, 0, 0);
}

static int made(struct ledger *l, const struct lp_mem_event *ev)
{
	struct lp_addrmap_entry *e = lp_addrmap_get(&l->live, ev->naddr);
	if (e)
		fault(l, ev, "made over a live block (a free was missed)", ev->naddr, e->a,
		      ev->nsize);
	lp_addrmap_remove(&l->dead, ev->naddr);
	l->live_bytes += ev->nsize - (e ? e->a : 0);
	return lp_addrmap_put(&l->live, ev->naddr, ev->nsize, 1);
}

static int on_event(void *ctx, const struct lp_mem_event *ev)
{
	struct ledger *l = ctx;
	l->events++;
	int rc = 0;
	switch (ev->event) {
	case LP_AEVENT_ALLOC:
		l->allocs++;
		rc = made(l, ev);
		break;
	case LP_AEVENT_REALLOC:
		l->reallocs++;
		rc = gone(l, ev);
		if (!rc)
			rc = made(l, ev);
		break;
	case LP_AEVENT_FREE:
		l->frees++;
		rc = gone(l, ev);
		break;
	}
	return rc;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: memprof_ledger STREAM\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		perror(argv[1]);
		return 2;
	}
	struct lp_input in;
	char msg[512];
	if (lp_input_open_fd(&in, fd, argv[1]) != LP_OK) {
		lp_input_message(&in, msg, sizeof(msg));
		fprintf(stderr, "%s\n", msg);
		return 2;
	}
	struct ledger l;
	memset(&l, 0, sizeof(l));
	struct lp_parse_handlers h = { .ctx = &l, .mem_event = on_event };
	struct lp_parse_stats st;
	int rc = lp_parse_stream(&in, &h, &st);
	if (rc != LP_OK) {
		lp_input_message(&in, msg, sizeof(msg));
		fprintf(stderr, "%s\n", msg);
		return 2;
	}
	lp_input_close(&in);
	printf("events %" PRIu64 " allocs %" PRIu64 " reallocs %" PRIu64 " frees %" PRIu64
	       " of-older %" PRIu64 " live %zu blocks %" PRIu64 " bytes faults %" PRIu64 "\n",
	       l.events, l.allocs, l.reallocs, l.frees, l.before, l.live.count, l.live_bytes,
	       l.faults);
	lp_addrmap_free(&l.live);
	lp_addrmap_free(&l.dead);
	return l.faults ? 1 : 0;
}
