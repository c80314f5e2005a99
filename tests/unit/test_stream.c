/*
** Unit tests for the stream library: ULEB128, the write buffer, writer -> parser round trips,
** byte-exact encodings, every error path, the fd (pipe) path and Tarantool's own streams.
*/
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "luaprof/format.h"
#include "stream/input.h"
#include "stream/parse.h"
#include "stream/wbuf.h"
#include "stream/writer.h"
#include "unit.h"

/* -- Helpers: memory sink, records of callbacks ------------------------------- */

/* A writer target that appends everything to a growing array. */
struct sink {
	uint8_t *data;
	size_t len, cap;
	size_t calls;     /* writer invocations */
	size_t short_at;  /* 1-based call that consumes one byte less and sets errno; 0 never */
	int short_errno;
	size_t stop_at;   /* 1-based call that sets *data = NULL; 0 never */
	uint8_t *swap;    /* when set, hand this buffer back after each successful call */
};

static size_t sink_writer(const void **data, size_t len, void *ctx)
{
	struct sink *k = ctx;
	k->calls++;
	if (k->stop_at && k->calls == k->stop_at) {
		*data = NULL;
		return 0;
	}
	size_t take = len;
	if (k->short_at && k->calls == k->short_at) {
		take = len - 1;
		errno = k->short_errno;
	}
	if (k->len + take > k->cap) {
		size_t cap = k->cap ? k->cap : 4096;
		while (cap < k->len + take)
			cap *= 2;
		k->data = realloc(k->data, cap);
		if (!k->data)
			abort();
		k->cap = cap;
	}
	memcpy(k->data + k->len, *data, take);
	k->len += take;
	if (k->swap && take == len) {
		uint8_t *next = k->swap;
		k->swap = (uint8_t *)*data;
		*data = next;
	}
	return take;
}

enum rec_kind { R_STREAM, R_SYM_LUA, R_SYM_CFUNC, R_SYM_TRACE, R_SYMTAB_END, R_MEM, R_SYS };

static const char *const rec_names[] = {
	"stream", "sym_lua", "sym_cfunc", "sym_trace", "symtab_end", "mem_event", "sys_sample"
};

/* One callback with everything it carried; arrays and strings are owned copies. */
struct rec {
	enum rec_kind kind;
	uint64_t a, b, c;  /* stream: kind, version; sym_*: the numbers in call order */
	char *str;
	size_t len;
	struct lp_mem_event mem;
	struct lp_sys_sample sys;
	uint64_t end;      /* expected records only: stream offset just past the item */
};

struct reclist {
	struct rec *v;
	size_t n, cap;
	size_t abort_at;   /* 1-based callback that returns non-zero; 0 never */
};

static struct rec *rec_push(struct reclist *l, enum rec_kind kind)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->v = realloc(l->v, l->cap * sizeof(*l->v));
		if (!l->v)
			abort();
	}
	struct rec *r = &l->v[l->n++];
	memset(r, 0, sizeof(*r));
	r->kind = kind;
	return r;
}

static void *dup_bytes(const void *p, size_t n)
{
	void *q = malloc(n + 1);
	if (!q)
		abort();
	if (n)
		memcpy(q, p, n);
	((char *)q)[n] = '\0';
	return q;
}

static void rec_free(struct reclist *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].str);
		free((void *)l->v[i].sys.lua);
		free((void *)l->v[i].sys.host);
	}
	free(l->v);
	memset(l, 0, sizeof(*l));
}

static int rec_done(struct reclist *l)
{
	return l->abort_at && l->n == l->abort_at;
}

static int on_stream(void *ctx, enum lp_stream_kind kind, unsigned version)
{
	struct rec *r = rec_push(ctx, R_STREAM);
	r->a = kind;
	r->b = version;
	return rec_done(ctx);
}

static int on_sym_lua(void *ctx, uint64_t addr, const char *chunk, size_t len, uint64_t line)
{
	struct rec *r = rec_push(ctx, R_SYM_LUA);
	r->a = addr;
	r->b = line;
	r->str = dup_bytes(chunk, len);
	r->len = len;
	return rec_done(ctx);
}

static int on_sym_cfunc(void *ctx, uint64_t addr, const char *name, size_t len)
{
	struct rec *r = rec_push(ctx, R_SYM_CFUNC);
	r->a = addr;
	r->str = dup_bytes(name, len);
	r->len = len;
	return rec_done(ctx);
}

static int on_sym_trace(void *ctx, uint64_t traceno, uint64_t addr, uint64_t line)
{
	struct rec *r = rec_push(ctx, R_SYM_TRACE);
	r->a = traceno;
	r->b = addr;
	r->c = line;
	return rec_done(ctx);
}

static int on_symtab_end(void *ctx)
{
	rec_push(ctx, R_SYMTAB_END);
	return rec_done(ctx);
}

static int on_mem(void *ctx, const struct lp_mem_event *ev)
{
	struct rec *r = rec_push(ctx, R_MEM);
	r->mem = *ev;
	return rec_done(ctx);
}

static void copy_sample(struct rec *r, const struct lp_sys_sample *s)
{
	r->sys = *s;
	r->sys.lua = s->nlua ? dup_bytes(s->lua, s->nlua * sizeof(*s->lua)) : NULL;
	r->sys.host = s->nhost ? dup_bytes(s->host, s->nhost * sizeof(*s->host)) : NULL;
}

static int on_sys(void *ctx, const struct lp_sys_sample *s)
{
	copy_sample(rec_push(ctx, R_SYS), s);
	return rec_done(ctx);
}

static struct lp_parse_handlers recorder(struct reclist *l)
{
	struct lp_parse_handlers h = {
		.ctx = l, .stream = on_stream, .sym_lua = on_sym_lua, .sym_cfunc = on_sym_cfunc,
		.sym_trace = on_sym_trace, .symtab_end = on_symtab_end, .mem_event = on_mem,
		.sys_sample = on_sys,
	};
	return h;
}

static int frames_same(const struct lp_sys_sample *x, const struct lp_sys_sample *y)
{
	if (x->nlua != y->nlua || x->nhost != y->nhost)
		return 0;
	for (size_t i = 0; i < x->nlua; i++)
		if (x->lua[i].type != y->lua[i].type || x->lua[i].addr != y->lua[i].addr ||
		    x->lua[i].line != y->lua[i].line)
			return 0;
	for (size_t i = 0; i < x->nhost; i++)
		if (x->host[i] != y->host[i])
			return 0;
	return 1;
}

/* Whether a delivered record carries exactly what was written (every field). */
static int rec_same(const struct rec *x, const struct rec *y)
{
	if (x->kind != y->kind || x->a != y->a || x->b != y->b || x->c != y->c || x->len != y->len)
		return 0;
	if ((x->str || y->str) && (!x->str || !y->str || memcmp(x->str, y->str, x->len) != 0))
		return 0;
	if (x->kind == R_MEM) {
		const struct lp_mem_event *p = &x->mem, *q = &y->mem;
		return p->header == q->header && p->event == q->event && p->source == q->source &&
		       p->loc_addr == q->loc_addr && p->loc_line == q->loc_line &&
		       p->traceno == q->traceno && p->oaddr == q->oaddr && p->osize == q->osize &&
		       p->naddr == q->naddr && p->nsize == q->nsize && p->offset == q->offset;
	}
	if (x->kind == R_SYS) {
		const struct lp_sys_sample *p = &x->sys, *q = &y->sys;
		return p->vmstate == q->vmstate && p->offset == q->offset &&
		       p->traceno == q->traceno && p->trace_addr == q->trace_addr &&
		       p->trace_line == q->trace_line && frames_same(p, q);
	}
	return 1;
}

/* Checks that `got` holds the first `n` records of `want`, field by field. */
static void check_prefix(const struct reclist *got, const struct reclist *want, size_t n,
			 const char *what)
{
	if (got->n != n) {
		fprintf(stderr, "  %s: %zu records delivered, expected %zu\n", what, got->n, n);
		unit_test_failed++;
	}
	for (size_t i = 0; i < got->n && i < n; i++) {
		if (!rec_same(&got->v[i], &want->v[i])) {
			fprintf(stderr, "  %s: record %zu (%s, expected %s) differs\n", what, i,
				rec_names[got->v[i].kind], rec_names[want->v[i].kind]);
			unit_test_failed++;
			return;
		}
	}
}

/* -- Helpers: a stream builder that records what it writes --------------------- */

enum section { SEC_NONE, SEC_SYMTAB, SEC_MEMPROF, SEC_SYSPROF };

/* Writes a stream through the real writer and lists the records a parser must deliver. */
struct tb {
	struct sink sink;
	uint8_t *buf;
	struct lp_wbuf w;
	struct reclist expect;
	enum section sec;
};

static void tb_init(struct tb *t, size_t bufsize)
{
	memset(t, 0, sizeof(*t));
	t->buf = malloc(bufsize);
	if (!t->buf)
		abort();
	lp_wbuf_init(&t->w, t->buf, bufsize, sink_writer, &t->sink);
}

static void tb_free(struct tb *t)
{
	free(t->sink.data);
	free(t->buf);
	rec_free(&t->expect);
}

static uint64_t tb_offset(const struct tb *t)
{
	return t->w.written + (uint64_t)(t->w.pos - t->w.buf);
}

static struct rec *tb_push(struct tb *t, enum rec_kind kind)
{
	return rec_push(&t->expect, kind);
}

static void tb_ended(struct tb *t)
{
	t->expect.v[t->expect.n - 1].end = tb_offset(t);
}

static void tb_symtab(struct tb *t)
{
	lp_write_symtab_prologue(&t->w);
	t->sec = SEC_SYMTAB;
}

static void tb_symtab_end(struct tb *t)
{
	lp_write_symtab_final(&t->w);
	tb_push(t, R_SYMTAB_END);
	tb_ended(t);
}

static void tb_memprof(struct tb *t)
{
	lp_write_memprof_prologue(&t->w);
	struct rec *r = tb_push(t, R_STREAM);
	r->a = LP_STREAM_MEMPROF;
	r->b = LP_MEMPROF_VERSION;
	tb_ended(t);
	t->sec = SEC_MEMPROF;
}

static void tb_sysprof(struct tb *t)
{
	lp_write_sysprof_prologue(&t->w);
	struct rec *r = tb_push(t, R_STREAM);
	r->a = LP_STREAM_SYSPROF;
	r->b = LP_SYSPROF_VERSION;
	tb_ended(t);
	t->sec = SEC_SYSPROF;
}

static void tb_sym_lua(struct tb *t, uint64_t addr, const char *chunk, size_t len, uint64_t line)
{
	if (t->sec == SEC_SYMTAB)
		lp_write_sym_lua(&t->w, addr, chunk, len, line);
	else if (t->sec == SEC_MEMPROF)
		lp_write_mem_sym_lua(&t->w, addr, chunk, len, line);
	else
		lp_write_sys_sym_lua(&t->w, addr, chunk, len, line);
	struct rec *r = tb_push(t, R_SYM_LUA);
	r->a = addr;
	r->b = line;
	r->str = dup_bytes(chunk, len);
	r->len = len;
	tb_ended(t);
}

static void tb_sym_cfunc(struct tb *t, uint64_t addr, const char *name, size_t len)
{
	if (t->sec == SEC_SYMTAB)
		lp_write_sym_cfunc(&t->w, addr, name, len);
	else if (t->sec == SEC_MEMPROF)
		lp_write_mem_sym_cfunc(&t->w, addr, name, len);
	else
		lp_write_sys_sym_cfunc(&t->w, addr, name, len);
	struct rec *r = tb_push(t, R_SYM_CFUNC);
	r->a = addr;
	r->str = dup_bytes(name, len);
	r->len = len;
	tb_ended(t);
}

static void tb_sym_trace(struct tb *t, uint64_t traceno, uint64_t addr, uint64_t line)
{
	if (t->sec == SEC_SYMTAB)
		lp_write_sym_trace(&t->w, traceno, addr, line);
	else if (t->sec == SEC_MEMPROF)
		lp_write_mem_sym_trace(&t->w, traceno, addr, line);
	else
		lp_write_sys_sym_trace(&t->w, traceno, addr, line);
	struct rec *r = tb_push(t, R_SYM_TRACE);
	r->a = traceno;
	r->b = addr;
	r->c = line;
	tb_ended(t);
}

/* A memprof event with only the fields its header encodes (the parser zeroes the rest). */
static void tb_mem(struct tb *t, uint8_t event, uint8_t source, uint64_t loc, uint64_t line,
		   uint64_t oaddr, uint64_t osize, uint64_t naddr, uint64_t nsize)
{
	struct lp_mem_event ev;
	memset(&ev, 0, sizeof(ev));
	ev.header = event | source;
	ev.event = event;
	ev.source = source;
	if (source == LP_ASOURCE_LFUNC) {
		ev.loc_addr = loc;
		ev.loc_line = line;
	} else if (source == LP_ASOURCE_CFUNC) {
		ev.loc_addr = loc;
	} else if (source == LP_ASOURCE_TRACE) {
		ev.traceno = loc;
	}
	if (event != LP_AEVENT_ALLOC) {
		ev.oaddr = oaddr;
		ev.osize = osize;
	}
	if (event != LP_AEVENT_FREE) {
		ev.naddr = naddr;
		ev.nsize = nsize;
	}
	ev.offset = tb_offset(t);
	lp_write_mem_event(&t->w, &ev);
	tb_push(t, R_MEM)->mem = ev;
	tb_ended(t);
}

/* A sysprof sample in the shape its vmstate calls for. */
static void tb_sys(struct tb *t, uint8_t vmstate, const struct lp_lua_frame *lua, size_t nlua,
		   const uint64_t *host, size_t nhost, uint64_t traceno, uint64_t taddr,
		   uint64_t tline)
{
	struct lp_sys_sample s;
	memset(&s, 0, sizeof(s));
	s.vmstate = vmstate;
	s.offset = tb_offset(t);
	if (vmstate == LP_VMST_TRACE) {
		s.traceno = traceno;
		s.trace_addr = taddr;
		s.trace_line = tline;
	} else {
		if (vmstate == LP_VMST_LFUNC || vmstate == LP_VMST_FFUNC ||
		    vmstate == LP_VMST_CFUNC) {
			s.lua = lua;
			s.nlua = nlua;
		}
		s.host = host;
		s.nhost = nhost;
	}
	lp_write_sys_sample(&t->w, &s);
	copy_sample(tb_push(t, R_SYS), &s);
	tb_ended(t);
}

static void tb_finish(struct tb *t)
{
	lp_wbuf_flush(&t->w);
}

/* -- Helpers: parsing from memory and from a pipe ------------------------------ */

struct result {
	int rc;
	struct lp_parse_stats st;
	uint64_t err_offset;
	char msg[700];
	size_t strcap;  /* string scratch the input ended up with */
	uint64_t file_size; /* vectors only */
};

/* Parses an exact-size private copy, so reading past the end would be a heap error. */
static struct result parse_mem(const void *data, size_t len, struct reclist *got)
{
	struct result r;
	memset(&r, 0, sizeof(r));
	void *copy = dup_bytes(data, len);
	struct lp_input in;
	struct lp_parse_handlers h = recorder(got);
	lp_input_open_mem(&in, copy, len, "mem");
	r.rc = lp_parse_stream(&in, &h, &r.st);
	r.err_offset = in.err_offset;
	r.strcap = in.strcap;
	lp_input_message(&in, r.msg, sizeof(r.msg));
	lp_input_close(&in);
	free(copy);
	return r;
}

/* Feeds `data` through a pipe from a child process in `chunk`-byte writes. */
static struct result parse_pipe(const void *data, size_t len, size_t chunk, struct reclist *got)
{
	struct result r;
	memset(&r, 0, sizeof(r));
	int fds[2];
	if (pipe(fds) != 0) {
		r.rc = 99;
		return r;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(fds[0]);
		const uint8_t *p = data;
		size_t left = len;
		while (left > 0) {
			size_t k = left < chunk ? left : chunk;
			ssize_t n = write(fds[1], p, k);
			if (n <= 0)
				_exit(1);
			p += n;
			left -= (size_t)n;
		}
		_exit(0);
	}
	close(fds[1]);
	struct lp_input in;
	struct lp_parse_handlers h = recorder(got);
	r.rc = lp_input_open_fd(&in, fds[0], "pipe");
	if (r.rc == LP_OK)
		r.rc = lp_parse_stream(&in, &h, &r.st);
	r.err_offset = in.err_offset;
	lp_input_message(&in, r.msg, sizeof(r.msg));
	lp_input_close(&in);
	close(fds[0]);
	int status;
	waitpid(pid, &status, 0);
	return r;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dull;
}

/* A number with an interesting ULEB128 length: 1..10 bytes, often at a boundary. */
static uint64_t rnd_num(void)
{
	unsigned bits = (unsigned)(rnd() % 65);
	uint64_t v = bits == 64 ? rnd() : rnd() & ((1ull << bits) - 1);
	switch (rnd() % 4) {
	case 0:
		return bits == 0 ? 0 : (bits == 64 ? UINT64_MAX : (1ull << bits) - 1);
	case 1:
		return bits == 64 ? 1ull << 63 : 1ull << bits;
	default:
		return v;
	}
}

/* -- ULEB128 ------------------------------------------------------------------- */

static int decode(const uint8_t *p, size_t n, uint64_t *v, struct lp_input *out)
{
	struct lp_input in;
	lp_input_open_mem(&in, p, n, "uleb");
	int rc = lp_input_uleb(&in, v);
	if (out)
		*out = in;
	else
		lp_input_close(&in);
	return rc;
}

static void test_uleb_known_encodings(void)
{
	static const struct {
		uint64_t v;
		uint8_t n, b[10];
	} cases[] = {
		{ 0, 1, { 0x00 } },
		{ 1, 1, { 0x01 } },
		{ 127, 1, { 0x7f } },
		{ 128, 2, { 0x80, 0x01 } },
		{ 300, 2, { 0xac, 0x02 } },
		{ 16383, 2, { 0xff, 0x7f } },
		{ 16384, 3, { 0x80, 0x80, 0x01 } },
		{ 0xffffffffull, 5, { 0xff, 0xff, 0xff, 0xff, 0x0f } },
		{ 1ull << 63, 10, { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01 } },
		{ UINT64_MAX, 10, { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01 } },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint8_t out[16];
		size_t n = lp_uleb_encode(cases[i].v, out);
		CHECK_EQ(n, cases[i].n);
		CHECK(memcmp(out, cases[i].b, cases[i].n) == 0);
		uint64_t v = 12345;
		struct lp_input in;
		CHECK_EQ(decode(cases[i].b, cases[i].n, &v, &in), LP_OK);
		CHECK_EQ(v, cases[i].v);
		CHECK_EQ(lp_input_offset(&in), cases[i].n);
		lp_input_close(&in);
	}
}

static void test_uleb_round_trip_all_widths(void)
{
	/* Every power of two and its neighbours, plus random values of every width. */
	for (unsigned bit = 0; bit < 64; bit++) {
		uint64_t p = 1ull << bit;
		uint64_t vals[3] = { p - 1, p, p + 1 };
		for (int j = 0; j < 3; j++) {
			uint8_t b[16];
			size_t n = lp_uleb_encode(vals[j], b);
			size_t want = 1;
			for (uint64_t x = vals[j] >> 7; x; x >>= 7)
				want++;
			CHECK_EQ(n, want);
			uint64_t v = 0;
			CHECK_EQ(decode(b, n, &v, NULL), LP_OK);
			CHECK_EQ(v, vals[j]);
		}
	}
	for (int i = 0; i < 100000; i++) {
		uint64_t x = rnd_num(), v = ~x;
		uint8_t b[16];
		size_t n = lp_uleb_encode(x, b);
		CHECK(n >= 1 && n <= 10);
		CHECK_EQ(decode(b, n, &v, NULL), LP_OK);
		if (v != x) {
			CHECK_EQ(v, x);
			break;
		}
	}
}

/* The inline writers give lp_uleb_encode's bytes exactly, whatever their fast path, and
 * write nothing beyond their promised room. Returns 0 after the first failed check. */
static int check_put(uint64_t v)
{
	uint8_t want[16], got[16];
	size_t n = lp_uleb_encode(v, want);
	uint8_t *(*put[3])(uint8_t *, uint64_t) = { lp_uleb_put, lp_uleb_put_addr,
						    lp_uleb_put_small };
	size_t room[3] = { 10, n > 8 ? n : 8, 10 };
	for (int k = 0; k < 3; k++) {
		memset(got, 0xa5, sizeof(got));
		size_t m = (size_t)(put[k](got, v) - got);
		if (m != n || memcmp(got, want, n) != 0 || got[room[k]] != 0xa5) {
			CHECK_EQ(m, n);
			CHECK(memcmp(got, want, n) == 0);
			CHECK_EQ(got[room[k]], 0xa5);
			return 0;
		}
	}
	return 1;
}

static void uleb_inline_writers(void)
{
	for (unsigned bit = 0; bit < 64; bit++) {
		uint64_t p = 1ull << bit;
		if (!check_put(p - 1) || !check_put(p) || !check_put(p + 1))
			return;
	}
	for (int i = 0; i < 200000; i++) {
		uint64_t x = rnd_num();
		/* any value, then the ranges the fast paths take */
		if (!check_put(x) || !check_put((1ull << 42) + x % ((1ull << 49) - (1ull << 42))) ||
		    !check_put(x & 0x3fff))
			return;
	}
}

/* Both forms of lp_uleb_put_addr's fast path: shifts and masks, and PDEP where this CPU
 * has it fast (the form the profiler then uses). */
static void test_uleb_inline_writers(void)
{
	lp_uleb_pdep = 0;
	uleb_inline_writers();
	if (lp_uleb_fast_init()) {
		uleb_inline_writers();
	} else {
		printf("  (PDEP form not checked: this CPU has no fast PDEP)\n");
	}
	lp_uleb_pdep = 0;
}

/*
** Sampled memory mode interns a capture's stacks as lp_put_sys_stacks encodes them, and the
** CPU profiler's stacks go through lp_write_sys_stacks: the two must give the same bytes
** (one stack vocabulary, and the dictionary's keys are those bytes). Values at every width
** around the inline writers' fast cases (heap addresses, small lines).
*/
static size_t never_flushed(const void **data, size_t len, void *ctx)
{
	(void)data;
	(void)len;
	(void)ctx;
	return 0;
}

static void put_sys_stacks_as_written(void)
{
	static const uint64_t vals[] = { 0, 1, 0x7f, 0x80, 0x3fff, 0x4000, 0x1fffff, 1ull << 35,
					 (1ull << 42) - 1, 1ull << 42, 0x7f1234567890ull,
					 (1ull << 49) - 1, 1ull << 49, 1ull << 56, UINT64_MAX };
	enum { NV = sizeof(vals) / sizeof(vals[0]) };
	struct lp_lua_frame lua[NV * 3];
	uint64_t host[NV];
	size_t nl = 0;
	for (size_t i = 0; i < NV; i++) {
		static const uint8_t types[] = { LP_FRAME_LFUNC, LP_FRAME_CFUNC, LP_FRAME_FFUNC };
		for (size_t k = 0; k < 3; k++)
			lua[nl++] = (struct lp_lua_frame){ types[k], vals[i], vals[NV - 1 - i] };
		host[i] = vals[i];
	}
	struct lp_sys_sample smp = { .lua = lua, .nlua = nl, .host = host, .nhost = NV };
	static uint8_t put[LP_SYS_STACKS_MAX(NV * 3, NV)], written[sizeof(put) * 2];
	size_t len = (size_t)(lp_put_sys_stacks(put, &smp) - put);
	struct lp_wbuf w;
	lp_wbuf_init(&w, written, sizeof(written), never_flushed, NULL);
	lp_write_sys_stacks(&w, &smp);
	CHECK(lp_wbuf_ok(&w));
	CHECK_EQ(len, (size_t)(w.pos - w.buf));
	CHECK(len == (size_t)(w.pos - w.buf) && memcmp(put, written, len) == 0);
}

static void test_put_sys_stacks_as_written(void)
{
	lp_uleb_pdep = 0;
	put_sys_stacks_as_written();
	if (lp_uleb_fast_init())
		put_sys_stacks_as_written();
	lp_uleb_pdep = 0;
}

static void test_uleb_overflow_rejected(void)
{
	struct lp_input in;
	uint64_t v;
	/* 10th byte 0x02: bit 64 would be set. */
	const uint8_t over[10] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02 };
	CHECK_EQ(decode(over, sizeof(over), &v, &in), LP_ERR_FORMAT);
	CHECK_EQ(in.err_offset, 0);
	CHECK(strstr(in.err, "64 bits") != NULL);
	lp_input_close(&in);
	/* 10th byte 0x7f, and 0x81 with a continuation. */
	const uint8_t over2[10] = { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f };
	CHECK_EQ(decode(over2, sizeof(over2), &v, NULL), LP_ERR_FORMAT);
	/* Eleven bytes: the 10th must carry a continuation bit, so it is refused there. */
	const uint8_t eleven[11] = { 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x81,
				     0x00 };
	CHECK_EQ(decode(eleven, sizeof(eleven), &v, &in), LP_ERR_FORMAT);
	CHECK_EQ(in.err_offset, 0);
	lp_input_close(&in);
	const uint8_t eleven0[11] = { 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80,
				      0x00 };
	CHECK_EQ(decode(eleven0, sizeof(eleven0), &v, NULL), LP_ERR_FORMAT);
	/* An overflow after a valid value reports the offset of the bad value. */
	const uint8_t second[12] = { 0x05, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
				     0x03, 0x00 };
	lp_input_open_mem(&in, second, sizeof(second), "uleb");
	CHECK_EQ(lp_input_uleb(&in, &v), LP_OK);
	CHECK_EQ(v, 5);
	CHECK_EQ(lp_input_uleb(&in, &v), LP_ERR_FORMAT);
	CHECK_EQ(in.err_offset, 1);
	lp_input_close(&in);
}

static void test_uleb_truncated(void)
{
	const uint8_t b[3] = { 0x80, 0x80, 0x80 };
	for (size_t n = 0; n <= 3; n++) {
		uint64_t v;
		struct lp_input in;
		CHECK_EQ(decode(b, n, &v, &in), LP_ERR_TRUNCATED);
		CHECK_EQ(in.err_offset, n);
		lp_input_close(&in);
	}
}

/* -- Write buffer contract ------------------------------------------------------- */

static void test_wbuf_short_write_keeps_errno(void)
{
	struct sink k = { .short_at = 2, .short_errno = ENOSPC };
	uint8_t buf[16];
	struct lp_wbuf w;
	lp_wbuf_init(&w, buf, sizeof(buf), sink_writer, &k);
	for (int i = 0; i < 16; i++)
		lp_wbuf_u8(&w, (uint8_t)i);
	lp_wbuf_flush(&w);           /* call 1: full */
	CHECK(lp_wbuf_ok(&w));
	CHECK_EQ(w.written, 16);
	for (int i = 0; i < 10; i++)
		lp_wbuf_u8(&w, (uint8_t)(100 + i));
	lp_wbuf_flush(&w);           /* call 2: consumes 9 of 10 */
	CHECK(!lp_wbuf_ok(&w));
	CHECK_EQ(w.flags, LP_WBUF_ERRIO);
	CHECK_EQ(w.saved_errno, ENOSPC);
	CHECK_EQ(w.written, 25);
	CHECK_EQ(k.len, 25);
	CHECK_EQ(k.calls, 2);
	/* Every later add is a no-op and the writer is never called again. */
	lp_wbuf_u8(&w, 1);
	lp_wbuf_uleb(&w, UINT64_MAX);
	lp_wbuf_bytes(&w, buf, sizeof(buf));
	lp_wbuf_string(&w, "hello", 5);
	for (int i = 0; i < 100; i++)
		lp_wbuf_uleb(&w, (uint64_t)i << 40);
	lp_wbuf_flush(&w);
	CHECK_EQ(k.calls, 2);
	CHECK(w.pos == w.buf);
	CHECK_EQ(w.written, 25);
	CHECK_EQ(w.saved_errno, ENOSPC);
	free(k.data);

	/* A short count with errno 0 is still an I/O error: EIO. */
	struct sink k2 = { .short_at = 1, .short_errno = 0 };
	lp_wbuf_init(&w, buf, sizeof(buf), sink_writer, &k2);
	lp_wbuf_string(&w, "abc", 3);
	lp_wbuf_flush(&w);
	CHECK_EQ(w.flags, LP_WBUF_ERRIO);
	CHECK_EQ(w.saved_errno, EIO);
	free(k2.data);
}

static void test_wbuf_stop(void)
{
	struct sink k = { .stop_at = 3 };
	uint8_t buf[16];
	struct lp_wbuf w;
	lp_wbuf_init(&w, buf, sizeof(buf), sink_writer, &k);
	for (int i = 0; i < 40; i++)  /* 40 bytes through a 16-byte buffer: 2 flushes */
		lp_wbuf_u8(&w, (uint8_t)i);
	CHECK(lp_wbuf_ok(&w));
	CHECK_EQ(k.calls, 2);
	lp_wbuf_flush(&w);            /* call 3 stops */
	CHECK_EQ(w.flags, LP_WBUF_STOP);
	CHECK_EQ(w.saved_errno, 0);
	CHECK_EQ(w.written, 32);
	lp_wbuf_string(&w, "ignored", 7);
	lp_wbuf_bytes(&w, "0123456789abcdef0123456789", 26);
	lp_wbuf_flush(&w);
	CHECK_EQ(k.calls, 3);
	CHECK_EQ(k.len, 32);
	for (int i = 0; i < 32; i++)
		CHECK_EQ(k.data[i], i);
	free(k.data);
}

/* Writes one mixed stream through the writer API with a given buffer size. */
static void write_mixed(struct tb *t)
{
	static char big[3000];
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)('a' + i % 26);
	tb_symtab(t);
	tb_sym_lua(t, 0x4000deadbeefull, "@bench/x.lua", 12, 17);
	tb_sym_cfunc(t, 0x555555554000ull, big, sizeof(big));
	tb_sym_trace(t, 7, 0x4000deadbeefull, 19);
	tb_symtab_end(t);
	tb_memprof(t);
	for (int i = 0; i < 200; i++)
		tb_mem(t, (uint8_t)(1 + i % 3), (uint8_t)((1 + i % 4) << 2), rnd_num(), rnd_num(),
		       rnd_num(), rnd_num(), rnd_num(), rnd_num());
	lp_write_memprof_epilogue(&t->w);
	tb_finish(t);
}

static void test_wbuf_small_buffer_many_flushes(void)
{
	uint64_t seed = rng_state;
	struct tb big, small;
	tb_init(&big, 1 << 16);
	write_mixed(&big);
	rng_state = seed;
	tb_init(&small, 16);
	write_mixed(&small);
	CHECK(lp_wbuf_ok(&big.w) && lp_wbuf_ok(&small.w));
	CHECK_EQ(big.sink.calls, 1);
	CHECK(small.sink.calls > big.sink.len / 16);
	CHECK_EQ(small.sink.len, big.sink.len);
	CHECK_EQ(small.w.written, small.sink.len);
	CHECK(small.sink.len == big.sink.len &&
	      memcmp(small.sink.data, big.sink.data, big.sink.len) == 0);
	struct reclist got = {0};
	struct result r = parse_mem(small.sink.data, small.sink.len, &got);
	CHECK_EQ(r.rc, LP_OK);
	check_prefix(&got, &small.expect, small.expect.n, "16-byte buffer");
	rec_free(&got);
	tb_free(&big);
	tb_free(&small);
}

static void test_wbuf_writer_swaps_buffer(void)
{
	/* The writer may hand back another buffer of the same size (double buffering). */
	uint8_t a[32], b[32];
	struct sink k = { .swap = b };
	struct lp_wbuf w;
	lp_wbuf_init(&w, a, sizeof(a), sink_writer, &k);
	uint8_t want[1000];
	for (size_t i = 0; i < sizeof(want); i++) {
		want[i] = (uint8_t)(i * 7);
		lp_wbuf_u8(&w, want[i]);
	}
	lp_wbuf_flush(&w);
	CHECK(lp_wbuf_ok(&w));
	CHECK(k.calls > 30);
	CHECK_EQ(k.len, sizeof(want));
	CHECK(k.len == sizeof(want) && memcmp(k.data, want, sizeof(want)) == 0);
	CHECK(w.buf == a || w.buf == b);
	free(k.data);
}

/* -- Round trips ----------------------------------------------------------------- */

static const char nul_name[] = { 'a', '\0', 'b', '\n', '\xff' };

static void build_memprof(struct tb *t, int with_long_strings)
{
	static char long_chunk[300], huge[70000];
	memset(long_chunk, 'c', sizeof(long_chunk));
	for (size_t i = 0; i < sizeof(huge); i++)
		huge[i] = (char)(i * 31 + 7);
	tb_symtab(t);
	tb_sym_lua(t, 0x40001234, "@app/main.lua", 13, 1);
	tb_sym_lua(t, UINT64_MAX, "", 0, UINT64_MAX);
	tb_sym_lua(t, 0, long_chunk, sizeof(long_chunk), 0);
	tb_sym_cfunc(t, 0x7f0011223344ull, "lj_str_new", 10);
	tb_sym_cfunc(t, 1, nul_name, sizeof(nul_name));
	if (with_long_strings)
		tb_sym_cfunc(t, 2, huge, sizeof(huge));
	tb_sym_trace(t, 1, 0x40001234, 42);
	tb_sym_trace(t, UINT64_MAX, 1ull << 63, 127);
	tb_symtab_end(t);
	tb_memprof(t);
	static const uint8_t sources[] = { LP_ASOURCE_INT, LP_ASOURCE_LFUNC, LP_ASOURCE_CFUNC,
					   LP_ASOURCE_TRACE };
	static const uint8_t events[] = { LP_AEVENT_ALLOC, LP_AEVENT_FREE, LP_AEVENT_REALLOC };
	uint64_t n = 1;
	for (size_t s = 0; s < 4; s++) {
		for (size_t e = 0; e < 3; e++) {
			tb_mem(t, events[e], sources[s], 0x40001234 + n, 10 + n, 0x1000 * n, 16 * n,
			       0x2000 * n, 32 * n);
			n++;
		}
	}
	/* Extremes in every field. */
	tb_mem(t, LP_AEVENT_REALLOC, LP_ASOURCE_LFUNC, UINT64_MAX, UINT64_MAX, UINT64_MAX,
	       UINT64_MAX, UINT64_MAX, UINT64_MAX);
	tb_mem(t, LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0, 0, 0, 0, 0, 0);
	tb_mem(t, LP_AEVENT_FREE, LP_ASOURCE_TRACE, 1ull << 63, 0, 1ull << 63, 128, 0, 0);
	/* Mid-stream symbols 0x08, 0x0C, 0x10, interleaved with events. */
	tb_sym_lua(t, 0x40009999, "=load", 5, 3);
	tb_mem(t, LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, 0x40009999, 4, 0, 0, 0x41000000, 40);
	tb_sym_cfunc(t, 0x7f5500000000ull, "luaopen_mylib", 13);
	tb_mem(t, LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0x7f5500000000ull, 0, 0, 0, 0x41000100, 64);
	tb_sym_trace(t, 2, 0x40009999, 5);
	tb_mem(t, LP_AEVENT_FREE, LP_ASOURCE_TRACE, 2, 0, 0x41000000, 40, 0, 0);
	if (with_long_strings)
		tb_sym_lua(t, 3, huge, sizeof(huge), 9);
	tb_mem(t, LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x41000100, 64, 0, 0);
	lp_write_memprof_epilogue(&t->w);
	tb_finish(t);
}

static void build_sysprof(struct tb *t)
{
	static const struct lp_lua_frame lua3[] = {
		{ LP_FRAME_FFUNC, 21, 0 },                 /* innermost: ffid */
		{ LP_FRAME_CFUNC, 0x555555556789ull, 0 },
		{ LP_FRAME_LFUNC, 0x40001234, 17 },
	};
	static const struct lp_lua_frame lua1[] = { { LP_FRAME_LFUNC, UINT64_MAX, UINT64_MAX } };
	static const uint64_t host[] = { 0x555555556789ull, 0x7ffff7a00000ull, 1, UINT64_MAX };
	tb_symtab(t);
	tb_sym_lua(t, 0x40001234, "@fib.lua", 8, 1);
	tb_sym_cfunc(t, 0x555555556000ull, "lj_vm_call", 10);
	tb_sym_trace(t, 3, 0x40001234, 2);
	tb_symtab_end(t);
	tb_sysprof(t);
	for (uint8_t st = 0; st < LP_VMST__MAX; st++)
		tb_sys(t, st, lua3, 3, host, 4, 3, 0x40001234, 1);
	/* Lua-frame edge cases and empty stacks. */
	tb_sys(t, LP_VMST_LFUNC, lua1, 1, NULL, 0, 0, 0, 0);
	tb_sys(t, LP_VMST_FFUNC, NULL, 0, host, 1, 0, 0, 0);
	tb_sys(t, LP_VMST_CFUNC, NULL, 0, NULL, 0, 0, 0, 0);
	tb_sys(t, LP_VMST_GC, NULL, 0, NULL, 0, 0, 0, 0);
	tb_sys(t, LP_VMST_TRACE, NULL, 0, NULL, 0, UINT64_MAX, UINT64_MAX, UINT64_MAX);
	tb_sys(t, LP_VMST_TRACE, NULL, 0, NULL, 0, 0, 0, 0);
	/* Mid-stream symbols 10, 11, 12. */
	tb_sym_lua(t, 0x40005555, "=stdin", 6, 0);
	tb_sys(t, LP_VMST_LFUNC, lua3 + 2, 1, host, 2, 0, 0, 0);
	tb_sym_cfunc(t, 0x7f6600000000ull, nul_name, sizeof(nul_name));
	tb_sym_trace(t, 4, 0x40005555, 1);
	tb_sys(t, LP_VMST_TRACE, NULL, 0, NULL, 0, 4, 0x40005555, 1);
	lp_write_sysprof_epilogue(&t->w);
	tb_finish(t);
}

static void check_round_trip(struct tb *t, enum lp_stream_kind kind, const char *what)
{
	CHECK(lp_wbuf_ok(&t->w));
	size_t nsym = 0, nev = 0;
	for (size_t i = 0; i < t->expect.n; i++) {
		enum rec_kind k = t->expect.v[i].kind;
		nsym += k == R_SYM_LUA || k == R_SYM_CFUNC || k == R_SYM_TRACE;
		nev += k == R_MEM || k == R_SYS;
	}
	struct reclist got = {0};
	struct result r = parse_mem(t->sink.data, t->sink.len, &got);
	CHECK_EQ(r.rc, LP_OK);
	CHECK_EQ(r.st.kind, kind);
	CHECK_EQ(r.st.complete, 1);
	CHECK_EQ(r.st.bytes, t->sink.len);
	CHECK_EQ(r.st.symbols, nsym);
	CHECK_EQ(r.st.events, nev);
	check_prefix(&got, &t->expect, t->expect.n, what);
	rec_free(&got);

	/* The same through a pipe, in awkward write sizes. */
	static const size_t chunks[] = { 1, 7, 63, 4096, 1 << 20 };
	for (size_t c = 0; c < sizeof(chunks) / sizeof(chunks[0]); c++) {
		r = parse_pipe(t->sink.data, t->sink.len, chunks[c], &got);
		CHECK_EQ(r.rc, LP_OK);
		CHECK_EQ(r.st.complete, 1);
		CHECK_EQ(r.st.bytes, t->sink.len);
		check_prefix(&got, &t->expect, t->expect.n, "pipe");
		rec_free(&got);
	}
}

static void test_round_trip_memprof(void)
{
	struct tb t;
	tb_init(&t, 1 << 16);
	build_memprof(&t, 1);
	check_round_trip(&t, LP_STREAM_MEMPROF, "memprof");
	tb_free(&t);
}

static void test_round_trip_sysprof(void)
{
	struct tb t;
	tb_init(&t, 1 << 16);
	build_sysprof(&t);
	check_round_trip(&t, LP_STREAM_SYSPROF, "sysprof");
	tb_free(&t);
}

/* Long random streams: every item kind, boundary numbers, stacks up to the limits' order. */
static void test_round_trip_random(void)
{
	for (int kind = 0; kind < 2; kind++) {
		struct tb t;
		tb_init(&t, 4096);
		char name[64];
		tb_symtab(&t);
		for (int i = 0; i < 300; i++) {
			size_t len = (size_t)(rnd() % sizeof(name));
			for (size_t j = 0; j < len; j++)
				name[j] = (char)rnd();
			switch (rnd() % 3) {
			case 0: tb_sym_lua(&t, rnd_num(), name, len, rnd_num()); break;
			case 1: tb_sym_cfunc(&t, rnd_num(), name, len); break;
			default: tb_sym_trace(&t, rnd_num(), rnd_num(), rnd_num()); break;
			}
		}
		tb_symtab_end(&t);
		static struct lp_lua_frame lua[300];
		static uint64_t host[300];
		if (kind == 0)
			tb_memprof(&t);
		else
			tb_sysprof(&t);
		for (int i = 0; i < 20000; i++) {
			unsigned pick = (unsigned)(rnd() % 100);
			if (pick < 3) {
				size_t len = (size_t)(rnd() % sizeof(name));
				memset(name, 'x', len);
				switch (rnd() % 3) {
				case 0: tb_sym_lua(&t, rnd_num(), name, len, rnd_num()); break;
				case 1: tb_sym_cfunc(&t, rnd_num(), name, len); break;
				default: tb_sym_trace(&t, rnd_num(), rnd_num(), rnd_num()); break;
				}
			} else if (kind == 0) {
				tb_mem(&t, (uint8_t)(1 + rnd() % 3), (uint8_t)((1 + rnd() % 4) << 2),
				       rnd_num(), rnd_num(), rnd_num(), rnd_num(), rnd_num(), rnd_num());
			} else {
				size_t nl = (size_t)(rnd() % 40), nh = (size_t)(rnd() % 60);
				if (rnd() % 50 == 0) {
					nl = 300;
					nh = 300;
				}
				for (size_t j = 0; j < nl; j++) {
					lua[j].type = (uint8_t)(1 + rnd() % 3);
					lua[j].addr = rnd_num();
					lua[j].line = lua[j].type == LP_FRAME_LFUNC ? rnd_num() : 0;
				}
				for (size_t j = 0; j < nh; j++)
					host[j] = rnd_num() | 1; /* 0 would end the host stack */
				tb_sys(&t, (uint8_t)(rnd() % LP_VMST__MAX), lua, nl, host, nh,
				       rnd_num(), rnd_num(), rnd_num());
			}
		}
		if (kind == 0)
			lp_write_memprof_epilogue(&t.w);
		else
			lp_write_sysprof_epilogue(&t.w);
		tb_finish(&t);
		struct reclist got = {0};
		struct result r = parse_mem(t.sink.data, t.sink.len, &got);
		CHECK_EQ(r.rc, LP_OK);
		CHECK_EQ(r.st.complete, 1);
		check_prefix(&got, &t.expect, t.expect.n, kind ? "random sysprof" : "random memprof");
		rec_free(&got);
		r = parse_pipe(t.sink.data, t.sink.len, 1000, &got);
		CHECK_EQ(r.rc, LP_OK);
		check_prefix(&got, &t.expect, t.expect.n, "random via pipe");
		rec_free(&got);
		tb_free(&t);
	}
}

/* -- Byte-exact encodings (hand-assembled from the grammar) ----------------------- */

static void check_bytes(const struct tb *t, const uint8_t *want, size_t n, const char *what)
{
	if (t->sink.len != n || memcmp(t->sink.data, want, n) != 0) {
		fprintf(stderr, "  %s: encoding differs (%zu bytes, expected %zu):\n   got ", what,
			t->sink.len, n);
		for (size_t i = 0; i < t->sink.len; i++)
			fprintf(stderr, " %02x", t->sink.data[i]);
		fprintf(stderr, "\n  want ");
		for (size_t i = 0; i < n; i++)
			fprintf(stderr, " %02x", want[i]);
		fprintf(stderr, "\n");
		unit_test_failed++;
	}
}

static void test_bytes_symtab_memprof(void)
{
	static const uint8_t want[] = {
		0x6c, 0x6a, 0x73, 0x03, 0x00, 0x00, 0x00,          /* "ljs" v3 */
		0x00, 0xb4, 0x24, 0x06, '@', 'a', '.', 'l', 'u', 'a', 0x05, /* lua 0x1234 "@a.lua" :5 */
		0x01, 0x80, 0x01, 0x03, 'f', 'o', 'o',             /* cfunc 0x80 "foo" */
		0x02, 0x07, 0xb4, 0x24, 0x81, 0x01,                /* trace 7 0x1234 :129 */
		0x80,                                              /* final */
		0x6c, 0x6a, 0x6d, 0x03, 0x00, 0x00, 0x00,          /* "ljm" v3 */
		0x05, 0x90, 0x01, 0x20,                            /* INT alloc 0x90 32 */
		0x09, 0xb4, 0x24, 0x08, 0xa0, 0x01, 0x10,          /* LFUNC alloc @0x1234:8 0xa0 16 */
		0x0a, 0xb4, 0x24, 0x09, 0xa0, 0x01, 0x10,          /* LFUNC free :9 0xa0 16 */
		0x0f, 0x80, 0x01, 0x90, 0x01, 0x20, 0xb0, 0x01, 0x40, /* CFUNC realloc 0x80 */
		0x12, 0x07, 0xb0, 0x01, 0x40,                      /* TRACE free #7 0xb0 64 */
		0x08, 0xb5, 0x24, 0x01, 'x', 0x00,                 /* sym lua 0x1235 "x" :0 */
		0x0c, 0x81, 0x01, 0x00,                            /* sym cfunc 0x81 "" */
		0x10, 0x08, 0xb5, 0x24, 0x02,                      /* sym trace 8 0x1235 :2 */
		0x80,                                              /* epilogue */
	};
	struct tb t;
	tb_init(&t, 256);
	tb_symtab(&t);
	tb_sym_lua(&t, 0x1234, "@a.lua", 6, 5);
	tb_sym_cfunc(&t, 0x80, "foo", 3);
	tb_sym_trace(&t, 7, 0x1234, 129);
	tb_symtab_end(&t);
	tb_memprof(&t);
	tb_mem(&t, LP_AEVENT_ALLOC, LP_ASOURCE_INT, 0, 0, 0, 0, 0x90, 32);
	tb_mem(&t, LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, 0x1234, 8, 0, 0, 0xa0, 16);
	tb_mem(&t, LP_AEVENT_FREE, LP_ASOURCE_LFUNC, 0x1234, 9, 0xa0, 16, 0, 0);
	tb_mem(&t, LP_AEVENT_REALLOC, LP_ASOURCE_CFUNC, 0x80, 0, 0x90, 32, 0xb0, 64);
	tb_mem(&t, LP_AEVENT_FREE, LP_ASOURCE_TRACE, 7, 0, 0xb0, 64, 0, 0);
	tb_sym_lua(&t, 0x1235, "x", 1, 0);
	tb_sym_cfunc(&t, 0x81, "", 0);
	tb_sym_trace(&t, 8, 0x1235, 2);
	lp_write_memprof_epilogue(&t.w);
	tb_finish(&t);
	check_bytes(&t, want, sizeof(want), "memprof");
	/* And the hand-written bytes parse to the same records. */
	struct reclist got = {0};
	struct result r = parse_mem(want, sizeof(want), &got);
	CHECK_EQ(r.rc, LP_OK);
	check_prefix(&got, &t.expect, t.expect.n, "hand-written memprof");
	rec_free(&got);
	tb_free(&t);
}

static void test_bytes_sysprof(void)
{
	static const uint8_t want[] = {
		0x6c, 0x6a, 0x73, 0x03, 0x00, 0x00, 0x00, 0x80,    /* empty symtab */
		0x6c, 0x6a, 0x70, 0x02, 0x00, 0x00, 0x00,          /* "ljp" v2 */
		0x01,                                              /* LFUNC sample */
		0x03, 0x15,                                        /*   ffunc #21 */
		0x02, 0xff, 0x01,                                  /*   cfunc 0xff */
		0x01, 0xb4, 0x24, 0x11,                            /*   lfunc 0x1234 :17 */
		0x80,                                              /*   end of Lua stack */
		0xef, 0xfd, 0x03, 0x01, 0x00,                      /*   host 0xfeef, 1; end */
		0x04, 0x80, 0x02, 0x00,                            /* GC: host 0x100 */
		0x00, 0x00,                                        /* INTERP: no host frames */
		0x09, 0x03, 0xb4, 0x24, 0x01,                      /* TRACE #3 0x1234 :1 */
		0x0a, 0xb4, 0x24, 0x01, 'f', 0x01,                 /* sym lua */
		0x0b, 0xff, 0x01, 0x01, 'g',                       /* sym cfunc */
		0x0c, 0x03, 0xb4, 0x24, 0x02,                      /* sym trace */
		0x80,                                              /* epilogue */
	};
	static const struct lp_lua_frame lua[] = {
		{ LP_FRAME_FFUNC, 21, 0 }, { LP_FRAME_CFUNC, 0xff, 0 }, { LP_FRAME_LFUNC, 0x1234, 17 },
	};
	static const uint64_t host[] = { 0xfeef, 1 }, gc[] = { 0x100 };
	struct tb t;
	tb_init(&t, 16);
	tb_symtab(&t);
	tb_symtab_end(&t);
	tb_sysprof(&t);
	tb_sys(&t, LP_VMST_LFUNC, lua, 3, host, 2, 0, 0, 0);
	tb_sys(&t, LP_VMST_GC, NULL, 0, gc, 1, 0, 0, 0);
	tb_sys(&t, LP_VMST_INTERP, NULL, 0, NULL, 0, 0, 0, 0);
	tb_sys(&t, LP_VMST_TRACE, NULL, 0, NULL, 0, 3, 0x1234, 1);
	tb_sym_lua(&t, 0x1234, "f", 1, 1);
	tb_sym_cfunc(&t, 0xff, "g", 1);
	tb_sym_trace(&t, 3, 0x1234, 2);
	lp_write_sysprof_epilogue(&t.w);
	tb_finish(&t);
	check_bytes(&t, want, sizeof(want), "sysprof");
	struct reclist got = {0};
	struct result r = parse_mem(want, sizeof(want), &got);
	CHECK_EQ(r.rc, LP_OK);
	check_prefix(&got, &t.expect, t.expect.n, "hand-written sysprof");
	rec_free(&got);
	tb_free(&t);
}

/* -- Error paths ------------------------------------------------------------------ */

/* Cutting a valid stream anywhere must give TRUNCATED at the cut, after delivering exactly
 * the items that ended before it. */
static void check_every_cut(const struct tb *t, const char *what)
{
	size_t bad = 0;
	for (size_t cut = 0; cut < t->sink.len; cut++) {
		size_t before = 0, events = 0;
		while (before < t->expect.n && t->expect.v[before].end <= cut) {
			events += t->expect.v[before].kind == R_MEM || t->expect.v[before].kind == R_SYS;
			before++;
		}
		struct reclist got = {0};
		struct result r = parse_mem(t->sink.data, cut, &got);
		int fails = unit_test_failed;
		CHECK_EQ(r.rc, LP_ERR_TRUNCATED);
		CHECK_EQ(r.err_offset, cut);
		CHECK_EQ(r.st.complete, 0);
		CHECK_EQ(r.st.events, events);
		CHECK_EQ(r.st.bytes, cut);
		check_prefix(&got, &t->expect, before, what);
		rec_free(&got);
		if (unit_test_failed != fails) {
			fprintf(stderr, "  %s: cut at byte %zu of %zu failed\n", what, cut, t->sink.len);
			if (++bad > 3)
				break;
		}
	}
}

static void test_truncation_every_offset(void)
{
	struct tb t;
	tb_init(&t, 1 << 16);
	build_memprof(&t, 0);
	check_every_cut(&t, "memprof cut");
	tb_free(&t);
	tb_init(&t, 1 << 16);
	build_sysprof(&t);
	check_every_cut(&t, "sysprof cut");

	/* The message of a cut inside the profile section says what the report still covers. */
	struct reclist got = {0};
	struct result r = parse_mem(t.sink.data, t.sink.len - 1, &got);
	CHECK_EQ(r.rc, LP_ERR_TRUNCATED);
	CHECK(strstr(r.msg, "truncated") != NULL);
	CHECK(strstr(r.msg, "no epilogue") != NULL);
	rec_free(&got);
	/* Cut through a pipe as well. */
	for (size_t cut = 0; cut < t.sink.len; cut += 37) {
		r = parse_pipe(t.sink.data, cut, 5, &got);
		CHECK_EQ(r.rc, LP_ERR_TRUNCATED);
		CHECK_EQ(r.err_offset, cut);
		rec_free(&got);
	}
	tb_free(&t);
}

static void test_empty_input(void)
{
	struct reclist got = {0};
	struct result r = parse_mem("", 0, &got);
	CHECK_EQ(r.rc, LP_ERR_TRUNCATED);
	CHECK_EQ(r.err_offset, 0);
	CHECK_EQ(got.n, 0);
	CHECK_EQ(r.st.kind, 0);
	/* A symtab with nothing after it. */
	static const uint8_t only_symtab[] = { 'l', 'j', 's', 3, 0, 0, 0, 0x80 };
	r = parse_mem(only_symtab, sizeof(only_symtab), &got);
	CHECK_EQ(r.rc, LP_ERR_TRUNCATED);
	CHECK_EQ(r.err_offset, 8);
	CHECK(strstr(r.msg, "not followed by a profile") != NULL);
	rec_free(&got);
}

static void test_wrong_magic(void)
{
	struct reclist got = {0};
	static const uint8_t bad0[] = { 'l', 'j', 'x', 3, 0, 0, 0, 0x80, 'l', 'j', 'm', 3, 0, 0, 0,
					0x80 };
	struct result r = parse_mem(bad0, sizeof(bad0), &got);
	CHECK_EQ(r.rc, LP_ERR_FORMAT);
	CHECK_EQ(r.err_offset, 0);
	CHECK(strstr(r.msg, "ljs") != NULL);
	CHECK_EQ(got.n, 0);
	/* Tarantool's parsers get non-profile data, e.g. a text file. */
	r = parse_mem("hello, world\n", 13, &got);
	CHECK_EQ(r.rc, LP_ERR_FORMAT);
	CHECK_EQ(r.err_offset, 0);
	/* A profile section with an unknown magic, after an empty and after a longer symtab. */
	static const uint8_t bad8[] = { 'l', 'j', 's', 3, 0, 0, 0, 0x80, 'l', 'j', 'q', 3, 0, 0, 0,
					0x80 };
	r = parse_mem(bad8, sizeof(bad8), &got);
	CHECK_EQ(r.rc, LP_ERR_FORMAT);
	CHECK_EQ(r.err_offset, 8);
	CHECK(strstr(r.msg, "ljm") != NULL && strstr(r.msg, "ljp") != NULL);
	CHECK_EQ(got.n, 1); /* symtab_end */
	rec_free(&got);
	struct tb t;
	tb_init(&t, 64);
	tb_symtab(&t);
	tb_sym_cfunc(&t, 1, "f", 1);
	tb_symtab_end(&t);
	uint64_t at = tb_offset(&t);
	lp_wbuf_bytes(&t.w, "LJM\3\0\0\0\x80", 8);
	tb_finish(&t);
	r = parse_mem(t.sink.data, t.sink.len, &got);
	CHECK_EQ(r.rc, LP_ERR_FORMAT);
	CHECK_EQ(r.err_offset, at);
	CHECK_EQ(at, 12);
	check_prefix(&got, &t.expect, t.expect.n, "bad profile magic");
	rec_free(&got);
	tb_free(&t);
}

static void test_unknown_version(void)
{
	struct reclist got = {0};
	static const uint8_t s4[] = { 'l', 'j', 's', 4, 0, 0, 0, 0x80, 'l', 'j', 'm', 3, 0, 0, 0,
				      0x80 };
	struct result r = parse_mem(s4, sizeof(s4), &got);
	CHECK_EQ(r.rc, LP_ERR_VERSION);
	CHECK_EQ(r.err_offset, 3);
	CHECK(strstr(r.msg, "expects 3, the file has 4") != NULL);
	CHECK(strstr(r.msg, "symtab") != NULL);
	static const uint8_t m4[] = { 'l', 'j', 's', 3, 0, 0, 0, 0x80, 'l', 'j', 'm', 4, 0, 0, 0,
				      0x80 };
	r = parse_mem(m4, sizeof(m4), &got);
	CHECK_EQ(r.rc, LP_ERR_VERSION);
	CHECK_EQ(r.err_offset, 11);
	CHECK(strstr(r.msg, "expects 3, the file has 4") != NULL);
	CHECK(strstr(r.msg, "memprof") != NULL);
	static const uint8_t p1[] = { 'l', 'j', 's', 3, 0, 0, 0, 0x80, 'l', 'j', 'p', 1, 0, 0, 0,
				      0x80 };
	r = parse_mem(p1, sizeof(p1), &got);
	CHECK_EQ(r.rc, LP_ERR_VERSION);
	CHECK(strstr(r.msg, "expects 2, the file has 1") != NULL);
	CHECK(strstr(r.msg, "sysprof") != NULL);
	rec_free(&got);
}

static void test_absurd_string_length(void)
{
	/* A Lua symbol whose chunk name claims 2^62 bytes, then one claiming 16 MiB + 1. */
	static const uint64_t lens[] = { 1ull << 62, UINT64_MAX, LP_INPUT_MAX_STRING + 1ull };
	for (size_t i = 0; i < 3; i++) {
		struct tb t;
		tb_init(&t, 64);
		tb_symtab(&t);
		tb_sym_cfunc(&t, 5, "ok", 2);
		uint64_t at = tb_offset(&t);
		lp_wbuf_u8(&t.w, LP_SYMTAB_LFUNC);
		lp_wbuf_uleb(&t.w, 0x1234);
		lp_wbuf_uleb(&t.w, lens[i]);
		lp_wbuf_bytes(&t.w, "abcdef", 6);
		tb_finish(&t);
		struct reclist got = {0};
		clock_t t0 = clock();
		struct result r = parse_mem(t.sink.data, t.sink.len, &got);
		double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
		CHECK_EQ(r.rc, LP_ERR_FORMAT);
		CHECK_EQ(r.err_offset, at + 3); /* the length itself */
		CHECK(strstr(r.msg, "exceeds") != NULL);
		CHECK(r.strcap < 4096);
		CHECK(secs < 0.5);
		check_prefix(&got, &t.expect, t.expect.n, "absurd length");
		rec_free(&got);
		tb_free(&t);
	}
	/* A length just inside the limit with the bytes missing: truncation, not a 16 MiB buffer. */
	struct tb t;
	tb_init(&t, 64);
	tb_symtab(&t);
	lp_wbuf_u8(&t.w, LP_SYMTAB_CFUNC);
	lp_wbuf_uleb(&t.w, 1);
	lp_wbuf_uleb(&t.w, LP_INPUT_MAX_STRING);
	lp_wbuf_bytes(&t.w, "abc", 3);
	tb_finish(&t);
	struct reclist got = {0};
	struct result r = parse_mem(t.sink.data, t.sink.len, &got);
	CHECK_EQ(r.rc, LP_ERR_TRUNCATED);
	CHECK_EQ(r.err_offset, t.sink.len);
	CHECK(r.strcap <= (256u << 10));
	rec_free(&got);
	tb_free(&t);
}

/* A sysprof stream with one sample of nlua Lua frames and nhost host frames. */
static void deep_sample(struct tb *t, uint8_t vmstate, size_t nlua, size_t nhost)
{
	tb_init(t, 1 << 16);
	tb_symtab(t);
	tb_symtab_end(t);
	tb_sysprof(t);
	struct lp_lua_frame *lua = calloc(nlua + 1, sizeof(*lua));
	uint64_t *host = calloc(nhost + 1, sizeof(*host));
	for (size_t i = 0; i < nlua; i++) {
		lua[i].type = LP_FRAME_CFUNC;
		lua[i].addr = i + 1;
	}
	for (size_t i = 0; i < nhost; i++)
		host[i] = 0x1000 + i;
	tb_sys(t, vmstate, lua, nlua, host, nhost, 0, 0, 0);
	lp_write_sysprof_epilogue(&t->w);
	tb_finish(t);
	free(lua);
	free(host);
}

static void test_too_many_frames(void)
{
	struct tb t;
	struct reclist got = {0};
	struct result r;

	deep_sample(&t, LP_VMST_INTERP, 0, LP_MAX_HOST_FRAMES);
	r = parse_mem(t.sink.data, t.sink.len, &got);
	CHECK_EQ(r.rc, LP_OK);
	check_prefix(&got, &t.expect, t.expect.n, "8192 host frames");
	rec_free(&got);
	tb_free(&t);

	deep_sample(&t, LP_VMST_GC, 0, LP_MAX_HOST_FRAMES + 1);
	uint64_t sample_at = t.expect.v[t.expect.n - 1].sys.offset;
	r = parse_mem(t.sink.data, t.sink.len, &got);
	CHECK_EQ(r.rc, LP_ERR_FORMAT);
	CHECK_EQ(r.err_offset, sample_at);
	CHECK(strstr(r.msg, "more than 8192 frames") != NULL);
	CHECK_EQ(got.n, 2); /* symtab_end, stream */
	rec_free(&got);
	tb_free(&t);

	deep_sample(&t, LP_VMST_CFUNC, LP_MAX_LUA_FRAMES, 3);
	r = parse_mem(t.sink.data, t.sink.len, &got);
	CHECK_EQ(r.rc, LP_OK);
	check_prefix(&got, &t.expect, t.expect.n, "65536 Lua frames");
	rec_free(&got);
	tb_free(&t);

	deep_sample(&t, LP_VMST_LFUNC, LP_MAX_LUA_FRAMES + 1, 3);
	r = parse_mem(t.sink.data, t.sink.len, &got);
	CHECK_EQ(r.rc, LP_ERR_FORMAT);
	CHECK(strstr(r.msg, "more than 65536 frames") != NULL);
	rec_free(&got);
	tb_free(&t);
}

static void test_garbage_after_epilogue(void)
{
	struct tb t;
	tb_init(&t, 4096);
	build_sysprof(&t);
	size_t len = t.sink.len;
	uint8_t *more = malloc(len + 3);
	memcpy(more, t.sink.data, len);
	memcpy(more + len, "\x01\x02\x03", 3);
	struct reclist got = {0};
	struct result r = parse_mem(more, len + 1, &got);
	CHECK_EQ(r.rc, LP_ERR_FORMAT);
	CHECK_EQ(r.err_offset, len);
	CHECK(strstr(r.msg, "after the epilogue") != NULL);
	check_prefix(&got, &t.expect, t.expect.n, "garbage after epilogue");
	rec_free(&got);
	r = parse_pipe(more, len + 3, 1, &got);
	CHECK_EQ(r.rc, LP_ERR_FORMAT);
	CHECK_EQ(r.err_offset, len);
	rec_free(&got);
	/* A second whole stream appended is garbage too. */
	uint8_t *twice = malloc(2 * len);
	memcpy(twice, t.sink.data, len);
	memcpy(twice + len, t.sink.data, len);
	r = parse_mem(twice, 2 * len, &got);
	CHECK_EQ(r.rc, LP_ERR_FORMAT);
	CHECK_EQ(r.err_offset, len);
	rec_free(&got);
	free(twice);
	free(more);
	tb_free(&t);
}

/* A valid prefix (empty symtab + profile prologue) followed by `tail`. */
static struct result parse_tail(const char *magic, const uint8_t *tail, size_t n)
{
	uint8_t buf[64] = { 'l', 'j', 's', 3, 0, 0, 0, 0x80, 'l', 'j', (uint8_t)magic[2], 0, 0, 0, 0 };
	buf[11] = magic[2] == 'm' ? LP_MEMPROF_VERSION : LP_SYSPROF_VERSION;
	memcpy(buf + 15, tail, n);
	struct reclist got = {0};
	struct result r = parse_mem(buf, 15 + n, &got);
	rec_free(&got);
	return r;
}

static void test_unknown_headers(void)
{
	/* Memprof: symtab-from-INT, source 0, source 5..7, high bits. */
	static const uint8_t mem_bad[] = { 0x00, 0x01, 0x02, 0x03, 0x04, 0x14, 0x15, 0x1c, 0x20,
					   0x40, 0x81, 0xff };
	for (size_t i = 0; i < sizeof(mem_bad); i++) {
		uint8_t tail[] = { mem_bad[i], 0, 0, 0, 0, 0, 0x80 };
		struct result r = parse_tail("ljm", tail, sizeof(tail));
		CHECK_EQ(r.rc, LP_ERR_FORMAT);
		CHECK_EQ(r.err_offset, 15);
		CHECK(strstr(r.msg, "unknown memprof event header") != NULL);
	}
	/* Sysprof: states 10..12 are symbols, 13+ are unknown (except the epilogue). */
	static const uint8_t sys_bad[] = { 13, 14, 0x7f, 0x81, 0xff };
	for (size_t i = 0; i < sizeof(sys_bad); i++) {
		uint8_t tail[] = { sys_bad[i], 0, 0x80 };
		struct result r = parse_tail("ljp", tail, sizeof(tail));
		CHECK_EQ(r.rc, LP_ERR_FORMAT);
		CHECK_EQ(r.err_offset, 15);
	}
	/* Lua frame headers 0 and 4. */
	static const uint8_t frame_bad[] = { 0, 4, 0x7f };
	for (size_t i = 0; i < sizeof(frame_bad); i++) {
		uint8_t tail[] = { LP_VMST_LFUNC, LP_FRAME_CFUNC, 0x05, frame_bad[i], 0x80, 0, 0x80 };
		struct result r = parse_tail("ljp", tail, sizeof(tail));
		CHECK_EQ(r.rc, LP_ERR_FORMAT);
		CHECK_EQ(r.err_offset, 18);
		CHECK(strstr(r.msg, "Lua frame header") != NULL);
	}
	/* Symtab entry header 3 and 0x7f (only 0, 1, 2 and 0x80 exist). */
	static const uint8_t sym_bad[] = { 3, 0x7f, 0x81 };
	for (size_t i = 0; i < sizeof(sym_bad); i++) {
		uint8_t buf[] = { 'l', 'j', 's', 3, 0, 0, 0, sym_bad[i], 0, 0, 0x80 };
		struct reclist got = {0};
		struct result r = parse_mem(buf, sizeof(buf), &got);
		CHECK_EQ(r.rc, LP_ERR_FORMAT);
		CHECK_EQ(r.err_offset, 7);
		rec_free(&got);
	}
}

static void test_consumer_abort(void)
{
	struct tb t;
	tb_init(&t, 4096);
	build_memprof(&t, 0);
	for (size_t stop = 1; stop <= t.expect.n; stop += 5) {
		struct reclist got = { .abort_at = stop };
		struct result r = parse_mem(t.sink.data, t.sink.len, &got);
		CHECK_EQ(r.rc, LP_ERR_ABORT);
		check_prefix(&got, &t.expect, stop, "abort");
		rec_free(&got);
	}
	tb_free(&t);
}

static void test_read_error(void)
{
	/* Reading a directory fails with EISDIR: an I/O error, not truncation. */
	int fd = open(".", O_RDONLY | O_DIRECTORY);
	CHECK(fd >= 0);
	struct lp_input in;
	struct reclist got = {0};
	struct lp_parse_handlers h = recorder(&got);
	CHECK_EQ(lp_input_open_fd(&in, fd, "dir"), LP_OK);
	CHECK_EQ(lp_parse_stream(&in, &h, NULL), LP_ERR_IO);
	CHECK(strstr(in.err, "read failed") != NULL);
	lp_input_close(&in);
	close(fd);
	rec_free(&got);
}

static void test_vmstate_names(void)
{
	static const char *const want[] = { "INTERP", "LFUNC", "FFUNC", "CFUNC", "GC",
					    "EXIT", "RECORD", "OPT", "ASM", "TRACE" };
	for (unsigned i = 0; i < LP_VMST__MAX; i++)
		CHECK_STR(lp_vmstate_name(i), want[i]);
	CHECK(lp_vmstate_name(LP_VMST__MAX) == NULL);
	CHECK(lp_vmstate_name(0x80) == NULL);
}

/* -- Tarantool's own streams (../shared/vectors/tarantool) ------------------------- */

struct census {
	uint64_t syms[3], symtab_syms, mid_syms;
	int in_profile;
	uint64_t mem[4][5];      /* [event][source >> 2] */
	uint64_t alloc_bytes, realloc_new, realloc_old, free_bytes;
	uint64_t vmstate[LP_VMST__MAX];
	uint64_t lua_frames, host_frames, max_host;
};

static int cen_stream(void *ctx, enum lp_stream_kind kind, unsigned version)
{
	((struct census *)ctx)->in_profile = 1;
	return 0;
}

static void cen_sym(struct census *c, int kind)
{
	c->syms[kind]++;
	if (c->in_profile)
		c->mid_syms++;
	else
		c->symtab_syms++;
}

static int cen_lua(void *ctx, uint64_t addr, const char *s, size_t len, uint64_t line)
{
	cen_sym(ctx, 0);
	return 0;
}

static int cen_c(void *ctx, uint64_t addr, const char *s, size_t len)
{
	cen_sym(ctx, 1);
	return 0;
}

static int cen_trace(void *ctx, uint64_t traceno, uint64_t addr, uint64_t line)
{
	cen_sym(ctx, 2);
	return 0;
}

static int cen_mem(void *ctx, const struct lp_mem_event *ev)
{
	struct census *c = ctx;
	c->mem[ev->event][ev->source >> 2]++;
	if (ev->event == LP_AEVENT_ALLOC) {
		c->alloc_bytes += ev->nsize;
	} else if (ev->event == LP_AEVENT_REALLOC) {
		c->realloc_new += ev->nsize;
		c->realloc_old += ev->osize;
	} else {
		c->free_bytes += ev->osize;
	}
	return 0;
}

static int cen_sys(void *ctx, const struct lp_sys_sample *s)
{
	struct census *c = ctx;
	c->vmstate[s->vmstate]++;
	c->lua_frames += s->nlua;
	c->host_frames += s->nhost;
	if (s->nhost > c->max_host)
		c->max_host = s->nhost;
	return 0;
}

static const char *vector_dir(void)
{
	const char *d = getenv("LUAPROF_VECTORS");
	return d ? d : "../shared/vectors/tarantool";
}

static int have_vector(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", vector_dir(), name);
	if (access(path, R_OK) == 0)
		return 1;
	printf("SKIP %s: not found (set LUAPROF_VECTORS)\n", path);
	return 0;
}

/* Parses a vector file through the fd path; returns 0 when the file is absent. */
static int census_file(const char *name, struct census *c, struct result *r)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", vector_dir(), name);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return 0;
	memset(c, 0, sizeof(*c));
	memset(r, 0, sizeof(*r));
	struct lp_parse_handlers h = {
		.ctx = c, .stream = cen_stream, .sym_lua = cen_lua, .sym_cfunc = cen_c,
		.sym_trace = cen_trace, .mem_event = cen_mem, .sys_sample = cen_sys,
	};
	struct lp_input in;
	r->rc = lp_input_open_fd(&in, fd, path);
	if (r->rc == LP_OK)
		r->rc = lp_parse_stream(&in, &h, &r->st);
	lp_input_message(&in, r->msg, sizeof(r->msg));
	lp_input_close(&in);
	struct stat sb;
	fstat(fd, &sb);
	close(fd);
	r->file_size = (uint64_t)sb.st_size;
	if (r->rc != LP_OK)
		fprintf(stderr, "  %s\n", r->msg);
	return 1;
}

/* Cuts a vector at ~200 places: always TRUNCATED at the cut, with events never decreasing. */
static void check_vector_cuts(const char *name)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", vector_dir(), name);
	FILE *f = fopen(path, "rb");
	if (!f)
		return;
	static uint8_t data[1 << 20];
	size_t len = fread(data, 1, sizeof(data), f);
	fclose(f);
	uint64_t last = 0;
	for (size_t cut = 0; cut < len; cut += len / 200 + 1) {
		struct lp_input in;
		struct lp_parse_stats st;
		struct lp_parse_handlers h = {0};
		uint8_t *copy = dup_bytes(data, cut);
		lp_input_open_mem(&in, copy, cut, name);
		int rc = lp_parse_stream(&in, &h, &st);
		CHECK_EQ(rc, LP_ERR_TRUNCATED);
		CHECK_EQ(in.err_offset, cut);
		CHECK(st.events >= last);
		last = st.events;
		lp_input_close(&in);
		free(copy);
	}
	/* And the whole file through a pipe gives the same counts as the file. */
	struct reclist got = {0};
	struct result r = parse_pipe(data, len, 4000, &got);
	CHECK_EQ(r.rc, LP_OK);
	CHECK_EQ(r.st.bytes, len);
	CHECK(r.st.events >= last);
	rec_free(&got);
}

static void test_vector_mp_leak(void)
{
	struct census c;
	struct result r;
	if (!census_file("mp_leak.bin", &c, &r)) {
		CHECK(!"mp_leak.bin disappeared");
		return;
	}
	CHECK_EQ(r.rc, LP_OK);
	CHECK_EQ(r.st.complete, 1);
	CHECK_EQ(r.st.kind, LP_STREAM_MEMPROF);
	CHECK_EQ(r.st.bytes, r.file_size);
	/* luajit -tm: allocations 3000+301+1+1+1 = 3304, 8 reallocations, 3023 frees: 6335. */
	CHECK_EQ(r.st.events, 6335);
	CHECK_EQ(c.mem[LP_AEVENT_ALLOC][LP_ASOURCE_LFUNC >> 2], 3304);
	CHECK_EQ(c.mem[LP_AEVENT_REALLOC][LP_ASOURCE_LFUNC >> 2], 8);
	CHECK_EQ(c.mem[LP_AEVENT_FREE][LP_ASOURCE_INT >> 2], 3023);
	uint64_t total = 0;
	for (int e = 0; e < 4; e++)
		for (int s = 0; s < 5; s++)
			total += c.mem[e][s];
	CHECK_EQ(total, 6335);
	CHECK_EQ(c.alloc_bytes, 168000 + 16824 + 32 + 20 + 20);
	CHECK_EQ(c.realloc_new, 8224);
	CHECK_EQ(c.realloc_old, 4144);
	CHECK_EQ(c.free_bytes, 169340);
	/* The symtab carries the fork's ELF symbols; nothing was added mid-stream. */
	CHECK_EQ(r.st.symbols, c.symtab_syms + c.mid_syms);
	CHECK_EQ(c.symtab_syms, 5718);
	CHECK_EQ(c.syms[0], 11);
	CHECK_EQ(c.syms[1], 5707);
	CHECK_EQ(c.syms[2], 0);
	CHECK_EQ(c.mid_syms, 0);
	check_vector_cuts("mp_leak.bin");
	printf("  mp_leak: %llu symbols (%llu Lua, %llu C, %llu traces), %llu events\n",
	       (unsigned long long)r.st.symbols, (unsigned long long)c.syms[0],
	       (unsigned long long)c.syms[1], (unsigned long long)c.syms[2],
	       (unsigned long long)r.st.events);
}

static void test_vector_sp_fib(void)
{
	struct census c;
	struct result r;
	if (!census_file("sp_fib_L.bin", &c, &r)) {
		CHECK(!"sp_fib_L.bin disappeared");
		return;
	}
	CHECK_EQ(r.rc, LP_OK);
	CHECK_EQ(r.st.complete, 1);
	CHECK_EQ(r.st.kind, LP_STREAM_SYSPROF);
	CHECK_EQ(r.st.bytes, r.file_size);
	/* Counts observed on the file as shipped (sysprof L mode, 1 ms, JIT off). */
	static const uint64_t want[LP_VMST__MAX] = { [LP_VMST_INTERP] = 47, [LP_VMST_LFUNC] = 58,
						      [LP_VMST_FFUNC] = 1 };
	uint64_t sum = 0;
	printf("  sp_fib_L:");
	for (unsigned i = 0; i < LP_VMST__MAX; i++) {
		printf(" %s=%llu", lp_vmstate_name(i), (unsigned long long)c.vmstate[i]);
		sum += c.vmstate[i];
	}
	printf(" symbols=%llu lua_frames=%llu host_frames=%llu max_host=%llu\n",
	       (unsigned long long)r.st.symbols, (unsigned long long)c.lua_frames,
	       (unsigned long long)c.host_frames, (unsigned long long)c.max_host);
	CHECK_EQ(sum, r.st.events);
	CHECK_EQ(r.st.events, 106);
	for (unsigned i = 0; i < LP_VMST__MAX; i++)
		CHECK_EQ(c.vmstate[i], want[i]);
	/* L mode: Lua stacks only, the host stacks are empty in this file. */
	CHECK_EQ(c.lua_frames, 951);
	CHECK_EQ(c.host_frames, 0);
	CHECK_EQ(r.st.symbols, 5719);
	CHECK_EQ(c.mid_syms, 0);
	check_vector_cuts("sp_fib_L.bin");
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	RUN(test_uleb_known_encodings);
	RUN(test_uleb_round_trip_all_widths);
	RUN(test_uleb_inline_writers);
	RUN(test_put_sys_stacks_as_written);
	RUN(test_uleb_overflow_rejected);
	RUN(test_uleb_truncated);
	RUN(test_wbuf_short_write_keeps_errno);
	RUN(test_wbuf_stop);
	RUN(test_wbuf_small_buffer_many_flushes);
	RUN(test_wbuf_writer_swaps_buffer);
	RUN(test_round_trip_memprof);
	RUN(test_round_trip_sysprof);
	RUN(test_round_trip_random);
	RUN(test_bytes_symtab_memprof);
	RUN(test_bytes_sysprof);
	RUN(test_truncation_every_offset);
	RUN(test_empty_input);
	RUN(test_wrong_magic);
	RUN(test_unknown_version);
	RUN(test_absurd_string_length);
	RUN(test_too_many_frames);
	RUN(test_garbage_after_epilogue);
	RUN(test_unknown_headers);
	RUN(test_consumer_abort);
	RUN(test_read_error);
	RUN(test_vmstate_names);
	/* Tarantool's streams live beside the repository (../shared); skip when absent. */
	if (have_vector("mp_leak.bin"))
		RUN(test_vector_mp_leak);
	if (have_vector("sp_fib_L.bin"))
		RUN(test_vector_sp_fib);
	return UNIT_RESULT();
}
