/* cpus.h - how many CPUs this process may use: the default number of IO
 * threads. A container's limits count, not the machine's size: the CPUs of
 * its affinity mask (taskset, cpuset) and its cgroup CPU quota (a
 * Kubernetes `limits.cpu`: cgroup v2 cpu.max, v1 cpu.cfs_quota_us /
 * cpu.cfs_period_us), rounded up. */
#ifndef BG_CPUS_H
#define BG_CPUS_H

/* At least 1. */
int cpus_usable(void);

/* A cgroup v2 cpu.max line ("200000 100000", "max 100000") as a CPU count,
 * rounded up; 0 when it sets no bound or cannot be read. (v1's two files
 * give the same line: "QUOTA PERIOD", QUOTA -1 for none.) */
int cpus_from_quota(const char *line);

#endif
