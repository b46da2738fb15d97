/* bert_cpu.h - a BERT-family encoder's forward pass on the host: the cpu
 * backend's MODEL_KIND_ENCODER (model.h), on kernels/ (embed, dense,
 * attention, layernorm, pool).
 *
 * The batch is packed: sequences of their own lengths one after another,
 * no padding, so every matrix product runs over exactly the batch's tokens
 * and attention stays within each sequence (attention.h). Per layer:
 *
 *     qkv = x Wqkv^T + b           (Q, K and V fused: one [3H][H] product)
 *     ctx = attention(qkv)         (per sequence, per head)
 *     x   = LN(x + ctx Wo^T + bo)
 *     h   = gelu(x W1^T + b1)      (erf form, fused into the product)
 *     x   = LN(x + h W2^T + b2)
 *
 * then the pooling of the folder's sentence-transformers modules (not the
 * normalization: encoder_output_normalize, as the API asks). The weights are prepared once per model (dense layers packed for
 * this CPU, embedding tables copied as stored, F32 layer norms) and shared
 * read-only; each instance owns a scratch (struct bert_cpu_scratch) sized
 * for a number of tokens. */
#ifndef BG_BERT_CPU_H
#define BG_BERT_CPU_H

#include <stddef.h>

#include "backends/hf_bert.h"
#include "common/error.h"

struct bert_cpu;
struct bert_cpu_scratch;

/* Reads dir/model.safetensors for the graph g: every tensor is checked
 * against g's shapes (the message names the tensor, the shape it has and
 * the one it needs). Tensor names are BertModel's, with or without a
 * "bert." prefix. 0 with *out, or a negative BG_E* code. */
int bert_cpu_load(const char *dir, const struct hf_bert_config *g, struct bert_cpu **out,
                  struct error *err);
void bert_cpu_free(struct bert_cpu *b);
size_t bert_cpu_bytes(const struct bert_cpu *b);

/* A scratch for batches of up to max_tokens tokens at once (at least
 * g->max_seq_length: one sequence always fits; a batch with more is run in
 * parts), computed by `threads` threads (the caller's and threads - 1 kept
 * by the scratch: common/team.h). */
int bert_cpu_scratch_new(const struct bert_cpu *b, int max_tokens, int threads,
                         struct bert_cpu_scratch **out, struct error *err);
void bert_cpu_scratch_free(struct bert_cpu_scratch *s);
size_t bert_cpu_scratch_bytes(const struct bert_cpu_scratch *s);

/* out[r][0..hidden) for the text rows rows[r * ld_row ...] (encoder.h),
 * r < nrows. 0, or -BG_EINVAL when a row is malformed (a count outside
 * 1 .. max_seq_length, an id outside the vocabulary). */
int bert_cpu_run(const struct bert_cpu *b, struct bert_cpu_scratch *s, const float *rows,
                 size_t ld_row, int nrows, float *out, struct error *err);

#endif
