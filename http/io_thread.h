/* io_thread.h - one IO thread's state, shared by server.c and http_conn.c only. */
#ifndef BG_IO_THREAD_H
#define BG_IO_THREAD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <event2/event.h>

#include "gateway/config.h"
#include "http/router.h"
#include "http/server.h"

struct server;
struct http_conn;
struct mailbox;

enum io_wake {
    IO_WAKE_RESUME = 1 << 0,   /* a connection slot freed up: re-enable the listener */
    IO_WAKE_DRAIN = 1 << 1,
    IO_WAKE_FORCE = 1 << 2,
};

/* Each read lands in the thread's buffer first; a connection only keeps
 * its own copy of bytes left unparsed (http_conn.c: conn_read). */
#define IO_THREAD_READ_BUF (16u << 10)
/* Answered requests kept for reuse, per thread (http_conn.c: conn_recycle). */
#define IO_THREAD_SPARE_REQUESTS 32

struct io_thread {
    struct server *srv;
    int index;
    pthread_t tid;
    struct event_base *base;
    int listen_fd;
    struct event *listen_ev;
    struct event *wake_ev;           /* activated from other threads */
    struct mailbox *mailbox;         /* completions from workers */
    _Atomic int wake_flags;
    _Atomic bool listen_paused;      /* at max_connections */
    struct event *retry_ev;          /* re-arms the listener after EMFILE */
    const struct config_limits *limits;
    const struct router *router;
    struct http_conn *conns;         /* every connection of this thread, zombies included */
    int nconns;
    bool draining;
    uint64_t abandoned;              /* requests left unanswered by a forced close */
    _Atomic int64_t inflight;        /* accepted, not yet answered (only this thread writes) */
    /* Only this thread writes these; /metrics sums them (relaxed). */
    _Atomic uint64_t accepted;                       /* connections accepted */
    _Atomic uint64_t responses[SERVER_STATUSES];  /* answers by status - 100 */
    int64_t date_sec;
    char date[32];                   /* cached Date header value for date_sec */
    struct http_request *spare;      /* answered requests for reuse, any connection's */
    int nspare;
    char rbuf[IO_THREAD_READ_BUF];   /* lent to the connection being read */
};

/* The cached Date header value, refreshed once a second. */
const char *io_thread_date(struct io_thread *t);
/* Called by http_conn when a socket closes: frees its max_connections slot. */
void io_thread_conn_closed(struct io_thread *t);
/* Called by http_conn when a connection's memory is freed (it leaves t->conns). */
void io_thread_conn_gone(struct io_thread *t);

#endif
