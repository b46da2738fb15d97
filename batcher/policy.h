/* policy.h - when to dispatch a batch, as a pure function of the queue and
 * the clock (no locks, no threads: unit-tested on a virtual clock).
 *
 * The queue is seen in service order. Rows, not requests, count toward
 * max_batch_size, and a request's rows are never split, so a batch is a
 * prefix of the queue. Dispatch now when that prefix
 *   - is full, or cannot grow (the next request would not fit), or
 *   - has a preferred size (the largest such prefix is taken), or
 *   - holds a request that has waited max_queue_delay since its arrival;
 * otherwise wait until the oldest request's delay runs out (or until the
 * queue changes). */
#ifndef BG_POLICY_H
#define BG_POLICY_H

#include <stdint.h>

#define POLICY_NEVER INT64_MAX

struct policy_config {
    int max_batch_size;
    const int *preferred;           /* preferred batch sizes in rows; may be empty */
    int npreferred;
    int64_t max_queue_delay_ns;
};

struct policy_request {
    int rows;
    int64_t arrival_ns;
};

struct policy_decision {
    int take;                       /* requests from the head to dispatch now; 0 = wait */
    int rows;                       /* their rows */
    int64_t wake_ns;                /* when to decide again if nothing changes */
};

/* q holds the first n queued requests (the policy never needs more than
 * max_batch_size + 1 of them). */
void policy_decide(const struct policy_config *c, const struct policy_request *q, int n,
                   int64_t now_ns, struct policy_decision *d);

#endif
