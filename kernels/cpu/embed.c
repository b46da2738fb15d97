/* embed.c - embed.h. Memory-bound (three table rows read per token), so
 * plain C: the F32 loops vectorise as they are, and halves widen through
 * dtype.h. Tables are read with memcpy, so they may be unaligned. */
#include <stdio.h>
#include <string.h>

#include "kernels/cpu/embed_internal.h"
#include "kernels/embed.h"

/* out[:hidden] = (add ? out + : ) row idx of t. */
static void embed_row_add(float *restrict out, const struct embed_table *t, int idx, int hidden,
                          int add)
{
    const unsigned char *p =
        (const unsigned char *)t->data + (size_t)idx * (size_t)hidden * dtype_size(t->dt);
    switch (t->dt) {
    case DTYPE_F32:
        for (int i = 0; i < hidden; i++) {
            float f;
            memcpy(&f, p + (size_t)i * 4, 4);
            out[i] = add ? out[i] + f : f;
        }
        return;
    case DTYPE_F16:
    case DTYPE_BF16:
        for (int i = 0; i < hidden; i++) {
            uint16_t h;
            memcpy(&h, p + (size_t)i * 2, 2);
            float f = t->dt == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
            out[i] = add ? out[i] + f : f;
        }
        return;
    }
}

static int embed_table_ok(const struct embed_table *t)
{
    return t->data && t->rows > 0 &&
           (t->dt == DTYPE_F32 || t->dt == DTYPE_F16 || t->dt == DTYPE_BF16);
}

/* Every index the call will use, before anything is written. */
int embed_check_batch(const struct embed_table *word, const struct embed_table *pos,
                      const struct embed_table *type, int hidden, const int32_t *ids,
                      const int32_t *type_ids, const int *cu_seqlens, int nseq, char *msg,
                      size_t cap)
{
    if (hidden < 1 || nseq < 0 || !cu_seqlens || cu_seqlens[0] < 0 || !word ||
        !embed_table_ok(word) || (pos && !embed_table_ok(pos)) || (type && !embed_table_ok(type))) {
        snprintf(msg, cap, "embed: bad hidden size, table or offsets");
        return -1;
    }
    for (int s = 0; s < nseq; s++) {
        int len = cu_seqlens[s + 1] - cu_seqlens[s];
        if (len < 0) {
            snprintf(msg, cap, "embed: offsets decrease at sequence %d", s);
            return -1;
        }
        if (pos && len > pos->rows) {
            snprintf(msg, cap, "embed: sequence %d has %d tokens, the position table %d", s, len,
                     pos->rows);
            return -1;
        }
        if (len > 0 && !ids) {
            snprintf(msg, cap, "embed: no token ids");
            return -1;
        }
        for (int t = cu_seqlens[s]; t < cu_seqlens[s + 1]; t++) {
            if (ids[t] < 0 || ids[t] >= word->rows) {
                snprintf(msg, cap, "embed: token id %ld at row %d is outside the vocabulary (%d)",
                         (long)ids[t], t, word->rows);
                return -1;
            }
            int ty = type_ids ? type_ids[t] : 0;
            if (type && (ty < 0 || ty >= type->rows)) {
                snprintf(msg, cap, "embed: token type %d at row %d is outside the table (%d)", ty,
                         t, type->rows);
                return -1;
            }
        }
    }
    return 0;
}

int embed_sum(const struct embed_table *word, const struct embed_table *pos,
              const struct embed_table *type, int hidden, const int32_t *ids,
              const int32_t *type_ids, const int *cu_seqlens, int nseq, float *out, char *msg,
              size_t cap)
{
    if (embed_check_batch(word, pos, type, hidden, ids, type_ids, cu_seqlens, nseq, msg, cap) < 0)
        return -1;
    for (int s = 0; s < nseq; s++)
        for (int t = cu_seqlens[s]; t < cu_seqlens[s + 1]; t++) {
            float *o = out + (size_t)t * (size_t)hidden;
            embed_row_add(o, word, ids[t], hidden, 0);
            if (pos)
                embed_row_add(o, pos, t - cu_seqlens[s], hidden, 1);
            if (type)
                embed_row_add(o, type, type_ids ? type_ids[t] : 0, hidden, 1);
        }
    return 0;
}
