/* bert_cuda.h - a BERT-family encoder's forward pass on an NVIDIA GPU: the
 * cuda backend's MODEL_KIND_ENCODER, the same graph as bert_cpu.h on the
 * kernels of kernels/cuda/ (embed_sum_cuda, dense_cuda, attention_varlen_cuda,
 * layernorm_rows_cuda, pool_rows_cuda), packed sequences, no padding.
 *
 * One per instance, on its device: the weights uploaded (the dense layers
 * in BF16 for the tensor cores, F32 accumulation; embedding tables as
 * stored; layer norms F32), device buffers for max_tokens tokens and
 * max_rows sequences, all allocated at load. A batch: the ids and offsets
 * uploaded once, every layer enqueued on the instance's stream, the pooled
 * rows downloaded into the caller's (pinned) buffer; the caller waits on
 * the stream. A batch with more tokens runs in parts. */
#ifndef BG_BERT_CUDA_H
#define BG_BERT_CUDA_H

#include <stddef.h>

#include "backends/hf_bert.h"
#include "common/error.h"
#include "kernels/dtype.h"

struct bert_cuda;
struct cuda_stream;

/* Uploads dir's weights for g to the current device, the dense layers'
 * weights converted to wdt (DTYPE_BF16: tensor cores; DTYPE_F32: the exact
 * reference). 0 with *out, or a negative BG_E* code. */
int bert_cuda_load(const char *dir, const struct hf_bert_config *g, enum dtype wdt,
                   int max_tokens, int max_rows, struct bert_cuda **out, struct error *err);
void bert_cuda_free(struct bert_cuda *b);
size_t bert_cuda_bytes(const struct bert_cuda *b);

/* out (host, pinned or not)[r][0..hidden) for the text rows (encoder.h),
 * enqueued on s; returns once the stream is idle. 0, or -BG_EINVAL (a
 * malformed row), -BG_EBACKEND (the device's message). */
int bert_cuda_run(struct bert_cuda *b, struct cuda_stream *s, const float *rows, size_t ld_row,
                  int nrows, float *out, struct error *err);

#endif
