/* test_scrape.c - LLM servers' /metrics into a load (serving/scrape.h): a
 * sample of each server family as it writes its exposition (llmsim's as
 * tests/llmsim/llmsim.py answers; llama-server's names as docs/LLM.md
 * measured them; vLLM's, SGLang's and TGI's as their sources register
 * them), then the format's corners: labels and their escapes, NaN and Inf,
 * timestamps, CRLF, bad lines, a body cut at every byte, a huge body, and
 * servers we do not understand. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "serving/scrape.h"

#define NEAR(a, b) assert_true(fabs((a) - (b)) < 1e-9)

/* Parses a copy of exactly len bytes on the heap, without a NUL, so that a
 * read past the end is caught under ASan. */
static int parse_exact(const char *text, size_t len, struct scrape_load *out)
{
    char *copy = malloc(len ? len : 1);
    assert_non_null(copy);
    memcpy(copy, text, len);
    int rc = scrape_parse(copy, len, out);
    free(copy);
    return rc;
}

static int parse(const char *text, struct scrape_load *out)
{
    return parse_exact(text, strlen(text), out);
}

/* What `python3 tests/llmsim/llmsim.py --endpoints 1` answers on /metrics
 * after one 40-token chat (histograms cut to a few buckets). */
static const char llmsim_text[] =
    "# HELP vllm:num_requests_running Requests in the running batch.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{model_name=\"llmsim\"} 3.0\n"
    "# HELP vllm:num_requests_waiting Requests waiting for admission.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{model_name=\"llmsim\"} 2.0\n"
    "# HELP vllm:kv_cache_usage_perc KV blocks in use / total (0..1).\n"
    "# TYPE vllm:kv_cache_usage_perc gauge\n"
    "vllm:kv_cache_usage_perc{model_name=\"llmsim\"} 0.4375\n"
    "# HELP vllm:prompt_tokens_total Prompt tokens of admitted requests.\n"
    "# TYPE vllm:prompt_tokens_total counter\n"
    "vllm:prompt_tokens_total{model_name=\"llmsim\"} 40.0\n"
    "# HELP vllm:generation_tokens_total Tokens generated.\n"
    "# TYPE vllm:generation_tokens_total counter\n"
    "vllm:generation_tokens_total{model_name=\"llmsim\"} 3.0\n"
    "# HELP vllm:prefix_cache_queries_total Prompt tokens looked up in the prefix cache.\n"
    "# TYPE vllm:prefix_cache_queries_total counter\n"
    "vllm:prefix_cache_queries_total{model_name=\"llmsim\"} 40.0\n"
    "# HELP vllm:prefix_cache_hits_total Prompt tokens found in the prefix cache.\n"
    "# TYPE vllm:prefix_cache_hits_total counter\n"
    "vllm:prefix_cache_hits_total{model_name=\"llmsim\"} 16.0\n"
    "# HELP vllm:request_success_total Requests finished.\n"
    "# TYPE vllm:request_success_total counter\n"
    "vllm:request_success_total{finished_reason=\"length\",model_name=\"llmsim\"} 1.0\n"
    "# HELP vllm:cache_config_info KV cache configuration.\n"
    "# TYPE vllm:cache_config_info gauge\n"
    "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"512\",model_name=\"llmsim\"} 1.0\n"
    "# HELP llmsim:requests_aborted_total Requests aborted by a client that left (llmsim's own).\n"
    "# TYPE llmsim:requests_aborted_total counter\n"
    "llmsim:requests_aborted_total{model_name=\"llmsim\"} 0.0\n"
    "# HELP vllm:time_to_first_token_seconds Time to first token, wall seconds.\n"
    "# TYPE vllm:time_to_first_token_seconds histogram\n"
    "vllm:time_to_first_token_seconds_bucket{le=\"0.02\",model_name=\"llmsim\"} 0\n"
    "vllm:time_to_first_token_seconds_bucket{le=\"0.04\",model_name=\"llmsim\"} 1\n"
    "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"llmsim\"} 1\n"
    "vllm:time_to_first_token_seconds_sum{model_name=\"llmsim\"} 0.02934539900161326\n"
    "vllm:time_to_first_token_seconds_count{model_name=\"llmsim\"} 1\n";

static void test_llmsim(void **s)
{
    (void)s;
    struct scrape_load l;
    assert_int_equal(parse(llmsim_text, &l), 0);
    assert_int_equal(l.server, SCRAPE_VLLM);
    assert_int_equal(l.recognised, 5);
    NEAR(l.waiting, 2);
    NEAR(l.running, 3);
    NEAR(l.kv_cache, 0.4375);
    NEAR(l.prompt_tokens, 40);
    NEAR(l.cached_prompt_tokens, 16);
    NEAR(l.computed_prompt_tokens, 24);
    assert_string_equal(scrape_server_name(l.server), "vllm");
}

/* vLLM's v1 engine through prometheus_client: counters also write a
 * _created sample; labels engine and model_name; two engines (data
 * parallel) report one series each, summed, the KV cache the fuller one. */
static void test_vllm_v1_two_engines(void **s)
{
    (void)s;
    static const char text[] =
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        "vllm:num_requests_running{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 12.0\n"
        "vllm:num_requests_running{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 9.0\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        "vllm:num_requests_waiting{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 4.0\n"
        "vllm:num_requests_waiting{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.0\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.82\n"
        "vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.61\n"
        "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.\n"
        "# TYPE vllm:prefix_cache_queries_total counter\n"
        "vllm:prefix_cache_queries_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.23e+06\n"
        "vllm:prefix_cache_queries_total{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.0e+06\n"
        "# HELP vllm:prefix_cache_queries_created Prefix cache queries, in terms of number of queried tokens.\n"
        "# TYPE vllm:prefix_cache_queries_created gauge\n"
        "vllm:prefix_cache_queries_created{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.7500000123e+09\n"
        "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n"
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        "vllm:prefix_cache_hits_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 800000.0\n"
        "vllm:prefix_cache_hits_total{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 600000.0\n"
        "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens_total counter\n"
        "vllm:prompt_tokens_total{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.23e+06\n"
        "vllm:prompt_tokens_total{engine=\"1\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.0e+06\n"
        "vllm:prompt_tokens_created{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.7500000123e+09\n";
    struct scrape_load l;
    assert_int_equal(parse(text, &l), 0);
    assert_int_equal(l.server, SCRAPE_VLLM);
    assert_int_equal(l.recognised, 5);
    NEAR(l.running, 21);
    NEAR(l.waiting, 5);
    NEAR(l.kv_cache, 0.82);
    NEAR(l.prompt_tokens, 2.23e6);
    NEAR(l.cached_prompt_tokens, 1.4e6);
    NEAR(l.computed_prompt_tokens, 0.83e6);
}

/* vLLM before the v1 engine: gpu_cache_usage_perc (a fraction despite its
 * name) and no prefix counters; a server that has both names uses the new. */
static void test_vllm_v0_names(void **s)
{
    (void)s;
    static const char old[] =
        "# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        "vllm:gpu_cache_usage_perc{model_name=\"mistral\"} 0.25\n"
        "vllm:num_requests_waiting{model_name=\"mistral\"} 0.0\n"
        "vllm:num_requests_swapped{model_name=\"mistral\"} 0.0\n"
        "vllm:prompt_tokens_total{model_name=\"mistral\"} 5000.0\n";
    struct scrape_load l;
    assert_int_equal(parse(old, &l), 0);
    NEAR(l.kv_cache, 0.25);
    NEAR(l.waiting, 0);
    NEAR(l.running, -1);
    NEAR(l.prompt_tokens, 5000);
    NEAR(l.cached_prompt_tokens, -1);
    NEAR(l.computed_prompt_tokens, -1);
    assert_int_equal(l.recognised, 3);

    static const char both[] = "vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.9\n"
                               "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.3\n";
    assert_int_equal(parse(both, &l), 0);
    NEAR(l.kv_cache, 0.3);
}

/* llama-server --metrics: unlabelled; no KV gauge; its prompt_tokens_total
 * leaves the cached tokens out (docs/LLM.md). */
static const char llamacpp_text[] =
    "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.\n"
    "# TYPE llamacpp:prompt_tokens_total counter\n"
    "llamacpp:prompt_tokens_total 1173\n"
    "# HELP llamacpp:prompt_seconds_total Prompt process time\n"
    "# TYPE llamacpp:prompt_seconds_total counter\n"
    "llamacpp:prompt_seconds_total 7.322\n"
    "# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.\n"
    "# TYPE llamacpp:tokens_predicted_total counter\n"
    "llamacpp:tokens_predicted_total 16\n"
    "# HELP llamacpp:tokens_predicted_seconds_total Predict process time\n"
    "# TYPE llamacpp:tokens_predicted_seconds_total counter\n"
    "llamacpp:tokens_predicted_seconds_total 0.207\n"
    "# HELP llamacpp:n_decode_total Total number of llama_decode() calls\n"
    "# TYPE llamacpp:n_decode_total counter\n"
    "llamacpp:n_decode_total 20\n"
    "# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens taken from the cache.\n"
    "# TYPE llamacpp:prompt_tokens_cached_total counter\n"
    "llamacpp:prompt_tokens_cached_total 585\n"
    "# HELP llamacpp:n_tokens_max Largest observed n_tokens.\n"
    "# TYPE llamacpp:n_tokens_max counter\n"
    "llamacpp:n_tokens_max 586\n"
    "# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.\n"
    "# TYPE llamacpp:prompt_tokens_seconds gauge\n"
    "llamacpp:prompt_tokens_seconds 160.202\n"
    "# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.\n"
    "# TYPE llamacpp:predicted_tokens_seconds gauge\n"
    "llamacpp:predicted_tokens_seconds 77.2947\n"
    "# HELP llamacpp:requests_processing Number of requests processing.\n"
    "# TYPE llamacpp:requests_processing gauge\n"
    "llamacpp:requests_processing 2\n"
    "# HELP llamacpp:requests_deferred Number of requests deferred.\n"
    "# TYPE llamacpp:requests_deferred gauge\n"
    "llamacpp:requests_deferred 1\n"
    "# HELP llamacpp:n_busy_slots_per_decode Average number of busy slots per llama_decode() call\n"
    "# TYPE llamacpp:n_busy_slots_per_decode gauge\n"
    "llamacpp:n_busy_slots_per_decode 1.2\n";

static void test_llamacpp(void **s)
{
    (void)s;
    struct scrape_load l;
    assert_int_equal(parse(llamacpp_text, &l), 0);
    assert_int_equal(l.server, SCRAPE_LLAMACPP);
    assert_int_equal(l.recognised, 4);
    NEAR(l.waiting, 1);
    NEAR(l.running, 2);
    NEAR(l.kv_cache, -1);
    NEAR(l.prompt_tokens, 1173);
    NEAR(l.cached_prompt_tokens, 585);
    NEAR(l.computed_prompt_tokens, 1173);
}

/* SGLang: model_name labels; cached_tokens_total by cache_source, summed. */
static void test_sglang(void **s)
{
    (void)s;
    static const char text[] =
        "# HELP sglang:num_running_reqs The number of running requests.\n"
        "# TYPE sglang:num_running_reqs gauge\n"
        "sglang:num_running_reqs{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 30.0\n"
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
        "# TYPE sglang:num_queue_reqs gauge\n"
        "sglang:num_queue_reqs{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 6.0\n"
        "# HELP sglang:token_usage The token usage.\n"
        "# TYPE sglang:token_usage gauge\n"
        "sglang:token_usage{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.28\n"
        "# HELP sglang:cache_hit_rate The prefix cache hit rate.\n"
        "# TYPE sglang:cache_hit_rate gauge\n"
        "sglang:cache_hit_rate{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 0.0075\n"
        "# HELP sglang:prompt_tokens_total Number of prefill tokens processed.\n"
        "# TYPE sglang:prompt_tokens_total counter\n"
        "sglang:prompt_tokens_total{model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 8.128902e+06\n"
        "# HELP sglang:cached_tokens_total Number of cached prompt tokens.\n"
        "# TYPE sglang:cached_tokens_total counter\n"
        "sglang:cached_tokens_total{cache_source=\"device\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1.0e+06\n"
        "sglang:cached_tokens_total{cache_source=\"host\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 128902\n";
    struct scrape_load l;
    assert_int_equal(parse(text, &l), 0);
    assert_int_equal(l.server, SCRAPE_SGLANG);
    assert_int_equal(l.recognised, 5);
    NEAR(l.waiting, 6);
    NEAR(l.running, 30);
    NEAR(l.kv_cache, 0.28);
    NEAR(l.cached_prompt_tokens, 1128902);
    NEAR(l.computed_prompt_tokens, 7e6);
}

/* TGI: its router's gauges, unlabelled; nothing on the KV cache. */
static void test_tgi(void **s)
{
    (void)s;
    static const char text[] = "# TYPE tgi_batch_current_max_tokens gauge\n"
                               "tgi_batch_current_max_tokens 4096\n"
                               "# TYPE tgi_queue_size gauge\n"
                               "tgi_queue_size 7\n"
                               "# TYPE tgi_batch_current_size gauge\n"
                               "tgi_batch_current_size 32\n"
                               "# TYPE tgi_request_count counter\n"
                               "tgi_request_count 1200\n";
    struct scrape_load l;
    assert_int_equal(parse(text, &l), 0);
    assert_int_equal(l.server, SCRAPE_TGI);
    assert_int_equal(l.recognised, 2);
    NEAR(l.waiting, 7);
    NEAR(l.running, 32);
    NEAR(l.kv_cache, -1);
    NEAR(l.prompt_tokens, -1);
}

/* Label values hold anything, escaped: quotes, backslashes, \n, and the
 * characters that end a label set or a line elsewhere. Spaces around, a
 * trailing comma, an empty set. */
static void test_labels_and_escapes(void **s)
{
    (void)s;
    static const char text[] =
        "vllm:num_requests_waiting{model_name=\"a \\\"quoted\\\" name\"} 1\n"
        "vllm:num_requests_waiting{model_name=\"back\\\\slash\\\\\"} 2\n"
        "vllm:num_requests_waiting{model_name=\"two\\nlines\",x=\"} 100\\n{\"} 4\n"
        "vllm:num_requests_waiting{ model_name = \"spaced\" , engine=\"0\", } 8\n"
        "vllm:num_requests_waiting{} 16\n"
        "vllm:num_requests_waiting{model_name=\"# not a comment\"} 32\n";
    struct scrape_load l;
    assert_int_equal(parse(text, &l), 0);
    NEAR(l.waiting, 63);
    assert_int_equal(l.recognised, 1);
}

/* NaN and Inf read as absent (a server that has no value yet); when every
 * sample of a series is, the field is unknown. Negative counts are 0. */
static void test_nan_inf(void **s)
{
    (void)s;
    static const char text[] = "vllm:kv_cache_usage_perc{model_name=\"m\"} NaN\n"
                               "vllm:num_requests_running{model_name=\"m\"} +Inf\n"
                               "vllm:num_requests_running{model_name=\"n\"} 2\n"
                               "vllm:num_requests_waiting{model_name=\"m\"} -Inf\n"
                               "vllm:prompt_tokens_total{model_name=\"m\"} -3\n";
    struct scrape_load l;
    assert_int_equal(parse(text, &l), 0);
    NEAR(l.kv_cache, -1);
    NEAR(l.running, 2);
    NEAR(l.waiting, -1);
    NEAR(l.prompt_tokens, 0);
    assert_int_equal(l.recognised, 2);
}

/* Finite samples whose sum overflows are absent too: the sum was +Inf,
 * and a waiting of +Inf made a picker's cost NaN at a queue weight of 0
 * (found by fuzz_scrape). */
static void test_sum_overflow_is_absent(void **s)
{
    (void)s;
    static const char text[] = "vllm:num_requests_waiting{model_name=\"m\"} 1.7e308\n"
                               "vllm:num_requests_waiting{model_name=\"n\"} 1.7e308\n"
                               "vllm:num_requests_running{model_name=\"m\"} 4\n";
    struct scrape_load l;
    assert_int_equal(parse(text, &l), 0);
    NEAR(l.waiting, -1);
    NEAR(l.running, 4);
    assert_int_equal(l.recognised, 1);   /* as a series of NaN samples is not */
}

/* Timestamps (integers; OpenMetrics' floats), exemplars, CRLF, tabs,
 * leading blanks, blank lines, OpenMetrics' # EOF. */
static void test_timestamps_crlf(void **s)
{
    (void)s;
    static const char text[] = "# TYPE vllm:num_requests_waiting gauge\r\n"
                               "vllm:num_requests_waiting{model_name=\"m\"} 3 1712345678901\r\n"
                               "\r\n"
                               "   vllm:num_requests_running\t5\t-1712345678901\r\n"
                               "vllm:prompt_tokens_total{model_name=\"m\"} 10 1712345678.901 "
                               "# {trace_id=\"abc\"} 10 1712345678.9\r\n"
                               "vllm:kv_cache_usage_perc 0.5 # {trace_id=\"x\"} 1\n"
                               "# EOF\n";
    struct scrape_load l;
    assert_int_equal(parse(text, &l), 0);
    NEAR(l.waiting, 3);
    NEAR(l.running, 5);
    NEAR(l.prompt_tokens, 10);
    NEAR(l.kv_cache, 0.5);
}

/* A line that does not parse is skipped; the lines around it still count. */
static void test_bad_lines_skipped(void **s)
{
    (void)s;
    static const char text[] =
        "vllm:num_requests_waiting{model_name=\"m\"} 1\n"
        "vllm:num_requests_waiting{model_name=\"unclosed} 100\n"   /* the quote never closes */
        "vllm:num_requests_waiting{model_name=\"m\" 100\n"         /* no '}' */
        "vllm:num_requests_waiting{model_name=m} 100\n"            /* unquoted */
        "vllm:num_requests_waiting{model-name=\"m\"} 100\n"        /* not a label name */
        "vllm:num_requests_waiting{model_name=\"m\"}100\n"         /* no blank before the value */
        "vllm:num_requests_waiting 12abc\n"                         /* not a number */
        "vllm:num_requests_waiting 100 200 300\n"                   /* trailing tokens */
        "vllm:num_requests_waiting 100 xyz\n"                       /* timestamp not a number */
        "vllm:num_requests_waiting\n"                               /* no value */
        "9vllm:num_requests_waiting 100\n"                          /* name starts with a digit */
        "vllm:num_requests_waiting 1e999999\n"                      /* +Inf after all: absent */
        "garbage ~~~ line\n"
        "\x01\x02\xff\n"
        "vllm:num_requests_waiting{model_name=\"n\"} 2\n";
    struct scrape_load l;
    assert_int_equal(parse(text, &l), 0);
    NEAR(l.waiting, 3);
    assert_int_equal(l.recognised, 1);
}

/* A body cut at every byte: never a read past the cut (the copy is exactly
 * that long), and a cut line never counts (a cut "12.5" is not "1"). */
static void test_truncated_everywhere(void **s)
{
    (void)s;
    static const char text[] = "# HELP vllm:num_requests_waiting Waiting.\n"
                               "vllm:num_requests_waiting{model_name=\"a\\\"b\"} 12.5\n"
                               "vllm:num_requests_running{model_name=\"a\"} 3 1712345678901\n"
                               "vllm:num_requests_waiting{model_name=\"c\"} 4\n";
    size_t len = strlen(text);
    size_t nl1 = strchr(text, '\n') - text + 1;
    size_t nl2 = strchr(text + nl1, '\n') - text + 1;
    size_t nl3 = strchr(text + nl2, '\n') - text + 1;
    for (size_t k = 0; k <= len; k++) {
        struct scrape_load l;
        int rc = parse_exact(text, k, &l);
        if (k < nl1) {
            assert_int_equal(rc, k ? -1 : 0);   /* not one whole line yet */
            assert_int_equal(l.recognised, 0);
        } else {
            assert_int_equal(rc, 0);
        }
        double want_w = k >= len ? 16.5 : k >= nl2 ? 12.5 : -1;
        NEAR(l.waiting, want_w);
        NEAR(l.running, k >= nl3 ? 3 : -1);
    }
}

/* A server we do not understand: parsed, nothing recognised. Text that is
 * not the format at all: -1. Empty: nothing, 0. */
static void test_unknown_and_unparseable(void **s)
{
    (void)s;
    static const char node[] = "# HELP node_load1 1m load average.\n"
                               "# TYPE node_load1 gauge\n"
                               "node_load1 0.21\n"
                               "go_goroutines 7\n";
    struct scrape_load l;
    assert_int_equal(parse(node, &l), 0);
    assert_int_equal(l.recognised, 0);
    assert_int_equal(l.server, SCRAPE_UNKNOWN);
    NEAR(l.waiting, -1);
    NEAR(l.running, -1);
    NEAR(l.kv_cache, -1);
    assert_string_equal(scrape_server_name(l.server), "unknown");

    static const char html[] = "<html>\n<body>502 Bad Gateway</body>\n</html>\n";
    assert_int_equal(parse(html, &l), -1);
    assert_int_equal(l.recognised, 0);
    static const char json[] = "{\"error\": {\"message\": \"not found\"}}\n";
    assert_int_equal(parse(json, &l), -1);
    assert_int_equal(parse("", &l), 0);
    assert_int_equal(l.recognised, 0);
    assert_int_equal(scrape_parse(NULL, 0, &l), 0);
    assert_int_equal(scrape_parse(NULL, 5, &l), -1);
    assert_int_equal(parse("\n\n\r\n", &l), 0);
}

/* 14 MB of samples (100,000 label sets a series, and a line of 1 MiB): the
 * sums are right and it takes well under a second. */
static void test_huge(void **s)
{
    (void)s;
    size_t cap = 16u << 20, n = 0;
    char *buf = malloc(cap);
    assert_non_null(buf);
    for (int i = 0; i < 100000; i++) {
        n += (size_t)snprintf(buf + n, cap - n,
                              "vllm:num_requests_waiting{model_name=\"m%d\",engine=\"%d\"} 1\n"
                              "vllm:time_to_first_token_seconds_bucket{le=\"0.5\",model_name=\"m%d\"} %d\n",
                              i, i % 8, i, i);
    }
    n += (size_t)snprintf(buf + n, cap - n, "vllm:num_requests_running{model_name=\"");
    memset(buf + n, 'x', 1u << 20);
    n += 1u << 20;
    n += (size_t)snprintf(buf + n, cap - n, "\"} 5\n");
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct scrape_load l;
    assert_int_equal(scrape_parse(buf, n, &l), 0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("scrape: %zu bytes in %.1f ms\n", n, secs * 1e3);
    /* A bound against a parse that grows with the square of the text
     * (minutes here), not a speed target: ~50 ms alone, but over 1 s under
     * ThreadSanitizer on a loaded 2-core machine (CI once failed at 1 s). */
    assert_true(secs < 15.0);
    NEAR(l.waiting, 100000);
    NEAR(l.running, 5);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llmsim),
        cmocka_unit_test(test_vllm_v1_two_engines),
        cmocka_unit_test(test_vllm_v0_names),
        cmocka_unit_test(test_llamacpp),
        cmocka_unit_test(test_sglang),
        cmocka_unit_test(test_tgi),
        cmocka_unit_test(test_labels_and_escapes),
        cmocka_unit_test(test_nan_inf),
        cmocka_unit_test(test_sum_overflow_is_absent),
        cmocka_unit_test(test_timestamps_crlf),
        cmocka_unit_test(test_bad_lines_skipped),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_unknown_and_unparseable),
        cmocka_unit_test(test_huge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
