/* token_sim.c - token budgets against row batching, for requests of
 * different lengths (an encoder's texts), on identical traces and the same
 * simulated device, on a virtual clock (batcher/sim.c: the server's queue,
 * policy and latency model). Deterministic: the same flags give the same
 * numbers on any machine.
 *
 * The device runs a batch in a + b*tokens + c*(sum of squared lengths)
 * (packed, as batchgate's CPU encoder), or with --padded every row padded
 * to the batch's longest: a + b*rows*maxlen + c*rows*maxlen^2 (a GPU
 * kernel, a server behind the upstream backend). Requests are one text
 * each, lengths uniform in [--len-min, --len-max], Poisson arrivals at
 * levels of the device's capacity. Each trace runs under:
 *   rows N       the batcher is told rows only (as before #20),
 *                max_batch_size N: its latency model is in rows;
 *   tokens       it is told tokens (latency model in tokens), rows cap only;
 *   budget       ... and batching.max_batch_tokens;
 *   budget+group ... and group_by_length.
 * Reported per trace and configuration: goodput (answers within their
 * budget per second), tokens computed per second, p50 and p99 latency of
 * every request (504s included, at the time they were answered), 504s,
 * answers computed late, the share of the shorter and of the longer half
 * of the requests (by length) that missed their budget, the mean batch in
 * rows and tokens, and the padding a padded layout would carry (1 - tokens
 * / (rows x longest)).
 *
 *   bench_token_sim [--seconds S] [--budget-ms B] [--seed N] [--padded]
 *                   [--a-us A] [--per-token-us B] [--per-sq-ns C]
 *                   [--max-batch R] [--max-tokens T] [--len-min L] [--len-max L]
 *                   [--delay-us D] [--csv]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher/sim.h"
#include "common/error.h"

#define MS 1000000LL

/* The device and the workload (defaults: main's usage line). */
static double g_a_ns = 1e6, g_b_ns = 10e3, g_c_ns = 5;
static int g_max_batch = 64, g_max_tokens = 2048, g_len_min = 5, g_len_max = 200;
static int64_t g_delay_us = 5000;
static bool g_padded;

struct result {
    double goodput, tokens_per_s, p50_ms, p99_ms, batch_rows, batch_tokens, padding;
    double miss_short, miss_long;   /* missed their budget (504, 429, late), by length half */
    int shed504, shed429, late;
};

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static double urand(uint64_t *s) { return ((double)(rnd(s) >> 11) + 0.5) / 9007199254740992.0; }

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Poisson arrivals of one-text requests at `rate` per second. */
static int make_trace(struct sim_request *r, int cap, double seconds, double rate,
                      int64_t budget_ns, uint64_t seed)
{
    uint64_t s = seed * 2654435761u + 1;
    double t = 0;
    int n = 0;
    while (n < cap) {
        t += -log(urand(&s)) / rate;
        if (t >= seconds)
            break;
        int len = g_len_min + (int)(rnd(&s) % (uint64_t)(g_len_max - g_len_min + 1));
        r[n++] = (struct sim_request){.arrival_ns = (int64_t)(t * 1e9), .rows = 1,
                                      .budget_ns = budget_ns, .tokens = len,
                                      .tokens_sq = (int64_t)len * len, .max_len = len};
    }
    return n;
}

struct setup {
    const char *name;
    int max_batch;          /* 0: g_max_batch */
    bool rows_only, cap, group;
};

static void run(const struct setup *su, const struct sim_request *tr, int n, double seconds,
                struct result *out)
{
    struct sim_config c;
    memset(&c, 0, sizeof c);
    c.batching.max_batch_size = su->max_batch ? su->max_batch : g_max_batch;
    c.batching.max_queue_delay_us = g_delay_us;
    c.batching.max_queue_size = 4096;
    c.batching.default_priority = 1;
    c.batching.priority_aging_ms = 1000;
    c.batching.max_batch_tokens = su->cap ? g_max_tokens : 0;
    c.batching.group_by_length = su->group;
    snprintf(c.batching.policy, sizeof c.batching.policy, "adaptive");
    c.instances = 1;
    c.exec_a_ns = g_a_ns;
    c.exec_b_ns = g_b_ns;
    c.exec_c_ns = g_c_ns;
    c.padded = g_padded;
    c.rows_only = su->rows_only;
    struct sim_request *r = malloc((size_t)(n ? n : 1) * sizeof *r);
    memcpy(r, tr, (size_t)n * sizeof *r);
    struct sim_stats st;
    if (sim_run(&c, r, n, &st) != 0) {
        fprintf(stderr, "token_sim: %s\n", st.violation);
        exit(1);
    }
    memset(out, 0, sizeof *out);
    int64_t *lat = malloc((size_t)(n ? n : 1) * sizeof *lat);
    int good = 0, half[2] = {0, 0}, missed[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        lat[i] = r[i].done_ns - r[i].arrival_ns;
        int h = 2 * r[i].tokens > g_len_min + g_len_max;
        half[h]++;
        missed[h]++;
        if (r[i].status == BG_EDEADLINE)
            out->shed504++;
        else if (r[i].status == BG_EQUEUEFULL)
            out->shed429++;
        else if (r[i].budget_ns && lat[i] > r[i].budget_ns)
            out->late++;
        else
            good++, missed[h]--;
    }
    out->miss_short = half[0] ? (double)missed[0] / half[0] : 0;
    out->miss_long = half[1] ? (double)missed[1] / half[1] : 0;
    qsort(lat, (size_t)n, sizeof *lat, cmp_i64);
    out->goodput = good / seconds;
    out->tokens_per_s = (double)st.tokens / ((double)st.span_ns / 1e9);
    out->p50_ms = n ? (double)lat[(size_t)(0.50 * (n - 1))] / 1e6 : 0;
    out->p99_ms = n ? (double)lat[(size_t)(0.99 * (n - 1))] / 1e6 : 0;
    out->batch_rows = st.batches ? (double)st.rows / st.batches : 0;
    out->batch_tokens = st.batches ? (double)st.tokens / st.batches : 0;
    out->padding = st.cells ? 1.0 - (double)st.tokens / (double)st.cells : 0;
    free(lat);
    free(r);
}

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s [--seconds S] [--budget-ms B] [--seed N] [--padded] [--a-us A] "
            "[--per-token-us B] [--per-sq-ns C] [--max-batch R] [--max-tokens T] [--len-min L] "
            "[--len-max L] [--delay-us D] [--csv]\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    double seconds = 20;
    int64_t budget = 150 * MS;
    uint64_t seed = 42;
    int csv = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--csv"))
            csv = 1;
        else if (!strcmp(a, "--padded"))
            g_padded = true;
        else if (!v)
            return usage(argv[0]);
        else if (!strcmp(a, "--seconds"))
            seconds = atof(v), i++;
        else if (!strcmp(a, "--budget-ms"))
            budget = (int64_t)(atof(v) * MS), i++;
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10), i++;
        else if (!strcmp(a, "--a-us"))
            g_a_ns = atof(v) * 1000, i++;
        else if (!strcmp(a, "--per-token-us"))
            g_b_ns = atof(v) * 1000, i++;
        else if (!strcmp(a, "--per-sq-ns"))
            g_c_ns = atof(v), i++;
        else if (!strcmp(a, "--max-batch"))
            g_max_batch = atoi(v), i++;
        else if (!strcmp(a, "--max-tokens"))
            g_max_tokens = atoi(v), i++;
        else if (!strcmp(a, "--len-min"))
            g_len_min = atoi(v), i++;
        else if (!strcmp(a, "--len-max"))
            g_len_max = atoi(v), i++;
        else if (!strcmp(a, "--delay-us"))
            g_delay_us = atoll(v), i++;
        else
            return usage(argv[0]);
    }
    if (g_max_batch < 1 || g_max_batch > 4096 || g_len_min < 1 || g_len_max < g_len_min ||
        g_max_tokens < g_len_max || g_a_ns < 0 || g_b_ns < 0 || g_c_ns < 0 || seconds <= 0) {
        fprintf(stderr, "token_sim: bad flags (max_tokens must hold the longest request)\n");
        return 2;
    }
    /* Capacity: requests per second at full batches of max_batch rows of
     * the mean length (the row configuration's best). */
    double mean_len = (g_len_min + g_len_max) / 2.0, mean_sq = 0;
    for (int l = g_len_min; l <= g_len_max; l++)
        mean_sq += (double)l * l / (g_len_max - g_len_min + 1);
    double full_ns = g_padded ? g_a_ns + g_b_ns * g_max_batch * g_len_max +
                                    g_c_ns * g_max_batch * (double)g_len_max * g_len_max
                              : g_a_ns + g_b_ns * g_max_batch * mean_len +
                                    g_c_ns * g_max_batch * mean_sq;
    double capacity = g_max_batch / (full_ns / 1e9);
    /* The row cap a token budget's batch holds on average: the fair row
     * configuration to compare with, besides max_batch. */
    int rows_like = (int)(g_max_tokens / mean_len);
    if (rows_like < 1)
        rows_like = 1;
    char rows_a[24], rows_b[24];
    snprintf(rows_a, sizeof rows_a, "rows %d", g_max_batch);
    snprintf(rows_b, sizeof rows_b, "rows %d", rows_like);
    const struct setup setups[] = {
        {rows_a, 0, true, false, false},          {rows_b, rows_like, true, false, false},
        {"tokens", 0, false, false, false},       {"budget", 0, false, true, false},
        {"budget+group", 0, false, true, true},
    };
    const int nsetups = (int)(sizeof setups / sizeof setups[0]);
    static const double levels[] = {0.5, 0.9, 1.2, 2.0};
    int cap = (int)(seconds * capacity * 2.5) + 1000;
    struct sim_request *tr = malloc((size_t)cap * sizeof *tr);
    if (csv)
        printf("level,setup,offered_per_s,goodput_per_s,tokens_per_s,p50_ms,p99_ms,shed_504,"
               "shed_429,late,miss_short,miss_long,batch_rows,batch_tokens,padding\n");
    else
        printf("device: exec = %.2f ms + %.1f us/token + %.1f ns/len^2%s; lengths %d-%d; "
               "max_batch_size %d, max_batch_tokens %d, max_queue_delay %.1f ms, adaptive; "
               "budget %.0f ms; %.0f s per trace, seed %llu\ncapacity %.0f requests/s (full "
               "batches of %d rows)\n\n%-6s %-13s %9s %9s %9s %7s %7s %6s %5s %5s %6s %6s %6s %7s %5s\n",
               g_a_ns / 1e6, g_b_ns / 1e3, g_c_ns, g_padded ? ", padded" : "", g_len_min,
               g_len_max, g_max_batch, g_max_tokens, (double)g_delay_us / 1000,
               (double)budget / MS, seconds, (unsigned long long)seed, capacity, g_max_batch,
               "load", "setup", "offered/s", "goodput/s", "tokens/s", "p50 ms", "p99 ms", "504",
               "429", "late", "miss-s", "miss-l", "rows", "tokens", "pad");
    for (size_t l = 0; l < sizeof levels / sizeof levels[0]; l++) {
        int n = make_trace(tr, cap, seconds, capacity * levels[l], budget, seed + l);
        for (int k = 0; k < nsetups; k++) {
            struct result r;
            run(&setups[k], tr, n, seconds, &r);
            if (csv)
                printf("%.2f,%s,%.0f,%.0f,%.0f,%.2f,%.2f,%d,%d,%d,%.4f,%.4f,%.1f,%.0f,%.3f\n",
                       levels[l], setups[k].name, n / seconds, r.goodput, r.tokens_per_s, r.p50_ms,
                       r.p99_ms, r.shed504, r.shed429, r.late, r.miss_short, r.miss_long,
                       r.batch_rows, r.batch_tokens, r.padding);
            else
                printf("%4.0f%%  %-13s %9.0f %9.0f %9.0f %7.1f %7.1f %6d %5d %5d %5.1f%% %5.1f%% "
                       "%6.1f %7.0f %4.0f%%\n", 100 * levels[l], setups[k].name, n / seconds,
                       r.goodput, r.tokens_per_s, r.p50_ms, r.p99_ms, r.shed504, r.shed429, r.late,
                       100 * r.miss_short, 100 * r.miss_long, r.batch_rows, r.batch_tokens,
                       100 * r.padding);
        }
    }
    free(tr);
    return 0;
}
