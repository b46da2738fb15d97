/* reduce.cuh - warp-wide sums and maxima for the encoder kernels
 * (layernorm.cu, attention.cu, pool.cu). Butterfly shuffles (xor), so every
 * lane ends with the same bits of the result and no broadcast is needed.
 * The maximum lets a NaN win, as the CPU kernels and torch.max do: fmaxf
 * would silently drop a NaN score or input. All 32 lanes must call them. */
#ifndef BG_CUDA_REDUCE_CUH
#define BG_CUDA_REDUCE_CUH

#include <cuda_runtime.h>
#include <math.h>

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ double warp_sum_f64(double v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* max(a, b) where a NaN in either wins. */
__device__ __forceinline__ float max_nan(float a, float b)
{
    return (b > a || isnan(b)) ? b : a;
}

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

#endif
