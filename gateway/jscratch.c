/* jscratch.c - see jscratch.h. */
#include "gateway/jscratch.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <jansson.h>

/* One block of the arena; the first lives as long as the arena, the others
 * (for bodies larger than it) only until jscratch_end. */
struct block {
    struct block *next;
    size_t cap, used;
    max_align_t data[];
};

struct jscratch {
    struct block *head;               /* newest first; the last is the kept one */
    size_t first_cap;
    size_t handed_out;
};

static _Thread_local struct jscratch *current;

static struct block *jscratch_block_new(size_t cap)
{
    struct block *b = malloc(sizeof *b + cap);
    if (b) {
        b->next = NULL;
        b->cap = cap;
        b->used = 0;
    }
    return b;
}

static bool jscratch_owns(const struct jscratch *s, const void *p)
{
    for (const struct block *b = s->head; b; b = b->next)
        if ((const char *)p >= (const char *)b->data && (const char *)p < (const char *)b->data + b->cap)
            return true;
    return false;
}

static void *jscratch_json_malloc(size_t n)
{
    struct jscratch *s = current;
    if (!s)
        return malloc(n);
    size_t need = (n + sizeof(max_align_t) - 1) & ~(sizeof(max_align_t) - 1);
    if (need < n)
        return NULL;
    struct block *b = s->head;
    if (b->cap - b->used < need) {
        /* Grow geometrically: a large body costs a few mallocs, not one per value. */
        size_t cap = b->cap * 2 > need ? b->cap * 2 : need;
        struct block *nb = jscratch_block_new(cap);
        if (!nb)
            return NULL;
        nb->next = b;
        s->head = b = nb;
    }
    void *p = (char *)b->data + b->used;
    b->used += need;
    s->handed_out += n;
    return p;
}

static void jscratch_json_free(void *p)
{
    struct jscratch *s = current;
    if (!p || (s && jscratch_owns(s, p)))
        return;   /* the arena's: released all at once by jscratch_end */
    free(p);
}

void jscratch_install(void)
{
    json_set_alloc_funcs(jscratch_json_malloc, jscratch_json_free);
}

struct jscratch *jscratch_new(size_t block_bytes)
{
    struct jscratch *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->first_cap = block_bytes ? block_bytes : 4096;
    s->head = jscratch_block_new(s->first_cap);
    if (!s->head) {
        free(s);
        return NULL;
    }
    return s;
}

static void jscratch_release(struct jscratch *s)
{
    while (s->head->next) {
        struct block *b = s->head;
        s->head = b->next;
        free(b);
    }
    s->head->used = 0;
}

void jscratch_begin(struct jscratch *s)
{
    if (!s)
        return;
    s->handed_out = 0;   /* jscratch_end left only the empty first block */
    current = s;
}

void jscratch_end(struct jscratch *s)
{
    if (!s)
        return;
    if (current == s)
        current = NULL;
    jscratch_release(s);
}

void jscratch_free(struct jscratch *s)
{
    if (!s)
        return;
    jscratch_end(s);
    free(s->head);
    free(s);
}

size_t jscratch_used(const struct jscratch *s) { return s->handed_out; }
