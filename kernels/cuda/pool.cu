/* pool.cu - pool.h's pool_rows_cuda: one vector per sequence on the GPU.
 *
 * Pooling: one thread per (sequence, column), blocks of 64 columns of one
 * sequence. A thread walks its column down the sequence's rows in order
 * (consecutive threads read consecutive columns of a row: coalesced) and
 * does what pool_rows does per column: the F32 sum from 0 divided by the
 * count, the first row, or the NaN-propagating maximum, so the bits are the
 * CPU's. The row loop is unrolled so several rows' loads are in flight.
 *
 * POOL_L2 then runs a second kernel, one block per pooled vector: the sum of
 * squares in double (as pool_l2_normalize), reduced across the block, and
 * the vector scaled by the F32 reciprocal of max(norm, 1e-12). */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/varlen.cuh"

extern "C" {
#include "kernels/pool.h"
}

#define POOL_COLS 64
#define POOL_L2_THREADS 128
#define POOL_MAX_GRID_Y 65535

__global__ void __launch_bounds__(POOL_COLS)
pool_kernel(int mode, const float *__restrict__ x, size_t ldx, int hidden,
            const int *__restrict__ cu, float *__restrict__ out)
{
    const int seq = blockIdx.x;
    const int c = (int)(blockIdx.y * (unsigned)POOL_COLS + threadIdx.x);
    if (c >= hidden)
        return;
    const int row0 = cu[seq], len = cu[seq + 1] - row0;
    const float *xc = x + (size_t)row0 * ldx + (size_t)c;
    float acc = 0.0f;
    if (len > 0) {
        if (mode == POOL_CLS) {
            acc = xc[0];
        } else if (mode == POOL_MEAN) {
#pragma unroll 4
            for (int t = 0; t < len; t++)
                acc += xc[(size_t)t * ldx];
            acc /= (float)len;   /* a division, as the CPU (sum / count) */
        } else {
            acc = xc[0];
#pragma unroll 4
            for (int t = 1; t < len; t++) {
                const float v = xc[(size_t)t * ldx];
                acc = v > acc || v != v ? v : acc;   /* NaN wins, as torch.max */
            }
        }
    }
    out[(size_t)seq * (size_t)hidden + (size_t)c] = acc;
}

__global__ void __launch_bounds__(POOL_L2_THREADS)
pool_l2_kernel(float *out, int hidden)
{
    __shared__ double part[POOL_L2_THREADS / 32];
    float *xr = out + (size_t)blockIdx.x * (size_t)hidden;
    double ss = 0;
    for (int c = threadIdx.x; c < hidden; c += POOL_L2_THREADS)
        ss += (double)xr[c] * xr[c];
    ss = warp_sum_f64(ss);
    if ((threadIdx.x & 31) == 0)
        part[threadIdx.x >> 5] = ss;
    __syncthreads();
    ss = 0;
    for (int w = 0; w < POOL_L2_THREADS / 32; w++)
        ss += part[w];
    const double n = sqrt(ss);
    /* The CPU's expression: a NaN norm takes 1e-12, as there. */
    const float inv = (float)(1.0 / (n > 1e-12 ? n : 1e-12));
    for (int c = threadIdx.x; c < hidden; c += POOL_L2_THREADS)
        xr[c] *= inv;
}

extern "C" int pool_rows_cuda(enum pool_mode mode, unsigned flags, const float *x_dev, size_t ldx,
                              int hidden, const int *cu_seqlens, const int *cu_seqlens_dev,
                              int nseq, float *out_dev, void *stream, char *msg, size_t cap)
{
    if (hidden < 1 || ldx < (size_t)hidden ||
        (mode != POOL_MEAN && mode != POOL_CLS && mode != POOL_MAX)) {
        snprintf(msg, cap, "pool: mode %d, hidden %d, row stride %zu: need a known mode, hidden "
                 ">= 1 and a stride >= hidden", (int)mode, hidden, ldx);
        return -1;
    }
    const int longest = varlen_longest(cu_seqlens, nseq, "pool", msg, cap);
    if (longest < 0)
        return -1;
    if (nseq == 0)
        return 0;
    if (!out_dev || !cu_seqlens_dev || (longest > 0 && !x_dev)) {
        snprintf(msg, cap, "pool: x, out and the device offsets must not be NULL");
        return -1;
    }
    const unsigned col_blocks = (unsigned)((hidden + POOL_COLS - 1) / POOL_COLS);
    if (col_blocks > POOL_MAX_GRID_Y) {
        snprintf(msg, cap, "pool: hidden %d is above the GPU kernel's %d", hidden,
                 POOL_MAX_GRID_Y * POOL_COLS);
        return -1;
    }
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    pool_kernel<<<dim3((unsigned)nseq, col_blocks), POOL_COLS, 0, s>>>((int)mode, x_dev, ldx,
                                                                       hidden, cu_seqlens_dev,
                                                                       out_dev);
    if (flags & POOL_L2)
        pool_l2_kernel<<<(unsigned)nseq, POOL_L2_THREADS, 0, s>>>(out_dev, hidden);
    CUDA_TRY(cudaGetLastError(), msg, cap);
    return 0;
}
