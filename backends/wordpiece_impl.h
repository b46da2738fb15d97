/* wordpiece_impl.h - the insides of the tokenizer (backends/wordpiece.h),
 * shared by its files:
 *   wordpiece.c               tokenizer.json read and checked
 *   wordpiece_vocab.c         the vocabulary's hash table
 *   wordpiece_unicode.c       code point properties as the library sees them
 *   wordpiece_unicode_data.c  where those differ from utf8proc's (generated)
 *   wordpiece_walk.c          normalizer and pre-tokenizer: text to words
 *   wordpiece_encode.c        WordPiece and [CLS]/[SEP]: words to ids
 * Only backends/ and the tests include it. */
#ifndef BG_WORDPIECE_IMPL_H
#define BG_WORDPIECE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backends/wordpiece.h"
#include "common/error.h"

/* ---- vocabulary: token bytes -> id, in two namespaces. A word's first
 * piece is looked up as is (WORDPIECE_NS_WORD); a later piece with the
 * continuing_subword_prefix ("##") in front, which the table holds as the
 * entries that start with the prefix, prefix removed (WORDPIECE_NS_CONT):
 * the hot loop never builds a string. */
enum { WORDPIECE_NS_WORD = 0, WORDPIECE_NS_CONT = 1 };

struct wordpiece_vocab;

/* Room for `count` entries of `bytes` bytes of text in all. NULL: no memory. */
struct wordpiece_vocab *wordpiece_vocab_new(size_t count, size_t bytes);
void wordpiece_vocab_free(struct wordpiece_vocab *v);
/* Adds an entry (within what _new made room for; the caller checked that
 * tokens are distinct). An entry starting with prefix[0..plen) is also a
 * continuation, as is every entry when plen is 0. */
void wordpiece_vocab_add(struct wordpiece_vocab *v, const char *tok, size_t len, int32_t id,
                         const char *prefix, size_t plen);
/* The id, or -1. */
int32_t wordpiece_vocab_find(const struct wordpiece_vocab *v, int ns, const char *s, size_t len);
/* The longest entry of a namespace, in bytes: longer pieces need no lookup. */
size_t wordpiece_vocab_longest(const struct wordpiece_vocab *v, int ns);

/* ---- Unicode, as the tokenizers library answers (see wordpiece.h). */
enum {
    WORDPIECE_U_DROP = 1,       /* clean_text removes it: NUL, U+FFFD, Cc/Cf/Co but \t \n \r */
    WORDPIECE_U_WHITE = 2,      /* White_Space (Rust's char::is_whitespace) */
    WORDPIECE_U_PUNCT = 4,      /* ASCII punctuation or P* */
    WORDPIECE_U_MN = 8,         /* Mn: strip_accents removes it after NFD */
    WORDPIECE_U_CJK = 16,       /* handle_chinese_chars puts spaces around it */
};
/* The class bits of ASCII, and of any code point. */
extern const uint8_t wordpiece_unicode_ascii[128];
unsigned wordpiece_unicode_class(int32_t c);
/* Canonical decomposition (NFD) of c into out; the count (1 when none). */
#define WORDPIECE_DECOMP_MAX 8
int wordpiece_unicode_decompose(int32_t c, int32_t out[WORDPIECE_DECOMP_MAX]);
int wordpiece_unicode_ccc(int32_t c);
/* Lowercase (Rust's char::to_lowercase): one code point, or two (U+0130). */
int wordpiece_unicode_lower(int32_t c, int32_t out[2]);
/* utf8proc's Unicode version at run time, and the one the table was made for. */
const char *wordpiece_unicode_version(void);

/* The table of wordpiece_unicode_data.c. */
enum {
    WPU_FIX_NOT_OTHER = 1,      /* not a control/format/private use character to the library */
    WPU_FIX_NOT_MN = 2,
    WPU_FIX_IS_MN = 4,
    WPU_FIX_NOT_PUNCT = 8,
    WPU_FIX_IS_PUNCT = 16,
    WPU_FIX_CCC0 = 32,          /* a starter (combining class 0) to the library's NFD */
    WPU_FIX_NO_DECOMP = 64,
};
struct wordpiece_unicode_fix {
    int32_t first, last;
    unsigned flags;
};
struct wordpiece_unicode_lower {
    int32_t first, last;
    int32_t delta;
};
extern const char wordpiece_unicode_made_for[];
extern const struct wordpiece_unicode_fix wordpiece_unicode_fixes[];
extern const int wordpiece_unicode_nfixes;
extern const struct wordpiece_unicode_lower wordpiece_unicode_lowers[];
extern const int wordpiece_unicode_nlowers;

/* ---- the tokenizer */
struct wordpiece_added {
    char *content;
    size_t len;
    int32_t id;
};

struct wordpiece {
    char *name;                     /* the file, for messages */
    bool clean_text, handle_chinese_chars, strip_accents, lowercase;
    int max_word_chars;
    struct wordpiece_vocab *vocab;
    int32_t cls, sep, pad, unk;
    int vocab_size;
    struct wordpiece_added *added;  /* longest first */
    int nadded;
    uint8_t added_first[32];        /* bitmap: the first bytes of added tokens */
};

/* ---- text to words: what the normalizer and the pre-tokenizer make of
 * text. Each word goes to `word` as UTF-8 (nchars characters), or with
 * word NULL when it has more than max_word_chars characters (it becomes
 * [UNK] whatever it holds); an added token found in the text goes to
 * `added` with its id. A callback returning true stops the walk. 0, or
 * -BG_EINVAL when text is not valid UTF-8. */
struct wordpiece_sink {
    bool (*word)(void *arg, const char *word, size_t len, int nchars);
    bool (*added)(void *arg, int32_t id);
    void *arg;
};
int wordpiece_walk(const struct wordpiece *w, const char *text, size_t len,
                   const struct wordpiece_sink *sink, struct error *err);

#endif
