/* feed.c - see feed.h. */
#include "serving/feed.h"

#include <stdlib.h>
#include <string.h>

#include "backends/backend.h"
#include "batcher/batcher.h"
#include "common/httpc.h"
#include "serving/batchrun.h"
#include "serving/modelstats.h"
#include "serving/serving.h"

struct feed_slot {
    struct batch b;                   /* the batch out; empty when the slot is free */
    struct backend_io io;
    /* Where the batch is (the server of its try): its tenants' time there
     * counts while it is (modelstats.h), and its rows go to the server
     * that answered. */
    struct modelstats_flight flight;
    float *in, *out;                  /* max_batch_size rows */
};

struct feed {
    struct served_model *sm;
    bool started;
    int n;
    struct feed_slot slot[];
};

/* The batches all go through the batcher's instance 0 (its latency model):
 * a loop backend has no instances of its own. */
#define FEED_INSTANCE 0

static int feed_poll(void *ctx, int slot, struct backend_io **io, int64_t *wake_ns)
{
    struct feed *f = ctx;
    if (slot < 0 || slot >= f->n)
        return -1;
    struct feed_slot *s = &f->slot[slot];
    memset(&s->b, 0, sizeof s->b);
    int rc = batcher_try_next(f->sm->batcher, FEED_INSTANCE, &s->b, wake_ns);
    if (rc != 1)
        return rc;
    batchrun_gather(&s->b, s->in, (size_t)f->sm->model.cfg.input.row_elems);
    s->io = (struct backend_io){.in = s->in, .out = s->out, .rows = s->b.rows,
                                .retry_after_s = 0};
    for (const struct infer_item *it = s->b.head; it; it = it->next)
        if (it->deadline_ns && (!s->io.deadline_ns || it->deadline_ns < s->io.deadline_ns))
            s->io.deadline_ns = it->deadline_ns;
    s->flight.instance = -1;
    *io = &s->io;
    return 1;
}

static void feed_finish(void *ctx, int slot, int status, const char *msg, int64_t exec_ns)
{
    struct feed *f = ctx;
    struct feed_slot *s = &f->slot[slot];
    for (struct infer_item *it = s->b.head; it; it = it->next)
        it->retry_after_s = status == BG_EUNAVAILABLE ? s->io.retry_after_s : 0;
    /* A call that failed after a request's budget ran out is a timeout to
     * that request (504), whatever else went wrong. The tenants' use goes
     * on the statistics instance of the server of its last try (one per
     * server: served_stats_instances). */
    /* Answered by a server far slower than another (it turned slow, or
     * was): what the call took beyond what the fastest other takes is the
     * server's, not the batch's. The latency model learns the fastest's
     * time, and the answer guard does not count the excess as the answer
     * path's: the answers of a server that went from 40 ms to 120 ms
     * raised both until every 100 ms budget was refused 504 for 10 s,
     * while the other answered in 40 ms (the re-test). A server within
     * twice the fastest is blended as before, and calls with a deadline
     * go where they can be answered by it (httpc_pick). */
    int64_t learn_ns = exec_ns;
    struct httpc_target *const *ts;
    int n = model_servers(&f->sm->model, &ts);
    double r = status == 0 ? httpc_target_speed_ratio(ts, n, s->flight.instance, exec_ns) : 1;
    if (r < 1) {
        learn_ns = (int64_t)((double)exec_ns * r);
        for (struct infer_item *it = s->b.head; it; it = it->next)
            if (it->t_planned_ns)
                it->t_planned_ns += exec_ns - learn_ns;
    }
    batchrun_end(f->sm, FEED_INSTANCE, &s->flight, f->sm->own_shares, &s->b, s->out, status, msg,
                 exec_ns, learn_ns, true);
}

static void feed_sent(void *ctx, int slot, int server)
{
    struct feed *f = ctx;
    struct feed_slot *s = &f->slot[slot];
    if (server < 0 || s->flight.instance == server)
        return;   /* sent again where it was: the same stay */
    modelstats_flight_end(f->sm->stats, &s->flight, &s->b);
    modelstats_flight_begin(f->sm->stats, &s->flight, server, &s->b);
}

static void feed_set_waker(void *ctx, void (*waker)(void *), void *arg)
{
    struct feed *f = ctx;
    batcher_set_waker(f->sm->batcher, waker, arg);
}

static void feed_free(struct feed *f)
{
    for (int i = 0; i < f->n; i++) {
        free(f->slot[i].in);
        free(f->slot[i].out);
    }
    free(f);
}

int feed_start(struct served_model *sm, struct feed **out, struct error *err)
{
    struct model *m = &sm->model;
    int n = model_loop_slots(m);
    struct feed *f = calloc(1, sizeof *f + (size_t)n * sizeof f->slot[0]);
    *out = NULL;
    if (!f)
        return error_set(err, BG_ENOMEM, "model %s: out of memory for the feed", m->cfg.name);
    f->sm = sm;
    f->n = n;
    for (int i = 0; i < n; i++)
        f->slot[i].flight.instance = -1;
    size_t rows = (size_t)m->cfg.batching.max_batch_size;
    for (int i = 0; i < n; i++) {
        f->slot[i].in = malloc(rows * (size_t)m->cfg.input.row_elems * sizeof(float));
        f->slot[i].out = malloc(rows * (size_t)m->cfg.output.row_elems * sizeof(float));
        if (!f->slot[i].in || !f->slot[i].out) {
            feed_free(f);
            return error_set(err, BG_ENOMEM, "model %s: out of memory for batch buffers",
                             m->cfg.name);
        }
    }
    *out = f;
    struct backend_feed bf = {.poll = feed_poll, .finish = feed_finish, .sent = feed_sent,
                              .set_waker = feed_set_waker, .ctx = f};
    int rc = model_loop_start(m, &bf, err);
    f->started = true;   /* a failed start still needs its stop (what it began) */
    return rc;
}

void feed_stop(struct feed *f)
{
    if (!f)
        return;
    if (f->started)
        model_loop_stop(&f->sm->model);
    feed_free(f);
}
