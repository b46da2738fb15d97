/* fuzz_httpc_response.c - the upstream answer parser (common/httpc.c): bytes
 * a model server or a proxied server sends back, through a real httpc call.
 *
 * Input layout: byte 0 is flags - 1: the call is for a HEAD request (no
 * body whatever the headers say); 2: the callbacks pause reading after each
 * body piece and resume on the next loop pass (the proxy's backpressure);
 * 4: the caller ends the call from on_body (the proxy when its client left);
 * 8: three pipelined calls share the connection (the answers of all three
 * follow one another in the input); 16: with 8, the middle call is
 * abandoned by its caller before any answer arrives.
 * Byte 1 cuts the rest into two writes (at k/255 of its length). The rest is
 * what the server sends over a socketpair; then the server side closes.
 *
 * Beyond "no crash, no leak": every call ends exactly once (on_done or
 * on_error, or the caller's own abort), in the order the calls were made;
 * on_head comes at most once and before any body byte, and a call that
 * ended with on_done saw a status. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/httpc.h"
#include "common/log.h"

struct call {
    struct httpc_call *c;
    int idx, *ended;                 /* its place; calls ended so far (in order) */
    int heads, dones, errors;
    int status;
    size_t body;
    bool abort_in_body, pause;
    bool aborted;
    struct event *resume;
};

static void resume_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct call *k = arg;
    if (k->c && !k->aborted && k->dones + k->errors == 0)
        httpc_pause(k->c, false);
}

static int on_head(void *arg, const struct httpc_head *h)
{
    struct call *k = arg;
    if (k->heads++ || k->body)
        abort();   /* one head, before the body */
    k->status = h->status;
    for (int i = 0; i < h->nhdrs; i++)
        if (!h->hdrs[i].name || (h->hdrs[i].value_len && !h->hdrs[i].value))
            abort();
    return 0;
}

static int on_body(void *arg, const char *data, size_t len)
{
    struct call *k = arg;
    if (!k->heads)
        abort();
    volatile char sink = 0;
    for (size_t i = 0; i < len; i++)
        sink ^= data[i];   /* every byte handed over is readable */
    (void)sink;
    k->body += len;
    if (k->abort_in_body) {
        k->aborted = true;
        return -1;
    }
    if (k->pause) {
        httpc_pause(k->c, true);
        event_active(k->resume, EV_TIMEOUT, 0);
    }
    return 0;
}

static void in_order(struct call *k)
{
    if (*k->ended > k->idx)
        abort();   /* a call ended after one behind it */
    *k->ended = k->idx + 1;
}

static void on_done(void *arg)
{
    struct call *k = arg;
    in_order(k);
    k->dones++;
    if (!k->heads || k->status < 100)
        abort();
}

static void on_error(void *arg, enum httpc_fail why, const char *msg)
{
    struct call *k = arg;
    in_order(k);
    k->errors++;
    if (why >= HTTPC_FAIL_COUNT || !msg)
        abort();
}

static const struct httpc_cb cb = {on_head, on_body, on_done, on_error, NULL};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint8_t flags = data[0], cut = data[1];
    data += 2;
    size -= 2;
    static struct httpc_target *t;
    if (!t) {
        struct error err = {0};
        t = httpc_target_new("127.0.0.1", 9, "fuzz", "fuzz", &err);
        if (!t)
            abort();
        /* The target's take-out and return lines would be most of the
         * output: only errors from here on. */
        char msg[128];
        struct log *quiet = log_open(NULL, LOG_ERROR, msg, sizeof msg);
        if (quiet)
            log_set_default(quiet);
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    /* Allocations fail only under tests/oom's replay: nothing to check then
     * but that nothing leaks. */
    int ncalls = (flags & 8) ? 3 : 1, ended = 0;
    struct event_base *base = event_base_new();
    struct httpc_pool *pool = base ? httpc_pool_new(t, base, 4, ncalls) : NULL;
    if (!pool) {
        if (base)
            event_base_free(base);
        close(sv[0]);
        close(sv[1]);
        return 0;
    }
    struct call k[3];
    /* The requests go out (the server side never reads them: small ones fit). */
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    for (int i = 0; i < ncalls; i++) {
        k[i] = (struct call){.idx = i, .ended = &ended, .abort_in_body = flags & 4,
                             .pause = flags & 2};
        k[i].resume = event_new(base, -1, 0, resume_cb, &k[i]);
        if (!k[i].resume)
            k[i].pause = false;
        struct error err = {0};
        unsigned f = ((flags & 1) ? HTTPC_NO_BODY : 0) | (ncalls > 1 ? HTTPC_PIPELINE : 0);
        /* The first call takes the socketpair; the others join it. */
        k[i].c = i == 0 ? httpc_adopt(pool, sv[0], &cb, &k[i], f, &err)
                        : httpc_open(pool, &cb, &k[i], f, NULL, &err);
        if (!k[i].c) {
            /* Out of memory (tests/oom): this call and the rest are never made
             * (adopt closed sv[0]; a later one would dial a real port). */
            for (int j = i; j < ncalls; j++) {
                if (j > i)
                    k[j] = (struct call){.idx = j, .ended = &ended};
                k[j].aborted = true;
            }
            break;
        }
        httpc_send(k[i].c, req, sizeof req - 1);
    }
    if (ncalls > 1 && (flags & 16) && !k[1].aborted) {
        httpc_abort(k[1].c);
        k[1].aborted = true;
    }
    size_t first = size * cut / 255, off = 0;
    for (int part = 0; part < 2; part++) {
        size_t end = part == 0 ? first : size;
        while (off < end) {
            ssize_t n = send(sv[1], data + off, end - off, MSG_NOSIGNAL);
            if (n > 0) {
                off += (size_t)n;
                continue;
            }
            if (n < 0 && errno != EAGAIN)
                break;
            event_base_loop(base, EVLOOP_NONBLOCK);   /* let the client drain */
        }
        for (int i = 0; i < 4; i++)
            event_base_loop(base, EVLOOP_NONBLOCK);
    }
    shutdown(sv[1], SHUT_WR);
    for (int i = 0; i < 1000; i++) {
        int open = 0;
        for (int j = 0; j < ncalls; j++)
            open += k[j].dones + k[j].errors == 0 && !k[j].aborted;
        if (!open)
            break;
        event_base_loop(base, EVLOOP_NONBLOCK);
    }
    for (int j = 0; j < ncalls; j++) {
        int ends = k[j].dones + k[j].errors + (k[j].aborted ? 1 : 0);
        if (ends != 1) {
            fprintf(stderr, "call %d ended %d times (done %d, error %d, aborted %d)\n", j, ends,
                    k[j].dones, k[j].errors, k[j].aborted);
            abort();
        }
        if (k[j].resume)
            event_free(k[j].resume);
    }
    httpc_pool_free(pool);   /* closes sv[0] if it went back to the pool */
    close(sv[1]);
    event_base_free(base);
    return 0;
}
