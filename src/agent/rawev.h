/*
** Raw allocation events: what exact-mode memprof stores on the VM's thread for an event (a
** few fixed-width words, no encoding), and their encoding into "ljm" events, done where
** the stream is written: the profile file's writer thread, or the writer callback.
*/
#ifndef AGENT_RAWEV_H
#define AGENT_RAWEV_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
** A record is a sequence of 64-bit words in host byte order. A producer that starts on an
** 8-byte boundary stays on one, as agent_rawev_word_nt needs. The first,
** w0, holds in its low byte the header the ljm event will have (event | source), then:
**   narrow (no AGENT_RAWEV_WIDE bit): w0 = header | num << 8 | size1 << 32, for
**     num < 2^24 and size1 < 2^32;
**   wide (AGENT_RAWEV_WIDE set in the low byte): w0 = header | AGENT_RAWEV_WIDE, then a
**     word for num and one for size1;
**   then the source's address word for LFUNC (the prototype) and CFUNC (the function);
**   then FREE: oaddr; ALLOC: naddr; REALLOC: oaddr, osize, naddr.
** num is the line of LFUNC and the trace number of TRACE (0 otherwise); size1 is a FREE's
** osize and the nsize of the others.
**
** Stream bytes that are not events (symbol table, symbols, epilogue, extension) are carried
** as they are, in a blob: w0 = AGENT_RAWEV_BLOB | len << 8, then len bytes, then
** AGENT_RAWEV_BLOB_PAD(len) bytes of padding that the encoder skips.
**
** A producer never splits an event record between two buffers it hands over; a blob may be
** split anywhere (the encoder carries what is left of it from one call to the next).
*/
#define AGENT_RAWEV_WIDE 0x80
#define AGENT_RAWEV_BLOB 0x40
#define AGENT_RAWEV_BLOB_PAD(len) ((size_t)(-(uint64_t)(len) & 7))

/* The longest event record: w0, num, size1, the source's address, oaddr, osize, naddr. */
#define AGENT_RAWEV_MAX (7 * 8)

/* The longest event once encoded: header and six ULEB128 fields, and a byte that
 * lp_uleb_put_addr may store past the last. */
#define AGENT_RAWEV_ENC_MAX (1 + 6 * 10 + 1)

/* The narrow form's limits. */
#define AGENT_RAWEV_NUM_LIMIT  (1ull << 24)
#define AGENT_RAWEV_SIZE_LIMIT (1ull << 32)

static inline uint8_t *agent_rawev_word(uint8_t *p, uint64_t v)
{
	memcpy(p, &v, sizeof(v));
	return p + 8;
}

/*
** The same store, past the caches where the machine has one (x86-64 movnti): the VM's
** thread writes exact mode's records at up to a GB a second and never reads them again,
** and through the caches (2 MiB halves of the file's buffer over a 1 MiB L2) they evicted
** the program's own data. In-process A/B, binary-trees at depth 16, JIT on: 1.157 / 1.162
** against 1.322 / 1.212 (docs/OVERHEAD.md). p must be 8-byte aligned (the pointer cast;
** movnti itself would take any address). The thread that reads them needs
** agent_rawev_publish first.
*/
static inline uint8_t *agent_rawev_word_nt(uint8_t *p, uint64_t v)
{
#if defined(__x86_64__)
	__builtin_ia32_movnti64((long long *)(void *)p, (long long)v);
	return p + 8;
#else
	return agent_rawev_word(p, v);
#endif
}

/* Orders the calling thread's stores of agent_rawev_word_nt before those that follow (the
 * hand-over of their buffer to another thread), which the hand-over's release ordering is
 * not documented to do. Memprof's buffer is filled and handed over by the thread that runs
 * the VM; a host that moves a lua_State to another thread does so under its own lock,
 * whose locked instruction drains the write-combining buffers too on x86-64. */
static inline void agent_rawev_publish(void)
{
#if defined(__x86_64__)
	__builtin_ia32_sfence();
#endif
}

/* w0 of a narrow record (num < AGENT_RAWEV_NUM_LIMIT, size1 < AGENT_RAWEV_SIZE_LIMIT). */
static inline uint64_t agent_rawev_w0(unsigned header, uint64_t num, uint64_t size1)
{
	return header | num << 8 | size1 << 32;
}

/* Any event, narrow or wide: returns the position after it (p has AGENT_RAWEV_MAX bytes).
 * loc_addr is used by LFUNC and CFUNC, num by LFUNC (line) and TRACE (number). */
uint8_t *agent_rawev_put(uint8_t *p, unsigned header, uint64_t num, uint64_t loc_addr,
			 uint64_t oaddr, uint64_t osize, uint64_t naddr, uint64_t nsize);

/* The encoder's state between calls: what is left of a blob and of its padding, and
 * whether the input went wrong (a record cut at the end of a buffer, or an unknown
 * header). Zero it to start. */
struct agent_rawev_enc {
	uint64_t blob_left;
	int bad;
	unsigned blob_pad;
};

/*
** Encodes raw records from in[0, len) into out[0, cap) (cap >= AGENT_RAWEV_ENC_MAX), as
** far as out holds them: returns the input bytes used and sets *olen to the bytes written.
** Call again with the rest of the input while it returns less than len. After bad input it
** sets e->bad and uses the whole of in: nothing after it can be read.
*/
size_t agent_rawev_encode(struct agent_rawev_enc *e, const uint8_t *in, size_t len,
			  uint8_t *out, size_t cap, size_t *olen);

#endif
