/* httpc.c - outbound HTTP/1.1 connections, their pipelined calls, the
 * answer parser and the pools. The targets (servers, their health and
 * accounting) are httpc_target.c.
 *
 * Why ~780 lines: a connection, its queue of pipelined calls and the llhttp
 * callbacks that match answers to calls are one state machine (which call
 * an answer byte belongs to, who is told when the connection dies midway);
 * the pool only hands connections out and takes them back, and is small. */
#include "common/httpc.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <llhttp.h>

#include "common/buf.h"
#include "common/busywin.h"
#include "common/clock.h"
#include "common/evwatch.h"
#include "common/fieldlist.h"
#include "common/httpc_impl.h"

#define READ_CHUNK 16384
#define MAX_RESPONSE_HEADERS 128
/* An answer's head in bytes (names and values): a server sending headers
 * without end made the gateway hold as much as it sent (800 MB in a test). */
#define MAX_RESPONSE_HEAD_BYTES (256u << 10)

int httpc_url_parse(const char *url, char *host, size_t host_cap, int *port, const char **path)
{
    const char *hp = url && strncmp(url, "http://", 7) == 0 ? url + 7 : NULL;
    if (!hp)
        return -1;
    const char *slash = strchr(hp, '/');
    const char *end_hp = slash ? slash : hp + strlen(hp);
    /* An IPv6 literal is bracketed (RFC 3986 3.2.2: "http://[::1]:8000");
     * a bare one's last group would pass for the port. */
    const char *hb = hp, *he, *colon;
    if (*hp == '[') {
        const char *rb = memchr(hp, ']', (size_t)(end_hp - hp));
        if (!rb)
            return -1;
        hb = hp + 1;
        he = rb;
        if (!memchr(hb, ':', (size_t)(he - hb)))
            return -1;   /* "[127.0.0.1]": brackets hold an IPv6 address only */
        colon = rb + 1 < end_hp && rb[1] == ':' ? rb + 1 : NULL;
        for (const char *p = hb; p < he; p++)
            if (!(*p == ':' || *p == '.' || (*p >= '0' && *p <= '9') ||
                  ((*p | 0x20) >= 'a' && (*p | 0x20) <= 'f')))
                return -1;   /* no zone ("%eth0"), nothing but an address */
    } else {
        colon = memchr(hp, ':', (size_t)(end_hp - hp));
        he = colon;
        if (colon && memchr(colon + 1, ':', (size_t)(end_hp - colon - 1)))
            return -1;
    }
    if (!colon || he == hb || (size_t)(he - hb) >= host_cap || colon + 1 == end_hp)
        return -1;
    long pt = 0;
    for (const char *p = colon + 1; p < end_hp; p++) {
        if (*p < '0' || *p > '9' || pt > 65535)
            return -1;
        pt = pt * 10 + (*p - '0');
    }
    if (pt < 1 || pt > 65535)
        return -1;
    memcpy(host, hb, (size_t)(he - hb));
    host[he - hb] = '\0';
    *port = (int)pt;
    if (path)
        *path = slash;
    return 0;
}

/* ---- connections ---- */

struct httpc_conn;

/* One request on a connection, in the order sent. cb == NULL: abandoned by
 * its caller (httpc_abort while others share the connection); its answer is
 * read and dropped when its turn comes. */
struct httpc_call {
    struct httpc_conn *conn;
    const struct httpc_cb *cb;
    void *arg;
    bool no_body, paused;
    bool req_open;                   /* HTTPC_REQUEST_STREAMS, before httpc_request_end */
    bool judged;                     /* HTTPC_JUDGED */
    int64_t t0;                      /* begun (now_ns): its answer's time, httpc_target_answered */
};

struct httpc_pool {
    struct httpc_target *t;
    struct event_base *base;
    struct httpc_conn *idle;
    int nidle, max_idle;
    int open;                        /* calls in progress on this pool (not abandoned) */
    int pipeline;                    /* most calls one connection carries at once */
    /* Pipelined calls begun in this pass of the loop join `join` (up to
     * `pipeline`); every connection holding such calls is corked: its bytes
     * wait in `out` until `flush` runs, after every callback the pass had
     * already queued, and go out in one send. */
    struct httpc_conn *join;
    struct httpc_conn *corked;
    struct event *flush;
    bool flush_pending;
    bool probe;                      /* httpc_pool_mark_probe */
    struct timeval connect_tv;       /* httpc_pool_set_connect_timeout */
    bool connect_timed;
};

struct httpc_conn {
    struct httpc_pool *pool;
    struct httpc_conn *next_idle;
    struct httpc_conn *next_corked;
    int fd;
    /* Two persistent events: changing what is watched costs one epoll_ctl
     * at most (never a delete and re-add), and most calls change nothing. */
    struct event *ev_read, *ev_write;
    bool reading, writing, corked;
    bool connecting, complete, got_bytes;
    bool in_read;                    /* callbacks from httpc_conn_read on the stack: never free c */
    bool in_parse;                   /* inside llhttp for the head call */
    bool lost;                       /* event_add failed: fail the calls from the loop */
    bool detached;                   /* out of its pool, socket and events gone: being failed */
    bool answered;                   /* a whole answer came on it: kept alive since */
    /* The request could not all be sent: the server answered and closed
     * (an early 413), or went away. Its answer, if any, is read first;
     * failing at once lost it (the call retried as a reset). */
    bool send_failed;
    char send_err[96];
    int connect_errno;               /* connect() failed at once; reported from the loop */
    llhttp_t parser;
    int cb_failed;                   /* the head call was ended from its own callback */
    struct buf out;
    struct buf hbuf;                 /* response header names and values, back to back */
    struct { uint32_t no, nl, vo, vl; } hdr[MAX_RESPONSE_HEADERS];
    int nhdrs;
    bool in_value, too_many_headers, head_too_large, bad_status, other_coding;
    /* The calls in the order their answers come: calls[(first + i) % MAX]. */
    struct httpc_call calls[HTTPC_PIPELINE_MAX];
    int first, ncalls;
    int nlive;                       /* of them, not abandoned */
};

static struct httpc_call *httpc_conn_head(struct httpc_conn *c)
{
    return c->ncalls ? &c->calls[c->first] : NULL;
}

/* Defined after its callbacks, below. */
static const llhttp_settings_t resp_settings;
static void httpc_conn_on_event(evutil_socket_t fd, short what, void *arg);

/* Reading stops while the head call is paused (an abandoned one never is);
 * writing while there is something to write (and the pool's flush is not
 * due to write it) or a connect pends. A connection whose events cannot be
 * added (evwatch.h) is marked lost and its calls fail from the loop, never
 * from inside a caller. */
static void httpc_conn_update_events(struct httpc_conn *c)
{
    if (c->detached)
        return;
    struct httpc_call *h = httpc_conn_head(c);
    bool r = !h || !h->cb || !h->paused;
    bool w = c->connecting || (buf_unread(&c->out) > 0 && !c->corked && !c->send_failed);
    if (r != c->reading) {
        if (r && evwatch_add(c->ev_read, NULL, c->ev_write) < 0)
            c->lost = true;
        else if (!r)
            event_del(c->ev_read);
        c->reading = r;
    }
    if (w != c->writing) {
        /* A connect pending is timed (the event's timeout: EV_TIMEOUT). */
        if (w && evwatch_add(c->ev_write,
                             c->connecting && c->pool->connect_timed ? &c->pool->connect_tv
                                                                     : NULL,
                             c->ev_write) < 0)
            c->lost = true;
        else if (!w)
            event_del(c->ev_write);
        c->writing = w;
    }
}

/* Out of its pool's lists (no new call joins it), its events and socket
 * gone; its memory stays (httpc_conn_close frees it). */
static void httpc_conn_detach(struct httpc_conn *c)
{
    if (c->detached)
        return;
    c->detached = true;
    struct httpc_pool *p = c->pool;
    if (c->ncalls == 0) {
        struct httpc_conn **pp = &p->idle;
        while (*pp && *pp != c)
            pp = &(*pp)->next_idle;
        if (*pp) {
            *pp = c->next_idle;
            p->nidle--;
        }
    }
    if (c->corked) {
        struct httpc_conn **pp = &p->corked;
        while (*pp != c)
            pp = &(*pp)->next_corked;
        *pp = c->next_corked;
    }
    if (p->join == c)
        p->join = NULL;
    event_free(c->ev_read);
    event_free(c->ev_write);
    close(c->fd);
}

static void httpc_conn_close(struct httpc_conn *c)
{
    httpc_conn_detach(c);
    buf_free(&c->out);
    buf_free(&c->hbuf);
    free(c);
}

/* The call stops counting (done, failed, aborted or abandoned). */
static void httpc_call_end(struct httpc_call *k)
{
    if (!k->cb)
        return;   /* abandoned: ended then */
    struct httpc_conn *c = k->conn;
    c->pool->open--;
    c->nlive--;
    if (!c->pool->probe)
        httpc_target_end(c->pool->t);
    k->cb = NULL;
    k->arg = NULL;
}

/* Removes the head call (ended already or about to be). */
static void httpc_conn_pop(struct httpc_conn *c)
{
    c->first = (c->first + 1) % HTTPC_PIPELINE_MAX;
    c->ncalls--;
}

static void httpc_conn_reset_parser(struct httpc_conn *c)
{
    llhttp_init(&c->parser, HTTP_RESPONSE, &resp_settings);
    c->parser.data = c;
    c->complete = c->got_bytes = false;
    c->cb_failed = 0;
    c->nhdrs = 0;
    c->in_value = c->too_many_headers = c->head_too_large = c->bad_status = c->other_coding =
        false;
    buf_reset(&c->hbuf);
}

/* The connection is lost: closes it, then tells every live call. The head
 * call gets `why` (unless skip_head: its caller ended it); the calls behind
 * it learn that nothing was answered to them (a refusal when the connection
 * never opened, else a reset), so a caller may repeat an idempotent one.
 * With `count`, one failure is counted against the target: one lost
 * connection is one event however many calls it carried. */
static void httpc_conn_fail_all(struct httpc_conn *c, enum httpc_fail why, const char *msg,
                          bool skip_head, bool count)
{
    static const char behind[] = "connection lost before the answer (pipelined behind another request)";
    httpc_conn_detach(c);
    if (count && c->pool->probe)
        httpc_target_count_failure(c->pool->t, why);
    else if (count)
        httpc_target_failed(c->pool->t, why);
    /* Each call is told as it is ended, c kept until the last: a caller's
     * on_error may end the calls behind (a proxy's client that left has
     * its other requests freed, which abort theirs), and those must find
     * c, and find themselves ended, not be told after their caller is
     * gone (both were a use after free). */
    c->in_read = true;
    for (bool head = true; c->ncalls; head = false) {
        struct httpc_call *k = httpc_conn_head(c);
        httpc_conn_pop(c);
        const struct httpc_cb *cb = k->cb;
        void *arg = k->arg;
        httpc_call_end(k);
        if (!cb || (head && skip_head) || !cb->on_error)
            continue;
        bool own = head || why == HTTPC_FAIL_CONNECT;
        cb->on_error(arg, own ? why : HTTPC_FAIL_RESET, own ? msg : behind);
    }
    httpc_conn_close(c);
}

static void httpc_conn_fail(struct httpc_conn *c, enum httpc_fail why, const char *msg)
{
    httpc_conn_fail_all(c, why, msg, false, true);
}

/* The connection closed or reset under its calls. Before a byte of the
 * next answer on one kept alive after an answer, that is the keep-alive
 * race (the server closed it as idle while the request was on its way):
 * counted as a reset, but not against the server's health (three in a
 * row took a healthy server out); its callers may repeat the calls
 * (upcall.h). */
static void httpc_conn_lost(struct httpc_conn *c, const char *msg)
{
    bool stale = c->answered && !c->got_bytes;
    if (stale)
        httpc_target_count_failure(c->pool->t, HTTPC_FAIL_RESET);
    httpc_conn_fail_all(c, HTTPC_FAIL_RESET, msg, false, !stale);
}

/* ---- response parsing ---- */

static int httpc_on_header_field(llhttp_t *p, const char *at, size_t n)
{
    struct httpc_conn *c = p->data;
    if (c->nhdrs == 0 || c->in_value) {
        if (c->nhdrs == MAX_RESPONSE_HEADERS) {
            c->too_many_headers = true;
            return -1;
        }
        c->hdr[c->nhdrs].no = (uint32_t)c->hbuf.len;
        c->hdr[c->nhdrs].nl = c->hdr[c->nhdrs].vo = c->hdr[c->nhdrs].vl = 0;
        c->nhdrs++;
        c->in_value = false;
    }
    if (c->hbuf.len + n > MAX_RESPONSE_HEAD_BYTES) {
        c->head_too_large = true;
        return -1;
    }
    if (buf_append(&c->hbuf, at, n) < 0)
        return -1;
    c->hdr[c->nhdrs - 1].nl += (uint32_t)n;
    return 0;
}

static int httpc_on_header_value(llhttp_t *p, const char *at, size_t n)
{
    struct httpc_conn *c = p->data;
    if (!c->in_value) {
        c->hdr[c->nhdrs - 1].vo = (uint32_t)c->hbuf.len;
        c->in_value = true;
    }
    if (c->hbuf.len + n > MAX_RESPONSE_HEAD_BYTES) {
        c->head_too_large = true;
        return -1;
    }
    if (buf_append(&c->hbuf, at, n) < 0)
        return -1;
    c->hdr[c->nhdrs - 1].vl += (uint32_t)n;
    return 0;
}

/* Whether a Transfer-Encoding names a coding other than chunked: llhttp
 * undoes the chunking only, and the rest (gzip) would reach the caller
 * undone and unlabelled, as the request side refuses it (501). */
static bool httpc_other_coding(const struct httpc_conn *c)
{
    const char *base = c->hbuf.data ? c->hbuf.data : "";
    for (int i = 0; i < c->nhdrs; i++) {
        if (c->hdr[i].nl != 17 || strncasecmp(base + c->hdr[i].no, "Transfer-Encoding", 17))
            continue;
        const char *v = base + c->hdr[i].vo, *end = v + c->hdr[i].vl, *tok;
        size_t len;
        while (fieldlist_next(&v, end, &tok, &len))
            if (!(len == 7 && strncasecmp(tok, "chunked", 7) == 0))
                return true;
    }
    return false;
}

static int httpc_on_headers_complete(llhttp_t *p)
{
    struct httpc_conn *c = p->data;
    struct httpc_call *k = httpc_conn_head(c);
    int status = llhttp_get_status_code(p);
    if (status < 100 || status > 599) {
        c->bad_status = true;   /* not a status HTTP defines: nothing to pass on */
        return -1;
    }
    if (httpc_other_coding(c)) {
        c->other_coding = true;
        return -1;
    }
    if (status >= 100 && status < 200 && status != 101) {
        /* An interim answer (100 Continue, 103): not ours to pass on; the
         * final one follows. llhttp treats it as a whole message. */
        c->nhdrs = 0;
        c->in_value = false;
        buf_reset(&c->hbuf);
        return 1;   /* never a body, whatever it declares (found by fuzz_httpc_response) */
    }
    if (k->cb && k->cb->on_head) {
        struct httpc_header h[MAX_RESPONSE_HEADERS];
        /* Empty names and values can leave the buffer unallocated. */
        const char *base = c->hbuf.data ? c->hbuf.data : "";
        for (int i = 0; i < c->nhdrs; i++) {
            h[i].name = base + c->hdr[i].no;
            h[i].name_len = c->hdr[i].nl;
            h[i].value = base + c->hdr[i].vo;
            h[i].value_len = c->hdr[i].vl;
        }
        struct httpc_head head = {
            .status = status,
            .http_minor = llhttp_get_http_minor(p),
            .content_length = (p->flags & F_CONTENT_LENGTH) ? (int64_t)p->content_length : -1,
            .chunked = (p->flags & F_CHUNKED) != 0,
            .hdrs = h,
            .nhdrs = c->nhdrs,
        };
        if (k->cb->on_head(k->arg, &head) < 0) {
            c->cb_failed = 1;
            return -1;
        }
    }
    /* 1: the answer has no body whatever it declares: HEAD's, and a 204 or
     * 304 (RFC 9112 6.3 rule 1; a 304 may carry its representation's
     * Content-Length: read as a body, it swallowed the next answer). */
    return k->no_body || status == 204 || status == 304 ? 1 : 0;
}

static int httpc_on_body(llhttp_t *p, const char *at, size_t n)
{
    struct httpc_conn *c = p->data;
    struct httpc_call *k = httpc_conn_head(c);
    if (k->cb && k->cb->on_body && k->cb->on_body(k->arg, at, n) < 0) {
        c->cb_failed = 1;
        return -1;
    }
    return 0;
}

static int httpc_on_message_complete(llhttp_t *p)
{
    struct httpc_conn *c = p->data;
    int status = llhttp_get_status_code(p);
    if (status >= 100 && status < 200 && status != 101)
        return 0;   /* interim: keep parsing for the final answer */
    c->complete = true;
    return HPE_PAUSED;
}

/* llhttp keeps a pointer to the settings; one constant table, built at
 * compile time, serves the pools of every thread without a once-guard. */
static const llhttp_settings_t resp_settings = {
    .on_header_field = httpc_on_header_field,
    .on_header_value = httpc_on_header_value,
    .on_headers_complete = httpc_on_headers_complete,
    .on_body = httpc_on_body,
    .on_message_complete = httpc_on_message_complete,
};

/* The head call's answer is complete; `leftover`: bytes follow it in this
 * read. Returns true when c lives on with the next call's answer to parse
 * (from the leftover bytes, or the next read), false when c is idle in its
 * pool or gone. */
static bool httpc_conn_finish(struct httpc_conn *c, bool leftover)
{
    struct httpc_call *k = httpc_conn_head(c);
    const struct httpc_cb *cb = k->cb;
    void *arg = k->arg;
    struct httpc_pool *pool = c->pool;
    /* A request not all sent when its answer ended: the rest would be
     * read as the next request's start (another client's, on this pool). */
    bool alive = llhttp_should_keep_alive(&c->parser) && !k->req_open && !c->send_failed;
    /* A whole answer is a working server, unless it says otherwise: a 5xx
     * is its caller's to judge (httpc_target_failed), and counting it a
     * success here first would restart the count of failures in a row at
     * every call, so that a server answering only 500s was never taken out. */
    int status = llhttp_get_status_code(&c->parser);
    bool worked = !pool->probe && !k->judged && status < 500;
    if (!pool->probe && k->cb)
        httpc_target_answered(pool->t, now_ns() - k->t0, status);
    httpc_call_end(k);
    httpc_conn_pop(c);
    c->answered = true;
    if (c->ncalls == 0) {
        bool keep = !leftover && alive && buf_unread(&c->out) == 0 && pool->nidle < pool->max_idle;
        if (keep) {
            httpc_conn_reset_parser(c);
            c->next_idle = pool->idle;
            pool->idle = c;
            pool->nidle++;
            httpc_conn_update_events(c);   /* idle: watch for the server closing it */
        } else {
            httpc_conn_close(c);
        }
        if (worked)
            httpc_target_succeeded(pool->t);
        if (cb && cb->on_done)
            cb->on_done(arg);
        return false;
    }
    /* Calls wait behind this one. */
    if (!alive) {
        /* The server ends the connection after this answer: the rest go
         * unanswered (their callers may repeat them elsewhere). c outlives
         * on_done, which may abandon them (the client left: a use after
         * free, helper's audit). */
        if (worked)
            httpc_target_succeeded(pool->t);
        c->in_read = true;
        if (cb && cb->on_done)
            cb->on_done(arg);
        c->in_read = false;
        httpc_conn_fail_all(c, HTTPC_FAIL_RESET,
                            "the server ended the connection after the answer ahead",
                      false, false);
        return false;
    }
    httpc_conn_reset_parser(c);
    if (worked)
        httpc_target_succeeded(pool->t);
    c->in_read = true;   /* on_done may abandon the calls behind: c must outlive it */
    if (cb && cb->on_done)
        cb->on_done(arg);
    c->in_read = false;
    if (c->nlive == 0) {
        httpc_conn_close(c);   /* nobody waits for the answers left */
        return false;
    }
    httpc_conn_update_events(c);   /* the new head may be paused */
    return true;
}

/* The head call's caller ended it from a callback (or every live call was
 * abandoned there): the connection goes, the others are told. */
static void httpc_conn_drop_head(struct httpc_conn *c)
{
    httpc_conn_fail_all(c, HTTPC_FAIL_RESET, "connection closed by the caller", true, false);
}

static void httpc_conn_read(struct httpc_conn *c)
{
    char data[READ_CHUNK];
    ssize_t n = read(c->fd, data, sizeof data);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (c->ncalls == 0) {
        /* The server closed an idle connection, or sent what nobody asked for. */
        httpc_conn_close(c);
        return;
    }
    if (n == 0) {
        /* A body delimited by the close ends here. */
        if (!c->complete && c->got_bytes) {
            c->in_read = c->in_parse = true;
            llhttp_finish(&c->parser);
            c->in_read = c->in_parse = false;
        }
        if (c->cb_failed) {
            httpc_conn_drop_head(c);
            return;
        }
        if (c->complete) {
            if (httpc_conn_finish(c, true))   /* the calls behind get no answer now */
                httpc_conn_fail(c, HTTPC_FAIL_RESET, "connection closed before the answer");
            return;
        }
        httpc_conn_lost(c, c->got_bytes     ? "connection closed in the middle of the answer"
                           : c->send_failed ? c->send_err
                                            : "connection closed before the answer");
        return;
    }
    if (n < 0) {
        char msg[96];
        snprintf(msg, sizeof msg, "read: %s", strerror(errno));
        httpc_conn_lost(c, c->send_failed && !c->got_bytes ? c->send_err : msg);
        return;
    }
    /* One read may hold the answers of several pipelined calls. */
    size_t off = 0;
    while (off < (size_t)n) {
        c->got_bytes = true;
        c->in_read = c->in_parse = true;
        llhttp_errno_t e = llhttp_execute(&c->parser, data + off, (size_t)n - off);
        c->in_read = c->in_parse = false;
        if (c->cb_failed || c->nlive == 0) {
            /* The caller ended the call from a callback: it expects nothing more. */
            httpc_conn_drop_head(c);
            return;
        }
        if (e == HPE_PAUSED && c->complete) {
            off = (size_t)(llhttp_get_error_pos(&c->parser) - data);
            if (!httpc_conn_finish(c, off < (size_t)n))
                return;
            continue;
        }
        if (e != HPE_OK) {
            char msg[160];
            snprintf(msg, sizeof msg, "malformed HTTP answer: %s",
                     c->too_many_headers ? "too many headers"
                     : c->head_too_large ? "headers over 256 KiB"
                     : c->other_coding   ? "a transfer coding other than chunked"
                     : c->bad_status     ? "status code outside 100..599"
                                         : llhttp_get_error_reason(&c->parser));
            httpc_conn_fail(c, HTTPC_FAIL_MALFORMED, msg);
        }
        return;
    }
}

static void httpc_conn_write(struct httpc_conn *c)
{
    if (c->connecting) {
        int err = c->connect_errno;
        socklen_t len = sizeof err;
        if (!err)
            getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            char msg[400];
            snprintf(msg, sizeof msg, "connect: %s", strerror(err));
            httpc_conn_fail(c, HTTPC_FAIL_CONNECT, msg);
            return;
        }
        c->connecting = false;
        /* Untimed now: event_add with no timeout keeps an old one, and a
         * persistent event's timeout would fire every interval. */
        if (c->writing) {
            event_del(c->ev_write);
            if (evwatch_add(c->ev_write, NULL, c->ev_write) < 0)
                c->lost = true;
        }
    }
    while (buf_unread(&c->out) > 0 && !c->send_failed) {
        ssize_t n = send(c->fd, buf_head(&c->out), buf_unread(&c->out), MSG_NOSIGNAL);
        if (n > 0) {
            buf_consume(&c->out, (size_t)n);
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            break;
        /* The server may have answered and closed before reading it all
         * (an early 413): the read side delivers that answer first (a
         * closed socket is readable), or fails the call with this. */
        c->send_failed = true;
        snprintf(c->send_err, sizeof c->send_err, "send: %s", n < 0 ? strerror(errno) : "closed");
        buf_consume(&c->out, buf_unread(&c->out));
        httpc_conn_update_events(c);
        return;
    }
    bool drained = buf_unread(&c->out) == 0;
    if (drained)
        buf_shrink(&c->out, 64 * 1024);
    httpc_conn_update_events(c);
    /* Only a connection's only call can be streaming a body to wait on. */
    struct httpc_call *k = httpc_conn_head(c);
    if (drained && c->ncalls == 1 && k->cb && k->cb->on_sent)
        k->cb->on_sent(k->arg);
}

static void httpc_conn_on_event(evutil_socket_t fd, short what, void *arg)
{
    struct httpc_conn *c = arg;
    (void)fd;
    if (c->lost) {
        /* Not the server's doing: no failure counted against it. */
        httpc_conn_fail_all(c, HTTPC_FAIL_RESET, "out of memory watching the connection", false,
                            false);
        return;
    }
    /* One side per round: httpc_conn_write may free c (a failure) or its caller
     * may end the call from on_sent. Events are level-triggered, so a
     * pending read is reported again on the next round. */
    if (what & EV_TIMEOUT) {
        if (c->connecting) {   /* no SYN-ACK in time: as refused */
            c->connect_errno = ETIMEDOUT;
            httpc_conn_write(c);
        }
        return;
    }
    if (what & EV_WRITE)
        httpc_conn_write(c);
    else if (what & EV_READ)
        httpc_conn_read(c);
}

/* ---- pools ---- */

/* The end of a pass of the loop: every corked connection sends what its
 * pipelined calls queued, in one send each. */
static void httpc_pool_on_flush(evutil_socket_t fd, short what, void *arg)
{
    struct httpc_pool *p = arg;
    (void)fd;
    (void)what;
    p->flush_pending = false;
    p->join = NULL;
    struct httpc_conn *c;
    while ((c = p->corked)) {
        p->corked = c->next_corked;
        c->corked = false;
        if (c->connect_errno)
            continue;   /* its refusal is already queued for reporting */
        if (c->connecting)
            httpc_conn_update_events(c);   /* sent once connected */
        else
            httpc_conn_write(c);
    }
}

struct httpc_pool *httpc_pool_new(struct httpc_target *t, struct event_base *base, int max_idle,
                                  int pipeline)
{
    struct httpc_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->t = httpc_target_ref(t);
    p->base = base;
    p->max_idle = max_idle > 0 ? max_idle : 1;
    p->pipeline = pipeline < 1 ? 1 : pipeline > HTTPC_PIPELINE_MAX ? HTTPC_PIPELINE_MAX : pipeline;
    httpc_pool_set_connect_timeout(p, HTTPC_CONNECT_TIMEOUT_MS);
    if (p->pipeline > 1 && !(p->flush = event_new(base, -1, 0, httpc_pool_on_flush, p))) {
        httpc_target_unref(t);
        free(p);
        return NULL;
    }
    return p;
}

void httpc_pool_set_connect_timeout(struct httpc_pool *p, int ms)
{
    p->connect_timed = ms > 0;
    p->connect_tv = (struct timeval){ms / 1000, (suseconds_t)(ms % 1000) * 1000};
}

int httpc_pool_open(const struct httpc_pool *p) { return p->open; }

void httpc_pool_mark_probe(struct httpc_pool *p) { p->probe = true; }

void httpc_pool_free(struct httpc_pool *p)
{
    if (!p)
        return;
    while (p->idle)
        httpc_conn_close(p->idle);
    if (p->flush)
        event_free(p->flush);
    struct httpc_target *t = p->t;
    free(p);
    httpc_target_unref(t);   /* the pool's reference */
}

struct httpc_target *httpc_pool_target(const struct httpc_pool *p) { return p->t; }

/* A connection object around fd (closed on failure). */
static struct httpc_conn *httpc_conn_new(struct httpc_pool *p, int fd, struct error *err)
{
    struct httpc_conn *c = calloc(1, sizeof *c);
    if (c) {
        c->ev_read = event_new(p->base, fd, EV_READ | EV_PERSIST, httpc_conn_on_event, c);
        c->ev_write = event_new(p->base, fd, EV_WRITE | EV_PERSIST, httpc_conn_on_event, c);
    }
    if (!c || !c->ev_read || !c->ev_write) {
        if (c && c->ev_read)
            event_free(c->ev_read);
        if (c && c->ev_write)
            event_free(c->ev_write);
        free(c);
        close(fd);
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    c->pool = p;
    c->fd = fd;
    return c;
}

static struct httpc_conn *httpc_conn_connect(struct httpc_pool *p, struct error *err)
{
    struct httpc_target *t = p->t;
    socklen_t alen;
    const struct sockaddr_storage *addr = httpc_target_addr(t, &alen);
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        error_set(err, BG_EINTERNAL, "socket: %s", strerror(errno));
        return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct httpc_conn *c = httpc_conn_new(p, fd, err);
    if (!c)
        return NULL;
    c->connecting = true;
    if (connect(fd, (const struct sockaddr *)addr, alen) < 0 && errno != EINPROGRESS)
        c->connect_errno = errno ? errno : ECONNREFUSED;
    return c;
}

/* Appends a call to c's queue. */
static struct httpc_call *httpc_call_push(struct httpc_conn *c, const struct httpc_cb *cb,
                                          void *arg,
                                    unsigned flags)
{
    struct httpc_call *k = &c->calls[(c->first + c->ncalls) % HTTPC_PIPELINE_MAX];
    *k = (struct httpc_call){.conn = c, .cb = cb, .arg = arg, .no_body = (flags & HTTPC_NO_BODY) != 0,
                             .judged = (flags & HTTPC_JUDGED) != 0,
                             .req_open = (flags & HTTPC_REQUEST_STREAMS) != 0,
                             .t0 = now_ns()};
    c->ncalls++;
    c->nlive++;
    c->pool->open++;
    if (!c->pool->probe)
        httpc_target_begin(c->pool->t, c->ncalls > 1);
    return k;
}

static struct httpc_call *httpc_call_begin(struct httpc_pool *p, struct httpc_conn *c,
                                     const struct httpc_cb *cb, void *arg, unsigned flags)
{
    httpc_conn_reset_parser(c);
    struct httpc_call *k = httpc_call_push(c, cb, arg, flags);
    if (c->connect_errno) {
        /* Refused at once (loopback): report it from the loop like any other
         * refusal, never from inside the caller. */
        event_active(c->ev_write, EV_WRITE, 0);
        return k;
    }
    if ((flags & HTTPC_PIPELINE) && p->pipeline > 1) {
        /* Calls of this pass join it until the flush sends them together. */
        p->join = c;
        c->corked = true;
        c->next_corked = p->corked;
        p->corked = c;
        if (!p->flush_pending) {
            p->flush_pending = true;
            event_active(p->flush, EV_TIMEOUT, 0);
        }
    }
    httpc_conn_update_events(c);
    return k;
}

struct httpc_call *httpc_open(struct httpc_pool *p, const struct httpc_cb *cb, void *arg,
                              unsigned flags, bool *reused, struct error *err)
{
    bool fresh = (flags & HTTPC_FRESH) != 0;
    if (!fresh && (flags & HTTPC_PIPELINE) && p->join && p->join->ncalls < p->pipeline) {
        /* Behind another call: a loss before its answer says nothing about
         * whether the server saw it, as on a reused connection. */
        struct httpc_conn *c = p->join;
        if (reused)
            *reused = true;
        struct httpc_call *k = httpc_call_push(c, cb, arg, flags);
        if (c->ncalls == p->pipeline)
            p->join = NULL;
        return k;
    }
    struct httpc_conn *c = fresh ? NULL : p->idle;
    if (c) {
        p->idle = c->next_idle;
        p->nidle--;
        c->next_idle = NULL;
    } else if (!(c = httpc_conn_connect(p, err))) {
        return NULL;
    }
    if (reused)
        *reused = !c->connecting;
    return httpc_call_begin(p, c, cb, arg, flags);
}

struct httpc_call *httpc_adopt(struct httpc_pool *p, int fd, const struct httpc_cb *cb, void *arg,
                               unsigned flags, struct error *err)
{
    struct httpc_conn *c = httpc_conn_new(p, fd, err);
    return c ? httpc_call_begin(p, c, cb, arg, flags) : NULL;
}

void httpc_request_end(struct httpc_call *k)
{
    if (k)
        k->req_open = false;
}

int httpc_send(struct httpc_call *k, const void *data, size_t len)
{
    struct httpc_conn *c = k->conn;
    /* Connected and nothing queued: write now, the common case costs one
     * send and no event change. Failures are left to the loop (never
     * reported from inside the caller). A corked connection waits for its
     * pool's flush. */
    if (!c->connecting && !c->connect_errno && !c->corked && buf_unread(&c->out) == 0) {
        ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n == (ssize_t)len)
            return 0;
        if (n > 0) {
            data = (const char *)data + n;
            len -= (size_t)n;
        }
    }
    if (buf_append(&c->out, data, len) < 0)
        return -1;
    /* A refusal already queued for reporting keeps its event as it is. */
    if (!c->connect_errno)
        httpc_conn_update_events(c);
    return 0;
}

size_t httpc_unsent(const struct httpc_call *k) { return buf_unread(&k->conn->out); }

void httpc_pause(struct httpc_call *k, bool paused)
{
    if (k->paused == paused)
        return;
    k->paused = paused;
    if (!k->conn->connect_errno && k == httpc_conn_head(k->conn))
        httpc_conn_update_events(k->conn);
}

void httpc_abort(struct httpc_call *k)
{
    struct httpc_conn *c = k->conn;
    if (c->in_parse && k == httpc_conn_head(c)) {
        /* Called from on_head/httpc_on_body: the read handler closes c on return. */
        c->cb_failed = 1;
        llhttp_pause(&c->parser);
        return;
    }
    httpc_call_end(k);
    if (c->nlive > 0) {
        /* Others share the connection: this call's answer will be read and
         * dropped in its turn (reading resumes if it was paused). */
        if (k == httpc_conn_head(c) && !c->connect_errno)
            httpc_conn_update_events(c);
        return;
    }
    if (c->in_read)
        return;   /* the read handler sees nobody is left and closes c */
    while (c->ncalls)
        httpc_conn_pop(c);
    httpc_conn_close(c);
}
