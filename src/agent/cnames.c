/*
** Lua names of C functions (cname records of the lpx extension, docs/FORMAT.md): what the
** program's modules call the C functions they export, for the code that no symbol names
** in a stripped C module (Debian's lua-cjson, lpeg, luasocket), where the reports read
** "liblua5.1-cjson.so.0.0.0+0x3e50".
**
** The rule: package.loaded[module][field] holding a C function (a lua_CFunction, not a
** builtin) names its entry `module.field` ("cjson.encode", "socket.core.connect"); a field
** of package.loaded._G names it by its bare global name ("print" would be one, were it not
** a builtin), and only when no module names it. One level: a module's fields, not the
** tables inside them (a submodule is its own package.loaded entry, and a fixed depth
** needs no guard against cycles), but for package.preload: its loaders (LuaJIT's
** table.new, ffi and jit.profile; a host's preloaded C modules) are named as Lua reaches
** them, `package.preload["table.new"]` (a key holding a quote, a backslash or a control
** character is skipped, not escaped). Several names of one entry (cjson.safe's encode and
** decode share one C function) are joined with '/', at most four, shortest first. The
** report uses a name only where the symbol table has a stand-in ("object+0xoffset", from
** the unwind table) at that very address: an ELF symbol wins, and so does the unwind
** table's extent (code the unwind table does not cover keeps its address).
**
** When: from the Lua binding's stop calls and the close sentinels' finalizers (lua.c), on
** the VM's thread inside a C function, so the VM runs no Lua code meanwhile. Reads are
** raw (lua_next, no metamethod) and allocate nothing in the VM (the memory profiler may
** still wrap its allocator). The names wait in a thread-local list for the extension that
** the same thread's stop writes (agent_write_extension), so that a stop on another thread
** writes none rather than another state's. Modules loaded after start are named as well:
** the scan runs at stop.
**
** Stops with no Lua call to run in (exit's, from os.exit or a C exit on the VM's thread; a
** terminating signal's, on termstop's thread while the VM's thread waits in the signal's
** handler) read the same tables from the VM's memory instead (agent_cnames_scan_vm): the
** CPU profiler's once its handler is done (through the sampler's model), the memory
** profiler's through its own (memprof.c): only while the VM's thread stands still, so that
** what is read is what the tables hold. The reads are checked (a thread interrupted inside
** a table's resize leaves some names unread, never a fault), and nothing is allocated: a
** signal's stop may not wait for an allocator lock the interrupted thread holds, so the
** names go into a fixed store, and are sorted without qsort (which may allocate).
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lua.h>

#include "agent/agent.h"
#include "stream/writer.h"
#include "vm/luajit.h"

/* Bounds on one scan: a program with a huge _G is scanned in part. */
#define SCAN_MAX   (1u << 20) /* fields looked at */
#define NAMES_MAX  65536u     /* C functions found */
#define NAME_MAX_LEN 256u     /* module.field, longer ones skipped */
#define JOIN_MAX   4u

/* What names a function: a module's field, a global (_G's), a preload loader. */
enum kind { K_MODULE, K_GLOBAL, K_PRELOAD };

#define PRELOAD_OPEN "package.preload[\""
#define PRELOAD_CLOSE "\"]"

struct found {
	uint64_t addr;
	uint32_t off, len; /* in the name buffer */
	int global;        /* from _G */
};

static _Thread_local struct {
	struct found *v;
	size_t n, cap;
	char *buf;
	size_t blen, bcap;
	int ready; /* scanned for this thread's next stop */
	int fixed; /* v and buf are the fixed store: never grown nor freed */
} pend;

/* agent_cnames_scan_vm's stores, one per profiler: a profiler's stops are serialised, and
 * a CPU and a memory profile's may overlap (a signal's stop of one on termstop's thread
 * while the other's stops on the VM's thread, or on another thread of a C host). */
#define FIXED_NAMES 8192u
static struct {
	struct found v[FIXED_NAMES];
	char buf[FIXED_NAMES * 24];
} fixed[2];

void agent_cnames_clear(void)
{
	if (!pend.fixed) {
		free(pend.v);
		free(pend.buf);
	}
	memset(&pend, 0, sizeof(pend));
}

/* Whether a preload key reads right between quotes unescaped. */
static int quotable(const char *key, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)key[i] < 0x20 || key[i] == 0x7f || key[i] == '"' || key[i] == '\\')
			return 0;
	return 1;
}

/* Adds `mod.field` (K_MODULE), `field` (K_GLOBAL) or `package.preload["field"]`
 * (K_PRELOAD; mod unused) as a name of addr. */
static void add(uint64_t addr, const char *mod, size_t mlen, const char *field, size_t flen,
		enum kind kind)
{
	size_t len = kind == K_GLOBAL ? flen
		     : kind == K_PRELOAD ? sizeof(PRELOAD_OPEN PRELOAD_CLOSE) - 1 + flen
					 : mlen + 1 + flen;
	if (len > NAME_MAX_LEN || pend.n >= NAMES_MAX || (kind == K_PRELOAD && !quotable(field, flen)))
		return;
	if (pend.fixed && (pend.n == pend.cap || pend.blen + len > pend.bcap))
		return;
	if (pend.n == pend.cap) {
		size_t cap = pend.cap ? pend.cap * 2 : 64;
		struct found *v = realloc(pend.v, cap * sizeof(*v));
		if (!v)
			return;
		pend.v = v;
		pend.cap = cap;
	}
	if (pend.blen + len > pend.bcap) {
		size_t cap = pend.bcap ? pend.bcap : 4096;
		while (cap < pend.blen + len)
			cap *= 2;
		char *b = realloc(pend.buf, cap);
		if (!b)
			return;
		pend.buf = b;
		pend.bcap = cap;
	}
	char *d = pend.buf + pend.blen;
	if (kind == K_MODULE) {
		memcpy(d, mod, mlen);
		d[mlen] = '.';
		d += mlen + 1;
	} else if (kind == K_PRELOAD) {
		memcpy(d, PRELOAD_OPEN, sizeof(PRELOAD_OPEN) - 1);
		d += sizeof(PRELOAD_OPEN) - 1;
	}
	memcpy(d, field, flen);
	if (kind == K_PRELOAD)
		memcpy(d + flen, PRELOAD_CLOSE, sizeof(PRELOAD_CLOSE) - 1);
	pend.v[pend.n++] = (struct found){ addr, (uint32_t)pend.blen, (uint32_t)len,
					   kind == K_GLOBAL };
	pend.blen += len;
}

/* The string at idx (a string value, not converted), or NULL. */
static const char *str_at(lua_State *L, int idx, size_t *len)
{
	return lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, len) : NULL;
}

/* Adds the names of the C functions among the string-keyed fields of the table on top of
** L's stack (of module mod, named as kind says); in package's (package), those of its
** preload table too. 0 once SCAN_MAX fields have been looked at, with the stack as it
** was; else 1. */
static int scan_fields(lua_State *L, int ffid_off, const char *mod, size_t mlen,
		       enum kind kind, int package, size_t *looked)
{
	int t = lua_gettop(L);
	lua_pushnil(L);
	while (lua_next(L, t)) {
		size_t flen;
		const char *field = str_at(L, -2, &flen);
		lua_CFunction f = field && lua_iscfunction(L, -1) ? lua_tocfunction(L, -1) : NULL;
		const uint8_t *fn = lua_topointer(L, -1);
		/* Builtins (a fast function id) are the VM's, named by it. */
		if (f && fn && fn[ffid_off] == 1)
			add((uint64_t)(uintptr_t)f, mod, mlen, field, flen, kind);
		else if (package && field && flen == 7 && !memcmp(field, "preload", 7) &&
			 lua_type(L, -1) == LUA_TTABLE &&
			 !scan_fields(L, ffid_off, NULL, 0, K_PRELOAD, 0, looked)) {
			lua_settop(L, t);
			return 0;
		}
		lua_pop(L, 1);
		if (++*looked >= SCAN_MAX) {
			lua_settop(L, t);
			return 0;
		}
	}
	return 1;
}

/* The scan proper: agent_cnames_scan's, between its marks of the agent's own work. */
static void scan(lua_State *L)
{
	int ffid_off = agent_vm_ffid_offset();
	if (ffid_off < 0)
		ffid_off = agent_memprof_ffid_offset();
	if (ffid_off < 0 || !lua_checkstack(L, 10))
		return;
	int top = lua_gettop(L), found = 0;
	size_t looked = 0, len;
	const char *s;
	/* package.loaded: the registry's _LOADED, found by iterating rather than by
	 * lua_getfield, which would make the key's string. */
	lua_pushnil(L);
	while (lua_next(L, LUA_REGISTRYINDEX)) {
		if ((s = str_at(L, -2, &len)) && len == 7 && !memcmp(s, "_LOADED", 7) &&
		    lua_type(L, -1) == LUA_TTABLE) {
			found = 1;
			break;
		}
		lua_pop(L, 1);
		if (++looked >= SCAN_MAX)
			break;
	}
	if (!found) {
		lua_settop(L, top);
		return;
	}
	int loaded = lua_gettop(L);
	lua_pushnil(L);
	while (looked < SCAN_MAX && lua_next(L, loaded)) {
		size_t mlen;
		const char *mod = str_at(L, -2, &mlen);
		if (mod && lua_type(L, -1) == LUA_TTABLE) {
			enum kind kind = mlen == 2 && !memcmp(mod, "_G", 2) ? K_GLOBAL : K_MODULE;
			int package = mlen == 7 && !memcmp(mod, "package", 7);
			if (!scan_fields(L, ffid_off, mod, mlen, kind, package, &looked))
				break;
		}
		lua_pop(L, 1);
	}
	lua_settop(L, top);
	pend.ready = 1;
}

void agent_cnames_scan(lua_State *L)
{
	/* Called while the CPU profiler samples this thread (before its stop, which writes
	 * the names): a long package.loaded made the scan a visible share of the profile.
	 * The names of an earlier scan are freed inside the mark too (a sample there was
	 * seen in CI). */
	agent_sysprof_own_work(1);
	agent_cnames_clear();
	scan(L);
	agent_sysprof_own_work(0);
}

/* The scan of the VM's memory: the registry's _LOADED, each module's table in it. */
struct vscan {
	const struct lp_lj_vm *vm;
	const struct lp_mem *m;
	size_t looked;
	uint64_t loaded;                /* package.loaded, once found */
	char mod[NAME_MAX_LEN + 1];     /* the module being scanned */
	size_t mlen;
	enum kind kind;                 /* how its fields name functions */
	int package;                    /* it is package: its preload is scanned too */
};

/* String TValue tv into buf (at most NAME_MAX_LEN bytes): its length, or -1. */
static long vstr(const struct vscan *v, uint64_t tv, char *buf)
{
	size_t len;
	if ((tv >> 47) != LP_LJ_ITYPE_STR ||
	    lp_lj_str(v->vm, v->m, tv & LP_LJ_GCVMASK, buf, NAME_MAX_LEN + 1, &len) != LP_LJ_OK ||
	    len > NAME_MAX_LEN)
		return -1;
	return (long)len;
}

static int vfield(uint64_t key, uint64_t val, void *arg)
{
	struct vscan *v = arg;
	const struct lp_lj_layout *lay = v->vm->lay;
	char field[NAME_MAX_LEN + 1];
	uint8_t ffid;
	uint64_t f;
	long flen;
	if (v->package && (val >> 47) == LP_LJ_ITYPE_TAB && vstr(v, key, field) == 7 &&
	    !memcmp(field, "preload", 7)) {
		enum kind kind = v->kind;
		v->package = 0;
		v->kind = K_PRELOAD;
		(void)lp_lj_tab_each(v->vm, v->m, val & LP_LJ_GCVMASK, vfield, v, SCAN_MAX,
				     &v->looked);
		v->package = 1;
		v->kind = kind;
		return 0;
	}
	/* Builtins (a fast function id) are the VM's, named by it. */
	if ((val >> 47) != LP_LJ_ITYPE_FUNC || (flen = vstr(v, key, field)) < 0 ||
	    lp_mem_u8(v->m, (val & LP_LJ_GCVMASK) + lay->fn_ffid, &ffid) || ffid != LP_LJ_FFID_C ||
	    lp_mem_u64(v->m, (val & LP_LJ_GCVMASK) + lay->fn_f, &f) || !f)
		return 0;
	add(f, v->mod, v->mlen, field, (size_t)flen, v->kind);
	return 0;
}

static int vmodule(uint64_t key, uint64_t val, void *arg)
{
	struct vscan *v = arg;
	long mlen;
	if ((val >> 47) != LP_LJ_ITYPE_TAB || (mlen = vstr(v, key, v->mod)) < 0)
		return 0;
	v->mlen = (size_t)mlen;
	v->kind = mlen == 2 && !memcmp(v->mod, "_G", 2) ? K_GLOBAL : K_MODULE;
	v->package = mlen == 7 && !memcmp(v->mod, "package", 7);
	(void)lp_lj_tab_each(v->vm, v->m, val & LP_LJ_GCVMASK, vfield, v, SCAN_MAX, &v->looked);
	return 0;
}

static int vloaded(uint64_t key, uint64_t val, void *arg)
{
	struct vscan *v = arg;
	char name[NAME_MAX_LEN + 1];
	if ((val >> 47) != LP_LJ_ITYPE_TAB || vstr(v, key, name) != 7 || memcmp(name, "_LOADED", 7))
		return 0;
	v->loaded = val & LP_LJ_GCVMASK;
	return 1;
}

void agent_cnames_scan_vm(const struct lp_lj_vm *vm, const struct lp_mem *m, int memory)
{
	agent_cnames_clear();
	pend.fixed = 1;
	pend.v = fixed[!!memory].v;
	pend.cap = FIXED_NAMES;
	pend.buf = fixed[!!memory].buf;
	pend.bcap = sizeof(fixed[0].buf);
	struct vscan v = { .vm = vm, .m = m };
	uint64_t reg;
	if (lp_lj_registry(vm, m, &reg) != LP_LJ_OK)
		return;
	(void)lp_lj_tab_each(vm, m, reg, vloaded, &v, SCAN_MAX, &v.looked);
	if (!v.loaded)
		return;
	(void)lp_lj_tab_each(vm, m, v.loaded, vmodule, &v, SCAN_MAX, &v.looked);
	pend.ready = 1;
}

int agent_cnames_ready(void)
{
	return pend.ready;
}

static int found_cmp(const void *a, const void *b)
{
	const struct found *x = a, *y = b;
	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	if (x->global != y->global)
		return x->global - y->global;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	size_t n = x->len;
	int c = memcmp(pend.buf + x->off, pend.buf + y->off, n);
	return c;
}

/* Heapsort by found_cmp: qsort may allocate (agent_cnames_scan_vm's contract). */
static void sift(struct found *v, size_t i, size_t n)
{
	for (size_t c; (c = 2 * i + 1) < n; i = c) {
		if (c + 1 < n && found_cmp(&v[c], &v[c + 1]) < 0)
			c++;
		if (found_cmp(&v[i], &v[c]) >= 0)
			break;
		struct found t = v[i];
		v[i] = v[c];
		v[c] = t;
	}
}

static void sort_found(struct found *v, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift(v, i, n);
	for (size_t end = n; end-- > 1;) {
		struct found t = v[0];
		v[0] = v[end];
		v[end] = t;
		sift(v, 0, end);
	}
}

void agent_cnames_write(struct lp_wbuf *w)
{
	if (!pend.ready || !pend.n)
		return;
	sort_found(pend.v, pend.n);
	char name[JOIN_MAX * (NAME_MAX_LEN + 1)];
	for (size_t i = 0, j; i < pend.n; i = j) {
		size_t len = 0;
		unsigned k = 0;
		for (j = i; j < pend.n && pend.v[j].addr == pend.v[i].addr; j++) {
			const struct found *f = &pend.v[j];
			/* _G's names only where no module names the function; each name once. */
			if ((f->global && !pend.v[i].global) || k == JOIN_MAX ||
			    (j > i && f->len == pend.v[j - 1].len &&
			     !memcmp(pend.buf + f->off, pend.buf + pend.v[j - 1].off, f->len)))
				continue;
			if (k++)
				name[len++] = '/';
			memcpy(name + len, pend.buf + f->off, f->len);
			len += f->len;
		}
		lp_write_ext_cname(w, pend.v[i].addr, name, len);
	}
}
