/*
** Writes a CPU profile stream for tests/integration/nosym_note.sh: N samples, U of them
** ending in code of /usr/bin/luajit that no symbol names (luajit+0x7020), the others in
** main; the luaprof extension maps the executable, so that the report names that code
** by object and offset, as the agent's streams of a stripped luajit have it.
**
** Usage: nosym_driver OUT N U
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "stream/wbuf.h"
#include "stream/writer.h"

enum { A_MAIN = 0x1000, A_LAST = 0x8000, A_NOSYM = 0x8020 };

static size_t file_writer(const void **data, size_t len, void *ctx)
{
	return fwrite(*data, 1, len, ctx);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: nosym_driver OUT N U\n");
		return 2;
	}
	long n = atol(argv[2]), u = atol(argv[3]);
	FILE *f = fopen(argv[1], "wb");
	if (!f || n < u || u < 0) {
		perror(argv[1]);
		return 1;
	}
	static uint8_t space[4096];
	struct lp_wbuf w;
	lp_wbuf_init(&w, space, sizeof(space), file_writer, f);
	lp_write_symtab_prologue(&w);
	lp_write_sym_cfunc(&w, A_MAIN, "main", 4);
	lp_write_sym_cfunc(&w, A_LAST, "last_sym", 8);
	lp_write_symtab_final(&w);
	lp_write_sysprof_prologue_ext(&w);
	for (long i = 0; i < n; i++) {
		/* Innermost first. */
		uint64_t host[2] = { i < u ? A_NOSYM : A_MAIN + 4, A_MAIN };
		struct lp_sys_sample s = { .vmstate = LP_VMST_INTERP, .nhost = i < u ? 2 : 1,
					   .host = i < u ? host : host + 1 };
		lp_write_sys_sample(&w, &s);
	}
	lp_write_sysprof_epilogue(&w);
	lp_write_ext_prologue(&w);
	lp_write_ext_map(&w, 0x1000, 0x9000, 0, "/usr/bin/luajit", NULL, 0);
	/* last_sym is 16 bytes: A_NOSYM is past it, named by no symbol. */
	lp_write_ext_csize(&w, A_LAST, 0x10);
	lp_write_ext_end(&w);
	lp_wbuf_flush(&w);
	if (fclose(f) != 0) {
		perror(argv[1]);
		return 1;
	}
	return 0;
}
