/* test_cuda_kernels.c - the CUDA kernels against the CPU reference on fresh
 * random inputs every run (seed printed; BG_TEST_SEED replays): every
 * activation and weight dtype, batch sizes 1..512 on every kernel path
 * (matrix-vector, F32 tiles, tensor cores with either block tile), shapes
 * that are not multiples of any tile, outputs poisoned with NaN before each
 * call and guard zones around them that must stay untouched. Skips, saying
 * why, when no GPU is usable. */
#include <math.h>
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

#include "kernels/cuda_rt.h"
#include "kernels/dense.h"
#include "kernels/kernels.h"
#include "kernels/softmax.h"

static uint64_t g_seed;
/* BG_TEST_QUICK=1: a subset small enough to run under compute-sanitizer
 * (scripts/gpu-check), still on every kernel path. */
static int g_quick;
static int g_sm;              /* compute capability of device 0, e.g. 90 */
static int g_tc_small, g_tc_big;   /* checks that ran on each tensor-core tile */

#define GUARD 64   /* floats of NaN before and after y on the device */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float urandf(uint64_t *s, float lo, float hi)
{
    return lo + (hi - lo) * (float)((rnd(s) >> 40) / 16777216.0);
}

static int gpu_usable(void)
{
    char msg[256];
    if (kernels_cuda_devices(msg, sizeof msg) <= 0) {
        print_message("SKIPPED: no usable GPU (%s)\n", msg);
        return 0;
    }
    /* "NVIDIA H200 (sm_90, 139.8 GiB)" */
    const char *sm = cuda_rt_device_name(0, msg, sizeof msg) == 0 ? strstr(msg, "(sm_") : NULL;
    g_sm = sm ? atoi(sm + 4) : 0;
    return 1;
}

/* x as the tensor-core kernel sees it: rounded to the weight's half type
 * (round to nearest even, like __float2half_rn / __float2bfloat16_rn). */
static float round_to(enum dtype dt, float v)
{
    return dt == DTYPE_F16 ? dtype_f16_to_f32(dtype_f32_to_f16(v))
                           : dtype_bf16_to_f32(dtype_f32_to_bf16(v));
}

/* Weights stored in dt, and the F32 values they stand for. */
static void make_weights(uint64_t *s, enum dtype dt, int n, float scale, void **stored,
                         float **exact)
{
    *exact = malloc((size_t)n * sizeof(float));
    *stored = malloc((size_t)n * dtype_size(dt) + 1);
    for (int i = 0; i < n; i++) {
        float v = urandf(s, -scale, scale);
        if (dt == DTYPE_F32) {
            ((float *)*stored)[i] = v;
        } else {
            uint16_t h = dt == DTYPE_F16 ? dtype_f32_to_f16(v) : dtype_f32_to_bf16(v);
            ((uint16_t *)*stored)[i] = h;
            v = dt == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
        }
        (*exact)[i] = v;
    }
}

static double act_ref(double v, enum dense_act a)
{
    switch (a) {
    case DENSE_ACT_RELU: return v > 0 ? v : 0;
    case DENSE_ACT_GELU: return 0.5 * v * (1 + erf(v / sqrt(2.0)));
    case DENSE_ACT_TANH: return tanh(v);
    case DENSE_ACT_SIGMOID: return 1 / (1 + exp(-v));
    default: return v;
    }
}

static void check_dense(int rows, int out, int in, enum dtype dt, enum dense_act act, int bias)
{
    uint64_t s = g_seed ^ ((uint64_t)rows << 40) ^ ((uint64_t)out << 20) ^ (uint64_t)in ^
                 ((uint64_t)dt << 60) ^ ((uint64_t)act << 56);
    float scale = 1.0f / sqrtf((float)in);   /* nn.Linear's init range */
    void *w, *bst = NULL;
    float *wx, *bx = NULL;
    make_weights(&s, dt, out * in, scale, &w, &wx);
    if (bias)
        make_weights(&s, DTYPE_F32, out, scale, &bst, &bx);
    float *x = malloc((size_t)rows * in * sizeof(float));
    for (int i = 0; i < rows * in; i++)
        x[i] = urandf(&s, -2, 2);
    char msg[512];
    struct dense_cuda *d;
    /* Offset by one byte: the loader's pointers into a file are unaligned. */
    void *wu = malloc((size_t)out * in * dtype_size(dt) + 1);
    memcpy((char *)wu + 1, w, (size_t)out * in * dtype_size(dt));
    if (dense_cuda_prepare((char *)wu + 1, dt, bst, DTYPE_F32, out, in, act, &d, msg, sizeof msg))
        fail_msg("prepare: %s", msg);
    int tc = 0;
#ifdef BATCHGATE_HAVE_CUDA
    const char *kname = dense_cuda_kernel_name(d, rows);
    tc = strncmp(kname, "tc", 2) == 0;
    g_tc_small += !strcmp(kname, "tc-32x32");
    g_tc_big += !strcmp(kname, "tc-64x64");
#else
    const char *kname = "?";
#endif
    /* Halves with a large enough batch must take the tensor cores on any
     * device that has them (sm_80+), and nothing else may. */
    int want_tc = dt != DTYPE_F32 && rows >= DENSE_CUDA_TC_MIN_ROWS && g_sm >= 80;
    if (tc != want_tc)
        fail_msg("%s rows %d out %d in %d on sm_%d: kernel %s, expected %s", dtype_name(dt), rows,
                 out, in, g_sm, kname, want_tc ? "the tensor cores" : "no tensor cores");
    size_t ny = (size_t)rows * out, nyg = ny + 2 * GUARD;
    float *dx = cuda_rt_malloc((size_t)rows * in * sizeof(float), msg, sizeof msg);
    float *dyg = cuda_rt_malloc(nyg * sizeof(float), msg, sizeof msg);
    float *y = malloc(nyg * sizeof(float));
    for (size_t i = 0; i < nyg; i++)
        y[i] = NAN;
    assert_non_null(dx);
    assert_non_null(dyg);
    float *dy = dyg + GUARD;   /* 256 bytes in: as aligned as cudaMalloc's */
    assert_int_equal(cuda_rt_upload(dyg, y, nyg * sizeof(float), msg, sizeof msg), 0);
    assert_int_equal(cuda_rt_upload(dx, x, (size_t)rows * in * sizeof(float), msg, sizeof msg), 0);
    if (dense_cuda_run(d, dx, rows, dy, NULL, msg, sizeof msg))
        fail_msg("run: %s", msg);
    if (cuda_rt_download(y, dyg, nyg * sizeof(float), msg, sizeof msg))
        fail_msg("download (the kernel may have faulted): %s", msg);
    for (size_t i = 0; i < GUARD; i++)
        if (!isnan(y[i]) || !isnan(y[GUARD + ny + i]))
            fail_msg("seed %llu: %s rows %d out %d in %d kernel %s wrote outside y",
                     (unsigned long long)g_seed, dtype_name(dt), rows, out, in, kname);
    /* The tensor-core kernel computes with x rounded to the weight's type;
     * so does the reference then. */
    if (tc)
        for (int i = 0; i < rows * in; i++)
            x[i] = round_to(dt, x[i]);
    /* Tolerances, relative to mag = |b| + sum |x_k w_k| (what the rounding
     * errors of a sum scale with), at least 1:
     * - F32 paths: F32 FMAs in some order, a few ulps of mag: 1e-5.
     * - tensor cores: x_k w_k of two halves is exact in F32 (11 + 11 or
     *   8 + 8 significant bits), but the MMA sums each 16-deep fragment step
     *   into the F32 accumulator with its own alignment and truncation
     *   (undocumented; measured as up to about 2 ulps of the largest term per
     *   step on Volta..Ampere), so allow 4 ulps (2^-21) of mag per step, with
     *   ceil(in / 16) steps, plus 4 steps' worth for the bias, the epilogue's
     *   activation (|act'| <= 1.13; its own error is a few ulps) and slack.
     *   For in = 1030 that is 3.3e-5 mag; a single wrong or missing product
     *   is of order mag / in, still 30x larger. */
    double rel = tc ? ((in + 15) / 16 + 4) * ldexp(1.0, -21) : 1e-5;
    for (int r = 0; r < rows; r++)
        for (int o = 0; o < out; o++) {
            double acc = bx ? bx[o] : 0, mag = bx ? fabs(bx[o]) : 0;
            for (int k = 0; k < in; k++) {
                acc += (double)x[(size_t)r * in + k] * wx[(size_t)o * in + k];
                mag += fabs((double)x[(size_t)r * in + k] * wx[(size_t)o * in + k]);
            }
            double ref = act_ref(acc, act), got = y[GUARD + (size_t)r * out + o];
            double tol = rel * (mag > 1 ? mag : 1);
            if (!(fabs(got - ref) <= tol))   /* NaN (never written) fails too */
                fail_msg("seed %llu (BG_TEST_SEED): %s rows %d out %d in %d act %s bias %d "
                         "kernel %s: y[%d][%d] = %.9g, reference %.9g (tolerance %.3g)",
                         (unsigned long long)g_seed, dtype_name(dt), rows, out, in,
                         dense_act_name(act), bias, kname, r, o, got, ref, tol);
        }
    dense_cuda_free(d);
    cuda_rt_free(dx);
    cuda_rt_free(dyg);
    free(y);
    free(x);
    free(w);
    free(wu);
    free(wx);
    free(bst);
    free(bx);
}

static void test_dense_all_paths(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    static const int shapes[][2] = {{1, 1}, {7, 3}, {33, 17}, {64, 64}, {130, 257},
                                    {1000, 1024}, {4096, 1024}};
    static const int rows[] = {1, 2, 5, 8, 9, 31, 64, 127, 256};
    for (int dt = 0; dt < 3; dt++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
                if (shapes[sh][0] * shapes[sh][1] > 1 << 21 && rows[r] > 64)
                    continue;   /* the float64 reference would take too long */
                long work = (long)rows[r] * shapes[sh][0] * shapes[sh][1];
                if (g_quick && (r % 3 != 1 || work > (1L << 22)))
                    continue;   /* rows 2, 9, 127 */
                check_dense(rows[r], shapes[sh][0], shapes[sh][1], (enum dtype)dt,
                            (enum dense_act)((sh + r) % 5), (int)((sh + r) % 2));
            }
}

/* F16 and BF16 weights around and above DENSE_CUDA_TC_MIN_ROWS: the
 * tensor-core kernel with its element-load path (in % 8 != 0) and its
 * cp.async path (in % 8 == 0), both block tiles (the large shapes give
 * enough 64x64 blocks to fill any current GPU), every activation, with and
 * without bias, tile remainders in every dimension. */
static void test_dense_tensor_cores(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    static const int shapes[][2] = {
        {10, 67},   {1000, 1030}, {1, 1},      {33, 17},    {64, 64},   {130, 257},
        {256, 4096}, {4096, 64},  {2100, 67},  {5000, 67},  {8191, 24}, {16384, 16},
    };
    static const int rows[] = {15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 100,
                               128, 129, 200, 255, 256, 257, 300, 512};
    g_tc_small = g_tc_big = 0;
    for (int dt = DTYPE_F16; dt <= DTYPE_BF16; dt++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++)
            for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
                long work = (long)rows[r] * shapes[sh][0] * shapes[sh][1];
                if (work > (1L << 28) && rows[r] != 16 && rows[r] != 257)
                    continue;   /* the float64 reference would take too long */
                if (g_quick && ((rows[r] != 16 && rows[r] != 65 && rows[r] != 257) ||
                                work > (1L << 25)))
                    continue;   /* still both tiles, both load paths */
                check_dense(rows[r], shapes[sh][0], shapes[sh][1], (enum dtype)dt,
                            (enum dense_act)((sh + r + (size_t)dt) % 5),
                            (int)((sh + r + (size_t)dt) % 2));
            }
    print_message("tensor-core checks: %d on 32x32 tiles, %d on 64x64 tiles (sm_%d)\n",
                  g_tc_small, g_tc_big, g_sm);
    if (g_sm >= 80 && (!g_tc_small || !g_tc_big))
        fail_msg("a tensor-core tile went untested (%d small, %d big)", g_tc_small, g_tc_big);
}

static void test_softmax(void **state)
{
    (void)state;
    if (!gpu_usable()) {
        skip();
        return;
    }
    uint64_t s = g_seed;
    static const int shapes[][2] = {{1, 1}, {3, 10}, {64, 1000}, {7, 4097}};
    char msg[256];
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int rows = shapes[t][0], n = shapes[t][1];
        size_t bytes = (size_t)rows * n * sizeof(float);
        float *x = malloc(bytes), *y = malloc(bytes), *ref = malloc(bytes);
        for (int i = 0; i < rows * n; i++)
            x[i] = urandf(&s, -30, 30);
        x[0] = 1000;   /* stability */
        softmax_rows(x, ref, rows, n);
        float *dx = cuda_rt_malloc(bytes, msg, sizeof msg), *dy = cuda_rt_malloc(bytes, msg, sizeof msg);
        for (int i = 0; i < rows * n; i++)
            y[i] = NAN;
        assert_int_equal(cuda_rt_upload(dy, y, bytes, msg, sizeof msg), 0);
        assert_int_equal(cuda_rt_upload(dx, x, bytes, msg, sizeof msg), 0);
        if (softmax_cuda_rows(dx, dy, rows, n, NULL, msg, sizeof msg))
            fail_msg("softmax: %s", msg);
        assert_int_equal(cuda_rt_download(y, dy, bytes, msg, sizeof msg), 0);
        for (int i = 0; i < rows * n; i++)
            if (!(fabsf(y[i] - ref[i]) <= 1e-6f + 1e-5f * ref[i]))
                fail_msg("seed %llu: softmax %dx%d [%d] = %g, reference %g",
                         (unsigned long long)g_seed, rows, n, i, y[i], ref[i]);
        cuda_rt_free(dx);
        cuda_rt_free(dy);
        free(x);
        free(y);
        free(ref);
    }
}

int main(void)
{
    const char *env = getenv("BG_TEST_SEED");
    g_seed = env ? strtoull(env, NULL, 10) : ((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 16));
    if (!g_seed)
        g_seed = 1;
    const char *quick = getenv("BG_TEST_QUICK");
    g_quick = quick && *quick && strcmp(quick, "0") != 0;
    printf("seed %llu\n", (unsigned long long)g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense_all_paths),
        cmocka_unit_test(test_dense_tensor_cores),
        cmocka_unit_test(test_softmax),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
