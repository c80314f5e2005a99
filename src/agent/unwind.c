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
#include "agent/allocstub.h"
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
** only; or, for most rules, a few loads by the rule's compact form (below), with no
** libunwind call at all.
**
** Rules are added outside the handler, under rule_lock: by memprof's walks (on the VM
** thread, the handler's signal blocked) and by the CPU profiler's writer thread, for the
** addresses the handler missed (a ring of them, handler to writer). The handler only looks
** rules up: entries are published address last, and never change until a reset, which
** waits until no walk holds the objects table (the handler sets it busy for the walk) and
** is kept out by rules_off meanwhile. The rules refer to the unwind tables of the loaded
** objects: when the objects table changes, those of the objects unloaded or replaced since
** are dropped (a library loaded and unloaded in a loop cost every sample the full search
** for every frame, the rules of the program and libc lost with the library's), and the
** cache is emptied when the dropped ones took much of its room.
*/
#define RULE_SLOTS 8192        /* 64-byte code blocks looked up: open addressing */
#define RULE_BLOCK 6
#define RULE_FUNCS 4096        /* functions whose rules are known */
#define RULE_SPANS 32768       /* their address ranges, each with one rule */
#define RULE_DATA_MAX (2u << 20)
/* A function: its spans [first, first + n) in spans[], in address order. */
static struct rfunc { uint64_t lo, hi; uint32_t first, n; } funcs[RULE_FUNCS];
/* A span: libunwind's rule at rule_data + off, and its compact form when it has one. */
static struct rspan {
	uint64_t lo, hi;
	uint32_t off;
	uint8_t cbase;       /* CR_NONE, CR_SP or CR_BP: the CFA is that register + cfa */
	int32_t cfa;
	int16_t ra;          /* the return address is at CFA + ra */
	int16_t saved[6];    /* cr_regs[i] is at CFA + saved[i], or CR_SAME: unchanged */
	int16_t omin, omax;  /* the lowest and highest of ra and the saved[] read */
} spans[RULE_SPANS];
enum { CR_NONE, CR_SP, CR_BP };
#define CR_SAME INT16_MIN
static const int cr_regs[6] = { UNW_X86_64_RBX, UNW_X86_64_RBP, UNW_X86_64_R12,
				UNW_X86_64_R13, UNW_X86_64_R14, UNW_X86_64_R15 };
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
/* The executable segments of the objects table the rules go with (rule_gen's). */
static struct obj_text rule_texts[OBJ_MAX_TEXT];
static size_t rule_ntexts;
static pthread_mutex_t rule_lock = PTHREAD_MUTEX_INITIALIZER;

/* A fork while another thread (the CPU profiler's writer) learned rules leaves the child's
 * copy of the lock held by no thread of its own: a new one. What that thread had not yet
 * published is not in use: rules are published whole, function then block. */
static void rule_lock_child(void)
{
	rule_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}

/* The handler's misses: single producer (the VM thread's handler), single consumer. */
#define MISS_RING 256
static uint64_t miss_ip[MISS_RING];
static _Atomic unsigned miss_head, miss_tail;

static size_t rule_hash(uint64_t block)
{
	return (size_t)((block * 0x9e3779b97f4a7c15ull) >> 51) & (RULE_SLOTS - 1);
}

/* The span holding ip, or NULL (lock-free; the caller made sure no reset runs). */
static const struct rspan *rule_find(uint64_t ip)
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
				return x;
		}
		return NULL;
	}
	return NULL;
}

/*
** The VM thread's walks (memprof's captures) look each frame's rule up here first: a
** direct-mapped copy of the spans found, by the address looked up. rule_find's loads depend
** on each other (the block's slot, its function, then the function's spans one after the
** other) in 1.3 MB of tables, which the program evicts between two captures; an entry here
** is one cache line. An entry holds for as long as rule_gen keeps the value it was filled
** with: spans are published whole and never change or go (rules_check_gen drops and
** empties only on a new generation). Not the handler's: it runs on the sampled thread,
** which need not be the one whose walks fill this, and it looks rules up only.
*/
#define RCACHE_SLOTS 256
static struct rcache {
	uint64_t look;
	unsigned gen;
	struct rspan x;
} __attribute__((aligned(64))) rcache[RCACHE_SLOTS];

static const struct rspan *rule_find_cached(uint64_t look)
{
	struct rcache *e = &rcache[(look * 0x9e3779b97f4a7c15ull) >> 56];
	unsigned gen = atomic_load_explicit(&rule_gen, memory_order_relaxed);
	if (e->look == look && e->gen == gen)
		return &e->x;
	const struct rspan *x = rule_find(look);
	if (x) {
		e->look = look;
		e->gen = gen;
		e->x = *x;
	}
	return x;
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
	/* Published before gen (agent_objects_refresh): this table or a later one. Safe to
	 * read here: the writer thread refreshes it itself, and a walk on the sampled thread
	 * holds a table, which keeps the next refresh from reusing the newest one. */
	const struct objtab *tab = agent_objects_current();
	/* Dropped functions keep their room until the cache is emptied. */
	int full = nfuncs > RULE_FUNCS / 2 || nspans > RULE_SPANS / 2 ||
		   rule_len > RULE_DATA_MAX / 2 || rule_count > RULE_SLOTS / 4;
	if (!tab || full) {
		for (size_t i = 0; i < RULE_SLOTS; i++) {
			atomic_store_explicit(&rules[i].block, 0, memory_order_relaxed);
			atomic_store_explicit(&rules[i].func, 0, memory_order_relaxed);
		}
		rule_len = rule_count = nfuncs = nspans = 0;
	} else {
		/* A segment no longer in the table as it was: its functions are dropped (an
		 * empty range), and the blocks that led to them (no function). */
		int dropped = 0;
		for (size_t i = 0; i < rule_ntexts; i++) {
			const struct obj_text *t = &rule_texts[i];
			const struct obj_text *now = agent_objects_text(tab, t->lo);
			if (now && !memcmp(now, t, sizeof(*t)))
				continue;
			for (size_t j = 0; j < nfuncs; j++)
				if (funcs[j].lo < t->hi && funcs[j].hi > t->lo) {
					funcs[j].hi = funcs[j].lo;
					dropped = 1;
				}
		}
		for (size_t i = 0; dropped && i < RULE_SLOTS; i++) {
			uint32_t fi = atomic_load_explicit(&rules[i].func, memory_order_relaxed);
			if (fi && funcs[fi - 1].hi == funcs[fi - 1].lo)
				atomic_store_explicit(&rules[i].func, 0, memory_order_relaxed);
		}
	}
	rule_ntexts = tab ? tab->ntext : 0;
	if (rule_ntexts)
		memcpy(rule_texts, tab->text, rule_ntexts * sizeof(rule_texts[0]));
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

static void rule_compact(struct rspan *x);

/* Under rule_lock: makes the block of look known, learning the rules of the function at
 * the cursor's address (its FDE) unless known; the span of look, or NULL. */
static const struct rspan *rule_add(unw_cursor_t *c, uint64_t look)
{
	const struct rspan *d = rule_find(look);
	if (d || rule_count >= RULE_SLOTS / 2)
		return d;
	uint64_t block = (look >> RULE_BLOCK) + 1;
	size_t i = rule_hash(block), k;
	int reuse = 0; /* the block's slot, its function dropped (rules_check_gen) */
	for (k = 0; k < 16; k++, i = (i + 1) & (RULE_SLOTS - 1)) {
		uint64_t b = atomic_load_explicit(&rules[i].block, memory_order_relaxed);
		if (!b)
			break;
		if (b == block && !atomic_load_explicit(&rules[i].func, memory_order_relaxed)) {
			reuse = 1;
			break;
		}
	}
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
		for (size_t j = first; j < nspans; j++)
			rule_compact(&spans[j]);
		fi = (uint32_t)++nfuncs;
	}
	atomic_store_explicit(&rules[i].func, fi, memory_order_release);
	atomic_store_explicit(&rules[i].block, block, memory_order_release);
	rule_count += !reuse;
	return rule_find(look);
}

/* One step by a rule: 1 stepped, 0 the outermost frame, -1 a bad frame. */
static int rule_apply(unw_cursor_t *c, const struct rspan *x)
{
	int ret = U.apply_reg_state(c, rule_data + x->off);
	if (ret < 0)
		return -1;
	/* unw_step's end of the call chain: the return address or the frame pointer's
	 * location undefined. */
	unw_word_t v;
	if (ret == 0 || U.get_reg(c, UNW_X86_64_RBP, &v) < 0)
		return 0;
	return 1;
}

/* A walk outside the handler (memprof, VM thread) learns the rule for the frame at look
 * (its address, less one for a return address) itself, at the cursor: its span, or NULL. */
static const struct rspan *rule_learn(unw_cursor_t *c, uint64_t look)
{
	pthread_mutex_lock(&rule_lock);
	rules_check_gen();
	const struct rspan *x = rule_add(c, look);
	pthread_mutex_unlock(&rule_lock);
	return x;
}

/* The handler's miss: the address is queued for the writer to learn. */
static void rule_miss(uint64_t look)
{
	unsigned h = atomic_load_explicit(&miss_head, memory_order_relaxed);
	unsigned queued = h - atomic_load_explicit(&miss_tail, memory_order_acquire);
	if (queued < MISS_RING) {
		miss_ip[h % MISS_RING] = look;
		atomic_store_explicit(&miss_head, h + 1, memory_order_release);
		/* Enough to learn: wake the writer rather than wait for its next round. */
		if (queued + 1 == MISS_RING / 8)
			agent_writer_wake();
	}
}

/* Per-walk context handed to the accessors (handler only). */
static struct walkctx {
	const struct objtab *tab;
	uint64_t regs[AGENT_NREGS];
	uint64_t sp_lo;        /* lowest readable stack address: the leaf's red zone */
	uint64_t rlo, rhi;     /* the loaded segment of the last read outside the stack:
				* reads of one unwind table cluster there */
	int late;              /* the sampled thread's walk: objects loaded since the table
				* was taken are asked for (agent_objects_late) */
} wc;

/* -- Accessors (called by libunwind inside the handler) --------------------------------- */

static int acc_find_proc_info(unw_addr_space_t a, unw_word_t ip, unw_proc_info_t *pi,
			      int need_unwind_info, void *arg)
{
	const struct walkctx *c = arg;
	const struct obj_text *t = agent_objects_text(c->tab, ip);
	if (!t && c->late)
		t = agent_objects_late(ip);
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

/* A word the walk may read: on the thread's stack above sp_lo, or in a loaded segment.
 * 0, or -1 for an address it must not read. */
static int read_word(struct walkctx *c, uint64_t addr, uint64_t *val)
{
	if (addr + 8 < addr)
		return -1;
	if (!(addr >= c->rlo && addr + 8 <= c->rhi)) {
		if (!agent_objects_readable(c->tab, c->sp_lo, addr, 8) &&
		    !(c->late && agent_objects_late_readable(addr, 8)))
			return -1;
		/* Remember the segment, unless the read was on the stack (checked cheaply). */
		if (!agent_objects_on_stack(addr))
			(void)agent_objects_segment(c->tab, addr, &c->rlo, &c->rhi);
	}
	*val = *(const uint64_t *)(uintptr_t)addr;
	return 0;
}

static int acc_access_mem(unw_addr_space_t a, unw_word_t addr, unw_word_t *val, int write,
			  void *arg)
{
	uint64_t v;
	if (write || read_word(arg, addr, &v) != 0)
		return -UNW_EINVAL;
	*val = v;
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

/* -- Compact rules ----------------------------------------------------------------------- */

/*
** Most frames' rules have one shape: the CFA is the stack or the frame pointer plus a
** constant, the return address and each callee-saved register are at constant offsets
** from it or keep their value, and no other register changes. A step by such a rule is a
** few checked loads, where unw_apply_reg_state interprets libunwind's register state for
** every register through the accessors: most of a memprof capture's unwinding time, and
** cache lines that the program then misses. The compact form is read off libunwind, not
** off the CFI: the rule is applied to made-up registers over a made-up memory whose every
** word holds its own address XOR PROBE_TAG, once as they are and once each with the stack
** pointer, the frame pointer and the other registers moved, at both ends of the span. A
** rule that does not act as the shape on every trial (a CFA or a location computed by an
** expression, a register kept in another register, a rule that depends on the address)
** has no compact form and keeps libunwind's step.
*/
#define PROBE_TAG 0x5a5a5a5a5a5a5a5aull
#define PROBE_MOVE 0x10000ull
static unw_addr_space_t as_probe;
static uint64_t probe_regs[AGENT_NREGS];

static int probe_access_mem(unw_addr_space_t a, unw_word_t addr, unw_word_t *val, int write,
			    void *arg)
{
	if (write)
		return -UNW_EINVAL;
	*val = addr ^ PROBE_TAG;
	return 0;
}

static int probe_access_reg(unw_addr_space_t a, unw_regnum_t reg, unw_word_t *val, int write,
			    void *arg)
{
	if (reg < 0 || reg > UNW_X86_64_RIP)
		return -UNW_EBADREG;
	if (write)
		probe_regs[reg] = *val;
	else
		*val = probe_regs[reg];
	return 0;
}

static int probe_find_proc_info(unw_addr_space_t a, unw_word_t ip, unw_proc_info_t *pi,
				int need_unwind_info, void *arg)
{
	return -UNW_ENOINFO;
}

static unw_accessors_t probe_accessors = {
	.find_proc_info = probe_find_proc_info,
	.put_unwind_info = acc_put_unwind_info,
	.get_dyn_info_list_addr = acc_get_dyn_info_list_addr,
	.access_mem = probe_access_mem,
	.access_reg = probe_access_reg,
	.access_fpreg = acc_access_fpreg,
	.resume = acc_resume,
	.get_proc_name = acc_get_proc_name,
};

/* reg's index in cr_regs, or -1. */
static int cr_index(int reg)
{
	for (int i = 0; i < 6; i++)
		if (cr_regs[i] == reg)
			return i;
	return -1;
}

/* One trial of the span's rule at ip: trial t moves nothing (0), the stack pointer (1),
 * the frame pointer (2) or every other register (3). 0, or -1 when the rule stepped
 * nowhere or a register could not be read. */
static int probe(const struct rspan *x, uint64_t ip, int t, uint64_t *in, uint64_t *out)
{
	for (int r = 0; r < AGENT_NREGS; r++)
		in[r] = 0x0100000000000000ull + ((uint64_t)r << 40) + (t == 3 ? PROBE_MOVE : 0);
	in[UNW_X86_64_RSP] = 0x00007f0000000000ull + (t == 1 ? PROBE_MOVE : 0);
	in[UNW_X86_64_RBP] = 0x00007e0000000000ull + (t == 2 ? PROBE_MOVE : 0);
	in[UNW_X86_64_RIP] = ip;
	memcpy(probe_regs, in, sizeof(probe_regs));
	unw_cursor_t c;
	if (U.init_remote(&c, as_probe, NULL) < 0 || U.apply_reg_state(&c, rule_data + x->off) <= 0)
		return -1;
	for (int r = 0; r < AGENT_NREGS; r++) {
		unw_word_t v;
		if (U.get_reg(&c, r, &v) < 0)
			return -1;
		out[r] = v;
	}
	return 0;
}

/* Under rule_lock: the compact form of span x's rule, if it has one (x->cbase). */
static void rule_compact(struct rspan *x)
{
	struct rspan k[2];
	x->cbase = CR_NONE;
	if (!as_probe || x->hi <= x->lo)
		return;
	for (int e = 0; e < 2; e++) {
		uint64_t in[4][AGENT_NREGS], out[4][AGENT_NREGS], cfa[4];
		uint64_t ip = e ? x->hi - 1 : x->lo;
		for (int t = 0; t < 4; t++) {
			if (probe(x, ip, t, in[t], out[t]) != 0)
				return;
			cfa[t] = out[t][UNW_X86_64_RSP];
		}
		int64_t cfa_off;
		if (cfa[1] - cfa[0] == PROBE_MOVE && cfa[2] == cfa[0] && cfa[3] == cfa[0]) {
			k[e].cbase = CR_SP;
			cfa_off = (int64_t)(cfa[0] - in[0][UNW_X86_64_RSP]);
		} else if (cfa[2] - cfa[0] == PROBE_MOVE && cfa[1] == cfa[0] && cfa[3] == cfa[0]) {
			k[e].cbase = CR_BP;
			cfa_off = (int64_t)(cfa[0] - in[0][UNW_X86_64_RBP]);
		} else {
			return;
		}
		if (cfa_off < INT32_MIN || cfa_off > INT32_MAX)
			return;
		k[e].cfa = (int32_t)cfa_off;
		/* Where a register comes from, the same on every trial: 1 unchanged, 0 the
		 * word at CFA + *off, -1 neither. */
		for (int r = 0; r < AGENT_NREGS; r++) {
			if (r == UNW_X86_64_RSP)
				continue;
			int same = 1, at = 1, i;
			int64_t off = (int64_t)((out[0][r] ^ PROBE_TAG) - cfa[0]);
			for (int t = 0; t < 4; t++) {
				same &= out[t][r] == in[t][r];
				at &= (int64_t)((out[t][r] ^ PROBE_TAG) - cfa[t]) == off;
			}
			if (at && (off <= INT16_MIN || off > INT16_MAX))
				at = 0;
			if (r == UNW_X86_64_RIP) {
				if (!at)
					return;
				k[e].ra = (int16_t)off;
			} else if ((i = cr_index(r)) >= 0) {
				if (same)
					k[e].saved[i] = CR_SAME;
				else if (at)
					k[e].saved[i] = (int16_t)off;
				else
					return;
			} else if (!same) {
				return; /* a scratch register restored: not this shape */
			}
		}
	}
	if (k[0].cbase != k[1].cbase || k[0].cfa != k[1].cfa || k[0].ra != k[1].ra ||
	    memcmp(k[0].saved, k[1].saved, sizeof(k[0].saved)))
		return;
	x->cfa = k[0].cfa;
	x->ra = k[0].ra;
	memcpy(x->saved, k[0].saved, sizeof(x->saved));
	x->omin = x->omax = x->ra;
	for (int i = 0; i < 6; i++) {
		if (x->saved[i] == CR_SAME)
			continue;
		if (x->saved[i] < x->omin)
			x->omin = x->saved[i];
		if (x->saved[i] > x->omax)
			x->omax = x->saved[i];
	}
	x->cbase = k[0].cbase;
}

/* A step by x's compact form on the frame's registers r: as rule_apply (1 stepped, 0 the
 * outermost frame, -1 a bad frame), with the same reads libunwind would make. */
static int compact_apply(struct walkctx *c, const struct rspan *x, uint64_t *r)
{
	uint64_t cfa = (x->cbase == CR_SP ? r[UNW_X86_64_RSP] : r[UNW_X86_64_RBP]) +
		       (uint64_t)(int64_t)x->cfa, ra, v[6];
	/* The words the rule reads, all on the stack above the walk's lowest readable address
	 * (most frames): read_word's checks once for them all, the same words read. */
	uint64_t lo = cfa + (uint64_t)(int64_t)x->omin;
	if (lo <= cfa + (uint64_t)(int64_t)x->omax &&
	    agent_objects_stack_has(c->sp_lo, lo, (uint64_t)(x->omax - x->omin) + 8)) {
		ra = *(const uint64_t *)(uintptr_t)(cfa + (uint64_t)(int64_t)x->ra);
		if (ra == r[UNW_X86_64_RIP] && cfa == r[UNW_X86_64_RSP])
			return -1;
		for (int i = 0; i < 6; i++)
			v[i] = x->saved[i] == CR_SAME ? r[cr_regs[i]]
			     : *(const uint64_t *)(uintptr_t)(cfa + (uint64_t)(int64_t)x->saved[i]);
		for (int i = 0; i < 6; i++)
			r[cr_regs[i]] = v[i];
		r[UNW_X86_64_RSP] = cfa;
		r[UNW_X86_64_RIP] = ra;
		return 1;
	}
	if (read_word(c, cfa + (uint64_t)(int64_t)x->ra, &ra) != 0)
		return -1;
	if (ra == r[UNW_X86_64_RIP] && cfa == r[UNW_X86_64_RSP])
		return -1; /* libunwind's "frame did not move" */
	for (int i = 0; i < 6; i++) {
		if (x->saved[i] == CR_SAME) {
			v[i] = r[cr_regs[i]];
		} else if (read_word(c, cfa + (uint64_t)(int64_t)x->saved[i], &v[i]) != 0) {
			/* As rule_apply: the frame pointer unreadable ends the walk; another
			 * register reads as 0 (libunwind would fail it only when used). */
			if (cr_regs[i] == UNW_X86_64_RBP)
				return 0;
			v[i] = 0;
		}
	}
	for (int i = 0; i < 6; i++)
		r[cr_regs[i]] = v[i];
	r[UNW_X86_64_RSP] = cfa;
	r[UNW_X86_64_RIP] = ra;
	return 1;
}

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
static const int kept[] = { UNW_X86_64_RBX, UNW_X86_64_RBP, UNW_X86_64_RSP, UNW_X86_64_R12,
			    UNW_X86_64_R13, UNW_X86_64_R14, UNW_X86_64_R15, UNW_X86_64_RIP };
#define NKEPT (sizeof(kept) / sizeof(kept[0]))

static void regs_from_cursor(unw_cursor_t *c, uint64_t *r)
{
	for (size_t i = 0; i < NKEPT; i++) {
		unw_word_t v = 0;
		U.get_reg(c, kept[i], &v);
		r[kept[i]] = v;
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
	unsigned gen;
	/* A bit per hash of the stack pointers of frames [usable, n): a frame whose bit is
	 * clear continues none of them, told without the binary search (each frame of a walk
	 * up to the one that matches asked every kept walk). */
	uint64_t spbits[4];
} suffixes[SUFFIX_WALKS];
static unsigned suffix_next;

static unsigned sp_bit(uint64_t sp)
{
	return (unsigned)(((sp >> 3) * 0x9e3779b97f4a7c15ull) >> 56);
}

/* The return address of a frame at sp is ip (on the stack at sp - 8). */
static int ra_holds(uint64_t sp, uint64_t ip)
{
	return agent_objects_on_stack(sp) && *(const uint64_t *)(uintptr_t)(sp - 8) == ip;
}

/* Copies the rest of a cached walk that continues the frame (ip, sp) into pcs[n..], when
 * its return addresses are still on the stack: the new count, or 0. */
static size_t suffix_take(uint64_t ip, uint64_t sp, uint64_t *pcs, size_t n, size_t max)
{
	unsigned gen = agent_objects_gen(), b = sp_bit(sp);
	for (unsigned w = 0; w < SUFFIX_WALKS; w++) {
		const struct suffix *x = &suffixes[w];
		if (!(x->spbits[b >> 6] >> (b & 63) & 1) || !x->n || x->gen != gen)
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
		/* Frame lo too: the walk matched it before agent_vm_frame saw it. */
		agent_vm_frames_copied(&x->ip[lo], &x->sp[lo], x->n - lo);
		return n;
	}
	return 0;
}

/* Keeps a finished walk, whole to the outermost frame (its frames' addresses and stack
 * pointers), for suffix_take. */
static void suffix_keep(const uint64_t *pcs, const uint64_t *sps, size_t n)
{
	if (n < 2 || n > SUFFIX_MAX)
		return;
	struct suffix *x = &suffixes[suffix_next++ % SUFFIX_WALKS];
	memcpy(x->ip, pcs, n * sizeof(*pcs));
	memcpy(x->sp, sps, n * sizeof(*sps));
	x->n = n;
	x->gen = agent_objects_gen();
	/* The return address of frame k (k >= 1) is at sp[k] - 8: from the last frame that
	 * breaks this on, nothing before it can be reused. */
	x->usable = 0;
	for (size_t k = 1; k < n; k++)
		if (!ra_holds(sps[k], pcs[k]))
			x->usable = k;
	memset(x->spbits, 0, sizeof(x->spbits));
	for (size_t k = x->usable; k < n; k++) {
		unsigned b = sp_bit(sps[k]);
		x->spbits[b >> 6] |= 1ull << (b & 63);
	}
}

/* Every register of the cursor's frame (0 where libunwind cannot read it). */
static void regs_all_from_cursor(unw_cursor_t *c, uint64_t *r)
{
	for (int i = 0; i < AGENT_NREGS; i++) {
		unw_word_t v = 0;
		U.get_reg(c, i, &v);
		r[i] = v;
	}
}

#ifdef LP_UNWIND_SELFCHECK
/* A test build (CFLAGS=-DLP_UNWIND_SELFCHECK, memprof_sampled.sh) takes every compact
 * step by libunwind too and counts the steps whose frame differs. */
static _Atomic uint64_t sc_steps, sc_bad;

static void selfcheck(unw_addr_space_t space, const struct rspan *x, const uint64_t *before,
		      int st, const uint64_t *after)
{
	struct walkctx k = wc;
	memcpy(k.regs, before, sizeof(k.regs));
	unw_cursor_t c;
	int ref = U.init_remote(&c, space, &k) < 0 ? -1 : rule_apply(&c, x);
	int bad = (ref > 0) != (st > 0);
	if (!bad && st > 0) {
		uint64_t r[AGENT_NREGS];
		memset(r, 0, sizeof(r));
		regs_from_cursor(&c, r);
		for (size_t i = 0; i < NKEPT; i++)
			bad |= r[kept[i]] != after[kept[i]];
	}
	atomic_fetch_add(&sc_steps, 1);
	if (bad)
		atomic_fetch_add(&sc_bad, 1);
}

void agent_unwind_selfcheck(char steps[32], char bad[32])
{
	snprintf(steps, 32, "%llu", (unsigned long long)atomic_exchange(&sc_steps, 0));
	snprintf(bad, 32, "%llu", (unsigned long long)atomic_exchange(&sc_bad, 0));
}
#endif

/* cached: 0 in the handler (rules it misses go to the writer thread); 1 on the VM thread,
 * learning rules and reusing a recent walk's suffix; 2 the same without the suffix. */
static size_t walk(unw_addr_space_t space, int cached, const ucontext_t *uc, uint64_t *pcs,
		   size_t max, int *truncated)
{
	int exact = 1; /* the frame's address is not a return address (the first one) */
	int ended = 0; /* the walk reached the outermost frame */
	size_t n = 0;
	wc.tab = agent_objects_enter();
	wc.late = 1;
	agent_objects_late_reset();
	/* The frame's registers, as libunwind would have them: in r, or in the cursor c
	 * while libunwind steps (in_cursor). */
	uint64_t r[AGENT_NREGS];
	regs_from_uc(uc, r);
	uint64_t ip = r[UNW_X86_64_RIP], sp = r[UNW_X86_64_RSP];
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
	int in_cursor = 0;
	uint64_t sps[SUFFIX_MAX];
	sps[0] = sp;
	while (n < max) {
		if (cached == 1 && n > 1) {
			size_t m = suffix_take(ip, sp, pcs, n, max);
			if (m) {
				n = m;
				goto out;
			}
		}
		int in_object = agent_objects_text(wc.tab, ip) != NULL, t = 0;
		uint64_t stub = n == 1 && !in_object ? agent_allocstub_find(ip) : 0;
		if (stub) {
			/* Interrupted in sampled memprof's generated allocator stub: a leaf
			 * without a frame (it only jumps), named as the compiled wrapper it
			 * stands for. The other registers are the caller's. */
			uint64_t ra;
			if (read_word(&wc, sp, &ra) != 0)
				break;
			pcs[0] = stub;
			r[UNW_X86_64_RIP] = ra;
			r[UNW_X86_64_RSP] = sp + 8;
			t = 1;
			exact = 0;
		}
		/* The leaf at an edge of lj_vm_ffi_call, whose unwind entry is wrong there
		 * (agent_vm_ffi_call_edge): stepped by hand, the other registers the caller's. */
		if (!stub && n == 1 && in_object && agent_vm_ffi_call_edge(ip, r)) {
			t = 1;
			exact = 0;
		}
		/* The VM's rules need the registers; C code of a loaded object (most frames)
		 * is stepped by its table without them. */
		else if (!stub && agent_vm_frame_special(ip, in_object)) {
			uint64_t v[AGENT_NREGS];
			if (in_cursor) {
				memset(v, 0, sizeof(v));
				regs_from_cursor(&c, v);
			} else {
				memcpy(v, r, sizeof(v));
			}
			t = agent_vm_frame(ip, v, in_object);
			/* Neither a trace nor in an object of the snapshot: most likely one
			 * loaded since (a C module required while sampling), which the loader
			 * finds; the walk goes on by its unwind table. The CPU profiler's
			 * writer thread, woken, reads the objects before it writes this sample
			 * (once a snapshot), so that the sample is named by them. */
			if (t < 0 && !in_object && agent_objects_late(ip)) {
				if (!cached && agent_objects_note_stale())
					agent_writer_wake();
				t = 0;
			}
			if (t < 0) {
				/* In no object the loader knows either (an FFI callback's
				 * entry), or one it has no _dl_find_object for (glibc before
				 * 2.35): the objects are read again all the same, as above (once
				 * a snapshot: code that is in no object stays so). The stack is
				 * cut here, and said to be. */
				if (!in_object && !cached && agent_objects_note_stale())
					agent_writer_wake();
				/* Or the VM's code at a C frame of the interpreter the
				 * sample's threads did not list (coroutines nested deeper than
				 * they are followed): cut, and said to be, too. */
				*truncated = 1;
				break;
			}
			if (t > 0) {
				/* Trace frame stepped by the VM's rule: the registers it restores
				 * (others unknown), libunwind's cursor left behind. */
				if (v[UNW_X86_64_RSP] <= sp || !agent_objects_on_stack(v[UNW_X86_64_RSP]))
					break;
				memset(r, 0, sizeof(r));
				for (size_t i = 0; i < NKEPT; i++)
					r[kept[i]] = v[kept[i]];
				in_cursor = 0;
				exact = 1;
			}
		}
		if (t == 0) {
			uint64_t look = exact ? ip : ip - 1;
			const struct rspan *x = !rules_ok ? NULL
					      : cached ? rule_find_cached(look) : rule_find(look);
			int st;
			if (x && x->cbase != CR_NONE) {
				if (in_cursor)
					regs_all_from_cursor(&c, r);
				in_cursor = 0;
#ifdef LP_UNWIND_SELFCHECK
				uint64_t before[AGENT_NREGS];
				memcpy(before, r, sizeof(before));
				st = compact_apply(&wc, x, r);
				selfcheck(space, x, before, st, r);
#else
				st = compact_apply(&wc, x, r);
#endif
			} else {
				if (!in_cursor) {
					/* A fresh cursor takes its address as exact: a return
					 * address goes in less one, as a cursor that stepped to
					 * it looks its unwind table up (the call, not what
					 * follows: after a call that does not return, the next
					 * function). The step reads the caller's address anew. */
					memcpy(wc.regs, r, sizeof(r));
					wc.regs[UNW_X86_64_RIP] = look;
					if (U.init_remote(&c, space, &wc) < 0)
						break;
					in_cursor = 1;
				}
				if (!x) {
					if (cached)
						x = rule_learn(&c, look);
					else
						rule_miss(look);
				}
				st = x ? rule_apply(&c, x) : U.step(&c);
			}
			if (st <= 0) {
				ended = st == 0;
				break;
			}
			exact = 0;
		}
		uint64_t v = r[UNW_X86_64_RIP], s = r[UNW_X86_64_RSP];
		if (in_cursor) {
			unw_word_t w = 0;
			U.get_reg(&c, UNW_REG_IP, &w);
			v = w;
			w = 0;
			U.get_reg(&c, UNW_REG_SP, &w);
			s = w;
		}
		if (v == 0 || s < sp) {
			ended = v == 0;
			break;
		}
		ip = v;
		sp = s;
		if (n < SUFFIX_MAX)
			sps[n] = sp;
		pcs[n++] = ip;
	}
	if (n == max)
		*truncated = 1;
	/* Only a walk that reached the stack's outermost frame is reused: the rest of one
	 * that stopped early would cut every later walk through the same frames. */
	if (cached && ended && !*truncated)
		suffix_keep(pcs, sps, n);
out:
	agent_objects_leave();
	return n;
}

size_t agent_unwind(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated)
{
	return walk(as, 0, uc, pcs, max, truncated);
}

size_t agent_unwind_cached(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated,
			   int reuse)
{
	return walk(as, reuse ? 1 : 2, uc, pcs, max, truncated);
}

agent_getcontext_fn agent_unwind_getcontext(void)
{
	return U.getcontext ? U.getcontext : getcontext;
}

struct learn_arg {
	const uint64_t *ips;
	size_t n;
};

/* Under the loader's lock (agent_objects_locked), with a table of the objects loaded now:
 * an address queued before its library was unloaded is in none, and no read of the walk
 * meets memory unmapped meanwhile. */
static void learn_locked(const struct objtab *tab, void *p)
{
	const struct learn_arg *a = p;
	/* A walk context of this thread's own (the handler's is in use): no stack. */
	struct walkctx lc;
	memset(&lc, 0, sizeof(lc));
	lc.tab = tab;
	lc.sp_lo = UINT64_MAX;
	rules_off_wait();
	pthread_mutex_lock(&rule_lock);
	rules_check_gen();
	for (size_t i = 0; i < a->n; i++) {
		if (rule_find(a->ips[i]))
			continue;
		unw_cursor_t c;
		lc.regs[UNW_X86_64_RIP] = a->ips[i];
		lc.regs[UNW_X86_64_RSP] = 0;
		if (U.init_remote(&c, as_learn, &lc) < 0)
			continue;
		(void)rule_add(&c, a->ips[i]);
	}
	pthread_mutex_unlock(&rule_lock);
}

void agent_unwind_objects_changed(void)
{
	if (!as_learn)
		return;
	rules_off_wait();
	pthread_mutex_lock(&rule_lock);
	rules_check_gen();
	pthread_mutex_unlock(&rule_lock);
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
	if (!n || !agent_objects_current())
		return;
	struct learn_arg a = { ips, n };
	agent_objects_locked(learn_locked, &a);
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
		static int forks_handled;
		if (!forks_handled++)
			pthread_atfork(NULL, NULL, rule_lock_child);
		as = U.create_addr_space(&accessors, 0);
		if (!as) {
			snprintf(err, errlen, "cannot set up libunwind");
			return -1;
		}
		U.set_caching_policy(as, UNW_CACHE_NONE);
		as_learn = U.create_addr_space(&accessors, 0);
		if (as_learn)
			U.set_caching_policy(as_learn, UNW_CACHE_NONE);
		/* Without it, every rule keeps libunwind's step. */
		as_probe = U.create_addr_space(&probe_accessors, 0);
		if (as_probe)
			U.set_caching_policy(as_probe, UNW_CACHE_NONE);
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

size_t agent_unwind_cached(const ucontext_t *uc, uint64_t *pcs, size_t max, int *truncated,
			   int reuse)
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

void agent_unwind_objects_changed(void)
{
}

#endif
