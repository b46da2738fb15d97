/* test_llmans.c - batchgate-load's OpenAI answers (loadgen/llmans): the
 * server-sent events of a stream read the same whether they come whole,
 * byte by byte or in odd pieces, with \n or \r\n; content chunks, usage
 * and [DONE] are found; broken streams (an event not JSON, an error event,
 * no [DONE], an event over the cap) are broken without growing past the
 * cap; whole answers; and the metrics of a step (TTFT, ITL, TPOT). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "loadgen/llmans.h"

#define CHUNK(content) \
    "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":" content \
    ",\"finish_reason\":null}]}\n\n"

/* A chat stream as vLLM sends it: a role-only first delta, three tokens, an
 * empty closing delta, the usage chunk, [DONE]. */
static const char STREAM[] =
    CHUNK("{\"role\":\"assistant\",\"content\":\"\"}")
    CHUNK("{\"content\":\"alpha\"}")
    ": a comment line\n"
    "event: message\nid: 7\n"
    CHUNK("{\"content\":\" bravo\"}")
    CHUNK("{\"content\":\" charlie\"}")
    CHUNK("{}")
    "data: {\"object\":\"chat.completion.chunk\",\"choices\":[],"
    "\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15}}\n\n"
    "data: [DONE]\n\n";

/* The same bytes with every \n made \r\n. */
static char *crlf(const char *s)
{
    char *out = malloc(strlen(s) * 2 + 1), *o = out;
    for (; *s; s++) {
        if (*s == '\n')
            *o++ = '\r';
        *o++ = *s;
    }
    *o = '\0';
    return out;
}

/* Feeds s in pieces of `piece` bytes (0: whole), time advancing 1 ms a piece. */
static int feed(struct llmans *a, bool stream, const char *s, size_t piece)
{
    llmans_begin(a, stream);
    size_t n = strlen(s);
    int64_t t = 1000000;
    if (!piece)
        piece = n;
    for (size_t i = 0; i < n; i += piece, t += 1000000)
        llmans_feed(a, s + i, i + piece > n ? n - i : piece, t);
    return llmans_end(a, t);
}

static void test_stream_in_any_pieces(void **state)
{
    (void)state;
    struct llmans a;
    llmans_init(&a);
    char *cr = crlf(STREAM);
    const char *texts[] = {STREAM, cr};
    size_t pieces[] = {0, 1, 2, 3, 7, 64, 100};
    for (int t = 0; t < 2; t++)
        for (size_t p = 0; p < sizeof pieces / sizeof pieces[0]; p++) {
            assert_int_equal(feed(&a, true, texts[t], pieces[p]), 0);
            assert_null(a.failed);
            assert_true(a.done);
            assert_int_equal(a.chunks, 3);
            assert_int_equal(a.ngaps, 2);
            assert_int_equal(a.prompt_tokens, 12);
            assert_int_equal(a.completion_tokens, 3);
            assert_true(a.first_ns > 0 && a.last_ns >= a.first_ns);
        }
    /* Byte by byte, each content chunk arrives later than the one before. */
    assert_int_equal(feed(&a, true, STREAM, 1), 0);
    assert_true(a.gaps[0] > 0 && a.gaps[1] > 0);
    free(cr);
    llmans_free(&a);
}

static void test_events_and_lines(void **state)
{
    (void)state;
    struct llmans a;
    llmans_init(&a);
    /* An event's data on two lines (joined by \n: still JSON), "data:"
     * without the space, a bare \r as a line end, and a completion chunk. */
    const char *s = "data: {\"choices\":[{\"text\":\n"
                    "data:\"x\"}]}\r\r"
                    "data: {\"choices\":[{\"text\":\"y\"}]}\n\n"
                    "data: [DONE]";   /* no blank line before the end */
    assert_int_equal(feed(&a, true, s, 0), 0);
    assert_int_equal(a.chunks, 2);
    assert_int_equal(a.completion_tokens, -1);   /* no usage: the caller counts chunks */
    /* Reasoning counts as content; an empty text does not. */
    s = CHUNK("{\"reasoning_content\":\"hm\"}")
        "data: {\"choices\":[{\"text\":\"\"}]}\n\n"
        "data: [DONE]\n\n"
        "data: not read after [DONE]\n\n";
    assert_int_equal(feed(&a, true, s, 5), 0);
    assert_int_equal(a.chunks, 1);
    llmans_free(&a);
}

static void test_broken_streams(void **state)
{
    (void)state;
    struct llmans a;
    llmans_init(&a);
    static const char *const broken[] = {
        CHUNK("{\"content\":\"alpha\"}") "data: {\"id\": \"broken\n\n",   /* llmsim's bad_sse */
        CHUNK("{\"content\":\"alpha\"}") CHUNK("{\"content\":\"bravo\"}"),   /* no [DONE] */
        "data: {\"error\":{\"message\":\"overloaded\"}}\n\ndata: [DONE]\n\n",
        "data: [1, 2]\n\ndata: [DONE]\n\n",
        "{\"choices\":[]}",                  /* a whole body where a stream was asked */
        "",
    };
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        assert_int_equal(feed(&a, true, broken[i], 3), -1);
        assert_non_null(a.failed);
    }
    /* An endless line: broken at the cap, and the buffers stop there. */
    llmans_begin(&a, true);
    char junk[4096];
    memset(junk, 'x', sizeof junk);
    llmans_feed(&a, "data: ", 6, 1);
    for (int i = 0; i < 1024 && !a.failed; i++)
        llmans_feed(&a, junk, sizeof junk, 2);
    assert_non_null(a.failed);
    assert_true(a.line.cap <= 2 * LLMANS_EVENT_MAX);
    for (int i = 0; i < 1024; i++)
        llmans_feed(&a, junk, sizeof junk, 3);
    assert_true(a.line.cap <= 2 * LLMANS_EVENT_MAX);
    assert_int_equal(llmans_end(&a, 4), -1);
    /* And the next answer on the connection starts clean. */
    assert_int_equal(feed(&a, true, STREAM, 0), 0);
    llmans_free(&a);
}

static void test_whole_answers(void **state)
{
    (void)state;
    struct llmans a;
    llmans_init(&a);
    const char *chat = "{\"object\":\"chat.completion\",\"choices\":[{\"index\":0,\"message\":"
                       "{\"role\":\"assistant\",\"content\":\"alpha bravo\"}}],"
                       "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}";
    assert_int_equal(feed(&a, false, chat, 4), 0);
    assert_int_equal(a.chunks, 1);
    assert_int_equal(a.prompt_tokens, 5);
    assert_int_equal(a.completion_tokens, 2);
    const char *text = "{\"choices\":[{\"text\":\"alpha\"}]}";
    assert_int_equal(feed(&a, false, text, 0), 0);
    assert_int_equal(a.chunks, 1);
    assert_int_equal(a.completion_tokens, -1);
    assert_int_equal(feed(&a, false, "{\"choices\": [{\"text\": \"alph", 0), -1);   /* half */
    assert_int_equal(feed(&a, false, "{\"error\":{\"message\":\"no\"}}", 0), -1);
    assert_int_equal(feed(&a, false, "[]", 0), -1);
    llmans_free(&a);
}

static void test_stats(void **state)
{
    (void)state;
    static struct llmans_stats s, t;
    llmans_stats_reset(&s);
    struct llmans a;
    llmans_init(&a);
    /* Intended at 0, first token at 100 ms, then 10 tokens 10 ms apart,
     * the end at 200 ms: 11 tokens, TPOT (200 - 100) / 10 = 10 ms. */
    llmans_begin(&a, true);
    a.chunks = 11;
    a.first_ns = 100000000;
    a.completion_tokens = 11;
    a.prompt_tokens = 40;
    a.gaps = malloc(10 * sizeof *a.gaps);
    a.capgaps = 10;
    for (int i = 0; i < 10; i++)
        a.gaps[a.ngaps++] = 10000000;
    llmans_stats_record(&s, &a, 0, 200000000);
    assert_int_equal(s.requests, 1);
    assert_int_equal(s.output_tokens, 11);
    assert_int_equal(s.prompt_tokens, 40);
    assert_true(llabs(hist_quantile(&s.ttft, .5) - 100000000) < 1000000);
    assert_true(llabs(hist_quantile(&s.e2e, .5) - 200000000) < 2000000);
    assert_true(llabs(hist_quantile(&s.tpot, .5) - 10000000) < 100000);
    assert_int_equal(s.itl.count, 10);
    /* Without usage the content chunks are the tokens; a whole answer's
     * TTFT is its e2e, and it has no ITL or TPOT. */
    llmans_begin(&a, false);
    a.chunks = 1;
    llmans_stats_record(&s, &a, 0, 50000000);
    assert_int_equal(s.output_tokens, 12);
    assert_int_equal(s.ttft.count, 2);
    assert_int_equal(hist_quantile(&s.ttft, 0), hist_quantile(&s.e2e, 0));
    assert_int_equal(s.tpot.count, 1);
    llmans_stats_broken(&s, "first");
    llmans_stats_broken(&s, "second");
    assert_int_equal(s.broken, 2);
    assert_string_equal(s.first_broken, "first");
    llmans_stats_reset(&t);
    llmans_stats_merge(&t, &s);
    llmans_stats_merge(&t, &s);
    assert_int_equal(t.requests, 4);
    assert_int_equal(t.broken, 4);
    assert_int_equal(t.itl.count, 20);
    assert_string_equal(t.first_broken, "first");
    llmans_free(&a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stream_in_any_pieces),
        cmocka_unit_test(test_events_and_lines),
        cmocka_unit_test(test_broken_streams),
        cmocka_unit_test(test_whole_answers),
        cmocka_unit_test(test_stats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
