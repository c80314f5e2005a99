/*
** LuaJIT traces and the snapshot lookup (machine-code address -> bytecode PC -> line).
*/
#include "vm/luajit_trace.h"

#include <string.h>

#define SNAP_FRAME  0x010000u /* SnapEntry flag: the slot holds a frame's function */
#define REF_BIAS    0x8000u   /* IR refs below it are constants */
/* An IR instruction (IRIns, 8 bytes) holds its type at byte 4 and its opcode at byte 5;
 * a function constant is IR_KGC (24 in every 2.1 build: the opcode list has not changed
 * since PROF was added) of type IRT_FUNC (8). */
#define IRINS_T     4
#define IRINS_O     5
#define IR_KGC      24u
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

/* 1 and *p filled if fn is a Lua function whose bytecode holds pc (the snapshot's PC). */
static int func_holds(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t fn,
		      uint64_t pc, struct lp_lj_proto *p)
{
	const struct lp_lj_layout *lay = vm->lay;
	uint8_t gct, ffid;
	uint64_t fpc;

	if (lp_mem_u8(m, fn + lay->fn_gct, &gct) || gct != LP_LJ_GCT_FUNC ||
	    lp_mem_u8(m, fn + lay->fn_ffid, &ffid) || ffid != LP_LJ_FFID_LUA ||
	    lp_mem_u64(m, fn + lay->fn_pc, &fpc))
		return 0;
	return lp_lj_proto_read(vm, m, fpc - lay->pt_size, p) == LP_LJ_OK && pc >= p->bc &&
	       pc < p->bc + 4 * (uint64_t)p->sizebc;
}

static int proto_holds(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t pt,
		       uint64_t pc, struct lp_lj_proto *p)
{
	return pt != 0 && lp_lj_proto_read(vm, m, pt, p) == LP_LJ_OK && pc >= p->bc &&
	       pc < p->bc + 4 * (uint64_t)p->sizebc;
}

int lp_lj_trace_locate(const struct lp_lj_vm *vm, const struct lp_mem *m,
		       const struct lp_lj_trace *t, uint64_t ip, uint64_t base_pt,
		       struct lp_lj_trace_loc *loc)
{
	const struct lp_lj_layout *lay = vm->lay;
	uint32_t ofs, lo = 0, hi = t->nsnap, mapofs, ent[MAX_SNAPENT];
	unsigned char s[16];
	struct lp_lj_proto p;
	uint64_t pcv, pc, map;
	uint8_t nent;
	int found = 0;

	memset(loc, 0, sizeof(*loc));
	if (!lp_lj_trace_has(t, ip) || t->nsnap == 0 || t->snap == 0 || t->snapmap == 0 ||
	    lay->snap_size > sizeof(s))
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
	loc->snapno = lo - 1;
	if (lp_mem_read(m, t->snap + loc->snapno * (uint64_t)lay->snap_size, s, lay->snap_size))
		return LP_LJ_EREAD;
	mapofs = lp_get32(s, lay->snap_mapofs);
	nent = s[lay->snap_nent];
	map = t->snapmap + 4 * (uint64_t)mapofs;
	/* GC64: the PC follows the entries as a 64-bit value shifted left by 8. */
	if (lp_mem_u64(m, map + 4 * (uint64_t)nent, &pcv))
		return LP_LJ_EREAD;
	pc = pcv >> 8;
	if (pc == 0 || (pc & 3) != 0)
		return LP_LJ_EINVAL;
	loc->pc = pc + 4;

	/* Innermost inlined frame first: frame entries hold IR constants of the functions. */
	if (nent > 0 && lp_mem_read(m, map, ent, 4 * (size_t)nent) == 0) {
		unsigned best = 0;
		for (unsigned i = 0; i < nent; i++) {
			uint32_t e = ent[i], ref = e & 0xffff;
			uint64_t fn;
			if (!(e & SNAP_FRAME) || ref >= REF_BIAS || t->ir == 0)
				continue;
			/* A frame's slot may refer to another constant (a continuation frame's
			 * KPTR, say): only a function constant's payload is an object to read, and
			 * memprof reads plain memory (a KINT's 22 was followed into a SIGSEGV).
			 * GC64: a KGC constant's 64-bit GCRef is in the IR slot after it. */
			uint8_t ins[8];
			if (lp_mem_read(m, t->ir + 8 * (uint64_t)ref, ins, sizeof(ins)) ||
			    ins[IRINS_O] != IR_KGC || (ins[IRINS_T] & IRT_TYPE) != IRT_FUNC ||
			    lp_mem_u64(m, t->ir + 8 * ((uint64_t)ref + 1), &fn))
				continue;
			if ((e >> 24) >= best && func_holds(vm, m, fn & LP_LJ_GCVMASK, pc, &p)) {
				best = e >> 24;
				found = 1;
				loc->pt = p.pt;
				loc->inlined = 1;
			}
		}
		if (found && lp_lj_proto_read(vm, m, loc->pt, &p) != LP_LJ_OK)
			found = 0;
	}
	if (!found && proto_holds(vm, m, base_pt, pc, &p)) {
		found = 1;
		loc->pt = base_pt;
		loc->inlined = 0;
	}
	if (!found && proto_holds(vm, m, t->startpt, pc, &p)) {
		found = 1;
		loc->pt = t->startpt;
		loc->inlined = 0;
	}
	if (!found) {
		loc->pt = 0;
		loc->inlined = 0;
		return LP_LJ_OK;
	}
	if (lp_lj_pc_line(vm, m, &p, loc->pc, &loc->line) != LP_LJ_OK)
		loc->line = 0;
	return LP_LJ_OK;
}
