/* nocuda.c - the kernels.h CUDA queries in a build without nvcc. */
#include <stdio.h>

#include "kernels.h"

int kernels_cuda_built(void) { return 0; }

int kernels_cuda_devices(char *msg, size_t cap)
{
    snprintf(msg, cap, "CUDA unavailable: built without nvcc");
    return -1;
}
