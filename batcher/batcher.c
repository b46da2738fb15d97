/* batcher.c - see batcher.h. One mutex per model guards the queue and the
 * latency models; decisions are O(max_batch_size) under it. */
#include "batcher/batcher.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "batcher/guard.h"
#include "batcher/latmodel.h"
#include "batcher/queue.h"
#include "batcher/rate.h"

struct batcher {
    pthread_mutex_t lock;
    pthread_cond_t work;              /* workers wait here (CLOCK_MONOTONIC) */
    pthread_cond_t reap;              /* the reaper waits here */
    char name[MODEL_NAME_MAX];
    struct bqueue q;
    struct latmodel *lat;             /* one per instance */
    int ninstances;
    int fastest;                      /* instance whose model predicts least for 1 row */
    struct guard guard;               /* the answer path's overrun (guard.h) */
    struct rate arrivals;             /* admitted rows per ns, for the adaptive wait */
    bool closed;
    pthread_t reaper;
    bool reaper_running;
    void (*waker)(void *arg);         /* an event-loop consumer's doorbell */
    void *waker_arg;
    atomic_int waker_calls;           /* submitters ringing it now, outside the lock */
    bool (*other_work)(void *arg, int instance);   /* the device's (batcher_set_device_probe) */
    void *other_work_arg;
    batcher_rank_fn rank;             /* tenants' order (batcher_set_tenant_rank) */
    void *rank_arg;
    /* Each instance's last "ask again at" (POLICY_NEVER: none): when its
     * worker asks at or after it, how late it came goes into wake_slack
     * (policy.h: the deadline rule ends waits that much early). */
    int64_t *wake_planned;
};

/* A wake's lateness into the slack (policy_wake_slack). */
static void batcher_wake_sample(struct batcher *b, int instance, int64_t now)
{
    int64_t planned = b->wake_planned[instance];
    b->wake_planned[instance] = POLICY_NEVER;
    if (planned == POLICY_NEVER || now < planned)
        return;   /* woken before its time: a submission, not the timer */
    b->q.load.wake_slack_ns = policy_wake_slack(b->q.load.wake_slack_ns, now - planned);
}

static void batcher_timed_wait(pthread_cond_t *c, pthread_mutex_t *m, int64_t at_ns)
{
    if (at_ns == POLICY_NEVER) {
        pthread_cond_wait(c, m);
        return;
    }
    struct timespec ts = {(time_t)(at_ns / 1000000000), (long)(at_ns % 1000000000)};
    pthread_cond_timedwait(c, m, &ts);
}

static const struct latmodel *batcher_fastest(struct batcher *b) { return &b->lat[b->fastest]; }

static void batcher_update_fastest(struct batcher *b)
{
    int best = 0;
    for (int i = 1; i < b->ninstances; i++)
        if (latmodel_predict(&b->lat[i], 1) < latmodel_predict(&b->lat[best], 1))
            best = i;
    b->fastest = best;
}

/* Requests past hope: 504, or 429 for those the scheduler held back for
 * their tenant (its `limit`, time another tenant reserves) until their
 * budget ran out: SPEC.md's status for a tenant over its limit. */
static void batcher_answer_expired(struct infer_item *expired)
{
    while (expired) {
        struct infer_item *it = expired;
        expired = it->next;
        it->next = NULL;
        if (it->held)
            work_complete(it, BG_ETENANTLIMIT, "its tenant is over its limit of the device (or "
                          "another tenant's reserved share): held back until its latency budget "
                          "ran out");
        else
            work_complete(it, BG_EDEADLINE, "latency budget ran out while queued (answered when "
                          "it could no longer be met)");
    }
}

/* Expired requests are answered the moment they become hopeless, even
 * when no instance is idle to notice: that is this thread's only job. */
static void *batcher_reaper_main(void *arg)
{
    struct batcher *b = arg;
    pthread_mutex_lock(&b->lock);
    while (!b->closed) {
        struct infer_item *expired;
        int64_t now = now_ns();
        b->q.guard_ns = guard_value(&b->guard, now);
        int64_t next = bqueue_expire(&b->q, now, batcher_fastest(b), &expired);
        if (expired) {
            pthread_mutex_unlock(&b->lock);
            batcher_answer_expired(expired);
            pthread_mutex_lock(&b->lock);
            continue;
        }
        batcher_timed_wait(&b->reap, &b->lock, next);
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

struct batcher *batcher_new(const char *model_name, const struct model_batching *cfg,
                            int instances, struct error *err)
{
    struct batcher *b = calloc(1, sizeof *b);
    if (!b) {
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    snprintf(b->name, sizeof b->name, "%s", model_name);
    struct bqueue_config qc;
    bqueue_config_from_model(&qc, cfg, policy_kind_from_name(cfg->policy));
    b->ninstances = instances > 0 ? instances : 1;
    b->lat = calloc((size_t)b->ninstances, sizeof *b->lat);
    b->wake_planned = calloc((size_t)b->ninstances, sizeof *b->wake_planned);
    if (!b->lat || !b->wake_planned || bqueue_init(&b->q, &qc) != 0) {
        bqueue_free(&b->q);
        free(b->lat);
        free(b->wake_planned);
        free(b);
        error_set(err, BG_ENOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < b->ninstances; i++) {
        latmodel_init(&b->lat[i]);
        b->wake_planned[i] = POLICY_NEVER;
    }
    b->q.load.wake_slack_ns = POLICY_WAKE_SLACK_MIN_NS;
    guard_init(&b->guard);
    rate_init(&b->arrivals);
    pthread_mutex_init(&b->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->work, &ca);
    pthread_cond_init(&b->reap, &ca);
    pthread_condattr_destroy(&ca);
    int rc = pthread_create(&b->reaper, NULL, batcher_reaper_main, b);
    if (rc) {
        error_set(err, BG_EINTERNAL, "model %s: cannot start the deadline thread: %s", model_name,
                  strerror(rc));
        batcher_free(b);
        return NULL;
    }
    b->reaper_running = true;
    char tname[32];
    snprintf(tname, sizeof tname, "bg-q-%.10s", model_name);
    tname[15] = '\0';
    pthread_setname_np(b->reaper, tname);
    return b;
}

void batcher_free(struct batcher *b)
{
    if (!b)
        return;
    batcher_close(b);
    pthread_mutex_destroy(&b->lock);
    guard_destroy(&b->guard);
    pthread_cond_destroy(&b->work);
    pthread_cond_destroy(&b->reap);
    bqueue_free(&b->q);
    free(b->lat);
    free(b->wake_planned);
    free(b);
}

/* One batch's time into an instance's latency model. */
static void batcher_learn(struct batcher *b, int instance, int64_t tokens, int64_t tokens_sq,
                          int64_t exec_ns)
{
    if (instance < 0 || instance >= b->ninstances)
        return;
    struct latmodel fit;   /* fitted outside the lock: submissions wait on it */
    pthread_mutex_lock(&b->lock);
    bool due = latmodel_record(&b->lat[instance], tokens, tokens_sq, exec_ns);
    b->q.learned_at_ns = now_ns();   /* the model is current (BQUEUE_PROBE_NS) */
    if (due)
        fit = b->lat[instance];
    pthread_mutex_unlock(&b->lock);
    if (!due)
        return;
    latmodel_fit(&fit);
    pthread_mutex_lock(&b->lock);
    latmodel_adopt(&b->lat[instance], &fit);
    batcher_update_fastest(b);
    pthread_mutex_unlock(&b->lock);
}

void batcher_seed(struct batcher *b, int instance, int rows, int64_t tokens, int64_t tokens_sq,
                  int64_t exec_ns)
{
    batcher_learn(b, instance, tokens > 0 ? tokens : rows, tokens_sq, exec_ns);
}

int batcher_submit(struct batcher *b, struct infer_item *it, struct error *err)
{
    struct error e = {0};
    atomic_store(&it->ended, false);
    pthread_mutex_lock(&b->lock);
    if (b->closed) {
        pthread_mutex_unlock(&b->lock);
        return error_set(err, BG_ESHUTDOWN, "model %s is shutting down", b->name);
    }
    int64_t now = now_ns();
    b->q.guard_ns = guard_value(&b->guard, now);
    int rc = bqueue_push(&b->q, it, now, batcher_fastest(b), &e);
    struct infer_item *evicted = b->q.evicted;   /* made room for it (queue.h) */
    b->q.evicted = NULL;
    void (*waker)(void *) = NULL;
    void *waker_arg = NULL;
    if (rc == 0) {
        /* The adaptive wait weighs online arrivals: a job's lines come as
         * fast as the jobs runner queues them and no one waits for them. */
        if (!it->offline)
            rate_add(&b->arrivals, now, work_tokens(it));
        /* Every idle worker re-decides: with several instances any may take it. */
        pthread_cond_broadcast(&b->work);
        if (it->deadline_ns)
            pthread_cond_signal(&b->reap);
        waker = b->waker;
        waker_arg = b->waker_arg;
        if (waker)
            atomic_fetch_add(&b->waker_calls, 1);   /* under the lock: set_waker sees it */
    }
    pthread_mutex_unlock(&b->lock);
    work_complete_list(evicted, BG_EQUEUEFULL,
                       "queue full (batching.max_queue_size): this request made room for a "
                       "tenant with fewer requests queued");
    if (waker) {
        waker(waker_arg);
        atomic_fetch_sub(&b->waker_calls, 1);
    }
    if (rc)
        return error_set(err, -rc, "model %s: %s", b->name, e.msg);
    return 0;
}

bool batcher_full_for(struct batcher *b, int tenant)
{
    pthread_mutex_lock(&b->lock);
    bool full = !b->closed && !bqueue_has_room(&b->q, tenant);
    pthread_mutex_unlock(&b->lock);
    return full;
}

void batcher_cancel(struct batcher *b, struct infer_item *it)
{
    pthread_mutex_lock(&b->lock);
    bool was_queued = it->queued;
    bqueue_remove(&b->q, it);
    pthread_mutex_unlock(&b->lock);
    if (was_queued) {
        it->next = NULL;
        work_complete_list(it, BG_ECANCELLED, "cancelled: the client went away");
    }
}

/* Under the lock: 1 and a batch, 0 and the instant to ask again, -1 closed.
 * Requests that became hopeless are answered 504 first (the lock is dropped
 * around their completion); nothing late is ever handed out. */
static int batcher_take_locked(struct batcher *b, int instance, struct batch *out, int64_t *wake)
{
    int inst = instance >= 0 && instance < b->ninstances ? instance : 0;
    const struct latmodel *lat = &b->lat[inst];
    for (;;) {
        if (b->closed)
            return -1;
        int64_t now = now_ns();
        batcher_wake_sample(b, inst, now);
        b->q.guard_ns = guard_value(&b->guard, now);
        struct infer_item *expired;
        bqueue_expire(&b->q, now, batcher_fastest(b), &expired);
        if (expired) {
            pthread_mutex_unlock(&b->lock);
            batcher_answer_expired(expired);
            pthread_mutex_lock(&b->lock);
            continue;
        }
        b->q.load.rows_per_ns = rate_value(&b->arrivals, now);
        b->q.load.fastest = batcher_fastest(b);
        if (b->rank && (b->q.n > 0 || b->q.noff > 0)) {
            /* Job lines alone are ranked too: their tenants' limits bind them. */
            bool has[WORK_TENANTS_MAX];
            bqueue_tenants_waiting(&b->q, has, b->q.off_held);   /* in: has job lines */
            int nrank = b->rank(b->rank_arg, instance, now, has, b->q.rank, &b->q.rank_retry_ns,
                                b->q.held_for, &b->q.offline_first, b->q.off_held);
            if (b->q.n > 0) {
                b->q.nrank = nrank > 0 ? nrank : -1;   /* -1: all held back, not "no ranking" */
                bqueue_note_held(&b->q, has, now);
            }
        }
        /* Waiting for company idles nothing when the queue's own job lines
         * or another model can use the device meanwhile. */
        b->q.load.device_has_other_work =
            b->q.noff > 0 || (b->other_work && b->other_work(b->other_work_arg, instance));
        if (bqueue_take(&b->q, now, lat, out, wake)) {
            if (b->q.n > 0 || b->q.noff > 0)
                pthread_cond_signal(&b->work);   /* another idle worker may form the next */
            return 1;
        }
        b->wake_planned[inst] = *wake;
        return 0;
    }
}

int batcher_next(struct batcher *b, int instance, struct batch *out)
{
    pthread_mutex_lock(&b->lock);
    for (;;) {
        int64_t wake;
        int rc = batcher_take_locked(b, instance, out, &wake);
        if (rc != 0) {
            pthread_mutex_unlock(&b->lock);
            return rc > 0 ? 0 : -1;
        }
        batcher_timed_wait(&b->work, &b->lock, wake);
    }
}

int batcher_try_next(struct batcher *b, int instance, struct batch *out, int64_t *wake_ns)
{
    pthread_mutex_lock(&b->lock);
    *wake_ns = POLICY_NEVER;
    int rc = batcher_take_locked(b, instance, out, wake_ns);
    pthread_mutex_unlock(&b->lock);
    return rc;
}

void batcher_set_waker(struct batcher *b, void (*waker)(void *arg), void *arg)
{
    pthread_mutex_lock(&b->lock);
    b->waker = waker;
    b->waker_arg = arg;
    pthread_mutex_unlock(&b->lock);
    /* A submitter that took the old one rings it outside the lock: the
     * loop it wakes may be freed as soon as this returns (upstream_stop),
     * so wait for those rings, a few instructions each. Sleeping, not
     * yielding: the jobs runner submits at SCHED_IDLE, which a yield on a
     * busy core would never let run. */
    while (atomic_load(&b->waker_calls) > 0) {
        struct timespec ts = {0, 50000};
        nanosleep(&ts, NULL);
    }
}

int64_t batcher_start_by(struct batcher *b, int instance, const struct batch *bt)
{
    int64_t earliest = 0;
    for (const struct infer_item *it = bt->head; it; it = it->next)
        if (!it->offline && it->deadline_ns && (!earliest || it->deadline_ns < earliest))
            earliest = it->deadline_ns;
    if (!earliest)
        return 0;
    int64_t guard = guard_value(&b->guard, now_ns());
    pthread_mutex_lock(&b->lock);
    int64_t exec = latmodel_predict_sq(
        &b->lat[instance >= 0 && instance < b->ninstances ? instance : 0],
        bt->tokens > 0 ? bt->tokens : bt->rows, bt->tokens_sq);
    pthread_mutex_unlock(&b->lock);
    int64_t by = earliest - exec - guard;
    return by > 0 ? by : 1;   /* already late: the most urgent there is, never "none" */
}

void batcher_set_tenant_rank(struct batcher *b, batcher_rank_fn rank, void *arg)
{
    pthread_mutex_lock(&b->lock);
    b->rank = rank;
    b->rank_arg = arg;
    b->q.tenant_fair = rank != NULL;
    pthread_mutex_unlock(&b->lock);
}

void batcher_set_device_probe(struct batcher *b, bool (*other_work)(void *arg, int instance),
                              void *arg)
{
    pthread_mutex_lock(&b->lock);
    b->other_work = other_work;
    b->other_work_arg = arg;
    pthread_mutex_unlock(&b->lock);
}

void batcher_done(struct batcher *b, int instance, const struct batch *bt, int64_t exec_ns)
{
    batcher_learn(b, instance, bt->tokens > 0 ? bt->tokens : bt->rows, bt->tokens_sq, exec_ns);
}

void batcher_answered(struct batcher *b, const struct infer_item *it, int64_t answered_ns)
{
    if (it->t_planned_ns)   /* the guard's own lock: not the queue's */
        guard_add(&b->guard, answered_ns, answered_ns - it->t_planned_ns);
}

int64_t batcher_guard_ns(struct batcher *b)
{
    return guard_value(&b->guard, now_ns());
}

void batcher_close(struct batcher *b)
{
    pthread_mutex_lock(&b->lock);
    b->closed = true;
    struct infer_item *left = bqueue_drain(&b->q);
    pthread_cond_broadcast(&b->work);
    pthread_cond_broadcast(&b->reap);
    pthread_mutex_unlock(&b->lock);
    if (b->reaper_running) {
        pthread_join(b->reaper, NULL);
        b->reaper_running = false;
    }
    work_complete_list(left, BG_ESHUTDOWN, "the server is shutting down");
}

int batcher_depth(struct batcher *b)
{
    pthread_mutex_lock(&b->lock);
    int n = b->q.n;
    pthread_mutex_unlock(&b->lock);
    return n;
}

void batcher_latency_model(struct batcher *b, int instance, double *a_ns, double *b_ns,
                           double *margin_ns)
{
    pthread_mutex_lock(&b->lock);
    const struct latmodel *m = &b->lat[instance < b->ninstances ? instance : 0];
    *a_ns = m->a_ns;
    *b_ns = m->b_ns;
    *margin_ns = m->margin_ns;
    pthread_mutex_unlock(&b->lock);
}
