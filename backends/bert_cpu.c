/* bert_cpu.c - see bert_cpu.h. */
#include "backends/bert_cpu.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/safetensors.h"
#include "common/team.h"
#include "kernels/attention.h"
#include "kernels/dense.h"
#include "kernels/embed.h"
#include "kernels/layernorm.h"
#include "kernels/pool.h"

struct bert_cpu_layer {
    struct dense_cpu *qkv, *attn_out, *ffn_in, *ffn_out;
    float *ln1_g, *ln1_b, *ln2_g, *ln2_b;
};

struct bert_cpu {
    struct hf_bert_config g;
    struct embed_table word, pos, type;   /* tables copied as stored (F32, F16 or BF16) */
    float *ln_g, *ln_b;                   /* the embeddings' layer norm */
    struct bert_cpu_layer *layers;
    size_t bytes;
};

struct bert_cpu_scratch {
    int max_tokens;
    struct team *team;  /* the threads a batch is computed with (team.h) */
    float *x;          /* [T][H]: the hidden states */
    float *qkv;        /* [T][3H] */
    float *ctx;        /* [T][H]: the attention's context */
    float *tmp;        /* [T][H]: a sublayer's output before its residual layer norm */
    float *h;          /* [T][I]: the FFN's inner activations */
    float *att;        /* attention_varlen's scratch, one per thread */
    size_t att_floats; /* ... of each thread */
    int32_t *ids;      /* [T] */
    int *cu;           /* [T + 1]: a part holds at most T sequences */
    size_t bytes;
};

/* ---- loading ---- */

struct bert_loader {
    struct safetensors *st;
    const char *path;
    char prefix[8];    /* "" or "bert." */
    struct error *err;
};

/* The tensor named by fmt (under the prefix), of `ndim` dimensions d0, d1. */
static const struct st_tensor *bert_tensor(struct bert_loader *l, int64_t d0, int64_t d1,
                                           const char *fmt, ...)
{
    char name[256];
    int n = snprintf(name, sizeof name, "%s", l->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + n, sizeof name - (size_t)n, fmt, ap);
    va_end(ap);
    const struct st_tensor *t;
    struct error e = {0};
    if (safetensors_weight(l->st, name, &t, &e) != 0) {
        error_set(l->err, BG_ECONFIG, "%s: %s", l->path, e.msg);
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
        error_set(l->err, BG_ECONFIG, "%s: tensor \"%s\" is [%s], config.json says [%s]", l->path,
                  name, have, need);
        return NULL;
    }
    return t;
}

/* A [n] vector widened to F32 (layer norms). */
static float *bert_vector(struct bert_cpu *b, const struct st_tensor *t)
{
    float *v = t ? malloc((size_t)t->nelem * sizeof *v) : NULL;
    if (!v)
        return NULL;
    const unsigned char *p = t->data;
    for (int64_t i = 0; i < t->nelem; i++) {
        uint16_t h;
        if (t->dtype == DTYPE_F32) {
            memcpy(&v[i], p + 4 * i, 4);
            continue;
        }
        memcpy(&h, p + 2 * i, 2);
        v[i] = t->dtype == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
    }
    b->bytes += (size_t)t->nelem * sizeof *v;
    return v;
}

static int bert_table(struct bert_cpu *b, const struct st_tensor *t, struct embed_table *out)
{
    if (!t)
        return -1;
    void *p = malloc(t->nbytes);
    if (!p)
        return -1;
    memcpy(p, t->data, t->nbytes);
    *out = (struct embed_table){.data = p, .dt = t->dtype, .rows = (int)t->shape[0]};
    b->bytes += t->nbytes;
    return 0;
}

static int bert_dense(struct bert_cpu *b, struct bert_loader *l, const struct st_tensor *w,
                      const struct st_tensor *bias, enum dense_act act, struct dense_cpu **out)
{
    if (!w || !bias)
        return -1;
    char msg[256];
    if (dense_cpu_prepare(w->data, w->dtype, bias->data, bias->dtype, (int)w->shape[0],
                          (int)w->shape[1], act, out, msg, sizeof msg) < 0)
        return error_set(l->err, BG_ENOMEM, "%s: %s: %s", l->path, w->name, msg);
    b->bytes += dense_cpu_bytes(*out);
    return 0;
}

/* Q, K and V as one [3H][H] product: one pass over the tokens instead of
 * three, and a wider matrix for the register tiles. */
static int bert_qkv(struct bert_cpu *b, struct bert_loader *l, int i, struct dense_cpu **out)
{
    static const char *const part[3] = {"query", "key", "value"};
    int H = b->g.hidden;
    const struct st_tensor *w[3], *bias[3];
    for (int k = 0; k < 3; k++) {
        w[k] = bert_tensor(l, H, H, "encoder.layer.%d.attention.self.%s.weight", i, part[k]);
        bias[k] = w[k] ? bert_tensor(l, H, 0, "encoder.layer.%d.attention.self.%s.bias", i,
                                     part[k])
                       : NULL;
        if (!bias[k])
            return -1;
        if (w[k]->dtype != w[0]->dtype || bias[k]->dtype != bias[0]->dtype)
            return error_set(l->err, BG_ECONFIG, "%s: layer %d: query, key and value are stored "
                             "in different types (%s, %s): not served", l->path, i,
                             dtype_name(w[0]->dtype), dtype_name(w[k]->dtype));
    }
    size_t wb = w[0]->nbytes, bb = bias[0]->nbytes;
    unsigned char *cw = malloc(3 * wb), *cb = malloc(3 * bb);
    int rc = -1;
    if (cw && cb) {
        for (int k = 0; k < 3; k++) {
            memcpy(cw + k * wb, w[k]->data, wb);
            memcpy(cb + k * bb, bias[k]->data, bb);
        }
        char msg[256];
        rc = dense_cpu_prepare(cw, w[0]->dtype, cb, bias[0]->dtype, 3 * H, H, DENSE_ACT_NONE, out,
                               msg, sizeof msg);
        if (rc < 0)
            error_set(l->err, BG_ENOMEM, "%s: layer %d: QKV: %s", l->path, i, msg);
        else
            b->bytes += dense_cpu_bytes(*out);
    } else {
        error_set(l->err, BG_ENOMEM, "%s: out of memory", l->path);
    }
    free(cw);
    free(cb);
    return rc;
}

static int bert_layer(struct bert_cpu *b, struct bert_loader *l, int i)
{
    struct bert_cpu_layer *ly = &b->layers[i];
    int H = b->g.hidden, I = b->g.intermediate;
    const char *ln = "encoder.layer.%d.%s.LayerNorm.%s";
    if (bert_qkv(b, l, i, &ly->qkv) < 0 ||
        bert_dense(b, l, bert_tensor(l, H, H, "encoder.layer.%d.attention.output.dense.weight", i),
                   bert_tensor(l, H, 0, "encoder.layer.%d.attention.output.dense.bias", i),
                   DENSE_ACT_NONE, &ly->attn_out) < 0 ||
        bert_dense(b, l, bert_tensor(l, I, H, "encoder.layer.%d.intermediate.dense.weight", i),
                   bert_tensor(l, I, 0, "encoder.layer.%d.intermediate.dense.bias", i),
                   DENSE_ACT_GELU, &ly->ffn_in) < 0 ||
        bert_dense(b, l, bert_tensor(l, H, I, "encoder.layer.%d.output.dense.weight", i),
                   bert_tensor(l, H, 0, "encoder.layer.%d.output.dense.bias", i), DENSE_ACT_NONE,
                   &ly->ffn_out) < 0 ||
        !(ly->ln1_g = bert_vector(b, bert_tensor(l, H, 0, ln, i, "attention.output", "weight"))) ||
        !(ly->ln1_b = bert_vector(b, bert_tensor(l, H, 0, ln, i, "attention.output", "bias"))) ||
        !(ly->ln2_g = bert_vector(b, bert_tensor(l, H, 0, ln, i, "output", "weight"))) ||
        !(ly->ln2_b = bert_vector(b, bert_tensor(l, H, 0, ln, i, "output", "bias"))))
        return -1;
    return 0;
}

int bert_cpu_load(const char *dir, const struct hf_bert_config *g, struct bert_cpu **out,
                  struct error *err)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct bert_loader l = {.path = path, .err = err};
    int rc = safetensors_open(path, &l.st, err);
    if (rc)
        return rc;
    if (!safetensors_find(l.st, "embeddings.word_embeddings.weight") &&
        safetensors_find(l.st, "bert.embeddings.word_embeddings.weight"))
        snprintf(l.prefix, sizeof l.prefix, "bert.");
    struct bert_cpu *b = calloc(1, sizeof *b);
    if (!b || !(b->layers = calloc((size_t)g->layers, sizeof *b->layers))) {
        free(b);
        safetensors_close(l.st);
        return error_set(err, BG_ENOMEM, "%s: out of memory", path);
    }
    b->g = *g;
    b->bytes = sizeof *b + (size_t)g->layers * sizeof *b->layers;
    int H = g->hidden;
    err->code = 0;
    rc = -1;
    if (bert_table(b, bert_tensor(&l, g->vocab, H, "embeddings.word_embeddings.weight"),
                   &b->word) == 0 &&
        bert_table(b, bert_tensor(&l, g->max_positions, H, "embeddings.position_embeddings.weight"),
                   &b->pos) == 0 &&
        bert_table(b, bert_tensor(&l, g->type_vocab, H, "embeddings.token_type_embeddings.weight"),
                   &b->type) == 0 &&
        (b->ln_g = bert_vector(b, bert_tensor(&l, H, 0, "embeddings.LayerNorm.weight"))) &&
        (b->ln_b = bert_vector(b, bert_tensor(&l, H, 0, "embeddings.LayerNorm.bias")))) {
        rc = 0;
        for (int i = 0; i < g->layers && rc == 0; i++)
            rc = bert_layer(b, &l, i);
    }
    safetensors_close(l.st);
    if (rc) {
        bert_cpu_free(b);
        return err->code ? -err->code : error_set(err, BG_ENOMEM, "%s: out of memory", path);
    }
    *out = b;
    return 0;
}

void bert_cpu_free(struct bert_cpu *b)
{
    if (!b)
        return;
    for (int i = 0; b->layers && i < b->g.layers; i++) {
        struct bert_cpu_layer *ly = &b->layers[i];
        dense_cpu_free(ly->qkv);
        dense_cpu_free(ly->attn_out);
        dense_cpu_free(ly->ffn_in);
        dense_cpu_free(ly->ffn_out);
        free(ly->ln1_g);
        free(ly->ln1_b);
        free(ly->ln2_g);
        free(ly->ln2_b);
    }
    free(b->layers);
    free((void *)b->word.data);
    free((void *)b->pos.data);
    free((void *)b->type.data);
    free(b->ln_g);
    free(b->ln_b);
    free(b);
}

size_t bert_cpu_bytes(const struct bert_cpu *b) { return b->bytes; }

/* ---- scratch ---- */

int bert_cpu_scratch_new(const struct bert_cpu *b, int max_tokens, int threads,
                         struct bert_cpu_scratch **out, struct error *err)
{
    const struct hf_bert_config *g = &b->g;
    if (max_tokens < g->max_seq_length)
        max_tokens = g->max_seq_length;
    if (threads < 1)
        threads = 1;
    size_t T = (size_t)max_tokens, H = (size_t)g->hidden, I = (size_t)g->intermediate;
    struct bert_cpu_scratch *s = calloc(1, sizeof *s);
    if (s) {
        s->max_tokens = max_tokens;
        s->att_floats = attention_scratch_floats(g->max_seq_length, g->head_dim);
        s->x = malloc(T * H * sizeof(float));
        s->qkv = malloc(T * 3 * H * sizeof(float));
        s->ctx = malloc(T * H * sizeof(float));
        s->tmp = malloc(T * H * sizeof(float));
        s->h = malloc(T * I * sizeof(float));
        s->att = malloc((size_t)threads * s->att_floats * sizeof(float));
        s->ids = malloc(T * sizeof *s->ids);
        s->cu = malloc((T + 1) * sizeof *s->cu);
        s->bytes = (T * (6 * H + I) + (size_t)threads * s->att_floats) * sizeof(float) +
                   T * sizeof *s->ids + (T + 1) * sizeof *s->cu;
    }
    if (!s || !s->x || !s->qkv || !s->ctx || !s->tmp || !s->h || !s->att || !s->ids || !s->cu) {
        bert_cpu_scratch_free(s);
        return error_set(err, BG_ENOMEM, "out of memory for an encoder scratch of %d tokens",
                         max_tokens);
    }
    if (team_new(threads, &s->team) < 0) {
        bert_cpu_scratch_free(s);
        return error_set(err, BG_ENOMEM, "cannot start %d threads for an instance: %s", threads - 1,
                         strerror(errno));
    }
    *out = s;
    return 0;
}

void bert_cpu_scratch_free(struct bert_cpu_scratch *s)
{
    if (!s)
        return;
    team_free(s->team);
    free(s->x);
    free(s->qkv);
    free(s->ctx);
    free(s->tmp);
    free(s->h);
    free(s->att);
    free(s->ids);
    free(s->cu);
    free(s);
}

size_t bert_cpu_scratch_bytes(const struct bert_cpu_scratch *s) { return s->bytes; }

/* ---- the forward pass ----
 *
 * Two kinds of step, each split over the team: from one attention to the
 * next every operation is row-local (the output projection, both layer
 * norms, the FFN, the next layer's QKV), so a thread runs that whole chain
 * on its own rows; the attention needs every row of a sequence, so it is
 * split by heads. Two joins per layer. */

struct bert_step {
    const struct bert_cpu *b;
    struct bert_cpu_scratch *s;
    int n;             /* sequences */
    int layer;         /* rows: the layer whose attention output is taken (-1: the
                        * embeddings); heads: the layer whose attention runs */
    int failed;
};

static void bert_rows(void *arg, int i, int nt)
{
    struct bert_step *st = arg;
    const struct bert_cpu *b = st->b;
    struct bert_cpu_scratch *s = st->s;
    int H = b->g.hidden, I = b->g.intermediate, T = s->cu[st->n];
    int r0 = (int)((int64_t)T * i / nt), r1 = (int)((int64_t)T * (i + 1) / nt), rows = r1 - r0;
    if (rows <= 0)
        return;
    float eps = (float)b->g.layer_norm_eps;
    float *x = s->x + (size_t)r0 * H;
    if (st->layer < 0) {
        layernorm_rows(x, NULL, b->ln_g, b->ln_b, eps, x, rows, H);
    } else {
        const struct bert_cpu_layer *ly = &b->layers[st->layer];
        float *tmp = s->tmp + (size_t)r0 * H, *h = s->h + (size_t)r0 * I;
        dense_cpu_run(ly->attn_out, s->ctx + (size_t)r0 * H, rows, tmp);
        layernorm_rows(tmp, x, ly->ln1_g, ly->ln1_b, eps, x, rows, H);
        dense_cpu_run(ly->ffn_in, x, rows, h);
        dense_cpu_run(ly->ffn_out, h, rows, tmp);
        layernorm_rows(tmp, x, ly->ln2_g, ly->ln2_b, eps, x, rows, H);
    }
    if (st->layer + 1 < b->g.layers)
        dense_cpu_run(b->layers[st->layer + 1].qkv, x, rows, s->qkv + (size_t)r0 * 3 * H);
}

static void bert_heads(void *arg, int i, int nt)
{
    struct bert_step *st = arg;
    const struct hf_bert_config *g = &st->b->g;
    struct bert_cpu_scratch *s = st->s;
    int h0 = g->heads * i / nt, h1 = g->heads * (i + 1) / nt;
    if (h1 <= h0)
        return;
    size_t off = (size_t)h0 * (size_t)g->head_dim, H = (size_t)g->hidden;
    /* A subset of heads is a column slice of q, k, v and the context. */
    struct attention_args a = {
        .q = s->qkv + off, .k = s->qkv + H + off, .v = s->qkv + 2 * H + off, .ld_in = 3 * H,
        .out = s->ctx + off, .ld_out = H, .cu_seqlens = s->cu, .nseq = st->n,
        .heads = h1 - h0, .head_dim = g->head_dim,
    };
    if (attention_varlen(&a, s->att + (size_t)i * s->att_floats, s->att_floats) < 0)
        st->failed = 1;
}

/* Sequences [0, n) of the part already in s->ids / s->cu: out[n][H]. */
static int bert_forward(const struct bert_cpu *b, struct bert_cpu_scratch *s, int n, float *out,
                        struct error *err)
{
    const struct hf_bert_config *g = &b->g;
    int H = g->hidden;
    char msg[200];
    if (embed_sum(&b->word, &b->pos, &b->type, H, s->ids, NULL, s->cu, n, s->x, msg,
                  sizeof msg) < 0)
        return error_set(err, BG_EINVAL, "%s", msg);
    struct bert_step st = {.b = b, .s = s, .n = n, .layer = -1};
    team_run(s->team, bert_rows, &st);
    for (int i = 0; i < g->layers; i++) {
        st.layer = i;
        team_run(s->team, bert_heads, &st);
        if (st.failed)
            return error_set(err, BG_EINTERNAL, "attention: inconsistent arguments");
        team_run(s->team, bert_rows, &st);
    }
    /* Normalized by the front end, as the API asks (encoder.h). */
    if (pool_rows(g->pooling, 0, s->x, (size_t)H, H, s->cu, n, out) < 0)
        return error_set(err, BG_EINTERNAL, "pooling: inconsistent arguments");
    return 0;
}
int bert_cpu_run(const struct bert_cpu *b, struct bert_cpu_scratch *s, const float *rows,
                 size_t ld_row, int nrows, float *out, struct error *err)
{
    const struct hf_bert_config *g = &b->g;
    int first = 0;   /* the part's first sequence */
    int n = 0, t = 0;
    for (int r = 0; r <= nrows; r++) {
        int len = 0;
        if (r < nrows) {
            const float *row = rows + (size_t)r * ld_row;
            len = (int)row[0];
            if (!(row[0] >= 1 && row[0] <= (float)g->max_seq_length))
                return error_set(err, BG_EINVAL, "row %d: %g tokens (1 to %d)", r, (double)row[0],
                                 g->max_seq_length);
        }
        /* Run the part gathered so far when this sequence does not fit. */
        if (n > 0 && (r == nrows || t + len > s->max_tokens)) {
            int rc = bert_forward(b, s, n, out + (size_t)first * (size_t)g->hidden, err);
            if (rc)
                return rc;
            first += n;
            n = t = 0;
        }
        if (r == nrows)
            break;
        const float *row = rows + (size_t)r * ld_row;
        s->cu[n] = t;
        for (int i = 0; i < len; i++) {
            float v = row[1 + i];
            if (!(v >= 0 && v < (float)g->vocab))
                return error_set(err, BG_EINVAL, "row %d: token id %g outside the vocabulary",
                                 r, (double)v);
            s->ids[t + i] = (int32_t)v;
        }
        t += len;
        s->cu[++n] = t;
    }
    return 0;
}
