/* server.h - the IO threads: listeners, connections, graceful drain.
 *
 * Each IO thread runs its own event_base with its own SO_REUSEPORT listener
 * and owns the connections it accepted for life. The main thread creates the
 * server, starts it, and on SIGTERM asks it to drain, then joins it. */
#ifndef BG_SERVER_H
#define BG_SERVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "gateway/config.h"
#include "common/error.h"
#include "http/router.h"

struct server;

/* The config and router must outlive the server. The caller has enabled
 * libevent's pthreads support (evthread_use_pthreads) first. */
struct server *server_new(const struct config *cfg, const struct router *router,
                          struct error *err);
/* Binds every listener (so address errors surface here, in the caller's
 * thread) and starts the IO threads. When an IO thread exits it sends
 * SIGUSR1 to `notify`, so a main thread blocked in sigwait wakes up. */
int server_start(struct server *s, pthread_t notify, struct error *err);
int server_port(const struct server *s);            /* the bound port (useful with port 0) */
int server_threads(const struct server *s);
/* IO thread i's event base (after server_start): work that belongs to no
 * connection (the proxy's health probes) runs on thread 0's. */
struct event_base *server_event_base(const struct server *s, int i);
/* Stop accepting, answer what was accepted, close idle connections. */
void server_drain(struct server *s);
/* Close everything now (drain timeout, second signal). */
void server_force_close(struct server *s);
/* IO threads still running. */
int server_running(const struct server *s);
/* Requests accepted and not yet answered, all threads. */
int64_t server_inflight(const struct server *s);
/* The front end's own counts, all threads summed (relaxed: a scrape). */
#define SERVER_STATUSES 500
struct server_http_stats {
    int connections;                        /* client connections open now */
    uint64_t accepted;                      /* client connections accepted since start */
    uint64_t responses[SERVER_STATUSES];    /* answers on every route by status: [status - 100] */
};
void server_http_stats(const struct server *s, struct server_http_stats *out);
/* Joins the IO threads; returns the number of requests abandoned by a forced close. */
uint64_t server_join(struct server *s);
void server_free(struct server *s);

#endif
