/*
** LuaJIT traces and the snapshot lookup (machine-code address -> bytecode PC -> line).
*/
#include "vm/luajit_trace.h"

#include <string.h>

#define SNAP_FRAME  0x010000u /* SnapEntry flags: a frame's slot (FR2: its link), */
#define SNAP_CONT   0x020000u /* a continuation's slot (FR2: its PC) */
#define REF_BIAS    0x8000u   /* IR refs below it are constants */
/* An IR instruction (IRIns, 8 bytes) holds its type at byte 4 and its opcode at byte 5;
 * a function constant is IR_KGC (24 in every 2.1 build: the opcode list has not changed
 * since PROF was added) of type IRT_FUNC (8). */
#define IRINS_T     4
#define IRINS_O     5
#define IR_KGC      24u
#define IR_KNUM     28u /* a frame link's constant in FR2 */
#define IRT_FUNC    8u
#define IRT_TYPE    0x1fu
#define MAX_SNAPENT 256       /* entries of one snapshot we look at (nent is a u8) */

int lp_lj_trace_read(const struct lp_lj_vm *vm, const struct lp_mem *m, uint32_t traceno,
		     struct lp_lj_trace *t)
{
	const struct lp_lj_layout *lay = vm->lay;
	unsigned char b[128];
	uint64_t arr, T;
	uint32_t size;

	if (lay->t_size > sizeof(b))
		return LP_LJ_EINVAL;
	if (lp_mem_u64(m, vm->J + lay->j_trace, &arr) ||
	    lp_mem_u32(m, vm->J + lay->j_sizetrace, &size))
		return LP_LJ_EREAD;
	if (traceno == 0 || traceno >= size || arr == 0)
		return LP_LJ_ENONE;
	if (lp_mem_u64(m, arr + 8 * (uint64_t)traceno, &T))
		return LP_LJ_EREAD;
	if (T == 0)
		return LP_LJ_ENONE;
	if (lp_mem_read(m, T, b, lay->t_size))
		return LP_LJ_EREAD;
	if (b[lay->t_gct] != LP_LJ_GCT_TRACE || lp_get16(b, lay->t_traceno) != traceno)
		return LP_LJ_EINVAL;
	t->addr = T;
	t->traceno = traceno;
	t->mcode = lp_get64(b, lay->t_mcode);
	t->szmcode = lp_get32(b, lay->t_szmcode);
	t->startpt = lp_get64(b, lay->t_startpt);
	t->startpc = lp_get64(b, lay->t_startpc);
	t->ir = lp_get64(b, lay->t_ir);
	t->snap = lp_get64(b, lay->t_snap);
	t->snapmap = lp_get64(b, lay->t_snapmap);
	t->nsnap = lp_get16(b, lay->t_nsnap);
	t->spadjust = lp_get16(b, lay->t_spadjust);
	t->root = lp_get16(b, lay->t_root);
	t->link = lp_get16(b, lay->t_link);
	if (t->mcode == 0 || t->mcode + t->szmcode < t->mcode)
		return LP_LJ_EINVAL;
	return LP_LJ_OK;
}

int lp_lj_trace_find(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t ip,
		     struct lp_lj_trace *t)
{
	uint32_t size;

	if (lp_mem_u32(m, vm->J + vm->lay->j_sizetrace, &size))
		return LP_LJ_EREAD;
	if (size > 65536)
		return LP_LJ_EINVAL;
	for (uint32_t n = 1; n < size; n++)
		if (lp_lj_trace_read(vm, m, n, t) == LP_LJ_OK && lp_lj_trace_has(t, ip))
			return LP_LJ_OK;
	return LP_LJ_ENONE;
}

static int proto_holds(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t pt,
		       uint64_t pc, struct lp_lj_proto *p)
{
	return pt != 0 && lp_lj_proto_read(vm, m, pt, p) == LP_LJ_OK && pc >= p->bc &&
	       pc < p->bc + 4 * (uint64_t)p->sizebc;
}

/* Snapshot snapno of t: its entries (at most MAX_SNAPENT; none when they cannot be read),
 * bytecode PC (the instruction an exit there resumes at) and, when bslot is not NULL, its
 * innermost frame's base in slots above the base frame's. */
static int snap_read(const struct lp_lj_vm *vm, const struct lp_mem *m,
		     const struct lp_lj_trace *t, uint32_t snapno, uint32_t *ent, uint8_t *nent,
		     uint64_t *pc, uint8_t *bslot)
{
	const struct lp_lj_layout *lay = vm->lay;
	unsigned char s[16];
	uint64_t pcv, map;

	if (snapno >= t->nsnap || lay->snap_size > sizeof(s))
		return LP_LJ_ENONE;
	if (lp_mem_read(m, t->snap + snapno * (uint64_t)lay->snap_size, s, lay->snap_size))
		return LP_LJ_EREAD;
	*nent = s[lay->snap_nent];
	map = t->snapmap + 4 * (uint64_t)lp_get32(s, lay->snap_mapofs);
	/* GC64: the PC follows the entries as a 64-bit value shifted left by 8. */
	if (lp_mem_u64(m, map + 4 * (uint64_t)*nent, &pcv))
		return LP_LJ_EREAD;
	*pc = pcv >> 8;
	if (bslot)
		*bslot = (uint8_t)pcv; /* the innermost frame's base, slots above the base frame's */
	if (*pc == 0 || (*pc & 3) != 0)
		return LP_LJ_EINVAL;
	if (*nent > 0 && lp_mem_read(m, map, ent, 4 * (size_t)*nent))
		*nent = 0; /* the PC alone */
	return LP_LJ_OK;
}

/* The snapshot in effect at ip in t (the rightmost whose machine code offset is <= ip's, as
 * LuaJIT's own unwinder finds it), read by snap_read. */
static int snap_at(const struct lp_lj_vm *vm, const struct lp_mem *m, const struct lp_lj_trace *t,
		   uint64_t ip, uint32_t *snapno, uint32_t *ent, uint8_t *nent, uint64_t *pc)
{
	const struct lp_lj_layout *lay = vm->lay;
	uint32_t ofs, lo = 0, hi = t->nsnap;

	if (!lp_lj_trace_has(t, ip) || t->nsnap == 0 || t->snap == 0 || t->snapmap == 0)
		return LP_LJ_ENONE;
	ofs = (uint32_t)(ip - t->mcode);
	/* Rightmost snapshot with mcofs <= ofs (mcofs grows with the snapshot number). */
	while (lo < hi) {
		uint32_t mid = (lo + hi) / 2;
		uint16_t mcofs;
		if (lp_mem_read(m, t->snap + mid * (uint64_t)lay->snap_size + lay->snap_mcofs, &mcofs,
				sizeof(mcofs)))
			return LP_LJ_EREAD;
		if (ofs < mcofs)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo == 0)
		return LP_LJ_ENONE;
	*snapno = lo - 1;
	return snap_read(vm, m, t, *snapno, ent, nent, pc, NULL);
}

/* The 64-bit payload of IR constant ref of t when its opcode is op (GC64: in the IR slot
 * after it). Only such a constant is read: a slot may refer to any kind of IR. */
static int ir_k64(const struct lp_mem *m, const struct lp_lj_trace *t, uint32_t ref, uint8_t op,
		  uint8_t type, uint64_t *v)
{
	uint8_t ins[8];
	return ref < REF_BIAS && t->ir != 0 && lp_mem_read(m, t->ir + 8 * (uint64_t)ref, ins, 8) == 0 &&
	       ins[IRINS_O] == op && (type == 0xff || (ins[IRINS_T] & IRT_TYPE) == type) &&
	       lp_mem_u64(m, t->ir + 8 * ((uint64_t)ref + 1), v) == 0;
}

/* The function constant in slot s of the snapshot's entries: a Lua function's prototype
 * (*ffid 0), or a builtin's number (*ffid >= 2, pcall say); 0 for anything else. */
static uint64_t slot_func(const struct lp_lj_vm *vm, const struct lp_mem *m,
			  const struct lp_lj_trace *t, const uint32_t *ent, unsigned nent,
			  uint32_t s, uint8_t *ffid)
{
	const struct lp_lj_layout *lay = vm->lay;
	uint64_t fn, fpc;
	uint8_t gct;
	for (unsigned i = 0; i < nent; i++) {
		if (ent[i] >> 24 != s)
			continue;
		if (!ir_k64(m, t, ent[i] & 0xffff, IR_KGC, IRT_FUNC, &fn))
			return 0;
		fn &= LP_LJ_GCVMASK;
		if (lp_mem_u8(m, fn + lay->fn_gct, &gct) || gct != LP_LJ_GCT_FUNC ||
		    lp_mem_u8(m, fn + lay->fn_ffid, ffid) || *ffid == LP_LJ_FFID_C)
			return 0;
		if (*ffid != LP_LJ_FFID_LUA)
			return *ffid;
		if (lp_mem_u64(m, fn + lay->fn_pc, &fpc))
			return 0;
		return fpc - lay->pt_size;
	}
	return 0;
}

/* pc, in LuaJIT's frame convention (one past the instruction), lies in pt's bytecode. */
static int frame_pc_in(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t pt,
		       uint64_t pc, struct lp_lj_proto *p)
{
	return pt != 0 && lp_lj_proto_read(vm, m, pt, p) == LP_LJ_OK && pc > p->bc &&
	       pc <= p->bc + 4 * (uint64_t)p->sizebc;
}

/* A snapshot's frames: the base frame's and those of the calls inlined above it. */
struct chain {
	unsigned n;                                  /* frames, the base frame's first */
	uint64_t id[LP_LJ_TRACE_MAX_INLINED + 1];    /* prototype, or a builtin's number */
	uint8_t ffid[LP_LJ_TRACE_MAX_INLINED + 1];   /* 0: a Lua function */
	uint64_t pc[LP_LJ_TRACE_MAX_INLINED + 1];    /* a Lua frame's PC, 0 until known */
	uint32_t slot[LP_LJ_TRACE_MAX_INLINED + 1];  /* the frame's function's slot */
	uint8_t nparams[LP_LJ_TRACE_MAX_INLINED + 1];/* a Lua function's parameters */
};

#define FRAME_PCALL  6 /* a link's type (low 3 bits): a function pcall or xpcall called */
#define FRAME_PCALLH 7

/*
** The frames at a snapshot, from its entries, up the slots (the base frame's prototype
** given). The recorder leaves an inlined call's frame link in the slot above the callee
** (FR2: a KNUM, flagged SNAP_FRAME): for a call from Lua code, the return PC into the
** caller; for the function a pcall or xpcall runs, the pcall frame's type. A metamethod's
** (or a stitched call's) continuation leaves its PC into the caller (SNAP_CONT) below the
** callee. Other links (vararg frames, a continuation's callee's own) add no frame; slot 1
** is the base frame's own link. 0, or -1 (a callee no Lua function or builtin constant,
** a link where the frame below cannot make that call, too many frames).
*/
static int chain_of(const struct lp_lj_vm *vm, const struct lp_mem *m,
		    const struct lp_lj_trace *t, const uint32_t *ent, unsigned nent,
		    uint64_t base_pt, struct chain *c)
{
	c->n = 1;
	c->id[0] = base_pt;
	c->ffid[0] = LP_LJ_FFID_LUA;
	c->pc[0] = 0;
	c->slot[0] = 0;
	for (unsigned i = 0; i < nent; i++) {
		uint32_t e = ent[i], s = e >> 24, at;
		uint64_t link;
		unsigned top = c->n - 1;
		if (s < 2 || !(e & (SNAP_FRAME | SNAP_CONT)) ||
		    !ir_k64(m, t, e & 0xffff, IR_KNUM, 0xff, &link))
			continue;
		if ((e & SNAP_CONT) || (link & 3) == 0) {
			/* A call from Lua code: the caller is at link. */
			if (c->ffid[top] != LP_LJ_FFID_LUA || c->pc[top] || link == 0)
				return -1;
			c->pc[top] = link;
			at = (e & SNAP_CONT) ? s + 1 : s - 1;
		} else if ((link & 7) == FRAME_PCALL || (link & 7) == FRAME_PCALLH) {
			if (c->ffid[top] == LP_LJ_FFID_LUA)
				return -1;
			at = s - 1;
		} else {
			continue;
		}
		if (c->n == LP_LJ_TRACE_MAX_INLINED + 1)
			return -1;
		c->id[c->n] = slot_func(vm, m, t, ent, nent, at, &c->ffid[c->n]);
		if (c->id[c->n] == 0)
			return -1;
		c->slot[c->n] = at;
		c->nparams[c->n] = 0;
		if (c->ffid[c->n] == LP_LJ_FFID_LUA &&
		    lp_mem_u8(m, c->id[c->n] + vm->lay->pt_numparams, &c->nparams[c->n]))
			return -1;
		c->pc[c->n++] = 0;
	}
	return 0;
}

/* The lowest slot whose entry differs between snapshots a and b (its IR, its flags, or
 * being there at all), or 256 when none does. The entries go up the slots, one a slot. */
static uint32_t first_diff(const uint32_t *a, unsigned na, const uint32_t *b, unsigned nb)
{
	unsigned i = 0;
	while (i < na && i < nb && a[i] == b[i])
		i++;
	uint32_t sa = i < na ? a[i] >> 24 : 256, sb = i < nb ? b[i] >> 24 : 256;
	return sa < sb ? sa : sb;
}

/* The frames at snapshot entries ent (PC pc), checked: 0, or -1 when they do not check out
 * (chain_of's cases; an innermost frame no Lua function's; a PC outside its function's
 * bytecode). The snapshot's PC is the innermost frame's, a Lua function's (a builtin the
 * trace calls, stitched, has its caller's PC: not one of those frames). */
static int snap_chain(const struct lp_lj_vm *vm, const struct lp_mem *m,
		      const struct lp_lj_trace *t, const uint32_t *ent, unsigned nent, uint64_t pc,
		      uint64_t base_pt, struct chain *c)
{
	struct lp_lj_proto p;
	if (chain_of(vm, m, t, ent, nent, base_pt, c) != 0)
		return -1;
	unsigned top = c->n - 1;
	if (c->ffid[top] != LP_LJ_FFID_LUA)
		return -1;
	c->pc[top] = pc + 4;
	for (unsigned k = base_pt == 0; k < c->n; k++)
		if (c->ffid[k] == LP_LJ_FFID_LUA && !frame_pc_in(vm, m, c->id[k], c->pc[k], &p))
			return -1;
	return 0;
}

/*
** How many of chain c's calls (at snapshot snapno, entries ent) are sure to be running.
** Code runs under a snapshot until the next one, and an inlined call may return in
** between (no guard, no snapshot): only the calls the next snapshot still holds, link for
** link, with the slots of every frame below the callee and the callee's arguments
** unchanged, are sure to be running. A caller's slots change only while the caller runs,
** that is once its callee has returned (the same call site called again, in a loop the
** compiler unrolled, changes the loop's variables); a call made again with the very same
** values, nothing else changed in between, cannot be told from the first. The last
** snapshot's calls all return before the trace ends (a loop's back edge, a link to
** another trace, a return: each at the base frame's level). A call not sure to be running
** is left out, and its caller put at the call: a frame missing, never one that is not on
** the stack.
*/
static unsigned sure_depth(const struct lp_lj_vm *vm, const struct lp_mem *m,
			   const struct lp_lj_trace *t, uint32_t snapno, const uint32_t *ent,
			   unsigned nent, uint64_t base_pt, const struct chain *c)
{
	struct chain d;
	uint32_t next[MAX_SNAPENT];
	uint64_t npc;
	uint8_t nnext = 0;
	unsigned keep = 0, n = c->n - 1;
	if (n == 0 || snap_read(vm, m, t, snapno + 1, next, &nnext, &npc, NULL) != LP_LJ_OK ||
	    chain_of(vm, m, t, next, nnext, base_pt, &d) != 0)
		return 0;
	uint32_t fd = first_diff(ent, nent, next, nnext);
	while (keep < n && keep + 1 < d.n && d.id[keep + 1] == c->id[keep + 1] &&
	       d.ffid[keep + 1] == c->ffid[keep + 1] && d.pc[keep] == c->pc[keep] &&
	       d.slot[keep + 1] == c->slot[keep + 1] &&
	       c->slot[keep + 1] + 2u + c->nparams[keep + 1] <= fd)
		keep++;
	return keep;
}

/* The n innermost calls of chain c into fr[] (innermost first, at most max) and the base
 * frame's PC (c->pc[n] is the snapshot's PC, or the call of the first left out). n, or -1
 * when more than max. */
static int chain_frames(const struct lp_lj_vm *vm, const struct lp_mem *m,
			const struct chain *c, unsigned n, struct lp_lj_trace_frame *fr,
			unsigned max, uint64_t *base_pc)
{
	struct lp_lj_proto p;
	if (n > max)
		return -1;
	*base_pc = c->pc[0];
	for (unsigned k = 0; k < n; k++) {
		struct lp_lj_trace_frame *f = &fr[k];
		unsigned j = n - k;
		f->pt = c->id[j];
		f->ffid = c->ffid[j];
		f->pc = c->pc[j];
		f->line = 0;
		if (f->ffid == LP_LJ_FFID_LUA &&
		    (lp_lj_proto_read(vm, m, f->pt, &p) != LP_LJ_OK ||
		     lp_lj_pc_line(vm, m, &p, f->pc, &f->line) != LP_LJ_OK))
			f->line = 0;
	}
	return (int)n;
}

/* The location and frames at snapshot snapno (entries ent, PC pc) for
 * lp_lj_trace_locate_inlined and lp_lj_trace_locate_exit: all of its calls (an exit), or
 * those sure to be running between it and the next. */
static int locate_snap(const struct lp_lj_vm *vm, const struct lp_mem *m,
		       const struct lp_lj_trace *t, const uint32_t *ent, uint8_t nent, uint64_t pc,
		       int all, uint64_t base_pt, struct lp_lj_trace_loc *loc,
		       struct lp_lj_trace_frame *fr, unsigned max, int *nfr, uint64_t *base_pc)
{
	/* On the stack (0.7 KB a chain): the CPU profiler's signal handler and sampled mode's
	 * capture on the VM's thread may both be in here. */
	struct chain c;
	struct lp_lj_proto p;
	int found = 0;

	loc->pc = pc + 4;
	int ok = snap_chain(vm, m, t, ent, nent, pc, base_pt, &c) == 0;
	if (ok && fr)
		*nfr = chain_frames(vm, m, &c,
				    all ? c.n - 1
					: sure_depth(vm, m, t, loc->snapno, ent, nent, base_pt, &c),
				    fr, max, base_pc);
	/* The function the snapshot's PC is in: the innermost call it holds, when its frames
	 * check out, sure or not (the location is approximate by nature); else the base frame's
	 * function, else the trace's start. */
	if (ok && c.n > 1 && lp_lj_proto_read(vm, m, c.id[c.n - 1], &p) == LP_LJ_OK) {
		found = 1;
		loc->pt = c.id[c.n - 1];
		loc->inlined = 1;
	}
	if (!found && proto_holds(vm, m, base_pt, pc, &p)) {
		found = 1;
		loc->pt = base_pt;
	}
	if (!found && proto_holds(vm, m, t->startpt, pc, &p)) {
		found = 1;
		loc->pt = t->startpt;
	}
	if (found && lp_lj_pc_line(vm, m, &p, loc->pc, &loc->line) != LP_LJ_OK)
		loc->line = 0;
	return LP_LJ_OK;
}

int lp_lj_trace_locate_inlined(const struct lp_lj_vm *vm, const struct lp_mem *m,
			       const struct lp_lj_trace *t, uint64_t ip, uint64_t base_pt,
			       struct lp_lj_trace_loc *loc, struct lp_lj_trace_frame *fr,
			       unsigned max, int *nfr, uint64_t *base_pc)
{
	uint32_t ent[MAX_SNAPENT];
	uint64_t pc;
	uint8_t nent = 0;
	int rc;

	memset(loc, 0, sizeof(*loc));
	*nfr = -1;
	if ((rc = snap_at(vm, m, t, ip, &loc->snapno, ent, &nent, &pc)) != LP_LJ_OK)
		return rc;
	return locate_snap(vm, m, t, ent, nent, pc, 0, base_pt, loc, fr, max, nfr, base_pc);
}

int lp_lj_trace_locate_exit(const struct lp_lj_vm *vm, const struct lp_mem *m,
			    const struct lp_lj_trace *t, uint32_t exitno, uint64_t base_pt,
			    struct lp_lj_trace_loc *loc, struct lp_lj_trace_frame *fr,
			    unsigned max, int *nfr, uint64_t *base_pc)
{
	uint32_t ent[MAX_SNAPENT];
	uint64_t pc;
	uint8_t nent = 0;
	int rc;

	memset(loc, 0, sizeof(*loc));
	*nfr = -1;
	if (t->snap == 0 || t->snapmap == 0)
		return LP_LJ_ENONE;
	if ((rc = snap_read(vm, m, t, exitno, ent, &nent, &pc, NULL)) != LP_LJ_OK)
		return rc;
	loc->snapno = exitno;
	return locate_snap(vm, m, t, ent, nent, pc, 1, base_pt, loc, fr, max, nfr, base_pc);
}

int lp_lj_trace_exit_frames(const struct lp_lj_vm *vm, const struct lp_mem *m,
			    const struct lp_lj_trace *t, uint32_t snapno,
			    struct lp_lj_trace_frame *fr, unsigned max, uint64_t *base_pc,
			    uint64_t *resume_pc, unsigned *delta)
{
	struct chain c; /* on the stack: see lp_lj_trace_locate_inlined */
	uint32_t ent[MAX_SNAPENT];
	uint64_t pc;
	uint8_t nent = 0, bslot = 0;
	if (snap_read(vm, m, t, snapno, ent, &nent, &pc, &bslot) != LP_LJ_OK)
		return -1;
	*delta = bslot;
	*resume_pc = pc + 4;
	if (snap_chain(vm, m, t, ent, nent, pc, 0, &c) != 0)
		return -1;
	return chain_frames(vm, m, &c, c.n - 1, fr, max, base_pc);
}

int lp_lj_trace_inlined(const struct lp_lj_vm *vm, const struct lp_mem *m,
			const struct lp_lj_trace *t, uint64_t ip, uint64_t base_pt,
			struct lp_lj_trace_frame *fr, unsigned max, uint64_t *base_pc)
{
	struct lp_lj_trace_loc loc;
	int n;
	lp_lj_trace_locate_inlined(vm, m, t, ip, base_pt, &loc, fr, max, &n, base_pc);
	return n;
}

int lp_lj_trace_locate(const struct lp_lj_vm *vm, const struct lp_mem *m,
		       const struct lp_lj_trace *t, uint64_t ip, uint64_t base_pt,
		       struct lp_lj_trace_loc *loc)
{
	int n;
	uint64_t bpc;
	return lp_lj_trace_locate_inlined(vm, m, t, ip, base_pt, loc, NULL, 0, &n, &bpc);
}
