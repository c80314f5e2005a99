/*
** The processes a program started, from /proc's stat files (see proctree.h).
*/
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cli/proctree.h"

/* Reads /proc/PID/stat: the parent's id, the state letter and the start time. -1 when the
 * process is gone or the file is not as expected. */
static int read_stat(pid_t pid, pid_t *ppid, char *state, unsigned long long *start)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The command name, in parentheses, may hold spaces and parentheses itself. */
	char *p = strrchr(buf, ')');
	if (!p)
		return -1;
	long pp;
	char st;
	unsigned long long t;
	/* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
	 * cutime cstime priority nice num_threads itrealvalue starttime */
	if (sscanf(p + 1, " %c %ld %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d "
			  "%*d %*d %llu", &st, &pp, &t) != 3)
		return -1;
	*ppid = (pid_t)pp;
	*state = st;
	*start = t;
	return 0;
}

size_t lp_proctree_grow(pid_t root, struct lp_proc *out, size_t n, size_t max)
{
	DIR *d = opendir("/proc");
	if (!d)
		return n;
	/* Every process's parent, then the tree from root and out's by rounds over that
	 * list. */
	size_t nall = 0, cap = 0;
	struct node { pid_t pid, ppid; unsigned long long start; int taken; } *all = NULL;
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		struct node nd = { .pid = (pid_t)strtol(e->d_name, NULL, 10) };
		char st;
		if (read_stat(nd.pid, &nd.ppid, &st, &nd.start) != 0 || st == 'Z')
			continue;
		if (nall == cap) {
			size_t ncap = cap ? cap * 2 : 256;
			struct node *na = realloc(all, ncap * sizeof(*na));
			if (!na)
				break;
			all = na;
			cap = ncap;
		}
		all[nall++] = nd;
	}
	closedir(d);
	/* The parents looked for: root, out's processes that still run (an id given to
	 * another process since is not one of them), which are not found again, and those
	 * found. */
	pid_t *par = malloc((n + max + 1) * sizeof(*par));
	size_t npar = 0, found = n;
	if (!par)
		max = 0;
	else if (root > 0)
		par[npar++] = root;
	for (size_t i = 0; i < nall && par; i++) {
		all[i].taken = root > 0 && all[i].pid == root;
		for (size_t j = 0; j < n && !all[i].taken; j++)
			if (all[i].pid == out[j].pid && all[i].start == out[j].start) {
				all[i].taken = 1;
				par[npar++] = all[i].pid;
			}
	}
	for (int more = 1; more && found < max;) {
		more = 0;
		for (size_t i = 0; i < nall && found < max; i++) {
			if (all[i].taken)
				continue;
			int parent = 0;
			for (size_t j = 0; !parent && j < npar; j++)
				parent = all[i].ppid == par[j];
			if (parent) {
				all[i].taken = more = 1;
				par[npar++] = all[i].pid;
				out[found].pid = all[i].pid;
				out[found].start = all[i].start;
				found++;
			}
		}
	}
	free(par);
	free(all);
	return found;
}

size_t lp_proctree_children(pid_t parent, pid_t skip, struct lp_proc *out, size_t n,
			    size_t max)
{
	DIR *d = opendir("/proc");
	if (!d)
		return n;
	struct dirent *e;
	while (n < max && (e = readdir(d)) != NULL) {
		if (!isdigit((unsigned char)e->d_name[0]))
			continue;
		struct lp_proc p = { .pid = (pid_t)strtol(e->d_name, NULL, 10) };
		pid_t ppid;
		char st;
		if (p.pid == skip || read_stat(p.pid, &ppid, &st, &p.start) != 0 || st == 'Z' ||
		    ppid != parent)
			continue;
		int known = 0;
		for (size_t i = 0; i < n && !known; i++)
			known = out[i].pid == p.pid && out[i].start == p.start;
		if (!known)
			out[n++] = p;
	}
	closedir(d);
	return n;
}

size_t lp_proctree_descendants(pid_t root, struct lp_proc *out, size_t max)
{
	return lp_proctree_grow(root, out, 0, max);
}

int lp_proctree_get(pid_t pid, struct lp_proc *p)
{
	pid_t ppid;
	char st;
	if (read_stat(pid, &ppid, &st, &p->start) != 0 || st == 'Z')
		return -1;
	p->pid = pid;
	return 0;
}

int lp_proctree_alive(const struct lp_proc *p)
{
	pid_t ppid;
	char st;
	unsigned long long start;
	return read_stat(p->pid, &ppid, &st, &start) == 0 && st != 'Z' && start == p->start;
}

int lp_proctree_signal(const struct lp_proc *p, int sig)
{
	int fd = -1;
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
	fd = (int)syscall(SYS_pidfd_open, p->pid, 0);
	/* Gone; else a pidfd refused otherwise (ENOSYS, EPERM from a seccomp filter,
	 * EMFILE) leaves the check then kill(). */
	if (fd < 0 && errno == ESRCH)
		return -1;
#endif
	/* The pidfd holds the process that had the id when it was opened: if the check
	 * finds that one is still ours, no later process can be the one signalled. */
	if (!lp_proctree_alive(p)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (fd < 0)
		return kill(p->pid, sig) == 0 ? 0 : -1;
	int rc = -1;
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
	rc = (int)syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0);
#endif
	close(fd);
	return rc == 0 ? 0 : -1;
}
