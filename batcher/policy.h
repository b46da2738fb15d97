/* policy.h - when to dispatch a batch: a pure function of the queue, the
 * clock, the instance's latency model and the observed arrival rate (no
 * locks, no threads, no clock of its own), so it is unit-tested and
 * simulated on a virtual clock.
 *
 * The queue is seen in service order (priority, then earliest deadline, then
 * arrival). Rows, not requests, count toward max_batch_size, tokens (work.h:
 * a request's work units, its rows unless it gives tokens) toward
 * max_batch_tokens, and a request is never split, so a batch is a prefix of
 * that order. The latency model is in tokens: for a model without tokens
 * every "tokens" below is "rows", and the policy is the row policy it
 * always was. The prefix is sent now when it
 *   - is full (either cap), or cannot grow (the next request would not fit),
 *   - has reached a preferred size (the largest such prefix is taken),
 *   - holds a request that has waited max_queue_delay since its arrival,
 *   - (deadline-aware policies) would miss its earliest deadline if it waited
 *     any longer: now >= min(deadline) - exec(tokens), or
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

#include <stdbool.h>
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

/* A request's tokens (work.h), for a queue whose requests carry them. */
struct policy_token_info {
    int tokens;                     /* its work units, >= 1 */
    int64_t tokens_sq;              /* its rows' squared lengths summed; 0: not given */
    int len;                        /* its longest row in tokens (length grouping) */
    int priority;                   /* length grouping mixes requests of one priority only */
};

/* What tokens add to a decision (NULL or req NULL: a request's tokens are
 * its rows and the cap is max_batch_size). */
struct policy_tokens {
    /* The tokens a batch may hold; 0: max_batch_size. The queue passes
     * batching.max_batch_tokens, or without it a bound no batch of
     * max_batch_size rows exceeds (queue.c). */
    int64_t max_batch_tokens;
    const struct policy_token_info *req;   /* req[i] is q[i]'s */
};

/* Request i's tokens, tokens_sq. */
static inline int policy_req_tokens(const struct policy_tokens *t,
                                    const struct policy_request *q, int i)
{
    return t && t->req ? t->req[i].tokens : q[i].rows;
}

static inline int64_t policy_req_sq(const struct policy_tokens *t, int i)
{
    return t && t->req ? t->req[i].tokens_sq : 0;
}

/* Request i's priority (lower serves first); 0 when not given. */
static inline int policy_req_priority(const struct policy_tokens *t, int i)
{
    return t && t->req ? t->req[i].priority : 0;
}

/* What the policy knows beyond the queue: measured by the caller, passed in. */
struct policy_load {
    /* The queue's observed arrival rate (rate.h) in tokens (rows for a model
     * without tokens) per ns; 0: none. */
    double rows_per_ns;
    /* Another model or the queue's own job lines could use this device
     * while the batch waits (batcher.c sets it from the device scheduler),
     * so waiting does not leave the device idle and may last up to
     * max_queue_delay / the deadline whatever the setup time. */
    int device_has_other_work;
    /* How late the worker's timed wakes have come lately (batcher.c): the
     * deadline rule ends the wait that much early, so that a wake a little
     * late still finds the batch it waited for in time (it found it late
     * by the wake's lateness, and split it: one request on time, the
     * other answered 504). 0: none. */
    int64_t wake_slack_ns;
    /* The latency model of the model's fastest instance (batcher.c), by
     * which the queue expires requests; NULL: this one's. A slower
     * instance leaves a request it would finish late to a faster one
     * while the faster one can still make it (it took the request and
     * answered it past its budget). */
    const struct latmodel *fastest;
};

#define POLICY_VIEW_FACTOR 4        /* the policy looks at 4 x max_batch_size + 1 requests */

struct policy_decision {
    int take;                       /* requests to dispatch now; 0 = wait */
    int rows;                       /* their rows */
    int64_t tokens;                 /* their tokens */
    int64_t budget;                 /* the batch was filled, in service order, up to this
                                     * many tokens finishing by exec(budget) (policy_budget_ns) */
    int64_t wake_ns;                /* when to decide again if nothing changes */
    const int *pick;                /* NULL: the first `take` of q; else their indices in q,
                                     * in q's order */
    int *scratch;                   /* set by the caller: 2 x (max_batch_size + 1) ints, or
                                     * NULL (then deadline-aware policies send prefixes only) */
};

/* q holds the first n queued requests in service order (at most
 * POLICY_VIEW_FACTOR x max_batch_size + 1). lat may be NULL for the fixed
 * policy; load may be NULL (no arrivals measured: the adaptive policy then
 * never waits).
 *
 * When the adaptive policy waits (docs/BATCHING.md derives it; rows are
 * tokens for a model with tokens): with r rows
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
 * most tokens while every one of them still meets its deadline, taken in
 * service order and skipping those that would not (under overload, requests
 * about to expire would otherwise force ever smaller batches and the
 * throughput would collapse; they are answered 504 when they expire). The
 * queue may then trade members for others of closer length (group.h). */
void policy_decide(const struct policy_config *c, const struct latmodel *lat,
                   const struct policy_load *load, const struct policy_request *q, int n,
                   int64_t now_ns, struct policy_decision *d);
/* The same for a queue whose requests carry tokens (t may be NULL: then
 * it is policy_decide). */
void policy_decide_tokens(const struct policy_config *c, const struct policy_tokens *t,
                          const struct latmodel *lat, const struct policy_load *load,
                          const struct policy_request *q, int n, int64_t now_ns,
                          struct policy_decision *d);
/* The token cap of a batch: t's, or max_batch_size. */
int64_t policy_token_cap(const struct policy_config *c, const struct policy_tokens *t);
/* The largest tokens_sq / tokens (rounded up) among q[0..n), 0 when none
 * gives tokens_sq: a selection of T tokens from q has at most T x that. */
int64_t policy_sq_per_token(const struct policy_tokens *t, const struct policy_request *q, int n);
/* The execution a selection filled up to `budget` tokens is planned with:
 * exec(budget), with the quadratic term (if the model has one) at the most
 * a selection can have (budget x sq_per_token), so every member's deadline
 * holds whichever requests fill it. */
int64_t policy_budget_ns(const struct latmodel *lat, int64_t sq_per_token, int64_t budget);

/* The wake slack's floor: what a timed wait's lateness reaches now and
 * then even on an idle machine (a decaying maximum alone forgot those, and
 * 4 pairs of 40 still split). And its ceiling: a stall (a stopped
 * process, a swapped page) says nothing of the next wake; past this the
 * deadline rule would give up batching for no gain. */
#define POLICY_WAKE_SLACK_MIN_NS 500000
#define POLICY_WAKE_SLACK_MAX_NS 2000000

/* The next wake_slack_ns from the last and a timed wake `late_ns` late: a
 * maximum that decays by 1/16 a wake, so one late wake counts for the next
 * few dozen, held between the floor and the ceiling above. */
int64_t policy_wake_slack(int64_t slack_ns, int64_t late_ns);
/* Initializes a decision with its scratch space. */
static inline void policy_decision_init(struct policy_decision *d, int *scratch)
{
    d->scratch = scratch;
}

#endif
