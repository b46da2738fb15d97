/* procstat.c - see procstat.h. */
#include "gateway/procstat.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct procstat {
    pthread_mutex_t mu;       /* scrapes of several IO threads share the last reading */
    uint64_t busy, total;     /* jiffies at the last reading */
};

struct procstat *procstat_new(void)
{
    struct procstat *p = calloc(1, sizeof *p);
    if (p)
        pthread_mutex_init(&p->mu, NULL);
    return p;
}

void procstat_free(struct procstat *p)
{
    if (!p)
        return;
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* The "cpu" line: user nice system idle iowait irq softirq steal ...;
 * idle and iowait are the idle time, the rest busy (guest time is already
 * inside user and nice). */
static int procstat_read_cpu(uint64_t *busy, uint64_t *total)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    uint64_t v[8] = {0};
    int n = fscanf(f, "cpu %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64
                      " %" SCNu64 " %" SCNu64 " %" SCNu64,
                   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4)
        return -1;
    uint64_t idle = v[3] + v[4];
    *total = 0;
    for (int i = 0; i < 8; i++)
        *total += v[i];
    *busy = *total - idle;
    return 0;
}

int procstat_cpu_utilization(struct procstat *p, double *out)
{
    uint64_t busy, total;
    if (!p || procstat_read_cpu(&busy, &total) < 0)
        return -1;
    pthread_mutex_lock(&p->mu);
    uint64_t db = busy - p->busy, dt = total - p->total;
    if (total > p->total && busy >= p->busy) {
        p->busy = busy;
        p->total = total;
    }
    pthread_mutex_unlock(&p->mu);
    /* Two scrapes within one tick see no time pass: nothing to measure. */
    *out = dt > 0 && db <= dt ? (double)db / (double)dt : 0.0;
    return 0;
}

int procstat_memory(uint64_t *total, uint64_t *used)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return -1;
    char line[256];
    uint64_t tot = 0, avail = 0;
    int have = 0;
    while (have != 3 && fgets(line, sizeof line, f)) {
        uint64_t kb;
        if (sscanf(line, "MemTotal: %" SCNu64, &kb) == 1) {
            tot = kb * 1024;
            have |= 1;
        } else if (sscanf(line, "MemAvailable: %" SCNu64, &kb) == 1) {
            avail = kb * 1024;
            have |= 2;
        }
    }
    fclose(f);
    if (have != 3)
        return -1;
    *total = tot;
    *used = avail < tot ? tot - avail : 0;
    return 0;
}
