/*
** LUAPROF_ALLOCSTUB, the environment's choice of sampled memprof's allocator wrapper: read
** by the agent when a sampled profile starts, and checked by `luaprof record` before it
** runs a program whose agent would refuse it.
*/
#ifndef LP_UTIL_STUBENV_H
#define LP_UTIL_STUBENV_H

#include <stddef.h>

enum lp_stubenv {
	LP_STUBENV_GENERATED, /* unset, empty or 1: the generated wrapper where one can be made */
	LP_STUBENV_COMPILED,  /* 0: the compiled wrapper */
	LP_STUBENV_BAD        /* anything else: refused, rather than guess what was meant */
};

/* The variable's setting; for LP_STUBENV_BAD, the message naming it in err (errlen > 0). */
enum lp_stubenv lp_stubenv_read(char *err, size_t errlen);

#endif
