/* latmodel.c - see latmodel.h. */
#include "batcher/latmodel.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void latmodel_init(struct latmodel *m)
{
    memset(m, 0, sizeof *m);
}

static int latmodel_cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double latmodel_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, latmodel_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void latmodel_fit(struct latmodel *m)
{
    static const int max_pairs = LATMODEL_WINDOW * (LATMODEL_WINDOW - 1) / 2;
    double slopes[LATMODEL_WINDOW * (LATMODEL_WINDOW - 1) / 2];
    double resid[LATMODEL_WINDOW];
    int ns = 0;
    for (int i = 0; i < m->n; i++)
        for (int j = i + 1; j < m->n && ns < max_pairs; j++)
            if (m->rows[i] != m->rows[j])
                slopes[ns++] = (double)(m->ns[j] - m->ns[i]) / (double)(m->rows[j] - m->rows[i]);
    /* One batch size seen so far: keep the slope, refit the intercept. */
    double b = ns ? latmodel_median(slopes, ns) : m->b_ns;
    if (b < 0)
        b = 0;   /* a bigger batch never runs faster; noise can say otherwise */
    for (int i = 0; i < m->n; i++)
        resid[i] = (double)m->ns[i] - b * m->rows[i];
    double a = latmodel_median(resid, m->n);
    if (a < 0)
        a = 0;
    for (int i = 0; i < m->n; i++)
        resid[i] = fabs((double)m->ns[i] - (a + b * m->rows[i]));
    m->margin_ns = 3.0 * latmodel_median(resid, m->n);
    m->a_ns = a;
    m->b_ns = b;
    m->samples_since_fit = 0;
}

void latmodel_add(struct latmodel *m, int rows, int64_t ns)
{
    m->rows[m->next] = rows;
    m->ns[m->next] = ns;
    m->next = (m->next + 1) % LATMODEL_WINDOW;
    if (m->n < LATMODEL_WINDOW)
        m->n++;
    /* The fit costs ~50 us at a full window: refit every 8 batches once warm. */
    if (++m->samples_since_fit >= 8 || m->n < 16)
        latmodel_fit(m);
}

int64_t latmodel_predict(const struct latmodel *m, int rows)
{
    return (int64_t)(m->a_ns + m->b_ns * rows + m->margin_ns);
}
