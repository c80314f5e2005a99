/*
** claim_signal_shim: an LD_PRELOAD library for memprof_start_signal.sh that sends the
** process SIGTERM once `luaprof record` has made its claim file (mkostemp of a
** ".luaprof-claim." name), where LP_TEST_CLAIM_SIGNAL is set: record has made the raw
** stream's file then, and has not started the program. The variable is removed first: the
** program does not inherit it.
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

int mkostemp(char *template, int flags)
{
	static int (*real)(char *, int);
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "mkostemp");
	int fd = real(template, flags);
	if (fd >= 0 && getenv("LP_TEST_CLAIM_SIGNAL") && strstr(template, "/.luaprof-claim.")) {
		unsetenv("LP_TEST_CLAIM_SIGNAL");
		raise(SIGTERM);
	}
	return fd;
}
