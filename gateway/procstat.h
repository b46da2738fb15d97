/* procstat.h - the host's CPU and memory as Linux's /proc reports them,
 * for Triton's nv_cpu_* gauges on /metrics (gateway/metrics_triton.h).
 * CPU utilization is a difference of two readings of /proc/stat, so the
 * previous reading is kept here, in an object main owns (no global). */
#ifndef BG_PROCSTAT_H
#define BG_PROCSTAT_H

#include <stdint.h>

struct procstat;

struct procstat *procstat_new(void);
void procstat_free(struct procstat *p);

/* The busy fraction of all CPUs together (0..1) since the previous call
 * (the first: since boot). 0, or -1 when /proc/stat cannot be read. Any
 * thread. */
int procstat_cpu_utilization(struct procstat *p, double *out);

/* RAM: MemTotal, and in use as MemTotal - MemAvailable, in bytes
 * (/proc/meminfo). 0, or -1 when it cannot be read. */
int procstat_memory(uint64_t *total, uint64_t *used);

#endif
