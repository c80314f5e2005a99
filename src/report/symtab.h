/*
** Symbol table built from a stream: Lua prototypes, JIT traces and C symbols, and how
** addresses found in events are named.
**
** Entries arrive in the stream's symtab section and mid-stream; a later Lua prototype or
** trace at the same key replaces the earlier one (the VM reuses addresses after a GC), so
** callers resolve each event when they read it. C symbols carry no size in the format:
** an address is named after the closest symbol below it only when it lies within
** LP_SYMTAB_MAX_CSPAN of it and, when the stream lists the mapped objects (luaprof
** extension), inside the same object; otherwise it is shown as "object+0xoffset" or as
** a raw address, never as an unrelated function.
*/
#ifndef LP_SYMTAB_H
#define LP_SYMTAB_H

#include <stddef.h>
#include <stdint.h>

/* Longest chunk name shown (longer ones are cut, with "..."): PATH_MAX. */
#define LP_SYMTAB_MAX_NAME 4096
/* Largest distance from a C symbol at which an address is still attributed to it. */
#define LP_SYMTAB_MAX_CSPAN (256u * 1024u)

struct lp_symtab;

struct lp_sym_lua {
	const char *chunk;   /* display chunk name, one pointer per raw name: a chunk loaded
			      * from a string as LuaJIT's tracebacks show it, [string "its first
			      * line..."] (chunks alike in their first 45 bytes look alike) */
	const char *tchunk;  /* the same as Tarantool's memprof report shows it: a multi-line
			      * name is an alias, "function_alias_N" (lp_symtab_alias) */
	uint32_t firstline;
};

struct lp_sym_trace {
	uint64_t proto;      /* start prototype */
	uint32_t line;       /* start line */
};

struct lp_sym_c {
	const char *name;
	uint64_t start;      /* symbol address */
	uint64_t size;       /* extent when the stream gives it, else 0 */
	uint64_t def;        /* the run of symbols that gave its address this name
			      * (lp_symtab_c_event): the one it came in, or for a name given
			      * again, the run it repeats */
	const char *standin; /* the stream's own name, when a cname record replaced it
			      * (lp_symtab_set_cname), else NULL */
};

struct lp_symtab *lp_symtab_new(void);
void lp_symtab_free(struct lp_symtab *st);

/* Each returns 0 or -ENOMEM. */
int lp_symtab_add_lua(struct lp_symtab *st, uint64_t proto, const char *chunk, size_t len,
		      uint64_t firstline);
int lp_symtab_add_cfunc(struct lp_symtab *st, uint64_t addr, const char *name, size_t len);
int lp_symtab_add_trace(struct lp_symtab *st, uint64_t traceno, uint64_t proto, uint64_t line);

/*
** An event (memory event, CPU sample) was read: C symbols added after it are a new run.
** A C symbol at an address that an earlier run named otherwise replaces that run's there
** (a library unloaded and another loaded at its address, named anew mid-stream), for what
** is resolved after it; the symbols of one run at one address, and a name given again,
** are aliases. 0 or -ENOMEM.
*/
int lp_symtab_c_event(struct lp_symtab *st);
/*
** The C epoch of what is read now: 0 until a run replaced a name, then one more after
** each run that did. An event resolved later (a CPU sample, named after the whole stream)
** keeps it, and is named by lp_symtab_c_at / lp_symtab_name_c_at: at each address, the
** name of the latest run up to that epoch, or when none had named the address yet, the
** first run that did (a library the agent names once it sees it: its code was sampled
** before).
*/
uint32_t lp_symtab_c_epoch(const struct lp_symtab *st);

/* Lookups return NULL when unknown; results stay valid until the next add. */
const struct lp_sym_lua *lp_symtab_lua(const struct lp_symtab *st, uint64_t proto);
const struct lp_sym_trace *lp_symtab_trace(const struct lp_symtab *st, uint64_t traceno);
/* The function where trace traceno starts, and its symbol in *trace, when that is certain
 * so far: neither symbol has been redefined yet (a reused trace number over a reused
 * prototype address may keep an older trace's symbol); else NULL. */
const struct lp_sym_lua *lp_symtab_trace_start(const struct lp_symtab *st, uint64_t traceno,
					      const struct lp_sym_trace **trace);
/* The same as the stream defines them at this point, for a reader that is going through
 * it (a sample names its trace after the symbols written before it), redefined or not. */
const struct lp_sym_lua *lp_symtab_trace_start_now(const struct lp_symtab *st,
						  uint64_t traceno,
						  const struct lp_sym_trace **trace);
/* The C symbol that contains addr under the span rule above, or NULL: by the latest
 * names, or with _at as at a C epoch (lp_symtab_c_epoch). */
const struct lp_sym_c *lp_symtab_c(struct lp_symtab *st, uint64_t addr);
const struct lp_sym_c *lp_symtab_c_at(struct lp_symtab *st, uint64_t addr, uint32_t epoch);
/* The extent of the C symbol at addr (luaprof extension); addresses past it are not
 * named after it. Unknown addresses are ignored. */
void lp_symtab_set_csize(struct lp_symtab *st, uint64_t addr, uint64_t size);
/* The Lua name of the C function whose entry is addr (cname record): it replaces the
** stand-in names ("object+0xoffset") that the last run naming addr gave it; a real symbol
** there (an ELF name) wins, and an address no stand-in names keeps its name. Returns 0 or
** -ENOMEM. */
int lp_symtab_set_cname(struct lp_symtab *st, uint64_t addr, const char *name, size_t len);
/* A mapped object from the luaprof extension. Returns 0 or -ENOMEM. */
int lp_symtab_add_map(struct lp_symtab *st, uint64_t start, uint64_t end, uint64_t offset,
		      const char *path);
/*
** Names a native address by the rules above: returns its symbol's name (valid until the
** next add, whatever its length), or else writes a name (object+0xoffset, 0xaddr) to buf
** and returns buf. *start gets the symbol address (the address itself when there is no
** symbol) and *object the object's path or NULL.
*/
const char *lp_symtab_name_c(struct lp_symtab *st, uint64_t addr, char *buf, size_t len,
			     uint64_t *start, const char **object);
/* The same as at a C epoch (lp_symtab_c_epoch). */
const char *lp_symtab_name_c_at(struct lp_symtab *st, uint64_t addr, uint32_t epoch, char *buf,
				size_t len, uint64_t *start, const char **object);
/* Whether addr lies in a mapped object: 1 yes, 0 no (JIT code, say), -1 the stream gave
 * no mapped objects (a Tarantool stream, or before the extension is read). */
int lp_symtab_mapped(struct lp_symtab *st, uint64_t addr);
/* The machine code of trace traceno, [start, start + size) (luaprof extension): 0 or
 * -ENOMEM. */
int lp_symtab_add_tcode(struct lp_symtab *st, uint64_t traceno, uint64_t start, uint64_t size);
/* The machine code of trace traceno at the keyed addresses [key, key + size) (kcode
 * record), the trace starting at line of prototype proto: 0 or -ENOMEM. */
int lp_symtab_add_kcode(struct lp_symtab *st, uint64_t traceno, uint64_t key, uint64_t size,
			uint64_t proto, uint64_t line);
/*
** The trace whose machine code holds addr, when that is certain: 0 with its number and its
** trace and prototype symbols; -1 when no extent holds addr, or the extent overlaps one of
** another trace number, or the trace's symbol or its prototype's was redefined in the
** stream (numbers and addresses are reused: the extent cannot tell which definition it
** went with). A keyed address (LP_HOST_KEYED) has its trace's start in its kcode record:
** only the prototype's symbol must be certain.
*/
int lp_symtab_tcode(struct lp_symtab *st, uint64_t addr, uint64_t *traceno,
		    const struct lp_sym_trace **trace, const struct lp_sym_lua **fn);
/* The kcode record whose keyed extent holds addr (LP_HOST_KEYED), unambiguous: 0 with its
 * trace number and start (prototype key, line); else -1. Which function that prototype
 * key named when the frame was taken is the caller's question (lp_symtab_tcode takes its
 * symbol only when never redefined). */
int lp_symtab_kcode(struct lp_symtab *st, uint64_t addr, uint64_t *traceno,
		    const struct lp_sym_trace **trace);
/* Counts Lua prototype additions and replacements, so callers can cache names. */
uint64_t lp_symtab_lua_generation(const struct lp_symtab *st);
/* How many Lua or trace symbols replaced one of another content, and C symbols an earlier
 * run's (lp_symtab_c_event), so far: while 0, a key has always named the same thing. */
uint64_t lp_symtab_redefinitions(const struct lp_symtab *st);
/* 1 once the luaprof extension gave symbol extents or mapped objects, which let
 * lp_symtab_name_c tell an address outside every known function. */
int lp_symtab_has_extents(const struct lp_symtab *st);
/*
** LuaJIT's interpreter block, [lo, hi): from lj_vm_asm_begin to lj_vm_ffi_call, which
** follows it (the names luaprof's agent gives them, and those of an unstripped LuaJIT,
** the latest of each): 1 when both are known, in that order and at most
** LP_SYMTAB_MAX_CSPAN apart; else 0. An unstripped LuaJIT names the code inside after its
** handlers and routines (lj_BC_*, lj_ff_*, lj_vm_*): this tells it for VM code all the same.
*/
int lp_symtab_vm_block(const struct lp_symtab *st, uint64_t *lo, uint64_t *hi);
/* Number of C symbols added so far (changes invalidate callers' address caches). */
size_t lp_symtab_ncsyms(const struct lp_symtab *st);

/* Chunk names containing newlines get aliases "function_alias_N" in order of appearance
 * (lp_sym_lua's tchunk). */
size_t lp_symtab_naliases(const struct lp_symtab *st);
void lp_symtab_alias(const struct lp_symtab *st, size_t i, const char **alias,
		     const char **chunk);

#endif
