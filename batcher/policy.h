/* policy.h - when to dispatch a batch: a pure function of the queue, the
 * clock, the instance's latency model and the observed arrival rate (no
 * locks, no threads, no clock of its own), so it is unit-tested and
 * simulated on a virtual clock.
 *
 * The queue is seen in service order (priority, then earliest deadline, then
 * arrival). Rows, not requests, count toward max_batch_size and a request is
 * never split, so a batch is a prefix of that order. The prefix is sent now
 * when it
 *   - is full, or cannot grow (the next request would not fit),
 *   - has reached a preferred size (the largest such prefix is taken),
 *   - holds a request that has waited max_queue_delay since its arrival,
 *   - (deadline-aware policies) would miss its earliest deadline if it waited
 *     any longer: now >= min(deadline) - exec(rows), or
 *   - (POLICY_ADAPTIVE) waiting is not expected to pay (policy_decide).
 * A deadline-aware batch is cut to the longest prefix whose deadlines the
 * predicted execution still meets. Otherwise the policy names the exact
 * instant to decide again (see policy_decide for what is sent).
 *
 * POLICY_ADAPTIVE (the default) waits for company only when the arrival
 * rate and the latency model say it pays, max_queue_delay being only the
 * upper bound of such a wait; POLICY_DEADLINE always waits out
 * max_queue_delay (the default before); POLICY_FIXED_DELAY also ignores
 * deadlines: it is Triton's dynamic batcher. The last two are kept as the
 * baselines the benchmarks compare to. */
#ifndef BG_POLICY_H
#define BG_POLICY_H

#include <stdint.h>

#include "batcher/latmodel.h"

#define POLICY_NEVER INT64_MAX

enum policy_kind { POLICY_DEADLINE, POLICY_FIXED_DELAY, POLICY_ADAPTIVE };

/* The config.json name ("adaptive", "deadline", "fixed_delay"; anything
 * else, as the schema admits none, is the default). */
enum policy_kind policy_kind_from_name(const char *name);
/* Whether the kind plans to deadlines (early 504, expiry, feasible batches). */
static inline int policy_deadline_aware(enum policy_kind k) { return k != POLICY_FIXED_DELAY; }

struct policy_config {
    int max_batch_size;
    const int *preferred;           /* preferred batch sizes in rows; may be empty */
    int npreferred;
    int64_t max_queue_delay_ns;
    enum policy_kind kind;
};

struct policy_request {
    int rows;
    int64_t arrival_ns;
    int64_t deadline_ns;            /* 0: none */
};

/* What the policy knows beyond the queue: measured by the caller, passed in. */
struct policy_load {
    double rows_per_ns;             /* the queue's observed arrival rate (rate.h); 0: none */
    /* Another model or the queue's own job lines could use this device
     * while the batch waits (batcher.c sets it from the device scheduler),
     * so waiting does not leave the device idle and may last up to
     * max_queue_delay / the deadline whatever the setup time. */
    int device_has_other_work;
};

#define POLICY_VIEW_FACTOR 4        /* the policy looks at 4 x max_batch_size + 1 requests */

struct policy_decision {
    int take;                       /* requests to dispatch now; 0 = wait */
    int rows;                       /* their rows */
    int row_budget;                 /* the batch was filled, in service order, up to this
                                     * many rows finishing by exec(row_budget) */
    int64_t wake_ns;                /* when to decide again if nothing changes */
    const int *pick;                /* NULL: the first `take` of q; else their indices in q */
    int *scratch;                   /* set by the caller: 2 x (max_batch_size + 1) ints, or
                                     * NULL (then deadline-aware policies send prefixes only) */
};

/* q holds the first n queued requests in service order (at most
 * POLICY_VIEW_FACTOR x max_batch_size + 1). lat may be NULL for the fixed
 * policy; load may be NULL (no arrivals measured: the adaptive policy then
 * never waits).
 *
 * When the adaptive policy waits (docs/BATCHING.md derives it): with r rows
 * in the batch that would go now, lambda rows/ns arriving and the fitted
 * exec(R) = a + b*R, waiting w instead of starting now delays the r rows by
 * about w(1 + b*lambda) and saves each of the ~lambda*w rows arriving
 * meanwhile about a(1 + b*lambda) - w (they skip the wait for the running
 * batch and a setup of their own). The net gain
 *     G(w) ~= (1 + b*lambda) * w * (lambda*a - r - lambda*w)
 * is positive only when lambda*a > r (more rows arrive during one setup time
 * than are queued) and largest at w* = (a - r/lambda) / 2. The batch waits
 * until  T = min(oldest arrival + w*, oldest arrival + max_queue_delay,
 * latest start for its deadlines)  but only while at least one more row is
 * expected before T: it is sent at T - 1/lambda, and at once when
 * lambda * (T - now) <= 1 (so never at rate 0, never with a <= 0). With
 * load->device_has_other_work the w* term is dropped.
 *
 * What a deadline-aware policy dispatches: the set of requests that serves the
 * most rows while every one of them still meets its deadline, taken in
 * service order and skipping those that would not (under overload, requests
 * about to expire would otherwise force ever smaller batches and the
 * throughput would collapse; they are answered 504 when they expire). */
void policy_decide(const struct policy_config *c, const struct latmodel *lat,
                   const struct policy_load *load, const struct policy_request *q, int n,
                   int64_t now_ns, struct policy_decision *d);
/* Initializes a decision with its scratch space. */
static inline void policy_decision_init(struct policy_decision *d, int *scratch)
{
    d->scratch = scratch;
}

#endif
