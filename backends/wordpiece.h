/* wordpiece.h - the tokenizer of BERT-family models, read from a Hugging
 * Face tokenizer.json, giving the same token ids as the `tokenizers`
 * library does for that file.
 *
 * What a file may hold (anything else is refused at load, naming the field
 * and its value):
 *   normalizer      BertNormalizer: clean_text, handle_chinese_chars,
 *                   strip_accents (true, false or null: then it follows
 *                   lowercase), lowercase
 *   pre_tokenizer   BertPreTokenizer: split on whitespace; each punctuation
 *                   character is a word of its own
 *   model           WordPiece: vocab, unk_token, continuing_subword_prefix,
 *                   max_input_chars_per_word (1 to WORDPIECE_MAX_WORD_CHARS)
 *   post_processor  TemplateProcessing ($A between two special tokens) or
 *                   BertProcessing: [CLS] ... [SEP]
 *   added_tokens    matched in the raw text before normalization, longest
 *                   first, as the library does: "a [MASK] b" holds the
 *                   [MASK] token (only tokens with normalized, lstrip,
 *                   rstrip and single_word all false)
 * The file's own "truncation" and "padding" are ignored: the caller says
 * how long a sequence may be (a sentence-transformers model's
 * max_seq_length, which is not what its tokenizer.json says) and pads.
 *
 * Unicode: the library's answers, not today's Unicode's. Its character
 * categories are Unicode 8.0's and its NFD Unicode 9.0's; the
 * difference from utf8proc (Unicode 15.0 on Debian 12) is a table,
 * backends/wordpiece_unicode_data.c, made by scripts/gen-wordpiece-unicode.
 *
 * A loaded tokenizer is immutable: any number of threads may encode with it
 * at once. wordpiece_encode allocates nothing: the word it works on (up to
 * WORDPIECE_MAX_WORD_CHARS characters) is on the calling thread's stack,
 * about 10 KiB. */
#ifndef BG_WORDPIECE_H
#define BG_WORDPIECE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* The longest max_input_chars_per_word accepted (BERT's files say 100):
 * one word's characters are kept on the encoding thread's stack. */
#define WORDPIECE_MAX_WORD_CHARS 1000

struct wordpiece;

enum wordpiece_special {
    WORDPIECE_CLS,      /* first token of every sequence */
    WORDPIECE_SEP,      /* last token of every sequence */
    WORDPIECE_PAD,      /* padding.pad_id, else the vocabulary's "[PAD]"; -1 when neither */
    WORDPIECE_UNK,      /* model.unk_token */
};

/* Reads and checks a tokenizer.json. 0 and *out, or -BG_EIO when the file
 * cannot be read, -BG_EINVAL when it is not valid JSON or holds something
 * this does not implement (the message names the file, field and value),
 * -BG_ENOMEM. */
int wordpiece_load(const char *path, struct wordpiece **out, struct error *err);
/* The same from bytes in memory; `name` stands for the file in messages. */
int wordpiece_load_mem(const char *name, const char *json, size_t len, struct wordpiece **out,
                       struct error *err);
void wordpiece_free(struct wordpiece *w);

/* Tokenizes text (UTF-8, len bytes, NUL bytes allowed) into ids[0..*n_out):
 * [CLS], the text's tokens, [SEP]; at most max_len ids in all, the text's
 * tokens cut at max_len - 2 (*truncated says whether any were cut). ids
 * must hold max_len entries (cap >= max_len >= 2). Empty text gives
 * [CLS] [SEP]. Invalid UTF-8 (overlong forms, surrogates, beyond U+10FFFF,
 * cut sequences) is refused, -BG_EINVAL naming the byte offset, rather
 * than replaced: the library cannot be given such text to compare with. */
int wordpiece_encode(const struct wordpiece *w, const char *text, size_t len, int max_len,
                     int32_t *ids, int cap, int *n_out, bool *truncated, struct error *err);
/* The ids wordpiece_encode would give text with no cut, [CLS] and [SEP]
 * included, counted without storing them (a 413's length: a text longer
 * than the model's maximum took an array of len + 2 ids, 4x its bytes). */
int wordpiece_count(const struct wordpiece *w, const char *text, size_t len, int64_t *n_out,
                    struct error *err);

/* Lowercases every text from now on (sentence-transformers'
 * do_lower_case, applied before the tokenizer), whatever its normalizer
 * says; accent stripping stays as the file set it. Before any encode. */
void wordpiece_set_lowercase(struct wordpiece *w);

/* Rows an embedding table needs: the largest id of the file, plus one. */
int wordpiece_vocab_size(const struct wordpiece *w);
int32_t wordpiece_special_id(const struct wordpiece *w, enum wordpiece_special which);
/* The id of a vocabulary entry ("##ing" for a continuation), -1 when absent. */
int32_t wordpiece_token_id(const struct wordpiece *w, const char *token);

#endif
