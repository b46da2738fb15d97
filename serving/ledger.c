/* ledger.c - the usage ledger's thread (ledger.h): samples the counters
 * once a second, charges what changed by ledger_split, gathers the rows
 * by minute and writes them every flush_s seconds. */
#include "serving/ledger.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/log.h"
#include "serving/lifecycle.h"

#define LEDGER_SAMPLE_NS 1000000000LL
/* Rows kept in memory while the database cannot be written, at most. */
#define LEDGER_MAX_PENDING 200000
/* Rolled up and pruned this often (and at the start). */
#define LEDGER_ROLLUP_S 3600
/* A model's instances (instances.count) or a pool's endpoints, at most:
 * every one is charged its own use. */
#define LEDGER_MAX_INSTANCES 256
_Static_assert(LEDGER_MAX_INSTANCES >= MODEL_MAX_ENDPOINTS, "a pool's endpoints");

/* A counter's last reading, per (model entry, device row). */
struct ledger_track {
    int entry, instance;
    char device[48];
    char url[200];                    /* a server's; "" for an instance */
    const struct modelstats *stats;   /* whose busy counter it read */
    double busy_s, held_s;
    int64_t since_ns;                 /* a server's: when the residency it measured began */
};

/* An instance's use by tenant at the last reading (the loop backends'
 * batches are all instance 0's). */
struct ledger_prev_use {
    int entry, instance;
    const struct modelstats *stats;
    struct modelstats_tenant_use use[WORK_TENANTS_MAX];
};

/* One instance or server of one model in this sample. */
struct ledger_item {
    char device[128];               /* a device label, or a server's URL */
    char model[128];
    bool server;
    int instance;                     /* -1 for a server */
    double held_s, busy_s;
    int use_off;                      /* into deltas; -1: none */
    int w_off;                        /* into weights */
};

struct ledger {
    struct serving *s;
    struct state *st;
    struct ledger_config c;
    ledger_energy_fn energy;
    void *energy_arg;
    pthread_t thread;
    pthread_mutex_t mu;               /* stop, costs */
    pthread_cond_t cv;
    bool stop;

    /* The thread's own. */
    struct ledger_track *track;
    int ntrack, captrack;
    struct ledger_prev_use *prev;
    int nprev, capprev;
    struct state_usage_row *acc;      /* rows gathered, not written yet */
    int nacc, capacc;
    /* This sample's scratch. */
    struct ledger_item *items;
    int nitems, capitems;
    struct modelstats_tenant_use *deltas;
    int ndeltas, capdeltas;
    double *weights;                  /* WORK_TENANTS_MAX per model sampled */
    int nweights, capweights;
    struct {
        char device[128];
        double joules;
        int64_t at_ns;                /* when read */
    } energy_prev[32];
    int nenergy;
    int64_t last_ns;
    int64_t last_flush_s, last_rollup_s;
    int write_failures;
    bool dropped;                     /* rows dropped since the last write that took */

    /* Under mu: cost since the start by (tenant, device). */
    struct ledger_cost *costs;
    int ncosts, capcosts;
    /* Rounding carried from each series' written rows to its next (thread's
     * own): ledger_flush. */
    struct ledger_carry *carry;
    int ncarry, capcarry;
    struct state_usage_row *out;      /* the rows as written, rounded */
    int capout;
};

/* A series (tenant, model, class, device) and what rounding its written
 * rows to the database's units (busy and idle in us, cost in millionths,
 * energy in mJ) left out. Rows are written every flush_s, and rounding
 * each on its own let the errors add up: at a low price, a tenant whose
 * second cost 0.6e-6 was charged 1e-6 a second, another 0. Given to the
 * series' next row, each series stays within half a unit of what it used. */
struct ledger_carry {
    char tenant[64], model[128], cls[16], device[128];
    double v[4];
};

static void *ledger_grow(void *p, int *cap, int need, size_t size)
{
    if (need <= *cap)
        return p;
    int ncap = *cap ? *cap * 2 : 16;
    while (ncap < need)
        ncap *= 2;
    void *np = realloc(p, (size_t)ncap * size);
    if (!np)
        return NULL;
    memset((char *)np + (size_t)*cap * size, 0, (size_t)(ncap - *cap) * size);
    *cap = ncap;
    return np;
}

/* Room for `need` elements in arr (of capacity cap); false: out of memory,
 * arr and cap as they were. */
#define LEDGER_GROW(arr, cap, need)                                                           \
    ({                                                                                        \
        void *grown_ = ledger_grow((arr), &(cap), (need), sizeof *(arr));                     \
        if (grown_)                                                                           \
            (arr) = grown_;                                                                   \
        grown_ != NULL;                                                                       \
    })

static int64_t ledger_wall_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec;
}

/* A counter that went down was reset (a new copy of the model): all of
 * its value is new. */
static double ledger_delta(double cur, double prev) { return cur >= prev ? cur - prev : cur; }

static uint64_t ledger_udelta(uint64_t cur, uint64_t prev) { return cur >= prev ? cur - prev : cur; }

static struct ledger_track *ledger_track_find(struct ledger *l, int entry, int instance,
                                              const char *device, const char *url)
{
    for (int i = 0; i < l->ntrack; i++) {
        struct ledger_track *t = &l->track[i];
        /* An instance's counters are its own wherever a reload placed it. */
        if (t->entry == entry && t->instance == instance && strcmp(t->url, url) == 0 &&
            (!url[0] || strcmp(t->device, device) == 0))
            return t;
    }
    if (!LEDGER_GROW(l->track, l->captrack, l->ntrack + 1))
        return NULL;
    struct ledger_track *t = &l->track[l->ntrack++];
    memset(t, 0, sizeof *t);
    t->entry = entry;
    t->instance = instance;
    snprintf(t->device, sizeof t->device, "%s", device);
    snprintf(t->url, sizeof t->url, "%s", url);
    return t;
}

static struct ledger_prev_use *ledger_prev_find(struct ledger *l, int entry, int instance)
{
    for (int i = 0; i < l->nprev; i++)
        if (l->prev[i].entry == entry && l->prev[i].instance == instance)
            return &l->prev[i];
    if (!LEDGER_GROW(l->prev, l->capprev, l->nprev + 1))
        return NULL;
    struct ledger_prev_use *p = &l->prev[l->nprev++];
    memset(p, 0, sizeof *p);
    p->entry = entry;
    p->instance = instance;
    return p;
}

/* ---- one model's sample ---- */

struct ledger_walk {
    struct ledger *l;
    struct served_model *sm;
    int entry, w_off;
    int64_t now_ns;
    int use_off[LEDGER_MAX_INSTANCES]; /* each instance's use delta; -1: none */
    int nuse;
};

static void ledger_device_row(const struct served_device *d, void *arg)
{
    struct ledger_walk *w = arg;
    struct ledger *l = w->l;
    const char *url = d->url ? d->url : "";
    struct ledger_track *t = ledger_track_find(l, w->entry, d->dev.instance, d->dev.name, url);
    if (!t || !LEDGER_GROW(l->items, l->capitems, l->nitems + 1))
        return;
    /* An instance's held and busy counters go on across unloads and
     * reloads (modelstats_loaded, modelstats_retire): they start from zero
     * only for a new model of the same name. A server's count from when
     * it was set up, so a residency that began anew counts from its own
     * zero. */
    int64_t since = w->now_ns - (int64_t)(d->held_s * 1e9);
    bool anew = d->url ? t->since_ns == 0 || llabs(since - t->since_ns) > 250000000LL
                       : !t->stats || !modelstats_continues(w->sm->stats, t->stats);
    double held = anew ? d->held_s : ledger_delta(d->held_s, t->held_s);
    double busy = anew ? d->busy_s : ledger_delta(d->busy_s, t->busy_s);
    t->since_ns = since;
    t->held_s = d->held_s;
    t->busy_s = d->busy_s;
    t->stats = w->sm->stats;
    struct ledger_item *it = &l->items[l->nitems++];
    memset(it, 0, sizeof *it);
    /* A server behind an upstream model is a device of its own, named by
     * its URL: two models calling one server share it, as two models on
     * one GPU do; it has no price (batchgate does not own it). */
    snprintf(it->device, sizeof it->device, "%s", d->url ? d->url : d->dev.name);
    snprintf(it->model, sizeof it->model, "%s", w->sm->model.cfg.name);
    it->server = d->url != NULL;
    it->held_s = held;
    it->busy_s = busy;
    it->w_off = w->w_off;
    it->instance = d->dev.instance;
    it->use_off = -1;   /* ledger_sample_model's, once it knows there are rows */
}

/* Instances the model's counters hold that no device row named this
 * time (a reload to fewer instances took them away): rows of their own,
 * on the device they were last seen on, so that their last work is
 * charged (their requests of the last second and the batches the old
 * copy finished after the swap went uncharged: 11 of 48). Their held
 * clocks stopped with them, so nothing more is charged afterwards. */
static void ledger_gone_instances(struct ledger_walk *w, const struct modelstats_snapshot *snap,
                                  int first)
{
    struct ledger *l = w->l;
    int n = snap->inst ? snap->ninstances : 0;
    n = n < LEDGER_MAX_INSTANCES ? n : LEDGER_MAX_INSTANCES;
    for (int i = first; i < l->nitems; i++)
        if (l->items[i].server)
            return;   /* a loop backend's instances are its servers, named by their own rows */
    for (int inst = 0; inst < n; inst++) {
        bool named = false;
        for (int i = first; i < l->nitems && !named; i++)
            named = l->items[i].instance == inst;
        const struct ledger_track *t = NULL;
        for (int k = 0; k < l->ntrack && !named && !t; k++)
            if (l->track[k].entry == w->entry && l->track[k].instance == inst &&
                !l->track[k].url[0])
                t = &l->track[k];
        if (named)
            continue;
        struct served_device d = {.dev = {.instance = inst}};
        /* Never seen by a sample (a reload gave the model this instance
         * and the next took it away within one sampling interval): its work
         * is charged all the same, where it ran (back-to-back reloads
         * between 2 instances and 1 left 72-610 requests uncharged). */
        if (t)
            snprintf(d.dev.name, sizeof d.dev.name, "%.47s", t->device);
        else if (!serving_instance_device(w->sm, inst, d.dev.name, sizeof d.dev.name))
            continue;   /* never placed: nothing of it to charge */
        d.busy_s = snap->inst[inst].busy_s;
        d.held_s = snap->inst[inst].held_s;
        ledger_device_row(&d, w);
    }
}

/* The model's items from first_item get their instance's use. A model's
 * servers (an upstream model's or an LLM pool's, in the model's order) are
 * each charged their own: the statistics count each batch or call on the
 * instance of the server it went to (served_stats_instances), so server k
 * gets instance k's use as it is. */
static void ledger_item_uses(struct ledger *l, int first_item, const struct ledger_walk *wk)
{
    int k = 0;
    for (int i = first_item; i < l->nitems; i++) {
        struct ledger_item *it = &l->items[i];
        int inst = it->server ? k++ : it->instance;
        it->use_off = inst >= 0 && inst < wk->nuse ? wk->use_off[inst] : -1;
    }
}

/* The model's tenants' weights for its idle time into w: their shares in
 * force; equal when they have none; tenant 0 alone when none may use it. */
static void ledger_idle_weights(const struct tenants_config *tc, const double *share,
                                const char *model, double *w)
{
    memset(w, 0, sizeof(double) * WORK_TENANTS_MAX);
    if (!tc) {
        w[0] = 1;
        return;
    }
    double sum = 0;
    int allowed = 0;
    bool may[TENANTS_MAX];
    for (int t = 0; t < tc->n; t++) {
        /* Tenant default uses a model only while a request without a key
         * may (auth not required). */
        may[t] = tenant_allows(&tc->t[t], model) && !(t == 0 && tc->auth_required && tc->n > 1);
        allowed += may[t];
        sum += may[t] ? share[t] : 0;
    }
    for (int t = 0; t < tc->n; t++)
        w[t] = !may[t] ? 0 : sum > 0 ? share[t] : 1;
    if (!allowed)
        w[0] = 1;
}

static void ledger_sample_model(struct ledger *l, int entry, struct served_model *sm,
                                const struct tenants_config *tc, const double *share)
{
    struct modelstats_snapshot snap;
    modelstats_snapshot(sm->stats, &snap);
    int ninst = modelstats_instances(sm->stats);
    ninst = ninst < LEDGER_MAX_INSTANCES ? ninst : LEDGER_MAX_INSTANCES;
    struct modelstats_tenant_use *cur = calloc((size_t)ninst * WORK_TENANTS_MAX, sizeof *cur);
    if (!cur || !LEDGER_GROW(l->weights, l->capweights, l->nweights + WORK_TENANTS_MAX)) {
        free(cur);
        modelstats_snapshot_free(&snap);
        return;
    }
    struct ledger_walk w = {.l = l, .sm = sm, .entry = entry, .w_off = l->nweights,
                            .now_ns = now_ns()};
    ledger_idle_weights(tc, share, sm->model.cfg.name, &l->weights[l->nweights]);
    l->nweights += WORK_TENANTS_MAX;
    /* Its devices first: a model with none now (a pool or upstream model
     * while unloaded: its servers went with it) leaves its use counted
     * where it is, for the next sample that finds some. One unloaded has
     * its instances' rows: the work of its last second is charged. */
    int first = l->nitems;
    serving_model_devices(sm, &snap, ledger_device_row, &w);
    ledger_gone_instances(&w, &snap, first);
    if (l->nitems == first) {
        free(cur);
        modelstats_snapshot_free(&snap);
        return;
    }
    w.nuse = modelstats_tenant_use(sm->stats, cur, ninst);
    for (int i = 0; i < w.nuse; i++) {
        w.use_off[i] = -1;
        struct ledger_prev_use *p = ledger_prev_find(l, entry, i);
        if (!p || !LEDGER_GROW(l->deltas, l->capdeltas, l->ndeltas + WORK_TENANTS_MAX))
            continue;
        if (!p->stats || !modelstats_continues(sm->stats, p->stats)) {   /* a new model's */
            memset(p->use, 0, sizeof p->use);
            p->stats = sm->stats;
        }
        struct modelstats_tenant_use *d = &l->deltas[l->ndeltas];
        for (int t = 0; t < WORK_TENANTS_MAX; t++) {
            const struct modelstats_tenant_use *c = &cur[(size_t)i * WORK_TENANTS_MAX + t];
            for (int k = 0; k < 2; k++) {
                d[t].requests[k] = ledger_udelta(c->requests[k], p->use[t].requests[k]);
                d[t].rows[k] = ledger_udelta(c->rows[k], p->use[t].rows[k]);
                d[t].busy_s[k] = ledger_delta(c->busy_s[k], p->use[t].busy_s[k]);
            }
            p->use[t] = *c;
        }
        w.use_off[i] = l->ndeltas;
        l->ndeltas += WORK_TENANTS_MAX;
    }
    ledger_item_uses(l, first, &w);
    free(cur);
    modelstats_snapshot_free(&snap);
}

/* ---- gathering rows by minute ---- */

static void ledger_add(struct ledger *l, int64_t minute, const char *tenant, const char *model,
                       int cls, const char *device, const struct ledger_piece *p)
{
    static const char *const cls_names[2] = {"online", "offline"};
    struct state_usage_row *r = NULL;
    for (int i = l->nacc - 1; i >= 0; i--) {
        struct state_usage_row *x = &l->acc[i];
        if (x->start == minute && strcmp(x->tenant, tenant) == 0 &&
            strcmp(x->model, model) == 0 && strcmp(x->cls, cls_names[cls]) == 0 &&
            strcmp(x->device, device) == 0) {
            r = x;
            break;
        }
    }
    if (!r) {
        if (!LEDGER_GROW(l->acc, l->capacc, l->nacc + 1))
            return;
        r = &l->acc[l->nacc++];
        memset(r, 0, sizeof *r);
        r->start = minute;
        snprintf(r->tenant, sizeof r->tenant, "%s", tenant);
        snprintf(r->model, sizeof r->model, "%s", model);
        snprintf(r->cls, sizeof r->cls, "%s", cls_names[cls]);
        snprintf(r->device, sizeof r->device, "%s", device);
    }
    r->requests += p->requests;
    r->rows += p->rows;
    r->busy_s += p->busy_s;
    r->idle_s += p->idle_s;
    r->held_s += p->busy_s + p->idle_s;
    r->cost += p->cost;
    r->energy_j += p->energy_j;
}

/* A sample of [t0, t1] (Unix seconds) into the minutes it covers
 * (ledger_spread). */
static void ledger_add_spread(struct ledger *l, double t0, double t1, const char *tenant,
                              const char *model, int cls, const char *device,
                              const struct ledger_piece *p)
{
    int64_t minutes[LEDGER_SPREAD_MAX];
    struct ledger_piece q[LEDGER_SPREAD_MAX];
    int n = ledger_spread(t0, t1, p, minutes, q);
    for (int i = 0; i < n; i++)
        ledger_add(l, minutes[i], tenant, model, cls, device, &q[i]);
}

static void ledger_cost_add(struct ledger *l, const char *tenant, const char *device, double c)
{
    if (c <= 0)
        return;
    pthread_mutex_lock(&l->mu);
    int i = 0;
    while (i < l->ncosts &&
           (strcmp(l->costs[i].tenant, tenant) != 0 || strcmp(l->costs[i].device, device) != 0))
        i++;
    if (i == l->ncosts && LEDGER_GROW(l->costs, l->capcosts, l->ncosts + 1)) {
        snprintf(l->costs[i].tenant, sizeof l->costs[i].tenant, "%s", tenant);
        snprintf(l->costs[i].device, sizeof l->costs[i].device, "%s", device);
        l->ncosts++;
    }
    if (i < l->ncosts)
        l->costs[i].cost += c;
    pthread_mutex_unlock(&l->mu);
}

/* The device's energy since the last sample; 0 when it has no counter, or
 * when it was not read at the last sample (nothing was resident there: the
 * energy used meanwhile is nobody's in the ledger). */
static double ledger_energy(struct ledger *l, const char *device)
{
    double j;
    if (!l->energy || l->energy(l->energy_arg, device, &j) != 0)
        return 0;
    int64_t now = now_ns();
    for (int i = 0; i < l->nenergy; i++)
        if (strcmp(l->energy_prev[i].device, device) == 0) {
            bool last = now - l->energy_prev[i].at_ns < LEDGER_SAMPLE_NS * 3 / 2;
            double d = last && j >= l->energy_prev[i].joules ? j - l->energy_prev[i].joules : 0;
            l->energy_prev[i].joules = j;
            l->energy_prev[i].at_ns = now;
            return d;
        }
    if (l->nenergy < (int)(sizeof l->energy_prev / sizeof l->energy_prev[0])) {
        snprintf(l->energy_prev[l->nenergy].device, sizeof l->energy_prev[0].device, "%s", device);
        l->energy_prev[l->nenergy].at_ns = now;
        l->energy_prev[l->nenergy++].joules = j;
    }
    return 0;   /* the first reading only sets the mark */
}

/* One sample: every model's counters, charged per device. */
static void ledger_sample(struct ledger *l)
{
    int64_t now = now_ns();
    double wall = (double)(now - l->last_ns) / 1e9;
    l->last_ns = now;
    /* The wall-clock span the sample covers: its minutes. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double t1 = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9, t0 = t1 - wall;

    const struct tenants_config *tc = serving_tenants(l->s);
    double share[TENANTS_MAX] = {0};
    if (tc)
        serving_shares_in_force(l->s, share);
    l->nitems = l->ndeltas = l->nweights = 0;
    int models = serving_count(l->s);
    for (int i = 0; i < models; i++) {
        struct served_model *sm = serving_acquire_at(l->s, i);
        if (!sm)
            continue;
        if (sm->stats)   /* loaded or not: an unloaded one's last second counts */
            ledger_sample_model(l, i, sm, tc, share);
        served_release(sm);
    }
    /* Device by device (items of one device are gathered in order). */
    int nt = tc ? tc->n : 1;
    struct ledger_inst *in = malloc((size_t)(l->nitems ? l->nitems : 1) * sizeof *in);
    int *of = malloc((size_t)(l->nitems ? l->nitems : 1) * sizeof *of);
    bool *done = calloc((size_t)(l->nitems ? l->nitems : 1), sizeof *done);
    struct ledger_piece *pieces =
        malloc((size_t)(l->nitems ? l->nitems : 1) * (size_t)nt * 2 * sizeof *pieces);
    for (int i = 0; in && of && done && pieces && i < l->nitems; i++) {
        if (done[i])
            continue;
        const char *device = l->items[i].device;
        int n = 0;
        for (int j = i; j < l->nitems; j++) {
            struct ledger_item *it = &l->items[j];
            if (done[j] || strcmp(it->device, device) != 0)
                continue;
            done[j] = true;
            in[n] = (struct ledger_inst){
                .held_s = it->held_s,
                .busy_s = it->busy_s,
                .use = it->use_off >= 0 ? &l->deltas[it->use_off] : NULL,
                .idle_w = &l->weights[it->w_off],
            };
            of[n++] = j;
        }
        double energy = ledger_energy(l, device);
        int np = ledger_split(in, n, nt, wall, serving_device_price(l->s, device), energy,
                              pieces, n * nt * 2);
        for (int k = 0; k < np; k++) {
            const struct ledger_piece *p = &pieces[k];
            const char *tenant = tc ? tc->t[p->tenant].name : "default";
            ledger_add_spread(l, t0, t1, tenant, l->items[of[p->inst]].model, p->cls, device, p);
            ledger_cost_add(l, tenant, device, p->cost);
        }
    }
    free(in);
    free(of);
    free(done);
    free(pieces);
}

static struct ledger_carry *ledger_carry_of(struct ledger *l, const struct state_usage_row *r)
{
    for (int i = 0; i < l->ncarry; i++) {
        struct ledger_carry *c = &l->carry[i];
        if (strcmp(c->tenant, r->tenant) == 0 && strcmp(c->model, r->model) == 0 &&
            strcmp(c->cls, r->cls) == 0 && strcmp(c->device, r->device) == 0)
            return c;
    }
    if (!LEDGER_GROW(l->carry, l->capcarry, l->ncarry + 1))
        return NULL;
    struct ledger_carry *c = &l->carry[l->ncarry++];
    memset(c, 0, sizeof *c);
    snprintf(c->tenant, sizeof c->tenant, "%s", r->tenant);
    snprintf(c->model, sizeof c->model, "%s", r->model);
    snprintf(c->cls, sizeof c->cls, "%s", r->cls);
    snprintf(c->device, sizeof c->device, "%s", r->device);
    return c;
}

/* l->out: the rows gathered, each amount rounded to its unit with its
 * series' carry; the carries move on (the caller puts them back when the
 * write fails). NULL when memory is short: then the rows go unrounded. */
static const struct state_usage_row *ledger_round(struct ledger *l)
{
    static const double unit[4] = {1e6, 1e6, 1e6, 1e3};
    if (!LEDGER_GROW(l->out, l->capout, l->nacc))
        return NULL;
    for (int i = 0; i < l->nacc; i++) {
        struct state_usage_row *o = &l->out[i];
        *o = l->acc[i];
        struct ledger_carry *c = ledger_carry_of(l, o);
        if (!c)
            continue;   /* this row as it is: its error is its own */
        double *f[4] = {&o->busy_s, &o->idle_s, &o->cost, &o->energy_j};
        for (int k = 0; k < 4; k++) {
            /* Half up, not away from zero: a carry of -0.5 never makes a
             * row of nothing -1. */
            double x = *f[k] * unit[k] + c->v[k], w = floor(x + 0.5);
            c->v[k] = x - w;
            *f[k] = w / unit[k];
        }
        o->held_s = o->busy_s + o->idle_s;
    }
    return l->out;
}

/* Writes what was gathered in one transaction; kept for the next try when
 * the write fails. */
static void ledger_flush(struct ledger *l)
{
    if (l->nacc == 0)
        return;
    struct error err = {0};
    int ncarry = l->ncarry;
    struct ledger_carry *saved = ncarry ? malloc((size_t)ncarry * sizeof *saved) : NULL;
    if (saved)
        memcpy(saved, l->carry, (size_t)ncarry * sizeof *saved);
    const struct state_usage_row *rows = (saved || !ncarry) ? ledger_round(l) : NULL;
    int pending = l->nacc;
    if (state_usage_add(l->st, rows ? rows : l->acc, l->nacc, &err) == 0) {
        free(saved);
        l->nacc = 0;
        /* Said as the failure was: whoever read the warning knows the
         * rows caught up (or how many were dropped meanwhile). */
        if (l->write_failures)
            log_info("usage ledger: written again after %d failed tries (%d rows kept%s)",
                     l->write_failures, pending, l->dropped ? "; some were dropped, said above" : "");
        l->write_failures = 0;
        l->dropped = false;
        return;
    }
    if (rows) {   /* not written: the carries are as they were */
        if (ncarry)   /* (saved is NULL when there were none) */
            memcpy(l->carry, saved, (size_t)ncarry * sizeof *saved);
        l->ncarry = ncarry;
    }
    free(saved);
    if (l->write_failures++ % 60 == 0)
        log_warn("%s (the rows are kept and written again)", err.msg);   /* err says "usage ledger:" */
    /* A database that stays unwritable must not take the memory with it:
     * past the bound the oldest half goes (rows are gathered in time
     * order), said once each time. */
    if (l->nacc > LEDGER_MAX_PENDING) {
        int drop = l->nacc / 2;
        log_error("usage ledger: %d rows not written for %d tries; the oldest %d are dropped",
                  l->nacc, l->write_failures, drop);
        memmove(l->acc, l->acc + drop, (size_t)(l->nacc - drop) * sizeof *l->acc);
        l->nacc -= drop;
        l->dropped = true;
    }
}

static void ledger_rollup(struct ledger *l, int64_t now_s)
{
    int64_t minutes_before = (now_s - (int64_t)l->c.minute_retention_days * 86400) / 3600 * 3600;
    int64_t hours_before = now_s - (int64_t)l->c.hour_retention_days * 86400;
    struct error err = {0};
    if (state_usage_rollup(l->st, minutes_before, hours_before, &err))
        log_warn("%s (rollup)", err.msg);
}

static void *ledger_main(void *arg)
{
    struct ledger *l = arg;
    /* Every counter of this process started at zero: the first sample
     * charges all they hold. */
    ledger_rollup(l, ledger_wall_s());
    l->last_rollup_s = l->last_flush_s = ledger_wall_s();
    /* Every pass samples once; the pass that saw stop set is the last one,
     * so a stop that comes while a sample is taken still gets its own. */
    pthread_mutex_lock(&l->mu);
    for (;;) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        int64_t ns = (int64_t)until.tv_nsec + LEDGER_SAMPLE_NS;
        until.tv_sec += ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
        while (!l->stop && pthread_cond_timedwait(&l->cv, &l->mu, &until) == 0)
            ;
        bool stopping = l->stop;
        pthread_mutex_unlock(&l->mu);
        ledger_sample(l);
        int64_t now_s = ledger_wall_s();
        if (stopping || now_s / l->c.flush_s != l->last_flush_s / l->c.flush_s) {
            ledger_flush(l);
            l->last_flush_s = now_s;
        }
        if (now_s - l->last_rollup_s >= LEDGER_ROLLUP_S) {
            ledger_rollup(l, now_s);
            l->last_rollup_s = now_s;
        }
        pthread_mutex_lock(&l->mu);
        if (stopping)
            break;
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

struct ledger *ledger_start(struct serving *s, struct state *st, const struct ledger_config *c,
                            ledger_energy_fn energy, void *energy_arg, struct error *err)
{
    struct ledger *l = calloc(1, sizeof *l);
    if (!l) {
        error_set(err, BG_ENOMEM, "usage ledger: out of memory");
        return NULL;
    }
    l->s = s;
    l->st = st;
    l->c = *c;
    if (l->c.flush_s <= 0)
        l->c.flush_s = 60;
    l->energy = energy;
    l->energy_arg = energy_arg;
    l->last_ns = now_ns();
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&l->thread, NULL, ledger_main, l) != 0) {
        error_set(err, BG_EIO, "usage ledger: cannot start its thread");
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return NULL;
    }
    return l;
}

void ledger_stop(struct ledger *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    free(l->items);
    free(l->track);
    free(l->prev);
    free(l->acc);
    free(l->deltas);
    free(l->weights);
    free(l->costs);
    free(l->carry);
    free(l->out);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}

int ledger_costs(struct ledger *l, struct ledger_cost **out)
{
    *out = NULL;
    if (!l)
        return 0;
    pthread_mutex_lock(&l->mu);
    int n = l->ncosts;
    if (n > 0 && (*out = malloc((size_t)n * sizeof **out)) != NULL)
        memcpy(*out, l->costs, (size_t)n * sizeof **out);
    else
        n = 0;
    pthread_mutex_unlock(&l->mu);
    return n;
}
