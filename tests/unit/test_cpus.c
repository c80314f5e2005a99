/*
** Unit tests of the CPUs a process may use (src/util/cpus.c): cgroup v2 and v1 quotas are
** read along the process's hierarchy (v1 under either mount name), the least one counts,
** "max", -1 and missing files limit nothing, and the affinity mask bounds the result.
*/
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cpus.h"
#include "unit.h"

static char root[] = "/tmp/test_cpus.XXXXXX";
static char self[600];

static void put(const char *rel, const char *text)
{
	char path[700];
	snprintf(path, sizeof(path), "%s%s", root, rel);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void dir(const char *rel)
{
	char path[700];
	snprintf(path, sizeof(path), "%s%s", root, rel);
	mkdir(path, 0755);
}

static void test_quota_along_the_hierarchy(void)
{
	dir("/a");
	dir("/a/b");
	/* The v1 lines before it are skipped. */
	put("/self", "4:memory:/x\n1:cpu:/\n0::/a/b\n");
	/* No cpu.max anywhere: no limit. */
	CHECK(lp_cpus_quota(self, root) >= 1e9);
	put("/a/b/cpu.max", "max 100000\n");
	CHECK(lp_cpus_quota(self, root) >= 1e9);
	/* The parent's limit holds for the child. */
	put("/a/cpu.max", "150000 100000\n");
	CHECK(lp_cpus_quota(self, root) == 1.5);
	/* The least along the way, the root's own (a container's namespace) included. */
	put("/a/b/cpu.max", "300000 100000\n");
	put("/cpu.max", "50000 100000\n");
	CHECK(lp_cpus_quota(self, root) == 0.5);
	put("/cpu.max", "max 100000\n");
	CHECK(lp_cpus_quota(self, root) == 1.5);
	/* A process in the root cgroup: only the root's file. */
	put("/self", "0::/\n");
	CHECK(lp_cpus_quota(self, root) >= 1e9);
	put("/cpu.max", "200000 100000\n");
	CHECK(lp_cpus_quota(self, root) == 2.0);
	/* cgroup v1 only, a malformed or missing file: no limit read. */
	put("/self", "1:cpu:/\n");
	CHECK(lp_cpus_quota(self, root) >= 1e9);
	put("/self", "0::/a/b\n");
	put("/cpu.max", "max 100000\n");
	put("/a/cpu.max", "garbage\n");
	put("/a/b/cpu.max", "100000 0\n");
	CHECK(lp_cpus_quota(self, root) >= 1e9);
	char missing[700];
	snprintf(missing, sizeof(missing), "%s/none", root);
	CHECK(lp_cpus_quota(missing, root) >= 1e9);
}

static void test_v1_quota(void)
{
	dir("/cpu,cpuacct");
	dir("/cpu,cpuacct/k");
	dir("/cpu,cpuacct/k/p");
	put("/self", "5:cpuset:/k/p\n3:cpu,cpuacct:/k/p\n2:memory:/k/p\n");
	/* No quota files: no limit. */
	CHECK(lp_cpus_quota(self, root) >= 1e9);
	/* -1: none; the parent's quota holds for the child. */
	put("/cpu,cpuacct/k/p/cpu.cfs_quota_us", "-1\n");
	put("/cpu,cpuacct/k/p/cpu.cfs_period_us", "100000\n");
	CHECK(lp_cpus_quota(self, root) >= 1e9);
	put("/cpu,cpuacct/k/cpu.cfs_quota_us", "250000\n");
	put("/cpu,cpuacct/k/cpu.cfs_period_us", "100000\n");
	CHECK(lp_cpus_quota(self, root) == 2.5);
	/* Inside a container the mount's root is the container's cgroup and the path from
	 * /proc/self/cgroup is not there: the root's quota. */
	put("/self", "3:cpu,cpuacct:/docker/abc\n");
	CHECK(lp_cpus_quota(self, root) >= 1e9);
	put("/cpu,cpuacct/cpu.cfs_quota_us", "50000\n");
	put("/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
	CHECK(lp_cpus_quota(self, root) == 0.5);
	/* cpuset is not cpu. */
	put("/self", "5:cpuset:/k/p\n");
	CHECK(lp_cpus_quota(self, root) >= 1e9);
	/* Hybrid: the v1 and the v2 quotas, the least. */
	dir("/h");
	put("/h/cpu.max", "30000 100000\n");
	put("/self", "3:cpu,cpuacct:/k/p\n0::/h\n");
	CHECK(lp_cpus_quota(self, root) == 0.3);
	put("/h/cpu.max", "max 100000\n");
	CHECK(lp_cpus_quota(self, root) == 0.5);
}

/* Controllers listed the other way round, mounted as cpu only. */
static void test_v1_cpu_mount(void)
{
	dir("/cpu");
	dir("/cpu/s");
	put("/self", "2:cpuacct,cpu:/s\n");
	put("/cpu/s/cpu.cfs_quota_us", "120000\n");
	put("/cpu/s/cpu.cfs_period_us", "100000\n");
	/* cpu,cpuacct exists from the test before (with a root quota of 0.5): looked up
	 * first, and its tree has no /s, so the root's quota there. */
	CHECK(lp_cpus_quota(self, root) == 0.5);
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/cpu,cpuacct'", root);
	CHECK(system(cmd) == 0);
	CHECK(lp_cpus_quota(self, root) == 1.2);
}

static void test_allowed_is_bounded_by_the_mask(void)
{
	cpu_set_t set;
	CHECK(sched_getaffinity(0, sizeof(set), &set) == 0);
	double n = lp_cpus_allowed();
	CHECK(n > 0 && n <= CPU_COUNT(&set));
}

int main(void)
{
	if (!mkdtemp(root)) {
		perror("mkdtemp");
		return 1;
	}
	snprintf(self, sizeof(self), "%s/self", root);
	RUN(test_quota_along_the_hierarchy);
	RUN(test_v1_quota);
	RUN(test_v1_cpu_mount);
	RUN(test_allowed_is_bounded_by_the_mask);
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	if (system(cmd) != 0)
		return 1;
	return UNIT_RESULT();
}
