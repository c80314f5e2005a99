/*
** Tests of the sysprof merge: streams written with the writer, loaded through lp_load,
** and compared as collapsed stacks, so every stage a real report uses is exercised.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "report/load.h"
#include "report/render.h"
#include "report/symtab.h"
#include "stream/writer.h"
#include "unit.h"

/* -- A growing in-memory stream ------------------------------------------------ */

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
static uint8_t wbuf_space[64];

enum {
	A_MAIN = 0x1000, A_LUA_PCALL = 0x2000, A_LUA_CALL = 0x2100, A_LUA_CPCALL = 0x2200,
	A_VM_PCALL = 0x3000, A_VM_CALL = 0x3100, A_VM_CPCALL = 0x3200, A_VM_RESUME = 0x3300,
	A_BC = 0x3400, A_CFUNC = 0x5000, A_PMAIN = 0x6000, A_SORT = 0x7000, A_LAST = 0x8000,
	P_MAIN = 0xa000, P_F = 0xa100, P_G = 0xa200
};

struct csym { uint64_t a; const char *n; };

/* A new stream up to its symbol table's C functions. */
static void symtab_start(const struct csym *syms, size_t n)
{
	free(stream.data);
	memset(&stream, 0, sizeof(stream));
	lp_wbuf_init(&wb, wbuf_space, sizeof(wbuf_space), mem_writer, &stream);
	lp_write_symtab_prologue(&wb);
	for (size_t i = 0; i < n; i++)
		lp_write_sym_cfunc(&wb, syms[i].a, syms[i].n, strlen(syms[i].n));
}

/* A sysprof stream with these C functions and app.lua's prototypes, ready for samples. */
static void begin_with(const struct csym *syms, size_t n)
{
	symtab_start(syms, n);
	lp_write_sym_lua(&wb, P_MAIN, "@app.lua", 8, 0);
	lp_write_sym_lua(&wb, P_F, "@app.lua", 8, 10);
	lp_write_sym_lua(&wb, P_G, "@app.lua", 8, 20);
	lp_write_sym_trace(&wb, 3, P_F, 14);
	lp_write_symtab_final(&wb);
	lp_write_sysprof_prologue(&wb);
}

#define NSYMS(a) (sizeof(a) / sizeof((a)[0]))
/* A host address in trace code keyed by its trace (docs/FORMAT.md, kcode). */
#define KEYED(tag, addr) ((addr) | (uint64_t)(tag) << LP_HOST_KEY_SHIFT)

static void begin(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { A_LUA_CALL, "lua_call" },
		{ A_LUA_CPCALL, "lua_cpcall" }, { A_VM_PCALL, "lj_vm_pcall" },
		{ A_VM_CALL, "lj_vm_call" }, { A_VM_CPCALL, "lj_vm_cpcall" },
		{ A_VM_RESUME, "lj_vm_resume" }, { A_BC, "lj_BC_CALL" }, { A_CFUNC, "my_cfunc" },
		{ A_PMAIN, "pmain" }, { A_SORT, "lj_cf_table_sort" }, { A_LAST, "last_sym" },
	};
	begin_with(syms, NSYMS(syms));
}

#define L(addr_, line_) { LP_FRAME_LFUNC, addr_, line_ }
#define C(addr_) { LP_FRAME_CFUNC, addr_, 0 }
#define FF(id_) { LP_FRAME_FFUNC, id_, 0 }

/* Writes a guest sample from outermost-first arrays (the stream wants innermost first). */
static void sample(uint8_t vmstate, const struct lp_lua_frame *lua, size_t nl,
		   const uint64_t *host, size_t nh)
{
	struct lp_lua_frame rl[64];
	uint64_t rh[64];
	for (size_t i = 0; i < nl; i++)
		rl[i] = lua[nl - 1 - i];
	for (size_t i = 0; i < nh; i++)
		rh[i] = host[nh - 1 - i];
	struct lp_sys_sample s = { .vmstate = vmstate, .nlua = nl, .lua = rl, .nhost = nh,
				   .host = rh };
	lp_write_sys_sample(&wb, &s);
}

#define SAMPLE(vm, lua, host) \
	sample(vm, lua, sizeof(lua) / sizeof(lua[0]), host, sizeof(host) / sizeof(host[0]))

/* Optional luaprof extension written after the epilogue by the next collapse(). */
static void (*trailer)(void);
static char title[256];

/* Finishes the stream, loads it and returns its collapsed rendering (static buffer). */
static const char *collapse(int split, int functions)
{
	static char text[8192];
	lp_write_sysprof_epilogue(&wb);
	if (trailer)
		trailer();
	trailer = NULL;
	lp_wbuf_flush(&wb);
	struct lp_input in;
	lp_input_open_mem(&in, stream.data, stream.len, "test");
	struct lp_loaded l;
	struct lp_sysprof_opts so = { .split = split };
	int rc = lp_load(&in, &so, &l);
	CHECK_EQ(rc, LP_OK);
	struct lp_profile *p = lp_loaded_profile(&l, "test");
	snprintf(title, sizeof(title), "%s", lp_profile_cmeta(p)->title ? lp_profile_cmeta(p)->title : "");
	if (functions) {
		struct lp_profile *q = lp_profile_by_function(p);
		lp_profile_free(p);
		p = q;
	}
	FILE *f = fmemopen(text, sizeof(text), "w");
	struct lp_render_opts ro = { 0 };
	char err[256];
	CHECK_EQ(lp_render_collapsed(p, &ro, f, err, sizeof(err)), 0);
	fclose(f);
	lp_profile_free(p);
	lp_loaded_free(&l);
	lp_input_close(&in);
	return text;
}

/* Two functions of one chunk at one line (a closure defined on its caller's line, both
 * running line 12 here) are two frames with one label: the collapsed text, which knows only
 * labels, has one line for the two stacks (it had two identical ones). */
/* A chunk name longer than any path (a crafted stream: every frame and label copied and
 * hashed it whole, minutes and gigabytes for a 500 KB file) is shown cut, with "...", for
 * the graphs and the memprof report alike; a path of PATH_MAX stays whole. */
static void test_long_chunk_name(void)
{
	struct lp_symtab *st = lp_symtab_new();
	static char name[3 * LP_SYMTAB_MAX_NAME];
	memset(name, 'a', sizeof(name));
	name[0] = '@';
	CHECK(st && lp_symtab_add_lua(st, P_F, name, sizeof(name), 1) == 0 &&
	      lp_symtab_add_lua(st, P_G, name, LP_SYMTAB_MAX_NAME, 1) == 0);
	const struct lp_sym_lua *f = st ? lp_symtab_lua(st, P_F) : NULL;
	const struct lp_sym_lua *g = st ? lp_symtab_lua(st, P_G) : NULL;
	CHECK(f && strlen(f->chunk) == LP_SYMTAB_MAX_NAME &&
	      !strcmp(f->chunk + LP_SYMTAB_MAX_NAME - 3, "...") &&
	      !strncmp(f->chunk, name, LP_SYMTAB_MAX_NAME - 3));
	CHECK(f && f->tchunk == f->chunk);
	CHECK(g && strlen(g->chunk) == LP_SYMTAB_MAX_NAME &&
	      !strncmp(g->chunk, name, LP_SYMTAB_MAX_NAME));
	lp_symtab_free(st);
}

/* A cname record (the Lua name of a C function) replaces the stand-in name the agent gave
 * a function without a symbol, in the last run that named its address only: a real symbol
 * there wins, an address with no symbol of its own stays unnamed, and the names an
 * earlier run gave (another library at that address) stay. */
static void test_cname(void)
{
	struct lp_symtab *st = lp_symtab_new();
	char buf[64];
	uint64_t start;
	const char *obj;
	static const char s1[] = "lib.so+0x100", s2[] = "lib.so+0x200", real[] = "json_encode";
	static const char old[] = "old.so+0x300", s3[] = "lib.so+0x300";
	CHECK(st && lp_symtab_add_cfunc(st, 0x1100, s1, sizeof(s1) - 1) == 0 &&
	      lp_symtab_add_cfunc(st, 0x1300, old, sizeof(old) - 1) == 0 &&
	      lp_symtab_c_event(st) == 0);
	uint32_t before = st ? lp_symtab_c_epoch(st) : 0;
	CHECK(st && lp_symtab_add_cfunc(st, 0x1200, s2, sizeof(s2) - 1) == 0 &&
	      lp_symtab_add_cfunc(st, 0x1200, real, sizeof(real) - 1) == 0 &&
	      lp_symtab_add_cfunc(st, 0x1300, s3, sizeof(s3) - 1) == 0 &&
	      lp_symtab_c_event(st) == 0);
	if (!st)
		return;
	lp_symtab_set_csize(st, 0x1100, 0x40);
	CHECK(lp_symtab_set_cname(st, 0x1100, "cjson.encode", 12) == 0 &&
	      lp_symtab_set_cname(st, 0x1200, "cjson.decode", 12) == 0 &&
	      lp_symtab_set_cname(st, 0x1300, "mod.f", 5) == 0 &&
	      lp_symtab_set_cname(st, 0x1400, "mod.g", 5) == 0);
	CHECK(!strcmp(lp_symtab_name_c(st, 0x1110, buf, sizeof(buf), &start, &obj),
		      "cjson.encode") && start == 0x1100);
	/* Past the function's extent: not its code. */
	CHECK(strcmp(lp_symtab_name_c(st, 0x1150, buf, sizeof(buf), &start, &obj),
		     "cjson.encode") != 0);
	/* An ELF symbol and a stand-in at one address (one run): the symbol. */
	CHECK(!strcmp(lp_symtab_name_c(st, 0x1200, buf, sizeof(buf), &start, &obj),
		      "json_encode"));
	CHECK(!strcmp(lp_symtab_name_c(st, 0x1300, buf, sizeof(buf), &start, &obj), "mod.f"));
	CHECK(!strcmp(lp_symtab_name_c_at(st, 0x1300, before, buf, sizeof(buf), &start, &obj),
		      old));
	lp_symtab_free(st);
}

static void test_collapsed_same_label(void)
{
	begin();
	struct lp_lua_frame f[] = { L(P_MAIN, 5), L(P_F, 12) };
	struct lp_lua_frame g[] = { L(P_MAIN, 5), L(P_G, 12) };
	uint64_t host[] = { A_MAIN + 9, A_LUA_PCALL + 4, A_VM_PCALL + 30, A_BC + 2 };
	SAMPLE(LP_VMST_LFUNC, f, host);
	SAMPLE(LP_VMST_LFUNC, g, host);
	SAMPLE(LP_VMST_LFUNC, g, host);
	CHECK_STR(collapse(0, 0), "main;lua_pcall;lj_vm_pcall;@app.lua:5;@app.lua:12;lj_BC_CALL 3\n");
}

static void test_simple(void)
{
	begin();
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), L(P_F, 12) };
	uint64_t host[] = { A_MAIN + 9, A_LUA_PCALL + 4, A_VM_PCALL + 30, A_BC + 2 };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	SAMPLE(LP_VMST_LFUNC, lua, host);
	CHECK_STR(collapse(0, 0), "main;lua_pcall;lj_vm_pcall;@app.lua:5;@app.lua:12;lj_BC_CALL 2\n");
}

static void test_nested_sandwich(void)
{
	begin();
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), C(A_CFUNC), L(P_F, 12), C(A_CFUNC), L(P_G, 22) };
	uint64_t host[] = { A_MAIN, A_LUA_PCALL, A_VM_PCALL, A_BC, A_CFUNC + 8, A_LUA_CALL,
			    A_VM_CALL, A_BC, A_CFUNC + 8, A_LUA_CALL, A_VM_CALL, A_BC };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	CHECK_STR(collapse(0, 0),
		  "main;lua_pcall;lj_vm_pcall;@app.lua:5;lj_BC_CALL;my_cfunc;lua_call;lj_vm_call;"
		  "@app.lua:12;lj_BC_CALL;my_cfunc;lua_call;lj_vm_call;@app.lua:22;lj_BC_CALL 1\n");
}

static void test_short_host_stack(void)
{
	begin();
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), C(A_CFUNC), L(P_F, 12) };
	uint64_t host[] = { A_VM_CALL, A_BC };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	CHECK_STR(collapse(0, 0), "@app.lua:5;my_cfunc;lj_vm_call;@app.lua:12;lj_BC_CALL 1\n");
}

static void test_leaf_mode(void)
{
	begin();
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), L(P_F, 12) };
	uint64_t host[] = { A_BC };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	struct lp_lua_frame lua2[] = { L(P_MAIN, 5), L(P_G, 21) };
	sample(LP_VMST_LFUNC, lua2, 2, NULL, 0);
	CHECK_STR(collapse(0, 0),
		  "@app.lua:5;@app.lua:12;lj_BC_CALL 1\n@app.lua:5;@app.lua:21 1\n");
}

static void test_cpcall(void)
{
	begin();
	struct lp_lua_frame lua[] = { C(A_PMAIN), L(P_MAIN, 5), L(P_F, 12) };
	uint64_t host[] = { A_MAIN, A_LUA_CPCALL, A_VM_CPCALL, A_BC, A_PMAIN + 3, A_LUA_PCALL,
			    A_VM_PCALL, A_BC };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	CHECK_STR(collapse(0, 0), "main;lua_cpcall;lj_vm_cpcall;lj_BC_CALL;pmain;lua_pcall;"
				  "lj_vm_pcall;@app.lua:5;@app.lua:12;lj_BC_CALL 1\n");
}

static void test_resume(void)
{
	begin();
	struct lp_lua_frame lua[] = { L(P_G, 22) };
	uint64_t host[] = { A_MAIN, A_LUA_PCALL, A_VM_PCALL, A_BC, A_VM_RESUME, A_BC };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	CHECK_STR(collapse(0, 0),
		  "main;lua_pcall;lj_vm_pcall;lj_BC_CALL;lj_vm_resume;@app.lua:22;lj_BC_CALL 1\n");
}

static void test_running_cfunc(void)
{
	begin();
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), C(A_CFUNC) };
	uint64_t named[] = { A_MAIN, A_LUA_PCALL, A_VM_PCALL, A_BC, A_CFUNC + 16 };
	uint64_t unnamed[] = { A_MAIN, A_LUA_PCALL, A_VM_PCALL, A_BC };
	SAMPLE(LP_VMST_CFUNC, lua, named);
	SAMPLE(LP_VMST_CFUNC, lua, unnamed);
	CHECK_STR(collapse(0, 0), "main;lua_pcall;lj_vm_pcall;@app.lua:5;lj_BC_CALL;my_cfunc 1\n"
				  "main;lua_pcall;lj_vm_pcall;@app.lua:5;my_cfunc;lj_BC_CALL 1\n");
}

/*
** A C function of the VM that a C function of the Lua stack called (require's lua_call of
** package.loaders[2]: both lua_CFunctions inside the stripped VM) sampled in the VM code
** calling it or back from it, state C: no host frame of its own yet, VM code on top of
** require's code. Taken for the loader's frame (a tail call's), require's code anchored
** nothing: each Lua part went one VM entry out, pmain above main. The same with the loader
** called by the main chunk, pmain's code taken for its frame. The Lua parts stay in order,
** the VM code calling the loader shown right before it, as in the loader's own samples.
*/
static void test_cfunc_called_by_cfunc(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { A_LUA_CPCALL, "lua_cpcall" },
		{ 0x3000, "lj_vm_asm_begin" }, { 0x5000, "require" }, { 0x5800, "loader" },
		{ A_PMAIN, "pmain" }, { 0x20000, "__libc_start_main" },
	};
	begin_with(syms, NSYMS(syms));
	struct lp_lua_frame req[] = { C(A_PMAIN), L(P_MAIN, 6), C(0x5000), C(0x5800) };
	uint64_t reqh[] = { 0x20010, A_MAIN + 9, A_LUA_CPCALL + 4, 0x3010, A_PMAIN + 8,
			    A_LUA_PCALL + 4, 0x3020, 0x5010, 0x3030 };
	SAMPLE(LP_VMST_CFUNC, req, reqh);
	struct lp_lua_frame direct[] = { C(A_PMAIN), L(P_MAIN, 7), C(0x5800) };
	uint64_t directh[] = { 0x20010, A_MAIN + 9, A_LUA_CPCALL + 4, 0x3010, A_PMAIN + 8,
			       A_LUA_PCALL + 4, 0x3030 };
	SAMPLE(LP_VMST_CFUNC, direct, directh);
	CHECK_STR(collapse(0, 0),
		  "__libc_start_main;main;lua_cpcall;lj_vm_asm_begin;pmain;lua_pcall;@app.lua:6;"
		  "lj_vm_asm_begin;require;lj_vm_asm_begin;loader 1\n"
		  "__libc_start_main;main;lua_cpcall;lj_vm_asm_begin;pmain;lua_pcall;@app.lua:7;"
		  "lj_vm_asm_begin;loader 1\n");
}

/*
** An unstripped LuaJIT (a host linked with the static library): the interpreter's block,
** lj_vm_asm_begin..lj_vm_ffi_call, is named after its handlers and entries inside. That
** code is VM code all the same: read as plain C code it anchored nothing, and the Lua
** frames went to the root, before __libc_start_main.
*/
static void test_vm_block_named(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { 0x3000, "lj_BC_ISLT" },
		{ 0x3000, "lj_vm_asm_begin" }, { 0x3100, "lj_BC_TNEW" }, { 0x3200, "lj_BC_FUNCC" },
		{ 0x3300, "lj_vm_pcall" }, { 0x4000, "lj_vm_ffi_call" }, { 0x5000, "require" },
		{ 0x20000, "__libc_start_main" },
	};
	begin_with(syms, NSYMS(syms));
	struct lp_lua_frame lua[] = { L(P_MAIN, 6), C(0x5000), L(P_F, 11) };
	uint64_t host[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3210, 0x5010, 0x3110 };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	/* In lj_vm_pcall's own code, a named VM entry of the block: no other tier. */
	struct lp_lua_frame top[] = { L(P_MAIN, 6) };
	uint64_t entry[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3310 };
	SAMPLE(LP_VMST_LFUNC, top, entry);
	CHECK_STR(collapse(0, 0),
		  "__libc_start_main;main;lua_pcall;@app.lua:6 1\n"
		  "__libc_start_main;main;lua_pcall;@app.lua:6;lj_BC_FUNCC;require;@app.lua:11 1\n");
}

/*
** A builtin written in C on an unstripped LuaJIT (a host linked with the static library):
** the interpreter's lj_BC_FUNCC calling lj_cf_table_sort, or lj_fff_fallback calling an
** assembler builtin's C half, is the builtin itself, which its Lua frame names: not shown
** (it was, "builtin#18;lj_BC_FUNCC;lj_cf_table_sort": the builtin twice, as a stripped VM
** shows its block and an unnamed function), the C code it calls is. A C function called
** by lj_BC_FUNCC keeps its frames (its Lua frame is the one not shown).
*/
static void test_vm_block_builtin(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { A_LUA_CALL, "lua_call" },
		{ 0x3000, "lj_BC_ISLT" }, { 0x3000, "lj_vm_asm_begin" }, { 0x3100, "lj_BC_TNEW" },
		{ 0x3200, "lj_BC_FUNCC" }, { 0x3300, "lj_fff_fallback" }, { 0x4000, "lj_vm_ffi_call" },
		{ 0x5000, "my_cfunc" }, { 0x7000, "lj_cf_table_sort" }, { 0x7100, "auxsort" },
		{ 0x7200, "lj_ffh_tonumber" }, { 0x7300, "strtod" }, { 0x20000, "__libc_start_main" },
	};
	begin_with(syms, NSYMS(syms));
	struct lp_lua_frame sort[] = { L(P_MAIN, 5), FF(18) };
	uint64_t entry[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3210, 0x7010 };
	uint64_t inner[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3210, 0x7010, 0x7110 };
	SAMPLE(LP_VMST_FFUNC, sort, entry);
	SAMPLE(LP_VMST_FFUNC, sort, inner);
	/* Its comparator, through lua_call: the builtin is a segment's last frame. */
	struct lp_lua_frame cmp[] = { L(P_MAIN, 5), FF(18), L(P_F, 12) };
	uint64_t cmph[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3210, 0x7010, 0x7110,
			    A_LUA_CALL + 4, 0x3110 };
	SAMPLE(LP_VMST_LFUNC, cmp, cmph);
	/* An assembler builtin's C fallback. */
	struct lp_lua_frame ton[] = { L(P_MAIN, 7), FF(14) };
	uint64_t tonh[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3310, 0x7210, 0x7310 };
	SAMPLE(LP_VMST_FFUNC, ton, tonh);
	/* A C function of the program, called by lj_BC_FUNCC. */
	struct lp_lua_frame cf[] = { L(P_MAIN, 9), C(0x5000) };
	uint64_t cfh[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3210, 0x5010, 0x7110 };
	SAMPLE(LP_VMST_CFUNC, cf, cfh);
	CHECK_STR(collapse(0, 0),
		  "__libc_start_main;main;lua_pcall;@app.lua:5;builtin#18 1\n"
		  "__libc_start_main;main;lua_pcall;@app.lua:5;builtin#18;auxsort 1\n"
		  "__libc_start_main;main;lua_pcall;@app.lua:5;builtin#18;auxsort;lua_call;"
		  "@app.lua:12 1\n"
		  "__libc_start_main;main;lua_pcall;@app.lua:7;builtin#14;strtod 1\n"
		  "__libc_start_main;main;lua_pcall;@app.lua:9;lj_BC_FUNCC;my_cfunc;auxsort 1\n");
}

/*
** An assembler builtin's own code on an unstripped LuaJIT (lj_ff_tostring calling
** lj_strfmt_num, lj_ff_coroutine_resume calling lj_vm_resume for the coroutine) is the
** builtin too: not shown after its Lua frame (it was: "tostring;lj_ff_tostring;
** lj_strfmt_num", "coroutine.resume;lj_ff_coroutine_resume;@app.lua:14"), what it calls is.
*/
static void ff_names_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_meta(&wb, "ffnames", "lua - pcall tostring coroutine.resume");
	lp_write_ext_end(&wb);
}

static void test_vm_block_asm_builtin(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { 0x3000, "lj_BC_ISLT" },
		{ 0x3000, "lj_vm_asm_begin" }, { 0x3100, "lj_BC_TNEW" },
		{ 0x3400, "lj_ff_tostring" }, { 0x3500, "lj_ff_coroutine_resume" },
		{ 0x4000, "lj_vm_ffi_call" }, { 0x7400, "lj_strfmt_num" },
		{ 0x20000, "__libc_start_main" },
	};
	begin_with(syms, NSYMS(syms));
	trailer = ff_names_trailer;
	struct lp_lua_frame tos[] = { L(P_MAIN, 5), FF(3) };
	uint64_t tosh[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3410, 0x7410 };
	SAMPLE(LP_VMST_FFUNC, tos, tosh);
	/* In a coroutine coroutine.resume runs: its interpreter, then tostring there. */
	struct lp_lua_frame co[] = { L(P_MAIN, 6), FF(4), L(P_F, 14) };
	uint64_t coh[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3510, 0x3110 };
	SAMPLE(LP_VMST_LFUNC, co, coh);
	struct lp_lua_frame cotos[] = { L(P_MAIN, 6), FF(4), L(P_F, 14), FF(3) };
	uint64_t cotosh[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3510, 0x3410, 0x7410 };
	SAMPLE(LP_VMST_FFUNC, cotos, cotosh);
	CHECK_STR(collapse(0, 0),
		  "__libc_start_main;main;lua_pcall;@app.lua:5;tostring;lj_strfmt_num 1\n"
		  "__libc_start_main;main;lua_pcall;@app.lua:6;coroutine.resume;@app.lua:14 1\n"
		  "__libc_start_main;main;lua_pcall;@app.lua:6;coroutine.resume;@app.lua:14;"
		  "tostring;lj_strfmt_num 1\n");
}

/*
** The tails the assembler builtins share on an unstripped LuaJIT (lj_fff_gcstep calling
** lj_gc_step, lj_fff_newstr calling lj_str_new) are the builtin's code too: not shown after
** its Lua frame (they were: "tostring;lj_fff_gcstep;lj_gc_step"); lj_fff_fallback is not
** either, with the C half it calls, as before.
*/
static void ff_sub_names_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_meta(&wb, "ffnames", "lua - pcall tostring string.sub");
	lp_write_ext_end(&wb);
}

static void test_vm_block_asm_tails(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { 0x3000, "lj_BC_ISLT" },
		{ 0x3000, "lj_vm_asm_begin" }, { 0x3400, "lj_ff_tostring" },
		{ 0x3500, "lj_ff_string_sub" }, { 0x3600, "lj_fff_gcstep" },
		{ 0x3700, "lj_fff_newstr" }, { 0x3900, "lj_fff_fallback" }, { 0x4000, "lj_vm_ffi_call" },
		{ 0x7400, "lj_gc_step" }, { 0x7500, "lj_str_new" }, { 0x7600, "lj_ffh_tostring" },
		{ 0x20000, "__libc_start_main" },
	};
	begin_with(syms, NSYMS(syms));
	trailer = ff_sub_names_trailer;
	struct lp_lua_frame tos[] = { L(P_MAIN, 5), FF(3) };
	uint64_t gc[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3610, 0x7410 };
	SAMPLE(LP_VMST_FFUNC, tos, gc);
	uint64_t half[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3910, 0x7610 };
	SAMPLE(LP_VMST_FFUNC, tos, half);
	struct lp_lua_frame sub[] = { L(P_MAIN, 6), FF(4) };
	uint64_t str[] = { 0x20010, A_MAIN + 9, A_LUA_PCALL + 4, 0x3710, 0x7510 };
	SAMPLE(LP_VMST_FFUNC, sub, str);
	CHECK_STR(collapse(0, 0),
		  "__libc_start_main;main;lua_pcall;@app.lua:5;tostring 1\n"
		  "__libc_start_main;main;lua_pcall;@app.lua:5;tostring;lj_gc_step 1\n"
		  "__libc_start_main;main;lua_pcall;@app.lua:6;string.sub;lj_str_new 1\n");
}

static void test_builtins(void)
{
	begin();
	/* table.sort is implemented in C and calls the comparator through lj_vm_call. */
	struct lp_lua_frame sort[] = { L(P_MAIN, 5), FF(18), L(P_F, 12) };
	uint64_t sorthost[] = { A_MAIN, A_LUA_PCALL, A_VM_PCALL, A_BC, A_SORT, A_LUA_CALL,
				A_VM_CALL, A_BC };
	SAMPLE(LP_VMST_LFUNC, sort, sorthost);
	/* pcall is an assembler fast function: no host frame of its own. */
	struct lp_lua_frame pc[] = { L(P_MAIN, 5), FF(20), L(P_F, 12) };
	uint64_t pchost[] = { A_MAIN, A_LUA_PCALL, A_VM_PCALL, A_BC };
	SAMPLE(LP_VMST_LFUNC, pc, pchost);
	CHECK_STR(collapse(0, 0),
		  "main;lua_pcall;lj_vm_pcall;@app.lua:5;builtin#20;@app.lua:12;lj_BC_CALL 1\n"
		  "main;lua_pcall;lj_vm_pcall;@app.lua:5;lj_BC_CALL;lj_cf_table_sort;lua_call;"
		  "lj_vm_call;@app.lua:12;lj_BC_CALL 1\n");
}

/* The extension the agent ends each stream with, empty. */
static void empty_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_end(&wb);
}

/* A host stack the agent cut short (LP_HOST_CUT at its outer end): of two table.sort
 * comparators, only the inner one's VM entry is left. The outer Lua frames that no host
 * frame reaches go to the root ahead of the host frames; they went after the only VM
 * entry left (the main chunk's line shown as called from inside the inner sort). */
static void test_cut_host(void)
{
	begin();
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), FF(18), L(P_F, 12), FF(18), L(P_G, 22) };
	uint64_t host[] = { LP_HOST_CUT, A_SORT, A_LUA_CALL, A_VM_CALL, A_BC };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	trailer = empty_trailer; /* the agent's stream (without, it reads as cut: below) */
	CHECK_STR(collapse(0, 0),
		  "@app.lua:5;builtin#18;@app.lua:12;builtin#18;lj_cf_table_sort;lua_call;"
		  "lj_vm_call;@app.lua:22;lj_BC_CALL 1\n");
}

/* lp_load's status and whether the stream read whole, for the stream written so far with
 * its epilogue and, with ext, an empty extension. */
static int load_status(int ext, int *complete)
{
	lp_write_sysprof_epilogue(&wb);
	if (ext)
		empty_trailer();
	lp_wbuf_flush(&wb);
	struct lp_input in;
	lp_input_open_mem(&in, stream.data, stream.len, "test");
	struct lp_loaded l;
	int rc = lp_load(&in, NULL, &l);
	*complete = l.stats.complete;
	lp_loaded_free(&l);
	lp_input_close(&in);
	return rc;
}

/* A CPU stream of luaprof's agent (its host stacks have a cut mark or keyed trace code)
 * that ends at its epilogue was cut before the extension the agent always writes there:
 * it is reported as cut, not as a whole profile whose builtins, objects and trace frames
 * merely have no names. Stacks without those addresses (Tarantool's streams end there),
 * and keyed-looking addresses in a stream that names C code above 2^47 (a 48-bit address
 * space: real addresses) or in the kernel's half, read whole. */
static void test_cut_before_extension(void)
{
	int complete;
	struct lp_lua_frame lua[] = { L(P_MAIN, 5) };
	uint64_t cut[] = { LP_HOST_CUT, A_MAIN, A_LUA_PCALL, A_BC };
	uint64_t keyed[] = { A_MAIN, A_LUA_PCALL, KEYED(3, 0x7f0010), A_CFUNC };
	uint64_t plain[] = { A_MAIN, A_LUA_PCALL, A_BC };
	uint64_t kernel[] = { A_MAIN, A_LUA_PCALL, 0xffffffffff600400ull };

	begin();
	SAMPLE(LP_VMST_LFUNC, lua, cut);
	CHECK_EQ(load_status(0, &complete), LP_ERR_TRUNCATED);
	CHECK_EQ(complete, 0);
	begin();
	SAMPLE(LP_VMST_LFUNC, lua, keyed);
	CHECK_EQ(load_status(0, &complete), LP_ERR_TRUNCATED);
	CHECK_EQ(complete, 0);
	begin();
	SAMPLE(LP_VMST_LFUNC, lua, keyed);
	CHECK_EQ(load_status(1, &complete), LP_OK);
	CHECK_EQ(complete, 1);
	begin();
	SAMPLE(LP_VMST_LFUNC, lua, plain);
	SAMPLE(LP_VMST_INTERP, lua, kernel);
	CHECK_EQ(load_status(0, &complete), LP_OK);
	CHECK_EQ(complete, 1);
	static const struct csym high[] = { { KEYED(1, 0x1000), "main" } };
	begin_with(high, NSYMS(high));
	SAMPLE(LP_VMST_LFUNC, lua, keyed);
	CHECK_EQ(load_status(0, &complete), LP_OK);
}

static void test_api_anchors(void)
{
	begin();
	/* A stripped VM: only the API entry points are named. */
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), C(A_CFUNC), L(P_F, 12) };
	uint64_t host[] = { A_MAIN, A_LUA_PCALL, 0x3ff0, A_CFUNC, A_LUA_CALL, 0x3ff0 };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	CHECK_STR(collapse(0, 0), "main;lua_pcall;@app.lua:5;lj_BC_CALL;my_cfunc;lua_call;"
				  "@app.lua:12;lj_BC_CALL 1\n");
}

/* A stripped VM's lua_call before it enters the VM (it moves its arguments with libc's
 * memmove, then tail-calls the interpreter): no anchor, since its inside is plain C code,
 * not the interpreter's block (named, as luaprof's agent names it, in a stream with its
 * mapped objects). The C function's caller keeps its Lua line right under lua_pcall (it
 * was put after lua_call, the Lua line over the C function's frames). */
static void prologue_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_map(&wb, 0x1000, 0x9000, 0, "/usr/bin/luajit", NULL, 0);
	lp_write_ext_map(&wb, 0x20000, 0x30000, 0, "/usr/lib/libc.so.6", NULL, 0);
	lp_write_ext_end(&wb);
}

static void test_api_prologue(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { A_LUA_CALL, "lua_call" },
		{ A_BC, "lj_vm_asm_begin" }, { A_CFUNC, "my_cfunc" }, { 0x20000, "memmove" },
	};
	begin_with(syms, NSYMS(syms));
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), C(A_CFUNC) };
	uint64_t host[] = { A_MAIN, A_LUA_PCALL, 0x3ff0, A_CFUNC + 8, A_LUA_CALL + 4, 0x20010 };
	SAMPLE(LP_VMST_CFUNC, lua, host);
	trailer = prologue_trailer;
	CHECK_STR(collapse(0, 0),
		  "main;lua_pcall;@app.lua:5;lj_vm_asm_begin;my_cfunc;lua_call;memmove 1\n");
}

static void test_trace_host_split(void)
{
	begin();
	struct lp_sys_sample t = { .vmstate = LP_VMST_TRACE, .traceno = 3, .trace_addr = P_F,
				   .trace_line = 15 };
	lp_write_sys_sample(&wb, &t);
	uint64_t gc[] = { A_CFUNC + 4, A_MAIN };
	struct lp_sys_sample g = { .vmstate = LP_VMST_GC, .nhost = 2, .host = gc };
	lp_write_sys_sample(&wb, &g);
	struct lp_sys_sample e = { .vmstate = LP_VMST_INTERP };
	lp_write_sys_sample(&wb, &e);
	CHECK_STR(collapse(0, 0), "INTERP 1\nTRACE [3] @app.lua:15 1\nmain;my_cfunc 1\n");
	begin();
	lp_write_sys_sample(&wb, &t);
	lp_write_sys_sample(&wb, &g);
	lp_write_sys_sample(&wb, &e);
	CHECK_STR(collapse(1, 0), "GC;main;my_cfunc 1\nINTERP 1\nTRACE;TRACE [3] @app.lua:15 1\n");
}

/*
** A stripped VM's trace code found no anchor when it lay within 256 KiB above another
** object's last symbol (nginx's worker: the JIT's code placed right after libunwind's
** text): the sample was merged as it was read, before the extension gave that symbol's
** size, so the trace code looked like a named C function and the Lua frames went to the
** root. Samples with Lua frames are merged once the extension is read.
*/
static void stripped_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_csize(&wb, 0x40000, 0x100);
	lp_write_ext_end(&wb);
}

/* A host's C function running Lua (nginx's run_thread) on a stripped VM, and another
 * library's last symbol, sized by the extension (stripped_trailer, resumed_trailer). */
static const struct csym host_thread_syms[] = {
	{ A_MAIN, "main" }, { A_CFUNC, "run_thread" }, { 0x3000, "lj_vm_asm_begin" },
	{ 0x3800, "lj_vm_ffi_call" }, { 0x40000, "other_lib_last" },
};

static void test_anchor_after_sizes(void)
{
	begin_with(host_thread_syms, NSYMS(host_thread_syms));
	struct lp_lua_frame lua[] = { L(P_MAIN, 18), L(P_F, 12) };
	uint64_t host[] = { A_MAIN + 9, A_CFUNC + 4, 0x60000, 0x3810 };
	SAMPLE(LP_VMST_CFUNC, lua, host);
	SAMPLE(LP_VMST_CFUNC, lua, host);
	trailer = stripped_trailer;
	/* Code no symbol covers and the stream does not name as a trace's: before the Lua
	 * frames, as any caller of the VM (another runtime's stub calling lua_resume). */
	CHECK_STR(collapse(0, 0),
		  "main;run_thread;0x60000;@app.lua:18;@app.lua:12;lj_vm_ffi_call 2\n");
}

/*
** With sizes and objects known, code no symbol covers stands for a trace only outside
** every mapped object: a stripped library's static function (libc's start code below
** main) is not an anchor, or an embedding host's xpcall split its Lua stack at it
** (shapes_luajit, luajit2 under a C host).
*/
static void mapped_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_map(&wb, 0x1000, 0x9000, 0, "/usr/bin/host", NULL, 0);
	lp_write_ext_map(&wb, 0x20000, 0x30000, 0, "/usr/lib/libc.so", NULL, 0);
	lp_write_ext_csize(&wb, A_MAIN, 0x100);
	lp_write_ext_csize(&wb, A_LUA_PCALL, 0x100);
	lp_write_ext_csize(&wb, 0x20000, 0x10);
	lp_write_ext_end(&wb);
}

static void test_unnamed_in_object(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { 0x3000, "lj_vm_asm_begin" },
		{ 0x3800, "lj_vm_ffi_call" }, { 0x20000, "__libc_start_main" },
	};
	begin_with(syms, NSYMS(syms));
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), FF(15), L(P_F, 12) };
	uint64_t host[] = { 0x20008, 0x2400, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100 };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	trailer = mapped_trailer;
	/* The leaf in the interpreter's block is the innermost Lua frame running: shown as
	 * @app.lua:12 alone, so that the line gets the sample's self time. */
	CHECK_STR(collapse(0, 0), "__libc_start_main;host+0x1400;main;lua_pcall;@app.lua:5;"
				  "builtin#15;@app.lua:12 1\n");
	/* C code outside the VM's block at the leaf stays: a C function the Lua code called. */
	begin_with(syms, NSYMS(syms));
	uint64_t host2[] = { 0x20008, 0x2400, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, A_MAIN + 0x40 };
	SAMPLE(LP_VMST_CFUNC, lua, host2);
	trailer = mapped_trailer;
	CHECK_STR(collapse(0, 0), "__libc_start_main;host+0x1400;main;lua_pcall;@app.lua:5;"
				  "builtin#15;@app.lua:12;lj_vm_asm_begin;main 1\n");
}

static void test_unknown_addresses(void)
{
	begin();
	/* Past the last symbol by more than any function spans: not "last_sym". */
	uint64_t host[] = { A_MAIN, A_LAST + 0x10, A_LAST + 0x1000000 };
	struct lp_sys_sample s = { .vmstate = LP_VMST_INTERP, .nhost = 3 };
	uint64_t rh[3] = { host[2], host[1], host[0] };
	s.host = rh;
	lp_write_sys_sample(&wb, &s);
	CHECK_STR(collapse(0, 0), "main;last_sym;0x1008000 1\n");
}

static void test_function_granularity(void)
{
	begin();
	struct lp_lua_frame a[] = { L(P_MAIN, 5), L(P_F, 12) };
	struct lp_lua_frame b[] = { L(P_MAIN, 5), L(P_F, 13) };
	sample(LP_VMST_LFUNC, a, 2, NULL, 0);
	sample(LP_VMST_LFUNC, b, 2, NULL, 0);
	/* Named as functions: "@app.lua:0;@app.lua:10" read as lines, the main chunk's 0. */
	CHECK_STR(collapse(0, 1), "main chunk <@app.lua>;function <@app.lua:10> 2\n");
	/* A prototype the symbol table does not know has no first line: its stand-in name,
	 * not a main chunk's label (it read "main chunk <[unknown function 0x999000]>"). */
	begin();
	struct lp_lua_frame c[] = { L(P_MAIN, 5), L(0x999000, 7) };
	sample(LP_VMST_LFUNC, c, 2, NULL, 0);
	CHECK_STR(collapse(0, 1), "main chunk <@app.lua>;[unknown function 0x999000] 1\n");
	begin();
	sample(LP_VMST_LFUNC, c, 2, NULL, 0);
	CHECK_STR(collapse(0, 0), "@app.lua:5;[unknown function 0x999000]:7 1\n");
}

static void test_proto_address_reuse(void)
{
	begin();
	struct lp_lua_frame a[] = { L(P_F, 12) };
	sample(LP_VMST_LFUNC, a, 1, NULL, 0);
	/* The prototype at P_F was collected and the address reused by another chunk. */
	lp_write_sys_sym_lua(&wb, P_F, "@other.lua", 10, 40);
	sample(LP_VMST_LFUNC, a, 1, NULL, 0);
	CHECK_STR(collapse(0, 0), "@app.lua:12 1\n@other.lua:12 1\n");
}

/*
** A library unloaded and another loaded at its address while sampling (FFI libraries
** collected and loaded in a loop): the agent names the second's functions mid-stream,
** after the samples of the first. Each sample's C frames are named as the symbols written
** before it named them, whether the sample is merged at once (host frames only) or at the
** end (Lua frames, a TRACE sample's full stack): the later names do not take the earlier
** samples. An address named first after samples in it (the agent names a library once it
** sees it loaded) is named so in them too; the same name given again is the same frame.
*/
static void test_c_symbol_replaced(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_VM_PCALL, "lj_vm_pcall" }, { 0x50000, "alpha" },
	};
	begin_with(syms, NSYMS(syms));
	uint64_t h1[] = { A_MAIN, 0x50010 }, h2[] = { A_MAIN, A_VM_PCALL, 0x50010 };
	uint64_t h3[] = { A_MAIN, 0x60008 };
	struct lp_lua_frame a[] = { L(P_F, 12) };
	sample(LP_VMST_INTERP, NULL, 0, h1, NSYMS(h1));
	sample(LP_VMST_CFUNC, a, 1, h2, NSYMS(h2));
	sample(LP_VMST_INTERP, NULL, 0, h3, NSYMS(h3));
	lp_write_sys_sym_cfunc(&wb, 0x50000, "beta_longer", 11);
	lp_write_sys_sym_cfunc(&wb, 0x60000, "gamma", 5);
	sample(LP_VMST_INTERP, NULL, 0, h1, NSYMS(h1));
	sample(LP_VMST_CFUNC, a, 1, h2, NSYMS(h2));
	sample(LP_VMST_INTERP, NULL, 0, h3, NSYMS(h3));
	lp_write_sys_sym_cfunc(&wb, 0x50000, "alpha", 5);
	sample(LP_VMST_CFUNC, a, 1, h2, NSYMS(h2));
	lp_write_sys_sym_cfunc(&wb, 0x50000, "alpha", 5);
	sample(LP_VMST_INTERP, NULL, 0, h1, NSYMS(h1));
	CHECK_STR(collapse(0, 0),
		  "main;alpha 2\n"
		  "main;beta_longer 1\n"
		  "main;gamma 2\n"
		  "main;lj_vm_pcall;@app.lua:12;alpha 2\n"
		  "main;lj_vm_pcall;@app.lua:12;beta_longer 1\n");
}

/* Two C++ functions whose mangled names (over 512 bytes) differ only at their end: two
 * frames, each named in full. The names were cut at 511 bytes, and the two functions
 * read (and merged) as one. */
static void test_long_c_names(void)
{
	char a[641], b[641], want[2048];
	for (size_t i = 0; i < sizeof(a) - 1; i++)
		a[i] = b[i] = "_ZN5boost6detail"[i % 16];
	a[sizeof(a) - 2] = 'A';
	b[sizeof(b) - 2] = 'B';
	a[sizeof(a) - 1] = b[sizeof(b) - 1] = '\0';
	const struct csym syms[] = { { A_MAIN, "main" }, { 0x50000, a }, { 0x60000, b } };
	begin_with(syms, NSYMS(syms));
	uint64_t ha[] = { A_MAIN, 0x50010 }, hb[] = { A_MAIN, 0x60010 };
	sample(LP_VMST_INTERP, NULL, 0, ha, NSYMS(ha));
	sample(LP_VMST_INTERP, NULL, 0, hb, NSYMS(hb));
	sample(LP_VMST_INTERP, NULL, 0, hb, NSYMS(hb));
	snprintf(want, sizeof(want), "main;%s 1\nmain;%s 2\n", a, b);
	CHECK_STR(collapse(0, 0), want);
}

/*
** A library with two names for a function (the preferred "al" first, then "alpha_long"),
** unloaded and loaded again at its address: its symbols written again after a sample are
** the same names, not a new library's. The report named the samples after the reload by
** the second name only (the first was taken for an alias, the second for a replacement).
** Then another library there, whose first name there is the earlier one's: its names.
*/
static void test_c_symbol_reloaded_aliases(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { 0x50000, "al" }, { 0x50000, "alpha_long" },
	};
	begin_with(syms, NSYMS(syms));
	uint64_t h1[] = { A_MAIN, 0x50010 };
	sample(LP_VMST_INTERP, NULL, 0, h1, NSYMS(h1));
	lp_write_sys_sym_cfunc(&wb, 0x50000, "al", 2);
	lp_write_sys_sym_cfunc(&wb, 0x50000, "alpha_long", 10);
	sample(LP_VMST_INTERP, NULL, 0, h1, NSYMS(h1));
	lp_write_sys_sym_cfunc(&wb, 0x50000, "al", 2);
	lp_write_sys_sym_cfunc(&wb, 0x50000, "beta_longer", 11);
	sample(LP_VMST_INTERP, NULL, 0, h1, NSYMS(h1));
	lp_write_sys_sym_cfunc(&wb, 0x50000, "gamma_longer", 12);
	sample(LP_VMST_INTERP, NULL, 0, h1, NSYMS(h1));
	CHECK_STR(collapse(0, 0),
		  "main;al 3\n"
		  "main;gamma_longer 1\n");
}

/*
** A library loaded where another was, again and again (a C epoch at nearly every sample),
** after samples that met many C addresses: each new epoch emptied the cache of every
** address's frame, a memset of all of them (20000 epochs after 240000 addresses: over 2 s,
** now under half a second, most of it the stacks' rendering). Each epoch's sample gets
** its own name.
*/
static void test_c_epochs_many(void)
{
	enum { WARM = 4000, DEPTH = 60, EPOCHS = 20000 };
	static const struct csym syms[] = { { A_MAIN, "main" }, { 0x50000, "lib_0" } };
	begin_with(syms, NSYMS(syms));
	uint64_t h[DEPTH + 1];
	h[0] = A_MAIN;
	for (uint64_t k = 0; k < WARM; k++) {
		for (uint64_t j = 1; j <= DEPTH; j++)
			h[j] = 0x100000 + (k * DEPTH + j) * 16;
		sample(LP_VMST_INTERP, NULL, 0, h, DEPTH + 1);
	}
	uint64_t h1[] = { A_MAIN, 0x50010 };
	for (uint64_t k = 1; k <= EPOCHS; k++) {
		char name[32];
		int len = snprintf(name, sizeof(name), "lib_%llu", (unsigned long long)k);
		lp_write_sys_sym_cfunc(&wb, 0x50000, name, (size_t)len);
		sample(LP_VMST_INTERP, NULL, 0, h1, NSYMS(h1));
	}
	lp_write_sysprof_epilogue(&wb);
	lp_wbuf_flush(&wb);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct lp_input in;
	lp_input_open_mem(&in, stream.data, stream.len, "test");
	struct lp_loaded l;
	CHECK_EQ(lp_load(&in, NULL, &l), LP_OK);
	struct lp_profile *p = lp_loaded_profile(&l, "test");
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	struct lp_render_opts ro = { 0 };
	char err[256];
	CHECK_EQ(lp_render_collapsed(p, &ro, f, err, sizeof(err)), 0);
	fclose(f);
	lp_profile_free(p);
	lp_loaded_free(&l);
	lp_input_close(&in);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	if (secs > 2.0)
		fprintf(stderr, "  %d C epochs reported in %.2f s\n", EPOCHS, secs);
	CHECK(secs <= 2.0);
	CHECK(text && strstr(text, "main;lib_20000 1\n"));
	CHECK(text && strstr(text, "main;lib_1 1\n"));
	free(text);
}

static void maps_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_meta(&wb, "cmdline", "luajit app.lua");
	lp_write_ext_meta(&wb, "future-key", "ignored");
	/* The executable holds main..last_sym; libfoo.so has no symbols in the stream. */
	lp_write_ext_map(&wb, 0x1000, 0x9000, 0, "/usr/bin/luajit", (const uint8_t *)"\x12\x34", 2);
	lp_write_ext_map(&wb, 0x20000, 0x30000, 0x4000, "/usr/lib/libfoo.so", NULL, 0);
	lp_write_ext_csize(&wb, A_LAST, 0x10);
	/* A record type from a newer writer is skipped by its length. */
	lp_wbuf_u8(&wb, 0x7f);
	lp_wbuf_uleb(&wb, 3);
	lp_wbuf_bytes(&wb, "abc", 3);
	lp_write_ext_end(&wb);
}

/* The agent's count of samples whose full stacks it could not keep (meta
 * trace_stacks_lost) reaches the facts `record` and `report` print a note from. */
static void stacks_lost_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_meta(&wb, "trace_stacks_lost", "7");
	lp_write_ext_end(&wb);
}

static void test_trace_stacks_lost_fact(void)
{
	begin();
	struct lp_lua_frame a[] = { L(P_F, 12) };
	sample(LP_VMST_LFUNC, a, 1, NULL, 0);
	lp_write_sysprof_epilogue(&wb);
	stacks_lost_trailer();
	lp_wbuf_flush(&wb);
	struct lp_input in;
	lp_input_open_mem(&in, stream.data, stream.len, "test");
	struct lp_loaded l;
	CHECK_EQ(lp_load(&in, NULL, &l), LP_OK);
	CHECK_EQ(l.facts.trace_stacks_lost, 7);
	lp_loaded_free(&l);
	lp_input_close(&in);
}

static void test_extension_maps(void)
{
	begin();
	/* 0x20010 is within 256 KiB of last_sym but in another object: never last_sym. */
	/* 0x8020 is past last_sym's 16 bytes: static code of the executable. */
	uint64_t rh[] = { 0x50000, 0x20010, A_LAST + 0x20, A_LAST + 4, A_MAIN };
	struct lp_sys_sample s = { .vmstate = LP_VMST_INTERP, .nhost = 5, .host = rh };
	lp_write_sys_sample(&wb, &s);
	trailer = maps_trailer;
	CHECK_STR(collapse(0, 0), "main;last_sym;luajit+0x7020;libfoo.so+0x4010;0x50000 1\n");
	CHECK_STR(title, "luajit app.lua");
}

static void ffnames_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_meta(&wb, "ffnames", "lua - assert type pcall");
	lp_write_ext_end(&wb);
}

static void test_extension_ffnames(void)
{
	begin();
	struct lp_lua_frame a[] = { L(P_MAIN, 5), FF(4), L(P_F, 12) };
	struct lp_lua_frame b[] = { L(P_MAIN, 5), FF(1), L(P_F, 12) };
	struct lp_lua_frame c[] = { L(P_MAIN, 5), FF(9) };
	sample(LP_VMST_LFUNC, a, 3, NULL, 0);
	sample(LP_VMST_LFUNC, b, 3, NULL, 0);
	sample(LP_VMST_FFUNC, c, 2, NULL, 0);
	trailer = ffnames_trailer;
	CHECK_STR(collapse(0, 0), "@app.lua:5;builtin#1;@app.lua:12 1\n"
				  "@app.lua:5;builtin#9 1\n"
				  "@app.lua:5;pcall;@app.lua:12 1\n");
}

/* Stack and tsample records as the agent writes them (innermost first). */
static void ext_stack(uint64_t id, const struct lp_lua_frame *lua, size_t nl,
		      const uint64_t *host, size_t nh)
{
	uint8_t buf[512];
	struct mem m = { 0 };
	struct lp_wbuf w;
	lp_wbuf_init(&w, buf, sizeof(buf), mem_writer, &m);
	lp_wbuf_uleb(&w, id);
	struct lp_sys_sample s = { .nlua = nl, .lua = lua, .nhost = nh, .host = host };
	lp_write_sys_stacks(&w, &s);
	lp_wbuf_flush(&w);
	lp_write_ext_record(&wb, LP_EXT_STACK, m.data, m.len);
	free(m.data);
}

static void tstacks_trailer(void)
{
	const struct lp_lua_frame lua[] = { L(P_F, 14), L(P_MAIN, 5) };
	const uint64_t host[] = { 0x7f0000, A_LUA_PCALL + 4, A_MAIN + 9 };
	const uint64_t bare[] = { 0x7f0000, A_MAIN + 9 };
	lp_write_ext_prologue(&wb);
	ext_stack(7, lua, 2, host, 3);
	ext_stack(8, NULL, 0, bare, 2);
	/* TRACE samples 0 and 3 under stack 7, 2 under stack 8; 1 names no known stack and
	 * 4 has no pair: both keep the trace frame alone. Pairs span two records. */
	const uint8_t pairs1[] = { 0, 7, 0, 99 }, pairs2[] = { 0, 8, 0, 7 };
	lp_write_ext_record(&wb, LP_EXT_TSAMPLE, pairs1, sizeof(pairs1));
	lp_write_ext_record(&wb, LP_EXT_TSAMPLE, pairs2, sizeof(pairs2));
	lp_write_ext_end(&wb);
}

static void test_trace_stacks(void)
{
	for (int split = 0; split < 2; split++) {
		begin();
		struct lp_sys_sample t = { .vmstate = LP_VMST_TRACE, .traceno = 3,
					   .trace_addr = P_F, .trace_line = 15 };
		struct lp_lua_frame lua[] = { L(P_MAIN, 5), L(P_F, 12) };
		uint64_t host[] = { A_MAIN + 9, A_LUA_PCALL + 4, A_VM_PCALL + 30 };
		lp_write_sys_sample(&wb, &t);
		lp_write_sys_sample(&wb, &t);
		SAMPLE(LP_VMST_LFUNC, lua, host); /* not a TRACE sample: not counted */
		lp_write_sys_sample(&wb, &t);
		lp_write_sys_sample(&wb, &t);
		t.trace_line = 16;
		lp_write_sys_sample(&wb, &t);
		trailer = tstacks_trailer;
		if (!split)
			CHECK_STR(collapse(0, 0),
				  "TRACE [3] @app.lua:15 1\n"
				  "TRACE [3] @app.lua:16 1\n"
				  "main;TRACE [3] @app.lua:15 1\n"
				  "main;lua_pcall;@app.lua:5;@app.lua:14;TRACE [3] @app.lua:15 2\n"
				  "main;lua_pcall;lj_vm_pcall;@app.lua:5;@app.lua:12 1\n");
		else
			CHECK_STR(collapse(1, 0),
				  "LFUNC;main;lua_pcall;lj_vm_pcall;@app.lua:5;@app.lua:12 1\n"
				  "TRACE;TRACE [3] @app.lua:15 1\n"
				  "TRACE;TRACE [3] @app.lua:16 1\n"
				  "TRACE;main;TRACE [3] @app.lua:15 1\n"
				  "TRACE;main;lua_pcall;@app.lua:5;@app.lua:14;TRACE [3] @app.lua:15 2\n");
	}
}

/* The full stack of both TRACE samples of test_c_symbol_replaced_trace: the trace's code
 * run by lua_pcall, called by a library's function at the root. */
static void lib_tstack_trailer(void)
{
	const struct lp_lua_frame lua[] = { L(P_F, 14), L(P_MAIN, 5) };
	const uint64_t host[] = { 0x7f0000, A_LUA_PCALL + 4, 0x50010 };
	lp_write_ext_prologue(&wb);
	ext_stack(7, lua, 2, host, 3);
	const uint8_t pairs[] = { 0, 7, 0, 7 };
	lp_write_ext_record(&wb, LP_EXT_TSAMPLE, pairs, sizeof(pairs));
	lp_write_ext_end(&wb);
}

/* The same for the samples resolved with the extension's stacks (TRACE) and the
 * collector's (GC, by their own host stack): each as of its own time. */
static void test_c_symbol_replaced_trace(void)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { 0x50000, "alpha" },
	};
	begin_with(syms, NSYMS(syms));
	struct lp_sys_sample t = { .vmstate = LP_VMST_TRACE, .traceno = 3, .trace_addr = P_F,
				   .trace_line = 15 };
	uint64_t gc[] = { 0x50010, A_MAIN + 4 }; /* innermost first: main calls the library */
	struct lp_sys_sample g = { .vmstate = LP_VMST_GC, .nhost = 2, .host = gc };
	lp_write_sys_sample(&wb, &t);
	lp_write_sys_sample(&wb, &g);
	lp_write_sys_sym_cfunc(&wb, 0x50000, "beta_longer", 11);
	lp_write_sys_sample(&wb, &t);
	lp_write_sys_sample(&wb, &g);
	trailer = lib_tstack_trailer;
	CHECK_STR(collapse(0, 0),
		  "alpha;lua_pcall;@app.lua:5;@app.lua:14;TRACE [3] @app.lua:15 1\n"
		  "beta_longer;lua_pcall;@app.lua:5;@app.lua:14;TRACE [3] @app.lua:15 1\n"
		  "main;alpha 1\n"
		  "main;beta_longer 1\n");
}

/* Symbols of a stripped VM's process: the VM's block is lj_vm_asm_begin. */
static const struct csym stripped[] = {
	{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { 0x3000, "lj_vm_asm_begin" },
	{ 0x3800, "lj_vm_ffi_call" }, { 0x9000, "qsort_r" }, { 0x20000, "__libc_start_main" },
};

/* The full stack of trace_stack_text's sample (innermost first), for its trailer. */
static const struct lp_lua_frame *ts_lua;
static const uint64_t *ts_host;
static size_t ts_nl, ts_nh;

static void one_stack_trailer(void)
{
	lp_write_ext_prologue(&wb);
	ext_stack(7, ts_lua, ts_nl, ts_host, ts_nh);
	const uint8_t pairs[] = { 0, 7 };
	lp_write_ext_record(&wb, LP_EXT_TSAMPLE, pairs, sizeof(pairs));
	lp_write_ext_end(&wb);
}

/* The collapsed rendering of one TRACE sample of trace 3 (at line) on a stripped VM, whose
 * full stack the extension carries, as the agent writes it. */
static const char *trace_stack_text(uint64_t line, const struct lp_lua_frame *lua, size_t nl,
				    const uint64_t *host, size_t nh)
{
	begin_with(stripped, NSYMS(stripped));
	struct lp_sys_sample t = { .vmstate = LP_VMST_TRACE, .traceno = 3, .trace_addr = P_F,
				   .trace_line = line };
	lp_write_sys_sample(&wb, &t);
	ts_lua = lua;
	ts_nl = nl;
	ts_host = host;
	ts_nh = nh;
	trailer = one_stack_trailer;
	return collapse(0, 0);
}

/*
** A trace in a coroutine that the interpreter resumed (coroutine.wrap, an assembler
** builtin), on a stripped VM: stepped from the trace, the host stack goes on in the
** interpreter's block (the resume called from the builtin), then lua_pcall, the outer
** segment's entry. The outer segment belongs there, as in the same path's other samples:
** "lua_pcall;@app.lua:5;builtin#15;...", never "lua_pcall;lj_vm_asm_begin;@app.lua:5".
** Sampled in its exit handler, the same trace is stepped to the entry's C frame, so the
** handler's code is there twice, then the resumer's interpreter: the same stack.
*/
static void test_trace_in_coroutine(void)
{
	const struct lp_lua_frame lua[] = { L(P_F, 14), FF(15), L(P_MAIN, 5) };
	const uint64_t in_trace[] = { 0x7f0000, 0x3100, A_LUA_PCALL + 4, A_MAIN + 9, 0x20008 };
	const uint64_t in_exit[] = { 0x3180, 0x3180, 0x3100, A_LUA_PCALL + 4, A_MAIN + 9,
				     0x20008 };
	static const char want[] = "__libc_start_main;main;lua_pcall;@app.lua:5;builtin#15;"
				   "lj_vm_asm_begin;@app.lua:14;TRACE [3] @app.lua:15 1\n";
	CHECK_STR(trace_stack_text(15, lua, 3, in_trace, NSYMS(in_trace)), want);
	CHECK_STR(trace_stack_text(15, lua, 3, in_exit, NSYMS(in_exit)), want);
}

/*
** The same coroutine sampled in the interpreter (a CPU sample whose leaf is the interpreter's
** block): the resume's C frame and the resumer's interpreter are both the interpreter's
** block, then lua_pcall. The outer segment belongs at lua_pcall, the resumer's entry, as
** for the trace and for the resumer's own samples; it went after the resumer's frame. A
** helper's frame (the same block again, right after the leaf) is no resume: without a
** resuming builtin in the Lua stack (pcall makes no C frame), lua_pcall stays the leaf's
** own entry.
*/
static void resume_names_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_meta(&wb, "ffnames", "lua - pcall coroutine.wrap_aux");
	lp_write_ext_end(&wb);
}

static void test_interpreter_in_coroutine(void)
{
	const uint64_t host[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180 };
	begin_with(stripped, NSYMS(stripped));
	const struct lp_lua_frame lua[] = { L(P_MAIN, 5), FF(3), L(P_F, 14) };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	trailer = resume_names_trailer;
	CHECK_STR(collapse(0, 0), "__libc_start_main;main;lua_pcall;@app.lua:5;"
				  "coroutine.wrap_aux;lj_vm_asm_begin;@app.lua:14 1\n");
	/* In a helper the coroutine's interpreter called: the helper's return address, right
	 * after the leaf, is not shown either. */
	const uint64_t in_helper[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3140,
				       0x3180 };
	begin_with(stripped, NSYMS(stripped));
	SAMPLE(LP_VMST_LFUNC, lua, in_helper);
	trailer = resume_names_trailer;
	CHECK_STR(collapse(0, 0), "__libc_start_main;main;lua_pcall;@app.lua:5;"
				  "coroutine.wrap_aux;lj_vm_asm_begin;@app.lua:14 1\n");
	/* Under pcall, which makes no C frame, or with no builtin at all, the same host
	 * stack is a helper the leaf called: not shown, the sample on its Lua line's path. */
	static const char helper[] = "__libc_start_main;main;lua_pcall;@app.lua:5;%s"
				     "@app.lua:14 1\n";
	char want[256];
	begin_with(stripped, NSYMS(stripped));
	const struct lp_lua_frame under_pcall[] = { L(P_MAIN, 5), FF(2), L(P_F, 14) };
	SAMPLE(LP_VMST_LFUNC, under_pcall, host);
	trailer = resume_names_trailer;
	snprintf(want, sizeof(want), helper, "pcall;");
	CHECK_STR(collapse(0, 0), want);
	begin_with(stripped, NSYMS(stripped));
	const struct lp_lua_frame flat[] = { L(P_MAIN, 5), L(P_F, 14) };
	SAMPLE(LP_VMST_LFUNC, flat, host);
	snprintf(want, sizeof(want), helper, "");
	CHECK_STR(collapse(0, 0), want);
}

/*
** A finalizer run by a collector step in a trace's exit, inside a coroutine that
** coroutine.wrap resumed, on a stripped VM: the exit handler is stepped to the coroutine's
** C frame (so its code is there twice), called lj_trace_exit, whose collector step ran
** the finalizer through lj_vm_pcall; the agent wrote a C frame at the return address into
** the C code that made that call. The copy of the handler's code is no resume: counted as
** one, it took the outer segment from lua_pcall ("lua_pcall;lj_vm_asm_begin;@app.lua:5").
** Coroutines that wrap resumed inside one wrap resumed have the resume's return address
** twice too, each a resume: both stay anchors.
*/
static const struct csym stripped_gc[] = {
	{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { 0x3000, "lj_vm_asm_begin" },
	{ 0x9400, "gc_call_finalizer" }, { 0x9500, "lj_gc_step" }, { 0x9600, "lj_trace_exit" },
	{ 0x20000, "__libc_start_main" },
};

static void test_finalizer_in_coroutine_exit(void)
{
	begin_with(stripped_gc, NSYMS(stripped_gc));
	const struct lp_lua_frame lua[] = { L(P_MAIN, 5), FF(3), L(P_F, 14), C(0x9410),
					    L(P_G, 22) };
	const uint64_t host[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180, 0x3180,
				  0x9610, 0x9510, 0x9410, 0x3040, 0x3190 };
	SAMPLE(LP_VMST_LFUNC, lua, host);
	trailer = resume_names_trailer;
	CHECK_STR(collapse(0, 0), "__libc_start_main;main;lua_pcall;@app.lua:5;"
				  "coroutine.wrap_aux;lj_vm_asm_begin;@app.lua:14;lj_vm_asm_begin;"
				  "lj_vm_asm_begin;lj_trace_exit;lj_gc_step;gc_call_finalizer;"
				  "@app.lua:22 1\n");
	/* Nested: the outer coroutine (P_F) resumed the inner one (P_G) by wrap too. Each
	 * segment keeps its place and the root stays at lua_pcall; the two resumes' frames
	 * both show after the inner builtin, as they did before the copy was told apart (a
	 * reading of the stripped VM's block left as it is). */
	begin_with(stripped_gc, NSYMS(stripped_gc));
	const struct lp_lua_frame nested[] = { L(P_MAIN, 5), FF(3), L(P_F, 14), FF(3),
					       L(P_G, 22) };
	const uint64_t nhost[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3100,
				   0x3190 };
	SAMPLE(LP_VMST_LFUNC, nested, nhost);
	trailer = resume_names_trailer;
	CHECK_STR(collapse(0, 0), "__libc_start_main;main;lua_pcall;@app.lua:5;"
				  "coroutine.wrap_aux;@app.lua:14;coroutine.wrap_aux;"
				  "lj_vm_asm_begin;lj_vm_asm_begin;@app.lua:22 1\n");
}

/*
** A trace in an FFI callback (a qsort comparator), sampled in its exit handler (VM code):
** the agent steps it to the entry's C frame, so the interpreter's block is there twice
** before qsort. The second is the same entry, not another anchor: the caller's frames
** stay at lua_pcall, outside qsort. The trace executes at its stack's innermost frame
** (app.lua:10): it is named where it starts (line 14), as trace frames under C code are
** (test_trace_stacks: where the trace executes elsewhere, it keeps that line).
*/
static void test_trace_helper_in_callback(void)
{
	const struct lp_lua_frame lua[] = { L(P_F, 10), FF(15), L(P_MAIN, 5) };
	const uint64_t host[] = { 0x3100, 0x3100, 0x9010, 0x3810, 0x3200,
				  A_LUA_PCALL + 4, A_MAIN + 9, 0x20008 };
	CHECK_STR(trace_stack_text(10, lua, 3, host, NSYMS(host)),
		  "__libc_start_main;main;lua_pcall;@app.lua:5;builtin#15;lj_vm_asm_begin;"
		  "lj_vm_ffi_call;qsort_r;@app.lua:10;TRACE [3] @app.lua:14 1\n");
}

static void reuse_trailer(void)
{
	const struct lp_lua_frame lua[] = { L(P_F, 14), L(P_MAIN, 5) };
	const uint64_t host[] = { 0x7f0000, A_LUA_PCALL + 4, A_MAIN + 9 };
	lp_write_ext_prologue(&wb);
	ext_stack(0, lua, 2, host, 3);
	const uint8_t pairs[] = { 0, 0, 0, 0, 0, 0 };
	lp_write_ext_record(&wb, LP_EXT_TSAMPLE, pairs, sizeof(pairs));
	lp_write_ext_end(&wb);
}

/* A full stack resolved at the end names a reused proto address as of each sample. */
static void test_trace_stacks_reuse(void)
{
	begin();
	struct lp_sys_sample t = { .vmstate = LP_VMST_TRACE, .traceno = 3, .trace_addr = P_G,
				   .trace_line = 21 };
	lp_write_sys_sample(&wb, &t);
	lp_write_sys_sym_lua(&wb, P_F, "@new.lua", 8, 13);
	lp_write_sys_sample(&wb, &t);
	lp_write_sys_sym_lua(&wb, P_F, "@newer.lua", 10, 13);
	lp_write_sys_sample(&wb, &t);
	trailer = reuse_trailer;
	CHECK_STR(collapse(0, 0),
		  "main;lua_pcall;@app.lua:5;@app.lua:14;TRACE [3] @app.lua:21 1\n"
		  "main;lua_pcall;@app.lua:5;@new.lua:14;TRACE [3] @app.lua:21 1\n"
		  "main;lua_pcall;@app.lua:5;@newer.lua:14;TRACE [3] @app.lua:21 1\n");
}

/* The collector's stacks (gsample records): GC samples 0 and 2 ran it under stack 7 (the
 * collector's code, my_cfunc here, called from line 14); sample 1 has no pair. */
static void gcstacks_trailer(void)
{
	const struct lp_lua_frame lua[] = { L(P_F, 14), L(P_MAIN, 5) };
	const uint64_t host[] = { A_CFUNC + 8, A_LUA_PCALL + 4, A_MAIN + 9 };
	lp_write_ext_prologue(&wb);
	ext_stack(7, lua, 2, host, 3);
	const uint8_t pairs[] = { 0, 7, 1, 7 };
	lp_write_ext_record(&wb, LP_EXT_GSAMPLE, pairs, sizeof(pairs));
	lp_write_ext_end(&wb);
}

/* A GC sample with a gsample pair is shown under the Lua code that ran the collector,
 * with a GC frame on top, named as of its own time; one without keeps its host stack. */
static void test_gc_stacks(void)
{
	for (int split = 0; split < 2; split++) {
		begin();
		uint64_t gchost[] = { A_MAIN + 9, A_CFUNC + 4 };
		struct lp_lua_frame lua[] = { L(P_MAIN, 5), L(P_F, 12) };
		uint64_t host[] = { A_MAIN + 9, A_LUA_PCALL + 4, A_VM_PCALL + 30 };
		sample(LP_VMST_GC, NULL, 0, gchost, 2);
		SAMPLE(LP_VMST_LFUNC, lua, host); /* not a GC sample: not counted */
		lp_write_sys_sym_lua(&wb, P_F, "@new.lua", 8, 13);
		sample(LP_VMST_GC, NULL, 0, gchost, 2);
		sample(LP_VMST_GC, NULL, 0, gchost, 2);
		trailer = gcstacks_trailer;
		if (!split)
			CHECK_STR(collapse(0, 0),
				  "main;lua_pcall;@app.lua:5;@app.lua:14;my_cfunc;GC 1\n"
				  "main;lua_pcall;@app.lua:5;@new.lua:14;my_cfunc;GC 1\n"
				  "main;lua_pcall;lj_vm_pcall;@app.lua:5;@app.lua:12 1\n"
				  "main;my_cfunc 1\n");
		else
			CHECK_STR(collapse(1, 0),
				  "GC;main;lua_pcall;@app.lua:5;@app.lua:14;my_cfunc 1\n"
				  "GC;main;lua_pcall;@app.lua:5;@new.lua:14;my_cfunc 1\n"
				  "GC;main;my_cfunc 1\n"
				  "LFUNC;main;lua_pcall;lj_vm_pcall;@app.lua:5;@app.lua:12 1\n");
	}
}

/* Two kinds of side stacks in one extension: stack 7 (line 14) and stack 8 (line 16),
 * both under main's line 5; samples 0 and 1 of kind `first` (a pair record type) under
 * stack 7, sample 0 of kind `second` under stack 8. */
static void two_kinds_trailer(uint8_t first, uint8_t second)
{
	const struct lp_lua_frame lua7[] = { L(P_F, 14), L(P_MAIN, 5) };
	const struct lp_lua_frame lua8[] = { L(P_F, 16), L(P_MAIN, 5) };
	const uint64_t host[] = { A_CFUNC + 8, A_LUA_PCALL + 4, A_MAIN + 9 };
	lp_write_ext_prologue(&wb);
	ext_stack(7, lua7, 2, host, 3);
	ext_stack(8, lua8, 2, host, 3);
	const uint8_t pairs7[] = { 0, 7, 1, 7 }, pairs8[] = { 0, 8 };
	lp_write_ext_record(&wb, first, pairs7, sizeof(pairs7));
	lp_write_ext_record(&wb, second, pairs8, sizeof(pairs8));
	lp_write_ext_end(&wb);
}

/* The JIT compiler's stacks (jsample records), beside the collector's: compiler samples
 * 0 and 2 (RECORD, OPT) compiled line 14 under stack 7, GC sample 0 ran the collector
 * under stack 8 (line 16); compiler sample 1 (ASM) has no pair. Each kind counts its own
 * samples. */
static void jitstacks_trailer(void)
{
	two_kinds_trailer(LP_EXT_JSAMPLE, LP_EXT_GSAMPLE);
}

/* A compiler sample with a jsample pair is shown under the Lua code being compiled, with
 * its state's frame on top; one without keeps its host stack. */
static void test_jit_compiler_stacks(void)
{
	for (int split = 0; split < 2; split++) {
		begin();
		uint64_t chost[] = { A_MAIN + 9, A_CFUNC + 4 };
		sample(LP_VMST_RECORD, NULL, 0, chost, 2);
		sample(LP_VMST_GC, NULL, 0, chost, 2);
		sample(LP_VMST_ASM, NULL, 0, chost, 2);
		sample(LP_VMST_OPT, NULL, 0, chost, 2);
		trailer = jitstacks_trailer;
		if (!split)
			CHECK_STR(collapse(0, 0),
				  "main;lua_pcall;@app.lua:5;@app.lua:14;my_cfunc;OPT 1\n"
				  "main;lua_pcall;@app.lua:5;@app.lua:14;my_cfunc;RECORD 1\n"
				  "main;lua_pcall;@app.lua:5;@app.lua:16;my_cfunc;GC 1\n"
				  "main;my_cfunc 1\n");
		else
			CHECK_STR(collapse(1, 0),
				  "ASM;main;my_cfunc 1\n"
				  "GC;main;lua_pcall;@app.lua:5;@app.lua:16;my_cfunc 1\n"
				  "OPT;main;lua_pcall;@app.lua:5;@app.lua:14;my_cfunc 1\n"
				  "RECORD;main;lua_pcall;@app.lua:5;@app.lua:14;my_cfunc 1\n");
	}
}

/* Trace exit stacks (xsample records) beside the compiler's: exit samples 0 and 2 return
 * to line 14 (stack 7), compiler sample 0 compiles line 16 (stack 8); exit sample 1 has no
 * pair. Each kind counts its own samples. */
static void exitstacks_trailer(void)
{
	two_kinds_trailer(LP_EXT_XSAMPLE, LP_EXT_JSAMPLE);
}

/* An EXIT sample with an xsample pair is shown under the Lua frames the exit returns to,
 * with an EXIT frame on top; one without keeps its host stack. */
static void test_trace_exit_stacks(void)
{
	for (int split = 0; split < 2; split++) {
		begin();
		uint64_t xhost[] = { A_MAIN + 9, A_CFUNC + 4 };
		sample(LP_VMST_EXIT, NULL, 0, xhost, 2);
		sample(LP_VMST_RECORD, NULL, 0, xhost, 2);
		sample(LP_VMST_EXIT, NULL, 0, xhost, 2);
		sample(LP_VMST_EXIT, NULL, 0, xhost, 2);
		trailer = exitstacks_trailer;
		if (!split)
			CHECK_STR(collapse(0, 0),
				  "main;lua_pcall;@app.lua:5;@app.lua:14;my_cfunc;EXIT 2\n"
				  "main;lua_pcall;@app.lua:5;@app.lua:16;my_cfunc;RECORD 1\n"
				  "main;my_cfunc 1\n");
		else
			CHECK_STR(collapse(1, 0),
				  "EXIT;main;lua_pcall;@app.lua:5;@app.lua:14;my_cfunc 2\n"
				  "EXIT;main;my_cfunc 1\n"
				  "RECORD;main;lua_pcall;@app.lua:5;@app.lua:16;my_cfunc 1\n");
	}
}

/* Trace 5's machine code, [0x7f0000, 0x7f0100), and, with tcode_overlap, trace 6's over
 * part of it (begin's symbol table names trace 3 already); with tcode_again, trace 5's
 * code compiled anew elsewhere, [0x7f0200, 0x7f0300) (after a flush). */
static int tcode_overlap, tcode_again;

static void tcode_rec(uint64_t traceno, uint64_t addr, uint64_t size)
{
	uint8_t rec[32];
	size_t n = lp_uleb_encode(traceno, rec);
	n += lp_uleb_encode(addr, rec + n);
	n += lp_uleb_encode(size, rec + n);
	lp_write_ext_record(&wb, LP_EXT_TCODE, rec, n);
}

static void tcode_trailer(void)
{
	lp_write_ext_prologue(&wb);
	tcode_rec(5, 0x7f0000, 0x100);
	if (tcode_overlap)
		tcode_rec(6, 0x7f00f8, 0x100);
	if (tcode_again)
		tcode_rec(5, 0x7f0200, 0x100);
	lp_write_ext_end(&wb);
}

/* Three samples in C code trace 5 called: two from inside its code, one from just past it.
 * redef: the trace's number then names another trace. again: trace 5 is then compiled
 * anew elsewhere from the same start (the symbol written again, the same), and a fourth
 * sample is in C code that code called. */
static const char *tcode_case(int redef, int overlap, int again)
{
	begin();
	lp_write_sys_sym_trace(&wb, 5, P_F, 13);
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), L(P_F, 13) };
	uint64_t h1[] = { A_MAIN + 9, A_LUA_PCALL + 4, 0x7f0010, A_CFUNC + 4 };
	uint64_t h2[] = { A_MAIN + 9, A_LUA_PCALL + 4, 0x7f00f0, A_CFUNC + 8 };
	uint64_t h3[] = { A_MAIN + 9, A_LUA_PCALL + 4, 0x7f0100, A_CFUNC + 8 };
	SAMPLE(LP_VMST_CFUNC, lua, h1);
	SAMPLE(LP_VMST_CFUNC, lua, h2);
	SAMPLE(LP_VMST_CFUNC, lua, h3);
	if (redef)
		lp_write_sys_sym_trace(&wb, 5, P_G, 21);
	if (again) {
		uint64_t h4[] = { A_MAIN + 9, A_LUA_PCALL + 4, 0x7f0210, A_CFUNC + 4 };
		lp_write_sys_sym_trace(&wb, 5, P_F, 13);
		SAMPLE(LP_VMST_CFUNC, lua, h4);
	}
	tcode_overlap = overlap;
	tcode_again = again;
	trailer = tcode_trailer;
	return collapse(0, 0);
}

/* C code a trace called: the trace's frame is named after the trace (tcode record), one
 * frame for all its call sites; an address outside every trace stays raw, and so does one
 * whose trace is not certain (its number reused for another start, its extent overlapping
 * another trace's). Its number's code in two places with one start (compiled again after
 * a flush) names it in both: every such frame was raw after any flush. */
static void test_trace_code_frame(void)
{
	CHECK_STR(tcode_case(0, 0, 0), "main;lua_pcall;@app.lua:5;@app.lua:13;0x7f0100;my_cfunc 1\n"
				       "main;lua_pcall;@app.lua:5;@app.lua:13;TRACE [5] @app.lua:13;"
				       "my_cfunc 2\n");
	static const char raw[] = "main;lua_pcall;@app.lua:5;@app.lua:13;0x7f0010;my_cfunc 1\n"
				  "main;lua_pcall;@app.lua:5;@app.lua:13;0x7f00f0;my_cfunc 1\n"
				  "main;lua_pcall;@app.lua:5;@app.lua:13;0x7f0100;my_cfunc 1\n";
	CHECK_STR(tcode_case(1, 0, 0), raw);
	CHECK_STR(tcode_case(0, 1, 0), raw);
	CHECK_STR(tcode_case(0, 0, 1), "main;lua_pcall;@app.lua:5;@app.lua:13;0x7f0100;my_cfunc 1\n"
				       "main;lua_pcall;@app.lua:5;@app.lua:13;TRACE [5] @app.lua:13;"
				       "my_cfunc 3\n");
}

/* kcode records: trace 5 of f (line 13) and, after a flush, trace 5 of g (line 21) at the
 * same code address, tags 1 and 2; tag 3's record names a prototype redefined in the
 * stream (h's address reused); tag 4 has none. */
static void kcode_rec(uint64_t traceno, uint64_t tag, uint64_t addr, uint64_t size,
		      uint64_t proto, uint64_t line)
{
	uint8_t rec[64];
	size_t n = lp_uleb_encode(traceno, rec);
	n += lp_uleb_encode(addr | tag << LP_HOST_KEY_SHIFT, rec + n);
	n += lp_uleb_encode(size, rec + n);
	n += lp_uleb_encode(proto, rec + n);
	n += lp_uleb_encode(line, rec + n);
	lp_write_ext_record(&wb, LP_EXT_KCODE, rec, n);
}

enum { P_H = 0xa300 };

static void kcode_trailer(void)
{
	lp_write_ext_prologue(&wb);
	kcode_rec(5, 1, 0x7f0000, 0x100, P_F, 13);
	kcode_rec(5, 2, 0x7f0000, 0x100, P_G, 21);
	kcode_rec(7, 3, 0x7f0000, 0x100, P_H, 31);
	/* Two records for one key (a crafted stream): neither is certain. */
	kcode_rec(8, 5, 0x7f0000, 0x100, P_F, 13);
	kcode_rec(8, 5, 0x7f0000, 0x100, P_G, 21);
	lp_write_ext_end(&wb);
}

/* C code a trace called, where a flush gave trace 5's number and code address to another
 * trace: each sample's trace frame is named after the trace that ran there when it was
 * taken (its frames keyed by the agent), the number's redefinition notwithstanding; its
 * prototype as that was named at the sample (h3: @h2.lua, written before it); a frame with
 * no record stays the raw address. Before, every such frame was raw after the first
 * flush. */
static void test_trace_code_keyed(void)
{
	begin();
	lp_write_sys_sym_lua(&wb, P_H, "@h.lua", 6, 30);
	lp_write_sys_sym_trace(&wb, 5, P_F, 13);
	struct lp_lua_frame in_f[] = { L(P_MAIN, 5), L(P_F, 13) };
	struct lp_lua_frame in_g[] = { L(P_MAIN, 6), L(P_G, 21) };
	uint64_t h1[] = { A_MAIN + 9, A_LUA_PCALL + 4, KEYED(1, 0x7f0010), A_CFUNC + 4 };
	uint64_t h2[] = { A_MAIN + 9, A_LUA_PCALL + 4, KEYED(2, 0x7f0010), A_CFUNC + 4 };
	uint64_t h3[] = { A_MAIN + 9, A_LUA_PCALL + 4, KEYED(3, 0x7f0020), A_CFUNC + 4 };
	uint64_t h4[] = { A_MAIN + 9, A_LUA_PCALL + 4, KEYED(4, 0x7f0030), A_CFUNC + 4 };
	SAMPLE(LP_VMST_CFUNC, in_f, h1);
	lp_write_sys_sym_trace(&wb, 5, P_G, 21);
	SAMPLE(LP_VMST_CFUNC, in_g, h2);
	SAMPLE(LP_VMST_CFUNC, in_g, h2);
	lp_write_sys_sym_lua(&wb, P_H, "@h2.lua", 7, 30);
	SAMPLE(LP_VMST_CFUNC, in_g, h3);
	SAMPLE(LP_VMST_CFUNC, in_g, h4);
	uint64_t h5[] = { A_MAIN + 9, A_LUA_PCALL + 4, KEYED(5, 0x7f0040), A_CFUNC + 4 };
	SAMPLE(LP_VMST_CFUNC, in_g, h5);
	trailer = kcode_trailer;
	CHECK_STR(collapse(0, 0),
		  "main;lua_pcall;@app.lua:5;@app.lua:13;TRACE [5] @app.lua:13;my_cfunc 1\n"
		  "main;lua_pcall;@app.lua:6;@app.lua:21;0x7f0030;my_cfunc 1\n"
		  "main;lua_pcall;@app.lua:6;@app.lua:21;0x7f0040;my_cfunc 1\n"
		  "main;lua_pcall;@app.lua:6;@app.lua:21;TRACE [5] @app.lua:21;my_cfunc 2\n"
		  "main;lua_pcall;@app.lua:6;@app.lua:21;TRACE [7] @h2.lua:31;my_cfunc 1\n");
}

static void kcode_reused_trailer(void)
{
	lp_write_ext_prologue(&wb);
	kcode_rec(7, 1, 0x7f0000, 0x100, P_H, 31);
	kcode_rec(7, 2, 0x7f1000, 0x100, P_H, 32);
	lp_write_ext_end(&wb);
}

/* Chunks loaded, run and collected in turn, the next at the freed addresses (its loop one
 * line lower): the prototype's address names another function after each, and each
 * chunk's trace calls C code. Each sample's trace frame is named by the prototype as the
 * symbols before it define it, as its Lua frames are. Before, both frames stayed raw
 * addresses (the prototype's symbol redefined somewhere in the stream): in a CPU profile
 * of such a program (scratch/w2.lua of a review), 139 of 182 samples. */
static void test_trace_code_keyed_proto_reused(void)
{
	begin();
	lp_write_sys_sym_lua(&wb, P_H, "@h.lua", 6, 30);
	struct lp_lua_frame in_h[] = { L(P_MAIN, 5), L(P_H, 31) };
	uint64_t h1[] = { A_MAIN + 9, A_LUA_PCALL + 4, KEYED(1, 0x7f0010), A_CFUNC + 4 };
	SAMPLE(LP_VMST_CFUNC, in_h, h1);
	lp_write_sys_sym_lua(&wb, P_H, "@h2.lua", 7, 31);
	struct lp_lua_frame in_h2[] = { L(P_MAIN, 5), L(P_H, 32) };
	uint64_t h2[] = { A_MAIN + 9, A_LUA_PCALL + 4, KEYED(2, 0x7f1010), A_CFUNC + 4 };
	SAMPLE(LP_VMST_CFUNC, in_h2, h2);
	trailer = kcode_reused_trailer;
	CHECK_STR(collapse(0, 0),
		  "main;lua_pcall;@app.lua:5;@h.lua:31;TRACE [7] @h.lua:31;my_cfunc 1\n"
		  "main;lua_pcall;@app.lua:5;@h2.lua:32;TRACE [7] @h2.lua:32;my_cfunc 1\n");
}

static void stale_tsamples_trailer(void)
{
	const struct lp_lua_frame first[] = { L(P_F, 14), L(P_MAIN, 5) };
	const struct lp_lua_frame second[] = { L(P_F, 22), L(P_MAIN, 5) };
	const uint64_t host[] = { 0x7f0000, A_LUA_PCALL + 4, A_MAIN + 9 };
	lp_write_ext_prologue(&wb);
	ext_stack(0, first, 2, host, 3);
	ext_stack(1, second, 2, host, 3);
	const uint8_t pairs[] = { 0, 0, 0, 1 };
	lp_write_ext_record(&wb, LP_EXT_TSAMPLE, pairs, sizeof(pairs));
	lp_write_ext_end(&wb);
}

/* The trace's prototype address named another function after the trace's symbol was
 * written, the trace's not written again (a writer whose fingerprint of the trace missed
 * it): the symbol may be the old function's, so the sample's own line names the frame.
 * The start's line was shown with the new function's name (agent_api.sh's reused chunks:
 * chunk10:3 for a loop on line 11). */
static void test_trace_frame_stale_start(void)
{
	begin();
	lp_write_sys_sym_trace(&wb, 5, P_F, 13);
	struct lp_sys_sample t = { .vmstate = LP_VMST_TRACE, .traceno = 5, .trace_addr = P_F,
				   .trace_line = 14 };
	lp_write_sys_sample(&wb, &t);
	lp_write_sys_sym_lua(&wb, P_F, "@new.lua", 8, 20);
	t.trace_line = 22;
	lp_write_sys_sample(&wb, &t);
	trailer = stale_tsamples_trailer;
	CHECK_STR(collapse(0, 0),
		  "main;lua_pcall;@app.lua:5;@app.lua:14;TRACE [5] @app.lua:13 1\n"
		  "main;lua_pcall;@app.lua:5;@new.lua:22;TRACE [5] @new.lua:22 1\n");
}

static void flush_tsamples_trailer(void)
{
	const struct lp_lua_frame in_f[] = { L(P_F, 14), L(P_MAIN, 5) };
	const struct lp_lua_frame in_g[] = { L(P_G, 22), L(P_MAIN, 6) };
	const uint64_t host[] = { 0x7f0000, A_LUA_PCALL + 4, A_MAIN + 9 };
	lp_write_ext_prologue(&wb);
	ext_stack(0, in_f, 2, host, 3);
	ext_stack(1, in_g, 2, host, 3);
	const uint8_t pairs[] = { 0, 0, 0, 1, 0, 0 };
	lp_write_ext_record(&wb, LP_EXT_TSAMPLE, pairs, sizeof(pairs));
	lp_write_ext_end(&wb);
}

/* A TRACE sample's own frame is named where its trace starts as the symbols before it
 * define the trace: after a flush gave its number to another trace as well. Before, only
 * until the first redefinition (then at the sample's location). */
static void test_trace_frame_after_flush(void)
{
	begin();
	lp_write_sys_sym_trace(&wb, 5, P_F, 13);
	struct lp_sys_sample t = { .vmstate = LP_VMST_TRACE, .traceno = 5, .trace_addr = P_F,
				   .trace_line = 14 };
	lp_write_sys_sample(&wb, &t);
	lp_write_sys_sym_trace(&wb, 5, P_G, 21);
	t.trace_addr = P_G;
	t.trace_line = 22;
	lp_write_sys_sample(&wb, &t);
	lp_write_sys_sym_trace(&wb, 5, P_F, 13);
	t.trace_addr = P_F;
	t.trace_line = 14;
	lp_write_sys_sample(&wb, &t);
	trailer = flush_tsamples_trailer;
	CHECK_STR(collapse(0, 0),
		  "main;lua_pcall;@app.lua:5;@app.lua:14;TRACE [5] @app.lua:13 2\n"
		  "main;lua_pcall;@app.lua:6;@app.lua:22;TRACE [5] @app.lua:21 1\n");
}

/* 64 extents of traces 10..73 over one range (the sweep's limit of open extents), then
 * traces 74 and 75 inside it: 75's code overlaps only extents the sweep gave up on, and
 * is as ambiguous as they are (it was named after trace 75). */
static void many_tcodes_trailer(void)
{
	lp_write_ext_prologue(&wb);
	for (uint64_t n = 10; n < 74; n++)
		tcode_rec(n, 0x700000, 0x10000);
	tcode_rec(74, 0x708000, 0x100);
	tcode_rec(75, 0x709000, 0x100);
	lp_write_ext_end(&wb);
}

static void test_trace_code_many_overlaps(void)
{
	begin();
	lp_write_sys_sym_trace(&wb, 75, P_F, 13);
	struct lp_lua_frame lua[] = { L(P_MAIN, 5), L(P_F, 13) };
	uint64_t h[] = { A_MAIN + 9, A_LUA_PCALL + 4, 0x709010, A_CFUNC + 4 };
	SAMPLE(LP_VMST_CFUNC, lua, h);
	trailer = many_tcodes_trailer;
	CHECK_STR(collapse(0, 0), "main;lua_pcall;@app.lua:5;@app.lua:13;0x709010;my_cfunc 1\n");
}

/* A trace's code as the only frame to anchor a segment at (a coroutine resumed by
 * lua_resume, which enters the VM by a tail call: nginx's handlers): the trace's frame
 * after the segment's Lua frames, as under lua_pcall (it came before them all). */
static void resumed_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_csize(&wb, 0x40000, 0x100);
	tcode_rec(5, 0x60000, 0x100);
	lp_write_ext_end(&wb);
}

static void test_trace_anchor_resumed(void)
{
	begin_with(host_thread_syms, NSYMS(host_thread_syms));
	lp_write_sys_sym_trace(&wb, 5, P_F, 12);
	struct lp_lua_frame lua[] = { L(P_MAIN, 18), L(P_F, 12) };
	uint64_t host[] = { A_MAIN + 9, A_CFUNC + 4, 0x60010, 0x3810 };
	SAMPLE(LP_VMST_CFUNC, lua, host);
	trailer = resumed_trailer;
	CHECK_STR(collapse(0, 0),
		  "main;run_thread;@app.lua:18;@app.lua:12;TRACE [5] @app.lua:12;lj_vm_ffi_call 1\n");
}

/*
** C code that a coroutine resumed by coroutine.wrap calls (a sample whose leaf is neither
** the interpreter nor a trace), on a stripped VM: math.sin's libm code, called by the
** builtin in the interpreter's block or by the coroutine's trace; a lua_CFunction. Under
** the calling VM code the stack is the one the interpreter's or the trace's own samples
** have: the outer segment at lua_pcall, the resume's frame after wrap_aux, then the
** calling code and the C function. The resume's frame went after the coroutine's Lua
** frames: two towers for one path (1831 of 2150 samples of a wrap loop calling math.sin).
** Outside a coroutine the same shapes keep their order.
*/
static const struct csym with_sin[] = {
	{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { 0x3000, "lj_vm_asm_begin" },
	{ 0x3800, "lj_vm_ffi_call" }, { A_CFUNC, "my_cfunc" }, { 0x9000, "sin" },
	{ 0xb000, "sort_impl" }, { 0x20000, "__libc_start_main" },
};

static void wrap_names_trailer(void)
{
	lp_write_ext_prologue(&wb);
	lp_write_ext_meta(&wb, "ffnames",
			  "lua - pcall coroutine.wrap_aux math.sin table.sort coroutine.resume");
	tcode_rec(3, 0x7f0000, 0x100);
	lp_write_ext_end(&wb);
}

static const char *wrap_case(uint8_t vmstate, const struct lp_lua_frame *lua, size_t nl,
			     const uint64_t *host, size_t nh)
{
	begin_with(with_sin, NSYMS(with_sin));
	sample(vmstate, lua, nl, host, nh);
	trailer = wrap_names_trailer;
	return collapse(0, 0);
}

#define WRAP_CASE(vm, lua, host) \
	wrap_case(vm, lua, NSYMS(lua), host, NSYMS(host))

static void test_c_in_coroutine(void)
{
	static const char pre[] = "__libc_start_main;main;lua_pcall;@app.lua:5;";
	char want[512];
	const struct lp_lua_frame by_builtin[] = { L(P_MAIN, 5), FF(3), L(P_F, 14), FF(4) };
	const uint64_t h_builtin[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180,
				       0x9010 };
	snprintf(want, sizeof(want), "%scoroutine.wrap_aux;lj_vm_asm_begin;@app.lua:14;"
		 "math.sin;lj_vm_asm_begin;sin 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_FFUNC, by_builtin, h_builtin), want);

	const struct lp_lua_frame by_trace[] = { L(P_MAIN, 5), FF(3), L(P_F, 14) };
	const uint64_t h_trace[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x7f0010,
				     0x9010 };
	snprintf(want, sizeof(want), "%scoroutine.wrap_aux;lj_vm_asm_begin;@app.lua:14;"
		 "TRACE [3] @app.lua:14;sin 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_CFUNC, by_trace, h_trace), want);

	const struct lp_lua_frame by_cfunc[] = { L(P_MAIN, 5), FF(3), L(P_F, 14), C(A_CFUNC) };
	const uint64_t h_cfunc[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180,
				     A_CFUNC + 4 };
	snprintf(want, sizeof(want), "%scoroutine.wrap_aux;lj_vm_asm_begin;@app.lua:14;"
		 "lj_vm_asm_begin;my_cfunc 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_CFUNC, by_cfunc, h_cfunc), want);

	/* Outside a coroutine. */
	const struct lp_lua_frame flat_builtin[] = { L(P_MAIN, 5), L(P_F, 14), FF(4) };
	const uint64_t hf_builtin[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3180, 0x9010 };
	snprintf(want, sizeof(want), "%s@app.lua:14;math.sin;lj_vm_asm_begin;sin 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_FFUNC, flat_builtin, hf_builtin), want);
	const struct lp_lua_frame flat_trace[] = { L(P_MAIN, 5), L(P_F, 14) };
	const uint64_t hf_trace[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x7f0010, 0x9010 };
	snprintf(want, sizeof(want), "%s@app.lua:14;TRACE [3] @app.lua:14;sin 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_CFUNC, flat_trace, hf_trace), want);
	const struct lp_lua_frame flat_cfunc[] = { L(P_MAIN, 5), L(P_F, 14), C(A_CFUNC) };
	const uint64_t hf_cfunc[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3180,
				      A_CFUNC + 4 };
	snprintf(want, sizeof(want), "%s@app.lua:14;lj_vm_asm_begin;my_cfunc 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_CFUNC, flat_cfunc, hf_cfunc), want);
}

/*
** A coroutine resumed by coroutine.resume that calls through pcall (an assembler builtin:
** no C frame): of the two builtins, the resume is the segment boundary that the resume's
** C frame anchors; pcall was taken instead (the innermost), and the resume's frame went
** after pcall, two towers with the coroutine's samples outside pcall (46 % of such a
** loop's samples). The same with the C code the coroutine calls there.
*/
static void test_pcall_in_coroutine(void)
{
	static const char pre[] = "__libc_start_main;main;lua_pcall;@app.lua:5;"
				  "coroutine.resume;lj_vm_asm_begin;@app.lua:14;";
	char want[512];
	const struct lp_lua_frame interp[] = { L(P_MAIN, 5), FF(6), L(P_F, 14), FF(2),
					       L(P_G, 22) };
	const uint64_t h_interp[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180 };
	snprintf(want, sizeof(want), "%spcall;@app.lua:22 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, interp, h_interp), want);
	const struct lp_lua_frame c_leaf[] = { L(P_MAIN, 5), FF(6), L(P_F, 14), FF(2),
					       L(P_G, 22), FF(4) };
	const uint64_t h_c_leaf[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180,
				      0x9010 };
	snprintf(want, sizeof(want), "%spcall;@app.lua:22;math.sin;lj_vm_asm_begin;sin 1\n",
		 pre);
	CHECK_STR(WRAP_CASE(LP_VMST_FFUNC, c_leaf, h_c_leaf), want);
	/* Outside pcall, as before. */
	const struct lp_lua_frame plain[] = { L(P_MAIN, 5), FF(6), L(P_F, 14), L(P_G, 22) };
	snprintf(want, sizeof(want), "%s@app.lua:22 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, plain, h_interp), want);
}

/*
** table.sort with a Lua comparator inside a coroutine that coroutine.wrap resumed: the
** resume's C frame (VM code) anchors the coroutine's segment, up to table.sort; the
** comparator's is after table.sort's C code. The coroutine's frames went after the C
** code, into the comparator's segment (75-79 % of such a loop's samples).
*/
static void test_sort_in_coroutine(void)
{
	static const char pre[] = "__libc_start_main;main;lua_pcall;@app.lua:5;"
				  "coroutine.wrap_aux;lj_vm_asm_begin;@app.lua:14;table.sort;"
				  "lj_vm_asm_begin;sort_impl;@app.lua:22";
	char want[512];
	const struct lp_lua_frame interp[] = { L(P_MAIN, 5), FF(3), L(P_F, 14), FF(5),
					       L(P_G, 22) };
	const uint64_t h_interp[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180,
				      0xb010, 0x3190 };
	snprintf(want, sizeof(want), "%s 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, interp, h_interp), want);
	const struct lp_lua_frame c_leaf[] = { L(P_MAIN, 5), FF(3), L(P_F, 14), FF(5),
					       L(P_G, 22), FF(4) };
	const uint64_t h_c_leaf[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180,
				      0xb010, 0x3190, 0x9010 };
	snprintf(want, sizeof(want), "%s;math.sin;lj_vm_asm_begin;sin 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_FFUNC, c_leaf, h_c_leaf), want);
	/* The coroutine in table.sort's own C code. */
	const struct lp_lua_frame in_sort[] = { L(P_MAIN, 5), FF(3), L(P_F, 14), FF(5) };
	const uint64_t h_in_sort[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180,
				       0xb010 };
	CHECK_STR(WRAP_CASE(LP_VMST_FFUNC, in_sort, h_in_sort),
		  "__libc_start_main;main;lua_pcall;@app.lua:5;coroutine.wrap_aux;"
		  "lj_vm_asm_begin;@app.lua:14;table.sort;lj_vm_asm_begin;sort_impl 1\n");
}

/*
** Regressions an exploratory test found in the readings above. A C scheduler run by a
** wrapped coroutine: its coroutine's sample in a helper of the interpreter's block (the
** helper, then the coroutine's interpreter, then the C scheduler) took the interpreter's
** frame for a resume (wrap_aux is in the Lua stack, but outside the C function that
** resumed the leaf's coroutine), and the main chunk's segment went one anchor in (19 %
** of such a loop's samples). coroutine.wrap inside table.sort's comparator: the resume's
** frame, which is also the comparator's entry from the sort's C code, went before the
** comparator's frames, where its own samples have none (26 %).
*/
static void test_nested_resume_readings(void)
{
	static const char pre[] = "__libc_start_main;main;lua_pcall;@app.lua:5;";
	char want[512];
	const struct lp_lua_frame sched[] = { L(P_MAIN, 5), FF(3), L(P_F, 14), C(A_CFUNC),
					      L(P_G, 22) };
	const uint64_t h_helper[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180,
				      A_CFUNC + 4, 0x3190, 0x31a0 };
	const uint64_t h_interp[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180,
				      A_CFUNC + 4, 0x3190 };
	snprintf(want, sizeof(want), "%scoroutine.wrap_aux;lj_vm_asm_begin;@app.lua:14;"
		 "lj_vm_asm_begin;my_cfunc;@app.lua:22 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, sched, h_helper), want);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, sched, h_interp), want);

	const struct lp_lua_frame in_cmp[] = { L(P_MAIN, 5), FF(5), L(P_F, 14), FF(3),
					       L(P_G, 22) };
	const uint64_t h_in_cmp[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0xb010,
				      0x3180, 0x3190 };
	snprintf(want, sizeof(want), "%stable.sort;lj_vm_asm_begin;sort_impl;@app.lua:14;"
		 "coroutine.wrap_aux;lj_vm_asm_begin;@app.lua:22 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, in_cmp, h_in_cmp), want);
	/* A comparator inside a wrapped coroutine, sampled in a helper its interpreter
	 * called: the resume is outside table.sort's C code, the helper's interpreter no
	 * resume (review: it anchored, and the coroutine's frames went after the C code). */
	const struct lp_lua_frame cmp_in_co[] = { L(P_MAIN, 5), FF(3), L(P_F, 14), FF(5),
						  L(P_G, 22) };
	const uint64_t h_cmp_in_co[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0x3180,
					 0xb010, 0x3190, 0x31a0 };
	snprintf(want, sizeof(want), "%scoroutine.wrap_aux;lj_vm_asm_begin;@app.lua:14;"
		 "table.sort;lj_vm_asm_begin;sort_impl;@app.lua:22 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, cmp_in_co, h_cmp_in_co), want);
	/* The comparator outside a coroutine: test_c_in_callback's sorted_lua. */
}

/*
** Lua called back by C with no frame of the VM's own above the C code (lua_call and
** lua_resume enter the VM by a tail call; a C builtin such as table.sort calls it
** directly), on a stripped VM: the callback's interpreter returns into the C code. A
** sample in C code that the callback's interpreter called has that interpreter's frame
** after the callback's Lua frames, as the main chunk's calls into C have it, and as the
** callback's own samples (whose leaf that frame is) leave it out: it went before the
** callback's Lua frames, two towers for one path (table.sort's comparator calling
** math.sin; a C scheduler's coroutine).
*/
static void test_c_in_callback(void)
{
	static const char pre[] = "__libc_start_main;main;lua_pcall;@app.lua:5;";
	char want[512];
	const struct lp_lua_frame sorted[] = { L(P_MAIN, 5), FF(5), L(P_F, 14), FF(4) };
	const uint64_t h_sorted[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0xb010,
				      0x3180, 0x9010 };
	snprintf(want, sizeof(want), "%stable.sort;lj_vm_asm_begin;sort_impl;@app.lua:14;"
		 "math.sin;lj_vm_asm_begin;sin 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_FFUNC, sorted, h_sorted), want);
	const struct lp_lua_frame sorted_lua[] = { L(P_MAIN, 5), FF(5), L(P_F, 14) };
	const uint64_t h_sorted_lua[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, 0xb010,
					  0x3180 };
	snprintf(want, sizeof(want), "%stable.sort;lj_vm_asm_begin;sort_impl;@app.lua:14 1\n",
		 pre);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, sorted_lua, h_sorted_lua), want);

	const struct lp_lua_frame sched[] = { L(P_MAIN, 5), C(A_CFUNC), L(P_F, 14), FF(4) };
	const uint64_t h_sched[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100, A_CFUNC + 4,
				     0x3180, 0x9010 };
	snprintf(want, sizeof(want), "%slj_vm_asm_begin;my_cfunc;@app.lua:14;math.sin;"
		 "lj_vm_asm_begin;sin 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_FFUNC, sched, h_sched), want);
	const struct lp_lua_frame sched_lua[] = { L(P_MAIN, 5), C(A_CFUNC), L(P_F, 14) };
	const uint64_t h_sched_lua[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100,
					 A_CFUNC + 4, 0x3180 };
	snprintf(want, sizeof(want), "%slj_vm_asm_begin;my_cfunc;@app.lua:14 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, sched_lua, h_sched_lua), want);

	/* The scheduler's coroutine calling table.sort: its interpreter's call into the C
	 * code is after its Lua frames too, not only the innermost such call. */
	const struct lp_lua_frame sched_sort[] = { L(P_MAIN, 5), C(A_CFUNC), L(P_F, 14), FF(5),
						   L(P_G, 22) };
	const uint64_t h_sched_sort[] = { 0x20008, A_MAIN + 9, A_LUA_PCALL + 4, 0x3100,
					  A_CFUNC + 4, 0x3180, 0xb010, 0x3190 };
	snprintf(want, sizeof(want), "%slj_vm_asm_begin;my_cfunc;@app.lua:14;table.sort;"
		 "lj_vm_asm_begin;sort_impl;@app.lua:22 1\n", pre);
	CHECK_STR(WRAP_CASE(LP_VMST_LFUNC, sched_sort, h_sched_sort), want);
}

/* -- Memory samples (memprof sampled mode) ----------------------------------------- */

/*
** Ends a memory stream's extension, loads it and returns its collapsed rendering of
** column (static buffer); *samples and *dropped get the profile's counts.
*/
static const char *memory_text(unsigned column, uint64_t *samples, uint64_t *dropped)
{
	static char text[4096];
	lp_write_ext_end(&wb);
	lp_wbuf_flush(&wb);
	struct lp_input in;
	lp_input_open_mem(&in, stream.data, stream.len, "test");
	struct lp_loaded l;
	CHECK_EQ(lp_load(&in, NULL, &l), LP_OK);
	CHECK(l.sampled);
	struct lp_profile *p = lp_loaded_profile(&l, "test");
	*samples = lp_profile_cmeta(p)->samples;
	*dropped = lp_profile_cmeta(p)->dropped;
	FILE *f = fmemopen(text, sizeof(text), "w");
	struct lp_render_opts ro = { .value = column };
	char err[256];
	CHECK_EQ(lp_render_collapsed(p, &ro, f, err, sizeof(err)), 0);
	fclose(f);
	lp_profile_free(p);
	lp_loaded_free(&l);
	lp_input_close(&in);
	return text;
}

/* A memprof stream with these C functions, ready for its symbol events. */
static void memory_begin(const struct csym *syms, size_t n)
{
	symtab_start(syms, n);
	lp_write_symtab_final(&wb);
	lp_write_memprof_prologue(&wb);
}

/* Ends the memprof part (symbols only, no event) and opens the extension. */
static void memory_extension(void)
{
	lp_write_memprof_epilogue(&wb);
	lp_write_ext_prologue(&wb);
}

/* freed: 0 writes stack 0's freed sample in the asample record; n > 0 writes it as an
 * afreed record's n samples freed, as the agent counts them. */
static const char *collapse_memory_freed(unsigned column, const char *sample_bytes,
					 unsigned freed)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { A_BC, "lj_vm_asm_begin" },
		{ A_CFUNC, "my_cfunc" },
	};
	memory_begin(syms, NSYMS(syms));
	lp_write_mem_sym_lua(&wb, P_MAIN, "@app.lua", 8, 0);
	lp_write_mem_sym_lua(&wb, P_F, "@app.lua", 8, 10);
	memory_extension();
	/* Stack 0: Lua code allocating (the interpreter frame is the leaf); stack 1: a C
	 * function the Lua code called. */
	const struct lp_lua_frame lua0[] = { L(P_F, 12), L(P_MAIN, 5) };
	const uint64_t host0[] = { A_BC + 8, A_LUA_PCALL + 4, A_MAIN + 9 };
	const struct lp_lua_frame lua1[] = { C(A_CFUNC), L(P_MAIN, 6) };
	const uint64_t host1[] = { A_CFUNC + 4, A_BC + 8, A_LUA_PCALL + 4, A_MAIN + 9 };
	ext_stack(0, lua0, 2, host0, 3);
	ext_stack(1, lua1, 2, host1, 4);
	/* Stack 0: 100 B live, 100 B freed; stack 1: 1000 B live; id 9 has no stack. */
	const uint8_t recs[] = { 0, 100, 1, 0, 100, 0, 1, 0xe8, 0x07, 1, 9, 5, 1 };
	const uint8_t live[] = { 0, 100, 1, 1, 0xe8, 0x07, 1, 9, 5, 1 };
	if (!freed) {
		lp_write_ext_record(&wb, LP_EXT_ASAMPLE, recs, sizeof(recs));
	} else {
		/* Split over two records, and the same key twice: counts add up. */
		const uint8_t fr[] = { 0, 100, (uint8_t)(freed - 1) };
		const uint8_t fr1[] = { 0, 100, 1 };
		lp_write_ext_record(&wb, LP_EXT_AFREED, fr1, sizeof(fr1));
		lp_write_ext_record(&wb, LP_EXT_ASAMPLE, live, sizeof(live));
		if (freed > 1)
			lp_write_ext_record(&wb, LP_EXT_AFREED, fr, sizeof(fr));
	}
	if (sample_bytes)
		lp_write_ext_meta(&wb, "sample_bytes", sample_bytes);
	uint64_t samples, dropped;
	const char *text = memory_text(column, &samples, &dropped);
	CHECK_EQ(samples, 3 + (freed ? freed : 1));
	CHECK_EQ(dropped, 1);
	return text;
}

static const char *collapse_memory(unsigned column, const char *sample_bytes)
{
	return collapse_memory_freed(column, sample_bytes, 0);
}

/*
** A memory sample whose innermost host frame is the interpreter (a stripped VM, whose
** lua_pcall enters it): that leaf stands for the innermost segment's entry, and the
** lua_pcall right outside it is the same entry, not a second anchor. Counted twice, a
** nested stack (neovim: a libuv callback run by lua_pcall under vim.wait, a C function
** of the outer chunk) lost a segment: the outer chunk's line went under the inner
** lua_pcall. With copy, the allocation is made in VM code run below the entry's C frame,
** which the agent's step leaves twice in the host stack: the lua_pcall right after the
** copy is still the same entry.
*/
static void test_memory_nested(void)
{
	for (int copy = 0; copy <= 1; copy++) {
		static const struct csym syms[] = {
			{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" },
			{ A_BC, "lj_vm_asm_begin" }, { A_CFUNC, "my_wait" }, { A_PMAIN, "uv_run" },
		};
		memory_begin(syms, NSYMS(syms));
		lp_write_mem_sym_lua(&wb, P_MAIN, "@app.lua", 8, 0);
		lp_write_mem_sym_lua(&wb, P_G, "@cb.lua", 7, 10);
		memory_extension();
		const struct lp_lua_frame lua[] = { L(P_G, 16), C(A_CFUNC), L(P_MAIN, 17) };
		const uint64_t host[] = { A_BC + 8, A_BC + 8, A_LUA_PCALL + 4, A_PMAIN + 4,
					  A_CFUNC + 4, A_BC + 8, A_LUA_PCALL + 4, A_MAIN + 9 };
		ext_stack(0, lua, 3, host + !copy, 8 - !copy);
		const uint8_t recs[] = { 0, 100, 1 };
		lp_write_ext_record(&wb, LP_EXT_ASAMPLE, recs, sizeof(recs));
		uint64_t samples, dropped;
		CHECK_STR(memory_text(0, &samples, &dropped),
			  "main;lua_pcall;@app.lua:17;lj_vm_asm_begin;my_wait;uv_run;lua_pcall;"
			  "@cb.lua:16 100\n");
		CHECK_EQ(samples, 1);
	}
}

/*
** A memory sample made by a trace's own code (its innermost host frame lies in the trace's
** machine code): shown under the trace's frame, as a CPU sample in the trace is, when a
** tcode record gives the extent. Without one, or when the trace's number was reused in
** the stream, the frame is left out rather than shown as a raw address or the wrong trace.
*/
static const char *memory_trace_case(int tcode, int redef)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { A_BC, "lj_vm_asm_begin" },
	};
	memory_begin(syms, NSYMS(syms));
	lp_write_mem_sym_lua(&wb, P_MAIN, "@app.lua", 8, 0);
	lp_write_mem_sym_lua(&wb, P_F, "@app.lua", 8, 10);
	lp_write_mem_sym_trace(&wb, 5, P_F, 13);
	if (redef)
		lp_write_mem_sym_trace(&wb, 5, P_MAIN, 3);
	memory_extension();
	const struct lp_lua_frame lua[] = { L(P_F, 14), L(P_MAIN, 5) };
	const uint64_t host[] = { 0x7f0010, A_LUA_PCALL + 4, A_MAIN + 9 };
	ext_stack(0, lua, 2, host, 3);
	if (tcode)
		tcode_rec(5, 0x7f0000, 0x100);
	const uint8_t recs[] = { 0, 100, 1 };
	lp_write_ext_record(&wb, LP_EXT_ASAMPLE, recs, sizeof(recs));
	uint64_t samples, dropped;
	return memory_text(0, &samples, &dropped);
}

static void test_memory_trace(void)
{
	CHECK_STR(memory_trace_case(1, 0),
		  "main;lua_pcall;@app.lua:5;@app.lua:14;TRACE [5] @app.lua:13 100\n");
	CHECK_STR(memory_trace_case(0, 0), "main;lua_pcall;@app.lua:5;@app.lua:14 100\n");
	CHECK_STR(memory_trace_case(1, 1), "main;lua_pcall;@app.lua:5;@app.lua:14 100\n");
}

/*
** The collector's allocations (a string table resized, a buffer shrunk in a step that an
** allocation of a C function ran): the agent keeps the collector's C frames and names the
** stack's state in an astate record; the report shows the state on top, as a CPU sample's
** GC frame. Without the record (an older agent) the stack reads as before.
*/
static const char *memory_gc_case(int astate)
{
	static const struct csym syms[] = {
		{ A_MAIN, "main" }, { A_LUA_PCALL, "lua_pcall" }, { A_BC, "lj_vm_asm_begin" },
		{ A_CFUNC, "my_cfunc" }, { A_SORT, "gc_step" }, { A_LAST, "lj_str_resize" },
	};
	memory_begin(syms, NSYMS(syms));
	lp_write_mem_sym_lua(&wb, P_MAIN, "@app.lua", 8, 0);
	memory_extension();
	const struct lp_lua_frame lua[] = { C(A_CFUNC), L(P_MAIN, 5) };
	const uint64_t host[] = { A_LAST + 4, A_SORT + 4, A_CFUNC + 4, A_BC + 8, A_LUA_PCALL + 4,
				  A_MAIN + 9 };
	ext_stack(0, lua, 2, host, 6);
	const uint8_t recs[] = { 0, 100, 1 };
	lp_write_ext_record(&wb, LP_EXT_ASAMPLE, recs, sizeof(recs));
	if (astate) {
		const uint8_t st[] = { 0, LP_VMST_GC };
		lp_write_ext_record(&wb, LP_EXT_ASTATE, st, sizeof(st));
	}
	uint64_t samples, dropped;
	return memory_text(0, &samples, &dropped);
}

static void test_memory_gc(void)
{
	CHECK_STR(memory_gc_case(1), "main;lua_pcall;@app.lua:5;lj_vm_asm_begin;my_cfunc;gc_step;"
				     "lj_str_resize;GC 100\n");
	CHECK_STR(memory_gc_case(0), "main;lua_pcall;@app.lua:5;lj_vm_asm_begin;my_cfunc;gc_step;"
				     "lj_str_resize 100\n");
}

static void test_memory_samples(void)
{
	/* Unweighted (no sample_bytes): one allocation per sample. Columns: alloc_space,
	 * alloc_objects, inuse_space, inuse_objects. */
	CHECK_STR(collapse_memory(0, NULL), "main;lua_pcall;@app.lua:5;@app.lua:12 200\n"
					    "main;lua_pcall;@app.lua:6;lj_vm_asm_begin;my_cfunc 1000\n");
	CHECK_STR(collapse_memory(1, NULL), "main;lua_pcall;@app.lua:5;@app.lua:12 2\n"
					    "main;lua_pcall;@app.lua:6;lj_vm_asm_begin;my_cfunc 1\n");
	CHECK_STR(collapse_memory(2, NULL), "main;lua_pcall;@app.lua:5;@app.lua:12 100\n"
					    "main;lua_pcall;@app.lua:6;lj_vm_asm_begin;my_cfunc 1000\n");
	/* Weighted: 1 / (1 - exp(-100/1000)) = 10.508 per 100-byte sample, 1.582 for 1000,
	 * summed by stack, then rounded down after adding the stack's dither (stack 0:
	 * 0.612, stack 1: 0.147): stack 1's 1.582 objects count as 1 (2 for a stack whose
	 * dither is 0.418 or more), 2 x 1050.8 bytes of stack 0 as 2102. */
	CHECK_STR(collapse_memory(0, "1000"), "main;lua_pcall;@app.lua:5;@app.lua:12 2102\n"
					      "main;lua_pcall;@app.lua:6;lj_vm_asm_begin;my_cfunc 1582\n");
	CHECK_STR(collapse_memory(3, "1000"), "main;lua_pcall;@app.lua:5;@app.lua:12 11\n"
					      "main;lua_pcall;@app.lua:6;lj_vm_asm_begin;my_cfunc 1\n");
	/* Freed samples counted by stack and size (afreed): the same profile as one asample
	 * entry each; counts in the allocated columns only. */
	CHECK_STR(collapse_memory_freed(0, NULL, 1), collapse_memory(0, NULL));
	CHECK_STR(collapse_memory_freed(0, NULL, 4), "main;lua_pcall;@app.lua:5;@app.lua:12 500\n"
						     "main;lua_pcall;@app.lua:6;lj_vm_asm_begin;my_cfunc 1000\n");
	CHECK_STR(collapse_memory_freed(1, NULL, 4), "main;lua_pcall;@app.lua:5;@app.lua:12 5\n"
						     "main;lua_pcall;@app.lua:6;lj_vm_asm_begin;my_cfunc 1\n");
	CHECK_STR(collapse_memory_freed(2, NULL, 4), collapse_memory(2, NULL));
	CHECK_STR(collapse_memory_freed(3, "1000", 4), collapse_memory(3, "1000"));
	/* 5 x 10.508 x 100 */
	CHECK_STR(collapse_memory_freed(0, "1000", 4), "main;lua_pcall;@app.lua:5;@app.lua:12 5254\n"
						       "main;lua_pcall;@app.lua:6;lj_vm_asm_begin;my_cfunc 1582\n");
}

static int parse_status(const uint8_t *tail, size_t n, char *msg, size_t msglen)
{
	begin();
	lp_write_sysprof_epilogue(&wb);
	lp_wbuf_bytes(&wb, tail, n);
	lp_wbuf_flush(&wb);
	struct lp_input in;
	lp_input_open_mem(&in, stream.data, stream.len, "x");
	struct lp_loaded l;
	int rc = lp_load(&in, NULL, &l);
	lp_input_message(&in, msg, msglen);
	lp_loaded_free(&l);
	lp_input_close(&in);
	return rc;
}

static void test_extension_errors(void)
{
	char msg[512];
	static const uint8_t v2[] = { 'l', 'p', 'x', 2, 0, 0, 0, 0 };
	CHECK_EQ(parse_status(v2, sizeof(v2), msg, sizeof(msg)), LP_ERR_VERSION);
	CHECK(strstr(msg, "extension version mismatch: luaprof expects 1, the file has 2") != NULL);
	/* A mapping record whose length disagrees with its fields. */
	static const uint8_t badlen[] = { 'l', 'p', 'x', 1, 0, 0, 0, 1, 9, 1, 2, 0, 0, 0, 0 };
	CHECK_EQ(parse_status(badlen, sizeof(badlen), msg, sizeof(msg)), LP_ERR_FORMAT);
	static const uint8_t huge[] = { 'l', 'p', 'x', 1, 0, 0, 0, 5, 0xff, 0xff, 0xff, 0xff, 0x0f };
	CHECK_EQ(parse_status(huge, sizeof(huge), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "exceeds") != NULL);
	static const uint8_t cut[] = { 'l', 'p', 'x', 1, 0, 0, 0, 2 };
	CHECK_EQ(parse_status(cut, sizeof(cut), msg, sizeof(msg)), LP_ERR_TRUNCATED);
	static const uint8_t junk[] = { 'l', 'q' };
	CHECK_EQ(parse_status(junk, sizeof(junk), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "unexpected data after the epilogue") != NULL);
	/* A trace code record of size 0 (trace 1 at 0x40). */
	static const uint8_t tcode0[] = { 'l', 'p', 'x', 1, 0, 0, 0, 8, 3, 1, 0x40, 0, 0 };
	CHECK_EQ(parse_status(tcode0, sizeof(tcode0), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "trace code record with size 0x0 at 0x40") != NULL);
	/* A keyed trace code record of size 0, and one whose key has no tag (trace 1 at
	 * 0x40, prototype 0x50, line 7). */
	static const uint8_t kcode0[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_KCODE, 11, 1,
					  0xc0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0, 0x50, 7, 0 };
	CHECK_EQ(parse_status(kcode0, sizeof(kcode0), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "keyed trace code record with size 0x0 at 0x800000000040") != NULL);
	static const uint8_t kplain[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_KCODE, 5, 1, 0x40,
					  0x10, 0x50, 7, 0 };
	CHECK_EQ(parse_status(kplain, sizeof(kplain), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "keyed trace code record at 0x40, an address without a key") != NULL);
	/* One whose extent runs past its key into the next (tag 1's last byte, 2 bytes). */
	static const uint8_t kspan[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_KCODE, 11, 1,
					 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f, 2, 0x50, 7, 0 };
	CHECK_EQ(parse_status(kspan, sizeof(kspan), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "keyed trace code record with size 0x2 at 0xffffffffffff") != NULL);
	/* An astate pair with a state that is neither the collector's nor the compiler's. */
	static const uint8_t badst[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_ASTATE, 2, 0, 0x7f, 0 };
	CHECK_EQ(parse_status(badst, sizeof(badst), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "sampled allocations' stack state 127") != NULL);
	/* A pair cut by its record's end: its state would be read from the end marker (0).
	 * Named as an overrun, not as state 0; so for asample and tsample records. */
	static const uint8_t astcut[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_ASTATE, 3, 0,
					  LP_VMST_GC, 1, 0 };
	CHECK_EQ(parse_status(astcut, sizeof(astcut), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "extension record 0x0a ends inside its fields (length 3, the fields take at least 4)") !=
	      NULL);
	static const uint8_t afzero[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_AFREED, 3, 0, 9, 0, 0 };
	CHECK_EQ(parse_status(afzero, sizeof(afzero), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "freed sampled allocations counted 0") != NULL);
	static const uint8_t afcut[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_AFREED, 2, 0, 9, 7, 0 };
	CHECK_EQ(parse_status(afcut, sizeof(afcut), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "extension record 0x0d ends inside its fields") != NULL);
	static const uint8_t ascut[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_ASAMPLE, 2, 0, 9, 7, 0 };
	CHECK_EQ(parse_status(ascut, sizeof(ascut), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "extension record 0x06 ends inside its fields (length 2, the fields take at least 3)") !=
	      NULL);
	/* csize, stack and meta records cut the same way: refused before the consumer sees
	 * values from the next record. */
	static const uint8_t cscut[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_CSIZE, 1, 5, 0x7f, 0 };
	CHECK_EQ(parse_status(cscut, sizeof(cscut), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "record 0x03 ends inside its fields (length 1, the fields take at least 2)") !=
	      NULL);
	static const uint8_t stcut[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_STACK, 1, 3, 0x80, 0, 0 };
	CHECK_EQ(parse_status(stcut, sizeof(stcut), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "record 0x04 ends inside its fields (length 1") != NULL);
	static const uint8_t mtcut[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_META, 2, 1, 'a', 1, 'b',
					 0 };
	CHECK_EQ(parse_status(mtcut, sizeof(mtcut), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "record 0x02 ends inside its fields (length 2, the fields take at least 4)") !=
	      NULL);
	static const uint8_t tscut[] = { 'l', 'p', 'x', 1, 0, 0, 0, LP_EXT_TSAMPLE, 1, 0, 1, 0 };
	CHECK_EQ(parse_status(tscut, sizeof(tscut), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "record 0x05 ends inside its fields (length 1, the fields take at least 2)") != NULL);
	static const uint8_t after[] = { 'l', 'p', 'x', 1, 0, 0, 0, 0, 1 };
	CHECK_EQ(parse_status(after, sizeof(after), msg, sizeof(msg)), LP_ERR_FORMAT);
	CHECK(strstr(msg, "after the extension") != NULL);
}

int main(void)
{
	RUN(test_simple);
	RUN(test_cname);
	RUN(test_nested_sandwich);
	RUN(test_short_host_stack);
	RUN(test_leaf_mode);
	RUN(test_cpcall);
	RUN(test_resume);
	RUN(test_running_cfunc);
	RUN(test_cfunc_called_by_cfunc);
	RUN(test_vm_block_named);
	RUN(test_vm_block_builtin);
	RUN(test_vm_block_asm_builtin);
	RUN(test_vm_block_asm_tails);
	RUN(test_builtins);
	RUN(test_cut_host);
	RUN(test_cut_before_extension);
	RUN(test_api_anchors);
	RUN(test_api_prologue);
	RUN(test_trace_host_split);
	RUN(test_unknown_addresses);
	RUN(test_function_granularity);
	RUN(test_proto_address_reuse);
	RUN(test_c_symbol_replaced);
	RUN(test_long_c_names);
	RUN(test_c_symbol_reloaded_aliases);
	RUN(test_c_epochs_many);
	RUN(test_c_symbol_replaced_trace);
	RUN(test_extension_maps);
	RUN(test_trace_stacks_lost_fact);
	RUN(test_anchor_after_sizes);
	RUN(test_unnamed_in_object);
	RUN(test_trace_in_coroutine);
	RUN(test_interpreter_in_coroutine);
	RUN(test_finalizer_in_coroutine_exit);
	RUN(test_trace_helper_in_callback);
	RUN(test_extension_errors);
	RUN(test_extension_ffnames);
	RUN(test_trace_stacks);
	RUN(test_trace_stacks_reuse);
	RUN(test_gc_stacks);
	RUN(test_jit_compiler_stacks);
	RUN(test_collapsed_same_label);
	RUN(test_long_chunk_name);
	RUN(test_trace_exit_stacks);
	RUN(test_trace_code_frame);
	RUN(test_trace_code_many_overlaps);
	RUN(test_trace_code_keyed);
	RUN(test_trace_code_keyed_proto_reused);
	RUN(test_trace_frame_after_flush);
	RUN(test_trace_frame_stale_start);
	RUN(test_trace_anchor_resumed);
	RUN(test_c_in_coroutine);
	RUN(test_c_in_callback);
	RUN(test_pcall_in_coroutine);
	RUN(test_sort_in_coroutine);
	RUN(test_nested_resume_readings);
	RUN(test_memory_samples);
	RUN(test_memory_nested);
	RUN(test_memory_trace);
	RUN(test_memory_gc);
	free(stream.data);
	return UNIT_RESULT();
}
