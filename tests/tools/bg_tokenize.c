/* bg_tokenize.c - backends/wordpiece from the command line, for the tests
 * that compare it with the tokenizers library (tests/e2e/test_tokenizer.py)
 * and for timing it.
 *
 *   bg-tokenize TOKENIZER_JSON MAX_LEN [--words | --bench ROUNDS] < lines
 *
 * Each input line is one text as a JSON string ("caf\u00e9\n" and NUL
 * included), so that any text fits on a line. Each output line is:
 *   default   the ids, space-separated, or "ERR message"
 *   --words   what the normalizer and pre-tokenizer make of it, as a JSON
 *             array: a word as a string, a word longer than
 *             max_input_chars_per_word as its length in characters, an added
 *             token as {"added": id}
 *   --bench   (one line in all) the texts encoded ROUNDS times on this one
 *             thread: texts, tokens (with [CLS] and [SEP]), seconds,
 *             tokens per second
 * Exit status 2 on a usage error or when the tokenizer does not load. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "backends/wordpiece.h"
#include "backends/wordpiece_impl.h"

struct bg_tokenize_text {
    char *s;
    size_t len;
};

static int bg_tokenize_read(struct bg_tokenize_text **out, size_t *count)
{
    size_t n = 0, cap = 0;
    struct bg_tokenize_text *t = NULL;
    char *line = NULL;
    size_t lcap = 0;
    ssize_t got;
    while ((got = getline(&line, &lcap, stdin)) >= 0) {
        json_error_t jerr;
        json_t *v = json_loadb(line, (size_t)got, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
        if (!json_is_string(v)) {
            fprintf(stderr, "bg-tokenize: line %zu is not a JSON string: %s\n", n + 1, jerr.text);
            json_decref(v);
            free(line);
            return -1;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            t = realloc(t, cap * sizeof *t);
            if (!t)
                abort();
        }
        t[n].len = json_string_length(v);
        t[n].s = malloc(t[n].len + 1);
        if (!t[n].s)
            abort();
        memcpy(t[n].s, json_string_value(v), t[n].len + 1);
        json_decref(v);
        n++;
    }
    free(line);
    *out = t;
    *count = n;
    return 0;
}

static bool bg_tokenize_word(void *arg, const char *word, size_t len, int nchars)
{
    json_t *a = arg;
    json_array_append_new(a, word ? json_stringn(word, len) : json_integer(nchars));
    return false;
}

static bool bg_tokenize_added(void *arg, int32_t id)
{
    json_array_append_new(arg, json_pack("{s:i}", "added", (int)id));
    return false;
}

static double bg_tokenize_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3 && !(argc == 4 && strcmp(argv[3], "--words") == 0) &&
        !(argc == 5 && strcmp(argv[3], "--bench") == 0)) {
        fprintf(stderr, "usage: bg-tokenize TOKENIZER_JSON MAX_LEN [--words | --bench ROUNDS] < lines\n");
        return 2;
    }
    struct error err = {0};
    struct wordpiece *w;
    if (wordpiece_load(argv[1], &w, &err) < 0) {
        fprintf(stderr, "bg-tokenize: %s\n", err.msg);
        return 2;
    }
    int max_len = atoi(argv[2]);
    struct bg_tokenize_text *texts;
    size_t n;
    if (max_len < 2 || bg_tokenize_read(&texts, &n) < 0) {
        fprintf(stderr, "bg-tokenize: MAX_LEN must be 2 or more, and each line a JSON string\n");
        return 2;
    }
    int32_t *ids = malloc((size_t)max_len * sizeof *ids);
    if (!ids)
        abort();

    if (argc == 5) {
        long rounds = atol(argv[4]);
        long long tokens = 0;
        double t0 = bg_tokenize_now();
        for (long r = 0; r < rounds; r++)
            for (size_t i = 0; i < n; i++) {
                int k;
                if (wordpiece_encode(w, texts[i].s, texts[i].len, max_len, ids, max_len, &k, NULL,
                                     &err) == 0)
                    tokens += k;
            }
        double secs = bg_tokenize_now() - t0;
        printf("texts %zu rounds %ld tokens %lld seconds %.3f tokens_per_s %.0f\n", n, rounds, tokens,
               secs, secs > 0 ? (double)tokens / secs : 0.0);
    } else {
        for (size_t i = 0; i < n; i++) {
            if (argc == 4) {
                json_t *a = json_array();
                struct wordpiece_sink sink = {.word = bg_tokenize_word, .added = bg_tokenize_added, .arg = a};
                if (wordpiece_walk(w, texts[i].s, texts[i].len, &sink, &err) < 0) {
                    printf("ERR %s\n", err.msg);
                } else {
                    char *s = json_dumps(a, JSON_COMPACT);
                    printf("%s\n", s);
                    free(s);
                }
                json_decref(a);
                continue;
            }
            int k;
            bool truncated;
            if (wordpiece_encode(w, texts[i].s, texts[i].len, max_len, ids, max_len, &k, &truncated,
                                 &err) < 0) {
                printf("ERR %s\n", err.msg);
                continue;
            }
            for (int j = 0; j < k; j++)
                printf(j ? " %d" : "%d", (int)ids[j]);
            printf("\n");
        }
    }
    for (size_t i = 0; i < n; i++)
        free(texts[i].s);
    free(texts);
    free(ids);
    wordpiece_free(w);
    return ferror(stdout) ? 1 : 0;
}
