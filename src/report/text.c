/*
** What the plain-text reports share: value formatting, the header, terminal-safe labels.
*/
#include "report/text.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "luaprof/format.h"
#include "util/size.h"

void lp_text_value(char *buf, size_t len, int64_t v, const char *unit)
{
	static const char *const times[] = { "ns", "us", "ms", "s" };
	double x = (double)v, ax = x < 0 ? -x : x;
	unsigned i = 0;
	if (unit && strcmp(unit, "bytes") == 0) {
		lp_size_format(buf, len, v, 0);
	} else if (unit && strcmp(unit, "nanoseconds") == 0) {
		if (ax < 1000) {
			snprintf(buf, len, "%" PRId64 " ns", v);
			return;
		}
		while (ax >= 1000 && i + 1 < sizeof(times) / sizeof(times[0])) {
			ax /= 1000;
			x /= 1000;
			i++;
		}
		snprintf(buf, len, "%.2f %s", x, times[i]);
	} else {
		snprintf(buf, len, "%" PRId64, v);
	}
}

void lp_text_pct(char *buf, size_t len, int64_t part, int64_t whole)
{
	snprintf(buf, len, "%.2f%%", whole > 0 ? 100.0 * (double)part / (double)whole : 0.0);
	if (whole > 0 && part > 0 && !strcmp(buf, "0.00%"))
		snprintf(buf, len, "<0.01%%");
	else if (whole > 0 && part > 0 && part < whole && !strcmp(buf, "100.00%"))
		snprintf(buf, len, ">99.99%%");
}

void lp_text_share(char *buf, size_t len, uint64_t part, uint64_t whole)
{
	/* A VM state with 1 sample in 3000 read "GC 0.0%", taken for one without any. */
	snprintf(buf, len, "%.1f%%", whole ? 100.0 * (double)part / (double)whole : 0.0);
	if (part && !strcmp(buf, "0.0%"))
		snprintf(buf, len, "<0.1%%");
	else if (part < whole && !strcmp(buf, "100.0%"))
		snprintf(buf, len, ">99.9%%");
}

void lp_text_header(FILE *out, const struct lp_profile_meta *m, const struct lp_value_type *t,
		    int64_t grand)
{
	char tot[64];
	lp_text_value(tot, sizeof(tot), grand, t->unit);
	int cpu = m->event && strcmp(m->event, "cpu") == 0;
	/* A --clock wall profile's samples are elapsed time (sleeps, waits): said so, as the
	 * default CPU clock's are not. */
	fprintf(out, "Source: %s  Total %s: %s  %s: %" PRIu64, m->source ? m->source : "-",
		t->type, tot,
		cpu || (m->event && strstr(m->event, "sampled")) ? "Samples" : "Events",
		m->samples);
	if (!m->drops_unrecorded || m->dropped)
		fprintf(out, "  Dropped: %" PRIu64, m->dropped);
	fprintf(out, "%s%s\n", cpu && m->wall_clock ? "  Clock: wall" : "",
		m->truncated ? "  (truncated)" : "");
	if (m->cut)
		fprintf(out, "Stacks cut short: %" PRIu64 " (their outermost frames are missing)\n",
			m->cut);
	if (!cpu)
		return;
	static const char *const names[LP_VMST__MAX] = {
		"INTERP", "LFUNC", "FFUNC", "CFUNC", "GC", "EXIT", "RECORD", "OPT", "ASM", "TRACE"
	};
	uint64_t sum = 0;
	for (unsigned i = 0; i < LP_VMST__MAX; i++)
		sum += m->vmstate[i];
	if (!sum)
		return;
	fputs("VM states:", out);
	for (unsigned i = 0; i < LP_VMST__MAX; i++) {
		char pct[16];
		if (!m->vmstate[i])
			continue;
		lp_text_share(pct, sizeof(pct), m->vmstate[i], sum);
		fprintf(out, " %s %s", names[i], pct);
	}
	putc('\n', out);
}

void lp_text_clean(char *s)
{
	for (char *c = s; *c; c++)
		if ((unsigned char)*c < 0x20 || (unsigned char)*c == 0x7f)
			*c = '?';
}

char *lp_text_label(const struct lp_frame *f)
{
	int n = lp_frame_label(f, NULL, 0);
	if (n < 0)
		n = 0;
	char *s = malloc((size_t)n + 1);
	if (!s)
		return NULL;
	lp_frame_label(f, s, (size_t)n + 1);
	lp_text_clean(s);
	return s;
}

const char *lp_text_nothing_held(const struct lp_profile_meta *m, const struct lp_value_type *t)
{
	if (!m->samples || !t || !t->type || strncmp(t->type, "inuse_", 6))
		return NULL;
	return m->event && !strcmp(m->event, "memory (sampled)")
		       ? "Nothing still held: every sampled allocation was freed before the "
			 "profile stopped."
		       : "Nothing still held: every block allocated in the profile was freed "
			 "before it stopped.";
}
