/* sse.c - see sse.h. */
#include "common/sse.h"

#include <string.h>

/* The length of the line terminator at p[i] (CRLF, LF or CR), 0 when
 * none is there, -1 when a CR ends the bytes (CR or CRLF: not known yet). */
static int sse_eol(const char *p, size_t len, size_t i)
{
    if (p[i] == '\n')
        return 1;
    if (p[i] != '\r')
        return 0;
    if (i + 1 == len)
        return -1;
    return p[i + 1] == '\n' ? 2 : 1;
}

size_t sse_event_end(const char *p, size_t len, size_t from)
{
    for (size_t i = from; i < len; i++) {
        int a = sse_eol(p, len, i);
        if (a <= 0)
            continue;
        size_t j = i + (size_t)a;
        if (j >= len)
            return 0;
        int b = sse_eol(p, len, j);
        if (b < 0)   /* a CR last: CR or CRLF, known with the next byte (else pieces would end
                      * the event before an LF that the whole stream ends it after) */
            return 0;
        if (b > 0)   /* a blank line */
            return j + (size_t)b;
        i = j - 1;
    }
    return 0;
}

int sse_event_data(const char *ev, size_t len, struct buf *out)
{
    bool any = false;
    for (size_t i = 0; i < len;) {
        size_t e = i;
        while (e < len && ev[e] != '\n' && ev[e] != '\r')
            e++;
        size_t n = e - i;
        if (n >= 5 && memcmp(ev + i, "data:", 5) == 0) {
            size_t v = i + 5 + (n > 5 && ev[i + 5] == ' ');
            if ((any && buf_append(out, "\n", 1) < 0) || buf_append(out, ev + v, i + n - v) < 0)
                return -1;
            any = true;
        }
        i = e < len && ev[e] == '\r' && e + 1 < len && ev[e + 1] == '\n' ? e + 2 : e + 1;
    }
    return any;
}
