/* cuda.c - the cuda backend: the same MLPs as cpu.c on NVIDIA GPUs through
 * kernels/cuda/ (our kernels, no cuBLAS).
 *
 * Per model: the safetensors file is opened and every layer checked once
 * (shapes chain, dtypes usable), as on the cpu backend. Per instance, on its
 * device (instances.devices, else device 0): a stream with two timing
 * events, the weights uploaded in the dtype of the file (F16/BF16 stay
 * halves), device buffers for input, output and two activations of
 * max_batch_size rows, and pinned host buffers that replace the worker's
 * gather/scatter buffers, all allocated at load: nothing is allocated per
 * batch. A batch is copy in, layers, copy out, all asynchronous on the
 * instance's stream; the worker then waits on the stop event, and the time
 * between the events (copies included) is the batch's execution time. Out
 * of device memory at load fails that model with the reason; others serve.
 * The mapped weight file stays open while the model is loaded (its pages
 * are the kernel's to evict).
 *
 * An encoder folder (MODEL_KIND_ENCODER) runs bert_cuda.h instead, one per
 * instance on its device, its dense layers in BF16 on the tensor cores. */
#include "backends/backend_impl.h"
#include "backends/bert_cuda.h"
#include "backends/bert_weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kernels/cuda_rt.h"
#include "kernels/dense.h"
#include "kernels/kernels.h"
#include "backends/safetensors.h"
#include "kernels/softmax.h"

struct cuda_model {
    struct safetensors *st;
    const struct st_tensor *w[MODEL_MAX_LAYERS], *b[MODEL_MAX_LAYERS];
    int64_t width[MODEL_MAX_LAYERS];   /* output elements per row of each layer */
    int64_t max_width;
};

struct cuda_instance {
    int device;
    struct cuda_stream *stream;
    struct bert_cuda *enc;        /* MODEL_KIND_ENCODER */
    struct dense_cuda *dense[MODEL_MAX_LAYERS];
    float *d_in, *d_out, *d_act[2];
};

static void cuda_model_free(struct cuda_model *cm)
{
    if (!cm)
        return;
    safetensors_close(cm->st);
    free(cm);
}

/* Tokens an encoder instance computes at once (a batch with more runs in
 * parts): a full batch of the longest sequences, bounded. */
static int cuda_encoder_tokens(const struct model_config *c)
{
    int64_t t = (int64_t)c->batching.max_batch_size * c->encoder.max_seq_length;
    return t > 16384 ? 16384 : (int)t;
}

/* An encoder: its tensors checked once here; each instance uploads its own. */
static int cuda_encoder_check(struct model *m, struct cold_start *cs, struct error *err)
{
    int64_t t0 = now_ns();
    struct bert_tensors t;
    int rc = bert_tensors_open(m->cfg.dir, &m->cfg.encoder, &t, err);
    if (rc)
        return rc;
    bert_tensors_close(&t);
    cs->read_s = (double)(now_ns() - t0) / 1e9;
    m->shared = calloc(1, sizeof(struct cuda_model));   /* nothing shared; non-NULL: loaded */
    m->shared_bytes = 0;
    return m->shared ? 0 : error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
}

static int cuda_model_load(struct model *m, struct cold_start *cs, struct error *err)
{
    if (m->cfg.kind == MODEL_KIND_ENCODER)
        return cuda_encoder_check(m, cs, err);
    const struct model_config *c = &m->cfg;
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", c->dir);
    int64_t t0 = now_ns();
    struct cuda_model *cm = calloc(1, sizeof *cm);
    if (!cm)
        return error_set(err, BG_ENOMEM, "%s: out of memory", c->name);
    int rc = safetensors_open(path, &cm->st, err);
    if (rc) {
        free(cm);
        return rc;
    }
    int64_t width = c->input.row_elems;
    cm->max_width = width;
    for (int i = 0; i < c->nlayers; i++) {
        const struct model_layer *ly = &c->layers[i];
        if (ly->type == MODEL_LAYER_DENSE) {
            struct error e = {0};
            if ((rc = safetensors_weight(cm->st, ly->weight, &cm->w[i], &e))) {
                rc = error_set(err, BG_ECONFIG, "%s: layers[%d].weight: %s", c->config_path, i,
                               e.msg);
                goto fail;
            }
            const struct st_tensor *w = cm->w[i];
            if (w->ndim != 2 || w->shape[1] != width) {
                rc = error_set(err, BG_ECONFIG,
                               "%s: layers[%d]: weight \"%s\" must be [out, %lld] to chain with "
                               "the previous layer (shapes do not chain)", c->config_path, i,
                               ly->weight, (long long)width);
                goto fail;
            }
            if (ly->bias[0]) {
                if ((rc = safetensors_weight(cm->st, ly->bias, &cm->b[i], &e))) {
                    rc = error_set(err, BG_ECONFIG, "%s: layers[%d].bias: %s", c->config_path, i,
                                   e.msg);
                    goto fail;
                }
                if (cm->b[i]->ndim != 1 || cm->b[i]->nelem != w->shape[0]) {
                    rc = error_set(err, BG_ECONFIG, "%s: layers[%d].bias: \"%s\" must be [%lld]",
                                   c->config_path, i, ly->bias, (long long)w->shape[0]);
                    goto fail;
                }
            }
            width = w->shape[0];
        }
        cm->width[i] = width;
        if (width > cm->max_width)
            cm->max_width = width;
    }
    if (width != c->output.row_elems) {
        rc = error_set(err, BG_ECONFIG,
                       "%s: the last layer gives %lld elements per row but outputs[0].shape holds "
                       "%lld", c->config_path, (long long)width, (long long)c->output.row_elems);
        goto fail;
    }
    m->shared = cm;
    m->shared_bytes = 0;   /* device memory is per instance */
    cs->read_s = (double)(now_ns() - t0) / 1e9;
    return 0;
fail:
    cuda_model_free(cm);
    return rc;
}

static void cuda_model_unload(struct model *m)
{
    cuda_model_free(m->shared);
    m->shared = NULL;
}

static void cuda_instance_free(struct instance *in)
{
    struct cuda_instance *ci = in->state;
    if (!ci)
        return;
    const struct model *m = in->model;
    char msg[256];
    cuda_rt_set_device(ci->device, msg, sizeof msg);
    for (int i = 0; i < m->cfg.nlayers; i++)
        dense_cuda_free(ci->dense[i]);
    bert_cuda_free(ci->enc);
    cuda_rt_free(ci->d_in);
    cuda_rt_free(ci->d_out);
    cuda_rt_free(ci->d_act[0]);
    cuda_rt_free(ci->d_act[1]);
    cuda_rt_stream_destroy(ci->stream);
    free(ci);
    in->state = NULL;
}

static int cuda_instance_load(struct instance *in, struct error *err)
{
    struct model *m = in->model;
    const struct model_config *c = &m->cfg;
    const struct cuda_model *cm = m->shared;
    char msg[512];
    struct cuda_instance *ci = calloc(1, sizeof *ci);
    if (!ci)
        return error_set(err, BG_ENOMEM, "%s: out of memory", c->name);
    ci->device = in->device >= 0 ? in->device : 0;
    in->state = ci;
    int64_t t0 = now_ns();
    size_t free_b = 0, total_b = 0;
    if (cuda_rt_set_device(ci->device, msg, sizeof msg) < 0 ||
        cuda_rt_mem_info(&free_b, &total_b, msg, sizeof msg) < 0) {
        cuda_instance_free(in);
        return error_set(err, BG_EBACKEND, "model %s, instance %d: device %d: %s", c->name,
                         in->index, ci->device, msg);
    }
    int64_t t1 = now_ns();
    m->cold.context_s += (double)(t1 - t0) / 1e9;
    if (c->kind == MODEL_KIND_ENCODER) {
        int rc = cuda_rt_stream_create(&ci->stream, msg, sizeof msg) < 0
                     ? error_set(err, BG_EBACKEND, "%s", msg)
                     : bert_cuda_load(c->dir, &c->encoder, DTYPE_BF16, cuda_encoder_tokens(c),
                                      c->batching.max_batch_size, &ci->enc, err);
        if (rc) {
            cuda_instance_free(in);
            return rc;
        }
        in->memory_bytes = bert_cuda_bytes(ci->enc);
        m->cold.prepare_s += (double)(now_ns() - t1) / 1e9;
        return 0;
    }
    size_t rows = (size_t)c->batching.max_batch_size;
    size_t in_b = rows * (size_t)c->input.row_elems * sizeof(float);
    size_t out_b = rows * (size_t)c->output.row_elems * sizeof(float);
    size_t act_b = rows * (size_t)cm->max_width * sizeof(float);
    if (cuda_rt_stream_create(&ci->stream, msg, sizeof msg) < 0 ||
        !(ci->d_in = cuda_rt_malloc(in_b, msg, sizeof msg)) ||
        !(ci->d_out = cuda_rt_malloc(out_b, msg, sizeof msg)) ||
        !(ci->d_act[0] = cuda_rt_malloc(act_b, msg, sizeof msg)) ||
        !(ci->d_act[1] = cuda_rt_malloc(act_b, msg, sizeof msg)))
        goto fail;
    in->memory_bytes = in_b + out_b + 2 * act_b;
    for (int i = 0; i < c->nlayers; i++) {
        if (c->layers[i].type != MODEL_LAYER_DENSE)
            continue;
        const struct st_tensor *w = cm->w[i], *b = cm->b[i];
        if (dense_cuda_prepare(w->data, w->dtype, b ? b->data : NULL, b ? b->dtype : DTYPE_F32,
                               (int)w->shape[0], (int)w->shape[1], c->layers[i].act,
                               &ci->dense[i], msg, sizeof msg) < 0)
            goto fail;
        in->memory_bytes += dense_cuda_bytes(ci->dense[i]);
    }
    m->cold.prepare_s += (double)(now_ns() - t1) / 1e9;
    return 0;
fail:
    cuda_instance_free(in);
    return error_set(err, BG_EBACKEND, "model %s, instance %d on cuda device %d (%.1f of %.1f GiB "
                     "free): %s", c->name, in->index, ci->device, (double)free_b / (1 << 30),
                     (double)total_b / (1 << 30), msg);
}

static void cuda_instance_unload(struct instance *in) { cuda_instance_free(in); }

static int cuda_encoder_run(struct instance *in, struct backend_io *b, struct error *err)
{
    struct cuda_instance *ci = in->state;
    char msg[512];
    if (cuda_rt_set_device(ci->device, msg, sizeof msg) < 0 ||
        cuda_rt_timer_start(ci->stream, msg, sizeof msg) < 0)
        return error_set(err, BG_EBACKEND, "cuda device %d: %s", ci->device, msg);
    int rc = bert_cuda_run(ci->enc, ci->stream, b->in, (size_t)in->model->cfg.input.row_elems,
                           b->rows, b->out, err);
    int64_t ns = cuda_rt_timer_stop(ci->stream, msg, sizeof msg);
    if (rc == 0 && ns < 0)
        return error_set(err, BG_EBACKEND, "cuda device %d: %s", ci->device, msg);
    b->device_ns = ns > 0 ? ns : 0;
    return rc;
}

static int cuda_run(struct instance *in, struct backend_io *b, struct error *err)
{
    if (in->model->cfg.kind == MODEL_KIND_ENCODER)
        return cuda_encoder_run(in, b, err);
    const struct model_config *c = &in->model->cfg;
    struct cuda_instance *ci = in->state;
    char msg[512];
    void *s = cuda_rt_stream_handle(ci->stream);
    size_t in_b = (size_t)b->rows * (size_t)c->input.row_elems * sizeof(float);
    size_t out_b = (size_t)b->rows * (size_t)c->output.row_elems * sizeof(float);
    const float *x = ci->d_in;
    int64_t width = c->input.row_elems;
    if (cuda_rt_set_device(ci->device, msg, sizeof msg) < 0 ||
        cuda_rt_timer_start(ci->stream, msg, sizeof msg) < 0 ||
        cuda_rt_upload_async(ci->d_in, b->in, in_b, ci->stream, msg, sizeof msg) < 0)
        goto fail;
    for (int i = 0; i < c->nlayers; i++) {
        float *y = i == c->nlayers - 1 ? ci->d_out : ci->d_act[i & 1];
        int rc = c->layers[i].type == MODEL_LAYER_DENSE
                     ? dense_cuda_run(ci->dense[i], x, b->rows, y, s, msg, sizeof msg)
                     : softmax_cuda_rows(x, y, b->rows, (int)width, s, msg, sizeof msg);
        if (rc < 0)
            goto fail;
        x = y;
        width = ((const struct cuda_model *)in->model->shared)->width[i];
    }
    if (cuda_rt_download_async(b->out, ci->d_out, out_b, ci->stream, msg, sizeof msg) < 0)
        goto fail;
    int64_t ns = cuda_rt_timer_stop(ci->stream, msg, sizeof msg);
    if (ns < 0)
        goto fail;
    b->device_ns = ns;
    return 0;
fail:
    return error_set(err, BG_EBACKEND, "cuda device %d: %s", ci->device, msg);
}

/* Pinned staging: the worker gathers straight into memory the copy engine
 * reads, so the upload is one DMA with no bounce through pageable memory. */
static void *cuda_host_alloc(struct instance *in, size_t bytes, char *msg, size_t cap)
{
    (void)in;
    return cuda_rt_host_alloc(bytes, msg, cap);
}

static void cuda_host_free(struct instance *in, void *p)
{
    (void)in;
    cuda_rt_host_free(p);
}

static int cuda_available(char *why, size_t cap) { return kernels_cuda_devices(why, cap) > 0; }

const struct backend_i backend_cuda = {
    .name = "cuda",
    .kind = BACKEND_COMPUTE,
    .device_kind = BACKEND_DEVICE_GPU,
    .encoders = true,
    .available = cuda_available,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .model_load = cuda_model_load,
    .model_unload = cuda_model_unload,
    .instance_load = cuda_instance_load,
    .run = cuda_run,
    .instance_unload = cuda_instance_unload,
    .release_device = cuda_rt_device_reset,
};
