/*
** C symbols of every loaded object for the symtab, as Tarantool's lj_symtab_dump does:
** the ELF .symtab when the file has one, else .dynsym; the vDSO is read from memory.
** Objects loaded while profiling are named by mid-stream symbol events (sysprof event 11,
** memprof symtab event with source CFUNC: Tarantool defines both and its parsers read them).
** Every call carries its own state, so the CPU and memory profilers may run at once.
**
** Runs at start, outside the signal handler. Files are mapped read-only and every offset
** taken from them is checked against the file size before use: a truncated or odd ELF
** file gives fewer symbols, never a fault.
*/
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "stream/writer.h"

static int in_bounds(size_t size, uint64_t off, uint64_t len)
{
	return off <= size && len <= size - off;
}

/* Emits the STT_FUNC symbols of the table at sh[idx] with its linked string table. */

static void emit_table(struct lp_wbuf *w, int kind, const uint8_t *img, size_t size,
		       const Elf64_Shdr *sh, size_t shnum, size_t idx, uint64_t bias)
{
	const Elf64_Shdr *t = &sh[idx];
	if (t->sh_link >= shnum || t->sh_entsize != sizeof(Elf64_Sym) ||
	    !in_bounds(size, t->sh_offset, t->sh_size))
		return;
	const Elf64_Shdr *s = &sh[t->sh_link];
	if (s->sh_type != SHT_STRTAB || !in_bounds(size, s->sh_offset, s->sh_size))
		return;
	const Elf64_Sym *syms = (const Elf64_Sym *)(img + t->sh_offset);
	const char *str = (const char *)(img + s->sh_offset);
	size_t n = t->sh_size / sizeof(Elf64_Sym);
	for (size_t i = 0; i < n; i++) {
		const Elf64_Sym *y = &syms[i];
		if (ELF64_ST_TYPE(y->st_info) != STT_FUNC && ELF64_ST_TYPE(y->st_info) != STT_GNU_IFUNC)
			continue;
		if (y->st_shndx == SHN_UNDEF || y->st_value == 0 || y->st_name >= s->sh_size)
			continue;
		const char *name = str + y->st_name;
		size_t len = strnlen(name, s->sh_size - y->st_name);
		if (len == 0 || len == s->sh_size - y->st_name)
			continue;
		if (kind == AGENT_SYMS_SYSPROF)
			lp_write_sys_sym_cfunc(w, y->st_value + bias, name, len);
		else if (kind == AGENT_SYMS_MEMPROF)
			lp_write_mem_sym_cfunc(w, y->st_value + bias, name, len);
		else if (kind == AGENT_SYMS_SYMTAB)
			lp_write_sym_cfunc(w, y->st_value + bias, name, len);
		else if (y->st_size)
			lp_write_ext_csize(w, y->st_value + bias, y->st_size);
	}
}

/* Emits the function symbols of an ELF image of `size` bytes loaded at `bias`. */
static void emit_image(struct lp_wbuf *w, int kind, const uint8_t *img, size_t size,
		       uint64_t bias)
{
	if (size < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) ||
	    img[EI_CLASS] != ELFCLASS64)
		return;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	if (eh->e_shentsize != sizeof(Elf64_Shdr) ||
	    !in_bounds(size, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)))
		return;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);
	size_t symtab = 0, dynsym = 0;
	for (size_t i = 1; i < eh->e_shnum; i++) {
		if (sh[i].sh_type == SHT_SYMTAB && !symtab)
			symtab = i;
		else if (sh[i].sh_type == SHT_DYNSYM && !dynsym)
			dynsym = i;
	}
	if (symtab)
		emit_table(w, kind, img, size, sh, eh->e_shnum, symtab, bias);
	else if (dynsym)
		emit_table(w, kind, img, size, sh, eh->e_shnum, dynsym, bias);
}

static void emit_file(struct lp_wbuf *w, int kind, const char *path, uint64_t bias)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat sb;
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0) {
		void *img = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (img != MAP_FAILED) {
			emit_image(w, kind, img, (size_t)sb.st_size, bias);
			munmap(img, (size_t)sb.st_size);
		}
	}
	close(fd);
}

/* Objects named so far (by program-header address, unique among loaded objects). */
static int seen_before(struct agent_objseen *seen, uintptr_t key)
{
	for (size_t i = 0; i < seen->n; i++)
		if (seen->key[i] == key)
			return 1;
	if (seen->n < AGENT_MAX_OBJS)
		seen->key[seen->n++] = key;
	return 0;
}

struct walk {
	struct lp_wbuf *w;
	struct agent_objseen *seen;
	int kind;
	uint64_t vdso;
};

static int each_object(struct dl_phdr_info *info, size_t size, void *data)
{
	struct walk *wk = data;
	uint64_t base = info->dlpi_addr;
	if (seen_before(wk->seen, (uintptr_t)info->dlpi_phdr))
		return 0;
	if (wk->vdso && (uint64_t)(uintptr_t)info->dlpi_phdr - wk->vdso < 4096) {
		/* The vDSO has no file: its whole image, section headers included, is mapped. */
		uint64_t end = wk->vdso;
		for (int i = 0; i < info->dlpi_phnum; i++)
			if (info->dlpi_phdr[i].p_type == PT_LOAD &&
			    base + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz > end)
				end = base + info->dlpi_phdr[i].p_vaddr + info->dlpi_phdr[i].p_memsz;
		/* Section headers follow the loaded bytes, inside the last mapped page. */
		end = (end + 4095) & ~(uint64_t)4095;
		emit_image(wk->w, wk->kind, (const uint8_t *)(uintptr_t)wk->vdso,
			   (size_t)(end - wk->vdso), base);
		return 0;
	}
	const char *path = info->dlpi_name;
	char exe[4096];
	if (!path || !*path) {
		/* The main program. */
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		if (n <= 0)
			return 0;
		exe[n] = '\0';
		path = exe;
	}
	emit_file(wk->w, wk->kind, path, base);
	return 0;
}

void agent_symtab_cfuncs(struct lp_wbuf *w, struct agent_objseen *seen, int kind)
{
	struct walk wk = { w, seen, kind, getauxval(AT_SYSINFO_EHDR) };
	if (kind == AGENT_SYMS_SYMTAB)
		seen->n = 0;
	dl_iterate_phdr(each_object, &wk);
}

void agent_symtab_csizes(struct lp_wbuf *w)
{
	static struct agent_objseen seen; /* callers are serialised by their stop paths */
	seen.n = 0;
	struct walk wk = { w, &seen, AGENT_SYMS_SIZES, getauxval(AT_SYSINFO_EHDR) };
	dl_iterate_phdr(each_object, &wk);
}

static int first_adds(struct dl_phdr_info *info, size_t size, void *data)
{
	*(unsigned long long *)data = info->dlpi_adds + info->dlpi_subs;
	return 1;
}

unsigned long long agent_objects_changes(void)
{
	unsigned long long adds = 0;
	dl_iterate_phdr(first_adds, &adds);
	return adds;
}
