/* kernels.h - what the numerical kernels can run on. Nothing here knows HTTP
 * or queues. The operations themselves (dense, softmax, layernorm, attention,
 * embed, pool) get one header each. */
#ifndef BG_KERNELS_H
#define BG_KERNELS_H

#include <stddef.h>

/* 1 when this binary was built with the CUDA kernels (nvcc was found). */
int kernels_cuda_built(void);
/* Number of usable CUDA devices, or -1 with a reason in msg (no driver, no
 * device, built without CUDA). Never aborts: the CUDA runtime is linked
 * statically, so this works on machines without a driver. */
int kernels_cuda_devices(char *msg, size_t cap);

/* Instruction-set paths of the CPU kernels. AUTO picks the fastest one this
 * CPU runs; the others force a path (tests compare them, and a suspected
 * miscompile can be worked around). GENERIC is portable C that the compiler
 * vectorizes for whatever the build targets; AVX2 needs AVX2, FMA and F16C;
 * AVX512 needs those and AVX-512F. */
enum kernels_isa { KERNELS_ISA_AUTO, KERNELS_ISA_GENERIC, KERNELS_ISA_AVX2, KERNELS_ISA_AVX512 };

/* The path AUTO resolves to on this CPU (never AUTO itself). */
enum kernels_isa kernels_isa_best(void);
/* 1 when this build and this CPU can run isa (AUTO: always). */
int kernels_isa_supported(enum kernels_isa isa);
/* "auto", "generic", "avx2", "avx512"; "?" for a value outside the enum. */
const char *kernels_isa_name(enum kernels_isa isa);

#endif
