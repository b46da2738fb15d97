/* softmax.cu - row-wise softmax of kernels/softmax.h on the GPU: one block
 * per row, maximum and sum by warp shuffles then across warps; stable
 * (the maximum is subtracted) and NaN-propagating like the CPU version. */
#include <math.h>

#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/softmax.h"
}

#define SOFTMAX_THREADS 256

__device__ __forceinline__ float block_reduce(float v, bool is_max, float *shared)
{
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_down_sync(0xffffffffu, v, off);
        v = is_max ? (o > v || isnan(o) ? o : v) : v + o;
    }
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    if (warp == 0) {
        int nw = (blockDim.x + 31) >> 5;
        v = lane < nw ? shared[lane] : (is_max ? -INFINITY : 0.0f);
        for (int off = 16; off > 0; off >>= 1) {
            float o = __shfl_down_sync(0xffffffffu, v, off);
            v = is_max ? (o > v || isnan(o) ? o : v) : v + o;
        }
        if (lane == 0)
            shared[0] = v;
    }
    __syncthreads();
    float r = shared[0];
    __syncthreads();   /* shared is reused by the next reduction */
    return r;
}

__global__ void __launch_bounds__(SOFTMAX_THREADS)
softmax_rows_kernel(const float *x, float *y, int n)
{
    __shared__ float shared[32];
    const float *xr = x + (size_t)blockIdx.x * n;
    float *yr = y + (size_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        float v = xr[i];
        m = (v > m || isnan(v)) ? v : m;
    }
    m = block_reduce(m, true, shared);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s += expf(xr[i] - m);
    s = block_reduce(s, false, shared);
    float inv = 1.0f / s;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        yr[i] = expf(xr[i] - m) * inv;
}

extern "C" int softmax_cuda_rows(const float *x_dev, float *y_dev, int rows, int n, void *stream,
                                 char *msg, size_t cap)
{
    if (rows <= 0 || n <= 0)
        return 0;
    softmax_rows_kernel<<<(unsigned)rows, SOFTMAX_THREADS, 0, static_cast<cudaStream_t>(stream)>>>(
        x_dev, y_dev, n);
    CUDA_TRY(cudaGetLastError(), msg, cap);
    return 0;
}
