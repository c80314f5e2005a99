/*
** Seed corpus for the fuzz targets: small valid memprof / sysprof streams written with
** stream/writer.h, plus slimmed and truncated copies of real streams given on the command line
** (their luaprof extension slimmed too: its records are what the newest readers parse).
**
**   make_corpus OUTDIR [STREAM...]     (built and run by tests/fuzz/make_corpus.sh)
**
** Every seed is small (a few KiB at most) so libFuzzer's default max_len stays small and
** mutations stay fast; together they reach every item kind of both grammars.
*/
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "luaprof/format.h"
#include "stream/input.h"
#include "stream/parse.h"
#include "stream/wbuf.h"
#include "stream/writer.h"

static const char *outdir;

/* -- Output: one wbuf writing to one seed file -------------------------------- */

struct out {
	int fd;
	uint8_t buf[4096];
	struct lp_wbuf w;
};

static size_t fd_writer(const void **data, size_t len, void *ctx)
{
	struct out *o = ctx;
	const uint8_t *p = *data;
	size_t done = 0;
	while (done < len) {
		ssize_t n = write(o->fd, p + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		done += (size_t)n;
	}
	return done;
}

static struct lp_wbuf *out_open(struct out *o, const char *name)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", outdir, name);
	o->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (o->fd < 0) {
		fprintf(stderr, "make_corpus: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	lp_wbuf_init(&o->w, o->buf, sizeof(o->buf), fd_writer, o);
	return &o->w;
}

static void out_close(struct out *o)
{
	lp_wbuf_flush(&o->w);
	if (!lp_wbuf_ok(&o->w)) {
		fprintf(stderr, "make_corpus: write failed: %s\n", strerror(o->w.saved_errno));
		exit(1);
	}
	close(o->fd);
}

/* Writes the first `len` bytes of `data` as a seed. */
static void write_raw(const char *name, const void *data, size_t len)
{
	struct out o;
	struct lp_wbuf *w = out_open(&o, name);
	lp_wbuf_bytes(w, data, len);
	out_close(&o);
}

static uint64_t rng = 0x243f6a8885a308d3ull;

static uint64_t rnd(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dull;
}

/* Mostly plausible numbers, sometimes the ULEB128 extremes. */
static uint64_t num(void)
{
	switch (rnd() % 8) {
	case 0: return 0;
	case 1: return UINT64_MAX;
	case 2: return 1ull << 63;
	case 3: return rnd() % 128;
	default: return rnd() >> (rnd() % 64);
	}
}

/* -- Hand-made streams ---------------------------------------------------------- */

static void symtab(struct lp_wbuf *w)
{
	lp_write_symtab_prologue(w);
	lp_write_sym_lua(w, 0x40001000, "@app.lua", 8, 1);
	lp_write_sym_lua(w, 0x40002000, "=stdin", 6, 12);
	lp_write_sym_cfunc(w, 0x555555556000ull, "lj_BC_FUNCC", 11);
	lp_write_sym_cfunc(w, 0x555555556010ull, "_ZNK9LuaActionclEP11DNSQuestion", 31);
	lp_write_sym_cfunc(w, 0x7ffff7a10000ull, "malloc", 6);
	lp_write_sym_trace(w, 1, 0x40001000, 3);
	lp_write_symtab_final(w);
}

static void mem_event(struct lp_wbuf *w, uint8_t event, uint8_t source, uint64_t loc,
		      uint64_t line, uint64_t oaddr, uint64_t osize, uint64_t naddr, uint64_t nsize)
{
	struct lp_mem_event ev = { .event = event, .source = source, .loc_addr = loc,
				   .loc_line = line, .traceno = loc, .oaddr = oaddr,
				   .osize = osize, .naddr = naddr, .nsize = nsize };
	lp_write_mem_event(w, &ev);
}

static void seeds_memprof(void)
{
	struct out o;
	struct lp_wbuf *w = out_open(&o, "mp-empty");
	lp_write_symtab_prologue(w);
	lp_write_symtab_final(w);
	lp_write_memprof_prologue(w);
	lp_write_memprof_epilogue(w);
	out_close(&o);

	/* Sampled mode: symbols, no events, stacks and sampled allocations. */
	w = out_open(&o, "mp-sampled");
	symtab(w);
	lp_write_memprof_prologue(w);
	lp_write_mem_sym_lua(w, 0x40003000, "@s.lua", 6, 1);
	lp_write_memprof_epilogue(w);
	lp_write_ext_prologue(w);
	static const uint8_t mstack[] = { 0, 0x01, 0x80, 0xe0, 0x80, 0x02, 3, 0x02, 0x90, 0x80, 0x01,
					  0x80, 0x90, 0x80, 0x01, 0x84, 0x82, 0x01, 0 };
	static const uint8_t asmp[] = { 0, 64, 1, 0, 100, 0, 3, 8, 1 };
	lp_write_ext_record(w, LP_EXT_STACK, mstack, sizeof(mstack));
	lp_write_ext_record(w, LP_EXT_ASAMPLE, asmp, sizeof(asmp));
	/* Freed samples counted by stack and size. */
	static const uint8_t afr[] = { 0, 64, 7, 3, 8, 0x81, 0x01 };
	lp_write_ext_record(w, LP_EXT_AFREED, afr, sizeof(afr));
	/* Stack 0's allocations were the collector's (the state frame goes on top). */
	static const uint8_t ast[] = { 0, LP_VMST_GC };
	lp_write_ext_record(w, LP_EXT_ASTATE, ast, sizeof(ast));
	lp_write_ext_meta(w, "sample_bytes", "4096");
	lp_write_ext_end(w);
	out_close(&o);

	/* Sampled mode as the agent writes it: meta first (a cut keeps the interval), kcode
	 * and astate, then each stack record followed by its asample and afreed entries (a
	 * key in two afreed triples, a stack whose host frame is a keyed trace address). */
	w = out_open(&o, "mp-sampled-agent");
	symtab(w);
	lp_write_memprof_prologue(w);
	lp_write_mem_sym_lua(w, 0x40003000, "@s.lua", 6, 1);
	lp_write_mem_sym_trace(w, 1, 0x40003000, 2);
	lp_write_memprof_epilogue(w);
	lp_write_ext_prologue(w);
	lp_write_ext_meta(w, "mode", "sampled");
	lp_write_ext_meta(w, "sample_bytes", "4096");
	lp_write_ext_meta(w, "samples", "9");
	lp_write_ext_meta(w, "samples_held", "3");
	lp_write_ext_meta(w, "ffnames", "assert - pcall");
	lp_write_ext_map(w, 0x555555554000ull, 0x555555600000ull, 0, "/usr/bin/luajit",
			 (const uint8_t *)"\x01\x02\x03\x04", 4);
	lp_write_ext_cname(w, 0x555555554100ull, "cjson.safe.decode/cjson.safe.encode", 35);
	/* Trace 1 at the keyed 0x800000008000, 0x100 bytes, prototype 0x40003000 line 2. */
	static const uint8_t skcode[] = { 1, 0x80, 0x80, 0x82, 0x80, 0x80, 0x80, 0x20, 0x80, 0x02,
					  0x80, 0xe0, 0x80, 0x80, 0x04, 2 };
	lp_write_ext_record(w, LP_EXT_KCODE, skcode, sizeof(skcode));
	static const uint8_t sast[] = { 2, LP_VMST_GC, 3, LP_VMST_ASM };
	lp_write_ext_record(w, LP_EXT_ASTATE, sast, sizeof(sast));
	/* Stack 1: Lua 0x40003000:5, a fast function, host frame in the trace (keyed). */
	static const uint8_t st1[] = { 1, 0x01, 0x80, 0xe0, 0x80, 0x80, 0x04, 5, 0x03, 7, 0x80,
				       0x90, 0x81, 0x82, 0x80, 0x80, 0x80, 0x20, 0x84, 0x82, 0x01, 0 };
	static const uint8_t as1[] = { 1, 64, 1, 1, 0x80, 0x20, 1 };
	static const uint8_t af1[] = { 1, 64, 3, 1, 64, 0x82, 0x01 };
	lp_write_ext_record(w, LP_EXT_STACK, st1, sizeof(st1));
	lp_write_ext_record(w, LP_EXT_ASAMPLE, as1, sizeof(as1));
	lp_write_ext_record(w, LP_EXT_AFREED, af1, sizeof(af1));
	/* Stacks 2 (the collector's) and 3 (the compiler's): one body, two records. */
	static const uint8_t st2[] = { 2, 0x01, 0x80, 0xe0, 0x80, 0x80, 0x04, 3, 0x80, 0x90,
				       0x80, 0x01, 0 };
	static const uint8_t st3[] = { 3, 0x01, 0x80, 0xe0, 0x80, 0x80, 0x04, 3, 0x80, 0x90,
				       0x80, 0x01, 0 };
	static const uint8_t af2[] = { 2, 0x80, 0x80, 0x04, 1 };
	static const uint8_t as3[] = { 3, 24, 0 };
	lp_write_ext_record(w, LP_EXT_STACK, st2, sizeof(st2));
	lp_write_ext_record(w, LP_EXT_AFREED, af2, sizeof(af2));
	lp_write_ext_record(w, LP_EXT_STACK, st3, sizeof(st3));
	lp_write_ext_record(w, LP_EXT_ASAMPLE, as3, sizeof(as3));
	lp_write_ext_end(w);
	out_close(&o);

	/* Exact mode's long chunk names (the agent writes up to 64 KiB; 1.5 KiB here keeps the
	 * seed small but past the renderers' on-stack buffers): a path, a =name, and code
	 * loaded from a string (a newline in it), each allocating. */
	w = out_open(&o, "mp-longname");
	symtab(w);
	lp_write_memprof_prologue(w);
	static char lname[1536];
	for (int k = 0; k < 3; k++) {
		memset(lname, k == 2 ? 'c' : 'd', sizeof(lname));
		lname[0] = k == 0 ? '@' : k == 1 ? '=' : 'x';
		for (size_t i = 64; k == 0 && i < sizeof(lname); i += 64)
			lname[i] = '/';
		if (k == 2)
			lname[700] = '\n';
		uint64_t proto = 0x40010000ull + 0x100 * (uint64_t)k;
		lp_write_mem_sym_lua(w, proto, lname, sizeof(lname), 1 + (uint64_t)k);
		mem_event(w, LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, proto, 2, 0, 0,
			  0x44000000 + 64 * (uint64_t)k, 40);
	}
	mem_event(w, LP_AEVENT_FREE, LP_ASOURCE_LFUNC, 0x40010000, 3, 0x44000000, 40, 0, 0);
	lp_write_memprof_epilogue(w);
	lp_write_ext_prologue(w);
	lp_write_ext_meta(w, "mode", "exact");
	lp_write_ext_meta(w, "encoded_on", "writer thread");
	lp_write_ext_end(w);
	out_close(&o);

	/* Every event from every source, and the three mid-stream symbol events. */
	w = out_open(&o, "mp-each");
	symtab(w);
	lp_write_memprof_prologue(w);
	static const uint8_t src[] = { LP_ASOURCE_INT, LP_ASOURCE_LFUNC, LP_ASOURCE_CFUNC,
				       LP_ASOURCE_TRACE };
	for (int s = 0; s < 4; s++) {
		uint64_t loc = src[s] == LP_ASOURCE_LFUNC ? 0x40001000 :
			       src[s] == LP_ASOURCE_CFUNC ? 0x555555556000ull : 1;
		mem_event(w, LP_AEVENT_ALLOC, src[s], loc, 5, 0, 0, 0x41000000 + 64 * s, 48);
		mem_event(w, LP_AEVENT_REALLOC, src[s], loc, 6, 0x41000000 + 64 * s, 48,
			  0x42000000 + 128 * s, 96);
		mem_event(w, LP_AEVENT_FREE, src[s], loc, 7, 0x42000000 + 128 * s, 96, 0, 0);
	}
	lp_write_mem_sym_lua(w, 0x40003000, "@loaded.lua", 11, 1);
	mem_event(w, LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, 0x40003000, 2, 0, 0, 0x43000000, 32);
	lp_write_mem_sym_cfunc(w, 0x7fffe0000000ull, "luaopen_ext", 11);
	mem_event(w, LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0x7fffe0000000ull, 0, 0, 0, 0x43000100, 16);
	lp_write_mem_sym_trace(w, 2, 0x40003000, 2);
	mem_event(w, LP_AEVENT_FREE, LP_ASOURCE_TRACE, 2, 0, 0x43000000, 32, 0, 0);
	lp_write_memprof_epilogue(w);
	out_close(&o);

	/* Random mixes, some truncated. */
	for (int k = 0; k < 8; k++) {
		char name[32];
		snprintf(name, sizeof(name), "mp-random-%d%s", k, k >= 6 ? "-cut" : "");
		w = out_open(&o, name);
		symtab(w);
		lp_write_memprof_prologue(w);
		int n = 10 + (int)(rnd() % 60);
		for (int i = 0; i < n; i++) {
			if (rnd() % 10 == 0) {
				switch (rnd() % 3) {
				case 0: lp_write_mem_sym_lua(w, num(), "@r.lua", 6, num()); break;
				case 1: lp_write_mem_sym_cfunc(w, num(), "cf", 2); break;
				default: lp_write_mem_sym_trace(w, num(), num(), num()); break;
				}
				continue;
			}
			mem_event(w, (uint8_t)(1 + rnd() % 3), (uint8_t)((1 + rnd() % 4) << 2), num(),
				  num(), num(), num(), num(), num());
		}
		if (k < 6)
			lp_write_memprof_epilogue(w);
		out_close(&o);
	}
}

static void sample(struct lp_wbuf *w, uint8_t vmstate, size_t nlua, size_t nhost)
{
	struct lp_lua_frame lua[128];
	uint64_t host[128];
	for (size_t i = 0; i < nlua && i < 128; i++) {
		lua[i].type = (uint8_t)(LP_FRAME_LFUNC + i % 3);
		lua[i].addr = lua[i].type == LP_FRAME_FFUNC ? 1 + i % 40 :
			      lua[i].type == LP_FRAME_LFUNC ? 0x40001000 : 0x555555556000ull + i;
		lua[i].line = lua[i].type == LP_FRAME_LFUNC ? 1 + i : 0;
	}
	for (size_t i = 0; i < nhost && i < 128; i++)
		host[i] = 0x555555556000ull + 16 * i + 1;
	struct lp_sys_sample s = { .vmstate = vmstate, .nlua = nlua, .lua = lua, .nhost = nhost,
				   .host = host, .traceno = 1, .trace_addr = 0x40001000,
				   .trace_line = 3 };
	lp_write_sys_sample(w, &s);
}

static void seeds_sysprof(void)
{
	struct out o;
	struct lp_wbuf *w = out_open(&o, "sp-empty");
	lp_write_symtab_prologue(w);
	lp_write_symtab_final(w);
	lp_write_sysprof_prologue(w);
	lp_write_sysprof_epilogue(w);
	out_close(&o);

	/* One sample per VM state, the three frame kinds, mid-stream symbols 10, 11, 12. */
	w = out_open(&o, "sp-each");
	symtab(w);
	lp_write_sysprof_prologue(w);
	for (uint8_t st = 0; st < LP_VMST__MAX; st++)
		sample(w, st, 3, 4);
	lp_write_sys_sym_lua(w, 0x40003000, "@late.lua", 9, 4);
	sample(w, LP_VMST_LFUNC, 1, 0);
	lp_write_sys_sym_cfunc(w, 0x7fffe0000000ull, "late_c", 6);
	sample(w, LP_VMST_CFUNC, 0, 1);
	lp_write_sys_sym_trace(w, 2, 0x40003000, 5);
	sample(w, LP_VMST_TRACE, 0, 0);
	lp_write_sysprof_epilogue(w);
	out_close(&o);

	/* TRACE, GC and JIT compiler samples with the extension: maps, sizes, full stacks,
	 * meta. */
	w = out_open(&o, "sp-ext");
	symtab(w);
	lp_write_sysprof_prologue(w);
	for (int i = 0; i < 4; i++)
		sample(w, i == 2 ? LP_VMST_LFUNC : LP_VMST_TRACE, 2, 3);
	sample(w, LP_VMST_GC, 0, 3);
	sample(w, LP_VMST_RECORD, 0, 3);
	sample(w, LP_VMST_GC, 0, 2);
	sample(w, LP_VMST_ASM, 0, 2);
	lp_write_sysprof_epilogue(w);
	lp_write_ext_prologue(w);
	lp_write_ext_map(w, 0x400000, 0x500000, 0x1000, "/usr/bin/luajit",
			 (const uint8_t *)"\xab\xcd", 2);
	lp_write_ext_csize(w, 0x400100, 0x40);
	/* A stripped function named from Lua (at an address the symtab has no name for). */
	lp_write_ext_cname(w, 0x404800, "cjson.encode", 12);
	static const uint8_t stack0[] = { 0, 0x01, 0x80, 0x20, 12, 0x03, 5, 0x80, 0x90, 0x80, 0x01,
					  0x84, 0x82, 0x01, 0 };
	static const uint8_t stack1[] = { 1, 0x80, 0x90, 0x80, 0x01, 0 };
	static const uint8_t pairs[] = { 0, 0, 1, 1, 0, 0 };
	lp_write_ext_record(w, LP_EXT_STACK, stack0, sizeof(stack0));
	lp_write_ext_record(w, LP_EXT_STACK, stack1, sizeof(stack1));
	lp_write_ext_record(w, LP_EXT_TSAMPLE, pairs, sizeof(pairs));
	lp_write_ext_record(w, LP_EXT_GSAMPLE, pairs, 4);
	lp_write_ext_record(w, LP_EXT_JSAMPLE, pairs, 4);
	lp_write_ext_record(w, LP_EXT_XSAMPLE, pairs, 4);
	static const uint8_t tcode[] = { 1, 0x80, 0x80, 0xc0, 0x02, 0x80, 0x02 };
	lp_write_ext_record(w, LP_EXT_TCODE, tcode, sizeof(tcode));
	/* Trace 1 at the keyed address (tag 1) 0x800000008000, 0x100 bytes, prototype 0x10
	 * line 3. */
	static const uint8_t kcode[] = { 1, 0x80, 0x80, 0x82, 0x80, 0x80, 0x80, 0x20, 0x80, 0x02,
					 0x10, 3 };
	lp_write_ext_record(w, LP_EXT_KCODE, kcode, sizeof(kcode));
	lp_write_ext_meta(w, "ffnames", "assert - pcall");
	lp_write_ext_meta(w, "interval_ns", "1000000");
	lp_write_ext_end(w);
	out_close(&o);

	/* C epochs as the agent writes them: a library's symbols before the first sample taken
	 * in it; another library loaded at its address later (its own names there, for the
	 * samples after), one loaded again under the first's names, two names at one address
	 * (aliases); maps with build-ids, the timer meta. */
	w = out_open(&o, "sp-epochs");
	symtab(w);
	lp_write_sysprof_prologue(w);
	static const char *const lib[] = { "work_0", "work_1", "work_0" };
	for (int v = 0; v < 3; v++) {
		lp_write_sys_sym_cfunc(w, 0x7fffe0001000ull, lib[v], 6);
		lp_write_sys_sym_cfunc(w, 0x7fffe0001100ull, "helper", 6);
		if (v == 2)
			lp_write_sys_sym_cfunc(w, 0x7fffe0001000ull, "work_alias", 10);
		struct lp_lua_frame lf[2] = { { LP_FRAME_CFUNC, 0x7fffe0001000ull, 0 },
					      { LP_FRAME_LFUNC, 0x40001000, (uint64_t)(4 + v) } };
		uint64_t hs[3] = { 0x7fffe0001010ull, 0x7fffe0001104ull, 0x555555556001ull };
		struct lp_sys_sample cs = { .vmstate = LP_VMST_CFUNC, .nlua = 2, .lua = lf,
					    .nhost = 3, .host = hs };
		lp_write_sys_sample(w, &cs);
		lp_write_sys_sample(w, &cs);
		sample(w, LP_VMST_GC, 0, 2);
	}
	lp_write_sysprof_epilogue(w);
	lp_write_ext_prologue(w);
	lp_write_ext_meta(w, "clock", "cpu");
	lp_write_ext_meta(w, "timer", "perf task-clock");
	lp_write_ext_meta(w, "interval_ns", "1000000");
	lp_write_ext_meta(w, "thread_cpu_ns", "12000000");
	lp_write_ext_map(w, 0x555555554000ull, 0x555555600000ull, 0x1000, "/usr/bin/luajit",
			 (const uint8_t *)"\xab\xcd", 2);
	lp_write_ext_map(w, 0x7fffe0001000ull, 0x7fffe0002000ull, 0x1000, "/tmp/libw0.so",
			 (const uint8_t *)"\x01\x02\x03", 3);
	lp_write_ext_csize(w, 0x7fffe0001000ull, 0x100);
	lp_write_ext_end(w);
	out_close(&o);

	/* A GC sample paired with a stack of host frames only, the profile's only stack, and
	 * another with the same host stack: no Lua frame anywhere (the report's pool of them
	 * stays empty). */
	w = out_open(&o, "sp-gc-host");
	symtab(w);
	lp_write_sysprof_prologue(w);
	sample(w, LP_VMST_GC, 0, 2);
	sample(w, LP_VMST_GC, 0, 2);
	lp_write_sysprof_epilogue(w);
	lp_write_ext_prologue(w);
	static const uint8_t hstack[] = { 0, 0x80, 0x81, 0x80, 0x01, 0x80, 0x90, 0x80, 0x01, 0 };
	static const uint8_t gpair[] = { 0, 0 };
	lp_write_ext_record(w, LP_EXT_STACK, hstack, sizeof(hstack));
	lp_write_ext_record(w, LP_EXT_GSAMPLE, gpair, sizeof(gpair));
	lp_write_ext_end(w);
	out_close(&o);

	/* Deep stacks. */
	w = out_open(&o, "sp-deep");
	symtab(w);
	lp_write_sysprof_prologue(w);
	sample(w, LP_VMST_LFUNC, 120, 120);
	sample(w, LP_VMST_INTERP, 0, 128);
	lp_write_sysprof_epilogue(w);
	out_close(&o);

	for (int k = 0; k < 8; k++) {
		char name[32];
		snprintf(name, sizeof(name), "sp-random-%d%s", k, k >= 6 ? "-cut" : "");
		w = out_open(&o, name);
		symtab(w);
		lp_write_sysprof_prologue(w);
		int n = 5 + (int)(rnd() % 40);
		for (int i = 0; i < n; i++) {
			if (rnd() % 10 == 0) {
				switch (rnd() % 3) {
				case 0: lp_write_sys_sym_lua(w, num(), "@r.lua", 6, num()); break;
				case 1: lp_write_sys_sym_cfunc(w, num(), "cf", 2); break;
				default: lp_write_sys_sym_trace(w, num(), num(), num()); break;
				}
				continue;
			}
			sample(w, (uint8_t)(rnd() % LP_VMST__MAX), rnd() % 12, rnd() % 20);
		}
		if (k < 6)
			lp_write_sysprof_epilogue(w);
		out_close(&o);
	}
}

/* -- Slimmed copies of real streams ---------------------------------------------- */

/* Re-emits a real stream keeping its Lua and trace symbols, a few C symbols and the first
 * events, so the seed has the real shape without a multi-megabyte ELF symbol table. */
struct slim {
	struct lp_wbuf *w;
	int in_profile;
	enum lp_stream_kind kind;
	unsigned cfuncs, items;
	unsigned run;  /* C symbols of the current mid-stream run (those since the last event) */
	size_t names; /* bytes of chunk names kept */
};

#define SLIM_CFUNCS 24
#define SLIM_ITEMS 400
/* A C epoch of the agent (a library seen loaded mid-profile) names all its symbols at once:
 * keep the first few of each run so the samples after it still fit in SLIM_ITEMS. */
#define SLIM_RUN_CFUNCS 12
/* Chunk names are cut to this many bytes (exact mode writes up to 64 KiB of them; long
 * enough still to pass the renderers' on-stack buffers), and once the seed holds
 * SLIM_NAMES bytes of them, to SLIM_CHUNK_SHORT. */
#define SLIM_CHUNK       1024
#define SLIM_CHUNK_SHORT 48
#define SLIM_NAMES       (8 * 1024)

static int slim_stream(void *ctx, enum lp_stream_kind kind, unsigned version)
{
	struct slim *s = ctx;
	s->in_profile = 1;
	s->kind = kind;
	if (kind == LP_STREAM_MEMPROF)
		lp_write_memprof_prologue(s->w);
	else
		lp_write_sysprof_prologue(s->w);
	return 0;
}

static int slim_full(struct slim *s)
{
	return s->in_profile && ++s->items > SLIM_ITEMS;
}

static int slim_lua(void *ctx, uint64_t addr, const char *chunk, size_t len, uint64_t line)
{
	struct slim *s = ctx;
	if (slim_full(s))
		return 1;
	size_t cap = s->names < SLIM_NAMES ? SLIM_CHUNK : SLIM_CHUNK_SHORT;
	if (len > cap)
		len = cap;
	s->names += len;
	if (!s->in_profile)
		lp_write_sym_lua(s->w, addr, chunk, len, line);
	else if (s->kind == LP_STREAM_MEMPROF)
		lp_write_mem_sym_lua(s->w, addr, chunk, len, line);
	else
		lp_write_sys_sym_lua(s->w, addr, chunk, len, line);
	return 0;
}

static int slim_cfunc(void *ctx, uint64_t addr, const char *name, size_t len)
{
	struct slim *s = ctx;
	if (slim_full(s))
		return 1;
	if (!s->in_profile && s->cfuncs++ >= SLIM_CFUNCS)
		return 0;
	if (s->in_profile && s->run++ >= SLIM_RUN_CFUNCS) {
		s->items--; /* not kept: leaves room for the samples */
		return 0;
	}
	if (!s->in_profile)
		lp_write_sym_cfunc(s->w, addr, name, len);
	else if (s->kind == LP_STREAM_MEMPROF)
		lp_write_mem_sym_cfunc(s->w, addr, name, len);
	else
		lp_write_sys_sym_cfunc(s->w, addr, name, len);
	return 0;
}

static int slim_trace(void *ctx, uint64_t traceno, uint64_t addr, uint64_t line)
{
	struct slim *s = ctx;
	if (slim_full(s))
		return 1;
	if (!s->in_profile)
		lp_write_sym_trace(s->w, traceno, addr, line);
	else if (s->kind == LP_STREAM_MEMPROF)
		lp_write_mem_sym_trace(s->w, traceno, addr, line);
	else
		lp_write_sys_sym_trace(s->w, traceno, addr, line);
	return 0;
}

static int slim_symtab_end(void *ctx)
{
	lp_write_symtab_final(((struct slim *)ctx)->w);
	return 0;
}

static int slim_mem(void *ctx, const struct lp_mem_event *ev)
{
	struct slim *s = ctx;
	if (slim_full(s))
		return 1;
	s->run = 0;
	lp_write_mem_event(s->w, ev);
	return 0;
}

static int slim_sys(void *ctx, const struct lp_sys_sample *smp)
{
	struct slim *s = ctx;
	if (slim_full(s))
		return 1;
	s->run = 0;
	lp_write_sys_sample(s->w, smp);
	return 0;
}

/* -- Slimmed copy of a real stream's extension ------------------------------------ */

/* The extension of a real stream re-encoded record by record, keeping every meta and map
 * record and the first few of the others in their order (sampled memprof's stack records
 * each followed by their asample and afreed entries), within SLIM_EXT_BYTES. */
#define SLIM_EXT_BYTES  (12 * 1024)
#define SLIM_EXT_STACKS 48
#define SLIM_EXT_OTHERS 48 /* entries of each other kind */

struct xslim {
	uint8_t buf[SLIM_EXT_BYTES + 4096];
	size_t len;
	uint8_t rec[4096];         /* the record being filled: entries of type `type` */
	size_t rlen;
	uint8_t type;
	uint64_t kept[SLIM_EXT_STACKS]; /* ids of the stack records kept */
	unsigned nkept, counts[256];
	uint64_t next[256];        /* sample-pair records: the next ordinal, as the parser */
};

static void xput(uint8_t *p, size_t *len, uint64_t v)
{
	*len += lp_uleb_encode(v, p + *len);
}

/* Moves the record being filled to the output (type, length, payload). */
static void xflush(struct xslim *x)
{
	if (!x->rlen)
		return;
	if (x->len + 11 + x->rlen <= sizeof(x->buf)) {
		x->buf[x->len++] = x->type;
		xput(x->buf, &x->len, x->rlen);
		memcpy(x->buf + x->len, x->rec, x->rlen);
		x->len += x->rlen;
	}
	x->rlen = 0;
}

/* Room for one more entry of `type` (at most `need` bytes): 0 when the budget is spent. */
static int xroom(struct xslim *x, uint8_t type, size_t need, int capped)
{
	if (capped && x->counts[type] >= SLIM_EXT_OTHERS)
		return 0;
	if (x->len + x->rlen + need + 16 > SLIM_EXT_BYTES)
		return 0;
	if (x->type != type || x->rlen + need > sizeof(x->rec))
		xflush(x);
	x->type = type;
	x->counts[type]++;
	return 1;
}

static int xkept(const struct xslim *x, uint64_t id)
{
	for (unsigned i = 0; i < x->nkept; i++)
		if (x->kept[i] == id)
			return 1;
	return 0;
}

static int xs_map(void *ctx, uint64_t start, uint64_t end, uint64_t offset, const char *path,
		  const uint8_t *build_id, size_t build_id_len)
{
	struct xslim *x = ctx;
	size_t plen = strlen(path);
	if (plen > 256 || build_id_len > 64 || !xroom(x, LP_EXT_MAP, 360, 0))
		return 0;
	uint8_t *r = x->rec + x->rlen;
	size_t n = 0;
	xput(r, &n, start);
	xput(r, &n, end);
	xput(r, &n, offset);
	xput(r, &n, plen);
	memcpy(r + n, path, plen);
	n += plen;
	xput(r, &n, build_id_len);
	memcpy(r + n, build_id, build_id_len);
	n += build_id_len;
	x->rlen += n;
	xflush(x); /* one object per record */
	return 0;
}

static int xs_meta(void *ctx, const char *key, const char *value)
{
	struct xslim *x = ctx;
	size_t kl = strlen(key), vl = strlen(value);
	if (kl + vl > sizeof(x->rec) - 20 || !xroom(x, LP_EXT_META, kl + vl + 20, 0))
		return 0;
	uint8_t *r = x->rec + x->rlen;
	size_t n = 0;
	xput(r, &n, kl);
	memcpy(r + n, key, kl);
	n += kl;
	xput(r, &n, vl);
	memcpy(r + n, value, vl);
	x->rlen = n + vl;
	xflush(x);
	return 0;
}

static int xs_csize(void *ctx, uint64_t addr, uint64_t size)
{
	struct xslim *x = ctx;
	if (!xroom(x, LP_EXT_CSIZE, 20, 1))
		return 0;
	xput(x->rec, &x->rlen, addr);
	xput(x->rec, &x->rlen, size);
	xflush(x);
	return 0;
}

static int xs_stack(void *ctx, uint64_t id, const struct lp_lua_frame *lua, size_t nlua,
		    const uint64_t *host, size_t nhost)
{
	struct xslim *x = ctx;
	if (nlua > 40)
		nlua = 40; /* the innermost frames: the cut stack stays well formed */
	if (nhost > 40)
		nhost = 40;
	size_t need = 10 + nlua * 21 + 1 + nhost * 10 + 1;
	if (x->nkept == SLIM_EXT_STACKS || !xroom(x, LP_EXT_STACK, need, 0))
		return 0;
	x->kept[x->nkept++] = id;
	xput(x->rec, &x->rlen, id);
	for (size_t i = 0; i < nlua; i++) {
		x->rec[x->rlen++] = lua[i].type;
		xput(x->rec, &x->rlen, lua[i].addr);
		if (lua[i].type == LP_FRAME_LFUNC)
			xput(x->rec, &x->rlen, lua[i].line);
	}
	x->rec[x->rlen++] = LP_FRAME_LUA_LAST;
	for (size_t i = 0; i < nhost; i++)
		xput(x->rec, &x->rlen, host[i]);
	x->rec[x->rlen++] = 0;
	xflush(x); /* one stack per record, as the agent writes them */
	return 0;
}

/* A pair of a tsample, gsample, jsample or xsample record, re-encoded with its gap. */
static int xs_pair(struct xslim *x, uint8_t type, uint64_t ordinal, uint64_t id)
{
	if (ordinal >= SLIM_ITEMS || ordinal < x->next[type] || !xkept(x, id) ||
	    !xroom(x, type, 20, 1))
		return 0;
	xput(x->rec, &x->rlen, ordinal - x->next[type]);
	xput(x->rec, &x->rlen, id);
	x->next[type] = ordinal + 1;
	return 0;
}

static int xs_tsample(void *ctx, uint64_t ordinal, uint64_t id)
{
	return xs_pair(ctx, LP_EXT_TSAMPLE, ordinal, id);
}

static int xs_gsample(void *ctx, uint64_t ordinal, uint64_t id)
{
	return xs_pair(ctx, LP_EXT_GSAMPLE, ordinal, id);
}

static int xs_jsample(void *ctx, uint64_t ordinal, uint64_t id)
{
	return xs_pair(ctx, LP_EXT_JSAMPLE, ordinal, id);
}

static int xs_xsample(void *ctx, uint64_t ordinal, uint64_t id)
{
	return xs_pair(ctx, LP_EXT_XSAMPLE, ordinal, id);
}

static int xs_tcode(void *ctx, uint64_t traceno, uint64_t addr, uint64_t size)
{
	struct xslim *x = ctx;
	if (!xroom(x, LP_EXT_TCODE, 30, 1))
		return 0;
	xput(x->rec, &x->rlen, traceno);
	xput(x->rec, &x->rlen, addr);
	xput(x->rec, &x->rlen, size);
	xflush(x);
	return 0;
}

static int xs_kcode(void *ctx, uint64_t traceno, uint64_t key, uint64_t size, uint64_t proto,
		    uint64_t line)
{
	struct xslim *x = ctx;
	if (!xroom(x, LP_EXT_KCODE, 50, 1))
		return 0;
	xput(x->rec, &x->rlen, traceno);
	xput(x->rec, &x->rlen, key);
	xput(x->rec, &x->rlen, size);
	xput(x->rec, &x->rlen, proto);
	xput(x->rec, &x->rlen, line);
	xflush(x);
	return 0;
}

/* Live samples stay asample entries, freed ones become afreed triples (an asample entry
 * with live 0 counts as one: the reader cannot tell them apart, nor need the seed). */
static int xs_asample(void *ctx, uint64_t id, uint64_t size, int live, uint64_t count)
{
	struct xslim *x = ctx;
	uint8_t type = live ? LP_EXT_ASAMPLE : LP_EXT_AFREED;
	if (!xkept(x, id) || !xroom(x, type, 30, 1))
		return 0;
	xput(x->rec, &x->rlen, id);
	xput(x->rec, &x->rlen, size);
	xput(x->rec, &x->rlen, live ? 1 : count);
	return 0;
}

static int xs_astate(void *ctx, uint64_t id, unsigned vmstate)
{
	struct xslim *x = ctx;
	if (!xroom(x, LP_EXT_ASTATE, 20, 1))
		return 0;
	xput(x->rec, &x->rlen, id);
	xput(x->rec, &x->rlen, vmstate);
	return 0;
}

/* Appends the slimmed extension of the stream at `path` (none if it has none or is cut
 * before it ends). */
static void slim_extension(struct lp_wbuf *w, const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return;
	static struct xslim x;
	memset(&x, 0, sizeof(x));
	struct lp_parse_handlers h = {
		.ctx = &x, .ext_map = xs_map, .ext_meta = xs_meta, .ext_csize = xs_csize,
		.ext_stack = xs_stack, .ext_tsample = xs_tsample, .ext_gsample = xs_gsample,
		.ext_jsample = xs_jsample, .ext_xsample = xs_xsample, .ext_tcode = xs_tcode,
		.ext_kcode = xs_kcode, .ext_asample = xs_asample, .ext_astate = xs_astate,
	};
	struct lp_input in;
	struct lp_parse_stats st;
	int rc = lp_input_open_fd(&in, fd, path);
	if (rc == LP_OK)
		rc = lp_parse_stream(&in, &h, &st);
	xflush(&x);
	if (rc == LP_OK && st.extension) {
		lp_write_ext_prologue(w);
		lp_wbuf_bytes(w, x.buf, x.len);
		lp_write_ext_end(w);
	}
	lp_input_close(&in);
	close(fd);
}

static void seeds_from(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		fprintf(stderr, "make_corpus: %s: %s (skipped)\n", path, strerror(errno));
		return;
	}
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	char name[256];
	snprintf(name, sizeof(name), "real-%s", base);

	struct out o;
	struct slim s = { .w = out_open(&o, name) };
	lp_write_symtab_prologue(s.w); /* the parser has no callback for it */
	struct lp_parse_handlers h = {
		.ctx = &s, .stream = slim_stream, .sym_lua = slim_lua, .sym_cfunc = slim_cfunc,
		.sym_trace = slim_trace, .symtab_end = slim_symtab_end, .mem_event = slim_mem,
		.sys_sample = slim_sys,
	};
	struct lp_input in;
	int rc = lp_input_open_fd(&in, fd, path);
	if (rc == LP_OK)
		rc = lp_parse_stream(&in, &h, NULL);
	if (rc != LP_OK && rc != LP_ERR_ABORT) {
		char msg[700];
		lp_input_message(&in, msg, sizeof(msg));
		fprintf(stderr, "make_corpus: %s (kept what was read)\n", msg);
	}
	if (s.kind == LP_STREAM_MEMPROF)
		lp_write_memprof_epilogue(&o.w);
	else if (s.kind == LP_STREAM_SYSPROF)
		lp_write_sysprof_epilogue(&o.w);
	if (s.kind)
		slim_extension(&o.w, path);
	out_close(&o);
	lp_input_close(&in);
	close(fd);

	/* A copy of the slim stream cut in the middle, and the raw file's first bytes. */
	char full[4096];
	snprintf(full, sizeof(full), "%s/%s", outdir, name);
	FILE *f = fopen(full, "rb");
	static uint8_t buf[1 << 20];
	size_t len = f ? fread(buf, 1, sizeof(buf), f) : 0;
	if (f)
		fclose(f);
	snprintf(name, sizeof(name), "real-%s-cut", base);
	write_raw(name, buf, len / 2);
	f = fopen(path, "rb");
	len = f ? fread(buf, 1, 4096, f) : 0;
	if (f)
		fclose(f);
	snprintf(name, sizeof(name), "real-%s-head", base);
	write_raw(name, buf, len);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: make_corpus OUTDIR [STREAM...]\n");
		return 2;
	}
	outdir = argv[1];
	seeds_memprof();
	seeds_sysprof();
	for (int i = 2; i < argc; i++)
		seeds_from(argv[i]);
	return 0;
}
