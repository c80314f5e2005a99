/*
** Shared object for shapes_luajit.sh: shapes_burn(secs) keeps the CPU busy in its own loop
** for secs seconds (monotonic clock), so that the profile's leaf frame is this function,
** called through the FFI from the interpreter or from a JIT trace; shapes_now() is the
** monotonic clock the workloads time themselves with (elapsed time, as the profiler's
** wall clock, so that a loaded machine does not stretch the test).
*/
#define _POSIX_C_SOURCE 200809L
#include <time.h>

double shapes_burn(double secs);
double shapes_now(void);

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double shapes_now(void)
{
	return now();
}

volatile unsigned long shapes_sink;

__attribute__((noinline)) double shapes_burn(double secs)
{
	double t0 = now();
	unsigned long x = shapes_sink;
	do {
		for (unsigned i = 0; i < 20000; i++)
			x = x * 6364136223846793005ul + i;
		shapes_sink = x;
	} while (now() - t0 < secs);
	return (double)(x & 0xff);
}
