/*
** libFuzzer target for the stream parser: arbitrary bytes through lp_parse_stream, every
** field and string touched, and a writer -> parser re-encoding that must read back the same.
**
** Invariants checked (abort() on violation, so libFuzzer keeps the input):
**   - the status is one of enum lp_status and LP_OK only with the epilogue read;
**   - the error offset and the bytes consumed lie within the input;
**   - strings are NUL-terminated at their length and stacks are within the parser's bounds;
**   - a stream that parses OK, written again with stream/writer.h, parses OK to the same
**     sequence of items (compared through an order-sensitive hash of every field).
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "luaprof/format.h"
#include "stream/input.h"
#include "stream/parse.h"
#include "stream/wbuf.h"
#include "stream/writer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Growing in-memory copy of what the re-encoder writes. */
struct sink {
	uint8_t *data;
	size_t len, cap;
};

static size_t sink_write(const void **buf, size_t len, void *ctx)
{
	struct sink *k = ctx;
	if (k->len + len > k->cap) {
		size_t cap = k->cap ? k->cap : 4096;
		while (cap < k->len + len)
			cap *= 2;
		uint8_t *p = realloc(k->data, cap);
		if (!p)
			return 0;
		k->data = p;
		k->cap = cap;
	}
	memcpy(k->data + k->len, *buf, len);
	k->len += len;
	return len;
}

struct state {
	uint64_t hash;          /* FNV-1a over every delivered field, in order */
	uint64_t items;
	int in_profile;         /* symbols after the profile prologue are mid-stream events */
	enum lp_stream_kind kind;
	struct lp_wbuf *w;      /* re-encoder, or NULL on the second pass */
};

static void mix(struct state *s, uint64_t v)
{
	for (int i = 0; i < 8; i++) {
		s->hash ^= (uint8_t)(v >> (8 * i));
		s->hash *= 0x100000001b3ull;
	}
}

static void mix_str(struct state *s, const char *str, size_t len)
{
	if (str[len] != '\0')
		abort();
	mix(s, len);
	for (size_t i = 0; i < len; i++) {
		s->hash ^= (uint8_t)str[i];
		s->hash *= 0x100000001b3ull;
	}
}

static int on_stream(void *ctx, enum lp_stream_kind kind, unsigned version)
{
	struct state *s = ctx;
	if (kind != LP_STREAM_MEMPROF && kind != LP_STREAM_SYSPROF)
		abort();
	s->in_profile = 1;
	s->kind = kind;
	mix(s, 1000 + kind);
	mix(s, version);
	s->items++;
	if (s->w) {
		if (kind == LP_STREAM_MEMPROF)
			lp_write_memprof_prologue(s->w);
		else
			lp_write_sysprof_prologue(s->w);
	}
	return 0;
}

static int on_sym_lua(void *ctx, uint64_t addr, const char *chunk, size_t len, uint64_t line)
{
	struct state *s = ctx;
	mix(s, 2000);
	mix(s, addr);
	mix_str(s, chunk, len);
	mix(s, line);
	s->items++;
	if (s->w) {
		if (!s->in_profile)
			lp_write_sym_lua(s->w, addr, chunk, len, line);
		else if (s->kind == LP_STREAM_MEMPROF)
			lp_write_mem_sym_lua(s->w, addr, chunk, len, line);
		else
			lp_write_sys_sym_lua(s->w, addr, chunk, len, line);
	}
	return 0;
}

static int on_sym_cfunc(void *ctx, uint64_t addr, const char *name, size_t len)
{
	struct state *s = ctx;
	mix(s, 3000);
	mix(s, addr);
	mix_str(s, name, len);
	s->items++;
	if (s->w) {
		if (!s->in_profile)
			lp_write_sym_cfunc(s->w, addr, name, len);
		else if (s->kind == LP_STREAM_MEMPROF)
			lp_write_mem_sym_cfunc(s->w, addr, name, len);
		else
			lp_write_sys_sym_cfunc(s->w, addr, name, len);
	}
	return 0;
}

static int on_sym_trace(void *ctx, uint64_t traceno, uint64_t addr, uint64_t line)
{
	struct state *s = ctx;
	mix(s, 4000);
	mix(s, traceno);
	mix(s, addr);
	mix(s, line);
	s->items++;
	if (s->w) {
		if (!s->in_profile)
			lp_write_sym_trace(s->w, traceno, addr, line);
		else if (s->kind == LP_STREAM_MEMPROF)
			lp_write_mem_sym_trace(s->w, traceno, addr, line);
		else
			lp_write_sys_sym_trace(s->w, traceno, addr, line);
	}
	return 0;
}

static int on_symtab_end(void *ctx)
{
	struct state *s = ctx;
	mix(s, 5000);
	s->items++;
	if (s->w)
		lp_write_symtab_final(s->w);
	return 0;
}

static int on_mem(void *ctx, const struct lp_mem_event *ev)
{
	struct state *s = ctx;
	if (ev->header != (ev->event | ev->source) || ev->event == LP_AEVENT_SYMTAB ||
	    ev->source < LP_ASOURCE_INT || ev->source > LP_ASOURCE_TRACE)
		abort();
	mix(s, 6000);
	mix(s, ev->header);
	mix(s, ev->loc_addr);
	mix(s, ev->loc_line);
	mix(s, ev->traceno);
	mix(s, ev->oaddr);
	mix(s, ev->osize);
	mix(s, ev->naddr);
	mix(s, ev->nsize);
	/* Offsets differ after re-encoding (overlong ULEB128 is accepted), so not hashed. */
	s->items++;
	if (s->w)
		lp_write_mem_event(s->w, ev);
	return 0;
}

static int on_sys(void *ctx, const struct lp_sys_sample *smp)
{
	struct state *s = ctx;
	if (smp->vmstate >= LP_VMST__MAX || !lp_vmstate_name(smp->vmstate) ||
	    smp->nlua > LP_MAX_LUA_FRAMES || smp->nhost > LP_MAX_HOST_FRAMES)
		abort();
	mix(s, 7000);
	mix(s, smp->vmstate);
	mix(s, smp->traceno);
	mix(s, smp->trace_addr);
	mix(s, smp->trace_line);
	mix(s, smp->nlua);
	for (size_t i = 0; i < smp->nlua; i++) {
		const struct lp_lua_frame *f = &smp->lua[i];
		if (f->type < LP_FRAME_LFUNC || f->type > LP_FRAME_FFUNC ||
		    (f->type != LP_FRAME_LFUNC && f->line != 0))
			abort();
		mix(s, f->type);
		mix(s, f->addr);
		mix(s, f->line);
	}
	mix(s, smp->nhost);
	for (size_t i = 0; i < smp->nhost; i++) {
		if (smp->host[i] == 0)
			abort();
		mix(s, smp->host[i]);
	}
	s->items++;
	if (s->w)
		lp_write_sys_sample(s->w, smp);
	return 0;
}

static int parse(const uint8_t *data, size_t size, struct state *s, struct lp_parse_stats *st)
{
	static const struct lp_parse_handlers proto = {
		.stream = on_stream, .sym_lua = on_sym_lua, .sym_cfunc = on_sym_cfunc,
		.sym_trace = on_sym_trace, .symtab_end = on_symtab_end, .mem_event = on_mem,
		.sys_sample = on_sys,
	};
	struct lp_parse_handlers h = proto;
	h.ctx = s;
	struct lp_input in;
	lp_input_open_mem(&in, data, size, "fuzz");
	int rc = lp_parse_stream(&in, &h, st);
	switch (rc) {
	case LP_OK:
		if (!st->complete || st->bytes != size)
			abort();
		break;
	case LP_ERR_FORMAT:
	case LP_ERR_TRUNCATED:
	case LP_ERR_VERSION:
		if (in.status != rc || in.err_offset > size || in.err[0] == '\0')
			abort();
		break;
	default:
		abort(); /* no I/O, no allocation failure under the RSS limit, no abort */
	}
	if (st->bytes > size)
		abort();
	if (rc == LP_ERR_TRUNCATED && in.err_offset != size)
		abort();
	char msg[700];
	lp_input_message(&in, msg, sizeof(msg));
	if (strlen(msg) >= sizeof(msg))
		abort();
	lp_input_close(&in);
	return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Re-encode into a buffer small enough to flush often. */
	struct sink k = {0};
	uint8_t buf[64];
	struct lp_wbuf w;
	lp_wbuf_init(&w, buf, sizeof(buf), sink_write, &k);
	lp_write_symtab_prologue(&w);

	struct state first = { .hash = 0xcbf29ce484222325ull, .w = &w };
	struct lp_parse_stats st1;
	int rc = parse(data, size, &first, &st1);
	if (rc == LP_OK) {
		if (st1.kind == LP_STREAM_MEMPROF)
			lp_write_memprof_epilogue(&w);
		else
			lp_write_sysprof_epilogue(&w);
		lp_wbuf_flush(&w);
		if (!lp_wbuf_ok(&w))
			abort();
		struct state second = { .hash = 0xcbf29ce484222325ull };
		struct lp_parse_stats st2;
		if (parse(k.data, k.len, &second, &st2) != LP_OK)
			abort();
		if (second.hash != first.hash || second.items != first.items ||
		    st2.events != st1.events || st2.symbols != st1.symbols ||
		    st2.kind != st1.kind || k.len > size)
			abort();
	}
	free(k.data);
	return 0;
}
