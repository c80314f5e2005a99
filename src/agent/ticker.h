/*
** The CPU profiler's sampling clock: a signal to one thread every interval of its CPU
** time or of elapsed time. CPU time comes from a perf_event task clock where the process
** may open one (a high-resolution timer: any rate) and otherwise from a POSIX CPU-time
** timer, which the kernel checks at its tick (250 Hz on many kernels caps the rate).
*/
#ifndef AGENT_TICKER_H
#define AGENT_TICKER_H

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

enum agent_ticker_kind {
	AGENT_TICKER_NONE,
	AGENT_TICKER_POSIX,   /* timer_create: CLOCK_THREAD_CPUTIME_ID or CLOCK_MONOTONIC */
	AGENT_TICKER_PERF,    /* perf_event_open: PERF_COUNT_SW_TASK_CLOCK of the thread */
};

struct agent_ticker {
	int kind;             /* enum agent_ticker_kind; NONE when not armed */
	int wall;             /* elapsed time rather than the thread's CPU time */
	timer_t timer;        /* POSIX */
	int fd;               /* PERF: the event */
	uint64_t id;          /* PERF: its id (PERF_EVENT_IOC_ID): the file at fd is still the
			       * event, not one the program opened at that number after it
			       * closed ours (a daemon closing every descriptor) */
	uint64_t interval_ns; /* PERF: its period */
	uint64_t base;        /* PERF: its count at the last tick accounted for (handler) */
	const void *cookie;   /* POSIX: the signal's si_value, to tell our ticks from others */
	_Atomic int paused;   /* agent_ticker_pause ran: ticks() reads no file */
};

/*
** Prepares t for thread tid: for CPU time (not wall), unless posix_only, opens the perf
** clock, not ticking yet. Returns 1 when the perf clock is open: its signal should be one
** whose default action is to ignore it (SIGURG), as a tick may be pending when the program
** calls execve (the clock counts kernel time, the exec's too), and pending signals outlive
** the exec, unlike the POSIX timer's, which exec deletes with the timer. 0 otherwise.
*/
int agent_ticker_prepare(struct agent_ticker *t, int wall, int posix_only, pid_t tid,
			 uint64_t interval_ns);

/* Closes a perf clock prepared and not armed (its signal could not be had): arming then
 * takes the POSIX timer. */
void agent_ticker_unprepare(struct agent_ticker *t);

/*
** Arms t to send signo to thread tid every interval_ns of its CPU time (or of elapsed
** time if wall): the perf clock if prepared, else a POSIX timer. Returns 0, or -1 with
** errno set and a message in err (t is then to be deleted).
*/
int agent_ticker_arm(struct agent_ticker *t, pid_t tid, int signo, const void *cookie,
		     uint64_t interval_ns, char *err, size_t errlen);

/* In the signal handler (async-signal-safe): the signal is t's tick. */
int agent_ticker_ours(const struct agent_ticker *t, const siginfo_t *si);

/* In the signal handler, at one of t's ticks: how many intervals of the clock it stands
 * for (1 but for the perf clock, whose overflows while its signal is pending merge into
 * that signal: a system call longer than the interval, a thread blocking the signal).
 * Async-signal-safe. */
uint64_t agent_ticker_ticks(struct agent_ticker *t);

/* Ticks the kernel merged into the one delivered (the POSIX timer's overrun; 0 for the
 * perf clock, whose merged ticks agent_ticker_ticks counts). Async-signal-safe. */
int agent_ticker_overrun(const struct agent_ticker *t, const siginfo_t *si);

/* Stops the ticks and keeps t's kernel objects. A handler already past its checks may
 * still call agent_ticker_ticks, which reads the perf clock's file: delete only once no
 * handler is busy. */
void agent_ticker_pause(struct agent_ticker *t);

/* Stops the ticks for good and frees t's kernel objects: only once no handler can be
 * about to call agent_ticker_ticks (pause, then wait for the handlers). */
void agent_ticker_delete(struct agent_ticker *t);

/* In a forked child: the parent's ticker is not the child's to stop; its file is
 * closed and t forgotten. */
void agent_ticker_forget(struct agent_ticker *t);

/* "perf task-clock", "posix cpu", "posix monotonic" or "none": meta timer. */
const char *agent_ticker_name(const struct agent_ticker *t);

#endif
