/* test_sim_tokens.c - token budgets (#20) through the simulator
 * (batcher/sim.h): the server's queue, policy and latency model on a
 * virtual clock, with requests of spread lengths on a device whose time is
 * a + b*tokens + c*(sum of squared lengths).
 *
 *   - random token traces (seeded; BG_TEST_SEED replays one) keep every
 *     invariant sim.c checks: answered once, both caps, priorities, no
 *     answer computed past its deadline when the plan can be exact, the
 *     offline rules;
 *   - tokens equal to rows are the row batcher: the same decisions,
 *     request by request;
 *   - with length grouping no request waits more cuts than requests were
 *     queued before it;
 *   - on a spread of 5 to 200 tokens, a token budget serves at least the
 *     goodput of row batching, with nothing computed late; on a padded
 *     device grouping cuts the padding and raises the throughput. */
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

static double urand(uint64_t *s) { return ((double)(rnd(s) >> 11) + 0.5) / 9007199254740992.0; }

static uint64_t base_seed(void)
{
    const char *env = getenv("BG_TEST_SEED");
    if (env)
        return strtoull(env, NULL, 10);
    return (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
}

/* A random model and trace of requests of 1 to 3 texts of 5 to 200
 * tokens each, at 0.2x to 3x of capacity; budgets on 2 of 3, priorities,
 * now and then job lines. The caller frees it. */
static struct sim_request *token_trace(uint64_t seed, const char *policy, struct sim_config *c,
                                       int *np)
{
    uint64_t s = seed * 2654435761u + 1;
    memset(c, 0, sizeof *c);
    c->batching.max_batch_size = 1 + (int)(rnd(&s) % 32);
    c->batching.max_queue_delay_us = (int64_t)(rnd(&s) % 5000);
    c->batching.max_queue_size = 1 + (int)(rnd(&s) % 300);
    c->batching.default_priority = 1 + (int)(rnd(&s) % 2);
    c->batching.priority_aging_ms = rnd(&s) % 2 ? 50 : 0;
    c->batching.max_batch_tokens = rnd(&s) % 4 ? 600 + (int)(rnd(&s) % 4000) : 0;
    c->batching.group_by_length = rnd(&s) % 2;
    if (rnd(&s) % 4 == 0) {
        c->batching.npreferred = 1;
        c->batching.preferred[0] = 1 + (int)(rnd(&s) % (uint64_t)c->batching.max_batch_size);
    }
    snprintf(c->batching.policy, sizeof c->batching.policy, "%s", policy);
    c->instances = 1 + (int)(rnd(&s) % 3);
    c->exec_a_ns = (double)(200000 + rnd(&s) % 2000000);
    c->exec_b_ns = (double)(rnd(&s) % 20000);
    c->exec_c_ns = rnd(&s) % 2 ? (double)(rnd(&s) % 100) : 0;
    c->check = true;
    int rows_max = c->batching.max_batch_size < 3 ? c->batching.max_batch_size : 3;
    double per_req = c->exec_b_ns * 102 * (1 + rows_max) / 2.0 + c->exec_c_ns * 13700;
    double cap = c->instances / (c->exec_a_ns / 8 + per_req);
    double load = 0.2 + 2.8 * urand(&s);
    bool offline = rnd(&s) % 4 == 0;
    int n = 50 + (int)(rnd(&s) % 250);
    struct sim_request *r = calloc((size_t)n, sizeof *r);
    int64_t t = 0;
    for (int i = 0; i < n; i++) {
        t += (int64_t)(-__builtin_log(urand(&s)) / (cap * load));
        r[i].arrival_ns = t;
        r[i].rows = 1 + (int)(rnd(&s) % (uint64_t)rows_max);
        for (int k = 0; k < r[i].rows; k++) {
            int len = 5 + (int)(rnd(&s) % 196);
            r[i].tokens += len;
            r[i].tokens_sq += (int64_t)len * len;
            if (len > r[i].max_len)
                r[i].max_len = len;
        }
        r[i].budget_ns = rnd(&s) % 3 ? (int64_t)(1 + rnd(&s) % 80) * MS : 0;
        r[i].priority = (int)(rnd(&s) % 3);
        r[i].offline = offline && rnd(&s) % 3 == 0;
    }
    *np = n;
    return r;
}

static void run_token_traces(const char *policy, int traces, bool rows_only, bool padded)
{
    uint64_t seed0 = base_seed();
    if (getenv("BG_TEST_SEED"))
        traces = 1;
    for (int i = 0; i < traces; i++) {
        uint64_t seed = seed0 + (uint64_t)i;
        struct sim_config c;
        int n;
        struct sim_request *r = token_trace(seed, policy, &c, &n);
        c.rows_only = rows_only;
        c.padded = padded;
        struct sim_stats st;
        int rc = sim_run(&c, r, n, &st);
        free(r);
        if (rc)
            fail_msg("policy %s%s%s, trace seed %llu (replay with BG_TEST_SEED=%llu): %s", policy,
                     rows_only ? ", rows only" : "", padded ? ", padded" : "",
                     (unsigned long long)seed, (unsigned long long)seed, st.violation);
    }
}

static void test_token_traces_keep_the_invariants(void **state)
{
    (void)state;
    run_token_traces("adaptive", 1500, false, false);
    run_token_traces("deadline", 1500, false, false);
    run_token_traces("fixed_delay", 600, false, false);
    /* The plan cannot be exact here (the device's time is not what the
     * batcher models); the other invariants hold all the same. */
    run_token_traces("adaptive", 400, true, false);
    run_token_traces("adaptive", 400, false, true);
}

/* A row trace (test_batcher_sim's kind) run as rows and again with every
 * request's tokens given equal to its rows, with and without a token cap
 * of max_batch_size: the same batches, request by request. */
static void test_tokens_equal_to_rows_are_the_row_batcher(void **state)
{
    (void)state;
    uint64_t seed0 = base_seed();
    static const char *const policies[] = {"adaptive", "deadline", "fixed_delay"};
    for (int i = 0; i < 900; i++) {
        uint64_t s = (seed0 + (uint64_t)i) * 2654435761u + 1;
        struct sim_config c;
        memset(&c, 0, sizeof c);
        c.batching.max_batch_size = 1 + (int)(rnd(&s) % 32);
        c.batching.max_queue_delay_us = (int64_t)(rnd(&s) % 5000);
        c.batching.max_queue_size = 1 + (int)(rnd(&s) % 200);
        c.batching.default_priority = 1;
        c.batching.priority_aging_ms = rnd(&s) % 2 ? 50 : 0;
        snprintf(c.batching.policy, sizeof c.batching.policy, "%s", policies[i % 3]);
        c.instances = 1 + (int)(rnd(&s) % 3);
        c.exec_a_ns = (double)(200000 + rnd(&s) % 2000000);
        c.exec_b_ns = (double)(rnd(&s) % 200000);
        c.jitter = rnd(&s) % 2 ? 0.2 : 0;
        c.seed = seed0 + (uint64_t)i;
        int n = 50 + (int)(rnd(&s) % 200);
        struct sim_request *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
        int64_t t = 0;
        for (int k = 0; k < n; k++) {
            t += (int64_t)(rnd(&s) % (2 * MS));
            a[k].arrival_ns = t;
            a[k].rows = 1 + (int)(rnd(&s) % (uint64_t)c.batching.max_batch_size);
            a[k].budget_ns = rnd(&s) % 3 ? (int64_t)(1 + rnd(&s) % 50) * MS : 0;
            a[k].priority = (int)(rnd(&s) % 3);
            a[k].offline = rnd(&s) % 7 == 0;
            b[k] = a[k];
            b[k].tokens = a[k].rows;
        }
        struct sim_config cb = c;
        cb.batching.max_batch_tokens = i % 2 ? c.batching.max_batch_size : 0;
        struct sim_stats sa, sb;
        assert_int_equal(sim_run(&c, a, n, &sa), 0);
        assert_int_equal(sim_run(&cb, b, n, &sb), 0);
        for (int k = 0; k < n; k++)
            if (a[k].status != b[k].status || a[k].start_ns != b[k].start_ns ||
                a[k].done_ns != b[k].done_ns || a[k].batch != b[k].batch ||
                a[k].instance != b[k].instance)
                fail_msg("seed %llu (%s, cap %d): request %d went %d/%lld/batch %d as rows, "
                         "%d/%lld/batch %d with tokens", (unsigned long long)(seed0 + i),
                         c.batching.policy, cb.batching.max_batch_tokens, k, a[k].status,
                         (long long)a[k].start_ns, a[k].batch, b[k].status,
                         (long long)b[k].start_ns, b[k].batch);
        assert_true(sa.batches == sb.batches && sa.busy_ns == sb.busy_ns);
        free(a);
        free(b);
    }
}

/* No deadlines, one priority, no aging: the service order is arrival, the
 * anchor of each cut is the oldest request queued, and grouping may only
 * pass a request over while older ones go. So a request goes within as
 * many cuts after it arrived as requests were queued before it. */
static void test_grouping_waits_no_more_cuts_than_requests_before(void **state)
{
    (void)state;
    uint64_t seed0 = base_seed();
    int traces = getenv("BG_TEST_SEED") ? 1 : 600;
    for (int i = 0; i < traces; i++) {
        uint64_t seed = seed0 + (uint64_t)i;
        struct sim_config c;
        int n;
        struct sim_request *r = token_trace(seed, i % 2 ? "adaptive" : "deadline", &c, &n);
        c.batching.max_batch_tokens = 600 + (int)(seed % 2000);   /* holds any request */
        c.batching.group_by_length = true;
        c.batching.priority_aging_ms = 0;
        c.batching.max_queue_size = 100000;
        c.batching.npreferred = 0;
        for (int k = 0; k < n; k++) {
            r[k].budget_ns = 0;
            r[k].priority = 0;
            r[k].offline = false;
        }
        struct sim_stats st;
        if (sim_run(&c, r, n, &st) != 0)
            fail_msg("seed %llu: %s", (unsigned long long)seed, st.violation);
        int64_t *start = calloc((size_t)st.batches, sizeof *start);
        for (int k = 0; k < n; k++) {
            assert_int_equal(r[k].status, 0);
            start[r[k].batch] = r[k].start_ns;
        }
        for (int k = 0; k < n; k++) {
            int ahead = 0, cuts = 0;
            for (int j = 0; j < k; j++)
                ahead += r[j].start_ns >= r[k].arrival_ns;
            for (int b = 0; b < r[k].batch; b++)
                cuts += start[b] >= r[k].arrival_ns;
            if (cuts > ahead)
                fail_msg("seed %llu (replay with BG_TEST_SEED=%llu): request %d (%d tokens) "
                         "waited %d cuts with %d requests before it", (unsigned long long)seed,
                         (unsigned long long)seed, k, r[k].tokens, cuts, ahead);
        }
        free(start);
        free(r);
    }
}

/* Single texts of 5 to 200 tokens, exec = 1 ms + 10 us/token + 5 ns/len^2
 * (bench_token_sim's defaults, 5 s), at `level` of capacity. */
struct outcome {
    int good, late;
    int64_t tokens, cells, span;
};

static struct outcome spread_run(double level, int64_t budget, uint64_t seed, int max_batch,
                                 int max_tokens, bool rows_only, bool group, bool padded)
{
    struct sim_config c;
    memset(&c, 0, sizeof c);
    c.batching.max_batch_size = max_batch;
    c.batching.max_queue_delay_us = 5000;
    c.batching.max_queue_size = 4096;
    c.batching.default_priority = 1;
    c.batching.priority_aging_ms = 1000;
    c.batching.max_batch_tokens = max_tokens;
    c.batching.group_by_length = group;
    snprintf(c.batching.policy, sizeof c.batching.policy, "adaptive");
    c.instances = 1;
    c.exec_a_ns = 1e6;
    c.exec_b_ns = 10e3;
    c.exec_c_ns = 5;
    c.rows_only = rows_only;
    c.padded = padded;
    double capacity = 900 * (padded ? 0.5 : 1);   /* requests/s at 64 rows */
    uint64_t s = seed;
    int cap = (int)(5 * capacity * level * 1.5) + 100, n = 0;
    struct sim_request *r = calloc((size_t)cap, sizeof *r);
    for (double t = 0; n < cap;) {
        t += -__builtin_log(urand(&s)) / (capacity * level);
        if (t >= 5)
            break;
        int len = 5 + (int)(rnd(&s) % 196);
        r[n++] = (struct sim_request){.arrival_ns = (int64_t)(t * 1e9), .rows = 1,
                                      .budget_ns = budget, .tokens = len,
                                      .tokens_sq = (int64_t)len * len, .max_len = len};
    }
    struct sim_stats st;
    if (sim_run(&c, r, n, &st) != 0)
        fail_msg("%s", st.violation);
    struct outcome o = {0};
    for (int i = 0; i < n; i++) {
        bool in_time = r[i].status == 0 &&
                       (!budget || r[i].done_ns - r[i].arrival_ns <= budget);
        o.good += in_time;
        o.late += r[i].status == 0 && !in_time;
    }
    o.tokens = st.tokens;
    o.cells = st.cells;
    o.span = st.span_ns;
    free(r);
    return o;
}

static void test_token_budget_against_rows_on_spread_lengths(void **state)
{
    (void)state;
    static const double levels[] = {1.2, 2.0};
    for (int l = 0; l < 2; l++) {
        int good[3] = {0}, late[3] = {0};
        for (uint64_t seed = 1; seed <= 3; seed++) {
            struct outcome o[3] = {
                spread_run(levels[l], 150 * MS, seed, 64, 0, true, false, false),
                spread_run(levels[l], 150 * MS, seed, 19, 0, true, false, false),
                spread_run(levels[l], 150 * MS, seed, 64, 2048, false, false, false),
            };
            for (int k = 0; k < 3; k++) {
                good[k] += o[k].good;
                late[k] += o[k].late;
            }
        }
        if (good[2] < good[0] || good[2] < good[1] || late[2] != 0)
            fail_msg("at %.0f%%: answered in time (late) rows 64 %d (%d), rows 19 %d (%d), "
                     "2048 tokens %d (%d)", 100 * levels[l], good[0], late[0], good[1], late[1],
                     good[2], late[2]);
    }
}

/* A padded device, no deadlines, twice its capacity: grouping halves the
 * padding at least and computes more tokens per second. */
static void test_grouping_lowers_padding_on_a_padded_device(void **state)
{
    (void)state;
    struct outcome plain = spread_run(2.0, 0, 5, 64, 2048, false, false, true);
    struct outcome grouped = spread_run(2.0, 0, 5, 64, 2048, false, true, true);
    double pad_plain = 1.0 - (double)plain.tokens / (double)plain.cells;
    double pad_grouped = 1.0 - (double)grouped.tokens / (double)grouped.cells;
    double tps_plain = (double)plain.tokens / (double)plain.span;
    double tps_grouped = (double)grouped.tokens / (double)grouped.span;
    if (!(pad_grouped < pad_plain / 2) || !(tps_grouped > tps_plain))
        fail_msg("padding %.3f grouped, %.3f not; tokens/ms %.1f grouped, %.1f not", pad_grouped,
                 pad_plain, tps_grouped * 1e6, tps_plain * 1e6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_token_traces_keep_the_invariants),
        cmocka_unit_test(test_tokens_equal_to_rows_are_the_row_batcher),
        cmocka_unit_test(test_grouping_waits_no_more_cuts_than_requests_before),
        cmocka_unit_test(test_token_budget_against_rows_on_spread_lengths),
        cmocka_unit_test(test_grouping_lowers_padding_on_a_padded_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
