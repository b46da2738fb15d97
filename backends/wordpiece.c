/* wordpiece.c - a tokenizer.json read and checked (see wordpiece.h for
 * what is accepted). Every refusal names the file, the field (as a path:
 * normalizer.type, post_processor.single[0]) and the value found, because
 * the fix is in the file or in the choice of model. Where the library
 * would refuse the file too (a field missing), so does this. */
#include "backends/wordpiece_impl.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#define WORDPIECE_FILE_MAX (512u << 20)    /* far above any BERT vocabulary */

struct wordpiece_load {
    const char *name;
    struct error *err;
};

static int wordpiece_fail(const struct wordpiece_load *ld, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int wordpiece_fail(const struct wordpiece_load *ld, const char *fmt, ...)
{
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return error_set(ld->err, BG_EINVAL, "tokenizer %s: %s", ld->name, msg);
}

/* A JSON value, short, for messages: "\"NFC\"", "3", "null", "an object". */
static const char *wordpiece_show(const json_t *v, char *buf, size_t cap)
{
    if (!v)
        return "missing";
    if (json_is_object(v))
        return "an object";
    if (json_is_array(v))
        return "an array";
    char *s = json_dumps(v, JSON_ENCODE_ANY);
    snprintf(buf, cap, "%.60s%s", s ? s : "?", s && strlen(s) > 60 ? "..." : "");
    free(s);
    return buf;
}

/* Refuses a key of obj not in `known` (NULL-terminated). */
static int wordpiece_known_keys(const struct wordpiece_load *ld, const json_t *obj, const char *where,
                                const char *const *known)
{
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)obj, key, val) {
        bool ok = false;
        for (const char *const *k = known; *k && !ok; k++)
            ok = strcmp(*k, key) == 0;
        if (!ok) {
            char list[200] = "";
            for (const char *const *k = known; *k; k++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
                         k == known ? "" : ", ", *k);
            return wordpiece_fail(ld, "%s.%s is not implemented (known fields: %s)", where, key, list);
        }
    }
    return 0;
}

static int wordpiece_type(const struct wordpiece_load *ld, const json_t *obj, const char *where,
                          const char *want, const char *also)
{
    char buf[80];
    if (!json_is_object(obj))
        return wordpiece_fail(ld, "%s is %s: only %s%s%s is implemented", where,
                              wordpiece_show(obj, buf, sizeof buf), want, also ? " or " : "",
                              also ? also : "");
    const json_t *t = json_object_get(obj, "type");
    const char *s = json_string_value(t);
    if (!s || (strcmp(s, want) != 0 && (!also || strcmp(s, also) != 0)))
        return wordpiece_fail(ld, "%s.type is %s: only \"%s\"%s%s%s is implemented", where,
                              wordpiece_show(t, buf, sizeof buf), want, also ? " or \"" : "",
                              also ? also : "", also ? "\"" : "");
    return 0;
}

/* A required boolean field; null allowed (as false is not) where nullable. */
static int wordpiece_bool(const struct wordpiece_load *ld, const json_t *obj, const char *where,
                          const char *key, bool nullable, int *out)
{
    char buf[80];
    const json_t *v = json_object_get(obj, key);
    if (json_is_boolean(v)) {
        *out = json_is_true(v);
        return 0;
    }
    if (nullable && (!v || json_is_null(v))) {
        *out = -1;
        return 0;
    }
    return wordpiece_fail(ld, "%s.%s is %s: it must be true or false%s", where, key,
                          wordpiece_show(v, buf, sizeof buf), nullable ? " (or null)" : "");
}

static int wordpiece_read_normalizer(const struct wordpiece_load *ld, const json_t *n,
                                     struct wordpiece *w)
{
    static const char *const known[] = {"type", "clean_text", "handle_chinese_chars",
                                        "strip_accents", "lowercase", NULL};
    int rc, clean, cjk, strip, lower;
    if ((rc = wordpiece_type(ld, n, "normalizer", "BertNormalizer", NULL)) < 0 ||
        (rc = wordpiece_known_keys(ld, n, "normalizer", known)) < 0 ||
        (rc = wordpiece_bool(ld, n, "normalizer", "clean_text", false, &clean)) < 0 ||
        (rc = wordpiece_bool(ld, n, "normalizer", "handle_chinese_chars", false, &cjk)) < 0 ||
        (rc = wordpiece_bool(ld, n, "normalizer", "strip_accents", true, &strip)) < 0 ||
        (rc = wordpiece_bool(ld, n, "normalizer", "lowercase", false, &lower)) < 0)
        return rc;
    w->clean_text = clean;
    w->handle_chinese_chars = cjk;
    w->lowercase = lower;
    w->strip_accents = strip < 0 ? lower : strip;     /* null: as lowercase */
    return 0;
}

static int wordpiece_read_vocab(const struct wordpiece_load *ld, const json_t *m, struct wordpiece *w)
{
    char buf[80];
    const json_t *vocab = json_object_get(m, "vocab");
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return wordpiece_fail(ld, "model.vocab is %s: it must be an object of token: id, not empty",
                              json_is_object(vocab) ? "empty" : wordpiece_show(vocab, buf, sizeof buf));
    const json_t *prefix = json_object_get(m, "continuing_subword_prefix");
    if (!json_is_string(prefix))
        return wordpiece_fail(ld, "model.continuing_subword_prefix is %s: it must be a string",
                              wordpiece_show(prefix, buf, sizeof buf));
    size_t bytes = 0;
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)vocab, key, val) {
        json_int_t id = json_integer_value(val);
        if (!json_is_integer(val) || id < 0 || id >= INT32_MAX)
            return wordpiece_fail(ld, "model.vocab[\"%.60s\"] is %s: ids are integers from 0 to %d",
                                  key, wordpiece_show(val, buf, sizeof buf), INT32_MAX - 1);
        bytes += strlen(key);
        if (id + 1 > w->vocab_size)
            w->vocab_size = (int)(id + 1);
    }
    w->vocab = wordpiece_vocab_new(json_object_size(vocab), bytes);
    if (!w->vocab)
        return error_set(ld->err, BG_ENOMEM, "tokenizer %s: no memory for %zu vocabulary entries",
                         ld->name, json_object_size(vocab));
    const char *p = json_string_value(prefix);
    json_object_foreach((json_t *)vocab, key, val)
        wordpiece_vocab_add(w->vocab, key, strlen(key), (int32_t)json_integer_value(val), p,
                            json_string_length(prefix));
    return 0;
}

static int wordpiece_read_model(const struct wordpiece_load *ld, const json_t *m, struct wordpiece *w)
{
    static const char *const known[] = {"type", "unk_token", "continuing_subword_prefix",
                                        "max_input_chars_per_word", "vocab", NULL};
    char buf[80];
    int rc;
    if ((rc = wordpiece_type(ld, m, "model", "WordPiece", NULL)) < 0 ||
        (rc = wordpiece_known_keys(ld, m, "model", known)) < 0)
        return rc;
    const json_t *mx = json_object_get(m, "max_input_chars_per_word");
    json_int_t maxc = json_integer_value(mx);
    if (!json_is_integer(mx) || maxc < 1 || maxc > WORDPIECE_MAX_WORD_CHARS)
        return wordpiece_fail(ld, "model.max_input_chars_per_word is %s: 1 to %d is implemented",
                              wordpiece_show(mx, buf, sizeof buf), WORDPIECE_MAX_WORD_CHARS);
    w->max_word_chars = (int)maxc;
    if ((rc = wordpiece_read_vocab(ld, m, w)) < 0)
        return rc;
    const json_t *unk = json_object_get(m, "unk_token");
    if (!json_is_string(unk))
        return wordpiece_fail(ld, "model.unk_token is %s: it must be a string",
                              wordpiece_show(unk, buf, sizeof buf));
    w->unk = wordpiece_vocab_find(w->vocab, WORDPIECE_NS_WORD, json_string_value(unk),
                                  json_string_length(unk));
    if (w->unk < 0)
        return wordpiece_fail(ld, "model.unk_token %s is not in model.vocab",
                              wordpiece_show(unk, buf, sizeof buf));
    return 0;
}

/* TemplateProcessing's "single": exactly SpecialToken, Sequence A,
 * SpecialToken, all of type_id 0; each special token one id. */
static int wordpiece_template_special(const struct wordpiece_load *ld, const json_t *pp,
                                      const json_t *item, int i, int32_t *out)
{
    char buf[80];
    const json_t *st = json_object_get(item, "SpecialToken");
    const json_t *name = json_object_get(st, "id");
    const json_t *type_id = json_object_get(st, "type_id");
    if (!json_is_string(name))
        return wordpiece_fail(ld, "post_processor.single[%d] is %s: [CLS] $A [SEP] (a SpecialToken, "
                              "the Sequence A, a SpecialToken) is the one template implemented", i,
                              wordpiece_show(item, buf, sizeof buf));
    if (json_integer_value(type_id) != 0)
        return wordpiece_fail(ld, "post_processor.single[%d].SpecialToken.type_id is %s: only 0 is "
                              "implemented", i, wordpiece_show(type_id, buf, sizeof buf));
    const json_t *def = json_object_get(json_object_get(pp, "special_tokens"), json_string_value(name));
    const json_t *ids = json_object_get(def, "ids");
    if (!json_is_array(ids) || json_array_size(ids) != 1 || !json_is_integer(json_array_get(ids, 0)) ||
        json_integer_value(json_array_get(ids, 0)) < 0 ||
        json_integer_value(json_array_get(ids, 0)) >= INT32_MAX)
        return wordpiece_fail(ld, "post_processor.special_tokens[%s].ids is %s: one id is implemented",
                              wordpiece_show(name, buf, sizeof buf),
                              ids ? (json_is_array(ids) ? "not one id" : "not an array") : "missing");
    *out = (int32_t)json_integer_value(json_array_get(ids, 0));
    return 0;
}

static int wordpiece_read_template(const struct wordpiece_load *ld, const json_t *pp,
                                   struct wordpiece *w)
{
    static const char *const known[] = {"type", "single", "pair", "special_tokens", NULL};
    char buf[80];
    int rc;
    if ((rc = wordpiece_known_keys(ld, pp, "post_processor", known)) < 0)
        return rc;
    const json_t *single = json_object_get(pp, "single");
    if (!json_is_array(single) || json_array_size(single) != 3)
        return wordpiece_fail(ld, "post_processor.single is %s: [CLS] $A [SEP] is the one template "
                              "implemented", json_is_array(single) ? "not 3 items long"
                              : wordpiece_show(single, buf, sizeof buf));
    const json_t *seq = json_object_get(json_array_get(single, 1), "Sequence");
    const json_t *seq_id = json_object_get(seq, "id");
    if (!json_is_string(seq_id) || strcmp(json_string_value(seq_id), "A") != 0)
        return wordpiece_fail(ld, "post_processor.single[1] is %s: [CLS] $A [SEP] is the one template "
                              "implemented", wordpiece_show(json_array_get(single, 1), buf, sizeof buf));
    if (json_integer_value(json_object_get(seq, "type_id")) != 0)
        return wordpiece_fail(ld, "post_processor.single[1].Sequence.type_id is %s: only 0 is "
                              "implemented", wordpiece_show(json_object_get(seq, "type_id"), buf,
                                                            sizeof buf));
    if ((rc = wordpiece_template_special(ld, pp, json_array_get(single, 0), 0, &w->cls)) < 0 ||
        (rc = wordpiece_template_special(ld, pp, json_array_get(single, 2), 2, &w->sep)) < 0)
        return rc;
    return 0;
}

/* BertProcessing: "cls": ["[CLS]", 101], "sep": ["[SEP]", 102]. */
static int wordpiece_read_bertproc(const struct wordpiece_load *ld, const json_t *pp,
                                   struct wordpiece *w)
{
    static const char *const known[] = {"type", "cls", "sep", NULL};
    static const char *const keys[2] = {"cls", "sep"};
    int32_t *outs[2] = {&w->cls, &w->sep};
    char buf[80];
    int rc;
    if ((rc = wordpiece_known_keys(ld, pp, "post_processor", known)) < 0)
        return rc;
    for (int i = 0; i < 2; i++) {
        const json_t *pair = json_object_get(pp, keys[i]);
        const json_t *id = json_array_get(pair, 1);
        if (!json_is_array(pair) || json_array_size(pair) != 2 ||
            !json_is_string(json_array_get(pair, 0)) || !json_is_integer(id) ||
            json_integer_value(id) < 0 || json_integer_value(id) >= INT32_MAX)
            return wordpiece_fail(ld, "post_processor.%s is %s: it must be [token, id]", keys[i],
                                  wordpiece_show(pair, buf, sizeof buf));
        *outs[i] = (int32_t)json_integer_value(id);
    }
    return 0;
}

static int wordpiece_read_added(const struct wordpiece_load *ld, const json_t *added,
                                struct wordpiece *w)
{
    static const char *const known[] = {"id", "content", "single_word", "lstrip", "rstrip",
                                        "normalized", "special", NULL};
    static const char *const flags[] = {"single_word", "lstrip", "rstrip", "normalized"};
    char buf[80];
    int rc;
    if (!added || json_is_null(added))
        return 0;
    if (!json_is_array(added))
        return wordpiece_fail(ld, "added_tokens is %s: it must be an array",
                              wordpiece_show(added, buf, sizeof buf));
    size_t n = json_array_size(added);
    w->added = calloc(n ? n : 1, sizeof *w->added);
    if (!w->added)
        return error_set(ld->err, BG_ENOMEM, "tokenizer %s: no memory for added_tokens", ld->name);
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(added, i);
        char where[48];
        snprintf(where, sizeof where, "added_tokens[%zu]", i);
        if (!json_is_object(t))
            return wordpiece_fail(ld, "%s is %s: it must be an object", where,
                                  wordpiece_show(t, buf, sizeof buf));
        if ((rc = wordpiece_known_keys(ld, t, where, known)) < 0)
            return rc;
        const json_t *content = json_object_get(t, "content");
        const json_t *id = json_object_get(t, "id");
        if (!json_is_string(content) || json_string_length(content) == 0)
            return wordpiece_fail(ld, "%s.content is %s: it must be a string, not empty", where,
                                  wordpiece_show(content, buf, sizeof buf));
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) >= INT32_MAX)
            return wordpiece_fail(ld, "%s.id is %s: it must be an integer from 0 to %d", where,
                                  wordpiece_show(id, buf, sizeof buf), INT32_MAX - 1);
        for (size_t f = 0; f < sizeof flags / sizeof flags[0]; f++) {
            const json_t *v = json_object_get(t, flags[f]);
            if (v && !json_is_false(v))
                return wordpiece_fail(ld, "%s.%s is %s (token %s): only false is implemented", where,
                                      flags[f], wordpiece_show(v, buf, sizeof buf),
                                      json_string_value(content));
        }
        struct wordpiece_added *a = &w->added[w->nadded++];
        a->len = json_string_length(content);
        a->content = malloc(a->len);
        if (!a->content)
            return error_set(ld->err, BG_ENOMEM, "tokenizer %s: no memory for added_tokens", ld->name);
        memcpy(a->content, json_string_value(content), a->len);
        a->id = (int32_t)json_integer_value(id);
        if (a->id + 1 > w->vocab_size)
            w->vocab_size = a->id + 1;
        unsigned char b = (unsigned char)a->content[0];
        w->added_first[b >> 3] |= (uint8_t)(1u << (b & 7));
    }
    /* Longest first: a match at a position is the longest one there. */
    for (int i = 1; i < w->nadded; i++) {
        struct wordpiece_added t = w->added[i];
        int j = i;
        while (j > 0 && w->added[j - 1].len < t.len) {
            w->added[j] = w->added[j - 1];
            j--;
        }
        w->added[j] = t;
    }
    return 0;
}

static int wordpiece_parse(const struct wordpiece_load *ld, const json_t *root, struct wordpiece *w)
{
    char buf[80];
    int rc;
    if (!json_is_object(root))
        return wordpiece_fail(ld, "the file is %s, not a JSON object",
                              wordpiece_show(root, buf, sizeof buf));
    if ((rc = wordpiece_read_normalizer(ld, json_object_get(root, "normalizer"), w)) < 0)
        return rc;
    const json_t *pre = json_object_get(root, "pre_tokenizer");
    static const char *const pre_known[] = {"type", NULL};
    if ((rc = wordpiece_type(ld, pre, "pre_tokenizer", "BertPreTokenizer", NULL)) < 0 ||
        (rc = wordpiece_known_keys(ld, pre, "pre_tokenizer", pre_known)) < 0)
        return rc;
    if ((rc = wordpiece_read_model(ld, json_object_get(root, "model"), w)) < 0)
        return rc;
    const json_t *pp = json_object_get(root, "post_processor");
    if ((rc = wordpiece_type(ld, pp, "post_processor", "TemplateProcessing", "BertProcessing")) < 0)
        return rc;
    if (strcmp(json_string_value(json_object_get(pp, "type")), "TemplateProcessing") == 0)
        rc = wordpiece_read_template(ld, pp, w);
    else
        rc = wordpiece_read_bertproc(ld, pp, w);
    if (rc < 0)
        return rc;
    if ((rc = wordpiece_read_added(ld, json_object_get(root, "added_tokens"), w)) < 0)
        return rc;
    if (w->cls + 1 > w->vocab_size)
        w->vocab_size = w->cls + 1;
    if (w->sep + 1 > w->vocab_size)
        w->vocab_size = w->sep + 1;
    /* [PAD]: what the file pads with, else the vocabulary's. */
    const json_t *pad_id = json_object_get(json_object_get(root, "padding"), "pad_id");
    if (json_is_integer(pad_id) && json_integer_value(pad_id) >= 0 &&
        json_integer_value(pad_id) < w->vocab_size)
        w->pad = (int32_t)json_integer_value(pad_id);
    else
        w->pad = wordpiece_vocab_find(w->vocab, WORDPIECE_NS_WORD, "[PAD]", 5);
    return 0;
}

int wordpiece_load_mem(const char *name, const char *json, size_t len, struct wordpiece **out,
                       struct error *err)
{
    *out = NULL;
    struct wordpiece_load ld = {.name = name, .err = err};
    json_error_t jerr;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return wordpiece_fail(&ld, "not valid JSON at line %d column %d: %s", jerr.line, jerr.column,
                              jerr.text);
    struct wordpiece *w = calloc(1, sizeof *w);
    if (!w || !(w->name = strdup(name))) {
        free(w);
        json_decref(root);
        return error_set(err, BG_ENOMEM, "tokenizer %s: no memory", name);
    }
    int rc = wordpiece_parse(&ld, root, w);
    json_decref(root);
    if (rc < 0) {
        wordpiece_free(w);
        return rc;
    }
    *out = w;
    return 0;
}

int wordpiece_load(const char *path, struct wordpiece **out, struct error *err)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return error_set(err, BG_EIO, "tokenizer %s: cannot open: %s", path, strerror(errno));
    char *data = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            if (cap >= WORDPIECE_FILE_MAX) {
                free(data);
                fclose(f);
                return error_set(err, BG_EINVAL, "tokenizer %s: larger than %u MiB, not a "
                                 "tokenizer.json", path, WORDPIECE_FILE_MAX >> 20);
            }
            cap = cap ? cap * 2 : (1u << 20);
            char *d = realloc(data, cap);
            if (!d) {
                free(data);
                fclose(f);
                return error_set(err, BG_ENOMEM, "tokenizer %s: no memory to read it", path);
            }
            data = d;
        }
        size_t got = fread(data + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(data);
        return error_set(err, BG_EIO, "tokenizer %s: cannot read it", path);
    }
    int rc = wordpiece_load_mem(path, data, len, out, err);
    free(data);
    return rc;
}

void wordpiece_free(struct wordpiece *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->nadded; i++)
        free(w->added[i].content);
    free(w->added);
    wordpiece_vocab_free(w->vocab);
    free(w->name);
    free(w);
}

void wordpiece_set_lowercase(struct wordpiece *w) { w->lowercase = true; }

int wordpiece_vocab_size(const struct wordpiece *w)
{
    return w->vocab_size;
}

int32_t wordpiece_special_id(const struct wordpiece *w, enum wordpiece_special which)
{
    switch (which) {
    case WORDPIECE_CLS: return w->cls;
    case WORDPIECE_SEP: return w->sep;
    case WORDPIECE_PAD: return w->pad;
    case WORDPIECE_UNK: return w->unk;
    }
    return -1;
}

int32_t wordpiece_token_id(const struct wordpiece *w, const char *token)
{
    return wordpiece_vocab_find(w->vocab, WORDPIECE_NS_WORD, token, strlen(token));
}
