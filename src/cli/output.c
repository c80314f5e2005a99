/*
** Output formats and destinations shared by `luaprof report` and `luaprof record`.
*/
#include "cli/output.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <linux/fs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "luaprof/format.h"

static const struct {
	const char *name;
	enum lp_fmt fmt;
} names[] = {
	{ "flamegraph", LP_FMT_FLAMEGRAPH }, { "svg", LP_FMT_FLAMEGRAPH },
	{ "collapsed", LP_FMT_COLLAPSED },   { "folded", LP_FMT_COLLAPSED },
	{ "pprof", LP_FMT_PPROF },           { "speedscope", LP_FMT_SPEEDSCOPE },
	{ "top", LP_FMT_TOP },               { "memprof", LP_FMT_MEMPROF },
	{ "info", LP_FMT_INFO },             { "annotate", LP_FMT_ANNOTATE },
};

static const struct {
	const char *ext;
	enum lp_fmt fmt;
} extensions[] = {
	{ ".svg", LP_FMT_FLAMEGRAPH },     { ".html", LP_FMT_FLAMEGRAPH },
	{ ".htm", LP_FMT_FLAMEGRAPH },     { ".folded", LP_FMT_COLLAPSED },
	{ ".collapsed", LP_FMT_COLLAPSED }, { ".pb.gz", LP_FMT_PPROF },
	{ ".pprof", LP_FMT_PPROF },         { ".pb", LP_FMT_PPROF },
	{ ".speedscope.json", LP_FMT_SPEEDSCOPE }, { ".json", LP_FMT_SPEEDSCOPE },
	{ ".txt", LP_FMT_NONE },
};

enum lp_fmt lp_fmt_named(const char *name)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(name, names[i].name)) /* any case, as the extensions */
			return names[i].fmt;
	return LP_FMT_NONE;
}

static int ends_with(const char *s, const char *suffix)
{
	size_t ls = strlen(s), lx = strlen(suffix);
	return ls >= lx && strcasecmp(s + ls - lx, suffix) == 0;
}

int lp_fmt_of_path(const char *path, enum lp_fmt *fmt)
{
	for (size_t i = 0; i < sizeof(extensions) / sizeof(extensions[0]); i++)
		if (ends_with(path, extensions[i].ext)) {
			*fmt = extensions[i].fmt;
			return 0;
		}
	return -1;
}

const char *lp_fmt_extensions(void)
{
	static char list[128];
	if (!list[0]) {
		size_t n = 0;
		for (size_t i = 0; i < sizeof(extensions) / sizeof(extensions[0]); i++)
			n += (size_t)snprintf(list + n, n < sizeof(list) ? sizeof(list) - n : 0,
					      "%s%s", i ? " " : "", extensions[i].ext);
	}
	return list;
}

int lp_output_is_html(const char *path)
{
	return path && (ends_with(path, ".html") || ends_with(path, ".htm"));
}

void lp_fmt_note_mismatch(const char *cmd, enum lp_fmt fmt, const char *path)
{
	enum lp_fmt ext;
	if (fmt == LP_FMT_NONE || !path || !strcmp(path, "-") || lp_output_is_special(path) ||
	    lp_fmt_of_path(path, &ext) || ext == LP_FMT_NONE || ext == fmt)
		return;
	fprintf(stderr, "luaprof %s: note: %s gets -f %s output, though its extension (%s) is "
		"that of -f %s\n", cmd, path, lp_fmt_name(fmt), lp_path_ext(path),
		lp_fmt_name(ext));
}

const char *lp_path_ext(const char *path)
{
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	size_t lb = strlen(base);
	for (size_t i = 0; i < sizeof(extensions) / sizeof(extensions[0]); i++) {
		size_t lx = strlen(extensions[i].ext);
		if (lb > lx && strcasecmp(base + lb - lx, extensions[i].ext) == 0)
			return base + lb - lx;
	}
	const char *dot = strrchr(base, '.');
	return dot && dot != base ? dot : NULL;
}

const char *lp_fmt_name(enum lp_fmt f)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].fmt == f)
			return names[i].name;
	return "?";
}

int lp_fmt_draws_stacks(enum lp_fmt f)
{
	return f == LP_FMT_FLAMEGRAPH || f == LP_FMT_COLLAPSED || f == LP_FMT_PPROF ||
	       f == LP_FMT_SPEEDSCOPE;
}

lp_render_fn lp_fmt_renderer(enum lp_fmt f)
{
	switch (f) {
	case LP_FMT_COLLAPSED: return lp_render_collapsed;
	case LP_FMT_FLAMEGRAPH: return lp_render_flamegraph;
	case LP_FMT_PPROF: return lp_render_pprof;
	case LP_FMT_SPEEDSCOPE: return lp_render_speedscope;
	case LP_FMT_TOP: return lp_render_top;
	case LP_FMT_ANNOTATE: return lp_render_annotate;
	default: return NULL;
	}
}

/* What a destination path is, once its symbolic links are followed. */
enum dest_kind {
	DEST_FILE,   /* a regular file or a new one: written beside it, renamed over it */
	DEST_FD,     /* one of this process's descriptors (/dev/stdout, /dev/fd/N) */
	DEST_DIRECT, /* anything else that exists (a device, a FIFO, a directory, another
		      * process's descriptor under /proc): opened as it is */
};

/* path with its directory resolved (symbolic links, "." and ".."): the file need not
 * exist. -1 when the directory does not. */
static int resolve(const char *path, char *out)
{
	char dir[PATH_MAX], real[PATH_MAX];
	const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
	size_t n = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
	if (n >= sizeof(dir))
		return -1;
	memcpy(dir, n ? path : ".", n ? n : 1);
	dir[n ? n : 1] = '\0';
	if (!realpath(dir, real))
		return -1;
	return (size_t)snprintf(out, PATH_MAX, "%s/%s", strcmp(real, "/") ? real : "", base) <
		       PATH_MAX ? 0 : -1;
}

/* This process's descriptor that a /proc or /dev/fd path names, or -1. */
static int own_fd(const char *path)
{
	/* The directory is resolved (resolve): /dev/fd/N and /proc/self/fd/N arrive as
	 * /proc/PID/fd/N, /proc/thread-self/fd/N as /proc/PID/task/TID/fd/N. */
	char mine[64];
	int n = snprintf(mine, sizeof(mine), "/proc/%ld/", (long)getpid());
	if (strncmp(path, mine, (size_t)n))
		return -1;
	const char *p = path + n;
	if (!strncmp(p, "task/", 5)) {
		p += 5 + strspn(p + 5, "0123456789");
		if (*p++ != '/')
			return -1;
	}
	if (strncmp(p, "fd/", 3) || !p[3])
		return -1;
	char *end;
	long fd = strtol(p + 3, &end, 10);
	return *end || fd < 0 || fd > INT_MAX ? -1 : (int)fd;
}

/*
** Follows path's chain of symbolic links to what is written: a link is written through
** (its target replaced, the link kept; a link to nothing yet creates the path it names),
** but the links under /proc (/dev/stdout's) name open files, not paths, so the chain stops
** there. Each step's directory is resolved first, so that any spelling of /dev/fd/1 is
** seen as the descriptor. dest gets the file a DEST_FILE renames over, its directory
** resolved (a name two paths can be compared by); *fd the descriptor of a DEST_FD. -1
** with errno when a path is too long or the chain too deep.
*/
static int classify(const char *path, char *dest, int *fd, enum dest_kind *kind)
{
	char cur[PATH_MAX], target[PATH_MAX];
	if ((size_t)snprintf(cur, sizeof(cur), "%s", path) >= sizeof(cur))
		goto too_long;
	for (int depth = 0;; depth++) {
		char real[PATH_MAX];
		if (resolve(cur, real) == 0) /* "//", ".", "..", and links in the directory */
			memcpy(cur, real, sizeof(cur));
		if ((*fd = own_fd(cur)) >= 0) {
			*kind = DEST_FD;
			return 0;
		}
		struct stat sb;
		if (!strncmp(cur, "/proc/", 6) && lstat(cur, &sb) == 0 && S_ISLNK(sb.st_mode)) {
			*kind = DEST_DIRECT;
			return 0;
		}
		ssize_t n = readlink(cur, target, sizeof(target) - 1);
		if (n < 0)
			break;
		if (depth == 40) {
			errno = ELOOP;
			return -1;
		}
		target[n] = '\0';
		const char *slash = strrchr(cur, '/');
		int dirlen = target[0] == '/' || !slash ? 0 : (int)(slash - cur + 1);
		char next[PATH_MAX];
		if ((size_t)snprintf(next, sizeof(next), "%.*s%s", dirlen, cur, target) >=
		    sizeof(next))
			goto too_long;
		memcpy(cur, next, sizeof(cur));
	}
	struct stat sb;
	*kind = stat(cur, &sb) == 0 && !S_ISREG(sb.st_mode) ? DEST_DIRECT : DEST_FILE;
	memcpy(dest, cur, sizeof(cur));
	return 0;
too_long:
	errno = ENAMETOOLONG;
	return -1;
}

int lp_output_rename_refused(const char *dest)
{
	struct stat fs, ds;
	char dir[PATH_MAX];
	const char *slash = strrchr(dest, '/');
	size_t n = !slash ? 1 : slash == dest ? 1 : (size_t)(slash - dest);
	if (n >= sizeof(dir) || lstat(dest, &fs) != 0)
		return 0;
	memcpy(dir, slash ? dest : ".", n);
	dir[n] = '\0';
	uid_t me = geteuid();
	/* Root's CAP_FOWNER passes the sticky bit (a root without it is rare enough). */
	return stat(dir, &ds) == 0 && (ds.st_mode & S_ISVTX) && me != 0 && fs.st_uid != me &&
	       ds.st_uid != me;
}

/* An existing file opened to be rewritten in place: without O_CREAT, which a sticky
 * directory refuses for another user's file where fs.protected_regular is set. */
static FILE *open_in_place(const char *dest)
{
	int fd = open(dest, O_WRONLY | O_TRUNC | O_CLOEXEC);
	FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
	if (fd >= 0 && !f) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return f;
}

FILE *lp_output_open(const char *path, char *tmp, size_t tmplen)
{
	tmp[0] = '\0';
	if (!path || !strcmp(path, "-"))
		return stdout;
	char dest[PATH_MAX];
	int fd;
	enum dest_kind kind;
	if (classify(path, dest, &fd, &kind))
		return NULL;
	struct stat sb;
	if (kind == DEST_FD) {
		/* At the descriptor's own offset (an appended log is appended to), as the
		 * shell's redirection of standard output would be. */
		int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		FILE *f = dup_fd < 0 ? NULL : fdopen(dup_fd, "w");
		if (dup_fd >= 0 && !f)
			close(dup_fd);
		return f;
	}
	if (kind == DEST_DIRECT) {
		if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
			errno = EISDIR;
			return NULL;
		}
		return fopen(path, "w");
	}
	int exists = stat(dest, &sb) == 0;
	/* Another user's file in a sticky directory (/tmp) cannot be renamed over: written in
	 * place, as it would be without the temporary file (a failed rendering leaves it
	 * cut). lp_output_check has found it writable. */
	if (exists && lp_output_rename_refused(dest))
		return open_in_place(dest);
	/* lp_output_close renames tmp over the name tmp has without this suffix: dest. */
	if ((size_t)snprintf(tmp, tmplen, "%s.XXXXXX", dest) >= tmplen) {
		errno = ENAMETOOLONG;
		tmp[0] = '\0';
		return NULL;
	}
	fd = mkstemp(tmp);
	if (fd < 0) {
		/* A directory that takes no new file (another user's, holding a file of this
		 * one's): the file is written in place, as it would be without the temporary
		 * file, and a failed rendering leaves it cut. */
		int e = errno;
		tmp[0] = '\0';
		if (e == EACCES && exists)
			return open_in_place(dest);
		/* A name too long for its suffix (NAME_MAX less 7 bytes or more): written in
		 * place too, as the check before the rendering took it. */
		if (e == ENAMETOOLONG)
			return exists ? open_in_place(dest) : fopen(dest, "w");
		errno = e;
		return NULL;
	}
	/* The mode a plain creation would give (mkstemp's is 0600), or the replaced file's. */
	mode_t mask = umask(0);
	umask(mask);
	fchmod(fd, exists ? sb.st_mode & 07777 : 0666 & ~mask);
	FILE *f = fdopen(fd, "w");
	if (!f) {
		int e = errno;
		close(fd);
		unlink(tmp);
		tmp[0] = '\0';
		errno = e;
	}
	return f;
}

/* A directory or file marked append-only or immutable (chattr +a / +i), where the file
 * systems that have such flags say so: a new file can be made in an append-only directory,
 * but the temporary file that replaces the output cannot be renamed over it or removed. */
static int append_only(const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOFOLLOW), flags = 0;
	if (fd < 0)
		return 0;
	int r = ioctl(fd, FS_IOC_GETFLAGS, &flags);
	close(fd);
	return r == 0 && (flags & (FS_APPEND_FL | FS_IMMUTABLE_FL)) != 0;
}

int lp_output_check(const char *path)
{
	char dest[PATH_MAX];
	int fd = STDOUT_FILENO;
	enum dest_kind kind = DEST_FD;
	/* Standard output closed (`>&-`) or read-only: said before a program runs for it. */
	if (path && strcmp(path, "-") && classify(path, dest, &fd, &kind))
		return -1;
	struct stat sb;
	if (kind == DEST_FD) {
		int fl = fcntl(fd, F_GETFL);
		if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY) {
			errno = EBADF;
			return -1;
		}
		return 0;
	}
	if (kind == DEST_DIRECT) {
		if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
			errno = EISDIR;
			return -1;
		}
		return access(path, W_OK);
	}
	/* A regular file is replaced through a temporary file in its directory, or where
	 * that takes no new file, written in place (lp_output_open). */
	char dir[PATH_MAX];
	const char *slash = strrchr(dest, '/');
	size_t n = !slash ? 1 : slash == dest ? 1 : (size_t)(slash - dest);
	memcpy(dir, slash ? dest : ".", n);
	dir[n] = '\0';
	/* A file its owner made read-only is not replaced behind their back (as cp and the
	 * shell's > do not). */
	int exists = stat(dest, &sb) == 0;
	if (exists && access(dest, W_OK) != 0)
		return -1;
	if (append_only(dir) || (exists && append_only(dest))) {
		errno = EPERM; /* entries can be added there, not replaced or removed */
		return -1;
	}
	/* Another user's file in a sticky directory: written in place (lp_output_open). */
	if (exists && lp_output_rename_refused(dest))
		return 0;
	/* A file made where the output goes: what the directory really takes (permission
	 * bits do not say it for /proc, a read-only mount, an immutable directory). Unnamed
	 * where the file system can (nothing to remove), else named and removed; one that
	 * cannot be removed is refused, as the temporary file that replaces the output would
	 * be left there too. */
	int e = 0, pfd = open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
	if (pfd >= 0) {
		close(pfd);
		return 0;
	}
	char probe[PATH_MAX + 32];
	if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
		if ((size_t)snprintf(probe, sizeof(probe), "%s/.luaprof-probe.XXXXXX", dir) >=
		    sizeof(probe)) {
			errno = ENAMETOOLONG;
			return -1;
		}
		pfd = mkostemp(probe, O_CLOEXEC);
		if (pfd >= 0) {
			close(pfd);
			if (unlink(probe) == 0)
				return 0;
		}
	}
	e = errno;
	/* No new file there: the output is written in place, as lp_output_open does when the
	 * directory refuses permission (only then). */
	if (e == EACCES && exists && access(dest, W_OK) == 0 &&
	    (fd = open(dest, O_WRONLY | O_CLOEXEC)) >= 0) {
		close(fd);
		return 0;
	}
	errno = e;
	return -1;
}

int lp_output_discarded(const char *path)
{
	struct stat a, b;
	return path && strcmp(path, "-") && stat(path, &a) == 0 && S_ISCHR(a.st_mode) &&
	       stat("/dev/null", &b) == 0 && a.st_rdev == b.st_rdev;
}

int lp_output_holds_profile(const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
		return 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return -1;
	/* Asked of report's own reading: a gzipped stream is a profile too. */
	int is = lp_cli_input_is_profile(fd, path);
	int e = errno;
	close(fd);
	errno = e;
	return is;
}

int lp_output_same(const char *a, const char *b)
{
	char ra[PATH_MAX], rb[PATH_MAX];
	int fa, fb;
	enum dest_kind ka, kb;
	if (!strcmp(a, "-") || !strcmp(b, "-") || classify(a, ra, &fa, &ka) ||
	    classify(b, rb, &fb, &kb))
		return 0;
	/* What each writes, links followed: the same name (neither need exist yet), or the
	 * same file. */
	if (ka == DEST_FILE && kb == DEST_FILE && !strcmp(ra, rb))
		return 1;
	struct stat sa, sb;
	return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

int lp_output_target(const char *path, char *dest)
{
	int fd;
	enum dest_kind kind;
	if (classify(path, dest, &fd, &kind))
		return -1;
	if (kind != DEST_FILE)
		snprintf(dest, PATH_MAX, "%s", path);
	return 0;
}

int lp_output_fd(const char *path)
{
	char dest[PATH_MAX];
	int fd;
	enum dest_kind kind;
	if (!path || !strcmp(path, "-"))
		return STDOUT_FILENO;
	return classify(path, dest, &fd, &kind) == 0 && kind == DEST_FD ? fd : -1;
}

const char *lp_fmt_tty_refusal(enum lp_fmt f)
{
	if (f == LP_FMT_PPROF)
		return "pprof output is binary; give a file with -o";
	if (f == LP_FMT_FLAMEGRAPH)
		return "the flame graph is SVG for a browser, not text; give a file with -o "
		       "(-o out.svg, or -o out.html for a web page)";
	if (f == LP_FMT_SPEEDSCOPE)
		return "speedscope output is JSON for speedscope.app, not text; give a file "
		       "with -o (-o out.speedscope.json)";
	return NULL;
}

int lp_output_tty(const char *path)
{
	if (!path || !strcmp(path, "-"))
		return isatty(STDOUT_FILENO);
	char dest[PATH_MAX];
	int fd;
	enum dest_kind kind;
	if (classify(path, dest, &fd, &kind) || kind == DEST_FILE)
		return 0;
	if (kind == DEST_FD)
		return isatty(fd);
	struct stat sb;
	if (stat(path, &sb) != 0 || !S_ISCHR(sb.st_mode))
		return 0;
	int t = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	int tty = t >= 0 && isatty(t);
	if (t >= 0)
		close(t);
	return tty;
}

int lp_output_is_special(const char *path)
{
	char dest[PATH_MAX];
	int fd;
	enum dest_kind kind;
	return path && strcmp(path, "-") && classify(path, dest, &fd, &kind) == 0 &&
	       kind != DEST_FILE;
}

int lp_output_close(FILE *out, const char *path, const char *tmp, int rc, char *err,
		    size_t errlen)
{
	const char *name = out == stdout || !path || !strcmp(path, "-") ? "standard output" : path;
	/* A renderer that failed to write says what it wrote ("top: write error: ..."), not
	 * where: the destination is named, as for a failure to open it. */
	if (rc < 0 && ferror(out))
		snprintf(err, errlen, "cannot write %s: %s", name, strerror(-rc));
	if (out == stdout) {
		if (fflush(stdout) && !rc) {
			rc = -errno;
			snprintf(err, errlen, "cannot write %s: %s", name, strerror(errno));
		}
		return rc;
	}
	if (fclose(out) && !rc) {
		rc = -errno;
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
	}
	if (!rc && tmp[0]) {
		char dest[PATH_MAX]; /* tmp is dest.XXXXXX (lp_output_open) */
		snprintf(dest, sizeof(dest), "%.*s", (int)(strlen(tmp) - 7), tmp);
		if (rename(tmp, dest)) {
			rc = -errno;
			snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
		}
	}
	if (rc && tmp[0])
		unlink(tmp);
	return rc;
}

int lp_cli_fail(const char *who, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "luaprof %s: ", who);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return LP_EXIT_USAGE;
}

int lp_cli_stdout_status(const char *who)
{
	if (fflush(stdout) == 0 && !ferror(stdout))
		return LP_EXIT_OK;
	int e = errno;
	fprintf(stderr, "luaprof%s%s: cannot write to standard output: %s\n", who ? " " : "",
		who ? who : "", strerror(e ? e : EIO));
	return LP_EXIT_USAGE;
}

const char *lp_cli_refused(char *const *argv, char buf[3])
{
	/* getopt_long sets optopt for an unknown short option only (0 for a long one). */
	if (optopt > 0 && optopt < 256) {
		buf[0] = '-';
		buf[1] = (char)optopt;
		buf[2] = 0;
		return buf;
	}
	return argv[optind - 1];
}

int lp_cli_bad_option(const char *who, const char *arg, const struct option *longopts)
{
	char list[512] = "";
	size_t len = 0;
	int n = 0, differ = 0;
	const struct option *first = NULL, *exact = NULL;
	const char *name = arg + 2;
	size_t nl = 0;
	if (!strncmp(arg, "--", 2) && arg[2] && arg[2] != '=') {
		nl = strcspn(name, "=");
		for (const struct option *o = longopts; o->name; o++) {
			if (strncmp(o->name, name, nl))
				continue;
			if (strlen(o->name) == nl)
				exact = o;
			/* Options that do the same (--limit, --top) are no choice to getopt. */
			if (first && (o->has_arg != first->has_arg || o->flag != first->flag ||
				      o->val != first->val))
				differ = 1;
			if (!first)
				first = o;
			n++;
			if (len < sizeof(list))
				len += (size_t)snprintf(list + len, sizeof(list) - len, "%s--%s",
							n > 1 ? ", " : "", o->name);
		}
	}
	/* The option getopt took the name for: refused for its "=VALUE". */
	const struct option *took = exact ? exact : n && !differ ? first : NULL;
	if (took && name[nl] == '=' && took->has_arg == no_argument)
		return lp_cli_fail(who, "option '--%s' takes no value, not '%s'", took->name,
				   name + nl + 1);
	if (!took && n > 1)
		return lp_cli_fail(who, "option '%s' is ambiguous: %s (see 'luaprof %s --help')",
				   arg, list, who);
	return lp_cli_fail(who, "unknown option '%s' (see 'luaprof %s --help')", arg, who);
}
