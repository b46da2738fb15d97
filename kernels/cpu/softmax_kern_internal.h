/* softmax_kern_internal.h - row-wise softmax written once over
 * simd_internal.h, compiled per ISA by isa_generic.c, isa_avx2.c and
 * isa_avx512.c.
 *
 * Three passes per row: the maximum, e^(x - max) stored and summed, the scale
 * by 1/sum. Two vectors of partial sums keep the summation error small for
 * long rows. A row's tail (n % VW) goes through a vector padded with -inf,
 * whose exp is 0. */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/simd_internal.h"
#include "kernels/cpu/vmath_internal.h"

KFN float KN(sm_row_max)(const float *x, int n)
{
    vf m0 = v_set1(-INFINITY), m1 = m0;
    int i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        vf a = v_load(x + i), b = v_load(x + i + VW);
        m0 = v_sel(a > m0, a, m0);
        m1 = v_sel(b > m1, b, m1);
    }
    m0 = v_sel(m1 > m0, m1, m0);
    float m = v_hmax(m0);
    for (; i < n; i++)
        m = x[i] > m ? x[i] : m;
    return m;   /* NaN is skipped here; its own exp makes the row NaN */
}

KENTRY void KN(softmax_rows)(const float *x, float *y, int rows, int n)
{
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (size_t)r * (size_t)n;
        float *yr = y + (size_t)r * (size_t)n;
        const vf m = v_set1(KN(sm_row_max)(xr, n));
        vf s0 = v_set1(0.0f), s1 = s0;
        int i = 0;
        for (; i + 2 * VW <= n; i += 2 * VW) {
            vf e0 = v_exp_neg(v_load(xr + i) - m), e1 = v_exp_neg(v_load(xr + i + VW) - m);
            v_store(yr + i, e0);
            v_store(yr + i + VW, e1);
            s0 += e0;
            s1 += e1;
        }
        for (; i < n; i += VW) {
            float tail[VW];
            int c = n - i < VW ? n - i : VW;
            for (int j = 0; j < VW; j++)
                tail[j] = j < c ? xr[i + j] : -INFINITY;
            vf e = v_exp_neg(v_load(tail) - m);
            v_store(tail, e);
            memcpy(yr + i, tail, (size_t)c * sizeof(float));
            s0 += e;
        }
        const vf inv = v_set1(1.0f / v_hsum(s0 + s1));
        for (i = 0; i + VW <= n; i += VW)
            v_store(yr + i, v_load(yr + i) * inv);
        for (; i < n; i++)
            yr[i] *= inv[0];
    }
}
