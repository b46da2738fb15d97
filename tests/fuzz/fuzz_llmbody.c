/* fuzz_llmbody.c - a client's body for an LLM pool (/v1/chat/completions,
 * /v1/completions; a Batch API line, whose "body" member is the request) as
 * gateway/api_llm.c and serving/jobs_batch.c read it: the JSON value count
 * that refuses a body before it is parsed (json_values_at_least,
 * common/jsonfmt.c), the parse (jansson), and llmbody_check
 * (serving/llmbody.c), on the body and on its "body" member.
 *
 * The input is the body. Beyond "no crash, no leak": a body that parses
 * makes no more nodes (values and keys) than json_values_at_least counted,
 * and, parsed refusing duplicate keys, exactly that many plus one for each
 * empty array or object (jsonfmt.h: one more than the commas, colons and
 * opening brackets outside strings), so the count can refuse before parsing
 * and never refuses less than it should; llmbody_check's verdict is
 * llmbody.h's rule, written again here (stream null or a boolean; the
 * token caps and the choice counts null or integers within their bounds,
 * the first bad one named), with the field named in param, terminated in
 * its buffer, and err set to BG_EINVAL naming it; a param buffer of 3
 * bytes gives the same verdict, cut. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/jsonfmt.h"
#include "serving/llmbody.h"

/* Nodes in v (keys counted), and the empty arrays and objects among them. */
static uint64_t nodes(const json_t *v, uint64_t *empty)
{
    uint64_t n = 1;
    if (json_is_array(v)) {
        size_t i;
        json_t *e;
        *empty += json_array_size(v) == 0;
        json_array_foreach((json_t *)v, i, e)
            n += nodes(e, empty);
    } else if (json_is_object(v)) {
        const char *k;
        json_t *e;
        *empty += json_object_size(v) == 0;
        json_object_foreach((json_t *)v, k, e)
            n += 1 + nodes(e, empty);
    }
    return n;
}

/* llmbody.h's rule: the first field that is wrong, or NULL. */
static const char *expected(const json_t *root)
{
    json_t *v = json_object_get(root, "stream");
    if (v && !json_is_null(v) && !json_is_boolean(v))
        return "stream";
    static const char *const counts[] = {"max_tokens", "max_completion_tokens", "n_predict", "n",
                                         "best_of"};
    for (int i = 0; i < 5; i++) {
        v = json_object_get(root, counts[i]);
        if (!v || json_is_null(v))
            continue;
        if (!json_is_integer(v))
            return counts[i];
        json_int_t n = json_integer_value(v);
        if (n > (i >= 3 ? LLMBODY_CHOICES_MAX : LLMBODY_TOKENS_MAX))
            return counts[i];
    }
    return NULL;
}

static void check(const json_t *root)
{
    const char *want = expected(root);
    char *param = malloc(32), *small = malloc(3);
    if (!param || !small)
        abort();
    memset(param, 0x55, 32);
    struct error err = {0}, err2 = {0};
    int rc = llmbody_check(root, param, 32, &err);
    if (!memchr(param, '\0', 32))
        abort();
    if (!want) {
        if (rc != 0 || param[0] || err.code)
            abort();
    } else {
        if (rc != -BG_EINVAL || err.code != BG_EINVAL || strcmp(param, want) != 0 ||
            strncmp(err.msg, want, strlen(want)) != 0 || err.msg[strlen(want)] != ':')
            abort();
    }
    memset(small, 0x55, 3);
    if (llmbody_check(root, small, 3, &err2) != rc || !memchr(small, '\0', 3) ||
        strncmp(small, param, 2) != 0 || strcmp(err.msg, err2.msg) != 0)
        abort();
    free(param);
    free(small);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *body = (const char *)data;
    uint64_t counted = json_values_at_least(body, size);
    if (counted < 1)
        abort();
    /* As api_llm.c and jobs_batch.c read it (duplicate keys: the last). */
    json_t *root = json_loadb(body, size, 0, NULL);
    if (root) {
        uint64_t empty = 0;
        if (nodes(root, &empty) > counted)
            abort();
        check(root);
        json_t *inner = json_object_get(root, "body");   /* a Batch API line */
        if (json_is_object(inner))
            check(inner);
    }
    /* As the admin routes read theirs: no duplicate keys, so the count is exact. */
    json_t *strict = json_loadb(body, size, JSON_REJECT_DUPLICATES, NULL);
    if (strict) {
        uint64_t empty = 0;
        if (nodes(strict, &empty) + empty != counted)
            abort();
    }
    if (strict && !root)
        abort();   /* what parses refusing duplicates parses without */
    json_decref(root);
    json_decref(strict);
    return 0;
}
