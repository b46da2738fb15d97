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

#endif
