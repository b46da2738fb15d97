/* layernorm.h - layer normalisation over the last dimension of F32
 * [rows][dim], PyTorch's nn.LayerNorm (biased variance):
 *
 *     t = x + r                       (r, the residual, may be NULL: t = x)
 *     y = (t - mean(t)) / sqrt(var(t) + eps) * gamma + beta
 *
 * BERT's post-LN blocks compute LN(h + sublayer(h)); passing the residual
 * here saves writing and re-reading the sum. Mean and variance are computed
 * in two passes in F32 (no E[t^2] - E[t]^2 cancellation), with vectors of
 * partial sums. Single-threaded, allocates nothing, keeps no state: any number
 * of threads may run it at once on their own rows. A NaN or inf anywhere in a
 * row makes that row NaN. */
#ifndef BG_LAYERNORM_H
#define BG_LAYERNORM_H

#include <stddef.h>

#include "kernels/kernels.h"

/* y[i][:] = LN(x[i][:] + r[i][:]) for rows rows of dim elements, rows dense
 * (row i at i*dim). gamma and beta are [dim]; beta may be NULL (zero). r may
 * be NULL. y may be x or r (in place); other overlaps are not allowed.
 * rows or dim of 0 (or less) do nothing. */
void layernorm_rows(const float *x, const float *r, const float *gamma, const float *beta,
                    float eps, float *y, int rows, int dim);

/* layernorm_rows on a given kernel path: 0, or -1 (y untouched) when this CPU
 * cannot run isa. */
int layernorm_rows_isa(enum kernels_isa isa, const float *x, const float *r, const float *gamma,
                       const float *beta, float eps, float *y, int rows, int dim);

/* The same on an NVIDIA GPU (kernels/cuda/layernorm.cu): every pointer is
 * device memory, the same layout, NULLs and in-place rules; enqueued on
 * `stream` (a cudaStream_t, NULL the default stream). One warp per row with
 * the row in registers for dim <= 1024, one block per row above; mean and
 * variance in two passes in F32, as above. Returns 0 (rows or dim <= 0 do
 * nothing), or -1 with a reason in msg (a NULL x, gamma or y; the launch
 * failed; built without nvcc). */
int layernorm_rows_cuda(const float *x, const float *r, const float *gamma, const float *beta,
                        float eps, float *y, int rows, int dim, void *stream, char *msg,
                        size_t cap);

#endif
