/*
** Streaming parser for symtab + memprof / sysprof streams.
*/
#include "stream/parse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const vmstate_names[LP_VMST__MAX] = {
	"INTERP", "LFUNC", "FFUNC", "CFUNC", "GC", "EXIT", "RECORD", "OPT", "ASM", "TRACE"
};

const char *lp_vmstate_name(unsigned vmstate)
{
	return vmstate < LP_VMST__MAX ? vmstate_names[vmstate] : NULL;
}

#define TRY(expr)                         \
	do {                              \
		int rc_ = (expr);         \
		if (rc_ != LP_OK)         \
			return rc_;       \
	} while (0)

/* Runs a consumer callback; a non-zero answer aborts the parse. */
#define CALLBACK(in, call)                                                          \
	do {                                                                        \
		if (call)                                                           \
			return lp_input_fail((in), LP_ERR_ABORT, lp_input_offset(in), \
					     "stopped by the consumer");              \
	} while (0)

/*
** Reads a prologue's three-byte magic into p a byte at a time, so that input that is no
** such section (a line of text) is told from one cut inside it: LP_OK with *got = 0 when
** it matches, else with *got the bytes read, the last of them the first that differs;
** the input's error (a cut) as it comes.
*/
static int read_magic(struct lp_input *in, const char *magic, uint8_t *p, size_t *got)
{
	*got = 0;
	for (size_t i = 0; i < 3; i++) {
		TRY(lp_input_u8(in, &p[i]));
		if (p[i] != (uint8_t)magic[i]) {
			*got = i + 1;
			break;
		}
	}
	return LP_OK;
}

/* Whether the input's first bytes, still in its window, start with magic (len bytes) at
 * offset at. */
static int starts_with(const struct lp_input *in, size_t at, const char *magic, size_t len)
{
	return in->base == 0 && in->len >= at + len && !memcmp(in->buf + at, magic, len);
}

/* What a file whose first byte is b may be instead of a stream: a hint for the message.
 * The first bytes read are in the input's window: a compressed file or an archive is
 * named by its magic (they are otherwise bytes that look like text). */
static const char *looks_like(const struct lp_input *in, uint8_t b)
{
	if (starts_with(in, 0, "\xfd" "7zXZ\0", 6))
		return " (xz-compressed data: luaprof reads plain or gzipped streams; decompress "
		       "it first, xz -dc FILE | luaprof report -)";
	if (starts_with(in, 0, "BZh", 3) && in->len >= 4 && in->buf[3] >= '1' && in->buf[3] <= '9')
		return " (bzip2-compressed data: luaprof reads plain or gzipped streams; "
		       "decompress it first, bzip2 -dc FILE | luaprof report -)";
	if (starts_with(in, 0, "\x28\xb5\x2f\xfd", 4))
		return " (zstd-compressed data: luaprof reads plain or gzipped streams; "
		       "decompress it first, zstd -dc FILE | luaprof report -)";
	if (starts_with(in, 0, "PK\x03\x04", 4))
		return " (a zip archive: extract the profile from it first)";
	if (starts_with(in, 257, "ustar", 5))
		return " (a tar archive: extract the profile from it first)";
	if (starts_with(in, 0, "\xff\xd8\xff", 3))
		return " (a JPEG image?)";
	if (starts_with(in, 0, "<!DOCTYPE html", 14) || starts_with(in, 0, "<html", 5))
		return " (HTML: a flame graph page? luaprof reads the raw stream record wrote)";
	switch (b) {
	case 0x1f: return " (gzip data: a pprof profile? luaprof reads the raw stream record wrote)";
	case 0x89: return " (a PNG image?)";
	case '<': return " (XML: an SVG flame graph? luaprof reads the raw stream record wrote)";
	case '{': return " (JSON: a speedscope profile? luaprof reads the raw stream record wrote)";
	case 0x7f: return " (an ELF file?)";
	}
	return b >= 0x20 && b < 0x7f ? " (text: a report or collapsed stacks?)" : "";
}

static int prologue(struct lp_input *in, const char *magic, unsigned expect, const char *what,
		    unsigned *version)
{
	uint64_t start = lp_input_offset(in);
	uint8_t p[LP_PROLOGUE_SIZE];
	size_t got;
	TRY(read_magic(in, magic, p, &got));
	if (got) {
		char found[16];
		size_t n = 0;
		for (size_t k = 0; k < got; k++)
			n += (size_t)snprintf(found + n, sizeof(found) - n, "%s0x%02x", k ? " " : "",
					      p[k]);
		if (start == 0)
			return lp_input_fail(in, LP_ERR_FORMAT, start,
					     "not a profile stream%s: a sysprof or memprof stream "
					     "(luaprof's or Tarantool's) starts with \"%s\", this file "
					     "with %s", looks_like(in, p[0]), magic, found);
		return lp_input_fail(in, LP_ERR_FORMAT, start,
				     "bad %s prologue: expected magic \"%s\", found %s", what,
				     magic, found);
	}
	TRY(lp_input_bytes(in, p + 3, sizeof(p) - 3));
	if (p[3] != expect)
		return lp_input_fail(in, LP_ERR_VERSION, start + 3,
				     "%s version mismatch: luaprof expects %u, the file has %u",
				     what, expect, p[3]);
	*version = p[3];
	return LP_OK;
}

/* -- Symbols ----------------------------------------------------------------- */

static int sym_body(struct lp_input *in, const struct lp_parse_handlers *h, unsigned type,
		    struct lp_parse_stats *st)
{
	uint64_t addr, line, traceno;
	const char *s;
	size_t len;
	switch (type) {
	case LP_SYMTAB_LFUNC:
		TRY(lp_input_uleb(in, &addr));
		TRY(lp_input_string(in, &s, &len));
		TRY(lp_input_uleb(in, &line));
		if (h->sym_lua)
			CALLBACK(in, h->sym_lua(h->ctx, addr, s, len, line));
		break;
	case LP_SYMTAB_CFUNC:
		TRY(lp_input_uleb(in, &addr));
		TRY(lp_input_string(in, &s, &len));
		if (h->sym_cfunc)
			CALLBACK(in, h->sym_cfunc(h->ctx, addr, s, len));
		break;
	case LP_SYMTAB_TRACE:
		TRY(lp_input_uleb(in, &traceno));
		TRY(lp_input_uleb(in, &addr));
		TRY(lp_input_uleb(in, &line));
		if (h->sym_trace)
			CALLBACK(in, h->sym_trace(h->ctx, traceno, addr, line));
		break;
	}
	st->symbols++;
	return LP_OK;
}

/* The symbol table's prologue, with which every stream this parser reads starts. */
static int symtab_prologue(struct lp_input *in)
{
	unsigned version;
	return prologue(in, "ljs", LP_SYMTAB_VERSION, "symtab", &version);
}

int lp_parse_starts_stream(struct lp_input *in)
{
	return symtab_prologue(in);
}

static int symtab(struct lp_input *in, const struct lp_parse_handlers *h, struct lp_parse_stats *st)
{
	TRY(symtab_prologue(in));
	for (;;) {
		uint64_t at = lp_input_offset(in);
		uint8_t hdr;
		TRY(lp_input_u8(in, &hdr));
		if (hdr == LP_SYMTAB_FINAL)
			break;
		if (hdr > LP_SYMTAB_TRACE)
			return lp_input_fail(in, LP_ERR_FORMAT, at,
					     "unknown symtab entry header 0x%02x", hdr);
		TRY(sym_body(in, h, hdr, st));
	}
	if (h->symtab_end)
		CALLBACK(in, h->symtab_end(h->ctx));
	return LP_OK;
}

/* -- Memprof ----------------------------------------------------------------- */

static int memprof(struct lp_input *in, const struct lp_parse_handlers *h, struct lp_parse_stats *st)
{
	for (;;) {
		struct lp_mem_event ev;
		memset(&ev, 0, sizeof(ev));
		ev.offset = lp_input_offset(in);
		TRY(lp_input_u8(in, &ev.header));
		if (ev.header == LP_MEMPROF_EPILOGUE)
			return LP_OK;
		ev.event = ev.header & LP_AEVENT_MASK;
		ev.source = ev.header & LP_ASOURCE_MASK;
		if ((ev.header & ~(LP_AEVENT_MASK | LP_ASOURCE_MASK)) ||
		    ev.source < LP_ASOURCE_INT || ev.source > LP_ASOURCE_TRACE ||
		    (ev.event == LP_AEVENT_SYMTAB && ev.source == LP_ASOURCE_INT))
			return lp_input_fail(in, LP_ERR_FORMAT, ev.offset,
					     "unknown memprof event header 0x%02x", ev.header);
		if (ev.event == LP_AEVENT_SYMTAB) {
			static const unsigned kind[] = {
				[LP_ASOURCE_LFUNC >> 2] = LP_SYMTAB_LFUNC,
				[LP_ASOURCE_CFUNC >> 2] = LP_SYMTAB_CFUNC,
				[LP_ASOURCE_TRACE >> 2] = LP_SYMTAB_TRACE,
			};
			TRY(sym_body(in, h, kind[ev.source >> 2], st));
			continue;
		}
		switch (ev.source) {
		case LP_ASOURCE_LFUNC:
			TRY(lp_input_uleb(in, &ev.loc_addr));
			TRY(lp_input_uleb(in, &ev.loc_line));
			break;
		case LP_ASOURCE_CFUNC:
			TRY(lp_input_uleb(in, &ev.loc_addr));
			break;
		case LP_ASOURCE_TRACE:
			TRY(lp_input_uleb(in, &ev.traceno));
			break;
		}
		if (ev.event != LP_AEVENT_ALLOC) {
			TRY(lp_input_uleb(in, &ev.oaddr));
			TRY(lp_input_uleb(in, &ev.osize));
		}
		if (ev.event != LP_AEVENT_FREE) {
			TRY(lp_input_uleb(in, &ev.naddr));
			TRY(lp_input_uleb(in, &ev.nsize));
		}
		st->events++;
		if (h->mem_event)
			CALLBACK(in, h->mem_event(h->ctx, &ev));
	}
}

/* -- Sysprof ----------------------------------------------------------------- */

struct sys_scratch {
	struct lp_lua_frame *lua;
	uint64_t *host;
	size_t luacap, hostcap;
};

/* Appends to a growing array without trusting the stream for its final size. */
static int grow(struct lp_input *in, void **arr, size_t *cap, size_t n, size_t elsize,
		size_t max, uint64_t at, const char *what)
{
	if (n < *cap)
		return LP_OK;
	if (n >= max)
		return lp_input_fail(in, LP_ERR_FORMAT, at, "%s has more than %zu frames", what, max);
	size_t ncap = *cap ? *cap * 2 : 64;
	void *p = realloc(*arr, ncap * elsize);
	if (!p)
		return lp_input_fail(in, LP_ERR_NOMEM, at, "out of memory");
	*arr = p;
	*cap = ncap;
	return LP_OK;
}

static int lua_stack(struct lp_input *in, struct sys_scratch *sc, size_t *n, uint64_t at)
{
	*n = 0;
	for (;;) {
		uint64_t fat = lp_input_offset(in);
		uint8_t hdr;
		TRY(lp_input_u8(in, &hdr));
		if (hdr == LP_FRAME_LUA_LAST)
			return LP_OK;
		TRY(grow(in, (void **)&sc->lua, &sc->luacap, *n, sizeof(*sc->lua),
			 LP_MAX_LUA_FRAMES, at, "Lua stack"));
		struct lp_lua_frame *f = &sc->lua[*n];
		f->type = hdr;
		f->line = 0;
		switch (hdr) {
		case LP_FRAME_LFUNC:
			TRY(lp_input_uleb(in, &f->addr));
			TRY(lp_input_uleb(in, &f->line));
			break;
		case LP_FRAME_CFUNC:
		case LP_FRAME_FFUNC:
			TRY(lp_input_uleb(in, &f->addr));
			break;
		default:
			return lp_input_fail(in, LP_ERR_FORMAT, fat,
					     "unknown Lua frame header 0x%02x", hdr);
		}
		(*n)++;
	}
}

static int host_stack(struct lp_input *in, struct sys_scratch *sc, size_t *n, uint64_t at)
{
	*n = 0;
	for (;;) {
		uint64_t addr;
		TRY(lp_input_uleb(in, &addr));
		if (addr == 0)
			return LP_OK;
		TRY(grow(in, (void **)&sc->host, &sc->hostcap, *n, sizeof(*sc->host),
			 LP_MAX_HOST_FRAMES, at, "host stack"));
		sc->host[(*n)++] = addr;
	}
}

static int sysprof(struct lp_input *in, const struct lp_parse_handlers *h,
		   struct lp_parse_stats *st, struct sys_scratch *sc)
{
	for (;;) {
		struct lp_sys_sample s;
		memset(&s, 0, sizeof(s));
		s.offset = lp_input_offset(in);
		uint8_t hdr;
		TRY(lp_input_u8(in, &hdr));
		if (hdr == LP_SYSPROF_EPILOGUE)
			return LP_OK;
		if (hdr >= LP_SYSPROF_SYM_LFUNC && hdr <= LP_SYSPROF_SYM_TRACE) {
			TRY(sym_body(in, h, hdr - LP_SYSPROF_SYM_LFUNC, st));
			continue;
		}
		if (hdr >= LP_VMST__MAX)
			return lp_input_fail(in, LP_ERR_FORMAT, s.offset,
					     "unknown sysprof sample header 0x%02x", hdr);
		s.vmstate = hdr;
		switch (hdr) {
		case LP_VMST_LFUNC:
		case LP_VMST_FFUNC:
		case LP_VMST_CFUNC:
			TRY(lua_stack(in, sc, &s.nlua, s.offset));
			TRY(host_stack(in, sc, &s.nhost, s.offset));
			break;
		case LP_VMST_TRACE:
			TRY(lp_input_uleb(in, &s.traceno));
			TRY(lp_input_uleb(in, &s.trace_addr));
			TRY(lp_input_uleb(in, &s.trace_line));
			break;
		default:
			TRY(host_stack(in, sc, &s.nhost, s.offset));
			break;
		}
		s.lua = sc->lua;
		s.host = sc->host;
		st->events++;
		if (h->sys_sample)
			CALLBACK(in, h->sys_sample(h->ctx, &s));
	}
}

/* -- luaprof extension -------------------------------------------------------- */

/* Longest record accepted; records are small (paths, build-ids, short values). */
#define EXT_MAX_RECORD (1u << 20)

/* Ordinal of the last tsample (gsample, jsample, xsample) pair, +1 (0 before the first
 * pair): pairs continue across records. */
struct ext_state {
	struct sys_scratch *sc;
	uint64_t next_ordinal, next_gordinal, next_jordinal, next_xordinal;
};

/* Fields read so far run past the record's length (the last ones were read from the next
 * record): named as such before the consumer gets them, and before any check of their
 * values where a record's fields are fixed (a stack's frames are checked as they are
 * read). */
static int overrun(struct lp_input *in, uint8_t type, uint64_t start, uint64_t len, uint64_t at)
{
	uint64_t used = lp_input_offset(in) - start;
	if (used <= len)
		return LP_OK;
	return lp_input_fail(in, LP_ERR_FORMAT, at,
			     "extension record 0x%02x ends inside its fields (length %llu, the "
			     "fields take at least %llu)", type, (unsigned long long)len,
			     (unsigned long long)used);
}

static int ext_record(struct lp_input *in, const struct lp_parse_handlers *h, uint8_t type,
		      uint64_t len, uint64_t at, struct ext_state *es)
{
	uint64_t start = lp_input_offset(in);
	/* Strings are read one at a time into the input's scratch, so copy what must
	 * outlive the next read. */
	char *first = NULL;
	int rc = LP_OK;
	if (type == LP_EXT_MAP) {
		uint64_t lo, hi, off;
		const char *s;
		size_t n;
		TRY(lp_input_uleb(in, &lo));
		TRY(lp_input_uleb(in, &hi));
		TRY(lp_input_uleb(in, &off));
		TRY(lp_input_string(in, &s, &n));
		if (!(first = strndup(s, n)))
			return lp_input_fail(in, LP_ERR_NOMEM, at, "out of memory");
		rc = lp_input_string(in, &s, &n);
		if (rc == LP_OK)
			rc = overrun(in, type, start, len, at);
		if (rc == LP_OK && hi <= lo)
			rc = lp_input_fail(in, LP_ERR_FORMAT, at,
					   "mapping record with end 0x%llx not above start 0x%llx",
					   (unsigned long long)hi, (unsigned long long)lo);
		if (rc == LP_OK && h->ext_map && h->ext_map(h->ctx, lo, hi, off, first,
							       (const uint8_t *)s, n))
			rc = lp_input_fail(in, LP_ERR_ABORT, at, "stopped by the consumer");
	} else if (type == LP_EXT_META) {
		const char *s;
		size_t n;
		TRY(lp_input_string(in, &s, &n));
		if (!(first = strndup(s, n)))
			return lp_input_fail(in, LP_ERR_NOMEM, at, "out of memory");
		rc = lp_input_string(in, &s, &n);
		if (rc == LP_OK)
			rc = overrun(in, type, start, len, at);
		if (rc == LP_OK && h->ext_meta && h->ext_meta(h->ctx, first, s))
			rc = lp_input_fail(in, LP_ERR_ABORT, at, "stopped by the consumer");
	} else if (type == LP_EXT_TCODE) {
		uint64_t traceno, addr, size;
		TRY(lp_input_uleb(in, &traceno));
		TRY(lp_input_uleb(in, &addr));
		TRY(lp_input_uleb(in, &size));
		TRY(overrun(in, type, start, len, at));
		if (size == 0 || size > UINT32_MAX || addr + size < addr)
			return lp_input_fail(in, LP_ERR_FORMAT, at,
					     "trace code record with size 0x%llx at 0x%llx",
					     (unsigned long long)size, (unsigned long long)addr);
		if (h->ext_tcode && h->ext_tcode(h->ctx, traceno, addr, size))
			rc = lp_input_fail(in, LP_ERR_ABORT, at, "stopped by the consumer");
	} else if (type == LP_EXT_KCODE) {
		uint64_t traceno, key, size, proto, line;
		TRY(lp_input_uleb(in, &traceno));
		TRY(lp_input_uleb(in, &key));
		TRY(lp_input_uleb(in, &size));
		TRY(lp_input_uleb(in, &proto));
		TRY(lp_input_uleb(in, &line));
		TRY(overrun(in, type, start, len, at));
		if (!LP_HOST_KEYED(key))
			return lp_input_fail(in, LP_ERR_FORMAT, at,
					     "keyed trace code record at 0x%llx, an address without "
					     "a key", (unsigned long long)key);
		/* The extent stays within its key: one tag's addresses. */
		if (size == 0 || size > UINT32_MAX || key + size < key ||
		    (key + size - 1) >> LP_HOST_KEY_SHIFT != key >> LP_HOST_KEY_SHIFT)
			return lp_input_fail(in, LP_ERR_FORMAT, at,
					     "keyed trace code record with size 0x%llx at 0x%llx",
					     (unsigned long long)size, (unsigned long long)key);
		if (h->ext_kcode && h->ext_kcode(h->ctx, traceno, key, size, proto, line))
			rc = lp_input_fail(in, LP_ERR_ABORT, at, "stopped by the consumer");
	} else if (type == LP_EXT_CSIZE) {
		uint64_t addr, size;
		TRY(lp_input_uleb(in, &addr));
		TRY(lp_input_uleb(in, &size));
		TRY(overrun(in, type, start, len, at));
		if (h->ext_csize && h->ext_csize(h->ctx, addr, size))
			rc = lp_input_fail(in, LP_ERR_ABORT, at, "stopped by the consumer");
	} else if (type == LP_EXT_CNAME) {
		uint64_t addr;
		const char *s;
		size_t n;
		TRY(lp_input_uleb(in, &addr));
		TRY(lp_input_string(in, &s, &n));
		TRY(overrun(in, type, start, len, at));
		if (h->ext_cname && h->ext_cname(h->ctx, addr, s, n))
			rc = lp_input_fail(in, LP_ERR_ABORT, at, "stopped by the consumer");
	} else if (type == LP_EXT_STACK) {
		uint64_t id;
		size_t nlua, nhost;
		TRY(lp_input_uleb(in, &id));
		TRY(lua_stack(in, es->sc, &nlua, at));
		TRY(host_stack(in, es->sc, &nhost, at));
		TRY(overrun(in, type, start, len, at));
		if (h->ext_stack && h->ext_stack(h->ctx, id, es->sc->lua, nlua, es->sc->host, nhost))
			rc = lp_input_fail(in, LP_ERR_ABORT, at, "stopped by the consumer");
	} else if (type == LP_EXT_TSAMPLE || type == LP_EXT_GSAMPLE || type == LP_EXT_JSAMPLE ||
		   type == LP_EXT_XSAMPLE) {
		uint64_t *next = type == LP_EXT_GSAMPLE ? &es->next_gordinal
			       : type == LP_EXT_JSAMPLE ? &es->next_jordinal
			       : type == LP_EXT_XSAMPLE ? &es->next_xordinal : &es->next_ordinal;
		int (*cb)(void *, uint64_t, uint64_t) = type == LP_EXT_GSAMPLE ? h->ext_gsample
						       : type == LP_EXT_JSAMPLE ? h->ext_jsample
						       : type == LP_EXT_XSAMPLE ? h->ext_xsample
						       : h->ext_tsample;
		while (rc == LP_OK && lp_input_offset(in) - start < len) {
			uint64_t gap, id;
			TRY(lp_input_uleb(in, &gap));
			TRY(lp_input_uleb(in, &id));
			TRY(overrun(in, type, start, len, at));
			if (gap >= UINT64_MAX - *next)
				return lp_input_fail(in, LP_ERR_FORMAT, at,
						     "sample ordinal overflows 64 bits");
			uint64_t ordinal = *next + gap;
			*next = ordinal + 1;
			if (cb && cb(h->ctx, ordinal, id))
				rc = lp_input_fail(in, LP_ERR_ABORT, at,
						   "stopped by the consumer");
		}
	} else if (type == LP_EXT_ASAMPLE) {
		while (rc == LP_OK && lp_input_offset(in) - start < len) {
			uint64_t id, size, live;
			TRY(lp_input_uleb(in, &id));
			TRY(lp_input_uleb(in, &size));
			TRY(lp_input_uleb(in, &live));
			TRY(overrun(in, type, start, len, at));
			if (live > 1)
				return lp_input_fail(in, LP_ERR_FORMAT, at,
						     "sampled allocation with live flag %llu",
						     (unsigned long long)live);
			if (h->ext_asample && h->ext_asample(h->ctx, id, size, (int)live, 1))
				rc = lp_input_fail(in, LP_ERR_ABORT, at,
						   "stopped by the consumer");
		}
	} else if (type == LP_EXT_AFREED) {
		while (rc == LP_OK && lp_input_offset(in) - start < len) {
			uint64_t id, size, count;
			TRY(lp_input_uleb(in, &id));
			TRY(lp_input_uleb(in, &size));
			TRY(lp_input_uleb(in, &count));
			TRY(overrun(in, type, start, len, at));
			if (count == 0)
				return lp_input_fail(in, LP_ERR_FORMAT, at,
						     "freed sampled allocations counted 0");
			if (h->ext_asample && h->ext_asample(h->ctx, id, size, 0, count))
				rc = lp_input_fail(in, LP_ERR_ABORT, at,
						   "stopped by the consumer");
		}
	} else if (type == LP_EXT_ASTATE) {
		while (rc == LP_OK && lp_input_offset(in) - start < len) {
			uint64_t id, st;
			TRY(lp_input_uleb(in, &id));
			TRY(lp_input_uleb(in, &st));
			TRY(overrun(in, type, start, len, at));
			if (st != LP_VMST_GC && !LP_VMST_IS_COMPILER(st))
				return lp_input_fail(in, LP_ERR_FORMAT, at,
						     "sampled allocations' stack state %llu",
						     (unsigned long long)st);
			if (h->ext_astate && h->ext_astate(h->ctx, id, (unsigned)st))
				rc = lp_input_fail(in, LP_ERR_ABORT, at,
						   "stopped by the consumer");
		}
	} else {
		/* A record type from a newer writer: skip it whole. */
		for (uint64_t left = len; left > 0 && rc == LP_OK;) {
			uint8_t skip[256];
			size_t k = left < sizeof(skip) ? (size_t)left : sizeof(skip);
			rc = lp_input_bytes(in, skip, k);
			left -= k;
		}
	}
	free(first);
	if (rc != LP_OK)
		return rc;
	if (lp_input_offset(in) - start != len)
		return lp_input_fail(in, LP_ERR_FORMAT, at,
				     "extension record 0x%02x is %llu bytes long but its fields "
				     "take %llu", type, (unsigned long long)len,
				     (unsigned long long)(lp_input_offset(in) - start));
	return LP_OK;
}

static int extension(struct lp_input *in, const struct lp_parse_handlers *h,
		     struct lp_parse_stats *st, struct sys_scratch *sc)
{
	struct ext_state es = { sc, 0, 0, 0, 0 };
	uint64_t start = lp_input_offset(in);
	uint8_t p[LP_PROLOGUE_SIZE];
	size_t got;
	TRY(read_magic(in, "lpx", p, &got));
	if (got)
		return lp_input_fail(in, LP_ERR_FORMAT, start, "unexpected data after the epilogue");
	TRY(lp_input_bytes(in, p + 3, sizeof(p) - 3));
	if (p[3] != LP_EXT_VERSION)
		return lp_input_fail(in, LP_ERR_VERSION, start + 3,
				     "luaprof extension version mismatch: luaprof expects %u, the "
				     "file has %u", LP_EXT_VERSION, p[3]);
	st->extension = 1;
	for (;;) {
		uint64_t at = lp_input_offset(in), len;
		uint8_t type;
		TRY(lp_input_u8(in, &type));
		if (type == LP_EXT_END)
			return LP_OK;
		TRY(lp_input_uleb(in, &len));
		if (len > EXT_MAX_RECORD)
			return lp_input_fail(in, LP_ERR_FORMAT, at,
					     "extension record of %llu bytes exceeds the %u-byte "
					     "limit", (unsigned long long)len, EXT_MAX_RECORD);
		TRY(ext_record(in, h, type, len, at, &es));
	}
}

/* -- Whole stream ------------------------------------------------------------ */

static int profile_section(struct lp_input *in, const struct lp_parse_handlers *h,
			   struct lp_parse_stats *st, struct sys_scratch *sc)
{
	uint64_t start = lp_input_offset(in);
	uint8_t p[3];
	unsigned version;
	if (lp_input_at_eof(in))
		return lp_input_fail(in, LP_ERR_TRUNCATED, start,
				     "the symbol table is not followed by a profile (ljm or ljp)");
	TRY(lp_input_bytes(in, p, 3));
	const char *magic = NULL;
	if (!memcmp(p, "ljm", 3))
		magic = "ljm";
	else if (!memcmp(p, "ljp", 3))
		magic = "ljp";
	else
		return lp_input_fail(in, LP_ERR_FORMAT, start,
				     "bad profile prologue: expected magic \"ljm\" or \"ljp\", "
				     "found 0x%02x 0x%02x 0x%02x", p[0], p[1], p[2]);
	uint8_t rest[LP_PROLOGUE_SIZE - 3];
	TRY(lp_input_bytes(in, rest, sizeof(rest)));
	version = rest[0];
	enum lp_stream_kind kind = magic[2] == 'm' ? LP_STREAM_MEMPROF : LP_STREAM_SYSPROF;
	unsigned expect = kind == LP_STREAM_MEMPROF ? LP_MEMPROF_VERSION : LP_SYSPROF_VERSION;
	const char *what = kind == LP_STREAM_MEMPROF ? "memprof" : "sysprof";
	if (version != expect)
		return lp_input_fail(in, LP_ERR_VERSION, start + 3,
				     "%s version mismatch: luaprof expects %u, the file has %u",
				     what, expect, version);
	st->kind = kind;
	st->ext_due = (rest[LP_PROLOGUE_FLAGS - 3] & LP_PROLOGUE_EXT) != 0;
	if (h->stream)
		CALLBACK(in, h->stream(h->ctx, kind, version));
	if (kind == LP_STREAM_MEMPROF)
		return memprof(in, h, st);
	return sysprof(in, h, st, sc);
}

int lp_parse_stream(struct lp_input *in, const struct lp_parse_handlers *h,
		    struct lp_parse_stats *stats)
{
	struct lp_parse_stats local;
	struct sys_scratch sc = {0};
	struct lp_parse_stats *st = stats ? stats : &local;
	memset(st, 0, sizeof(*st));

	int rc = symtab(in, h, st);
	uint64_t section_start = lp_input_offset(in);
	if (rc == LP_OK)
		rc = profile_section(in, h, st, &sc);
	int in_profile = rc != LP_OK;
	if (st->kind)
		st->section_bytes = lp_input_offset(in) - section_start;
	if (rc == LP_OK) {
		st->complete = 1;
		if (!lp_input_at_eof(in)) {
			rc = extension(in, h, st, &sc);
			/* A cut extension loses what the producer wrote at the end (sampled
			 * allocations, full trace and GC stacks, facts): the file is not
			 * complete either. */
			if (rc == LP_ERR_TRUNCATED)
				snprintf(in->err, sizeof(in->err),
					 "the file is truncated inside its luaprof extension: what "
					 "the producer wrote after this byte (sampled allocations, "
					 "full trace stacks, its facts) is missing");
		} else if (st->ext_due) {
			/* Tarantool's streams end at the epilogue, luaprof's agent's never. */
			rc = lp_input_fail(in, LP_ERR_TRUNCATED, lp_input_offset(in),
					   "the file is truncated before its luaprof extension (its "
					   "prologue says its producer writes one): what that holds "
					   "(the profile's facts, names of builtins and objects, full "
					   "stacks, sampled allocations) is missing");
		}
		uint64_t end = lp_input_offset(in);
		if (rc == LP_OK && !lp_input_at_eof(in))
			rc = lp_input_fail(in, LP_ERR_FORMAT, end,
					   "unexpected data after the extension");
		if (rc == LP_ERR_TRUNCATED)
			st->complete = 0;
	}
	if (rc == LP_ERR_TRUNCATED && st->kind && in_profile)
		snprintf(in->err, sizeof(in->err),
			 "the file is truncated (no epilogue): the report covers the %llu "
			 "%s%s read before this byte", (unsigned long long)st->events,
			 st->kind == LP_STREAM_SYSPROF ? "sample" : "event",
			 st->events == 1 ? "" : "s");
	st->bytes = lp_input_offset(in);
	free(sc.lua);
	free(sc.host);
	return rc;
}
