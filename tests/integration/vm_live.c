/*
** Live check of the LuaJIT VM model (src/vm/) against a real libluajit-5.1.so.
**
** Embeds whichever libluajit-5.1.so.2 the dynamic linker picks (vm_live.sh points
** LD_LIBRARY_PATH at the extracted Debian luajit or luajit2 package), runs Lua scenarios that
** call the host's C function `probe`, and there walks the running stack with the model through
** the process_vm_readv reader of our own pid. Every walk is compared frame by frame with what
** LuaJIT itself says (lua_getstack/lua_getinfo and luaL_traceback): chunk names, current
** lines, C function addresses, builtin names. The scenarios also assert the frame shapes
** (kinds, C-entry marks, vararg, continuation) and the resumer chain of coroutines. Then
** traces (compared with jit.util and jit.attach), and a signal-driven sampling run that walks
** from the interpreter's registers and from g->jit_base inside real traces.
**
**   vm_live luajit|luajit2   run everything; exit 0 pass, 1 fail
**   vm_live --bench          print the process_vm_readv reader's cost per read and per walk
*/
#include <dlfcn.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "vm/luajit.h"
#include "vm/luajit_trace.h"
#include "vm/luajit_walk.h"

#define MAXF 64

static struct lp_lj_vm vm;
static struct lp_mem mem;
static struct lp_mem_pid pidr;
static int failures;
static int probes;

#define FAILF(...)                                              \
	do {                                                    \
		fprintf(stderr, "  FAIL: " __VA_ARGS__);        \
		fputc('\n', stderr);                            \
		failures++;                                     \
	} while (0)

/* -- Comparing one walk with LuaJIT's own view --------------------------------------- */

static const char *kind_letter(const struct lp_lj_frame *f)
{
	return f->kind == LP_FRAME_LFUNC ? "L" : f->kind == LP_FRAME_CFUNC ? "C" : "F";
}

/* Appends the frame-shape description "C L^ Lv L+ F ..." of fr to b. */
static void describe(luaL_Buffer *b, const struct lp_lj_frame *fr, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		if (i)
			luaL_addchar(b, ' ');
		luaL_addstring(b, kind_letter(&fr[i]));
		if (fr[i].flags & LP_LJ_FR_VARARG)
			luaL_addchar(b, 'v');
		if (fr[i].link == LP_LJ_FRAME_CONT)
			luaL_addchar(b, '+');
		if (fr[i].flags & LP_LJ_FR_FFICB)
			luaL_addchar(b, '#');
		else if (fr[i].flags & LP_LJ_FR_CENTRY)
			luaL_addchar(b, '^');
	}
}

/* Line i of a luaL_traceback text (0 = first frame), without the leading tab. */
static int tb_line(const char *tb, unsigned i, char *out, size_t size)
{
	const char *p = strstr(tb, "stack traceback:\n");

	if (!p)
		return -1;
	p += strlen("stack traceback:\n");
	for (; i > 0; i--) {
		p = strchr(p, '\n');
		if (!p)
			return -1;
		p++;
	}
	if (*p == '\t')
		p++;
	size_t n = strcspn(p, "\n");
	if (n == 0 || n >= size)
		return -1;
	memcpy(out, p, n);
	out[n] = '\0';
	return 0;
}

/* lua_Debug.short_src rendering of a chunk name, as LuaJIT prints it in tracebacks. */
static void short_src(const char *chunk, char *out, size_t size)
{
	if (chunk[0] == '@' || chunk[0] == '=') {
		snprintf(out, size, "%s", chunk + 1);
		return;
	}
	/* Source text: the scenarios only use short one-line names, shown whole. */
	snprintf(out, size, "[string \"%s\"]", chunk);
}

/*
** Checks walk fr[0..n) of thread L1 against lua_getstack/lua_getinfo and luaL_traceback.
** L is the running thread (used for the traceback buffer and 'f' lookups on itself).
*/
static void compare(lua_State *L, lua_State *L1, const struct lp_lj_frame *fr, unsigned n,
		    unsigned wflags, const char *tag)
{
	const char *tb;
	lua_Debug ar;

	if (!(wflags & LP_LJ_WALK_BOTTOM))
		FAILF("%s: walk did not reach the bottom (flags 0x%x, %u frames)", tag, wflags, n);
	luaL_traceback(L, L1, NULL, 0);
	tb = lua_tostring(L, -1);
	for (unsigned i = 0; i < n; i++) {
		const struct lp_lj_frame *f = &fr[i];
		char want[512], line[512], src[300];
		if (!lua_getstack(L1, (int)i, &ar)) {
			FAILF("%s: frame %u: LuaJIT has no such level", tag, i);
			break;
		}
		lua_CFunction cf = NULL;
		lua_getinfo(L1, L1 == L ? "Slnf" : "Sln", &ar);
		if (L1 == L) {
			cf = lua_tocfunction(L, -1); /* NULL for builtins */
			lua_pop(L, 1);
		}
		if (f->kind == LP_FRAME_LFUNC) {
			struct lp_lj_proto p;
			char chunk[256];
			if (lp_lj_proto_read(&vm, &mem, f->addr, &p) ||
			    lp_lj_str(&vm, &mem, p.chunkname, chunk, sizeof(chunk), NULL)) {
				FAILF("%s: frame %u: cannot read proto 0x%" PRIx64, tag, i, f->addr);
				continue;
			}
			if (strcmp(ar.what, "C") == 0)
				FAILF("%s: frame %u: model says Lua, LuaJIT says C", tag, i);
			if (strcmp(chunk, ar.source) != 0)
				FAILF("%s: frame %u: chunk '%s', LuaJIT '%s'", tag, i, chunk, ar.source);
			if (f->line != ar.currentline || (f->flags & LP_LJ_FR_LINEDEF))
				FAILF("%s: frame %u: line %d%s, LuaJIT %d", tag, i, f->line,
				      (f->flags & LP_LJ_FR_LINEDEF) ? " (def)" : "", ar.currentline);
			if (p.firstline != ar.linedefined)
				FAILF("%s: frame %u: firstline %d, LuaJIT %d", tag, i, p.firstline,
				      ar.linedefined);
			short_src(chunk, src, sizeof(src));
			snprintf(want, sizeof(want), "%s:%d:", src, f->line);
		} else {
			if (strcmp(ar.what, "C") != 0)
				FAILF("%s: frame %u: model says C/builtin, LuaJIT says %s", tag, i,
				      ar.what);
			if (L1 == L && f->kind == LP_FRAME_CFUNC &&
			    (uint64_t)(uintptr_t)cf != f->addr)
				FAILF("%s: frame %u: C function 0x%" PRIx64 ", LuaJIT %p", tag, i,
				      f->addr, (void *)(uintptr_t)cf);
			snprintf(want, sizeof(want), "[C]:");
		}
		if (tb_line(tb, i, line, sizeof(line)) || strncmp(line, want, strlen(want)) != 0) {
			FAILF("%s: frame %u: traceback line '%s', expected prefix '%s'", tag, i,
			      tb_line(tb, i, line, sizeof(line)) ? "(none)" : line, want);
			continue;
		}
		/* Builtins: the traceback names them from the call site; check when it does. */
		const char *nm = strstr(line, "in function '");
		if (f->kind == LP_FRAME_FFUNC && nm && f->ffid < 255) {
			const char *ff = lp_lj_ffname(vm.lay, f->ffid);
			char name[128];
			size_t k = strcspn(nm + 13, "'");
			snprintf(name, sizeof(name), "%.*s", (int)k, nm + 13);
			size_t fl = ff ? strlen(ff) : 0;
			int ok = ff && (strcmp(ff, name) == 0 ||
					(fl > k && ff[fl - k - 1] == '.' && strcmp(ff + fl - k, name) == 0));
			/* wrap_aux and FFI metamethods carry the caller's names for them. */
			if (!ok && !(ff && (strcmp(ff, "coroutine.wrap_aux") == 0 ||
					    strncmp(ff, "ffi.", 4) == 0)))
				FAILF("%s: frame %u: builtin #%u '%s', traceback says '%s'", tag, i,
				      f->ffid, ff ? ff : "?", name);
		}
	}
	if ((wflags & LP_LJ_WALK_BOTTOM) && lua_getstack(L1, (int)n, &ar))
		FAILF("%s: LuaJIT has more than %u levels", tag, n);
	lua_pop(L, 1);
}

/* -- probe(tag): walk, compare, describe ------------------------------------------- */

static int l_probe(lua_State *L)
{
	const char *tag = luaL_optstring(L, 1, "?");
	struct lp_lj_frame fr[MAXF];
	struct lp_lj_cframe cfs[MAXF];
	struct lp_lj_thread t, co;
	unsigned fl, cfl, n, ncf, centry = 0, k = 0;
	int32_t vmst;
	uint64_t curL;
	luaL_Buffer b;
	char err[256];

	probes++;
	if (lp_lj_vmstate(&vm, &mem, &vmst) || vmst != -2 ||
	    lp_lj_vmstate_map(vmst, NULL) != LP_VMST_CFUNC)
		FAILF("%s: vmstate %d, expected -2 (C)", tag, vmst);
	if (lp_lj_cur_L(&vm, &mem, &curL) || curL != (uint64_t)(uintptr_t)L)
		FAILF("%s: g->cur_L 0x%" PRIx64 " != L %p", tag, curL, (void *)L);
	{
		/* Detection from any thread of the VM gives the same VM. */
		struct lp_lj_vm v2;
		if (lp_lj_detect(&v2, &mem, (uintptr_t)L, err, sizeof(err)) || v2.g != vm.g ||
		    v2.lay != vm.lay)
			FAILF("%s: detection from this thread: %s", tag, err);
	}
	if (lp_lj_thread_read(&vm, &mem, (uintptr_t)L, &t)) {
		FAILF("%s: cannot read thread", tag);
		return 0;
	}
	n = lp_lj_walk(&vm, &mem, &t, 0, 0, fr, MAXF, &fl);
	compare(L, L, fr, n, fl, tag);
	if (n == 0 || fr[0].kind != LP_FRAME_CFUNC || fr[0].addr != (uint64_t)(uintptr_t)l_probe)
		FAILF("%s: top frame is not probe()", tag);

	/* Every C entry the walk crossed is the next C frame of L->cframe's chain. */
	ncf = lp_lj_cframes(&vm, &mem, t.cframe, cfs, MAXF, &cfl);
	if (!(cfl & LP_LJ_WALK_BOTTOM))
		FAILF("%s: cframe chain flags 0x%x", tag, cfl);
	for (unsigned i = 0; i < n; i++) {
		if (!(fr[i].flags & LP_LJ_FR_CENTRY))
			continue;
		centry++;
		while (k < ncf && cfs[k].nres < 0) /* frameless lua_cpcall entries */
			k++;
		if (k >= ncf || fr[i].cframe != cfs[k].addr || cfs[k].L != (uint64_t)(uintptr_t)L)
			FAILF("%s: frame %u: C entry frame 0x%" PRIx64 " is not cframe #%u", tag, i,
			      fr[i].cframe, k);
		k++;
	}
	if (centry != ncf)
		FAILF("%s: %u C entries in the walk, %u C frames in the chain", tag, centry, ncf);

	luaL_buffinit(L, &b);
	describe(&b, fr, n);
	/* Coroutines resumed from Lua continue into their resumer. */
	co = t;
	for (int depth = 0; depth < 8; depth++) {
		struct lp_lj_thread r;
		uint64_t rcf;
		int rc = lp_lj_resumer(&vm, &mem, &co, &r, &rcf);
		if (rc == LP_LJ_ENONE)
			break;
		if (rc) {
			FAILF("%s: resumer: error %d", tag, rc);
			break;
		}
		n = lp_lj_walk(&vm, &mem, &r, 0, 0, fr, MAXF, &fl);
		compare(L, (lua_State *)(uintptr_t)r.L, fr, n, fl, tag);
		luaL_addstring(&b, " | ");
		describe(&b, fr, n);
		co = r;
	}
	if ((co.cframe & LP_LJ_CFRAME_RESUME) == 0 && co.L != vm.mainL)
		FAILF("%s: resumer chain ends at 0x%" PRIx64 ", not the main thread", tag, co.L);
	luaL_pushresult(&b);
	return 1;
}

/* ccall(f, ...): calls f from C with lua_call, so a C entry sits under f's frame. */
static int l_ccall(lua_State *L)
{
	lua_call(L, lua_gettop(L) - 1, 1);
	return 1;
}

/* trace_check(n, mcaddr, szmcode, nexit, link, startfunc, startpc): one trace vs jit.util. */
static int l_trace_check(lua_State *L)
{
	uint32_t no = (uint32_t)luaL_checkinteger(L, 1);
	uint64_t mc = (uint64_t)luaL_checknumber(L, 2);
	uint32_t sz = (uint32_t)luaL_checkinteger(L, 3);
	uint32_t nexit = (uint32_t)luaL_checkinteger(L, 4);
	uint32_t link = (uint32_t)luaL_checkinteger(L, 5);
	const void *fn = lua_topointer(L, 6);
	uint32_t spc = (uint32_t)luaL_checkinteger(L, 7);
	struct lp_lj_trace tr, tr2;
	struct lp_lj_proto p;
	uint64_t fpc;
	int rc = lp_lj_trace_read(&vm, &mem, no, &tr);

	if (rc) {
		FAILF("trace %u: read error %d", no, rc);
		return 0;
	}
	if (tr.mcode != mc || tr.szmcode != sz || tr.nsnap != nexit || tr.link != link)
		FAILF("trace %u: mcode 0x%" PRIx64 "/%u nsnap %u link %u, jit.util says 0x%" PRIx64
		      "/%u %u %u", no, tr.mcode, tr.szmcode, tr.nsnap, tr.link, mc, sz, nexit, link);
	if (lp_mem_u64(&mem, (uintptr_t)fn + vm.lay->fn_pc, &fpc) ||
	    tr.startpt != fpc - vm.lay->pt_size || tr.startpc != fpc + 4 * (uint64_t)spc)
		FAILF("trace %u: start 0x%" PRIx64 "+%" PRIu64 " differs from jit.attach's", no,
		      tr.startpt, (tr.startpc - tr.startpt - vm.lay->pt_size) / 4);
	if (tr.spadjust > 4096)
		FAILF("trace %u: spadjust %u", no, tr.spadjust);
	if (lp_lj_trace_find(&vm, &mem, tr.mcode + tr.szmcode / 2, &tr2) || tr2.traceno != no)
		FAILF("trace %u: lp_lj_trace_find does not find it", no);
	/* Each snapshot's own machine-code offset maps back to a line of the traced code. */
	if (lp_lj_proto_read(&vm, &mem, tr.startpt, &p) == 0) {
		for (uint32_t s = 0; s < tr.nsnap; s++) {
			uint16_t mcofs;
			struct lp_lj_trace_loc loc;
			if (lp_mem_read(&mem, tr.snap + s * (uint64_t)vm.lay->snap_size +
						vm.lay->snap_mcofs, &mcofs, 2))
				continue;
			if (mcofs >= tr.szmcode)
				continue;
			rc = lp_lj_trace_locate(&vm, &mem, &tr, tr.mcode + mcofs, 0, &loc);
			if (rc || loc.pt == 0 || loc.line <= 0)
				FAILF("trace %u: snapshot %u (mcofs %u): locate rc %d pt 0x%" PRIx64
				      " line %d", no, s, mcofs, rc, loc.pt, loc.line);
		}
	}
	return 0;
}

/* -- Sampling from a signal handler ----------------------------------------------------- */

#define NSAMP 4000
struct sample {
	int32_t vmstate;
	uint8_t where;    /* 1 interpreter block, 2 trace mcode, 0 elsewhere */
	uint8_t n;        /* frames */
	unsigned flags;
	uint64_t top_pt;  /* top Lua frame proto (walk) */
	int32_t top_line;
	uint64_t loc_pt;  /* trace samples: snapshot location */
	int32_t loc_line;
	uint64_t second_pt;
};
static struct sample samples[NSAMP];
static volatile sig_atomic_t nsamples;

static void on_sample(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;
	uint64_t ip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
	uint64_t rdx = (uint64_t)uc->uc_mcontext.gregs[REG_RDX];
	uint64_t rbx = (uint64_t)uc->uc_mcontext.gregs[REG_RBX];
	struct lp_lj_frame fr[8];
	struct lp_lj_thread t;
	struct sample *s;
	uint64_t L, base;
	unsigned n;

	if (nsamples >= NSAMP)
		return;
	s = &samples[nsamples];
	memset(s, 0, sizeof(*s));
	if (lp_lj_vmstate(&vm, &mem, &s->vmstate) || lp_lj_cur_L(&vm, &mem, &L) ||
	    lp_lj_thread_read(&vm, &mem, L, &t))
		goto done;
	if (s->vmstate == -1 && lp_lj_in_vm(&vm, ip)) {
		s->where = 1;
		n = lp_lj_walk(&vm, &mem, &t, rdx, rbx, fr, 8, &s->flags);
	} else if (s->vmstate >= 0) {
		struct lp_lj_trace tr;
		struct lp_lj_trace_loc loc;
		if (lp_lj_trace_read(&vm, &mem, (uint32_t)s->vmstate, &tr) ||
		    !lp_lj_trace_has(&tr, ip) || lp_lj_jit_base(&vm, &mem, &base) || base == 0)
			goto done;
		s->where = 2;
		n = lp_lj_walk(&vm, &mem, &t, base, 0, fr, 8, &s->flags);
		if (n > 0 && fr[0].kind == LP_FRAME_LFUNC &&
		    lp_lj_trace_locate(&vm, &mem, &tr, ip, fr[0].addr, &loc) == 0) {
			s->loc_pt = loc.pt;
			s->loc_line = loc.line;
		}
	} else {
		goto done;
	}
	s->n = (uint8_t)n;
	if (n > 0 && fr[0].kind == LP_FRAME_LFUNC) {
		s->top_pt = fr[0].addr;
		s->top_line = (fr[0].flags & LP_LJ_FR_LINEDEF) ? -1 : fr[0].line;
	}
	if (n > 1 && fr[1].kind == LP_FRAME_LFUNC)
		s->second_pt = fr[1].addr;
done:
	nsamples++;
}

static uint64_t func_pt(lua_State *L, int idx)
{
	uint64_t fpc = 0;
	lp_mem_u64(&mem, (uintptr_t)lua_topointer(L, idx) + vm.lay->fn_pc, &fpc);
	return fpc - vm.lay->pt_size;
}

/* sample(spin, caller, first, last, jit, n) runs caller(n), which calls spin, under a 1 ms
** timer and checks the samples: interpreter samples walked from the BASE/PC registers, trace
** samples from g->jit_base plus the snapshot lookup; all must show spin (lines [first, last])
** called by caller. */
static int l_sample(lua_State *L)
{
	const int jit = lua_toboolean(L, 5);
	const int first = (int)luaL_checkinteger(L, 3), last = (int)luaL_checkinteger(L, 4);
	uint64_t spin_pt = func_pt(L, 1), caller_pt = func_pt(L, 2);
	struct sigaction sa = {0}, old;
	struct sigevent sev = {0};
	struct itimerspec its = {{0, 1000000}, {0, 1000000}};
	timer_t tm;
	unsigned where[3] = {0}, good = 0, bad = 0, total;

	nsamples = 0;
	sa.sa_sigaction = on_sample;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGRTMIN + 3, &sa, &old);
	sev.sigev_notify = SIGEV_SIGNAL;
	sev.sigev_signo = SIGRTMIN + 3;
	if (timer_create(CLOCK_MONOTONIC, &sev, &tm)) {
		FAILF("timer_create");
		return 0;
	}
	timer_settime(tm, 0, &its, NULL);
	lua_pushvalue(L, 2);
	lua_pushvalue(L, 6);
	lua_call(L, 1, 0);
	timer_delete(tm);
	sigaction(SIGRTMIN + 3, &old, NULL);

	total = nsamples;
	for (unsigned i = 0; i < total; i++) {
		struct sample *s = &samples[i];
		where[s->where]++;
		if (s->where == 0)
			continue;
		int line = s->where == 2 ? s->loc_line : s->top_line;
		uint64_t pt = s->where == 2 ? s->loc_pt : s->top_pt;
		if ((s->flags & LP_LJ_WALK_BOTTOM) && s->top_pt == spin_pt &&
		    s->second_pt == caller_pt && pt == spin_pt && line >= first && line <= last)
			good++;
		else
			bad++;
	}
	printf("  sampling (jit %s): %u samples, %u interpreter, %u trace, %u elsewhere; "
	       "%u walks right, %u not\n", jit ? "on" : "off", total, where[1], where[2],
	       where[0], good, bad);
	unsigned want = jit ? where[2] : where[1];
	if (want < 50)
		FAILF("sampling (jit %s): only %u samples in %s", jit ? "on" : "off", want,
		      jit ? "traces" : "the interpreter");
	/* Interpreter registers are exact at every bytecode; the snapshot lookup and the
	** interpreter's helper calls make a few samples land off: allow 5%. */
	if (bad * 20 > good + bad)
		FAILF("sampling (jit %s): %u of %u walks wrong", jit ? "on" : "off", bad, good + bad);
	return 0;
}

/* -- Scenarios ------------------------------------------------------------------------ */

static const char script[] =
	"local probe, ccall = probe, ccall\n"
	"local function check(got, want, what)\n"
	"  if got ~= want then error(what .. ': got \"' .. got .. '\", want \"' .. want .. '\"', 2) end\n"
	"end\n"
	"local function rec(n)\n"
	"  if n == 0 then local r = probe('rec') return r end\n"
	"  local r = rec(n - 1) return r\n"
	"end\n"
	"check(rec(3), 'C L L L L Lv^', 'recursion')\n"
	"check(select(2, pcall(function() local r = probe('pcall') return r end)), 'C L F Lv^', 'pcall')\n"
	"local function inner() local r = probe('ccall') return r end\n"
	"local function outer() local r = ccall(inner) return r end\n"
	"check(outer(), 'C L^ C L Lv^', 'lua_call from C')\n"
	"local function va(...) local r = probe('vararg') return r end\n"
	"check(va(1, 2, 3), 'C Lv Lv^', 'vararg')\n"
	"local mt = {__index = function(t, k) local r = probe('index') return r end}\n"
	"local obj = setmetatable({}, mt)\n"
	"check(obj.x, 'C L+ Lv^', '__index continuation')\n"
	"local got\n"
	"xpcall(function() error('boom') end,\n"
	"  function(m) got = probe('xpcall') return m end)\n"
	"check(got, 'C L^ F L F Lv^', 'xpcall handler')\n"
	"local co = coroutine.create(function(a) local r = probe('resume') return r end)\n"
	"check(select(2, coroutine.resume(co, 1)), 'C L^ | F Lv^', 'coroutine.resume')\n"
	"local gen = coroutine.wrap(function() local r = probe('wrap') return r end)\n"
	"check(gen(), 'C L^ | F Lv^', 'coroutine.wrap')\n"
	"local function nest()\n"
	"  local c2 = coroutine.wrap(function() local r = probe('nested') return r end)\n"
	"  local r = c2() return r\n"
	"end\n"
	"local c1 = coroutine.create(function() local r = nest() return r end)\n"
	"check(select(2, coroutine.resume(c1)), 'C L^ | F L L^ | F Lv^', 'nested coroutines')\n"
	"local function hooked() local x = 1 return x end\n"
	"local function sc_hook()\n"
	"  debug.sethook(function() debug.sethook() got = probe('hook') end, 'l')\n"
	"  local v = hooked()\n"
	"  return v\n"
	"end\n"
	"sc_hook()\n"
	"check(got, 'C L^ L Lv^', 'line hook')\n"
	"local big16 = loadstring('local probe = ... return function()' .. string.rep('\\n', 300) ..\n"
	"  'local r = probe(\"u16\") return r end', '=big16')(probe)\n"
	"check(big16(), 'C L Lv^', 'u16 lineinfo')\n"
	"local big32 = loadstring('local probe = ... return function()' .. string.rep('\\n', 70000) ..\n"
	"  'local r = probe(\"u32\") return r end', '=big32')(probe)\n"
	"check(big32(), 'C L Lv^', 'u32 lineinfo')\n"
	"local s = loadstring('local p = ...\\nlocal r = p(\"strchunk\")\\nreturn r', 'local x = 1')\n"
	"check(s(probe), 'C Lv Lv^', 'string chunk')\n"
	"local ffi = require('ffi')\n"
	"ffi.cdef('void qsort(void *, size_t, size_t, int (*)(const void *, const void *));')\n"
	"local once\n"
	"local cmp = ffi.cast('int (*)(const void *, const void *)', function(a, b)\n"
	"  if not once then once = probe('fficb') end\n"
	"  return ffi.cast('const int *', a)[0] - ffi.cast('const int *', b)[0]\n"
	"end)\n"
	"local function sortit()\n"
	"  local arr = ffi.new('int[2]', 2, 1) ffi.C.qsort(arr, 2, 4, cmp) return arr[0]\n"
	"end\n"
	"check(sortit(), 1, 'qsort')\n"
	"check(once, 'C L+# F L Lv^', 'FFI callback')\n"
	"cmp:free()\n"
	"-- traces: compare with jit.util and jit.attach\n"
	"local starts = {}\n"
	"jit.attach(function(what, tr, func, pc)\n"
	"  if what == 'start' then starts[tr] = {func, pc} end\n"
	"end, 'trace')\n"
	"local function hot() local s = 0 for i = 1, 2000 do s = s + i % 7 end return s end\n"
	"jit.on() hot() hot()\n"
	"jit.attach(function() end)\n"
	"local util = require('jit.util')\n"
	"local ntr = 0\n"
	"for tr = 1, 1000 do\n"
	"  local info = util.traceinfo(tr)\n"
	"  if not info then break end\n"
	"  local mc, addr = util.tracemc(tr)\n"
	"  if starts[tr] then\n"
	"    trace_check(tr, addr, #mc, info.nexit, info.link, starts[tr][1], starts[tr][2])\n"
	"    ntr = ntr + 1\n"
	"  end\n"
	"end\n"
	"if ntr == 0 then error('no trace to check') end\n"
	"-- sampling from a signal handler\n"
	"local function spin(n)\n"
	"  local x, y = 0, 1.5\n"
	"  for i = 1, n do\n"
	"    x = x + i\n"
	"    y = y * 1.0000001\n"
	"  end\n"
	"  return x + y\n"
	"end\n"
	"local function run_spin(n) local r = spin(n) return r end\n"
	"local di = debug.getinfo(spin, 'S')\n"
	"jit.off(spin) jit.off(run_spin)\n"
	"sample(spin, run_spin, di.linedefined, di.lastlinedefined, false, 3e7)\n"
	"jit.on(spin, true) jit.on(run_spin, true) jit.flush()\n"
	"sample(spin, run_spin, di.linedefined, di.lastlinedefined, true, 3e8)\n";

static int run_bench(void)
{
	static char buf[256];
	lua_State *L = luaL_newstate();
	struct timespec a, b;
	const int N = 1000000;
	char err[256];

	luaL_openlibs(L);
	lp_mem_pid_init(&mem, &pidr, getpid());
	if (lp_lj_detect(&vm, &mem, (uintptr_t)L, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	for (size_t len = 8; len <= 128; len *= 4) {
		clock_gettime(CLOCK_MONOTONIC, &a);
		for (int i = 0; i < N; i++)
			lp_mem_read(&mem, (uintptr_t)buf + (i & 7) * 8, buf + 128, len > 128 ? 128 : len);
		clock_gettime(CLOCK_MONOTONIC, &b);
		printf("process_vm_readv reader, %3zu bytes: %.0f ns/read\n", len,
		       ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / N);
	}
	lua_close(L);
	return 0;
}

static int bench_walk(lua_State *L)
{
	struct lp_lj_thread t;
	struct lp_lj_frame fr[MAXF];
	struct timespec a, b;
	unsigned fl, n = 0;
	const int N = 20000;

	lp_lj_thread_read(&vm, &mem, (uintptr_t)L, &t);
	uint64_t r0 = pidr.reads;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < N; i++)
		n = lp_lj_walk(&vm, &mem, &t, 0, 0, fr, MAXF, &fl);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("walk of %u frames: %.1f us, %.1f reads\n", n,
	       ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / N / 1000,
	       (double)(pidr.reads - r0) / N);
	return 0;
}

int main(int argc, char **argv)
{
	const char *want = argc > 1 ? argv[1] : "";
	lua_State *L;
	char err[256];
	Dl_info di;
	int is2;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (strcmp(want, "--bench") == 0) {
		int rc = run_bench();
		if (rc)
			return rc;
		L = luaL_newstate();
		luaL_openlibs(L);
		lp_lj_detect(&vm, &mem, (uintptr_t)L, err, sizeof(err));
		lua_register(L, "bench_walk", bench_walk);
		if (luaL_dostring(L, "local function f(n) if n == 0 then return bench_walk() end "
				     "local r = f(n - 1) return r end f(8)")) {
			fprintf(stderr, "%s\n", lua_tostring(L, -1));
			return 1;
		}
		lua_close(L);
		return 0;
	}
	if (strcmp(want, "luajit") != 0 && strcmp(want, "luajit2") != 0) {
		fprintf(stderr, "usage: vm_live luajit|luajit2|--bench\n");
		return 1;
	}

	if (dladdr((void *)(uintptr_t)lua_newstate, &di))
		printf("  library: %s\n", di.dli_fname);
	is2 = dlsym(RTLD_DEFAULT, "lua_setexdata") != NULL;
	if (is2 != (strcmp(want, "luajit2") == 0)) {
		fprintf(stderr, "FAIL: loaded library is %s, expected %s\n",
			is2 ? "luajit2" : "luajit", want);
		return 1;
	}
	L = luaL_newstate();
	luaL_openlibs(L);
	lp_mem_pid_init(&mem, &pidr, getpid());
	if (lp_lj_detect(&vm, &mem, (uintptr_t)L, err, sizeof(err))) {
		fprintf(stderr, "FAIL: %s\n", err);
		return 1;
	}
	printf("  detected: %s (g 0x%" PRIx64 ", VM block 0x%" PRIx64 "..0x%" PRIx64 ")\n",
	       vm.lay->name, vm.g, vm.vm_lo, vm.vm_hi);
	if (vm.lay->l_size != (is2 ? 112 : 96)) {
		fprintf(stderr, "FAIL: wrong layout for %s\n", want);
		return 1;
	}
	if (vm.mainL != (uintptr_t)L)
		FAILF("mainthread 0x%" PRIx64 " != L", vm.mainL);

	/* Rejections: garbage and unreadable memory. */
	{
		static uint64_t junk[64];
		struct lp_lj_vm v2;
		for (int i = 0; i < 64; i++)
			junk[i] = 0x0123456789abcdefull * (uint64_t)(i + 1);
		if (lp_lj_detect(&v2, &mem, (uintptr_t)junk, err, sizeof(err)) != LP_LJ_EBUILD ||
		    strncmp(err, "unsupported LuaJIT build (", 26) != 0)
			FAILF("garbage accepted or wrong message: %s", err);
		if (lp_lj_detect(&v2, &mem, 16, err, sizeof(err)) != LP_LJ_EREAD)
			FAILF("unreadable address not reported: %s", err);
	}

	lua_register(L, "probe", l_probe);
	lua_register(L, "ccall", l_ccall);
	lua_register(L, "trace_check", l_trace_check);
	lua_register(L, "sample", l_sample);
	if (luaL_loadbuffer(L, script, sizeof(script) - 1, "@vm_live.lua") ||
	    lua_pcall(L, 0, 0, 0)) {
		FAILF("script: %s", lua_tostring(L, -1));
	}
	printf("  %d probes, %" PRIu64 " reads (%" PRIu64 " failed, all expected)\n", probes,
	       pidr.reads, pidr.fails);
	lua_close(L);
	if (failures) {
		fprintf(stderr, "FAIL vm_live %s: %d failures\n", want, failures);
		return 1;
	}
	printf("ok vm_live %s\n", want);
	return 0;
}
