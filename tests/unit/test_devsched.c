/* test_devsched.c - the device scheduler: the grant decision (a pure
 * function) by its rules, the core's bookkeeping (no banked credit, work
 * conservation), a seeded simulation over thousands of random sequences
 * that the long-run split of device time follows the weights, and the
 * threaded device under real threads (for TSan). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "serving/devsched.h"
#include "serving/shares.h"
#include "serving/tenant.h"

#define MS 1000000LL
/* A batch asking for a slot: class and start-by, the default tenant. */
#define ASK(cls, by) (&(struct devsched_ask){(cls), (by), 0})

/* ---- the decision ---- */

static void test_pick_nobody_waits(void **state)
{
    (void)state;
    struct devsched_view v[2] = {{.vtime = 0, .weight = 1}, {.vtime = 5, .weight = 1}};
    enum devsched_class cls;
    assert_int_equal(devsched_pick(v, 2, 0, 0, &cls), -1);
    assert_int_equal(devsched_pick(v, 0, 0, 0, &cls), -1);
}

static void test_pick_online_before_offline(void **state)
{
    (void)state;
    /* Member 0 is far behind but only has offline work: member 1's online
     * batch goes first all the same. */
    struct devsched_view v[2] = {
        {.vtime = 0, .weight = 1000, .waiting = {0, 3}},
        {.vtime = 1000 * MS, .weight = 1, .waiting = {1, 0}},
    };
    enum devsched_class cls;
    assert_int_equal(devsched_pick(v, 2, 0, 0, &cls), 1);
    assert_int_equal(cls, DEVSCHED_ONLINE);
    v[1].waiting[DEVSCHED_ONLINE] = 0;
    assert_int_equal(devsched_pick(v, 2, 0, 0, &cls), 0);
    assert_int_equal(cls, DEVSCHED_OFFLINE);
    /* Among offline work the least virtual time wins too. */
    v[1].waiting[DEVSCHED_OFFLINE] = 1;
    v[1].vtime = 0;
    v[0].vtime = 1;
    assert_int_equal(devsched_pick(v, 2, 0, 0, &cls), 1);
}

static void test_pick_least_virtual_time_then_weight(void **state)
{
    (void)state;
    struct devsched_view v[3] = {
        {.vtime = 30, .weight = 1, .waiting = {1, 0}},
        {.vtime = 20, .weight = 1, .waiting = {1, 0}},
        {.vtime = 20, .weight = 2, .waiting = {1, 0}},
    };
    enum devsched_class cls;
    assert_int_equal(devsched_pick(v, 3, 0, 0, &cls), 2);   /* tie at 20: the heavier */
    v[2].weight = 1;
    assert_int_equal(devsched_pick(v, 3, 0, 0, &cls), 1);   /* tie, same weight: lower index */
    v[1].waiting[DEVSCHED_ONLINE] = 0;
    v[2].waiting[DEVSCHED_ONLINE] = 0;
    assert_int_equal(devsched_pick(v, 3, 0, 0, &cls), 0);   /* the only one waiting */
}

/* ---- the core ---- */

/* A batch that must start before the next slot frees goes first, whatever
 * the weights say; one that can wait does not; the earliest start-by wins
 * among the urgent; offline batches are never urgent. */
static void test_pick_urgent_deadline_first(void **state)
{
    (void)state;
    enum devsched_class cls;
    int64_t now = 100 * MS, horizon = 5 * MS;
    struct devsched_view v[3] = {
        {.vtime = 0, .weight = 1, .waiting = {1, 0}},
        {.vtime = 50, .weight = 1, .waiting = {1, 0}, .start_by = now + 4 * MS},
        {.vtime = 60, .weight = 1, .waiting = {1, 0}, .start_by = now + 2 * MS},
    };
    assert_int_equal(devsched_pick(v, 3, now, horizon, &cls), 2);   /* earliest of the urgent */
    assert_int_equal(cls, DEVSCHED_ONLINE);
    v[2].waiting[0] = 0;
    assert_int_equal(devsched_pick(v, 3, now, horizon, &cls), 1);
    /* Beyond the horizon: it can wait for the next slot; weights decide. */
    v[1].start_by = now + 6 * MS;
    assert_int_equal(devsched_pick(v, 3, now, horizon, &cls), 0);
    /* Already late counts as urgent too (start-by in the past). */
    v[1].start_by = 1;
    assert_int_equal(devsched_pick(v, 3, now, horizon, &cls), 1);
    /* A start-by of a member with only offline batches waiting is no one's. */
    struct devsched_view off[2] = {
        {.vtime = 0, .weight = 1, .waiting = {0, 1}},
        {.vtime = 9, .weight = 1, .waiting = {0, 1}, .start_by = now},
    };
    assert_int_equal(devsched_pick(off, 2, now, horizon, &cls), 0);
    assert_int_equal(cls, DEVSCHED_OFFLINE);
}

/* Urgency reorders within what the weights and tenants allow: an urgent
 * batch of a worse-ranked tenant (borrowing, or held at its limit) does
 * not go before the best-ranked one, nor does one of a member too far
 * ahead of the weights' choice in virtual time. */
static void test_pick_urgent_within_weights_and_tenants(void **state)
{
    (void)state;
    enum devsched_class cls;
    int64_t now = 100 * MS, horizon = 5 * MS;
    struct devsched_view v[2] = {
        {.vtime = 0, .weight = 1, .waiting = {1, 0}, .tenant_rank = 0},
        {.vtime = 0, .weight = 1, .waiting = {1, 0}, .start_by = now, .tenant_rank = 1},
    };
    assert_int_equal(devsched_pick(v, 2, now, horizon, &cls), 0);   /* a worse tenant waits */
    v[1].tenant_rank = 0;
    v[1].vtime = 10;
    assert_int_equal(devsched_pick(v, 2, now, horizon, &cls), 1);   /* same rank: urgent first */
    v[1].vtime = DEVSCHED_URGENT_LEAD + 1;
    assert_int_equal(devsched_pick(v, 2, now, horizon, &cls), 0);   /* too far ahead */
    v[1].vtime = DEVSCHED_URGENT_LEAD;
    assert_int_equal(devsched_pick(v, 2, now, horizon, &cls), 1);
}

static int starve_granted = -1;
static void starve_grant(void *arg, int member, enum devsched_class c)
{
    (void)arg;
    (void)c;
    starve_granted = member;
}

/* A member whose every batch is urgent (deadline traffic handed over at its
 * start-by) and a member of 1000 times its weight, both always ready, one
 * slot: the urgent member took every one of 10000 slots and the heavy one
 * none. The split now follows the weights, after a lead of at most
 * DEVSCHED_URGENT_LEAD. Driven as devsched_release_acquire drives the core. */
static void test_core_urgent_member_cannot_starve_a_heavier_one(void **state)
{
    (void)state;
    struct devsched_core c;
    devsched_core_init(&c);
    int a = devsched_core_join(&c, 1, 1), b = devsched_core_join(&c, 1000, 1);
    int64_t now = 1000 * MS, exec = 10 * MS;
    struct devsched_ask ask[2];
    ask[a] = (struct devsched_ask){DEVSCHED_ONLINE, now, 0};
    ask[b] = (struct devsched_ask){DEVSCHED_ONLINE, 0, 0};
    devsched_core_acquire(&c, a, &ask[a]);
    devsched_core_acquire(&c, b, &ask[b]);
    int runs[2] = {0, 0};
    for (int n = 0; n < 10000; n++) {
        starve_granted = -1;
        devsched_core_grant(&c, now, NULL, starve_grant, NULL);
        int r = starve_granted;
        assert_true(r == a || r == b);
        assert_true(devsched_core_take(&c, r, &ask[r]));
        now += exec;
        runs[r]++;
        if (r == a)
            ask[a].start_by = now;   /* its next batch, handed over at its start-by */
        devsched_core_acquire(&c, r, &ask[r]);
        devsched_core_release(&c, r, exec);
    }
    /* The lead (25 batches of 10 ms at weight 1), then about one in 1000. */
    assert_true(runs[a] >= 25 && runs[a] <= 25 + 20);
    assert_true(runs[b] >= 10000 - 45);
}

static int owed_granted = -1;
static void owed_grant(void *arg, int member, enum devsched_class c)
{
    (void)arg;
    (void)c;
    owed_granted = member;
}

/* A time window's offline_share 0.5 on a device two models share: X runs a
 * job (its batches all job lines), Y has online work always ready. X got
 * none of 1000 slots, though the shares said job lines were owed at 999 of
 * them (TENANTS.md: offline_share "guarantees job lines that part of each
 * device"). Driven as devsched_grant_locked drives the core. */
static void test_core_offline_share_holds_across_models(void **state)
{
    (void)state;
    struct tenants_config tc = {0};
    tc.n = 2;
    strcpy(tc.t[0].name, "default");
    strcpy(tc.t[1].name, "t1");
    for (int t = 0; t < 2; t++) {
        tc.t[t].share = 0.5;
        tc.t[t].limit = 1;
        tc.t[t].lend = true;
    }
    struct error err = {0};
    struct shares *sh = shares_new("synthetic0", &tc, 1, &err);
    assert_non_null(sh);
    double share[2] = {0.25, 0.25};
    shares_set(sh, share, 0.5);
    struct devsched_core c;
    devsched_core_init(&c);
    int x = devsched_core_join(&c, 1000, 1), y = devsched_core_join(&c, 1, 1);
    int64_t now = 1000 * MS, exec = 10 * MS;
    struct devsched_ask ask[2];
    ask[x] = (struct devsched_ask){DEVSCHED_OFFLINE, 0, 1};
    ask[y] = (struct devsched_ask){DEVSCHED_ONLINE, 0, 0};
    devsched_core_acquire(&c, x, &ask[x]);
    devsched_core_acquire(&c, y, &ask[y]);
    int runs[2] = {0, 0};
    for (int n = 0; n < 1000; n++) {
        bool has[WORK_TENANTS_MAX];
        int order[WORK_TENANTS_MAX], rank_of[WORK_TENANTS_MAX];
        int64_t retry;
        devsched_core_tenants_waiting(&c, has);
        int k = shares_rank(sh, now, has, order, &retry, NULL, NULL);
        for (int t = 0; t < WORK_TENANTS_MAX; t++)
            rank_of[t] = WORK_TENANTS_MAX - 1;
        for (int r = 0; r < k; r++)
            rank_of[order[r]] = r;
        c.offline_owed = shares_offline_owed(sh, now);
        owed_granted = -1;
        devsched_core_grant(&c, now, rank_of, owed_grant, NULL);
        int r = owed_granted;
        assert_true(r == x || r == y);
        assert_true(devsched_core_take(&c, r, &ask[r]));
        now += exec;
        runs[r]++;
        struct infer_item it = {0};
        it.rows = 1;
        it.tenant = ask[r].tenant;
        it.offline = r == x;
        struct batch b = {.head = &it, .nitems = 1, .rows = 1};
        shares_charge(sh, now, &b, exec);
        devsched_core_acquire(&c, r, &ask[r]);
        devsched_core_release(&c, r, exec);
    }
    /* About half each (the share is measured over a short window). */
    assert_true(runs[x] >= 400 && runs[x] <= 600);
    shares_free(sh);
}

/* The core keeps each member's earliest waiting start-by: the urgent batch
 * takes the slot ahead of a lighter-used member, and once it has run the
 * member competes by weight again. */
static void test_core_urgent_batch_jumps_the_queue(void **state)
{
    (void)state;
    struct devsched_core c;
    devsched_core_init(&c);
    int a = devsched_core_join(&c, 1, 1), b = devsched_core_join(&c, 1, 1);
    /* b has used more device time than a. */
    assert_true(devsched_core_acquire(&c, b, ASK(DEVSCHED_ONLINE, 0)));
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, b, ASK(DEVSCHED_ONLINE, 0)));
    devsched_core_release(&c, b, 10 * MS);
    /* Slot held by a's batch; then both wait, b with a deadline due within
     * one batch time of a (its usual 10 ms). */
    devsched_core_acquire(&c, a, ASK(DEVSCHED_ONLINE, 0));
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    devsched_core_release(&c, a, 10 * MS);
    devsched_core_acquire(&c, a, ASK(DEVSCHED_ONLINE, 0));
    devsched_core_grant(&c, 20 * MS, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    assert_false(devsched_core_acquire(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    assert_false(devsched_core_acquire(&c, b, ASK(DEVSCHED_ONLINE, 25 * MS)));
    assert_int_equal(c.m[b].start_by, 25 * MS);
    devsched_core_release(&c, a, 10 * MS);
    devsched_core_grant(&c, 22 * MS, NULL, NULL, NULL);   /* slot free at 22 ms; b due at 25 */
    assert_true(devsched_core_take(&c, b, ASK(DEVSCHED_ONLINE, 25 * MS)));
    assert_false(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    assert_int_equal(c.m[b].start_by, 0);   /* forgotten once it runs */
    assert_true(devsched_core_others_active(&c, a));
    devsched_core_release(&c, b, 10 * MS);
    devsched_core_grant(&c, 32 * MS, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    /* a alone now: nobody else runs or waits. */
    assert_false(devsched_core_others_active(&c, a));
    assert_true(devsched_core_others_active(&c, b));
}

/* With tenants, the batch of the tenant most owed device time goes first,
 * whatever the models' virtual times: shares hold across the models of a
 * device. Ranks come from the device's shares (rank_of). */
static void test_core_tenant_rank_before_model_weight(void **state)
{
    (void)state;
    struct devsched_core c;
    devsched_core_init(&c);
    int a = devsched_core_join(&c, 1, 1), b = devsched_core_join(&c, 1, 1);
    /* a's batch runs; then a (tenant 1) and b (tenant 2) wait, b has used more. */
    c.m[b].vtime = 1000;
    assert_true(devsched_core_acquire(&c, a, &(struct devsched_ask){DEVSCHED_ONLINE, 0, 1}));
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, &(struct devsched_ask){DEVSCHED_ONLINE, 0, 1}));
    devsched_core_acquire(&c, a, &(struct devsched_ask){DEVSCHED_ONLINE, 0, 1});
    devsched_core_acquire(&c, b, &(struct devsched_ask){DEVSCHED_ONLINE, 0, 2});
    bool has[WORK_TENANTS_MAX];
    devsched_core_tenants_waiting(&c, has);
    assert_true(has[1] && has[2] && !has[0]);
    devsched_core_release(&c, a, 1 * MS);
    int rank_of[WORK_TENANTS_MAX] = {0};
    rank_of[2] = 0;   /* tenant 2 is owed most */
    rank_of[1] = 1;
    devsched_core_grant(&c, 0, rank_of, NULL, NULL);
    assert_true(devsched_core_take(&c, b, &(struct devsched_ask){DEVSCHED_ONLINE, 0, 2}));
    assert_false(devsched_core_take(&c, a, &(struct devsched_ask){DEVSCHED_ONLINE, 0, 1}));
    /* Without ranks the weights decide: a, the lighter used. */
    devsched_core_release(&c, b, 1 * MS);
    devsched_core_acquire(&c, b, &(struct devsched_ask){DEVSCHED_ONLINE, 0, 2});
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, &(struct devsched_ask){DEVSCHED_ONLINE, 0, 1}));
}

/* A member tracks the start-by of at most DEVSCHED_MAX_WAITERS waiting
 * batches; past it a batch waits as if it had no deadline, and taking it
 * leaves the records of the others intact. */
static void test_waiters_past_the_tracked_limit(void **state)
{
    (void)state;
    struct devsched_core c;
    devsched_core_init(&c);
    int a = devsched_core_join(&c, 1, 1);
    assert_true(devsched_core_acquire(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)));   /* the slot is held */
    for (int k = 0; k <= DEVSCHED_MAX_WAITERS; k++)
        devsched_core_acquire(&c, a, ASK(DEVSCHED_ONLINE, (int64_t)(1000 - k) * MS));
    assert_int_equal(c.nwait[a], DEVSCHED_MAX_WAITERS);
    assert_int_equal(c.m[a].waiting[DEVSCHED_ONLINE], DEVSCHED_MAX_WAITERS + 1);
    assert_int_equal(c.m[a].start_by, (int64_t)(1000 - DEVSCHED_MAX_WAITERS + 1) * MS);
    /* The untracked one is served: the tracked records stay as they were. */
    devsched_core_release(&c, a, 1 * MS);
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, (int64_t)(1000 - DEVSCHED_MAX_WAITERS) * MS)));
    assert_int_equal(c.nwait[a], DEVSCHED_MAX_WAITERS);
    /* A tracked one is served: its record goes, the earliest moves on. */
    devsched_core_release(&c, a, 1 * MS);
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, (int64_t)(1000 - DEVSCHED_MAX_WAITERS + 1) * MS)));
    assert_int_equal(c.nwait[a], DEVSCHED_MAX_WAITERS - 1);
    assert_int_equal(c.m[a].start_by, (int64_t)(1000 - DEVSCHED_MAX_WAITERS + 2) * MS);
}

static void test_weights_charge_device_time(void **state)
{
    (void)state;
    struct devsched_core c;
    devsched_core_init(&c);
    int a = devsched_core_join(&c, 2, 1), b = devsched_core_join(&c, 1, 1);
    assert_int_equal(c.slots, 1);
    /* The same device time costs the weight-2 member half the virtual time. */
    assert_true(devsched_core_acquire(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    devsched_core_release(&c, a, 10 * MS);
    devsched_core_acquire(&c, b, ASK(DEVSCHED_ONLINE, 0));
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, b, ASK(DEVSCHED_ONLINE, 0)));
    devsched_core_release(&c, b, 10 * MS);
    assert_int_equal(c.m[a].vtime * 2, c.m[b].vtime);
}

static void test_fast_path_and_work_conservation(void **state)
{
    (void)state;
    struct devsched_core c;
    devsched_core_init(&c);
    int a = devsched_core_join(&c, 1, 2), b = devsched_core_join(&c, 1, 1);
    assert_int_equal(c.slots, 2);
    /* Free slots and nobody waiting: granted at once. */
    assert_true(devsched_core_acquire(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    assert_true(devsched_core_acquire(&c, b, ASK(DEVSCHED_OFFLINE, 0)));
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_true(devsched_core_take(&c, b, ASK(DEVSCHED_OFFLINE, 0)));
    /* Full: a third batch waits. */
    assert_false(devsched_core_acquire(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_false(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    /* The slot that frees goes to it at once: never free while one waits. */
    devsched_core_release(&c, b, 1 * MS);
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_int_equal(c.used, c.slots);
    assert_true(devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)));
    assert_int_equal(c.running[a], 2);
    /* A slot frees with nobody waiting: it stays free. */
    devsched_core_release(&c, a, 1 * MS);
    devsched_core_grant(&c, 0, NULL, NULL, NULL);
    assert_int_equal(c.used, 1);
}

static int core_run_one(struct devsched_core *c, int i, int64_t exec_ns)
{
    devsched_core_acquire(c, i, ASK(DEVSCHED_ONLINE, 0));
    devsched_core_grant(c, 0, NULL, NULL, NULL);
    if (!devsched_core_take(c, i, ASK(DEVSCHED_ONLINE, 0)))
        return -1;
    devsched_core_release(c, i, exec_ns);
    return 0;
}

static void test_idle_member_banks_no_credit(void **state)
{
    (void)state;
    struct devsched_core c;
    devsched_core_init(&c);
    int a = devsched_core_join(&c, 1, 1), b = devsched_core_join(&c, 1, 1);
    /* A uses the device alone for a long time while B is idle... */
    for (int k = 0; k < 1000; k++)
        assert_int_equal(core_run_one(&c, a, 10 * MS), 0);
    /* ...then A goes idle before B comes back (the harder case: nobody is
     * active at the instant B returns). */
    assert_int_equal(core_run_one(&c, b, 10 * MS), 0);
    /* B came back level with A, not 10 s behind: from now on, both busy,
     * they alternate instead of B taking the device for 10 s. */
    assert_true(c.m[b].vtime >= c.m[a].vtime);
    devsched_core_acquire(&c, a, ASK(DEVSCHED_ONLINE, 0));
    devsched_core_acquire(&c, b, ASK(DEVSCHED_ONLINE, 0));
    int runs[2] = {0, 0};
    for (int k = 0; k < 20; k++) {
        devsched_core_grant(&c, 0, NULL, NULL, NULL);
        int who = devsched_core_take(&c, a, ASK(DEVSCHED_ONLINE, 0)) ? a
                  : devsched_core_take(&c, b, ASK(DEVSCHED_ONLINE, 0)) ? b : -1;
        assert_true(who >= 0);
        runs[who]++;
        devsched_core_acquire(&c, who, ASK(DEVSCHED_ONLINE, 0));   /* its next batch, at once */
        devsched_core_release(&c, who, 10 * MS);
    }
    assert_int_equal(runs[a], 10);
    assert_int_equal(runs[b], 10);
}

/* ---- the long-run split, simulated ----
 *
 * Members always busy: each of a member's workers holds a batch, waiting or
 * running; when one finishes it asks for its next at once (the worker's
 * release-and-acquire). Batch costs are random per member (a heavy model and
 * a light one), so the split is of device time, not of batches. */

struct sim_run {
    int member;
    int64_t len, end;
};

static uint64_t sim_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static int64_t sim_cost(uint64_t *rng, int64_t mean)
{
    return mean / 2 + (int64_t)(sim_rand(rng) % (uint64_t)mean);   /* mean +- 50% */
}

static void test_split_follows_weights_property(void **state)
{
    (void)state;
    uint64_t rng = 0x9e3779b97f4a7c15ULL;
    double worst = 0;
    for (int seq = 0; seq < 2000; seq++) {
        struct devsched_core c;
        devsched_core_init(&c);
        int n = 2 + (int)(sim_rand(&rng) % 3);
        int slots = 1 + (int)(sim_rand(&rng) % 3);
        int weight[4], wsum = 0;
        int64_t mean[4], used[4] = {0}, total = 0;
        for (int i = 0; i < n; i++) {
            weight[i] = 1 + (int)(sim_rand(&rng) % 10);
            wsum += weight[i];
            mean[i] = (1 + (int64_t)(sim_rand(&rng) % 20)) * MS;
            /* Enough workers to fill the device alone: the weights are
             * the only limit on each share. */
            assert_int_equal(devsched_core_join(&c, weight[i], slots), i);
        }
        struct sim_run run[16];
        int nrun = 0;
        int64_t now = 0;
        for (int i = 0; i < n; i++)
            for (int w = 0; w < slots; w++)
                devsched_core_acquire(&c, i, ASK(DEVSCHED_ONLINE, 0));
        for (int step = 0; step < 4000; step++) {
            devsched_core_grant(&c, 0, NULL, NULL, NULL);
            for (int i = 0; i < n; i++)
                while (devsched_core_take(&c, i, ASK(DEVSCHED_ONLINE, 0))) {
                    int64_t len = sim_cost(&rng, mean[i]);
                    run[nrun++] = (struct sim_run){i, len, now + len};
                }
            assert_int_equal(c.used, c.slots);   /* work-conserving */
            int first = 0;
            for (int k = 1; k < nrun; k++)
                if (run[k].end < run[first].end)
                    first = k;
            struct sim_run r = run[first];
            run[first] = run[--nrun];
            now = r.end;
            used[r.member] += r.len;
            total += r.len;
            /* Its next batch is ready at once: release and acquire as one. */
            devsched_core_acquire(&c, r.member, ASK(DEVSCHED_ONLINE, 0));
            devsched_core_release(&c, r.member, r.len);
        }
        for (int i = 0; i < n; i++) {
            double want = (double)weight[i] / wsum, got = (double)used[i] / (double)total;
            double err = got / want - 1;
            if (err < 0)
                err = -err;
            if (err > worst)
                worst = err;
            /* A weight-1 member among 18 gets ~220 batches of 4000: one
             * batch more or less is already 0.5% of its share. */
            if (err > 0.05)
                fail_msg("sequence %d: member %d of %d (weight %d of %d, batches ~%lld ms, "
                         "%d slots) got %.4f of the device time, want %.4f", seq, i, n,
                         weight[i], wsum, (long long)(mean[i] / MS), slots, got, want);
        }
    }
    printf("# worst relative error of a member's share over 2000 sequences: %.2f%%\n",
           worst * 100);
}

/* ---- the threaded device ---- */

struct thr_arg {
    struct devsched *d;
    int member;
    atomic_int *left;
};

/* A member whose next batch is always ready: 1 ms of (pretended) device
 * time each, the whole loop under the device's real locks. */
static void *thr_busy(void *p)
{
    struct thr_arg *a = p;
    devsched_acquire(a->d, a->member, ASK(DEVSCHED_ONLINE, 0));
    while (atomic_fetch_sub(a->left, 1) > 0)
        devsched_release_acquire(a->d, a->member, 1 * MS, ASK(DEVSCHED_ONLINE, 0));
    devsched_release(a->d, a->member, 1 * MS);
    return NULL;
}

static void test_threads_split_two_to_one(void **state)
{
    (void)state;
    struct error err = {0};
    struct devsched *d = devsched_new("synthetic0", &err);
    assert_non_null(d);
    int a = devsched_join(d, "heavy", 2, 1, &err), b = devsched_join(d, "light", 1, 1, &err);
    assert_int_equal(a, 0);
    assert_int_equal(b, 1);
    atomic_int left = 3000;
    struct thr_arg args[2] = {{d, a, &left}, {d, b, &left}};
    pthread_t t[2];
    /* The slot is held (as member a) until both threads wait for it, so
     * neither runs alone before the other has started. */
    devsched_acquire(d, a, ASK(DEVSCHED_ONLINE, 0));
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, thr_busy, &args[i]), 0);
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    devsched_release(d, a, 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    struct devsched_member_stats sa, sb;
    devsched_member_stats(d, a, &sa);
    devsched_member_stats(d, b, &sb);
    assert_int_equal(sa.slots, 1);
    assert_int_equal(sa.weight, 2);
    /* Each ends with one batch more or less than its share: the weights. */
    double ratio = sa.granted_s / sb.granted_s;
    printf("# threads, weights 2:1, one slot: %.3f:1\n", ratio);
    assert_true(ratio > 1.9 && ratio < 2.1);
    devsched_free(d);
}

struct steal_arg {
    struct devsched *d;
    int member;
    atomic_int ran;
};

static void *thr_urgent(void *p)
{
    struct steal_arg *a = p;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t due = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec - 1;   /* must start now */
    devsched_acquire(a->d, a->member, &(struct devsched_ask){DEVSCHED_ONLINE, due, 1});
    atomic_store(&a->ran, 1);
    struct timespec run = {0, 20 * 1000 * 1000};
    nanosleep(&run, NULL);
    devsched_release(a->d, a->member, 20 * MS);
    return NULL;
}

/* Model A (2 instances) and B share a device of 2 slots, both held (A1,
 * B1). A2's batch is due now and waits. A1's batch ends and A1 asks again
 * with a batch of no deadline: the freed slot is A2's, which earned it.
 * A1 took it (it holds the lock across the grant), and A2 waited past its
 * deadline for A1's next batch. */
static void test_threads_the_urgent_sibling_gets_the_slot(void **state)
{
    (void)state;
    struct error err = {0};
    struct devsched *d = devsched_new("synthetic0", &err);
    assert_non_null(d);
    int a = devsched_join(d, "a", 1, 2, &err), b = devsched_join(d, "b", 1, 2, &err);
    devsched_acquire(d, b, ASK(DEVSCHED_ONLINE, 0));   /* B1 */
    devsched_acquire(d, a, ASK(DEVSCHED_ONLINE, 0));   /* A1 */
    struct steal_arg arg = {.d = d, .member = a};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thr_urgent, &arg), 0);
    struct timespec ts = {0, 100 * 1000 * 1000};
    nanosleep(&ts, NULL);   /* A2 waits */
    devsched_release_acquire(d, a, 10 * MS, ASK(DEVSCHED_ONLINE, 0));
    int urgent_first = atomic_load(&arg.ran);
    devsched_release(d, a, 10 * MS);
    pthread_join(t, NULL);
    devsched_release(d, b, 10 * MS);
    assert_int_equal(urgent_first, 1);
    devsched_free(d);
}

static void *thr_blocked(void *p)
{
    struct thr_arg *a = p;
    devsched_acquire(a->d, a->member, ASK(DEVSCHED_OFFLINE, 0));
    devsched_release(a->d, a->member, 0);
    atomic_store(a->left, 1);
    return NULL;
}

static void test_close_lets_waiters_run(void **state)
{
    (void)state;
    struct error err = {0};
    struct devsched *d = devsched_new("cuda0", &err);
    int a = devsched_join(d, "a", 1, 1, &err), b = devsched_join(d, "b", 1, 1, &err);
    devsched_acquire(d, a, ASK(DEVSCHED_ONLINE, 0));   /* held, as by a call that hangs */
    atomic_int done = 0;
    struct thr_arg arg = {d, b, &done};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, thr_blocked, &arg), 0);
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    assert_int_equal(atomic_load(&done), 0);   /* waits for the slot */
    devsched_close(d);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&done), 1);
    struct devsched_member_stats sb;
    devsched_member_stats(d, b, &sb);
    assert_true(sb.wait_s > 0.01);
    devsched_release(d, a, 0);
    devsched_free(d);
}

/* A member that leaves frees its index for the next join (a device shared by
 * reloaded copies ran out of its 64 and took no model any more); the slots
 * follow the members left; one still running does not leave. */
static void test_members_leave_and_indices_come_back(void **state)
{
    (void)state;
    struct error err = {0};
    struct devsched *d = devsched_new("synthetic0", &err);
    int wide = devsched_join(d, "wide", 1, 3, &err);
    for (int k = 0; k < 200; k++) {   /* reload after reload */
        int m = devsched_join(d, "m", 1, 1, &err);
        assert_true(m >= 0 && m < 3);
        devsched_acquire(d, m, ASK(DEVSCHED_ONLINE, 0));
        devsched_release(d, m, 1000);
        devsched_leave(d, m);
    }
    struct devsched_member_stats st;
    devsched_member_stats(d, wide, &st);
    assert_int_equal(st.slots, 3);
    devsched_leave(d, wide);
    int one = devsched_join(d, "one", 1, 1, &err);
    assert_int_equal(one, wide);   /* the first free index */
    devsched_member_stats(d, one, &st);
    assert_int_equal(st.slots, 1);   /* wide's 3 went with it */
    /* Running: it stays (a stranded worker will release its slot). */
    devsched_acquire(d, one, ASK(DEVSCHED_ONLINE, 0));
    devsched_leave(d, one);
    assert_int_not_equal(devsched_join(d, "two", 1, 1, &err), one);
    devsched_release(d, one, 0);
    devsched_free(d);
}

/* The device's tenant shares measure use against the slots it has now: a
 * 4-instance model gone, the 1-instance one left runs one batch at a
 * time, and a tenant using all of it used all of the device (its `limit`
 * was 4 times looser while the slots only grew). */
static void test_shares_slots_follow_the_members(void **state)
{
    (void)state;
    struct error err = {0};
    struct tenants_config tc;
    memset(&tc, 0, sizeof tc);
    tc.n = 1;
    snprintf(tc.t[0].name, sizeof tc.t[0].name, "default");
    tc.t[0].share = 1.0;
    struct shares *sh = shares_new("synthetic0", &tc, 1, &err);
    struct devsched *d = devsched_new("synthetic0", &err);
    devsched_set_shares(d, sh);
    int wide = devsched_join(d, "wide", 1, 4, &err);
    int one = devsched_join(d, "one", 1, 1, &err);
    assert_int_equal(shares_slots(sh), 4);
    devsched_leave(d, wide);
    assert_int_equal(shares_slots(sh), 1);
    devsched_leave(d, one);
    assert_int_equal(shares_slots(sh), 1);   /* never 0: a rate of nothing */
    assert_true(devsched_join(d, "again", 1, 2, &err) >= 0);
    assert_int_equal(shares_slots(sh), 2);
    devsched_free(d);
    shares_free(sh);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_members_leave_and_indices_come_back),
        cmocka_unit_test(test_shares_slots_follow_the_members),
        cmocka_unit_test(test_pick_nobody_waits),
        cmocka_unit_test(test_pick_online_before_offline),
        cmocka_unit_test(test_pick_least_virtual_time_then_weight),
        cmocka_unit_test(test_pick_urgent_deadline_first),
        cmocka_unit_test(test_pick_urgent_within_weights_and_tenants),
        cmocka_unit_test(test_core_urgent_member_cannot_starve_a_heavier_one),
        cmocka_unit_test(test_core_offline_share_holds_across_models),
        cmocka_unit_test(test_core_urgent_batch_jumps_the_queue),
        cmocka_unit_test(test_core_tenant_rank_before_model_weight),
        cmocka_unit_test(test_waiters_past_the_tracked_limit),
        cmocka_unit_test(test_weights_charge_device_time),
        cmocka_unit_test(test_fast_path_and_work_conservation),
        cmocka_unit_test(test_idle_member_banks_no_credit),
        cmocka_unit_test(test_split_follows_weights_property),
        cmocka_unit_test(test_threads_split_two_to_one),
        cmocka_unit_test(test_threads_the_urgent_sibling_gets_the_slot),
        cmocka_unit_test(test_close_lets_waiters_run),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
