/* llmbatch.c - see llmbatch.h. One thread, one event loop: the waiting
 * queue is tried on every submit and every call's end, and every
 * LLMBATCH_TICK_MS while lines wait (a scrape may have freed an endpoint). */
#include "serving/llmbatch.h"

#include <stdatomic.h>

#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "common/clock.h"
#include "common/httpc.h"
#include "common/log.h"
#include "common/upcall.h"
#include "serving/llmpool.h"
#include "serving/llmstream.h"
#include "serving/serving.h"

#define LLMBATCH_TICK_MS 5
/* Groups told apart by llmbatch_dispatch's turns (the runner has at most 4
 * batches running; a group with no line left gives its entry up). */
#define LLMBATCH_GROUPS 16

struct llmbatch {
    void (*done)(struct llmbatch_line *l, void *arg);
    void *arg;
    struct event_base *base;
    struct event *wake, *tick;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct llmbatch_line *incoming;   /* under mu: submitted, not yet seen by the loop */
    uint64_t cancel_asked, cancel_done;   /* under mu */
    uint64_t cancel_group;            /* under mu: the group asked for; 0: every line */
    struct llmbatch_reweigh {
        uint64_t group;
        double weight;
    } reweigh[LLMBATCH_GROUPS];       /* under mu: llmbatch_set_weight's, not yet applied */
    int nreweigh;                     /* under mu */
    bool stop;                        /* under mu */
    _Atomic uint64_t preempted;       /* lines that gave way (offline.preempt) */
    bool started;
    /* The loop's own: */
    struct llmbatch_line *wait_head, **wait_tail;
    struct llmbatch_line **inflight;  /* [cap] */
    int inflight_n, inflight_cap;
    struct llmbatch_conns {
        struct httpc_target *t;
        struct httpc_pool *p;
    } *pools;                         /* [npools], grown as endpoints are called */
    int npools, pools_cap;
    uint64_t rounds;                  /* llmbatch_dispatch's */
    uint64_t sent;                    /* lines sent so far */
    double est_all_s;                 /* a line's time in its place, all groups (EWMA) */
    /* The turns (llmbatch_dispatch): each group's place-time per weight. */
    struct llmbatch_group {
        uint64_t group;               /* 0: a free entry */
        uint64_t at;                  /* `sent` when the group last had a line sent */
        double pass;                  /* seconds in a place / weight, charged so far */
        double pending;               /* of that, the estimates of its lines in flight */
        double est_s;                 /* its lines' time in a place (EWMA); 0: none ended */
    } groups[LLMBATCH_GROUPS];
};

/* Connections to a target stay open while lines run; none once the caller is
 * idle, so that a pool unloaded since leaves no pointer to its targets. */
static struct httpc_pool *llmbatch_pool_for(struct llmbatch *b, struct httpc_target *t)
{
    for (int i = 0; i < b->npools; i++)
        if (b->pools[i].t == t)
            return b->pools[i].p;
    if (b->npools == b->pools_cap) {
        int cap = b->pools_cap ? b->pools_cap * 2 : 16;
        struct llmbatch_conns *v = realloc(b->pools, (size_t)cap * sizeof *v);
        if (!v)
            return NULL;
        b->pools = v;
        b->pools_cap = cap;
    }
    struct httpc_pool *p = httpc_pool_new(t, b->base, 64, 1);
    if (p) {
        b->pools[b->npools].t = t;
        b->pools[b->npools++].p = p;
    }
    return p;
}

static void llmbatch_pools_free(struct llmbatch *b)
{
    for (int i = 0; i < b->npools; i++)
        httpc_pool_free(b->pools[i].p);
    b->npools = 0;
}

/* ---- one call ---- */

static void llmbatch_kick(struct llmbatch *b);

/* ---- the turns ----
 *
 * Stride scheduling on place-time: a group is charged, as each of its
 * lines takes a place, the time a line of it is expected to hold one
 * divided by its weight (its `pass`), and the difference once the line
 * leaves the place; the waiting group with the smallest pass goes next.
 * So groups hold the pool's places in proportion to their weights however
 * few places there are (a weight of 0.01 beside 1 gets a place one time in
 * a hundred, where counting lines in flight per weight left it none) and
 * however long their lines are. */

static void llmbatch_enqueue(struct llmbatch *b, struct llmbatch_line *l);

static double llmbatch_weight(const struct llmbatch_line *l)
{
    return l->weight > 0 ? l->weight : 1.0;
}

/* Whether a line of the group waits or runs. */
static bool llmbatch_group_busy(const struct llmbatch *b, uint64_t group)
{
    for (int i = 0; i < b->inflight_n; i++)
        if (b->inflight[i]->group == group)
            return true;
    for (const struct llmbatch_line *l = b->wait_head; l; l = l->next)
        if (l->group == group)
            return true;
    return false;
}

/* The smallest pass of the other groups with a line waiting or in
 * flight, less what their lines in flight were charged ahead (estimates,
 * which their ends correct): a newcomer set level with an estimate would
 * fall behind once it was corrected down. 0 without such a group. */
static double llmbatch_vclock(const struct llmbatch *b, uint64_t except)
{
    double v = 0;
    bool any = false;
    for (int i = 0; i < LLMBATCH_GROUPS; i++) {
        const struct llmbatch_group *g = &b->groups[i];
        double settled = g->pass - g->pending;
        if (g->group && g->group != except && (!any || settled < v) &&
            llmbatch_group_busy(b, g->group)) {
            v = settled;
            any = true;
        }
    }
    return v;
}

/* The group's entry; made when `make` (a new group starts level with those
 * running, not ahead of them by their past), in a free entry or that of
 * a group with no line left, the one served longest ago. NULL when every
 * entry is taken (more groups than this wait for the others: the runner
 * has 4). */
static struct llmbatch_group *llmbatch_group(struct llmbatch *b, uint64_t group, bool make)
{
    for (int i = 0; i < LLMBATCH_GROUPS; i++)
        if (b->groups[i].group == group)
            return &b->groups[i];
    if (!make)
        return NULL;
    struct llmbatch_group *spare = NULL;
    for (int i = 0; i < LLMBATCH_GROUPS && !(spare && !spare->group); i++) {
        struct llmbatch_group *g = &b->groups[i];
        if (!g->group || ((!spare || g->at < spare->at) && !llmbatch_group_busy(b, g->group)))
            spare = g;
    }
    if (!spare)
        return NULL;
    *spare = (struct llmbatch_group){.group = group, .pass = llmbatch_vclock(b, group)};
    return spare;
}

/* A line submitted joins the waiting ones; a group that had none here
 * (new, or back after a while) starts level with the groups there, not
 * ahead of them by the time it was away. */
static void llmbatch_arrive(struct llmbatch *b, struct llmbatch_line *l)
{
    if (!llmbatch_group_busy(b, l->group)) {
        struct llmbatch_group *g = llmbatch_group(b, l->group, true);
        double v = llmbatch_vclock(b, l->group);
        if (g && g->pass < v)
            g->pass = v;
    }
    llmbatch_enqueue(b, l);
}

/* l takes a place: in flight, its group charged what a line of it holds. */
static void llmbatch_inflight_add(struct llmbatch *b, struct llmbatch_line *l)
{
    struct llmbatch_group *g = llmbatch_group(b, l->group, true);
    double est = g && g->est_s > 0 ? g->est_s : b->est_all_s;
    l->charged = g ? est / llmbatch_weight(l) : 0;
    if (g) {
        g->pass += l->charged;
        g->pending += l->charged;
        g->at = ++b->sent;
    }
    b->inflight[b->inflight_n++] = l;
}

/* l leaves its place (ended, failed, given way, taken back): its group is
 * charged the time it really held it instead. */
static void llmbatch_inflight_settle(struct llmbatch *b, struct llmbatch_line *l)
{
    double held = (double)(now_ns() - l->t0) / 1e9;
    struct llmbatch_group *g = llmbatch_group(b, l->group, false);
    if (g) {
        g->pass += held / llmbatch_weight(l) - l->charged;
        g->pending -= l->charged;
        g->est_s = g->est_s > 0 ? 0.8 * g->est_s + 0.2 * held : held;
    }
    b->est_all_s = 0.9 * b->est_all_s + 0.1 * held;
    l->charged = 0;
}

static void llmbatch_inflight_remove(struct llmbatch *b, struct llmbatch_line *l)
{
    for (int i = 0; i < b->inflight_n; i++)
        if (b->inflight[i] == l) {
            llmbatch_inflight_settle(b, l);
            b->inflight[i] = b->inflight[--b->inflight_n];
            break;
        }
}

static void llmbatch_enqueue(struct llmbatch *b, struct llmbatch_line *l)
{
    l->next = NULL;
    *b->wait_tail = l;
    b->wait_tail = &l->next;
}

/* A streamed line's first bytes came back (its prefill is done), or its
 * call ended without any: no longer starting at its endpoint. */
static void llmbatch_started(struct llmbatch_line *l, struct llmpool *pool, int e)
{
    if (!l->starting)
        return;
    l->starting = false;
    llmpool_started(pool, e, NULL, 0);
}

/* l's call at e no longer runs there (ended, failed, closed). */
static void llmbatch_idle_end(struct llmbatch_line *l, struct llmpool *pool, int e)
{
    llmbatch_started(l, pool, e);
    llmpool_end_idle(pool, e);
    if (l->t_try) {   /* the try's time, the tenant's for good (modelstats_call_begin) */
        modelstats_call_end(l->sm->stats, e, l->tenant, true, l->t_try);
        l->t_try = 0;
        served_touch(l->sm);   /* a batch's lines are use (idle_unload_s) */
    }
}

/* The call of l ended (answered or failed): again, or back to the submitter. */
static void llmbatch_call_end(struct llmbatch *b, struct llmbatch_line *l, bool again)
{
    struct llmpool *pool = l->sm->pool;
    l->ns = now_ns() - l->t0;
    llmbatch_idle_end(l, pool, l->endpoint);
    llmbatch_inflight_remove(b, l);
    struct upcall *u = l->up;
    l->up = NULL;
    upcall_free(u);
    if (again && l->tries < LLMBATCH_TRIES) {
        log_debug("batch line %lld: try %d at endpoint %d failed (%s); trying again on idle "
                  "capacity", (long long)l->line, l->tries, l->endpoint,
                  l->status ? "a server error" : l->error);
        llmbatch_enqueue(b, l);
    } else {
        b->done(l, b->arg);
    }
    llmbatch_kick(b);
}

static struct httpc_pool *llmbatch_op_pool(void *arg, struct httpc_target *t, int index)
{
    struct llmbatch_line *l = arg;
    (void)index;
    return llmbatch_pool_for(l->b, t);
}

static int llmbatch_op_send(void *arg, struct upcall *u, const struct httpc_target *t)
{
    struct llmbatch_line *l = arg;
    char head[512];
    int n = snprintf(head, sizeof head,
                     "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     "Accept: %s\r\nContent-Length: %zu\r\n\r\n",
                     l->path, httpc_target_authority(t),
                     l->stream ? "text/event-stream" : "application/json", l->len);
    l->status = 0;
    buf_reset(&l->answer);
    if (upcall_send(u, head, (size_t)n) < 0 || upcall_send(u, l->body, l->len) < 0)
        return -1;
    return 0;
}

static int llmbatch_op_head(void *arg, const struct httpc_head *h)
{
    struct llmbatch_line *l = arg;
    l->status = h->status;
    return 0;
}

static int llmbatch_op_body(void *arg, const char *data, size_t len)
{
    struct llmbatch_line *l = arg;
    if (len)
        llmbatch_started(l, l->sm->pool, l->endpoint);
    if (l->answer.len + len > LLMBATCH_ANSWER_MAX || buf_append(&l->answer, data, len) < 0) {
        snprintf(l->error, sizeof l->error, "the answer is over %u bytes", LLMBATCH_ANSWER_MAX);
        l->status = 0;
        upcall_stop(l->up);
        llmbatch_call_end(l->b, l, false);
        return -1;
    }
    return 0;
}

/* A streamed answer becomes the whole one; a stream that is not an answer
 * (cut, an error event) fails the try as a lost call would. */
static bool llmbatch_assemble(struct llmbatch_line *l)
{
    struct buf whole = BUF_INIT;
    struct error err = {0};
    if (llmstream_assemble(l->answer.data ? l->answer.data : "", l->answer.len,
                           strstr(l->path, "chat") != NULL, &whole, &err) < 0) {
        buf_free(&whole);
        snprintf(l->error, sizeof l->error, "%.290s", err.msg);
        l->status = 0;
        return false;
    }
    buf_free(&l->answer);
    l->answer = whole;
    return true;
}

/* A whole 2xx answer is a JSON object, as OpenAI's output lines give it:
 * one that is not (cut, garbage) fails the try as a broken stream does (it
 * was a completed line whose body was a string). */
static bool llmbatch_whole_is_json(struct llmbatch_line *l)
{
    json_t *root = json_loadb(l->answer.data ? l->answer.data : "", l->answer.len, 0, NULL);
    bool ok = json_is_object(root);
    json_decref(root);
    if (!ok) {
        snprintf(l->error, sizeof l->error, "a %d answer that is not a JSON object", l->status);
        l->status = 0;
    }
    return ok;
}

static void llmbatch_op_done(void *arg)
{
    struct llmbatch_line *l = arg;
    if (l->status >= 200 && l->status < 300 &&
        ((l->stream && l->status == 200 && !llmbatch_assemble(l)) ||
         (!l->stream && !llmbatch_whole_is_json(l)))) {
        upcall_blame(l->up, HTTPC_FAIL_STATUS);
        llmbatch_call_end(l->b, l, true);
        return;
    }
    /* A server error, or a 404: the pool's model may not be on that
     * endpoint (another has it), or the line asks what no endpoint
     * serves; only a server error is the endpoint's failure (api_llm.c). */
    bool again = l->status >= 500 || l->status == 404;
    if (l->status >= 500)
        upcall_blame(l->up, HTTPC_FAIL_STATUS);
    if (l->status == 404 && l->tries <= LLMBATCH_TRIES)
        l->not_found |= 1u << (l->tries - 1);
    if (l->status >= 200 && l->status < 300 && l->not_found)
        llmpool_found_elsewhere(l->sm->pool, l->tried,
                                l->tries < LLMBATCH_TRIES ? l->tries : LLMBATCH_TRIES,
                                l->not_found);
    llmbatch_call_end(l->b, l, again);
}

static void llmbatch_op_fail(void *arg, int code, const char *msg)
{
    struct llmbatch_line *l = arg;
    (void)code;
    l->status = 0;
    snprintf(l->error, sizeof l->error, "%.290s", msg ? msg : "the call failed");
    llmbatch_call_end(l->b, l, true);
}

static const struct upcall_ops llmbatch_ops = {
    .pool = llmbatch_op_pool,
    .send = llmbatch_op_send,
    .on_head = llmbatch_op_head,
    .on_body = llmbatch_op_body,
    .on_done = llmbatch_op_done,
    .on_fail = llmbatch_op_fail,
};

/* Starts l's call at endpoint e (counted in flight by llmpool_pick_idle). */
static void llmbatch_call(struct llmbatch *b, struct llmbatch_line *l, int e)
{
    struct llmpool *pool = l->sm->pool;
    const struct model_pool *mp = &l->sm->model.cfg.pool;
    l->endpoint = e;
    l->starting = l->stream;   /* llmpool_pick_idle counted it so */
    l->t0 = now_ns();
    l->t_try = l->t0;
    modelstats_call_begin(l->sm->stats, e, l->tenant, true, l->t_try);
    served_touch(l->sm);
    if (l->sm->model.cfg.pool.offline_preempt)
        (void)llmpool_preempt_take(pool, e);   /* asks left from lines that ended since */
    if (l->tries < LLMBATCH_TRIES)
        l->tried[l->tries] = e;
    l->tries++;
    l->error[0] = '\0';
    l->target[0] = llmpool_target(pool, e);
    struct error err = {0};
    l->b = b;
    l->up = upcall_new(b->base, &llmbatch_ops, l, mp->timeout_ms, "timeout_ms");
    if (!l->up) {
        llmbatch_idle_end(l, pool, e);
        snprintf(l->error, sizeof l->error, "out of memory");
        b->done(l, b->arg);
        return;
    }
    if (b->inflight_n == b->inflight_cap) {
        int cap = b->inflight_cap ? b->inflight_cap * 2 : 64;
        struct llmbatch_line **v = realloc(b->inflight, (size_t)cap * sizeof *v);
        if (!v) {
            upcall_free(l->up);
            l->up = NULL;
            llmbatch_idle_end(l, pool, e);
            snprintf(l->error, sizeof l->error, "out of memory");
            b->done(l, b->arg);
            return;
        }
        b->inflight = v;
        b->inflight_cap = cap;
    }
    llmbatch_inflight_add(b, l);
    /* Idempotent as far as the driver goes: a line is tried again anyway,
     * and a connection the endpoint closed while idle in the pool (the
     * keep-alive race) spent one of its tries on "send: Broken pipe",
     * which its error line then said (CI under ASan). */
    if (upcall_start(l->up, l->target, 1, UPCALL_IDEMPOTENT, &err) < 0) {
        /* Not through llmbatch_call_end: this runs inside llmbatch_dispatch's
         * walk of the waiting lines, which must not be walked again here. */
        snprintf(l->error, sizeof l->error, "%.290s", err.msg);
        llmbatch_idle_end(l, pool, e);
        llmbatch_inflight_remove(b, l);
        upcall_free(l->up);
        l->up = NULL;
        if (l->tries < LLMBATCH_TRIES)
            llmbatch_enqueue(b, l);
        else
            b->done(l, b->arg);
        return;
    }
    upcall_arm(l->up);
}

/* ---- the loop ---- */

/* Sends every waiting line that has an idle endpoint now. The next line
 * sent is the first waiting of the group with the smallest pass (the
 * turns above), and among equals of the one served longest ago; in order
 * within a group. A pool with no idle endpoint is not asked again this
 * round. */
static void llmbatch_dispatch(struct llmbatch *b)
{
    struct llmpool *full[16];
    int nfull = 0;
    /* Lines that found no endpoint this round are marked and passed over. */
    uint64_t round = ++b->rounds;
    for (;;) {
        struct llmbatch_line **best = NULL;
        double best_pass = 0;
        uint64_t best_at = 0;
        for (struct llmbatch_line **pp = &b->wait_head; *pp; pp = &(*pp)->next) {
            struct llmbatch_line *l = *pp;
            if (l->round == round || (best && l->group == (*best)->group))
                continue;
            bool skip = false;
            for (int i = 0; i < nfull; i++)
                skip |= full[i] == l->sm->pool;
            if (skip)
                continue;
            struct llmbatch_group *g = llmbatch_group(b, l->group, true);
            double pass = g ? g->pass : 1e300;
            uint64_t at = g ? g->at : 0;
            if (!best || pass < best_pass || (pass == best_pass && at < best_at)) {
                best = pp;
                best_pass = pass;
                best_at = at;
            }
        }
        if (!best)
            break;
        struct llmbatch_line *l = *best;
        struct llmpool *pool = l->sm->pool;
        /* A retried line: an endpoint it has not tried, while the pool has
         * one; such a line finding none says nothing of the others. */
        int ntried = l->tries < llmpool_size(pool) ? l->tries : 0;
        int e = llmpool_pick_idle(pool, l->tried, ntried, l->stream);
        if (e < 0) {
            l->round = round;
            if (ntried == 0 && nfull < 16)
                full[nfull++] = pool;
            if (nfull == 16)
                break;
            continue;
        }
        *best = l->next;
        if (b->wait_tail == &l->next)
            b->wait_tail = best;
        l->next = NULL;
        llmbatch_call(b, l, e);
    }
}

/* offline.preempt: for each online call picked where lines run, one line
 * there gives way: its call is closed (the server stops it) and it waits
 * again, first in line, its tries not counted. */
static void llmbatch_preempt(struct llmbatch *b)
{
    for (int i = 0; i < b->inflight_n; i++) {
        struct llmbatch_line *l = b->inflight[i];
        if (!l->sm->model.cfg.pool.offline_preempt)
            continue;
        struct llmpool *pool = l->sm->pool;
        int e = l->endpoint;
        int want = llmpool_preempt_take(pool, e);   /* 0 on a second visit */
        bool changed = false;
        for (int k = b->inflight_n - 1; want > 0 && k >= 0; k--) {
            struct llmbatch_line *x = b->inflight[k];
            if (x->sm->pool != pool || x->endpoint != e)
                continue;
            log_debug("batch line %lld gives endpoint %d way to an online call",
                      (long long)x->line, e);
            upcall_free(x->up);   /* closes the connection: the server stops generating */
            x->up = NULL;
            llmbatch_idle_end(x, pool, e);
            llmbatch_inflight_settle(b, x);
            b->inflight[k] = b->inflight[--b->inflight_n];
            x->tries--;
            x->status = 0;
            x->next = b->wait_head;
            b->wait_head = x;
            if (b->wait_tail == &b->wait_head)
                b->wait_tail = &x->next;
            atomic_fetch_add_explicit(&b->preempted, 1, memory_order_relaxed);
            want--;
            changed = true;
        }
        if (changed)
            i = -1;   /* the array changed: again from the start */
    }
}

/* Dispatches, and arms the tick while lines wait, or, once nothing is left,
 * to close the connections: not from here, which may run inside a call's
 * callback, whose connection httpc still holds. */
static void llmbatch_kick(struct llmbatch *b)
{
    llmbatch_preempt(b);
    llmbatch_dispatch(b);
    if (b->wait_head || (b->inflight_n == 0 && b->npools > 0)) {
        struct timeval tv = {0, LLMBATCH_TICK_MS * 1000};
        if (!event_pending(b->tick, EV_TIMEOUT, NULL))
            event_add(b->tick, &tv);
    }
}

static void llmbatch_on_tick(evutil_socket_t fd, short what, void *arg)
{
    struct llmbatch *b = arg;
    (void)fd;
    (void)what;
    if (!b->wait_head && b->inflight_n == 0) {
        llmbatch_pools_free(b);
        return;
    }
    llmbatch_kick(b);
}

/* The lines of `group` (0: every line) back to the submitter: those
 * waiting and those in flight. */
static void llmbatch_take_back(struct llmbatch *b, uint64_t group)
{
    for (int i = b->inflight_n - 1; i >= 0; i--) {
        struct llmbatch_line *l = b->inflight[i];
        if (group && l->group != group)
            continue;
        llmbatch_inflight_settle(b, l);
        b->inflight[i] = b->inflight[--b->inflight_n];
        upcall_free(l->up);   /* closes the connection: the server stops generating */
        l->up = NULL;
        llmbatch_idle_end(l, l->sm->pool, l->endpoint);
        l->status = 0;
        l->error[0] = '\0';
        b->done(l, b->arg);
    }
    struct llmbatch_line **p = &b->wait_head;
    b->wait_tail = &b->wait_head;
    while (*p) {
        struct llmbatch_line *l = *p;
        if (group && l->group != group) {
            p = &l->next;
            b->wait_tail = p;
            continue;
        }
        *p = l->next;
        l->next = NULL;
        l->status = 0;
        l->error[0] = '\0';
        b->done(l, b->arg);
    }
    if (!b->wait_head && b->inflight_n == 0)
        llmbatch_pools_free(b);
}

static void llmbatch_on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct llmbatch *b = arg;
    (void)fd;
    (void)what;
    pthread_mutex_lock(&b->mu);
    struct llmbatch_line *in = b->incoming;
    b->incoming = NULL;
    uint64_t cancel = b->cancel_asked, group = b->cancel_group;
    bool stop = b->stop;
    int nre = b->nreweigh;
    struct llmbatch_reweigh re[LLMBATCH_GROUPS];
    memcpy(re, b->reweigh, (size_t)nre * sizeof re[0]);
    b->nreweigh = 0;
    pthread_mutex_unlock(&b->mu);
    /* In submission order (the incoming list is a stack). */
    struct llmbatch_line *rev = NULL;
    while (in) {
        struct llmbatch_line *n = in->next;
        in->next = rev;
        rev = in;
        in = n;
    }
    while (rev) {
        struct llmbatch_line *n = rev->next;
        llmbatch_arrive(b, rev);
        rev = n;
    }
    /* New weights reach the lines already waiting too (every line of a
     * group weighs the same: llmbatch_dispatch reads any), and those in
     * flight, which may come back to wait (a retry, a preemption). */
    for (int i = 0; i < nre; i++) {
        for (struct llmbatch_line *l = b->wait_head; l; l = l->next)
            if (l->group == re[i].group)
                l->weight = re[i].weight;
        for (int k = 0; k < b->inflight_n; k++)
            if (b->inflight[k]->group == re[i].group)
                b->inflight[k]->weight = re[i].weight;
    }
    if (cancel != b->cancel_done || stop) {
        llmbatch_take_back(b, stop ? 0 : group);
        pthread_mutex_lock(&b->mu);
        b->cancel_done = cancel;
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        if (stop)
            event_base_loopbreak(b->base);
        return;
    }
    llmbatch_kick(b);
}

static void *llmbatch_main(void *arg)
{
    struct llmbatch *b = arg;
    event_base_loop(b->base, EVLOOP_NO_EXIT_ON_EMPTY);
    return NULL;
}

struct llmbatch *llmbatch_new(void (*done)(struct llmbatch_line *l, void *arg), void *arg,
                              struct error *err)
{
    struct llmbatch *b = calloc(1, sizeof *b);
    if (!b) {
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    b->done = done;
    b->arg = arg;
    b->wait_tail = &b->wait_head;
    b->est_all_s = 1.0;   /* until lines have ended: only the ratio between groups matters */
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    b->base = event_base_new();
    if (b->base) {
        b->wake = event_new(b->base, -1, EV_PERSIST, llmbatch_on_wake, b);
        b->tick = evtimer_new(b->base, llmbatch_on_tick, b);
    }
    if (!b->base || !b->wake || !b->tick) {
        error_set(err, BG_ENOMEM, "out of memory for the Batch API's event loop");
        llmbatch_free(b);
        return NULL;
    }
    event_add(b->wake, NULL);
    int rc = pthread_create(&b->thread, NULL, llmbatch_main, b);
    if (rc) {
        error_set(err, BG_EINTERNAL, "cannot start the Batch API's thread: %s", strerror(rc));
        llmbatch_free(b);
        return NULL;
    }
    pthread_setname_np(b->thread, "bg-batch");
    b->started = true;
    return b;
}

void llmbatch_submit(struct llmbatch *b, struct llmbatch_line *l)
{
    l->status = 0;
    l->error[0] = '\0';
    l->endpoint = -1;
    l->tries = 0;
    l->up = NULL;
    l->b = b;
    pthread_mutex_lock(&b->mu);
    l->next = b->incoming;
    b->incoming = l;
    pthread_mutex_unlock(&b->mu);
    event_active(b->wake, EV_READ, 0);
}

void llmbatch_set_weight(struct llmbatch *b, uint64_t group, double weight)
{
    pthread_mutex_lock(&b->mu);
    int i = 0;
    while (i < b->nreweigh && b->reweigh[i].group != group)
        i++;
    if (i == LLMBATCH_GROUPS) {   /* the loop is behind: the oldest change gives way */
        memmove(&b->reweigh[0], &b->reweigh[1], (LLMBATCH_GROUPS - 1) * sizeof b->reweigh[0]);
        i = LLMBATCH_GROUPS - 1;
    } else if (i == b->nreweigh) {
        b->nreweigh++;
    }
    b->reweigh[i].group = group;
    b->reweigh[i].weight = weight;
    pthread_mutex_unlock(&b->mu);
    event_active(b->wake, EV_READ, 0);
}

void llmbatch_cancel_group(struct llmbatch *b, uint64_t group)
{
    /* One cancel at a time: the group travels with its request. */
    pthread_mutex_lock(&b->mu);
    while (b->cancel_done != b->cancel_asked)
        pthread_cond_wait(&b->cv, &b->mu);
    b->cancel_group = group;
    uint64_t want = ++b->cancel_asked;
    pthread_mutex_unlock(&b->mu);
    event_active(b->wake, EV_READ, 0);
    pthread_mutex_lock(&b->mu);
    while (b->cancel_done < want)
        pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

void llmbatch_cancel(struct llmbatch *b) { llmbatch_cancel_group(b, 0); }

uint64_t llmbatch_preempted(struct llmbatch *b)
{
    return atomic_load_explicit(&b->preempted, memory_order_relaxed);
}

void llmbatch_free(struct llmbatch *b)
{
    if (!b)
        return;
    if (b->started) {
        pthread_mutex_lock(&b->mu);
        b->stop = true;
        uint64_t want = ++b->cancel_asked;
        pthread_mutex_unlock(&b->mu);
        event_active(b->wake, EV_READ, 0);
        pthread_join(b->thread, NULL);
        (void)want;
    }
    if (b->tick)
        event_free(b->tick);
    if (b->wake)
        event_free(b->wake);
    if (b->base)
        event_base_free(b->base);
    free(b->inflight);
    free(b->pools);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}
