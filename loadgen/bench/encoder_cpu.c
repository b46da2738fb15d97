/* encoder_cpu.c - times the encoder kernels on one thread, on every kernel
 * path this CPU runs (or one, --isa): attention_varlen at hidden 384 / 12
 * heads of 32 (all-MiniLM-L6-v2) for sequence lengths 16, 64, 128 and 256,
 * packed 2048 tokens per call, in time per token and GFLOP/s (4 L hidden
 * flops per token); and layernorm_rows on 256 x 384 rows, with and without
 * the fused residual, in GB/s of rows read and written (the rows stay in L2,
 * as between two layers of a batch).
 *
 *   bench_encoder_cpu [--isa auto|generic|avx2|avx512] [--time SECONDS]
 *
 * Each case runs for about --time seconds (default 0.3) after a warm-up call
 * and reports the median of its timed batches. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/layernorm.h"
#include "loadgen/bench/bench_util.h"

#define HIDDEN 384
#define HEADS 12
#define TOKENS 2048

struct bench_case {
    enum kernels_isa isa;
    const struct attention_args *att;
    float *scratch;
    size_t nscratch;
    const float *x, *r, *g, *b;
    float *y;
};

static void bench_call(const struct bench_case *c)
{
    if (c->att)
        attention_varlen_isa(c->isa, c->att, c->scratch, c->nscratch);
    else
        layernorm_rows_isa(c->isa, c->x, c->r, c->g, c->b, 1e-12f, c->y, 256, HIDDEN);
}

/* Seconds per call: batches of ~1/20 of the budget, the median. */
static double bench_time(const struct bench_case *c, double budget)
{
    double t0 = now_s();
    bench_call(c);
    double once = now_s() - t0;
    int per = (int)(budget / 20 / (once > 1e-7 ? once : 1e-7));
    per = per < 1 ? 1 : per;
    double v[20];
    for (int i = 0; i < 20; i++) {
        t0 = now_s();
        for (int k = 0; k < per; k++)
            bench_call(c);
        v[i] = (now_s() - t0) / per;
    }
    qsort(v, 20, sizeof *v, cmp_double);
    return v[10];
}

int main(int argc, char **argv)
{
    enum kernels_isa only = KERNELS_ISA_AUTO;
    int forced = 0;
    double budget = 0.3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc) {
            const char *n = argv[++i];
            forced = 1;
            only = strcmp(n, "generic") == 0 ? KERNELS_ISA_GENERIC
                   : strcmp(n, "avx2") == 0  ? KERNELS_ISA_AVX2
                   : strcmp(n, "avx512") == 0 ? KERNELS_ISA_AVX512
                                              : kernels_isa_best();
        } else if (strcmp(argv[i], "--time") == 0 && i + 1 < argc) {
            budget = atof(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_encoder_cpu [--isa auto|generic|avx2|avx512] [--time S]\n");
            return 2;
        }
    }
    uint64_t seed = 88172645463325252ull;
    const size_t n = (size_t)TOKENS * HIDDEN;
    float *q = malloc(n * sizeof *q), *k = malloc(n * sizeof *k), *v = malloc(n * sizeof *v);
    float *o = malloc(n * sizeof *o), *g = malloc(HIDDEN * sizeof *g), *b = malloc(HIDDEN * sizeof *b);
    size_t ns = attention_scratch_floats(256, HIDDEN / HEADS);
    float *scratch = malloc(ns * sizeof *scratch);
    static int cu[TOKENS / 16 + 1];
    if (!q || !k || !v || !o || !g || !b || !scratch)
        return 1;
    for (size_t i = 0; i < n; i++) {
        q[i] = rnd(&seed);
        k[i] = rnd(&seed);
        v[i] = rnd(&seed);
    }
    for (int i = 0; i < HIDDEN; i++) {
        g[i] = 1 + 0.1f * rnd(&seed);
        b[i] = 0.1f * rnd(&seed);
    }
    for (int isa = KERNELS_ISA_GENERIC; isa <= KERNELS_ISA_AVX512; isa++) {
        if (!kernels_isa_supported((enum kernels_isa)isa) || (forced && isa != (int)only))
            continue;
        static const int lens[] = {16, 64, 128, 256};
        for (int li = 0; li < 4; li++) {
            const int len = lens[li], nseq = TOKENS / len;
            for (int s = 0; s <= nseq; s++)
                cu[s] = s * len;
            struct attention_args a = {q, k, v, HIDDEN, o, HIDDEN, cu, nseq, HEADS, HIDDEN / HEADS};
            struct bench_case c = {(enum kernels_isa)isa, &a, scratch, ns, 0, 0, 0, 0, 0};
            double t = bench_time(&c, budget);
            printf("attention %-7s hidden %d heads %d seqlen %3d: %7.3f us/token  %6.1f GFLOP/s\n",
                   kernels_isa_name((enum kernels_isa)isa), HIDDEN, HEADS, len, t / TOKENS * 1e6,
                   4.0 * len * HIDDEN * TOKENS / t * 1e-9);
        }
        for (int res = 0; res < 2; res++) {
            struct bench_case c = {(enum kernels_isa)isa, NULL, NULL, 0, q, res ? k : NULL, g, b, o};
            double t = bench_time(&c, budget);
            double bytes = 256.0 * HIDDEN * 4 * (res ? 3 : 2);
            printf("layernorm %-7s 256 x %d%s: %7.2f us  %6.1f GB/s\n",
                   kernels_isa_name((enum kernels_isa)isa), HIDDEN,
                   res ? " + residual" : "           ", t * 1e6, bytes / t * 1e-9);
        }
    }
    free(q);
    free(k);
    free(v);
    free(o);
    free(g);
    free(b);
    free(scratch);
    return 0;
}
