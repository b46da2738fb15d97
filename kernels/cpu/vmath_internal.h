/* vmath_internal.h - exp and the dense activations on simd_internal.h's
 * vectors, branch-free, for the kernel epilogues and softmax.
 *
 * Accuracy (measured against double libm over dense sweeps, see
 * test_kernels.c): exp ~1 ulp; tanh, sigmoid, gelu within a few ulp of the
 * result, and gelu keeps its relative accuracy in the negative tail by
 * computing 1+erf(a) as erfc(-a) there instead of cancelling. NaN in gives
 * NaN out. */
#ifndef BG_VMATH_INTERNAL_H
#define BG_VMATH_INTERNAL_H

#include "kernels/dense.h"
#include "kernels/cpu/simd_internal.h"

/* exp(x) for x <= 0 (every caller needs only that: softmax after the max,
 * tanh and sigmoid of -|x|). Results below FLT_MIN flush to 0.
 * Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then Cephes' degree-7
 * polynomial for e^r and 2^n built in the exponent field. */
KFN vf v_exp_neg(vf x)
{
    const vf lo = v_set1(-87.33654f);           /* ln(FLT_MIN) */
    vi under = x < lo;
    x = v_sel(under, lo, x);
    const vf magic = v_set1(12582912.0f);       /* 1.5 * 2^23: adding rounds to integer */
    vf fn = v_fma(x, v_set1(1.44269504088896341f), magic) - magic;
    vf r = v_fma(fn, v_set1(-0.693359375f), x); /* ln2 in two parts: exact n*hi */
    r = v_fma(fn, v_set1(2.12194440e-4f), r);
    vf p = v_set1(1.9875691500e-4f);
    p = v_fma(p, r, v_set1(1.3981999507e-3f));
    p = v_fma(p, r, v_set1(8.3334519073e-3f));
    p = v_fma(p, r, v_set1(4.1665795894e-2f));
    p = v_fma(p, r, v_set1(1.6666665459e-1f));
    p = v_fma(p, r, v_set1(5.0000001201e-1f));
    p = v_fma(p, r * r, r) + v_set1(1.0f);
    vi n = __builtin_convertvector(fn, vi);
    vf scale = (vf)((n + 127) << 23);          /* n in [-126, 0]: a normal power of 2 */
    return v_sel(under, v_set1(0.0f), p * scale);
}

KFN vf v_relu(vf x) { return v_sel(x < v_set1(0.0f), v_set1(0.0f), x); }

/* sigmoid(x) = 1/(1+e^-x) for x >= 0, e^x/(1+e^x) below: exp never
 * overflows and small results keep their relative accuracy. */
KFN vf v_sigmoid(vf x)
{
    vf e = v_exp_neg(-v_abs(x));
    vf s = v_set1(1.0f) / (v_set1(1.0f) + e);
    return v_sel(x >= v_set1(0.0f), s, e * s);
}

/* tanh: Cephes' odd polynomial below |x| = 0.625 (where 1 - 2/(e^2x+1)
 * would cancel), (1-e)/(1+e) with e = e^-2|x| above. */
KFN vf v_tanh(vf x)
{
    vf a = v_abs(x);
    vf z = x * x;
    vf p = v_set1(-5.70498872745e-3f);
    p = v_fma(p, z, v_set1(2.06390887954e-2f));
    p = v_fma(p, z, v_set1(-5.37397155531e-2f));
    p = v_fma(p, z, v_set1(1.33314422036e-1f));
    p = v_fma(p, z, v_set1(-3.33332819422e-1f));
    vf small = v_fma(p * z, x, x);
    vf e = v_exp_neg(v_set1(-2.0f) * a);
    vf t = (v_set1(1.0f) - e) / (v_set1(1.0f) + e);
    t = (vf)((vi)t | ((vi)x & v_set1i((int32_t)0x80000000u)));   /* copysign */
    return v_sel(a < v_set1(0.625f), small, t);
}

/* gelu(x) = 0.5 x (1 + erf(a)), a = x/sqrt(2).
 * |a| <= 0.921875: erf(a) = a P(a^2), P of degree 5 (Chebyshev fit, error
 *   1.4e-8 relative, below half an ulp).
 * 0.921875 < |a| <= 4: erfc(|a|) = exp(Q(u)), Q of degree 10 in
 *   u = (|a| - 2.4609375) / 1.5390625 in [-1, 1] (fit error 3.3e-9 in the
 *   exponent), and 1 + erf(a) = 2 - erfc(a) for a > 0 but erfc(-a) itself
 *   for a < 0, so the negative tail does not cancel.
 * |a| > 4: erfc(|a|) < 1.6e-8 is dropped: 1 + erf(a) is 2 or 0. */
KFN vf v_gelu(vf x)
{
    vf a = x * v_set1(0.707106781186547524f);
    vf t = v_abs(a);
    vf s = a * a;
    vf p = v_set1(-6.004081156e-04f);
    p = v_fma(p, s, v_set1(4.996020122e-03f));
    p = v_fma(p, s, v_set1(-2.676875670e-02f));
    p = v_fma(p, s, v_set1(1.128188232e-01f));
    p = v_fma(p, s, v_set1(-3.761250090e-01f));
    p = v_fma(p, s, v_set1(1.128379151e+00f));
    vf near = v_set1(1.0f) + a * p;             /* 1 + erf(a) */

    vi beyond = t > v_set1(4.0f);
    vf tc = v_sel(beyond, v_set1(4.0f), t);
    vf u = v_fma(tc, v_set1(0.649746192893401f), v_set1(-1.598984771573604f));
    vf q = v_set1(-3.598036361e-06f);
    q = v_fma(q, u, v_set1(-1.952093271e-06f));
    q = v_fma(q, u, v_set1(5.977841161e-05f));
    q = v_fma(q, u, v_set1(-2.781539631e-04f));
    q = v_fma(q, u, v_set1(1.070069782e-03f));
    q = v_fma(q, u, v_set1(-3.791788624e-03f));
    q = v_fma(q, u, v_set1(1.262158395e-02f));
    q = v_fma(q, u, v_set1(-4.084190421e-02f));
    q = v_fma(q, u, v_set1(-2.232752140e+00f));
    q = v_fma(q, u, v_set1(-8.124694413e+00f));
    q = v_fma(q, u, v_set1(-7.599165796e+00f));
    vf e = v_sel(beyond, v_set1(0.0f), v_exp_neg(q)); /* erfc(|a|) */
    vf far = v_sel(a > v_set1(0.0f), v_set1(2.0f) - e, e);

    vf onep = v_sel(t <= v_set1(0.921875f), near, far);
    return v_set1(0.5f) * x * onep;
}

KFN vf v_act(vf x, enum dense_act act)
{
    switch (act) {
    case DENSE_ACT_NONE: return x;
    case DENSE_ACT_RELU: return v_relu(x);
    case DENSE_ACT_GELU: return v_gelu(x);
    case DENSE_ACT_TANH: return v_tanh(x);
    case DENSE_ACT_SIGMOID: return v_sigmoid(x);
    }
    return x;
}

#endif
