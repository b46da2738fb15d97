/* hist.c - see hist.h. */
#include "common/hist.h"

#include <math.h>
#include <string.h>

void hist_reset(struct hist *h)
{
    memset(h, 0, sizeof *h);
    h->min_ns = INT64_MAX;
}

static int hist_index(int64_t ns)
{
    if (ns <= HIST_MIN_NS)
        return 0;
    int i = (int)(log((double)ns / HIST_MIN_NS) / log(HIST_RATIO));
    return i < HIST_BUCKETS ? i : HIST_BUCKETS - 1;
}

void hist_record(struct hist *h, int64_t ns)
{
    if (ns < 0)
        ns = 0;
    h->bucket[hist_index(ns)]++;
    h->count++;
    h->sum_ns += (double)ns;
    if (ns < h->min_ns)
        h->min_ns = ns;
    if (ns > h->max_ns)
        h->max_ns = ns;
}

void hist_merge(struct hist *dst, const struct hist *src)
{
    for (int i = 0; i < HIST_BUCKETS; i++)
        dst->bucket[i] += src->bucket[i];
    dst->count += src->count;
    dst->sum_ns += src->sum_ns;
    if (src->count && src->min_ns < dst->min_ns)
        dst->min_ns = src->min_ns;
    if (src->max_ns > dst->max_ns)
        dst->max_ns = src->max_ns;
}

int64_t hist_quantile(const struct hist *h, double q)
{
    if (h->count == 0)
        return 0;
    if (q >= 1.0)
        return h->max_ns;
    uint64_t target = (uint64_t)ceil(q * (double)h->count);
    if (target == 0)
        target = 1;
    uint64_t seen = 0;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += h->bucket[i];
        if (seen >= target) {
            /* The bucket [m*r^i, m*r^(i+1)) is reported at its geometric
             * midpoint: within sqrt(r) - 1 < 1% of anything inside it. */
            double mid = HIST_MIN_NS * pow(HIST_RATIO, i + 0.5);
            if (i == 0)
                mid = h->min_ns < HIST_MIN_NS ? (double)h->min_ns : mid;
            if (mid > (double)h->max_ns)
                mid = (double)h->max_ns;
            if (mid < (double)h->min_ns)
                mid = (double)h->min_ns;
            return (int64_t)mid;
        }
    }
    return h->max_ns;
}

double hist_mean(const struct hist *h) { return h->count ? h->sum_ns / (double)h->count : 0; }
