/* devsched.c - see devsched.h. */
#include "serving/devsched.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backends/model.h"
#include "common/clock.h"
#include "serving/shares.h"

/* ---- the decision ---- */

/* The member with the best tenant rank, then the least virtual time, among
 * those with batches of class c waiting; -1 when none waits. Offline
 * batches are not ranked by tenant. */
static int devsched_pick_fair(const struct devsched_view *v, int n, int c)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (v[i].waiting[c] <= 0)
            continue;
        int ri = c == DEVSCHED_ONLINE ? v[i].tenant_rank : 0;
        int rb = best >= 0 && c == DEVSCHED_ONLINE ? v[best].tenant_rank : 0;
        if (best < 0 || ri < rb ||
            (ri == rb && (v[i].vtime < v[best].vtime ||
                          (v[i].vtime == v[best].vtime && v[i].weight > v[best].weight))))
            best = i;
    }
    return best;
}

/* The online waiter whose start-by falls before `until`, earliest first,
 * among those that may go before `fair` (the weights' and tenants'
 * choice); -1 when none is that urgent.
 *
 * Urgency reorders within what the weights and shares allow, it does not
 * replace them: a member whose batches are always urgent (deadline traffic
 * handed over near its start-by, as the batcher does) took every slot from
 * a member of 1000 times its weight, and a tenant borrowing or held at its
 * limit went before one within its share. So an urgent batch goes first
 * only when its tenant is ranked no worse than fair's, and its member is
 * no more than DEVSCHED_URGENT_LEAD of virtual time ahead of fair's: past
 * that, it waits for the weights, as a batch without a deadline does. */
static int devsched_pick_urgent(const struct devsched_view *v, int n, int64_t until, int fair)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        if (v[i].waiting[DEVSCHED_ONLINE] <= 0 || !v[i].start_by || v[i].start_by > until)
            continue;
        if (i != fair && (v[i].tenant_rank > v[fair].tenant_rank ||
                          v[i].vtime > v[fair].vtime + DEVSCHED_URGENT_LEAD))
            continue;
        if (best < 0 || v[i].start_by < v[best].start_by ||
            (v[i].start_by == v[best].start_by && v[i].weight > v[best].weight))
            best = i;
    }
    return best;
}

int devsched_pick(const struct devsched_view *v, int n, int64_t now_ns, int64_t horizon_ns,
                  enum devsched_class *cls)
{
    int fair = devsched_pick_fair(v, n, DEVSCHED_ONLINE);
    if (fair >= 0) {
        /* Given to `fair`, the slot is next free after its batch, or
         * sooner where a running batch frees another. */
        int64_t h = v[fair].est_ns;
        if (horizon_ns > 0 && (h <= 0 || horizon_ns < h))
            h = horizon_ns;
        int urgent = devsched_pick_urgent(v, n, now_ns + (h > 0 ? h : 0), fair);
        *cls = DEVSCHED_ONLINE;
        return urgent >= 0 ? urgent : fair;
    }
    int off = devsched_pick_fair(v, n, DEVSCHED_OFFLINE);
    if (off >= 0)
        *cls = DEVSCHED_OFFLINE;
    return off;
}

/* ---- the core ---- */

/* Past this the virtual times are shifted down (a weight-1 member reaches
 * it after ~26 days of device time). */
#define DEVSCHED_VT_REBASE ((int64_t)1 << 61)
/* One charge at most (~52 days): keeps exec x DEVSCHED_VT_SCALE in range. */
#define DEVSCHED_EXEC_MAX ((int64_t)1 << 52)

void devsched_core_init(struct devsched_core *c)
{
    memset(c, 0, sizeof *c);
}

static bool devsched_core_active(const struct devsched_core *c, int i)
{
    return c->running[i] > 0 || c->m[i].waiting[DEVSCHED_ONLINE] > 0 ||
           c->m[i].waiting[DEVSCHED_OFFLINE] > 0 || c->granted[i][DEVSCHED_ONLINE] > 0 ||
           c->granted[i][DEVSCHED_OFFLINE] > 0;
}

/* The clock follows the least virtual time of the active members and never
 * goes back, so a member coming back from idleness starts level with those
 * that kept the device busy meanwhile. */
static void devsched_core_tick(struct devsched_core *c)
{
    int64_t least = -1;
    for (int i = 0; i < c->n; i++)
        if (devsched_core_active(c, i) && (least < 0 || c->m[i].vtime < least))
            least = c->m[i].vtime;
    if (least > c->vclock)
        c->vclock = least;
    if (c->vclock < DEVSCHED_VT_REBASE)
        return;
    /* Only differences matter; every active member is at or above the clock. */
    int64_t base = c->vclock;
    for (int i = 0; i < c->n; i++)
        c->m[i].vtime = c->m[i].vtime > base ? c->m[i].vtime - base : 0;
    c->vclock = 0;
}

int devsched_core_join(struct devsched_core *c, int weight, int instances)
{
    int i = 0;
    while (i < c->n && !c->gone[i])
        i++;
    if (i == c->n) {
        if (c->n >= DEVSCHED_MAX_MEMBERS)
            return -1;
        c->n++;
    }
    c->gone[i] = false;
    c->instances[i] = instances;
    memset(&c->m[i], 0, sizeof c->m[i]);
    c->m[i].weight = weight < 1 ? 1 : weight > DEVSCHED_WEIGHT_MAX ? DEVSCHED_WEIGHT_MAX : weight;
    c->m[i].vtime = c->vclock;
    c->running[i] = 0;
    c->granted[i][0] = c->granted[i][1] = 0;
    c->nwait[i] = 0;
    c->m[i].est_ns = 0;
    c->ahead_ns[i] = 0;
    if (instances > c->slots)
        c->slots = instances;
    return i;
}

void devsched_core_leave(struct devsched_core *c, int i)
{
    if (i < 0 || i >= c->n || c->gone[i])
        return;
    c->gone[i] = true;
    c->nwait[i] = 0;
    memset(&c->m[i], 0, sizeof c->m[i]);
    c->m[i].weight = 1;
    /* What the others need; those running fit it (the leaver ran nothing). */
    int slots = 0;
    for (int k = 0; k < c->n; k++)
        if (!c->gone[k] && c->instances[k] > slots)
            slots = c->instances[k];
    c->slots = slots;
}

bool devsched_core_others_active(const struct devsched_core *c, int i)
{
    for (int k = 0; k < c->n; k++)
        if (k != i && devsched_core_active(c, k))
            return true;
    return false;
}

/* The member's earliest start-by among its waiting online batches. */
static void devsched_core_start_by(struct devsched_core *c, int i)
{
    int64_t by = 0;
    for (int k = 0; k < c->nwait[i]; k++)
        if (c->wait[i][k].start_by > 0 && (!by || c->wait[i][k].start_by < by))
            by = c->wait[i][k].start_by;
    c->m[i].start_by = by;
}

bool devsched_core_acquire(struct devsched_core *c, int i, const struct devsched_ask *a)
{
    if (!devsched_core_active(c, i) && c->m[i].vtime < c->vclock)
        c->m[i].vtime = c->vclock;   /* idleness banks no credit */
    c->m[i].waiting[a->cls]++;
    if (a->cls == DEVSCHED_ONLINE && c->nwait[i] < DEVSCHED_MAX_WAITERS) {
        c->wait[i][c->nwait[i]++] = *a;
        devsched_core_start_by(c, i);
    }
    devsched_core_tick(c);
    return c->used < c->slots;
}

void devsched_core_tenants_waiting(const struct devsched_core *c, bool *has)
{
    memset(has, 0, WORK_TENANTS_MAX * sizeof *has);
    for (int i = 0; i < c->n; i++)
        for (int k = 0; k < c->nwait[i]; k++)
            if (c->wait[i][k].tenant >= 0 && c->wait[i][k].tenant < WORK_TENANTS_MAX)
                has[c->wait[i][k].tenant] = true;
}

/* Each member's best tenant rank among its waiting online batches. */
static void devsched_core_rank(struct devsched_core *c, const int *rank_of)
{
    for (int i = 0; i < c->n; i++) {
        int best = 0;
        if (rank_of) {
            best = WORK_TENANTS_MAX;
            for (int k = 0; k < c->nwait[i]; k++) {
                int t = c->wait[i][k].tenant;
                int r = t >= 0 && t < WORK_TENANTS_MAX ? rank_of[t] : WORK_TENANTS_MAX;
                if (r < best)
                    best = r;
            }
        }
        c->m[i].tenant_rank = best;
    }
}

static void devsched_core_charge(struct devsched_core *c, int i, int64_t ns)
{
    c->m[i].vtime += ns * DEVSCHED_VT_SCALE / c->m[i].weight;
}

void devsched_core_release(struct devsched_core *c, int i, int64_t exec_ns)
{
    if (exec_ns < 0)
        exec_ns = 0;
    if (exec_ns > DEVSCHED_EXEC_MAX)
        exec_ns = DEVSCHED_EXEC_MAX;
    /* Its batches' estimates are alike: this one's is their mean. */
    int64_t ahead = 0;
    if (c->running[i] > 0) {
        ahead = c->ahead_ns[i] / c->running[i];
        c->ahead_ns[i] -= ahead;
        c->running[i]--;
        c->used--;
    }
    devsched_core_charge(c, i, exec_ns - ahead);
    c->m[i].est_ns = c->m[i].est_ns ? c->m[i].est_ns + (exec_ns - c->m[i].est_ns) / 8 : exec_ns;
    devsched_core_tick(c);
}

/* When a slot is expected to free next: the shortest usual batch time of
 * the members running now (0 when none runs: a free slot is there now). */
static int64_t devsched_core_horizon(const struct devsched_core *c)
{
    int64_t h = 0;
    for (int i = 0; i < c->n; i++)
        if (c->running[i] > 0 && c->m[i].est_ns > 0 && (!h || c->m[i].est_ns < h))
            h = c->m[i].est_ns;
    return h;
}

void devsched_core_grant(struct devsched_core *c, int64_t now_ns, const int *rank_of,
                         void (*grant)(void *arg, int member, enum devsched_class cls), void *arg)
{
    if (c->used < c->slots)
        devsched_core_rank(c, rank_of);
    while (c->used < c->slots) {
        enum devsched_class cls = DEVSCHED_OFFLINE;
        int i = c->offline_owed ? devsched_pick_fair(c->m, c->n, DEVSCHED_OFFLINE) : -1;
        if (i < 0)
            i = devsched_pick(c->m, c->n, now_ns, devsched_core_horizon(c), &cls);
        if (i < 0)
            return;
        c->m[i].waiting[cls]--;
        c->granted[i][cls]++;
        c->used++;
        c->ahead_ns[i] += c->m[i].est_ns;
        devsched_core_charge(c, i, c->m[i].est_ns);
        if (grant)
            grant(arg, i, cls);
    }
}

/* A waiting batch of member i stops waiting: its record goes. */
static void devsched_core_forget(struct devsched_core *c, int i, const struct devsched_ask *a)
{
    if (a->cls != DEVSCHED_ONLINE)
        return;
    for (int k = 0; k < c->nwait[i]; k++)
        if (c->wait[i][k].start_by == a->start_by && c->wait[i][k].tenant == a->tenant) {
            c->wait[i][k] = c->wait[i][--c->nwait[i]];
            break;
        }
    devsched_core_start_by(c, i);
}

bool devsched_core_take(struct devsched_core *c, int i, const struct devsched_ask *a)
{
    if (c->granted[i][a->cls] <= 0)
        return false;
    c->granted[i][a->cls]--;
    c->running[i]++;
    devsched_core_forget(c, i, a);
    return true;
}

/* ---- a device, for threads ---- */

static void devsched_wake(void *arg, int member, enum devsched_class cls);

struct devsched {
    char name[48];
    pthread_mutex_t mu;
    struct devsched_core core;        /* under mu */
    bool closed;
    /* Per member: its waiters of each class sleep on their own variable,
     * so a grant wakes only a batch that may take it. */
    pthread_cond_t cv[DEVSCHED_MAX_MEMBERS][DEVSCHED_NCLASSES];
    char model[DEVSCHED_MAX_MEMBERS][MODEL_NAME_MAX];
    int64_t wait_ns[DEVSCHED_MAX_MEMBERS];
    int64_t granted_ns[DEVSCHED_MAX_MEMBERS];
    int sleepers[DEVSCHED_MAX_MEMBERS][DEVSCHED_NCLASSES];   /* waiters inside cond_wait */
    struct shares *shares;            /* the device's tenant shares, or NULL */
};

void devsched_set_shares(struct devsched *d, struct shares *sh)
{
    pthread_mutex_lock(&d->mu);
    d->shares = sh;
    pthread_mutex_unlock(&d->mu);
}

/* Under mu: the slots go as the rule says, tenants ranked by their shares. */
static void devsched_grant_locked(struct devsched *d)
{
    int64_t now = now_ns();
    int rank_of[WORK_TENANTS_MAX], *ranks = NULL;
    if (d->shares && d->core.used < d->core.slots) {
        bool has[WORK_TENANTS_MAX];
        int order[WORK_TENANTS_MAX];
        int64_t retry;
        devsched_core_tenants_waiting(&d->core, has);
        int n = shares_rank(d->shares, now, has, order, &retry, NULL, NULL);
        for (int t = 0; t < WORK_TENANTS_MAX; t++)
            rank_of[t] = WORK_TENANTS_MAX - 1;   /* held back: last, never refused a slot */
        for (int r = 0; r < n; r++)
            rank_of[order[r]] = r;
        ranks = rank_of;
    }
    d->core.offline_owed = d->shares && d->core.used < d->core.slots &&
                           shares_offline_owed(d->shares, now);
    devsched_core_grant(&d->core, now, ranks, devsched_wake, d);
}

struct devsched *devsched_new(const char *name, struct error *err)
{
    struct devsched *d = calloc(1, sizeof *d);
    if (!d) {
        error_set(err, BG_ENOMEM, "out of memory for the scheduler of device %s", name);
        return NULL;
    }
    snprintf(d->name, sizeof d->name, "%s", name);
    pthread_mutex_init(&d->mu, NULL);
    devsched_core_init(&d->core);
    return d;
}

void devsched_free(struct devsched *d)
{
    if (!d)
        return;
    for (int i = 0; i < d->core.n; i++)
        for (int c = 0; c < DEVSCHED_NCLASSES; c++)
            pthread_cond_destroy(&d->cv[i][c]);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

const char *devsched_name(const struct devsched *d) { return d->name; }

void devsched_leave(struct devsched *d, int member)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    if (member >= 0 && member < d->core.n && !devsched_core_active(&d->core, member)) {
        devsched_core_leave(&d->core, member);
        d->model[member][0] = '\0';
        if (d->shares)
            shares_set_slots(d->shares, d->core.slots);
    }
    pthread_mutex_unlock(&d->mu);
}

int devsched_join(struct devsched *d, const char *model, int weight, int instances,
                  struct error *err)
{
    pthread_mutex_lock(&d->mu);
    int before = d->core.n;
    int i = devsched_core_join(&d->core, weight, instances);
    if (i >= 0) {
        if (i >= before)   /* a new index; a departed member's keeps its variables */
            for (int c = 0; c < DEVSCHED_NCLASSES; c++)
                pthread_cond_init(&d->cv[i][c], NULL);
        snprintf(d->model[i], sizeof d->model[i], "%s", model);
        d->wait_ns[i] = d->granted_ns[i] = 0;
        if (d->shares)
            shares_set_slots(d->shares, d->core.slots);
    }
    pthread_mutex_unlock(&d->mu);
    if (i < 0)
        return error_set(err, BG_ECONFIG, "model %s: device %s already has %d models, the most "
                         "one device is shared by; place the model on another device "
                         "(instances.devices)", model, d->name, DEVSCHED_MAX_MEMBERS);
    return i;
}

static void devsched_wake(void *arg, int member, enum devsched_class cls)
{
    struct devsched *d = arg;
    pthread_cond_signal(&d->cv[member][cls]);
}

/* Under mu, with the batch counted as waiting: hand out what is free, then
 * sleep until a slot is handed to this member and class.
 *
 * A grant goes to a member for its most urgent waiting batch, but whichever
 * of its threads takes it first runs. A worker asking again as its batch
 * ends (`asking_again`: devsched_release_acquire) holds the lock across the
 * grant, and took the slot a sibling's urgent batch had earned with a
 * batch of no deadline, the sibling waiting on (past its deadline). When
 * a sibling sleeps and this batch is not the member's most urgent, the
 * grant is left to the sibling, woken, and this batch waits its turn. */
static void devsched_wait_locked(struct devsched *d, int member, const struct devsched_ask *a,
                                 bool asking_again)
{
    devsched_grant_locked(d);
    const struct devsched_view *m = &d->core.m[member];
    bool defer = asking_again && a->cls == DEVSCHED_ONLINE &&
                 d->sleepers[member][a->cls] > 0 && m->start_by &&
                 (!a->start_by || a->start_by > m->start_by);
    if (defer)
        pthread_cond_signal(&d->cv[member][a->cls]);
    else if (devsched_core_take(&d->core, member, a))
        return;
    int64_t t0 = now_ns();
    while (defer || !devsched_core_take(&d->core, member, a)) {
        if (d->closed) {
            /* Run without a slot: counted as holding one, so the release
             * that follows balances. */
            d->core.m[member].waiting[a->cls]--;
            devsched_core_forget(&d->core, member, a);
            d->core.running[member]++;
            d->core.used++;
            break;
        }
        defer = false;   /* once: woken again, it takes what is there */
        d->sleepers[member][a->cls]++;
        pthread_cond_wait(&d->cv[member][a->cls], &d->mu);
        d->sleepers[member][a->cls]--;
    }
    d->wait_ns[member] += now_ns() - t0;
}

void devsched_acquire(struct devsched *d, int member, const struct devsched_ask *a)
{
    pthread_mutex_lock(&d->mu);
    if (d->closed) {
        d->core.running[member]++;
        d->core.used++;
    } else {
        devsched_core_acquire(&d->core, member, a);
        devsched_wait_locked(d, member, a, false);
    }
    pthread_mutex_unlock(&d->mu);
}

void devsched_release(struct devsched *d, int member, int64_t exec_ns)
{
    pthread_mutex_lock(&d->mu);
    devsched_core_release(&d->core, member, exec_ns);
    d->granted_ns[member] += exec_ns > 0 ? exec_ns : 0;
    devsched_grant_locked(d);
    pthread_mutex_unlock(&d->mu);
}

void devsched_release_acquire(struct devsched *d, int member, int64_t exec_ns,
                              const struct devsched_ask *next)
{
    pthread_mutex_lock(&d->mu);
    /* Waiting first, then released: the member never looks idle between. */
    if (!d->closed)
        devsched_core_acquire(&d->core, member, next);
    devsched_core_release(&d->core, member, exec_ns);
    d->granted_ns[member] += exec_ns > 0 ? exec_ns : 0;
    if (d->closed) {
        d->core.running[member]++;
        d->core.used++;
    } else {
        devsched_wait_locked(d, member, next, true);
    }
    pthread_mutex_unlock(&d->mu);
}

bool devsched_others_active(struct devsched *d, int member)
{
    pthread_mutex_lock(&d->mu);
    bool busy = devsched_core_others_active(&d->core, member);
    pthread_mutex_unlock(&d->mu);
    return busy;
}

void devsched_close(struct devsched *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->closed = true;
    for (int i = 0; i < d->core.n; i++)
        for (int c = 0; c < DEVSCHED_NCLASSES; c++)
            pthread_cond_broadcast(&d->cv[i][c]);
    pthread_mutex_unlock(&d->mu);
}

void devsched_member_stats(struct devsched *d, int member, struct devsched_member_stats *out)
{
    pthread_mutex_lock(&d->mu);
    out->weight = d->core.m[member].weight;
    out->slots = d->core.slots;
    out->wait_s = (double)d->wait_ns[member] / 1e9;
    out->granted_s = (double)d->granted_ns[member] / 1e9;
    pthread_mutex_unlock(&d->mu);
}
