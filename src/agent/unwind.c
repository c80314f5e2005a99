/*
** Host stack of an interrupted thread, from its signal context, with DWARF CFI.
**
** libunwind does the CFI work, but through an address space of our own rather than its
** local one: libunwind's local accessors look unwind tables up with dl_iterate_phdr (the
** loader lock) and read any address they compute. Ours answer from a snapshot of the
** loaded objects taken outside the handler (text ranges, .eh_frame_hdr tables, mapped
** segments) and read memory only inside those segments or on the sampled thread's stack
** between the interrupted stack pointer and the stack's top, so a corrupt frame ends the
** walk instead of faulting. libunwind's own caching is off, so no libunwind cache lock is
** taken: steps go by a rule cache of ours (below) or, for a frame without a known rule,
** by unw_step. The only libunwind-internal lock left is its allocation pool for CIE
** records, which belongs to the generic (remote-capable) flavour of the library that
** nothing else in a LuaJIT process uses; it is primed before the timer is armed, and the
** other threads that use it (the writer thread learning rules, the VM thread's memprof
** walks, which block the handler's signal) never wait for the handler while holding it.
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
	int (*getcontext)(ucontext_t *); /* unw_context_t is ucontext_t on x86-64 */
} U;

static unw_addr_space_t as;
static unw_addr_space_t as_learn; /* the writer thread's, to learn rules with */
/*
** A cache of unwind rules of our own. libunwind's caches (global, and per-thread, which
** Debian's build turns into global) take a lock that masks every signal around each step:
** two sigprocmask calls per frame, over half of a memprof capture's time; without a cache
** every step searches the unwind table and runs the function's CFI program, most of a
** CPU sample's time in C mode. This cache keeps, per return address, the rule libunwind
** computes for it (unw_reg_states_iterate over the function's CFI, once), and a step by
** it is unw_apply_reg_state, which takes no lock and reads memory through our accessors
** only.
**
** Rules are added outside the handler, under rule_lock: by memprof's walks (on the VM
** thread, the handler's signal blocked) and by the CPU profiler's writer thread, for the
** addresses the handler missed (a ring of them, handler to writer). The handler only looks
** rules up: entries are published address last, and never change until a reset, which
** waits until no walk holds the objects table (the handler sets it busy for the walk) and
** is kept out by rules_off meanwhile. The rules refer to the unwind tables of the loaded
** objects: the cache is reset when the objects table changes.
*/
#define RULE_SLOTS 8192        /* 64-byte code blocks looked up: open addressing */
#define RULE_BLOCK 6
#define RULE_FUNCS 4096        /* functions whose rules are known */
#define RULE_SPANS 32768       /* their address ranges, each with one rule */
#define RULE_DATA_MAX (2u << 20)
/* A function: its spans [first, first + n) in spans[], in address order. */
static struct rfunc { uint64_t lo, hi; uint32_t first, n; } funcs[RULE_FUNCS];
static struct rspan { uint64_t lo, hi; uint32_t off; } spans[RULE_SPANS];
/* A code block seen by a walk -> the function holding it (+1); a block shared by two
 * functions has an entry for each. */
static struct rule {
	_Atomic uint64_t block;   /* (address >> RULE_BLOCK) + 1 */
	_Atomic uint32_t func;    /* funcs index + 1 */
} rules[RULE_SLOTS];
static uint8_t *rule_data;      /* allocated once, never freed: the handler reads it */
static size_t rule_len, rule_size, rule_count, nfuncs, nspans;
static _Atomic unsigned rule_gen;
static _Atomic int rules_off;
static pthread_mutex_t rule_lock = PTHREAD_MUTEX_INITIALIZER;

/* The handler's misses: single producer (the VM thread's handler), single consumer. */
#define MISS_RING 256
static uint64_t miss_ip[MISS_RING];
static _Atomic unsigned miss_head, miss_tail;

static size_t rule_hash(uint64_t block)
{
	return (size_t)((block * 0x9e3779b97f4a7c15ull) >> 51) & (RULE_SLOTS - 1);
}

/* The rule data for ip, or NULL (lock-free; the caller made sure no reset runs). */
static const uint8_t *rule_find(uint64_t ip)
{
	uint64_t block = (ip >> RULE_BLOCK) + 1;
	size_t i = rule_hash(block);
	for (size_t k = 0; k < 16; k++, i = (i + 1) & (RULE_SLOTS - 1)) {
		uint64_t b = atomic_load_explicit(&rules[i].block, memory_order_acquire);
		if (!b)
			return NULL;
		if (b != block)
			continue;
		uint32_t fi = atomic_load_explicit(&rules[i].func, memory_order_acquire);
		if (!fi)
			continue;
		const struct rfunc *f = &funcs[fi - 1];
		if (ip < f->lo || ip >= f->hi)
			continue;
		for (uint32_t j = 0; j < f->n; j++) {
			const struct rspan *x = &spans[f->first + j];
			if (ip >= x->lo && ip < x->hi)
				return rule_data + x->off;
		}
		return NULL;
	}
	return NULL;
}

/* unw_reg_states_iterate's callback: keeps every range of the function with its rule. */
static int rule_cb(void *token, void *data, size_t size, unw_word_t lo, unw_word_t hi)
{
	int *ok = token;
	if ((rule_size && size != rule_size) || nspans >= RULE_SPANS ||
	    rule_len + size > RULE_DATA_MAX) {
		*ok = 0;
		return 0;
	}
	if (!rule_data) {
		rule_data = malloc(RULE_DATA_MAX);
		if (!rule_data) {
			*ok = 0;
			return 0;
		}
	}
	rule_size = size;
	memcpy(rule_data + rule_len, data, size);
	spans[nspans].lo = lo;
	spans[nspans].hi = hi;
	spans[nspans++].off = (uint32_t)rule_len;
	rule_len += size;
	return 0;
}

/*
** Under rule_lock: empties the cache if the objects table changed since it was filled. A
** caller other than the sampled thread first sets rules_off and waits, without the lock,
** until no walk holds the objects table (rules_off_wait): a walk that started before
** could be reading the entries. The sampled thread's own walks cannot overlap this one.
*/
static void rules_check_gen(void)
{
	unsigned gen = agent_objects_gen();
	if (gen == atomic_load(&rule_gen)) {
		/* Current (perhaps reset by the other caller meanwhile): readable again. */
		atomic_store(&rules_off, 0);
		return;
	}
	atomic_store(&rules_off, 1);
	for (size_t i = 0; i < RULE_SLOTS; i++) {
		atomic_store_explicit(&rules[i].block, 0, memory_order_relaxed);
		atomic_store_explicit(&rules[i].func, 0, memory_order_relaxed);
	}
	rule_len = rule_count = nfuncs = nspans = 0;
	atomic_store(&rule_gen, gen);
	atomic_store(&rules_off, 0);
}

static void rules_off_wait(void)
{
	if (agent_objects_gen() == atomic_load(&rule_gen))
		return;
	atomic_store(&rules_off, 1);
	while (agent_objects_busy()) {
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
}

/* Under rule_lock: makes the block of look known, learning the rules of the function at
 * the cursor's address (its FDE) unless known; the rule for look, or NULL. */
static const uint8_t *rule_add(unw_cursor_t *c, uint64_t look)
{
	const uint8_t *d = rule_find(look);
	if (d || rule_count >= RULE_SLOTS / 2)
		return d;
	uint64_t block = (look >> RULE_BLOCK) + 1;
	size_t i = rule_hash(block), k;
	for (k = 0; k < 16; k++, i = (i + 1) & (RULE_SLOTS - 1))
		if (!atomic_load_explicit(&rules[i].block, memory_order_relaxed))
			break;
	if (k == 16)
		return NULL;
	/* The function may be known (another of its blocks): find it among the last ones,
	 * else learn it. */
	uint32_t fi = 0;
	for (size_t j = nfuncs; j > 0 && nfuncs - j < 64; j--)
		if (look >= funcs[j - 1].lo && look < funcs[j - 1].hi) {
			fi = (uint32_t)j;
			break;
		}
	if (!fi) {
		if (nfuncs >= RULE_FUNCS)
			return NULL;
		size_t first = nspans, len0 = rule_len;
		int ok = 1;
		if (U.reg_states_iterate(c, rule_cb, &ok) < 0 || !ok || nspans == first) {
			nspans = first; /* forget a partial function */
			rule_len = len0;
			return NULL;
		}
		struct rfunc *f = &funcs[nfuncs];
		f->lo = spans[first].lo;
		f->hi = spans[nspans - 1].hi;
		f->first = (uint32_t)first;
		f->n = (uint32_t)(nspans - first);
		if (look < f->lo || look >= f->hi) {
			nspans = first; /* the cursor's FDE is not look's (a function's edge) */
			rule_len = len0;
			return NULL;
		}
		fi = (uint32_t)++nfuncs;
	}
	atomic_store_explicit(&rules[i].func, fi, memory_order_release);
	atomic_store_explicit(&rules[i].block, block, memory_order_release);
	rule_count++;
	return rule_find(look);
}

/* One step by a rule: 1 stepped, 0 the outermost frame, -1 a bad frame. */
static int rule_apply(unw_cursor_t *c, const uint8_t *d)
{
	int ret = U.apply_reg_state(c, (void *)d);
	if (ret < 0)
		return -1;
	/* unw_step's end of the call chain: the return address or the frame pointer's
	 * location undefined. */
	unw_word_t v;
	if (ret == 0 || U.get_reg(c, UNW_X86_64_RBP, &v) < 0)
		return 0;
	return 1;
}

/*
** One step of a walk outside the handler (memprof, VM thread) by the cached rule for the
** frame at look (its address, less one for a return address), learning it if needed: as
** rule_apply, or -2 for no rule (the caller steps with unw_step).
*/
static int rule_step(unw_cursor_t *c, uint64_t look, int usable)
{
	const uint8_t *d = usable ? rule_find(look) : NULL;
	if (!d) {
		pthread_mutex_lock(&rule_lock);
		rules_check_gen();
		d = rule_add(c, look);
		pthread_mutex_unlock(&rule_lock);
	}
	return d ? rule_apply(c, d) : -2;
}

/* The handler's step: a known rule, else -2 and the address is queued for the writer. */
static int rule_step_handler(unw_cursor_t *c, uint64_t look, int usable)
{
	const uint8_t *d = usable ? rule_find(look) : NULL;
	if (d)
		return rule_apply(c, d);
	unsigned h = atomic_load_explicit(&miss_head, memory_order_relaxed);
	unsigned queued = h - atomic_load_explicit(&miss_tail, memory_order_acquire);
	if (queued < MISS_RING) {
		miss_ip[h % MISS_RING] = look;
		atomic_store_explicit(&miss_head, h + 1, memory_order_release);
		/* Enough to learn: wake the writer rather than wait for its next round. */
		if (queued + 1 == MISS_RING / 8)
			agent_writer_wake();
	}
	return -2;
}

/* Per-walk context handed to the accessors (handler only). */
static struct walkctx {
	const struct objtab *tab;
	uint64_t regs[AGENT_NREGS];
	uint64_t sp_lo;        /* lowest readable stack address: the leaf's red zone */
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

/* The return address of a frame at sp is ip (on the stack at sp - 8). */
static int ra_holds(uint64_t sp, uint64_t ip)
{
	return agent_objects_on_stack(sp) && *(const uint64_t *)(uintptr_t)(sp - 8) == ip;
}

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
		for (k = lo + 1; k < x->n && ra_holds(x->sp[k], x->ip[k]); k++)
			;
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
	for (size_t k = 1; k < n; k++)
		if (!ra_holds(sps[k], pcs[k]))
			x->usable = k;
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
	/* The 128 bytes below the stack pointer (the x86-64 red zone) are as the interrupted
	 * code left them: the kernel puts a signal frame below them. A function's epilogue
	 * still has its popped registers there by its unwind table (GCC notes no restore). */
	wc.sp_lo = sp >= 128 ? (sp - 128) & ~7ull : 0;
	wc.rlo = wc.rhi = 0;
	/* After agent_objects_enter marked the walk busy: a reset starting now waits for it. */
	int rules_ok = !atomic_load(&rules_off) && atomic_load(&rule_gen) == agent_objects_gen();
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
			uint64_t look = exact ? ip : ip - 1;
			int st = cached ? rule_step(&c, look, rules_ok)
				 : rule_step_handler(&c, look, rules_ok);
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

agent_getcontext_fn agent_unwind_getcontext(void)
{
	return U.getcontext ? U.getcontext : getcontext;
}

void agent_unwind_learn(void)
{
	if (!as_learn)
		return;
	uint64_t ips[MISS_RING];
	size_t n = 0;
	unsigned t = atomic_load_explicit(&miss_tail, memory_order_relaxed);
	unsigned h = atomic_load_explicit(&miss_head, memory_order_acquire);
	while (t != h && n < MISS_RING)
		ips[n++] = miss_ip[t++ % MISS_RING];
	atomic_store_explicit(&miss_tail, t, memory_order_release);
	if (!n)
		return;
	/* A walk context of this thread's own (the handler's is in use): no stack, the
	 * loaded objects as the last refresh (this thread's) left them. */
	struct walkctx lc;
	memset(&lc, 0, sizeof(lc));
	lc.tab = agent_objects_current();
	lc.sp_lo = UINT64_MAX;
	if (!lc.tab)
		return;
	rules_off_wait();
	pthread_mutex_lock(&rule_lock);
	rules_check_gen();
	for (size_t i = 0; i < n; i++) {
		if (rule_find(ips[i]))
			continue;
		unw_cursor_t c;
		lc.regs[UNW_X86_64_RIP] = ips[i];
		lc.regs[UNW_X86_64_RSP] = 0;
		if (U.init_remote(&c, as_learn, &lc) < 0)
			continue;
		(void)rule_add(&c, ips[i]);
	}
	pthread_mutex_unlock(&rule_lock);
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
	*(void **)&U.getcontext = dlsym(h, "_Ux86_64_getcontext"); /* a macro with arguments */
	if (!U.create_addr_space || !U.set_caching_policy || !U.init_remote || !U.step ||
	    !U.reg_states_iterate || !U.apply_reg_state ||
	    !U.get_reg || !U.search_table || !U.getcontext) {
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
		as_learn = U.create_addr_space(&accessors, 0);
		if (as_learn)
			U.set_caching_policy(as_learn, UNW_CACHE_NONE);
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

agent_getcontext_fn agent_unwind_getcontext(void)
{
	return getcontext;
}

void agent_unwind_learn(void)
{
}

#endif
