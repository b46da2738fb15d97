/* guard.c - see guard.h. */
#include "batcher/guard.h"

#include <string.h>

void guard_init(struct guard *g)
{
    memset(g, 0, sizeof *g);
    pthread_mutex_init(&g->mu, NULL);
}

void guard_destroy(struct guard *g)
{
    pthread_mutex_destroy(&g->mu);
}

/* The k-th smallest of v[0..n) (Hoare's selection, expected O(n)): the fit
 * needs one quantile, not the order of the whole window. */
static int64_t guard_select_kth(int64_t *v, int n, int k)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t pivot = v[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                int64_t t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return v[k];
}

/* The GUARD_QUANTILE of the overruns younger than GUARD_MAX_AGE_NS: a few
 * microseconds for a full window, at most every GUARD_REFIT_EVERY answers
 * or GUARD_REFIT_NS. Under g->mu. */
static void guard_fit(struct guard *g, int64_t now_ns)
{
    int64_t v[GUARD_WINDOW];
    int k = 0;
    for (int i = 0; i < g->n; i++)
        if (now_ns - g->at[i] <= GUARD_MAX_AGE_NS)
            v[k++] = g->over[i];
    int64_t value = 0;
    if (k >= GUARD_MIN_SAMPLES) {
        int64_t q = guard_select_kth(v, k, (int)(GUARD_QUANTILE * (k - 1) + 0.5));
        if (q > 0)
            value = q;
    }
    atomic_store_explicit(&g->value, value, memory_order_relaxed);
    atomic_store_explicit(&g->fit_ns, now_ns, memory_order_relaxed);
    g->since_fit = 0;
}

void guard_add(struct guard *g, int64_t now_ns, int64_t overrun_ns)
{
    pthread_mutex_lock(&g->mu);
    g->at[g->next] = now_ns;
    g->over[g->next] = overrun_ns;
    g->next = (g->next + 1) % GUARD_WINDOW;
    if (g->n < GUARD_WINDOW)
        g->n++;
    if (++g->since_fit >= GUARD_REFIT_EVERY)
        guard_fit(g, now_ns);
    pthread_mutex_unlock(&g->mu);
}

int64_t guard_value(struct guard *g, int64_t now_ns)
{
    /* Stale (old overruns must age out even when no answer comes): refit,
     * unless an IO thread is adding right now; the next call will. */
    if (now_ns - atomic_load_explicit(&g->fit_ns, memory_order_relaxed) >= GUARD_REFIT_NS &&
        pthread_mutex_trylock(&g->mu) == 0) {
        if (g->n > 0)
            guard_fit(g, now_ns);
        else
            atomic_store_explicit(&g->fit_ns, now_ns, memory_order_relaxed);
        pthread_mutex_unlock(&g->mu);
    }
    return atomic_load_explicit(&g->value, memory_order_relaxed);
}
