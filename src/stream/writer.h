/*
** Producers of symtab / memprof / sysprof streams on top of a write buffer.
**
** One function per grammar item (docs/FORMAT.md), so a profiler emits a stream by calling
** them in grammar order. None allocates; all are usable from a signal handler.
*/
#ifndef LP_WRITER_H
#define LP_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "stream/parse.h"
#include "stream/wbuf.h"

/* -- Symbol table -- */
void lp_write_symtab_prologue(struct lp_wbuf *w);
void lp_write_sym_lua(struct lp_wbuf *w, uint64_t proto, const char *chunk, size_t len, uint64_t line);
void lp_write_sym_cfunc(struct lp_wbuf *w, uint64_t addr, const char *name, size_t len);
void lp_write_sym_trace(struct lp_wbuf *w, uint64_t traceno, uint64_t proto, uint64_t line);
void lp_write_symtab_final(struct lp_wbuf *w);

/* -- Memprof -- */
void lp_write_memprof_prologue(struct lp_wbuf *w);
/* The prologue of a stream whose producer writes a luaprof extension after the epilogue
 * (LP_PROLOGUE_EXT): readers take one that ends at its epilogue for a cut one. */
void lp_write_memprof_prologue_ext(struct lp_wbuf *w);
/* Writes an alloc, free or realloc event; which fields are written follows ev->event and
 * ev->source exactly as lp_parse_stream reads them. */
void lp_write_mem_event(struct lp_wbuf *w, const struct lp_mem_event *ev);
void lp_write_mem_sym_lua(struct lp_wbuf *w, uint64_t proto, const char *chunk, size_t len, uint64_t line);
void lp_write_mem_sym_cfunc(struct lp_wbuf *w, uint64_t addr, const char *name, size_t len);
void lp_write_mem_sym_trace(struct lp_wbuf *w, uint64_t traceno, uint64_t proto, uint64_t line);
void lp_write_memprof_epilogue(struct lp_wbuf *w);

/* -- Sysprof -- */
void lp_write_sysprof_prologue(struct lp_wbuf *w);
void lp_write_sysprof_prologue_ext(struct lp_wbuf *w); /* as lp_write_memprof_prologue_ext */
/* Writes one sample in the shape its vmstate calls for (guest, host or trace). */
void lp_write_sys_sample(struct lp_wbuf *w, const struct lp_sys_sample *s);
/* Writes "lua-stack host-stack" of s whatever its vmstate: a sample's body, and the body of
 * an extension stack record. */
void lp_write_sys_stacks(struct lp_wbuf *w, const struct lp_sys_sample *s);
/* The same bytes straight into memory, without the write buffer's call and room check per
 * value (sampled memprof encodes a stack per capture to intern it): p has room for
 * LP_SYS_STACKS_MAX(s->nlua, s->nhost) bytes. Returns the position after the stacks. */
#define LP_SYS_STACKS_MAX(nlua, nhost) ((nlua) * 21 + 1 + (nhost) * 10 + 10 + 8)
uint8_t *lp_put_sys_stacks(uint8_t *p, const struct lp_sys_sample *s);
void lp_write_sys_sym_lua(struct lp_wbuf *w, uint64_t proto, const char *chunk, size_t len, uint64_t line);
void lp_write_sys_sym_cfunc(struct lp_wbuf *w, uint64_t addr, const char *name, size_t len);
void lp_write_sys_sym_trace(struct lp_wbuf *w, uint64_t traceno, uint64_t proto, uint64_t line);
void lp_write_sysprof_epilogue(struct lp_wbuf *w);

/* -- luaprof extension, after either epilogue -- */
void lp_write_ext_prologue(struct lp_wbuf *w);
void lp_write_ext_map(struct lp_wbuf *w, uint64_t start, uint64_t end, uint64_t offset,
		      const char *path, const uint8_t *build_id, size_t build_id_len);
void lp_write_ext_meta(struct lp_wbuf *w, const char *key, const char *value);
void lp_write_ext_csize(struct lp_wbuf *w, uint64_t addr, uint64_t size);
void lp_write_ext_cname(struct lp_wbuf *w, uint64_t addr, const char *name, size_t len);
/* A record whose payload the caller encoded (stack, tsample). */
void lp_write_ext_record(struct lp_wbuf *w, uint8_t type, const void *payload, size_t len);
void lp_write_ext_end(struct lp_wbuf *w);

#endif
