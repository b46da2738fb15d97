/* decode.c - compressed request bodies (http.h "compressed bodies"). */
#include "http/http.h"

#include "common/buf.h"

#include <stdbool.h>
#include <stdio.h>
#include <strings.h>

#include <zlib.h>

/* Inflates with zlib's windowBits wbits; 0, 1 (the header is not that
 * format: the caller may try another), or an HTTP status. */
static int decode_inflate(int wbits, const void *in, size_t len, size_t max, struct buf *out,
                          char *msg, size_t cap)
{
    z_stream z = {0};
    if (inflateInit2(&z, wbits) != Z_OK) {
        snprintf(msg, cap, "out of memory inflating the body");
        return 500;
    }
    size_t start = out->len;
    z.next_in = (Bytef *)in;
    int rc = Z_OK, status = 0;
    size_t left = len, trailing = 0;   /* bytes after the last member that ended */
    for (;;) {
        if (rc == Z_STREAM_END) {
            /* A gzip body may be several members, one after another
             * (RFC 1952 2.2; gzip -d and Python's gzip read them all). */
            if (wbits <= MAX_WBITS || (z.avail_in == 0 && left == 0) ||
                inflateReset(&z) != Z_OK)
                break;
            trailing = (size_t)z.avail_in + left;
            rc = Z_OK;
        }
        if (z.avail_in == 0) {
            /* zlib counts in uInt: feed a large body in pieces. */
            z.avail_in = left > (1u << 30) ? (1u << 30) : (uInt)left;
            left -= z.avail_in;
        }
        size_t room = max - (out->len - start);
        size_t want = room < 65536 ? room + 1 : 65536;   /* one byte past: to see the limit crossed */
        if (buf_reserve(out, want) < 0) {
            snprintf(msg, cap, "out of memory inflating the body");
            status = 500;
            break;
        }
        z.next_out = (Bytef *)out->data + out->len;
        z.avail_out = (uInt)want;
        rc = inflate(&z, Z_NO_FLUSH);
        out->len += want - z.avail_out;
        if (out->len - start > max) {
            snprintf(msg, cap, "the body inflates to more than limits.max_body_bytes (%zu bytes)",
                     max);
            status = 413;
            break;
        }
        if (rc != Z_OK && rc != Z_STREAM_END && trailing && z.total_out == 0) {
            snprintf(msg, cap, "%zu bytes follow the end of the compressed body (not another "
                     "gzip member)", trailing);
            status = 400;
            break;
        }
        if (rc == Z_DATA_ERROR && z.total_out == 0 && z.total_in <= 2) {
            status = 1;   /* not this format's header */
            break;
        }
        if (rc != Z_OK && rc != Z_STREAM_END) {
            bool cut = rc == Z_BUF_ERROR && z.avail_in == 0 && left == 0;
            snprintf(msg, cap, "the body is not valid %s data (%s)",
                     wbits > MAX_WBITS ? "gzip" : "deflate",
                     cut ? "it ends too soon" : z.msg ? z.msg : "corrupt");
            status = 400;
            break;
        }
    }
    if (status == 0 && (z.avail_in > 0 || left > 0)) {
        snprintf(msg, cap, "%zu bytes follow the end of the compressed body",
                 (size_t)z.avail_in + left);
        status = 400;
    }
    inflateEnd(&z);
    if (status)
        out->len = start;
    return status;
}

static bool decode_is(const char *enc, size_t n, const char *name)
{
    size_t l = 0;
    while (name[l])
        l++;
    return n == l && strncasecmp(enc, name, l) == 0;
}

int http_body_decode(const char *enc, size_t enc_len, const void *in, size_t len, size_t max,
                     struct buf *out, char *msg, size_t cap)
{
    while (enc_len && (*enc == ' ' || *enc == '\t')) {
        enc++;
        enc_len--;
    }
    while (enc_len && (enc[enc_len - 1] == ' ' || enc[enc_len - 1] == '\t'))
        enc_len--;
    if (decode_is(enc, enc_len, "identity") || enc_len == 0) {
        if (len > max) {
            snprintf(msg, cap, "the body is more than limits.max_body_bytes (%zu bytes)", max);
            return 413;
        }
        return buf_append(out, in, len) < 0 ? 500 : 0;
    }
    if (decode_is(enc, enc_len, "gzip") || decode_is(enc, enc_len, "x-gzip")) {
        int rc = decode_inflate(MAX_WBITS + 16, in, len, max, out, msg, cap);
        if (rc == 1)
            snprintf(msg, cap, "the body is not valid gzip data (no gzip header)");
        return rc == 1 ? 400 : rc;
    }
    if (decode_is(enc, enc_len, "deflate")) {
        /* RFC 9110's deflate is zlib's format; some clients send it raw. */
        int rc = decode_inflate(MAX_WBITS, in, len, max, out, msg, cap);
        if (rc == 1)
            rc = decode_inflate(-MAX_WBITS, in, len, max, out, msg, cap);
        if (rc == 1) {
            snprintf(msg, cap, "the body is not valid deflate data");
            rc = 400;
        }
        return rc;
    }
    snprintf(msg, cap, "Content-Encoding \"%.*s\" is not served (gzip, deflate or identity; one "
             "of them)", (int)(enc_len > 64 ? 64 : enc_len), enc);
    return 415;
}
