/* response.c - see response.h. */
#include "http/response.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

const char *http_status_reason(int status)
{
    switch (status) {
    case 100: return "Continue";
    case 101: return "Switching Protocols";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 303: return "See Other";
    case 304: return "Not Modified";
    case 307: return "Temporary Redirect";
    case 308: return "Permanent Redirect";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 412: return "Precondition Failed";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
    }
}

void http_date_format(int64_t unix_sec, char out[32])
{
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    struct tm tm;
    time_t t = (time_t)unix_sec;
    gmtime_r(&t, &tm);
    snprintf(out, 32, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
             months[tm.tm_mon % 12], (tm.tm_year + 1900) % 10000, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* Appends decimal n without printf: this runs once per response. */
static char *response_put_u64(char *p, uint64_t n)
{
    char tmp[24];
    int i = 0;
    do {
        tmp[i++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    while (i)
        *p++ = tmp[--i];
    return p;
}

static char *response_put_str(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

#define PUT_LIT(p, lit) response_put_str((p), (lit), sizeof(lit) - 1)

int http_response_write(struct buf *out, const struct http_response *r, const char *date)
{
    const char *reason = http_status_reason(r->status);
    size_t ctype_len = r->content_type ? strlen(r->content_type) : 0;
    size_t extra_len = r->extra_len ? r->extra_len : r->extra_headers ? strlen(r->extra_headers) : 0;
    size_t date_len = strlen(date);
    size_t body = r->omit_body || r->framing != HTTP_FRAME_LENGTH ? 0 : r->body_len;
    size_t need = 64 + strlen(reason) + 40 + date_len + 32 + ctype_len + 48 + extra_len + 32 + body;
    if (buf_reserve(out, need) < 0)
        return -1;
    char *p = out->data + out->len;
    p = PUT_LIT(p, "HTTP/1.1 ");
    p = response_put_u64(p, (uint64_t)r->status);
    *p++ = ' ';
    p = response_put_str(p, reason, strlen(reason));
    p = PUT_LIT(p, "\r\nServer: batchgate\r\nDate: ");
    p = response_put_str(p, date, date_len);
    if (r->content_type) {
        p = PUT_LIT(p, "\r\nContent-Type: ");
        p = response_put_str(p, r->content_type, ctype_len);
    }
    if (r->framing == HTTP_FRAME_LENGTH) {
        p = PUT_LIT(p, "\r\nContent-Length: ");
        p = response_put_u64(p, r->body_len);
    } else if (r->framing == HTTP_FRAME_CHUNKED) {
        p = PUT_LIT(p, "\r\nTransfer-Encoding: chunked");
    }
    p = PUT_LIT(p, "\r\n");
    if (r->conn == HTTP_CONN_CLOSE)
        p = PUT_LIT(p, "Connection: close\r\n");
    else if (r->conn == HTTP_CONN_KEEP_ALIVE)
        p = PUT_LIT(p, "Connection: keep-alive\r\n");
    if (extra_len)
        p = response_put_str(p, r->extra_headers, extra_len);
    p = PUT_LIT(p, "\r\n");
    if (body)
        p = response_put_str(p, r->body, body);
    out->len = (size_t)(p - out->data);
    return 0;
}

int http_response_write_continue(struct buf *out)
{
    static const char msg[] = "HTTP/1.1 100 Continue\r\n\r\n";
    return buf_append(out, msg, sizeof msg - 1);
}
