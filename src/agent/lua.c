/*
** Lua binding of the agent: require "luaprof" -> { sysprof = { start, stop, report, stats } }.
**
** The functions, their defaults, messages and errno values are those of Tarantool's
** misc.sysprof (lib_misc.c), so code written for Tarantool runs unchanged; when the global
** `misc` has no `sysprof`, the module installs itself there. Runtime failures return
** nil, message, errno; only an argument of the wrong type raises.
**
** `luaprof record` loads the module through LUA_INIT and passes its settings in the
** environment (LUAPROF_RECORD); see autostart().
*/
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>

#include "agent/agent.h"
#include "util/size.h"
#include "agent/pfile.h"

/*
** The functions of the Lua 5.1 C API that PUC Lua 5.2 and later lack (macros over
** lua_pcallk, lua_rotate and others there, or gone). Weak, so that the module also loads in
** those (`lua5.4`, and hosts that embed them: haproxy, rpm, vlc, prosody...) and says that
** it cannot profile them (puc_later), instead of the loader's "undefined symbol: lua_pcall"
** (which under `luaprof record` ended the program in its LUA_INIT, before the script ran).
** Nothing else of the 5.1 API may run on a later VM: its pseudo-indices differ.
*/
#pragma weak lua_call
#pragma weak lua_pcall
#pragma weak lua_cpcall
#pragma weak luaL_register
#pragma weak lua_insert
#pragma weak lua_remove
#pragma weak lua_tonumber
#pragma weak lua_newuserdata

#define DEFAULT_INTERVAL_MS 10
#define DEFAULT_PATH "sysprof.bin"
#define MSG_MISUSE   "profiler misuse"
#define MSG_RUNNING  "profiler is running already"
/* Tarantool's message, and why this state did not know (sysbench's threads, say). */
#define MSG_RUNNING_OTHER "profiler is running already (in another Lua state)"
#define MSG_NOTRUN   "profiler is not running"
#define MSG_BADMODE  "profiler mode must be 'D', 'L' or 'C'"
#define MSG_BADINTV  "profiler interval must be greater than 1"
#define MSG_BADPATH  "profiler path should be a string"
#define MSG_BADCLOCK "profiler clock must be 'cpu' or 'wall'"

/* The path of the running (or last) Lua-API profile, for I/O messages, and the run it
 * belongs to: a profile started since through the C API (its own writer, no path) must
 * not be named after it. */
static char cur_path[4096];
static uint64_t cur_run;

/* -- sysprof.start / stop / report ------------------------------------------------------ */

static int push_fail(lua_State *L, const char *msg, int e)
{
	lua_pushnil(L);
	lua_pushstring(L, msg);
	lua_pushinteger(L, e);
	return 3;
}

static int push_misuse(lua_State *L, const char *detail)
{
	lua_pushnil(L);
	if (detail && *detail)
		lua_pushfstring(L, MSG_MISUSE ": %s", detail);
	else
		lua_pushstring(L, MSG_MISUSE);
	lua_pushinteger(L, EINVAL);
	return 3;
}

/* luaL_fileresult's shape: nil, "<path>: <strerror>", errno. */
static int push_ioerr(lua_State *L, const char *path, int e)
{
	lua_pushnil(L);
	if (path && *path)
		lua_pushfstring(L, "%s: %s", path, strerror(e));
	else
		lua_pushstring(L, strerror(e));
	lua_pushinteger(L, e);
	return 3;
}

/* agent_pfile_open failed (errno e): the Lua results. */
static int push_open_fail(lua_State *L, const char *path, int e)
{
	/* open("") says only ENOENT: name the mistake, with the errno Tarantool's gives. */
	if (!*path) {
		lua_pushnil(L);
		lua_pushstring(L, "the profile's path is empty (a file name is needed)");
		lua_pushinteger(L, e);
		return 3;
	}
	if (e == EBUSY) {
		lua_pushnil(L);
		lua_pushfstring(L, "%s: a running profile writes to this file", path);
		lua_pushinteger(L, e);
		return 3;
	}
	struct stat st;
	if (e == ENXIO && stat(path, &st) == 0 && S_ISFIFO(st.st_mode)) {
		lua_pushnil(L);
		lua_pushfstring(L, "%s: a FIFO that no process reads (open it for reading "
				"first: the profile is written as it runs)", path);
		lua_pushinteger(L, e);
		return 3;
	}
	return e == ENOMEM ? push_fail(L, "not enough memory", ENOMEM) : push_ioerr(L, path, e);
}

/* Results of a profiler's start / stop as Tarantool's Lua API gives them: true, or nil,
 * message, errno. e is errno as the call left it; err the profiler's one-line reason. */
static int push_start_rc(lua_State *L, int rc, int e, const char *path, const char *err)
{
	switch (rc) {
	case LUAPROF_PROFILE_SUCCESS:
		lua_pushboolean(L, 1);
		return 1;
	case LUAPROF_PROFILE_ERRUSE:
		return push_misuse(L, err);
	case LUAPROF_PROFILE_ERRRUN:
		return push_fail(L, MSG_RUNNING, EINVAL);
	case LUAPROF_PROFILE_ERRIO:
		return push_ioerr(L, path, e);
	default:
		return push_fail(L, err, e ? e : ENOMEM);
	}
}

static int push_stop_rc(lua_State *L, int rc, int e, const char *path, const char *err)
{
	switch (rc) {
	case LUAPROF_PROFILE_SUCCESS:
		lua_pushboolean(L, 1);
		return 1;
	case LUAPROF_PROFILE_ERRRUN:
		return push_fail(L, MSG_NOTRUN, EINVAL);
	case LUAPROF_PROFILE_ERRUSE:
		return push_misuse(L, err);
	default:
		return push_ioerr(L, path, e ? e : EIO);
	}
}

struct start_args {
	struct luaprof_sysprof_options opt;
	const char *path;
};

/* Parses the options table at index 1; returns NULL or the misuse detail. */
static const char *parse_opts(lua_State *L, struct start_args *a)
{
	memset(a, 0, sizeof(*a));
	a->opt.mode = LUAPROF_SYSPROF_DEFAULT;
	a->opt.interval = DEFAULT_INTERVAL_MS;
	a->path = DEFAULT_PATH;
	if (lua_gettop(L) == 0)
		return NULL;
	luaL_checktype(L, 1, LUA_TTABLE);

	lua_getfield(L, 1, "mode");
	if (!lua_isnil(L, -1)) {
		size_t len;
		const char *m = lua_type(L, -1) == LUA_TSTRING ? lua_tolstring(L, -1, &len) : NULL;
		if (!m || len != 1)
			return MSG_BADMODE;
		switch (*m) {
		case 'D': a->opt.mode = LUAPROF_SYSPROF_DEFAULT; break;
		case 'L': a->opt.mode = LUAPROF_SYSPROF_LEAF; break;
		case 'C': a->opt.mode = LUAPROF_SYSPROF_CALLGRAPH; break;
		default: return MSG_BADMODE;
		}
	}
	lua_pop(L, 1);

	lua_getfield(L, 1, "interval");
	if (!lua_isnil(L, -1)) {
		if (lua_type(L, -1) != LUA_TNUMBER)
			return MSG_BADINTV;
		lua_Number v = lua_tonumber(L, -1);
		if (!(v >= 1)) /* NaN too; Tarantool's message, although 1 is accepted */
			return MSG_BADINTV;
		if (v > 2147483647.0) /* Tarantool reads an int32 */
			return "profiler interval must be at most 2147483647 (ms)";
		a->opt.interval = (uint64_t)v;
	}
	lua_pop(L, 1);

	lua_getfield(L, 1, "clock");
	if (!lua_isnil(L, -1)) {
		const char *c = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
		if (!strcmp(c, "cpu"))
			a->opt.clock = LUAPROF_CLOCK_CPU;
		else if (!strcmp(c, "wall"))
			a->opt.clock = LUAPROF_CLOCK_WALL;
		else
			return MSG_BADCLOCK;
	}
	lua_pop(L, 1);

	/* As in Tarantool, the path matters only when there is a stream. */
	if (a->opt.mode != LUAPROF_SYSPROF_DEFAULT) {
		lua_getfield(L, 1, "path");
		if (!lua_isnil(L, -1)) {
			if (lua_type(L, -1) != LUA_TSTRING)
				return MSG_BADPATH;
			a->path = lua_tostring(L, -1); /* anchored by the options table */
		}
		lua_pop(L, 1);
	}
	/* After the known options, in Tarantool's order: a misspelt one (`mdoe`, `pth`) must
	 * not silently give mode D, no file, or the default path. Tarantool's misc.sysprof
	 * reads these four keys alone (clock is luaprof's), so its correct code runs as is. */
	lua_pushnil(L);
	while (lua_next(L, 1)) {
		lua_pop(L, 1);
		const char *k = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
		if (k && (!strcmp(k, "mode") || !strcmp(k, "interval") || !strcmp(k, "path") ||
			  !strcmp(k, "clock")))
			continue;
		lua_pushvalue(L, -1); /* lua_tostring converts a number key in place: a copy */
		k = lua_tostring(L, -1);
		return lua_pushfstring(L, "unknown sysprof option '%s' (mode, interval, path, "
				       "clock)", k ? k : luaL_typename(L, -1));
	}
	return NULL;
}

/*
** agent_pfile_open for a start: a file it makes is named to termstop.c until the start
** names its thread (agent_termstop_newfile), so that a terminating signal before that
** removes it as it takes its course (it left the file empty). The signals are held on
** this thread while the file is made and named, so that none comes in between.
*/
static struct agent_pfile *open_for_start(const char *path, int threaded)
{
	sigset_t term, old;
	agent_termstop_sent(&term);
	pthread_sigmask(SIG_BLOCK, &term, &old);
	int created;
	struct agent_pfile *f = agent_pfile_open(path, threaded, &created);
	int e = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	errno = e;
	return f;
}

/* Starts with parsed options; pushes the Lua results. */
static int start_with(lua_State *L, struct start_args *a)
{
	if (agent_running())
		return push_fail(L, agent_vm_attached_to(L) ? MSG_RUNNING : MSG_RUNNING_OTHER,
				 EINVAL);
	struct agent_pfile *fc = NULL;
	if (a->opt.mode != LUAPROF_SYSPROF_DEFAULT) {
		/* The CPU profiler writes from a thread of its own. */
		if (!(fc = open_for_start(a->path, 0)))
			return push_open_fail(L, a->path, errno);
		a->opt.buf = agent_pfile_buf(fc, &a->opt.len);
		a->opt.ctx = fc;
	}
	/* From here on agent_pfile_close owns fc, whatever happens; a failed start's close
	 * removes the file that open created (agent_pfile_refused). */
	int rc = agent_start(L, &a->opt, agent_pfile_write, agent_pfile_close);
	int e = errno;
	agent_termstop_newfile(NULL);
	/* The path of the profile that runs: a start refused in another thread's state
	 * meanwhile must not rename it in stop's messages. */
	if (rc == LUAPROF_PROFILE_SUCCESS) {
		snprintf(cur_path, sizeof(cur_path), "%s", fc ? a->path : "");
		cur_run = agent_run_id();
	}
	/* Started in another state since the check above: say so, as the check would have. */
	if (rc == LUAPROF_PROFILE_ERRRUN)
		return push_fail(L, agent_vm_attached_to(L) ? MSG_RUNNING : MSG_RUNNING_OTHER,
				 EINVAL);
	return push_start_rc(L, rc, e, a->path, luaprof_sysprof_error());
}

/* local ok, err, errno = sysprof.start{mode=, interval=, path=, clock=} */
static int l_start(lua_State *L)
{
	struct start_args a;
	const char *bad = parse_opts(L, &a);
	if (bad)
		return push_misuse(L, bad);
	return start_with(L, &a);
}

/* local ok, err, errno = sysprof.stop() */
static int l_stop(lua_State *L)
{
	/* The names of C functions for the profile's extension (cnames.c): here the VM runs
	 * this call, on its thread. */
	if (agent_running() && agent_vm_attached_to(L))
		agent_cnames_scan(L);
	/* A profile the C API started writes through its host's writer: no path to name. */
	const char *path = agent_run_id() == cur_run ? cur_path : "";
	int rc = luaprof_sysprof_stop(L);
	int e = errno;
	agent_cnames_clear();
	errno = e;
	return push_stop_rc(L, rc, errno, path, luaprof_sysprof_error());
}

static void setnum(lua_State *L, const char *k, uint64_t v)
{
	lua_pushnumber(L, (lua_Number)v);
	lua_setfield(L, -2, k);
}

/* sysprof.report() -> {samples = N, vmstate = {INTERP = ..., ...}} */
static int l_report(lua_State *L)
{
	struct luaprof_sysprof_counters c;
	luaprof_sysprof_report(&c);
	lua_createtable(L, 0, 2);
	setnum(L, "samples", c.samples);
	lua_createtable(L, 0, 10);
	setnum(L, "INTERP", c.vmst_interp);
	setnum(L, "LFUNC", c.vmst_lfunc);
	setnum(L, "FFUNC", c.vmst_ffunc);
	setnum(L, "CFUNC", c.vmst_cfunc);
	setnum(L, "GC", c.vmst_gc);
	setnum(L, "EXIT", c.vmst_exit);
	setnum(L, "RECORD", c.vmst_record);
	setnum(L, "OPT", c.vmst_opt);
	setnum(L, "ASM", c.vmst_asm);
	setnum(L, "TRACE", c.vmst_trace);
	lua_setfield(L, -2, "vmstate");
	return 1;
}

/* sysprof.stats() -> {dropped, overruns, paced, truncated, bytes, handler = s, duration = s}
 * (luaprof extension) */
static int l_stats(lua_State *L)
{
	struct luaprof_sysprof_stats s;
	luaprof_sysprof_stats(&s);
	lua_createtable(L, 0, 5);
	setnum(L, "dropped", s.dropped);
	setnum(L, "overruns", s.overruns);
	setnum(L, "paced", s.paced);
	setnum(L, "truncated", s.truncated);
	setnum(L, "bytes", s.bytes);
	lua_pushnumber(L, (lua_Number)s.handler_ns / 1e9);
	lua_setfield(L, -2, "handler");
	uint64_t end = s.stopped_ns;
	if (!end && s.started_ns)
		end = agent_now_ns();
	lua_pushnumber(L, s.started_ns ? (lua_Number)(end - s.started_ns) / 1e9 : 0);
	lua_setfield(L, -2, "duration");
	return 1;
}

/* -- memprof.start / stop / report -------------------------------------------------------- */

static char mem_path[4096];
static uint64_t mem_run; /* as cur_run */

/* A sampling interval at idx: a whole number of bytes, or a string of one with K, M, G, T or
 * P (as `luaprof record --sample` takes it), from 1 to 2^50. 0, or -1. */
static int parse_size(lua_State *L, int idx, uint64_t *out)
{
	if (lua_type(L, idx) == LUA_TSTRING)
		return lp_size_parse(lua_tostring(L, idx), 1ull << 50, out);
	if (lua_type(L, idx) != LUA_TNUMBER)
		return -1;
	lua_Number n = lua_tonumber(L, idx);
	if (!(n >= 1 && n <= 0x1p50) || n != (lua_Number)(uint64_t)n)
		return -1;
	*out = (uint64_t)n;
	return 0;
}

/* local ok, err, errno = memprof.start(path [, {sample = true | bytes | "512K"}]) */
static int l_mem_start(lua_State *L)
{
	/* No file name: "memprof.bin", as Tarantool's since 2025. Named here: luaL_checkstring's
	 * message names the function from the call site, '?' when it was reached through a
	 * local. */
	if (!lua_isnoneornil(L, 1) && !lua_isstring(L, 1))
		return luaL_error(L, "bad argument #1 to 'memprof.start' (file name expected, got %s)",
				  luaL_typename(L, 1));
	const char *path = lua_isnoneornil(L, 1) ? "memprof.bin" : lua_tostring(L, 1);
	uint64_t sample = 0;
	if (!lua_isnoneornil(L, 2)) {
		if (!lua_istable(L, 2))
			return push_misuse(L, "memprof options should be a table");
		/* Only `sample`: a misspelt option must not silently give exact mode. */
		lua_pushnil(L);
		while (lua_next(L, 2)) {
			lua_pop(L, 1);
			if (lua_type(L, -1) != LUA_TSTRING || strcmp(lua_tostring(L, -1), "sample")) {
				lua_pushvalue(L, -1);
				const char *k = lua_tostring(L, -1);
				return push_misuse(L, lua_pushfstring(L, "unknown memprof option '%s' "
						   "(the one option is sample)", k ? k : "?"));
			}
		}
		lua_getfield(L, 2, "sample");
		if (lua_isboolean(L, -1)) {
			sample = lua_toboolean(L, -1) ? LUAPROF_MEMPROF_SAMPLE_DEFAULT : 0;
		} else if (!lua_isnil(L, -1)) {
			if (parse_size(L, -1, &sample))
				return push_misuse(L, "memprof sample must be true, a whole number of "
						      "bytes from 1 to 2^50, or a string such as '512K', "
						      "'4M' or '1G'");
		}
		lua_pop(L, 1);
	}
	if (agent_memprof_running())
		return push_fail(L, agent_memprof_runs_in(L) ? MSG_RUNNING : MSG_RUNNING_OTHER,
				 EINVAL);
	/* Exact mode writes from inside the allocator: a writer thread takes write(2) off it. */
	struct agent_pfile *fc = open_for_start(path, 1);
	if (!fc)
		return push_open_fail(L, path, errno);
	struct luaprof_memprof_options opt = {
		.ctx = fc, .writer = agent_pfile_write, .on_stop = agent_pfile_close,
		.sample_bytes = sample,
	};
	opt.buf = agent_pfile_buf(fc, &opt.len);
	/* From here on agent_pfile_close owns fc, whatever happens; a failed start's close
	 * removes the file that open created (agent_pfile_refused). */
	int rc = luaprof_memprof_start(L, &opt);
	int e = errno;
	agent_termstop_newfile(NULL);
	/* As for the CPU profiler: the running profile's path, and the state it runs in. */
	if (rc == LUAPROF_PROFILE_SUCCESS) {
		agent_pfile_started(fc);
		snprintf(mem_path, sizeof(mem_path), "%s", path);
		mem_run = agent_memprof_run_id();
	}
	if (rc == LUAPROF_PROFILE_ERRRUN)
		return push_fail(L, agent_memprof_busy_in(L) ? MSG_RUNNING : MSG_RUNNING_OTHER,
				 EINVAL);
	return push_start_rc(L, rc, e, path, luaprof_memprof_error());
}

/* local ok, err, errno = memprof.stop() */
static int l_mem_stop(lua_State *L)
{
	if (agent_memprof_runs_in(L))
		agent_cnames_scan(L);
	/* A profile the C API started writes through its host's writer: no path to name. */
	const char *path = agent_memprof_run_id() == mem_run ? mem_path : "";
	int rc = luaprof_memprof_stop(L);
	int e = errno;
	agent_cnames_clear();
	errno = e;
	return push_stop_rc(L, rc, errno, path, luaprof_memprof_error());
}

/* memprof.report() -> {events, samples, allocs, frees, reallocs, alloc_bytes, free_bytes}
 * (luaprof extension; sampled mode counts its samples only: luaprof.h) */
static int l_mem_report(lua_State *L)
{
	struct luaprof_memprof_counters c;
	luaprof_memprof_report(&c);
	lua_createtable(L, 0, 7);
	setnum(L, "events", c.events);
	setnum(L, "samples", c.samples);
	setnum(L, "allocs", c.allocs);
	setnum(L, "frees", c.frees);
	setnum(L, "reallocs", c.reallocs);
	setnum(L, "alloc_bytes", c.alloc_bytes);
	setnum(L, "free_bytes", c.free_bytes);
	return 1;
}

/* -- The sentinel: stops the profile when its VM is closed ------------------------------ */

/* Registry key (a light userdata: reading it allocates nothing). */
static const char anchor_key = 0;

struct anchor {
	uint64_t run_id;
	int finalized;  /* its finalizer ran: the state is closing (the registry holds it) */
};

static int anchor_gc(lua_State *L)
{
	struct anchor *a = lua_touserdata(L, 1);
	if (a)
		a->finalized = 1;
	if (a && a->run_id == agent_run_id() && agent_running()) {
		agent_cnames_scan(L);
		int rc = agent_stop_any(agent_termstop_pending() ? "signal" : "close");
		int e = errno;
		agent_cnames_clear();
		errno = e;
		agent_record_stopped(0, a->run_id, rc, errno);
	}
	return 0;
}

/*
** The memory profiler's own sentinel: its finalizer runs before lua_close frees anything,
** so the allocator is restored while the heap is whole. lua_close runs the finalizers of
** cdata first, then those of userdata, newest first, so a userdata sentinel made at start
** ran after every other: their frees and allocations (a string.buffer's kept memory freed
** by its __gc, say) were in the profile as if the program had made them, and a leak held
** by userdata vanished from the heap summary. A cdata finalizer (ffi.gc) calling the same
** function stops the profile before any userdata's finalizer; other cdata finalizers run
** in their table's order, some before it. The userdata stays as the sentinel's state and
** as its fallback where the FFI is not loadable, or loaded and taken out of package.loaded
** (loaded again, its state would be reset). Loading it for this (when the program has
** not) adds package.loaded.ffi, and its own allocations, before the profile starts.
*/
static const char mem_anchor_key = 0, mem_anchor_cdata_key = 0;

static int mem_anchor_gc(lua_State *L)
{
	struct anchor *a = lua_touserdata(L, 1);
	if (a)
		a->finalized = 1;
	if (a && a->run_id == agent_memprof_run_id() && agent_memprof_running()) {
		agent_cnames_scan(L);
		agent_memprof_stop_at_close(L);
		agent_cnames_clear();
	}
	agent_memprof_closing(L);
	return 0;
}

/* The cdata's finalizer: the sentinel's, on the userdata it holds as its upvalue. */
static int mem_anchor_cgc(lua_State *L)
{
	lua_settop(L, 0);
	lua_pushvalue(L, lua_upvalueindex(1));
	return mem_anchor_gc(L);
}

/* Gives the userdata sentinel at 1 a cdata finalizer, anchored in the registry. Raises an
 * error when the FFI cannot be had (the caller's protected call ignores it). */
static int mem_anchor_cdata(lua_State *L)
{
	lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED"); /* 2 */
	lua_getfield(L, 2, "ffi");                     /* 3 */
	if (!lua_istable(L, 3)) {
		/* Loaded but no longer in package.loaded (a sandbox "disabling" it): loading
		 * it again would reset its types and drop its finalizers. Blocked by a value
		 * of the program's there (false, a string): not loaded behind its back. */
		if (agent_memprof_ffi_loaded())
			return luaL_error(L, "the FFI is loaded but not in package.loaded");
		if (!lua_isnil(L, 3))
			return luaL_error(L, "package.loaded.ffi is set to something else");
		/* What require("ffi") does, without the program's require. */
		lua_settop(L, 2);
		lua_getfield(L, LUA_REGISTRYINDEX, "_PRELOAD");
		lua_getfield(L, -1, "ffi");
		lua_remove(L, -2);
		lua_pushliteral(L, "ffi");
		lua_call(L, 1, 1);                     /* 3 */
		luaL_checktype(L, 3, LUA_TTABLE);
		lua_pushvalue(L, 3);
		lua_setfield(L, 2, "ffi");
	}
	lua_getfield(L, 3, "gc");
	lua_getfield(L, 3, "new");
	lua_pushliteral(L, "char[1]");
	lua_call(L, 1, 1);
	lua_pushvalue(L, 1);
	lua_pushcclosure(L, mem_anchor_cgc, 1);
	lua_call(L, 2, 1); /* ffi.gc(cdata, finalizer): the cdata */
	lua_pushlightuserdata(L, (void *)&mem_anchor_cdata_key);
	lua_insert(L, -2);
	lua_rawset(L, LUA_REGISTRYINDEX);
	return 0;
}

struct anchor_args {
	const void *key;     /* registry key of the profiler's sentinel */
	lua_CFunction gc;    /* its finalizer */
	uint64_t run_id;
	int closing;         /* out: the sentinel was finalized, the state is closing */
};

/* Creates the sentinel under its key once per state, and stamps it with the run (not once
 * it was finalized: the state is closing, and it would not be finalized again). */
static int anchor_setup(lua_State *L)
{
	struct anchor_args *args = lua_touserdata(L, 1);
	lua_pushlightuserdata(L, (void *)args->key);
	lua_rawget(L, LUA_REGISTRYINDEX);
	struct anchor *a = lua_touserdata(L, -1);
	if (a && a->finalized) {
		args->closing = 1;
		return 0;
	}
	if (!a) {
		a = lua_newuserdata(L, sizeof(*a));
		a->finalized = 0;
		lua_createtable(L, 0, 1);
		lua_pushcfunction(L, args->gc);
		lua_setfield(L, -2, "__gc");
		lua_setmetatable(L, -2);
		lua_pushlightuserdata(L, (void *)args->key);
		lua_pushvalue(L, -2);
		lua_rawset(L, LUA_REGISTRYINDEX);
		if (args->key == &mem_anchor_key) {
			lua_pushcfunction(L, mem_anchor_cdata);
			lua_pushvalue(L, -2);
			if (lua_pcall(L, 1, 0, 0) != 0)
				lua_pop(L, 1); /* no FFI: the userdata alone */
		}
	}
	a->run_id = args->run_id;
	return 0;
}

/* Protected: the C API may be called outside any Lua call. */
static int anchor(lua_State *L, const void *key, lua_CFunction gc, uint64_t run_id)
{
	struct anchor_args args = { key, gc, run_id, 0 };
	if (lua_cpcall(L, anchor_setup, &args) != 0)
		return -1;
	return args.closing ? AGENT_LUA_CLOSING : 0;
}

int agent_lua_anchor(lua_State *L, uint64_t run_id)
{
	return anchor(L, &anchor_key, anchor_gc, run_id);
}

int agent_lua_memprof_anchor(lua_State *L, uint64_t run_id)
{
	return anchor(L, &mem_anchor_key, mem_anchor_gc, run_id);
}

/* -- Module ------------------------------------------------------------------------------ */

/*
** Keeps this library mapped for the life of the process. LuaJIT unloads C modules when
** the state closes, but the exit handler, the fork handler and a signal left queued by a
** stop on another thread may still run our code afterwards.
*/
static void pin_self(void)
{
	static int pinned;
	Dl_info info;
	if (pinned || !dladdr((void *)pin_self, &info) || !info.dli_fname)
		return;
	if (dlopen(info.dli_fname, RTLD_NOW | RTLD_NODELETE | RTLD_NOLOAD))
		pinned = 1;
}

/*
** `luaprof record` sets LUAPROF_RECORD="mode=C,interval_ns=N,clock=cpu,path=FILE", or
** "profiler=memory,path=FILE" (path last: it may contain commas) and loads the module from LUA_INIT. The variable is
** removed so that child processes are not profiled into the same file, and LUA_INIT is
** given back its original value (LUAPROF_LUA_INIT) for them.
*/
/* The profile autostart began: which profiler and its run (its file is record's to name:
 * it may be a temporary name). */
static struct {
	int memory, started;
	uint64_t run_id;
	char status[PATH_MAX]; /* record's status file, "" for none */
	int status_fd;         /* open, and locked, once profiling; else -1 */
} recorded = { .status_fd = -1 };

static void status_tell(char what);

void agent_record_stopped(int memory, uint64_t run_id, int rc, int e)
{
	if (rc != LUAPROF_PROFILE_ERRIO || !recorded.started || recorded.memory != memory ||
	    recorded.run_id != run_id)
		return;
	fprintf(stderr, "luaprof: cannot write the profile: %s (it is cut short there)\n",
		strerror(e ? e : EIO));
	status_tell('E');
}

/*
** record's claim, a file (LUAPROF_RECORD_CLAIM) the first agent to start removes: of the
** LuaJIT processes a wrapper runs, that one is profiled, the others run as without record.
** unlink is atomic, and the file sits beside the profile, so that an agent that can write
** the profile sees it. 1 when this process is the one (or no claim was given, or it could
** not be told: never a reason not to profile), 0 when another took it.
*/
static int claim_take(const char *path)
{
	return !path || unlink(path) == 0 || errno != ENOENT;
}

/*
** record's status file (LUAPROF_RECORD_STATUS), a line appended for each step, with this
** process's id: 'L' loaded (whatever comes of the start), then 'P' profiling, 'E' the
** profile could not be written, or 'S' skipped because another process has the claim.
** record tells from it a program that never ran LUA_INIT from a start refused. From 'P'
** on, the process holds a POSIX lock on the file's byte 0 (record holds byte 1) until it
** ends (or executes another program: the descriptor closes on exec; fork does not pass
** the lock on): record waits
** for the holder when a wrapper leaves it running, and asks the kernel for its pid (F_GETLK
** gives it as record sees it, whatever pid namespace the program runs in, and only while
** it runs). The descriptor stays open: closing any descriptor of the file drops the lock.
** A hint only: nothing happens when it cannot be written.
*/
static void status_tell(char what)
{
	if (!recorded.status[0])
		return;
	char line[32];
	int n = snprintf(line, sizeof(line), "%c %ld\n", what, (long)getpid());
	int fd = recorded.status_fd;
	if (fd < 0)
		fd = open(recorded.status, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	if (write(fd, line, (size_t)n) != n) {
		; /* nothing to do about it */
	}
	if (what == 'P' && recorded.status_fd < 0) {
		/* Byte 0 (fd is write-only): record holds byte 1 (its rec_files). */
		struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 1 };
		if (fcntl(fd, F_SETLK, &lk) == 0) {
			recorded.status_fd = fd;
			return;
		}
	}
	if (fd != recorded.status_fd)
		close(fd);
}

/* Once read, record's variables leave the environment (the program's children are not
 * record's), and LUA_INIT gets its original value back (LUAPROF_LUA_INIT). */
static void record_env_clear(void)
{
	unsetenv("LUAPROF_RECORD");
	unsetenv("LUAPROF_RECORD_CLAIM");
	unsetenv("LUAPROF_RECORD_STATUS");
	const char *orig = getenv("LUAPROF_LUA_INIT");
	if (orig)
		setenv("LUA_INIT", orig, 1);
	else
		unsetenv("LUA_INIT");
}

/* autostart's CPU start (start_with), as a function to pcall: its start_args at 1. */
static int l_cpu_autostart(lua_State *L)
{
	struct start_args *a = lua_touserdata(L, 1);
	lua_settop(L, 0);
	return start_with(L, a);
}

static void autostart(lua_State *L)
{
	const char *env = getenv("LUAPROF_RECORD");
	if (!env)
		return;
	char spec[PATH_MAX + 512], claim[PATH_MAX];
	int spec_cut = snprintf(spec, sizeof(spec), "%s", env) >= (int)sizeof(spec);
	unsetenv("LUAPROF_RECORD");
	/* record's claim and status files (claim_take, status_tell): this process's alone. */
	const char *cv = getenv("LUAPROF_RECORD_CLAIM"), *sv = getenv("LUAPROF_RECORD_STATUS");
	int has_claim = cv && snprintf(claim, sizeof(claim), "%s", cv) < (int)sizeof(claim);
	if (sv && strlen(sv) < sizeof(recorded.status))
		strcpy(recorded.status, sv);
	record_env_clear();

	struct start_args a;
	memset(&a, 0, sizeof(a));
	a.opt.mode = LUAPROF_SYSPROF_CALLGRAPH;
	a.opt.interval = DEFAULT_INTERVAL_MS;
	a.path = DEFAULT_PATH;
	const char *bad = spec_cut ? "LUAPROF_RECORD too long (the profile's path?)" : NULL;
	int memory = 0;
	unsigned long long sample_bytes = 0;
	for (char *p = spec; p && *p && !bad;) {
		char *val = strchr(p, '=');
		if (!val) {
			bad = "malformed LUAPROF_RECORD";
			break;
		}
		*val++ = '\0';
		if (!strcmp(p, "path")) {
			a.path = val;
			break;
		}
		char *next = strchr(val, ',');
		if (next)
			*next++ = '\0';
		if (!strcmp(p, "sample")) {
			char *end;
			sample_bytes = strtoull(val, &end, 10);
			if (*end)
				bad = "malformed sample in LUAPROF_RECORD";
		} else if (!strcmp(p, "profiler")) {
			memory = !strcmp(val, "memory");
			if (!memory && strcmp(val, "cpu"))
				bad = "unknown profiler in LUAPROF_RECORD";
		} else if (!strcmp(p, "mode")) {
			a.opt.mode = !strcmp(val, "D") ? LUAPROF_SYSPROF_DEFAULT
				   : !strcmp(val, "L") ? LUAPROF_SYSPROF_LEAF
				   : LUAPROF_SYSPROF_CALLGRAPH;
			if (strcmp(val, "D") && strcmp(val, "L") && strcmp(val, "C"))
				bad = MSG_BADMODE;
		} else if (!strcmp(p, "interval_ns")) {
			char *end;
			a.opt.interval_ns = strtoull(val, &end, 10);
			if (*end || !a.opt.interval_ns)
				bad = MSG_BADINTV;
		} else if (!strcmp(p, "clock")) {
			if (!strcmp(val, "wall"))
				a.opt.clock = LUAPROF_CLOCK_WALL;
			else if (strcmp(val, "cpu"))
				bad = MSG_BADCLOCK;
		} else {
			bad = "unknown LUAPROF_RECORD setting";
		}
		p = next;
	}
	/* The profile's start, from record's word that the agent loaded up to termstop's
	 * handler, with these signals blocked on this thread: one that comes meanwhile waits
	 * for the handler and stops a whole profile (or takes its course, the start refused).
	 * Before, it ended the process at once, in the start or just after it: the file cut
	 * short or empty. (A thread of a host's that takes one still ends it at once: no
	 * handler yet.) */
	sigset_t term, omask;
	agent_termstop_sent(&term);
	pthread_sigmask(SIG_BLOCK, &term, &omask);
	int mine = claim_take(has_claim ? claim : NULL);
	status_tell(mine ? 'L' : 'S');
	if (!mine || bad) {
		if (bad) /* !mine: record says so when the program ends */
			fprintf(stderr, "luaprof: not profiling: %s\n", bad);
		pthread_sigmask(SIG_SETMASK, &omask, NULL);
		return;
	}
	int top = lua_gettop(L);
	if (memory) {
		lua_pushcfunction(L, l_mem_start);
		lua_pushstring(L, a.path);
		lua_createtable(L, 0, 1);
		if (sample_bytes) {
			lua_pushnumber(L, (lua_Number)sample_bytes);
			lua_setfield(L, -2, "sample");
		}
	} else {
		lua_pushcfunction(L, l_cpu_autostart);
		lua_pushlightuserdata(L, &a);
		lua_pushnil(L);
	}
	if (lua_pcall(L, 2, 2, 0) != 0) { /* out of memory: the mask back first */
		pthread_sigmask(SIG_SETMASK, &omask, NULL);
		lua_error(L);
	}
	if (!lua_toboolean(L, top + 1)) {
		fprintf(stderr, "luaprof: not profiling: %s\n", lua_tostring(L, top + 2));
	} else {
		recorded.run_id = memory ? agent_memprof_run_id() : agent_run_id();
		recorded.memory = memory;
		recorded.started = 1;
		status_tell('P');
		(void)agent_termstop_arm(memory); /* without it, a signal cuts the profile short */
	}
	pthread_sigmask(SIG_SETMASK, &omask, NULL);
	lua_settop(L, top);
}

static const luaL_Reg memprof_funcs[] = {
	{ "start", l_mem_start },
	{ "stop", l_mem_stop },
	{ "report", l_mem_report },
	{ NULL, NULL },
};

static const luaL_Reg sysprof_funcs[] = {
	{ "start", l_start },
	{ "stop", l_stop },
	{ "report", l_report },
	{ "stats", l_stats },
	{ NULL, NULL },
};

/* misc.sysprof and misc.memprof for code written for Tarantool, unless the host has its
 * own: module M at the top of the stack. Set raw: OpenResty guards its globals with a
 * __newindex that logs a warning for every new one. */
static void install_misc(lua_State *L)
{
	lua_getglobal(L, "misc");
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		lua_newtable(L);
		lua_pushliteral(L, "misc");
		lua_pushvalue(L, -2);
		lua_rawset(L, LUA_GLOBALSINDEX);
	}
	for (int i = 0; i < 2 && lua_istable(L, -1); i++) {
		const char *name = i ? "memprof" : "sysprof";
		lua_getfield(L, -1, name);
		if (lua_isnil(L, -1)) {
			lua_getfield(L, -3, name);
			lua_setfield(L, -3, name);
		}
		lua_pop(L, 1);
	}
	lua_pop(L, 1);
}

/* require "luaprof" in a program `luaprof record` runs: a luaprof.lua of the program's own
 * on package.path, as require would find it before any C module without record; else the
 * module loaded at start-up. */
static int l_preload(lua_State *L)
{
	int top = lua_gettop(L);
	lua_getglobal(L, "package");
	if (lua_istable(L, -1)) {
		lua_getfield(L, -1, "loaders");
		if (lua_istable(L, -1)) {
			lua_rawgeti(L, -1, 2); /* the Lua file searcher */
			if (lua_isfunction(L, -1)) {
				lua_pushliteral(L, "luaprof");
				lua_call(L, 1, 1);
				if (lua_isfunction(L, -1)) {
					lua_pushliteral(L, "luaprof");
					lua_call(L, 1, 1);
					return 1;
				}
			}
		}
	}
	lua_settop(L, top);
	lua_pushvalue(L, lua_upvalueindex(1));
	install_misc(L);
	return 1;
}

/* NULL in a VM with the Lua 5.1 C API (LuaJIT; PUC Lua 5.1, which the profilers' start
 * refuses); else the later PUC Lua this is, for the message. */
static const char *puc_later(void)
{
	if (lua_call && lua_pcall && lua_cpcall && luaL_register && lua_insert && lua_remove &&
	    lua_tonumber && lua_newuserdata)
		return NULL;
	return dlsym(RTLD_DEFAULT, "lua_newuserdatauv") ? "PUC Lua 5.4"
	     : dlsym(RTLD_DEFAULT, "lua_rotate")        ? "PUC Lua 5.3"
	     : dlsym(RTLD_DEFAULT, "lua_callk")         ? "PUC Lua 5.2"
							 : "a Lua without the 5.1 C API";
}

/*
** luaopen_luaprof in a later PUC Lua, whose C API differs from the one this module is built
** for: luaL_error alone is called (the same in every version). Under `luaprof record` the
** program runs on, unprofiled, as in PUC Lua 5.1: the message goes to standard error and
** record's status file hears that the agent loaded (record then points at the message).
*/
static int refuse_puc(lua_State *L, const char *vm)
{
	char why[256];
	snprintf(why, sizeof(why), MSG_MISUSE ": not a LuaJIT VM (%s, whose C API differs from "
		 "LuaJIT's); the agent profiles LuaJIT 2.1 GC64 builds", vm);
	if (!getenv("LUAPROF_RECORD"))
		return luaL_error(L, "luaprof: cannot load: %s", why);
	const char *cv = getenv("LUAPROF_RECORD_CLAIM"), *sv = getenv("LUAPROF_RECORD_STATUS");
	if (sv && strlen(sv) < sizeof(recorded.status))
		strcpy(recorded.status, sv);
	int mine = claim_take(cv);
	record_env_clear();
	status_tell(mine ? 'L' : 'S');
	if (mine)
		fprintf(stderr, "luaprof: not profiling: %s\n", why);
	return 0;
}

LUAPROF_API int luaopen_luaprof(lua_State *L)
{
	const char *vm = puc_later();
	if (vm)
		return refuse_puc(L, vm);
	pin_self();
	lua_createtable(L, 0, 2);
	lua_pushliteral(L, "luaprof 0.1.0");
	lua_setfield(L, -2, "_VERSION");
	/* available: true, as Tarantool's (2026) says whether the profiler was built in. */
	lua_createtable(L, 0, 5);
	luaL_register(L, NULL, sysprof_funcs);
	lua_pushboolean(L, 1);
	lua_setfield(L, -2, "available");
	lua_setfield(L, -2, "sysprof");
	lua_createtable(L, 0, 4);
	luaL_register(L, NULL, memprof_funcs);
	lua_pushboolean(L, 1);
	lua_setfield(L, -2, "available");
	lua_setfield(L, -2, "memprof");

	/* Started by `luaprof record` (LUA_INIT), the program has not asked for the module:
	 * its globals stay as they were (code that looks for Tarantool by `misc` must not
	 * find it) until its own require, which package.preload answers with this module. */
	if (getenv("LUAPROF_RECORD")) {
		lua_getglobal(L, "package");
		lua_getfield(L, -1, "preload");
		if (lua_istable(L, -1)) {
			lua_pushvalue(L, -3);
			lua_pushcclosure(L, l_preload, 1);
			lua_setfield(L, -2, "luaprof");
		}
		lua_pop(L, 2);
	} else {
		install_misc(L);
	}
	autostart(L);
	return 1;
}
