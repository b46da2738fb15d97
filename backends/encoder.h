/* encoder.h - the text rows of an encoder model (MODEL_KIND_ENCODER: a
 * Hugging Face folder, model.h) and the tokenizer that makes them.
 *
 * A text travels through the batcher like any row: the submitter tokenizes
 * it (wordpiece.h) into a row of the batch buffers, whose first float is
 * the token count n and the next n its token ids ([CLS] ... [SEP]), the
 * rest unused (input.row_elems = 1 + max_seq_length floats). Ids are below
 * 2^24, so a float holds each exactly. The backend reads the rows back as
 * packed sequences: nothing is padded or computed past n. */
#ifndef BG_ENCODER_H
#define BG_ENCODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/backend.h"
#include "common/error.h"

/* Loads dir/tokenizer.json for the encoder model m (model_load calls it):
 * 0, or a negative BG_E* code with the file and field named. Checks that
 * every id the tokenizer makes has a row in the model's vocabulary. */
int encoder_tokenizer_load(struct model *m, struct error *err);
void encoder_tokenizer_free(struct model *m);

/* Tokenizes text (UTF-8, len bytes) into row. Past max_seq_length tokens it
 * is cut when `truncate`; otherwise -BG_ETOOLONG naming its length. Invalid
 * UTF-8 is -BG_EINVAL. *tokens (may be NULL): the row's token count. */
int encoder_row_from_text(const struct model *m, const char *text, size_t len, bool truncate,
                          float *row, int *tokens, struct error *err);
/* A sequence given as token ids, taken as the whole sequence (the caller's
 * [CLS] and [SEP] included, as tokenizers' encode gives them): each id must
 * be in the vocabulary; more than max_seq_length ids are cut when
 * `truncate` (the last kept one is then the sequence's own last: its
 * [SEP], when it ended with one), else
 * -BG_ETOOLONG. An empty sequence is -BG_EINVAL. */
int encoder_row_from_ids(const struct model *m, const int64_t *ids, size_t n, bool truncate,
                         float *row, int *tokens, struct error *err);
/* What n text rows cost the batcher (batcher/work.h): their tokens, the
 * sum of their squares (the attention's term) and the longest. */
void encoder_rows_cost(const float *rows, size_t ld_row, int n, int64_t *tokens,
                       int64_t *tokens_sq, int *max_len);
/* The token count of a row made by the functions above. */
static inline int encoder_row_tokens(const float *row) { return (int)row[0]; }

/* What the backends give is the pooled vector; the front ends normalize
 * it as the request asks (TEI's `normalize`) or, by default, as the
 * folder's modules.json says: rows x hidden floats, L2 in place. */
void encoder_output_normalize(float *out, int rows, int hidden);

/* A valid row of `len` tokens ([CLS], len - 2 ordinary ids, [SEP]) for
 * warmup batches; len is clamped to 2 .. max_seq_length. */
void encoder_row_warm(const struct model *m, float *row, int len);

#endif
