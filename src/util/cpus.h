/*
** How many CPUs this process may use: its affinity mask, and a cgroup v2 CPU quota (a
** container's CPU limit), which the mask does not show.
*/
#ifndef LP_CPUS_H
#define LP_CPUS_H

/*
** The CPUs the cgroup v2 quotas along a process's hierarchy allow it (cpu.max: "quota
** period", or "max" for none), the least of them; 1e9 when none limits it or nothing can
** be read. self_cgroup is a /proc/PID/cgroup file, root where cgroup2 is mounted.
*/
double lp_cpus_quota(const char *self_cgroup, const char *root);

/* The CPUs this process may use: the affinity mask's count, or the quota when it is less
 * (fractional: 1.5 for a quota of 150 ms a 100 ms period). 1 when nothing can be read. */
double lp_cpus_allowed(void);

#endif
