/* bert_cpu.c - see bert_cpu.h. */
#include "backends/bert_cpu.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/bert_weights.h"
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

/* A [n] vector widened to F32 (layer norms). */
static float *bert_vector(struct bert_cpu *b, const struct st_tensor *t)
{
    float *v = bert_tensor_f32(t);
    if (v)
        b->bytes += (size_t)t->nelem * sizeof *v;
    return v;
}

/* A table copied as stored: it is read a row per token, halves widened as
 * they are read (embed.h). */
static int bert_table(struct bert_cpu *b, const struct st_tensor *t, struct embed_table *out)
{
    void *p = malloc(t->nbytes);
    if (!p)
        return -1;
    memcpy(p, t->data, t->nbytes);
    *out = (struct embed_table){.data = p, .dt = t->dtype, .rows = (int)t->shape[0]};
    b->bytes += t->nbytes;
    return 0;
}

static int bert_dense(struct bert_cpu *b, const void *w, enum dtype wdt, const void *bias,
                      enum dtype bdt, int out_f, int in_f, enum dense_act act,
                      struct dense_cpu **out, char *msg, size_t cap)
{
    if (dense_cpu_prepare(w, wdt, bias, bdt, out_f, in_f, act, out, msg, cap) < 0)
        return -1;
    b->bytes += dense_cpu_bytes(*out);
    return 0;
}

static int bert_layer(struct bert_cpu *b, const struct bert_layer_tensors *t,
                      struct bert_cpu_layer *ly, char *msg, size_t cap)
{
    int H = b->g.hidden, I = b->g.intermediate;
    /* Q, K and V as one [3H][H] product: one pass over the tokens instead
     * of three, and a wider matrix for the register tiles. */
    void *qkv_w, *qkv_b;
    if (bert_qkv_concat(t, &qkv_w, &qkv_b, msg, cap) < 0)
        return -1;
    int rc = bert_dense(b, qkv_w, t->qkv_w[0]->dtype, qkv_b, t->qkv_b[0]->dtype, 3 * H, H,
                        DENSE_ACT_NONE, &ly->qkv, msg, cap);
    free(qkv_w);
    free(qkv_b);
    if (rc < 0 ||
        bert_dense(b, t->out_w->data, t->out_w->dtype, t->out_b->data, t->out_b->dtype, H, H,
                   DENSE_ACT_NONE, &ly->attn_out, msg, cap) < 0 ||
        bert_dense(b, t->ffn_in_w->data, t->ffn_in_w->dtype, t->ffn_in_b->data,
                   t->ffn_in_b->dtype, I, H, DENSE_ACT_GELU, &ly->ffn_in, msg, cap) < 0 ||
        bert_dense(b, t->ffn_out_w->data, t->ffn_out_w->dtype, t->ffn_out_b->data,
                   t->ffn_out_b->dtype, H, I, DENSE_ACT_NONE, &ly->ffn_out, msg, cap) < 0)
        return -1;
    if (!(ly->ln1_g = bert_vector(b, t->ln1_g)) || !(ly->ln1_b = bert_vector(b, t->ln1_b)) ||
        !(ly->ln2_g = bert_vector(b, t->ln2_g)) || !(ly->ln2_b = bert_vector(b, t->ln2_b))) {
        snprintf(msg, cap, "out of memory");
        return -1;
    }
    return 0;
}

int bert_cpu_load(const char *dir, const struct hf_bert_config *g, struct bert_cpu **out,
                  struct error *err)
{
    struct bert_tensors t;
    int rc = bert_tensors_open(dir, g, &t, err);
    if (rc)
        return rc;
    struct bert_cpu *b = calloc(1, sizeof *b);
    if (!b || !(b->layers = calloc((size_t)g->layers, sizeof *b->layers))) {
        free(b);
        bert_tensors_close(&t);
        return error_set(err, BG_ENOMEM, "%s: out of memory", dir);
    }
    b->g = *g;
    b->bytes = sizeof *b + (size_t)g->layers * sizeof *b->layers;
    char msg[256] = "out of memory";
    rc = bert_table(b, t.word, &b->word) || bert_table(b, t.pos, &b->pos) ||
         bert_table(b, t.type, &b->type) || !(b->ln_g = bert_vector(b, t.ln_g)) ||
         !(b->ln_b = bert_vector(b, t.ln_b)) ? -1 : 0;
    for (int i = 0; i < g->layers && rc == 0; i++)
        if ((rc = bert_layer(b, &t.layers[i], &b->layers[i], msg, sizeof msg)) < 0)
            snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " (layer %d)", i);
    bert_tensors_close(&t);
    if (rc) {
        bert_cpu_free(b);
        return error_set(err, BG_ENOMEM, "%s/model.safetensors: %s", dir, msg);
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
