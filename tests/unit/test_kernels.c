/* test_kernels.c - the CPU kernels (dense, softmax) against float64
 * references on fresh random data, and dtype.h's conversions exhaustively.
 *
 * Every run draws new data from a seed taken from the clock (or from
 * BG_TEST_SEED=N to replay one); every failure message names the seed.
 * Outputs are poisoned with NaN before each call and guarded past their end.
 * Every kernel path this CPU runs (kernels_isa_supported) is tested.
 *
 * Over 700 lines because it is one binary per module (tests/CMakeLists.txt):
 * every kernel (dense in each dtype and ISA, softmax, the activations) is
 * checked here against its float64 reference, case by small case.
 */
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

#include "kernels/dense.h"
#include "kernels/dtype.h"
#include "kernels/kernels.h"
#include "kernels/softmax.h"
#include "tests/unit/seeded.h"

static int verbose;                 /* BG_TEST_VERBOSE: print measured error bounds */

/* ---- dtype.h ---- */

static int f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }
static int bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu); }

/* The value of a half from its fields, independently of dtype.h. */
static double f16_value(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return h & 0x8000 ? -v : v;
}

static double bf16_value(uint16_t h)
{
    int e = (h >> 7) & 0xff, m = h & 0x7f;
    double v = e == 0 ? ldexp(m, -133) : e == 255 ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 134);
    return h & 0x8000 ? -v : v;
}

static void test_f16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = dtype_f16_to_f32(h);
        double want = f16_value(h);
        if (f16_is_nan(h)) {
            if (!isnan(f) || !f16_is_nan(dtype_f32_to_f16(f)))
                FAIL("f16 NaN 0x%04x -> %g -> 0x%04x is not NaN", h, f, dtype_f32_to_f16(f));
            continue;
        }
        if ((double)f != want || !!signbit(f) != !!(h & 0x8000))
            FAIL("f16 0x%04x -> %.9g, want %.9g", h, f, want);
        if (dtype_f32_to_f16(f) != h)
            FAIL("f16 0x%04x -> %.9g -> 0x%04x", h, f, dtype_f32_to_f16(f));
    }
}

static void test_bf16_exhaustive(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = dtype_bf16_to_f32(h);
        double want = bf16_value(h);
        if (bf16_is_nan(h)) {
            if (!isnan(f) || !bf16_is_nan(dtype_f32_to_bf16(f)))
                FAIL("bf16 NaN 0x%04x -> %g -> 0x%04x is not NaN", h, f, dtype_f32_to_bf16(f));
            continue;
        }
        if ((double)f != want || !!signbit(f) != !!(h & 0x8000))
            FAIL("bf16 0x%04x -> %.9g, want %.9g", h, f, want);
        if (dtype_f32_to_bf16(f) != h)
            FAIL("bf16 0x%04x -> %.9g -> 0x%04x", h, f, dtype_f32_to_bf16(f));
    }
}

/* For every pair of adjacent non-negative finite halves (and the largest one
 * with infinity), the F32 midpoint must round to the even one and the F32
 * values either side of it to the nearer one. Midpoints need one bit more
 * than the half, so they are exact in F32. This covers every tie, subnormals,
 * the rounding to zero below the smallest subnormal and the overflow to inf;
 * the sign is checked on the negated values. */
static void check_rne(const char *name, uint16_t maxfin, double (*value)(uint16_t),
                      uint16_t (*to_half)(float))
{
    for (uint32_t i = 0; i < maxfin + 1u; i++) {
        uint16_t lo = (uint16_t)i, hi = (uint16_t)(i + 1);   /* maxfin + 1 is +inf */
        double vlo = value(lo), vhi = i == maxfin ? 2 * value(maxfin) - value(maxfin - 1) : value(hi);
        float mid = (float)((vlo + vhi) / 2);
        if ((double)mid != (vlo + vhi) / 2)
            FAIL("%s: midpoint of 0x%04x not exact in F32", name, lo);
        uint16_t even = (lo & 1) ? hi : lo;
        struct { float f; uint16_t want; } cases[] = {
            {mid, even}, {nextafterf(mid, 0.0f), lo}, {nextafterf(mid, INFINITY), hi}};
        for (size_t c = 0; c < 3; c++) {
            uint16_t got = to_half(cases[c].f), got_neg = to_half(-cases[c].f);
            if (got != cases[c].want || got_neg != (cases[c].want | 0x8000))
                FAIL("%s(%.10g) = 0x%04x, -%.10g -> 0x%04x; want 0x%04x (between 0x%04x and 0x%04x)",
                     name, cases[c].f, got, cases[c].f, got_neg, cases[c].want, lo, hi);
        }
    }
}

static uint16_t to_f16(float f) { return dtype_f32_to_f16(f); }
static uint16_t to_bf16(float f) { return dtype_f32_to_bf16(f); }

static void test_half_rounding(void **state)
{
    (void)state;
    check_rne("f32_to_f16", 0x7bff, f16_value, to_f16);
    check_rne("f32_to_bf16", 0x7f7f, bf16_value, to_bf16);
    /* A few by hand, so a failure above has a readable twin. */
    struct { float f; uint16_t h; } f16[] = {
        {1.0f + 0x1p-11f, 0x3c00},          /* tie: down to even */
        {1.0f + 3 * 0x1p-11f, 0x3c02},      /* tie: up to even */
        {65504.0f, 0x7bff},  {65519.996f, 0x7bff}, {65520.0f, 0x7c00},
        {0x1p-24f, 0x0001},  {0x1p-25f, 0x0000},   {3 * 0x1p-25f, 0x0002},
        {1023.5f * 0x1p-24f, 0x0400},       /* largest subnormal + half: to the smallest normal */
        {-0.0f, 0x8000},     {INFINITY, 0x7c00},   {-INFINITY, 0xfc00},
    };
    for (size_t i = 0; i < sizeof f16 / sizeof f16[0]; i++)
        if (dtype_f32_to_f16(f16[i].f) != f16[i].h)
            FAIL("f32_to_f16(%a) = 0x%04x, want 0x%04x", f16[i].f, dtype_f32_to_f16(f16[i].f),
                 f16[i].h);
    struct { float f; uint16_t h; } bf[] = {
        {1.0f + 0x1p-8f, 0x3f80}, {1.0f + 3 * 0x1p-8f, 0x3f82}, {0x1p-133f, 0x0001},
        {0x1p-134f, 0x0000},      {INFINITY, 0x7f80},
    };
    for (size_t i = 0; i < sizeof bf / sizeof bf[0]; i++)
        if (dtype_f32_to_bf16(bf[i].f) != bf[i].h)
            FAIL("f32_to_bf16(%a) = 0x%04x, want 0x%04x", bf[i].f, dtype_f32_to_bf16(bf[i].f),
                 bf[i].h);
    if (!f16_is_nan(dtype_f32_to_f16(NAN)) || !bf16_is_nan(dtype_f32_to_bf16(NAN)))
        FAIL("NaN does not stay NaN");
}

/* ---- references ---- */

static double act_ref(enum dense_act act, double z)
{
    switch (act) {
    case DENSE_ACT_NONE: return z;
    case DENSE_ACT_RELU: return z > 0 || isnan(z) ? z : 0;
    case DENSE_ACT_GELU: return 0.5 * z * erfc(-z / sqrt(2.0));   /* = 0.5 z (1 + erf(z/sqrt2)) */
    case DENSE_ACT_TANH: return tanh(z);
    case DENSE_ACT_SIGMOID: return 1 / (1 + exp(-z));
    }
    return NAN;
}

static const enum dense_act all_acts[] = {DENSE_ACT_NONE, DENSE_ACT_RELU, DENSE_ACT_GELU,
                                          DENSE_ACT_TANH, DENSE_ACT_SIGMOID};
static const enum dtype all_dtypes[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};

/* The ISA paths to test: every one this CPU runs. */
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

/* Packs F32 values as dtype dt at a deliberately odd address (offset 1..3),
 * as a tensor inside an mmap'ed safetensors file may be. Returns the
 * allocation; *data is the odd pointer. Also stores the dequantized values. */
static unsigned char *pack_odd(const float *v, size_t n, enum dtype dt, size_t offset, void **data,
                               float *deq)
{
    unsigned char *buf = malloc(n * 4 + 8);
    assert_non_null(buf);
    unsigned char *p = buf + offset;
    for (size_t i = 0; i < n; i++) {
        if (dt == DTYPE_F32) {
            memcpy(p + i * 4, &v[i], 4);
            deq[i] = v[i];
        } else {
            uint16_t h = dt == DTYPE_F16 ? dtype_f32_to_f16(v[i]) : dtype_f32_to_bf16(v[i]);
            memcpy(p + i * 2, &h, 2);
            deq[i] = dt == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
        }
    }
    *data = p;
    return buf;
}

/* z[r][o] = sum_i x[r][i] w[o][i] in double, 4 partial sums for speed.
 * abs (may be NULL) gets sum_i |x w|, the scale of the rounding error bound. */
static void matmul_ref(const float *x, const float *w, int rows, int in, int out, double *z,
                       double *abs)
{
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            const float *xr = x + (size_t)r * in, *wo = w + (size_t)o * in;
            double s[4] = {0}, a[4] = {0};
            int i = 0;
            for (; i + 4 <= in; i += 4)
                for (int j = 0; j < 4; j++) {
                    double p = (double)xr[i + j] * wo[i + j];
                    s[j] += p;
                    a[j] += fabs(p);
                }
            for (; i < in; i++) {
                double p = (double)xr[i] * wo[i];
                s[0] += p;
                a[0] += fabs(p);
            }
            z[(size_t)r * out + o] = (s[0] + s[1]) + (s[2] + s[3]);
            if (abs)
                abs[(size_t)r * out + o] = (a[0] + a[1]) + (a[2] + a[3]);
        }
}

/* ---- dense ---- */

#define GUARD 37    /* floats past the end of y that must stay untouched */
static const float guard_value = 1234.5f;

struct shape {
    int rows, in, out;
};

/* Runs d on x and checks every output:
 *   against ref (same weights as the kernel, dequantized) within
 *     1e-5 * max(1, |ref|)
 *   (with nn.Linear-scaled weights the sums are O(1); the F32 rounding of a
 *   sum blocked by 128-256 stays near 1e-7; the worst seen over many seeds
 *   is 2e-6);
 *   for halves also against ref0 (the original F32 weights) within
 *     L * (u * S + s * X) + 1e-5 * max(1, |ref0|)
 *   where S = sum_i |x_i w_i|, X = sum_i |x_i|, u is the format's unit
 *   roundoff (2^-11 F16, 2^-8 BF16: a rounded weight is within u |w| of the
 *   original), s = 2^-25 covers F16 subnormals (absolute error instead),
 *   and L = 1.13 bounds the slope of every activation (gelu's maximum is
 *   1.129). This is the worst case, not a statistical guess. */
static double check_dense(const struct dense_cpu *d, const float *x, struct shape sh,
                          enum dense_act act, const double *z, const double *z0,
                          const double *sabs, const double *xabs, const float *bias,
                          enum dtype dt, float *y, const char *what)
{
    double worst = 0;
    size_t n = (size_t)sh.rows * sh.out;
    for (size_t i = 0; i < n; i++)
        y[i] = NAN;
    for (size_t i = n; i < n + GUARD; i++)
        y[i] = guard_value;
    dense_cpu_run(d, x, sh.rows, y);
    double u = dt == DTYPE_F16 ? 0x1p-11 : dt == DTYPE_BF16 ? 0x1p-8 : 0;
    double s = dt == DTYPE_F16 ? 0x1p-25 : 0;
    for (int r = 0; r < sh.rows; r++)
        for (int o = 0; o < sh.out; o++) {
            size_t k = (size_t)r * sh.out + o;
            double b = bias ? bias[o] : 0;
            double ref = act_ref(act, z[k] + b);
            double err = fabs(y[k] - ref) / fmax(1, fabs(ref));
            worst = fmax(worst, err);
            if (!(err <= 1e-5))
                FAIL("%s: y[%d][%d] = %.9g, reference %.9g (relative error %.3g > 1e-5)", what, r,
                     o, y[k], ref, err);
            if (dt != DTYPE_F32) {
                double ref0 = act_ref(act, z0[k] + b);
                double tol = 1.13 * (u * sabs[k] + s * xabs[r]) + 1e-5 * fmax(1, fabs(ref0));
                if (!(fabs(y[k] - ref0) <= tol))
                    FAIL("%s: y[%d][%d] = %.9g, F32-weight reference %.9g (error %.3g > %s bound "
                         "%.3g)", what, r, o, y[k], ref0, fabs(y[k] - ref0), dtype_name(dt), tol);
            }
        }
    for (size_t i = n; i < n + GUARD; i++)
        if (y[i] != guard_value)
            FAIL("%s: wrote past the end of y (element %zu of %zu)", what, i, n);
    return worst;
}

/* One shape: every dtype, bias or not, every ISA; every activation when the
 * shape is small, a rotating one otherwise (activations have their own test). */
static void dense_case(struct rng *rg, struct shape sh)
{
    const size_t nx = (size_t)sh.rows * sh.in, nw = (size_t)sh.in * sh.out;
    const size_t ny = (size_t)sh.rows * sh.out;
    float *x = malloc(nx * sizeof *x), *w = malloc(nw * sizeof *w), *wq = malloc(nw * sizeof *wq);
    float *b = malloc(sh.out * sizeof *b), *bq = malloc(sh.out * sizeof *bq);
    float *y = malloc((ny + GUARD) * sizeof *y);
    double *z0 = malloc(ny * sizeof *z0), *z = malloc(ny * sizeof *z);
    double *sabs = malloc(ny * sizeof *sabs), *xabs = malloc(sh.rows * sizeof *xabs);
    assert_true(x && w && wq && b && bq && y && z0 && z && sabs && xabs);
    /* nn.Linear's initialisation scale, so sums stay O(1) whatever in is (as in
     * a trained layer) and the activations see their interesting range. */
    const float ws = 1.0f / sqrtf((float)sh.in);
    for (size_t i = 0; i < nx; i++)
        x[i] = rng_uniform(rg, -2, 2);
    for (size_t i = 0; i < nw; i++)
        w[i] = rng_uniform(rg, -ws, ws);
    for (int i = 0; i < sh.out; i++)
        b[i] = rng_uniform(rg, -1, 1);
    for (int r = 0; r < sh.rows; r++) {
        xabs[r] = 0;
        for (int i = 0; i < sh.in; i++)
            xabs[r] += fabs(x[(size_t)r * sh.in + i]);
    }
    matmul_ref(x, w, sh.rows, sh.in, sh.out, z0, sabs);
    const int small = (double)sh.rows * sh.in * sh.out < 50000;
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    int turn = (int)(rng_next(rg) % 5);     /* large shapes: which activation first */
    double worst = 0;
    for (size_t t = 0; t < 3; t++) {
        const enum dtype dt = all_dtypes[t];
        void *wdata, *bdata;
        unsigned char *wbuf = pack_odd(w, nw, dt, 1 + t, &wdata, wq);
        unsigned char *bbuf = pack_odd(b, (size_t)sh.out, dt, 3 - t, &bdata, bq);
        if (dt == DTYPE_F32)
            memcpy(z, z0, ny * sizeof *z);
        else
            matmul_ref(x, wq, sh.rows, sh.in, sh.out, z, NULL);
        for (int withb = 0; withb < 2; withb++)
            for (int ii = 0; ii < nisa; ii++)
                for (size_t a = 0; a < 5; a++) {
                    if (!small && a != (size_t)(turn % 5))
                        continue;
                    const enum dense_act act = all_acts[a];
                    char what[160], msg[256] = "";
                    snprintf(what, sizeof what, "dense %s rows %d in %d out %d %s %s %s bias",
                             kernels_isa_name(isas[ii]), sh.rows, sh.in, sh.out, dtype_name(dt),
                             dense_act_name(act), withb ? "with" : "no");
                    struct dense_cpu *d = NULL;
                    if (dense_cpu_prepare_isa(isas[ii], wdata, dt, withb ? bdata : NULL, dt,
                                              sh.out, sh.in, act, &d, msg, sizeof msg) < 0)
                        FAIL("%s: prepare failed: %s", what, msg);
                    assert_int_equal(dense_cpu_isa(d), isas[ii]);
                    worst = fmax(worst, check_dense(d, x, sh, act, z, z0, sabs, xabs,
                                                    withb ? bq : NULL, dt, y, what));
                    dense_cpu_free(d);
                }
        turn++;
        free(wbuf);
        free(bbuf);
    }
    if (verbose)
        print_message("dense rows %d in %d out %d: worst relative error %.3g\n", sh.rows, sh.in,
                      sh.out, worst);
    free(x), free(w), free(wq), free(b), free(bq), free(y), free(z0), free(z), free(sabs);
    free(xabs);
}

static void test_dense_small(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    static const struct shape shapes[] = {
        {1, 1, 1},  {2, 1, 1},   {1, 3, 7},   {3, 7, 1},   {3, 7, 7},   {5, 17, 33},
        {17, 33, 17}, {7, 16, 16}, {6, 5, 32}, {13, 9, 31}, {4, 40, 3},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        dense_case(&rg, shapes[i]);
}

static void test_dense_large(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    /* Past one k-block (256) and one panel (16), with partial ones left over;
     * rows 1 (matrix-vector), 5, 64, 127 (uneven row tiles). */
    static const struct shape shapes[] = {
        {1, 1000, 1003}, {5, 1001, 999}, {64, 1000, 64}, {64, 257, 1000},
        {127, 1000, 130}, {127, 130, 1001}, {2, 256, 16}, {8, 512, 48},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        dense_case(&rg, shapes[i]);
}

/* A row's result must not depend on the batch it runs in (a gateway batches
 * requests as they come): each row alone, and in sub-batches of other sizes,
 * gives the same bits as the whole batch. */
static void test_dense_batch_invariance(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    enum { R = 29, I = 300, O = 70 };
    float *x = malloc(R * I * sizeof *x), *w = malloc(O * I * sizeof *w), *b = malloc(O * 4);
    float *all = malloc(R * O * sizeof *all), *part = malloc(R * O * sizeof *part);
    assert_true(x && w && b && all && part);
    for (int i = 0; i < R * I; i++)
        x[i] = rng_uniform(&rg, -2, 2);
    for (int i = 0; i < O * I; i++)
        w[i] = rng_uniform(&rg, -0.06f, 0.06f);
    for (int i = 0; i < O; i++)
        b[i] = rng_uniform(&rg, -1, 1);
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    static const int sizes[] = {1, 2, 5, 7, 13};
    for (int ii = 0; ii < nisa; ii++)
        for (size_t t = 0; t < 3; t++) {
            float *deq = malloc(O * I * sizeof *deq);
            void *wd;
            unsigned char *wbuf = pack_odd(w, O * I, all_dtypes[t], 0, &wd, deq);
            struct dense_cpu *d = NULL;
            char msg[256];
            if (dense_cpu_prepare_isa(isas[ii], wd, all_dtypes[t], b, DTYPE_F32, O, I,
                                      DENSE_ACT_GELU, &d, msg, sizeof msg) < 0)
                FAIL("prepare: %s", msg);
            dense_cpu_run(d, x, R, all);
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
                for (int i = 0; i < R * O; i++)
                    part[i] = NAN;
                for (int r0 = 0; r0 < R; r0 += sizes[s]) {
                    int n = R - r0 < sizes[s] ? R - r0 : sizes[s];
                    dense_cpu_run(d, x + (size_t)r0 * I, n, part + (size_t)r0 * O);
                }
                if (memcmp(all, part, R * O * sizeof *all) != 0)
                    FAIL("%s %s: batches of %d rows differ from one batch of %d",
                         kernels_isa_name(isas[ii]), dtype_name(all_dtypes[t]), sizes[s], R);
            }
            dense_cpu_free(d);
            free(wbuf);
            free(deq);
        }
    free(x), free(w), free(b), free(all), free(part);
}

/* The kernels' own widening of halves (F16C, shifts, or dtype.h at prepare)
 * on every one of the 65536 bit patterns: W is [65536][1], so
 * y[r][o] = x[r] * w[o] exactly (scaling by 1, 2 and -0.5 is exact in F32).
 * rows 1 takes the matrix-vector path, 3 the tiled one. */
static void test_dense_widen_exhaustive(void **state)
{
    (void)state;
    enum { N = 65536 };
    uint16_t *w = malloc(N * sizeof *w);
    float *y = malloc((size_t)3 * N * sizeof *y);
    assert_true(w && y);
    for (uint32_t i = 0; i < N; i++)
        w[i] = (uint16_t)i;
    const float x[3] = {1.0f, 2.0f, -0.5f};
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    for (int ii = 0; ii < nisa; ii++)
        for (int t = 1; t < 3; t++) {
            const enum dtype dt = all_dtypes[t];
            struct dense_cpu *d = NULL;
            char msg[256];
            if (dense_cpu_prepare_isa(isas[ii], w, dt, NULL, DTYPE_F32, N, 1, DENSE_ACT_NONE, &d,
                                      msg, sizeof msg) < 0)
                FAIL("prepare: %s", msg);
            for (int rows = 1; rows <= 3; rows += 2) {
                for (size_t i = 0; i < (size_t)rows * N; i++)
                    y[i] = NAN;
                dense_cpu_run(d, x, rows, y);
                for (int r = 0; r < rows; r++)
                    for (uint32_t o = 0; o < N; o++) {
                        float f = dt == DTYPE_F16 ? dtype_f16_to_f32((uint16_t)o)
                                                  : dtype_bf16_to_f32((uint16_t)o);
                        float want = (float)((double)x[r] * f);
                        float got = y[(size_t)r * N + o];
                        if (isnan(want) ? !isnan(got) : got != want)
                            FAIL("%s %s weight 0x%04x times %g gave %.9g, want %.9g",
                                 kernels_isa_name(isas[ii]), dtype_name(dt), o, x[r], got, want);
                    }
            }
            dense_cpu_free(d);
        }
    free(w);
    free(y);
}

/* Shapes drawn from the seed too, so runs over time cover many more; the
 * budget of multiply-adds keeps the sanitizer build quick. */
static void test_dense_random_shapes(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    for (int i = 0; i < 6; i++) {
        struct shape sh;
        sh.rows = 1 + (int)(rng_next(&rg) % 130);
        sh.in = 1 + (int)(rng_next(&rg) % 1100);
        sh.out = 1 + (int)(rng_next(&rg) % 1100);
        while ((double)sh.rows * sh.in * sh.out > 3e6)
            if (sh.in > sh.out)
                sh.in = sh.in / 2 + 1;
            else
                sh.out = sh.out / 2 + 1;
        dense_case(&rg, sh);
    }
}

/* Activations through the public API: in = 1, x = 0, so y[o] = act(b[o]);
 * a dense sweep of b against libm in double, to a few ulp (measured bounds
 * noted per activation), and NaN stays NaN. */
static void test_dense_activations(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    enum { N = 40000 };
    float *b = malloc(N * sizeof *b), *y = malloc((N + GUARD) * sizeof *y);
    assert_true(b && y);
    for (int i = 0; i < N - 200; i++)        /* every 0.001 over [-18, 18], jittered */
        b[i] = -18.0f + 36.0f * (float)i / (N - 200) + rng_uniform(&rg, -5e-4f, 5e-4f);
    for (int i = N - 200; i < N - 20; i++)   /* wide magnitudes, both signs */
        b[i] = (i & 1 ? -1 : 1) * ldexpf(rng_uniform(&rg, 1, 2), (i % 90) - 45);
    const float special[] = {0.0f, -0.0f, 0.625f, -0.625f, 1.3035f, -1.3035f, 5.6568542f,
                             -5.6568542f, 87.0f, -87.0f, 88.8f, -88.8f, 1e30f, -1e30f, 1e-30f,
                             -1e-30f, 3.4e38f, -3.4e38f, 0.0f, NAN};
    memcpy(b + N - 20, special, sizeof special);
    const float w = 1.0f, x = 0.0f;
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    for (int ii = 0; ii < nisa; ii++)
        for (size_t a = 0; a < 5; a++) {
            const enum dense_act act = all_acts[a];
            struct dense_cpu *d = NULL;
            char msg[256];
            /* one output per bias value: W is [N][1] of ones */
            float *wv = malloc(N * sizeof *wv);
            assert_non_null(wv);
            for (int i = 0; i < N; i++)
                wv[i] = w;
            if (dense_cpu_prepare_isa(isas[ii], wv, DTYPE_F32, b, DTYPE_F32, N, 1, act, &d, msg,
                                      sizeof msg) < 0)
                FAIL("prepare: %s", msg);
            for (int i = 0; i < N; i++)
                y[i] = NAN;
            dense_cpu_run(d, &x, 1, y);
            /* In ulps of the result (2^-24 |ref|): 8 for the polynomials
             * (~1 ulp) and the few operations after them. gelu also gets its
             * condition number: x/sqrt(2) is rounded and erfc(t) has relative
             * slope 2t^2 = x^2, plus one ulp of |x| absolute for the tail
             * beyond x = -5.66 that is dropped (it is below 8e-9 |x|).
             * Results below FLT_MIN may be flushed to 0. */
            double worst = 0;
            int worst_i = 0, bad = -1;
            for (int i = 0; i < N; i++) {
                double ref = act_ref(act, b[i]);
                if (isnan(ref)) {
                    if (!isnan(y[i]))
                        FAIL("%s %s(%g) = %g, want NaN", kernels_isa_name(isas[ii]),
                             dense_act_name(act), b[i], y[i]);
                    continue;
                }
                double bb = b[i], ulps = 8, abs_ok = 0x1p-126;
                if (act == DENSE_ACT_GELU && bb < 0) {
                    ulps += bb * bb;
                    abs_ok += 0x1p-24 * fabs(bb);
                }
                double err = y[i] == ref ? 0 : fmax(0, fabs(y[i] - ref) - abs_ok) /
                                                   (0x1p-24 * fabs(ref));
                if (!(err <= ulps)) {
                    if (bad < 0)
                        bad = i;
                } else if (err > worst) {
                    worst = err;
                    worst_i = i;
                }
            }
            if (bad >= 0)
                FAIL("%s %s(%.9g) = %.9g, reference %.9g: error %.3g", kernels_isa_name(isas[ii]),
                     dense_act_name(act), b[bad], y[bad], act_ref(act, b[bad]),
                     fabs(y[bad] - act_ref(act, b[bad])));
            if (verbose)
                print_message("%s %s: worst %.2f ulp at %.9g\n", kernels_isa_name(isas[ii]),
                              dense_act_name(act), worst, b[worst_i]);
            dense_cpu_free(d);
            free(wv);
        }
    free(b);
    free(y);
}

static void test_dense_api(void **state)
{
    (void)state;
    const float w[6] = {1, 2, 3, 4, 5, 6};
    struct dense_cpu *d = NULL;
    char msg[256];
    float y[2];

    assert_int_equal(dense_cpu_prepare(NULL, DTYPE_F32, NULL, DTYPE_F32, 2, 3, DENSE_ACT_NONE, &d,
                                       msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "NULL"));
    assert_int_equal(dense_cpu_prepare(w, DTYPE_F32, NULL, DTYPE_F32, 0, 3, DENSE_ACT_NONE, &d,
                                       msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "[0, 3]"));
    assert_int_equal(dense_cpu_prepare(w, DTYPE_F32, NULL, DTYPE_F32, 2, -1, DENSE_ACT_NONE, &d,
                                       msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "empty dimension"));
    assert_int_equal(dense_cpu_prepare(w, (enum dtype)9, NULL, DTYPE_F32, 2, 3, DENSE_ACT_NONE, &d,
                                       msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "weight dtype 9"));
    assert_int_equal(dense_cpu_prepare(w, DTYPE_F32, w, (enum dtype)7, 2, 3, DENSE_ACT_NONE, &d,
                                       msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "bias dtype 7"));
    assert_int_equal(dense_cpu_prepare(w, DTYPE_F32, NULL, DTYPE_F32, 2, 3, (enum dense_act)42, &d,
                                       msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "activation 42"));
    assert_int_equal(dense_cpu_prepare(w, DTYPE_F32, NULL, DTYPE_F32, 1 << 30, 1 << 30,
                                       DENSE_ACT_NONE, &d, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "GiB"));
    assert_null(d);
    for (enum kernels_isa isa = KERNELS_ISA_AVX2; isa <= KERNELS_ISA_AVX512; isa++)
        if (!kernels_isa_supported(isa)) {
            assert_int_equal(dense_cpu_prepare_isa(isa, w, DTYPE_F32, NULL, DTYPE_F32, 2, 3,
                                                   DENSE_ACT_NONE, &d, msg, sizeof msg), -1);
            assert_non_null(strstr(msg, "use auto"));
            assert_int_equal(softmax_rows_isa(isa, w, y, 1, 2), -1);
        }

    /* Bias dtype may differ from the weights'; rows = 0 writes nothing. */
    const uint16_t bb[2] = {dtype_f32_to_bf16(0.5f), dtype_f32_to_bf16(-8.0f)};
    assert_int_equal(dense_cpu_prepare(w, DTYPE_F32, bb, DTYPE_BF16, 2, 3, DENSE_ACT_RELU, &d,
                                       msg, sizeof msg), 0);
    assert_int_equal(dense_cpu_out_features(d), 2);
    assert_int_equal(dense_cpu_in_features(d), 3);
    assert_int_equal(dense_cpu_isa(d), kernels_isa_best());
    const float x[3] = {1, 1, 1};
    y[0] = y[1] = -7;
    dense_cpu_run(d, x, 0, y);
    assert_true(y[0] == -7 && y[1] == -7);
    dense_cpu_run(d, x, 1, y);
    assert_true(y[0] == 6.5f && y[1] == 7.0f);    /* relu(6+0.5), relu(15-8) */
    assert_true(dense_cpu_bytes(d) >= 6 * sizeof(float));
    dense_cpu_free(d);
    dense_cpu_free(NULL);

    /* Halves are kept as halves: about half the memory of F32. */
    enum { O = 300, I = 500 };
    uint16_t *wh = calloc((size_t)O * I, 2);
    assert_non_null(wh);
    struct dense_cpu *d32, *d16;
    assert_int_equal(dense_cpu_prepare(wh, DTYPE_BF16, NULL, DTYPE_F32, O, I, DENSE_ACT_NONE, &d16,
                                       msg, sizeof msg), 0);
    float *w32 = calloc((size_t)O * I, 4);
    assert_non_null(w32);
    assert_int_equal(dense_cpu_prepare(w32, DTYPE_F32, NULL, DTYPE_F32, O, I, DENSE_ACT_NONE, &d32,
                                       msg, sizeof msg), 0);
    assert_true(dense_cpu_bytes(d32) >= (size_t)O * I * 4);
    assert_true(dense_cpu_bytes(d16) >= (size_t)O * I * 2);
    assert_true(dense_cpu_bytes(d16) < dense_cpu_bytes(d32) * 6 / 10);
    dense_cpu_free(d16);
    dense_cpu_free(d32);
    free(wh);
    free(w32);

    enum dense_act act = DENSE_ACT_RELU;
    assert_int_equal(dense_act_parse(NULL, &act), 0);
    assert_int_equal(act, DENSE_ACT_NONE);
    static const char *names[] = {"none", "relu", "gelu", "tanh", "sigmoid"};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(dense_act_parse(names[i], &act), 0);
        assert_int_equal(act, all_acts[i]);
        assert_string_equal(dense_act_name(act), names[i]);
    }
    act = DENSE_ACT_GELU;
    assert_int_equal(dense_act_parse("swish", &act), -1);
    assert_int_equal(dense_act_parse("RELU", &act), -1);
    assert_int_equal(act, DENSE_ACT_GELU);
    assert_int_equal(dense_act_parse("", &act), 0);
    assert_int_equal(act, DENSE_ACT_NONE);
}

/* ---- softmax ---- */

/* Checks y = softmax(x) row by row against double. Per element the bound is
 *   2^-24 * (4 (1 + |x - max|) + n/8 + 16) * ref + 2^-126
 * from: x - max rounded (relative |x - max| u), exp (~2 ulp), the sum of n
 * terms over 8 partial sums (n/8 u) plus the horizontal sum and the scaling;
 * 2^-126 because results below FLT_MIN are flushed to 0. Row sums must be 1
 * within the same summation bound. */
static void check_softmax(const float *x, const float *y, int rows, int n, const char *what)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * n;
        const float *yr = y + (size_t)r * n;
        double m = -INFINITY;
        for (int i = 0; i < n; i++)
            m = fmax(m, xr[i]);
        double s = 0;
        for (int i = 0; i < n; i++)
            s += exp((double)xr[i] - m);
        double ysum = 0;
        for (int i = 0; i < n; i++) {
            double ref = exp((double)xr[i] - m) / s;
            double tol = ref == 0 ? 0x1p-126
                                  : 0x1p-24 * (4 * (1 + fabs((double)xr[i] - m)) + n / 8.0 + 16) *
                                            ref + 0x1p-126;
            if (!(fabs(yr[i] - ref) <= tol))
                FAIL("%s: row %d [%d] = %.9g for x = %.9g, reference %.9g (error %.3g > %.3g)",
                     what, r, i, yr[i], xr[i], ref, fabs(yr[i] - ref), tol);
            ysum += yr[i];
        }
        double stol = 0x1p-24 * (n / 8.0 + 16) * 2;
        if (!(fabs(ysum - 1) <= stol))
            FAIL("%s: row %d sums to %.9g (off by %.3g > %.3g)", what, r, ysum, fabs(ysum - 1),
                 stol);
    }
}

static void test_softmax_random(void **state)
{
    (void)state;
    struct rng rg = rng_for(__func__);
    static const struct { int rows, n; } shapes[] = {
        {1, 1}, {3, 7}, {17, 33}, {5, 1000}, {64, 17}, {127, 100}, {2, 4099}, {1, 16}, {4, 9},
    };
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int rows = shapes[s].rows, n = shapes[s].n;
        const size_t len = (size_t)rows * n;
        float *x = malloc(len * sizeof *x), *y = malloc((len + GUARD) * sizeof *y);
        float *xc = malloc(len * sizeof *x);
        assert_true(x && y && xc);
        for (size_t i = 0; i < len; i++)   /* spread so that some exps underflow */
            x[i] = rng_uniform(&rg, -30, 30) * (i % 3 == 0 ? 4 : 1);
        for (int ii = 0; ii < nisa; ii++) {
            char what[96];
            snprintf(what, sizeof what, "softmax %s rows %d n %d", kernels_isa_name(isas[ii]),
                     rows, n);
            for (size_t i = 0; i < len; i++)
                y[i] = NAN;
            for (size_t i = len; i < len + GUARD; i++)
                y[i] = guard_value;
            assert_int_equal(softmax_rows_isa(isas[ii], x, y, rows, n), 0);
            check_softmax(x, y, rows, n, what);
            for (size_t i = len; i < len + GUARD; i++)
                if (y[i] != guard_value)
                    FAIL("%s: wrote past the end of y", what);
            /* in place gives the same bits */
            memcpy(xc, x, len * sizeof *x);
            assert_int_equal(softmax_rows_isa(isas[ii], xc, xc, rows, n), 0);
            if (memcmp(xc, y, len * sizeof *x) != 0)
                FAIL("%s: in place differs from out of place", what);
        }
        free(x);
        free(y);
        free(xc);
    }
}

static void test_softmax_stability(void **state)
{
    (void)state;
    enum kernels_isa isas[4];
    const int nisa = isa_list(isas);
    for (int ii = 0; ii < nisa; ii++) {
        const enum kernels_isa isa = isas[ii];
        float x[20], y[20];
        const float big[] = {1000, -1000};
        assert_int_equal(softmax_rows_isa(isa, big, y, 1, 2), 0);
        if (!(y[0] == 1 && y[1] == 0))
            FAIL("%s softmax{1000, -1000} = {%g, %g}", kernels_isa_name(isa), y[0], y[1]);
        const float same[] = {1000, 1000, 1000, 1000, 1000};
        assert_int_equal(softmax_rows_isa(isa, same, y, 1, 5), 0);
        for (int i = 0; i < 5; i++)
            if (fabsf(y[i] - 0.2f) > 1e-7f)
                FAIL("%s softmax of 5 x 1000: %g", kernels_isa_name(isa), y[i]);
        for (int i = 0; i < 20; i++)
            x[i] = -1000.0f + (float)i * 1e-1f;
        assert_int_equal(softmax_rows_isa(isa, x, y, 1, 20), 0);
        check_softmax(x, y, 1, 20, "softmax around -1000");
        for (int i = 0; i < 20; i++)
            x[i] = i % 2 ? -INFINITY : 88.0f + (float)i;   /* masked entries */
        assert_int_equal(softmax_rows_isa(isa, x, y, 2, 10), 0);
        check_softmax(x, y, 2, 10, "softmax with -inf entries");
        for (int i = 1; i < 20; i += 2)
            if (y[i] != 0)
                FAIL("%s: a -inf entry got %g", kernels_isa_name(isa), y[i]);
        const float huge[] = {-3e38f, 3e38f, 0};
        assert_int_equal(softmax_rows_isa(isa, huge, y, 1, 3), 0);
        if (!(y[0] == 0 && y[1] == 1 && y[2] == 0))
            FAIL("%s softmax{-3e38, 3e38, 0} = {%g, %g, %g}", kernels_isa_name(isa), y[0], y[1],
                 y[2]);
        /* Documented: a row of only -inf, or holding NaN, is all NaN; others
         * rows are unaffected. */
        const float bad[] = {-INFINITY, -INFINITY, -INFINITY, 1, NAN, 2, 0, 0, 0};
        assert_int_equal(softmax_rows_isa(isa, bad, y, 3, 3), 0);
        for (int i = 0; i < 6; i++)
            if (!isnan(y[i]))
                FAIL("%s: element %d of a -inf or NaN row is %g, not NaN", kernels_isa_name(isa),
                     i, y[i]);
        for (int i = 6; i < 9; i++)
            if (fabsf(y[i] - 1.0f / 3) > 1e-7f)
                FAIL("%s: a NaN row leaked into the next: %g", kernels_isa_name(isa), y[i]);
        y[0] = 7;
        assert_int_equal(softmax_rows_isa(isa, big, y, 0, 2), 0);
        assert_int_equal(softmax_rows_isa(isa, big, y, 1, 0), 0);
        assert_true(y[0] == 7);
    }
    float one = 5, out = 0;
    softmax_rows(&one, &out, 1, 1);
    assert_true(out == 1);
}

int main(void)
{
    seeded_init();
    verbose = getenv("BG_TEST_VERBOSE") != NULL;
    print_message("test_kernels: seed %llu (BG_TEST_SEED=%llu replays it); kernel paths: generic%s%s\n",
                  g_seed, g_seed, kernels_isa_supported(KERNELS_ISA_AVX2) ? ", avx2" : "",
                  kernels_isa_supported(KERNELS_ISA_AVX512) ? ", avx512" : "");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_exhaustive),    cmocka_unit_test(test_bf16_exhaustive),
        cmocka_unit_test(test_half_rounding),     cmocka_unit_test(test_dense_api),
        cmocka_unit_test(test_dense_activations), cmocka_unit_test(test_dense_small),
        cmocka_unit_test(test_dense_large),       cmocka_unit_test(test_dense_random_shapes),
        cmocka_unit_test(test_dense_widen_exhaustive),
        cmocka_unit_test(test_dense_batch_invariance), cmocka_unit_test(test_softmax_random),
        cmocka_unit_test(test_softmax_stability),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
