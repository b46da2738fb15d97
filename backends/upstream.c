/* upstream.c - the upstream backend: batchgate batching in front of existing
 * model servers (Triton, TF Serving, anything speaking KServe v2 or TF
 * Serving's REST predict).
 *
 * One event-loop thread per model. Its `max_inflight` slots pull batches
 * from the serving layer's feed without blocking (backend_feed.poll; the
 * feed's waker rings the loop when a request arrives), turn each batch into ONE
 * upstream call (rows concatenated along the batch dimension), and split the
 * answer back into the requests'. Keep-alive connections are pooled per URL.
 * Which URL, the call's timer and its repeats are the upstream-call
 * driver's (common/upcall.h), as for the reverse proxy: a refused connect
 * goes to another URL, a call lost with a reused connection is sent again
 * unless upstream.idempotent is false. A URL owed a trial that the batch's
 * deadline refused gets a copy of the batch, whose answer only measures it
 * (httpc_pick_copy_trial).
 *
 * The bodies and the strict reading of answers are upstream_codec.c's.
 * Failures that remain (a reset, a non-200, an answer that does not read, no
 * answer within timeout_ms) fail the batch with 502 (the feed answers 504
 * to the requests whose budget ran out meanwhile). Other batches carry on. */
#include "backends/backend_impl.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/event.h>

#include "common/buf.h"
#include "common/clock.h"
#include "common/httpc.h"
#include "common/log.h"
#include "common/upcall.h"
#include "backends/upstream_codec.h"

struct up_model;

struct up_slot {
    struct up_model *um;
    int index;                        /* the feed's slot */
    bool busy;
    struct backend_io *io;            /* the batch out (the feed's buffers) */
    struct upcall *up;                /* the call upstream: URL, timer, repeats */
    int64_t t0;
    int status;
    /* A server said the batch was not processed (503, 429): its
     * Retry-After (1 when it gave none), the most of those the call met;
     * 0 none. The batch then fails 503, not 502, if no other server takes it. */
    int retry_after_s;
    struct buf request;               /* the body, kept for a repeat */
    struct buf answer;
};

/* A copy of a batch's call sent to a server owed a trial that the batch's
 * deadline refused (httpc_pick_copy_trial): its answer only measures that
 * server. One at a time per model. */
struct up_copy {
    struct up_model *um;
    struct upcall *up;
    bool busy;
    int status;
    int rows;
    struct buf request;
    struct buf answer;
};

struct up_model {
    struct model *m;
    struct backend_feed feed;
    struct event_base *base;
    struct event *wake, *tick;
    struct httpc_prober *prober;      /* active health probes (health_interval_ms > 0) */
    pthread_t thread;
    bool running;
    _Atomic bool stopping;
    struct httpc_target *targets[MODEL_MAX_UPSTREAMS];
    struct httpc_pool *pools[MODEL_MAX_UPSTREAMS];
    int nurls;
    struct up_slot *slots;
    int nslots;
    struct up_copy copy;
};

static void upstream_poll(struct up_model *um);

/* The index of t in upstream.urls (the statistics' instance of the server). */
static int upstream_server_index(const struct up_model *um, const struct httpc_target *t)
{
    for (int i = 0; i < um->nurls; i++)
        if (um->targets[i] == t)
            return i;
    return -1;
}

/* ---- completing a batch ---- */

/* What a slot keeps of its buffers between calls: past it, one large answer
 * would hold its memory for the process's life. */
#define UPSTREAM_KEEP_BYTES (1u << 20)

static void upstream_call_release(struct upcall *up, struct buf *request, struct buf *answer)
{
    upcall_stop(up);
    buf_reset(request);
    buf_reset(answer);
    buf_shrink(request, UPSTREAM_KEEP_BYTES);
    buf_shrink(answer, UPSTREAM_KEEP_BYTES);
}

static void upstream_slot_release(struct up_slot *s)
{
    s->busy = false;
    upstream_call_release(s->up, &s->request, &s->answer);
}

/* The most an answer for the batch may take: every value printed at its
 * longest and then some (64 bytes each), and 1 MiB for the rest. A server
 * sending without end made the gateway hold all it sent. */
static size_t upstream_answer_max(const struct up_model *um, int rows)
{
    return (size_t)rows * (size_t)um->m->cfg.output.row_elems * 64 + (1u << 20);
}

/* An answer other than 200, of the call's last try: a 4xx is the batch's
 * own, or an overloaded server's 429: the server works, the failure is
 * counted all the same. Any other (a 5xx; a 204 or a 3xx, which carry no
 * answer; a 404, as the path is the configured model's: the server does
 * not have it) is the server's failure: 3 in a row take it out. */
static void upstream_judge_status(struct upcall *u, int status)
{
    if (status < 400 || status >= 500 || status == 404) {
        upcall_blame(u, HTTPC_FAIL_STATUS);
    } else {
        upcall_succeeded(u);
        httpc_target_count_failure(upcall_target(u), HTTPC_FAIL_STATUS);
    }
}

/* A 200's body read into out (rows x the output's row): the call's
 * server succeeded, or it is blamed for an answer it cannot have meant
 * (why says what). */
static bool upstream_answer_read(struct upcall *u, const struct model_config *mc,
                                 const struct buf *answer, int rows, float *out, char *why,
                                 size_t cap)
{
    if (upstream_codec_answer(mc, answer->data, answer->len, rows, out, why, cap) < 0) {
        upcall_blame(u, HTTPC_FAIL_MALFORMED);
        return false;
    }
    upcall_succeeded(u);
    return true;
}

/* The batch fails: 502, or 503 with a Retry-After when a server said it
 * was overloaded and none took it (the feed makes either 504 for requests
 * out of budget). */
static void upstream_slot_fail(struct up_slot *s, const char *why)
{
    /* why whole (160 at most): cut at 100, a parser's reason lost its
     * token ("real number overflow near"). */
    char msg[240];
    snprintf(msg, sizeof msg, "%s: %.160s", upcall_name(s->up), why);
    log_debug("model %s: upstream %s (%s): %s", s->um->m->cfg.name, upcall_url(s->up),
              upcall_name(s->up), why);
    struct up_model *um = s->um;
    int64_t ns = now_ns() - s->t0;
    s->io->retry_after_s = s->retry_after_s;
    int code = s->retry_after_s ? BG_EUNAVAILABLE : BG_EUPSTREAM;
    upstream_slot_release(s);
    um->feed.finish(um->feed.ctx, s->index, code, msg, ns);
    upstream_poll(um);
}

/* The longest Retry-After taken from a server: past it, a hint is a
 * server's maintenance window, which clients learn better from its health. */
#define UPSTREAM_RETRY_AFTER_MAX 3600

/* Retry-After's delta-seconds (RFC 9110 10.2.3), 1 to the cap; 1 when
 * absent or an HTTP-date (a clock we do not share). */
static int upstream_retry_after(const struct httpc_head *h)
{
    for (int i = 0; i < h->nhdrs; i++) {
        const struct httpc_header *x = &h->hdrs[i];
        if (x->name_len != 11 || strncasecmp(x->name, "Retry-After", 11) != 0)
            continue;
        long s = 0;
        size_t k = 0, n = x->value_len;
        while (n > 0 && (x->value[n - 1] == ' ' || x->value[n - 1] == '\t'))
            n--;   /* llhttp keeps a value's trailing whitespace */
        for (; k < n && x->value[k] >= '0' && x->value[k] <= '9'; k++)
            if (s <= UPSTREAM_RETRY_AFTER_MAX)
                s = s * 10 + (x->value[k] - '0');
        if (k == 0 || k != n)
            return 1;
        return s < 1 ? 1 : s > UPSTREAM_RETRY_AFTER_MAX ? UPSTREAM_RETRY_AFTER_MAX : (int)s;
    }
    return 1;
}

/* A 503 or 429 (not processed, RFC 9110 15.6.4, 6585 4): its Retry-After
 * (1 s at least), for which the next batches go to the other servers: as
 * loaded as they and listed first, it was asked, and refused, first by
 * each. 0 for any other status. */
static int upstream_hold(struct upcall *u, const struct httpc_head *h)
{
    if (h->status != 503 && h->status != 429)
        return 0;
    int ra = upstream_retry_after(h);
    httpc_target_hold(upcall_target(u), ra);
    return ra;
}

/* ---- the call's callbacks (httpc) ---- */

static int upstream_slot_on_head(void *arg, const struct httpc_head *h)
{
    struct up_slot *s = arg;
    s->status = h->status;
    int ra = upstream_hold(s->up, h);
    if (ra) {
        if (ra > s->retry_after_s)
            s->retry_after_s = ra;
    } else {
        s->retry_after_s = 0;   /* the last server's word decides (it was 503 after a 400) */
    }
    return 0;
}

static int upstream_slot_on_body(void *arg, const char *data, size_t len)
{
    struct up_slot *s = arg;
    size_t max = upstream_answer_max(s->um, s->io->rows);
    if (s->answer.len + len > max) {
        char why[96];
        snprintf(why, sizeof why, "an answer over %zu bytes for %d rows", max, s->io->rows);
        upcall_blame(s->up, HTTPC_FAIL_MALFORMED);
        upstream_slot_fail(s, why);   /* ends the call before httpc closes it */
        return -1;
    }
    if (buf_append(&s->answer, data, len) < 0) {
        upstream_slot_fail(s, "out of memory");   /* ends the call before httpc closes it */
        return -1;
    }
    return 0;
}

static void upstream_slot_finish(struct up_slot *s);

static void upstream_slot_on_done(void *arg) { upstream_slot_finish(arg); }

/* upcall_ops: no URL gave a usable answer, in time. */
static void upstream_slot_on_fail(void *arg, int code, const char *msg)
{
    (void)code;   /* late requests get 504 by their own deadline, the rest 502 */
    struct up_slot *s = arg;
    /* No answer from the last server tried: a timeout or a reset is what
     * is said; a refused connect reached no server, so another's 503
     * still stands (it depended on the URLs' order, and a job's lines
     * were failed for good where they should have been held). */
    if (upcall_last_fail(s->up) != HTTPC_FAIL_CONNECT)
        s->retry_after_s = 0;
    upstream_slot_fail(s, msg);
}

/* Parses the answer and hands each request its rows. */
static void upstream_slot_finish(struct up_slot *s)
{
    struct up_model *um = s->um;
    const struct model_config *mc = &um->m->cfg;
    char why[160];
    if (s->status != 200) {
        bool not_there = s->status == 404;
        upstream_judge_status(s->up, s->status);
        char said[120];
        upstream_codec_error(s->answer.data, s->answer.len, said, sizeof said);
        snprintf(why, sizeof why, "answered HTTP %d%s%s", s->status, said[0] ? ": " : "", said);
        /* Overloaded, so not processed (RFC 9110 15.6.4, 6585 4), or the
         * model is not on that server: another server may take it, as LLM
         * pools do with a 5xx (a server without the model answered 404 in
         * a millisecond, was never taken out, and took every call: 80 of
         * 80 failed beside a healthy server, the re-test). Any other
         * status is the batch's own and would repeat on every server. */
        if (s->status == 503 || s->status == 429 || not_there) {
            struct error err = {0};
            const char *was = upcall_url(s->up);
            int rc = upcall_next(s->up, &err);
            if (rc == 0) {
                log_debug("model %s: %s %s; trying another server", mc->name, was, why);
                return;
            }
            if (rc != -BG_EUPSTREAM)
                snprintf(why, sizeof why, "%.150s", err.msg);
        }
        upstream_slot_fail(s, why);
        return;
    }
    if (!upstream_answer_read(s->up, mc, &s->answer, s->io->rows, s->io->out, why, sizeof why)) {
        upstream_slot_fail(s, why);
        return;
    }
    int64_t ns = now_ns() - s->t0;
    upstream_slot_release(s);
    um->feed.finish(um->feed.ctx, s->index, 0, NULL, ns);
    upstream_poll(um);
}

/* ---- calls ---- */

/* upcall_ops: the URL's pool on this loop. */
static struct httpc_pool *upstream_slot_pool(void *arg, struct httpc_target *t, int index)
{
    struct up_slot *s = arg;
    (void)t;
    return s->um->pools[index];
}

/* The call to the URL of this try (its Host) with the body built once. */
static int upstream_send(const struct up_model *um, struct upcall *u, const struct httpc_target *t,
                         const struct buf *body)
{
    const struct model_config *mc = &um->m->cfg;
    char head[512];
    int n;
    if (mc->upstream.protocol == UPSTREAM_KSERVE_V2)
        n = snprintf(head, sizeof head, "POST /v2/models/%s/infer HTTP/1.1\r\n",
                     mc->upstream.model);
    else
        n = snprintf(head, sizeof head, "POST /v1/models/%s:predict HTTP/1.1\r\n",
                     mc->upstream.model);
    n += snprintf(head + n, sizeof head - (size_t)n,
                  "Host: %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                  httpc_target_authority(t), body->len);
    if (upcall_send(u, head, (size_t)n) < 0 || upcall_send(u, body->data, body->len) < 0)
        return -1;
    return 0;
}

/* upcall_ops: the batch's call to the URL of this try. */
static int upstream_slot_send(void *arg, struct upcall *u, const struct httpc_target *t)
{
    struct up_slot *s = arg;
    s->status = 0;
    buf_reset(&s->answer);
    if (s->um->feed.sent)   /* its tenants' time at this server runs from here */
        s->um->feed.sent(s->um->feed.ctx, s->index, upstream_server_index(s->um, t));
    return upstream_send(s->um, u, t, &s->request);
}

static const struct upcall_ops slot_ops = {
    .pool = upstream_slot_pool,
    .send = upstream_slot_send,
    .on_head = upstream_slot_on_head,
    .on_body = upstream_slot_on_body,
    .on_done = upstream_slot_on_done,
    .on_fail = upstream_slot_on_fail,
};

/* ---- copy trials ---- */

static void upstream_copy_release(struct up_copy *c)
{
    c->busy = false;
    upstream_call_release(c->up, &c->request, &c->answer);
}

static struct httpc_pool *upstream_copy_pool(void *arg, struct httpc_target *t, int index)
{
    struct up_copy *c = arg;
    (void)index;   /* of the one-target array the copy was started with */
    return c->um->pools[upstream_server_index(c->um, t)];
}

static int upstream_copy_send(void *arg, struct upcall *u, const struct httpc_target *t)
{
    struct up_copy *c = arg;
    c->status = 0;
    buf_reset(&c->answer);
    return upstream_send(c->um, u, t, &c->request);   /* no tenant's time: nobody waits on it */
}

static int upstream_copy_on_head(void *arg, const struct httpc_head *h)
{
    struct up_copy *c = arg;
    c->status = h->status;
    upstream_hold(c->up, h);
    return 0;
}

/* The copy is over: a usable answer measured the server (httpc took its
 * time); without one its old measure stands and it stays passed by. */
static void upstream_copy_end(struct up_copy *c, bool usable, const char *what)
{
    struct httpc_target *t = upcall_target(c->up);
    if (!usable && t)
        httpc_target_trial_failed(t);
    log_debug("model %s: trial copy to %s: %s", c->um->m->cfg.name, upcall_url(c->up), what);
    upstream_copy_release(c);
}

static int upstream_copy_on_body(void *arg, const char *data, size_t len)
{
    struct up_copy *c = arg;
    if (c->answer.len + len > upstream_answer_max(c->um, c->rows) ||
        buf_append(&c->answer, data, len) < 0) {
        upcall_blame(c->up, HTTPC_FAIL_MALFORMED);
        upstream_copy_end(c, false, "an answer too large for the batch");
        return -1;
    }
    return 0;
}

/* The copy's answer is judged as the batch's would be, and dropped. */
static void upstream_copy_on_done(void *arg)
{
    struct up_copy *c = arg;
    const struct model_config *mc = &c->um->m->cfg;
    char why[160];
    bool usable = false;
    if (c->status != 200) {
        upstream_judge_status(c->up, c->status);
        snprintf(why, sizeof why, "answered HTTP %d", c->status);
    } else {
        float *out = malloc((size_t)c->rows * (size_t)mc->output.row_elems * sizeof *out + 1);
        usable = out && upstream_answer_read(c->up, mc, &c->answer, c->rows, out, why, sizeof why);
        if (!out)
            snprintf(why, sizeof why, "out of memory to read its answer");
        else if (usable)
            snprintf(why, sizeof why, "answered");
        free(out);
    }
    upstream_copy_end(c, usable, why);
}

/* No answer: a timeout is blamed by the driver, a lost connection by httpc. */
static void upstream_copy_on_fail(void *arg, int code, const char *msg)
{
    (void)code;
    upstream_copy_end(arg, false, msg);
}

static const struct upcall_ops copy_ops = {
    .pool = upstream_copy_pool,
    .send = upstream_copy_send,
    .on_head = upstream_copy_on_head,
    .on_body = upstream_copy_on_body,
    .on_done = upstream_copy_on_done,
    .on_fail = upstream_copy_on_fail,
};

/* The batch of s, just sent, also to a server owed a trial that its
 * deadline refused, when one is (and its calls may be sent twice). */
static void upstream_copy_start(struct up_model *um, const struct up_slot *s)
{
    struct up_copy *c = &um->copy;
    if (c->busy || !um->m->cfg.upstream.idempotent || um->nurls < 2)
        return;
    int k = httpc_pick_copy_trial(um->targets, um->nurls,
                                  upstream_server_index(um, upcall_target(s->up)));
    if (k < 0)
        return;
    buf_reset(&c->request);
    if (buf_append(&c->request, s->request.data, s->request.len) < 0)
        return;
    c->rows = s->io->rows;
    c->busy = true;
    struct error err = {0};
    if (upcall_start(c->up, &um->targets[k], 1, HTTPC_JUDGED, &err) < 0) {
        upstream_copy_release(c);
        return;
    }
    log_debug("model %s: trial copy of a batch of %d rows to %s", um->m->cfg.name, c->rows,
              httpc_target_url(um->targets[k]));
    upcall_arm(c->up);
}

static void upstream_slot_start(struct up_slot *s)
{
    struct up_model *um = s->um;
    s->busy = true;
    s->t0 = now_ns();
    s->retry_after_s = 0;
    buf_reset(&s->request);
    upstream_codec_request(&s->um->m->cfg, s->io->in, s->io->rows, &s->request);
    struct error err = {0};
    /* Whether an answer is usable is ours to say (upstream_slot_on_done). */
    unsigned flags = HTTPC_JUDGED | (um->m->cfg.upstream.idempotent ? UPCALL_IDEMPOTENT : 0);
    upcall_set_deadline(s->up, s->io->deadline_ns);
    if (upcall_start(s->up, um->targets, um->nurls, flags, &err) < 0) {
        upstream_slot_fail(s, err.msg);
        return;
    }
    upcall_arm(s->up);   /* the whole call, repeats included */
    upstream_copy_start(um, s);
}

/* Idle slots ask the feed for work; the tick re-asks when it names a time. */
static void upstream_poll(struct up_model *um)
{
    if (atomic_load(&um->stopping))
        return;
    int64_t wake = INT64_MAX;
    for (int i = 0; i < um->nslots; i++) {
        struct up_slot *s = &um->slots[i];
        if (s->busy)
            continue;
        int64_t w = INT64_MAX;
        int rc = um->feed.poll(um->feed.ctx, s->index, &s->io, &w);
        if (rc == 1) {
            upstream_slot_start(s);
            continue;
        }
        if (rc == 0 && w < wake)
            wake = w;
        break;
    }
    if (wake != INT64_MAX) {
        int64_t d = wake - now_ns();
        if (d < 0)
            d = 0;
        struct timeval tv = {(time_t)(d / 1000000000), (suseconds_t)(d % 1000000000 / 1000) + 1};
        evtimer_add(um->tick, &tv);
    }
}

static void upstream_on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct up_model *um = arg;
    if (atomic_load(&um->stopping)) {
        event_base_loopbreak(um->base);
        return;
    }
    upstream_poll(um);
}

static void upstream_ring(void *arg)
{
    struct up_model *um = arg;
    event_active(um->wake, EV_READ, 0);
}

static void *upstream_main(void *arg)
{
    struct up_model *um = arg;
    event_base_loop(um->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* ---- the backend interface (backend_impl.h) ---- */

static int upstream_model_load(struct model *m, struct cold_start *cs, struct error *err)
{
    const struct model_upstream *u = &m->cfg.upstream;
    int64_t t0 = now_ns();
    struct up_model *um = calloc(1, sizeof *um);
    if (!um)
        return error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
    um->m = m;
    m->shared = um;
    m->shared_bytes = 0;
    char who[300];
    snprintf(who, sizeof who, "model %s", m->cfg.name);
    for (int i = 0; i < u->nurls; i++) {
        struct error e2 = {0};
        char name[32];
        snprintf(name, sizeof name, "upstream.urls[%d]", i);
        um->targets[i] = httpc_target_new(u->hosts[i], u->ports[i], who, name, &e2);
        um->targets[i] = backend_server_continue(m, i, um->targets[i]);
        if (!um->targets[i])
            return error_set(err, e2.code, "%s: upstream.urls[%d]: %s", m->cfg.config_path, i,
                             e2.msg);
        um->nurls++;
    }
    cs->read_s = 0;
    cs->prepare_s = (double)(now_ns() - t0) / 1e9;
    return 0;
}

static void upstream_stop(struct model *m);

static void upstream_model_unload(struct model *m)
{
    struct up_model *um = m->shared;
    upstream_stop(m);
    if (um)
        for (int i = 0; i < um->nurls; i++)
            httpc_target_free(um->targets[i]);
    free(um);
    m->shared = NULL;
}

static int upstream_instance_load(struct instance *in, struct error *err)
{
    (void)err;
    in->state = NULL;
    in->memory_bytes = 0;
    return 0;
}

static void upstream_instance_unload(struct instance *in) { (void)in; }

/* A TF Serving model status path (/v1/models/{m}[/versions/{v}]), not
 * another route a health_path may name. */
static bool upstream_tfs_status_path(const char *path)
{
    return strncmp(path, "/v1/models/", 11) == 0 && !strchr(path, ':') &&
           !strstr(path, "/metadata") && !strstr(path, "/labels/");
}

static bool upstream_tfs_judge(void *arg, const char *body, size_t len, char *why, size_t cap)
{
    (void)arg;
    return upstream_codec_tfs_available(body, len, why, cap);
}

static int upstream_start(struct model *m, const struct backend_feed *feed, struct error *err)
{
    struct up_model *um = m->shared;
    um->feed = *feed;
    um->nslots = m->cfg.upstream.max_inflight;
    um->slots = calloc((size_t)um->nslots, sizeof *um->slots);
    /* The batcher's wake instants (a batch's latest start under the
     * deadline rule) need sub-millisecond timers: by default libevent
     * times with the coarse clock and epoll's whole milliseconds, and a
     * wake that came more than the batcher's slack late found its lone
     * request past hope: 504 for budgets the server met (the re-test: 13
     * of 48 at budgets of 75-90 ms to a 40 ms server; a worker thread's
     * condition variable, 0). */
    struct event_config *ecfg = event_config_new();
    if (ecfg) {
        event_config_set_flag(ecfg, EVENT_BASE_FLAG_PRECISE_TIMER);
        um->base = event_base_new_with_config(ecfg);
        event_config_free(ecfg);
    }
    if (!um->slots || !um->base)
        return error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
    um->wake = event_new(um->base, -1, 0, upstream_on_wake, um);
    um->tick = evtimer_new(um->base, upstream_on_wake, um);
    for (int i = 0; i < um->nslots; i++) {
        um->slots[i].um = um;
        um->slots[i].index = i;
        um->slots[i].up = upcall_new(um->base, &slot_ops, &um->slots[i],
                                     m->cfg.upstream.timeout_ms, "upstream.timeout_ms");
        if (!um->slots[i].up)
            return error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
    }
    um->copy.um = um;
    um->copy.up = upcall_new(um->base, &copy_ops, &um->copy, m->cfg.upstream.timeout_ms,
                             "upstream.timeout_ms");
    if (!um->copy.up)
        return error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
    for (int i = 0; i < um->nurls; i++) {
        /* Idle connections: enough for every slot to find one warm. */
        um->pools[i] = httpc_pool_new(um->targets[i], um->base, um->nslots + 1, 1);
        if (!um->pools[i])
            return error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
    }
    int hms = m->cfg.upstream.health_interval_ms;
    if (hms > 0) {
        char who[300];
        snprintf(who, sizeof who, "model %s", m->cfg.name);
        um->prober = httpc_prober_new(um->base, um->targets, um->nurls,
                                      m->cfg.upstream.health_path, hms, who);
        if (!um->prober)
            return error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
        /* TF Serving's model status is 200 whatever the model's state:
         * a server whose model failed (END) or still loads was kept in. */
        if (m->cfg.upstream.protocol == UPSTREAM_TFSERVING &&
            upstream_tfs_status_path(m->cfg.upstream.health_path))
            httpc_prober_set_judge(um->prober, upstream_tfs_judge, NULL);
    }
    um->feed.set_waker(um->feed.ctx, upstream_ring, um);
    int rc = pthread_create(&um->thread, NULL, upstream_main, um);
    if (rc)
        return error_set(err, BG_EINTERNAL, "%s: cannot start the upstream loop: %s",
                         m->cfg.name, strerror(rc));
    um->running = true;
    event_active(um->wake, EV_READ, 0);
    return 0;
}

static void upstream_stop(struct model *m)
{
    struct up_model *um = m->shared;
    if (!um || !um->base)
        return;
    if (um->running) {
        um->feed.set_waker(um->feed.ctx, NULL, NULL);
        atomic_store(&um->stopping, true);
        event_active(um->wake, EV_READ, 0);
        pthread_join(um->thread, NULL);
        um->running = false;
    }
    /* Calls still in flight end here: their requests are answered 503. */
    for (int i = 0; i < um->nslots; i++) {
        struct up_slot *s = &um->slots[i];
        if (s->busy) {
            upcall_stop(s->up);
            s->busy = false;
            um->feed.finish(um->feed.ctx, s->index, BG_ESHUTDOWN, "the server is shutting down",
                            now_ns() - s->t0);
        }
        buf_free(&s->request);
        buf_free(&s->answer);
        upcall_free(s->up);
    }
    upcall_free(um->copy.up);   /* a copy in flight is dropped: nobody waits on it */
    um->copy.up = NULL;
    um->copy.busy = false;
    buf_free(&um->copy.request);
    buf_free(&um->copy.answer);
    httpc_prober_free(um->prober);
    um->prober = NULL;
    for (int i = 0; i < um->nurls; i++) {
        httpc_pool_free(um->pools[i]);
        um->pools[i] = NULL;
    }
    if (um->wake)
        event_free(um->wake);
    if (um->tick)
        event_free(um->tick);
    um->wake = um->tick = NULL;
    event_base_free(um->base);
    um->base = NULL;
    free(um->slots);
    um->slots = NULL;
    for (int i = 0; i < um->nurls; i++) {
        struct httpc_target_stats st;
        httpc_target_stats(um->targets[i], &st);
        uint64_t nf = 0;
        for (int k = 0; k < HTTPC_FAIL_COUNT; k++)
            nf += st.failures[k];
        if (nf)
            log_info("model %s: upstream %s: %llu calls, failures: %llu connect, %llu reset, "
                     "%llu timeout, %llu HTTP status, %llu malformed", m->cfg.name,
                     httpc_target_url(um->targets[i]), (unsigned long long)st.calls,
                     (unsigned long long)st.failures[HTTPC_FAIL_CONNECT],
                     (unsigned long long)st.failures[HTTPC_FAIL_RESET],
                     (unsigned long long)st.failures[HTTPC_FAIL_TIMEOUT],
                     (unsigned long long)st.failures[HTTPC_FAIL_STATUS],
                     (unsigned long long)st.failures[HTTPC_FAIL_MALFORMED]);
    }
}

static int upstream_loop_slots(const struct model *m) { return m->cfg.upstream.max_inflight; }

/* One device per server, by its index in upstream.urls. */
static void upstream_devices(const struct model *m, model_device_fn fn, void *arg)
{
    const struct up_model *um = m->shared;
    struct model_device d = {.kind = BACKEND_DEVICE_UPSTREAM, .instance = -1};
    for (int i = 0; um && i < um->nurls; i++) {
        snprintf(d.name, sizeof d.name, "upstream%d", i);
        d.target = um->targets[i];
        fn(&d, arg);
    }
}

static int upstream_servers(const struct model *m, struct httpc_target *const **out)
{
    struct up_model *um = m->shared;
    *out = um ? um->targets : NULL;
    return um ? um->nurls : 0;
}

const struct backend_i backend_upstream = {
    .name = "upstream",
    .kind = BACKEND_LOOP,
    .device_kind = BACKEND_DEVICE_UPSTREAM,
    .model_load = upstream_model_load,
    .model_unload = upstream_model_unload,
    .instance_load = upstream_instance_load,
    .instance_unload = upstream_instance_unload,
    .loop_start = upstream_start,
    .loop_stop = upstream_stop,
    .loop_slots = upstream_loop_slots,
    .devices = upstream_devices,
    .servers = upstream_servers,
};
