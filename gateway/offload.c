/* offload.c - see offload.h. */
#include "gateway/offload.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>


struct offload {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct offload_task *head, **tail;
    int queued, max_queued;
    bool stop, started;
};

/* IO thread: the task's answer. */
static void offload_deliver(struct mailbox_msg *msg)
{
    struct offload_task *t = (struct offload_task *)msg;
    t->done(t);
}

static void *offload_main(void *arg)
{
    struct offload *o = arg;
    pthread_mutex_lock(&o->mu);
    for (;;) {
        while (!o->head && !o->stop)
            pthread_cond_wait(&o->cv, &o->mu);
        struct offload_task *t = o->head;
        if (!t)
            break;   /* stopped, and nothing is left */
        o->head = t->next;
        if (!o->head)
            o->tail = &o->head;
        o->queued--;
        pthread_mutex_unlock(&o->mu);
        t->run(t);
        mailbox_post(t->mb, &t->msg);
        pthread_mutex_lock(&o->mu);
    }
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

struct offload *offload_start(int max_queued, struct error *err)
{
    struct offload *o = calloc(1, sizeof *o);
    if (!o) {
        error_set(err, BG_ENOMEM, "out of memory for the offload thread");
        return NULL;
    }
    pthread_mutex_init(&o->mu, NULL);
    pthread_cond_init(&o->cv, NULL);
    o->tail = &o->head;
    o->max_queued = max_queued > 0 ? max_queued : 1;
    int rc = pthread_create(&o->thread, NULL, offload_main, o);
    if (rc) {
        error_set(err, BG_EINTERNAL, "cannot start the offload thread: %s", strerror(rc));
        offload_free(o);
        return NULL;
    }
    o->started = true;
    return o;
}

int offload_submit(struct offload *o, struct http_request *req, struct offload_task *t)
{
    t->req = req;
    t->mb = http_request_mailbox(req);
    t->msg.fn = offload_deliver;
    t->next = NULL;
    pthread_mutex_lock(&o->mu);
    bool take = !o->stop && o->queued < o->max_queued;
    if (take) {
        *o->tail = t;
        o->tail = &t->next;
        o->queued++;
        pthread_cond_signal(&o->cv);
    }
    pthread_mutex_unlock(&o->mu);
    if (!take)
        http_respond_error(req, 503, "Retry-After: 1\r\n", "the server is answering %d such "
                           "requests already (reads of the state database, one at a time): "
                           "ask again in a moment", o->max_queued);
    return take ? 0 : -1;
}

void offload_stop(struct offload *o)
{
    if (!o || !o->started)
        return;
    pthread_mutex_lock(&o->mu);
    o->stop = true;
    pthread_cond_signal(&o->cv);
    pthread_mutex_unlock(&o->mu);
    pthread_join(o->thread, NULL);
    o->started = false;
}

void offload_free(struct offload *o)
{
    if (!o)
        return;
    offload_stop(o);
    pthread_cond_destroy(&o->cv);
    pthread_mutex_destroy(&o->mu);
    free(o);
}
