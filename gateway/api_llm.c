/* api_llm.c - OpenAI's routes in front of LLM pools (docs/LLM.md):
 * POST /v1/chat/completions, /v1/completions and /v1/embeddings routed by
 * the body's `model` (a pool's name or alias; /v1/embeddings also reaches
 * batchgate's own encoders), GET /v1/models and /v1/models/{model}.
 *
 * A call, on the request's IO thread:
 *
 *   body --llm_prepare--> model resolved, priority, prefix hashes, body
 *                         rewritten (the servers' model name; a stream asks
 *                         for its usage)
 *        --llm_try------> llmpool_pick: an endpoint; proxy_forward_tapped
 *   head --llm_tap_head-> a 5xx or 404 while nothing reached the client: refused,
 *                         and llm_tap_end tries another endpoint
 *   body --llm_tap_body-> a stream's events passed on one by one as they
 *                         complete (the usage event only to a client that
 *                         asked for it), each timed: first token,
 *                         inter-token gaps
 *   end  --llm_tap_end--> tokens counted; the endpoint's call ends
 *
 * The reverse proxy (proxy.h) carries the bytes: connections, timers,
 * back-pressure, and a client that hangs up closing the server's
 * connection, which stops its generation. */
#include "gateway/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <event2/event.h>
#include <jansson.h>

#include "common/buf.h"
#include "common/jsonfmt.h"
#include "common/clock.h"
#include "common/httpc.h"
#include "common/log.h"
#include "gateway/admit.h"
#include "gateway/auth.h"
#include "gateway/llmtap.h"
#include "gateway/proxy.h"
#include "serving/llmbody.h"
#include "serving/llmpool.h"
#include "serving/picker.h"
#include "serving/serving.h"

/* Leading blocks of a prompt remembered for prefix affinity. */
#define LLM_BLOCKS_MAX 128
/* A non-streamed answer is read for its usage up to this size. */
#define LLM_KEEP_MAX (4u << 20)

enum llm_api { LLM_CHAT, LLM_COMPLETIONS, LLM_EMBEDDINGS };
static const char *const llm_paths[] = {"/v1/chat/completions", "/v1/completions",
                                        "/v1/embeddings"};

/* What a call that names no cap on its completion reserves of its
 * tenant's token quota, and, for a tenant with one, the cap it is sent
 * with (llm_route). */
#define LLM_DEFAULT_MAX_TOKENS 256

struct llm_call {
    struct api_state *st;
    struct http_request *req;
    struct served_model *sm;          /* held until the call ends */
    struct llmpool *pool;
    enum llm_api api;
    int tenant;
    int e;                            /* the endpoint of the try in progress; -1 none */
    int tried[8];                     /* the endpoints tried (model_pool.tries <= 8) */
    unsigned not_found;               /* bit k: tried[k] answered 404 (llmpool_found_elsewhere) */
    int tries;
    char *body;                       /* rewritten, json_dumps'; sent with each try */
    size_t len;
    uint64_t blocks[LLM_BLOCKS_MAX];
    int nblocks;
    bool stream;
    bool streaming;                   /* this answer is an event stream we read */
    bool starting;                    /* streamed, sent, no content yet (llmpool_started) */
    bool gap_aborted;                 /* the client left between two tries */
    int64_t t0;                       /* the request's arrival */
    int64_t t_try;                    /* the try in progress's start (now_ns); 0: none */
    int64_t t_first, t_last;          /* the first and latest chunks with content */
    int status;
    struct llmtap tap;                /* the stream read on its way (llmtap.h) */
    struct buf keep;                  /* a whole answer, for its usage */
    char last_fail[300];              /* the last try's failure, for the answer */
    bool admitted;                    /* holds a place of the tenant's (admit.h) */
    int64_t estimate;                 /* tokens reserved against the tenant's quotas; 0 none */
    int64_t prompt_estimate;          /* the prompt's share of it (bytes / 4) */
    int64_t out_estimate;             /* the most it may generate (max_tokens, else
                                         LLM_DEFAULT_MAX_TOKENS) */
    int64_t used;                     /* tokens the answer counted */
};

/* Endpoints one call may try while nothing reached its client. */
static int llm_tries_max(const struct llm_call *c)
{
    int n = llmpool_size(c->pool), t = c->sm->model.cfg.pool.tries;
    return t < n ? t : n;
}

static void llm_call_free(struct llm_call *c)
{
    if (c->estimate)
        admit_tokens_leave(c->st->admit, c->tenant, c->estimate, c->used, now_ns(), time(NULL));
    if (c->admitted)
        admit_leave(c->st->admit, c->tenant);
    if (c->sm)
        served_release(c->sm);
    free(c->body);
    llmtap_free(&c->tap);
    buf_free(&c->keep);
    free(c);
}

/* ---- finding the pool ---- */

/* The model a request names (a pool by name or alias, or any model by
 * name), held; NULL when none. */
static struct served_model *llm_find(struct api_state *st, const char *name)
{
    if (!st->serving)
        return NULL;
    struct served_model *named = serving_acquire(st->serving, name, strlen(name));
    /* A model that failed to load does not hide a pool's alias (a folder
     * named like one is refused at load: served_names_check). */
    if (named && atomic_load(&named->state) != SERVED_FAILED)
        return named;
    int n = serving_count(st->serving);
    for (int i = 0; i < n; i++) {
        struct served_model *sm = serving_acquire_at(st->serving, i);
        if (sm && sm != named && sm->model.cfg.kind == MODEL_KIND_POOL &&
            model_config_answers_to(&sm->model.cfg, name)) {
            if (named)
                served_release(named);
            return sm;
        }
        if (sm)
            served_release(sm);
    }
    return named;
}

/* ---- the request ---- */

/* SPEC: tenant default, X-Priority, or service_tier (priority > default >
 * flex); -1, answered 400, for a value none of them names (it counted as
 * default, so a typo of "flex" escaped shedding). */
static int llm_priority_of(struct api_state *st, struct http_request *req, json_t *root)
{
    size_t n;
    const char *h = http_request_header(req, "X-Priority", &n);
    json_t *tier = json_object_get(root, "service_tier");
    if (!h && tier && !json_is_null(tier) && !json_is_string(tier)) {
        http_request_set_error_param(req, "service_tier");
        http_respond_error(req, 400, NULL, "service_tier: must be a string");
        return -1;
    }
    const char *v = h ? NULL : json_string_value(tier);
    char buf[32] = "";
    if (h) {
        snprintf(buf, sizeof buf, "%.*s", (int)(n < sizeof buf - 1 ? n : sizeof buf - 1), h);
        v = n < sizeof buf ? buf : "";
    }
    if (!v || strcasecmp(v, "auto") == 0) {
        const struct tenants_config *tc = st->auth ? auth_tenants(st->auth) : NULL;
        int t = auth_tenant(req);
        return tc && t >= 0 && t < tc->n ? (enum llm_priority)tc->t[t].llm_priority
                                         : LLM_PRIO_DEFAULT;
    }
    if (strcasecmp(v, "priority") == 0 || strcasecmp(v, "high") == 0)
        return LLM_PRIO_HIGH;
    if (strcasecmp(v, "flex") == 0 || strcasecmp(v, "low") == 0)
        return LLM_PRIO_LOW;
    /* OpenAI's "scale" is a default tier of its own. */
    if (strcasecmp(v, "default") == 0 || (!h && strcasecmp(v, "scale") == 0))
        return LLM_PRIO_DEFAULT;
    if (!h)
        http_request_set_error_param(req, "service_tier");
    http_respond_error(req, 400, NULL, h ? "X-Priority: \"%s\" is not a priority (high or "
                                           "priority, default, low or flex, auto)"
                                         : "service_tier: \"%s\" is not a tier (auto, "
                                           "default, flex, scale, priority)", v);
    return -1;
}

/* The fields that decide how a call is streamed and counted (llmbody.h):
 * 0, or -1 answered 400 in OpenAI's shape naming the field. */
static int llm_check_fields(struct http_request *req, json_t *root)
{
    char param[32];
    struct error err = {0};
    if (llmbody_check(root, param, sizeof param, &err) == 0)
        return 0;
    http_request_set_error_param(req, param);
    http_respond_error(req, 400, NULL, "%s", err.msg);
    return -1;
}

/* The prompt's text as the servers see its start: each message's role and
 * text, or the completion's prompt; what prefix affinity hashes. */
static void llm_prompt_text(enum llm_api api, json_t *root, struct buf *out)
{
    if (api == LLM_CHAT) {
        size_t i;
        json_t *msg;
        json_array_foreach(json_object_get(root, "messages"), i, msg) {
            const char *role = json_string_value(json_object_get(msg, "role"));
            json_t *content = json_object_get(msg, "content");
            buf_appendf(out, "%s\n", role ? role : "");
            if (json_is_string(content)) {
                buf_append(out, json_string_value(content), json_string_length(content));
            } else {
                size_t k;
                json_t *part;
                json_array_foreach(content, k, part) {
                    json_t *t = json_object_get(part, "text");
                    if (json_is_string(t))
                        buf_append(out, json_string_value(t), json_string_length(t));
                }
            }
            buf_append(out, "\n", 1);
            if (out->len >= (size_t)LLM_BLOCKS_MAX * PICKER_BLOCK_BYTES)
                break;
        }
        return;
    }
    json_t *p = json_object_get(root, "prompt");
    if (json_is_array(p))
        p = json_array_get(p, 0);
    if (json_is_string(p))
        buf_append(out, json_string_value(p), json_string_length(p));
    else if (json_is_string(json_object_get(root, "input")))
        buf_append(out, json_string_value(json_object_get(root, "input")),
                   json_string_length(json_object_get(root, "input")));
}

static void llm_try(struct llm_call *c);

/* The servers' names for the cap on a completion (llama-server reads
 * n_predict too). */
static const char *const llm_caps[] = {"max_completion_tokens", "max_tokens", "n_predict"};

/* For a tenant with a token quota: the call sent with a cap the server
 * holds to. A cap that is none (null; 0 or less: llama-server's n_predict
 * -1 is "no end") is taken out, and with no cap left the call is sent
 * with what it reserved. Kept, "max_tokens": null or "n_predict": -1
 * beside a small max_tokens generated without end on a reservation of
 * 256 or 5 (re-test of the first version, which took any field given for
 * a cap). */
static void llm_cap(json_t *root)
{
    bool capped = false;
    for (size_t k = 0; k < sizeof llm_caps / sizeof llm_caps[0]; k++) {
        json_t *m = json_object_get(root, llm_caps[k]);
        if (!m)
            continue;
        if (json_is_integer(m) && json_integer_value(m) > 0)
            capped = true;
        else
            json_object_del(root, llm_caps[k]);
    }
    if (!capped)
        json_object_set_new(root, "max_tokens", json_integer(LLM_DEFAULT_MAX_TOKENS));
}

/* Tokens a call may take, before its usage is known: its prompt's bytes / 4
 * (English runs about 4 bytes a token) and the most it may generate. */
static int64_t llm_estimate(enum llm_api api, json_t *root, int64_t *prompt)
{
    size_t bytes = 0;
    int64_t prompts = 1;
    size_t i;
    json_t *v;
    if (api == LLM_CHAT) {
        json_array_foreach(json_object_get(root, "messages"), i, v) {
            json_t *content = json_object_get(v, "content");
            if (json_is_string(content)) {
                bytes += json_string_length(content);
            } else {
                size_t k;
                json_t *part;
                json_array_foreach(content, k, part)
                    bytes += json_string_length(json_object_get(part, "text"));
            }
            bytes += 16;   /* the template's tokens around each message */
        }
    } else {
        json_t *p = json_object_get(root, api == LLM_EMBEDDINGS ? "input" : "prompt");
        if (json_is_string(p))
            bytes = json_string_length(p);
        /* A list of strings, or of token-id lists, is as many prompts, each
         * generated for; a list of ids is one prompt, a token each. */
        json_array_foreach(p, i, v) {
            if (json_is_string(v)) {
                bytes += json_string_length(v);
                prompts += i > 0;
            } else if (json_is_array(v)) {
                bytes += 4 * json_array_size(v);
                prompts += i > 0;
            } else {
                bytes += 4;
            }
        }
    }
    int64_t out = 0;
    if (api != LLM_EMBEDDINGS) {
        /* The most any of the servers' names for it allows (llama-server
         * reads n_predict too). */
        for (size_t k = 0; k < sizeof llm_caps / sizeof llm_caps[0]; k++) {
            json_t *m = json_object_get(root, llm_caps[k]);
            if (json_is_integer(m) && json_integer_value(m) > out)
                out = json_integer_value(m);
        }
        out = out > 0 ? out : LLM_DEFAULT_MAX_TOKENS;
        int64_t choices = 1;
        static const char *const many[] = {"n", "best_of"};
        for (size_t k = 0; k < sizeof many / sizeof many[0]; k++) {
            json_t *m = json_object_get(root, many[k]);
            if (json_is_integer(m) && json_integer_value(m) > choices)
                choices = json_integer_value(m);
        }
        /* At most 2^30 x 128 x the prompts a body holds: far from int64's end. */
        out *= choices * prompts;
    }
    *prompt = (int64_t)(bytes + 3) / 4;
    return *prompt + out;
}

/* ---- the answer ---- */

static int llm_tap_head(void *arg, const struct httpc_head *h, struct buf *headers)
{
    struct llm_call *c = arg;
    c->status = h->status;
    /* A server error while the client has nothing yet: another endpoint.
     * A 404 too, as the pool's model may not be on that endpoint (it
     * answered in a millisecond, looked idle to the picker and its 404
     * reached the client), but blaming nobody: the request may be what
     * no endpoint serves (embeddings on a chat pool), and blamed, a
     * client's own 404s took every endpoint out (the re-test): only once
     * another endpoint answers the request is the 404 its endpoint's. The
     * last one that can be tried passes its 404 on (a 502 said "answered
     * 404"). */
    bool again = h->status >= 500 ||
                 (h->status == 404 && llmpool_has_untried(c->pool, c->tried, c->tries));
    if (again && c->tries < llm_tries_max(c)) {
        if (h->status == 404)
            c->not_found |= 1u << (c->tries - 1);
        return 1;
    }
    if (h->status >= 200 && h->status < 300 && c->not_found)
        llmpool_found_elsewhere(c->pool, c->tried, c->tries, c->not_found);
    bool sse = false;
    for (int i = 0; i < h->nhdrs; i++)
        if (h->hdrs[i].name_len == 12 && strncasecmp(h->hdrs[i].name, "Content-Type", 12) == 0)
            sse = h->hdrs[i].value_len >= 17 &&
                  strncasecmp(h->hdrs[i].value, "text/event-stream", 17) == 0;
    c->streaming = sse && h->status == 200;
    buf_appendf(headers, "X-Batchgate-Endpoint: %d\r\n", c->e);
    return 0;
}

/* The try's first content came back (its prompt is held there now), or
 * it ended without any: no longer starting at c->e. Once a try. */
static void llm_started(struct llm_call *c, bool content)
{
    if (!c->starting)
        return;
    c->starting = false;
    llmpool_started(c->pool, c->e, content ? c->blocks : NULL, content ? c->nblocks : 0);
}

/* llmtap's: an event with generated text passed at `now`. */
static void llm_on_content(void *arg, int64_t now)
{
    struct llm_call *c = arg;
    llm_started(c, true);
    if (!c->t_first) {
        c->t_first = now;
        llmpool_ttft(c->pool, c->e, c->tenant, now - c->t0);
    } else {
        llmpool_itl(c->pool, c->e, now - c->t_last);
    }
    c->t_last = now;
}

static int llm_tap_body(void *arg, const char *data, size_t len, struct buf *out)
{
    struct llm_call *c = arg;
    if (!c->streaming) {
        if (data && len) {
            buf_append(out, data, len);
            if (c->status == 200 && c->keep.len + len <= LLM_KEEP_MAX)
                buf_append(&c->keep, data, len);
        }
        return 0;
    }
    if (!data) {   /* the end */
        llmtap_end(&c->tap, out);
        return 0;
    }
    int was = c->tap.oversized;
    if (llmtap_feed(&c->tap, data, len, now_ns(), out) < 0)
        return -1;
    if (c->tap.oversized == 1 && was == 0)   /* once an answer */
        log_warn("model %s: endpoint %s sent an event over %u bytes; it passes unread (one "
                 "chunk of content)", c->sm->model.cfg.name,
                 httpc_target_url(llmpool_target(c->pool, c->e)), LLMTAP_EVENT_MAX);
    return 0;
}

static void llm_retry_cb(evutil_socket_t fd, short what, void *arg)
{
    struct llm_call *c = arg;
    (void)fd;
    (void)what;
    http_request_on_abort(c->req, NULL, NULL);
    if (c->gap_aborted) {
        http_respond_error(c->req, 502, NULL, "client gone");   /* discarded */
        llm_call_free(c);
        return;
    }
    llm_try(c);
}

static void llm_gap_abort(struct http_request *req, void *arg)
{
    struct llm_call *c = arg;
    (void)req;
    c->gap_aborted = true;
}

/* The pool's statistics (requests_total, /v2/models/{pool}/stats) and the
 * tenant's use of it (the usage ledger: rows of a pool are tokens). */
static void llm_account(struct llm_call *c, int status)
{
    int64_t now = now_ns();
    api_count_request(c->st, c->sm, c->req, status, now - c->t0, -1, NULL);
    /* Its time went to the tenant try by try (llm_try, llm_try_end). A
     * call no endpoint took (none usable: 503) used no server, and is no
     * request of the ledger's (it was endpoint 0's, with no tokens). */
    if (c->e >= 0)
        modelstats_call(c->sm->stats, c->e, c->tenant, false, c->used);
}

/* The call's tokens: the server's usage, else a stream's content chunks
 * and the prompt's estimate (a stream cut short, or a client that left,
 * still used the server: its tokens count toward the tenant's quotas); a
 * 2xx answer not streamed, with no usage to believe (none, or outside
 * common/tokens.h's range), counts the most it could have generated. */
static void llm_count(struct llm_call *c)
{
    struct llmtap *t = &c->tap;
    if (!c->streaming && c->keep.len)
        llmtap_usage_of(t, c->keep.data, c->keep.len);
    int64_t prompt = t->usage_seen ? t->prompt_tokens : c->prompt_estimate;
    bool answered_whole = !c->streaming && c->status >= 200 && c->status < 300;
    int64_t completion = t->usage_seen ? t->completion_tokens
                         : answered_whole ? c->out_estimate
                                          : t->chunks;
    llmpool_tokens(c->pool, c->e, c->tenant, prompt, completion);
    c->used = prompt + completion;
}

/* The try in progress at c->e ended, whichever way. */
static void llm_try_end(struct llm_call *c)
{
    llm_started(c, false);
    llmpool_end(c->pool, c->e);
    if (c->t_try) {
        modelstats_call_end(c->sm->stats, c->e, c->tenant, false, c->t_try);
        c->t_try = 0;
        served_touch(c->sm);   /* a long stream is use until its end (idle_unload_s) */
    }
}

static int llm_tap_end(void *arg, const struct proxy_outcome *o)
{
    struct llm_call *c = arg;
    llm_try_end(c);
    if (o->fail_status && !o->client_gone) {
        snprintf(c->last_fail, sizeof c->last_fail, "%s", o->msg ? o->msg : "failed");
        /* A timeout (504) is not tried again: the server may still be
         * generating the answer, and the client would wait timeout_ms once
         * more for each endpoint (docs/LLM.md: tries are for a refused
         * connect, a connection lost before the head, a 5xx head). */
        if (o->fail_status != 504 && c->tries < llm_tries_max(c)) {
            /* Not from inside the proxy's callbacks: from the loop, next. */
            struct timeval now = {0, 0};
            http_request_on_abort(c->req, llm_gap_abort, c);
            if (event_base_once(http_request_event_base(c->req), -1, EV_TIMEOUT, llm_retry_cb,
                                c, &now) == 0) {
                log_debug("model %s: endpoint %d: %s; trying another", c->sm->model.cfg.name,
                          c->e, c->last_fail);
                return 1;
            }
            http_request_on_abort(c->req, NULL, NULL);
        }
        log_warn("model %s: %s (after %d endpoint%s)", c->sm->model.cfg.name, c->last_fail,
                 c->tries, c->tries == 1 ? "" : "s");
        /* A timeout: the server read the prompt and may be generating
         * still (why it is not tried again): its estimate counts, as for a
         * client that left before the head. It was free. */
        if (o->fail_status == 504)
            llm_count(c);
        llm_account(c, o->fail_status);
        llm_call_free(c);
        return 0;
    }
    /* Whole, cut short, or left by its client: left before the head, the
     * server still read the prompt (the estimate counts). */
    if (o->status == 200 || o->client_gone)
        llm_count(c);
    /* 499: the client left first (nginx's number for it). */
    llm_account(c, o->client_gone ? 499 : o->broken ? 502 : o->status);
    llm_call_free(c);
    return 0;
}

static const struct proxy_tap llm_tap = {
    .head = llm_tap_head,
    .body = llm_tap_body,
    .end = llm_tap_end,
};

static void llm_try(struct llm_call *c)
{
    const char *why = NULL;
    int e = llmpool_pick(c->pool, c->blocks, c->nblocks, c->tried, c->tries, &why);
    if (e < 0) {
        const char *name = c->sm->model.cfg.name;
        llm_account(c, c->tries ? 502 : 503);
        if (c->tries)
            http_respond_error(c->req, 502, NULL, "model %s: %s (after %d endpoint%s)", name,
                               c->last_fail, c->tries, c->tries == 1 ? "" : "s");
        else
            http_respond_error(c->req, 503, "Retry-After: 1\r\n",
                               "model %s: no endpoint is usable now (each failed its last "
                               "call or metrics scrape); retry later", name);
        llm_call_free(c);
        return;
    }
    c->e = e;
    c->tried[c->tries++] = e;
    /* The endpoint's time is the tenant's while the try runs (the usage
     * ledger's seconds), not only once the call ends. */
    c->t_try = now_ns();
    modelstats_call_begin(c->sm->stats, e, c->tenant, false, c->t_try);
    c->streaming = false;
    c->t_first = c->t_last = 0;
    c->status = 0;
    llmtap_reset(&c->tap);
    buf_reset(&c->keep);
    log_debug("model %s: call to endpoint %d (%s)", c->sm->model.cfg.name, e, why ? why : "");
    /* Before the call: it may end (and free c) before proxy_forward_tapped returns. */
    c->starting = c->stream;
    llmpool_sent(c->pool, e, c->blocks, c->nblocks, c->stream);
    const struct model_pool *mp = &c->sm->model.cfg.pool;
    if (proxy_forward_tapped(c->st->proxy, c->req, llmpool_target(c->pool, e), "POST",
                             llm_paths[c->api], c->body, c->len, "application/json",
                             mp->timeout_ms, "timeout_ms", &llm_tap, c) < 0) {
        llm_try_end(c);
        http_respond_error(c->req, 503, NULL, "out of memory");
        llm_call_free(c);
    }
}

/* ---- routes ---- */

static void llm_route(struct http_request *req, const struct route_match *m, void *ctx,
                      enum llm_api api, struct served_model *held);

/* Run again once the pool a call waited for is loaded (api_models_wait). */
static void llm_chat_again(struct http_request *req, const struct route_match *m,
                           struct api_state *st, struct served_model *held)
{
    llm_route(req, m, st, LLM_CHAT, held);
}

static void llm_completions_again(struct http_request *req, const struct route_match *m,
                                  struct api_state *st, struct served_model *held)
{
    llm_route(req, m, st, LLM_COMPLETIONS, held);
}

static void llm_embeddings_again(struct http_request *req, const struct route_match *m,
                                 struct api_state *st, struct served_model *held)
{
    llm_route(req, m, st, LLM_EMBEDDINGS, held);
}

static const api_run_fn llm_again[] = {
    [LLM_CHAT] = llm_chat_again,
    [LLM_COMPLETIONS] = llm_completions_again,
    [LLM_EMBEDDINGS] = llm_embeddings_again,
};

/* held: the pool's copy a call waited for (its second run); NULL: the
 * first run. */
static void llm_route(struct http_request *req, const struct route_match *m, void *ctx,
                      enum llm_api api, struct served_model *held)
{
    struct api_state *st = ctx;
    size_t len;
    const char *body = http_request_body(req, &len);
    /* Read only to check and route it: a body of more values than any
     * call needs is refused before it is parsed (jsonfmt.h). */
    uint64_t values = body ? json_values_at_least(body, len) : 0;
    if (values > JSON_VALUES_ANY) {
        http_respond_error(req, 400, NULL, "the body holds %llu JSON values, more "
                           "than %u: refused before it is read", (unsigned long long)values,
                           JSON_VALUES_ANY);
        return;
    }
    json_error_t jerr;
    json_t *root = json_loadb(body ? body : "", len, 0, &jerr);
    if (!json_is_object(root) && api == LLM_EMBEDDINGS) {
        json_decref(root);   /* the encoders' decoder words its own errors */
        api_models_openai_embed(req, m, ctx);
        return;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        http_respond_error(req, 400, NULL, "the body must be a JSON object%s%s",
                           root ? "" : ": ", root ? "" : jerr.text);
        return;
    }
    const char *name = json_string_value(json_object_get(root, "model"));
    if ((!name || !name[0]) && api == LLM_EMBEDDINGS) {
        json_decref(root);
        api_models_openai_embed(req, m, ctx);
        return;
    }
    if (!name || !name[0]) {
        json_decref(root);
        http_request_set_error_param(req, "model");
        http_respond_error(req, 400, NULL, "model: missing (a string naming the model)");
        return;
    }
    struct served_model *sm = held ? held : llm_find(st, name);
    if ((!sm || sm->model.cfg.kind != MODEL_KIND_POOL) && api == LLM_EMBEDDINGS) {
        if (sm)   /* batchgate's own encoders answer it (and check the tenant) */
            served_release(sm);
        json_decref(root);
        api_models_openai_embed(req, m, ctx);
        return;
    }
    /* The tenant's globs first, on the model's own name: a model it may
     * not use is 403 whether it exists, and whatever it is (a model of
     * another tenant's was 400 "not an LLM pool", one that does not exist
     * 404). */
    const char *canon = sm ? sm->model.cfg.name : name;
    if (!auth_check_model(st->auth, req, canon, strlen(canon))) {
        served_release(sm);
        json_decref(root);
        return;
    }
    if (sm && sm->model.cfg.kind != MODEL_KIND_POOL && atomic_load(&sm->state) == SERVED_FAILED &&
        !sm->model.cfg.input.name[0]) {
        /* Its config.json was refused: what it is is not known (a pool
         * refused for a field it does not take read "not an LLM pool"). */
        http_respond_error(req, 503, NULL, "model %s is not ready: %s", sm->model.cfg.name,
                           sm->model.reason);
        served_release(sm);
        json_decref(root);
        return;
    }
    if (!sm || sm->model.cfg.kind != MODEL_KIND_POOL) {
        if (sm)
            served_release(sm);
        http_request_set_error_param(req, "model");
        if (sm)
            http_respond_error(req, 400, NULL, "model %s is not an LLM pool (it answers "
                               "/v2/models/%s/infer)", name, name);
        else
            http_respond_error(req, 404, NULL, "The model `%s` does not exist", name);
        json_decref(root);
        return;
    }
    const char *pool_name = sm->model.cfg.name;
    if (!held && atomic_load(&sm->state) != SERVED_READY) {
        /* Lazy, unloaded, idle or evicted: the call loads it and waits
         * for the load, as an inference does (it was 503 for ever: no
         * request loaded a pool). Once: a pool unloaded again before the
         * second run is 503 below. */
        char own[MODEL_NAME_MAX];
        snprintf(own, sizeof own, "%s", pool_name);
        json_decref(root);
        struct route_match mm = {.nparams = 1, .pattern = m->pattern};
        mm.params[0] = (struct route_param){.name = "model", .value = own,
                                            .len = strlen(own)};
        if (api_models_wait(req, &mm, st, sm, llm_again[api]) == 1)   /* loaded meanwhile */
            llm_route(req, m, st, api, serving_acquire(st->serving, own, strlen(own)));
        return;
    }
    if (atomic_load(&sm->state) != SERVED_READY || !sm->pool) {
        http_respond_error(req, 503, "Retry-After: 1\r\n", "model %s is not ready: %s",
                           pool_name, sm->model.reason[0] ? sm->model.reason : "loading");
        served_release(sm);
        json_decref(root);
        return;
    }
    int p = llm_check_fields(req, root) == 0 ? llm_priority_of(st, req, root) : -1;
    if (p < 0) {
        served_release(sm);
        json_decref(root);
        return;
    }
    enum llm_priority prio = (enum llm_priority)p;
    if (prio == LLM_PRIO_LOW && llmpool_saturated(sm->pool)) {
        llmpool_shed(sm->pool, prio);
        api_count_request(st, sm, req, 429, 0, -1, NULL);
        http_respond_error(req, 429, "Retry-After: 1\r\n",
                           "model %s: every endpoint is saturated, and requests of priority "
                           "%s are shed first; retry later", pool_name, llm_priority_names[prio]);
        served_release(sm);
        json_decref(root);
        return;
    }
    struct llm_call *c = calloc(1, sizeof *c);
    if (!c) {
        served_release(sm);
        json_decref(root);
        http_respond_error(req, 503, NULL, "out of memory");
        return;
    }
    c->st = st;
    c->req = req;
    c->sm = sm;
    c->pool = sm->pool;
    c->api = api;
    c->e = -1;
    llmtap_init(&c->tap);
    c->tap.on_content = llm_on_content;
    c->tap.arg = c;
    c->tenant = auth_tenant(req);
    c->t0 = http_request_arrival_ns(req);
    int64_t est = llm_estimate(api, root, &c->prompt_estimate);
    c->out_estimate = est - c->prompt_estimate;
    if (st->admit) {
        struct admit_refusal why = {0};
        int64_t now = now_ns();
        if (admit_enter(st->admit, c->tenant, 1, now, &why) < 0 ||
            (c->admitted = true,
             admit_tokens_enter(st->admit, c->tenant, est, now, time(NULL), &why) < 0)) {
            api_count_request(st, sm, req, 429, 0, -1, NULL);
            api_refuse_tenant(req, &why);
            llm_call_free(c);
            json_decref(root);
            return;
        }
        if (admit_has_token_quota(st->admit, c->tenant)) {
            c->estimate = est;
            /* Uncapped, the server generates to its context's end, past
             * what was reserved: concurrent calls of 256 reserved each
             * used 5,000, 15 times a 1,000-token quota in a minute
             * (helper's audit). Sent with the cap it reserved. */
            if (api != LLM_EMBEDDINGS)
                llm_cap(root);
        }
    }
    c->stream = json_is_true(json_object_get(root, "stream"));
    json_object_set_new(root, "model", json_string(sm->model.cfg.pool.served_model_name));
    if (c->stream && api != LLM_EMBEDDINGS) {
        json_t *so = json_object_get(root, "stream_options");
        if (!json_is_object(so)) {
            so = json_object();
            json_object_set_new(root, "stream_options", so);
        }
        c->tap.want_usage = json_is_true(json_object_get(so, "include_usage"));
        json_object_set_new(so, "include_usage", json_true());
    }
    struct buf text = {0};
    llm_prompt_text(api, root, &text);
    c->nblocks = picker_prefix_hashes(text.data ? text.data : "", text.len, c->blocks,
                                      LLM_BLOCKS_MAX);
    buf_free(&text);
    c->body = json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!c->body) {
        http_respond_error(req, 503, NULL, "out of memory");
        llm_call_free(c);
        return;
    }
    c->len = strlen(c->body);
    served_touch(sm);   /* idle_unload_s counts from the last call, begun or ended */
    llm_try(c);
}

static void llm_chat(struct http_request *req, const struct route_match *m, void *ctx)
{
    llm_route(req, m, ctx, LLM_CHAT, NULL);
}

static void llm_completions(struct http_request *req, const struct route_match *m, void *ctx)
{
    llm_route(req, m, ctx, LLM_COMPLETIONS, NULL);
}

static void llm_embeddings(struct http_request *req, const struct route_match *m, void *ctx)
{
    llm_route(req, m, ctx, LLM_EMBEDDINGS, NULL);
}

/* 200 with obj (taken; NULL: out of memory). */
static void llm_respond_json(struct http_request *req, json_t *obj)
{
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    json_decref(obj);
    if (!s) {
        http_respond_error(req, 503, NULL, "out of memory");
        return;
    }
    http_respond(req, 200, "application/json", s, strlen(s), NULL);
    free(s);
}

/* OpenAI's model object. */
static json_t *llm_model_obj(const char *id, int64_t created)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", id, "object", "model", "created",
                     (json_int_t)created, "owned_by", "batchgate");
}

static int64_t llm_created(const struct api_state *st)
{
    return (int64_t)time(NULL) - (now_ns() - st->start_ns) / 1000000000;
}

/* TF Serving's model_version_status for the model `name`: our lifecycle
 * states in its words. A model not loaded (yet, or again) is START: a
 * request loads it; one whose load failed is END with the reason, as no
 * request loads it again. NULL out of memory or when it has no row. */
static json_t *llm_tfs_status(struct api_state *st, const char *name, int only)
{
    struct served_index_row *rows = NULL;
    int n = serving_index(st->serving, &rows);
    json_t *arr = n >= 0 ? json_array() : NULL;
    for (int i = 0; arr && i < n; i++) {
        if (strcmp(rows[i].name, name) != 0 || (only && rows[i].version != only))
            continue;
        const char *state = rows[i].state, *code = "OK", *msg = "";
        if (strcmp(state, "READY") == 0) {
            state = "AVAILABLE";
        } else if (strcmp(state, "UNAVAILABLE") == 0) {
            state = rows[i].failed ? "END" : "START";
            code = rows[i].failed ? "UNKNOWN" : "OK";
            msg = rows[i].reason;
        }
        char version[24];
        snprintf(version, sizeof version, "%d", rows[i].version);
        json_array_append_new(arr, json_pack("{s:s, s:s, s:{s:s, s:s}}", "version", version,
                                             "state", state, "status", "error_code", code,
                                             "error_message", msg));
    }
    free(rows);
    if (arr && json_array_size(arr) == 0) {
        json_decref(arr);
        return NULL;
    }
    return arr;
}

/* Whether data already lists the model `name` (a version before it). */
static bool llm_listed(json_t *data, const char *name)
{
    size_t i;
    json_t *x;
    json_array_foreach(data, i, x)
        if (strcmp(json_string_value(json_object_get(x, "id")), name) == 0)
            return true;
    return false;
}

/* GET /v1/models: every model the caller may use, and each pool's aliases;
 * a model of several versions once (it was listed once per version), one
 * removed from the repository not at all. */
static void llm_models(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    (void)m;
    json_t *data = json_array();
    int64_t created = llm_created(st);
    int n = st->serving ? serving_count(st->serving) : 0;
    for (int i = 0; data && i < n; i++) {
        if (!serving_listed_at(st->serving, i))
            continue;
        struct served_model *sm = serving_acquire_at(st->serving, i);
        if (!sm)
            continue;
        const struct model_config *cfg = &sm->model.cfg;
        /* One that failed to load serves nothing until its folder is mended. */
        if (atomic_load(&sm->state) != SERVED_FAILED &&
            (!st->auth || auth_may_use_model(st->auth, auth_tenant(req), cfg->name,
                                             strlen(cfg->name))) &&
            !(served_pinned_version(sm) && llm_listed(data, cfg->name))) {
            json_array_append_new(data, llm_model_obj(cfg->name, created));
            for (int k = 0; cfg->kind == MODEL_KIND_POOL && k < cfg->pool.naliases; k++)
                json_array_append_new(data, llm_model_obj(cfg->pool.aliases[k], created));
        }
        served_release(sm);
    }
    llm_respond_json(req, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* GET on TF Serving's predict URL (/v1/models/{m}:predict, or of a
 * version) matches the model routes by their pattern, the verb inside
 * the name: 405 naming POST, as for any other route's wrong method (it
 * was 404, "the model `digits:predict` does not exist"). */
static bool llm_tfs_verb_refused(struct http_request *req, const struct route_param *last)
{
    if (api_tfs_predict_len(last) < 0)
        return false;
    size_t len;
    const char *path = http_request_path(req, &len);
    http_request_set_error_style(req, HTTP_ERRORS_PLAIN);   /* TF Serving's shape */
    http_respond_error(req, 405, "Allow: POST\r\n", "method %s is not allowed on %.*s "
                       "(allowed: POST)", http_request_method_name(req),
                       (int)(len > 200 ? 200 : len), path);
    return true;
}

/* GET /v1/models/{model} */
static void llm_model(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    char name[MODEL_NAME_MAX];
    const struct route_param *p = &m->params[0];
    if (llm_tfs_verb_refused(req, p))
        return;
    snprintf(name, sizeof name, "%.*s", (int)p->len, p->value);
    /* No model has a longer name: cut to fit, one that did answered for
     * it (TF Serving's status: 200 AVAILABLE for a model that is not). */
    struct served_model *sm = p->len < sizeof name ? llm_find(st, name) : NULL;
    bool allowed = sm && (!st->auth || auth_may_use_model(st->auth, auth_tenant(req),
                                                          sm->model.cfg.name,
                                                          strlen(sm->model.cfg.name)));
    bool pool = sm && sm->model.cfg.kind == MODEL_KIND_POOL;
    if (sm)
        served_release(sm);
    if (!allowed) {
        http_request_set_error_param(req, "model");
        http_respond_error(req, 404, NULL, "The model `%s` does not exist", name);
        return;
    }
    json_t *obj = llm_model_obj(name, llm_created(st));
    /* The same URL is TF Serving's model status: its clients (and probes
     * written for it) read model_version_status, OpenAI's read the rest. */
    json_t *status = pool ? NULL : llm_tfs_status(st, name, 0);
    if (status)
        json_object_set_new(obj, "model_version_status", status);
    llm_respond_json(req, obj);
}

/* GET /v1/models/{model}/versions/{version}: TF Serving's status of one
 * version (it was 405, the predict route's Allow). */
static void llm_tfs_version(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    const struct route_param *p = route_match_param(m, "model");
    const struct route_param *v = route_match_param(m, "version");
    if (llm_tfs_verb_refused(req, v))
        return;
    char name[MODEL_NAME_MAX];
    snprintf(name, sizeof name, "%.*s", (int)p->len, p->value);
    struct served_model *sm = st->serving && p->len < sizeof name
                                  ? serving_acquire(st->serving, name, strlen(name))
                                  : NULL;   /* a longer name is no model's (llm_model) */
    bool allowed = sm && sm->model.cfg.kind != MODEL_KIND_POOL &&
                   (!st->auth || auth_may_use_model(st->auth, auth_tenant(req),
                                                    sm->model.cfg.name,
                                                    strlen(sm->model.cfg.name)));
    if (sm) {
        snprintf(name, sizeof name, "%s", sm->model.cfg.name);   /* the status rows' name */
        served_release(sm);
    }
    int version = api_version_number(v);
    json_t *status = allowed && version ? llm_tfs_status(st, name, version) : NULL;
    if (!status) {
        http_respond_error(req, 404, NULL, "Could not find version %.*s of model %s",
                           (int)(v->len > 32 ? 32 : v->len), v->value, name);
        return;
    }
    llm_respond_json(req, json_pack("{s:o}", "model_version_status", status));
}

bool api_openai_route(const char *pattern, int method)
{
    static const char *const routes[] = {
        "/v1/embeddings", "/v1/chat/completions", "/v1/completions", "/v1/models",
        /* the Batch API (api_batch.c) */
        "/v1/files", "/v1/files/{id}", "/v1/files/{id}/content", "/v1/batches",
        "/v1/batches/{id}", "/v1/batches/{id}/cancel"};
    for (size_t i = 0; pattern && i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(pattern, routes[i]) == 0)
            return true;
    /* POST on the same pattern is TF Serving's predict, with its own errors;
     * HEAD is GET's (the same headers, Content-Length included). */
    return pattern && (method == HTTP_M_GET || method == HTTP_M_HEAD) &&
           strcmp(pattern, "/v1/models/{model}") == 0;
}

bool api_openai_path(const char *path, size_t len)
{
    static const char *const prefixes[] = {"/v1/embeddings", "/v1/chat", "/v1/completions",
                                           "/v1/files", "/v1/batches"};
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t n = strlen(prefixes[i]);
        if (len >= n && memcmp(path, prefixes[i], n) == 0 && (len == n || path[n] == '/'))
            return true;
    }
    return false;
}

int api_llm_register(struct router *r, struct api_state *st, struct error *err)
{
    static const struct api_route routes[] = {
        {HTTP_M_POST, "/v1/chat/completions", llm_chat, NULL},
        {HTTP_M_POST, "/v1/completions", llm_completions, NULL},
        {HTTP_M_POST, "/v1/embeddings", llm_embeddings, NULL},
        {HTTP_M_GET, "/v1/models", llm_models, NULL},
        {HTTP_M_GET, "/v1/models/{model}", llm_model, NULL},
        {HTTP_M_GET, "/v1/models/{model}/versions/{version}", llm_tfs_version, NULL},
    };
    return api_routes_add(r, st, routes, sizeof routes / sizeof routes[0], err);
}
