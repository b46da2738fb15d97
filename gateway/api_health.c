/* api_health.c - liveness, readiness and server metadata (KServe v2). */
#include "gateway/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "serving/serving.h"

static void health_live(struct http_request *req, const struct route_match *m, void *ctx)
{
    static const char body[] = "{\"live\":true}";
    (void)m;
    (void)ctx;
    http_respond(req, 200, "application/json", body, sizeof body - 1, NULL);
}

static void health_ready(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    char who[MODEL_NAME_MAX];
    (void)m;
    if (atomic_load(&st->draining)) {
        static const char body[] = "{\"ready\":false,\"reason\":\"shutting down\"}";
        http_respond(req, 503, "application/json", body, sizeof body - 1, NULL);
    } else if (st->serving && atomic_load(&st->ready) &&
               !serving_all_ready(st->serving, who, sizeof who)) {
        /* Which one: the operator's next look is at its state and log. */
        char why[MODEL_NAME_MAX + 32];
        snprintf(why, sizeof why, "model %s is not ready", who);
        json_t *o = json_pack("{s:b, s:s}", "ready", 0, "reason", why);
        char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
        if (body)
            http_respond(req, 503, "application/json", body, strlen(body), NULL);
        else
            http_respond_error(req, 503, NULL, "%s", why);
        free(body);
        json_decref(o);
    } else if (!atomic_load(&st->ready)) {
        static const char body[] = "{\"ready\":false,\"reason\":\"starting\"}";
        http_respond(req, 503, "application/json", body, sizeof body - 1, NULL);
    } else {
        static const char body[] = "{\"ready\":true}";
        http_respond(req, 200, "application/json", body, sizeof body - 1, NULL);
    }
}

/* The extensions are those of the routes registered (api_routes.c). */
static void health_server_metadata(struct http_request *req, const struct route_match *m, void *ctx)
{
    static const char head[] =
        "{\"name\":\"batchgate\",\"version\":\"" BATCHGATE_VERSION "\",\"extensions\":";
    struct api_state *st = ctx;
    struct buf b = BUF_INIT;
    (void)m;
    if (buf_append(&b, head, sizeof head - 1) || api_extensions_append(st, &b) ||
        buf_append(&b, "}", 1))
        http_respond_error(req, 503, NULL, "out of memory");
    else
        http_respond(req, 200, "application/json", b.data, b.len, NULL);
    buf_free(&b);
}

int api_health_register(struct router *r, struct api_state *st, struct error *err)
{
    int rc;
    if ((rc = router_add(r, HTTP_M_GET, "/v2/health/live", health_live, st, err)) ||
        (rc = router_add(r, HTTP_M_GET, "/v2/health/ready", health_ready, st, err)) ||
        (rc = router_add(r, HTTP_M_GET, "/v2", health_server_metadata, st, err)))
        return rc;
    return 0;
}
