/*
** memprof_exit_preempt.sh's host: exact mode, exit() on the main thread while the VM thread
** is off the CPU inside a light path, past its tests (chain, the stream's room) and before
** its stores: a hardware breakpoint (perf_event, sigtrap) at the GC free path's first store
** in wrapper_raw parks it there for 300 ms, as a preemption would. events_close's poll sees
** mp.w.pos stay put (the thread does not run) and the stop goes on; the thread then writes
** its record through the pointer it loaded, into the stream buffer the stop released.
** Usage: memprof_exit_preempt PROFILE OFFSET (OFFSET: the instruction's in luaprof.so, hex)
*/
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "luaprof.h"

static atomic_int started, exiting, parked, resumed;
static uintptr_t at;
static long park_ns = 300000000; /* PARK_MS: how long the thread is off the CPU */
static const char *path;

static void on_trap(int sig, siginfo_t *si, void *uc)
{
	(void)sig, (void)si, (void)uc;
	if (!atomic_load(&exiting) || atomic_exchange(&parked, 1))
		return;
	nanosleep(&(struct timespec){ 0, park_ns }, NULL);
	atomic_store(&resumed, 1);
}

static int arm(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigfillset(&sa.sa_mask);
	if (sigaction(SIGTRAP, &sa, NULL) != 0)
		return -1;
	struct perf_event_attr a;
	memset(&a, 0, sizeof(a));
	a.type = PERF_TYPE_BREAKPOINT;
	a.size = sizeof(a);
	a.bp_type = HW_BREAKPOINT_X;
	a.bp_addr = at;
	a.bp_len = sizeof(long);
	a.sample_period = 1;
	a.exclude_kernel = 1;
	a.exclude_hv = 1;
	a.sigtrap = 1;
	a.remove_on_exec = 1;
	return syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC) < 0 ? -1 : 0;
}

static void *vm_main(void *arg)
{
	(void)arg;
	lua_State *L = luaL_newstate();
	luaL_openlibs(L);
	char code[1024];
	snprintf(code, sizeof(code), "package.cpath = 'build/?.so'\njit.off()\n"
		 "assert(require 'luaprof'.memprof.start('%s'))", path);
	if (luaL_dostring(L, code)) {
		fprintf(stderr, "start: %s\n", lua_tostring(L, -1));
		exit(1);
	}
	Dl_info di;
	void *h = dlopen("build/luaprof.so", RTLD_NOW | RTLD_NOLOAD);
	void *sym = h ? dlsym(h, "luaprof_memprof_error") : NULL;
	if (!sym || !dladdr(sym, &di)) {
		fprintf(stderr, "luaprof.so not found\n");
		exit(1);
	}
	at += (uintptr_t)di.dli_fbase;
	if (arm() != 0) {
		printf("no breakpoint\n");
		exit(3);
	}
	atomic_store(&started, 1);
	(void)luaL_dostring(L, "while true do local x = {} for j = 1, 64 do x[j] = {} end end");
	for (;;)
		pause();
}

/* Registered before the profiler's exit handler: run after it (the process lives on). */
static void after_profiler(void)
{
	for (int i = 0; i < 100 && !atomic_load(&resumed); i++)
		nanosleep(&(struct timespec){ 0, 10000000 }, NULL);
	nanosleep(&(struct timespec){ 0, 100000000 }, NULL);
	fprintf(stderr, "resumed %d\n", atomic_load(&resumed));
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 1;
	path = argv[1];
	at = (uintptr_t)strtoull(argv[2], NULL, 16);
	if (getenv("PARK_MS"))
		park_ns = atol(getenv("PARK_MS")) * 1000000;
	atexit(after_profiler);
	pthread_t th;
	if (pthread_create(&th, NULL, vm_main, NULL) != 0)
		return 1;
	while (!atomic_load(&started))
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	nanosleep(&(struct timespec){ 0, 50000000 }, NULL);
	atomic_store(&exiting, 1);
	for (int i = 0; i < 2000 && !atomic_load(&parked); i++)
		nanosleep(&(struct timespec){ 0, 100000 }, NULL);
	if (!atomic_load(&parked)) {
		fprintf(stderr, "the VM thread never reached the breakpoint\n");
		return 1;
	}
	exit(0);
}
