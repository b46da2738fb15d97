/* test_admit.c - per-tenant admission (gateway/admit.c) on an injected
 * clock: max_inflight, the rows-per-second bucket (one second deep, at
 * least one request), Retry-After as computed, and threads racing for the
 * last place. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/admit.h"

#define S 1000000000LL
/* A start far from 0, as now_ns is. */
#define T0 (1000 * S)

static struct tenants_config tc;

static void tenants(int max_inflight, double rate)
{
    memset(&tc, 0, sizeof tc);
    snprintf(tc.t[0].name, sizeof tc.t[0].name, "default");
    snprintf(tc.t[1].name, sizeof tc.t[1].name, "lim");
    tc.t[1].max_inflight = max_inflight;
    tc.t[1].rate_rows_per_s = rate;
    tc.n = 2;
}

static void test_unlimited(void **state)
{
    (void)state;
    tenants(0, 0);
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    assert_non_null(a);
    struct admit_refusal why;
    for (int i = 0; i < 10000; i++)
        assert_int_equal(admit_enter(a, 1, 64, T0, &why), 0);
    assert_int_equal(admit_inflight(a, 1), 0);   /* not counted without a limit */
    admit_free(a);
}

static void test_max_inflight(void **state)
{
    (void)state;
    tenants(2, 0);
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    struct admit_refusal why;
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), 0);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), 0);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), -BG_ETENANTLIMIT);
    assert_string_equal(why.reason, "max_inflight");
    assert_int_equal(why.retry_after_s, 1);
    assert_non_null(strstr(why.msg, "lim"));
    assert_int_equal(admit_inflight(a, 1), 2);
    /* Other tenants are not held by it. */
    assert_int_equal(admit_enter(a, 0, 1, T0, &why), 0);
    admit_leave(a, 1);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), 0);
    admit_leave(a, 1);
    admit_leave(a, 1);
    assert_int_equal(admit_inflight(a, 1), 0);
    admit_free(a);
}

static void test_rate_bucket(void **state)
{
    (void)state;
    tenants(0, 4);   /* 4 rows/s: the bucket holds 4 */
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    struct admit_refusal why;
    assert_int_equal(admit_enter(a, 1, 3, T0, &why), 0);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), 0);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), -BG_ETENANTLIMIT);
    assert_string_equal(why.reason, "rate_rows_per_s");
    assert_int_equal(why.retry_after_s, 1);       /* 0.25 s, rounded up */
    /* A quarter second later one row fits, two do not. */
    assert_int_equal(admit_enter(a, 1, 2, T0 + S / 4, &why), -BG_ETENANTLIMIT);
    assert_int_equal(admit_enter(a, 1, 1, T0 + S / 4, &why), 0);
    /* Idle for long: the bucket is full again, and no fuller than one second's worth. */
    assert_int_equal(admit_enter(a, 1, 4, T0 + 100 * S, &why), 0);
    assert_int_equal(admit_enter(a, 1, 1, T0 + 100 * S, &why), -BG_ETENANTLIMIT);
    admit_free(a);
}

/* A request larger than a second's worth passes a full bucket (it must pass
 * some time) and pays after: the next waits for its debt. */
static void test_rate_large_request(void **state)
{
    (void)state;
    tenants(0, 1);
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    struct admit_refusal why;
    assert_int_equal(admit_enter(a, 1, 8, T0, &why), 0);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), -BG_ETENANTLIMIT);
    assert_int_equal(why.retry_after_s, 8);
    assert_int_equal(admit_enter(a, 1, 8, T0 + 3 * S + S / 2, &why), -BG_ETENANTLIMIT);
    assert_int_equal(why.retry_after_s, 5);       /* 4.5 s, rounded up */
    assert_int_equal(admit_enter(a, 1, 1, T0 + 8 * S, &why), 0);
    admit_free(a);
}

/* The long-run rate holds: over 100 s of requests every 10 ms, 2 rows each,
 * at 50 rows/s, about 5000 rows pass (plus the first second's bucket). */
static void test_rate_long_run(void **state)
{
    (void)state;
    tenants(0, 50);
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    struct admit_refusal why;
    int rows = 0;
    for (int64_t t = 0; t < 100 * S; t += S / 100)
        if (admit_enter(a, 1, 2, T0 + t, &why) == 0)
            rows += 2;
    assert_in_range(rows, 5000, 5052);
    admit_free(a);
}

/* Both limits: a request the rate refuses gives its in-flight place back. */
static void test_rate_refusal_gives_back_the_place(void **state)
{
    (void)state;
    tenants(1, 1);
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    struct admit_refusal why;
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), 0);
    admit_leave(a, 1);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), -BG_ETENANTLIMIT);
    assert_string_equal(why.reason, "rate_rows_per_s");
    assert_int_equal(admit_inflight(a, 1), 0);
    admit_free(a);
}

struct racer {
    struct admit *a;
    _Atomic int *holding, *most;
    int admitted;
};

static void *racer_main(void *arg)
{
    struct racer *r = arg;
    struct admit_refusal why;
    for (int i = 0; i < 200000; i++) {
        if (admit_enter(r->a, 1, 1, T0, &why) != 0)
            continue;
        int h = atomic_fetch_add(r->holding, 1) + 1;
        int m = atomic_load(r->most);
        while (h > m && !atomic_compare_exchange_weak(r->most, &m, h))
            ;
        atomic_fetch_sub(r->holding, 1);
        admit_leave(r->a, 1);
        r->admitted++;
    }
    return NULL;
}

static void test_max_inflight_under_threads(void **state)
{
    (void)state;
    tenants(3, 0);
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    _Atomic int holding = 0, most = 0;
    enum { N = 4 };
    struct racer r[N];
    pthread_t th[N];
    for (int i = 0; i < N; i++) {
        r[i] = (struct racer){a, &holding, &most, 0};
        pthread_create(&th[i], NULL, racer_main, &r[i]);
    }
    int total = 0;
    for (int i = 0; i < N; i++) {
        pthread_join(th[i], NULL);
        total += r[i].admitted;
    }
    assert_true(atomic_load(&most) <= 3);
    assert_true(total > 0);
    assert_int_equal(admit_inflight(a, 1), 0);
    admit_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unlimited),
        cmocka_unit_test(test_max_inflight),
        cmocka_unit_test(test_rate_bucket),
        cmocka_unit_test(test_rate_large_request),
        cmocka_unit_test(test_rate_long_run),
        cmocka_unit_test(test_rate_refusal_gives_back_the_place),
        cmocka_unit_test(test_max_inflight_under_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
