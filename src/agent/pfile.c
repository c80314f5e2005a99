/*
** A profile's file for the Lua API and `luaprof record`: open, the writer callback (direct
** or through a writer thread and a double buffer), close.
**
** Why a thread: in exact mode the memory profiler writes from inside the VM's allocator,
** tens of millions of events a second on allocation-heavy code; write(2) of each full
** buffer there cost about a tenth of the program's time on tmpfs, more on a disk, and
** encoding each event (ULEB128) about as much again. So exact mode hands this file raw
** event records (agent_pfile_raw, rawev.h) and the thread encodes them before writing. The
** CPU profiler has a writer thread of its own and uses the direct form.
**
** The handover: `idle` is posted while the thread waits for work. The writer callback
** takes it (waiting only when the previous half is still being written), publishes the
** full half and posts `go`; the thread writes it and posts `idle` again. A failed write
** is kept in err and reported by the next callback or by close. After fork(2) the thread
** and the files are the parent's alone: a child's copies of the descriptors are closed
** (open_child), and its writes to them fail (EBADF) without waiting on the thread.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/pfile.h"
#include "agent/rawev.h"

/* Two halves of 2 MiB when threaded: at the densest allocation seen (binary trees, ~150 MB
 * a second of events) a half lasts ~13 ms, far longer than tmpfs or a page cache takes to
 * accept it. */
#define PFILE_BUF_SIZE (4u << 20)
_Static_assert(PFILE_BUF_SIZE % 128 == 0, "each half of the buffer is whole cache lines");

struct agent_pfile {
	int fd;
	dev_t dev;      /* the file fd was opened on: for the check of open_files (exclusive */
	ino_t ino;      /* files), and to see that fd still is it (same_file) */
	int exclusive;  /* a file two profiles must not share (claim): regular, pipe, socket */
	int trunc;      /* a file that had contents: emptied at the first write, not at open */
	int threaded;
	pid_t pid;      /* the process whose thread writes */
	pthread_t thread;
	sem_t idle, go;
	const uint8_t *pend;
	size_t plen;
	int quit;
	int err;        /* errno of the first failed write, 0 if none */
	int created;    /* open made the file at path */
	int refused;    /* the profile's start failed (agent_pfile_refused) */
	char path[PATH_MAX]; /* as open was given it; "" if longer */
	uint8_t *rawout; /* raw events (agent_pfile_raw): their encoding, written from here */
	struct agent_rawev_enc enc;
	/* Aligned: exact mode's records keep the buffer's 8-byte alignment (rawev.h), and
	 * whole cache lines suit their stores past the caches. */
	_Alignas(64) uint8_t buf[PFILE_BUF_SIZE];
};

/* Whether f->fd is still the file it was opened on: a program that closes every
 * descriptor it did not open (or closes ours by mistake) and opens another file, which
 * gets the same number, must not receive the profile's bytes. */
static int same_file(const struct agent_pfile *f)
{
	struct stat st;
	return fstat(f->fd, &st) == 0 && st.st_dev == f->dev && st.st_ino == f->ino;
}

/* Writes all of len bytes; returns how many were written (errno tells why not all:
 * EBADF when the program closed the profile's descriptor). */
static size_t write_all(struct agent_pfile *f, const uint8_t *p, size_t len)
{
	size_t done = 0;
	if (!same_file(f)) {
		errno = EBADF;
		return 0;
	}
	if (f->trunc) {
		if (ftruncate(f->fd, 0) != 0)
			return 0;
		f->trunc = 0;
	}
	while (done < len) {
		ssize_t n = write(f->fd, p + done, len - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO; /* no progress and no error: not retried forever */
			return done;
		}
		done += (size_t)n;
	}
	return done;
}

/* Raw events that pass through a buffer this size are encoded and written a part at a
 * time. */
#define PFILE_RAWOUT_SIZE (256u << 10)

/* Writes the stream's bytes p[0, len): as they are, or encoded when they are raw events.
 * Returns len, or less when a write failed (errno tells why). */
static size_t write_out(struct agent_pfile *f, const uint8_t *p, size_t len)
{
	if (!f->rawout)
		return write_all(f, p, len);
	size_t used = 0;
	while (used < len) {
		size_t olen;
		used += agent_rawev_encode(&f->enc, p + used, len - used, f->rawout,
					   PFILE_RAWOUT_SIZE, &olen);
		if (olen && write_all(f, f->rawout, olen) < olen)
			return 0;
		if (f->enc.bad) {
			errno = EPROTO;
			return 0;
		}
	}
	return len;
}

static void wait_sem(sem_t *s)
{
	while (sem_wait(s) != 0 && errno == EINTR)
		;
}

static void *writer_main(void *arg)
{
	struct agent_pfile *f = arg;
	for (;;) {
		wait_sem(&f->go);
		if (f->quit)
			return NULL;
		if (!f->err) {
			errno = 0;
			if (write_out(f, f->pend, f->plen) < f->plen)
				f->err = errno ? errno : EIO;
		}
		sem_post(&f->idle);
	}
}

/* Starts the writer thread with every signal blocked (the profilers' signals are for the
 * profiled threads). 0, or -1 when there is no thread: the file is then written directly. */
static int start_thread(struct agent_pfile *f)
{
	if (sem_init(&f->idle, 0, 1) != 0)
		return -1;
	if (sem_init(&f->go, 0, 0) != 0) {
		sem_destroy(&f->idle);
		return -1;
	}
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	int rc = pthread_create(&f->thread, NULL, writer_main, f);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		sem_destroy(&f->idle);
		sem_destroy(&f->go);
		return -1;
	}
	pthread_setname_np(f->thread, "luaprof-write");
	return 0;
}

/*
** The files that this process's profiles write that two must not share (regular ones,
** pipes, sockets; for other processes, a flock on the regular ones): a profile is not
** started into a file that a running one writes (the CPU and memory profilers on one
** path wrote two streams into one file, which no reader can take apart). When the table
** is full (more profiles than there are profilers), files are checked by their lock
** alone.
*/
static pthread_mutex_t open_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t open_once = PTHREAD_ONCE_INIT;
static const struct agent_pfile *open_files[8];

/* Held across fork(2): a child forked while another thread claimed a file must not
 * inherit the lock taken. */
static void open_lock_take(void)
{
	pthread_mutex_lock(&open_lock);
}

static void open_lock_give(void)
{
	pthread_mutex_unlock(&open_lock);
}

/* A forked child writes none of its parent's profiles: its copies of their descriptors
 * are closed, or a file's lock outlived the parent's profile for as long as the child
 * lived (an nginx worker forked by a profiled master kept the master's path refused).
 * The parent's lock stays with the parent's descriptor, so the child cannot start a
 * profile into a file the parent still writes. */
static void open_child(void)
{
	for (size_t i = 0; i < sizeof(open_files) / sizeof(open_files[0]); i++)
		if (open_files[i]) {
			/* Not a number the program closed and reused for a file of its own. */
			if (same_file(open_files[i]))
				close(open_files[i]->fd);
			open_files[i] = NULL;
		}
	pthread_mutex_unlock(&open_lock);
}

static void open_init(void)
{
	pthread_atfork(open_lock_take, open_lock_give, open_child);
}

/* Records f as open, or returns -1 when a profile already writes its file. */
static int claim(struct agent_pfile *f)
{
	int rc = 0;
	pthread_once(&open_once, open_init);
	pthread_mutex_lock(&open_lock);
	for (size_t i = 0; i < sizeof(open_files) / sizeof(open_files[0]); i++)
		if (open_files[i] && open_files[i]->exclusive && open_files[i]->dev == f->dev &&
		    open_files[i]->ino == f->ino)
			rc = -1;
	for (size_t i = 0; !rc && i < sizeof(open_files) / sizeof(open_files[0]); i++)
		if (!open_files[i]) {
			open_files[i] = f;
			break;
		}
	pthread_mutex_unlock(&open_lock);
	return rc;
}

static void unclaim(const struct agent_pfile *f)
{
	pthread_mutex_lock(&open_lock);
	for (size_t i = 0; i < sizeof(open_files) / sizeof(open_files[0]); i++)
		if (open_files[i] == f)
			open_files[i] = NULL;
	pthread_mutex_unlock(&open_lock);
}

struct agent_pfile *agent_pfile_open(const char *path, int threaded, int *created)
{
	/* O_NOCTTY: a path naming a terminal (a profile written to a tty) must not become
	 * the controlling terminal of a session leader that has none (its signals, /dev/tty).
	 * A recent Linux (6.18 checked) gives a write-only open none anyway; older kernels
	 * and other systems may. */
	int fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOCTTY, 0644);
	*created = fd >= 0;
	/* Named at once: a terminating signal before the start that opens it names its thread
	 * removes it (termstop.c), on whichever thread the signal takes its course. */
	if (*created)
		agent_termstop_newfile(path);
	/* Without blocking: open(2) of a FIFO that no process reads waits for a reader, and
	 * the start holds the terminating signals meanwhile (lua.c): only SIGKILL ended it.
	 * Such a FIFO fails with ENXIO; the writes then block as usual. */
	if (fd < 0 && errno == EEXIST) {
		fd = open(path, O_WRONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
		int fl = fd >= 0 ? fcntl(fd, F_GETFL) : -1;
		if (fd >= 0 && (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0)) {
			int e = errno;
			close(fd);
			errno = e;
			fd = -1;
		}
	}
	if (fd < 0)
		return NULL;
	struct stat st;
	if (fstat(fd, &st) != 0) {
		int e = errno;
		close(fd);
		if (*created) {
			agent_termstop_newfile(NULL);
			unlink(path);
		}
		errno = e;
		return NULL;
	}
	int regular = S_ISREG(st.st_mode);
	/* Files two profiles must not share: regular ones, pipes and sockets (their streams
	 * would interleave); devices such as /dev/null are shared. */
	int exclusive = regular || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
	int trunc = regular && !*created && st.st_size > 0;
	/* Mapped, not malloc'd: malloc aligns to 16 bytes, and the buffer is declared on 64.
	 * (With glibc's aligned_alloc instead, a host that opened and closed profiles one
	 * after another grew by 8-24 MiB: tests/integration/memprof_luajit.sh.) */
	struct agent_pfile *f = mmap(NULL, sizeof(*f), PROT_READ | PROT_WRITE,
				     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (f == MAP_FAILED) {
		close(fd);
		if (*created) {
			agent_termstop_newfile(NULL);
			unlink(path);
		}
		errno = ENOMEM;
		return NULL;
	}
	f->fd = fd;
	f->dev = st.st_dev;
	f->ino = st.st_ino;
	f->exclusive = exclusive;
	/* Another process's profile (two nginx workers given one path, an old worker still
	 * writing the file a reloaded one opens): an advisory lock, held while fd is open. */
	if (exclusive && (claim(f) != 0 ||
			  (regular && flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK))) {
		/* (A file system without locks, ENOLCK: the in-process check alone.) Not
		 * removed even when created here: another process may have opened and
		 * locked it since, and write it. */
		unclaim(f);
		close(fd);
		if (*created)
			agent_termstop_newfile(NULL);
		*created = 0;
		munmap(f, sizeof(*f));
		errno = EBUSY;
		return NULL;
	}
	f->trunc = trunc;
	f->created = *created;
	f->refused = 0;
	f->path[0] = '\0';
	if (strlen(path) < sizeof(f->path))
		strcpy(f->path, path);
	f->pid = getpid();
	f->quit = 0;
	f->err = 0;
	f->rawout = NULL;
	f->threaded = threaded && start_thread(f) == 0;
	return f;
}

int agent_pfile_threaded(const struct agent_pfile *f)
{
	return f->threaded;
}

int agent_pfile_raw(struct agent_pfile *f)
{
	if (!f->rawout && !(f->rawout = malloc(PFILE_RAWOUT_SIZE))) {
		errno = ENOMEM;
		return -1;
	}
	memset(&f->enc, 0, sizeof(f->enc));
	return 0;
}

void agent_pfile_refused(struct agent_pfile *f)
{
	if (f)
		f->refused = 1;
}

void agent_pfile_started(struct agent_pfile *f)
{
	/* The thread may be writing a half that start filled already (a huge symbol table):
	 * it empties the file itself then; wait for it to be idle either way. */
	int thread = f->threaded && getpid() == f->pid;
	if (thread)
		wait_sem(&f->idle);
	if (f->trunc && ftruncate(f->fd, 0) == 0)
		f->trunc = 0;
	if (thread)
		sem_post(&f->idle);
}

uint8_t *agent_pfile_buf(struct agent_pfile *f, size_t *len)
{
	*len = f->threaded ? sizeof(f->buf) / 2 : sizeof(f->buf);
	return f->buf;
}

size_t agent_pfile_write(const void **data, size_t len, void *ctx)
{
	struct agent_pfile *f = ctx;
	if (!f->threaded || getpid() != f->pid)
		return write_out(f, *data, len);
	wait_sem(&f->idle);
	if (f->err) {
		sem_post(&f->idle);
		errno = f->err;
		return 0;
	}
	agent_rawev_publish(); /* exact mode's records were stored past the caches */
	f->pend = *data;
	f->plen = len;
	sem_post(&f->go);
	const uint8_t *half = f->buf + sizeof(f->buf) / 2;
	*data = *data == f->buf ? half : f->buf;
	return len;
}

static atomic_int keep_mapped;

void agent_pfile_keep_mapped(void)
{
	atomic_store(&keep_mapped, 1);
}

int agent_pfile_close(void *ctx, uint8_t *buf)
{
	(void)buf;
	struct agent_pfile *f = ctx;
	if (!f)
		return 0;
	int err = 0;
	if (f->threaded && getpid() == f->pid) {
		wait_sem(&f->idle);
		err = f->err;
		f->quit = 1;
		sem_post(&f->go);
		pthread_join(f->thread, NULL);
		sem_destroy(&f->idle);
		sem_destroy(&f->go);
	}
	/* Raw events that ended inside a blob: the producer's bug, and a cut stream. */
	if (f->rawout && (f->enc.blob_left || f->enc.blob_pad || f->enc.bad) && !err)
		err = EPROTO;
	/* Not a descriptor the program closed and then reused for a file of its own. */
	if (!same_file(f)) {
		if (!err)
			err = EBADF;
	} else if (close(f->fd) != 0 && !err) {
		err = errno;
	}
	/* A refused start's file that open made: removed while the path still names it
	 * (another process may have put its own there since). */
	struct stat st;
	if (f->refused && f->created && f->path[0] && stat(f->path, &st) == 0 &&
	    st.st_dev == f->dev && st.st_ino == f->ino)
		unlink(f->path);
	unclaim(f);
	free(f->rawout);
	if (!atomic_load(&keep_mapped))
		munmap(f, sizeof(*f));
	if (err) {
		errno = err;
		return -1;
	}
	return 0;
}
