/*
** LUAPROF_TIMER, the environment's choice of the CPU profiler's CPU-time clock.
*/
#include "util/timerenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum lp_timerenv lp_timerenv_read(char *err, size_t errlen)
{
	const char *env = getenv("LUAPROF_TIMER");
	if (!env || !*env || strcmp(env, "auto") == 0)
		return LP_TIMERENV_AUTO;
	if (strcmp(env, "posix") == 0)
		return LP_TIMERENV_POSIX;
	snprintf(err, errlen, "LUAPROF_TIMER is '%.40s': auto for a perf_event task clock where "
		 "the process may open one (the default), posix for the POSIX CPU-time timer",
		 env);
	return LP_TIMERENV_BAD;
}
