/* test_ledger.c - the usage ledger's allocation rule (serving/ledger.h,
 * docs/USAGE.md "Who pays for what"): busy time to who used it, idle time
 * to the model's tenants by their shares, the device's price once for the
 * time it held anything, held = busy + idle for every piece. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>

#include "serving/ledger.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-9)

static const struct ledger_piece *find(const struct ledger_piece *p, int n, int inst, int tenant,
                                       int cls)
{
    for (int i = 0; i < n; i++)
        if (p[i].inst == inst && p[i].tenant == tenant && p[i].cls == cls)
            return &p[i];
    return NULL;
}

/* docs/USAGE.md's example: a device at 3.60 an hour (0.001 a second) holds
 * model A (research and prod may use it, shares 0.6 and 0.3) and model B
 * (research only) for a 10-second sample. A ran 4 s: 3 for research, 1 for
 * prod; B ran 2 s of research's job lines. */
static void test_the_documented_example(void **s)
{
    (void)s;
    struct modelstats_tenant_use ua[WORK_TENANTS_MAX] = {0}, ub[WORK_TENANTS_MAX] = {0};
    ua[1].busy_s[0] = 3;
    ua[1].requests[0] = 30;
    ua[1].rows[0] = 90;
    ua[2].busy_s[0] = 1;
    ua[2].requests[0] = 10;
    ua[2].rows[0] = 10;
    ub[1].busy_s[1] = 2;
    ub[1].requests[1] = 200;
    ub[1].rows[1] = 200;
    double wa[WORK_TENANTS_MAX] = {0, 0.6, 0.3}, wb[WORK_TENANTS_MAX] = {0, 0.6, 0};
    struct ledger_inst in[2] = {
        {.held_s = 10, .busy_s = 4, .use = ua, .idle_w = wa},
        {.held_s = 10, .busy_s = 2, .use = ub, .idle_w = wb},
    };
    struct ledger_piece p[16];
    int n = ledger_split(in, 2, 3, 10, 3.6, 0, p, 16);
    assert_int_equal(n, 4);
    const struct ledger_piece *ar = find(p, n, 0, 1, 0), *ap = find(p, n, 0, 2, 0);
    const struct ledger_piece *br = find(p, n, 1, 1, 0), *bo = find(p, n, 1, 1, 1);
    assert_non_null(ar);
    assert_non_null(ap);
    assert_non_null(br);
    assert_non_null(bo);
    NEAR(ar->busy_s, 3);
    NEAR(ar->idle_s, 4);   /* A's 6 idle seconds: 0.6 / 0.9 of them */
    NEAR(ap->busy_s, 1);
    NEAR(ap->idle_s, 2);
    NEAR(br->busy_s, 0);
    NEAR(br->idle_s, 8);   /* B's idle: research's alone, charged online */
    NEAR(bo->busy_s, 2);
    NEAR(bo->idle_s, 0);
    assert_int_equal(ar->requests, 30);
    assert_int_equal(ar->rows, 90);
    assert_int_equal(bo->requests, 200);
    /* 20 held seconds on a device held for 10: each costs half the price. */
    NEAR(ar->cost, 7 * 0.0005);
    NEAR(ap->cost, 3 * 0.0005);
    NEAR(br->cost, 8 * 0.0005);
    NEAR(bo->cost, 2 * 0.0005);
    double total = 0;
    for (int i = 0; i < n; i++)
        total += p[i].cost;
    NEAR(total, 3.6 * 10 / 3600);
}

/* Busy time no batch recorded (an upstream call that failed) goes as idle
 * would; no weights at all: tenant 0 (default) pays; a busy time above the
 * held one raises held (nothing idle, nothing negative). */
static void test_fallbacks(void **s)
{
    (void)s;
    double w[WORK_TENANTS_MAX] = {0, 1, 3};
    struct ledger_inst a = {.held_s = 8, .busy_s = 4, .use = NULL, .idle_w = w};
    struct ledger_piece p[16];
    int n = ledger_split(&a, 1, 3, 8, 0, 0, p, 16);
    assert_int_equal(n, 2);
    const struct ledger_piece *t1 = find(p, n, 0, 1, 0), *t2 = find(p, n, 0, 2, 0);
    NEAR(t1->busy_s, 1);
    NEAR(t1->idle_s, 1);
    NEAR(t2->busy_s, 3);
    NEAR(t2->idle_s, 3);
    NEAR(t1->cost, 0);

    double none[WORK_TENANTS_MAX] = {0};
    struct ledger_inst b = {.held_s = 5, .busy_s = 7, .use = NULL, .idle_w = none};
    n = ledger_split(&b, 1, 3, 10, 3.6, 0, p, 16);
    assert_int_equal(n, 1);
    assert_int_equal(p[0].tenant, 0);
    NEAR(p[0].busy_s, 7);
    NEAR(p[0].idle_s, 0);
    NEAR(p[0].cost, 7 * 0.001);
}

/* Two instances of one model on one device (two slots) share its price;
 * energy follows held time; a sample longer than the wall clock cannot
 * charge more than the wall clock. */
static void test_slots_energy_and_clamp(void **s)
{
    (void)s;
    struct modelstats_tenant_use u[WORK_TENANTS_MAX] = {0};
    u[0].busy_s[0] = 1;
    double w[WORK_TENANTS_MAX] = {1};
    struct ledger_inst in[2] = {
        {.held_s = 2, .busy_s = 2, .use = u, .idle_w = w},
        {.held_s = 2, .busy_s = 1, .use = u, .idle_w = w},
    };
    struct ledger_piece p[8];
    int n = ledger_split(in, 2, 1, 2, 3.6, 40, p, 8);
    assert_int_equal(n, 2);
    NEAR(p[0].cost + p[1].cost, 3.6 * 2 / 3600);
    NEAR(p[0].energy_j + p[1].energy_j, 40);
    NEAR(p[0].energy_j, 20);
    /* held 5 s in a 1-s sample: the device is charged 1 s. */
    in[0].held_s = 5;
    in[0].busy_s = 0.5;
    n = ledger_split(in, 1, 1, 1, 3.6, 0, p, 8);
    assert_int_equal(n, 1);
    NEAR(p[0].cost, 0.001);
    NEAR(p[0].busy_s + p[0].idle_s, 5);
}

/* A sample across a minute's edge is shared by the two minutes by the
 * time each holds (it went whole to its middle's: a minute of one device
 * showed 60.09 s held); counts go whole to the middle's minute; a sample
 * within a minute, or a stall past LEDGER_SPREAD_MAX minutes, is one. */
static void test_spread_over_minutes(void **s)
{
    (void)s;
    struct ledger_piece p = {.requests = 7, .rows = 9, .busy_s = 0.8, .idle_s = 0.2, .cost = 1.0,
                             .energy_j = 10};
    int64_t m[LEDGER_SPREAD_MAX];
    struct ledger_piece q[LEDGER_SPREAD_MAX];
    int n = ledger_spread(119.75, 120.75, &p, m, q);   /* a quarter, then three */
    assert_int_equal(n, 2);
    assert_true(m[0] == 60 && m[1] == 120);
    assert_true(fabs(q[0].busy_s - 0.2) < 1e-9 && fabs(q[1].busy_s - 0.6) < 1e-9);
    assert_true(fabs(q[0].idle_s - 0.05) < 1e-9 && fabs(q[1].idle_s - 0.15) < 1e-9);
    assert_true(fabs(q[0].cost + q[1].cost - 1.0) < 1e-9 && fabs(q[0].energy_j - 2.5) < 1e-9);
    assert_true(q[0].requests == 0 && q[0].rows == 0 && q[1].requests == 7 && q[1].rows == 9);
    /* Sixty one-second samples misaligned with the minute: each minute
     * gets exactly its 60 s of held time. */
    double held[3] = {0};
    for (int k = 0; k < 180; k++) {
        struct ledger_piece one = {.busy_s = 1.0};
        n = ledger_spread(60.4 + k, 61.4 + k, &one, m, q);
        for (int i = 0; i < n; i++)
            if (m[i] >= 120 && m[i] < 240)
                held[(m[i] - 120) / 60] += q[i].busy_s;
    }
    assert_true(fabs(held[0] - 60.0) < 1e-9 && fabs(held[1] - 60.0) < 1e-9);
    n = ledger_spread(121.0, 122.0, &p, m, q);
    assert_true(n == 1 && m[0] == 120 && q[0].busy_s == 0.8 && q[0].requests == 7);
    n = ledger_spread(100.0, 100.0 + 60 * LEDGER_SPREAD_MAX + 30, &p, m, q);
    assert_true(n == 1 && q[0].busy_s == 0.8);
    n = ledger_spread(100.0, 100.0, &p, m, q);
    assert_true(n == 1 && m[0] == 60);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_documented_example),
        cmocka_unit_test(test_fallbacks),
        cmocka_unit_test(test_slots_energy_and_clamp),
        cmocka_unit_test(test_spread_over_minutes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
