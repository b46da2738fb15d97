/* pool.c - pool.h. Memory-bound (each row read once), so plain C whose
 * column loops the compiler vectorises. */
#include <math.h>
#include <string.h>

#include "kernels/pool.h"

static void pool_mean(const float *x, size_t ldx, int hidden, int len, float *restrict o)
{
    for (int c = 0; c < hidden; c++)
        o[c] = 0.0f;
    for (int t = 0; t < len; t++) {
        const float *xr = x + (size_t)t * ldx;
        for (int c = 0; c < hidden; c++)
            o[c] += xr[c];
    }
    if (len > 0)   /* a division, as sentence-transformers' sum / count */
        for (int c = 0; c < hidden; c++)
            o[c] /= (float)len;
}

static void pool_max(const float *x, size_t ldx, int hidden, int len, float *restrict o)
{
    if (len == 0) {
        memset(o, 0, (size_t)hidden * sizeof *o);
        return;
    }
    memcpy(o, x, (size_t)hidden * sizeof *o);
    for (int t = 1; t < len; t++) {
        const float *xr = x + (size_t)t * ldx;
        for (int c = 0; c < hidden; c++)
            o[c] = xr[c] > o[c] || xr[c] != xr[c] ? xr[c] : o[c];   /* NaN wins, as torch.max */
    }
}

void pool_l2_normalize(float *x, int rows, int dim)
{
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * (size_t)dim;
        double ss = 0;
        for (int c = 0; c < dim; c++)
            ss += (double)xr[c] * xr[c];
        const double n = sqrt(ss);
        const float inv = (float)(1.0 / (n > 1e-12 ? n : 1e-12));
        for (int c = 0; c < dim; c++)
            xr[c] *= inv;
    }
}

int pool_rows(enum pool_mode mode, unsigned flags, const float *x, size_t ldx, int hidden,
              const int *cu_seqlens, int nseq, float *out)
{
    if (hidden < 1 || ldx < (size_t)hidden || nseq < 0 || !cu_seqlens || cu_seqlens[0] < 0 ||
        (mode != POOL_MEAN && mode != POOL_CLS && mode != POOL_MAX))
        return -1;
    for (int s = 0; s < nseq; s++)
        if (cu_seqlens[s + 1] < cu_seqlens[s])
            return -1;
    for (int s = 0; s < nseq; s++) {
        const float *xs = x + (size_t)cu_seqlens[s] * ldx;
        const int len = cu_seqlens[s + 1] - cu_seqlens[s];
        float *o = out + (size_t)s * (size_t)hidden;
        if (mode == POOL_MEAN)
            pool_mean(xs, ldx, hidden, len, o);
        else if (mode == POOL_MAX)
            pool_max(xs, ldx, hidden, len, o);
        else if (len > 0)
            memcpy(o, xs, (size_t)hidden * sizeof *o);
        else
            memset(o, 0, (size_t)hidden * sizeof *o);
    }
    if (flags & POOL_L2)
        pool_l2_normalize(out, nseq, hidden);
    return 0;
}

int pool_mode_parse(const char *name, enum pool_mode *out)
{
    static const char *const names[] = {[POOL_MEAN] = "mean", [POOL_CLS] = "cls", [POOL_MAX] = "max"};
    for (int i = 0; i < 3; i++)
        if (name && strcmp(name, names[i]) == 0) {
            *out = (enum pool_mode)i;
            return 0;
        }
    return -1;
}
