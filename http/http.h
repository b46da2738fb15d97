/* http.h - the HTTP/1.1 server as a library: what the application sees.
 *
 * Four parts, each its own module inside http/:
 * - requests (request.c): what a route handler reads of a request and how it
 *   answers, at once or later, whole or streamed;
 * - the router (router.c): method masks and path patterns to handlers;
 * - the server (server.c): IO threads, listeners, limits, graceful drain;
 * - mailboxes (mailbox.c): how work finished on another thread comes back
 *   to a request's IO thread.
 * Everything else in http/ (the connection, the parser, serializing
 * answers) is internal: http_impl.h and response.h.
 *
 * A request belongs to its connection's IO thread. A handler either answers
 * at once or keeps the request and answers later on the same IO thread (work
 * done elsewhere comes back through that thread's mailbox). Each request
 * is answered exactly once; responses leave in request order whatever order
 * they are produced in. */
#ifndef BG_HTTP_H
#define BG_HTTP_H

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

struct event_base;
struct mailbox;

enum http_method {
    HTTP_M_GET = 1 << 0,
    HTTP_M_HEAD = 1 << 1,
    HTTP_M_POST = 1 << 2,
    HTTP_M_PUT = 1 << 3,
    HTTP_M_DELETE = 1 << 4,
    HTTP_M_OPTIONS = 1 << 5,
    HTTP_M_PATCH = 1 << 6,
    HTTP_M_OTHER = 1 << 7,
};

struct http_request;

int http_request_method(const struct http_request *req);   /* one enum http_method bit */
const char *http_request_method_name(const struct http_request *req);
/* The path without the query, not decoded; *len set. Never NULL. */
const char *http_request_path(const struct http_request *req, size_t *len);
/* The query after '?', or NULL when there is none. */
const char *http_request_query(const struct http_request *req, size_t *len);
/* The first value of `key` in the query, %-escapes decoded ('+' stays a
 * '+': the query is not a form), into out with its NUL: 1; 0 when absent;
 * -1 when longer than cap - 1, a %-escape is malformed or decodes to NUL. */
int http_request_query_param(const struct http_request *req, const char *key, char *out,
                             size_t cap);
/* Case-insensitive lookup of the first header `name`; NULL when absent. */
const char *http_request_header(const struct http_request *req, const char *name, size_t *len);
/* How many header lines are named `name` (a field that must be one: > 1 is
 * for the caller to refuse). */
int http_request_header_times(const struct http_request *req, const char *name);
/* Every header in arrival order: i from 0 to http_request_header_count()-1. */
int http_request_header_count(const struct http_request *req);
void http_request_header_at(const struct http_request *req, int i, const char **name,
                            size_t *name_len, const char **value, size_t *value_len);
/* 0 for HTTP/1.0, 1 for HTTP/1.1. */
int http_request_minor(const struct http_request *req);
/* The decoded body (chunked encoding removed); NULL with *len 0 when empty. */
const char *http_request_body(const struct http_request *req, size_t *len);
/* The handler is done with the body (decoded into a request of its own):
 * its memory goes now, not with the answer. A request that waits in a
 * queue then holds its tensor, not its text: a 1 MiB body of padding (or
 * a 1 KiB gzip one inflating to it) held 1 MiB for each of the 64
 * requests a connection may have outstanding. Reads after it see none. */
void http_request_release_body(struct http_request *req);

/* Answers the request. `extra_headers` is NULL or preformatted "Name: value\r\n"
 * lines (Allow, Retry-After, ...). body may be NULL when len is 0. The body is
 * copied; HEAD requests get the headers only. */
void http_respond(struct http_request *req, int status, const char *content_type,
                  const void *body, size_t len, const char *extra_headers);
/* {"error": "<message>"} with the given status; in OpenAI's style
 * {"error": {"message", "type", "param", "code"}}, which its clients read. */
void http_respond_error(struct http_request *req, int status, const char *extra_headers,
                        const char *fmt, ...) __attribute__((format(printf, 4, 5)));
enum http_error_style { HTTP_ERRORS_PLAIN, HTTP_ERRORS_OPENAI };
/* How http_respond_error words this request's errors (set by a route
 * guard, before anything can answer); the `param` of OpenAI's shape. */
void http_request_set_error_style(struct http_request *req, enum http_error_style style);
void http_request_set_error_param(struct http_request *req, const char *param);
/* A word a program can act on: the plain shape carries it as `reason`
 * beside `error`; OpenAI's (whose fields are fixed) at its message's end. */
void http_request_set_error_reason(struct http_request *req, const char *reason);

/* Trailers that follow the answer ("Name: value\r\n" lines; call before
 * answering): HTTP/2 sends them in a HEADERS frame after the body, which is
 * where gRPC's status travels; an HTTP/1.1 answer carries them among its
 * headers. The string is copied. */
void http_request_set_trailers(struct http_request *req, const char *trailers);

/* A request whose connection went away before it was answered: `on_abort` is
 * called once on the IO thread so its owner can stop work early; the owner
 * must still call http_respond (the answer is then discarded). */
void http_request_on_abort(struct http_request *req, void (*on_abort)(struct http_request *, void *),
                           void *arg);
/* The client's FIN aborts req as a reset does (on_abort runs), where
 * HTTP/1.1 would otherwise answer a client that only half-closed. TCP
 * cannot tell a half-close from a close, and a call that holds a server's
 * work (a proxied call, an LLM generating) must not run on for minutes for
 * a client that left: nginx reads a FIN so by default too. Other requests
 * keep the half-close answered (docs/CONFIG.md). No effect on HTTP/2. */
void http_request_abort_on_fin(struct http_request *req);
/* The event_base of the request's IO thread (for handler timers). */
struct event_base *http_request_event_base(const struct http_request *req);
/* The mailbox of the request's IO thread: work finished elsewhere comes back through it. */
struct mailbox *http_request_mailbox(const struct http_request *req);
/* ---- streaming (the reverse proxy) ----
 * A request routed by router_add_prefix is dispatched as soon as its headers
 * are complete; its body then reaches the handler piece by piece as it is
 * read, and the handler may answer piece by piece too. Memory per request
 * stays bounded by the two pause/drain signals below, whatever the sizes. */

/* The request declares a body (Content-Length > 0 or chunked). */
int http_request_has_body(const struct http_request *req);
/* Content-Length of the request, or -1 when chunked or absent. */
int64_t http_request_content_length(const struct http_request *req);
/* Body pieces as they arrive; `end` with the last call (len may be 0). A
 * request without a body gets one call with end at once. When the body
 * fails midway (malformed chunk, over max_body_bytes, stalled), fn gets
 * data NULL and `status` (400, 413, 408) with `msg`: the handler ends its
 * work and answers (http_respond_error with them, unless it began an answer).
 * HTTP/2 adds two: 499, the client reset the stream (nobody reads the
 * answer); 503, the server drains and the stream is between whole pieces
 * (http_request_body_at_rest): the handler answers the work it took, and
 * ends the answer, rather than wait for pieces that would hold the drain.
 * On a request that is not streaming, fn is called at once with the whole body. */
typedef void (*http_body_fn)(struct http_request *req, void *arg, const char *data, size_t len,
                             int end, int status, const char *msg);
void http_request_on_body(struct http_request *req, http_body_fn fn, void *arg);
/* Stops (1) or resumes (0) reading the request body: the handler's own
 * output is full. The body timer does not run while stopped. On HTTP/2
 * the stream's window is not given back while stopped: the client may
 * send at most its window more, and the handler still gets it. */
void http_request_pause_body(struct http_request *req, int paused);
/* Where a streamed body stands between its pieces (HTTP/2 streams; a gRPC
 * stream's messages), for its timers:
 *   HTTP_BODY_MOVING   a piece is part way: header_timeout_ms (a stall);
 *   HTTP_BODY_AT_REST  the handler holds every whole piece and owes nothing:
 *                      the client's turn, limits.idle_timeout_ms from now;
 *   HTTP_BODY_SERVING  the handler holds every whole piece and is still
 *                      answering some: no timer (the answer's own time).
 * A drain ends a body at rest (503), and waits for one being served. */
enum { HTTP_BODY_MOVING = 0, HTTP_BODY_AT_REST = 1, HTTP_BODY_SERVING = 2 };
void http_request_body_at_rest(struct http_request *req, int state);

/* Starts an answer whose body follows: Content-Length when content_length
 * >= 0, else chunked (HTTP/1.1 clients) or until close (HTTP/1.0). no_body:
 * the status has none (1xx, 204, 304) or the request was HEAD; then
 * content_length is only announced. `headers` are "Name: value\r\n" lines,
 * without framing, Connection, Date or Server. Returns 0, or -1 when the
 * client is gone (the request must still be finished). */
int http_respond_begin(struct http_request *req, int status, int64_t content_length, int no_body,
                       const char *headers, size_t headers_len);
/* A piece of the body; -1 when the client is gone. */
int http_respond_write(struct http_request *req, const void *data, size_t len);
/* The answer is complete (or, with `broken`, cannot be completed: the
 * connection is closed after what was written, so the client sees a short
 * answer rather than a wrong one). The request is answered. */
void http_respond_finish(struct http_request *req, int broken);
/* Bytes of this request's answer not yet written to the socket. */
size_t http_respond_buffered(const struct http_request *req);
/* Bytes of answers the request's connection holds unsent, every request's
 * it carries (HTTP/2: its streams' answers behind shut windows too). */
size_t http_conn_buffered(const struct http_request *req);
/* What a protocol carried over a connection of many requests (gRPC on
 * HTTP/2) keeps of the answers it has in the works there, so that a
 * client which reads nothing cannot make the server compute and hold
 * answers without bound: the bytes it reserved for answers not written
 * yet, the largest answer it wrote there, and its messages running before
 * that was known. Zero at first; NULL for a connection of one request at a
 * time (HTTP/1.1) or an inner request. The pointer is valid while req is. */
struct http_conn_answers {
    size_t reserved;
    size_t largest;
    int unreported;
};
/* The handler's answer will be about `bytes` (an inference's outputs, once
 * its rows are known and before it is computed): a protocol carrying many
 * requests on one connection reserves that much room for it
 * (http_inner_on_expected). Nothing for a request read from a socket. */
void http_request_answer_expected(struct http_request *req, size_t bytes);
struct http_conn_answers *http_request_conn_answers(struct http_request *req);
/* Called (on the IO thread) whenever the request's buffered answer has been
 * written out below the low-water mark, so the handler can resume. */
void http_request_on_drain(struct http_request *req, void (*fn)(struct http_request *, void *),
                           void *arg);
/* The client's address ("127.0.0.1", "::1"), or "" when unknown. */
void http_request_peer(const struct http_request *req, char *out, size_t cap);

/* When the request's last byte was read (now_ns clock). */
int64_t http_request_received_ns(const struct http_request *req);
/* When its first byte reached this host: the kernel's receive timestamp of
 * that data (now_ns clock; the read's own time where the kernel gives none).
 * Latency budgets count from here. */
int64_t http_request_arrival_ns(const struct http_request *req);
/* Index of the request's IO thread (0..io_threads-1): the shard to record into. */
int http_request_thread(const struct http_request *req);
/* A number the application attaches to the request (the gateway: the
 * caller's tenant, set by its route guard); 0 until set. */
void http_request_set_tag(struct http_request *req, int tag);
/* http_inner_set_decoded's object when it is of `kind` (compared as a
 * string), else NULL: a request read from a socket has none. */
void *http_request_decoded(const struct http_request *req, const char *kind);
int http_request_tag(const struct http_request *req);

/* ---- compressed bodies (decode.c) ----
 * Request bodies sent compressed (Content-Encoding: gzip or deflate, as
 * tritonclient's request_compression_algorithm sends them; a gRPC message
 * with grpc-encoding) are inflated before a handler sees them and bounded
 * by max_body_bytes after inflation: a small body that inflates past the
 * limit (a zip bomb) is 413, and inflation stops at the limit, so it never
 * costs more memory than an uncompressed body could. Pure: no request, no
 * connection (the fuzzer calls it).
 *
 * Inflates in (len bytes) as the encoding enc (enc_len bytes,
 * case-insensitive: "gzip", "x-gzip", "deflate" (zlib's format, or raw
 * deflate as some clients send), "identity") into out (appended), at most
 * max bytes. Returns 0, or the HTTP status to answer with a message in msg:
 * 400 (not valid data of that encoding, or trailing bytes), 413 (more than
 * max bytes inflated), 415 (an encoding not served, or several stacked). */
struct buf;
int http_body_decode(const char *enc, size_t enc_len, const void *in, size_t len, size_t max,
                     struct buf *out, char *msg, size_t cap);

/* ---- compressed answers (encode.c) ----
 * With `responses` on, a whole answer (http_respond) of at least min_bytes,
 * to a client whose Accept-Encoding takes gzip or deflate, leaves compressed with
 * Content-Encoding and Vary: Accept-Encoding, as Triton's HTTP front end
 * does for tritonclient's response_compression_algorithm and as Prometheus
 * asks for /metrics. Not: streamed answers (the proxy passes the upstream's
 * as they are; LLM streams), types compressed already (image/, audio/,
 * video/, gzip, zip, zstd), answers that carry a Content-Encoding, answers
 * that would not shrink. gRPC's messages are compressed the same way when
 * `grpc` is on and grpc-accept-encoding lists gzip or deflate
 * (gateway/grpc.c). The deflate runs on the IO thread, one zlib state per
 * thread reused. */
struct http_compression {
    bool responses;    /* HTTP answers (off by default); off: every answer as it is */
    bool grpc;         /* gRPC messages (grpc-accept-encoding only says what a
                        * client can read: off unless configured, as Triton) */
    int min_bytes;     /* smaller answers leave as they are */
    int level;         /* zlib's 1 (fastest) to 9 */
};
enum http_coding { HTTP_CODING_IDENTITY, HTTP_CODING_GZIP, HTTP_CODING_DEFLATE };
/* The coding an Accept-Encoding value (RFC 9110 12.5.3: q-values, "*",
 * x-gzip) prefers among gzip and deflate, gzip on a tie; identity when
 * neither is acceptable. grpc-accept-encoding's plain list parses too. */
enum http_coding http_coding_pick(const char *value, size_t len);
const char *http_coding_name(enum http_coding c);
/* The settings for req's answers (its server's; NULL for an inner
 * request, whose outer one decides). */
const struct http_compression *http_request_compression(const struct http_request *req);
/* Appends `in` compressed as c (gzip or deflate) at the configured level
 * to out, with the deflater of req's IO thread. 0, or -1 (out of memory,
 * or no settings for req). */
int http_request_deflate(struct http_request *req, enum http_coding c, const void *in,
                         size_t len, struct buf *out);

/* ---- inner requests (inner.c) ----
 * A request made inside the process on behalf of another one, `outer` (the
 * gRPC front end turns each call into the HTTP request it means, so that
 * one handler serves both): it is routed like a request read from a
 * socket, guard included, on outer's IO thread, with outer's arrival time,
 * peer and thread, and its answer goes to `done` instead of a socket. The
 * inner request is freed by the library after `done` returns; `done` runs
 * on the IO thread, at once or later. */
typedef void (*http_inner_done_fn)(void *arg, int status, const char *content_type,
                                   const void *body, size_t len, const char *extra_headers);
/* NULL when out of memory. method: one enum http_method bit (GET, POST). */
struct http_request *http_inner_new(struct http_request *outer, int method, const char *path,
                                    size_t path_len);
/* The inner request arrived at at_ns (now_ns clock), not with its outer:
 * a message of a stream, read long after the stream began. Its latency
 * budget and its statistics count from there. */
void http_inner_arrived(struct http_request *inner, int64_t at_ns);
/* 0, or -1 when out of memory. */
int http_inner_add_header(struct http_request *inner, const char *name, size_t name_len,
                          const char *value, size_t value_len);
/* The body is copied; 0 or -1 when out of memory. */
int http_inner_set_body(struct http_request *inner, const void *body, size_t len);
/* The body's head as the maker already holds it decoded, `kind` naming
 * its type (a string the maker and the handler share): the gRPC front end
 * builds a KServe request's JSON head as a jansson value before writing it
 * into the body, and the infer handler takes the value rather than parse
 * the text again. The body stays whole for any other reader. The request
 * owns obj from here and frees it with free_fn (on its IO thread). */
void http_inner_set_decoded(struct http_request *inner, const char *kind, void *obj,
                            void (*free_fn)(void *));
struct router;
void http_inner_dispatch(struct http_request *inner, const struct router *r,
                         http_inner_done_fn done, void *arg);
/* fn(arg, bytes) when the handler says how large its answer will be
 * (http_request_answer_expected); set before http_inner_dispatch. */
void http_inner_on_expected(struct http_request *inner, void (*fn)(void *arg, size_t bytes),
                            void *arg);
/* Frees an inner request that was never dispatched (NULL: nothing). */
void http_inner_discard(struct http_request *inner);
/* Outer went away: inner's on_abort hook runs (its handler stops early);
 * `done` is still called once. */
void http_inner_abort(struct http_request *inner);

/* ---- router ----
 * The route table: method masks and path patterns to handlers.
 *
 * Patterns are literal segments and `{name}` captures of one segment:
 *   router_add(r, HTTP_M_GET, "/v2/models/{model}/ready", handler, ctx);
 * HEAD is accepted wherever GET is. A path that matches some route with the
 * wrong method is 405 with an Allow header; no match at all is 404. */

#define ROUTE_MAX_PARAMS 4

struct route_param {
    const char *name;       /* from the pattern, without braces */
    const char *value;      /* points into the request path; not terminated */
    size_t len;
};

struct route_match {
    int nparams;
    struct route_param params[ROUTE_MAX_PARAMS];
    /* The matched route's pattern as registered ("/v2/models/{model}/infer"),
     * or a prefix route's prefix: what rules about routes compare against,
     * whatever the path's spelling. */
    const char *pattern;
};

/* NULL when the pattern has no such capture. */
const struct route_param *route_match_param(const struct route_match *m, const char *name);

typedef void (*route_handler_fn)(struct http_request *req, const struct route_match *m, void *ctx);

struct router;

struct router *router_new(void);
void router_free(struct router *r);
/* Returns 0, or -BG_EINVAL for a malformed pattern (message in err). */
int router_add(struct router *r, int methods, const char *pattern, route_handler_fn fn, void *ctx,
               struct error *err);

/* Every method on every path under `prefix` (which starts with '/'; a
 * trailing '/' also matches the prefix without it) goes to fn, when no route
 * added with router_add matches the path. Such requests are dispatched at
 * the end of their headers and stream their bodies (http.h). The longest
 * matching prefix wins. */
int router_add_prefix(struct router *r, const char *prefix, route_handler_fn fn, void *ctx,
                      struct error *err);
enum router_result { ROUTER_FOUND, ROUTER_NOT_FOUND, ROUTER_METHOD_NOT_ALLOWED };

/* On FOUND fills *fn, *ctx, *m. On METHOD_NOT_ALLOWED sets *allowed to the
 * union of the methods of the routes whose pattern matched. */
enum router_result router_match(const struct router *r, int method, const char *path,
                                size_t path_len, route_handler_fn *fn, void **ctx,
                                struct route_match *m, int *allowed);

/* "GET, HEAD, POST" for an Allow header. */
void router_format_allow(int methods, char *out, size_t cap);

/* One check before every handler, routes of router_add and router_add_prefix
 * alike (not before a 404 or 405): fn returns true to go on to the handler,
 * or answers the request itself and returns false. So a rule that holds
 * for every route (who may call it) lives in one place, and a route added
 * later cannot miss it. One guard per router; NULL removes it. */
typedef bool (*route_guard_fn)(struct http_request *req, const struct route_match *m, void *ctx);
void router_set_guard(struct router *r, route_guard_fn fn, void *ctx);
/* What a route's handler would refuse before reading the body, asked only
 * of a request that waits to be told whether to send it ("Expect:
 * 100-continue"), once the guard let it through: fn answers it and returns
 * false (a model that does not exist, a full queue), or returns true and
 * the 100 goes out. Not for prefix routes (they stream). NULL: none. */
void router_set_precheck(struct router *r, route_guard_fn fn, void *ctx);
/* How errors are worded for the route a request is headed to
 * (http_request_set_error_style): fn gets the route's pattern, or the
 * prefix's, before the guard, before a 405 of the router's own, and before
 * any error the connection answers itself once the request's line is read
 * (413, 415, 400 of a body: router_style); NULL before the router's 404,
 * when no route matches (fn may read the path). So OpenAI's clients read
 * every error of their routes in OpenAI's shape. */
typedef void (*route_style_fn)(struct http_request *req, const char *pattern, void *ctx);
void router_set_style(struct router *r, route_style_fn fn, void *ctx);
void router_style(const struct router *r, struct http_request *req);
/* Who answers a refusal the server itself makes before any route is run
 * (HTTP/2's 431 and 413 at the headers): fn, where the router's protocol
 * says errors its own way (gRPC: a status in trailers, which is all its
 * clients read); else http_respond_error. */
typedef void (*route_refuse_fn)(struct http_request *req, int status, const char *msg,
                                void *ctx);
void router_set_refuse(struct router *r, route_refuse_fn fn, void *ctx);
void router_refuse(const struct router *r, struct http_request *req, int status,
                   const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* ---- server ----
 * The IO threads: listeners, connections, graceful drain.
 *
 * Each IO thread runs its own event_base with its own SO_REUSEPORT listener
 * and owns the connections it accepted for life. The main thread creates the
 * server, starts it, and on SIGTERM asks it to drain, then joins it. */

struct server;

/* Limits of SPEC.md "limits", enforced per connection and per request. */
struct http_limits {
    size_t max_header_bytes;   /* request line + headers, CRLFs included; 431 past it */
    size_t max_body_bytes;     /* decoded body; 413 past it */
    int max_connections;       /* open client connections, all IO threads together */
    int header_timeout_ms;     /* first byte of a request to the end of its headers */
    int idle_timeout_ms;       /* keep-alive connection with nothing in progress */
};

/* The HTTP/2 port (h2.c): cleartext with prior knowledge, as gRPC clients
 * speak it without TLS. Its requests are routed by their own router and
 * stream (http_request_on_body): a handler is called at the end of a
 * stream's headers. */
struct http_h2_config {
    char listen_host[256];
    int listen_port;              /* 0 = ephemeral, -1 = no HTTP/2 port */
    const struct router *router;
    int max_concurrent_streams;   /* SETTINGS_MAX_CONCURRENT_STREAMS; streams reset by the
                                   * client but still being answered count too */
    int initial_window_bytes;     /* SETTINGS_INITIAL_WINDOW_SIZE, per stream */
    int connection_window_bytes;  /* the connection's receive window */
    int max_frame_bytes;          /* SETTINGS_MAX_FRAME_SIZE */
    int max_resets_per_s;         /* RST_STREAMs a client may send per second (CVE-2023-44487) */
    int max_control_per_s;        /* SETTINGS, PING, PRIORITY frames per second */
};

struct http_server_config {
    char listen_host[256];     /* "127.0.0.1", "::1", "localhost", ... */
    int listen_port;           /* 0 = ephemeral */
    int io_threads;            /* 0 = one per online core */
    struct http_limits limits;
    struct http_h2_config h2;  /* limits.max_header_bytes, max_body_bytes,
                                * max_connections and the timeouts hold there too */
    struct http_compression compression;
};

/* The config is copied; the router must outlive the server. The caller has
 * enabled libevent's pthreads support (evthread_use_pthreads) first. */
struct server *server_new(const struct http_server_config *cfg, const struct router *router,
                          struct error *err);
/* Binds every listener (so address errors surface here, in the caller's
 * thread) and starts the IO threads. When an IO thread exits it sends
 * SIGUSR1 to `notify`, so a main thread blocked in sigwait wakes up. */
int server_start(struct server *s, pthread_t notify, struct error *err);
int server_port(const struct server *s);            /* the bound port (useful with port 0) */
int server_h2_port(const struct server *s);         /* the HTTP/2 port's; -1 when off */
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

/* ---- mailbox ----
 * Hands work to an IO thread from any thread.
 *
 * Push under a mutex; the IO thread is woken (event_active) only when the
 * list goes from empty to non-empty; it drains by swapping the whole list
 * out. Messages are intrusive (the link lives in the sender's struct), so a
 * handoff allocates nothing. Messages run in the order they were posted. */

struct mailbox_msg {
    struct mailbox_msg *next;
    void (*fn)(struct mailbox_msg *msg);   /* runs on the mailbox's IO thread */
};

/* Any thread. A request's mailbox: http_request_mailbox. */
void mailbox_post(struct mailbox *mb, struct mailbox_msg *msg);

#endif
