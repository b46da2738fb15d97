/* layernorm.c - layernorm.h: picks the ISA build of the row loop per call. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/layernorm.h"

int layernorm_rows_isa(enum kernels_isa isa, const float *x, const float *r, const float *gamma,
                       const float *beta, float eps, float *y, int rows, int dim)
{
    if (isa == KERNELS_ISA_AUTO)
        isa = kernels_isa_best();
    if (!kernels_isa_supported(isa))
        return -1;
    if (rows <= 0 || dim <= 0)
        return 0;
#if BG_HAVE_X86_PATHS
    if (isa == KERNELS_ISA_AVX512) {
        layernorm_rows_avx512(x, r, gamma, beta, eps, y, rows, dim);
        return 0;
    }
    if (isa == KERNELS_ISA_AVX2) {
        layernorm_rows_avx2(x, r, gamma, beta, eps, y, rows, dim);
        return 0;
    }
#endif
    layernorm_rows_generic(x, r, gamma, beta, eps, y, rows, dim);
    return 0;
}

void layernorm_rows(const float *x, const float *r, const float *gamma, const float *beta,
                    float eps, float *y, int rows, int dim)
{
    layernorm_rows_isa(KERNELS_ISA_AUTO, x, r, gamma, beta, eps, y, rows, dim);
}
