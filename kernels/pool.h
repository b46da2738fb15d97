/* pool.h - one vector per sequence from an encoder's packed output rows, as
 * sentence-transformers' Pooling and Normalize modules compute it:
 *
 *     POOL_MEAN  the mean of the sequence's rows (its attention mask is all
 *                ones: packed batches have no padding)
 *     POOL_CLS   the first row (the [CLS] token)
 *     POOL_MAX   the element-wise maximum of the rows (NaN propagates)
 *
 * then, with POOL_L2, x / max(||x||_2, 1e-12) per output vector
 * (torch.nn.functional.normalize). Sums are F32 over rows in order; the norm
 * is summed in double. An empty sequence gives a zero vector. Allocates
 * nothing, keeps no state. */
#ifndef BG_POOL_H
#define BG_POOL_H

#include <stddef.h>

enum pool_mode { POOL_MEAN, POOL_CLS, POOL_MAX };
enum { POOL_L2 = 1 };   /* flags */

/* out[s][:] ([nseq][hidden], dense) = the pooled rows [cu_seqlens[s],
 * cu_seqlens[s+1]) of x ([..][ldx], the first hidden columns used).
 * Returns 0, or -1 with nothing written on a bad mode, hidden < 1, ldx <
 * hidden, or decreasing offsets. out must not overlap x. */
int pool_rows(enum pool_mode mode, unsigned flags, const float *x, size_t ldx, int hidden,
              const int *cu_seqlens, int nseq, float *out);

/* The same on an NVIDIA GPU (kernels/cuda/pool.cu): x and out are device
 * memory, cu_seqlens is the HOST copy of the offsets (checked before
 * anything is launched) and cu_seqlens_dev the same values on the device
 * (what the kernel reads). One thread per (sequence, column) summing or
 * comparing the rows in order, so MEAN, CLS and MAX give pool_rows' exact
 * bits; POOL_L2 is a second kernel, one block per vector, the norm summed in
 * double (bits may differ from the CPU's in the last place: another order
 * of summation). Enqueued on `stream` (a cudaStream_t). Returns 0, or -1
 * with a reason in msg on pool_rows' refusals, a NULL pointer where rows
 * exist, a failed launch, or a build without nvcc. */
int pool_rows_cuda(enum pool_mode mode, unsigned flags, const float *x_dev, size_t ldx, int hidden,
                   const int *cu_seqlens, const int *cu_seqlens_dev, int nseq, float *out_dev,
                   void *stream, char *msg, size_t cap);

/* x[i][:] /= max(||x[i][:]||_2, 1e-12) for rows rows of dim (dense). */
void pool_l2_normalize(float *x, int rows, int dim);

/* "mean", "cls", "max" into *out: 0, or -1 for another name. */
int pool_mode_parse(const char *name, enum pool_mode *out);

#endif
