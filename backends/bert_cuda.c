/* bert_cuda.c - see bert_cuda.h. */
#include "backends/bert_cuda.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/bert_weights.h"
#include "kernels/attention.h"
#include "kernels/cuda_rt.h"
#include "kernels/dense.h"
#include "kernels/embed.h"
#include "kernels/layernorm.h"
#include "kernels/pool.h"

struct bert_cuda_layer {
    struct dense_cuda *qkv, *attn_out, *ffn_in, *ffn_out;
    float *ln1_g, *ln1_b, *ln2_g, *ln2_b;   /* device */
};

struct bert_cuda {
    struct hf_bert_config g;
    int max_tokens, max_rows;
    struct embed_table word, pos, type;      /* device tables */
    float *ln_g, *ln_b;
    struct bert_cuda_layer *layers;
    /* device buffers */
    float *x, *qkv, *ctx, *tmp, *h, *out;
    int32_t *ids_dev;
    int *cu_dev;
    /* host staging of a part's ids and offsets */
    int32_t *ids;
    int *cu;
    size_t bytes;
    char msg[512];
};

static void *bert_cuda_upload(struct bert_cuda *b, const void *src, size_t bytes)
{
    void *p = cuda_rt_malloc(bytes, b->msg, sizeof b->msg);
    if (p && cuda_rt_upload(p, src, bytes, b->msg, sizeof b->msg) < 0) {
        cuda_rt_free(p);
        return NULL;
    }
    if (p)
        b->bytes += bytes;
    return p;
}

static float *bert_cuda_vector(struct bert_cuda *b, const struct st_tensor *t)
{
    float *v = bert_tensor_f32(t);
    float *d = v ? bert_cuda_upload(b, v, (size_t)t->nelem * sizeof *v) : NULL;
    free(v);
    return d;
}

static int bert_cuda_table(struct bert_cuda *b, const struct st_tensor *t, struct embed_table *out)
{
    void *d = bert_cuda_upload(b, t->data, t->nbytes);
    *out = (struct embed_table){.data = d, .dt = t->dtype, .rows = (int)t->shape[0]};
    return d ? 0 : -1;
}

/* The weights in wdt (converted on the host when the file's type differs),
 * the bias as stored. */
static int bert_cuda_dense(struct bert_cuda *b, const void *w, enum dtype from, size_t n,
                           enum dtype wdt, const void *bias, enum dtype bdt, int out_f, int in_f,
                           enum dense_act act, struct dense_cuda **out)
{
    void *conv = NULL;
    if (from != wdt) {
        conv = malloc(n * dtype_size(wdt));
        if (!conv) {
            snprintf(b->msg, sizeof b->msg, "out of memory");
            return -1;
        }
        const unsigned char *p = w;
        for (size_t i = 0; i < n; i++) {
            float f;
            uint16_t h;
            if (from == DTYPE_F32) {
                memcpy(&f, p + 4 * i, 4);
            } else {
                memcpy(&h, p + 2 * i, 2);
                f = from == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
            }
            if (wdt == DTYPE_F32)
                ((float *)conv)[i] = f;
            else
                ((uint16_t *)conv)[i] = wdt == DTYPE_BF16 ? dtype_f32_to_bf16(f)
                                                          : dtype_f32_to_f16(f);
        }
        w = conv;
    }
    int rc = dense_cuda_prepare(w, wdt, bias, bdt, out_f, in_f, act, out, b->msg, sizeof b->msg);
    free(conv);
    if (rc == 0)
        b->bytes += dense_cuda_bytes(*out);
    return rc;
}

static int bert_cuda_layer(struct bert_cuda *b, const struct bert_layer_tensors *t,
                           enum dtype wdt, struct bert_cuda_layer *ly)
{
    size_t H = (size_t)b->g.hidden, I = (size_t)b->g.intermediate;
    void *qw, *qb;
    if (bert_qkv_concat(t, &qw, &qb, b->msg, sizeof b->msg) < 0)
        return -1;
    int rc = bert_cuda_dense(b, qw, t->qkv_w[0]->dtype, 3 * H * H, wdt, qb, t->qkv_b[0]->dtype,
                             (int)(3 * H), (int)H, DENSE_ACT_NONE, &ly->qkv);
    free(qw);
    free(qb);
    if (rc < 0 ||
        bert_cuda_dense(b, t->out_w->data, t->out_w->dtype, H * H, wdt, t->out_b->data,
                        t->out_b->dtype, (int)H, (int)H, DENSE_ACT_NONE, &ly->attn_out) < 0 ||
        bert_cuda_dense(b, t->ffn_in_w->data, t->ffn_in_w->dtype, I * H, wdt, t->ffn_in_b->data,
                        t->ffn_in_b->dtype, (int)I, (int)H, DENSE_ACT_GELU, &ly->ffn_in) < 0 ||
        bert_cuda_dense(b, t->ffn_out_w->data, t->ffn_out_w->dtype, H * I, wdt,
                        t->ffn_out_b->data, t->ffn_out_b->dtype, (int)H, (int)I, DENSE_ACT_NONE,
                        &ly->ffn_out) < 0)
        return -1;
    if (!(ly->ln1_g = bert_cuda_vector(b, t->ln1_g)) || !(ly->ln1_b = bert_cuda_vector(b, t->ln1_b)) ||
        !(ly->ln2_g = bert_cuda_vector(b, t->ln2_g)) || !(ly->ln2_b = bert_cuda_vector(b, t->ln2_b)))
        return -1;
    return 0;
}

static void *bert_cuda_buffer(struct bert_cuda *b, size_t bytes)
{
    void *p = cuda_rt_malloc(bytes, b->msg, sizeof b->msg);
    if (p)
        b->bytes += bytes;
    return p;
}

int bert_cuda_load(const char *dir, const struct hf_bert_config *g, enum dtype wdt,
                   int max_tokens, int max_rows, struct bert_cuda **out, struct error *err)
{
    struct bert_tensors t;
    int rc = bert_tensors_open(dir, g, &t, err);
    if (rc)
        return rc;
    struct bert_cuda *b = calloc(1, sizeof *b);
    if (!b || !(b->layers = calloc((size_t)g->layers, sizeof *b->layers))) {
        free(b);
        bert_tensors_close(&t);
        return error_set(err, BG_ENOMEM, "%s: out of memory", dir);
    }
    if (max_tokens < g->max_seq_length)
        max_tokens = g->max_seq_length;
    b->g = *g;
    b->max_tokens = max_tokens;
    b->max_rows = max_rows < 1 ? 1 : max_rows;
    size_t T = (size_t)max_tokens, H = (size_t)g->hidden, I = (size_t)g->intermediate;
    rc = bert_cuda_table(b, t.word, &b->word) || bert_cuda_table(b, t.pos, &b->pos) ||
         bert_cuda_table(b, t.type, &b->type) || !(b->ln_g = bert_cuda_vector(b, t.ln_g)) ||
         !(b->ln_b = bert_cuda_vector(b, t.ln_b)) ? -1 : 0;
    for (int i = 0; i < g->layers && rc == 0; i++)
        rc = bert_cuda_layer(b, &t.layers[i], wdt, &b->layers[i]);
    bert_tensors_close(&t);
    if (rc == 0 &&
        (!(b->x = bert_cuda_buffer(b, T * H * sizeof(float))) ||
         !(b->qkv = bert_cuda_buffer(b, T * 3 * H * sizeof(float))) ||
         !(b->ctx = bert_cuda_buffer(b, T * H * sizeof(float))) ||
         !(b->tmp = bert_cuda_buffer(b, T * H * sizeof(float))) ||
         !(b->h = bert_cuda_buffer(b, T * I * sizeof(float))) ||
         !(b->out = bert_cuda_buffer(b, (size_t)b->max_rows * H * sizeof(float))) ||
         !(b->ids_dev = bert_cuda_buffer(b, T * sizeof(int32_t))) ||
         !(b->cu_dev = bert_cuda_buffer(b, (T + 1) * sizeof(int)))))
        rc = -1;
    if (rc == 0 && (!(b->ids = malloc(T * sizeof *b->ids)) ||
                    !(b->cu = malloc((T + 1) * sizeof *b->cu)))) {
        snprintf(b->msg, sizeof b->msg, "out of memory");
        rc = -1;
    }
    if (rc) {
        error_set(err, BG_EBACKEND, "%s: %s", dir, b->msg);
        bert_cuda_free(b);
        return -BG_EBACKEND;
    }
    *out = b;
    return 0;
}

void bert_cuda_free(struct bert_cuda *b)
{
    if (!b)
        return;
    for (int i = 0; b->layers && i < b->g.layers; i++) {
        struct bert_cuda_layer *ly = &b->layers[i];
        dense_cuda_free(ly->qkv);
        dense_cuda_free(ly->attn_out);
        dense_cuda_free(ly->ffn_in);
        dense_cuda_free(ly->ffn_out);
        cuda_rt_free(ly->ln1_g);
        cuda_rt_free(ly->ln1_b);
        cuda_rt_free(ly->ln2_g);
        cuda_rt_free(ly->ln2_b);
    }
    free(b->layers);
    cuda_rt_free((void *)b->word.data);
    cuda_rt_free((void *)b->pos.data);
    cuda_rt_free((void *)b->type.data);
    cuda_rt_free(b->ln_g);
    cuda_rt_free(b->ln_b);
    cuda_rt_free(b->x);
    cuda_rt_free(b->qkv);
    cuda_rt_free(b->ctx);
    cuda_rt_free(b->tmp);
    cuda_rt_free(b->h);
    cuda_rt_free(b->out);
    cuda_rt_free(b->ids_dev);
    cuda_rt_free(b->cu_dev);
    free(b->ids);
    free(b->cu);
    free(b);
}

size_t bert_cuda_bytes(const struct bert_cuda *b) { return b->bytes; }

/* Sequences [0, n) staged in b->ids / b->cu: out[n][H] on the host. */
static int bert_cuda_forward(struct bert_cuda *b, struct cuda_stream *cs, int n, float *out)
{
    const struct hf_bert_config *g = &b->g;
    void *s = cuda_rt_stream_handle(cs);
    int H = g->hidden, T = b->cu[n];
    float eps = (float)g->layer_norm_eps;
    char *m = b->msg;
    size_t mc = sizeof b->msg;
    struct embed_ids host = {.ids = b->ids, .cu_seqlens = b->cu};
    struct embed_ids dev = {.ids = b->ids_dev, .cu_seqlens = b->cu_dev};
    if (cuda_rt_upload_async(b->ids_dev, b->ids, (size_t)T * sizeof *b->ids, cs, m, mc) < 0 ||
        cuda_rt_upload_async(b->cu_dev, b->cu, (size_t)(n + 1) * sizeof *b->cu, cs, m, mc) < 0 ||
        embed_sum_cuda(&b->word, &b->pos, &b->type, H, &host, &dev, n, b->x, s, m, mc) < 0 ||
        layernorm_rows_cuda(b->x, NULL, b->ln_g, b->ln_b, eps, b->x, T, H, s, m, mc) < 0)
        return -1;
    for (int i = 0; i < g->layers; i++) {
        const struct bert_cuda_layer *ly = &b->layers[i];
        struct attention_args a = {
            .q = b->qkv, .k = b->qkv + H, .v = b->qkv + 2 * H, .ld_in = 3 * (size_t)H,
            .out = b->ctx, .ld_out = (size_t)H, .cu_seqlens = b->cu, .nseq = n,
            .heads = g->heads, .head_dim = g->head_dim,
        };
        if (dense_cuda_run(ly->qkv, b->x, T, b->qkv, s, m, mc) < 0 ||
            attention_varlen_cuda(&a, b->cu_dev, s, m, mc) < 0 ||
            dense_cuda_run(ly->attn_out, b->ctx, T, b->tmp, s, m, mc) < 0 ||
            layernorm_rows_cuda(b->tmp, b->x, ly->ln1_g, ly->ln1_b, eps, b->x, T, H, s, m, mc) < 0 ||
            dense_cuda_run(ly->ffn_in, b->x, T, b->h, s, m, mc) < 0 ||
            dense_cuda_run(ly->ffn_out, b->h, T, b->tmp, s, m, mc) < 0 ||
            layernorm_rows_cuda(b->tmp, b->x, ly->ln2_g, ly->ln2_b, eps, b->x, T, H, s, m, mc) < 0)
            return -1;
    }
    /* Normalized by the front end, as the API asks (encoder.h). */
    if (pool_rows_cuda(g->pooling, 0, b->x, (size_t)H, H, b->cu, b->cu_dev, n, b->out, s, m,
                       mc) < 0 ||
        cuda_rt_download_async(out, b->out, (size_t)n * (size_t)H * sizeof(float), cs, m, mc) < 0)
        return -1;
    /* The staging buffers are reused by the next part. */
    return cuda_rt_stream_sync(cs, m, mc);
}

int bert_cuda_run(struct bert_cuda *b, struct cuda_stream *s, const float *rows, size_t ld_row,
                  int nrows, float *out, struct error *err)
{
    const struct hf_bert_config *g = &b->g;
    int first = 0, n = 0, t = 0;
    for (int r = 0; r <= nrows; r++) {
        int len = 0;
        if (r < nrows) {
            const float *row = rows + (size_t)r * ld_row;
            if (!(row[0] >= 1 && row[0] <= (float)g->max_seq_length))
                return error_set(err, BG_EINVAL, "row %d: %g tokens (1 to %d)", r, (double)row[0],
                                 g->max_seq_length);
            len = (int)row[0];
        }
        if (n > 0 && (r == nrows || t + len > b->max_tokens || n == b->max_rows)) {
            if (bert_cuda_forward(b, s, n, out + (size_t)first * (size_t)g->hidden) < 0)
                return error_set(err, BG_EBACKEND, "%s", b->msg);
            first += n;
            n = t = 0;
        }
        if (r == nrows)
            break;
        const float *row = rows + (size_t)r * ld_row;
        b->cu[n] = t;
        for (int i = 0; i < len; i++) {
            float v = row[1 + i];
            if (!(v >= 0 && v < (float)g->vocab))
                return error_set(err, BG_EINVAL, "row %d: token id %g outside the vocabulary",
                                 r, (double)v);
            b->ids[t + i] = (int32_t)v;
        }
        t += len;
        b->cu[++n] = t;
    }
    return 0;
}
