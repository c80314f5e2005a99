/*
** cpu_new_module.c: a C module for cpu_new_module.sh, copied under many names. burn(ms) runs
** C code of its own for ms milliseconds of the thread's CPU time, so that a module required
** while the CPU profiler samples has its first samples taken in it right away.
*/
#define _POSIX_C_SOURCE 200809L
#include <lauxlib.h>
#include <lua.h>
#include <time.h>

static double thread_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

__attribute__((noinline)) static int burn(lua_State *L)
{
	double until = thread_ms() + luaL_checknumber(L, 1);
	volatile unsigned long acc = 0;
	do {
		for (unsigned long i = 0; i < 20000; i++)
			acc += i ^ (acc >> 3);
	} while (thread_ms() < until);
	lua_pushnumber(L, (lua_Number)acc);
	return 1;
}

int luaopen_burn(lua_State *L);
int luaopen_burn(lua_State *L)
{
	lua_newtable(L);
	lua_pushcfunction(L, burn);
	lua_setfield(L, -2, "burn");
	return 1;
}
