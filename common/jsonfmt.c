/* jsonfmt.c - see jsonfmt.h. */
#include "common/jsonfmt.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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
    /* Ties to even, as printf rounds (a float that is a tie, 1950125.125,
     * is one exactly here too: the product then needs ~34 bits). */
    long long m = (long long)nearbyint(d * pow10[8 - e]);   /* 9 digits: 8 - e in 0..13 */
    if (m >= 1000000000LL) {                   /* rounding carried into a 10th digit */
        m = (long long)nearbyint((double)m / 10.0);
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


/* TF Serving's WriteDecimal: six significant digits as printf's %g
 * writes them (absl::StrCat) where that text reads back as the same
 * float, else nine (%.9g); ".0" after a number with neither '.' nor 'e'.
 * The common case by hand: values 1e-4 <= |v| < 1e6 print in fixed
 * notation at both precisions, and a six-digit decimal reads back as v
 * when the float nearest to it is v (the double quotient m / 10^k, m
 * below 10^6, rounds to the float a reader's strtof gives). */
#define TFS_NINE 0      /* json_tfs_six: six digits do not read back: nine */
#define TFS_PRINTED 1
#define TFS_GENERAL 2   /* outside the fixed range: printf's way */
static int json_tfs_six(struct buf *out, float v)
{
    double d = fabs((double)v);
    int e = (int)floor(log10(d));
    if (e < -4 || e > 5)
        return TFS_GENERAL;
    static const double pow10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9};
    int k = 5 - e;   /* digits after the point: 0..9 */
    long long m = llround(d * pow10[k]);
    if (m >= 1000000LL) {   /* rounding carried into a 7th digit */
        if (k == 0)
            return TFS_GENERAL;   /* 1e6: %g's exponent form */
        m = llround((double)m / 10.0);
        k--;
    }
    if ((float)((double)m / pow10[k]) != fabsf(v))
        return TFS_NINE;
    while (k > 0 && m % 10 == 0) {   /* %g trims trailing zeros */
        m /= 10;
        k--;
    }
    char txt[32];
    int n = k ? snprintf(txt, sizeof txt, "%s%lld.%0*lld", v < 0 ? "-" : "", m / (long long)pow10[k],
                         k, m % (long long)pow10[k])
              : snprintf(txt, sizeof txt, "%s%lld.0", v < 0 ? "-" : "", m);
    return buf_append(out, txt, (size_t)n) < 0 ? -1 : TFS_PRINTED;
}

int json_append_float_tfs(struct buf *out, float v)
{
    if (isnan(v))
        return buf_append(out, "NaN", 3);
    if (isinf(v))
        return v > 0 ? buf_append(out, "Infinity", 8) : buf_append(out, "-Infinity", 9);
    if (v == 0.0f)
        return signbit(v) ? buf_append(out, "-0.0", 4) : buf_append(out, "0.0", 3);
    int six = json_tfs_six(out, v);
    if (six < 0 || six == TFS_PRINTED)
        return six < 0 ? -1 : 0;
    double d = fabs((double)v);
    size_t at = out->len;
    char txt[40];
    int n = six == TFS_NINE ? 0 : snprintf(txt, sizeof txt, "%.6g", (double)v);
    if (six == TFS_NINE || strtof(txt, NULL) != v) {
        /* Nine digits: in fixed notation from 1e-4 to below 1e9 (%g's
         * range at that precision), json_append_float's own; else %.9g. */
        if (d >= 1e-4 && d < 1e9) {
            if (json_append_float(out, v) < 0)
                return -1;
            n = -1;
        } else {
            n = snprintf(txt, sizeof txt, "%.9g", (double)v);
        }
    }
    if (n >= 0 && buf_append(out, txt, (size_t)n) < 0)
        return -1;
    for (size_t i = at; i < out->len; i++)
        if (out->data[i] == '.' || out->data[i] == 'e')
            return 0;
    return buf_append(out, ".0", 2);
}

int json_append_nested(struct buf *out, const float **v, const int64_t *shape, int ndims,
                       json_float_fn put)
{
    if (buf_append(out, "[", 1) < 0)
        return -1;
    for (int64_t i = 0; i < shape[0]; i++) {
        if (i && buf_append(out, ",", 1) < 0)
            return -1;
        if (ndims == 1) {
            if (put(out, **v) < 0)
                return -1;
            (*v)++;
        } else if (json_append_nested(out, v, shape + 1, ndims - 1, put) < 0) {
            return -1;
        }
    }
    return buf_append(out, "]", 1);
}

/* Whether text[i..] starts the bare word w, not inside a longer one. */
static bool json_word_at(const char *text, size_t len, size_t i, const char *w)
{
    size_t n = strlen(w);
    if (i + n > len || memcmp(text + i, w, n) != 0)
        return false;
    char next = i + n < len ? text[i + n] : ' ';
    return !((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') ||
             (next >= '0' && next <= '9') || next == '_');
}

/* From a string's opening quote at i: the index of its closing quote (len
 * when it has none), escapes skipped. The one way the text scanners here
 * step over what strings hold. */
static size_t json_string_close(const char *text, size_t len, size_t i)
{
    for (i++; i < len && text[i] != '"'; i++)
        if (text[i] == '\\')
            i++;
    return i < len ? i : len;
}

int json_nonfinite_to_null(const char *text, size_t len, struct buf *out)
{
    static const char *const words[] = {"-Infinity", "Infinity", "NaN"};
    int replaced = 0;
    size_t from = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '"') {
            i = json_string_close(text, len, i);
            continue;
        }
        if (c != '-' && c != 'I' && c != 'N')
            continue;
        for (size_t w = 0; w < sizeof words / sizeof words[0]; w++) {
            if (!json_word_at(text, len, i, words[w]))
                continue;
            if (out && (buf_append(out, text + from, i - from) < 0 ||
                        buf_append(out, "null", 4) < 0))
                return -1;
            i += strlen(words[w]) - 1;
            from = i + 1;
            replaced++;
            break;
        }
    }
    return out && buf_append(out, text + from, len - from) < 0 ? -1 : replaced;
}

bool json_error_out_of_range(const char *jansson_text)
{
    return strstr(jansson_text, "overflow") || strstr(jansson_text, "too big");
}

uint64_t json_values_at_least(const char *text, size_t len)
{
    uint64_t n = 1;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == '"')
            i = json_string_close(text, len, i);
        else if (c == ',' || c == ':' || c == '[' || c == '{')
            n++;
    }
    return n;
}
