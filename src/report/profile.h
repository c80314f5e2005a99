/*
** Aggregated profile: interned frames, distinct stacks and their values.
**
** Every report format renders from this one model. Memory grows with the number of
** distinct frames and stacks, never with the number of samples or events. Stacks are
** stored root first. A profile has 1..LP_MAX_VALUES value columns (e.g. samples, or
** alloc_space/alloc_objects/inuse_space/inuse_objects) in the pprof sense.
*/
#ifndef LP_PROFILE_H
#define LP_PROFILE_H

#include <stddef.h>
#include <stdint.h>

#define LP_MAX_VALUES 4

enum lp_frame_kind {
	LP_FK_LUA,      /* Lua function: name = chunk name, line = current line */
	LP_FK_C,        /* native code: name = symbol, "module+0xoff" or "0xaddr" */
	LP_FK_FFUNC,    /* LuaJIT fast function (builtin): name = "pcall" or "builtin#N" */
	LP_FK_TRACE,    /* JIT trace: name = chunk, line = line in the trace, traceno set */
	LP_FK_VMSTATE,  /* VM state pseudo-frame: name = "INTERP", "GC", ... */
	LP_FK_INTERNAL, /* memprof INTERNAL source */
	LP_FK__MAX
};

struct lp_frame {
	enum lp_frame_kind kind;
	const char *name;  /* see the kinds above; never NULL */
	const char *file;  /* object path of a C frame when known, else NULL */
	uint32_t line;     /* current line (Lua, trace); 0 if none */
	uint32_t fline;    /* first line of the Lua function (Lua, trace); 0 if unknown */
	uint32_t traceno;  /* TRACE frames */
	uint64_t addr;     /* C: symbol start or address (part of the identity); else 0 */
	uint8_t nosym;     /* C: no symbol covers the address (name: object+offset of it);
			    * Lua: the symbol table has no such prototype (name: a stand-in
			    * for it, "[unknown function 0x...]"), so no first line either */
	uint32_t tline;    /* TRACE: the line where the trace starts, 0 if unknown (its row
			    * by function, whichever line a frame has) */
	uint8_t func;      /* Lua: the whole function (lp_profile_by_function), line its
			    * first line: labelled as a function, not as a line (not set
			    * for an unknown prototype: nosym). Last two, so that
			    * initializers by position stay valid */
};

/* What a profile measures, for titles and pprof's period/sample types. */
struct lp_value_type {
	const char *type;  /* "samples", "alloc_space", ... */
	const char *unit;  /* "count", "bytes", "nanoseconds" */
};

/* Strings in the meta are borrowed: the caller keeps them alive as long as the profile. */
struct lp_profile_meta {
	const char *source;       /* input file name */
	const char *title;        /* command line or description; may be NULL */
	const char *event;        /* "cpu" or "memory" */
	uint64_t period_ns;       /* sampling interval, 0 if unknown: on average, with the
				   * timer's ticks that the kernel merged into samples */
	uint64_t period_asked_ns; /* the interval asked for, when period_ns differs */
	uint64_t cut;             /* samples whose stacks were cut short (outermost frames
				   * missing: deeper than the profiler keeps, or unwound no
				   * further) */
	int wall_clock;           /* CPU profile: the interval is elapsed time, not CPU time */
	uint64_t period_bytes;    /* memory: mean bytes between samples (1: every event),
				   * 0 if unknown */
	uint64_t vmstate[10];     /* sysprof samples per VM state */
	uint64_t samples;         /* samples or events read */
	uint64_t dropped;         /* samples the producer or the merge could not use */
	int drops_unrecorded;     /* the stream keeps no count of what its producer dropped
				   * (Tarantool's): a dropped of 0 says nothing, and is not
				   * shown */
	uint64_t start_unix_ns;   /* when the profile started (Unix time, ns), 0 if unknown */
	uint64_t duration_ns;     /* how long it ran, 0 if unknown */
	int truncated;            /* the stream ended without its epilogue */
};

struct lp_profile;

struct lp_profile *lp_profile_new(unsigned nvalues, const struct lp_value_type *types);
void lp_profile_free(struct lp_profile *p);

/* Interns a frame (strings copied); equal fields give the same id.
 * Returns 0 or -ENOMEM. */
int lp_profile_frame_id(struct lp_profile *p, const struct lp_frame *f, uint32_t *id);
/* Deepest stack kept: a deeper one keeps its innermost frames (counted in meta.cut). The
 * agent writes at most a few hundred; a stream of Tarantool's or a crafted one may hold
 * tens of thousands, which every rendering would repeat label by label. */
#define LP_PROFILE_MAX_DEPTH 4096
/* Adds values to the stack of `depth` frame ids, root first. Returns 0 or -ENOMEM. */
int lp_profile_add(struct lp_profile *p, const uint32_t *frames, size_t depth,
		   const int64_t *values);

unsigned lp_profile_nvalues(const struct lp_profile *p);
const struct lp_value_type *lp_profile_value_type(const struct lp_profile *p, unsigned i);
size_t lp_profile_nframes(const struct lp_profile *p);
const struct lp_frame *lp_profile_frame(const struct lp_profile *p, uint32_t id);
size_t lp_profile_nstacks(const struct lp_profile *p);
/* The i-th distinct stack, in insertion order: frame ids root first and its values. */
void lp_profile_stack(const struct lp_profile *p, size_t i, const uint32_t **frames,
		      size_t *depth, const int64_t **values);
/* a + b, clamped to the int64_t range: values come from untrusted streams. */
static inline int64_t lp_sat_add(int64_t a, int64_t b)
{
	int64_t r;
	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

/* Sum of column `v` over all stacks (saturating). */
int64_t lp_profile_total(const struct lp_profile *p, unsigned v);

struct lp_profile_meta *lp_profile_meta(struct lp_profile *p);
const struct lp_profile_meta *lp_profile_cmeta(const struct lp_profile *p);

/*
** Writes the display label of a frame: "@app.lua:12" (Lua, current line), "function
** <@app.lua:10>" and "main chunk <@app.lua>" (Lua by function), "lj_gc_step", "pcall",
** "TRACE [3] @app.lua:7", "GC", "INTERNAL". Returns the label length (as snprintf).
*/
int lp_frame_label(const struct lp_frame *f, char *buf, size_t len);

/*
** Whether a and b are Lua frames that read the same (lp_frame_label), though they are two
** frames: one line of a chunk in two functions (a closure made on the line that runs it),
** a chunk loaded twice. The flame graph and speedscope draw them as one.
*/
int lp_frame_lua_same(const struct lp_frame *a, const struct lp_frame *b);

/* Kind names for legends and formats: "Lua", "C", "builtin", "trace", "vmstate", "internal". */
const char *lp_frame_kind_name(enum lp_frame_kind k);

/*
** Returns a new profile whose frames are those of p rewritten by fn (which may point the
** frame's strings at buf, a scratch of buflen bytes); stacks whose frames become equal
** merge. NULL on ENOMEM.
*/
typedef void (*lp_frame_map_fn)(void *ctx, struct lp_frame *f, char *buf, size_t buflen);
struct lp_profile *lp_profile_remap(const struct lp_profile *p, lp_frame_map_fn fn, void *ctx);

/*
** Returns a new profile in which Lua frames are keyed by function (line = first line of the
** function) instead of by current line; other frames are unchanged. NULL on ENOMEM.
*/
struct lp_profile *lp_profile_by_function(const struct lp_profile *p);

#endif
