/* fuzz_scrape.c - an LLM server's /metrics text (Prometheus exposition or
 * OpenMetrics, as vLLM, SGLang, TGI and llama.cpp write it) through
 * serving/scrape.c's scrape_parse, which the endpoint picker scores on.
 *
 * The input is the body as scraped (libFuzzer's exact-size copy: a read past
 * len is caught). Beyond "no crash": every field is -1 (absent) or a number
 * that is not negative and not NaN, computed_prompt_tokens is llama.cpp's
 * prompt_tokens or -1 or not negative, `recognised` counts within the known
 * series and is 0 exactly when every field is absent and the server unknown,
 * a refusal (-1) recognised nothing; a body cut short after its last line
 * feed reads as the body without that tail (scrape.h: a last line without
 * its line feed is skipped); a body of no CR read with CRLF line ends gives
 * the same load and answer; the same text twice, the same load.
 *
 * Every field is finite: a sum of finite samples reached +Inf (two 1e308
 * samples of one series), found here, and is now absent. Not checked:
 * kv_cache at most 1 (scrape.h calls it a fraction 0..1, but a server's
 * value above 1 is taken as it is; docs/FUZZING.md). */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serving/scrape.h"

static bool same(const struct scrape_load *a, const struct scrape_load *b)
{
    /* Compared as values (no NaN can be in one: checked first). */
    return a->waiting == b->waiting && a->running == b->running && a->kv_cache == b->kv_cache &&
           a->prompt_tokens == b->prompt_tokens &&
           a->cached_prompt_tokens == b->cached_prompt_tokens &&
           a->computed_prompt_tokens == b->computed_prompt_tokens &&
           a->recognised == b->recognised && a->server == b->server;
}

static bool field_ok(double v)
{
    return v == -1 || (v >= 0 && isfinite(v));   /* false for NaN, Inf, other negatives */
}

static void check(int rc, const struct scrape_load *l)
{
    const double f[] = {l->waiting, l->running, l->kv_cache, l->prompt_tokens,
                        l->cached_prompt_tokens, l->computed_prompt_tokens};
    bool any = false;
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (!field_ok(f[i]))
            abort();
        any |= f[i] != -1;
    }
    if (rc != 0 && rc != -1)
        abort();
    if (l->recognised < 0 || l->recognised > 17 || l->server < SCRAPE_UNKNOWN ||
        l->server > SCRAPE_TGI)
        abort();
    /* Each field comes from a recognised series, and a recognised series
     * gives its field (the family's first). */
    if ((l->recognised == 0) != !any || (l->recognised == 0) != (l->server == SCRAPE_UNKNOWN))
        abort();
    if (rc == -1 && l->recognised != 0)
        abort();
    /* computed_prompt_tokens only from prompt_tokens (and cached). */
    if (l->computed_prompt_tokens != -1 && l->prompt_tokens == -1)
        abort();
    if (l->prompt_tokens >= 0 && l->cached_prompt_tokens >= 0 &&
        l->computed_prompt_tokens == -1)
        abort();
    if (strcmp(scrape_server_name(l->server), "") == 0)
        abort();
}

static int parse_copy(const uint8_t *d, size_t n, struct scrape_load *l)
{
    /* An exact-size heap copy, so a read past n is caught (n 0: NULL text
     * is allowed with len 0). */
    char *c = n ? malloc(n) : NULL;
    if (n && !c)
        abort();
    if (n)
        memcpy(c, d, n);
    int rc = scrape_parse(c, n, l);
    free(c);
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct scrape_load a, b;
    memset(&a, 0x5a, sizeof a);   /* every field written either way */
    int rc = scrape_parse((const char *)data, size, &a);
    check(rc, &a);
    memset(&b, 0xa5, sizeof b);
    if (scrape_parse((const char *)data, size, &b) != rc || !same(&a, &b))
        abort();

    /* The tail after the last line feed never counts. */
    const uint8_t *nl = size ? memrchr(data, '\n', size) : NULL;
    size_t whole = nl ? (size_t)(nl - data) + 1 : 0;
    if (whole < size) {
        int rc2 = parse_copy(data, whole, &b);
        check(rc2, &b);
        if (!same(&a, &b))
            abort();
    }

    /* CRLF line ends read as LF ones (a body that has no CR of its own). */
    if (size && !memchr(data, '\r', size) && memchr(data, '\n', size)) {
        size_t lines = 0;
        for (size_t i = 0; i < size; i++)
            lines += data[i] == '\n';
        uint8_t *crlf = malloc(size + lines);
        if (!crlf)
            abort();
        size_t k = 0;
        for (size_t i = 0; i < size; i++) {
            if (data[i] == '\n')
                crlf[k++] = '\r';
            crlf[k++] = data[i];
        }
        int rc3 = parse_copy(crlf, k, &b);
        free(crlf);
        if (rc3 != rc || !same(&a, &b))
            abort();
    }
    return 0;
}
