/* api_usage.c - GET /v2/usage (SPEC.md "Usage and cost"): the usage
 * ledger's rows for a period, grouped and summed, as JSON or CSV; a tenant
 * sees its own rows, an admin every tenant's. GET /dashboard/usage answers
 * the same for the dashboard's history charts, open as /metrics is (which
 * already shows cost_total per tenant to whoever reaches it). */
#include "gateway/api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/buf.h"
#include "gateway/auth.h"
#include "gateway/offload.h"
#include "gateway/usage_query.h"
#include "http/http.h"
#include "serving/jobs.h"
#include "state/state.h"

/* Reads one parameter; answers 400 naming it when it is malformed. */
static int usage_api_param(struct http_request *req, const char *key, char *out, size_t cap)
{
    int rc = http_request_query_param(req, key, out, cap);
    if (rc < 0)
        http_respond_error(req, 400, NULL, "%s: too long or a malformed %%-escape", key);
    return rc;
}

/* One question to the ledger, asked on the offload thread: a year of it
 * is ~110 ms of reading, which an IO thread would spend with its other
 * connections waiting (offload.h). */
struct usage_call {
    struct offload_task task;         /* first */
    struct state *st;
    struct usage_query q;
    bool csv;
    struct buf out;
    int status;                       /* 0: out is the answer; else the error's */
    struct error err;
};

static void usage_call_run(struct offload_task *t)
{
    struct usage_call *c = (struct usage_call *)t;
    struct usage_rows rows = {0};
    if (state_usage_query(c->st, c->q.from, c->q.to, c->q.step, c->q.group_by,
                          c->q.tenant[0] ? c->q.tenant : NULL, usage_rows_collect, &rows,
                          &c->err) ||
        rows.failed) {
        c->status = 500;
        if (rows.failed)
            error_set(&c->err, BG_ENOMEM, "out of memory");
    } else if (c->csv) {
        usage_render_csv(&c->out, &c->q, &rows);
    } else {
        usage_render_json(&c->out, &c->q, &rows);
    }
    usage_rows_free(&rows);
}

static void usage_call_done(struct offload_task *t)
{
    struct usage_call *c = (struct usage_call *)t;
    if (c->status)
        http_respond_error(t->req, c->status, NULL, "%s", c->err.msg);
    else
        http_respond(t->req, 200, c->csv ? "text/csv; charset=utf-8" : "application/json",
                     c->out.data, c->out.len, NULL);
    buf_free(&c->out);
    free(c);
}

static void usage_api_answer(struct http_request *req, struct api_state *st, bool open_route)
{
    /* A typo ("grouping=tenant") would otherwise give the totals silently. */
    static const char *const known[] = {"from", "to", "step", "group_by", "format"};
    if (api_query_check(req, known, 5, false, "GET /v2/usage") < 0)
        return;
    if (!st->jobs) {
        http_respond_error(req, 503, NULL, "the usage ledger is not available (no state database)");
        return;
    }
    int64_t now = (int64_t)time(NULL);
    struct usage_query q = {.from = now - 86400, .to = now, .step = 3600};
    char v[128];
    int rc;
    static const char *const times[2] = {"from", "to"};
    for (int k = 0; k < 2; k++) {
        if ((rc = usage_api_param(req, times[k], v, sizeof v)) < 0)
            return;
        if (rc && usage_parse_time(v, k ? &q.to : &q.from) < 0) {
            http_respond_error(req, 400, NULL, "%s: \"%s\" is neither RFC 3339 "
                               "(2026-12-03T10:00:00Z) nor Unix seconds, in years 1 to 9999",
                               times[k], v);
            return;
        }
    }
    if ((rc = usage_api_param(req, "step", v, sizeof v)) < 0)
        return;
    if (rc) {
        char *end;
        errno = 0;
        long long s = strtoll(v, &end, 10);
        if (!*v || *end || errno || s <= 0) {
            http_respond_error(req, 400, NULL, "step: \"%s\" is not a whole number of seconds "
                               "(at least 60)", v);
            return;
        }
        q.step = s;
    }
    if ((rc = usage_api_param(req, "group_by", v, sizeof v)) < 0)
        return;
    if (rc && usage_parse_group_by(v, &q.group_by) < 0) {
        http_respond_error(req, 400, NULL, "group_by: \"%s\"; a comma-separated list of tenant, "
                           "model, class, device", v);
        return;
    }
    bool csv = false;
    if ((rc = usage_api_param(req, "format", v, sizeof v)) < 0)
        return;
    if (rc) {
        if (strcmp(v, "csv") != 0 && strcmp(v, "json") != 0) {
            http_respond_error(req, 400, NULL, "format: \"%s\"; json or csv", v);
            return;
        }
        csv = v[0] == 'c';
    }
    const char *param;
    char msg[256];
    if (usage_query_check(&q, &param, msg, sizeof msg) < 0) {
        http_respond_error(req, 400, NULL, "%s", msg);
        return;
    }
    /* A tenant's own rows; an admin's (and the dashboard's) all. */
    int tenant = auth_tenant(req);
    if (!open_route && !auth_is_admin(st->auth, tenant))
        snprintf(q.tenant, sizeof q.tenant, "%s", auth_tenant_name(st->auth, tenant));
    struct usage_call *c = calloc(1, sizeof *c);
    if (!c) {
        http_respond_error(req, 500, NULL, "out of memory");
        return;
    }
    c->task.run = usage_call_run;
    c->task.done = usage_call_done;
    c->st = jobs_state(st->jobs);
    c->q = q;
    c->csv = csv;
    if (offload_submit(st->offload, req, &c->task) < 0)
        free(c);
}

static void usage_api_get(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    usage_api_answer(req, ctx, false);
}

static void usage_api_dashboard(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    usage_api_answer(req, ctx, true);
}

int api_usage_register(struct router *r, struct api_state *st, struct error *err)
{
    int rc = router_add(r, HTTP_M_GET, "/v2/usage", usage_api_get, st, err);
    return rc ? rc : router_add(r, HTTP_M_GET, "/dashboard/usage", usage_api_dashboard, st, err);
}
