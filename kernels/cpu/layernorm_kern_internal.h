/* layernorm_kern_internal.h - layernorm.h's row loop written once over
 * simd_internal.h, compiled per ISA by isa_generic.c, isa_avx2.c and
 * isa_avx512.c.
 *
 * Three passes over a row (it stays in L1: 1.5 KiB at dim 384): the sum of
 * t = x + r (t stored into y when there is a residual, so later passes read
 * one array), the sum of (t - mean)^2, and the scaled output. Two vectors of
 * partial sums in each pass; a row's tail (dim % VW) is summed as scalars. */
#include <math.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/simd_internal.h"

KENTRY void KN(layernorm_rows)(const float *x, const float *r, const float *gamma,
                               const float *beta, float eps, float *y, int rows, int dim)
{
    const size_t n = (size_t)dim;
    for (int row = 0; row < rows; row++) {
        const float *xr = x + (size_t)row * n;
        float *yr = y + (size_t)row * n;
        const float *t = xr;
        vf s0 = v_set1(0.0f), s1 = s0;
        float st = 0;
        int i = 0;
        if (r) {
            const float *rr = r + (size_t)row * n;
            for (; i + 2 * VW <= dim; i += 2 * VW) {
                vf a = v_load(xr + i) + v_load(rr + i), b = v_load(xr + i + VW) + v_load(rr + i + VW);
                v_store(yr + i, a);
                v_store(yr + i + VW, b);
                s0 += a;
                s1 += b;
            }
            for (; i < dim; i++) {
                yr[i] = xr[i] + rr[i];
                st += yr[i];
            }
            t = yr;
        } else {
            for (; i + 2 * VW <= dim; i += 2 * VW) {
                s0 += v_load(xr + i);
                s1 += v_load(xr + i + VW);
            }
            for (; i < dim; i++)
                st += xr[i];
        }
        const float mean = (v_hsum(s0 + s1) + st) / (float)dim;
        const vf vm = v_set1(mean);
        s0 = s1 = v_set1(0.0f);
        st = 0;
        for (i = 0; i + 2 * VW <= dim; i += 2 * VW) {
            vf a = v_load(t + i) - vm, b = v_load(t + i + VW) - vm;
            s0 = v_fma(a, a, s0);
            s1 = v_fma(b, b, s1);
        }
        for (; i < dim; i++)
            st += (t[i] - mean) * (t[i] - mean);
        const float var = (v_hsum(s0 + s1) + st) / (float)dim;
        const float rstd = 1.0f / sqrtf(var + eps);
        const vf vr = v_set1(rstd);
        for (i = 0; i + VW <= dim; i += VW) {
            vf v = (v_load(t + i) - vm) * vr * v_load(gamma + i);
            v_store(yr + i, beta ? v + v_load(beta + i) : v);
        }
        for (; i < dim; i++) {
            float v = (t[i] - mean) * rstd * gamma[i];
            yr[i] = beta ? v + beta[i] : v;
        }
    }
}
