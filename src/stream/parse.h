/*
** Streaming parser for profile files: symtab "ljs" followed by memprof "ljm" or sysprof "ljp".
**
** The parser validates every byte and hands each complete item to a callback as soon as it
** is read, keeping no per-event state itself, so memory stays constant however long the
** stream is. An item is delivered only once it is read completely; when input ends early
** everything before the cut has been delivered and the status is LP_ERR_TRUNCATED.
*/
#ifndef LP_PARSE_H
#define LP_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include "luaprof/format.h"
#include "stream/input.h"

/* Bounds on one sysprof sample; deeper stacks are malformed (LuaJIT itself cannot nest
 * more than ~65500 stack slots, and host unwinders stop far earlier). */
#define LP_MAX_LUA_FRAMES  65536
#define LP_MAX_HOST_FRAMES 8192

enum lp_stream_kind { LP_STREAM_MEMPROF = 1, LP_STREAM_SYSPROF = 2 };

struct lp_lua_frame {
	uint8_t type;   /* LP_FRAME_LFUNC, LP_FRAME_CFUNC or LP_FRAME_FFUNC */
	uint64_t addr;  /* proto address (LFUNC), function address (CFUNC), ffid (FFUNC) */
	uint64_t line;  /* LFUNC only */
};

struct lp_sys_sample {
	uint8_t vmstate;                  /* enum lp_vmstate */
	uint64_t offset;                  /* stream offset of the sample header */
	size_t nlua;                      /* Lua frames, innermost first */
	const struct lp_lua_frame *lua;
	size_t nhost;                     /* host return addresses, innermost first */
	const uint64_t *host;
	uint64_t traceno, trace_addr, trace_line; /* TRACE samples only */
};

struct lp_mem_event {
	uint8_t header;     /* raw header byte */
	uint8_t event;      /* LP_AEVENT_ALLOC, _FREE or _REALLOC */
	uint8_t source;     /* LP_ASOURCE_* */
	uint64_t loc_addr;  /* proto (LFUNC), C function (CFUNC); 0 otherwise */
	uint64_t loc_line;  /* LFUNC current line */
	uint64_t traceno;   /* TRACE */
	uint64_t oaddr, osize, naddr, nsize;
	uint64_t offset;    /* stream offset of the event header */
};

/*
** Callbacks; any may be NULL. A callback returns 0 to continue or non-zero to abort the
** parse with LP_ERR_ABORT (it should set the input's message with lp_input_fail first).
** Strings are valid only during the call.
*/
struct lp_parse_handlers {
	void *ctx;
	int (*stream)(void *ctx, enum lp_stream_kind kind, unsigned version);
	int (*sym_lua)(void *ctx, uint64_t addr, const char *chunk, size_t len, uint64_t line);
	int (*sym_cfunc)(void *ctx, uint64_t addr, const char *name, size_t len);
	int (*sym_trace)(void *ctx, uint64_t traceno, uint64_t addr, uint64_t line);
	int (*symtab_end)(void *ctx);
	int (*mem_event)(void *ctx, const struct lp_mem_event *ev);
	int (*sys_sample)(void *ctx, const struct lp_sys_sample *s);
	/* luaprof extension records (docs/FORMAT.md); build_id is raw bytes. */
	int (*ext_map)(void *ctx, uint64_t start, uint64_t end, uint64_t offset,
		       const char *path, const uint8_t *build_id, size_t build_id_len);
	int (*ext_meta)(void *ctx, const char *key, const char *value);
	int (*ext_csize)(void *ctx, uint64_t addr, uint64_t size);
	/* A cname record: name (len bytes, valid only during the call) is what the program's
	 * Lua calls the C function whose entry is addr. */
	int (*ext_cname)(void *ctx, uint64_t addr, const char *name, size_t len);
	/* A stack record: lua[] and host[] as in a sample (innermost first); valid only
	 * during the call. */
	int (*ext_stack)(void *ctx, uint64_t id, const struct lp_lua_frame *lua, size_t nlua,
			 const uint64_t *host, size_t nhost);
	/* One pair of a tsample record: the profile's TRACE sample number `ordinal`
	 * (0-based, counting TRACE samples only) has the full stack `id`. */
	int (*ext_tsample)(void *ctx, uint64_t ordinal, uint64_t id);
	/* One pair of a gsample record: the profile's GC sample number `ordinal` (0-based,
	 * counting GC samples only) ran the collector under the Lua + host stack `id`. */
	int (*ext_gsample)(void *ctx, uint64_t ordinal, uint64_t id);
	/* The same for a jsample record: JIT compiler samples (RECORD, OPT, ASM), counting
	 * those only; the stack is the Lua code being compiled and the compiler's. */
	int (*ext_jsample)(void *ctx, uint64_t ordinal, uint64_t id);
	/* The same for an xsample record: trace exit samples (EXIT), counting those only; the
	 * stack is the Lua frames the exit returns to and the exit handler's. */
	int (*ext_xsample)(void *ctx, uint64_t ordinal, uint64_t id);
	/* A tcode record: trace traceno's machine code is [addr, addr + size). */
	int (*ext_tcode)(void *ctx, uint64_t traceno, uint64_t addr, uint64_t size);
	/* A kcode record: trace traceno, starting at line of the prototype the stream names
	 * proto, had its machine code at the keyed addresses [key, key + size). */
	int (*ext_kcode)(void *ctx, uint64_t traceno, uint64_t key, uint64_t size, uint64_t proto,
			 uint64_t line);
	/* Sampled allocations of one stack id and size: count of them (1 for an asample
	 * record's, 1 or more for an afreed record's), and whether they were still allocated
	 * when the profile stopped (an afreed record's never are). */
	int (*ext_asample)(void *ctx, uint64_t id, uint64_t size, int live, uint64_t count);
	/* One pair of an astate record: the sampled allocations of stack id were made by the
	 * collector or the JIT compiler, in VM state vmstate (enum lp_vmstate: GC, RECORD,
	 * OPT, ASM). */
	int (*ext_astate)(void *ctx, uint64_t id, unsigned vmstate);
};

/* Counters of what was read; valid whatever the status. */
struct lp_parse_stats {
	enum lp_stream_kind kind;  /* 0 until the profile section's magic is read */
	uint64_t symbols;          /* symtab entries and mid-stream symbol events */
	uint64_t events;           /* memprof events or sysprof samples */
	uint64_t bytes;            /* bytes consumed */
	uint64_t section_bytes;    /* of them, the profile section's: its prologue through its
				    * epilogue, or through the cut */
	int complete;              /* the epilogue was read, and the extension (if any) whole */
	int extension;             /* an "lpx" extension followed the epilogue */
	int ext_due;               /* the profile's prologue says one follows (LP_PROLOGUE_EXT) */
};

/*
** Parses one whole stream from `in`. Returns LP_OK, or a status with the message in `in`
** (see lp_input_message). After the epilogue only a luaprof extension may follow; any
** other trailing bytes are malformed.
*/
int lp_parse_stream(struct lp_input *in, const struct lp_parse_handlers *h,
		    struct lp_parse_stats *stats);

/*
** Reads the start of a stream from `in` as lp_parse_stream does (the symbol table's
** prologue: its magic and the version this parser reads): LP_OK when what follows is a
** stream lp_parse_stream would read, else the status it would fail with, the message in
** `in`. Lets a caller tell a profile from other data without a copy of the magic.
*/
int lp_parse_starts_stream(struct lp_input *in);

/* Name of a VM state ("INTERP", ...), or NULL when out of range. */
const char *lp_vmstate_name(unsigned vmstate);

#endif
