/* test_admit.c - per-tenant admission (gateway/admit.c) on an injected
 * clock: max_inflight, the rows-per-second bucket (one second deep, at
 * least one request), Retry-After as computed, threads racing for the
 * last place, and the LLM token quotas (a minute's window, a UTC day). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/admit.h"

#define S 1000000000LL
/* A start far from 0, as now_ns is. */
#define T0 (1000 * S)

static struct tenants_config tc;

/* admit_tokens_used's day. */
static int64_t day_used(struct admit *a, int tenant, int64_t unix_s)
{
    int64_t minute, day;
    admit_tokens_used(a, tenant, T0, unix_s, &minute, &day);
    return day;
}

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
    assert_non_null(strstr(why.msg, "the request's 1 row fit in 250 ms"));
    /* A quarter second later one row fits, two do not. */
    assert_int_equal(admit_enter(a, 1, 2, T0 + S / 4, &why), -BG_ETENANTLIMIT);
    /* The bucket is short of a few microseconds' worth: the message says so
     * rather than "0.000 s". */
    assert_int_equal(admit_enter(a, 1, 1, T0 + S / 4 - 1000, &why), -BG_ETENANTLIMIT);
    assert_non_null(strstr(why.msg, "fit in under 1 ms"));
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
    assert_non_null(strstr(why.msg, "the request's 8 rows fit in 4.500 s"));
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

/* A request admitted and then refused before it was computed (queue full)
 * gives its rows back: they were spent, and its retry met the rate limit
 * as well as the full queue. A refund gives no credit past the bucket. */
static void test_rate_refund(void **state)
{
    (void)state;
    tenants(0, 1);   /* 1 row a second */
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    struct admit_refusal why;
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), 0);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), -BG_ETENANTLIMIT);
    admit_refund(a, 1, 1);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), 0);
    assert_int_equal(admit_enter(a, 1, 1, T0, &why), -BG_ETENANTLIMIT);
    /* Refunds while idle do not bank: a second later, one row, not three. */
    admit_refund(a, 1, 1);
    admit_refund(a, 1, 1);
    admit_refund(a, 1, 1);
    assert_int_equal(admit_enter(a, 1, 1, T0 + 1000000000LL, &why), 0);
    assert_int_equal(admit_enter(a, 1, 1, T0 + 1000000000LL, &why), -BG_ETENANTLIMIT);
    admit_refund(a, 0, 5);   /* a tenant without a rate: nothing */
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


/* A minute-long trace of calls at three times tokens_per_minute: every
 * 60 s window of what was used stays within the quota (estimates exact),
 * and within 5% when calls use 10% more than estimated (the excess of the
 * calls in flight at once); Retry-After brings a refused caller back when
 * the call fits. */
static void run_quota_trace(double overuse, double *worst, int *refused_out)
{
    tenants(0, 0);
    tc.t[1].tokens_per_minute = 60000;
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    assert_non_null(a);
    int64_t used_at[4000];
    int64_t used_n[4000];
    int nused = 0, refused = 0;
    /* Calls of 500 tokens every 0.1 s for 5 minutes (300,000 tokens a
     * minute offered), each taking 1 s; at most 10 in flight. */
    struct { int64_t end, est, used; } fl[64];
    int nfl = 0;
    for (int64_t t = T0; t < T0 + 300 * S; t += S / 10) {
        for (int i = 0; i < nfl;) {
            if (fl[i].end <= t) {
                admit_tokens_leave(a, 1, fl[i].est, fl[i].used, fl[i].end, 1700000000);
                used_at[nused] = fl[i].end;
                used_n[nused++] = fl[i].used;
                fl[i] = fl[--nfl];
            } else {
                i++;
            }
        }
        struct admit_refusal why;
        if (admit_tokens_enter(a, 1, 500, t, 1700000000, &why) == 0) {
            assert_true(nfl < 64);
            fl[nfl].end = t + S;
            fl[nfl].est = 500;
            fl[nfl++].used = (int64_t)(500 * (1 + overuse));
        } else {
            refused++;
            assert_string_equal(why.reason, "tokens_per_minute");
            assert_true(why.retry_after_s >= 1 && why.retry_after_s <= 60);
            assert_false(why.no_retry);
        }
    }
    /* The worst 60 s window over whole seconds. */
    *worst = 0;
    for (int64_t w = T0; w + 60 * S <= T0 + 301 * S; w += S) {
        int64_t sum = 0;
        for (int i = 0; i < nused; i++)
            if (used_at[i] >= w && used_at[i] < w + 60 * S)
                sum += used_n[i];
        if ((double)sum / 60000 > *worst)
            *worst = (double)sum / 60000;
    }
    *refused_out = refused;
    admit_free(a);
}

static void test_tokens_per_minute_holds(void **state)
{
    (void)state;
    double worst;
    int refused;
    run_quota_trace(0, &worst, &refused);
    printf("tokens_per_minute, exact estimates: worst 60 s window %.3f of the quota, %d refused\n",
           worst, refused);
    assert_true(worst <= 1.0);
    assert_true(worst >= 0.9);   /* and the quota is used, not starved */
    assert_true(refused > 0);
    run_quota_trace(0.1, &worst, &refused);
    printf("tokens_per_minute, 10%% over estimates: worst window %.3f of the quota\n", worst);
    assert_true(worst <= 1.05);
}

static void test_tokens_per_day(void **state)
{
    (void)state;
    tenants(0, 0);
    tc.t[1].tokens_per_day = 1000;
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    struct admit_refusal why;
    int64_t day = 1700000000 / 86400 * 86400;   /* a midnight, UTC */
    assert_int_equal(admit_tokens_enter(a, 1, 600, T0, day + 100, &why), 0);
    /* The second call would pass the day's quota with the first in flight. */
    assert_int_equal(admit_tokens_enter(a, 1, 600, T0, day + 100, &why), -BG_ETENANTLIMIT);
    assert_string_equal(why.reason, "tokens_per_day");
    /* The message says what the call would need, not only what is used. */
    assert_non_null(strstr(why.msg, "the call's estimate of 600"));
    assert_true(why.no_retry);
    assert_int_equal(why.retry_after_s, 86400 - 100);
    admit_tokens_leave(a, 1, 600, 300, T0 + S, day + 101);   /* used less than reserved */
    assert_int_equal(admit_tokens_enter(a, 1, 600, T0 + S, day + 101, &why), 0);
    admit_tokens_leave(a, 1, 600, 700, T0 + 2 * S, day + 102);   /* 1000 used */
    assert_int_equal(admit_tokens_enter(a, 1, 10, T0 + 3 * S, day + 103, &why), -BG_ETENANTLIMIT);
    /* The next UTC day starts from zero; another tenant never counted. */
    assert_int_equal(admit_tokens_enter(a, 1, 10, T0 + 4 * S, day + 86400, &why), 0);
    assert_int_equal(admit_tokens_enter(a, 0, 1 << 20, T0, day, &why), 0);
    assert_false(admit_has_token_quota(a, 0));
    assert_true(admit_has_token_quota(a, 1));
    admit_free(a);
}

static void test_tokens_larger_than_the_quota(void **state)
{
    (void)state;
    tenants(0, 0);
    tc.t[1].tokens_per_minute = 100;
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    struct admit_refusal why;
    /* Into an empty window only: admitted, never refused for good. */
    assert_int_equal(admit_tokens_enter(a, 1, 500, T0, 0, &why), 0);
    admit_tokens_leave(a, 1, 500, 500, T0 + S, 0);
    assert_int_equal(admit_tokens_enter(a, 1, 500, T0 + 2 * S, 0, &why), -BG_ETENANTLIMIT);
    assert_int_equal(why.retry_after_s, 59);
    assert_int_equal(admit_tokens_enter(a, 1, 500, T0 + 61 * S, 0, &why), 0);
    admit_free(a);
}

/* What a previous process counted, carried over a restart (from the usage
 * ledger's minute rows: admit_restore.c). */
static void test_tokens_restored(void **state)
{
    (void)state;
    tenants(0, 0);
    tc.t[1].tokens_per_day = 1000;
    snprintf(tc.t[2].name, sizeof tc.t[2].name, "minute");
    tc.t[2].tokens_per_minute = 100;
    tc.n = 3;
    struct error err = {0};
    struct admit *a = admit_new(&tc, &err);
    struct admit_refusal why;
    int64_t day = 1700000000 / 86400 * 86400;
    int64_t now = day + 7200;
    /* Today's 900 count toward the day; yesterday's 500 do not. */
    admit_tokens_restore(a, 1, 900, 3600, T0, now);
    admit_tokens_restore(a, 1, 500, 7300, T0, now);
    assert_int_equal(day_used(a, 1, now), 900);
    assert_int_equal(admit_tokens_enter(a, 1, 200, T0, now, &why), -BG_ETENANTLIMIT);
    assert_string_equal(why.reason, "tokens_per_day");
    assert_int_equal(admit_tokens_enter(a, 1, 100, T0, now, &why), 0);
    /* The minute: tokens of 30 s ago age out 30 s from now, those of a
     * minute ago or more are out already. */
    admit_tokens_restore(a, 2, 100, 30, T0, now);
    admit_tokens_restore(a, 2, 1000, 60, T0, now);
    int64_t minute, today;
    admit_tokens_used(a, 2, T0, now, &minute, &today);
    assert_true(minute == 100 && today == 1100);
    admit_tokens_used(a, 2, T0 + 30 * S, now + 30, &minute, &today);
    assert_true(minute == 0 && today == 1100);
    assert_int_equal(admit_tokens_enter(a, 2, 10, T0, now, &why), -BG_ETENANTLIMIT);
    assert_string_equal(why.reason, "tokens_per_minute");
    assert_int_equal(why.retry_after_s, 30);
    assert_int_equal(admit_tokens_enter(a, 2, 10, T0 + 29 * S, now + 29, &why), -BG_ETENANTLIMIT);
    assert_int_equal(admit_tokens_enter(a, 2, 100, T0 + 30 * S, now + 30, &why), 0);
    /* A monotonic clock younger than the tokens' age still places them. */
    struct admit *b = admit_new(&tc, &err);
    admit_tokens_restore(b, 2, 100, 30, 5 * S, now);
    assert_int_equal(admit_tokens_enter(b, 2, 10, 5 * S, now, &why), -BG_ETENANTLIMIT);
    assert_int_equal(why.retry_after_s, 30);
    assert_int_equal(admit_tokens_enter(b, 2, 10, 35 * S, now + 30, &why), 0);
    /* A tenant without token quotas keeps nothing; nonsense is ignored. */
    admit_tokens_restore(a, 0, 100, 0, T0, now);
    admit_tokens_restore(a, 7, 100, 0, T0, now);
    admit_tokens_restore(a, 1, -5, 0, T0, now);
    admit_tokens_restore(a, 1, 5, -1, T0, now);
    assert_int_equal(day_used(a, 0, now), 0);
    assert_int_equal(day_used(a, 1, now), 900);
    assert_int_equal(day_used(a, 1, day + 86400), 0);
    admit_free(b);
    admit_free(a);
}

static struct state_usage_row ledger_row(int64_t start, const char *tenant, const char *model,
                                         const char *cls, int64_t tokens)
{
    struct state_usage_row r = {.start = start, .requests = 1, .rows = tokens, .busy_s = 1};
    snprintf(r.tenant, sizeof r.tenant, "%s", tenant);
    snprintf(r.model, sizeof r.model, "%s", model);
    snprintf(r.cls, sizeof r.cls, "%s", cls);
    snprintf(r.device, sizeof r.device, "http://127.0.0.1:1");
    return r;
}

static bool counted_pool(const char *model, void *arg)
{
    (void)arg;
    return strcmp(model, "pool") == 0;
}

/* The usage ledger's rows read back: today's online rows of pools, per
 * tenant with quotas; not batch lines, not other models' inferences, not
 * yesterday, not unknown tenants. */
static void test_tokens_restored_from_the_ledger(void **state)
{
    (void)state;
    char dir[] = "/tmp/batchgate-admit-XXXXXX";
    assert_non_null(mkdtemp(dir));
    struct error err = {0};
    struct state *st;
    assert_int_equal(state_open(dir, &st, &err), 0);
    int64_t day = 1700000000 / 86400 * 86400;
    int64_t now = day + 7230;                 /* 30 s into minute 120 */
    struct state_usage_row rows[] = {
        ledger_row(day + 600, "lim", "pool", "online", 400),
        ledger_row(day + 7200, "lim", "pool", "online", 50),     /* this minute */
        ledger_row(day + 7140, "lim", "pool", "online", 30),     /* the last one */
        ledger_row(day + 7200, "lim", "pool", "offline", 5000),  /* batch lines */
        ledger_row(day + 7200, "lim", "dense", "online", 7000),  /* inferences */
        ledger_row(day - 60, "lim", "pool", "online", 9000),     /* yesterday */
        ledger_row(day + 7200, "gone", "pool", "online", 9000),  /* not configured now */
        ledger_row(day + 7200, "default", "pool", "online", 9000),   /* no quota */
    };
    assert_int_equal(state_usage_add(st, rows, 8, &err), 0);
    tenants(0, 0);
    tc.t[1].tokens_per_day = 1000;
    tc.t[1].tokens_per_minute = 100;
    struct admit *a = admit_new(&tc, &err);
    assert_int_equal(admit_restore_ledger(a, &tc, st, counted_pool, NULL, T0, now, &err), 3);
    assert_int_equal(day_used(a, 1, now), 480);
    assert_int_equal(day_used(a, 0, now), 0);
    /* The minute holds 80: the last minute's 30 until 30 s from now. */
    struct admit_refusal why;
    assert_int_equal(admit_tokens_enter(a, 1, 21, T0, now, &why), -BG_ETENANTLIMIT);
    assert_string_equal(why.reason, "tokens_per_minute");
    assert_int_equal(admit_tokens_enter(a, 1, 20, T0, now, &why), 0);
    admit_tokens_leave(a, 1, 20, 0, T0, now);
    assert_int_equal(admit_tokens_enter(a, 1, 50, T0 + 30 * S, now + 30, &why), 0);
    admit_free(a);
    /* Without token quotas the ledger is not read. */
    tenants(0, 0);
    a = admit_new(&tc, &err);
    assert_int_equal(admit_restore_ledger(a, &tc, st, counted_pool, NULL, T0, now, &err), 0);
    admit_free(a);
    /* A restart 30 s after midnight: yesterday's last minute (9000 tokens)
     * is in the minute's window, not in today's count (the window began
     * empty: nothing before midnight was read). */
    tenants(0, 0);
    tc.t[1].tokens_per_day = 100000;
    tc.t[1].tokens_per_minute = 10000;
    a = admit_new(&tc, &err);
    assert_int_equal(admit_restore_ledger(a, &tc, st, counted_pool, NULL, T0, day + 30, &err), 1);
    assert_int_equal(day_used(a, 1, day + 30), 0);
    assert_int_equal(admit_tokens_enter(a, 1, 1001, T0, day + 30, &why), -BG_ETENANTLIMIT);
    assert_string_equal(why.reason, "tokens_per_minute");
    admit_free(a);
    state_close(st);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
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
        cmocka_unit_test(test_rate_refund),
        cmocka_unit_test(test_max_inflight_under_threads),
        cmocka_unit_test(test_tokens_per_minute_holds),
        cmocka_unit_test(test_tokens_per_day),
        cmocka_unit_test(test_tokens_larger_than_the_quota),
        cmocka_unit_test(test_tokens_restored),
        cmocka_unit_test(test_tokens_restored_from_the_ledger),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
