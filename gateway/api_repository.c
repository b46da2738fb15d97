/* api_repository.c - Triton's model repository extension, same shapes, so
 * that tritonclient's get_model_repository_index, load_model (with a config
 * override) and unload_model work unmodified (SPEC.md "Models: load,
 * unload, memory"; docs/MODELS.md "Lifecycle"). Admin only once keys
 * exist (gateway/auth.c's route table). The work is the lifecycle
 * thread's (serving/lifecycle.h): a load answers when it ended, from the
 * request's IO thread. */
#include "gateway/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "http/http.h"
#include "serving/lifecycle.h"
#include "serving/serving.h"
#include "serving/tensor_json.h"

/* POST /v2/repository/index, body {} or {"ready": true} (READY ones only). */
static void repository_index(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    struct api_state *st = ctx;
    json_t *o = api_body_object(req, true, "{} or {\"ready\": true|false}");
    if (!o)
        return;
    json_t *r = json_object_get(o, "ready");
    bool ready_only = json_is_true(r), bad = r && !json_is_boolean(r);
    json_decref(o);   /* r with it */
    if (bad) {
        http_respond_error(req, 400, NULL, "POST /v2/repository/index: ready must be true or "
                           "false");
        return;
    }
    struct served_index_row *rows = NULL;
    int n = st->serving ? serving_index(st->serving, &rows) : 0;
    if (n < 0) {
        http_respond_error(req, 500, NULL, "out of memory");
        return;
    }
    struct buf b = BUF_INIT;
    buf_append(&b, "[", 1);
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (ready_only && strcmp(rows[i].state, "READY") != 0)
            continue;
        if (k++)
            buf_append(&b, ",", 1);
        buf_append(&b, "{\"name\":", 8);
        json_append_string(&b, rows[i].name, strlen(rows[i].name));
        buf_appendf(&b, ",\"version\":\"%d\",\"state\":\"%s\",\"reason\":", rows[i].version,
                    rows[i].state);
        json_append_string(&b, rows[i].reason, strlen(rows[i].reason));
        buf_append(&b, "}", 1);
    }
    buf_append(&b, "]", 1);
    free(rows);
    http_respond(req, 200, "application/json", b.data, b.len, NULL);
    buf_free(&b);
}

/* A load in progress: answered from the request's IO thread when it ends. */
struct repository_call {
    struct mailbox_msg msg;           /* first: the mailbox hands back &msg */
    struct http_request *req;
    struct mailbox *mb;
    int rc;
    char why[1024];
};

static void repository_load_deliver(struct mailbox_msg *msg)
{
    struct repository_call *c = (struct repository_call *)msg;
    if (c->rc == 0)
        http_respond(c->req, 200, "application/json", "{}", 2, NULL);
    else   /* Triton answers a failed load 400 */
        http_respond_error(c->req, c->rc == -BG_ESHUTDOWN ? 503 : 400, NULL, "%s", c->why);
    free(c);
}

static void repository_load_done(void *arg, int rc, const char *why, struct served_model *sm)
{
    struct repository_call *c = arg;
    served_release(sm);
    c->rc = rc;
    snprintf(c->why, sizeof c->why, "%s", why ? why : "");
    mailbox_post(c->mb, &c->msg);
}

/* The model name of the route: 400 for one that could leave the
 * repository's folder. */
static const struct route_param *repository_model(struct http_request *req,
                                                  const struct route_match *m)
{
    const struct route_param *p = route_match_param(m, "model");
    bool bad = p->len == 0 || (p->len <= 2 && p->value[0] == '.' && p->value[p->len - 1] == '.');
    for (size_t i = 0; i < p->len && !bad; i++)
        bad = p->value[i] == '/' || p->value[i] == '\\' || p->value[i] == '%' ||
              (p->value[i] == '.' && i + 1 < p->len && p->value[i + 1] == '.');
    if (bad) {
        http_respond_error(req, 400, NULL, "\"%.*s\" is not a model name (no \"/\", \"..\" or "
                           "escapes)", (int)(p->len > 128 ? 128 : p->len), p->value);
        return NULL;
    }
    return p;
}

/* POST /v2/repository/models/{m}/load, body {} or {"parameters": {"config":
 * "<a config.json>"}}: loads, or reloads (the new copy serves once ready,
 * the old one drains). */
static void repository_load(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    const struct route_param *p = repository_model(req, m);
    if (!p)
        return;
    json_t *o = api_body_object(req, true, "{} or {\"parameters\": {\"config\": \"...\"}}");
    if (!o)
        return;
    const char *override = NULL;
    size_t olen = 0;
    json_t *params = json_object_get(o, "parameters");
    json_t *cfg = params ? json_object_get(params, "config") : NULL;
    const char *key;
    json_t *v;
    const char *bad = params && !json_is_object(params) ? "parameters must be an object"
                      : cfg && !json_is_string(cfg) ? "parameters.config must be a string "
                                                      "(the model's config.json)"
                                                    : NULL;
    json_object_foreach(params, key, v) {
        if (!bad && strcmp(key, "config") != 0)
            bad = "only parameters.config is supported (file: overrides are not)";
    }
    if (bad) {
        http_respond_error(req, 400, NULL, "POST /v2/repository/models/%.*s/load: %s",
                           (int)(p->len > 128 ? 128 : p->len), p->value, bad);
        json_decref(o);
        return;
    }
    if (cfg) {
        override = json_string_value(cfg);
        olen = json_string_length(cfg);
    }
    struct repository_call *c = calloc(1, sizeof *c);
    if (!c) {
        json_decref(o);
        http_respond_error(req, 500, NULL, "out of memory");
        return;
    }
    c->req = req;
    c->mb = http_request_mailbox(req);
    c->msg.fn = repository_load_deliver;
    struct error err = {0};
    int rc = st->serving ? serving_load(st->serving, p->value, p->len, override, olen,
                                        repository_load_done, c, &err)
                         : error_set(&err, BG_ENOTFOUND, "no model repository");
    json_decref(o);
    if (rc) {
        free(c);
        http_respond_error(req, error_http_status(-rc), NULL, "%s", err.msg);
    }
}

/* POST /v2/repository/models/{m}/unload: answered at once; the copy drains
 * (its queued requests are answered) and is then freed. */
static void repository_unload(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    const struct route_param *p = repository_model(req, m);
    if (!p)
        return;
    struct error err = {0};
    int rc = st->serving ? serving_unload(st->serving, p->value, p->len, &err)
                         : error_set(&err, BG_ENOTFOUND, "no model repository");
    if (rc)
        http_respond_error(req, error_http_status(-rc), NULL, "%s", err.msg);
    else
        http_respond(req, 200, "application/json", "{}", 2, NULL);
}

int api_repository_register(struct router *r, struct api_state *st, struct error *err)
{
    static const char *const repo[] = {"model_repository", NULL};
    static const struct api_route routes[] = {
        {HTTP_M_POST, "/v2/repository/index", repository_index, repo},
        {HTTP_M_POST, "/v2/repository/models/{model}/load", repository_load, repo},
        {HTTP_M_POST, "/v2/repository/models/{model}/unload", repository_unload, repo},
    };
    return api_routes_add(r, st, routes, sizeof routes / sizeof routes[0], err);
}
