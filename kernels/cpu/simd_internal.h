/* simd_internal.h - the vector type the kernel templates are written in.
 *
 * Included once per ISA build: isa_avx512.c defines SIMD_AVX512 1 first,
 * isa_avx2.c SIMD_AVX2 1, isa_generic.c neither. Written with GCC/Clang
 * vector extensions, so one source becomes AVX-512 or AVX2 code inside
 * target(...) functions and SSE2, NEON or whatever the build targets in the
 * portable one. Helpers are always_inline, so the accumulators stay in
 * registers even at -O0; every function of an x86 build carries its target
 * attribute, so no AVX instruction runs before kernels_isa_supported said
 * the CPU has it. */
#ifndef BG_SIMD_INTERNAL_H
#define BG_SIMD_INTERNAL_H

#include <stdint.h>
#include <string.h>

#ifndef SIMD_AVX512
#define SIMD_AVX512 0
#endif
#ifndef SIMD_AVX2
#define SIMD_AVX2 0
#endif

#if SIMD_AVX512
#include <immintrin.h>
#define VW 16          /* floats per vector */
#define SIMD_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#define KN(name) name##_avx512
#elif SIMD_AVX2
#include <immintrin.h>
#define VW 8
#define SIMD_TARGET __attribute__((target("avx2,fma,f16c")))
#define KN(name) name##_avx2
#else
#define VW 4
#define SIMD_TARGET
#define KN(name) name##_generic
#endif

/* Before the small constant-count loops over a register tile: they must be
 * unrolled for the tile to live in registers (clang ignores the GCC form). */
#if defined(__clang__)
#define UNROLL _Pragma("unroll")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

/* Helpers: inlined everywhere; entry points: the functions other files call. */
#define KFN static inline __attribute__((always_inline)) SIMD_TARGET
#define KENTRY SIMD_TARGET

typedef float vf __attribute__((vector_size(VW * 4)));
typedef int32_t vi __attribute__((vector_size(VW * 4)));

/* memcpy keeps unaligned and aliasing access defined; compilers turn it into
 * one (possibly memory-operand) vector load or store. */
KFN vf v_load(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

KFN void v_store(float *p, vf v) { memcpy(p, &v, sizeof v); }

KFN vf v_set1(float s)
{
#if VW == 16
    return (vf){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
#elif VW == 8
    return (vf){s, s, s, s, s, s, s, s};
#else
    return (vf){s, s, s, s};
#endif
}

KFN vi v_set1i(int32_t s)
{
#if VW == 16
    return (vi){s, s, s, s, s, s, s, s, s, s, s, s, s, s, s, s};
#elif VW == 8
    return (vi){s, s, s, s, s, s, s, s};
#else
    return (vi){s, s, s, s};
#endif
}

/* a*b + c, fused where the ISA has it. The portable build gets contraction
 * from -ffp-contract=fast (kernels/CMakeLists.txt) where the target has FMA. */
KFN vf v_fma(vf a, vf b, vf c)
{
#if SIMD_AVX512
    return _mm512_fmadd_ps(a, b, c);
#elif SIMD_AVX2
    return _mm256_fmadd_ps(a, b, c);
#else
    return a * b + c;
#endif
}

/* m ? a : b per lane, m from a vector comparison (all ones or all zeros). */
KFN vf v_sel(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }

KFN vf v_abs(vf a) { return (vf)((vi)a & v_set1i(0x7fffffff)); }

/* Horizontal sum and maximum (NaN-blind; callers propagate NaN otherwise). */
KFN float v_hsum(vf v)
{
    float s = 0;
    for (int i = 0; i < VW; i++)
        s += v[i];
    return s;
}

KFN float v_hmax(vf v)
{
    float m = v[0];
    for (int i = 1; i < VW; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

#endif
