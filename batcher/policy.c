/* policy.c - see policy.h. */
#include "batcher/policy.h"

#include <limits.h>
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

/* The adaptive rule (policy.h): the instant the batch of `rows` rows (tokens
 * for a model with tokens), whose oldest request arrived at `oldest`, stops
 * waiting; <= now_ns: send now.
 * `bound` is the earlier of max_queue_delay's instant and the deadline
 * rule's latest start. */
static int64_t policy_adaptive_until(const struct latmodel *lat, const struct policy_load *load,
                                     int64_t rows, int64_t oldest, int64_t bound)
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

int64_t policy_token_cap(const struct policy_config *c, const struct policy_tokens *t)
{
    return t && t->max_batch_tokens > 0 ? t->max_batch_tokens : c->max_batch_size;
}

int64_t policy_sq_per_token(const struct policy_tokens *t, const struct policy_request *q, int n)
{
    int64_t m = 0;
    for (int i = 0; t && t->req && i < n; i++) {
        int64_t tok = policy_req_tokens(t, q, i), sq = policy_req_sq(t, i);
        int64_t v = sq > 0 ? (sq + tok - 1) / tok : 0;
        if (v > m)
            m = v;
    }
    return m;
}

int64_t policy_budget_ns(const struct latmodel *lat, int64_t sq_per_token, int64_t budget)
{
    return latmodel_predict_sq(lat, budget, budget * sq_per_token);
}

/* One selection for a token budget: in service order, each request that
 * fits (rows and tokens within `budget`) and whose deadline allows
 * `finish`. Fills idx[0..*cn) and *rows, returns its tokens; *late: the
 * latest deadline among the requests looked at that `finish` excluded
 * (0: none), which bounds the budgets giving this same selection.
 * *passes: whether it excluded for its deadline a request that could
 * make it alone (started now on lat) while serving one of lower priority
 * (policy_select_feasible). Requests past a full batch are not looked at:
 * no room, not their deadline, left them out. */
static int64_t policy_fill(const struct policy_config *c, const struct policy_tokens *t,
                           const struct latmodel *lat, int64_t spt, int64_t now,
                           const struct policy_request *q, int n, int64_t budget, int64_t finish,
                           int *idx, int *cn, int *rows, int64_t *late, bool *passes)
{
    int k = 0, r = 0, passed = INT_MAX, lowest = INT_MIN;
    int64_t tok = 0;
    *late = 0;
    for (int i = 0; i < n && tok < budget && r < c->max_batch_size; i++) {
        int ti = policy_req_tokens(t, q, i);
        if (q[i].deadline_ns && q[i].deadline_ns < finish) {
            if (q[i].deadline_ns > *late)
                *late = q[i].deadline_ns;
            if (policy_req_priority(t, i) < passed &&
                now + policy_budget_ns(lat, spt, ti) <= q[i].deadline_ns)
                passed = policy_req_priority(t, i);
            continue;
        }
        if (r + q[i].rows > c->max_batch_size || tok + ti > budget)
            continue;
        idx[k++] = i;
        r += q[i].rows;
        tok += ti;
        if (policy_req_priority(t, i) > lowest)
            lowest = policy_req_priority(t, i);
    }
    *cn = k;
    *rows = r;
    *passes = k > 0 && passed < lowest;
    return tok;
}

/* The smallest budget (at least 1) whose finish is still past `late`: from
 * there up to the budget that excluded it, the same requests are
 * excluded. exec grows with the budget, so a bisection finds it. */
static int64_t policy_band_low(const struct latmodel *lat, int64_t spt, int64_t now,
                               int64_t budget, int64_t late)
{
    if (!late)
        return 1;
    int64_t lo = 1, hi = budget;   /* now + exec(hi) > late holds */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (now + policy_budget_ns(lat, spt, mid) > late)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The selection serving the most tokens, every one within its deadline
 * when started now: for each token budget R (largest first) take, in
 * service order, the requests that fit in R and whose deadline allows
 * exec(R). Among selections of equal tokens the one with the tightest
 * budget admits the most requests in service order. One rule bounds the
 * search: a selection may not exclude for its deadline a request that
 * could still make it alone while it serves one of lower priority (a
 * larger budget left a priority-1 request to expire while 7 rows of
 * priority 5 with no deadline ran). Some selection always obeys it: at the
 * budget of the fewest tokens any feasible request has, no feasible
 * request is excluded for its deadline.
 *
 * Budgets are not tried one by one (max_batch_tokens may be thousands):
 * the selection for R is also the selection for every budget down to the
 * larger of its own tokens and the lowest budget that excludes the same
 * requests for their deadlines (policy_band_low), so the next budget worth
 * trying is below both. For rows (tokens == rows, cap max_batch_size)
 * this is the same selection, budget and order as trying each R, but for
 * the priority rule, judged at a band's top: there a request the band's
 * lower budgets leave out for room (not looked at once the batch is full)
 * is left out for its deadline, so a band whose top passes over a higher
 * priority is passed over whole, and a smaller batch that serves that
 * request wins (the re-test's case: an aged priority-5 request of 2 rows
 * or a priority-1 request due before exec(2); trying each R takes the
 * first and leaves the second to expire).
 *
 * When nothing can make it on this instance: if a faster instance still
 * can (load->fastest), nothing is taken and the wake is the instant the
 * first of them expires there; else the head goes (the caller expires
 * what is hopeless everywhere first, so this is a near miss). */
static void policy_select_feasible(const struct policy_config *c, const struct policy_tokens *t,
                                   const struct latmodel *lat, const struct policy_load *load,
                                   const struct policy_request *q, int n, int64_t now,
                                   struct policy_decision *d)
{
    int *best = d->scratch, *cur = d->scratch + c->max_batch_size + 1;
    int best_n = 0, best_rows = 0;
    int64_t best_tok = 0, best_R = 1, cap = policy_token_cap(c, t);
    int64_t spt = policy_sq_per_token(t, q, n);
    /* Budgets above what the view holds add nothing when all of it fits
     * in the rows: they only exclude more for their deadlines. */
    int64_t all_tok = 0;
    int all_rows = 0;
    for (int i = 0; i < n; i++) {
        all_tok += policy_req_tokens(t, q, i);
        all_rows += q[i].rows;
    }
    int64_t R = all_rows <= c->max_batch_size && all_tok < cap ? all_tok : cap;
    while (R >= 1 && R >= best_tok) {
        int64_t late, finish = now + policy_budget_ns(lat, spt, R);
        int cn, rows;
        bool passes;
        int64_t tok = policy_fill(c, t, lat, spt, now, q, n, R, finish, cur, &cn, &rows, &late,
                                  &passes);
        int64_t low = policy_band_low(lat, spt, now, R, late);
        int64_t same_down_to = tok > low ? tok : low;
        if (tok > 0 && tok >= best_tok && !passes) {
            int *x = best;
            best = cur;
            cur = x;
            best_n = cn;
            best_rows = rows;
            best_tok = tok;
            best_R = same_down_to;
        }
        R = same_down_to - 1;
    }
    if (best_n == 0) {
        const struct latmodel *fast = load ? load->fastest : NULL;
        if (fast && fast != lat && latmodel_predict(fast, 1) < latmodel_predict(lat, 1)) {
            d->wake_ns = POLICY_NEVER;
            for (int i = 0; i < n; i++) {
                int64_t at = q[i].deadline_ns -
                             latmodel_predict_sq(fast, policy_req_tokens(t, q, i),
                                                 policy_req_sq(t, i)) + 1;
                if (q[i].deadline_ns && at < d->wake_ns)
                    d->wake_ns = at > now ? at : now + 1;
            }
            return;
        }
        d->take = 1;
        d->rows = q[0].rows;
        d->tokens = policy_req_tokens(t, q, 0);
        d->budget = cap;
        d->pick = NULL;
        return;
    }
    d->take = best_n;
    d->rows = best_rows;
    d->tokens = best_tok;
    d->budget = best_R;
    d->pick = best;
}

void policy_decide_tokens(const struct policy_config *c, const struct policy_tokens *t,
                          const struct latmodel *lat, const struct policy_load *load,
                          const struct policy_request *q, int n, int64_t now_ns,
                          struct policy_decision *d)
{
    d->take = 0;
    d->rows = 0;
    d->tokens = 0;
    d->wake_ns = POLICY_NEVER;
    d->pick = NULL;
    if (n <= 0)
        return;
    int k = 0, rows = 0, pref_k = 0, pref_rows = 0;
    int64_t tokens = 0, sq = 0, pref_tokens = 0, cap = policy_token_cap(c, t);
    int64_t oldest = POLICY_NEVER, dmin = POLICY_NEVER;
    while (k < n && rows + q[k].rows <= c->max_batch_size &&
           tokens + policy_req_tokens(t, q, k) <= cap) {
        rows += q[k].rows;
        tokens += policy_req_tokens(t, q, k);
        sq += policy_req_sq(t, k);
        if (q[k].arrival_ns < oldest)
            oldest = q[k].arrival_ns;
        if (q[k].deadline_ns && q[k].deadline_ns < dmin)
            dmin = q[k].deadline_ns;
        k++;
        for (int p = 0; p < c->npreferred; p++)
            if (rows == c->preferred[p]) {
                pref_k = k;
                pref_rows = rows;
                pref_tokens = tokens;
            }
    }
    if (k == 0) {
        /* Cannot happen for admitted requests (rows <= max_batch_size,
         * tokens <= max_batch_tokens); take the head alone rather than
         * stall the queue. */
        d->take = 1;
        d->rows = q[0].rows;
        d->tokens = policy_req_tokens(t, q, 0);
        d->budget = cap;
        return;
    }
    int deadline_aware = policy_deadline_aware(c->kind) && lat != NULL;
    int full = rows == c->max_batch_size || tokens == cap || k < n;
    int64_t due = oldest + c->max_queue_delay_ns;
    int64_t latest = POLICY_NEVER;
    if (deadline_aware && dmin != POLICY_NEVER)
        latest = dmin - latmodel_predict_sq(lat, tokens, sq) - (load ? load->wake_slack_ns : 0);
    int64_t bound = due < latest ? due : latest;
    if (c->kind == POLICY_ADAPTIVE)
        bound = policy_adaptive_until(lat, load, tokens, oldest, bound);
    int take = 0, take_rows = 0;
    int64_t take_tokens = 0;
    if (full || now_ns >= bound) {
        take = k;
        take_rows = rows;
        take_tokens = tokens;
    } else if (pref_k > 0) {
        take = pref_k;
        take_rows = pref_rows;
        take_tokens = pref_tokens;
    }
    if (take > 0) {
        if (deadline_aware && d->scratch) {
            policy_select_feasible(c, t, lat, load, q, n, now_ns, d);
        } else {
            d->take = take;
            d->rows = take_rows;
            d->tokens = take_tokens;
            d->budget = cap;
        }
        return;
    }
    d->wake_ns = bound;
}

void policy_decide(const struct policy_config *c, const struct latmodel *lat,
                   const struct policy_load *load, const struct policy_request *q, int n,
                   int64_t now_ns, struct policy_decision *d)
{
    policy_decide_tokens(c, NULL, lat, load, q, n, now_ns, d);
}

int64_t policy_wake_slack(int64_t slack_ns, int64_t late_ns)
{
    int64_t s = slack_ns - slack_ns / 16;
    if (late_ns > s)
        s = late_ns;
    if (s < POLICY_WAKE_SLACK_MIN_NS)
        return POLICY_WAKE_SLACK_MIN_NS;
    return s < POLICY_WAKE_SLACK_MAX_NS ? s : POLICY_WAKE_SLACK_MAX_NS;
}
