/*
** The embedding the integration tests' C hosts share (static_host.c, debuginfo_host.c,
** replaced_object.c): a state with the standard libraries, a script loaded with its
** arguments, the outcome of the call reported. Built with each host (cc_test OUT HOST.c
** tests/integration/test_host.c ...).
**
** The host's main calls lua_pcall itself, between test_host_load and test_host_end: the
** profiles then read main;lua_pcall as in any plain embedding (static_luajit.sh checks the
** script's lines right after main's lua_pcall).
*/
#ifndef TEST_HOST_H
#define TEST_HOST_H

#include <lua.h>

/* A new state with the standard libraries open, or NULL after saying so on stderr. */
lua_State *test_host_open(void);

/*
** Loads the script argv[1] (argv as main's) and pushes argv[2..argc-1] after it, the
** chunk's varargs. Returns how many arguments it pushed, or main's exit status negated
** after a message on stderr: -2 usage (no script), -1 the script does not load.
*/
int test_host_load(lua_State *L, int argc, char **argv);

/*
** Ends the host after lua_pcall returned STATUS: its error, when not 0, printed on stderr
** after "WHO: ", then the state closed. Returns main's exit status (0, or 1 after an error).
*/
int test_host_end(lua_State *L, int status, const char *who);

#endif
