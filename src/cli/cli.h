/*
** Subcommands of the luaprof command-line tool.
*/
#ifndef LP_CLI_H
#define LP_CLI_H

#include <stdint.h>
#include <stdio.h>

/* Exit codes shared by every subcommand (documented in each --help). */
enum {
	LP_EXIT_OK = 0,
	LP_EXIT_USAGE = 1,      /* bad arguments, unreadable input, unwritable output */
	LP_EXIT_MALFORMED = 2,  /* the input is not a valid profile stream */
	LP_EXIT_TRUNCATED = 3   /* the input ends early: the report covers what was read */
};

/* record's and report's refusal of --value with the memprof text report. */
#define LP_CLI_VALUE_MEMPROF                                                                \
	"the memprof text report lists allocations, reallocations, frees and the heap "     \
	"summary: --value applies to the graphs, pprof, top and annotate (-f flamegraph, "  \
	"collapsed, pprof, speedscope, top, annotate)"

int lp_cmd_report(int argc, char **argv);
/* The same, also handing back what the stream's meta says of the recording (for record)
 * and, when top > 0 and the rendering is not a list itself (-f top, memprof, info), the
 * top list of its first top frames in *top_text (malloc'd; NULL if none). progress: the
 * reading's progress on a terminal even with -q (record's summary is its own).
 * *unwritten (when not NULL): set when the failure is that the rendering could not be
 * written (the input was read), cleared otherwise. */
struct lp_record_facts;
int lp_cmd_report_facts(int argc, char **argv, struct lp_record_facts *facts, unsigned top,
			char **top_text, int progress, int *unwritten);
void lp_cmd_report_usage(FILE *out);
/* Reads in's stream into *l as lp_load does, showing the reading's progress on standard
 * error as report does when show is set and it is a terminal ("CMD: reading NAME: 42%
 * (...)", cleared at the end); fd is in's, whose size is the whole. lp_load's status. */
struct lp_input;
struct lp_sysprof_opts;
struct lp_loaded;
int lp_cli_load(struct lp_input *in, const struct lp_sysprof_opts *so, int fd, const char *cmd,
		const char *name, int show, struct lp_loaded *l);
/* Whether fd (read from its current offset) holds what report reads as a profile stream,
 * gzip-compressed or not: its start is one the parser takes. 1 it does, 0 it does not, -1
 * when it cannot be read to tell (errno). name is for messages. */
int lp_cli_input_is_profile(int fd, const char *name);
/* Says, when most allocated bytes of an exact memory profile come from JIT traces, that
 * those are named by each trace's start, and where their lines are. */
void lp_cli_trace_note(const char *cmd, uint64_t alloc_bytes, uint64_t trace_bytes);
/* The same for a sampled memory profile (estimated bytes): lines in traces are those of
 * their snapshots, and luajit -joff places them exactly. */
void lp_cli_sampled_trace_note(const char *cmd, uint64_t alloc_bytes, uint64_t trace_bytes);
/* Says, for an exact memory profile drawn as stacks (graph: a flame graph, collapsed,
 * pprof or speedscope), that each stack is one frame, the allocation's site, and that
 * sampled mode records callers; nothing when lp_cli_trace_note says so already. */
void lp_cli_sites_note(const char *cmd, int graph, uint64_t alloc_bytes, uint64_t trace_bytes);
/* Says how many CPU samples in a trace, the collector, the JIT compiler or a trace exit
 * lost the frames below them (the agent's store of their stacks was full: meta
 * trace_stacks_lost); prefix starts the line. */
void lp_cli_stacks_lost_note(const char *prefix, uint64_t lost, uint64_t samples);
/* Says how many CPU samples found the Lua state running on another thread than the one
 * sampled (meta lua_elsewhere): host stacks alone. */
void lp_cli_elsewhere_note(const char *prefix, uint64_t n, uint64_t samples);
/* Finds the object whose code no symbol names (object+0xOFFSET) the most of p's first
 * column ends in (CPU samples; bytes allocated, at the stack's leaf: the allocating
 * function); before the frames are merged by function, which renames such code. */
struct lp_profile;
struct lp_nosym_share;
void lp_cli_nosym_find(const struct lp_profile *p, struct lp_nosym_share *s);
/* Says, when that is a tenth of the profile or more, that its debug file would name it. */
void lp_cli_nosym_note(const char *prefix, const struct lp_nosym_share *s);
/* Whether a CPU-clock profile's process spent its CPU time on other threads than the one
 * sampled (meta process_cpu_ns against thread_cpu_ns: four times as much, 0.1 s at least),
 * which that clock never samples; and the note that says so, and what to do. */
int lp_cli_other_threads(const struct lp_record_facts *f);
void lp_cli_other_threads_note(const char *prefix, const struct lp_record_facts *f,
			       uint64_t samples);
int lp_cmd_record(int argc, char **argv);
void lp_cmd_record_usage(FILE *out);
/* The exit status once help or the version has been printed: LP_EXIT_OK, or, when standard
 * output could not take it (a full disk, a closed descriptor), LP_EXIT_USAGE with a message
 * from "luaprof WHO" (who NULL: "luaprof"). */
int lp_cli_stdout_status(const char *who);

#endif
