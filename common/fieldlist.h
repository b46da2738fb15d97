/* fieldlist.h - the elements of an HTTP field's comma-separated list
 * (RFC 9110 5.6.1: `Connection: a, b`, `Transfer-Encoding: gzip, chunked`),
 * walked in place: the client's and the proxy's hop-by-hop checks read it. */
#ifndef BG_FIELDLIST_H
#define BG_FIELDLIST_H

#include <stdbool.h>
#include <stddef.h>

/* The next element of [*p, end) into tok/len, *p past it; false at the end.
 * Whitespace and empty elements (",,") are skipped. */
static inline bool fieldlist_next(const char **p, const char *end, const char **tok, size_t *len)
{
    const char *s = *p;
    while (s < end && (*s == ' ' || *s == '\t' || *s == ','))
        s++;
    if (s == end) {
        *p = s;
        return false;
    }
    const char *e = s;
    while (e < end && *e != ',' && *e != ' ' && *e != '\t')
        e++;
    *tok = s;
    *len = (size_t)(e - s);
    *p = e;
    return true;
}

#endif
