/* common.cuh - shared by the .cu files: error checking that reports instead
 * of aborting, and the activation of dense layers. */
#ifndef BG_CUDA_COMMON_CUH
#define BG_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdio.h>

/* Runs a CUDA call; on failure fills msg and returns -1 from the caller. */
#define CUDA_TRY(call, msg, cap)                                                              \
    do {                                                                                      \
        cudaError_t e_ = (call);                                                              \
        if (e_ != cudaSuccess) {                                                              \
            snprintf((msg), (cap), "%s: %s (%s)", #call, cudaGetErrorString(e_),               \
                     cudaGetErrorName(e_));                                                    \
            return -1;                                                                        \
        }                                                                                     \
    } while (0)

/* Same activations and order as kernels/dense.h's enum dense_act. GELU is
 * 0.5 v (1 + erf(v/sqrt2)) computed as 0.5 v erfc(-v/sqrt2), the same value:
 * 1 + erff(a) cancels for negative a (of the result's 24 bits about 9 are
 * left at v = -4 and 2 at v = -5), erfcf keeps its few-ulp relative accuracy
 * there, as the CPU kernels' gelu does (kernels/cpu/vmath_internal.h). */
__device__ __forceinline__ float bg_act(float v, int act)
{
    switch (act) {
    case 1: return v > 0.0f ? v : 0.0f;
    case 2: return 0.5f * v * erfcf(v * -0.70710678118654752f);
    case 3: return tanhf(v);
    case 4: return 1.0f / (1.0f + expf(-v));
    default: return v;
    }
}

#endif
