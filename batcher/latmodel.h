/* latmodel.h - an instance's execution time as a function of a batch's
 * work, exec ~= a + b*tokens (+ c*tokens_sq), fitted online from measured
 * batches.
 *
 * `tokens` are the batch's work units (work.h: work_tokens), which are its
 * rows for every model that is not sequence-shaped, so for those the model
 * is exec(rows) = a + b*rows as it always was. `tokens_sq` is the sum of
 * the squared sequence lengths of the batch's rows (attention's quadratic
 * term), 0 when not given.
 *
 * The fit is Theil-Sen (the median of pairwise slopes, then the median
 * intercept) over the last LATMODEL_WINDOW batches: a few stalled batches
 * (a page fault, a noisy neighbour) do not move it, unlike least squares.
 * The quadratic term is fitted only when every batch in the window gave
 * tokens_sq, after the linear one, on what the tokens do not explain
 * (latmodel.c), and kept only when its slopes' confidence interval
 * excludes 0: where attention's share is lost in the noise, c stays 0.
 * Predictions add a
 * margin of three median absolute residuals so the deadline rule errs on
 * the side of dispatching early. The warmup batches at load (several
 * sizes) give the first fit. Not thread-safe: the batcher guards it with
 * its queue lock, and fits outside it: latmodel_record says a fit is due,
 * the caller fits a copy of the model unlocked (latmodel_fit) and installs
 * the result under the lock again (latmodel_adopt), so the tens of
 * microseconds of a fit never hold up a submission. */
#ifndef BG_LATMODEL_H
#define BG_LATMODEL_H

#include <stdbool.h>
#include <stdint.h>

#define LATMODEL_WINDOW 48

struct latmodel {
    int64_t tokens[LATMODEL_WINDOW];
    int64_t sq[LATMODEL_WINDOW];     /* tokens_sq; 0: not given */
    int64_t ns[LATMODEL_WINDOW];
    int n, next;                 /* ring buffer of samples */
    double a_ns, b_ns;           /* the current fit */
    double c_ns;                 /* per unit of tokens_sq; 0 unless it showed */
    double margin_ns;            /* 3 x median absolute residual */
    int samples_since_fit;
    uint64_t fits_due;           /* fits latmodel_record asked for; a copy's
                                    count names the fit made from it */
    uint64_t fit_adopted;        /* which of them the current fit is */
};

void latmodel_init(struct latmodel *m);
/* Records one batch of `tokens` work units (rows for a model without
 * tokens); refits every few samples (and always while few). */
void latmodel_add(struct latmodel *m, int64_t tokens, int64_t ns);
/* The same with the batch's tokens_sq (0: not given). */
void latmodel_add_sq(struct latmodel *m, int64_t tokens, int64_t tokens_sq, int64_t ns);
/* The two halves of latmodel_add_sq for a model shared under a lock:
 * records the batch and returns true when a refit is due. Then fit a copy
 * of *m (taken under the lock, after this call) with latmodel_fit and hand
 * it to latmodel_adopt under the lock again. */
bool latmodel_record(struct latmodel *m, int64_t tokens, int64_t tokens_sq, int64_t ns);
/* Refits m from its samples (~14 us at a full window, 43 with the
 * quadratic term, on a 2-core EPYC). */
void latmodel_fit(struct latmodel *m);
/* Takes the fit of `fitted` (a copy of m fitted meanwhile) into m, its
 * samples untouched; ignored when m already holds a later fit (two copies
 * fitted at once, the older one finishing last). */
void latmodel_adopt(struct latmodel *m, const struct latmodel *fitted);
/* Predicted execution time of a batch of `tokens`, margin included. */
int64_t latmodel_predict(const struct latmodel *m, int64_t tokens);
/* ... and of tokens_sq (0: the quadratic term left out). */
int64_t latmodel_predict_sq(const struct latmodel *m, int64_t tokens, int64_t tokens_sq);

#endif
