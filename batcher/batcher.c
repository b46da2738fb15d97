/* batcher.c - see batcher.h. One mutex per model guards the queue; the
 * policy decides under it in O(max_batch_size). Workers wait on one
 * condition variable with a deadline from the policy. */
#include "batcher.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "policy.h"

struct batcher {
    pthread_mutex_t lock;
    pthread_cond_t cond;              /* CLOCK_MONOTONIC */
    char name[MODEL_NAME_MAX];
    struct model_batching cfg;
    struct policy_config pcfg;
    struct infer_item *head, *tail;
    int n;
    bool closed;
    struct policy_request *view;      /* scratch: the queue's head for the policy */
    int view_cap;
};

struct batcher *batcher_new(const char *model_name, const struct model_batching *cfg)
{
    struct batcher *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->view_cap = cfg->max_batch_size + 1;
    b->view = calloc((size_t)b->view_cap, sizeof *b->view);
    if (!b->view) {
        free(b);
        return NULL;
    }
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cond, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(b->name, sizeof b->name, "%s", model_name);
    b->cfg = *cfg;
    b->pcfg.max_batch_size = b->cfg.max_batch_size;
    b->pcfg.preferred = b->cfg.preferred;
    b->pcfg.npreferred = b->cfg.npreferred;
    b->pcfg.max_queue_delay_ns = b->cfg.max_queue_delay_us * 1000;
    return b;
}

void batcher_free(struct batcher *b)
{
    if (!b)
        return;
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
    free(b->view);
    free(b);
}

static void queue_unlink(struct batcher *b, struct infer_item *it)
{
    if (it->prev)
        it->prev->next = it->next;
    else
        b->head = it->next;
    if (it->next)
        it->next->prev = it->prev;
    else
        b->tail = it->prev;
    it->prev = it->next = NULL;
    it->queued = false;
    b->n--;
}

int batcher_submit(struct batcher *b, struct infer_item *it, struct error *err)
{
    if (it->rows < 1 || it->rows > b->cfg.max_batch_size)
        return error_set(err, BG_EINVAL, "a request may carry 1 to %d rows for model %s (got %d)",
                         b->cfg.max_batch_size, b->name, it->rows);
    pthread_mutex_lock(&b->lock);
    if (b->closed) {
        pthread_mutex_unlock(&b->lock);
        return error_set(err, BG_ESHUTDOWN, "model %s is shutting down", b->name);
    }
    if (b->n >= b->cfg.max_queue_size) {
        pthread_mutex_unlock(&b->lock);
        return error_set(err, BG_EQUEUEFULL,
                         "model %s: queue full (%d requests waiting, batching.max_queue_size)",
                         b->name, b->cfg.max_queue_size);
    }
    it->next = NULL;
    it->prev = b->tail;
    if (b->tail)
        b->tail->next = it;
    else
        b->head = it;
    b->tail = it;
    it->queued = true;
    b->n++;
    /* Every waiting worker re-decides: with several instances, any may take it. */
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    return 0;
}

void batcher_cancel(struct batcher *b, struct infer_item *it)
{
    atomic_store(&it->cancelled, true);
    pthread_mutex_lock(&b->lock);
    bool was_queued = it->queued;
    if (was_queued)
        queue_unlink(b, it);
    pthread_mutex_unlock(&b->lock);
    if (was_queued) {
        it->status = BG_ECANCELLED;
        snprintf(it->error, sizeof it->error, "cancelled: the client went away");
        it->complete(it);
    }
}

int batcher_next(struct batcher *b, struct batch *out)
{
    pthread_mutex_lock(&b->lock);
    for (;;) {
        if (b->closed) {
            pthread_mutex_unlock(&b->lock);
            return -1;
        }
        int n = 0;
        for (struct infer_item *it = b->head; it && n < b->view_cap; it = it->next) {
            b->view[n].rows = it->rows;
            b->view[n].arrival_ns = it->t_arrival_ns;
            n++;
        }
        int64_t now = now_ns();
        struct policy_decision d;
        policy_decide(&b->pcfg, b->view, n, now, &d);
        if (d.take > 0) {
            out->head = b->head;
            out->nitems = d.take;
            out->rows = d.rows;
            struct infer_item *last = b->head;
            for (int i = 1; i < d.take; i++)
                last = last->next;
            b->head = last->next;
            if (b->head)
                b->head->prev = NULL;
            else
                b->tail = NULL;
            last->next = NULL;
            b->n -= d.take;
            for (struct infer_item *it = out->head; it; it = it->next) {
                it->queued = false;
                it->t_dequeue_ns = now;
            }
            if (b->n > 0)
                pthread_cond_signal(&b->cond);   /* another idle worker may form the next */
            pthread_mutex_unlock(&b->lock);
            return 0;
        }
        if (d.wake_ns == POLICY_NEVER) {
            pthread_cond_wait(&b->cond, &b->lock);
        } else {
            struct timespec ts = {(time_t)(d.wake_ns / 1000000000), (long)(d.wake_ns % 1000000000)};
            pthread_cond_timedwait(&b->cond, &b->lock, &ts);
        }
    }
}

void batcher_close(struct batcher *b)
{
    pthread_mutex_lock(&b->lock);
    b->closed = true;
    struct infer_item *it = b->head;
    b->head = b->tail = NULL;
    b->n = 0;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
    while (it) {
        struct infer_item *next = it->next;
        it->queued = false;
        it->prev = it->next = NULL;
        it->status = BG_ESHUTDOWN;
        snprintf(it->error, sizeof it->error, "the server is shutting down");
        it->complete(it);
        it = next;
    }
}

int batcher_depth(struct batcher *b)
{
    pthread_mutex_lock(&b->lock);
    int n = b->n;
    pthread_mutex_unlock(&b->lock);
    return n;
}

static int source_next(void *ctx, struct batch *out) { return batcher_next(ctx, out); }

struct batch_source batcher_source(struct batcher *b)
{
    return (struct batch_source){.next = source_next, .ctx = b};
}
