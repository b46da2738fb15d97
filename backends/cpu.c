/* cpu.c - the cpu backend: an MLP's layers run with kernels/ on the host.
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
#include "kernels/dense.h"
#include "backends/safetensors.h"
#include "kernels/softmax.h"

struct cpu_layer {
    enum model_layer_type type;
    struct dense_cpu *dense;
    int64_t width;                /* output elements per row */
};

struct cpu_model {
    struct cpu_layer layers[MODEL_MAX_LAYERS];
    int nlayers;
    int64_t max_width;
};

struct cpu_instance {
    float *scratch[2];
};

static void cpu_model_free(struct cpu_model *cm)
{
    for (int i = 0; i < cm->nlayers; i++)
        if (cm->layers[i].dense)
            dense_cpu_free(cm->layers[i].dense);
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
    return 0;
}

static int cpu_model_load(struct model *m, struct cold_start *cs, struct error *err)
{
    const struct model_config *c = &m->cfg;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", c->dir);
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
    cs->prepare_s = (double)(now_ns() - t1) / 1e9;
    return 0;
fail:
    safetensors_close(st);
    cpu_model_free(cm);
    return rc;
}

static void cpu_model_unload(struct model *m)
{
    cpu_model_free(m->shared);
    m->shared = NULL;
}

static int cpu_instance_load(struct instance *in, struct error *err)
{
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
        free(ci);
    }
    in->state = NULL;
}

static int cpu_run(struct instance *in, struct backend_io *b, struct error *err)
{
    (void)err;
    const struct cpu_model *cm = in->model->shared;
    struct cpu_instance *ci = in->state;
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
    .model_load = cpu_model_load,
    .model_unload = cpu_model_unload,
    .instance_load = cpu_instance_load,
    .run = cpu_run,
    .instance_unload = cpu_instance_unload,
};
