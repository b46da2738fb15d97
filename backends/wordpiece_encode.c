/* wordpiece_encode.c - words to ids: the WordPiece model (greedy longest
 * match first, as the tokenizers library does it) and the [CLS] ... [SEP]
 * post-processor with truncation. Runs on the request path: no allocation,
 * nothing written but the caller's ids. */
#include "backends/wordpiece_impl.h"

#include <limits.h>

struct wordpiece_enc {
    const struct wordpiece *w;
    int32_t *ids;                   /* NULL: count only (wordpiece_count) */
    int n;                          /* ids written, [CLS] included */
    int limit;                      /* ids[1..limit) hold the text's tokens */
    bool truncated;
};

static bool wordpiece_encode_one(struct wordpiece_enc *e, int32_t id)
{
    if (e->n >= e->limit) {
        e->truncated = true;
        return true;
    }
    if (e->ids)
        e->ids[e->n] = id;
    e->n++;
    return false;
}

static bool wordpiece_encode_added(void *arg, int32_t id)
{
    return wordpiece_encode_one(arg, id);
}

static bool wordpiece_encode_is_cont(char b)
{
    return ((unsigned char)b & 0xC0) == 0x80;
}

/* One word: from its start, the longest vocabulary entry that begins it
 * (with the continuing prefix after the first piece), then on from where
 * that ends. A word some part of which matches nothing is one [UNK]. The
 * pieces are written while they fit; if the word is good but does not fit,
 * the ids are full and the rest is cut, as the library truncates. */
static bool wordpiece_encode_word(void *arg, const char *word, size_t len, int nchars)
{
    struct wordpiece_enc *e = arg;
    const struct wordpiece_vocab *v = e->w->vocab;
    if (!word)                      /* longer than max_input_chars_per_word */
        return wordpiece_encode_one(e, e->w->unk);
    int room = e->limit - e->n;
    int k = 0;
    size_t start = 0;
    while (start < len) {
        int ns = start ? WORDPIECE_NS_CONT : WORDPIECE_NS_WORD;
        size_t end = len;
        size_t longest = wordpiece_vocab_longest(v, ns);
        if (end - start > longest) {    /* no entry is longer: start at a char boundary below */
            end = start + longest;
            while (end > start && wordpiece_encode_is_cont(word[end]))
                end--;
        }
        int32_t id = -1;
        while (end > start) {
            id = wordpiece_vocab_find(v, ns, word + start, end - start);
            if (id >= 0)
                break;
            do
                end--;
            while (end > start && wordpiece_encode_is_cont(word[end]));
        }
        if (id < 0)
            return wordpiece_encode_one(e, e->w->unk);
        if (k < room && e->ids)
            e->ids[e->n + k] = id;
        k++;
        start = end;
    }
    if (k > room) {
        e->n = e->limit;
        e->truncated = true;
        return true;
    }
    e->n += k;
    return false;
}

int wordpiece_encode(const struct wordpiece *w, const char *text, size_t len, int max_len,
                     int32_t *ids, int cap, int *n_out, bool *truncated, struct error *err)
{
    *n_out = 0;
    if (truncated)
        *truncated = false;
    if (max_len < 2)
        return error_set(err, BG_EINVAL, "max_len is %d: it must be at least 2 ([CLS] and [SEP])",
                         max_len);
    if (cap < max_len)
        return error_set(err, BG_EINVAL, "ids has room for %d, max_len is %d: it needs max_len",
                         cap, max_len);
    if (!text && len)
        return error_set(err, BG_EINVAL, "text is NULL with a length of %zu", len);
    struct wordpiece_enc e = {.w = w, .ids = ids, .n = 1, .limit = max_len - 1};
    ids[0] = w->cls;
    struct wordpiece_sink sink = {.word = wordpiece_encode_word, .added = wordpiece_encode_added,
                                  .arg = &e};
    int rc = wordpiece_walk(w, text ? text : "", len, &sink, err);
    if (rc < 0)
        return rc;
    ids[e.n++] = w->sep;
    *n_out = e.n;
    if (truncated)
        *truncated = e.truncated;
    return 0;
}

int wordpiece_count(const struct wordpiece *w, const char *text, size_t len, int64_t *n_out,
                    struct error *err)
{
    *n_out = 0;
    if (!text && len)
        return error_set(err, BG_EINVAL, "text is NULL with a length of %zu", len);
    /* A token takes a byte at least: len + 2 ids bound it, within an int
     * for any body the front end takes. */
    if (len > (size_t)INT_MAX - 2)
        return error_set(err, BG_EINVAL, "a text of %zu bytes is too long to count", len);
    struct wordpiece_enc e = {.w = w, .ids = NULL, .n = 1, .limit = INT_MAX};
    struct wordpiece_sink sink = {.word = wordpiece_encode_word, .added = wordpiece_encode_added,
                                  .arg = &e};
    int rc = wordpiece_walk(w, text ? text : "", len, &sink, err);
    if (rc < 0)
        return rc;
    *n_out = (int64_t)e.n + 1;   /* and [SEP] */
    return 0;
}
