/*
** LuaJIT traces: J->trace[n] -> machine code range, stack adjustment and start location, and
** the snapshot lookup that maps an address inside a trace's machine code to the bytecode PC
** (and so the Lua line) the trace is working on.
**
** Async-signal-safe when the reader is, like the rest of the model (luajit.h).
*/
#ifndef LP_VM_LUAJIT_TRACE_H
#define LP_VM_LUAJIT_TRACE_H

#include "vm/luajit.h"

struct lp_lj_trace {
	uint64_t addr;     /* GCtrace */
	uint64_t mcode;    /* machine code [mcode, mcode + szmcode) */
	uint64_t startpt;  /* GCproto where recording started (symbol of the trace) */
	uint64_t startpc;  /* bytecode address where recording started */
	uint64_t ir, snap, snapmap; /* IR (indexed by biased refs), SnapShot[nsnap], SnapEntry[] */
	uint32_t szmcode;
	uint32_t traceno;
	uint16_t nsnap;
	uint16_t spadjust; /* native unwind from trace code: CFA = rsp + CFRAME_SIZE_JIT + this */
	uint16_t root;     /* root trace of a side trace, 0 for a root trace */
	uint16_t link;     /* trace jumped to at the end (0 none; == traceno for a loop) */
};

/* Reads J->trace[traceno] and checks it (gct byte, traceno field, mcode range). LP_LJ_ENONE
** for an empty slot or a number beyond J->sizetrace. */
int lp_lj_trace_read(const struct lp_lj_vm *vm, const struct lp_mem *m, uint32_t traceno,
		     struct lp_lj_trace *t);

static inline int lp_lj_trace_has(const struct lp_lj_trace *t, uint64_t ip)
{
	return ip >= t->mcode && ip - t->mcode < t->szmcode;
}

/* Finds the trace whose machine code contains ip by scanning J->trace (one read per slot:
** meant for out-of-process use or rare cases; a sampler normally knows the number from
** vmstate). LP_LJ_ENONE if none. */
int lp_lj_trace_find(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t ip,
		     struct lp_lj_trace *t);

struct lp_lj_trace_loc {
	uint64_t pc;     /* one past the instruction the trace resumes at on an exit from here:
			  * LuaJIT's frame convention, usable as leaf_pc for lp_lj_walk */
	uint64_t pt;     /* GCproto holding pc, 0 if it could not be determined */
	int32_t line;    /* current line (0 if pt is 0 or the proto has no line info) */
	uint32_t snapno; /* snapshot in effect at ip */
	uint8_t inlined; /* pt is a function inlined into the trace, not its start function */
};

/*
** Maps ip inside trace t to the snapshot in effect there (rightmost snapshot whose machine
** code offset is <= ip - mcode, as LuaJIT's own unwinder does) and to that snapshot's
** bytecode PC. The PC is attributed to the innermost function of the snapshot's frames that
** contains it, else to base_pt (the prototype of the frame at g->jit_base, 0 if unknown),
** else to the trace's start prototype. Approximate by nature: code between two guards is
** attributed to the later guard's snapshot region. LP_LJ_ENONE if ip is outside the trace
** or the trace has no snapshot.
*/
int lp_lj_trace_locate(const struct lp_lj_vm *vm, const struct lp_mem *m,
		       const struct lp_lj_trace *t, uint64_t ip, uint64_t base_pt,
		       struct lp_lj_trace_loc *loc);

/* A function a trace inlined: a Lua function at a PC in LuaJIT's frame convention, or a
 * builtin that runs one (pcall, xpcall). */
struct lp_lj_trace_frame {
	uint64_t pt;   /* GCproto; for a builtin, its number (ffid) */
	uint64_t pc;   /* one past the instruction: the snapshot's resume PC + 4 for the
			* innermost, the return PC of the call it made for the others */
	int32_t line;  /* its line (0 if the proto has no line info, or a builtin) */
	uint8_t ffid;  /* 0 (LP_LJ_FFID_LUA): a Lua function; else a builtin's number */
};

#define LP_LJ_TRACE_MAX_INLINED 32 /* frames of one snapshot looked at */

/*
** The frames trace t runs in at ip above its base frame (whose prototype base_pt is read
** from the stack at g->jit_base), by the snapshot in effect there: the functions the
** recorder inlined (and the builtins that run them: pcall, xpcall), whose frames exist only
** in the snapshot. Each frame's link there holds
** the return PC into the frame below, the call site as it was recorded (exact); the
** innermost frame is at the snapshot's PC (approximate, as lp_lj_trace_locate's). Only the
** calls the next snapshot still holds are sure to be running at ip (one may return between
** two snapshots): the others are left out, their caller at the call. Fills
** fr[] innermost first (at most max) and *base_pc, the base frame's PC; returns the number
** of inlined frames (0: the snapshot's PC is the base frame's), or -1 when the snapshot's
** frames do not check out (a PC outside its function's bytecode, a frame whose function is
** no Lua function constant, more than max). With base_pt 0 (unknown) the base frame's PC
** is not checked.
*/
int lp_lj_trace_inlined(const struct lp_lj_vm *vm, const struct lp_mem *m,
			const struct lp_lj_trace *t, uint64_t ip, uint64_t base_pt,
			struct lp_lj_trace_frame *fr, unsigned max, uint64_t *base_pc);

/*
** The frames a trace exit through snapshot snapno of t restores: fr[] (innermost first, at
** most max) the functions inlined above the base frame, all of them (an exit restores every
** frame of its snapshot, unlike code between two snapshots: lp_lj_trace_inlined);
** *base_pc the base frame's PC (the call into the first of them, else where the
** interpreter resumes); *resume_pc where the interpreter resumes, one past the instruction;
** *delta the innermost frame's base in slots above the base frame's (L->base moves there
** once the frames are restored). Returns the number of inlined frames, or -1 when the
** snapshot's frames do not check out (the base frame's PC is not checked: its function is
** not known here).
*/
int lp_lj_trace_exit_frames(const struct lp_lj_vm *vm, const struct lp_mem *m,
			    const struct lp_lj_trace *t, uint32_t snapno,
			    struct lp_lj_trace_frame *fr, unsigned max, uint64_t *base_pc,
			    uint64_t *resume_pc, unsigned *delta);

/* Both at once, the snapshot read once (a CPU sample in a trace wants both): fills loc and
 * returns as lp_lj_trace_locate does; *nfr gets what lp_lj_trace_inlined would return
 * (-1 as well when fr is NULL: not asked, and not computed). */
int lp_lj_trace_locate_inlined(const struct lp_lj_vm *vm, const struct lp_mem *m,
			       const struct lp_lj_trace *t, uint64_t ip, uint64_t base_pt,
			       struct lp_lj_trace_loc *loc, struct lp_lj_trace_frame *fr,
			       unsigned max, int *nfr, uint64_t *base_pc);

/*
** As lp_lj_trace_locate_inlined, at the snapshot an exit numbered exitno restores (an exit's
** number is its snapshot's, lj_trace_exit), not at a code address: code in the exit's stub,
** past the guard that failed. All of its frames run, as for lp_lj_trace_exit_frames.
** LP_LJ_ENONE when t has no such snapshot.
*/
int lp_lj_trace_locate_exit(const struct lp_lj_vm *vm, const struct lp_mem *m,
			    const struct lp_lj_trace *t, uint32_t exitno, uint64_t base_pt,
			    struct lp_lj_trace_loc *loc, struct lp_lj_trace_frame *fr,
			    unsigned max, int *nfr, uint64_t *base_pc);

#endif
