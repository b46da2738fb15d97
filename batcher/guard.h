/* guard.h - how much later than planned answers actually leave, learned
 * online, so the batcher can plan that much early.
 *
 * The policy plans a batch to finish at dequeue + exec(rows) (latmodel.h),
 * but an answer also has to wake a worker, cross back to its IO thread, be
 * encoded and be written, and under saturation each of those queues behind
 * other work. For every answer the gateway records its overrun: the instant
 * its response was queued for writing minus the planned finish. The guard is
 * a high quantile of the recent overruns (never negative); the batcher
 * treats every deadline as that much earlier, for admission, expiry and
 * batch selection alike. So on a quiet machine the guard is near zero and
 * costs nothing, and under overload it grows until accepted answers are
 * back inside their budgets.
 *
 * Samples age out (GUARD_MAX_AGE_NS): a guard that once grew so large that
 * nothing was admitted would otherwise never see a new sample and never
 * shrink.
 *
 * Threads: IO threads add samples under the guard's own mutex, not the
 * batcher's (taking the queue lock once per answer cost 1% of the infer
 * path's throughput); the batcher reads the published value without a lock
 * and refits a stale one only if the mutex is free at that instant. */
#ifndef BG_GUARD_H
#define BG_GUARD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define GUARD_WINDOW 1024                         /* most recent overruns kept */
#define GUARD_MAX_AGE_NS (10 * 1000000000LL)      /* older ones no longer count */
#define GUARD_MIN_SAMPLES 20                      /* fewer recent ones: guard 0 */
#define GUARD_REFIT_EVERY 256                     /* samples between refits ... */
#define GUARD_REFIT_NS (500 * 1000000LL)          /* ... or this long, whichever first */
#define GUARD_QUANTILE 0.99

struct guard {
    pthread_mutex_t mu;               /* the window below */
    int64_t at[GUARD_WINDOW];         /* when each overrun was recorded */
    int64_t over[GUARD_WINDOW];       /* ns; may be negative (early) */
    int n, next;                      /* ring buffer */
    int since_fit;
    _Atomic int64_t fit_ns;           /* when value was last computed */
    _Atomic int64_t value;            /* the current guard, ns, >= 0 */
};

void guard_init(struct guard *g);
void guard_destroy(struct guard *g);
/* One answer left at now_ns, overrun_ns after its planned finish. */
void guard_add(struct guard *g, int64_t now_ns, int64_t overrun_ns);
/* The guard to plan with at now_ns (refits when due). */
int64_t guard_value(struct guard *g, int64_t now_ns);

#endif
