/* backend.c - backend registry, model load (with cold-start timing and
 * warmup) and the instance worker loop shared by every backend. */
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

static double seconds_since(int64_t t0) { return (double)(now_ns() - t0) / 1e9; }

/* Warmup sizes: 1, each preferred size, and max_batch_size. */
static int warmup_sizes(const struct model_batching *b, int *sizes)
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
static int model_warmup(struct model *m, struct error *err)
{
    if (!m->ops->run)
        return 0;   /* the upstream's servers warm themselves */
    int sizes[MODEL_MAX_PREFERRED + 2];
    int n = warmup_sizes(&m->cfg.batching, sizes);
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
    if ((rc = model_warmup(m, err)))
        goto fail;
    m->cold.warmup_s = seconds_since(tw);
    m->cold.total_s = seconds_since(t0);
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

/* ---- workers ---- */

static void batch_gather(struct instance *in, struct batch *b)
{
    size_t in_row = (size_t)in->model->cfg.input.row_elems;
    float *dst = in->in;
    for (struct infer_item *it = b->head; it; it = it->next) {
        memcpy(dst, it->input, (size_t)it->rows * in_row * sizeof(float));
        dst += (size_t)it->rows * in_row;
    }
    b->in = in->in;
    b->out = in->out;
}

/* ---- fault injection (tests only) ---- */

void model_fault_set(struct model *m, enum model_fault mode, int count, int ms)
{
    atomic_store(&m->fault_ms, ms);
    atomic_store(&m->fault_mode, (int)mode);
    atomic_store(&m->fault_count, count);
}

/* One batch's share of the planned faults; *ms for hang and slow. */
static enum model_fault fault_take(struct model *m, int *ms)
{
    int n = atomic_load(&m->fault_count);
    while (n > 0)
        if (atomic_compare_exchange_weak(&m->fault_count, &n, n - 1)) {
            *ms = atomic_load(&m->fault_ms);
            return (enum model_fault)atomic_load(&m->fault_mode);
        }
    return MODEL_FAULT_NONE;
}

static int batch_run(struct instance *in, struct batch *b, struct error *err)
{
    int ms = 0;
    switch (fault_take(in->model, &ms)) {
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
    return in->model->ops->run(in, b, err);
}

/* Each item's status, or its output rows from the batch's output. */
static void batch_scatter(struct instance *in, struct batch *b, int rc, const struct error *err,
                          int64_t dt)
{
    size_t out_row = (size_t)in->model->cfg.output.row_elems;
    const float *src = in->out;
    for (struct infer_item *it = b->head; it; it = it->next) {
        it->t_compute_ns = dt;
        it->batch_rows = b->rows;
        if (rc) {
            it->status = -rc;
            snprintf(it->error, sizeof it->error, "%.190s", err->msg);
        } else {
            memcpy(it->output, src, (size_t)it->rows * out_row * sizeof(float));
        }
        src += (size_t)it->rows * out_row;
    }
}

int64_t worker_run_batch(struct instance *in, struct batch *b)
{
    batch_gather(in, b);
    struct error err = {0};
    int64_t t0 = now_ns();
    int rc = batch_run(in, b, &err);
    int64_t dt = now_ns() - t0;
    if (b->device_ns > 0)
        dt = b->device_ns;   /* the device's own clock, when the backend has one */
    batch_scatter(in, b, rc, &err, dt);
    return dt;
}

void worker_complete_batch(struct batch *b)
{
    struct infer_item *it = b->head, *next;
    for (; it; it = next) {
        next = it->next;   /* complete() may free it */
        it->complete(it);
    }
    b->head = NULL;
}

struct worker_arg {
    struct instance *in;
    struct batch_source src;
};

/* ---- the batch watchdog ----
 *
 * A backend call that never returns (a wedged driver, a deadlock in a
 * library) must not hold its requests forever. Each worker publishes the
 * batch it runs and when it is due; one watchdog thread per model answers
 * the requests of a batch past batching.batch_timeout_ms with 504 and marks
 * the batch abandoned. The instance is out meanwhile (its worker is stuck
 * in the call, so it takes no batch); when the call returns, the worker
 * drops the result, logs the recovery and serves again. Whoever holds
 * wd_mu first, the worker finishing or the watchdog abandoning, owns the
 * batch's requests: each is answered once. */

static void watch_begin(struct instance *in, struct batch *b)
{
    struct model *m = in->model;
    int64_t limit = m->cfg.batching.batch_timeout_ms;
    if (!m->wd_running)
        return;
    pthread_mutex_lock(&m->wd_mu);
    in->wd_items = b->head;
    in->wd_started = now_ns();
    in->wd_deadline = in->wd_started + limit * 1000000;
    in->wd_abandoned = false;
    pthread_cond_signal(&m->wd_cv);
    pthread_mutex_unlock(&m->wd_mu);
}

/* Returns true when the watchdog already answered the batch's requests. */
static bool watch_end(struct instance *in)
{
    struct model *m = in->model;
    if (!m->wd_running)
        return false;
    pthread_mutex_lock(&m->wd_mu);
    bool abandoned = in->wd_abandoned;
    in->wd_items = NULL;
    in->wd_abandoned = false;
    pthread_mutex_unlock(&m->wd_mu);
    if (abandoned)
        log_warn("model %s: instance %d is back after %.1f s; it serves again", m->cfg.name,
                 in->index, (double)(now_ns() - in->wd_started) / 1e9);
    return abandoned;
}

static void *watchdog_main(void *p)
{
    struct model *m = p;
    int64_t limit_ms = m->cfg.batching.batch_timeout_ms;
    pthread_mutex_lock(&m->wd_mu);
    while (!m->wd_stop) {
        int64_t now = now_ns(), next = 0;
        struct instance *late = NULL;
        for (int i = 0; i < m->ninstances; i++) {
            struct instance *in = &m->instances[i];
            if (!in->wd_items || in->wd_abandoned)
                continue;
            if (in->wd_deadline <= now) {
                late = in;
                break;
            }
            if (!next || in->wd_deadline < next)
                next = in->wd_deadline;
        }
        if (late) {
            late->wd_abandoned = true;
            struct batch b = {.head = late->wd_items};
            int index = late->index;
            pthread_mutex_unlock(&m->wd_mu);
            log_error("model %s: instance %d has run one batch for over batching.batch_timeout_ms "
                      "(%lld ms); its requests get 504 and the instance is out until the call "
                      "returns", m->cfg.name, index, (long long)limit_ms);
            for (struct infer_item *it = b.head; it; it = it->next) {
                it->status = BG_EDEADLINE;
                snprintf(it->error, sizeof it->error, "model %.64s: instance %d did not finish the "
                         "batch within batching.batch_timeout_ms (%lld ms)", m->cfg.name, index,
                         (long long)limit_ms);
            }
            worker_complete_batch(&b);
            pthread_mutex_lock(&m->wd_mu);
            continue;
        }
        if (next) {
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            int64_t wait = next - now, abs_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + wait;
            ts.tv_sec = (time_t)(abs_ns / 1000000000);
            ts.tv_nsec = (long)(abs_ns % 1000000000);
            pthread_cond_timedwait(&m->wd_cv, &m->wd_mu, &ts);
        } else {
            pthread_cond_wait(&m->wd_cv, &m->wd_mu);
        }
    }
    pthread_mutex_unlock(&m->wd_mu);
    return NULL;
}

static void *worker_main(void *p)
{
    struct worker_arg a = *(struct worker_arg *)p;
    free(p);
    for (;;) {
        struct batch b = {0};
        if (a.src.next(a.src.ctx, a.in->index, &b) < 0)
            break;
        int rows = b.rows;
        batch_gather(a.in, &b);
        watch_begin(a.in, &b);
        struct error err = {0};
        int64_t t0 = now_ns();
        int rc = batch_run(a.in, &b, &err);
        int64_t ns = b.device_ns > 0 ? b.device_ns : now_ns() - t0;
        if (watch_end(a.in))
            continue;   /* answered 504 by the watchdog; not a latency sample either */
        batch_scatter(a.in, &b, rc, &err, ns);
        /* Accounted before the answers leave: whoever reads the statistics
         * after getting an answer sees its batch counted. */
        if (a.src.done)
            a.src.done(a.src.ctx, a.in->index, rows, ns);
        worker_complete_batch(&b);
    }
    return NULL;
}

int model_workers_start(struct model *m, struct batch_source src, struct error *err)
{
    if (m->cfg.batching.batch_timeout_ms > 0) {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_mutex_init(&m->wd_mu, NULL);
        pthread_cond_init(&m->wd_cv, &ca);
        pthread_condattr_destroy(&ca);
        m->wd_stop = false;
        int rc = pthread_create(&m->wd_thread, NULL, watchdog_main, m);
        if (rc) {
            pthread_cond_destroy(&m->wd_cv);
            pthread_mutex_destroy(&m->wd_mu);
            return error_set(err, BG_EINTERNAL, "model %s: cannot start the batch watchdog: %s",
                             m->cfg.name, strerror(rc));
        }
        pthread_setname_np(m->wd_thread, "bg-watchdog");
        m->wd_running = true;
    }
    for (int i = 0; i < m->ninstances; i++) {
        struct instance *in = &m->instances[i];
        struct worker_arg *a = malloc(sizeof *a);
        if (!a)
            return error_set(err, BG_ENOMEM, "out of memory");
        a->in = in;
        a->src = src;
        int rc = pthread_create(&in->thread, NULL, worker_main, a);
        if (rc) {
            free(a);
            return error_set(err, BG_EINTERNAL, "model %s: cannot start worker %d: %s",
                             m->cfg.name, i, strerror(rc));
        }
        in->running = true;
        char name[32];
        snprintf(name, sizeof name, "bg-w-%.9s", m->cfg.name);
        name[15] = '\0';
        pthread_setname_np(in->thread, name);
    }
    return 0;
}

/* How long a stop waits for a worker stuck in an abandoned call. */
#define STRANDED_WAIT_S 2

void model_workers_join(struct model *m)
{
    for (int i = 0; i < m->ninstances; i++) {
        struct instance *in = &m->instances[i];
        if (!in->running)
            continue;
        bool stuck = false;
        if (m->wd_running) {
            pthread_mutex_lock(&m->wd_mu);
            stuck = in->wd_abandoned;
            pthread_mutex_unlock(&m->wd_mu);
        }
        if (stuck) {
            /* Its call may never return: wait a little, then leave it (and
             * the memory it may still touch) to the process exit. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += STRANDED_WAIT_S;
            if (pthread_timedjoin_np(in->thread, NULL, &ts) != 0) {
                log_error("model %s: instance %d is still inside an abandoned batch; leaving it",
                          m->cfg.name, i);
                pthread_detach(in->thread);
                m->wd_stranded = true;
            }
        } else {
            pthread_join(in->thread, NULL);
        }
        in->running = false;
    }
    if (m->wd_running) {
        pthread_mutex_lock(&m->wd_mu);
        m->wd_stop = true;
        pthread_cond_signal(&m->wd_cv);
        pthread_mutex_unlock(&m->wd_mu);
        pthread_join(m->wd_thread, NULL);
        m->wd_running = false;
        if (!m->wd_stranded) {
            pthread_cond_destroy(&m->wd_cv);
            pthread_mutex_destroy(&m->wd_mu);
        }
    }
}
