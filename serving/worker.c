/* worker.c - the instance worker loop shared by every compute backend: pull
 * a batch from the batch source, gather its rows, run the backend, scatter
 * the output rows, complete every request; and the batch watchdog that
 * answers a batch's requests when a backend call hangs. */
#include "backends/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

static void worker_gather(struct instance *in, struct batch *b)
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
static enum model_fault worker_fault_take(struct model *m, int *ms)
{
    int n = atomic_load(&m->fault_count);
    while (n > 0)
        if (atomic_compare_exchange_weak(&m->fault_count, &n, n - 1)) {
            *ms = atomic_load(&m->fault_ms);
            return (enum model_fault)atomic_load(&m->fault_mode);
        }
    return MODEL_FAULT_NONE;
}

static int worker_run(struct instance *in, struct batch *b, struct error *err)
{
    int ms = 0;
    switch (worker_fault_take(in->model, &ms)) {
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
static void worker_scatter(struct instance *in, struct batch *b, int rc, const struct error *err,
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

int batch_offline_rows(const struct batch *b)
{
    int n = 0;
    for (const struct infer_item *it = b->head; it; it = it->next)
        if (it->offline)
            n += it->rows;
    return n;
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

static void worker_watch_begin(struct instance *in, struct batch *b)
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
static bool worker_watch_end(struct instance *in)
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

static void *worker_watchdog_main(void *p)
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

/* Device scheduling (src.acquire set; docs/SCHEDULING.md): after a batch
 * the worker gives its slot back, and when its next batch is due at once it
 * asks for a slot for it in the same step, so it competes for the slot it
 * frees (a worker that went back to `next` first would look idle for that
 * instant, and the slot would always go to the other models in turn).
 * Returns 1 with *next taken (and a slot held), 0 with the slot given
 * back, -1 with the slot given back and the source closed. */
static int worker_sched_next(struct worker_arg *a, int64_t exec_ns, struct batch *next)
{
    int64_t wake;
    int rc = a->src.try_next ? a->src.try_next(a->src.ctx, a->in->index, next, &wake) : 0;
    a->src.release(a->src.ctx, a->in->index, exec_ns, rc == 1 ? next : NULL);
    return rc;
}

static void *worker_main(void *p)
{
    struct worker_arg a = *(struct worker_arg *)p;
    free(p);
    bool sched = a.src.acquire && a.src.release;
    struct batch nb = {0};
    bool have = false;   /* nb was taken, and its slot acquired, after the last batch */
    for (;;) {
        struct batch b = {0};
        if (have) {
            b = nb;
            have = false;
        } else {
            if (a.src.next(a.src.ctx, a.in->index, &b) < 0)
                break;
            if (sched)
                a.src.acquire(a.src.ctx, a.in->index, &b);
        }
        int rows = b.rows;
        worker_gather(a.in, &b);
        worker_watch_begin(a.in, &b);
        struct error err = {0};
        int64_t t0 = now_ns();
        int rc = worker_run(a.in, &b, &err);
        int64_t ns = b.device_ns > 0 ? b.device_ns : now_ns() - t0;
        if (worker_watch_end(a.in)) {
            /* Answered 504 by the watchdog; not a latency sample either. */
            if (sched)
                a.src.release(a.src.ctx, a.in->index, ns, NULL);
            continue;
        }
        worker_scatter(a.in, &b, rc, &err, ns);
        /* Accounted before the answers leave: whoever reads the statistics
         * after getting an answer sees its batch counted. */
        if (a.src.done)
            a.src.done(a.src.ctx, a.in->index, rows, batch_offline_rows(&b), ns);
        worker_complete_batch(&b);
        if (sched) {
            memset(&nb, 0, sizeof nb);
            int got = worker_sched_next(&a, ns, &nb);
            if (got < 0)
                break;
            have = got == 1;
        }
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
        int rc = pthread_create(&m->wd_thread, NULL, worker_watchdog_main, m);
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
