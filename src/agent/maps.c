/*
** The luaprof extension written at stop: the process's executable mappings (with GNU
** build-ids) and facts about the recording (docs/FORMAT.md, "lpx").
**
** Never runs in the signal handler. Mappings come from /proc/self/maps, read at start,
** whenever the writer thread sees objects loaded or unloaded, and at stop, so that objects
** loaded after start, unloaded before stop, the vDSO and the main program are all there;
** build-ids come from the PT_NOTE segments of the objects the dynamic loader knows,
** matched by path.
*/
#include <elf.h>
#include <fcntl.h>
#include <inttypes.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent.h"
#include "stream/writer.h"

#define MAX_IDS 512
#define BUILD_ID_MAX 64

struct build_id {
	char path[512];
	uint8_t id[BUILD_ID_MAX];
	size_t len;
};

struct ids {
	struct build_id *v;
	size_t n;
	char exe[512];
};

/* 1 if the object's note segment ph lies in one of its loaded segments (the header may
 * place one where nothing is mapped). */
static int note_loaded(const struct dl_phdr_info *info, const ElfW(Phdr) *ph)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ld = &info->dlpi_phdr[i];
		uint64_t off = ph->p_vaddr - ld->p_vaddr;
		if (ld->p_type == PT_LOAD && off < ld->p_memsz && ph->p_memsz <= ld->p_memsz - off)
			return 1;
	}
	return 0;
}

/* Finds NT_GNU_BUILD_ID in the note segments of a loaded object (mapped memory). */
static size_t find_build_id(const struct dl_phdr_info *info, uint8_t *out)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_NOTE || !note_loaded(info, ph))
			continue;
		const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
		size_t left = ph->p_memsz;
		while (left >= sizeof(ElfW(Nhdr))) {
			const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
			size_t nsz = (nh->n_namesz + 3u) & ~3u, dsz = (nh->n_descsz + 3u) & ~3u;
			size_t need = sizeof(*nh) + nsz + dsz;
			if (need > left || nsz < nh->n_namesz || dsz < nh->n_descsz)
				break;
			const char *name = (const char *)(nh + 1);
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 &&
			    !memcmp(name, "GNU", 4) && nh->n_descsz <= BUILD_ID_MAX) {
				memcpy(out, name + nsz, nh->n_descsz);
				return nh->n_descsz;
			}
			p += need;
			left -= need;
		}
	}
	return 0;
}

static int collect(struct dl_phdr_info *info, size_t size, void *data)
{
	struct ids *ids = data;
	if (ids->n == MAX_IDS)
		return 1;
	struct build_id *b = &ids->v[ids->n];
	const char *path = info->dlpi_name && *info->dlpi_name ? info->dlpi_name : ids->exe;
	if (!*path)
		return 0;
	b->len = find_build_id(info, b->id);
	if (!strcmp(path, "linux-vdso.so.1"))
		path = "[vdso]"; /* as /proc/self/maps calls it */
	/* Paths in /proc/self/maps are canonical; the loader's may not be. */
	char *real = realpath(path, NULL);
	snprintf(b->path, sizeof(b->path), "%s", real ? real : path);
	free(real);
	if (b->len)
		ids->n++;
	return 0;
}

static const struct build_id *lookup(const struct ids *ids, const char *path)
{
	for (size_t i = 0; i < ids->n; i++)
		if (!strcmp(ids->v[i].path, path))
			return &ids->v[i];
	return NULL;
}

/* Executable mappings seen since start: an object unloaded before stop (say by a
 * finalizer at lua_close) still names the samples taken while it was there. */
struct map_rec {
	uint64_t lo, hi, off;
	char *path;
	uint8_t id[BUILD_ID_MAX];
	size_t idlen;
};

static struct map_rec *recs;
static size_t nrecs, caprecs;
/* recs: the CPU profiler's writer thread and the VM's thread both note and write it. Held
 * across fork (pthread_atfork) so that the child's copy is never left locked. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void fork_lock(void)
{
	pthread_mutex_lock(&lock);
}

static void fork_unlock(void)
{
	pthread_mutex_unlock(&lock);
}

static void init_once(void)
{
	pthread_atfork(fork_lock, fork_unlock, fork_unlock);
}

static void reset_locked(int other_running)
{
	if (other_running)
		return;
	for (size_t i = 0; i < nrecs; i++)
		free(recs[i].path);
	nrecs = 0;
}

void agent_maps_reset(int other_running)
{
	pthread_once(&once, init_once);
	pthread_mutex_lock(&lock);
	reset_locked(other_running);
	pthread_mutex_unlock(&lock);
}

static void note_locked(void);

void agent_maps_note(void)
{
	pthread_once(&once, init_once);
	pthread_mutex_lock(&lock);
	note_locked();
	pthread_mutex_unlock(&lock);
}

static void note_locked(void)
{
	struct ids ids = { calloc(MAX_IDS, sizeof(struct build_id)), 0, "" };
	ssize_t n = readlink("/proc/self/exe", ids.exe, sizeof(ids.exe) - 1);
	ids.exe[n > 0 ? n : 0] = '\0';
	if (ids.v)
		dl_iterate_phdr(collect, &ids);
	FILE *f = fopen("/proc/self/maps", "re");
	if (f) {
		char line[4096 + 256];
		while (fgets(line, sizeof(line), f)) {
			unsigned long long lo, hi, off;
			char perms[8];
			int pos = 0;
			if (sscanf(line, "%llx-%llx %7s %llx %*s %*s%n", &lo, &hi, perms, &off,
				   &pos) != 4 || !strchr(perms, 'x') || hi <= lo)
				continue;
			char *path = line + pos;
			while (*path == ' ')
				path++;
			path[strcspn(path, "\n")] = '\0';
			/* Anonymous executable memory (JIT machine code) is no object. */
			if (!*path || !strcmp(path, "[vsyscall]"))
				continue;
			size_t i;
			for (i = 0; i < nrecs; i++)
				if (recs[i].lo == lo && recs[i].hi == hi && recs[i].off == off &&
				    !strcmp(recs[i].path, path))
					break;
			if (i < nrecs)
				continue;
			if (nrecs == caprecs) {
				size_t cap = caprecs ? caprecs * 2 : 64;
				struct map_rec *r = realloc(recs, cap * sizeof(*r));
				if (!r)
					break;
				recs = r;
				caprecs = cap;
			}
			struct map_rec *r = &recs[nrecs];
			if (!(r->path = strdup(path)))
				break;
			r->lo = lo;
			r->hi = hi;
			r->off = off;
			const struct build_id *b = lookup(&ids, path);
			r->idlen = b ? b->len : 0;
			if (b)
				memcpy(r->id, b->id, b->len);
			nrecs++;
		}
		fclose(f);
	}
	free(ids.v);
}

void agent_write_extension(struct lp_wbuf *w, void (*extra)(struct lp_wbuf *w),
			   const char *const *meta, int other_running)
{
	pthread_once(&once, init_once);
	pthread_mutex_lock(&lock);
	note_locked();
	lp_write_ext_prologue(w);
	for (size_t i = 0; i < nrecs; i++)
		lp_write_ext_map(w, recs[i].lo, recs[i].hi, recs[i].off, recs[i].path, recs[i].id,
				 recs[i].idlen);
	reset_locked(other_running);
	pthread_mutex_unlock(&lock);
	agent_symtab_csizes(w);
	agent_cnames_write(w);
	/* The facts before the bulk of stacks and samples: a stream cut inside those keeps
	 * the sampling interval that gives its samples their weight. */
	for (size_t i = 0; meta && meta[i] && meta[i + 1]; i += 2)
		lp_write_ext_meta(w, meta[i], meta[i + 1]);
	if (extra)
		extra(w);
	lp_write_ext_end(w);
}

void agent_cmdline(char *buf, size_t len)
{
	buf[0] = '\0';
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		return;
	while (n > 0 && buf[n - 1] == '\0')
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == '\0')
			buf[i] = ' ';
	buf[n] = '\0';
}
