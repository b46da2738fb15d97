/* engine.c - see engine.h. One thread, one event_base per step. */
#include "loadgen/engine.h"

#include <errno.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <llhttp.h>

#include "common/clock.h"

struct pending {                 /* an open-loop request waiting for a connection */
    int64_t intended;
    bool measured;
};

struct lg_conn;

struct lg_run {
    const struct lg_config *c;
    struct lg_result *r;
    struct event_base *base;
    struct event *timer;         /* open loop: next send; closed loop: the end */
    struct event *progress;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    struct lg_conn **conns;
    int nconns, cap_conns;
    struct lg_conn *idle;        /* idle connections, a stack */
    struct pending *q;           /* FIFO of requests waiting for a connection */
    size_t qhead, qtail, qcap;
    int64_t t0, t_measure, t_end;
    struct event *deadline;      /* the window's end + drain_ms: the step ends */
    int64_t next_intended;
    uint64_t nsched;             /* constant rate: the sends scheduled so far */
    uint64_t rng;
    uint64_t next_req;
    bool sending;                /* still inside the window */
    int outstanding;
    uint64_t last_answered;
    int64_t t_read;              /* when the bytes being parsed were read */
    int64_t t_last;              /* when the last answer counted came (0: none) */
    /* Closed loop: a refused connect is retried after retry_ns (1 ms,
     * doubling to ENGINE_RETRY_MAX_NS, 0 again once a connect succeeds), by
     * the `retry` timer: nothing listening must not become a busy loop that
     * takes the CPU from a server restarting on the same machine. */
    struct event *retry;
    int64_t retry_ns;
};

#define ENGINE_RETRY_MIN_NS 1000000
#define ENGINE_RETRY_MAX_NS 100000000

struct lg_conn {
    struct lg_run *run;
    struct lg_conn *next_idle;
    int fd;
    struct event *ev;
    bool connecting, busy, closing;
    llhttp_t parser;
    int status;
    struct buf out;
    int64_t intended;            /* of the request in flight */
    int64_t t_sent;              /* when its last byte went to the kernel */
    int nsent;                   /* requests sent on this connection */
    bool got_bytes;              /* of the answer in flight */
    bool malformed;              /* the parser refused what came: neither lost nor
                                  * closed_idle, whatever got_bytes says */
    bool measured;
    struct llmans ans;           /* OpenAI mode: the answer in flight */
};

/* Defined after their callbacks, below. */
static const llhttp_settings_t parser_settings, parser_settings_llm;

static uint64_t engine_rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int engine_conn_send_next(struct lg_conn *k, int64_t intended, bool measured);
static void engine_conn_close(struct lg_conn *k, bool failed);

/* ---- scheduling ---- */

static void engine_finish_if_done(struct lg_run *run)
{
    if (!run->sending && run->outstanding == 0 && run->qhead == run->qtail)
        event_base_loopbreak(run->base);
}

static struct lg_conn *engine_conn_new(struct lg_run *run);

/* Gives a request a connection: an idle one, a new one, or the queue. */
static void engine_dispatch(struct lg_run *run, int64_t intended, bool measured)
{
    struct lg_conn *k = run->idle;
    if (k) {
        run->idle = k->next_idle;
        k->next_idle = NULL;
        if (measured && now_ns() - intended > 1000000)
            run->r->late_sends++;   /* a connection was free: the generator was late */
        engine_conn_send_next(k, intended, measured);
        return;
    }
    if (run->nconns < run->c->max_connections && (k = engine_conn_new(run))) {
        if (measured && now_ns() - intended > 1000000)
            run->r->late_sends++;   /* a connection could be had: the generator was late */
        k->intended = intended;
        k->measured = measured;
        k->busy = true;
        run->outstanding++;
        return;   /* sent once connected */
    }
    if (run->qtail - run->qhead == run->qcap) {
        size_t n = run->qtail - run->qhead, cap = run->qcap ? run->qcap * 2 : 1024;
        struct pending *q = malloc(cap * sizeof *q);
        if (!q) {
            run->r->errors++;
            return;
        }
        for (size_t i = 0; i < n; i++)
            q[i] = run->q[(run->qhead + i) % run->qcap];
        free(run->q);
        run->q = q;
        run->qcap = cap;
        run->qhead = 0;
        run->qtail = n;
    }
    run->q[run->qtail++ % run->qcap] = (struct pending){intended, measured};
}

/* A connection became free: the oldest waiting request, or the idle stack.
 * Returns -1 when the connection died sending. */
static int engine_conn_free_for_work(struct lg_conn *k)
{
    struct lg_run *run = k->run;
    if (run->qhead != run->qtail) {
        struct pending p = run->q[run->qhead++ % run->qcap];
        if (run->qhead == run->qtail)
            run->qhead = run->qtail = 0;
        return engine_conn_send_next(k, p.intended, p.measured);
    }
    if (!run->c->open_loop && run->sending) {
        int64_t now = now_ns();
        return engine_conn_send_next(k, now, now >= run->t_measure);
    }
    k->next_idle = run->idle;
    run->idle = k;
    engine_finish_if_done(run);
    return 0;
}

/* The open-loop rate intended at time t (now_ns clock). */
static double engine_rate_at(const struct lg_run *run, int64_t t)
{
    const struct lg_config *c = run->c;
    if (c->trace_period_s <= 0)
        return c->rate;
    double since = t > run->t_measure ? (double)(t - run->t_measure) / 1e9 : 0;
    double phase = since / c->trace_period_s;
    return c->trace_trough +
           (c->trace_peak - c->trace_trough) * (1 - cos(2 * M_PI * phase)) / 2;
}

static double engine_uniform(struct lg_run *run)
{
    return ((double)(engine_rnd(&run->rng) >> 11) + 0.5) / 9007199254740992.0;
}

/* Seconds from the intended time of the last request to the next. A trace
 * with Poisson arrivals is a Poisson process of varying rate, drawn by
 * thinning: candidates at the highest rate, each kept with probability
 * rate(t) / highest, which is exact however fast the rate moves. */
static double engine_gap_s(struct lg_run *run)
{
    if (!run->c->poisson)
        return 1.0 / engine_rate_at(run, run->next_intended);
    if (run->c->trace_period_s <= 0)
        return -log(engine_uniform(run)) / run->c->rate;
    double top = fmax(run->c->trace_peak, run->c->trace_trough);
    double gap = 0;
    for (int i = 0; i < 1000000; i++) {   /* rate >= trough > 0: ends long before */
        gap += -log(engine_uniform(run)) / top;
        int64_t t = run->next_intended + (int64_t)(gap * 1e9);
        if (engine_uniform(run) * top <= engine_rate_at(run, t))
            break;
    }
    return gap;
}

/* The window is over: nothing more is sent. A measured request still
 * waiting for a connection now was never sent: unsent (an error), not a
 * send, and dropped, so that neither `unsent` nor the achieved rate depends
 * on --drain-ms (such requests went out in the drain, counted as sends,
 * and a server that fell behind kept getting the window's load after it). */
static void engine_window_end(struct lg_run *run)
{
    run->sending = false;
    for (size_t i = run->qhead; i < run->qtail; i++)
        if (run->q[i % run->qcap].measured) {
            run->r->errors++;
            run->r->unsent++;
            run->r->sent--;
        }
    run->qhead = run->qtail = 0;
    /* Nor has one whose connection is still being made (a slow connect, a
     * server whose accept queue is full): it would go out in the drain. */
    for (int i = run->nconns - 1; i >= 0; i--) {
        struct lg_conn *k = run->conns[i];
        if (!k->connecting || !k->busy)
            continue;
        if (k->measured) {
            run->r->errors++;
            run->r->unsent++;
            if (run->c->open_loop)
                run->r->sent--;
        }
        k->busy = false;
        run->outstanding--;
        engine_conn_close(k, false);
    }
    engine_finish_if_done(run);
}

static void engine_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct lg_run *run = arg;
    (void)fd;
    (void)what;
    int64_t now = now_ns();
    if (!run->c->open_loop) {
        /* Closed loop: the window is over; connections stop when answered. */
        engine_window_end(run);
        return;
    }
    while (run->next_intended <= now && run->next_intended < run->t_end) {
        bool measured = run->next_intended >= run->t_measure;
        if (measured)
            run->r->sent++;
        engine_dispatch(run, run->next_intended, measured);
        /* Constant gaps are counted from the start, not added up: a gap
         * cut to whole ns, added 30 times, let a 31st send into a 1-s
         * window at 30/s. */
        if (!run->c->poisson && run->c->trace_period_s <= 0)
            run->next_intended = run->t0 + (int64_t)((double)++run->nsched * 1e9 / run->c->rate);
        else
            run->next_intended += (int64_t)(engine_gap_s(run) * 1e9);
    }
    /* The window ends at t_end, not at its last send: a request queued
     * then may still get a connection before the end. */
    if (run->next_intended >= run->t_end && now >= run->t_end) {
        engine_window_end(run);
        return;
    }
    int64_t next = run->next_intended < run->t_end ? run->next_intended : run->t_end;
    int64_t wait = next - now_ns();
    struct timeval tv = {0, 0};
    if (wait > 0) {
        tv.tv_sec = wait / 1000000000;
        tv.tv_usec = (wait % 1000000000) / 1000;
    }
    evtimer_add(run->timer, &tv);
}

/* Answers still missing drain_ms after the window are given up (counted as
 * errors by the caller), whatever the server does: one that accepted the
 * requests and never answered would otherwise hold the step forever. */
static void engine_on_deadline(evutil_socket_t fd, short what, void *arg)
{
    struct lg_run *run = arg;
    (void)fd;
    (void)what;
    event_base_loopbreak(run->base);
}

static void engine_on_progress(evutil_socket_t fd, short what, void *arg)
{
    struct lg_run *run = arg;
    (void)fd;
    (void)what;
    double t = (double)(now_ns() - run->t0) / 1e9;
    uint64_t a = run->r->answered;
    fprintf(stderr, "\r  %5.1f s  %8.0f answers/s  %6d in flight  %6zu waiting  ", t,
            (double)(a - run->last_answered), run->outstanding, run->qtail - run->qhead);
    run->last_answered = a;
}

/* ---- connections ---- */

/* 1: no body follows, whatever Content-Length says (RFC 9112 6.3): the
 * answer to a HEAD, a 1xx, 204 or 304. llhttp would wait for the body a
 * Content-Length announces, and the request never completed. */
static int engine_on_headers_complete(llhttp_t *p)
{
    struct lg_conn *k = p->data;
    k->status = llhttp_get_status_code(p);
    /* A status outside 100-599 (RFC 9110 15) is no answer: a malformed
     * one, an error (it counted as an answer in no breakdown: not in the
     * codes, not non-2xx, not an error). */
    if (k->status < 100 || k->status > 599)
        return -1;
    return k->run->c->head || (k->status >= 100 && k->status < 200) || k->status == 204 ||
           k->status == 304;
}

/* An interim answer (100 Continue, 103 Early Hints): the final one is still
 * to come, on the same request (RFC 9110 15.2). 101 is final. */
static bool engine_interim(const struct lg_conn *k)
{
    return k->status >= 100 && k->status < 200 && k->status != 101;
}

static bool engine_2xx(const struct lg_conn *k) { return k->status >= 200 && k->status < 300; }

/* OpenAI mode: a 2xx answer's body, read as a completion. */
static int engine_on_body(llhttp_t *p, const char *at, size_t len)
{
    struct lg_conn *k = p->data;
    if (engine_2xx(k))
        llmans_feed(&k->ans, at, len, k->run->t_read);
    return 0;
}

static int engine_on_message_complete(llhttp_t *p)
{
    struct lg_conn *k = p->data;
    struct lg_run *run = k->run;
    if (engine_interim(k))
        return 0;   /* not the answer: parsing goes on to the final one */
    if (!k->busy) {
        /* An answer to no request (a 408 a server sends an idle
         * connection before closing it, RFC 9110 15.5.9): not an answer
         * to count, and the connection is done. */
        k->closing = true;
        return HPE_PAUSED;
    }
    int64_t now = now_ns();
    /* OpenAI mode: a 2xx whose completion broke (an event not JSON, no
     * [DONE], ...) is an error, not an answer. */
    bool broken = false;
    if (run->c->llm && engine_2xx(k)) {
        broken = llmans_end(&k->ans, now) < 0;
        if (k->measured && broken) {
            run->r->errors++;
            llmans_stats_broken(&run->r->llm, k->ans.failed);
        } else if (k->measured) {
            llmans_stats_record(&run->r->llm, &k->ans, k->intended, now);
        }
    }
    if (k->measured && !broken) {
        hist_record(&run->r->latency, now - k->intended);
        if (k->status >= 0 && k->status < 600)   /* 100-599: engine_on_headers_complete */
            run->r->codes[k->status]++;
        run->r->answered++;
        run->t_last = now;
        if (k->status >= 200 && k->status < 300 &&
            (!run->c->budget_ns || now - k->intended <= run->c->budget_ns))
            run->r->good++;
    }
    k->busy = false;
    run->outstanding--;
    if (!llhttp_should_keep_alive(p))
        k->closing = true;
    return HPE_PAUSED;
}

/* llhttp keeps a pointer to the settings: a constant table outlives every parser. */
static const llhttp_settings_t parser_settings = {
    .on_headers_complete = engine_on_headers_complete,
    .on_message_complete = engine_on_message_complete,
};
static const llhttp_settings_t parser_settings_llm = {
    .on_headers_complete = engine_on_headers_complete,
    .on_body = engine_on_body,
    .on_message_complete = engine_on_message_complete,
};

/* How soon after a request went out a close still reads as the keep-alive
 * race: the server's close was on its way (or already in) when the request
 * left, so it shows within about one round trip, plus this generator's own
 * delay in reading it: 100 ms covers a loaded 2-core machine running a
 * sanitized build (ThreadSanitizer's loop stalls tens of ms; a loopback
 * round trip is microseconds), and a server holding a request that long
 * before dropping it is caught. A server that held the request longer had
 * it, and dropped it. The round trip is the kernel's smoothed one for the
 * connection (over a long-haul link the race takes longer to show). */
#define ENGINE_RACE_NS 100000000

static int64_t engine_race_ns(const struct lg_conn *k)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    int64_t rtt_ns = 0;
    if (getsockopt(k->fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0)
        rtt_ns = (int64_t)ti.tcpi_rtt * 1000;
    return ENGINE_RACE_NS + 2 * rtt_ns;
}

static void engine_conn_request_failed(struct lg_conn *k)
{
    if (k->busy) {
        if (k->measured)
            k->run->r->errors++;
        if (k->measured && k->run->c->llm && engine_2xx(k))
            llmans_stats_broken(&k->run->r->llm, "a connection that closed mid-answer");
        /* Written whole to an open connection and never answered. When it
         * went out on a kept-alive connection, not one byte came back, and
         * the close came right after the send (engine_race_ns), the server
         * most likely closed that idle connection as the request crossed
         * it (the race every HTTP/1.1 keep-alive close has; clients retry
         * such requests, RFC 9112 9.3.1): counted apart. Anything else the
         * server may have accepted: lost. */
        if (k->measured && !k->connecting && !k->malformed && buf_unread(&k->out) == 0) {
            if (k->nsent > 1 && !k->got_bytes && now_ns() - k->t_sent <= engine_race_ns(k))
                k->run->r->closed_idle++;
            else
                k->run->r->lost++;
        }
        k->busy = false;
        k->run->outstanding--;
    }
}

static void engine_conn_remove(struct lg_conn *k)
{
    struct lg_run *run = k->run;
    for (int i = 0; i < run->nconns; i++)
        if (run->conns[i] == k) {
            run->conns[i] = run->conns[--run->nconns];
            break;
        }
    struct lg_conn **pp = &run->idle;
    while (*pp && *pp != k)
        pp = &(*pp)->next_idle;
    if (*pp)
        *pp = k->next_idle;
}

/* Closed loop: a new connection, each carrying a request, for every slot
 * of the concurrency without one. */
static void engine_refill(struct lg_run *run)
{
    while (!run->c->open_loop && run->sending && run->nconns < run->c->concurrency) {
        struct lg_conn *n = engine_conn_new(run);
        if (!n)
            return;
        int64_t now = now_ns();
        n->intended = now;
        n->measured = now >= run->t_measure;
        n->busy = true;
        run->outstanding++;
    }
}

static void engine_on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    engine_refill(arg);
}

static void engine_conn_close(struct lg_conn *k, bool failed)
{
    struct lg_run *run = k->run;
    if (failed)
        engine_conn_request_failed(k);
    engine_conn_remove(k);
    event_free(k->ev);
    close(k->fd);
    buf_free(&k->out);
    llmans_free(&k->ans);
    free(k);
    /* Work waiting for a connection gets a fresh one. */
    if (run->qhead != run->qtail && run->nconns < run->c->max_connections) {
        struct lg_conn *n = engine_conn_new(run);
        if (n) {
            struct pending p = run->q[run->qhead++ % run->qcap];
            n->intended = p.intended;
            n->measured = p.measured;
            n->busy = true;
            run->outstanding++;
        }
    } else if (!run->c->open_loop && run->retry_ns > 0) {
        if (run->sending && !evtimer_pending(run->retry, NULL)) {
            struct timeval tv = {0, (suseconds_t)(run->retry_ns / 1000)};
            evtimer_add(run->retry, &tv);
        }
    } else {
        engine_refill(run);
    }
    engine_finish_if_done(run);
}

/* Sends what it can; -1 when the connection failed and is gone. */
static int engine_conn_flush(struct lg_conn *k)
{
    while (buf_unread(&k->out) > 0) {
        ssize_t n = send(k->fd, buf_head(&k->out), buf_unread(&k->out), MSG_NOSIGNAL);
        if (n > 0) {
            buf_consume(&k->out, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return 0;   /* the caller watches for writability */
        engine_conn_close(k, true);
        return -1;
    }
    k->t_sent = now_ns();
    return 0;
}

static void engine_on_conn_event(evutil_socket_t fd, short what, void *arg);

static void engine_conn_watch(struct lg_conn *k, short what)
{
    event_del(k->ev);
    event_assign(k->ev, k->run->base, k->fd, what | EV_PERSIST, engine_on_conn_event, k);
    event_add(k->ev, NULL);
}

/* The next request's bytes onto k's output. */
static void engine_request_append(struct lg_run *run, struct lg_conn *k)
{
    const struct lg_config *c = run->c;
    if (c->llm) {
        llmans_begin(&k->ans, llmreq_stream(c->llm));
        if (llmreq_append_next(c->llm, &k->out) < 0)
            fprintf(stderr, "batchgate-load: out of memory building a request\n");
        return;
    }
    const struct lg_request *rq = &c->requests[run->next_req++ % (uint64_t)c->nrequests];
    buf_append(&k->out, rq->bytes.data, rq->bytes.len);
}

static int engine_conn_send_next(struct lg_conn *k, int64_t intended, bool measured)
{
    struct lg_run *run = k->run;
    k->intended = intended;
    k->measured = measured;
    if (!k->busy) {
        k->busy = true;
        run->outstanding++;
    }
    k->status = 0;
    k->nsent++;
    k->got_bytes = false;
    engine_request_append(run, k);
    if (engine_conn_flush(k) < 0)
        return -1;
    if (buf_unread(&k->out) > 0)
        engine_conn_watch(k, EV_READ | EV_WRITE);
    return 0;
}

/* Bytes past an answer with no request out. A whole unasked answer (a 408
 * before a close) was seen to already; anything else means the server framed
 * its answer short (a Content-Length under the body) or sent garbage, which a
 * real client reads as the start of its next answer: an error, and the
 * connection goes. Blank lines are tolerated, as llhttp does before a head. */
static void engine_conn_stray(struct lg_conn *k, const char *at, size_t len)
{
    size_t i = 0;
    while (i < len && (at[i] == '\r' || at[i] == '\n'))
        i++;
    if (i == len)
        return;
    llhttp_errno_t e = llhttp_execute(&k->parser, at, len);
    if (e == HPE_PAUSED && k->closing) {
        engine_conn_close(k, false);
        return;
    }
    if (k->measured)
        k->run->r->errors++;
    engine_conn_close(k, false);
}

static void engine_on_conn_event(evutil_socket_t fd, short what, void *arg)
{
    struct lg_conn *k = arg;
    (void)fd;
    if (k->connecting && (what & EV_WRITE)) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            /* Nothing listens. A connection is only opened carrying a
             * request, and the failure is that request's: counted when it
             * is measured, not when it was due in the warmup (those were
             * the window's errors). Once: the close counts the error
             * (engine_conn_request_failed), so errors = refused + lost +
             * closed_idle + the rest, as LOADGEN.md breaks them down. */
            if (k->busy && k->measured)
                k->run->r->refused++;
            struct lg_run *run = k->run;
            if (!evtimer_pending(run->retry, NULL)) {   /* once a round of retries */
                run->retry_ns = run->retry_ns ? run->retry_ns * 2 : ENGINE_RETRY_MIN_NS;
                if (run->retry_ns > ENGINE_RETRY_MAX_NS)
                    run->retry_ns = ENGINE_RETRY_MAX_NS;
            }
            engine_conn_close(k, true);
            return;
        }
        k->connecting = false;
        k->run->retry_ns = 0;
        engine_conn_watch(k, EV_READ);
        if (k->busy) {
            engine_request_append(k->run, k);
            k->nsent++;
            k->got_bytes = false;
        }
    }
    if ((what & EV_WRITE) && buf_unread(&k->out) > 0) {
        if (engine_conn_flush(k) < 0)
            return;
        if (buf_unread(&k->out) == 0)
            engine_conn_watch(k, EV_READ);
        return;
    }
    if (!(what & EV_READ))
        return;
    char data[16384];
    ssize_t n = read(k->fd, data, sizeof data);
    if (n <= 0) {
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        /* A body without Content-Length or chunking ends with the
         * connection (HTTP/1.0-style servers, some event streams): llhttp
         * completes that message on EOF, and the answer is whole. */
        if (n == 0 && k->busy && k->got_bytes) {
            k->run->t_read = now_ns();
            llhttp_finish(&k->parser);
            if (!k->busy) {
                engine_conn_close(k, false);
                return;
            }
        }
        engine_conn_close(k, true);
        return;
    }
    k->got_bytes = true;
    k->run->t_read = now_ns();
    size_t off = 0;
    while (off < (size_t)n) {
        llhttp_errno_t e = llhttp_execute(&k->parser, data + off, (size_t)n - off);
        if (e == HPE_OK)
            break;
        if (e != HPE_PAUSED) {
            k->malformed = true;
            engine_conn_close(k, true);   /* malformed response */
            return;
        }
        off = (size_t)(llhttp_get_error_pos(&k->parser) - data);
        llhttp_resume(&k->parser);
        if (k->closing) {
            engine_conn_close(k, false);
            return;
        }
        if (engine_conn_free_for_work(k) < 0)
            return;
        if (!k->busy) {
            engine_conn_stray(k, data + off, (size_t)n - off);
            return;
        }
    }
}

static struct lg_conn *engine_conn_new(struct lg_run *run)
{
    int fd = socket(run->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct lg_conn *k = calloc(1, sizeof *k);
    if (!k) {
        close(fd);
        return NULL;
    }
    k->run = run;
    k->fd = fd;
    k->connecting = true;
    llmans_init(&k->ans);
    llhttp_init(&k->parser, HTTP_RESPONSE, run->c->llm ? &parser_settings_llm : &parser_settings);
    k->parser.data = k;
    k->ev = event_new(run->base, fd, EV_WRITE | EV_PERSIST, engine_on_conn_event, k);
    if (connect(fd, (struct sockaddr *)&run->addr, run->addrlen) < 0 && errno != EINPROGRESS) {
        event_free(k->ev);
        close(fd);
        free(k);
        return NULL;
    }
    event_add(k->ev, NULL);
    if (run->nconns == run->cap_conns) {
        int cap = run->cap_conns ? run->cap_conns * 2 : 64;
        struct lg_conn **c = realloc(run->conns, (size_t)cap * sizeof *c);
        if (!c) {
            event_free(k->ev);
            close(fd);
            free(k);
            return NULL;
        }
        run->conns = c;
        run->cap_conns = cap;
    }
    run->conns[run->nconns++] = k;
    run->r->connections++;
    return k;
}

/* ---- the step ---- */

/* The step starts once the loop runs: its clock (t0, the window) is read
 * here, not before the loop was set up, or the first send, due at t0, was
 * now and then more than 1 ms late and counted a late send. */
static void engine_on_start(evutil_socket_t fd, short what, void *arg)
{
    struct lg_run *run = arg;
    const struct lg_config *c = run->c;
    (void)fd;
    (void)what;
    run->t0 = now_ns();
    run->t_measure = run->t0 + (int64_t)(c->warmup_s * 1e9);
    run->t_end = run->t_measure + (int64_t)(c->duration_s * 1e9);
    /* The window, then drain_ms for the answers in flight. */
    int64_t until = run->t_end + (int64_t)c->drain_ms * 1000000 - run->t0;
    struct timeval dl = {(time_t)(until / 1000000000), (suseconds_t)(until % 1000000000 / 1000)};
    evtimer_add(run->deadline, &dl);
    if (c->progress) {
        struct timeval one = {1, 0};
        event_add(run->progress, &one);
    }
    if (c->open_loop) {
        run->next_intended = run->t0;
        engine_on_timer(-1, EV_TIMEOUT, run);
        return;
    }
    int64_t span = run->t_end - run->t0;
    struct timeval end = {(time_t)(span / 1000000000), (suseconds_t)(span % 1000000000 / 1000)};
    evtimer_add(run->timer, &end);
    for (int i = 0; i < c->concurrency; i++) {
        struct lg_conn *k = engine_conn_new(run);
        if (!k) {
            run->r->errors++;
            continue;
        }
        k->intended = run->t0;
        k->measured = run->t0 >= run->t_measure;   /* --warmup 0: from the first */
        k->busy = true;
        run->outstanding++;
    }
}

int lg_run_step(const struct lg_config *c, struct lg_result *r, char *msg, int cap)
{
    memset(r, 0, sizeof *r);
    hist_reset(&r->latency);
    llmans_stats_reset(&r->llm);
    /* xorshift from a small seed (1, 2, ...) gives tiny numbers for its
     * first draws, which made the first Poisson gaps 20 or more mean gaps
     * long (at 5 requests/s the first step sent one request in its
     * window): the seed is scrambled first (splitmix64's finalizer). */
    uint64_t seed = c->seed + 0x9e3779b97f4a7c15ULL;
    seed = (seed ^ (seed >> 30)) * 0xbf58476d1ce4e5b9ULL;
    seed = (seed ^ (seed >> 27)) * 0x94d049bb133111ebULL;
    seed ^= seed >> 31;
    struct lg_run run = {.c = c, .r = r, .rng = seed ? seed : 1};
    char port[16];
    snprintf(port, sizeof port, "%d", c->port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int gai = getaddrinfo(c->host, port, &hints, &ai);
    if (gai) {
        snprintf(msg, (size_t)cap, "cannot resolve %s: %s", c->host, gai_strerror(gai));
        return -1;
    }
    memcpy(&run.addr, ai->ai_addr, ai->ai_addrlen);
    run.addrlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    /* Send instants need sub-millisecond timers: epoll's own timeout is in
     * whole milliseconds, so ask libevent for a timerfd. */
    struct event_config *ecfg = event_config_new();
    event_config_set_flag(ecfg, EVENT_BASE_FLAG_PRECISE_TIMER);
    run.base = event_base_new_with_config(ecfg);
    event_config_free(ecfg);
    run.timer = evtimer_new(run.base, engine_on_timer, &run);
    run.retry = evtimer_new(run.base, engine_on_retry, &run);
    run.deadline = evtimer_new(run.base, engine_on_deadline, &run);
    if (c->progress)
        run.progress = event_new(run.base, -1, EV_PERSIST, engine_on_progress, &run);
    run.sending = true;
    struct timeval zero = {0, 0};
    event_base_once(run.base, -1, EV_TIMEOUT, engine_on_start, &run, &zero);
    event_base_dispatch(run.base);
    if (run.sending)
        engine_window_end(&run);   /* --drain-ms 0: the deadline came first */
    for (int i = 0; i < run.nconns; i++)
        if (run.conns[i]->busy && run.conns[i]->measured) {
            r->errors++;   /* never answered */
            if (c->llm && engine_2xx(run.conns[i]))
                llmans_stats_broken(&r->llm, "an answer still coming after --drain-ms");
        }
    while (run.nconns > 0)
        engine_conn_close(run.conns[0], false);
    if (c->progress) {
        fprintf(stderr, "\r%*s\r", 70, "");
        event_free(run.progress);
    }
    event_free(run.deadline);
    event_free(run.timer);
    event_free(run.retry);
    event_base_free(run.base);
    free(run.conns);
    free(run.q);
    r->duration_s = c->duration_s;
    r->span_s = r->duration_s;
    if (run.t_last > run.t_end)
        r->span_s = (double)(run.t_last - run.t_measure) / 1e9;
    if (!c->open_loop)
        r->sent = r->answered + r->errors - r->unsent;
    r->achieved_rate = r->sent / r->duration_s;
    r->throughput = r->answered / r->span_s;
    r->goodput = r->good / r->span_s;
    /* Nothing answered at all: the target is not a server of this kind.
     * (Completions that broke were answered, wrongly: counted, not fatal.) */
    if (r->answered == 0 && r->connections > 0 && r->errors > 0 && r->latency.count == 0 &&
        r->llm.broken == 0) {
        snprintf(msg, (size_t)cap, "no answer from %s:%d (%llu errors)", c->host, c->port,
                 (unsigned long long)r->errors);
        return -1;
    }
    return 0;
}
