/* buf.h - a growable byte buffer with a read cursor (connection I/O, bodies, responses). */
#ifndef BG_BUF_H
#define BG_BUF_H

#include <stddef.h>

struct buf {
    char *data;     /* owned; NULL until first growth */
    size_t off;     /* bytes before off are consumed */
    size_t len;     /* bytes in use, from data[0] (so unread = len - off) */
    size_t cap;
};

#define BUF_INIT {NULL, 0, 0, 0}

static inline size_t buf_unread(const struct buf *b) { return b->len - b->off; }
static inline const char *buf_head(const struct buf *b) { return b->data + b->off; }

/* Make room for `extra` more bytes at the end. Returns 0 or -1 (ENOMEM). */
int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *p, size_t n);
/* A string literal without its NUL (a length counted by hand was wrong). */
#define BUF_LIT(b, lit) buf_append((b), "" lit, sizeof(lit) - 1)
int buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Marks n unread bytes consumed; resets to empty when everything is consumed. */
void buf_consume(struct buf *b, size_t n);
/* Moves the unread bytes to the front. */
void buf_compact(struct buf *b);
void buf_reset(struct buf *b);
/* Frees the storage when it grew past keep bytes (so idle connections stay small). */
void buf_shrink(struct buf *b, size_t keep);
void buf_free(struct buf *b);

#endif
