/*
** A C module for memprof_luajit.sh and memprof_sampled.sh. Loaded with require only after
** memprof.start, its newud allocates a 100-byte userdata, which the memory profiler must
** charge to the function by address and name by its symbol (memprof_cmod_newud), proving
** that a library loaded while profiling is symbolized. Its resume(co) runs a coroutine
** with the C API's lua_resume: what the coroutine allocates belongs to its own lines;
** resume_in(t) resumes t[1] the same way (a scheduler whose argument names no thread).
** keepalloc() keeps the state's allocator as lua_getallocf gives it (the profiler's wrapper
** while one runs), and usealloc(n) allocates and frees n blocks through what it kept, as
** libraries that cache the allocator do, possibly after the profile stopped. For the CPU
** profiler (shapes_luajit.sh), spin(secs) burns CPU time in two nested C frames of the
** module, from the moment it is required: the walks through them need the unwind table
** of an object loaded while sampling; resume_spin(co, secs) does so after lua_resume(co),
** while the VM's current thread is still the coroutine, which has yielded. dlcall(path,
** name) loads a library, calls its lua_CFunction name and unloads it again (a plugin
** reloaded): it returns what the function returned and the function's address.
** fail() raises an error from C (luaL_error).
*/
#include <dlfcn.h>
#include <time.h>

#include <lua.h>
#include <lauxlib.h>

/* Not static: the symbol the report must show. */
int memprof_cmod_newud(lua_State *L);
int memprof_cmod_resume(lua_State *L);
int memprof_cmod_resume_alloc(lua_State *L);
int memprof_cmod_resume_in_alloc(lua_State *L);
int memprof_cmod_newthread_resume(lua_State *L);
int luaopen_memprof_cmod(lua_State *L);
int memprof_cmod_spin(lua_State *L);
int memprof_cmod_resume_spin(lua_State *L);
double memprof_cmod_spin_mid(double x);
double memprof_cmod_spin_leaf(double x);

static lua_Alloc kept_f;
static void *kept_ud;

int memprof_cmod_newud(lua_State *L)
{
	lua_newuserdata(L, 100);
	return 1;
}

/* fail(): raises an error from C (luaL_error), as a C module rejecting its input does. */
static int fail(lua_State *L)
{
	return luaL_error(L, "memprof_cmod failed");
}

/* resume(co): lua_resume(co, 0); returns its status (0 finished, LUA_YIELD yielded). */
int memprof_cmod_resume(lua_State *L)
{
	lua_State *co = lua_tothread(L, 1);
	luaL_argcheck(L, co != NULL, 1, "coroutine expected");
	lua_pushinteger(L, lua_resume(co, 0));
	return 1;
}

/* resume_alloc(co): lua_resume(co, 0), then a table of its own (lua_createtable(L, 30, 0)),
 * made while the VM's current thread is still the coroutine, which has yielded. */
int memprof_cmod_resume_alloc(lua_State *L)
{
	lua_State *co = lua_tothread(L, 1);
	luaL_argcheck(L, co != NULL, 1, "coroutine expected");
	int st = lua_resume(co, 0);
	lua_createtable(L, 30, 0);
	lua_pushinteger(L, st);
	return 2;
}

/* resume_in(t): lua_resume(t[1], 0), a scheduler keeping its coroutines in a table: its
 * first argument names no thread. */
static int resume_in(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_rawgeti(L, 1, 1);
	lua_State *co = lua_tothread(L, -1);
	luaL_argcheck(L, co != NULL, 1, "t[1]: coroutine expected");
	lua_pushinteger(L, lua_resume(co, 0));
	return 1;
}

static int dlcall(lua_State *L)
{
	const char *path = luaL_checkstring(L, 1), *name = luaL_checkstring(L, 2);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return luaL_error(L, "dlopen %s: %s", path, dlerror());
	lua_CFunction f = (lua_CFunction)dlsym(h, name);
	if (!f) {
		dlclose(h);
		return luaL_error(L, "%s: no %s", path, name);
	}
	lua_pushcfunction(L, f);
	lua_call(L, 0, 1);
	dlclose(h);
	lua_pushnumber(L, (lua_Number)(size_t)f);
	return 2;
}

/* resume_in_alloc(t): lua_resume(t[1], 0), then a table of its own (lua_createtable(L,
 * 30, 0)): no argument names the thread it resumed. */
int memprof_cmod_resume_in_alloc(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	lua_rawgeti(L, 1, 1);
	lua_State *co = lua_tothread(L, -1);
	luaL_argcheck(L, co != NULL, 1, "t[1]: coroutine expected");
	int st = lua_resume(co, 0);
	lua_createtable(L, 30, 0);
	lua_pushinteger(L, st);
	return 2;
}

/* newthread_resume(f): f run in a thread of its own (lua_newthread) by lua_resume, then a
 * table of its own (lua_createtable(L, 30, 0)); returns the table and the status. */
int memprof_cmod_newthread_resume(lua_State *L)
{
	lua_State *co = lua_newthread(L);
	lua_pushvalue(L, 1);
	lua_xmove(L, co, 1);
	int st = lua_resume(co, 0);
	lua_createtable(L, 30, 0);
	lua_pushinteger(L, st);
	return 2;
}

static int keepalloc(lua_State *L)
{
	kept_f = lua_getallocf(L, &kept_ud);
	return 0;
}

/* usealloc(n): n blocks of 64 bytes allocated, written and freed; returns how many. */
static int usealloc(lua_State *L)
{
	lua_Integer n = luaL_checkinteger(L, 1), done = 0;
	luaL_argcheck(L, kept_f != NULL, 1, "keepalloc() first");
	for (lua_Integer i = 0; i < n; i++) {
		unsigned char *p = kept_f(kept_ud, NULL, 0, 64);
		if (!p)
			continue;
		p[0] = p[63] = (unsigned char)i;
		kept_f(kept_ud, p, 64, 0);
		done++;
	}
	lua_pushinteger(L, done);
	return 1;
}

__attribute__((noinline)) double memprof_cmod_spin_leaf(double x)
{
	for (int i = 0; i < 20000; i++)
		x = x * 1.0000001 + 1e-9;
	return x;
}

__attribute__((noinline)) double memprof_cmod_spin_mid(double x)
{
	return memprof_cmod_spin_leaf(x) + 1.0; /* not a tail call: a frame of its own */
}

/* spin(secs): CPU time in memprof_cmod_spin -> _mid -> _leaf; returns a number. */
int memprof_cmod_spin(lua_State *L)
{
	double secs = luaL_checknumber(L, 1), x = 0;
	clock_t end = clock() + (clock_t)(secs * CLOCKS_PER_SEC);
	while (clock() < end)
		x = memprof_cmod_spin_mid(x);
	lua_pushnumber(L, x);
	return 1;
}

/* resume_spin(co, secs): lua_resume(co, 0), then spin(secs)'s work; returns the status. */
int memprof_cmod_resume_spin(lua_State *L)
{
	lua_State *co = lua_tothread(L, 1);
	luaL_argcheck(L, co != NULL, 1, "coroutine expected");
	double secs = luaL_checknumber(L, 2), x = 0;
	int st = lua_resume(co, 0);
	clock_t end = clock() + (clock_t)(secs * CLOCKS_PER_SEC);
	while (clock() < end)
		x = memprof_cmod_spin_mid(x);
	lua_pushinteger(L, x >= 0 ? st : -1);
	return 1;
}

int luaopen_memprof_cmod(lua_State *L)
{
	lua_createtable(L, 0, 16);
	lua_pushcfunction(L, memprof_cmod_resume_spin);
	lua_setfield(L, -2, "resume_spin");
	lua_pushcfunction(L, memprof_cmod_spin);
	lua_setfield(L, -2, "spin");
	lua_pushcfunction(L, keepalloc);
	lua_setfield(L, -2, "keepalloc");
	lua_pushcfunction(L, dlcall);
	lua_setfield(L, -2, "dlcall");
	lua_pushcfunction(L, memprof_cmod_resume_in_alloc);
	lua_setfield(L, -2, "resume_in_alloc");
	lua_pushcfunction(L, memprof_cmod_newthread_resume);
	lua_setfield(L, -2, "newthread_resume");
	lua_pushcfunction(L, resume_in);
	lua_setfield(L, -2, "resume_in");
	lua_pushcfunction(L, usealloc);
	lua_setfield(L, -2, "usealloc");
	lua_pushcfunction(L, memprof_cmod_newud);
	lua_setfield(L, -2, "newud");
	lua_pushcfunction(L, memprof_cmod_resume);
	lua_setfield(L, -2, "resume");
	lua_pushcfunction(L, memprof_cmod_resume_alloc);
	lua_setfield(L, -2, "resume_alloc");
	lua_pushcfunction(L, fail);
	lua_setfield(L, -2, "fail");
	return 1;
}
