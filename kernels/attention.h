/* attention.h - bidirectional multi-head attention over a packed batch of
 * variable-length sequences on the CPU (an encoder's self-attention, no mask):
 *
 *     for each sequence s, head h, query row i of s:
 *       out[i][h] = sum_j softmax_j(q[i][h] . k[j][h] / sqrt(head_dim)) v[j][h]
 *
 * with j over the rows of s only. Layout as the dense layers produce it:
 * q, k and v are F32 rows [total_tokens][ld_in] (ld_in = hidden, or
 * 3*hidden when they are column slices of one fused QKV output), head h at
 * columns [h*head_dim, (h+1)*head_dim); out is [total_tokens][ld_out] with the
 * same head columns. Sequence s is rows [cu_seqlens[s], cu_seqlens[s+1]):
 * there is no padding, so nothing is computed for it and no mask exists.
 *
 * Per sequence and head, K is transposed into the scratch once, then blocks
 * of 4 query rows get their scores against all keys (register-tiled), a
 * stable softmax (the row's maximum subtracted, F32 exp, F32 sums) and the
 * weighted sum of V rows; the 1/sum is applied to the output. Scores of a
 * block live in the scratch: O(max_seqlen * (head_dim + 4)) floats.
 *
 * A sequence's output depends only on its own rows (bitwise the same alone
 * or in any batch, on one kernel path). Single-threaded, allocates nothing,
 * keeps no state; to use several threads give each its own scratch and a
 * slice of the sequences (cu_seqlens + a, nseq = b - a: offsets are absolute
 * row numbers, cu_seqlens[0] need not be 0). */
#ifndef BG_ATTENTION_H
#define BG_ATTENTION_H

#include <stddef.h>

#include "kernels/kernels.h"

struct attention_args {
    const float *q, *k, *v; /* [total_tokens][ld_in] each */
    size_t ld_in;           /* row stride of q, k and v, in floats (>= heads*head_dim) */
    float *out;             /* [total_tokens][ld_out]; must not overlap q, k or v */
    size_t ld_out;          /* row stride of out, in floats (>= heads*head_dim) */
    const int *cu_seqlens;  /* nseq + 1 non-decreasing row offsets */
    int nseq;
    int heads, head_dim;
};

/* Floats of scratch one call needs for sequences of up to max_seqlen rows
 * (one thread's worth; 0 for max_seqlen <= 0). */
size_t attention_scratch_floats(int max_seqlen, int head_dim);

/* Runs the attention of a. scratch holds scratch_floats floats (any
 * alignment), at least attention_scratch_floats(longest sequence, head_dim).
 * Returns 0, or -1 with nothing written when the arguments are inconsistent
 * (heads or head_dim < 1, strides too small, decreasing offsets, scratch too
 * small, a NULL pointer where rows exist). */
int attention_varlen(const struct attention_args *a, float *scratch, size_t scratch_floats);

/* attention_varlen on a given kernel path; -1 also when this CPU cannot run
 * isa. */
int attention_varlen_isa(enum kernels_isa isa, const struct attention_args *a, float *scratch,
                         size_t scratch_floats);

/* The same on an NVIDIA GPU (kernels/cuda/attention.cu), flash style: one
 * block per (query tile, head, sequence), tiles of 32 keys staged in shared
 * memory, the softmax kept online (running maximum and sum, the output
 * rescaled), all in F32; no scores are written to memory and no scratch is
 * needed. a->q, k, v and out are device pointers with the layout above;
 * a->cu_seqlens is the HOST copy of the offsets (checked, and the longest
 * sequence sizes the grid) and cu_seqlens_dev the same nseq + 1 values on the
 * device, which the kernel reads (the caller uploads them once per batch for
 * every layer; embed_sum_cuda and pool_rows_cuda take them the same way).
 * head_dim 1..128. Enqueued on `stream` (a cudaStream_t). Returns 0, or -1
 * with a reason in msg and nothing launched on the refusals of
 * attention_varlen (scratch aside) and head_dim > 128; -1 also when the
 * launch fails or in a build without nvcc. */
int attention_varlen_cuda(const struct attention_args *a, const int *cu_seqlens_dev, void *stream,
                          char *msg, size_t cap);

#endif
