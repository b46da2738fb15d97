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
    policy_decide(&c, NULL, NULL, 0, 0, &d);
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
    policy_decide(&c, NULL, q, 2, 11 * MS, &d);
    assert_int_equal(d.take, 0);
    assert_true(d.wake_ns == 15 * MS);   /* the clock starts at arrival, not at the look */
    policy_decide(&c, NULL, q, 2, 15 * MS, &d);
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
    policy_decide(&c, NULL, q, 3, 1, &d);
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
    policy_decide(&c, NULL, q, 2, 1, &d);
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
    policy_decide(&c, NULL, q, 5, 1, &d);
    assert_int_equal(d.take, 4);   /* the largest preferred prefix */
    policy_decide(&c, NULL, q, 3, 1, &d);
    assert_int_equal(d.take, 2);
    policy_decide(&c, NULL, q, 1, 1, &d);
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
    policy_decide(&c, NULL, q, 1, 5 * MS, &d);
    assert_int_equal(d.take, 1);
}

/* Random queues: whatever is decided obeys the rules. */
static void test_random_queues(void **state)
{
    (void)state;
    unsigned seed = (unsigned)time(NULL);
    const char *env = getenv("BG_TEST_SEED");
    if (env)
        seed = (unsigned)strtoul(env, NULL, 10);
    srand(seed);
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
        policy_decide(&c, NULL, q, n, now, &d);
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
    policy_decide(&c, &lat, q, 2, 2 * MS, &d);
    assert_int_equal(d.take, 0);
    assert_true(llabs(d.wake_ns - (10 * MS - 12 * MS / 10)) < 1000);
    policy_decide(&c, &lat, q, 2, d.wake_ns, &d);
    assert_int_equal(d.take, 2);
    /* The same queue under the fixed delay waits the whole 100 ms. */
    struct policy_config f = {16, NULL, 0, 100 * MS, POLICY_FIXED_DELAY};
    policy_decide(&f, &lat, q, 2, 2 * MS, &d);
    assert_int_equal(d.take, 0);
    assert_true(d.wake_ns == 100 * MS);
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
    policy_decide(&c, &lat, q, 64, 0, &d);
    assert_int_equal(d.take, 63);
    assert_int_equal(d.rows, 63);
    assert_non_null(d.pick);
    assert_int_equal(d.pick[0], 1);
    /* Without scratch space the policy falls back to whole prefixes. */
    policy_decision_init(&d, NULL);
    policy_decide(&c, &lat, q, 64, 0, &d);
    assert_int_equal(d.take, 64);
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
        cmocka_unit_test(test_deadline_dispatches_just_in_time),
        cmocka_unit_test(test_deadline_selects_most_rows_in_time),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
