/* router.c - see http.h, "router". A linear scan over pre-split patterns: the table
 * has tens of routes and matching costs a few short memcmp's per route. */
#include "http/http_impl.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUTE_MAX_SEGS 12

struct route_seg {
    char *text;             /* literal text, or the capture name */
    size_t len;
    int capture;
};

struct route {
    int methods;
    char *pattern;
    struct route_seg segs[ROUTE_MAX_SEGS];
    int nsegs;
    route_handler_fn fn;
    void *ctx;
};

struct prefix_route {
    char *prefix;
    size_t len;
    route_handler_fn fn;
    void *ctx;
};

struct router {
    struct route *routes;
    int n, cap;
    struct prefix_route *prefixes;    /* longest first */
    int nprefixes;
    route_guard_fn guard;             /* NULL: none */
    void *guard_ctx;
    route_guard_fn precheck;          /* NULL: none */
    void *precheck_ctx;
    route_style_fn style;             /* NULL: none */
    void *style_ctx;
    route_refuse_fn refuse;           /* NULL: http_respond_error */
    void *refuse_ctx;
};

struct router *router_new(void) { return calloc(1, sizeof(struct router)); }

void router_free(struct router *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->n; i++) {
        for (int s = 0; s < r->routes[i].nsegs; s++)
            free(r->routes[i].segs[s].text);
        free(r->routes[i].pattern);
    }
    free(r->routes);
    for (int i = 0; i < r->nprefixes; i++)
        free(r->prefixes[i].prefix);
    free(r->prefixes);
    free(r);
}

void router_set_style(struct router *r, route_style_fn fn, void *ctx)
{
    r->style = fn;
    r->style_ctx = ctx;
}

void router_set_refuse(struct router *r, route_refuse_fn fn, void *ctx)
{
    r->refuse = fn;
    r->refuse_ctx = ctx;
}

void router_refuse(const struct router *r, struct http_request *req, int status,
                   const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r && r->refuse)
        r->refuse(req, status, msg, r->refuse_ctx);
    else
        http_respond_error(req, status, NULL, "%s", msg);
}

void router_set_guard(struct router *r, route_guard_fn fn, void *ctx)
{
    r->guard = fn;
    r->guard_ctx = ctx;
}

void router_set_precheck(struct router *r, route_guard_fn fn, void *ctx)
{
    r->precheck = fn;
    r->precheck_ctx = ctx;
}

int router_add_prefix(struct router *r, const char *prefix, route_handler_fn fn, void *ctx,
                      struct error *err)
{
    if (prefix[0] != '/')
        return error_set(err, BG_EINVAL, "prefix \"%s\": must start with '/'", prefix);
    struct prefix_route *n = realloc(r->prefixes, (size_t)(r->nprefixes + 1) * sizeof *n);
    if (!n)
        return error_set(err, BG_ENOMEM, "prefix \"%s\": out of memory", prefix);
    r->prefixes = n;
    struct prefix_route pr = {strdup(prefix), strlen(prefix), fn, ctx};
    if (!pr.prefix)
        return error_set(err, BG_ENOMEM, "prefix \"%s\": out of memory", prefix);
    int i = r->nprefixes++;
    while (i > 0 && n[i - 1].len < pr.len) {
        n[i] = n[i - 1];
        i--;
    }
    n[i] = pr;
    return 0;
}

static const struct prefix_route *router_prefix_match(const struct router *r, const char *path, size_t len)
{
    for (int i = 0; i < r->nprefixes; i++) {
        const struct prefix_route *p = &r->prefixes[i];
        if (len >= p->len && memcmp(path, p->prefix, p->len) == 0)
            return p;
        if (p->len > 1 && p->prefix[p->len - 1] == '/' && len == p->len - 1 &&
            memcmp(path, p->prefix, len) == 0)
            return p;
    }
    return NULL;
}

int router_add(struct router *r, int methods, const char *pattern, route_handler_fn fn, void *ctx,
               struct error *err)
{
    if (pattern[0] != '/')
        return error_set(err, BG_EINVAL, "route \"%s\": must start with '/'", pattern);
    if (methods & HTTP_M_GET)
        methods |= HTTP_M_HEAD;
    struct route rt = {.methods = methods, .fn = fn, .ctx = ctx};
    const char *p = pattern + 1;
    int nparams = 0;
    for (;;) {
        const char *end = strchr(p, '/');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (rt.nsegs == ROUTE_MAX_SEGS)
            goto bad_too_long;
        struct route_seg *seg = &rt.segs[rt.nsegs];
        if (len >= 2 && p[0] == '{' && p[len - 1] == '}') {
            if (++nparams > ROUTE_MAX_PARAMS)
                goto bad_params;
            seg->capture = 1;
            seg->text = strndup(p + 1, len - 2);
            seg->len = len - 2;
        } else {
            if (memchr(p, '{', len) || memchr(p, '}', len))
                goto bad_brace;
            seg->text = strndup(p, len);
            seg->len = len;
        }
        rt.nsegs++;
        if (!seg->text)
            goto nomem;
        if (!end)
            break;
        p = end + 1;
    }
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 16;
        struct route *n = realloc(r->routes, (size_t)cap * sizeof *n);
        if (!n)
            goto nomem;
        r->routes = n;
        r->cap = cap;
    }
    rt.pattern = strdup(pattern);
    if (!rt.pattern)
        goto nomem;
    r->routes[r->n++] = rt;
    return 0;

bad_too_long:
    error_set(err, BG_EINVAL, "route \"%s\": more than %d segments", pattern, ROUTE_MAX_SEGS);
    goto fail;
bad_params:
    error_set(err, BG_EINVAL, "route \"%s\": more than %d captures", pattern, ROUTE_MAX_PARAMS);
    goto fail;
bad_brace:
    error_set(err, BG_EINVAL, "route \"%s\": a capture must be a whole segment like {name}",
              pattern);
    goto fail;
nomem:
    error_set(err, BG_ENOMEM, "route \"%s\": out of memory", pattern);
fail:
    for (int s = 0; s < rt.nsegs; s++)
        free(rt.segs[s].text);
    return -err->code;
}

static int router_route_matches(const struct route *rt, const char *path, size_t len, struct route_match *m)
{
    if (len == 0 || path[0] != '/')
        return 0;
    const char *p = path + 1, *end = path + len;
    m->nparams = 0;
    for (int s = 0; s < rt->nsegs; s++) {
        const char *slash = memchr(p, '/', (size_t)(end - p));
        const char *segend = slash ? slash : end;
        size_t n = (size_t)(segend - p);
        const struct route_seg *seg = &rt->segs[s];
        if (seg->capture) {
            if (n == 0)
                return 0;
            m->params[m->nparams++] = (struct route_param){seg->text, p, n};
        } else if (n != seg->len || memcmp(p, seg->text, n) != 0) {
            return 0;
        }
        if (s == rt->nsegs - 1)
            return slash == NULL;
        if (!slash)
            return 0;
        p = slash + 1;
    }
    return 0;
}

static enum router_result router_match_at(const struct router *r, int method, const char *path,
                                          size_t path_len, route_handler_fn *fn, void **ctx,
                                          struct route_match *m, int *allowed, int *index);

enum router_result router_match(const struct router *r, int method, const char *path,
                                size_t path_len, route_handler_fn *fn, void **ctx,
                                struct route_match *m, int *allowed)
{
    int index;
    return router_match_at(r, method, path, path_len, fn, ctx, m, allowed, &index);
}

/* router_match, and the index of the route found. */
static enum router_result router_match_at(const struct router *r, int method, const char *path,
                                          size_t path_len, route_handler_fn *fn, void **ctx,
                                          struct route_match *m, int *allowed, int *index)
{
    int allow = 0;
    struct route_match tmp;
    for (int i = 0; i < r->n; i++) {
        const struct route *rt = &r->routes[i];
        if (!router_route_matches(rt, path, path_len, &tmp))
            continue;
        if (rt->methods & method) {
            *fn = rt->fn;
            *ctx = rt->ctx;
            *m = tmp;
            m->pattern = rt->pattern;
            *index = i;
            return ROUTER_FOUND;
        }
        allow |= rt->methods;
    }
    if (allowed)
        *allowed = allow;
    return allow ? ROUTER_METHOD_NOT_ALLOWED : ROUTER_NOT_FOUND;
}

const struct route_param *route_match_param(const struct route_match *m, const char *name)
{
    for (int i = 0; i < m->nparams; i++)
        if (strcmp(m->params[i].name, name) == 0)
            return &m->params[i];
    return NULL;
}

void router_format_allow(int methods, char *out, size_t cap)
{
    static const struct {
        int bit;
        const char *name;
    } names[] = {{HTTP_M_GET, "GET"},         {HTTP_M_HEAD, "HEAD"},   {HTTP_M_POST, "POST"},
                 {HTTP_M_PUT, "PUT"},         {HTTP_M_DELETE, "DELETE"},
                 {HTTP_M_OPTIONS, "OPTIONS"}, {HTTP_M_PATCH, "PATCH"}};
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!(methods & names[i].bit))
            continue;
        size_t n = strlen(names[i].name) + (used ? 2 : 0);
        if (used + n + 1 > cap)
            break;
        if (used) {
            memcpy(out + used, ", ", 2);
            used += 2;
        }
        memcpy(out + used, names[i].name, strlen(names[i].name));
        used += strlen(names[i].name);
        out[used] = '\0';
    }
}

/* Where req goes: a route of router_add (or 404/405), else a prefix route. */
struct router_lookup {
    enum router_result res;
    route_handler_fn fn;
    void *ctx;
    struct route_match m;
    int allowed;
    const struct prefix_route *pr;   /* set when no route of router_add matched the path */
    int index;                       /* the route found (ROUTER_FOUND), in r->routes */
};

static void router_lookup(const struct router *r, const struct http_request *req, struct router_lookup *l)
{
    size_t len;
    const char *path = http_request_path(req, &len);
    /* Routed once already at its headers (router_guard_early): that route
     * again, not a scan of the table a second time on every request with
     * a body. */
    int hint = req->route_hint - 1;
    if (hint >= 0 && hint < r->n && router_route_matches(&r->routes[hint], path, len, &l->m)) {
        l->res = ROUTER_FOUND;
        l->fn = r->routes[hint].fn;
        l->ctx = r->routes[hint].ctx;
        l->m.pattern = r->routes[hint].pattern;
        l->allowed = 0;
        l->pr = NULL;
        l->index = hint;
        return;
    }
    l->allowed = 0;
    l->res = router_match_at(r, http_request_method(req), path, len, &l->fn, &l->ctx, &l->m,
                             &l->allowed, &l->index);
    l->pr = l->res == ROUTER_NOT_FOUND ? router_prefix_match(r, path, len) : NULL;
}

int router_streams(const struct router *r, const struct http_request *req)
{
    /* Asked at the end of every request's headers: the prefixes first (a
     * few memcmp), the route table only when one of them matches, since a
     * route of router_add still wins over a prefix. */
    size_t len;
    const char *path = http_request_path(req, &len);
    if (r->nprefixes == 0 || !router_prefix_match(r, path, len))
        return 0;
    struct router_lookup l;
    router_lookup(r, req, &l);
    return l.pr != NULL;
}

/* The pattern of the first route of router_add whose path matches, any
 * method; NULL: none. */
static const char *router_path_pattern(const struct router *r, const char *path, size_t len)
{
    struct route_match tmp;
    for (int i = 0; i < r->n; i++)
        if (router_route_matches(&r->routes[i], path, len, &tmp))
            return r->routes[i].pattern;
    return NULL;
}

void router_style(const struct router *r, struct http_request *req)
{
    if (!r || !r->style)
        return;
    size_t len;
    const char *path = http_request_path(req, &len);
    const char *pattern = router_path_pattern(r, path, len);
    const struct prefix_route *pr = pattern ? NULL : router_prefix_match(r, path, len);
    if (pattern || pr)
        r->style(req, pattern ? pattern : pr->prefix, r->style_ctx);
}

/* PROPFIND, TRACE, ...: known to HTTP, served by no route here (RFC 9110
 * 15.6.2), as an unknown token is (parse.c). */
static void router_no_method(struct http_request *req)
{
    http_respond_error(req, 501, NULL, "method %s: no route serves it (" HTTP_SERVED_METHODS
                       " are served)", http_request_method_name(req));
}

/* The route's captures with their %-escapes decoded (RFC 3986 2.1: any
 * character may be sent escaped; TF Serving decodes "sc%61l", which was
 * 404 unknown model here), into the request's own room so that they live
 * as long as it: handlers keep copies of the match. Those without an
 * escape stay where they are, in the path. 0, or -1 after answering 400. */
static int router_decode_params(struct http_request *req, struct route_match *m)
{
    size_t used = 0;
    for (int i = 0; i < m->nparams; i++) {
        struct route_param *p = &m->params[i];
        if (!memchr(p->value, '%', p->len))
            continue;
        if (!req->params_decoded && !(req->params_decoded = malloc(HTTP_PARAMS_DECODED_MAX))) {
            http_respond_error(req, 503, NULL, "out of memory");
            return -1;
        }
        char *out = req->params_decoded + used;
        int n = http_pct_decode(p->value, p->len, out, HTTP_PARAMS_DECODED_MAX - used);
        if (n < 0) {
            http_respond_error(req, 400, NULL, "{%s} in the path: a malformed %%-escape, one "
                               "decoding to NUL, or longer than %d bytes decoded", p->name,
                               HTTP_PARAMS_DECODED_MAX);
            return -1;
        }
        p->value = out;
        p->len = (size_t)n;
        used += (size_t)n;
    }
    return 0;
}

/* Routes req: the handler to call (true), or req answered (404, 405, 501,
 * 400 for a capture that does not decode, the guard's refusal). */
static bool router_route(const struct router *r, struct http_request *req,
                         struct router_lookup *l)
{
    size_t len;
    const char *path = http_request_path(req, &len);
    router_lookup(r, req, l);
    if (l->pr) {
        l->m.nparams = 0;
        l->m.pattern = l->pr->prefix;
        l->fn = l->pr->fn;
        l->ctx = l->pr->ctx;
        if (r->style)
            r->style(req, l->m.pattern, r->style_ctx);
        return req->guarded || !r->guard || r->guard(req, &l->m, r->guard_ctx);
    }
    switch (l->res) {
    case ROUTER_FOUND:
        if (r->style)
            r->style(req, l->m.pattern, r->style_ctx);
        if (router_decode_params(req, &l->m) < 0)
            return false;
        return req->guarded || !r->guard || r->guard(req, &l->m, r->guard_ctx);
    case ROUTER_METHOD_NOT_ALLOWED: {
        router_style(r, req);
        if (http_request_method(req) == HTTP_M_OTHER) {
            router_no_method(req);
            return false;
        }
        char allow[96], hdr[128];
        router_format_allow(l->allowed, allow, sizeof allow);
        snprintf(hdr, sizeof hdr, "Allow: %s\r\n", allow);
        http_respond_error(req, 405, hdr, "method %s is not allowed on %.*s (allowed: %s)",
                           http_request_method_name(req), (int)(len > 200 ? 200 : len), path,
                           allow);
        return false;
    }
    case ROUTER_NOT_FOUND:
    default:
        if (http_request_method(req) == HTTP_M_OTHER) {
            router_no_method(req);   /* on any path: the method, not the path, is why */
            return false;
        }
        if (r->style)
            r->style(req, NULL, r->style_ctx);
        http_respond_error(req, 404, NULL, "no route for %.*s", (int)(len > 200 ? 200 : len),
                           path);
        return false;
    }
}

void router_dispatch(const struct router *r, struct http_request *req)
{
    struct router_lookup l;
    if (router_route(r, req, &l))
        l.fn(req, &l.m, l.ctx);
}

bool router_guard_early(const struct router *r, struct http_request *req)
{
    struct router_lookup l;
    if (!router_route(r, req, &l))
        return false;
    req->guarded = true;
    if (!l.pr)
        req->route_hint = l.index + 1;
    return true;
}

bool router_precheck(const struct router *r, struct http_request *req)
{
    struct router_lookup l;
    return router_route(r, req, &l) &&
           (!r->precheck || l.pr || r->precheck(req, &l.m, r->precheck_ctx));
}
