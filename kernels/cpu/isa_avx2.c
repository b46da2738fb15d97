/* isa_avx2.c - the kernel templates compiled for AVX2 + FMA + F16C.
 * Only reached after kernels_isa_supported(KERNELS_ISA_AVX2) said yes; every
 * function here carries the target attribute, so the rest of the binary
 * still runs on any x86-64. Empty on other architectures. */
#include "kernels/cpu/cpu_internal.h"

#if BG_HAVE_X86_PATHS
#define SIMD_AVX2 1
#include "kernels/cpu/dense_kern_internal.h"
#include "kernels/cpu/softmax_kern_internal.h"
#include "kernels/cpu/layernorm_kern_internal.h"
#include "kernels/cpu/attention_kern_internal.h"
#endif
