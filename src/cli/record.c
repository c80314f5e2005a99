/*
** `luaprof record -- luajit app.lua [args]`: runs an unmodified LuaJIT program with the
** in-process agent loaded, keeps the raw stream and renders it like `luaprof report`.
**
** How the agent gets in: /usr/bin/luajit has the VM linked in statically, so there is no
** libluajit to preload; instead the standalone interpreter's own start-up hook, LUA_INIT,
** loads build/luaprof.so by absolute path (package.loadlib, so the program's package.cpath
** is untouched and its own require "luaprof" gets the same instance) and the agent reads
** its settings from LUAPROF_RECORD and starts before the script's first line. The agent
** removes LUAPROF_RECORD and gives LUA_INIT back its original value (which it also runs,
** as luajit would have), so child processes are neither profiled into the same file nor
** changed. The profile ends at lua_close, at exit() or os.exit, whichever comes first.
** Interpreters that ignore LUA_INIT (luajit -E, embedding hosts) are detected: no stream.
*/
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/output.h"
#include "cli/proctree.h"
#include "report/load.h"
#include "report/render.h"
#include "report/text.h"
#include "stream/parse.h"
#include "util/size.h"
#include "util/stubenv.h"
#include "util/timerenv.h"

/*
** A profile started, its stream not finished: how (enum unfinished) the process that
** profiled ended, for the message. The program itself, exiting normally: it skipped the
** profiler's end. Another process the program ran (a wrapper's): its end is not known.
*/
enum unfinished { FINISHED, UNFINISHED_PROGRAM, UNFINISHED_OTHER, UNFINISHED_RUNNING };

static const char *unfinished_text(enum unfinished how, pid_t pid, int sampled)
{
	static char buf[512];
	if (how == UNFINISHED_RUNNING) {
		snprintf(buf, sizeof(buf), "the process it profiles (pid %ld) still runs (record "
			 "stopped waiting for it): %s", (long)pid,
			 sampled ? "sampled mode writes its stacks when it ends"
				 : "what its profile holds so far is rendered, and the raw stream "
				   "is complete when it ends");
		return buf;
	}
	int n = how == UNFINISHED_PROGRAM
		? snprintf(buf, sizeof(buf), "the program ended without finishing its profile: "
				"it executed another program, or left through _exit, which skip "
				"the profiler's end; ")
		: snprintf(buf, sizeof(buf), "the process it profiled (pid %ld) ended without "
				"finishing its profile: it was killed, executed another program, "
				"or left through _exit; ", (long)pid);
	snprintf(buf + n, sizeof(buf) - (size_t)n, "%s",
		 sampled ? "sampled mode writes its stacks at the end: there are none"
			 : "what the profiler had not yet written (up to a quarter second) is "
			   "lost");
	return buf;
}

int lp_cmd_record(int argc, char **argv);

void lp_cmd_record_usage(FILE *out)
{
	fputs("Usage: luaprof record [options] -- PROGRAM [ARGS...]\n"
	      "\n"
	      "Run a LuaJIT program (the standalone `luajit` interpreter) with the in-process\n"
	      "CPU profiler (or, with --memory, the memory profiler), then render the profile.\n"
	      "The program is not modified: the agent\n"
	      "(luaprof.so, next to this executable or $LUAPROF_AGENT) is loaded through\n"
	      "LUA_INIT before the script starts and stops when the program exits or is\n"
	      "stopped (Ctrl-C, SIGTERM: see Stopping below); the program's globals are\n"
	      "left as they are (no `misc` until it requires luaprof).\n"
	      "PROGRAM may also be a script that runs luajit: the first LuaJIT process to\n"
	      "start is profiled, others run as they would without record (the summary says\n"
	      "how many), and so do the children of the one profiled; record waits for the\n"
	      "one profiled if the script leaves it running.\n"
	      "\n"
	      "Options:\n"
	      "  -o, --output PATH   rendered profile (default luaprof.svg, or for -f collapsed,\n"
	      "                      pprof, speedscope luaprof.folded, .pb.gz, .json; -f top,\n"
	      "                      annotate and memprof: standard output); '-' = standard\n"
	      "                      output (the program's own standard output then goes to\n"
	      "                      standard error); checked before the program starts\n"
	      "  -f, --format FMT    flamegraph, collapsed, pprof, speedscope, top, annotate\n"
	      "                      (the Lua source with each line's share), or with\n"
	      "                      --memory (exact) memprof; default from the -o extension\n"
	      "                      (.svg; .html: the flame graph in a web page; .folded\n"
	      "                      .collapsed .pb.gz .pprof .json .txt)\n"
	      "      --raw PATH      raw stream (default: the output path with .bin, or\n"
	      "                      luaprof.bin when -o is '-' or a device such as /dev/null);\n"
	      "                      `luaprof report` renders it again later. It replaces only\n"
	      "                      an earlier profile, and only once the program has left one\n"
	      "      --memory        profile memory instead: every allocation, reallocation and\n"
	      "                      free by Lua line, C function or trace (Tarantool's memprof)\n"
	      "                      through the Lua allocator (not C code's own malloc);\n"
	      "                      rendered as the memprof text report on standard output\n"
	      "                      unless -o/-f say otherwise (graphs and lists: allocated\n"
	      "                      bytes; --value and --leak-only below for what is still\n"
	      "                      held)\n"
	      "      --sample SIZE   with --memory: sampled mode for production - the full Lua\n"
	      "                      and C stack of about one allocation per SIZE bytes (a\n"
	      "                      number of bytes, or with K, M, G, T or P, as 512K or\n"
	      "                      512KiB; 1 to 1P, 2^50) and which are still live at exit;\n"
	      "                      rendered as the top list; sampled mode writes its stacks\n"
	      "                      when the program ends: a program killed by SIGKILL (or a\n"
	      "                      signal it handles and then dies of without exit) leaves\n"
	      "                      none\n"
	      "      --value V       with --memory: what the graphs, pprof and top show -\n"
	      "                      alloc_space (default), alloc_objects, inuse_space,\n"
	      "                      inuse_objects (what is still allocated at the end)\n"
	      "      --leak-only     with --memory: what is still held - the memprof report's\n"
	      "                      HEAP SUMMARY alone, or graphs of inuse_space; garbage not\n"
	      "                      yet collected when the program ends counts as held (end\n"
	      "                      the script with collectgarbage() to leave it out)\n"
	      "      --human-readable  with the memprof report: sizes in KiB / MiB / GiB\n"
	      "      --lines         with -f top: rank Lua lines instead of functions\n"
	      "CPU profiler only:\n"
	      "      --mode M        C: full host and Lua stacks (default); L: innermost frames\n"
	      "  -r, --rate HZ       samples per second, 1 to 10000 (default 100)\n"
	      "      --clock CLK     cpu: CPU time of the VM thread (default); wall: elapsed time,\n"
	      "                      including time blocked in system calls, whose ticks (a\n"
	      "                      signal) interrupt those calls: sleeps end early, and\n"
	      "                      calls not restarted after a signal (nanosleep, poll,\n"
	      "                      epoll_wait) return EINTR to a program that may not retry\n"
	      "Both:\n"
	      "  -d, --duration SECS stop the program SECS seconds after it starts (30, 0.5;\n"
	      "                      0.001 to 1000000) and render what it recorded: SIGTERM\n"
	      "                      to it and the processes it started, which the profile\n"
	      "                      survives whole, SIGKILL 11 s later to any left (the\n"
	      "                      profile then cut short); record's status is then 0, and\n"
	      "                      the summary says when it was stopped. A program that ends\n"
	      "                      or is stopped first (Ctrl-C, SIGTERM to record) is as\n"
	      "                      without --duration, given the time it takes to end\n"
	      "  -n, --top N         frames in the summary on standard error (default 10, 0 for\n"
	      "                      none), unless the rendering is such a list itself (-f top,\n"
	      "                      memprof): then, with -f top, the list's length (default\n"
	      "                      20, 0 for every frame, as report's -n); --limit is the\n"
	      "                      same\n"
	      "  -q, --quiet         no summary (nor, on a terminal, the line saying what is\n"
	      "                      being recorded)\n"
	      "  -h, --help          this help\n"
	      "\n"
	      "CPU time is counted by a perf_event task clock where the process may open one\n"
	      "(root, or kernel.perf_event_paranoid at 1 or less, and no seccomp filter that\n"
	      "forbids it); otherwise by a POSIX timer, which ticks with the kernel (250 Hz on\n"
	      "many systems): a higher --rate then needs --clock wall. LUAPROF_TIMER=posix\n"
	      "keeps the POSIX timer. The summary gives the rate actually achieved.\n"
	      "\n"
	      "Exit status: the program's own status (128+N if killed by signal N), also when\n"
	      "the stream it left is cut short (what was read is rendered) or when it failed\n"
	      "before anything was recorded (a misspelt script: no file is written then, and\n"
	      "an earlier profile is kept); 0 when --duration stopped it, once the profile is\n"
	      "written; 1 bad usage, a program that cannot be run, unwritable output, or no\n"
	      "profile (the program never loaded the agent, or was killed before the profiler\n"
	      "wrote anything, or succeeded and recorded nothing over an earlier profile,\n"
	      "which is kept; with none there, the empty profile is written, status 0);\n"
	      "2 the stream is malformed; 3 the stream is truncated although the program\n"
	      "exited normally or --duration stopped it.\n"
	      "A program that fails or is killed is named with its status on standard error.\n"
	      "\n"
	      "Stopping: Ctrl-C reaches the program, and the profile ends with it (luajit\n"
	      "stops at its first Ctrl-C only where it interprets Lua code; a script blocked\n"
	      "in a call, as a server in accept, or in a compiled loop needs a second). record\n"
	      "itself outlives SIGINT and SIGQUIT while the program runs (as time(1) does) and\n"
	      "passes SIGTERM and SIGHUP on to it; any of them cancels --duration. From a\n"
	      "script, signal the program or its process group (kill -INT -PGID), or send\n"
	      "record SIGTERM (timeout 60 luaprof record ...), or give record --duration. The\n"
	      "profile is finished before the program dies of a signal that it leaves at its\n"
	      "default action: SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGPIPE (its output piped to\n"
	      "a reader that left, as head) or a crash's (SIGSEGV, SIGBUS, SIGFPE, SIGILL,\n"
	      "SIGABRT). SIGKILL cuts it short: an exact memory profile then loses its events\n"
	      "not yet written, 2 MiB at a time. To see what a program still holds\n"
	      "(--leak-only), end it with SIGTERM (or --duration) rather than Ctrl-C: after\n"
	      "the error Ctrl-C raises in Lua code, luajit collects all garbage first.\n"
	      "\n"
	      "Examples:\n"
	      "  luaprof record -o cpu.svg -- luajit app.lua --port 8080\n"
	      "  luaprof record --rate 1000 --clock wall -f collapsed -o app.folded -- luajit app.lua\n"
	      "  luaprof record -o cpu.pb.gz -- luajit bench.lua && go tool pprof -top cpu.pb.gz\n"
	      "  luaprof record -d 60 -o cpu.svg -- luajit server.lua   (its first minute)\n"
	      "  luaprof record --memory -- luajit app.lua         (allocations by line)\n"
	      "  luaprof record --memory --sample 512K -o alloc.svg -- luajit app.lua\n"
	      "  luaprof record --memory --leak-only -- luajit app.lua   (what is still held)\n"
	      "  luaprof record --memory --leak-only -o heap.svg -- luajit app.lua  (as a graph)\n",
	      out);
}

struct opts {
	const char *output;
	const char *raw;
	enum lp_fmt fmt;  /* LP_FMT_NONE: from the extension */
	char mode;
	unsigned rate;
	const char *clock;
	int top;
	int top_given;         /* -n given: with -f top, the list's length (else its default) */
	int quiet;
	int memory;
	const char *value;     /* --value: the memory profile's value to render */
	int leak_only;         /* --leak-only: what is still held */
	int human;             /* --human-readable: the memprof report's sizes in KiB... */
	int lines;             /* --lines: -f top ranks Lua lines, not functions */
	const char *cpu_flag;  /* a CPU-profiler option given (--mode, --rate, --clock) */
	unsigned long long sample;
	uint64_t duration_ns;  /* -d: stop the program this long after it starts; 0: never */
	const char *duration;  /* -d's value as given, for messages */
	char **cmd;
};

#define fail(...) lp_cli_fail("record", __VA_ARGS__)

static int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || *end || end == s || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* -d's limit: about 11.5 days, well past any profile worth rendering, and far from
 * uint64_t's nanoseconds. */
#define DURATION_MAX_S 1000000

/*
** -d's SECONDS: a decimal number (30, 0.5, .25) from 0.001 to DURATION_MAX_S, as
** nanoseconds in *ns. Digits and one point only: no sign, exponent, hexadecimal, inf or
** nan (which strtod takes), nor a unit (timeout's 30s, 1m), refused rather than guessed.
*/
static int parse_duration(const char *s, uint64_t *ns)
{
	uint64_t whole = 0, frac = 0, scale = 1000000000ull;
	int digits = 0, point = 0;
	for (const char *c = s; *c; c++) {
		if (*c == '.' && !point) {
			point = 1;
		} else if (*c >= '0' && *c <= '9') {
			digits++;
			if (!point) {
				if (whole > DURATION_MAX_S)
					return -1;
				whole = whole * 10 + (uint64_t)(*c - '0');
			} else if (scale > 1) { /* beyond nanoseconds: dropped */
				scale /= 10;
				frac += (uint64_t)(*c - '0') * scale;
			}
		} else {
			return -1;
		}
	}
	if (!digits || whole > DURATION_MAX_S || (whole == DURATION_MAX_S && frac))
		return -1;
	*ns = whole * 1000000000ull + frac;
	return *ns < 1000000ull ? -1 : 0;
}

/* Where a rendering goes without -o: a file named for its format, text to standard
 * output. */
static const char *default_output(enum lp_fmt fmt)
{
	switch (fmt) {
	case LP_FMT_COLLAPSED: return "luaprof.folded";
	case LP_FMT_PPROF: return "luaprof.pb.gz";
	case LP_FMT_SPEEDSCOPE: return "luaprof.json";
	case LP_FMT_TOP: case LP_FMT_ANNOTATE: case LP_FMT_MEMPROF: return "-";
	default: return "luaprof.svg";
	}
}

/* An unknown option; the ones py-spy and rbspy users type for what record does otherwise
 * get what to do instead. */
static int bad_option(const char *arg, const struct option *longopts)
{
	size_t n = strcspn(arg, "=");
	if (!strcmp(arg, "-p") || (n > 3 && !strncmp(arg, "--pid", n)))
		return fail("no %s option: luaprof cannot attach to a running process yet; run "
			    "the program under record, or start the profiler from inside it "
			    "(require \"luaprof\", see README.md)",
			    !strncmp(arg, "--", 2) ? "--pid" : "-p");
	return lp_cli_bad_option("record", arg, longopts);
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	enum { O_RAW = 256, O_MODE, O_CLOCK, O_MEMORY, O_SAMPLE, O_VALUE, O_LEAK, O_HUMAN,
	       O_LINES };
	static const struct option longopts[] = {
		{ "output", required_argument, NULL, 'o' },
		{ "format", required_argument, NULL, 'f' },
		{ "raw", required_argument, NULL, O_RAW },
		{ "mode", required_argument, NULL, O_MODE },
		{ "rate", required_argument, NULL, 'r' },
		{ "clock", required_argument, NULL, O_CLOCK },
		{ "memory", no_argument, NULL, O_MEMORY },
		{ "sample", required_argument, NULL, O_SAMPLE },
		{ "value", required_argument, NULL, O_VALUE },
		{ "leak-only", no_argument, NULL, O_LEAK },
		{ "human-readable", no_argument, NULL, O_HUMAN },
		{ "lines", no_argument, NULL, O_LINES },
		{ "top", required_argument, NULL, 'n' },
		{ "duration", required_argument, NULL, 'd' },
		{ "limit", required_argument, NULL, 'n' }, /* report's name for it */
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	memset(o, 0, sizeof(*o));
	o->fmt = LP_FMT_NONE;
	o->mode = 'C';
	o->rate = 100;
	o->clock = "cpu";
	o->top = 10;
	optind = 1;
	opterr = 0;
	int c;
	long v;
	/* '+': stop at the first non-option, the program. */
	while ((c = getopt_long(argc, argv, "+:o:f:n:r:d:qh", longopts, NULL)) != -1) {
		switch (c) {
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
		case 'f':
			o->fmt = lp_fmt_named(optarg);
			if (o->fmt == LP_FMT_NONE)
				return fail("unknown format '%s' (flamegraph, collapsed, pprof, "
					    "speedscope, top, annotate, memprof)%s%s%s%s", optarg,
					    optarg[0] == '=' ? "; -f takes no '=': -f " : "",
					    optarg[0] == '=' ? optarg + 1 : "",
					    optarg[0] == '=' ? ", or --format=" : "",
					    optarg[0] == '=' ? optarg + 1 : "");
			if (o->fmt == LP_FMT_INFO)
				return fail("-f info describes a profile file: record keeps the raw "
					    "stream (PATH.bin beside -o PATH); run luaprof report "
					    "-f info on it");
			break;
		case O_MEMORY:
			o->memory = 1;
			break;
		case O_SAMPLE: {
			uint64_t size;
			/* The range memprof.start and luaprof_memprof_start take. */
			if (lp_size_parse(optarg, 1ull << 50, &size))
				return fail("--sample expects a size from 1 byte to 1P (2^50 bytes): a "
					    "whole number of bytes, or with K, M, G, T or P, binary "
					    "(e.g. 524288, 512K, 512KiB, 1M), not '%s'", optarg);
			o->sample = size;
			break;
		}
		case O_VALUE:
			if (strcmp(optarg, "alloc_space") && strcmp(optarg, "alloc_objects") &&
			    strcmp(optarg, "inuse_space") && strcmp(optarg, "inuse_objects"))
				return fail("unknown --value '%s' (alloc_space, alloc_objects, "
					    "inuse_space, inuse_objects)", optarg);
			o->value = optarg;
			break;
		case O_LINES:
			o->lines = 1;
			break;
		case O_HUMAN:
			o->human = 1;
			break;
		case O_LEAK:
			o->leak_only = 1;
			break;
		case O_RAW:
			/* The raw stream is read back to render it: a file, never standard
			 * output ('-' made a file named -). */
			if (!strcmp(optarg, "-") || !*optarg)
				return fail("--raw needs a file name (the stream is read back to "
					    "render it; '-' is standard output for -o only)");
			if (!strcmp(optarg, "--"))
				return fail("--raw needs a file name before --");
			o->raw = optarg;
			break;
		case O_MODE:
			if (!strcmp(optarg, "D"))
				return fail("--mode D keeps counters inside the process and writes "
					    "no stream to render; use L or C (or luaprof.sysprof."
					    "report() in the program)");
			if (strcmp(optarg, "L") && strcmp(optarg, "C"))
				return fail("--mode must be L or C, not '%s'", optarg);
			o->mode = optarg[0];
			o->cpu_flag = "--mode";
			break;
		case 'r': /* py-spy's and rbspy's letter */
			if (parse_long(optarg, 1, 10000, &v))
				return fail("--rate expects samples per second from 1 to 10000, "
					    "not '%s'", optarg);
			o->rate = (unsigned)v;
			o->cpu_flag = "--rate";
			break;
		case O_CLOCK:
			if (strcmp(optarg, "cpu") && strcmp(optarg, "wall"))
				return fail("--clock must be cpu or wall, not '%s'", optarg);
			o->clock = optarg;
			o->cpu_flag = "--clock";
			break;
		case 'n':
			if (parse_long(optarg, 0, 1000000, &v))
				return fail("-n (--top, --limit) expects a number from 0 to 1000000, "
					    "not '%s'", optarg);
			o->top = (int)v;
			o->top_given = 1;
			break;
		case 'd': /* py-spy's, rbspy's and async-profiler's letter */
			if (parse_duration(optarg, &o->duration_ns))
				return fail("-d (--duration) expects seconds, a decimal number from "
					    "0.001 to %d (e.g. 30 or 0.5), not '%s'", DURATION_MAX_S,
					    optarg);
			o->duration = optarg;
			break;
		case 'q':
			o->quiet = 1;
			break;
		case 'h':
			lp_cmd_record_usage(stdout);
			exit(lp_cli_stdout_status("record"));
		case ':':
			return fail("option '%s' needs a value", argv[optind - 1]);
		default: {
			char buf[3];
			return bad_option(lp_cli_refused(argv, buf), longopts);
		}
		}
	}
	if (optind >= argc)
		return fail("no program to run (luaprof record [options] -- luajit app.lua)");
	o->cmd = argv + optind;
	/* execvp would say ENOENT, the search of PATH for "" EACCES (its directories). */
	if (!*o->cmd[0])
		return fail("the program's name is empty (an unset variable?): luaprof record "
			    "[options] -- luajit app.lua");
	if (o->fmt == LP_FMT_MEMPROF && !o->memory)
		return fail("-f memprof is the memory report: add --memory");
	if (o->sample && !o->memory)
		return fail("--sample applies to the memory profiler: add --memory");
	if ((o->value || o->leak_only) && !o->memory)
		return fail("%s applies to the memory profiler: add --memory",
			    o->value ? "--value" : "--leak-only");
	if (o->leak_only && o->value && strncmp(o->value, "inuse_", 6))
		return fail("--leak-only shows what is still held: it goes with --value "
			    "inuse_space or inuse_objects, not %s", o->value);
	if (o->memory && o->cpu_flag)
		return fail("%s applies to the CPU profiler, not to --memory%s", o->cpu_flag,
			    strcmp(o->cpu_flag, "--rate") ? "" : " (whose rate is --sample)");
	if (o->sample && o->fmt == LP_FMT_MEMPROF)
		return fail("-f memprof needs every event: it does not go with --sample");
	/* The agent would refuse it at start, after the program had begun, unprofiled. */
	char stub_err[160];
	if (o->sample && lp_stubenv_read(stub_err, sizeof(stub_err)) == LP_STUBENV_BAD)
		return fail("%s", stub_err);
	if (!o->memory && lp_timerenv_read(stub_err, sizeof(stub_err)) == LP_TIMERENV_BAD)
		return fail("%s", stub_err);
	if (o->memory && !o->output && o->fmt == LP_FMT_NONE)
		o->fmt = o->sample ? LP_FMT_TOP : LP_FMT_MEMPROF;
	if (!o->quiet)
		lp_fmt_note_mismatch("record", o->fmt, o->output);
	if (!o->output)
		o->output = default_output(o->fmt);
	/* A device or FIFO has no extension to tell: it gets what standard output would. */
	if (o->fmt == LP_FMT_NONE && strcmp(o->output, "-") && !lp_output_is_special(o->output) &&
	    lp_fmt_of_path(o->output, &o->fmt))
		return fail("cannot tell the format from '%s'; use -f%s, or an extension that "
			    "names one (%s)", o->output,
			    strlen(o->output) > 4 &&
					    !strcasecmp(o->output + strlen(o->output) - 4, ".bin")
				    ? " (record writes the raw stream too: --raw names it)" : "",
			    lp_fmt_extensions());
	if (o->fmt == LP_FMT_NONE) /* standard output or .txt: the top list, or for memory
				    * the memprof report */
		o->fmt = o->memory && !o->sample ? LP_FMT_MEMPROF : LP_FMT_TOP;
	if (o->lines && o->fmt != LP_FMT_TOP)
		return fail("--lines applies to -f top (rank lines, not functions), not to -f %s: "
			    "the other formats keep lines", lp_fmt_name(o->fmt));
	if (o->human && o->fmt != LP_FMT_MEMPROF)
		return fail("--human-readable applies to the memprof text report (--memory, "
			    "exact mode, -f memprof): the graphs and top give sizes in units "
			    "already");
	if (o->fmt == LP_FMT_MEMPROF && o->value)
		return fail("%s", LP_CLI_VALUE_MEMPROF);
	/* The memprof report lists every site and has no summary list: -n would do nothing. */
	if (o->fmt == LP_FMT_MEMPROF && o->top_given && o->top > 0)
		return fail("-n applies to -f top (its length) and to the summary's list of the "
			    "other formats, not to the memprof report, which lists every site");
	/* -n's list is the summary's unless the rendering is the list: -q leaves it out. */
	if (o->quiet && o->top_given && o->top > 0 && o->fmt != LP_FMT_TOP)
		return fail("-n %d is the length of the summary's list, which -q leaves out: "
			    "give one or the other (-n is the list's length only with -f top)",
			    o->top);
	return 0;
}

/* The raw stream's path: --raw, else the output with its extension replaced by .bin; in
 * buf absolute, for the program, and in shown as the user gave it (or as -o suggests it),
 * for messages: the rendering's path is printed as given, and the two read alike. */
static int raw_path(const struct opts *o, char *buf, size_t len, char *shown, size_t slen)
{
	const char *src = o->raw;
	char tmp[PATH_MAX];
	if (!src) {
		if (!strcmp(o->output, "-") || lp_output_is_special(o->output)) {
			src = "luaprof.bin";
		} else {
			snprintf(tmp, sizeof(tmp), "%s", o->output);
			const char *ext = lp_path_ext(tmp);
			if (ext)
				tmp[ext - tmp] = '\0';
			if (strlen(tmp) + 5 > sizeof(tmp))
				return -1;
			strcat(tmp, ".bin");
			src = tmp;
		}
	}
	if ((size_t)snprintf(shown, slen, "%s", src) >= slen)
		return -1;
	/* Absolute, since the program may change directory. */
	if (src[0] == '/')
		return (size_t)snprintf(buf, len, "%s", src) < len ? 0 : -1;
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)))
		return -1;
	return (size_t)snprintf(buf, len, "%s/%s", cwd, src) < len ? 0 : -1;
}

/*
** Why the raw stream may not replace what is at path, or NULL when it may: nothing there,
** an empty file, or a profile (what report reads as one, plain or gzipped: see
** lp_output_holds_profile; a text file may start with "ljs"). Anything
** else is the user's: a device or FIFO could not be read back once the program ends, and
** a file of another kind (the script itself, given as --raw by mistake) would be lost.
*/
static const char *raw_unsafe(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return NULL; /* absent, or the probe says why it cannot be written */
	if (!S_ISREG(st.st_mode))
		return "is not a regular file: the raw stream is read back once the program ends "
		       "(give --raw a file name)";
	if (st.st_size == 0)
		return NULL;
	int is = lp_output_holds_profile(path);
	if (is < 0)
		return "cannot be read to tell whether it is a profile (remove it or give --raw "
		       "another name)";
	if (is)
		return NULL;
	return "exists and is not a profile: the raw stream replaces only an earlier profile "
	       "(remove the file or give --raw another name)";
}

/* luaprof.so: $LUAPROF_AGENT, else next to this executable. */
static int agent_path(char *buf, size_t len)
{
	const char *env = getenv("LUAPROF_AGENT");
	if (env && *env) {
		/* Absolute: the program (a wrapper) may change directory before luajit starts. */
		char abs[PATH_MAX];
		if ((size_t)snprintf(buf, len, "%s", realpath(env, abs) ? abs : env) >= len)
			return -1;
	} else {
		char exe[PATH_MAX];
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n <= 0)
			return -1;
		exe[n] = '\0';
		if ((size_t)snprintf(buf, len, "%s/luaprof.so", dirname(exe)) >= len)
			return -1;
	}
	return access(buf, R_OK);
}

/* Whether path starts as an ELF file does: LUAPROF_AGENT naming anything else (a
 * directory, a script) would have luajit fail to load it, and record blame LUA_INIT. */
static int is_elf(const char *path)
{
	unsigned char m[4];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, m, sizeof(m));
	if (fd >= 0)
		close(fd);
	return n == 4 && !memcmp(m, "\x7f" "ELF", 4);
}

/* Lua long-bracket literal of s: [==[s]==] with enough '=' not to occur in s. */
static int lua_literal(const char *s, char *buf, size_t len)
{
	char close[16] = "]";
	for (int level = 0; level < 10; level++) {
		close[level + 1] = ']';
		close[level + 2] = '\0';
		if (!strstr(s, close)) {
			char eq[12];
			memset(eq, '=', (size_t)level);
			eq[level] = '\0';
			return (size_t)snprintf(buf, len, "[%s[%s]%s]", eq, s, eq) < len ? 0 : -1;
		}
		close[level + 1] = '=';
	}
	return -1;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The program, while it runs: a SIGTERM or SIGHUP sent to record alone (timeout, a
 * closed terminal, kill) is passed on to it, and record stays to keep what it recorded. */
static volatile pid_t child_pid, prof_pid; /* the program; the process that profiles */
static volatile sig_atomic_t stop_waiting;   /* SIGINT while waiting for prof_pid */
static volatile sig_atomic_t forwarded;      /* a SIGTERM or SIGHUP was passed on */
static volatile sig_atomic_t interrupted;    /* a SIGINT or SIGQUIT since the program started */

static void forward(int sig)
{
	if (sig == SIGINT || sig == SIGQUIT) {
		interrupted = 1;
		stop_waiting = 1;
		return;
	}
	forwarded = 1;
	if (child_pid > 0)
		kill(child_pid, sig);
	if (prof_pid > 0 && prof_pid != child_pid)
		kill(prof_pid, sig);
}

/* 0 when file is a regular file we may execute, else why not (EISDIR for a directory,
 * where execve says EACCES). */
static int runnable(const char *file)
{
	struct stat st;
	if (stat(file, &st) != 0)
		return errno;
	if (S_ISDIR(st.st_mode))
		return EISDIR;
	if (!S_ISREG(st.st_mode))
		return EACCES;
	return access(file, X_OK) == 0 ? 0 : errno;
}

/*
** 0 when execvp could run cmd as far as can be told before it does (found in PATH as
** execvp searches it, a regular executable file), else an errno saying why not: the
** program is checked before the output files are touched and the banner printed. A
** program that goes away meanwhile still fails in the child, which says why.
*/
static int program_check(const char *cmd)
{
	if (strchr(cmd, '/'))
		return runnable(cmd);
	/* Without PATH, execvp searches the system's default path (confstr's). */
	char defpath[256] = "/bin:/usr/bin";
	const char *path = getenv("PATH");
	if (!path) {
		size_t n = confstr(_CS_PATH, defpath, sizeof(defpath));
		if (n == 0 || n > sizeof(defpath))
			snprintf(defpath, sizeof(defpath), "/bin:/usr/bin");
		path = defpath;
	}
	int found = ENOENT;
	for (const char *p = path;; p++) {
		const char *end = strchr(p, ':');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char file[PATH_MAX];
		/* An empty entry is the current directory, as execvp takes it. A file there
		 * that cannot run is passed over, as execvp does, and named if nothing runs. */
		if ((size_t)snprintf(file, sizeof(file), "%.*s%s%s", (int)n, p, n ? "/" : "",
				     cmd) < sizeof(file)) {
			int e = runnable(file);
			if (e == 0)
				return 0;
			if (e != ENOENT && e != ENOTDIR)
				found = EACCES;
		}
		if (!end)
			return found;
		p = end;
	}
}

/*
** Why LuaJIT's standalone interpreter, cmd[0] named luajit*, would not load the agent with
** the arguments cmd gives it, read as its collectargs reads them: NULL when it would. It
** runs LUA_INIT, which loads the agent, only once its options are read: -E skips LUA_INIT,
** and an option it does not know (or -e, -l, -j without their argument, or -b after
** another option) stops it at its usage message first; record then found no profile and
** could only guess why. Another program (a wrapper script) is not judged.
*/
static const char *luajit_args_problem(char *const *cmd, char *buf, size_t len)
{
	const char *prog = strrchr(cmd[0], '/') ? strrchr(cmd[0], '/') + 1 : cmd[0];
	if (strncmp(prog, "luajit", 6))
		return NULL;
	int other = 0; /* an option before: -b must be the first */
	for (char *const *a = cmd + 1; *a; a++) {
		const char *arg = *a;
		if (arg[0] != '-' || !arg[1])
			return NULL; /* the script, or - (standard input) */
		switch (arg[1]) {
		case '-':
		case 'i':
		case 'v':
			if (arg[2])
				break;
			if (arg[1] == '-')
				return NULL;
			other = 1;
			continue;
		case 'e':
		case 'j':
		case 'l':
			other = 1;
			if (!arg[2] && !*++a) {
				snprintf(buf, len, "%s -%c needs %s after it: luajit would stop at its "
					 "usage message before running LUA_INIT, which loads the "
					 "profiler", prog, arg[1],
					 arg[1] == 'e' ? "a chunk of Lua code (-e 'code')"
					 : arg[1] == 'l' ? "a module name" : "a command (-jon, -jv)");
				return buf;
			}
			continue;
		case 'O':
			other = 1;
			continue;
		case 'b':
			if (!other)
				return NULL; /* luajit -b ...: its own arguments follow */
			snprintf(buf, len, "%s -b (bytecode) must be its first option: luajit would "
				 "stop at its usage message before running LUA_INIT, which loads the "
				 "profiler", prog);
			return buf;
		case 'E':
			snprintf(buf, len, "%s -E ignores LUA_INIT, through which record loads the "
				 "profiler: leave -E out (the profiler then runs the program's own "
				 "LUA_INIT, if any, as luajit would)", prog);
			return buf;
		}
		snprintf(buf, len, "%s has no option '%s': it would stop at its usage message "
			 "before running LUA_INIT, which loads the profiler (luajit -h lists its "
			 "options; a script's own options go after the script's name)", prog, arg);
		return buf;
	}
	return NULL;
}

/* On a terminal, before the program starts: what is being recorded, and when the result
 * comes (nothing is printed while the program runs, which owns the terminal then). */
static void banner(const struct opts *o)
{
	if (o->quiet || !isatty(STDERR_FILENO))
		return;
	/* The command as typed, its program without a directory: "luajit app.lua 'a b'". */
	char name[72];
	const char *prog = strrchr(o->cmd[0], '/') ? strrchr(o->cmd[0], '/') + 1 : o->cmd[0];
	size_t n = (size_t)snprintf(name, sizeof(name), "%s", prog);
	for (char *const *a = o->cmd + 1; *a && n < sizeof(name); a++) /* 'a b' as one */
		n += (size_t)snprintf(name + n, sizeof(name) - n, **a && !strpbrk(*a, " \t") ?
				      " %s" : " '%s'", *a);
	if (n >= sizeof(name))
		memcpy(name + sizeof(name) - 4, "...", 4);
	/* How to stop it: Ctrl-C, but not for --leak-only, whose heap Ctrl-C's error empties
	 * (see Stopping in --help). */
	const char *stop = o->leak_only
		? " with SIGTERM (not Ctrl-C: after its error luajit collects all garbage, so "
		  "nothing would show as held)"
		: " (Ctrl-C)";
	char until[224]; /* when the profile follows */
	if (o->duration)
		snprintf(until, sizeof(until), "after %.20s s (--duration), or when it exits or is "
			 "stopped first%s", o->duration, stop);
	else
		snprintf(until, sizeof(until), "when it exits or is stopped%s", stop);
	if (!o->memory) {
		fprintf(stderr, "luaprof record: sampling %s at %u Hz (%s time, mode %c); the "
			"profile follows %s\n", name, o->rate,
			strcmp(o->clock, "wall") ? "CPU" : "wall-clock", o->mode, until);
	} else if (o->sample) {
		char sz[32];
		lp_size_format(sz, sizeof(sz), (int64_t)o->sample, LP_SIZE_TRIM);
		fprintf(stderr, "luaprof record: sampling the allocations of %s, one per %s on "
			"average; the profile follows %s\n", name, sz, until);
	} else {
		fprintf(stderr, "luaprof record: recording every allocation, reallocation and "
			"free of %s (exact mode); the report follows %s\n", name,
			o->duration || o->leak_only ? until : "when it exits");
	}
}

/*
** The files record and the agents it loads talk through (the agent's claim_take and
** status_tell), beside the raw stream, where any agent that can write the profile sees
** them: the claim, which the first LuaJIT process to load the agent removes (of several a
** wrapper runs, that one is profiled, the others run as without record and say so), and
** the status, where each appends "L pid" (loaded), "P pid" (profiling), "E pid" (could not
** write the profile) or "S pid" (skipped). Files rather than inherited descriptors: a
** wrapper that closes the descriptors it does not know (Python's subprocess) or takes a
** number for its own (`exec 200>lock`) would cut them, and every program and child would
** inherit them. On failure the paths are empty: no claim, no status (every LuaJIT process
** profiles, record cannot tell a program that never loaded the agent).
**
** record holds an open-file-description lock on byte 1 of both while it runs (REC_BYTE; the
** agent's lock is on byte 0 of the status: status_tell), so that a record killed by
** SIGKILL, whose files are left, is told from a live one by the next record in the
** directory, which removes them (sweep_stale). A lock, not a pid in the file: a pid says
** nothing of a process in another pid namespace, and ids are reused.
*/
#define REC_BYTE 1
/* A file younger than this is not judged: its record may be between making it and locking
 * it. */
#define REC_STALE_AGE 2

struct rec_files {
	char claim[PATH_MAX], status[PATH_MAX];
	int claim_fd, status_fd; /* holding the locks; -1 for none */
};

/* Whether byte `at` of fd's file is locked by another process, or by another open file
 * description (a lock of any kind: OFD and POSIX locks conflict). */
static int byte_locked(int fd, off_t at)
{
	struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = at, .l_len = 1 };
	return fcntl(fd, F_OFD_GETLK, &lk) != 0 || lk.l_type != F_UNLCK;
}

/*
** Removes the claim and status files in dir of records that are gone: a record killed
** with SIGKILL (or a machine that went down) leaves them. Only files of this user, older
** than REC_STALE_AGE seconds, whose record holds no lock on them any more, and, for a
** status, whose program no longer profiles (the agent's lock, byte 0). A record of a
** luaprof before these locks, still running beside this one, is not told from a dead one
** (its files were never locked).
*/
static void sweep_stale(const char *dir)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return;
	time_t now = time(NULL);
	struct dirent *e;
	while ((e = readdir(dp)) != NULL) {
		static const char *const prefixes[] = { ".luaprof-claim.", ".luaprof-status." };
		size_t len = strlen(e->d_name), plen = 0;
		for (unsigned i = 0; i < 2 && !plen; i++)
			if (!strncmp(e->d_name, prefixes[i], strlen(prefixes[i])))
				plen = strlen(prefixes[i]);
		if (!plen || len != plen + 6) /* mkostemp's XXXXXX */
			continue;
		int fd = openat(dirfd(dp), e->d_name,
				O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd < 0)
			continue;
		struct stat sb, now_sb;
		int stale = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_uid == geteuid() &&
			    now - sb.st_mtime >= REC_STALE_AGE && !byte_locked(fd, REC_BYTE) &&
			    !byte_locked(fd, 0);
		/* The same file still at that name (not one made since). */
		if (stale && fstatat(dirfd(dp), e->d_name, &now_sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    now_sb.st_ino == sb.st_ino && now_sb.st_dev == sb.st_dev)
			unlinkat(dirfd(dp), e->d_name, 0);
		close(fd);
	}
	closedir(dp);
}

/* Makes path's file from its template and locks REC_BYTE: the descriptor, or -1. */
static int rec_file_make(char *path)
{
	int fd = mkostemp(path, O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = REC_BYTE,
			    .l_len = 1 };
	/* Without the lock (a file system without them) other records cannot ask either:
	 * byte_locked takes that for a lock, and nothing is removed there. */
	if (fcntl(fd, F_OFD_SETLK, &lk) != 0) {
		; /* the file is kept all the same */
	}
	return fd;
}

static void rec_files_make(struct rec_files *f, const char *raw)
{
	f->claim[0] = f->status[0] = '\0';
	f->claim_fd = f->status_fd = -1;
	char c[PATH_MAX], st[PATH_MAX], dir[PATH_MAX];
	if ((size_t)snprintf(dir, sizeof(dir), "%s", raw) >= sizeof(dir))
		return;
	const char *d = dirname(dir); /* short names: the raw stream's may be as long as allowed */
	if ((size_t)snprintf(c, sizeof(c), "%s/.luaprof-claim.XXXXXX", d) >= sizeof(c) ||
	    (size_t)snprintf(st, sizeof(st), "%s/.luaprof-status.XXXXXX", d) >= sizeof(st))
		return;
	sweep_stale(d);
	int fc = rec_file_make(c);
	if (fc < 0)
		return;
	int fs = rec_file_make(st);
	if (fs < 0) {
		unlink(c);
		close(fc);
		return;
	}
	memcpy(f->claim, c, sizeof(c));
	memcpy(f->status, st, sizeof(st));
	f->claim_fd = fc;
	f->status_fd = fs;
}

static void rec_files_remove(const struct rec_files *f)
{
	if (f->claim[0])
		unlink(f->claim);
	if (f->status[0])
		unlink(f->status);
	if (f->claim_fd >= 0)
		close(f->claim_fd);
	if (f->status_fd >= 0)
		close(f->status_fd);
}

/* The process that holds the status file's lock (status_tell: the one profiling, while it
 * runs), as this process sees its id; 0 when none does. */
static pid_t lock_holder(const struct rec_files *f)
{
	int fd = f->status[0] ? open(f->status, O_RDWR | O_CLOEXEC) : -1;
	if (fd < 0)
		return 0;
	struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1 }; /* byte 0 */
	pid_t p = fcntl(fd, F_GETLK, &lk) == 0 && lk.l_type != F_UNLCK ? lk.l_pid : 0;
	close(fd);
	return p;
}

/* What -d did: filled by its stopper (struct stopper), told by tell_status. All 0 when
 * it did nothing (no -d, the program ended first, the user stopped it first). */
struct stop_done {
	uint64_t stopped_ns; /* when SIGTERM was sent, after the program's start; 0 not */
	pid_t other;    /* the process that profiles, stopped after the program ended; 0 when
			 * it was the program */
	pid_t killed;   /* the one (the program, or the process that profiles) that outlived
			 * STOP_GRACE_NS after SIGTERM and got SIGKILL; 0 for none */
	int killed_procs; /* processes it started that SIGTERM went to, killed so */
	int killed_late;  /* and those started after SIGTERM (not sent it), killed so */
	int missed;       /* it started more than SIGTERM went to (STOP_MAX_PROCS) */
	int kill_missed;  /* more than SIGKILL went to, counting those started since (and
			   * not already missed at SIGTERM) */
};

/* What the status file says so far. */
struct rec_status {
	int loaded;   /* an agent was loaded */
	pid_t prof;   /* the process that profiles ('P'), 0 for none yet */
	pid_t child;  /* the program record ran */
	int error;    /* it could not write its profile ('E') */
	int skipped;  /* processes that loaded the agent and ran without it ('S') */
	pid_t abandoned; /* record stopped waiting for it, still running (Ctrl-C) */
	struct stop_done did; /* -d, record's own */
};

/* Fills r's fields from the status file (the others, record's own, are left). */
static void rec_status_read(const struct rec_files *f, struct rec_status *r)
{
	r->loaded = r->error = r->skipped = 0;
	r->prof = 0;
	FILE *in = f->status[0] ? fopen(f->status, "re") : NULL;
	if (!in)
		return;
	char what;
	long p;
	while (fscanf(in, " %c %ld", &what, &p) == 2) {
		r->loaded = 1;
		if (what == 'P')
			r->prof = (pid_t)p;
		else if (what == 'E')
			r->error = 1;
		else if (what == 'S')
			r->skipped++;
	}
	fclose(in);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/*
** How long a program stopped by -d has after SIGTERM before it gets SIGKILL: the agent
** finishes the profile before the program dies of SIGTERM, and waits up to 5 s for that
** (termstop.c's STOP_WAIT_NS), twice that if the signal is held for a start or a stop
** under way. A program that ignores or handles SIGTERM and goes on would otherwise stay
** behind; SIGKILL cuts its profile short.
*/
#define STOP_GRACE_NS 11000000000ull
/* The processes the program started that -d stops with it (the first found). */
#define STOP_MAX_PROCS 256

/* -d: the program's stop when its time is up (struct stopper, stop_tick). */
struct stopper {
	uint64_t t0;        /* now_ns() when the program started */
	uint64_t deadline;  /* now_ns() when it is stopped; 0 for never */
	uint64_t sent;      /* now_ns() when SIGTERM was sent; 0 not yet */
	int escalated;      /* SIGKILL's time came: sent to those left, if any */
	struct stop_done did; /* what it did (did.other: root when it was not the program,
			       * which had ended; did.missed: procs was filled at SIGTERM) */
	pid_t root;         /* the one SIGTERM was sent to, and its descendants: */
	size_t nprocs;
	struct lp_proc procs[STOP_MAX_PROCS]; /* root's descendants when SIGTERM was sent,
					       * then those found at SIGKILL's time */
	int adopting;       /* record is a child subreaper (run): a process the program left
			     * when its parent ended is record's child, found by stop_scan */
};

/*
** Adds to s->procs, after its s->nprocs, the processes the program started: descendants
** of root and of those of s->procs still running and, adopting, record's own children
** other than root, with theirs (a process whose parent ended, as `cmd &` in an os.execute
** leaves it, is no longer below root; record had no other child: run). Returns the count.
*/
static size_t stop_scan(struct stopper *s, pid_t root)
{
	size_t n = s->nprocs;
	if (s->adopting)
		n = lp_proctree_children(getpid(), root, s->procs, n, STOP_MAX_PROCS);
	return lp_proctree_grow(root, s->procs, n, STOP_MAX_PROCS);
}

/* Reaps record's children that ended, adopted as a child subreaper: called once the
 * program is reaped (waitpid(-1) would take its status otherwise). */
static void reap_adopted(const struct stopper *s)
{
	while (s->adopting && waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/*
** SIGKILL's time: to root (the program, not yet reaped, or the process that profiles; 0
** once they ended) and to those of s->procs left, and to the processes started since
** SIGTERM, which it did not reach: descendants of root or of those left (a program that
** handles SIGTERM and then runs os.execute("sleep 100") would otherwise leave the sleep
** running, holding record's output open). Each is stopped (SIGSTOP) before the next look,
** so that none starts another unseen between the last look and the kill. Those started
** since are counted apart (did.killed_late): SIGTERM did not go to them. Only a root still
** running is said to be killed: the program may be a zombie not yet reaped, the process
** that profiles between its lock and its end.
*/
static void stop_kill(struct stopper *s, pid_t root)
{
	struct lp_proc r;
	size_t termed = s->nprocs, stopped = 0;
	s->escalated = 1;
	if (root > 0 && lp_proctree_get(root, &r) != 0)
		root = 0;
	if (root > 0)
		kill(root, SIGSTOP);
	for (;;) {
		for (; stopped < s->nprocs; stopped++)
			if (s->procs[stopped].pid != root)
				lp_proctree_signal(&s->procs[stopped], SIGSTOP);
		size_t n = stop_scan(s, root);
		if (n == s->nprocs)
			break;
		s->nprocs = n;
	}
	s->did.kill_missed = !s->did.missed && s->nprocs == STOP_MAX_PROCS;
	if (root > 0 && kill(root, SIGKILL) == 0)
		s->did.killed = root;
	for (size_t i = 0; i < s->nprocs; i++)
		if (s->procs[i].pid != root && lp_proctree_signal(&s->procs[i], SIGKILL) == 0)
			++*(i < termed ? &s->did.killed_procs : &s->did.killed_late);
}

/* Whether pid, a child of record not yet reaped, has ended (a zombie): its status is left
 * for waitpid. */
static int ended(pid_t pid)
{
	siginfo_t si;
	si.si_pid = 0;
	return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	       si.si_pid == pid;
}

/*
** Called while record waits for root (the program, not yet reaped, or the process that
** profiles, while it holds its lock): at the deadline, SIGTERM to root and every process
** descended from it (the shell and `sleep` of an os.execute, a wrapper's luajit), as
** Ctrl-C at a terminal reaches its whole process group or timeout(1) signals its own, but
** neither record's process group (record itself, the rest of a pipeline) nor processes
** the program did not start; SIGKILL to those left STOP_GRACE_NS later. SIGTERM rather
** than SIGINT: LuaJIT's SIGINT handler stops a program only in interpreted code (a loop
** compiled, or blocked in a call, would need a second), and the agent finishes the profile
** before the program dies of SIGTERM left at its default action.
*/
static void stop_tick(struct stopper *s, pid_t root, int program)
{
	/* Stopped first by the user (a SIGTERM or SIGHUP passed on, Ctrl-C or Ctrl-\ at the
	 * terminal, which reach the program too): that stop is theirs, not -d's, and is let
	 * take its course (a program's own cleanup after Ctrl-C is not cut by SIGTERM), its
	 * status record's. A SIGINT sent to record alone (kill PID, not its group) is taken
	 * for Ctrl-C too: record cannot tell it from the terminal's. */
	if (!s->sent && (forwarded || interrupted))
		s->deadline = 0;
	if (!s->deadline)
		return;
	uint64_t now = now_ns();
	if (!s->sent && now >= s->deadline) {
		s->nprocs = 0;
		s->nprocs = stop_scan(s, root);
		/* A program that ended on its own at the deadline (after record's last
		 * waitpid, or during the scan) is not stopped: its end is its own, told as
		 * without -d once reaped, rather than a SIGTERM to a zombie taken for -d's
		 * stop. (One that ends between this look and the kill still is: microseconds
		 * where the scan took milliseconds.) */
		if (program && ended(root)) {
			s->nprocs = 0;
			return;
		}
		s->did.missed = s->nprocs == STOP_MAX_PROCS;
		s->sent = now;
		s->did.stopped_ns = now - s->t0;
		s->root = root;
		s->did.other = program ? 0 : root;
		/* Waited for by stop_finish: it ends a little after its lock is let go. */
		if (!program && s->nprocs < STOP_MAX_PROCS &&
		    lp_proctree_get(root, &s->procs[s->nprocs]) == 0)
			s->nprocs++;
		/* Each only if still the process found (its start time), through a pidfd
		 * (lp_proctree_signal): an id freed and given to another process since /proc
		 * was read is not signalled. root needs none: the program is not yet reaped,
		 * the process that profiles holds its lock. */
		kill(root, SIGTERM);
		for (size_t i = 0; i < s->nprocs; i++)
			lp_proctree_signal(&s->procs[i], SIGTERM);
	} else if (s->sent && root != s->root) {
		/* The process that profiles, alone now, not found among the program's (it
		 * started as SIGTERM was sent): it gets it too. */
		int found = 0;
		for (size_t i = 0; i < s->nprocs && !found; i++)
			found = s->procs[i].pid == root;
		s->root = root;
		if (!found && s->nprocs < STOP_MAX_PROCS &&
		    lp_proctree_get(root, &s->procs[s->nprocs]) == 0)
			s->nprocs++;
		if (!found)
			kill(root, SIGTERM);
	} else if (s->sent && !s->escalated && now - s->sent >= STOP_GRACE_NS) {
		stop_kill(s, root);
	}
}

/* Once the program (and the process that profiles) ended: its descendants that SIGTERM
 * has not ended yet are waited for until STOP_GRACE_NS after it, then killed with those
 * they started since (stop_kill). Not after stop_tick's SIGKILL: those it killed are
 * ending. (A process started after SIGTERM by one that then ended is found as record's
 * child, record being a subreaper: stop_scan; it is not where that failed.) */
static void stop_finish(struct stopper *s)
{
	for (int left = 1; s->sent && !s->escalated && left;) {
		left = 0;
		for (size_t i = 0; i < s->nprocs && !left; i++)
			left = lp_proctree_alive(&s->procs[i]);
		if (left && now_ns() - s->sent >= STOP_GRACE_NS) {
			stop_kill(s, 0);
			return;
		}
		if (left)
			sleep_ms(20);
		reap_adopted(s);
	}
}

/*
** Runs the program; returns its wait status, or -1 if it could not be started. When the
** process that profiles is not the program itself (a wrapper ran it) and outlives it, waits
** for it too: its profile is written when it ends. *st: what the agents said
** (rec_status); *told: 0 when the status file could not be made (nothing can be told).
** Called with SIGTERM and SIGHUP blocked; omask, the mask before, is the program's, and
** record's again once the forwarder is in place.
*/
static int run(const struct opts *o, const char *agent, const char *raw, uint64_t *ns,
	       struct rec_status *st, int *told, const sigset_t *omask)
{
	char so_lit[PATH_MAX + 32], init[PATH_MAX + 512], spec[PATH_MAX + 192];
	struct rec_files rf;
	memset(st, 0, sizeof(*st));
	rec_files_make(&rf, raw);
	*told = rf.status[0] != '\0';
	if (lua_literal(agent, so_lit, sizeof(so_lit))) {
		rec_files_remove(&rf);
		return -1;
	}
	snprintf(init, sizeof(init),
		 "local i=os.getenv('LUAPROF_LUA_INIT') "
		 "assert(package.loadlib(%s,'luaopen_luaprof'))('luaprof') "
		 "if not i then return end "
		 "if i:sub(1,1)=='@' then return dofile(i:sub(2)) end "
		 "local f,e=(loadstring or load)(i,'=LUA_INIT') if not f then error(e,0) end "
		 "return f()",
		 so_lit);
	if (o->memory)
		snprintf(spec, sizeof(spec), "profiler=memory,sample=%llu,path=%s", o->sample, raw);
	else
		snprintf(spec, sizeof(spec), "mode=%c,interval_ns=%llu,clock=%s,path=%s", o->mode,
			 1000000000ull / o->rate, o->clock, raw);
	/* A record inside the program of another: LUA_INIT is the outer record's loader, and
	 * the user's own, if any, waits in LUAPROF_LUA_INIT (running the loader as the user's
	 * would load it again, forever). */
	const char *orig = getenv("LUA_INIT");
	if (orig && strstr(orig, "luaopen_luaprof") && strstr(orig, "LUAPROF_LUA_INIT"))
		orig = getenv("LUAPROF_LUA_INIT");

	struct sigaction fwd, oint, oquit, oterm, ohup;
	memset(&fwd, 0, sizeof(fwd));
	fwd.sa_handler = forward;
	fwd.sa_flags = SA_RESTART; /* a message to a full pipe is not cut by Ctrl-C */
	/* SIGTERM and SIGHUP wait, blocked since before the stream's file was made, until the
	 * forwarder is in place (a pending one is then passed on); the program gets the mask
	 * it would have had (omask). */
	/* An inherited SIGCHLD of SIG_IGN would reap the program itself: no status. */
	struct sigaction dfl, ochld;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(SIGCHLD, &dfl, &ochld);
	int profile_on_stdout = lp_output_fd(o->output) == STDOUT_FILENO; /* -, /dev/stdout */
	banner(o);
	uint64_t t0 = now_ns();
	static struct stopper stop; /* large: not on the stack */
	memset(&stop, 0, sizeof(stop));
	stop.t0 = t0;
	stop.deadline = o->duration_ns ? t0 + o->duration_ns : 0;
	/* With -d, record is a child subreaper while the program runs: a process it started
	 * whose parent ended (`cmd &` in an os.execute, a daemon's double fork) is given to
	 * record rather than init, so that -d's stop finds it (stop_scan). Without -d nothing
	 * changes. Processes still running when the program ends are left running, as
	 * without it (they go to init when record ends), unless -d's stop is under way, which
	 * waits for them and kills those left (stop_finish); those that end while record
	 * runs are reaped (reap_adopted). Not inherited by the program (fork clears it). Only
	 * when record has no child yet: one exec'd by a shell that had left some (`sleep 5 &
	 * exec luaprof record ...`) could not tell them, or orphans of theirs, from the
	 * program's (a start time after the program's does not: /proc's clock ticks are
	 * 10 ms); it does as before. One record already was (set before an exec) is kept. */
	int was_subreaper = 0;
	siginfo_t si;
	if (stop.deadline && prctl(PR_GET_CHILD_SUBREAPER, &was_subreaper) != 0)
		was_subreaper = 1; /* unknown: left as it is */
	if (stop.deadline && !was_subreaper &&
	    waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 && errno == ECHILD)
		stop.adopting = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
	pid_t pid = fork();
	if (pid < 0) {
		if (stop.adopting)
			prctl(PR_SET_CHILD_SUBREAPER, 0);
		sigprocmask(SIG_SETMASK, omask, NULL);
		sigaction(SIGCHLD, &ochld, NULL);
		rec_files_remove(&rf);
		return -1;
	}
	if (pid == 0) {
		sigprocmask(SIG_SETMASK, omask, NULL);
		sigaction(SIGCHLD, &ochld, NULL);
		if (rf.claim[0]) {
			setenv("LUAPROF_RECORD_CLAIM", rf.claim, 1);
			setenv("LUAPROF_RECORD_STATUS", rf.status, 1);
		} else {
			unsetenv("LUAPROF_RECORD_CLAIM");
			unsetenv("LUAPROF_RECORD_STATUS");
		}
		if (orig)
			setenv("LUAPROF_LUA_INIT", orig, 1);
		else
			unsetenv("LUAPROF_LUA_INIT");
		setenv("LUA_INIT", init, 1);
		setenv("LUAPROF_RECORD", spec, 1);
		/* The profile goes to standard output: the program's own output must not mix
		 * into it. */
		if (profile_on_stdout && dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
			_exit(127);
		execvp(o->cmd[0], o->cmd);
		fprintf(stderr, "luaprof record: cannot run %s: %s\n", o->cmd[0], strerror(errno));
		_exit(127);
	}
	/* The terminal's ^C goes to the program; we stay to render what it recorded, and
	 * note it (stop_tick: -d is the user's stop no more). One ignored when record started
	 * is ignored by the program too: no stop, and -d stays. */
	child_pid = pid;
	st->child = pid;
	interrupted = 0;
	sigaction(SIGINT, NULL, &oint);
	sigaction(SIGQUIT, NULL, &oquit);
	if (oint.sa_handler != SIG_IGN)
		sigaction(SIGINT, &fwd, NULL);
	if (oquit.sa_handler != SIG_IGN)
		sigaction(SIGQUIT, &fwd, NULL);
	sigaction(SIGTERM, &fwd, &oterm);
	sigaction(SIGHUP, &fwd, &ohup);
	sigprocmask(SIG_SETMASK, omask, NULL);
	int status = 0;
	/* Polled, so that SIGTERM and SIGHUP reach the process that profiles as soon as it is
	 * known, as well as the program (a wrapper does not always pass them on). */
	for (int reaped = 0;;) {
		/* Adopting, waitpid(-1): the program's status, or an adopted process reaped,
		 * then the next, up to 64 a tick (orphans that end faster must not hold
		 * the deadline back). */
		int ws;
		pid_t w = waitpid(stop.adopting ? -1 : pid, &ws, WNOHANG);
		if (w > 0 && w != pid && ++reaped < 64)
			continue;
		reaped = 0;
		if (w == pid)
			status = ws;
		if (w == pid || (w < 0 && errno != EINTR))
			break;
		if (!prof_pid && *told)
			prof_pid = lock_holder(&rf);
		stop_tick(&stop, pid, 1);
		sleep_ms(20);
	}
	child_pid = 0;
	/* The process that profiles, a wrapper's, may outlive it: its profile is written when
	 * it ends. Its lock says it runs, and its id as this process sees it (a pid namespace,
	 * a reused id: not the one it wrote). Ctrl-C stops the wait; SIGTERM and SIGHUP are
	 * passed on to it. */
	pid_t holder = *told ? lock_holder(&rf) : 0;
	int gave_up = 0; /* Ctrl-C while waiting for it */
	if (holder > 0 && holder != pid) {
		prof_pid = holder;
		stop_waiting = 0; /* a Ctrl-C before was the program's */
		sigaction(SIGINT, &fwd, NULL); /* stops the wait, even where it was ignored */
		/* Passed a SIGTERM or SIGHUP with the program (a wrapper script that died of
		 * it at once), the process that profiles is finishing its profile before it
		 * dies of it too (tens of ms): no word of it still running unless it does a
		 * second later. */
		for (int i = 0; (forwarded || stop.sent) && i < 50 && lock_holder(&rf) == holder;
		     i++)
			sleep_ms(20);
		if (!o->quiet && lock_holder(&rf) == holder)
			fprintf(stderr, "luaprof record: %s ended, but the process it profiles (pid "
					"%ld) still runs: waiting for it, whose profile is written "
					"when it ends (Ctrl-C stops waiting; SIGTERM to record is "
					"passed on to it)\n", o->cmd[0], (long)holder);
		/* After Ctrl-C, a second for it to end (the terminal's ^C reaches it too), and
		 * nothing more from -d: the user asked to stop waiting, neither to wait out
		 * -d's grace for the processes it stopped nor to have them killed. */
		uint64_t t_stop = 0;
		while ((holder = lock_holder(&rf)) > 0) {
			prof_pid = holder;
			if (stop_waiting && !t_stop)
				t_stop = now_ns();
			if (t_stop && now_ns() - t_stop > 1000000000ull) {
				st->abandoned = holder;
				break;
			}
			if (!t_stop)
				stop_tick(&stop, holder, 0);
			sleep_ms(20);
			reap_adopted(&stop);
		}
		gave_up = t_stop != 0;
	}
	if (!gave_up)
		stop_finish(&stop);
	/* Orphans from here on go to init again; those still running stay record's children
	 * until it ends, those ended are reaped. */
	if (stop.adopting)
		prctl(PR_SET_CHILD_SUBREAPER, 0);
	reap_adopted(&stop);
	st->did = stop.did;
	if (*told)
		rec_status_read(&rf, st);
	prof_pid = 0;
	sigaction(SIGCHLD, &ochld, NULL);
	*ns = now_ns() - t0;
	sigaction(SIGINT, &oint, NULL);
	sigaction(SIGQUIT, &oquit, NULL);
	sigaction(SIGTERM, &oterm, NULL);
	sigaction(SIGHUP, &ohup, NULL);
	rec_files_remove(&rf);
	return status;
}

/* Writes the rendering to o->output through a temporary file renamed into place. */
static int render(const struct opts *o, struct lp_profile *p, char *err, size_t errlen)
{
	char tmp[PATH_MAX];
	FILE *out = lp_output_open(o->output, tmp, sizeof(tmp));
	if (!out) {
		int e = errno;
		snprintf(err, errlen, "cannot write %s: %s", o->output, strerror(e));
		return -e;
	}
	/* -f top -n 0: every row, as report's (the summary, which it is, has no list then). */
	struct lp_render_opts ro = { .limit = o->fmt != LP_FMT_TOP || !o->top_given ? 0
					      : o->top ? (unsigned)o->top : LP_LIMIT_ALL,
				     .lines = o->lines, .html = lp_output_is_html(o->output) };
	int rc = lp_fmt_renderer(o->fmt)(p, &ro, out, err, errlen);
	return lp_output_close(out, o->output, tmp, rc, err, errlen);
}

/* "SIGRTMIN+4" or "SIGTERM" (the agent's process has this libc's SIGRTMIN). */
static const char *signal_name(int signo)
{
	static char buf[32];
	if (signo >= SIGRTMIN && signo <= SIGRTMAX)
		snprintf(buf, sizeof(buf), "SIGRTMIN+%d", signo - SIGRTMIN);
	else if (sigabbrev_np(signo))
		snprintf(buf, sizeof(buf), "SIG%s", sigabbrev_np(signo));
	else
		snprintf(buf, sizeof(buf), "signal %d", signo);
	return buf;
}

/* status: the program's, as waitpid gives it. */
static void summary(const struct opts *o, const struct lp_loaded *l, struct lp_profile *p,
		    uint64_t wall_ns, const char *raw, int status)
{
	const struct lp_record_facts *f = &l->facts;
	uint64_t n = l->stats.events;
	double secs = (double)(f->duration_ns ? f->duration_ns : wall_ns) / 1e9;
	fprintf(stderr, "luaprof record: %.2f s profiled, %" PRIu64 " sample%s (%.0f per second, "
			"%u asked), %" PRIu64 " dropped",
		secs, n, n == 1 ? "" : "s", secs > 0 ? (double)n / secs : 0.0, o->rate, l->dropped);
	if (f->truncated)
		fprintf(stderr, ", %" PRIu64 " with cut stacks", f->truncated);
	fputc('\n', stderr);
	/* None at all: a program too short for the interval, most often; or one that stopped
	 * the profile itself at once, or failed at once (a misspelt script name: its own
	 * message says why), which no --rate would help. */
	if (!n && f->stopped_by_program)
		fprintf(stderr, "luaprof record: no sample: the program stopped the profile itself "
				"(sysprof.stop) after %.3f s, before the first sample\n", secs);
	else if (!n && l->stats.complete && WIFEXITED(status) && WEXITSTATUS(status) != 0)
		fprintf(stderr, "luaprof record: no sample: %s exited with status %d before the "
				"first sample (%.3f s profiled)\n", o->cmd[0], WEXITSTATUS(status),
			secs);
	else if (!n && l->stats.complete && WIFSIGNALED(status))
		fprintf(stderr, "luaprof record: no sample: %s was killed by signal %d before the "
				"first sample (%.3f s profiled)\n", o->cmd[0], WTERMSIG(status), secs);
	else if (!n && lp_cli_other_threads(f))
		; /* the CPU time was other threads': said below */
	else if (!n && l->stats.complete && !f->signal_taken_ns) {
		/* A POSIX CPU-time timer expires at the kernel's tick: a run a little longer
		 * than the interval may end before it. */
		double ran = strcmp(o->clock, "cpu") ? secs
			     : f->thread_cpu_ns ? (double)f->thread_cpu_ns / 1e9 : secs;
		fprintf(stderr, "luaprof record: no sample: the program ran %.3f s %s, %s "
				"a sampling interval (%.3f s at --rate %u) - raise --rate%s, or profile "
				"a longer run\n",
			ran, strcmp(o->clock, "cpu") ? "in all" : "on the CPU",
			ran < 1.0 / o->rate ? "less than" : "about", 1.0 / o->rate, o->rate,
			strcmp(o->clock, "cpu") ? "" : " or use --clock wall if it mostly waits");
	}
	if (n) {
		const uint64_t *vm = lp_sysprof_vmstates(l->sys);
		const char *sep = "luaprof record: VM states: ";
		for (unsigned i = 0; i < LP_VMST__MAX; i++) {
			if (!vm[i])
				continue;
			char pct[16];
			lp_text_share(pct, sizeof(pct), vm[i], n);
			fprintf(stderr, "%s%s %s", sep, lp_vmstate_name(i), pct);
			sep = ", ";
		}
		fputc('\n', stderr);
	}
	/* The time the ticks account for, against what they should have: the thread's CPU
	 * time under the CPU clock (measured by the agent; else estimated from the ticks),
	 * the whole run under the wall clock. Fewer ticks than that: the program blocked,
	 * ignored or took the signal; few under the CPU clock: it was off the CPU. A POSIX
	 * timer's overruns are expiries the kernel merged at its tick, which the samples
	 * stand for; the perf clock's are intervals no sample stands for, beyond the 0.1 s
	 * one signal is written for at most: the program blocked the signal that long, or a
	 * system call lasted that long. Counted as sampled, a second blocked at 10 kHz was
	 * blamed on a slow kernel tick, with advice to allow the perf events in use. */
	uint64_t merged = f->perf_clock ? 0 : f->overruns;
	/* The agent's own ticks (agent_ticks) were the thread's CPU time too, ticked. */
	double ticked = (double)(n + l->dropped + f->paced + merged + f->agent_ticks) / o->rate;
	int wall = strcmp(o->clock, "cpu") != 0;
	/* A stream cut short (the program killed) lost its last samples: no note on them. */
	int whole = l->stats.complete;
	double due = wall ? secs : f->thread_cpu_ns ? (double)f->thread_cpu_ns / 1e9 : 0;
	if (f->signal_taken_ns)
		fprintf(stderr, "luaprof record: the program changed what the profiler's signal "
				"(%s) does (a handler of its own, ignored or reset) after %.2f s: "
				"sampling stopped there\n",
			signal_name((int)f->signal), (double)f->signal_taken_ns / 1e9);
	/* Ticks are whole, the first a whole interval after the timer: two ticks of slack. */
	else if (whole && due > 0.2 && (due - ticked) * o->rate > 2 && ticked < 0.8 * due)
		fprintf(stderr, "luaprof record: %.2f s %s sampled as %.2f s: the program "
				"blocked or ignored the profiler's signal%s%s for part of it%s\n",
			due, wall ? "of the run" : "on the CPU", ticked,
			f->signal ? " " : "", f->signal ? signal_name((int)f->signal) : "",
			f->perf_clock && f->overruns ? " (or spent more than 0.1 s in one system "
						       "call)" : "");
	if (lp_cli_other_threads(f))
		lp_cli_other_threads_note("luaprof record", f, n);
	else if (whole && !wall && secs > 0.2 && (f->thread_cpu_ns ? due : ticked) < 0.8 * secs) {
		/* Runnable but not running (a busy machine) is no time off the CPU that --clock
		 * wall would sample: said apart from sleeps and waits. */
		double delay = f->thread_cpu_ns ? (double)f->run_delay_ns / 1e9 : 0;
		if (due + delay >= 0.8 * secs)
			fprintf(stderr, "luaprof record: the program ran %.2f s of the %.2f s on the "
					"CPU: it waited %.2f s for one while other processes ran (a "
					"busy machine); the profile's shares stand, on fewer samples\n",
				due, secs, delay);
		else {
			char busy[96] = "";
			if (delay >= 0.1 * secs)
				snprintf(busy, sizeof(busy), ", but for %.2f s waiting for a CPU "
					 "that other processes held", delay);
			fprintf(stderr, "luaprof record: --clock cpu samples only while the program "
					"runs on the CPU: %s%.2f s of the %.2f s (the rest it slept or "
					"waited%s; --clock wall samples that too, but its ticks end "
					"sleeps early: see --help)\n",
				f->thread_cpu_ns ? "" : "about ", f->thread_cpu_ns ? due : ticked, secs,
				busy);
		}
	}
	if (f->trace_stacks_lost)
		lp_cli_stacks_lost_note("luaprof record", f->trace_stacks_lost, n);
	struct lp_nosym_share nosym;
	lp_cli_nosym_find(p, &nosym);
	lp_cli_nosym_note("luaprof record", &nosym);
	if (f->lua_elsewhere)
		lp_cli_elsewhere_note("luaprof record", f->lua_elsewhere, n);
	if (f->paced)
		fprintf(stderr, "luaprof record: %" PRIu64 " tick%s skipped: at --rate %u a sample "
				"takes longer than a quarter of the interval, and the profiler keeps "
				"its share of the time below that\n", f->paced,
			f->paced == 1 ? "" : "s", o->rate);
	if (!strcmp(o->clock, "cpu") && !f->perf_clock && f->overruns > n && n)
		fprintf(stderr, "luaprof record: the CPU-time timer merged %" PRIu64 " expiries: "
				"this kernel ticks slower than --rate %u; use --clock wall for more, or allow "
				"perf events (luaprof record --help)\n",
			f->overruns, o->rate);
	if (f->stopped_by_program && n)
		fprintf(stderr, "luaprof record: the program stopped the profile itself "
				"(sysprof.stop) after %.*f s: what it did after that is not in it\n",
			secs < 0.1 ? 3 : 2, secs);
	if (o->top > 0 && n && (o->fmt != LP_FMT_TOP || lp_output_discarded(o->output))) {
		char err[256];
		struct lp_render_opts ro = { .limit = (unsigned)o->top };
		fputc('\n', stderr);
		lp_render_top(p, &ro, stderr, err, sizeof(err));
		fputc('\n', stderr);
	}
	fprintf(stderr, "luaprof record: wrote %s (%s) and %s (raw stream)\n",
		strcmp(o->output, "-") ? o->output : "standard output", lp_fmt_name(o->fmt), raw);
}

/* The rendering failed (a full disk, its directory gone): the profile is not lost, and
 * the user is told where it is and how to render it again. */
static void raw_kept(const char *raw)
{
	fprintf(stderr, "luaprof record: the profile is kept in the raw stream %s: `luaprof "
		"report %s -o FILE` renders it\n", raw, raw);
}

/* --memory: the stream is rendered by `luaprof report`, then a one-line summary. */
/* killed: the signal the program died of, or 0. */
static int record_memory(const struct opts *o, const char *raw, off_t size, int prog, int killed,
			 uint64_t wall, enum unfinished unfinished, pid_t prof)
{
	char *args[20], limit[16];
	int n = 0;
	args[n++] = "report";
	args[n++] = "-q";
	if (o->value) {
		args[n++] = "--value";
		args[n++] = (char *)o->value;
	}
	if (o->leak_only)
		args[n++] = "--leak-only";
	if (o->human)
		args[n++] = "--human-readable";
	if (o->lines)
		args[n++] = "--lines";
	if (o->fmt == LP_FMT_TOP && o->top_given) { /* 0: every row */
		snprintf(limit, sizeof(limit), "%d", o->top);
		args[n++] = "-n";
		args[n++] = limit;
	}
	args[n++] = "-f";
	args[n++] = (char *)lp_fmt_name(o->fmt);
	args[n++] = "-o";
	args[n++] = (char *)o->output;
	args[n++] = (char *)raw;
	args[n] = NULL;
	fflush(stdout);
	struct lp_record_facts f;
	char *top = NULL;
	int unwritten;
	int rc = lp_cmd_report_facts(n, args, &f, o->quiet || o->top < 0 ? 0 : (unsigned)o->top,
				     &top, !o->quiet, &unwritten);
	fflush(stdout);
	if (rc != LP_EXIT_OK && rc != LP_EXIT_TRUNCATED) {
		/* Only when the stream was read and its rendering could not be written: a raw
		 * stream that could not be read is no profile kept. */
		if (unwritten)
			raw_kept(raw);
		free(top);
		return rc;
	}
	if (rc == LP_EXIT_TRUNCATED && unfinished)
		fprintf(stderr, "luaprof record: %s\n", unfinished_text(unfinished, prof, o->sample != 0));
	if (!o->quiet) {
		double secs = (double)(f.duration_ns ? f.duration_ns : wall) / 1e9;
		/* A profile shorter than a millisecond (a small script's) read "0.000 s
		 * profiled", as if nothing had run: microseconds then. */
		fprintf(stderr, "luaprof record: %.*f s profiled, ",
			secs < 0.001 ? 6 : secs < 0.1 ? 3 : 2, secs);
		if (f.sampled) {
			fprintf(stderr, "%" PRIu64 " sampled allocation%s (one per %" PRIu64 " byte%s "
					"allocated on average", f.samples, f.samples == 1 ? "" : "s",
				f.sample_bytes, f.sample_bytes == 1 ? "" : "s");
			if (f.samples_lost)
				fprintf(stderr, ", %" PRIu64 " lost (out of memory, or taken on "
						"another thread than the CPU profiler samples)",
					f.samples_lost);
			if (f.truncated)
				fprintf(stderr, ", %" PRIu64 " with stacks cut short (deeper than "
						"the profiler keeps, or through code it has no unwind "
						"table for): their outermost frames missing",
					f.truncated);
			fprintf(stderr, "; taking them cost %.1f ms, %.2f%% of the run)\n",
				(double)f.sample_ns / 1e6,
				secs > 0 ? (double)f.sample_ns / 1e7 / secs : 0.0);
			lp_cli_sampled_trace_note("record", f.alloc_bytes, f.trace_alloc_bytes);
			/* A signal as the profile started (it waits for the start to finish,
			 * then stops the profile): not too little allocated. */
			if (!f.samples && killed)
				fprintf(stderr, "luaprof record: no allocation was sampled: the program "
						"was killed by %s %.3f s into the profile\n",
					signal_name(killed), secs);
			else if (!f.samples)
				fprintf(stderr, "luaprof record: no allocation was sampled: the program "
						"allocated too little for --sample %" PRIu64 " (give a "
						"smaller size, or drop --sample for every event)\n",
					f.sample_bytes);
		} else {
			char sz[32];
			lp_size_format(sz, sizeof(sz), (int64_t)size, LP_SIZE_TRIM);
			fprintf(stderr, "%" PRIu64 " event%s (allocations, reallocations and frees; "
					"%.1f bytes of stream each, the symbol table aside), %s "
					"recorded\n", f.events, f.events == 1 ? "" : "s",
				f.events ? (double)f.section_bytes / (double)f.events : 0.0, sz);
			lp_cli_trace_note("record", f.alloc_bytes, f.trace_alloc_bytes);
			lp_cli_sites_note("record", lp_fmt_draws_stacks(o->fmt), f.alloc_bytes,
					  f.trace_alloc_bytes);
			/* Exact mode's stream grows with every event: say what keeps it small. */
			if (size >= (256ll << 20))
				fprintf(stderr, "luaprof record: exact mode records every event; for "
						"long runs, --sample 512K records the stacks of a sample "
						"of them at a fraction of the cost and size\n");
		}
		lp_cli_nosym_note("luaprof record", &f.nosym);
		if (f.stopped_by_program)
			fprintf(stderr, "luaprof record: the program stopped the profile itself "
					"(memprof.stop) after %.*f s: what it did after that is not in "
					"it\n", secs < 0.1 ? 3 : 2, secs);
		/* luajit.c runs a full collection after the script's error, before lua_close
		 * stops the profile: the failed chunk's locals are freed in it. Status 1 with
		 * the profile stopped by lua_close is that path (or os.exit(1, true), rarer). */
		if (prog == 1 && !killed && f.stopped_by_close)
			fprintf(stderr, "luaprof record: note: %s exited with status 1, which "
					"luajit does after an error in the script (Ctrl-C's "
					"\"interrupted!\" included) once it has collected all garbage: "
					"what only the failed code referenced was freed before the "
					"profile stopped, and shows as freed, not held (HEAP SUMMARY, "
					"inuse views); to keep it, stop the program with SIGTERM "
					"instead (kill PID, or timeout -s TERM ...): the profile then "
					"stops at the signal\n", o->cmd[0]);
		if (top)
			fprintf(stderr, "\n%s\n", top);
		fprintf(stderr, "luaprof record: wrote %s (%s) and %s (raw stream, %lld byte%s)\n",
			strcmp(o->output, "-") ? o->output : "standard output",
			lp_fmt_name(o->fmt), raw, (long long)size, size == 1 ? "" : "s");
	}
	free(top);
	return rc == LP_EXIT_TRUNCATED && prog == 0 ? rc : prog;
}

/* Whether a profile running in another process writes path (a second record into the same
 * file): the agent holds a flock on the files it writes. */
static int raw_busy(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return 0;
	int busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	close(fd);
	return busy;
}

/* What a scan of the raw stream found (scan_stream). */
enum content { NO_SECTION, NOTHING, SOMETHING };

struct scan {
	enum content c;
	/* What its meta says (read only when nothing was found): stopped_by = program or
	 * signal (a terminating signal the profiler caught and stopped the profile at); the
	 * clock and the CPU times (lp_cli_other_threads). */
	int stopped_by_program, stopped_by_signal;
	struct lp_record_facts f;
};

static int section_found(void *ctx, enum lp_stream_kind kind, unsigned version)
{
	(void)kind, (void)version;
	((struct scan *)ctx)->c = NOTHING;
	return 0;
}

static int sample_found(void *ctx, const struct lp_sys_sample *smp)
{
	(void)smp;
	((struct scan *)ctx)->c = SOMETHING;
	return 1; /* enough read */
}

static int meta_found(void *ctx, const char *key, const char *value)
{
	struct scan *sc = ctx;
	if (!strcmp(key, "stopped_by") && !strcmp(value, "program"))
		sc->stopped_by_program = 1;
	else if (!strcmp(key, "stopped_by") && !strcmp(value, "signal"))
		sc->stopped_by_signal = 1;
	else if (!strcmp(key, "clock"))
		sc->f.wall_clock = !strcmp(value, "wall");
	else if (!strcmp(key, "thread_cpu_ns"))
		sc->f.thread_cpu_ns = strtoull(value, NULL, 10);
	else if (!strcmp(key, "process_cpu_ns"))
		sc->f.process_cpu_ns = strtoull(value, NULL, 10);
	return 0;
}

/* An allocation event of Lua code (a line or a trace); the host's own C code allocates
 * before and after the program's Lua code runs (a script that cannot be opened: its
 * error message), which is no profile of the program. */
static int lua_event_found(void *ctx, const struct lp_mem_event *ev)
{
	if (ev->source != LP_ASOURCE_LFUNC && ev->source != LP_ASOURCE_TRACE)
		return 0;
	((struct scan *)ctx)->c = SOMETHING;
	return 1;
}

/* A stack with a Lua function's frame: sampled mode writes those of its sampled
 * allocations. */
static int lua_stack_found(void *ctx, uint64_t id, const struct lp_lua_frame *lua, size_t nlua,
			   const uint64_t *host, size_t nhost)
{
	(void)id, (void)host, (void)nhost;
	for (size_t i = 0; i < nlua; i++) {
		if (lua[i].type == LP_FRAME_LFUNC) {
			((struct scan *)ctx)->c = SOMETHING;
			return 1;
		}
	}
	return 0;
}

/*
** Whether the stream at path gets as far as its profile section (a stream cut in its
** symbol table, by a full disk say, holds no profile), and then whether it recorded
** anything of the program: a CPU sample, an allocation by Lua code (exact mode), a
** sampled allocation's stack with Lua frames. The scan stops at the first. SOMETHING
** when that cannot be told (the report that follows says what is wrong with the stream).
*/
static enum content scan_stream(const char *path, int *ended_early, int *stopped_by_program,
				int *stopped_by_signal, struct lp_record_facts *f)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct scan sc = { .c = NO_SECTION };
	struct lp_input in;
	if (fd < 0)
		return SOMETHING;
	if (lp_input_open_fd(&in, fd, path) != LP_OK) {
		close(fd);
		return SOMETHING;
	}
	struct lp_parse_handlers h = { .ctx = &sc, .stream = section_found,
				       .sys_sample = sample_found, .mem_event = lua_event_found,
				       .ext_stack = lua_stack_found, .ext_meta = meta_found };
	struct lp_parse_stats st;
	int rc = lp_parse_stream(&in, &h, &st);
	lp_input_close(&in);
	close(fd);
	*ended_early = rc == LP_ERR_TRUNCATED;
	*stopped_by_program = sc.stopped_by_program;
	*stopped_by_signal = sc.stopped_by_signal;
	*f = sc.f;
	if (sc.c == NO_SECTION && rc != LP_ERR_TRUNCATED && rc != LP_OK)
		return SOMETHING;
	return sc.c;
}

/* That -d's step (SIGTERM, or SIGKILL, a later one, said with its time) went to the first
 * STOP_MAX_PROCS processes who had started, so others may have been missed. */
static void tell_missed(const struct opts *o, const char *who, const char *step, int later)
{
	char when[48] = "";
	if (later)
		snprintf(when, sizeof(when), " by %s's time", step);
	fprintf(stderr, "luaprof record: --duration %s: %s had started %d processes or more%s: "
			"%s went to the first %d found, and some of the others may still run\n",
		o->duration, who, STOP_MAX_PROCS, when, later ? "it" : step, STOP_MAX_PROCS);
}

/* Says how the program ended when that was not a success: its status is ours too. Or,
 * stopped by -d (rs), when and how (unless -q: record's status is 0 then), or that it had
 * to be killed. What -d did is told as it was: SIGTERM to a process record stopped
 * waiting for (Ctrl-C) did not end its profile; SIGKILL to the processes the program
 * started is said too. */
static void tell_status(const struct opts *o, int status, const struct rec_status *rs)
{
	const struct stop_done *d = &rs->did;
	char other[64], killed[64], also[96] = "";
	snprintf(other, sizeof(other), "the process it profiles (pid %ld)",
		 (long)d->other);
	/* The one killed: the program, or the process that profiles, which outlived the
	 * program (a wrapper that died of SIGTERM at once). */
	snprintf(killed, sizeof(killed), "the process it profiles (pid %ld)", (long)d->killed);
	if (d->killed == rs->child)
		snprintf(killed, sizeof(killed), "%s", o->cmd[0]);
	/* Those started after SIGTERM are said apart: it did not go to them. */
	int nkilled = d->killed_procs + d->killed_late;
	if (d->killed && nkilled && d->killed_late && d->killed_procs)
		snprintf(also, sizeof(also), " (with %d processes it started, %d of them after "
					     "SIGTERM)", nkilled, d->killed_late);
	else if (d->killed && nkilled)
		snprintf(also, sizeof(also), " (with %d process%s it started%s)", nkilled,
			 nkilled > 1 ? "es" : "", d->killed_late ? " after SIGTERM" : "");
	/* A wrapper killed is not the profile cut short (if the profile is, because what
	 * it ran was killed with it, the stream says so). */
	const char *cut = d->killed != rs->child || rs->prof == rs->child
				  ? ", its profile cut short" : "";
	/* The program itself stopped; one that ended before is told of as without -d. */
	int stopped = d->stopped_ns && !d->other;
	if (d->killed && !stopped)
		fprintf(stderr, "luaprof record: --duration %s: %s did not end within %.0f s of "
				"SIGTERM (it ignores or handles it): killed with SIGKILL%s%s\n",
			o->duration, killed, (double)STOP_GRACE_NS / 1e9, also, cut);
	else if (d->other && rs->abandoned && !o->quiet)
		fprintf(stderr, "luaprof record: --duration %s: sent %s SIGTERM after %.2f s; "
				"record stopped waiting for it before it ended\n", o->duration,
			other, (double)d->stopped_ns / 1e9);
	else if (d->other && !o->quiet)
		fprintf(stderr, "luaprof record: --duration %s: stopped %s after %.2f s "
				"(SIGTERM); the profile ends there\n", o->duration, other,
			(double)d->stopped_ns / 1e9);
	if (stopped && ((d->killed && d->killed == rs->child) || o->quiet))
		;
	else if (stopped && WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
		fprintf(stderr, "luaprof record: --duration %s: stopped %s after %.2f s "
				"(SIGTERM)%s\n", o->duration, o->cmd[0],
			(double)d->stopped_ns / 1e9,
			rs->abandoned ? "; the process it profiles still ran when record stopped "
					"waiting for it"
			: d->killed   ? ""
				      : "; the profile ends there");
	else if (stopped && WIFSIGNALED(status))
		fprintf(stderr, "luaprof record: --duration %s: stopped %s after %.2f s "
				"(SIGTERM); it was killed by signal %d (%s)\n", o->duration,
			o->cmd[0], (double)d->stopped_ns / 1e9, WTERMSIG(status),
			strsignal(WTERMSIG(status)));
	else if (stopped)
		fprintf(stderr, "luaprof record: --duration %s: stopped %s after %.2f s "
				"(SIGTERM); it exited with status %d\n", o->duration, o->cmd[0],
			(double)d->stopped_ns / 1e9, WIFEXITED(status) ? WEXITSTATUS(status) : 0);
	else if (WIFSIGNALED(status))
		fprintf(stderr, "luaprof record: %s was killed by signal %d (%s)\n", o->cmd[0],
			WTERMSIG(status), strsignal(WTERMSIG(status)));
	else if (WIFEXITED(status) && WEXITSTATUS(status) != 0)
		fprintf(stderr, "luaprof record: %s exited with status %d\n", o->cmd[0],
			WEXITSTATUS(status));
	if (d->killed && stopped)
		fprintf(stderr, "luaprof record: --duration %s: %s did not end within %.0f s of "
				"SIGTERM (it ignores or handles it): killed with SIGKILL%s%s\n",
			o->duration, killed, (double)STOP_GRACE_NS / 1e9, also, cut);
	if (d->missed && !o->quiet)
		tell_missed(o, d->other ? other : o->cmd[0], "SIGTERM", 0);
	if (d->kill_missed && !o->quiet)
		tell_missed(o, d->other ? other : o->cmd[0], "SIGKILL", 1);
	char late[96] = "";
	if (d->killed_procs && d->killed_late)
		snprintf(late, sizeof(late), ", and %d more started after it still ran",
			 d->killed_late);
	if (!d->killed && d->killed_procs && !o->quiet)
		fprintf(stderr, "luaprof record: --duration %s: %d process%s that %s started did "
				"not end within %.0f s of SIGTERM (ignoring or handling it)%s: "
				"killed with SIGKILL\n", o->duration, d->killed_procs,
			d->killed_procs > 1 ? "es" : "", d->other ? other : o->cmd[0],
			(double)STOP_GRACE_NS / 1e9, late);
	else if (!d->killed && d->killed_late && !o->quiet)
		fprintf(stderr, "luaprof record: --duration %s: %d process%s that %s started after "
				"SIGTERM still ran %.0f s later: killed with SIGKILL\n", o->duration,
			d->killed_late, d->killed_late > 1 ? "es" : "",
			d->other ? other : o->cmd[0], (double)STOP_GRACE_NS / 1e9);
}

int lp_cmd_record(int argc, char **argv)
{
	struct opts o;
	int rc = parse_args(argc, argv, &o);
	if (rc)
		return rc;
	/* rawabs is what the program is given; raw, as the user gave it, names the file
	 * everywhere else (record's working directory does not change). */
	char rawabs[PATH_MAX], raw[PATH_MAX], agent[PATH_MAX];
	if (raw_path(&o, rawabs, sizeof(rawabs), raw, sizeof(raw)))
		return fail("output path too long");
	if (agent_path(agent, sizeof(agent)))
		return fail("cannot find the agent %s (build it with make, or set LUAPROF_AGENT)",
			    agent);
	if (!is_elf(agent))
		return fail("the agent %s is not a shared library (%s)", agent,
			    getenv("LUAPROF_AGENT") && *getenv("LUAPROF_AGENT")
				    ? "LUAPROF_AGENT names it; unset it to use the one beside luaprof"
				    : "build it with make");
	int perr = program_check(o.cmd[0]);
	if (perr)
		return fail("cannot run %s: %s", o.cmd[0],
			    perr == ENOENT && !strchr(o.cmd[0], '/') ? "no such program in PATH"
								   : strerror(perr));
	char badargs[320];
	if (luajit_args_problem(o.cmd, badargs, sizeof(badargs)))
		return fail("%s", badargs);
	/* Both destinations are checked before the program runs: a long job must not be lost
	 * to a typo in a path. A new stream goes straight to its file (a record killed
	 * meanwhile leaves it where it is looked for); one that replaces an earlier profile
	 * goes beside it first, with its permissions, where the directory allows, and is
	 * renamed over it once the program has left one: a run that records nothing leaves
	 * the previous profile (and the report made from it) as they were. */
	if (lp_output_check(o.output) != 0)
		return fail("cannot write %s: %s", strcmp(o.output, "-") ? o.output : "standard output",
			    strerror(errno));
	if (lp_fmt_tty_refusal(o.fmt) && lp_output_tty(o.output))
		return fail("%s", lp_fmt_tty_refusal(o.fmt));
	/* The script being profiled (or any file the program is given) named as -o by
	 * mistake (`-f top -o app.lua -- luajit app.lua`) would be replaced by the rendering
	 * once the program ends, as the raw stream is kept from doing (raw_unsafe). */
	for (char **a = o.cmd; *a; a++) {
		struct stat as;
		if (stat(*a, &as) == 0 && S_ISREG(as.st_mode) && lp_output_same(o.output, *a))
			return fail("-o %s is %s, which the program is given: the rendering would "
				    "replace it (give -o another name)", o.output, *a);
	}
	char dest[PATH_MAX], tmp[PATH_MAX + 16];
	if (lp_output_target(rawabs, dest))
		return fail("cannot write the raw stream %s: %s", raw, strerror(errno));
	if (lp_output_same(o.output, dest)) /* dest: a link to nothing yet is seen too */
		return fail("the rendered profile and the raw stream would both be %s: give -o "
			    "another name (or --raw)", strcmp(dest, rawabs) ? dest : raw);
	/* An earlier profile at -o (another run's raw stream) would be replaced by this one's
	 * rendering, as the raw stream never replaces anything but a profile (raw_unsafe). */
	if (strcmp(o.output, "-") && lp_output_holds_profile(o.output) == 1)
		return fail("-o %s holds a profile (a raw stream): the rendering would replace "
			    "it; give -o another name (luaprof report %s renders it)", o.output,
			    o.output);
	const char *why = raw_unsafe(raw);
	if (why)
		return fail("%s %s", raw, why);
	enum lp_fmt rawext;
	if (o.raw && lp_fmt_of_path(o.raw, &rawext) == 0 && rawext != LP_FMT_NONE)
		fprintf(stderr, "luaprof record: note: --raw %s gets the raw stream (binary: what "
			"`luaprof report` reads), though its extension (%s) is that of -f %s\n",
			o.raw, lp_path_ext(o.raw), lp_fmt_name(rawext));
	if (raw_busy(dest))
		return fail("%s is being written by a profile running in another process (another "
			    "luaprof record?): give -o or --raw another name", raw);
	/* SIGTERM and SIGHUP from here until the program runs are passed on to it once it
	 * does (run): record then tells of its death and removes the stream's file, which
	 * the program never wrote. Before, one killed record itself, the file left empty
	 * where the profile is looked for (`report` refused it), its claim file beside it. */
	sigset_t term, omask;
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigaddset(&term, SIGHUP);
	sigprocmask(SIG_BLOCK, &term, &omask);
	struct stat old;
	int replace = stat(dest, &old) == 0 && old.st_size > 0, probe = -1;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.XXXXXX", dest) >= sizeof(tmp))
		return fail("output path too long");
	/* Another user's profile in a sticky directory (/tmp) cannot be renamed over: the new
	 * stream is written in place, as where no file can be made beside it. */
	if (replace && !lp_output_rename_refused(dest) && (probe = mkostemp(tmp, O_CLOEXEC)) >= 0)
		fchmod(probe, old.st_mode & 07777);
	else
		snprintf(tmp, sizeof(tmp), "%s", dest);
	int created = 0;
	if (probe < 0) {
		created = access(dest, F_OK) != 0;
		/* Not truncated here: an earlier profile that could not be set aside is
		 * emptied by the agent when it starts, not by a run that never does. */
		/* An existing file without O_CREAT, which a sticky directory refuses for
		 * another user's where fs.protected_regular is set. */
		probe = open(dest, created ? O_WRONLY | O_CREAT | O_CLOEXEC : O_WRONLY | O_CLOEXEC,
			     0644);
	}
	if (probe < 0)
		return fail("cannot write the raw stream %s: %s", raw, strerror(errno));
	close(probe);
	int renamed = strcmp(tmp, dest) != 0;

	uint64_t wall = 0;
	struct rec_status rs;
	int told;
	int status = run(&o, agent, tmp, &wall, &rs, &told, &omask); /* omask restored */
	/* -1 not known, 0 never loaded, 1 loaded, 2 profiling */
	int loaded = !told ? -1 : rs.prof ? 2 : rs.loaded, skipped = rs.skipped;
	enum unfinished unfinished = rs.abandoned ? UNFINISHED_RUNNING
				     : !rs.prof || rs.error ? FINISHED
				     : rs.prof != rs.child ? UNFINISHED_OTHER
				     : WIFEXITED(status) ? UNFINISHED_PROGRAM : FINISHED;
	pid_t upid = rs.abandoned ? rs.abandoned : rs.prof;
	if (status < 0) {
		if (renamed || created)
			unlink(tmp);
		return fail("cannot start %s: %s", o.cmd[0], strerror(errno));
	}
	/* Stopped by -d as asked: a success, whatever the program's status then. (One that
	 * ended before, leaving the process that profiles to be stopped, keeps its own.) */
	int prog = rs.did.stopped_ns && !rs.did.other ? 0
		 : WIFEXITED(status) ? WEXITSTATUS(status)
		 : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
	/* The agent was loaded and never started (refused: its message says why) and the raw
	 * stream is written in place: what it holds is not this run's (another record's
	 * stream being written there, in a race of two at start-up): left as it is, not
	 * rendered. (A file of this run's own, new or beside the earlier one, is judged by its
	 * content below: a full disk may have kept the status from saying 'P'.) */
	if (loaded == 1 && !renamed && !created) {
		tell_status(&o, status, &rs);
		if (skipped)
			fprintf(stderr, "luaprof record: %d more LuaJIT process%s under %s ran "
					"without the profiler\n", skipped, skipped > 1 ? "es" : "",
				o.cmd[0]);
		return fail("%s wrote no profile: the profiler did not start (its message above "
			    "says why)", o.cmd[0]);
	}
	struct stat sb;
	int sr = stat(tmp, &sb);
	int gone = sr != 0 && errno == ENOENT; /* created above: removed since */
	int empty = sr != 0 || sb.st_size == 0;
	/* Written in place over an earlier profile: untouched means nothing recorded. */
	if (!empty && replace && !renamed && sb.st_size == old.st_size &&
	    sb.st_mtim.tv_sec == old.st_mtim.tv_sec && sb.st_mtim.tv_nsec == old.st_mtim.tv_nsec)
		empty = 1;
	/* A stream that ends before its profile section (its symbol table cut short: a full
	 * disk) recorded nothing either: it does not replace an earlier profile; nor does
	 * one of a program that ran no Lua code while profiled (a misspelt script name), or
	 * too briefly for a sample. */
	int ended_early = 0, stopped = 0, sig_stopped = 0;
	struct lp_record_facts scanned = { 0 };
	/* A process record stopped waiting for still writes its stream: rendered as it is. */
	enum content got = !empty && (renamed || created) && !rs.abandoned
				   ? scan_stream(tmp, &ended_early, &stopped, &sig_stopped, &scanned)
				   : SOMETHING;
	if (empty && rs.abandoned) { /* left where the process writes it */
		tell_status(&o, status, &rs);
		return fail("%s wrote no profile yet: the process it profiles (pid %ld) still runs "
			    "(record stopped waiting for it): its profile goes on in %s", o.cmd[0],
			    (long)upid, tmp);
	}
	/* Exact mode: a program whose Lua code allocates nothing itself (a C module's luaopen
	 * does it all, `print "x"`) still made a profile when it succeeded or a terminating
	 * signal stopped it; one that failed with nothing from Lua code is the misspelt
	 * script. */
	if (got == NOTHING && o.memory && !o.sample &&
	    ((WIFEXITED(status) && WEXITSTATUS(status) == 0) || sig_stopped))
		got = SOMETHING;
	int cut = got == NO_SECTION, kept = renamed && got == NOTHING;
	/* A program that failed before it recorded anything (a misspelt script: luajit says
	 * why and exits 1) leaves no new file either: a flame graph of no sample and its
	 * stream would only say what its status says, and stand where a profile is looked
	 * for. (A program that succeeded too briefly for a sample keeps its empty profile,
	 * with the summary's advice on the rate.) -d's stop is no failure, nor a terminating
	 * signal the profiler caught and stopped the profile at (Ctrl-C, a SIGTERM to record
	 * or to the program): that profile is whole, and what the user asked for. */
	int failed = !rs.did.stopped_ns && !sig_stopped &&
		     (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status)));
	int dropped = created && got == NOTHING && failed;
	if (cut || kept || dropped)
		empty = 1;
	/* Nothing recorded, as the earlier profile kept or no file written says. */
	char nothing_tail[PATH_MAX + 32];
	if (kept)
		snprintf(nothing_tail, sizeof(nothing_tail), "the earlier profile %s is kept", raw);
	else
		snprintf(nothing_tail, sizeof(nothing_tail), "no file is written");
	/* It failed before anything was recorded: its status is record's too, as when it
	 * fails after. The line that says why nothing was recorded names the status when
	 * nothing else explains it (not a stream cut short, a stop of its own, another
	 * thread's time): then that line alone. */
	int other_thr = (kept || dropped) && !o.memory && lp_cli_other_threads(&scanned);
	int says_status = (kept || dropped) && failed && !ended_early && !stopped && !other_thr;
	/* The earlier profile this one replaces changed while the program ran (a record run
	 * by the program, writing the same default name): that one is kept, this one left
	 * beside it. */
	struct stat now;
	if (!empty && renamed && stat(dest, &now) == 0 &&
	    (now.st_ino != old.st_ino || now.st_dev != old.st_dev || now.st_size != old.st_size ||
	     now.st_mtim.tv_sec != old.st_mtim.tv_sec ||
	     now.st_mtim.tv_nsec != old.st_mtim.tv_nsec)) {
		tell_status(&o, status, &rs);
		return fail("%s changed while %s ran (another luaprof record writing it?): it is "
			    "left as it is, and this profile is in %s%s",
			    raw, o.cmd[0], strcmp(dest, rawabs) ? "" : raw,
			    strcmp(dest, rawabs) ? tmp : tmp + strlen(dest));
	}
	if (empty && (renamed || created))
		unlink(tmp);
	else if (!empty && renamed && rename(tmp, dest) != 0) {
		int e = errno;
		unlink(tmp);
		return fail("cannot write the raw stream %s: %s", raw, strerror(e));
	}
	/* exec failed: the child said why. (Not a program that ran and chose 127.) */
	if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && empty && !kept && !dropped)
		return LP_EXIT_USAGE;
	if (!says_status)
		tell_status(&o, status, &rs); /* -q or not: it explains the exit status */
	if (skipped) /* -q or not: a profile of another process than the one expected */
		fprintf(stderr, "luaprof record: %d more LuaJIT process%s under %s ran without the "
			"profiler: record profiles the first one that starts (run the one to "
			"profile under record itself)\n", skipped, skipped > 1 ? "es" : "",
			o.cmd[0]);
	if (empty) {
		int none = kept || dropped; /* the program ran, and recorded nothing */
		int nrc = none && failed ? prog : LP_EXIT_USAGE;
		const char *first = !o.memory ? "CPU sample" : o.sample ? "sampled allocation"
							  : "allocation by Lua code";
		if (none && ended_early && unfinished) {
			fail("%s recorded nothing before its stream ended: %s; %s", o.cmd[0],
			     unfinished_text(unfinished, upid, o.sample != 0), nothing_tail);
			return nrc;
		}
		/* Killed: no message from the profiler, which had no time for one. */
		if (none && ended_early && WIFSIGNALED(status)) {
			fail("%s recorded nothing before its stream ended: it was killed before the "
			     "profiler wrote %s (%s): %s", o.cmd[0],
			     o.sample ? "its stacks" : "what it recorded",
			     o.sample ? "sampled mode writes them when the program ends"
				      : "up to a quarter second of it is lost",
			     nothing_tail);
			return nrc;
		}
		if (none && ended_early) {
			fail("%s recorded nothing before its stream ended (the profiler's message "
			     "above says why): %s", o.cmd[0], nothing_tail);
			return nrc;
		}
		if (none && stopped) {
			fail("%s recorded nothing: it stopped the profile itself (%s.stop) before the "
			     "first %s: %s", o.cmd[0], o.memory ? "memprof" : "sysprof",
			     !o.memory ? "sample" : first, nothing_tail);
			return nrc;
		}
		/* The CPU time was another thread's: the note says whose and what to do. */
		if (other_thr) {
			lp_cli_other_threads_note("luaprof record", &scanned, 0);
			fail("%s recorded nothing (no CPU sample: the thread sampled hardly ran, see "
			     "above): %s", o.cmd[0], nothing_tail);
			return nrc;
		}
		/* A program that failed at once (a misspelt script, an error as it starts): its
		 * status is the reason, not the interval (which --rate or --clock would not
		 * help), and record's status. */
		if (none && WIFEXITED(status) && WEXITSTATUS(status)) {
			fail("%s recorded nothing (no %s: it exited with status %d before the first "
			     "one): %s", o.cmd[0], first, WEXITSTATUS(status), nothing_tail);
			return nrc;
		}
		if (none && WIFSIGNALED(status)) {
			fail("%s recorded nothing (no %s: it was killed by signal %d (%s) before the "
			     "first one): %s", o.cmd[0], first, WTERMSIG(status),
			     strsignal(WTERMSIG(status)), nothing_tail);
			return nrc;
		}
		if (kept)
			return fail("%s recorded nothing (%s): the earlier profile %s is kept",
				    o.cmd[0],
				    !o.memory ? (strcmp(o.clock, "cpu")
						 ? "no CPU sample: it ran for less than a sampling "
						   "interval, or ran no Lua code"
						 : "no CPU sample: it ran for less than a sampling "
						   "interval on the CPU (--clock wall counts time "
						   "waiting too), or ran no Lua code")
				    : o.sample ? "no sampled allocation: it allocated too little "
						 "for the sampling interval, or ran no Lua code"
					       : "no allocation by Lua code, and it failed",
				    raw);
		if (cut)
			return fail("%s wrote no profile: its stream ended before the profile began "
				    "(the profiler's message above says why)%s", o.cmd[0],
				    renamed ? "; the earlier profile is kept" : "");
		if (gone)
			return fail("%s wrote no profile that is left: the raw stream %s was "
				    "removed while it ran", o.cmd[0], renamed ? tmp : raw);
		if (WIFSIGNALED(status) && loaded == 0)
			return fail("%s wrote no profile: it was killed before it loaded the agent "
				    "(which record gives LuaJIT's standalone interpreter through "
				    "LUA_INIT)%s", o.cmd[0],
				    renamed ? "; the earlier profile is kept" : "");
		if (WIFSIGNALED(status))
			return fail("%s wrote no profile: it was killed before the profiler wrote "
				    "anything%s%s", o.cmd[0],
				    o.sample ? " (sampled mode writes its stacks when the program "
					       "ends)" : "",
				    renamed ? "; the earlier profile is kept" : "");
		if (loaded == 0)
			return fail("%s wrote no profile: it never loaded the agent, which record "
				    "gives LuaJIT's standalone interpreter through LUA_INIT (`luajit "
				    "-E` ignores LUA_INIT; other hosts, such as tarantool, nginx or "
				    "an embedding program, do not run it: there, require \"luaprof\" "
				    "and use its API)", o.cmd[0]);
		if (unfinished)
			return fail("%s wrote no profile: %s", o.cmd[0],
				    unfinished_text(unfinished, upid, o.sample != 0));
		if (loaded >= 1)
			return fail("%s wrote no profile: the profiler did not start, or could not "
				    "write (its message above says why)", o.cmd[0]);
		return fail("%s wrote no profile: the profiler did not start (its message above "
			    "says why), or the agent was not loaded (the program must be LuaJIT's "
			    "standalone interpreter honouring LUA_INIT - not `luajit -E` - and a "
			    "supported LuaJIT build)", o.cmd[0]);
	}
	if (o.memory)
		return record_memory(&o, raw, sb.st_size, prog,
				     WIFSIGNALED(status) ? WTERMSIG(status) : 0, wall, unfinished, upid);

	int fd = open(raw, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("cannot read %s: %s", raw, strerror(errno));
	struct lp_input in;
	struct lp_loaded l;
	char msg[1024], err[1024] = "";
	if (lp_input_open_fd(&in, fd, raw) != LP_OK) {
		lp_input_message(&in, msg, sizeof(msg));
		close(fd);
		return fail("%s", msg);
	}
	struct lp_sysprof_opts so = { 0 };
	/* Reading a large stream back takes seconds: its progress on a terminal, as for the
	 * memory profile's rendering (report's). */
	int st = lp_cli_load(&in, &so, fd, "luaprof record", raw, !o.quiet, &l);
	lp_input_message(&in, msg, sizeof(msg));
	close(fd);
	int exit_code = prog;
	if (st == LP_ERR_FORMAT || st == LP_ERR_VERSION) {
		fprintf(stderr, "luaprof record: %s\n", msg);
		exit_code = LP_EXIT_MALFORMED;
		goto out;
	}
	if (st != LP_OK && st != LP_ERR_TRUNCATED) {
		fprintf(stderr, "luaprof record: %s\n", msg);
		exit_code = LP_EXIT_USAGE;
		goto out;
	}
	if (l.kind != LP_STREAM_SYSPROF) {
		fprintf(stderr, "luaprof record: %s: no CPU samples: %s\n", raw, msg);
		exit_code = LP_EXIT_TRUNCATED;
		goto out;
	}
	struct lp_profile *p = lp_loaded_profile(&l, raw);
	if (!p) {
		fprintf(stderr, "luaprof record: out of memory\n");
		exit_code = LP_EXIT_USAGE;
		goto out;
	}
	if ((rc = render(&o, p, err, sizeof(err))) != 0) {
		fprintf(stderr, "luaprof record: %s\n", err);
		raw_kept(raw);
		exit_code = LP_EXIT_USAGE;
	} else {
		if (!o.quiet)
			summary(&o, &l, p, wall, raw, status);
		if (st == LP_ERR_TRUNCATED) {
			if (unfinished)
				fprintf(stderr, "luaprof record: warning: %s; %s\n", msg,
					unfinished_text(unfinished, upid, 0));
			else
				fprintf(stderr, "luaprof record: warning: %s (the profiler did not "
						"finish the stream: the program was killed, or the "
						"file could not be written)\n", msg);
			if (prog == 0)
				exit_code = LP_EXIT_TRUNCATED;
		}
	}
	lp_profile_free(p);
out:
	lp_loaded_free(&l);
	lp_input_close(&in);
	return exit_code;
}
