/*
** The processes a program started, as /proc shows them: `luaprof record --duration` stops
** them with the program, as Ctrl-C at a terminal (its whole process group) or timeout(1)
** (its own) would.
*/
#ifndef LP_CLI_PROCTREE_H
#define LP_CLI_PROCTREE_H

#include <stddef.h>
#include <sys/types.h>

/* A process as it was found: its id and its start time (clock ticks after boot), which
 * tells it from a later process given the same id. */
struct lp_proc {
	pid_t pid;
	unsigned long long start;
};

/* Fills out with up to max of the live descendants of root (children, theirs...), found by
 * their parent ids; returns how many. Processes of other users and of other pid
 * namespaces are seen as /proc shows them; a process that forks or is reparented while
 * /proc is read may be missed. */
size_t lp_proctree_descendants(pid_t root, struct lp_proc *out, size_t max);

/* As lp_proctree_descendants, on top of the n processes already in out (left as they are):
 * adds after them, up to max in all, the live descendants of root and of those of out[0..n)
 * that still run (the same process: its start time), that are not in out yet; returns the
 * count in out. root <= 0 for none (out's alone: their parent has ended). For processes
 * started after out was filled. */
size_t lp_proctree_grow(pid_t root, struct lp_proc *out, size_t n, size_t max);

/* As lp_proctree_grow, for a parent that is a child subreaper (prctl
 * PR_SET_CHILD_SUBREAPER), which processes whose parent ended are given to: adds after
 * out's n, up to max in all, parent's live children other than skip that are not in out
 * yet; returns the count in out. */
size_t lp_proctree_children(pid_t parent, pid_t skip, struct lp_proc *out, size_t n,
			    size_t max);

/* Fills *p with the process pid as it is now: -1 when there is none (or a zombie). */
int lp_proctree_get(pid_t pid, struct lp_proc *p);

/* Whether p is still the process that was found, and not a zombie. */
int lp_proctree_alive(const struct lp_proc *p);

/* Sends sig to p if it is still the process that was found (lp_proctree_alive): through a
 * pidfd, opened before the check, so that an id freed and given to another process
 * meanwhile is never signalled; where the kernel has no pidfd (before Linux 5.3), the
 * check then kill(), which leaves the microseconds between them. 0 when sent. */
int lp_proctree_signal(const struct lp_proc *p, int sig);

#endif
