/*
** Allocator stubs: sampled memprof's allocator wrapper as a few instructions of generated
** machine code placed within a direct jump of the allocator it wraps.
*/
#ifndef AGENT_ALLOCSTUB_H
#define AGENT_ALLOCSTUB_H

#include <stddef.h>
#include <stdint.h>

typedef void *(*agent_alloc_fn)(void *ud, void *ptr, size_t osize, size_t nsize);
/* The rare path also gets the original the stub wraps: a wrapper a program kept may be
 * called while another allocator's profile runs, and must then only pass the call on. */
typedef void *(*agent_alloc_rare_fn)(void *ud, void *ptr, size_t osize, size_t nsize,
				     agent_alloc_fn orig);

/*
** Why: every allocation and free the VM makes goes through the wrapper, and the compiled
** wrapper (a C function in this shared object, far from the VM) can only reach the original
** allocator by an indirect jump. On binary trees (50 M allocator calls a second) that jump
** alone costs 1.5-2 points over a direct one (docs/OVERHEAD.md), half of sampled mode's
** budget. A stub does what the compiled wrapper's hot path does, in the same registers:
**
**     left = *countdown - nsize; *countdown = left;
**     if ((left | marks[(ptr >> shift) & 0xffff]) < 0)
**             tail-call rare(ud, ptr, osize, nsize, orig);
**     tail-call orig(ud, ptr, osize, nsize);          (a direct jump)
**
** marks has 65536 entries (AGENT_ALLOCSTUB_MARKS); shift is below 64. countdown, marks and
** rare must stay valid for the life of the process: a stub is never freed (a wrapper that
** a program kept from lua_getallocf may be called at any later time).
*/
#define AGENT_ALLOCSTUB_MARKS 65536

/*
** A stub for these arguments (the same one again for the same arguments), or NULL where
** none can be made: not x86-64, no executable memory (a W^X policy), no free address range
** within a direct jump of orig, or no memory; or LUAPROF_ALLOCSTUB=0 in the environment.
** compiled is the C function the stub stands for, which names it in stacks. Not for signal
** handlers.
*/
agent_alloc_fn agent_allocstub_get(agent_alloc_fn orig, int64_t *countdown,
				   const int8_t *marks, unsigned shift, agent_alloc_rare_fn rare,
				   agent_alloc_fn compiled);

/* The original allocator the stub f wraps, or NULL when f is no stub. */
agent_alloc_fn agent_allocstub_orig(agent_alloc_fn f);

/* For ip inside a stub, the address of the function it stands for; else 0. A stub keeps no
 * frame: its return address is at the stack pointer. Async-signal-safe. */
uint64_t agent_allocstub_find(uint64_t ip);

#endif
