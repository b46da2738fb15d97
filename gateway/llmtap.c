/* llmtap.c - see llmtap.h. */
#include "gateway/llmtap.h"

#include <string.h>

#include <jansson.h>

#include "common/sse.h"
#include "common/tokens.h"

void llmtap_init(struct llmtap *t) { memset(t, 0, sizeof *t); }

void llmtap_free(struct llmtap *t) { buf_free(&t->ev); }

void llmtap_reset(struct llmtap *t)
{
    buf_reset(&t->ev);
    t->scan = 0;
    t->skipping = t->usage_seen = false;
    t->oversized = 0;
    t->chunks = t->prompt_tokens = t->completion_tokens = 0;
}

/* The values of `key` (with its quotes) in an event's JSON, without
 * parsing it: each place where the key is followed by a colon, the first
 * byte of its value (or NULL when there is no more). A key's bytes with
 * both quotes bare followed by a colon cannot be inside a string (a quote
 * there is escaped), so every match is a key of some object. */
static const char *llmtap_next_value(const char **from, const char *end, const char *key,
                                     size_t klen)
{
    const char *p;
    while (*from < end && (p = memmem(*from, (size_t)(end - *from), key, klen))) {
        const char *v = p + klen;
        *from = v;
        while (v < end && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r'))
            v++;
        if (v == end || *v != ':')
            continue;
        for (v++; v < end && (*v == ' ' || *v == '\t' || *v == '\n' || *v == '\r'); v++)
            ;
        if (v < end)
            return v;
    }
    return NULL;
}

/* Whether some `key` in the event has a non-empty string value. */
static bool llmtap_has_text(const char *d, size_t len, const char *key)
{
    const char *from = d, *end = d + len, *v;
    size_t klen = strlen(key);
    while ((v = llmtap_next_value(&from, end, key, klen)))
        if (*v == '"' && v + 1 < end && v[1] != '"')
            return true;
    return false;
}

/* Whether the event has a `usage` that is not null: the one event a stream
 * is parsed for (llmtap_event). */
static bool llmtap_has_usage(const char *d, size_t len)
{
    const char *from = d, *end = d + len, *v;
    while ((v = llmtap_next_value(&from, end, "\"usage\"", 7)))
        if (!((size_t)(end - v) >= 4 && memcmp(v, "null", 4) == 0))
            return true;
    return false;
}

static void llmtap_usage(struct llmtap *t, json_t *usage)
{
    json_t *p = json_object_get(usage, "prompt_tokens");
    json_t *k = json_object_get(usage, "completion_tokens");
    if (!json_is_integer(p) && !json_is_integer(k))
        return;
    int64_t prompt = json_is_integer(p) ? json_integer_value(p) : 0;
    int64_t completion = json_is_integer(k) ? json_integer_value(k) : 0;
    if (!tokens_reported_ok(prompt) || !tokens_reported_ok(completion))
        return;   /* not believed: counted as if none came */
    t->usage_seen = true;
    t->prompt_tokens = prompt;
    t->completion_tokens = completion;
}

void llmtap_usage_of(struct llmtap *t, const char *body, size_t len)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    if (j)
        llmtap_usage(t, json_object_get(j, "usage"));
    json_decref(j);
}

/* One complete event (ev[0..len) with its blank line): counted, and
 * appended to out unless it is the usage event the client did not ask for. */
static void llmtap_event(struct llmtap *t, const char *ev, size_t len, int64_t now,
                         struct buf *out)
{
    struct buf data = {0};
    sse_event_data(ev, len, &data);   /* no room: read as no data, passed on as it is */
    bool pass = true, content = false;
    if (data.len && !(data.len == 6 && memcmp(data.data, "[DONE]", 6) == 0)) {
        /* Read without parsing (parsing every chunk was a fifth of
         * batchgate's CPU per streamed token): any non-empty content,
         * reasoning_content or text. Only the event with a usage is parsed. */
        content = llmtap_has_text(data.data, data.len, "\"content\"") ||
                  llmtap_has_text(data.data, data.len, "\"reasoning_content\"") ||
                  llmtap_has_text(data.data, data.len, "\"text\"") ||
                  /* a tool call's arguments, generated as text is (a tool-call
                   * stream was starting for ever and free) */
                  llmtap_has_text(data.data, data.len, "\"arguments\"") ||
                  llmtap_has_text(data.data, data.len, "\"refusal\"");
        json_t *j = llmtap_has_usage(data.data, data.len)
                        ? json_loadb(data.data, data.len, 0, NULL)
                        : NULL;
        json_t *usage = json_object_get(j, "usage");
        if (json_is_object(usage)) {
            llmtap_usage(t, usage);
            if (json_array_size(json_object_get(j, "choices")) == 0 && !t->want_usage)
                pass = false;   /* asked for by batchgate, not by the client */
        }
        json_decref(j);
    }
    if (content) {
        t->chunks++;
        if (t->on_content)
            t->on_content(t->arg, now);
    }
    buf_free(&data);
    if (pass)
        buf_append(out, ev, len);
}

int llmtap_feed(struct llmtap *t, const char *data, size_t len, int64_t now_ns, struct buf *out)
{
    if (buf_append(&t->ev, data, len) < 0)
        return -1;
    /* Searched from where the last search ended (an end may straddle the
     * pieces: SSE_END_BACK bytes back), so a large event fed in small pieces costs
     * its length once, not its length squared. */
    size_t at = 0, end, from = t->scan;
    while ((end = sse_event_end(t->ev.data, t->ev.len, from)) > 0) {
        if (t->skipping)   /* the end of an oversized event: passed on as it came */
            buf_append(out, t->ev.data + at, end - at);
        else
            llmtap_event(t, t->ev.data + at, end - at, now_ns, out);
        t->skipping = false;
        at = from = end;
    }
    if (at) {
        memmove(t->ev.data, t->ev.data + at, t->ev.len - at);
        t->ev.len -= at;
    }
    t->scan = t->ev.len >= SSE_END_BACK ? t->ev.len - SSE_END_BACK : 0;
    if (t->skipping || t->ev.len > LLMTAP_EVENT_MAX) {
        /* An event too large to hold (a server echoing a long prompt): it
         * passes as it comes, unread but for one chunk of content (it was
         * counted for nothing), and reading goes on after it. Reading off
         * for the rest of the stream made the rest free and passed on the
         * usage event the client had not asked for. Its last bytes stay:
         * its end may straddle pieces. */
        if (!t->skipping) {
            t->skipping = true;
            t->oversized++;
            t->chunks++;
            if (t->on_content)
                t->on_content(t->arg, now_ns);
        }
        size_t keep = t->ev.len < SSE_END_BACK ? t->ev.len : SSE_END_BACK;
        buf_append(out, t->ev.data, t->ev.len - keep);
        memmove(t->ev.data, t->ev.data + t->ev.len - keep, keep);
        t->ev.len = keep;
        t->scan = 0;
    }
    return 0;
}

void llmtap_end(struct llmtap *t, struct buf *out)
{
    buf_append(out, t->ev.data, t->ev.len);
    buf_reset(&t->ev);
    t->scan = 0;
}
