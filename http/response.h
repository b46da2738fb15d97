/* http_response.h - serializing a response head and body into a buffer.
 * Pure functions: the connection decides keep-alive, these only write. */
#ifndef BG_HTTP_RESPONSE_H
#define BG_HTTP_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"

/* "OK", "Not Found", ...; "Unknown" for codes we never send. */
const char *http_status_reason(int status);

enum http_conn_header {
    HTTP_CONN_DEFAULT,      /* HTTP/1.1 keep-alive: no Connection header needed */
    HTTP_CONN_KEEP_ALIVE,   /* HTTP/1.0 client kept alive: say so */
    HTTP_CONN_CLOSE,        /* "Connection: close" */
};

enum http_framing {
    HTTP_FRAME_LENGTH,           /* Content-Length: body_len */
    HTTP_FRAME_CHUNKED,          /* Transfer-Encoding: chunked; the body follows in chunks */
    HTTP_FRAME_NONE,             /* neither: no body (204, 304) or a body until close */
};

struct http_response {
    int status;
    enum http_framing framing;   /* HTTP_FRAME_LENGTH unless set */
    const char *content_type;    /* NULL: no Content-Type */
    const void *body;
    size_t body_len;             /* Content-Length, also for HEAD */
    bool omit_body;              /* HEAD */
    const char *extra_headers;   /* NULL or "Name: value\r\n" lines */
    size_t extra_len;            /* 0: strlen(extra_headers) */
    enum http_conn_header conn;
};

/* Appends the whole response (the head only unless framing is LENGTH). `date` is an IMF-fixdate ("Wed, 02 Dec 2026 10:15:03 GMT").
 * Returns 0 or -1 when out of memory. */
int http_response_write(struct buf *out, const struct http_response *r, const char *date);

/* The interim "100 Continue". */
int http_response_write_continue(struct buf *out);

/* Formats an IMF-fixdate for unix time t into out (32 bytes). */
void http_date_format(int64_t unix_sec, char out[32]);

#endif
