/*
** LUAPROF_ALLOCSTUB, the environment's choice of sampled memprof's allocator wrapper.
*/
#include "util/stubenv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum lp_stubenv lp_stubenv_read(char *err, size_t errlen)
{
	const char *env = getenv("LUAPROF_ALLOCSTUB");
	if (!env || !*env || strcmp(env, "1") == 0)
		return LP_STUBENV_GENERATED;
	if (strcmp(env, "0") == 0)
		return LP_STUBENV_COMPILED;
	snprintf(err, errlen, "LUAPROF_ALLOCSTUB is '%.40s': 1 for the generated wrapper where "
		 "it can be made (the default), 0 for the compiled one", env);
	return LP_STUBENV_BAD;
}
