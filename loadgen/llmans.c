/* llmans.c - see llmans.h. */
#include "loadgen/llmans.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

void llmans_init(struct llmans *a)
{
    memset(a, 0, sizeof *a);
    a->prompt_tokens = a->completion_tokens = -1;
}

void llmans_free(struct llmans *a)
{
    buf_free(&a->line);
    buf_free(&a->data);
    free(a->gaps);
    llmans_init(a);
}

void llmans_begin(struct llmans *a, bool stream)
{
    a->stream = stream;
    a->first_ns = a->last_ns = 0;
    a->chunks = 0;
    a->prompt_tokens = a->completion_tokens = -1;
    a->done = false;
    a->failed = NULL;
    a->cr = a->has_data = false;
    a->ngaps = 0;
    buf_reset(&a->line);
    buf_reset(&a->data);
    /* A long answer's buffers are not kept for the connection's next one. */
    buf_shrink(&a->line, 65536);
    buf_shrink(&a->data, 65536);
}

static void llmans_fail(struct llmans *a, const char *why)
{
    if (!a->failed)
        a->failed = why;
}

static const char *llmans_string(json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s && s[0] ? s : NULL;
}

/* Does a chunk's (or a whole answer's) choice carry text? Chat deltas
 * (stream), chat messages (whole) and completions' text alike. */
static bool llmans_has_content(json_t *root)
{
    json_t *choices = json_object_get(root, "choices");
    size_t i;
    json_t *c;
    json_array_foreach(choices, i, c) {
        json_t *m = json_object_get(c, "delta");
        if (!json_is_object(m))
            m = json_object_get(c, "message");
        if (json_is_object(m) &&
            (llmans_string(m, "content") || llmans_string(m, "reasoning_content")))
            return true;
        if (llmans_string(c, "text"))
            return true;
    }
    return false;
}

static void llmans_usage(struct llmans *a, json_t *root)
{
    json_t *u = json_object_get(root, "usage");
    if (!json_is_object(u))
        return;   /* null in every chunk but the last with include_usage */
    json_t *p = json_object_get(u, "prompt_tokens"), *c = json_object_get(u, "completion_tokens");
    if (json_is_integer(p) && json_integer_value(p) >= 0)
        a->prompt_tokens = json_integer_value(p);
    if (json_is_integer(c) && json_integer_value(c) >= 0)
        a->completion_tokens = json_integer_value(c);
}

/* One complete event's data. */
static void llmans_event(struct llmans *a, const char *d, size_t n, int64_t now)
{
    if (a->done)
        return;   /* nothing after [DONE] is read */
    if (n == 6 && memcmp(d, "[DONE]", 6) == 0) {
        a->done = true;
        return;
    }
    json_t *root = json_loadb(d, n, 0, NULL);
    if (!json_is_object(root)) {
        llmans_fail(a, "an event that is not a JSON object");
    } else if (json_object_get(root, "error") && !json_is_null(json_object_get(root, "error"))) {
        llmans_fail(a, "an error event");
    } else {
        llmans_usage(a, root);
        if (llmans_has_content(root)) {
            if (a->chunks > 0 && a->ngaps < LLMANS_GAPS_MAX) {
                if (a->ngaps == a->capgaps) {
                    size_t cap = a->capgaps ? a->capgaps * 2 : 256;
                    int64_t *g = realloc(a->gaps, cap * sizeof *g);
                    if (g) {
                        a->gaps = g;
                        a->capgaps = cap;
                    }
                }
                if (a->ngaps < a->capgaps)
                    a->gaps[a->ngaps++] = now - a->last_ns;
            }
            if (a->chunks == 0)
                a->first_ns = now;
            a->last_ns = now;
            a->chunks++;
        }
    }
    json_decref(root);
}

static void llmans_dispatch(struct llmans *a, int64_t now)
{
    if (a->has_data)
        llmans_event(a, a->data.data ? a->data.data : "", a->data.len, now);
    buf_reset(&a->data);
    a->has_data = false;
}

/* One whole line (without its end). SSE: an empty line ends the event;
 * "data:" lines (one space after the colon dropped) are its data, joined
 * by \n; comments (":...") and other fields (event, id, retry) are not
 * needed to time tokens. */
static void llmans_line(struct llmans *a, int64_t now)
{
    const char *l = a->line.data ? a->line.data : "";
    size_t n = a->line.len;
    if (n == 0) {
        llmans_dispatch(a, now);
        return;
    }
    if (n >= 5 && memcmp(l, "data:", 5) == 0) {
        const char *v = l + 5;
        size_t vn = n - 5;
        if (vn > 0 && v[0] == ' ')
            v++, vn--;
        if (a->has_data)
            buf_append(&a->data, "\n", 1);
        buf_append(&a->data, v, vn);
        a->has_data = true;
    } else if (n == 4 && memcmp(l, "data", 4) == 0) {
        if (a->has_data)
            buf_append(&a->data, "\n", 1);
        a->has_data = true;
    }
}

void llmans_feed(struct llmans *a, const char *p, size_t n, int64_t now)
{
    if (a->failed)
        return;
    if (!a->stream) {
        if (a->data.len + n > LLMANS_BODY_MAX)
            llmans_fail(a, "a body over 16 MiB");
        else if (buf_append(&a->data, p, n) < 0)
            llmans_fail(a, "out of memory");
        return;
    }
    size_t i = 0;
    while (i < n && !a->failed) {
        if (a->cr && p[i] == '\n') {   /* the \n of a \r\n */
            a->cr = false;
            i++;
            continue;
        }
        a->cr = false;
        size_t j = i;
        while (j < n && p[j] != '\n' && p[j] != '\r')
            j++;
        if (a->line.len + a->data.len + (j - i) > LLMANS_EVENT_MAX) {
            llmans_fail(a, "an event over 1 MiB");
            return;
        }
        if (buf_append(&a->line, p + i, j - i) < 0) {
            llmans_fail(a, "out of memory");
            return;
        }
        if (j == n)
            return;   /* the line goes on in the next piece */
        a->cr = p[j] == '\r';
        llmans_line(a, now);
        buf_reset(&a->line);
        i = j + 1;
    }
}

int llmans_end(struct llmans *a, int64_t now)
{
    if (a->failed)
        return -1;
    if (a->stream) {
        /* A last event without its blank line (the body ended right after
         * it) is read, not dropped: only [DONE] decides. */
        if (a->line.len > 0) {
            llmans_line(a, now);
            buf_reset(&a->line);
        }
        llmans_dispatch(a, now);
        if (!a->failed && !a->done)
            llmans_fail(a, "a stream that ended before data: [DONE]");
        return a->failed ? -1 : 0;
    }
    json_t *root = json_loadb(a->data.data ? a->data.data : "", a->data.len, 0, NULL);
    if (!json_is_object(root) || !json_is_array(json_object_get(root, "choices"))) {
        llmans_fail(a, json_is_object(root) && json_object_get(root, "error")
                           ? "an error body"
                           : "a body that is not a completion");
    } else {
        llmans_usage(a, root);
        if (llmans_has_content(root)) {
            a->chunks = 1;
            a->first_ns = a->last_ns = now;
        }
    }
    json_decref(root);
    return a->failed ? -1 : 0;
}

void llmans_stats_reset(struct llmans_stats *s)
{
    memset(s, 0, sizeof *s);
    hist_reset(&s->ttft);
    hist_reset(&s->itl);
    hist_reset(&s->tpot);
    hist_reset(&s->e2e);
}

void llmans_stats_record(struct llmans_stats *s, const struct llmans *a, int64_t intended,
                         int64_t end)
{
    int64_t e2e = end - intended;
    /* Whole answers, and streams that carried no content: the first token
     * is known only at the end. */
    int64_t ttft = a->stream && a->chunks > 0 ? a->first_ns - intended : e2e;
    int64_t out = a->completion_tokens >= 0 ? a->completion_tokens : (int64_t)a->chunks;
    s->requests++;
    s->output_tokens += (uint64_t)out;
    if (a->prompt_tokens > 0)
        s->prompt_tokens += (uint64_t)a->prompt_tokens;
    hist_record(&s->e2e, e2e);
    hist_record(&s->ttft, ttft);
    if (!a->stream)
        return;   /* no token timing in a whole answer */
    for (size_t i = 0; i < a->ngaps; i++)
        hist_record(&s->itl, a->gaps[i]);
    if (out > 1)
        hist_record(&s->tpot, (e2e - ttft) / (out - 1));
}

void llmans_stats_broken(struct llmans_stats *s, const char *why)
{
    if (!s->broken++)
        snprintf(s->first_broken, sizeof s->first_broken, "%s", why);
}

void llmans_stats_merge(struct llmans_stats *dst, const struct llmans_stats *src)
{
    hist_merge(&dst->ttft, &src->ttft);
    hist_merge(&dst->itl, &src->itl);
    hist_merge(&dst->tpot, &src->tpot);
    hist_merge(&dst->e2e, &src->e2e);
    dst->requests += src->requests;
    dst->prompt_tokens += src->prompt_tokens;
    dst->output_tokens += src->output_tokens;
    if (!dst->broken && src->broken)
        snprintf(dst->first_broken, sizeof dst->first_broken, "%s", src->first_broken);
    dst->broken += src->broken;
}
