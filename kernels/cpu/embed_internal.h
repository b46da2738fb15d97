/* embed_internal.h - embed_sum's checks of a batch, shared with
 * kernels/cuda/embed.cu so the GPU version refuses exactly what the CPU one
 * does. They read the ids and offsets (host memory) and never the tables'
 * data, so they hold for device tables too. Not a public header. */
#ifndef BG_EMBED_INTERNAL_H
#define BG_EMBED_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/embed.h"

/* 0, or -1 with a reason in msg: bad hidden size, table or offsets, an id or
 * type id outside its table, a sequence longer than the position table. */
int embed_check_batch(const struct embed_table *word, const struct embed_table *pos,
                      const struct embed_table *type, int hidden, const int32_t *ids,
                      const int32_t *type_ids, const int *cu_seqlens, int nseq, char *msg,
                      size_t cap);

#endif
