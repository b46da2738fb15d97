/* layernorm.cu - layernorm.h's layernorm_rows_cuda: LN(x + r) per row on the
 * GPU, F32, mean and biased variance in two passes (no E[t^2] - E[t]^2
 * cancellation), in place allowed.
 *
 * dim <= 1024 (every BERT-family hidden size): one warp per row, the row
 * held in registers (NV elements per lane, column lane + 32 j: coalesced),
 * so x and r are read once and y written once, and both reductions are warp
 * shuffles without shared memory or block barriers. Larger dims: one block
 * per row, three passes over global memory like the CPU kernel (t = x + r
 * stored into y first when there is a residual).
 *
 * In place (y == x or y == r) is safe in both: every element is read and
 * written by the same thread, its reads first; hence no __restrict__. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.cuh"

extern "C" {
#include "kernels/layernorm.h"
}

#define LN_WARPS 4      /* rows per block of the warp kernel */
#define LN_THREADS 256  /* the block kernel */

template <int NV>
__global__ void __launch_bounds__(LN_WARPS * 32)
layernorm_warp(const float *x, const float *r, const float *gamma, const float *beta, float eps,
               float *y, int rows, int dim)
{
    const int row = (int)(blockIdx.x * (unsigned)LN_WARPS + (threadIdx.x >> 5));
    const int lane = threadIdx.x & 31;
    if (row >= rows)
        return;   /* the whole warp */
    const size_t o = (size_t)row * (size_t)dim;
    float t[NV];
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int c = lane + 32 * j;
        t[j] = 0.0f;
        if (c < dim) {
            t[j] = r ? x[o + c] + r[o + c] : x[o + c];
            s += t[j];
        }
    }
    const float mean = warp_sum(s) / (float)dim;
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < NV; j++)
        if (lane + 32 * j < dim) {
            const float d = t[j] - mean;
            ss = fmaf(d, d, ss);
        }
    const float var = warp_sum(ss) / (float)dim;
    const float rstd = 1.0f / sqrtf(var + eps);
#pragma unroll
    for (int j = 0; j < NV; j++) {
        const int c = lane + 32 * j;
        if (c < dim) {
            const float v = (t[j] - mean) * rstd * gamma[c];
            y[o + c] = beta ? v + beta[c] : v;
        }
    }
}

/* The sum over the block of v, in every thread. shared: 32 floats; reused
 * by the next call only after the barrier at the end. */
__device__ __forceinline__ float ln_block_sum(float v, float *shared)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    v = warp_sum(v);
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)   /* same order in every thread */
        total += shared[w];
    __syncthreads();
    return total;
}

__global__ void __launch_bounds__(LN_THREADS)
layernorm_block(const float *x, const float *r, const float *gamma, const float *beta, float eps,
                float *y, int dim)
{
    __shared__ float shared[32];
    const size_t o = (size_t)blockIdx.x * (size_t)dim;
    const float *t = x + o;
    float s = 0.0f;
    if (r) {
        for (int c = threadIdx.x; c < dim; c += LN_THREADS) {
            const float v = x[o + c] + r[o + c];
            y[o + c] = v;
            s += v;
        }
        t = y + o;   /* read back only by the thread that wrote it */
    } else {
        for (int c = threadIdx.x; c < dim; c += LN_THREADS)
            s += t[c];
    }
    const float mean = ln_block_sum(s, shared) / (float)dim;
    float ss = 0.0f;
    for (int c = threadIdx.x; c < dim; c += LN_THREADS) {
        const float d = t[c] - mean;
        ss = fmaf(d, d, ss);
    }
    const float rstd = 1.0f / sqrtf(ln_block_sum(ss, shared) / (float)dim + eps);
    for (int c = threadIdx.x; c < dim; c += LN_THREADS) {
        const float v = (t[c] - mean) * rstd * gamma[c];
        y[o + c] = beta ? v + beta[c] : v;
    }
}

template <int NV>
static void layernorm_launch(const float *x, const float *r, const float *gamma,
                             const float *beta, float eps, float *y, int rows, int dim,
                             cudaStream_t s)
{
    const unsigned blocks = (unsigned)((rows + LN_WARPS - 1) / LN_WARPS);
    layernorm_warp<NV><<<blocks, LN_WARPS * 32, 0, s>>>(x, r, gamma, beta, eps, y, rows, dim);
}

extern "C" int layernorm_rows_cuda(const float *x, const float *r, const float *gamma,
                                   const float *beta, float eps, float *y, int rows, int dim,
                                   void *stream, char *msg, size_t cap)
{
    if (rows <= 0 || dim <= 0)
        return 0;
    if (!x || !gamma || !y) {
        snprintf(msg, cap, "layernorm: x, gamma and y must be device pointers, not NULL");
        return -1;
    }
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    /* Register counts for the hidden sizes in use (384, 768, 1024) without
     * idle lanes; the others round up to the next. */
    if (dim <= 128)
        layernorm_launch<4>(x, r, gamma, beta, eps, y, rows, dim, s);
    else if (dim <= 256)
        layernorm_launch<8>(x, r, gamma, beta, eps, y, rows, dim, s);
    else if (dim <= 384)
        layernorm_launch<12>(x, r, gamma, beta, eps, y, rows, dim, s);
    else if (dim <= 512)
        layernorm_launch<16>(x, r, gamma, beta, eps, y, rows, dim, s);
    else if (dim <= 768)
        layernorm_launch<24>(x, r, gamma, beta, eps, y, rows, dim, s);
    else if (dim <= 1024)
        layernorm_launch<32>(x, r, gamma, beta, eps, y, rows, dim, s);
    else
        layernorm_block<<<(unsigned)rows, LN_THREADS, 0, s>>>(x, r, gamma, beta, eps, y, dim);
    CUDA_TRY(cudaGetLastError(), msg, cap);
    return 0;
}
