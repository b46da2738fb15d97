/* cpus.c - see cpus.h. */
#include "common/cpus.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int cpus_from_quota(const char *line)
{
    char q[32];
    long long period;
    if (!line || sscanf(line, "%31s %lld", q, &period) != 2 || period <= 0)
        return 0;
    if (strcmp(q, "max") == 0)
        return 0;
    char *end;
    long long quota = strtoll(q, &end, 10);
    if (*end || quota <= 0)
        return 0;
    return (int)((quota + period - 1) / period);
}

/* The first line of a file into buf; -1 when it cannot be read. */
static int cpus_read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char *ok = fgets(buf, (int)cap, f);
    fclose(f);
    return ok ? 0 : -1;
}

/* The cgroup's CPU quota as a count; 0 when none is set or found. The
 * files at the mount's top are the container's own under a cgroup
 * namespace (as containers run). */
static int cpus_cgroup_quota(void)
{
    char line[128];
    if (cpus_read_line("/sys/fs/cgroup/cpu.max", line, sizeof line) == 0)
        return cpus_from_quota(line);
    char quota[64], period[64];
    if (cpus_read_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", quota, sizeof quota) == 0 &&
        cpus_read_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us", period, sizeof period) == 0) {
        quota[strcspn(quota, "\n")] = '\0';
        snprintf(line, sizeof line, "%s %s", quota, period);
        return cpus_from_quota(line);
    }
    return 0;
}

int cpus_usable(void)
{
    int n = 0;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        n = CPU_COUNT(&set);
    if (n <= 0) {
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        n = online > 0 ? (int)online : 1;
    }
    int quota = cpus_cgroup_quota();
    if (quota > 0 && quota < n)
        n = quota;
    return n > 0 ? n : 1;
}
