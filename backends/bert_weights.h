/* bert_weights.h - a BERT folder's model.safetensors checked against its
 * config.json (hf_bert.h) once, for every backend that runs it: each tensor
 * the forward pass reads, found by its BertModel name (with or without a
 * "bert." prefix) and its shape checked, the message naming the tensor, the
 * shape it has and the one config.json implies. The tensors point into the
 * mapped file: a backend copies or uploads what it keeps, then closes. */
#ifndef BG_BERT_WEIGHTS_H
#define BG_BERT_WEIGHTS_H

#include "backends/hf_bert.h"
#include "backends/safetensors.h"
#include "common/error.h"

struct bert_layer_tensors {
    const struct st_tensor *qkv_w[3], *qkv_b[3];   /* query, key, value: [H][H], [H] */
    const struct st_tensor *out_w, *out_b;         /* attention output: [H][H], [H] */
    const struct st_tensor *ln1_g, *ln1_b;         /* [H] */
    const struct st_tensor *ffn_in_w, *ffn_in_b;   /* intermediate: [I][H], [I] */
    const struct st_tensor *ffn_out_w, *ffn_out_b; /* output: [H][I], [H] */
    const struct st_tensor *ln2_g, *ln2_b;         /* [H] */
};

struct bert_tensors {
    struct safetensors *st;
    const struct st_tensor *word, *pos, *type;     /* [vocab | max_positions | type_vocab][H] */
    const struct st_tensor *ln_g, *ln_b;           /* the embeddings' layer norm, [H] */
    struct bert_layer_tensors *layers;             /* g->layers of them */
};

/* Opens dir/model.safetensors and finds every tensor: 0, or a negative BG_E*
 * code (nothing left open). */
int bert_tensors_open(const char *dir, const struct hf_bert_config *g, struct bert_tensors *out,
                      struct error *err);
void bert_tensors_close(struct bert_tensors *t);

/* A vector or matrix widened to F32 (malloc'ed; NULL when out of memory). */
float *bert_tensor_f32(const struct st_tensor *t);
/* Layer l's query, key and value weights one after another ([3H][H]) and
 * their biases ([3H]), in the file's types (the three must agree): what a
 * fused QKV product is prepared from. 0 with *w and *b malloc'ed, or -1
 * with msg. */
int bert_qkv_concat(const struct bert_layer_tensors *l, void **w, void **b, char *msg, size_t cap);

#endif
