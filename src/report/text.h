/*
** What the plain-text reports (top, annotate) share: values scaled for reading, shares of
** a total, the header naming the profile, and labels made safe for a terminal.
*/
#ifndef LP_REPORT_TEXT_H
#define LP_REPORT_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "report/profile.h"

/* v for reading: bytes as KiB, MiB..., nanoseconds as us, ms, s; other units as integers. */
void lp_text_value(char *buf, size_t len, int64_t v, const char *unit);

/* part as a percentage of whole with two decimals, "12.34%" in buf ("0.00%" when whole is
 * not positive); as lp_text_share, a share with something in it never reads "0.00%"
 * ("<0.01%"), nor one short of whole "100.00%" (">99.99%"). At most 7 characters for a
 * part between 0 and whole. */
void lp_text_pct(char *buf, size_t len, int64_t part, int64_t whole);

/* part's share of whole as "12.3%" in buf; a share with something in it never reads
 * "0.0%" ("<0.1%"), nor one short of whole "100.0%" (">99.9%"). */
void lp_text_share(char *buf, size_t len, uint64_t part, uint64_t whole);

/* "Source: ...  Total <type>: ...  Samples|Events: N  Dropped: N" (no Dropped when the
 * stream keeps no count of it), and for a CPU profile its share of samples by VM state. */
void lp_text_header(FILE *out, const struct lp_profile_meta *m, const struct lp_value_type *t,
		    int64_t grand);

/* What an empty in-use view (t inuse_*) of a memory profile with samples or events says
 * instead of "no samples": that everything was freed before the profile stopped (one
 * sentence, no final newline); NULL for any other empty view. */
const char *lp_text_nothing_held(const struct lp_profile_meta *m, const struct lp_value_type *t);

/* Replaces terminal control bytes (below 0x20, and 0x7f) in s by '?'. */
void lp_text_clean(char *s);

/* f's display label (lp_frame_label), cleaned; NULL on ENOMEM. */
char *lp_text_label(const struct lp_frame *f);

#endif
