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
** needs no guard against cycles). Several names of one entry (cjson.safe's encode and
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
** (the C API, a signal's, exit's) writes none rather than another state's. Modules loaded
** after start are named as well: the scan runs at stop.
*/
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <lua.h>

#include "agent/agent.h"
#include "stream/writer.h"

/* Bounds on one scan: a program with a huge _G is scanned in part. */
#define SCAN_MAX   (1u << 20) /* fields looked at */
#define NAMES_MAX  65536u     /* C functions found */
#define NAME_MAX_LEN 256u     /* module.field, longer ones skipped */
#define JOIN_MAX   4u

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
} pend;

void agent_cnames_clear(void)
{
	free(pend.v);
	free(pend.buf);
	memset(&pend, 0, sizeof(pend));
}

static void add(uint64_t addr, const char *mod, size_t mlen, const char *field, size_t flen,
		int global)
{
	size_t len = global ? flen : mlen + 1 + flen;
	if (len > NAME_MAX_LEN || pend.n >= NAMES_MAX)
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
	if (!global) {
		memcpy(d, mod, mlen);
		d[mlen] = '.';
		d += mlen + 1;
	}
	memcpy(d, field, flen);
	pend.v[pend.n++] = (struct found){ addr, (uint32_t)pend.blen, (uint32_t)len, global };
	pend.blen += len;
}

/* The string at idx (a string value, not converted), or NULL. */
static const char *str_at(lua_State *L, int idx, size_t *len)
{
	return lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, len) : NULL;
}

void agent_cnames_scan(lua_State *L)
{
	agent_cnames_clear();
	int ffid_off = agent_vm_ffid_offset();
	if (ffid_off < 0)
		ffid_off = agent_memprof_ffid_offset();
	if (ffid_off < 0 || !lua_checkstack(L, 8))
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
			int global = mlen == 2 && !memcmp(mod, "_G", 2), t = lua_gettop(L);
			lua_pushnil(L);
			while (lua_next(L, t)) {
				size_t flen;
				const char *field = str_at(L, -2, &flen);
				lua_CFunction f = field && lua_iscfunction(L, -1)
						? lua_tocfunction(L, -1) : NULL;
				const uint8_t *fn = lua_topointer(L, -1);
				/* Builtins (a fast function id) are the VM's, named by it. */
				if (f && fn && fn[ffid_off] == 1)
					add((uint64_t)(uintptr_t)f, mod, mlen, field, flen, global);
				lua_pop(L, 1);
				if (++looked >= SCAN_MAX) {
					lua_pop(L, 1);
					break;
				}
			}
		}
		lua_pop(L, 1);
	}
	lua_settop(L, top);
	pend.ready = 1;
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

void agent_cnames_write(struct lp_wbuf *w)
{
	if (!pend.ready || !pend.n)
		return;
	qsort(pend.v, pend.n, sizeof(*pend.v), found_cmp);
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
