/* wordpiece_walk.c - text to words: the added tokens, BertNormalizer and
 * BertPreTokenizer of the tokenizers library, in one pass over the text.
 *
 * The library works in stages over whole strings: split out added tokens,
 * then per piece clean_text, handle_chinese_chars, strip_accents (NFD, then
 * Mn removed), lowercase, then split on whitespace and punctuation. Each
 * stage maps one character to characters independently of its neighbours,
 * save NFD's canonical reordering of combining marks; so here each input
 * character goes through all of them at once, and the reordering is done
 * as marks join the current word (a run of marks never holds whitespace or
 * punctuation, so it never spans two words). Only the word being built is
 * kept, on the stack; a word longer than max_word_chars stops being stored
 * and is only counted, as it will be [UNK] whatever it holds. */
#include "backends/wordpiece_impl.h"

#include <string.h>

struct wordpiece_walker {
    const struct wordpiece *w;
    const struct wordpiece_sink *sink;
    bool stop;
    int n;                          /* characters stored */
    int nchars;                     /* characters in the word, stored or not */
    int run_start;                  /* where the marks after the last starter begin */
    int32_t cps[WORDPIECE_MAX_WORD_CHARS];
    uint8_t ccc[WORDPIECE_MAX_WORD_CHARS];
    char bytes[WORDPIECE_MAX_WORD_CHARS * 4];
};

static size_t wordpiece_walk_utf8(int32_t c, char *out)
{
    if (c < 0x80) {
        out[0] = (char)c;
        return 1;
    }
    if (c < 0x800) {
        out[0] = (char)(0xC0 | (c >> 6));
        out[1] = (char)(0x80 | (c & 0x3F));
        return 2;
    }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12));
        out[1] = (char)(0x80 | ((c >> 6) & 0x3F));
        out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18));
    out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F));
    out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* The code point at s (len > 0 bytes left) and its length, or -1 when the
 * bytes are not a well-formed UTF-8 sequence (RFC 3629 table). */
static int32_t wordpiece_walk_decode(const unsigned char *s, size_t len, size_t *adv)
{
    unsigned b = s[0];
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    int32_t c;
    if (b < 0x80) {
        *adv = 1;
        return (int32_t)b;
    } else if (b >= 0xC2 && b <= 0xDF) {
        need = 1;
        c = (int32_t)(b & 0x1F);
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 2;
        c = (int32_t)(b & 0x0F);
        if (b == 0xE0)
            lo = 0xA0;              /* overlong */
        else if (b == 0xED)
            hi = 0x9F;              /* surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 3;
        c = (int32_t)(b & 0x07);
        if (b == 0xF0)
            lo = 0x90;              /* overlong */
        else if (b == 0xF4)
            hi = 0x8F;              /* beyond U+10FFFF */
    } else {
        return -1;
    }
    if (len < (size_t)need + 1)
        return -1;
    for (int i = 1; i <= need; i++) {
        unsigned x = s[i];
        if (x < lo || x > hi)
            return -1;
        lo = 0x80;
        hi = 0xBF;
        c = (c << 6) | (int32_t)(x & 0x3F);
    }
    *adv = (size_t)need + 1;
    return c;
}

static void wordpiece_walk_flush(struct wordpiece_walker *k)
{
    if (k->nchars == 0 || k->stop)
        return;
    if (k->nchars > k->w->max_word_chars) {
        k->stop = k->sink->word(k->sink->arg, NULL, 0, k->nchars);
    } else {
        size_t nb = 0;
        for (int i = 0; i < k->n; i++)
            nb += wordpiece_walk_utf8(k->cps[i], k->bytes + nb);
        k->stop = k->sink->word(k->sink->arg, k->bytes, nb, k->nchars);
    }
    k->n = k->nchars = k->run_start = 0;
}

/* Adds a character to the word; a mark (ccc > 0) moves back past the marks
 * of a higher class, as NFD's canonical ordering puts them. */
static void wordpiece_walk_push(struct wordpiece_walker *k, int32_t c, int ccc)
{
    if (++k->nchars > k->w->max_word_chars)
        return;
    int i = k->n++;
    if (ccc == 0) {
        k->cps[i] = c;
        k->ccc[i] = 0;
        k->run_start = i + 1;
        return;
    }
    while (i > k->run_start && k->ccc[i - 1] > ccc) {
        k->cps[i] = k->cps[i - 1];
        k->ccc[i] = k->ccc[i - 1];
        i--;
    }
    k->cps[i] = c;
    k->ccc[i] = (uint8_t)ccc;
}

/* The pre-tokenizer, on one normalized character. */
static void wordpiece_walk_split(struct wordpiece_walker *k, int32_t c, unsigned cls, int ccc)
{
    if (cls & WORDPIECE_U_WHITE) {
        wordpiece_walk_flush(k);
    } else if (cls & WORDPIECE_U_PUNCT) {
        wordpiece_walk_flush(k);
        wordpiece_walk_push(k, c, 0);
        wordpiece_walk_flush(k);
    } else {
        wordpiece_walk_push(k, c, ccc);
    }
}

static void wordpiece_walk_lower(struct wordpiece_walker *k, int32_t c, unsigned cls, int ccc)
{
    if (!k->w->lowercase) {
        wordpiece_walk_split(k, c, cls, ccc);
        return;
    }
    int32_t l[2];
    int n = wordpiece_unicode_lower(c, l);
    if (n == 1 && l[0] == c) {
        wordpiece_walk_split(k, c, cls, ccc);
        return;
    }
    /* Lowercase keeps a mark's class (and NFD came first in the library). */
    for (int i = 0; i < n; i++)
        wordpiece_walk_split(k, l[i], wordpiece_unicode_class(l[i]), ccc);
}

/* strip_accents: NFD, then the nonspacing marks dropped. A dropped mark of
 * class 0 still parts the marks on its two sides, as it did in NFD. */
static void wordpiece_walk_strip(struct wordpiece_walker *k, int32_t c, unsigned cls)
{
    int32_t d[WORDPIECE_DECOMP_MAX];
    int n = wordpiece_unicode_decompose(c, d);
    for (int i = 0; i < n; i++) {
        unsigned ci = (n == 1 && d[0] == c) ? cls : wordpiece_unicode_class(d[i]);
        int ccc = wordpiece_unicode_ccc(d[i]);
        if (ci & WORDPIECE_U_MN) {
            if (ccc == 0 && k->nchars <= k->w->max_word_chars)
                k->run_start = k->n;
            continue;
        }
        wordpiece_walk_lower(k, d[i], ci, ccc);
    }
}

static void wordpiece_walk_normalized(struct wordpiece_walker *k, int32_t c, unsigned cls)
{
    if (k->w->strip_accents && c >= 0xC0)
        wordpiece_walk_strip(k, c, cls);
    else
        wordpiece_walk_lower(k, c, cls, 0);
}

/* One input character through BertNormalizer, then the pre-tokenizer. */
static void wordpiece_walk_char(struct wordpiece_walker *k, int32_t c)
{
    const struct wordpiece *w = k->w;
    unsigned cls = c < 0x80 ? wordpiece_unicode_ascii[c] : wordpiece_unicode_class(c);
    if (w->clean_text) {
        if (cls & WORDPIECE_U_DROP)
            return;
        if (cls & WORDPIECE_U_WHITE) {  /* becomes ' ', which only ends a word */
            wordpiece_walk_flush(k);
            return;
        }
    }
    if (w->handle_chinese_chars && (cls & WORDPIECE_U_CJK)) {
        wordpiece_walk_flush(k);        /* the space before */
        wordpiece_walk_normalized(k, c, cls);
        wordpiece_walk_flush(k);        /* and after */
        return;
    }
    wordpiece_walk_normalized(k, c, cls);
}

/* The longest added token at text[i..), or NULL. */
static const struct wordpiece_added *wordpiece_walk_added(const struct wordpiece *w,
                                                          const char *text, size_t len, size_t i)
{
    for (int a = 0; a < w->nadded; a++) {   /* longest first */
        const struct wordpiece_added *t = &w->added[a];
        if (t->len <= len - i && memcmp(text + i, t->content, t->len) == 0)
            return t;
    }
    return NULL;
}

int wordpiece_walk(const struct wordpiece *w, const char *text, size_t len,
                   const struct wordpiece_sink *sink, struct error *err)
{
    struct wordpiece_walker k;
    k.w = w;
    k.sink = sink;
    k.stop = false;
    k.n = k.nchars = k.run_start = 0;
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0;
    while (i < len && !k.stop) {
        unsigned b = s[i];
        if (w->nadded && (w->added_first[b >> 3] & (1u << (b & 7)))) {
            const struct wordpiece_added *t = wordpiece_walk_added(w, text, len, i);
            if (t) {
                /* The text on each side is normalized on its own. */
                wordpiece_walk_flush(&k);
                if (!k.stop)
                    k.stop = sink->added(sink->arg, t->id);
                i += t->len;
                continue;
            }
        }
        size_t adv;
        int32_t c = wordpiece_walk_decode(s + i, len - i, &adv);
        if (c < 0)
            return error_set(err, BG_EINVAL, "text is not valid UTF-8 at byte %zu (0x%02X)", i, b);
        wordpiece_walk_char(&k, c);
        i += adv;
    }
    wordpiece_walk_flush(&k);
    /* Stopped early (the ids are full): the rest is still checked, so that
     * whether a text is refused does not depend on max_len. */
    while (i < len) {
        size_t adv;
        if (wordpiece_walk_decode(s + i, len - i, &adv) < 0)
            return error_set(err, BG_EINVAL, "text is not valid UTF-8 at byte %zu (0x%02X)", i, s[i]);
        i += adv;
    }
    return 0;
}
