/* httpc_probe.c - active health probes (httpc.h: httpc_prober_*): one
 * timer on the owner's event base sends `GET path` to each target every
 * interval; the answer decides whether the target takes calls. Used by the
 * upstream backend (per model) and the reverse proxy (per route). */
#include "common/httpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/clock.h"
#include "common/log.h"

struct probe {
    struct httpc_prober *pr;
    struct httpc_target *t;
    struct httpc_pool *pool;          /* its own: a probe never waits for a call's connection */
    struct httpc_call *call;          /* the probe in flight, or NULL */
    int status;
};

struct httpc_prober {
    struct event *tick;
    char path[512];
    char who[300];                    /* "model m", "route /x/": names the owner in logs */
    int n;
    struct probe probes[];
};

static int httpc_probe_on_head(void *arg, const struct httpc_head *h)
{
    struct probe *p = arg;
    p->status = h->status;
    return 0;
}

static void httpc_probe_on_done(void *arg)
{
    struct probe *p = arg;
    p->call = NULL;
    bool ok = p->status == 200, was = httpc_target_usable(p->t, now_ns());
    httpc_target_probe_result(p->t, ok);
    if (was != ok)
        log_warn("%s: upstream %s %s (health probe: HTTP %d)", p->pr->who, httpc_target_url(p->t),
                 ok ? "is back" : "is taken out", p->status);
}

static void httpc_probe_on_error(void *arg, enum httpc_fail why, const char *msg)
{
    struct probe *p = arg;
    (void)why;
    p->call = NULL;
    if (httpc_target_usable(p->t, now_ns()))
        log_warn("%s: upstream %s is taken out (health probe: %s)", p->pr->who,
                 httpc_target_url(p->t), msg);
    httpc_target_probe_result(p->t, false);
}

static const struct httpc_cb probe_cb = {
    .on_head = httpc_probe_on_head,
    .on_done = httpc_probe_on_done,
    .on_error = httpc_probe_on_error,
};

/* Every interval: a probe still unanswered failed; send the next. */
static void httpc_probe_on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct httpc_prober *pr = arg;
    (void)fd;
    (void)what;
    for (int i = 0; i < pr->n; i++) {
        struct probe *p = &pr->probes[i];
        if (p->call) {
            httpc_abort(p->call);
            p->call = NULL;
            httpc_target_failed(p->t, HTTPC_FAIL_TIMEOUT);
            if (httpc_target_usable(p->t, now_ns()))
                log_warn("%s: upstream %s is taken out (health probe: no answer in time)",
                         pr->who, httpc_target_url(p->t));
            httpc_target_probe_result(p->t, false);
        }
        p->status = 0;
        struct error err = {0};
        p->call = httpc_open(p->pool, &probe_cb, p, 0, NULL, &err);
        if (!p->call)
            continue;   /* no socket now: the next tick tries again */
        char req[700];
        int len = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", pr->path,
                           httpc_target_authority(p->t));
        if (httpc_send(p->call, req, (size_t)len) < 0) {
            httpc_abort(p->call);
            p->call = NULL;
        }
    }
}

struct httpc_prober *httpc_prober_new(struct event_base *base, struct httpc_target *const *ts,
                                      int n, const char *path, int interval_ms, const char *who)
{
    struct httpc_prober *pr = calloc(1, sizeof *pr + (size_t)n * sizeof pr->probes[0]);
    if (!pr)
        return NULL;
    snprintf(pr->path, sizeof pr->path, "%s", path);
    snprintf(pr->who, sizeof pr->who, "%s", who);
    for (int i = 0; i < n; i++) {
        pr->probes[i] = (struct probe){.pr = pr, .t = ts[i]};
        if (!(pr->probes[i].pool = httpc_pool_new(ts[i], base, 1, 1))) {
            httpc_prober_free(pr);
            return NULL;
        }
        pr->n = i + 1;
    }
    pr->tick = event_new(base, -1, EV_PERSIST, httpc_probe_on_tick, pr);
    struct timeval tv = {interval_ms / 1000, (interval_ms % 1000) * 1000};
    if (!pr->tick || event_add(pr->tick, &tv) < 0) {
        httpc_prober_free(pr);
        return NULL;
    }
    return pr;
}

void httpc_prober_free(struct httpc_prober *pr)
{
    if (!pr)
        return;
    if (pr->tick)
        event_free(pr->tick);
    for (int i = 0; i < pr->n; i++) {
        if (pr->probes[i].call)
            httpc_abort(pr->probes[i].call);
        httpc_pool_free(pr->probes[i].pool);
    }
    free(pr);
}
