/* api_debug.c - test hooks behind the debug_endpoints config switch.
 *
 * /debug/delay answers after a timer, exercising the deferred-answer path
 * that model inference takes (pipelined answers produced out of order, drain
 * with requests in flight, clients that leave mid-request). /debug/echo
 * returns the decoded body (chunked uploads, 100-continue, body limits). */
#include "api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

struct delayed {
    struct http_request *req;
    struct event *ev;
    char body[256];
};

static void delayed_finish(struct delayed *d)
{
    event_free(d->ev);
    http_respond(d->req, 200, "application/json", d->body, strlen(d->body), NULL);
    free(d);
}

static void on_delay(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    delayed_finish(arg);
}

static void on_delay_abort(struct http_request *req, void *arg)
{
    (void)req;
    struct delayed *d = arg;
    event_del(d->ev);
    delayed_finish(d);
}

/* Value of key in a query string like "ms=10&id=a"; copies into out. */
static int query_get(const char *q, size_t qlen, const char *key, char *out, size_t cap)
{
    size_t klen = strlen(key);
    const char *p = q, *end = q + qlen;
    while (p && p < end) {
        const char *amp = memchr(p, '&', (size_t)(end - p));
        const char *pe = amp ? amp : end;
        if ((size_t)(pe - p) > klen && memcmp(p, key, klen) == 0 && p[klen] == '=') {
            size_t n = (size_t)(pe - p) - klen - 1;
            if (n >= cap)
                return -1;
            memcpy(out, p + klen + 1, n);
            out[n] = '\0';
            return 0;
        }
        p = amp ? amp + 1 : NULL;
    }
    return -1;
}

static void debug_delay(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    (void)ctx;
    size_t qlen = 0;
    const char *q = http_request_query(req, &qlen);
    char ms_s[16] = "0", id[64] = "";
    if (q) {
        query_get(q, qlen, "ms", ms_s, sizeof ms_s);
        query_get(q, qlen, "id", id, sizeof id);
    }
    char *end;
    long ms = strtol(ms_s, &end, 10);
    if (*end || ms < 0 || ms > 600000) {
        http_respond_error(req, 400, NULL, "query parameter ms: must be 0..600000");
        return;
    }
    for (char *p = id; *p; p++)   /* keep the echo valid JSON */
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = '_';
    struct delayed *d = calloc(1, sizeof *d);
    if (!d || !(d->ev = evtimer_new(http_request_event_base(req), on_delay, d))) {
        free(d);
        http_respond_error(req, 500, NULL, "out of memory");
        return;
    }
    d->req = req;
    snprintf(d->body, sizeof d->body, "{\"delayed_ms\":%ld,\"id\":\"%s\"}", ms, id);
    http_request_on_abort(req, on_delay_abort, d);
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(d->ev, &tv);
}

static void debug_echo(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    (void)ctx;
    size_t len, ctlen;
    const char *body = http_request_body(req, &len);
    const char *ct = http_request_header(req, "Content-Type", &ctlen);
    char ctype[128] = "application/octet-stream";
    if (ct && ctlen > 0 && ctlen < sizeof ctype && !memchr(ct, '\r', ctlen)) {
        memcpy(ctype, ct, ctlen);
        ctype[ctlen] = '\0';
    }
    http_respond(req, 200, ctype, body, len, NULL);
}

int api_debug_register(struct router *r, struct error *err)
{
    int rc;
    if ((rc = router_add(r, HTTP_M_GET, "/debug/delay", debug_delay, NULL, err)) ||
        (rc = router_add(r, HTTP_M_POST | HTTP_M_PUT, "/debug/echo", debug_echo, NULL, err)))
        return rc;
    return 0;
}
