/* jsonfmt.c - see jsonfmt.h. */
#include "common/jsonfmt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A float as JSON with 9 significant digits (always enough to read back the
 * same float), trailing zeros trimmed. Printed by hand: snprintf("%g") was
 * most of the IO thread's time for wide outputs. Exponents outside -5..8
 * fall back to snprintf. */
int json_append_float(struct buf *out, float v)
{
    if (buf_reserve(out, 32) < 0)
        return -1;
    char *p = out->data + out->len, *start = p;
    if (!isfinite(v)) {
        /* JSON has no inf/NaN; a model that produces one answers null there. */
        memcpy(p, "null", 4);
        out->len += 4;
        return 0;
    }
    if (v == 0.0f) {
        *p = '0';
        out->len += 1;
        return 0;
    }
    double d = v;
    if (d < 0) {
        *p++ = '-';
        d = -d;
    }
    int e = (int)floor(log10(d));
    if (e < -5 || e > 8) {
        out->len += (size_t)snprintf(start, 32, "%.9g", (double)v);
        return 0;
    }
    static const double pow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9,
                                   1e10, 1e11, 1e12, 1e13};
    long long m = llround(d * pow10[8 - e]);   /* 9 digits: 8 - e in 0..13 */
    if (m >= 1000000000LL) {                   /* rounding carried into a 10th digit */
        m = llround((double)m / 10.0);
        e++;
        if (e > 8) {
            out->len += (size_t)snprintf(start, 32, "%.9g", (double)v);
            return 0;
        }
    }
    char dig[9];
    for (int i = 8; i >= 0; i--) {
        dig[i] = (char)('0' + m % 10);
        m /= 10;
    }
    int last = 8;   /* trim trailing zeros of the fraction */
    while (last > 0 && last > e && dig[last] == '0')
        last--;
    if (e >= 0) {
        for (int i = 0; i <= e; i++)
            *p++ = dig[i];
        if (last > e) {
            *p++ = '.';
            for (int i = e + 1; i <= last; i++)
                *p++ = dig[i];
        }
    } else {
        *p++ = '0';
        *p++ = '.';
        for (int i = 0; i < -e - 1; i++)
            *p++ = '0';
        for (int i = 0; i <= last; i++)
            *p++ = dig[i];
    }
    out->len += (size_t)(p - start);
    return 0;
}

