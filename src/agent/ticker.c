/*
** The CPU profiler's sampling clock (ticker.h): a perf_event task clock or a POSIX timer.
*/
#include "agent/ticker.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/*
** A task clock counting the thread's CPU time, user and kernel, as CLOCK_THREAD_CPUTIME_ID
** does; refused where the kernel allows only user-space counting (perf_event_paranoid 2
** or more without CAP_PERFMON): ticks falling in the kernel would then be dropped, and
** time in system calls go unsampled, unlike with the POSIX timer. Seccomp filters
** (containers) refuse the call altogether. The event counts without a limit of overflows
** (no PERF_EVENT_IOC_REFRESH allowance): its signal is SIGURG, which does not queue (the
** overflows while one is pending merge into it, and the kernel never turns it into SIGIO,
** as it does a real-time signal whose queue is full). An allowance that each handler
** gave back one of stopped the clock in a system call longer than the allowance's
** intervals (the overflows merged into one signal, one given back): the rest of the call
** went uncounted, and the allowance shrank to one for the rest of the run. The handler
** reads the count instead, to know how many intervals its signal stands for
** (agent_ticker_ticks).
*/
static int perf_open(pid_t tid, uint64_t interval_ns)
{
	struct perf_event_attr a;
	memset(&a, 0, sizeof(a));
	a.size = sizeof(a);
	a.type = PERF_TYPE_SOFTWARE;
	a.config = PERF_COUNT_SW_TASK_CLOCK;
	a.sample_period = interval_ns;
	a.disabled = 1;
	a.wakeup_events = 1;
	return (int)syscall(SYS_perf_event_open, &a, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
}

/*
** The file at t->fd is still the event opened (its id, which no other event has): a
** program may close descriptors it did not open and open files of its own at their
** numbers. Then that file is the program's to keep: disabling or closing it closed the
** program's file under it at stop (its writes then failed with EBADF), or in a forked
** child. Not in the signal handler (whose read needs a tick from that fd first).
*/
static int perf_ours(const struct agent_ticker *t)
{
	uint64_t id;
	return t->fd >= 0 && ioctl(t->fd, PERF_EVENT_IOC_ID, &id) == 0 && id == t->id;
}

static int perf_arm(struct agent_ticker *t, pid_t tid, int signo)
{
	struct f_owner_ex own = { F_OWNER_TID, tid };
	int fl = fcntl(t->fd, F_GETFL);
	if (fl < 0 || fcntl(t->fd, F_SETFL, fl | O_ASYNC) != 0 ||
	    fcntl(t->fd, F_SETSIG, signo) != 0 || fcntl(t->fd, F_SETOWN_EX, &own) != 0)
		return -1;
	t->kind = AGENT_TICKER_PERF;
	t->base = 0; /* the count is read from the enable on (agent_ticker_ticks) */
	return ioctl(t->fd, PERF_EVENT_IOC_RESET, 0) != 0 ||
	       ioctl(t->fd, PERF_EVENT_IOC_ENABLE, 0) != 0 ? -1 : 0;
}

static int posix_arm(struct agent_ticker *t, pid_t tid, int signo, uint64_t interval_ns,
		     char *err, size_t errlen)
{
	struct sigevent sev;
	memset(&sev, 0, sizeof(sev));
	sev.sigev_notify = SIGEV_THREAD_ID;
	sev.sigev_signo = signo;
	sev.sigev_value.sival_ptr = (void *)t->cookie;
	sev._sigev_un._tid = tid;
	if (timer_create(t->wall ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &sev,
			 &t->timer) != 0) {
		int e = errno;
		snprintf(err, errlen, "cannot create the sampling timer: %s", strerror(e));
		errno = e;
		return -1;
	}
	t->kind = AGENT_TICKER_POSIX;
	struct itimerspec its;
	its.it_interval.tv_sec = (time_t)(interval_ns / 1000000000ull);
	its.it_interval.tv_nsec = (long)(interval_ns % 1000000000ull);
	its.it_value = its.it_interval;
	if (timer_settime(t->timer, 0, &its, NULL) != 0) {
		int e = errno;
		snprintf(err, errlen, "cannot arm the sampling timer: %s", strerror(e));
		errno = e;
		return -1; /* armed as far as delete goes: the caller deletes it */
	}
	return 0;
}

int agent_ticker_prepare(struct agent_ticker *t, int wall, int posix_only, pid_t tid,
			 uint64_t interval_ns)
{
	t->kind = AGENT_TICKER_NONE;
	t->wall = wall;
	t->interval_ns = interval_ns;
	t->fd = wall || posix_only ? -1 : perf_open(tid, interval_ns);
	if (t->fd >= 0 && ioctl(t->fd, PERF_EVENT_IOC_ID, &t->id) != 0) {
		close(t->fd); /* a kernel before 3.12: its file could not be told apart */
		t->fd = -1;
	}
	if (t->fd < 0)
		t->fd = -1;
	return t->fd >= 0;
}

void agent_ticker_unprepare(struct agent_ticker *t)
{
	if (t->kind == AGENT_TICKER_NONE && t->fd >= 0) {
		close(t->fd);
		t->fd = -1;
	}
}

int agent_ticker_arm(struct agent_ticker *t, pid_t tid, int signo, const void *cookie,
		     uint64_t interval_ns, char *err, size_t errlen)
{
	t->cookie = cookie;
	atomic_store(&t->paused, 0);
	if (t->fd >= 0) {
		if (perf_arm(t, tid, signo) == 0)
			return 0;
		int e = errno;
		snprintf(err, errlen, "cannot arm the perf_event clock: %s", strerror(e));
		errno = e;
		return -1;
	}
	return posix_arm(t, tid, signo, interval_ns, err, errlen);
}

int agent_ticker_ours(const struct agent_ticker *t, const siginfo_t *si)
{
	if (t->kind == AGENT_TICKER_PERF)
		return (si->si_code == POLL_IN || si->si_code == POLL_HUP) && si->si_fd == t->fd;
	return si->si_code == SI_TIMER && si->si_value.sival_ptr == t->cookie;
}

uint64_t agent_ticker_ticks(struct agent_ticker *t)
{
	/* Paused (loaded after the handler's busy flag was set): the file may be closed,
	 * or its number another file's. */
	if (t->kind != AGENT_TICKER_PERF || atomic_load(&t->paused) || !t->interval_ns)
		return 1;
	uint64_t v;
	if (read(t->fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		return 1;
	/* The intervals counted since the last tick accounted for, to the nearest (the
	 * signal comes a little after its overflow); one at least. */
	uint64_t n = v > t->base ? (v - t->base + t->interval_ns / 2) / t->interval_ns : 0;
	if (n == 0)
		n = 1;
	t->base += n * t->interval_ns;
	return n;
}

int agent_ticker_overrun(const struct agent_ticker *t, const siginfo_t *si)
{
	return t->kind == AGENT_TICKER_POSIX && si->si_overrun > 0 ? si->si_overrun : 0;
}

void agent_ticker_pause(struct agent_ticker *t)
{
	atomic_store(&t->paused, 1);
	if (t->kind == AGENT_TICKER_POSIX) {
		struct itimerspec off = { { 0, 0 }, { 0, 0 } };
		timer_settime(t->timer, 0, &off, NULL);
	} else if (t->kind == AGENT_TICKER_PERF && perf_ours(t)) {
		ioctl(t->fd, PERF_EVENT_IOC_DISABLE, 0);
	}
}

void agent_ticker_delete(struct agent_ticker *t)
{
	if (t->kind == AGENT_TICKER_POSIX)
		timer_delete(t->timer);
	if (perf_ours(t)) {
		/* Disabled first: a forked child may hold the file, and keep the event. */
		ioctl(t->fd, PERF_EVENT_IOC_DISABLE, 0);
		close(t->fd);
	}
	t->fd = -1;
	t->kind = AGENT_TICKER_NONE;
}

void agent_ticker_forget(struct agent_ticker *t)
{
	if (perf_ours(t))
		close(t->fd);
	t->fd = -1;
	t->kind = AGENT_TICKER_NONE;
}

const char *agent_ticker_name(const struct agent_ticker *t)
{
	switch (t->kind) {
	case AGENT_TICKER_PERF: return "perf task-clock";
	case AGENT_TICKER_POSIX: return t->wall ? "posix monotonic" : "posix cpu";
	default: return "none";
	}
}
