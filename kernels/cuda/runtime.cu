/* runtime.cu - cuda_rt.h on the CUDA runtime (linked statically). */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/cuda_rt.h"
}

struct cuda_stream {
    cudaStream_t stream;
    cudaEvent_t start, stop;
};

extern "C" int cuda_rt_set_device(int device, char *msg, size_t cap)
{
    CUDA_TRY(cudaSetDevice(device), msg, cap);
    return 0;
}

extern "C" int cuda_rt_device_reset(int device, char *msg, size_t cap)
{
    CUDA_TRY(cudaSetDevice(device), msg, cap);
    CUDA_TRY(cudaDeviceReset(), msg, cap);
    return 0;
}

extern "C" int cuda_rt_mem_info(size_t *free_bytes, size_t *total_bytes, char *msg, size_t cap)
{
    *free_bytes = *total_bytes = 0;
    CUDA_TRY(cudaMemGetInfo(free_bytes, total_bytes), msg, cap);
    return 0;
}

extern "C" int cuda_rt_device_name(int device, char *out, size_t cap)
{
    cudaDeviceProp p;
    CUDA_TRY(cudaGetDeviceProperties(&p, device), out, cap);
    snprintf(out, cap, "%s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
             (double)p.totalGlobalMem / (1 << 30));
    return 0;
}

extern "C" void *cuda_rt_malloc(size_t bytes, char *msg, size_t cap)
{
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        snprintf(msg, cap, "cudaMalloc of %zu bytes: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

extern "C" void cuda_rt_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" void *cuda_rt_host_alloc(size_t bytes, char *msg, size_t cap)
{
    void *p = NULL;
    cudaError_t e = cudaMallocHost(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        snprintf(msg, cap, "cudaMallocHost of %zu bytes: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

extern "C" void cuda_rt_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

extern "C" int cuda_rt_upload(void *dst, const void *src, size_t bytes, char *msg, size_t cap)
{
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), msg, cap);
    return 0;
}

extern "C" int cuda_rt_download(void *dst, const void *src, size_t bytes, char *msg, size_t cap)
{
    CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), msg, cap);
    return 0;
}

extern "C" int cuda_rt_stream_create(struct cuda_stream **out, char *msg, size_t cap)
{
    *out = NULL;
    struct cuda_stream *s = (struct cuda_stream *)calloc(1, sizeof *s);
    if (!s) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    cudaError_t e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess) {
        e = cudaEventCreate(&s->start);
        if (e == cudaSuccess) {
            e = cudaEventCreate(&s->stop);
            if (e != cudaSuccess)
                cudaEventDestroy(s->start);
        }
        if (e != cudaSuccess)
            cudaStreamDestroy(s->stream);
    }
    if (e != cudaSuccess) {
        snprintf(msg, cap, "creating a stream: %s", cudaGetErrorString(e));
        free(s);
        return -1;
    }
    *out = s;
    return 0;
}

extern "C" void cuda_rt_stream_destroy(struct cuda_stream *s)
{
    if (!s)
        return;
    cudaEventDestroy(s->start);
    cudaEventDestroy(s->stop);
    cudaStreamDestroy(s->stream);
    free(s);
}

extern "C" void *cuda_rt_stream_handle(struct cuda_stream *s) { return s ? (void *)s->stream : NULL; }

extern "C" int cuda_rt_upload_async(void *dst, const void *src, size_t bytes, struct cuda_stream *s,
                                    char *msg, size_t cap)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s->stream), msg, cap);
    return 0;
}

extern "C" int cuda_rt_download_async(void *dst, const void *src, size_t bytes,
                                      struct cuda_stream *s, char *msg, size_t cap)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s->stream), msg, cap);
    return 0;
}

extern "C" int cuda_rt_timer_start(struct cuda_stream *s, char *msg, size_t cap)
{
    CUDA_TRY(cudaEventRecord(s->start, s->stream), msg, cap);
    return 0;
}

extern "C" int64_t cuda_rt_timer_stop(struct cuda_stream *s, char *msg, size_t cap)
{
    CUDA_TRY(cudaEventRecord(s->stop, s->stream), msg, cap);
    /* The worker thread waits here: the event, not a busy poll of the stream. */
    CUDA_TRY(cudaEventSynchronize(s->stop), msg, cap);
    float ms = 0;
    CUDA_TRY(cudaEventElapsedTime(&ms, s->start, s->stop), msg, cap);
    return (int64_t)((double)ms * 1e6);
}

extern "C" int cuda_rt_stream_sync(struct cuda_stream *s, char *msg, size_t cap)
{
    CUDA_TRY(cudaStreamSynchronize(s->stream), msg, cap);
    return 0;
}
