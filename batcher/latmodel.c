/* latmodel.c - see latmodel.h.
 *
 * The quadratic term. Attention costs about len^2 per row, the rest of an
 * encoder about len, so exec = a + b*T + c*S with T the batch's tokens and
 * S the sum of its rows' squared lengths. T and S grow together (a batch
 * of more tokens has more of both), so fitting them one after the other
 * naively would credit b with most of c. Instead, as in the Frisch-Waugh
 * theorem: fit exec ~ a1 + b1*T (the plain fit, what a model without S
 * gets), fit S ~ s0 + k*T, and fit the first fit's residual against the
 * part of S that T does not explain, x = S - s0 - k*T: its slope is c.
 * Then b = b1 - c*k, and the intercept is the median again. Each of the
 * three fits is Theil-Sen, so the whole stays robust to stalled batches.
 * "Where it shows" is a test: c is kept only when its confidence interval
 * excludes 0 (and its fit does not spread the window's batches much wider
 * than the line: LATMODEL_SQ_WORSE). Not a gain in the margin: the residual spread of mixed batches barely moves with c
 * (the linear fit already absorbs most of S), while a batch of like
 * lengths, which length grouping makes, is mispredicted without it
 * (test_tokens: 40 rows of 20 tokens, 10 of 200). */
#include "batcher/latmodel.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "common/select.h"

#define LATMODEL_PAIRS (LATMODEL_WINDOW * (LATMODEL_WINDOW - 1) / 2)
/* Batches with tokens_sq before the quadratic term is tried: fewer say
 * little about a term that is a fraction of the whole. */
#define LATMODEL_SQ_MIN 8
/* The term is kept only when the lower end of its slopes' 99% confidence
 * interval (Theil-Sen's, from Kendall's tau: Sen 1968) is above 0.
 * test_tokens measures what that leaves: the term kept by chance in about
 * 1 window in 100 of a device without one, and small when it is. */
#define LATMODEL_SQ_Z 2.576
/* A fit with the term is kept only while its residual spread (three
 * median absolute residuals, the margin it would plan with) is at most
 * this times the line's (below). */
#define LATMODEL_SQ_WORSE 1.5

void latmodel_init(struct latmodel *m)
{
    memset(m, 0, sizeof *m);
}

/* A full sort cost most of a fit (a thousand slopes at a full window,
 * through qsort's callback): medians and the bound below are selected
 * instead (common/select.h). */
SELECT_KTH_DEFINE(latmodel_select, double)

/* The median; v is reordered (latmodel_select), its lower half in v[0..n/2). */
static double latmodel_median(double *v, int n)
{
    double hi = latmodel_select(v, n, n / 2);
    if (n % 2)
        return hi;
    double lo = v[0];
    for (int i = 1; i < n / 2; i++)
        if (v[i] > lo)
            lo = v[i];
    return 0.5 * (lo + hi);
}

/* Whether every batch in the window gave its lengths (tokens_sq): a model
 * of sequences, where the fit may do what it never did for rows. */
static bool latmodel_has_lengths(const struct latmodel *m)
{
    for (int i = 0; i < m->n; i++)
        if (m->sq[i] <= 0)
            return false;
    return m->n > 0;
}

/* Three median absolute residuals of exec against a + b*T + c*S. */
static double latmodel_spread(const struct latmodel *m, double a, double b, double c)
{
    double resid[LATMODEL_WINDOW];
    for (int i = 0; i < m->n; i++)
        resid[i] = fabs((double)m->ns[i] - (a + b * m->tokens[i] + c * m->sq[i]));
    return 3.0 * latmodel_median(resid, m->n);
}

/* How many distinct token counts the window's batches have (for one-row
 * batches, their lengths). */
static int latmodel_lengths(const struct latmodel *m)
{
    int k = 0;
    for (int i = 0; i < m->n; i++) {
        int j = 0;
        while (j < i && m->tokens[j] != m->tokens[i])
            j++;
        k += j == i;
    }
    return k;
}

/* The sum of v[0..n) less its largest quarter (at least one): a stalled
 * batch, which a curve may go through exactly, does not decide a
 * comparison of fits. v is reordered. */
static double latmodel_trimmed_sum(double *v, int n)
{
    int keep = n - (n / 4 > 1 ? n / 4 : 1);
    if (keep < 1)
        return 0;
    latmodel_select(v, n, keep - 1);   /* v[0..keep) are the smallest */
    double sum = 0;
    for (int i = 0; i < keep; i++)
        sum += v[i];
    return sum;
}

/* The quadratic term (above) given the plain fit a1 + b1*T: returns c and
 * sets *a, *b; 0 (a and b untouched) when it cannot be told or does not
 * show. `slopes`: room for LATMODEL_PAIRS. */
static double latmodel_fit_sq(const struct latmodel *m, double a1, double b1, double *slopes,
                              double *a, double *b)
{
    double x[LATMODEL_WINDOW], r[LATMODEL_WINDOW];
    if (m->n < LATMODEL_SQ_MIN || !latmodel_has_lengths(m))
        return 0;
    int ns = 0;
    for (int i = 0; i < m->n; i++)
        for (int j = i + 1; j < m->n; j++)
            if (m->tokens[i] != m->tokens[j])
                slopes[ns++] = (double)(m->sq[j] - m->sq[i]) / (double)(m->tokens[j] - m->tokens[i]);
    if (ns == 0)
        return 0;
    double k = latmodel_median(slopes, ns);
    for (int i = 0; i < m->n; i++)
        x[i] = (double)m->sq[i] - k * m->tokens[i];
    double s0 = latmodel_median(memcpy(r, x, sizeof x[0] * (size_t)m->n), m->n);
    for (int i = 0; i < m->n; i++) {
        x[i] -= s0;
        r[i] = (double)m->ns[i] - (a1 + b1 * m->tokens[i]);
    }
    ns = 0;
    for (int i = 0; i < m->n; i++)
        for (int j = i + 1; j < m->n; j++)
            if (fabs(x[j] - x[i]) >= 1.0)   /* S is an integer: closer is the same S */
                slopes[ns++] = (r[j] - r[i]) / (x[j] - x[i]);
    if (ns < m->n)
        return 0;   /* the lengths barely vary: S says nothing T does not */
    double c = latmodel_median(slopes, ns);   /* the lower half left in slopes[0..ns/2) */
    double n = m->n, half = LATMODEL_SQ_Z * sqrt(n * (n - 1) * (2 * n + 5) / 18) / 2;
    int lo = (int)floor(ns / 2.0 - half);
    /* Too few slopes for the interval (a window of few lengths: the
     * warmup's four and a batch more, one row each, where k can make two
     * lengths one x): then the window must hold four lengths at least,
     * the least slope must be above 0, and the fit must at least halve
     * the plain fit's absolute residuals, summed without the largest
     * quarter (below). Dropping the term there, though every slope was c,
     * left the line through the middle lengths: 163 tokens planned 12%
     * short. Each condition is there for a window of a device without
     * the term that the others let through (the re-tests): most batches
     * of one length, every pair agreeing by chance (0.2% of noisy
     * windows; c*len^2 then planned 8 tokens 81% short, 168 tokens 6.5x
     * long); three lengths, through whose means a parabola always goes;
     * one stalled long batch, which c*len^2 went through exactly. */
    bool small = lo < 0;
    if (small) {
        if (latmodel_lengths(m) < 4)
            return 0;   /* three lengths: a parabola goes through any three means */
        lo = 0;
    }
    if (!(latmodel_select(slopes, lo < ns / 2 ? ns / 2 : ns, lo) > 0))
        return 0;
    double bq = b1 - c * k;
    if (bq < 0)
        bq = 0;
    for (int i = 0; i < m->n; i++)
        r[i] = (double)m->ns[i] - bq * m->tokens[i] - c * m->sq[i];
    double aq = latmodel_median(r, m->n);
    if (aq < 0 && bq > 0) {
        /* As the line's (latmodel_fit): batches of nearly one size (at
         * max_batch_tokens) say little about the slope, and an intercept
         * clamped at 0 shifted every batch seen (the spread veto below
         * then dropped a real term: its batches of longer rows at the cap
         * were planned short). Through the origin instead. */
        for (int i = 0; i < m->n; i++)
            r[i] = ((double)m->ns[i] - c * m->sq[i]) /
                   (double)(m->tokens[i] > 0 ? m->tokens[i] : 1);
        bq = latmodel_median(r, m->n);
        if (bq < 0)
            bq = 0;
    }
    if (aq < 0)
        aq = 0;
    /* A term whose fit spreads the window's batches much wider than the
     * line does is no term: one main length and a few leftovers (a device
     * without one, three of the leftovers stalled) passed the interval
     * with c 377 and a and b 0, every row planned 30 to 45 times long
     * and a margin of 56 ms for batches of 2.6 ms. */
    if (!(latmodel_spread(m, aq, bq, c) <= LATMODEL_SQ_WORSE * latmodel_spread(m, a1, b1, 0)))
        return 0;
    if (small) {
        double plain[LATMODEL_WINDOW], quad[LATMODEL_WINDOW];
        for (int i = 0; i < m->n; i++) {
            double e = (double)m->ns[i];
            plain[i] = fabs(e - (a1 + b1 * m->tokens[i]));
            quad[i] = fabs(e - (aq + bq * m->tokens[i] + c * m->sq[i]));
        }
        if (!(2 * latmodel_trimmed_sum(quad, m->n) <= latmodel_trimmed_sum(plain, m->n)))
            return 0;
    }
    *a = aq;
    *b = bq;
    return c;
}

void latmodel_fit(struct latmodel *m)
{
    double slopes[LATMODEL_PAIRS];
    double resid[LATMODEL_WINDOW];
    int ns = 0;
    for (int i = 0; i < m->n; i++)
        for (int j = i + 1; j < m->n; j++)
            if (m->tokens[i] != m->tokens[j])
                slopes[ns++] = (double)(m->ns[j] - m->ns[i]) / (double)(m->tokens[j] - m->tokens[i]);
    /* One batch size seen so far: keep the slope, refit the intercept. */
    double b = ns ? latmodel_median(slopes, ns) : m->b_ns;
    if (b < 0)
        b = 0;   /* a bigger batch never runs faster; noise can say otherwise */
    for (int i = 0; i < m->n; i++)
        resid[i] = (double)m->ns[i] - b * m->tokens[i];
    double a = latmodel_median(resid, m->n);
    /* The quadratic term first, from the plain fit as it came: a negative
     * intercept is what the len^2 the tokens do not explain leaves there. */
    double c = latmodel_fit_sq(m, a, b, slopes, &a, &b);
    if (c == 0) {
        /* With a >= 0, no batch runs in less than b per token: b is at
         * most the median of exec/tokens. Theil-Sen alone is robust only
         * where sizes vary: a window of one-row batches and one stalled
         * batch of 8 rows makes every pair of unlike sizes go through the
         * stalled one, and its slope (14 ms a row, for 7 us) was the
         * median; kept then as the only slope when it left the window,
         * every request with a budget was 504 for good, and no bigger
         * batch ran to correct it. Only for the plain fit: with the
         * quadratic term the plain slope holds c*len as well, which
         * exec/tokens of short batches does not (the bound, taken before
         * the quadratic fit, made it predict long batches short). */
        int nr = 0;
        for (int i = 0; i < m->n; i++)
            if (m->tokens[i] > 0)
                resid[nr++] = (double)m->ns[i] / (double)m->tokens[i];
        double most = nr ? latmodel_median(resid, nr) : b;
        if (b > most) {
            b = most;
            for (int i = 0; i < m->n; i++)
                resid[i] = (double)m->ns[i] - b * m->tokens[i];
            a = latmodel_median(resid, m->n);
        }
    }
    if (c == 0 && a < 0 && latmodel_has_lengths(m)) {
        /* The slope overshot: batches of nearly one size (all at
         * max_batch_tokens) say little about it, and a padded device's time
         * follows its longest row more than its tokens. Through the origin
         * instead, so the batches seen are predicted as they ran. */
        for (int i = 0; i < m->n; i++)
            resid[i] = (double)m->ns[i] / (double)(m->tokens[i] > 0 ? m->tokens[i] : 1);
        b = latmodel_median(resid, m->n);
    }
    if (a < 0)
        a = 0;
    m->margin_ns = latmodel_spread(m, a, b, c);
    m->a_ns = a;
    m->b_ns = b;
    m->c_ns = c;
}

bool latmodel_record(struct latmodel *m, int64_t tokens, int64_t tokens_sq, int64_t ns)
{
    m->tokens[m->next] = tokens;
    m->sq[m->next] = tokens_sq > 0 ? tokens_sq : 0;
    m->ns[m->next] = ns;
    m->next = (m->next + 1) % LATMODEL_WINDOW;
    if (m->n < LATMODEL_WINDOW)
        m->n++;
    /* A fit costs tens of microseconds (latmodel_fit): every 8 batches
     * once warm. */
    if (++m->samples_since_fit < 8 && m->n >= 16)
        return false;
    m->samples_since_fit = 0;
    m->fits_due++;
    return true;
}

void latmodel_adopt(struct latmodel *m, const struct latmodel *fitted)
{
    if (fitted->fits_due <= m->fit_adopted)
        return;
    m->fit_adopted = fitted->fits_due;
    m->a_ns = fitted->a_ns;
    m->b_ns = fitted->b_ns;
    m->c_ns = fitted->c_ns;
    m->margin_ns = fitted->margin_ns;
}

void latmodel_add_sq(struct latmodel *m, int64_t tokens, int64_t tokens_sq, int64_t ns)
{
    if (latmodel_record(m, tokens, tokens_sq, ns))
        latmodel_fit(m);
}

void latmodel_add(struct latmodel *m, int64_t tokens, int64_t ns)
{
    latmodel_add_sq(m, tokens, 0, ns);
}

int64_t latmodel_predict_sq(const struct latmodel *m, int64_t tokens, int64_t tokens_sq)
{
    return (int64_t)(m->a_ns + m->b_ns * tokens + m->c_ns * tokens_sq + m->margin_ns);
}

int64_t latmodel_predict(const struct latmodel *m, int64_t tokens)
{
    return (int64_t)(m->a_ns + m->b_ns * tokens + m->margin_ns);
}
