/* encoder_cuda.cu - the encoder's GPU kernels timed at MiniLM's shape
 * (all-MiniLM-L6-v2: hidden 384, 12 heads of 32, FFN 1536, 6 layers) on one
 * batch of 64 sequences of 5..200 tokens (seeded: the same batch every run),
 * packed without padding. Prints markdown (scripts/gpu-check pastes it into
 * docs/BENCHMARKS.md):
 *
 *   bench_encoder_cuda [--iters N]
 *
 * Per kernel: the time per call (CUDA events around N calls on one stream
 * after 5 warmup calls, averaged) and its rate: GB/s of the bytes it must
 * move for the memory-bound ones (embed, layernorm, pool), GFLOP/s for
 * attention (4 L^2 hidden per sequence: QK^T and PV) and the dense layers
 * (2 tokens in out). The dense layers run with BF16 weights at the batch's
 * token count (the tensor-core kernel), beside cublasGemmEx on the same
 * shape (BF16 W and x, FP32 compute; x converted beforehand, no bias or
 * activation, so slightly in cuBLAS's favour). Then the whole 6-layer
 * forward, embeddings to pooled L2-normalised vectors, as one sequence of
 * launches on the stream (random weights, distinct per layer): what a batch
 * costs on the GPU without the copies in and out. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels/attention.h"
#include "kernels/cuda_rt.h"
#include "kernels/dense.h"
#include "kernels/embed.h"
#include "kernels/layernorm.h"
#include "kernels/pool.h"
}

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                       \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

/* Our calls report through msg; a failed one ends the benchmark. */
#define OK(call)                                                                              \
    do {                                                                                      \
        if ((call) < 0) {                                                                     \
            fprintf(stderr, "%s: %s\n", #call, msg);                                         \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

enum { H = 384, HEADS = 12, HD = 32, FF = 1536, LAYERS = 6, VOCAB = 30522, MAXPOS = 512, NSEQ = 64 };

static char msg[512];
static cudaStream_t g_stream;
static cudaEvent_t g_e0, g_e1;
static int g_iters = 50;

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}
static float next_f(float lo, float hi)
{
    return lo + (hi - lo) * (float)((double)(next_u64() >> 11) / 9007199254740992.0);
}

static void *dev_random_f32(size_t n, float lo, float hi)
{
    float *h = (float *)malloc(n * sizeof *h);
    if (!h) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        h[i] = next_f(lo, hi);
    void *d;
    CK(cudaMalloc(&d, n * sizeof *h));
    CK(cudaMemcpy(d, h, n * sizeof *h, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

/* Microseconds per call of fn, averaged over g_iters after 5 warmup calls. */
template <typename F>
static double time_us(F fn)
{
    for (int i = 0; i < 5; i++)
        fn();
    CK(cudaEventRecord(g_e0, g_stream));
    for (int i = 0; i < g_iters; i++)
        fn();
    CK(cudaEventRecord(g_e1, g_stream));
    CK(cudaEventSynchronize(g_e1));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, g_e0, g_e1));
    return (double)ms * 1e3 / g_iters;
}

struct layer {
    struct dense_cuda *qkv, *o, *up, *down;
    float *g1, *b1, *g2, *b2;
};

static struct dense_cuda *dense_random(int out, int in, enum dense_act act)
{
    size_t n = (size_t)out * in;
    uint16_t *w = (uint16_t *)malloc(n * 2);
    float *b = (float *)malloc((size_t)out * sizeof *b);
    if (!w || !b) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    const float r = 1.0f / sqrtf((float)in);
    for (size_t i = 0; i < n; i++)
        w[i] = dtype_f32_to_bf16(next_f(-r, r));
    for (int i = 0; i < out; i++)
        b[i] = next_f(-0.1f, 0.1f);
    struct dense_cuda *d;
    OK(dense_cuda_prepare(w, DTYPE_BF16, b, DTYPE_F32, out, in, act, &d, msg, sizeof msg));
    free(w);
    free(b);
    return d;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            g_iters = atoi(argv[++i]);
    char name[256];
    if (cuda_rt_device_name(0, name, sizeof name) < 0) {
        fprintf(stderr, "bench_encoder_cuda: no usable GPU: %s\n", name);
        return 1;
    }
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&g_e0));
    CK(cudaEventCreate(&g_e1));
    void *s = g_stream;

    /* The batch: 64 sequences of 5..200 tokens, packed. */
    int cu[NSEQ + 1], longest = 0;
    double att_flop = 0;
    cu[0] = 0;
    for (int i = 0; i < NSEQ; i++) {
        int len = 5 + (int)(next_u64() % 196);
        cu[i + 1] = cu[i] + len;
        longest = len > longest ? len : longest;
        att_flop += 4.0 * len * len * H;
    }
    const int T = cu[NSEQ];
    int32_t *ids = (int32_t *)malloc((size_t)T * sizeof *ids);
    for (int t = 0; t < T; t++)
        ids[t] = (int32_t)(next_u64() % VOCAB);
    int *dcu;
    int32_t *dids;
    CK(cudaMalloc(&dcu, sizeof cu));
    CK(cudaMemcpy(dcu, cu, sizeof cu, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dids, (size_t)T * sizeof *ids));
    CK(cudaMemcpy(dids, ids, (size_t)T * sizeof *ids, cudaMemcpyHostToDevice));

    /* F32 tables, as MiniLM's file has them. */
    struct embed_table word = {dev_random_f32((size_t)VOCAB * H, -0.1f, 0.1f), DTYPE_F32, VOCAB};
    struct embed_table pos = {dev_random_f32((size_t)MAXPOS * H, -0.05f, 0.05f), DTYPE_F32, MAXPOS};
    struct embed_table type = {dev_random_f32((size_t)2 * H, -0.05f, 0.05f), DTYPE_F32, 2};
    float *eg = (float *)dev_random_f32(H, 0.8f, 1.2f), *eb = (float *)dev_random_f32(H, -0.1f, 0.1f);
    struct layer L[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
        L[l].qkv = dense_random(3 * H, H, DENSE_ACT_NONE);
        L[l].o = dense_random(H, H, DENSE_ACT_NONE);
        L[l].up = dense_random(FF, H, DENSE_ACT_GELU);
        L[l].down = dense_random(H, FF, DENSE_ACT_NONE);
        L[l].g1 = (float *)dev_random_f32(H, 0.8f, 1.2f);
        L[l].b1 = (float *)dev_random_f32(H, -0.1f, 0.1f);
        L[l].g2 = (float *)dev_random_f32(H, 0.8f, 1.2f);
        L[l].b2 = (float *)dev_random_f32(H, -0.1f, 0.1f);
    }
    float *h = (float *)dev_random_f32((size_t)T * H, -1, 1);
    float *t = (float *)dev_random_f32((size_t)T * H, -1, 1);
    float *a = (float *)dev_random_f32((size_t)T * H, -1, 1);
    float *qkv = (float *)dev_random_f32((size_t)T * 3 * H, -1, 1);
    float *f = (float *)dev_random_f32((size_t)T * FF, 0, 1);
    float *pooled = (float *)dev_random_f32((size_t)NSEQ * H, 0, 1);

    const struct embed_ids hid = {ids, NULL, cu}, did = {dids, NULL, dcu};
    const struct attention_args att = {qkv, qkv + H, qkv + 2 * H, 3 * (size_t)H, a, (size_t)H,
                                       cu, NSEQ, HEADS, HD};

    printf("Encoder kernels at MiniLM's shape (hidden %d, %d heads x %d, FFN %d) on %s: one "
           "batch of %d sequences of 5-200 tokens, packed (%d tokens, longest %d); F32 "
           "activations, BF16 dense weights, F32 embedding tables; mean of %d calls after "
           "warmup (CUDA events). cuBLAS: cublasGemmEx, BF16 W and x, FP32 compute, no bias or "
           "activation.\n\n", H, HEADS, HD, FF, name, NSEQ, T, longest, g_iters);
    printf("| step | kernel | time (us) | rate | cuBLAS (us) |\n");
    printf("| --- | --- | ---: | ---: | ---: |\n");
    const double tokens_h_bytes = (double)T * H * 4;
    double us = time_us([&] {
        OK(embed_sum_cuda(&word, &pos, &type, H, &hid, &did, NSEQ, h, s, msg, sizeof msg));
    });
    printf("| embeddings (word + position + type) | embed_sum_cuda | %.1f | %.0f GB/s |  |\n", us,
           4 * tokens_h_bytes / us / 1e3);
    us = time_us([&] {
        OK(layernorm_rows_cuda(t, h, eg, eb, 1e-12f, a, T, H, s, msg, sizeof msg));
    });
    printf("| layer norm with residual, %d x %d | layernorm_rows_cuda | %.1f | %.0f GB/s |  |\n",
           T, H, us, 3 * tokens_h_bytes / us / 1e3);
    us = time_us([&] { OK(attention_varlen_cuda(&att, dcu, s, msg, sizeof msg)); });
    printf("| attention, fused QKV, %d heads x %d | attention_varlen_cuda | %.1f | %.0f GFLOP/s "
           "|  |\n", HEADS, HD, us, att_flop / us / 1e3);
    us = time_us([&] {
        OK(pool_rows_cuda(POOL_MEAN, POOL_L2, h, H, H, cu, dcu, NSEQ, pooled, s, msg, sizeof msg));
    });
    printf("| mean pooling + L2, %d sequences | pool_rows_cuda | %.1f | %.0f GB/s |  |\n", NSEQ, us,
           tokens_h_bytes / us / 1e3);

    cublasHandle_t cb;
    if (cublasCreate(&cb) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate failed\n");
        return 1;
    }
    if (cublasSetStream(cb, g_stream) != CUBLAS_STATUS_SUCCESS)
        return 1;
    const struct {
        const char *what;
        struct dense_cuda *d;
        int in, out;
        const float *x;
        float *y;
    } dl[] = {
        {"QKV", L[0].qkv, H, 3 * H, h, qkv},
        {"attention output", L[0].o, H, H, a, t},
        {"FFN up + GELU", L[0].up, H, FF, h, f},
        {"FFN down", L[0].down, FF, H, f, t},
    };
    void *wb, *xb;
    CK(cudaMalloc(&wb, (size_t)FF * H * 2));
    CK(cudaMalloc(&xb, (size_t)T * FF * 2));
    CK(cudaMemset(wb, 0, (size_t)FF * H * 2));
    CK(cudaMemset(xb, 0, (size_t)T * FF * 2));
    for (size_t i = 0; i < sizeof dl / sizeof dl[0]; i++) {
        us = time_us([&] { OK(dense_cuda_run(dl[i].d, dl[i].x, T, dl[i].y, s, msg, sizeof msg)); });
        const float alpha = 1.0f, beta = 0.0f;
        /* y^T [out][T] = W [out][in] x^T, in cuBLAS's column-major terms. */
        double blas = time_us([&] {
            if (cublasGemmEx(cb, CUBLAS_OP_T, CUBLAS_OP_N, dl[i].out, T, dl[i].in, &alpha, wb,
                             CUDA_R_16BF, dl[i].in, xb, CUDA_R_16BF, dl[i].in, &beta, dl[i].y,
                             CUDA_R_32F, dl[i].out, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT) != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "cublasGemmEx failed\n");
                exit(1);
            }
        });
        printf("| dense %s, %d -> %d, %d rows, BF16 | %s | %.1f | %.0f GFLOP/s | %.1f |\n",
               dl[i].what, dl[i].in, dl[i].out, T, dense_cuda_kernel_name(dl[i].d, T), us,
               2.0 * T * dl[i].in * dl[i].out / us / 1e3, blas);
    }

    /* The whole forward pass as the kernels compose (post-LN BERT). */
    us = time_us([&] {
        OK(embed_sum_cuda(&word, &pos, &type, H, &hid, &did, NSEQ, h, s, msg, sizeof msg));
        OK(layernorm_rows_cuda(h, NULL, eg, eb, 1e-12f, h, T, H, s, msg, sizeof msg));
        for (int l = 0; l < LAYERS; l++) {
            OK(dense_cuda_run(L[l].qkv, h, T, qkv, s, msg, sizeof msg));
            OK(attention_varlen_cuda(&att, dcu, s, msg, sizeof msg));
            OK(dense_cuda_run(L[l].o, a, T, t, s, msg, sizeof msg));
            OK(layernorm_rows_cuda(t, h, L[l].g1, L[l].b1, 1e-12f, h, T, H, s, msg, sizeof msg));
            OK(dense_cuda_run(L[l].up, h, T, f, s, msg, sizeof msg));
            OK(dense_cuda_run(L[l].down, f, T, t, s, msg, sizeof msg));
            OK(layernorm_rows_cuda(t, h, L[l].g2, L[l].b2, 1e-12f, h, T, H, s, msg, sizeof msg));
        }
        OK(pool_rows_cuda(POOL_MEAN, POOL_L2, h, H, H, cu, dcu, NSEQ, pooled, s, msg, sizeof msg));
    });
    printf("| whole forward, %d layers, %d sentences | %d launches | %.1f | %.0f sentences/s |  |\n",
           LAYERS, NSEQ, 4 + 7 * LAYERS, us, NSEQ / us * 1e6);

    cublasDestroy(cb);
    return 0;
}
