/* device.cu - CUDA device discovery for kernels.h; every runtime call checked. */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "kernels/kernels.h"
}

extern "C" int kernels_cuda_built(void) { return 1; }

extern "C" int kernels_cuda_devices(char *msg, size_t cap)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(msg, cap, "CUDA unavailable: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return -1;
    }
    if (n == 0) {
        snprintf(msg, cap, "CUDA unavailable: no devices");
        return -1;
    }
    snprintf(msg, cap, "%d CUDA device(s)", n);
    return n;
}
