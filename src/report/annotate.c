/*
** annotate renderer: the profile on the program's source, as jit.p's annotation mode shows
** it: each Lua source file's profiled lines, with a few lines of context, and what was spent
** (or allocated) at each.
**
** A stack counts for a line's self when the line is the stack's innermost Lua location:
** what the line itself costs, the builtins, C functions and VM work below it included. It
** counts for the line's total when the line is anywhere on it (each stack once): with the
** Lua functions the line calls. Lua frames name lines; a JIT trace frame (where the trace
** starts) only in a stack with no Lua frame (an exact memory profile's trace events), as
** the function frame under it has the line inside the trace. A chunk named
** "@path" is read from path (relative to the working directory, as the program opened it),
** or with a source directory first from there: the path under it, then the path without
** its leading directories one at a time (a profile made in a container's /app/src/x.lua
** finds src/x.lua in a checkout), passing over files too short for the lines profiled.
** Only regular files are read, so that a profile naming a device or a FIFO cannot stall
** the report. A source that no longer matches the profile is said not to (see
** source_check), one newer than the profile whose match cannot be checked is said to be:
** its lines may have moved. Other chunks (code loaded from a string, standard input) list
** their lines without text.
*/
#include "report/render.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "report/text.h"
#include "util/addrmap.h"
#include "util/grow.h"

#define DEFAULT_LIMIT 10
#define DEFAULT_CONTEXT 2            /* lines shown around each profiled one */
#define SOURCE_MAX (16u << 20)       /* larger files are not read */

struct file {
	const char *chunk; /* chunk name, as the profile has it (borrowed) */
	int64_t self;      /* sum of its lines' self */
	int64_t total;     /* most total of any of its lines */
	size_t first, n;   /* its lines in the sorted array */
};

struct line {
	uint32_t file, line;
	int64_t self, total;
	int traced; /* some of its value is JIT traces', charged where they start */
};

/* A source file read into memory, split into lines: each at text + lines[i], without its
 * end. */
struct source {
	char *text;
	uint32_t *lines;
	size_t nlines;
	uint64_t mtime_ns; /* when the file was last modified (Unix time, ns) */
};

static const char *line_text(const struct source *s, size_t i)
{
	return s->text + s->lines[i];
}

/* -- Aggregation ------------------------------------------------------------ */

static int names_cmp(const void *a, const void *b, void *arg)
{
	const struct lp_profile *p = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = strcmp(lp_profile_frame(p, x)->name, lp_profile_frame(p, y)->name);
	return c ? c : (x > y) - (x < y);
}

static int u64_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

static int line_cmp(const void *a, const void *b)
{
	const struct line *x = a, *y = b;
	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return (x->line > y->line) - (x->line < y->line);
}

static int file_cmp(const void *a, const void *b)
{
	const struct file *x = a, *y = b;
	if (x->self != y->self)
		return x->self > y->self ? -1 : 1;
	if (x->total != y->total)
		return x->total > y->total ? -1 : 1;
	return strcmp(x->chunk, y->chunk);
}

/*
** Files and their lines with value in column v: *files sorted by self (then total, then
** name), each naming its run of *lines (sorted by line). *outside: the value of the stacks
** with no Lua line at all; *traced: whether a line took a trace frame's. 0 or -ENOMEM.
*/
static int aggregate(const struct lp_profile *p, unsigned v, struct file **filesp,
		     size_t *nfilesp, struct line **linesp, int64_t *outside, int *traced)
{
	size_t nframes = lp_profile_nframes(p), nstacks = lp_profile_nstacks(p), nlua = 0;
	uint32_t *fkey = calloc(nframes + 1, sizeof(*fkey)); /* file index + 1, 0: not Lua */
	uint32_t *lua = malloc((nframes + 1) * sizeof(*lua));
	uint64_t *keys = NULL;
	size_t keycap = 0;
	struct lp_addrmap acc = { 0 }, tacc = { 0 }; /* tacc: the lines traces' frames name */
	struct file *files = NULL;
	struct line *lines = NULL;
	size_t nfiles = 0, nlines = 0;
	int rc = -ENOMEM;
	*outside = 0;
	*traced = 0;
	if (!fkey || !lua)
		goto out;
	for (size_t id = 0; id < nframes; id++) {
		const struct lp_frame *f = lp_profile_frame(p, (uint32_t)id);
		if (f->kind == LP_FK_LUA || f->kind == LP_FK_TRACE)
			lua[nlua++] = (uint32_t)id;
	}
	/* One file per distinct chunk name. */
	qsort_r(lua, nlua, sizeof(*lua), names_cmp, (void *)p);
	files = calloc(nlua + 1, sizeof(*files));
	if (!files)
		goto out;
	for (size_t i = 0; i < nlua; i++) {
		const char *name = lp_profile_frame(p, lua[i])->name;
		if (!nfiles || strcmp(files[nfiles - 1].chunk, name))
			files[nfiles++].chunk = name;
		fkey[lua[i]] = (uint32_t)nfiles;
	}
	for (size_t i = 0; i < nstacks; i++) {
		const uint32_t *fr;
		size_t depth, nkeys = 0;
		const int64_t *val;
		lp_profile_stack(p, i, &fr, &depth, &val);
		if (!depth || !val[v])
			continue;
		if (lp_grow((void **)&keys, &keycap, depth, sizeof(*keys)))
			goto out;
		int traces = 1; /* only when no Lua frame */
		for (size_t d = 0; d < depth && traces; d++)
			traces = !fkey[fr[d]] || lp_profile_frame(p, fr[d])->kind != LP_FK_LUA;
		for (size_t d = 0; d < depth; d++) {
			const struct lp_frame *f = lp_profile_frame(p, fr[d]);
			if (!fkey[fr[d]] || (f->kind != LP_FK_LUA && !traces))
				continue;
			keys[nkeys++] = (uint64_t)(fkey[fr[d]] - 1) << 32 | f->line;
			if (f->kind == LP_FK_TRACE && lp_addrmap_put(&tacc, keys[nkeys - 1], 1, 0))
				goto out;
		}
		if (!nkeys) {
			*outside = lp_sat_add(*outside, val[v]);
			continue;
		}
		/* The innermost Lua line holds the stack's self; sorted, each line once. */
		uint64_t self_key = keys[nkeys - 1];
		qsort(keys, nkeys, sizeof(*keys), u64_cmp);
		for (size_t k = 0; k < nkeys; k++) {
			if (k && keys[k] == keys[k - 1])
				continue;
			struct lp_addrmap_entry *e = lp_addrmap_get(&acc, keys[k]);
			int64_t self = e ? (int64_t)e->a : 0, total = e ? (int64_t)e->b : 0;
			if (keys[k] == self_key)
				self = lp_sat_add(self, val[v]);
			total = lp_sat_add(total, val[v]);
			if (lp_addrmap_put(&acc, keys[k], (uint64_t)self, (uint64_t)total))
				goto out;
		}
	}
	lines = calloc(acc.count + 1, sizeof(*lines));
	if (!lines)
		goto out;
	for (size_t s = 0; s < acc.cap; s++) {
		const struct lp_addrmap_entry *e = &acc.slots[s];
		if (!e->used)
			continue;
		lines[nlines++] = (struct line){ .file = (uint32_t)(e->key >> 32),
						 .line = (uint32_t)e->key,
						 .self = (int64_t)e->a, .total = (int64_t)e->b,
						 .traced = lp_addrmap_get(&tacc, e->key) != NULL };
		*traced |= lines[nlines - 1].traced;
	}
	qsort(lines, nlines, sizeof(*lines), line_cmp);
	for (size_t i = 0; i < nlines; i++) {
		struct file *f = &files[lines[i].file];
		if (!f->n)
			f->first = i;
		f->n++;
		f->self = lp_sat_add(f->self, lines[i].self);
		if (lines[i].total > f->total)
			f->total = lines[i].total;
	}
	/* Files whose lines carry no value (only in stacks of another column) go. */
	size_t kept = 0;
	for (size_t i = 0; i < nfiles; i++)
		if (files[i].n)
			files[kept++] = files[i];
	nfiles = kept;
	qsort(files, nfiles, sizeof(*files), file_cmp);
	rc = 0;
out:
	if (rc) {
		free(files);
		free(lines);
		files = NULL;
		lines = NULL;
		nfiles = 0;
	}
	free(fkey);
	free(lua);
	free(keys);
	lp_addrmap_free(&acc);
	lp_addrmap_free(&tacc);
	*filesp = files;
	*nfilesp = nfiles;
	*linesp = lines;
	return rc;
}

/* -- Sources ---------------------------------------------------------------- */

static void source_free(struct source *s)
{
	free(s->text);
	free(s->lines);
	memset(s, 0, sizeof(*s));
}

/* Reads path, a regular file of at most SOURCE_MAX bytes, into s, in lines as LuaJIT's
 * lexer counts them (a line ends at \n, \r, \r\n or \n\r). 0, or an errno value (EINVAL:
 * not a regular file, which is not even opened: opening a FIFO or a device can act on it;
 * EFBIG: too large). */
static int source_read(const char *path, struct source *s)
{
	memset(s, 0, sizeof(*s));
	struct stat sb, fsb;
	if (stat(path, &sb) != 0)
		return errno;
	if (!S_ISREG(sb.st_mode))
		return EINVAL;
	if ((uint64_t)sb.st_size > SOURCE_MAX)
		return EFBIG;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return errno;
	int e = 0;
	if (fstat(fd, &fsb) != 0)
		e = errno;
	else if (!S_ISREG(fsb.st_mode) || fsb.st_dev != sb.st_dev || fsb.st_ino != sb.st_ino)
		e = EINVAL; /* replaced since the stat */
	size_t len = 0, cap = (size_t)fsb.st_size + 1;
	if (!e && !(s->text = malloc(cap)))
		e = ENOMEM;
	while (!e) {
		char probe;
		int full = len + 1 == cap;
		ssize_t n = full ? read(fd, &probe, 1) : read(fd, s->text + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			e = errno;
		if (n <= 0)
			break;
		if (full) { /* grown since the stat */
			char *t = cap > SOURCE_MAX ? NULL : realloc(s->text, cap * 2);
			if (!t) {
				e = cap > SOURCE_MAX ? EFBIG : ENOMEM;
				break;
			}
			s->text = t;
			cap *= 2;
			s->text[len] = probe;
		}
		len += (size_t)n;
	}
	close(fd);
	if (!e && len > SOURCE_MAX)
		e = EFBIG;
	if (e) {
		source_free(s);
		return e;
	}
	s->text[len] = '\0';
	s->mtime_ns = (uint64_t)fsb.st_mtim.tv_sec * 1000000000u + (uint64_t)fsb.st_mtim.tv_nsec;
	size_t n = 1;
	for (size_t i = 0; i < len; i++)
		if (s->text[i] == '\n' || s->text[i] == '\r') {
			n++;
			if (i + 1 < len && (s->text[i + 1] ^ s->text[i]) == ('\n' ^ '\r'))
				i++;
		}
	if (!(s->lines = malloc(n * sizeof(*s->lines)))) {
		source_free(s);
		return ENOMEM;
	}
	/* Lines as offsets, each ended by a NUL written over its line end; a NUL inside a
	 * line shows as '?', as other control bytes do. */
	size_t start = 0;
	for (size_t i = 0; i <= len; i++) {
		char ch = s->text[i];
		if (i < len && ch != '\n' && ch != '\r') {
			if (!ch)
				s->text[i] = '?';
			continue;
		}
		s->text[i] = '\0';
		if (i < len || start < len)
			s->lines[s->nlines++] = (uint32_t)start;
		if (i + 1 < len && (s->text[i + 1] ^ ch) == ('\n' ^ '\r'))
			s->text[++i] = '\0';
		start = i + 1;
	}
	return 0;
}

/*
** Reads chunk path's source into s, from dir first when there is one (see the top): a
** file there with fewer than lines lines (the highest the profile names) is another file
** of that name (a shorter path's candidate, init.lua) and is passed over, unless it is the
** chunk's whole path under dir and path itself cannot be read: that is the file, changed
** since the profile, as a short file at path itself is taken to be. *found: the path
** read, malloc'd (NULL when it is path itself). 0, or the errno value of path itself
** (ENOMEM: out of memory).
*/
static int source_find(const char *path, const char *dir, uint32_t lines, struct source *s,
		       char **found)
{
	*found = NULL;
	char *whole = NULL; /* the whole path's candidate, read but short */
	if (dir) {
		size_t dl = strlen(dir), pl = strlen(path);
		char *cand = malloc(dl + pl + 2);
		if (!cand)
			return ENOMEM;
		for (const char *rest = path; rest; rest = strchr(rest, '/')) {
			int first = rest == path;
			while (*rest == '/')
				rest++;
			if (!*rest)
				break;
			snprintf(cand, dl + pl + 2, "%s/%s", dir, rest);
			int e = source_read(cand, s);
			if (e == ENOMEM) {
				free(cand);
				free(whole);
				return e;
			}
			if (!e && s->nlines >= lines) {
				free(whole);
				*found = cand;
				return 0;
			}
			if (!e) {
				if (first)
					whole = strdup(cand); /* NULL: no fallback, as before */
				source_free(s);
			}
		}
		free(cand);
	}
	int e = source_read(path, s);
	if (e && e != ENOMEM && whole && source_read(whole, s) == 0) {
		*found = whole;
		return 0;
	}
	free(whole);
	return e;
}

/* -- Whether a source is the one profiled ----------------------------------- */

static int name_char(char c)
{
	return c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9');
}

/* Whether text holds the word "function" (not inside a longer name). */
static int has_function(const char *text)
{
	for (const char *c = text; (c = strstr(c, "function")); c += 8)
		if (!(c > text && name_char(c[-1])) && !name_char(c[8]))
			return 1;
	return 0;
}

/* Whether a chunk's name is a Lua source's (.lua): one compiled from another language
 * under its own name (Fennel's .fnl, MoonScript's .moon) starts its functions with words
 * of its own. */
static int lua_named(const char *chunk)
{
	size_t n = strlen(chunk);
	return n > 4 && !strcmp(chunk + n - 4, ".lua");
}

enum { SOURCE_SAME, SOURCE_NEWER, SOURCE_PAST, SOURCE_NOT_FUNCTION };

/*
** What can be told of src being the source that chunk's profile was taken from. The
** profile keeps the first line of each Lua function it names (linedefined: the line of
** `function`, or of the parameters' "(" after it): when the text at one of them (or on
** the line before) has no word `function`, or the file is shorter, the file is not the
** one profiled (SOURCE_NOT_FUNCTION, SOURCE_PAST; *at: that line). When every one checked
** holds it, the lines are taken to be the profiled ones, whatever the file's time (a fresh
** checkout gives every file a new one; a line added or removed above a profiled function
** moves its start). Only a file with no function start to check (only a main chunk's
** lines, a profile without first lines, a source not named .lua) is judged by its time:
** SOURCE_NEWER when it was last written after the profile started (when the profile
** says when), else SOURCE_SAME.
*/
static int source_check(const struct lp_profile *p, const char *chunk, const struct source *src,
			uint32_t *at)
{
	int checked = 0;
	for (size_t id = 0, n = lp_profile_nframes(p); id < n && lua_named(chunk); id++) {
		const struct lp_frame *f = lp_profile_frame(p, (uint32_t)id);
		if ((f->kind != LP_FK_LUA && f->kind != LP_FK_TRACE) || !f->fline ||
		    strcmp(f->name, chunk))
			continue;
		*at = f->fline;
		if (f->fline > src->nlines)
			return SOURCE_PAST;
		if (!has_function(line_text(src, f->fline - 1)) &&
		    !(f->fline > 1 && has_function(line_text(src, f->fline - 2))))
			return SOURCE_NOT_FUNCTION;
		checked = 1;
	}
	uint64_t started = lp_profile_cmeta(p)->start_unix_ns;
	return !checked && started && src->mtime_ns > started ? SOURCE_NEWER : SOURCE_SAME;
}

/* -- Output ----------------------------------------------------------------- */

/* A source line for a terminal: tabs to the next multiple of 8 columns, other control
 * bytes as '?'. */
static void put_source(FILE *out, const char *text)
{
	size_t col = 0;
	for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
		if (*c == '\t') {
			do
				putc(' ', out);
			while (++col % 8);
			continue;
		}
		putc(*c < 0x20 || *c == 0x7f ? '?' : *c, out);
		/* UTF-8 continuation bytes take no column of their own. */
		col += (*c & 0xc0) != 0x80;
	}
}

static void row(FILE *out, const struct line *l, const struct lp_value_type *t, int64_t grand,
		const char *lineno, const char *text)
{
	if (l) {
		char self[64], total[64], pself[16], ptotal[16];
		lp_text_value(self, sizeof(self), l->self, t->unit);
		lp_text_value(total, sizeof(total), l->total, t->unit);
		lp_text_pct(pself, sizeof(pself), l->self, grand);
		lp_text_pct(ptotal, sizeof(ptotal), l->total, grand);
		if (l->self)
			fprintf(out, "%7s %10s", pself, self);
		else /* a caller's line: its total alone */
			fprintf(out, "%7s %10s", "", "");
		fprintf(out, " %7s %10s", ptotal, total);
	} else {
		fprintf(out, "%7s %10s %7s %10s", "", "", "", "");
	}
	fprintf(out, " %6s", lineno);
	if (l && l->traced)
		fputs(" T", out);
	else if (*text)
		fputs("  ", out);
	if (*text) {
		putc(' ', out);
		put_source(out, text);
	}
	putc('\n', out);
}

/* Prints file f's lines: with their source text and ctx lines around them when src has
 * it, else alone (why: the note). */
static void write_file(FILE *out, const struct file *f, const struct line *lines,
		       const struct source *src, const char *note, const char *found,
		       int check, uint32_t at, size_t ctx, const struct lp_value_type *t,
		       int64_t grand)
{
	char *chunk = strdup(f->chunk), self[64], num[16], pct[16];
	if (chunk)
		lp_text_clean(chunk);
	lp_text_value(self, sizeof(self), f->self, t->unit);
	lp_text_pct(pct, sizeof(pct), f->self, grand);
	fprintf(out, "\n== %s: self %s (%s)\n", chunk ? chunk : "?", pct, self);
	if (note)
		fprintf(out, "(%s)\n", note);
	if (found) {
		fputs("(source: ", out);
		put_source(out, found);
		fputs(")\n", out);
	}
	if (check != SOURCE_SAME) {
		fputc('(', out);
		put_source(out, found ? found : chunk ? chunk + 1 : "the file");
		if (check == SOURCE_NEWER)
			fputs(" is newer than the profile: if it changed since, the lines shown "
			      "may not be the ones profiled)\n", out);
		else
			fprintf(out, " does not match the profile: a function profiled starts at "
				"line %" PRIu32 ", %s: the lines shown are not the ones "
				"profiled)\n", at, check == SOURCE_PAST ? "past its end"
				: "which has no 'function'");
	}
	fprintf(out, "%7s %10s %7s %10s %6s%s\n", "%self", "self", "%total", "total", "line",
		src ? "   source" : "");
	const struct line *l = lines + f->first, *end = l + f->n;
	size_t past = 0;
	/* Line 0 is stripped bytecode's only line, and in a chunk with lines a main chunk's
	 * entry (its header, before its first line: a sample as it is called, the stack it
	 * grows there): said which, the second was called stripped. */
	if (l < end && l->line == 0)
		row(out, l++, t, grand, "-",
		    f->n > 1 ? "(line 0: the main chunk's entry, before its first line)"
			     : "(no line information: stripped bytecode)");
	if (!src) {
		for (; l < end; l++) {
			snprintf(num, sizeof(num), "%" PRIu32, l->line);
			row(out, l, t, grand, num, "");
		}
		free(chunk);
		return;
	}
	/* Runs of lines within ctx of a profiled one, "..." between runs. */
	size_t shown = 0; /* the last line number printed */
	for (; l < end; l++) {
		if (l->line > src->nlines) {
			snprintf(num, sizeof(num), "%" PRIu32, l->line);
			row(out, l, t, grand, num, "(past the end of the file)");
			past++;
			continue;
		}
		size_t from = l->line > ctx ? l->line - ctx : 1;
		if (from <= shown)
			from = shown + 1;
		else if (shown && from > shown + 1)
			fprintf(out, "%*s\n", 7 + 1 + 10 + 1 + 7 + 1 + 10 + 1 + 6, "...");
		for (size_t n = from; n < l->line; n++) {
			snprintf(num, sizeof(num), "%zu", n);
			row(out, NULL, t, grand, num, line_text(src, n - 1));
		}
		snprintf(num, sizeof(num), "%" PRIu32, l->line);
		row(out, l, t, grand, num, line_text(src, l->line - 1));
		shown = l->line;
		/* The context after it, up to the next profiled line. */
		size_t next = l + 1 < end ? l[1].line : SIZE_MAX;
		for (size_t n = shown + 1; n <= l->line + ctx && n < next && n <= src->nlines;
		     n++) {
			snprintf(num, sizeof(num), "%zu", n);
			row(out, NULL, t, grand, num, line_text(src, n - 1));
			shown = n;
		}
	}
	if (past) {
		fprintf(out, "(%zu line%s past the end of ", past, past == 1 ? "" : "s");
		put_source(out, found ? found : chunk ? chunk + 1 : "the file");
		fputs(": the file has changed since the profile?)\n", out);
	}
	free(chunk);
}

/* An exact memory profile (luaprof's exact mode, Tarantool's memprof): each event's stack
 * is its site alone, so a line's total is its self. */
static int exact_memory(const struct lp_profile_meta *m)
{
	return m && m->event && !strcmp(m->event, "memory");
}

int lp_render_annotate(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
		       char *err, size_t errlen)
{
	unsigned v = o ? o->value : 0;
	int rc = lp_render_check_value(p, v, err, errlen);
	if (rc)
		return rc;
	size_t limit = o && o->limit ? o->limit : DEFAULT_LIMIT;
	struct file *files;
	struct line *lines;
	size_t nfiles;
	int64_t outside;
	int traced;
	if (aggregate(p, v, &files, &nfiles, &lines, &outside, &traced)) {
		lp_render_err(err, errlen, "annotate: out of memory");
		return -ENOMEM;
	}
	const struct lp_value_type *t = lp_profile_value_type(p, v);
	int64_t grand = lp_profile_total(p, v);
	lp_text_header(out, lp_profile_cmeta(p), t, grand);
	const char *held = grand ? NULL : lp_text_nothing_held(lp_profile_cmeta(p), t);
	if (held)
		fprintf(out, "\n%s\n", held);
	else if (!nfiles)
		fputs("\nNo Lua line in the profile.\n", out);
	else if (exact_memory(lp_profile_cmeta(p)))
		fputs("self: at the line itself, with the builtins and C code it calls; total: "
		      "the same, as an exact memory profile keeps each allocation's line and "
		      "not its callers (--sample records call stacks)\n", out);
	else
		fputs("self: at the line itself, with the builtins and C code it calls; total: "
		      "with the Lua functions it calls too\n", out);
	if (traced)
		fputs("T: JIT traces that start at the line, charged there wherever they ran "
		      "(luajit -joff, or a sampled profile's stacks, place their lines)\n", out);
	size_t shown = nfiles < limit ? nfiles : limit, missing = 0;
	for (size_t i = 0; i < shown && !rc; i++) {
		const struct file *f = &files[i];
		struct source src;
		char note[512], *found = NULL;
		int have = 0;
		if (f->chunk[0] != '@') {
			snprintf(note, sizeof(note), "no source shown: the chunk was not loaded "
				 "from a file");
		} else if (!f->chunk[1]) {
			snprintf(note, sizeof(note), "no source shown: the chunk names no file");
		} else {
			int e = source_find(f->chunk + 1, o ? o->source_dir : NULL,
					    lines[f->first + f->n - 1].line, &src, &found);
			if (e == ENOMEM) {
				rc = -ENOMEM;
				lp_render_err(err, errlen, "annotate: out of memory");
				break;
			}
			missing += e == ENOENT;
			if (e)
				snprintf(note, sizeof(note), "no source shown: %s: %s%s%s%s",
					 f->chunk + 1, e == EINVAL ? "not a regular file"
					 : e == EFBIG ? "larger than 16 MiB" : strerror(e),
					 o && o->source_dir ? " (nor under " : "",
					 o && o->source_dir ? o->source_dir : "",
					 o && o->source_dir ? ")" : "");
			have = !e;
		}
		if (!have)
			lp_text_clean(note);
		/* A file edited since: its lines silently shifted under the counts. */
		uint32_t at = 0;
		int check = have ? source_check(p, f->chunk, &src, &at) : SOURCE_SAME;
		write_file(out, f, lines, have ? &src : NULL, have ? NULL : note, found, check,
			   at, o && o->context ? (size_t)(o->context - 1) : DEFAULT_CONTEXT, t,
			   grand);
		if (have)
			source_free(&src);
		free(found);
	}
	if (!rc && nfiles > shown)
		fprintf(out, "\n... %zu more file%s omitted (-n to show more)\n", nfiles - shown,
			nfiles - shown == 1 ? "" : "s");
	/* Files not found: the profile was made in another directory, or on another machine. */
	if (!rc && missing && !(o && o->source_dir))
		fprintf(out, "\n%zu source file%s not found here: --source-dir DIR looks for %s "
			     "under DIR\n", missing, missing == 1 ? "" : "s",
			missing == 1 ? "it" : "them");
	if (!rc && outside) {
		char ov[64], pct[16];
		lp_text_value(ov, sizeof(ov), outside, t->unit);
		lp_text_pct(pct, sizeof(pct), outside, grand);
		fprintf(out, "\n%s (%s) at no Lua line: C code or the VM with no Lua caller\n",
			pct, ov);
	}
	free(files);
	free(lines);
	if (rc)
		return rc;
	return lp_render_flushed(out, "annotate", err, errlen);
}
