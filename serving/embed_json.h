/* embed_json.h - the embeddings APIs' wire formats for an encoder model
 * (MODEL_KIND_ENCODER): OpenAI's POST /v1/embeddings and text-embeddings-
 * inference's POST /embed, decoded into text rows (backends/encoder.h) and
 * answered from the pooled vectors. Pure functions over bytes, like
 * tensor_json.h: a decode error is a negative BG_E* code (400, or 413 for
 * an input over the maximum length with truncation off) with a message
 * naming the field. */
#ifndef BG_EMBED_JSON_H
#define BG_EMBED_JSON_H

#include <stdbool.h>
#include <stddef.h>

#include "backends/backend.h"
#include "common/buf.h"
#include "common/error.h"
#include "serving/tensor_json.h"

enum embed_api { EMBED_OPENAI, EMBED_TEI };

/* What a request asks of the answer beyond its rows. */
struct embed_request {
    enum embed_api api;
    bool base64;            /* OpenAI encoding_format "base64" */
    bool normalize;         /* L2 per vector: TEI's `normalize`, else the model's modules */
    char param[32];         /* the field a decode error is about (OpenAI's error `param`) */
};

/* The `model` of an OpenAI body (the model is found before the body is
 * decoded with its tokenizer): 0, or -BG_EINVAL with the field the error
 * is about in param ("" for the body itself). */
int embed_openai_model(const char *body, size_t len, char *name, size_t cap, char *param,
                       size_t pcap, struct error *err);

/* Decodes body into r's rows (r->rows texts, r->tokens in all) for the
 * loaded encoder m. OpenAI: `input` a string, an array of strings, an
 * array of token ids or an array of such arrays; `encoding_format` float
 * or base64; `dimensions` only the model's own; `truncate` (batchgate's,
 * default true). TEI: `inputs` a string or an array of strings,
 * `normalize` (default true), `truncate` (default true). At most
 * batching.max_batch_size inputs. */
int embed_decode(const struct model *m, enum embed_api api, const char *body, size_t len,
                 struct infer_request *r, struct embed_request *e, struct error *err);

/* The answer for r's rows of out (hidden floats each, normalized already
 * when e->normalize): OpenAI's list object with usage, or TEI's array of
 * arrays. */
int embed_encode(const struct model_config *c, const struct embed_request *e,
                 const struct infer_request *r, const float *out, struct buf *b);

#endif
