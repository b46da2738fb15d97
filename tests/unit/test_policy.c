/* test_policy.c - the batching policy on a virtual clock: the hand-made
 * cases of each rule, then random queues checked against the rules. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cmocka.h>

#include "batcher/policy.h"
#include "batcher/rate.h"

#define MS 1000000LL

static struct policy_config cfg(int max, const int *pref, int npref, int64_t delay_ns)
{
    return (struct policy_config){max, pref, npref, delay_ns, POLICY_FIXED_DELAY};
}

static void test_empty_waits_forever(void **state)
{
    (void)state;
    struct policy_config c = cfg(8, NULL, 0, 1 * MS);
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, NULL, NULL, NULL, 0, 0, &d);
    assert_int_equal(d.take, 0);
    assert_true(d.wake_ns == POLICY_NEVER);
}

static void test_waits_until_oldest_delay(void **state)
{
    (void)state;
    struct policy_config c = cfg(8, NULL, 0, 5 * MS);
    struct policy_request q[] = {{2, 10 * MS, 0}, {1, 12 * MS, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, NULL, NULL, q, 2, 11 * MS, &d);
    assert_int_equal(d.take, 0);
    assert_true(d.wake_ns == 15 * MS);   /* the clock starts at arrival, not at the look */
    policy_decide(&c, NULL, NULL, q, 2, 15 * MS, &d);
    assert_int_equal(d.take, 2);
    assert_int_equal(d.rows, 3);
}

static void test_full_dispatches_at_once(void **state)
{
    (void)state;
    struct policy_config c = cfg(4, NULL, 0, 100 * MS);
    struct policy_request q[] = {{2, 0, 0}, {2, 0, 0}, {1, 0, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, NULL, NULL, q, 3, 1, &d);
    assert_int_equal(d.take, 2);
    assert_int_equal(d.rows, 4);
}

static void test_next_does_not_fit(void **state)
{
    (void)state;
    /* 3 rows queued, the next request has 3 more: 6 > 5, so the batch cannot
     * grow by waiting and leaves now; rows are never split. */
    struct policy_config c = cfg(5, NULL, 0, 100 * MS);
    struct policy_request q[] = {{3, 0, 0}, {3, 0, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, NULL, NULL, q, 2, 1, &d);
    assert_int_equal(d.take, 1);
    assert_int_equal(d.rows, 3);
}

static void test_preferred_size(void **state)
{
    (void)state;
    static const int pref[] = {2, 4, 0};
    struct policy_config c = cfg(8, pref, 2, 100 * MS);
    struct policy_request q[] = {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, NULL, NULL, q, 5, 1, &d);
    assert_int_equal(d.take, 4);   /* the largest preferred prefix */
    policy_decide(&c, NULL, NULL, q, 3, 1, &d);
    assert_int_equal(d.take, 2);
    policy_decide(&c, NULL, NULL, q, 1, 1, &d);
    assert_int_equal(d.take, 0);
    assert_true(d.wake_ns == 100 * MS);
}

static void test_zero_delay_dispatches_immediately(void **state)
{
    (void)state;
    struct policy_config c = cfg(8, NULL, 0, 0);
    struct policy_request q[] = {{1, 5 * MS, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, NULL, NULL, q, 1, 5 * MS, &d);
    assert_int_equal(d.take, 1);
}

/* The seed of a random test: the clock's, or BG_TEST_SEED=N to replay one
 * (every failure message names it); rand() is seeded with it. */
static unsigned test_seed(void)
{
    unsigned seed = (unsigned)time(NULL);
    const char *env = getenv("BG_TEST_SEED");
    if (env)
        seed = (unsigned)strtoul(env, NULL, 10);
    srand(seed);
    return seed;
}

/* Random queues: whatever is decided obeys the rules. */
static void test_random_queues(void **state)
{
    (void)state;
    unsigned seed = test_seed();
    for (int iter = 0; iter < 20000; iter++) {
        int max = 1 + rand() % 64;
        int pref[3], npref = rand() % 4;
        for (int i = 0; i < npref; i++)
            pref[i] = 1 + rand() % max;
        int64_t delay = (rand() % 10) * MS;
        struct policy_config c = cfg(max, pref, npref, delay);
        struct policy_request q[65];
        int n = rand() % 65;
        int64_t t = 0;
        for (int i = 0; i < n; i++) {
            t += rand() % (2 * MS);
            q[i].rows = 1 + rand() % max;
            q[i].arrival_ns = t;
            q[i].deadline_ns = 0;
        }
        int64_t now = t + rand() % (12 * MS);
        struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
        policy_decide(&c, NULL, NULL, q, n, now, &d);
        int rows = 0;
        for (int i = 0; i < d.take; i++)
            rows += q[i].rows;
        if (d.take > 0) {
            if (rows != d.rows || rows > max)
                fail_msg("seed %u iter %d: batch of %d rows (reported %d) over max %d", seed, iter,
                         rows, d.rows, max);
            /* A dispatch must be justified by one of the rules. */
            int fits_more = d.take < n && rows + q[d.take].rows <= max;
            int preferred = 0;
            for (int i = 0; i < npref; i++)
                preferred |= rows == pref[i];
            int overdue = now >= q[0].arrival_ns + delay;
            if (fits_more && !preferred && !overdue)
                fail_msg("seed %u iter %d: dispatched %d rows early for no reason", seed, iter, rows);
            if (overdue && fits_more)
                fail_msg("seed %u iter %d: overdue batch left rows behind that fit", seed, iter);
        } else if (n > 0) {
            if (now >= q[0].arrival_ns + delay)
                fail_msg("seed %u iter %d: waited past the oldest request's delay", seed, iter);
            if (d.wake_ns != q[0].arrival_ns + delay)
                fail_msg("seed %u iter %d: wakes at %lld, not when the delay runs out", seed, iter,
                         (long long)d.wake_ns);
        }
    }
}

/* exec(rows) = 1 ms + 0.1 ms per row, fitted exactly. */
static struct latmodel exact_model(void)
{
    struct latmodel m;
    latmodel_init(&m);
    for (int i = 0; i < 8; i++)
        latmodel_add(&m, 1 + (i % 4) * 10, 1 * MS + (1 + (i % 4) * 10) * MS / 10);
    return m;
}

static void test_latmodel_fits_and_resists_outliers(void **state)
{
    (void)state;
    struct latmodel m = exact_model();
    assert_true(latmodel_predict(&m, 1) >= 1 * MS + MS / 10 - 1000);
    assert_true(latmodel_predict(&m, 1) <= 1 * MS + MS / 10 + 1000);
    assert_true(llabs(latmodel_predict(&m, 20) - 3 * MS) < 1000);
    /* Stalled batches (10x slower) among many good ones barely move it. */
    for (int i = 0; i < 40; i++)
        latmodel_add(&m, 1 + (i % 4) * 10, i % 10 == 0 ? 30 * MS : 1 * MS + (1 + (i % 4) * 10) * MS / 10);
    assert_true(llabs(latmodel_predict(&m, 20) - 3 * MS) < MS / 2);
}

/* The batcher's way (batcher_learn): record under the lock, fit a copy
 * outside it, adopt. It must give what latmodel_add gives, and a fit that
 * finishes after a later one must not replace it. */
static void test_latmodel_fits_a_copy_and_keeps_the_latest(void **state)
{
    (void)state;
    struct latmodel inline_m, shared;
    latmodel_init(&inline_m);
    latmodel_init(&shared);
    int fits = 0;
    for (int i = 0; i < 100; i++) {
        int64_t t = 1 + (i % 7) * 5, ns = 2 * MS + t * MS / 7 + (i % 3) * MS / 50;
        latmodel_add_sq(&inline_m, t, 0, ns);
        if (latmodel_record(&shared, t, 0, ns)) {
            struct latmodel copy = shared;
            latmodel_fit(&copy);
            latmodel_adopt(&shared, &copy);
            fits++;
        }
        assert_true(latmodel_predict(&shared, 9) == latmodel_predict(&inline_m, 9));
    }
    assert_true(fits > 16 && fits < 40);   /* every batch while few, then every 8 */
    /* Two copies taken in turn, fitted at once; the older one lands last. */
    struct latmodel older, newer;
    int64_t before = latmodel_predict(&shared, 30);
    for (;;)
        if (latmodel_record(&shared, 30, 0, 40 * MS)) {
            older = shared;
            break;
        }
    for (;;)
        if (latmodel_record(&shared, 30, 0, 40 * MS)) {
            newer = shared;
            break;
        }
    latmodel_fit(&older);
    latmodel_fit(&newer);
    assert_true(latmodel_predict(&newer, 30) > latmodel_predict(&older, 30));
    latmodel_adopt(&shared, &newer);
    latmodel_adopt(&shared, &older);
    assert_true(latmodel_predict(&shared, 30) == latmodel_predict(&newer, 30));
    assert_true(latmodel_predict(&shared, 30) > before);
}

/* A model of one-row batches (7.5 us each) and one stalled batch of 8
 * rows (100 ms: a fault, a paused process): every pair of unlike sizes went
 * through the stalled one, so Theil-Sen's median slope was its 14 ms a row,
 * and once it left the window that slope stayed as the only one seen. A
 * 50 ms budget was 504 for good (the gateway never ran the bigger batch
 * that would correct it). */
static void test_latmodel_one_stalled_batch_among_single_rows(void **state)
{
    (void)state;
    struct latmodel m;
    latmodel_init(&m);
    for (int i = 0; i < 60; i++)
        latmodel_add(&m, 1, 7500 + (i % 5) * 100);
    latmodel_add(&m, 8, 100 * MS);
    for (int i = 0; i < 8; i++)
        latmodel_add(&m, 1, 7500 + (i % 5) * 100);
    assert_true(latmodel_predict(&m, 1) < MS / 10);
    assert_true(latmodel_predict(&m, 8) < MS);
    /* The stalled batch out of the window: still sane. */
    for (int i = 0; i < LATMODEL_WINDOW + 8; i++)
        latmodel_add(&m, 1, 7500 + (i % 5) * 100);
    assert_true(latmodel_predict(&m, 1) < MS / 10);
    assert_true(latmodel_predict(&m, 8) < MS);
}

static void test_deadline_dispatches_just_in_time(void **state)
{
    (void)state;
    struct latmodel lat = exact_model();
    struct policy_config c = {16, NULL, 0, 100 * MS, POLICY_DEADLINE};
    /* 2 rows, deadline at 10 ms: exec(2) = 1.2 ms, so the batch must leave by 8.8 ms. */
    struct policy_request q[] = {{1, 0, 10 * MS}, {1, 1 * MS, 50 * MS}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, &lat, NULL, q, 2, 2 * MS, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - (10 * MS - 12 * MS / 10)) < 1000);
    policy_decide(&c, &lat, NULL, q, 2, d.wake_ns, &d);
    assert_int_equal(d.take, 2);
    /* The same queue under the fixed delay waits the whole 100 ms. */
    struct policy_config f = {16, NULL, 0, 100 * MS, POLICY_FIXED_DELAY};
    policy_decide(&f, &lat, NULL, q, 2, 2 * MS, &d);
    assert_int_equal(d.take, 0);
    assert_true(d.wake_ns == 100 * MS);
}

/* Two requests of one deadline: the deadline rule waits until the batch of
 * both must leave. A wake a little late (a timer's lateness) then found it
 * late, and sent one request alone: the other could only be answered 504.
 * With the wake slack the wait ends that much early and both go. */
static void test_deadline_wake_slack(void **state)
{
    (void)state;
    struct latmodel lat = exact_model();
    struct policy_config c = {16, NULL, 0, 100 * MS, POLICY_DEADLINE};
    struct policy_request q[] = {{1, 0, 10 * MS}, {1, 0, 10 * MS}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    struct policy_load none = {0, 0, 0, NULL}, slack = {0, 0, 200000, NULL};
    policy_decide(&c, &lat, &none, q, 2, 1 * MS, &d);
    int64_t wake = d.wake_ns;
    assert_true(llabs(wake - (10 * MS - 12 * MS / 10)) < 1000);
    policy_decide(&c, &lat, &none, q, 2, wake + 50000, &d);   /* 50 us late */
    assert_int_equal(d.take, 1);                              /* the split, without slack */
    policy_decide(&c, &lat, &slack, q, 2, 1 * MS, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - (wake - 200000)) < 1000);
    policy_decide(&c, &lat, &slack, q, 2, d.wake_ns + 50000, &d);
    assert_int_equal(d.take, 2);
    assert_int_equal(d.rows, 2);
}

/* The slack follows the latest wakes: a late one raises it at once, then
 * it decays by 1/16 a wake down to the floor; a stall is capped. */
static void test_wake_slack_rule(void **state)
{
    (void)state;
    int64_t s = POLICY_WAKE_SLACK_MIN_NS;
    assert_int_equal(policy_wake_slack(s, 0), POLICY_WAKE_SLACK_MIN_NS);      /* the floor */
    assert_int_equal(policy_wake_slack(s, 1200000), 1200000);               /* a late wake */
    s = policy_wake_slack(1200000, 10000);
    assert_int_equal(s, 1200000 - 1200000 / 16);                            /* decays */
    for (int i = 0; i < 40; i++)
        s = policy_wake_slack(s, 10000);
    assert_int_equal(s, POLICY_WAKE_SLACK_MIN_NS);                          /* back to the floor */
    assert_int_equal(policy_wake_slack(s, 5LL * 1000000000), POLICY_WAKE_SLACK_MAX_NS);   /* a stall */
    assert_int_equal(policy_wake_slack(POLICY_WAKE_SLACK_MAX_NS, 0),
                     POLICY_WAKE_SLACK_MAX_NS - POLICY_WAKE_SLACK_MAX_NS / 16);
}

static void test_deadline_selects_most_rows_in_time(void **state)
{
    (void)state;
    struct latmodel lat = exact_model();
    struct policy_config c = {64, NULL, 0, 0, POLICY_DEADLINE};
    /* A full batch of 64 rows takes 7.4 ms; the head's deadline leaves 3 ms,
     * so only what finishes in time goes: exec(r) <= 3 ms gives r <= 20. */
    struct policy_request q[64];
    for (int i = 0; i < 64; i++)
        q[i] = (struct policy_request){1, 0, i == 0 ? 3 * MS : 100 * MS};
    /* Serving the most rows in time: 63 rows finishing at 7.3 ms, leaving
     * the head (due at 3 ms) to expire, beats 20 rows including it. */
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, &lat, NULL, q, 64, 0, &d);
    assert_int_equal(d.take, 63);
    assert_int_equal(d.rows, 63);
    assert_non_null(d.pick);
    assert_int_equal(d.pick[0], 1);
    /* Without scratch space the policy falls back to whole prefixes. */
    policy_decision_init(&d, NULL);
    policy_decide(&c, &lat, NULL, q, 64, 0, &d);
    assert_int_equal(d.take, 64);
}

/* The same queue with the head at priority 1 and the rest at 5: the
 * largest batch would leave the head, which can finish alone, to expire
 * for rows of a lower priority. The batch serves it: 20 rows, exec 3 ms. */
static void test_deadline_never_passes_over_a_higher_priority(void **state)
{
    (void)state;
    struct latmodel lat = exact_model();
    struct policy_config c = {64, NULL, 0, 0, POLICY_DEADLINE};
    struct policy_request q[64];
    struct policy_token_info ti[64];
    for (int i = 0; i < 64; i++) {
        q[i] = (struct policy_request){1, 0, i == 0 ? 3 * MS : 0};
        ti[i] = (struct policy_token_info){1, 0, 1, i == 0 ? 1 : 5};
    }
    struct policy_tokens t = {0, ti};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide_tokens(&c, &t, &lat, NULL, q, 64, 0, &d);
    assert_int_equal(d.take, 20);
    assert_non_null(d.pick);
    assert_int_equal(d.pick[0], 0);
    /* One priority for all: the most rows, as before. */
    ti[0].priority = 5;
    policy_decide_tokens(&c, &t, &lat, NULL, q, 64, 0, &d);
    assert_int_equal(d.take, 63);
    assert_int_equal(d.pick[0], 1);
}

/* An instance 4x slower than the fastest: a request due in 2 ms makes it
 * there (exec 1.1 ms) but not here (4.4 ms). The slow one takes nothing
 * and wakes when the request would expire on the fast one; the fast one,
 * or one alone, sends it. */
static void test_slower_instance_leaves_work_to_a_faster_one(void **state)
{
    (void)state;
    struct latmodel fast = exact_model(), slow;
    latmodel_init(&slow);
    for (int i = 0; i < 8; i++)
        latmodel_add(&slow, 1 + (i % 4) * 10, 4 * (1 * MS + (1 + (i % 4) * 10) * MS / 10));
    struct policy_config c = {16, NULL, 0, 0, POLICY_DEADLINE};
    struct policy_request q[] = {{1, 0, 2 * MS}};
    struct policy_load load = {0, 0, 0, &fast};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, &slow, &load, q, 1, 0, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - (2 * MS - 11 * MS / 10 + 1)) < 1000);
    policy_decide(&c, &fast, &load, q, 1, 0, &d);
    assert_int_equal(d.take, 1);
    load.fastest = NULL;   /* no faster instance: the head goes, a near miss */
    policy_decide(&c, &slow, &load, q, 1, 0, &d);
    assert_int_equal(d.take, 1);
}

/* ---- the adaptive wait (policy.h), on exec(R) = 1 ms + 0.1 ms x R ---- */

#define PER_MS(x) ((x) / 1e6)   /* rows per ms -> rows per ns */

static struct policy_config adaptive_cfg(int max, int64_t delay_ns)
{
    return (struct policy_config){max, NULL, 0, delay_ns, POLICY_ADAPTIVE};
}

static void test_adaptive_sends_at_once_without_arrivals(void **state)
{
    (void)state;
    struct latmodel lat = exact_model();
    struct policy_config c = adaptive_cfg(16, 100 * MS);
    struct policy_request q[] = {{1, 0, 0}};
    struct policy_load none = {0, 0, 0, NULL};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, &lat, NULL, q, 1, 0, &d);     /* nothing measured */
    assert_int_equal(d.take, 1);
    policy_decide(&c, &lat, &none, q, 1, 0, &d);    /* rate 0 */
    assert_int_equal(d.take, 1);
    /* No latency model: no setup time to save. */
    struct policy_load fast = {PER_MS(1000), 0, 0, NULL};
    policy_decide(&c, NULL, &fast, q, 1, 0, &d);
    assert_int_equal(d.take, 1);
    /* The former default waits the whole delay for the same queue. */
    struct policy_config old = {16, NULL, 0, 100 * MS, POLICY_DEADLINE};
    policy_decide(&old, &lat, &none, q, 1, 0, &d);
    assert_int_equal(d.take, 0);
    assert_true(d.wake_ns == 100 * MS);
}

/* lambda * a against r + 2: at 3 rows/ms, 3 rows arrive per 1 ms setup,
 * exactly r + 2 for one queued row: w* = (1 - 1/3)/2 ms, less the 1/3 ms
 * until the next row, is 0: send. At 4 rows/ms: w* = 0.375 ms, the wait
 * ends one expected gap (0.25 ms) earlier, at 0.125 ms. */
static void test_adaptive_threshold(void **state)
{
    (void)state;
    struct latmodel lat = exact_model();
    struct policy_config c = adaptive_cfg(16, 100 * MS);
    struct policy_request q[] = {{1, 0, 0}, {1, 0, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    struct policy_load at = {PER_MS(3), 0, 0, NULL}, above = {PER_MS(4), 0, 0, NULL};
    policy_decide(&c, &lat, &at, q, 1, 0, &d);
    assert_int_equal(d.take, 1);
    policy_decide(&c, &lat, &above, q, 1, 0, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - 125000) <= 1);
    policy_decide(&c, &lat, &above, q, 1, d.wake_ns, &d);
    assert_int_equal(d.take, 1);                     /* the wait ends at its instant */
    /* The clock counts from the arrival: looked at later, the same instant. */
    policy_decide(&c, &lat, &above, q, 1, 100000, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - 125000) <= 1);
    /* A second row makes waiting for a third not worth it: lambda a = 4 = r + 2. */
    policy_decide(&c, &lat, &above, q, 2, 0, &d);
    assert_int_equal(d.take, 2);
}

/* max_queue_delay and the deadline bound the wait; the wait stops one
 * expected gap before the bound. 100 rows/ms: w* = (1 - 0.01)/2 = 0.495 ms. */
static void test_adaptive_bounded_by_delay_and_deadline(void **state)
{
    (void)state;
    struct latmodel lat = exact_model();
    struct policy_load busy = {PER_MS(100), 0, 0, NULL};
    struct policy_request q[] = {{1, 0, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    struct policy_config c = adaptive_cfg(16, 100 * MS);
    policy_decide(&c, &lat, &busy, q, 1, 0, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - 485000) <= 1);     /* w* less 0.01 ms */
    c = adaptive_cfg(16, MS / 10);
    policy_decide(&c, &lat, &busy, q, 1, 0, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - 90000) <= 1);      /* max_queue_delay less 0.01 ms */
    c = adaptive_cfg(16, 0);
    policy_decide(&c, &lat, &busy, q, 1, 0, &d);
    assert_int_equal(d.take, 1);                     /* delay 0: batching without waiting */
    /* Deadline 1.3 ms, exec(1) = 1.1 ms: the latest start is 0.2 ms. */
    c = adaptive_cfg(16, 100 * MS);
    struct policy_request dq[] = {{1, 0, 1300000}};
    policy_decide(&c, &lat, &busy, dq, 1, 0, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - 190000) <= 1);
    /* Deadline 1.105 ms: less than one row expected before 5 us: send now. */
    dq[0].deadline_ns = 1105000;
    policy_decide(&c, &lat, &busy, dq, 1, 0, &d);
    assert_int_equal(d.take, 1);
}

static void test_adaptive_keeps_the_other_rules(void **state)
{
    (void)state;
    struct latmodel lat = exact_model();
    struct policy_load busy = {PER_MS(100), 0, 0, NULL};
    static const int pref[] = {2};
    struct policy_config c = {4, pref, 1, 100 * MS, POLICY_ADAPTIVE};
    struct policy_request q[] = {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0}, {1, 0, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    policy_decide(&c, &lat, &busy, q, 5, 0, &d);
    assert_int_equal(d.take, 4);                     /* full */
    policy_decide(&c, &lat, &busy, q, 2, 0, &d);
    assert_int_equal(d.take, 2);                     /* preferred */
    /* Overload selection: the head cannot make it, the rest go. */
    struct policy_config big = adaptive_cfg(64, 0);
    struct policy_request many[64];
    for (int i = 0; i < 64; i++)
        many[i] = (struct policy_request){1, 0, i == 0 ? 3 * MS : 100 * MS};
    policy_decide(&big, &lat, &busy, many, 64, 0, &d);
    assert_int_equal(d.take, 63);
}

/* The device scheduler's hook: when another queue could use the device,
 * waiting idles nothing and may run to max_queue_delay (less one gap),
 * even at a rate too low for an idle device to wait. */
/* A latency model with no sample yet (an upstream model before its first
 * call) cannot say what a wait saves: the configured delay bounds the wait,
 * as before the adaptive policy, while a row is expected. */
static void test_adaptive_unmeasured_device_waits_to_the_delay(void **state)
{
    (void)state;
    struct latmodel blank;
    latmodel_init(&blank);
    struct policy_config c = adaptive_cfg(16, 5 * MS);
    struct policy_request q[] = {{1, 0, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    struct policy_load coming = {PER_MS(2), 0, 0, NULL}, none = {0, 0, 0, NULL};
    policy_decide(&c, &blank, &coming, q, 1, 0, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - 4500000) <= 1);   /* the delay, less one expected gap */
    policy_decide(&c, &blank, &none, q, 1, 0, &d);
    assert_int_equal(d.take, 1);                     /* nothing coming: no wait */
    /* Once measured, the measured setup decides: 1 ms setup at 2 rows/ms, send. */
    struct latmodel lat = exact_model();
    policy_decide(&c, &lat, &coming, q, 1, 0, &d);
    assert_int_equal(d.take, 1);
}

static void test_adaptive_other_work_hook(void **state)
{
    (void)state;
    struct latmodel lat = exact_model();
    struct policy_config c = adaptive_cfg(16, 5 * MS);
    struct policy_request q[] = {{1, 0, 0}};
    struct policy_decision d;
    int scratch[2 * 70];
    policy_decision_init(&d, scratch);
    struct policy_load idle = {PER_MS(2), 0, 0, NULL}, shared = {PER_MS(2), 1, 0, NULL};
    policy_decide(&c, &lat, &idle, q, 1, 0, &d);
    assert_int_equal(d.take, 1);
    policy_decide(&c, &lat, &shared, q, 1, 0, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - 4500000) <= 1);
    shared.rows_per_ns = 0;                          /* still nothing to wait for at rate 0 */
    policy_decide(&c, &lat, &shared, q, 1, 0, &d);
    assert_int_equal(d.take, 1);
}

/* Random queues, rates and models: a wait is never longer than the former
 * policy's, ends by max_queue_delay and the deadline rule, and happens only
 * while at least one more row is expected before it must end. */
static void test_adaptive_random(void **state)
{
    (void)state;
    unsigned seed = test_seed();
    int waits = 0;
    for (int iter = 0; iter < 20000; iter++) {
        struct latmodel lat;
        latmodel_init(&lat);
        int64_t a = (rand() % 5000) * 1000LL, b = (rand() % 200) * 1000LL;
        for (int i = 0; i < 4; i++)
            latmodel_add(&lat, i % 2 ? 32 : 1, a + b * (i % 2 ? 32 : 1));
        int max = 1 + rand() % 32;
        int64_t delay = (rand() % 6) * MS;
        struct policy_config c = adaptive_cfg(max, delay);
        struct policy_config old = c;
        old.kind = POLICY_DEADLINE;
        struct policy_load load = {rand() % 4 ? PER_MS(rand() % 50) / (1 + rand() % 10) : 0,
                                   rand() % 8 == 0, 0, NULL};
        struct policy_request q[40];
        int n = 1 + rand() % 8;
        int64_t t = 0;
        for (int i = 0; i < n; i++) {
            t += rand() % (MS / 2);
            q[i].rows = 1 + rand() % 3;
            q[i].arrival_ns = t;
            q[i].deadline_ns = rand() % 2 ? t + (rand() % 20) * MS : 0;
        }
        /* The policy sees the queue in service order. */
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0; j--) {
                int64_t dj = q[j].deadline_ns ? q[j].deadline_ns : INT64_MAX;
                int64_t dp = q[j - 1].deadline_ns ? q[j - 1].deadline_ns : INT64_MAX;
                if (dj >= dp)
                    break;
                struct policy_request x = q[j];
                q[j] = q[j - 1];
                q[j - 1] = x;
            }
        int64_t now = t + rand() % (2 * MS);
        struct policy_decision d, od;
        int scratch[2 * 70], oscratch[2 * 70];
        policy_decision_init(&d, scratch);
        policy_decision_init(&od, oscratch);
        policy_decide(&c, &lat, &load, q, n, now, &d);
        policy_decide(&old, &lat, &load, q, n, now, &od);
        if (od.take > 0 && d.take == 0)
            fail_msg("seed %u iter %d: waits where the former policy sends", seed, iter);
        if (d.take > 0)
            continue;
        waits++;
        if (d.wake_ns > od.wake_ns || d.wake_ns <= now)
            fail_msg("seed %u iter %d: wakes at %lld, former %lld, now %lld", seed, iter,
                     (long long)d.wake_ns, (long long)od.wake_ns, (long long)now);
        /* od.wake_ns is min(max_queue_delay, latest start): the bound. */
        if (load.rows_per_ns * (double)(od.wake_ns - now) < 1.0)
            fail_msg("seed %u iter %d: waits with %.3f rows expected before the bound", seed,
                     iter, load.rows_per_ns * (double)(od.wake_ns - now));
        if (!load.device_has_other_work && !(load.rows_per_ns * lat.a_ns > 2.0))
            fail_msg("seed %u iter %d: an idle device waits with lambda a = %.3f", seed, iter,
                     load.rows_per_ns * lat.a_ns);
    }
    if (waits < 500)   /* the generator must exercise the waits it checks */
        fail_msg("seed %u: only %d of 20000 decisions waited", seed, waits);
}

static void test_rate_follows_arrivals(void **state)
{
    (void)state;
    struct rate r;
    rate_init(&r);
    assert_true(rate_value(&r, 5 * MS) == 0);
    rate_add(&r, 0, 1);
    assert_true(rate_value(&r, 5 * MS) == 0);       /* one arrival says nothing yet */
    /* 4 rows per ms, as single rows or as 8-row requests. */
    int64_t t = 0;
    for (int i = 0; i < 4000; i++, t += MS / 4)
        rate_add(&r, t, 1);
    double v = rate_value(&r, t - MS / 4) * 1e6;
    if (v < 3.99 || v > 4.01)
        fail_msg("rate %.3f rows/ms, want 4", v);
    struct rate r8;
    rate_init(&r8);
    for (int i = 0; i < 500; i++)
        rate_add(&r8, (int64_t)i * 2 * MS, 8);
    v = rate_value(&r8, 998 * MS) * 1e6;
    if (v < 3.99 || v > 4.01)
        fail_msg("rate %.3f rows/ms, want 4", v);
    /* A second of silence: 15 rows over about a second. */
    v = rate_value(&r, t + 1000 * MS) * 1e6;
    assert_true(v > 0.01 && v < 0.02);
    /* A burst after a long silence is seen within the window: one request a
     * second for 20 s, then 16 requests 10 us apart. */
    struct rate rb;
    rate_init(&rb);
    for (int i = 0; i < 20; i++)
        rate_add(&rb, (int64_t)i * 1000 * MS, 1);
    assert_true(rate_value(&rb, 19000 * MS) * 1e6 < 0.002);
    for (int i = 0; i < 16; i++)
        rate_add(&rb, 20000 * MS + i * 10000, 1);
    v = rate_value(&rb, 20000 * MS + 150000) * 1e6;
    if (v < 99 || v > 101)
        fail_msg("burst rate %.3f rows/ms, want 100", v);
}

static void test_policy_names(void **state)
{
    (void)state;
    assert_int_equal(policy_kind_from_name("adaptive"), POLICY_ADAPTIVE);
    assert_int_equal(policy_kind_from_name("deadline"), POLICY_DEADLINE);
    assert_int_equal(policy_kind_from_name("fixed_delay"), POLICY_FIXED_DELAY);
    assert_int_equal(policy_kind_from_name(""), POLICY_ADAPTIVE);
    assert_true(policy_deadline_aware(POLICY_ADAPTIVE));
    assert_false(policy_deadline_aware(POLICY_FIXED_DELAY));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_waits_forever),
        cmocka_unit_test(test_waits_until_oldest_delay),
        cmocka_unit_test(test_full_dispatches_at_once),
        cmocka_unit_test(test_next_does_not_fit),
        cmocka_unit_test(test_preferred_size),
        cmocka_unit_test(test_zero_delay_dispatches_immediately),
        cmocka_unit_test(test_random_queues),
        cmocka_unit_test(test_latmodel_fits_and_resists_outliers),
        cmocka_unit_test(test_latmodel_fits_a_copy_and_keeps_the_latest),
        cmocka_unit_test(test_latmodel_one_stalled_batch_among_single_rows),
        cmocka_unit_test(test_deadline_dispatches_just_in_time),
        cmocka_unit_test(test_deadline_wake_slack),
        cmocka_unit_test(test_wake_slack_rule),
        cmocka_unit_test(test_deadline_selects_most_rows_in_time),
        cmocka_unit_test(test_adaptive_sends_at_once_without_arrivals),
        cmocka_unit_test(test_adaptive_threshold),
        cmocka_unit_test(test_adaptive_bounded_by_delay_and_deadline),
        cmocka_unit_test(test_adaptive_keeps_the_other_rules),
        cmocka_unit_test(test_adaptive_unmeasured_device_waits_to_the_delay),
        cmocka_unit_test(test_adaptive_other_work_hook),
        cmocka_unit_test(test_adaptive_random),
        cmocka_unit_test(test_rate_follows_arrivals),
        cmocka_unit_test(test_policy_names),
        cmocka_unit_test(test_deadline_never_passes_over_a_higher_priority),
        cmocka_unit_test(test_slower_instance_leaves_work_to_a_faster_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
