/* kernels.h - what the numerical kernels can run on. Nothing here knows HTTP
 * or queues. The operations themselves (dense, softmax) get one header each. */
#ifndef BG_KERNELS_H
#define BG_KERNELS_H

#include <stddef.h>

/* 1 when this binary was built with the CUDA kernels (nvcc was found). */
int kernels_cuda_built(void);
/* Number of usable CUDA devices, or -1 with a reason in msg (no driver, no
 * device, built without CUDA). Never aborts: the CUDA runtime is linked
 * statically, so this works on machines without a driver. */
int kernels_cuda_devices(char *msg, size_t cap);

#endif
