/*
** Samples in a trace's exit stub on demand, for cpu_exit_stub.sh (loaded by its script with
** the FFI). A timer tick lands in an exit stub (a few instructions on a failed guard's way
** to the VM's exit handler) once in thousands of exits: too rarely for a test to check
** where such samples go. Here hardware breakpoints (perf_event, sigtrap) stop the thread at
** the stub's three instructions (push of the exit number's low byte, its jump, the final
** jump), and the SIGTRAP handler waits, every signal blocked, until the profiler's tick is
** pending: it is delivered as the handler returns, at the stub's instruction. So each hit
** is one CPU sample there, and the waits take most of the run's CPU time.
** static_luajit.sh stops the thread so at instructions of the VM's code it names
** (exit_stub_bp_arm_at).
*/
#define _GNU_SOURCE
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifndef TRAP_PERF
#define TRAP_PERF 6
#endif

#define MAX_BP 4 /* x86-64 has four debug address registers */

static int fds[MAX_BP] = { -1, -1, -1, -1 };
static volatile int hits, max_hits, waited_out;

static void disarm(void)
{
	for (int i = 0; i < MAX_BP; i++)
		if (fds[i] >= 0)
			ioctl(fds[i], PERF_EVENT_IOC_DISABLE, 0);
}

/* A profiler's tick is pending: SIGURG (its perf clock) or a real-time signal. */
static int tick_pending(void)
{
	sigset_t p;
	if (sigpending(&p) != 0)
		return 0;
	if (sigismember(&p, SIGURG))
		return 1;
	for (int s = SIGRTMIN; s <= SIGRTMAX; s++)
		if (sigismember(&p, s))
			return 1;
	return 0;
}

static void on_trap(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (si->si_code != TRAP_PERF)
		return;
	if (++hits >= max_hits)
		disarm();
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (tick_pending())
			return;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		if ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) > 50000000L) {
			waited_out++;
			return;
		}
	}
}

static int bp(uintptr_t addr)
{
	struct perf_event_attr a;
	memset(&a, 0, sizeof(a));
	a.type = PERF_TYPE_BREAKPOINT;
	a.size = sizeof(a);
	a.bp_type = HW_BREAKPOINT_X;
	a.bp_addr = addr;
	a.bp_len = sizeof(long);
	a.sample_period = 1;
	a.exclude_kernel = 1;
	a.exclude_hv = 1;
	a.sigtrap = 1;
	a.remove_on_exec = 1;
	return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/* Breakpoints on the nat instructions at at[] for n hits in all: 0, or -1 (too many, or no
 * breakpoint could be had). */
int exit_stub_bp_arm_at(const uintptr_t *at, int nat, int n)
{
	if (nat < 1 || nat > MAX_BP)
		return -1;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigfillset(&sa.sa_mask);
	if (sigaction(SIGTRAP, &sa, NULL) != 0)
		return -1;
	max_hits = n;
	for (int i = 0; i < nat; i++)
		if ((fds[i] = bp(at[i])) < 0)
			return -1;
	return 0;
}

/* Breakpoints on the exit stub at stub (jit.util.traceexitstub) for n hits: its push, the
 * instruction after it (the jump to its group's end, or for a group's last stub the push
 * of the high byte), and the group's final jump to the exit handler. 0, or -1 (the code is
 * no exit stub, or no breakpoint could be had). */
int exit_stub_bp_arm(uintptr_t stub, int n)
{
	const uint8_t *c = (const uint8_t *)stub;
	uintptr_t end;
	if (c[0] != 0x6a)
		return -1;
	if (c[2] == 0xeb)
		end = stub + 4 + (uintptr_t)(intptr_t)(int8_t)c[3]; /* the high byte's push */
	else if (c[2] == 0x6a)
		end = stub + 2;
	else
		return -1;
	if (((const uint8_t *)end)[0] != 0x6a)
		return -1;
	uintptr_t at[3] = { stub, stub + 2, end + 2 };
	return exit_stub_bp_arm_at(at, 3, n);
}

/* Hits so far, and the waits for a tick that gave up. */
int exit_stub_bp_hits(void)
{
	return hits;
}

int exit_stub_bp_waited_out(void)
{
	return waited_out;
}
