/*
** LuaJIT stack walker: frames, C-frame chain, coroutine resumer.
**
** GC64 frame = two slots below the frame's base: the function (tagged TValue) at base-16
** and the link at base-8, which is either the return PC into a Lua caller (type bits 0) or a
** byte delta to the caller's link slot tagged with the frame type (vm-internals.md §3.1).
*/
#include "vm/luajit_walk.h"

#include <string.h>

#define MAX_CFRAME_SKIP 64 /* bound on consecutive frameless lua_cpcall C frames */
#define WIN_SLOTS 64       /* stack window: 512 bytes, one read serves several frames */

/* -- Stack window -----------------------------------------------------------------
** Each read costs a syscall with the process_vm_readv reader (~1 us), whatever its size up
** to a page, so link and function slots are fetched through a window of the stack below the
** current frame. The window never extends below L->stack nor above the walk's start. */

struct win {
	uint64_t lo, hi;           /* target range held, [lo, hi); empty when lo == hi */
	uint64_t v[WIN_SLOTS];
};

static int win_fill(const struct lp_mem *m, struct win *w, uint64_t stack, uint64_t a,
		    void *out, size_t len);

/* Reads the 8-byte-aligned range [a, a + len) of the stack, len <= 32. Inline: a walk reads
 * twice or more a frame, from the window nearly always. */
static inline int win_read(const struct lp_mem *m, struct win *w, uint64_t stack, uint64_t a,
			   void *out, size_t len)
{
	if (a < w->lo || a + len > w->hi)
		return win_fill(m, w, stack, a, out, len);
	memcpy(out, (const char *)w->v + (a - w->lo), len);
	return 0;
}

/* win_read outside the window: the window moved to end at a + len. */
static int win_fill(const struct lp_mem *m, struct win *w, uint64_t stack, uint64_t a,
		    void *out, size_t len)
{
	uint64_t hi = a + len, lo = hi - 8 * WIN_SLOTS;
	if (lo < stack || lo > hi)
		lo = stack;
	if (a < lo || lp_mem_read(m, lo, w->v, hi - lo)) {
		w->lo = w->hi = 0;
		return lp_mem_read(m, a, out, len);
	}
	w->lo = lo;
	w->hi = hi;
	memcpy(out, (const char *)w->v + (a - w->lo), len);
	return 0;
}

/* -- C frame chain ------------------------------------------------------------------ */

/* State of the parallel walk down the cframe chain: cf is the C frame of the VM entry that
** runs the frames currently being visited. */
struct cfwalk {
	uint64_t cf;   /* raw C frame, 0 when the chain is exhausted */
	int ok;        /* 0 once the chain could not be followed: stop trusting cf */
	int have_nres; /* nres below is cf's NRES */
	int32_t nres;
};

static void cf_fail(struct cfwalk *c, unsigned *flags)
{
	c->ok = 0;
	c->cf = 0;
	*flags |= LP_LJ_WALK_ECFRAME;
}

/* Steps to the previous (outer) C frame. */
static void cf_step(const struct lp_lj_vm *vm, const struct lp_mem *m, struct cfwalk *c,
		    unsigned *flags)
{
	uint64_t prev;

	if (!c->ok || c->cf == 0)
		return;
	if (lp_mem_u64(m, c->cf + vm->lay->cf_prev, &prev)) {
		cf_fail(c, flags);
		return;
	}
	prev &= LP_LJ_CFRAME_RAWMASK;
	if (prev != 0 && prev <= c->cf) {
		cf_fail(c, flags);
		return;
	}
	c->cf = prev;
	c->have_nres = 0;
}

/* Skips C frames of lua_cpcall calls that pushed no Lua frame (NRES < 0 holds -savestack of
** L->top at entry) while frame slot f lies below their stack level: they own no frame link,
** so crossing links must not consume them. */
static void cf_normalize(const struct lp_lj_vm *vm, const struct lp_mem *m, struct cfwalk *c,
			 uint64_t f, uint64_t stack, unsigned *flags)
{
	for (unsigned i = 0; c->ok && c->cf != 0; i++) {
		if (i == MAX_CFRAME_SKIP) {
			cf_fail(c, flags);
			return;
		}
		if (!c->have_nres) {
			if (lp_mem_read(m, c->cf + vm->lay->cf_nres, &c->nres, sizeof(c->nres))) {
				cf_fail(c, flags);
				return;
			}
			c->have_nres = 1;
		}
		if (c->nres >= 0 || f >= stack + (uint64_t)(-(int64_t)c->nres))
			return;
		cf_step(vm, m, c, flags);
	}
}

/* SAVE_PC of the current C frame, 0 if none or if it still holds the entry marker (L). */
static uint64_t cf_pc(const struct lp_lj_vm *vm, const struct lp_mem *m, const struct cfwalk *c)
{
	uint64_t v[2]; /* SAVE_L, SAVE_PC: adjacent */

	if (!c->ok || c->cf == 0 || vm->lay->cf_pc != vm->lay->cf_L + 8 ||
	    lp_mem_read(m, c->cf + vm->lay->cf_L, v, sizeof(v)) || v[1] == v[0])
		return 0;
	return v[1];
}

/* Functions already decoded during this walk (recursion repeats them): saves the function
** and prototype reads. Direct-mapped by function address. A Lua function keeps the lines of
** the last two PCs looked up in it: a recursion's frames return to one or two call sites,
** whose lines the walk otherwise looked up again for every frame (the memory read does not
** change during a walk). */
#define FNCACHE 8

struct fncache {
	uint64_t fn;            /* 0 = empty */
	uint64_t addr;          /* proto / C function */
	uint8_t ffid;
	uint8_t lnext;          /* the memo slot to replace next */
	uint64_t lpc[2];        /* PCs whose lines are known (0: none) */
	int32_t lline[2];
	struct lp_lj_proto p;   /* Lua functions */
};

/* Fills the kind/addr/line part of frame fr for function fn. pc is the PC to take the line
** from (Lua functions only), 0 if unknown. */
static unsigned frame_fill(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t fn,
			   uint64_t pc, struct lp_lj_frame *fr, struct fncache *cache)
{
	const struct lp_lj_layout *lay = vm->lay;
	struct fncache *ce = &cache[(fn >> 4) % FNCACHE];

	/* fn 0 is no function, and an empty entry's (only fn is cleared at a walk's start:
	 * its other fields are what the stack held) */
	if (ce->fn != fn || fn == 0) {
		unsigned char b[48];
		uint64_t fpc;
		int rc;
		ce->fn = 0;
		if (lay->fn_f + 8u > sizeof(b) || lp_mem_read(m, fn, b, lay->fn_f + 8u))
			return LP_LJ_WALK_EREAD;
		if (b[lay->fn_gct] != LP_LJ_GCT_FUNC)
			return LP_LJ_WALK_EFUNC;
		ce->ffid = b[lay->fn_ffid];
		if (ce->ffid != LP_LJ_FFID_LUA) {
			memcpy(&ce->addr, b + lay->fn_f, 8);
		} else {
			memcpy(&fpc, b + lay->fn_pc, 8);
			ce->addr = fpc - lay->pt_size; /* the prototype sits right before its bytecode */
			rc = lp_lj_proto_read(vm, m, ce->addr, &ce->p);
			if (rc)
				return rc == LP_LJ_EREAD ? LP_LJ_WALK_EREAD : LP_LJ_WALK_EFUNC;
		}
		ce->lpc[0] = ce->lpc[1] = 0;
		ce->lnext = 0;
		ce->fn = fn;
	}
	fr->func = fn;
	fr->ffid = ce->ffid;
	fr->addr = ce->addr;
	if (ce->ffid != LP_LJ_FFID_LUA) {
		fr->kind = ce->ffid == LP_LJ_FFID_C ? LP_FRAME_CFUNC : LP_FRAME_FFUNC;
		return 0;
	}
	fr->kind = LP_FRAME_LFUNC;
	if (pc != 0 && (pc == ce->lpc[0] || pc == ce->lpc[1])) {
		fr->line = ce->lline[pc == ce->lpc[1]];
		fr->pc = pc;
	} else if (pc != 0 && lp_lj_pc_line(vm, m, &ce->p, pc, &fr->line) == LP_LJ_OK) {
		fr->pc = pc;
		ce->lpc[ce->lnext] = pc;
		ce->lline[ce->lnext] = fr->line;
		ce->lnext ^= 1;
	} else {
		fr->line = ce->p.firstline >= 0 ? ce->p.firstline : 0;
		fr->flags |= LP_LJ_FR_LINEDEF;
	}
	return 0;
}

unsigned lp_lj_walk(const struct lp_lj_vm *vm, const struct lp_mem *m,
		    const struct lp_lj_thread *t, uint64_t base, uint64_t leaf_pc,
		    struct lp_lj_frame *out, unsigned max, unsigned *flags)
{
	const uint64_t bot = t->stack + 8; /* link slot of the dummy frame at stack[0..1] */
	struct cfwalk c = {.cf = t->cframe & LP_LJ_CFRAME_RAWMASK, .ok = 1};
	struct win w; /* empty: only lo and hi need setting (the rest is 1 KiB a walk) */
	struct fncache cache[FNCACHE];
	w.lo = w.hi = 0;
	for (unsigned i = 0; i < FNCACHE; i++)
		cache[i].fn = 0;
	enum { NEXT_TOP, NEXT_PC, NEXT_CFRAME } next = NEXT_TOP;
	uint64_t f, next_pc = 0;
	unsigned n = 0;
	int varg = -1; /* out[] index reported at a vararg pseudo-frame, awaiting its real frame */

	*flags = 0;
	if (base == 0)
		base = t->base;
	if (base < t->stack + 16 || base > t->stack_end || (base & 7) != 0) {
		*flags |= LP_LJ_WALK_EBASE;
		return 0;
	}
	/* Every step goes strictly down and stops at bot: no cycles, at most stacksize steps. */
	for (f = base - 8;;) {
		uint64_t slot[2], fn, prev;
		int cur = -1, dummy;
		unsigned type;

		if (f <= bot) {
			*flags |= LP_LJ_WALK_BOTTOM;
			break;
		}
		cf_normalize(vm, m, &c, f, t->stack, flags);
		if (win_read(m, &w, t->stack, f - 8, slot, sizeof(slot))) {
			*flags |= LP_LJ_WALK_EREAD;
			break;
		}
		fn = slot[0] & LP_LJ_GCVMASK;
		type = (unsigned)(slot[1] & 7);
		dummy = fn == t->L && (slot[0] >> 47) == LP_LJ_ITYPE_THREAD;

		if (varg >= 0) {
			/* The real frame of a vararg call: same function, reported already at the
			** pseudo-frame above (which has the callee's PC); it carries the true link. */
			cur = varg;
			varg = -1;
		} else if (!dummy) {
			struct lp_lj_frame *fr;
			uint64_t pc = 0;
			unsigned e;
			if ((slot[0] >> 47) != LP_LJ_ITYPE_FUNC) {
				*flags |= LP_LJ_WALK_EFUNC;
				break;
			}
			if (n == max) {
				*flags |= LP_LJ_WALK_TRUNC;
				break;
			}
			if (next == NEXT_PC)
				pc = next_pc;
			else if (next == NEXT_CFRAME || leaf_pc == 0)
				pc = cf_pc(vm, m, &c);
			else
				pc = leaf_pc;
			fr = &out[n];
			memset(fr, 0, sizeof(*fr));
			fr->slot = f;
			if (n == 0)
				fr->flags |= LP_LJ_FR_TOP;
			e = frame_fill(vm, m, fn, pc, fr, cache);
			if (e) {
				*flags |= e;
				break;
			}
			cur = (int)n++;
			if (type == LP_LJ_FRAME_VARG) {
				fr->flags |= LP_LJ_FR_VARARG;
				varg = cur;
			}
		}

		/* Link: what it says about the frame below, and which C frame runs that one. */
		if (type != LP_LJ_FRAME_VARG) {
			int centry = (type & 3) == LP_LJ_FRAME_C, fficb = 0;
			if (type == LP_LJ_FRAME_CONT) {
				uint64_t cont[2]; /* base-4: continuation, base-3: caller's PC */
				if (win_read(m, &w, t->stack, f - 24, cont, sizeof(cont))) {
					*flags |= LP_LJ_WALK_EREAD;
					break;
				}
				fficb = centry = cont[0] == 1; /* LJ_CONT_FFI_CALLBACK */
				next = NEXT_PC;
				next_pc = cont[1];
			} else if ((type & 3) == LP_LJ_FRAME_LUA) {
				next = NEXT_PC;
				next_pc = slot[1];
			} else {
				next = NEXT_CFRAME; /* C entry, pcall: the frame below gets cframe PC */
			}
			if (cur >= 0) {
				out[cur].link = (type & 3) == LP_LJ_FRAME_LUA ? LP_LJ_FRAME_LUA
									       : (uint8_t)type;
				if (centry) {
					out[cur].flags |= LP_LJ_FR_CENTRY | (fficb ? LP_LJ_FR_FFICB : 0);
					out[cur].cframe = c.ok ? c.cf : 0;
				}
			}
			if (centry)
				cf_step(vm, m, &c, flags);
		}

		/* Step down. */
		if ((type & 3) == LP_LJ_FRAME_LUA) {
			uint32_t ins; /* the CALL that made this frame; A = its base register */
			if (slot[1] < 4) {
				*flags |= LP_LJ_WALK_ELINK;
				break;
			}
			if (lp_mem_u32(m, slot[1] - 4, &ins)) {
				*flags |= LP_LJ_WALK_EREAD;
				break;
			}
			prev = f - 8 * (2 + (uint64_t)((ins >> 8) & 0xff));
		} else {
			uint64_t delta = slot[1] & ~(uint64_t)7;
			prev = delta != 0 && delta <= f - t->stack ? f - delta : 0;
		}
		if (prev < bot || prev >= f) {
			*flags |= LP_LJ_WALK_ELINK;
			break;
		}
		f = prev;
	}
	return n;
}

uint64_t lp_lj_entry_caller(const struct lp_lj_vm *vm, const struct lp_mem *m,
			    const struct lp_lj_frame *f, const struct lp_lj_frame *below)
{
	uint64_t ra;
	if (!(f->flags & LP_LJ_FR_CENTRY) || (f->flags & LP_LJ_FR_FFICB) || !f->cframe ||
	    below->kind != LP_FRAME_LFUNC ||
	    lp_mem_u64(m, f->cframe + vm->lay->cf_size - 8, &ra) != 0)
		return 0;
	return ra;
}

unsigned lp_lj_cframes(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t cframe,
		       struct lp_lj_cframe *out, unsigned max, unsigned *flags)
{
	const struct lp_lj_layout *lay = vm->lay;
	uint64_t link = cframe, last = 0;
	unsigned n = 0;

	*flags = 0;
	for (;;) {
		uint64_t cf = link & LP_LJ_CFRAME_RAWMASK, v[3];
		int32_t nres;
		if (cf == 0) {
			*flags |= LP_LJ_WALK_BOTTOM;
			break;
		}
		if (cf <= last || (cf & 7) != 0) {
			*flags |= LP_LJ_WALK_ELINK;
			break;
		}
		if (n == max) {
			*flags |= LP_LJ_WALK_TRUNC;
			break;
		}
		if (lp_mem_read(m, cf + lay->cf_nres, &nres, sizeof(nres)) ||
		    lp_mem_u64(m, cf + lay->cf_L, &v[0]) || lp_mem_u64(m, cf + lay->cf_pc, &v[1]) ||
		    lp_mem_u64(m, cf + lay->cf_prev, &v[2])) {
			*flags |= LP_LJ_WALK_EREAD;
			break;
		}
		out[n].addr = cf;
		out[n].L = v[0];
		out[n].pc = v[1];
		out[n].nres = nres;
		out[n].resume = (link & LP_LJ_CFRAME_RESUME) != 0;
		n++;
		last = cf;
		link = v[2];
	}
	return n;
}

/* The top of coroutine co's resume frame (where its caller's frame begins) in *rcf and the
 * address that frame returns to in *ra: LP_LJ_OK, LP_LJ_ENONE when co has none (the main
 * thread, a suspended coroutine), or LP_LJ_EREAD. */
static int resume_frame(const struct lp_lj_vm *vm, const struct lp_mem *m,
			const struct lp_lj_thread *co, uint64_t *rcf, uint64_t *ra)
{
	const struct lp_lj_layout *lay = vm->lay;
	if (co->L == vm->mainL)
		return LP_LJ_ENONE;
	/* The resume frame is the coroutine's outermost: C frames the coroutine entered since
	 * (lj_vm_cpcall: a trace exit, the JIT compiler; lj_vm_call: a comparator) link to
	 * it, flag included. */
	uint64_t link = co->cframe;
	for (int hop = 0; !(link & LP_LJ_CFRAME_RESUME); hop++) {
		uint64_t cf = link & LP_LJ_CFRAME_RAWMASK, prev;
		if (cf == 0 || hop == LP_LJ_MAX_INNER_CFRAMES)
			return LP_LJ_ENONE;
		if (lp_mem_u64(m, cf + lay->cf_prev, &prev))
			return LP_LJ_EREAD;
		if ((prev & LP_LJ_CFRAME_RAWMASK) <= cf)
			return LP_LJ_ENONE; /* outer frames are higher on the stack */
		link = prev;
	}
	if ((link & LP_LJ_CFRAME_RAWMASK) == 0)
		return LP_LJ_ENONE;
	*rcf = (link & LP_LJ_CFRAME_RAWMASK) + lay->cf_size;
	return lp_mem_u64(m, *rcf - 8, ra) ? LP_LJ_EREAD : LP_LJ_OK;
}

/* Thread L's state in *t, the function in its top frame in *fn and that function's
 * fast-function id in *ffid (the callers check it: a resuming builtin, a C function);
 * LP_LJ_ENONE when L is no thread or its top frame holds no function. */
static int top_function(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t L,
			struct lp_lj_thread *t, uint64_t *fn, uint8_t *ffid)
{
	uint64_t fv;
	int rc = lp_lj_thread_read(vm, m, L, t);
	if (rc == LP_LJ_EINVAL)
		return LP_LJ_ENONE;
	if (rc)
		return rc;
	if (t->base < t->stack + 16)
		return LP_LJ_ENONE;
	if (lp_mem_u64(m, t->base - 16, &fv))
		return LP_LJ_EREAD;
	*fn = fv & LP_LJ_GCVMASK;
	if ((fv >> 47) != LP_LJ_ITYPE_FUNC || lp_mem_u8(m, *fn + vm->lay->fn_ffid, ffid))
		return LP_LJ_ENONE;
	return LP_LJ_OK;
}

/* The coroutine that thread t's top function (fn, ffid) runs: coroutine.resume's first
 * argument, coroutine.wrap's thread (the wrapper's upvalue), a C function's first argument
 * when that is a thread (a scheduler's usual form); 0 when none is seen. */
static uint64_t running_coroutine(const struct lp_lj_vm *vm, const struct lp_mem *m,
				  const struct lp_lj_thread *t, uint64_t fn, uint8_t ffid)
{
	uint64_t v = 0;
	if (ffid == vm->ffid_wrap_aux) {
		if (lp_mem_u64(m, fn + vm->lay->fn_f + 8, &v))
			return 0;
	} else if (ffid == vm->ffid_resume || ffid == LP_LJ_FFID_C) {
		if (lp_mem_u64(m, t->base, &v))
			return 0;
	}
	return (v >> 47) == LP_LJ_ITYPE_THREAD ? v & LP_LJ_GCVMASK : 0;
}

int lp_lj_c_resumer(const struct lp_lj_vm *vm, const struct lp_mem *m,
		    const struct lp_lj_thread *co, struct lp_lj_thread *resumer,
		    uint64_t *cframe_out)
{
	uint64_t rcf, ra, fn, best = 0;
	uint8_t ffid;
	int rc = resume_frame(vm, m, co, &rcf, &ra);
	if (rc)
		return rc;
	if (lp_lj_in_vm(vm, ra))
		return LP_LJ_ENONE; /* resumed by a builtin: lp_lj_resumer */
	/* From the main thread down the coroutines its top frames run, the thread running
	 * a C function whose interpreter's C frame is the nearest above co's resume frame. */
	uint64_t L = vm->mainL;
	for (int hop = 0; L && L != co->L && hop < LP_LJ_C_RESUMER_HOPS; hop++) {
		struct lp_lj_thread t;
		rc = top_function(vm, m, L, &t, &fn, &ffid);
		if (rc == LP_LJ_EREAD)
			return rc;
		if (rc)
			break;
		uint64_t cf = t.cframe & LP_LJ_CFRAME_RAWMASK;
		if (ffid == LP_LJ_FFID_C && cf >= rcf && cf - rcf <= LP_LJ_C_RESUMER_SPAN &&
		    (!best || cf < best)) {
			best = cf;
			*resumer = t;
		}
		L = running_coroutine(vm, m, &t, fn, ffid);
	}
	if (!best)
		return LP_LJ_ENONE;
	if (cframe_out)
		*cframe_out = best;
	return LP_LJ_OK;
}

int lp_lj_c_running(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t cur,
		    struct lp_lj_thread *t, uint64_t *fn)
{
	uint64_t L = vm->mainL, f, deepest = 0, deep_f = 0;
	struct lp_lj_thread u, deep_t;
	uint8_t ffid;
	int deep_c = 0, hop;
	for (hop = 0; L && hop < LP_LJ_C_RESUMER_HOPS; hop++) {
		int rc = top_function(vm, m, L, &u, &f, &ffid);
		if (rc == LP_LJ_EREAD)
			return rc;
		if (rc)
			break;
		uint64_t cf = u.cframe & LP_LJ_CFRAME_RAWMASK;
		uint64_t next = running_coroutine(vm, m, &u, f, ffid);
		if (next == cur) {
			/* The thread whose top frame names cur: the runner, if it runs a C
			 * function in a C frame of its own below every other one seen. */
			if (ffid != LP_LJ_FFID_C || !cf || (deepest && cf > deepest))
				return LP_LJ_ENONE;
			*t = u;
			*fn = f;
			return LP_LJ_OK;
		}
		if (cf && (!deepest || cf < deepest)) {
			deepest = cf;
			deep_t = u;
			deep_f = f;
			deep_c = ffid == LP_LJ_FFID_C;
		}
		L = next;
	}
	/* No frame names cur (a scheduler keeping its coroutines in a table, or running a
	 * thread it made with lua_newthread): the chain's thread in the deepest C frame, if
	 * its top is a C function; every other thread of the chain waits in a resume above.
	 * Not when the chain goes on past the hops followed: a deeper one may run there. */
	if (!deep_c || (L && hop == LP_LJ_C_RESUMER_HOPS))
		return LP_LJ_ENONE;
	*t = deep_t;
	*fn = deep_f;
	return LP_LJ_OK;
}

int lp_lj_chain_resumer(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t co,
			struct lp_lj_thread *r)
{
	uint64_t L = vm->mainL, fn;
	uint8_t ffid;
	for (int hop = 0; L && L != co && hop < LP_LJ_CHAIN_HOPS; hop++) {
		int rc = top_function(vm, m, L, r, &fn, &ffid);
		if (rc)
			return rc;
		uint64_t next = running_coroutine(vm, m, r, fn, ffid);
		if (next == co)
			return ffid && (ffid == vm->ffid_resume || ffid == vm->ffid_wrap_aux)
			       ? LP_LJ_OK : LP_LJ_ENONE;
		L = next;
	}
	return LP_LJ_ENONE;
}

int lp_lj_resumer(const struct lp_lj_vm *vm, const struct lp_mem *m,
		  const struct lp_lj_thread *co, struct lp_lj_thread *resumer,
		  uint64_t *cframe_out)
{
	const struct lp_lj_layout *lay = vm->lay;
	uint64_t rcf, rL, ra;
	uint8_t ffid;
	int rc = resume_frame(vm, m, co, &rcf, &ra);
	if (rc)
		return rc;
	/* The resume frame returns into the VM block (coroutine.resume / wrap call vm_resume)
	 * or into C (lua_resume: nginx's ngx_http_lua_run_thread, say). Above it is then a C
	 * frame of the host, whose slot at cf_L holds anything: a reader of plain memory
	 * (memprof's, in-process) must not follow it. */
	if (!lp_lj_in_vm(vm, ra))
		return LP_LJ_ENONE;
	if (lp_mem_u64(m, rcf + lay->cf_L, &rL))
		return LP_LJ_EREAD;
	if (rL == co->L || rL == 0)
		return LP_LJ_ENONE;
	/* Its top frame must be the builtin that resumed us. */
	uint64_t fn;
	rc = top_function(vm, m, rL, resumer, &fn, &ffid);
	if (rc)
		return rc;
	if ((resumer->cframe & LP_LJ_CFRAME_RAWMASK) != rcf)
		return LP_LJ_ENONE;
	if (ffid == 0 || (ffid != vm->ffid_resume && ffid != vm->ffid_wrap_aux))
		return LP_LJ_ENONE;
	if (cframe_out)
		*cframe_out = rcf;
	return LP_LJ_OK;
}
