/* test_guard.c - the answer-path guard: the p99 of recent overruns, zero
 * until there are enough of them, never negative, forgetting old ones; and
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

static void test_zero_until_enough_samples(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    assert_true(guard_value(&g, 1 * S) == 0);
    for (int i = 0; i < GUARD_MIN_SAMPLES - 1; i++)
        guard_add(&g, 1 * S, 5 * MS);
    assert_true(guard_value(&g, 2 * S) == 0);   /* refit due (500 ms), still too few */
    guard_add(&g, 2 * S, 5 * MS);
    assert_true(guard_value(&g, 3 * S) == 5 * MS);
}

static void test_p99_of_the_window(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    int64_t t = 10 * S;
    /* 2% slow: the p99 is a slow one. */
    for (int i = 0; i < GUARD_WINDOW; i++)
        guard_add(&g, t, i % 50 == 0 ? 8 * MS : 200000);
    assert_true(guard_value(&g, t + GUARD_REFIT_NS) == 8 * MS);
    /* 0.5% slow: the p99 is a fast one. */
    for (int i = 0; i < GUARD_WINDOW; i++)
        guard_add(&g, t + S, i % 200 == 0 ? 8 * MS : 200000);
    assert_true(guard_value(&g, t + S + GUARD_REFIT_NS) == 200000);
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return (a > b) - (a < b);
}

/* The selection agrees with sorting, on windows with many ties too. */
static void test_quantile_matches_sorting(void **state)
{
    (void)state;
    srand(7);
    for (int trial = 0; trial < 200; trial++) {
        struct guard g;
        guard_init(&g);
        int n = GUARD_MIN_SAMPLES + rand() % (GUARD_WINDOW - GUARD_MIN_SAMPLES + 1);
        int spread = trial % 2 ? 5 : 1000000;
        int64_t v[GUARD_WINDOW];
        for (int i = 0; i < n; i++) {
            v[i] = (int64_t)(rand() % spread) - spread / 10;
            guard_add(&g, 1 * S, v[i]);
        }
        qsort(v, (size_t)n, sizeof *v, cmp_i64);
        int64_t want = v[(int)(GUARD_QUANTILE * (n - 1) + 0.5)];
        assert_true(guard_value(&g, 1 * S + GUARD_REFIT_NS) == (want > 0 ? want : 0));
    }
}

static void test_early_answers_give_zero(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    for (int i = 0; i < 200; i++)
        guard_add(&g, 1 * S, -3 * MS);
    assert_true(guard_value(&g, 2 * S) == 0);
}

static void test_old_overruns_age_out(void **state)
{
    (void)state;
    struct guard g;
    guard_init(&g);
    for (int i = 0; i < 200; i++)
        guard_add(&g, 1 * S, 50 * MS);
    assert_true(guard_value(&g, 2 * S) == 50 * MS);
    /* Nothing answered since (a guard this large may admit nothing): it
     * must not stay large forever. */
    assert_true(guard_value(&g, 1 * S + GUARD_MAX_AGE_NS + GUARD_REFIT_NS) == 0);
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
    batcher_seed(b, 0, 1, 1 * MS);   /* exec(1) ~= 1 ms */
    batcher_seed(b, 0, 4, 1 * MS);
    /* A budget of 10 ms is admitted, and its planned finish stamped. */
    struct infer_item it;
    item_with_budget(&it, 10 * MS);
    assert_int_equal(batcher_submit(b, &it, &err), 0);
    struct batch out;
    int64_t wake;
    assert_int_equal(batcher_try_next(b, 0, &out, &wake), 1);
    assert_true(it.t_planned_ns >= it.t_dequeue_ns + 1 * MS);
    assert_true(batcher_guard_ns(b) == 0);
    /* Answers keep leaving 20 ms after their plan: the guard learns it ... */
    for (int i = 0; i < GUARD_REFIT_EVERY; i++)   /* a refit is due after these */
        batcher_answered(b, &it, it.t_planned_ns + 20 * MS);
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
        cmocka_unit_test(test_p99_of_the_window),
        cmocka_unit_test(test_quantile_matches_sorting),
        cmocka_unit_test(test_early_answers_give_zero),
        cmocka_unit_test(test_old_overruns_age_out),
        cmocka_unit_test(test_batcher_plans_early_by_the_guard),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
