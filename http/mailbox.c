/* mailbox.c - see http.h, "mailbox". */
#include "http/http_impl.h"

#include <pthread.h>
#include <stdlib.h>

#include <event2/event.h>

struct mailbox {
    pthread_mutex_t lock;
    struct mailbox_msg *head, *tail;
    struct event *wake;
};

static void mailbox_drain(evutil_socket_t fd, short what, void *arg)
{
    struct mailbox *mb = arg;
    (void)fd;
    (void)what;
    pthread_mutex_lock(&mb->lock);
    struct mailbox_msg *m = mb->head;
    mb->head = mb->tail = NULL;
    pthread_mutex_unlock(&mb->lock);
    while (m) {
        struct mailbox_msg *next = m->next;
        m->next = NULL;
        m->fn(m);
        m = next;
    }
}

struct mailbox *mailbox_new(struct event_base *base)
{
    struct mailbox *mb = calloc(1, sizeof *mb);
    if (!mb)
        return NULL;
    pthread_mutex_init(&mb->lock, NULL);
    mb->wake = event_new(base, -1, 0, mailbox_drain, mb);
    if (!mb->wake) {
        pthread_mutex_destroy(&mb->lock);
        free(mb);
        return NULL;
    }
    return mb;
}

void mailbox_post(struct mailbox *mb, struct mailbox_msg *msg)
{
    msg->next = NULL;
    pthread_mutex_lock(&mb->lock);
    int was_empty = mb->head == NULL;
    if (mb->tail)
        mb->tail->next = msg;
    else
        mb->head = msg;
    mb->tail = msg;
    /* Activate under the lock: the drain cannot run between our push and the wake. */
    if (was_empty)
        event_active(mb->wake, EV_READ, 0);
    pthread_mutex_unlock(&mb->lock);
}

void mailbox_free(struct mailbox *mb)
{
    if (!mb)
        return;
    mailbox_drain(-1, 0, mb);
    event_free(mb->wake);
    pthread_mutex_destroy(&mb->lock);
    free(mb);
}
