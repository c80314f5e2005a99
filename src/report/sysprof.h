/*
** CPU profile aggregation: sysprof samples into merged C + Lua stacks.
**
** A sample carries the Lua stack of the running coroutine and the host (C) stack
** separately. They are merged root first: host frames, with each Lua segment spliced
** right after the host frame through which C entered the VM for it (lj_vm_pcall,
** lj_vm_call, lj_vm_cpcall, lj_vm_resume, luaV_execute when named; on a stripped VM the
** lua_* API frames that call into the VM, and VM code - the interpreter block or a trace,
** i.e. code outside every mapped object (without the extension's maps: code no symbol
** covers) - called directly by another named C function, since
** lua_call tail-calls the VM and C builtins and FFI callbacks enter it without an API
** frame). Segments are split at the C functions that called back into Lua, and those
** C functions are then named by the host stack, so no frame is counted twice; nested
** C -> Lua -> C -> Lua works at any depth. Pairing runs from the innermost segment
** outwards, so a short host stack still keeps every Lua frame (unmatched outer segments
** become the root), and only anchors at or inside the innermost resume take part,
** because the stream holds the running coroutine's frames only.
**
** C addresses are resolved after the whole stream is read, so the symbol table and
** anything learned late name them consistently. Samples with Lua frames are merged then
** too: the anchors depend on which code a symbol covers, and the symbols' sizes and the
** mapped objects (luaprof extension) follow the last sample.
*/
#ifndef LP_SYSPROF_H
#define LP_SYSPROF_H

#include "report/profile.h"
#include "report/symtab.h"
#include "stream/parse.h"

struct lp_sysprof_opts {
	int split;  /* add one pseudo-root per VM state */
};

struct lp_sysprof;

/* The symtab is borrowed and must outlive the aggregator. */
struct lp_sysprof *lp_sysprof_new(struct lp_symtab *st, const struct lp_sysprof_opts *o);
void lp_sysprof_free(struct lp_sysprof *s);
/* Accounts one sample. Returns 0 or -ENOMEM. */
int lp_sysprof_sample(struct lp_sysprof *s, const struct lp_sys_sample *smp);
/* Builds the final profile (column "samples"), C frames named. NULL on ENOMEM. The
 * caller owns the result; the aggregator may be freed afterwards. */
struct lp_profile *lp_sysprof_profile(struct lp_sysprof *s);
/* Names fast functions by id from the producer's list (space-separated, "-" for none; the
 * lpx meta "ffnames"); frames of unknown ids stay "builtin#N". Returns 0 or -ENOMEM. */
int lp_sysprof_set_ffnames(struct lp_sysprof *s, const char *names);
/*
** The extension's full stacks of TRACE samples (stack and tsample records): a TRACE sample
** is shown under the merged stack its ordinal maps to, else alone. They may arrive in any
** order; they are applied when the profile is built. Return 0 or -ENOMEM.
*/
int lp_sysprof_stack(struct lp_sysprof *s, uint64_t id, const struct lp_lua_frame *lua,
		     size_t nlua, const uint64_t *host, size_t nhost);
int lp_sysprof_tsample(struct lp_sysprof *s, uint64_t ordinal, uint64_t id);
/* The extension's stacks of GC samples (stack and gsample records): GC sample `ordinal`
 * (0-based, counting GC samples only) is shown under the merged stack `id` of the code
 * that ran the collector, with a GC frame on top; else by its own host stack. Returns 0
 * or -ENOMEM. */
int lp_sysprof_gsample(struct lp_sysprof *s, uint64_t ordinal, uint64_t id);
/* The same for JIT compiler samples (RECORD, OPT, ASM; jsample records): compiler sample
 * `ordinal` (counting those only) is shown under the merged stack `id` of the Lua code
 * being compiled and the compiler's, with its state's frame on top. */
int lp_sysprof_jsample(struct lp_sysprof *s, uint64_t ordinal, uint64_t id);
/* The same for trace exit samples (EXIT; xsample records): under the merged stack of the
 * Lua frames the exit returns to and the exit handler's, with an EXIT frame on top. */
int lp_sysprof_xsample(struct lp_sysprof *s, uint64_t ordinal, uint64_t id);
/* Tells that the Lua symbol of proto is about to be replaced (its address was reused):
 * TRACE samples read so far keep the old name. Returns 0 or -ENOMEM. */
int lp_sysprof_lua_replaced(struct lp_sysprof *s, uint64_t proto, const struct lp_sym_lua *old);
/*
** Memory samples (memprof sampled mode): an aggregator whose profile has the columns
** alloc_space, alloc_objects, inuse_space, inuse_objects, built from stack records
** (lp_sysprof_stack) and sampled allocations. Each sample stands for 1 / (1 - exp(-size /
** sample_bytes)) allocations of its size (sample_bytes: the producer's mean interval; 0
** counts each sample once). Return NULL / 0 or -ENOMEM.
*/
struct lp_sysprof *lp_sysprof_new_memory(struct lp_symtab *st);
/* count sampled allocations of stack id, each of size bytes, live or freed at stop. */
int lp_sysprof_asample(struct lp_sysprof *s, uint64_t id, uint64_t size, int live,
		       uint64_t count);
/* The sampled allocations of stack id were the collector's or the JIT compiler's (vmstate
 * GC, RECORD, OPT or ASM): shown with that state's frame on top, as CPU samples are. */
int lp_sysprof_astate(struct lp_sysprof *s, uint64_t id, unsigned vmstate);
void lp_sysprof_set_sample_bytes(struct lp_sysprof *s, uint64_t sample_bytes);
uint64_t lp_sysprof_nasamples(const struct lp_sysprof *s);
/* Samples counted per VM state so far. */
const uint64_t *lp_sysprof_vmstates(const struct lp_sysprof *s);

#endif
