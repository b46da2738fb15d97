/* upstream.c - the upstream backend: batchgate batching in front of existing
 * model servers (Triton, TF Serving, anything speaking KServe v2 or TF
 * Serving's REST predict).
 *
 * One event-loop thread per model. Its `max_inflight` slots pull batches
 * from the batcher without blocking (batch_source.try_next; the batcher's
 * waker rings the loop when a request arrives), turn each batch into ONE
 * upstream call (rows concatenated along the batch dimension), and split the
 * answer back into the requests'. Keep-alive connections are pooled per URL;
 * a call goes to the healthy URL with the fewest calls outstanding. A URL
 * that fails 3 times in a row is left alone for 2 s, then tried again.
 *
 * Failures: connect refused is retried on another URL (nothing was sent);
 * a reset, a 5xx, a malformed or short answer, or no answer within
 * timeout_ms fail the batch's requests with 502, or 504 for those whose
 * budget ran out. Other batches carry on. */
#include "backend.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>
#include <llhttp.h>

#include "buf.h"
#include "clock.h"
#include "jsonfmt.h"
#include "log.h"

#define UP_FAILS_TO_DOWN 3
#define UP_DOWN_NS 2000000000LL

struct up_model;
struct up_slot;

struct up_url {
    char host[256];
    int port;
    struct sockaddr_storage addr;
    socklen_t alen;
    int outstanding;
    int failures;                     /* in a row */
    int64_t down_until;
    struct up_conn *idle;             /* keep-alive connections ready for a call */
};

struct up_conn {
    struct up_model *um;
    struct up_url *url;
    struct up_conn *next_idle;
    int fd;
    struct event *ev;
    bool connecting;
    llhttp_t parser;
    int status;
    bool complete;
    struct buf out, body;
    struct up_slot *slot;
};

struct up_slot {
    struct up_model *um;
    bool busy;
    struct batch b;
    struct up_conn *conn;
    struct up_url *url;
    struct event *timer;
    int64_t t0;
    int attempts;
    unsigned tried;                   /* URLs this call was already sent to (bit per URL) */
    struct buf request;               /* the body, kept for a retry after a refused connect */
};

struct up_model {
    struct model *m;
    struct batch_source src;
    struct event_base *base;
    struct event *wake, *tick;
    pthread_t thread;
    bool running;
    _Atomic bool stopping;
    struct up_url urls[MODEL_MAX_UPSTREAMS];
    int nurls;
    struct up_slot *slots;
    int nslots;
    uint64_t fail_connect, fail_reset, fail_timeout, fail_status, fail_malformed;
};

static llhttp_settings_t up_parser_settings;
static void up_poll(struct up_model *um);
static void slot_send(struct up_slot *s);
static void on_conn(evutil_socket_t fd, short what, void *arg);

/* ---- completing a batch ---- */

static void slot_release(struct up_slot *s)
{
    if (s->url)
        s->url->outstanding--;
    s->url = NULL;
    s->conn = NULL;
    s->busy = false;
    event_del(s->timer);
    buf_reset(&s->request);
}

static void url_failed(struct up_url *u)
{
    if (++u->failures >= UP_FAILS_TO_DOWN)
        u->down_until = now_ns() + UP_DOWN_NS;
}

/* Every request of the batch fails: 504 for those out of budget, else 502. */
static void slot_fail(struct up_slot *s, const char *why)
{
    int64_t now = now_ns();
    for (struct infer_item *it = s->b.head; it; it = it->next) {
        bool late = it->deadline_ns && now >= it->deadline_ns;
        it->status = late ? BG_EDEADLINE : BG_EUPSTREAM;
        snprintf(it->error, sizeof it->error, "upstream %.64s:%d: %.100s", s->url ? s->url->host : "?",
                 s->url ? s->url->port : 0, why);
    }
    struct up_model *um = s->um;
    struct batch b = s->b;
    slot_release(s);
    worker_complete_batch(&b);
    up_poll(um);
}

/* ---- connections ---- */

static void conn_free(struct up_conn *c)
{
    if (!c)
        return;
    event_free(c->ev);
    close(c->fd);
    buf_free(&c->out);
    buf_free(&c->body);
    free(c);
}

static void conn_to_idle(struct up_conn *c)
{
    c->slot = NULL;
    c->status = 0;
    c->complete = false;
    buf_reset(&c->body);
    llhttp_init(&c->parser, HTTP_RESPONSE, &up_parser_settings);
    c->parser.data = c;
    c->next_idle = c->url->idle;
    c->url->idle = c;
    /* Idle: watch for the server closing it. */
    event_del(c->ev);
    event_assign(c->ev, c->um->base, c->fd, EV_READ | EV_PERSIST, on_conn, c);
    event_add(c->ev, NULL);
}

static void conn_unidle(struct up_conn *c)
{
    struct up_conn **pp = &c->url->idle;
    while (*pp && *pp != c)
        pp = &(*pp)->next_idle;
    if (*pp)
        *pp = c->next_idle;
}

static int on_up_headers(llhttp_t *p)
{
    struct up_conn *c = p->data;
    c->status = llhttp_get_status_code(p);
    return 0;
}

static int on_up_body(llhttp_t *p, const char *at, size_t n)
{
    struct up_conn *c = p->data;
    return buf_append(&c->body, at, n) < 0 ? -1 : 0;
}

static int on_up_complete(llhttp_t *p)
{
    struct up_conn *c = p->data;
    c->complete = true;
    return HPE_PAUSED;
}

/* Parses the answer and hands each request its rows. */
static void slot_finish(struct up_slot *s, struct up_conn *c)
{
    struct up_model *um = s->um;
    const struct model_config *mc = &um->m->cfg;
    char why[160];
    if (c->status != 200) {
        um->fail_status++;
        url_failed(s->url);
        snprintf(why, sizeof why, "answered HTTP %d", c->status);
        slot_fail(s, why);
        return;
    }
    json_error_t je;
    json_t *root = json_loadb(c->body.data ? c->body.data : "", c->body.len, 0, &je);
    json_t *data = NULL;
    if (mc->upstream.protocol == UPSTREAM_KSERVE_V2)
        data = json_object_get(json_array_get(json_object_get(root, "outputs"), 0), "data");
    else
        data = json_object_get(root, "predictions");
    size_t row = (size_t)mc->output.row_elems, want = (size_t)s->b.rows * row;
    /* TF-Serving nests one array per row; KServe v2 is flat here. */
    float *flat = malloc((want ? want : 1) * sizeof(float));
    size_t got = 0;
    bool ok = flat && json_is_array(data);
    if (ok && mc->upstream.protocol == UPSTREAM_TFSERVING) {
        size_t i;
        json_t *r;
        json_array_foreach(data, i, r) {
            json_t *rr = json_is_array(r) ? r : NULL;
            for (size_t k = 0; rr && k < json_array_size(rr) && got < want; k++)
                flat[got++] = (float)json_number_value(json_array_get(rr, k));
            if (!rr && got < want)
                flat[got++] = (float)json_number_value(r);
        }
    } else if (ok) {
        for (size_t i = 0; i < json_array_size(data) && got < want; i++)
            flat[got++] = (float)json_number_value(json_array_get(data, i));
        if (json_array_size(data) != want)
            got = json_array_size(data);
    }
    json_decref(root);
    if (!ok || got != want) {
        free(flat);
        um->fail_malformed++;
        url_failed(s->url);
        snprintf(why, sizeof why, "malformed answer (%zu of %zu output values)", ok ? got : 0, want);
        slot_fail(s, why);
        return;
    }
    s->url->failures = 0;
    int64_t ns = now_ns() - s->t0;
    const float *src = flat;
    for (struct infer_item *it = s->b.head; it; it = it->next) {
        memcpy(it->output, src, (size_t)it->rows * row * sizeof(float));
        src += (size_t)it->rows * row;
        it->t_compute_ns = ns;
        it->batch_rows = s->b.rows;
    }
    free(flat);
    int rows = s->b.rows;
    struct batch b = s->b;
    slot_release(s);
    if (um->src.done)
        um->src.done(um->src.ctx, 0, rows, ns);
    worker_complete_batch(&b);
}

static void conn_drop(struct up_conn *c, const char *why, bool connect_failed)
{
    struct up_slot *s = c->slot;
    struct up_model *um = c->um;
    conn_unidle(c);
    conn_free(c);
    if (!s)
        return;
    s->conn = NULL;
    url_failed(s->url);
    if (connect_failed) {
        um->fail_connect++;
        /* Nothing reached the server: another URL may take it, within budget. */
        if (s->attempts < um->nurls) {
            s->url->outstanding--;
            s->url = NULL;
            slot_send(s);
            return;
        }
    } else {
        um->fail_reset++;
    }
    slot_fail(s, why);
}

static void on_conn(evutil_socket_t fd, short what, void *arg)
{
    struct up_conn *c = arg;
    (void)fd;
    if (c->connecting && (what & EV_WRITE)) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            char why[128];
            snprintf(why, sizeof why, "connect: %s", strerror(err));
            conn_drop(c, why, true);
            return;
        }
        c->connecting = false;
    }
    while ((what & EV_WRITE) && buf_unread(&c->out) > 0) {
        ssize_t n = send(c->fd, buf_head(&c->out), buf_unread(&c->out), MSG_NOSIGNAL);
        if (n > 0) {
            buf_consume(&c->out, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        conn_drop(c, "connection reset while sending", false);
        return;
    }
    if ((what & EV_WRITE) && buf_unread(&c->out) == 0) {
        event_del(c->ev);
        event_assign(c->ev, c->um->base, c->fd, EV_READ | EV_PERSIST, on_conn, c);
        event_add(c->ev, NULL);
    }
    if (!(what & EV_READ))
        return;
    char data[16384];
    ssize_t n = read(c->fd, data, sizeof data);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        conn_drop(c, c->slot ? "connection closed before the answer" : "idle close", false);
        return;
    }
    if (n < 0)
        return;
    if (!c->slot) {
        conn_drop(c, "unexpected bytes on an idle connection", false);
        return;
    }
    llhttp_errno_t e = llhttp_execute(&c->parser, data, (size_t)n);
    if (e != HPE_OK && e != HPE_PAUSED) {
        c->um->fail_malformed++;
        conn_drop(c, "malformed HTTP answer", false);
        return;
    }
    if (c->complete) {
        struct up_slot *s = c->slot;
        struct up_model *um = c->um;
        bool keep = llhttp_should_keep_alive(&c->parser);
        c->slot = NULL;
        s->conn = NULL;
        slot_finish(s, c);   /* reads c's status and body */
        if (keep)
            conn_to_idle(c);
        else
            conn_free(c);
        up_poll(um);
    }
}

static struct up_conn *conn_open(struct up_model *um, struct up_url *u)
{
    int fd = socket(u->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct up_conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(fd);
        return NULL;
    }
    c->um = um;
    c->url = u;
    c->fd = fd;
    c->connecting = true;
    llhttp_init(&c->parser, HTTP_RESPONSE, &up_parser_settings);
    c->parser.data = c;
    c->ev = event_new(um->base, fd, EV_READ | EV_WRITE | EV_PERSIST, on_conn, c);
    if (!c->ev || (connect(fd, (struct sockaddr *)&u->addr, u->alen) < 0 && errno != EINPROGRESS)) {
        /* Refused at once (loopback): report it like an asynchronous refusal. */
        if (c->ev)
            event_add(c->ev, NULL);
        else {
            close(fd);
            free(c);
            return NULL;
        }
        return c;
    }
    event_add(c->ev, NULL);
    return c;
}

/* ---- calls ---- */

/* The healthy URL with the fewest calls outstanding, not one this call
 * already failed on. */
static struct up_url *pick_url(struct up_model *um, unsigned tried)
{
    int64_t now = now_ns();
    struct up_url *best = NULL;
    for (int i = 0; i < um->nurls; i++) {
        struct up_url *u = &um->urls[i];
        if (u->down_until > now || (tried & (1u << i)))
            continue;
        if (!best || u->outstanding < best->outstanding)
            best = u;
    }
    if (!best)   /* all down or tried: the one down the shortest recovers first */
        for (int i = 0; i < um->nurls; i++)
            if (!(tried & (1u << i)) && (!best || um->urls[i].down_until < best->down_until))
                best = &um->urls[i];
    if (!best)
        best = &um->urls[0];
    return best;
}

static void build_request(struct up_slot *s)
{
    const struct model_config *mc = &s->um->m->cfg;
    struct buf *b = &s->request;
    size_t row = (size_t)mc->input.row_elems;
    if (mc->upstream.protocol == UPSTREAM_KSERVE_V2) {
        buf_appendf(b, "{\"inputs\":[{\"name\":\"%s\",\"datatype\":\"FP32\",\"shape\":[%d",
                    mc->input.name, s->b.rows);
        for (int i = 0; i < mc->input.ndims; i++)
            buf_appendf(b, ",%lld", (long long)mc->input.shape[i]);
        buf_append(b, "],\"data\":[", 10);
        bool first = true;
        for (struct infer_item *it = s->b.head; it; it = it->next)
            for (size_t k = 0; k < (size_t)it->rows * row; k++) {
                if (!first)
                    buf_append(b, ",", 1);
                json_append_float(b, it->input[k]);
                first = false;
            }
        buf_append(b, "]}]}", 4);
    } else {
        buf_append(b, "{\"instances\":[", 14);
        bool first_row = true;
        for (struct infer_item *it = s->b.head; it; it = it->next)
            for (int r = 0; r < it->rows; r++) {
                buf_append(b, first_row ? "[" : ",[", first_row ? 1 : 2);
                for (size_t k = 0; k < row; k++) {
                    if (k)
                        buf_append(b, ",", 1);
                    json_append_float(b, it->input[(size_t)r * row + k]);
                }
                buf_append(b, "]", 1);
                first_row = false;
            }
        buf_append(b, "]}", 2);
    }
}

/* Sends the slot's call on a connection to the best URL. */
static void slot_send(struct up_slot *s)
{
    struct up_model *um = s->um;
    const struct model_config *mc = &um->m->cfg;
    struct up_url *u = pick_url(um, s->tried);
    s->tried |= 1u << (u - um->urls);
    s->attempts++;
    s->url = u;
    u->outstanding++;
    struct up_conn *c = u->idle;
    if (c)
        u->idle = c->next_idle;
    else if (!(c = conn_open(um, u))) {
        slot_fail(s, "cannot open a connection");
        return;
    }
    c->next_idle = NULL;
    c->slot = s;
    s->conn = c;
    if (mc->upstream.protocol == UPSTREAM_KSERVE_V2)
        buf_appendf(&c->out, "POST /v2/models/%s/infer HTTP/1.1\r\n", mc->upstream.model);
    else
        buf_appendf(&c->out, "POST /v1/models/%s:predict HTTP/1.1\r\n", mc->upstream.model);
    buf_appendf(&c->out, "Host: %s:%d\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                u->host, u->port, s->request.len);
    buf_append(&c->out, s->request.data, s->request.len);
    event_del(c->ev);
    event_assign(c->ev, um->base, c->fd, EV_READ | EV_WRITE | EV_PERSIST, on_conn, c);
    event_add(c->ev, NULL);
}

static void on_slot_timeout(evutil_socket_t fd, short what, void *arg)
{
    struct up_slot *s = arg;
    (void)fd;
    (void)what;
    if (!s->busy)
        return;
    s->um->fail_timeout++;
    struct up_conn *c = s->conn;
    char why[96];
    snprintf(why, sizeof why, "no answer within upstream.timeout_ms (%d)",
             s->um->m->cfg.upstream.timeout_ms);
    if (c) {
        c->slot = NULL;   /* the connection is useless now: its answer would be late */
        conn_unidle(c);
        conn_free(c);
    }
    url_failed(s->url);
    slot_fail(s, why);
}

static void slot_start(struct up_slot *s)
{
    s->busy = true;
    s->attempts = 0;
    s->tried = 0;
    s->t0 = now_ns();
    buf_reset(&s->request);
    build_request(s);
    int ms = s->um->m->cfg.upstream.timeout_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(s->timer, &tv);
    slot_send(s);
}

/* Idle slots ask the batcher for work; the tick re-asks when it names a time. */
static void up_poll(struct up_model *um)
{
    if (atomic_load(&um->stopping))
        return;
    int64_t wake = INT64_MAX;
    for (int i = 0; i < um->nslots; i++) {
        struct up_slot *s = &um->slots[i];
        if (s->busy)
            continue;
        memset(&s->b, 0, sizeof s->b);
        int64_t w = INT64_MAX;
        int rc = um->src.try_next(um->src.ctx, 0, &s->b, &w);
        if (rc == 1) {
            slot_start(s);
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

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct up_model *um = arg;
    if (atomic_load(&um->stopping)) {
        event_base_loopbreak(um->base);
        return;
    }
    up_poll(um);
}

static void ring(void *arg)
{
    struct up_model *um = arg;
    event_active(um->wake, EV_READ, 0);
}

static void *up_main(void *arg)
{
    struct up_model *um = arg;
    event_base_loop(um->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

/* ---- backend_ops ---- */

static int up_model_load(struct model *m, struct cold_start *cs, struct error *err)
{
    const struct model_upstream *u = &m->cfg.upstream;
    int64_t t0 = now_ns();
    if (!up_parser_settings.on_message_complete) {
        llhttp_settings_init(&up_parser_settings);
        up_parser_settings.on_headers_complete = on_up_headers;
        up_parser_settings.on_body = on_up_body;
        up_parser_settings.on_message_complete = on_up_complete;
    }
    struct up_model *um = calloc(1, sizeof *um);
    if (!um)
        return error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
    um->m = m;
    um->nurls = u->nurls;
    for (int i = 0; i < u->nurls; i++) {
        struct up_url *x = &um->urls[i];
        snprintf(x->host, sizeof x->host, "%s", u->hosts[i]);
        x->port = u->ports[i];
        char port[16];
        snprintf(port, sizeof port, "%d", x->port);
        struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
        int gai = getaddrinfo(x->host, port, &hints, &ai);
        if (gai) {
            free(um);
            return error_set(err, BG_ECONFIG, "%s: upstream.urls[%d]: cannot resolve %s: %s",
                             m->cfg.config_path, i, x->host, gai_strerror(gai));
        }
        memcpy(&x->addr, ai->ai_addr, ai->ai_addrlen);
        x->alen = ai->ai_addrlen;
        freeaddrinfo(ai);
    }
    m->shared = um;
    m->shared_bytes = 0;
    cs->read_s = 0;
    cs->prepare_s = (double)(now_ns() - t0) / 1e9;
    return 0;
}

static void up_stop(struct model *m);

static void up_model_unload(struct model *m)
{
    up_stop(m);
    free(m->shared);
    m->shared = NULL;
}

static int up_instance_load(struct instance *in, struct error *err)
{
    (void)err;
    in->state = NULL;
    in->memory_bytes = 0;
    return 0;
}

static void up_instance_unload(struct instance *in) { (void)in; }

static int up_start(struct model *m, struct batch_source src, struct error *err)
{
    struct up_model *um = m->shared;
    um->src = src;
    um->nslots = m->cfg.upstream.max_inflight;
    um->slots = calloc((size_t)um->nslots, sizeof *um->slots);
    um->base = event_base_new();
    if (!um->slots || !um->base)
        return error_set(err, BG_ENOMEM, "%s: out of memory", m->cfg.name);
    um->wake = event_new(um->base, -1, 0, on_wake, um);
    um->tick = evtimer_new(um->base, on_wake, um);
    for (int i = 0; i < um->nslots; i++) {
        um->slots[i].um = um;
        um->slots[i].timer = evtimer_new(um->base, on_slot_timeout, &um->slots[i]);
    }
    src.set_waker(src.ctx, ring, um);
    int rc = pthread_create(&um->thread, NULL, up_main, um);
    if (rc)
        return error_set(err, BG_EINTERNAL, "%s: cannot start the upstream loop: %s",
                         m->cfg.name, strerror(rc));
    um->running = true;
    event_active(um->wake, EV_READ, 0);
    return 0;
}

static void up_stop(struct model *m)
{
    struct up_model *um = m->shared;
    if (!um || !um->base)
        return;
    if (um->running) {
        um->src.set_waker(um->src.ctx, NULL, NULL);
        atomic_store(&um->stopping, true);
        event_active(um->wake, EV_READ, 0);
        pthread_join(um->thread, NULL);
        um->running = false;
    }
    /* Calls still in flight end here: their requests are answered 503. */
    for (int i = 0; i < um->nslots; i++) {
        struct up_slot *s = &um->slots[i];
        if (s->busy) {
            for (struct infer_item *it = s->b.head; it; it = it->next) {
                it->status = BG_ESHUTDOWN;
                snprintf(it->error, sizeof it->error, "the server is shutting down");
            }
            if (s->conn) {
                s->conn->slot = NULL;
                conn_free(s->conn);
            }
            struct batch b = s->b;
            s->busy = false;
            worker_complete_batch(&b);
        }
        buf_free(&s->request);
        if (s->timer)
            event_free(s->timer);
    }
    for (int i = 0; i < um->nurls; i++)
        while (um->urls[i].idle) {
            struct up_conn *c = um->urls[i].idle;
            um->urls[i].idle = c->next_idle;
            conn_free(c);
        }
    if (um->wake)
        event_free(um->wake);
    if (um->tick)
        event_free(um->tick);
    event_base_free(um->base);
    um->base = NULL;
    free(um->slots);
    um->slots = NULL;
    if (um->fail_connect + um->fail_reset + um->fail_timeout + um->fail_status + um->fail_malformed)
        log_info("model %s: upstream failures: %llu connect, %llu reset, %llu timeout, "
                 "%llu HTTP status, %llu malformed", m->cfg.name,
                 (unsigned long long)um->fail_connect, (unsigned long long)um->fail_reset,
                 (unsigned long long)um->fail_timeout, (unsigned long long)um->fail_status,
                 (unsigned long long)um->fail_malformed);
}

const struct backend_ops backend_upstream = {
    .name = "upstream",
    .model_load = up_model_load,
    .model_unload = up_model_unload,
    .instance_load = up_instance_load,
    .run = NULL,
    .instance_unload = up_instance_unload,
    .start = up_start,
    .stop = up_stop,
};
