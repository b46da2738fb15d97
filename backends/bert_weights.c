/* bert_weights.c - see bert_weights.h. */
#include "backends/bert_weights.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bert_finder {
    struct safetensors *st;
    const char *path;
    char prefix[8];     /* "" or "bert." */
    struct error *err;
    int failed;
};

/* The tensor named by fmt (under the prefix), [d0] or [d0][d1] (d1 > 0);
 * NULL (and the error, once) when missing or of another shape. */
static const struct st_tensor *bert_find(struct bert_finder *f, int64_t d0, int64_t d1,
                                         const char *fmt, ...)
{
    if (f->failed)
        return NULL;
    char name[256];
    int n = snprintf(name, sizeof name, "%s", f->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + n, sizeof name - (size_t)n, fmt, ap);
    va_end(ap);
    const struct st_tensor *t;
    struct error e = {0};
    f->failed = 1;
    if (safetensors_weight(f->st, name, &t, &e) != 0) {
        error_set(f->err, BG_ECONFIG, "%s: %s", f->path, e.msg);
        return NULL;
    }
    int ndim = d1 > 0 ? 2 : 1;
    if (t->ndim != ndim || t->shape[0] != d0 || (ndim == 2 && t->shape[1] != d1)) {
        char have[64] = "", need[48];
        for (int i = 0, o = 0; i < t->ndim && o < (int)sizeof have - 24; i++)
            o += snprintf(have + o, sizeof have - (size_t)o, "%s%lld", i ? ", " : "",
                          (long long)t->shape[i]);
        if (ndim == 2)
            snprintf(need, sizeof need, "%lld, %lld", (long long)d0, (long long)d1);
        else
            snprintf(need, sizeof need, "%lld", (long long)d0);
        error_set(f->err, BG_ECONFIG, "%s: tensor \"%s\" is [%s], config.json says [%s]", f->path,
                  name, have, need);
        return NULL;
    }
    f->failed = 0;
    return t;
}

static void bert_find_layer(struct bert_finder *f, const struct hf_bert_config *g, int i,
                            struct bert_layer_tensors *l)
{
    static const char *const part[3] = {"query", "key", "value"};
    int H = g->hidden, I = g->intermediate;
    for (int k = 0; k < 3; k++) {
        l->qkv_w[k] = bert_find(f, H, H, "encoder.layer.%d.attention.self.%s.weight", i, part[k]);
        l->qkv_b[k] = bert_find(f, H, 0, "encoder.layer.%d.attention.self.%s.bias", i, part[k]);
    }
    l->out_w = bert_find(f, H, H, "encoder.layer.%d.attention.output.dense.weight", i);
    l->out_b = bert_find(f, H, 0, "encoder.layer.%d.attention.output.dense.bias", i);
    l->ln1_g = bert_find(f, H, 0, "encoder.layer.%d.attention.output.LayerNorm.weight", i);
    l->ln1_b = bert_find(f, H, 0, "encoder.layer.%d.attention.output.LayerNorm.bias", i);
    l->ffn_in_w = bert_find(f, I, H, "encoder.layer.%d.intermediate.dense.weight", i);
    l->ffn_in_b = bert_find(f, I, 0, "encoder.layer.%d.intermediate.dense.bias", i);
    l->ffn_out_w = bert_find(f, H, I, "encoder.layer.%d.output.dense.weight", i);
    l->ffn_out_b = bert_find(f, H, 0, "encoder.layer.%d.output.dense.bias", i);
    l->ln2_g = bert_find(f, H, 0, "encoder.layer.%d.output.LayerNorm.weight", i);
    l->ln2_b = bert_find(f, H, 0, "encoder.layer.%d.output.LayerNorm.bias", i);
    if (!f->failed)
        for (int k = 1; k < 3; k++)
            if (l->qkv_w[k]->dtype != l->qkv_w[0]->dtype ||
                l->qkv_b[k]->dtype != l->qkv_b[0]->dtype) {
                f->failed = 1;
                error_set(f->err, BG_ECONFIG, "%s: layer %d: query, key and value are stored in "
                          "different types (%s, %s): not served", f->path, i,
                          dtype_name(l->qkv_w[0]->dtype), dtype_name(l->qkv_w[k]->dtype));
                return;
            }
}

int bert_tensors_open(const char *dir, const struct hf_bert_config *g, struct bert_tensors *out,
                      struct error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    memset(out, 0, sizeof *out);
    struct bert_finder f = {.path = path, .err = err};
    int rc = safetensors_open(path, &f.st, err);
    if (rc)
        return rc;
    if (!safetensors_find(f.st, "embeddings.word_embeddings.weight") &&
        safetensors_find(f.st, "bert.embeddings.word_embeddings.weight"))
        snprintf(f.prefix, sizeof f.prefix, "bert.");
    out->st = f.st;
    if (!(out->layers = calloc((size_t)g->layers, sizeof *out->layers))) {
        bert_tensors_close(out);
        return error_set(err, BG_ENOMEM, "%s: out of memory", path);
    }
    int H = g->hidden;
    out->word = bert_find(&f, g->vocab, H, "embeddings.word_embeddings.weight");
    out->pos = bert_find(&f, g->max_positions, H, "embeddings.position_embeddings.weight");
    out->type = bert_find(&f, g->type_vocab, H, "embeddings.token_type_embeddings.weight");
    out->ln_g = bert_find(&f, H, 0, "embeddings.LayerNorm.weight");
    out->ln_b = bert_find(&f, H, 0, "embeddings.LayerNorm.bias");
    for (int i = 0; i < g->layers && !f.failed; i++)
        bert_find_layer(&f, g, i, &out->layers[i]);
    if (f.failed) {
        bert_tensors_close(out);
        return -err->code;
    }
    return 0;
}

void bert_tensors_close(struct bert_tensors *t)
{
    safetensors_close(t->st);
    free(t->layers);
    memset(t, 0, sizeof *t);
}

float *bert_tensor_f32(const struct st_tensor *t)
{
    float *v = malloc((size_t)t->nelem * sizeof *v);
    if (!v)
        return NULL;
    const unsigned char *p = t->data;   /* unaligned in general: memcpy each element */
    for (int64_t i = 0; i < t->nelem; i++) {
        uint16_t h;
        if (t->dtype == DTYPE_F32) {
            memcpy(&v[i], p + 4 * i, 4);
            continue;
        }
        memcpy(&h, p + 2 * i, 2);
        v[i] = t->dtype == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
    }
    return v;
}

int bert_qkv_concat(const struct bert_layer_tensors *l, void **w, void **b, char *msg, size_t cap)
{
    size_t wb = l->qkv_w[0]->nbytes, bb = l->qkv_b[0]->nbytes;
    unsigned char *cw = malloc(3 * wb), *cb = malloc(3 * bb);
    if (!cw || !cb) {
        free(cw);
        free(cb);
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    for (int k = 0; k < 3; k++) {
        memcpy(cw + k * wb, l->qkv_w[k]->data, wb);
        memcpy(cb + k * bb, l->qkv_b[k]->data, bb);
    }
    *w = cw;
    *b = cb;
    return 0;
}
