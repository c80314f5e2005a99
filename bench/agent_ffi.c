/*
** The C library of bench/agent_overhead.sh's C-heavy and mixed workloads, called through
** LuaJIT's FFI: a deep recursion (seed 000's C fib: deep host stacks for the unwinder) and
** a flat loop over a buffer (many short FFI calls).
*/
#include <stddef.h>

double agent_bench_cfib(double n);
double agent_bench_dot(const double *a, const double *b, size_t n);

__attribute__((noinline)) static double cfib(double n)
{
	return n < 2 ? n : cfib(n - 1) + cfib(n - 2);
}

double agent_bench_cfib(double n)
{
	return cfib(n);
}

double agent_bench_dot(const double *a, const double *b, size_t n)
{
	double s = 0;
	for (size_t i = 0; i < n; i++)
		s += a[i] * b[i];
	return s;
}
