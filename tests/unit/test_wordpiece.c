/* test_wordpiece.c - backends/wordpiece on the hand-written tokenizer.json
 * of tests/data/wordpiece (ids 0-4 the special tokens, then a few words and
 * pieces; every expectation here is what the tokenizers library gives for
 * that file). Then every refusal of the loader, each with its message, and
 * encodes from several threads at once. The comparison with the library on
 * the real MiniLM file is tests/e2e/test_tokenizer.py. */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "backends/wordpiece.h"
#include "backends/wordpiece_impl.h"

enum { PAD, UNK, CLS, SEP, MASK, HELLO, WORLD, COMMA, BANG, CAFE, PLAY, ING, ED, BEI, JING, A, B,
       DOT, UN, BELIEV, ABLE, E, NAIVE, QMARK, X, XX, CAF, E_ACUTE_CONT, DASH, I, DOT_ABOVE_CONT,
       ISTANBUL, LBRACKET, RBRACKET, MASK_WORD, HEL, LO, E_ACUTE };

static void fixture_path(char *out, size_t cap)
{
    const char *slash = strrchr(__FILE__, '/');
    int n = slash ? (int)(slash - __FILE__) : 1;
    snprintf(out, cap, "%.*s/../data/wordpiece/tokenizer.json", n, slash ? __FILE__ : ".");
}

static json_t *fixture_json(void)
{
    char path[PATH_MAX];
    fixture_path(path, sizeof path);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        fail_msg("%s: %s", path, jerr.text);
    return root;
}

/* Loads root (and releases it); the return code, with err filled. */
static int load_json(json_t *root, struct wordpiece **w, struct error *err)
{
    char *s = json_dumps(root, 0);
    json_decref(root);
    int rc = wordpiece_load_mem("fixture", s, strlen(s), w, err);
    free(s);
    return rc;
}

static int setup(void **state)
{
    char path[PATH_MAX];
    fixture_path(path, sizeof path);
    struct wordpiece *w;
    struct error err = {0};
    if (wordpiece_load(path, &w, &err) != 0)
        fail_msg("%s", err.msg);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    wordpiece_free(*state);
    return 0;
}

/* Encodes text (len -1: strlen) and checks the ids against the expected
 * ones, given as a -1-terminated list. want_truncated is an int: va_start
 * after a parameter that default promotions widen (a bool) is undefined,
 * and clang's -Werror,-Wvarargs refused it. */
static void expect_ids(const struct wordpiece *w, const char *text, int len, int max_len,
                       int want_truncated, ...)
{
    int32_t want[512];
    int nwant = 0;
    va_list ap;
    va_start(ap, want_truncated);
    for (int id; (id = va_arg(ap, int)) >= 0;)
        want[nwant++] = id;
    va_end(ap);
    int32_t ids[512];
    int n = -1;
    bool truncated = !want_truncated;
    struct error err = {0};
    int rc = wordpiece_encode(w, text, len < 0 ? strlen(text) : (size_t)len, max_len, ids, 512, &n,
                              &truncated, &err);
    if (rc != 0)
        fail_msg("%s: %s", text, err.msg);
    char got[2048] = "";
    for (int i = 0; i < n; i++)
        snprintf(got + strlen(got), sizeof got - strlen(got), " %d", (int)ids[i]);
    if (n != nwant)
        fail_msg("\"%s\": %d ids (%s), expected %d", text, n, got, nwant);
    for (int i = 0; i < n; i++)
        if (ids[i] != want[i])
            fail_msg("\"%s\": id %d is %d, expected %d (got%s)", text, i, (int)ids[i], (int)want[i], got);
    assert_int_equal(truncated, want_truncated);
    /* Counted without storing (a 413's length): the same ids, uncut. */
    int64_t count = -1;
    assert_int_equal(wordpiece_count(w, text, len < 0 ? strlen(text) : (size_t)len, &count, &err),
                     0);
    if (want_truncated)
        assert_true(count > n);
    else
        assert_int_equal(count, n);
}

static void test_specials_and_vocab(void **state)
{
    const struct wordpiece *w = *state;
    assert_int_equal(wordpiece_special_id(w, WORDPIECE_CLS), CLS);
    assert_int_equal(wordpiece_special_id(w, WORDPIECE_SEP), SEP);
    assert_int_equal(wordpiece_special_id(w, WORDPIECE_PAD), PAD);     /* "padding": null: the vocab's */
    assert_int_equal(wordpiece_special_id(w, WORDPIECE_UNK), UNK);
    assert_int_equal(wordpiece_vocab_size(w), E_ACUTE + 1);
    assert_int_equal(wordpiece_token_id(w, "##ing"), ING);
    assert_int_equal(wordpiece_token_id(w, "hello"), HELLO);
    assert_int_equal(wordpiece_token_id(w, "ing"), -1);
    assert_int_equal(wordpiece_token_id(w, "zzz"), -1);
}

static void test_lowercase_and_punctuation(void **state)
{
    const struct wordpiece *w = *state;
    expect_ids(w, "HELLO World, hello!", -1, 64, false, CLS, HELLO, WORLD, COMMA, HELLO, BANG, SEP, -1);
    expect_ids(w, "hello,world!?", -1, 64, false, CLS, HELLO, COMMA, WORLD, BANG, QMARK, SEP, -1);
    expect_ids(w, "...", -1, 64, false, CLS, DOT, DOT, DOT, SEP, -1);
    expect_ids(w, "a-b", -1, 64, false, CLS, A, DASH, B, SEP, -1);
    /* U+00BF INVERTED QUESTION MARK is punctuation (Po) too: a word of its own, [UNK]. */
    expect_ids(w, "a\xc2\xbf" "b", -1, 64, false, CLS, A, UNK, B, SEP, -1);
}

static void test_accents(void **state)
{
    const struct wordpiece *w = *state;
    expect_ids(w, "Café NAÏVE", -1, 64, false, CLS, CAFE, NAIVE, SEP, -1);
    expect_ids(w, "e\xcc\x81", -1, 64, false, CLS, E, SEP, -1);           /* e + U+0301 */
    expect_ids(w, "\xc3\xa9", -1, 64, false, CLS, E, SEP, -1);            /* é */
    expect_ids(w, "\xc4\xb0stanbul", -1, 64, false, CLS, ISTANBUL, SEP, -1);   /* İ: I + U+0307 */
}

/* strip_accents false, lowercase true: é stays, İ lowercases to i + U+0307. */
static void test_accents_kept(void **state)
{
    (void)state;
    json_t *root = fixture_json();
    json_object_set_new(json_object_get(root, "normalizer"), "strip_accents", json_false());
    struct wordpiece *w;
    struct error err = {0};
    if (load_json(root, &w, &err) != 0)
        fail_msg("%s", err.msg);
    expect_ids(w, "Café", -1, 64, false, CLS, CAF, E_ACUTE_CONT, SEP, -1);
    expect_ids(w, "\xc4\xb0", -1, 64, false, CLS, I, DOT_ABOVE_CONT, SEP, -1);
    wordpiece_free(w);
}

/* lowercase false, strip_accents null: neither (a cased model). */
static void test_cased(void **state)
{
    (void)state;
    json_t *root = fixture_json();
    json_object_set_new(json_object_get(root, "normalizer"), "lowercase", json_false());
    struct wordpiece *w;
    struct error err = {0};
    if (load_json(root, &w, &err) != 0)
        fail_msg("%s", err.msg);
    expect_ids(w, "Hello hello \xc3\xa9", -1, 64, false, CLS, UNK, HELLO, E_ACUTE, SEP, -1);
    wordpiece_free(w);
}

static void test_chinese(void **state)
{
    const struct wordpiece *w = *state;
    expect_ids(w, "北京", -1, 64, false, CLS, BEI, JING, SEP, -1);
    expect_ids(w, "a北b", -1, 64, false, CLS, A, BEI, B, SEP, -1);
    /* Hiragana is not in the library's CJK ranges: one word, unknown. */
    expect_ids(w, "a\xe3\x81\x82" "b", -1, 64, false, CLS, UNK, SEP, -1);
}

static void test_continuation_and_unknown(void **state)
{
    const struct wordpiece *w = *state;
    expect_ids(w, "playing played unbelievable", -1, 64, false,
               CLS, PLAY, ING, PLAY, ED, UN, BELIEV, ABLE, SEP, -1);
    expect_ids(w, "hello", -1, 64, false, CLS, HELLO, SEP, -1);             /* whole word first */
    expect_ids(w, "zzz", -1, 64, false, CLS, UNK, SEP, -1);
    expect_ids(w, "playz world", -1, 64, false, CLS, UNK, WORLD, SEP, -1);  /* a bad piece: all [UNK] */
    expect_ids(w, "\xf0\x9f\x98\x80", -1, 64, false, CLS, UNK, SEP, -1);     /* an emoji */
}

static void test_long_words(void **state)
{
    const struct wordpiece *w = *state;
    char text[300];
    int32_t ids[200];
    int n;
    bool truncated;
    struct error err = {0};
    memset(text, 'x', 100);         /* 100 characters: x ##x ##x ... */
    assert_int_equal(wordpiece_encode(w, text, 100, 200, ids, 200, &n, &truncated, &err), 0);
    assert_int_equal(n, 102);
    assert_int_equal(ids[1], X);
    assert_int_equal(ids[100], XX);
    memset(text, 'x', 101);         /* 101: [UNK] */
    expect_ids(w, text, 101, 200, false, CLS, UNK, SEP, -1);
    /* 101 characters of two bytes: counted in characters, not bytes. */
    for (int i = 0; i < 101; i++)
        memcpy(text + 2 * i, "\xc3\xa9", 2);
    expect_ids(w, text, 202, 200, false, CLS, UNK, SEP, -1);
    memcpy(text + 202, " hello", 6);
    expect_ids(w, text, 208, 200, false, CLS, UNK, HELLO, SEP, -1);
}

static void test_truncation(void **state)
{
    const struct wordpiece *w = *state;
    expect_ids(w, "hello world hello", -1, 4, true, CLS, HELLO, WORLD, SEP, -1);
    expect_ids(w, "hello world", -1, 4, false, CLS, HELLO, WORLD, SEP, -1);   /* exactly fits */
    expect_ids(w, "playing", -1, 3, true, CLS, PLAY, SEP, -1);               /* cut inside a word */
    expect_ids(w, "hello", -1, 2, true, CLS, SEP, -1);
    expect_ids(w, "a[MASK]b", -1, 4, true, CLS, A, MASK, SEP, -1);
}

static void test_empty_and_whitespace(void **state)
{
    const struct wordpiece *w = *state;
    expect_ids(w, "", 0, 8, false, CLS, SEP, -1);
    expect_ids(w, " \t\r\n ", -1, 8, false, CLS, SEP, -1);
    int32_t ids[4];
    int n;
    struct error err = {0};
    assert_int_equal(wordpiece_encode(w, NULL, 0, 4, ids, 4, &n, NULL, &err), 0);
    assert_int_equal(n, 2);
    /* NBSP, ideographic space, line separator: spaces; NUL, U+200B, U+FFFD dropped. */
    expect_ids(w, "hello\xc2\xa0world\xe3\x80\x80hello\xe2\x80\xa8world", -1, 16, false,
               CLS, HELLO, WORLD, HELLO, WORLD, SEP, -1);
    expect_ids(w, "hel\0lo hel\xe2\x80\x8blo hel\xef\xbf\xbdlo", 24, 16, false,
               CLS, HELLO, HELLO, HELLO, SEP, -1);
}

static void test_added_tokens(void **state)
{
    const struct wordpiece *w = *state;
    expect_ids(w, "a[MASK]b", -1, 16, false, CLS, A, MASK, B, SEP, -1);
    expect_ids(w, "[CLS] [SEP][PAD]", -1, 16, false, CLS, CLS, SEP, PAD, SEP, -1);
    /* Matched before normalization, so case matters: [mask] is text. */
    expect_ids(w, "[mask]", -1, 16, false, CLS, LBRACKET, MASK_WORD, RBRACKET, SEP, -1);
    expect_ids(w, "[MASK", -1, 16, false, CLS, LBRACKET, MASK_WORD, SEP, -1);
    /* The text on either side is normalized alone: "hel" [MASK] "lo". */
    expect_ids(w, "hel[MASK]lo", -1, 16, false, CLS, HEL, MASK, UNK, SEP, -1);
}

/* Refused, not replaced: the byte offset is in the message. */
static void test_invalid_utf8(void **state)
{
    const struct wordpiece *w = *state;
    static const struct {
        const char *text;
        const char *where;
    } bad[] = {
        {"hello \xff", "at byte 6"},
        {"caf\xc3", "at byte 3"},                   /* cut */
        {"\xc3\x28", "at byte 0"},                  /* not a continuation */
        {"a\xc0\x80", "at byte 1"},                 /* overlong NUL */
        {"ab\xe0\x80\xaf", "at byte 2"},            /* overlong / */
        {"\xed\xa0\x80", "at byte 0"},              /* a surrogate */
        {"\xf4\x90\x80\x80", "at byte 0"},          /* beyond U+10FFFF */
        {"\x80", "at byte 0"},                      /* a lone continuation */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int32_t ids[16];
        int n = 7;
        struct error err = {0};
        int rc = wordpiece_encode(w, bad[i].text, strlen(bad[i].text), 16, ids, 16, &n, NULL, &err);
        assert_int_equal(rc, -BG_EINVAL);
        assert_int_equal(n, 0);
        if (!strstr(err.msg, "not valid UTF-8") || !strstr(err.msg, bad[i].where))
            fail_msg("case %zu: %s", i, err.msg);
    }
    /* Also past the cut: whether text is refused does not depend on max_len. */
    int32_t ids[4];
    int n;
    struct error err = {0};
    assert_int_equal(wordpiece_encode(w, "hello world hello \xff", 19, 3, ids, 4, &n, NULL, &err),
                     -BG_EINVAL);
    assert_non_null(strstr(err.msg, "at byte 18"));
}

static void test_bad_arguments(void **state)
{
    const struct wordpiece *w = *state;
    int32_t ids[8];
    int n;
    struct error err = {0};
    assert_int_equal(wordpiece_encode(w, "a", 1, 1, ids, 8, &n, NULL, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "max_len is 1"));
    assert_int_equal(wordpiece_encode(w, "a", 1, 16, ids, 8, &n, NULL, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "room for 8"));
    assert_int_equal(wordpiece_encode(w, NULL, 3, 8, ids, 8, &n, NULL, &err), -BG_EINVAL);
}

/* ---- what the loader refuses ---------------------------------------- */

struct refusal {
    const char *what;           /* a JSON path to set, "" for a replacement of the whole file */
    const char *value;          /* JSON; NULL: delete the field */
    const char *message;        /* a part of the message */
};

/* Sets (or deletes) root's field at a dotted path ("model.vocab"). */
static void set_path(json_t *root, const char *path, const char *value)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    json_t *obj = root;
    char *key = buf, *dot;
    while ((dot = strchr(key, '.'))) {
        *dot = '\0';
        json_t *next = json_is_array(obj) ? json_array_get(obj, (size_t)atoi(key))
                                          : json_object_get(obj, key);
        assert_non_null(next);
        obj = next;
        key = dot + 1;
    }
    if (!value) {
        json_object_del(obj, key);
        return;
    }
    json_error_t jerr;
    json_t *v = json_loads(value, JSON_DECODE_ANY, &jerr);
    if (!v)
        fail_msg("bad test value %s: %s", value, jerr.text);
    if (json_is_array(obj))
        json_array_set_new(obj, (size_t)atoi(key), v);
    else
        json_object_set_new(obj, key, v);
}

static void test_refusals(void **state)
{
    (void)state;
    static const struct refusal cases[] = {
        {"normalizer", "null", "normalizer is null: only BertNormalizer is implemented"},
        {"normalizer.type", "\"NFC\"", "normalizer.type is \"NFC\": only \"BertNormalizer\""},
        {"normalizer.type", NULL, "normalizer.type is missing"},
        {"normalizer.lowercase", NULL, "normalizer.lowercase is missing: it must be true or false"},
        {"normalizer.clean_text", "1", "normalizer.clean_text is 1"},
        {"normalizer.strip_accents", "\"yes\"", "normalizer.strip_accents is \"yes\""},
        {"normalizer.nfkc", "true", "normalizer.nfkc is not implemented"},
        {"pre_tokenizer", "{\"type\": \"Whitespace\"}", "pre_tokenizer.type is \"Whitespace\""},
        {"pre_tokenizer", "null", "pre_tokenizer is null"},
        {"pre_tokenizer.split", "true", "pre_tokenizer.split is not implemented"},
        {"model.type", "\"BPE\"", "model.type is \"BPE\": only \"WordPiece\""},
        {"model.vocab", NULL, "model.vocab is missing"},
        {"model.vocab", "{}", "model.vocab is empty"},
        {"model.vocab", "[\"a\"]", "model.vocab is an array"},
        {"model.vocab.hello", "\"5\"", "model.vocab[\"hello\"] is \"5\""},
        {"model.vocab.hello", "-1", "model.vocab[\"hello\"] is -1"},
        {"model.vocab.hello", "4294967296", "model.vocab[\"hello\"] is 4294967296"},
        {"model.unk_token", "\"<unk>\"", "model.unk_token \"<unk>\" is not in model.vocab"},
        {"model.unk_token", NULL, "model.unk_token is missing"},
        {"model.max_input_chars_per_word", "0", "model.max_input_chars_per_word is 0: 1 to 1000"},
        {"model.max_input_chars_per_word", "5000", "model.max_input_chars_per_word is 5000"},
        {"model.max_input_chars_per_word", NULL, "model.max_input_chars_per_word is missing"},
        {"model.continuing_subword_prefix", NULL, "model.continuing_subword_prefix is missing"},
        {"model.dropout", "0.1", "model.dropout is not implemented"},
        {"post_processor", "null", "post_processor is null: only TemplateProcessing or BertProcessing"},
        {"post_processor.type", "\"RobertaProcessing\"", "post_processor.type is \"RobertaProcessing\""},
        {"post_processor.single", "[]", "post_processor.single is not 3 items long"},
        {"post_processor.single.0", "{\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}",
         "post_processor.single[0] is an object: [CLS] $A [SEP]"},
        {"post_processor.single.1.Sequence.id", "\"B\"", "post_processor.single[1] is an object"},
        {"post_processor.single.1.Sequence.type_id", "1", "post_processor.single[1].Sequence.type_id is 1"},
        {"post_processor.single.2.SpecialToken.type_id", "1",
         "post_processor.single[2].SpecialToken.type_id is 1"},
        {"post_processor.special_tokens.[CLS].ids", "[2, 3]",
         "post_processor.special_tokens[\"[CLS]\"].ids is not one id"},
        {"post_processor.special_tokens", "{}", "post_processor.special_tokens[\"[CLS]\"].ids is missing"},
        {"added_tokens.0.lstrip", "true", "added_tokens[0].lstrip is true (token [PAD])"},
        {"added_tokens.4.normalized", "true", "added_tokens[4].normalized is true (token [MASK])"},
        {"added_tokens.1.single_word", "true", "added_tokens[1].single_word is true"},
        {"added_tokens.2.content", "\"\"", "added_tokens[2].content is \"\": it must be a string, not empty"},
        {"added_tokens.2.id", "\"x\"", "added_tokens[2].id is \"x\""},
        {"added_tokens.2.extra", "1", "added_tokens[2].extra is not implemented"},
        {"added_tokens", "{}", "added_tokens is an object: it must be an array"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        json_t *root = fixture_json();
        set_path(root, cases[i].what, cases[i].value);
        struct wordpiece *w = (void *)1;
        struct error err = {0};
        int rc = load_json(root, &w, &err);
        if (rc != -BG_EINVAL || !strstr(err.msg, cases[i].message))
            fail_msg("%s = %s: rc %d, message \"%s\"; expected -BG_EINVAL and \"%s\"", cases[i].what,
                     cases[i].value ? cases[i].value : "(deleted)", rc, err.msg, cases[i].message);
        assert_null(w);
        assert_non_null(strstr(err.msg, "tokenizer fixture: "));
    }
}

static void test_refusals_of_the_file(void **state)
{
    (void)state;
    struct wordpiece *w;
    struct error err = {0};
    assert_int_equal(wordpiece_load_mem("f", "{\"normalizer\": ", 15, &w, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "tokenizer f: not valid JSON at line 1"));
    assert_int_equal(wordpiece_load_mem("f", "[1]", 3, &w, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "the file is an array, not a JSON object"));
    const char *dup = "{\"model\": {\"vocab\": {\"a\": 1, \"a\": 2}}}";
    assert_int_equal(wordpiece_load_mem("f", dup, strlen(dup), &w, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "duplicate"));
    assert_int_equal(wordpiece_load("/nonexistent/tokenizer.json", &w, &err), -BG_EIO);
    assert_non_null(strstr(err.msg, "tokenizer /nonexistent/tokenizer.json: cannot open"));
}

/* BertProcessing, another prefix, padding.pad_id: accepted and used. */
static void test_variants_accepted(void **state)
{
    (void)state;
    json_t *root = fixture_json();
    set_path(root, "post_processor", "{\"type\": \"BertProcessing\", \"sep\": [\"[SEP]\", 8], "
                                     "\"cls\": [\"[CLS]\", 7]}");
    set_path(root, "padding", "{\"pad_id\": 4, \"pad_token\": \"[MASK]\"}");
    struct wordpiece *w;
    struct error err = {0};
    if (load_json(root, &w, &err) != 0)
        fail_msg("%s", err.msg);
    expect_ids(w, "hello", -1, 8, false, 7, HELLO, 8, -1);
    assert_int_equal(wordpiece_special_id(w, WORDPIECE_PAD), 4);
    wordpiece_free(w);

    /* continuing_subword_prefix "": every entry continues a word. */
    root = fixture_json();
    set_path(root, "model.continuing_subword_prefix", "\"\"");
    if (load_json(root, &w, &err) != 0)
        fail_msg("%s", err.msg);
    expect_ids(w, "helloworld unb", -1, 16, false, CLS, HELLO, WORLD, UN, B, SEP, -1);
    wordpiece_free(w);

    /* No added tokens: [MASK] is text. */
    root = fixture_json();
    set_path(root, "added_tokens", "[]");
    if (load_json(root, &w, &err) != 0)
        fail_msg("%s", err.msg);
    expect_ids(w, "[MASK]", -1, 16, false, CLS, LBRACKET, MASK_WORD, RBRACKET, SEP, -1);
    wordpiece_free(w);
}

/* The Unicode table was made against this utf8proc: a newer one answers
 * differently for the characters it added (scripts/gen-wordpiece-unicode). */
static void test_unicode_version(void **state)
{
    (void)state;
    if (strcmp(wordpiece_unicode_version(), wordpiece_unicode_made_for) != 0)
        fail_msg("utf8proc has Unicode %s, backends/wordpiece_unicode_data.c was made for %s: run "
                 "scripts/gen-wordpiece-unicode with the test venv's python, then "
                 "tests/e2e/test_tokenizer.py", wordpiece_unicode_version(), wordpiece_unicode_made_for);
}

/* ---- many threads, one tokenizer ------------------------------------- */

struct worker {
    const struct wordpiece *w;
    int bad;
};

static const char *const thread_texts[] = {
    "HELLO World, hello!", "Café naïve", "北京a北b", "playing played unbelievable", "zzz",
    "a[MASK]b", "", "e\xcc\x81\xcc\xa3 x",
};

static void thread_encode(const struct wordpiece *w, int i, int32_t *ids, int *n)
{
    struct error err;
    if (wordpiece_encode(w, thread_texts[i], strlen(thread_texts[i]), 32, ids, 32, n, NULL, &err) != 0)
        *n = -1;
}

static void *thread_main(void *arg)
{
    struct worker *wk = arg;
    int32_t want[8][32], ids[32];
    int nwant[8], n;
    for (int i = 0; i < 8; i++)
        thread_encode(wk->w, i, want[i], &nwant[i]);
    for (int r = 0; r < 2000; r++) {
        int i = r % 8;
        thread_encode(wk->w, i, ids, &n);
        if (n != nwant[i] || memcmp(ids, want[i], (size_t)n * sizeof ids[0]) != 0)
            wk->bad++;
    }
    return NULL;
}

static void test_threads(void **state)
{
    const struct wordpiece *w = *state;
    pthread_t t[4];
    struct worker wk[4];
    for (int i = 0; i < 4; i++) {
        wk[i] = (struct worker){.w = w};
        assert_int_equal(pthread_create(&t[i], NULL, thread_main, &wk[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(wk[i].bad, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_specials_and_vocab),
        cmocka_unit_test(test_lowercase_and_punctuation),
        cmocka_unit_test(test_accents),
        cmocka_unit_test(test_accents_kept),
        cmocka_unit_test(test_cased),
        cmocka_unit_test(test_chinese),
        cmocka_unit_test(test_continuation_and_unknown),
        cmocka_unit_test(test_long_words),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_empty_and_whitespace),
        cmocka_unit_test(test_added_tokens),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_bad_arguments),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_refusals_of_the_file),
        cmocka_unit_test(test_variants_accepted),
        cmocka_unit_test(test_unicode_version),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
