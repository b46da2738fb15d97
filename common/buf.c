/* buf.c - see buf.h. */
#include "common/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int buf_reserve(struct buf *b, size_t extra)
{
    if (b->cap - b->len >= extra)
        return 0;
    if (b->off > 0 && b->off >= b->len / 2) {
        buf_compact(b);
        if (b->cap - b->len >= extra)
            return 0;
    }
    size_t need = b->len + extra;
    if (need < b->len)
        return -1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) {
        if (cap > ((size_t)-1) / 2)
            return -1;
        cap *= 2;
    }
    char *p = realloc(b->data, cap);
    if (!p)
        return -1;
    b->data = p;
    b->cap = cap;
    return 0;
}

int buf_append(struct buf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

int buf_appendf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || buf_reserve(b, (size_t)n + 1) < 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void buf_consume(struct buf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        b->off = b->len = 0;
}

void buf_compact(struct buf *b)
{
    if (b->off == 0)
        return;
    size_t n = b->len - b->off;
    if (n)
        memmove(b->data, b->data + b->off, n);
    b->off = 0;
    b->len = n;
}

void buf_reset(struct buf *b) { b->off = b->len = 0; }

void buf_shrink(struct buf *b, size_t keep)
{
    if (b->cap > keep && b->len == b->off) {
        free(b->data);
        b->data = NULL;
        b->cap = b->len = b->off = 0;
    }
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->cap = b->len = b->off = 0;
}
