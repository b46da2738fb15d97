/* isa_avx512.c - the kernel templates compiled for AVX-512F (zmm registers,
 * 32 of them: 12x32 register tiles). Only reached after
 * kernels_isa_supported(KERNELS_ISA_AVX512) said yes; every function here
 * carries the target attribute. Empty on other architectures. */
#include "kernels/cpu/cpu_internal.h"

#if BG_HAVE_X86_PATHS
#define SIMD_AVX512 1
#include "kernels/cpu/dense_kern_internal.h"
#include "kernels/cpu/softmax_kern_internal.h"
#include "kernels/cpu/layernorm_kern_internal.h"
#include "kernels/cpu/attention_kern_internal.h"
#endif
