/* dense_tc.cuh - the tensor-core kernel of the dense layer, for F16 and BF16
 * weights and batches of at least DENSE_CUDA_TC_MIN_ROWS rows. Included by
 * dense.cu after the helpers it uses (tc_from_f32, tc_store4, cp_async16,
 * cp_async_commit, cp_async_wait_all) and bg_act from common.cuh.
 *
 *   y[r][o] = act(sum_k x[r][k] * W[o][k] + b[o])
 *
 * as C = A * B with A = x ([rows][in], row-major: wmma matrix_a row_major)
 * and B = W^T (W is [out][in] row-major, which is B [in][out] column-major:
 * matrix_b col_major), 16x16x16 wmma fragments, FP32 accumulators.
 *
 * Mixed precision, as cuBLAS's cublasGemmEx with half inputs and FP32
 * compute: x arrives as F32 and is rounded to the weight's type (round to
 * nearest even) when a tile of it is staged into shared memory; the products
 * of two halves are exact in F32 and are summed in F32. So the result is the
 * layer applied to x rounded to F16 (11 significant bits; |x| beyond 65504
 * becomes infinite) or to BF16 (8 bits, the F32 range), not to x itself.
 *
 * One block computes a BM x BN tile of y (BM batch rows, BN outputs) with
 * WM x WN warps, each warp a (BM/WM) x (BN/WN) part of it as FM x FN
 * fragments. The k loop steps by BK = 32 through two shared-memory stages:
 * while the tensor cores work on stage s, the next k slice of W is copied
 * into stage s^1 with cp.async (16-byte copies, when every row of W starts
 * 16-byte aligned: in % 8 == 0), and the next k slice of x is loaded into
 * registers, then converted and stored into stage s^1 after the MMAs.
 * Without that alignment both go through registers with element loads.
 *
 * Odd shapes: every element of a tile that lies outside x or W (row >= rows,
 * output >= out, k >= in) is filled with zero instead of being read, so the
 * padded products add nothing, and the epilogue writes only the elements
 * inside y. Nothing outside x, W, bias or y is ever touched.
 *
 * Epilogue: after the k loop the accumulator fragments are stored to shared
 * memory (reusing the stages' bytes), and the block's threads then read the
 * tile back row by row, add the bias, apply the activation and write y with
 * coalesced, bounds-checked stores. One kernel, no second pass.
 *
 * Shared-memory layout (bytes from a 128-byte aligned base):
 *   stage s (s = 0, 1) at s * STAGE_BYTES:
 *     As: BM rows of LDS halves (x tile, [m][k]),
 *     Bs: BN rows of LDS halves (W tile, [n][k]) at A_BYTES;
 *   Cs (epilogue only, aliases the stages): BM rows of LDC floats.
 * LDS = BK + 8 = 40 halves = 80 bytes: a multiple of 8 elements (wmma's ldm
 * rule for 16-bit types) and of 16 bytes (cp.async destinations); the 8
 * halves of padding shift consecutive rows across banks. Fragment pointers
 * are at rows that are multiples of 16 (16 * 80 = 1280 bytes) and columns 0
 * or 16 (32 bytes): 32-byte aligned, as load_matrix_sync requires.
 * LDC = BN + 4 floats (a multiple of 4, wmma's ldm rule for float); fragment
 * pointers at rows 16i (i * 64 * LDC bytes, a multiple of 256) and columns
 * 16j (64 bytes): 32-byte aligned as store_matrix_sync requires. */

template <int BM_, int BN_, int WM_, int WN_>
struct tc_cfg {
    static constexpr int BM = BM_, BN = BN_, WM = WM_, WN = WN_;
    static constexpr int BK = 32;
    static constexpr int THREADS = 32 * WM * WN;
    static constexpr int WTM = BM / WM, WTN = BN / WN;   /* a warp's tile */
    static constexpr int FM = WTM / 16, FN = WTN / 16;   /* its fragments */
    static constexpr int LDS = BK + 8;                   /* halves */
    static constexpr int LDC = BN + 4;                   /* floats */
    static constexpr int A_BYTES = BM * LDS * 2;
    static constexpr int B_BYTES = BN * LDS * 2;
    static constexpr int STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int C_BYTES = BM * LDC * 4;
    static constexpr int SMEM_BYTES = 2 * STAGE_BYTES > C_BYTES ? 2 * STAGE_BYTES : C_BYTES;
    /* Per thread and k slice: elements of x and of W (element loads), or
     * float4s of x and 16-byte (8-half) chunks of W (vector loads). */
    static constexpr int X_ELEMS = BM * BK / THREADS;
    static constexpr int W_ELEMS = BN * BK / THREADS;
    static constexpr int X_VECS = BM * BK / 4 / THREADS;
    static constexpr int W_CHUNKS = BN * BK / 8 / THREADS;

    static_assert(WTM % 16 == 0 && WTN % 16 == 0, "warp tiles are whole fragments");
    static_assert(BM % WM == 0 && BN % WN == 0, "warps tile the block");
    static_assert(BK % 16 == 0, "k slices are whole fragments");
    static_assert(LDS % 8 == 0 && (LDS * 2) % 16 == 0, "wmma ldm (halves) and cp.async alignment");
    static_assert((16 * LDS * 2) % 32 == 0, "fragment rows of As/Bs 32-byte aligned");
    static_assert(LDC % 4 == 0 && (16 * LDC * 4) % 32 == 0, "wmma ldm (float) and alignment");
    static_assert(A_BYTES % 128 == 0 && STAGE_BYTES % 128 == 0, "stages stay 128-byte aligned");
    static_assert(BM * BK % THREADS == 0 && BN * BK % THREADS == 0, "element loads divide");
    static_assert(BM * BK / 4 % THREADS == 0 && BN * BK / 8 % THREADS == 0, "vector loads divide");
    static_assert(SMEM_BYTES <= 48 * 1024, "static shared memory limit");
};

template <typename T, typename CFG, bool VEC>
__global__ void __launch_bounds__(CFG::THREADS)
dense_tc(const T *__restrict__ W, const float *__restrict__ bias, const float *__restrict__ x,
         float *__restrict__ y, int rows, int out, int in, int act)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    /* BF16 wmma and cp.async need sm_80; dense.cu launches this kernel only
     * on such devices, so older targets compile an empty body. */
    using namespace nvcuda;
    constexpr int BM = CFG::BM, BN = CFG::BN, BK = CFG::BK, NT = CFG::THREADS;
    constexpr int WN = CFG::WN, WTM = CFG::WTM, WTN = CFG::WTN, FM = CFG::FM, FN = CFG::FN;
    constexpr int LDS = CFG::LDS, LDC = CFG::LDC;
    __shared__ __align__(128) unsigned char smem[CFG::SMEM_BYTES];

    const int tid = threadIdx.x, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int nk = (in + BK - 1) / BK;

    /* The next k slice in flight: x always through registers (it is
     * converted), W through registers only without VEC. */
    float xr[CFG::X_ELEMS];
    T wr[VEC ? 1 : CFG::W_ELEMS];

    /* Global memory -> registers (x, and W without VEC) or -> stage `st`
     * (W with VEC, cp.async) for the k slice at k0. */
    auto fetch = [&](int k0, int st) {
        if constexpr (VEC) {
#pragma unroll
            for (int i = 0; i < CFG::X_VECS; i++) {
                const int c = tid + i * NT, r = c / (BK / 4), kq = (c % (BK / 4)) * 4;
                const int row = m0 + r, k = k0 + kq;
                /* in % 8 == 0, so k < in means k .. k+3 are all inside. */
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (row < rows && k < in)
                    v = *reinterpret_cast<const float4 *>(x + (size_t)row * in + k);
                xr[4 * i] = v.x;
                xr[4 * i + 1] = v.y;
                xr[4 * i + 2] = v.z;
                xr[4 * i + 3] = v.w;
            }
            T *bs = reinterpret_cast<T *>(smem + st * CFG::STAGE_BYTES + CFG::A_BYTES);
#pragma unroll
            for (int i = 0; i < CFG::W_CHUNKS; i++) {
                const int c = tid + i * NT, n = c / (BK / 8), kc = (c % (BK / 8)) * 8;
                const int o = n0 + n, k = k0 + kc;
                /* k .. k+7 are all inside or all outside (in % 8 == 0). Outside:
                 * a zero-fill copy that reads nothing (source W: a valid
                 * address all the same). */
                const bool ok = o < out && k < in;
                cp_async16(bs + n * LDS + kc, ok ? W + (size_t)o * in + k : W, ok);
            }
            cp_async_commit();
        } else {
            (void)st;
#pragma unroll
            for (int i = 0; i < CFG::X_ELEMS; i++) {
                const int c = tid + i * NT, r = c / BK, kk = c % BK;
                const int row = m0 + r, k = k0 + kk;
                xr[i] = (row < rows && k < in) ? x[(size_t)row * in + k] : 0.0f;
            }
#pragma unroll
            for (int i = 0; i < CFG::W_ELEMS; i++) {
                const int c = tid + i * NT, n = c / BK, kk = c % BK;
                const int o = n0 + n, k = k0 + kk;
                wr[i] = (o < out && k < in) ? W[(size_t)o * in + k] : tc_from_f32<T>(0.0f);
            }
        }
    };

    /* Registers -> stage `st`: x rounded to T (and W without VEC). Uses the
     * same thread -> element map as fetch. */
    auto stash = [&](int st) {
        T *as = reinterpret_cast<T *>(smem + st * CFG::STAGE_BYTES);
        if constexpr (VEC) {
#pragma unroll
            for (int i = 0; i < CFG::X_VECS; i++) {
                const int c = tid + i * NT, r = c / (BK / 4), kq = (c % (BK / 4)) * 4;
                tc_store4(as + r * LDS + kq, xr[4 * i], xr[4 * i + 1], xr[4 * i + 2],
                          xr[4 * i + 3]);
            }
        } else {
            T *bs = reinterpret_cast<T *>(smem + st * CFG::STAGE_BYTES + CFG::A_BYTES);
#pragma unroll
            for (int i = 0; i < CFG::X_ELEMS; i++) {
                const int c = tid + i * NT, r = c / BK, kk = c % BK;
                as[r * LDS + kk] = tc_from_f32<T>(xr[i]);
            }
#pragma unroll
            for (int i = 0; i < CFG::W_ELEMS; i++) {
                const int c = tid + i * NT, n = c / BK, kk = c % BK;
                bs[n * LDS + kk] = wr[i];
            }
        }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[FM][FN];
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < FN; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);

    fetch(0, 0);
    stash(0);
    for (int kt = 0; kt < nk; kt++) {
        const int cur = kt & 1;
        const bool more = kt + 1 < nk;
        /* This thread's copies into stage cur have landed; after the barrier
         * everyone's have (and every stash into cur), and every warp is done
         * with the MMAs of step kt-1, which read stage cur^1: free to refill. */
        cp_async_wait_all();
        __syncthreads();
        if (more)
            fetch((kt + 1) * BK, cur ^ 1);
        const T *as = reinterpret_cast<const T *>(smem + cur * CFG::STAGE_BYTES);
        const T *bs = reinterpret_cast<const T *>(smem + cur * CFG::STAGE_BYTES + CFG::A_BYTES);
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[FM];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b[FN];
#pragma unroll
            for (int i = 0; i < FM; i++)
                wmma::load_matrix_sync(a[i], as + (wm * WTM + i * 16) * LDS + kk, LDS);
#pragma unroll
            for (int j = 0; j < FN; j++)   /* B[k][n] = Bs[n][k]: column-major, ld LDS */
                wmma::load_matrix_sync(b[j], bs + (wn * WTN + j * 16) * LDS + kk, LDS);
#pragma unroll
            for (int i = 0; i < FM; i++)
#pragma unroll
                for (int j = 0; j < FN; j++)
                    wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        /* Stage cur^1 was last read in step kt-1 (before the barrier above)
         * and is next read in step kt+1 (after the next barrier). */
        if (more)
            stash(cur ^ 1);
    }

    /* Cs aliases the stages: every warp must be done with its last MMAs
     * (no cp.async is outstanding: the last step fetched nothing). */
    __syncthreads();
    float *cs = reinterpret_cast<float *>(smem);
#pragma unroll
    for (int i = 0; i < FM; i++)
#pragma unroll
        for (int j = 0; j < FN; j++)
            wmma::store_matrix_sync(cs + (wm * WTM + i * 16) * LDC + wn * WTN + j * 16, acc[i][j],
                                    LDC, wmma::mem_row_major);
    __syncthreads();
    /* Consecutive threads take consecutive outputs of one row: coalesced. */
    for (int idx = tid; idx < BM * BN; idx += NT) {
        const int r = idx / BN, c = idx % BN;
        const int row = m0 + r, o = n0 + c;
        if (row < rows && o < out)
            y[(size_t)row * out + o] = bg_act(cs[r * LDC + c] + (bias ? bias[o] : 0.0f), act);
    }
#endif
}
