/* hist.h - a latency histogram with fixed memory and bounded relative
 * error: logarithmic buckets 2% wide from 1 us to 100 s, so any value in
 * range is reported within 1% (the bucket's geometric midpoint). Values
 * below the range count in the first bucket, above it in the last.
 * Not thread-safe: one per thread, merged with hist_merge. */
#ifndef BG_HIST_H
#define BG_HIST_H

#include <stdint.h>

#define HIST_MIN_NS 1000.0            /* 1 us */
#define HIST_MAX_NS 100e9             /* 100 s */
#define HIST_RATIO 1.02
#define HIST_BUCKETS 931              /* ceil(log(1e8) / log(1.02)) + 1 */

struct hist {
    uint64_t count;
    uint64_t bucket[HIST_BUCKETS];
    int64_t min_ns, max_ns;
    double sum_ns;
};

void hist_reset(struct hist *h);
void hist_record(struct hist *h, int64_t ns);
void hist_merge(struct hist *dst, const struct hist *src);
/* The q-quantile (0..1) in ns, within 1% of the true value; 0 when empty.
 * q = 1 gives the exact maximum. */
int64_t hist_quantile(const struct hist *h, double q);
double hist_mean(const struct hist *h);

#endif
