/* upcall.c - the upstream-call driver (upcall.h): target choice, the tried
 * set, the call timer and the retry policy around one httpc call at a time. */
#include "common/upcall.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "common/clock.h"
#include "common/evwatch.h"

#define UPCALL_MAX_TARGETS 32   /* bits of `tried` */

struct upcall {
    const struct upcall_ops *ops;
    void *arg;                       /* the client's, for every callback */
    bool request_ended;              /* upcall_request_end came (this call) */
    struct event *timer;
    int timeout_ms;
    const char *timeout_name;
    int64_t deadline_ns;             /* upcall_set_deadline's; 0: none */
    /* The call in progress (from upcall_start to its end): */
    struct httpc_target *const *ts;
    int n;
    unsigned tried;                  /* bit i: ts[i] had a try */
    int ti;                          /* target of the last try; -1 none */
    int tries;
    unsigned flags;                  /* of upcall_start */
    struct httpc_call *hc;           /* the try in progress; NULL between */
    bool reused;                     /* hc's connection was in use before */
    bool active;                     /* started and not ended */
    bool replayable;                 /* the client can still send it all again */
    bool answered;                   /* the answer's head arrived */
    bool repeated;                   /* a target had its second try (after a stale loss) */
    bool unarmed;                    /* the timer could not be added: end from the loop */
    enum httpc_fail last_fail;       /* what ended the last try that failed */
};

static const struct httpc_cb upcall_cb;
static void upcall_on_timer(evutil_socket_t fd, short what, void *arg);

struct upcall *upcall_new(struct event_base *base, const struct upcall_ops *ops, void *arg,
                          int timeout_ms, const char *timeout_name)
{
    struct upcall *u = calloc(1, sizeof *u);
    if (!u)
        return NULL;
    u->timer = evtimer_new(base, upcall_on_timer, u);
    if (!u->timer) {
        free(u);
        return NULL;
    }
    u->ops = ops;
    u->arg = arg;
    u->timeout_ms = timeout_ms;
    u->timeout_name = timeout_name;
    u->ti = -1;
    return u;
}

void upcall_set_timeout(struct upcall *u, int timeout_ms, const char *timeout_name)
{
    u->timeout_ms = timeout_ms;
    u->timeout_name = timeout_name;
}

void upcall_set_deadline(struct upcall *u, int64_t deadline_ns) { u->deadline_ns = deadline_ns; }

void upcall_free(struct upcall *u)
{
    if (!u)
        return;
    upcall_stop(u);
    event_free(u->timer);
    free(u);
}

/* One try: the best target not tried yet (or, with `same`, the last one
 * again), on a connection of the client's pool, the request sent. */
static int upcall_try(struct upcall *u, bool repeat, bool same, struct error *err)
{
    struct httpc_target *t;
    int i = u->ti;
    if (same) {
        t = u->ts[i];
    } else if (!(t = httpc_pick(u->ts, u->n, u->tried,
                                u->deadline_ns ? u->deadline_ns - now_ns() : 0, &i))) {
        return error_set(err, BG_EUPSTREAM, "every server was tried");
    }
    u->tried |= 1u << i;
    u->ti = i;
    u->tries++;
    struct httpc_pool *pool = u->ops->pool(u->arg, t, i);
    if (!pool)
        return error_set(err, BG_ENOMEM, "out of memory");
    unsigned flags = u->flags & (HTTPC_NO_BODY | HTTPC_PIPELINE | HTTPC_REQUEST_STREAMS |
                                 HTTPC_JUDGED);
    if (u->request_ended)   /* a repeat sends the whole request at once */
        flags &= ~HTTPC_REQUEST_STREAMS;
    if (repeat)   /* alone, on a connection that cannot be stale */
        flags = (flags & ~HTTPC_PIPELINE) | HTTPC_FRESH;
    u->reused = false;
    u->hc = httpc_open(pool, &upcall_cb, u, flags, &u->reused, err);
    if (!u->hc)
        return -err->code;
    if (u->ops->send(u->arg, u, t) < 0) {
        httpc_abort(u->hc);
        u->hc = NULL;
        return error_set(err, BG_ENOMEM, "out of memory");
    }
    return 0;
}

int upcall_start(struct upcall *u, struct httpc_target *const *ts, int n, unsigned flags,
                 struct error *err)
{
    upcall_stop(u);
    if (n <= 0 || n > UPCALL_MAX_TARGETS)
        return error_set(err, BG_EINTERNAL, "an upstream call needs 1 to %d servers, not %d",
                         UPCALL_MAX_TARGETS, n);
    u->ts = ts;
    u->n = n;
    u->tried = 0;
    u->ti = -1;
    u->tries = 0;
    u->last_fail = HTTPC_FAIL_COUNT;   /* none yet */
    u->flags = flags;
    u->replayable = true;
    u->answered = u->repeated = u->request_ended = false;
    u->active = true;
    int rc = upcall_try(u, false, false, err);
    if (rc < 0)
        u->active = false;
    return rc;
}

void upcall_stop(struct upcall *u)
{
    if (u->hc)
        httpc_abort(u->hc);
    u->hc = NULL;
    u->active = false;
    u->unarmed = false;
    event_del(u->timer);
}

void upcall_arm(struct upcall *u)
{
    if (u->unarmed)
        return;   /* the alarm is on its way */
    struct timeval tv = {u->timeout_ms / 1000, (u->timeout_ms % 1000) * 1000};
    if (evwatch_add(u->timer, &tv, u->timer) < 0)
        u->unarmed = true;
}

void upcall_disarm(struct upcall *u)
{
    if (!u->unarmed)
        event_del(u->timer);
}

void upcall_no_replay(struct upcall *u) { u->replayable = false; }
bool upcall_replayable(const struct upcall *u) { return u->replayable && !u->answered; }

bool upcall_running(const struct upcall *u) { return u->hc != NULL; }

void upcall_request_end(struct upcall *u)
{
    u->request_ended = true;
    if (u->hc)
        httpc_request_end(u->hc);
}

int upcall_send(struct upcall *u, const void *data, size_t len)
{
    return u->hc ? httpc_send(u->hc, data, len) : -1;
}

size_t upcall_unsent(const struct upcall *u) { return u->hc ? httpc_unsent(u->hc) : 0; }

void upcall_pause(struct upcall *u, bool paused)
{
    if (u->hc)
        httpc_pause(u->hc, paused);
}

static bool upcall_untried_usable(const struct upcall *u);

int upcall_next(struct upcall *u, struct error *err)
{
    if (u->active || u->ti < 0)
        return error_set(err, BG_EINTERNAL, "upcall_next: no call has ended");
    if (!u->replayable || !upcall_untried_usable(u))
        return error_set(err, BG_EUPSTREAM, "no other server to try");
    u->answered = false;
    u->active = true;
    int rc = upcall_try(u, true, false, err);
    if (rc < 0)
        u->active = false;
    return rc;
}

void upcall_blame(struct upcall *u, enum httpc_fail why)
{
    if (u->ti >= 0)
        httpc_target_failed(u->ts[u->ti], why);
}

void upcall_succeeded(struct upcall *u)
{
    if (u->ti >= 0)
        httpc_target_succeeded(u->ts[u->ti]);
}

struct httpc_target *upcall_target(const struct upcall *u)
{
    return u->ti >= 0 ? u->ts[u->ti] : NULL;
}

const char *upcall_url(const struct upcall *u)
{
    return u->ti >= 0 ? httpc_target_url(u->ts[u->ti]) : "upstream";
}

const char *upcall_name(const struct upcall *u)
{
    return u->ti >= 0 ? httpc_target_name(u->ts[u->ti]) : "upstream";
}

int upcall_tries(const struct upcall *u) { return u->tries; }

enum httpc_fail upcall_last_fail(const struct upcall *u) { return u->last_fail; }

/* ---- the try's callbacks (httpc) ---- */

static int upcall_on_head(void *arg, const struct httpc_head *h)
{
    struct upcall *u = arg;
    u->answered = true;
    return u->ops->on_head(u->arg, h);
}

static int upcall_on_body(void *arg, const char *data, size_t len)
{
    struct upcall *u = arg;
    return u->ops->on_body(u->arg, data, len);
}

static void upcall_on_done(void *arg)
{
    struct upcall *u = arg;
    u->hc = NULL;
    u->active = false;
    u->ops->on_done(u->arg);
}

static void upcall_on_sent(void *arg)
{
    struct upcall *u = arg;
    if (u->ops->on_sent)
        u->ops->on_sent(u->arg);
}

/* Is a target not tried yet taking calls? */
static bool upcall_untried_usable(const struct upcall *u)
{
    int64_t now = now_ns();
    for (int i = 0; i < u->n; i++)
        if (!(u->tried & (1u << i)) && httpc_target_usable(u->ts[i], now))
            return true;
    return false;
}

/* The policy of upcall.h: may this loss be repeated, and where (`same`:
 * on the target that lost it)? */
static bool upcall_may_repeat(const struct upcall *u, enum httpc_fail why, bool *same)
{
    *same = false;
    if (u->answered || !u->replayable)
        return false;
    /* Lost before the answer's head: the server may have seen the request,
     * so only an idempotent one goes again. On a reused connection that
     * says nothing against the server (a keep-alive race); on a fresh one
     * it does (the server died or dropped it): another server then, never
     * the same. */
    bool lost = why == HTTPC_FAIL_RESET && (u->flags & UPCALL_IDEMPOTENT);
    bool stale = lost && u->reused;
    if (why != HTTPC_FAIL_CONNECT && !lost)
        return false;
    /* A stale connection says nothing against its server: when no other
     * server is taking calls, that one once more rather than one that is out. */
    if (stale && !u->repeated && !upcall_untried_usable(u)) {
        *same = true;
        return true;
    }
    return u->tried != (u->n == 32 ? ~0u : (1u << u->n) - 1);   /* a target not tried yet */
}

static void upcall_on_error(void *arg, enum httpc_fail why, const char *msg)
{
    struct upcall *u = arg;
    u->hc = NULL;
    u->last_fail = why;
    bool same;
    if (upcall_may_repeat(u, why, &same)) {
        struct error err = {0};
        u->repeated |= same;
        int rc = upcall_try(u, true, same, &err);
        if (rc == 0)
            return;
        if (rc != -BG_EUPSTREAM) {   /* no socket, no memory: say that */
            u->active = false;
            u->ops->on_fail(u->arg, err.code, err.msg);
            return;
        }
    }
    u->active = false;
    u->ops->on_fail(u->arg, BG_EUPSTREAM, msg);
}

static const struct httpc_cb upcall_cb = {
    .on_head = upcall_on_head,
    .on_body = upcall_on_body,
    .on_done = upcall_on_done,
    .on_error = upcall_on_error,
    .on_sent = upcall_on_sent,
};

static void upcall_on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct upcall *u = arg;
    (void)fd;
    (void)what;
    if (!u->active)
        return;
    char msg[160];
    int code;
    if (u->unarmed) {
        code = BG_ENOMEM;
        snprintf(msg, sizeof msg, "out of memory arming %s", u->timeout_name);
    } else {
        code = BG_EDEADLINE;
        u->last_fail = HTTPC_FAIL_TIMEOUT;
        snprintf(msg, sizeof msg, "no answer within %s (%d)", u->timeout_name, u->timeout_ms);
        upcall_blame(u, HTTPC_FAIL_TIMEOUT);
    }
    if (u->hc)
        httpc_abort(u->hc);   /* a late answer has no taker */
    u->hc = NULL;
    u->active = false;
    u->unarmed = false;
    u->ops->on_fail(u->arg, code, msg);
}
