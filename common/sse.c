/* sse.c - see sse.h. */
#include "common/sse.h"

#include <string.h>

size_t sse_event_end(const char *p, size_t len, size_t from)
{
    for (size_t i = from; i + 1 < len; i++) {
        if (p[i] != '\n')
            continue;
        if (p[i + 1] == '\n')
            return i + 2;
        if (p[i + 1] == '\r' && i + 2 < len && p[i + 2] == '\n')
            return i + 3;
    }
    return 0;
}

int sse_event_data(const char *ev, size_t len, struct buf *out)
{
    bool any = false;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(ev + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - ev) : len, n = e - i;
        if (n && ev[i + n - 1] == '\r')
            n--;
        if (n >= 5 && memcmp(ev + i, "data:", 5) == 0) {
            size_t v = i + 5 + (n > 5 && ev[i + 5] == ' ');
            if ((any && buf_append(out, "\n", 1) < 0) || buf_append(out, ev + v, i + n - v) < 0)
                return -1;
            any = true;
        }
        i = e + 1;
    }
    return any;
}
