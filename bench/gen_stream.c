/*
** Benchmark input generator: realistic memprof and sysprof streams of a chosen size,
** written with stream/writer.h.
**
**   gen_stream memprof [-s SIZE] [-o FILE] [-S SEED]     default 1G (suffixes K, M, G; binary)
**   gen_stream sysprof [-n SAMPLES] [-o FILE] [-S SEED]  default 10000000 samples
**
** The shape follows what Tarantool's profilers write for a long-running application:
**   - symtab: ~2000 Lua protos over 50 chunks, a few hundred C functions, 200 traces;
**   - memprof: a steady-state heap of ~100k live blocks; allocations, reallocations and frees
**     from all four sources with skewed hot spots, frees mostly by the GC (INTERNAL), every
**     free and realloc naming a block that is live at that point, addresses reused per size
**     class as an allocator would; new protos, traces and a C library appear mid-stream;
**   - sysprof: samples in all 10 VM states drawn from 20000 stack shapes of 5..60 frames
**     (host + Lua), hot shapes much more frequent, the innermost line varying; new protos and
**     traces mid-stream.
** Output is deterministic for a given seed. FILE "-" (the default) is stdout.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "luaprof/format.h"
#include "stream/wbuf.h"
#include "stream/writer.h"

/* -- Output -------------------------------------------------------------------- */

static int out_fd = 1;
static uint8_t out_buf[1 << 20];
static struct lp_wbuf W;

static size_t fd_writer(const void **data, size_t len, void *ctx)
{
	const uint8_t *p = *data;
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(out_fd, p + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	return done;
}

static uint64_t out_offset(void)
{
	return W.written + (uint64_t)(W.pos - W.buf);
}

/* -- Randomness ------------------------------------------------------------------ */

static uint64_t rng = 0x853c49e6748fea9bull;

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

static uint32_t below(uint32_t n)
{
	return (uint32_t)(((rnd() >> 32) * n) >> 32);
}

/* An index in [0, n) where low indices are much more likely (hot spots): ~u^3. */
static uint32_t skewed(uint32_t n)
{
	double u = (double)(rnd() >> 11) / 9007199254740992.0;
	uint32_t i = (uint32_t)(u * u * u * n);
	return i < n ? i : n - 1;
}

/* -- Symbols ---------------------------------------------------------------------- */

#define NCHUNKS 50
#define NPROTOS 2000
#define NCFUNCS 320
#define NTRACES 200
#define MAXPROTOS (NPROTOS + 4096)
#define MAXTRACES (NTRACES + 4096)

struct proto { uint64_t addr, line; unsigned chunk; };
struct cfunc { uint64_t addr; };
struct trace { uint64_t no, proto, line; };

static char chunk_names[NCHUNKS][64];
static struct proto protos[MAXPROTOS];
static struct cfunc cfuncs[NCFUNCS + 64];
static struct trace traces[MAXTRACES];
static unsigned nprotos, ncfuncs, ntraces;

static const char *const cfunc_stems[] = {
	"lj_str_new", "lj_tab_new", "lj_tab_resize", "lj_func_newL_gc", "lj_buf_more2",
	"lj_gc_step", "lj_mem_realloc", "lj_vm_call", "lj_vm_pcall", "lj_BC_FUNCC",
	"lua_pcall", "lua_call", "luaL_loadbuffer", "luaopen_base", "lj_cf_string_format",
	"lj_cf_table_concat", "lj_ffh_tostring", "ngx_http_lua_content_handler",
	"ngx_http_lua_socket_tcp_receive", "ngx_http_lua_ngx_say", "cjson_encode", "cjson_decode",
	"json_append_data", "malloc", "free", "realloc", "memcpy", "__libc_start_main", "main",
	"epoll_wait", "read", "write", "pcre_exec", "SSL_read", "SSL_write", "inflate", "deflate",
};
#define NSTEMS (sizeof(cfunc_stems) / sizeof(cfunc_stems[0]))

static uint64_t proto_addr(unsigned i)
{
	return 0x7f3a10000000ull + (uint64_t)i * 0x98 + (uint64_t)(i % 7) * 0x10;
}

static void make_symbols(void)
{
	for (unsigned c = 0; c < NCHUNKS; c++) {
		if (c % 5 == 4)
			snprintf(chunk_names[c], sizeof(chunk_names[c]),
				 "@/usr/local/openresty/lualib/resty/mod%02u.lua", c);
		else
			snprintf(chunk_names[c], sizeof(chunk_names[c]), "@app/handlers/h%02u.lua", c);
	}
	uint64_t line[NCHUNKS] = {0};
	for (unsigned i = 0; i < NPROTOS; i++) {
		unsigned c = below(NCHUNKS);
		line[c] += 3 + below(40);
		protos[i] = (struct proto){ proto_addr(i), line[c], c };
	}
	nprotos = NPROTOS;
	for (unsigned i = 0; i < NCFUNCS; i++) {
		uint64_t base = i < 200 ? 0x555555554000ull : 0x7f3b00000000ull + (i / 40) * 0x1000000;
		cfuncs[i].addr = base + (uint64_t)i * 0x400 + 0x40;
	}
	ncfuncs = NCFUNCS;
	for (unsigned i = 0; i < NTRACES; i++) {
		const struct proto *p = &protos[skewed(NPROTOS)];
		traces[i] = (struct trace){ i + 1, p->addr, p->line + below(20) };
	}
	ntraces = NTRACES;
}

static void cfunc_name(unsigned i, char *buf, size_t len)
{
	if (i < NSTEMS)
		snprintf(buf, len, "%s", cfunc_stems[i]);
	else
		snprintf(buf, len, "%s_%u", cfunc_stems[i % NSTEMS], i);
}

static void write_symtab(void)
{
	char name[96];
	lp_write_symtab_prologue(&W);
	for (unsigned i = 0; i < nprotos; i++) {
		const char *ch = chunk_names[protos[i].chunk];
		lp_write_sym_lua(&W, protos[i].addr, ch, strlen(ch), protos[i].line);
	}
	for (unsigned i = 0; i < ncfuncs; i++) {
		cfunc_name(i, name, sizeof(name));
		lp_write_sym_cfunc(&W, cfuncs[i].addr, name, strlen(name));
	}
	for (unsigned i = 0; i < ntraces; i++)
		lp_write_sym_trace(&W, traces[i].no, traces[i].proto, traces[i].line);
	lp_write_symtab_final(&W);
}

/* A proto loaded while profiling (e.g. by load()); returns its index or -1 when full. */
static int new_proto(void)
{
	if (nprotos == MAXPROTOS)
		return -1;
	unsigned i = nprotos++;
	protos[i] = (struct proto){ proto_addr(i), 1 + below(200), below(NCHUNKS) };
	return (int)i;
}

static int new_trace(void)
{
	if (ntraces == MAXTRACES)
		return -1;
	unsigned i = ntraces++;
	const struct proto *p = &protos[skewed(nprotos)];
	traces[i] = (struct trace){ i + 1, p->addr, p->line + below(20) };
	return (int)i;
}

/* -- Memprof -------------------------------------------------------------------------- */

#define LIVE_MAX 200000
#define LIVE_TARGET 100000
#define NCLASSES 64
#define FREELIST 4096

/* A live block and the site that allocated it (source, proto or C function, line, trace). */
struct block {
	uint64_t addr, size;
	uint64_t loc_addr, loc_line, traceno;
	uint8_t source;
};

static struct block live[LIVE_MAX];
static unsigned nlive;
static uint64_t bump = 0x7f4000000000ull;
/* Recently freed addresses per size class, reused first (LIFO), as an allocator would. */
static uint64_t freelist[NCLASSES][FREELIST];
static unsigned nfree[NCLASSES];

static unsigned size_class(uint64_t size)
{
	unsigned c = 0;
	while (size > 16 && c < NCLASSES - 1) {
		size = (size + 1) / 2;
		c++;
	}
	return c;
}

static uint64_t plausible_size(void)
{
	uint32_t r = below(1000);
	if (r < 700)
		return 16 + 8 * below(15);       /* strings, small tables, closures */
	if (r < 900)
		return 128 + 8 * below(112);     /* arrays, buffers */
	if (r < 985)
		return 1024 + 16 * below(960);
	if (r < 998)
		return 16384 + 64 * below(768);
	return 65536 + 256 * below(3840);    /* up to ~1 MiB */
}

static uint64_t place(uint64_t size)
{
	unsigned c = size_class(size);
	if (nfree[c] > 0)
		return freelist[c][--nfree[c]];
	uint64_t a = bump;
	bump += ((uint64_t)1 << (c + 4)) + 16; /* room for the whole class plus a header */
	return a;
}

static void unplace(uint64_t addr, uint64_t size)
{
	unsigned c = size_class(size);
	if (nfree[c] < FREELIST)
		freelist[c][nfree[c]++] = addr;
}

/* Fills the location part of an event from a source: a hot spot among ~4 allocation sites
 * per proto (so the number of distinct sites stays realistic: ~8000 Lua, 320 C, 200 traces). */
static void locate(struct lp_mem_event *ev, uint8_t source)
{
	ev->source = source;
	if (source == LP_ASOURCE_LFUNC) {
		const struct proto *p = &protos[skewed(nprotos)];
		ev->loc_addr = p->addr;
		ev->loc_line = p->line + below(4);
	} else if (source == LP_ASOURCE_CFUNC) {
		ev->loc_addr = cfuncs[skewed(ncfuncs)].addr;
	} else if (source == LP_ASOURCE_TRACE) {
		ev->traceno = traces[skewed(ntraces)].no;
	}
}

/* The site that allocated a block does most of its reallocs and explicit frees. */
static void locate_origin(struct lp_mem_event *ev, const struct block *b)
{
	ev->source = b->source;
	ev->loc_addr = b->loc_addr;
	ev->loc_line = b->loc_line;
	ev->traceno = b->traceno;
}

/* Code that frees or resizes blocks it did not allocate: one of a handful of hot functions,
 * always the same one for blocks of a given site (as the code that disposes of an object
 * depends on what the object is), so (site, origin) pairs stay few, as in real programs. */
static void locate_foreign(struct lp_mem_event *ev, const struct block *b)
{
	uint64_t h = (b->loc_addr ^ (b->loc_line << 20) ^ (b->traceno << 40) ^ b->source) *
		     0x9e3779b97f4a7c15ull;
	unsigned partner = (unsigned)(h >> 59); /* 0..31 */
	if (partner < 8) {
		ev->source = LP_ASOURCE_CFUNC;
		ev->loc_addr = cfuncs[partner].addr;
	} else {
		const struct proto *p = &protos[partner - 8];
		ev->source = LP_ASOURCE_LFUNC;
		ev->loc_addr = p->addr;
		ev->loc_line = p->line;
	}
}

static uint8_t pick_source(unsigned lfunc, unsigned cfunc, unsigned trace)
{
	uint32_t r = below(100);
	if (r < lfunc)
		return LP_ASOURCE_LFUNC;
	if (r < lfunc + cfunc)
		return LP_ASOURCE_CFUNC;
	if (r < lfunc + cfunc + trace)
		return LP_ASOURCE_TRACE;
	return LP_ASOURCE_INT;
}

static uint64_t gen_memprof(uint64_t target)
{
	uint64_t events = 0;
	char name[64];
	write_symtab();
	lp_write_memprof_prologue(&W);
	while (out_offset() < target && lp_wbuf_ok(&W)) {
		/* Mid-stream symbols: protos and traces now and then, a C library rarely. */
		if ((events & 0xfffff) == 0x80000) {
			int p = new_proto();
			if (p >= 0) {
				const char *ch = chunk_names[protos[p].chunk];
				lp_write_mem_sym_lua(&W, protos[p].addr, ch, strlen(ch), protos[p].line);
			}
			int t = new_trace();
			if (t >= 0)
				lp_write_mem_sym_trace(&W, traces[t].no, traces[t].proto, traces[t].line);
		}
		if ((events & 0xffffff) == 0x400000 && ncfuncs < NCFUNCS + 64) {
			unsigned i = ncfuncs++;
			cfuncs[i].addr = 0x7f5000000000ull + (uint64_t)i * 0x1000;
			snprintf(name, sizeof(name), "luaopen_plugin%u", i);
			lp_write_mem_sym_cfunc(&W, cfuncs[i].addr, name, strlen(name));
		}

		struct lp_mem_event ev;
		memset(&ev, 0, sizeof(ev));
		/* Keep the heap near its steady-state size. */
		uint32_t alloc_pct = nlive < LIVE_TARGET ? 58 : 42;
		uint32_t r = below(100);
		if (nlive == 0 || (r < alloc_pct && nlive < LIVE_MAX)) {
			ev.event = LP_AEVENT_ALLOC;
			locate(&ev, pick_source(65, 12, 8));
			ev.nsize = plausible_size();
			ev.naddr = place(ev.nsize);
			live[nlive++] = (struct block){ ev.naddr, ev.nsize, ev.loc_addr, ev.loc_line,
							ev.traceno, ev.source };
		} else if (r < alloc_pct + 8) {
			/* Tables and buffers growing: mostly where they were created. */
			ev.event = LP_AEVENT_REALLOC;
			struct block *b = &live[below(nlive)];
			if (below(100) < 85)
				locate_origin(&ev, b);
			else
				locate_foreign(&ev, b);
			ev.oaddr = b->addr;
			ev.osize = b->size;
			ev.nsize = b->size < (1u << 20) ? b->size * 2 : b->size / 2;
			ev.naddr = place(ev.nsize);
			unplace(b->addr, b->size);
			b->addr = ev.naddr;
			b->size = ev.nsize;
		} else {
			/* Frees: the GC (INTERNAL) for the most part. */
			ev.event = LP_AEVENT_FREE;
			unsigned i = below(nlive);
			uint32_t who = below(100);
			if (who < 88)
				ev.source = LP_ASOURCE_INT;
			else if (who < 96)
				locate_origin(&ev, &live[i]);
			else
				locate_foreign(&ev, &live[i]);
			ev.oaddr = live[i].addr;
			ev.osize = live[i].size;
			unplace(live[i].addr, live[i].size);
			live[i] = live[--nlive];
		}
		lp_write_mem_event(&W, &ev);
		events++;
	}
	lp_write_memprof_epilogue(&W);
	return events;
}

/* -- Sysprof --------------------------------------------------------------------------- */

#define NSHAPES 20000
#define MAXLUA 30
#define MAXHOST 30

struct shape {
	uint8_t vmstate, nlua, nhost;
	struct lp_lua_frame lua[MAXLUA];
	uint64_t host[MAXHOST];
	unsigned trace;
};

static struct shape *shapes;

static uint8_t pick_vmstate(void)
{
	/* LFUNC 45, FFUNC 12, CFUNC 12, TRACE 9, INTERP 8, GC 8, EXIT 2, RECORD 2, OPT 1, ASM 1. */
	static const uint8_t pct[LP_VMST__MAX] = { 8, 45, 12, 12, 8, 2, 2, 1, 1, 9 };
	uint32_t r = below(100), acc = 0;
	for (uint8_t s = 0; s < LP_VMST__MAX; s++) {
		acc += pct[s];
		if (r < acc)
			return s;
	}
	return LP_VMST_LFUNC;
}

/* A return address inside a known C function. */
static uint64_t host_addr(unsigned f)
{
	return cfuncs[f % NCFUNCS].addr + 0x10 + (f * 37u) % 0x300;
}

static void make_shapes(void)
{
	shapes = calloc(NSHAPES, sizeof(*shapes));
	if (!shapes) {
		fprintf(stderr, "gen_stream: out of memory\n");
		exit(1);
	}
	for (unsigned i = 0; i < NSHAPES; i++) {
		struct shape *s = &shapes[i];
		s->vmstate = pick_vmstate();
		int guest = s->vmstate == LP_VMST_LFUNC || s->vmstate == LP_VMST_FFUNC ||
			    s->vmstate == LP_VMST_CFUNC;
		/* 5..60 frames in all: Lua 2..30 (guest states), host 3..30. */
		s->nhost = (uint8_t)(3 + below(MAXHOST - 2));
		s->nlua = guest ? (uint8_t)(2 + below(MAXLUA - 1)) : 0;
		if (s->nhost + s->nlua < 5)
			s->nhost = (uint8_t)(5 - s->nlua);
		/* Lua frames, innermost first: the state decides the innermost frame's kind. */
		for (unsigned j = 0; j < s->nlua; j++) {
			struct lp_lua_frame *f = &s->lua[j];
			uint8_t type = LP_FRAME_LFUNC;
			if (j == 0 && s->vmstate == LP_VMST_FFUNC)
				type = LP_FRAME_FFUNC;
			else if (j == 0 && s->vmstate == LP_VMST_CFUNC)
				type = LP_FRAME_CFUNC;
			else if (below(12) == 0)
				type = LP_FRAME_CFUNC; /* a C function calling back into Lua */
			f->type = type;
			if (type == LP_FRAME_LFUNC) {
				const struct proto *p = &protos[skewed(NPROTOS)];
				f->addr = p->addr;
				f->line = p->line + below(25);
			} else if (type == LP_FRAME_FFUNC) {
				f->addr = 1 + below(120);
				f->line = 0;
			} else {
				f->addr = cfuncs[skewed(NCFUNCS)].addr;
				f->line = 0;
			}
		}
		/* Host frames, innermost first; the outer ones are shared by every stack. */
		static const unsigned outer[] = { 28, 27, 29, 10, 7 }; /* main .. lj_vm_call */
		for (unsigned j = 0; j < s->nhost; j++) {
			unsigned from_top = s->nhost - 1 - j;
			s->host[j] = from_top < 5 ? host_addr(outer[from_top]) :
						    host_addr(skewed(NCFUNCS));
		}
		s->trace = skewed(NTRACES);
	}
}

static void gen_sysprof(uint64_t nsamples)
{
	write_symtab();
	lp_write_sysprof_prologue(&W);
	struct lp_lua_frame lua[MAXLUA];
	for (uint64_t n = 0; n < nsamples && lp_wbuf_ok(&W); n++) {
		if ((n & 0x1ffff) == 0x10000) {
			int p = new_proto();
			if (p >= 0) {
				const char *ch = chunk_names[protos[p].chunk];
				lp_write_sys_sym_lua(&W, protos[p].addr, ch, strlen(ch), protos[p].line);
			}
			int t = new_trace();
			if (t >= 0)
				lp_write_sys_sym_trace(&W, traces[t].no, traces[t].proto, traces[t].line);
		}
		const struct shape *sh = &shapes[skewed(NSHAPES)];
		struct lp_sys_sample s;
		memset(&s, 0, sizeof(s));
		s.vmstate = sh->vmstate;
		if (sh->vmstate == LP_VMST_TRACE) {
			const struct trace *t = &traces[sh->trace];
			s.traceno = t->no;
			s.trace_addr = t->proto;
			s.trace_line = t->line;
		} else {
			memcpy(lua, sh->lua, sh->nlua * sizeof(*lua));
			if (sh->nlua && lua[0].type == LP_FRAME_LFUNC)
				lua[0].line += below(4); /* the current line moves inside the function */
			s.lua = lua;
			s.nlua = sh->nlua;
			s.host = sh->host;
			s.nhost = sh->nhost;
		}
		lp_write_sys_sample(&W, &s);
	}
	lp_write_sysprof_epilogue(&W);
}

/* -- Command line ------------------------------------------------------------------------ */

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -1;
	switch (*end) {
	case 'k': case 'K': v <<= 10; end++; break;
	case 'm': case 'M': v <<= 20; end++; break;
	case 'g': case 'G': v <<= 30; end++; break;
	}
	if (*end == 'i' || *end == 'B')
		end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
	if (*end)
		return -1;
	*out = v;
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: gen_stream memprof [-s SIZE] [-o FILE] [-S SEED]   (default size 1G)\n"
		"       gen_stream sysprof [-n SAMPLES] [-o FILE] [-S SEED] (default 10000000)\n"
		"Writes a realistic symtab+memprof or symtab+sysprof stream; FILE - is stdout.\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	int mem = !strcmp(argv[1], "memprof");
	if (!mem && strcmp(argv[1], "sysprof"))
		usage();
	uint64_t size = 1ull << 30, samples = 10000000, seed = 1;
	const char *path = "-";
	for (int i = 2; i < argc; i += 2) {
		const char *opt = argv[i], *arg = i + 1 < argc ? argv[i + 1] : NULL;
		if (!arg)
			usage();
		if (!strcmp(opt, "-s") && mem) {
			if (parse_size(arg, &size))
				usage();
		} else if (!strcmp(opt, "-n") && !mem) {
			if (parse_size(arg, &samples))
				usage();
		} else if (!strcmp(opt, "-o")) {
			path = arg;
		} else if (!strcmp(opt, "-S")) {
			if (parse_size(arg, &seed))
				usage();
		} else {
			usage();
		}
	}
	rng ^= seed * 0x9e3779b97f4a7c15ull;
	if (strcmp(path, "-")) {
		out_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (out_fd < 0) {
			fprintf(stderr, "gen_stream: %s: %s\n", path, strerror(errno));
			return 1;
		}
	}
	lp_wbuf_init(&W, out_buf, sizeof(out_buf), fd_writer, NULL);
	make_symbols();
	uint64_t events;
	if (mem) {
		events = gen_memprof(size);
	} else {
		make_shapes();
		gen_sysprof(samples);
		events = samples;
	}
	lp_wbuf_flush(&W);
	if (!lp_wbuf_ok(&W)) {
		fprintf(stderr, "gen_stream: %s: write failed: %s\n", path, strerror(W.saved_errno));
		return 1;
	}
	if (out_fd != 1 && close(out_fd) != 0) {
		fprintf(stderr, "gen_stream: %s: %s\n", path, strerror(errno));
		return 1;
	}
	fprintf(stderr, "gen_stream: %s: %llu bytes, %llu %s\n", path,
		(unsigned long long)W.written, (unsigned long long)events,
		mem ? "events" : "samples");
	free(shapes);
	return 0;
}
