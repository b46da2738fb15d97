/* kernels_cuda.cu - the GPU dense kernel against the memory-bandwidth floor
 * and cuBLAS, per batch size; prints a markdown table (scripts/gpu-check
 * pastes it into docs/BENCHMARKS.md).
 *
 *   bench_kernels_cuda [--iters N]
 *
 * Per shape and weight dtype (F32, F16, BF16): which of our kernels runs
 * (dense_cuda_kernel_name) and its time per call for batch sizes 1..256 (CUDA
 * events, averaged over N calls after warmup), the floor set by reading the
 * weights once at the device's measured copy bandwidth, and cuBLAS on the
 * same shapes: SGEMM for F32, cublasGemmEx for F16/BF16 with the same half
 * type for W and x, F32 output and CUBLAS_COMPUTE_32F (the tensor cores).
 * cuBLAS is given x already in half and does no bias or activation; our
 * kernels read F32 x (rounding it to half in the tensor-core kernel) and
 * apply bias + ReLU in the epilogue, so the comparison is slightly in
 * cuBLAS's favour. Also the fixed cost of one batch (copy in, a 1x1 layer,
 * copy out, event wait) as the backend pays it. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "kernels/cuda_rt.h"
#include "kernels/dense.h"
}

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                       \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

#define CB(call)                                                                              \
    do {                                                                                      \
        cublasStatus_t s_ = (call);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
            fprintf(stderr, "%s: cuBLAS status %d\n", #call, (int)s_);                       \
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

static float time_ms(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

int main(int argc, char **argv)
{
    int iters = 50;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
    char name[256], msg[512];
    if (cuda_rt_device_name(0, name, sizeof name) < 0) {
        fprintf(stderr, "bench_kernels_cuda: no usable GPU: %s\n", name);
        return 1;
    }
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    /* Copy bandwidth: device to device, 1 GiB (read + write). */
    size_t big = (size_t)1 << 30;
    void *p, *q;
    CK(cudaMalloc(&p, big));
    CK(cudaMalloc(&q, big));
    CK(cudaMemcpy(q, p, big, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < 5; i++)
        CK(cudaMemcpy(q, p, big, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    double bw = 2.0 * 5 * (double)big / (time_ms(e0, e1) / 1e3);   /* bytes/s */
    CK(cudaFree(p));
    CK(cudaFree(q));
    printf("device: %s; measured copy bandwidth %.0f GB/s\n\n", name, bw / 1e9);

    /* Fixed cost of a batch as the cuda backend runs it. */
    {
        float one = 1.0f, *dx, *dy, *hx, *hy;
        struct dense_cuda *d;
        if (dense_cuda_prepare(&one, DTYPE_F32, NULL, DTYPE_F32, 1, 1, DENSE_ACT_NONE, &d, msg,
                               sizeof msg)) {
            fprintf(stderr, "%s\n", msg);
            return 1;
        }
        struct cuda_stream *s;
        OK(cuda_rt_stream_create(&s, msg, sizeof msg));
        dx = (float *)cuda_rt_malloc(4, msg, sizeof msg);
        dy = (float *)cuda_rt_malloc(4, msg, sizeof msg);
        hx = (float *)cuda_rt_host_alloc(4, msg, sizeof msg);
        hy = (float *)cuda_rt_host_alloc(4, msg, sizeof msg);
        if (!dx || !dy || !hx || !hy) {
            fprintf(stderr, "%s\n", msg);
            return 1;
        }
        *hx = 1.0f;
        int64_t total = 0;
        for (int i = 0; i < iters + 10; i++) {
            OK(cuda_rt_timer_start(s, msg, sizeof msg));
            OK(cuda_rt_upload_async(dx, hx, 4, s, msg, sizeof msg));
            OK(dense_cuda_run(d, dx, 1, dy, cuda_rt_stream_handle(s), msg, sizeof msg));
            OK(cuda_rt_download_async(hy, dy, 4, s, msg, sizeof msg));
            int64_t ns = cuda_rt_timer_stop(s, msg, sizeof msg);
            OK(ns);
            if (i >= 10)
                total += ns;
        }
        printf("fixed cost of one batch (copy in, 1x1 layer, copy out, event wait): %.1f us\n\n",
               (double)total / iters / 1e3);
        dense_cuda_free(d);
        cuda_rt_free(dx);
        cuda_rt_free(dy);
        cuda_rt_host_free(hx);
        cuda_rt_host_free(hy);
        cuda_rt_stream_destroy(s);
    }

    cublasHandle_t h;
    CB(cublasCreate(&h));
    static const int shapes[][2] = {{4096, 4096}, {1024, 4096}, {4096, 1024}};
    static const int rowsv[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    static const enum dtype dts[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
    printf("Our dense layer (bias + ReLU fused) against cuBLAS on the same shapes: SGEMM for "
           "F32; for F16/BF16 cublasGemmEx with half W and x, FP32 compute, no bias or "
           "activation, x converted beforehand (our tensor-core kernel converts F32 x itself). "
           "Tensor-core kernels from %d rows.\n\n", DENSE_CUDA_TC_MIN_ROWS);
    printf("| layer (in -> out) | dtype | rows | kernel | ours (us) | weight floor (us) | "
           "ours / floor | cuBLAS (us) | ours / cuBLAS | ours GFLOP/s |\n");
    printf("| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    const int maxrows = rowsv[sizeof rowsv / sizeof rowsv[0] - 1];
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        int in = shapes[sh][0], out = shapes[sh][1];
        size_t n = (size_t)in * out, nx = (size_t)maxrows * in;
        float *w = (float *)malloc(n * sizeof(float));
        uint16_t *wh = (uint16_t *)malloc(n * 2);
        float *x = (float *)malloc(nx * sizeof(float));
        uint16_t *xh = (uint16_t *)malloc(nx * 2);
        if (!w || !wh || !x || !xh) {
            fprintf(stderr, "out of memory\n");
            return 1;
        }
        for (size_t i = 0; i < n; i++)
            w[i] = (float)((int)(i % 17) - 8) / 64.0f;
        /* Random, not zero, activations: the tensor cores' power (and so
         * their clock) depends on the data. */
        unsigned st = 12345;
        for (size_t i = 0; i < nx; i++) {
            st = st * 1664525u + 1013904223u;
            x[i] = (float)(st >> 8) / 8388608.0f - 1.0f;
        }
        float *dx, *dy, *dw;
        void *dwh, *dxh;
        CK(cudaMalloc(&dx, nx * 4));
        CK(cudaMalloc(&dy, (size_t)maxrows * out * 4));
        CK(cudaMemcpy(dx, x, nx * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dw, n * 4));
        CK(cudaMemcpy(dw, w, n * 4, cudaMemcpyHostToDevice));
        CK(cudaMalloc(&dwh, n * 2));
        CK(cudaMalloc(&dxh, nx * 2));
        for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
            const enum dtype dt = dts[t];
            const void *wsrc = w;
            if (dt != DTYPE_F32) {
                for (size_t i = 0; i < n; i++)
                    wh[i] = dt == DTYPE_F16 ? dtype_f32_to_f16(w[i]) : dtype_f32_to_bf16(w[i]);
                for (size_t i = 0; i < nx; i++)
                    xh[i] = dt == DTYPE_F16 ? dtype_f32_to_f16(x[i]) : dtype_f32_to_bf16(x[i]);
                CK(cudaMemcpy(dwh, wh, n * 2, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(dxh, xh, nx * 2, cudaMemcpyHostToDevice));
                wsrc = wh;
            }
            const cudaDataType_t ht = dt == DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
            struct dense_cuda *d;
            if (dense_cuda_prepare(wsrc, dt, NULL, DTYPE_F32, out, in, DENSE_ACT_RELU, &d, msg,
                                   sizeof msg)) {
                fprintf(stderr, "%s\n", msg);
                return 1;
            }
            for (size_t r = 0; r < sizeof rowsv / sizeof rowsv[0]; r++) {
                int rows = rowsv[r];
                for (int i = 0; i < 5; i++)
                    OK(dense_cuda_run(d, dx, rows, dy, NULL, msg, sizeof msg));
                CK(cudaEventRecord(e0));
                for (int i = 0; i < iters; i++)
                    OK(dense_cuda_run(d, dx, rows, dy, NULL, msg, sizeof msg));
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                CK(cudaGetLastError());
                double ours = time_ms(e0, e1) * 1e3 / iters;
                double floor_us = (double)n * dtype_size(dt) / bw * 1e6;
                const float alpha = 1.0f, beta = 0.0f;
                /* y^T [out][rows] = W [out][in] x^T in cuBLAS's column-major
                 * terms: W is in x out column-major (transposed), x is
                 * in x rows column-major, y is out x rows column-major. */
                for (int i = 0; i < iters + 5; i++) {
                    if (i == 5)
                        CK(cudaEventRecord(e0));
                    if (dt == DTYPE_F32)
                        CB(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, dw, in,
                                       dx, in, &beta, dy, out));
                    else
                        CB(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, dwh, ht,
                                        in, dxh, ht, in, &beta, dy, CUDA_R_32F, out,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
                }
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                double blas = time_ms(e0, e1) * 1e3 / iters;
                printf("| %d -> %d | %s | %d | %s | %.1f | %.1f | %.2f | %.1f | %.2f | %.0f |\n",
                       in, out, dtype_name(dt), rows, dense_cuda_kernel_name(d, rows), ours,
                       floor_us, ours / floor_us, blas, ours / blas, 2.0 * n * rows / (ours * 1e3));
            }
            dense_cuda_free(d);
        }
        CK(cudaFree(dx));
        CK(cudaFree(dy));
        CK(cudaFree(dw));
        CK(cudaFree(dwh));
        CK(cudaFree(dxh));
        free(w);
        free(wh);
        free(x);
        free(xh);
    }
    CB(cublasDestroy(h));
    return 0;
}
