/*
** Output formats and destinations shared by `luaprof report` and `luaprof record`.
*/
#ifndef LP_CLI_OUTPUT_H
#define LP_CLI_OUTPUT_H

#include <stddef.h>
#include <stdio.h>

#include "report/render.h"

enum lp_fmt {
	LP_FMT_NONE,        /* not chosen; from a ".txt" path: the stream's own text report */
	LP_FMT_COLLAPSED, LP_FMT_FLAMEGRAPH, LP_FMT_PPROF, LP_FMT_SPEEDSCOPE, LP_FMT_TOP,
	LP_FMT_MEMPROF, LP_FMT_INFO, LP_FMT_ANNOTATE
};

/* The format called `name` in any case (aliases: svg, folded), or LP_FMT_NONE. */
enum lp_fmt lp_fmt_named(const char *name);
/* The format a path's extension asks for; returns -1 when it says nothing. */
int lp_fmt_of_path(const char *path, enum lp_fmt *fmt);
/* The extensions lp_fmt_of_path knows, space-separated (".svg .html ..."), for messages. */
const char *lp_fmt_extensions(void);
/* Whether path names a web page (.html, .htm): a flame graph there is one, holding the SVG. */
int lp_output_is_html(const char *path);
/* Warns (as "luaprof CMD: note: ...") when path's extension names another format than
 * fmt, which -f chose: the file gets fmt all the same. */
void lp_fmt_note_mismatch(const char *cmd, enum lp_fmt fmt, const char *path);
const char *lp_fmt_name(enum lp_fmt f);
/* Whether f draws the profile's stacks (flame graph, collapsed, pprof, speedscope), not a
 * list or a text report. */
int lp_fmt_draws_stacks(enum lp_fmt f);
/* The extension of path's last component: a format's (".pb.gz", ".speedscope.json") when it
 * has one, else from its last dot (not a leading one); NULL when it has none. */
const char *lp_path_ext(const char *path);
/* The renderer of a profile format; NULL for LP_FMT_NONE, LP_FMT_MEMPROF and LP_FMT_INFO
 * (which render the loaded stream itself). */
lp_render_fn lp_fmt_renderer(enum lp_fmt f);

/* Output that nobody reads (/dev/null: record keeping the raw stream alone), so that a
 * top list rendered there is shown in the summary too. */
int lp_output_discarded(const char *path);

/*
** Opens a destination ("-" or NULL = standard output). A regular file (or a new path) is
** written through a temporary file beside it (its name left in tmp, else tmp[0] = 0)
** that lp_output_close renames into place only on success; a symbolic link is written
** through (its target replaced, the link kept). This process's descriptors named by path
** (/dev/stdout, /dev/fd/N: links under /proc) are written through a duplicate, at their
** offset; anything else that exists, such as /dev/null or a FIFO, is written directly:
** renaming over it would replace it. A file whose directory takes no new file is written
** in place. NULL with errno on failure.
*/
FILE *lp_output_open(const char *path, char *tmp, size_t tmplen);
/*
** Whether lp_output_open can be expected to succeed for path, asked before work whose result
** would otherwise be lost (record runs the program first): 0, or -1 with errno (EISDIR for
** a directory, EBADF for a descriptor not open for writing, else what access(2) says of
** the directory it goes in, or of the file when that directory takes no new file).
*/
int lp_output_check(const char *path);
/* Whether the existing file dest (links followed) cannot be replaced by renaming another
 * file over it: another user's, in a sticky directory such as /tmp that is not ours. It is
 * then written in place. */
int lp_output_rename_refused(const char *dest);
/* Whether path names something that exists and is not a regular file (/dev/null, a FIFO,
** /dev/stdout whatever it is redirected to): no file should be derived from its name. */
int lp_output_is_special(const char *path);
/* The file a write to path replaces, into dest (PATH_MAX): a symbolic link's target (a
 * link to nothing yet: the path it names), its directory resolved; path itself when that
 * is no regular or new file. 0, or -1 with errno (a path too long, a chain too deep). */
int lp_output_target(const char *path, char *dest);
/* The descriptor of this process that path names ("-", /dev/stdout: 1), or -1. */
int lp_output_fd(const char *path);
/* Whether path ("-": standard output) is a terminal, where binary output is refused. */
int lp_output_tty(const char *path);
/* Why format f is not written to a terminal (binary, or markup or JSON for a viewer), as a
 * message naming -o; NULL for the formats meant to be read there or piped. */
const char *lp_fmt_tty_refusal(enum lp_fmt f);
/* Whether path (links followed) is a regular file that report reads as a profile stream,
 * plain or gzip-compressed: its start is one the parser takes (lp_cli_input_is_profile;
 * "ljs" alone may start a text file). 1 it is, 0 it is not (or is absent, or not a regular
 * file), -1 when it cannot be read to tell (errno). A rendering written there would lose
 * the profile. */
int lp_output_holds_profile(const char *path);
/* Whether two paths name the same file (one need not exist yet; "-" is none). */
int lp_output_same(const char *a, const char *b);
/* Closes what lp_output_open opened, given the renderer's result rc; returns rc or the
 * close/rename failure (message in err), removing the temporary file on failure. A write
 * that failed (the renderer's, or the last flush) is said as "cannot write PATH: why"
 * (PATH "standard output" for it). */
int lp_output_close(FILE *out, const char *path, const char *tmp, int rc, char *err,
		    size_t errlen);

/* Prints "luaprof WHO: MESSAGE" on standard error and returns the usage exit status. */
int lp_cli_fail(const char *who, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* lp_cli_fail for an option getopt_long refused, arg as typed: a prefix of several of
 * longopts (getopt takes an abbreviation of one) is ambiguous, named with them; one that
 * takes no value given "=VALUE" is said so; anything else unknown. */
struct option;
int lp_cli_bad_option(const char *who, const char *arg, const struct option *longopts);
/* The option getopt_long has just refused as unknown, as typed: a short one is its letter
 * alone (argv[optind - 1] is another argument when it is in a cluster, -qx, or has text
 * after it, -x5), kept in buf; a long one is its argument. */
const char *lp_cli_refused(char *const *argv, char buf[3]);

#endif
