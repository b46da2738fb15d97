/* latmodel.h - an instance's execution time as a function of batch rows,
 * exec(rows) ~= a + b*rows, fitted online from measured batches.
 *
 * The fit is Theil-Sen (the median of pairwise slopes, then the median
 * intercept) over the last LATMODEL_WINDOW batches: a few stalled batches
 * (a page fault, a noisy neighbour) do not move it, unlike least squares.
 * Predictions add a margin of three median absolute residuals so the
 * deadline rule errs on the side of dispatching early. The warmup batches
 * at load (several sizes) give the first fit. Not thread-safe: the batcher
 * guards it with its queue lock. */
#ifndef BG_LATMODEL_H
#define BG_LATMODEL_H

#include <stdint.h>

#define LATMODEL_WINDOW 48

struct latmodel {
    int rows[LATMODEL_WINDOW];
    int64_t ns[LATMODEL_WINDOW];
    int n, next;                 /* ring buffer of samples */
    double a_ns, b_ns;           /* the current fit */
    double margin_ns;            /* 3 x median absolute residual */
    int samples_since_fit;
};

void latmodel_init(struct latmodel *m);
/* Records one batch; refits every few samples (and always while few). */
void latmodel_add(struct latmodel *m, int rows, int64_t ns);
/* Predicted execution time of a batch of `rows`, margin included. */
int64_t latmodel_predict(const struct latmodel *m, int rows);

#endif
