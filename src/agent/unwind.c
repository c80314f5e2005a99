/*
** Host stack of an interrupted thread, from its signal context, with DWARF CFI.
**
** libunwind does the CFI work, but through an address space of our own rather than its
** local one: libunwind's local accessors look unwind tables up with dl_iterate_phdr (the
** loader lock) and read any address they compute. Ours answer from a snapshot of the
** loaded objects taken outside the handler (text ranges, .eh_frame_hdr tables, mapped
** segments) and read memory only inside those segments or on the sampled thread's stack
** between the interrupted stack pointer and the stack's top, so a corrupt frame ends the
** walk instead of faulting. Caching is off, so no libunwind cache lock is taken; the only
** libunwind-internal lock left is its allocation pool for CIE records, which belongs to
** the generic (remote-capable) flavour of the library that nothing else in a LuaJIT
** process uses, and is primed before the timer is armed.
**
** JIT trace machine code has no unwind table: agent_vm_trace_frame (VM model) steps
** those frames by LuaJIT's own rule; without it the walk ends at the first trace frame
** instead of guessing.
**
** The snapshot of loaded objects, including those loaded while sampling, is objects.c's.
**
** libunwind (Debian libunwind8) is loaded when C mode first starts, not linked: the agent
** loads and runs its D and L modes on a system without it, and C mode then says what is
** missing. Building needs its header (libunwind-dev); without it C mode is refused with
** a message saying so.
*/
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/agent.h"
#include "agent/objects.h"

#if defined(__has_include)
#if __has_include(<libunwind.h>)
#define LP_HAVE_LIBUNWIND 1
#endif
#endif

#ifdef LP_HAVE_LIBUNWIND
#include <libunwind.h>

_Static_assert((int)AGENT_RAX == (int)UNW_X86_64_RAX && (int)AGENT_RBX == (int)UNW_X86_64_RBX &&
	       (int)AGENT_RSP == (int)UNW_X86_64_RSP && (int)AGENT_R15 == (int)UNW_X86_64_R15 &&
	       (int)AGENT_RIP == (int)UNW_X86_64_RIP, "register numbering differs from libunwind's");

/* The generic (remote-capable) libunwind and the entry points used, resolved by name. The
 * table search is not in the public header but is exported, and is what libunwind's own
 * ptrace and coredump accessors use on an .eh_frame_hdr of a foreign address space. */
#define LIBUNWIND_SO "libunwind-x86_64.so.8"
static struct {
	unw_addr_space_t (*create_addr_space)(unw_accessors_t *, int);
	int (*set_caching_policy)(unw_addr_space_t, unw_caching_policy_t);
	int (*init_remote)(unw_cursor_t *, unw_addr_space_t, void *);
	int (*step)(unw_cursor_t *);
	int (*reg_states_iterate)(unw_cursor_t *, unw_reg_states_callback, void *);
	int (*apply_reg_state)(unw_cursor_t *, void *);
	int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
	int (*search_table)(unw_addr_space_t, unw_word_t, unw_dyn_info_t *, unw_proc_info_t *,
			    int, void *);
} U;

static unw_addr_space_t as;
/*
** Walks outside the signal handler (memprof's sampled mode, on the VM thread with the
** handler's signal blocked) step through a cache of unwind rules of our own. libunwind's
** caches (global, and per-thread, which Debian's build turns into global) take a lock
** that masks every signal around each step: two sigprocmask calls per frame, over half
** of a capture's time. Ours keeps, per return address, the rule libunwind computes for it
** (unw_reg_states_iterate over the function's CFI, once) and steps with
** unw_apply_reg_state, which takes no lock. The rules refer to the unwind tables of the
** loaded objects: the cache is emptied when the objects table changes.
*/
#define RULE_SLOTS 4096 /* open addressing by address; full: the step goes uncached */
#define RULE_DATA_MAX (1u << 20)
static struct rule { uint64_t ip; uint32_t off; } rules[RULE_SLOTS]; /* off: data + 1 */
static uint8_t *rule_data;
static size_t rule_len, rule_size;
static size_t rule_count;
static unsigned rule_gen;

static struct rule *rule_slot(uint64_t ip)
{
	size_t i = (size_t)((ip * 0x9e3779b97f4a7c15ull) >> 52) & (RULE_SLOTS - 1);
	for (size_t k = 0; k < 16; k++, i = (i + 1) & (RULE_SLOTS - 1))
		if (rules[i].ip == ip || !rules[i].off)
			return &rules[i];
	return NULL;
}

/* unw_reg_states_iterate's callback: keeps the rule of the range holding the address. */
struct rule_find { uint64_t ip; long off; };

static int rule_cb(void *token, void *data, size_t size, unw_word_t lo, unw_word_t hi)
{
	struct rule_find *f = token;
	if (f->off >= 0 || f->ip < lo || f->ip >= hi)
		return 0;
	if (rule_size && size != rule_size)
		return 0;
	if (!rule_data) {
		rule_data = malloc(RULE_DATA_MAX);
		if (!rule_data)
			return 0;
	}
	if (rule_len + size > RULE_DATA_MAX)
		return 0;
	rule_size = size;
	memcpy(rule_data + rule_len, data, size);
	f->off = (long)rule_len;
	rule_len += size;
	return 0;
}

/*
** One step by the cached rule for the frame at look (its address, less one for a return
** address): 1 stepped, 0 the outermost frame, -1 a bad frame, -2 no rule (the caller steps
** with unw_step).
*/
static int rule_step(unw_cursor_t *c, uint64_t look)
{
	unsigned gen = agent_objects_gen();
	if (gen != rule_gen) {
		memset(rules, 0, sizeof(rules));
		rule_len = rule_count = 0;
		rule_gen = gen;
	}
	struct rule *r = rule_slot(look);
	if (!r)
		return -2;
	if (!r->off) {
		if (rule_count >= RULE_SLOTS / 2)
			return -2;
		struct rule_find f = { look, -1 };
		if (U.reg_states_iterate(c, rule_cb, &f) < 0 || f.off < 0)
			return -2;
		r->ip = look;
		r->off = (uint32_t)f.off + 1;
		rule_count++;
	}
	int ret = U.apply_reg_state(c, rule_data + r->off - 1);
	if (ret < 0)
		return -1;
	/* unw_step's end of the call chain: the return address or the frame pointer's
	 * location undefined. */
	unw_word_t v;
	if (ret == 0 || U.get_reg(c, UNW_X86_64_RBP, &v) < 0)
		return 0;
	return 1;
}

/* Per-walk context handed to the accessors (handler only). */
static struct walkctx {
	const struct objtab *tab;
	uint64_t regs[AGENT_NREGS];
	uint64_t sp_lo;        /* lowest readable stack address */
	uint64_t rlo, rhi;     /* the loaded segment of the last read outside the stack:
				* reads of one unwind table cluster there */
} wc;

/* -- Accessors (called by libunwind inside the handler) --------------------------------- */

static int acc_find_proc_info(unw_addr_space_t a, unw_word_t ip, unw_proc_info_t *pi,
			      int need_unwind_info, void *arg)
{
	const struct walkctx *c = arg;
	const struct obj_text *t = agent_objects_text(c->tab, ip);
	if (!t || !t->hdr)
		return -UNW_ENOINFO;
	unw_dyn_info_t di;
	memset(&di, 0, sizeof(di));
	di.format = UNW_INFO_FORMAT_REMOTE_TABLE;
	di.start_ip = t->lo;
	di.end_ip = t->hi;
	di.u.rti.segbase = t->hdr;
	di.u.rti.table_data = t->table;
	di.u.rti.table_len = t->nfde * 8 / sizeof(unw_word_t);
	return U.search_table(a, ip, &di, pi, need_unwind_info, arg);
}

static void acc_put_unwind_info(unw_addr_space_t a, unw_proc_info_t *pi, void *arg)
{
}

static int acc_get_dyn_info_list_addr(unw_addr_space_t a, unw_word_t *dilap, void *arg)
{
	return -UNW_ENOINFO;
}

static int acc_access_mem(unw_addr_space_t a, unw_word_t addr, unw_word_t *val, int write,
			  void *arg)
{
	struct walkctx *c = arg;
	if (write || addr + 8 < addr)
		return -UNW_EINVAL;
	if (!(addr >= c->rlo && addr + 8 <= c->rhi)) {
		if (!agent_objects_readable(c->tab, c->sp_lo, addr, 8))
			return -UNW_EINVAL;
		/* Remember the segment, unless the read was on the stack (checked cheaply). */
		if (!agent_objects_on_stack(addr))
			(void)agent_objects_segment(c->tab, addr, &c->rlo, &c->rhi);
	}
	*val = *(const unw_word_t *)(uintptr_t)addr;
	return 0;
}

static int acc_access_reg(unw_addr_space_t a, unw_regnum_t reg, unw_word_t *val, int write,
			  void *arg)
{
	struct walkctx *c = arg;
	if (reg < 0 || reg > UNW_X86_64_RIP)
		return -UNW_EBADREG;
	if (write)
		c->regs[reg] = *val;
	else
		*val = c->regs[reg];
	return 0;
}

static int acc_access_fpreg(unw_addr_space_t a, unw_regnum_t reg, unw_fpreg_t *val, int write,
			    void *arg)
{
	return -UNW_EBADREG;
}

static int acc_resume(unw_addr_space_t a, unw_cursor_t *cur, void *arg)
{
	return -UNW_EINVAL;
}

static int acc_get_proc_name(unw_addr_space_t a, unw_word_t ip, char *buf, size_t len,
			     unw_word_t *offp, void *arg)
{
	return -UNW_ENOINFO;
}

static unw_accessors_t accessors = {
	.find_proc_info = acc_find_proc_info,
	.put_unwind_info = acc_put_unwind_info,
	.get_dyn_info_list_addr = acc_get_dyn_info_list_addr,
	.access_mem = acc_access_mem,
	.access_reg = acc_access_reg,
	.access_fpreg = acc_access_fpreg,
	.resume = acc_resume,
	.get_proc_name = acc_get_proc_name,
};

/* -- The walk ------------------------------------------------------------------------- */

static void regs_from_uc(const ucontext_t *uc, uint64_t *r)
{
	const greg_t *g = uc->uc_mcontext.gregs;
	r[UNW_X86_64_RAX] = (uint64_t)g[REG_RAX];
	r[UNW_X86_64_RDX] = (uint64_t)g[REG_RDX];
	r[UNW_X86_64_RCX] = (uint64_t)g[REG_RCX];
	r[UNW_X86_64_RBX] = (uint64_t)g[REG_RBX];
	r[UNW_X86_64_RSI] = (uint64_t)g[REG_RSI];
	r[UNW_X86_64_RDI] = (uint64_t)g[REG_RDI];
	r[UNW_X86_64_RBP] = (uint64_t)g[REG_RBP];
	r[UNW_X86_64_RSP] = (uint64_t)g[REG_RSP];
	r[UNW_X86_64_R8] = (uint64_t)g[REG_R8];
	r[UNW_X86_64_R9] = (uint64_t)g[REG_R9];
	r[UNW_X86_64_R10] = (uint64_t)g[REG_R10];
	r[UNW_X86_64_R11] = (uint64_t)g[REG_R11];
	r[UNW_X86_64_R12] = (uint64_t)g[REG_R12];
	r[UNW_X86_64_R13] = (uint64_t)g[REG_R13];
	r[UNW_X86_64_R14] = (uint64_t)g[REG_R14];
	r[UNW_X86_64_R15] = (uint64_t)g[REG_R15];
	r[UNW_X86_64_RIP] = (uint64_t)g[REG_RIP];
}

/* The registers a caller can rely on after a step: what a trace frame needs. */
static void regs_from_cursor(unw_cursor_t *c, uint64_t *r)
{
	static const int keep[] = { UNW_X86_64_RBX, UNW_X86_64_RBP, UNW_X86_64_RSP,
				    UNW_X86_64_R12, UNW_X86_64_R13, UNW_X86_64_R14,
				    UNW_X86_64_R15, UNW_X86_64_RIP };
	for (size_t i = 0; i < sizeof(keep) / sizeof(keep[0]); i++) {
		unw_word_t v = 0;
		U.get_reg(c, keep[i], &v);
		r[keep[i]] = v;
	}
}

/*
** Suffix cache (cached walks only). Successive allocations sampled by memprof share the
** frames below the VM's entry (lua_pcall, main, libc's start): a walk that reaches a frame
** (same address, same stack pointer) of one of the last walks takes the rest of that walk
** instead of stepping, once the return address of each of those frames is still where the
** stepping found it (at its stack pointer minus 8, x86-64's call convention, which every
** rule of this walk obeys, the VM's included). A frame whose return address lay elsewhere
** (a signal frame) ends the part of a walk that can be reused.
*/
#define SUFFIX_WALKS 4
#define SUFFIX_MAX 256
static struct suffix {
	uint64_t ip[SUFFIX_MAX], sp[SUFFIX_MAX];
	size_t n, usable;  /* frames; frames [usable, n) have their return address checked */
	int truncated;
	unsigned gen;
} suffixes[SUFFIX_WALKS];
static unsigned suffix_next;

/* Copies the rest of a cached walk that continues the frame (ip, sp) into pcs[n..], when
 * its return addresses are still on the stack: the new count, or 0. */
static size_t suffix_take(uint64_t ip, uint64_t sp, uint64_t *pcs, size_t n, size_t max,
			  int *truncated)
{
	unsigned gen = agent_objects_gen();
	for (unsigned w = 0; w < SUFFIX_WALKS; w++) {
		const struct suffix *x = &suffixes[w];
		if (!x->n || x->gen != gen)
			continue;
		/* Stack pointers grow along a walk: binary search. */
		size_t lo = 0, hi = x->n;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;
			if (x->sp[mid] < sp)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo >= x->n || x->sp[lo] != sp || x->ip[lo] != ip || lo < x->usable)
			continue;
		if (n + (x->n - lo - 1) > max)
			continue;
		size_t k;
		for (k = lo + 1; k < x->n; k++) {
			if (!agent_objects_on_stack(x->sp[k]) ||
			    *(const uint64_t *)(uintptr_t)(x->sp[k] - 8) != x->ip[k])
				break;
		}
		if (k < x->n)
			continue;
		for (k = lo + 1; k < x->n; k++)
			pcs[n++] = x->ip[k];
		*truncated = x->truncated;
		return n;
	}
	return 0;
}

/* Keeps a finished walk (its frames' addresses and stack pointers) for suffix_take. */
static void suffix_keep(const uint64_t *pcs, const uint64_t *sps, size_t n, int truncated)
{
	if (n < 2 || n > SUFFIX_MAX)
		return;
	struct suffix *x = &suffixes[suffix_next++ % SUFFIX_WALKS];
	memcpy(x->ip, pcs, n * sizeof(*pcs));
	memcpy(x->sp, sps, n * sizeof(*sps));
	x->n = n;
	x->truncated = truncated;
	x->gen = agent_objects_gen();
	/* The return address of frame k (k >= 1) is at sp[k] - 8: from the last frame that
	 * breaks this on, nothing before it can be reused. */
	x->usable = 0;
	for (size_t k = 1; k < n; k++) {
		if (!agent_objects_on_stack(sps[k]) ||
		    *(const uint64_t *)(uintptr_t)(sps[k] - 8) != pcs[k])
			x->usable = k;
	}
}

static size_t walk(unw_addr_space_t space, int cached, const ucontext_t *uc, uint64_t *pcs,
		   size_t max, int *truncated)
{
	int exact = 1; /* the frame's address is not a return address (the first one) */
	size_t n = 0;
	wc.tab = agent_objects_enter();
	regs_from_uc(uc, wc.regs);
	uint64_t ip = wc.regs[UNW_X86_64_RIP], sp = wc.regs[UNW_X86_64_RSP];
	pcs[n++] = ip;
	if (!wc.tab || !space || !agent_objects_on_stack(sp)) {
		/* Not on the stack we know (a foreign or alternate stack): the leaf is all
		 * that can be taken safely. */
		*truncated = 1;
		goto out;
	}
	wc.sp_lo = sp & ~7ull;
	wc.rlo = wc.rhi = 0;
	unw_cursor_t c;
	if (U.init_remote(&c, space, &wc) < 0)
		goto out;
	uint64_t sps[SUFFIX_MAX];
	sps[0] = sp;
	while (n < max) {
		uint64_t r[AGENT_NREGS];
		if (cached && n > 1) {
			size_t m = suffix_take(ip, sp, pcs, n, max, truncated);
			if (m) {
				n = m;
				goto out;
			}
		}
		int in_object = agent_objects_text(wc.tab, ip) != NULL, t = 0;
		/* The VM's rules need the registers; C code of a loaded object (most frames)
		 * is stepped by its table without them. */
		if (agent_vm_frame_special(ip, in_object)) {
			memset(r, 0, sizeof(r));
			regs_from_cursor(&c, r);
			t = agent_vm_frame(ip, r, in_object);
		}
		if (t < 0)
			break;
		if (t > 0) {
			/* Trace frame stepped by the VM's rule: restart libunwind there. */
			if (r[UNW_X86_64_RSP] <= sp || !agent_objects_on_stack(r[UNW_X86_64_RSP]))
				break;
			memcpy(wc.regs, r, sizeof(r));
			if (U.init_remote(&c, space, &wc) < 0)
				break;
			exact = 1;
		} else {
			int st = cached ? rule_step(&c, exact ? ip : ip - 1) : -2;
			if (st == -2)
				st = U.step(&c);
			if (st <= 0)
				break;
			exact = 0;
		}
		unw_word_t v = 0, s = 0;
		U.get_reg(&c, UNW_REG_IP, &v);
		U.get_reg(&c, UNW_REG_SP, &s);
		if (v == 0 || s < sp)
			break;
		ip = v;
		sp = s;
		if (n < SUFFIX_MAX)
			sps[n] = sp;
		pcs[n++] = ip;
	}
	if (n == max)
		*truncated = 1;
	if (cached)
		suffix_keep(pcs, sps, n, *truncated);
out:
	agent_objects_leave();
	return n;
}

size_t agent_unwind(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated)
{
	return walk(as, 0, uc, pcs, max, truncated);
}

size_t agent_unwind_cached(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated)
{
	return walk(as, 1, uc, pcs, max, truncated);
}

/* -- Set-up ------------------------------------------------------------------------------ */

#define STR_(x) #x
#define STR(x) STR_(x) /* the header maps unw_step to _Ux86_64_step etc. */

static int load_libunwind(char *err, size_t errlen)
{
	void *h = dlopen(LIBUNWIND_SO, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!h) {
		snprintf(err, errlen, "C mode needs libunwind (%s; Debian package libunwind8)",
			 dlerror());
		return -1;
	}
	*(void **)&U.create_addr_space = dlsym(h, STR(unw_create_addr_space));
	*(void **)&U.set_caching_policy = dlsym(h, STR(unw_set_caching_policy));
	*(void **)&U.init_remote = dlsym(h, STR(unw_init_remote));
	*(void **)&U.step = dlsym(h, STR(unw_step));
	*(void **)&U.reg_states_iterate = dlsym(h, STR(unw_reg_states_iterate));
	*(void **)&U.apply_reg_state = dlsym(h, STR(unw_apply_reg_state));
	*(void **)&U.get_reg = dlsym(h, STR(unw_get_reg));
	*(void **)&U.search_table = dlsym(h, "_Ux86_64_dwarf_search_unwind_table");
	if (!U.create_addr_space || !U.set_caching_policy || !U.init_remote || !U.step ||
	    !U.reg_states_iterate || !U.apply_reg_state ||
	    !U.get_reg || !U.search_table) {
		snprintf(err, errlen, "C mode needs libunwind: %s lacks an entry point",
			 LIBUNWIND_SO);
		return -1;
	}
	return 0;
}

int agent_unwind_init(char *err, size_t errlen)
{
	if (!as) {
		if (load_libunwind(err, errlen) != 0)
			return -1;
		as = U.create_addr_space(&accessors, 0);
		if (!as) {
			snprintf(err, errlen, "cannot set up libunwind");
			return -1;
		}
		U.set_caching_policy(as, UNW_CACHE_NONE);
	}
	/* Prime libunwind (its pools, lazily bound symbols) with a walk of this thread. */
	ucontext_t uc;
	uint64_t pcs[16];
	int trunc = 0;
	if (getcontext(&uc) == 0)
		agent_unwind(&uc, pcs, 16, &trunc);
	return 0;
}

#else /* !LP_HAVE_LIBUNWIND */

int agent_unwind_init(char *err, size_t errlen)
{
	snprintf(err, errlen, "C mode needs libunwind: this agent was built without "
			      "libunwind-dev");
	return -1;
}

size_t agent_unwind(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated)
{
	pcs[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	return 1;
}

size_t agent_unwind_cached(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated)
{
	return agent_unwind(uc, pcs, max, truncated);
}

#endif
