/* io_thread.c - the per-thread state a connection reports to: the Date
 * header cache and the connection counts. The server (server.c) owns the
 * threads; tests and the fuzz harness drive one thread without a server,
 * setting conn_closed themselves. */
#include "http/http_impl.h"

#include <sys/time.h>

#include <event2/event.h>

#include "http/response.h"

void io_thread_init(struct io_thread *t)
{
    list_init(&t->conns);
    list_init(&t->h2conns);
    t->listen_fd = -1;
    t->h2_listen_fd = -1;
}

void io_thread_conn_closed(struct io_thread *t)
{
    if (t->conn_closed)
        t->conn_closed(t);
}

void io_thread_conn_gone(struct io_thread *t)
{
    t->nconns--;
    if (t->draining && t->nconns == 0)
        event_base_loopbreak(t->base);
}

const char *io_thread_date(struct io_thread *t)
{
    struct timeval tv;
    event_base_gettimeofday_cached(t->base, &tv);
    if (tv.tv_sec != t->date_sec) {
        t->date_sec = tv.tv_sec;
        http_date_format(tv.tv_sec, t->date);
    }
    return t->date;
}
