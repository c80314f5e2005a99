/*
** Memory-read interface for the VM models: every byte a model looks at comes through here.
**
** Three readers share one model: the in-process signal handler, the out-of-process sampler
** and the unit tests. A reader copies len bytes at a target address into buf and returns 0,
** or returns -1 and leaves buf unspecified when any byte of the range cannot be read; it
** never faults. Readers used from a signal handler must be async-signal-safe (no malloc, no
** locks, no stdio) and preserve errno: both readers below are.
*/
#ifndef LP_VM_MEM_H
#define LP_VM_MEM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

struct lp_mem {
	int (*read)(void *ctx, uint64_t addr, void *buf, size_t len); /* 0 ok, -1 unreadable */
	void *ctx;                                                    /* the reader's state */
};

/*
** Reads through m. A zero-length read succeeds; address ranges that wrap fail. A reader
** without a read function reads plain memory of this process, inline: for callers that
** only follow addresses they know to be mapped (memprof's walks, at an allocation, where
** the VM's state is consistent), at the cost of a load rather than of a call.
*/
static inline int lp_mem_read(const struct lp_mem *m, uint64_t addr, void *buf, size_t len)
{
	if (len == 0)
		return 0;
	if (addr + len < addr)
		return -1;
	if (!m->read) {
		memcpy(buf, (const void *)(uintptr_t)addr, len);
		return 0;
	}
	return m->read(m->ctx, addr, buf, len);
}

/* Fixed-width helpers; little-endian target (x86_64) read on a little-endian host. */
static inline int lp_mem_u64(const struct lp_mem *m, uint64_t addr, uint64_t *v)
{
	return lp_mem_read(m, addr, v, sizeof(*v));
}

static inline int lp_mem_u32(const struct lp_mem *m, uint64_t addr, uint32_t *v)
{
	return lp_mem_read(m, addr, v, sizeof(*v));
}

static inline int lp_mem_u8(const struct lp_mem *m, uint64_t addr, uint8_t *v)
{
	return lp_mem_read(m, addr, v, sizeof(*v));
}

/* -- Image reader ------------------------------------------------------------
** Reads from a caller-owned set of (address, bytes) regions: synthetic memory for tests, a
** captured copy (BPF sample, core excerpt), or, with bytes == (void *)addr, direct
** in-process reads bounded to ranges already known to be mapped. A read may span regions
** only where they are contiguous. Regions may be in any order and must not overlap. */

struct lp_mem_region {
	uint64_t addr;     /* target address of bytes[0] */
	const void *bytes; /* len bytes, owned by the caller */
	size_t len;
};

struct lp_mem_image {
	const struct lp_mem_region *regions; /* caller-owned array */
	size_t count;
	uint64_t reads, fails; /* statistics, updated by every read */
};

/* Points m at img; img must outlive m. */
void lp_mem_image_init(struct lp_mem *m, struct lp_mem_image *img);

/* -- process_vm_readv reader -------------------------------------------------
** Reads another process's memory (or this one's, pid == getpid()) with process_vm_readv(2).
** The kernel copies with fault handling, so a bad address gives EFAULT instead of SIGSEGV:
** safe from a signal handler in the process itself. A short read counts as a failure.
** Reading another process needs ptrace-attach permission (same uid, and with YAMA
** ptrace_scope = 1 the target must be a descendant or have named us with PR_SET_PTRACER;
** or CAP_SYS_PTRACE); reading one's own pid always works. About 1 us per read whatever the
** size up to a page: measurements in mem.c. */

struct lp_mem_pid {
	pid_t pid;
	uint64_t reads, fails; /* statistics; not atomic: one reader per thread */
	int last_errno;        /* errno of the last failed read, 0 if none */
};

void lp_mem_pid_init(struct lp_mem *m, struct lp_mem_pid *p, pid_t pid);

/* Unaligned little-endian fetches from bytes already copied out of the target. */
static inline uint64_t lp_get64(const unsigned char *b, unsigned off)
{
	uint64_t v;
	memcpy(&v, b + off, sizeof(v));
	return v;
}

static inline uint32_t lp_get32(const unsigned char *b, unsigned off)
{
	uint32_t v;
	memcpy(&v, b + off, sizeof(v));
	return v;
}

static inline uint16_t lp_get16(const unsigned char *b, unsigned off)
{
	uint16_t v;
	memcpy(&v, b + off, sizeof(v));
	return v;
}

#endif
