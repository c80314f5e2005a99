/*
** Tests of the memprof aggregation and text report on streams written with the writer:
** exact sections, Overrides, HEAP SUMMARY, human-readable sizes, aliases, every source.
*/
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report/load.h"
#include "report/render.h"
#include "report/text.h"
#include "stream/writer.h"
#include "unit.h"

struct mem { uint8_t *data; size_t len, cap; };

static size_t mem_writer(const void **data, size_t len, void *ctx)
{
	struct mem *m = ctx;
	if (m->len + len > m->cap) {
		m->cap = (m->len + len) * 2;
		m->data = realloc(m->data, m->cap);
	}
	memcpy(m->data + m->len, *data, len);
	m->len += len;
	return len;
}

static struct mem stream;
static struct lp_wbuf wb;
static uint8_t space[256];

enum { P_MAIN = 0x100, P_F = 0x200, P_ALIAS = 0x300, C_FN = 0x7000 };

static void begin(void)
{
	free(stream.data);
	memset(&stream, 0, sizeof(stream));
	lp_wbuf_init(&wb, space, sizeof(space), mem_writer, &stream);
	lp_write_symtab_prologue(&wb);
	lp_write_sym_lua(&wb, P_MAIN, "@m.lua", 6, 0);
	lp_write_sym_lua(&wb, P_F, "@m.lua", 6, 4);
	lp_write_sym_cfunc(&wb, C_FN, "str_rep", 7);
	lp_write_symtab_final(&wb);
	lp_write_memprof_prologue(&wb);
}

static void ev(uint8_t event, uint8_t source, uint64_t loc, uint64_t line, uint64_t oaddr,
	       uint64_t osize, uint64_t naddr, uint64_t nsize)
{
	struct lp_mem_event e = { .event = event, .source = source, .oaddr = oaddr,
				  .osize = osize, .naddr = naddr, .nsize = nsize };
	if (source == LP_ASOURCE_TRACE)
		e.traceno = loc;
	else
		e.loc_addr = loc;
	e.loc_line = line;
	lp_write_mem_event(&wb, &e);
}

/* Loads the stream and renders the text report (and the profile, if asked). */
static int epilogue_written; /* the test wrote the epilogue (and an extension) itself */

static const char *report(int leak_only, int human, struct lp_profile **prof)
{
	static char text[8192];
	if (!epilogue_written)
		lp_write_memprof_epilogue(&wb);
	epilogue_written = 0;
	lp_wbuf_flush(&wb);
	struct lp_input in;
	lp_input_open_mem(&in, stream.data, stream.len, "t");
	struct lp_loaded l;
	CHECK_EQ(lp_load(&in, NULL, &l), LP_OK);
	FILE *f = fmemopen(text, sizeof(text), "w");
	struct lp_memprof_opts o = { leak_only, human };
	CHECK_EQ(lp_memprof_report(l.mem, &o, f), 0);
	fclose(f);
	if (prof)
		*prof = lp_loaded_profile(&l, "t");
	lp_loaded_free(&l);
	lp_input_close(&in);
	return text;
}

static void test_sections_and_overrides(void)
{
	begin();
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 5, 0, 0, 0x1000, 40);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 5, 0, 0, 0x2000, 40);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, C_FN, 0, 0, 0, 0x3000, 100);
	ev(LP_AEVENT_REALLOC, LP_ASOURCE_LFUNC, P_MAIN, 9, 0x1000, 40, 0x4000, 80);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x2000, 40, 0, 0);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x3000, 100, 0, 0);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 2, 0, 0, 0, 0x5000, 16);
	struct lp_profile *p = NULL;
	CHECK_STR(report(0, 0, &p),
		  "ALLOCATIONS\n"
		  "@m.lua:5: 2 events\t+80B\t-0B\n"
		  "str_rep:0x7000: 1 events\t+100B\t-0B\n"
		  "TRACE [2]: 1 events\t+16B\t-0B\n"
		  "\n"
		  "REALLOCATIONS\n"
		  "@m.lua:9: 1 events\t+80B\t-40B\n"
		  "\tOverrides:\n"
		  "\t\t@m.lua:5\n"
		  "\n"
		  "\n"
		  "DEALLOCATIONS\n"
		  "INTERNAL: 2 events\t+0B\t-140B\n"
		  "\tOverrides:\n"
		  "\t\t@m.lua:5\n"
		  "\t\tstr_rep:0x7000\n"
		  "\n"
		  "\n"
		  "HEAP SUMMARY:\n"
		  "@m.lua:5 holds 80B: 3 allocs, 2 frees\n"
		  "TRACE [2] holds 16B: 1 allocs, 0 frees\n"
		  "\n");
	/* In-use at the end: the realloc'd block (80B, allocated at line 9) and the trace's. */
	CHECK(p != NULL);
	if (p) {
		CHECK_EQ(lp_profile_total(p, 0), 80 + 100 + 16 + 80);
		CHECK_EQ(lp_profile_total(p, 1), 5);
		CHECK_EQ(lp_profile_total(p, 2), 96);
		CHECK_EQ(lp_profile_total(p, 3), 2);
		lp_profile_free(p);
	}
}

/*
** Blocks allocated at one line and grown at others: the Overrides name each realloc's and
** free's previous site, as Tarantool's parser does, but the HEAP SUMMARY charges a block's
** reallocs and its free to the line that first allocated it. Tarantool's summary here
** reads ":5 holds 160B: 4 allocs, 2 frees" and ":9 holds 80B: 1 allocs, 1 frees", with
** the freed block's growth still "held"; in use at the end is the kept block, 80 bytes.
*/
static void test_heap_summary_by_first_site(void)
{
	begin();
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 5, 0, 0, 0x1000, 40);
	ev(LP_AEVENT_REALLOC, LP_ASOURCE_LFUNC, P_MAIN, 9, 0x1000, 40, 0x2000, 80);
	ev(LP_AEVENT_REALLOC, LP_ASOURCE_TRACE, 2, 0, 0x2000, 80, 0x3000, 160);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x3000, 160, 0, 0);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 5, 0, 0, 0x4000, 40);
	ev(LP_AEVENT_REALLOC, LP_ASOURCE_LFUNC, P_MAIN, 9, 0x4000, 40, 0x5000, 80);
	/* Blocks from before the profile: held by the site that first reallocates them, at
	 * their size from then on; one grown and freed (nothing held), one grown twice and
	 * kept (32 bytes, where Tarantool's rules credit the second growth alone). A free
	 * of one never grown is no site's. */
	ev(LP_AEVENT_REALLOC, LP_ASOURCE_LFUNC, P_MAIN, 9, 0x8000, 8, 0x9000, 16);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x9000, 16, 0, 0);
	ev(LP_AEVENT_REALLOC, LP_ASOURCE_LFUNC, P_MAIN, 9, 0xa000, 8, 0xb000, 24);
	ev(LP_AEVENT_REALLOC, LP_ASOURCE_TRACE, 2, 0, 0xb000, 24, 0xb000, 32);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0xc000, 40, 0, 0);
	struct lp_profile *p = NULL;
	CHECK_STR(report(0, 0, &p),
		  "ALLOCATIONS\n"
		  "@m.lua:5: 2 events\t+80B\t-0B\n"
		  "\n"
		  "REALLOCATIONS\n"
		  "@m.lua:9: 4 events\t+200B\t-96B\n"
		  "\tOverrides:\n"
		  "\t\t@m.lua:5\n"
		  "\n"
		  "TRACE [2]: 2 events\t+192B\t-104B\n"
		  "\tOverrides:\n"
		  "\t\t@m.lua:9\n"
		  "\n"
		  "\n"
		  "DEALLOCATIONS\n"
		  "INTERNAL: 3 events\t+0B\t-216B\n"
		  "\tOverrides:\n"
		  "\t\t@m.lua:9\n"
		  "\t\tTRACE [2]\n"
		  "\n"
		  "\n"
		  "HEAP SUMMARY:\n"
		  "@m.lua:5 holds 80B: 5 allocs, 4 frees\n"
		  "@m.lua:9 holds 32B: 3 allocs, 2 frees\n"
		  "\n");
	CHECK(p != NULL);
	if (p) {
		CHECK_EQ(lp_profile_total(p, 2), 80 + 32);
		CHECK_EQ(lp_profile_total(p, 3), 2);
		lp_profile_free(p);
	}
}

static void test_human_readable_and_leak_only(void)
{
	begin();
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 6, 0, 0, 0x1000, 2049);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 7, 0, 0, 0x2000, 2560);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 8, 0, 0, 0x3000, 1 << 20);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 9, 0, 0, 0x4000, 100);
	CHECK_STR(report(1, 1, NULL),
		  "HEAP SUMMARY:\n"
		  "@m.lua:8 holds 1MiB: 1 allocs, 0 frees\n"
		  "@m.lua:7 holds 2.50KiB: 1 allocs, 0 frees\n"
		  "@m.lua:6 holds 2.00KiB: 1 allocs, 0 frees\n"
		  "@m.lua:9 holds 100B: 1 allocs, 0 frees\n"
		  "\n");
}

static void test_aliases_and_late_symbols(void)
{
	begin();
	/* A chunk loaded from a string after start: its symbol arrives mid-stream. */
	const char *src = "local t = {}\n\nreturn t\n";
	lp_write_mem_sym_lua(&wb, P_ALIAS, src, strlen(src), 0);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_ALIAS, 1, 0, 0, 0x1000, 56);
	/* One more, loaded from a long line: LuaJIT's name in the graphs (45 bytes and
	 * "..."); the text report has the name as it is, as Tarantool's parser does. */
	const char *one = "local u = {} local v = {} local w = {} return u, v, w, 'and more'";
	lp_write_mem_sym_lua(&wb, P_ALIAS + 0x10, one, strlen(one), 0);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_ALIAS + 0x10, 1, 0, 0, 0x2000, 40);
	/* An empty name, and a host's "=name" with a line break in it. */
	lp_write_mem_sym_lua(&wb, P_ALIAS + 0x20, "", 0, 0);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_ALIAS + 0x20, 2, 0, 0, 0x3000, 24);
	lp_write_mem_sym_lua(&wb, P_ALIAS + 0x30, "=host\nchunk", 11, 0);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_ALIAS + 0x30, 3, 0, 0, 0x4000, 16);
	struct lp_profile *p = NULL;
	const char *text = report(1, 0, &p);
	CHECK(strstr(text, "function_alias_2:3 holds 16B") != NULL);
	CHECK(strstr(text, "local u = {} local v = {} local w = {} return u, v, w, 'and more':1 holds 40B") != NULL);
	int named = 0, cut = 0, alias = 0, empty = 0, host = 0;
	for (size_t i = 0; p && i < lp_profile_nframes(p); i++) {
		const struct lp_frame *f = lp_profile_frame(p, (uint32_t)i);
		named += !strcmp(f->name, "[string \"local t = {}...\"]");
		cut += !strcmp(f->name, "[string \"local u = {} local v = {} local w = {} return...\"]");
		alias += strstr(f->name, "function_alias") != NULL;
		empty += !strcmp(f->name, "[string \"\"]");
		host += !strcmp(f->name, "=host...");
	}
	CHECK(named == 1 && cut == 1 && alias == 0 && empty == 1 && host == 1);
	lp_profile_free(p);
	begin();
	lp_write_mem_sym_lua(&wb, P_ALIAS, src, strlen(src), 0);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_ALIAS, 1, 0, 0, 0x1000, 56);
	CHECK_STR(report(1, 0, NULL),
		  "HEAP SUMMARY:\n"
		  "function_alias_1:1 holds 56B: 1 allocs, 0 frees\n"
		  "\n"
		  "ALIASES:\n"
		  "function_alias_1:\n"
		  "1\t| local t = {}\n"
		  "3\t| return t\n" /* its line in the chunk, the empty one left out */
		  "\n\n");
}

static void test_unknown_locations(void)
{
	begin();
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, 0xdead, 3, 0, 0, 0x1000, 8);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0x10, 0, 0, 0, 0x2000, 8);
	CHECK_STR(report(1, 0, NULL),
		  "HEAP SUMMARY:\n"
		  "CFUNC 0x10 holds 8B: 1 allocs, 0 frees\n"
		  "LFUNC 0xdead:3 holds 8B: 1 allocs, 0 frees\n"
		  "\n");
}

/* A builtin's entry in a stripped VM: the agent's stand-in for unnamed code there
 * ("luajit+0x44aa0") and the builtin's name, both at that address. The builtin's name is
 * shown, even when longer than the stand-in (shorter names win among other aliases). */
static void test_builtin_over_stand_in(void)
{
	begin();
	lp_write_mem_sym_cfunc(&wb, 0x8000, "luajit+0x8000", 13);
	lp_write_mem_sym_cfunc(&wb, 0x8000, "jit.util.funcinfo", 17);
	lp_write_mem_sym_cfunc(&wb, 0x9000, "a_longer_name", 13);
	lp_write_mem_sym_cfunc(&wb, 0x9000, "short", 5);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0x8000, 0, 0, 0, 0x1000, 8);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0x9000, 0, 0, 0, 0x2000, 16);
	CHECK_STR(report(1, 0, NULL),
		  "HEAP SUMMARY:\n"
		  "short:0x9000 holds 16B: 1 allocs, 0 frees\n"
		  "jit.util.funcinfo:0x8000 holds 8B: 1 allocs, 0 frees\n"
		  "\n");
}

/* A library unloaded and another loaded at its address while profiling: the agent names the
 * second's functions mid-stream, after events of the first. Each event is named as its
 * address was named when it was read (as Tarantool's parser does): the second library's
 * name replaces the first's from then on, and both sites are listed. Symbols of one run
 * (no event between them) at one address stay aliases: the preferred one names events;
 * so does a name given again. */
static void test_c_symbol_replaced(void)
{
	begin();
	lp_write_mem_sym_cfunc(&wb, 0xa000, "alpha_fn", 8);
	lp_write_mem_sym_cfunc(&wb, 0xa000, "alpha_fn_alias_longer", 21);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0xa000, 0, 0, 0, 0x1000, 8);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0xa000, 0, 0, 0, 0x1100, 8);
	lp_write_mem_sym_cfunc(&wb, 0xa000, "beta_fn_longer_name", 19);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0xa000, 0, 0, 0, 0x2000, 16);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0xa000, 0, 0, 0, 0x2100, 16);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x1000, 8, 0, 0);
	CHECK_STR(report(0, 0, NULL),
		  "ALLOCATIONS\n"
		  "alpha_fn:0xa000: 2 events\t+16B\t-0B\n"
		  "beta_fn_longer_name:0xa000: 2 events\t+32B\t-0B\n"
		  "\n"
		  "REALLOCATIONS\n"
		  "\n"
		  "DEALLOCATIONS\n"
		  "INTERNAL: 1 events\t+0B\t-8B\n"
		  "\tOverrides:\n"
		  "\t\talpha_fn:0xa000\n"
		  "\n"
		  "\n"
		  "HEAP SUMMARY:\n"
		  "beta_fn_longer_name:0xa000 holds 32B: 2 allocs, 0 frees\n"
		  "alpha_fn:0xa000 holds 8B: 2 allocs, 1 frees\n"
		  "\n");
	/* The same name given again (the agent names a builtin's entry again after it
	 * rescanned the objects): one site. */
	begin();
	lp_write_mem_sym_cfunc(&wb, 0xa000, "string.rep", 10);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0xa000, 0, 0, 0, 0x1000, 8);
	lp_write_mem_sym_cfunc(&wb, 0xa000, "string.rep", 10);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0xa000, 0, 0, 0, 0x2000, 16);
	CHECK_STR(report(0, 0, NULL),
		  "ALLOCATIONS\n"
		  "string.rep:0xa000: 2 events\t+24B\t-0B\n"
		  "\n"
		  "REALLOCATIONS\n"
		  "\n"
		  "DEALLOCATIONS\n"
		  "\n"
		  "HEAP SUMMARY:\n"
		  "string.rep:0xa000 holds 24B: 2 allocs, 0 frees\n"
		  "\n");
}

/* A function with no symbol, which the agent names "object+0xoffset": labelled by that
 * name alone (its absolute address would change from run to run), where a symbol's label
 * is "name:0xstart" as in Tarantool's parser. */
/* Two C++ functions whose mangled names (over 512 bytes) differ only at their end, in a
 * stream with symbol extents (the luaprof extension: C sites are named again after them).
 * Each site keeps its whole name and address: the names were cut at 511 bytes, without
 * ":0xstart", and the two sites merged into one in the heap summary. */
static void test_long_c_name_extents(void)
{
	char a[641], b[641], want[8192];
	for (size_t i = 0; i < sizeof(a) - 1; i++)
		a[i] = b[i] = "_ZN5boost6detail"[i % 16];
	a[sizeof(a) - 2] = 'A';
	b[sizeof(b) - 2] = 'B';
	a[sizeof(a) - 1] = b[sizeof(b) - 1] = '\0';
	begin();
	lp_write_mem_sym_cfunc(&wb, 0xa000, a, strlen(a));
	lp_write_mem_sym_cfunc(&wb, 0xb000, b, strlen(b));
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0xa008, 0, 0, 0, 0x1000, 64);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0xb008, 0, 0, 0, 0x2000, 32);
	lp_write_memprof_epilogue(&wb);
	lp_write_ext_prologue(&wb);
	lp_write_ext_csize(&wb, 0xa000, 0x100);
	lp_write_ext_csize(&wb, 0xb000, 0x100);
	lp_write_ext_end(&wb);
	epilogue_written = 1;
	snprintf(want, sizeof(want),
		 "HEAP SUMMARY:\n"
		 "%s:0xa000 holds 64B: 1 allocs, 0 frees\n"
		 "%s:0xb000 holds 32B: 1 allocs, 0 frees\n"
		 "\n", a, b);
	CHECK_STR(report(1, 0, NULL), want);
}

/* A chunk name longer than a kilobyte (a deep path; Tarantool's streams carry it whole):
 * its two lines stay two sites, named in full, as Tarantool's parser names them. The
 * label used to be cut at 1023 bytes, which took the line with it and merged the sites. */
static void test_long_chunk_name(void)
{
	char chunk[1501], want[8192];
	chunk[0] = '@';
	for (size_t i = 1; i < sizeof(chunk) - 1; i++)
		chunk[i] = "dir/"[i % 4];
	chunk[sizeof(chunk) - 1] = '\0';
	begin();
	lp_write_mem_sym_lua(&wb, 0x900, chunk, strlen(chunk), 1);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, 0x900, 5, 0, 0, 0x1000, 32);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, 0x900, 6, 0, 0, 0x2000, 64);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, 0x900, 6, 0, 0, 0x3000, 64);
	snprintf(want, sizeof(want),
		 "ALLOCATIONS\n"
		 "%s:6: 2 events\t+128B\t-0B\n"
		 "%s:5: 1 events\t+32B\t-0B\n"
		 "\n"
		 "REALLOCATIONS\n"
		 "\n"
		 "DEALLOCATIONS\n"
		 "\n"
		 "HEAP SUMMARY:\n"
		 "%s:6 holds 128B: 2 allocs, 0 frees\n"
		 "%s:5 holds 32B: 1 allocs, 0 frees\n"
		 "\n", chunk, chunk, chunk, chunk);
	CHECK_STR(report(0, 0, NULL), want);
}

static void test_stand_in_label(void)
{
	begin();
	lp_write_mem_sym_cfunc(&wb, 0x55550000a280ull, "luajit+0xa280", 13);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, 0x55550000a280ull, 0, 0, 0, 0x1000, 8);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_CFUNC, C_FN, 0, 0, 0, 0x2000, 16);
	CHECK_STR(report(1, 0, NULL),
		  "HEAP SUMMARY:\n"
		  "str_rep:0x7000 holds 16B: 1 allocs, 0 frees\n"
		  "luajit+0xa280 holds 8B: 1 allocs, 0 frees\n"
		  "\n");
}

/* A trace number the VM reuses for another trace during the profile (after a flush, or
 * once the trace was collected). A site is the stream's (source, address, line, trace) and
 * the version of the symbol its number had at the event, so the sections list the two
 * traces apart, each under its own start; Tarantool's parser keys sites without the
 * version and lists all three allocations under the first trace's start. The HEAP SUMMARY
 * nets each free against the site that allocated the block: the first trace's block is
 * freed, the second holds 32 bytes. Tarantool's parser (checked with tarantool/luajit's
 * tools/memprof.lua) charges a free site's frees of one site to the name that site had
 * when the first of those blocks was allocated, here the second trace's, and so reports
 * trace 2 as holding all 72 bytes with 0 frees. */
static void test_trace_number_reused(void)
{
	begin();
	lp_write_mem_sym_trace(&wb, 2, P_F, 4);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 2, 0, 0, 0, 0x1000, 16);
	lp_write_mem_sym_trace(&wb, 2, P_MAIN, 9);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 2, 0, 0, 0, 0x2000, 24);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 2, 0, 0, 0, 0x3000, 32);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x2000, 24, 0, 0);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x1000, 16, 0, 0);
	/* The first trace's symbol given again unchanged: the same site as before. */
	lp_write_mem_sym_trace(&wb, 2, P_MAIN, 9);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 2, 0, 0, 0, 0x4000, 8);
	CHECK_STR(report(0, 0, NULL),
		  "ALLOCATIONS\n"
		  "TRACE [2] started at @m.lua:9: 3 events\t+64B\t-0B\n"
		  "TRACE [2] started at @m.lua:4: 1 events\t+16B\t-0B\n"
		  "\n"
		  "REALLOCATIONS\n"
		  "\n"
		  "DEALLOCATIONS\n"
		  "INTERNAL: 2 events\t+0B\t-40B\n"
		  "\tOverrides:\n"
		  "\t\tTRACE [2] started at @m.lua:4\n"
		  "\t\tTRACE [2] started at @m.lua:9\n"
		  "\n"
		  "\n"
		  "HEAP SUMMARY:\n"
		  "TRACE [2] started at @m.lua:9 holds 40B: 3 allocs, 1 frees\n"
		  "\n");
}

/* A trace number reused by a trace that starts at the same address and line, but in
 * another function (the first one collected, another loaded in its place): the trace
 * symbol is unchanged, the prototype's is not, and the events are two sites. Then the
 * first trace again (A, B, A): its events join its first site, not a row of their own. */
static void test_trace_reused_in_another_function(void)
{
	begin();
	lp_write_mem_sym_lua(&wb, 0x500, "@a.lua", 6, 1);
	lp_write_mem_sym_trace(&wb, 3, 0x500, 5);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 3, 0, 0, 0, 0x1000, 16);
	lp_write_mem_sym_lua(&wb, 0x500, "@b.lua", 6, 1);
	lp_write_mem_sym_trace(&wb, 3, 0x500, 5);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 3, 0, 0, 0, 0x2000, 24);
	lp_write_mem_sym_lua(&wb, 0x500, "@a.lua", 6, 1);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 3, 0, 0, 0, 0x3000, 32);
	/* The same with the trace's own start: line 7, then line 5 again. */
	lp_write_mem_sym_trace(&wb, 3, 0x500, 7);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 3, 0, 0, 0, 0x4000, 8);
	lp_write_mem_sym_trace(&wb, 3, 0x500, 5);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 3, 0, 0, 0, 0x5000, 8);
	CHECK_STR(report(0, 0, NULL),
		  "ALLOCATIONS\n"
		  "TRACE [3] started at @a.lua:5: 3 events\t+56B\t-0B\n"
		  "TRACE [3] started at @b.lua:5: 1 events\t+24B\t-0B\n"
		  "TRACE [3] started at @a.lua:7: 1 events\t+8B\t-0B\n"
		  "\n"
		  "REALLOCATIONS\n"
		  "\n"
		  "DEALLOCATIONS\n"
		  "\n"
		  "HEAP SUMMARY:\n"
		  "TRACE [3] started at @a.lua:5 holds 56B: 3 allocs, 0 frees\n"
		  "TRACE [3] started at @b.lua:5 holds 24B: 1 allocs, 0 frees\n"
		  "TRACE [3] started at @a.lua:7 holds 8B: 1 allocs, 0 frees\n"
		  "\n");
}

/* A prototype address the VM reuses for another function with a line in common: the
 * events at that line are two sites, each named after its own function. */
static void test_proto_address_reused(void)
{
	begin();
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 5, 0, 0, 0x1000, 16);
	lp_write_mem_sym_lua(&wb, P_F, "@other.lua", 10, 1);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 5, 0, 0, 0x2000, 24);
	CHECK_STR(report(0, 0, NULL),
		  "ALLOCATIONS\n"
		  "@m.lua:5: 1 events\t+16B\t-0B\n"
		  "@other.lua:5: 1 events\t+24B\t-0B\n"
		  "\n"
		  "REALLOCATIONS\n"
		  "\n"
		  "DEALLOCATIONS\n"
		  "\n"
		  "HEAP SUMMARY:\n"
		  "@other.lua:5 holds 24B: 1 allocs, 0 frees\n"
		  "@m.lua:5 holds 16B: 1 allocs, 0 frees\n"
		  "\n");
}

/* The example given in docs/FORMAT.md, byte for byte. */
static void test_format_doc_example(void)
{
	uint8_t buf[64];
	struct mem m = { 0 };
	struct lp_wbuf w;
	lp_wbuf_init(&w, buf, sizeof(buf), mem_writer, &m);
	struct lp_mem_event e = { .event = LP_AEVENT_ALLOC, .source = LP_ASOURCE_LFUNC,
				  .loc_addr = 0x412c9140, .loc_line = 5, .naddr = 0x3020,
				  .nsize = 32 };
	lp_write_mem_event(&w, &e);
	lp_wbuf_flush(&w);
	static const uint8_t want[] = { 0x09, 0xc0, 0xa2, 0xb2, 0x89, 0x04, 0x05, 0xa0, 0x60, 0x20 };
	CHECK_EQ(m.len, sizeof(want));
	CHECK(m.len == sizeof(want) && memcmp(m.data, want, sizeof(want)) == 0);
	free(m.data);
}

/* A program that loads code again and again (a template engine) or flushes its traces:
 * one prototype address and one trace number named after a new chunk thousands of times.
 * Each chunk's events are a site of their own, named after it; and the report stays
 * linear in the stream (its sites used to share one hash per location, so that every
 * event compared itself with all the earlier chunks' sites: 40,000 chunks took 5.6 s). */
static void test_churn_sites(void)
{
	enum { N = 40000 };
	begin();
	for (uint64_t k = 0; k < N; k++) {
		char name[32];
		int len = snprintf(name, sizeof(name), "=chunk%llu", (unsigned long long)k);
		lp_write_mem_sym_lua(&wb, 0x900, name, (size_t)len, 1);
		lp_write_mem_sym_trace(&wb, 1, 0x900, 3);
		ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, 0x900, 2, 0, 0, 0x100000 + 64 * k,
		   16 + k % 7);
		ev(LP_AEVENT_ALLOC, LP_ASOURCE_TRACE, 1, 0, 0, 0, 0x10000000 + 64 * k, 8 + k % 5);
		ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x100000 + 64 * k, 16 + k % 7, 0, 0);
	}
	lp_write_memprof_epilogue(&wb);
	lp_wbuf_flush(&wb);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct lp_input in;
	lp_input_open_mem(&in, stream.data, stream.len, "t");
	struct lp_loaded l;
	CHECK_EQ(lp_load(&in, NULL, &l), LP_OK);
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct lp_memprof_opts o = { 0, 0 };
	CHECK_EQ(lp_memprof_report(l.mem, &o, f), 0);
	fclose(f);
	lp_loaded_free(&l);
	lp_input_close(&in);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if (secs > 2.0)
		fprintf(stderr, "  %d chunks' events reported in %.2f s\n", N, secs);
	CHECK(secs <= 2.0);
	/* Every chunk's two sites, each with its own sizes. */
	CHECK(text && strstr(text, "=chunk0:2: 1 events\t+16B\t-0B\n"));
	CHECK(text && strstr(text, "=chunk39999:2: 1 events\t+17B\t-0B\n"));
	CHECK(text && strstr(text, "TRACE [1] started at =chunk39998:3: 1 events\t+11B\t-0B\n"));
	size_t rows = 0;
	const char *sec = text ? strstr(text, "ALLOCATIONS\n") : NULL;
	const char *end = sec ? strstr(sec, "\n\n") : NULL;
	for (const char *p = sec; p && p < end; p = strchr(p + 1, '\n'))
		rows++;
	CHECK_EQ(rows, 2 * N + 1); /* and the header */
	free(text);
}

/* A sampled memory stream's samples_lost (the agent's meta: sampled allocations it could
 * not keep) are drops: the profile's dropped, and the header's "Dropped:", count them. */
static void test_sampled_lost_are_dropped(void)
{
	begin();
	lp_write_memprof_epilogue(&wb);
	lp_write_ext_prologue(&wb);
	lp_write_ext_meta(&wb, "mode", "sampled");
	lp_write_ext_meta(&wb, "sample_bytes", "4096");
	lp_write_ext_meta(&wb, "samples", "0");
	lp_write_ext_meta(&wb, "samples_lost", "7");
	lp_write_ext_end(&wb);
	lp_wbuf_flush(&wb);
	struct lp_input in;
	lp_input_open_mem(&in, stream.data, stream.len, "t");
	struct lp_loaded l;
	CHECK_EQ(lp_load(&in, NULL, &l), LP_OK);
	CHECK_EQ(l.facts.samples_lost, 7);
	struct lp_profile *p = lp_loaded_profile(&l, "t");
	CHECK(p != NULL);
	if (p) {
		const struct lp_profile_meta *m = lp_profile_cmeta(p);
		CHECK_STR(m->event, "memory (sampled)");
		CHECK_EQ(m->dropped, 7);
		char text[512];
		FILE *f = fmemopen(text, sizeof(text), "w");
		lp_text_header(f, m, lp_profile_value_type(p, 0), 0);
		fclose(f);
		CHECK(strstr(text, "  Dropped: 7") != NULL);
		lp_profile_free(p);
	}
	lp_loaded_free(&l);
	lp_input_close(&in);
}

/*
** Two functions of one chunk allocating on one line (the main chunk making a closure, the
** closure's body): sites that print alike are one line in each section, summed, and one
** line of an Overrides list, as the HEAP SUMMARY has them; two rows both named @m.lua:5
** told the user nothing.
*/
static void test_same_label_one_row(void)
{
	begin();
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_MAIN, 5, 0, 0, 0x1000, 40);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 5, 0, 0, 0x2000, 24);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 5, 0, 0, 0x3000, 24);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 6, 0, 0, 0x4000, 8);
	ev(LP_AEVENT_ALLOC, LP_ASOURCE_LFUNC, P_F, 6, 0, 0, 0x5000, 8);
	ev(LP_AEVENT_REALLOC, LP_ASOURCE_LFUNC, P_MAIN, 5, 0x1000, 40, 0x6000, 80);
	ev(LP_AEVENT_REALLOC, LP_ASOURCE_LFUNC, P_F, 5, 0x2000, 24, 0x7000, 48);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x6000, 80, 0, 0);
	ev(LP_AEVENT_FREE, LP_ASOURCE_INT, 0, 0, 0x3000, 24, 0, 0);
	struct lp_profile *p = NULL;
	CHECK_STR(report(0, 0, &p),
		  "ALLOCATIONS\n"
		  "@m.lua:5: 3 events\t+88B\t-0B\n"
		  "@m.lua:6: 2 events\t+16B\t-0B\n"
		  "\n"
		  "REALLOCATIONS\n"
		  "@m.lua:5: 2 events\t+128B\t-64B\n"
		  "\tOverrides:\n"
		  "\t\t@m.lua:5\n"
		  "\n"
		  "\n"
		  "DEALLOCATIONS\n"
		  "INTERNAL: 2 events\t+0B\t-104B\n"
		  "\tOverrides:\n"
		  "\t\t@m.lua:5\n"
		  "\n"
		  "\n"
		  "HEAP SUMMARY:\n"
		  "@m.lua:5 holds 48B: 5 allocs, 4 frees\n"
		  "@m.lua:6 holds 16B: 2 allocs, 0 frees\n"
		  "\n");
	CHECK(p != NULL);
	if (p) {
		CHECK_EQ(lp_profile_total(p, 1), 7);
		CHECK_EQ(lp_profile_total(p, 2), 48 + 16);
		lp_profile_free(p);
	}
}

int main(void)
{
	RUN(test_sections_and_overrides);
	RUN(test_heap_summary_by_first_site);
	RUN(test_human_readable_and_leak_only);
	RUN(test_aliases_and_late_symbols);
	RUN(test_unknown_locations);
	RUN(test_builtin_over_stand_in);
	RUN(test_c_symbol_replaced);
	RUN(test_stand_in_label);
	RUN(test_long_chunk_name);
	RUN(test_long_c_name_extents);
	RUN(test_format_doc_example);
	RUN(test_trace_number_reused);
	RUN(test_proto_address_reused);
	RUN(test_trace_reused_in_another_function);
	RUN(test_churn_sites);
	RUN(test_sampled_lost_are_dropped);
	RUN(test_same_label_one_row);
	free(stream.data);
	return UNIT_RESULT();
}
