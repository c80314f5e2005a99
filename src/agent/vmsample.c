/*
** The VM side of a sample: VM state, Lua stack and trace location of the interrupted
** LuaJIT VM, read through the VM model (src/vm) with a checked memory reader.
**
** Reader: the model reads target memory in small pieces; here every piece comes from a
** per-sample cache of whole 4 KiB pages filled with process_vm_readv on our own pid. The
** kernel copies with fault handling, so an address that is not mapped gives an error, not
** a SIGSEGV, and a page is mapped or not as a whole. The sampled thread is stopped in this
** handler, so its VM cannot change between two reads of one sample; the cache is emptied
** at the start of each sample.
**
** State on a stock VM (no LFUNC/FFUNC states, vm-internals.md §4.1): INTERP with the
** instruction pointer in the interpreter and its BASE register (rdx) at a Lua frame whose
** bytecode holds the PC register (rbx) is LFUNC; at a builtin's frame, FFUNC. State C is
** CFUNC, or FFUNC when the frame at L->base is a builtin implemented in C.
**
** Names: the stream's symbol table holds the C symbols only; each Lua prototype and trace
** is named by a symbol event placed right before the first sample that meets it. A
** fingerprint (chunk name, first line, size; trace object and start) detects a collected
** function or flushed trace whose address or number was reused, which is then named anew.
*/
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/objects.h"
#include "agent/tcodes.h"
#include "vm/luajit.h"
#include "vm/luajit_trace.h"
#include "vm/luajit_walk.h"
#include "stream/writer.h"

/* -- Page-cache reader ------------------------------------------------------------------ */

#define PAGE 4096u
#define NPAGES 32

/* The pages' tags apart from their data: a reset (every walk that reads through them, the
 * handler's) and a lookup touch a few cache lines, not one line and one TLB entry per
 * page. */
static struct page {
	uint64_t addr;   /* page address, 0 = empty */
	uint32_t used;   /* last use, for eviction */
} pages[NPAGES];
static uint8_t page_data[NPAGES][PAGE];
static uint32_t page_clock;
static unsigned page_last; /* the page of the last read: most reads follow on it */
static struct lp_mem_pid pid_ctx;
static struct lp_mem pid_mem;

static void cache_reset(void)
{
	for (int i = 0; i < NPAGES; i++)
		pages[i].addr = 0;
}

/* The cached copy of the page at addr, or NULL when it cannot be read. */
static const uint8_t *cache_page(uint64_t addr)
{
	if (pages[page_last].addr == addr)
		return page_data[page_last];
	int victim = 0;
	for (int i = 0; i < NPAGES; i++) {
		if (pages[i].addr == addr) {
			pages[i].used = ++page_clock;
			page_last = (unsigned)i;
			return page_data[i];
		}
		if (pages[i].used < pages[victim].used || !pages[i].addr)
			victim = i;
	}
	if (lp_mem_read(&pid_mem, addr, page_data[victim], PAGE) != 0) {
		pages[victim].addr = 0;
		return NULL;
	}
	pages[victim].addr = addr;
	pages[victim].used = ++page_clock;
	page_last = (unsigned)victim;
	return page_data[victim];
}

/* The VM's own block (GG_State: main thread, global_State, jit_State, dispatch table) is
 * allocated by luaL_newstate and freed by lua_close, after the profile of that VM has been
 * stopped: it is read directly. */
static uint64_t gg_lo, gg_hi;
/* Set by agent_vm_prepare_walk for a walk outside the handler, at an allocation (memprof),
 * where the VM's state is consistent: plain reads, as memprof's own. Cleared by the
 * handler, which cannot run during such a walk (its signal is blocked). */
static int plain_reads;
/* In the handler: the interrupted stack pointer less the red zone. The sampled thread's
 * stack above it is mapped (the unwinder reads it directly too): the C frames the VM
 * links there are read without a system call. */
static uint64_t stack_floor;

static int checked_read(uint64_t addr, void *buf, size_t len);

static int cache_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	if (!plain_reads)
		return checked_read(addr, buf, len);
	if (addr == 0)
		return -1;
	/* A memprof walk's reads (about 25 a capture), most of them one word or less (the
	 * model's fields): copies of a constant size, inline, rather than a call to libc's
	 * memcpy each, and no saving of the registers the checked path needs. */
	const void *p = (const void *)(uintptr_t)addr;
	if (len == 8)
		memcpy(buf, p, 8);
	else if (len == 4)
		memcpy(buf, p, 4);
	else if (len == 1)
		memcpy(buf, p, 1);
	else
		memcpy(buf, p, len);
	return 0;
}

/* The handler's reads: the VM's block and the stack directly, the rest through the page
 * cache. */
static __attribute__((noinline)) int checked_read(uint64_t addr, void *buf, size_t len)
{
	uint8_t *out = buf;
	if ((addr >= gg_lo && addr < gg_hi && len <= gg_hi - addr) ||
	    (stack_floor && agent_objects_stack_has(stack_floor, addr, len))) {
		memcpy(out, (const void *)(uintptr_t)addr, len);
		return 0;
	}
	while (len > 0) {
		uint64_t pa = addr & ~(uint64_t)(PAGE - 1);
		size_t off = (size_t)(addr - pa), n = PAGE - off;
		if (n > len)
			n = len;
		if (pa == 0)
			return -1;
		const uint8_t *p = cache_page(pa);
		if (!p)
			return -1;
		memcpy(out, p + off, n);
		out += n;
		addr += n;
		len -= n;
	}
	return 0;
}

static const struct lp_mem mem = { cache_read, NULL };

/* -- Attached VM -------------------------------------------------------------------------- */

static struct lp_lj_vm vm;
static int attached;

static void known_reset(void);

void agent_vm_explain(char *err, size_t errlen)
{
	/* Every LuaJIT exports its API for C modules, this one included; PUC Lua has no
	 * luaJIT_* function. */
	if (errlen && !dlsym(RTLD_DEFAULT, "luaJIT_setmode"))
		snprintf(err, errlen, "not a LuaJIT VM (no luaJIT_setmode in the process: PUC "
			 "Lua?); the agent profiles LuaJIT 2.1 GC64 builds");
}

/* A forked child keeps the parent's attachment (its copy of the VM): its reads of the VM's
 * memory are its own, not those of a parent that may be gone. */
static void vm_at_fork_child(void)
{
	pid_ctx.pid = getpid();
}

static void vm_register_once(void)
{
	pthread_atfork(NULL, NULL, vm_at_fork_child);
}

int agent_vm_attach(struct lua_State *L, char *err, size_t errlen)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, vm_register_once);
	struct lp_mem_pid p;
	struct lp_mem m;
	lp_mem_pid_init(&m, &p, getpid());
	if (lp_lj_detect(&vm, &m, (uint64_t)(uintptr_t)L, err, errlen) != LP_LJ_OK) {
		agent_vm_explain(err, errlen);
		return -1;
	}
	lp_mem_pid_init(&pid_mem, &pid_ctx, getpid());
	known_reset(); /* a new stream: nothing is named in it yet */
	gg_lo = vm.mainL;
	gg_hi = vm.disp + 8 * ((uint64_t)vm.lay->len_ddisp + vm.lay->len_sdisp);
	if (gg_lo > vm.g || gg_hi <= vm.g)
		gg_lo = gg_hi = 0; /* not the layout described: read everything through the kernel */
	agent_symtab_vm_block(vm.vm_lo, vm.vm_hi);
	attached = 1;
	return 0;
}

/*
** Names for the interpreter's code block, which the stripped Debian binaries do not have:
** its start and the FFI call routine right after it (the block's extent is the model's).
*/
void agent_vm_symbols(struct lp_wbuf *w)
{
	static const char begin[] = "lj_vm_asm_begin", ffi[] = "lj_vm_ffi_call";
	if (!attached)
		return;
	lp_write_sym_cfunc(w, vm.vm_lo, begin, sizeof(begin) - 1);
	lp_write_sym_cfunc(w, vm.vm_hi, ffi, sizeof(ffi) - 1);
}

const char *agent_vm_name(void)
{
	return attached ? vm.lay->name : "";
}

void agent_vm_ffnames(char *buf, size_t len)
{
	size_t n = 0;
	buf[0] = '\0';
	if (!attached)
		return;
	for (unsigned id = 0; id < vm.lay->nffnames; id++) {
		const char *name = lp_lj_ffname(vm.lay, id);
		int k = snprintf(buf + n, len - n, "%s%s", id ? " " : "", name && *name ? name : "-");
		if (k < 0 || (size_t)k >= len - n) {
			buf[n] = '\0';
			return;
		}
		n += (size_t)k;
	}
}

/* -- Known symbols ------------------------------------------------------------------------ */

#define KNOWN_SLOTS 32768u /* power of two */
#define TRACE_KEY   (UINT64_C(1) << 63)
/* A known entry's fingerprint once its symbol is forgotten: no fingerprint has bit 63 set
 * (a proto's and a trace's mix user-space addresses and small counts). */
#define FP_FORGOTTEN UINT64_MAX

static struct known {
	uint64_t key;  /* proto address, or TRACE_KEY | traceno; 0 = empty */
	uint64_t fp;   /* fingerprint of what was named */
} known[KNOWN_SLOTS];
static size_t nknown;

/* The machine code of every trace the samples met (tcodes.h): a trace's frame inside a
 * host stack (C code the trace called, a collector step it ran) is then named after the
 * trace instead of a raw address, the trace that was there when the sample was taken. */
static struct agent_tcodes tcodes;

void agent_vm_tcodes_write(struct lp_wbuf *w)
{
	agent_tcodes_write(&tcodes, w);
}

static void known_reset(void)
{
	memset(known, 0, sizeof(known));
	nknown = 0;
	agent_tcodes_reset(&tcodes);
}

/* Returns the slot for key (matching or empty), NULL if the table is too full to add. */
static struct known *known_slot(uint64_t key)
{
	uint64_t h = key * UINT64_C(0x9e3779b97f4a7c15);
	for (uint32_t i = 0; i < KNOWN_SLOTS; i++) {
		struct known *k = &known[(h + i) & (KNOWN_SLOTS - 1)];
		if (k->key == key || k->key == 0)
			return k->key == 0 && nknown >= KNOWN_SLOTS / 4 * 3 ? NULL : k;
	}
	return NULL;
}

/* 1 if key is already named with fingerprint fp. */
static int is_known(uint64_t key, uint64_t fp)
{
	const struct known *k = known_slot(key);
	return k && k->key == key && k->fp == fp;
}

/* Records key as named (a full table only means names are written again). */
static void set_known(uint64_t key, uint64_t fp)
{
	struct known *k = known_slot(key);
	if (!k)
		return;
	if (k->key == 0)
		nknown++;
	k->key = key;
	k->fp = fp;
}

/* -- Symbol events for one sample -------------------------------------------------------- */

/* The names of one sample's symbols, one after another (agent_sample.name_used). */
static char names[AGENT_NAMES_MAX];

static uint64_t proto_fp(const struct lp_lj_proto *p)
{
	return p->chunkname ^ ((uint64_t)(uint32_t)p->firstline << 32) ^
	       ((uint64_t)p->sizebc << 12) ^ p->numline;
}

/* Queues a symbol event for prototype pt unless named already. Returns the fingerprint of
 * the function there (0 when it cannot be read). */
static uint64_t need_proto(struct agent_sample *s, uint64_t pt)
{
	struct lp_lj_proto p;
	if (pt == 0 || lp_lj_proto_read(&vm, &mem, pt, &p))
		return 0;
	/* With the chunk name's string id: a chunk loaded again at the freed addresses of the
	 * last one has the same name pointer, first line and size (memprof.c). */
	uint32_t sid = 0;
	(void)lp_mem_u32(&mem, p.chunkname + vm.lay->str_sid, &sid);
	uint64_t fp = proto_fp(&p) ^ ((uint64_t)sid << 20);
	if (is_known(pt, fp))
		return fp; /* also with the sample's queue full: its traces stay known */
	for (size_t i = 0; i < s->nsyms; i++)
		if (s->syms[i].event == LP_SYSPROF_SYM_LFUNC && s->syms[i].addr == pt)
			return fp;
	if (s->nsyms == AGENT_MAX_NEWSYMS)
		return 0; /* not named in the stream: nothing may refer to it */
	/* The chunk name whole, as in memory profiles: a chunk loaded from a string is named
	 * by its source, which `report -f annotate` shows line by line, and two paths that
	 * differ past a cut were one. A name the room left cannot take is named by a later
	 * sample (its frame here is unnamed, as with a full queue). */
	size_t len = 0, room = s->name_room - s->name_used;
	if (room < 2 || lp_lj_str(&vm, &mem, p.chunkname, NULL, 0, &len) != LP_LJ_OK ||
	    (len >= room && s->name_used > 0))
		return 0;
	char *buf = names + s->name_used;
	if (lp_lj_str(&vm, &mem, p.chunkname, buf, room, &len) != LP_LJ_OK)
		return 0;
	struct agent_sym *y = &s->syms[s->nsyms++];
	y->event = LP_SYSPROF_SYM_LFUNC;
	y->addr = pt;
	y->line = p.firstline >= 0 ? (uint64_t)p.firstline : 0;
	y->traceno = 0;
	y->name = buf;
	y->len = len < room ? len : room - 1;
	s->name_used += y->len + 1;
	set_known(pt, fp);
	return fp;
}

/* The line where a trace starts. */
static uint32_t start_line(uint64_t startpt, uint64_t startpc)
{
	struct lp_lj_proto p;
	int32_t line = 0;
	if (lp_lj_proto_read(&vm, &mem, startpt, &p) == LP_LJ_OK &&
	    lp_lj_pc_line(&vm, &mem, &p, startpc + 4, &line) != LP_LJ_OK)
		line = p.firstline;
	return line > 0 ? (uint32_t)line : 0;
}

/*
** Queues a symbol event for trace t unless named already, with its prototype's; its
** frames in the sample's host stack are then keyed (agent_vm_key_trace_code), which names
** them by that prototype (a trace number's symbol is redefined by every flush).
*/
static void need_trace(struct agent_sample *s, const struct lp_lj_trace *t)
{
	/* With the start function's fingerprint: a trace of the same number, block and start
	 * address over another function at that prototype's address (collected, its memory
	 * reused) starts at another line. */
	uint64_t key = TRACE_KEY | t->traceno,
		 fp = t->addr ^ (t->startpt << 1) ^ t->startpc ^ need_proto(s, t->startpt) << 3;
	int known_now = is_known(key, fp);
	if (!known_now && s->nsyms == AGENT_MAX_NEWSYMS)
		return;
	if (s->ncodes < sizeof(s->codes) / sizeof(s->codes[0]))
		s->codes[s->ncodes++] = agent_tcodes_id(t);
	if (known_now)
		return;
	struct agent_sym *y = &s->syms[s->nsyms++];
	y->event = LP_SYSPROF_SYM_TRACE;
	y->addr = t->startpt;
	y->line = start_line(t->startpt, t->startpc);
	y->traceno = t->traceno;
	y->name = NULL;
	y->len = 0;
	set_known(key, fp);
}

void agent_vm_key_trace_code(const struct agent_sample *s, uint64_t *host, size_t n)
{
	struct agent_tcode *slot[sizeof(s->codes) / sizeof(s->codes[0])] = { 0 };
	unsigned looked = 0;
	for (size_t i = 0; i < n; i++) {
		for (size_t k = 0; k < s->ncodes; k++) {
			const struct agent_tcode_id *id = &s->codes[k];
			if (!agent_tcodes_has(id, host[i]))
				continue;
			if (!(looked & 1u << k)) {
				int fresh;
				looked |= 1u << k;
				slot[k] = agent_tcodes_slot(&tcodes, id, &fresh);
				if (fresh)
					slot[k]->line = start_line(id->startpt, id->startpc);
			}
			if (slot[k])
				host[i] = agent_tcodes_key(&tcodes, slot[k], host[i]);
			break;
		}
	}
}

/* Forgets what a sample the stream did not take would have named: its symbols' known
 * entries no longer match any fingerprint (an entry stays, as open addressing needs). */
void agent_vm_sample_dropped(const struct agent_sample *s)
{
	for (size_t i = 0; i < s->nsyms; i++) {
		const struct agent_sym *y = &s->syms[i];
		uint64_t key = y->event == LP_SYSPROF_SYM_TRACE ? TRACE_KEY | y->traceno : y->addr;
		struct known *k = known_slot(key);
		if (k && k->key == key)
			k->fp = FP_FORGOTTEN;
	}
}

/*
** The running thread. lp_lj_thread_read also requires L->stack <= L->base <= L->top, but
** the VM syncs base and top only when it leaves to C: while the interpreter or a trace
** runs they are stale, and a sample there (a fifth of JIT-on samples, measured) would be
** lost. The walk is given the interpreter's own BASE register in that case and needs only
** the stack bounds and the C frame, so this accepts a thread whose base/top are out of
** order (checking everything else through the model's layout) and sets *stale; base and
** top are then cleared so that nothing relies on them.
*/
static int running_thread(uint64_t L, struct lp_lj_thread *t, int *stale)
{
	int rc = lp_lj_thread_read(&vm, &mem, L, t);
	*stale = 0;
	if (rc != LP_LJ_EINVAL)
		return rc;
	*stale = 1;
	const struct lp_lj_layout *lay = vm.lay;
	uint8_t gct, ffid;
	uint64_t g, stack, maxstack, cframe;
	uint32_t size;
	if (lp_mem_u8(&mem, L + lay->l_gct, &gct) || lp_mem_u8(&mem, L + lay->l_dummy_ffid, &ffid) ||
	    lp_mem_u64(&mem, L + lay->l_glref, &g) || lp_mem_u64(&mem, L + lay->l_stack, &stack) ||
	    lp_mem_u64(&mem, L + lay->l_maxstack, &maxstack) ||
	    lp_mem_u64(&mem, L + lay->l_cframe, &cframe) ||
	    lp_mem_u32(&mem, L + lay->l_stacksize, &size))
		return LP_LJ_EREAD;
	uint64_t end = stack + 8 * (uint64_t)size;
	if (gct != LP_LJ_GCT_THREAD || ffid != LP_LJ_FFID_C || g != vm.g || !stack ||
	    (stack & 7) || !size || size > (1u << 20) || maxstack < stack || maxstack >= end)
		return LP_LJ_EINVAL;
	memset(t, 0, sizeof(*t));
	t->L = L;
	t->stack = stack;
	t->maxstack = maxstack;
	t->stack_end = end;
	t->cframe = cframe;
	t->stacksize = size;
	t->base = t->top = stack + 16;
	return LP_LJ_OK;
}

/* -- The sample --------------------------------------------------------------------------- */

/* The interpreter's C frames of a sample's threads: about two for each coroutine it runs
 * in (its resume frame, the interpreter's). */
#define MAX_CFRAMES (2 * AGENT_MAX_RESUMES + 32)
#define MAX_RESUMES AGENT_MAX_RESUMES

static struct lp_lj_frame frames[AGENT_MAX_LUA];
/* Interpreter C frames on the native stack, for agent_vm_frame. */
static uint64_t cframes[MAX_CFRAMES];
static unsigned ncframes;
static struct lp_lj_trace cur_trace;
static int have_trace;
/* A sample in C code the interpreter called, whose Lua frames wait for the host walk
 * (agent_vm_sample_helper): its thread, and the interpreter's PC register at the innermost
 * VM frame of the walk once agent_vm_frame has met it. */
static int helper_pending, helper_pc_known;
static struct lp_lj_thread helper_t;
static uint64_t helper_pc, helper_bp, helper_sp, helper_ip;
static unsigned helper_rank;
/* VM entries on the native stack with no Lua frame of the sample above them (see
 * agent_vm_frame; the JIT compiler runs in two, nested): the innermost frame's base and
 * the thread's stack that tell them, while known (0: not looked for); each entry's return
 * address and its rank among the VM frames the walk met, once found, innermost first. */
#define MAX_EMPTY 4
static uint64_t empty_top, empty_stack, empty_ip[MAX_EMPTY];
static unsigned vm_frames_met, empty_rank[MAX_EMPTY], nempty;
/* Such entries found by the walks of the sample's threads (note_empty_cframes): their C
 * frames; and the VM frames the host walk met at C frames, innermost first (their return
 * address, stack pointer and rank among the VM frames), to find those entries in the host
 * stack once every walk is done (agent_vm_omit_empty). */
#define MAX_VMF 16
static uint64_t empty_cf[MAX_EMPTY], vmf_ip[MAX_VMF], vmf_sp[MAX_VMF];
static unsigned nempty_cf, vmf_rank[MAX_VMF], nvmf;
/* A GC sample whose step a trace ran (g->jit_base set), and the first trace whose machine
 * code the host walk met; whether the walk met a VM frame at one of the C frames of the
 * thread whose Lua frames were taken. */
static int gc_in_trace, walk_trace_found, own_vm_met;
static struct lp_lj_trace walk_trace;
static uint64_t walk_trace_ip; /* the return address into walk_trace's code */
static uint32_t trace_c_no;    /* trace_c_sample's trace, whose base frame is lua[0] */
/* Threads taken for the C code that resumed the sampled coroutine, and in turn for the C
 * code that resumed those (lp_lj_c_resumer), innermost first: each one's interpreter C
 * frame (cres_cf[h], nhops of them), the Lua frames the sample had before that thread's
 * (cres_nlua[h], UINT_MAX: its frames not taken) and whether the host walk came to its
 * interpreter there (bit h of cres_met). Their C frames and those of the threads that
 * resumed them by builtins are cres_cframes, never a target of agent_vm_frame's rule for VM
 * code deeper than a C frame. cres_bad: a reused walk went through VM code at no known C
 * frame (agent_vm_frames_copied). */
#define MAX_HOPS 4
static uint64_t cres_cframes[MAX_CFRAMES], cres_cf[MAX_HOPS];
static unsigned ncres, nhops, cres_nlua[MAX_HOPS], cres_met;
static int cres_trunc[MAX_HOPS], cres_bad;

/* Before a walk (a sample's, or a memprof capture's): nothing pending nor found yet. */
static void walk_reset(void)
{
	helper_pending = helper_pc_known = 0;
	empty_top = 0;
	nempty = 0;
	nempty_cf = 0;
	nvmf = 0;
	vm_frames_met = 0;
	gc_in_trace = walk_trace_found = own_vm_met = 0;
	trace_c_no = 0;
	ncres = nhops = cres_met = 0;
	cres_bad = 0;
	for (unsigned h = 0; h < MAX_HOPS; h++)
		cres_nlua[h] = UINT_MAX;
}

/* Static like the state around it (the VM thread only: the handler, or memprof's walk with
 * the handler's signal blocked): the handler runs on the sampled thread's stack, which may
 * be small (sysbench's are 64 KiB), and this array is 2 KiB. */
static void note_cframes(uint64_t *to, unsigned *nto, uint64_t cframe)
{
	static struct lp_lj_cframe cf[MAX_CFRAMES];
	unsigned flags, n = lp_lj_cframes(&vm, &mem, cframe, cf, MAX_CFRAMES, &flags);
	for (unsigned i = 0; i < n && *nto < MAX_CFRAMES; i++)
		to[(*nto)++] = cf[i].addr;
}

static void add_cframes(uint64_t cframe)
{
	note_cframes(cframes, &ncframes, cframe);
}

/* The walk came to VM code at stack pointer sp: a hop's interpreter, if sp is its C frame. */
static void note_hop(uint64_t sp)
{
	for (unsigned h = 0; h < nhops; h++)
		if (sp == cres_cf[h])
			cres_met |= 1u << h;
}

/* The thread whose C code resumed t (lp_lj_c_resumer), in *r: its C frames and those of
 * the threads that resumed it by builtins noted once (cres_cframes). Returns its hop, or -1
 * when there is none (or no room). */
static int c_resumer(const struct lp_lj_thread *t, struct lp_lj_thread *r)
{
	uint64_t cf;
	if (lp_lj_c_resumer(&vm, &mem, t, r, &cf) != LP_LJ_OK)
		return -1;
	for (unsigned h = 0; h < nhops; h++)
		if (cres_cf[h] == cf)
			return (int)h;
	if (nhops == MAX_HOPS)
		return -1;
	struct lp_lj_thread u = *r;
	for (int level = 0; level < MAX_RESUMES; level++) {
		note_cframes(cres_cframes, &ncres, u.cframe);
		struct lp_lj_thread next;
		if (lp_lj_resumer(&vm, &mem, &u, &next, NULL) != LP_LJ_OK)
			break;
		u = next;
	}
	cres_cf[nhops] = cf;
	return (int)nhops++;
}

/* The C frames of the threads that resumed t: a coroutine's native frames continue in
 * them, and in the threads whose C code resumed a coroutine of them (c_resumer). */
static void add_resumer_cframes(struct lp_lj_thread t)
{
	int via_c = 0;
	for (int level = 0; level < MAX_RESUMES; level++) {
		struct lp_lj_thread r;
		if (lp_lj_resumer(&vm, &mem, &t, &r, NULL) != LP_LJ_OK) {
			if (c_resumer(&t, &r) < 0)
				break;
			via_c = 1;
		} else if (!via_c) {
			add_cframes(r.cframe);
		}
		t = r;
	}
}

/* Thread t's C frames, then its resumers'. */
static void add_thread_cframes(struct lp_lj_thread t)
{
	add_cframes(t.cframe);
	add_resumer_cframes(t);
}

static int is_cframe(uint64_t sp)
{
	for (unsigned i = 0; i < ncframes; i++)
		if (cframes[i] == sp)
			return 1;
	for (unsigned i = 0; i < ncres; i++)
		if (cres_cframes[i] == sp)
			return 1;
	return 0;
}

/* Frames f[0, n) into the sample, and C code with no frame of its own that ran Lua on top
 * of a Lua function (lp_lj_entry_caller) as a C function's frame at its return address:
 * without it the frames on both sides read as one run, which the report put after the
 * innermost VM entry of the host stack (a finalizer's callers after the collector's C
 * frames). Returns 0, or -1 when the sample had no room for them all. */
static int put_frames(struct agent_sample *s, const struct lp_lj_frame *f, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (s->nlua == AGENT_MAX_LUA)
			return -1;
		struct lp_lua_frame *o = &s->lua[s->nlua++];
		o->type = f[i].kind;
		o->line = 0;
		if (f[i].kind == LP_FRAME_LFUNC) {
			o->addr = f[i].addr;
			o->line = f[i].line > 0 ? (uint64_t)f[i].line : 0;
			need_proto(s, f[i].addr);
		} else if (f[i].kind == LP_FRAME_FFUNC) {
			o->addr = f[i].ffid;
		} else {
			o->addr = f[i].addr;
		}
		uint64_t ra = i + 1 < n ? lp_lj_entry_caller(&vm, &mem, &f[i], &f[i + 1]) : 0;
		if (ra) {
			if (s->nlua == AGENT_MAX_LUA)
				return -1;
			s->lua[s->nlua].type = LP_FRAME_CFUNC;
			s->lua[s->nlua].addr = ra;
			s->lua[s->nlua++].line = 0;
		}
	}
	return 0;
}

#define WALK_ERR (LP_LJ_WALK_EREAD | LP_LJ_WALK_EBASE | LP_LJ_WALK_ELINK | LP_LJ_WALK_EFUNC)

/* Thread t's C frames, read into tcf, when one of them is a protected call of C (NRES < 0):
 * their count, else 0. */
static struct lp_lj_cframe tcf[MAX_CFRAMES];

static unsigned thread_cpcalls(const struct lp_lj_thread *t)
{
	unsigned flags, n = lp_lj_cframes(&vm, &mem, t->cframe, tcf, MAX_CFRAMES, &flags);
	for (unsigned i = 0; i < n; i++)
		if (tcf[i].nres < 0)
			return n;
	return 0;
}

/* Whether one of the walked frames f[0, n) was entered by C frame cf. */
static int entered(uint64_t cf, const struct lp_lj_frame *f, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if ((f[i].flags & LP_LJ_FR_CENTRY) && f[i].cframe == cf)
			return 1;
	return 0;
}

/*
** The protected calls of C (lj_vm_cpcall, NRES < 0) among a thread's C frames tcf[0, ncf)
** (thread_cpcalls) that entered none of its walked frames f[0, n), inside the outermost C
** frame that entered one: the
** JIT compiler's below a jit.attach handler it runs, a builtin's C type parser. Such an
** entry runs C code only; left in the host stack, it read as the entry of a Lua segment
** (the handler's callers went after the compiler's C frames). agent_vm_omit_empty leaves
** them out with the entries empty_entry tells by the sample's state. Not with the C frame
** chain broken (flags): the frames' entries are not known then. Called for each thread
** walked (a handler that resumes a coroutine has the compiler's entry on the resumer's).
*/
static void note_empty_cframes(unsigned ncf, const struct lp_lj_frame *f, unsigned n,
			       unsigned flags)
{
	int outer = -1;
	if (flags & LP_LJ_WALK_ECFRAME)
		return;
	for (unsigned i = 0; i < ncf; i++)
		if (entered(tcf[i].addr, f, n))
			outer = (int)i;
	for (int i = 0; i < outer && nempty_cf < MAX_EMPTY; i++)
		if (tcf[i].nres < 0 && !entered(tcf[i].addr, f, n))
			empty_cf[nempty_cf++] = tcf[i].addr;
}

/*
** Lua frames of thread t from base, then (CALLGRAPH) of the threads that resumed it.
** Returns -1 when the stack could not be read consistently.
*/
static int lua_stack(struct agent_sample *s, const struct lp_lj_thread *t0, uint64_t base,
		     uint64_t leaf_pc, int mode)
{
	unsigned max = mode == LUAPROF_SYSPROF_CALLGRAPH ? AGENT_MAX_LUA : 1;
	struct lp_lj_thread t = *t0;
	int via_c = 0, hop;
	for (int level = 0; level < MAX_RESUMES; level++) {
		unsigned flags, room = max - (unsigned)s->nlua;
		unsigned n = lp_lj_walk(&vm, &mem, &t, base, leaf_pc, frames, room, &flags);
		if (flags & WALK_ERR)
			return -1;
		unsigned ncf = mode == LUAPROF_SYSPROF_CALLGRAPH ? thread_cpcalls(&t) : 0;
		if (ncf)
			note_empty_cframes(ncf, frames, n, flags);
		if (put_frames(s, frames, n) != 0)
			flags |= LP_LJ_WALK_TRUNC;
		if (mode == LUAPROF_SYSPROF_CALLGRAPH && level > 0 && !via_c)
			add_cframes(t.cframe);
		if (flags & LP_LJ_WALK_TRUNC) {
			s->lua_truncated = mode == LUAPROF_SYSPROF_CALLGRAPH;
			/* The Lua frames stop here, the native ones go on: the host walk steps
			 * through the resumers' VM entries only at their C frames. */
			if (mode == LUAPROF_SYSPROF_CALLGRAPH)
				add_resumer_cframes(t);
			return 0;
		}
		if (mode != LUAPROF_SYSPROF_CALLGRAPH)
			return 0;
		/* A coroutine continues into the thread that resumed it: a builtin's, or the
		 * thread whose C code did (kept if the host walk confirms it:
		 * agent_vm_after_walk). */
		struct lp_lj_thread r;
		if (lp_lj_resumer(&vm, &mem, &t, &r, NULL) == LP_LJ_OK) {
			t = r;
		} else if (!t.cframe && t.L != vm.mainL &&
			   lp_lj_chain_resumer(&vm, &mem, t.L, &r) == LP_LJ_OK) {
			/* Yielding: coroutine.yield cleared its C frame; the builtin that
			 * resumed it still names it. */
			t = r;
		} else if ((hop = c_resumer(&t, &r)) >= 0 && cres_nlua[hop] == UINT_MAX) {
			cres_nlua[hop] = (unsigned)s->nlua;
			cres_trunc[hop] = s->lua_truncated;
			t = r;
			via_c = 1;
		} else {
			return 0;
		}
		base = 0;
		leaf_pc = 0;
	}
	return 0;
}

/* lua_stack for the code that takes a sample's frames from a base other than BASE's: on
 * failure the sample is left with none (host-only) and 0 returned, else 1. A failed walk
 * keeps the symbols it named (they are marked known): harmless. */
static int lua_stack_or_none(struct agent_sample *s, const struct lp_lj_thread *t,
			     uint64_t base, uint64_t leaf, int mode)
{
	if (lua_stack(s, t, base, leaf, mode) == 0)
		return 1;
	s->nlua = 0;
	s->lua_truncated = 0;
	return 0;
}

static int cpcall_above(uint64_t cf, uint64_t base, uint64_t stack);

/* t's innermost C frame is a protected call of C made above its Lua frames: the JIT
 * compiler's, in a compiler state. */
static int in_compiler(const struct lp_lj_thread *t)
{
	uint64_t cf = t->cframe & LP_LJ_CFRAME_RAWMASK;
	return cf && t->base > t->stack && cpcall_above(cf, t->base, t->stack);
}

static struct lp_lj_trace_frame tfr[LP_LJ_TRACE_MAX_INLINED]; /* a trace's inlined calls */

/* Frame o of sample s: a function a trace inlined (a Lua function, or a builtin: pcall). */
static void put_inlined(struct lp_lua_frame *o, struct agent_sample *s,
			const struct lp_lj_trace_frame *f)
{
	o->type = f->ffid ? LP_FRAME_FFUNC : LP_FRAME_LFUNC;
	o->addr = f->ffid ? f->ffid : f->pt;
	o->line = f->line > 0 ? (uint64_t)f->line : 0;
	if (!f->ffid)
		need_proto(s, f->pt);
}

static int exit_stub_pushed(uint64_t ip, uint64_t sp, uint32_t *exitno);

static int trace_sample(struct agent_sample *s, const struct lp_lj_thread *t, int have_t,
			uint64_t ip, uint64_t sp, int mode)
{
	s->vmstate = LP_VMST_TRACE;
	if (mode == LUAPROF_SYSPROF_DEFAULT)
		return 0;
	if (lp_lj_trace_read(&vm, &mem, (uint32_t)s->traceno, &cur_trace) != LP_LJ_OK)
		return 0; /* counted; the stream gets the number with no location */
	have_trace = 1;
	need_trace(s, &cur_trace);
	uint64_t pt = cur_trace.startpt, leaf = cur_trace.startpc + 4;
	int32_t line = 0;
	struct lp_lj_trace_loc loc;
	uint64_t base_pt = 0, jb = 0;
	if (have_t && lp_lj_jit_base(&vm, &mem, &jb) == LP_LJ_OK && jb) {
		unsigned flags;
		if (lp_lj_walk(&vm, &mem, t, jb, 0, frames, 1, &flags) == 1 &&
		    frames[0].kind == LP_FRAME_LFUNC)
			base_pt = frames[0].addr;
	}
	/* With the functions inlined there, each at its call: frames of their own. */
	/* In one of its exit stubs (agent_vm_frame), the guard that failed is known: the
	 * exit's snapshot places the sample, every frame of it running (the exit restores
	 * them all), not where the trace starts. */
	int ninl = -1;
	uint64_t bpc;
	uint32_t exitno;
	struct lp_lj_trace_frame *want = mode == LUAPROF_SYSPROF_CALLGRAPH ? tfr : NULL;
	int in_code = lp_lj_trace_has(&cur_trace, ip);
	if (((in_code &&
	      lp_lj_trace_locate_inlined(&vm, &mem, &cur_trace, ip, base_pt, &loc, want,
					 LP_LJ_TRACE_MAX_INLINED, &ninl, &bpc) == LP_LJ_OK) ||
	     (!in_code && exit_stub_pushed(ip, sp, &exitno) >= 0 &&
	      lp_lj_trace_locate_exit(&vm, &mem, &cur_trace, exitno, base_pt, &loc, want,
				      LP_LJ_TRACE_MAX_INLINED, &ninl, &bpc) == LP_LJ_OK)) &&
	    loc.pt) {
		pt = loc.pt;
		line = loc.line;
		if (!loc.inlined && loc.pt == base_pt)
			leaf = loc.pc;
		if (!loc.inlined)
			ninl = -1;
		else if (ninl >= 0)
			leaf = bpc;
	} else {
		ninl = -1;
		/* In a helper the trace called: where the trace starts. */
		struct lp_lj_proto p;
		if (lp_lj_proto_read(&vm, &mem, pt, &p) == LP_LJ_OK &&
		    lp_lj_pc_line(&vm, &mem, &p, cur_trace.startpc + 4, &line) != LP_LJ_OK)
			line = p.firstline;
	}
	need_proto(s, pt);
	s->trace_proto = pt;
	s->trace_line = line > 0 ? (uint64_t)line : 0;
	if (mode != LUAPROF_SYSPROF_CALLGRAPH || !have_t)
		return 0;
	/* The Lua frames below the trace, from its base frame (not synced while the trace
	 * runs: at the trace's location when that is in the base frame's function, else
	 * where the trace starts). The stream carries them on the side (tstacks.c). */
	add_cframes(t->cframe);
	for (int k = 0; k < ninl; k++)
		put_inlined(&s->lua[s->nlua++], s, &tfr[k]);
	if (jb == 0 || lua_stack(s, t, jb, leaf, mode) != 0)
		s->nlua = 0;
	return 0;
}

/* C code called from trace traceno: the Lua frames from the trace's base frame down. */
static int trace_c_sample(struct agent_sample *s, const struct lp_lj_thread *t, int have_t,
			  uint32_t traceno, int mode)
{
	uint64_t jb = 0, leaf = 0;
	if (!have_t || lp_lj_jit_base(&vm, &mem, &jb) != LP_LJ_OK || jb == 0)
		return 0; /* no Lua frame to show: the host stack only */
	if (mode == LUAPROF_SYSPROF_CALLGRAPH)
		add_cframes(t->cframe);
	/* The trace's base frame was not synced: the line is where the trace starts (its
	 * own frame is not materialised), when that is in the same function. */
	if (lp_lj_trace_read(&vm, &mem, traceno, &cur_trace) == LP_LJ_OK) {
		have_trace = 1;
		leaf = cur_trace.startpc + 4;
		if (mode == LUAPROF_SYSPROF_CALLGRAPH)
			need_trace(s, &cur_trace); /* its frame in the host stack is named after it */
	}
	int rc = lua_stack(s, t, jb, leaf, mode);
	if (mode == LUAPROF_SYSPROF_CALLGRAPH && s->nlua > 0)
		trace_c_no = traceno; /* the walk to the trace's code places it: after_walk */
	return rc;
}

/*
** C code a trace called (trace_c_sample), or the collector's step a trace ran, once the
** host walk has met the trace's code at the call: the functions the trace inlined there,
** from the snapshot, go above its base frame (lua[0]), which is put at the call into them
** instead of where the trace starts. 1 when done.
*/
static int trace_c_inlined(struct agent_sample *s)
{
	struct lp_lj_proto p;
	uint64_t bpc;
	int32_t line;
	int gc = gc_in_trace && s->vmstate == LP_VMST_GC;
	if (!walk_trace_found || !(gc || (trace_c_no && walk_trace.traceno == trace_c_no)) ||
	    s->nlua == 0 || s->lua[0].type != LP_FRAME_LFUNC)
		return 0;
	int n = lp_lj_trace_inlined(&vm, &mem, &walk_trace, walk_trace_ip, s->lua[0].addr, tfr,
				    LP_LJ_TRACE_MAX_INLINED, &bpc);
	/* Nothing inlined: the snapshot's PC is the line after the last guard, as wrong as
	 * often as right (see below); where the trace starts is kept, when that is in this
	 * function (it is not for a side trace that started in a function since returned). */
	if (n < 0 || (n == 0 && walk_trace.startpt == s->lua[0].addr) ||
	    (size_t)n > AGENT_MAX_LUA - s->nlua ||
	    lp_lj_proto_read(&vm, &mem, s->lua[0].addr, &p) != LP_LJ_OK ||
	    lp_lj_pc_line(&vm, &mem, &p, bpc, &line) != LP_LJ_OK)
		return 0;
	s->lua[0].line = line > 0 ? (uint64_t)line : 0;
	memmove(&s->lua[n], &s->lua[0], s->nlua * sizeof(s->lua[0]));
	for (int k = 0; k < n; k++)
		put_inlined(&s->lua[k], s, &tfr[k]);
	s->nlua += (size_t)n;
	return 1;
}

/*
** The builtin or C function of frame f (at base) runs with the interpreter's PC register
** at pc: pc is its entry (the call loads the function's pc, and the fetch of its first
** instruction adds 4: both are seen, about one sample in twenty of an interpreted call
** to a builtin fell between the two), or, once
** the builtin loaded its caller's PC to return (tostring, next...) or while the call has
** set BASE but not yet PC, its link. Other code of the VM's block (an FFI callback's entry
** and exit) may leave a builtin's base in rdx, with something else in PC.
*/
static int builtin_runs_pc(const struct lp_lj_frame *f, uint64_t base, uint64_t pc)
{
	uint64_t fpc, link;
	return lp_mem_u64(&mem, f->func + vm.lay->fn_pc, &fpc) == 0 &&
	       (fpc + 4 == pc || fpc == pc ||
		(lp_mem_u64(&mem, base - 8, &link) == 0 && link == pc));
}

static int is_ctstate(uint64_t p);
static int ffi_callback_glue(struct agent_sample *s, int mode);
static int runs_pc(uint64_t base, uint64_t pc, uint8_t *st);

/* Thread t's frame at base (0: its L->base) is a coroutine builtin that switches threads
 * (coroutine.resume, coroutine.wrap_aux, coroutine.yield). */
static int switcher_at(const struct lp_lj_thread *t, uint64_t base)
{
	unsigned flags;
	if (lp_lj_walk(&vm, &mem, t, base, 0, frames, 1, &flags) != 1 ||
	    frames[0].kind != LP_FRAME_FFUNC)
		return 0;
	uint8_t id = frames[0].ffid;
	return id && (id == vm.ffid_resume || id == vm.ffid_wrap_aux || id == vm.ffid_yield);
}

/*
** Thread t runs a coroutine builtin that switches threads (coroutine.resume,
** coroutine.wrap_aux, coroutine.yield) in VM code that keeps no PC in a register: its
** frames start at the builtin's, whose base goes in *at (0: L->base).
**   - from the builtin's first use of PC (rbx) for the coroutine's stack until it stores
**     L->base, BASE (rdx) is the builtin's, and L->base whatever the resumer's last call
**     of C left there: a frame below, or above and gone, even another resuming builtin's
**     (their samples had no Lua frame, or that builtin's: about 1 in 1,000 of a loop of
**     resumes from two depths; every one at those instructions under breakpoints,
**     static_luajit.sh). So the frame at rdx first.
**   - after the store, the VM's code until the resumer's frames are back in the registers
**     (lj_vm_resume's entry and exit, the builtin after it) keeps no base in a register:
**     the frame at L->base. rdx there is L->base, or no frame of t's (one slot above, the
**     coroutine's).
*/
static int switching(const struct lp_lj_thread *t, uint64_t rdx, uint64_t *at)
{
	*at = rdx;
	if (switcher_at(t, rdx))
		return 1;
	*at = 0;
	return switcher_at(t, 0);
}

/*
** Thread t, a coroutine that a builtin (coroutine.resume, coroutine.wrap_aux) starts, has
** no Lua frame yet: lj_vm_resume enters its function through lj_vm_call's code, from the
** switch of cur_L to it until its frame's link is stored. Its resumer, whose frames are the
** sample's (the builtin's, on top), in *r.
** Those samples had no Lua frame, and the host walk stopped at the builtin's code
** (lj_ff_coroutine_resume;lj_vm_call, not rooted): about 1 in 1,000 of a loop starting
** coroutines; every one at those instructions under breakpoints.
*/
static int starting(const struct lp_lj_thread *t, struct lp_lj_thread *r)
{
	unsigned flags;
	return (t->cframe & LP_LJ_CFRAME_RESUME) && t->L != vm.mainL &&
	       lp_lj_walk(&vm, &mem, t, 0, 0, frames, 1, &flags) == 0 &&
	       (flags & LP_LJ_WALK_BOTTOM) && lp_lj_resumer(&vm, &mem, t, r, NULL) == LP_LJ_OK;
}

/*
** coroutine.resume back from the coroutine with its results in place: it stores its first
** result (true, or false on an error) over its frame's link and takes PC back from the
** C frame's SAVE_PC, where it kept it, an instruction later. In between, the frame at
** BASE (rdx), still the builtin's (its function slot is intact), links nowhere, and PC
** (rbx) is a count: its samples had no Lua frame (all of them at that instruction under
** breakpoints, static_luajit.sh). The link in *pc: the sample is its caller's, at the call,
** as the instructions after it (returning). The slot must hold a function (its type
** checked, as the walker does): another value's pointer bits are no builtin's.
*/
static int resume_results(const struct lp_lj_thread *t, uint64_t sp, uint64_t rdx,
			  uint64_t *pc)
{
	uint64_t cf = t->cframe & LP_LJ_CFRAME_RAWMASK, fn, link;
	uint8_t id;
	return vm.ffid_resume && cf == sp && rdx >= t->stack + 16 && rdx < t->stack_end &&
	       !(rdx & 7) && lp_mem_u64(&mem, cf + vm.lay->cf_pc, pc) == 0 &&
	       lp_mem_u64(&mem, rdx - 8, &link) == 0 && link != *pc &&
	       lp_mem_u64(&mem, rdx - 16, &fn) == 0 && (fn >> 47) == LP_LJ_ITYPE_FUNC &&
	       (fn & LP_LJ_GCVMASK) &&
	       lp_mem_u8(&mem, (fn & LP_LJ_GCVMASK) + vm.lay->fn_ffid, &id) == 0 &&
	       id == vm.ffid_resume;
}

/*
** The interpreter returning from the frame at base to Lua: PC already holds the frame's
** link, and an assembler builtin has stored its result over its function slot (math.sqrt,
** string.byte... "fff_res"), or BC_RET is moving a Lua function's results down over its
** function slot and, from the second result on, over the link slot too (an iterator's
** `return i + 1, v`: 3 % of such a loop's samples had no Lua frame), so no frame is left
** at base to walk. The caller's frame is intact below it, at the base its call
** instruction (before PC) gives, and runs PC: the sample is the caller's, at the calling
** line. 1 when the stack was taken so.
*/
static int frame_runs(const struct lp_lj_thread *t, uint64_t base, uint64_t pc, uint64_t proto);

/* The base of the Lua frame whose call instruction, before pc, made the frame at base (as
 * the walker steps down a Lua link: the instruction's A slots and a frame's two below),
 * when a function there runs pc; else 0. */
static uint64_t calling_base(const struct lp_lj_thread *t, uint64_t base, uint64_t pc)
{
	uint32_t ins;
	if ((pc & 3) != LP_LJ_FRAME_LUA || pc < 4 || lp_mem_u32(&mem, pc - 4, &ins) != 0)
		return 0;
	uint64_t cbase = base - 8 * (2 + (uint64_t)((ins >> 8) & 0xff));
	return cbase >= t->stack + 16 && cbase < base && frame_runs(t, cbase, pc, 0) ? cbase : 0;
}

/*
** The frame at base is a C function's, the VM calling it or back from it (BC_CALL once it
** loaded the function's PC, BC_FUNCC before and after the call: PC its entry or the
** instruction after): no code of its own runs there, and it has no host frame, by which
** the report places a C function's frame. The sample is its Lua caller's, at the call, as
** returning() has a C function's return (17 % of a loop calling a C module's trivial
** function had no Lua frame). Its link, the return PC, in *link.
*/
static int c_call_edge(const struct lp_lj_thread *t, uint64_t base, uint64_t pc,
		       uint64_t *link)
{
	unsigned flags;
	uint64_t fpc;
	return lp_lj_walk(&vm, &mem, t, base, 0, frames, 1, &flags) == 1 &&
	       frames[0].kind == LP_FRAME_CFUNC &&
	       lp_mem_u64(&mem, frames[0].func + vm.lay->fn_pc, &fpc) == 0 &&
	       (fpc == pc || fpc + 4 == pc) && lp_mem_u64(&mem, base - 8, link) == 0;
}

static int returning(struct agent_sample *s, const struct lp_lj_thread *t, uint64_t base,
		     uint64_t pc, int mode)
{
	uint64_t cbase = calling_base(t, base, pc);
	if (!cbase || !lua_stack_or_none(s, t, cbase, pc, mode))
		return 0;
	s->vmstate = LP_VMST_LFUNC;
	return 1;
}

/*
** Where the VM's code of a sample leads when its PC register (rbx) holds no bytecode
** position: the frame of the code that entered the VM or that it returns to. One of
** these tells it, tried in this order:
**   - PC a pcall link (delta | FRAME_PCALL; 16 for pcall, 24 for xpcall; the hook bit, or
**     FRAME_C toggled on the way back, in bit 0): pcall or xpcall (assembler builtins)
**     calling the function they run, or that function returning to them. The builtin's
**     frame is at BASE (rdx), or delta below it once BASE is the callee's (before its link
**     is stored, or while it returns). No C frame in between. (6-8 % of an interpreted
**     pcall loop's samples had no Lua frame.) Or the delta alone, type 0: lj_vm_returnp
**     returning to the builtin from `and PC, -8` until it loads the builtin's own link
**     into PC, BASE the callee's, then from `sub BASE, PC` the builtin's. The callee's
**     link slot (delta above the builtin's base, less 8) still holds the pcall link
**     there (the prepended `true` may overwrite it only after PC's load), which tells
**     this from other deltas in PC (cont_dispatch's, a C frame's toggled). (0.5-1 % of
**     that loop's samples had no Lua frame, at the `lea` and `mov` after the `sub`: 9-22
**     of ~2,000 at 1 kHz, both builds, on a faster host.)
**   - the VM's entry from C (lj_vm_call, lj_vm_pcall, lj_vm_cpcall: a builtin's or a C
**     function's lua_call, as table.sort calls its comparator) before the callee's frame
**     is linked: the entry has made its C frame (L->cframe, at the stack pointer) and
**     marked it with SAVE_PC = L (the interpreter stores a PC there at the callee's first
**     call out); PC and BASE hold no frame yet, or BASE the C code's. The C code's frame
**     is at L->base, and must be a C function's or a builtin's: the exit path back to C,
**     where SAVE_PC may still be L, has the returning Lua function's frame there or a
**     stale one.
**   - PC a C frame's link (delta | FRAME_C or FRAME_CP): the same entry right before it
**     stores the link at BASE (vm_call_dispatch_f; a C module calling Lua back: 1.5 % of
**     such a loop's samples were dropped there), or the VM returning to C from a builtin
**     C called, its results already over its function slot (fff_res, after a C fallback
**     such as tonumber's on a string, which synced L->base to BASE), and vm_return, which
**     first toggles FRAME_C (FRAME_C becomes type 0, FRAME_CP FRAME_P). The C code's frame
**     is delta bytes below BASE; L->base is that frame's, or BASE's.
**   - in state C (at_c), PC the C code's base itself: vm_return's `PC = BASE - delta`, set
**     before the results are moved down over the returning frame, which L->base may
**     still name (a builtin's fallback synced it), and until L->base is restored.
** In the last two the frame must be a C function's or a builtin's (no Lua function calls
** lua_call), or none: the host's C code at the stack's bottom. Returns LINK_PCALL or
** LINK_C, with that frame's base in *to; else LINK_NONE.
*/
enum { LINK_NONE, LINK_C, LINK_PCALL };
#define LINK_AT_C  1u /* state C: PC may be the C code's base */
#define LINK_BY_PC 2u /* the entry's mark does not count (C code the VM called) */

static int vm_link(const struct lp_lj_thread *t, uint64_t sp, uint64_t rdx, uint64_t rbx,
		   unsigned how, uint64_t *to)
{
	uint64_t delta = rbx & ~(uint64_t)7, cf = t->cframe & LP_LJ_CFRAME_RAWMASK, v;
	unsigned flags;
	if (((rbx & 6) == 6 || (rbx & 7) == 0) && (delta == 16 || delta == 24) && vm.ffid_pcall) {
		uint8_t want = delta == 16 ? vm.ffid_pcall : vm.ffid_xpcall;
		for (uint64_t base = rdx;; base = rdx - delta) {
			if (lp_lj_walk(&vm, &mem, t, base, 0, frames, 1, &flags) == 1 &&
			    frames[0].kind == LP_FRAME_FFUNC && frames[0].ffid == want &&
			    ((rbx & 7) != 0 ||
			     (lp_mem_u64(&mem, base + delta - 8, &v) == 0 &&
			      (v & ~(uint64_t)1) == (delta | LP_LJ_FRAME_PCALL)))) {
				*to = base;
				return LINK_PCALL;
			}
			if (base != rdx)
				break;
		}
	}
	int at_c = (how & LINK_AT_C) != 0;
	if (!(how & LINK_BY_PC) && cf == sp && lp_mem_u64(&mem, cf + vm.lay->cf_pc, &v) == 0 &&
	    v == t->L &&
	    lp_mem_u64(&mem, cf + vm.lay->cf_prev, &v) == 0 && (v & LP_LJ_CFRAME_RAWMASK) &&
	    lp_lj_walk(&vm, &mem, t, 0, 0, frames, 1, &flags) == 1 &&
	    frames[0].kind != LP_FRAME_LFUNC) {
		*to = t->base;
		return LINK_C;
	}
	/* A delta is less than the stack's size, a bytecode position an address. */
	uint64_t base = 0;
	if (((rbx & 3) == LP_LJ_FRAME_C || (rbx & 3) == LP_LJ_FRAME_LUA) && delta &&
	    delta < rdx - t->stack) {
		base = rdx - delta;
		if (at_c ? base > t->base : base != t->base && rdx != t->base)
			base = 0;
	} else if (at_c && rbx < t->base) {
		base = rbx;
	}
	if (base < t->stack + 16 || (base & 7))
		return LINK_NONE;
	unsigned n = lp_lj_walk(&vm, &mem, t, base, 0, frames, 1, &flags);
	if (n == 1 ? frames[0].kind == LP_FRAME_LFUNC : !(flags & LP_LJ_WALK_BOTTOM))
		return LINK_NONE;
	*to = base;
	return LINK_C;
}

/*
** The VM entered from C code that runs on top of a Lua frame with no frame of its own (a
** debug hook's C code, luacov's line hook; a __gc finalizer's or a jit.attach handler's
** caller), at either end of the call: its C frame, at the stack pointer sp, is L->cframe,
** with the mark SAVE_PC = L (the callee has not called out, or stored no PC doing so), and
** the frame at L->base, or at rbx on the way back, is that Lua frame. The sample is then
** the C code's (link_sample), that frame at the PC saved in the C frame before the entry's
** (the interpreter stored SAVE_PC before calling the hook). vm_link takes no Lua frame for
** the C code's: the exit path has stale ones at L->base (the callee's, when it synced
** L->base calling C); the registers tell these windows:
**   - entry_over_lua: from lj_vm_call's label 2 (lj_vm_pcall's, lj_vm_cpcall's once its C
**     function returned a base) until the callee's link is stored, RA (rcx) is the
**     callee's base, above L->base, and PC (rbx) goes from the frame type (FRAME_C or
**     FRAME_CP) to RA + type to the delta RA - L->base + type, while BASE (rdx) is CARG3
**     (a count) or another leftover, then L->base, then RA. On the way back RA is an
**     offset, and PC no address nor delta that far up.
**   - exit_over_lua: vm_return to C, in state C until the registers are restored: PC
**     is the link with FRAME_C toggled (type 0 or FRAME_P), its delta, delta - BASE, then
**     (from `neg PC`) the previous base, the C code's, which L->base is or will be (the
**     results are moved down first). No bytecode position is a Lua stack's slot nor
**     less than BASE's offset in the stack.
**   - the entry in state C still (the C code's), before `set_vmstate INTERP`: the
**     first form of entry_over_lua.
** 2.5 % of a loop's samples under an instruction hook had the loop's chunk at line 0 on
** top of the hook's C code (the walk from BASE or L->base took PC or SAVE_PC for the
** chunk's), both builds, JIT off: about half in each window; 1.5-3 % with a hook that
** calls a C function, or a line hook while __gc finalizers run.
*/
static int fresh_entry(const struct lp_lj_thread *t, uint64_t sp)
{
	uint64_t cf = t->cframe & LP_LJ_CFRAME_RAWMASK, v;
	return cf == sp && lp_mem_u64(&mem, cf + vm.lay->cf_pc, &v) == 0 && v == t->L &&
	       lp_mem_u64(&mem, cf + vm.lay->cf_prev, &v) == 0 && (v & LP_LJ_CFRAME_RAWMASK);
}

static int lua_frame_at(const struct lp_lj_thread *t, uint64_t base)
{
	unsigned flags;
	return base >= t->stack + 16 && !(base & 7) &&
	       lp_lj_walk(&vm, &mem, t, base, 0, frames, 1, &flags) == 1 &&
	       frames[0].kind == LP_FRAME_LFUNC;
}

static int entry_over_lua(const struct lp_lj_thread *t, uint64_t sp, uint64_t rdx,
			  uint64_t rbx, uint64_t rcx)
{
	uint64_t type = rbx & 7, pc = rbx & ~(uint64_t)7, link;
	if ((type != LP_LJ_FRAME_C && type != LP_LJ_FRAME_CP) || (rcx & 7) || rcx <= t->base ||
	    rcx >= t->stack_end)
		return 0;
	if (pc == 0)
		; /* before `add PC, RA`: BASE not loaded yet, or L->base */
	else if (pc != rcx && pc != rcx - t->base)
		return 0;
	else if (rdx != t->base && !(pc == rcx - t->base && rdx == rcx &&
				     lp_mem_u64(&mem, rcx - 8, &link) == 0 && link != rbx))
		return 0; /* after `mov BASE, RA`, until the link is stored */
	return fresh_entry(t, sp) && lua_frame_at(t, t->base);
}

static uint64_t exit_over_lua(const struct lp_lj_thread *t, uint64_t sp, uint64_t rdx,
			      uint64_t rbx)
{
	uint64_t base, delta = rbx & ~(uint64_t)7;
	if (rbx >= t->stack && rbx <= t->base)
		base = rbx; /* from `neg PC` */
	else if (0 - rbx >= t->stack && 0 - rbx <= t->base)
		base = 0 - rbx; /* `sub PC, BASE` done */
	else if ((rbx & 3) == 0 && delta && rdx > t->stack && delta < rdx - t->stack)
		base = rdx - delta; /* the link, FRAME_C toggled, before `sub PC, BASE` */
	else
		return 0;
	return base <= t->base && fresh_entry(t, sp) && lua_frame_at(t, base) ? base : 0;
}

/*
** PC of the Lua function at BASE rdx whose PC register holds rbx: rbx itself, but while
** the interpreter calls a metamethod (the meta handlers' jump to vm_call_dispatch: `obj.x`
** with an __index function, `a + b` with __add), from the store of the caller's PC in the
** new frame (its slot -3, the continuation frame's) until BASE moves there, PC holds that
** frame's link (delta | FRAME_CONT), or for one instruction, before `sub PC, BASE`, the
** new frame's address | FRAME_CONT: the caller's PC is the one stored. And as the
** metamethod returns to its continuation (cont_dispatch), from `sub BASE, PC` until PC is
** loaded from that slot, BASE is the caller's again, PC the link's delta (its type
** cleared) and RB (rbp) the metamethod's base, delta above BASE, whose slot -3 has the
** caller's PC. Such samples had the caller at line 0 (0.7 % of a loop reading a field
** through __index, JIT off; 0.02 % on Debian's luajit and 0.09 % on luajit2 in the last
** two windows).
*/
static uint64_t cont_caller_pc(const struct lp_lj_thread *t, uint64_t rdx, uint64_t rbx,
			       uint64_t rbp)
{
	uint64_t delta = rbx & ~(uint64_t)7, at = rdx + delta, pc, link;
	if ((rbx & 7) == LP_LJ_FRAME_CONT && delta > rdx && delta < t->stack_end)
		at = delta; /* the new frame's address, before `sub PC, BASE` */
	else if (!delta || delta >= t->stack_end - t->stack || at >= t->stack_end)
		return rbx; /* a bytecode position */
	else if ((rbx & 7) == 0 && (at != rbp || lp_mem_u64(&mem, at - 8, &link) != 0 ||
				    link != (delta | LP_LJ_FRAME_CONT)))
		return rbx; /* not cont_dispatch */
	else if ((rbx & 7) != LP_LJ_FRAME_CONT && (rbx & 7) != 0)
		return rbx;
	return lp_mem_u64(&mem, at - 24, &pc) == 0 ? pc : rbx;
}

/*
** ip is at ins_call's last steps, which every copy of it shares (the call handlers',
** vm_call_dispatch_f's, where the VM's entries from C, pcall and a C function's tail
** call, lj_meta_tailcall, call; vmeta_call's, a callable object's call): the store of the
** new frame's link, `mov [BASE-8], PC` (LINK_UNSTORED: the slot may hold an older value),
** or the load of the callee's PC right after it, `mov PC, [RB + pc]` (LINK_STORED). BASE is
** the new frame there, PC its link. Told by the instructions' bytes, as dispatching()
** tells the dispatch.
*/
enum { NO_LINK_STORE, LINK_UNSTORED, LINK_STORED };

static int link_store_at(uint64_t ip)
{
	static const uint8_t store[4] = { 0x48, 0x89, 0x5a, 0xf8 }; /* mov [rdx-8], rbx */
	uint8_t b[4];
	if (!lp_lj_in_vm(&vm, ip) || !lp_lj_in_vm(&vm, ip + 3) ||
	    lp_mem_read(&mem, ip, b, sizeof(b)) != 0)
		return NO_LINK_STORE;
	if (memcmp(b, store, sizeof(b)) == 0)
		return LINK_UNSTORED;
	if (b[0] != 0x48 || b[1] != 0x8b || b[2] != 0x5d || b[3] != vm.lay->fn_pc ||
	    vm.lay->fn_pc >= 0x80 || !lp_lj_in_vm(&vm, ip - 4) ||
	    lp_mem_read(&mem, ip - 4, b, sizeof(b)) != 0 || memcmp(b, store, sizeof(b)) != 0)
		return NO_LINK_STORE; /* not mov rbx, [rbp + pc] after the store */
	return LINK_STORED;
}

/*
** A metamethod's frame at BASE (rdx) at either end of the call, where the walk from BASE
** finds no caller: the caller's base (BASE - the link's delta) in *cbase and its PC, which
** the meta handler stored in the continuation's slot -3, in *cpc. *callee is set when
** the sample goes to the metamethod too (a Lua function, at its first line), whose frame
** is left in frames[0].
**   - the VM's store of the new frame's link (ins_call's `mov [BASE-8], PC`, at ip: in
**     vm_call_dispatch_f, where the meta handlers of `obj.x`, `obj.x = v` and the
**     arithmetic ones jump, and in vmeta_call's copy, for a callable object as
**     metamethod): BASE is the new frame, PC its link (delta | FRAME_CONT) not yet
**     stored (the slot may hold the same link, left by the last such call). A Lua
**     metamethod goes on top of the caller, as a call's callee does before its link is
**     stored (unlinked_call).
**   - a C function's or builtin's return to its continuation (vm_returnc, vm_return,
**     vm_returnp, and cont_dispatch until it moves BASE to the caller, where
**     cont_caller_pc takes over): BASE is still the metamethod's, its link intact, PC
**     that link, FRAME_C toggled in it (vm_return's xor), then its type cleared. No
**     code of the metamethod's runs there: the caller's sample, at the calling line, as
**     for a C function's return to Lua (c_call_edge). A Lua metamethod keeps its frame
**     there (vm_top: the function returning).
**   - a C function's call and return in BC_FUNCC, state INTERP (from vm_call_dispatch_f's
**     load of its PC after the link's store until BC_FUNCC sets state C, and from state
**     INTERP back until BC_FUNCC loads the link into PC for vm_returnc): BASE its frame,
**     its link intact, PC its entry or the instruction after (c_call_edge). The caller's
**     sample, as for a C function called by a Lua one (c_call_edge, returning).
** All are told by the registers and the stack: a continuation that is the VM's code (not
** an FFI callback's mark, 1, nor a C function's tail call's, 0, lj_meta_tailcall) and a
** caller that runs the saved PC; the link's store by link_store_at. Those samples had no
** Lua frame: under breakpoints (static_luajit.sh), all 41 at lj_vm_returnp's and
** lj_cont_dispatch's first two instructions after a C __index function, 10 of 20 at
** vm_call_dispatch_f's store in a loop reading a cdata's field (the FFI's __index
** builtin) in a Lua __call, and 126 of 160 at eight instructions of that C __index
** function's way through BC_FUNCC (the others were the loop's own C calls); a loop
** calling `clib.f()` (an FFI library namespace's __index) passes the first two.
*/
static int cont_edge(const struct lp_lj_thread *t, uint64_t ip, uint64_t rdx, uint64_t rbx,
		     uint64_t *cbase, uint64_t *cpc, int *callee)
{
	uint64_t link, cont, delta;
	unsigned flags;
	if (rdx < t->stack + 32 || rdx >= t->stack_end || (rdx & 7) ||
	    lp_mem_u64(&mem, rdx - 8, &link) != 0)
		return 0;
	*callee = 0;
	if ((rbx & 7) == LP_LJ_FRAME_CONT && link_store_at(ip) == LINK_UNSTORED) {
		link = rbx; /* the slot's older value may be the same link: a loop's last call */
		*callee = 1;
	} else if ((link & 7) != LP_LJ_FRAME_CONT) {
		return 0;
	} else if (rbx != link && rbx != (link ^ LP_LJ_FRAME_C) && rbx != (link & ~(uint64_t)7)) {
		uint64_t own;
		if (!c_call_edge(t, rdx, rbx, &own) || own != link)
			return 0; /* else BC_FUNCC calling it, or back from it */
	}
	delta = link & ~(uint64_t)7;
	if (!delta || delta > rdx - t->stack - 16 || lp_mem_u64(&mem, rdx - 32, &cont) != 0 ||
	    !lp_lj_in_vm(&vm, cont) || lp_mem_u64(&mem, rdx - 24, cpc) != 0 ||
	    !frame_runs(t, rdx - delta, *cpc, 0))
		return 0;
	*cbase = rdx - delta;
	if (lp_lj_walk(&vm, &mem, t, rdx, rbx, frames, 1, &flags) != 1)
		return 0;
	if (!*callee) /* a builtin with PC its link is its own sample still (vm_top) */
		return frames[0].kind != LP_FRAME_LFUNC &&
		       !(frames[0].kind == LP_FRAME_FFUNC && rbx == link);
	*callee = frames[0].kind == LP_FRAME_LFUNC;
	return 1;
}

/*
** The sample is of the code vm_link led to, at base: its frames from there, under the
** callee being entered when given (a Lua function, at its first line), the sample's state
** the top frame's (an assembler or C builtin: FFUNC; a C function: CFUNC). C code's
** frames (LINK_C) go under the C frame before the entry's, which is at the stack pointer
** sp until vm_leave_cp unlinks it: walked under the entry's, the lines below a C entry
** came from the wrong SAVE_PC. Not a coroutine's first C frame, by which the walk finds
** its resumer. 1 when the frames were taken, else 0 with none.
*/
static int link_sample(struct agent_sample *s, const struct lp_lj_thread *t, uint64_t sp,
		       int kind, uint64_t base, const struct lp_lj_frame *callee, int mode)
{
	struct lp_lj_thread c = *t;
	uint64_t cf = t->cframe & LP_LJ_CFRAME_RAWMASK, prev;
	unsigned flags;
	if (kind == LINK_C && cf == sp && lp_mem_u64(&mem, cf + vm.lay->cf_prev, &prev) == 0 &&
	    (prev & LP_LJ_CFRAME_RAWMASK))
		c.cframe = prev;
	uint8_t top = kind == LINK_PCALL ||
				      (lp_lj_walk(&vm, &mem, &c, base, 0, frames, 1, &flags) == 1 &&
				       frames[0].kind == LP_FRAME_FFUNC)
			      ? LP_VMST_FFUNC
			      : LP_VMST_CFUNC;
	if (callee && put_frames(s, callee, 1) != 0)
		return 0;
	if (!lua_stack_or_none(s, &c, base, 0, mode))
		return 0;
	s->vmstate = callee ? LP_VMST_LFUNC : top;
	return 1;
}

/*
** The sample of C code on top of a Lua frame (entry_over_lua, exit_over_lua), at the Lua
** frame at base: link_sample's. The entry's VM frame, at sp, runs no Lua frame yet or any
** more: it is left out of the host stack (agent_vm_omit_empty), as the VM's entry or exit
** around its C frame's link is (vm_edge), else the report took it for the Lua frame's entry
** and put that frame on top of the C code. The sample reads as one in that C code.
*/
static int over_lua_sample(struct agent_sample *s, const struct lp_lj_thread *t,
			   uint64_t sp, uint64_t base, int mode)
{
	if (!link_sample(s, t, sp, LINK_C, base, NULL, mode))
		return 0;
	if (nempty_cf < MAX_EMPTY)
		empty_cf[nempty_cf++] = sp;
	return 1;
}

/* Opcodes the same in every supported build (opcodes up to JMP are). */
#define BC_CAT   38
#define BC_UCLO  50
#define BC_FNEW  51
#define BC_CALLM 65 /* CALLM, CALL, CALLMT, CALLT, ITERC: the calls */
#define BC_ITERC 69
#define BC_RETM  73 /* RETM, RET, RET0, RET1: the returns */
#define BC_RET1  76

/* ip lies in the interpreter's handlers of opcodes first to last: the handlers are laid
 * out in opcode order, and the static part of the dispatch table (opcodes before FUNCF)
 * has their starts. */
static int in_handlers(uint64_t ip, unsigned first, unsigned last)
{
	uint64_t lo, hi, sdisp = vm.disp + 8 * (uint64_t)vm.lay->len_ddisp;
	return last + 1 < vm.lay->len_sdisp && lp_mem_u64(&mem, sdisp + 8 * first, &lo) == 0 &&
	       lp_mem_u64(&mem, sdisp + 8 * (last + 1), &hi) == 0 && ip > lo && ip < hi;
}

static int in_handler(uint64_t ip, unsigned op)
{
	return in_handlers(ip, op, op);
}

/*
** The Lua frames of a sample at a call or a metamethod's return that the walk from BASE
** (rdx) misplaces, in state INTERP or RECORD (the recorder's interpreter runs the same
** code): cont_edge's, and a Lua function called by ins_call with a Lua link (the call
** handlers', a callable object's __call, a C function's tail call) before the link's store
** (link_store_at), where the slot holds an older value, not to be walked: a number (a
** call's results left there) or another call's link, whose line the caller took (11 of 12
** samples at two(k)'s store in a function calling two(k), then one(k), had the caller at
** one(k)'s line, under breakpoints, static_luajit.sh's stalecall); the call instruction
** before PC gives the caller (calling_base). The caller's frames, at the call, under the
** function being called when it is a Lua one (at its first line). 1 when taken; else 0,
** with none.
*/
static int meta_call_frames(struct agent_sample *s, const struct lp_lj_thread *t,
			    uint64_t ip, uint64_t rdx, uint64_t rbx, int mode)
{
	uint64_t cbase, cpc;
	int callee;
	unsigned flags;
	if (cont_edge(t, ip, rdx, rbx, &cbase, &cpc, &callee)) {
		; /* frames[0] the metamethod's */
	} else if ((rbx & 3) == LP_LJ_FRAME_LUA && link_store_at(ip) == LINK_UNSTORED &&
		   (cbase = calling_base(t, rdx, rbx)) &&
		   lp_lj_walk(&vm, &mem, t, rdx, rbx, frames, 1, &flags) == 1 &&
		   frames[0].kind == LP_FRAME_LFUNC) {
		cpc = rbx;
		callee = 1;
	} else {
		return 0;
	}
	struct lp_lj_frame f = frames[0];
	if ((!callee || put_frames(s, &f, 1) == 0) && lua_stack(s, t, cbase, cpc, mode) == 0)
		return 1;
	s->nlua = 0; /* not read whole: as if not recognised */
	s->lua_truncated = 0;
	return 0;
}

/*
** The code from ip reloads BASE from L->base (`mov rdx, [rbp + base]`, RB = L) before it
** reads BASE: the interpreter back from a C call, which clobbered rdx, a caller-saved
** register, after syncing L->base (25 such sites in Debian's build: a builtin's C
** fallback, the meta handlers' calls, lj_gc_step...), or about to make such a call. BASE
** is L->base there. A sample right after the call of tonumber's fallback on a string, PC
** the builtin's link, had no Lua frame (0.15 % of a loop calling it from Lua or from C,
** JIT off).
** Before the reload, the code followed (up to 12 instructions, the fall-through of a
** conditional jump) may only compute in registers other than rbp, store PC in SAVE_PC,
** call and jump: a call's last steps, which put CARG3 (rdx) in place once L->base is
** stored (the meta handlers' `obj.x` through __index, `a + b` with __add: RB = L comes
** from CARG1, rdi, right before the call; BC_TNEW's sizes for lj_tab_new), the call, and
** what follows it up to the reload (string.upper's second call, lj_buf_tostr, and its jump
** to fff_resstr; BC_TNEW's jump back from lj_gc_step_fixtop), where RB = L may come from
** SAVE_L, read from the C frame at the stack pointer sp (vmeta_call, a callable object's
** call, cdata's included, after lj_meta_call: about half of the samples at its call's
** last steps and return had no Lua frame, under breakpoints). No such run reaches the
** reload from before the store of L->base, a store to memory. 0.05-0.06 % of the samples
** of cpu_trace_entry.sh's loop (JIT on, both builds), 1 % of a loop of `("x"):upper()` on
** luajit2 (0.04 % on Debian's luajit) and 0.45 % of a loop making tables (both, JIT off)
** were there with no Lua frame.
*/
static int reloads_base(const struct lp_lj_thread *t, uint64_t ip, uint64_t rbp, uint64_t rdi,
			uint64_t sp)
{
	uint8_t b[8];
	int rdi_known = 1;
	for (int n = 0; n < 12; n++) {
		if (!lp_lj_in_vm(&vm, ip) || lp_mem_read(&mem, ip, b, sizeof(b)) != 0)
			return 0;
		if (b[0] == 0x48 && b[1] == 0x8b && b[2] == 0x55 && b[3] == vm.lay->l_base &&
		    vm.lay->l_base < 0x80)
			return rbp == t->L;
		unsigned rex = (b[0] & 0xf0) == 0x40 ? b[0] : 0, len, dst = 16;
		const uint8_t *op = b + (rex != 0);
		if (b[0] == 0x48 && b[1] == 0x89 && b[2] == 0x5c && b[3] == 0x24 &&
		    b[4] == vm.lay->cf_pc && vm.lay->cf_pc < 0x80) { /* mov SAVE_PC, PC */
			len = 5;
		} else if (b[0] == 0x48 && b[1] == 0x8b && b[2] == 0x6c && b[3] == 0x24 &&
			   b[4] == vm.lay->cf_L && vm.lay->cf_L < 0x80) { /* mov L:RB, SAVE_L */
			if (lp_mem_u64(&mem, sp + vm.lay->cf_L, &rbp) != 0)
				return 0;
			ip += 5;
			continue;
		} else if (b[0] == 0xe8) { /* call rel32: rbp is callee-saved, rdi is not */
			len = 5;
			rdi_known = 0;
		} else if (b[0] == 0xe9 || b[0] == 0xeb) { /* jmp rel32, rel8 */
			int32_t rel = (int8_t)b[1];
			if (b[0] == 0xe9)
				memcpy(&rel, b + 1, sizeof(rel));
			ip += (b[0] == 0xe9 ? 5 : 2) + (uint64_t)(int64_t)rel;
			continue;
		} else if (b[0] >= 0x70 && b[0] <= 0x7f) { /* jcc rel8: falls through */
			len = 2;
		} else if (b[0] == 0x25 || b[0] == 0x3d) { /* and, cmp eax, imm32 */
			len = 5;
		} else if (b[0] >= 0xb8 && b[0] <= 0xbf) { /* mov r32, imm32 */
			len = 5;
			dst = b[0] & 7u;
		} else if ((op[0] == 0x89 || op[0] == 0x8b) && (op[1] & 0xc0) == 0xc0) {
			/* mov r, r */
			unsigned rm = (op[1] & 7u) | (rex & 1u) << 3,
				 reg = (op[1] >> 3 & 7u) | (rex & 4u) << 1;
			unsigned src = op[0] == 0x89 ? reg : rm;
			len = (rex != 0) + 2u;
			dst = op[0] == 0x89 ? rm : reg;
			if (dst == 5 && (rex & 8) && src == 7 && rdi_known) {
				rbp = rdi; /* L:RB = CARG1 */
				dst = 16;
			}
		} else if (op[0] == 0xc1 && (op[1] & 0xc0) == 0xc0) { /* shift r, imm8 */
			len = (rex != 0) + 3u;
			dst = (op[1] & 7u) | (rex & 1u) << 3;
		} else if (!rex && b[0] == 0x0f && (b[1] == 0xb6 || b[1] == 0xb7) &&
			   (b[2] & 0xc7) == 0x43) { /* movzx r32, [rbx + disp8]: PC_RD... */
			len = 4;
			dst = b[2] >> 3 & 7u;
		} else {
			return 0;
		}
		if (dst == 5)
			return 0; /* rbp overwritten: not RB = L at the reload */
		if (dst == 7)
			rdi_known = 0;
		ip += len;
	}
	return 0;
}

/*
** ip lies in a dispatch's first instructions, before its `add PC, 4`: PC (rbx) is then the
** instruction about to be dispatched, not one past the current one as everywhere else,
** and the walk's PC - 1 was the instruction before it, which after a taken branch did not
** run (2-4 % of the samples of a loop whose then-branch jumps over an else-branch that
** never runs were that else-line's, 10 kHz, JIT off, both builds). The caller adds 4, as
** the `add` does: the sample reads as one taken right after it (the dispatch's decoding
** of the other registers does not matter to the walk). Two sequences, the same in both
** supported builds: ins_next, at the end of every handler (82 sites), `mov eax, [rbx];
** movzx ecx, ah; movzx ebp, al; add rbx, 4`, and ins_callt, the call handlers' and the
** VM's calls' dispatch of the callee's first instruction, BASE already the callee's (9
** sites), `mov ecx, [rbx]; movzx ebp, cl; movzx ecx, ch; add rbx, 4`. Both load the
** instruction from [rbx]: PC there is the one being dispatched (a builtin's or C
** function's entry, for ins_callt, which builtin_runs_pc takes either way). ip is an
** instruction's start: one of the first four of a copy, 0, 2, 5 or 8 bytes in. The bytes
** are on ip's page, which reloads_base reads anyway.
*/
static int dispatching(uint64_t ip)
{
	static const uint8_t seq[2][12] = {
		{ 0x8b, 0x03, 0x0f, 0xb6, 0xcc, 0x0f, 0xb6, 0xe8, 0x48, 0x83, 0xc3, 0x04 },
		{ 0x8b, 0x0b, 0x0f, 0xb6, 0xe9, 0x0f, 0xb6, 0xcd, 0x48, 0x83, 0xc3, 0x04 },
	};
	static const unsigned at[] = { 0, 2, 5, 8 };
	uint8_t b[20]; /* from ip - 8: every k */
	if (!lp_lj_in_vm(&vm, ip - 8) || !lp_lj_in_vm(&vm, ip + 11) ||
	    lp_mem_read(&mem, ip - 8, b, sizeof(b)) != 0)
		return 0;
	for (unsigned i = 0; i < sizeof(at) / sizeof(at[0]); i++)
		for (unsigned j = 0; j < 2; j++)
			if (memcmp(b + 8 - at[i], seq[j], sizeof(seq[j])) == 0)
				return 1;
	return 0;
}

/*
** The interpreter's top frame in its own code (ip; BASE in rdx, PC in rbx): LP_VMST_LFUNC
** for a Lua function (inside a call's handler, or at ins_call's last steps elsewhere,
** link_store_at, between setting the callee's BASE and loading its PC, the callee with the
** PC still in the caller: at its first line, as the walker reports it), LP_VMST_FFUNC for
** a builtin running that PC, LP_VMST_INTERP between frames (while a return moves BASE the
** slot below it holds no function).
** A return stores its first result over the returning function's slot (BC_RET1, BC_RET,
** a builtin's), with PC already the frame's link: a function returned as a value (`return
** f`, `rawget(t, k)`) is no frame, although the walk finds one there that "runs" PC
** (3 % of the samples of a loop around such calls went to a function that never ran).
** So a Lua function outside the PC's bytecode is no frame outside a call's handler when PC
** is a return into a caller that its call instruction finds (calling_base: the sample is
** that caller's, returning()); elsewhere (a vararg frame's or a metamethod's return, PC
** another link) it still is, at its first line: the function returning, not a result.
** And a return's handler has no builtin frame at rdx.
*/
static int vm_top(const struct lp_lj_thread *t, uint64_t ip, uint64_t rdx, uint64_t rbx)
{
	unsigned flags;
	if (lp_lj_walk(&vm, &mem, t, rdx, rbx, frames, 1, &flags) != 1)
		return LP_VMST_INTERP;
	if (frames[0].kind == LP_FRAME_LFUNC)
		return !(frames[0].flags & LP_LJ_FR_LINEDEF) || in_handlers(ip, BC_CALLM, BC_ITERC) ||
				       link_store_at(ip) || !calling_base(t, rdx, rbx)
			       ? LP_VMST_LFUNC
			       : LP_VMST_INTERP;
	if (frames[0].kind == LP_FRAME_FFUNC && builtin_runs_pc(&frames[0], rdx, rbx) &&
	    !in_handlers(ip, BC_RETM, BC_RET1))
		return LP_VMST_FFUNC;
	return LP_VMST_INTERP;
}

/* A sample whose Lua frames go on the side (GC, the compiler, a trace exit): t's C frames,
 * and the innermost Lua frame for the compiler's protected calls to leave the host stack
 * (agent_vm_omit_empty). */
static void side_begin(const struct lp_lj_thread *t)
{
	add_cframes(t->cframe);
	empty_top = t->base;
	empty_stack = t->stack;
}

/* No Lua frame after all: the host stack only, through t's resumers' C frames. */
static void host_only(const struct lp_lj_thread *t)
{
	ncframes = 0;
	empty_top = 0;
	nempty_cf = 0;
	add_thread_cframes(*t);
}

/* The frame at base runs a Lua function whose bytecode holds pc (when proto is not 0, that
 * function's prototype is proto). */
static int frame_runs(const struct lp_lj_thread *t, uint64_t base, uint64_t pc, uint64_t proto)
{
	unsigned flags;
	return base > t->stack && lp_lj_walk(&vm, &mem, t, base, pc, frames, 1, &flags) == 1 &&
	       frames[0].kind == LP_FRAME_LFUNC && !(frames[0].flags & LP_LJ_FR_LINEDEF) &&
	       (!proto || frames[0].addr == proto);
}

/*
** The walk from BASE (rdx) failed: the frame there has no link yet.
** Inside BC_CALL between setting the callee's BASE (rdx) and storing its frame link: the
** link slot still holds an older value, so the walk from rdx stops there (about 1 % of
** the samples of an interpreted recursive fib at 1 kHz were dropped so). The caller is
** found from the call instruction before PC (rbx), as returning() finds it (calling_base).
** The sample is the callee at its first line, as vm_top has it once the link is stored,
** then the caller at the call. Only in those handlers (ip): elsewhere a link overwritten
** is a return's results moved down over the frame (a function returned first, its
** second result over the link), whose function slot is no callee.
** Else PC may be the link about to be stored (vm_link): pcall's, whose callee is left
** out, or a C frame's, the VM's entry from C, whose Lua callee goes on top of the C code's
** frames.
*/
static int unlinked_call(struct agent_sample *s, const struct lp_lj_thread *t, uint64_t ip,
			 uint64_t sp, uint64_t rdx, uint64_t rbx, int mode)
{
	unsigned flags;
	uint64_t to;
	int lua = s->vmstate == LP_VMST_LFUNC;
	uint64_t prev = lua && (in_handlers(ip, BC_CALLM, BC_ITERC) || link_store_at(ip))
				? calling_base(t, rdx, rbx)
				: 0;
	if (prev) {
		if (lp_lj_walk(&vm, &mem, t, rdx, rbx, frames, 1, &flags) != 1)
			return -1;
		struct lp_lj_frame callee = frames[0];
		if (put_frames(s, &callee, 1) != 0)
			return -1;
		return lua_stack(s, t, prev, rbx, mode);
	}
	int kind = vm_link(t, sp, rdx, rbx, 0, &to);
	if (kind == LINK_PCALL)
		return link_sample(s, t, sp, kind, to, NULL, mode) ? 0 : -1;
	if (kind != LINK_C || !lua || (rbx & 3) != LP_LJ_FRAME_C ||
	    lp_lj_walk(&vm, &mem, t, rdx, rbx, frames, 1, &flags) != 1 ||
	    frames[0].kind != LP_FRAME_LFUNC)
		return -1;
	struct lp_lj_frame callee = frames[0];
	return link_sample(s, t, sp, kind, to, &callee, mode) ? 0 : -1;
}

/*
** A trace exit (EXIT), in lj_trace_exit and the snapshot's restore it runs: J->parent and
** J->exitno name the snapshot, whose frames are all running (the exit restores each of
** them). L->base is the trace's base frame's until the restore has written every frame,
** then the innermost's, delta slots up. Which it is: the frame at L->base runs the base
** frame's PC (not restored yet: the snapshot's inlined frames go above it, from the
** snapshot), or runs the innermost function at its resume PC with the base frame delta
** slots down at the base PC (restored: every frame on the stack). Both (a function inlined
** into itself) or neither: host stack only, not a frame at another's line (which reading
** the resume PC the restore stores in its C frame showed, a review helper found). 1 when
** the Lua frames were taken.
*/
static int exit_sample(struct agent_sample *s, const struct lp_lj_thread *t, int mode)
{
	uint32_t traceno, exitno;
	uint64_t bpc, rpc;
	unsigned delta;
	int n;
	if (lp_lj_exit_no(&vm, &mem, &traceno, &exitno) != LP_LJ_OK || traceno == 0 ||
	    lp_lj_trace_read(&vm, &mem, traceno, &cur_trace) != LP_LJ_OK ||
	    (n = lp_lj_trace_exit_frames(&vm, &mem, &cur_trace, exitno, tfr,
					 LP_LJ_TRACE_MAX_INLINED, &bpc, &rpc, &delta)) < 0)
		return 0;
	uint64_t base = t->base, below = base - 8 * (uint64_t)delta;
	if (n == 0)
		return frame_runs(t, base, rpc, 0) && lua_stack_or_none(s, t, base, rpc, mode);
	int before = frame_runs(t, base, bpc, 0);
	int after = delta > 0 && below < base && frame_runs(t, base, rpc, tfr[0].pt) &&
		    frame_runs(t, below, bpc, 0);
	if (before == after)
		return 0;
	if (after)
		return lua_stack_or_none(s, t, base, rpc, mode);
	for (int k = 0; k < n; k++)
		put_inlined(&s->lua[s->nlua++], s, &tfr[k]);
	if (lua_stack(s, t, base, bpc, mode) != 0) {
		s->nlua = 0;
		s->lua_truncated = 0;
		return 0;
	}
	return 1;
}

/*
** The Lua frames of a sample in the interpreter's own code (ip in the VM's block), thread t
** running, from the registers gr: BASE (rdx), PC (rbx), RB (rbp) and the instants where
** they do not name the running frame (a call's or a return's steps, a metamethod's, a C
** call that clobbered BASE, pcall's...). State INTERP, and state RECORD outside the
** compiler's call, where the recorder's interpreter runs the same code with the same
** registers and stack. s->vmstate is set to the top frame's state: LFUNC, FFUNC or CFUNC,
** INTERP between frames (then no frame, or those of the code the instant leads to). stale:
** L->base and L->top were out of order, t's are not theirs (running_thread): the checks
** that need them are skipped. Returns 0, or -1 when the stack could not be read
** consistently.
*/
static int interp_sample(struct agent_sample *s, const struct lp_lj_thread *t,
			 const greg_t *gr, int stale, int mode)
{
	uint64_t ip = (uint64_t)gr[REG_RIP], sp = (uint64_t)gr[REG_RSP];
	uint64_t rdx = (uint64_t)gr[REG_RDX], rbx = (uint64_t)gr[REG_RBX];
	uint64_t rbp = (uint64_t)gr[REG_RBP], rdi = (uint64_t)gr[REG_RDI];
	uint64_t rcx = (uint64_t)gr[REG_RCX];
	if (mode == LUAPROF_SYSPROF_CALLGRAPH)
		add_cframes(t->cframe);
	if (dispatching(ip))
		rbx += 4;
	if (reloads_base(t, ip, rbp, rdi, sp))
		rdx = t->base;
	/* C code on top of a Lua frame entering the VM: its frames, as if sampled in it (that
	 * Lua frame at the line the interpreter saved before calling it). */
	if (!stale && entry_over_lua(t, sp, rdx, rbx, rcx)) {
		s->vmstate = LP_VMST_CFUNC;
		if (mode != LUAPROF_SYSPROF_DEFAULT)
			(void)over_lua_sample(s, t, sp, t->base, mode);
		return 0;
	}
	/* A metamethod's call or return where the walk from BASE misplaces it: the caller's
	 * frames, at the call (under a Lua function's, being called). */
	uint64_t cbase, cpc;
	int callee;
	if (!stale && (mode == LUAPROF_SYSPROF_DEFAULT
			       ? cont_edge(t, ip, rdx, rbx, &cbase, &cpc, &callee)
			       : meta_call_frames(s, t, ip, rdx, rbx, mode))) {
		s->vmstate = LP_VMST_LFUNC;
		return 0;
	}
	s->vmstate = vm_top(t, ip, rdx, rbx);
	if (s->vmstate == LP_VMST_INTERP) {
		/* An FFI callback's entry or exit, in the VM's block, keeps the CTState in PC
		 * with no BASE in rdx: its frames start at L->base as for the C code it calls
		 * (ffi_callback_glue); the sampled instruction is then the first VM frame of
		 * the host walk. */
		if (mode != LUAPROF_SYSPROF_DEFAULT && !stale) {
			helper_t = *t;
			uint8_t bst;
			uint64_t to;
			int kind;
			struct lp_lj_thread r;
			if (is_ctstate(rbx)) {
				helper_ip = ip;
				helper_rank = 1;
				(void)ffi_callback_glue(s, mode);
			} else if (returning(s, t, rdx, rbx, mode) ||
				   (c_call_edge(t, rdx, rbx, &to) &&
				    returning(s, t, rdx, to, mode))) {
				; /* the caller's frames, taken */
			} else if (runs_pc(rbp, rbx, &bst)) {
				/* Back from a C call that clobbered BASE (lj_tab_len for
				 * `#t`), before BASE is restored from rbp, where the
				 * interpreter saved it ("Save BASE"). */
				if (lua_stack_or_none(s, t, rbp, bst == LP_VMST_LFUNC ? rbx : 0,
						      mode))
					s->vmstate = bst;
			} else if ((in_handler(ip, BC_UCLO) || in_handler(ip, BC_FNEW) ||
				    in_handler(ip, BC_CAT)) &&
				   runs_pc(t->base, rbx, &bst) && bst == LP_VMST_LFUNC) {
				/* Around their C call, which clobbers BASE (rdx) before and
				 * after it: these handlers store BASE in L->base first and
				 * take it back from there (a closure-heavy loop lost 1 % of
				 * its samples to their Lua-less VM code). */
				if (lua_stack_or_none(s, t, t->base, rbx, mode))
					s->vmstate = bst;
			} else if (resume_results(t, sp, rdx, &to) &&
				   returning(s, t, rdx, to, mode)) {
				; /* the resumer's frames, at its call */
			} else if (switching(t, rdx, &to)) {
				/* A coroutine switch (lj_vm_resume's entry and exit, the
				 * resuming builtin before and after it): cur_L's frames start
				 * at the builtin's. */
				if (lua_stack_or_none(s, t, to, 0, mode))
					s->vmstate = LP_VMST_FFUNC;
			} else if (starting(t, &r)) {
				/* The coroutine's frames, none, then the resumer's (lua_stack
				 * notes its C frames for the host walk): its only, for the
				 * leaf. */
				if (lua_stack_or_none(s, mode == LUAPROF_SYSPROF_CALLGRAPH ? t : &r,
						      0, 0, mode))
					s->vmstate = LP_VMST_FFUNC;
			} else if ((kind = vm_link(t, sp, rdx, rbx, 0, &to)) != LINK_NONE) {
				/* pcall's, or the C code that entered the VM or that it returns
				 * to, as if sampled in it. */
				(void)link_sample(s, t, sp, kind, to, NULL, mode);
			}
		}
		return 0;
	}
	if (mode == LUAPROF_SYSPROF_DEFAULT)
		return 0;
	uint64_t leaf = s->vmstate == LP_VMST_LFUNC ? cont_caller_pc(t, rdx, rbx, rbp) : 0;
	if (lua_stack(s, t, rdx, leaf, mode) == 0)
		return 0;
	/*
	** A meta handler back from its C call (lj_meta_tget for `obj.x` through __index...)
	** before it reloads BASE from L->base, which it stored before the call: rdx is the
	** callee's leftover, PC the caller's (luajit2 dropped 0.1 % of such a loop's samples
	** there, JIT off).
	*/
	size_t failed = s->nlua;
	uint8_t bst;
	helper_t = *t;
	if (t->base != rdx && runs_pc(t->base, rbx, &bst) && bst == LP_VMST_LFUNC) {
		s->nlua = 0;
		s->lua_truncated = 0;
		if (lua_stack(s, t, t->base, rbx, mode) == 0) {
			s->vmstate = bst;
			return 0;
		}
		s->nlua = failed;
	}
	return s->nlua ? -1 : unlinked_call(s, t, ip, sp, rdx, rbx, mode);
}

int agent_vm_sample(const ucontext_t *uc, int mode, struct agent_sample *s)
{
	/* Objects found late by an earlier sample are not trusted here (agent_in_object). */
	agent_objects_late_reset();
	s->nsyms = 0; /* nothing queued: a refused sample has no symbols to forget */
	s->name_used = 0;
	s->ncodes = 0;
	if (!attached)
		return -1;
	plain_reads = 0;
	cache_reset();
	const greg_t *gr = uc->uc_mcontext.gregs;
	uint64_t sp = (uint64_t)gr[REG_RSP];
	/* Only when the thread runs on that stack (not a host's own fiber stack). */
	stack_floor = agent_objects_on_stack(sp) && sp >= 128 ? (sp - 128) & ~7ull : 0;
	uint64_t ip = (uint64_t)gr[REG_RIP], rdx = (uint64_t)gr[REG_RDX];
	uint64_t rbx = (uint64_t)gr[REG_RBX];
	s->nlua = 0;
	s->nsyms = 0;
	if (s->name_room > AGENT_NAMES_MAX)
		s->name_room = AGENT_NAMES_MAX;
	s->ncodes = 0;
	s->lua_truncated = 0;
	s->elsewhere = 0;
	s->traceno = s->trace_proto = s->trace_line = 0;
	ncframes = 0;
	have_trace = 0;
	walk_reset();

	int32_t raw;
	uint32_t traceno = 0;
	if (lp_lj_vmstate(&vm, &mem, &raw) != LP_LJ_OK)
		return -1;
	int st = lp_lj_vmstate_map(raw, &traceno);
	if (st < 0)
		return -1;
	s->vmstate = (uint8_t)st;
	/*
	** Entering a trace: the interpreter (BC_JLOOP, which the other J instructions, the
	** J function headers and trace stitching jump to) jumps to the trace's machine code
	** with vmstate still INTERP; the trace's head adjusts the stack pointer, then stores
	** its number there. A sample at those first instructions (at the entry, where a
	** sample often lands: 5-10 % of the TRACE samples of a program whose hot metamethods,
	** closures and pcall'd functions are function traces) is the trace's, its Lua frames
	** below it from jit_base, which the interpreter stored before the jump: else it was
	** left INTERP with the host stack only, the trace's frame right on the host's C
	** frames. Trace code is anonymous memory: neither the VM's block nor an object's.
	** The host walk from there scanned the traces for it all the same (agent_vm_frame).
	*/
	if (st == LP_VMST_INTERP && !lp_lj_in_vm(&vm, ip) && !agent_in_object(ip) &&
	    lp_lj_trace_find(&vm, &mem, ip, &cur_trace) == LP_LJ_OK) {
		st = LP_VMST_TRACE;
		traceno = cur_trace.traceno;
		s->vmstate = (uint8_t)st;
	}
	/*
	** Leaving a trace for the interpreter (lj_vm_exit_interp): jit_base is cleared one
	** instruction before vmstate is set to INTERP, and samples land on that instruction
	** more than its length says (4-8 of ~680 trace samples of a program of function
	** traces at 5 kHz, right after the store): BASE and PC are the interpreter's there.
	** Such a sample was the trace's with no Lua frame (jit_base 0); it is the
	** interpreter's. Elsewhere in the VM's code, a trace's number goes with jit_base set
	** (the exit handler stores EXIT before clearing it).
	*/
	uint64_t jb_exit;
	if (st == LP_VMST_TRACE && lp_lj_in_vm(&vm, ip) &&
	    lp_lj_jit_base(&vm, &mem, &jb_exit) == LP_LJ_OK && jb_exit == 0) {
		st = LP_VMST_INTERP;
		s->vmstate = (uint8_t)st;
	}
	/*
	** A trace's number stays in vmstate while it calls C: FFI calls, library functions,
	** the VM's C helpers. With the instruction pointer in a loaded object's code (not in
	** trace machine code, which is anonymous memory, nor in the interpreter's block) the
	** sample is C code called from Lua: CFUNC, with the Lua frames below the trace.
	*/
	int trace_c = st == LP_VMST_TRACE && !lp_lj_in_vm(&vm, ip) && agent_in_object(ip);
	if (trace_c)
		s->vmstate = st = LP_VMST_CFUNC;
	/* Each page read is a system call: read no more than the mode needs. */
	if (mode == LUAPROF_SYSPROF_DEFAULT && (st == LP_VMST_TRACE || trace_c)) {
		s->traceno = traceno;
		return 0;
	}
	if (mode != LUAPROF_SYSPROF_CALLGRAPH && st != LP_VMST_INTERP && st != LP_VMST_CFUNC &&
	    st != LP_VMST_TRACE)
		return 0;
	uint64_t L = 0;
	struct lp_lj_thread t;
	int stale = 0;
	int have_t = lp_lj_cur_L(&vm, &mem, &L) == LP_LJ_OK && L &&
		     running_thread(L, &t, &stale) == LP_LJ_OK;
	/* cur_L runs nothing (no C frame): it yielded, or died, back into a C function that
	 * resumed it with lua_resume and goes on, with vmstate still INTERP from the resume's
	 * VM entry (C after a C function's lua_yield). When the chain of running coroutines
	 * names that function's thread (lp_lj_c_running), the sample is that function's. */
	if (have_t && !stale && !t.cframe && L != vm.mainL &&
	    (st == LP_VMST_CFUNC || (st == LP_VMST_INTERP && !lp_lj_in_vm(&vm, ip)))) {
		struct lp_lj_thread r;
		uint64_t fn;
		if (lp_lj_c_running(&vm, &mem, L, &r, &fn) == LP_LJ_OK) {
			t = r;
			st = LP_VMST_CFUNC;
		}
	}
	s->vmstate = (uint8_t)st;
	/*
	** The running state's C frame is on another thread's stack: a host that made and
	** started the profile on this thread runs the state on another (wrk calls a script's
	** init on its main thread, then each thread's requests on that thread). This thread
	** runs no Lua code: its host stack alone, as C code, counted (meta lua_elsewhere).
	** Its Lua frames were the other thread's, put above this thread's first frame. Only
	** where this thread is on its own stack (stack_floor), not a host's fiber's.
	*/
	uint64_t cf = have_t ? t.cframe & LP_LJ_CFRAME_RAWMASK : 0;
	if (cf && stack_floor && !agent_objects_stack_has(sp, cf, 8)) {
		s->elsewhere = 1;
		s->vmstate = LP_VMST_CFUNC;
		return 0;
	}

	if (st == LP_VMST_TRACE) {
		s->traceno = traceno;
		return trace_sample(s, &t, have_t, ip, sp, mode);
	}
	if (trace_c)
		return trace_c_sample(s, &t, have_t, traceno, mode);
	if (st == LP_VMST_INTERP && have_t && lp_lj_in_vm(&vm, ip)) {
		/* Executing bytecode (LFUNC), an assembler builtin (FFUNC), or between frames
		 * (INTERP). */
		return interp_sample(s, &t, gr, stale, mode);
	}
	if (st == LP_VMST_CFUNC) {
		if (!have_t || stale)
			return -1; /* a C function runs: base and top must be synced */
		/* cur_L with no C frame: suspended by a C function's lua_yield (ngx.sleep,
		 * cosockets), or dead by an error; the host resumed it and went on in its own
		 * code, vmstate still naming that C function. No Lua code runs: host stack
		 * only (its frames were put under the coroutine's Lua frames). Not its status:
		 * xpcall's handler runs with LUA_ERRERR, on a C frame. */
		if (!t.cframe) {
			/* Unless the coroutine is dying by an error inside the builtin that
			 * resumed it (LuaJIT's unwinder cleared its C frame before the C++
			 * unwinder is done): its frames, then that builtin's thread's (its C
			 * frames now, for the host walk; lua_stack takes its Lua frames). */
			struct lp_lj_thread r;
			if (L == vm.mainL || lp_lj_chain_resumer(&vm, &mem, L, &r) != LP_LJ_OK)
				return 0;
			if (mode == LUAPROF_SYSPROF_CALLGRAPH)
				add_thread_cframes(r);
			if (mode == LUAPROF_SYSPROF_DEFAULT)
				return 0;
			(void)lua_stack_or_none(s, &t, 0, 0, mode);
			return 0;
		}
		if (mode == LUAPROF_SYSPROF_CALLGRAPH)
			add_cframes(t.cframe);
		/* The VM back to C code on top of a Lua frame, or entered from it before
		 * setting state INTERP: that code's frames. */
		uint64_t over = lp_lj_in_vm(&vm, ip) ? exit_over_lua(&t, sp, rdx, rbx) : 0;
		if (!over && lp_lj_in_vm(&vm, ip) &&
		    entry_over_lua(&t, sp, rdx, rbx, (uint64_t)gr[REG_RCX]))
			over = t.base;
		if (over) {
			if (mode != LUAPROF_SYSPROF_DEFAULT)
				(void)over_lua_sample(s, &t, sp, over, mode);
			return 0;
		}
		/* L->base is synced: the innermost Lua frame, for agent_vm_frame. */
		empty_top = t.base;
		empty_stack = t.stack;
		unsigned flags;
		if (lp_lj_walk(&vm, &mem, &t, 0, 0, frames, 1, &flags) == 1 &&
		    frames[0].kind == LP_FRAME_FFUNC)
			s->vmstate = LP_VMST_FFUNC;
		if (mode == LUAPROF_SYSPROF_DEFAULT)
			return 0;
		if (lua_stack(s, &t, 0, 0, mode) == 0)
			return 0;
		/* The VM returning to C from a Lua function or builtin that C called (vm_return,
		 * its state C already): L->base may still be the callee's, if it synced it (a
		 * builtin's fallback, tonumber from lpeg), while the results move down over the
		 * callee's function slot; PC (rbx) holds the link, then the caller's base. That
		 * frame, the C code's below L->base, is the sample's (vm_link; they were dropped:
		 * 1 % of an lpeg loop calling tonumber as a capture function). */
		s->nlua = 0;
		s->lua_truncated = 0;
		uint64_t to;
		int kind = lp_lj_in_vm(&vm, ip) ? vm_link(&t, sp, rdx, rbx, LINK_AT_C, &to) : LINK_NONE;
		return kind == LINK_C && link_sample(s, &t, sp, kind, to, NULL, mode) ? 0 : -1;
	}
	/*
	** The collector: L->base is synced for it (its callers in the interpreter and the
	** builtins store BASE first; from a trace, lj_gc_step_jit sets it from jit_base), so
	** the Lua frames that ran into the step are walked as a C function's are. They reach
	** the stream on the side (sysprof.c: ljp v2's GC sample has no Lua stack). The
	** innermost frame's line is the C frame's SAVE_PC, exact from the interpreter; when
	** a trace ran the step, agent_vm_after_walk corrects it after the host walk.
	*/
	if (st == LP_VMST_GC && mode == LUAPROF_SYSPROF_CALLGRAPH && have_t && !stale) {
		uint64_t jb = 0;
		side_begin(&t);
		gc_in_trace = lp_lj_jit_base(&vm, &mem, &jb) == LP_LJ_OK && jb != 0;
		if (!lua_stack_or_none(s, &t, 0, 0, mode))
			host_only(&t);
		return 0;
	}
	/*
	** The JIT compiler (RECORD, OPT, ASM) in its protected call: lj_trace_ins calls it by
	** lj_vm_cpcall from the interpreter's hook or hot counter, which synced L->base, and
	** the loop optimizer in one more. Their C frames (NRES < 0) are above the Lua frames,
	** whose innermost is at the instruction being compiled (the walk steps over those
	** frames to the interpreter's SAVE_PC); the calls' entries leave the host stack
	** (agent_vm_omit_empty), so that the compiler's code is shown on top of the Lua line.
	** The frames reach the stream on the side, as the collector's do. In state RECORD
	** outside such a call the interpreter runs the recorded bytecode: below.
	*/
	if (LP_VMST_IS_COMPILER(st) && mode == LUAPROF_SYSPROF_CALLGRAPH && have_t && !stale && in_compiler(&t)) {
		side_begin(&t);
		if (!lua_stack_or_none(s, &t, 0, 0, mode))
			host_only(&t);
		return 0;
	}
	/* A trace exit restoring its frames (exit_sample); the handler's own assembler code,
	 * before it stores L->base: host stack only. */
	if (st == LP_VMST_EXIT && mode == LUAPROF_SYSPROF_CALLGRAPH && have_t && !stale &&
	    !lp_lj_in_vm(&vm, ip)) {
		side_begin(&t);
		if (!exit_sample(s, &t, mode))
			host_only(&t);
		return 0;
	}
	/*
	** State RECORD outside the compiler's call: the interpreter runs the bytecode being
	** recorded (lj_dispatch_ins records an instruction, then the interpreter executes
	** it, with vmstate left at RECORD), its BASE in a register and its slow paths in C,
	** as in state INTERP: its Lua frames are taken the same way, the VM's code here (a
	** base between frames: host stack only), the C code it calls after the host walk
	** (agent_vm_sample_helper). The sample stays RECORD, the recording's cost, its Lua
	** frames on the side as the compiler's. A compile-heavy program (a linter run once
	** over many files) spent 4 % of its samples there, host stack only. Every instant of
	** state INTERP's runs here too (the recorder follows metamethods, pcall, returns, C
	** calls): interp_sample, the same function, places them (under breakpoints,
	** static_luajit.sh's RECORD runs: 1-28 of 60 samples at ins_call's store and
	** lj_vmeta_call's call had no Lua frame, and 19 at lj_vm_call_dispatch_f's first
	** instruction had the caller at its first line, when only some of INTERP's checks
	** ran here; 13-39 of 40-80 at pcall's call, a return's result moves, `#t`'s C call,
	** a call's stale link slot and a C function's call had none, before interp_sample).
	** A sample it finds no frame for, or cannot read, is the host stack only.
	*/
	if (st == LP_VMST_RECORD && mode == LUAPROF_SYSPROF_CALLGRAPH && have_t && !stale &&
	    lp_lj_in_vm(&vm, ip)) {
		if (interp_sample(s, &t, gr, 0, mode) != 0 || s->nlua == 0) {
			s->nlua = 0;
			s->lua_truncated = 0;
			host_only(&t);
		}
		s->vmstate = LP_VMST_RECORD;
		return 0;
	}
	/* INTERP outside bytecode, EXIT, and GC or the compiler when not taken above (L
	 * mode, a stale thread): host stack only. In a
	 * coroutine that stack goes on through its resumers' C frames. C code the
	 * interpreter called may get its Lua frames after the host walk. */
	if (mode == LUAPROF_SYSPROF_CALLGRAPH && have_t)
		add_thread_cframes(t);
	if (mode != LUAPROF_SYSPROF_DEFAULT && have_t &&
	    (st == LP_VMST_INTERP || (st == LP_VMST_RECORD && mode == LUAPROF_SYSPROF_CALLGRAPH)) &&
	    !stale && !lp_lj_in_vm(&vm, ip) && agent_in_object(ip)) {
		helper_pending = 1;
		helper_t = t;
	}
	return 0;
}

int agent_vm_helper_pending(void)
{
	return helper_pending;
}

/*
** C code the interpreter called, sampled in state INTERP: the slow paths of bytecodes and
** builtins (lj_meta_*, lj_tab_*, lj_str_new, lj_buf_*...), most of an interpreted
** program's time, and C code an FFI callback returned into (the callback's entry leaves
** INTERP behind). Its Lua frames start at L->base only if the interpreter stored its BASE
** there for this call, which many calls do not (table reads, lengths, barriers, libm):
** L->base then names an older frame, often a builtin that has returned since. The host
** walk gives the interpreter's callee-saved registers at the VM frame the code returns
** to: PC (rbx), and rbp, where the calls that do not store BASE mostly keep it ("Save
** BASE"), and the stack pointer, which must be L's innermost C frame (the interpreter's
** level). A base is taken when the frame there runs that PC:
**   - L->base: a Lua function with the PC in its bytecode, confirmed by the C frame's
**     SAVE_PC (stored with BASE) or by rbp holding the same base; or a builtin or C
**     function whose entry the PC is, or that was called from it (builtins load their
**     caller's PC before their slow paths: tostring, next, rawget...);
**   - rbp, the same without the confirmation. The interpreter overwrites rbp on every
**     call, so a base left there belongs to the running frame.
** The sample is then LFUNC, FFUNC or CFUNC, as Tarantool's VM, which keeps the state
** through such calls, records it. Anything else stays host-only (INTERP).
*/
static int runs_pc(uint64_t base, uint64_t pc, uint8_t *st)
{
	unsigned flags;
	if (base < helper_t.stack + 16 || base > helper_t.stack_end || (base & 7) ||
	    lp_lj_walk(&vm, &mem, &helper_t, base, pc, frames, 1, &flags) != 1)
		return 0;
	const struct lp_lj_frame *f = &frames[0];
	if (f->kind == LP_FRAME_LFUNC) {
		if (f->flags & LP_LJ_FR_LINEDEF)
			return 0;
		*st = LP_VMST_LFUNC;
		return 1;
	}
	if (!builtin_runs_pc(f, base, pc))
		return 0;
	*st = f->kind == LP_FRAME_FFUNC ? LP_VMST_FFUNC : LP_VMST_CFUNC;
	return 1;
}

/* p is the VM's CTState (lj_ctype.h: its lua_State and global_State at +16 and +24 on
 * x86-64, the same since the FFI came), which the FFI callback's entry and exit keep in
 * the PC register. */
static int is_ctstate(uint64_t p)
{
	uint64_t v[2];
	return p && !(p & 7) && lp_mem_read(&mem, p + 16, v, sizeof(v)) == 0 &&
	       v[0] == helper_t.L && v[1] == vm.g;
}

/*
** C code called by an FFI callback's entry or exit in the VM's block (lj_ccallback_enter
** and _leave, the conversions of arguments and result), with the CTState in the PC
** register (is_ctstate). L->base is the frame that called the C function
** (ffi.meta.__call) until the callback's frame is set up, and again once it is taken down;
** the callback's entry then runs no Lua frame, and its return address leaves the host
** stack (agent_vm_omit_empty). With the callback's frame already there, the frames start
** at it. In between, while leaving, L->base is briefly L->top: no frame there, host-only.
*/
static int ffi_callback_glue(struct agent_sample *s, int mode)
{
	unsigned flags;
	if (lp_lj_walk(&vm, &mem, &helper_t, 0, 0, frames, 1, &flags) != 1)
		return 0;
	uint8_t st = frames[0].kind == LP_FRAME_LFUNC ? LP_VMST_LFUNC :
		     frames[0].kind == LP_FRAME_FFUNC ? LP_VMST_FFUNC : LP_VMST_CFUNC;
	int inside = (frames[0].flags & LP_LJ_FR_FFICB) != 0;
	if (!lua_stack_or_none(s, &helper_t, 0, 0, mode))
		return 0;
	if (!inside) {
		nempty = 1;
		empty_ip[0] = helper_ip;
		empty_rank[0] = helper_rank;
	}
	s->vmstate = st;
	return 1;
}

int agent_vm_sample_helper(struct agent_sample *s, int mode)
{
	if (!helper_pending || !helper_pc_known)
		return 0;
	helper_pending = 0;
	uint64_t pc = helper_pc, bp = helper_bp, save_pc = 0, base = helper_t.base;
	uint64_t cf = helper_t.cframe & LP_LJ_CFRAME_RAWMASK;
	uint8_t st = 0;
	/* Called by VM code running on L's innermost C frame: the interpreter, or an FFI
	 * callback's entry or exit while its C frame is linked (not VM code below another
	 * VM entry). */
	if (!cf || helper_sp != cf || lp_mem_u64(&mem, cf + vm.lay->cf_pc, &save_pc) != 0)
		return 0;
	/* BC_UCLO stores BASE but not PC before lj_func_closeuv (a closure's upvalues closed
	 * as its block ends): returning into its handler confirms L->base (1 % of a
	 * closure-heavy loop's samples had no Lua frame). */
	if (!(runs_pc(base, pc, &st) &&
	      (st != LP_VMST_LFUNC || pc == save_pc || bp == base ||
	       in_handler(helper_ip, BC_UCLO)))) {
		if (is_ctstate(pc))
			return ffi_callback_glue(s, mode);
		base = bp;
		if (bp == helper_t.base || !runs_pc(bp, pc, &st)) {
			/* A builtin's C fallback (tonumber on a string) once its result is
			 * over its function slot: called from Lua, PC is the caller's, whose
			 * frame the call instruction gives (3.4 % of a loop calling it had
			 * no Lua frame); the sample is the builtin's, under its caller's
			 * line. Called from C, PC is its link (2 % of a C module's loop
			 * calling it had no Lua frame): the C code's. */
			uint64_t to;
			uint8_t was = s->vmstate;
			if (returning(s, &helper_t, helper_t.base, pc, mode)) {
				s->vmstate = was == LP_VMST_RECORD ? was : LP_VMST_FFUNC;
				return 1;
			}
			int kind = vm_link(&helper_t, helper_sp, helper_t.base, pc, LINK_BY_PC, &to);
			if (kind == LINK_NONE ||
			    !link_sample(s, &helper_t, helper_sp, kind, to, NULL, mode))
				return 0;
			if (was == LP_VMST_RECORD)
				s->vmstate = was;
			return 1;
		}
	}
	if (!lua_stack_or_none(s, &helper_t, base, st == LP_VMST_LFUNC ? pc : 0, mode))
		return 0;
	if (s->vmstate != LP_VMST_RECORD) /* the recorder's time stays the recorder's */
		s->vmstate = st;
	return 1;
}

/*
** A GC sample's Lua frames are those of g->cur_L, which is not always the thread whose
** allocation ran the step: a C host that resumed a coroutine and, once it yielded,
** allocates on the main state leaves cur_L at the coroutine. So they are kept only when
** the collector runs under Lua code of that thread: the walk met the interpreter at one of
** its C frames, or the trace that ran the step. (Without the walk, as with a host's own
** backtracer, they are dropped.) A JIT compiler sample's, likewise: the walk meets the
** interpreter at the C frame of the compiler's protected call.
**
** The innermost frame of a GC sample whose step a trace ran is the trace's base frame, at
** the line its C frame's SAVE_PC was left at by the interpreter, long before: the line
** where the trace starts instead, as for C code a trace calls (trace_c_sample). The
** snapshot in effect at the call was tried: it names the line after the last guard, as
** wrong as often as right (string.format's calls in a loop went to the line above).
*/
void agent_vm_after_walk(struct agent_sample *s)
{
	struct lp_lj_proto p;
	int32_t line;
	/* The frames of the threads taken for the C code that resumed the sample's coroutine
	 * (hop by hop), from the first hop whose interpreter the walk did not come to. */
	unsigned confirmed = agent_vm_c_resumer_confirmed();
	for (unsigned h = confirmed; h < nhops; h++) {
		if (cres_nlua[h] != UINT_MAX && s->nlua > cres_nlua[h]) {
			s->nlua = cres_nlua[h];
			s->lua_truncated = cres_trunc[h];
			break;
		}
	}
	int placed = trace_c_inlined(s);
	/* The walk met a trace's frame: named after the trace (tcode), unless the sample
	 * named it already (a TRACE sample's, or C code's the trace called). */
	if (walk_trace_found && !(have_trace && walk_trace.addr == cur_trace.addr))
		need_trace(s, &walk_trace);
	int side = s->vmstate == LP_VMST_GC || LP_VMST_IS_COMPILER(s->vmstate) ||
		   s->vmstate == LP_VMST_EXIT;
	if (side && s->nlua > 0 && !own_vm_met && !(gc_in_trace && walk_trace_found)) {
		s->nlua = 0;
		s->lua_truncated = 0;
		return;
	}
	if (placed || !gc_in_trace || !walk_trace_found || s->vmstate != LP_VMST_GC || s->nlua == 0 ||
	    s->lua[0].type != LP_FRAME_LFUNC || s->lua[0].addr != walk_trace.startpt)
		return;
	if (lp_lj_proto_read(&vm, &mem, walk_trace.startpt, &p) == LP_LJ_OK &&
	    lp_lj_pc_line(&vm, &mem, &p, walk_trace.startpc + 4, &line) == LP_LJ_OK && line > 0)
		s->lua[0].line = (uint64_t)line;
}

/* -- Native frames the VM owns -------------------------------------------------------------- */

/* A copied frame in VM code away from every known C frame is another thread's interpreter
 * (a coroutine that C resumed in between, say): the walk it was copied from went through
 * it, this one could not have. */
void agent_vm_frames_copied(const uint64_t *ips, const uint64_t *sps, size_t n)
{
	for (size_t i = 0; nhops && i < n; i++) {
		if (!lp_lj_in_vm(&vm, ips[i]))
			continue;
		if (!is_cframe(sps[i]) && !is_cframe(sps[i] + 8))
			cres_bad = 1;
		note_hop(sps[i]);
	}
}

int agent_vm_walk_trace(struct lp_lj_trace *t)
{
	if (!walk_trace_found)
		return 0;
	*t = walk_trace;
	return 1;
}

unsigned agent_vm_c_resumer_confirmed(void)
{
	unsigned h = 0;
	while (!cres_bad && h < nhops && (cres_met & 1u << h))
		h++;
	return h;
}

/*
** lj_vm_ffi_call's unwind entry (the VM's own, made with it) says CFA = rbp + 16 from its
** first instruction to its last: wrong before its `push rbp; mov rbp, rsp`, where rbp is
** still the caller's, and at its `ret` after `leave`. A sample there had its host walk
** take the caller's rbp and lose the stack below the call (0.46 % of an interpreted loop
** of FFI calls at 10 kHz had no host frame under lj_vm_ffi_call; 1 sample in 233 failed
** nginx_lua.sh once). At those instructions of the sample's own frame (regs exact) the
** return address is taken from the stack here: 1 when regs were stepped, else 0. At a
** `ret` the return address is at rsp in any function; the bytes are the VM's own code,
** lj_vm_ffi_call's 160 and the few after it.
*/
int agent_vm_ffi_call_edge(uint64_t ip, uint64_t *regs)
{
	uint64_t sp = regs[AGENT_RSP], skip, ra;
	uint8_t op;
	if (!attached || ip < vm.vm_hi || ip >= vm.vm_hi + 256)
		return 0;
	if (ip == vm.vm_hi)
		skip = 0; /* push rbp */
	else if (ip == vm.vm_hi + 1)
		skip = 8; /* mov rbp, rsp: the caller's rbp pushed, rbp itself still it */
	else if (lp_mem_u8(&mem, ip, &op) == 0 && op == 0xc3)
		skip = 0; /* ret */
	else
		return 0;
	if (lp_mem_u64(&mem, sp + skip, &ra) != 0)
		return 0;
	regs[AGENT_RIP] = ra;
	regs[AGENT_RSP] = sp + skip + 8;
	return 1;
}

int agent_vm_frame_special(uint64_t ip, int in_object)
{
	return attached && (!in_object || lp_lj_in_vm(&vm, ip));
}

/* C frame cf is a protected call of C (NRES < 0, holding -savestack of L->top at entry)
 * made at or above the frame whose base is base, in the thread whose stack is stack. */
static int cpcall_above(uint64_t cf, uint64_t base, uint64_t stack)
{
	int32_t nres;
	return lp_mem_read(&mem, cf + vm.lay->cf_nres, &nres, sizeof(nres)) == 0 && nres < 0 &&
	       base <= stack + (uint64_t)(-(int64_t)nres);
}

/*
** The VM entry whose C frame is cf runs no Lua frame of the sample: a protected call of C
** (lj_vm_cpcall, NRES < 0 holding -savestack of L->top at entry) made above the innermost
** Lua frame, such as a builtin's own (ffi.cast, ffi.new and ffi.typeof parse a C type under
** one). Its return address in the host stack would look like the entry of a Lua segment
** to the report, which then spliced the sample's Lua frames there, inside the builtin.
*/
static int empty_entry(uint64_t cf)
{
	return cpcall_above(cf, empty_top, empty_stack);
}

/* The entry at a VM frame of the host walk (its return address ip, its rank among the VM
 * frames) is left out: kept in rank order, once. */
static void add_empty(uint64_t ip, unsigned rank)
{
	unsigned k = 0;
	while (k < nempty && empty_rank[k] < rank)
		k++;
	if (nempty == MAX_EMPTY || (k < nempty && empty_rank[k] == rank))
		return;
	memmove(empty_ip + k + 1, empty_ip + k, (nempty - k) * sizeof(*empty_ip));
	memmove(empty_rank + k + 1, empty_rank + k, (nempty - k) * sizeof(*empty_rank));
	empty_ip[k] = ip;
	empty_rank[k] = rank;
	nempty++;
}

size_t agent_vm_omit_empty(uint64_t *pcs, size_t n)
{
	unsigned seen = 0, k = 0;
	/* The entries the Lua walks found (note_empty_cframes), which may come after the host
	 * walk (C code the interpreter called: agent_vm_sample_helper). */
	for (unsigned i = 0; i < nvmf; i++)
		for (unsigned j = 0; j < nempty_cf; j++)
			if (vmf_sp[i] == empty_cf[j])
				add_empty(vmf_ip[i], vmf_rank[i]);
	for (size_t i = 0; i < n && k < nempty;) {
		if (!lp_lj_in_vm(&vm, pcs[i]) || ++seen != empty_rank[k]) {
			i++;
			continue;
		}
		if (pcs[i] != empty_ip[k])
			return n; /* not the walk the entries were found in */
		memmove(pcs + i, pcs + i + 1, (n - i - 1) * sizeof(*pcs));
		n--;
		k++;
	}
	return n;
}

int agent_vm_expects_empty(void)
{
	if (nempty_cf)
		return 1;
	for (unsigned i = 0; empty_top && i < ncframes; i++)
		if (empty_entry(cframes[i]))
			return 1;
	return 0;
}

/* The innermost C frame of the thread known above sp (within 4 KiB), or 0. */
static uint64_t cframe_above(uint64_t sp)
{
	uint64_t above = 0;
	for (unsigned i = 0; i < ncframes; i++)
		if (cframes[i] > sp && (!above || cframes[i] < above))
			above = cframes[i];
	return above && above - sp < 4096 ? above : 0;
}

/*
** The VM's entries from C (vm_call, vm_pcall, vm_cpcall, vm_resume, an FFI callback's) build
** their C frame with pushes and a `sub rsp`, then link it into L->cframe; their exits unlink
** it, then `add rsp`, pops and `ret`. Between the first push and the link, and between the
** unlink and the ret, the stack pointer is no C frame the thread lists, and the VM's unwind
** rule (CFA = sp + CFRAME_SIZE, the whole frame) does not hold before the `sub` or after the
** `add`: those samples (a C module calling Lua back: 5 % of such a loop's) were cut, or
** stepped to an outer C frame of the interpreter, past the C code between. The code from ip
** on says which it is, read as the CPU will run it: straight-line moves, arithmetic on other
** registers and jumps, up to a store of rsp (or of a register holding rsp plus a constant,
** or any store into L->cframe, which rbp holds there): the frame is at sp, whole; pushes
** and a `sub rsp` before that: the frame is that much lower, the callee-saved registers
** still the caller's; an `add rsp`, pops and a `ret`: the return, emulated. Any other
** instruction, or one that changes rsp otherwise, and the step is left to the caller.
** Returns 0: whole frame at sp (the VM's rule applies); 1: regs stepped; -1: not an edge.
*/
static int vm_edge(uint64_t ip, uint64_t *regs_io)
{
	static const uint8_t enc2agent[16] = {
		AGENT_RAX, AGENT_RCX, AGENT_RDX, AGENT_RBX, AGENT_RSP, AGENT_RBP, AGENT_RSI, AGENT_RDI,
		AGENT_R8, AGENT_R9, AGENT_R10, AGENT_R11, AGENT_R12, AGENT_R13, AGENT_R14, AGENT_R15,
	};
	uint64_t regs[AGENT_NREGS];
	memcpy(regs, regs_io, sizeof(regs));
	uint64_t sp = regs[AGENT_RSP], at = sp, pc = ip;
	unsigned pushes = 0, alias = 16; /* a register holding rsp + constant (16: none) */
	int64_t sub = -1;
	int leaving = 0; /* past the epilogue's add, or at its pops: only pops and ret follow */
	for (unsigned n = 0; n < 40; n++) {
		uint8_t b[16];
		if (!lp_lj_in_vm(&vm, pc) || lp_mem_read(&mem, pc, b, sizeof(b)) != 0)
			return -1;
		if (b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa) { /* endbr64 */
			pc += 4;
			continue;
		}
		unsigned i = 0, rex = 0;
		if ((b[0] & 0xf0) == 0x40)
			rex = b[i++];
		uint8_t op = b[i++];
		unsigned rx = rex & 4 ? 8 : 0, bx = rex & 1 ? 8 : 0;
		if (op >= 0x50 && op <= 0x57) { /* push: the prologue */
			if (sub >= 0 || leaving)
				return -1;
			pushes++;
			pc += i;
			continue;
		}
		if ((op >= 0x58 && op <= 0x5f) || op == 0xc3) { /* pop, ret: the epilogue */
			uint64_t v;
			if (sub >= 0 || pushes || lp_mem_u64(&mem, at, &v) != 0)
				return -1;
			at += 8;
			if (op == 0xc3) {
				regs[AGENT_RIP] = v;
				regs[AGENT_RSP] = at;
				memcpy(regs_io, regs, sizeof(regs));
				return 1;
			}
			regs[enc2agent[(op - 0x58) | bx]] = v;
			leaving = 1;
			pc += i;
			continue;
		}
		if (leaving)
			return -1;
		if (op == 0xeb || op == 0xe9) { /* jmp */
			int32_t rel = op == 0xeb ? (int8_t)b[i]
						 : (int32_t)((uint32_t)b[i] | (uint32_t)b[i + 1] << 8 |
							     (uint32_t)b[i + 2] << 16 |
							     (uint32_t)b[i + 3] << 24);
			pc += i + (op == 0xeb ? 1 : 4) + (uint64_t)(int64_t)rel;
			continue;
		}
		if (op >= 0x70 && op <= 0x7f) { /* jcc rel8: the straight line goes on */
			pc += i + 1;
			continue;
		}
		if (op == 0x0f && b[i] >= 0x80 && b[i] <= 0x8f) { /* jcc rel32 */
			pc += i + 5;
			continue;
		}
		if (op >= 0xb8 && op <= 0xbf) { /* mov reg, imm */
			unsigned r = (op - 0xb8) | bx;
			if (r == 4)
				return -1;
			if (r == alias)
				alias = 16;
			pc += i + (rex & 8 ? 8 : 4);
			continue;
		}
		/* ModRM forms: register destination, r/m destination, compares, immediates. */
		int to_reg = op == 0x03 || op == 0x0b || op == 0x23 || op == 0x2b || op == 0x33 ||
			     op == 0x8a || op == 0x8b || op == 0x8d;
		int to_rm = op == 0x01 || op == 0x09 || op == 0x21 || op == 0x29 || op == 0x31 ||
			    op == 0x88 || op == 0x89;
		int cmp = op == 0x38 || op == 0x39 || op == 0x3a || op == 0x3b || op == 0x85;
		unsigned imm = op == 0x81 || op == 0xc7 ? 4
			     : op == 0x83 || op == 0xc1 || op == 0xc6 ? 1 : 0;
		if (!to_reg && !to_rm && !cmp && !imm)
			return -1;
		uint8_t m = b[i++];
		unsigned mod = m >> 6, reg = ((m >> 3) & 7) | rx, rm = (m & 7) | bx;
		int sib_rsp = 0;
		int64_t disp = 0;
		if (mod != 3 && (m & 7) == 4) {
			uint8_t sib = b[i++];
			sib_rsp = (sib & 7) == 4 && !bx;
			if (mod == 0 && (sib & 7) == 5)
				i += 4;
		}
		if (mod == 1)
			disp = (int8_t)b[i++];
		else if (mod == 2 || (mod == 0 && (m & 7) == 5))
			i += 4;
		uint32_t iv = 0;
		for (unsigned k = 0; k < imm; k++)
			iv |= (uint32_t)b[i + k] << (8 * k);
		pc += i + imm;
		if (cmp || (op == 0x83 && ((m >> 3) & 7) == 7) || (op == 0x81 && ((m >> 3) & 7) == 7))
			continue; /* compares change no register */
		if (mod == 3 && rm == 4 && (to_rm || imm)) {
			/* rsp changed: the prologue's sub, the epilogue's add, else not an edge. */
			int64_t v = op == 0x83 ? (int8_t)iv : op == 0x81 ? (int32_t)iv : 0;
			unsigned ext = (m >> 3) & 7;
			if ((op != 0x83 && op != 0x81) || v <= 0)
				return -1;
			if (ext == 5 && sub < 0) {
				sub = v;
			} else if (ext == 0 && sub < 0 && !pushes) {
				at = sp + (uint64_t)v;
				leaving = 1;
			} else {
				return -1;
			}
			continue;
		}
		if (to_reg && reg == 4)
			return -1;
		if (mod == 3 && (to_rm || imm) && rm == alias)
			alias = 16;
		if (op == 0x8d && mod != 3 && sib_rsp)
			alias = reg; /* lea reg, [rsp + disp]: the frame's address */
		else if (to_reg && reg == alias)
			alias = 16;
		/* A store of rsp, of its alias, or into L->cframe (rbp + l_cframe): the link. */
		if (!(op == 0x89 && mod != 3 &&
		      (reg == 4 || reg == alias ||
		       (mod == 1 && (m & 7) == 5 && !bx && disp == vm.lay->l_cframe))))
			continue;
		if (sub < 0)
			return pushes ? -1 : 0; /* whole at sp: the VM's own rule */
		uint64_t cfa = sp - 8 * (uint64_t)pushes - (uint64_t)sub + vm.lay->cf_size, ra;
		if (8 * (uint64_t)pushes + (uint64_t)sub + 8 > vm.lay->cf_size ||
		    lp_mem_u64(&mem, cfa - 8, &ra) != 0)
			return -1;
		regs[AGENT_RIP] = ra;
		regs[AGENT_RSP] = cfa;
		memcpy(regs_io, regs, sizeof(regs));
		return 1;
	}
	return -1;
}

/*
** A trace's exit stub (lj_asm_x86.h, asm_exitstub_gen): trace code jumps to one on a failed
** guard; it pushes the exit number's low byte, jumps to its group's end, which pushes the
** high byte and jumps to the VM's exit handler. The stubs lie in the JIT's machine code
** but in no trace, so a sample there (vmstate is still the trace's) had its host walk cut at
** its first frame. The code from ip on, read as the CPU will run it, says how many of the
** two pushes are still to come: the trace's stack pointer is above sp by the others (at the
** final jump, by both: the code before it is checked to be them).
** Returns the pushes already made (0-2), or -1 when ip is no exit stub. With exitno not
** NULL, also the exit's number (its snapshot's): low byte then high byte, each from its
** push's code while to come, else from the stack (sp: the sample's stack pointer).
*/
static int exit_stub_pushed(uint64_t ip, uint64_t sp, uint32_t *exitno)
{
	unsigned left = 0;
	uint8_t imm[2] = { 0, 0 }; /* the pushes still to come, in order */
	uint64_t pc = ip;
	for (unsigned n = 0; n < 6; n++) {
		uint8_t b[6];
		uint64_t to;
		if (lp_mem_read(&mem, pc, b, sizeof(b)) != 0)
			return -1;
		if (b[0] == 0x6a) { /* push imm8 */
			if (left == 2)
				return -1;
			imm[left++] = b[1];
			pc += 2;
			continue;
		}
		if (b[0] == 0xeb) { /* jmp rel8: to the group's end */
			pc += 2 + (uint64_t)(int64_t)(int8_t)b[1];
			continue;
		}
		unsigned at = b[0] == 0xe9 ? 1 : b[0] == 0xff && b[1] == 0x25 ? 2 : 0;
		int32_t rel = (int32_t)((uint32_t)b[at] | (uint32_t)b[at + 1] << 8 |
					(uint32_t)b[at + 2] << 16 | (uint32_t)b[at + 3] << 24);
		if (at == 1) { /* jmp rel32: to the exit handler */
			to = pc + 5 + (uint64_t)(int64_t)rel;
		} else if (at == 2) {
			/* jmp [rip + rel32]: the handler too far for rel32, its address kept
			 * before the first group (newer LuaJIT) */
			if (lp_mem_u64(&mem, pc + 6 + (uint64_t)(int64_t)rel, &to) != 0)
				return -1;
		} else {
			return -1;
		}
		if (!lp_lj_in_vm(&vm, to))
			return -1;
		if (left == 0) {
			/* At the jump itself: the two pushes (the group's last stub's and the
			 * high byte's) just before it. */
			uint8_t p[4];
			if (pc != ip || lp_mem_read(&mem, ip - 4, p, sizeof(p)) != 0 ||
			    p[0] != 0x6a || p[2] != 0x6a)
				return -1;
		}
		unsigned pushed = 2 - left;
		if (exitno) {
			/* byte[k]: the low byte (k 0), the high one (k 1); the last push made
			 * is at sp (push imm8 sign-extends: the low byte of the slot). */
			uint8_t byte[2];
			for (unsigned k = 0; k < 2; k++) {
				uint64_t v;
				if (k >= pushed) {
					byte[k] = imm[k - pushed];
				} else if (lp_mem_u64(&mem, sp + 8 * (pushed - 1 - k), &v) == 0) {
					byte[k] = (uint8_t)v;
				} else {
					return -1;
				}
			}
			*exitno = (uint32_t)byte[1] << 8 | byte[0];
		}
		return (int)pushed;
	}
	return -1;
}

int agent_vm_frame(uint64_t ip, uint64_t *regs, int in_object)
{
	if (!attached)
		return 0;
	uint64_t sp = regs[AGENT_RSP];
	if (lp_lj_in_vm(&vm, ip)) {
		vm_frames_met++;
		if (is_cframe(sp) || is_cframe(sp + 8))
			own_vm_met = 1;
		note_hop(sp);
		if (empty_top && nempty < MAX_EMPTY && is_cframe(sp) && empty_entry(sp)) {
			empty_ip[nempty] = ip;
			empty_rank[nempty++] = vm_frames_met;
		}
		if (nvmf < MAX_VMF && is_cframe(sp)) {
			vmf_ip[nvmf] = ip;
			vmf_sp[nvmf] = sp;
			vmf_rank[nvmf++] = vm_frames_met;
		}
		if (helper_pending && !helper_pc_known) {
			helper_pc = regs[AGENT_RBX];
			helper_bp = regs[AGENT_RBP];
			helper_sp = sp;
			helper_ip = ip;
			helper_rank = vm_frames_met;
			helper_pc_known = 1;
		}
		/* The interpreter's unwind rule (CFA = sp + CFRAME_SIZE) holds only at the level
		 * of one of its C frames; the helpers at the end of its block are called, so
		 * one return address lower. Anything else is not stepped. */
		if (is_cframe(sp))
			return 0;
		uint64_t ra;
		if (is_cframe(sp + 8) && lp_mem_u64(&mem, sp, &ra) == 0) {
			regs[AGENT_RIP] = ra;
			regs[AGENT_RSP] = sp + 8;
			return 1;
		}
		/* The VM's entry from C or its exit to C, around the C frame's link (vm_edge).
		 * That entry runs no Lua frame yet, or any more: it is left out of the host
		 * stack, as an empty protected call is, else the report took it for the entry
		 * of the innermost Lua frames (ffi.cast's parser entering lj_vm_cpcall). */
		int e = vm_edge(ip, regs);
		if (e >= 0) {
			add_empty(ip, vm_frames_met);
			return e;
		}
		/* Deeper below a C frame of the interpreter: VM code with data on the stack,
		 * such as the trace-exit handler (its ExitState, then lj_trace_exit and what
		 * that calls: a collector step, the allocator). VM code runs in the innermost
		 * C frame above its stack pointer: the walk goes on from there, by the
		 * interpreter's rule (which restores the callee-saved registers it needs). */
		uint64_t above = cframe_above(sp);
		if (!above)
			return -1;
		regs[AGENT_RSP] = above;
		return 1;
	}
	if (in_object)
		return 0;
	/* Trace machine code: normally the running trace's, else any trace's, or an exit
	 * stub of the running trace (vmstate names the trace that exits), at the trace's
	 * stack pointer once the stub's pushes are taken back. */
	struct lp_lj_trace t;
	int in_code = 1; /* ip in t's code, not one of its exit stubs */
	if (have_trace && lp_lj_trace_has(&cur_trace, ip)) {
		t = cur_trace;
	} else if (lp_lj_trace_find(&vm, &mem, ip, &t) != LP_LJ_OK) {
		int pushed = have_trace ? exit_stub_pushed(ip, sp, NULL) : -1;
		if (pushed < 0)
			return -1;
		sp += 8 * (uint64_t)pushed;
		t = cur_trace;
		in_code = 0;
	}
	/* The trace the walk met first, at its code address: where the snapshot places its
	 * frames (a stub's sample keeps the trace's start). */
	if (in_code && !walk_trace_found) {
		walk_trace = t;
		walk_trace_ip = ip;
		walk_trace_found = 1;
	}
	/*
	** Trace code runs in the C frame of the interpreter that entered it, lowered by 16
	** bytes at trace entry and by spadjust: CFA = sp + CFRAME_SIZE_JIT + spadjust. The
	** saved registers are those of the interpreter's frame (its FDE, vm-internals.md §1):
	** return address at CFA-8, rbp -16, rbx -24, r15 -32, r14 -40.
	*/
	uint64_t cfa = sp + vm.lay->cf_size_jit + t.spadjust, v[5];
	/* That frame is the interpreter's innermost C frame, when the sample knows it: where
	 * the stack pointer is not t's own (a side trace's head or tail adjusting it to or
	 * from its parent's, as a sample may catch it), the frame is taken from there (the
	 * formula put ~2 % of one program's trace samples off their walk). */
	if (ncframes && !is_cframe(cfa - vm.lay->cf_size)) {
		uint64_t above = cframe_above(sp);
		if (above)
			cfa = above + vm.lay->cf_size;
	}
	if (lp_mem_read(&mem, cfa - 40, v, sizeof(v)) != 0)
		return -1;
	regs[AGENT_R14] = v[0];
	regs[AGENT_R15] = v[1];
	regs[AGENT_RBX] = v[2];
	regs[AGENT_RBP] = v[3];
	regs[AGENT_RIP] = v[4];
	regs[AGENT_RSP] = cfa;
	return 1;
}

void agent_vm_cnames_scan(void)
{
	if (!attached)
		return;
	/* Through the page cache, emptied before and after: the handler's copies are stale
	 * and it takes no more samples (its caller's contract); checked reads, not plain
	 * ones, whatever memprof's last walk left set. */
	int plain = plain_reads;
	uint64_t floor = stack_floor;
	plain_reads = 0;
	stack_floor = 0;
	cache_reset();
	agent_cnames_scan_vm(&vm, &mem, 0);
	cache_reset();
	plain_reads = plain;
	stack_floor = floor;
}

int agent_vm_ffid_offset(void)
{
	return attached ? vm.lay->fn_ffid : -1;
}

int agent_vm_attached(void)
{
	return attached;
}

int agent_vm_attached_to(struct lua_State *L)
{
	uint64_t g;
	return attached &&
	       lp_mem_u64(&pid_mem, (uint64_t)(uintptr_t)L + vm.lay->l_glref, &g) == 0 &&
	       g == vm.g;
}

/*
** For memprof's capture, whose Lua frames are walked after the host walk: the protected
** calls of C that entered none of the Lua frames of thread t and of the threads that
** resumed it by builtins (note_empty_cframes), found before the host walk so that it
** leaves them out (an allocation of a jit.attach handler went after the compiler's C
** frames). t's frames start at base (0: L->base). A thread with no protected call among
** its C frames is not walked (the usual case: the walk would double a capture's cost on a
** deep stack); one whose walk fails (not every interpreter helper syncs L->base) is passed
** over; their resumers are still checked.
*/
static void note_thread_empties(struct lp_lj_thread t, uint64_t base)
{
	for (int level = 0; level < MAX_RESUMES; level++) {
		unsigned flags, n, ncf = thread_cpcalls(&t);
		if (ncf) {
			n = lp_lj_walk(&vm, &mem, &t, base, 0, frames, AGENT_MAX_LUA, &flags);
			if (!(flags & WALK_ERR))
				note_empty_cframes(ncf, frames, n, flags);
		}
		struct lp_lj_thread r;
		if (lp_lj_resumer(&vm, &mem, &t, &r, NULL) != LP_LJ_OK)
			return;
		t = r;
		base = 0;
	}
}

void agent_vm_prepare_walk(uint64_t L, int32_t vmstate)
{
	/* No cache_reset: plain reads do not use the page cache, and whoever clears
	 * plain_reads empties it first (the handler's sample, agent_vm_cnames_scan). Its 32
	 * tags were 8 cache lines written per memprof capture, cold at 512 KiB intervals. */
	plain_reads = 1;
	ncframes = 0;
	have_trace = 0;
	walk_reset();
	if (!attached)
		return;
	struct lp_lj_thread t;
	if (lp_lj_thread_read(&vm, &mem, L, &t) == LP_LJ_OK) {
		add_thread_cframes(t);
		/* A C function allocates (ffi.cast's type parser, say): L->base is synced. */
		uint32_t tn;
		unsigned st = lp_lj_vmstate_map(vmstate, &tn);
		if (st == LP_VMST_CFUNC) {
			empty_top = t.base;
			empty_stack = t.stack;
		}
		/* Lua code (from L->base, synced; a trace's from g->jit_base), C functions and
		 * the collector. Not the interpreter in a protected call of C on top of its Lua
		 * frames: the compiler starting a trace, whose allocations memprof's
		 * compiler_entry cuts at that call (nor the compiler's states, for the same
		 * reason). */
		int32_t nres = 0;
		uint64_t cf = t.cframe & LP_LJ_CFRAME_RAWMASK, jb = 0;
		if (st == LP_VMST_INTERP && cf)
			(void)lp_mem_read(&mem, cf + vm.lay->cf_nres, &nres, sizeof(nres));
		if (vmstate > 0) {
			if (lp_lj_jit_base(&vm, &mem, &jb) == LP_LJ_OK && jb)
				note_thread_empties(t, jb);
		} else if (cf && ((st == LP_VMST_INTERP && nres >= 0) || st == LP_VMST_CFUNC ||
				  st == LP_VMST_GC)) {
			note_thread_empties(t, 0);
		}
	}
	if (vmstate > 0 && lp_lj_trace_read(&vm, &mem, (uint32_t)vmstate, &cur_trace) == LP_LJ_OK)
		have_trace = 1;
}

void agent_vm_detach(void)
{
	attached = 0;
	gg_lo = gg_hi = 0;
	known_reset();
	agent_tcodes_free(&tcodes);
}
