/* attention.cu - attention.h's attention_varlen_cuda: softmax(q k^T /
 * sqrt(head_dim)) v per sequence and head of a packed batch, flash style
 * (the scores never leave the multiprocessor), all in F32.
 *
 * A block of 4 warps takes one query tile of one head of one sequence: BQ =
 * 4 R query rows (R = 8 per warp, 4 for head_dim > 64 to bound registers
 * and shared memory) staged in shared memory once. It walks the sequence's
 * keys in tiles of 32, K and V staged in shared memory, and per tile each
 * warp
 *   - scores its R rows against the 32 keys, lane j taking key j: a float4
 *     of K (row stride D + 4 floats: a quarter-warp's 16-byte loads hit all
 *     32 banks once) times a broadcast float4 of each q row, FMAs over the
 *     columns in order, then times the scale, as the CPU kernel does;
 *   - updates each row's running maximum m and sum l by shuffles (keys past
 *     the sequence score -inf, so their weight is exactly 0), rescales its
 *     accumulators by exp(m_old - m_new) and leaves the tile's weights p in
 *     shared memory;
 *   - adds p V into its accumulators: lane c holds output columns c, c + 32,
 *     ... of its R rows; p is read as broadcast float4s, V rows coalesced.
 * The output is o / l per row, written once. No score matrix, no scratch,
 * nothing computed for other sequences' rows or past the longest one: a
 * block whose tile starts past its sequence's end returns at once.
 *
 * head_dim is rounded up to D = 32, 64 or 128 (a template parameter: fixed
 * loop bounds and register arrays); the columns past head_dim are zero in
 * the staged Q, K and V, add nothing, and are not stored.
 *
 * A NaN score wins the running maximum (max_nan), so a NaN anywhere in a
 * row's inputs makes that row NaN, as on the CPU. Shared memory: 16.5 KiB
 * (D 32), 28.5 KiB (64), 42.5 KiB (128): static, under 48 KiB. */
#include <math.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/varlen.cuh"

extern "C" {
#include "kernels/attention.h"
}

#define ATT_WARPS 4
#define ATT_THREADS (ATT_WARPS * 32)
#define ATT_KEYS 32      /* keys per tile: one per lane when scoring */
#define ATT_MAX_DIM 128
#define ATT_MAX_GRID_Z 65535

template <int D>
struct att_cfg {
    static constexpr int R = D > 64 ? 4 : 8;   /* query rows per warp */
    static constexpr int BQ = ATT_WARPS * R;   /* query rows per block */
    static constexpr int KLD = D + 4;          /* floats per staged K row */
    static constexpr int CPL = D / 32;         /* output columns per lane */
    static constexpr int SMEM = (BQ * D + ATT_KEYS * KLD + ATT_KEYS * D + ATT_WARPS * R * ATT_KEYS) * 4;
    static_assert(D % 32 == 0, "lanes own whole columns");
    static_assert(KLD % 4 == 0, "float4 rows of K");
    static_assert(SMEM <= 48 * 1024, "static shared memory limit");
};

/* At least 4 blocks per multiprocessor: at most 128 registers a thread,
 * which every D fits without spilling (left alone, ptxas chose 80 and spilled
 * at D = 64). */
template <int D>
__global__ void __launch_bounds__(ATT_THREADS, 4)
attention_flash(const float *__restrict__ q, const float *__restrict__ k,
                const float *__restrict__ v, size_t ld_in, float *__restrict__ out,
                size_t ld_out, const int *__restrict__ cu, int head_dim, float scale)
{
    typedef att_cfg<D> C;
    constexpr int R = C::R, BQ = C::BQ, KLD = C::KLD, CPL = C::CPL;
    __shared__ __align__(16) float qs[BQ][D];
    __shared__ __align__(16) float ks[ATT_KEYS][KLD];
    __shared__ __align__(16) float vs[ATT_KEYS][D];
    __shared__ __align__(16) float ps[ATT_WARPS][R][ATT_KEYS];

    const int row0 = cu[blockIdx.z], len = cu[blockIdx.z + 1] - row0;
    const int q0 = (int)blockIdx.x * BQ;
    if (q0 >= len)
        return;   /* the whole block: this tile is past the sequence */
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const size_t col = (size_t)blockIdx.y * (size_t)head_dim;

    for (int i = tid; i < BQ * D; i += ATT_THREADS) {
        const int r = i / D, c = i % D, t = q0 + r;
        qs[r][c] = (t < len && c < head_dim) ? q[(size_t)(row0 + t) * ld_in + col + c] : 0.0f;
    }

    float o[R][CPL], m[R], l[R];
#pragma unroll
    for (int r = 0; r < R; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
#pragma unroll
        for (int cc = 0; cc < CPL; cc++)
            o[r][cc] = 0.0f;
    }
    /* A warp whose rows all lie past the sequence only helps stage K and V. */
    const bool active = q0 + warp * R < len;

    for (int k0 = 0; k0 < len; k0 += ATT_KEYS) {
        const int nk = min(ATT_KEYS, len - k0);
        /* Every warp is done with the previous tile's K, V (and p); on the
         * first pass, the Q tile is complete after the next barrier. */
        __syncthreads();
        for (int i = tid; i < ATT_KEYS * D; i += ATT_THREADS) {
            const int j = i / D, c = i % D;
            const bool in = j < nk && c < head_dim;
            const size_t g = (size_t)(row0 + k0 + j) * ld_in + col + c;
            ks[j][c] = in ? k[g] : 0.0f;
            vs[j][c] = in ? v[g] : 0.0f;
        }
        __syncthreads();
        if (!active)
            continue;

        float s[R];
#pragma unroll
        for (int r = 0; r < R; r++)
            s[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < D; c += 4) {
            const float4 kk = *reinterpret_cast<const float4 *>(&ks[lane][c]);
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float4 qq = *reinterpret_cast<const float4 *>(&qs[warp * R + r][c]);
                s[r] = fmaf(qq.x, kk.x, s[r]);
                s[r] = fmaf(qq.y, kk.y, s[r]);
                s[r] = fmaf(qq.z, kk.z, s[r]);
                s[r] = fmaf(qq.w, kk.w, s[r]);
            }
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const float sc = lane < nk ? s[r] * scale : -INFINITY;
            /* Lane 0's key is always inside, so mn is finite unless a score
             * is NaN or infinite; then the row is NaN, as on the CPU. */
            const float mn = max_nan(m[r], warp_max(sc));
            const float alpha = expf(m[r] - mn);   /* 0 on the first tile: m = -inf */
            const float p = expf(sc - mn);         /* 0 for keys past the sequence */
            l[r] = fmaf(l[r], alpha, warp_sum(p));
            m[r] = mn;
#pragma unroll
            for (int cc = 0; cc < CPL; cc++)
                o[r][cc] *= alpha;
            ps[warp][r][lane] = p;
        }
        __syncwarp();
        /* Keys past nk (up to the next multiple of 4) have p = 0 and zero V
         * rows: included only to keep the float4 reads of p whole. */
        for (int j = 0; j < nk; j += 4) {
            float4 p4[R];
#pragma unroll
            for (int r = 0; r < R; r++)
                p4[r] = *reinterpret_cast<const float4 *>(&ps[warp][r][j]);
#pragma unroll
            for (int cc = 0; cc < CPL; cc++) {
                const float v0 = vs[j][lane + 32 * cc], v1 = vs[j + 1][lane + 32 * cc];
                const float v2 = vs[j + 2][lane + 32 * cc], v3 = vs[j + 3][lane + 32 * cc];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    o[r][cc] = fmaf(p4[r].x, v0, o[r][cc]);
                    o[r][cc] = fmaf(p4[r].y, v1, o[r][cc]);
                    o[r][cc] = fmaf(p4[r].z, v2, o[r][cc]);
                    o[r][cc] = fmaf(p4[r].w, v3, o[r][cc]);
                }
            }
        }
    }
    if (!active)
        return;
#pragma unroll
    for (int r = 0; r < R; r++) {
        const int t = q0 + warp * R + r;
        const float inv = 1.0f / l[r];
        float *orow = out + (size_t)(row0 + t) * ld_out + col;
#pragma unroll
        for (int cc = 0; cc < CPL; cc++) {
            const int c = lane + 32 * cc;
            if (t < len && c < head_dim)
                orow[c] = o[r][cc] * inv;
        }
    }
}

template <int D>
static void attention_launch(const struct attention_args *a, const int *cu_dev, int longest,
                             cudaStream_t s)
{
    const float scale = 1.0f / sqrtf((float)a->head_dim);   /* as the CPU kernel */
    const unsigned tiles = (unsigned)((longest + att_cfg<D>::BQ - 1) / att_cfg<D>::BQ);
    /* gridDim.z is at most 65535: longer batches go in slices of sequences
     * (the offsets are absolute rows, so a slice is cu_dev + first). */
    for (int first = 0; first < a->nseq; first += ATT_MAX_GRID_Z) {
        const int n = min(ATT_MAX_GRID_Z, a->nseq - first);
        dim3 grid(tiles, (unsigned)a->heads, (unsigned)n);
        attention_flash<D><<<grid, ATT_THREADS, 0, s>>>(a->q, a->k, a->v, a->ld_in, a->out,
                                                        a->ld_out, cu_dev + first, a->head_dim,
                                                        scale);
    }
}

extern "C" int attention_varlen_cuda(const struct attention_args *a, const int *cu_seqlens_dev,
                                     void *stream, char *msg, size_t cap)
{
    if (!a || a->nseq < 0) {
        snprintf(msg, cap, "attention: no arguments, or a negative sequence count");
        return -1;
    }
    if (a->nseq == 0)
        return 0;
    if (a->heads < 1 || a->heads > 65535 || a->head_dim < 1 || a->head_dim > ATT_MAX_DIM) {
        snprintf(msg, cap, "attention: %d heads of %d: the GPU kernel takes 1..65535 heads of "
                 "1..%d", a->heads, a->head_dim, ATT_MAX_DIM);
        return -1;
    }
    const size_t width = (size_t)a->heads * (size_t)a->head_dim;
    if (a->ld_in < width || a->ld_out < width) {
        snprintf(msg, cap, "attention: strides %zu (in) and %zu (out) are below heads x head_dim "
                 "= %zu", a->ld_in, a->ld_out, width);
        return -1;
    }
    const int longest = varlen_longest(a->cu_seqlens, a->nseq, "attention", msg, cap);
    if (longest < 0)
        return -1;
    if (longest == 0)
        return 0;
    if (!a->q || !a->k || !a->v || !a->out || !cu_seqlens_dev) {
        snprintf(msg, cap, "attention: q, k, v, out and the device offsets must not be NULL");
        return -1;
    }
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (a->head_dim <= 32)
        attention_launch<32>(a, cu_seqlens_dev, longest, s);
    else if (a->head_dim <= 64)
        attention_launch<64>(a, cu_seqlens_dev, longest, s);
    else
        attention_launch<128>(a, cu_seqlens_dev, longest, s);
    CUDA_TRY(cudaGetLastError(), msg, cap);
    return 0;
}
