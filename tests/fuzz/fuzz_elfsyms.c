/*
** libFuzzer target for the agent's ELF readers (src/agent/elfsyms.c): arbitrary bytes as
** the file of a loaded object, read for its function symbols (emit_image: .symtab, else
** .dynsym) in every form the profilers write, then as that object's loaded image: the
** check that a file is the object loaded (same_object: program headers, build ID notes),
** the dynamic symbol table read from memory (emit_loaded: the dynamic section, the GNU or
** SysV hash table that gives its size) and the functions its unwind table names that no
** symbol covers (emit_unnamed: .eh_frame_hdr's table, each FDE's CIE and extent); and as
** the file's separate debug file: its .gnu_debuglink, and the checks of a candidate debug
** file (debug_matches: its .symtab, the build ID in its note sections, the CRC).
**
** The file on disk is not the process's own memory: it may be another build than the one
** mapped (replaced since), cut short, or made to mislead. The loaded image is modelled as
** the loader leaves it: each PT_LOAD segment the input declares is mapped, so segments
** are clipped to the input here; everything else in the image (the eh_frame_hdr segment,
** the table's entries, the CIE and FDE offsets) is the input's own.
**
** Invariants checked: the sanitizers' (out-of-bounds reads, misaligned accesses,
** overflows), no hang (libFuzzer's -timeout), and (abort() on violation, so libFuzzer
** keeps the input) no more symbols taken than the input's symbol tables have entries, and
** a debuglink's name and a build ID found inside the input (the name without a directory).
*/
#include "../../src/agent/elfsyms.c"
#include "../../src/agent/objects.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* objects.c's one tie to sampled memprof's generated wrapper, not used by these readers. */
uint64_t agent_allocstub_find(uint64_t ip)
{
	return 0;
}

/* Counts the bytes the writer hands over (the writer's own target is fuzz_parse). */
static size_t sink_write(const void **data, size_t len, void *ctx)
{
	*(size_t *)ctx += len;
	return len;
}

/* Entries of the input's symbol tables, every one counted: an upper bound on the symbols
 * any pass may take. */
static size_t symbols_in(const uint8_t *img, size_t size)
{
	if (size < sizeof(Elf64_Ehdr))
		return 0;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	if (eh->e_shoff > size || (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > size - eh->e_shoff)
		return 0;
	size_t n = 0;
	for (size_t i = 0; i < eh->e_shnum; i++) {
		Elf64_Shdr s;
		memcpy(&s, img + eh->e_shoff + i * sizeof(s), sizeof(s));
		if (s.sh_type == SHT_SYMTAB || s.sh_type == SHT_DYNSYM)
			n += s.sh_size / sizeof(Elf64_Sym);
	}
	return n;
}

/* The input's program headers, aligned, with each PT_LOAD clipped to the input (what the
 * loader maps is readable); NULL when it has none. */
static ElfW(Phdr) *loaded_phdrs(const uint8_t *img, size_t size, int *n)
{
	*n = 0;
	if (size < sizeof(Elf64_Ehdr))
		return NULL;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	if (eh->e_phentsize != sizeof(Elf64_Phdr) || eh->e_phoff > size ||
	    (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > size - eh->e_phoff || !eh->e_phnum)
		return NULL;
	ElfW(Phdr) *ph = malloc(eh->e_phnum * sizeof(*ph));
	if (!ph)
		return NULL;
	memcpy(ph, img + eh->e_phoff, eh->e_phnum * sizeof(*ph));
	for (int i = 0; i < eh->e_phnum; i++) {
		if (ph[i].p_type != PT_LOAD)
			continue;
		if (ph[i].p_vaddr >= size)
			ph[i].p_memsz = 0;
		else if (ph[i].p_memsz > size - ph[i].p_vaddr)
			ph[i].p_memsz = size - ph[i].p_vaddr;
		if (ph[i].p_filesz > ph[i].p_memsz)
			ph[i].p_filesz = ph[i].p_memsz;
	}
	*n = eh->e_phnum;
	return ph;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Files are mapped page-aligned: the reader may rely on the image's own alignment,
	 * never on anything inside it. */
	uint8_t *img = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
	if (!img)
		return 0;
	if (size)
		memcpy(img, data, size);
	uint8_t buf[512];
	size_t out = 0;
	size_t most = symbols_in(img, size);
	for (int kind = AGENT_SYMS_SYMTAB; kind <= AGENT_SYMS_SIZES; kind++) {
		struct lp_wbuf w;
		lp_wbuf_init(&w, buf, sizeof(buf), sink_write, &out);
		struct covers cv = { NULL, 0, 0 };
		emit_image(&w, kind, img, size, 0x400000, &cv, kind & 1);
		lp_wbuf_flush(&w);
		if (cv.n > most)
			abort();
		free(cv.c);
	}

	/* The same bytes as a stripped object's file (its .gnu_debuglink: a name inside the
	 * input, no directory) and as a candidate for its separate debug file. */
	const char *name;
	uint32_t crc;
	if (!debuglink(img, size, &name, &crc) &&
	    ((const uint8_t *)name < img || (const uint8_t *)name + strlen(name) >= img + size ||
	     strchr(name, '/')))
		abort();
	const uint8_t *id = NULL;
	size_t idlen = file_build_id(img, size, &id);
	if (idlen && (id < img || idlen > size || id - img > (ptrdiff_t)(size - idlen)))
		abort();
	(void)debug_matches(img, size, id, idlen, 1, 0);
	(void)debug_matches(img, size, NULL, 0, 1, 0);

	/* The same bytes as the object's loaded image, at its own address. */
	int phnum;
	ElfW(Phdr) *ph = loaded_phdrs(img, size, &phnum);
	if (ph) {
		struct dl_phdr_info info = { .dlpi_addr = (ElfW(Addr))(uintptr_t)img,
					     .dlpi_name = "fuzz.so",
					     .dlpi_phdr = ph,
					     .dlpi_phnum = (ElfW(Half))phnum };
		for (int kind = AGENT_SYMS_SYMTAB; kind <= AGENT_SYMS_SIZES; kind += 3) {
			struct lp_wbuf w;
			lp_wbuf_init(&w, buf, sizeof(buf), sink_write, &out);
			struct covers cv = { NULL, 0, 0 };
			/* File and image are the same bytes here: any answer is right, as long
			 * as reading the notes on both sides stays in bounds. */
			(void)same_object(img, size, &info);
			emit_loaded(&w, kind, &info, &cv);
			emit_unnamed(&w, kind, &info, "fuzz.so", &cv);
			lp_wbuf_flush(&w);
			free(cv.c);
		}
		free(ph);
	}
	free(img);
	return 0;
}
