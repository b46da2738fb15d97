/* watchdog.c - see watchdog.h. */
#include "serving/watchdog.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "backends/model.h"

struct watchdog_slot {
    struct infer_item *items;         /* NULL: not running a batch */
    int64_t started, deadline;
    bool abandoned;                   /* the watchdog answered its requests */
};

struct watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool stop;
    /* When the thread will look again on its own: 0 awake, INT64_MAX when
     * it sleeps until signalled. A batch due after that needs no wake-up
     * (every batch of a model has the same limit): without this, every
     * batch woke the thread for nothing, ~7 us of CPU a request on small
     * batches (the zero_knob run). */
    int64_t wake_at;
    int64_t limit_ms;
    watchdog_abandon_fn on_abandon;
    void *arg;
    char model[MODEL_NAME_MAX];
    int n;
    struct watchdog_slot slot[];
};

/* Answers the abandoned batch of instance i (the lock is not held). */
static void watchdog_answer(struct watchdog *w, int i, struct infer_item *items)
{
    log_error("model %s: instance %d has run one batch for over batching.batch_timeout_ms "
              "(%lld ms); its requests get 504 and the instance is out until the call returns",
              w->model, i, (long long)w->limit_ms);
    char msg[200];   /* the answer says "model M: " before it */
    snprintf(msg, sizeof msg, "instance %d did not finish the batch within "
             "batching.batch_timeout_ms (%lld ms)", i, (long long)w->limit_ms);
    work_complete_list(items, BG_EDEADLINE, msg);
}

static void *watchdog_main(void *p)
{
    struct watchdog *w = p;
    pthread_mutex_lock(&w->mu);
    while (!w->stop) {
        int64_t now = now_ns(), next = 0;
        int late = -1;
        for (int i = 0; i < w->n; i++) {
            struct watchdog_slot *s = &w->slot[i];
            if (!s->items || s->abandoned)
                continue;
            if (s->deadline <= now) {
                late = i;
                break;
            }
            if (!next || s->deadline < next)
                next = s->deadline;
        }
        if (late >= 0) {
            w->slot[late].abandoned = true;
            struct infer_item *items = w->slot[late].items;
            int64_t held = now - w->slot[late].started;
            pthread_mutex_unlock(&w->mu);
            watchdog_answer(w, late, items);
            if (w->on_abandon)
                w->on_abandon(w->arg, late, held);
            pthread_mutex_lock(&w->mu);
            continue;
        }
        if (next) {
            struct timespec ts = {(time_t)(next / 1000000000), (long)(next % 1000000000)};
            w->wake_at = next;
            pthread_cond_timedwait(&w->cv, &w->mu, &ts);
        } else {
            w->wake_at = INT64_MAX;
            pthread_cond_wait(&w->cv, &w->mu);
        }
        w->wake_at = 0;
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

struct watchdog *watchdog_new(const char *model, int instances, int64_t limit_ms,
                              watchdog_abandon_fn on_abandon, void *arg, struct error *err)
{
    struct watchdog *w = calloc(1, sizeof *w + (size_t)instances * sizeof w->slot[0]);
    if (!w) {
        error_set(err, BG_ENOMEM, "model %s: out of memory for the batch watchdog", model);
        return NULL;
    }
    w->n = instances;
    w->limit_ms = limit_ms;
    w->on_abandon = on_abandon;
    w->arg = arg;
    snprintf(w->model, sizeof w->model, "%s", model);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);   /* deadlines are now_ns() instants */
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&w->thread, NULL, watchdog_main, w);
    if (rc) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        free(w);
        error_set(err, BG_EINTERNAL, "model %s: cannot start the batch watchdog: %s", model,
                  strerror(rc));
        return NULL;
    }
    pthread_setname_np(w->thread, "bg-watchdog");
    return w;
}

void watchdog_begin(struct watchdog *w, int i, struct infer_item *items)
{
    pthread_mutex_lock(&w->mu);
    struct watchdog_slot *s = &w->slot[i];
    s->items = items;
    s->started = now_ns();
    s->deadline = s->started + w->limit_ms * 1000000;
    s->abandoned = false;
    bool wake = s->deadline < w->wake_at;   /* it would sleep past this one */
    pthread_mutex_unlock(&w->mu);
    if (wake)
        pthread_cond_signal(&w->cv);
}

bool watchdog_end(struct watchdog *w, int i)
{
    pthread_mutex_lock(&w->mu);
    struct watchdog_slot *s = &w->slot[i];
    bool abandoned = s->abandoned;
    int64_t started = s->started;
    s->items = NULL;
    s->abandoned = false;
    pthread_mutex_unlock(&w->mu);
    if (abandoned)
        log_warn("model %s: instance %d is back after %.1f s; it serves again", w->model, i,
                 (double)(now_ns() - started) / 1e9);
    return abandoned;
}

bool watchdog_abandoned(struct watchdog *w, int i)
{
    pthread_mutex_lock(&w->mu);
    bool a = w->slot[i].abandoned;
    pthread_mutex_unlock(&w->mu);
    return a;
}

void watchdog_free(struct watchdog *w, bool keep)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
    if (keep)
        return;
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    free(w);
}
