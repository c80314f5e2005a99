/*
** How many CPUs this process may use.
*/
#include "util/cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NO_LIMIT 1e9

/* cgroup v2: dir/cpu.max, "quota period" or "max period". */
static double v2_limit(const char *dir)
{
	char path[1100], quota[32];
	unsigned long long period;
	double c = NO_LIMIT;
	snprintf(path, sizeof(path), "%s/cpu.max", dir);
	FILE *m = fopen(path, "re");
	if (m && fscanf(m, "%31s %llu", quota, &period) == 2 && strcmp(quota, "max") != 0 &&
	    period) {
		double q = strtod(quota, NULL) / (double)period;
		if (q > 0)
			c = q;
	}
	if (m)
		fclose(m);
	return c;
}

static int read_ll(const char *dir, const char *file, long long *v)
{
	char path[1100];
	snprintf(path, sizeof(path), "%s/%s", dir, file);
	FILE *f = fopen(path, "re");
	int ok = f && fscanf(f, "%lld", v) == 1;
	if (f)
		fclose(f);
	return ok;
}

/* cgroup v1: dir/cpu.cfs_quota_us (-1 for none) over dir/cpu.cfs_period_us. */
static double v1_limit(const char *dir)
{
	long long quota, period;
	if (read_ll(dir, "cpu.cfs_quota_us", &quota) && quota > 0 &&
	    read_ll(dir, "cpu.cfs_period_us", &period) && period > 0)
		return (double)quota / (double)period;
	return NO_LIMIT;
}

/* The least limit from the cgroup at rel (under base) up to base itself: a parent's limit
 * holds too, and inside a container base is the container's own cgroup. */
static double least_up(const char *base, const char *rel, double (*limit)(const char *dir))
{
	char p[512], dir[1100];
	double cpus = NO_LIMIT;
	snprintf(p, sizeof(p), "%s", rel);
	p[strcspn(p, "\n")] = '\0';
	if (p[0] != '/')
		return cpus;
	for (;;) {
		snprintf(dir, sizeof(dir), "%s%s", base, p[1] ? p : "");
		double c = limit(dir);
		if (c < cpus)
			cpus = c;
		if (!p[1])
			break;
		char *slash = strrchr(p, '/');
		slash[slash == p] = '\0'; /* "/a/b" -> "/a" -> "/" */
	}
	return cpus;
}

/* controllers (a /proc/PID/cgroup line's second field) names the cpu controller. */
static int has_cpu(const char *controllers, size_t len)
{
	for (size_t i = 0; i < len;) {
		size_t n = strcspn(controllers + i, ",:");
		if (n == 3 && strncmp(controllers + i, "cpu", 3) == 0)
			return 1;
		i += n + 1;
	}
	return 0;
}

double lp_cpus_quota(const char *self_cgroup, const char *root)
{
	char line[600], base[1100];
	double cpus = NO_LIMIT;
	FILE *f = fopen(self_cgroup, "re");
	if (!f)
		return cpus;
	/* Lines "id:controllers:path": "0::path" for cgroup v2, and one with the cpu
	 * controller for v1 (mounted as cpu,cpuacct or cpu); both on a hybrid system. */
	while (fgets(line, sizeof(line), f)) {
		char *c = strchr(line, ':'), *path = c ? strchr(c + 1, ':') : NULL;
		if (!path)
			continue;
		double q = NO_LIMIT;
		if (strncmp(line, "0::", 3) == 0) {
			q = least_up(root, path + 1, v2_limit);
		} else if (has_cpu(c + 1, (size_t)(path - c - 1))) {
			static const char *const mounts[] = { "cpu,cpuacct", "cpuacct,cpu", "cpu" };
			for (size_t i = 0; i < sizeof(mounts) / sizeof(*mounts); i++) {
				snprintf(base, sizeof(base), "%s/%s", root, mounts[i]);
				if (access(base, F_OK) == 0) {
					q = least_up(base, path + 1, v1_limit);
					break;
				}
			}
		}
		if (q < cpus)
			cpus = q;
	}
	fclose(f);
	return cpus;
}

double lp_cpus_allowed(void)
{
	cpu_set_t set;
	double n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
	double q = lp_cpus_quota("/proc/self/cgroup", "/sys/fs/cgroup");
	return q < n ? q : n;
}
