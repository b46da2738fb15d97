/* proxy.c - see proxy.h.
 *
 * One proxy_call per forwarded request, on the request's IO thread:
 *
 *   client headers --proxy_forward--> head upstream (hop-by-hop dropped)
 *   client body    --proxy_on_client_body--> upstream, re-framed; the client's body
 *                                      pauses while 256 KiB wait unsent
 *   upstream head  --proxy_call_on_head----> http_respond_begin (headers filtered)
 *   upstream body  --proxy_call_on_body----> http_respond_write; the upstream read
 *                                      pauses while 256 KiB wait for the client
 *   upstream done  --proxy_call_on_done----> http_respond_finish
 *
 * Errors before the answer's head become 502 (504 past timeout_ms); after
 * it, the client's connection is closed short (a truncated answer must not
 * look complete). Which server, the timer and repeats after a refused
 * connect or a lost reused connection are the upstream-call driver's
 * (common/upcall.h); the proxy keeps the request's bytes for a repeat while
 * they fit in PROXY_HIGH_WATER. */
#include "gateway/proxy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/event.h>

#include "common/buf.h"
#include "common/fieldlist.h"
#include "common/httpc.h"
#include "common/list.h"
#include "common/log.h"
#include "common/upcall.h"
#include "gateway/auth.h"

/* Unsent bytes that pause the other side, both directions. */
#define PROXY_HIGH_WATER (256u << 10)

struct proxy;

struct proxy_route {
    struct proxy *p;
    char prefix[256];
    bool strip;
    int pipeline;
    bool idempotent;                        /* POSTs may be repeated too */
    char health_path[256];
    int health_interval_ms;
    struct httpc_prober *prober;            /* active probes (health_path set), from proxy_start */
    struct httpc_target *targets[CONFIG_MAX_PROXY_URLS];
    int ntargets;
};

struct pool_ent {
    const struct httpc_target *t;
    struct httpc_pool *pool;
};

struct proxy_call;

/* What one IO thread holds: its pools, its calls in flight, spare calls. */
struct proxy_thread {
    struct pool_ent *pools;
    int npools, cap;
    struct list live;                       /* proxy_call.link: calls in flight */
    struct list spare;                      /* proxy_call.link: calls kept for reuse */
    int nspare;
};

struct proxy {
    struct config_proxy cfg;
    const struct auth *auth;                /* the tenants' keys: not passed on; NULL none */
    struct proxy_route routes[CONFIG_MAX_PROXY_ROUTES];
    int nroutes;
    struct proxy_thread *threads;
    int nthreads;
};

struct proxy_call {
    struct proxy *p;
    struct proxy_thread *pt;
    struct list link;                       /* pt->live, or pt->spare */
    struct http_request *req;
    struct httpc_target *const *targets;   /* the route's; [0] names the Host */
    struct upcall *up;                      /* the upstream call: target, timer, repeats */
    int pipeline;                           /* the route's proxy.routes[].pipeline (1: off) */
    struct buf sent;                        /* everything sent upstream, while a retry may need it */
    bool body_end;                          /* the client's body is complete */
    bool chunked_up;                        /* the body goes upstream chunk-framed */
    bool head_seen;                         /* the answer's head arrived */
    int status;
    /* A tapped call (proxy_forward_tapped): its one target, the tap. */
    struct httpc_target *one[1];
    const struct proxy_tap *tap;
    void *tap_arg;
    struct buf out;                         /* what the tap gives the client, per piece */
};

static const struct upcall_ops call_ops;

/* ---- per-thread state ---- */

/* The thread's pool for t (made on first use; a target belongs to one route,
 * so `pipeline` is the same on every call). */
static struct httpc_pool *proxy_thread_pool(struct proxy *p, struct proxy_thread *pt,
                                      struct httpc_target *t, struct event_base *base, int pipeline)
{
    for (int i = 0; i < pt->npools; i++) {
        if (pt->pools[i].t == t)
            return pt->pools[i].pool;
        /* An unloaded LLM pool's servers: their connections go once idle.
         * The pool's reference keeps the target (and so this key) alive
         * until then, so a new target never meets a stale entry. */
        if (httpc_target_retired(pt->pools[i].t) && httpc_pool_open(pt->pools[i].pool) == 0) {
            httpc_pool_free(pt->pools[i].pool);
            pt->pools[i--] = pt->pools[--pt->npools];
        }
    }
    if (pt->npools == pt->cap) {
        int cap = pt->cap ? pt->cap * 2 : 8;
        struct pool_ent *n = realloc(pt->pools, (size_t)cap * sizeof *n);
        if (!n)
            return NULL;
        pt->pools = n;
        pt->cap = cap;
    }
    struct httpc_pool *pool = httpc_pool_new(t, base, p->cfg.max_idle, pipeline);
    if (pool) {
        httpc_pool_set_connect_timeout(pool, p->cfg.connect_timeout_ms);
        pt->pools[pt->npools++] = (struct pool_ent){t, pool};
    }
    return pool;
}

static struct proxy_call *proxy_call_new(struct proxy *p, struct proxy_thread *pt,
                                         struct event_base *base)
{
    struct list *q = list_first(&pt->spare);
    struct proxy_call *c = q ? list_data(q, struct proxy_call, link) : NULL;
    if (c) {
        list_remove(&c->link);
        pt->nspare--;
    } else {
        c = calloc(1, sizeof *c);
        if (!c)
            return NULL;
        c->up = upcall_new(base, &call_ops, c, p->cfg.timeout_ms, "proxy.timeout_ms");
        if (!c->up) {
            free(c);
            return NULL;
        }
    }
    struct upcall *up = c->up;
    struct buf sent = c->sent, out = c->out;
    buf_reset(&sent);
    buf_reset(&out);
    memset(c, 0, sizeof *c);
    c->up = up;
    c->sent = sent;
    c->out = out;
    c->p = p;
    c->pt = pt;
    list_insert_tail(&pt->live, &c->link);
    return c;
}

/* The call is over: its request is answered (or being), its connection gone. */
static void proxy_call_free(struct proxy_call *c)
{
    struct proxy_thread *pt = c->pt;
    upcall_stop(c->up);
    list_remove(&c->link);
    if (pt->nspare < 64) {
        buf_shrink(&c->sent, 16 * 1024);
        buf_shrink(&c->out, 16 * 1024);
        list_insert_head(&pt->spare, &c->link);
        pt->nspare++;
    } else {
        upcall_free(c->up);
        buf_free(&c->sent);
        buf_free(&c->out);
        free(c);
    }
}

/* A tapped call is over: the tap learns how, once. Returns the tap's answer
 * (1: it took a failed request over). The call is freed first, so that the
 * tap may start another for the same request. */
static int proxy_call_end(struct proxy_call *c, const struct proxy_outcome *o)
{
    const struct proxy_tap *tap = c->tap;
    void *arg = c->tap_arg;
    http_request_on_abort(c->req, NULL, NULL);
    http_request_on_drain(c->req, NULL, NULL);
    proxy_call_free(c);
    return tap->end(arg, o);
}

/* Ends the call with an error: a status while nothing was answered, else a
 * cut-off answer. The message names the server, unless the fault is the
 * client's (its body: `client`). */
static void proxy_call_fail_as(struct proxy_call *c, int status, const char *msg, bool client)
{
    struct http_request *req = c->req;
    const char *url = upcall_url(c->up);
    if (c->head_seen) {
        log_debug("proxy: %s: %s after the answer began; closing the client's connection", url,
                  msg);
        if (c->tap)
            proxy_call_end(c, &(struct proxy_outcome){.status = c->status, .broken = true});
        else
            proxy_call_free(c);
        http_respond_finish(req, 1);
        return;
    }
    char text[400];
    if (client)
        snprintf(text, sizeof text, "%s", msg);
    else
        snprintf(text, sizeof text, "%s: %s", upcall_name(c->up), msg);
    if (c->tap) {
        struct proxy_outcome o = {.fail_status = status, .msg = text};
        if (proxy_call_end(c, &o))
            return;   /* the tap tries again */
    } else {
        proxy_call_free(c);
    }
    http_respond_error(req, status, NULL, "%s", text);
}

static void proxy_call_fail(struct proxy_call *c, int status, const char *msg)
{
    proxy_call_fail_as(c, status, msg, false);
}

/* ---- the request upstream ---- */

/* The hot path appends pieces, not printf formats: a proxied request copies
 * every header once each way, and vfprintf was a sixth of the proxy's
 * user time. */
static void proxy_put(struct buf *b, const char *s, size_t n) { buf_append(b, s, n); }
#define PUT_LIT(b, lit) proxy_put((b), (lit), sizeof(lit) - 1)
static void proxy_puts(struct buf *b, const char *s) { buf_append(b, s, strlen(s)); }
static void proxy_put_header(struct buf *b, const char *n, size_t nl, const char *v, size_t vl)
{
    if (buf_reserve(b, nl + vl + 4) < 0)
        return;
    memcpy(b->data + b->len, n, nl);
    b->len += nl;
    b->data[b->len++] = ':';
    b->data[b->len++] = ' ';
    memcpy(b->data + b->len, v, vl);
    b->len += vl;
    b->data[b->len++] = '\r';
    b->data[b->len++] = '\n';
}

static bool proxy_name_is(const char *n, size_t len, const char *want)
{
    return strlen(want) == len && strncasecmp(n, want, len) == 0;
}

/* Does the Connection header's list name this field? */
static bool proxy_listed_in(const char *conn, size_t clen, const char *n, size_t len)
{
    const char *p = conn, *end = conn + clen, *tok;
    size_t tl;
    while (fieldlist_next(&p, end, &tok, &tl))
        if (tl == len && strncasecmp(tok, n, len) == 0)
            return true;
    return false;
}

/* RFC 9110 7.6.1 and 9112: fields that describe one connection, not the message. */
static bool proxy_hop_by_hop(const char *n, size_t len, const char *conn, size_t clen)
{
    static const char *const fixed[] = {"Connection", "Keep-Alive", "Proxy-Connection", "TE",
                                        "Trailer", "Transfer-Encoding", "Upgrade", NULL};
    for (int i = 0; fixed[i]; i++)
        if (proxy_name_is(n, len, fixed[i]))
            return true;
    return conn && proxy_listed_in(conn, clen, n, len);
}

/* Every Connection line's value, joined as one list (RFC 9110 5.3: lines
 * given twice are one field, and 7.6.1: each name in it is dropped; only
 * one line was read, so a field named by the other passed). */
struct proxy_conn_list {
    char text[1024];
    size_t len;
};

static void proxy_conn_add(struct proxy_conn_list *l, const char *n, size_t nl, const char *v,
                           size_t vl)
{
    if (!proxy_name_is(n, nl, "Connection") || !vl)
        return;
    size_t room = sizeof l->text - l->len;   /* past 1 KiB of names, the rest is not read */
    if (room < 3)
        return;
    if (vl > room - 2)
        vl = room - 2;
    if (l->len)
        l->text[l->len++] = ',';
    memcpy(l->text + l->len, v, vl);
    l->len += vl;
}

/* A tapped call's own head fields: its body is the handler's, and the tap
 * reads the answer, which must not come compressed. */
static bool proxy_tapped_skip(const char *n, size_t len)
{
    return proxy_name_is(n, len, "Accept-Encoding") || proxy_name_is(n, len, "Content-Type") ||
           proxy_name_is(n, len, "Content-Encoding");
}

/* Every value of the request's header `name`, in order, each followed by
 * ", ": lines given twice are one list (RFC 9110 5.3), and the proxy's own
 * entry goes last. */
static void proxy_put_list(struct buf *b, struct http_request *req, const char *name)
{
    int n = http_request_header_count(req);
    for (int i = 0; i < n; i++) {
        const char *hn, *val;
        size_t nl, vl;
        http_request_header_at(req, i, &hn, &nl, &val, &vl);
        if (proxy_name_is(hn, nl, name) && vl > 0) {
            proxy_put(b, val, vl);
            PUT_LIT(b, ", ");
        }
    }
}

static int proxy_build_head(struct proxy_call *c, struct buf *b, const char *method,
                            const char *path, size_t path_len)
{
    struct http_request *req = c->req;
    size_t qlen, clen = 0, hlen = 0;
    const char *q = http_request_query(req, &qlen);
    struct proxy_conn_list cl = {.len = 0};
    for (int i = 0, nh = http_request_header_count(req); i < nh; i++) {
        const char *hn, *hv;
        size_t hnl, hvl;
        http_request_header_at(req, i, &hn, &hnl, &hv, &hvl);
        proxy_conn_add(&cl, hn, hnl, hv, hvl);
    }
    const char *conn = cl.len ? cl.text : NULL;
    clen = cl.len;
    const char *host = http_request_header(req, "Host", &hlen);
    /* Host names the service, as nginx's proxy_pass does: the first URL
     * (a retry on another server sends the same bytes). */
    proxy_puts(b, method ? method : http_request_method_name(req));
    PUT_LIT(b, " ");
    proxy_put(b, path, path_len);
    if (q) {
        PUT_LIT(b, "?");
        proxy_put(b, q, qlen);
    }
    PUT_LIT(b, " HTTP/1.1\r\nHost: ");
    proxy_puts(b, httpc_target_authority(c->targets[0]));
    PUT_LIT(b, "\r\n");
    int n = http_request_header_count(req);
    for (int i = 0; i < n; i++) {
        const char *name, *val;
        size_t nl, vl;
        http_request_header_at(req, i, &name, &nl, &val, &vl);
        if (proxy_hop_by_hop(name, nl, conn, clen) || proxy_name_is(name, nl, "Host") ||
            proxy_name_is(name, nl, "Content-Length") || proxy_name_is(name, nl, "Expect") ||
            (c->tap && proxy_tapped_skip(name, nl)))
            continue;   /* Expect was answered here; the length is ours to state */
        /* A key some tenant holds here is this server's credential: it
         * does not travel on, in either header, whichever named the
         * tenant (a valid X-Api-Key went on behind an unknown Bearer
         * token, which Authorization's precedence had read instead).
         * Another scheme (Basic), or a key no tenant holds (the server's
         * behind), does travel. */
        if (c->p->auth && auth_header_holds_key(c->p->auth, req, name, nl, val, vl))
            continue;
        /* Ours to state below: the lists are extended, and the client's
         * own Host and scheme replaced (a client's "X-Forwarded-Proto:
         * https" left in front of ours would pass for HTTPS with a server
         * that reads the first). */
        if (proxy_name_is(name, nl, "X-Forwarded-For") || proxy_name_is(name, nl, "Via") ||
            proxy_name_is(name, nl, "X-Forwarded-Host") ||
            proxy_name_is(name, nl, "X-Forwarded-Proto"))
            continue;
        proxy_put_header(b, name, nl, val, vl);
    }
    char peer[64];
    http_request_peer(req, peer, sizeof peer);
    PUT_LIT(b, "X-Forwarded-For: ");
    proxy_put_list(b, req, "X-Forwarded-For");
    proxy_puts(b, peer[0] ? peer : "unknown");
    if (host) {
        PUT_LIT(b, "\r\nX-Forwarded-Host: ");
        proxy_put(b, host, hlen);
    }
    PUT_LIT(b, "\r\nX-Forwarded-Proto: http\r\nVia: ");
    proxy_put_list(b, req, "Via");
    proxy_puts(b, http_request_minor(req) ? "1.1 batchgate\r\n" : "1.0 batchgate\r\n");
    if (c->tap) {
        return 0;   /* the caller states the body */
    } else if (http_request_has_body(req)) {
        int64_t len = http_request_content_length(req);
        if (len >= 0) {
            buf_appendf(b, "Content-Length: %lld\r\n", (long long)len);
        } else {
            buf_appendf(b, "Transfer-Encoding: chunked\r\n");
            c->chunked_up = true;
        }
    } else if (http_request_method(req) & (HTTP_M_POST | HTTP_M_PUT | HTTP_M_PATCH)) {
        buf_appendf(b, "Content-Length: 0\r\n");
    }
    return buf_append(b, "\r\n", 2);
}

/* upcall_ops: the thread's pool for the server of this try. */
static struct httpc_pool *proxy_call_pool(void *arg, struct httpc_target *t, int index)
{
    struct proxy_call *c = arg;
    (void)index;
    return proxy_thread_pool(c->p, c->pt, t, http_request_event_base(c->req), c->pipeline);
}

/* upcall_ops: each try sends what `sent` holds; the rest streams after. */
static int proxy_call_send(void *arg, struct upcall *u, const struct httpc_target *t)
{
    struct proxy_call *c = arg;
    (void)t;
    return upcall_send(u, c->sent.data, c->sent.len);
}

/* Bytes of the request upstream; kept in `sent` while a retry may need them
 * (up to PROXY_HIGH_WATER, then no retry). */
static int proxy_call_put(struct proxy_call *c, const char *data, size_t len)
{
    if (upcall_send(c->up, data, len) < 0)
        return -1;
    if (upcall_replayable(c->up)) {
        if (c->sent.len + len > PROXY_HIGH_WATER)
            upcall_no_replay(c->up);
        else if (buf_append(&c->sent, data, len) < 0)
            return -1;
    }
    return 0;
}

/* The client's body, piece by piece (or whole, at once). */
static void proxy_on_client_body(struct http_request *req, void *arg, const char *data, size_t len,
                           int end, int status, const char *msg)
{
    struct proxy_call *c = arg;
    (void)req;
    if (status) {   /* the client's body was bad: say so, stop the upstream */
        proxy_call_fail_as(c, status, msg, true);
        return;
    }
    if (!upcall_running(c->up))
        return;   /* cannot happen: a call without a connection is already over */
    int rc = 0;
    if (len && c->chunked_up) {
        char size[24];
        int n = snprintf(size, sizeof size, "%zx\r\n", len);
        rc = proxy_call_put(c, size, (size_t)n);
        if (rc == 0)
            rc = proxy_call_put(c, data, len);
        if (rc == 0)
            rc = proxy_call_put(c, "\r\n", 2);
    } else if (len) {
        rc = proxy_call_put(c, data, len);
    }
    if (rc == 0 && end && c->chunked_up)
        rc = proxy_call_put(c, "0\r\n\r\n", 5);
    if (rc < 0) {
        proxy_call_fail(c, 503, "out of memory");
        return;
    }
    if (end) {
        c->body_end = true;
        upcall_request_end(c->up);
        upcall_arm(c->up);
    } else if (upcall_unsent(c->up) > PROXY_HIGH_WATER) {
        /* The server reads slower than the client sends: wait for it (and
         * time it: the client's body timer is off while paused). */
        http_request_pause_body(c->req, 1);
        upcall_arm(c->up);
    }
}

/* Everything queued upstream is written: the client's body may flow again. */
static void proxy_call_on_sent(void *arg)
{
    struct proxy_call *c = arg;
    http_request_pause_body(c->req, 0);
    if (!c->body_end && !c->head_seen)
        upcall_disarm(c->up);
}

static void proxy_on_client_drain(struct http_request *req, void *arg)
{
    struct proxy_call *c = arg;
    (void)req;
    if (upcall_running(c->up)) {
        upcall_pause(c->up, false);
        upcall_arm(c->up);
    }
}

static void proxy_on_client_abort(struct http_request *req, void *arg)
{
    struct proxy_call *c = arg;
    bool begun = c->head_seen;
    if (c->tap)   /* closes the upstream connection: the answer has no taker */
        proxy_call_end(c, &(struct proxy_outcome){.status = c->status, .client_gone = true});
    else
        proxy_call_free(c);
    if (begun)
        http_respond_finish(req, 1);
    else
        http_respond_error(req, 502, NULL, "client gone");   /* discarded */
}

/* ---- the answer ---- */

static int proxy_call_on_head(void *arg, const struct httpc_head *h)
{
    struct proxy_call *c = arg;
    if (h->status == 101) {
        /* Upgrade is never sent upstream (hop-by-hop): a switch is bogus. */
        upcall_blame(c->up, HTTPC_FAIL_MALFORMED);
        proxy_call_fail(c, 502, "the server switched protocols, which the proxy does not pass on");
        return -1;
    }
    struct buf hdrs = {0};
    if (c->tap && c->tap->head(c->tap_arg, h, &hdrs) != 0) {
        buf_free(&hdrs);
        char msg[64];
        snprintf(msg, sizeof msg, "answered %d", h->status);
        if (h->status >= 500)   /* a 404 may be the request's (api_llm.c) */
            upcall_blame(c->up, HTTPC_FAIL_STATUS);
        proxy_call_fail(c, 502, msg);
        return -1;
    }
    c->head_seen = true;
    c->status = h->status;
    buf_reset(&c->sent);   /* never sent again now */
    struct proxy_conn_list cl = {.len = 0};
    for (int i = 0; i < h->nhdrs; i++)
        proxy_conn_add(&cl, h->hdrs[i].name, h->hdrs[i].name_len, h->hdrs[i].value,
                       h->hdrs[i].value_len);
    const char *conn = cl.len ? cl.text : NULL;
    size_t clen = cl.len;
    for (int i = 0; i < h->nhdrs; i++) {
        const struct httpc_header *x = &h->hdrs[i];
        if (proxy_hop_by_hop(x->name, x->name_len, conn, clen) ||
            proxy_name_is(x->name, x->name_len, "Content-Length") ||
            proxy_name_is(x->name, x->name_len, "Date") || proxy_name_is(x->name, x->name_len,
                                                                         "Server") ||
            (c->tap && proxy_name_is(x->name, x->name_len, "Content-Encoding")))
            continue;   /* framing, Date and Server are this hop's */
        proxy_put_header(&hdrs, x->name, x->name_len, x->value, x->value_len);
    }
    proxy_puts(&hdrs, h->http_minor ? "Via: 1.1 batchgate\r\n" : "Via: 1.0 batchgate\r\n");
    bool no_body = (h->status >= 100 && h->status < 200) || h->status == 204 || h->status == 304;
    int64_t len = h->chunked || c->tap ? -1 : h->content_length;
    int rc = http_respond_begin(c->req, h->status, no_body && h->status == 204 ? -1 : len,
                                no_body, hdrs.data, hdrs.len);
    buf_free(&hdrs);
    if (rc < 0) {
        proxy_call_fail(c, 502, "client gone");
        return -1;
    }
    upcall_arm(c->up);   /* from here: a stall of timeout_ms between pieces */
    return 0;
}

static int proxy_call_on_body(void *arg, const char *data, size_t len)
{
    struct proxy_call *c = arg;
    if (c->tap) {
        buf_reset(&c->out);
        if (c->tap->body(c->tap_arg, data, len, &c->out) < 0) {
            proxy_call_fail(c, 502, "the answer was refused");
            return -1;
        }
        data = c->out.data;
        len = c->out.len;
    }
    if (len && http_respond_write(c->req, data, len) < 0) {
        proxy_call_fail(c, 502, "client gone");
        return -1;
    }
    if (http_respond_buffered(c->req) > PROXY_HIGH_WATER) {
        /* The client reads slower than the server sends: its idle timeout
         * watches it now, not ours. */
        upcall_pause(c->up, true);
        upcall_disarm(c->up);
    } else {
        upcall_arm(c->up);
    }
    return 0;
}

static void proxy_call_on_done(void *arg)
{
    struct proxy_call *c = arg;
    struct http_request *req = c->req;
    if (c->status >= 500)
        upcall_blame(c->up, HTTPC_FAIL_STATUS);
    if (c->tap) {
        /* What the tap held back (an event the server did not end) goes now. */
        buf_reset(&c->out);
        c->tap->body(c->tap_arg, NULL, 0, &c->out);
        if (c->out.len)
            http_respond_write(req, c->out.data, c->out.len);
        proxy_call_end(c, &(struct proxy_outcome){.status = c->status});
    } else {
        proxy_call_free(c);
    }
    http_respond_finish(req, 0);
}

/* upcall_ops: no server gave an answer (502), none in time (504), or no
 * memory to go on (503). */
static void proxy_call_on_fail(void *arg, int code, const char *msg)
{
    proxy_call_fail(arg, code == BG_EDEADLINE ? 504 : code == BG_ENOMEM ? 503 : 502, msg);
}

static const struct upcall_ops call_ops = {
    .pool = proxy_call_pool,
    .send = proxy_call_send,
    .on_head = proxy_call_on_head,
    .on_body = proxy_call_on_body,
    .on_done = proxy_call_on_done,
    .on_fail = proxy_call_on_fail,
    .on_sent = proxy_call_on_sent,
};

/* proxy_forward with the route's pipeline depth, and whether its POSTs are
 * idempotent (proxy.routes[].idempotent). */
static void proxy_start_call(struct proxy *p, struct http_request *req,
                             struct httpc_target *const *targets,
                    int ntargets, const char *path, size_t path_len, int pipeline, bool post_idempotent)
{
    int ti = http_request_thread(req);
    if (ti < 0 || ti >= p->nthreads || ntargets <= 0) {
        http_respond_error(req, 502, NULL, "no upstream server for %.*s", (int)path_len, path);
        return;
    }
    struct proxy_call *c = proxy_call_new(p, &p->threads[ti], http_request_event_base(req));
    if (!c) {
        http_respond_error(req, 503, NULL, "out of memory");
        return;
    }
    c->req = req;
    c->targets = targets;
    c->pipeline = pipeline;
    upcall_set_timeout(c->up, p->cfg.timeout_ms, "proxy.timeout_ms");
    /* The body streams in after the head (proxy_on_client_body ends it):
     * an upstream answering early must not get its connection reused. */
    unsigned m = http_request_method(req),
             flags = (m == HTTP_M_HEAD ? HTTPC_NO_BODY : 0) | HTTPC_REQUEST_STREAMS;
    /* Only a request that is whole in its head and safe to repeat shares a
     * connection: it may be lost with the one ahead of it and sent again. */
    if (pipeline > 1 && !http_request_has_body(req) &&
        (m & (HTTP_M_GET | HTTP_M_HEAD | HTTP_M_OPTIONS)))
        flags |= HTTPC_PIPELINE;
    /* RFC 9110 9.2.2: the idempotent methods; a POST when its route says so. */
    if ((m & (HTTP_M_GET | HTTP_M_HEAD | HTTP_M_OPTIONS | HTTP_M_PUT | HTTP_M_DELETE)) ||
        ((m & HTTP_M_POST) && post_idempotent))
        flags |= UPCALL_IDEMPOTENT;
    struct error err = {0};
    if (proxy_build_head(c, &c->sent, NULL, path, path_len) < 0 ||
        upcall_start(c->up, targets, ntargets, flags, &err) < 0) {
        proxy_call_fail(c, 502, "cannot open a connection");
        return;
    }
    http_request_on_abort(req, proxy_on_client_abort, c);
    http_request_abort_on_fin(req);   /* the server's work stops with a client that closed */
    http_request_on_drain(req, proxy_on_client_drain, c);
    /* The answer is awaited once the request is all sent (proxy_on_client_body
     * arms the timer at the body's end, at once for a request without one);
     * while a body streams in, the client's own body timer watches it.
     * Last: a request dispatched whole delivers its body right here. */
    http_request_on_body(req, proxy_on_client_body, c);
}

int proxy_forward_tapped(struct proxy *p, struct http_request *req, struct httpc_target *t,
                         const char *method, const char *path, const void *body, size_t len,
                         const char *content_type, int timeout_ms, const char *timeout_name,
                         const struct proxy_tap *tap, void *arg)
{
    int ti = http_request_thread(req);
    if (ti < 0 || ti >= p->nthreads)
        return -1;
    struct proxy_call *c = proxy_call_new(p, &p->threads[ti], http_request_event_base(req));
    if (!c)
        return -1;
    c->req = req;
    c->one[0] = t;
    c->targets = c->one;
    c->pipeline = 1;
    c->tap = tap;
    c->tap_arg = arg;
    c->body_end = true;
    upcall_set_timeout(c->up, timeout_ms, timeout_name);
    struct buf *b = &c->sent;
    int rc = proxy_build_head(c, b, method, path, strlen(path));
    if (rc == 0 && content_type)
        rc = buf_appendf(b, "Content-Type: %s\r\n", content_type);
    if (rc == 0)
        rc = buf_appendf(b, "Content-Length: %zu\r\n\r\n", len);
    if (rc == 0)
        rc = buf_append(b, body, len);
    struct error err = {0};
    /* A call lost with a reused connection before its head goes again: an
     * LLM call repeated costs compute, never a wrong answer. */
    if (rc < 0 || upcall_start(c->up, c->targets, 1, UPCALL_IDEMPOTENT, &err) < 0) {
        proxy_call_fail(c, 502, rc < 0 ? "out of memory" : err.msg);
        return 0;   /* ended through the tap */
    }
    upcall_arm(c->up);
    http_request_on_abort(req, proxy_on_client_abort, c);
    http_request_abort_on_fin(req);   /* the server's work stops with a client that closed */
    http_request_on_drain(req, proxy_on_client_drain, c);
    return 0;
}

void proxy_forward(struct proxy *p, struct http_request *req, struct httpc_target *const *targets,
                   int ntargets, const char *path, size_t path_len)
{
    proxy_start_call(p, req, targets, ntargets, path, path_len, 1, false);
}

/* ---- routes ---- */

static void proxy_route_handler(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct proxy_route *r = ctx;
    (void)m;
    size_t len;
    const char *path = http_request_path(req, &len);
    char slashed[1024];
    if (r->strip) {
        size_t n = strlen(r->prefix);
        if (r->prefix[n - 1] == '/')
            n--;   /* keep the slash: "/tfs/v1" -> "/v1" */
        path += n < len ? n : len;
        len -= n < len ? n : len;
        if (len == 0) {
            path = "/", len = 1;
        } else if (path[0] != '/') {
            /* A prefix without its slash ("/api") matched "/apiary": the
             * rest is "ary", which is no request target (RFC 9112 3.2.1);
             * "/ary", as nginx makes it. The head is built before this
             * returns, so the copy may live here. */
            if (len + 1 >= sizeof slashed) {
                http_respond_error(req, 414, NULL, "the path is too long for route %s",
                                   r->prefix);
                return;
            }
            slashed[0] = '/';
            memcpy(slashed + 1, path, len);
            path = slashed, len++;
        }
    }
    proxy_start_call(r->p, req, r->targets, r->ntargets, path, len, r->pipeline, r->idempotent);
}

void proxy_set_auth(struct proxy *p, const struct auth *auth) { p->auth = auth; }

struct proxy *proxy_new(const struct config_proxy *cfg, int io_threads, struct error *err)
{
    struct proxy *p = calloc(1, sizeof *p);
    if (!p) {
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    p->cfg = *cfg;
    p->nthreads = io_threads;
    p->threads = calloc((size_t)io_threads, sizeof *p->threads);
    if (!p->threads) {
        proxy_free(p);
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < io_threads; i++) {
        list_init(&p->threads[i].live);
        list_init(&p->threads[i].spare);
    }
    for (int i = 0; i < cfg->nroutes; i++) {
        struct proxy_route *r = &p->routes[i];
        r->p = p;
        snprintf(r->prefix, sizeof r->prefix, "%s", cfg->routes[i].prefix);
        r->strip = cfg->routes[i].strip_prefix;
        r->pipeline = cfg->routes[i].pipeline;
        r->idempotent = cfg->routes[i].idempotent;
        snprintf(r->health_path, sizeof r->health_path, "%s", cfg->routes[i].health_path);
        r->health_interval_ms = cfg->routes[i].health_interval_ms;
        p->nroutes++;
        char who[300];
        snprintf(who, sizeof who, "route %s", r->prefix);
        for (int k = 0; k < cfg->routes[i].nurls; k++) {
            struct error e2 = {0};
            char name[48];
            snprintf(name, sizeof name, "proxy.routes[%d].urls[%d]", i, k);
            r->targets[k] = httpc_target_new(cfg->routes[i].hosts[k], cfg->routes[i].ports[k],
                                             who, name, &e2);
            if (!r->targets[k]) {
                error_set(err, e2.code, "proxy.routes[%d].urls[%d]: %s", i, k, e2.msg);
                proxy_free(p);
                return NULL;
            }
            r->ntargets++;
        }
    }
    return p;
}

int proxy_register(struct proxy *p, struct router *rt, struct error *err)
{
    for (int i = 0; i < p->nroutes; i++) {
        int rc = router_add_prefix(rt, p->routes[i].prefix, proxy_route_handler, &p->routes[i],
                                   err);
        if (rc)
            return rc;
    }
    return 0;
}

int proxy_start(struct proxy *p, struct event_base *base, struct error *err)
{
    for (int i = 0; i < p->nroutes; i++) {
        struct proxy_route *r = &p->routes[i];
        if (!r->health_path[0])
            continue;
        char who[300];
        snprintf(who, sizeof who, "route %s", r->prefix);
        r->prober = httpc_prober_new(base, r->targets, r->ntargets, r->health_path,
                                     r->health_interval_ms, who);
        if (!r->prober)
            return error_set(err, BG_ENOMEM, "proxy.routes[%d]: out of memory", i);
    }
    return 0;
}

void proxy_free(struct proxy *p)
{
    if (!p)
        return;
    for (int i = 0; i < p->nroutes; i++)
        httpc_prober_free(p->routes[i].prober);
    for (int i = 0; p->threads && i < p->nthreads; i++) {
        struct proxy_thread *pt = &p->threads[i];
        /* Calls still live (a forced stop): their connections close here. */
        list_splice_tail(&pt->live, &pt->spare);
        struct list *q, *tmp;
        list_foreach_safe(q, tmp, &pt->live) {
            struct proxy_call *c = list_data(q, struct proxy_call, link);
            upcall_free(c->up);
            buf_free(&c->sent);
            buf_free(&c->out);
            free(c);
        }
        for (int k = 0; k < pt->npools; k++)
            httpc_pool_free(pt->pools[k].pool);
        free(pt->pools);
    }
    free(p->threads);
    for (int i = 0; i < p->nroutes; i++)
        for (int k = 0; k < p->routes[i].ntargets; k++)
            httpc_target_free(p->routes[i].targets[k]);
    free(p);
}

int proxy_model_metadata(const struct proxy *p) { return p && p->cfg.model_metadata; }
int proxy_route_count(const struct proxy *p) { return p ? p->nroutes : 0; }
const char *proxy_route_prefix(const struct proxy *p, int i) { return p->routes[i].prefix; }
int proxy_route_targets(const struct proxy *p, int i, struct httpc_target *const **out)
{
    *out = p->routes[i].targets;
    return p->routes[i].ntargets;
}
