/* cpu_internal.h - what dense.c, softmax.c, layernorm.c and attention.c share with the per-ISA kernel
 * builds (isa_generic.c, isa_avx2.c, isa_avx512.c): the packed layout, the
 * prepared layer and the entry points each ISA provides. Not a public header. */
#ifndef BG_CPU_INTERNAL_H
#define BG_CPU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/dense.h"
#include "kernels/dtype.h"
#include "kernels/kernels.h"

/* The packed weight layout: k-blocks of KC inputs (256, or 128 in one case:
 * dense_isa_kc; the last block shorter), each holding all panels of NR
 * outputs (16, or 32 for AVX-512: dense_isa_nr), each panel stored k-major:
 *     W[o][i] -> blk = i / KC, p = o / NR, k = i % KC, j = o % NR
 *             at element  blk*KC*npad + p*kc_blk*NR + k*NR + j
 * A panel (NR outputs x KC inputs, 16 or 32 KiB in F32) is one contiguous
 * read that stays in L1 while every row tile of the batch uses it, and the
 * panels lie in the order the kernel visits them. */
#define DENSE_KC_MAX 256
#define DENSE_NR_MAX 32
#define DENSE_ALIGN 64

static inline int dense_isa_nr(enum kernels_isa isa) { return isa == KERNELS_ISA_AVX512 ? 32 : 16; }

/* 256 keeps a F32 panel plus the x slices of a tile within a 48 KiB L1.
 * AVX-512 halves also need the widened 32-wide panel (32 KiB at 256), so
 * they take 128 (measured: rows 8 go from 88 to 120 GFLOP/s). */
static inline int dense_isa_kc(enum kernels_isa isa, enum dtype sdt)
{
    return isa == KERNELS_ISA_AVX512 && sdt != DTYPE_F32 ? 128 : DENSE_KC_MAX;
}

struct dense_cpu;
typedef void dense_run_fn(const struct dense_cpu *d, const float *x, int rows, float *y);

/* Owned by the caller of dense_cpu_prepare; w and bias owned by the struct. */
struct dense_cpu {
    int out, in, npad;      /* npad: out rounded up to a multiple of nr */
    int nr;                 /* panel width of isa */
    int kc;                 /* k-block length (<= DENSE_KC_MAX) */
    enum dense_act act;
    enum dtype sdt;         /* element type of the packed weights */
    enum kernels_isa isa;
    dense_run_fn *run;
    void *w;                /* packed as above, DENSE_ALIGN-aligned */
    bool w_borrowed;        /* w is the caller's (dense_cpu_prepare_packed) */
    float *bias;            /* [npad], zeros past out or without a bias */
    size_t wbytes;
};

/* attention: query rows per register block (the kernel's tail switch
 * handles 1..3), and the multiple the key count is padded to in the scratch
 * (two AVX-512 vectors, so every path's key chunk divides it and the scratch
 * size does not depend on the path). */
#define ATT_QB 4
#define ATT_LP 32
static inline int att_padded_len(int len) { return (len + ATT_LP - 1) / ATT_LP * ATT_LP; }

typedef void layernorm_rows_fn(const float *x, const float *r, const float *gamma,
                               const float *beta, float eps, float *y, int rows, int dim);
/* One sequence (len rows at q, k, v, out) and one head (d columns there);
 * scratch holds (d + ATT_QB) * att_padded_len(len) floats. */
typedef void attention_head_fn(const float *q, const float *k, const float *v, size_t ld_in,
                               float *out, size_t ld_out, int len, int d, float *scratch);

#if defined(__x86_64__) || defined(__i386__)
#define BG_HAVE_X86_PATHS 1
layernorm_rows_fn layernorm_rows_avx2;
layernorm_rows_fn layernorm_rows_avx512;
attention_head_fn attention_head_avx2;
attention_head_fn attention_head_avx512;
dense_run_fn dense_run_avx2;
dense_run_fn dense_run_avx512;
void softmax_rows_avx2(const float *x, float *y, int rows, int n);
void softmax_rows_avx512(const float *x, float *y, int rows, int n);
#else
#define BG_HAVE_X86_PATHS 0
#endif
dense_run_fn dense_run_generic;
void softmax_rows_generic(const float *x, float *y, int rows, int n);
layernorm_rows_fn layernorm_rows_generic;
attention_head_fn attention_head_generic;

#endif
