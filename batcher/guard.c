/* guard.c - see guard.h. */
#include "batcher/guard.h"

#include <stdbool.h>
#include <string.h>

#include "common/select.h"

void guard_init(struct guard *g)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
}

void guard_destroy(struct guard *g)
{
    pthread_mutex_destroy(&g->mu);
}

/* The fit needs one quantile, not the order of the whole bucket. */
SELECT_KTH_DEFINE(guard_select_kth, int64_t)

/* The guard from the closed buckets younger than GUARD_MAX_AGE_NS: the
 * lower median of GUARD_BUCKETS quantiles, a bucket not there (none yet,
 * or aged out) counting as no overrun, so that three buckets must show a
 * delay; 0 below GUARD_MIN_SAMPLES. The median of the buckets there alone
 * was the one stalled bucket of a fresh server's first second: one 0.8 s
 * stall refused every request with a budget under it for 8 s (the
 * batcher's white-box audit). Under g->mu. */
static void guard_fit(struct guard *g, int64_t now_ns)
{
    int64_t q[GUARD_BUCKETS];
    int samples = 0;
    for (int i = 0; i < GUARD_BUCKETS; i++) {
        const struct guard_bucket *bk = &g->closed[i];
        bool fresh = bk->closed_ns && now_ns - bk->closed_ns <= GUARD_MAX_AGE_NS;
        q[i] = fresh ? bk->q : 0;
        samples += fresh ? bk->n : 0;
    }
    int64_t value = 0;
    if (samples >= GUARD_MIN_SAMPLES) {
        int64_t m = guard_select_kth(q, GUARD_BUCKETS, (GUARD_BUCKETS - 1) / 2);
        if (m > 0)
            value = m;
    }
    atomic_store_explicit(&g->value, value, memory_order_relaxed);
    atomic_store_explicit(&g->fit_ns, now_ns, memory_order_relaxed);
}

/* Closes the open bucket at now_ns: its quantile joins the closed ones (a
 * few microseconds for a full bucket, once per GUARD_BUCKET_NS at most).
 * Under g->mu. */
static void guard_close(struct guard *g, int64_t now_ns)
{
    int64_t v[GUARD_BUCKET_CAP];
    memcpy(v, g->over, (size_t)g->n * sizeof *v);
    g->last = (g->last + 1) % GUARD_BUCKETS;
    struct guard_bucket *bk = &g->closed[g->last];
    bk->closed_ns = now_ns;
    bk->q = guard_select_kth(v, g->n, (int)(GUARD_QUANTILE * (g->n - 1) + 0.5));
    bk->n = g->seen;
    g->n = g->next = g->seen = 0;
    guard_fit(g, now_ns);
}

void guard_add(struct guard *g, int64_t now_ns, int64_t overrun_ns)
{
    pthread_mutex_lock(&g->mu);
    if (g->seen == 0)
        g->opened_ns = now_ns;
    g->over[g->next] = overrun_ns;
    g->next = (g->next + 1) % GUARD_BUCKET_CAP;
    if (g->n < GUARD_BUCKET_CAP)
        g->n++;
    g->seen++;
    if (g->seen >= GUARD_BUCKET_MIN && now_ns - g->opened_ns >= GUARD_BUCKET_NS)
        guard_close(g, now_ns);
    pthread_mutex_unlock(&g->mu);
}

int64_t guard_value(struct guard *g, int64_t now_ns)
{
    /* Stale (old buckets must age out even when no answer comes): refit,
     * unless an IO thread is adding right now; the next call will. */
    if (now_ns - atomic_load_explicit(&g->fit_ns, memory_order_relaxed) >= GUARD_REFIT_NS &&
        pthread_mutex_trylock(&g->mu) == 0) {
        guard_fit(g, now_ns);
        pthread_mutex_unlock(&g->mu);
    }
    return atomic_load_explicit(&g->value, memory_order_relaxed);
}
