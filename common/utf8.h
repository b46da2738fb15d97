/* utf8.h - whether bytes are UTF-8 (RFC 3629: no overlong form, no
 * surrogate, nothing past U+10FFFF): for strings that come in without a
 * parser that checks them (protobuf-c's, a %-decoded path segment) and go
 * out in JSON, where jansson refuses them (json_string gives NULL). */
#ifndef BG_UTF8_H
#define BG_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The length of the valid UTF-8 sequence at p (n bytes left), or 0. */
static inline size_t utf8_seq_len(const uint8_t *p, size_t n)
{
    static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
    uint8_t c = p[0];
    size_t k = c < 0x80 ? 0 : (c & 0xe0) == 0xc0 ? 1 : (c & 0xf0) == 0xe0 ? 2
                             : (c & 0xf8) == 0xf0 ? 3 : 4;
    if (k == 4 || k >= n)
        return 0;   /* not a leading byte, or cut short */
    uint32_t cp = k == 0 ? c : k == 1 ? c & 0x1fu : k == 2 ? c & 0x0fu : c & 0x07u;
    for (size_t m = 1; m <= k; m++) {
        if ((p[m] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[m] & 0x3fu);
    }
    if (cp < least[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return k + 1;
}

static inline bool utf8_valid(const void *s, size_t n)
{
    const uint8_t *p = s;
    for (size_t i = 0, k; i < n; i += k)
        if (!(k = utf8_seq_len(p + i, n - i)))
            return false;
    return true;
}

/* Each byte of s (NUL-terminated) that is not part of valid UTF-8 becomes
 * '?', in place: a message quoting what a client sent (a %-decoded path,
 * a cut at a buffer's end) still goes out as JSON. */
static inline void utf8_scrub(char *s)
{
    uint8_t *p = (uint8_t *)s;
    size_t n = 0;
    while (p[n])
        n++;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq_len(p + i, n - i);
        if (!k) {
            p[i++] = '?';
            continue;
        }
        i += k;
    }
}

#endif
