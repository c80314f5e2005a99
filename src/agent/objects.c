/*
** The loaded objects as the signal handler sees them: executable segments with their
** .eh_frame_hdr tables, readable segments, and the sampled thread's stack.
**
** The handler may not call dl_iterate_phdr (it takes the loader's lock) nor read an address
** it has not checked, so a snapshot is taken at start, outside the handler, and answers
** "is this address code of a loaded object?" and "may this word be read?". Objects loaded
** later are picked up by agent_objects_refresh, which the writer thread calls when the
** loader's count of loaded objects changes: it fills the other of two tables and publishes
** it with an atomic pointer, then waits until the handler is seen outside a lookup before
** the old table may be reused.
**
** An object unloaded and another loaded at its place (FFI libraries collected and loaded
** again, one after the other) leaves the table right about the addresses and wrong about
** the object: the handler tells them apart by their GNU build-ids (agent_objects_check), so
** that the writer thread names the new one's code before the samples taken in it.
**
** Until the writer thread has read the objects again, code of an object loaded since (a C
** module required while sampling, its function called at once) is in no table: the walk
** of a sample there asks the loader instead, through glibc's lock-free _dl_find_object
** (async-signal-safe, glibc 2.35 and later), and reads the object's headers itself with
** process_vm_readv (agent_objects_late). Without it every such sample's host stack was cut
** at its first frame in the new object.
*/
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "agent/allocstub.h"
#include "agent/objects.h"

static struct objtab tabs[2];
static _Atomic(struct objtab *) cur_tab;
static _Atomic int busy;   /* the handler holds a table from agent_objects_enter */
static _Atomic unsigned gen; /* bumped whenever the table changes */
static unsigned fini_gen = ~0u; /* gen when the table was last dropped */
static const struct objtab *last_tab; /* ... and that table */
static uint64_t stack_lo, stack_hi;
static long stack_tid;        /* the thread whose stack that is (agent_objects_init's) */
static pid_t self_pid;        /* for process_vm_readv on ourselves */
static unsigned stale_gen = ~0u; /* handler: the table (gen) last noted stale */
static int stale_pending;        /* handler: ... and not taken yet */

/* Objects loaded since the table was taken, found during one walk (agent_objects_late). */
#define LATE_TEXT  8
#define LATE_SEGS  32
#define LATE_PHDRS 32
static struct {
	size_t ntext, nr;
	struct obj_text text[LATE_TEXT];
	struct obj_range r[LATE_SEGS];
} late;
#ifdef DLFO_EH_SEGMENT_TYPE
/* glibc's, looked up at init: a build on glibc 2.35+ still loads on an older one. */
static int (*find_object)(void *, struct dl_find_object *);
#endif

static uint64_t read_u32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* agent_objects_parse_hdr on the header's first 12 bytes, copied to h. */
static int parse_hdr(const uint8_t *h, uint64_t hdr, uint64_t len, struct obj_text *t)
{
	if (len < 12 || h[0] != 1)
		return -1;
	/* eh_frame_ptr: pcrel|sdata4 (0x1b) or u/sdata4; fde_count: udata4 (0x03); table:
	 * datarel|sdata4 (0x3b), the layout libunwind's table search expects. */
	if ((h[1] & 0x0f) != 0x0b && (h[1] & 0x0f) != 0x03)
		return -1;
	if (h[2] != 0x03 || h[3] != 0x3b)
		return -1;
	t->hdr = hdr;
	t->nfde = read_u32(h + 8);
	t->table = hdr + 12;
	if (12 + t->nfde * 8 > len)
		return -1;
	return 0;
}

int agent_objects_parse_hdr(uint64_t hdr, uint64_t len, struct obj_text *t)
{
	return parse_hdr((const uint8_t *)(uintptr_t)hdr, hdr, len, t);
}

static int holds_range(const struct dl_phdr_info *info, uint64_t addr, uint64_t len);

/* The object's GNU build-id in memory (its PT_NOTE segments, those the loader mapped: the
 * header may place one elsewhere, which reading faulted on): the address of its bytes and
 * their count, or 0. */
static uint64_t build_id(const struct dl_phdr_info *info, uint32_t *len)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE ||
		    !holds_range(info, info->dlpi_addr + ph->p_vaddr, ph->p_memsz))
			continue;
		const uint8_t *p = (const uint8_t *)(uintptr_t)(info->dlpi_addr + ph->p_vaddr);
		size_t left = ph->p_memsz;
		while (left >= sizeof(ElfW(Nhdr))) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			size_t nsz = (nh->n_namesz + 3u) & ~3u, dsz = (nh->n_descsz + 3u) & ~3u;
			size_t need = sizeof(*nh) + nsz + dsz;
			if (need > left || nsz < nh->n_namesz || dsz < nh->n_descsz)
				break;
			const char *name = (const char *)(nh + 1);
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
			    !memcmp(name, "GNU", 4) && nh->n_descsz > 0) {
				*len = nh->n_descsz < OBJ_ID_MAX ? nh->n_descsz : OBJ_ID_MAX;
				return (uint64_t)(uintptr_t)(name + nsz);
			}
			p += need;
			left -= need;
		}
	}
	return 0;
}

/* 1 if [addr, addr + len) lies in one of the object's loaded segments. */
static int holds_range(const struct dl_phdr_info *info, uint64_t addr, uint64_t len)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t off = addr - (info->dlpi_addr + ph->p_vaddr);
		if (ph->p_type == PT_LOAD && off < ph->p_memsz && len <= ph->p_memsz - off)
			return 1;
	}
	return 0;
}

/* 1 if addr lies in one of the object's loaded segments. */
static int holds(const struct dl_phdr_info *info, uint64_t addr)
{
	return holds_range(info, addr, 1);
}

/* Whether the object stays loaded while we profile, so that agent_objects_check need not
 * read it: the program, the vDSO, libc and the dynamic loader (which do the unloading),
 * this agent. Others may be unloaded (libraries and modules a program loaded, even those
 * loaded before start). */
static int stays(const struct dl_phdr_info *info)
{
	uint64_t vdso = getauxval(AT_SYSINFO_EHDR);
	return !info->dlpi_name || !*info->dlpi_name ||
	       (vdso && (uint64_t)(uintptr_t)info->dlpi_phdr - vdso < 4096) ||
	       holds(info, (uint64_t)(uintptr_t)&dl_iterate_phdr) ||
	       holds(info, (uint64_t)(uintptr_t)&_r_debug) ||
	       holds(info, (uint64_t)(uintptr_t)&agent_objects_parse_hdr);
}

static int add_object(struct dl_phdr_info *info, size_t size, void *data)
{
	struct objtab *tab = data;
	uint64_t base = info->dlpi_addr, hdr = 0, hdrlen = 0;
	uint32_t idlen = 0;
	uint64_t idaddr = stays(info) ? 0 : build_id(info, &idlen);
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_GNU_EH_FRAME) {
			hdr = base + info->dlpi_phdr[i].p_vaddr;
			hdrlen = info->dlpi_phdr[i].p_memsz;
		}
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || ph->p_memsz == 0)
			continue;
		uint64_t lo = (base + ph->p_vaddr) & ~4095ull;
		uint64_t hi = (base + ph->p_vaddr + ph->p_memsz + 4095) & ~4095ull;
		if (tab->nr < OBJ_MAX_RANGES)
			tab->r[tab->nr++] = (struct obj_range){ lo, hi };
		if ((ph->p_flags & PF_X) && tab->ntext < OBJ_MAX_TEXT) {
			struct obj_text *t = &tab->text[tab->ntext++];
			memset(t, 0, sizeof(*t));
			t->lo = base + ph->p_vaddr;
			t->hi = t->lo + ph->p_memsz;
			if (!hdr || agent_objects_parse_hdr(hdr, hdrlen, t) != 0)
				t->hdr = 0;
			if (idaddr) {
				t->idaddr = idaddr;
				t->idlen = idlen;
				memcpy(t->id, (const void *)(uintptr_t)idaddr, idlen);
			}
		}
	}
	return 0;
}

static int cmp_text(const void *a, const void *b)
{
	const struct obj_text *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int cmp_range(const void *a, const void *b)
{
	const struct obj_range *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static void snapshot(struct objtab *tab)
{
	tab->ntext = tab->nr = 0;
	dl_iterate_phdr(add_object, tab);
	qsort(tab->text, tab->ntext, sizeof(tab->text[0]), cmp_text);
	qsort(tab->r, tab->nr, sizeof(tab->r[0]), cmp_range);
}

int agent_objects_init(char *err, size_t errlen)
{
	pthread_attr_t attr;
	void *addr;
	size_t size;
	/* For the main thread glibc reads /proc/self/maps: with no descriptor left it fails
	 * with EMFILE, which the message names (it said ENOMEM). */
	int rc = pthread_getattr_np(pthread_self(), &attr);
	if (rc == 0 && (rc = pthread_attr_getstack(&attr, &addr, &size)) != 0)
		pthread_attr_destroy(&attr);
	if (rc != 0) {
		snprintf(err, errlen, "cannot find the thread's stack: %s", strerror(rc));
		errno = rc;
		return -1;
	}
	pthread_attr_destroy(&attr);
	stack_lo = (uint64_t)(uintptr_t)addr;
	stack_hi = stack_lo + size;
	stack_tid = (long)syscall(SYS_gettid);
	self_pid = getpid();
#ifdef DLFO_EH_SEGMENT_TYPE
	*(void **)&find_object = dlsym(RTLD_DEFAULT, "_dl_find_object");
#endif
	/* What depends on the table (unwind rules) stays valid across a stop and a start when
	 * the same objects are loaded at the same places. */
	static struct obj_text prev[OBJ_MAX_TEXT];
	size_t nprev = last_tab ? last_tab->ntext : 0;
	if (nprev)
		memcpy(prev, last_tab->text, nprev * sizeof(prev[0]));
	snapshot(&tabs[0]);
	int same = nprev && nprev == tabs[0].ntext &&
		   !memcmp(prev, tabs[0].text, nprev * sizeof(prev[0])) && fini_gen == gen;
	if (!same)
		atomic_fetch_add(&gen, 1);
	atomic_store(&cur_tab, &tabs[0]);
	return 0;
}

void agent_objects_fini(void)
{
	/* The generation is kept: the next init decides whether the table changed (the
	 * loaded objects can change meanwhile only through the loader, which init sees). */
	fini_gen = atomic_load(&gen);
	last_tab = atomic_load(&cur_tab);
	atomic_store(&cur_tab, NULL);
}

/*
** The writer thread's reads of object memory outside a refresh (learning unwind rules):
** the loaded objects may change meanwhile, the program unloading a library on its own
** thread (dlclose of an FFI library collected, a C module's at lua_close), and a table
** taken before that still lists memory no longer mapped (a crash, found by loading and
** unloading C modules under the CPU profiler). The loader unmaps an object only while it
** holds the lock dl_iterate_phdr takes, so fn runs inside dl_iterate_phdr, with a table of
** its own taken there (the lock is recursive): nothing it lists goes away until fn
** returns.
*/
static struct objtab locked_tab;

struct locked_call {
	void (*fn)(const struct objtab *, void *);
	void *arg;
	int ran;
};

static int locked_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct locked_call *lc = data;
	if (!lc->ran) {
		lc->ran = 1;
		snapshot(&locked_tab);
		lc->fn(&locked_tab, lc->arg);
	}
	return 1;
}

void agent_objects_locked(void (*fn)(const struct objtab *, void *), void *arg)
{
	struct locked_call lc = { fn, arg, 0 };
	dl_iterate_phdr(locked_cb, &lc);
}

void agent_objects_refresh(void)
{
	struct objtab *old = atomic_load(&cur_tab);
	if (!old)
		return;
	struct objtab *next = old == &tabs[0] ? &tabs[1] : &tabs[0];
	snapshot(next);
	/* The table before its generation: who reads gen, then the table, has this one or a
	 * later one (the unwinder's rules go with it). */
	atomic_store(&cur_tab, next);
	atomic_fetch_add(&gen, 1);
	while (atomic_load(&busy)) {
		struct timespec ts = { 0, 50000 };
		nanosleep(&ts, NULL);
	}
}

unsigned agent_objects_gen(void)
{
	return atomic_load(&gen);
}

/* -- Lookups (handler) ------------------------------------------------------------------ */

const struct objtab *agent_objects_current(void)
{
	return atomic_load(&cur_tab);
}

int agent_objects_busy(void)
{
	return atomic_load(&busy);
}

const struct objtab *agent_objects_enter(void)
{
	atomic_store(&busy, 1);
	return atomic_load(&cur_tab);
}

void agent_objects_leave(void)
{
	atomic_store(&busy, 0);
}

const struct obj_text *agent_objects_text(const struct objtab *tab, uint64_t ip)
{
	size_t lo = 0, hi = tab ? tab->ntext : 0;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (ip < tab->text[mid].lo)
			hi = mid;
		else if (ip >= tab->text[mid].hi)
			lo = mid + 1;
		else
			return &tab->text[mid];
	}
	return NULL;
}

int agent_objects_readable(const struct objtab *tab, uint64_t sp, uint64_t addr, size_t len)
{
	if (addr + len < addr || !tab)
		return 0;
	if (addr >= sp && addr + len <= stack_hi)
		return 1;
	size_t lo = 0, hi = tab->nr;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (addr < tab->r[mid].lo)
			hi = mid;
		else if (addr >= tab->r[mid].hi)
			lo = mid + 1;
		else
			return addr + len <= tab->r[mid].hi;
	}
	return 0;
}

int agent_objects_segment(const struct objtab *tab, uint64_t addr, uint64_t *lo, uint64_t *hi)
{
	size_t l = 0, h = tab ? tab->nr : 0;
	while (l < h) {
		size_t mid = (l + h) / 2;
		if (addr < tab->r[mid].lo) {
			h = mid;
		} else if (addr >= tab->r[mid].hi) {
			l = mid + 1;
		} else {
			*lo = tab->r[mid].lo;
			*hi = tab->r[mid].hi;
			return 0;
		}
	}
	return -1;
}

int agent_objects_on_stack(uint64_t sp)
{
	return sp >= stack_lo && sp < stack_hi;
}

int agent_objects_stack_has(uint64_t lo, uint64_t addr, size_t len)
{
	return addr >= lo && addr >= stack_lo && addr + len >= addr && addr + len <= stack_hi;
}

/* This thread's stack, found once (-1: it could not be: pthread_getattr_np reads
 * /proc/self/maps for the main thread). */
static _Thread_local uint64_t here_lo, here_hi;
static _Thread_local int here_known;
static _Thread_local long here_tid;

int agent_objects_stack_here(struct agent_stack_save *save)
{
	save->lo = stack_lo;
	save->hi = stack_hi;
	save->swapped = 0;
	/* Asked once a thread (a system call each capture otherwise). A forked child's thread
	 * keeps the parent's number here, and takes the other path to the same stack. */
	if (!here_tid)
		here_tid = (long)syscall(SYS_gettid);
	if (here_tid == stack_tid)
		return 0;
	if (!here_known) {
		pthread_attr_t attr;
		void *addr;
		size_t size;
		here_known = -1;
		if (pthread_getattr_np(pthread_self(), &attr) == 0) {
			if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
				here_lo = (uint64_t)(uintptr_t)addr;
				here_hi = here_lo + size;
				here_known = 1;
			}
			pthread_attr_destroy(&attr);
		}
	}
	if (here_known < 0)
		return -1;
	stack_lo = here_lo;
	stack_hi = here_hi;
	save->swapped = 1;
	return 0;
}

void agent_objects_stack_restore(const struct agent_stack_save *save)
{
	if (!save->swapped)
		return;
	stack_lo = save->lo;
	stack_hi = save->hi;
}

/* At most this many objects read per sample: its stack rarely spans more that may be
 * unloaded, and each costs about a microsecond. */
#define CHECK_MAX 4

int agent_objects_check(const uint64_t *ips, size_t n)
{
	const struct objtab *tab = agent_objects_enter();
	const struct obj_text *done[CHECK_MAX];
	size_t ndone = 0;
	int stale = 0;
	for (size_t i = 0; tab && i < n && !stale; i++) {
		const struct obj_text *t = agent_objects_text(tab, ips[i]);
		if (!t || !t->idaddr)
			continue;
		size_t k;
		for (k = 0; k < ndone && done[k]->idaddr != t->idaddr; k++)
			;
		if (k < ndone)
			continue;
		if (ndone == CHECK_MAX)
			break;
		done[ndone++] = t;
		/* The kernel copies with fault handling: an address no longer mapped is an
		 * error, not a SIGSEGV. A plain loop compares (memcmp is not on POSIX's
		 * async-signal-safe list). */
		uint8_t id[OBJ_ID_MAX];
		struct iovec local = { id, t->idlen };
		struct iovec remote = { (void *)(uintptr_t)t->idaddr, t->idlen };
		if (process_vm_readv(self_pid, &local, 1, &remote, 1, 0) != (ssize_t)t->idlen) {
			stale = 1;
			break;
		}
		for (uint32_t j = 0; j < t->idlen; j++)
			stale |= id[j] != t->id[j];
	}
	agent_objects_leave();
	return stale && agent_objects_note_stale();
}

int agent_objects_note_stale(void)
{
	unsigned g = atomic_load(&gen);
	if (g == stale_gen)
		return 0;
	stale_gen = g;
	stale_pending = 1;
	return 1;
}

int agent_objects_take_stale(void)
{
	int p = stale_pending;
	stale_pending = 0;
	return p;
}

int agent_in_object(uint64_t ip)
{
	const struct objtab *tab = agent_objects_enter();
	int in = agent_objects_text(tab, ip) != NULL || (tab && agent_objects_late(ip));
	agent_objects_leave();
	/* Sampled memprof's generated allocator wrapper stands for a function of ours: C code,
	 * not trace machine code, though it is anonymous memory as traces are. */
	return in || agent_allocstub_find(ip) != 0;
}

/* -- Objects loaded since the table (sampled thread) ----------------------------------- */

/* len bytes at addr into buf, with no fault if they are not mapped: 0, or -1. */
static int peek(void *buf, uint64_t addr, size_t len)
{
	struct iovec local = { buf, len };
	struct iovec remote = { (void *)(uintptr_t)addr, len };
	return process_vm_readv(self_pid, &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

void agent_objects_late_reset(void)
{
	late.ntext = late.nr = 0;
}

#ifdef DLFO_EH_SEGMENT_TYPE
/*
** The object the loader says holds ip, read from its ELF and program headers at the start
** of its mapping (where the loader maps a shared object's first segment, file offset 0):
** its executable segments join late's texts, its loaded segments late's ranges. Every
** read goes through peek, so an object unloaded meanwhile, or laid out otherwise (its
** headers elsewhere), is refused, not faulted on. The executable segment holding ip, or
** NULL.
*/
static const struct obj_text *late_add(uint64_t ip)
{
	struct dl_find_object fo;
	if (!find_object || late.ntext == LATE_TEXT ||
	    find_object((void *)(uintptr_t)ip, &fo) != 0)
		return NULL;
	uint64_t start = (uint64_t)(uintptr_t)fo.dlfo_map_start & ~4095ull, bias;
	ElfW(Ehdr) eh;
	ElfW(Phdr) ph[LATE_PHDRS];
	const uint8_t *id = eh.e_ident;
	if (peek(&eh, start, sizeof(eh)) != 0 || id[EI_MAG0] != ELFMAG0 || id[EI_MAG1] != ELFMAG1 ||
	    id[EI_MAG2] != ELFMAG2 || id[EI_MAG3] != ELFMAG3 || id[EI_CLASS] != ELFCLASS64 ||
	    eh.e_phentsize != sizeof(ph[0]) || eh.e_phnum == 0 || eh.e_phnum > LATE_PHDRS ||
	    peek(ph, start + eh.e_phoff, eh.e_phnum * sizeof(ph[0])) != 0 ||
	    peek(&bias, (uint64_t)(uintptr_t)&fo.dlfo_link_map->l_addr, sizeof(bias)) != 0)
		return NULL;
	uint64_t hdr = 0, hdrlen = 0;
	int first = 1;
	for (int i = 0; i < eh.e_phnum; i++) {
		if (ph[i].p_type == PT_GNU_EH_FRAME) {
			hdr = bias + ph[i].p_vaddr;
			hdrlen = ph[i].p_memsz;
		}
		/* The headers read are this object's: its first segment maps at start. */
		if (ph[i].p_type == PT_LOAD && first) {
			if (ph[i].p_offset != 0 || ((bias + ph[i].p_vaddr) & ~4095ull) != start)
				return NULL;
			first = 0;
		}
	}
	size_t ntext = late.ntext, nr = late.nr;
	const struct obj_text *found = NULL;
	for (int i = 0; i < eh.e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD || ph[i].p_memsz == 0)
			continue;
		uint64_t lo = bias + ph[i].p_vaddr, hi = lo + ph[i].p_memsz;
		if (nr == LATE_SEGS)
			return NULL;
		late.r[nr++] = (struct obj_range){ lo & ~4095ull, (hi + 4095) & ~4095ull };
		if (!(ph[i].p_flags & PF_X))
			continue;
		if (ntext == LATE_TEXT)
			return NULL;
		struct obj_text *t = &late.text[ntext++];
		*t = (struct obj_text){ .lo = lo, .hi = hi };
		uint8_t h[12];
		if (!hdr || hdrlen < 12 || peek(h, hdr, 12) != 0 || parse_hdr(h, hdr, hdrlen, t) != 0)
			t->hdr = 0;
		if (ip >= lo && ip < hi)
			found = t;
	}
	/* Published only whole, and only when ip is code of it. */
	if (found) {
		late.ntext = ntext;
		late.nr = nr;
	}
	return found;
}
#else
static const struct obj_text *late_add(uint64_t ip)
{
	(void)ip;
	return NULL;
}
#endif

const struct obj_text *agent_objects_late(uint64_t ip)
{
	for (size_t i = 0; i < late.ntext; i++)
		if (ip >= late.text[i].lo && ip < late.text[i].hi)
			return &late.text[i];
	return late_add(ip);
}

int agent_objects_late_readable(uint64_t addr, size_t len)
{
	if (addr + len < addr)
		return 0;
	for (size_t i = 0; i < late.nr; i++)
		if (addr >= late.r[i].lo && addr + len <= late.r[i].hi)
			return 1;
	return 0;
}
