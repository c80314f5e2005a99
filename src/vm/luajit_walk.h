/*
** LuaJIT stack walker: Lua frames with current lines, the C-frame (cframe) chain that ties
** each Lua segment to its place on the native stack, and the coroutine -> resumer link.
**
** All functions are async-signal-safe when the reader is: they allocate nothing, write only
** into caller arrays, read the target only through lp_mem, follow frame links only downwards
** and inside [L->stack, stack_end), bound every loop, and end with a flag on the first failed
** read or broken invariant.
*/
#ifndef LP_VM_LUAJIT_WALK_H
#define LP_VM_LUAJIT_WALK_H

#include "vm/luajit.h"

/* Per-frame flags.
** CENTRY: C entered the VM right below this frame - a FRAME_C / FRAME_CP link (lua_call,
** lua_pcall, lua_cpcall, coroutine resume) or an FFI callback; the agent splices the native
** frames of that C code in below this frame. VARARG: the function was called with varargs
** (a FRAME_VARG pseudo-frame sits between its frame and its caller's; it is reported once). */
#define LP_LJ_FR_CENTRY  0x01 /* C entered the VM right below this frame */
#define LP_LJ_FR_FFICB   0x02 /* ...and that entry is an FFI callback (FRAME_CONT, contv 1) */
#define LP_LJ_FR_LINEDEF 0x04 /* Lua frame: current line not derivable; line = firstline */
#define LP_LJ_FR_VARARG  0x08 /* called with varargs */
#define LP_LJ_FR_TOP     0x10 /* first frame of the walk */

struct lp_lj_frame {
	uint64_t func;   /* GCfunc address */
	uint64_t addr;   /* Lua: GCproto; C: lua_CFunction (GCfuncC.f); builtin: its GCfuncC.f */
	uint64_t slot;   /* stack address of the frame's link slot (its base - 8) */
	uint64_t pc;     /* Lua: the PC the line came from (LuaJIT convention), 0 if none */
	uint64_t cframe; /* LP_LJ_FR_CENTRY: raw C frame of that VM entry, 0 if not known */
	int32_t line;    /* Lua: current line (or firstline, see LP_LJ_FR_LINEDEF); else 0 */
	uint8_t kind;    /* LP_FRAME_LFUNC, LP_FRAME_CFUNC or LP_FRAME_FFUNC (format.h) */
	uint8_t ffid;    /* GCfunc.ffid: 0 Lua, 1 C, >= 2 builtin (lp_lj_ffname) */
	uint8_t link;    /* link type of this frame's call: LP_LJ_FRAME_* (LUA for any PC) */
	uint8_t flags;   /* LP_LJ_FR_* */
};

/* Walk result flags. Exactly one of BOTTOM, TRUNC, EREAD, EBASE, ELINK, EFUNC ends a walk;
** ECFRAME may come with any of them. */
#define LP_LJ_WALK_BOTTOM   0x01 /* reached the bottom of the thread's stack: complete */
#define LP_LJ_WALK_TRUNC    0x02 /* out[] full before the bottom */
#define LP_LJ_WALK_EREAD    0x04 /* a read failed */
#define LP_LJ_WALK_EBASE    0x08 /* the start base is not inside the thread's stack */
#define LP_LJ_WALK_ELINK    0x10 /* a frame link points outside the stack or not downwards */
#define LP_LJ_WALK_EFUNC    0x20 /* a function slot holds no function (or a bad prototype) */
#define LP_LJ_WALK_ECFRAME  0x40 /* cframe chain broken; the walk went on without it */

/*
** Walks thread t from frame base `base` (0 = t->base; the interpreter's BASE register;
** g->jit_base for a trace) and writes up to max frames into out, innermost first. leaf_pc
** (LuaJIT convention: one past the executing instruction, e.g. the interpreter's PC register
** or a cframe's SAVE_PC) gives the top frame's line if it is a Lua function; with 0 the
** current cframe's SAVE_PC is tried, as lua_getinfo does. Each Lua frame's line comes from
** its callee's link (Lua PC or continuation PC) or, below a C entry, from the SAVE_PC of the
** matching cframe. A vararg function is reported once (at its pseudo-frame, with its real
** frame's link); dummy frames are skipped. Returns the number of frames written and stores
** LP_LJ_WALK_* in *flags.
**
** Where to start, by sample state (vm-internals.md §3.4):
**   INTERP, IP in the VM block (lp_lj_in_vm): base = BASE (rdx), leaf_pc = PC (rbx);
**   C (a lua_CFunction runs):                 base = 0, leaf_pc = 0 (top frame: the C function);
**   GC, EXIT, RECORD, OPT, ASM:               base = 0, leaf_pc = 0 (SAVE_PC);
**   trace, IP in its mcode:                   base = g->jit_base, leaf_pc = lp_lj_trace_locate's
**                                             pc when its pt is the top frame's prototype.
** Frames inlined into a trace are not on the stack: lp_lj_trace_inlined gives them, and the
** base frame's PC at the call into them.
*/
unsigned lp_lj_walk(const struct lp_lj_vm *vm, const struct lp_mem *m,
		    const struct lp_lj_thread *t, uint64_t base, uint64_t leaf_pc,
		    struct lp_lj_frame *out, unsigned max, unsigned *flags);

/*
** The C code that entered the VM at frame f (out[i] of a walk; below, out[i + 1]) when that
** code is no function of the Lua stack: C called f (LP_LJ_FR_CENTRY) by an entry that is no
** FFI callback's, and the frame below f is a Lua function's, not the C function or builtin
** that would have made that call. f may be of any kind (a finalizer set by ffi.gc may be a
** C function). Such code is the VM's own (a finalizer run by a collector step, a
** jit.attach handler run by the compiler, an error handler) or a host's (a C debug hook).
** Returns the return address into it (the last word of the entry's C frame, as a host walk
** has it), or 0: no such code, or f's C frame is not known or not readable.
*/
uint64_t lp_lj_entry_caller(const struct lp_lj_vm *vm, const struct lp_mem *m,
			    const struct lp_lj_frame *f, const struct lp_lj_frame *below);

/* One VM entry from C on the native stack. */
struct lp_lj_cframe {
	uint64_t addr;   /* raw C frame = rsp of the interpreter in that entry; CFA = addr + 80 */
	uint64_t L;      /* SAVE_L: the thread running in it */
	uint64_t pc;     /* SAVE_PC as stored (== L right after entry: no bytecode yet) */
	int32_t nres;    /* NRES; < 0 marks a lua_cpcall that pushed no Lua frame */
	uint8_t resume;  /* the link to this frame had CFRAME_RESUME: entered through vm_resume */
};

/*
** Follows the cframe chain from cframe (as stored in L->cframe, tag bits allowed) through
** SAVE_CFRAME links, innermost first, up to max entries. Addresses must increase strictly
** (the native stack grows down), which also rules out cycles. Returns the count; *flags gets
** LP_LJ_WALK_BOTTOM (chain ended with 0), LP_LJ_WALK_TRUNC, LP_LJ_WALK_EREAD or
** LP_LJ_WALK_ELINK.
*/
unsigned lp_lj_cframes(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t cframe,
		       struct lp_lj_cframe *out, unsigned max, unsigned *flags);

/*
** The thread that resumed coroutine co from Lua (coroutine.resume or a coroutine.wrap
** function): its interpreter C frame sits right above co's resume frame on the native
** stack, so resumer_cframe = resume frame + CFRAME_SIZE and resumer L = SAVE_L there. The
** resume frame is co->cframe, or the first frame with the resume flag on its chain when co
** is inside C frames of its own (lj_vm_cpcall: trace exits, the JIT compiler; lj_vm_call
** from a builtin calling Lua back: a table.sort comparator, a gsub callback, each level of
** a recursion through them; at most LP_LJ_MAX_INNER_CFRAMES of them, one read each). A resume frame that returns outside the interpreter
** block was entered by lua_resume from C: the frame above it is the host's, never read as
** a thread. The result is trusted only if that thread belongs to this VM, its own L->cframe is exactly that
** C frame and its top frame is the resume/wrap builtin; its stack is then walkable from its
** L->base. Returns LP_LJ_OK and fills *resumer (and *cframe_out if non-NULL), LP_LJ_ENONE
** when co was not resumed from Lua (main thread, lua_resume from C, suspended), or an error.
*/
#define LP_LJ_MAX_INNER_CFRAMES 256
int lp_lj_resumer(const struct lp_lj_vm *vm, const struct lp_mem *m,
		  const struct lp_lj_thread *co, struct lp_lj_thread *resumer,
		  uint64_t *cframe_out);

/*
** The thread that may have resumed co from C: a lua_CFunction that calls lua_resume (a
** scheduler written in C: cqueues, say). Nothing links a coroutine to such a caller. The
** candidates are the main thread and the coroutines its top frames run, one into the next
** (coroutine.resume's argument, coroutine.wrap's thread, a C function's first argument
** when that is a thread; at most LP_LJ_C_RESUMER_HOPS): of those running a C function,
** the one whose interpreter's C frame lies nearest above co's resume frame on the stack,
** at most LP_LJ_C_RESUMER_SPAN bytes higher. That is a guess: a coroutine resumed from C in
** between that none of them names is not seen. So the caller confirms it by the native
** stack: the walk from co's frames upwards must come to the interpreter at exactly
** *cframe_out by the frames' own unwind rules. Returns LP_LJ_OK, LP_LJ_ENONE (co was
** resumed by a builtin, or by no such thread), or an error.
*/
#define LP_LJ_C_RESUMER_SPAN (1u << 20)
#define LP_LJ_C_RESUMER_HOPS 16
int lp_lj_c_resumer(const struct lp_lj_vm *vm, const struct lp_mem *m,
		    const struct lp_lj_thread *co, struct lp_lj_thread *resumer,
		    uint64_t *cframe_out);

/*
** The thread whose C function runs while the VM's current thread, cur, runs nothing (a
** coroutine that yielded or died, with no C frame): a lua_CFunction that resumed cur with
** lua_resume goes on after the call, and LuaJIT leaves cur_L at cur until the VM is
** entered again. Found from the main thread down the coroutines its top frames run (as
** lp_lj_c_resumer follows them): the thread whose top frame names cur (a C function's
** first argument), if that frame is a C function's inside a C frame of the thread's own
** and no thread met before runs below it. When no frame names cur (a scheduler taking its
** coroutines from a table, or running a thread it made with lua_newthread), the chain's
** thread in the deepest C frame, if its top frame is a C function's: every other thread
** of the chain waits in a resume above it. (A guess where such a scheduler resumed a
** thread that itself runs such a scheduler: the inner one, out of the chain's sight, runs
** below, and the outer one is named.) Returns LP_LJ_OK with the thread in *t and its top
** function (a GCfunc) in *fn, LP_LJ_ENONE, or an error.
*/
int lp_lj_c_running(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t cur,
		    struct lp_lj_thread *t, uint64_t *fn);

/*
** The thread whose builtin (coroutine.resume, coroutine.wrap_aux) runs coroutine co while co
** has no C frame to find it by (lp_lj_resumer): co yielding, after coroutine.yield cleared
** its cframe and before the VM is back in the resumer. Found from the main thread down the
** coroutines its top frames run (at most LP_LJ_CHAIN_HOPS): the thread whose top frame is
** such a builtin naming co.
** LP_LJ_OK with the thread in *r, LP_LJ_ENONE, or an error.
*/
#define LP_LJ_CHAIN_HOPS 128
int lp_lj_chain_resumer(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t co,
			struct lp_lj_thread *r);

#endif
