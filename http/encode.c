/* encode.c - compressed answers (http.h "compressed answers"): which coding
 * a client accepts, and the deflater each IO thread keeps for them. */
#include "http/http.h"
#include "http/http_impl.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <zlib.h>

/* zlib's state is ~270 KiB (window and hash chains at memLevel 8): made
 * once per IO thread and coding, reset between answers. */
struct http_deflater {
    z_stream z[2];       /* [0] gzip, [1] deflate (zlib's format, RFC 9110's "deflate") */
    bool ready[2];
    int level[2];
};

/* A qvalue (RFC 9110 12.4.2: "0" to "1", three decimals at most) in
 * thousandths; -1 when it is not one. */
static int encode_qvalue(const char *s, size_t n)
{
    if (n == 0 || (s[0] != '0' && s[0] != '1'))
        return -1;
    int q = (s[0] - '0') * 1000, scale = 100;
    if (n == 1)
        return q;
    if (s[1] != '.' || n > 5)
        return -1;
    for (size_t i = 2; i < n; i++, scale /= 10) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        q += (s[i] - '0') * scale;
    }
    return q > 1000 ? -1 : q;
}

static bool encode_is(const char *s, size_t n, const char *name)
{
    return strlen(name) == n && strncasecmp(s, name, n) == 0;
}

static const char *encode_trim(const char *s, const char *end, size_t *n)
{
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    *n = (size_t)(end - s);
    return s;
}

enum http_coding http_coding_pick(const char *v, size_t len)
{
    int q_gzip = -1, q_deflate = -1, q_star = -1;   /* -1: not named */
    const char *p = v, *end = v + len;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *elem_end = comma ? comma : end;
        const char *semi = memchr(p, ';', (size_t)(elem_end - p));
        size_t nl;
        const char *name = encode_trim(p, semi ? semi : elem_end, &nl);
        int q = 1000;
        /* Parameters: only q counts; a malformed one drops the element. */
        for (const char *a = semi; a && a < elem_end && q >= 0;) {
            const char *next = memchr(a + 1, ';', (size_t)(elem_end - a - 1));
            size_t pl;
            const char *par = encode_trim(a + 1, next ? next : elem_end, &pl);
            if (pl >= 2 && (par[0] == 'q' || par[0] == 'Q') && par[1] == '=') {
                size_t ql;
                const char *qs = encode_trim(par + 2, par + pl, &ql);
                q = encode_qvalue(qs, ql);
            }
            a = next;
        }
        if (q >= 0) {
            if (encode_is(name, nl, "gzip") || encode_is(name, nl, "x-gzip"))
                q_gzip = q;
            else if (encode_is(name, nl, "deflate"))
                q_deflate = q;
            else if (encode_is(name, nl, "*"))
                q_star = q;
        }
        p = comma ? comma + 1 : end;
    }
    if (q_gzip < 0)
        q_gzip = q_star;
    if (q_deflate < 0)
        q_deflate = q_star;
    if (q_gzip <= 0 && q_deflate <= 0)
        return HTTP_CODING_IDENTITY;
    /* gzip on a tie: every client that takes deflate takes it, and some
     * mean raw deflate by "deflate" (which we would not send). */
    return q_gzip >= q_deflate ? HTTP_CODING_GZIP : HTTP_CODING_DEFLATE;
}

const char *http_coding_name(enum http_coding c)
{
    return c == HTTP_CODING_GZIP ? "gzip" : c == HTTP_CODING_DEFLATE ? "deflate" : "identity";
}

int http_coding_encode(struct http_deflater **dp, enum http_coding c, int level, const void *in,
                       size_t len, struct buf *out)
{
    if (c != HTTP_CODING_GZIP && c != HTTP_CODING_DEFLATE)
        return -1;
    if (!*dp && !(*dp = calloc(1, sizeof **dp)))
        return -1;
    struct http_deflater *d = *dp;
    int i = c == HTTP_CODING_GZIP ? 0 : 1;
    z_stream *z = &d->z[i];
    if (d->ready[i] && d->level[i] != level) {
        deflateEnd(z);
        d->ready[i] = false;
    }
    if (!d->ready[i]) {
        memset(z, 0, sizeof *z);
        if (deflateInit2(z, level, Z_DEFLATED, i == 0 ? MAX_WBITS + 16 : MAX_WBITS, 8,
                         Z_DEFAULT_STRATEGY) != Z_OK)
            return -1;
        d->ready[i] = true;
        d->level[i] = level;
    } else if (deflateReset(z) != Z_OK) {
        return -1;
    }
    /* One call: the bound is what the worst input takes, so Z_FINISH ends
     * the stream in it (zlib counts in uLong, which is 64 bits here). */
    uLong bound = deflateBound(z, (uLong)len);
    size_t start = out->len;
    if (buf_reserve(out, (size_t)bound) < 0)
        return -1;
    z->next_in = (Bytef *)in;
    z->avail_in = (uInt)len;
    z->next_out = (Bytef *)out->data + start;
    z->avail_out = (uInt)bound;
    if (len > UINT32_MAX || bound > UINT32_MAX || deflate(z, Z_FINISH) != Z_STREAM_END)
        return -1;
    out->len = start + (size_t)(bound - z->avail_out);
    return 0;
}

void http_deflater_free(struct http_deflater *d)
{
    if (!d)
        return;
    for (int i = 0; i < 2; i++)
        if (d->ready[i])
            deflateEnd(&d->z[i]);
    free(d);
}

/* Types whose bytes are compressed already (deflating them again costs
 * CPU and saves nothing), and gRPC's, whose messages carry their own
 * compression (grpc-encoding): HTTP's would break every client. */
static bool encode_type_skipped(const char *ct)
{
    static const char *const packed[] = {"image/", "audio/", "video/", "application/gzip",
                                         "application/x-gzip", "application/zip",
                                         "application/zstd", "application/grpc"};
    for (size_t i = 0; ct && i < sizeof packed / sizeof packed[0]; i++)
        if (strncasecmp(ct, packed[i], strlen(packed[i])) == 0)
            return true;
    return false;
}

/* Whether "Name:" starts one of the preformatted header lines. */
static bool encode_has_header(const char *lines, const char *name)
{
    size_t n = strlen(name);
    for (const char *l = lines; l && *l;) {
        if (strncasecmp(l, name, n) == 0 && l[n] == ':')
            return true;
        l = strchr(l, '\n');
        l = l ? l + 1 : NULL;
    }
    return false;
}

int http_answer_encode(const struct http_compression *c, struct http_deflater **d,
                       const char *ae, size_t ae_len, const char *content_type, const void *body,
                       size_t len, const char *extra_headers, struct buf *zbody,
                       struct buf *headers)
{
    if (!c || !c->responses || len == 0 || len < (size_t)c->min_bytes ||
        encode_type_skipped(content_type) || encode_has_header(extra_headers, "Content-Encoding"))
        return 0;
    enum http_coding coding = ae ? http_coding_pick(ae, ae_len) : HTTP_CODING_IDENTITY;
    /* The answer depends on Accept-Encoding from here on, whatever it said:
     * a cache must not hand one client's coding to another. */
    bool vary = !encode_has_header(extra_headers, "Vary");
    if (coding != HTTP_CODING_IDENTITY &&
        http_coding_encode(d, coding, c->level, body, len, zbody) < 0)
        coding = HTTP_CODING_IDENTITY;   /* out of memory: the answer as it is */
    if (coding != HTTP_CODING_IDENTITY && zbody->len >= len)
        coding = HTTP_CODING_IDENTITY;   /* it did not shrink (random bytes, tiny JSON) */
    if (coding == HTTP_CODING_IDENTITY && !vary)
        return 0;
    if ((extra_headers && buf_append(headers, extra_headers, strlen(extra_headers)) < 0) ||
        (vary && buf_append(headers, "Vary: Accept-Encoding\r\n", 23) < 0) ||
        (coding != HTTP_CODING_IDENTITY &&
         (buf_append(headers, "Content-Encoding: ", 18) < 0 ||
          buf_append(headers, http_coding_name(coding), strlen(http_coding_name(coding))) < 0 ||
          buf_append(headers, "\r\n", 2) < 0)) ||
        buf_append(headers, "", 1) < 0)
        return 0;
    return coding != HTTP_CODING_IDENTITY ? 2 : 1;
}
