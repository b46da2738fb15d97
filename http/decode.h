/* decode.h - request bodies sent compressed (Content-Encoding: gzip or
 * deflate, as tritonclient's request_compression_algorithm sends them),
 * inflated before a handler sees them and bounded by max_body_bytes after
 * inflation: a small body that inflates past the limit (a zip bomb) is 413,
 * and inflation stops at the limit, so it never costs more memory than an
 * uncompressed body could. Pure: no request, no connection (the fuzzer
 * calls it). */
#ifndef BG_HTTP_DECODE_H
#define BG_HTTP_DECODE_H

#include <stddef.h>

#include "common/buf.h"

/* Inflates in (len bytes) as the Content-Encoding value enc (enc_len bytes,
 * case-insensitive: "gzip", "x-gzip", "deflate" (zlib's format, or raw
 * deflate as some clients send), "identity") into out (appended), at most
 * max bytes. Returns 0, or the HTTP status to answer with a message in msg:
 * 400 (not valid data of that encoding, or trailing bytes), 413 (more than
 * max bytes inflated), 415 (an encoding not served, or several stacked). */
int http_body_decode(const char *enc, size_t enc_len, const void *in, size_t len, size_t max,
                     struct buf *out, char *msg, size_t cap);

#endif
