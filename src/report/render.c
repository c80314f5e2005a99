/*
** What the renderers share: their one-line error message, the check of the value column
** asked for, and the check that everything written reached the output.
*/
#include "report/render.h"

#include <errno.h>
#include <stdarg.h>
#include <string.h>

void lp_render_err(char *err, size_t errlen, const char *fmt, ...)
{
	if (!err || !errlen)
		return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

int lp_render_check_value(const struct lp_profile *p, unsigned v, char *err, size_t errlen)
{
	if (v < lp_profile_nvalues(p))
		return 0;
	lp_render_err(err, errlen, "value column %u out of range (the profile has %u)", v,
		      lp_profile_nvalues(p));
	return -EINVAL;
}

int lp_render_flushed(FILE *out, const char *format, char *err, size_t errlen)
{
	if (!fflush(out) && !ferror(out))
		return 0;
	int e = errno ? errno : EIO;
	lp_render_err(err, errlen, "%s: write error: %s", format, strerror(e));
	return -e;
}
