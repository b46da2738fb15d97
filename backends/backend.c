/* backend.c - the backend registry and model load (with cold-start timing
 * and warmup). The instance workers that run loaded models: worker.c. */
#include "backends/backend.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "kernels/kernels.h"
#include "common/log.h"

const struct backend_ops *backend_find(enum model_backend b, char *why, size_t cap)
{
    char cuda[256];
    switch (b) {
    case MODEL_BACKEND_CPU:
        return &backend_cpu;
    case MODEL_BACKEND_SYNTHETIC:
        return &backend_synthetic;
    case MODEL_BACKEND_AUTO:
        /* cuda when a device is usable, else cpu; the log says which and why. */
        if (kernels_cuda_devices(cuda, sizeof cuda) > 0) {
            snprintf(why, cap, "auto: using cuda (%s)", cuda);
            return &backend_cuda;
        }
        snprintf(why, cap, "auto: using cpu (%s)", cuda);
        return &backend_cpu;
    case MODEL_BACKEND_CUDA:
        if (kernels_cuda_devices(cuda, sizeof cuda) > 0)
            return &backend_cuda;
        snprintf(why, cap, "backend \"cuda\" is not available: %s", cuda);
        return NULL;
    case MODEL_BACKEND_UPSTREAM:
        return &backend_upstream;
    default:
        snprintf(why, cap, "backend \"%s\" is not available in this build",
                 model_backend_name(b));
        return NULL;
    }
}

enum backend_device_kind model_device_kind(const struct model *m)
{
    return m->ops ? m->ops->device_kind : BACKEND_DEVICE_CPU;
}

void model_devices(const struct model *m, model_device_fn fn, void *arg)
{
    if (!m->ops)
        return;
    struct model_device d = {.kind = m->ops->device_kind};
    if (d.kind == BACKEND_DEVICE_UPSTREAM) {
        d.instance = -1;
        for (int i = 0; i < m->ntargets; i++) {
            snprintf(d.name, sizeof d.name, "%s%d", m->ops->name, i);
            d.target = m->targets[i];
            fn(&d, arg);
        }
        return;
    }
    for (int i = 0; i < m->ninstances && m->instances; i++) {
        int dev = m->instances[i].device;
        snprintf(d.name, sizeof d.name, "%s%d", m->ops->name, dev >= 0 ? dev : i);
        d.instance = i;
        fn(&d, arg);
    }
}

static double backend_seconds_since(int64_t t0) { return (double)(now_ns() - t0) / 1e9; }

/* Warmup sizes: 1, each preferred size, and max_batch_size. */
static int backend_warmup_sizes(const struct model_batching *b, int *sizes)
{
    int n = 0;
    sizes[n++] = 1;
    for (int i = 0; i < b->npreferred; i++)
        sizes[n++] = b->preferred[i];
    if (b->max_batch_size > 1)
        sizes[n++] = b->max_batch_size;
    return n;
}

/* Runs each warmup size twice per instance: the first pass pays for page
 * faults and cold caches, and every timing seeds the latency model (the
 * fit is robust to the slow first ones). */
static int backend_model_warmup(struct model *m, struct error *err)
{
    if (!m->ops->run)
        return 0;   /* the upstream's servers warm themselves */
    int sizes[MODEL_MAX_PREFERRED + 2];
    int n = backend_warmup_sizes(&m->cfg.batching, sizes);
    int64_t out_elems = m->cfg.output.row_elems;
    for (int i = 0; i < m->ninstances; i++) {
        struct instance *in = &m->instances[i];
        in->nwarm = 0;
        for (int s = 0; s < 2 * n; s++) {
            struct batch b = {.rows = sizes[s % n], .in = in->in, .out = in->out};
            /* A fixed, non-trivial input: zeros would hide a bias-only bug. */
            for (int64_t k = 0; k < (int64_t)b.rows * m->cfg.input.row_elems; k++)
                in->in[k] = (float)((k % 17) - 8) / 8.0f;
            int64_t t0 = now_ns();
            int rc = m->ops->run(in, &b, err);
            if (rc)
                return rc;
            in->warm_rows[in->nwarm] = b.rows;
            in->warm_ns[in->nwarm++] = now_ns() - t0;
            for (int64_t k = 0; k < (int64_t)b.rows * out_elems; k++)
                if (!isfinite(in->out[k]))
                    return error_set(err, BG_EBACKEND,
                                     "%s: warmup batch of %d rows produced a non-finite output "
                                     "(check the weights)", m->cfg.config_path, b.rows);
        }
    }
    return 0;
}

int model_load(struct model *m, struct error *err)
{
    int64_t t0 = now_ns();
    char why[512] = "";
    memset(&m->cold, 0, sizeof m->cold);
    m->ready = false;
    m->ops = backend_find(m->cfg.backend, why, sizeof why);
    if (!m->ops) {
        snprintf(m->reason, sizeof m->reason, "%s", why);
        return error_set(err, BG_ENOTREADY, "model %s: %s", m->cfg.name, why);
    }
    if (why[0])
        log_info("model %s: %s", m->cfg.name, why);
    int rc = m->ops->model_load(m, &m->cold, err);
    if (rc)
        goto fail;
    m->ninstances = m->cfg.instance_count;
    m->instances = calloc((size_t)m->ninstances, sizeof *m->instances);
    if (!m->instances) {
        rc = error_set(err, BG_ENOMEM, "model %s: out of memory", m->cfg.name);
        goto fail;
    }
    size_t rows = (size_t)m->cfg.batching.max_batch_size;
    for (int i = 0; i < m->ninstances; i++) {
        struct instance *in = &m->instances[i];
        in->model = m;
        in->index = i;
        in->device = m->cfg.ndevices ? m->cfg.devices[i % m->cfg.ndevices] : -1;
        in->in = malloc(rows * (size_t)m->cfg.input.row_elems * sizeof(float));
        in->out = malloc(rows * (size_t)m->cfg.output.row_elems * sizeof(float));
        if (!in->in || !in->out) {
            rc = error_set(err, BG_ENOMEM, "model %s: out of memory for batch buffers",
                           m->cfg.name);
            goto fail;
        }
        if ((rc = m->ops->instance_load(in, err)))
            goto fail;
    }
    int64_t tw = now_ns();
    if ((rc = backend_model_warmup(m, err)))
        goto fail;
    m->cold.warmup_s = backend_seconds_since(tw);
    m->cold.total_s = backend_seconds_since(t0);
    m->ready = true;
    m->reason[0] = '\0';
    return 0;
fail:
    snprintf(m->reason, sizeof m->reason, "%s", err->msg);
    model_unload(m);
    return rc;
}

void model_unload(struct model *m)
{
    if (m->wd_stranded)
        return;   /* a worker may still be inside the backend: its memory stays */
    if (m->instances) {
        for (int i = 0; i < m->ninstances; i++) {
            struct instance *in = &m->instances[i];
            if (m->ops && in->model)
                m->ops->instance_unload(in);
            free(in->in);
            free(in->out);
        }
        free(m->instances);
        m->instances = NULL;
    }
    m->ninstances = 0;
    if (m->ops && m->shared)
        m->ops->model_unload(m);
    m->shared = NULL;
    m->ready = false;
}

size_t model_memory_bytes(const struct model *m)
{
    size_t n = m->shared_bytes;
    for (int i = 0; i < m->ninstances; i++) {
        const struct instance *in = &m->instances[i];
        n += in->memory_bytes;
        n += (size_t)m->cfg.batching.max_batch_size *
             (size_t)(m->cfg.input.row_elems + m->cfg.output.row_elems) * sizeof(float);
    }
    return n;
}
