/* kernels_cuda.cu - the GPU dense kernel against the memory-bandwidth floor
 * and cuBLAS, per batch size; prints a markdown table (scripts/gpu-check
 * pastes it into docs/BENCHMARKS.md).
 *
 *   bench_kernels_cuda [--iters N]
 *
 * Per shape and weight dtype: our kernel's time per call for batch sizes
 * 1..256 (CUDA events, averaged over N calls after warmup), the floor set by
 * reading the weights once at the device's measured copy bandwidth, and
 * cuBLAS SGEMM on the same F32 shapes. Also the fixed cost of one batch
 * (copy in, a 1x1 layer, copy out, event wait) as the backend pays it. */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "cuda_rt.h"
#include "dense.h"
}

#define CK(call)                                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(e_));                       \
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
        cuda_rt_stream_create(&s, msg, sizeof msg);
        dx = (float *)cuda_rt_malloc(4, msg, sizeof msg);
        dy = (float *)cuda_rt_malloc(4, msg, sizeof msg);
        hx = (float *)cuda_rt_host_alloc(4, msg, sizeof msg);
        hy = (float *)cuda_rt_host_alloc(4, msg, sizeof msg);
        int64_t total = 0;
        for (int i = 0; i < iters + 10; i++) {
            cuda_rt_timer_start(s, msg, sizeof msg);
            cuda_rt_upload_async(dx, hx, 4, s, msg, sizeof msg);
            dense_cuda_run(d, dx, 1, dy, cuda_rt_stream_handle(s), msg, sizeof msg);
            cuda_rt_download_async(hy, dy, 4, s, msg, sizeof msg);
            int64_t ns = cuda_rt_timer_stop(s, msg, sizeof msg);
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
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "cublasCreate failed\n");
        return 1;
    }
    static const int shapes[][2] = {{4096, 4096}, {1024, 4096}, {4096, 1024}};
    static const int rowsv[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    printf("| layer (in -> out) | dtype | rows | ours (us) | weight floor (us) | ours / floor | "
           "cuBLAS SGEMM (us) | ours GFLOP/s |\n");
    printf("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        int in = shapes[sh][0], out = shapes[sh][1];
        size_t n = (size_t)in * out;
        float *w = (float *)malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            w[i] = (float)((int)(i % 17) - 8) / 64.0f;
        uint16_t *wb = (uint16_t *)malloc(n * 2);
        for (size_t i = 0; i < n; i++)
            wb[i] = dtype_f32_to_bf16(w[i]);
        float *dx, *dy, *dw;
        CK(cudaMalloc(&dx, (size_t)256 * in * 4));
        CK(cudaMalloc(&dy, (size_t)256 * out * 4));
        CK(cudaMemset(dx, 0, (size_t)256 * in * 4));
        CK(cudaMalloc(&dw, n * 4));
        CK(cudaMemcpy(dw, w, n * 4, cudaMemcpyHostToDevice));
        for (int dt = 0; dt < 2; dt++) {
            struct dense_cuda *d;
            if (dense_cuda_prepare(dt ? (void *)wb : (void *)w, dt ? DTYPE_BF16 : DTYPE_F32, NULL,
                                   DTYPE_F32, out, in, DENSE_ACT_RELU, &d, msg, sizeof msg)) {
                fprintf(stderr, "%s\n", msg);
                return 1;
            }
            for (size_t r = 0; r < sizeof rowsv / sizeof rowsv[0]; r++) {
                int rows = rowsv[r];
                for (int i = 0; i < 5; i++)
                    dense_cuda_run(d, dx, rows, dy, NULL, msg, sizeof msg);
                CK(cudaEventRecord(e0));
                for (int i = 0; i < iters; i++)
                    dense_cuda_run(d, dx, rows, dy, NULL, msg, sizeof msg);
                CK(cudaEventRecord(e1));
                CK(cudaEventSynchronize(e1));
                double ours = time_ms(e0, e1) * 1e3 / iters;
                double floor_us = (double)n * (dt ? 2 : 4) / bw * 1e6;
                double blas = 0;
                if (!dt) {
                    const float alpha = 1.0f, beta = 0.0f;
                    for (int i = 0; i < 5; i++)
                        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, dw, in,
                                    dx, in, &beta, dy, out);
                    CK(cudaEventRecord(e0));
                    for (int i = 0; i < iters; i++)
                        cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, &alpha, dw, in,
                                    dx, in, &beta, dy, out);
                    CK(cudaEventRecord(e1));
                    CK(cudaEventSynchronize(e1));
                    blas = time_ms(e0, e1) * 1e3 / iters;
                }
                char blas_s[32] = "-";
                if (blas > 0)
                    snprintf(blas_s, sizeof blas_s, "%.1f", blas);
                printf("| %d -> %d | %s | %d | %.1f | %.1f | %.2f | %s | %.0f |\n", in, out,
                       dt ? "BF16" : "F32", rows, ours, floor_us, ours / floor_us, blas_s,
                       2.0 * n * rows / (ours * 1e3));
            }
            dense_cuda_free(d);
        }
        CK(cudaFree(dx));
        CK(cudaFree(dy));
        CK(cudaFree(dw));
        free(w);
        free(wb);
    }
    cublasDestroy(h);
    return 0;
}
