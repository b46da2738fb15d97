/* test_llmstream.c - streamed completions assembled into whole answers
 * (serving/llmstream.h): chat and text completions, several choices, the
 * usage chunk, SSE's own shapes (CRLF, comments, multi-line data), and the
 * streams that are not answers (an error event, a cut stream, not JSON). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "serving/llmstream.h"

static json_t *assemble(const char *sse, bool chat, struct error *err)
{
    struct buf out = BUF_INIT;
    int rc = llmstream_assemble(sse, strlen(sse), chat, &out, err);
    json_t *o = NULL;
    if (rc == 0) {
        o = json_loadb(out.data, out.len, 0, NULL);
        assert_non_null(o);
    } else {
        assert_int_equal(out.len, 0);
    }
    buf_free(&out);
    return o;
}

#define CHUNK(body) "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"created\":7," \
                    "\"model\":\"m\",\"system_fingerprint\":\"fp\"," body "}\n\n"

static void test_chat(void **s)
{
    (void)s;
    const char *sse =
        CHUNK("\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]")
        CHUNK("\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]")
        CHUNK("\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\"}}]")
        CHUNK("\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]")
        CHUNK("\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,"
              "\"total_tokens\":8}")
        "data: [DONE]\n\n";
    struct error err = {0};
    json_t *o = assemble(sse, true, &err);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "object")), "chat.completion");
    assert_string_equal(json_string_value(json_object_get(o, "id")), "c1");
    assert_int_equal(json_integer_value(json_object_get(o, "created")), 7);
    assert_string_equal(json_string_value(json_object_get(o, "model")), "m");
    assert_string_equal(json_string_value(json_object_get(o, "system_fingerprint")), "fp");
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0);
    assert_int_equal(json_array_size(json_object_get(o, "choices")), 1);
    json_t *m = json_object_get(ch, "message");
    assert_string_equal(json_string_value(json_object_get(m, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(m, "content")), "Hello \xc3\xa9");
    assert_string_equal(json_string_value(json_object_get(ch, "finish_reason")), "length");
    json_t *u = json_object_get(o, "usage");
    assert_int_equal(json_integer_value(json_object_get(u, "completion_tokens")), 3);
    assert_int_equal(json_integer_value(json_object_get(u, "total_tokens")), 8);
    json_decref(o);
}

/* Text completions, two choices interleaved, CRLF lines, a comment, other
 * fields, a data field over two lines, no usage asked. */
static void test_text_two_choices(void **s)
{
    (void)s;
    const char *sse =
        ": keep-alive\r\n\r\n"
        "event: message\r\nid: 1\r\n"
        "data: {\"id\":\"t\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\r\n"
        "data: \"choices\":[{\"index\":1,\"text\":\"b\"},{\"index\":0,\"text\":\"a\"}]}\r\n\r\n"
        "data:{\"choices\":[{\"index\":0,\"text\":\"a\",\"finish_reason\":\"stop\"}]}\r\n\r\n"
        "data: {\"choices\":[{\"index\":1,\"text\":\"bb\",\"finish_reason\":\"length\"}]}\r\n\r\n"
        "data: [DONE]\r\n\r\n"
        "data: {\"choices\":[{\"index\":0,\"text\":\"after the end\"}]}\r\n\r\n";
    struct error err = {0};
    json_t *o = assemble(sse, false, &err);
    assert_non_null(o);
    assert_string_equal(json_string_value(json_object_get(o, "object")), "text_completion");
    json_t *cs = json_object_get(o, "choices");
    assert_int_equal(json_array_size(cs), 2);
    assert_string_equal(json_string_value(json_object_get(json_array_get(cs, 0), "text")), "aa");
    assert_string_equal(json_string_value(json_object_get(json_array_get(cs, 1), "text")),
                        "bbb");
    assert_int_equal(json_integer_value(json_object_get(json_array_get(cs, 1), "index")), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_array_get(cs, 0), "finish_reason")), "stop");
    assert_null(json_object_get(o, "usage"));
    json_decref(o);
}

/* Without [DONE] a stream whose choices all finished is whole (a server
 * that ends the connection after the last chunk); with one unfinished, it
 * was cut. */
static void test_end_without_done(void **s)
{
    (void)s;
    struct error err = {0};
    json_t *o = assemble(CHUNK("\"choices\":[{\"delta\":{\"content\":\"x\"},"
                               "\"finish_reason\":\"stop\"}]"),
                         true, &err);
    assert_non_null(o);
    json_decref(o);
    assert_null(assemble(CHUNK("\"choices\":[{\"delta\":{\"content\":\"x\"}}]"), true, &err));
    assert_non_null(strstr(err.msg, "before [DONE]"));
    /* The last event without its blank line was cut: not read. */
    assert_null(assemble("data: {\"choices\":[{\"delta\":{\"content\":\"x\"},"
                         "\"finish_reason\":\"stop\"}]}\n",
                         true, &err));
    assert_non_null(strstr(err.msg, "no choice"));
}

static void test_not_answers(void **s)
{
    (void)s;
    struct error err = {0};
    assert_null(assemble("data: {\"error\":{\"message\":\"context overflow\"}}\n\n", true, &err));
    assert_int_equal(err.code, BG_EINVAL);
    assert_non_null(strstr(err.msg, "context overflow"));
    assert_null(assemble("data: {not json\n\ndata: [DONE]\n\n", true, &err));
    assert_non_null(strstr(err.msg, "not a JSON object"));
    assert_null(assemble("data: [1, 2]\n\n", true, &err));
    assert_null(assemble("", true, &err));
    assert_null(assemble("data: [DONE]\n\n", true, &err));
    assert_non_null(strstr(err.msg, "no choice"));
    assert_null(assemble("data: {\"choices\":[{\"index\":128,\"text\":\"x\"}]}\n\n", false, &err));
    assert_non_null(strstr(err.msg, "index"));
    assert_null(assemble("data: {\"choices\":[{\"index\":\"0\",\"text\":\"x\"}]}\n\n", false,
                         &err));
    assert_null(assemble("data: {\"choices\":[{\"index\":-1,\"text\":\"x\"}]}\n\n", false, &err));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chat),
        cmocka_unit_test(test_text_two_choices),
        cmocka_unit_test(test_end_without_done),
        cmocka_unit_test(test_not_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
