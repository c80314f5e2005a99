/*
** Collapsed ("folded") stacks: one "root;...;leaf count" line per distinct stack (as
** written: two stacks whose frames differ but read the same, such as two functions of one
** chunk at one line, are one line).
**
** This is flamegraph.pl's input and Pyroscope's "folded" format. Lines are sorted so the
** output is deterministic; ';' inside a frame label would split the frame, and a
** newline would split the line, so both are replaced (by ':' and ' '), as is every other
** control character (by ' '). Labels are written whole (a chunk name may be 4 KiB), and as
** UTF-8: bytes that are none become U+FFFD, as in pprof and speedscope. Their readers need
** it: flamegraph.pl dies on "Malformed UTF-8", and copies control characters into its SVG,
** which no XML parser then reads; inferno reads its input as a Rust String and refuses the
** whole file. (LuaJIT cuts a string chunk's name after 45 bytes, inside a character of a
** non-ASCII first line.)
*/
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "report/render.h"
#include "util/utf8.h"

struct line {
	char *text;
	int64_t value;
};

static int line_cmp(const void *a, const void *b)
{
	return strcmp(((const struct line *)a)->text, ((const struct line *)b)->text);
}

/* Appends ";" (unless first) and the frame's label with separators neutralised. */
static int append_label(char **buf, size_t *len, size_t *cap, const struct lp_frame *f, int sep)
{
	char small[512], *tmp = small;
	int n = lp_frame_label(f, small, sizeof(small));
	if (n < 0)
		return -EINVAL;
	if ((size_t)n >= sizeof(small)) {
		if (!(tmp = malloc((size_t)n + 1)))
			return -ENOMEM;
		lp_frame_label(f, tmp, (size_t)n + 1);
	}
	size_t k = (size_t)n;
	/* Each byte grows to at most the 3 of U+FFFD. */
	if (*len + 3 * k + 2 > *cap) {
		size_t ncap = *cap ? *cap * 2 : 256;
		while (ncap < *len + 3 * k + 2)
			ncap *= 2;
		char *p = realloc(*buf, ncap);
		if (!p) {
			if (tmp != small)
				free(tmp);
			return -ENOMEM;
		}
		*buf = p;
		*cap = ncap;
	}
	char *o = *buf + *len;
	if (sep)
		*o++ = ';';
	const unsigned char *u = (const unsigned char *)tmp;
	for (size_t i = 0; i < k;) {
		size_t bad = 0, sl = lp_utf8_seq(u + i, k - i, &bad, NULL);
		if (!sl) {
			memcpy(o, LP_UTF8_REPLACEMENT, 3);
			o += 3;
			i += bad;
		} else if (sl == 1) {
			unsigned char ch = u[i++];
			*o++ = ch == ';' ? ':' : ch < 0x20 || ch == 0x7f ? ' ' : (char)ch;
		} else {
			memcpy(o, u + i, sl);
			o += sl;
			i += sl;
		}
	}
	*o = '\0';
	*len = (size_t)(o - *buf);
	if (tmp != small)
		free(tmp);
	return 0;
}

int lp_render_collapsed(const struct lp_profile *p, const struct lp_render_opts *o, FILE *out,
			char *err, size_t errlen)
{
	size_t n = lp_profile_nstacks(p), nl = 0;
	struct line *lines = calloc(n + 1, sizeof(*lines));
	int rc = 0;
	if (!lines) {
		rc = -ENOMEM;
		goto done;
	}
	for (size_t i = 0; i < n; i++) {
		const uint32_t *fr;
		size_t depth;
		const int64_t *v;
		lp_profile_stack(p, i, &fr, &depth, &v);
		if (v[o->value] == 0 || depth == 0)
			continue;
		char *buf = NULL;
		size_t len = 0, cap = 0;
		for (size_t d = 0; d < depth; d++) {
			if ((rc = append_label(&buf, &len, &cap, lp_profile_frame(p, fr[d]), d > 0)) != 0)
				break;
		}
		if (rc) {
			free(buf);
			goto done;
		}
		lines[nl].text = buf;
		lines[nl++].value = v[o->value];
	}
	qsort(lines, nl, sizeof(*lines), line_cmp);
	for (size_t i = 0; i < nl; i++) {
		int64_t v = lines[i].value;
		while (i + 1 < nl && !strcmp(lines[i].text, lines[i + 1].text))
			v += lines[++i].value;
		fprintf(out, "%s %" PRId64 "\n", lines[i].text, v);
	}
	if (fflush(out) || ferror(out))
		rc = -(errno ? errno : EIO);
done:
	for (size_t i = 0; i < nl; i++)
		free(lines[i].text);
	free(lines);
	if (rc)
		snprintf(err, errlen, "cannot write collapsed stacks: %s", strerror(-rc));
	return rc;
}
