/*
** Unit tests of the LuaJIT VM model (src/vm/) on synthetic memory images.
**
** Each test lays out a fake VM in a memory image the way the real builds do (GG_State with
** main thread, global_State, jit_State and dispatch table; thread stacks with two-slot GC64
** frames; functions, prototypes with line info, strings; C frames; traces with snapshots) and
** reads it back through the image reader. Layout numbers come from the model's own tables,
** so each test runs on both supported builds; what the tests pin down is the structure:
** frame links, line computation, C-entry bookkeeping, detection invariants and the reaction
** to corrupt or unreadable memory.
*/
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "unit.h"
#include "vm/luajit.h"
#include "vm/luajit_trace.h"
#include "vm/luajit_walk.h"
#include "vm/mem.h"

/* -- Image builder ------------------------------------------------------------------ */

#define IMG_BASE UINT64_C(0x7f1000000000)
#define IMG_SIZE (1u << 20)
#define VM_LO    UINT64_C(0x555500010000) /* fake interpreter block; never read */
#define BC_CALL  66
#define STACK_SLOTS 256

static unsigned char img[IMG_SIZE];
static uint64_t brk_;

static uint64_t alloc(size_t n)
{
	uint64_t a = brk_;
	brk_ += (n + 15) & ~(size_t)15;
	if (brk_ > IMG_BASE + IMG_SIZE) {
		fprintf(stderr, "test image full\n");
		abort();
	}
	return a;
}

static void *host(uint64_t a)
{
	return img + (a - IMG_BASE);
}

static void w64(uint64_t a, uint64_t v) { memcpy(host(a), &v, 8); }
static void w32(uint64_t a, uint32_t v) { memcpy(host(a), &v, 4); }
static uint32_t r32(uint64_t a) { uint32_t v; memcpy(&v, host(a), 4); return v; }
static void w16(uint64_t a, uint16_t v) { memcpy(host(a), &v, 2); }
static void w8(uint64_t a, uint8_t v) { memcpy(host(a), &v, 1); }

struct fake {
	const struct lp_lj_layout *lay;
	uint64_t L, g, J, stack;
	struct lp_mem m;
	struct lp_mem_image mi;
	struct lp_mem_region reg;
	struct lp_lj_vm vm;
	struct lp_lj_thread t;
};

struct fproto {
	uint64_t fn, pt, bc;
	int32_t firstline;
	uint32_t numline, mult, sizebc;
};

static uint64_t slot(const struct fake *F, uint32_t i)
{
	return F->stack + 8 * (uint64_t)i;
}

static void thread_init(struct fake *F, uint64_t L, uint64_t stack)
{
	const struct lp_lj_layout *lay = F->lay;
	w8(L + lay->l_gct, LP_LJ_GCT_THREAD);
	w8(L + lay->l_dummy_ffid, LP_LJ_FFID_C);
	w64(L + lay->l_glref, F->g);
	w64(L + lay->l_stack, stack);
	w32(L + lay->l_stacksize, STACK_SLOTS);
	w64(L + lay->l_maxstack, stack + 8 * (STACK_SLOTS - 8));
	w64(L + lay->l_base, stack + 16);
	w64(L + lay->l_top, stack + 16);
	w64(stack, ((uint64_t)LP_LJ_ITYPE_THREAD << 47) | L); /* stack[0]: the thread */
	w64(stack + 8, ~UINT64_C(0));                         /* stack[1]: nil */
}

static uint64_t new_thread(struct fake *F)
{
	uint64_t L = alloc(F->lay->l_size), st = alloc(8 * STACK_SLOTS);
	thread_init(F, L, st);
	return L;
}

/* Builds a detectable VM for layout lay: GG_State (main thread + g + J + dispatch). */
static void fake_init(struct fake *F, const struct lp_lj_layout *lay)
{
	unsigned nd = lay->len_ddisp + lay->len_sdisp;
	uint64_t gg, d;

	memset(img, 0, sizeof(img));
	brk_ = IMG_BASE + 0x1000;
	memset(F, 0, sizeof(*F));
	F->lay = lay;
	gg = alloc(lay->l_size + lay->g2disp + 8 * nd);
	F->L = gg;
	F->g = gg + lay->l_size;
	F->J = F->g + lay->g2j;
	F->stack = alloc(8 * STACK_SLOTS);
	thread_init(F, F->L, F->stack);
	w64(F->g + lay->g_mainthref, F->L);
	w32(F->g + lay->g_bc_cfunc_int, lay->bc_funcc | (20u << 16));
	w32(F->g + lay->g_bc_cfunc_ext, lay->bc_funcc | (20u << 16));
	w32(F->g + lay->g_vmstate, (uint32_t)-2);
	w64(F->g + lay->g_cur_L, F->L);
	d = F->g + lay->g2disp;
	for (unsigned i = 0; i < nd; i++) /* all inside the block; static BC_ISLT is the lowest */
		w64(d + 8 * i, VM_LO + (i == lay->len_ddisp ? 0 : 16 + (i * 53) % (lay->vm_size - 16)));
	F->reg.addr = IMG_BASE;
	F->reg.bytes = img;
	F->reg.len = IMG_SIZE;
	F->mi.regions = &F->reg;
	F->mi.count = 1;
	lp_mem_image_init(&F->m, &F->mi);
}

/* Detects the fake VM and reads its main thread (after the frames are set up). */
static int fake_ready(struct fake *F)
{
	char err[200];
	int rc = lp_lj_detect(&F->vm, &F->m, F->L, err, sizeof(err));
	if (rc) {
		fprintf(stderr, "  detect: %s\n", err);
		return rc;
	}
	return lp_lj_thread_read(&F->vm, &F->m, F->L, &F->t);
}

static void set_base(struct fake *F, uint64_t L, uint32_t base, uint32_t top)
{
	uint64_t st;
	memcpy(&st, host(L + F->lay->l_stack), 8);
	w64(L + F->lay->l_base, st + 8 * (uint64_t)base);
	w64(L + F->lay->l_top, st + 8 * (uint64_t)top);
}

static uint64_t new_str(struct fake *F, const char *s)
{
	size_t n = strlen(s);
	uint64_t a = alloc(F->lay->str_data + n + 1);
	w8(a + F->lay->str_gct, LP_LJ_GCT_STR);
	w32(a + F->lay->str_len, (uint32_t)n);
	memcpy(host(a + F->lay->str_data), s, n + 1);
	return a;
}

/* A Lua function whose instruction pos >= 1 is on line firstline + min(pos * mult, numline).
** The lineinfo width follows numline, as in LuaJIT: u8 < 256, u16 < 65536, else u32. */
static struct fproto new_lua(struct fake *F, const char *chunk, int32_t firstline,
			     uint32_t numline, uint32_t mult, uint32_t sizebc)
{
	const struct lp_lj_layout *lay = F->lay;
	struct fproto p = {.firstline = firstline, .numline = numline, .mult = mult,
			   .sizebc = sizebc};
	size_t w = numline < 256 ? 1 : numline < 65536 ? 2 : 4;
	uint64_t li = alloc(w * sizebc);

	p.pt = alloc(lay->pt_size + 4 * (size_t)sizebc);
	p.bc = p.pt + lay->pt_size;
	w8(p.pt + lay->pt_gct, LP_LJ_GCT_PROTO);
	w32(p.pt + lay->pt_sizebc, sizebc);
	w64(p.pt + lay->pt_chunkname, new_str(F, chunk));
	w32(p.pt + lay->pt_firstline, (uint32_t)firstline);
	w32(p.pt + lay->pt_numline, numline);
	w64(p.pt + lay->pt_lineinfo, li);
	for (uint32_t i = 0; i + 1 < sizebc; i++) {
		uint32_t v = (i + 1) * mult > numline ? numline : (i + 1) * mult;
		memcpy(host(li + w * i), &v, w);
	}
	p.fn = alloc(48);
	w8(p.fn + lay->fn_gct, LP_LJ_GCT_FUNC);
	w8(p.fn + lay->fn_ffid, LP_LJ_FFID_LUA);
	w64(p.fn + lay->fn_pc, p.bc);
	return p;
}

static int32_t line_at(const struct fproto *p, uint32_t pos)
{
	uint32_t d = pos == 0 ? 0 : pos * p->mult > p->numline ? p->numline : pos * p->mult;
	return p->firstline + (int32_t)d;
}

static uint64_t new_cfunc(struct fake *F, uint8_t ffid, uint64_t f)
{
	uint64_t fn = alloc(56);
	w8(fn + F->lay->fn_gct, LP_LJ_GCT_FUNC);
	w8(fn + F->lay->fn_ffid, ffid);
	w64(fn + F->lay->fn_pc, F->g + F->lay->g_bc_cfunc_ext);
	w64(fn + F->lay->fn_f, f);
	return fn;
}

static void set_func(struct fake *F, uint32_t base, uint64_t fn)
{
	w64(slot(F, base - 2), ((uint64_t)LP_LJ_ITYPE_FUNC << 47) | fn);
}

/* Lua caller (frame base cb, prototype p) executes CALL A at position pos: the callee's
** function goes to slot cb+A, its link (the return PC) to cb+A+1. Returns the callee base. */
static uint32_t call_lua(struct fake *F, uint32_t cb, const struct fproto *p, uint32_t pos,
			 uint8_t A, uint64_t fn)
{
	uint32_t base = cb + A + 2;
	w32(p->bc + 4 * (uint64_t)pos, BC_CALL | (uint32_t)A << 8 | 2u << 16 | 1u << 24);
	set_func(F, base, fn);
	w64(slot(F, base - 1), p->bc + 4 * (uint64_t)(pos + 1));
	return base;
}

/* A frame at base linked to the frame at prev_base by a typed byte delta. */
static void call_delta(struct fake *F, uint32_t prev_base, uint32_t base, unsigned type,
		       uint64_t fn)
{
	set_func(F, base, fn);
	w64(slot(F, base - 1), 8 * (uint64_t)(base - prev_base) | type);
}

/* A C frame on the (fake) native stack: NRES, SAVE_L, SAVE_PC, SAVE_CFRAME. */
static uint64_t new_cframe(struct fake *F, uint64_t L, uint64_t pc, int32_t nres, uint64_t prev)
{
	uint64_t cf = alloc(F->lay->cf_size);
	w32(cf + F->lay->cf_nres, (uint32_t)nres);
	w64(cf + F->lay->cf_L, L);
	w64(cf + F->lay->cf_pc, pc);
	w64(cf + F->lay->cf_prev, prev);
	return cf;
}

/* k adjacent C frames, innermost (lowest address) first, as on a downward-growing stack. */
static uint64_t cframe_block(struct fake *F, unsigned k)
{
	return alloc(k * (size_t)F->lay->cf_size);
}

static void set_cframe(struct fake *F, uint64_t cf, uint64_t L, uint64_t pc, int32_t nres,
		       uint64_t prev)
{
	w32(cf + F->lay->cf_nres, (uint32_t)nres);
	w64(cf + F->lay->cf_L, L);
	w64(cf + F->lay->cf_pc, pc);
	w64(cf + F->lay->cf_prev, prev);
}

static unsigned walk(struct fake *F, uint64_t base, uint64_t leaf, struct lp_lj_frame *fr,
		     unsigned max, unsigned *flags)
{
	return lp_lj_walk(&F->vm, &F->m, &F->t, base, leaf, fr, max, flags);
}

#define FOR_LAYOUTS(lay)                                                       \
	size_t nlay_;                                                          \
	const struct lp_lj_layout *lays_ = lp_lj_layouts(&nlay_);             \
	for (const struct lp_lj_layout *lay = lays_; lay < lays_ + nlay_; lay++)

/* -- Readers ------------------------------------------------------------------------ */

static void test_image_reader(void)
{
	unsigned char a[16], b[16], out[24];
	struct lp_mem_region r[2] = {{0x2000, b, sizeof(b)}, {0x1ff0, a, sizeof(a)}};
	struct lp_mem_image mi = {r, 2, 0, 0};
	struct lp_mem m;

	for (int i = 0; i < 16; i++)
		a[i] = (unsigned char)i, b[i] = (unsigned char)(16 + i);
	lp_mem_image_init(&m, &mi);
	CHECK_EQ(lp_mem_read(&m, 0x1ff8, out, 16), 0); /* spans the two contiguous regions */
	CHECK_EQ(out[0], 8);
	CHECK_EQ(out[15], 23);
	CHECK_EQ(lp_mem_read(&m, 0x2008, out, 9), -1); /* runs past the end */
	CHECK_EQ(lp_mem_read(&m, 0x1000, out, 1), -1);
	CHECK_EQ(lp_mem_read(&m, UINT64_MAX - 2, out, 8), -1); /* wraps */
	CHECK_EQ(lp_mem_read(&m, 0x1000, out, 0), 0);          /* empty read */
	CHECK_EQ(mi.reads, 3);
	CHECK_EQ(mi.fails, 2);
}

/* A reader without a read function copies this process's memory inline (memprof). */
static void test_plain_reader(void)
{
	const struct lp_mem m = { NULL, NULL };
	uint64_t src[2] = { 0x1122334455667788ull, 42 }, out[2] = { 0, 0 };
	uint32_t half = 0;

	CHECK_EQ(lp_mem_read(&m, (uint64_t)(uintptr_t)src, out, sizeof(out)), 0);
	CHECK_EQ(out[0], src[0]);
	CHECK_EQ(out[1], 42);
	CHECK_EQ(lp_mem_u32(&m, (uint64_t)(uintptr_t)src + 4, &half), 0);
	CHECK_EQ(half, 0x11223344u);
	CHECK_EQ(lp_mem_read(&m, UINT64_MAX - 2, out, 8), -1); /* wraps: not read */
	CHECK_EQ(lp_mem_read(&m, 0, out, 0), 0);               /* empty: not read */
}

static void test_pid_reader(void)
{
	static volatile uint64_t here = 0x1122334455667788ull;
	struct lp_mem_pid p;
	struct lp_mem m;
	uint64_t v = 0;

	lp_mem_pid_init(&m, &p, getpid());
	CHECK_EQ(lp_mem_u64(&m, (uintptr_t)&here, &v), 0);
	CHECK_EQ(v, 0x1122334455667788ull);
	errno = 1234;
	CHECK_EQ(lp_mem_u64(&m, 8, &v), -1); /* EFAULT, not SIGSEGV */
	CHECK_EQ(errno, 1234);               /* preserved for signal handlers */
	CHECK_EQ(p.last_errno, EFAULT);
	CHECK_EQ(p.reads, 2);
	CHECK_EQ(p.fails, 1);
}

/* -- Detection ---------------------------------------------------------------------- */

/* Table iteration (cnames.c's scan at exit and signal stops): the registry's hash part,
 * nil values skipped, the budget kept, a non-table refused. */
struct tab_seen {
	uint64_t keys[8], vals[8];
	unsigned n;
};

static int tab_cb(uint64_t key, uint64_t val, void *arg)
{
	struct tab_seen *s = arg;
	if (s->n < 8) {
		s->keys[s->n] = key;
		s->vals[s->n] = val;
	}
	s->n++;
	return 0;
}

static void test_tables(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		fake_init(&F, lay);
		CHECK_EQ(fake_ready(&F), LP_LJ_OK);
		uint64_t tab = alloc(64), nodes = alloc(4 * lay->node_size), reg = 0;
		uint64_t k1 = ((uint64_t)LP_LJ_ITYPE_STR << 47) | new_str(&F, "_LOADED");
		uint64_t k2 = ((uint64_t)LP_LJ_ITYPE_STR << 47) | new_str(&F, "x");
		w8(tab + lay->tab_gct, LP_LJ_GCT_TAB);
		w64(tab + lay->tab_node, nodes);
		w32(tab + lay->tab_hmask, 3);
		for (unsigned i = 0; i < 4; i++) /* free nodes: nil values */
			w64(nodes + i * lay->node_size + lay->node_val, ~UINT64_C(0));
		w64(nodes + 1 * lay->node_size + lay->node_key, k1);
		w64(nodes + 1 * lay->node_size + lay->node_val, ((uint64_t)LP_LJ_ITYPE_TAB << 47) | tab);
		w64(nodes + 3 * lay->node_size + lay->node_key, k2);
		w64(nodes + 3 * lay->node_size + lay->node_val, 0x4000000000000000ull); /* 2.0 */
		w64(F.g + lay->g_registrytv, ((uint64_t)LP_LJ_ITYPE_TAB << 47) | tab);
		CHECK_EQ(lp_lj_registry(&F.vm, &F.m, &reg), LP_LJ_OK);
		CHECK_EQ(reg, tab);
		struct tab_seen s = { .n = 0 };
		size_t looked = 0;
		CHECK_EQ(lp_lj_tab_each(&F.vm, &F.m, tab, tab_cb, &s, 100, &looked), LP_LJ_OK);
		CHECK_EQ(s.n, 2u);
		CHECK_EQ(looked, 4u);
		CHECK_EQ(s.keys[0], k1);
		CHECK_EQ(s.vals[1], 0x4000000000000000ull);
		/* The budget: two nodes looked at, the first of them nil. */
		s.n = 0;
		looked = 0;
		CHECK_EQ(lp_lj_tab_each(&F.vm, &F.m, tab, tab_cb, &s, 2, &looked), LP_LJ_OK);
		CHECK_EQ(s.n, 1u);
		CHECK_EQ(looked, 2u);
		/* Not a table; a hash size that is no power of two; the registry not a table. */
		w8(tab + lay->tab_gct, LP_LJ_GCT_STR);
		CHECK_EQ(lp_lj_tab_each(&F.vm, &F.m, tab, tab_cb, &s, 100, &looked), LP_LJ_EINVAL);
		w8(tab + lay->tab_gct, LP_LJ_GCT_TAB);
		w32(tab + lay->tab_hmask, 5);
		CHECK_EQ(lp_lj_tab_each(&F.vm, &F.m, tab, tab_cb, &s, 100, &looked), LP_LJ_EINVAL);
		w64(F.g + lay->g_registrytv, ~UINT64_C(0));
		CHECK_EQ(lp_lj_registry(&F.vm, &F.m, &reg), LP_LJ_EINVAL);
	}
}

static void test_detect_layouts(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		uint64_t curL = 1, jb = 1, co;
		struct lp_lj_vm v2;
		char err[200] = "";
		int32_t st;

		fake_init(&F, lay);
		CHECK_EQ(fake_ready(&F), LP_LJ_OK);
		CHECK(F.vm.lay == lay);
		CHECK_EQ(F.vm.g, F.g);
		CHECK_EQ(F.vm.mainL, F.L);
		CHECK_EQ(F.vm.J, F.g + lay->g2j);
		CHECK_EQ(F.vm.disp, F.g + lay->g2disp);
		CHECK_EQ(F.vm.vm_lo, VM_LO);
		CHECK_EQ(F.vm.vm_hi, VM_LO + lay->vm_size);
		CHECK(lp_lj_in_vm(&F.vm, VM_LO + 100));
		CHECK(!lp_lj_in_vm(&F.vm, VM_LO + lay->vm_size));
		CHECK_STR(lp_lj_ffname(lay, F.vm.ffid_resume), "coroutine.resume");
		CHECK_STR(lp_lj_ffname(lay, F.vm.ffid_wrap_aux), "coroutine.wrap_aux");
		CHECK_STR(lp_lj_ffname(lay, 20), "pcall");
		CHECK_STR(lp_lj_ffname(lay, 0), "Lua");
		CHECK(lp_lj_ffname(lay, 100000) == NULL);
		CHECK_EQ(lp_lj_vmstate(&F.vm, &F.m, &st), 0);
		CHECK_EQ((uint32_t)st, (uint32_t)-2);
		CHECK_EQ(lp_lj_cur_L(&F.vm, &F.m, &curL), 0);
		CHECK_EQ(curL, F.L);
		CHECK_EQ(lp_lj_jit_base(&F.vm, &F.m, &jb), 0);
		CHECK_EQ(jb, 0);
		/* Any thread of the VM leads to the same VM; wrappers may set bc_cfunc_ext. */
		co = new_thread(&F);
		w32(F.g + lay->g_bc_cfunc_ext, lay->bc_funccw);
		CHECK_EQ(lp_lj_detect(&v2, &F.m, co, err, sizeof(err)), LP_LJ_OK);
		CHECK(v2.lay == lay && v2.g == F.g && v2.mainL == F.L);
	}
	/* The two builds differ where detection looks: the right one wins. */
	{
		size_t n;
		const struct lp_lj_layout *l = lp_lj_layouts(&n);
		CHECK_EQ(n, 2);
		CHECK_EQ(l[0].l_size, 96);
		CHECK_EQ(l[1].l_size, 112);
		CHECK(l[0].g2disp != l[1].g2disp);
		CHECK(l[0].nffnames != l[1].nffnames);
		CHECK_STR(lp_lj_ffname(&l[1], 38), "thread.exdata"); /* OpenResty additions */
		CHECK(lp_lj_ffname(&l[0], 38) && strcmp(lp_lj_ffname(&l[0], 38), "thread.exdata"));
	}
}

/* Expects detection of F's main thread to fail with code rc and a message containing what. */
static void expect_reject(struct fake *F, uint64_t L, int rc, const char *what)
{
	char err[256] = "";
	struct lp_lj_vm v;
	int got = lp_lj_detect(&v, &F->m, L, err, sizeof(err));

	CHECK_EQ(got, rc);
	if (rc == LP_LJ_EBUILD)
		CHECK(strncmp(err, "unsupported LuaJIT build (", 26) == 0);
	else
		CHECK(strncmp(err, "cannot read LuaJIT state (", 26) == 0);
	if (!strstr(err, what)) {
		fprintf(stderr, "  message \"%s\" lacks \"%s\"\n", err, what);
		unit_test_failed++;
	}
}

static void test_detect_rejects(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		uint64_t junk;

		fake_init(&F, lay);
		junk = alloc(256);
		for (unsigned i = 0; i < 256; i++)
			w8(junk + i, (uint8_t)(i * 7 + 3));
		expect_reject(&F, junk, LP_LJ_EBUILD, "does not hold a GC64 lua_State");
		{
			struct lp_lj_vm v;
			CHECK_EQ(lp_lj_detect(&v, &F.m, junk, NULL, 0), LP_LJ_EBUILD); /* no message */
		}
		expect_reject(&F, 0x1000, LP_LJ_EREAD, "unreadable");

		/* A non-GC64 lua_State: type byte at 5, dummy ffid at 6. */
		w8(junk + 5, LP_LJ_GCT_THREAD);
		w8(junk + 6, LP_LJ_FFID_C);
		expect_reject(&F, junk, LP_LJ_EBUILD, "non-GC64");

		/* glref pointing nowhere. */
		fake_init(&F, lay);
		w64(F.L + lay->l_glref, 0x10);
		expect_reject(&F, F.L, LP_LJ_EREAD, "global_State");

		/* mainthref not pointing back. */
		fake_init(&F, lay);
		w64(F.g + lay->g_mainthref, new_thread(&F) + 0); /* a thread of another g */
		{
			uint64_t other;
			memcpy(&other, host(F.g + lay->g_mainthref), 8);
			w64(other + lay->l_glref, F.g + 64);
		}
		expect_reject(&F, F.L, LP_LJ_EBUILD, "mainthref");

		/* Unknown sizeof(lua_State) (e.g. a build that grew it again). */
		fake_init(&F, lay);
		{
			uint64_t L2 = F.g - 104;
			memmove(host(L2), host(F.L), 96);
			w64(F.g + lay->g_mainthref, L2);
			expect_reject(&F, L2, LP_LJ_EBUILD, "sizeof(lua_State) = 104");
		}

		/* HEAD-like global_State: BC_FUNCC is 102 there. */
		fake_init(&F, lay);
		w32(F.g + lay->g_bc_cfunc_int, 102);
		expect_reject(&F, F.L, LP_LJ_EBUILD, "opcodes");

		/* A dispatch entry outside the interpreter block. */
		fake_init(&F, lay);
		w64(F.g + lay->g2disp + 8 * 3, VM_LO + lay->vm_size + 4096);
		expect_reject(&F, F.L, LP_LJ_EBUILD, "dispatch[3]");
		fake_init(&F, lay);
		w64(F.g + lay->g2disp + 8 * 3, VM_LO - 8); /* below lj_vm_asm_begin */
		expect_reject(&F, F.L, LP_LJ_EBUILD, "dispatch[3]");

		/* cur_L that is no thread of this VM. */
		fake_init(&F, lay);
		w64(F.g + lay->g_cur_L, junk);
		expect_reject(&F, F.L, LP_LJ_EBUILD, "cur_L");

		/* vmstate out of range (no traces exist). */
		fake_init(&F, lay);
		w32(F.g + lay->g_vmstate, 5);
		expect_reject(&F, F.L, LP_LJ_EBUILD, "vmstate");
		w32(F.g + lay->g_vmstate, (uint32_t)-9);
		expect_reject(&F, F.L, LP_LJ_EBUILD, "vmstate");
		/* 0 with no traces: a state the VM has not run yet (luaL_newstate), accepted. */
		w32(F.g + lay->g_vmstate, 0);
		{
			char err[256] = "";
			struct lp_lj_vm v;
			CHECK_EQ(lp_lj_detect(&v, &F.m, F.L, err, sizeof(err)), LP_LJ_OK);
		}

		/* Stack fields outside the stack. */
		fake_init(&F, lay);
		w64(F.L + lay->l_base, F.stack + 8 * (STACK_SLOTS + 1));
		w64(F.L + lay->l_top, F.stack + 8 * (STACK_SLOTS + 1));
		expect_reject(&F, F.L, LP_LJ_EBUILD, "stack fields out of range");
		fake_init(&F, lay);
		w64(F.L + lay->l_maxstack, F.stack - 8);
		expect_reject(&F, F.L, LP_LJ_EBUILD, "stack fields out of range");
	}
}

static void test_vmstate_map(void)
{
	uint32_t tr = 0;

	CHECK_EQ(lp_lj_vmstate_map(-1, NULL), LP_VMST_INTERP);
	CHECK_EQ(lp_lj_vmstate_map(-2, NULL), LP_VMST_CFUNC);
	CHECK_EQ(lp_lj_vmstate_map(-3, NULL), LP_VMST_GC);
	CHECK_EQ(lp_lj_vmstate_map(-4, NULL), LP_VMST_EXIT);
	CHECK_EQ(lp_lj_vmstate_map(-5, NULL), LP_VMST_RECORD);
	CHECK_EQ(lp_lj_vmstate_map(-6, NULL), LP_VMST_OPT);
	CHECK_EQ(lp_lj_vmstate_map(-7, NULL), LP_VMST_ASM);
	CHECK_EQ(lp_lj_vmstate_map(-8, NULL), -1);
	CHECK_EQ(lp_lj_vmstate_map(INT32_MIN, NULL), -1);
	tr = 7;
	CHECK_EQ(lp_lj_vmstate_map(0, &tr), LP_VMST_INTERP); /* the VM has not run yet */
	CHECK_EQ(tr, 7);
	CHECK_EQ(lp_lj_vmstate_map(42, &tr), LP_VMST_TRACE);
	CHECK_EQ(tr, 42);
}

static void test_thread_read(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct lp_lj_thread t;
		uint64_t co;

		fake_init(&F, lay);
		CHECK_EQ(fake_ready(&F), 0);
		co = new_thread(&F);
		w64(co + lay->l_cframe, 0x7ffd00001001ull);
		w8(co + lay->l_status, 1);
		CHECK_EQ(lp_lj_thread_read(&F.vm, &F.m, co, &t), LP_LJ_OK);
		CHECK_EQ(t.L, co);
		CHECK_EQ(t.cframe, 0x7ffd00001001ull);
		CHECK_EQ(t.status, 1);
		CHECK_EQ(t.stacksize, STACK_SLOTS);
		CHECK_EQ(t.stack_end, t.stack + 8 * STACK_SLOTS);
		/* Stale base/top of a running thread may be out of order: still accepted. */
		set_base(&F, co, 30, 20);
		CHECK_EQ(lp_lj_thread_read(&F.vm, &F.m, co, &t), LP_LJ_OK);
		CHECK_EQ(t.base, t.stack + 8 * 30);
		CHECK_EQ(t.top, t.stack + 8 * 20);
		set_base(&F, co, 30, STACK_SLOTS + 2);
		CHECK_EQ(lp_lj_thread_read(&F.vm, &F.m, co, &t), LP_LJ_EINVAL);
		set_base(&F, co, 2, 2);
		w64(co + lay->l_stack, 12); /* misaligned stack */
		CHECK_EQ(lp_lj_thread_read(&F.vm, &F.m, co, &t), LP_LJ_EINVAL);
		w64(co + lay->l_stack, t.stack);
		w64(co + lay->l_glref, F.g + 8); /* another VM */
		CHECK_EQ(lp_lj_thread_read(&F.vm, &F.m, co, &t), LP_LJ_EINVAL);
		CHECK_EQ(lp_lj_thread_read(&F.vm, &F.m, 0x20, &t), LP_LJ_EREAD);
		CHECK_EQ(lp_lj_thread_read(&F.vm, &F.m, F.g, &t), LP_LJ_EINVAL); /* not a thread */
	}
}

/* -- Prototypes, strings, lines ------------------------------------------------------ */

static void test_proto_and_lines(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct fproto p8, p16, p32;
		struct lp_lj_proto p;
		char buf[8];
		size_t len = 0;
		int32_t line = -7;

		fake_init(&F, lay);
		CHECK_EQ(fake_ready(&F), 0);
		p8 = new_lua(&F, "@small.lua", 10, 200, 7, 40);
		p16 = new_lua(&F, "=medium", 1000, 60000, 1234, 40);
		p32 = new_lua(&F, "@huge.lua", 5, 3000000, 70001, 40);

		CHECK_EQ(lp_lj_proto_read(&F.vm, &F.m, p8.pt, &p), 0);
		CHECK_EQ(p.bc, p8.bc);
		CHECK_EQ(p.firstline, 10);
		CHECK_EQ(p.numline, 200);
		CHECK_EQ(p.sizebc, 40);
		CHECK_EQ(lp_lj_str(&F.vm, &F.m, p.chunkname, buf, sizeof(buf), &len), 0);
		CHECK_STR(buf, "@small."); /* truncated, NUL-terminated */
		CHECK_EQ(len, 10);
		CHECK_EQ(lp_lj_str(&F.vm, &F.m, p.chunkname, buf, 0, &len), 0);
		CHECK_EQ(lp_lj_str(&F.vm, &F.m, p8.fn, buf, sizeof(buf), NULL), LP_LJ_EINVAL);
		CHECK_EQ(lp_lj_proto_read(&F.vm, &F.m, p8.fn, &p), LP_LJ_EINVAL);
		CHECK_EQ(lp_lj_proto_read(&F.vm, &F.m, 0x30, &p), LP_LJ_EREAD);

		const struct fproto *all[3] = {&p8, &p16, &p32};
		for (int k = 0; k < 3; k++) {
			const struct fproto *q = all[k];
			CHECK_EQ(lp_lj_proto_read(&F.vm, &F.m, q->pt, &p), 0);
			for (uint32_t pos = 0; pos < q->sizebc; pos++) {
				CHECK_EQ(lp_lj_pos_line(&F.vm, &F.m, &p, pos, &line), 0);
				CHECK_EQ(line, line_at(q, pos));
			}
			/* Frame convention: the PC after instruction pos. */
			CHECK_EQ(lp_lj_pc_line(&F.vm, &F.m, &p, q->bc + 4 * 13, &line), 0);
			CHECK_EQ(line, line_at(q, 12));
			CHECK_EQ(lp_lj_pos_line(&F.vm, &F.m, &p, q->sizebc, &line), 0);
			CHECK_EQ(line, q->firstline + (int32_t)q->numline);
			CHECK_EQ(lp_lj_pos_line(&F.vm, &F.m, &p, q->sizebc + 1, &line), LP_LJ_ENONE);
			CHECK_EQ(lp_lj_pc_line(&F.vm, &F.m, &p, q->bc, &line), LP_LJ_ENONE);
			CHECK_EQ(lp_lj_pc_line(&F.vm, &F.m, &p, q->bc + 6, &line), LP_LJ_ENONE);
			CHECK_EQ(lp_lj_pc_line(&F.vm, &F.m, &p, q->bc + 4 * 41 + 4096, &line),
				 LP_LJ_ENONE);
		}
		/* The u16 case really reads 2-byte entries: a value that only fits 2 bytes. */
		CHECK_EQ(lp_lj_proto_read(&F.vm, &F.m, p16.pt, &p), 0);
		CHECK_EQ(lp_lj_pos_line(&F.vm, &F.m, &p, 30, &line), 0);
		CHECK_EQ(line, 1000 + 30 * 1234);
		/* Corrupt entry beyond numline; stripped line info. */
		CHECK_EQ(lp_lj_proto_read(&F.vm, &F.m, p8.pt, &p), 0);
		w8(p.lineinfo + 4, 250);
		CHECK_EQ(lp_lj_pos_line(&F.vm, &F.m, &p, 5, &line), LP_LJ_EINVAL);
		p.lineinfo = 0;
		CHECK_EQ(lp_lj_pos_line(&F.vm, &F.m, &p, 5, &line), LP_LJ_ENONE);
	}
}

/* -- Walker ------------------------------------------------------------------------- */

static void check_frame(const struct lp_lj_frame *f, uint8_t kind, uint64_t addr, int32_t line,
			uint8_t link, uint8_t flags)
{
	CHECK_EQ(f->kind, kind);
	CHECK_EQ(f->addr, addr);
	CHECK_EQ(f->line, line);
	CHECK_EQ(f->link, link);
	CHECK_EQ(f->flags, flags);
}

/*
** main chunk (lua_pcall from C: FRAME_CP) -> f1 (CALL A=3 at pos 5, u8 lines)
** -> f2 (A=0 at pos 2, u16 lines) -> f3 (A=4 at pos 7, u32 lines) -> C function (A=1, pos 9).
*/
static void test_walk_lua_chain(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct fproto mainp, f1, f2, f3;
		struct lp_lj_frame fr[16];
		uint64_t cfn, cf;
		uint32_t b0, b1, b2, b3, b4;
		unsigned n, fl;

		fake_init(&F, lay);
		mainp = new_lua(&F, "@main.lua", 0, 50, 1, 30);
		f1 = new_lua(&F, "@a.lua", 100, 255, 3, 30);
		f2 = new_lua(&F, "@b.lua", 200, 256, 11, 30);
		f3 = new_lua(&F, "@c.lua", 300, 65536, 4000, 30);
		cfn = new_cfunc(&F, LP_LJ_FFID_C, 0x401234);
		cf = new_cframe(&F, F.L, F.L, 0, 0);
		b0 = 4;
		call_delta(&F, 2, b0, LP_LJ_FRAME_CP, mainp.fn);
		b1 = call_lua(&F, b0, &mainp, 5, 3, f1.fn);
		b2 = call_lua(&F, b1, &f1, 2, 0, f2.fn);
		b3 = call_lua(&F, b2, &f2, 7, 4, f3.fn);
		b4 = call_lua(&F, b3, &f3, 9, 1, cfn);
		set_base(&F, F.L, b4, b4 + 3);
		w64(F.L + lay->l_cframe, cf);
		CHECK_EQ(fake_ready(&F), 0);

		n = walk(&F, 0, 0, fr, 16, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
		CHECK_EQ(n, 5);
		check_frame(&fr[0], LP_FRAME_CFUNC, 0x401234, 0, LP_LJ_FRAME_LUA, LP_LJ_FR_TOP);
		check_frame(&fr[1], LP_FRAME_LFUNC, f3.pt, line_at(&f3, 9), LP_LJ_FRAME_LUA, 0);
		check_frame(&fr[2], LP_FRAME_LFUNC, f2.pt, line_at(&f2, 7), LP_LJ_FRAME_LUA, 0);
		check_frame(&fr[3], LP_FRAME_LFUNC, f1.pt, line_at(&f1, 2), LP_LJ_FRAME_LUA, 0);
		check_frame(&fr[4], LP_FRAME_LFUNC, mainp.pt, line_at(&mainp, 5), LP_LJ_FRAME_CP,
			    LP_LJ_FR_CENTRY);
		CHECK_EQ(fr[0].func, cfn);
		CHECK_EQ(fr[0].ffid, LP_LJ_FFID_C);
		CHECK_EQ(fr[1].func, f3.fn);
		CHECK_EQ(fr[1].slot, slot(&F, b3 - 1));
		CHECK_EQ(fr[1].pc, f3.bc + 4 * 10);
		CHECK_EQ(fr[4].cframe, cf);
		CHECK_EQ(fr[4].slot, slot(&F, b0 - 1));
		CHECK(line_at(&f3, 9) == 300 + 36000); /* really the u32 path */

		/* Truncation keeps the innermost frames. */
		n = walk(&F, 0, 0, fr, 3, &fl);
		CHECK_EQ(n, 3);
		CHECK_EQ(fl, LP_LJ_WALK_TRUNC);
		CHECK_EQ(fr[2].addr, f2.pt);

		/* Starting from an inner base (the interpreter's BASE) with its PC register. */
		n = walk(&F, slot(&F, b3), f3.bc + 4 * 4, fr, 16, &fl);
		CHECK_EQ(n, 4);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
		check_frame(&fr[0], LP_FRAME_LFUNC, f3.pt, line_at(&f3, 3), LP_LJ_FRAME_LUA,
			    LP_LJ_FR_TOP);
		/* A leaf PC from elsewhere is not trusted: definition line, flagged. */
		n = walk(&F, slot(&F, b3), f2.bc + 4 * 4, fr, 16, &fl);
		CHECK_EQ(fr[0].line, 300);
		CHECK_EQ(fr[0].flags, LP_LJ_FR_TOP | LP_LJ_FR_LINEDEF);
		CHECK_EQ(fr[0].pc, 0);
		/* Without a leaf PC the C frame's SAVE_PC is used, unless it is the entry mark. */
		w64(cf + lay->cf_pc, f3.bc + 4 * 6);
		n = walk(&F, slot(&F, b3), 0, fr, 16, &fl);
		CHECK_EQ(fr[0].line, line_at(&f3, 5));
		CHECK_EQ(fr[0].flags, LP_LJ_FR_TOP);
		w64(cf + lay->cf_pc, F.L);
		n = walk(&F, slot(&F, b3), 0, fr, 16, &fl);
		CHECK_EQ(fr[0].flags, LP_LJ_FR_TOP | LP_LJ_FR_LINEDEF);
		(void)n;

		/* An idle thread (base at stack+2) has no frames; bases outside the stack fail. */
		n = walk(&F, F.stack + 16, 0, fr, 16, &fl);
		CHECK_EQ(n, 0);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
		n = walk(&F, F.stack + 8, 0, fr, 16, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_EBASE);
		n = walk(&F, F.stack + 8 * STACK_SLOTS + 8, 0, fr, 16, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_EBASE);
		n = walk(&F, slot(&F, b3) + 4, 0, fr, 16, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_EBASE);
		CHECK_EQ(n, 0);
	}
}

/*
** Vararg call: f is called with CALL A=2 at pos 4 of main; FUNCV moves the frame up by
** 3 varargs + 2 and links the new frame with FRAME_VARG. A dummy frame (the thread itself in
** the function slot, as lj_err_optype_call leaves it) sits on top of f and is not reported.
*/
static void test_walk_vararg_dummy(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct fproto mainp, f;
		struct lp_lj_frame fr[8];
		uint32_t b0, breal, bvar, bd;
		uint64_t cfs;
		unsigned n, fl;

		fake_init(&F, lay);
		mainp = new_lua(&F, "@main.lua", 0, 80, 2, 30);
		f = new_lua(&F, "@va.lua", 40, 20, 1, 30);
		b0 = 4;
		call_delta(&F, 2, b0, LP_LJ_FRAME_CP, mainp.fn);
		call_delta(&F, b0, b0 + 6, LP_LJ_FRAME_VARG, mainp.fn); /* main is vararg */
		b0 += 6;
		breal = call_lua(&F, b0, &mainp, 4, 2, f.fn);
		bvar = breal + 3 + 2;
		call_delta(&F, breal, bvar, LP_LJ_FRAME_VARG, f.fn);
		/* Dummy frame on top (a failed lua_call from C code that f's pos 6 called): the
		** thread in the function slot, a C link. The failed entry owns the inner C frame;
		** f's PC is the SAVE_PC of the outer one, which also runs main. */
		bd = bvar + 5;
		w64(slot(&F, bd - 2), ((uint64_t)LP_LJ_ITYPE_THREAD << 47) | F.L);
		w64(slot(&F, bd - 1), 8 * (uint64_t)(bd - bvar) | LP_LJ_FRAME_C);
		set_base(&F, F.L, bd, bd);
		cfs = cframe_block(&F, 2);
		set_cframe(&F, cfs, F.L, F.L, 0, cfs + lay->cf_size);
		set_cframe(&F, cfs + lay->cf_size, F.L, f.bc + 4 * 7, 0, 0);
		w64(F.L + lay->l_cframe, cfs);
		CHECK_EQ(fake_ready(&F), 0);

		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
		CHECK_EQ(n, 2);
		/* f's line comes from the C frame's SAVE_PC (below a C link: the dummy's). */
		check_frame(&fr[0], LP_FRAME_LFUNC, f.pt, line_at(&f, 6), LP_LJ_FRAME_LUA,
			    LP_LJ_FR_TOP | LP_LJ_FR_VARARG);
		CHECK_EQ(fr[0].slot, slot(&F, bvar - 1));
		check_frame(&fr[1], LP_FRAME_LFUNC, mainp.pt, line_at(&mainp, 4), LP_LJ_FRAME_CP,
			    LP_LJ_FR_VARARG | LP_LJ_FR_CENTRY);
		CHECK_EQ(fr[1].cframe, cfs + lay->cf_size);
		CHECK_EQ(fr[1].slot, slot(&F, b0 - 1));
	}
}

/* pcall builtin frame, a continuation frame (__index in Lua) and an FFI callback. */
static void test_walk_pcall_cont_fficb(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct fproto mainp, g, idx, cb;
		struct lp_lj_frame fr[8];
		uint64_t pcallfn, ffcall, cf0, cf1, cf2;
		uint32_t b0, bp, bg, bi, bff, bcb;
		unsigned n, fl;

		fake_init(&F, lay);
		mainp = new_lua(&F, "@main.lua", 0, 80, 2, 30);
		g = new_lua(&F, "@g.lua", 10, 50, 1, 30);
		idx = new_lua(&F, "@idx.lua", 20, 50, 1, 30);
		cb = new_lua(&F, "@cb.lua", 30, 50, 1, 30);
		pcallfn = new_cfunc(&F, 20, VM_LO + 0x800);
		ffcall = new_cfunc(&F, 171, 0x7f0000123400ull); /* some C-implemented builtin */
		cf2 = cframe_block(&F, 3);
		cf1 = cf2 + lay->cf_size;
		cf0 = cf1 + lay->cf_size;
		set_cframe(&F, cf2, F.L, F.L, 0, cf1);
		set_cframe(&F, cf1, F.L, F.L, 0, cf0);
		set_cframe(&F, cf0, F.L, F.L, 0, 0);
		b0 = 4;
		call_delta(&F, 2, b0, LP_LJ_FRAME_CP, mainp.fn);
		bp = call_lua(&F, b0, &mainp, 3, 1, pcallfn);        /* pcall(g) at pos 3 */
		bg = bp + 2;
		call_delta(&F, bp, bg, LP_LJ_FRAME_PCALL, g.fn);     /* g runs under pcall */
		/* g indexes a table at pos 8: __index runs in a continuation frame whose two
		** extra slots below hold the continuation and g's PC. */
		bi = bg + 6;
		w64(slot(&F, bi - 4), VM_LO + 0x1234);
		w64(slot(&F, bi - 3), g.bc + 4 * 9);
		call_delta(&F, bg, bi, LP_LJ_FRAME_CONT, idx.fn);
		/* __index calls an FFI function (builtin), which calls back into Lua. */
		bff = call_lua(&F, bi, &idx, 4, 2, ffcall);
		bcb = bff + 6;
		w64(slot(&F, bcb - 4), 1); /* LJ_CONT_FFI_CALLBACK */
		w64(slot(&F, bcb - 3), 0);
		call_delta(&F, bff, bcb, LP_LJ_FRAME_CONT, cb.fn);
		set_base(&F, F.L, bcb, bcb + 2);
		w64(F.L + lay->l_cframe, cf2);
		CHECK_EQ(fake_ready(&F), 0);

		n = walk(&F, 0, cb.bc + 4 * 3, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
		CHECK_EQ(n, 6);
		check_frame(&fr[0], LP_FRAME_LFUNC, cb.pt, line_at(&cb, 2), LP_LJ_FRAME_CONT,
			    LP_LJ_FR_TOP | LP_LJ_FR_CENTRY | LP_LJ_FR_FFICB);
		CHECK_EQ(fr[0].cframe, cf2);
		check_frame(&fr[1], LP_FRAME_FFUNC, 0x7f0000123400ull, 0, LP_LJ_FRAME_LUA, 0);
		CHECK_EQ(fr[1].ffid, 171);
		check_frame(&fr[2], LP_FRAME_LFUNC, idx.pt, line_at(&idx, 4), LP_LJ_FRAME_CONT, 0);
		check_frame(&fr[3], LP_FRAME_LFUNC, g.pt, line_at(&g, 8), LP_LJ_FRAME_PCALL, 0);
		check_frame(&fr[4], LP_FRAME_FFUNC, VM_LO + 0x800, 0, LP_LJ_FRAME_LUA, 0);
		CHECK_EQ(fr[4].ffid, 20);
		CHECK_STR(lp_lj_ffname(lay, fr[4].ffid), "pcall");
		check_frame(&fr[5], LP_FRAME_LFUNC, mainp.pt, line_at(&mainp, 3), LP_LJ_FRAME_CP,
			    LP_LJ_FR_CENTRY);
		/* The FFI callback consumed cf2; main's lua_pcall entry is the next one. */
		CHECK_EQ(fr[5].cframe, cf1);
		/* An FFI callback's entry is left to the callback's own rules, even over a Lua
		** function (idx stands in for one here). */
		w64(cf2 + lay->cf_size - 8, 0x403456);
		CHECK_EQ(lp_lj_entry_caller(&F.vm, &F.m, &fr[0], &fr[2]), 0);
		struct lp_lj_frame plain = fr[0];
		plain.flags &= (uint8_t)~LP_LJ_FR_FFICB;
		CHECK_EQ(lp_lj_entry_caller(&F.vm, &F.m, &plain, &fr[2]), 0x403456);
	}
}

/*
** C entries: main (lua_pcall, C frame cfA) -> Lua f -> C function g -> lua_call -> Lua h
** (C frame cfB) -> a debug hook: C calls the Lua hook function k with lua_call (cfC) while h
** is stopped at pos 6 (SAVE_PC of cfB) -> C function probe on top. In between, a frameless
** lua_cpcall C frame (NRES < 0 with a stack level above everything) must be skipped.
*/
static void test_walk_centries_cframes(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct fproto mainp, f, h, k;
		struct lp_lj_frame fr[10];
		struct lp_lj_cframe cfs[8];
		uint64_t gfn, probe, cfA, cfB, cfC, cfX;
		uint32_t b0, bf, bg, bh, bk, bp;
		unsigned n, fl;

		fake_init(&F, lay);
		mainp = new_lua(&F, "@main.lua", 0, 80, 2, 30);
		f = new_lua(&F, "@f.lua", 10, 50, 1, 30);
		h = new_lua(&F, "@h.lua", 20, 50, 1, 30);
		k = new_lua(&F, "@k.lua", 30, 50, 1, 30);
		gfn = new_cfunc(&F, LP_LJ_FFID_C, 0x401000);
		probe = new_cfunc(&F, LP_LJ_FFID_C, 0x402000);
		b0 = 4;
		call_delta(&F, 2, b0, LP_LJ_FRAME_CP, mainp.fn);
		bf = call_lua(&F, b0, &mainp, 2, 0, f.fn);
		bg = call_lua(&F, bf, &f, 3, 1, gfn);
		bh = bg + 4;
		call_delta(&F, bg, bh, LP_LJ_FRAME_C, h.fn);
		bk = bh + 5;
		call_delta(&F, bh, bk, LP_LJ_FRAME_C, k.fn);
		bp = call_lua(&F, bk, &k, 5, 0, probe);
		set_base(&F, F.L, bp, bp);
		cfX = cframe_block(&F, 4);
		cfC = cfX + lay->cf_size;
		cfB = cfC + lay->cf_size;
		cfA = cfB + lay->cf_size;
		set_cframe(&F, cfA, F.L, F.L, 0, 0);
		set_cframe(&F, cfB, F.L, h.bc + 4 * 7, 0, cfA);
		set_cframe(&F, cfC, F.L, F.L, 0, cfB);
		set_cframe(&F, cfX, F.L, 0, -(int32_t)(8 * (bp + 10)), cfC); /* frameless cpcall */
		w64(F.L + lay->l_cframe, cfX);
		CHECK_EQ(fake_ready(&F), 0);

		n = walk(&F, 0, 0, fr, 10, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
		CHECK_EQ(n, 6);
		check_frame(&fr[0], LP_FRAME_CFUNC, 0x402000, 0, LP_LJ_FRAME_LUA, LP_LJ_FR_TOP);
		check_frame(&fr[1], LP_FRAME_LFUNC, k.pt, line_at(&k, 5), LP_LJ_FRAME_C,
			    LP_LJ_FR_CENTRY);
		CHECK_EQ(fr[1].cframe, cfC);
		check_frame(&fr[2], LP_FRAME_LFUNC, h.pt, line_at(&h, 6), LP_LJ_FRAME_C,
			    LP_LJ_FR_CENTRY);
		CHECK_EQ(fr[2].cframe, cfB);
		check_frame(&fr[3], LP_FRAME_CFUNC, 0x401000, 0, LP_LJ_FRAME_LUA, 0);
		check_frame(&fr[4], LP_FRAME_LFUNC, f.pt, line_at(&f, 3), LP_LJ_FRAME_LUA, 0);
		check_frame(&fr[5], LP_FRAME_LFUNC, mainp.pt, line_at(&mainp, 2), LP_LJ_FRAME_CP,
			    LP_LJ_FR_CENTRY);
		CHECK_EQ(fr[5].cframe, cfA);

		/* The C code that entered the VM with no frame on the Lua stack: the hook's
		** caller, at the return address that ends k's C frame (h, a Lua function, is
		** below). Not for h, whose caller is the C function g on the Lua stack, nor for a
		** frame that no VM entry is right above, nor with the C frame unknown or
		** unreadable. */
		w64(cfC + lay->cf_size - 8, 0x403456);
		w64(cfB + lay->cf_size - 8, 0x404567);
		CHECK_EQ(lp_lj_entry_caller(&F.vm, &F.m, &fr[1], &fr[2]), 0x403456);
		CHECK_EQ(lp_lj_entry_caller(&F.vm, &F.m, &fr[2], &fr[3]), 0);
		CHECK_EQ(lp_lj_entry_caller(&F.vm, &F.m, &fr[0], &fr[1]), 0);
		CHECK_EQ(lp_lj_entry_caller(&F.vm, &F.m, &fr[4], &fr[5]), 0);
		struct lp_lj_frame odd = fr[1];
		odd.cframe = 0;
		CHECK_EQ(lp_lj_entry_caller(&F.vm, &F.m, &odd, &fr[2]), 0);
		odd.cframe = IMG_BASE + IMG_SIZE + 4096;
		CHECK_EQ(lp_lj_entry_caller(&F.vm, &F.m, &odd, &fr[2]), 0);

		/* The chain itself, with the resume bit and tagged links. */
		w64(cfC + lay->cf_prev, cfB | LP_LJ_CFRAME_RESUME);
		n = lp_lj_cframes(&F.vm, &F.m, cfX | 2, cfs, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
		CHECK_EQ(n, 4);
		CHECK_EQ(cfs[0].addr, cfX);
		CHECK_EQ(cfs[0].nres, -(int32_t)(8 * (bp + 10)));
		CHECK_EQ(cfs[1].addr, cfC);
		CHECK_EQ(cfs[2].addr, cfB);
		CHECK_EQ(cfs[2].resume, 1);
		CHECK_EQ(cfs[2].pc, h.bc + 4 * 7);
		CHECK_EQ(cfs[2].L, F.L);
		CHECK_EQ(cfs[3].addr, cfA);
		CHECK_EQ(cfs[3].resume, 0);
		n = lp_lj_cframes(&F.vm, &F.m, cfX, cfs, 2, &fl);
		CHECK_EQ(n, 2);
		CHECK_EQ(fl, LP_LJ_WALK_TRUNC);

		/* A cycle or an upward link in the chain is refused; the frame walk goes on but
		** stops trusting C frames for lines and C-entry positions. */
		w64(cfB + lay->cf_prev, cfC);
		n = lp_lj_cframes(&F.vm, &F.m, cfX, cfs, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_ELINK);
		CHECK_EQ(n, 3);
		n = walk(&F, 0, 0, fr, 10, &fl);
		CHECK_EQ(n, 6);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM | LP_LJ_WALK_ECFRAME);
		CHECK_EQ(fr[2].line, line_at(&h, 6));
		CHECK_EQ(fr[5].cframe, 0);
		CHECK(fr[5].flags & LP_LJ_FR_CENTRY);
		w64(cfB + lay->cf_prev, IMG_BASE + IMG_SIZE + 4096); /* above, unreadable */
		n = lp_lj_cframes(&F.vm, &F.m, cfX, cfs, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_EREAD);
		CHECK_EQ(n, 3);
	}
}

/* Corrupt stacks: every failure ends the walk with a flag and keeps the frames so far. */
static void test_walk_corrupt(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct fproto mainp, f;
		struct lp_lj_frame fr[8];
		uint32_t b0, b1;
		unsigned n, fl;

		fake_init(&F, lay);
		mainp = new_lua(&F, "@main.lua", 0, 80, 2, 30);
		f = new_lua(&F, "@f.lua", 10, 50, 1, 30);
		b0 = 20;
		call_delta(&F, 2, b0, LP_LJ_FRAME_CP, mainp.fn);
		b1 = call_lua(&F, b0, &mainp, 2, 3, f.fn);
		set_base(&F, F.L, b1, b1);
		CHECK_EQ(fake_ready(&F), 0);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(n, 2);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);

		/* Delta below the stack. */
		w64(slot(&F, b0 - 1), 8 * 40 | LP_LJ_FRAME_CP);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(n, 2);
		CHECK_EQ(fl, LP_LJ_WALK_ELINK);
		/* Zero delta: a self-loop. */
		w64(slot(&F, b0 - 1), 0 | LP_LJ_FRAME_C);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_ELINK);
		/* Negative delta: points upwards. */
		w64(slot(&F, b0 - 1), (uint64_t)-64 | LP_LJ_FRAME_C);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_ELINK);
		CHECK_EQ(n, 2);
		/* Delta landing inside the two reserved bottom slots. */
		w64(slot(&F, b0 - 1), 8 * (uint64_t)(b0 - 1) | LP_LJ_FRAME_CP);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_ELINK);
		call_delta(&F, 2, b0, LP_LJ_FRAME_CP, mainp.fn);

		/* A Lua link whose CALL operand A points below the stack. */
		w32(mainp.bc + 4 * 2, BC_CALL | 200u << 8);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(n, 1);
		CHECK_EQ(fl, LP_LJ_WALK_ELINK);
		/* A Lua link PC that is not 4-aligned, or unreadable. */
		w64(slot(&F, b1 - 1), mainp.bc + 4 * 3 + 2);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_ELINK);
		w64(slot(&F, b1 - 1), 0x1000);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_EREAD);
		CHECK_EQ(n, 1);
		CHECK_EQ(fr[0].flags, LP_LJ_FR_TOP | LP_LJ_FR_LINEDEF);
		b1 = call_lua(&F, b0, &mainp, 2, 3, f.fn);

		/* Function slot holding a number, a function pointer to unreadable memory, a
		** function whose header is not a function, a prototype that is not one. */
		w64(slot(&F, b0 - 2), 0x4045000000000000ull); /* 42.0 */
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(n, 1);
		CHECK_EQ(fl, LP_LJ_WALK_EFUNC);
		w64(slot(&F, b0 - 2), ((uint64_t)LP_LJ_ITYPE_FUNC << 47) | 0x2000);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(n, 1);
		CHECK_EQ(fl, LP_LJ_WALK_EREAD);
		/* A null function pointer: unreadable as well, never an empty slot of the
		** walk's function cache (whose other fields are not cleared). */
		set_func(&F, b0, 0);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(n, 1);
		CHECK_EQ(fl, LP_LJ_WALK_EREAD);
		set_func(&F, b0, mainp.pt);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_EFUNC);
		set_func(&F, b0, mainp.fn);
		w8(mainp.pt + lay->pt_gct, LP_LJ_GCT_STR);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_EFUNC);
		w8(mainp.pt + lay->pt_gct, LP_LJ_GCT_PROTO);
		/* Prototype in unreadable memory. */
		w64(mainp.fn + lay->fn_pc, 0x5000);
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_EREAD);
		CHECK_EQ(n, 1);
		w64(mainp.fn + lay->fn_pc, mainp.bc);

		/* A thread whose stack pointer lies outside readable memory. */
		F.t.stack = 0x7000;
		F.t.stack_end = 0x7000 + 8 * STACK_SLOTS;
		n = walk(&F, 0x7000 + 8 * 40, 0, fr, 8, &fl);
		CHECK_EQ(n, 0);
		CHECK_EQ(fl, LP_LJ_WALK_EREAD);
		CHECK_EQ(fake_ready(&F), 0);

		/* Sanity after the repairs. */
		n = walk(&F, 0, 0, fr, 8, &fl);
		CHECK_EQ(n, 2);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
	}
}

/* A deep stack (more frames than fit) and the function cache across recursion. */
static void test_walk_deep(void)
{
	struct fake F;
	struct fproto mainp, r;
	struct lp_lj_frame fr[40];
	uint32_t b;
	unsigned n, fl;
	size_t nl;
	const struct lp_lj_layout *lay = lp_lj_layouts(&nl);

	fake_init(&F, lay);
	mainp = new_lua(&F, "@main.lua", 0, 80, 2, 30);
	r = new_lua(&F, "@rec.lua", 1, 9, 1, 30);
	b = 4;
	call_delta(&F, 2, b, LP_LJ_FRAME_CP, mainp.fn);
	b = call_lua(&F, b, &mainp, 1, 0, r.fn);
	for (int i = 0; i < 100; i++)
		b = call_lua(&F, b, &r, 5, 0, r.fn);
	set_base(&F, F.L, b, b);
	CHECK_EQ(fake_ready(&F), 0);
	n = walk(&F, 0, r.bc + 4 * 2, fr, 40, &fl);
	CHECK_EQ(n, 40);
	CHECK_EQ(fl, LP_LJ_WALK_TRUNC);
	CHECK_EQ(fr[0].line, 2);
	CHECK_EQ(fr[1].line, 6);
	CHECK_EQ(fr[39].line, 6);
	/* One read for the function and the prototype of the recursive function. */
	uint64_t r0 = F.mi.reads;
	n = walk(&F, 0, 0, fr, 40, &fl);
	CHECK(F.mi.reads - r0 < 40 * 3);
}

/* JLOOP fix-up: after a trace exit the interpreter's PC can point into the GCtrace, just past
** its copy of the start instruction; the position is then the trace's start PC. */
static void test_jloop_fixup(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct fproto mainp, f;
		struct lp_lj_frame fr[4];
		struct lp_lj_proto p;
		uint64_t T, pc;
		uint32_t b0, b1;
		unsigned n, fl;
		int32_t line;

		fake_init(&F, lay);
		mainp = new_lua(&F, "@main.lua", 0, 80, 2, 30);
		f = new_lua(&F, "@f.lua", 10, 50, 1, 30);
		T = alloc(lay->t_size);
		w8(T + lay->t_gct, LP_LJ_GCT_TRACE);
		w64(T + lay->t_startpt, f.pt);
		w64(T + lay->t_startpc, f.bc + 4 * 11);
		pc = T + lay->t_startins + 4;
		b0 = 4;
		call_delta(&F, 2, b0, LP_LJ_FRAME_CP, mainp.fn);
		b1 = call_lua(&F, b0, &mainp, 7, 1, f.fn);
		set_base(&F, F.L, b1, b1);
		CHECK_EQ(fake_ready(&F), 0);
		n = walk(&F, 0, pc, fr, 4, &fl);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
		CHECK_EQ(n, 2);
		CHECK_EQ(fr[0].line, line_at(&f, 11));
		CHECK_EQ(fr[0].flags, LP_LJ_FR_TOP);
		CHECK_EQ(fr[1].line, line_at(&mainp, 7));
		/* Not trusted if the trace belongs to another prototype. */
		CHECK_EQ(lp_lj_proto_read(&F.vm, &F.m, mainp.pt, &p), 0);
		CHECK_EQ(lp_lj_pc_line(&F.vm, &F.m, &p, pc, &line), LP_LJ_ENONE);
		w64(T + lay->t_startpt, mainp.pt);
		n = walk(&F, 0, pc, fr, 4, &fl);
		CHECK_EQ(fr[0].flags, LP_LJ_FR_TOP | LP_LJ_FR_LINEDEF);
		CHECK_EQ(fr[0].line, 10);
	}
}

/* -- Coroutines ---------------------------------------------------------------------- */

/*
** Coroutine co resumed from Lua: co->cframe = cfco | CFRAME_RESUME; the resumer's interpreter
** C frame is at cfco + CFRAME_SIZE with SAVE_L = main thread, whose own L->cframe is that
** frame and whose top frame is the coroutine.resume builtin.
*/
static void test_resumer(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct fproto mainp, body;
		struct lp_lj_frame fr[4];
		struct lp_lj_thread co, r;
		uint64_t coL, cost, resfn, cfco, rcf, got = 0;
		uint32_t b0, bres;
		unsigned n, fl;

		fake_init(&F, lay);
		mainp = new_lua(&F, "@main.lua", 0, 80, 2, 30);
		body = new_lua(&F, "@co.lua", 5, 10, 1, 30);
		CHECK_EQ(fake_ready(&F), 0);
		resfn = new_cfunc(&F, F.vm.ffid_resume, VM_LO + 0x900);
		b0 = 4;
		call_delta(&F, 2, b0, LP_LJ_FRAME_CP, mainp.fn);
		bres = call_lua(&F, b0, &mainp, 6, 2, resfn);
		set_base(&F, F.L, bres, bres + 2);
		cfco = alloc(2 * lay->cf_size);
		rcf = cfco + lay->cf_size;
		w64(rcf + lay->cf_L, F.L);
		w64(rcf + lay->cf_prev, new_cframe(&F, F.L, F.L, 0, 0));
		w64(F.L + lay->l_cframe, rcf);
		w64(cfco + lay->cf_L, 0); /* filled below */
		w64(rcf - 8, VM_LO + 0x940); /* returns into coroutine.resume, in the VM block */
		coL = new_thread(&F);
		memcpy(&cost, host(coL + lay->l_stack), 8);
		w64(cfco + lay->cf_L, coL);
		w64(coL + lay->l_cframe, cfco | LP_LJ_CFRAME_RESUME);
		/* The coroutine's body: base frame linked FRAME_CP to the bottom. */
		w64(cost + 8 * 2, ((uint64_t)LP_LJ_ITYPE_FUNC << 47) | body.fn);
		w64(cost + 8 * 3, 8 * 2 | LP_LJ_FRAME_CP);
		set_base(&F, coL, 4, 6);
		CHECK_EQ(lp_lj_thread_read(&F.vm, &F.m, coL, &co), 0);

		n = lp_lj_walk(&F.vm, &F.m, &co, 0, body.bc + 4 * 3, fr, 4, &fl);
		CHECK_EQ(n, 1);
		CHECK_EQ(fl, LP_LJ_WALK_BOTTOM);
		check_frame(&fr[0], LP_FRAME_LFUNC, body.pt, 7, LP_LJ_FRAME_CP,
			    LP_LJ_FR_TOP | LP_LJ_FR_CENTRY);
		CHECK_EQ(fr[0].cframe, cfco);

		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, &got), LP_LJ_OK);
		CHECK_EQ(r.L, F.L);
		CHECK_EQ(got, rcf);
		n = lp_lj_walk(&F.vm, &F.m, &r, 0, 0, fr, 4, &fl);
		CHECK_EQ(n, 2);
		CHECK_EQ(fr[0].kind, LP_FRAME_FFUNC);
		CHECK_STR(lp_lj_ffname(lay, fr[0].ffid), "coroutine.resume");
		CHECK_EQ(fr[1].line, line_at(&mainp, 6));
		/* The main thread has no resumer. */
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &r, &co, NULL), LP_LJ_ENONE);

		/* Refused: resumer's top frame is not resume/wrap; its cframe is elsewhere; the
		** slot holds no thread (lua_resume from C); no resume bit (suspended, cframe 0). */
		set_func(&F, bres, new_cfunc(&F, 20, VM_LO));
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		set_func(&F, bres, new_cfunc(&F, F.vm.ffid_wrap_aux, VM_LO));
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_OK);
		w64(F.L + lay->l_cframe, rcf + 16);
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		w64(F.L + lay->l_cframe, rcf);
		w64(rcf + lay->cf_L, mainp.fn);
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		w64(rcf + lay->cf_L, coL);
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		w64(rcf + lay->cf_L, 0x4000); /* unreadable */
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_EREAD);
		/* lua_resume from C: the resume frame returns outside the VM block, and the
		** host's frame above it is not read (nginx's held an unmapped address there,
		** which memprof's plain reads followed into a SIGSEGV). */
		w64(rcf - 8, 0x1234);
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		/* Its caller may be the main thread's C function (a scheduler in C), whose
		** interpreter C frame lies above on the stack: a guess, for the caller to confirm
		** by the native stack. Not while the main thread runs a builtin or Lua, with its
		** C frame below the resume frame or too far above, nor for a coroutine resumed
		** by a builtin. */
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		set_func(&F, bres, new_cfunc(&F, LP_LJ_FFID_C, 0x5000));
		w64(F.L + lay->l_cframe, rcf + 0x200);
		got = 0;
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, &got), LP_LJ_OK);
		CHECK_EQ(r.L, F.L);
		CHECK_EQ(got, rcf + 0x200);
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &r, &co, NULL), LP_LJ_ENONE);
		w64(F.L + lay->l_cframe, rcf - 0x40);
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		w64(F.L + lay->l_cframe, rcf + LP_LJ_C_RESUMER_SPAN + 8);
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		w64(F.L + lay->l_cframe, rcf + 0x200);
		set_func(&F, bres, new_cfunc(&F, 20, VM_LO));
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		set_func(&F, bres, mainp.fn);
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		/* Down the coroutines the main thread's top frames run, the thread running a C
		** function whose C frame is the nearest above: the main thread's C function
		** resumed A (its first argument), A's resumes co (0x100 above against 0x200);
		** through coroutine.wrap (the wrapper's upvalue) and coroutine.resume (its
		** argument) too. Not when a top frame names no thread: the main thread then. */
		uint64_t A = new_thread(&F), ast, cfn = new_cfunc(&F, LP_LJ_FFID_C, 0x5000);
		memcpy(&ast, host(A + lay->l_stack), 8);
		w64(ast + 8 * 2, ((uint64_t)LP_LJ_ITYPE_FUNC << 47) | cfn);
		w64(ast + 8 * 3, 8 * 2 | LP_LJ_FRAME_C);
		w64(ast + 8 * 4, ((uint64_t)LP_LJ_ITYPE_THREAD << 47) | coL);
		set_base(&F, A, 4, 5);
		w64(A + lay->l_cframe, rcf + 0x100);
		set_func(&F, bres, cfn);
		w64(slot(&F, bres), ((uint64_t)LP_LJ_ITYPE_THREAD << 47) | A);
		got = 0;
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, &got), LP_LJ_OK);
		CHECK_EQ(r.L, A);
		CHECK_EQ(got, rcf + 0x100);
		/* co yielded back into A's C function, which goes on (cur_L still co, no C
		** frame): A, whose top frame names co, and its function; the main thread's,
		** whose top frame names A, when A is current. None when A has left its C frame,
		** or when a frame names co but a thread met before runs below it. When no frame
		** names cur: the chain's thread in the deepest C frame, when its top is a C
		** function (the main thread's, or A's when A runs below it: a scheduler in a
		** coroutine resuming a thread no argument names); none when that thread runs a
		** builtin. */
		uint64_t rfn = 0;
		w64(coL + lay->l_cframe, 0); /* co yielded */
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, coL, &r, &rfn), LP_LJ_OK);
		CHECK_EQ(r.L, A);
		CHECK_EQ(rfn, cfn);
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, A, &r, &rfn), LP_LJ_OK);
		CHECK_EQ(r.L, F.L);
		w64(A + lay->l_cframe, 0);
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, coL, &r, &rfn), LP_LJ_ENONE);
		uint64_t other = new_thread(&F);
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, other, &r, &rfn), LP_LJ_OK);
		CHECK_EQ(r.L, F.L);
		w64(A + lay->l_cframe, rcf + 0x100);
		rfn = 0;
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, other, &r, &rfn), LP_LJ_OK);
		CHECK_EQ(r.L, A);
		CHECK_EQ(rfn, cfn);
		w64(F.L + lay->l_cframe, rcf + 0x80); /* the main thread's below A's */
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, coL, &r, &rfn), LP_LJ_ENONE);
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, other, &r, &rfn), LP_LJ_OK);
		CHECK_EQ(r.L, F.L);
		w64(F.L + lay->l_cframe, 0);
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, other, &r, &rfn), LP_LJ_OK);
		CHECK_EQ(r.L, A);
		w64(A + lay->l_cframe, 0);
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, other, &r, &rfn), LP_LJ_ENONE);
		w64(A + lay->l_cframe, rcf + 0x100);
		w64(F.L + lay->l_cframe, rcf + 0x200);
		set_func(&F, bres, new_cfunc(&F, 20, VM_LO));
		CHECK_EQ(lp_lj_c_running(&F.vm, &F.m, coL, &r, &rfn), LP_LJ_ENONE);
		w64(coL + lay->l_cframe, cfco | LP_LJ_CFRAME_RESUME);
		set_func(&F, bres, cfn);
		uint64_t wrapfn = new_cfunc(&F, F.vm.ffid_wrap_aux, VM_LO + 0x980);
		w64(wrapfn + lay->fn_f + 8, ((uint64_t)LP_LJ_ITYPE_THREAD << 47) | A);
		set_func(&F, bres, wrapfn);
		w64(slot(&F, bres), 0);
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, &got), LP_LJ_OK);
		CHECK_EQ(r.L, A);
		set_func(&F, bres, new_cfunc(&F, F.vm.ffid_resume, VM_LO + 0x900));
		w64(slot(&F, bres), ((uint64_t)LP_LJ_ITYPE_THREAD << 47) | A);
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, &got), LP_LJ_OK);
		CHECK_EQ(r.L, A);
		/* A yielding coroutine (no C frame) under the builtin that resumed it, down
		** the chain from the main thread: the main thread's coroutine.resume names A;
		** A's C function names co (not a builtin: none); then A's coroutine.resume
		** does. Not for a thread no frame names. */
		CHECK_EQ(lp_lj_chain_resumer(&F.vm, &F.m, A, &r), LP_LJ_OK);
		CHECK_EQ(r.L, F.L);
		CHECK_EQ(lp_lj_chain_resumer(&F.vm, &F.m, coL, &r), LP_LJ_ENONE);
		uint64_t ares = new_cfunc(&F, F.vm.ffid_resume, VM_LO + 0x900);
		w64(ast + 8 * 2, ((uint64_t)LP_LJ_ITYPE_FUNC << 47) | ares);
		CHECK_EQ(lp_lj_chain_resumer(&F.vm, &F.m, coL, &r), LP_LJ_OK);
		CHECK_EQ(r.L, A);
		CHECK_EQ(lp_lj_chain_resumer(&F.vm, &F.m, new_thread(&F), &r), LP_LJ_ENONE);
		w64(ast + 8 * 2, ((uint64_t)LP_LJ_ITYPE_FUNC << 47) | cfn);
		/* A's C frame farther than the main thread's: the main thread's is nearer. */
		set_func(&F, bres, cfn);
		w64(A + lay->l_cframe, rcf + 0x300);
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, &got), LP_LJ_OK);
		CHECK_EQ(r.L, F.L);
		CHECK_EQ(got, rcf + 0x200);
		w64(A + lay->l_cframe, rcf + 0x100);
		w64(slot(&F, bres), mainp.fn); /* no thread */
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, &got), LP_LJ_OK);
		CHECK_EQ(r.L, F.L);

		set_func(&F, bres, new_cfunc(&F, F.vm.ffid_resume, VM_LO + 0x900));
		w64(F.L + lay->l_cframe, rcf);
		w64(rcf - 8, VM_LO + 0x940);
		CHECK_EQ(lp_lj_c_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		co.cframe = 0;
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		co.cframe = cfco;
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);

		/* The coroutine inside two C frames of its own (lj_vm_cpcall: a trace exit, the
		** JIT compiler), below its resume frame: found along their chain. */
		uint64_t blk = cframe_block(&F, 4), cs = lay->cf_size;
		uint64_t in2 = blk, in1 = blk + cs, cfco2 = blk + 2 * cs, rcf2 = blk + 3 * cs;
		w64(rcf2 + lay->cf_L, F.L);
		w64(rcf2 + lay->cf_prev, 0);
		w64(rcf2 - 8, VM_LO + 0x940);
		w64(F.L + lay->l_cframe, rcf2);
		w64(cfco2 + lay->cf_L, coL);
		w64(cfco2 + lay->cf_prev, 0);
		w64(in1 + lay->cf_L, coL);
		w64(in1 + lay->cf_prev, cfco2 | LP_LJ_CFRAME_RESUME);
		w64(in2 + lay->cf_L, coL);
		w64(in2 + lay->cf_prev, in1);
		co.cframe = in2;
		got = 0;
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, &got), LP_LJ_OK);
		CHECK_EQ(got, rcf2);
		CHECK_EQ(r.L, F.L);
		/* Refused: a chain that goes down the stack, one without a resume frame. */
		w64(in1 + lay->cf_prev, in2 | LP_LJ_CFRAME_RESUME);
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		w64(in1 + lay->cf_prev, 0);
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_ENONE);
		w64(in1 + lay->cf_prev, cfco2 | LP_LJ_CFRAME_RESUME);
		CHECK_EQ(lp_lj_resumer(&F.vm, &F.m, &co, &r, NULL), LP_LJ_OK);
	}
}

/* -- Traces --------------------------------------------------------------------------- */

/*
** Trace 2 of 4 slots: root trace starting in f at pos 3, 300 bytes of machine code,
** snapshots at mcode offsets 0, 40, 40, 120 and 200. Snapshot 3 is inside an inlined
** call of g, laid out as LuaJIT's recorder does in GC64 (FR2) mode: g's closure as an IR
** constant in slot 6 (no flag), the frame's link in slot 7 (SNAP_FRAME, a KNUM constant
** holding the return PC into f, after the call at f's instruction CALLPOS).
*/
static void test_traces(void)
{
	FOR_LAYOUTS(lay) {
		struct fake F;
		struct fproto f, g;
		struct lp_lj_trace t;
		struct lp_lj_trace_loc loc;
		uint64_t arr, T, snap, map, irk, ir;
		const uint64_t mcode = 0x7f0000400000ull;
		const uint16_t mcofs[5] = {0, 40, 40, 120, 200};
		const uint32_t pos[5] = {3, 5, 6, 2, 9}; /* snapshot PCs (instruction to resume) */
		const uint32_t ref = 0x7ff0, CALLPOS = 7;

		fake_init(&F, lay);
		f = new_lua(&F, "@f.lua", 10, 50, 1, 30);
		g = new_lua(&F, "@g.lua", 100, 50, 2, 30);
		arr = alloc(8 * 4);
		w64(F.J + lay->j_trace, arr);
		w32(F.J + lay->j_sizetrace, 4);
		T = alloc(lay->t_size);
		w64(arr + 8 * 2, T);
		w8(T + lay->t_gct, LP_LJ_GCT_TRACE);
		w16(T + lay->t_traceno, 2);
		w64(T + lay->t_mcode, mcode);
		w32(T + lay->t_szmcode, 300);
		w16(T + lay->t_spadjust, 24);
		w16(T + lay->t_link, 2);
		w64(T + lay->t_startpt, f.pt);
		w64(T + lay->t_startpc, f.bc + 4 * 3);
		snap = alloc(5 * lay->snap_size);
		map = alloc(4 * 40);
		irk = alloc(128);
		ir = irk - 8 * (uint64_t)ref;
		w8(irk + 4, 8);   /* IRT_FUNC */
		w8(irk + 5, 24);  /* IR_KGC */
		w64(irk + 8, g.fn); /* the KGC constant's 64-bit payload */
		w8(irk + 16 + 4, 14); /* IRT_NUM */
		w8(irk + 16 + 5, 28); /* IR_KNUM at ref + 2: the link */
		w64(irk + 24, f.bc + 4 * (uint64_t)(CALLPOS + 1));
		w64(T + lay->t_snap, snap);
		w64(T + lay->t_snapmap, map);
		w64(T + lay->t_ir, ir);
		w16(T + lay->t_nsnap, 5);
		for (uint32_t i = 0, mo = 0; i < 5; i++) {
			const struct fproto *p = i == 3 ? &g : &f;
			uint8_t nent = i == 3 ? 3 : 1;
			uint64_t pc = p->bc + 4 * (uint64_t)pos[i];
			w32(snap + i * lay->snap_size + lay->snap_mapofs, mo);
			w16(snap + i * lay->snap_size + lay->snap_mcofs, mcofs[i]);
			w8(snap + i * lay->snap_size + lay->snap_nent, nent);
			w32(map + 4 * mo, 3u << 24 | 0x8005); /* an ordinary slot entry */
			if (i == 3) {
				w32(map + 4 * (mo + 1), 6u << 24 | ref);                /* g */
				w32(map + 4 * (mo + 2), 7u << 24 | 0x010000 | (ref + 2)); /* link */
			}
			w64(map + 4 * (mo + nent), pc << 8 | 1);
			mo += nent + 2;
		}
		CHECK_EQ(fake_ready(&F), 0);

		CHECK_EQ(lp_lj_trace_read(&F.vm, &F.m, 2, &t), LP_LJ_OK);
		CHECK_EQ(t.addr, T);
		CHECK_EQ(t.mcode, mcode);
		CHECK_EQ(t.szmcode, 300);
		CHECK_EQ(t.spadjust, 24);
		CHECK_EQ(t.startpt, f.pt);
		CHECK_EQ(t.startpc, f.bc + 12);
		CHECK_EQ(t.nsnap, 5);
		CHECK_EQ(t.link, 2);
		CHECK_EQ(t.root, 0);
		CHECK(lp_lj_trace_has(&t, mcode));
		CHECK(!lp_lj_trace_has(&t, mcode + 300));
		CHECK_EQ(lp_lj_trace_read(&F.vm, &F.m, 1, &t), LP_LJ_ENONE); /* empty slot */
		CHECK_EQ(lp_lj_trace_read(&F.vm, &F.m, 0, &t), LP_LJ_ENONE);
		CHECK_EQ(lp_lj_trace_read(&F.vm, &F.m, 4, &t), LP_LJ_ENONE); /* beyond size */
		w64(arr + 8 * 3, T);                                          /* wrong number */
		CHECK_EQ(lp_lj_trace_read(&F.vm, &F.m, 3, &t), LP_LJ_EINVAL);
		w64(arr + 8 * 3, 0x3000);
		CHECK_EQ(lp_lj_trace_read(&F.vm, &F.m, 3, &t), LP_LJ_EREAD);
		w64(arr + 8 * 3, 0);
		CHECK_EQ(lp_lj_trace_find(&F.vm, &F.m, mcode + 299, &t), LP_LJ_OK);
		CHECK_EQ(t.traceno, 2);
		CHECK_EQ(lp_lj_trace_find(&F.vm, &F.m, mcode + 300, &t), LP_LJ_ENONE);

		CHECK_EQ(lp_lj_trace_read(&F.vm, &F.m, 2, &t), LP_LJ_OK);
		const struct {
			uint32_t ofs, snap;
		} cases[] = {{0, 0}, {39, 0}, {40, 2}, {119, 2}, {120, 3}, {199, 3}, {200, 4},
			     {299, 4}};
		for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
			uint32_t s = cases[i].snap;
			const struct fproto *p = s == 3 ? &g : &f;
			CHECK_EQ(lp_lj_trace_locate(&F.vm, &F.m, &t, mcode + cases[i].ofs, 0, &loc),
				 LP_LJ_OK);
			CHECK_EQ(loc.snapno, s);
			CHECK_EQ(loc.pc, p->bc + 4 * (uint64_t)pos[s] + 4);
			CHECK_EQ(loc.pt, p->pt);
			CHECK_EQ(loc.line, line_at(p, pos[s]));
			CHECK_EQ(loc.inlined, s == 3);
		}
		CHECK_EQ(lp_lj_trace_locate(&F.vm, &F.m, &t, mcode + 300, 0, &loc), LP_LJ_ENONE);
		CHECK_EQ(lp_lj_trace_locate(&F.vm, &F.m, &t, mcode - 1, 0, &loc), LP_LJ_ENONE);

		/* Snapshot 4, the next, no longer holds g's call: g may have returned before the
		** code at 130 runs; only f is sure, at the call. */
		struct lp_lj_trace_frame fr[4];
		uint64_t bpc = 0, rpc = 0;
		unsigned delta = 9;
		/* An exit through snapshot 3 restores g's frame, whatever the next snapshot
		** holds: g at the snapshot's PC, f at the call, the innermost base one slot up
		** (the snapshot PC's low byte). */
		CHECK_EQ(lp_lj_trace_exit_frames(&F.vm, &F.m, &t, 3, fr, 4, &bpc, &rpc, &delta), 1);
		CHECK_EQ(fr[0].pt, g.pt);
		CHECK_EQ(fr[0].ffid, 0);
		CHECK_EQ(fr[0].pc, g.bc + 4 * (uint64_t)pos[3] + 4);
		CHECK_EQ(fr[0].line, line_at(&g, pos[3]));
		CHECK_EQ(bpc, f.bc + 4 * (uint64_t)(CALLPOS + 1));
		CHECK_EQ(rpc, g.bc + 4 * (uint64_t)pos[3] + 4);
		CHECK_EQ(delta, 1);
		/* Snapshot 0 has no inlined frame: f resumes at its PC. No snapshot 5. */
		CHECK_EQ(lp_lj_trace_exit_frames(&F.vm, &F.m, &t, 0, fr, 4, &bpc, &rpc, &delta), 0);
		CHECK_EQ(rpc, f.bc + 4 * (uint64_t)pos[0] + 4);
		CHECK_EQ(bpc, rpc);
		CHECK_EQ(lp_lj_trace_exit_frames(&F.vm, &F.m, &t, 5, fr, 4, &bpc, &rpc, &delta), -1);
		CHECK_EQ(lp_lj_trace_exit_frames(&F.vm, &F.m, &t, 3, fr, 0, &bpc, &rpc, &delta), -1);
		CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, f.pt, fr, 4, &bpc), 0);
		CHECK_EQ(bpc, f.bc + 4 * (uint64_t)(CALLPOS + 1));
		/* When snapshot 4 still holds it (the same link and callee), g is running: at the
		** snapshot's PC, f (the base frame) at the call. */
		uint64_t m4 = map + 4 * (uint64_t)(3 * 3 + 3 + 2);
		w8(snap + 4 * lay->snap_size + lay->snap_nent, 3);
		w32(m4 + 4, 6u << 24 | ref);
		w32(m4 + 8, 7u << 24 | 0x010000 | (ref + 2));
		w64(m4 + 12, (f.bc + 4 * (uint64_t)pos[4]) << 8 | 1);
		/* ...but f's slot 3 holds another value there: f ran in between, so g had
		** returned (called again from the same site: a loop the compiler unrolled). */
		w32(m4, 3u << 24 | 0x8006);
		CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, f.pt, fr, 4, &bpc), 0);
		w32(m4, 3u << 24 | 0x8005);
		CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, f.pt, fr, 4, &bpc), 1);
		CHECK_EQ(fr[0].pt, g.pt);
		CHECK_EQ(fr[0].pc, g.bc + 4 * (uint64_t)pos[3] + 4);
		CHECK_EQ(fr[0].line, line_at(&g, pos[3]));
		CHECK_EQ(bpc, f.bc + 4 * (uint64_t)(CALLPOS + 1));
		CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, f.pt, fr, 0, &bpc), -1);
		/* The last snapshot: its calls all return before the trace ends, so none is
		** sure (here its PC is f's, which does not check out with g's call above it). */
		bpc = 0;
		CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 200, f.pt, fr, 4, &bpc), -1);
		w8(snap + 4 * lay->snap_size + lay->snap_nent, 1); /* as it was: no call */
		w64(map + 4 * (uint64_t)(3 * 3 + 3 + 2 + 1), (f.bc + 4 * (uint64_t)pos[4]) << 8 | 1);
		CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 200, f.pt, fr, 4, &bpc), 0);
		CHECK_EQ(bpc, f.bc + 4 * (uint64_t)pos[4] + 4);
		/* A base frame the link does not return into (g's frame on the stack, say):
		** the frames do not check out, nothing is claimed. */
		CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, g.pt, fr, 4, &bpc), -1);
		/* A link that is no Lua frame's (a vararg or continuation frame's own link:
		** low bits 2 or 3) names no call: the snapshot's PC is then not in f. */
		w64(irk + 24, f.bc + 4 * (uint64_t)(CALLPOS + 1) + 3);
		CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, f.pt, fr, 4, &bpc), -1);
		/* A continuation (a metamethod inlined): its PC into f in a SNAP_CONT slot,
		** the metamethod's closure in the slot above it (snapshot 4 does not hold it:
		** f at the call, which locate names g from). */
		w64(irk + 24, f.bc + 4 * (uint64_t)(CALLPOS + 1));
		uint64_t m3 = map + 4 * (uint64_t)(3 * 3);
		CHECK_EQ(r32(m3 + 4), 6u << 24 | ref);
		w32(m3 + 4, 6u << 24 | 0x020000 | (ref + 2)); /* contpc */
		w32(m3 + 8, 7u << 24 | ref);                  /* g */
		bpc = 0;
		CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, f.pt, fr, 4, &bpc), 0);
		CHECK_EQ(bpc, f.bc + 4 * (uint64_t)(CALLPOS + 1));
		CHECK_EQ(lp_lj_trace_locate(&F.vm, &F.m, &t, mcode + 130, f.pt, &loc), LP_LJ_OK);
		CHECK_EQ(loc.pt, g.pt);
		CHECK_EQ(loc.inlined, 1);
		w32(m3 + 4, 6u << 24 | ref);
		w32(m3 + 8, 7u << 24 | 0x010000 | (ref + 2));

		/* f calls pcall(g), both inlined: pcall's closure (a builtin) in slot 6, its
		** link (the return PC into f) in 7, g in 8 and its link in 9, of a pcall
		** frame's type (6, with the frame's size above it), which names no PC. In
		** snapshots 3 and 4 (placed apart, room for five entries each). */
		{
			const uint8_t FFID_PCALL = 20;
			uint64_t pc_fn = new_cfunc(&F, FFID_PCALL, 0);
			w8(irk + 32 + 4, 8);  /* IRT_FUNC */
			w8(irk + 32 + 5, 24); /* IR_KGC at ref + 4: pcall */
			w64(irk + 40, pc_fn);
			w8(irk + 48 + 4, 14);
			w8(irk + 48 + 5, 28); /* IR_KNUM at ref + 6: g's link, a pcall frame */
			w64(irk + 56, 3u << 3 | 6);
			for (uint32_t i = 3; i <= 4; i++) {
				uint32_t mo = i == 3 ? 24 : 31;
				w32(snap + i * lay->snap_size + lay->snap_mapofs, mo);
				w8(snap + i * lay->snap_size + lay->snap_nent, 5);
				w32(map + 4 * mo, 3u << 24 | 0x8005);
				w32(map + 4 * (mo + 1), 6u << 24 | (ref + 4));            /* pcall */
				w32(map + 4 * (mo + 2), 7u << 24 | 0x010000 | (ref + 2)); /* into f */
				w32(map + 4 * (mo + 3), 8u << 24 | ref);                  /* g */
				w32(map + 4 * (mo + 4), 9u << 24 | 0x010000 | (ref + 6)); /* pcall's */
				w64(map + 4 * (mo + 5), (g.bc + 4 * (uint64_t)pos[3]) << 8 | 1);
			}
			bpc = 0;
			CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, f.pt, fr, 4, &bpc),
				 2);
			CHECK_EQ(fr[0].ffid, 0);
			CHECK_EQ(fr[0].pt, g.pt);
			CHECK_EQ(fr[0].line, line_at(&g, pos[3]));
			CHECK_EQ(fr[1].ffid, FFID_PCALL);
			CHECK_EQ(fr[1].pt, FFID_PCALL);
			CHECK_EQ(fr[1].line, 0);
			CHECK_EQ(bpc, f.bc + 4 * (uint64_t)(CALLPOS + 1));
			/* Snapshot 4 no longer holds g: pcall is sure, g is not. */
			w8(snap + 4 * lay->snap_size + lay->snap_nent, 3);
			w64(map + 4 * (31 + 3), (f.bc + 4 * (uint64_t)pos[4]) << 8 | 1);
			CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, f.pt, fr, 4, &bpc),
				 1);
			CHECK_EQ(fr[0].ffid, FFID_PCALL);
			/* A pcall frame's link under a Lua function (no builtin below it): the
			** frames do not check out. */
			w32(map + 4 * (24 + 1), 6u << 24 | ref); /* g where pcall was */
			CHECK_EQ(lp_lj_trace_inlined(&F.vm, &F.m, &t, mcode + 130, f.pt, fr, 4, &bpc),
				 -1);
			/* As it was, for what follows: snapshots 3 and 4 where they were. */
			w32(snap + 3 * lay->snap_size + lay->snap_mapofs, 9);
			w8(snap + 3 * lay->snap_size + lay->snap_nent, 3);
			w32(snap + 4 * lay->snap_size + lay->snap_mapofs, 14);
			w8(snap + 4 * lay->snap_size + lay->snap_nent, 1);
		}

		/* A frame slot referring to a constant that is no function (sysbench's traces
		** had a KINT of 22 there): its payload is never read as an object. */
		w8(irk + 5, 23); /* IR_KINT */
		w64(irk + 8, 22);
		uint64_t fails0 = F.mi.fails;
		CHECK_EQ(lp_lj_trace_locate(&F.vm, &F.m, &t, mcode + 130, g.pt, &loc), LP_LJ_OK);
		CHECK_EQ(loc.pt, g.pt);
		CHECK_EQ(loc.inlined, 0);
		CHECK_EQ(F.mi.fails, fails0);
		w8(irk + 5, 24);

		/* No inlined frame constant: the PC is looked up in base_pt, then startpt. */
		w64(irk + 8, 0x6000); /* unreadable constant */
		CHECK_EQ(lp_lj_trace_locate(&F.vm, &F.m, &t, mcode + 130, g.pt, &loc), LP_LJ_OK);
		CHECK_EQ(loc.pt, g.pt);
		CHECK_EQ(loc.inlined, 0);
		CHECK_EQ(loc.line, line_at(&g, 2));
		CHECK_EQ(lp_lj_trace_locate(&F.vm, &F.m, &t, mcode + 130, 0, &loc), LP_LJ_OK);
		CHECK_EQ(loc.pt, 0); /* g's PC is not in f: unknown, not a wrong line */
		CHECK_EQ(loc.line, 0);
		CHECK_EQ(loc.pc, g.bc + 4 * 2 + 4);
		/* Unreadable snapshots. */
		t.snap = 0x8000;
		CHECK_EQ(lp_lj_trace_locate(&F.vm, &F.m, &t, mcode + 10, 0, &loc), LP_LJ_EREAD);
	}
}

int main(void)
{
	RUN(test_image_reader);
	RUN(test_plain_reader);
	RUN(test_pid_reader);
	RUN(test_detect_layouts);
	RUN(test_detect_rejects);
	RUN(test_vmstate_map);
	RUN(test_thread_read);
	RUN(test_proto_and_lines);
	RUN(test_walk_lua_chain);
	RUN(test_walk_vararg_dummy);
	RUN(test_walk_pcall_cont_fficb);
	RUN(test_walk_centries_cframes);
	RUN(test_walk_corrupt);
	RUN(test_walk_deep);
	RUN(test_jloop_fixup);
	RUN(test_resumer);
	RUN(test_traces);
	RUN(test_tables);
	return UNIT_RESULT();
}
