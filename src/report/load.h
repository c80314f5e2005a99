/*
** Reading a whole profile file into aggregates: symtab, then memprof or sysprof events.
**
** This is the one place that connects the streaming parser to the aggregators; the CLI,
** the fuzz targets and the benchmarks all go through it.
*/
#ifndef LP_LOAD_H
#define LP_LOAD_H

#include <limits.h>

#include "report/memprof.h"
#include "report/symtab.h"
#include "report/sysprof.h"
#include "stream/parse.h"

/* Of a profile's first value column (CPU samples, bytes allocated), the most that ends in
 * code of one object no symbol names (object+0xOFFSET) and that object's path ("" when
 * none does), and the column's total: the CLI's note on that code (lp_cli_nosym_find). */
struct lp_nosym_share {
	char object[PATH_MAX];
	int64_t value, total;
	int bytes;                /* the column is bytes allocated, not samples */
};

/* What the in-process agent's extension meta says of the recording (0 when absent): for
 * `luaprof record`'s summary. */
struct lp_record_facts {
	uint64_t duration_ns, overruns, truncated, paced;  /* CPU profiles */
	uint64_t thread_cpu_ns;   /* CPU: the sampled thread's CPU time, 0 if unknown */
	uint64_t process_cpu_ns;  /* CPU: the whole process's over the profile, 0 if unknown */
	uint64_t run_delay_ns;    /* CPU: the sampled thread's wait for a CPU while runnable
				   * (the machine busy), 0 if unknown */
	uint64_t signal_taken_ns; /* CPU: the program took the signal this long in, or 0 */
	uint64_t signal;          /* CPU: the sampling signal's number, 0 if unknown */
	uint64_t trace_stacks_lost; /* CPU: TRACE, GC, compiler and exit samples whose full
				   * stacks the agent could not keep (meta trace_stacks_lost) */
	uint64_t lua_elsewhere;   /* CPU: samples taken while the Lua state ran on another
				   * thread than the one sampled (meta lua_elsewhere) */
	uint64_t agent_ticks;     /* CPU: ticks in the agent's own work, not sampled (meta
				   * agent_ticks) */
	int sampled;                                      /* memory: meta mode = "sampled" */
	uint64_t events, samples, samples_lost, sample_bytes, sample_ns;
	uint64_t section_bytes;   /* the profile section's size (events, no symbol table) */
	int stopped_by_program;   /* meta stopped_by = "program" (not exit or close) */
	int stopped_by_close;     /* meta stopped_by = "close": lua_close stopped it */
	int wall_clock;           /* meta clock = "wall": samples of elapsed time */
	int perf_clock;           /* meta timer = "perf task-clock": overruns are intervals of
				   * CPU time beyond 0.1 s that one signal stood for (the signal
				   * blocked, a long system call), not a coarse kernel tick */
	uint64_t alloc_bytes, trace_alloc_bytes; /* memory: allocated, and by traces (sampled:
						  * estimated, once a rendering ranked them) */
	struct lp_nosym_share nosym; /* once a rendering ranked the profile's frames */
};

/* One pair of the extension's meta, as written (duplicates kept, in stream order). */
struct lp_meta_pair {
	char *key, *value;
};

struct lp_loaded {
	enum lp_stream_kind kind;     /* 0 when the profile section was never reached */
	unsigned version;             /* the profile section's format version */
	struct lp_symtab *st;
	struct lp_memprof *mem;       /* memprof streams */
	struct lp_sysprof *sys;       /* sysprof streams */
	struct lp_sysprof *msamp;     /* memprof streams in sampled mode: the sampled stacks */
	struct lp_parse_stats stats;
	const char *cmdline;          /* the last meta "cmdline" (in meta[]), or NULL */
	uint64_t interval_ns;         /* extension meta "interval_ns", or 0 */
	uint64_t start_unix_ns;       /* extension meta "start_unix_ns", or 0 */
	uint64_t dropped;             /* extension meta "dropped": samples the producer lost */
	int sampled;                  /* a memprof stream with sampled allocations */
	struct lp_record_facts facts;
	struct lp_meta_pair *meta;    /* every meta pair: `luaprof report -f info` */
	size_t nmeta, metacap;
};

/*
** Parses `in` to the end. Returns LP_OK or the parser's status (message in `in`). On
** LP_ERR_TRUNCATED the aggregates hold every complete event before the cut and can be
** reported. Free with lp_loaded_free whatever the result.
*/
int lp_load(struct lp_input *in, const struct lp_sysprof_opts *so, struct lp_loaded *out);
/* The same, calling progress(ctx, bytes read so far) every LP_LOAD_PROGRESS_EVENTS items. */
#define LP_LOAD_PROGRESS_EVENTS 65536
typedef void (*lp_load_progress_fn)(void *ctx, uint64_t offset);
int lp_load_ex(struct lp_input *in, const struct lp_sysprof_opts *so,
	       lp_load_progress_fn progress, void *pctx, struct lp_loaded *out);
void lp_loaded_free(struct lp_loaded *l);

/* The loaded data as an aggregated profile (sysprof: samples; memprof: the four
 * allocation columns), with meta filled in. NULL on ENOMEM. Caller frees. */
struct lp_profile *lp_loaded_profile(struct lp_loaded *l, const char *source);

#endif
