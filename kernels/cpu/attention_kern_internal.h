/* attention_kern_internal.h - one (sequence, head) of attention.h written
 * once over simd_internal.h, compiled per ISA by isa_generic.c, isa_avx2.c
 * and isa_avx512.c (KN() names them attention_head_avx2, ...).
 *
 * The head's K is transposed into kt[head_dim][lp] (lp = the sequence length
 * rounded up to ATT_LP, the columns past it zero), so scores are a small
 * GEMM with keys along the vector lanes: ATT_QB query rows x 2 vectors of
 * keys in registers, one broadcast of q and one FMA per element. The scores
 * (s[ATT_QB][lp]) then go through a stable softmax left unnormalised (the
 * columns past the length are set to -inf first, so their exp is 0), and
 * P.V runs with head_dim along the lanes: ATT_QB rows x 2 vectors of
 * outputs, one broadcast of p per V element; the 1/sum is applied on the
 * store. Every sum runs over the sequence in order from zero, so a row's
 * result depends only on its own sequence. */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/simd_internal.h"
#include "kernels/cpu/vmath_internal.h"

_Static_assert(ATT_LP % (2 * VW) == 0, "ATT_LP must be a whole number of key chunks");

/* Scores, softmax and P.V for the mr (constant in each caller) query rows at
 * q, written to out. */
KFN void KN(att_block)(const int mr, const float *restrict q, const float *restrict v,
                       size_t ld_in, float *restrict out, size_t ld_out, int len, int lp, int d,
                       const float *restrict kt, float *restrict s, float scale)
{
    const vf vs = v_set1(scale);
    for (int j0 = 0; j0 < lp; j0 += 2 * VW) {
        vf acc[ATT_QB][2];
UNROLL
        for (int r = 0; r < mr; r++)
            acc[r][0] = acc[r][1] = v_set1(0.0f);
        const float *kc = kt + j0;
        for (int c = 0; c < d; c++, kc += lp) {
            vf k0 = v_load(kc), k1 = v_load(kc + VW);
UNROLL
            for (int r = 0; r < mr; r++) {
                vf qb = v_set1(q[(size_t)r * ld_in + (size_t)c]);
                acc[r][0] = v_fma(qb, k0, acc[r][0]);
                acc[r][1] = v_fma(qb, k1, acc[r][1]);
            }
        }
UNROLL
        for (int r = 0; r < mr; r++) {
            v_store(s + (size_t)r * lp + j0, acc[r][0] * vs);
            v_store(s + (size_t)r * lp + j0 + VW, acc[r][1] * vs);
        }
    }

    float inv[ATT_QB];
    for (int r = 0; r < mr; r++) {
        float *sr = s + (size_t)r * lp;
        for (int j = len; j < lp; j++)
            sr[j] = -INFINITY;
        vf m0 = v_set1(-INFINITY), m1 = m0;
        for (int j = 0; j < lp; j += 2 * VW) {
            vf a = v_load(sr + j), b = v_load(sr + j + VW);
            m0 = v_sel(a > m0, a, m0);
            m1 = v_sel(b > m1, b, m1);
        }
        m0 = v_sel(m1 > m0, m1, m0);
        const vf m = v_set1(v_hmax(m0));   /* NaN skipped here; its exp makes the row NaN */
        vf e0 = v_set1(0.0f), e1 = e0;
        for (int j = 0; j < lp; j += 2 * VW) {
            vf a = v_exp_neg(v_load(sr + j) - m), b = v_exp_neg(v_load(sr + j + VW) - m);
            v_store(sr + j, a);
            v_store(sr + j + VW, b);
            e0 += a;
            e1 += b;
        }
        inv[r] = 1.0f / v_hsum(e0 + e1);
    }

    int c0 = 0;
    for (; c0 + 2 * VW <= d; c0 += 2 * VW) {
        vf acc[ATT_QB][2];
UNROLL
        for (int r = 0; r < mr; r++)
            acc[r][0] = acc[r][1] = v_set1(0.0f);
        const float *vj = v + c0;
        for (int j = 0; j < len; j++, vj += ld_in) {
            vf a = v_load(vj), b = v_load(vj + VW);
UNROLL
            for (int r = 0; r < mr; r++) {
                vf p = v_set1(s[(size_t)r * lp + (size_t)j]);
                acc[r][0] = v_fma(p, a, acc[r][0]);
                acc[r][1] = v_fma(p, b, acc[r][1]);
            }
        }
UNROLL
        for (int r = 0; r < mr; r++) {
            float *o = out + (size_t)r * ld_out + c0;
            v_store(o, acc[r][0] * v_set1(inv[r]));
            v_store(o + VW, acc[r][1] * v_set1(inv[r]));
        }
    }
    for (; c0 + VW <= d; c0 += VW) {
        vf acc[ATT_QB];
UNROLL
        for (int r = 0; r < mr; r++)
            acc[r] = v_set1(0.0f);
        const float *vj = v + c0;
        for (int j = 0; j < len; j++, vj += ld_in) {
            vf a = v_load(vj);
UNROLL
            for (int r = 0; r < mr; r++)
                acc[r] = v_fma(v_set1(s[(size_t)r * lp + (size_t)j]), a, acc[r]);
        }
UNROLL
        for (int r = 0; r < mr; r++)
            v_store(out + (size_t)r * ld_out + c0, acc[r] * v_set1(inv[r]));
    }
    for (; c0 < d; c0++)   /* head_dim % VW: scalar columns */
        for (int r = 0; r < mr; r++) {
            float acc = 0;
            for (int j = 0; j < len; j++)
                acc = fmaf(s[(size_t)r * lp + (size_t)j], v[(size_t)j * ld_in + (size_t)c0], acc);
            out[(size_t)r * ld_out + c0] = acc * inv[r];
        }
}

KENTRY void KN(attention_head)(const float *q, const float *k, const float *v, size_t ld_in,
                               float *out, size_t ld_out, int len, int d, float *scratch)
{
    const int lp = att_padded_len(len);
    float *kt = scratch, *s = scratch + (size_t)d * (size_t)lp;
    for (int c = 0; c < d; c++) {
        float *row = kt + (size_t)c * lp;
        for (int j = 0; j < len; j++)
            row[j] = k[(size_t)j * ld_in + (size_t)c];
        for (int j = len; j < lp; j++)
            row[j] = 0.0f;
    }
    const float scale = 1.0f / sqrtf((float)d);
    int i = 0;
    for (; i + ATT_QB <= len; i += ATT_QB)
        KN(att_block)(ATT_QB, q + (size_t)i * ld_in, v, ld_in, out + (size_t)i * ld_out, ld_out,
                      len, lp, d, kt, s, scale);
    const float *qi = q + (size_t)i * ld_in;
    float *oi = out + (size_t)i * ld_out;
    switch (len - i) {
    case 3: KN(att_block)(3, qi, v, ld_in, oi, ld_out, len, lp, d, kt, s, scale); break;
    case 2: KN(att_block)(2, qi, v, ld_in, oi, ld_out, len, lp, d, kt, s, scale); break;
    case 1: KN(att_block)(1, qi, v, ld_in, oi, ld_out, len, lp, d, kt, s, scale); break;
    default: break;
    }
}
