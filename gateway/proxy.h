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

#include <stddef.h>

#include "gateway/config.h"
#include "common/error.h"
#include "http/http.h"

struct proxy;
struct httpc_target;

/* Resolves every route's URLs (config errors name the route). */
struct proxy *proxy_new(const struct config_proxy *cfg, int io_threads, struct error *err);
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

/* For /metrics: the configured routes and their servers. */
int proxy_route_count(const struct proxy *p);
const char *proxy_route_prefix(const struct proxy *p, int i);
int proxy_route_targets(const struct proxy *p, int i, struct httpc_target *const **out);

#endif
