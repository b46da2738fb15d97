/* test_guard.c - the answer-path guard: the lower median of recent buckets'
 * p99 overruns, zero until there are enough of them, never negative, not
 * learning one stall, forgetting old buckets; and
 * the batcher planning every deadline that much earlier (admission refuses
 * what the guard makes hopeless, and the planned finish is stamped). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "batcher/batcher.h"
#include "common/clock.h"
#include "batcher/guard.h"

#define MS 1000000LL
#define S 1000000000LL

/* One bucket of n overruns opened at t: v(i) for the i-th; the last one
 * arrives GUARD_BUCKET_NS later and closes it. Returns when it closed. */
static int64_t add_bucket(struct guard *g, int64_t t, int n, int64_t (*v)(int i))
{
    for (int i = 0; i < n - 1; i++)
        guard_add(g, t, v(i));
    guard_add(g, t + GUARD_BUCKET_NS, v(n - 1));
    return t + GUARD_BUCKET_NS;
}

static int64_t five_ms(int i) { (void)i; return 5 * MS; }
static int64_t two_pct_slow(int i) { return i % 50 == 0 ? 8 * MS : 200000; }
static int64_t half_pct_slow(int i) { return i % 200 == 0 ? 8 * MS : 200000; }
static int64_t fast(int i) { (void)i; return 300000; }
static int64_t stalled(int i) { (void)i; return 70 * MS; }
static int64_t early(int i) { (void)i; return -3 * MS; }

static void test_zero_until_enough_samples(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    assert_true(guard_value(&g, 1 * S) == 0);
    /* A bucket closes after GUARD_BUCKET_NS and GUARD_BUCKET_MIN answers. */
    for (int i = 0; i < GUARD_BUCKET_MIN - 1; i++)
        guard_add(&g, 1 * S, 5 * MS);
    guard_add(&g, 1 * S + GUARD_BUCKET_NS - 1, 5 * MS);
    assert_true(guard_value(&g, 2 * S) == 0);   /* still open */
    /* Closed buckets, but fewer than GUARD_MIN_SAMPLES answers behind them. */
    guard_destroy(&g);
    guard_init(&g);
    int64_t t = add_bucket(&g, 3 * S, GUARD_MIN_SAMPLES - GUARD_BUCKET_MIN - 1, five_ms);
    t = add_bucket(&g, t + 1, GUARD_BUCKET_MIN, five_ms);
    assert_true(guard_value(&g, t) == 0);
    t = add_bucket(&g, t + 1, GUARD_BUCKET_MIN, five_ms);
    assert_true(guard_value(&g, t) == 5 * MS);
}

static void test_p99_of_a_bucket(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    /* 2% slow: the p99 is a slow one (three buckets of it: learned). */
    int64_t t = 10 * S;
    for (int b = 0; b < 3; b++)
        t = add_bucket(&g, t + 1, GUARD_BUCKET_CAP, two_pct_slow);
    assert_true(guard_value(&g, t) == 8 * MS);
    /* More answers than a bucket keeps: the latest count. */
    guard_destroy(&g);
    guard_init(&g);
    t = 20 * S;
    for (int b = 0; b < 3; b++) {
        for (int i = 0; i < 3 * GUARD_BUCKET_CAP; i++)
            guard_add(&g, t + 1, 90 * MS);
        t = add_bucket(&g, t + 1, GUARD_BUCKET_CAP, half_pct_slow);
    }
    assert_true(guard_value(&g, t) == 200000);
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

static int64_t trial_v[GUARD_BUCKET_CAP];
static int64_t trial_at(int i) { return trial_v[i]; }

/* The selection agrees with sorting, on buckets with many ties too; and the
 * guard is the lower median of the last GUARD_BUCKETS quantiles, a bucket
 * not there yet counting as 0. */
static void test_quantiles_match_sorting(void **state)
{
    (void)state;
    srand(7);
    for (int trial = 0; trial < 200; trial++) {
        struct guard g;
        guard_init(&g);
        int64_t t = 1 * S, q[GUARD_BUCKETS + 2];
        int nb = 1 + rand() % (GUARD_BUCKETS + 2);
        for (int b = 0; b < nb; b++) {
            int n = GUARD_MIN_SAMPLES + rand() % (GUARD_BUCKET_CAP - GUARD_MIN_SAMPLES + 1);
            int spread = trial % 2 ? 5 : 1000000;
            for (int i = 0; i < n; i++)
                trial_v[i] = (int64_t)(rand() % spread) - spread / 10;
            t = add_bucket(&g, t + 1, n, trial_at) ;
            qsort(trial_v, (size_t)n, sizeof *trial_v, cmp_i64);
            q[b] = trial_v[(int)(GUARD_QUANTILE * (n - 1) + 0.5)];
        }
        int k = nb < GUARD_BUCKETS ? nb : GUARD_BUCKETS;
        int64_t last[GUARD_BUCKETS] = {0};
        memcpy(last, q + nb - k, (size_t)k * sizeof *last);
        qsort(last, GUARD_BUCKETS, sizeof *last, cmp_i64);
        int64_t want = last[(GUARD_BUCKETS - 1) / 2];
        assert_true(guard_value(&g, t) == (want > 0 ? want : 0));
    }
}

/* A fresh server's first stall: one bucket of it, none before (the
 * median of the buckets there was that bucket: 8 s of 504s for every
 * request with a budget under the stall, the batcher's audit). */
static void test_a_first_stall_is_not_learned(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    int64_t t = add_bucket(&g, 1 * S, 200, stalled);
    assert_true(guard_value(&g, t) == 0);
    t = add_bucket(&g, t + 1, 200, stalled);
    assert_true(guard_value(&g, t) == 0);
    t = add_bucket(&g, t + 1, 200, stalled);   /* the third: lasting */
    assert_true(guard_value(&g, t) == 70 * MS);
}

static void test_early_answers_give_zero(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    int64_t t = 1 * S;
    for (int b = 0; b < GUARD_BUCKETS; b++)
        t = add_bucket(&g, t + 1, 200, early);
    assert_true(guard_value(&g, t) == 0);
}

/* One stall of the whole machine makes every answer in flight late at
 * once: it fills a bucket, two at most, and is not learned; a delay that
 * lasts is, within three buckets; and it is forgotten as fast. */
static void test_a_stall_is_not_learned_a_lasting_delay_is(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    int64_t t = 1 * S;
    for (int b = 0; b < GUARD_BUCKETS; b++)
        t = add_bucket(&g, t + 1, 200, fast);
    assert_true(guard_value(&g, t) == 300000);
    for (int stall = 0; stall < 2; stall++) {
        t = add_bucket(&g, t + 1, 200, stalled);
        assert_true(guard_value(&g, t) == 300000);
    }
    t = add_bucket(&g, t + 1, 200, stalled);   /* the third: lasting */
    assert_true(guard_value(&g, t) == 70 * MS);
    for (int b = 0; b < 2; b++) {
        t = add_bucket(&g, t + 1, 200, fast);
        assert_true(guard_value(&g, t) == 70 * MS);
    }
    t = add_bucket(&g, t + 1, 200, fast);       /* three of the last five fast */
    assert_true(guard_value(&g, t) == 300000);
}

static void test_old_overruns_age_out(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    int64_t t = 1 * S;
    for (int b = 0; b < GUARD_BUCKETS; b++)
        t = add_bucket(&g, t + 1, 200, stalled);
    assert_true(guard_value(&g, t) == 70 * MS);
    /* Nothing answered since (a guard this large may admit nothing): it
     * must not stay large forever. */
    assert_true(guard_value(&g, t + GUARD_MAX_AGE_NS + GUARD_REFIT_NS) == 0);
}

static void on_complete(struct infer_item *it) { (void)it; }

/* A one-row request arriving now with a budget of budget_ns. */
static void item_with_budget(struct infer_item *it, int64_t budget_ns)
{
    memset(it, 0, sizeof *it);
    it->rows = 1;
    it->complete = on_complete;
    it->t_arrival_ns = now_ns();
    it->deadline_ns = it->t_arrival_ns + budget_ns;
}

static void test_batcher_plans_early_by_the_guard(void **state)
{
    (void)state;
    struct model_batching c;
    memset(&c, 0, sizeof c);
    c.max_batch_size = 4;
    c.max_queue_delay_us = 0;
    c.max_queue_size = 100;
    c.default_priority = 1;
    c.priority_aging_ms = 1000;
    strcpy(c.policy, "deadline");
    struct error err = {0};
    struct batcher *b = batcher_new("m", &c, 1, &err);
    assert_non_null(b);
    batcher_seed(b, 0, 1, 0, 0, 1 * MS);   /* exec(1) ~= 1 ms */
    batcher_seed(b, 0, 4, 0, 0, 1 * MS);
    /* A budget of 10 ms is admitted, and its planned finish stamped. */
    struct infer_item it;
    item_with_budget(&it, 10 * MS);
    assert_int_equal(batcher_submit(b, &it, &err), 0);
    struct batch out;
    int64_t wake;
    assert_int_equal(batcher_try_next(b, 0, &out, &wake), 1);
    assert_true(it.t_planned_ns >= it.t_dequeue_ns + 1 * MS);
    assert_true(batcher_guard_ns(b) == 0);
    /* Answers keep leaving 20 ms after their plan, over three buckets of
     * answers: the guard learns it ... */
    struct infer_item done = it;
    for (int i = 0; i < 3 * GUARD_MIN_SAMPLES; i++) {
        int64_t at = it.t_planned_ns + (i / GUARD_MIN_SAMPLES) * (GUARD_BUCKET_NS + 1);
        if (i % GUARD_MIN_SAMPLES == GUARD_MIN_SAMPLES - 1)
            at += GUARD_BUCKET_NS;   /* the bucket's last: closes it */
        done.t_planned_ns = at - 20 * MS;
        batcher_answered(b, &done, at);
    }
    assert_true(batcher_guard_ns(b) == 20 * MS);
    /* ... and a 10 ms budget can no longer be met: refused at once. */
    struct infer_item late;
    item_with_budget(&late, 10 * MS);
    assert_int_equal(batcher_submit(b, &late, &err), -BG_EDEADLINE);
    assert_non_null(strstr(err.msg, "overrun"));
    /* A 100 ms budget still fits. */
    late.deadline_ns = late.t_arrival_ns + 100 * MS;
    assert_int_equal(batcher_submit(b, &late, &err), 0);
    batcher_close(b);
    batcher_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_zero_until_enough_samples),
        cmocka_unit_test(test_p99_of_a_bucket),
        cmocka_unit_test(test_quantiles_match_sorting),
        cmocka_unit_test(test_a_first_stall_is_not_learned),
        cmocka_unit_test(test_early_answers_give_zero),
        cmocka_unit_test(test_a_stall_is_not_learned_a_lasting_delay_is),
        cmocka_unit_test(test_old_overruns_age_out),
        cmocka_unit_test(test_batcher_plans_early_by_the_guard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
