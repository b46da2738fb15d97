/* proxy.h - the plain HTTP/1.1 reverse proxy: every request under a
 * configured prefix (and the metadata of upstream models) goes to the
 * servers behind as it is, bodies streaming both ways.
 *
 * Runs on the IO threads: a proxied request's upstream connection lives on
 * the same event loop as its client connection (keep-alive pools per server
 * per IO thread), so nothing crosses threads. Hop-by-hop headers are dropped
 * both ways (RFC 9110 7.6.1: Connection and the fields it names,
 * Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade);
 * X-Forwarded-For/-Host/-Proto and Via are added; framing is re-done on each
 * side. */
#ifndef BG_PROXY_H
#define BG_PROXY_H

#include <stdbool.h>
#include <stddef.h>

#include "gateway/config.h"
#include "common/error.h"
#include "http/http.h"

struct proxy;
struct auth;
struct httpc_target;
struct httpc_head;
struct buf;

/* Resolves every route's URLs (config errors name the route). */
struct proxy *proxy_new(const struct config_proxy *cfg, int io_threads, struct error *err);
/* The tenants' keys (auth.h), which no route passes on; NULL: none. */
void proxy_set_auth(struct proxy *p, const struct auth *auth);
/* Adds a prefix route per configured route. */
int proxy_register(struct proxy *p, struct router *r, struct error *err);
/* Starts the active health probes of the routes that have a health_path,
 * on `base` (an IO thread's, once it runs). */
int proxy_start(struct proxy *p, struct event_base *base, struct error *err);
/* After the IO threads have exited and before their event bases are freed. */
void proxy_free(struct proxy *p);

/* Forwards req to the least loaded usable of targets. The upstream path is
 * `path` (path_len bytes) followed by the request's query. Answers req
 * whatever happens (502 when no server answers, 504 past proxy.timeout_ms). */
void proxy_forward(struct proxy *p, struct http_request *req, struct httpc_target *const *targets,
                   int ntargets, const char *path, size_t path_len);
int proxy_model_metadata(const struct proxy *p);   /* proxy.model_metadata */

/* ---- tapped calls (LLM pools: gateway/api_llm.c) ----
 * A request whose body the handler rewrote, sent to the one target it
 * chose, with the answer passing through the tap: the same connections,
 * framing, timers, back-pressure and client hang-up handling as a proxied
 * request. The tap sees the head and each piece of the body, and decides
 * what the client gets; the answer goes to the client chunked. */
struct proxy_outcome {
    int status;            /* the server's status once its head passed; 0 before */
    int fail_status;       /* nothing reached the client and the call failed: 502, 503, 504 */
    const char *msg;       /* with fail_status: what happened */
    bool broken;           /* the answer began and was cut short */
    bool client_gone;
};
struct proxy_tap {
    /* The answer's head. 0: pass it on (its headers, less framing; the tap
     * may append "Name: value\r\n" lines to `headers`); 1: refuse it
     * while nothing reached the client (the call fails with 502 and `end`
     * may try elsewhere). */
    int (*head)(void *arg, const struct httpc_head *h, struct buf *headers);
    /* A piece of the body: append what the client gets to `out` (less,
     * more, or held for later). -1: cut the answer. */
    int (*body)(void *arg, const char *data, size_t len, struct buf *out);
    /* The call is over, once, last. When it failed with nothing sent to
     * the client (fail_status set), returning 1 means the tap took the
     * request over (it started another call for it) and the proxy answers
     * nothing; 0: the proxy answers fail_status with msg. Otherwise the
     * return value is ignored and the proxy finishes the answer. */
    int (*end)(void *arg, const struct proxy_outcome *o);
};
/* Sends `method path` with `body` (Content-Type given, may be NULL) and the
 * client's end-to-end headers (less Content-Length, Accept-Encoding: the
 * tap reads the answer) to target t, the timer timeout_ms (named
 * timeout_name in messages). Returns 0 (then `end` comes exactly once), or
 * -1 with nothing called when no call can start (out of memory). */
int proxy_forward_tapped(struct proxy *p, struct http_request *req, struct httpc_target *t,
                         const char *method, const char *path, const void *body, size_t len,
                         const char *content_type, int timeout_ms, const char *timeout_name,
                         const struct proxy_tap *tap, void *arg);

/* For /metrics: the configured routes and their servers. */
int proxy_route_count(const struct proxy *p);
const char *proxy_route_prefix(const struct proxy *p, int i);
int proxy_route_targets(const struct proxy *p, int i, struct httpc_target *const **out);

#endif
