/* policy.c - see policy.h. */
#include "policy.h"

void policy_decide(const struct policy_config *c, const struct policy_request *q, int n,
                   int64_t now_ns, struct policy_decision *d)
{
    d->take = 0;
    d->rows = 0;
    d->wake_ns = POLICY_NEVER;
    if (n <= 0)
        return;
    /* The largest prefix that fits, and the largest prefix at a preferred size. */
    int k = 0, rows = 0, pref_k = 0, pref_rows = 0;
    while (k < n && rows + q[k].rows <= c->max_batch_size) {
        rows += q[k].rows;
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
        return;
    }
    int full = rows == c->max_batch_size || k < n;
    int64_t due = q[0].arrival_ns + c->max_queue_delay_ns;
    if (full || now_ns >= due) {
        d->take = k;
        d->rows = rows;
        return;
    }
    if (pref_k > 0) {
        d->take = pref_k;
        d->rows = pref_rows;
        return;
    }
    d->wake_ns = due;
}
