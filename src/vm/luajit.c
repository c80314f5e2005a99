/*
** LuaJIT VM model: layouts of the supported builds, detection, threads, prototypes, lines.
*/
#include "vm/luajit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "vm/luajit_ffnames.h"

/* -- Layouts --------------------------------------------------------------------
** Numbers from ../shared/notes/vm-internals.md §1-§3 (GC64 columns). Only the fields that
** differ between the two builds are repeated per build; the rest is the shared GC64 core,
** unchanged from 2020 to HEAD except where noted there (HEAD moved cur_L/jit_base). */

#define LJ_GC64_CORE                                                                   \
	.l_gct = 9, .l_dummy_ffid = 10, .l_status = 11, .l_glref = 16, .l_base = 32,   \
	.l_top = 40, .l_maxstack = 48, .l_stack = 56, .l_cframe = 80, .l_stacksize = 88, \
	.g_vmstate = 184, .g_mainthref = 192, .g_bc_cfunc_int = 360,                   \
	.g_bc_cfunc_ext = 364, .g_cur_L = 368, .g_jit_base = 376, .g_ctype_state = 384,  \
	.g_registrytv = 272, .tab_gct = 9, .tab_node = 40, .tab_hmask = 52,            \
	.node_size = 24, .node_val = 0, .node_key = 8,                                 \
	.len_ddisp = 154,                                                              \
	.len_sdisp = 89, .bc_funcc = 95, .bc_funccw = 96, .j_trace = 384,              \
	.j_sizetrace = 396, .j_parent = 3016, .t_size = 120, .t_gct = 9, .t_nsnap = 10, .t_ir = 32,      \
	.t_snap = 48, .t_snapmap = 56, .t_startpt = 64, .t_startpc = 72,               \
	.t_startins = 80, .t_szmcode = 84, .t_mcode = 88, .t_spadjust = 102,           \
	.t_traceno = 104, .t_link = 106, .t_root = 108, .snap_size = 12,               \
	.snap_mapofs = 0, .snap_mcofs = 6, .snap_nent = 10, .pt_size = 104,            \
	.pt_gct = 9, .pt_numparams = 10, .pt_sizebc = 12, .pt_chunkname = 64, .pt_firstline = 72,          \
	.pt_numline = 76, .pt_lineinfo = 80, .fn_gct = 9, .fn_ffid = 10, .fn_pc = 32,  \
	.fn_f = 40, .str_gct = 9, .str_len = 20, .str_data = 24, .str_sid = 12,        \
	.cf_nres = 8, .cf_L = 16, .cf_pc = 24, .cf_prev = 32, .cf_size = 80,           \
	.cf_size_jit = 96

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

static const char *const ids_deb_luajit[] = {
	"2e18b5eadde600273e47ba2f83a1df8b6a5b2540", /* libluajit-5.1.so.2.1.0 */
	"79b0b8114f05a2726860c3141195279ceb0f6e29", /* /usr/bin/luajit (VM linked in) */
	NULL,
};

static const char *const ids_deb_luajit2[] = {
	"0a6563c55d870716908fd332f88bf7cdd9bc6a71", /* libluajit-5.1.so.2.1.0 */
	"3e3d615119e82f1b42bd151e94701750bfd15a9d", /* /usr/bin/luajit (VM linked in) */
	NULL,
};

static const struct lp_lj_layout layouts[] = {
	{
		.name = "Debian luajit 2.1.0~beta3+git20220320 (x86_64 GC64)",
		.build_ids = ids_deb_luajit,
		.ffnames = ffnames_deb_luajit,
		.nffnames = NELEM(ffnames_deb_luajit),
		.l_size = 96,
		.g2disp = 3968,
		.g2j = 728,
		.vm_size = 16453,
		LJ_GC64_CORE,
	},
	{
		.name = "Debian luajit2 (OpenResty) 2.1-20230119 (x86_64 GC64)",
		.build_ids = ids_deb_luajit2,
		.ffnames = ffnames_deb_luajit2,
		.nffnames = NELEM(ffnames_deb_luajit2),
		.l_size = 112, /* exdata, exdata2 */
		.g2disp = 4008,
		.g2j = 736,
		.vm_size = 16466,
		LJ_GC64_CORE,
	},
};

const struct lp_lj_layout *lp_lj_layouts(size_t *count)
{
	*count = NELEM(layouts);
	return layouts;
}

const char *lp_lj_ffname(const struct lp_lj_layout *lay, unsigned ffid)
{
	return ffid < lay->nffnames ? lay->ffnames[ffid] : NULL;
}

/* -- Small readers ---------------------------------------------------------------- */

static int rd64(const struct lp_mem *m, uint64_t a, uint64_t *v)
{
	return lp_mem_u64(m, a, v) ? LP_LJ_EREAD : LP_LJ_OK;
}

static int rd32(const struct lp_mem *m, uint64_t a, uint32_t *v)
{
	return lp_mem_u32(m, a, v) ? LP_LJ_EREAD : LP_LJ_OK;
}

/* Largest lua_State prefix we read (up to stacksize). */
#define L_HDR 96

/* Reads thread header fields without checking glref (used before g is known). */
static int thread_hdr(const struct lp_lj_layout *lay, const struct lp_mem *m, uint64_t L,
		      struct lp_lj_thread *t, uint64_t *glref)
{
	unsigned char b[L_HDR];

	if (lp_mem_read(m, L, b, sizeof(b)))
		return LP_LJ_EREAD;
	if (b[lay->l_gct] != LP_LJ_GCT_THREAD || b[lay->l_dummy_ffid] != LP_LJ_FFID_C)
		return LP_LJ_EINVAL;
	t->L = L;
	t->status = b[lay->l_status];
	t->base = lp_get64(b, lay->l_base);
	t->top = lp_get64(b, lay->l_top);
	t->maxstack = lp_get64(b, lay->l_maxstack);
	t->stack = lp_get64(b, lay->l_stack);
	t->cframe = lp_get64(b, lay->l_cframe);
	t->stacksize = lp_get32(b, lay->l_stacksize);
	t->stack_end = t->stack + 8 * (uint64_t)t->stacksize;
	*glref = lp_get64(b, lay->l_glref);
	return LP_LJ_OK;
}

/* LuaJIT caps a stack at LJ_STACK_MAX (65500) slots plus a few extra; allow headroom. */
#define STACKSIZE_MAX (1u << 20)

/* base and top are synced only when the VM leaves to C: while the interpreter or a trace runs
** they are stale and may be out of order (measured: a fifth of JIT-on samples). They stay
** inside the stack, since a reallocation relocates them. */
static int thread_sane(const struct lp_lj_thread *t)
{
	return t->stack != 0 && (t->stack & 7) == 0 && t->stacksize > 0 &&
	       t->stacksize <= STACKSIZE_MAX && t->stack <= t->base && t->base <= t->stack_end &&
	       t->stack <= t->top && t->top <= t->stack_end && t->stack <= t->maxstack &&
	       t->maxstack < t->stack_end && (t->base & 7) == 0 && (t->top & 7) == 0;
}

int lp_lj_thread_read(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t L,
		      struct lp_lj_thread *t)
{
	uint64_t g;
	int rc = thread_hdr(vm->lay, m, L, t, &g);

	if (rc)
		return rc;
	return g == vm->g && thread_sane(t) ? LP_LJ_OK : LP_LJ_EINVAL;
}

/* -- Detection ---------------------------------------------------------------------- */

#define GG_MAXDISP 256 /* >= len_ddisp + len_sdisp of every layout */
#define VM_MAXSIZE (1u << 16)

/* Dispatch table check: every dynamic and static entry non-zero and inside one block that
** starts at the static BC_ISLT handler (lj_vm_asm_begin). Hooks, the profiler and the
** recorder only ever redirect entries to other code inside the same block. */
static int check_dispatch(const struct lp_lj_layout *lay, const struct lp_mem *m, uint64_t disp,
			  uint64_t *lo_out, char *why, size_t whylen)
{
	uint64_t d[GG_MAXDISP], lo, hi = 0;
	unsigned n = lay->len_ddisp + lay->len_sdisp;

	if (n > GG_MAXDISP || lp_mem_read(m, disp, d, n * sizeof(d[0]))) {
		snprintf(why, whylen, "dispatch table at 0x%" PRIx64 " unreadable", disp);
		return -1;
	}
	lo = d[lay->len_ddisp]; /* static copy, entry 0 = BC_ISLT */
	for (unsigned i = 0; i < n; i++) {
		if (d[i] < lo || d[i] - lo >= lay->vm_size) {
			snprintf(why, whylen,
				 "dispatch[%u] = 0x%" PRIx64 " outside the VM block at 0x%" PRIx64,
				 i, d[i], lo);
			return -1;
		}
		if (d[i] > hi)
			hi = d[i];
	}
	if (lo == 0) {
		snprintf(why, whylen, "empty dispatch table");
		return -1;
	}
	*lo_out = lo;
	return 0;
}

/* Finds a builtin's id by name in the layout's table; 0 if absent. */
static uint8_t ffid_by_name(const struct lp_lj_layout *lay, const char *name)
{
	for (unsigned i = 2; i < lay->nffnames && i < 256; i++)
		if (strcmp(lay->ffnames[i], name) == 0)
			return (uint8_t)i;
	return 0;
}

/* Validates layout lay for the VM with global_State g and main thread mainL. */
static int check_layout(const struct lp_lj_layout *lay, const struct lp_mem *m, uint64_t g,
			uint64_t mainL, struct lp_lj_vm *vm, char *why, size_t whylen)
{
	uint32_t ins[2], sizetrace;
	uint64_t curL, lo, glref;
	int32_t vmstate;
	struct lp_lj_thread t;

	if (lp_mem_read(m, g + lay->g_bc_cfunc_int, ins, sizeof(ins)) ||
	    lp_mem_read(m, g + lay->g_vmstate, &vmstate, sizeof(vmstate)) ||
	    rd64(m, g + lay->g_cur_L, &curL) ||
	    rd32(m, g + lay->g2j + lay->j_sizetrace, &sizetrace)) {
		snprintf(why, whylen, "global_State at 0x%" PRIx64 " unreadable", g);
		return -1;
	}
	/* bc_cfunc_ext becomes FUNCCW only while luaJIT_setmode installs a C function wrapper. */
	if ((ins[0] & 0xff) != lay->bc_funcc ||
	    ((ins[1] & 0xff) != lay->bc_funcc && (ins[1] & 0xff) != lay->bc_funccw)) {
		snprintf(why, whylen, "g->bc_cfunc_int/ext opcodes %u/%u, expected %u/%u or %u",
			 ins[0] & 0xff, ins[1] & 0xff, lay->bc_funcc, lay->bc_funcc, lay->bc_funccw);
		return -1;
	}
	if (check_dispatch(lay, m, g + lay->g2disp, &lo, why, whylen))
		return -1;
	if (curL != 0 && (thread_hdr(lay, m, curL, &t, &glref) || glref != g)) {
		snprintf(why, whylen, "g->cur_L = 0x%" PRIx64 " is not a thread of this VM", curL);
		return -1;
	}
	/* 0 is no trace (they are numbered from 1): the zeroed state of a VM that has run
	 * nothing yet (luaL_newstate, then start, then luaL_openlibs). */
	if (sizetrace > 65536 || vmstate < -7 || (vmstate > 0 && (uint32_t)vmstate >= sizetrace)) {
		snprintf(why, whylen, "g->vmstate = %" PRId32 " with %" PRIu32 " trace slots",
			 vmstate, sizetrace);
		return -1;
	}
	vm->lay = lay;
	vm->g = g;
	vm->mainL = mainL;
	vm->J = g + lay->g2j;
	vm->disp = g + lay->g2disp;
	vm->vm_lo = lo;
	vm->vm_hi = lo + lay->vm_size;
	vm->ffid_resume = ffid_by_name(lay, "coroutine.resume");
	vm->ffid_wrap_aux = ffid_by_name(lay, "coroutine.wrap_aux");
	vm->ffid_yield = ffid_by_name(lay, "coroutine.yield");
	vm->ffid_pcall = ffid_by_name(lay, "pcall");
	vm->ffid_xpcall = ffid_by_name(lay, "xpcall");
	return 0;
}

int lp_lj_detect(struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t L, char *err,
		 size_t errlen)
{
	unsigned char hdr[16];
	uint64_t g, mainL, mglref, dist;
	struct lp_lj_thread t;
	char why[160] = "", none[8];
	const struct lp_lj_layout *lay = &layouts[0]; /* the shared core decides up to g */
	int rc;

	if (err == NULL || errlen == 0)
		err = none, errlen = sizeof(none); /* caller wants no message */
	if (lp_mem_read(m, L, hdr, sizeof(hdr))) {
		snprintf(err, errlen, "cannot read LuaJIT state (lua_State at 0x%" PRIx64
			 " unreadable)", L);
		return LP_LJ_EREAD;
	}
	if (hdr[9] != LP_LJ_GCT_THREAD || hdr[10] != LP_LJ_FFID_C) {
		if (hdr[5] == LP_LJ_GCT_THREAD && hdr[6] == LP_LJ_FFID_C)
			snprintf(err, errlen, "unsupported LuaJIT build (non-GC64: 32-bit object "
				 "references in lua_State at 0x%" PRIx64 ")", L);
		else
			snprintf(err, errlen, "unsupported LuaJIT build (0x%" PRIx64 " does not "
				 "hold a GC64 lua_State: type bytes 0x%02x 0x%02x)", L, hdr[9],
				 hdr[10]);
		return LP_LJ_EBUILD;
	}
	rc = thread_hdr(lay, m, L, &t, &g);
	if (rc == LP_LJ_OK && rd64(m, g + lay->g_mainthref, &mainL))
		rc = LP_LJ_EREAD;
	if (rc) {
		snprintf(err, errlen, "cannot read LuaJIT state (lua_State 0x%" PRIx64
			 ", global_State 0x%" PRIx64 ")", L, g);
		return LP_LJ_EREAD;
	}
	if (!thread_sane(&t)) {
		snprintf(err, errlen, "unsupported LuaJIT build (lua_State 0x%" PRIx64 ": stack "
			 "fields out of range)", L);
		return LP_LJ_EBUILD;
	}
	rc = thread_hdr(lay, m, mainL, &t, &mglref);
	if (rc || mglref != g || mainL >= g) {
		snprintf(err, errlen, "unsupported LuaJIT build (g->mainthref = 0x%" PRIx64
			 " is not a thread of global_State 0x%" PRIx64 ")", mainL, g);
		return rc == LP_LJ_EREAD ? LP_LJ_EREAD : LP_LJ_EBUILD;
	}
	dist = g - mainL;
	for (size_t i = 0; i < NELEM(layouts); i++) {
		if (layouts[i].l_size != dist)
			continue;
		if (check_layout(&layouts[i], m, g, mainL, vm, why, sizeof(why)) == 0)
			return LP_LJ_OK;
		snprintf(err, errlen, "unsupported LuaJIT build (sizeof(lua_State) = %" PRIu64
			 " as in %s, but %s)", dist, layouts[i].name, why);
		return LP_LJ_EBUILD;
	}
	snprintf(err, errlen, "unsupported LuaJIT build (sizeof(lua_State) = %" PRIu64
		 "; known: 96 Debian luajit 2.1.0~beta3+git20220320, 112 Debian luajit2 "
		 "2.1-20230119)", dist);
	return LP_LJ_EBUILD;
}

/* -- VM-wide state ----------------------------------------------------------------- */

int lp_lj_vmstate(const struct lp_lj_vm *vm, const struct lp_mem *m, int32_t *raw)
{
	return lp_mem_read(m, vm->g + vm->lay->g_vmstate, raw, sizeof(*raw)) ? LP_LJ_EREAD
									      : LP_LJ_OK;
}

int lp_lj_vmstate_map(int32_t raw, uint32_t *traceno)
{
	static const signed char map[8] = {
		-1, LP_VMST_INTERP, LP_VMST_CFUNC, LP_VMST_GC, LP_VMST_EXIT,
		LP_VMST_RECORD, LP_VMST_OPT, LP_VMST_ASM,
	};

	if (raw == 0) /* no trace: the VM has not run yet (check_layout), host code runs */
		return LP_VMST_INTERP;
	if (raw > 0) {
		if (traceno)
			*traceno = (uint32_t)raw;
		return LP_VMST_TRACE;
	}
	return raw >= -7 ? map[-raw] : -1;
}

int lp_lj_cur_L(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t *L)
{
	return rd64(m, vm->g + vm->lay->g_cur_L, L);
}

int lp_lj_jit_base(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t *base)
{
	return rd64(m, vm->g + vm->lay->g_jit_base, base);
}

int lp_lj_exit_no(const struct lp_lj_vm *vm, const struct lp_mem *m, uint32_t *traceno,
		  uint32_t *exitno)
{
	uint32_t v[2];
	if (lp_mem_read(m, vm->J + vm->lay->j_parent, v, sizeof(v)))
		return LP_LJ_EREAD;
	*traceno = v[0];
	*exitno = v[1];
	return LP_LJ_OK;
}

/* -- Prototypes, strings, lines -------------------------------------------------------- */

#define PT_HDR 88 /* GCproto prefix we read: up to and including lineinfo */

int lp_lj_proto_read(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t pt,
		     struct lp_lj_proto *p)
{
	const struct lp_lj_layout *lay = vm->lay;
	unsigned char b[PT_HDR];

	if (lp_mem_read(m, pt, b, sizeof(b)))
		return LP_LJ_EREAD;
	if (b[lay->pt_gct] != LP_LJ_GCT_PROTO)
		return LP_LJ_EINVAL;
	p->pt = pt;
	p->bc = pt + lay->pt_size;
	p->sizebc = lp_get32(b, lay->pt_sizebc);
	p->chunkname = lp_get64(b, lay->pt_chunkname);
	p->firstline = (int32_t)lp_get32(b, lay->pt_firstline);
	p->numline = lp_get32(b, lay->pt_numline);
	p->lineinfo = lp_get64(b, lay->pt_lineinfo);
	if (p->sizebc == 0 || p->sizebc > (1u << 26)) /* LJ_MAX_BCINS */
		return LP_LJ_EINVAL;
	return LP_LJ_OK;
}

int lp_lj_registry(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t *tab)
{
	uint64_t tv;
	if (rd64(m, vm->g + vm->lay->g_registrytv, &tv))
		return LP_LJ_EREAD;
	if ((tv >> 47) != LP_LJ_ITYPE_TAB)
		return LP_LJ_EINVAL;
	*tab = tv & LP_LJ_GCVMASK;
	return LP_LJ_OK;
}

/* Nodes read at a time: a few system calls for a module's table. */
#define TAB_CHUNK 32

int lp_lj_tab_each(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t tab,
		   int (*fn)(uint64_t key, uint64_t val, void *arg), void *arg, size_t max,
		   size_t *looked)
{
	const struct lp_lj_layout *lay = vm->lay;
	uint8_t gct, nodes[TAB_CHUNK * 32];
	uint64_t node;
	uint32_t hmask;
	if (lay->node_size > 32 || lp_mem_u8(m, tab + lay->tab_gct, &gct) ||
	    rd64(m, tab + lay->tab_node, &node) || lp_mem_u32(m, tab + lay->tab_hmask, &hmask))
		return LP_LJ_EREAD;
	/* hmask + 1 is a power of two (a table of 2^26 nodes is far beyond any bound here). */
	if (gct != LP_LJ_GCT_TAB || (hmask & (hmask + 1)) || hmask >= (1u << 26))
		return LP_LJ_EINVAL;
	for (uint64_t i = 0; i <= hmask; i += TAB_CHUNK) {
		size_t n = hmask + 1 - i < TAB_CHUNK ? (size_t)(hmask + 1 - i) : TAB_CHUNK;
		if (lp_mem_read(m, node + i * lay->node_size, nodes, n * lay->node_size))
			return LP_LJ_EREAD;
		for (size_t k = 0; k < n; k++) {
			if (*looked >= max)
				return LP_LJ_OK;
			++*looked;
			const uint8_t *b = nodes + k * lay->node_size;
			uint64_t val = lp_get64(b, lay->node_val), key = lp_get64(b, lay->node_key);
			if (val != UINT64_MAX && fn(key, val, arg)) /* nil is all ones in GC64 */
				return LP_LJ_OK;
		}
	}
	return LP_LJ_OK;
}

int lp_lj_str(const struct lp_lj_vm *vm, const struct lp_mem *m, uint64_t s, char *buf,
	      size_t size, size_t *len)
{
	const struct lp_lj_layout *lay = vm->lay;
	unsigned char b[24];
	uint32_t n;
	size_t copy;

	if (size > 0)
		buf[0] = '\0';
	if (lay->str_data > sizeof(b) || lp_mem_read(m, s, b, lay->str_data))
		return LP_LJ_EREAD;
	if (b[lay->str_gct] != LP_LJ_GCT_STR)
		return LP_LJ_EINVAL;
	n = lp_get32(b, lay->str_len);
	if (len)
		*len = n;
	if (size == 0)
		return LP_LJ_OK;
	copy = n < size - 1 ? n : size - 1;
	if (lp_mem_read(m, s + lay->str_data, buf, copy))
		return LP_LJ_EREAD;
	buf[copy] = '\0';
	return LP_LJ_OK;
}

int lp_lj_pos_line(const struct lp_lj_vm *vm, const struct lp_mem *m,
		   const struct lp_lj_proto *p, uint32_t pos, int32_t *line)
{
	uint64_t at;
	uint32_t v = 0;
	size_t w;

	if (p->lineinfo == 0 || pos > p->sizebc)
		return LP_LJ_ENONE;
	if (pos == p->sizebc) {
		*line = p->firstline + (int32_t)p->numline;
		return LP_LJ_OK;
	}
	if (pos == 0) {
		*line = p->firstline;
		return LP_LJ_OK;
	}
	/* lineinfo[i] belongs to instruction i+1 (the header has no entry); the entry width
	** follows numline so that every delta fits. */
	w = p->numline < 256 ? 1 : p->numline < 65536 ? 2 : 4;
	at = p->lineinfo + (uint64_t)(pos - 1) * w;
	if (lp_mem_read(m, at, &v, w)) /* little-endian: the low bytes of v */
		return LP_LJ_EREAD;
	if (v > p->numline)
		return LP_LJ_EINVAL;
	*line = p->firstline + (int32_t)v;
	return LP_LJ_OK;
}

int lp_lj_pc_line(const struct lp_lj_vm *vm, const struct lp_mem *m,
		  const struct lp_lj_proto *p, uint64_t pc, int32_t *line)
{
	const struct lp_lj_layout *lay = vm->lay;
	uint64_t end = p->bc + 4 * (uint64_t)p->sizebc;

	if ((pc & 3) != 0)
		return LP_LJ_ENONE;
	if (pc > p->bc && pc <= end)
		return lp_lj_pos_line(vm, m, p, (uint32_t)((pc - p->bc) / 4 - 1), line);
	/* A trace exit for BC_JLOOP leaves the link pointing just past GCtrace.startins; the
	** interpreter position is then the trace's start PC. Only trusted if the object there is a
	** trace of this very prototype. */
	if (pc > (uint64_t)lay->t_startins + 4) {
		uint64_t T = pc - 4 - lay->t_startins, startpt, startpc;
		uint8_t gct;
		if (lp_mem_u8(m, T + lay->t_gct, &gct) || gct != LP_LJ_GCT_TRACE ||
		    rd64(m, T + lay->t_startpt, &startpt) || startpt != p->pt ||
		    rd64(m, T + lay->t_startpc, &startpc) || startpc < p->bc || startpc >= end ||
		    (startpc & 3) != 0)
			return LP_LJ_ENONE;
		return lp_lj_pos_line(vm, m, p, (uint32_t)((startpc - p->bc) / 4), line);
	}
	return LP_LJ_ENONE;
}
