/* sim.c - see sim.h. Events happen at arrivals, batch completions, the
 * policy's wake instants and expiry instants; at each one the order is the
 * server's: finish batches, admit arrivals, expire, give idle instances work. */
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
    int rows;
    int64_t exec_ns;
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


int sim_run(const struct sim_config *c, struct sim_request *reqs, int n, struct sim_stats *st)
{
    memset(st, 0, sizeof *st);
    struct bqueue_config qc;
    enum policy_kind kind = policy_kind_from_name(c->batching.policy);
    bool aware = policy_deadline_aware(kind);
    bqueue_config_from_model(&qc, &c->batching, kind);
    struct bqueue q;
    struct infer_item *items = calloc((size_t)(n ? n : 1), sizeof *items);
    struct sim_instance *inst = calloc((size_t)c->instances, sizeof *inst);
    struct latmodel *lat = calloc((size_t)c->instances, sizeof *lat);
    if (!items || !inst || !lat || bqueue_init(&q, &qc) != 0) {
        free(items);
        free(inst);
        free(lat);
        snprintf(st->violation, sizeof st->violation, "out of memory");
        return -1;
    }
    uint64_t rng = c->seed ? c->seed : 88172645463325252ull;
    /* Warmup, as the server does at load: sizes 1 and max, twice. */
    for (int i = 0; i < c->instances; i++) {
        latmodel_init(&lat[i]);
        for (int k = 0; k < 4; k++) {
            int r = k % 2 ? c->batching.max_batch_size : 1;
            latmodel_add(&lat[i], r, (int64_t)(c->exec_a_ns + c->exec_b_ns * r));
        }
    }
    const struct latmodel *lat_fast = &lat[0];
    for (int i = 0; i < n; i++) {
        items[i].rows = reqs[i].rows;
        items[i].t_arrival_ns = reqs[i].arrival_ns;
        items[i].deadline_ns = reqs[i].budget_ns ? reqs[i].arrival_ns + reqs[i].budget_ns : 0;
        items[i].priority = reqs[i].priority;
        reqs[i].answers = 0;
        reqs[i].status = 0;
    }
    int next_arrival = 0, answered = 0;
    int64_t now = n ? reqs[0].arrival_ns : 0, first = now, wake = POLICY_NEVER, expiry = POLICY_NEVER;
    const struct latmodel *pol_lat = aware ? lat_fast : NULL;
    struct rate arrivals;     /* as the batcher measures it: admitted rows */
    rate_init(&arrivals);
    while (answered < n) {
        /* 1. batches that finished */
        for (int i = 0; i < c->instances; i++) {
            struct sim_instance *in = &inst[i];
            if (!in->busy_until || in->busy_until > now)
                continue;
            for (struct infer_item *it = in->batch; it; it = it->next) {
                struct sim_request *r = &reqs[it - items];
                r->done_ns = in->busy_until;
                r->answers++;
                answered++;
                if (c->check && aware && c->jitter == 0 && it->deadline_ns &&
                    r->done_ns > it->deadline_ns + 1000)
                    VIOLATE(st, "request %td computed past its deadline (%lld ns late)",
                            it - items, (long long)(r->done_ns - it->deadline_ns));
            }
            latmodel_add(&lat[i], in->rows, in->exec_ns);
            in->busy_until = 0;
            in->batch = NULL;
        }
        /* 2. arrivals */
        while (next_arrival < n && reqs[next_arrival].arrival_ns <= now) {
            struct infer_item *it = &items[next_arrival];
            struct error err;
            int rc = bqueue_push(&q, it, now, pol_lat, &err);
            if (rc) {
                reqs[next_arrival].status = -rc;
                reqs[next_arrival].done_ns = now;
                reqs[next_arrival].answers++;
                answered++;
            } else {
                rate_add(&arrivals, now, it->rows);
            }
            next_arrival++;
        }
        /* 3. expiry */
        struct infer_item *expired;
        bqueue_expire(&q, now, pol_lat, &expired);
        for (struct infer_item *it = expired; it; it = it->next) {
            struct sim_request *r = &reqs[it - items];
            r->status = BG_EDEADLINE;
            r->done_ns = now;
            r->answers++;
            answered++;
        }
        /* 4. idle instances take work */
        wake = POLICY_NEVER;
        for (int i = 0; i < c->instances; i++) {
            struct sim_instance *in = &inst[i];
            if (in->busy_until)
                continue;
            struct batch b = {0};
            int64_t w;
            q.load.rows_per_ns = rate_value(&arrivals, now);
            q.load.device_has_other_work = 0;
            if (!bqueue_take(&q, now, aware ? &lat[i] : NULL, &b, &w)) {
                if (c->check && kind == POLICY_ADAPTIVE && q.n > 0)
                    sim_check_wait(&q, now, w, st);
                wake = sim_min64(wake, w);
                continue;
            }
            if (b.rows > c->batching.max_batch_size)
                VIOLATE(st, "batch of %d rows over max_batch_size %d", b.rows,
                        c->batching.max_batch_size);
            double e = c->exec_a_ns + c->exec_b_ns * b.rows;
            if (c->jitter > 0)
                e *= 1.0 + c->jitter * ((double)(sim_rng_next(&rng) % 2001) / 1000.0 - 1.0);
            in->exec_ns = (int64_t)e;
            in->busy_until = now + in->exec_ns;
            in->batch = b.head;
            in->rows = b.rows;
            st->batches++;
            st->rows += b.rows;
            st->busy_ns += in->exec_ns;
            /* Priority order: the policy fills a batch in service order up to
             * a row budget R, finishing by exec(R). A request left waiting
             * while a lower-priority one runs must have been unable to join
             * at its turn: its rows exceeded what R had left after the members
             * served before it, or its deadline falls before exec(R) ends.
             * (The oldest request may jump the order once it aged.) */
            int64_t finish = now + latmodel_predict(&lat[i], b.row_budget);
            struct list *wl;
            list_foreach(wl, &q.svc) {
                if (!c->check)
                    break;
                struct infer_item *wt = list_data(wl, struct infer_item, q_svc);
                int rows_before = 0;
                /* A member whose order ties with wt's (same priority,
                 * deadline and arrival instant) may have been ahead of it
                 * in the queue: it counts as before (found by a seed where
                 * two such requests met a full batch). */
                for (struct infer_item *it = b.head; it; it = it->next)
                    if (!bqueue_served_before(wt, it) ||
                        (qc.aging_ns > 0 && now - it->t_arrival_ns >= qc.aging_ns))
                        rows_before += it->rows;   /* an aged request goes first */
                bool could_not = wt->rows > b.row_budget - rows_before ||
                                 (wt->deadline_ns && wt->deadline_ns < finish);
                if (could_not)
                    continue;
                for (struct infer_item *it = b.head; it; it = it->next) {
                    bool aged = qc.aging_ns > 0 && now - it->t_arrival_ns >= qc.aging_ns;
                    if (!aged && it->priority > wt->priority)
                        VIOLATE(st, "priority %d served at %lld while priority %d waited "
                                "(rows %d, budget %d, before %d, slack %lld, batch %d, qlen %d)",
                                it->priority, (long long)now, wt->priority, wt->rows,
                                b.row_budget, rows_before,
                                wt->deadline_ns ? (long long)(wt->deadline_ns - finish) : -1LL,
                                b.rows, q.n);
                }
            }
            for (struct infer_item *it = b.head; it; it = it->next) {
                struct sim_request *r = &reqs[it - items];
                r->start_ns = now;
                r->batch_rows = b.rows;
            }
        }
        expiry = bqueue_expire(&q, now, pol_lat, &expired);
        if (expired)
            VIOLATE(st, "a request expired without an event at %lld", (long long)now);
        if (c->check && aware) {
            struct list *dl;
            list_foreach(dl, &q.dl) {
                struct infer_item *it = list_data(dl, struct infer_item, q_dl);
                if (it->deadline_ns - latmodel_predict(lat_fast, it->rows) <= now)
                    VIOLATE(st, "queue holds request %td past its last feasible start", it - items);
            }
        }
        if (answered >= n)
            break;
        /* next event */
        int64_t t = POLICY_NEVER;
        if (next_arrival < n)
            t = reqs[next_arrival].arrival_ns;
        for (int i = 0; i < c->instances; i++)
            if (inst[i].busy_until)
                t = sim_min64(t, inst[i].busy_until);
        t = sim_min64(t, wake);
        t = sim_min64(t, expiry);
        if (t == POLICY_NEVER) {
            VIOLATE(st, "stalled at %lld with %d of %d answered", (long long)now, answered, n);
            break;
        }
        if (t <= now)
            t = now + 1;   /* a decision instant already reached: step past it */
        now = t;
    }
    for (int i = 0; i < n; i++) {
        if (reqs[i].answers != 1)
            VIOLATE(st, "request %d answered %d times", i, reqs[i].answers);
        if (reqs[i].done_ns > now)
            now = reqs[i].done_ns;
    }
    st->span_ns = now - first;
    bqueue_free(&q);
    free(items);
    free(inst);
    free(lat);
    return st->violation[0] ? -1 : 0;
}
