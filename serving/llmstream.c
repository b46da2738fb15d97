/* llmstream.c - see llmstream.h. The events are cut and read by
 * common/sse.h; an event left without its blank line at the end was cut
 * and is not read. */
#include "serving/llmstream.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/sse.h"

struct ls_choice {
    bool seen;
    char *role;                  /* chat: the first delta's role */
    struct buf text;
    json_t *finish;              /* finish_reason, a string once the choice ended; NULL before */
};

struct ls_state {
    bool chat, done;
    json_t *first;               /* the first chunk: id, created, model, system_fingerprint */
    json_t *usage;
    struct ls_choice c[LLMSTREAM_CHOICES_MAX];
    int nchoices;                /* highest index seen + 1 */
};

static void ls_free(struct ls_state *s)
{
    json_decref(s->first);
    json_decref(s->usage);
    for (int i = 0; i < s->nchoices; i++) {
        free(s->c[i].role);
        buf_free(&s->c[i].text);
        json_decref(s->c[i].finish);
    }
}

/* One chunk object of the stream. */
static int ls_chunk(struct ls_state *s, json_t *o, struct error *err)
{
    json_t *e = json_object_get(o, "error");
    if (e) {
        const char *m = json_string_value(json_object_get(e, "message"));
        return error_set(err, BG_EINVAL, "the server's stream carried an error: %.300s",
                         m ? m : (json_is_string(e) ? json_string_value(e) : "(no message)"));
    }
    if (!s->first)
        s->first = json_incref(o);
    json_t *u = json_object_get(o, "usage");
    if (json_is_object(u)) {
        json_decref(s->usage);
        s->usage = json_incref(u);
    }
    json_t *choices = json_object_get(o, "choices");
    size_t i;
    json_t *ch;
    json_array_foreach(choices, i, ch) {
        json_t *ix = json_object_get(ch, "index");
        json_int_t k = ix ? json_integer_value(ix) : 0;
        if ((ix && !json_is_integer(ix)) || k < 0 || k >= LLMSTREAM_CHOICES_MAX)
            return error_set(err, BG_EINVAL,
                             "a chunk's choice index is not an integer in 0..%d",
                             LLMSTREAM_CHOICES_MAX - 1);
        struct ls_choice *c = &s->c[k];
        c->seen = true;
        if (k >= s->nchoices)
            s->nchoices = (int)k + 1;
        const char *piece = NULL;
        if (s->chat) {
            json_t *d = json_object_get(ch, "delta");
            const char *role = json_string_value(json_object_get(d, "role"));
            if (role && !c->role && !(c->role = strdup(role)))
                return error_set(err, BG_ENOMEM, "out of memory");
            piece = json_string_value(json_object_get(d, "content"));
        } else {
            piece = json_string_value(json_object_get(ch, "text"));
        }
        if (piece && buf_append(&c->text, piece, strlen(piece)) < 0)
            return error_set(err, BG_ENOMEM, "out of memory");
        json_t *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(fr)) {
            json_decref(c->finish);
            c->finish = json_incref(fr);
        }
    }
    return 0;
}

static int ls_event(struct ls_state *s, const struct buf *data, struct error *err)
{
    if (s->done)
        return 0;   /* nothing after [DONE] counts */
    if (data->len == 6 && !memcmp(data->data, "[DONE]", 6)) {
        s->done = true;
        return 0;
    }
    json_error_t je;
    json_t *o = json_loadb(data->data ? data->data : "", data->len, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return error_set(err, BG_EINVAL, "an event of the server's stream is not a JSON object");
    }
    int rc = ls_chunk(s, o, err);
    json_decref(o);
    return rc;
}

static json_t *ls_string(const struct buf *b)
{
    return json_stringn(b->data ? b->data : "", b->len);
}

static int ls_build(struct ls_state *s, struct buf *out, struct error *err)
{
    json_t *r = json_object(), *choices = json_array();
    if (!r || !choices) {
        json_decref(r);
        json_decref(choices);
        return error_set(err, BG_ENOMEM, "out of memory");
    }
    /* The first chunk's fields, in the whole answer's order ("object" its own). */
    static const char *const keep[] = {"id", "object", "created", "model", "system_fingerprint"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        json_t *v = i == 1 ? json_string(s->chat ? "chat.completion" : "text_completion")
                           : json_incref(json_object_get(s->first, keep[i]));
        if (v)
            json_object_set_new(r, keep[i], v);
    }
    for (int i = 0; i < s->nchoices; i++) {
        struct ls_choice *c = &s->c[i];
        if (!c->seen)
            continue;
        json_t *ch = json_object();
        json_object_set_new(ch, "index", json_integer(i));
        if (s->chat) {
            json_t *m = json_object();
            json_object_set_new(m, "role", json_string(c->role ? c->role : "assistant"));
            json_object_set_new(m, "content", ls_string(&c->text));
            json_object_set_new(ch, "message", m);
        } else {
            json_object_set_new(ch, "text", ls_string(&c->text));
        }
        json_object_set_new(ch, "logprobs", json_null());
        json_object_set(ch, "finish_reason", c->finish ? c->finish : json_null());
        json_array_append_new(choices, ch);
    }
    json_object_set_new(r, "choices", choices);
    if (s->usage)
        json_object_set(r, "usage", s->usage);
    char *text = json_dumps(r, JSON_COMPACT);
    json_decref(r);
    if (!text || buf_append(out, text, strlen(text)) < 0) {
        free(text);
        return error_set(err, BG_ENOMEM, "out of memory");
    }
    free(text);
    return 0;
}

int llmstream_assemble(const char *sse, size_t len, bool chat, struct buf *out,
                       struct error *err)
{
    struct ls_state *s = calloc(1, sizeof *s);
    if (!s)
        return error_set(err, BG_ENOMEM, "out of memory");
    s->chat = chat;
    struct buf data = BUF_INIT;
    int rc = 0;
    size_t at = 0, end;
    while (rc == 0 && (end = sse_event_end(sse, len, at)) > 0) {
        buf_reset(&data);
        int got = sse_event_data(sse + at, end - at, &data);
        if (got < 0)
            rc = error_set(err, BG_ENOMEM, "out of memory");
        else if (got)
            rc = ls_event(s, &data, err);
        at = end;
    }
    buf_free(&data);
    if (rc == 0 && s->nchoices == 0)
        rc = error_set(err, BG_EINVAL, "the server's stream carried no choice");
    for (int i = 0; rc == 0 && !s->done && i < s->nchoices; i++)
        if (s->c[i].seen && !s->c[i].finish)
            rc = error_set(err, BG_EINVAL,
                           "the server's stream ended before [DONE] with choice %d unfinished",
                           i);
    if (rc == 0)
        rc = ls_build(s, out, err);
    ls_free(s);
    free(s);
    return rc;
}
