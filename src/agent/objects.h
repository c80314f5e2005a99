/*
** Snapshot of the loaded objects for the signal handler (objects.c).
*/
#ifndef LP_AGENT_OBJECTS_H
#define LP_AGENT_OBJECTS_H

#include <stddef.h>
#include <stdint.h>

#define OBJ_MAX_TEXT   1024 /* executable segments */
#define OBJ_MAX_RANGES 4096 /* readable (loaded) segments */
#define OBJ_ID_MAX     20   /* build-id bytes kept to tell an object from another */

struct obj_text {
	uint64_t lo, hi;  /* executable segment */
	uint64_t hdr;     /* its object's .eh_frame_hdr, 0 if none (or an unusual encoding) */
	uint64_t table;   /* the header's binary-search table */
	uint64_t nfde;    /* entries in that table */
	uint64_t idaddr;  /* its object's GNU build-id in memory, 0 if none or never checked
			   * (an object that stays loaded: agent_objects_check) */
	uint32_t idlen;   /* bytes of it in id */
	uint8_t id[OBJ_ID_MAX];
};

struct obj_range {
	uint64_t lo, hi;  /* page-aligned */
};

struct objtab {
	struct obj_text text[OBJ_MAX_TEXT];   /* sorted by lo */
	size_t ntext;
	struct obj_range r[OBJ_MAX_RANGES];   /* sorted by lo */
	size_t nr;
};

/* Fills t's hdr, table and nfde from the .eh_frame_hdr mapped at hdr (len bytes), when it
 * has the usual encodings (GNU ld, gold and lld write these): 0, or -1. */
int agent_objects_parse_hdr(uint64_t hdr, uint64_t len, struct obj_text *t);

/* Outside the handler, on the sampled thread (its stack bounds are taken): 0 or -1. */
int agent_objects_init(char *err, size_t errlen);
void agent_objects_fini(void);
/* Re-reads the loaded objects (writer thread, after a load or unload). */
void agent_objects_refresh(void);
/* Writer thread: runs fn with a table of the objects loaded now, none of which can be
 * unloaded before fn returns (fn runs under the loader's lock: it must not wait for the
 * sampled thread, which may be waiting for that lock in dlopen or dlclose). */
void agent_objects_locked(void (*fn)(const struct objtab *, void *), void *arg);
/* Changes whenever the table does (init, refresh, fini): what depends on it is stale. */
unsigned agent_objects_gen(void);

/* Writer thread (the one that refreshes): the current table, without marking it busy. */
const struct objtab *agent_objects_current(void);
/* 1 while a walk holds a table from agent_objects_enter. */
int agent_objects_busy(void);
/* Handler: the current table, valid until agent_objects_leave; NULL before init. */
const struct objtab *agent_objects_enter(void);
void agent_objects_leave(void);
/* The executable segment holding ip, or NULL. */
const struct obj_text *agent_objects_text(const struct objtab *tab, uint64_t ip);
/* 1 if [addr, addr+len) lies in a loaded segment, or on the sampled thread's stack at or
 * above sp (the interrupted stack pointer: everything above it is mapped). */
int agent_objects_readable(const struct objtab *tab, uint64_t sp, uint64_t addr, size_t len);
/* The loaded segment holding addr into [*lo, *hi): 0, or -1 if none. */
int agent_objects_segment(const struct objtab *tab, uint64_t addr, uint64_t *lo, uint64_t *hi);
/* 1 if sp is on the sampled thread's stack. */
int agent_objects_on_stack(uint64_t sp);
/* 1 if [addr, addr+len) lies on the sampled thread's stack at or above lo. */
int agent_objects_stack_has(uint64_t lo, uint64_t addr, size_t len);
/*
** Outside the signal handler (sampled memprof's captures), on a thread that may not be the
** one agent_objects_init ran on (a host that starts the profile on one thread and runs the
** Lua state on another, as wrk does): the walks that follow, until
** agent_objects_stack_restore, take the calling thread's stack for the sampled one. Only
** where no handler walks meanwhile (memprof does not capture on another thread than the
** one the CPU profiler samples). 0, or -1 when this thread's stack is not known: the walks
** then stop at their first frame, said to be cut.
*/
struct agent_stack_save {
	uint64_t lo, hi;
	int swapped;
};
int agent_objects_stack_here(struct agent_stack_save *save);
void agent_objects_stack_restore(const struct agent_stack_save *save);
/* Handler: 1 if ip is code of a loaded object (agent_objects_late's too), or of an
 * allocator stub that stands for one (allocstub.h): C code, not JIT code. */
int agent_in_object(uint64_t ip);

/*
** The sampled thread's walks (the handler's; memprof's captures, which block its signal,
** or run on their own thread while no CPU profile does): code of an object loaded since
** the table was taken, before the writer thread reads the objects again. The executable
** segment holding ip, found through the loader without its lock (_dl_find_object) and
** kept with the object's loaded segments until agent_objects_late_reset (at each walk's
** start: an object unloaded after a walk is not trusted by the next), or NULL when no
** object holds ip (JIT code) or this glibc has no _dl_find_object. Never on another
** thread: the writer thread's walks have tables of their own.
*/
const struct obj_text *agent_objects_late(uint64_t ip);
void agent_objects_late_reset(void);
/* 1 if [addr, addr+len) lies in a loaded segment of an object agent_objects_late found. */
int agent_objects_late_readable(uint64_t addr, size_t len);

/*
** Handler: whether the table is stale for the n addresses of a sample: one of them lies in
** an object whose build-id is no longer the one mapped there (the object was unloaded and
** another loaded at its place: its addresses, looked up in the table, seem known). One
** read (process_vm_readv: no fault if unmapped) per object that may be unloaded, at most
** a few a sample. Returns agent_objects_note_stale()'s answer, 0 when not stale.
*/
int agent_objects_check(const uint64_t *ips, size_t n);
/* Handler: notes that the table is stale (the sample met code of an object it does not
 * list, or agent_objects_check): 1 the first time for this table, when the writer thread
 * should read the objects again before it writes this sample. */
int agent_objects_note_stale(void);
/* Handler: 1 once after agent_objects_note_stale returned 1 (cleared): the sample being
 * taken is the first the objects read again name. */
int agent_objects_take_stale(void);

#endif
