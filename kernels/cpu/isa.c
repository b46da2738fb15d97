/* isa.c - which CPU kernel path this machine runs (kernels.h). Cheap enough
 * to ask on every call (a few loads of what libgcc detected at start-up), so
 * there is nothing to cache and no state of ours. */
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
/* Not CPUID: in a VM every CPUID traps to the hypervisor (~10 us measured),
 * and softmax asks on every call. __builtin_cpu_supports reads what libgcc
 * found at start-up. Clang's does not know "f16c"; every x86 CPU with AVX2
 * also has F16C (Intel since Ivy Bridge, AMD since Piledriver), so there
 * AVX2 stands for it. */
static int cpu_has_f16c(void)
{
#if defined(__clang__)
    return __builtin_cpu_supports("avx2");
#else
    return __builtin_cpu_supports("f16c");
#endif
}
#endif

int kernels_isa_supported(enum kernels_isa isa)
{
    switch (isa) {
    case KERNELS_ISA_AUTO:
    case KERNELS_ISA_GENERIC:
        return 1;
    case KERNELS_ISA_AVX2:
#if defined(__x86_64__) || defined(__i386__)
        /* avx2 also means the OS saves the AVX registers (libgcc checks XGETBV) */
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
#else
        return 0;
#endif
    case KERNELS_ISA_AVX512:
#if defined(__x86_64__) || defined(__i386__)
        /* libgcc also checks that the OS saves the zmm state */
        return kernels_isa_supported(KERNELS_ISA_AVX2) && __builtin_cpu_supports("avx512f");
#else
        return 0;
#endif
    }
    return 0;
}

enum kernels_isa kernels_isa_best(void)
{
    if (kernels_isa_supported(KERNELS_ISA_AVX512))
        return KERNELS_ISA_AVX512;
    return kernels_isa_supported(KERNELS_ISA_AVX2) ? KERNELS_ISA_AVX2 : KERNELS_ISA_GENERIC;
}

const char *kernels_isa_name(enum kernels_isa isa)
{
    switch (isa) {
    case KERNELS_ISA_AUTO: return "auto";
    case KERNELS_ISA_GENERIC: return "generic";
    case KERNELS_ISA_AVX2: return "avx2";
    case KERNELS_ISA_AVX512: return "avx512";
    }
    return "?";
}
