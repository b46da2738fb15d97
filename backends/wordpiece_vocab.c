/* wordpiece_vocab.c - the vocabulary as an open-addressing hash table made
 * once at load: token text in one block, slots of (hash, text, id) at most
 * half full, linear probing. A lookup hashes the piece, compares one or two
 * slots' hashes and lengths and then the bytes; it allocates nothing and
 * writes nothing, so any number of threads look up at once. */
#include "backends/wordpiece_impl.h"

#include <stdlib.h>
#include <string.h>

struct wordpiece_vocab_slot {
    uint32_t hash;
    uint32_t len;                   /* bytes */
    size_t off;                     /* into text */
    int32_t id;                     /* -1: empty */
    uint8_t ns;
};

struct wordpiece_vocab {
    char *text;
    size_t text_used, text_cap;
    struct wordpiece_vocab_slot *slots;
    size_t mask;                    /* slots - 1, a power of two minus one */
    size_t longest[2];
};

/* A multiply-and-fold hash over 8 bytes at a time: tokens are short, and
 * this is the inner loop of WordPiece. */
static uint32_t wordpiece_vocab_hash(int ns, const char *s, size_t len)
{
    const uint64_t k = 0x9E3779B97F4A7C15ull;
    uint64_t h = (uint64_t)len * k ^ (uint64_t)(ns + 1) * 0xC2B2AE3D27D4EB4Full;
    while (len >= 8) {
        uint64_t x;
        memcpy(&x, s, 8);
        h = (h ^ x) * k;
        h ^= h >> 31;
        s += 8;
        len -= 8;
    }
    uint64_t x = 0;
    memcpy(&x, s, len);
    h = (h ^ x) * k;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

struct wordpiece_vocab *wordpiece_vocab_new(size_t count, size_t bytes)
{
    struct wordpiece_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    /* Every entry may also be a continuation: room for 2 * count, half full. */
    size_t n = 16;
    while (n < 4 * count)
        n *= 2;
    v->slots = malloc(n * sizeof *v->slots);
    v->text = malloc(bytes ? bytes : 1);
    if (!v->slots || !v->text) {
        wordpiece_vocab_free(v);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        v->slots[i].id = -1;
    v->mask = n - 1;
    v->text_cap = bytes;
    return v;
}

void wordpiece_vocab_free(struct wordpiece_vocab *v)
{
    if (!v)
        return;
    free(v->slots);
    free(v->text);
    free(v);
}

static void wordpiece_vocab_put(struct wordpiece_vocab *v, int ns, size_t off, size_t len, int32_t id)
{
    uint32_t h = wordpiece_vocab_hash(ns, v->text + off, len);
    size_t i = h & v->mask;
    while (v->slots[i].id >= 0)
        i = (i + 1) & v->mask;
    v->slots[i] = (struct wordpiece_vocab_slot){.hash = h, .len = (uint32_t)len, .off = off,
                                                .id = id, .ns = (uint8_t)ns};
    if (len > v->longest[ns])
        v->longest[ns] = len;
}

void wordpiece_vocab_add(struct wordpiece_vocab *v, const char *tok, size_t len, int32_t id,
                         const char *prefix, size_t plen)
{
    if (v->text_used + len > v->text_cap)
        return;                     /* the caller sized it: cannot happen */
    size_t off = v->text_used;
    memcpy(v->text + off, tok, len);
    v->text_used += len;
    wordpiece_vocab_put(v, WORDPIECE_NS_WORD, off, len, id);
    if (len >= plen && memcmp(tok, prefix, plen) == 0)
        wordpiece_vocab_put(v, WORDPIECE_NS_CONT, off + plen, len - plen, id);
}

int32_t wordpiece_vocab_find(const struct wordpiece_vocab *v, int ns, const char *s, size_t len)
{
    uint32_t h = wordpiece_vocab_hash(ns, s, len);
    for (size_t i = h & v->mask;; i = (i + 1) & v->mask) {
        const struct wordpiece_vocab_slot *sl = &v->slots[i];
        if (sl->id < 0)
            return -1;
        if (sl->hash == h && sl->len == len && sl->ns == ns && memcmp(v->text + sl->off, s, len) == 0)
            return sl->id;
    }
}

size_t wordpiece_vocab_longest(const struct wordpiece_vocab *v, int ns)
{
    return v->longest[ns];
}
