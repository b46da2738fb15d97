/* dense_kern_internal.h - the dense layer's loops and register tiles, written
 * once over simd_internal.h and compiled per ISA by isa_generic.c,
 * isa_avx2.c and isa_avx512.c (KN() names them dense_run_avx2, ...).
 *
 * Loop order, outermost first:
 *   k-block (kc inputs) -> panel (NR outputs) -> row tile (<= MR rows).
 * The panel (kc x NR, up to 32 KiB as F32; halves are widened into a stack
 * buffer once per k-block) sits in L1 while every row tile of the batch
 * streams its kc-input slice of x from L2, so each weight is read from memory
 * exactly once per call whatever the batch size, and the next panel is
 * prefetched meanwhile. Each tile keeps MR x NR sums in registers.
 * rows == 1 skips the tiles: dk_gemv streams the panels, halves widened in
 * registers. Either way each output sums a k-block in order from zero, one
 * FMA per input, then adds it to y: a row gets the same bits whatever batch
 * it is in, and the rounding error of long dot products stays closer to
 * blocked than to serial summation. Bias and activation are applied once,
 * after the last k-block. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/dtype.h"
#include "kernels/cpu/simd_internal.h"
#include "kernels/cpu/vmath_internal.h"

#if SIMD_AVX512
#define NR 32  /* outputs per panel: 2 zmm */
#define MR 12  /* 12x2 accumulators + 2 weight vectors + 1 broadcast of 32 zmm */
#elif SIMD_AVX2
#define NR 16  /* 2 ymm */
#define MR 6   /* 6x2 accumulators + 2 weight vectors + 1 broadcast of 16 ymm */
#else
#define NR 16  /* 4 128-bit vectors */
#define MR 4   /* 4x4 accumulators: fits NEON's 32 registers, SSE2 spills a few */
#endif
#define NV (NR / VW)  /* vectors per tile row */
#define GP (8 / NV)   /* rows == 1: panels side by side, for 8 independent sums */

_Static_assert(NR <= DENSE_NR_MAX, "panel wider than cpu_internal.h allows");

enum { DK_FIRST = 1, DK_LAST = 2 };

/* Prefetch addresses are integers: they run past the end of the weights,
 * where forming a pointer would be undefined (prefetching never faults). */
#define PREFETCH(addr) __builtin_prefetch((const void *)(addr))

/* One tile row's sums (acc, NR floats): adds earlier k-blocks, then bias and
 * activation after the last, and stores; a partial panel (nc < NR) goes
 * through a buffer. Out of line: it runs once per row per k-block, and
 * inlining the activations into every tile size would only bloat the code. */
static __attribute__((noinline)) SIMD_TARGET void KN(dk_row_out)(const float *acc, float *y,
                                                                 int nc, int flags,
                                                                 const float *bias,
                                                                 enum dense_act act)
{
    float tmp[NR] __attribute__((aligned(64))) = {0};
    float *dst = nc == NR ? y : tmp;
    if (!(flags & DK_FIRST) && nc < NR)
        memcpy(tmp, y, (size_t)nc * sizeof(float));
UNROLL
    for (int j = 0; j < NV; j++) {
        vf v = v_load(acc + j * VW);
        if (!(flags & DK_FIRST))
            v += v_load(dst + j * VW);
        if (flags & DK_LAST)
            v = v_act(v + v_load(bias + j * VW), act);
        v_store(dst + j * VW, v);
    }
    if (nc < NR)
        memcpy(y, tmp, (size_t)nc * sizeof(float));
}

/* mr rows x NR outputs over kc inputs; mr is a constant in each caller, so
 * the loops unroll and acc[][] lives in registers. pf: the next panel, one
 * k-step of it (pfstep bytes) fetched per k-step. */
KFN void KN(dk_tile)(const int mr, int kc, const float *restrict x, size_t ldx,
                     const float *restrict wp, uintptr_t pf, size_t pfstep, float *restrict y,
                     size_t ldy, int nc, int flags, const float *restrict bias,
                     enum dense_act act)
{
    vf acc[MR][NV];
UNROLL
    for (int r = 0; r < mr; r++)
UNROLL
        for (int j = 0; j < NV; j++)
            acc[r][j] = v_set1(0.0f);
    for (int k = 0; k < kc; k++) {
        PREFETCH(pf + k * pfstep);
        if (pfstep > 64)    /* F32 panels of 32: two lines per k-step */
            PREFETCH(pf + k * pfstep + 64);
        vf w[NV];
UNROLL
        for (int j = 0; j < NV; j++)
            w[j] = v_load(wp + (size_t)k * NR + j * VW);
UNROLL
        for (int r = 0; r < mr; r++) {
            vf xb = v_set1(x[(size_t)r * ldx + k]);
UNROLL
            for (int j = 0; j < NV; j++)
                acc[r][j] = v_fma(xb, w[j], acc[r][j]);
        }
    }
    float out[NR] __attribute__((aligned(64)));
UNROLL
    for (int r = 0; r < mr; r++) {
UNROLL
        for (int j = 0; j < NV; j++)
            v_store(out + j * VW, acc[r][j]);
        KN(dk_row_out)(out, y + (size_t)r * ldy, nc, flags, bias, act);
    }
}

/* One instance per row count, so the dispatch below is a jump table. */
#define DK_TILE_FN(m)                                                                            \
    static __attribute__((noinline)) SIMD_TARGET void KN(dk_tile_##m)(                           \
        int kc, const float *x, size_t ldx, const float *wp, uintptr_t pf, size_t pfstep,        \
        float *y, size_t ldy, int nc, int flags, const float *bias, enum dense_act act)          \
    {                                                                                            \
        KN(dk_tile)(m, kc, x, ldx, wp, pf, pfstep, y, ldy, nc, flags, bias, act);                \
    }
DK_TILE_FN(1)
DK_TILE_FN(2)
DK_TILE_FN(3)
DK_TILE_FN(4)
#if MR > 4
DK_TILE_FN(5)
DK_TILE_FN(6)
#endif
#if MR > 6
DK_TILE_FN(7)
DK_TILE_FN(8)
DK_TILE_FN(9)
DK_TILE_FN(10)
DK_TILE_FN(11)
DK_TILE_FN(12)
#endif

/* Weights k-step k, vector j of a panel stored as sdt, widened to F32 in
 * registers. sdt is a constant wherever this is inlined. */
KFN vf KN(dk_wload)(const enum dtype sdt, const void *panel, int k, int j)
{
    const size_t at = (size_t)k * NR + (size_t)j * VW;
    if (sdt == DTYPE_F32)
        return v_load((const float *)panel + at);
    const uint16_t *h = (const uint16_t *)panel + at;
#if SIMD_AVX512
    __m256i v = _mm256_load_si256((const __m256i *)(const void *)h);
    if (sdt == DTYPE_F16)
        return _mm512_cvtph_ps(v);
    return (vf)_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16);
#elif SIMD_AVX2
    __m128i v = _mm_load_si128((const __m128i *)(const void *)h);
    if (sdt == DTYPE_F16)
        return _mm256_cvtph_ps(v);
    return (vf)_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16);
#else
    typedef uint16_t vh __attribute__((vector_size(VW * 2)));
    typedef uint32_t vu __attribute__((vector_size(VW * 4)));
    vh v;
    memcpy(&v, h, sizeof v);
    if (sdt == DTYPE_BF16)
        return (vf)(__builtin_convertvector(v, vu) << 16);
    float f[VW];    /* not reached: dense.c stores F16 as F32 for this path */
    for (int i = 0; i < VW; i++)
        f[i] = dtype_f16_to_f32(h[i]);
    return v_load(f);
#endif
}

/* rows == 1: a matrix-vector product, memory-bound, so halves are widened in
 * registers (no trip through a buffer) and the next panels are prefetched.
 * One panel has only NV sums, too few to hide the FMA latency, so np panels
 * (up to GP, adjacent in memory) run side by side. Each output still sums
 * its k-block in order from zero with one FMA per step, exactly as dk_tile
 * does, so a row gets the same bits alone as in any batch. */
KFN void KN(dk_gemv)(const enum dtype sdt, const int np, int kc, const float *restrict x,
                     const char *panel, uintptr_t pf, float *restrict y, int nc_last, int flags,
                     const float *restrict bias, enum dense_act act)
{
    const size_t es = dtype_size(sdt), pbytes = (size_t)kc * NR * es;
    const size_t pfstep = (size_t)np * NR * es; /* bytes of the next group per k-step */
    vf acc[4][NV];  /* np <= GP <= 4 */
UNROLL
    for (int p = 0; p < np; p++)
UNROLL
        for (int j = 0; j < NV; j++)
            acc[p][j] = v_set1(0.0f);
    for (int k = 0; k < kc; k++) {
UNROLL
        for (size_t line = 0; line < pfstep; line += 64)
            PREFETCH(pf + k * pfstep + line);
        const vf xb = v_set1(x[k]);
UNROLL
        for (int p = 0; p < np; p++)
UNROLL
            for (int j = 0; j < NV; j++)
                acc[p][j] = v_fma(xb, KN(dk_wload)(sdt, panel + p * pbytes, k, j), acc[p][j]);
    }
    float out[NR] __attribute__((aligned(64)));
UNROLL
    for (int p = 0; p < np; p++) {
UNROLL
        for (int j = 0; j < NV; j++)
            v_store(out + j * VW, acc[p][j]);
        KN(dk_row_out)(out, y + p * NR, p == np - 1 ? nc_last : NR, flags, bias + p * NR, act);
    }
}

#define DK_GEMV_FN(sdt, np)                                                                      \
    static __attribute__((noinline)) SIMD_TARGET void KN(dk_gemv_##sdt##_##np)(                  \
        int kc, const float *x, const char *panel, uintptr_t pf, float *y, int nc_last,          \
        int flags, const float *bias, enum dense_act act)                                        \
    {                                                                                            \
        KN(dk_gemv)(DTYPE_##sdt, np, kc, x, panel, pf, y, nc_last, flags, bias, act);            \
    }
#define DK_GEMV_FNS(sdt) DK_GEMV_FN(sdt, 1) DK_GEMV_FN(sdt, 2) DK_GEMV_FN(sdt, 3) DK_GEMV_FN(sdt, 4)
DK_GEMV_FNS(F32)
DK_GEMV_FNS(F16)
DK_GEMV_FNS(BF16)
_Static_assert(GP <= 4 && DTYPE_F32 == 0 && DTYPE_F16 == 1 && DTYPE_BF16 == 2,
               "the table below has 4 panel counts per dtype, in enum order");

/* One k-block of rows == 1, GP panels at a time. */
KFN void KN(dk_gemv_block)(const struct dense_cpu *d, int kc, int flags, const char *blk,
                           const float *x, float *y)
{
    typedef void gemv_fn(int, const float *, const char *, uintptr_t, float *, int, int,
                         const float *, enum dense_act);
    static gemv_fn *const by_type_np[3][4] = {
        {KN(dk_gemv_F32_1), KN(dk_gemv_F32_2), KN(dk_gemv_F32_3), KN(dk_gemv_F32_4)},
        {KN(dk_gemv_F16_1), KN(dk_gemv_F16_2), KN(dk_gemv_F16_3), KN(dk_gemv_F16_4)},
        {KN(dk_gemv_BF16_1), KN(dk_gemv_BF16_2), KN(dk_gemv_BF16_3), KN(dk_gemv_BF16_4)},
    };
    const size_t es = dtype_size(d->sdt);
    const int N = d->out;
    for (int jr = 0; jr < N; jr += GP * NR) {
        const int left = (N - jr + NR - 1) / NR, np = left < GP ? left : GP;
        const char *panel = blk + (size_t)jr * (size_t)kc * es;
        /* The layout is in loop order: the next group follows this one
         * (past the last one, prefetching is harmless). */
        const uintptr_t next = (uintptr_t)panel + (size_t)np * (size_t)kc * NR * es;
        const int last = jr + (np - 1) * NR, nc_last = N - last < NR ? N - last : NR;
        by_type_np[d->sdt][np - 1](kc, x, panel, next, y + jr, nc_last, flags, d->bias + jr,
                                   d->act);
    }
}

/* Widens a panel of n halves (a multiple of NR) to F32, prefetching the next
 * panel (pf) as it goes. */
KFN void KN(dk_widen)(enum dtype sdt, const uint16_t *restrict src, float *restrict dst, size_t n,
                      uintptr_t pf)
{
    if (sdt == DTYPE_F16) {
        for (size_t i = 0; i < n; i += NR) {
            PREFETCH(pf + i * 2);
UNROLL
            for (int j = 0; j < NV; j++)
                v_store(dst + i + j * VW, KN(dk_wload)(DTYPE_F16, src + i, 0, j));
        }
    } else {
        for (size_t i = 0; i < n; i += NR) {
            PREFETCH(pf + i * 2);
UNROLL
            for (int j = 0; j < NV; j++)
                v_store(dst + i + j * VW, KN(dk_wload)(DTYPE_BF16, src + i, 0, j));
        }
    }
}

KENTRY void KN(dense_run)(const struct dense_cpu *d, const float *x, int rows, float *y)
{
    if (rows <= 0)
        return;
    float wbuf[DENSE_KC_MAX * NR] __attribute__((aligned(DENSE_ALIGN)));
    const int K = d->in, N = d->out;
    const size_t esize = dtype_size(d->sdt);
    const int ntiles = (rows + MR - 1) / MR;
    const int tbase = rows / ntiles, textra = rows % ntiles; /* tiles of tbase or tbase+1 rows */
    /* Enough prefetches per k-step to cover the next panel in kc steps. */
    const size_t pfstep = NR * esize;
    for (int pc = 0; pc < K; pc += d->kc) {
        const int kc = K - pc < d->kc ? K - pc : d->kc;
        const int flags = (pc == 0 ? DK_FIRST : 0) | (pc + kc == K ? DK_LAST : 0);
        const char *blk = (const char *)d->w + (size_t)pc * (size_t)d->npad * esize;
        if (rows == 1) {
            KN(dk_gemv_block)(d, kc, flags, blk, x + pc, y);
            continue;
        }
        for (int jr = 0; jr < N; jr += NR) {
            const char *panel = blk + (size_t)jr * (size_t)kc * esize;
            /* The layout is in loop order: the next panel follows this one
             * (past the last one, prefetching is harmless). */
            const uintptr_t next = (uintptr_t)panel + (size_t)kc * NR * esize;
            const int nc = N - jr < NR ? N - jr : NR;
            const float *bias = d->bias + jr;
            const float *wp = (const float *)(const void *)panel;
            if (d->sdt != DTYPE_F32) {
                KN(dk_widen)(d->sdt, (const uint16_t *)(const void *)panel, wbuf,
                             (size_t)kc * NR, next);
                wp = wbuf;
            }
            int r0 = 0;
            for (int t = 0; t < ntiles; t++) {
                const int mr = tbase + (t < textra);
                const float *xt = x + (size_t)r0 * (size_t)K + pc;
                float *yt = y + (size_t)r0 * (size_t)N + jr;
                switch (mr) {
#define DK_CASE(m)                                                                               \
    case m:                                                                                      \
        KN(dk_tile_##m)(kc, xt, (size_t)K, wp, next, pfstep, yt, (size_t)N, nc, flags, bias,     \
                        d->act);                                                                 \
        break;
                    DK_CASE(1)
                    DK_CASE(2)
                    DK_CASE(3)
                    DK_CASE(4)
#if MR > 4
                    DK_CASE(5)
                    DK_CASE(6)
#endif
#if MR > 6
                    DK_CASE(7)
                    DK_CASE(8)
                    DK_CASE(9)
                    DK_CASE(10)
                    DK_CASE(11)
                    DK_CASE(12)
#endif
#undef DK_CASE
                }
                r0 += mr;
            }
        }
    }
}

#undef PREFETCH
#undef NR
#undef MR
#undef NV
#undef GP
