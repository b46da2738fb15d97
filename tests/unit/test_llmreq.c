/* test_llmreq.c - batchgate-load's OpenAI requests (loadgen/llmreq): the
 * --synthetic spec and its errors; synthetic requests are a function of
 * (seed, k): the same for a seed, others for another, each after one of K
 * shared prefixes; --prompts lines become bodies in order, cycling, with
 * the fields every request carries; bad lines are refused by number; the
 * route under the URL's path; whole HTTP requests. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "loadgen/llmreq.h"
#include "tests/unit/scratch.h"

static struct llmreq_opts opts(bool chat, bool stream, uint64_t seed)
{
    return (struct llmreq_opts){.chat = chat, .stream = stream, .model = "m", .max_tokens = 9,
                                .host = "h", .url_path = "/", .seed = seed};
}

static json_t *body(const struct llmreq *w, uint64_t k)
{
    char *s = llmreq_body(w, k);
    assert_non_null(s);
    json_t *j = json_loads(s, 0, NULL);
    assert_non_null(j);
    free(s);
    return j;
}

static void test_synth_spec(void **state)
{
    (void)state;
    struct llmreq_synth s;
    char msg[256];
    assert_int_equal(llmreq_synth_parse("in=200:50,out=64:16,prefixes=4,prefix_len=512", &s, msg,
                                        sizeof msg), 0);
    assert_true(s.in.mean == 200 && s.in.sd == 50 && s.out.mean == 64 && s.out.sd == 16);
    assert_true(s.out_set && s.prefixes == 4 && s.prefix_len == 512);
    assert_int_equal(llmreq_synth_parse("", &s, msg, sizeof msg), 0);
    assert_true(s.in.mean == 200 && s.in.sd == 0 && !s.out_set && s.prefixes == 0);
    static const char *const bad[] = {
        "in=0", "in=-5", "in=abc", "in=10:-1", "in=10:", "out=", "prefixes=2000", "prefixes=1.5",
        "prefix_len=10", "prefixes=2,prefix_len=0", "size=3", "in", "in=10;out=3",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg[0] = '\0';
        if (llmreq_synth_parse(bad[i], &s, msg, sizeof msg) == 0)
            fail_msg("\"%s\" was taken", bad[i]);
        assert_non_null(strstr(msg, "--synthetic"));
    }
}

static void test_synth_is_a_function_of_seed_and_k(void **state)
{
    (void)state;
    struct llmreq_synth s;
    char msg[256];
    assert_int_equal(llmreq_synth_parse("in=30:10,out=20:5,prefixes=3,prefix_len=40", &s, msg,
                                        sizeof msg), 0);
    struct llmreq_opts o1 = opts(true, true, 7), o2 = opts(true, true, 8);
    struct llmreq *a, *b, *c;
    assert_int_equal(llmreq_from_synth(&o1, &s, &a, msg, sizeof msg), 0);
    assert_int_equal(llmreq_from_synth(&o1, &s, &b, msg, sizeof msg), 0);
    assert_int_equal(llmreq_from_synth(&o2, &s, &c, msg, sizeof msg), 0);
    const char *prefixes[8] = {0};
    int nprefixes = 0, differ = 0, lens[3] = {0};
    for (uint64_t k = 0; k < 200; k++) {
        char *x = llmreq_body(a, k), *y = llmreq_body(b, k), *z = llmreq_body(c, k);
        assert_string_equal(x, y);
        differ += strcmp(x, z) != 0;
        free(x), free(y), free(z);
        json_t *j = body(a, k);
        json_t *msgs = json_object_get(j, "messages");
        assert_int_equal(json_array_size(msgs), 2);
        const char *sys = json_string_value(json_object_get(json_array_get(msgs, 0), "content"));
        const char *user = json_string_value(json_object_get(json_array_get(msgs, 1), "content"));
        assert_string_equal(json_string_value(json_object_get(json_array_get(msgs, 0), "role")),
                            "system");
        int found = -1;
        for (int i = 0; i < nprefixes; i++)
            if (strcmp(prefixes[i], sys) == 0)
                found = i;
        if (found < 0) {
            assert_true(nprefixes < 3);
            prefixes[nprefixes] = strdup(sys);
            found = nprefixes++;
        }
        lens[found]++;
        int words = 1;
        for (const char *p = sys; *p; p++)
            words += *p == ' ';
        assert_int_equal(words, 40);
        words = 1;
        for (const char *p = user; *p; p++)
            words += *p == ' ';
        assert_true(words >= 1 && words <= 30 + 10 * 6);
        json_int_t mt = json_integer_value(json_object_get(j, "max_tokens"));
        assert_true(mt >= 1 && mt <= 20 + 5 * 6);
        assert_string_equal(json_string_value(json_object_get(j, "model")), "m");
        assert_true(json_is_true(json_object_get(j, "stream")));
        assert_true(json_is_true(
            json_object_get(json_object_get(j, "stream_options"), "include_usage")));
        json_decref(j);
    }
    assert_int_equal(nprefixes, 3);
    for (int i = 0; i < 3; i++)   /* uniform: each near 200 / 3 */
        assert_true(lens[i] > 40 && lens[i] < 95);
    assert_true(differ > 190);
    for (int i = 0; i < nprefixes; i++)
        free((void *)prefixes[i]);
    llmreq_free(a);
    llmreq_free(b);
    llmreq_free(c);
    /* Completions: one prompt, the prefix first; no stream options unstreamed. */
    struct llmreq_opts oc = opts(false, false, 7);
    assert_int_equal(llmreq_from_synth(&oc, &s, &a, msg, sizeof msg), 0);
    assert_string_equal(llmreq_path(a), "/v1/completions");
    json_t *j = body(a, 0);
    assert_true(json_is_string(json_object_get(j, "prompt")));
    assert_null(json_object_get(j, "messages"));
    assert_true(json_is_false(json_object_get(j, "stream")));
    assert_null(json_object_get(j, "stream_options"));
    assert_non_null(strstr(json_string_value(json_object_get(j, "prompt")), "\n\n"));
    json_decref(j);
    llmreq_free(a);
}

static void test_prompts_file(void **state)
{
    (void)state;
    char path[256];
    test_scratch_template(path, sizeof path, "llmreq");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"prompt\": \"one\"}\n"
          "\n"
          "{\"messages\": [{\"role\": \"user\", \"content\": \"two\"}], \"max_tokens\": 3, "
          "\"temperature\": 0}\r\n"
          "{\"prompt\": \"three\", \"stream\": false}\n", f);
    fclose(f);
    struct llmreq_opts o = opts(true, true, 1);
    o.url_path = "/pool/";
    o.api_key = "sk-1";
    o.headers = "X-A: b\r\n";
    struct llmreq *w;
    char msg[256];
    assert_int_equal(llmreq_from_prompts(&o, path, &w, msg, sizeof msg), 0);
    assert_string_equal(llmreq_path(w), "/pool/v1/chat/completions");
    static const char *const want[] = {"one", "two", "three", "one", "two"};
    for (uint64_t k = 0; k < 5; k++) {
        json_t *j = body(w, k);
        json_t *m = json_array_get(json_object_get(j, "messages"), 0);
        assert_string_equal(json_string_value(json_object_get(m, "content")), want[k]);
        assert_string_equal(json_string_value(json_object_get(m, "role")), "user");
        assert_null(json_object_get(j, "prompt"));
        assert_int_equal(json_integer_value(json_object_get(j, "max_tokens")), k % 3 == 1 ? 3 : 9);
        assert_true(json_is_true(json_object_get(j, "stream")));   /* the run's, not the line's */
        if (k % 3 == 1)
            assert_true(json_is_integer(json_object_get(j, "temperature")));
        json_decref(j);
    }
    /* The whole request: the head, then the body its Content-Length says. */
    struct buf b = BUF_INIT;
    assert_int_equal(llmreq_append_next(w, &b), 0);
    assert_int_equal(buf_append(&b, "", 1), 0);
    assert_true(strncmp(b.data, "POST /pool/v1/chat/completions HTTP/1.1\r\nHost: h\r\n", 50) == 0);
    assert_non_null(strstr(b.data, "\r\nX-A: b\r\nAuthorization: Bearer sk-1\r\n"));
    const char *cl = strstr(b.data, "Content-Length: "), *end = strstr(b.data, "\r\n\r\n");
    assert_non_null(cl);
    assert_int_equal(strtol(cl + 16, NULL, 10), strlen(end + 4));
    buf_free(&b);
    llmreq_free(w);
    /* Completions take prompts only. */
    o.chat = false;
    o.url_path = "/v1/completions";
    assert_int_equal(llmreq_from_prompts(&o, path, &w, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "line 3"));
    unlink(path);
}

static void test_bad_prompts(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "not json\n", "[1]\n", "{\"text\": \"x\"}\n", "{\"messages\": []}\n",
        "{\"prompt\": \"a\", \"messages\": [{}]}\n", "{\"prompt\": \"a\", \"max_tokens\": 0}\n",
        "{\"prompt\": 5}\n",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char path[256];
        test_scratch_template(path, sizeof path, "llmreq");
        int fd = mkstemp(path);
        assert_true(fd >= 0);
        FILE *f = fdopen(fd, "w");
        fprintf(f, "{\"prompt\": \"fine\"}\n%s", bad[i]);
        fclose(f);
        struct llmreq_opts o = opts(true, true, 1);
        struct llmreq *w = NULL;
        char msg[256] = "";
        if (llmreq_from_prompts(&o, path, &w, msg, sizeof msg) == 0)
            fail_msg("line \"%s\" was taken", bad[i]);
        assert_non_null(strstr(msg, "line 2"));
        unlink(path);
    }
    struct llmreq_opts o = opts(true, true, 1);
    struct llmreq *w = NULL;
    char msg[256];
    assert_int_equal(llmreq_from_prompts(&o, "/nonexistent/p.jsonl", &w, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "/nonexistent/p.jsonl"));
    char path[256];
    test_scratch_template(path, sizeof path, "llmreq");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "\n \n\n", 4), 4);
    close(fd);
    assert_int_equal(llmreq_from_prompts(&o, path, &w, msg, sizeof msg), -1);
    assert_non_null(strstr(msg, "no lines"));
    unlink(path);
}

static void test_route(void **state)
{
    (void)state;
    static const struct {
        const char *url_path;
        bool chat;
        const char *want;
    } cases[] = {
        {"/", true, "/v1/chat/completions"},
        {"", false, "/v1/completions"},
        {"/v1/chat/completions", true, "/v1/chat/completions"},
        {"/x/v1/completions", true, "/x/v1/completions"},   /* the URL names the route */
        {"/openai//", false, "/openai/v1/completions"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct llmreq_opts o = opts(cases[i].chat, true, 1);
        o.url_path = cases[i].url_path;
        struct llmreq_synth s;
        char msg[256];
        struct llmreq *w;
        assert_int_equal(llmreq_synth_parse("in=3", &s, msg, sizeof msg), 0);
        assert_int_equal(llmreq_from_synth(&o, &s, &w, msg, sizeof msg), 0);
        assert_string_equal(llmreq_path(w), cases[i].want);
        llmreq_free(w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synth_spec),
        cmocka_unit_test(test_synth_is_a_function_of_seed_and_k),
        cmocka_unit_test(test_prompts_file),
        cmocka_unit_test(test_bad_prompts),
        cmocka_unit_test(test_route),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
