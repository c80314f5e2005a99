/*
** Allocator stubs: sampled memprof's allocator wrapper as generated x86-64 code next to
** the allocator it wraps (contract and reasons in allocstub.h).
*/
#include "agent/allocstub.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/stubenv.h"

/* Distinct stubs a process can have (one page each: an allocator with a countdown, which
 * memprof.c keeps per state), or those none could be made for (remembered, so that a
 * policy refusing the page is asked once for each). */
#define STUB_MAX 8

/* Kernels before 4.17 ignore the flag (the address is a hint then, checked after). */
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

struct stub {
	agent_alloc_fn orig, compiled;
	agent_alloc_rare_fn rare;
	int64_t *countdown;
	const int8_t *marks;
	unsigned shift;
	uint8_t *code;  /* NULL: none could be made */
	size_t len;
};

static struct stub stubs[STUB_MAX];
static _Atomic unsigned nstubs; /* entries published to agent_allocstub_find */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

#if defined(__x86_64__)

#define STUB_LEN 85

static uint8_t *put(uint8_t *p, const void *bytes, size_t n)
{
	memcpy(p, bytes, n);
	return p + n;
}

static uint8_t *put64(uint8_t *p, uint64_t v)
{
	return put(p, &v, 8);
}

/* A rel32 from the end of an instruction at `next` to `to`; 0 when out of reach. */
static int rel32(uint64_t next, uint64_t to, int32_t *out)
{
	int64_t d = (int64_t)(to - next);
	if (d < INT32_MIN || d > INT32_MAX)
		return 0;
	*out = (int32_t)d;
	return 1;
}

/*
** The code, written into buf as it will run at address `at` (System V: ud, ptr, osize,
** nsize in rdi, rsi, rdx, rcx, left there for the tail calls; rax, r8 and r9 are scratch,
** and r8 carries orig to the rare path as its fifth argument).
** The data lives in this object, anywhere: its address in a register, the countdown at a
** 32-bit displacement from the marks (short instructions: with a 64-bit absolute address
** in each, the stub took 0.1 ns a call more in bench/memprof_floor). 0 when orig is out of
** reach of a direct jump from at, or the countdown of a displacement from the marks.
*/
static size_t emit(uint8_t *buf, uint64_t at, const struct stub *s)
{
	uint8_t *p = buf;
	int32_t r, cd;
	if (!rel32((uint64_t)(uintptr_t)s->marks, (uint64_t)(uintptr_t)s->countdown, &cd))
		return 0;
	p = put(p, "\xf3\x0f\x1e\xfa", 4);         /* endbr64: an indirect call's target */
	p = put(p, "\x49\xb9", 2);                 /* mov r9, marks */
	p = put64(p, (uint64_t)(uintptr_t)s->marks);
	p = put(p, "\x49\x8b\x81", 3);             /* mov rax, [r9 + cd] */
	p = put(p, &cd, 4);
	p = put(p, "\x49\x89\xf0", 3);             /* mov r8, rsi */
	p = put(p, "\x49\xc1\xe8", 3);             /* shr r8, shift */
	*p++ = (uint8_t)s->shift;
	p = put(p, "\x45\x0f\xb7\xc0", 4);         /* movzx r8d, r8w */
	p = put(p, "\x48\x29\xc8", 3);             /* sub rax, rcx */
	p = put(p, "\x49\x89\x81", 3);             /* mov [r9 + cd], rax */
	p = put(p, &cd, 4);
	p = put(p, "\x4f\x0f\xbe\x04\x01", 5);     /* movsx r8, byte [r9 + r8] */
	p = put(p, "\x49\x09\xc0", 3);             /* or r8, rax */
	p = put(p, "\x0f\x88", 2);                 /* js rare_jump (after the next jmp) */
	r = 5;
	p = put(p, &r, 4);
	*p++ = 0xe9;                               /* jmp orig */
	if (!rel32(at + (uint64_t)(p - buf) + 4, (uint64_t)(uintptr_t)s->orig, &r))
		return 0;
	p = put(p, &r, 4);
	p = put(p, "\x49\xb8", 2);                 /* rare_jump: mov r8, orig (5th argument) */
	p = put64(p, (uint64_t)(uintptr_t)s->orig);
	p = put(p, "\xff\x25\x00\x00\x00\x00", 6); /* jmp [rip + 0] */
	p = put64(p, (uint64_t)(uintptr_t)s->rare);
	return (size_t)(p - buf);
}

/*
** A page within a direct jump of target: below it first (an executable's heap grows up
** from the end of its data, so the range above may be taken later), then above. Without
** MAP_FIXED_NOREPLACE (kernels before 4.17 ignore it) the address is a hint: checked.
*/
static uint8_t *place(uint64_t target, size_t pg)
{
	for (int dir = 0; dir < 2; dir++) {
		for (unsigned k = 20; k <= 30; k++) {
			uint64_t d = (uint64_t)1 << k;
			if (dir == 0 && target < d + pg)
				continue;
			uint64_t hint = (dir == 0 ? target - d : target + d) & ~(uint64_t)(pg - 1);
			void *m = mmap((void *)(uintptr_t)hint, pg, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
			if (m == MAP_FAILED)
				continue;
			uint64_t a = (uint64_t)(uintptr_t)m;
			int32_t r;
			if (rel32(a + STUB_LEN, target, &r) && rel32(a, target, &r))
				return m;
			munmap(m, pg);
		}
	}
	return NULL;
}

static uint8_t *make(const struct stub *s, size_t *len)
{
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	uint8_t buf[STUB_LEN];
	uint8_t *m = place((uint64_t)(uintptr_t)s->orig, pg);
	if (!m)
		return NULL;
	size_t n = emit(buf, (uint64_t)(uintptr_t)m, s);
	if (n != STUB_LEN) {
		munmap(m, pg);
		return NULL;
	}
	memcpy(m, buf, n);
	/* Written, then executable and no longer writable. */
	if (mprotect(m, pg, PROT_READ | PROT_EXEC) != 0) {
		munmap(m, pg);
		return NULL;
	}
	__builtin___clear_cache((char *)m, (char *)m + n);
	*len = n;
	return m;
}

#else

static uint8_t *make(const struct stub *s, size_t *len)
{
	(void)s;
	(void)len;
	return NULL;
}

#endif

/* The object holding addr stays loaded for the life of the process (a stub jumps into it
 * and reads its data whenever a kept wrapper is called). */
static void pin(const void *addr)
{
	Dl_info info;
	if (dladdr(addr, &info) && info.dli_fname)
		(void)dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE | RTLD_NOLOAD);
}

static int same(const struct stub *a, const struct stub *b)
{
	return a->orig == b->orig && a->rare == b->rare && a->compiled == b->compiled &&
	       a->countdown == b->countdown && a->marks == b->marks && a->shift == b->shift;
}

agent_alloc_fn agent_allocstub_get(agent_alloc_fn orig, int64_t *countdown,
				   const int8_t *marks, unsigned shift, agent_alloc_rare_fn rare,
				   agent_alloc_fn compiled)
{
	/* LUAPROF_ALLOCSTUB=0: the compiled wrapper (to compare them, and under a policy that
	 * forbids generated code without failing mprotect). */
	char err[1];
	if (lp_stubenv_read(err, sizeof(err)) == LP_STUBENV_COMPILED || shift >= 64 || !orig ||
	    !rare)
		return NULL;
	struct stub want = { .orig = orig, .rare = rare, .compiled = compiled,
			     .countdown = countdown, .marks = marks, .shift = shift };
	agent_alloc_fn f = NULL;
	pthread_mutex_lock(&lock);
	unsigned n = atomic_load(&nstubs), i = 0;
	while (i < n && !same(&stubs[i], &want))
		i++;
	if (i < n) {
		f = (agent_alloc_fn)(void *)stubs[i].code;
	} else if (n < STUB_MAX) {
		want.code = make(&want, &want.len);
		if (want.code)
			pin((const void *)rare);
		stubs[n] = want;
		atomic_store_explicit(&nstubs, n + 1, memory_order_release);
		f = (agent_alloc_fn)(void *)want.code;
	}
	pthread_mutex_unlock(&lock);
	return f;
}

agent_alloc_fn agent_allocstub_orig(agent_alloc_fn f)
{
	unsigned n = atomic_load_explicit(&nstubs, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		if (stubs[i].code && (agent_alloc_fn)(void *)stubs[i].code == f)
			return stubs[i].orig;
	return NULL;
}

uint64_t agent_allocstub_find(uint64_t ip)
{
	unsigned n = atomic_load_explicit(&nstubs, memory_order_acquire);
	for (unsigned i = 0; i < n; i++) {
		uint64_t lo = (uint64_t)(uintptr_t)stubs[i].code;
		if (lo && ip >= lo && ip < lo + stubs[i].len)
			return (uint64_t)(uintptr_t)stubs[i].compiled;
	}
	return 0;
}
