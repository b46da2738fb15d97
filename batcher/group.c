/* group.c - see group.h. */
#include "batcher/group.h"

#include <stdlib.h>

/* Bands of lengths tried per cut at most: each is a pass over the view,
 * under the queue's lock. */
#define GROUP_BANDS 32

/* What a padded device would spend on `rows` rows padded to `maxlen`. */
static double group_cost(const struct latmodel *lat, int rows, int64_t maxlen)
{
    double cells = (double)rows * (double)maxlen;
    if (!lat)
        return cells;
    return lat->a_ns + lat->b_ns * cells + lat->c_ns * cells * (double)maxlen;
}

/* The state of one grouping: who must go, who may fill. */
struct group {
    const struct policy_config *c;
    const struct policy_tokens *t;
    const struct policy_request *q;
    int n;
    const int *sel;                /* the policy's selection, in q's order; NULL: a prefix */
    int take;
    int anchor;                    /* the selection's first */
    int64_t finish, wait_ok;       /* this batch's planned end; a member due before
                                    * wait_ok cannot wait for the next one; 0: no deadlines */
    int64_t budget;
    int must_rows;                 /* the must-go members' */
    int64_t must_tokens;
};

static int64_t group_len(const struct group *g, int i)
{
    int len = g->t->req[i].len;
    return len > 0 ? len : 1;
}

static int64_t group_dist(const struct group *g, int i)
{
    int64_t d = group_len(g, i) - group_len(g, g->anchor);
    return d < 0 ? -d : d;
}

/* Walks q in order and says for each request whether it is in the
 * selection (*k advances through it). */
static bool group_selected(const struct group *g, int i, int *k)
{
    if (!g->sel)
        return i < g->take;
    if (*k < g->take && g->sel[*k] == i) {
        (*k)++;
        return true;
    }
    return false;
}

/* A member that goes whatever the grouping: the anchor, and those that
 * could not wait for the next batch. */
static bool group_must(const struct group *g, int i, bool selected)
{
    if (!selected)
        return false;
    return i == g->anchor ||
           (g->wait_ok && g->q[i].deadline_ns && g->q[i].deadline_ns < g->wait_ok);
}

/* A request that may fill the batch: the anchor's priority, within the
 * caps alone, and its deadline allows this batch's end. */
static bool group_candidate(const struct group *g, int i)
{
    const struct policy_request *r = &g->q[i];
    return g->t->req[i].priority == g->t->req[g->anchor].priority &&
           r->rows <= g->c->max_batch_size && policy_req_tokens(g->t, g->q, i) <= g->budget &&
           !(g->finish && r->deadline_ns && r->deadline_ns < g->finish);
}

/* The must-go members and, in q's order, the candidates within `band` of
 * the anchor's length that fit, into out (NULL: only count); returns how
 * many, with their rows, tokens and longest row. */
static int group_fill(const struct group *g, int64_t band, int *out, int *rows, int64_t *tokens,
                      int64_t *maxlen)
{
    int m = 0, r = g->must_rows, k = 0;
    int64_t tok = g->must_tokens, ml = 0;
    for (int i = 0; i < g->n; i++) {
        bool take = group_must(g, i, group_selected(g, i, &k));
        if (!take && group_candidate(g, i) && group_dist(g, i) <= band) {
            int ti = policy_req_tokens(g->t, g->q, i);
            take = r + g->q[i].rows <= g->c->max_batch_size && tok + ti <= g->budget;
            if (take) {
                r += g->q[i].rows;
                tok += ti;
            }
        }
        if (!take)
            continue;
        if (out)
            out[m] = i;
        m++;
        if (group_len(g, i) > ml)
            ml = group_len(g, i);
    }
    *rows = r;
    *tokens = tok;
    *maxlen = ml;
    return m;
}

static int group_cmp_int(const void *x, const void *y)
{
    int a = *(const int *)x, b = *(const int *)y;
    return (a > b) - (a < b);
}

/* The bands worth trying, into work (room for n): the candidates' distinct
 * distances from the anchor's length, ascending, thinned to GROUP_BANDS
 * spread evenly (the narrowest and the widest kept). Returns how many. */
static int group_bands(const struct group *g, int *work)
{
    int m = 0;
    for (int i = 0; i < g->n; i++)
        if (group_candidate(g, i))
            work[m++] = (int)group_dist(g, i);
    qsort(work, (size_t)m, sizeof *work, group_cmp_int);
    int u = 0;
    for (int i = 0; i < m; i++)
        if (u == 0 || work[i] != work[u - 1])
            work[u++] = work[i];
    if (u <= GROUP_BANDS)
        return u;
    for (int k = 0; k < GROUP_BANDS; k++)
        work[k] = work[(int)((int64_t)k * (u - 1) / (GROUP_BANDS - 1))];
    return GROUP_BANDS;
}

void group_by_length(const struct policy_config *c, const struct policy_tokens *t,
                     const struct latmodel *lat, bool deadlines, const struct policy_request *q,
                     int n, int64_t now_ns, struct policy_decision *d, int *work)
{
    if (d->take <= 0 || !d->scratch || d->tokens <= 0)
        return;
    int *out = d->pick == d->scratch ? d->scratch + c->max_batch_size + 1 : d->scratch;
    struct group g = {.c = c, .t = t, .q = q, .n = n, .sel = d->pick, .take = d->take,
                      .budget = d->budget};
    g.anchor = g.sel ? g.sel[0] : 0;
    int64_t old_len = 0;
    for (int j = 0; j < d->take; j++) {
        int i = g.sel ? g.sel[j] : j;
        if (t->req[i].priority != t->req[g.anchor].priority)
            return;   /* a mixed selection: trading members could cross priorities */
        if (group_len(&g, i) > old_len)
            old_len = group_len(&g, i);
    }
    /* An anchor behind the service order's best priority (an aged request
     * of a lower one) goes first, but filling after it with its own
     * priority would pass over better ones that could join. */
    for (int i = 0; i < n; i++)
        if (t->req[i].priority < t->req[g.anchor].priority)
            return;
    if (deadlines && lat) {
        int64_t spt = policy_sq_per_token(t, q, n);
        g.finish = now_ns + policy_budget_ns(lat, spt, g.budget);
        g.wait_ok = g.finish + policy_budget_ns(lat, spt, policy_token_cap(c, t));
    }
    for (int i = 0, k = 0; i < n; i++)
        if (group_must(&g, i, group_selected(&g, i, &k))) {
            g.must_rows += q[i].rows;
            g.must_tokens += policy_req_tokens(t, q, i);
        }
    /* Each band of lengths around the anchor's, narrowest first, against
     * the policy's selection: the cheapest per token on a padded device
     * wins (a wider band amortizes the setup over more tokens, and pads
     * more). */
    double best = group_cost(lat, d->rows, old_len) / (double)d->tokens;
    int64_t best_band = -1;
    int nbands = group_bands(&g, work);
    for (int b = 0; b < nbands; b++) {
        int64_t band = work[b];
        int rows;
        int64_t tok, maxlen;
        group_fill(&g, band, NULL, &rows, &tok, &maxlen);
        if (tok > 0 && group_cost(lat, rows, maxlen) / (double)tok < best) {
            best = group_cost(lat, rows, maxlen) / (double)tok;
            best_band = band;
        }
    }
    if (best_band < 0)
        return;
    int rows;
    int64_t tok, maxlen;
    d->take = group_fill(&g, best_band, out, &rows, &tok, &maxlen);
    d->rows = rows;
    d->tokens = tok;
    d->pick = out;
}
