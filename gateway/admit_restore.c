/* admit_restore.c - the token quotas' count carried over a restart, from
 * the usage ledger (admit.h, admit_restore_ledger).
 *
 * The ledger already holds what the quotas count: a pool's rows are its
 * calls' tokens, per tenant, minute and class (docs/USAGE.md). Reading it
 * back at start keeps one record of the tokens instead of two, and what a
 * crash loses is what the ledger loses (its last flush_s seconds). */
#include "gateway/admit.h"

#include <limits.h>
#include <string.h>

struct admit_restore {
    struct admit *a;
    const struct tenants_config *tc;
    admit_counted_fn counted;
    void *arg;
    int64_t now_ns, unix_s;
    int64_t rows;                     /* ledger rows carried over */
};

static void admit_restore_row(const struct state_usage_row *r, void *arg)
{
    struct admit_restore *ar = arg;
    /* Batch lines (offline) take idle capacity and are not charged. */
    if (r->rows <= 0 || strcmp(r->cls, "online") != 0)
        return;
    int t = tenants_find(ar->tc, r->tenant);
    if (t < 0 || !admit_has_token_quota(ar->a, t) || !ar->counted(r->model, ar->arg))
        return;
    /* The minute's last token came in its last second at the latest (its
     * end is the next minute's start: yesterday's last minute ended today). */
    int64_t last = r->start + 59 < ar->unix_s ? r->start + 59 : ar->unix_s;
    admit_tokens_restore(ar->a, t, r->rows, ar->unix_s - last, ar->now_ns, ar->unix_s);
    ar->rows++;
}

int admit_restore_ledger(struct admit *a, const struct tenants_config *tc, struct state *st,
                         admit_counted_fn counted, void *arg, int64_t now_ns, int64_t unix_s,
                         struct error *err)
{
    bool any = false;
    for (int i = 0; i < tc->n; i++)
        any |= admit_has_token_quota(a, i);
    if (!any)
        return 0;
    struct admit_restore ar = {a, tc, counted, arg, now_ns, unix_s, 0};
    int64_t midnight = unix_s - unix_s % 86400;
    /* Minute rows (kept a day at least) from midnight to the current one,
     * and the last two minutes' at least: a restart just after midnight
     * read none of them, and the minute's quota began empty (yesterday's
     * rows count in the minute, not in today's count: admit_tokens_restore). */
    int64_t from = unix_s - 120 - unix_s % 60;
    if (from > midnight)
        from = midnight;
    int rc = state_usage_query(st, from, unix_s + 60, 60,
                               STATE_USAGE_BY_TENANT | STATE_USAGE_BY_MODEL | STATE_USAGE_BY_CLASS,
                               NULL, admit_restore_row, &ar, err);
    return rc < 0 ? rc : (int)(ar.rows < INT_MAX ? ar.rows : INT_MAX);
}
