/*
** luaprof stream format constants: symtab "ljs" v3, memprof "ljm" v3, sysprof "ljp" v2.
**
** These are byte-compatible with the final formats of Tarantool's LuaJIT fork, so that
** streams written by either side can be read by the other's tools. The grammar, byte by
** byte, is in docs/FORMAT.md; this header only names the numbers.
*/
#ifndef LUAPROF_FORMAT_H
#define LUAPROF_FORMAT_H

/* Every stream section opens with 3 magic bytes, a version byte and 3 reserved bytes. */
#define LP_PROLOGUE_SIZE 7
/* The first reserved byte of a profile's prologue ("ljm", "ljp"): flags, zero in what
 * Tarantool writes (its parsers skip the byte). LP_PROLOGUE_EXT: the producer writes a
 * luaprof extension after the epilogue, so a stream that ends at its epilogue was cut. */
#define LP_PROLOGUE_FLAGS 4
#define LP_PROLOGUE_EXT   0x01

/* -- Symbol table ("ljs") -------------------------------------------------- */

#define LP_SYMTAB_VERSION 3
#define LP_SYMTAB_LFUNC   0    /* sym-addr(proto) chunk-name first-line */
#define LP_SYMTAB_CFUNC   1    /* sym-addr(function) name */
#define LP_SYMTAB_TRACE   2    /* trace-no sym-addr(start proto) start-line */
#define LP_SYMTAB_FINAL   0x80 /* closes the symbol table */

/* -- Memory profile ("ljm") ------------------------------------------------ */

#define LP_MEMPROF_VERSION 3
/* Event header byte: [FUUSSSEE] - EE event kind, SSS allocation source, F final. */
#define LP_AEVENT_SYMTAB  0
#define LP_AEVENT_ALLOC   1
#define LP_AEVENT_FREE    2
#define LP_AEVENT_REALLOC 3
#define LP_AEVENT_MASK    0x3
#define LP_ASOURCE_INT    (1 << 2) /* GC, JIT compiler and other VM-internal work */
#define LP_ASOURCE_LFUNC  (2 << 2) /* Lua function: proto address and current line */
#define LP_ASOURCE_CFUNC  (3 << 2) /* C function: its address */
#define LP_ASOURCE_TRACE  (4 << 2) /* JIT trace: its number */
#define LP_ASOURCE_MASK   (7 << 2)
#define LP_MEMPROF_EPILOGUE 0x80

/* -- System profile ("ljp") ------------------------------------------------ */

#define LP_SYSPROF_VERSION 2
/* A sample's header byte is the VM state it was taken in, 0..9, in this order. */
enum lp_vmstate {
	LP_VMST_INTERP, LP_VMST_LFUNC, LP_VMST_FFUNC, LP_VMST_CFUNC, LP_VMST_GC,
	LP_VMST_EXIT, LP_VMST_RECORD, LP_VMST_OPT, LP_VMST_ASM, LP_VMST_TRACE,
	LP_VMST__MAX
};
/* The JIT compiler's states: the samples a jsample record (luaprof extension) covers. */
#define LP_VMST_IS_COMPILER(st) ((st) >= LP_VMST_RECORD && (st) <= LP_VMST_ASM)
#define LP_FRAME_LFUNC     1    /* frame-header sym-addr(proto) line */
#define LP_FRAME_CFUNC     2    /* frame-header address of the C function */
#define LP_FRAME_FFUNC     3    /* frame-header fast-function id */
#define LP_FRAME_LUA_LAST  0x80 /* ends the Lua stack of a sample */
/* The last host address of a stack the writer cut short (its walk met its depth limit or
 * lost its way before the program's first frame): no return address is 1. */
#define LP_HOST_CUT        1
#define LP_SYSPROF_SYM_LFUNC 10 /* mid-stream symbol events: a sym-* body follows */
#define LP_SYSPROF_SYM_CFUNC 11
#define LP_SYSPROF_SYM_TRACE 12
#define LP_SYSPROF_EPILOGUE  0x80

/* -- luaprof extension ("lpx"), optional, after a profile's epilogue ------------------
 * Facts the Tarantool formats cannot carry. Tarantool's parsers stop at the epilogue and
 * never see it. Records are length-prefixed so readers skip types they do not know. */

#define LP_EXT_VERSION 1
#define LP_EXT_END     0x00 /* closes the extension */
#define LP_EXT_MAP     0x01 /* start end file-offset path build-id: one mapped object */
#define LP_EXT_META    0x02 /* key value: facts about the recording */
#define LP_EXT_CSIZE   0x03 /* addr size: extent of a C symbol of the symtab */
#define LP_EXT_STACK   0x04 /* id lua-stack host-stack: a stack the samples below refer to */
#define LP_EXT_TSAMPLE 0x05 /* (gap id)*: full stacks of TRACE samples, by their ordinal */
#define LP_EXT_ASAMPLE 0x06 /* (stack size live)*: sampled allocations (memprof sampled mode) */
#define LP_EXT_GSAMPLE 0x07 /* (gap id)*: Lua + host stacks of GC samples, by their ordinal */
#define LP_EXT_TCODE   0x08 /* traceno addr size: machine code of a trace of the symtab */
#define LP_EXT_JSAMPLE 0x09 /* (gap id)*: Lua + host stacks of JIT compiler samples (RECORD,
			     * OPT, ASM), by their ordinal among those */
#define LP_EXT_ASTATE  0x0a /* (stack vmstate)*: stacks of sampled allocations made by the
			     * collector (GC) or the JIT compiler (RECORD, OPT, ASM) */
#define LP_EXT_XSAMPLE 0x0b /* (gap id)*: Lua + host stacks of trace exit samples (EXIT), by
			     * their ordinal among those */
#define LP_EXT_KCODE   0x0c /* traceno key size proto line: machine code of one trace, which
			     * host stacks give as keyed addresses (LP_HOST_KEYED) */
#define LP_EXT_AFREED  0x0d /* (stack size count)*: sampled allocations freed before stop,
			     * counted by stack and size (memprof sampled mode) */
#define LP_EXT_CNAME   0x0e /* addr name: the Lua name of the C function whose entry is addr */
/* A host address at or above this, in a stream with kcode records, is trace code keyed by
 * the trace it belonged to when the stack was taken: (tag << 47) | address, tag >= 1 (user
 * addresses fit in 47 bits). Trace numbers and code addresses are reused after a flush,
 * and stacks are resolved after the whole stream: the key tells the traces apart. */
#define LP_HOST_KEY_SHIFT 47
#define LP_HOST_KEYED(addr) ((addr) >> LP_HOST_KEY_SHIFT != 0)
#define LP_HOST_UNKEYED(addr) ((addr) & (((uint64_t)1 << LP_HOST_KEY_SHIFT) - 1))

#endif
