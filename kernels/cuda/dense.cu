/* dense.cu - the dense layer of kernels/dense.h on the GPU.
 *
 * Three kernels, bias and activation fused into every epilogue, F32
 * accumulation, weights read in the dtype they are stored in:
 *   - dense_gemv: rows <= 8, the memory-bound case. One warp per output
 *     neuron streams that neuron's weight row once (16-byte loads when rows
 *     are 16-byte aligned) and multiplies it into every batch row at once.
 *   - dense_tc (dense_tc.cuh): F16 and BF16 weights with rows >=
 *     DENSE_CUDA_TC_MIN_ROWS, on sm_80 and newer. Tensor cores (wmma
 *     16x16x16, F32 accumulators), 64x64 or 32x32 block tiles, k slices of
 *     32 double-buffered in shared memory (cp.async for W); x is rounded to
 *     the weight's type as it is staged, like cuBLAS's mixed-precision GEMM.
 *   - dense_gemm: every other larger batch (F32 weights; halves with 9..15
 *     rows). 64x64 output tiles, 16-deep k slices of X and W staged in
 *     shared memory (halves widened to F32 there), 4x4 outputs per thread;
 *     each weight is reused by up to 64 batch rows. Exact F32 x.
 * Shapes that are not multiples of the tiles are bounds-checked. See
 * docs/KERNELS.md. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"

extern "C" {
#include "kernels/dense.h"
}

struct dense_cuda {
    int out, in;
    enum dtype wdt;
    enum dense_act act;
    void *w;          /* device: [out][in] in wdt */
    float *b;         /* device: [out] F32, or NULL */
    size_t bytes;
    int tc;           /* the device has what dense_tc needs (sm_80+) */
    int sms;          /* its multiprocessors, for choosing dense_tc's tile */
};

/* ---- element access ---- */

__device__ __forceinline__ float ld1(const float *p) { return *p; }
__device__ __forceinline__ float ld1(const __half *p) { return __half2float(*p); }
__device__ __forceinline__ float ld1(const __nv_bfloat16 *p) { return __bfloat162float(*p); }

template <typename T> struct vec16;
template <> struct vec16<float> { static constexpr int n = 4; };
template <> struct vec16<__half> { static constexpr int n = 8; };
template <> struct vec16<__nv_bfloat16> { static constexpr int n = 8; };

/* 16 bytes of T, widened to F32. */
__device__ __forceinline__ void ld16(const float *p, float *o)
{
    float4 v = *reinterpret_cast<const float4 *>(p);
    o[0] = v.x;
    o[1] = v.y;
    o[2] = v.z;
    o[3] = v.w;
}

__device__ __forceinline__ void ld16(const __half *p, float *o)
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __half2 *h = reinterpret_cast<const __half2 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(h[i]);
        o[2 * i] = f.x;
        o[2 * i + 1] = f.y;
    }
}

__device__ __forceinline__ void ld16(const __nv_bfloat16 *p, float *o)
{
    uint4 u = *reinterpret_cast<const uint4 *>(p);
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __bfloat1622float2(h[i]);
        o[2 * i] = f.x;
        o[2 * i + 1] = f.y;
    }
}

/* n (4 or 8) consecutive F32 of x, 16-byte aligned. */
template <int N>
__device__ __forceinline__ void ldx(const float *p, float *o)
{
#pragma unroll
    for (int i = 0; i < N; i += 4)
        ld16(p + i, o + i);
}

/* ---- rows <= 8 ---- */

#define GEMV_ROWS 8
#define GEMV_THREADS 256

template <typename T, bool VEC>
__global__ void __launch_bounds__(GEMV_THREADS)
dense_gemv(const T *__restrict__ W, const float *__restrict__ bias, const float *__restrict__ x,
           float *__restrict__ y, int rows, int out, int in, int act)
{
    const int o = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    const int lane = threadIdx.x & 31;
    if (o >= out)
        return;   /* the whole warp leaves together */
    const T *w = W + (size_t)o * in;
    float acc[GEMV_ROWS];
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; r++)
        acc[r] = 0.0f;
    int k0 = 0;
    if (VEC) {
        constexpr int V = vec16<T>::n;
        const int nvec = in / V;
        for (int v = lane; v < nvec; v += 32) {
            float wv[V];
            ld16(w + (size_t)v * V, wv);
#pragma unroll
            for (int r = 0; r < GEMV_ROWS; r++) {
                if (r < rows) {
                    float xv[V];
                    ldx<V>(x + (size_t)r * in + (size_t)v * V, xv);
#pragma unroll
                    for (int i = 0; i < V; i++)
                        acc[r] = fmaf(wv[i], xv[i], acc[r]);
                }
            }
        }
        k0 = nvec * V;
    }
    for (int k = k0 + lane; k < in; k += 32) {
        float wk = ld1(w + k);
#pragma unroll
        for (int r = 0; r < GEMV_ROWS; r++)
            if (r < rows)
                acc[r] = fmaf(wk, x[(size_t)r * in + k], acc[r]);
    }
#pragma unroll
    for (int r = 0; r < GEMV_ROWS; r++)
#pragma unroll
        for (int off = 16; off > 0; off >>= 1)
            acc[r] += __shfl_down_sync(0xffffffffu, acc[r], off);
    if (lane == 0) {
        float b = bias ? bias[o] : 0.0f;
        for (int r = 0; r < rows; r++)
            y[(size_t)r * out + o] = bg_act(acc[r] + b, act);
    }
}

/* ---- larger batches ---- */

#define TM 64
#define TN 64
#define TK 16
#define GEMM_THREADS 256

template <typename T>
__global__ void __launch_bounds__(GEMM_THREADS)
dense_gemm(const T *__restrict__ W, const float *__restrict__ bias, const float *__restrict__ x,
           float *__restrict__ y, int rows, int out, int in, int act)
{
    __shared__ float xs[TK][TM + 4];
    __shared__ float ws[TK][TN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.y * TM, n0 = blockIdx.x * TN;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < in; k0 += TK) {
        /* 64 x 16 of X and of W: 1024 each, 4 per thread; consecutive
         * threads read consecutive k of one row (coalesced). */
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int idx = tid + i * GEMM_THREADS;
            int mm = idx / TK, kk = idx % TK, k = k0 + kk;
            int row = m0 + mm, o = n0 + mm;
            xs[kk][mm] = (row < rows && k < in) ? x[(size_t)row * in + k] : 0.0f;
            ws[kk][mm] = (o < out && k < in) ? ld1(W + (size_t)o * in + k) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TK; kk++) {
            float a[4], bw[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = xs[kk][ty * 4 + i];
                bw[i] = ws[kk][tx * 4 + i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] = fmaf(a[i], bw[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = m0 + ty * 4 + i;
        if (row >= rows)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int o = n0 + tx * 4 + j;
            if (o < out)
                y[(size_t)row * out + o] = bg_act(acc[i][j] + (bias ? bias[o] : 0.0f), act);
        }
    }
}

/* ---- tensor cores: F16/BF16 weights, rows >= DENSE_CUDA_TC_MIN_ROWS ---- */

/* F32 -> T, round to nearest even (as dtype.h's host conversions). */
template <typename T> __device__ __forceinline__ T tc_from_f32(float v);
template <> __device__ __forceinline__ __half tc_from_f32<__half>(float v)
{
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 tc_from_f32<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}

/* Four F32 rounded to T and stored at p (4-byte aligned: two pairs). */
__device__ __forceinline__ void tc_store4(__half *p, float a, float b, float c, float d)
{
    __half2 *q = reinterpret_cast<__half2 *>(p);
    q[0] = __floats2half2_rn(a, b);   /* .x (the lower address) = a */
    q[1] = __floats2half2_rn(c, d);
}
__device__ __forceinline__ void tc_store4(__nv_bfloat16 *p, float a, float b, float c, float d)
{
    __nv_bfloat162 *q = reinterpret_cast<__nv_bfloat162 *>(p);
    q[0] = __floats2bfloat162_rn(a, b);
    q[1] = __floats2bfloat162_rn(c, d);
}

/* 16 bytes from global to shared memory without a register round trip
 * (sm_80+; both addresses 16-byte aligned). valid == false writes 16 zero
 * bytes and reads nothing (the source size operand is 0). */
__device__ __forceinline__ void cp_async16(void *smem_dst, const void *gmem_src, bool valid)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned dst = (unsigned)__cvta_generic_to_shared(smem_dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem_src),
                 "r"(valid ? 16 : 0)
                 : "memory");
#endif
}
/* Closes the group of copies issued so far by this thread. */
__device__ __forceinline__ void cp_async_commit(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
/* Waits for all of this thread's copies; other threads' need a barrier. */
__device__ __forceinline__ void cp_async_wait_all(void)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

#include "kernels/cuda/dense_tc.cuh"

/* 4 warps each; the 64x64 tile (32x32 per warp, 2x2 fragments) stages each
 * element of x and W for twice as many MMAs as the 32x32 one (16x16 per
 * warp), which in turn makes 4x as many blocks for small layers. */
typedef tc_cfg<64, 64, 2, 2> tc_big;
typedef tc_cfg<32, 32, 2, 2> tc_small;

/* ---- host side ---- */

enum kernel_path { PATH_GEMV, PATH_GEMM, PATH_TC_SMALL, PATH_TC_BIG };

static enum kernel_path pick_path(const struct dense_cuda *d, int rows)
{
    if (rows <= GEMV_ROWS)
        return PATH_GEMV;
    if (d->wdt == DTYPE_F32 || !d->tc || rows < DENSE_CUDA_TC_MIN_ROWS)
        return PATH_GEMM;
    /* The larger tile while it still gives every multiprocessor a block;
     * below that the parallelism of the smaller one matters more (e.g. 4096
     * outputs x 64 rows: 64 big blocks for 132 SMs on an H100/H200, 256
     * small ones). */
    long big = (long)((d->out + tc_big::BN - 1) / tc_big::BN) *
               (long)((rows + tc_big::BM - 1) / tc_big::BM);
    return big >= d->sms ? PATH_TC_BIG : PATH_TC_SMALL;
}

template <typename T, typename CFG>
static void launch_tc(const struct dense_cuda *d, const float *x, int rows, float *y,
                      cudaStream_t s)
{
    const T *w = static_cast<const T *>(d->w);
    dim3 grid((unsigned)((d->out + CFG::BN - 1) / CFG::BN),
              (unsigned)((rows + CFG::BM - 1) / CFG::BM));
    /* cp.async and float4 loads need every row of W and x 16-byte aligned:
     * in % 8 == 0 (halves; the float rows of x then are 32-byte multiples)
     * and an aligned x (W's base comes from cudaMalloc: 256-byte aligned). */
    bool vec = d->in % 8 == 0 && ((uintptr_t)x % 16) == 0;
    if (vec)
        dense_tc<T, CFG, true><<<grid, CFG::THREADS, 0, s>>>(w, d->b, x, y, rows, d->out, d->in,
                                                            (int)d->act);
    else
        dense_tc<T, CFG, false><<<grid, CFG::THREADS, 0, s>>>(w, d->b, x, y, rows, d->out,
                                                             d->in, (int)d->act);
}

template <typename T> struct has_tc { static constexpr bool value = false; };
template <> struct has_tc<__half> { static constexpr bool value = true; };
template <> struct has_tc<__nv_bfloat16> { static constexpr bool value = true; };

template <typename T>
static void launch(const struct dense_cuda *d, const float *x, int rows, float *y,
                   cudaStream_t s)
{
    const T *w = static_cast<const T *>(d->w);
    const enum kernel_path path = pick_path(d, rows);
    if (path == PATH_GEMV) {
        int warps_per_block = GEMV_THREADS / 32;
        unsigned blocks = (unsigned)((d->out + warps_per_block - 1) / warps_per_block);
        /* Rows of W (and of x) start 16-byte aligned when in * size is a
         * multiple of 16: cudaMalloc'ed bases are 256-byte aligned. */
        bool vec = ((size_t)d->in * sizeof(T)) % 16 == 0 && ((uintptr_t)x % 16) == 0;
        if (vec)
            dense_gemv<T, true><<<blocks, GEMV_THREADS, 0, s>>>(w, d->b, x, y, rows, d->out,
                                                                 d->in, (int)d->act);
        else
            dense_gemv<T, false><<<blocks, GEMV_THREADS, 0, s>>>(w, d->b, x, y, rows, d->out,
                                                                  d->in, (int)d->act);
        return;
    }
    if constexpr (has_tc<T>::value) {
        if (path == PATH_TC_BIG) {
            launch_tc<T, tc_big>(d, x, rows, y, s);
            return;
        }
        if (path == PATH_TC_SMALL) {
            launch_tc<T, tc_small>(d, x, rows, y, s);
            return;
        }
    }
    dim3 grid((unsigned)((d->out + TN - 1) / TN), (unsigned)((rows + TM - 1) / TM));
    dense_gemm<T><<<grid, GEMM_THREADS, 0, s>>>(w, d->b, x, y, rows, d->out, d->in, (int)d->act);
}

extern "C" const char *dense_cuda_kernel_name(const struct dense_cuda *d, int rows)
{
    if (rows <= 0)
        return "none";
    switch (pick_path(d, rows)) {
    case PATH_GEMV: return "gemv";
    case PATH_GEMM: return "tiled-f32";
    case PATH_TC_SMALL: return "tc-32x32";
    case PATH_TC_BIG: return "tc-64x64";
    }
    return "?";
}

extern "C" int dense_cuda_run(const struct dense_cuda *d, const float *x_dev, int rows,
                              float *y_dev, void *stream, char *msg, size_t cap)
{
    if (rows <= 0)
        return 0;
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    switch (d->wdt) {
    case DTYPE_F32: launch<float>(d, x_dev, rows, y_dev, s); break;
    case DTYPE_F16: launch<__half>(d, x_dev, rows, y_dev, s); break;
    case DTYPE_BF16: launch<__nv_bfloat16>(d, x_dev, rows, y_dev, s); break;
    }
    CUDA_TRY(cudaGetLastError(), msg, cap);
    return 0;
}

extern "C" int dense_cuda_prepare(const void *w, enum dtype wdt, const void *b, enum dtype bdt,
                                  int out_features, int in_features, enum dense_act act,
                                  struct dense_cuda **out, char *msg, size_t cap)
{
    *out = NULL;
    if (out_features < 1 || in_features < 1) {
        snprintf(msg, cap, "dense layer of %d x %d: dimensions must be positive", out_features,
                 in_features);
        return -1;
    }
    struct dense_cuda *d = (struct dense_cuda *)calloc(1, sizeof *d);
    float *hb = b ? (float *)malloc((size_t)out_features * sizeof(float)) : NULL;
    if (!d || (b && !hb)) {
        free(d);
        free(hb);
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    d->out = out_features;
    d->in = in_features;
    d->wdt = wdt;
    d->act = act;
    /* The current device (the one the weights go to) decides whether the
     * tensor-core kernel may run and which of its tiles fills it. */
    int dev = 0, major = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&d->sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) {
        snprintf(msg, cap, "querying the current device: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        free(hb);
        dense_cuda_free(d);
        return -1;
    }
    d->tc = major >= 8;
    size_t wbytes = (size_t)out_features * (size_t)in_features * dtype_size(wdt);
    e = cudaMalloc(&d->w, wbytes);
    if (e == cudaSuccess)
        e = cudaMemcpy(d->w, w, wbytes, cudaMemcpyHostToDevice);   /* w may be unaligned */
    if (e == cudaSuccess && b) {
        /* The bias is small: widen it to F32 once here. */
        const unsigned char *bp = (const unsigned char *)b;
        for (int i = 0; i < out_features; i++) {
            if (bdt == DTYPE_F32) {
                memcpy(&hb[i], bp + (size_t)i * 4, 4);
            } else {
                uint16_t h;
                memcpy(&h, bp + (size_t)i * 2, 2);
                hb[i] = bdt == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
            }
        }
        e = cudaMalloc(&d->b, (size_t)out_features * sizeof(float));
        if (e == cudaSuccess)
            e = cudaMemcpy(d->b, hb, (size_t)out_features * sizeof(float), cudaMemcpyHostToDevice);
    }
    free(hb);
    if (e != cudaSuccess) {
        snprintf(msg, cap, "uploading a %d x %d %s layer (%.1f MiB): %s", out_features,
                 in_features, dtype_name(wdt), (double)wbytes / (1 << 20), cudaGetErrorString(e));
        dense_cuda_free(d);
        return -1;
    }
    d->bytes = wbytes + (b ? (size_t)out_features * sizeof(float) : 0);
    *out = d;
    return 0;
}

extern "C" size_t dense_cuda_bytes(const struct dense_cuda *d) { return d ? d->bytes : 0; }

extern "C" void dense_cuda_free(struct dense_cuda *d)
{
    if (!d)
        return;
    if (d->w)
        cudaFree(d->w);
    if (d->b)
        cudaFree(d->b);
    free(d);
}
