/* api_governance.c - GET /v2/governance (the active time window and the
 * shares in force) and PUT /v2/governance (replaces the governance section:
 * same shape as the configuration's; admin only once keys exist, by the
 * route table of auth). SPEC.md "Time windows", docs/TENANTS.md. */
#include "gateway/api.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "common/buf.h"
#include "http/http.h"
#include "serving/governance.h"
#include "serving/serving.h"

static void governance_get(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    struct api_state *st = ctx;
    struct buf b = BUF_INIT;
    governor_json(st->governor, &b);
    http_respond(req, 200, "application/json", b.data, b.len, "Cache-Control: no-cache\r\n");
    buf_free(&b);
}

static void governance_put(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    struct api_state *st = ctx;
    json_t *root = api_body_object(req, false, "(the config's governance section)");
    if (!root)
        return;
    struct governance *g = NULL;
    struct error err = {0};
    int rc = governance_parse(root, serving_tenants(st->serving), "governance", &g, &err);
    json_decref(root);
    if (rc) {
        http_respond_error(req, 400, NULL, "%s", err.msg);
        return;
    }
    governor_replace(st->governor, g);
    governance_get(req, m, ctx);
}

int api_governance_register(struct router *r, struct api_state *st, struct error *err)
{
    if (!st->governor)
        return 0;
    int rc;
    if ((rc = router_add(r, HTTP_M_GET, "/v2/governance", governance_get, st, err)) ||
        (rc = router_add(r, HTTP_M_PUT, "/v2/governance", governance_put, st, err)))
        return rc;
    return 0;
}
