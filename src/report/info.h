/*
** What a profile file holds, as text: its kind, format, completeness and counts, and every
** pair of the meta the recording agent wrote (`luaprof report -f info`).
**
** One "key: value" line each, for people and for scripts (awk -F': '). Meta keys come
** prefixed "meta." in stream order; values are printed as written, with control characters
** escaped (\n, \t, \\, \xNN) so that each fact stays on its line.
*/
#ifndef LP_INFO_H
#define LP_INFO_H

#include <stdio.h>

#include "report/load.h"

/* `source` names the file. Returns 0 or -errno on a write error. */
int lp_info_report(const struct lp_loaded *l, const char *source, FILE *out);

#endif
