/* softmax.c - softmax.h: picks the ISA build of the row loop per call. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/softmax.h"

int softmax_rows_isa(enum kernels_isa isa, const float *x, float *y, int rows, int n)
{
    if (isa == KERNELS_ISA_AUTO)
        isa = kernels_isa_best();
    if (!kernels_isa_supported(isa))
        return -1;
    if (rows <= 0 || n <= 0)
        return 0;
#if BG_HAVE_X86_PATHS
    if (isa == KERNELS_ISA_AVX512) {
        softmax_rows_avx512(x, y, rows, n);
        return 0;
    }
    if (isa == KERNELS_ISA_AVX2) {
        softmax_rows_avx2(x, y, rows, n);
        return 0;
    }
#endif
    softmax_rows_generic(x, y, rows, n);
    return 0;
}

void softmax_rows(const float *x, float *y, int rows, int n)
{
    softmax_rows_isa(KERNELS_ISA_AUTO, x, y, rows, n);
}
