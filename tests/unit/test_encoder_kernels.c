/* test_encoder_kernels.c - the encoder's CPU kernels (layernorm.h,
 * attention.h, embed.h, pool.h) against float64 references written here, on
 * fresh random data with odd sizes, on every kernel path this CPU runs.
 *
 * Every run draws new data from a seed taken from the clock (BG_TEST_SEED=N
 * replays one; failures name it). Outputs are filled with NaN before each
 * call, and NaN guards around (and between, for strided outputs) the written
 * region must still be NaN after it. Tolerances are first-order rounding
 * bounds derived next to each check, in units of u = 2^-24 (F32's unit
 * roundoff), computed per element from the same double reference. The GELU
 * the FFN uses is dense.h's, checked in test_kernels.c. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <math.h>

#include "kernels/attention.h"
#include "kernels/dtype.h"
#include "kernels/embed.h"
#include "kernels/kernels.h"
#include "kernels/layernorm.h"
#include "kernels/pool.h"
#include "tests/unit/seeded.h"

#define U 0x1p-24
#define GUARD 37


static int isa_list(enum kernels_isa *out)
{
    int n = 0;
    out[n++] = KERNELS_ISA_GENERIC;
    if (kernels_isa_supported(KERNELS_ISA_AVX2))
        out[n++] = KERNELS_ISA_AVX2;
    if (kernels_isa_supported(KERNELS_ISA_AVX512))
        out[n++] = KERNELS_ISA_AVX512;
    return n;
}

/* n floats with GUARD NaNs on each side; returns the inner pointer. */
static float *guarded(size_t n)
{
    float *p = malloc((n + 2 * GUARD) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i < n + 2 * GUARD; i++)
        p[i] = NAN;
    return p + GUARD;
}

static void guarded_free(float *p) { free(p - GUARD); }

static void check_guards(const float *p, size_t n, const char *what)
{
    for (int i = 1; i <= GUARD; i++)
        if (!isnan(p[-i]) || !isnan(p[n - 1 + (size_t)i]))
            FAIL("%s: wrote outside its output", what);
}

static void fill(struct rng *rg, float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = rng_uniform(rg, lo, hi);
}

/* ---- layernorm ---- */

/* The reference in double. Rounding bound for y (first order): the F32
 * residual add is exact to u|t|; the mean is a sum of dim terms in at most
 * dim/VW + VW + 2 <= dim/4 + 18 sequential additions per term (2 vector
 * accumulators, a horizontal sum, the tail), so |dmean| <= (dim/4 + 18) u
 * max|t|; the variance is a sum of non-negative terms, relative error
 * (dim/4 + 20) u, so rstd's relative error is half that plus the sqrt and
 * division (2u); the output adds 4 roundings. Per element:
 *   |y - ref| <= |gamma| rstd (|dmean| + u|t_i|) + |gamma xhat| (dim/8 + 12) u
 *                + 4u (|gamma xhat| + |beta|)
 * checked with a factor 2 on top. */
static void ln_check(const float *x, const float *r, const float *g, const float *b, float eps,
                     const float *y, int rows, int dim, const char *what)
{
    for (int i = 0; i < rows; i++) {
        const size_t o = (size_t)i * (size_t)dim;
        double mean = 0, var = 0, tmax = 0;
        for (int c = 0; c < dim; c++) {
            double t = (double)(float)(x[o + c] + (r ? r[o + c] : 0.0f));
            mean += t;
            tmax = fmax(tmax, fabs(t));
        }
        mean /= dim;
        for (int c = 0; c < dim; c++) {
            double t = (double)(float)(x[o + c] + (r ? r[o + c] : 0.0f)) - mean;
            var += t * t;
        }
        var /= dim;
        const double rstd = 1 / sqrt(var + eps);
        for (int c = 0; c < dim; c++) {
            double t = (double)(float)(x[o + c] + (r ? r[o + c] : 0.0f));
            double xh = (t - mean) * rstd, bb = b ? b[c] : 0;
            double ref = xh * g[c] + bb;
            double tol = 2 * (fabs(g[c]) * rstd * ((dim / 4.0 + 19) * U * tmax + U * fabs(t)) +
                              fabs(g[c] * xh) * (dim / 8.0 + 12) * U +
                              4 * U * (fabs(g[c] * xh) + fabs(bb)));
            if (!(fabs(y[o + c] - ref) <= tol))
                FAIL("%s: row %d col %d = %.9g, reference %.9g (tolerance %.3g)", what, i, c,
                     y[o + c], ref, tol);
        }
    }
}

static void test_layernorm_random(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    static const int dims[] = {1, 3, 7, 16, 33, 384, 385};
    static const int rowss[] = {1, 5};
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (size_t ri = 0; ri < 2; ri++)
            for (int variant = 0; variant < 6; variant++) {
                /* variant: bit 0 residual, bit 1 beta; 4, 5: in place into x / r */
                const int dim = dims[di], rows = rowss[ri];
                const size_t n = (size_t)rows * (size_t)dim;
                const int res = variant & 1 || variant >= 4, beta = variant & 2 || variant >= 4;
                float *x = malloc(n * sizeof *x), *r = malloc(n * sizeof *r);
                float *g = malloc((size_t)dim * sizeof *g), *b = malloc((size_t)dim * sizeof *b);
                float *xw = guarded(n), *rw = guarded(n), *y = guarded(n);
                assert_true(x && r && g && b);
                /* an offset so the mean is not ~0, as real hidden states */
                float off = rng_uniform(&rg, -4, 4);
                fill(&rg, x, n, off - 3, off + 3);
                fill(&rg, r, n, -1, 1);
                fill(&rg, g, (size_t)dim, -2, 2);
                fill(&rg, b, (size_t)dim, -1, 1);
                for (int ii = 0; ii < nisa; ii++) {
                    char what[128];
                    snprintf(what, sizeof what, "layernorm %s dim %d rows %d variant %d",
                             kernels_isa_name(isas[ii]), dim, rows, variant);
                    memcpy(xw, x, n * sizeof *x);
                    memcpy(rw, r, n * sizeof *r);
                    float *out = variant == 4 ? xw : variant == 5 ? rw : y;
                    if (out == y)
                        for (size_t i = 0; i < n; i++)
                            y[i] = NAN;
                    assert_int_equal(layernorm_rows_isa(isas[ii], xw, res ? rw : NULL, g,
                                                        beta ? b : NULL, 1e-12f, out, rows, dim),
                                     0);
                    ln_check(x, res ? r : NULL, g, beta ? b : NULL, 1e-12f, out, rows, dim, what);
                    check_guards(out, n, what);
                    if (out != xw && memcmp(xw, x, n * sizeof *x))
                        FAIL("%s: changed its input x", what);
                    if (out != rw && memcmp(rw, r, n * sizeof *r))
                        FAIL("%s: changed its input r", what);
                }
                free(x);
                free(r);
                free(g);
                free(b);
                guarded_free(xw);
                guarded_free(rw);
                guarded_free(y);
            }
}

/* dim 1 gives beta (x - mean is exactly 0), large offsets do not lose the
 * variance (two passes, not E[x^2] - E[x]^2), NaN poisons only its row. */
static void test_layernorm_edges(void **state)
{
    (void)state;
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    for (int ii = 0; ii < nisa; ii++) {
        const char *isa = kernels_isa_name(isas[ii]);
        float x1 = 1e20f, g1 = 3, b1 = 0.5f, y1 = 0;
        assert_int_equal(layernorm_rows_isa(isas[ii], &x1, NULL, &g1, &b1, 1e-12f, &y1, 1, 1), 0);
        if (y1 != 0.5f)
            FAIL("%s: LN of one element = %g, want beta", isa, y1);
        /* 1e4 + {-1, 1, -1, 1, ...}: mean 1e4, variance 1; E[x^2]-E[x]^2 in F32 would give 0 */
        float x[32], g[32], y[64];
        for (int i = 0; i < 32; i++) {
            x[i] = 1e4f + (i & 1 ? 1.0f : -1.0f);
            g[i] = 1;
        }
        assert_int_equal(layernorm_rows_isa(isas[ii], x, NULL, g, NULL, 1e-12f, y, 1, 32), 0);
        for (int i = 0; i < 32; i++)
            if (fabsf(y[i] - (i & 1 ? 1.0f : -1.0f)) > 1e-6f)
                FAIL("%s: offset row: y[%d] = %.9g", isa, i, y[i]);
        float xx[64], gg[32];
        for (int i = 0; i < 64; i++)
            xx[i] = (float)(i % 7);
        for (int i = 0; i < 32; i++)
            gg[i] = 1;
        xx[5] = NAN;
        assert_int_equal(layernorm_rows_isa(isas[ii], xx, NULL, gg, NULL, 1e-5f, y, 2, 32), 0);
        for (int i = 0; i < 64; i++)
            if ((i < 32) != (isnan(y[i]) != 0))
                FAIL("%s: NaN row: y[%d] = %g", isa, i, y[i]);
    }
    float x = 1, g = 1, y = 7;
    layernorm_rows(&x, NULL, &g, NULL, 1e-12f, &y, 0, 1);
    assert_true(y == 7);
}

/* ---- attention ---- */

struct att_case {
    int heads, head_dim;
    int fused;          /* q, k, v as column slices of one [total][3*hidden] buffer */
    int out_pad;        /* ld_out = hidden + out_pad: the gap columns stay NaN */
    float qscale;       /* q in [-qscale, qscale]: larger makes the softmax peaky */
    int nseq;
    int lens[8];
};

struct att_data {
    float *buf[3];      /* the allocations (buf[1], buf[2] NULL when fused) */
    struct attention_args a;
    int cu[9];
    int total, hidden, longest;
};

static void att_make(struct rng *rg, const struct att_case *tc, int first_row, struct att_data *d)
{
    memset(d, 0, sizeof *d);
    d->hidden = tc->heads * tc->head_dim;
    d->cu[0] = first_row;   /* offsets need not start at 0 */
    for (int s = 0; s < tc->nseq; s++) {
        d->cu[s + 1] = d->cu[s] + tc->lens[s];
        d->longest = tc->lens[s] > d->longest ? tc->lens[s] : d->longest;
    }
    d->total = d->cu[tc->nseq];
    const size_t h = (size_t)d->hidden, rows = (size_t)d->total;
    if (tc->fused) {
        d->buf[0] = malloc(rows * 3 * h * sizeof(float));
        assert_non_null(d->buf[0]);
        fill(rg, d->buf[0], rows * 3 * h, -1, 1);
        for (size_t i = 0; i < rows; i++)
            for (size_t c = 0; c < h; c++)
                d->buf[0][i * 3 * h + c] *= tc->qscale;
        d->a.q = d->buf[0];
        d->a.k = d->buf[0] + h;
        d->a.v = d->buf[0] + 2 * h;
        d->a.ld_in = 3 * h;
    } else {
        for (int b = 0; b < 3; b++) {
            d->buf[b] = malloc((rows * h + 1) * sizeof(float));
            assert_non_null(d->buf[b]);
            fill(rg, d->buf[b], rows * h + 1, b == 0 ? -tc->qscale : -1, b == 0 ? tc->qscale : 1);
        }
        d->a.q = d->buf[0];
        d->a.k = d->buf[1];
        d->a.v = d->buf[2];
        d->a.ld_in = h;
    }
    d->a.ld_out = h + (size_t)tc->out_pad;
    d->a.cu_seqlens = d->cu;
    d->a.nseq = tc->nseq;
    d->a.heads = tc->heads;
    d->a.head_dim = tc->head_dim;
}

static void att_free(struct att_data *d)
{
    for (int b = 0; b < 3; b++)
        free(d->buf[b]);
}

/* The reference in double, and its rounding bound (first order). A score is
 * an FMA chain over head_dim products, then scaled by the rounded
 * 1/sqrt(head_dim): |ds_j| <= (head_dim + 4) u S_j, S_j = sum |q k| /
 * sqrt(head_dim). A weight p_j = e^(s_j - max) / sum then has relative error
 * <= 2 max|ds| (its own score and the maximum's) + 4u (exp) + (L/8 + 20) u
 * (the sum: two vector accumulators and a horizontal sum) + 2u (1/sum and
 * its product). The output sums L products p_j v_j in order: L u sum p_j|v_j|.
 * So |o - ref| <= sum_j p_j |v_j| (2 max|ds| + (L + L/8 + 30) u), checked
 * with a factor 2 on top. */
static void att_check(const struct att_data *d, const float *out, const char *what)
{
    const struct attention_args *a = &d->a;
    const int hd = a->head_dim;
    double *s = malloc((size_t)d->longest * 2 * sizeof *s + 1);
    assert_non_null(s);
    double *sa = s + d->longest;
    for (int q = 0; q < a->nseq; q++) {
        const int r0 = a->cu_seqlens[q], len = a->cu_seqlens[q + 1] - r0;
        for (int h = 0; h < a->heads; h++)
            for (int i = r0; i < r0 + len; i++) {
                const float *qi = a->q + (size_t)i * a->ld_in + (size_t)h * hd;
                double mx = -INFINITY, sum = 0, dsmax = 0;
                for (int j = 0; j < len; j++) {
                    const float *kj = a->k + (size_t)(r0 + j) * a->ld_in + (size_t)h * hd;
                    double dot = 0, adot = 0;
                    for (int c = 0; c < hd; c++) {
                        dot += (double)qi[c] * kj[c];
                        adot += fabs((double)qi[c] * kj[c]);
                    }
                    s[j] = dot / sqrt(hd);
                    sa[j] = adot / sqrt(hd);
                    mx = fmax(mx, s[j]);
                    dsmax = fmax(dsmax, (hd + 4) * U * sa[j]);
                }
                for (int j = 0; j < len; j++) {
                    s[j] = exp(s[j] - mx);
                    sum += s[j];
                }
                for (int c = 0; c < hd; c++) {
                    double ref = 0, mag = 0;
                    for (int j = 0; j < len; j++) {
                        double v = a->v[(size_t)(r0 + j) * a->ld_in + (size_t)h * hd + c];
                        ref += s[j] / sum * v;
                        mag += s[j] / sum * fabs(v);
                    }
                    double tol = 2 * mag * (2 * dsmax + (len + len / 8.0 + 30) * U);
                    float got = out[(size_t)i * a->ld_out + (size_t)h * hd + c];
                    if (!(fabs(got - ref) <= tol))
                        FAIL("%s: row %d head %d col %d = %.9g, reference %.9g (tolerance %.3g)",
                             what, i, h, c, got, ref, tol);
                }
            }
    }
    /* the gap columns of a strided output stay untouched */
    for (int i = d->cu[0]; i < d->total; i++)
        for (size_t c = (size_t)d->hidden; c < a->ld_out; c++)
            if (!isnan(out[(size_t)i * a->ld_out + c]))
                FAIL("%s: wrote column %zu past hidden in row %d", what, c, i);
    free(s);
}

static const struct att_case att_cases[] = {
    {1, 32, 0, 0, 1, 1, {1}},
    {1, 32, 0, 3, 1, 1, {2}},
    {12, 32, 1, 0, 1, 1, {7}},
    {12, 32, 0, 0, 1, 1, {64}},
    {1, 64, 0, 0, 4, 1, {130}},
    {12, 32, 0, 5, 1, 1, {256}},
    {2, 64, 1, 0, 1, 1, {256}},
    {12, 32, 1, 2, 2, 6, {5, 1, 130, 7, 64, 2}},
    {12, 64, 0, 0, 1, 5, {3, 33, 0, 17, 9}},
    {3, 5, 0, 1, 1, 4, {1, 6, 31, 2}},     /* head_dim % VW: the scalar columns */
    {2, 24, 1, 0, 1, 3, {9, 40, 4}},       /* 24 = 16 + 8: one vector, then the tail */
    {1, 1, 0, 0, 1, 2, {5, 70}},
};

static void test_attention_random(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    for (size_t ci = 0; ci < sizeof att_cases / sizeof *att_cases; ci++) {
        const struct att_case *tc = &att_cases[ci];
        struct att_data d;
        att_make(&rg, tc, (int)(ci % 3), &d);
        const size_t nout = (size_t)d.total * d.a.ld_out;
        float *out = guarded(nout);
        size_t ns = attention_scratch_floats(d.longest, tc->head_dim);
        float *scratch = malloc((ns + 1) * sizeof *scratch);
        assert_non_null(scratch);
        d.a.out = out;
        for (int ii = 0; ii < nisa; ii++) {
            char what[160];
            snprintf(what, sizeof what, "attention %s case %zu (heads %d head_dim %d, %d seqs)",
                     kernels_isa_name(isas[ii]), ci, tc->heads, tc->head_dim, tc->nseq);
            for (size_t i = 0; i < nout; i++)
                out[i] = NAN;
            if (attention_varlen_isa(isas[ii], &d.a, scratch, ns) != 0)
                FAIL("%s: returned an error", what);
            att_check(&d, out, what);
            check_guards(out, nout, what);
        }
        guarded_free(out);
        free(scratch);
        att_free(&d);
    }
}

/* A sequence gets the same bits alone as in any batch, at any position. */
static void test_attention_batch_invariance(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    const struct att_case batch = {12, 32, 0, 0, 2, 4, {7, 130, 1, 64}};
    struct att_data d;
    att_make(&rg, &batch, 0, &d);
    const size_t h = (size_t)d.hidden;
    float *out = malloc((size_t)d.total * h * sizeof *out);
    float *alone = malloc((size_t)d.total * h * sizeof *alone);
    size_t ns = attention_scratch_floats(d.longest, 32);
    float *scratch = malloc(ns * sizeof *scratch);
    assert_true(out && alone && scratch);
    for (int ii = 0; ii < nisa; ii++) {
        d.a.out = out;
        d.a.cu_seqlens = d.cu;
        d.a.nseq = batch.nseq;
        assert_int_equal(attention_varlen_isa(isas[ii], &d.a, scratch, ns), 0);
        for (int s = 0; s < batch.nseq; s++) {
            d.a.out = alone;
            d.a.cu_seqlens = d.cu + s;   /* the one sequence, at its rows */
            d.a.nseq = 1;
            assert_int_equal(attention_varlen_isa(isas[ii], &d.a, scratch, ns), 0);
            size_t off = (size_t)d.cu[s] * h, n = (size_t)(d.cu[s + 1] - d.cu[s]) * h;
            if (memcmp(out + off, alone + off, n * sizeof *out))
                FAIL("%s: sequence %d differs alone and in the batch", kernels_isa_name(isas[ii]),
                     s);
        }
    }
    free(out);
    free(alone);
    free(scratch);
    att_free(&d);
}

struct att_thread {
    const struct attention_args *a;
    float *out;
    int rc;
};

static void *att_thread_main(void *p)
{
    struct att_thread *t = p;
    struct attention_args a = *t->a;
    a.out = t->out;
    size_t ns = attention_scratch_floats(256, a.head_dim);
    float *scratch = malloc(ns * sizeof *scratch);
    t->rc = -1;
    for (int rep = 0; scratch && rep < 3; rep++)
        t->rc = attention_varlen(&a, scratch, ns);
    free(scratch);
    return NULL;
}

/* Threads running at once on their own outputs and scratch get the bits of a
 * single run (no shared state). */
static void test_attention_threads(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    const struct att_case tc = {12, 32, 1, 0, 1, 5, {256, 7, 130, 1, 64}};
    struct att_data d;
    att_make(&rg, &tc, 0, &d);
    const size_t n = (size_t)d.total * d.a.ld_out;
    enum { T = 4 };
    float *outs[T + 1];
    struct att_thread th[T + 1];
    pthread_t tid[T];
    for (int t = 0; t <= T; t++) {
        outs[t] = malloc(n * sizeof(float));
        assert_non_null(outs[t]);
        th[t] = (struct att_thread){&d.a, outs[t], -1};
    }
    att_thread_main(&th[T]);
    for (int t = 0; t < T; t++)
        assert_int_equal(pthread_create(&tid[t], NULL, att_thread_main, &th[t]), 0);
    for (int t = 0; t < T; t++) {
        pthread_join(tid[t], NULL);
        assert_int_equal(th[t].rc, 0);
        if (memcmp(outs[t], outs[T], n * sizeof(float)))
            FAIL("thread %d got other bits than a single run", t);
    }
    for (int t = 0; t <= T; t++)
        free(outs[t]);
    att_free(&d);
}

/* Refusals write nothing; empty batches and sequences are fine. */
static void test_attention_api(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    const struct att_case tc = {2, 32, 0, 0, 1, 3, {3, 0, 40}};
    struct att_data d;
    att_make(&rg, &tc, 0, &d);
    const size_t n = (size_t)d.total * d.a.ld_out;
    float *out = guarded(n);
    d.a.out = out;
    size_t ns = attention_scratch_floats(40, 32);
    assert_true(ns == (32 + 4) * 64);
    assert_true(attention_scratch_floats(0, 32) == 0);
    float *scratch = malloc(ns * sizeof *scratch);
    assert_non_null(scratch);
    assert_int_equal(attention_varlen(&d.a, scratch, ns - 1), -1);
    struct attention_args bad = d.a;
    bad.ld_in = (size_t)d.hidden - 1;
    assert_int_equal(attention_varlen(&bad, scratch, ns), -1);
    bad = d.a;
    bad.heads = 0;
    assert_int_equal(attention_varlen(&bad, scratch, ns), -1);
    int cu_bad[] = {0, 5, 3, 8};
    bad = d.a;
    bad.cu_seqlens = cu_bad;
    assert_int_equal(attention_varlen(&bad, scratch, ns), -1);
    assert_int_equal(attention_varlen(NULL, scratch, ns), -1);
    for (size_t i = 0; i < n; i++)
        if (!isnan(out[i]))
            FAIL("a refused call wrote element %zu", i);
    bad = d.a;
    bad.nseq = 0;
    assert_int_equal(attention_varlen(&bad, NULL, 0), 0);
    int cu_empty[] = {3, 3};
    bad.cu_seqlens = cu_empty;
    bad.nseq = 1;
    assert_int_equal(attention_varlen(&bad, NULL, 0), 0);
    for (int isa = KERNELS_ISA_AVX2; isa <= KERNELS_ISA_AVX512; isa++)
        if (!kernels_isa_supported((enum kernels_isa)isa))
            assert_int_equal(attention_varlen_isa((enum kernels_isa)isa, &d.a, scratch, ns), -1);
    assert_int_equal(attention_varlen(&d.a, scratch, ns), 0);
    check_guards(out, n, "attention api");
    guarded_free(out);
    free(scratch);
    att_free(&d);
}

/* ---- embeddings ---- */

/* A table of random values stored as dt at an odd address (as inside an
 * mmap'ed file); vals gets the values the table holds, widened. */
static unsigned char *emb_table(struct rng *rg, int rows, int hidden, enum dtype dt, float *vals,
                                struct embed_table *t)
{
    const size_t n = (size_t)rows * (size_t)hidden, es = dtype_size(dt);
    unsigned char *mem = malloc(n * es + 3);
    assert_non_null(mem);
    unsigned char *p = mem + 1 + (size_t)(rows % 2);
    for (size_t i = 0; i < n; i++) {
        float f = rng_uniform(rg, -2, 2);
        if (dt == DTYPE_F32) {
            memcpy(p + i * 4, &f, 4);
        } else {
            uint16_t h = dt == DTYPE_F16 ? dtype_f32_to_f16(f) : dtype_f32_to_bf16(f);
            memcpy(p + i * 2, &h, 2);
            f = dt == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
        }
        vals[i] = f;
    }
    *t = (struct embed_table){p, dt, rows};
    return mem;
}

static void test_embed(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    static const int hiddens[] = {1, 3, 384, 385};
    static const enum dtype dts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    enum { VOCAB = 57, POS = 12, TYPES = 2, NSEQ = 6 };
    const int lens[NSEQ] = {1, 7, 0, 12, 2, 5};
    int cu[NSEQ + 1] = {2};   /* the rows start at 2 */
    for (int s = 0; s < NSEQ; s++)
        cu[s + 1] = cu[s] + lens[s];
    const int total = cu[NSEQ];
    int32_t ids[64], tids[64];
    for (int t = 0; t < total; t++) {
        ids[t] = (int32_t)(rng_next(&rg) % VOCAB);
        tids[t] = (int32_t)(rng_next(&rg) % TYPES);
    }
    for (size_t hi = 0; hi < 4; hi++)
        for (size_t di = 0; di < 3; di++)
            for (int variant = 0; variant < 3; variant++) {
                /* 0: all three tables; 1: type_ids NULL (type 0); 2: no pos, no type */
                const int hidden = hiddens[hi];
                float *wv = malloc((size_t)VOCAB * hidden * sizeof *wv);
                float *pv = malloc((size_t)POS * hidden * sizeof *pv);
                float *tv = malloc((size_t)TYPES * hidden * sizeof *tv);
                assert_true(wv && pv && tv);
                struct embed_table w, p, ty;
                unsigned char *m1 = emb_table(&rg, VOCAB, hidden, dts[di], wv, &w);
                unsigned char *m2 = emb_table(&rg, POS, hidden, dts[(di + 1) % 3], pv, &p);
                unsigned char *m3 = emb_table(&rg, TYPES, hidden, dts[(di + 2) % 3], tv, &ty);
                const size_t n = (size_t)total * hidden;
                float *out = guarded(n);
                char msg[160], what[96];
                snprintf(what, sizeof what, "embed hidden %d %s variant %d", hidden,
                         dtype_name(dts[di]), variant);
                if (embed_sum(&w, variant == 2 ? NULL : &p, variant == 2 ? NULL : &ty, hidden, ids,
                              variant == 1 ? NULL : tids, cu, NSEQ, out, msg, sizeof msg) != 0)
                    FAIL("%s: %s", what, msg);
                for (int s = 0; s < NSEQ; s++)
                    for (int t = cu[s]; t < cu[s + 1]; t++)
                        for (int c = 0; c < hidden; c++) {
                            double a = wv[(size_t)ids[t] * hidden + c], b = 0, e = 0;
                            if (variant != 2) {
                                b = pv[(size_t)(t - cu[s]) * hidden + c];
                                e = tv[(size_t)(variant == 1 ? 0 : tids[t]) * hidden + c];
                            }
                            /* two F32 additions of exact values: 2u of the magnitudes */
                            double ref = a + b + e, tol = 2 * U * (fabs(a) + fabs(b) + fabs(e));
                            float got = out[(size_t)t * hidden + c];
                            if (!(fabs(got - ref) <= tol))
                                FAIL("%s: row %d col %d = %.9g, want %.9g", what, t, c, got, ref);
                        }
                /* rows before cu[0] are not the call's */
                for (size_t i = 0; i < (size_t)cu[0] * hidden; i++)
                    if (!isnan(out[i]))
                        FAIL("%s: wrote row %zu before the first sequence", what, i / hidden);
                check_guards(out, n, what);
                free(m1);
                free(m2);
                free(m3);
                free(wv);
                free(pv);
                free(tv);
                guarded_free(out);
            }

    /* bad ids, types and lengths are refused before anything is written */
    float tab[4 * 2] = {0}, out[16];
    struct embed_table w = {tab, DTYPE_F32, 4}, p = {tab, DTYPE_F32, 3}, t = {tab, DTYPE_F32, 2};
    int32_t bad_ids[] = {1, 4}, ok_ids[] = {1, 2, 3, 0}, bad_t[] = {0, 2, 0, 0};
    int cu2[] = {0, 2}, cu4[] = {0, 4}, cudec[] = {0, 2, 1};
    char msg[160];
    for (int i = 0; i < 16; i++)
        out[i] = NAN;
    assert_int_equal(embed_sum(&w, &p, &t, 2, bad_ids, NULL, cu2, 1, out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "vocabulary"));
    assert_int_equal(embed_sum(&w, &p, &t, 2, ok_ids, bad_t, cu4, 1, out, msg, sizeof msg), -1);
    assert_int_equal(embed_sum(&w, &p, &t, 2, ok_ids, NULL, cu4, 1, out, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "position"));
    assert_int_equal(embed_sum(&w, &p, &t, 2, ok_ids, NULL, cudec, 2, out, msg, sizeof msg), -1);
    assert_int_equal(embed_sum(&w, &p, &t, 0, ok_ids, NULL, cu2, 1, out, msg, sizeof msg), -1);
    for (int i = 0; i < 16; i++)
        if (!isnan(out[i]))
            FAIL("a refused embed_sum wrote element %d", i);
}

/* ---- pooling ---- */

static void test_pool(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    static const int hiddens[] = {1, 3, 384, 385};
    enum { NSEQ = 7 };
    const int lens[NSEQ] = {1, 2, 0, 7, 64, 256, 3};
    int cu[NSEQ + 1] = {1};
    for (int s = 0; s < NSEQ; s++)
        cu[s + 1] = cu[s] + lens[s];
    for (size_t hi = 0; hi < 4; hi++) {
        const int hidden = hiddens[hi];
        const size_t ldx = (size_t)hidden + (hi & 1) * 3;
        float *x = malloc((size_t)cu[NSEQ] * ldx * sizeof *x);
        assert_non_null(x);
        fill(&rg, x, (size_t)cu[NSEQ] * ldx, -1, 3);
        for (int mode = POOL_MEAN; mode <= POOL_MAX; mode++)
            for (unsigned flags = 0; flags <= POOL_L2; flags++) {
                const size_t n = (size_t)NSEQ * hidden;
                float *out = guarded(n);
                char what[64];
                snprintf(what, sizeof what, "pool mode %d flags %u hidden %d", mode, flags, hidden);
                assert_int_equal(pool_rows((enum pool_mode)mode, flags, x, ldx, hidden, cu, NSEQ, out), 0);
                check_guards(out, n, what);
                for (int s = 0; s < NSEQ; s++) {
                    const int len = lens[s];
                    const float *xs = x + (size_t)cu[s] * ldx;
                    double ref[385], err[385], norm = 0, enorm = 0;
                    for (int c = 0; c < hidden; c++) {
                        double v = 0, mag = 0;
                        for (int t = 0; t < len; t++) {
                            double e = xs[(size_t)t * ldx + c];
                            if (mode == POOL_MEAN) {
                                v += e;
                                mag += fabs(e);
                            } else if (mode == POOL_MAX) {
                                v = t == 0 ? e : fmax(v, e);
                            } else if (t == 0) {
                                v = e;
                            }
                        }
                        /* mean: len sequential F32 additions and a division,
                         * (len + 1) u of the mean magnitude; cls, max: exact */
                        ref[c] = mode == POOL_MEAN && len ? v / len : v;
                        err[c] = mode == POOL_MEAN && len ? (len + 1) * U * mag / len : 0;
                        norm += ref[c] * ref[c];
                        enorm += err[c] * err[c];
                    }
                    norm = sqrt(norm);
                    enorm = sqrt(enorm);
                    for (int c = 0; c < hidden; c++) {
                        double want = ref[c], tol = err[c];
                        if (flags & POOL_L2) {
                            /* y = p/||p||: the pooled error over the norm, the
                             * norm's own error, and 3u for the scaling */
                            double nn = fmax(norm, 1e-12);
                            want = ref[c] / nn;
                            tol = (err[c] + fabs(want) * enorm) / nn + 3 * U * fabs(want);
                        }
                        float got = out[(size_t)s * hidden + c];
                        if (!(fabs(got - want) <= 2 * tol))
                            FAIL("%s: seq %d col %d = %.9g, want %.9g", what, s, c, got, want);
                    }
                }
                guarded_free(out);
            }
        free(x);
    }
    /* L2 of a zero vector stays zero (the norm is clamped); NaN wins max */
    float z[3] = {0, 0, 0}, xn[4] = {1, NAN, 2, 5}, o[2];
    pool_l2_normalize(z, 1, 3);
    assert_true(z[0] == 0 && z[1] == 0 && z[2] == 0);
    int cu1[] = {0, 2};
    assert_int_equal(pool_rows(POOL_MAX, 0, xn, 2, 2, cu1, 1, o), 0);
    assert_true(isnan(o[1]) && o[0] == 2);
    int cud[] = {0, 2, 1};
    assert_int_equal(pool_rows(POOL_MEAN, 0, xn, 2, 2, cud, 2, o), -1);
    assert_int_equal(pool_rows((enum pool_mode)9, 0, xn, 2, 2, cu1, 1, o), -1);
    enum pool_mode m;
    assert_int_equal(pool_mode_parse("cls", &m), 0);
    assert_int_equal(m, POOL_CLS);
    assert_int_equal(pool_mode_parse("avg", &m), -1);
}

int main(void)
{
    seeded_init();
    print_message("test_encoder_kernels: seed %llu (BG_TEST_SEED=%llu replays it); kernel paths: "
                  "generic%s%s\n",
                  g_seed, g_seed, kernels_isa_supported(KERNELS_ISA_AVX2) ? ", avx2" : "",
                  kernels_isa_supported(KERNELS_ISA_AVX512) ? ", avx512" : "");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_random),   cmocka_unit_test(test_layernorm_edges),
        cmocka_unit_test(test_attention_random),   cmocka_unit_test(test_attention_batch_invariance),
        cmocka_unit_test(test_attention_threads),  cmocka_unit_test(test_attention_api),
        cmocka_unit_test(test_embed),              cmocka_unit_test(test_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
