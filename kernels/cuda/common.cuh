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

/* Same activations and order as kernels/dense.h's enum dense_act. */
__device__ __forceinline__ float bg_act(float v, int act)
{
    switch (act) {
    case 1: return v > 0.0f ? v : 0.0f;
    case 2: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
    case 3: return tanhf(v);
    case 4: return 1.0f / (1.0f + expf(-v));
    default: return v;
    }
}

#endif
