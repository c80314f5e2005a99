/*
** What a profile file holds, as "key: value" lines.
*/
#include "report/info.h"
#include "report/text.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

static void put_escaped(FILE *out, const char *s)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '\n')
			fputs("\\n", out);
		else if (ch == '\t')
			fputs("\\t", out);
		else if (ch == '\\')
			fputs("\\\\", out);
		else if (ch < 0x20 || ch == 0x7f)
			fprintf(out, "\\x%02x", ch);
		else
			fputc(ch, out);
	}
}

static const char *kind_of(const struct lp_loaded *l)
{
	if (l->kind == LP_STREAM_SYSPROF)
		return "cpu (sysprof samples)";
	if (l->kind == LP_STREAM_MEMPROF)
		return l->sampled ? "memory (sampled allocation stacks)"
				  : "memory (every allocation event)";
	return "unknown (no profile section)";
}

int lp_info_report(const struct lp_loaded *l, const char *source, FILE *out)
{
	fputs("file: ", out);
	put_escaped(out, source);
	fprintf(out, "\nkind: %s\n", kind_of(l));
	if (l->kind)
		fprintf(out, "format: %s v%u, %s\n", l->kind == LP_STREAM_SYSPROF ? "ljp" : "ljm",
			l->version, l->stats.extension ? "luaprof extension" : "no extension");
	if (l->stats.complete)
		fputs("complete: yes\n", out);
	else
		fprintf(out, "complete: no (truncated after %" PRIu64 " byte%s)\n", l->stats.bytes,
			l->stats.bytes == 1 ? "" : "s");
	fprintf(out, "bytes: %" PRIu64 "\nsymbols: %" PRIu64 "\n", l->stats.bytes,
		l->stats.symbols);
	if (l->kind == LP_STREAM_SYSPROF) {
		fprintf(out, "samples: %" PRIu64 "\n", l->stats.events);
		const uint64_t *vm = lp_sysprof_vmstates(l->sys);
		const char *sep = "vmstates: ";
		for (unsigned i = 0; l->stats.events && lp_vmstate_name(i); i++) {
			if (!vm[i])
				continue;
			char pct[16];
			lp_text_share(pct, sizeof(pct), vm[i], l->stats.events);
			fprintf(out, "%s%s %" PRIu64 " (%s)", sep, lp_vmstate_name(i), vm[i], pct);
			sep = ", ";
		}
		if (*sep == ',')
			fputc('\n', out);
	} else if (l->kind == LP_STREAM_MEMPROF) {
		if (l->sampled)
			fprintf(out, "samples: %llu\n",
				(unsigned long long)lp_sysprof_nasamples(l->msamp));
		else
			fprintf(out, "events: %" PRIu64 "\n", l->stats.events);
	}
	for (size_t i = 0; i < l->nmeta; i++) {
		fputs("meta.", out);
		put_escaped(out, l->meta[i].key);
		fputs(": ", out);
		/* The builtins' name table (a few KiB) is the report's business, not a fact. */
		if (!strcmp(l->meta[i].key, "ffnames")) {
			const char *v = l->meta[i].value;
			size_t n = *v ? 1 : 0;
			for (; *v; v++)
				n += *v == ' ';
			fprintf(out, "(%zu builtin name%s)", n, n == 1 ? "" : "s");
		} else {
			put_escaped(out, l->meta[i].value);
		}
		fputc('\n', out);
	}
	return ferror(out) ? -(errno ? errno : EIO) : 0;
}
