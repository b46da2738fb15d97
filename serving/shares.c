/* shares.c - see shares.h. */
#include "serving/shares.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"

/* The bucket of job lines' guarantee holds this much wall time's worth. */
#define SHARES_OFF_CAP_NS 50000000LL
/* A share of 0 still weighs this much: such a tenant is served when the
 * others leave room, and yields when they do not. */
#define SHARES_MIN_WEIGHT 0.001
/* Virtual time: device ns / weight, kept as a double (ns / 0.001 over a
 * year stays far inside its exact range for ranking). */
/* The most a tenant with work may lead the device's virtual clock. A lead
 * is device time it had beyond its turn: rows that filled batches others
 * could not (a share-0 tenant's are charged 1000 times), its job's lines
 * in offline time. Others with work then run that lead times their weights
 * (at most the lead itself, weights summing to 1 or less) before it is
 * served again: unbounded, a few seconds of filling spare rows starved a
 * tenant for minutes. Larger than one batch's lead at an ordinary share
 * (a 100-ms batch at share 0.05 leads by 2e9). */
#define SHARES_LAG_NS 2000000000.0

struct shares_tenant {
    double vtime;
    double used;                      /* exponential moving sum of device ns (tau SHARES_TAU_NS) */
    int64_t used_at;
    int64_t active_at;                /* last time it had work or was charged; 0: never */
    int64_t off_active_at;            /* ... job lines (which do not make it active) */
    int64_t busy_ns[2];
    int64_t borrowed_ns;
    /* Device time its share has given it and it has not used yet: grows by
     * share x slots a ns of wall time, up to a window's worth (SHARES_TAU_NS);
     * what a batch takes beyond it is borrowed (shares_charge). */
    double entitled;
    int64_t entitled_at;
};

struct shares {
    pthread_mutex_t mu;
    char device[48];
    const struct tenants_config *tc;
    int n;
    int slots;
    double share[TENANTS_MAX];        /* in force */
    double offline_share;
    double vclock;
    /* Device ns job lines are owed ahead of online work: grows by
     * offline_share x slots a ns of wall time and shrinks by what they
     * run, within +-SHARES_OFF_CAP_NS x that rate either way. A bucket,
     * not a moving sum: a job that starts owes nothing yet, so it takes
     * its part at its rate from the start (a moving sum from 0 read as
     * owed until it reached the share, ~0.4-0.7 s of the whole device,
     * every online request waiting meanwhile); and a night of harvesting
     * idle time leaves no debt past the cap. */
    double off_owed;
    int64_t off_at;
    int64_t last_batch_ns;            /* the last batch charged: the bucket's grain */
    struct shares_tenant t[TENANTS_MAX];
};

struct shares *shares_new(const char *device, const struct tenants_config *tc, int slots,
                          struct error *err)
{
    struct shares *s = calloc(1, sizeof *s);
    if (!s) {
        error_set(err, BG_ENOMEM, "out of memory for the tenant shares of device %s", device);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    snprintf(s->device, sizeof s->device, "%s", device);
    s->tc = tc;
    s->n = tc && tc->n > 0 ? tc->n : 1;
    s->slots = slots > 0 ? slots : 1;
    shares_set(s, NULL, 0);
    return s;
}

void shares_free(struct shares *s)
{
    if (!s)
        return;
    pthread_mutex_destroy(&s->mu);
    free(s);
}

const char *shares_device(const struct shares *s) { return s->device; }
int shares_tenants(const struct shares *s) { return s->n; }

void shares_set_slots(struct shares *s, int slots)
{
    pthread_mutex_lock(&s->mu);
    s->slots = slots > 0 ? slots : 1;
    pthread_mutex_unlock(&s->mu);
}

int shares_slots(struct shares *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->slots;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void shares_set(struct shares *s, const double *share, double offline_share)
{
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->n; i++) {
        s->share[i] = share ? share[i] : s->tc ? s->tc->t[i].share : 0;
        /* A new window is a new account: a lead run up under the old
         * weights (a share of 0 weighs 0.001) would read a thousand times
         * larger, or smaller, under the new ones. */
        s->t[i].vtime = s->vclock;
    }
    s->offline_share = offline_share;
    pthread_mutex_unlock(&s->mu);
}

static double shares_weight(const struct shares *s, int t)
{
    return s->share[t] > SHARES_MIN_WEIGHT ? s->share[t] : SHARES_MIN_WEIGHT;
}

static double shares_limit(const struct shares *s, int t)
{
    double l = s->tc ? s->tc->t[t].limit : 1.0;
    return l > 0 ? l : 1.0;
}

static bool shares_lends(const struct shares *s, int t)
{
    return !s->tc || s->tc->t[t].lend;
}

/* The moving sum decayed to now. */
static double shares_used(struct shares_tenant *x, int64_t now)
{
    if (x->used_at && now > x->used_at)
        x->used *= exp(-(double)(now - x->used_at) / (double)SHARES_TAU_NS);
    x->used_at = now;
    return x->used;
}

/* Its fraction of the device over the last ~second. */
static double shares_fraction(struct shares *s, int t, int64_t now)
{
    return shares_used(&s->t[t], now) / ((double)SHARES_TAU_NS * s->slots);
}

static bool shares_idle(const struct shares *s, int t, int64_t now)
{
    return !s->t[t].active_at || now - s->t[t].active_at >= SHARES_IDLE_NS;
}

static bool shares_off_idle(const struct shares *s, int t, int64_t now)
{
    return !s->t[t].off_active_at || now - s->t[t].off_active_at >= SHARES_IDLE_NS;
}

int shares_rank(struct shares *s, int64_t now_ns, const bool *has, int *order, int64_t *retry_ns,
                int64_t *held_ns, bool *off_held)
{
    pthread_mutex_lock(&s->mu);
    double reserved = 0, total = 0, frac[TENANTS_MAX];
    bool back[TENANTS_MAX], off_back[TENANTS_MAX];
    for (int t = 0; t < s->n; t++) {
        back[t] = has[t] && shares_idle(s, t, now_ns);
        /* Job lines of a tenant idle in both ways: under a limit they start
         * at its rate too (they ran ~0.36 s on the whole device before the
         * moving sum reached a limit of 0.3). A reservation does not bind
         * them, so the limit alone is their bound. */
        off_back[t] = off_held && off_held[t] && !has[t] && shares_idle(s, t, now_ns) &&
                      shares_off_idle(s, t, now_ns) && shares_limit(s, t) < 1.0;
        if (off_held && off_held[t])
            s->t[t].off_active_at = now_ns;
        if (!has[t] && !shares_lends(s, t) && shares_idle(s, t, now_ns))
            reserved += s->share[t];
    }
    for (int t = 0; t < s->n; t++) {
        if (off_back[t]) {
            double at = shares_limit(s, t) * (double)SHARES_TAU_NS * s->slots;
            if (shares_used(&s->t[t], now_ns) < at)
                s->t[t].used = at;
        }
        if (back[t]) {
            struct shares_tenant *x = &s->t[t];
            if (x->vtime < s->vclock)
                x->vtime = s->vclock;   /* back from idleness: no banked credit */
            /* Nor a free run under its bounds: the moving sum of a tenant
             * that was away reads 0, and would let it hold the whole device
             * until it caught up (~0.4 s past a limit of 0.4). It counts as
             * having run at its bound (limit, or share under a reservation)
             * so far, and keeps to that rate from its first batch. */
            double bound = shares_limit(s, t) < 1.0 ? shares_limit(s, t) : 1.0;
            if (reserved > 0 && s->share[t] < bound)
                bound = s->share[t];
            double at = bound * (double)SHARES_TAU_NS * s->slots;
            if (bound < 1.0 && shares_used(x, now_ns) < at)
                x->used = at;
        }
        frac[t] = shares_fraction(s, t, now_ns);
        total += frac[t];
        if (has[t])
            s->t[t].active_at = now_ns;
    }
    int k = 0;
    bool held = false, held_t[TENANTS_MAX] = {false};
    double least = -1;
    /* A limit is the most a tenant may hold, its job's lines included: a
     * tenant capped at 0.4 ran its job on the whole idle device. */
    for (int t = 0; off_held && t < TENANTS_MAX; t++) {
        off_held[t] = t < s->n && shares_limit(s, t) < 1.0 && frac[t] >= shares_limit(s, t);
        held = held || off_held[t];
    }
    for (int t = 0; t < s->n; t++) {
        if (!has[t])
            continue;
        if (s->t[t].vtime > s->vclock + SHARES_LAG_NS)
            s->t[t].vtime = s->vclock + SHARES_LAG_NS;
        /* Over its limit (a limit of 1 is the whole device and holds
         * nothing: the moving sum, charged a batch's whole time at its end,
         * reads up to half a batch over 1 on a device kept busy); or
         * borrowing (past its share) into time that is reserved for an
         * idle tenant that does not lend. */
        double limit = shares_limit(s, t);
        bool over = limit < 1.0 && frac[t] >= limit;
        if (over || (frac[t] >= s->share[t] && total >= 1.0 - reserved && reserved > 0)) {
            held = true;
            /* Its use decays as exp(-t/tau) while it runs nothing: under
             * its bound after tau ln(use/bound). Borrowing into reserved
             * time ends when the reserving tenant's work does, which is not
             * known: tau. */
            double bound = over ? limit : s->share[t];
            if (held_ns && t < TENANTS_MAX)
                held_ns[t] = bound > 0 && frac[t] > bound
                                 ? (int64_t)((double)SHARES_TAU_NS * log(frac[t] / bound))
                                 : SHARES_TAU_NS;
            held_t[t] = true;
            continue;
        }
        /* The clock is the least virtual time of the tenants that may be
         * served: one held back (its limit) kept it down while the others
         * ran on, and a tenant arriving then started that far behind
         * them, which starved them for seconds. */
        if (least < 0 || s->t[t].vtime < least)
            least = s->t[t].vtime;
        /* Insertion by virtual time; ties to the larger share, then index. */
        int i = k++;
        while (i > 0) {
            int u = order[i - 1];
            bool before = s->t[t].vtime < s->t[u].vtime ||
                          (s->t[t].vtime == s->t[u].vtime && s->share[t] > s->share[u]);
            if (!before)
                break;
            order[i] = u;
            i--;
        }
        order[i] = t;
    }
    if (least > s->vclock)
        s->vclock = least;
    /* Nor does a held tenant bank credit while it waits: it is held by its
     * own bound, not by the others, and comes back at the clock, as from
     * idleness. */
    for (int t = 0; t < s->n; t++)
        if (held_t[t] && s->t[t].vtime < s->vclock)
            s->t[t].vtime = s->vclock;
    *retry_ns = held ? SHARES_TAU_NS / 100 : 0;
    pthread_mutex_unlock(&s->mu);
    return k;
}

/* The job lines' bucket grown to now, within its cap, minus `ran` ns. Its
 * debt is bounded at a charge only (the cap and the batch charged): a
 * batch longer than the cap was mostly forgiven when the debt was held to
 * the cap, and job lines of 100-ms batches took half the device under an
 * offline_share of 0.05. A night of harvesting idle time still leaves at
 * most one batch and the cap of debt. The cap is a batch's worth at least:
 * the bucket is looked at between batches, and what it earned during one
 * past the cap was lost (0.165 of the device under a share of 0.2). */
static double shares_offline_bucket(struct shares *s, int64_t now, double ran)
{
    int64_t grain = s->last_batch_ns > SHARES_OFF_CAP_NS ? s->last_batch_ns : SHARES_OFF_CAP_NS;
    double rate = s->offline_share * s->slots, cap = rate * (double)grain;
    if (s->off_at && now > s->off_at)
        s->off_owed += rate * (double)(now - s->off_at);
    s->off_at = now;
    /* What the batch earned while it ran is set against it before the cap
     * is applied: capped first, a job batch lost what was owed when it
     * began (every 6th batch where the 5th was due). */
    s->off_owed -= ran;
    if (s->off_owed > cap)
        s->off_owed = cap;
    if (ran > 0 && s->off_owed < -(cap + ran))
        s->off_owed = -(cap + ran);
    return s->off_owed;
}

bool shares_offline_owed(struct shares *s, int64_t now_ns)
{
    pthread_mutex_lock(&s->mu);
    bool owed = s->offline_share > 0 && shares_offline_bucket(s, now_ns, 0) > 0;
    pthread_mutex_unlock(&s->mu);
    return owed;
}

/* ns of device time to tenant t's work of one class (under s->mu). */
static void shares_charge_one(struct shares *s, int64_t now_ns, int t, bool offline, int64_t ns,
                              double *off_ns)
{
    t = t >= 0 && t < s->n ? t : 0;
    struct shares_tenant *x = &s->t[t];
    /* Borrowed: the part of ns past what its share has given it and it
     * has not used (SPEC.md: "the part of it above its share"), so that
     * over a stretch a tenant at 0.75 of the device with a share of 0.6
     * borrows 0.15 of it. (It counted a batch whole once the tenant was
     * above its share: all of the 0.75.) */
    double rate = s->share[t] * s->slots, cap = rate * (double)SHARES_TAU_NS;
    if (x->entitled_at && now_ns > x->entitled_at)
        x->entitled += rate * (double)(now_ns - x->entitled_at);
    else if (!x->entitled_at)
        x->entitled = cap;   /* a newcomer starts with a window's worth */
    x->entitled = x->entitled < cap ? x->entitled : cap;
    x->entitled_at = now_ns;
    double own = x->entitled < (double)ns ? x->entitled : (double)ns;
    x->entitled -= own;
    x->borrowed_ns += ns - (int64_t)own;
    x->used += (double)ns;
    x->vtime += (double)ns / shares_weight(s, t);
    x->busy_ns[offline ? 1 : 0] += ns;
    if (offline) {
        *off_ns += (double)ns;
        x->off_active_at = now_ns;
    } else {
        x->active_at = now_ns;
    }
    /* A job's lines are not the tenant's online work: counted as its
     * activity, a job of a tenant that does not lend lifted its own
     * reservation (the others borrowed 0.97 of the device past a
     * reserved 0.6, and its next request waited behind them). */
}

void shares_charge(struct shares *s, int64_t now_ns, const struct batch *b, int64_t exec_ns)
{
    uint32_t part[2][WORK_TENANTS_MAX];
    batch_parts(b, part);
    shares_charge_parts(s, now_ns, part, exec_ns);
}

void shares_charge_parts(struct shares *s, int64_t now_ns,
                         const uint32_t part[2][WORK_TENANTS_MAX], int64_t exec_ns)
{
    if (exec_ns <= 0)
        return;
    pthread_mutex_lock(&s->mu);
    double off_ns = 0;
    bool any = false;
    for (int c = 0; c < 2; c++)
        for (int t = 0; t < WORK_TENANTS_MAX; t++)
            if (part[c][t] > 0) {
                shares_charge_one(s, now_ns, t, c == 1,
                                  (int64_t)((__int128)exec_ns * part[c][t] / BATCH_PARTS_SCALE),
                                  &off_ns);
                any = true;
            }
    if (any) {
        s->last_batch_ns = exec_ns;
        shares_offline_bucket(s, now_ns, off_ns);
    }
    pthread_mutex_unlock(&s->mu);
}

void shares_tenant_stats(struct shares *s, int tenant, struct shares_tenant_stats *out)
{
    memset(out, 0, sizeof *out);
    if (tenant < 0 || tenant >= s->n)
        return;
    pthread_mutex_lock(&s->mu);
    struct shares_tenant *x = &s->t[tenant];
    out->share = s->share[tenant];
    out->busy_s[0] = (double)x->busy_ns[0] / 1e9;
    out->busy_s[1] = (double)x->busy_ns[1] / 1e9;
    out->borrowed_s = (double)x->borrowed_ns / 1e9;
    out->fraction = shares_fraction(s, tenant, now_ns());
    pthread_mutex_unlock(&s->mu);
}
