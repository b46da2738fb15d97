/* api_jobs.c - the offline jobs routes (SPEC.md "Jobs"): submit, list,
 * status, results, cancel.
 *
 * Submit and cancel are writes: the IO thread checks what it can alone
 * (model, size, path) and hands the rest to the jobs runner (jobs.h), whose
 * thread writes the input file and the database and answers back through
 * this IO thread's mailbox. Reads use the database's read connection. */
#include "gateway/api.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "common/buf.h"
#include "gateway/auth.h"
#include "gateway/offload.h"
#include "serving/jobs.h"
#include "serving/serving.h"
#include "serving/tensor_json.h"
#include "http/http.h"
#include "state/state.h"

/* A body smaller than this may be the {"input_path": ...} form. */
#define JOBS_API_PATH_BODY_MAX 8192
/* The most jobs one page of GET /v2/jobs may ask for. */
#define JOBS_API_LIST_MAX 10000

struct jobs_call {
    struct mailbox_msg msg;           /* first: the mailbox hands back &msg */
    struct jobs_cmd cmd;
    struct http_request *req;
    struct mailbox *mb;
};

/* Runner thread: back to the request's IO thread. */
static void jobs_api_cmd_done(struct jobs_cmd *c)
{
    struct jobs_call *call = c->arg;
    mailbox_post(call->mb, &call->msg);
}

/* IO thread. */
static void jobs_api_deliver(struct mailbox_msg *msg)
{
    struct jobs_call *call = (struct jobs_call *)msg;
    struct jobs_cmd *c = &call->cmd;
    if (c->status) {
        api_respond_code(call->req, c->status, c->error);
    } else {
        struct buf b = BUF_INIT;
        buf_append(&b, "{\"id\":", 6);
        json_append_string(&b, c->id, strlen(c->id));
        buf_appendf(&b, ",\"state\":\"%s\"}", state_job_state_name(c->state));
        http_respond(call->req, c->kind == JOBS_CMD_CREATE ? 201 : 200, "application/json",
                     b.data, b.len, NULL);
        buf_free(&b);
    }
    free(call);
}

static struct jobs_call *jobs_api_call(struct http_request *req, enum jobs_cmd_kind kind)
{
    struct jobs_call *call = calloc(1, sizeof *call);
    if (!call) {
        http_respond_error(req, 500, NULL, "out of memory");
        return NULL;
    }
    call->req = req;
    call->mb = http_request_mailbox(req);
    call->msg.fn = jobs_api_deliver;
    call->cmd.kind = kind;
    call->cmd.done = jobs_api_cmd_done;
    call->cmd.arg = call;
    return call;
}

static struct jobs *jobs_api_of(struct http_request *req, struct api_state *st)
{
    if (!st->jobs)
        http_respond_error(req, 503, NULL, "jobs are not available (no state database)");
    return st->jobs;
}

/* Whether `rel` (a path under jobs.dir) names a file batchgate keeps
 * there: a job's input copy or results (job-ID.input.jsonl,
 * job-ID.results.jsonl), anything of the Batch API's (batch/), the lock,
 * and the state_dir's files where a configuration puts it inside jobs.dir
 * (`state_rel`, its path from jobs.dir; NULL where it is not inside).
 * They are other tenants' too: a job reading one as its input handed its
 * lines (and, in error messages, bits of any file) to whoever asked. Said
 * of the name asked for before it is looked up, so that 403 against 400
 * "No such file" tells nothing of which exist. */
static bool jobs_api_server_file(const char *rel, const char *state_rel)
{
    while ((rel[0] == '.' && rel[1] == '/') || rel[0] == '/')
        rel += rel[0] == '/' ? 1 : 2;
    size_t sn = state_rel ? strlen(state_rel) : 0;
    if (strncmp(rel, "batch/", 6) == 0 || strcmp(rel, "batch") == 0 ||
        (sn && strncmp(rel, state_rel, sn) == 0 && (rel[sn] == '/' || rel[sn] == '\0')))
        return true;
    const char *base = strrchr(rel, '/');
    base = base ? base + 1 : rel;
    size_t n = strlen(base);
    bool job = strncmp(base, "job-", 4) == 0 &&
               ((n > 12 && strcmp(base + n - 12, ".input.jsonl") == 0) ||
                (n > 14 && strcmp(base + n - 14, ".results.jsonl") == 0));
    return job || strcmp(base, "batchgate.lock") == 0 || strncmp(base, "batchgate.db", 12) == 0;
}

/* Resolves `rel` under jobs.dir into out; answers 403/400/413 itself. */
static int jobs_api_input_path(struct http_request *req, struct jobs *jobs, const char *rel,
                               char *out, size_t cap)
{
    if (rel[0] == '/' || strcmp(rel, "..") == 0 || strncmp(rel, "../", 3) == 0 ||
        strstr(rel, "/../") || (strlen(rel) >= 3 && strcmp(rel + strlen(rel) - 3, "/..") == 0)) {
        http_respond_error(req, 403, NULL, "input_path: \"%s\" must be a relative path under "
                                           "jobs.dir, without \"..\"", rel);
        return -1;
    }
    char joined[4200], dir[4096], state[4096];
    snprintf(joined, sizeof joined, "%s/%s", jobs_dir(jobs), rel);
    if (!realpath(jobs_dir(jobs), dir)) {
        http_respond_error(req, 500, NULL, "jobs.dir %s: %s", jobs_dir(jobs), strerror(errno));
        return -1;
    }
    size_t dl = strlen(dir);
    /* The state_dir inside jobs.dir, as a configuration may put it (by
     * default jobs.dir is inside the state_dir, which says nothing). */
    const char *state_rel = realpath(jobs_state_dir(jobs), state) &&
                                    strncmp(state, dir, dl) == 0 && state[dl] == '/'
                                ? state + dl + 1
                                : NULL;
    if (jobs_api_server_file(rel, state_rel)) {
        http_respond_error(req, 403, NULL, "input_path: \"%s\" names a file batchgate keeps "
                           "(a job's or a batch's own, or its state); give a file of yours "
                           "under jobs.dir", rel);
        return -1;
    }
    char *real = realpath(joined, NULL);
    if (!real) {
        http_respond_error(req, 400, NULL, "input_path: %s: %s", rel, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct stat sb;
    if (strncmp(real, dir, dl) == 0 && real[dl] == '/' &&
        jobs_api_server_file(real + dl + 1, state_rel)) {
        http_respond_error(req, 403, NULL, "input_path: \"%s\" names a file batchgate keeps "
                           "(a job's or a batch's own, or its state); give a file of yours "
                           "under jobs.dir", rel);   /* a link to one, said as the name is */
        rc = -1;
    } else if (strcmp(real, dir) == 0) {
        /* "" or ".": jobs.dir itself, a folder, not outside it. */
        http_respond_error(req, 400, NULL, "input_path: \"%s\" is jobs.dir itself, not a file "
                           "in it", rel);
        rc = -1;
    } else if (strncmp(real, dir, dl) != 0 || real[dl] != '/') {
        /* A symlink that leads out of jobs.dir. */
        http_respond_error(req, 403, NULL, "input_path: \"%s\" leads outside jobs.dir", rel);
        rc = -1;
    } else if (stat(real, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        http_respond_error(req, 400, NULL, "input_path: \"%s\" is not a regular file", rel);
        rc = -1;
    } else if ((size_t)sb.st_size > jobs_max_input_bytes(jobs)) {
        http_respond_error(req, 413, NULL, "input_path: %lld bytes, over jobs.max_input_bytes "
                           "(%zu)", (long long)sb.st_size, jobs_max_input_bytes(jobs));
        rc = -1;
    } else if (strlen(real) >= cap) {
        http_respond_error(req, 400, NULL, "input_path: too long");
        rc = -1;
    } else {
        snprintf(out, cap, "%s", real);
    }
    free(real);
    return rc;
}

/* The caller's tenant by name; "default" without tenants (st->auth NULL). */
static const char *jobs_api_tenant(const struct api_state *st, const struct http_request *req)
{
    return st->auth ? auth_tenant_name(st->auth, auth_tenant(req)) : "default";
}

/* A job is its tenant's, and an admin's (every caller's while no tenant
 * has keys). A job stored before tenants (tenant "") is the default's. */
static bool jobs_api_may_see(const struct api_state *st, const struct http_request *req,
                             const struct state_job *j)
{
    if (!st->auth || auth_is_admin(st->auth, auth_tenant(req)))
        return true;
    const char *owner = j->tenant[0] ? j->tenant : "default";
    return strcmp(owner, jobs_api_tenant(st, req)) == 0;
}

/* POST /v2/models/{model}/jobs */
static void jobs_api_submit(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    const struct route_param *p = route_match_param(m, "model");
    struct served_model *sm = st->serving ? serving_acquire(st->serving, p->value, p->len) : NULL;
    if (!sm) {
        http_respond_error(req, 404, NULL, "unknown model \"%.*s\"",
                           (int)(p->len > 128 ? 128 : p->len), p->value);
        return;
    }
    char model[MODEL_NAME_MAX];
    snprintf(model, sizeof model, "%s", sm->model.cfg.name);
    bool pool = sm->model.cfg.kind == MODEL_KIND_POOL;
    served_release(sm);
    if (pool) {
        /* Its servers take OpenAI's calls, not tensors: every line of the
         * job failed, each error pointing at another field. */
        http_respond_error(req, 400, NULL, "model %s is an LLM pool: a job's lines are KServe "
                           "v2 infer requests, which it does not take; its offline calls go "
                           "through the Batch API (POST /v1/files, then POST /v1/batches)",
                           model);
        return;
    }
    int version = api_route_version(req, m, st, model);
    if (version < 0)
        return;
    struct jobs *jobs = jobs_api_of(req, st);
    if (!jobs)
        return;
    size_t len;
    const char *body = http_request_body(req, &len);
    if (len > jobs_max_input_bytes(jobs)) {
        http_respond_error(req, 413, NULL, "job input of %zu bytes is over jobs.max_input_bytes "
                           "(%zu)", len, jobs_max_input_bytes(jobs));
        return;
    }
    struct jobs_call *call = jobs_api_call(req, JOBS_CMD_CREATE);
    if (!call)
        return;
    snprintf(call->cmd.model, sizeof call->cmd.model, "%s", model);
    call->cmd.version = version;
    snprintf(call->cmd.tenant, sizeof call->cmd.tenant, "%s", jobs_api_tenant(st, req));
    /* One object naming input_path is the file form; anything else is lines. */
    json_t *root = len > 0 && len < JOBS_API_PATH_BODY_MAX ? json_loadb(body, len, 0, NULL) : NULL;
    json_t *ip = json_is_object(root) ? json_object_get(root, "input_path") : NULL;
    if (ip) {
        int rc = -1;
        if (!json_is_string(ip))
            http_respond_error(req, 400, NULL, "input_path: must be a string");
        else
            rc = jobs_api_input_path(req, jobs, json_string_value(ip), call->cmd.input_path,
                                     sizeof call->cmd.input_path);
        json_decref(root);
        if (rc) {
            free(call);
            return;
        }
    } else {
        json_decref(root);
        if (len == 0) {
            http_respond_error(req, 400, NULL, "a job needs a body: JSON Lines of infer requests, "
                                               "or {\"input_path\": \"rel/path.jsonl\"}");
            free(call);
            return;
        }
        call->cmd.body = malloc(len);
        if (!call->cmd.body) {
            http_respond_error(req, 500, NULL, "out of memory for a job of %zu bytes", len);
            free(call);
            return;
        }
        memcpy(call->cmd.body, body, len);
        call->cmd.body_len = len;
    }
    jobs_command(jobs, &call->cmd);
}

static void jobs_api_append(struct buf *b, const struct state_job *j)
{
    buf_append(b, "{\"id\":", 6);
    json_append_string(b, j->id, strlen(j->id));
    buf_append(b, ",\"model\":", 9);
    json_append_string(b, j->model, strlen(j->model));
    if (j->version > 0)   /* pinned: /v2/models/{m}/versions/{v}/jobs */
        buf_appendf(b, ",\"version\":\"%d\"", j->version);
    buf_append(b, ",\"tenant\":", 10);
    json_append_string(b, j->tenant, strlen(j->tenant));
    buf_appendf(b, ",\"state\":\"%s\",\"created\":%.3f,\"started\":", state_job_state_name(j->state),
                (double)j->created_ms / 1e3);
    if (j->started_ms)
        buf_appendf(b, "%.3f", (double)j->started_ms / 1e3);
    else
        buf_append(b, "null", 4);
    buf_append(b, ",\"finished\":", 12);
    if (j->finished_ms)
        buf_appendf(b, "%.3f", (double)j->finished_ms / 1e3);
    else
        buf_append(b, "null", 4);
    buf_append(b, ",\"lines\":{\"total\":", 18);
    if (j->lines_total >= 0)
        buf_appendf(b, "%lld", (long long)j->lines_total);
    else
        buf_append(b, "null", 4);
    buf_appendf(b, ",\"done\":%lld,\"failed\":%lld},\"output_path\":", (long long)j->lines_done,
                (long long)j->lines_failed);
    json_append_string(b, j->output_path, strlen(j->output_path));
    if (j->reason[0]) {
        buf_append(b, ",\"reason\":", 10);
        json_append_string(b, j->reason, strlen(j->reason));
    }
    buf_append(b, "}", 1);
}

/* A page of GET /v2/jobs, read on the offload thread (offload.h): an
 * unpaged list of a month of jobs is a long read. Its filter's strings
 * live here. */
struct jobs_list_call {
    struct offload_task task;         /* first */
    struct state *st;
    struct state_job_filter f;
    char tenant[64], model[MODEL_NAME_MAX], after[64];
    int n, limit;                     /* limit 0: none */
    bool more;
    struct buf out;
    struct error err;
    int status;
};

/* The query chose by tenant: every row is the caller's to see. */
static void jobs_list_one(const struct state_job *j, void *arg)
{
    struct jobs_list_call *c = arg;
    if (c->limit && c->n == c->limit) {   /* the one asked past the page */
        c->more = true;
        return;
    }
    if (c->n++)
        buf_append(&c->out, ",", 1);
    jobs_api_append(&c->out, j);
}

static void jobs_list_run(struct offload_task *t)
{
    struct jobs_list_call *c = (struct jobs_list_call *)t;
    buf_append(&c->out, "{\"jobs\":[", 9);
    if (state_job_list(c->st, &c->f, jobs_list_one, c, &c->err))
        c->status = 500;
    else
        buf_appendf(&c->out, "],\"has_more\":%s}", c->more ? "true" : "false");
}

static void jobs_list_done(struct offload_task *t)
{
    struct jobs_list_call *c = (struct jobs_list_call *)t;
    if (c->status)
        http_respond_error(t->req, c->status, NULL, "%s", c->err.msg);
    else
        http_respond(t->req, 200, "application/json", c->out.data, c->out.len, NULL);
    buf_free(&c->out);
    free(c);
}

static void jobs_api_bad_param(struct http_request *req, const char *param, const char *fmt,
                               const char *arg)
{
    http_request_set_error_param(req, param);
    http_respond_error(req, 400, NULL, fmt, param, arg);
}

/* GET /v2/jobs?state=&model=&after=&limit=: the caller's jobs (an
 * admin's: all), oldest first; `limit` pages them and `after` (the last
 * id of a page) starts the next. The query selects and stops in SQLite,
 * not here: a page costs its rows whatever the table holds. */
static void jobs_api_list(struct http_request *req, const struct route_match *m, void *ctx)
{
    (void)m;
    struct api_state *st = ctx;
    struct jobs *jobs = jobs_api_of(req, ctx);
    if (!jobs)
        return;
    static const char *const known[] = {"state", "model", "limit", "after"};
    if (api_query_check(req, known, 4, false, "GET /v2/jobs") < 0)
        return;
    struct jobs_list_call *c = calloc(1, sizeof *c);
    if (!c) {
        http_respond_error(req, 500, NULL, "out of memory");
        return;
    }
    char state_s[16], limit_s[16];
    struct state_job_filter f = {.state = -1};
    int r;
    if ((r = http_request_query_param(req, "state", state_s, sizeof state_s)) != 0) {
        for (int i = 0; r == 1 && i < STATE_JOB_NSTATES; i++)
            if (strcmp(state_s, state_job_state_name(i)) == 0)
                f.state = i;
        if (f.state < 0) {
            char names[128] = "";
            for (int i = 0; i < STATE_JOB_NSTATES; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         i ? ", " : "", state_job_state_name(i));
            jobs_api_bad_param(req, "state", "%s: one of %s", names);
            free(c);
            return;
        }
    }
    if ((r = http_request_query_param(req, "model", c->model, sizeof c->model)) < 0) {
        jobs_api_bad_param(req, "model", "%s: %s", "too long or a malformed %-escape");
        free(c);
        return;
    }
    f.model = r == 1 ? c->model : NULL;
    if ((r = http_request_query_param(req, "limit", limit_s, sizeof limit_s)) != 0) {
        char *e = NULL;
        long v = r == 1 ? strtol(limit_s, &e, 10) : 0;
        if (r < 0 || !e || *e || v < 1 || v > JOBS_API_LIST_MAX) {
            char msg[64];
            snprintf(msg, sizeof msg, "an integer from 1 to %d", JOBS_API_LIST_MAX);
            jobs_api_bad_param(req, "limit", "%s: %s", msg);
            free(c);
            return;
        }
        f.limit = (int)v + 1;   /* one more tells has_more */
    }
    if ((r = http_request_query_param(req, "after", c->after, sizeof c->after)) != 0) {
        struct state_job j;
        struct error err = {0};
        /* Another tenant's job is no place to start from, as it is 404 on
         * its own route: its id tells nothing. */
        if (r < 0 || state_job_get(jobs_state(jobs), c->after, &j, &err) != 0 ||
            !jobs_api_may_see(st, req, &j)) {
            jobs_api_bad_param(req, "after", "%s: %s", "no job of that id (the last id of the "
                               "page before)");
            free(c);
            return;
        }
        f.after = c->after;
    }
    if (st->auth && !auth_is_admin(st->auth, auth_tenant(req))) {
        snprintf(c->tenant, sizeof c->tenant, "%s", jobs_api_tenant(st, req));
        f.tenant = c->tenant;
    }
    c->f = f;
    c->limit = f.limit ? f.limit - 1 : 0;
    c->st = jobs_state(jobs);
    c->task.run = jobs_list_run;
    c->task.done = jobs_list_done;
    if (offload_submit(st->offload, req, &c->task) < 0)
        free(c);
}

/* The job of the route's {id}; answers 404/500 itself. Another tenant's
 * job is 404 as an unknown one is: its id tells nothing (not even that it
 * exists). */
static int jobs_api_get_job(struct http_request *req, const struct route_match *m,
                            const struct api_state *st, struct jobs *jobs, struct state_job *j)
{
    const struct route_param *p = route_match_param(m, "id");
    char id[64];
    if (p->len >= sizeof id) {
        http_respond_error(req, 404, NULL, "no job \"%.40s...\"", p->value);
        return -1;
    }
    memcpy(id, p->value, p->len);
    id[p->len] = '\0';
    struct error err = {0};
    int rc = state_job_get(jobs_state(jobs), id, j, &err);
    if (rc == 0 && !jobs_api_may_see(st, req, j))
        rc = error_set(&err, BG_ENOTFOUND, "no job \"%s\"", id);
    if (rc)
        api_respond_code(req, rc, err.msg);
    return rc;
}

/* GET /v2/jobs/{id} */
static void jobs_api_status(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct jobs *jobs = jobs_api_of(req, ctx);
    struct state_job j;
    if (!jobs || jobs_api_get_job(req, m, ctx, jobs, &j))
        return;
    struct buf b = BUF_INIT;
    jobs_api_append(&b, &j);
    http_respond(req, 200, "application/json", b.data, b.len, NULL);
    buf_free(&b);
}

/* GET /v2/jobs/{id}/results: the committed lines (a running job's so far). */
static void jobs_api_results(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct jobs *jobs = jobs_api_of(req, ctx);
    struct state_job j;
    if (!jobs || jobs_api_get_job(req, m, ctx, jobs, &j))
        return;
    /* The committed lines only: a running job's file may hold a line in
     * writing past them. */
    char why[600];
    if (api_respond_file(req, j.output_path, j.out_size, "application/x-ndjson", why,
                         sizeof why) < 0)
        http_respond_error(req, 500, NULL, "job %s: its results file: %s", j.id, why);
}

/* DELETE /v2/jobs/{id} */
static void jobs_api_cancel(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct jobs *jobs = jobs_api_of(req, ctx);
    struct state_job j;
    if (!jobs || jobs_api_get_job(req, m, ctx, jobs, &j))
        return;
    struct jobs_call *call = jobs_api_call(req, JOBS_CMD_CANCEL);
    if (!call)
        return;
    snprintf(call->cmd.id, sizeof call->cmd.id, "%s", j.id);
    jobs_command(jobs, &call->cmd);
}

int api_jobs_register(struct router *r, struct api_state *st, struct error *err)
{
    static const struct {
        int methods;
        const char *pattern;
        route_handler_fn fn;
    } routes[] = {
        {HTTP_M_POST, "/v2/models/{model}/jobs", jobs_api_submit},
        {HTTP_M_POST, "/v2/models/{model}/versions/{version}/jobs", jobs_api_submit},
        {HTTP_M_GET, "/v2/jobs", jobs_api_list},
        {HTTP_M_GET, "/v2/jobs/{id}", jobs_api_status},
        {HTTP_M_GET, "/v2/jobs/{id}/results", jobs_api_results},
        {HTTP_M_DELETE, "/v2/jobs/{id}", jobs_api_cancel},
    };
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        int rc = router_add(r, routes[i].methods, routes[i].pattern, routes[i].fn, st, err);
        if (rc)
            return rc;
    }
    return 0;
}
