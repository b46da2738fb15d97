/* attention.c - attention.h: checks the arguments and the scratch, then runs
 * the ISA build of one (sequence, head) for each pair. */
#include <stdint.h>

#include "kernels/attention.h"
#include "kernels/cpu/cpu_internal.h"

size_t attention_scratch_floats(int max_seqlen, int head_dim)
{
    if (max_seqlen <= 0 || head_dim <= 0)
        return 0;
    return ((size_t)head_dim + ATT_QB) * (size_t)att_padded_len(max_seqlen);
}

static attention_head_fn *attention_head_for(enum kernels_isa isa)
{
#if BG_HAVE_X86_PATHS
    if (isa == KERNELS_ISA_AVX512)
        return attention_head_avx512;
    if (isa == KERNELS_ISA_AVX2)
        return attention_head_avx2;
#endif
    (void)isa;
    return attention_head_generic;
}

/* The longest sequence, or -1 when the offsets are not usable. */
static int attention_max_len(const struct attention_args *a)
{
    if (!a->cu_seqlens || a->cu_seqlens[0] < 0)
        return -1;
    int longest = 0;
    for (int s = 0; s < a->nseq; s++) {
        int len = a->cu_seqlens[s + 1] - a->cu_seqlens[s];
        if (a->cu_seqlens[s + 1] < a->cu_seqlens[s])
            return -1;
        longest = len > longest ? len : longest;
    }
    return longest;
}

int attention_varlen_isa(enum kernels_isa isa, const struct attention_args *a, float *scratch,
                         size_t scratch_floats)
{
    if (isa == KERNELS_ISA_AUTO)
        isa = kernels_isa_best();
    if (!kernels_isa_supported(isa) || !a || a->nseq < 0)
        return -1;
    if (a->nseq == 0)
        return 0;
    if (a->heads < 1 || a->head_dim < 1 || a->head_dim > INT32_MAX / a->heads)
        return -1;
    const size_t width = (size_t)a->heads * (size_t)a->head_dim;
    if (a->ld_in < width || a->ld_out < width)
        return -1;
    int longest = attention_max_len(a);
    if (longest < 0)
        return -1;
    if (longest == 0)
        return 0;
    if (!a->q || !a->k || !a->v || !a->out || !scratch ||
        scratch_floats < attention_scratch_floats(longest, a->head_dim))
        return -1;
    attention_head_fn *head = attention_head_for(isa);
    for (int s = 0; s < a->nseq; s++) {
        const size_t row = (size_t)a->cu_seqlens[s];
        const int len = a->cu_seqlens[s + 1] - a->cu_seqlens[s];
        if (len == 0)
            continue;
        for (int h = 0; h < a->heads; h++) {
            const size_t col = (size_t)h * (size_t)a->head_dim;
            head(a->q + row * a->ld_in + col, a->k + row * a->ld_in + col,
                 a->v + row * a->ld_in + col, a->ld_in, a->out + row * a->ld_out + col, a->ld_out,
                 len, a->head_dim, scratch);
        }
    }
    return 0;
}

int attention_varlen(const struct attention_args *a, float *scratch, size_t scratch_floats)
{
    return attention_varlen_isa(KERNELS_ISA_AUTO, a, scratch, scratch_floats);
}
