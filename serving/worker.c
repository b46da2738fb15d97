/* worker.c - see worker.h. */
#include "serving/worker.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backends/backend.h"
#include "batcher/batcher.h"
#include "common/clock.h"
#include "common/log.h"
#include "serving/batchrun.h"
#include "serving/devsched.h"
#include "serving/serving.h"
#include "serving/watchdog.h"

struct worker {
    struct workers *ws;
    struct instance *in;
    struct worker_place place;
    pthread_t thread;
    bool running;
};

struct workers {
    struct served_model *sm;
    struct watchdog *wd;              /* NULL without batching.batch_timeout_ms */
    bool stranded;
    int n;
    struct worker w[];
};

/* What the device scheduler sees of a batch: offline only when every row
 * is a job line (one online row makes the whole batch online work), its
 * start-by, and the tenant it was cut for (its first request's: the queue
 * cuts from the most owed tenant first). */
static struct devsched_ask worker_batch_ask(struct worker *w, const struct batch *b)
{
    struct devsched_ask a = {.cls = batch_offline_rows(b) >= b->rows ? DEVSCHED_OFFLINE
                                                                     : DEVSCHED_ONLINE,
                             .tenant = b->head ? b->head->tenant : 0};
    a.start_by = batcher_start_by(w->ws->sm->batcher, w->in->index, b);
    return a;
}

/* Device scheduling (docs/SCHEDULING.md): after a batch the worker gives
 * its slot back, and when its next batch is due at once it asks for a slot
 * for it in the same step, so it competes for the slot it frees (a worker
 * that went back to batcher_next first would look idle for that instant,
 * and the slot would always go to the other models in turn). Returns 1
 * with *next taken (and a slot held), 0 with the slot given back, -1 with
 * the slot given back and the batcher closed. */
static int worker_sched_next(struct worker *w, int64_t exec_ns, struct batch *next)
{
    int64_t wake;
    struct batcher *q = w->ws->sm->batcher;
    int rc = batcher_try_next(q, w->in->index, next, &wake);
    if (rc == 1) {
        struct devsched_ask a = worker_batch_ask(w, next);
        devsched_release_acquire(w->place.dev, w->place.member, exec_ns, &a);
    } else
        devsched_release(w->place.dev, w->place.member, exec_ns);
    return rc;
}

/* The watchdog gave up on instance i's batch: its device slot goes back
 * now, for other models' batches, rather than when the call returns (never,
 * for a call truly hung); the worker asks again for its next batch. */
static void worker_abandoned(void *arg, int instance, int64_t held_ns)
{
    struct workers *ws = arg;
    struct worker *w = &ws->w[instance];
    if (w->place.dev)
        devsched_release(w->place.dev, w->place.member, held_ns);
}

/* Runs one batch on the instance and ends it; its execution time.
 * *abandoned: the watchdog gave up on it (its slot is given back). */
static int64_t worker_run_batch(struct worker *w, struct batch *b, bool *abandoned)
{
    *abandoned = false;
    struct instance *in = w->in;
    const struct model_config *c = &in->model->cfg;
    batchrun_gather(b, in->in, (size_t)c->input.row_elems);
    struct backend_io io = {.in = in->in, .out = in->out, .rows = b->rows};
    /* Before the watchdog has the items: once it does, it may answer them
     * (and they are not ours to read). */
    modelstats_run_begin(w->ws->sm->stats, in->index, b);
    /* The tenants' parts, for the charge of a batch the watchdog may
     * answer (its items are not ours to read then). */
    uint32_t parts[2][WORK_TENANTS_MAX];
    bool keep_parts = w->ws->wd && w->place.shares;
    if (keep_parts)
        batch_parts(b, parts);
    if (w->ws->wd)
        watchdog_begin(w->ws->wd, in->index, b->head);
    struct error err = {0};
    int64_t t0 = now_ns();
    int rc = model_run(in, &io, &err);
    int64_t ns = io.device_ns > 0 ? io.device_ns : now_ns() - t0;
    if (w->ws->wd && watchdog_end(w->ws->wd, in->index)) {
        /* Answered 504 by the watchdog; not a latency sample either, but
         * the device was held all along. */
        b->head = NULL;
        int64_t held = modelstats_batch_end(w->ws->sm->stats, in->index, NULL, NULL,
                                            false, 0, ns, 0);
        /* Its tenants held the device all along: charged as a failed
         * batch's (they were not: a tenant whose requests hang the device
         * ranked as if it had used none of it). */
        if (keep_parts && held > 0)
            shares_charge_parts(w->place.shares, now_ns(), parts, held);
        *abandoned = true;
        return ns;
    }
    batchrun_end(w->ws->sm, in->index, NULL, w->place.shares, b, in->out, rc ? -rc : 0,
                 rc ? err.msg : NULL, ns, ns, false);
    return ns;
}

static void *worker_main(void *p)
{
    struct worker *w = p;
    struct batcher *q = w->ws->sm->batcher;
    bool sched = w->place.dev != NULL;
    struct batch next = {0};
    bool have = false;   /* `next` was taken, and its slot acquired, after the last batch */
    for (;;) {
        struct batch b = {0};
        if (have) {
            b = next;
            have = false;
        } else {
            if (batcher_next(q, w->in->index, &b) < 0)
                break;
            if (sched) {
                struct devsched_ask a = worker_batch_ask(w, &b);
                devsched_acquire(w->place.dev, w->place.member, &a);
            }
        }
        bool abandoned;
        int64_t ns = worker_run_batch(w, &b, &abandoned);
        if (sched && !abandoned) {
            memset(&next, 0, sizeof next);
            int got = worker_sched_next(w, ns, &next);
            if (got < 0)
                break;
            have = got == 1;
        }
    }
    return NULL;
}

int workers_start(struct served_model *sm, const struct worker_place *place,
                  struct workers **out, struct error *err)
{
    struct model *m = &sm->model;
    struct workers *ws = calloc(1, sizeof *ws + (size_t)m->ninstances * sizeof ws->w[0]);
    *out = ws;
    if (!ws)
        return error_set(err, BG_ENOMEM, "model %s: out of memory for workers", m->cfg.name);
    ws->sm = sm;
    ws->n = m->ninstances;
    if (m->cfg.batching.batch_timeout_ms > 0 &&
        !(ws->wd = watchdog_new(m->cfg.name, m->ninstances, m->cfg.batching.batch_timeout_ms,
                                worker_abandoned, ws, err)))
        return -err->code;
    for (int i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        w->ws = ws;
        w->in = &m->instances[i];
        w->place = place[i];
        int rc = pthread_create(&w->thread, NULL, worker_main, w);
        if (rc)
            return error_set(err, BG_EINTERNAL, "model %s: cannot start worker %d: %s",
                             m->cfg.name, i, strerror(rc));
        w->running = true;
        char name[32];
        snprintf(name, sizeof name, "bg-w-%.9s", m->cfg.name);
        name[15] = '\0';
        pthread_setname_np(w->thread, name);
    }
    return 0;
}

/* How long a stop waits for a worker stuck in an abandoned call. */
#define STRANDED_WAIT_S 2

void workers_join(struct workers *ws)
{
    if (!ws)
        return;
    for (int i = 0; i < ws->n; i++) {
        struct worker *w = &ws->w[i];
        if (!w->running)
            continue;
        if (!ws->wd) {
            pthread_join(w->thread, NULL);   /* nothing bounds a call: batch_timeout_ms does */
            w->running = false;
            continue;
        }
        /* A call in progress may yet be abandoned (past batch_timeout_ms):
         * looked at again every 50 ms, not once. Looked at once, a batch
         * hung at the stop held it until the call returned (15 s), not
         * batch_timeout_ms and 2 s. */
        bool joined = false;
        while (!joined && !watchdog_abandoned(ws->wd, i)) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            joined = pthread_timedjoin_np(w->thread, NULL, &ts) == 0;
        }
        if (!joined) {
            /* Its call may never return: wait a little, then leave it (and
             * the memory it may still touch) to the process exit. */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += STRANDED_WAIT_S;
            if (pthread_timedjoin_np(w->thread, NULL, &ts) != 0) {
                log_error("model %s: instance %d is still inside an abandoned batch; leaving it",
                          ws->sm->model.cfg.name, i);
                pthread_detach(w->thread);
                ws->stranded = true;
            }
        }
        w->running = false;
    }
}

bool workers_stranded(const struct workers *ws) { return ws && ws->stranded; }

void workers_free(struct workers *ws)
{
    if (!ws)
        return;
    watchdog_free(ws->wd, ws->stranded);
    if (!ws->stranded)
        free(ws);
}
