/*
** LUAPROF_TIMER, the environment's choice of the CPU profiler's CPU-time clock: read by
** the agent when a CPU profile starts, and checked by `luaprof record` before it runs a
** program whose agent would refuse it.
*/
#ifndef LP_UTIL_TIMERENV_H
#define LP_UTIL_TIMERENV_H

#include <stddef.h>

enum lp_timerenv {
	LP_TIMERENV_AUTO,  /* unset, empty or "auto": a perf_event task clock where the process
			    * may open one, else the POSIX CPU-time timer */
	LP_TIMERENV_POSIX, /* "posix": the POSIX CPU-time timer (ticks with the kernel) */
	LP_TIMERENV_BAD    /* anything else: refused, rather than guess what was meant */
};

/* The variable's setting; for LP_TIMERENV_BAD, the message naming it in err (errlen > 0). */
enum lp_timerenv lp_timerenv_read(char *err, size_t errlen);

#endif
