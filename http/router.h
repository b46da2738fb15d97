/* router.h - the route table: method masks and path patterns to handlers.
 *
 * Patterns are literal segments and `{name}` captures of one segment:
 *   router_add(r, HTTP_M_GET, "/v2/models/{model}/ready", handler, ctx);
 * HEAD is accepted wherever GET is. A path that matches some route with the
 * wrong method is 405 with an Allow header; no match at all is 404. */
#ifndef BG_ROUTER_H
#define BG_ROUTER_H

#include <stddef.h>

#include "common/error.h"
#include "http/http.h"

#define ROUTE_MAX_PARAMS 4

struct route_param {
    const char *name;       /* from the pattern, without braces */
    const char *value;      /* points into the request path; not terminated */
    size_t len;
};

struct route_match {
    int nparams;
    struct route_param params[ROUTE_MAX_PARAMS];
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
/* The request goes to a prefix route (it streams). */
int router_streams(const struct router *r, const struct http_request *req);

enum router_result { ROUTER_FOUND, ROUTER_NOT_FOUND, ROUTER_METHOD_NOT_ALLOWED };

/* On FOUND fills *fn, *ctx, *m. On METHOD_NOT_ALLOWED sets *allowed to the
 * union of the methods of the routes whose pattern matched. */
enum router_result router_match(const struct router *r, int method, const char *path,
                                size_t path_len, route_handler_fn *fn, void **ctx,
                                struct route_match *m, int *allowed);

/* "GET, HEAD, POST" for an Allow header. */
void router_format_allow(int methods, char *out, size_t cap);

/* Routes the request and calls its handler, or answers 404/405 itself. */
void router_dispatch(const struct router *r, struct http_request *req);

#endif
