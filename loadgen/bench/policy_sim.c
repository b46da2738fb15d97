/* policy_sim.c - the deadline-aware batching policy against the fixed delay
 * (and the adaptive default, which waits only when it pays)
 * (Triton's dynamic batcher), on identical traces, on a virtual clock.
 *
 * Deterministic: the same seed gives the same numbers on any machine (no
 * network, no threads; the batcher's queue and policy run as in the server,
 * through batcher/sim.c). Reported per trace and policy: goodput (answers
 * within their budget per second of trace), the p99 latency of all answered
 * requests (504s included, at the time they were answered), how many were
 * shed (504, 429) or computed late, and the instance's busy fraction (of the
 * time from the first arrival to the last answer).
 *
 * Each run is repeated with a job's backlog queued at the start (offline
 * lines of one row, as many as the instance computes in the trace's time at
 * full batches, docs/JOBS.md): one more line shows the online goodput and
 * late share (504 or computed late, of the online requests) with the
 * backlog against without, and the offline rows computed per second of the
 * trace.
 *
 *   bench_policy_sim [--seconds S] [--budget-ms B] [--seed N] [--csv]
 *                    [--base-us A --per-row-us B --max-batch M --delay-us D
 *                     --burst-ms ON --quiet-ms OFF]
 * The model flags let the simulation mirror loadgen/bench/policy_http.py.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "batcher/sim.h"

#define MS 1000000LL

/* The simulated model and the bursty trace's shape (defaults below). */
static double g_base_ns = 2e6, g_row_ns = 0.1e6, g_burst_s = 0.05, g_quiet_s = 0.15;
static int g_max_batch = 32;
static int64_t g_delay_us = 5000;

struct result {
    double goodput, p99_ms, busy, mean_batch;
    int shed504, shed429, late;
    double late_share;      /* (504 + late) / online requests */
    double offline_per_s;   /* offline rows answered within the trace's time, per second */
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

/* Poisson arrivals whose rate follows rate_at(t). */
static int make_trace(struct sim_request *r, int cap, double seconds, double capacity,
                      double (*rate_at)(double t, double capacity, double level), double level,
                      int64_t budget_ns, uint64_t seed)
{
    uint64_t s = seed;
    double t = 0;
    int n = 0;
    double peak = 3.0 * capacity * (level > 1 ? level : 1);
    while (n < cap) {
        /* Thinning: draw at the peak rate, keep with probability rate/peak. */
        t += -log(urand(&s)) / peak;
        if (t >= seconds)
            break;
        if (urand(&s) * peak > rate_at(t, capacity, level))
            continue;
        r[n] = (struct sim_request){.arrival_ns = (int64_t)(t * 1e9), .rows = 1,
                                    .budget_ns = budget_ns};
        n++;
    }
    return n;
}

static double steady(double t, double capacity, double level)
{
    (void)t;
    return capacity * level;
}

/* Bursts at 3x capacity (50 ms on, 150 ms quiet by default: 75 % on average). */
static double bursty(double t, double capacity, double level)
{
    (void)level;
    double phase = fmod(t, g_burst_s + g_quiet_s);
    return phase < g_burst_s ? 3.0 * capacity : 0.0;
}

/* Runs the trace under `policy`, after `backlog` offline lines of one row
 * queued at its start; out covers the online requests, and the offline rows
 * answered before the trace's end. */
static void run(const char *policy, const struct sim_request *tr, int n, int backlog,
                double seconds, struct result *out)
{
    struct sim_config c;
    memset(&c, 0, sizeof c);
    c.batching.max_batch_size = g_max_batch;
    c.batching.max_queue_delay_us = g_delay_us;
    c.batching.max_queue_size = 4096;
    c.batching.default_priority = 1;
    c.batching.priority_aging_ms = 1000;
    snprintf(c.batching.policy, sizeof c.batching.policy, "%s", policy);
    c.instances = 1;
    c.exec_a_ns = g_base_ns;
    c.exec_b_ns = g_row_ns;
    int total = backlog + n;
    struct sim_request *r = calloc((size_t)total, sizeof *r);
    for (int i = 0; i < backlog; i++)
        r[i] = (struct sim_request){.arrival_ns = n ? tr[0].arrival_ns : 0, .rows = 1,
                                    .offline = true};
    memcpy(r + backlog, tr, (size_t)n * sizeof *r);
    struct sim_stats st;
    if (sim_run(&c, r, total, &st) != 0) {
        fprintf(stderr, "policy_sim: %s\n", st.violation);
        exit(1);
    }
    memset(out, 0, sizeof *out);
    int64_t off_rows = 0;
    for (int i = 0; i < backlog; i++)
        off_rows += r[i].done_ns <= (int64_t)(seconds * 1e9) ? r[i].rows : 0;
    out->offline_per_s = (double)off_rows / seconds;
    struct sim_request *on = r + backlog;
    int64_t *lat = malloc((size_t)(n ? n : 1) * sizeof *lat);
    int good = 0;
    for (int i = 0; i < n; i++) {
        const struct sim_request *q = &on[i];
        lat[i] = q->done_ns - q->arrival_ns;
        if (q->status == BG_EDEADLINE)
            out->shed504++;
        else if (q->status == BG_EQUEUEFULL)
            out->shed429++;
        else if (q->budget_ns && lat[i] > q->budget_ns)
            out->late++;
        else
            good++;
    }
    out->late_share = n ? (double)(out->shed504 + out->late) / n : 0;
    qsort(lat, (size_t)n, sizeof *lat, cmp_i64);
    out->goodput = good / seconds;
    out->p99_ms = n ? (double)lat[(size_t)(0.99 * (n - 1))] / 1e6 : 0;
    out->busy = st.span_ns ? (double)st.busy_ns / (double)st.span_ns : 0;
    out->mean_batch = st.batches ? (double)st.rows / st.batches : 0;
    free(lat);
    free(r);
}

int main(int argc, char **argv)
{
    double seconds = 20;
    int64_t budget = 25 * MS;
    uint64_t seed = 42;
    int csv = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (!strcmp(argv[i], "--budget-ms") && i + 1 < argc)
            budget = (int64_t)(atof(argv[++i]) * MS);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--csv"))
            csv = 1;
        else if (!strcmp(argv[i], "--base-us") && i + 1 < argc)
            g_base_ns = atof(argv[++i]) * 1000;
        else if (!strcmp(argv[i], "--per-row-us") && i + 1 < argc)
            g_row_ns = atof(argv[++i]) * 1000;
        else if (!strcmp(argv[i], "--max-batch") && i + 1 < argc)
            g_max_batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--delay-us") && i + 1 < argc)
            g_delay_us = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--burst-ms") && i + 1 < argc)
            g_burst_s = atof(argv[++i]) / 1000;
        else if (!strcmp(argv[i], "--quiet-ms") && i + 1 < argc)
            g_quiet_s = atof(argv[++i]) / 1000;
        else {
            fprintf(stderr, "usage: %s [--seconds S] [--budget-ms B] [--seed N] [--csv]\n", argv[0]);
            return 2;
        }
    }
    if (g_max_batch < 1 || g_max_batch > 4096 || g_base_ns < 0 || g_row_ns < 0) {
        fprintf(stderr, "policy_sim: bad model flags\n");
        return 2;
    }
    /* Default: one instance, exec(R) = 2 ms + 0.1 ms x R, max_batch_size 32:
     * capacity = 32 / 5.2 ms = 6154 rows/s at full batches. */
    double capacity = g_max_batch / ((g_base_ns + g_row_ns * g_max_batch) / 1e9);
    int cap = (int)(seconds * capacity * 3.5) + 1000;
    struct sim_request *tr = malloc((size_t)cap * sizeof *tr);
    static const struct {
        const char *name;
        double (*rate)(double, double, double);
        double level;
    } traces[] = {{"poisson 50%", steady, 0.5},   {"poisson 90%", steady, 0.9},
                  {"poisson 120%", steady, 1.2},  {"poisson 200%", steady, 2.0},
                  {"bursty on/off", bursty, 0.75}};
    /* The backlog: what the instance computes in the trace's time. */
    int backlog = (int)(seconds * capacity);
    if (csv)
        printf("trace,policy,backlog,offered_per_s,goodput_per_s,p99_ms,shed_504,shed_429,late,"
               "busy,mean_batch,late_share,offline_rows_per_s\n");
    else
        printf("model: 1 instance, exec = %.2f ms + %.3f ms/row, max_batch_size %d, max_queue_delay "
               "%.1f ms, budget %.0f ms, %.0f s per trace, seed %llu\ncapacity %.0f rows/s; bursts "
               "of %.0f ms at 3x, %.0f ms quiet; backlog of %d one-row job lines\n\n"
               "%-14s %-12s %9s %9s %9s %7s %7s %7s %6s %6s\n",
               g_base_ns / 1e6, g_row_ns / 1e6, g_max_batch, (double)g_delay_us / 1000,
               (double)budget / MS, seconds, (unsigned long long)seed, capacity,
               g_burst_s * 1000, g_quiet_s * 1000, backlog, "trace", "policy",
               "offered/s", "goodput/s", "p99 ms", "504", "429", "late", "busy", "batch");
    double peak_deadline = 0, good200 = 0, burst_d = 0, burst_f = 0, peak_adaptive = 0,
           good200_a = 0, burst_a = 0;
    static const char *const policies[] = {"deadline", "fixed_delay", "adaptive"};
    for (size_t t = 0; t < sizeof traces / sizeof traces[0]; t++) {
        int n = make_trace(tr, cap, seconds, capacity, traces[t].rate, traces[t].level, budget,
                           seed + t);
        for (int p = 0; p < 3; p++) {
            const char *pol = policies[p];
            struct result r, rb;
            run(pol, tr, n, 0, seconds, &r);
            run(pol, tr, n, backlog, seconds, &rb);
            if (csv) {
                const struct result *x[2] = {&r, &rb};
                for (int k = 0; k < 2; k++)
                    printf("%s,%s,%d,%.0f,%.0f,%.2f,%d,%d,%d,%.3f,%.1f,%.4f,%.0f\n",
                           traces[t].name, pol, k ? backlog : 0, n / seconds, x[k]->goodput,
                           x[k]->p99_ms, x[k]->shed504, x[k]->shed429, x[k]->late, x[k]->busy,
                           x[k]->mean_batch, x[k]->late_share, x[k]->offline_per_s);
            } else {
                printf("%-14s %-12s %9.0f %9.0f %9.1f %7d %7d %7d %5.0f%% %6.1f\n", traces[t].name,
                       pol, n / seconds, r.goodput, r.p99_ms, r.shed504, r.shed429, r.late,
                       100 * r.busy, r.mean_batch);
                printf("%-14s   + backlog: goodput %.0f/s (%.3fx), late share %.2f%% (%.2f%% "
                       "without), p99 %.1f ms, offline %.0f rows/s\n", "",
                       rb.goodput, r.goodput > 0 ? rb.goodput / r.goodput : 0,
                       100 * rb.late_share, 100 * r.late_share, rb.p99_ms, rb.offline_per_s);
            }
            if (p == 0 && r.goodput > peak_deadline)
                peak_deadline = r.goodput;
            if (p == 0 && traces[t].level == 2.0)
                good200 = r.goodput;
            if (p == 2 && r.goodput > peak_adaptive)
                peak_adaptive = r.goodput;
            if (p == 2 && traces[t].level == 2.0)
                good200_a = r.goodput;
            if (traces[t].rate == bursty)
                *(p == 0 ? &burst_d : p == 1 ? &burst_f : &burst_a) = r.goodput;
        }
    }
    if (!csv)
        printf("\ndeadline policy: goodput at 200%% load / peak goodput = %.3f (target >= 0.95)\n"
               "bursty trace: deadline / fixed_delay goodput = %.2fx (target >= 1.3x)\n"
               "adaptive policy (the default): goodput at 200%% load / peak goodput = %.3f; "
               "bursty trace: adaptive / deadline goodput = %.2fx\n",
               good200 / peak_deadline, burst_d / (burst_f > 0 ? burst_f : 1),
               good200_a / (peak_adaptive > 0 ? peak_adaptive : 1),
               burst_a / (burst_d > 0 ? burst_d : 1));
    free(tr);
    return 0;
}
