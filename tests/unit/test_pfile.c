/*
** Unit tests of the profile file of the Lua API (src/agent/pfile.c): the writer thread's
** double buffer keeps the stream whole and in order, an existing file keeps its contents
** until the first write, a failed write surfaces at the next call and at close, and a
** forked child writes none of the parent's files. A raw-event stream is written encoded,
** threaded or not. A write(2) that accepts nothing is an error, not a retry forever.
*/
#include <unistd.h> /* before the rename below: the real write(2) stays declared */

/* pfile.c's write(2): a test can make it accept nothing (returning 0, which a file system
 * may do and /dev/full does not: it fails). After STALL_LIMIT such calls in a row it fails
 * with ELOOP, so that a writer retrying forever is seen as that errno, not a hung test. */
#define STALL_LIMIT 1000
static int write_stalls, stalls_in_a_row;
static ssize_t test_write(int fd, const void *p, size_t n);
#define write test_write
#include "../../src/agent/pfile.c"
#undef write
#include "../../src/agent/rawev.c"

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "stream/wbuf.h"
#include "unit.h"

/* termstop.c, told of the files open makes: nothing to do here. */
void agent_termstop_newfile(const char *path)
{
	(void)path;
}

static char dir[] = "/tmp/test_pfile.XXXXXX";

static const char *path_of(const char *name)
{
	static char p[256];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return p;
}

/* The whole file, in a malloc'ed buffer (NULL if it cannot be read). */
static uint8_t *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	long n = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	uint8_t *b = malloc(n > 0 ? (size_t)n : 1);
	*len = b ? fread(b, 1, (size_t)n, fp) : 0;
	fclose(fp);
	return b;
}

static uint8_t byte_at(size_t i)
{
	return (uint8_t)(i * 2654435761u >> 13);
}

/* Writes len pattern bytes through a wbuf on f, as a profiler does, and closes f. */
static int stream_through(struct agent_pfile *f, size_t len, int *flags)
{
	size_t cap;
	uint8_t *buf = agent_pfile_buf(f, &cap);
	struct lp_wbuf w;
	lp_wbuf_init(&w, buf, cap, agent_pfile_write, f);
	uint8_t chunk[1000];
	for (size_t i = 0; i < len; i += sizeof(chunk)) {
		size_t k = len - i < sizeof(chunk) ? len - i : sizeof(chunk);
		for (size_t j = 0; j < k; j++)
			chunk[j] = byte_at(i + j);
		lp_wbuf_bytes(&w, chunk, k);
	}
	lp_wbuf_flush(&w);
	*flags = (int)w.flags;
	return agent_pfile_close(f, buf);
}

/* The file is skip zero bytes, then len pattern bytes. */
static void check_pattern(const char *path, size_t skip, size_t len)
{
	size_t n = 0;
	uint8_t *b = slurp(path, &n);
	CHECK(b != NULL);
	CHECK_EQ(n, skip + len);
	size_t bad = 0;
	for (size_t i = 0; b && i < skip && i < n; i++)
		bad += b[i] != 0;
	for (size_t i = 0; b && i < len && skip + i < n; i++)
		bad += b[skip + i] != byte_at(i);
	CHECK_EQ(bad, 0);
	free(b);
}

static void test_threaded_stream_whole_and_in_order(void)
{
	int created = 0, flags = -1;
	struct agent_pfile *f = agent_pfile_open(path_of("t.bin"), 1, &created);
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK_EQ(created, 1);
	CHECK_EQ(f->threaded, 1);
	size_t half;
	CHECK(agent_pfile_buf(f, &half) == f->buf);
	CHECK_EQ(half, sizeof(f->buf) / 2);
	/* The writer hands back the half the thread is not writing. */
	const void *data = f->buf;
	memset(f->buf, 0, 2 * half);
	CHECK_EQ(agent_pfile_write(&data, 4, f), 4);
	CHECK(data == f->buf + half);
	CHECK_EQ(agent_pfile_write(&data, 4, f), 4);
	CHECK(data == f->buf);
	/* Seven halves and a bit: every hand-over, both halves several times, a short tail
	 * (after the 8 zero bytes above). */
	size_t len = 7 * half + 12345;
	CHECK_EQ(stream_through(f, len, &flags), 0);
	CHECK_EQ(flags, 0);
	check_pattern(path_of("t.bin"), 8, len);
}

/* A refused start's file: removed at close when open made it, threaded or not; one that
 * was there is left as it was; and one put at the path since is not open's to remove. */
static void test_refused_start(void)
{
	for (int threaded = 0; threaded < 2; threaded++) {
		int created = 0;
		unlink(path_of("ref.bin"));
		struct agent_pfile *f = agent_pfile_open(path_of("ref.bin"), threaded, &created);
		CHECK(f != NULL && created);
		agent_pfile_refused(f);
		CHECK_EQ(agent_pfile_close(f, NULL), 0);
		CHECK(access(path_of("ref.bin"), F_OK) != 0);
	}
	FILE *fp = fopen(path_of("ref.bin"), "w");
	fputs("older", fp);
	fclose(fp);
	int created = 1;
	struct agent_pfile *f = agent_pfile_open(path_of("ref.bin"), 1, &created);
	CHECK(f != NULL && !created);
	agent_pfile_refused(f);
	CHECK_EQ(agent_pfile_close(f, NULL), 0);
	size_t n = 0;
	uint8_t *b = slurp(path_of("ref.bin"), &n);
	CHECK(b && n == 5 && !memcmp(b, "older", 5));
	free(b);
	unlink(path_of("ref.bin"));
	f = agent_pfile_open(path_of("ref.bin"), 0, &created);
	CHECK(f != NULL && created);
	char moved[256];
	snprintf(moved, sizeof(moved), "%s", path_of("ref2.bin"));
	rename(path_of("ref.bin"), moved);
	fp = fopen(path_of("ref.bin"), "w");
	fclose(fp);
	agent_pfile_refused(f);
	CHECK_EQ(agent_pfile_close(f, NULL), 0);
	CHECK(access(path_of("ref.bin"), F_OK) == 0);
	unlink(path_of("ref.bin"));
	unlink(moved);
}

static void test_direct_stream(void)
{
	int created = 0, flags = -1;
	struct agent_pfile *f = agent_pfile_open(path_of("d.bin"), 0, &created);
	CHECK(f != NULL);
	if (!f)
		return;
	size_t cap;
	agent_pfile_buf(f, &cap);
	CHECK_EQ(cap, sizeof(f->buf));
	CHECK_EQ(stream_through(f, 2 * cap + 7, &flags), 0);
	CHECK_EQ(flags, 0);
	check_pattern(path_of("d.bin"), 0, 2 * cap + 7);
}

static void test_existing_file_kept_until_first_write(void)
{
	const char *p = path_of("old.bin");
	FILE *fp = fopen(p, "wb");
	CHECK(fp != NULL);
	if (!fp)
		return;
	fputs("an older profile, longer than what replaces it", fp);
	fclose(fp);
	int created = 1, flags;
	struct agent_pfile *f = agent_pfile_open(p, 1, &created);
	CHECK(f != NULL);
	CHECK_EQ(created, 0);
	CHECK_EQ(agent_pfile_close(f, NULL), 0);
	size_t n = 0;
	uint8_t *b = slurp(p, &n);
	CHECK_EQ(n, strlen("an older profile, longer than what replaces it"));
	free(b);
	f = agent_pfile_open(p, 1, &created);
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK_EQ(stream_through(f, 10, &flags), 0);
	check_pattern(p, 0, 10);
}

/* /dev/full fails every write with ENOSPC. */
static void test_failed_write_reported(void)
{
	for (int threaded = 0; threaded <= 1; threaded++) {
		int created, flags = 0;
		struct agent_pfile *f = agent_pfile_open("/dev/full", threaded, &created);
		CHECK(f != NULL);
		if (!f)
			return;
		size_t cap;
		uint8_t *buf = agent_pfile_buf(f, &cap);
		struct lp_wbuf w;
		lp_wbuf_init(&w, buf, cap, agent_pfile_write, f);
		/* Direct: the first flush fails. Threaded: it is handed over, and the failure
		 * comes back at the next one. */
		lp_wbuf_bytes(&w, "x", 1);
		lp_wbuf_flush(&w);
		CHECK_EQ(w.flags != 0, !threaded);
		lp_wbuf_bytes(&w, "y", 1);
		lp_wbuf_flush(&w);
		flags = (int)w.flags;
		CHECK_EQ(flags, LP_WBUF_ERRIO);
		CHECK_EQ(w.saved_errno, ENOSPC);
		errno = 0;
		int rc = agent_pfile_close(f, buf);
		/* Threaded, close reports the failed write; direct, the caller already knows
		 * and close of /dev/full succeeds. */
		if (threaded) {
			CHECK_EQ(rc, -1);
			CHECK_EQ(errno, ENOSPC);
		} else {
			CHECK_EQ(rc, 0);
		}
	}
}

static ssize_t test_write(int fd, const void *p, size_t n)
{
	if (!write_stalls)
		return write(fd, p, n);
	if (++stalls_in_a_row > STALL_LIMIT) {
		errno = ELOOP;
		return -1;
	}
	return 0;
}

/* write(2) returning 0 (no progress, no error): EIO, reported like any failed write. */
static void test_stalled_write_reported(void)
{
	for (int threaded = 0; threaded <= 1; threaded++) {
		int created;
		struct agent_pfile *f = agent_pfile_open(path_of("stall.bin"), threaded, &created);
		CHECK(f != NULL);
		if (!f)
			return;
		size_t cap;
		uint8_t *buf = agent_pfile_buf(f, &cap);
		struct lp_wbuf w;
		lp_wbuf_init(&w, buf, cap, agent_pfile_write, f);
		write_stalls = 1;
		stalls_in_a_row = 0;
		lp_wbuf_bytes(&w, "x", 1);
		lp_wbuf_flush(&w);
		lp_wbuf_bytes(&w, "y", 1);
		lp_wbuf_flush(&w);
		CHECK_EQ(w.flags, LP_WBUF_ERRIO);
		CHECK_EQ(w.saved_errno, EIO);
		errno = 0;
		int rc = agent_pfile_close(f, buf);
		write_stalls = 0;
		if (threaded) {
			CHECK_EQ(rc, -1);
			CHECK_EQ(errno, EIO);
		}
		CHECK(stalls_in_a_row <= 2);
	}
}

/* A forked child writes none of its parent's profiles: its copy of the descriptor is
 * closed at fork (the file's lock would otherwise outlive the parent's profile while the
 * child lives), so a write there fails with EBADF and close leaves the parent's stream
 * alone; the parent's file, still locked by the parent, cannot be opened again in the
 * child; another file can. */
static void test_forked_child_writes_none(void)
{
	int created, flags;
	struct agent_pfile *f = agent_pfile_open(path_of("fork.bin"), 1, &created);
	CHECK(f != NULL);
	if (!f)
		return;
	pid_t pid = fork();
	if (pid == 0) {
		alarm(10); /* a hang fails the test instead of blocking the suite */
		size_t cap;
		uint8_t *buf = agent_pfile_buf(f, &cap);
		const void *data = buf;
		memset(buf, 'c', 3);
		errno = 0;
		size_t n = agent_pfile_write(&data, 3, f);
		int ok = n == 0 && errno == EBADF;
		ok &= agent_pfile_close(f, buf) == -1 && errno == EBADF;
		struct agent_pfile *again = agent_pfile_open(path_of("fork.bin"), 0, &created);
		ok &= again == NULL && errno == EBUSY;
		struct agent_pfile *c = agent_pfile_open(path_of("child.bin"), 0, &created);
		ok &= c != NULL;
		if (c)
			ok &= agent_pfile_close(c, NULL) == 0;
		_exit(ok ? 0 : 1);
	}
	CHECK(pid > 0);
	int st = 0;
	waitpid(pid, &st, 0);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_EQ(stream_through(f, 5, &flags), 0);
	size_t n = 0;
	uint8_t *b = slurp(path_of("fork.bin"), &n);
	CHECK_EQ(n, 5);
	CHECK(b && b[0] == byte_at(0));
	free(b);
}

/* Opens path for raw events (threaded or not) and a wbuf on it, as exact-mode memprof
 * does: f, or NULL after a failed check. */
static struct agent_pfile *open_raw(const char *path, int threaded, struct lp_wbuf *w)
{
	int created;
	struct agent_pfile *f = agent_pfile_open(path, threaded, &created);
	CHECK(f != NULL);
	if (!f)
		return NULL;
	CHECK_EQ(agent_pfile_raw(f), 0);
	size_t cap;
	uint8_t *buf = agent_pfile_buf(f, &cap);
	lp_wbuf_init(w, buf, cap, agent_pfile_write, f);
	return f;
}

/* Raw events and a blob, each cut where a producer may cut them, through both forms of the
 * file: the file holds their encoding. */
static void test_raw_events_encoded(void)
{
	lp_uleb_fast_init();
	for (int threaded = 0; threaded <= 1; threaded++) {
		int flags = -1;
		const char *p = path_of(threaded ? "rt.bin" : "rd.bin");
		struct lp_wbuf w;
		struct agent_pfile *f = open_raw(p, threaded, &w);
		if (!f)
			return;
		/* Enough events for several hand-overs: a free of 48 bytes at a heap address
		 * encodes to 9 bytes, an allocation in trace 5 of 64 bytes to 10. */
		enum { N = 600000 };
		for (int i = 0; i < N; i++) {
			if ((size_t)(w.end - w.pos) < AGENT_RAWEV_MAX)
				lp_wbuf_flush(&w);
			uint64_t addr = 0x7f0000000000ull + 64ull * (uint64_t)i;
			w.pos = i % 2 ? agent_rawev_put(w.pos, LP_AEVENT_FREE | LP_ASOURCE_INT, 0, 0,
							addr, 48, 0, 0)
				      : agent_rawev_put(w.pos, LP_AEVENT_ALLOC | LP_ASOURCE_TRACE, 5,
							0, 0, 0, addr, 64);
		}
		/* A blob across a hand-over: its bytes come out whole, after the events. */
		static uint8_t tail[3 << 20];
		memset(tail, 'b', sizeof(tail));
		if ((size_t)(w.end - w.pos) < 8)
			lp_wbuf_flush(&w);
		w.pos = agent_rawev_word(w.pos, AGENT_RAWEV_BLOB | (uint64_t)sizeof(tail) << 8);
		lp_wbuf_bytes(&w, tail, sizeof(tail));
		lp_wbuf_flush(&w);
		flags = (int)w.flags;
		CHECK_EQ(flags, 0);
		CHECK_EQ(agent_pfile_close(f, w.buf), 0);
		size_t n = 0;
		uint8_t *b = slurp(p, &n);
		CHECK_EQ(n, N / 2 * 9 + N / 2 * 10 + sizeof(tail));
		size_t bad = 0, at = 0;
		for (int i = 0; b && i < N && at + 10 <= n; i++) {
			uint8_t want[16];
			uint64_t addr = 0x7f0000000000ull + 64ull * (uint64_t)i;
			size_t k = 0;
			want[k++] = (uint8_t)(i % 2 ? LP_AEVENT_FREE | LP_ASOURCE_INT
						    : LP_AEVENT_ALLOC | LP_ASOURCE_TRACE);
			if (!(i % 2))
				want[k++] = 5;
			k += lp_uleb_encode(addr, want + k);
			want[k++] = i % 2 ? 48 : 64;
			bad += memcmp(b + at, want, k) != 0;
			at += k;
		}
		CHECK_EQ(bad, 0);
		for (size_t i = at; b && i < n; i++)
			bad += b[i] != 'b';
		CHECK_EQ(bad, 0);
		free(b);
	}
}

/* Raw events that end inside a blob or its padding (or are malformed) make close fail with
 * EPROTO, in both forms of the file: the stream is cut. */
static void test_raw_cut_reported(void)
{
	for (int threaded = 0; threaded <= 1; threaded++) {
		for (int malformed = 0; malformed <= 2; malformed++) {
			struct lp_wbuf w;
			struct agent_pfile *f = open_raw(path_of("rc.bin"), threaded, &w);
			if (!f)
				return;
			/* A blob announcing 100 bytes with 10, a header that is no record's, or a
			 * blob of 10 bytes without its 6 bytes of padding. */
			uint64_t w0 = malformed == 1 ? 0x21 : AGENT_RAWEV_BLOB |
								(malformed ? 10 : 100) << 8;
			w.pos = agent_rawev_word(w.pos, w0);
			lp_wbuf_bytes(&w, "0123456789", 10);
			lp_wbuf_flush(&w);
			errno = 0;
			CHECK_EQ(agent_pfile_close(f, w.buf), -1);
			CHECK_EQ(errno, EPROTO);
		}
	}
}

int main(void)
{
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	RUN(test_threaded_stream_whole_and_in_order);
	RUN(test_direct_stream);
	RUN(test_existing_file_kept_until_first_write);
	RUN(test_refused_start);
	if (access("/dev/full", W_OK) == 0)
		RUN(test_failed_write_reported);
	else
		printf("SKIP test_failed_write_reported: no writable /dev/full\n");
	RUN(test_stalled_write_reported);
	RUN(test_forked_child_writes_none);
	RUN(test_raw_events_encoded);
	RUN(test_raw_cut_reported);
	const char *names[] = { "t.bin", "d.bin", "old.bin", "fork.bin", "child.bin", "rt.bin",
				"rd.bin", "rc.bin", "stall.bin" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		unlink(path_of(names[i]));
	rmdir(dir);
	return UNIT_RESULT();
}
