/*
** `luaprof record`'s profile finished before the program dies of a terminating signal
** whose action is the default: one sent to it (SIGTERM, SIGHUP, SIGINT, SIGQUIT), or its
** own (a crash: SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT; SIGPIPE, a write to a pipe whose
** reader left, as `luaprof record ... | head` leaves it).
**
** Why: the signal's default action ends the process without exit(3), so the profile's
** end was never written: a CPU profile's epilogue, and the extension after it that gives
** TRACE, GC, compiler and exit samples their stacks (a JIT-compiled program stopped by
** `timeout`, a service manager or `kill`, which record passes on, showed its traces as
** roots with nothing under them); a sampled memory profile's every sample, which are
** written at stop; an exact one's events not yet written (2 MiB at a time). So, for the
** signals still at their default when the profile starts, the agent installs a handler
** that asks a thread of its own to stop the profile as exit would, waits for it (at most
** STOP_WAIT_NS: a stop that cannot finish, say on a lock the interrupted thread holds,
** leaves the profile cut short as before), then restores the default action and raises
** the signal again: the program still dies of it, its status unchanged. A signal of a
** fault (SIGSEGV...) raised again is taken as the handler returns, at the faulting
** instruction: a core dump shows where the program crashed. One that interrupted the
** stop itself (a fault in the agent) waits STOP_WAIT_NS, then takes its course.
**
** A signal the program sets back to its default action later gets the handler again
** (the thread looks every REARM_NS): LuaJIT's standalone interpreter runs LUA_INIT, where
** the profile starts, and then the script with its own SIGINT handler, which resets
** SIGINT to the default at the first Ctrl-C and only asks the VM to stop at its next
** interpreted instruction. A program blocked in a system call (a server in accept) or
** spinning in a compiled loop does not stop there, and the second Ctrl-C killed it with
** the profile cut short: SIGINT was never armed under record.
**
** A stop already under way when the signal comes (exit's, lua_close's, the program's own)
** is let finish its file first: the signal's stop waits for it, and so does exit for the
** signal's stop; a signal that interrupts the stopping thread itself is held until its
** file is written, then taken (CPU: agent_termstop_written) or delivered to the handler
** again (memory: agent_termstop_redeliver; the stop may have been refused, the profile
** still running). Before, the signal killed the process at once under the other stop, or
** exit ended it under the signal's: the profile cut short. A memory profile's start under
** way on the interrupted thread holds the signal the same way, until its header is written
** and the allocator swapped (before, the start's file was left empty); so does a CPU
** profile's, until its header is written and its timer armed, and a CPU start on another
** thread is waited for, its profile then stopped whole (before, cut short or empty). The
** file the Lua API made for a start that has not named its thread yet is removed as the
** signal takes its course (agent_termstop_newfile; it was left empty). A signal held longer
** than HOLD_MAX_NS (a writer blocked for good) takes its course from termstop's thread,
** the profile cut short, with a word on stderr (before, only SIGKILL ended the process).
** A signal whose handler waits on another thread while the program exits takes its course
** at the end of the profiler's exit handler, once the file is written (agent_termstop_exit:
** before, exit's status 0 stood).
**
** Contracts: the handler is the program's to replace (a handler it installs later wins,
** and a program that handles the signal is left alone); a forked child inherits the
** handler but not the profile or the thread, so there the signal takes its default
** action at once; exec restores the defaults. A CPU profile stops from any thread. A
** memory profile only when the signal interrupted the thread that started it (the one
** record's program runs Lua on) outside the wrapper's rare and general paths (rare_busy
** in memprof.c): elsewhere that thread would go on allocating during the stop, and there
** the stop could meet the wrapper's tables or a record half written. A signal in such a
** path is held and delivered again as the path is left (memprof.c's rare_leave); one on
** another thread is sent on to that thread, and waited for there (send_to_profiled),
** unless that thread blocks it (refused): then it takes its course within 50 ms, the
** profile cut short (the program chose to have another thread take it). Exact mode's light
** paths move the stream's position only once a record is whole, so the stop finds it at
** a record's end.
*/
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"

/* How long a signal waits for the profile's file to be written before it takes its
 * course. A 60 s profile at 1 kHz (60,034 samples) took 78 ms; the wait ends early only
 * when the stop cannot go on: the interrupted thread holds a lock it needs (malloc's, with
 * one arena: MALLOC_ARENA_MAX=1 cut 1 run in 4 of a malloc loop), and the profile is cut
 * short as before. */
#define STOP_WAIT_NS AGENT_STOP_WAIT_NS

/* How often the thread looks for a signal set back to its default action: well under the
 * time between two presses of Ctrl-C. */
#define REARM_NS 20000000L

/* How long a signal is held for a start or stop under way on the thread it interrupted
 * (or a path of the wrapper's): as long as a signal's own stop is waited for. One that
 * does not end by then (its writer blocked for good: a pipe nobody reads, a hung file
 * system) would hold the signal for ever, the process ended by SIGKILL alone: the signal
 * takes its course then, the profile cut short, and stderr says so (hold_expired). */
#ifndef HOLD_MAX_NS
#define HOLD_MAX_NS STOP_WAIT_NS
#endif

/* TS_WRITTEN: the profile's file is whole and closed; what the stop frees after that is
 * not waited for (see agent_termstop_written). */
enum { TS_ARMED, TS_STOPPING, TS_WRITTEN, TS_DONE };

/* Not the real-time signals (the CPU profiler's timer takes one at its default action),
 * SIGTRAP (a debugger's), nor SIGSYS (a seccomp filter's). */
static const int term_sigs[] = { SIGTERM, SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGSEGV, SIGBUS,
				 SIGFPE, SIGILL, SIGABRT };

static struct {
	pid_t pid;        /* the process whose profile it is */
	int memory;       /* the memory profiler's */
	long tid;         /* the thread that started it */
	sem_t go;         /* posted by the handler (sem_post is async-signal-safe) */
	_Atomic int state;
	_Atomic int taken; /* a signal reached the handler: no more re-arming */
	_Atomic int deferred; /* a signal held (the thread stopping a CPU profile takes it once
			       * written; memory: delivered again) */
	_Atomic uint64_t deferred_ns; /* when it was held (agent_now_ns) */
	_Atomic long waiting; /* the thread whose handler posted go: it waits for the file */
	_Atomic int pending; /* a signal a handler of this process took and will raise once the
			      * profile is written (not a held one): exit raises it too */
	int armed;        /* the thread runs and the handlers are installed */
	struct sigaction sa; /* the handler's action */
} ts;

/* agent_termstop_newfile's: set while a start's new file has no name on it. */
static struct {
	_Atomic int set;
	pid_t pid;                       /* the process that made it: not a forked child */
	dev_t dev;
	ino_t ino;
	char path[PATH_MAX];
} newfile;

void agent_termstop_newfile(const char *path)
{
	atomic_store(&newfile.set, 0);
	struct stat st;
	if (!path || strlen(path) >= sizeof(newfile.path) || stat(path, &st) != 0)
		return;
	strcpy(newfile.path, path);
	newfile.pid = getpid();
	newfile.dev = st.st_dev;
	newfile.ino = st.st_ino;
	atomic_store(&newfile.set, 1);
}

/* Before the signal takes its course: a start's new file, still that file at its path,
 * is removed (async-signal-safe: stat, unlink), by the process that made it only (a child
 * forked meanwhile inherits the record, and the file is the parent's profile). */
static void drop_newfile(void)
{
	struct stat st;
	if (atomic_exchange(&newfile.set, 0) && newfile.pid == getpid() &&
	    stat(newfile.path, &st) == 0 &&
	    st.st_dev == newfile.dev && st.st_ino == newfile.ino)
		unlink(newfile.path);
}

/* Installs the handler on each terminating signal at its default action. A handler the
 * program installed between the look and the change is put back: its choice stands. */
static void arm_defaults(void)
{
	for (size_t i = 0; i < sizeof(term_sigs) / sizeof(term_sigs[0]); i++) {
		struct sigaction cur, old;
		if (sigaction(term_sigs[i], NULL, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) ||
		    cur.sa_handler != SIG_DFL)
			continue;
		if (sigaction(term_sigs[i], &ts.sa, &old) == 0 &&
		    ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL))
			sigaction(term_sigs[i], &old, NULL);
	}
}

static void take_course(int sig);

/* A held signal past HOLD_MAX_NS takes its course here, on this thread (which blocks the
 * others): the process ends of it, its status as the signal's. Not a handler: stdio would
 * do, but write(2) does not wait for a lock that the held thread may keep. */
static void hold_expired(void)
{
	int sig = atomic_load(&ts.deferred);
	if (!sig || agent_now_ns() - atomic_load(&ts.deferred_ns) < HOLD_MAX_NS ||
	    !atomic_compare_exchange_strong(&ts.deferred, &sig, 0))
		return;
	char msg[256];
	const char *name = sigabbrev_np(sig);
	int n = snprintf(msg, sizeof(msg), "luaprof: SIG%s held %.1f s for the profile's start "
			 "or stop, which has not ended (its file's writer blocked?): it takes its "
			 "course now, the profile cut short\n", name ? name : "?",
			 (double)HOLD_MAX_NS / 1e9);
	if (n > 0 && write(STDERR_FILENO, msg, strlen(msg)) < 0) {
		; /* nothing to do about it */
	}
	take_course(sig);
}

static void *stopper_main(void *arg)
{
	(void)arg;
	for (;;) {
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += REARM_NS;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		if (sem_clockwait(&ts.go, CLOCK_MONOTONIC, &until) == 0)
			break;
		/* Not once a signal is being handled: its handler sets the default action
		 * and raises it again, to be taken as the handler returns. */
		if (errno != ETIMEDOUT)
			continue;
		if (!atomic_load(&ts.taken))
			arm_defaults();
		hold_expired();
	}
	if (ts.memory) {
		/* A stop under way on another thread (exit's, the program's): its file first. */
		if (agent_memprof_stop_for_signal() != 0)
			(void)agent_memprof_stop_wait(STOP_WAIT_NS);
	} else {
		uint64_t run = agent_run_id();
		int rc = agent_stop_any("signal");
		/* A stop under way on another thread (exit's, the program's): the signal waits
		 * for its file, not cut short under it at once. A start under way there: the
		 * profile it leaves running is stopped whole. */
		if (rc == LUAPROF_PROFILE_ERRRUN && agent_stop_wait(STOP_WAIT_NS) == 0 &&
		    agent_running()) {
			run = agent_run_id();
			rc = agent_stop_any("signal");
		}
		agent_record_stopped(0, run, rc, errno);
	}
	atomic_store(&ts.state, TS_DONE);
	return NULL;
}

/* A signal of the instruction the thread executes, raised again where it returns to. */
static int is_fault(int sig)
{
	return sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL;
}

void agent_termstop_sent(sigset_t *set)
{
	sigemptyset(set);
	for (size_t i = 0; i < sizeof(term_sigs) / sizeof(term_sigs[0]); i++)
		if (!is_fault(term_sigs[i]) && term_sigs[i] != SIGABRT)
			sigaddset(set, term_sigs[i]);
}

/* Sets sig back to its default action (async-signal-safe). */
static void set_default(int sig)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	sigaction(sig, &dfl, NULL);
}

/* A held signal's default action, on this thread, now: the process ends of it. */
static void take_course(int sig)
{
	drop_newfile();
	set_default(sig);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, sig);
	pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	raise(sig);
}

/* 1 when thread tid of this process blocks sig, or when that cannot be read (its
 * /proc status' SigBlk; async-signal-safe: no stdio). */
static int blocks(long tid, int sig)
{
	char path[64] = "/proc/self/task/", digits[24], buf[4096];
	size_t n = strlen(path), k = 0;
	do
		digits[k++] = (char)('0' + tid % 10);
	while ((tid /= 10) && k < sizeof(digits));
	while (k)
		path[n++] = digits[--k];
	memcpy(path + n, "/status", sizeof("/status"));
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 1;
	ssize_t len = 0, r;
	while (len < (ssize_t)sizeof(buf) - 1 &&
	       (r = read(fd, buf + len, sizeof(buf) - 1 - (size_t)len)) > 0)
		len += r;
	close(fd);
	buf[len < 0 ? 0 : len] = '\0';
	const char *p = strstr(buf, "\nSigBlk:");
	if (!p)
		return 1;
	p += strlen("\nSigBlk:");
	while (*p == ' ' || *p == '\t')
		p++;
	uint64_t mask = 0;
	for (; (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'); p++)
		mask = mask << 4 | (uint64_t)(*p <= '9' ? *p - '0' : *p - 'a' + 10);
	return sig > 64 || ((mask >> (sig - 1)) & 1);
}

/*
** A memory profile's signal on another thread than the profile's, which alone can stop
** it (from here, that thread would go on allocating under the stop): sent on to that
** thread, whose handler stops it; 1 when it was (or a signal's stop is under way already:
** that thread in this handler), and this thread then waits for the file as that one
** does, before the signal takes its course (abort() here, say, would end the process as
** the handler returns). 0 when that thread has gone: the profile is cut short.
*/
static int send_to_profiled(int sig)
{
	return atomic_load(&ts.state) != TS_ARMED ||
	       syscall(SYS_tgkill, (long)ts.pid, ts.tid, sig) == 0;
}

/* After send_to_profiled: the profile's thread has not taken the signal (no signal's stop
 * under way, none held) and blocks it. For good when it lasts REFUSED_CHECKS looks in a
 * row, 10 ms apart (libc blocks every signal for a few instructions in pthread_kill,
 * pthread_create, fork...): the program has another thread take the signal. */
#define REFUSED_CHECKS 5
static int refused(int sig)
{
	return atomic_load(&ts.state) == TS_ARMED && !atomic_load(&ts.deferred) &&
	       blocks(ts.tid, sig);
}

static void on_signal(int sig)
{
	int saved = errno;
	int expect = TS_ARMED;
	atomic_store(&ts.taken, 1);
	long tid = syscall(SYS_gettid);
	int mine = getpid() == ts.pid;
	/* This thread is stopping the profile (exit, lua_close, the program's own stop),
	 * which no other thread can finish: the signal is held until the file is written
	 * (CPU: taken then; memory: delivered to this handler again, which finds nothing to
	 * stop and lets it take its course). So is one that interrupts the memory profile's
	 * thread in the wrapper's rare or general path, where a stop would meet its tables or
	 * a record half written: delivered again as the path is left. Not a fault (SIGSEGV...:
	 * the stop itself crashed), which returning would only raise again at the same
	 * instruction, for ever: that one takes its course at once. */
	int stopping = mine && (ts.memory ? agent_memprof_stop_tid() : agent_stop_tid()) == tid;
	if (!is_fault(sig) &&
	    (stopping || (mine && ts.memory && tid == ts.tid && agent_memprof_hold_signal()))) {
		atomic_store(&ts.deferred_ns, agent_now_ns());
		atomic_store(&ts.deferred, sig);
		errno = saved;
		return;
	}
	if (mine)
		atomic_store(&ts.pending, sig);
	int ours = mine && (!ts.memory || (tid == ts.tid && !agent_memprof_signal_unsafe()));
	if (ours && atomic_compare_exchange_strong(&ts.state, &expect, TS_STOPPING)) {
		if (!stopping) /* it waits below: the stop may read what its thread left */
			atomic_store(&ts.waiting, tid);
		sem_post(&ts.go);
	}
	int sent = !ours && mine && ts.memory && tid != ts.tid && !is_fault(sig) &&
		   send_to_profiled(sig);
	if ((ours && !stopping) || sent) {
		struct timespec step = { 0, 10000000 };
		unsigned refusals = 0;
		for (uint64_t waited = 0; atomic_load(&ts.state) < TS_WRITTEN &&
		     waited < STOP_WAIT_NS; waited += 10000000) {
			refusals = sent && refused(sig) ? refusals + 1 : 0;
			if (refusals == REFUSED_CHECKS)
				break;
			nanosleep(&step, NULL);
		}
	}
	/* Blocked while this handler runs: taken with the default action on return. */
	drop_newfile();
	set_default(sig);
	raise(sig);
	errno = saved;
}

int agent_termstop_pending(void)
{
	return ts.armed && getpid() == ts.pid ? atomic_load(&ts.pending) : 0;
}

/* The signal's handler, on another thread than exit's, waits for the stop in steps of
 * 10 ms before it raises the signal: exit went on meanwhile and ended the process with its
 * own status (0), as if no signal had come. From the exit handler of the profiler that
 * termstop is armed for (that of the other, registered earlier, runs after it and is not
 * waited for: the signal would have ended the process before it too). The profile written
 * (by this exit's stop, lua_close's, or the signal's own on termstop's thread, waited for
 * here), the signal takes its course on this thread. */
void agent_termstop_exit(int memory)
{
	int sig = agent_termstop_pending();
	if (!sig || memory != ts.memory)
		return;
	struct timespec step = { 0, 1000000 };
	for (uint64_t waited = 0; atomic_load(&ts.state) == TS_STOPPING &&
	     waited < STOP_WAIT_NS; waited += 1000000)
		nanosleep(&step, NULL);
	take_course(sig);
}

int agent_termstop_holds(long tid)
{
	return tid && atomic_load(&ts.waiting) == tid;
}

void agent_termstop_written(void)
{
	int expect = TS_STOPPING;
	atomic_compare_exchange_strong(&ts.state, &expect, TS_WRITTEN);
	agent_termstop_deferred();
}

void agent_termstop_deferred(void)
{
	int sig = atomic_exchange(&ts.deferred, 0);
	if (sig) {
		take_course(sig);
	}
}

/* The signal reaches the handler before raise returns; the mask is the program's again
 * after (a handler the program installed meanwhile may have returned). */
void agent_termstop_redeliver(void)
{
	int sig = atomic_exchange(&ts.deferred, 0);
	if (sig) {
		sigset_t set, old;
		sigemptyset(&set);
		sigaddset(&set, sig);
		pthread_sigmask(SIG_UNBLOCK, &set, &old);
		raise(sig);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
}

/*
** A forked child has no signal pending (fork(2)), and none held for it either: a signal
** held for a start, a stop or a wrapper's path of the parent's (deferred) is the parent's
** thread's to take. Inherited, it was delivered at the child's first start or stop of a
** profile (or its wrapper's first rare path: agent_termstop_redeliver), and killed the
** child with a SIGTERM sent to its parent before it was made (memprof_start_signal.sh,
** fork). The rest stays: in a child the handler only lets a signal take its course
** (getpid() is not ts.pid), and there is no thread to stop a profile.
*/
static void ts_fork_child(void)
{
	atomic_store(&ts.deferred, 0);
}

int agent_termstop_arm(int memory)
{
	if (ts.armed)
		return 0;
	ts.memory = memory;
	ts.tid = syscall(SYS_gettid);
	if (sem_init(&ts.go, 0, 0) != 0)
		return -1;
	ts.pid = getpid();
	atomic_store(&ts.state, TS_ARMED);
	memset(&ts.sa, 0, sizeof(ts.sa));
	ts.sa.sa_handler = on_signal;
	sigfillset(&ts.sa.sa_mask); /* the sampling signal too: no sample inside the wait */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	pthread_t th;
	int rc = pthread_create(&th, NULL, stopper_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		sem_destroy(&ts.go);
		return -1;
	}
	pthread_detach(th);
	pthread_setname_np(th, "luaprof-stop");
	pthread_atfork(NULL, NULL, ts_fork_child);
	ts.armed = 1;
	arm_defaults();
	return 0;
}
