/* sim.c - see sim.h. Events happen at arrivals, batch completions, the
 * policy's wake instants and expiry instants; at each one the order is the
 * server's: finish batches, admit arrivals, expire, give idle instances work.
 *
 * What the driver does itself it does as batcher.c does: the arrival rate
 * counts admitted online rows, push and expiry plan with the instance whose
 * model predicts least for one row, and bqueue_take gets the model of the
 * instance that takes the batch, whatever the policy (the offline rules
 * plan with it even when the policy ignores deadlines). */
#include "batcher/sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher/latmodel.h"
#include "batcher/queue.h"
#include "batcher/rate.h"

struct sim_instance {
    int64_t busy_until;        /* 0: idle */
    struct infer_item *batch;
    int64_t tokens, tokens_sq; /* as the batcher saw the batch */
    int64_t exec_ns;
};

/* One run's state: sim_run's, passed to its steps. */
struct sim {
    const struct sim_config *c;
    struct sim_request *reqs;
    int n;
    struct sim_stats *st;
    enum policy_kind kind;
    bool aware;
    struct bqueue q;
    struct infer_item *items;
    struct sim_instance *inst;
    struct latmodel *lat;         /* one per instance */
    int fastest;                  /* as batcher_update_fastest picks it */
    struct rate arrivals;         /* as the batcher measures it: admitted online rows */
    uint64_t rng;                 /* the jitter's */
    int next_arrival, answered;
    int last_offline;             /* the last offline request handed out, -1: none yet */
    int64_t now;
};

static uint64_t sim_rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

#define VIOLATE(st, ...)                                                        \
    do {                                                                        \
        if (!(st)->violation[0])                                                \
            snprintf((st)->violation, sizeof (st)->violation, __VA_ARGS__);     \
    } while (0)

static int64_t sim_min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* A request's tokens and longest row as the device sees them. */
static int64_t sim_req_tokens(const struct sim_request *r)
{
    return r->tokens > 0 ? r->tokens : r->rows;
}

static int64_t sim_req_len(const struct sim_request *r)
{
    return r->max_len > 0 ? r->max_len : (sim_req_tokens(r) + r->rows - 1) / r->rows;
}

/* The simulated device: a batch of `rows` rows, `tokens` tokens, squared
 * lengths summing to `sq` and longest row `maxlen`. */
static double sim_slowness(const struct sim_config *c, int instance)
{
    return instance > 0 && c->slow_factor > 0 ? c->slow_factor : 1;
}

static double sim_device_ns(const struct sim_config *c, int instance, int rows, int64_t tokens,
                            int64_t sq, int64_t maxlen)
{
    double f = sim_slowness(c, instance);
    if (c->padded)
        return f * (c->exec_a_ns + c->exec_b_ns * (double)rows * maxlen +
                    c->exec_c_ns * (double)rows * maxlen * maxlen);
    return f * (c->exec_a_ns + c->exec_b_ns * tokens + c->exec_c_ns * sq);
}

/* The most tokens a batch holds, as the queue bounds it (queue.c). */
static int64_t sim_full_tokens(const struct bqueue *q)
{
    return q->cfg.max_batch_tokens > 0 ? q->cfg.max_batch_tokens
                                       : (int64_t)q->cfg.max_batch_size * q->tokens_per_row_max;
}

/* The deadline the queue plans to: the guard earlier. */
static int64_t sim_plan_deadline(const struct sim *s, const struct infer_item *it)
{
    return it->deadline_ns - s->c->guard_ns;
}

static void sim_update_fastest(struct sim *s)
{
    int best = 0;
    for (int i = 1; i < s->c->instances; i++)
        if (latmodel_predict(&s->lat[i], 1) < latmodel_predict(&s->lat[best], 1))
            best = i;
    s->fastest = best;
}

/* An idle instance left work queued under the adaptive policy: the wait must
 * be able to bring company (at least one more row expected before it must
 * end at the latest, the oldest request's max_queue_delay) and end by then.
 * While it waits, the whole queue is the batch (a batch that left anything
 * behind would be full and gone), so the oldest queued request is its
 * oldest. */
static void sim_check_wait(const struct bqueue *q, int64_t now, int64_t wake,
                           struct sim_stats *st)
{
    const struct infer_item *oldest = list_data(q->arr.next, struct infer_item, q_arr);
    int64_t bound = oldest->t_arrival_ns + q->cfg.max_queue_delay_ns;
    double expect = q->load.rows_per_ns * (double)(bound - now);
    if (expect < 1.0)
        VIOLATE(st, "an idle instance waited at %lld with %.3f rows expected before "
                "max_queue_delay ran out (rate %.3g rows/ms)", (long long)now, expect,
                q->load.rows_per_ns * 1e6);
    if (wake > bound)
        VIOLATE(st, "an idle instance waits until %lld, past max_queue_delay's %lld",
                (long long)wake, (long long)bound);
}

/* Priority order: the policy fills a batch in service order up to a row
 * budget R, finishing by exec(R). A request left waiting while a
 * lower-priority one runs must have been unable to join at its turn: its
 * rows exceeded what R had left after the members served before it, or its
 * deadline (less the guard, as planned) falls before exec(R) ends and it
 * could not make it alone either (a smaller R would have served it). (The
 * oldest request may jump the order once it aged.) Offline fill rows are no competitors: they join only
 * rows the online selection left empty. */
static void sim_check_priority(struct sim *s, const struct batch *b, const struct latmodel *lat)
{
    const struct bqueue *q = &s->q;
    int64_t now = s->now, aging = q->cfg.aging_ns;
    /* The policy planned the budget with the largest tokens_sq per token
     * in its view; the queue and the batch hold at least as large a one,
     * so this finish is no earlier than the policy's (the check is, if
     * anything, lenient about deadlines). */
    int64_t spt = 0;
    struct list *wl;
    for (const struct infer_item *it = b->head; it; it = it->next)
        if (it->tokens_sq > 0 && (it->tokens_sq + work_tokens(it) - 1) / work_tokens(it) > spt)
            spt = (it->tokens_sq + work_tokens(it) - 1) / work_tokens(it);
    list_foreach(wl, &q->svc) {
        const struct infer_item *it = list_data(wl, struct infer_item, q_svc);
        if (it->tokens_sq > 0 && (it->tokens_sq + work_tokens(it) - 1) / work_tokens(it) > spt)
            spt = (it->tokens_sq + work_tokens(it) - 1) / work_tokens(it);
    }
    int64_t finish = now + latmodel_predict_sq(lat, b->budget, b->budget * spt);
    list_foreach(wl, &q->svc) {
        struct infer_item *wt = list_data(wl, struct infer_item, q_svc);
        int rows_before = 0;
        int64_t tokens_before = 0;
        /* A member whose order ties with wt's (same priority, deadline and
         * arrival instant) may have been ahead of it in the queue: it counts
         * as before (found by a seed where two such requests met a full
         * batch). */
        for (struct infer_item *it = b->head; it; it = it->next)
            if (!it->offline && (!bqueue_served_before(wt, it) ||
                                 (aging > 0 && now - it->t_arrival_ns >= aging))) {
                rows_before += it->rows;   /* an aged request goes first */
                tokens_before += work_tokens(it);
            }
        bool no_room = work_tokens(wt) > b->budget - tokens_before ||
                       wt->rows > q->cfg.max_batch_size - rows_before;
        bool too_late = wt->deadline_ns && sim_plan_deadline(s, wt) < finish;
        /* Left out for its deadline by the budget chosen, it may not be
         * passed over for lower priorities if it could make it alone. */
        bool alone = wt->deadline_ns &&
                     sim_plan_deadline(s, wt) >=
                         now + latmodel_predict_sq(lat, work_tokens(wt),
                                                   (int64_t)work_tokens(wt) * spt);
        if (no_room || (too_late && !alone))
            continue;
        for (struct infer_item *it = b->head; it; it = it->next) {
            bool aged = aging > 0 && now - it->t_arrival_ns >= aging;
            if (!it->offline && !aged && it->priority > wt->priority)
                VIOLATE(s->st, "priority %d served at %lld while priority %d waited "
                        "(tokens %d, budget %lld, before %lld, slack %lld, batch %d, qlen %d)",
                        it->priority, (long long)now, wt->priority, work_tokens(wt),
                        (long long)b->budget, (long long)tokens_before,
                        wt->deadline_ns ? (long long)(sim_plan_deadline(s, wt) - finish) : -1LL,
                        b->rows, q->n);
        }
    }
}

/* Whether an instance (its model `lat`) slower than the fastest can make
 * none of the queued online requests, even alone, with the largest
 * tokens_sq per token queued (the policy plans with its view's, no
 * larger): it leaves them to the faster one (policy_select_feasible). */
static bool sim_left_to_faster(const struct sim *s, const struct latmodel *lat)
{
    const struct bqueue *q = &s->q;
    if (!(latmodel_predict(lat, 1) > latmodel_predict(&s->lat[s->fastest], 1)))
        return false;
    int64_t spt = 0;
    struct list *p;
    list_foreach(p, &q->svc) {
        const struct infer_item *w = list_data(p, struct infer_item, q_svc);
        if (w->tokens_sq > 0 && (w->tokens_sq + work_tokens(w) - 1) / work_tokens(w) > spt)
            spt = (w->tokens_sq + work_tokens(w) - 1) / work_tokens(w);
    }
    list_foreach(p, &q->svc) {
        const struct infer_item *w = list_data(p, struct infer_item, q_svc);
        if (!w->deadline_ns ||
            sim_plan_deadline(s, w) >=
                s->now + latmodel_predict_sq(lat, work_tokens(w), (int64_t)work_tokens(w) * spt))
            return false;
    }
    return true;
}

/* The offline rules of queue.h, checked when a batch carrying offline rows
 * is cut at `now` by an instance whose latency model is `lat`.
 *
 * "Predicted" means what the queue itself plans with:
 * latmodel_predict(lat, rows), the fitted a + b*rows plus the model's
 * margin, of the instance that takes the batch, at the instant it is cut;
 * and every deadline planned guard_ns earlier. With exact execution times
 * (jitter 0, integer a and b) the fit is exact, the margin 0 and the
 * prediction is the execution time; with jitter only the plan is checked,
 * since only the plan can be promised.
 *
 * 1. Offline rows never make an online request queued at the cut miss the
 *    instant it must start by: its deadline less the guard less the
 *    predicted execution of the batch it would go in. A batch of offline
 *    rows alone is cut only while the policy waits, which it does only
 *    while the whole online queue fits in one batch: that batch is the
 *    queue. An online batch with offline rows in its empty rows may leave
 *    online requests queued (too many rows, a preferred size, a deadline
 *    the selection could not meet): for each, if the batch's online rows
 *    alone would end by its latest start, the batch with the offline rows
 *    must too. (The rows of the batch a request would go in are capped at
 *    max_batch_size as the queue caps them; beyond one batch of online
 *    rows queued the check is the weaker one the queue promises.)
 * 2. Online members: the batch ends, as predicted, within every member's
 *    deadline less the guard.
 * 3. Each item is stamped with that predicted end (the guard learns from it).
 * And offline rows alone are never cut while the online queue holds more
 * than a batch (the policy would not be waiting), unless the instance
 * leaves all of it to a faster one (sim_left_to_faster). */
static void sim_check_offline(struct sim *s, const struct batch *b, const struct latmodel *lat)
{
    const struct bqueue *q = &s->q;
    int64_t now = s->now, end = now + latmodel_predict_sq(lat, b->tokens, b->tokens_sq);
    int online = 0, online_rows = 0, queued_rows = 0;
    int64_t online_tokens = 0, online_sq = 0, queued_tokens = 0;
    bool online_all_sq = true;
    for (const struct infer_item *it = b->head; it; it = it->next) {
        if (it->t_planned_ns != end)
            VIOLATE(s->st, "batch cut at %lld stamped %lld as its planned end, predicted %lld",
                    (long long)now, (long long)it->t_planned_ns, (long long)end);
        if (it->offline)
            continue;
        online++;
        online_rows += it->rows;
        online_tokens += work_tokens(it);
        online_sq += it->tokens_sq;
        online_all_sq &= it->tokens_sq > 0;
        if (it->deadline_ns && end > sim_plan_deadline(s, it))
            VIOLATE(s->st, "offline rows fill a batch at %lld past member %td's deadline: "
                    "predicted end %lld, deadline %lld less guard %lld", (long long)now,
                    it - s->items, (long long)end, (long long)it->deadline_ns,
                    (long long)s->c->guard_ns);
    }
    int64_t end_online =
        online ? now + latmodel_predict_sq(lat, online_tokens, online_all_sq ? online_sq : 0)
               : now;
    struct list *p;
    list_foreach(p, &q->svc) {
        queued_rows += list_data(p, struct infer_item, q_svc)->rows;
        queued_tokens += work_tokens(list_data(p, struct infer_item, q_svc));
    }
    int64_t full = sim_full_tokens(q);
    if (!online && (queued_rows > q->cfg.max_batch_size || queued_tokens > full) &&
        !sim_left_to_faster(s, lat))
        VIOLATE(s->st, "offline rows alone cut at %lld while %d online rows wait (more than a "
                "batch)", (long long)now, queued_rows);
    /* The queued online work's tokens up to a full batch, as the queue
     * plans its latest start (bqueue_online_start_by). */
    int rows = 0;
    int64_t tokens = 0, sq = 0;
    list_foreach(p, &q->svc) {
        const struct infer_item *w = list_data(p, struct infer_item, q_svc);
        rows += w->rows;
        tokens += work_tokens(w);
        sq += w->tokens_sq;
        if (rows >= q->cfg.max_batch_size || tokens >= full) {
            tokens = tokens < full ? tokens : full;
            sq = full * q->sq_per_token_max < sq ? full * q->sq_per_token_max : sq;
            break;
        }
    }
    list_foreach(p, &q->svc) {
        const struct infer_item *w = list_data(p, struct infer_item, q_svc);
        if (!w->deadline_ns)
            continue;
        int64_t latest = sim_plan_deadline(s, w) - latmodel_predict_sq(lat, tokens, sq);
        if (end > latest && end_online <= latest)
            VIOLATE(s->st, "a batch of %d rows (%d offline) cut at %lld ends at %lld, past "
                    "the latest start %lld of online request %td queued then (%d rows wait; "
                    "the online rows alone end at %lld)", b->rows, b->rows - online_rows,
                    (long long)now, (long long)end, (long long)latest, w - s->items,
                    queued_rows, (long long)end_online);
    }
}

/* Records the batch on its requests; each is handed out once, offline
 * requests in the order they came (the FIFO). */
static void sim_record_batch(struct sim *s, const struct batch *b, int instance)
{
    int offline_rows = 0;
    int64_t maxlen = 0;
    for (struct infer_item *it = b->head; it; it = it->next) {
        offline_rows += it->offline ? it->rows : 0;
        const struct sim_request *r = &s->reqs[it - s->items];
        s->st->tokens += sim_req_tokens(r);
        maxlen = sim_req_len(r) > maxlen ? sim_req_len(r) : maxlen;
    }
    s->st->cells += maxlen * b->rows;
    for (struct infer_item *it = b->head; it; it = it->next) {
        int idx = (int)(it - s->items);
        struct sim_request *r = &s->reqs[idx];
        if (r->batch >= 0)
            VIOLATE(s->st, "request %d in batch %d and again in batch %d", idx, r->batch,
                    s->st->batches);
        if (it->offline) {
            for (int j = s->last_offline + 1; j < idx; j++)
                if (s->reqs[j].offline && s->reqs[j].batch < 0)
                    VIOLATE(s->st, "offline request %d handed out before %d, queued earlier",
                            idx, j);
            if (idx > s->last_offline)
                s->last_offline = idx;
        }
        r->start_ns = s->now;
        r->batch_rows = b->rows;
        r->batch = s->st->batches;
        r->batch_offline_rows = offline_rows;
        r->instance = instance;
    }
    s->st->batches++;
    s->st->rows += b->rows;
    s->st->offline_rows += offline_rows;
    if (offline_rows == b->rows) {
        s->st->offline_batches++;
        s->st->offline_gap_batches += s->q.n > 0;
    } else if (offline_rows > 0)
        s->st->fill_batches++;
}

static void sim_start_batch(struct sim *s, int i, const struct batch *b)
{
    const struct sim_config *c = s->c;
    struct sim_instance *in = &s->inst[i];
    if (b->rows > c->batching.max_batch_size)
        VIOLATE(s->st, "batch of %d rows over max_batch_size %d", b->rows,
                c->batching.max_batch_size);
    if (c->batching.max_batch_tokens > 0 && b->tokens > c->batching.max_batch_tokens)
        VIOLATE(s->st, "batch of %lld tokens over max_batch_tokens %d", (long long)b->tokens,
                c->batching.max_batch_tokens);
    /* The device costs what the requests really are, whether or not the
     * batcher was told (rows_only). */
    int64_t tokens = 0, sq = 0, maxlen = 0;
    for (const struct infer_item *it = b->head; it; it = it->next) {
        const struct sim_request *r = &s->reqs[it - s->items];
        tokens += sim_req_tokens(r);
        sq += r->tokens_sq;
        maxlen = sim_req_len(r) > maxlen ? sim_req_len(r) : maxlen;
    }
    double e = sim_device_ns(c, i, b->rows, tokens, sq, maxlen);
    if (c->jitter > 0)
        e *= 1.0 + c->jitter * ((double)(sim_rng_next(&s->rng) % 2001) / 1000.0 - 1.0);
    in->exec_ns = (int64_t)e;
    in->busy_until = s->now + in->exec_ns;
    in->batch = b->head;
    in->tokens = b->tokens;
    in->tokens_sq = b->tokens_sq;
    s->st->busy_ns += in->exec_ns;
    if (c->check) {
        sim_check_priority(s, b, &s->lat[i]);
        bool offline = false;
        for (struct infer_item *it = b->head; it; it = it->next)
            offline |= it->offline;
        if (offline)
            sim_check_offline(s, b, &s->lat[i]);
    }
    sim_record_batch(s, b, i);
}

static void sim_answer(struct sim *s, struct infer_item *it, int status, int64_t at)
{
    struct sim_request *r = &s->reqs[it - s->items];
    r->status = status;
    r->done_ns = at;
    r->answers++;
    s->answered++;
}

/* 1. Batches that finished. */
static void sim_finish_batches(struct sim *s)
{
    const struct sim_config *c = s->c;
    for (int i = 0; i < c->instances; i++) {
        struct sim_instance *in = &s->inst[i];
        if (!in->busy_until || in->busy_until > s->now)
            continue;
        for (struct infer_item *it = in->batch; it; it = it->next) {
            sim_answer(s, it, 0, in->busy_until);
            /* Computed requests end within their deadline as planned
             * (when the plan can be exact: the batcher sees what the
             * device costs). */
            if (c->check && s->aware && c->jitter == 0 && !c->rows_only && !c->padded &&
                it->deadline_ns &&
                in->busy_until > sim_plan_deadline(s, it) + 1000)
                VIOLATE(s->st, "request %td computed past its deadline (%lld ns late)",
                        it - s->items, (long long)(in->busy_until - sim_plan_deadline(s, it)));
        }
        latmodel_add_sq(&s->lat[i], in->tokens, in->tokens_sq, in->exec_ns);
        s->q.learned_at_ns = s->now;   /* as batcher_learn does */
        sim_update_fastest(s);
        in->busy_until = 0;
        in->batch = NULL;
    }
}

/* 2. Arrivals. Offline requests are never refused. */
static void sim_admit(struct sim *s)
{
    while (s->next_arrival < s->n && s->reqs[s->next_arrival].arrival_ns <= s->now) {
        struct infer_item *it = &s->items[s->next_arrival];
        struct error err;
        int rc = bqueue_push(&s->q, it, s->now, &s->lat[s->fastest], &err);
        if (rc) {
            if (it->offline)
                VIOLATE(s->st, "offline request %d refused: %.120s", s->next_arrival, err.msg);
            sim_answer(s, it, -rc, s->now);
        } else if (!it->offline) {
            /* Online rows only: a job's lines are no company the policy
             * could wait for (see the report on batcher_submit, which still
             * counts them). */
            rate_add(&s->arrivals, s->now, work_tokens(it));
        }
        s->next_arrival++;
    }
}

/* 3. Expiry; returns when the next one is due. */
static int64_t sim_expire(struct sim *s)
{
    struct infer_item *expired;
    int64_t next = bqueue_expire(&s->q, s->now, &s->lat[s->fastest], &expired);
    while (expired) {
        struct infer_item *it = expired;
        expired = it->next;
        if (it->offline)
            VIOLATE(s->st, "offline request %td expired", it - s->items);
        sim_answer(s, it, BG_EDEADLINE, s->now);
    }
    return next;
}

/* 4. Idle instances take work; returns the earliest wake among those left
 * waiting. */
static int64_t sim_dispatch(struct sim *s)
{
    int64_t wake = POLICY_NEVER;
    for (int i = 0; i < s->c->instances; i++) {
        if (s->inst[i].busy_until)
            continue;
        struct batch b = {0};
        int64_t w;
        s->q.load.rows_per_ns = rate_value(&s->arrivals, s->now);
        s->q.load.device_has_other_work = 0;
        s->q.load.fastest = &s->lat[s->fastest];
        if (!bqueue_take(&s->q, s->now, &s->lat[i], &b, &w)) {
            /* A slower instance may leave the queue to a faster one
             * (policy_select_feasible): not a wait for company. */
            bool slower = latmodel_predict(&s->lat[i], 1) >
                          latmodel_predict(&s->lat[s->fastest], 1);
            if (s->c->check && s->kind == POLICY_ADAPTIVE && s->q.n > 0 && !slower)
                sim_check_wait(&s->q, s->now, w, s->st);
            wake = sim_min64(wake, w);
            continue;
        }
        sim_start_batch(s, i, &b);
    }
    return wake;
}

/* After the event: nothing was left to expire unseen, and (deadline-aware)
 * nothing is queued past the instant it became hopeless. Returns when the
 * next request will expire. */
static int64_t sim_check_queue(struct sim *s)
{
    struct infer_item *expired;
    int64_t next = bqueue_expire(&s->q, s->now, &s->lat[s->fastest], &expired);
    if (expired)
        VIOLATE(s->st, "a request expired without an event at %lld", (long long)s->now);
    if (!s->c->check || !s->aware)
        return next;
    struct list *dl;
    list_foreach(dl, &s->q.dl) {
        struct infer_item *it = list_data(dl, struct infer_item, q_dl);
        /* At its latest start it may still be started (bqueue_expire): past it, not. */
        if (sim_plan_deadline(s, it) - latmodel_predict_sq(&s->lat[s->fastest], work_tokens(it),
                                                           it->tokens_sq) < s->now)
            VIOLATE(s->st, "queue holds request %td past its last feasible start",
                    it - s->items);
    }
    return next;
}

static int64_t sim_next_event(const struct sim *s, int64_t wake, int64_t expiry)
{
    int64_t t = POLICY_NEVER;
    if (s->next_arrival < s->n)
        t = s->reqs[s->next_arrival].arrival_ns;
    for (int i = 0; i < s->c->instances; i++)
        if (s->inst[i].busy_until)
            t = sim_min64(t, s->inst[i].busy_until);
    t = sim_min64(t, wake);
    return sim_min64(t, expiry);
}

static int sim_init(struct sim *s, const struct sim_config *c, struct sim_request *reqs, int n,
                    struct sim_stats *st)
{
    memset(s, 0, sizeof *s);
    s->c = c;
    s->reqs = reqs;
    s->n = n;
    s->st = st;
    s->kind = policy_kind_from_name(c->batching.policy);
    s->aware = policy_deadline_aware(s->kind);
    s->last_offline = -1;
    struct bqueue_config qc;
    bqueue_config_from_model(&qc, &c->batching, s->kind);
    s->items = calloc((size_t)(n ? n : 1), sizeof *s->items);
    s->inst = calloc((size_t)c->instances, sizeof *s->inst);
    s->lat = calloc((size_t)c->instances, sizeof *s->lat);
    if (!s->items || !s->inst || !s->lat || bqueue_init(&s->q, &qc) != 0)
        return -1;
    s->q.guard_ns = c->guard_ns;   /* the batcher sets it before each operation */
    s->rng = c->seed ? c->seed : 88172645463325252ull;
    /* Warmup, as the server does at load: sizes 1 and max, twice; with
     * tokens, once each at rows of 16, 48, 96 and 160 tokens (as many
     * samples, and lengths enough to tell the quadratic term). */
    bool tokens = false, sq = false;
    for (int i = 0; i < n; i++) {
        tokens |= reqs[i].tokens > 0 && reqs[i].tokens != reqs[i].rows;
        sq |= reqs[i].tokens_sq > 0;
    }
    for (int i = 0; i < c->instances; i++) {
        latmodel_init(&s->lat[i]);
        for (int k = 0; k < (tokens ? 8 : 4); k++) {
            int r = k % 2 ? c->batching.max_batch_size : 1;
            if (!tokens) {
                latmodel_add(&s->lat[i], r,
                             (int64_t)(sim_slowness(c, i) * (c->exec_a_ns + c->exec_b_ns * r)));
                continue;
            }
            static const int64_t lens[] = {16, 48, 96, 160};
            int64_t len = lens[k / 2];
            int64_t ns = (int64_t)sim_device_ns(c, i, r, r * len, r * len * len, len);
            if (c->rows_only)
                latmodel_add(&s->lat[i], r, ns);
            else
                latmodel_add_sq(&s->lat[i], r * len, sq ? r * len * len : 0, ns);
        }
    }
    sim_update_fastest(s);
    for (int i = 0; i < n; i++) {
        struct infer_item *it = &s->items[i];
        it->rows = reqs[i].rows;
        if (!c->rows_only) {
            it->tokens = reqs[i].tokens;
            it->tokens_sq = reqs[i].tokens_sq;
            it->max_len = reqs[i].max_len;
        }
        it->t_arrival_ns = reqs[i].arrival_ns;
        it->offline = reqs[i].offline;
        if (!it->offline) {
            it->deadline_ns = reqs[i].budget_ns ? reqs[i].arrival_ns + reqs[i].budget_ns : 0;
            it->priority = reqs[i].priority;
        }
        reqs[i].answers = 0;
        reqs[i].status = 0;
        reqs[i].batch = -1;
        reqs[i].batch_offline_rows = 0;
        reqs[i].instance = -1;
    }
    rate_init(&s->arrivals);
    s->now = n ? reqs[0].arrival_ns : 0;
    return 0;
}

static void sim_free(struct sim *s)
{
    bqueue_free(&s->q);
    free(s->items);
    free(s->inst);
    free(s->lat);
}

int sim_run(const struct sim_config *c, struct sim_request *reqs, int n, struct sim_stats *st)
{
    memset(st, 0, sizeof *st);
    struct sim s;
    if (sim_init(&s, c, reqs, n, st) != 0) {
        sim_free(&s);
        snprintf(st->violation, sizeof st->violation, "out of memory");
        return -1;
    }
    int64_t first = s.now;
    while (s.answered < n) {
        sim_finish_batches(&s);
        sim_admit(&s);
        sim_expire(&s);
        int64_t wake = sim_dispatch(&s);
        int64_t expiry = sim_check_queue(&s);
        if (s.answered >= n)
            break;
        int64_t t = sim_next_event(&s, wake, expiry);
        if (t == POLICY_NEVER) {
            VIOLATE(st, "stalled at %lld with %d of %d answered", (long long)s.now, s.answered, n);
            break;
        }
        if (t <= s.now)
            t = s.now + 1;   /* a decision instant already reached: step past it */
        s.now = t;
    }
    int64_t end = s.now;
    for (int i = 0; i < n; i++) {
        if (reqs[i].answers != 1)
            VIOLATE(st, "request %d answered %d times", i, reqs[i].answers);
        if (reqs[i].offline && reqs[i].status != 0)
            VIOLATE(st, "offline request %d answered with status %d", i, reqs[i].status);
        if (reqs[i].done_ns > end)
            end = reqs[i].done_ns;
    }
    st->span_ns = end - first;
    sim_free(&s);
    return st->violation[0] ? -1 : 0;
}
