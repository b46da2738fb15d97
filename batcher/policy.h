/* policy.h - when to dispatch a batch: a pure function of the queue, the
 * clock and the instance's latency model (no locks, no threads), so it is
 * unit-tested and simulated on a virtual clock.
 *
 * The queue is seen in service order (priority, then earliest deadline, then
 * arrival). Rows, not requests, count toward max_batch_size and a request is
 * never split, so a batch is a prefix of that order. The prefix is sent now
 * when it
 *   - is full, or cannot grow (the next request would not fit),
 *   - has reached a preferred size (the largest such prefix is taken),
 *   - holds a request that has waited max_queue_delay since its arrival, or
 *   - (deadline policy) would miss its earliest deadline if it waited any
 *     longer: now >= min(deadline) - exec(rows).
 * A deadline-policy batch is cut to the longest prefix whose deadlines the
 * predicted execution still meets. Otherwise the policy names the exact
 * instant to decide again (see policy_decide for what is sent). POLICY_FIXED_DELAY ignores deadlines: it is
 * Triton's dynamic batcher, kept as the baseline the benchmarks compare to. */
#ifndef BG_POLICY_H
#define BG_POLICY_H

#include <stdint.h>

#include "batcher/latmodel.h"

#define POLICY_NEVER INT64_MAX

enum policy_kind { POLICY_DEADLINE, POLICY_FIXED_DELAY };

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

#define POLICY_VIEW_FACTOR 4        /* the policy looks at 4 x max_batch_size + 1 requests */

struct policy_decision {
    int take;                       /* requests to dispatch now; 0 = wait */
    int rows;                       /* their rows */
    int row_budget;                 /* the batch was filled, in service order, up to this
                                     * many rows finishing by exec(row_budget) */
    int64_t wake_ns;                /* when to decide again if nothing changes */
    const int *pick;                /* NULL: the first `take` of q; else their indices in q */
    int *scratch;                   /* set by the caller: 2 x (max_batch_size + 1) ints, or
                                     * NULL (then the deadline policy sends prefixes only) */
};

/* q holds the first n queued requests in service order (at most
 * POLICY_VIEW_FACTOR x max_batch_size + 1). lat may be NULL for the fixed
 * policy.
 *
 * What the deadline policy dispatches: the set of requests that serves the
 * most rows while every one of them still meets its deadline, taken in
 * service order and skipping those that would not (under overload, requests
 * about to expire would otherwise force ever smaller batches and the
 * throughput would collapse; they are answered 504 when they expire). */
void policy_decide(const struct policy_config *c, const struct latmodel *lat,
                   const struct policy_request *q, int n, int64_t now_ns,
                   struct policy_decision *d);
/* Initializes a decision with its scratch space. */
static inline void policy_decision_init(struct policy_decision *d, int *scratch)
{
    d->scratch = scratch;
}

#endif
