/* bench_util.h - what the C benchmarks of loadgen/bench share: a monotonic
 * clock in seconds, reproducible data without libc's rand state, and a
 * comparison for qsort of timings (medians). */
#ifndef BG_BENCH_UTIL_H
#define BG_BENCH_UTIL_H

#include <stdint.h>
#include <time.h>

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* xorshift64, uniform in [-1, 1). */
static inline float rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return (float)((double)(*s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

#endif
