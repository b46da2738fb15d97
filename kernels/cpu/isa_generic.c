/* isa_generic.c - the kernel templates compiled as portable C: 4-float
 * vectors that the compiler maps to SSE2, NEON or scalar code. The fallback on
 * CPUs without AVX2 and the only path on other architectures. */
#define SIMD_AVX2 0
#include "kernels/cpu/dense_kern_internal.h"
#include "kernels/cpu/softmax_kern_internal.h"
#include "kernels/cpu/layernorm_kern_internal.h"
#include "kernels/cpu/attention_kern_internal.h"
