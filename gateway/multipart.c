/* multipart.c - see multipart.h. */
#include "gateway/multipart.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define MULTIPART_NO_PARAM ((size_t)-1)

/* Where parameter `key`'s value starts in h[0..n) (n for an empty value
 * at the end), or MULTIPART_NO_PARAM. Quoted strings are stepped over: a
 * filename holding "; name=x" named the part x. */
static size_t multipart_param_at(const char *h, size_t n, const char *key)
{
    size_t kl = strlen(key);
    for (size_t i = 0; i < n; i++) {
        if (h[i] == '"') {   /* a quoted-string: \x stands for x */
            for (i++; i < n && h[i] != '"'; i++)
                if (h[i] == '\\')
                    i++;
            continue;
        }
        if (i + kl < n && (i == 0 || h[i - 1] == ';' || h[i - 1] == ' ' || h[i - 1] == '\t') &&
            strncasecmp(h + i, key, kl) == 0 && h[i + kl] == '=')
            return i + kl + 1;
    }
    return MULTIPART_NO_PARAM;
}

bool multipart_param(const char *h, size_t n, const char *key, char *out, size_t cap)
{
    size_t v = multipart_param_at(h, n, key), k = 0;
    if (v == MULTIPART_NO_PARAM)
        return false;
    if (v < n && h[v] == '"') {
        /* A quoted-string: \x stands for x (httpx writes a Windows path's
         * backslashes and a quote that way). */
        for (v++; v < n && h[v] != '"'; v++) {
            if (h[v] == '\\' && v + 1 < n)
                v++;
            /* A control character (a NUL cut the name short) is no name's. */
            if (k + 1 >= cap || (unsigned char)h[v] < 0x20 || h[v] == 0x7f)
                return false;
            out[k++] = h[v];
        }
        if (v == n)
            return false;   /* an unterminated quote */
    } else {
        for (; v < n && h[v] != ';' && h[v] != ' '; v++) {
            if (k + 1 >= cap || (unsigned char)h[v] < 0x20 || h[v] == 0x7f)
                return false;
            out[k++] = h[v];
        }
    }
    out[k] = '\0';
    return true;
}

/* Whether parameter `key` is there at all (multipart_param may not keep it). */
static bool multipart_param_given(const char *h, size_t n, const char *key)
{
    return multipart_param_at(h, n, key) != MULTIPART_NO_PARAM;
}

int multipart_parse(const char *ct, size_t ct_len, const char *body, size_t len,
                    struct multipart_part *parts, int max)
{
    char boundary[72];   /* RFC 2046: 1 to 70 characters */
    if (!ct || ct_len < 19 || strncasecmp(ct, "multipart/form-data", 19) != 0 ||
        !multipart_param(ct, ct_len, "boundary", boundary, sizeof boundary) || !boundary[0])
        return -1;
    char delim[80];
    int dl = snprintf(delim, sizeof delim, "\r\n--%s", boundary);
    const char *end = body + len;
    /* The first delimiter may start the body (no CRLF before it). */
    const char *p;
    if (len >= (size_t)dl - 2 && memcmp(body, delim + 2, (size_t)dl - 2) == 0)
        p = body + dl - 2;
    else if ((p = memmem(body, len, delim, (size_t)dl)) != NULL)
        p += dl;
    else
        return -1;
    int n = 0;
    for (;;) {
        if (end - p >= 2 && p[0] == '-' && p[1] == '-')
            return n;   /* the closing delimiter */
        while (p < end && (*p == ' ' || *p == '\t'))   /* transport padding */
            p++;
        if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
            return -1;
        p += 2;
        struct multipart_part part = {0};
        const char *hend;
        if (end - p >= 2 && p[0] == '\r' && p[1] == '\n') {
            hend = p;   /* no headers */
        } else {
            hend = memmem(p, (size_t)(end - p), "\r\n\r\n", 4);
            if (!hend)
                return -1;
            for (const char *h = p; h < hend + 2;) {
                const char *le = memmem(h, (size_t)(hend + 2 - h), "\r\n", 2);
                if (!le)
                    break;
                if ((size_t)(le - h) > 20 && strncasecmp(h, "Content-Disposition:", 20) == 0) {
                    multipart_param(h + 20, (size_t)(le - h - 20), "name", part.name,
                                    sizeof part.name);
                    bool kept = multipart_param(h + 20, (size_t)(le - h - 20), "filename",
                                                part.filename, sizeof part.filename);
                    if (!kept)
                        part.filename[0] = '\0';
                    /* Given, but not kept: the caller says so rather than
                     * naming the file another way. An empty one (filename="")
                     * is kept, empty: it was said to be too long. */
                    part.filename_cut = !kept && multipart_param_given(h + 20,
                                                                       (size_t)(le - h - 20),
                                                                       "filename");
                }
                h = le + 2;
            }
            hend += 2;
        }
        const char *data = hend + 2;
        if (data > end)
            return -1;
        const char *q = memmem(data, (size_t)(end - data), delim, (size_t)dl);
        if (!q)
            return -1;
        part.data = data;
        part.len = (size_t)(q - data);
        if (n < max)
            parts[n++] = part;
        p = q + dl;
    }
}
