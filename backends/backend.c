/* backend.c - the backend registry and model load (with cold-start timing
 * and warmup). The instance workers that run loaded models: worker.c. */
#include "backends/backend_impl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/encoder.h"
#include "backends/labels.h"
#include "common/clock.h"
#include "kernels/kernels.h"
#include "common/log.h"

/* The backends built in, in the order "auto" prefers them. */
static const struct backend_reg {
    enum model_backend id;
    const struct backend_i *impl;
} backend_registry[] = {
    {MODEL_BACKEND_CUDA, &backend_cuda},
    {MODEL_BACKEND_CPU, &backend_cpu},
    {MODEL_BACKEND_SYNTHETIC, &backend_synthetic},
    {MODEL_BACKEND_UPSTREAM, &backend_upstream},
    {MODEL_BACKEND_OPENAI, &backend_openai},
};
#define BACKEND_NREG (int)(sizeof backend_registry / sizeof backend_registry[0])

static int backend_usable(const struct backend_i *b, char *why, size_t cap)
{
    return !b->available || b->available(why, cap);
}

/* The backend for `id`, or NULL with the reason in why; for "auto" the
 * first usable of cuda and cpu, with why saying which and why. */
static const struct backend_i *backend_find(enum model_backend id, bool encoder, char *why,
                                            size_t cap)
{
    char reason[256] = "";
    if (id == MODEL_BACKEND_AUTO) {
        if (encoder && !backend_cuda.encoders) {
            snprintf(why, cap, "auto: using cpu (the cuda backend runs no encoder yet)");
            return &backend_cpu;
        }
        if (backend_usable(&backend_cuda, reason, sizeof reason)) {
            snprintf(why, cap, "auto: using cuda (%s)", reason);
            return &backend_cuda;
        }
        snprintf(why, cap, "auto: using cpu (%s)", reason);
        return &backend_cpu;
    }
    for (int i = 0; i < BACKEND_NREG; i++) {
        if (backend_registry[i].id != id)
            continue;
        const struct backend_i *b = backend_registry[i].impl;
        if (encoder && !b->encoders) {
            snprintf(why, cap, "backend \"%s\" runs no encoder model (yet): use \"cpu\" or "
                     "\"auto\"", b->name);
            return NULL;
        }
        if (backend_usable(b, reason, sizeof reason)) {
            why[0] = '\0';
            return b;
        }
        snprintf(why, cap, "backend \"%s\" is not available: %s", b->name, reason);
        return NULL;
    }
    snprintf(why, cap, "backend \"%s\" is not available in this build", model_backend_name_of(id));
    return NULL;
}

const char *model_backend_name(const struct model *m)
{
    if (m->backend)
        return m->backend->name;
    return m->planned ? m->planned : model_backend_name_of(m->cfg.backend);
}

const char *backend_auto_pick(bool encoder)
{
    char why[256];
    return backend_find(MODEL_BACKEND_AUTO, encoder, why, sizeof why)->name;
}

bool model_is_pool(const struct model *m)
{
    return m->backend ? m->backend->kind == BACKEND_POOL : m->cfg.kind == MODEL_KIND_POOL;
}

bool model_is_compute(const struct model *m)
{
    return m->backend && m->backend->kind == BACKEND_COMPUTE;
}

enum backend_device_kind model_device_kind(const struct model *m)
{
    return m->backend ? m->backend->device_kind : BACKEND_DEVICE_CPU;
}

int model_servers(const struct model *m, struct httpc_target *const **out)
{
    *out = NULL;
    return m->backend && m->backend->servers ? m->backend->servers(m, out) : 0;
}

void model_devices(const struct model *m, model_device_fn fn, void *arg)
{
    if (!m->backend)
        return;
    if (m->backend->devices) {
        m->backend->devices(m, fn, arg);
        return;
    }
    struct model_device d = {.kind = m->backend->device_kind};
    for (int i = 0; i < m->ninstances && m->instances; i++) {
        int dev = m->instances[i].device;
        snprintf(d.name, sizeof d.name, "%s%d", m->backend->name, dev >= 0 ? dev : i);
        d.instance = i;
        fn(&d, arg);
    }
}

/* ---- fault injection (tests only) ---- */

void model_fault_set(struct model *m, enum model_fault mode, int count, int ms)
{
    atomic_store(&m->fault_ms, ms);
    atomic_store(&m->fault_mode, (int)mode);
    atomic_store(&m->fault_count, count);
}

/* One batch's share of the planned faults; *ms for hang and slow. */
static enum model_fault backend_fault_take(struct model *m, int *ms)
{
    int n = atomic_load(&m->fault_count);
    while (n > 0)
        if (atomic_compare_exchange_weak(&m->fault_count, &n, n - 1)) {
            *ms = atomic_load(&m->fault_ms);
            return (enum model_fault)atomic_load(&m->fault_mode);
        }
    return MODEL_FAULT_NONE;
}

int model_run(struct instance *in, struct backend_io *io, struct error *err)
{
    int ms = 0;
    switch (backend_fault_take(in->model, &ms)) {
    case MODEL_FAULT_FAIL:
        return error_set(err, BG_EBACKEND, "injected failure (POST /debug/fault)");
    case MODEL_FAULT_HANG:
    case MODEL_FAULT_SLOW: {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
        break;
    }
    default:
        break;
    }
    io->device_ns = 0;
    return in->model->backend->run(in, io, err);
}

/* ---- loop backends ---- */

int model_loop_slots(const struct model *m)
{
    return m->backend && m->backend->loop_slots ? m->backend->loop_slots(m) : 0;
}

int model_loop_start(struct model *m, const struct backend_feed *feed, struct error *err)
{
    if (!m->backend || m->backend->kind != BACKEND_LOOP)
        return error_set(err, BG_EINTERNAL, "model %s: backend %s runs no loop", m->cfg.name,
                         model_backend_name(m));
    return m->backend->loop_start(m, feed, err);
}

void model_loop_stop(struct model *m)
{
    if (m->backend && m->backend->kind == BACKEND_LOOP)
        m->backend->loop_stop(m);
}

/* ---- host buffers ---- */

static void *backend_host_alloc(struct instance *in, size_t bytes, struct error *err)
{
    const struct backend_i *b = in->model->backend;
    char msg[256] = "out of memory";
    void *p = b->host_alloc ? b->host_alloc(in, bytes, msg, sizeof msg) : malloc(bytes);
    if (!p)
        error_set(err, BG_ENOMEM, "model %s, instance %d: batch buffers of %zu bytes: %s",
                  in->model->cfg.name, in->index, bytes, msg);
    return p;
}

static void backend_host_free(struct instance *in, void *p)
{
    const struct backend_i *b = in->model->backend;
    if (!p)
        return;
    if (b->host_free)
        b->host_free(in, p);
    else
        free(p);
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

/* The input of warmup batch `pass`: a fixed, non-trivial one (zeros would
 * hide a bias-only bug); for an encoder, valid text rows whose lengths
 * vary from pass to pass, so the latency model sees several token counts. */
static void backend_warm_input(const struct model *m, float *in, int rows, int pass)
{
    int64_t w = m->cfg.input.row_elems;
    if (m->cfg.kind == MODEL_KIND_ENCODER) {
        static const int lens[] = {8, 32, 128, 16, 64, 256};
        for (int r = 0; r < rows; r++)
            encoder_row_warm(m, in + r * w, lens[(pass + r) % 6]);
        return;
    }
    for (int64_t k = 0; k < (int64_t)rows * w; k++)
        in[k] = (float)((k % 17) - 8) / 8.0f;
}

/* Runs each warmup size twice per instance: the first pass pays for page
 * faults and cold caches, and every timing seeds the latency model (the
 * fit is robust to the slow first ones). With warm_light, none: the same
 * files answered a full warmup at an earlier load, whose timings the
 * caller seeds; a batch over 100 MB of weights costs what a third of the
 * load does. */
static int backend_model_warmup(struct model *m, struct error *err)
{
    if (m->backend->kind != BACKEND_COMPUTE)
        return 0;   /* the upstream's servers warm themselves */
    int sizes[MODEL_MAX_PREFERRED + 2];
    int n = backend_warmup_sizes(&m->cfg.batching, sizes);
    int64_t out_elems = m->cfg.output.row_elems;
    for (int i = 0; i < m->ninstances; i++) {
        struct instance *in = &m->instances[i];
        in->nwarm = 0;
        for (int s = 0; s < (m->warm_light ? 0 : 2 * n); s++) {
            struct backend_io b = {.rows = sizes[s % n], .in = in->in, .out = in->out};
            backend_warm_input(m, in->in, b.rows, s);
            int64_t t0 = now_ns();
            int rc = m->backend->run(in, &b, err);
            if (rc)
                return rc;
            in->warm_rows[in->nwarm] = b.rows;
            in->warm_tokens[in->nwarm] = b.rows;   /* one unit a row; an encoder's: its tokens */
            in->warm_tokens_sq[in->nwarm] = 0;
            if (m->cfg.kind == MODEL_KIND_ENCODER) {
                int longest;
                encoder_rows_cost(in->in, (size_t)m->cfg.input.row_elems, b.rows,
                                  &in->warm_tokens[in->nwarm], &in->warm_tokens_sq[in->nwarm],
                                  &longest);
            }
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

void model_keep(struct model *m)
{
    if (m->backend && m->backend->keep)
        m->backend->keep(m);
}

int backend_release_device(const char *label, char *msg, size_t cap)
{
    for (int i = 0; i < BACKEND_NREG; i++) {
        const struct backend_i *b = backend_registry[i].impl;
        size_t n = strlen(b->name);
        if (strncmp(label, b->name, n) != 0 || !label[n] ||
            strspn(label + n, "0123456789") != strlen(label + n))
            continue;
        return b->release_device ? b->release_device(atoi(label + n), msg, cap) : 0;
    }
    return 0;
}

/* The output's labels file, when its config names one. */
static int backend_labels_load(struct model *m, struct error *err)
{
    const struct model_tensor *t = &m->cfg.output;
    if (!t->labels[0])
        return 0;
    /* Resolved where the config was read; a config parsed on its own
     * (tools, tests) has its files in cfg.dir. */
    char path[4600];
    if (m->cfg.labels_path[0])
        snprintf(path, sizeof path, "%s", m->cfg.labels_path);
    else
        snprintf(path, sizeof path, "%.4096s/%s", m->cfg.dir, t->labels);
    struct error e = {0};
    int rc = labels_load(path, t->row_elems, &m->labels, &e);
    if (rc)
        return error_set(err, e.code, "model %s: outputs[0].labels: %s", m->cfg.name, e.msg);
    return 0;
}

int model_load(struct model *m, struct error *err)
{
    int64_t t0 = now_ns();
    char why[512] = "";
    memset(&m->cold, 0, sizeof m->cold);
    m->ready = false;
    m->backend = backend_find(m->cfg.backend, m->cfg.kind == MODEL_KIND_ENCODER, why, sizeof why);
    if (!m->backend) {
        snprintf(m->reason, sizeof m->reason, "%s", why);
        return error_set(err, BG_ENOTREADY, "model %s: %s", m->cfg.name, why);
    }
    if (why[0])
        log_info("model %s: %s", m->cfg.name, why);
    int rc = m->cfg.kind == MODEL_KIND_ENCODER ? encoder_tokenizer_load(m, err) : 0;
    if (rc == 0)
        rc = m->backend->model_load(m, &m->cold, err);
    if (rc == 0)   /* after the weights: a folder without them says so first */
        rc = backend_labels_load(m, err);
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
        if ((rc = m->backend->instance_load(in, err)))
            goto fail;
        if (m->backend->kind != BACKEND_COMPUTE)
            continue;   /* a loop backend's rows are in its feed's buffers */
        if (!(in->in = backend_host_alloc(in, rows * (size_t)m->cfg.input.row_elems * sizeof(float), err)) ||
            !(in->out = backend_host_alloc(in, rows * (size_t)m->cfg.output.row_elems * sizeof(float), err))) {
            rc = -err->code;
            goto fail;
        }
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
    if (m->instances) {
        for (int i = 0; i < m->ninstances; i++) {
            struct instance *in = &m->instances[i];
            if (!m->backend || !in->model)
                continue;
            backend_host_free(in, in->in);
            backend_host_free(in, in->out);
            in->in = in->out = NULL;
            m->backend->instance_unload(in);
        }
        free(m->instances);
        m->instances = NULL;
    }
    m->ninstances = 0;
    if (m->backend && m->shared)
        m->backend->model_unload(m);
    encoder_tokenizer_free(m);
    labels_free(m->labels);
    m->labels = NULL;
    m->shared = NULL;
    m->ready = false;
}

size_t model_instance_bytes(const struct model *m, int i)
{
    if (i < 0 || i >= m->ninstances)
        return 0;
    return m->instances[i].memory_bytes + (i == 0 ? m->shared_bytes : 0);
}

size_t model_memory_bytes(const struct model *m)
{
    size_t n = 0;
    for (int i = 0; i < m->ninstances; i++)
        n += model_instance_bytes(m, i);
    return n;
}
