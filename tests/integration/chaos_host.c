/*
** C host for chaos_sysprof.sh: lua_close while the profiler samples the chaos workload,
** through the C API, several times in one process (agent_host.c does it for a plain loop).
** Each cycle: a fresh state; luaprof_sysprof_start in CALLGRAPH mode on the wall clock at
** INTERVAL_NS (100000 = the highest rate) into OUT_DIR/host-N.bin through a file writer;
** chaos_sysprof.lua run for SECS seconds, ending by returning (even cycles) or by an error
** raised deep inside a coroutine (odd cycles), the profile still running; lua_close. Then:
**   - on_stop ran exactly once, at lua_close, and the profile is stopped;
**   - the file parses completely (epilogue and extension) and holds the samples counted,
**     minus at most the dropped ones (the counters stay readable after the stop);
**   - at least MIN_PER_MILLE per mille of SECS / interval samples, under 5% dropped, and
**     samples in LFUNC, TRACE, GC and CFUNC or FFUNC;
**   - the next cycle's start works.
** Usage: chaos_host AGENT_DIR SCRIPT OUT_DIR CYCLES SECS INTERVAL_NS MIN_PER_MILLE
** Prints the script's "chaos:" line and one "host cycle N: ..." line per cycle, "FAIL: ..."
** lines on failure; exit status 1 if any.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "luaprof.h"
#include "stream/input.h"
#include "stream/parse.h"

static int fails;

#define CHECK(cond, ...)                                     \
	do {                                                 \
		if (!(cond)) {                               \
			fails++;                             \
			printf("FAIL: line %d: ", __LINE__); \
			printf(__VA_ARGS__);                 \
			putchar('\n');                       \
		}                                            \
	} while (0)

static struct {
	int fd;
	int on_stop_calls;
	int write_errno;
} out;

static size_t file_writer(const void **data, size_t len, void *ctx)
{
	const uint8_t *p = *data;
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(out.fd, p + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			out.write_errno = errno;
			return done;
		}
		done += (size_t)n;
	}
	return done;
}

static int file_on_stop(void *ctx, uint8_t *buf)
{
	out.on_stop_calls++;
	int rc = out.fd >= 0 ? close(out.fd) : 0;
	out.fd = -1;
	return rc;
}

static uint8_t stream_buf[4u << 20];

static void cycle(int k, const char *agent_dir, const char *script, const char *dir,
		  double secs, uint64_t interval_ns, unsigned min_per_mille)
{
	char path[4096], code[4352];
	snprintf(path, sizeof(path), "%s/host-%d.bin", dir, k);
	out.fd = open(path, O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
	CHECK(out.fd >= 0, "cannot create %s: %s", path, strerror(errno));
	if (out.fd < 0)
		return;
	int calls = out.on_stop_calls;
	const char *end = k % 2 ? "error" : "return";
	char s[32];
	snprintf(s, sizeof(s), "%g", secs);
	setenv("CHAOS_SECONDS", s, 1);
	setenv("CHAOS_END", end, 1);

	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	struct luaprof_sysprof_options o;
	memset(&o, 0, sizeof(o));
	o.mode = LUAPROF_SYSPROF_CALLGRAPH;
	o.interval_ns = interval_ns;
	o.clock = LUAPROF_CLOCK_WALL;
	o.buf = stream_buf;
	o.len = sizeof(stream_buf);
	int rc = luaprof_sysprof_start(L, &o);
	CHECK(rc == 0, "cycle %d: start: %d %s", k, rc, luaprof_sysprof_error());
	if (rc != 0) {
		lua_close(L);
		return;
	}
	snprintf(code, sizeof(code), "package.cpath = '%s/?.so;' .. package.cpath", agent_dir);
	CHECK(luaL_dostring(L, code) == 0, "cpath: %s", lua_tostring(L, -1));
	rc = luaL_dofile(L, script);
	fflush(stdout);
	if (k % 2) {
		const char *msg = rc ? lua_tostring(L, -1) : NULL;
		CHECK(msg && strstr(msg, "chaos: ended by an error"),
		      "cycle %d: the script should end by its error, got %d %s", k, rc,
		      msg ? msg : "");
	} else {
		CHECK(rc == 0, "cycle %d: the script failed: %s", k, lua_tostring(L, -1));
	}
	CHECK(out.on_stop_calls == calls, "cycle %d: stopped before lua_close", k);
	lua_close(L); /* while running */
	CHECK(out.on_stop_calls == calls + 1, "cycle %d: on_stop at lua_close: %d calls", k,
	      out.on_stop_calls - calls);
	CHECK(out.write_errno == 0, "cycle %d: write: %s", k, strerror(out.write_errno));

	struct luaprof_sysprof_counters c;
	struct luaprof_sysprof_stats st;
	luaprof_sysprof_report(&c);
	luaprof_sysprof_stats(&st);
	CHECK(st.stopped_ns != 0, "cycle %d: still running after lua_close", k);

	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct lp_input in;
	struct lp_parse_stats ps;
	memset(&ps, 0, sizeof(ps));
	int status = -1;
	char msg[1024] = "";
	if (fd >= 0 && lp_input_open_fd(&in, fd, path) == LP_OK) {
		struct lp_parse_handlers h = { .ctx = NULL };
		status = lp_parse_stream(&in, &h, &ps);
		lp_input_message(&in, msg, sizeof(msg));
		lp_input_close(&in);
	}
	if (fd >= 0)
		close(fd);
	CHECK(status == LP_OK && ps.complete && ps.extension,
	      "cycle %d: %s does not parse completely: status %d, complete %d, extension %d: %s",
	      k, path, status, ps.complete, ps.extension, msg);
	CHECK(ps.events <= c.samples && c.samples - ps.events <= st.dropped,
	      "cycle %d: %llu samples in the file, %llu counted, %llu dropped", k,
	      (unsigned long long)ps.events, (unsigned long long)c.samples,
	      (unsigned long long)st.dropped);
	double dur = (double)(st.stopped_ns - st.started_ns) / 1e9;
	double asked = secs * 1e9 / (double)interval_ns;
	/* Every tick is a sample, skipped by the agent's pacing, or merged by the kernel. */
	uint64_t ticks = c.samples + st.paced + st.overruns;
	CHECK((double)ticks * 1000 >= asked * min_per_mille,
	      "cycle %d: %llu samples + %llu paced + %llu overruns, want %u per mille of %.0f",
	      k, (unsigned long long)c.samples, (unsigned long long)st.paced,
	      (unsigned long long)st.overruns, min_per_mille, asked);
	CHECK(st.handler_ns <= (st.stopped_ns - st.started_ns) * 35 / 100,
	      "cycle %d: the handler took %.2f s of %.2f s", k, (double)st.handler_ns / 1e9,
	      dur);
	CHECK(st.dropped * 20 < c.samples + st.dropped, "cycle %d: %llu of %llu dropped", k,
	      (unsigned long long)st.dropped, (unsigned long long)(c.samples + st.dropped));
	CHECK(c.vmst_lfunc && c.vmst_trace && c.vmst_gc && (c.vmst_cfunc || c.vmst_ffunc),
	      "cycle %d: VM states without samples: LFUNC %llu TRACE %llu GC %llu CFUNC %llu "
	      "FFUNC %llu", k, (unsigned long long)c.vmst_lfunc,
	      (unsigned long long)c.vmst_trace, (unsigned long long)c.vmst_gc,
	      (unsigned long long)c.vmst_cfunc, (unsigned long long)c.vmst_ffunc);
	printf("host cycle %d: end=%s samples=%llu file=%llu dropped=%llu overruns=%llu "
	       "paced=%llu truncated=%llu handler=%.2f duration=%.2f LFUNC=%llu TRACE=%llu GC=%llu "
	       "CFUNC=%llu FFUNC=%llu\n",
	       k, end, (unsigned long long)c.samples, (unsigned long long)ps.events,
	       (unsigned long long)st.dropped, (unsigned long long)st.overruns,
	       (unsigned long long)st.paced, (unsigned long long)st.truncated, (double)st.handler_ns / 1e9, dur,
	       (unsigned long long)c.vmst_lfunc, (unsigned long long)c.vmst_trace,
	       (unsigned long long)c.vmst_gc, (unsigned long long)c.vmst_cfunc,
	       (unsigned long long)c.vmst_ffunc);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	if (argc < 8) {
		fprintf(stderr, "usage: chaos_host AGENT_DIR SCRIPT OUT_DIR CYCLES SECS "
				"INTERVAL_NS MIN_PER_MILLE\n");
		return 2;
	}
	int cycles = atoi(argv[4]);
	double secs = atof(argv[5]);
	uint64_t interval_ns = strtoull(argv[6], NULL, 10);
	unsigned min_per_mille = (unsigned)atoi(argv[7]);
	CHECK(luaprof_sysprof_set_writer(file_writer) == 0, "set_writer");
	CHECK(luaprof_sysprof_set_on_stop(file_on_stop) == 0, "set_on_stop");
	for (int k = 0; k < cycles; k++)
		cycle(k, argv[1], argv[2], argv[3], secs, interval_ns, min_per_mille);
	return fails ? 1 : 0;
}
