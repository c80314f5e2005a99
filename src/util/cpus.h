/*
** How many CPUs this process may use: its affinity mask, and a cgroup CPU quota (a
** container's CPU limit), which the mask does not show.
*/
#ifndef LP_CPUS_H
#define LP_CPUS_H

/*
** The CPUs the cgroup quotas along a process's hierarchy allow it, the least of them: v2
** (cpu.max: "quota period", or "max" for none) and v1 (the cpu controller's
** cpu.cfs_quota_us, -1 for none, over cpu.cfs_period_us, under root/cpu,cpuacct or
** root/cpu); 1e9 when none limits it or nothing can be read. self_cgroup is a
** /proc/PID/cgroup file, root where the cgroup filesystems are mounted (/sys/fs/cgroup).
*/
double lp_cpus_quota(const char *self_cgroup, const char *root);

/* The CPUs this process may use: the affinity mask's count, or the quota when it is less
 * (fractional: 1.5 for a quota of 150 ms a 100 ms period). 1 when nothing can be read. */
double lp_cpus_allowed(void);

#endif
