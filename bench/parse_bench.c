/*
** Parser-only throughput: reads a profile stream through the fd path (lp_input_open_fd) and
** lp_parse_stream, with callbacks that only count, and prints MB/s and peak RSS.
**
**   parse_bench [-r REPEAT] FILE        FILE - reads stdin (e.g. a pipe)
**
** One line per run: "parse_bench: FILE: BYTES bytes, EVENTS events, SYMBOLS symbols,
** SECONDS s, MBPS MB/s" (MB = 10^6 bytes), then the process's peak RSS. The exit status is
** non-zero when the stream does not parse completely.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "stream/input.h"
#include "stream/parse.h"

/* What the callbacks accumulate, so that the compiler cannot drop the work. */
struct tally {
	uint64_t syms, bytes_named, events[4], mem_bytes, samples[LP_VMST__MAX], frames;
};

static int on_lua(void *ctx, uint64_t addr, const char *chunk, size_t len, uint64_t line)
{
	struct tally *t = ctx;
	t->syms++;
	t->bytes_named += len;
	return 0;
}

static int on_cfunc(void *ctx, uint64_t addr, const char *name, size_t len)
{
	struct tally *t = ctx;
	t->syms++;
	t->bytes_named += len;
	return 0;
}

static int on_trace(void *ctx, uint64_t traceno, uint64_t addr, uint64_t line)
{
	((struct tally *)ctx)->syms++;
	return 0;
}

static int on_mem(void *ctx, const struct lp_mem_event *ev)
{
	struct tally *t = ctx;
	t->events[ev->event]++;
	t->mem_bytes += ev->nsize - ev->osize;
	return 0;
}

static int on_sys(void *ctx, const struct lp_sys_sample *s)
{
	struct tally *t = ctx;
	t->samples[s->vmstate]++;
	t->frames += s->nlua + s->nhost;
	return 0;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int run(const char *path)
{
	int fd = strcmp(path, "-") ? open(path, O_RDONLY) : 0;
	if (fd < 0) {
		fprintf(stderr, "parse_bench: %s: %s\n", path, strerror(errno));
		return 1;
	}
	struct tally t;
	memset(&t, 0, sizeof(t));
	struct lp_parse_handlers h = {
		.ctx = &t, .sym_lua = on_lua, .sym_cfunc = on_cfunc, .sym_trace = on_trace,
		.mem_event = on_mem, .sys_sample = on_sys,
	};
	struct lp_parse_stats st;
	struct lp_input in;
	double t0 = now();
	int rc = lp_input_open_fd(&in, fd, path);
	if (rc == LP_OK)
		rc = lp_parse_stream(&in, &h, &st);
	double secs = now() - t0;
	if (rc != LP_OK) {
		char msg[700];
		lp_input_message(&in, msg, sizeof(msg));
		fprintf(stderr, "parse_bench: %s\n", msg);
	}
	lp_input_close(&in);
	if (fd != 0)
		close(fd);
	if (rc != LP_OK)
		return 1;
	printf("parse_bench: %s: %llu bytes, %llu events, %llu symbols, %.3f s, %.1f MB/s\n",
	       path, (unsigned long long)st.bytes, (unsigned long long)st.events,
	       (unsigned long long)st.symbols, secs, (double)st.bytes / 1e6 / secs);
	if (st.kind == LP_STREAM_MEMPROF)
		printf("  alloc %llu, free %llu, realloc %llu\n",
		       (unsigned long long)t.events[LP_AEVENT_ALLOC],
		       (unsigned long long)t.events[LP_AEVENT_FREE],
		       (unsigned long long)t.events[LP_AEVENT_REALLOC]);
	else {
		printf(" ");
		for (unsigned i = 0; i < LP_VMST__MAX; i++)
			printf(" %s %llu", lp_vmstate_name(i), (unsigned long long)t.samples[i]);
		printf("; %.1f frames per sample\n",
		       st.events ? (double)t.frames / (double)st.events : 0.0);
	}
	return 0;
}

int main(int argc, char **argv)
{
	int repeat = 1, i = 1;
	if (i + 1 < argc && !strcmp(argv[i], "-r")) {
		repeat = atoi(argv[i + 1]);
		i += 2;
	}
	if (i + 1 != argc || repeat < 1) {
		fprintf(stderr, "usage: parse_bench [-r REPEAT] FILE\n");
		return 2;
	}
	for (int r = 0; r < repeat; r++)
		if (run(argv[i]))
			return 1;
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("parse_bench: peak RSS %.1f MiB\n", (double)ru.ru_maxrss / 1024.0);
	return 0;
}
