/*
** Output formats and destinations shared by `luaprof report` and `luaprof record`.
*/
#include "cli/output.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"

static const struct {
	const char *name;
	enum lp_fmt fmt;
} names[] = {
	{ "flamegraph", LP_FMT_FLAMEGRAPH }, { "svg", LP_FMT_FLAMEGRAPH },
	{ "collapsed", LP_FMT_COLLAPSED },   { "folded", LP_FMT_COLLAPSED },
	{ "pprof", LP_FMT_PPROF },           { "speedscope", LP_FMT_SPEEDSCOPE },
	{ "top", LP_FMT_TOP },               { "memprof", LP_FMT_MEMPROF },
	{ "info", LP_FMT_INFO },
};

static const struct {
	const char *ext;
	enum lp_fmt fmt;
} extensions[] = {
	{ ".svg", LP_FMT_FLAMEGRAPH },     { ".folded", LP_FMT_COLLAPSED },
	{ ".collapsed", LP_FMT_COLLAPSED }, { ".pb.gz", LP_FMT_PPROF },
	{ ".pprof", LP_FMT_PPROF },         { ".pb", LP_FMT_PPROF },
	{ ".speedscope.json", LP_FMT_SPEEDSCOPE }, { ".json", LP_FMT_SPEEDSCOPE },
	{ ".txt", LP_FMT_NONE },
};

enum lp_fmt lp_fmt_named(const char *name)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcmp(name, names[i].name))
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

const char *lp_fmt_name(enum lp_fmt f)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].fmt == f)
			return names[i].name;
	return "?";
}

lp_render_fn lp_fmt_renderer(enum lp_fmt f)
{
	switch (f) {
	case LP_FMT_COLLAPSED: return lp_render_collapsed;
	case LP_FMT_FLAMEGRAPH: return lp_render_flamegraph;
	case LP_FMT_PPROF: return lp_render_pprof;
	case LP_FMT_SPEEDSCOPE: return lp_render_speedscope;
	case LP_FMT_TOP: return lp_render_top;
	default: return NULL;
	}
}

FILE *lp_output_open(const char *path, char *tmp, size_t tmplen)
{
	tmp[0] = '\0';
	if (!path || !strcmp(path, "-"))
		return stdout;
	struct stat sb;
	int exists = stat(path, &sb) == 0;
	if (exists && !S_ISREG(sb.st_mode)) {
		if (S_ISDIR(sb.st_mode)) {
			errno = EISDIR;
			return NULL;
		}
		return fopen(path, "w");
	}
	if ((size_t)snprintf(tmp, tmplen, "%s.XXXXXX", path) >= tmplen) {
		errno = ENAMETOOLONG;
		tmp[0] = '\0';
		return NULL;
	}
	int fd = mkstemp(tmp);
	if (fd < 0) {
		tmp[0] = '\0';
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

int lp_output_check(const char *path)
{
	if (!path || !strcmp(path, "-"))
		return 0;
	struct stat sb;
	if (stat(path, &sb) == 0) {
		if (S_ISDIR(sb.st_mode)) {
			errno = EISDIR;
			return -1;
		}
		if (!S_ISREG(sb.st_mode))
			return access(path, W_OK);
	}
	/* A regular file is replaced through a temporary file in its directory. */
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	if (!slash)
		return access(".", W_OK | X_OK);
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= sizeof(dir)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(dir, path, n);
	dir[n] = '\0';
	return access(dir, W_OK | X_OK);
}

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
	return (size_t)snprintf(out, PATH_MAX, "%s/%s", real, base) < PATH_MAX ? 0 : -1;
}

int lp_output_same(const char *a, const char *b)
{
	char ra[PATH_MAX], rb[PATH_MAX];
	if (!strcmp(a, "-") || !strcmp(b, "-") || resolve(a, ra) || resolve(b, rb))
		return 0;
	if (!strcmp(ra, rb))
		return 1;
	struct stat sa, sb;
	return stat(ra, &sa) == 0 && stat(rb, &sb) == 0 && sa.st_dev == sb.st_dev &&
	       sa.st_ino == sb.st_ino;
}

int lp_output_is_special(const char *path)
{
	struct stat sb;
	return path && strcmp(path, "-") && stat(path, &sb) == 0 && !S_ISREG(sb.st_mode);
}

int lp_output_close(FILE *out, const char *path, const char *tmp, int rc, char *err,
		    size_t errlen)
{
	if (out == stdout) {
		if (fflush(stdout) && !rc) {
			rc = -errno;
			snprintf(err, errlen, "cannot write the report: %s", strerror(errno));
		}
		return rc;
	}
	if (fclose(out) && !rc) {
		rc = -errno;
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
	}
	if (!rc && tmp[0] && rename(tmp, path)) {
		rc = -errno;
		snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
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
