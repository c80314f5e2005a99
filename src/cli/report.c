/*
** `luaprof report`: renders a profile stream in the format asked for.
**
** Output goes to a temporary file beside the destination and is renamed into place only
** once complete, so a failed run never leaves a half-written or clobbered report.
*/
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <zlib.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "report/info.h"
#include "report/load.h"
#include "report/render.h"
#include "report/text.h"
#include "stream/parse.h"

void lp_cmd_report_usage(FILE *out)
{
	fputs("Usage: luaprof report [options] FILE\n"
	      "\n"
	      "Render a profile stream: sysprof (CPU samples) or memprof (allocations), as\n"
	      "written by luaprof or by Tarantool's misc.sysprof / misc.memprof. FILE may be\n"
	      "'-' for standard input, and gzip-compressed (read as it is decompressed).\n"
	      "\n"
	      "Options:\n"
	      "  -f, --format FMT     flamegraph  interactive SVG flame graph\n"
	      "                       collapsed   folded stacks for flamegraph.pl / Pyroscope\n"
	      "                       pprof       gzipped profile.proto (go tool pprof, Parca)\n"
	      "                       speedscope  JSON for speedscope.app\n"
	      "                       top         jit.p-style ranking by self and total\n"
	      "                       annotate    the Lua source files with each profiled\n"
	      "                                   line's self and total (read from the\n"
	      "                                   chunks' @paths, relative to the current\n"
	      "                                   directory as the program's were)\n"
	      "                       memprof     ALLOCATIONS / REALLOCATIONS / DEALLOCATIONS /\n"
	      "                                   HEAP SUMMARY, as Tarantool's `luajit -tm`\n"
	      "                       info        what the file holds: kind, format, counts,\n"
	      "                                   and the recording's facts (meta.KEY: VALUE)\n"
	      "                       Default: from the -o extension (.svg; .html: the flame\n"
	      "                       graph in a web page; .folded .collapsed .pb.gz .pprof\n"
	      "                       .json .txt), else 'memprof' for exact\n"
	      "                       memory streams and 'top' for the others (CPU, sampled\n"
	      "                       memory).\n"
	      "  -o, --output PATH    write there instead of standard output\n"
	      "      --split          CPU: add one root frame per VM state (INTERP, LFUNC, GC...)\n"
	      "      --functions      merge the lines of each Lua function into one frame\n"
	      "      --lines          top: rank Lua lines instead of functions\n"
	      "  -n, --limit N        top: print N rows (default 20, 0 all of them; --top is\n"
	      "                       the same); annotate: N files (default 10, 0 all)\n"
	      "      --value TYPE     memory graphs, top, annotate and pprof: alloc_space\n"
	      "                       (default), alloc_objects, inuse_space or inuse_objects\n"
	      "      --leak-only      memory: what is still held - the memprof report's HEAP\n"
	      "                       SUMMARY alone; graphs, pprof, top, annotate: inuse_space\n"
	      "                       (garbage not yet collected at the stop counts as held)\n"
	      "      --human-readable memory, -f memprof: sizes in KiB / MiB / GiB (top and\n"
	      "                       flame graphs always show them so)\n"
	      "      --title TEXT     flame graph title\n"
	      "      --context N      annotate: N lines around each profiled one (default 2;\n"
	      "                       a large N shows the whole files)\n"
	      "      --source-dir DIR annotate: look for the source files under DIR first (a\n"
	      "                       chunk's path, then that path without its leading\n"
	      "                       directories: /app/src/x.lua finds DIR/src/x.lua)\n"
	      "  -q, --quiet          no summary on standard error\n"
	      "  -h, --help           this help\n"
	      "\n"
	      "Exit status: 0 success; 1 bad usage or I/O error; 2 the input is not a valid\n"
	      "stream (nothing is written); 3 the input is truncated (the report covers what\n"
	      "was read before the cut).\n"
	      "\n"
	      "Examples:\n"
	      "  luaprof report cpu.bin -o cpu.svg\n"
	      "  luaprof report cpu.bin --split -f collapsed | flamegraph.pl > cpu.svg\n"
	      "  luaprof report cpu.bin -f top --lines -n 40\n"
	      "  luaprof report cpu.bin -f annotate | less\n"
	      "  luaprof report mem.bin --leak-only --human-readable\n"
	      "  luaprof report mem.bin --value inuse_space -o heap.svg\n"
	      "  luaprof report mem.bin -f info\n"
	      "  luaprof report cpu.bin -o cpu.pb.gz && go tool pprof -top cpu.pb.gz\n",
	      out);
}

struct opts {
	enum lp_fmt fmt;
	const char *output;
	const char *input;
	const char *value;
	const char *title;
	const char *source_dir;
	unsigned context;        /* --context N, as N + 1; 0: not given */
	struct lp_sysprof_opts sys;
	struct lp_memprof_opts mem;
	int functions, lines, quiet;
	unsigned limit;
	const char *limit_flag; /* as typed: -n, --limit or --top */
};

/* The command whose messages these are: report, or record rendering what it recorded. */
static const char *who = "report";
#define fail(...) lp_cli_fail(who, __VA_ARGS__)

static int check_format(const struct opts *o);

static int parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_SPLIT = 256, O_FUNCTIONS, O_LINES, O_VALUE, O_LEAK, O_HUMAN, O_TITLE,
	       O_SOURCE_DIR, O_CONTEXT };
	static const struct option longopts[] = {
		{ "format", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "limit", required_argument, NULL, 'n' },
		{ "top", required_argument, NULL, 'n' }, /* record's name for it */
		{ "split", no_argument, NULL, O_SPLIT },
		{ "functions", no_argument, NULL, O_FUNCTIONS },
		{ "lines", no_argument, NULL, O_LINES },
		{ "value", required_argument, NULL, O_VALUE },
		{ "leak-only", no_argument, NULL, O_LEAK },
		{ "human-readable", no_argument, NULL, O_HUMAN },
		{ "title", required_argument, NULL, O_TITLE },
		{ "source-dir", required_argument, NULL, O_SOURCE_DIR },
		{ "context", required_argument, NULL, O_CONTEXT },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	memset(o, 0, sizeof(*o));
	optind = 1;
	opterr = 0;
	int c, li;
	/* li: the long option's index, -1 for a short one (getopt_long leaves it as is). */
	while ((li = -1, c = getopt_long(argc, argv, ":f:o:n:qh", longopts, &li)) != -1) {
		switch (c) {
		case 'f':
			o->fmt = lp_fmt_named(optarg);
			if (o->fmt == LP_FMT_NONE)
				return fail("unknown format '%s' (flamegraph, collapsed, pprof, "
					    "speedscope, top, annotate, memprof, info)%s%s%s%s", optarg,
					    optarg[0] == '=' ? "; -f takes no '=': -f " : "",
					    optarg[0] == '=' ? optarg + 1 : "",
					    optarg[0] == '=' ? ", or --format=" : "",
					    optarg[0] == '=' ? optarg + 1 : "");
			break;
		case 'o':
			if (!strcmp(optarg, "--"))
				return fail("-o needs a file name before --");
			if (!*optarg)
				return fail("-o needs a file name ('-' for standard output)");
			/* getopt keeps the '=' of "-o=out.svg": the file was "=out.svg". */
			if (optarg[0] == '=' && optarg[1])
				return fail("-o%s: -o takes no '=' (-o %s, or --output=%s); a file "
					    "whose name starts with '=' is ./%s", optarg,
					    optarg + 1, optarg + 1, optarg);
			o->output = optarg;
			break;
		case 'n': {
			char *end;
			errno = 0;
			long v = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || v < 0 || v > 1000000)
				return fail("-n (--limit, --top) expects a number from 0 (all) to "
					    "1000000, not '%s'", optarg);
			/* 0: every row, as `record -f top -n 0` lists (and o->limit is set
			 * whenever -n is given, for the checks of the format). */
			o->limit = v ? (unsigned)v : LP_LIMIT_ALL;
			o->limit_flag = li >= 0 ? (longopts[li].name[0] == 'l' ? "--limit" : "--top")
						: "-n";
			break;
		}
		case O_SPLIT: o->sys.split = 1; break;
		case O_FUNCTIONS: o->functions = 1; break;
		case O_LINES: o->lines = 1; break;
		case O_VALUE: o->value = optarg; break;
		case O_LEAK: o->mem.leak_only = 1; break;
		case O_HUMAN: o->mem.human_readable = 1; break;
		case O_TITLE:
			/* An empty heading is a mistake (a variable not set), not a wish. */
			if (!optarg[strspn(optarg, " \t\n\r")])
				return fail("--title is empty: give a heading, or leave --title out "
					    "for the default one");
			o->title = optarg;
			break;
		case O_CONTEXT: {
			char *end;
			errno = 0;
			long v = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || v < 0 || v > 1000000)
				return fail("--context expects a number of lines from 0 to 1000000, "
					    "not '%s'", optarg);
			o->context = (unsigned)v + 1;
			break;
		}
		case O_SOURCE_DIR: {
			struct stat sb;
			if (stat(optarg, &sb) != 0)
				return fail("--source-dir %s: %s", optarg, strerror(errno));
			if (!S_ISDIR(sb.st_mode))
				return fail("--source-dir %s: not a directory", optarg);
			o->source_dir = optarg;
			break;
		}
		case 'q': o->quiet = 1; break;
		case 'h':
			lp_cmd_report_usage(stdout);
			exit(lp_cli_stdout_status("report"));
		case ':':
			return fail("option '%s' needs a value", argv[optind - 1]);
		default: {
			char buf[3];
			return lp_cli_bad_option(who, lp_cli_refused(argv, buf), longopts);
		}
		}
	}
	if (optind >= argc)
		return fail("no input file (see 'luaprof report --help')");
	if (optind + 1 < argc)
		return fail("one input file at a time; got '%s' and '%s'", argv[optind],
			    argv[optind + 1]);
	o->input = argv[optind];
	if (o->output && lp_output_same(o->output, o->input))
		return fail("-o %s is the input file: the report would replace the profile",
			    o->output);
	/* Another profile there (`-f collapsed -o cpu2.bin`, a slip of the other file's
	 * name) would be lost the same way. */
	if (o->output && strcmp(o->output, "-") && lp_output_holds_profile(o->output) == 1)
		return fail("-o %s holds a profile (a raw stream): the report would replace it; "
			    "give -o another name", o->output);
	if (!o->quiet)
		lp_fmt_note_mismatch("report", o->fmt, o->output);
	/* A device or FIFO has no extension to tell: it gets what standard output would. */
	if (o->fmt == LP_FMT_NONE && o->output && strcmp(o->output, "-") &&
	    !lp_output_is_special(o->output) && lp_fmt_of_path(o->output, &o->fmt))
		return fail("cannot tell the format from '%s'; use -f, or an extension that "
			    "names one (%s)", o->output, lp_fmt_extensions());
	if (o->functions && o->lines)
		return fail("--functions and --lines contradict each other");
	if (o->value && strcmp(o->value, "alloc_space") && strcmp(o->value, "alloc_objects") &&
	    strcmp(o->value, "inuse_space") && strcmp(o->value, "inuse_objects"))
		return fail("unknown --value '%s' (alloc_space, alloc_objects, inuse_space, "
			    "inuse_objects)", o->value);
	if (o->mem.leak_only && o->value && strncmp(o->value, "inuse_", 6))
		return fail("--leak-only shows what is still held: it goes with --value "
			    "inuse_space or inuse_objects, not %s", o->value);
	if (o->fmt == LP_FMT_INFO && (o->sys.split || o->functions || o->lines || o->limit ||
				      o->value || o->mem.leak_only || o->mem.human_readable ||
				      o->title || o->source_dir || o->context))
		return fail("-f info describes the file and takes no rendering option (--split, "
			    "--functions, --lines, --limit, --value, --leak-only, "
			    "--human-readable, --title, --source-dir, --context)");
	if (o->fmt != LP_FMT_NONE && o->fmt != LP_FMT_INFO)
		return check_format(o);
	return 0;
}

/* Checks the options that apply to some formats only against o->fmt (chosen): refused,
 * not ignored. Before the input is read when -f or -o chose the format, else once the
 * stream's kind has. */
static int check_format(const struct opts *o)
{
	const char *fname = lp_fmt_name(o->fmt);
	if (o->fmt == LP_FMT_MEMPROF && o->value)
		return fail("%s", LP_CLI_VALUE_MEMPROF);
	if (o->mem.human_readable && o->fmt != LP_FMT_MEMPROF)
		return fail("--human-readable applies to the memprof text report (-f memprof): "
			    "%s", o->fmt == LP_FMT_TOP || o->fmt == LP_FMT_FLAMEGRAPH
				  ? "top and flame graphs show KiB / MiB anyway"
				  : "this format is read by tools and keeps bytes");
	if (o->limit && o->fmt != LP_FMT_TOP && o->fmt != LP_FMT_ANNOTATE)
		return fail("%s applies to -f top (the number of rows) and -f annotate (of "
			    "files), not to -f %s", o->limit_flag, fname);
	if (o->fmt == LP_FMT_ANNOTATE && (o->lines || o->functions))
		return fail("%s: -f annotate shows each source line already",
			    o->lines ? "--lines" : "--functions");
	if (o->fmt == LP_FMT_ANNOTATE && o->sys.split)
		return fail("--split adds a root frame per VM state, which -f annotate (source "
			    "lines) does not show");
	if (o->lines && o->fmt != LP_FMT_TOP)
		return fail("--lines applies to -f top (rank lines, not functions), not to -f %s%s",
			    fname, o->fmt == LP_FMT_MEMPROF ? ""
				   : ": the other formats keep lines unless --functions merges them");
	if (o->source_dir && o->fmt != LP_FMT_ANNOTATE)
		return fail("--source-dir applies to -f annotate (where to find the source "
			    "files), not to -f %s", fname);
	if (o->context && o->fmt != LP_FMT_ANNOTATE)
		return fail("--context applies to -f annotate (the lines shown around each "
			    "profiled one), not to -f %s", fname);
	if (o->title && o->fmt != LP_FMT_FLAMEGRAPH && o->fmt != LP_FMT_SPEEDSCOPE)
		return fail("--title applies to -f flamegraph and speedscope, not to -f %s", fname);
	if (o->functions && o->fmt == LP_FMT_MEMPROF)
		return fail("--functions applies to the graphs and pprof: the memprof report "
			    "lists sites by line");
	if (o->functions && o->fmt == LP_FMT_TOP)
		return fail("--functions: -f top ranks functions already (--lines ranks lines)");
	return 0;
}

/* Checks options against the kind of stream found. */
static int check_kind(struct opts *o, enum lp_stream_kind kind, int sampled)
{
	int mem = kind == LP_STREAM_MEMPROF;
	if (o->fmt == LP_FMT_INFO)
		return 0; /* any stream; the rendering options do not apply */
	if (o->fmt == LP_FMT_NONE)
		o->fmt = mem && !sampled ? LP_FMT_MEMPROF : LP_FMT_TOP;
	if (sampled && o->fmt == LP_FMT_MEMPROF)
		return fail("%s is a sampled memory profile (allocation stacks, not every event): "
			    "the memprof report needs an exact-mode stream; use -f top, flamegraph, "
			    "pprof, collapsed or speedscope", o->input);
	if (!mem && o->fmt == LP_FMT_MEMPROF)
		return fail("%s is a CPU (sysprof) stream; the memprof report needs a memory "
			    "stream", o->input);
	if (!mem && (o->mem.leak_only || o->mem.human_readable || o->value))
		return fail("%s is a CPU (sysprof) stream; --leak-only, --human-readable and "
			    "--value apply to memory streams", o->input);
	if (mem && o->sys.split)
		return fail("%s is a memory (memprof) stream; --split applies to CPU streams",
			    o->input);
	return check_format(o);
}

void lp_cli_stacks_lost_note(const char *prefix, uint64_t lost, uint64_t samples)
{
	int one = lost == 1;
	char pct[16];
	lp_text_share(pct, sizeof(pct), lost, samples);
	fprintf(stderr, "%s: %" PRIu64 " sample%s (%s) in traces, the collector, the JIT "
		"compiler or trace exits %s lost the frames below %s: the profiler's store "
		"of their full stacks filled up (a long run at a high rate over code that keeps "
		"changing); %s from the trace or the VM entry instead\n", prefix, lost,
		one ? "" : "s", pct, one ? "has" : "have", one ? "it" : "them",
		one ? "it hangs" : "they hang");
}

void lp_cli_elsewhere_note(const char *prefix, uint64_t n, uint64_t samples)
{
	int one = n == 1;
	char pct[16];
	lp_text_share(pct, sizeof(pct), n, samples);
	fprintf(stderr, "%s: %" PRIu64 " sample%s (%s) found the Lua state running on "
		"another thread than the one that started the profile, the one sampled: %s that "
		"thread's C stack alone. Start the profile on the thread that runs the Lua code "
		"(a host such as wrk runs a script's init on its main thread, the requests on "
		"others)\n", prefix, n, one ? "" : "s", pct, one ? "it is" : "they are");
}

/* Whether f is code of a known object that it has no name for but object+0xOFFSET: no
 * symbol covers it, or the agent named a function it found in the unwind table so. */
static int unnamed_code(const struct lp_frame *f)
{
	if (!f || f->kind != LP_FK_C || !f->file)
		return 0;
	const char *base = strrchr(f->file, '/') ? strrchr(f->file, '/') + 1 : f->file;
	size_t n = strlen(base);
	return !strncmp(f->name, base, n) && !strncmp(f->name + n, "+0x", 3);
}

void lp_cli_nosym_find(const struct lp_profile *p, struct lp_nosym_share *s)
{
	/* Column 0 by object, for the first few objects met (a profile has a handful). */
	struct objsum {
		const char *file;
		int64_t sum;
	} obj[16];
	size_t nobj = 0, ns = lp_profile_nstacks(p);
	s->object[0] = '\0';
	s->value = 0;
	s->total = lp_profile_total(p, 0);
	s->bytes = !strcmp(lp_profile_value_type(p, 0)->unit, "bytes");
	for (size_t i = 0; i < ns; i++) {
		const uint32_t *fr;
		const int64_t *v;
		size_t depth, k;
		lp_profile_stack(p, i, &fr, &depth, &v);
		const struct lp_frame *leaf = depth ? lp_profile_frame(p, fr[depth - 1]) : NULL;
		if (!unnamed_code(leaf))
			continue;
		for (k = 0; k < nobj && strcmp(obj[k].file, leaf->file); k++)
			;
		if (k == nobj && nobj < sizeof(obj) / sizeof(obj[0]))
			obj[nobj++] = (struct objsum){ leaf->file, 0 };
		if (k < nobj)
			obj[k].sum = lp_sat_add(obj[k].sum, v[0]);
	}
	for (size_t k = 0; k < nobj; k++)
		if (obj[k].sum > s->value) {
			s->value = obj[k].sum;
			snprintf(s->object, sizeof(s->object), "%s", obj[k].file);
		}
}

void lp_cli_nosym_note(const char *prefix, const struct lp_nosym_share *s)
{
	/* A tenth of the profile or more: the addresses are what the user reads first. Not
	 * total / 10 rounded down, which a small profile's share below it reached (2 of 25
	 * samples, 8 %, had the note). */
	if (!s->object[0] || s->total <= 0 || s->value < s->total / 10 + (s->total % 10 != 0))
		return;
	const char *base = strrchr(s->object, '/') ? strrchr(s->object, '/') + 1 : s->object;
	char pct[16];
	lp_text_share(pct, sizeof(pct), (uint64_t)s->value, (uint64_t)s->total);
	fprintf(stderr, "%s: note: %s of the %s in code of %s that no symbol names here "
		"(shown as %s+0xOFFSET): with its separate debug file installed (Debian: its "
		"package's -dbgsym), a new profile names it\n", prefix, pct,
		s->bytes ? "bytes are allocated" : "samples end", s->object, base);
}

int lp_cli_other_threads(const struct lp_record_facts *f)
{
	uint64_t other = f->process_cpu_ns > f->thread_cpu_ns
				 ? f->process_cpu_ns - f->thread_cpu_ns : 0;
	return !f->wall_clock && other >= 100000000ull && other / 4 > f->thread_cpu_ns;
}

void lp_cli_other_threads_note(const char *prefix, const struct lp_record_facts *f,
			       uint64_t samples)
{
	char got[64];
	if (samples)
		snprintf(got, sizeof(got), "%" PRIu64 " sample%s", samples,
			 samples == 1 ? "" : "s");
	else
		snprintf(got, sizeof(got), "no sample");
	/* record's users give --clock; a report's stream may come from the API. */
	int api = strncmp(prefix, "luaprof record", 14) != 0;
	fprintf(stderr, "%s: the thread sampled, the one that started the profile, ran %.3f s "
		"on the CPU, the process's other threads %.2f s: --clock cpu samples that thread "
		"alone, while it runs (%s here). If the Lua code runs on another thread (a host "
		"such as wrk runs a script's init on its main thread, the requests on its "
		"worker threads), start the profile on that thread, or use --clock wall%s, "
		"which samples this one while it waits too and says how many samples found the "
		"Lua state running elsewhere\n", prefix, (double)f->thread_cpu_ns / 1e9,
		(double)(f->process_cpu_ns - f->thread_cpu_ns) / 1e9, got,
		api ? " (clock = \"wall\" in sysprof.start)" : "");
}

void lp_cli_trace_note(const char *cmd, uint64_t alloc_bytes, uint64_t trace_bytes)
{
	if (!alloc_bytes || trace_bytes < alloc_bytes / 2)
		return;
	/* lp_text_share: most bytes but not all must not read "100%". */
	char pct[16];
	lp_text_share(pct, sizeof(pct), trace_bytes, alloc_bytes);
	fprintf(stderr, "luaprof %s: note: %s of the bytes were allocated by JIT traces, "
		"which exact mode names by where each trace starts (TRACE [n] started at "
		"...): a run with luajit -joff charges them to their lines, and a sampled "
		"profile (record --memory --sample 512K) shows the stacks that reach the "
		"traces\n", cmd, pct);
}

void lp_cli_sampled_trace_note(const char *cmd, uint64_t alloc_bytes, uint64_t trace_bytes)
{
	if (!alloc_bytes || trace_bytes < alloc_bytes / 2)
		return;
	char pct[16];
	lp_text_share(pct, sizeof(pct), trace_bytes, alloc_bytes);
	fprintf(stderr, "luaprof %s: note: %s of the sampled bytes were allocated in JIT "
		"traces, each at the line of the trace's snapshot, often an earlier one than "
		"the allocating statement (the loop's), and without the functions the trace "
		"inlined that may have returned: a run with luajit -joff places them exactly\n",
		cmd, pct);
}

void lp_cli_sites_note(const char *cmd, int graph, uint64_t alloc_bytes, uint64_t trace_bytes)
{
	if (!graph || (alloc_bytes && trace_bytes >= alloc_bytes / 2))
		return;
	fprintf(stderr, "luaprof %s: note: exact mode records where each allocation is made, "
		"not who called it: its stacks are one frame deep (--sample 512K records call "
		"stacks)\n", cmd);
}

static void summary(const struct opts *o, const struct lp_loaded *l, const char *fmtname)
{
	if (o->quiet)
		return;
	if (l->kind == LP_STREAM_SYSPROF) {
		const uint64_t *vm = lp_sysprof_vmstates(l->sys);
		fprintf(stderr, "luaprof report: %s: %" PRIu64 " CPU sample%s", o->input,
			l->stats.events, l->stats.events == 1 ? "" : "s");
		const char *sep = " (";
		for (unsigned i = 0; i < LP_VMST__MAX && l->stats.events; i++) {
			if (!vm[i])
				continue;
			char pct[16];
			lp_text_share(pct, sizeof(pct), vm[i], l->stats.events);
			fprintf(stderr, "%s%s %s", sep, lp_vmstate_name(i), pct);
			sep = ", ";
		}
		fputs(*sep == ',' ? ")" : "", stderr);
	} else if (!l->kind) {
		fprintf(stderr, "luaprof report: %s: no profile section", o->input);
	} else if (l->sampled) {
		uint64_t n = lp_sysprof_nasamples(l->msamp);
		fprintf(stderr, "luaprof report: %s: %" PRIu64 " sampled allocation%s",
			o->input, n, n == 1 ? "" : "s");
	} else {
		fprintf(stderr, "luaprof report: %s: %" PRIu64 " memory event%s", o->input,
			l->stats.events, l->stats.events == 1 ? "" : "s");
	}
	fprintf(stderr, ", %" PRIu64 " symbol%s", l->stats.symbols,
		l->stats.symbols == 1 ? "" : "s");
	if (o->output && strcmp(o->output, "-"))
		fprintf(stderr, "; wrote %s to %s", fmtname, o->output);
	fputc('\n', stderr);
	if (l->facts.truncated)
		fprintf(stderr, "luaprof report: note: %" PRIu64 " %s%s cut short (deeper than "
			"the profiler keeps, or through code it has no unwind table for): %s "
			"outermost frames are missing, the rest hangs from where the cut is\n",
			l->facts.truncated, l->kind == LP_STREAM_SYSPROF ? "sample" :
			"sampled allocation", l->facts.truncated == 1 ? " has its stack" :
			"s have stacks", l->facts.truncated == 1 ? "its" : "their");
	/* pprof and speedscope give a CPU profile's samples as time: not without an interval
	 * (Tarantool's streams record none), which a reader's "Type: samples" alone does not
	 * say. */
	if (l->kind == LP_STREAM_SYSPROF && !l->interval_ns &&
	    (o->fmt == LP_FMT_PPROF || o->fmt == LP_FMT_SPEEDSCOPE))
		fprintf(stderr, "luaprof report: note: %s records no sampling interval "
			"(Tarantool's sysprof streams do not): the %s profile has sample counts, not time\n",
			o->input, fmtname);
	if (l->kind == LP_STREAM_SYSPROF && l->facts.trace_stacks_lost)
		lp_cli_stacks_lost_note("luaprof report: note", l->facts.trace_stacks_lost,
					l->stats.events);
	if (l->kind == LP_STREAM_SYSPROF && l->facts.lua_elsewhere)
		lp_cli_elsewhere_note("luaprof report: note", l->facts.lua_elsewhere,
				      l->stats.events);
	if (l->kind == LP_STREAM_SYSPROF && lp_cli_other_threads(&l->facts))
		lp_cli_other_threads_note("luaprof report: note", &l->facts, l->stats.events);
	if (l->kind == LP_STREAM_MEMPROF && !l->sampled && l->mem) {
		uint64_t all, traces;
		lp_memprof_alloc_bytes(l->mem, &all, &traces);
		lp_cli_trace_note("report", all, traces);
		lp_cli_sites_note("report", lp_fmt_draws_stacks(o->fmt), all, traces);
	}
	if (l->kind == LP_STREAM_MEMPROF && l->sampled)
		lp_cli_sampled_trace_note("report", l->facts.alloc_bytes,
					  l->facts.trace_alloc_bytes);
	lp_cli_nosym_note("luaprof report", &l->facts.nosym);
}

/* The top list of p's first top frames in value column ro->value, as text (malloc'd), or
 * NULL. */
static char *top_text_of(struct lp_profile *p, const struct lp_render_opts *ro, unsigned top)
{
	char *text = NULL, err[256];
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct lp_render_opts to = { .limit = top, .value = ro->value };
	int rc = f ? lp_render_top(p, &to, f, err, sizeof(err)) : -ENOMEM;
	if (f && fclose(f) != 0)
		rc = -EIO;
	if (rc) {
		free(text);
		return NULL;
	}
	return text;
}

/* Renders the report; with top > 0 and a rendering that is not a list itself, also the
 * top list of its profile into *top_text (malloc'd; NULL if none). */
/* A sampled memory profile's estimated bytes allocated, and of them those allocated in
 * JIT traces (the innermost Lua frame of the stack is a trace): for
 * lp_cli_sampled_trace_note. */
static void sampled_trace_bytes(const struct lp_profile *p, struct lp_record_facts *f)
{
	unsigned v;
	for (v = 0; v < lp_profile_nvalues(p); v++)
		if (!strcmp(lp_profile_value_type(p, v)->type, "alloc_space"))
			break;
	f->alloc_bytes = f->trace_alloc_bytes = 0;
	if (v == lp_profile_nvalues(p))
		return;
	for (size_t i = 0; i < lp_profile_nstacks(p); i++) {
		const uint32_t *fr;
		size_t depth;
		const int64_t *val;
		lp_profile_stack(p, i, &fr, &depth, &val);
		if (val[v] <= 0)
			continue;
		f->alloc_bytes += (uint64_t)val[v];
		for (size_t d = depth; d-- > 0;) {
			enum lp_frame_kind k = lp_profile_frame(p, fr[d])->kind;
			if (k == LP_FK_TRACE)
				f->trace_alloc_bytes += (uint64_t)val[v];
			if (k == LP_FK_TRACE || k == LP_FK_LUA)
				break;
		}
	}
}

static int render(struct opts *o, struct lp_loaded *l, FILE *out, char *err, size_t errlen,
		  unsigned top, char **top_text)
{
	if (o->fmt == LP_FMT_INFO) {
		int rc = lp_info_report(l, o->input, out);
		if (rc)
			snprintf(err, errlen, "cannot write the report: %s", strerror(-rc));
		return rc;
	}
	if (o->fmt == LP_FMT_MEMPROF) {
		int rc = lp_memprof_report(l->mem, &o->mem, out);
		if (rc)
			snprintf(err, errlen, "cannot write the report: %s", strerror(-rc));
		/* Its sites as a profile, for the note on code no symbol names alone: out of
		 * memory for it, the report stands without the note. */
		struct lp_profile *p = rc ? NULL : lp_memprof_profile(l->mem);
		if (p)
			lp_cli_nosym_find(p, &l->facts.nosym);
		lp_profile_free(p);
		return rc;
	}
	struct lp_profile *p = lp_loaded_profile(l, o->input);
	if (!p) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	lp_cli_nosym_find(p, &l->facts.nosym);
	if (o->functions && o->fmt != LP_FMT_TOP) {
		struct lp_profile *q = lp_profile_by_function(p);
		lp_profile_free(p);
		if (!(p = q)) {
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
	}
	struct lp_render_opts ro = { .title = o->title, .lines = o->lines, .limit = o->limit,
				     .source_dir = o->source_dir, .context = o->context,
				     .html = lp_output_is_html(o->output) };
	const char *want = o->value ? o->value
		: l->kind == LP_STREAM_MEMPROF && o->mem.leak_only ? "inuse_space" : NULL;
	if (want) {
		unsigned i;
		for (i = 0; i < lp_profile_nvalues(p); i++)
			if (!strcmp(lp_profile_value_type(p, i)->type, want))
				break;
		if (i == lp_profile_nvalues(p)) {
			snprintf(err, errlen, "unknown --value '%s' (alloc_space, alloc_objects, "
				 "inuse_space, inuse_objects)", want);
			lp_profile_free(p);
			return -EINVAL;
		}
		ro.value = i;
	}
	if (l->kind == LP_STREAM_MEMPROF && l->sampled)
		sampled_trace_bytes(p, &l->facts);
	int rc = lp_fmt_renderer(o->fmt)(p, &ro, out, err, errlen);
	if (!rc && top && top_text && (o->fmt != LP_FMT_TOP || lp_output_discarded(o->output)))
		*top_text = top_text_of(p, &ro, top);
	lp_profile_free(p);
	return rc;
}

/*
** Whether a profile is being written into the file sb describes: the agent holds a flock on
** the files it writes (pfile.c). Looked up in /proc/locks rather than probed with a lock
** of our own, which could make a profile starting on the file that moment refuse it.
*/
static int being_written(const struct stat *sb)
{
	FILE *f = fopen("/proc/locks", "re");
	if (!f)
		return 0;
	char line[256], kind[16];
	unsigned maj, min;
	unsigned long long ino;
	int found = 0;
	/* "1: FLOCK  ADVISORY  WRITE 31690 fe:00:11077105 0 EOF" ("->" for a waiter). */
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "%*d: %15s %*s %*s %*d %x:%x:%llu", kind, &maj, &min, &ino) ==
				4 &&
			!strcmp(kind, "FLOCK") && ino == (unsigned long long)sb->st_ino &&
			maj == major(sb->st_dev) && min == minor(sb->st_dev);
	fclose(f);
	return found;
}

/*
** The input as the parser gets it: a gzip-compressed stream (`gzip cpu.bin`, a profile
** fetched compressed) decompressed on the way, anything else as it is. Its first two bytes
** are read to tell (a pipe cannot be peeked at) and handed on before the rest.
*/
struct source {
	int fd;
	unsigned char head[2];
	size_t nhead, headpos; /* the bytes read to tell, and how many were handed on */
	int gz, zend, zcut;    /* gzip; its data has ended; ended early */
	int zbad;              /* the gzip data is corrupt (said in the input's message) */
	uint64_t zin;          /* compressed bytes read */
	unsigned char inner[2]; /* the first bytes it decompresses to, to tell what they are */
	size_t ninner;
	z_stream zs;
	unsigned char zbuf[1 << 16];
};

static ssize_t source_raw(struct source *s, void *buf, size_t n)
{
	if (s->headpos < s->nhead) {
		size_t k = s->nhead - s->headpos < n ? s->nhead - s->headpos : n;
		memcpy(buf, s->head + s->headpos, k);
		s->headpos += k;
		return (ssize_t)k;
	}
	ssize_t r;
	while ((r = read(s->fd, buf, n)) < 0 && errno == EINTR)
		;
	return r;
}

/* Fills the compressed input when it is used up: 1, 0 at its end, -1 (errno) on failure. */
static int source_zfill(struct source *s)
{
	if (s->zs.avail_in)
		return 1;
	ssize_t r = source_raw(s, s->zbuf, sizeof(s->zbuf));
	if (r <= 0)
		return (int)r;
	s->zin += (uint64_t)r;
	s->zs.next_in = s->zbuf;
	s->zs.avail_in = (uInt)r;
	return 1;
}

static ssize_t source_read(void *ctx, struct lp_input *in, void *buf, size_t n)
{
	struct source *s = ctx;
	if (!s->gz)
		return source_raw(s, buf, n);
	uInt want = n > (1u << 30) ? 1u << 30 : (uInt)n;
	s->zs.next_out = buf;
	s->zs.avail_out = want;
	while (s->zs.avail_out == want && !s->zend) {
		int r = source_zfill(s);
		if (r < 0)
			return -1;
		if (r == 0) { /* cut inside the gzip data: the parser says where the stream stops */
			s->zend = s->zcut = 1;
			break;
		}
		int zr = inflate(&s->zs, Z_NO_FLUSH);
		if (zr == Z_STREAM_END) {
			/* Another member may follow (cat a.gz b.gz); anything else is ignored, as
			 * gzip -d does with trailing garbage. */
			r = source_zfill(s);
			if (r < 0)
				return -1;
			if (r == 0 || s->zs.next_in[0] != 0x1f || inflateReset(&s->zs) != Z_OK)
				s->zend = 1;
		} else if (zr != Z_OK && !(zr == Z_BUF_ERROR && !s->zs.avail_in)) {
			lp_input_fail(in, LP_ERR_FORMAT, in->base + in->len + (want - s->zs.avail_out),
				      "the gzip data is corrupt after %" PRIu64 " compressed byte%s (%s)",
				      s->zin - s->zs.avail_in, s->zin - s->zs.avail_in == 1 ? "" : "s",
				      s->zs.msg ? s->zs.msg : "zlib error");
			s->zbad = 1;
			errno = EIO;
			return -1;
		}
	}
	size_t got = want - s->zs.avail_out;
	for (size_t i = 0; i < got && s->ninner < sizeof(s->inner); i++)
		s->inner[s->ninner++] = ((unsigned char *)buf)[i];
	return (ssize_t)got;
}

/* Reads fd's first bytes and makes s the source of in: 0, or -1 with errno. */
static int source_open(struct source *s, struct lp_input *in, int fd)
{
	s->fd = fd;
	s->nhead = s->headpos = 0;
	s->gz = s->zend = s->zcut = s->zbad = 0;
	s->zin = 0;
	s->ninner = 0;
	while (s->nhead < 2) {
		ssize_t r = read(fd, s->head + s->nhead, 2 - s->nhead);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		s->nhead += (size_t)r;
	}
	in->read_fn = source_read;
	in->read_ctx = s;
	/* A lone 0x1f is taken for gzip cut after its first byte (said so), not for a pprof
	 * profile, which the parser would guess from that byte. */
	if (s->nhead < 1 || s->head[0] != 0x1f || (s->nhead == 2 && s->head[1] != 0x8b))
		return 0;
	memset(&s->zs, 0, sizeof(s->zs));
	if (inflateInit2(&s->zs, 15 + 16) != Z_OK) { /* 16: gzip's header and trailer */
		errno = ENOMEM;
		return -1;
	}
	s->gz = 1;
	return 0;
}

static void source_close(struct source *s)
{
	if (s->gz)
		inflateEnd(&s->zs);
}

int lp_cli_input_is_profile(int fd, const char *name)
{
	/* The input as report opens it (gzip undone) and its start as the parser reads it:
	 * whatever report takes for a profile, with no second copy of its magic. */
	struct source *s = malloc(sizeof(*s));
	struct lp_input in;
	if (!s) {
		errno = ENOMEM;
		return -1;
	}
	if (lp_input_open_fd(&in, fd, name) != LP_OK) {
		free(s);
		errno = ENOMEM;
		return -1;
	}
	int is = -1;
	errno = 0;
	if (source_open(s, &in, fd) == 0) {
		int st = lp_parse_starts_stream(&in);
		/* A read that failed (not corrupt gzip data, which is no profile) cannot tell. */
		is = st == LP_OK ? 1 : st == LP_ERR_IO && !s->zbad ? -1 : 0;
		if (is < 0 && !errno)
			errno = EIO;
	}
	int e = errno;
	source_close(s);
	lp_input_close(&in);
	free(s);
	errno = e;
	return is;
}

/* Progress on a terminal for long reads: at most once a second, cleared at the end; from
 * the start for a file of PROGRESS_EAGER bytes or more, which takes a while to read
 * (about a second for 150 MB of an exact memory profile). */
#define PROGRESS_EAGER (64ull << 20)
struct progress {
	const char *who;    /* "luaprof", or "luaprof record" rendering what it recorded */
	const char *name;
	uint64_t size;      /* 0 when unknown (a pipe) */
	struct timespec last;
	int shown;
	const struct source *src; /* gzip: the size is the compressed one */
};

static void show_progress(void *ctx, uint64_t offset)
{
	struct progress *pr = ctx;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (now.tv_sec - pr->last.tv_sec < 1 && (pr->shown || pr->size < PROGRESS_EAGER))
		return;
	pr->last = now;
	pr->shown = 1;
	if (pr->src && pr->src->gz)
		offset = pr->src->zin; /* of the file, not of what it decompresses to */
	if (pr->size)
		fprintf(stderr, "\r%s: reading %s: %3.0f%% (%" PRIu64 " of %" PRIu64 " MB)",
			pr->who, pr->name, 100.0 * (double)offset / (double)pr->size, offset / 1000000,
			pr->size / 1000000);
	else
		fprintf(stderr, "\r%s: reading %s: %" PRIu64 " MB", pr->who, pr->name,
			offset / 1000000);
}

/* lp_load_ex with the progress above when show is set and standard error is a terminal;
 * fd's size, when it is a regular file, is the whole; src: gzip's, or NULL. */
static int load_shown(struct lp_input *in, const struct lp_sysprof_opts *so, int fd,
		      const char *cmd, const char *name, int show, const struct source *src,
		      struct lp_loaded *l)
{
	struct progress pr = { .who = cmd, .name = name, .src = src };
	struct stat sb;
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode))
		pr.size = (uint64_t)sb.st_size;
	clock_gettime(CLOCK_MONOTONIC, &pr.last);
	int tty = show && isatty(STDERR_FILENO);
	int st = lp_load_ex(in, so, tty ? show_progress : NULL, &pr, l);
	if (pr.shown)
		fputs("\r\033[K", stderr);
	return st;
}

int lp_cli_load(struct lp_input *in, const struct lp_sysprof_opts *so, int fd, const char *cmd,
		const char *name, int show, struct lp_loaded *l)
{
	return load_shown(in, so, fd, cmd, name, show, NULL, l);
}

int lp_cmd_report(int argc, char **argv)
{
	return lp_cmd_report_facts(argc, argv, NULL, 0, NULL, 0, NULL);
}

int lp_cmd_report_facts(int argc, char **argv, struct lp_record_facts *facts, unsigned top,
			char **top_text, int progress, int *unwritten)
{
	int unwritten_local;
	if (!unwritten)
		unwritten = &unwritten_local;
	*unwritten = 0;
	if (top_text)
		*top_text = NULL;
	who = facts ? "record" : "report";
	struct opts o;
	int rc = parse_args(argc, argv, &o);
	if (rc)
		return rc;
	/* Before the input is read, which may take long: a destination that cannot be
	 * written is known now. */
	if (o.output && lp_output_check(o.output) != 0) {
		*unwritten = 1;
		return fail("cannot write %s: %s", o.output, strerror(errno));
	}

	int fd = strcmp(o.input, "-") ? open(o.input, O_RDONLY | O_CLOEXEC) : STDIN_FILENO;
	if (fd < 0)
		return fail("cannot open %s: %s", o.input, strerror(errno));
	struct lp_input in;
	struct lp_loaded l;
	int exit_code = LP_EXIT_OK;
	char msg[1024];
	if (lp_input_open_fd(&in, fd, o.input) != LP_OK) {
		lp_input_message(&in, msg, sizeof(msg));
		if (fd != STDIN_FILENO)
			close(fd);
		return fail("%s", msg);
	}
	static struct source src;
	if (source_open(&src, &in, fd) != 0) {
		int e = errno;
		lp_input_close(&in);
		if (fd != STDIN_FILENO)
			close(fd);
		return fail("cannot read %s: %s", o.input, strerror(e));
	}
	/* Offsets in messages are the decompressed stream's. */
	char gzname[PATH_MAX + 16];
	if (src.gz) {
		snprintf(gzname, sizeof(gzname), "%s (decompressed)", o.input);
		in.name = gzname;
	}
	struct stat sb;
	int regular = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode);
	int st = load_shown(&in, &o.sys, fd, facts ? "luaprof record" : "luaprof", o.input,
			    facts ? progress : !o.quiet, &src, &l);
	lp_input_message(&in, msg, sizeof(msg));
	/* gzip data that is no stream either: gzip again (compressed twice), a pprof profile
	 * (its protobuf's first field, sample_type, is 0x0a), or something else, which the
	 * parser's message guesses from its first byte. */
	int twice = src.ninner == 2 && src.inner[0] == 0x1f && src.inner[1] == 0x8b;
	if (src.gz && !src.zbad && st == LP_ERR_FORMAT && in.err_offset == 0 && twice)
		snprintf(msg, sizeof(msg), "%s: gzip data holding gzip data (compressed twice), not "
			 "a profile stream: luaprof undoes one gzip; `%s%s | gunzip | luaprof "
			 "report -` reads what it holds", o.input, strcmp(o.input, "-") ? "cat " : "",
			 strcmp(o.input, "-") ? o.input : "...");
	else if (src.gz && !src.zbad && st == LP_ERR_FORMAT && in.err_offset == 0)
		snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " (%s is gzip data, "
			 "read decompressed%s)", o.input, src.ninner && src.inner[0] == 0x0a
			 ? ": a pprof profile? luaprof reads the raw stream record wrote, plain or "
			   "gzipped" : "");
	if (src.zcut && st == LP_ERR_TRUNCATED)
		snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), " (the gzip data of %s "
			 "ends early: a copy cut short?)", o.input);
	source_close(&src);
	if (fd != STDIN_FILENO)
		close(fd);
	/* A file that ends early because a profile is still writing it is no cut file. */
	const char *live = st == LP_ERR_TRUNCATED && regular && being_written(&sb)
				   ? " (a profile is still being written into it: this is what it "
				     "holds so far)"
				   : "";

	/* An empty file is a profile whose first write never came: most often a sampled
	 * memory profile, written whole when it stops, that has not stopped or never will
	 * (its process killed by SIGKILL, as the OOM killer does). */
	const char *why_empty =
		src.gz ? ""
		: *live ? " (a profile is still being written into it; a sampled memory profile is "
			  "written whole when it stops)"
			: " (a profile reaches its file in blocks, a sampled memory profile whole when "
			  "it stops: one whose process was killed by SIGKILL, as by the OOM killer, "
			  "before its first write is left empty)";
	if (st == LP_ERR_TRUNCATED && l.stats.bytes == 0) {
		fprintf(stderr, "luaprof %s: %s: %s, not a profile stream%s\n", who, o.input,
			!src.gz ? "empty file" : src.zcut ? "gzip data cut short before anything "
			"it holds" : "gzip data of nothing (an empty file compressed)",
			src.gz ? live : why_empty);
		exit_code = LP_EXIT_MALFORMED;
	} else if (st == LP_ERR_TRUNCATED && !l.kind && o.fmt != LP_FMT_INFO) {
		fprintf(stderr, "luaprof %s: %s (no profile section: nothing to report)%s\n", who,
			msg, live);
		exit_code = LP_EXIT_TRUNCATED;
	} else if (st == LP_ERR_FORMAT || st == LP_ERR_VERSION) {
		fprintf(stderr, "luaprof %s: %s\n", who, msg);
		exit_code = LP_EXIT_MALFORMED;
	} else if (st != LP_OK && st != LP_ERR_TRUNCATED) {
		fprintf(stderr, "luaprof %s: %s\n", who, msg);
		exit_code = LP_EXIT_USAGE;
	}
	if (exit_code != LP_EXIT_OK)
		goto out;
	if ((rc = check_kind(&o, l.kind, l.sampled)) != 0) {
		exit_code = rc;
		goto out;
	}
	if (lp_fmt_tty_refusal(o.fmt) && lp_output_tty(o.output)) {
		exit_code = fail("%s", lp_fmt_tty_refusal(o.fmt));
		goto out;
	}

	char tmp[PATH_MAX], err[1024] = "";
	FILE *out = lp_output_open(o.output, tmp, sizeof(tmp));
	if (!out) {
		*unwritten = 1;
		exit_code = fail("cannot write %s: %s", o.output, strerror(errno));
		goto out;
	}
	rc = render(&o, &l, out, err, sizeof(err), top, top_text);
	rc = lp_output_close(out, o.output, tmp, rc, err, sizeof(err));
	if (rc) {
		*unwritten = 1;
		fprintf(stderr, "luaprof %s: %s\n", who, err);
		exit_code = LP_EXIT_USAGE;
		goto out;
	}
	summary(&o, &l, lp_fmt_name(o.fmt));
	/* Nothing in the stream says a memprof stream is sampled but the extension at its
	 * end: a sampled profile of an older agent (no LP_PROLOGUE_EXT flag, which makes the
	 * parser report the cut) cut right before it reads as an exact one of nothing. */
	if (st == LP_OK && l.kind == LP_STREAM_MEMPROF && !l.sampled && l.stats.events == 0 &&
	    l.nmeta == 0)
		fprintf(stderr, "luaprof %s: warning: %s has no allocation event and no luaprof "
			"extension: a profile of nothing, or a sampled profile cut before its "
			"samples\n", who, o.input);
	if (st == LP_ERR_TRUNCATED) {
		fprintf(stderr, "luaprof %s: warning: %s%s\n", who, msg, live);
		exit_code = LP_EXIT_TRUNCATED;
	}
out:
	if (facts) {
		*facts = l.facts;
		/* A cut stream has no facts of its end: the events read stand for them. */
		if (!facts->events && l.kind == LP_STREAM_MEMPROF && !l.sampled)
			facts->events = l.stats.events;
		facts->section_bytes = l.stats.section_bytes;
		if (l.kind == LP_STREAM_MEMPROF && !l.sampled && l.mem)
			lp_memprof_alloc_bytes(l.mem, &facts->alloc_bytes,
					       &facts->trace_alloc_bytes);
	}
	lp_loaded_free(&l);
	lp_input_close(&in);
	return exit_code;
}
