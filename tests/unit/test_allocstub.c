/*
** Unit tests of the generated allocator stubs (src/agent/allocstub.c): on x86-64 a stub
** decides exactly as the compiled sampled wrapper's test does (countdown, live-block marks,
** shift) over random calls, tail-calls the original or the rare path with the arguments
** as they came and its result unchanged, is made once per set of arguments, is found by
** address as the function it stands for, and is not made when LUAPROF_ALLOCSTUB=0. Its
** jumps reach exactly a rel32 away; an allocator out of reach of any page gets no stub,
** once. Elsewhere none is made.
*/
#include <stdint.h>
#include <stdlib.h>

#include "../../src/agent/allocstub.c"
#include "unit.h"

static int64_t countdown;
static int8_t marks[AGENT_ALLOCSTUB_MARKS];

/* The last call the stub passed on: which function took it, and its arguments. */
static struct call {
	int by; /* 1 orig, 2 rare */
	void *ud, *ptr;
	size_t osize, nsize;
	agent_alloc_fn orig; /* the original the rare path was given */
} got;

static void *orig(void *ud, void *ptr, size_t osize, size_t nsize)
{
	got = (struct call){ 1, ud, ptr, osize, nsize, NULL };
	return (void *)(uintptr_t)(0x1000 + nsize);
}

static void *rare(void *ud, void *ptr, size_t osize, size_t nsize, agent_alloc_fn o)
{
	got = (struct call){ 2, ud, ptr, osize, nsize, o };
	return (void *)(uintptr_t)(0x2000 + nsize);
}

/* Another original: a stub of its own. */
static void *orig2(void *ud, void *ptr, size_t osize, size_t nsize)
{
	return orig(ud, ptr, osize, nsize);
}

/* What the compiled wrapper decides for one call (memprof.c's sampled_wrapper): 2 for the
 * rare path, 1 for the original; the countdown as it leaves it. */
static int reference(int64_t *cd, void *ptr, size_t nsize, unsigned shift)
{
	int64_t left = *cd - (int64_t)nsize;
	*cd = left;
	return (left | (int64_t)marks[((uintptr_t)ptr >> shift) & 0xffff]) < 0 ? 2 : 1;
}

static void test_stub_decides_as_the_compiled_wrapper(void)
{
#if defined(__x86_64__)
	for (unsigned shift = 4; shift <= 12; shift += 4) {
		agent_alloc_fn f = agent_allocstub_get(orig, &countdown, marks, shift, rare, orig2);
		CHECK(f != NULL);
		if (!f)
			return;
		CHECK(agent_allocstub_find((uint64_t)(uintptr_t)f) == (uint64_t)(uintptr_t)orig2);
		memset(marks, 0, sizeof(marks));
		for (int i = 0; i < 64; i++)
			marks[unit_rand() & 0xffff] = INT8_MIN;
		int64_t cd = 1000;
		countdown = cd;
		unsigned n_rare = 0, n_orig = 0, bad = 0;
		for (int i = 0; i < 200000; i++) {
			uint64_t r = unit_rand();
			/* Allocations (NULL), frees (nsize 0) and reallocations, with sizes that
			 * take the countdown below zero now and then; a refill as the rare path
			 * of the profiler does. */
			void *ptr = r & 1 ? (void *)(uintptr_t)(r & 0xffffffffff0ull) : NULL;
			size_t nsize = ptr && (r & 2) ? 0 : (size_t)((r >> 40) & 0x3f);
			size_t osize = ptr ? (size_t)((r >> 48) & 0xff) : 0;
			void *ud = (void *)(uintptr_t)(r >> 20);
			int want = reference(&cd, ptr, nsize, shift);
			got.by = 0;
			void *res = f(ud, ptr, osize, nsize);
			if (got.by != want || got.ud != ud || got.ptr != ptr || got.osize != osize ||
			    got.nsize != nsize || countdown != cd || (want == 2 && got.orig != orig) ||
			    res != (void *)(uintptr_t)((want == 1 ? 0x1000 : 0x2000) + nsize))
				bad++;
			if (want == 2) {
				n_rare++;
				if (cd < 0)
					cd = countdown = 1000;
			} else {
				n_orig++;
			}
		}
		CHECK_EQ(bad, 0);
		/* Both paths taken, by the countdown and by the marks. */
		CHECK(n_rare > 1000 && n_orig > 100000);
	}
#else
	CHECK(agent_allocstub_get(orig, &countdown, marks, 8, rare, orig2) == NULL);
#endif
}

static void test_one_stub_per_allocator(void)
{
#if defined(__x86_64__)
	agent_alloc_fn a = agent_allocstub_get(orig, &countdown, marks, 8, rare, orig2);
	agent_alloc_fn b = agent_allocstub_get(orig, &countdown, marks, 8, rare, orig2);
	agent_alloc_fn c = agent_allocstub_get(orig2, &countdown, marks, 8, rare, orig2);
	CHECK(a != NULL && a == b);
	CHECK(c != NULL && c != a);
	uint64_t lo = (uint64_t)(uintptr_t)c;
	CHECK(agent_allocstub_find(lo) && agent_allocstub_find(lo + STUB_LEN - 1));
	CHECK(!agent_allocstub_find(lo + STUB_LEN));
	CHECK(!agent_allocstub_find((uint64_t)(uintptr_t)orig));
	/* Each stub names its original (a start that finds a stub installed unwraps it). */
	CHECK(agent_allocstub_orig(a) == orig && agent_allocstub_orig(c) == orig2);
	CHECK(agent_allocstub_orig(orig) == NULL);
	/* The second original through its own stub. */
	countdown = 1 << 20;
	got.by = 0;
	CHECK(c((void *)7, NULL, 0, 24) == (void *)(uintptr_t)(0x1000 + 24));
	CHECK(got.by == 1 && got.ud == (void *)7 && got.nsize == 24);
	CHECK_EQ(countdown, (1 << 20) - 24);
	/* Its rare path is told which original it wraps. */
	countdown = -1;
	got.by = 0;
	c((void *)9, NULL, 0, 8);
	CHECK(got.by == 2 && got.orig == orig2 && got.ud == (void *)9);
#endif
}

#if defined(__x86_64__)
/* The reach of the code's jumps and displacements: orig within a rel32 of the jump, the
 * countdown within a disp32 of the marks. */
static void test_emit_reach(void)
{
	struct stub st = { .orig = orig, .rare = rare, .compiled = orig2, .countdown = &countdown,
			   .marks = marks, .shift = 8 };
	uint8_t buf[STUB_LEN];
	uint64_t o = (uint64_t)(uintptr_t)orig;
	/* The jump ends right before the rare path's 24 bytes: at + STUB_LEN - 24. */
	uint64_t end = STUB_LEN - 24;
	CHECK_EQ(emit(buf, o - end - (uint64_t)INT32_MAX, &st), STUB_LEN);
	CHECK_EQ(emit(buf, o - end - (uint64_t)INT32_MAX - 1, &st), 0);
	CHECK_EQ(emit(buf, o - end + (uint64_t)1 + INT32_MAX, &st), STUB_LEN);
	CHECK_EQ(emit(buf, o - end + (uint64_t)2 + INT32_MAX, &st), 0);
	st.countdown = (int64_t *)(uintptr_t)((uint64_t)(uintptr_t)marks + (1ull << 32));
	CHECK_EQ(emit(buf, o, &st), 0);
}

/* An allocator no page can be placed near (above the user address space): no stub, and
 * the failure is remembered rather than tried again at every start. */
static void test_unplaceable_allocator(void)
{
	agent_alloc_fn far = (agent_alloc_fn)(uintptr_t)0x800040000000ull;
	unsigned before = atomic_load(&nstubs);
	CHECK(agent_allocstub_get(far, &countdown, marks, 8, rare, orig2) == NULL);
	CHECK(agent_allocstub_get(far, &countdown, marks, 8, rare, orig2) == NULL);
	CHECK_EQ(atomic_load(&nstubs), before + 1);
	CHECK(!agent_allocstub_find(0x800040000000ull));
}
#endif

static void test_disabled_by_the_environment(void)
{
	setenv("LUAPROF_ALLOCSTUB", "0", 1);
	CHECK(agent_allocstub_get(orig, &countdown, marks, 8, rare, orig2) == NULL);
	unsetenv("LUAPROF_ALLOCSTUB");
	CHECK(agent_allocstub_get(orig, &countdown, marks, 64, rare, orig2) == NULL);
}

int main(void)
{
	RUN(test_stub_decides_as_the_compiled_wrapper);
	RUN(test_one_stub_per_allocator);
#if defined(__x86_64__)
	RUN(test_emit_reach);
	RUN(test_unplaceable_allocator);
#endif
	RUN(test_disabled_by_the_environment);
	return UNIT_RESULT();
}
