/*
** The C side of the accuracy workload (seed 000: C fib via FFI alternating with Lua fib),
** built by accuracy_split.sh into a shared library and called through LuaJIT's FFI.
**
** The recursion is in a static function so that its calls stay inside this object (no PLT
** stub between two frames): a sample taken anywhere in the C work has its leaf frame in
** lpacc_cfib_rec or, for the first instructions, in the exported wrapper lpacc_cfib.
*/
double lpacc_cfib(double n);

__attribute__((noinline)) static double lpacc_cfib_rec(double n)
{
	if (n < 2)
		return n;
	return lpacc_cfib_rec(n - 1) + lpacc_cfib_rec(n - 2);
}

double lpacc_cfib(double n)
{
	return lpacc_cfib_rec(n);
}
