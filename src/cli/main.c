/*
** luaprof command-line entry point: dispatches to subcommands.
*/
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"

#define LUAPROF_VERSION "0.1.0"

static void usage(FILE *out)
{
	fputs("luaprof " LUAPROF_VERSION " - CPU and memory profiles of Lua and LuaJIT programs\n"
	      "\n"
	      "Usage: luaprof <command> [options]\n"
	      "\n"
	      "Commands:\n"
	      "  report FILE    render a sysprof (CPU) or memprof (memory) stream as a flame\n"
	      "                 graph, collapsed stacks, pprof, speedscope, a top-N table,\n"
	      "                 the Lua source annotated line by line, or the memprof text\n"
	      "                 report\n"
	      "  record -- CMD  run a LuaJIT program under the CPU profiler (--memory: the\n"
	      "                 memory profiler) and render the profile\n"
	      "  help [CMD]     show this help, or the help of a command\n"
	      "  version        print the version\n"
	      "\n"
	      "Streams are Tarantool-compatible: files written by Tarantool's misc.sysprof and\n"
	      "misc.memprof can be reported directly.\n"
	      "\n"
	      "Examples:\n"
	      "  luaprof record -o cpu.svg -- luajit app.lua   profile a script, C and Lua stacks\n"
	      "  luaprof record --memory -- luajit app.lua     allocations by line, leaks\n"
	      "  luaprof report cpu.bin -o cpu.svg       interactive flame graph\n"
	      "  luaprof report mem.bin --leak-only      who still holds memory\n"
	      "  luaprof report cpu.bin -f annotate      the source, each line's share\n"
	      "  luaprof report cpu.bin -f pprof -o cpu.pb.gz && go tool pprof -top cpu.pb.gz\n",
	      out);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return LP_EXIT_USAGE;
	}
	const char *cmd = argv[1];
	if (!strcmp(cmd, "report"))
		return lp_cmd_report(argc - 1, argv + 1);
	if (!strcmp(cmd, "record"))
		return lp_cmd_record(argc - 1, argv + 1);
	if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
		/* One command at most: `help report extra` must not look like it was heard. */
		if (argc > 3) {
			fprintf(stderr, "luaprof help: one command at a time, not '%s' after '%s' "
					"(luaprof help [COMMAND])\n", argv[3], argv[2]);
			return LP_EXIT_USAGE;
		}
		if (argc > 2 && !strcmp(argv[2], "report"))
			lp_cmd_report_usage(stdout);
		else if (argc > 2 && !strcmp(argv[2], "record"))
			lp_cmd_record_usage(stdout);
		else if (argc > 2 && !strcmp(argv[2], "version"))
			puts("Usage: luaprof version\n\nPrints luaprof's version (also --version, "
			     "-V).");
		else if (argc > 2 && strcmp(argv[2], "help")) {
			fprintf(stderr, "luaprof: no help on '%s': the commands are record, report, "
					"help and version\n", argv[2]);
			return LP_EXIT_USAGE;
		} else
			usage(stdout);
		return lp_cli_stdout_status(NULL);
	}
	if (!strcmp(cmd, "version") || !strcmp(cmd, "--version") || !strcmp(cmd, "-V")) {
		if (argc > 2) {
			fprintf(stderr, "luaprof %s: takes no argument, not '%s'\n", cmd, argv[2]);
			return LP_EXIT_USAGE;
		}
		puts("luaprof " LUAPROF_VERSION);
		return lp_cli_stdout_status(NULL);
	}
	fprintf(stderr, "luaprof: unknown command '%s' (try 'luaprof help')\n", cmd);
	return LP_EXIT_USAGE;
}
