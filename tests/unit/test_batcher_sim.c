/* test_batcher_sim.c - property tests of the batcher's queue and policy on a
 * virtual clock: thousands of random arrival traces (seeded; the seed is
 * printed on failure, BG_TEST_SEED replays it). For every trace, under both
 * policies: every request answered exactly once, no batch over
 * max_batch_size, no request computed after its deadline (deadline policy,
 * exact execution times, on instances of equal or unequal speed),
 * priority order respected (aging aside), and the queue never holds a
 * request past the instant it became hopeless. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "batcher/sim.h"
#include "common/error.h"

#define MS 1000000LL

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double urand(uint64_t *s) { return (double)(rnd(s) >> 11) / 9007199254740992.0; }

/* A random model and trace for `seed`: offered load from load_lo to load_hi
 * of what the instances do at full batches; budgets on about 2 of 3
 * requests when `budgets`; with `mixed`, half of the traces of several
 * instances have instances of unequal speed. The caller frees the
 * requests. */
static struct sim_request *make_trace(uint64_t seed, const char *policy, double load_lo,
                                      double load_hi, bool budgets, bool mixed,
                                      struct sim_config *c, int *np)
{
    uint64_t s = seed * 2654435761u + 1;
    memset(c, 0, sizeof *c);
    c->batching.max_batch_size = 1 + (int)(rnd(&s) % 32);
    c->batching.max_queue_delay_us = (int64_t)(rnd(&s) % 5000);
    c->batching.max_queue_size = 1 + (int)(rnd(&s) % 200);
    c->batching.default_priority = 1 + (int)(rnd(&s) % 2);
    c->batching.priority_aging_ms = rnd(&s) % 2 ? 50 : 0;
    if (rnd(&s) % 3 == 0) {
        c->batching.npreferred = 1;
        c->batching.preferred[0] = 1 + (int)(rnd(&s) % (uint64_t)c->batching.max_batch_size);
    }
    snprintf(c->batching.policy, sizeof c->batching.policy, "%s", policy);
    c->instances = 1 + (int)(rnd(&s) % 3);
    c->exec_a_ns = (double)(200000 + rnd(&s) % 2000000);
    c->exec_b_ns = (double)(rnd(&s) % 200000);
    c->check = true;
    /* Instances of unequal speed (a mixed pool): the others 1.5-5.5x the
     * first's time. */
    if (mixed && c->instances > 1 && rnd(&s) % 2)
        c->slow_factor = 1.5 + 4.0 * urand(&s);
    double cap_rows_per_ns =
        c->instances * c->batching.max_batch_size / (c->exec_a_ns + c->exec_b_ns * c->batching.max_batch_size);
    double load = load_lo + (load_hi - load_lo) * urand(&s);
    int n = 50 + (int)(rnd(&s) % 250);
    struct sim_request *r = calloc((size_t)n, sizeof *r);
    int64_t t = 0;
    int max_rows = 1 + (int)(rnd(&s) % (uint64_t)c->batching.max_batch_size);
    double mean_rows = (1 + max_rows) / 2.0;
    bool bursty = rnd(&s) % 4 == 0;
    for (int i = 0; i < n; i++) {
        double gap = -mean_rows / (cap_rows_per_ns * load) * __builtin_log(1.0 - urand(&s));
        if (bursty && rnd(&s) % 20 == 0)
            gap += 20.0 * MS;
        t += (int64_t)gap;
        r[i].arrival_ns = t;
        r[i].rows = 1 + (int)(rnd(&s) % (uint64_t)max_rows);
        uint64_t bud = rnd(&s);
        r[i].budget_ns = budgets && bud % 3 ? (int64_t)(1 + rnd(&s) % 50) * MS : 0;
        r[i].priority = (int)(rnd(&s) % 4);
    }
    *np = n;
    return r;
}

static int run_trace(uint64_t seed, const char *policy, char *why, size_t cap)
{
    struct sim_config c;
    int n;
    struct sim_request *r = make_trace(seed, policy, 0.2, 3.0, true, true, &c, &n);
    struct sim_stats st;
    int rc = sim_run(&c, r, n, &st);
    if (rc)
        snprintf(why, cap, "%s", st.violation);
    free(r);
    return rc;
}

static uint64_t base_seed(void)
{
    const char *env = getenv("BG_TEST_SEED");
    if (env)
        return strtoull(env, NULL, 10);
    return (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
}

static void run_many(const char *policy)
{
    uint64_t seed0 = base_seed();
    int traces = getenv("BG_TEST_SEED") ? 1 : 3000;
    for (int i = 0; i < traces; i++) {
        char why[256] = "";
        uint64_t seed = seed0 + (uint64_t)i;
        if (run_trace(seed, policy, why, sizeof why) != 0)
            fail_msg("policy %s, trace seed %llu (replay with BG_TEST_SEED=%llu): %s", policy,
                     (unsigned long long)seed, (unsigned long long)seed, why);
    }
}

static void test_deadline_policy_properties(void **state)
{
    (void)state;
    run_many("deadline");
}

static void test_fixed_delay_properties(void **state)
{
    (void)state;
    run_many("fixed_delay");
}

static void test_adaptive_policy_properties(void **state)
{
    (void)state;
    run_many("adaptive");
}

/* Requests that miss their deadline: answered 504, or computed late. */
static int count_misses(const struct sim_request *r, int n)
{
    int m = 0;
    for (int i = 0; i < n; i++)
        if (r[i].budget_ns && (r[i].status == BG_EDEADLINE ||
                               (r[i].status == 0 && r[i].done_ns > r[i].arrival_ns + r[i].budget_ns)))
            m++;
    return m;
}

static int64_t rows_computed(const struct sim_request *r, int n)
{
    int64_t rows = 0;
    for (int i = 0; i < n; i++)
        if (r[i].status == 0)
            rows += r[i].rows;
    return rows;
}

/* (a) Sparse traffic: 200-400 ms between requests of 1-4 rows, so the
 * measured rate expects far less than one row within any max_queue_delay
 * (at most 5 ms here). Waiting cannot bring company: every request starts
 * the instant it arrives. The former policy, on the same traces, waits out
 * its delay: the check has teeth. */
static void test_adaptive_never_waits_for_nothing(void **state)
{
    (void)state;
    uint64_t seed0 = base_seed();
    int traces = getenv("BG_TEST_SEED") ? 1 : 3000;
    int64_t old_waited = 0;
    for (int k = 0; k < traces; k++) {
        uint64_t seed = seed0 + (uint64_t)k, s = seed * 2654435761u + 7;
        struct sim_config c;
        memset(&c, 0, sizeof c);
        c.batching.max_batch_size = 4 + (int)(rnd(&s) % 60);
        c.batching.max_queue_delay_us = 1 + (int64_t)(rnd(&s) % 5000);
        c.batching.max_queue_size = 100;
        c.batching.default_priority = 1;
        c.batching.priority_aging_ms = 1000;
        c.instances = 1 + (int)(rnd(&s) % 3);
        c.exec_a_ns = (double)(100000 + rnd(&s) % 20000000);   /* setups up to 20 ms */
        c.exec_b_ns = (double)(rnd(&s) % 200000);
        c.check = true;
        int n = 20 + (int)(rnd(&s) % 80);
        struct sim_request *r = calloc((size_t)n, sizeof *r);
        int64_t t = 0;
        for (int i = 0; i < n; i++) {
            t += (int64_t)(200 + rnd(&s) % 200) * MS;
            r[i].arrival_ns = t;
            r[i].rows = 1 + (int)(rnd(&s) % 4);
            r[i].budget_ns = rnd(&s) % 2 ? 200 * MS : 0;
        }
        struct sim_stats st;
        snprintf(c.batching.policy, sizeof c.batching.policy, "adaptive");
        if (sim_run(&c, r, n, &st) != 0)
            fail_msg("trace seed %llu (BG_TEST_SEED=%llu): %s", (unsigned long long)seed,
                     (unsigned long long)seed, st.violation);
        for (int i = 0; i < n; i++)
            if (r[i].start_ns != r[i].arrival_ns)
                fail_msg("trace seed %llu (BG_TEST_SEED=%llu): request %d of %d rows waited "
                         "%.3f ms on an idle instance for company that could not come",
                         (unsigned long long)seed, (unsigned long long)seed, i, r[i].rows,
                         (double)(r[i].start_ns - r[i].arrival_ns) / MS);
        snprintf(c.batching.policy, sizeof c.batching.policy, "deadline");
        assert_int_equal(sim_run(&c, r, n, &st), 0);
        for (int i = 0; i < n; i++)
            old_waited += r[i].start_ns - r[i].arrival_ns;
        free(r);
    }
    assert_true(old_waited > 0);
}

/* (b) and (c): the random traces of the properties above, from 0.2x to 3x
 * of capacity, under the former fixed wait and the adaptive one. Waiting
 * less never costs deadlines overall (and no computed request is late:
 * sim_run checks it on every trace), and at 1x-3x of capacity the adaptive
 * policy computes as many rows per second as the fixed waits. Counted over
 * all traces: a single trace may go either way, since a different batch
 * early on changes which requests an overload sheds later. About 1 trace in
 * 500 computes over 10% fewer rows per second: short overload bursts from
 * cold on 2-3 instances with a queue of a few dozen requests, where the
 * first requests go out alone (no rate is known before two arrivals, and
 * each idle instance decides for itself) and the small queue then sheds
 * 429s; the fixed wait collects full batches from the start. */
static void test_adaptive_against_fixed_wait(void **state)
{
    (void)state;
    uint64_t seed0 = base_seed();
    int traces = getenv("BG_TEST_SEED") ? 1 : 2000;
    long miss_old = 0, miss_new = 0, worse = 0, slow = 0;
    double tput_old = 0, tput_new = 0, tput_fixed = 0, worst = 10;
    for (int k = 0; k < traces; k++) {
        uint64_t seed = seed0 + (uint64_t)k;
        struct sim_config c;
        struct sim_stats st;
        int n;
        /* deadlines */
        struct sim_request *r = make_trace(seed, "deadline", 0.2, 3.0, true, false, &c, &n);
        assert_int_equal(sim_run(&c, r, n, &st), 0);
        int mo = count_misses(r, n);
        snprintf(c.batching.policy, sizeof c.batching.policy, "adaptive");
        if (sim_run(&c, r, n, &st) != 0)
            fail_msg("BG_TEST_SEED=%llu: %s", (unsigned long long)seed, st.violation);
        int mn = count_misses(r, n);
        miss_old += mo;
        miss_new += mn;
        worse += mn > mo;
        free(r);
        /* throughput at high load, no deadlines */
        r = make_trace(seed, "deadline", 1.0, 3.0, false, false, &c, &n);
        assert_int_equal(sim_run(&c, r, n, &st), 0);
        double to = (double)rows_computed(r, n) / (double)st.span_ns;
        snprintf(c.batching.policy, sizeof c.batching.policy, "fixed_delay");
        assert_int_equal(sim_run(&c, r, n, &st), 0);
        double tf = (double)rows_computed(r, n) / (double)st.span_ns;
        snprintf(c.batching.policy, sizeof c.batching.policy, "adaptive");
        assert_int_equal(sim_run(&c, r, n, &st), 0);
        double tn = (double)rows_computed(r, n) / (double)st.span_ns;
        tput_old += to;
        tput_fixed += tf;
        tput_new += tn;
        double ratio = tn / (to > tf ? to : tf);
        if (ratio < worst)
            worst = ratio;
        slow += ratio < 0.9;
        free(r);
    }
    print_message("adaptive / former over %d traces: deadline misses %ld / %ld (%ld traces "
                  "worse); rows/s at 1-3x load %.4f (vs fixed_delay %.4f), worst trace %.3f, "
                  "%ld traces under 0.9\n",
                  traces, miss_new, miss_old, worse, tput_new / tput_old, tput_new / tput_fixed,
                  worst, slow);
    /* In aggregate over the traces. Since a request held to its very latest
     * start is served rather than expired (the deadline policy holds lone
     * requests exactly that long and used to lose them), the two meet
     * deadlines equally well: over 86 runs of 2000 fresh traces the
     * difference ran from -0.5% to +0.7% of ~29 000 misses, median -0.05%,
     * about 0.25% either way. The bound allows 1.25% (5 times that spread;
     * 0.5% failed one run in 40); a regression is far larger. */
    assert_true(miss_new <= miss_old + miss_old / 80);
    assert_true(tput_new >= tput_old && tput_new >= tput_fixed);
    assert_true(slow * 100 <= traces);
}

/* A low-priority request under a saturating stream of high-priority ones is
 * served: as soon as every request older than it is gone and it has waited
 * priority_aging_ms, whatever still arrives ahead of it in priority. Strict
 * priority alone would starve it (checked: with aging off it is never
 * served before the high-priority stream ends). */
static void test_aging_prevents_starvation(void **state)
{
    (void)state;
    struct sim_config c;
    memset(&c, 0, sizeof c);
    c.batching.max_batch_size = 4;
    c.batching.max_queue_delay_us = 0;
    c.batching.max_queue_size = 100000;
    c.batching.default_priority = 1;
    c.batching.priority_aging_ms = 100;
    snprintf(c.batching.policy, sizeof c.batching.policy, "deadline");
    c.instances = 1;
    c.exec_a_ns = 1 * MS;
    c.exec_b_ns = 0;
    c.check = true;
    int n = 6001;
    struct sim_request *r = calloc((size_t)n, sizeof *r);
    /* 4 rows of priority 1 per 0.9 ms: more than the instance can serve. */
    for (int i = 0; i < n - 1; i++) {
        r[i].arrival_ns = (int64_t)i * 225000;
        r[i].rows = 1;
        r[i].priority = 1;
    }
    r[n - 1] = r[n - 2];
    r[n - 1].arrival_ns += 1;
    int lo = n / 3;
    r[lo].priority = 5;   /* one low-priority request early in the stream */
    struct sim_stats st;
    assert_int_equal(sim_run(&c, r, n, &st), 0);
    struct sim_request low = r[lo];
    int older_waiting = 0;
    for (int i = 0; i < lo; i++)
        if (r[i].start_ns > low.arrival_ns)
            older_waiting++;
    /* Those go first (FIFO within their priority), 4 per 1 ms batch. */
    int64_t drain = (int64_t)(older_waiting + 3) / 4 * MS;
    int64_t bound = (drain > 100 * MS ? drain : 100 * MS) + 2 * MS;
    int64_t wait = low.start_ns - low.arrival_ns;
    if (wait > bound)
        fail_msg("low priority waited %.1f ms; bound max(aging, older backlog) is %.1f ms",
                 (double)wait / MS, (double)bound / MS);
    int64_t last_high = 0;
    for (int i = 0; i < n; i++)
        if (i != lo && r[i].start_ns > last_high)
            last_high = r[i].start_ns;
    assert_true(low.start_ns < last_high);   /* served while the stream still ran */
    /* Without aging: strict priority serves it only after the stream is gone. */
    c.batching.priority_aging_ms = 0;
    assert_int_equal(sim_run(&c, r, n, &st), 0);
    last_high = 0;
    for (int i = 0; i < n; i++)
        if (i != lo && r[i].start_ns > last_high)
            last_high = r[i].start_ns;
    assert_true(r[lo].start_ns >= last_high);
    free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_deadline_policy_properties),
        cmocka_unit_test(test_fixed_delay_properties),
        cmocka_unit_test(test_adaptive_policy_properties),
        cmocka_unit_test(test_adaptive_never_waits_for_nothing),
        cmocka_unit_test(test_adaptive_against_fixed_wait),
        cmocka_unit_test(test_aging_prevents_starvation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
