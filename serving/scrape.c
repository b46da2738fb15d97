/* scrape.c - LLM servers' /metrics into a load (scrape.h). One pass over
 * the lines; a line is parsed in place (only a value's few characters are
 * copied, for strtod), so nothing is allocated and the work is linear. */
#include "serving/scrape.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum scrape_field { F_WAITING, F_RUNNING, F_KV, F_PROMPT, F_CACHED, F_COUNT };

/* The known series, in order of preference within a field (scrape.h). */
static const struct scrape_series {
    const char *name;
    enum scrape_field field;
    enum scrape_server server;
} scrape_known[] = {
    {"vllm:num_requests_waiting", F_WAITING, SCRAPE_VLLM},
    {"vllm:num_requests_running", F_RUNNING, SCRAPE_VLLM},
    {"vllm:kv_cache_usage_perc", F_KV, SCRAPE_VLLM},
    {"vllm:gpu_cache_usage_perc", F_KV, SCRAPE_VLLM},
    {"vllm:prompt_tokens_total", F_PROMPT, SCRAPE_VLLM},
    {"vllm:prefix_cache_hits_total", F_CACHED, SCRAPE_VLLM},
    {"llamacpp:requests_deferred", F_WAITING, SCRAPE_LLAMACPP},
    {"llamacpp:requests_processing", F_RUNNING, SCRAPE_LLAMACPP},
    {"llamacpp:prompt_tokens_total", F_PROMPT, SCRAPE_LLAMACPP},
    {"llamacpp:prompt_tokens_cached_total", F_CACHED, SCRAPE_LLAMACPP},
    {"sglang:num_queue_reqs", F_WAITING, SCRAPE_SGLANG},
    {"sglang:num_running_reqs", F_RUNNING, SCRAPE_SGLANG},
    {"sglang:token_usage", F_KV, SCRAPE_SGLANG},
    {"sglang:prompt_tokens_total", F_PROMPT, SCRAPE_SGLANG},
    {"sglang:cached_tokens_total", F_CACHED, SCRAPE_SGLANG},
    {"tgi_queue_size", F_WAITING, SCRAPE_TGI},
    {"tgi_batch_current_size", F_RUNNING, SCRAPE_TGI},
};
#define SCRAPE_NKNOWN ((int)(sizeof scrape_known / sizeof scrape_known[0]))

const char *scrape_server_name(enum scrape_server s)
{
    switch (s) {
    case SCRAPE_VLLM: return "vllm";
    case SCRAPE_LLAMACPP: return "llama.cpp";
    case SCRAPE_SGLANG: return "sglang";
    case SCRAPE_TGI: return "tgi";
    default: return "unknown";
    }
}

static bool scrape_name_start(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static bool scrape_name_char(unsigned char c)
{
    return scrape_name_start(c) || (c >= '0' && c <= '9');
}

static const char *scrape_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* A number token [p, end) as the format writes it (Go's ParseFloat: NaN,
 * +Inf, -Inf, exponents). */
static bool scrape_number(const char *p, const char *end, double *v)
{
    char buf[64];
    size_t n = (size_t)(end - p);
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, p, n);
    buf[n] = 0;
    char *stop;
    *v = strtod(buf, &stop);
    return stop == buf + n;
}

/* The label set {...} from p (at '{'); returns the position after '}', or
 * NULL when the line ends inside it or it is malformed. Values are skipped,
 * escapes included: a '\' takes the next character with it whatever it is
 * (\\, \" and \n are the format's; others are let through as Prometheus
 * does not). */
static const char *scrape_labels(const char *p, const char *end)
{
    p++;
    for (;;) {
        p = scrape_blanks(p, end);
        if (p == end)
            return NULL;
        if (*p == '}')
            return p + 1;
        if (!scrape_name_start((unsigned char)*p) || *p == ':')
            return NULL;
        while (p < end && scrape_name_char((unsigned char)*p) && *p != ':')
            p++;
        p = scrape_blanks(p, end);
        if (p == end || *p != '=')
            return NULL;
        p = scrape_blanks(p + 1, end);
        if (p == end || *p != '"')
            return NULL;
        for (p++;; p++) {
            if (p >= end)
                return NULL;
            if (*p == '\\') {
                p++;
                continue;
            }
            if (*p == '"')
                break;
        }
        p = scrape_blanks(p + 1, end);
        if (p == end)
            return NULL;
        if (*p == ',')
            p++;
        else if (*p != '}')
            return NULL;
    }
}

/* One sample line [p, end) (no line feed, no CR): its name and value.
 * false when it does not parse. */
static bool scrape_sample(const char *p, const char *end, const char **name, size_t *namelen,
                          double *value)
{
    if (!scrape_name_start((unsigned char)*p))
        return false;
    *name = p;
    while (p < end && scrape_name_char((unsigned char)*p))
        p++;
    *namelen = (size_t)(p - *name);
    const char *q = scrape_blanks(p, end);
    if (q < end && *q == '{') {
        p = scrape_labels(q, end);
        if (!p)
            return false;
    }
    q = scrape_blanks(p, end);
    if (q == p || q == end)     /* the value is separated by a blank */
        return false;
    p = q;
    while (q < end && *q != ' ' && *q != '\t')
        q++;
    if (!scrape_number(p, q, value))
        return false;
    p = scrape_blanks(q, end);
    if (p < end && *p != '#') {   /* a timestamp (OpenMetrics: it may be a float) */
        q = p;
        while (q < end && *q != ' ' && *q != '\t')
            q++;
        double ts;
        if (!scrape_number(p, q, &ts))
            return false;
        p = scrape_blanks(q, end);
    }
    return p == end || *p == '#';   /* '#': an OpenMetrics exemplar */
}

static int scrape_lookup(const char *name, size_t len)
{
    for (int i = 0; i < SCRAPE_NKNOWN; i++)
        if (strlen(scrape_known[i].name) == len && !memcmp(scrape_known[i].name, name, len))
            return i;
    return -1;
}

int scrape_parse(const char *text, size_t len, struct scrape_load *out)
{
    double sum[SCRAPE_NKNOWN];
    bool found[SCRAPE_NKNOWN] = {false};
    int good = 0, junk = 0;   /* lines that parse; non-blank ones that do not */
    const char *p = text, *end = text ? text + len : NULL;

    while (p && p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {   /* no line feed: cut short, not a line */
            junk += scrape_blanks(p, end) < end;
            break;
        }
        const char *le = nl;
        if (le > p && le[-1] == '\r')
            le--;
        const char *s = scrape_blanks(p, le);
        p = nl + 1;
        if (s == le)
            continue;
        if (*s == '#') {
            good++;
            continue;
        }
        const char *name;
        size_t namelen;
        double v;
        if (!scrape_sample(s, le, &name, &namelen, &v)) {
            junk++;
            continue;
        }
        good++;
        int k = scrape_lookup(name, namelen);
        if (k < 0 || !isfinite(v))
            continue;
        if (v < 0)
            v = 0;   /* none of these can be negative: a server's bug, read as none */
        if (!found[k])
            sum[k] = v;
        else if (scrape_known[k].field == F_KV)
            sum[k] = v > sum[k] ? v : sum[k];
        else
            sum[k] += v;
        found[k] = true;
    }

    double field[F_COUNT];
    enum scrape_server from[F_COUNT];
    for (int f = 0; f < F_COUNT; f++) {
        field[f] = -1;
        from[f] = SCRAPE_UNKNOWN;
    }
    int recognised = 0;
    for (int k = 0; k < SCRAPE_NKNOWN; k++) {
        if (!found[k] || !isfinite(sum[k]))
            continue;   /* finite samples whose sum overflowed: absent, as one not finite is */
        recognised++;
        enum scrape_field f = scrape_known[k].field;
        if (from[f] == SCRAPE_UNKNOWN) {
            field[f] = sum[k];
            from[f] = scrape_known[k].server;
        }
    }
    out->waiting = field[F_WAITING];
    out->running = field[F_RUNNING];
    out->kv_cache = field[F_KV];
    out->prompt_tokens = field[F_PROMPT];
    out->cached_prompt_tokens = field[F_CACHED];
    out->recognised = recognised;
    out->server = SCRAPE_UNKNOWN;
    for (int f = 0; f < F_COUNT && out->server == SCRAPE_UNKNOWN; f++)
        out->server = from[f];
    if (from[F_PROMPT] == SCRAPE_LLAMACPP)
        out->computed_prompt_tokens = field[F_PROMPT];
    else if (field[F_PROMPT] >= 0 && field[F_CACHED] >= 0)
        out->computed_prompt_tokens = fmax(0, field[F_PROMPT] - field[F_CACHED]);
    else
        out->computed_prompt_tokens = -1;
    return (good == 0 && junk > 0) || (!text && len) ? -1 : 0;
}
