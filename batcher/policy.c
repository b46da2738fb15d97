/* policy.c - see policy.h. */
#include "batcher/policy.h"

#include <stddef.h>
#include <string.h>

enum policy_kind policy_kind_from_name(const char *name)
{
    if (name && strcmp(name, "fixed_delay") == 0)
        return POLICY_FIXED_DELAY;
    if (name && strcmp(name, "deadline") == 0)
        return POLICY_DEADLINE;
    return POLICY_ADAPTIVE;
}

/* The adaptive rule (policy.h): the instant the batch of `rows` rows, whose
 * oldest request arrived at `oldest`, stops waiting; <= now_ns: send now.
 * `bound` is the earlier of max_queue_delay's instant and the deadline
 * rule's latest start. */
static int64_t policy_adaptive_until(const struct latmodel *lat, const struct policy_load *load,
                                     int rows, int64_t oldest, int64_t bound)
{
    double lambda = load ? load->rows_per_ns : 0;
    if (!(lambda > 0))
        return oldest;                          /* nothing is coming: no reason to wait */
    double gap = 1.0 / lambda;                  /* expected ns until the next row */
    double until = (double)bound;
    /* A latency model with no sample yet (an upstream model before its first
     * call: nothing warms it) does not know the setup a wait would save;
     * until it does, the configured bound is the wait, as in the former
     * default, still only while a row is expected. */
    int measured = !lat || lat->n > 0;
    if (!load->device_has_other_work && measured) {
        /* Waiting idles the device: worth it for w* = (a - r/lambda)/2 at most. */
        double a = lat ? lat->a_ns : 0;
        double wstar = (a - rows * gap) / 2;
        if (wstar <= 0)
            return oldest;
        if ((double)oldest + wstar < until)
            until = (double)oldest + wstar;
    }
    /* Only while at least one more row is expected before the wait ends. */
    until -= gap;
    if (until <= (double)oldest)
        return oldest;
    return (int64_t)until;
}

/* The selection serving the most rows, every one within its deadline when
 * started now: for each row budget R (largest first) take, in service
 * order, the requests that fit in R and whose deadline allows exec(R). */
static void policy_select_feasible(const struct policy_config *c, const struct latmodel *lat,
                            const struct policy_request *q, int n, int64_t now,
                            struct policy_decision *d)
{
    int *best = d->scratch, *cur = d->scratch + c->max_batch_size + 1;
    int best_n = 0, best_rows = 0, best_R = 1;
    /* Down to R == best_rows: among selections of equal rows the one with the
     * tightest row budget admits the most requests in service order. */
    for (int R = c->max_batch_size; R >= 1 && R >= best_rows; R--) {
        int64_t finish = now + latmodel_predict(lat, R);
        int cn = 0, rows = 0;
        for (int i = 0; i < n && rows < R; i++) {
            if (rows + q[i].rows > R)
                continue;
            if (q[i].deadline_ns && q[i].deadline_ns < finish)
                continue;
            cur[cn++] = i;
            rows += q[i].rows;
        }
        if (rows > 0 && rows >= best_rows) {
            int *t = best;
            best = cur;
            cur = t;
            best_n = cn;
            best_rows = rows;
            best_R = R;
        }
    }
    if (best_n == 0) {
        /* Nothing can make it (the caller expires those): send the head. */
        d->take = 1;
        d->rows = q[0].rows;
        d->row_budget = c->max_batch_size;
        d->pick = NULL;
        return;
    }
    d->take = best_n;
    d->rows = best_rows;
    d->row_budget = best_R;
    d->pick = best;
}

void policy_decide(const struct policy_config *c, const struct latmodel *lat,
                   const struct policy_load *load, const struct policy_request *q, int n,
                   int64_t now_ns, struct policy_decision *d)
{
    d->take = 0;
    d->rows = 0;
    d->wake_ns = POLICY_NEVER;
    d->pick = NULL;
    if (n <= 0)
        return;
    int k = 0, rows = 0, pref_k = 0, pref_rows = 0;
    int64_t oldest = POLICY_NEVER, dmin = POLICY_NEVER;
    while (k < n && rows + q[k].rows <= c->max_batch_size) {
        rows += q[k].rows;
        if (q[k].arrival_ns < oldest)
            oldest = q[k].arrival_ns;
        if (q[k].deadline_ns && q[k].deadline_ns < dmin)
            dmin = q[k].deadline_ns;
        k++;
        for (int p = 0; p < c->npreferred; p++)
            if (rows == c->preferred[p]) {
                pref_k = k;
                pref_rows = rows;
            }
    }
    if (k == 0) {
        /* Cannot happen for admitted requests (rows <= max_batch_size); take
         * the head alone rather than stall the queue. */
        d->take = 1;
        d->rows = q[0].rows;
        d->row_budget = c->max_batch_size;
        return;
    }
    int deadline_aware = policy_deadline_aware(c->kind) && lat != NULL;
    int full = rows == c->max_batch_size || k < n;
    int64_t due = oldest + c->max_queue_delay_ns;
    int64_t latest = POLICY_NEVER;
    if (deadline_aware && dmin != POLICY_NEVER)
        latest = dmin - latmodel_predict(lat, rows);
    int64_t bound = due < latest ? due : latest;
    if (c->kind == POLICY_ADAPTIVE)
        bound = policy_adaptive_until(lat, load, rows, oldest, bound);
    int take = 0, take_rows = 0;
    if (full || now_ns >= bound) {
        take = k;
        take_rows = rows;
    } else if (pref_k > 0) {
        take = pref_k;
        take_rows = pref_rows;
    }
    if (take > 0) {
        if (deadline_aware && d->scratch) {
            policy_select_feasible(c, lat, q, n, now_ns, d);
            return;
        }
        d->take = take;
        d->rows = take_rows;
        d->row_budget = c->max_batch_size;
        return;
    }
    d->wake_ns = bound;
}
