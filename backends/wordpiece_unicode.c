/* wordpiece_unicode.c - what the tokenizer asks of Unicode, answered as the
 * tokenizers library answers: utf8proc's data, corrected where the library's
 * older tables say otherwise (wordpiece_unicode_data.c; the why is in
 * scripts/gen-wordpiece-unicode). ASCII never reaches utf8proc. */
#include "backends/wordpiece_impl.h"

#include <utf8proc.h>

#define D WORDPIECE_U_DROP
#define W WORDPIECE_U_WHITE
#define P WORDPIECE_U_PUNCT
/* \v and \f are controls (clean_text drops them) and whitespace (to the
 * pre-tokenizer, when clean_text is off); \t \n \r are only whitespace. */
const uint8_t wordpiece_unicode_ascii[128] = {
    D, D, D, D, D, D, D, D,   D, W, W, D | W, D | W, W, D, D,     /* 0x00 */
    D, D, D, D, D, D, D, D,   D, D, D, D, D, D, D, D,             /* 0x10 */
    W, P, P, P, P, P, P, P,   P, P, P, P, P, P, P, P,             /* 0x20  !"#$%&'()*+,-./ */
    0, 0, 0, 0, 0, 0, 0, 0,   0, 0, P, P, P, P, P, P,             /* 0x30 0-9 :;<=>? */
    P, 0, 0, 0, 0, 0, 0, 0,   0, 0, 0, 0, 0, 0, 0, 0,             /* 0x40 @A-O */
    0, 0, 0, 0, 0, 0, 0, 0,   0, 0, 0, P, P, P, P, P,             /* 0x50 P-Z [\]^_ */
    P, 0, 0, 0, 0, 0, 0, 0,   0, 0, 0, 0, 0, 0, 0, 0,             /* 0x60 `a-o */
    0, 0, 0, 0, 0, 0, 0, 0,   0, 0, 0, P, P, P, P, D,             /* 0x70 p-z {|}~ DEL */
};
#undef D
#undef W
#undef P

static unsigned wordpiece_unicode_fix_of(int32_t c)
{
    int lo = 0, hi = wordpiece_unicode_nfixes - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const struct wordpiece_unicode_fix *f = &wordpiece_unicode_fixes[mid];
        if (c < f->first)
            hi = mid - 1;
        else if (c > f->last)
            lo = mid + 1;
        else
            return f->flags;
    }
    return 0;
}

/* The library's "Chinese character" ranges (CJK ideographs, as Google's
 * BERT defined them): not a Unicode property, so not a version question. */
static bool wordpiece_unicode_is_cjk(int32_t c)
{
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

unsigned wordpiece_unicode_class(int32_t c)
{
    if (c < 0x80)
        return wordpiece_unicode_ascii[c];
    unsigned bits = 0;
    bool maybe_fixed = false;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CO:
        bits = WORDPIECE_U_DROP;
        maybe_fixed = true;
        break;
    case UTF8PROC_CATEGORY_ZS:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
        bits = WORDPIECE_U_WHITE;
        break;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
        bits = WORDPIECE_U_PUNCT;
        maybe_fixed = true;
        break;
    case UTF8PROC_CATEGORY_MN:
        bits = WORDPIECE_U_MN;
        maybe_fixed = true;
        break;
    case UTF8PROC_CATEGORY_MC:      /* U+1734: Mn to the library */
    case UTF8PROC_CATEGORY_SO:      /* U+166D: punctuation to the library */
        maybe_fixed = true;
        break;
    default:
        break;
    }
    if (c == 0x85)                  /* NEXT LINE: a control, and whitespace */
        bits |= WORDPIECE_U_WHITE;
    else if (c == 0xFFFD)           /* clean_text drops the replacement character */
        bits |= WORDPIECE_U_DROP;
    if (maybe_fixed) {
        unsigned f = wordpiece_unicode_fix_of(c);
        if (f & WPU_FIX_NOT_OTHER)
            bits &= ~(unsigned)WORDPIECE_U_DROP;
        if (f & WPU_FIX_NOT_MN)
            bits &= ~(unsigned)WORDPIECE_U_MN;
        if (f & WPU_FIX_IS_MN)
            bits |= WORDPIECE_U_MN;
        if (f & WPU_FIX_NOT_PUNCT)
            bits &= ~(unsigned)WORDPIECE_U_PUNCT;
        if (f & WPU_FIX_IS_PUNCT)
            bits |= WORDPIECE_U_PUNCT;
    }
    if (wordpiece_unicode_is_cjk(c))
        bits |= WORDPIECE_U_CJK;
    return bits;
}

int wordpiece_unicode_ccc(int32_t c)
{
    if (c < 0x300)                  /* the first combining mark */
        return 0;
    int ccc = utf8proc_get_property(c)->combining_class;
    if (ccc && (wordpiece_unicode_fix_of(c) & WPU_FIX_CCC0))
        return 0;
    return ccc;
}

int wordpiece_unicode_decompose(int32_t c, int32_t out[WORDPIECE_DECOMP_MAX])
{
    if (c < 0xC0) {                 /* nothing below À decomposes */
        out[0] = c;
        return 1;
    }
    int bound = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char(c, out, WORDPIECE_DECOMP_MAX, UTF8PROC_DECOMPOSE,
                                                 &bound);
    /* Canonical decompositions are at most 4 long; anything else (an error,
     * more than the room) leaves c as it is rather than guess. */
    if (n < 1 || n > WORDPIECE_DECOMP_MAX) {
        out[0] = c;
        return 1;
    }
    if (n > 1 && (wordpiece_unicode_fix_of(c) & WPU_FIX_NO_DECOMP)) {
        out[0] = c;
        return 1;
    }
    return (int)n;
}

int wordpiece_unicode_lower(int32_t c, int32_t out[2])
{
    if (c < 0x80) {
        out[0] = (c >= 'A' && c <= 'Z') ? c + 32 : c;
        return 1;
    }
    if (c == 0x130) {               /* İ: the one unconditional two-code-point lowercase */
        out[0] = 'i';
        out[1] = 0x307;
        return 2;
    }
    int32_t l = utf8proc_tolower(c);
    if (l == c && c >= wordpiece_unicode_lowers[0].first &&
        c <= wordpiece_unicode_lowers[wordpiece_unicode_nlowers - 1].last) {
        for (int i = 0; i < wordpiece_unicode_nlowers; i++)
            if (c >= wordpiece_unicode_lowers[i].first && c <= wordpiece_unicode_lowers[i].last)
                l = c + wordpiece_unicode_lowers[i].delta;
    }
    out[0] = l;
    return 1;
}

const char *wordpiece_unicode_version(void)
{
    return utf8proc_unicode_version();
}
