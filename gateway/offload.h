/* offload.h - a request's work that would hold its IO thread for long (a
 * state database query over a year of usage: ~110 ms, during which every
 * other connection of that thread waited; GET /dashboard/usage needs no
 * key), run on the gateway's one offload thread and answered on the
 * request's IO thread through its mailbox. One thread: the database's read
 * connection is one, under a mutex, so more would only queue there.
 *
 * A task is embedded first in the caller's own struct:
 *     struct my_call { struct offload_task task; ... };
 * run() reads and computes on the offload thread (it must not touch the
 * request); done() answers the request on its IO thread and frees the
 * struct. */
#ifndef BG_OFFLOAD_H
#define BG_OFFLOAD_H

#include "common/error.h"
#include "http/http.h"

struct offload;

struct offload_task {
    struct mailbox_msg msg;           /* first: the mailbox hands back &msg */
    struct offload_task *next;        /* in the queue */
    struct http_request *req;
    struct mailbox *mb;
    void (*run)(struct offload_task *t);
    void (*done)(struct offload_task *t);
};

/* At most max_queued tasks wait at once. NULL and err when the thread
 * cannot start. */
struct offload *offload_start(int max_queued, struct error *err);
/* Queues t for req (t->run and t->done set): 0. -1 after answering req
 * 503 with Retry-After (the queue is full, or the offload stopped): the
 * caller frees t. */
int offload_submit(struct offload *o, struct http_request *req, struct offload_task *t);
/* Runs what is queued, answers it, and stops the thread: before the IO
 * threads go (the answers need their mailboxes). */
void offload_stop(struct offload *o);
void offload_free(struct offload *o);

#endif
