/* latmodel_fuzz.c - the latency model (batcher/latmodel.c) on adversarial
 * streams of batches: where its quadratic term is kept wrongly (rows
 * planned many times too long) or lost (rows planned short).
 * Deterministic: the same arguments give the same numbers anywhere.
 *
 * A stream is a simulated device, a + b*T + c*S with T a batch's tokens
 * and S the sum of its rows' squared lengths (c = 0: linear; else 1 to
 * 100 ns), 1-10% noise (uniform or normal), 0-8% of batches stalled 2-3x,
 * 70% of streams starting with the server's warmup (16, 48, 96, 160
 * tokens twice). The traffic by scenario:
 *   1 linear,    one main length and a few others (2-12 batches in 48)
 *   2 quadratic, 4-6 lengths, then 1-3 lengths for 200 batches
 *   3 linear,    2-5 lengths, skewed weights, multi-row batches, grouping
 *   4 quadratic, as 3
 *   5 linear,    as 2
 *   6 quadratic, as 2, and c (and a, b) change when the traffic narrows
 *   7 quadratic, as 1
 * Each fit (as the server fits: every 8 batches once warm; scenarios 2, 5
 * and 6 after the traffic narrows only) plans one-row batches of 8 to 512
 * tokens that are not in its window, margin included, against their true
 * time. Printed per scenario: fits, the term kept (per million fits),
 * fits that kept it and plan some length over 2x (per million) and the
 * worst of them, fits without it that plan some length under 0.9x (per
 * million) and the worst of them, with the stream's seed and fit.
 *
 *   bench_latmodel_fuzz [--streams N] [--base B] [--scenario K]
 *
 * Another latmodel.c (an older one, to compare) links in its place:
 *   cc -O2 -I. loadgen/bench/latmodel_fuzz.c OTHER_latmodel.c -lm */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batcher/latmodel.h"

/* ---- the streams ---- */

struct fuzz {
    unsigned long long rs;           /* xorshift state */
    double a, b, c, eps, stall;
    bool gauss;
    struct latmodel m;
    int64_t tok[400], sq[400];       /* every batch added (a stream has at most 300) */
    int n;
};

static double fuzz_u(struct fuzz *f)
{
    f->rs ^= f->rs << 13;
    f->rs ^= f->rs >> 7;
    f->rs ^= f->rs << 17;
    return (double)(f->rs >> 11) * (1.0 / 9007199254740992.0);
}

static int fuzz_int(struct fuzz *f, int lo, int hi)
{
    return lo + (int)(fuzz_u(f) * (hi - lo + 1));
}

static double fuzz_truth(const struct fuzz *f, int64_t t, int64_t s)
{
    return f->a + f->b * (double)t + f->c * (double)s;
}

static void fuzz_add(struct fuzz *f, int64_t t, int64_t s)
{
    double e;
    if (f->gauss) {
        double u = fuzz_u(f) + 1e-12, v = fuzz_u(f);
        e = f->eps / 2 * sqrt(-2 * log(u)) * cos(2 * M_PI * v);
    } else {
        e = f->eps * (2 * fuzz_u(f) - 1);
    }
    double x = 1 + e;
    if (fuzz_u(f) < f->stall)
        x *= 2 + fuzz_u(f);
    f->tok[f->n] = t;
    f->sq[f->n] = s;
    f->n++;
    latmodel_add_sq(&f->m, t, s, (int64_t)(fuzz_truth(f, t, s) * x));
}

/* ---- the scores ---- */

struct tally {
    long fits, kept, kept_over2, lost_under9;
    double worst_over, worst_under;
    unsigned long long over_seed, under_seed;
    int over_fit, under_fit;
};

/* The fit just made, on one-row lengths its window does not hold. */
static void tally_fit(struct tally *y, const struct fuzz *f, unsigned long long seed)
{
    int from = f->n > LATMODEL_WINDOW ? f->n - LATMODEL_WINDOW : 0;
    double over = 0, under = 1e9;
    for (int64_t len = 8; len <= 512; len += 4) {
        bool seen = false;
        for (int q = from; q < f->n && !seen; q++)
            seen = f->tok[q] == len && f->sq[q] == len * len;
        if (seen)
            continue;
        double r = (double)latmodel_predict_sq(&f->m, len, len * len) /
                   fuzz_truth(f, len, len * len);
        over = r > over ? r : over;
        under = r < under ? r : under;
    }
    y->fits++;
    if (f->m.c_ns != 0) {
        y->kept++;
        y->kept_over2 += over > 2;
        if (over > y->worst_over) {
            y->worst_over = over;
            y->over_seed = seed;
            y->over_fit = f->n;
        }
    } else {
        y->lost_under9 += under < 0.9;
        if (y->worst_under == 0 || under < y->worst_under) {
            y->worst_under = under;
            y->under_seed = seed;
            y->under_fit = f->n;
        }
    }
}

/* Adds a batch, and scores the fit it made (once past `from` batches). */
static void fuzz_step(struct fuzz *f, struct tally *y, unsigned long long seed, int64_t t,
                      int64_t s, int from)
{
    fuzz_add(f, t, s);
    if (f->n >= from && f->m.samples_since_fit == 0)
        tally_fit(y, f, seed);
}

/* One length of the k in set, by the weights w (sum tot). */
static int64_t fuzz_pick(struct fuzz *f, const int64_t *set, const double *w, int k, double tot)
{
    double u = fuzz_u(f) * tot;
    int j = 0;
    while (j < k - 1 && u > w[j])
        u -= w[j++];
    return set[j];
}

static void stream_run(int scen, unsigned long long seed, struct tally *y)
{
    struct fuzz f = {.rs = seed * 0x9E3779B97F4A7C15ULL + 4242};
    if (!f.rs)
        f.rs = 1;
    for (int w = 0; w < 5; w++)
        fuzz_u(&f);
    f.a = 200000 + fuzz_u(&f) * 1800000;
    f.b = 1000 + fuzz_u(&f) * 19000;
    bool quad = scen == 2 || scen == 4 || scen == 6 || scen == 7;
    f.c = quad ? exp(fuzz_u(&f) * log(100)) : 0;
    f.eps = 0.01 + 0.09 * fuzz_u(&f);
    f.gauss = fuzz_u(&f) < 0.5;
    static const double stalls[] = {0, 0, 0.03, 0.08};
    f.stall = stalls[fuzz_int(&f, 0, 3)];
    latmodel_init(&f.m);
    if (fuzz_u(&f) < 0.7) {
        static const int64_t warm[] = {16, 16, 48, 48, 96, 96, 160, 160};
        for (int k = 0; k < 8; k++)
            fuzz_add(&f, warm[k], warm[k] * warm[k]);
    }
    if (scen == 1 || scen == 7) {
        int64_t main_len = fuzz_int(&f, 5, 256), set[8];
        int k = fuzz_int(&f, 2, 8);
        for (int j = 0; j < k; j++)
            set[j] = fuzz_int(&f, 5, 256);
        double p = 0.04 + 0.22 * fuzz_u(&f);
        int total = fuzz_int(&f, 16, 200);
        while (f.n < total) {
            int64_t len = fuzz_u(&f) < p ? set[fuzz_int(&f, 0, k - 1)] : main_len;
            fuzz_step(&f, y, seed, len, len * len, 8);
        }
    } else if (scen == 3 || scen == 4) {
        int k = fuzz_int(&f, 2, 5);
        int64_t set[5];
        double w[5], tot = 0;
        for (int j = 0; j < k; j++) {
            set[j] = fuzz_int(&f, 5, 256);
            if (j > 0 && fuzz_u(&f) < 0.3) {   /* near another: lengths that k can merge */
                set[j] = set[fuzz_int(&f, 0, j - 1)] + fuzz_int(&f, -3, 3);
                set[j] = set[j] < 5 ? 5 : set[j] > 256 ? 256 : set[j];
            }
        }
        if (fuzz_u(&f) < 0.5) {
            for (int j = 0; j < k; j++)
                tot += w[j] = pow(fuzz_u(&f), 3) + 1e-6;
        } else {
            int dom = fuzz_int(&f, 0, k - 1);
            double dw = 0.80 + 0.19 * fuzz_u(&f);
            for (int j = 0; j < k; j++)
                tot += w[j] = j == dom ? dw : (1 - dw) / (k - 1);
        }
        int rows = fuzz_u(&f) < 0.4 ? 1 << fuzz_int(&f, 1, 3) : 1;
        bool group = fuzz_u(&f) < 0.5;
        int total = fuzz_int(&f, 16, 120);
        while (f.n < total) {
            int r = rows > 1 ? fuzz_int(&f, 1, rows) : 1;
            int64_t t = 0, s = 0, len = 0;
            for (int q = 0; q < r; q++) {
                if (q == 0 || !group)
                    len = fuzz_pick(&f, set, w, k, tot);
                t += len;
                s += len * len;
            }
            fuzz_step(&f, y, seed, t, s, 8);
        }
    } else {
        int k1 = fuzz_int(&f, 4, 6);
        int64_t set1[6];
        for (int j = 0; j < k1; j++)
            set1[j] = fuzz_int(&f, 5, 256);
        int n1 = fuzz_int(&f, 8, 96);
        while (f.n < n1) {
            int64_t len = set1[fuzz_int(&f, 0, k1 - 1)];
            fuzz_add(&f, len, len * len);
        }
        if (scen == 6) {
            static const double by[] = {0, 0.25, 0.5, 2, 4};
            f.c *= by[fuzz_int(&f, 0, 4)];
            if (fuzz_u(&f) < 0.5) {
                double g = 0.5 + fuzz_u(&f);
                f.a *= g;
                f.b *= g;
            }
        }
        int k2 = fuzz_int(&f, 1, 3);
        int64_t set2[3];
        double w[3], tot = 0;
        for (int j = 0; j < k2; j++) {
            set2[j] = fuzz_int(&f, 5, 256);
            tot += w[j] = fuzz_u(&f) + 0.05;
        }
        int from = f.n + 1, total = f.n + 200;
        while (f.n < total) {
            int64_t len = fuzz_pick(&f, set2, w, k2, tot);
            fuzz_step(&f, y, seed, len, len * len, from);
        }
    }
}

int main(int argc, char **argv)
{
    long streams = 20000;
    unsigned long long base = 2;
    int only = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--streams") == 0)
            streams = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--base") == 0)
            base = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--scenario") == 0)
            only = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: %s [--streams N] [--base B] [--scenario 1-7]\n", argv[0]);
            return 2;
        }
    }
    static const char *const names[] = {"", "linear, one main length", "quadratic, narrowed",
                                        "linear, mixed", "quadratic, mixed", "linear, narrowed",
                                        "quadratic, c changes", "quadratic, one main length"};
    printf("scen  device/traffic               fits  kept/M  kept>2x/M  worst kept (seed fit)"
           "       lost<0.9/M  worst lost (seed fit)\n");
    for (int scen = 1; scen <= 7; scen++) {
        if (only && scen != only)
            continue;
        struct tally y = {0};
        for (long t = 0; t < streams; t++)
            stream_run(scen, base * 1000003ULL + (unsigned long long)t, &y);
        double per = y.fits ? 1e6 / (double)y.fits : 0;
        printf("%4d  %-26s %7ld %7.0f %10.0f %8.2fx (%llu %d) %12.0f %8.3fx (%llu %d)\n", scen,
               names[scen], y.fits, (double)y.kept * per, (double)y.kept_over2 * per,
               y.worst_over, y.over_seed, y.over_fit, (double)y.lost_under9 * per, y.worst_under,
               y.under_seed, y.under_fit);
    }
    return 0;
}
