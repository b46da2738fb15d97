/* embed.h - BERT's input embeddings for a packed batch of token ids:
 *
 *     out[t][:] = word[ids[t]] + position[t - cu_seqlens[s]] + type[type_ids[t]]
 *
 * for every row t of sequence s, rows [cu_seqlens[s], cu_seqlens[s+1]):
 * positions restart at 0 in each sequence. Tables are [rows][hidden] in F32,
 * F16 or BF16 (widened exactly to F32; the sum is F32, added in the order
 * word + position + type, as PyTorch does). The embedding layer norm is a
 * separate call (layernorm.h). Allocates nothing, keeps no state. */
#ifndef BG_EMBED_H
#define BG_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/dtype.h"

/* A table the caller owns; any alignment (it may point into an mmap'ed
 * safetensors file). */
struct embed_table {
    const void *data;   /* [rows][hidden] of dt */
    enum dtype dt;
    int rows;
};

/* Fills out ([total][hidden], row t at t*hidden, total = cu_seqlens[nseq])
 * for the rows of the nseq sequences. pos or type may be NULL (not added);
 * type_ids may be NULL (type 0 for every token). ids and type_ids are indexed
 * by absolute row, like out. Every id, type id and position is checked before
 * anything is written: returns 0, or -1 with a reason in msg and out
 * untouched (an id outside its table, a sequence longer than the position
 * table, bad offsets or hidden). */
int embed_sum(const struct embed_table *word, const struct embed_table *pos,
              const struct embed_table *type, int hidden, const int32_t *ids,
              const int32_t *type_ids, const int *cu_seqlens, int nseq, float *out, char *msg,
              size_t cap);

/* The ids of a packed batch, for embed_sum_cuda: type_ids may be NULL. */
struct embed_ids {
    const int32_t *ids, *type_ids;
    const int *cu_seqlens;
};

/* embed_sum on an NVIDIA GPU (kernels/cuda/embed.cu). The tables' data are
 * device pointers (aligned to their element: cudaMalloc'ed, or offsets in
 * whole elements into one), out is device [total][hidden]. The ids come
 * twice: `host` is what the tokenizer produced, checked exactly as embed_sum
 * checks it before anything is launched (no copy back from the device is
 * needed to refuse a bad id), and `dev` holds the same values on the device
 * (uploaded by the caller, once per batch; attention and pooling read the
 * same cu_seqlens), which the kernel reads. Should the copies differ, the
 * kernel still reads nothing outside a table: a row whose device id, type or
 * position is out of range is written as NaN. One warp per row; sums as
 * embed_sum's, so the bits are the same. Enqueued on `stream` (a
 * cudaStream_t). Returns 0, or -1 with a reason in msg (embed_sum's, a
 * misaligned table, a missing device array, a failed launch, a build without
 * nvcc) and nothing launched. */
int embed_sum_cuda(const struct embed_table *word, const struct embed_table *pos,
                   const struct embed_table *type, int hidden, const struct embed_ids *host,
                   const struct embed_ids *dev, int nseq, float *out_dev, void *stream, char *msg,
                   size_t cap);

#endif
