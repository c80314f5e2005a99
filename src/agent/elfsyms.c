/*
** C symbols of every loaded object for the symtab, as Tarantool's lj_symtab_dump does:
** the ELF .symtab when the file has one, else its separate debug file's (by build ID or
** .gnu_debuglink, as GDB finds it: see find_debug), else .dynsym; the vDSO is read from
** memory.
** Objects loaded while profiling are named by mid-stream symbol events (sysprof event 11,
** memprof symtab event with source CFUNC: Tarantool defines both and its parsers read them).
**
** Code no symbol covers (the static functions of a stripped object: most of Debian's luajit,
** libc and libm) is named per function, "object+0xoffset" at the function's start, from the
** object's unwind table (.eh_frame_hdr, which stripping keeps): a flame graph then has one
** frame per function there instead of one per sampled instruction.
** Every call carries its own state, so the CPU and memory profilers may run at once.
**
** Runs at start, at stop (extents) and for objects loaded meanwhile (the CPU profiler's
** writer thread, the memory profiler's next event on the profiled thread), never in the
** signal handler: a walk reads the file and debug file of each object new to it once.
** Files are mapped read-only and every offset taken from them is checked against the
** file size (and the table's alignment) before use: a truncated or odd ELF file, or
** another build than the one mapped, gives fewer or wrong symbols, never a fault
** (tests/fuzz/fuzz_elfsyms.c).
*/
#include <elf.h>
#include <errno.h> /* program_invocation_name */
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/objects.h"
#include "stream/writer.h"
#include "util/grow.h"
#include "util/iset.h"

/* Most entries believed in a symbol table read from memory (libc has ~3,000 dynamic ones). */
#define SYMS_MAX (1u << 22)

/* Address ranges of one object's function symbols (load addresses). */
struct covers {
	struct cover { uint64_t lo, hi; } *c;
	size_t n, cap;
};

/* Writes one function's entry in the form `kind` asks for. */
static void emit_one(struct lp_wbuf *w, int kind, uint64_t addr, uint64_t size,
		     const char *name, size_t len)
{
	if (kind == AGENT_SYMS_SYSPROF)
		lp_write_sys_sym_cfunc(w, addr, name, len);
	else if (kind == AGENT_SYMS_MEMPROF)
		lp_write_mem_sym_cfunc(w, addr, name, len);
	else if (kind == AGENT_SYMS_SYMTAB)
		lp_write_sym_cfunc(w, addr, name, len);
	else if (size)
		lp_write_ext_csize(w, addr, size);
}

static int in_bounds(size_t size, uint64_t off, uint64_t len)
{
	return off <= size && len <= size - off;
}

/* Emits the STT_FUNC symbols of syms[0..n) named in str (strsz bytes), at bias. */
static void emit_syms(struct lp_wbuf *w, int kind, const Elf64_Sym *syms, size_t n,
		      const char *str, uint64_t strsz, uint64_t bias, struct covers *cv)
{
	for (size_t i = 0; i < n; i++) {
		const Elf64_Sym *y = &syms[i];
		if (ELF64_ST_TYPE(y->st_info) != STT_FUNC && ELF64_ST_TYPE(y->st_info) != STT_GNU_IFUNC)
			continue;
		if (y->st_shndx == SHN_UNDEF || y->st_value == 0 || y->st_name >= strsz)
			continue;
		const char *name = str + y->st_name;
		size_t len = strnlen(name, strsz - y->st_name);
		if (len == 0 || len == strsz - y->st_name)
			continue;
		emit_one(w, kind, y->st_value + bias, y->st_size, name, len);
		/* Without memory for the list some code may be named twice: harmless. */
		if (cv && !lp_grow((void **)&cv->c, &cv->cap, cv->n + 1, sizeof(*cv->c)))
			cv->c[cv->n++] = (struct cover){ y->st_value + bias,
							 y->st_value + bias + (y->st_size ? y->st_size : 1) };
	}
}

/* Emits the STT_FUNC symbols of the table at sh[idx] with its linked string table. */
static void emit_table(struct lp_wbuf *w, int kind, const uint8_t *img, size_t size,
		       const Elf64_Shdr *sh, size_t shnum, size_t idx, uint64_t bias,
		       struct covers *cv)
{
	const Elf64_Shdr *t = &sh[idx];
	if (t->sh_link >= shnum || t->sh_entsize != sizeof(Elf64_Sym) ||
	    t->sh_offset % _Alignof(Elf64_Sym) || !in_bounds(size, t->sh_offset, t->sh_size))
		return;
	const Elf64_Shdr *s = &sh[t->sh_link];
	if (s->sh_type != SHT_STRTAB || !in_bounds(size, s->sh_offset, s->sh_size) ||
	    ((t->sh_flags | s->sh_flags) & SHF_COMPRESSED))
		return;
	emit_syms(w, kind, (const Elf64_Sym *)(img + t->sh_offset), t->sh_size / sizeof(Elf64_Sym),
		  (const char *)(img + s->sh_offset), s->sh_size, bias, cv);
}

/* The section headers of an ELF64 image of `size` bytes, NULL if they cannot be read; their
 * count in *n. */
static const Elf64_Shdr *sections(const uint8_t *img, size_t size, size_t *n)
{
	*n = 0;
	if (size < sizeof(Elf64_Ehdr) || memcmp(img, ELFMAG, SELFMAG) ||
	    img[EI_CLASS] != ELFCLASS64)
		return NULL;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff % _Alignof(Elf64_Shdr) ||
	    !in_bounds(size, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)))
		return NULL;
	*n = eh->e_shnum;
	return (const Elf64_Shdr *)(img + eh->e_shoff);
}

/* The index of the image's first section of type, 0 if none. */
static size_t section_of(const Elf64_Shdr *sh, size_t n, uint32_t type)
{
	for (size_t i = 1; i < n; i++)
		if (sh[i].sh_type == type)
			return i;
	return 0;
}

/* Emits the function symbols of an ELF image of `size` bytes loaded at `bias`: its .symtab,
 * else, with dynsym, its .dynsym. 1 if it has a .symtab, else 0. */
static int emit_image(struct lp_wbuf *w, int kind, const uint8_t *img, size_t size,
		      uint64_t bias, struct covers *cv, int dynsym)
{
	size_t n;
	const Elf64_Shdr *sh = sections(img, size, &n);
	size_t symtab = section_of(sh, n, SHT_SYMTAB), dyn = section_of(sh, n, SHT_DYNSYM);
	if (symtab)
		emit_table(w, kind, img, size, sh, n, symtab, bias, cv);
	else if (dynsym && dyn)
		emit_table(w, kind, img, size, sh, n, dyn, bias, cv);
	return symtab != 0;
}

/* 1 if [addr, addr+len) lies in one of the object's loaded segments (mapped: readable). */
static int in_object(const struct dl_phdr_info *info, uint64_t addr, uint64_t len)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_R) && addr >= lo &&
		    addr - lo <= ph->p_memsz && len <= ph->p_memsz - (addr - lo))
			return 1;
	}
	return 0;
}

/* The loaded address of the object's (last) segment of type, 0 if none; its size in *len. */
static uint64_t segment(const struct dl_phdr_info *info, uint32_t type, uint64_t *len)
{
	uint64_t at = 0;
	*len = 0;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == type) {
			at = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
			*len = info->dlpi_phdr[i].p_memsz;
		}
	return at;
}

/* The GNU build ID among the notes at p (len bytes, entries aligned to align): its bytes at
 * *id and their count, 0 if there is none. */
static size_t note_build_id(const uint8_t *p, uint64_t len, uint64_t align, const uint8_t **id)
{
	while (len >= sizeof(Elf64_Nhdr)) {
		Elf64_Nhdr nh;
		memcpy(&nh, p, sizeof(nh));
		uint64_t name = ((uint64_t)nh.n_namesz + align - 1) & ~(align - 1);
		uint64_t desc = ((uint64_t)nh.n_descsz + align - 1) & ~(align - 1);
		if (name > len - sizeof(nh) || desc > len - sizeof(nh) - name)
			return 0;
		if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && nh.n_descsz &&
		    !memcmp(p + sizeof(nh), "GNU", 4)) {
			*id = p + sizeof(nh) + name;
			return nh.n_descsz;
		}
		p += sizeof(nh) + name + desc;
		len -= sizeof(nh) + name + desc;
	}
	return 0;
}

/* Note entries are padded to 8 bytes in a segment aligned so, to 4 otherwise. */
static uint64_t note_align(uint64_t p_align)
{
	return p_align == 8 ? 8 : 4;
}

/* The loaded object's GNU build ID, read from its notes in memory: its bytes at *id and
 * their count, 0 if it has none. */
static size_t loaded_build_id(const struct dl_phdr_info *info, const uint8_t **id)
{
	size_t len = 0;
	for (int i = 0; i < info->dlpi_phnum && !len; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t at = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_NOTE && in_object(info, at, ph->p_memsz))
			len = note_build_id((const uint8_t *)(uintptr_t)at, ph->p_memsz,
					    note_align(ph->p_align), id);
	}
	return len;
}

/*
** Whether the file read (img, size bytes) is the object loaded (info), not another build
** put at its path since it was loaded (a package upgraded under a running service): the
** same program headers, and the same build ID when the loaded object has one. Another
** file's symbols would name the loaded code after functions it does not have; without
** them, its functions are named from the unwind table in memory ("lib.so+0x1120").
*/
static int same_object(const uint8_t *img, size_t size, const struct dl_phdr_info *info)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	if (size < sizeof(*eh) || eh->e_phentsize != sizeof(Elf64_Phdr) ||
	    eh->e_phnum != info->dlpi_phnum || eh->e_phoff % _Alignof(Elf64_Phdr) ||
	    !in_bounds(size, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr)))
		return 0;
	const Elf64_Phdr *fph = (const Elf64_Phdr *)(img + eh->e_phoff);
	if (memcmp(fph, info->dlpi_phdr, eh->e_phnum * sizeof(Elf64_Phdr)))
		return 0;
	const uint8_t *mid = NULL, *fid = NULL;
	size_t mlen = loaded_build_id(info, &mid), flen = 0;
	if (!mlen)
		return 1;
	for (int i = 0; i < eh->e_phnum && !flen; i++)
		if (fph[i].p_type == PT_NOTE && in_bounds(size, fph[i].p_offset, fph[i].p_filesz))
			flen = note_build_id(img + fph[i].p_offset, fph[i].p_filesz,
					     note_align(fph[i].p_align), &fid);
	return flen == mlen && !memcmp(fid, mid, mlen);
}

/* Maps the regular file at path read-only: 0 (*img, *size), or -1. A FIFO or a device
 * there is neither opened for long nor read. */
static int map_file(const char *path, const uint8_t **img, size_t *size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY), ok = -1;
	if (fd < 0)
		return -1;
	struct stat sb;
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > 0 &&
	    (uint64_t)sb.st_size <= SIZE_MAX) {
		void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (p != MAP_FAILED) {
			*img = p;
			*size = (size_t)sb.st_size;
			ok = 0;
		}
	}
	close(fd);
	return ok;
}

/* -- Separate debug files ---------------------------------------------------------------- */

/*
** A stripped object (Debian's binaries: their symbols are in -dbgsym packages, under
** /usr/lib/debug) has its .symtab in a separate debug file, found as GDB and elfutils find
** it: by the loaded object's build ID, DIR/.build-id/NN/REST.debug for each debug directory
** DIR, then by the name and CRC in its file's .gnu_debuglink section, in the object's own
** directory, its .debug subdirectory, and under each DIR followed by that directory. The
** debug directories are LUAPROF_DEBUG_DIR's (':'-separated, as GDB's debug-file-directory),
** else /usr/lib/debug. A candidate is taken only if it is the object's: an ELF file with
** a .symtab and the same build ID; one found through the debuglink when either side has
** no build ID, with the CRC the link names (the whole file read, up to DEBUG_CRC_MAX).
** Its symbols are the object's link-time addresses: the object's load bias applies.
*/

/* A debug file larger than this is not read whole for a CRC: its object keeps its own
 * file's symbols. */
#define DEBUG_CRC_MAX (256u << 20)

static const char *debug_dirs = "/usr/lib/debug";
static pthread_once_t debug_once = PTHREAD_ONCE_INIT;

/* Read once per process, at the first profile's start (its thread): not on every walk,
 * some of which run on the writer thread while the program may change its environment. */
static void debug_dirs_read(void)
{
	const char *env = getenv("LUAPROF_DEBUG_DIR");
	char *copy = env && *env ? strdup(env) : NULL;
	if (copy)
		debug_dirs = copy;
}

/* The CRC-32 of .gnu_debuglink (zlib's and GDB's gnu_debuglink_crc32). */
static uint32_t debuglink_crc(const uint8_t *p, size_t n)
{
	uint32_t tab[256];
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
		tab[i] = c;
	}
	uint32_t crc = 0xffffffffu;
	for (size_t i = 0; i < n; i++)
		crc = tab[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
	return crc ^ 0xffffffffu;
}

/* The GNU build ID of an ELF file from its note sections (a debug file's program headers
 * may not describe its own bytes): its bytes at *id and their count, 0 if none. */
static size_t file_build_id(const uint8_t *img, size_t size, const uint8_t **id)
{
	size_t n, len = 0;
	const Elf64_Shdr *sh = sections(img, size, &n);
	for (size_t i = 1; i < n && !len; i++)
		if (sh[i].sh_type == SHT_NOTE && in_bounds(size, sh[i].sh_offset, sh[i].sh_size))
			len = note_build_id(img + sh[i].sh_offset, sh[i].sh_size,
					    note_align(sh[i].sh_addralign), id);
	return len;
}

/* The file's .gnu_debuglink: the debug file's name (a string of at most PATH_MAX bytes,
 * no directory) at *name and its CRC; 0, or -1 if it has none. */
static int debuglink(const uint8_t *img, size_t size, const char **name, uint32_t *crc)
{
	size_t n;
	const Elf64_Shdr *sh = sections(img, size, &n);
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	if (!sh || eh->e_shstrndx == SHN_UNDEF || eh->e_shstrndx >= n)
		return -1;
	const Elf64_Shdr *names = &sh[eh->e_shstrndx];
	if (!in_bounds(size, names->sh_offset, names->sh_size))
		return -1;
	static const char want[] = ".gnu_debuglink";
	for (size_t i = 1; i < n; i++) {
		if (sh[i].sh_type != SHT_PROGBITS || sh[i].sh_name >= names->sh_size ||
		    names->sh_size - sh[i].sh_name < sizeof(want) ||
		    memcmp(img + names->sh_offset + sh[i].sh_name, want, sizeof(want)) ||
		    !in_bounds(size, sh[i].sh_offset, sh[i].sh_size))
			continue;
		/* The name, NUL, padding to 4 bytes, then the CRC. */
		const char *s = (const char *)(img + sh[i].sh_offset);
		size_t len = strnlen(s, sh[i].sh_size);
		size_t at = (len + 1 + 3) & ~(size_t)3;
		if (!len || len > PATH_MAX || memchr(s, '/', len) ||
		    at > sh[i].sh_size || sh[i].sh_size - at < 4)
			return -1;
		*name = s;
		memcpy(crc, img + sh[i].sh_offset + at, 4);
		return 0;
	}
	return -1;
}

/*
** Whether the candidate (img, size bytes) is the debug file of an object whose build ID is
** id (idlen bytes, 0 if none): an ELF file with a .symtab, whose build ID is the same; when
** found through a debuglink (by_link) and either build ID is missing, whose CRC is crc.
*/
static int debug_matches(const uint8_t *img, size_t size, const uint8_t *id, size_t idlen,
			 int by_link, uint32_t crc)
{
	size_t n;
	const Elf64_Shdr *sh = sections(img, size, &n);
	if (!section_of(sh, n, SHT_SYMTAB))
		return 0;
	const uint8_t *fid = NULL;
	size_t flen = file_build_id(img, size, &fid);
	if (idlen && flen)
		return flen == idlen && !memcmp(fid, id, idlen);
	return by_link && size <= DEBUG_CRC_MAX && debuglink_crc(img, size) == crc;
}

/* Maps the file at path into *img, *size if it is the debug file sought (debug_matches):
 * 0, or -1. */
static int try_debug(const char *path, const uint8_t *id, size_t idlen, int by_link,
		     uint32_t crc, const uint8_t **img, size_t *size)
{
	if (map_file(path, img, size))
		return -1;
	if (debug_matches(*img, *size, id, idlen, by_link, crc))
		return 0;
	munmap((void *)(uintptr_t)*img, *size);
	return -1;
}

/* The next debug directory of the list at *dirs: its length, *dirs moved past it; 0 at the
 * list's end (empty entries are skipped). */
static size_t next_dir(const char **dirs, const char **dir)
{
	while (**dirs == ':')
		(*dirs)++;
	*dir = *dirs;
	size_t len = strcspn(*dirs, ":");
	*dirs += len;
	return len;
}

/*
** Maps the separate debug file of the loaded object (info) into *img, *size: 0, or -1 if
** there is none that matches. file is its file as read (img0, size0 bytes), or NULL when
** that is not the object loaded any more (only the build ID, read from memory, finds it
** then); path the object's path, whose directory the debuglink is looked for in.
*/
static int find_debug(const struct dl_phdr_info *info, const uint8_t *img0, size_t size0,
		      const char *path, const uint8_t **img, size_t *size)
{
	pthread_once(&debug_once, debug_dirs_read);
	const uint8_t *id = NULL;
	size_t idlen = loaded_build_id(info, &id);
	char p[PATH_MAX], hex[2 * 64 + 1];
	const char *dirs, *dir;
	size_t dlen;
	if (idlen >= 2 && idlen <= 64) {
		for (size_t i = 0; i < idlen; i++)
			snprintf(hex + 2 * i, 3, "%02x", id[i]);
		for (dirs = debug_dirs; (dlen = next_dir(&dirs, &dir));) {
			int len = snprintf(p, sizeof(p), "%.*s/.build-id/%.2s/%s.debug", (int)dlen,
					   dir, hex, hex + 2);
			if (len > 0 && (size_t)len < sizeof(p) &&
			    !try_debug(p, id, idlen, 0, 0, img, size))
				return 0;
		}
	}
	const char *name;
	uint32_t crc;
	if (!img0 || debuglink(img0, size0, &name, &crc))
		return -1;
	/* The object's directory, with the links the loader followed resolved. */
	char real[PATH_MAX], objdir[PATH_MAX];
	if (realpath(path, real))
		path = real;
	const char *slash = strrchr(path, '/');
	int olen = slash ? snprintf(objdir, sizeof(objdir), "%.*s", (int)(slash - path), path) :
			   snprintf(objdir, sizeof(objdir), ".");
	if (olen < 0 || (size_t)olen >= sizeof(objdir))
		return -1;
	int len = snprintf(p, sizeof(p), "%s/%s", objdir, name);
	if (len > 0 && (size_t)len < sizeof(p) && !try_debug(p, id, idlen, 1, crc, img, size))
		return 0;
	len = snprintf(p, sizeof(p), "%s/.debug/%s", objdir, name);
	if (len > 0 && (size_t)len < sizeof(p) && !try_debug(p, id, idlen, 1, crc, img, size))
		return 0;
	for (dirs = debug_dirs; (dlen = next_dir(&dirs, &dir));) {
		len = snprintf(p, sizeof(p), "%.*s%s%s/%s", (int)dlen, dir,
			       objdir[0] == '/' ? "" : "/", objdir, name);
		if (len > 0 && (size_t)len < sizeof(p) &&
		    !try_debug(p, id, idlen, 1, crc, img, size))
			return 0;
	}
	return -1;
}

/* Emits the function symbols of the object's separate debug file (find_debug's arguments):
 * 1 if it has one, else 0. */
static int emit_debug(struct lp_wbuf *w, int kind, const struct dl_phdr_info *info,
		      const uint8_t *img0, size_t size0, const char *path, struct covers *cv)
{
	const uint8_t *img;
	size_t size;
	if (find_debug(info, img0, size0, path, &img, &size))
		return 0;
	emit_image(w, kind, img, size, info->dlpi_addr, cv, 0);
	munmap((void *)(uintptr_t)img, size);
	return 1;
}

/*
** Emits the function symbols of the file at `file` if it is the object info describes:
** its .symtab, else its separate debug file's, else its .dynsym. 1 if it is the object,
** else 0. path is the object's path (the directory of its debuglink), which file names
** too but for the main program (read through /proc/self/exe).
*/
static int emit_file(struct lp_wbuf *w, int kind, const char *file, const char *path,
		     const struct dl_phdr_info *info, struct covers *cv)
{
	const uint8_t *img;
	size_t size;
	if (map_file(file, &img, &size))
		return 0;
	int same = same_object(img, size, info);
	if (same && !emit_image(w, kind, img, size, info->dlpi_addr, cv, 0) &&
	    !emit_debug(w, kind, info, img, size, path, cv))
		emit_image(w, kind, img, size, info->dlpi_addr, cv, 1);
	munmap((void *)(uintptr_t)img, size);
	return same;
}

/* An address the dynamic section gives for len bytes of the object: relocated in place by
 * the loader (glibc, where the section is writable) or still relative to its base; 0 if
 * neither lies in the object. */
static uint64_t dyn_addr(const struct dl_phdr_info *info, uint64_t v, uint64_t len)
{
	if (v >= info->dlpi_addr && in_object(info, v, len))
		return v;
	if (in_object(info, info->dlpi_addr + v, len))
		return info->dlpi_addr + v;
	return 0;
}

/* Entries of the dynamic symbol table, from its GNU hash table at h: one past the last
 * symbol any chain reaches; 0 if the table cannot be read. */
static uint64_t gnu_hash_count(const struct dl_phdr_info *info, uint64_t h)
{
	uint32_t hd[4]; /* buckets, first hashed symbol, bloom words, bloom shift */
	if (!h || !in_object(info, h, sizeof(hd)))
		return 0;
	memcpy(hd, (const void *)(uintptr_t)h, sizeof(hd));
	uint64_t buckets = h + sizeof(hd) + 8ull * hd[2], chain = buckets + 4ull * hd[0];
	if (!in_object(info, buckets, 4ull * hd[0]))
		return 0;
	uint32_t last = 0;
	for (uint32_t b = 0; b < hd[0]; b++) {
		uint32_t v;
		memcpy(&v, (const void *)(uintptr_t)(buckets + 4ull * b), 4);
		if (v > last)
			last = v;
	}
	if (last < hd[1])
		return hd[1];
	for (uint64_t i = last; i - hd[1] < SYMS_MAX; i++) {
		uint64_t at = chain + 4 * (i - hd[1]);
		uint32_t v;
		if (!in_object(info, at, 4))
			return 0;
		memcpy(&v, (const void *)(uintptr_t)at, 4);
		if (v & 1)
			return i + 1;
	}
	return 0;
}

/*
** Emits the function symbols of the object's dynamic symbol table as it is loaded, for an
** object whose file is not the one loaded any more: its exported functions keep their
** names. The table, its strings and its hash table lie in the object's loaded segments.
*/
static void emit_loaded(struct lp_wbuf *w, int kind, const struct dl_phdr_info *info,
			struct covers *cv)
{
	uint64_t dynlen, dyn = segment(info, PT_DYNAMIC, &dynlen);
	if (!dyn || dyn % _Alignof(Elf64_Dyn) || !in_object(info, dyn, dynlen))
		return;
	uint64_t symtab = 0, strtab = 0, strsz = 0, syment = 0, hash = 0, gnu_hash = 0;
	const Elf64_Dyn *d = (const Elf64_Dyn *)(uintptr_t)dyn;
	for (uint64_t i = 0; i < dynlen / sizeof(*d) && d[i].d_tag != DT_NULL; i++) {
		uint64_t v = d[i].d_un.d_val;
		switch (d[i].d_tag) {
		case DT_SYMTAB: symtab = v; break;
		case DT_STRTAB: strtab = v; break;
		case DT_STRSZ: strsz = v; break;
		case DT_SYMENT: syment = v; break;
		case DT_HASH: hash = v; break;
		case DT_GNU_HASH: gnu_hash = v; break;
		}
	}
	uint64_t n = 0;
	if (gnu_hash)
		n = gnu_hash_count(info, dyn_addr(info, gnu_hash, 16));
	if (!n && hash && (hash = dyn_addr(info, hash, 8))) {
		uint32_t nchain; /* one chain entry per symbol */
		memcpy(&nchain, (const void *)(uintptr_t)(hash + 4), 4);
		n = nchain;
	}
	if (syment != sizeof(Elf64_Sym) || !n || n > SYMS_MAX ||
	    !(symtab = dyn_addr(info, symtab, n * sizeof(Elf64_Sym))) ||
	    symtab % _Alignof(Elf64_Sym) || !(strtab = dyn_addr(info, strtab, strsz)))
		return;
	emit_syms(w, kind, (const Elf64_Sym *)(uintptr_t)symtab, n,
		  (const char *)(uintptr_t)strtab, strsz, info->dlpi_addr, cv);
}

/* -- Functions without a symbol ---------------------------------------------------------- */

/* The interpreter's block and the FFI call routine after it, which the profilers name
 * themselves (lj_vm_asm_begin, lj_vm_ffi_call): never named from the unwind table. */
static _Atomic uint64_t vm_lo, vm_hi;

void agent_symtab_vm_block(uint64_t lo, uint64_t hi)
{
	atomic_store(&vm_lo, lo);
	atomic_store(&vm_hi, hi);
}

/* The executable segment holding addr: its header, or NULL. */
static const ElfW(Phdr) *text_of(const struct dl_phdr_info *info, uint64_t addr)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uint64_t lo = info->dlpi_addr + ph->p_vaddr;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) && addr >= lo &&
		    addr - lo < ph->p_filesz)
			return ph;
	}
	return NULL;
}

/* Bytes of a DWARF pointer encoding's value (its format nibble), 0 if unsupported. */
static unsigned enc_size(uint8_t enc)
{
	switch (enc & 0x0f) {
	case 0x00: case 0x04: case 0x0c: return 8; /* absptr, udata8, sdata8 */
	case 0x02: case 0x0a: return 2;            /* udata2, sdata2 */
	case 0x03: case 0x0b: return 4;            /* udata4, sdata4 */
	default: return 0;
	}
}

static const uint8_t *skip_leb(const uint8_t *p, const uint8_t *end)
{
	while (p < end && (*p & 0x80))
		p++;
	return p < end ? p + 1 : NULL;
}

/* The pointer encoding of the FDEs of the CIE at cie ('R' of its augmentation; absptr
 * without one), or -1 when the CIE is not one this parser reads. */
static int cie_fde_enc(const struct dl_phdr_info *info, uint64_t cie)
{
	uint32_t len;
	if (!in_object(info, cie, 8))
		return -1;
	memcpy(&len, (const void *)(uintptr_t)cie, 4);
	/* Room for the id, the version and an empty augmentation at least. */
	if (len < 6 || len == 0xffffffffu || !in_object(info, cie + 4, len))
		return -1;
	uint32_t id;
	memcpy(&id, (const void *)(uintptr_t)(cie + 4), 4);
	const uint8_t *p = (const uint8_t *)(uintptr_t)cie + 8, *end = p + len - 4;
	uint8_t version = *p++;
	if (id != 0 || (version != 1 && version != 3))
		return -1;
	const char *aug = (const char *)p;
	size_t alen = strnlen(aug, (size_t)(end - p));
	if (alen == (size_t)(end - p) || (alen && aug[0] != 'z') || strstr(aug, "eh"))
		return alen ? -1 : 0x00;
	p += alen + 1;
	/* Code and data alignment, then the return address register. */
	if (!(p = skip_leb(p, end)) || !(p = skip_leb(p, end)))
		return -1;
	if (version == 1)
		p++;
	else if (!(p = skip_leb(p, end)))
		return -1;
	if (!alen)
		return 0x00;
	if (!(p = skip_leb(p, end))) /* augmentation data length */
		return -1;
	for (const char *a = aug + 1; *a; a++) {
		if (p >= end)
			return -1;
		if (*a == 'R')
			return *p;
		if (*a == 'L') {
			p++;
		} else if (*a == 'P') {
			unsigned n = enc_size(*p);
			if (!n || (*p & 0x70) == 0x50) /* aligned: not written by today's tools */
				return -1;
			p += 1 + n;
		} else if (*a != 'S' && *a != 'B' && *a != 'G') {
			return -1;
		}
	}
	return 0x00;
}

/* The extent of the function the FDE at fde describes, 0 if unknown. The last CIE read is
 * remembered: an object's FDEs share one or a few. */
static uint64_t fde_range(const struct dl_phdr_info *info, uint64_t fde, uint64_t *last_cie,
			  int *last_enc)
{
	uint32_t len, cie_ofs;
	if (!in_object(info, fde, 8))
		return 0;
	memcpy(&len, (const void *)(uintptr_t)fde, 4);
	memcpy(&cie_ofs, (const void *)(uintptr_t)(fde + 4), 4);
	if (len < 8 || len == 0xffffffffu || cie_ofs == 0 || cie_ofs > fde + 4 ||
	    !in_object(info, fde + 4, len))
		return 0;
	uint64_t cie = fde + 4 - cie_ofs;
	if (cie != *last_cie) {
		*last_cie = cie;
		*last_enc = cie_fde_enc(info, cie);
	}
	unsigned n = *last_enc < 0 ? 0 : enc_size((uint8_t)*last_enc);
	if (!n || 8 + 2ull * n > 4ull + len)
		return 0;
	/* pc_begin, then pc_range in the same format without the application part. */
	const uint8_t *r = (const uint8_t *)(uintptr_t)(fde + 8 + n);
	if (n == 2) {
		uint16_t v;
		memcpy(&v, r, 2);
		return v;
	}
	if (n == 4) {
		uint32_t v;
		memcpy(&v, r, 4);
		return v;
	}
	uint64_t v;
	memcpy(&v, r, 8);
	return v;
}

static int cover_cmp(const void *a, const void *b)
{
	const struct cover *x = a, *y = b;
	return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* 1 if a symbol of the object covers addr; cv sorted, hi turned into a running maximum. */
static int covered(const struct covers *cv, uint64_t addr)
{
	size_t lo = 0, hi = cv->n;
	while (lo < hi) { /* first cover with lo > addr */
		size_t mid = lo + (hi - lo) / 2;
		if (cv->c[mid].lo <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 && addr < cv->c[lo - 1].hi;
}

/* Largest function extent believed: beyond it the table is taken to be wrong. */
#define FUNC_MAX (16u << 20)

/*
** Names every function of the object's unwind table that no symbol (cv) covers, after the
** object's file offset of its start ("luajit+0x3b560": what an address there was called
** before, now one name for the whole function), with its extent for AGENT_SYMS_SIZES.
*/
static void emit_unnamed(struct lp_wbuf *w, int kind, const struct dl_phdr_info *info,
			 const char *path, struct covers *cv)
{
	uint64_t hdrlen, hdr = segment(info, PT_GNU_EH_FRAME, &hdrlen);
	struct obj_text t;
	if (!hdr || !in_object(info, hdr, hdrlen) || agent_objects_parse_hdr(hdr, hdrlen, &t))
		return;
	if (cv->n > 1)
		qsort(cv->c, cv->n, sizeof(*cv->c), cover_cmp);
	for (size_t i = 1; i < cv->n; i++)
		if (cv->c[i].hi < cv->c[i - 1].hi)
			cv->c[i].hi = cv->c[i - 1].hi;
	/* The name the report gives other addresses of the object: its mapping's path, with
	 * the links the loader followed resolved (libz.so -> libz.so.1.2.13). */
	char real[PATH_MAX];
	if (realpath(path, real))
		path = real;
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	uint64_t vlo = atomic_load(&vm_lo), vhi = atomic_load(&vm_hi), last_cie = 0;
	int last_enc = -1;
	const uint8_t *tab = (const uint8_t *)(uintptr_t)t.table;
	for (uint64_t i = 0; i < t.nfde; i++) {
		int32_t ent[2]; /* initial location, FDE: relative to the header */
		memcpy(ent, tab + 8 * i, sizeof(ent));
		uint64_t start = hdr + (uint64_t)(int64_t)ent[0];
		const ElfW(Phdr) *ph = text_of(info, start);
		if (!ph || covered(cv, start) || (start >= vlo && start <= vhi))
			continue;
		uint64_t size = fde_range(info, hdr + (uint64_t)(int64_t)ent[1], &last_cie,
					  &last_enc);
		if (!size || size > FUNC_MAX)
			continue;
		char name[AGENT_NAME_MAX];
		uint64_t off = start - info->dlpi_addr - ph->p_vaddr + ph->p_offset;
		int len = snprintf(name, sizeof(name), "%s+0x%llx", base, (unsigned long long)off);
		if (len <= 0 || (size_t)len >= sizeof(name))
			continue;
		emit_one(w, kind, start, size, name, (size_t)len);
	}
}

/* Whether the object was loaded at the last walk (struct agent_objseen); notes it as
 * loaded at this one. */
static int seen_before(struct agent_objseen *seen, const struct dl_phdr_info *info)
{
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	uint64_t key = (uint64_t)(uintptr_t)info->dlpi_phdr ^ lp_hash_bytes(name, strlen(name), 0);
	if (seen->nnow < AGENT_MAX_OBJS)
		seen->now[seen->nnow++] = key;
	for (size_t i = 0; i < seen->n; i++)
		if (seen->key[i] == key)
			return 1;
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
	if (seen_before(wk->seen, info))
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
			   (size_t)(end - wk->vdso), base, NULL, 1);
		return 0;
	}
	const char *path = info->dlpi_name, *file = path;
	char exe[4096];
	int main_program = !path || !*path;
	if (main_program) {
		/* The main program: read through the kernel's reference to the file running,
		 * which stays the one loaded though its path may now name another. */
		ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
		exe[n > 0 ? n : 0] = '\0';
		size_t del = strlen(" (deleted)");
		if (n > 0 && (size_t)n > del && !strcmp(exe + n - del, " (deleted)"))
			exe[n - del] = '\0';
		path = n > 0 ? exe : program_invocation_name;
		file = "/proc/self/exe";
	}
	struct covers cv = { NULL, 0, 0 };
	if (!emit_file(wk->w, wk->kind, file, path, info, &cv)) {
		/* A program run through the dynamic loader (`ld.so prog`): the file running is
		 * the loader; the program is the one it was asked to run (argv[0] then), and
		 * is named so whether or not that file is still the one loaded. An object
		 * whose file is another now may still have its debug file, by build ID. */
		if (main_program)
			path = program_invocation_name;
		if ((!main_program || !emit_file(wk->w, wk->kind, path, path, info, &cv)) &&
		    !emit_debug(wk->w, wk->kind, info, NULL, 0, path, &cv))
			emit_loaded(wk->w, wk->kind, info, &cv);
	}
	emit_unnamed(wk->w, wk->kind, info, path, &cv);
	free(cv.c);
	return 0;
}

void agent_symtab_cfuncs(struct lp_wbuf *w, struct agent_objseen *seen, int kind)
{
	struct walk wk = { w, seen, kind, getauxval(AT_SYSINFO_EHDR) };
	if (kind == AGENT_SYMS_SYMTAB)
		seen->n = 0;
	seen->nnow = 0;
	dl_iterate_phdr(each_object, &wk);
	memcpy(seen->key, seen->now, seen->nnow * sizeof(seen->now[0]));
	seen->n = seen->nnow;
}

void agent_symtab_csizes(struct lp_wbuf *w)
{
	static struct agent_objseen seen; /* callers are serialised by their stop paths */
	seen.n = seen.nnow = 0;
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
