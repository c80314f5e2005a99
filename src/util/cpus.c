/*
** How many CPUs this process may use.
*/
#include "util/cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double lp_cpus_quota(const char *self_cgroup, const char *root)
{
	char rel[512], path[1024];
	double cpus = 1e9;
	FILE *f = fopen(self_cgroup, "re");
	if (!f)
		return cpus;
	int found = 0;
	while (!found && fgets(rel, sizeof(rel), f))
		found = strncmp(rel, "0::/", 4) == 0;
	fclose(f);
	if (!found)
		return cpus;
	/* From the process's own cgroup up to the root ("/"): a parent's limit holds too. */
	char *p = rel + 3;
	p[strcspn(p, "\n")] = '\0';
	for (;;) {
		snprintf(path, sizeof(path), "%s%s/cpu.max", root, p[1] ? p : "");
		FILE *m = fopen(path, "re");
		char quota[32];
		unsigned long long period;
		if (m && fscanf(m, "%31s %llu", quota, &period) == 2 && strcmp(quota, "max") != 0 &&
		    period) {
			double c = strtod(quota, NULL) / (double)period;
			if (c > 0 && c < cpus)
				cpus = c;
		}
		if (m)
			fclose(m);
		if (!p[1])
			break;
		char *slash = strrchr(p, '/');
		slash[slash == p] = '\0'; /* "/a/b" -> "/a" -> "/" */
	}
	return cpus;
}

double lp_cpus_allowed(void)
{
	cpu_set_t set;
	double n = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
	double q = lp_cpus_quota("/proc/self/cgroup", "/sys/fs/cgroup");
	return q < n ? q : n;
}
