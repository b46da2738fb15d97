/* http_impl.h - http/'s insides, shared by its files and by nobody else
 * (tests aside): the request object, the protocol callbacks that join the
 * request core to the connection, the parser, the IO thread, the connection.
 *
 * Layering inside http/, each line using only those below it:
 *   server.c    IO threads, listeners, drain
 *   conn.c      one HTTP/1.1 connection: reads, parse, pipelining, timers
 *   io_thread.c per-thread state a connection reports to
 *   router.c    route table and dispatch
 *   request.c   the request core: accessors and the answering API of http.h
 *   parse.c, response.c, mailbox.c
 * The request core reaches the connection only through struct http_proto,
 * as h2o's request core reaches http1.c through its callbacks. */
#ifndef BG_HTTP_IMPL_H
#define BG_HTTP_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <llhttp.h>

#include "common/buf.h"
#include "common/list.h"
#include "http/http.h"

struct http_conn;
struct http_request;
struct io_thread;

/* What the request core asks of the protocol that carries a request. The
 * core has already checked that the call is allowed (not answered twice,
 * an answer begun before it is written to, ...); these do the wire part. */
struct http_proto {
    /* A whole answer (http_respond). */
    void (*respond)(struct http_request *r, int status, const char *content_type,
                    const void *body, size_t len, const char *extra_headers);
    /* A streamed answer: head, body pieces, end (http_respond_begin/write/finish). */
    int (*respond_begin)(struct http_request *r, int status, int64_t content_length, int no_body,
                         const char *headers, size_t headers_len);
    int (*respond_write)(struct http_request *r, const void *data, size_t len);
    void (*respond_finish)(struct http_request *r, int broken);
    size_t (*respond_buffered)(const struct http_request *r);
    size_t (*conn_buffered)(const struct http_request *r);
    /* NULL: the protocol carries one request at a time (http_request_conn_answers). */
    struct http_conn_answers *(*conn_answers)(struct http_request *r);
    /* NULL: nobody reserves room for answers (http_request_answer_expected). */
    void (*answer_expected)(struct http_request *r, size_t bytes);
    /* r->body_paused changed: stop or resume reading the body. */
    void (*body_paused)(struct http_request *r);
    void (*peer)(const struct http_request *r, char *out, size_t cap);
    struct io_thread *(*thread)(const struct http_request *r);
    /* r reads a FIN as leaving (http_request_abort_on_fin): one read
     * already aborts it soon; NULL where a FIN is no such thing (HTTP/2). */
    void (*fin_leaves)(struct http_request *r);
    /* Whole answers may leave compressed (http.h "compressed answers"):
     * not an inner request's, whose outer one frames them. */
    bool compresses;
};

struct http_header {
    uint32_t name_off, name_len;   /* offsets into http_request.head */
    uint32_t val_off, val_len;
};

/* One request of a connection's pipeline. Owned by its connection while in
 * use; recycled through its IO thread's spares (conn.c: conn_recycle). */
struct http_request {
    struct http_request *next;     /* the connection's queue, in arrival order */
    struct http_conn *conn;
    const struct http_proto *proto;
    int method;                    /* enum http_method bit */
    uint8_t llhttp_method;
    uint8_t http_major, http_minor;
    bool keep_alive;               /* the client allows reuse after this one */
    bool expect_continue;          /* "Expect: 100-continue" not yet answered */
    bool responded;                /* http_respond was called */
    bool close_after;              /* the response closes the connection */
    bool aborted;                  /* the connection went away first */
    bool fin_leaves;               /* the client's FIN aborts it (http_request_abort_on_fin) */
    bool accepted;                 /* fully received and dispatched (counts as in flight) */
    int status;                    /* of the response, for logs and metrics */
    int tag;                       /* the application's (http_request_set_tag) */
    enum http_error_style err_style;
    char err_param[32];            /* OpenAI's error `param`; "": null */
    char err_reason[32];           /* the plain shape's `reason`; "": none */
    struct buf head;               /* URL, then header names and values, back to back */
    uint32_t url_len;
    uint32_t path_len;             /* URL up to '?' */
    uint32_t path_off;             /* where the path starts: past "http://authority" in the
                                    * absolute form, else 0 */
    struct http_header *hdrs;
    int nhdrs, hdrs_cap;
    struct buf body;
    struct buf resp;               /* a response produced before its turn to be written */
    int64_t t_received_ns;         /* last byte of the request read */
    int64_t t_arrival_ns;          /* its first byte reached this host (kernel timestamp) */
    void (*abort_fn)(struct http_request *, void *);
    void *abort_arg;
    /* Streaming (http.h): dispatched at its headers, body handed over as read. */
    bool streaming;
    bool body_done;                /* the last body byte was read */
    bool body_paused;              /* the handler stopped the body */
    bool dot_path;                 /* the path holds "." or ".." (http_request_check_path) */
    bool guarded;                  /* the router's guard passed it already (router_guard_early) */
    int route_hint;                /* ... on this route (its index + 1; 0: none) */
    char *params_decoded;          /* route captures with %-escapes, decoded (router.c);
                                    * made on first need, HTTP_PARAMS_DECODED_MAX bytes */
    bool body_at_rest;             /* between whole pieces: idle, not stalled (HTTP/2) */
    bool body_serving;             /* ... and the handler is answering some: no timer */
    int64_t t_rest_ns;             /* when it last came to rest (the idle clock's start) */
    bool resp_begun;               /* http_respond_begin was called */
    bool resp_chunked;             /* the answer is chunk-framed */
    bool resp_no_body;             /* HEAD, 204, 304: body bytes are dropped */
    bool has_body;                 /* the request declares one */
    int64_t content_length;        /* declared, -1 none or chunked */
    uint64_t body_total;           /* body bytes read so far (max_body_bytes) */
    http_body_fn body_fn;
    void *body_arg;
    void (*drain_fn)(struct http_request *, void *);
    void *drain_arg;
    struct buf trailers;           /* http_request_set_trailers */
    void *pdata;                   /* the protocol's own: h2.c's stream, inner.c's state */
    /* http_inner_set_decoded's: the body's head as its maker built it. */
    const char *decoded_kind;
    void *decoded;
    void (*decoded_free)(void *);
};

struct http_request *http_request_new(struct http_conn *conn, const struct http_proto *proto);
void http_request_reset(struct http_request *req);   /* keeps the storage for reuse */
void http_request_free(struct http_request *req);

/* ---- parser: llhttp plus the limits of SPEC.md ---- */

enum http_parse_event {
    HTTP_PARSE_MORE,       /* all input consumed, nothing to report */
    HTTP_PARSE_HEADERS,    /* the current request's headers are complete */
    HTTP_PARSE_REQUEST,    /* the current request is complete */
    HTTP_PARSE_ERROR,      /* answer error_status with error_msg, then close */
};

enum http_parse_phase { HTTP_PHASE_IDLE, HTTP_PHASE_HEAD, HTTP_PHASE_BODY };

struct http_parse {
    llhttp_t llh;
    size_t max_header_bytes;
    size_t max_body_bytes;
    enum http_parse_phase phase;
    size_t head_bytes;             /* bytes of the current request's head so far */
    size_t trailer_bytes;          /* of its chunked body's trailer section (dropped) */
    size_t ext_bytes;              /* of its chunks' extensions (dropped) */
    bool in_trailer;               /* past its last chunk's size line */
    bool trailer_fields;           /* a trailer field began: counted from there */
    /* Within the piece being fed: where the trailer section's first field
     * began, if it began in it (trailer_here). */
    const char *trailer_at;
    bool trailer_here;
    struct http_request *cur;      /* being parsed; set by the owner on HTTP_PARSE_MORE/IDLE */
    struct http_request *(*alloc)(void *ctx);   /* called at the first byte of a request */
    void *alloc_ctx;
    bool in_value;                 /* last header callback was a value */
    bool upgrade;                  /* the request asked for a protocol switch */
    int error_status;
    char error_msg[160];
};

void http_parse_init(struct http_parse *hp, size_t max_header_bytes, size_t max_body_bytes,
                     struct http_request *(*alloc)(void *), void *alloc_ctx);
/* Parses from data until an event; *consumed bytes are done with (the rest
 * must be passed again). After HTTP_PARSE_REQUEST, hp->cur is the finished
 * request and the parser is ready for the next one. */
enum http_parse_event http_parse_feed(struct http_parse *hp, const char *data, size_t len,
                                      size_t *consumed);
/* The peer closed its side: is a request left incomplete? */
bool http_parse_mid_request(const struct http_parse *hp);

/* ---- router (router.c) ---- */

/* What a 501 says is served (the methods routes are registered with). */
#define HTTP_SERVED_METHODS "GET, HEAD, POST, PUT, DELETE, OPTIONS and PATCH"

/* The request goes to a prefix route (it streams). */
int router_streams(const struct router *r, const struct http_request *req);
/* Routes the request and calls its handler, or answers 404/405 itself. */
void router_dispatch(const struct router *r, struct http_request *req);
/* Whether router_dispatch would reach a handler: its route, its method,
 * the guard and the precheck (router_set_precheck) pass. Else the request
 * is answered as router_dispatch would (404, 405, the guard's 401/403, the
 * handler's refusal) and false returned. For "Expect: 100-continue",
 * asked before the body is wanted. */
bool router_precheck(const struct router *r, struct http_request *req);
/* The same for a request whose body follows, without the precheck hook:
 * its route, its method and the guard, before a byte of the body is read
 * (or inflated). A request the guard passed here is not guarded again. */
bool router_guard_early(const struct router *r, struct http_request *req);

/* ---- mailbox (mailbox.c) ---- */

struct mailbox *mailbox_new(struct event_base *base);
/* Runs whatever is still queued (IO thread exit), then frees. */
void mailbox_free(struct mailbox *mb);

/* ---- the IO thread (io_thread.c; server.c runs it) ---- */

enum io_wake {
    IO_WAKE_RESUME = 1 << 0,   /* a connection slot freed up: re-enable the listener */
    IO_WAKE_DRAIN = 1 << 1,
    IO_WAKE_FORCE = 1 << 2,
};

/* Each read lands in the thread's buffer first; a connection only keeps
 * its own copy of bytes left unparsed (conn.c: conn_read). */
#define IO_THREAD_READ_BUF (16u << 10)
/* Answered requests kept for reuse, per thread (conn.c: conn_recycle). */
#define IO_THREAD_SPARE_REQUESTS 32

struct io_thread {
    struct server *srv;
    /* A socket closed: its max_connections slot is free (the server's count). */
    void (*conn_closed)(struct io_thread *t);
    int index;
    pthread_t tid;
    struct event_base *base;
    int listen_fd;
    struct event *listen_ev;
    int h2_listen_fd;                /* the HTTP/2 port's listener; -1: none */
    struct event *h2_listen_ev;
    const struct http_h2_config *h2;
    /* A flood's warning (h2.c) is one line a second for the whole server:
     * one client opening connections wrote 540 KB of them in 0.3 s. */
    struct log_gate *flood_log;
    struct list h2conns;             /* HTTP/2 connections (h2.c), zombies included */
    struct event *wake_ev;           /* activated from other threads */
    struct mailbox *mailbox;         /* completions from workers */
    _Atomic int wake_flags;
    _Atomic bool listen_paused;      /* at max_connections */
    struct event *retry_ev;          /* re-arms the listener after EMFILE */
    const struct http_limits *limits;
    const struct http_compression *compression;
    struct http_deflater *deflater;  /* encode.c's zlib states, made on first use */
    const struct router *router;
    struct list conns;               /* every connection of this thread, zombies included */
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

/* ---- compressed answers (encode.c) ---- */
struct http_deflater;
/* Appends in compressed as c at level to out, with *d (made on first use). 0 or -1. */
int http_coding_encode(struct http_deflater **d, enum http_coding c, int level, const void *in,
                       size_t len, struct buf *out);
void http_deflater_free(struct http_deflater *d);
/* What http_respond sends under settings c (NULL: none) to a client whose
 * Accept-Encoding is ae (NULL: none): 0, the answer as given; 1, the same
 * body with `headers` (NUL-terminated) for extra_headers (Vary added); 2,
 * the compressed body in zbody (deflated with *d) with `headers`. */
int http_answer_encode(const struct http_compression *c, struct http_deflater **d,
                       const char *ae, size_t ae_len, const char *content_type, const void *body,
                       size_t len, const char *extra_headers, struct buf *zbody,
                       struct buf *headers);

/* Sets up what every owner of a thread needs: the connection list. */
void io_thread_init(struct io_thread *t);
/* The cached Date header value, refreshed once a second. */
const char *io_thread_date(struct io_thread *t);
/* Called by http_conn when a socket closes: calls t->conn_closed. */
void io_thread_conn_closed(struct io_thread *t);
/* Called by http_conn when a connection's memory is freed (it leaves t->conns). */
void io_thread_conn_gone(struct io_thread *t);

/* ---- one HTTP/2 client connection (h2.c) ----
 * nghttp2 does the framing, HPACK and flow control; this file joins it to
 * the IO thread (reads, writes, timers, drain) and each stream to a
 * request of the request core. Counted in t->nconns like HTTP/1.1's. */
struct h2_conn *h2_conn_new(struct io_thread *t, int fd);
void h2_conn_drain_all(struct io_thread *t);
uint64_t h2_conn_abort_all(struct io_thread *t);
void h2_conn_thread_free(struct io_thread *t);

/* ---- building a request outside the HTTP/1.1 parser (request.c) ----
 * h2.c and inner.c: the target, then the headers, as parse.c lays them. */
int http_request_set_target(struct http_request *r, int method, const char *url, size_t len);
/* in[0..len) with its %-escapes decoded into out: the length, or -1 when it
 * is longer than cap, an escape is malformed or decodes to NUL. */
int http_pct_decode(const char *in, size_t len, char *out, size_t cap);
/* The room for a request's decoded route captures (router.c). */
#define HTTP_PARAMS_DECODED_MAX 1024
#define HTTP_DOT_PATH_MSG                                                                     \
    "the path holds a dot segment (\".\" or \"..\", %2e counting as a dot): not served; "      \
    "send the path it stands for (RFC 3986 5.2.4)"
/* Marks a path holding a dot segment (dot_path: refused 400 before
 * routing), once the target is read: set_target and parse.c call it. */
void http_request_check_path(struct http_request *r);
int http_request_add_header(struct http_request *r, const char *name, size_t name_len,
                            const char *value, size_t value_len);
/* The method bit of a method name; HTTP_M_OTHER when unknown. */
int http_method_from_name(const char *name, size_t len, uint8_t *llhttp_method);

/* ---- one client connection (conn.c) ----
 * Reads, llhttp, limits, timers, pipelined responses in order, lingering
 * close. Lives on one IO thread. */

/* Takes ownership of a connected, non-blocking socket. Returns NULL (socket
 * closed) when out of memory. */
struct http_conn *http_conn_new(struct io_thread *t, int fd);
/* Server drain, for every connection of the thread: requests whose bytes
 * had already reached the socket are read and handled as accepted (they were
 * sent before the signal; the server had just not read them yet); then the
 * thread is draining: idle connections close, busy ones finish what was
 * accepted and close. */
void http_conn_drain_all(struct io_thread *t);
/* Closes every socket now (forced stop); returns the requests left unanswered. */
uint64_t http_conn_abort_all(struct io_thread *t);
/* Frees every connection whatever its state, then the thread's spare
 * request objects (IO thread exit). */
void http_conn_thread_free(struct io_thread *t);

#endif
