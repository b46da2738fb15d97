/* guard.h - how much later than planned answers actually leave, learned
 * online, so the batcher can plan that much early.
 *
 * The policy plans a batch to finish at dequeue + exec(rows) (latmodel.h),
 * but an answer also has to wake a worker, cross back to its IO thread, be
 * encoded and be written, and under saturation each of those queues behind
 * other work. For every answer the gateway records its overrun: the instant
 * its response was queued for writing minus the planned finish. The batcher
 * treats every deadline as the guard earlier, for admission, expiry and
 * batch selection alike. So on a quiet machine the guard is near zero and
 * costs nothing, and under overload it grows until accepted answers are
 * back inside their budgets.
 *
 * The guard follows a sustained delay, not one stall. Overruns are summed
 * up per bucket of answers (at least GUARD_BUCKET_NS of them and
 * GUARD_BUCKET_MIN answers): the bucket's GUARD_QUANTILE. The guard is the
 * lower median of the last GUARD_BUCKETS buckets' quantiles, a bucket not
 * there (none yet, aged out) counting as no overrun. A stall of the
 * whole machine (another process, the hypervisor) makes every answer in
 * flight late at once, but it fills one bucket, at most two: a quantile over
 * raw samples learned it and, for as long as it was remembered, refused at
 * submit every request whose budget it exceeded, turning a 70 ms stall into
 * half a second of 504s (docs/BENCHMARKS.md, Tenants). A delay that lasts
 * three buckets of five is learned.
 *
 * Buckets age out (GUARD_MAX_AGE_NS): a guard that once grew so large that
 * nothing was admitted would otherwise never see a new sample and never
 * shrink.
 *
 * Threads: IO threads add samples under the guard's own mutex, not the
 * batcher's (taking the queue lock once per answer cost 1% of the infer
 * path's throughput); the batcher reads the published value without a lock
 * and ages a stale one only if the mutex is free at that instant. */
#ifndef BG_GUARD_H
#define BG_GUARD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define GUARD_BUCKET_NS (100 * 1000000LL)        /* a bucket spans at least this ... */
#define GUARD_BUCKET_MIN 4                        /* ... and holds at least this many */
#define GUARD_BUCKET_CAP 1024                     /* overruns kept per bucket (the latest) */
#define GUARD_BUCKETS 5                           /* the median of this many buckets */
#define GUARD_MAX_AGE_NS (10 * 1000000000LL)      /* older buckets no longer count */
#define GUARD_MIN_SAMPLES 20                      /* fewer in the buckets counted: guard 0 */
#define GUARD_REFIT_NS (100 * 1000000LL)          /* aging checked at most this often */
#define GUARD_QUANTILE 0.99

struct guard_bucket {
    int64_t closed_ns;                /* when it was closed; 0: unused */
    int64_t q;                        /* its GUARD_QUANTILE of overruns, ns */
    int n;                            /* overruns it summarises */
};

struct guard {
    pthread_mutex_t mu;               /* everything up to value */
    int64_t over[GUARD_BUCKET_CAP];   /* the open bucket's overruns, ns (may be < 0) */
    int n, next;                      /* ring buffer: kept, next slot */
    int seen;                         /* overruns added to the open bucket */
    int64_t opened_ns;                /* its first overrun's instant */
    struct guard_bucket closed[GUARD_BUCKETS];   /* ring, newest at last */
    int last;
    _Atomic int64_t fit_ns;           /* when value was last computed */
    _Atomic int64_t value;            /* the current guard, ns, >= 0 */
};

void guard_init(struct guard *g);
void guard_destroy(struct guard *g);
/* One answer left at now_ns, overrun_ns after its planned finish. */
void guard_add(struct guard *g, int64_t now_ns, int64_t overrun_ns);
/* The guard to plan with at now_ns (ages old buckets out when due). */
int64_t guard_value(struct guard *g, int64_t now_ns);

#endif
