/* cpu.c - the cpu backend: an MLP's layers run with kernels/ on the host,
 * or an encoder folder's forward pass (bert_cpu.h).
 *
 * Weights are read from model.safetensors and prepared once per model
 * (dense_cpu_prepare copies and converts them, so the file is unmapped
 * after load); instances share them read-only and own only two scratch
 * buffers of max_batch_size rows of the widest layer. */
#include "backends/backend_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"
#include "kernels/dense.h"
#include "backends/bert_cpu.h"
#include "backends/packcache.h"
#include "backends/safetensors.h"
#include "kernels/softmax.h"

struct cpu_layer {
    enum model_layer_type type;
    struct dense_cpu *dense;
    int64_t width;                /* output elements per row */
    enum dtype wdt;               /* the weights' type in the file (the packed cache's key) */
};

struct cpu_model {
    struct cpu_layer layers[MODEL_MAX_LAYERS];
    int nlayers;
    int64_t max_width;
    struct packcache *pc;         /* the mapped packed weights the layers run on, or NULL */
    char cache_key[65];           /* packed here, to be kept (cpu_model_keep); "": nothing */
};

struct cpu_instance {
    float *scratch[2];
    struct bert_cpu_scratch *enc;   /* MODEL_KIND_ENCODER */
};

/* ---- encoders (bert_cpu.h): m->shared is the struct bert_cpu ---- */

static bool cpu_is_encoder(const struct model *m) { return m->cfg.kind == MODEL_KIND_ENCODER; }

static int cpu_encoder_load(struct model *m, struct cold_start *cs, struct error *err)
{
    int64_t t0 = now_ns();
    struct bert_cpu *b;
    int rc = bert_cpu_load(m->cfg.dir, &m->cfg.encoder, &b, err);
    if (rc)
        return rc;
    /* Reading and preparing are one pass over the file here. */
    cs->prepare_s = (double)(now_ns() - t0) / 1e9;
    m->shared = b;
    m->shared_bytes = bert_cpu_bytes(b);
    return 0;
}

/* Tokens one instance computes at once: a full batch of the longest
 * sequences, bounded (about 15 KiB of scratch a token at MiniLM's size; a
 * batch with more runs in parts of this many, which are large enough to
 * keep the cores' arithmetic busy). */
static int cpu_encoder_tokens(const struct model_config *c)
{
    int64_t t = c->batching.max_batch_tokens > 0
                    ? c->batching.max_batch_tokens
                    : (int64_t)c->batching.max_batch_size * c->encoder.max_seq_length;
    return t > 4096 ? 4096 : (int)t;
}

static void cpu_model_free(struct cpu_model *cm)
{
    for (int i = 0; i < cm->nlayers; i++)
        if (cm->layers[i].dense)
            dense_cpu_free(cm->layers[i].dense);
    packcache_close(cm->pc);   /* after the layers that borrow from it */
    free(cm);
}

/* Checks one dense layer's tensors against the running width and prepares it. */
static int cpu_prepare_dense(const struct model_config *c, int idx, struct safetensors *st,
                         int64_t width, struct cpu_layer *out, struct error *err)
{
    const struct model_layer *ly = &c->layers[idx];
    const struct st_tensor *w, *b = NULL;
    struct error e = {0};
    int rc = safetensors_weight(st, ly->weight, &w, &e);
    if (rc)
        return error_set(err, BG_ECONFIG, "%s: layers[%d].weight: %s", c->config_path, idx,
                         e.msg);
    if (w->ndim != 2)
        return error_set(err, BG_ECONFIG,
                         "%s: layers[%d].weight: tensor \"%s\" has %d dimensions; a dense weight "
                         "is [out_features, in_features]", c->config_path, idx, ly->weight,
                         w->ndim);
    int64_t out_f = w->shape[0], in_f = w->shape[1];
    if (in_f != width)
        return error_set(err, BG_ECONFIG,
                         "%s: layers[%d]: weight \"%s\" is [%lld, %lld] but its input has %lld "
                         "elements per row (shapes do not chain)", c->config_path, idx,
                         ly->weight, (long long)out_f, (long long)in_f, (long long)width);
    if (out_f < 1 || out_f > (1 << 24) || in_f < 1)
        return error_set(err, BG_ECONFIG, "%s: layers[%d]: weight \"%s\" has an empty dimension",
                         c->config_path, idx, ly->weight);
    if (ly->bias[0]) {
        if ((rc = safetensors_weight(st, ly->bias, &b, &e)))
            return error_set(err, BG_ECONFIG, "%s: layers[%d].bias: %s", c->config_path, idx,
                             e.msg);
        if (b->nelem != out_f || b->ndim != 1)
            return error_set(err, BG_ECONFIG,
                             "%s: layers[%d].bias: tensor \"%s\" must be [%lld] to match the "
                             "weight's out_features", c->config_path, idx, ly->bias,
                             (long long)out_f);
    }
    char msg[256];
    if (dense_cpu_prepare(w->data, w->dtype, b ? b->data : NULL, b ? b->dtype : DTYPE_F32,
                          (int)out_f, (int)in_f, ly->act, &out->dense, msg, sizeof msg) < 0)
        return error_set(err, BG_ENOMEM, "%s: layers[%d]: %s", c->config_path, idx, msg);
    out->type = MODEL_LAYER_DENSE;
    out->width = out_f;
    out->wdt = w->dtype;
    return 0;
}

/* The layers from a packed-weights file (backends/packcache.h): 0, or 1
 * when there is none to use (the caller packs). The shapes were checked
 * when the file was written from the same weights; they must still chain. */
static int cpu_model_from_cache(struct model *m, const char *key, struct cpu_model *cm,
                                struct cold_start *cs)
{
    const struct model_config *c = &m->cfg;
    int64_t t0 = now_ns();
    struct error e = {0};
    int rc = packcache_open(m->cache_dir, c, key, &cm->pc, &e);
    if (rc != 0) {
        if (rc < 0)
            log_warn("model %s: packed weights not used (%s): packing them again", c->name, e.msg);
        return 1;
    }
    int64_t width = c->input.row_elems;
    cm->max_width = width;
    for (int i = 0; i < c->nlayers; i++) {
        struct cpu_layer *ly = &cm->layers[i];
        cm->nlayers = i;
        if (c->layers[i].type == MODEL_LAYER_DENSE) {
            size_t bytes;
            enum dtype wdt;
            int out_f, in_f;
            const float *bias;
            const void *w = packcache_layer(cm->pc, i, &bytes, &wdt, &out_f, &in_f, &bias);
            char msg[256];
            if (!w || in_f != width ||
                dense_cpu_prepare_packed(w, bytes, wdt, c->layers[i].bias[0] ? bias : NULL, out_f,
                                         in_f, c->layers[i].act, &ly->dense, msg, sizeof msg) < 0)
                goto stale;
            ly->type = MODEL_LAYER_DENSE;
            ly->width = out_f;
        } else {
            ly->type = MODEL_LAYER_SOFTMAX;
            ly->width = width;
        }
        width = ly->width;
        if (width > cm->max_width)
            cm->max_width = width;
    }
    cm->nlayers = c->nlayers;
    if (width != c->output.row_elems)
        goto stale;
    cs->read_s = (double)(now_ns() - t0) / 1e9;
    cs->prepare_s = 0;
    log_info("model %s: packed weights mapped from %s (kept by an earlier load)", c->name,
             m->cache_dir);
    return 0;
stale:
    log_warn("model %s: its packed weights do not fit its config: packing them again", c->name);
    for (int i = 0; i < cm->nlayers; i++) {
        dense_cpu_free(cm->layers[i].dense);
        cm->layers[i].dense = NULL;
    }
    cm->nlayers = 0;
    packcache_close(cm->pc);
    cm->pc = NULL;
    return 1;
}

/* Keeps the packed layers for the next load of the same weights: after the
 * load, so that writing them (as long as reading the file) delays no
 * request. */
static void cpu_model_keep(struct model *m)
{
    struct cpu_model *cm = cpu_is_encoder(m) ? NULL : m->shared;
    if (!cm || !cm->cache_key[0] || !m->cache_dir)
        return;
    const char *key = cm->cache_key;
    struct packcache_layer layers[MODEL_MAX_LAYERS];
    memset(layers, 0, sizeof layers);
    for (int i = 0; i < cm->nlayers; i++) {
        const struct dense_cpu *d = cm->layers[i].dense;
        if (!d)
            continue;
        const float *bias;
        layers[i].w = dense_cpu_packed(d, &layers[i].bytes, &bias);
        layers[i].bias = bias;
        layers[i].wdt = cm->layers[i].wdt;
        layers[i].out_features = dense_cpu_out_features(d);
        layers[i].in_features = dense_cpu_in_features(d);
    }
    struct error e = {0};
    if (packcache_write(m->cache_dir, &m->cfg, key, layers, cm->nlayers, &e) != 0)
        log_warn("model %s: its packed weights are not kept for the next load: %s", m->cfg.name,
                 e.msg);
    cm->cache_key[0] = '\0';
}

static int cpu_model_load(struct model *m, struct cold_start *cs, struct error *err)
{
    if (cpu_is_encoder(m))
        return cpu_encoder_load(m, cs, err);
    const struct model_config *c = &m->cfg;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", c->dir);
    char key[65] = "";
    bool cache = m->cache_dir && m->cache_dir[0] && packcache_key(c, path, key) == 0;
    if (cache) {
        struct cpu_model *cm = calloc(1, sizeof *cm);
        if (!cm)
            return error_set(err, BG_ENOMEM, "%s: out of memory", c->name);
        if (cpu_model_from_cache(m, key, cm, cs) == 0) {
            m->shared = cm;
            m->shared_bytes = 0;
            for (int i = 0; i < cm->nlayers; i++)
                if (cm->layers[i].dense)
                    m->shared_bytes += dense_cpu_bytes(cm->layers[i].dense);
            return 0;
        }
        free(cm);
    }
    int64_t t0 = now_ns();
    struct safetensors *st = NULL;
    int rc = safetensors_open(path, &st, err);
    if (rc)
        return rc;
    cs->read_s = (double)(now_ns() - t0) / 1e9;
    int64_t t1 = now_ns();
    struct cpu_model *cm = calloc(1, sizeof *cm);
    if (!cm) {
        safetensors_close(st);
        return error_set(err, BG_ENOMEM, "%s: out of memory", c->name);
    }
    int64_t width = c->input.row_elems;
    cm->max_width = width;
    for (int i = 0; i < c->nlayers; i++) {
        struct cpu_layer *ly = &cm->layers[i];
        if (c->layers[i].type == MODEL_LAYER_DENSE) {
            if ((rc = cpu_prepare_dense(c, i, st, width, ly, err))) {
                cm->nlayers = i;
                goto fail;
            }
        } else {
            ly->type = MODEL_LAYER_SOFTMAX;
            ly->width = width;
        }
        cm->nlayers = i + 1;
        width = ly->width;
        if (width > cm->max_width)
            cm->max_width = width;
    }
    if (width != c->output.row_elems) {
        rc = error_set(err, BG_ECONFIG,
                       "%s: the last layer gives %lld elements per row but outputs[0].shape "
                       "holds %lld", c->config_path, (long long)width,
                       (long long)c->output.row_elems);
        goto fail;
    }
    safetensors_close(st);
    m->shared = cm;
    m->shared_bytes = 0;
    for (int i = 0; i < cm->nlayers; i++)
        if (cm->layers[i].dense)
            m->shared_bytes += dense_cpu_bytes(cm->layers[i].dense);
    if (cache)   /* written by model_keep, once the model serves */
        memcpy(cm->cache_key, key, sizeof cm->cache_key);
    cs->prepare_s = (double)(now_ns() - t1) / 1e9;
    return 0;
fail:
    safetensors_close(st);
    cpu_model_free(cm);
    return rc;
}

static void cpu_model_unload(struct model *m)
{
    if (cpu_is_encoder(m))
        bert_cpu_free(m->shared);
    else
        cpu_model_free(m->shared);
    m->shared = NULL;
}

static int cpu_instance_load(struct instance *in, struct error *err)
{
    if (cpu_is_encoder(in->model)) {
        struct cpu_instance *ci = calloc(1, sizeof *ci);
        if (!ci)
            return error_set(err, BG_ENOMEM, "%s: out of memory", in->model->cfg.name);
        int rc = bert_cpu_scratch_new(in->model->shared, cpu_encoder_tokens(&in->model->cfg),
                                      in->model->cfg.instance_threads,
                                      &ci->enc, err);
        if (rc) {
            free(ci);
            return rc;
        }
        in->state = ci;
        in->memory_bytes = bert_cpu_scratch_bytes(ci->enc);
        return 0;
    }
    const struct cpu_model *cm = in->model->shared;
    struct cpu_instance *ci = calloc(1, sizeof *ci);
    size_t n = (size_t)in->model->cfg.batching.max_batch_size * (size_t)cm->max_width;
    if (ci) {
        ci->scratch[0] = malloc(n * sizeof(float));
        ci->scratch[1] = malloc(n * sizeof(float));
    }
    if (!ci || !ci->scratch[0] || !ci->scratch[1]) {
        if (ci) {
            free(ci->scratch[0]);
            free(ci->scratch[1]);
        }
        free(ci);
        return error_set(err, BG_ENOMEM, "%s: out of memory for scratch buffers",
                         in->model->cfg.name);
    }
    in->state = ci;
    in->memory_bytes = 2 * n * sizeof(float);
    return 0;
}

static void cpu_instance_unload(struct instance *in)
{
    struct cpu_instance *ci = in->state;
    if (ci) {
        free(ci->scratch[0]);
        free(ci->scratch[1]);
        bert_cpu_scratch_free(ci->enc);
        free(ci);
    }
    in->state = NULL;
}

static int cpu_run(struct instance *in, struct backend_io *b, struct error *err)
{
    struct cpu_instance *ci = in->state;
    if (cpu_is_encoder(in->model))
        return bert_cpu_run(in->model->shared, ci->enc, b->in,
                            (size_t)in->model->cfg.input.row_elems, b->rows, b->out, err);
    const struct cpu_model *cm = in->model->shared;
    const float *x = b->in;
    int64_t width = in->model->cfg.input.row_elems;
    for (int i = 0; i < cm->nlayers; i++) {
        const struct cpu_layer *ly = &cm->layers[i];
        float *y = i == cm->nlayers - 1 ? b->out : ci->scratch[i & 1];
        if (ly->type == MODEL_LAYER_DENSE)
            dense_cpu_run(ly->dense, x, b->rows, y);
        else
            softmax_rows(x, y, b->rows, (int)width);
        x = y;
        width = ly->width;
    }
    return 0;
}

const struct backend_i backend_cpu = {
    .name = "cpu",
    .kind = BACKEND_COMPUTE,
    .device_kind = BACKEND_DEVICE_CPU,
    .encoders = true,
    .model_load = cpu_model_load,
    .model_unload = cpu_model_unload,
    .instance_load = cpu_instance_load,
    .run = cpu_run,
    .instance_unload = cpu_instance_unload,
    .keep = cpu_model_keep,
};
