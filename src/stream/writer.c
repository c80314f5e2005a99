/*
** Producers of symtab / memprof / sysprof streams.
*/
#include "stream/writer.h"

#include <string.h>

#include "luaprof/format.h"

static void prologue_flags(struct lp_wbuf *w, const char *magic, uint8_t version, uint8_t flags)
{
	const uint8_t p[LP_PROLOGUE_SIZE] = { (uint8_t)magic[0], (uint8_t)magic[1],
					      (uint8_t)magic[2], version, flags, 0, 0 };
	lp_wbuf_bytes(w, p, sizeof(p));
}

static void prologue(struct lp_wbuf *w, const char *magic, uint8_t version)
{
	prologue_flags(w, magic, version, 0);
}

/* Symbol bodies are shared by the symtab and by mid-stream symbol events. */
static void body_lua(struct lp_wbuf *w, uint64_t proto, const char *chunk, size_t len, uint64_t line)
{
	lp_wbuf_uleb(w, proto);
	lp_wbuf_string(w, chunk, len);
	lp_wbuf_uleb(w, line);
}

static void body_cfunc(struct lp_wbuf *w, uint64_t addr, const char *name, size_t len)
{
	lp_wbuf_uleb(w, addr);
	lp_wbuf_string(w, name, len);
}

static void body_trace(struct lp_wbuf *w, uint64_t traceno, uint64_t proto, uint64_t line)
{
	lp_wbuf_uleb(w, traceno);
	lp_wbuf_uleb(w, proto);
	lp_wbuf_uleb(w, line);
}

void lp_write_symtab_prologue(struct lp_wbuf *w)
{
	prologue(w, "ljs", LP_SYMTAB_VERSION);
}

void lp_write_sym_lua(struct lp_wbuf *w, uint64_t proto, const char *chunk, size_t len, uint64_t line)
{
	lp_wbuf_u8(w, LP_SYMTAB_LFUNC);
	body_lua(w, proto, chunk, len, line);
}

void lp_write_sym_cfunc(struct lp_wbuf *w, uint64_t addr, const char *name, size_t len)
{
	lp_wbuf_u8(w, LP_SYMTAB_CFUNC);
	body_cfunc(w, addr, name, len);
}

void lp_write_sym_trace(struct lp_wbuf *w, uint64_t traceno, uint64_t proto, uint64_t line)
{
	lp_wbuf_u8(w, LP_SYMTAB_TRACE);
	body_trace(w, traceno, proto, line);
}

void lp_write_symtab_final(struct lp_wbuf *w)
{
	lp_wbuf_u8(w, LP_SYMTAB_FINAL);
}

void lp_write_memprof_prologue(struct lp_wbuf *w)
{
	prologue(w, "ljm", LP_MEMPROF_VERSION);
}

void lp_write_memprof_prologue_ext(struct lp_wbuf *w)
{
	prologue_flags(w, "ljm", LP_MEMPROF_VERSION, LP_PROLOGUE_EXT);
}

void lp_write_mem_event(struct lp_wbuf *w, const struct lp_mem_event *ev)
{
	lp_wbuf_u8(w, (uint8_t)(ev->event | ev->source));
	switch (ev->source) {
	case LP_ASOURCE_LFUNC:
		lp_wbuf_uleb(w, ev->loc_addr);
		lp_wbuf_uleb(w, ev->loc_line);
		break;
	case LP_ASOURCE_CFUNC:
		lp_wbuf_uleb(w, ev->loc_addr);
		break;
	case LP_ASOURCE_TRACE:
		lp_wbuf_uleb(w, ev->traceno);
		break;
	}
	if (ev->event != LP_AEVENT_ALLOC) {
		lp_wbuf_uleb(w, ev->oaddr);
		lp_wbuf_uleb(w, ev->osize);
	}
	if (ev->event != LP_AEVENT_FREE) {
		lp_wbuf_uleb(w, ev->naddr);
		lp_wbuf_uleb(w, ev->nsize);
	}
}

void lp_write_mem_sym_lua(struct lp_wbuf *w, uint64_t proto, const char *chunk, size_t len, uint64_t line)
{
	lp_wbuf_u8(w, LP_AEVENT_SYMTAB | LP_ASOURCE_LFUNC);
	body_lua(w, proto, chunk, len, line);
}

void lp_write_mem_sym_cfunc(struct lp_wbuf *w, uint64_t addr, const char *name, size_t len)
{
	lp_wbuf_u8(w, LP_AEVENT_SYMTAB | LP_ASOURCE_CFUNC);
	body_cfunc(w, addr, name, len);
}

void lp_write_mem_sym_trace(struct lp_wbuf *w, uint64_t traceno, uint64_t proto, uint64_t line)
{
	lp_wbuf_u8(w, LP_AEVENT_SYMTAB | LP_ASOURCE_TRACE);
	body_trace(w, traceno, proto, line);
}

void lp_write_memprof_epilogue(struct lp_wbuf *w)
{
	lp_wbuf_u8(w, LP_MEMPROF_EPILOGUE);
}

void lp_write_sysprof_prologue(struct lp_wbuf *w)
{
	prologue(w, "ljp", LP_SYSPROF_VERSION);
}

void lp_write_sysprof_prologue_ext(struct lp_wbuf *w)
{
	prologue_flags(w, "ljp", LP_SYSPROF_VERSION, LP_PROLOGUE_EXT);
}

void lp_write_sys_stacks(struct lp_wbuf *w, const struct lp_sys_sample *s)
{
	for (size_t i = 0; i < s->nlua; i++) {
		lp_wbuf_u8(w, s->lua[i].type);
		lp_wbuf_uleb(w, s->lua[i].addr);
		if (s->lua[i].type == LP_FRAME_LFUNC)
			lp_wbuf_uleb(w, s->lua[i].line);
	}
	lp_wbuf_u8(w, LP_FRAME_LUA_LAST);
	for (size_t i = 0; i < s->nhost; i++)
		lp_wbuf_uleb(w, s->host[i]);
	lp_wbuf_uleb(w, 0);
}

uint8_t *lp_put_sys_stacks(uint8_t *p, const struct lp_sys_sample *s)
{
	/* lp_uleb_put_addr stores 8 bytes for a 7-byte value: the bound's last 8 bytes. */
	for (size_t i = 0; i < s->nlua; i++) {
		*p++ = s->lua[i].type;
		p = lp_uleb_put_addr(p, s->lua[i].addr);
		if (s->lua[i].type == LP_FRAME_LFUNC)
			p = lp_uleb_put_small(p, s->lua[i].line);
	}
	*p++ = LP_FRAME_LUA_LAST;
	for (size_t i = 0; i < s->nhost; i++)
		p = lp_uleb_put_addr(p, s->host[i]);
	*p++ = 0;
	return p;
}

void lp_write_sys_sample(struct lp_wbuf *w, const struct lp_sys_sample *s)
{
	lp_wbuf_u8(w, s->vmstate);
	if (s->vmstate == LP_VMST_TRACE) {
		lp_wbuf_uleb(w, s->traceno);
		lp_wbuf_uleb(w, s->trace_addr);
		lp_wbuf_uleb(w, s->trace_line);
		return;
	}
	if (s->vmstate == LP_VMST_LFUNC || s->vmstate == LP_VMST_FFUNC ||
	    s->vmstate == LP_VMST_CFUNC) {
		lp_write_sys_stacks(w, s);
		return;
	}
	for (size_t i = 0; i < s->nhost; i++)
		lp_wbuf_uleb(w, s->host[i]);
	lp_wbuf_uleb(w, 0);
}

void lp_write_sys_sym_lua(struct lp_wbuf *w, uint64_t proto, const char *chunk, size_t len, uint64_t line)
{
	lp_wbuf_u8(w, LP_SYSPROF_SYM_LFUNC);
	body_lua(w, proto, chunk, len, line);
}

void lp_write_sys_sym_cfunc(struct lp_wbuf *w, uint64_t addr, const char *name, size_t len)
{
	lp_wbuf_u8(w, LP_SYSPROF_SYM_CFUNC);
	body_cfunc(w, addr, name, len);
}

void lp_write_sys_sym_trace(struct lp_wbuf *w, uint64_t traceno, uint64_t proto, uint64_t line)
{
	lp_wbuf_u8(w, LP_SYSPROF_SYM_TRACE);
	body_trace(w, traceno, proto, line);
}

void lp_write_sysprof_epilogue(struct lp_wbuf *w)
{
	lp_wbuf_u8(w, LP_SYSPROF_EPILOGUE);
}

void lp_write_ext_prologue(struct lp_wbuf *w)
{
	prologue(w, "lpx", LP_EXT_VERSION);
}

static size_t uleb_len(uint64_t v)
{
	uint8_t tmp[10];
	return lp_uleb_encode(v, tmp);
}

static size_t string_len(size_t n)
{
	return uleb_len(n) + n;
}

void lp_write_ext_map(struct lp_wbuf *w, uint64_t start, uint64_t end, uint64_t offset,
		      const char *path, const uint8_t *build_id, size_t build_id_len)
{
	size_t plen = strlen(path);
	lp_wbuf_u8(w, LP_EXT_MAP);
	lp_wbuf_uleb(w, uleb_len(start) + uleb_len(end) + uleb_len(offset) + string_len(plen) +
			       string_len(build_id_len));
	lp_wbuf_uleb(w, start);
	lp_wbuf_uleb(w, end);
	lp_wbuf_uleb(w, offset);
	lp_wbuf_string(w, path, plen);
	lp_wbuf_string(w, (const char *)build_id, build_id_len);
}

void lp_write_ext_meta(struct lp_wbuf *w, const char *key, const char *value)
{
	size_t kl = strlen(key), vl = strlen(value);
	lp_wbuf_u8(w, LP_EXT_META);
	lp_wbuf_uleb(w, string_len(kl) + string_len(vl));
	lp_wbuf_string(w, key, kl);
	lp_wbuf_string(w, value, vl);
}

void lp_write_ext_csize(struct lp_wbuf *w, uint64_t addr, uint64_t size)
{
	lp_wbuf_u8(w, LP_EXT_CSIZE);
	lp_wbuf_uleb(w, uleb_len(addr) + uleb_len(size));
	lp_wbuf_uleb(w, addr);
	lp_wbuf_uleb(w, size);
}

void lp_write_ext_cname(struct lp_wbuf *w, uint64_t addr, const char *name, size_t len)
{
	lp_wbuf_u8(w, LP_EXT_CNAME);
	lp_wbuf_uleb(w, uleb_len(addr) + string_len(len));
	lp_wbuf_uleb(w, addr);
	lp_wbuf_string(w, name, len);
}

void lp_write_ext_record(struct lp_wbuf *w, uint8_t type, const void *payload, size_t len)
{
	lp_wbuf_u8(w, type);
	lp_wbuf_uleb(w, len);
	lp_wbuf_bytes(w, payload, len);
}

void lp_write_ext_end(struct lp_wbuf *w)
{
	lp_wbuf_u8(w, LP_EXT_END);
}
