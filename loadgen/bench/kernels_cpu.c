/* kernels_cpu.c - times dense_cpu_run on MLP-sized layers (1024->4096 and
 * 4096->4096 at 1, 8 and 64 rows, F32 and BF16 weights, gelu and bias fused)
 * on one thread and prints GFLOP/s, plus the weight bandwidth for rows = 1.
 *
 *   bench_kernels_cpu [--isa auto|generic|avx2|avx512] [--dtype f32,f16,bf16]
 *                     [--rows 1,8,64] [--time SECONDS]
 *
 * Each case runs for about --time seconds (default 0.4: the default run takes
 * about 8 s) after one warm-up call and reports the median of its timed
 * batches, so a stray interruption does not skew it. The same weights are
 * used call after call, so a layer that fits in the last-level cache is timed
 * from there, as a hot layer in a server would be. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/dense.h"
#include "kernels/dtype.h"
#include "kernels/kernels.h"
#include "loadgen/bench/bench_util.h"

#define MAX_ROWS 1024

struct bench_opts {
    enum kernels_isa isa;
    double budget;              /* seconds per case */
    int rows[16], nrows;
};

/* Seconds per call: batches of calls sized to ~1/20 of the budget, median. */
static double time_run(const struct dense_cpu *d, const float *x, int rows, float *y,
                       double budget)
{
    double t0 = now_s();
    dense_cpu_run(d, x, rows, y);   /* warm-up: caches, page faults on y */
    double once = now_s() - t0;
    int per = (int)(budget / 20 / (once > 1e-7 ? once : 1e-7));
    if (per < 1)
        per = 1;
    double samples[64];
    int n = 0;
    double end = now_s() + budget;
    while (n < 64 && (n < 3 || now_s() < end)) {
        double t = now_s();
        for (int i = 0; i < per; i++)
            dense_cpu_run(d, x, rows, y);
        samples[n++] = (now_s() - t) / per;
    }
    qsort(samples, (size_t)n, sizeof samples[0], cmp_double);
    return samples[n / 2];
}

static int bench_layer(const struct bench_opts *o, enum dtype dt, int in, int out)
{
    const size_t nw = (size_t)in * (size_t)out;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    unsigned char *w = malloc(nw * dtype_size(dt));
    float *bias = malloc((size_t)out * sizeof(float));
    float *x = malloc((size_t)MAX_ROWS * (size_t)in * sizeof(float));
    float *y = malloc((size_t)MAX_ROWS * (size_t)out * sizeof(float));
    int rc = -1;
    struct dense_cpu *d = NULL;
    if (!w || !bias || !x || !y) {
        fprintf(stderr, "bench: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < nw; i++) {
        float f = rnd(&seed) * 0.03f;
        if (dt == DTYPE_F32) {
            memcpy(w + i * 4, &f, 4);
        } else {
            uint16_t h = dt == DTYPE_F16 ? dtype_f32_to_f16(f) : dtype_f32_to_bf16(f);
            memcpy(w + i * 2, &h, 2);
        }
    }
    for (int i = 0; i < out; i++)
        bias[i] = rnd(&seed);
    for (size_t i = 0; i < (size_t)MAX_ROWS * (size_t)in; i++)
        x[i] = rnd(&seed);
    char msg[256];
    double t0 = now_s();
    if (dense_cpu_prepare_isa(o->isa, w, dt, bias, DTYPE_F32, out, in, DENSE_ACT_GELU, &d, msg,
                              sizeof msg) < 0) {
        fprintf(stderr, "bench: %s\n", msg);
        goto out;
    }
    const double prep = now_s() - t0;
    const size_t held = dense_cpu_bytes(d);
    for (int i = 0; i < o->nrows; i++) {
        const int rows = o->rows[i];
        const double t = time_run(d, x, rows, y, o->budget);
        printf("%-7s %-5s %4d -> %-4d rows %3d  %9.1f us  %7.1f GFLOP/s",
               kernels_isa_name(dense_cpu_isa(d)), dtype_name(dt), in, out, rows, t * 1e6,
               2.0 * rows * (double)nw / t / 1e9);
        if (rows == 1)
            printf("  %6.1f GB/s of weights", (double)held / t / 1e9);
        if (i == 0)
            printf("  (prepare %.0f ms, %.1f MiB held)", prep * 1e3, (double)held / (1 << 20));
        printf("\n");
        fflush(stdout);
    }
    rc = 0;
out:
    dense_cpu_free(d);
    free(w);
    free(bias);
    free(x);
    free(y);
    return rc;
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_kernels_cpu [--isa auto|generic|avx2|avx512] "
                    "[--dtype f32,f16,bf16] [--rows 1,8,64] [--time SECONDS]\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct bench_opts o = {.isa = KERNELS_ISA_AUTO, .budget = 0.4, .rows = {1, 8, 64}, .nrows = 3};
    char dts[64] = "f32,bf16";
    for (int i = 1; i < argc; i += 2) {     /* every option takes a value */
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage();
        if (strcmp(argv[i], "--isa") == 0) {
            if (strcmp(v, "auto") == 0) o.isa = KERNELS_ISA_AUTO;
            else if (strcmp(v, "generic") == 0) o.isa = KERNELS_ISA_GENERIC;
            else if (strcmp(v, "avx2") == 0) o.isa = KERNELS_ISA_AVX2;
            else if (strcmp(v, "avx512") == 0) o.isa = KERNELS_ISA_AVX512;
            else return usage();
        } else if (strcmp(argv[i], "--dtype") == 0) {
            snprintf(dts, sizeof dts, "%s", v);
        } else if (strcmp(argv[i], "--rows") == 0) {
            char list[128], *save;
            snprintf(list, sizeof list, "%s", v);
            o.nrows = 0;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                int r = atoi(t);
                if (r < 1 || r > MAX_ROWS || o.nrows == 16)
                    return usage();
                o.rows[o.nrows++] = r;
            }
        } else if (strcmp(argv[i], "--time") == 0) {
            o.budget = atof(v);
            if (!(o.budget > 0 && o.budget <= 5))
                return usage();
        } else {
            return usage();
        }
    }
    if (!kernels_isa_supported(o.isa)) {
        fprintf(stderr, "bench: this CPU cannot run the %s kernels\n", kernels_isa_name(o.isa));
        return 1;
    }
    printf("dense_cpu_run, one thread, bias + gelu fused; kernel path %s (best here: %s)\n",
           kernels_isa_name(o.isa == KERNELS_ISA_AUTO ? kernels_isa_best() : o.isa),
           kernels_isa_name(kernels_isa_best()));
    static const int shapes[][2] = {{1024, 4096}, {4096, 4096}};
    char *save;
    for (char *tok = strtok_r(dts, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        enum dtype dt;
        if (strcmp(tok, "f32") == 0) dt = DTYPE_F32;
        else if (strcmp(tok, "f16") == 0) dt = DTYPE_F16;
        else if (strcmp(tok, "bf16") == 0) dt = DTYPE_BF16;
        else return usage();
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            if (bench_layer(&o, dt, shapes[s][0], shapes[s][1]) < 0)
                return 1;
    }
    return 0;
}
