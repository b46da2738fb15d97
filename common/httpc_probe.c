/* httpc_probe.c - active health probes (httpc.h: httpc_prober_*): one
 * timer on the owner's event base sends `GET path` to each target every
 * interval; the answer decides whether the target takes calls. Used by the
 * upstream backend (per model), the reverse proxy (per route) and LLM pools
 * (serving/llmpool.c), whose probe is the metrics scrape: its body goes to
 * the owner's sink. */
#include "common/httpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/httpc_impl.h"
#include "common/log.h"

/* A metrics page is tens of KiB; one much larger is not one. */
#define PROBE_BODY_MAX (4u << 20)

struct probe {
    struct httpc_prober *pr;
    struct httpc_target *t;
    struct httpc_pool *pool;          /* its own: a probe never waits for a call's connection */
    struct httpc_call *call;          /* the probe in flight, or NULL */
    int status;
    int index;
    struct buf body;                  /* with a sink: the answer so far */
};

struct httpc_prober {
    struct event *tick;
    char path[512];
    char who[300];                    /* "model m", "route /x/": names the owner in logs */
    httpc_probe_sink *sink;
    void *sink_arg;
    httpc_probe_judge *judge;
    void *judge_arg;
    int n;
    struct probe probes[];
};

/* One probe's end: the target's health (httpc.h: one failure in a row is
 * not yet enough; httpc_target_probe_result logs a change), and the owner's sink: the
 * answer's status and body, or status 0 and no body when there was none. */
static void httpc_probe_settle(struct probe *p, enum httpc_probe_result r, const char *why)
{
    struct httpc_prober *pr = p->pr;
    p->call = NULL;
    httpc_target_probe_result(p->t, r, why);   /* logs a change, naming pr->who's target */
    if (pr->sink)
        pr->sink(pr->sink_arg, p->index, p->status, p->status ? p->body.data : NULL,
                 p->status ? p->body.len : 0);
    buf_reset(&p->body);
    buf_shrink(&p->body, 64 * 1024);
}

static int httpc_probe_on_head(void *arg, const struct httpc_head *h)
{
    struct probe *p = arg;
    p->status = h->status;
    return 0;
}

static int httpc_probe_on_body(void *arg, const char *data, size_t len)
{
    struct probe *p = arg;
    if (!p->pr->sink && !p->pr->judge)
        return 0;
    if (p->body.len + len > PROBE_BODY_MAX || buf_append(&p->body, data, len) < 0) {
        /* Over the cap (or no memory): this probe fails; returning -1
         * ends the call, and nothing more is called for it. */
        httpc_target_count_failure(p->t, HTTPC_FAIL_MALFORMED);
        p->status = 0;
        httpc_probe_settle(p, HTTPC_PROBE_FAIL, "answer over 4 MiB");
        return -1;
    }
    return 0;
}

static void httpc_probe_on_done(void *arg)
{
    struct probe *p = arg;
    char why[160];
    snprintf(why, sizeof why, "HTTP %d", p->status);
    bool pass = p->status == 200 &&
                (!p->pr->judge ||
                 p->pr->judge(p->pr->judge_arg, p->body.data ? p->body.data : "", p->body.len,
                              why, sizeof why));
    httpc_probe_settle(p, pass ? HTTPC_PROBE_PASS : HTTPC_PROBE_FAIL, why);
}

static void httpc_probe_on_error(void *arg, enum httpc_fail why, const char *msg)
{
    struct probe *p = arg;
    p->status = 0;
    /* Nothing listens there: no reason to wait for more failures. */
    httpc_probe_settle(p, why == HTTPC_FAIL_CONNECT ? HTTPC_PROBE_UNREACHABLE : HTTPC_PROBE_FAIL,
                       msg);
}

static const struct httpc_cb probe_cb = {
    .on_head = httpc_probe_on_head,
    .on_body = httpc_probe_on_body,
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
            httpc_target_count_failure(p->t, HTTPC_FAIL_TIMEOUT);
            p->status = 0;
            httpc_probe_settle(p, HTTPC_PROBE_FAIL, "no answer in time");
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
    return httpc_prober_new_sink(base, ts, n, path, interval_ms, who, NULL, NULL);
}

struct httpc_prober *httpc_prober_new_sink(struct event_base *base,
                                           struct httpc_target *const *ts, int n,
                                           const char *path, int interval_ms, const char *who,
                                           httpc_probe_sink *sink, void *sink_arg)
{
    struct httpc_prober *pr = calloc(1, sizeof *pr + (size_t)n * sizeof pr->probes[0]);
    if (!pr)
        return NULL;
    snprintf(pr->path, sizeof pr->path, "%s", path);
    snprintf(pr->who, sizeof pr->who, "%s", who);
    pr->sink = sink;
    pr->sink_arg = sink_arg;
    for (int i = 0; i < n; i++) {
        pr->probes[i] = (struct probe){.pr = pr, .t = ts[i], .index = i};
        if (!(pr->probes[i].pool = httpc_pool_new(ts[i], base, 1, 1))) {
            httpc_prober_free(pr);
            return NULL;
        }
        httpc_pool_mark_probe(pr->probes[i].pool);
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

void httpc_prober_set_judge(struct httpc_prober *pr, httpc_probe_judge *judge, void *arg)
{
    pr->judge = judge;
    pr->judge_arg = arg;
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
        buf_free(&pr->probes[i].body);
    }
    free(pr);
}
