/* dense.c - dense.h: checks a layer's shape and types, packs its weights into
 * the blocked layout of cpu_internal.h and hands runs to the ISA's kernel. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/dense.h"

static const char *const act_names[] = {
    [DENSE_ACT_NONE] = "none", [DENSE_ACT_RELU] = "relu",       [DENSE_ACT_GELU] = "gelu",
    [DENSE_ACT_TANH] = "tanh", [DENSE_ACT_SIGMOID] = "sigmoid",
};
#define ACT_COUNT ((int)(sizeof act_names / sizeof act_names[0]))

int dense_act_parse(const char *name, enum dense_act *out)
{
    if (!name || !*name) {
        *out = DENSE_ACT_NONE;
        return 0;
    }
    for (int i = 0; i < ACT_COUNT; i++)
        if (strcmp(name, act_names[i]) == 0) {
            *out = (enum dense_act)i;
            return 0;
        }
    return -1;
}

const char *dense_act_name(enum dense_act act)
{
    return (int)act >= 0 && (int)act < ACT_COUNT ? act_names[act] : "?";
}

static int dtype_valid(enum dtype t)
{
    return t == DTYPE_F32 || t == DTYPE_F16 || t == DTYPE_BF16;
}

/* Element (o, i) of an unaligned source matrix as F32; memcpy because the
 * pointer may sit at any offset of an mmap'ed file. */
static float src_at(const unsigned char *p, enum dtype t, size_t idx)
{
    if (t == DTYPE_F32) {
        float f;
        memcpy(&f, p + idx * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p + idx * 2, 2);
    return t == DTYPE_F16 ? dtype_f16_to_f32(h) : dtype_bf16_to_f32(h);
}

/* Copies W into the k-block / panel layout, as d->sdt: halves stay halves
 * unless sdt is F32 (then dtype.h widens them here, once). */
static void pack_weights(struct dense_cpu *d, const unsigned char *w, enum dtype wdt)
{
    const size_t K = (size_t)d->in, N = (size_t)d->out, npad = (size_t)d->npad;
    const size_t es = dtype_size(d->sdt), ses = dtype_size(wdt);
    const size_t nr = (size_t)d->nr;
    const size_t KC = (size_t)d->kc;
    for (size_t pc = 0; pc < K; pc += KC) {
        const size_t kc = K - pc < KC ? K - pc : KC;
        unsigned char *blk = (unsigned char *)d->w + pc * npad * es;
        for (size_t jr = 0; jr < npad; jr += nr) {
            unsigned char *panel = blk + jr * kc * es;
            /* j outer: each source row is read along k, the cache-friendly
             * way. The element copies have constant sizes (4 or 2 bytes):
             * a memcpy of a size known only at run time was a library call
             * per weight, most of a load's time (a 100 MB model: 75 ms). */
            for (size_t j = 0; j < nr; j++) {
                const size_t o = jr + j;
                unsigned char *dst = panel + j * es;
                const unsigned char *src = w + (o * K + pc) * ses;
                if (o >= N) {
                    for (size_t k = 0; k < kc; k++)
                        memset(dst + k * nr * es, 0, es);
                } else if (d->sdt == wdt && es == 4) {
                    for (size_t k = 0; k < kc; k++)
                        memcpy(dst + k * nr * 4, src + k * 4, 4);
                } else if (d->sdt == wdt && es == 2) {
                    for (size_t k = 0; k < kc; k++)
                        memcpy(dst + k * nr * 2, src + k * 2, 2);
                } else {
                    for (size_t k = 0; k < kc; k++) {
                        float f = src_at(w, wdt, o * K + pc + k);
                        memcpy(dst + k * nr * es, &f, sizeof f);
                    }
                }
            }
        }
    }
}

/* dense_cpu_prepare_isa, or over `packed` weights (borrowed) when given. */
static int dense_prepare(enum kernels_isa isa, const void *w, enum dtype wdt, const void *b,
                         enum dtype bdt, int out_features, int in_features, enum dense_act act,
                         const void *packed, size_t packed_bytes, struct dense_cpu **out,
                         char *msg, size_t cap)
{
    if (packed)
        w = packed;
    if (!w) {
        snprintf(msg, cap, "dense: the weight pointer is NULL");
        return -1;
    }
    if (out_features < 1 || in_features < 1) {
        snprintf(msg, cap, "dense: weight shape [%d, %d] (out_features, in_features) has an "
                 "empty dimension", out_features, in_features);
        return -1;
    }
    if (!dtype_valid(wdt) || (b && !dtype_valid(bdt))) {
        snprintf(msg, cap, "dense: %s dtype %d is not one of F32, F16, BF16",
                 dtype_valid(wdt) ? "bias" : "weight", dtype_valid(wdt) ? (int)bdt : (int)wdt);
        return -1;
    }
    if ((int)act < 0 || (int)act >= ACT_COUNT) {
        snprintf(msg, cap, "dense: activation %d is not one of none, relu, gelu, tanh, sigmoid",
                 (int)act);
        return -1;
    }
    if (out_features > INT32_MAX - DENSE_NR_MAX) {
        snprintf(msg, cap, "dense: out_features %d is too large", out_features);
        return -1;
    }
    if (isa == KERNELS_ISA_AUTO)
        isa = kernels_isa_best();
    if (!kernels_isa_supported(isa)) {
        snprintf(msg, cap, "dense: the %s kernels cannot run on this CPU (it lacks %s); use auto",
                 kernels_isa_name(isa),
                 isa == KERNELS_ISA_AVX512 ? "AVX-512F, AVX2, FMA or F16C" : "AVX2, FMA or F16C");
        return -1;
    }
    const int nr = dense_isa_nr(isa);
    const int npad = (out_features + nr - 1) / nr * nr;
    /* Halves are kept as halves (half the memory and, for one row, half the
     * time) where the kernel widens them cheaply: AVX2 has F16C, and BF16 is
     * a shift anywhere. Portable code has no fast F16 conversion, so it gets
     * F32 weights at twice the memory. */
    const enum dtype sdt = wdt == DTYPE_F16 && isa == KERNELS_ISA_GENERIC ? DTYPE_F32 : wdt;
    const size_t es = dtype_size(sdt);
    /* A cap far above any real layer keeps the size arithmetic from wrapping
     * and turns a corrupt shape into a message instead of an OOM. */
    const double need = (double)in_features * npad * (double)es;
    if (need > (double)(1ull << 40)) {
        snprintf(msg, cap, "dense: weight [%d, %d] %s would take %.0f GiB packed; more than "
                 "the 1 TiB accepted", out_features, in_features, dtype_name(wdt),
                 need / (1ull << 30));
        return -1;
    }
    /* Rounded up to the alignment, as aligned_alloc requires. */
    const size_t wbytes = ((size_t)in_features * (size_t)npad * es + DENSE_ALIGN - 1) /
                          DENSE_ALIGN * DENSE_ALIGN;
    const size_t bbytes = (size_t)npad * sizeof(float);
    if (packed && (packed_bytes != wbytes || ((uintptr_t)packed % DENSE_ALIGN) != 0)) {
        snprintf(msg, cap, "dense: packed weights of %zu bytes at %p, but this CPU's %s kernels "
                 "lay [%d, %d] %s out in %zu aligned bytes", packed_bytes, packed,
                 kernels_isa_name(isa), out_features, in_features, dtype_name(wdt), wbytes);
        return -1;
    }
    struct dense_cpu *d = calloc(1, sizeof *d);
    if (d) {
        d->w_borrowed = packed != NULL;
        /* Not on transparent huge pages: with defrag=madvise (Debian's
         * default) faulting them in compacts memory first, and a 100 MB
         * model's first load took 290 ms instead of 110. */
        d->w = packed ? (void *)packed : aligned_alloc(DENSE_ALIGN, wbytes);
        d->bias = aligned_alloc(DENSE_ALIGN, bbytes);
    }
    if (!d || !d->w || !d->bias) {
        dense_cpu_free(d);
        snprintf(msg, cap, "dense: out of memory for weight [%d, %d] %s (%.1f MiB packed)",
                 out_features, in_features, dtype_name(wdt), (double)wbytes / (1 << 20));
        return -1;
    }
    d->out = out_features;
    d->in = in_features;
    d->npad = npad;
    d->nr = nr;
    d->kc = dense_isa_kc(isa, sdt);
    d->act = act;
    d->sdt = sdt;
    d->isa = isa;
    d->wbytes = wbytes;
    d->run = dense_run_generic;
#if BG_HAVE_X86_PATHS
    if (isa == KERNELS_ISA_AVX2)
        d->run = dense_run_avx2;
    if (isa == KERNELS_ISA_AVX512)
        d->run = dense_run_avx512;
#endif
    if (!packed)
        pack_weights(d, w, wdt);
    for (int o = 0; o < npad; o++)
        d->bias[o] = b && o < out_features ? src_at(b, bdt, (size_t)o) : 0.0f;
    *out = d;
    return 0;
}

int dense_cpu_prepare_isa(enum kernels_isa isa, const void *w, enum dtype wdt, const void *b,
                          enum dtype bdt, int out_features, int in_features, enum dense_act act,
                          struct dense_cpu **out, char *msg, size_t cap)
{
    return dense_prepare(isa, w, wdt, b, bdt, out_features, in_features, act, NULL, 0, out, msg,
                         cap);
}

int dense_cpu_prepare_packed(const void *packed, size_t bytes, enum dtype wdt, const float *bias,
                             int out_features, int in_features, enum dense_act act,
                             struct dense_cpu **out, char *msg, size_t cap)
{
    if (!packed) {
        snprintf(msg, cap, "dense: the packed weights pointer is NULL");
        return -1;
    }
    return dense_prepare(KERNELS_ISA_AUTO, NULL, wdt, bias, DTYPE_F32, out_features, in_features,
                         act, packed, bytes, out, msg, cap);
}

const void *dense_cpu_packed(const struct dense_cpu *d, size_t *bytes, const float **bias)
{
    *bytes = d->wbytes;
    *bias = d->bias;
    return d->w;
}

int dense_cpu_prepare(const void *w, enum dtype wdt, const void *b, enum dtype bdt,
                      int out_features, int in_features, enum dense_act act,
                      struct dense_cpu **out, char *msg, size_t cap)
{
    return dense_cpu_prepare_isa(KERNELS_ISA_AUTO, w, wdt, b, bdt, out_features, in_features,
                                 act, out, msg, cap);
}

void dense_cpu_run(const struct dense_cpu *d, const float *x, int rows, float *y)
{
    d->run(d, x, rows, y);
}

size_t dense_cpu_bytes(const struct dense_cpu *d)
{
    return sizeof *d + d->wbytes + (size_t)d->npad * sizeof(float);
}

enum kernels_isa dense_cpu_isa(const struct dense_cpu *d) { return d->isa; }
int dense_cpu_out_features(const struct dense_cpu *d) { return d->out; }
int dense_cpu_in_features(const struct dense_cpu *d) { return d->in; }

void dense_cpu_free(struct dense_cpu *d)
{
    if (!d)
        return;
    if (!d->w_borrowed)
        free(d->w);
    free(d->bias);
    free(d);
}
