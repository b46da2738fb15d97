/* queue.c - see queue.h. */
#include "batcher/queue.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher/group.h"

void bqueue_config_from_model(struct bqueue_config *qc, const struct model_batching *b,
                              enum policy_kind kind)
{
    memset(qc, 0, sizeof *qc);
    qc->max_batch_size = b->max_batch_size;
    qc->npreferred = b->npreferred;
    memcpy(qc->preferred, b->preferred, sizeof qc->preferred);
    qc->max_queue_delay_ns = b->max_queue_delay_us * 1000;
    qc->max_queue_size = b->max_queue_size;
    qc->default_priority = b->default_priority;
    qc->aging_ns = b->priority_aging_ms * 1000000;
    qc->kind = kind;
    qc->max_batch_tokens = b->max_batch_tokens;
    qc->group_by_length = b->group_by_length;
}

int bqueue_init(struct bqueue *q, const struct bqueue_config *cfg)
{
    memset(q, 0, sizeof *q);
    list_init(&q->svc);
    list_init(&q->arr);
    list_init(&q->dl);
    list_init(&q->off);
    for (int t = 0; t < WORK_TENANTS_MAX; t++)
        list_init(&q->ten[t]);
    q->cfg = *cfg;
    q->pcfg.max_batch_size = cfg->max_batch_size;
    q->pcfg.preferred = q->cfg.preferred;
    q->pcfg.npreferred = cfg->npreferred;
    q->pcfg.max_queue_delay_ns = cfg->max_queue_delay_ns;
    q->pcfg.kind = cfg->kind;
    /* Grouping trades members within a token budget: without one a batch
     * is cut by rows and there is no padding to weigh. */
    q->group = cfg->group_by_length && cfg->max_batch_tokens > 0;
    q->tokens_per_row_max = 1;
    q->view_cap = POLICY_VIEW_FACTOR * cfg->max_batch_size + 1;
    q->view = calloc((size_t)q->view_cap, sizeof *q->view);
    q->view_tok = calloc((size_t)q->view_cap, sizeof *q->view_tok);
    q->group_work = calloc((size_t)q->view_cap, sizeof *q->group_work);
    q->ptok.req = q->view_tok;
    q->view_items = calloc((size_t)q->view_cap, sizeof *q->view_items);
    q->pick_scratch = calloc(2 * ((size_t)cfg->max_batch_size + 1), sizeof *q->pick_scratch);
    return q->view && q->view_tok && q->group_work && q->view_items && q->pick_scratch
               ? 0
               : -BG_ENOMEM;
}

void bqueue_free(struct bqueue *q)
{
    free(q->view);
    free(q->view_tok);
    q->view_tok = NULL;
    free(q->group_work);
    q->group_work = NULL;
    free(q->view_items);
    free(q->pick_scratch);
    q->pick_scratch = NULL;
    q->view = NULL;
    q->view_items = NULL;
}

/* The tokens a batch holds at most: max_batch_tokens, or without it
 * max_batch_size rows of the longest rows seen (max_batch_size for a model
 * without tokens). No item exceeds it. */
static int64_t bqueue_full_tokens(const struct bqueue *q)
{
    if (q->cfg.max_batch_tokens > 0)
        return q->cfg.max_batch_tokens;
    return (int64_t)q->cfg.max_batch_size * q->tokens_per_row_max;
}

/* The execution of a full batch: no item's is longer. */
static int64_t bqueue_full_ns(const struct bqueue *q, const struct latmodel *lat)
{
    int64_t full = bqueue_full_tokens(q);
    return latmodel_predict_sq(lat, full, full * q->sq_per_token_max);
}

/* An item's own execution, alone. */
static int64_t bqueue_item_ns(const struct latmodel *lat, const struct infer_item *it)
{
    return latmodel_predict_sq(lat, work_tokens(it), it->tokens_sq);
}

/* The deadline the planning works to: the guard earlier (0: none). */
static int64_t bqueue_plan_deadline(const struct bqueue *q, const struct infer_item *it)
{
    return it->deadline_ns ? it->deadline_ns - q->guard_ns : 0;
}

/* ---- orders ---- */

bool bqueue_served_before(const struct infer_item *a, const struct infer_item *b)
{
    if (a->priority != b->priority)
        return a->priority < b->priority;
    int64_t da = a->deadline_ns ? a->deadline_ns : INT64_MAX;
    int64_t db = b->deadline_ns ? b->deadline_ns : INT64_MAX;
    if (da != db)
        return da < db;
    return a->t_arrival_ns < b->t_arrival_ns;
}

#define BQ_SVC(q) list_data(q, struct infer_item, q_svc)
#define BQ_ARR(q) list_data(q, struct infer_item, q_arr)
#define BQ_DL(q) list_data(q, struct infer_item, q_dl)
#define BQ_TEN(q) list_data(q, struct infer_item, q_ten)

/* Each order inserts scanning from its tail: arrivals mostly belong near it. */
static void bqueue_svc_insert(struct bqueue *q, struct infer_item *it)
{
    struct list *p = q->svc.prev;
    while (p != &q->svc && bqueue_served_before(it, BQ_SVC(p)))
        p = p->prev;
    list_insert_head(p, &it->q_svc);   /* right after p */
}

static void bqueue_ten_insert(struct bqueue *q, struct infer_item *it)
{
    struct list *h = &q->ten[it->tenant], *p = h->prev;
    while (p != h && bqueue_served_before(it, BQ_TEN(p)))
        p = p->prev;
    list_insert_head(p, &it->q_ten);
}

static void bqueue_arr_insert(struct bqueue *q, struct infer_item *it)
{
    struct list *p = q->arr.prev;
    while (p != &q->arr && it->t_arrival_ns < BQ_ARR(p)->t_arrival_ns)
        p = p->prev;
    list_insert_head(p, &it->q_arr);
}

static void bqueue_dl_insert(struct bqueue *q, struct infer_item *it)
{
    struct list *p = q->dl.prev;
    while (p != &q->dl && it->deadline_ns < BQ_DL(p)->deadline_ns)
        p = p->prev;
    list_insert_head(p, &it->q_dl);
}

static void bqueue_unlink_all(struct bqueue *q, struct infer_item *it)
{
    if (it->offline) {   /* only in the offline FIFO */
        list_remove(&it->q_svc);
        it->next = NULL;
        it->queued = false;
        q->noff--;
        if (it->tenant >= 0 && it->tenant < WORK_TENANTS_MAX)
            q->toff[it->tenant]--;
        return;
    }
    list_remove(&it->q_svc);
    list_remove(&it->q_ten);
    q->tn[it->tenant]--;
    list_remove(&it->q_arr);
    if (it->deadline_ns)
        list_remove(&it->q_dl);
    it->next = NULL;
    it->queued = false;
    q->n--;
}

/* The first request in arrival and in service order (NULL when empty). */
static struct infer_item *bqueue_oldest(const struct bqueue *q)
{
    return list_empty(&q->arr) ? NULL : BQ_ARR(q->arr.next);
}

static struct infer_item *bqueue_first(const struct bqueue *q)
{
    return list_empty(&q->svc) ? NULL : BQ_SVC(q->svc.next);
}

/* ---- operations ---- */

/* The queue is full and tenant t asks for a place: the tenant holding the
 * most requests gives up its last one in service order, if it holds more
 * than t does after admitting (queue.h). This only picks it (NULL: no
 * room); bqueue_push evicts it once the request is admitted, so a request
 * refused for its deadline costs no one else a place. */
static struct infer_item *bqueue_room_from(const struct bqueue *q, int t)
{
    if (!q->tenant_fair)
        return NULL;
    int hog = 0;
    for (int k = 1; k < WORK_TENANTS_MAX; k++)
        if (q->tn[k] > q->tn[hog])
            hog = k;
    if (hog == t || q->tn[hog] <= q->tn[t] + 1 || list_empty(&q->ten[hog]))
        return NULL;
    return BQ_TEN(q->ten[hog].prev);
}

bool bqueue_has_room(const struct bqueue *q, int t)
{
    if (t < 0 || t >= WORK_TENANTS_MAX)
        t = 0;
    return q->n < q->cfg.max_queue_size || bqueue_room_from(q, t) != NULL;
}

int bqueue_push(struct bqueue *q, struct infer_item *it, int64_t now_ns,
                const struct latmodel *lat, struct error *err)
{
    it->held = false;
    if (it->rows < 1 || it->rows > q->cfg.max_batch_size)
        return error_set(err, BG_EINVAL, "a request may carry 1 to %d rows (got %d)",
                         q->cfg.max_batch_size, it->rows);
    if (it->tokens < 0 || it->tokens_sq < 0)
        return error_set(err, BG_EINVAL, "a request's tokens cannot be negative (got %d, %lld)",
                         it->tokens, (long long)it->tokens_sq);
    if (q->cfg.max_batch_tokens > 0 && work_tokens(it) > q->cfg.max_batch_tokens)
        return error_set(err, BG_ETOOLONG,
                         "the request has %d tokens, more than a batch may hold "
                         "(batching.max_batch_tokens is %d): send fewer or shorter inputs",
                         work_tokens(it), q->cfg.max_batch_tokens);
    /* What bounds a full batch (bqueue_full_tokens) grows with what came. */
    int per_row = (work_tokens(it) + it->rows - 1) / it->rows;
    if (per_row > q->tokens_per_row_max)
        q->tokens_per_row_max = per_row;
    if (it->tokens_sq > 0) {
        int64_t spt = (it->tokens_sq + work_tokens(it) - 1) / work_tokens(it);
        if (spt > q->sq_per_token_max)
            q->sq_per_token_max = spt;
    }
    if (it->offline) {
        /* Outside max_queue_size: a job's backlog must never make an online
         * request 429; the jobs runner bounds how many it queues. */
        it->deadline_ns = 0;
        list_insert_tail(&q->off, &it->q_svc);
        it->queued = true;
        q->noff++;
        if (it->tenant >= 0 && it->tenant < WORK_TENANTS_MAX)
            q->toff[it->tenant]++;
        return 0;
    }
    if (it->tenant < 0 || it->tenant >= WORK_TENANTS_MAX)
        it->tenant = 0;
    struct infer_item *out = NULL;   /* leaves to make room for it */
    if (q->n >= q->cfg.max_queue_size && !(out = bqueue_room_from(q, it->tenant)))
        return error_set(err, BG_EQUEUEFULL,
                         "queue full (%d requests waiting, batching.max_queue_size)",
                         q->cfg.max_queue_size);
    if (it->priority <= 0)
        it->priority = q->cfg.default_priority;
    if (it->deadline_ns && policy_deadline_aware(q->cfg.kind) && lat) {
        int64_t need = bqueue_item_ns(lat, it) + q->guard_ns;
        if (now_ns + need > it->deadline_ns && now_ns - q->learned_at_ns >= BQUEUE_PROBE_NS &&
            now_ns - q->probe_at_ns >= BQUEUE_PROBE_NS) {
            q->probe_at_ns = now_ns;
            it->deadline_ns = 0;   /* served late rather than never measured */
        } else if (now_ns + need > it->deadline_ns) {
            char what[48];
            if (it->tokens > 0)
                snprintf(what, sizeof what, "%d rows of %d tokens", it->rows, it->tokens);
            else
                snprintf(what, sizeof what, "%d rows", it->rows);
            return error_set(err, BG_EDEADLINE,
                             "latency budget cannot be met: %s need about %.2f ms (%.2f ms "
                             "of it the answer path's recent overrun), %.2f ms are left",
                             what, (double)need / 1e6, (double)q->guard_ns / 1e6,
                             (double)(it->deadline_ns - now_ns) / 1e6);
        }
    }
    if (out) {
        bqueue_unlink_all(q, out);
        out->next = q->evicted;
        q->evicted = out;
    }
    bqueue_svc_insert(q, it);
    bqueue_ten_insert(q, it);
    q->tn[it->tenant]++;
    bqueue_arr_insert(q, it);
    if (it->deadline_ns)
        bqueue_dl_insert(q, it);
    it->queued = true;
    q->n++;
    return 0;
}

void bqueue_remove(struct bqueue *q, struct infer_item *it)
{
    if (it->queued)
        bqueue_unlink_all(q, it);
}

void bqueue_note_held(struct bqueue *q, const bool *has, int64_t now_ns)
{
    if (q->nrank == 0)
        return;   /* no ranking: nobody is held */
    bool ranked[WORK_TENANTS_MAX] = {false};
    for (int i = 0; i < q->nrank; i++)   /* nrank -1: none */
        ranked[q->rank[i]] = true;
    for (int t = 0; t < WORK_TENANTS_MAX; t++)
        if (has[t] && !ranked[t]) {
            q->held_at[t] = now_ns;
            q->held_until[t] = now_ns + q->held_for[t];
        }
}

int64_t bqueue_expire(struct bqueue *q, int64_t now_ns, const struct latmodel *lat,
                      struct infer_item **expired)
{
    *expired = NULL;
    if (!policy_deadline_aware(q->cfg.kind) || !lat)
        return POLICY_NEVER;
    struct infer_item **tail = expired;
    /* An item is hopeless at deadline - exec(its tokens). Only items whose
     * deadline is within exec(a full batch) of now can be: stop there. */
    int64_t full_ns = bqueue_full_ns(q, lat);
    int64_t horizon = now_ns + full_ns;
    int64_t next = POLICY_NEVER;
    struct infer_item *beyond = NULL;   /* the first request past the horizon */
    struct list *p, *nx;
    list_foreach_safe(p, nx, &q->dl) {
        struct infer_item *it = BQ_DL(p);
        if (bqueue_plan_deadline(q, it) > horizon) {
            beyond = it;
            break;
        }
        /* `at` is its latest start: started then it still makes it (the
         * deadline policy holds a lone request exactly that long), so it
         * is hopeless only once that instant has passed. */
        int64_t at = bqueue_plan_deadline(q, it) - bqueue_item_ns(lat, it);
        if (at < now_ns) {
            /* Its tenant held back since it came: the wait is the tenant's
             * (its own earlier requests queue behind the same limit). */
            it->held = q->held_at[it->tenant] > 0 && q->held_at[it->tenant] >= it->t_arrival_ns;
            if (it->held) {   /* SPEC.md: the limit's 429 says when it may fit again */
                int64_t left = q->held_until[it->tenant] - now_ns;
                it->retry_after_s = left > 1000000000 ? (int)((left + 999999999) / 1000000000) : 1;
            }
            bqueue_unlink_all(q, it);
            *tail = it;
            tail = &it->next;
        } else if (at + 1 < next) {
            next = at + 1;
        }
    }
    if (beyond) {
        int64_t at = bqueue_plan_deadline(q, beyond) - full_ns;
        if (at + 1 < next)
            next = at + 1;
    }
    *tail = NULL;
    return next;
}

/* ---- offline rows (see queue.h) ---- */

static int64_t bqueue_exec(const struct latmodel *lat, int64_t tokens, int64_t tokens_sq)
{
    return lat ? latmodel_predict_sq(lat, tokens, tokens_sq) : 0;
}

/* A batch's size on both caps as it is filled. */
struct bqueue_fill {
    int rows;
    int64_t tokens, tokens_sq;
};

static bool bqueue_off_held(const struct bqueue *q, const struct infer_item *it)
{
    return it->tenant >= 0 && it->tenant < WORK_TENANTS_MAX && q->off_held[it->tenant];
}

/* Appends offline items in FIFO order to the batch being cut (tail, f)
 * while the batch stays within max_batch_size rows and max_batch_tokens
 * tokens and now + exec(tokens) within `limit_ns`; returns how many were
 * taken. Lines of a tenant over its limit are passed over. */
static int bqueue_take_offline(struct bqueue *q, int64_t now_ns, const struct latmodel *lat,
                               int64_t limit_ns, struct infer_item ***tail,
                               struct bqueue_fill *f)
{
    int taken = 0;
    struct list *p, *next;
    list_foreach_safe(p, next, &q->off) {
        struct infer_item *it = BQ_SVC(p);
        if (bqueue_off_held(q, it))
            continue;
        int r = f->rows + it->rows;
        int64_t t = f->tokens + work_tokens(it), sq = f->tokens_sq + it->tokens_sq;
        if (r > q->cfg.max_batch_size || t > bqueue_full_tokens(q) ||
            (limit_ns != POLICY_NEVER && now_ns + bqueue_exec(lat, t, sq) > limit_ns))
            break;
        bqueue_unlink_all(q, it);
        it->t_dequeue_ns = now_ns;
        **tail = it;
        *tail = &it->next;
        f->rows = r;
        f->tokens = t;
        f->tokens_sq = sq;
        taken++;
    }
    return taken;
}

/* The instant the queued online work must start at the latest: its
 * earliest deadline (guard included) less the execution of the online
 * tokens queued (up to a full batch), and never later than the policy's
 * own next decision (`policy_wake`), when it may cut a batch without a
 * deadline. */
static int64_t bqueue_online_start_by(const struct bqueue *q, const struct latmodel *lat,
                                      int64_t policy_wake)
{
    int rows = 0;
    int64_t tokens = 0, sq = 0, full = bqueue_full_tokens(q);
    struct list *p;
    list_foreach(p, &q->svc) {
        rows += BQ_SVC(p)->rows;
        tokens += work_tokens(BQ_SVC(p));
        sq += BQ_SVC(p)->tokens_sq;
        if (rows >= q->cfg.max_batch_size || tokens >= full) {
            tokens = tokens < full ? tokens : full;
            sq = full * q->sq_per_token_max < sq ? full * q->sq_per_token_max : sq;
            break;
        }
    }
    int64_t by = policy_wake;
    if (!list_empty(&q->dl)) {
        int64_t at = bqueue_plan_deadline(q, BQ_DL(q->dl.next)) - bqueue_exec(lat, tokens, sq);
        if (at < by)
            by = at;
    }
    return by;
}

/* Earliest planned deadline among the batch's online members (POLICY_NEVER
 * when none has one): offline fill must keep the batch within it. */
static int64_t bqueue_batch_limit(const struct bqueue *q, const struct infer_item *head)
{
    int64_t lim = POLICY_NEVER;
    for (const struct infer_item *it = head; it; it = it->next)
        if (it->deadline_ns && bqueue_plan_deadline(q, it) < lim)
            lim = bqueue_plan_deadline(q, it);
    return lim;
}

/* A batch of offline rows only (fills b); 1 if any was due under `limit`. */
static int bqueue_take_offline_batch(struct bqueue *q, int64_t now_ns, const struct latmodel *lat,
                                     int64_t limit_ns, struct batch *b)
{
    struct infer_item **tail = &b->head;
    struct bqueue_fill f = {0};
    int n = bqueue_take_offline(q, now_ns, lat, limit_ns, &tail, &f);
    *tail = NULL;
    if (n == 0)
        return 0;
    b->nitems = n;
    b->rows = f.rows;
    b->max_rows = q->cfg.max_batch_size;
    batch_sum(b);
    b->budget = b->tokens;
    int64_t planned = lat ? now_ns + bqueue_exec(lat, b->tokens, b->tokens_sq) : 0;
    for (struct infer_item *it = b->head; it; it = it->next)
        it->t_planned_ns = planned;
    return 1;
}

int bqueue_tenants_waiting(const struct bqueue *q, bool *has, bool *off_has)
{
    int k = 0;
    for (int t = 0; t < WORK_TENANTS_MAX; t++) {
        has[t] = !list_empty(&q->ten[t]);
        k += has[t];
        if (off_has)
            off_has[t] = q->toff[t] > 0;
    }
    return k;
}

/* Whether tenant t may be served now: ranked, or no ranking at all. */
static bool bqueue_ranked(const struct bqueue *q, int t)
{
    if (q->nrank == 0)
        return true;
    for (int r = 0; r < q->nrank; r++)
        if (q->rank[r] == t)
            return true;
    return false;
}

/* The policy's view after the aged request (view_items[0..n)): the queue
 * in service order, or tenant by tenant in the caller's ranking. */
static int bqueue_view_fill(struct bqueue *q, const struct infer_item *aged, int n)
{
    struct list *p;
    if (q->nrank == 0) {
        list_foreach(p, &q->svc) {
            if (n >= q->view_cap)
                break;
            if (BQ_SVC(p) != aged)
                q->view_items[n++] = BQ_SVC(p);
        }
        return n;
    }
    for (int r = 0; r < q->nrank && n < q->view_cap; r++) {
        int t = q->rank[r];
        if (t < 0 || t >= WORK_TENANTS_MAX)
            continue;
        list_foreach(p, &q->ten[t]) {
            if (n >= q->view_cap)
                break;
            if (BQ_TEN(p) != aged)
                q->view_items[n++] = BQ_TEN(p);
        }
    }
    return n;
}

int bqueue_take(struct bqueue *q, int64_t now_ns, const struct latmodel *lat, struct batch *b,
                int64_t *wake_ns)
{
    *wake_ns = POLICY_NEVER;
    if (q->n == 0) {   /* no online request: the device is the offline rows' */
        if (q->noff == 0)
            return 0;
        if (bqueue_take_offline_batch(q, now_ns, lat, POLICY_NEVER, b))
            return 1;
        /* Every line queued is its tenant's over its limit: ask again when
         * the limits may have moved (nothing else would wake the worker). */
        *wake_ns = now_ns + (q->rank_retry_ns > 0 ? q->rank_retry_ns : 1000000);
        return 0;
    }
    if (q->offline_first && q->noff > 0 &&
        bqueue_take_offline_batch(q, now_ns, lat, POLICY_NEVER, b))
        return 1;   /* owed their guaranteed part of the device (queue.h) */
    int n = 0;
    /* Aging: the oldest request jumps the priority order once it waited long. */
    struct infer_item *aged = NULL, *oldest = bqueue_oldest(q), *first = bqueue_first(q);
    if (q->cfg.aging_ns > 0 && oldest != first &&
        now_ns - oldest->t_arrival_ns >= q->cfg.aging_ns && bqueue_ranked(q, oldest->tenant)) {
        aged = oldest;
        q->view_items[n++] = aged;
    }
    n = bqueue_view_fill(q, aged, n);
    if (n == 0) {
        /* Every tenant with requests is held back (over its limit, or out
         * of time another tenant reserves): ask again when the ranking may
         * have changed. Job lines take the time meanwhile, as they take a
         * device with no online request at all: the device idled at 0.7
         * with a job waiting, beside a flood held out of a reserved 0.3.
         * They yield at the next batch, like any idle time they fill. */
        if (q->noff > 0 && bqueue_take_offline_batch(q, now_ns, lat, POLICY_NEVER, b))
            return 1;
        *wake_ns = now_ns + (q->rank_retry_ns > 0 ? q->rank_retry_ns : 1000000);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        const struct infer_item *it = q->view_items[i];
        q->view[i].rows = it->rows;
        q->view[i].arrival_ns = it->t_arrival_ns;
        q->view[i].deadline_ns = bqueue_plan_deadline(q, it);
        q->view_tok[i].tokens = work_tokens(it);
        q->view_tok[i].tokens_sq = it->tokens_sq;
        q->view_tok[i].len = work_max_len(it);
        q->view_tok[i].priority = it->priority;
    }
    q->ptok.max_batch_tokens = bqueue_full_tokens(q);
    struct policy_decision d;
    policy_decision_init(&d, q->pick_scratch);
    policy_decide_tokens(&q->pcfg, &q->ptok, lat, &q->load, q->view, n, now_ns, &d);
    if (d.take > 0 && q->group)
        group_by_length(&q->pcfg, &q->ptok, lat, policy_deadline_aware(q->cfg.kind) && lat,
                        q->view, n, now_ns, &d, q->group_work);
    if (d.take == 0) {
        /* The aging instant of the oldest request is a decision point too,
         * while it is ahead: once passed, the aged request already leads
         * the view above, and an instant in the past would make the worker
         * ask again at once, for ever (found by test_queue_offline's
         * traces with priority_aging_ms below max_queue_delay_us). */
        int64_t age_at = q->cfg.aging_ns > 0 && oldest != first &&
                                 oldest->t_arrival_ns + q->cfg.aging_ns > now_ns
                             ? oldest->t_arrival_ns + q->cfg.aging_ns
                             : POLICY_NEVER;
        *wake_ns = d.wake_ns < age_at ? d.wake_ns : age_at;
        /* The online work waits: offline rows may use the device meanwhile
         * if they are done before that work must start. */
        if (q->noff > 0 &&
            bqueue_take_offline_batch(q, now_ns, lat, bqueue_online_start_by(q, lat, *wake_ns), b))
            return 1;
        return 0;
    }
    struct infer_item **tail = &b->head;
    struct bqueue_fill f = {0};
    for (int i = 0; i < d.take; i++) {
        struct infer_item *it = q->view_items[d.pick ? d.pick[i] : i];
        bqueue_unlink_all(q, it);
        it->t_dequeue_ns = now_ns;
        *tail = it;
        tail = &it->next;
        f.rows += it->rows;
        f.tokens += work_tokens(it);
        f.tokens_sq += it->tokens_sq;
    }
    *tail = NULL;
    int nitems = d.take;
    /* Empty rows of the online batch carry offline rows where that makes
     * no member late (exec(rows) grows with the rows), and only when no
     * online request is left queued: each fill row lengthens the batch, so
     * one left behind (too many rows, a preferred size, a deadline the
     * selection could not meet) would start later, perhaps past the instant
     * it must start by, and under load the fill would take device time
     * online rows need (test_sim_offline found it). */
    if (q->noff > 0 && q->n == 0 && f.rows < q->cfg.max_batch_size &&
        f.tokens < bqueue_full_tokens(q)) {
        int64_t lim = bqueue_batch_limit(q, b->head);
        nitems += bqueue_take_offline(q, now_ns, lat, lim, &tail, &f);
        *tail = NULL;
    }
    b->nitems = nitems;
    b->rows = f.rows;
    b->max_rows = q->cfg.max_batch_size;
    batch_sum(b);
    b->budget = d.budget > b->tokens ? d.budget : b->tokens;
    int64_t planned = lat ? now_ns + bqueue_exec(lat, b->tokens, b->tokens_sq) : 0;
    for (struct infer_item *it = b->head; it; it = it->next)
        it->t_planned_ns = planned;
    return 1;
}

struct infer_item *bqueue_drain(struct bqueue *q)
{
    struct infer_item *head = NULL, **tail = &head;
    struct infer_item *it;
    while ((it = bqueue_first(q))) {
        bqueue_unlink_all(q, it);
        *tail = it;
        tail = &it->next;
    }
    while (!list_empty(&q->off)) {
        it = BQ_SVC(q->off.next);
        bqueue_unlink_all(q, it);
        *tail = it;
        tail = &it->next;
    }
    *tail = NULL;
    return head;
}
