/*
** Unit tests of the agent's VM sampler (src/agent/vmsample.c) on synthetic memory laid out
** in this process: its helpers that take a sample's stack from registers and the stack
** when the walk alone finds no Lua frame. The modules it calls for objects, symbols and
** trace code are stubs (none of the helpers tested reaches them); reads are plain, as in a
** walk outside the handler (agent_vm_prepare_walk).
*/
#include "../../src/agent/vmsample.c"

#include "unit.h"

/* -- Stubs for the other agent modules ------------------------------------------------- */

void agent_cnames_scan_vm(const struct lp_lj_vm *v, const struct lp_mem *m, int memory)
{
}

int agent_in_object(uint64_t ip)
{
	return 0;
}

void agent_objects_late_reset(void)
{
}

int agent_objects_on_stack(uint64_t sp)
{
	return 0;
}

int agent_objects_stack_has(uint64_t lo, uint64_t addr, size_t len)
{
	return 0;
}

void agent_symtab_vm_block(uint64_t lo, uint64_t hi)
{
}

void agent_tcodes_free(struct agent_tcodes *s)
{
}

void agent_tcodes_reset(struct agent_tcodes *s)
{
}

struct agent_tcode *agent_tcodes_slot(struct agent_tcodes *s, const struct agent_tcode_id *id,
				      int *fresh)
{
	*fresh = 0;
	return NULL;
}

void agent_tcodes_write(const struct agent_tcodes *s, struct lp_wbuf *w)
{
}

/* -- Tests ----------------------------------------------------------------------------- */

#define FFID_RESUME 37 /* coroutine.resume's builtin id, as detection would set it */

/*
** coroutine.resume storing its first result over its link (resume_results): the C frame
** at the stack pointer keeps PC, the frame at BASE (rdx) links elsewhere and its function
** slot holds the builtin: the sample is the caller's, at that PC. A slot whose value is
** not a function (a table whose bytes at the function's builtin id happen to match; a
** number) gives no frame: its pointer bits were read as a function's.
*/
static void test_resume_results(void)
{
	size_t nlay;
	const struct lp_lj_layout *lays = lp_lj_layouts(&nlay);
	static _Alignas(16) uint64_t stack[64], cframe[32], obj[32];
	const uint64_t pc = 0x555500001234, link = 0x555500005678;
	for (size_t i = 0; i < nlay; i++) {
		memset(&vm, 0, sizeof(vm));
		vm.lay = &lays[i];
		vm.ffid_resume = FFID_RESUME;
		plain_reads = 1;
		memset(stack, 0, sizeof(stack));
		memset(cframe, 0, sizeof(cframe));
		memset(obj, 0, sizeof(obj));
		((uint8_t *)obj)[vm.lay->fn_ffid] = FFID_RESUME;
		memcpy((uint8_t *)cframe + vm.lay->cf_pc, &pc, 8);
		struct lp_lj_thread t = { .stack = (uint64_t)(uintptr_t)stack,
					  .stack_end = (uint64_t)(uintptr_t)(stack + 64),
					  .cframe = (uint64_t)(uintptr_t)cframe | LP_LJ_CFRAME_RESUME };
		uint64_t sp = (uint64_t)(uintptr_t)cframe, rdx = (uint64_t)(uintptr_t)&stack[6];
		uint64_t fn = (uint64_t)(uintptr_t)obj;
		stack[5] = link;
		uint64_t got = 0;
		stack[4] = (uint64_t)LP_LJ_ITYPE_FUNC << 47 | fn;
		CHECK_EQ(resume_results(&t, sp, rdx, &got), 1);
		CHECK_EQ(got, pc);
		stack[4] = (uint64_t)LP_LJ_ITYPE_TAB << 47 | fn;
		CHECK_EQ(resume_results(&t, sp, rdx, &got), 0);
		stack[4] = (uint64_t)LP_LJ_ITYPE_STR << 47 | fn;
		CHECK_EQ(resume_results(&t, sp, rdx, &got), 0);
		stack[4] = fn; /* a number (a denormal double), the pointer's bits */
		CHECK_EQ(resume_results(&t, sp, rdx, &got), 0);
		/* The link still PC: a frame that links to the caller, walked as it is. */
		stack[4] = (uint64_t)LP_LJ_ITYPE_FUNC << 47 | fn;
		stack[5] = pc;
		CHECK_EQ(resume_results(&t, sp, rdx, &got), 0);
	}
	plain_reads = 0;
}

int main(void)
{
	RUN(test_resume_results);
	return UNIT_RESULT();
}
