/* test_llmtap.c - gateway/llmtap.c, the reader of an LLM server's answer on
 * its way to the client: events passed on whole and in order however the
 * bytes are cut, the usage event dropped only for a client that did not
 * ask, content chunks counted and timed, usage read, an oversized event
 * passed unread with reading going on after it, and a whole answer's usage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/llmtap.h"

#define CHUNK(t) "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" t "\"}}]}\n\n"
#define USAGE "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n"
#define DONE "data: [DONE]\n\n"

static const char stream[] = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\","
                             "\"content\":\"\"}}]}\n\n" CHUNK("a") CHUNK(" b") CHUNK(" c") USAGE DONE;

static int64_t times[16];
static int ntimes;

static void on_content(void *arg, int64_t now)
{
    (void)arg;
    if (ntimes < 16)
        times[ntimes++] = now;
}

/* Feeds s in pieces of `piece` bytes at times 1, 2, 3, ...; the output. */
static void run(const char *s, size_t len, size_t piece, bool want_usage, struct llmtap *t,
                struct buf *out)
{
    llmtap_init(t);
    t->want_usage = want_usage;
    t->on_content = on_content;
    ntimes = 0;
    int64_t now = 1;
    for (size_t at = 0; at < len; at += piece)
        assert_int_equal(llmtap_feed(t, s + at, len - at < piece ? len - at : piece, now++, out),
                         0);
    llmtap_end(t, out);
}

static void test_any_cut_gives_the_same_events(void **state)
{
    (void)state;
    size_t len = strlen(stream);
    for (size_t piece = 1; piece <= len; piece++) {
        struct llmtap t;
        struct buf out = {0};
        run(stream, len, piece, true, &t, &out);
        /* Asked for: every byte passes, in order. */
        assert_int_equal(out.len, len);
        assert_memory_equal(out.data, stream, len);
        assert_int_equal(t.chunks, 3);   /* the empty first delta is no text */
        assert_int_equal(ntimes, 3);
        assert_true(t.usage_seen);
        assert_int_equal(t.prompt_tokens, 7);
        assert_int_equal(t.completion_tokens, 3);
        llmtap_free(&t);
        buf_free(&out);
    }
}

static void test_usage_event_dropped_unless_asked(void **state)
{
    (void)state;
    struct llmtap t;
    struct buf out = {0};
    run(stream, strlen(stream), 5, false, &t, &out);
    const char *want_end = CHUNK(" c") DONE;
    assert_int_equal(out.len, strlen(stream) - strlen(USAGE));
    assert_memory_equal(out.data + out.len - strlen(want_end), want_end, strlen(want_end));
    assert_null(memmem(out.data, out.len, "usage", 5));
    /* Counted all the same. */
    assert_true(t.usage_seen);
    assert_int_equal(t.completion_tokens, 3);
    llmtap_free(&t);
    buf_free(&out);
}

static void test_crlf_and_several_data_lines(void **state)
{
    (void)state;
    /* An event's data may span lines (joined by \n): a JSON object split. */
    const char *s = "data: {\"choices\":[{\"text\":\r\ndata: \"x\"}]}\r\n\r\n"
                    ": a comment\r\n\r\n"
                    "event: message\ndata:{\"choices\":[{\"text\":\"y\"}]}\n\n";
    struct llmtap t;
    struct buf out = {0};
    run(s, strlen(s), 3, false, &t, &out);
    assert_int_equal(out.len, strlen(s));
    assert_int_equal(t.chunks, 2);
    assert_false(t.usage_seen);
    llmtap_free(&t);
    buf_free(&out);
}

/* Lines ended by a lone CR, as the SSE spec allows: read for LF alone, the
 * whole stream was one event until the server closed (held back from the
 * client, its usage passed on unasked and lost to the count). Cut at any
 * byte: each event passes as it ends, the usage event is taken out. */
static void test_cr_only_lines(void **state)
{
    (void)state;
    const char *s = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\r\r"
                    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"}}]}\r\r"
                    "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":11,"
                    "\"completion_tokens\":7}}\r\r"
                    "data: [DONE]\r\r";
    size_t len = strlen(s);
    for (size_t piece = 1; piece <= len; piece++) {
        struct llmtap t;
        struct buf out = {0};
        llmtap_init(&t);
        int64_t now = 1;
        size_t passed_before_end = 0;
        for (size_t at = 0; at < len; at += piece) {
            assert_int_equal(llmtap_feed(&t, s + at, len - at < piece ? len - at : piece, now++,
                                         &out), 0);
            passed_before_end = out.len;
        }
        assert_true(passed_before_end > 0);   /* not all held to the end */
        llmtap_end(&t, &out);
        assert_int_equal(t.chunks, 2);
        assert_true(t.usage_seen);
        assert_int_equal(t.prompt_tokens, 11);
        assert_int_equal(t.completion_tokens, 7);
        assert_null(memmem(out.data, out.len, "usage", 5));
        assert_non_null(memmem(out.data, out.len, "[DONE]", 6));
        llmtap_free(&t);
        buf_free(&out);
    }
}

static void test_broken_events_pass_as_sent(void **state)
{
    (void)state;
    /* Not JSON, then a stream cut inside an event: both reach the client. */
    const char *s = CHUNK("a") "data: {\"id\": \"broken\n\n" "data: {\"choices\":[{\"delta\":";
    struct llmtap t;
    struct buf out = {0};
    run(s, strlen(s), 7, false, &t, &out);
    assert_int_equal(out.len, strlen(s));
    assert_memory_equal(out.data, s, strlen(s));
    assert_int_equal(t.chunks, 1);
    llmtap_free(&t);
    buf_free(&out);
}

static void test_times_of_content(void **state)
{
    (void)state;
    /* One event per piece: the times are the pieces'. */
    const char *s = CHUNK("a") CHUNK("b") CHUNK("c");
    struct llmtap t;
    struct buf out = {0};
    run(s, strlen(s), strlen(CHUNK("a")), false, &t, &out);
    assert_int_equal(ntimes, 3);
    assert_int_equal(times[0], 1);
    assert_int_equal(times[1], 2);
    assert_int_equal(times[2], 3);
    llmtap_free(&t);
    buf_free(&out);
}

/* Chunks are read for text without being parsed (only an event with a
 * usage that is not null is): each of these must count as its comment
 * says, whatever the spacing, escapes and neighbouring keys. */
static void test_content_found_without_parsing(void **state)
{
    (void)state;
    static const struct {
        const char *ev;
        bool content;
    } cases[] = {
        {"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", true},
        {"data: {\"choices\" : [ { \"delta\" : { \"content\" :\t \"x\" } } ] }\n\n", true},
        {"data: {\"choices\":[{\"delta\":{\"content\":\"\"}}]}\n\n", false},       /* empty */
        {"data: {\"choices\":[{\"delta\":{\"content\":null}}]}\n\n", false},
        {"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", false},
        {"data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n", true},
        {"data: {\"choices\":[{\"text\":\"y\",\"index\":0}]}\n\n", true},
        {"data: {\"choices\":[{\"text\":\"\",\"index\":0}]}\n\n", false},
        /* A key's name inside a string value is no key. */
        {"data: {\"choices\":[{\"delta\":{\"role\":\"say \\\"content\\\":\\\"x\\\"\"}}]}\n\n",
         false},
        /* logprobs' content is an array, not text. */
        {"data: {\"choices\":[{\"delta\":{\"content\":\"\"},\"logprobs\":{\"content\":[{"
         "\"token\":\"a\"}]}}]}\n\n",
         false},
        /* usage null: still the fast path; the text counts. */
        {"data: {\"choices\":[{\"delta\":{\"content\":\"z\"}}],\"usage\":null}\n\n", true},
        /* usage with the text (continuous usage): parsed, both read. */
        {"data: {\"choices\":[{\"delta\":{\"content\":\"z\"}}],\"usage\":{\"prompt_tokens\":2,"
         "\"completion_tokens\":1}}\n\n",
         true},
        {"data: [DONE]\n\n", false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct llmtap t;
        struct buf out = {0};
        run(cases[i].ev, strlen(cases[i].ev), 4, true, &t, &out);
        if (t.chunks != (cases[i].content ? 1 : 0))
            fail_msg("case %zu (%s): %lld chunks with text", i, cases[i].ev, (long long)t.chunks);
        assert_int_equal(out.len, strlen(cases[i].ev));
        llmtap_free(&t);
        buf_free(&out);
    }
    /* The last usage case was read as usage too. */
    struct llmtap t;
    struct buf out = {0};
    run(cases[11].ev, strlen(cases[11].ev), 3, false, &t, &out);
    assert_true(t.usage_seen);
    assert_int_equal(t.prompt_tokens, 2);
    assert_int_equal(out.len, strlen(cases[11].ev));   /* it has text: passed on */
    llmtap_free(&t);
    buf_free(&out);
}

static void test_oversized_event_is_passed_and_reading_goes_on(void **state)
{
    (void)state;
    struct llmtap t;
    struct buf out = {0};
    llmtap_init(&t);
    static char big[LLMTAP_EVENT_MAX + 100];
    memcpy(big, "data: ", 6);
    memset(big + 6, 'x', sizeof big - 6);
    assert_int_equal(llmtap_feed(&t, big, sizeof big, 1, &out), 0);
    assert_true(t.skipping);
    assert_int_equal(t.chunks, 1);   /* read as one chunk of content */
    assert_true(out.len >= sizeof big - 3 && out.len <= sizeof big);
    /* More of it, its end split across pieces ("\r\n" then "\r\n"), then
     * a chunk of text and the usage event the client did not ask for:
     * reading goes on after it (it was turned off for the rest, so the
     * rest was free and the usage event passed on). */
    assert_int_equal(llmtap_feed(&t, "xxxx\r\n", 6, 2, &out), 0);
    assert_int_equal(llmtap_feed(&t, "\r\n", 2, 2, &out), 0);
    assert_false(t.skipping);
    assert_int_equal(out.len, sizeof big + 8);   /* all of it, as it came */
    static const char text[] = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    assert_int_equal(llmtap_feed(&t, text, strlen(text), 3, &out), 0);
    assert_int_equal(t.chunks, 2);
    assert_int_equal(llmtap_feed(&t, USAGE, strlen(USAGE), 4, &out), 0);
    assert_true(t.usage_seen);
    assert_int_equal(out.len, sizeof big + 8 + strlen(text));   /* the usage event held back */
    assert_int_equal(t.oversized, 1);
    llmtap_reset(&t);
    assert_false(t.skipping);
    assert_int_equal(t.oversized, 0);
    llmtap_free(&t);
    buf_free(&out);
}

/* A tool call's arguments are generated content, as text is. */
static void test_tool_call_arguments_are_content(void **state)
{
    (void)state;
    struct llmtap t;
    struct buf out = {0};
    llmtap_init(&t);
    static const char first[] = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,"
                                "\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n";
    static const char more[] = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,"
                               "\"function\":{\"arguments\":\"{\\\"a\\\": 1\"}}]}}]}\n\n";
    assert_int_equal(llmtap_feed(&t, first, strlen(first), 1, &out), 0);
    assert_int_equal(t.chunks, 0);   /* nothing generated yet */
    assert_int_equal(llmtap_feed(&t, more, strlen(more), 2, &out), 0);
    assert_int_equal(t.chunks, 1);
    llmtap_free(&t);
    buf_free(&out);
}

static void test_whole_answer_usage(void **state)
{
    (void)state;
    struct llmtap t;
    llmtap_init(&t);
    const char *body = "{\"choices\":[{\"message\":{\"content\":\"hi\"}}],"
                       "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":5}}";
    llmtap_usage_of(&t, body, strlen(body));
    assert_true(t.usage_seen);
    assert_int_equal(t.prompt_tokens, 12);
    assert_int_equal(t.completion_tokens, 5);
    llmtap_reset(&t);
    llmtap_usage_of(&t, "not json", 8);
    llmtap_usage_of(&t, "{\"usage\": {\"x\": 1}}", 19);
    assert_false(t.usage_seen);
    llmtap_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_any_cut_gives_the_same_events),
        cmocka_unit_test(test_usage_event_dropped_unless_asked),
        cmocka_unit_test(test_crlf_and_several_data_lines),
        cmocka_unit_test(test_cr_only_lines),
        cmocka_unit_test(test_broken_events_pass_as_sent),
        cmocka_unit_test(test_times_of_content),
        cmocka_unit_test(test_content_found_without_parsing),
        cmocka_unit_test(test_oversized_event_is_passed_and_reading_goes_on),
        cmocka_unit_test(test_tool_call_arguments_are_content),
        cmocka_unit_test(test_whole_answer_usage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
