/* hf_bert.h - the shape of a BERT-family sentence encoder from its Hugging
 * Face folder (issue #20): config.json (the graph: sizes, activation,
 * layer-norm epsilon), and the sentence-transformers files beside it when
 * present (modules.json: pooling and normalization; 1_Pooling/config.json:
 * which pooling; sentence_bert_config.json: max_seq_length). Whatever the
 * files say that batchgate does not implement is refused with the file,
 * the field and its value named, never guessed around. The weights
 * (model.safetensors) and the tokenizer (wordpiece.h) are read apart. */
#ifndef BG_HF_BERT_H
#define BG_HF_BERT_H

#include <stdbool.h>

#include "common/error.h"
#include "kernels/pool.h"

struct hf_bert_config {
    int hidden;                       /* hidden_size */
    int layers;                       /* num_hidden_layers */
    int heads, head_dim;              /* num_attention_heads; hidden / heads */
    int intermediate;                 /* intermediate_size */
    int max_positions;                /* max_position_embeddings */
    int vocab, type_vocab;            /* vocab_size, type_vocab_size */
    double layer_norm_eps;            /* layer_norm_eps (1e-12 when absent) */
    int max_seq_length;               /* sentence_bert_config.json's, else max_positions */
    enum pool_mode pooling;           /* mean when no sentence-transformers files say */
    bool normalize;                   /* a Normalize module in modules.json */
    bool do_lower_case;               /* sentence_bert_config.json's: texts lowercased first */
};

/* Reads the folder dir: 0, or -BG_ECONFIG (a refusal or a malformed file)
 * or -BG_EIO (config.json cannot be read) with the reason in err. */
int hf_bert_config_load(const char *dir, struct hf_bert_config *out, struct error *err);

#endif
