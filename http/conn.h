/* http_conn.h - one client connection: reads, llhttp, limits, timers,
 * pipelined responses in order, lingering close. Lives on one IO thread. */
#ifndef BG_HTTP_CONN_H
#define BG_HTTP_CONN_H

#include <stdint.h>

struct io_thread;
struct http_conn;

/* Takes ownership of a connected, non-blocking socket. Returns NULL (socket
 * closed) when out of memory. */
struct http_conn *http_conn_new(struct io_thread *t, int fd);
/* Server drain, first step: requests whose bytes had already reached the
 * socket are read and handled as accepted (they were sent before the signal;
 * the server had just not read them yet). */
void http_conn_take_pending(struct http_conn *c);
/* Server drain: close if idle, otherwise finish what was accepted and close. */
void http_conn_drain(struct http_conn *c);
/* Close the socket now; returns the number of requests left unanswered. */
uint64_t http_conn_abort(struct http_conn *c);
/* Frees a connection whatever its state (IO thread exit). */
void http_conn_free(struct http_conn *c);
/* Frees the thread's spare request objects (IO thread exit, after its
 * connections). */
void http_conn_thread_free(struct io_thread *t);
struct http_conn *http_conn_next(const struct http_conn *c);

#endif
