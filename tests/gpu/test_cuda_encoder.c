/* test_cuda_encoder.c - the encoder's CUDA kernels against their CPU
 * references, which test_encoder_kernels checks against float64:
 *
 *   embed_sum_cuda         embed_sum          bitwise (same sums, same order)
 *   layernorm_rows_cuda    layernorm_rows     1e-4 of |gamma| (|xhat| + 1) + |beta|
 *   attention_varlen_cuda  attention_varlen   1e-4 of the largest |v| the row mixes
 *   pool_rows_cuda         pool_rows          bitwise; with L2 within 8 ulp
 *   dense_cuda, GELU       libm's erfc        a sweep, the CPU test's ulp bounds
 *   dense_cuda, FFN shapes dense_cpu_run      the rounding of x to BF16/F16 (tensor
 *                                             cores) plus F32 sums, of sum |x w|
 *   one encoder layer      the same on CPU    relative L2 per row, cosine of the
 *                                             pooled vectors
 *
 * at MiniLM's shape (hidden 384, 12 heads of 32, FFN 1536), BERT-base's
 * (768, 12 x 64, 3072) and odd ones (head_dim 1 to 128, hidden 1 to 2000),
 * on batches of sequence lengths 1, 7, 32, 33, 128, 256, mixed batches with
 * an empty sequence, one that does not start at row 0, and 64 sequences of
 * 5 to 200 tokens. Data are fresh every run (tests/unit/seeded.h: the seed
 * is printed, BG_TEST_SEED=N replays). Device outputs are NaN before each
 * call with NaN guard zones around them (and between strided rows) that must
 * stay NaN. BG_TEST_QUICK=1 runs a subset small enough for compute-sanitizer
 * (scripts/gpu-check). Skips, saying why, when no GPU is usable. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kernels/attention.h"
#include "kernels/cuda_rt.h"
#include "kernels/dense.h"
#include "kernels/dtype.h"
#include "kernels/embed.h"
#include "kernels/kernels.h"
#include "kernels/layernorm.h"
#include "kernels/pool.h"
#include "tests/unit/seeded.h"

#define GUARD 64   /* floats: 256 bytes, so the inner pointer keeps cudaMalloc's alignment */
#define U 0x1p-24

static int g_quick;

static int gpu_usable(void)
{
    char msg[256];
    if (kernels_cuda_devices(msg, sizeof msg) <= 0) {
        print_message("SKIPPED: no usable GPU (%s)\n", msg);
        return 0;
    }
    return 1;
}

/* ---- device buffers ---- */

static void *dev_dup(const void *h, size_t bytes)
{
    char msg[256];
    void *d = cuda_rt_malloc(bytes, msg, sizeof msg);
    if (!d)
        FAIL("%s", msg);
    if (bytes && cuda_rt_upload(d, h, bytes, msg, sizeof msg))
        FAIL("upload: %s", msg);
    return d;
}

/* n floats of device memory, NaN, between GUARD NaNs on each side; the
 * inner pointer. */
static float *dev_guarded(size_t n)
{
    const size_t all = n + 2 * GUARD;
    float *h = malloc(all * sizeof *h);
    assert_non_null(h);
    for (size_t i = 0; i < all; i++)
        h[i] = NAN;
    float *d = dev_dup(h, all * sizeof *h);
    free(h);
    return d + GUARD;
}

static void dev_guarded_free(float *d)
{
    if (d)
        cuda_rt_free(d - GUARD);
}

/* The n floats of a dev_guarded buffer into h, its guards checked. */
static void fetch_guarded(float *h, const float *d, size_t n, const char *what)
{
    char msg[256];
    float *all = malloc((n + 2 * GUARD) * sizeof *all);
    assert_non_null(all);
    if (cuda_rt_download(all, d - GUARD, (n + 2 * GUARD) * sizeof *all, msg, sizeof msg))
        FAIL("%s: download (the kernel may have faulted): %s", what, msg);
    for (size_t i = 0; i < GUARD; i++)
        if (!isnan(all[i]) || !isnan(all[GUARD + n + i]))
            FAIL("%s: wrote outside its output", what);
    memcpy(h, all + GUARD, n * sizeof *h);
    free(all);
}

static void fill(struct rng *rg, float *p, size_t n, float lo, float hi)
{
    for (size_t i = 0; i < n; i++)
        p[i] = rng_uniform(rg, lo, hi);
}

/* ---- batches ---- */

/* Sequence lengths, -1 ends a list. */
static const int batch_lens[][12] = {
    {1, -1}, {7, -1}, {32, -1}, {33, -1}, {128, -1}, {256, -1},
    {5, 0, 200, 33, 1, 64, 129, 7, 32, 256, -1},
};
static const int quick_lens[][12] = {{7, -1}, {33, -1}, {5, 0, 40, 1, 33, -1}};

struct batch {
    int nseq, *cu;   /* host offsets, nseq + 1 */
    int rows;        /* cu[nseq]: rows every buffer holds */
    char name[64];
};

static struct batch batch_make(const int *lens, int n, int first)
{
    struct batch b = {n, malloc(((size_t)n + 1) * sizeof(int)), 0, ""};
    assert_non_null(b.cu);
    b.cu[0] = first;
    for (int s = 0; s < n; s++)
        b.cu[s + 1] = b.cu[s] + lens[s];
    b.rows = b.cu[n];
    int len = snprintf(b.name, sizeof b.name, "%d seq (", n);
    for (int s = 0; s < n && s < 6 && len < 48; s++)
        len += snprintf(b.name + len, sizeof b.name - (size_t)len, "%s%d", s ? " " : "", lens[s]);
    snprintf(b.name + len, sizeof b.name - (size_t)len, "%s)%s", n > 6 ? " ..." : "",
             first ? " from row 2" : "");
    return b;
}

/* Every batch of the run: the fixed ones, the mixed one again starting at
 * row 2 (offsets are absolute rows), and 64 sequences of 5..200 tokens (the
 * benchmark's batch). */
static int batches_all(struct rng *rg, struct batch *out)
{
    int n = 0;
    const int (*lens)[12] = g_quick ? quick_lens : batch_lens;
    const int count = g_quick ? 3 : (int)(sizeof batch_lens / sizeof *batch_lens);
    for (int i = 0; i < count; i++) {
        int k = 0;
        while (lens[i][k] >= 0)
            k++;
        out[n++] = batch_make(lens[i], k, 0);
    }
    int k = 0;
    while (lens[count - 1][k] >= 0)
        k++;
    out[n++] = batch_make(lens[count - 1], k, 2);
    if (!g_quick) {
        int many[64];
        for (int s = 0; s < 64; s++)
            many[s] = 5 + (int)(rng_next(rg) % 196);
        out[n++] = batch_make(many, 64, 0);
    }
    return n;
}

static void batches_free(struct batch *b, int n)
{
    for (int i = 0; i < n; i++)
        free(b[i].cu);
}

/* ---- layernorm ---- */

/* Against layernorm_rows: per element
 *   |gpu - cpu| <= 1e-4 (|gamma| (|xhat| + 1) + |beta|)
 *                  + 2 |gamma| rstd (dim/4 + 19) u max|t|
 * with xhat, rstd from a float64 reference. The second term is the error of
 * an F32 mean, which scales with the row's magnitude, not its spread
 * (test_encoder_kernels.c derives it for the CPU; the GPU's shuffle tree
 * chains fewer additions): it matters only for rows far from zero such as
 * 1e4 +- 1, where CPU and GPU sum in different orders. A NaN must come out
 * where the CPU has one, and only there. */
static void ln_compare(const float *x, const float *r, const float *g, const float *b,
                       const float *cpu, const float *gpu, int rows, int dim, const char *what)
{
    for (int i = 0; i < rows; i++) {
        const size_t o = (size_t)i * (size_t)dim;
        double mean = 0, var = 0, tmax = 0;
        for (int c = 0; c < dim; c++) {
            mean += (double)(float)(x[o + c] + (r ? r[o + c] : 0.0f));
            tmax = fmax(tmax, fabs((double)(float)(x[o + c] + (r ? r[o + c] : 0.0f))));
        }
        mean /= dim;
        for (int c = 0; c < dim; c++) {
            double t = (double)(float)(x[o + c] + (r ? r[o + c] : 0.0f)) - mean;
            var += t * t;
        }
        const double rstd = 1 / sqrt(var / dim + 1e-12);
        for (int c = 0; c < dim; c++) {
            const double t = (double)(float)(x[o + c] + (r ? r[o + c] : 0.0f));
            const double xh = (t - mean) * rstd;
            const double tol = 1e-4 * (fabs(g[c]) * (fabs(xh) + 1) + (b ? fabs(b[c]) : 0)) +
                               2 * fabs(g[c]) * rstd * (dim / 4.0 + 19) * U * tmax;
            const float gv = gpu[o + c], cv = cpu[o + c];
            if (isnan(cv) ? !isnan(gv) : !(fabs((double)gv - cv) <= tol))
                FAIL("%s: row %d col %d = %.9g, CPU %.9g (tolerance %.3g)", what, i, c, gv, cv,
                     tol);
        }
    }
}

static void test_layernorm(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    struct rng rg = rng_for(__func__);
    /* Each NV of the warp kernel at and past its end, BERT's sizes, and the
     * block kernel past 1024. */
    static const int dims[] = {1, 3, 32, 33, 128, 129, 256, 384, 385, 512, 768, 1000, 1024, 1025,
                               2000};
    static const int rowss[] = {1, 5, 67};
    int checks = 0;
    for (size_t di = 0; di < sizeof dims / sizeof *dims; di++)
        for (size_t ri = 0; ri < 3; ri++)
            for (int variant = 0; variant < 6; variant++) {
                /* variant: bit 0 residual, bit 1 beta; 4, 5: in place into x / r */
                /* quick: one warp-kernel size per hidden size in use, the
                 * block kernel, dim 1; 5 rows; residual, in place or not */
                const int dq = dims[di] == 1 || dims[di] == 33 || dims[di] == 384 ||
                               dims[di] == 768 || dims[di] == 1025;
                if (g_quick && (ri != 1 || !dq || variant == 1 || variant == 2))
                    continue;
                const int dim = dims[di], rows = rowss[ri];
                const size_t n = (size_t)rows * (size_t)dim;
                const int res = variant & 1 || variant >= 4, beta = variant & 2 || variant >= 4;
                float *x = malloc(n * sizeof *x), *r = malloc(n * sizeof *r);
                float *g = malloc((size_t)dim * sizeof *g), *b = malloc((size_t)dim * sizeof *b);
                float *cpu = malloc(n * sizeof *cpu), *gpu = malloc(n * sizeof *gpu);
                assert_true(x && r && g && b && cpu && gpu);
                const float off = rng_uniform(&rg, -4, 4);   /* hidden states are not centred */
                fill(&rg, x, n, off - 3, off + 3);
                fill(&rg, r, n, -1, 1);
                fill(&rg, g, (size_t)dim, -2, 2);
                fill(&rg, b, (size_t)dim, -1, 1);
                if (rows == 67 && dim > 1) {
                    x[(size_t)3 * dim + 1] = NAN;   /* poisons row 3 only */
                    for (int c = 0; c < dim; c++)   /* 1e4 +- 1: kept by two passes */
                        x[(size_t)5 * dim + c] = 1e4f + (c & 1 ? 1.0f : -1.0f);
                }
                memcpy(cpu, x, n * sizeof *x);
                layernorm_rows(cpu, res ? r : NULL, g, beta ? b : NULL, 1e-12f, cpu, rows, dim);

                float *dx = dev_guarded(n), *dr = dev_guarded(n), *dy = dev_guarded(n);
                char msg[256];
                assert_int_equal(cuda_rt_upload(dx, x, n * sizeof *x, msg, sizeof msg), 0);
                assert_int_equal(cuda_rt_upload(dr, r, n * sizeof *r, msg, sizeof msg), 0);
                float *dg = dev_dup(g, (size_t)dim * sizeof *g);
                float *db = dev_dup(b, (size_t)dim * sizeof *b);
                float *out = variant == 4 ? dx : variant == 5 ? dr : dy;
                char what[128];
                snprintf(what, sizeof what, "layernorm dim %d rows %d variant %d", dim, rows,
                         variant);
                if (layernorm_rows_cuda(dx, res ? dr : NULL, dg, beta ? db : NULL, 1e-12f, out,
                                        rows, dim, NULL, msg, sizeof msg))
                    FAIL("%s: %s", what, msg);
                fetch_guarded(gpu, out, n, what);
                ln_compare(x, res ? r : NULL, g, beta ? b : NULL, cpu, gpu, rows, dim, what);
                /* The inputs that are not the output are unchanged. */
                float *back = malloc(n * sizeof *back);
                assert_non_null(back);
                if (out != dx) {
                    fetch_guarded(back, dx, n, what);
                    if (memcmp(back, x, n * sizeof *x))
                        FAIL("%s: changed its input x", what);
                }
                if (out != dr) {
                    fetch_guarded(back, dr, n, what);
                    if (memcmp(back, r, n * sizeof *r))
                        FAIL("%s: changed its input r", what);
                }
                free(back);
                dev_guarded_free(dx);
                dev_guarded_free(dr);
                dev_guarded_free(dy);
                cuda_rt_free(dg);
                cuda_rt_free(db);
                free(x);
                free(r);
                free(g);
                free(b);
                free(cpu);
                free(gpu);
                checks++;
            }
    char msg[256];
    assert_int_equal(layernorm_rows_cuda(NULL, NULL, NULL, NULL, 1e-12f, NULL, 0, 384, NULL, msg,
                                         sizeof msg), 0);   /* no rows: nothing to do */
    assert_int_equal(layernorm_rows_cuda(NULL, NULL, NULL, NULL, 1e-12f, NULL, 2, 384, NULL, msg,
                                         sizeof msg), -1);
    print_message("layernorm: %d cases\n", checks);
}

/* ---- attention ---- */

struct att_shape {
    const char *name;
    int heads, head_dim;
};

static const struct att_shape att_shapes[] = {
    {"MiniLM 12 x 32", 12, 32}, {"BERT-base 12 x 64", 12, 64}, {"2 x 128", 2, 128},
    {"3 x 5", 3, 5},            {"4 x 24", 4, 24},            {"1 x 1", 1, 1},
    {"2 x 100", 2, 100},        {"1 x 48", 1, 48},
};

/* One run of a shape on a batch: q, k, v as column slices of one fused
 * [rows][3W] buffer (what the QKV layer writes) or three [rows][W] buffers,
 * out [rows][W + 3] (the 3 columns between rows and the rows before cu[0]
 * must stay NaN). Compared with attention_varlen: per element within 1e-4
 * of max_j |v_j| over the sequence in that column (the output is a convex
 * combination of those; both sides are within about (L + head_dim) u of it
 * when the weights are not peaked, test_encoder_kernels.c). Returns the GPU
 * output (host, [rows][W + 3]) for the batch-invariance check. */
static float *att_run(struct rng *rg, const struct att_shape *sh, const struct batch *bt,
                      int fused, float qk_range, const char *what)
{
    const int W = sh->heads * sh->head_dim;
    const size_t ld_in = fused ? 3 * (size_t)W : (size_t)W, ld_out = (size_t)W + 3;
    const size_t rows = (size_t)bt->rows, nin = rows * ld_in * (fused ? 1 : 3);
    float *in = malloc(nin * sizeof *in);
    assert_non_null(in);
    fill(rg, in, nin, -qk_range, qk_range);
    float *q = in, *k = fused ? in + W : in + rows * ld_in;
    float *v = fused ? in + 2 * W : in + 2 * rows * ld_in;
    for (size_t t = 0; t < rows; t++)   /* v in [-1, 1] whatever the scores' range */
        for (int c = 0; c < W; c++)
            v[t * ld_in + c] = rng_uniform(rg, -1, 1);

    float *cpu = malloc(rows * ld_out * sizeof *cpu), *gpu = malloc(rows * ld_out * sizeof *gpu);
    assert_true(cpu && gpu);
    for (size_t i = 0; i < rows * ld_out; i++)
        cpu[i] = NAN;
    int longest = 0;
    for (int s = 0; s < bt->nseq; s++)
        longest = bt->cu[s + 1] - bt->cu[s] > longest ? bt->cu[s + 1] - bt->cu[s] : longest;
    const size_t nscratch = attention_scratch_floats(longest, sh->head_dim);
    float *scratch = malloc((nscratch ? nscratch : 1) * sizeof *scratch);
    assert_non_null(scratch);
    struct attention_args a = {q, k, v, ld_in, cpu, ld_out, bt->cu, bt->nseq, sh->heads,
                               sh->head_dim};
    if (attention_varlen(&a, scratch, nscratch))
        FAIL("%s: the CPU reference refused", what);
    free(scratch);

    float *din = dev_dup(in, nin * sizeof *in);
    float *dout = dev_guarded(rows * ld_out);
    int *dcu = dev_dup(bt->cu, ((size_t)bt->nseq + 1) * sizeof(int));
    struct attention_args da = a;
    da.q = din + (q - in);
    da.k = din + (k - in);
    da.v = din + (v - in);
    da.out = dout;
    char msg[256];
    if (attention_varlen_cuda(&da, dcu, NULL, msg, sizeof msg))
        FAIL("%s: %s", what, msg);
    fetch_guarded(gpu, dout, rows * ld_out, what);

    for (size_t t = 0; t < rows; t++)
        for (size_t c = 0; c < ld_out; c++)
            if ((t < (size_t)bt->cu[0] || c >= (size_t)W) && !isnan(gpu[t * ld_out + c]))
                FAIL("%s: wrote row %zu col %zu, outside the sequences' rows and heads", what, t,
                     c);
    for (int s = 0; s < bt->nseq; s++)
        for (int c = 0; c < W; c++) {
            double vmax = 0;
            for (int t = bt->cu[s]; t < bt->cu[s + 1]; t++)
                vmax = fmax(vmax, fabs(v[(size_t)t * ld_in + c]));
            const double tol = 1e-4 * vmax;
            for (int t = bt->cu[s]; t < bt->cu[s + 1]; t++) {
                const float gv = gpu[(size_t)t * ld_out + c], cv = cpu[(size_t)t * ld_out + c];
                if (!(fabs((double)gv - cv) <= tol))
                    FAIL("%s: sequence %d row %d head %d col %d = %.9g, CPU %.9g (tolerance "
                         "%.3g)", what, s, t, c / sh->head_dim, c % sh->head_dim, gv, cv, tol);
            }
        }
    cuda_rt_free(din);
    dev_guarded_free(dout);
    cuda_rt_free(dcu);
    free(in);
    free(cpu);
    return gpu;
}

static void test_attention(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    struct rng rg = rng_for(__func__);
    struct batch bt[16];
    const int nb = batches_all(&rg, bt);
    int checks = 0;
    for (size_t si = 0; si < sizeof att_shapes / sizeof *att_shapes; si++)
        for (int bi = 0; bi < nb; bi++) {
            if (g_quick && si > 3)
                continue;
            /* Alternate: fused QKV or separate buffers; flat or peaked
             * scores (q, k in [-3, 3]: weights near one-hot, the running
             * maximum moves between key tiles). */
            const int fused = (int)(si + (size_t)bi) % 3 != 0;
            const float range = (si + (size_t)bi) % 2 ? 3.0f : 1.0f;
            char what[160];
            snprintf(what, sizeof what, "attention %s, %s, %s, q k in +-%g", att_shapes[si].name,
                     bt[bi].name, fused ? "fused QKV" : "separate q k v", range);
            free(att_run(&rg, &att_shapes[si], &bt[bi], fused, range, what));
            checks++;
        }
    print_message("attention: %d cases\n", checks);
    batches_free(bt, nb);
}

/* A sequence's output does not depend on the batch: each block works on one
 * sequence's rows only, with the same tiles from its first row, so the bits
 * are the same alone as in the mixed batch. */
static void test_attention_batch_invariance(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    static const int lens[] = {5, 0, 200, 33, 1, 64, 129, 7};
    const int n = (int)(sizeof lens / sizeof *lens);
    struct batch all = batch_make(lens, n, 0);
    char msg[256];
    for (size_t si = 0; si < 3; si++) {
        const struct att_shape *sh = &att_shapes[si];
        const int W = sh->heads * sh->head_dim;
        const size_t ld = 3 * (size_t)W, rows = (size_t)all.rows;
        struct rng rg = rng_for(sh->name);
        float *in = malloc(rows * ld * sizeof *in), *gpu = malloc(rows * W * sizeof *gpu);
        float *one = malloc(rows * W * sizeof *one);
        assert_true(in && gpu && one);
        fill(&rg, in, rows * ld, -2, 2);
        float *din = dev_dup(in, rows * ld * sizeof *in), *dout = dev_guarded(rows * W);
        int *dcu = dev_dup(all.cu, ((size_t)n + 1) * sizeof(int));
        struct attention_args a = {din, din + W, din + 2 * W, ld, dout, (size_t)W, all.cu, n,
                                   sh->heads, sh->head_dim};
        if (attention_varlen_cuda(&a, dcu, NULL, msg, sizeof msg))
            FAIL("%s: %s", sh->name, msg);
        fetch_guarded(gpu, dout, rows * W, sh->name);
        for (int s = 0; s < n; s++) {
            if (all.cu[s + 1] == all.cu[s])
                continue;
            /* The same buffers, one sequence: its absolute offsets. */
            int cu1[2] = {all.cu[s], all.cu[s + 1]};
            int *dcu1 = dev_dup(cu1, sizeof cu1);
            float *dout1 = dev_guarded(rows * W);
            struct attention_args a1 = a;
            a1.out = dout1;
            a1.cu_seqlens = cu1;
            a1.nseq = 1;
            if (attention_varlen_cuda(&a1, dcu1, NULL, msg, sizeof msg))
                FAIL("%s alone: %s", sh->name, msg);
            fetch_guarded(one, dout1, rows * W, sh->name);
            const size_t o = (size_t)cu1[0] * W, cnt = (size_t)(cu1[1] - cu1[0]) * W;
            if (memcmp(one + o, gpu + o, cnt * sizeof *one))
                FAIL("%s: sequence %d (%d rows) alone differs from it in the batch", sh->name, s,
                     lens[s]);
            cuda_rt_free(dcu1);
            dev_guarded_free(dout1);
        }
        cuda_rt_free(din);
        cuda_rt_free(dcu);
        dev_guarded_free(dout);
        free(in);
        free(gpu);
        free(one);
    }
    free(all.cu);
}

/* Refusals: -1 with a reason, nothing written. */
static void test_attention_api(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    char msg[256];
    int cu[3] = {0, 4, 9}, bad[3] = {0, 4, 3};
    float *buf = dev_guarded(9 * 3 * 256);
    int *dcu = dev_dup(cu, sizeof cu);
    struct attention_args a = {buf, buf, buf, 3 * 256, buf + 256, 3 * 256, cu, 2, 2, 128};
    struct attention_args b = a;
    b.head_dim = 129;
    b.heads = 1;
    assert_int_equal(attention_varlen_cuda(&b, dcu, NULL, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "1..128"));
    b = a;
    b.ld_out = 255;
    assert_int_equal(attention_varlen_cuda(&b, dcu, NULL, msg, sizeof msg), -1);
    b = a;
    b.cu_seqlens = bad;
    assert_int_equal(attention_varlen_cuda(&b, dcu, NULL, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "decrease"));
    assert_int_equal(attention_varlen_cuda(&a, NULL, NULL, msg, sizeof msg), -1);
    b = a;
    b.heads = 0;
    assert_int_equal(attention_varlen_cuda(&b, dcu, NULL, msg, sizeof msg), -1);
    b = a;
    b.nseq = 0;
    assert_int_equal(attention_varlen_cuda(&b, dcu, NULL, msg, sizeof msg), 0);
    float *h = malloc(9 * 3 * 256 * sizeof *h);
    assert_non_null(h);
    fetch_guarded(h, buf, 9 * 3 * 256, "attention refusals");
    for (int i = 0; i < 9 * 3 * 256; i++)
        if (!isnan(h[i]))
            FAIL("a refused attention call wrote element %d", i);
    free(h);
    dev_guarded_free(buf);
    cuda_rt_free(dcu);
}

/* ---- embeddings ---- */

/* rows x hidden random values stored as dt at a 2-element offset into a
 * device allocation (a table inside one weights buffer); vals gets what
 * they stand for. Returns the host copy (for embed_sum); *dev the device
 * table, *base what to free. */
static void *emb_table(struct rng *rg, int rows, int hidden, enum dtype dt, void **dev,
                       void **base)
{
    const size_t n = (size_t)rows * (size_t)hidden, es = dtype_size(dt);
    unsigned char *h = malloc((n + 2) * es);
    assert_non_null(h);
    for (size_t i = 0; i < n + 2; i++) {
        const float f = rng_uniform(rg, -1, 1);
        if (dt == DTYPE_F32) {
            memcpy(h + i * 4, &f, 4);
        } else {
            const uint16_t u = dt == DTYPE_F16 ? dtype_f32_to_f16(f) : dtype_f32_to_bf16(f);
            memcpy(h + i * 2, &u, 2);
        }
    }
    *base = dev_dup(h, (n + 2) * es);
    *dev = (unsigned char *)*base + 2 * es;
    return h + 2 * es;
}

static void test_embed(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    struct rng rg = rng_for(__func__);
    struct batch bt[16];
    const int nb = batches_all(&rg, bt);
    static const int hiddens[] = {1, 3, 384, 385, 768};
    char msg[256];
    int checks = 0;
    for (size_t hi = 0; hi < sizeof hiddens / sizeof *hiddens; hi++)
        for (int bi = 0; bi < nb; bi++) {
            if (g_quick && hi % 2)
                continue;
            const int hidden = hiddens[hi];
            const enum dtype wdt = (enum dtype)((hi + (size_t)bi) % 3);
            const enum dtype pdt = (enum dtype)((hi + (size_t)bi + 1) % 3);
            const int vocab = 1000, npos = 512, ntype = 2;
            void *dw, *dp, *dt, *bw, *bp, *btb;
            unsigned char *hw = emb_table(&rg, vocab, hidden, wdt, &dw, &bw);
            unsigned char *hp = emb_table(&rg, npos, hidden, pdt, &dp, &bp);
            unsigned char *ht = emb_table(&rg, ntype, hidden, DTYPE_F32, &dt, &btb);
            const size_t rows = (size_t)bt[bi].rows, n = rows * (size_t)hidden;
            int32_t *ids = malloc((rows + 1) * sizeof *ids), *tys = malloc((rows + 1) * sizeof *tys);
            float *cpu = malloc(n * sizeof *cpu), *gpu = malloc(n * sizeof *gpu);
            assert_true(ids && tys && cpu && gpu);
            for (size_t t = 0; t < rows; t++) {
                ids[t] = (int32_t)(rng_next(&rg) % vocab);
                tys[t] = (int32_t)(rng_next(&rg) % ntype);
            }
            const int with_types = bi % 2, with_pos = bi != 1;
            struct embed_table w = {hw, wdt, vocab}, p = {hp, pdt, npos}, ty = {ht, DTYPE_F32, ntype};
            for (size_t i = 0; i < n; i++)
                cpu[i] = NAN;
            if (embed_sum(&w, with_pos ? &p : NULL, &ty, hidden, ids, with_types ? tys : NULL,
                          bt[bi].cu, bt[bi].nseq, cpu, msg, sizeof msg))
                FAIL("embed CPU reference: %s", msg);
            struct embed_table dwt = {dw, wdt, vocab}, dpt = {dp, pdt, npos},
                               dtt = {dt, DTYPE_F32, ntype};
            int32_t *dids = dev_dup(ids, (rows + 1) * sizeof *ids);
            int32_t *dtys = dev_dup(tys, (rows + 1) * sizeof *tys);
            int *dcu = dev_dup(bt[bi].cu, ((size_t)bt[bi].nseq + 1) * sizeof(int));
            float *dout = dev_guarded(n);
            struct embed_ids hid = {ids, with_types ? tys : NULL, bt[bi].cu};
            struct embed_ids did = {dids, dtys, dcu};
            char what[160];
            snprintf(what, sizeof what, "embed hidden %d word %s pos %s, %s%s", hidden,
                     dtype_name(wdt), with_pos ? dtype_name(pdt) : "none", bt[bi].name,
                     with_types ? ", type ids" : "");
            if (embed_sum_cuda(&dwt, with_pos ? &dpt : NULL, &dtt, hidden, &hid, &did,
                               bt[bi].nseq, dout, NULL, msg, sizeof msg))
                FAIL("%s: %s", what, msg);
            fetch_guarded(gpu, dout, n, what);
            /* Rows before cu[0] are the CPU's NaN too: compared as bits. */
            if (memcmp(gpu, cpu, n * sizeof *cpu))
                for (size_t i = 0; i < n; i++)
                    if (memcmp(&gpu[i], &cpu[i], sizeof *cpu))
                        FAIL("%s: row %zu col %zu = %.9g, CPU %.9g (must be the same bits)", what,
                             i / (size_t)hidden, i % (size_t)hidden, gpu[i], cpu[i]);

            if (bi == nb - 1 && rows > 3) {
                /* Refusals leave out untouched: an id past the vocabulary, a
                 * type id past its table, a sequence longer than the
                 * position table, a misaligned table, a missing device
                 * array. */
                float *dout2 = dev_guarded(n);
                int32_t keep = ids[3];
                ids[3] = vocab;
                assert_int_equal(embed_sum_cuda(&dwt, &dpt, &dtt, hidden, &hid, &did, bt[bi].nseq,
                                                dout2, NULL, msg, sizeof msg), -1);
                assert_non_null(strstr(msg, "vocabulary"));
                ids[3] = keep;
                struct embed_ids hid2 = hid;
                int32_t tkeep = tys[2];
                tys[2] = ntype;
                hid2.type_ids = tys;
                assert_int_equal(embed_sum_cuda(&dwt, &dpt, &dtt, hidden, &hid2, &did, bt[bi].nseq,
                                                dout2, NULL, msg, sizeof msg), -1);
                tys[2] = tkeep;
                struct embed_table shortp = dpt;
                shortp.rows = 4;
                assert_int_equal(embed_sum_cuda(&dwt, &shortp, &dtt, hidden, &hid, &did,
                                                bt[bi].nseq, dout2, NULL, msg, sizeof msg), -1);
                assert_non_null(strstr(msg, "position table"));
                struct embed_table odd = dwt;
                odd.data = (const unsigned char *)dw + 1;
                assert_int_equal(embed_sum_cuda(&odd, &dpt, &dtt, hidden, &hid, &did, bt[bi].nseq,
                                                dout2, NULL, msg, sizeof msg), -1);
                assert_non_null(strstr(msg, "aligned"));
                struct embed_ids nodev = did;
                nodev.ids = NULL;
                assert_int_equal(embed_sum_cuda(&dwt, &dpt, &dtt, hidden, &hid, &nodev,
                                                bt[bi].nseq, dout2, NULL, msg, sizeof msg), -1);
                float *h2 = malloc(n * sizeof *h2);
                assert_non_null(h2);
                fetch_guarded(h2, dout2, n, "embed refusals");
                for (size_t i = 0; i < n; i++)
                    if (!isnan(h2[i]))
                        FAIL("a refused embed call wrote element %zu", i);
                /* A device copy that differs from the checked host one: the
                 * bad row is NaN, nothing is read outside the table, the
                 * other rows are right. */
                const int32_t big = 1 << 30;
                const size_t badrow = (size_t)bt[bi].cu[0] + 1;
                assert_int_equal(cuda_rt_upload(dids + badrow, &big, sizeof big, msg, sizeof msg), 0);
                assert_int_equal(embed_sum_cuda(&dwt, with_pos ? &dpt : NULL, &dtt, hidden, &hid,
                                                &did, bt[bi].nseq, dout2, NULL, msg, sizeof msg),
                                 0);
                fetch_guarded(h2, dout2, n, "embed with a bad device id");
                for (size_t i = 0; i < n; i++) {
                    const int in_bad = i / (size_t)hidden == badrow;
                    if (in_bad ? !isnan(h2[i]) : memcmp(&h2[i], &cpu[i], sizeof *h2) != 0)
                        FAIL("embed with a bad device id at row %zu: element %zu = %g", badrow, i,
                             h2[i]);
                }
                free(h2);
                dev_guarded_free(dout2);
            }
            cuda_rt_free(bw);
            cuda_rt_free(bp);
            cuda_rt_free(btb);
            cuda_rt_free(dids);
            cuda_rt_free(dtys);
            cuda_rt_free(dcu);
            dev_guarded_free(dout);
            free(hw - 2 * dtype_size(wdt));
            free(hp - 2 * dtype_size(pdt));
            free(ht - 2 * dtype_size(DTYPE_F32));
            free(ids);
            free(tys);
            free(cpu);
            free(gpu);
            checks++;
        }
    print_message("embed: %d cases\n", checks);
    batches_free(bt, nb);
}

/* ---- pooling ---- */

static void test_pool(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    struct rng rg = rng_for(__func__);
    struct batch bt[16];
    const int nb = batches_all(&rg, bt);
    static const int hiddens[] = {1, 3, 64, 65, 384, 385, 768};
    char msg[256];
    int checks = 0;
    for (size_t hi = 0; hi < sizeof hiddens / sizeof *hiddens; hi++)
        for (int bi = 0; bi < nb; bi++)
            for (int mode = POOL_MEAN; mode <= POOL_MAX; mode++)
                for (unsigned flags = 0; flags <= POOL_L2; flags++) {
                    if (g_quick && (hi % 2 || bi % 2))
                        continue;
                    const int hidden = hiddens[hi];
                    const size_t ldx = (size_t)hidden + 5, rows = (size_t)bt[bi].rows;
                    const size_t nx = rows * ldx, no = (size_t)bt[bi].nseq * (size_t)hidden;
                    float *x = malloc((nx + 1) * sizeof *x), *cpu = malloc(no * sizeof *cpu);
                    float *gpu = malloc(no * sizeof *gpu);
                    assert_true(x && cpu && gpu);
                    fill(&rg, x, nx, -2, 2);
                    if (mode == POOL_MAX && rows > 2)
                        x[ldx + 0] = NAN;   /* propagates in its sequence's column 0 */
                    if (pool_rows((enum pool_mode)mode, flags, x, ldx, hidden, bt[bi].cu,
                                  bt[bi].nseq, cpu))
                        FAIL("pool CPU reference refused");
                    float *dx = dev_dup(x, (nx + 1) * sizeof *x), *dout = dev_guarded(no);
                    int *dcu = dev_dup(bt[bi].cu, ((size_t)bt[bi].nseq + 1) * sizeof(int));
                    char what[160];
                    snprintf(what, sizeof what, "pool %s%s hidden %d, %s",
                             mode == POOL_MEAN ? "mean" : mode == POOL_CLS ? "cls" : "max",
                             flags ? "+L2" : "", hidden, bt[bi].name);
                    if (pool_rows_cuda((enum pool_mode)mode, flags, dx, ldx, hidden, bt[bi].cu,
                                       dcu, bt[bi].nseq, dout, NULL, msg, sizeof msg))
                        FAIL("%s: %s", what, msg);
                    fetch_guarded(gpu, dout, no, what);
                    /* Without L2 the same operations in the same order: the
                     * same bits. With L2 the norm is summed in another order
                     * (double, then rounded to a F32 reciprocal): a few ulp. */
                    for (size_t i = 0; i < no; i++) {
                        const float gv = gpu[i], cv = cpu[i];
                        const int same = memcmp(&gv, &cv, sizeof gv) == 0 ||
                                         (isnan(gv) && isnan(cv));
                        if (same)
                            continue;
                        if (!flags || !(fabs((double)gv - cv) <= 8 * U * fabs(cv)))
                            FAIL("%s: sequence %zu col %zu = %.9g, CPU %.9g", what,
                                 i / (size_t)hidden, i % (size_t)hidden, gv, cv);
                    }
                    cuda_rt_free(dx);
                    cuda_rt_free(dcu);
                    dev_guarded_free(dout);
                    free(x);
                    free(cpu);
                    free(gpu);
                    checks++;
                }
    /* Refusals. */
    int cu[3] = {0, 4, 2};
    float *dout = dev_guarded(16);
    assert_int_equal(pool_rows_cuda(POOL_MEAN, 0, dout, 8, 8, cu, cu, 2, dout, NULL, msg,
                                    sizeof msg), -1);
    assert_non_null(strstr(msg, "decrease"));
    assert_int_equal(pool_rows_cuda((enum pool_mode)7, 0, dout, 8, 8, cu, cu, 1, dout, NULL, msg,
                                    sizeof msg), -1);
    assert_int_equal(pool_rows_cuda(POOL_MEAN, 0, dout, 7, 8, cu, cu, 1, dout, NULL, msg,
                                    sizeof msg), -1);
    dev_guarded_free(dout);
    print_message("pool: %d cases\n", checks);
    batches_free(bt, nb);
}

/* ---- dense: GELU and the encoder's layer shapes ---- */

static double act_ref(enum dense_act act, double z)
{
    switch (act) {
    case DENSE_ACT_RELU: return z > 0 ? z : 0;
    case DENSE_ACT_GELU: return 0.5 * z * erfc(-z / sqrt(2.0));   /* = 0.5 z (1 + erf(z/sqrt2)) */
    case DENSE_ACT_TANH: return tanh(z);
    case DENSE_ACT_SIGMOID: return 1 / (1 + exp(-z));
    default: return z;
    }
}

/* The activations in the GPU epilogue, alone: in = 1 and x = 0 make y[o] =
 * act(0 * 1 + b[o]) = act(b[o]) exactly before the activation. A sweep of b
 * against libm in double with test_kernels.c's bounds for the CPU: 8 ulp of
 * the result (GELU 10, below); at negative b GELU also its condition number b^2 ulp and
 * one ulp of |b| absolute. That absolute slack would hide the cancellation
 * of 1 + erff(a), so GELU on [-5.5, 0) must also hold relative to the
 * result alone. There a = -v/sqrt2 is off by at most 1.3u relative (the F32
 * constant 0.29u, the product u), ln erfc has slope at most 2a + 1/a, so the
 * argument costs 1.3 (2a^2 + 1) = 1.3 (v^2 + 1) ulp; erfcf's own error is 4
 * ulp (CUDA's documented bound; up to 8 in these units), the final product
 * 1: 12 + 2 v^2 ulp bounds it. The erf form is off by about 1e3 ulp at -4
 * and by more than the result itself at -5.5. */
static void test_dense_activations(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    struct rng rg = rng_for(__func__);
    enum { N = 40000 };
    float *b = malloc(N * sizeof *b), *y = malloc(N * sizeof *y), *ones = malloc(N * sizeof *ones);
    assert_true(b && y && ones);
    for (int i = 0; i < N - 200; i++)        /* every 0.001 over [-18, 18], jittered */
        b[i] = -18.0f + 36.0f * (float)i / (N - 200) + rng_uniform(&rg, -5e-4f, 5e-4f);
    for (int i = N - 200; i < N - 20; i++)   /* wide magnitudes, both signs */
        b[i] = (i & 1 ? -1 : 1) * ldexpf(rng_uniform(&rg, 1, 2), (i % 90) - 45);
    const float special[] = {0.0f, -0.0f, 0.625f, -0.625f, 1.3035f, -1.3035f, 5.6568542f,
                             -5.6568542f, 87.0f, -87.0f, 88.8f, -88.8f, 1e30f, -1e30f, 1e-30f,
                             -1e-30f, 3.4e38f, -3.4e38f, 0.0f, NAN};
    memcpy(b + N - 20, special, sizeof special);
    for (int i = 0; i < N; i++)
        ones[i] = 1.0f;
    const float zero = 0.0f;
    float *dx = dev_dup(&zero, sizeof zero);
    char msg[256];
    for (int a = DENSE_ACT_NONE; a <= DENSE_ACT_SIGMOID; a++) {
        const enum dense_act act = (enum dense_act)a;
        struct dense_cuda *d;
        if (dense_cuda_prepare(ones, DTYPE_F32, b, DTYPE_F32, N, 1, act, &d, msg, sizeof msg))
            FAIL("prepare: %s", msg);
        float *dy = dev_guarded(N);
        if (dense_cuda_run(d, dx, 1, dy, NULL, msg, sizeof msg))
            FAIL("run: %s", msg);
        fetch_guarded(y, dy, N, dense_act_name(act));
        double worst = 0;
        int worst_i = 0;
        for (int i = 0; i < N; i++) {
            const double ref = act_ref(act, b[i]);
            if (isnan(ref)) {
                if (!isnan(y[i]))
                    FAIL("%s(%g) = %g, want NaN", dense_act_name(act), b[i], y[i]);
                continue;
            }
            /* GELU's base is 10: erfcf's 4 ulp of a value in [1, 2) (positive
             * v) are up to 8 of these units, plus the final product. */
            double bb = b[i], ulps = act == DENSE_ACT_GELU ? 10 : 8, abs_ok = 0x1p-126;
            if (act == DENSE_ACT_GELU && bb < 0) {
                ulps += bb * bb;
                abs_ok += U * fabs(bb);
            }
            const double err =
                y[i] == ref ? 0 : fmax(0, fabs(y[i] - ref) - abs_ok) / (U * fabs(ref));
            if (!(err <= ulps))
                FAIL("%s(%.9g) = %.9g, reference %.9g: %.3g ulp (allowed %.3g)",
                     dense_act_name(act), b[i], y[i], ref, err, ulps);
            if (act == DENSE_ACT_GELU && bb < 0 && bb >= -5.5) {
                const double rel = fabs(y[i] - ref) / (U * fabs(ref)), allowed = 12 + 2 * bb * bb;
                if (!(rel <= allowed))
                    FAIL("gelu(%.9g) = %.9g, reference %.9g: %.3g ulp relative to the result "
                         "(allowed %.3g): 1 + erf cancelling?", b[i], y[i], ref, rel, allowed);
            }
            if (err > worst) {
                worst = err;
                worst_i = i;
            }
        }
        print_message("GPU %s: worst %.2f ulp at %.9g\n", dense_act_name(act), worst, b[worst_i]);
        dense_cuda_free(d);
        dev_guarded_free(dy);
    }
    cuda_rt_free(dx);
    free(b);
    free(y);
    free(ones);
}

struct layer_shape {
    const char *name;
    int in, out;
    enum dense_act act;
};

static const struct layer_shape enc_layers[] = {
    {"MiniLM QKV", 384, 1152, DENSE_ACT_NONE},     {"MiniLM attn out", 384, 384, DENSE_ACT_NONE},
    {"MiniLM FFN up", 384, 1536, DENSE_ACT_GELU},  {"MiniLM FFN down", 1536, 384, DENSE_ACT_NONE},
    {"BERT-base QKV", 768, 2304, DENSE_ACT_NONE},  {"BERT-base attn out", 768, 768, DENSE_ACT_NONE},
    {"BERT-base FFN up", 768, 3072, DENSE_ACT_GELU}, {"BERT-base FFN down", 3072, 768, DENSE_ACT_NONE},
};

/* Weights as stored (dt) and as the F32 they stand for. */
static void *make_weights(struct rng *rg, enum dtype dt, size_t n, float scale, float *exact)
{
    void *w = malloc(n * dtype_size(dt));
    assert_non_null(w);
    for (size_t i = 0; i < n; i++) {
        float v = rng_uniform(rg, -scale, scale);
        if (dt == DTYPE_F32) {
            ((float *)w)[i] = v;
        } else {
            const uint16_t h = dt == DTYPE_F16 ? dtype_f32_to_f16(v) : dtype_f32_to_bf16(v);
            ((uint16_t *)w)[i] = h;
            v = dt == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
        }
        if (exact)
            exact[i] = v;
    }
    return w;
}

/* The encoder's layers on the GPU against dense_cpu_run on the same weights
 * (what the cpu backend computes: exact x). The tensor-core path rounds x to
 * the weight's half type, each product then off by at most 2^-9 (BF16) or
 * 2^-12 (F16) relatively; the sums are F32 on both sides (the MMA's
 * alignment of each 16-deep step: 4 ulp of the magnitude per step, as
 * test_cuda_kernels.c derives). So, with mag = |b| + sum |x_k w_k|:
 *   |gpu - cpu| <= 1.13 (rho + (in/16 + 4) 2^-21 + 2^-20) mag
 * rho the rounding of x (0 on the F32 paths), 1.13 GELU's largest slope,
 * 2e-5 the CPU's own error and the F32 paths' (both checked to 1e-5 of mag
 * against float64 in test_kernels.c and test_cuda_kernels.c). About 2e-3 of
 * mag for BF16: within the "~1e-2" expected of BF16 inputs. */
static void test_dense_encoder_shapes(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    struct rng rg = rng_for(__func__);
    static const int rowss[] = {7, 33, 128, 256};
    char msg[256];
    int checks = 0;
    for (size_t li = 0; li < sizeof enc_layers / sizeof *enc_layers; li++)
        for (int dti = 0; dti < 3; dti++) {
            const struct layer_shape *L = &enc_layers[li];
            const enum dtype dt = dti == 0 ? DTYPE_BF16 : dti == 1 ? DTYPE_F16 : DTYPE_F32;
            /* Every layer in BF16 (the benchmark's dtype); F16 and F32 on
             * MiniLM's FFN. */
            if (dt != DTYPE_BF16 && li != 2 && li != 3)
                continue;
            if (g_quick && (li > 3 || dt != DTYPE_BF16))
                continue;
            const size_t nw = (size_t)L->out * (size_t)L->in;
            float *wx = malloc(nw * sizeof *wx), *bias = malloc((size_t)L->out * sizeof *bias);
            assert_true(wx && bias);
            void *w = make_weights(&rg, dt, nw, 1.0f / sqrtf((float)L->in), wx);
            fill(&rg, bias, (size_t)L->out, -0.1f, 0.1f);
            struct dense_cpu *dc;
            struct dense_cuda *dg;
            if (dense_cpu_prepare(w, dt, bias, DTYPE_F32, L->out, L->in, L->act, &dc, msg,
                                  sizeof msg))
                FAIL("CPU prepare: %s", msg);
            if (dense_cuda_prepare(w, dt, bias, DTYPE_F32, L->out, L->in, L->act, &dg, msg,
                                   sizeof msg))
                FAIL("GPU prepare: %s", msg);
            for (size_t ri = 0; ri < sizeof rowss / sizeof *rowss; ri++) {
                const int rows = rowss[ri];
                if (g_quick && rows != 33)
                    continue;
                const size_t nx = (size_t)rows * L->in, ny = (size_t)rows * L->out;
                float *x = malloc(nx * sizeof *x), *cpu = malloc(ny * sizeof *cpu);
                float *gpu = malloc(ny * sizeof *gpu);
                assert_true(x && cpu && gpu);
                /* Layer-normed hidden states are about unit scale; the FFN's
                 * down projection sees GELU outputs, mostly positive. */
                fill(&rg, x, nx, li % 4 == 3 ? -0.2f : -2.0f, 2.0f);
                dense_cpu_run(dc, x, rows, cpu);
                float *dx = dev_dup(x, nx * sizeof *x), *dy = dev_guarded(ny);
                const char *kname = dense_cuda_kernel_name(dg, rows);
                char what[160];
                snprintf(what, sizeof what, "%s (%d -> %d, %s) %s, %d rows, kernel %s", L->name,
                         L->in, L->out, dense_act_name(L->act), dtype_name(dt), rows, kname);
                if (dense_cuda_run(dg, dx, rows, dy, NULL, msg, sizeof msg))
                    FAIL("%s: %s", what, msg);
                fetch_guarded(gpu, dy, ny, what);
                const int tc = strncmp(kname, "tc", 2) == 0;
                const double rho = !tc ? 0 : dt == DTYPE_BF16 ? 0x1p-9 : 0x1p-12;
                const double rel = 1.13 * (rho + (L->in / 16 + 4) * 0x1p-21 + 2e-5);
                for (int r = 0; r < rows; r++)
                    for (int o = 0; o < L->out; o++) {
                        double mag = fabs(bias[o]);
                        const float *xr = x + (size_t)r * L->in, *wr = wx + (size_t)o * L->in;
                        for (int k = 0; k < L->in; k++)
                            mag += fabs((double)xr[k] * wr[k]);
                        const float gv = gpu[(size_t)r * L->out + o], cv = cpu[(size_t)r * L->out + o];
                        if (!(fabs((double)gv - cv) <= rel * mag))
                            FAIL("%s: y[%d][%d] = %.9g, CPU %.9g (tolerance %.3g)", what, r, o,
                                 gv, cv, rel * mag);
                    }
                cuda_rt_free(dx);
                dev_guarded_free(dy);
                free(x);
                free(cpu);
                free(gpu);
                checks++;
            }
            dense_cpu_free(dc);
            dense_cuda_free(dg);
            free(w);
            free(wx);
            free(bias);
        }
    print_message("dense at the encoder's shapes: %d cases\n", checks);
}

/* ---- one encoder layer, composed ---- */

/* A BERT layer's weights, as stored (dt) for both sides. */
struct layer_w {
    void *wqkv, *wo, *w1, *w2;
    float *bqkv, *bo, *b1, *b2, *g1, *be1, *g2, *be2;
};

/* What the encoder's forward pass does with these kernels (post-LN BERT):
 *   h = LN(embed)                 then per layer
 *   qkv = h Wqkv^T + b            [rows][3H]: q, k, v column slices, ld_in 3H
 *   a = attention(qkv)            [rows][H]
 *   h = LN(h + a Wo^T + bo)       the residual fused into the layer norm
 *   f = GELU(h W1^T + b1)         [rows][I]
 *   h = LN(h + f W2^T + b2)
 * and the sentence vector = L2(mean over the sequence's rows of h). Run on
 * the CPU kernels and on the GPU ones (buffers on the device throughout,
 * one upload of the inputs, one download of each result), MiniLM's shape,
 * random weights (nn.Linear's init, gamma near 1), two layers, a mixed batch. */
static void layer_forward_cpu(const struct layer_w *Lw, enum dtype dt, int H, int heads, int I,
                              const int *cu, int nseq, float *h, int rows)
{
    char msg[256];
    struct dense_cpu *qkv, *wo, *w1, *w2;
    assert_int_equal(dense_cpu_prepare(Lw->wqkv, dt, Lw->bqkv, DTYPE_F32, 3 * H, H,
                                       DENSE_ACT_NONE, &qkv, msg, sizeof msg), 0);
    assert_int_equal(dense_cpu_prepare(Lw->wo, dt, Lw->bo, DTYPE_F32, H, H, DENSE_ACT_NONE, &wo,
                                       msg, sizeof msg), 0);
    assert_int_equal(dense_cpu_prepare(Lw->w1, dt, Lw->b1, DTYPE_F32, I, H, DENSE_ACT_GELU, &w1,
                                       msg, sizeof msg), 0);
    assert_int_equal(dense_cpu_prepare(Lw->w2, dt, Lw->b2, DTYPE_F32, H, I, DENSE_ACT_NONE, &w2,
                                       msg, sizeof msg), 0);
    float *t3 = malloc((size_t)rows * 3 * H * sizeof *t3), *a = malloc((size_t)rows * H * sizeof *a);
    float *t = malloc((size_t)rows * H * sizeof *t), *f = malloc((size_t)rows * I * sizeof *f);
    const size_t ns = attention_scratch_floats(256, H / heads);
    float *scratch = malloc(ns * sizeof *scratch);
    assert_true(t3 && a && t && f && scratch);
    dense_cpu_run(qkv, h, rows, t3);
    struct attention_args aa = {t3, t3 + H, t3 + 2 * H, 3 * (size_t)H, a, (size_t)H, cu, nseq,
                                heads, H / heads};
    assert_int_equal(attention_varlen(&aa, scratch, ns), 0);
    dense_cpu_run(wo, a, rows, t);
    layernorm_rows(t, h, Lw->g1, Lw->be1, 1e-12f, h, rows, H);
    dense_cpu_run(w1, h, rows, f);
    dense_cpu_run(w2, f, rows, t);
    layernorm_rows(t, h, Lw->g2, Lw->be2, 1e-12f, h, rows, H);
    dense_cpu_free(qkv);
    dense_cpu_free(wo);
    dense_cpu_free(w1);
    dense_cpu_free(w2);
    free(t3);
    free(a);
    free(t);
    free(f);
    free(scratch);
}

static void layer_forward_gpu(const struct layer_w *Lw, enum dtype dt, int H, int heads, int I,
                              const int *cu, const int *dcu, int nseq, float *dh, int rows)
{
    char msg[256];
    struct dense_cuda *qkv, *wo, *w1, *w2;
    assert_int_equal(dense_cuda_prepare(Lw->wqkv, dt, Lw->bqkv, DTYPE_F32, 3 * H, H,
                                        DENSE_ACT_NONE, &qkv, msg, sizeof msg), 0);
    assert_int_equal(dense_cuda_prepare(Lw->wo, dt, Lw->bo, DTYPE_F32, H, H, DENSE_ACT_NONE, &wo,
                                        msg, sizeof msg), 0);
    assert_int_equal(dense_cuda_prepare(Lw->w1, dt, Lw->b1, DTYPE_F32, I, H, DENSE_ACT_GELU, &w1,
                                        msg, sizeof msg), 0);
    assert_int_equal(dense_cuda_prepare(Lw->w2, dt, Lw->b2, DTYPE_F32, H, I, DENSE_ACT_NONE, &w2,
                                        msg, sizeof msg), 0);
    float *g1 = dev_dup(Lw->g1, H * sizeof(float)), *be1 = dev_dup(Lw->be1, H * sizeof(float));
    float *g2 = dev_dup(Lw->g2, H * sizeof(float)), *be2 = dev_dup(Lw->be2, H * sizeof(float));
    float *t3 = dev_guarded((size_t)rows * 3 * H), *a = dev_guarded((size_t)rows * H);
    float *t = dev_guarded((size_t)rows * H), *f = dev_guarded((size_t)rows * I);
    struct attention_args aa = {t3, t3 + H, t3 + 2 * H, 3 * (size_t)H, a, (size_t)H, cu, nseq,
                                heads, H / heads};
    if (dense_cuda_run(qkv, dh, rows, t3, NULL, msg, sizeof msg) ||
        attention_varlen_cuda(&aa, dcu, NULL, msg, sizeof msg) ||
        dense_cuda_run(wo, a, rows, t, NULL, msg, sizeof msg) ||
        layernorm_rows_cuda(t, dh, g1, be1, 1e-12f, dh, rows, H, NULL, msg, sizeof msg) ||
        dense_cuda_run(w1, dh, rows, f, NULL, msg, sizeof msg) ||
        dense_cuda_run(w2, f, rows, t, NULL, msg, sizeof msg) ||
        layernorm_rows_cuda(t, dh, g2, be2, 1e-12f, dh, rows, H, NULL, msg, sizeof msg))
        FAIL("GPU layer: %s", msg);
    /* Everything ran on the default stream; a synchronous copy waits for it
     * before the weights and buffers are freed. */
    float done;
    if (cuda_rt_download(&done, dh, sizeof done, msg, sizeof msg))
        FAIL("GPU layer (a kernel may have faulted): %s", msg);
    dense_cuda_free(qkv);
    dense_cuda_free(wo);
    dense_cuda_free(w1);
    dense_cuda_free(w2);
    cuda_rt_free(g1);
    cuda_rt_free(be1);
    cuda_rt_free(g2);
    cuda_rt_free(be2);
    dev_guarded_free(t3);
    dev_guarded_free(a);
    dev_guarded_free(t);
    dev_guarded_free(f);
}

static void layer_make(struct rng *rg, enum dtype dt, int H, int I, struct layer_w *w)
{
    const float sh = 1.0f / sqrtf((float)H), si = 1.0f / sqrtf((float)I);
    w->wqkv = make_weights(rg, dt, (size_t)3 * H * H, sh, NULL);
    w->wo = make_weights(rg, dt, (size_t)H * H, sh, NULL);
    w->w1 = make_weights(rg, dt, (size_t)I * H, sh, NULL);
    w->w2 = make_weights(rg, dt, (size_t)H * I, si, NULL);
    float **vecs[] = {&w->bqkv, &w->bo, &w->b1, &w->b2, &w->g1, &w->be1, &w->g2, &w->be2};
    const int lens[] = {3 * H, H, I, H, H, H, H, H};
    for (int i = 0; i < 8; i++) {
        *vecs[i] = malloc((size_t)lens[i] * sizeof(float));
        assert_non_null(*vecs[i]);
        const int gamma = i == 4 || i == 6;
        fill(rg, *vecs[i], (size_t)lens[i], gamma ? 0.8f : -0.1f, gamma ? 1.2f : 0.1f);
    }
}

static void layer_free(struct layer_w *w)
{
    void *ps[] = {w->wqkv, w->wo, w->w1, w->w2, w->bqkv, w->bo, w->b1, w->b2,
                  w->g1,   w->be1, w->g2, w->be2};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        free(ps[i]);
}

/* Agreement: per row, ||gpu - cpu||_2 <= tol ||cpu||_2 on the hidden states
 * (unit scale after the layer norm), and a cosine >= 1 - tol^2 / 2 between the
 * pooled, normalised sentence vectors. tol: 1e-4 with F32 weights (every
 * kernel in F32 with exact inputs: the two sides differ by rounding only),
 * 1e-2 with BF16 weights (x rounded to BF16 in each of the 4 x 2
 * tensor-core GEMMs, each adding about 2^-9 of its result's scale, spread by
 * the layer norms). An emulation of the tensor cores' rounding on the CPU
 * gave 1.2e-3 and a cosine of 1 - 7e-7 on this batch; a GPU run prints its
 * own. */
static void test_encoder_layer(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    enum { H = 384, HEADS = 12, I = 1536, LAYERS = 2, VOCAB = 500 };
    static const int lens[] = {5, 0, 37, 200, 1, 64, 129, 7};
    const int nseq = (int)(sizeof lens / sizeof *lens);
    struct batch bt = batch_make(lens, nseq, 0);
    const size_t rows = (size_t)bt.rows, nh = rows * H;
    char msg[256];
    for (int dti = 0; dti < 2; dti++) {
        if (g_quick && dti == 1)
            continue;
        const enum dtype dt = dti == 0 ? DTYPE_BF16 : DTYPE_F32;
        const double tol = dt == DTYPE_F32 ? 1e-4 : 1e-2;
        struct rng rg = rng_for(dtype_name(dt));
        /* Embeddings: F32 tables (as MiniLM's file), then their layer norm. */
        float *word = malloc((size_t)VOCAB * H * sizeof *word), *pos = malloc((size_t)512 * H * 4);
        float *typ = malloc((size_t)2 * H * 4), *eg = malloc(H * 4), *eb = malloc(H * 4);
        int32_t *ids = malloc(rows * sizeof *ids);
        float *hc = malloc(nh * sizeof *hc), *hg = malloc(nh * sizeof *hg);
        assert_true(word && pos && typ && eg && eb && ids && hc && hg);
        fill(&rg, word, (size_t)VOCAB * H, -0.1f, 0.1f);
        fill(&rg, pos, (size_t)512 * H, -0.05f, 0.05f);
        fill(&rg, typ, (size_t)2 * H, -0.05f, 0.05f);
        fill(&rg, eg, H, 0.8f, 1.2f);
        fill(&rg, eb, H, -0.1f, 0.1f);
        for (size_t t = 0; t < rows; t++)
            ids[t] = (int32_t)(rng_next(&rg) % VOCAB);
        struct layer_w lw[LAYERS];
        for (int l = 0; l < LAYERS; l++)
            layer_make(&rg, dt, H, I, &lw[l]);

        struct embed_table w = {word, DTYPE_F32, VOCAB}, p = {pos, DTYPE_F32, 512},
                           ty = {typ, DTYPE_F32, 2};
        assert_int_equal(embed_sum(&w, &p, &ty, H, ids, NULL, bt.cu, nseq, hc, msg, sizeof msg), 0);
        layernorm_rows(hc, NULL, eg, eb, 1e-12f, hc, (int)rows, H);
        for (int l = 0; l < LAYERS; l++)
            layer_forward_cpu(&lw[l], dt, H, HEADS, I, bt.cu, nseq, hc, (int)rows);
        float *pc = malloc((size_t)nseq * H * sizeof *pc), *pg = malloc((size_t)nseq * H * 4);
        assert_true(pc && pg);
        assert_int_equal(pool_rows(POOL_MEAN, POOL_L2, hc, H, H, bt.cu, nseq, pc), 0);

        float *dword = dev_dup(word, (size_t)VOCAB * H * 4), *dpos = dev_dup(pos, (size_t)512 * H * 4);
        float *dtyp = dev_dup(typ, (size_t)2 * H * 4), *deg = dev_dup(eg, H * 4), *deb = dev_dup(eb, H * 4);
        int32_t *dids = dev_dup(ids, rows * sizeof *ids);
        int *dcu = dev_dup(bt.cu, ((size_t)nseq + 1) * sizeof(int));
        float *dh = dev_guarded(nh), *dp = dev_guarded((size_t)nseq * H);
        struct embed_table dw = {dword, DTYPE_F32, VOCAB}, dpp = {dpos, DTYPE_F32, 512},
                           dty = {dtyp, DTYPE_F32, 2};
        struct embed_ids hid = {ids, NULL, bt.cu}, did = {dids, NULL, dcu};
        if (embed_sum_cuda(&dw, &dpp, &dty, H, &hid, &did, nseq, dh, NULL, msg, sizeof msg) ||
            layernorm_rows_cuda(dh, NULL, deg, deb, 1e-12f, dh, (int)rows, H, NULL, msg,
                                sizeof msg))
            FAIL("GPU embeddings: %s", msg);
        for (int l = 0; l < LAYERS; l++)
            layer_forward_gpu(&lw[l], dt, H, HEADS, I, bt.cu, dcu, nseq, dh, (int)rows);
        if (pool_rows_cuda(POOL_MEAN, POOL_L2, dh, H, H, bt.cu, dcu, nseq, dp, NULL, msg,
                           sizeof msg))
            FAIL("GPU pool: %s", msg);
        fetch_guarded(hg, dh, nh, "encoder layer");
        fetch_guarded(pg, dp, (size_t)nseq * H, "encoder layer pooled");

        double worst = 0;
        for (size_t t = 0; t < rows; t++) {
            double d2 = 0, c2 = 0;
            for (int c = 0; c < H; c++) {
                const double d = (double)hg[t * H + c] - hc[t * H + c];
                d2 += d * d;
                c2 += (double)hc[t * H + c] * hc[t * H + c];
            }
            const double rel = sqrt(d2 / c2);
            if (!(rel <= tol))
                FAIL("%s weights, %d layers: row %zu differs from the CPU by %.3g (relative L2, "
                     "allowed %.3g)", dtype_name(dt), LAYERS, t, rel, tol);
            worst = fmax(worst, rel);
        }
        double worst_cos = 1;
        for (int s = 0; s < nseq; s++) {
            if (lens[s] == 0)
                continue;
            /* Divided by the norms: each vector is unit only to F32's
             * rounding, which alone moves the plain dot product by ~1e-7. */
            double dot = 0, ng = 0, nc = 0;
            for (int c = 0; c < H; c++) {
                const double gv = pg[(size_t)s * H + c], cv = pc[(size_t)s * H + c];
                dot += gv * cv;
                ng += gv * gv;
                nc += cv * cv;
            }
            dot /= sqrt(ng * nc);
            if (!(dot >= 1 - tol * tol / 2))
                FAIL("%s weights: sentence %d's vector has cosine %.9f to the CPU's", dtype_name(dt),
                     s, dot);
            worst_cos = fmin(worst_cos, dot);
        }
        print_message("encoder layers, %s weights: worst row relative L2 %.3g, worst sentence "
                      "cosine 1 - %.3g\n", dtype_name(dt), worst, 1 - worst_cos);
        for (int l = 0; l < LAYERS; l++)
            layer_free(&lw[l]);
        void *dps[] = {dword, dpos, dtyp, deg, deb, dids, dcu};
        for (size_t i = 0; i < sizeof dps / sizeof *dps; i++)
            cuda_rt_free(dps[i]);
        dev_guarded_free(dh);
        dev_guarded_free(dp);
        void *hps[] = {word, pos, typ, eg, eb, ids, hc, hg, pc, pg};
        for (size_t i = 0; i < sizeof hps / sizeof *hps; i++)
            free(hps[i]);
    }
    free(bt.cu);
}

int main(void)
{
    seeded_init();
    const char *quick = getenv("BG_TEST_QUICK");
    g_quick = quick && *quick && strcmp(quick, "0") != 0;
    printf("test_cuda_encoder: seed %llu (BG_TEST_SEED=%llu replays it)%s\n", g_seed, g_seed,
           g_quick ? ", quick subset" : "");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_attention_batch_invariance),
        cmocka_unit_test(test_attention_api),
        cmocka_unit_test(test_embed),
        cmocka_unit_test(test_pool),
        cmocka_unit_test(test_dense_activations),
        cmocka_unit_test(test_dense_encoder_shapes),
        cmocka_unit_test(test_encoder_layer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
