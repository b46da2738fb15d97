/* guard.c - see guard.h. */
#include "guard.h"

#include <stdlib.h>
#include <string.h>

void guard_init(struct guard *g)
{
    memset(g, 0, sizeof *g);
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The GUARD_QUANTILE of the overruns younger than GUARD_MAX_AGE_NS. A
 * window of 1024 sorts in ~30 us; it runs at most every GUARD_REFIT_EVERY
 * answers or GUARD_REFIT_NS. */
static void guard_fit(struct guard *g, int64_t now_ns)
{
    int64_t v[GUARD_WINDOW];
    int k = 0;
    for (int i = 0; i < g->n; i++)
        if (now_ns - g->at[i] <= GUARD_MAX_AGE_NS)
            v[k++] = g->over[i];
    g->value = 0;
    if (k >= GUARD_MIN_SAMPLES) {
        qsort(v, (size_t)k, sizeof *v, cmp_i64);
        int idx = (int)(GUARD_QUANTILE * (k - 1) + 0.5);
        if (v[idx] > 0)
            g->value = v[idx];
    }
    g->fit_ns = now_ns;
    g->since_fit = 0;
}

void guard_add(struct guard *g, int64_t now_ns, int64_t overrun_ns)
{
    g->at[g->next] = now_ns;
    g->over[g->next] = overrun_ns;
    g->next = (g->next + 1) % GUARD_WINDOW;
    if (g->n < GUARD_WINDOW)
        g->n++;
    if (++g->since_fit >= GUARD_REFIT_EVERY)
        guard_fit(g, now_ns);
}

int64_t guard_value(struct guard *g, int64_t now_ns)
{
    if (g->n > 0 && now_ns - g->fit_ns >= GUARD_REFIT_NS)
        guard_fit(g, now_ns);
    return g->value;
}
