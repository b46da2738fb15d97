/* api_batch.c - OpenAI's Batch API (docs/LLM.md "Batch API"): /v1/files and
 * /v1/batches, as the `openai` client calls them.
 *
 * As for jobs (api_jobs.c), the writes (an upload, a batch's creation, a
 * delete, a cancel) are commands to the jobs runner, whose thread alone
 * writes the state database and answers back through this IO thread's
 * mailbox; the reads use the database's read connection. Every error is in
 * OpenAI's shape (api_openai_route names these routes). */
#include "gateway/api.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "common/buf.h"
#include "common/utf8.h"
#include "gateway/auth.h"
#include "gateway/multipart.h"
#include "http/http.h"
#include "serving/jobs.h"
#include "serving/tensor_json.h"
#include "state/state.h"

/* Appends a string literal. */

struct batch_call {
    struct mailbox_msg msg;           /* first: the mailbox hands back &msg */
    struct jobs_cmd cmd;
    struct http_request *req;
    struct mailbox *mb;
    struct api_state *st;
};

static const char *const batch_endpoints[] = {"/v1/chat/completions", "/v1/completions",
                                              "/v1/embeddings"};

/* ---- objects ---- */

static void batch_append_str_or_null(struct buf *b, const char *s)
{
    if (s && s[0])
        json_append_string(b, s, strlen(s));
    else
        BUF_LIT(b, "null");
}

static void batch_file_json(struct buf *b, const struct state_file *f)
{
    BUF_LIT(b, "{\"id\":");
    json_append_string(b, f->id, strlen(f->id));
    buf_appendf(b, ",\"object\":\"file\",\"bytes\":%lld,\"created_at\":%lld,\"filename\":",
                (long long)f->bytes, (long long)f->created_at);
    json_append_string(b, f->filename, strlen(f->filename));
    BUF_LIT(b, ",\"purpose\":");
    json_append_string(b, f->purpose, strlen(f->purpose));
    BUF_LIT(b, ",\"status\":\"processed\",\"expires_at\":");
    if (f->expires_at)
        buf_appendf(b, "%lld", (long long)f->expires_at);
    else
        BUF_LIT(b, "null");
    BUF_LIT(b, ",\"status_details\":null}");
}

static void batch_json(struct buf *b, const struct state_batch *x)
{
    BUF_LIT(b, "{\"id\":");
    json_append_string(b, x->id, strlen(x->id));
    BUF_LIT(b, ",\"object\":\"batch\",\"endpoint\":");
    json_append_string(b, x->endpoint, strlen(x->endpoint));
    BUF_LIT(b, ",\"errors\":");
    if (x->errors[0])
        buf_append(b, x->errors, strlen(x->errors));
    else
        BUF_LIT(b, "null");
    BUF_LIT(b, ",\"input_file_id\":");
    json_append_string(b, x->input_file_id, strlen(x->input_file_id));
    BUF_LIT(b, ",\"completion_window\":");
    json_append_string(b, x->completion_window, strlen(x->completion_window));
    buf_appendf(b, ",\"status\":\"%s\",\"output_file_id\":", state_batch_status_name(x->status));
    batch_append_str_or_null(b, x->output_file_id);
    BUF_LIT(b, ",\"error_file_id\":");
    batch_append_str_or_null(b, x->error_file_id);
    for (int i = 0; i < 9; i++) {
        buf_appendf(b, ",\"%s\":", state_batch_at_name(i));
        if (x->at[i])
            buf_appendf(b, "%lld", (long long)x->at[i]);
        else
            BUF_LIT(b, "null");
    }
    buf_appendf(b, ",\"request_counts\":{\"total\":%lld,\"completed\":%lld,\"failed\":%lld},"
                   "\"metadata\":%s}",
                (long long)x->total, (long long)x->completed, (long long)x->failed,
                x->metadata[0] ? x->metadata : "null");
}

static void batch_respond_buf(struct http_request *req, int status, struct buf *b)
{
    http_respond(req, status, "application/json", b->data ? b->data : "", b->len, NULL);
    buf_free(b);
}

/* ---- who sees what ---- */

static const char *batch_tenant(const struct api_state *st, const struct http_request *req)
{
    return st->auth ? auth_tenant_name(st->auth, auth_tenant(req)) : "default";
}

/* A file past its expires_at is gone, though the runner deletes it up to a
 * minute later (serving/jobs_batch.c). */
static bool batch_file_live(const struct state_file *f)
{
    return f->expires_at == 0 || (int64_t)time(NULL) < f->expires_at;
}

/* A file or batch is its tenant's, and an admin's (every caller's while no
 * tenant has keys); another's is 404 as an unknown id is. */
static bool batch_may_see(const struct api_state *st, const struct http_request *req,
                          const char *owner)
{
    if (!st->auth || auth_is_admin(st->auth, auth_tenant(req)))
        return true;
    return strcmp(owner[0] ? owner : "default", batch_tenant(st, req)) == 0;
}

static struct jobs *batch_jobs(struct http_request *req, struct api_state *st)
{
    if (!st->jobs)
        http_respond_error(req, 503, NULL, "the Batch API is not available (no state database)");
    return st->jobs;
}

/* The route's {id} into out; 404 when it cannot be one. */
static int batch_id_param(struct http_request *req, const struct route_match *m, char *out,
                          size_t cap, const char *what)
{
    const struct route_param *p = route_match_param(m, "id");
    if (p->len >= cap) {
        http_respond_error(req, 404, NULL, "No such %s object: %.40s...", what, p->value);
        return -1;
    }
    memcpy(out, p->value, p->len);
    out[p->len] = '\0';
    return 0;
}

static int batch_get_file(struct http_request *req, const struct route_match *m,
                          struct api_state *st, struct state_file *f)
{
    char id[64];
    if (batch_id_param(req, m, id, sizeof id, "File"))
        return -1;
    struct error err = {0};
    int rc = state_file_get(jobs_state(st->jobs), id, f, &err);
    if (rc == 0 && (!batch_may_see(st, req, f->tenant) || !batch_file_live(f)))
        rc = error_set(&err, BG_ENOTFOUND, "No such File object: %s", id);
    if (rc) {
        http_request_set_error_param(req, "file_id");
        api_respond_code(req, rc, err.msg);
    }
    return rc;
}

static int batch_get_batch(struct http_request *req, const struct route_match *m,
                           struct api_state *st, struct state_batch *b)
{
    char id[64];
    if (batch_id_param(req, m, id, sizeof id, "Batch"))
        return -1;
    struct error err = {0};
    int rc = state_batch_get(jobs_state(st->jobs), id, b, &err);
    if (rc == 0 && !batch_may_see(st, req, b->tenant))
        rc = error_set(&err, BG_ENOTFOUND, "No such Batch object: %s", id);
    if (rc) {
        http_request_set_error_param(req, "batch_id");
        api_respond_code(req, rc, err.msg);
    }
    return rc;
}

/* ---- commands to the jobs runner ---- */

static void batch_cmd_done(struct jobs_cmd *c)
{
    struct batch_call *call = c->arg;
    mailbox_post(call->mb, &call->msg);
}

/* IO thread: the command's answer. */
static void batch_deliver(struct mailbox_msg *msg)
{
    struct batch_call *call = (struct batch_call *)msg;
    struct jobs_cmd *c = &call->cmd;
    struct http_request *req = call->req;
    struct state *state = jobs_state(call->st->jobs);
    struct buf b = BUF_INIT;
    struct error err = {0};
    if (c->status) {
        if (c->param[0])
            http_request_set_error_param(req, c->param);
        if (c->http_status)
            http_respond_error(req, c->http_status, NULL, "%s", c->error);
        else
            api_respond_code(req, c->status, c->error);
    } else if (c->kind == JOBS_CMD_FILE_CREATE) {
        struct state_file f;
        if (state_file_get(state, c->id, &f, &err) == 0) {
            batch_file_json(&b, &f);
            batch_respond_buf(req, 200, &b);
        } else {
            api_respond_code(req, err.code, err.msg);
        }
    } else if (c->kind == JOBS_CMD_FILE_DELETE) {
        BUF_LIT(&b, "{\"id\":");
        json_append_string(&b, c->id, strlen(c->id));
        BUF_LIT(&b, ",\"object\":\"file\",\"deleted\":true}");
        batch_respond_buf(req, 200, &b);
    } else {
        struct state_batch x;
        if (state_batch_get(state, c->id, &x, &err) == 0) {
            batch_json(&b, &x);
            batch_respond_buf(req, 200, &b);
        } else {
            api_respond_code(req, err.code, err.msg);
        }
    }
    free(c->body);
    free(call);
}

static struct batch_call *batch_call_new(struct http_request *req, struct api_state *st,
                                         enum jobs_cmd_kind kind)
{
    struct batch_call *call = calloc(1, sizeof *call);
    if (!call) {
        http_respond_error(req, 500, NULL, "out of memory");
        return NULL;
    }
    call->req = req;
    call->st = st;
    call->mb = http_request_mailbox(req);
    call->msg.fn = batch_deliver;
    call->cmd.kind = kind;
    call->cmd.done = batch_cmd_done;
    call->cmd.arg = call;
    snprintf(call->cmd.tenant, sizeof call->cmd.tenant, "%s", batch_tenant(st, req));
    return call;
}

/* ---- lists: OpenAI's cursor pages ---- */

/* A page of a list: the objects after `after` (an id; "" from the first),
 * at most `limit`; has_more when one more would follow. */
struct batch_page {
    struct buf b;
    char after[64];
    bool passed;                      /* `after` was seen (or none given) */
    int limit, n;
    bool more;
    char first[48], last[48];
};

static void batch_bad(struct http_request *req, const char *param, const char *fmt,
                      const char *arg)
{
    http_request_set_error_param(req, param);
    http_respond_error(req, 400, NULL, fmt, arg);
}

/* `after` and `limit` (1..max, default def) from the query: 0, or -1 after
 * answering 400 naming the parameter. */
static int batch_page_start(struct http_request *req, struct batch_page *p, int def, int max)
{
    memset(p, 0, sizeof *p);
    char limit_s[16] = "";
    int ra = http_request_query_param(req, "after", p->after, sizeof p->after);
    int rl = http_request_query_param(req, "limit", limit_s, sizeof limit_s);
    char *e = NULL;
    long limit = rl == 1 ? strtol(limit_s, &e, 10) : def;
    if (ra < 0) {
        batch_bad(req, "after", "after: %s", "too long or a malformed %-escape");
        return -1;
    }
    if (rl < 0 || (rl == 1 && (!e || *e || limit < 1 || limit > max))) {
        char msg[64];
        snprintf(msg, sizeof msg, "must be an integer from 1 to %d", max);
        batch_bad(req, "limit", "limit: %s", msg);
        return -1;
    }
    p->passed = ra != 1 || !p->after[0];
    p->limit = (int)limit;
    BUF_LIT(&p->b, "{\"object\":\"list\",\"data\":[");
    return 0;
}

/* Whether the object of that id (one the caller may see, in list order)
 * goes on the page: then the caller appends its JSON. */
static bool batch_page_take(struct batch_page *p, const char *id)
{
    if (!p->passed) {
        p->passed = strcmp(id, p->after) == 0;
        return false;
    }
    if (p->n == p->limit) {
        p->more = true;
        return false;
    }
    if (p->n++)
        BUF_LIT(&p->b, ",");
    else
        snprintf(p->first, sizeof p->first, "%s", id);
    snprintf(p->last, sizeof p->last, "%s", id);
    return true;
}

/* The page answered: 200, or the listing's failure (rc). */
static void batch_page_end(struct http_request *req, struct batch_page *p, int rc,
                           const struct error *err)
{
    if (rc) {
        buf_free(&p->b);
        api_respond_code(req, rc, err->msg);
        return;
    }
    BUF_LIT(&p->b, "],\"first_id\":");
    batch_append_str_or_null(&p->b, p->first);
    BUF_LIT(&p->b, ",\"last_id\":");
    batch_append_str_or_null(&p->b, p->last);
    buf_appendf(&p->b, ",\"has_more\":%s}", p->more ? "true" : "false");
    batch_respond_buf(req, 200, &p->b);
}

/* ---- /v1/files ---- */

/* OpenAI's expiration policy (a file's `expires_after`, a batch's
 * `output_expires_after`): anchor "created_at", seconds from an hour to
 * 30 days. `seconds` < 0: not an integer. The seconds, 0 when no policy
 * was given, or -1 after answering 400 naming the field. */
#define BATCH_EXPIRY_MIN_S 3600
#define BATCH_EXPIRY_MAX_S 2592000
static int64_t batch_expiry(struct http_request *req, const char *field, bool shaped,
                            const char *anchor, bool has_anchor, int64_t seconds, bool has_seconds)
{
    char param[64];
    if (!shaped || !has_anchor || !has_seconds) {
        snprintf(param, sizeof param, "%s", field);
        http_request_set_error_param(req, param);
        http_respond_error(req, 400, NULL, "%s: must have `anchor` (\"created_at\") and "
                           "`seconds` (%d to %d)", field, BATCH_EXPIRY_MIN_S, BATCH_EXPIRY_MAX_S);
        return -1;
    }
    if (!anchor || strcmp(anchor, "created_at") != 0) {
        snprintf(param, sizeof param, "%s.anchor", field);
        http_request_set_error_param(req, param);
        http_respond_error(req, 400, NULL, "%s.anchor: must be \"created_at\" (the only anchor)",
                           field);
        return -1;
    }
    if (seconds < BATCH_EXPIRY_MIN_S || seconds > BATCH_EXPIRY_MAX_S) {
        snprintf(param, sizeof param, "%s.seconds", field);
        http_request_set_error_param(req, param);
        http_respond_error(req, 400, NULL, "%s.seconds: must be an integer from %d (an hour) to "
                           "%d (30 days)", field, BATCH_EXPIRY_MIN_S, BATCH_EXPIRY_MAX_S);
        return -1;
    }
    return seconds;
}

/* A form field's text as a whole number of seconds; -1 when it is not one. */
static int64_t batch_form_seconds(const struct multipart_part *p)
{
    int64_t v = 0;
    if (!p->len || p->len > 12)
        return -1;
    for (size_t i = 0; i < p->len; i++) {
        if (p->data[i] < '0' || p->data[i] > '9')
            return -1;
        v = v * 10 + (p->data[i] - '0');
    }
    return v;
}

/* The parts of an upload's form read at most (4 fields, and room for a
 * client's own). */
#define BATCH_FORM_PARTS 8

/* POST /v1/files: multipart with `purpose` (batch) and `file`. */
static void batch_file_upload(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    (void)m;
    struct jobs *jobs = batch_jobs(req, st);
    if (!jobs)
        return;
    size_t hl, len;
    const char *ct = http_request_header(req, "Content-Type", &hl);
    const char *body = http_request_body(req, &len);
    struct multipart_part parts[BATCH_FORM_PARTS + 1];
    int n = multipart_parse(ct, ct ? hl : 0, body ? body : "", len, parts, BATCH_FORM_PARTS + 1);
    if (n < 0) {
        http_respond_error(req, 400, NULL, "the body must be multipart/form-data with the "
                                           "fields `purpose` and `file`");
        return;
    }
    /* Parts past those read were skipped unsaid: a `file` given twice
     * went unseen, and fields after the eighth part were "missing". */
    if (n > BATCH_FORM_PARTS) {
        http_respond_error(req, 400, NULL, "the form has more than %d parts: send `purpose`, "
                           "`file` and, if you like, `expires_after[anchor]` and "
                           "`expires_after[seconds]`", BATCH_FORM_PARTS);
        return;
    }
    const struct multipart_part *purpose = NULL, *file = NULL, *anchor = NULL, *secs = NULL;
    static const char *const fields[] = {"purpose", "file", "expires_after[anchor]",
                                         "expires_after[seconds]"};
    const struct multipart_part **slot[] = {&purpose, &file, &anchor, &secs};
    for (int i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof fields / sizeof fields[0]; k++) {
            if (strcmp(parts[i].name, fields[k]) != 0)
                continue;
            if (*slot[k]) {   /* which one counts would be the parser's whim */
                http_request_set_error_param(req, fields[k]);
                http_respond_error(req, 400, NULL, "%s: given twice", fields[k]);
                return;
            }
            *slot[k] = &parts[i];
        }
    if (file && file->filename_cut) {
        http_request_set_error_param(req, "file");
        http_respond_error(req, 400, NULL, "file: its filename is over %zu bytes, holds a "
                           "control character, or its quote is not closed",
                           sizeof file->filename - 1);
        return;
    }
    /* It goes back out in JSON: not UTF-8, it made the tenant's file list
     * invalid JSON. */
    if (file && !utf8_valid(file->filename, strlen(file->filename))) {
        http_request_set_error_param(req, "file");
        http_respond_error(req, 400, NULL, "file: its filename is not UTF-8");
        return;
    }
    if (!purpose || purpose->len != 5 || memcmp(purpose->data, "batch", 5) != 0) {
        http_request_set_error_param(req, "purpose");
        http_respond_error(req, 400, NULL, "purpose: %s%.*s%s (batchgate stores files for the "
                           "Batch API only: purpose must be \"batch\")",
                           purpose ? "\"" : "missing", purpose ? (int)(purpose->len > 40 ? 40 :
                                                                       purpose->len) : 0,
                           purpose ? purpose->data : "", purpose ? "\" is not supported" : "");
        return;
    }
    if (!file) {
        http_request_set_error_param(req, "file");
        http_respond_error(req, 400, NULL, "file: missing (the JSONL file of requests)");
        return;
    }
    int64_t expires = 0;
    if (anchor || secs) {
        char anchor_text[16] = "";
        if (anchor && anchor->len < sizeof anchor_text)
            memcpy(anchor_text, anchor->data, anchor->len);
        expires = batch_expiry(req, "expires_after", true, anchor_text, anchor != NULL,
                               secs ? batch_form_seconds(secs) : -1, secs != NULL);
        if (expires < 0)
            return;
    }
    if (file->len > jobs_max_file_bytes(jobs)) {
        http_request_set_error_param(req, "file");
        http_respond_error(req, 413, NULL, "file: %zu bytes, over jobs.max_file_bytes (%zu)",
                           file->len, jobs_max_file_bytes(jobs));
        return;
    }
    struct batch_call *call = batch_call_new(req, st, JOBS_CMD_FILE_CREATE);
    if (!call)
        return;
    call->cmd.body = malloc(file->len ? file->len : 1);
    if (!call->cmd.body) {
        free(call);
        http_respond_error(req, 500, NULL, "out of memory for a file of %zu bytes", file->len);
        return;
    }
    memcpy(call->cmd.body, file->data, file->len);
    call->cmd.body_len = file->len;
    snprintf(call->cmd.purpose, sizeof call->cmd.purpose, "batch");
    call->cmd.expires_s = expires;
    snprintf(call->cmd.filename, sizeof call->cmd.filename, "%s",
             file->filename[0] ? file->filename : "upload.jsonl");
    jobs_command(jobs, &call->cmd);
}

struct batch_file_list {
    struct batch_page page;
    const struct api_state *st;
    const struct http_request *req;
    char purpose[32];                 /* "": every purpose */
};

static void batch_file_list_one(const struct state_file *f, void *arg)
{
    struct batch_file_list *l = arg;
    if (!batch_may_see(l->st, l->req, f->tenant) || !batch_file_live(f) ||
        (l->purpose[0] && strcmp(l->purpose, f->purpose) != 0))
        return;
    if (batch_page_take(&l->page, f->id))
        batch_file_json(&l->page.b, f);
}

/* GET /v1/files?purpose=&order=&after=&limit=: newest first unless
 * order=asc; at most 10,000 a page, as OpenAI. */
static void batch_file_list(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    (void)m;
    if (!batch_jobs(req, st))
        return;
    static const char *const known[] = {"purpose", "limit", "order", "after"};
    if (api_query_check(req, known, 4, true, "GET /v1/files") < 0)
        return;
    struct batch_file_list l = {.st = st, .req = req};
    char order[8] = "";
    int ro = http_request_query_param(req, "order", order, sizeof order);
    int rp = http_request_query_param(req, "purpose", l.purpose, sizeof l.purpose);
    if (ro < 0 || (ro == 1 && strcmp(order, "asc") != 0 && strcmp(order, "desc") != 0)) {
        batch_bad(req, "order", "order: %s", "must be \"asc\" or \"desc\"");
        return;
    }
    if (rp < 0) {
        batch_bad(req, "purpose", "purpose: %s", "too long or a malformed %-escape");
        return;
    }
    if (batch_page_start(req, &l.page, 10000, 10000))
        return;
    struct error err = {0};
    int rc = state_file_list(jobs_state(st->jobs), ro == 1 && strcmp(order, "asc") == 0,
                             batch_file_list_one, &l, &err);
    batch_page_end(req, &l.page, rc, &err);
}

/* GET /v1/files/{id} */
static void batch_file_get(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    struct state_file f;
    if (!batch_jobs(req, st) || batch_get_file(req, m, st, &f))
        return;
    struct buf b = BUF_INIT;
    batch_file_json(&b, &f);
    batch_respond_buf(req, 200, &b);
}

/* GET /v1/files/{id}/content */
static void batch_file_content(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    struct state_file f;
    if (!batch_jobs(req, st) || batch_get_file(req, m, st, &f))
        return;
    char why[600];
    if (api_respond_file(req, f.path, f.bytes, "application/octet-stream", why,
                         sizeof why) < 0)
        http_respond_error(req, 500, NULL, "file %s: %s", f.id, why);
}

/* DELETE /v1/files/{id} */
static void batch_file_delete(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    struct state_file f;
    if (!batch_jobs(req, st) || batch_get_file(req, m, st, &f))
        return;
    struct batch_call *call = batch_call_new(req, st, JOBS_CMD_FILE_DELETE);
    if (!call)
        return;
    snprintf(call->cmd.id, sizeof call->cmd.id, "%s", f.id);
    jobs_command(st->jobs, &call->cmd);
}

/* ---- /v1/batches ---- */

/* OpenAI's metadata: string values; keys of at most 64 characters, values
 * of at most 512 (typed clients read a map of strings: a 1 or a nested
 * object was echoed as it came). */
static size_t batch_chars(const char *s)
{
    size_t n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;   /* UTF-8: continuation bytes not counted */
    return n;
}

static bool batch_metadata_pairs_ok(json_t *meta)
{
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v)
        if (batch_chars(k) > 64 || !json_is_string(v) || batch_chars(json_string_value(v)) > 512)
            return false;
    return true;
}

/* POST /v1/batches */
static void batch_create(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    (void)m;
    if (!batch_jobs(req, st))
        return;
    json_t *root = api_body_object(req, false, "{\"input_file_id\", \"endpoint\", "
                                   "\"completion_window\"}");
    if (!root)
        return;
    const char *fid = json_string_value(json_object_get(root, "input_file_id"));
    const char *ep = json_string_value(json_object_get(root, "endpoint"));
    const char *win = json_string_value(json_object_get(root, "completion_window"));
    json_t *meta = json_object_get(root, "metadata");
    bool ep_ok = false;
    for (size_t i = 0; ep && i < sizeof batch_endpoints / sizeof batch_endpoints[0]; i++)
        ep_ok |= strcmp(ep, batch_endpoints[i]) == 0;
    char *meta_text = json_is_object(meta) ? json_dumps(meta, JSON_COMPACT) : NULL;
    json_t *oe = json_object_get(root, "output_expires_after");
    json_t *oe_anchor = json_object_get(oe, "anchor"), *oe_secs = json_object_get(oe, "seconds");
    int64_t output_expires = 0;
    struct state_file f;
    struct error err = {0};
    if (!fid || !fid[0] || strlen(fid) >= sizeof f.id) {
        batch_bad(req, "input_file_id", "input_file_id: %s", "missing (the id of a file "
                  "uploaded with purpose \"batch\")");
    } else if (!ep_ok) {
        batch_bad(req, "endpoint", "endpoint: %s", "must be \"/v1/chat/completions\", "
                  "\"/v1/completions\" or \"/v1/embeddings\"");
    } else if (!win || strcmp(win, "24h") != 0) {
        batch_bad(req, "completion_window", "completion_window: %s", "must be \"24h\"");
    } else if (meta && !json_is_null(meta) &&
               (!json_is_object(meta) || json_object_size(meta) > 16 || !meta_text ||
                strlen(meta_text) >= sizeof ((struct jobs_cmd *)0)->metadata ||
                !batch_metadata_pairs_ok(meta))) {
        batch_bad(req, "metadata", "metadata: %s", "must be an object of at most 16 keys of "
                  "at most 64 characters, each value a string of at most 512 (and under 2 KiB "
                  "in all)");
    } else if (oe && !json_is_null(oe) &&
               (output_expires = batch_expiry(req, "output_expires_after", json_is_object(oe),
                                              json_string_value(oe_anchor), oe_anchor != NULL,
                                              json_is_integer(oe_secs) ?
                                              json_integer_value(oe_secs) : -1,
                                              oe_secs != NULL)) < 0) {
        /* answered */
    } else if (state_file_get(jobs_state(st->jobs), fid, &f, &err) != 0 ||
               !batch_may_see(st, req, f.tenant) || !batch_file_live(&f)) {
        http_request_set_error_param(req, "input_file_id");
        http_respond_error(req, 404, NULL, "No such File object: %s", fid);
    } else if (strcmp(f.purpose, "batch") != 0) {
        batch_bad(req, "input_file_id", "input_file_id: %s", "the file's purpose is not "
                  "\"batch\" (a batch's output cannot be its input)");
    } else {
        struct batch_call *call = batch_call_new(req, st, JOBS_CMD_BATCH_CREATE);
        if (call) {
            snprintf(call->cmd.file_id, sizeof call->cmd.file_id, "%s", fid);
            snprintf(call->cmd.endpoint, sizeof call->cmd.endpoint, "%s", ep);
            snprintf(call->cmd.window, sizeof call->cmd.window, "%s", win);
            if (meta_text)
                snprintf(call->cmd.metadata, sizeof call->cmd.metadata, "%s", meta_text);
            call->cmd.expires_s = output_expires;
            jobs_command(st->jobs, &call->cmd);
        }
    }
    free(meta_text);
    json_decref(root);
}

/* GET /v1/batches/{id} */
static void batch_get(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    struct state_batch x;
    if (!batch_jobs(req, st) || batch_get_batch(req, m, st, &x))
        return;
    struct buf b = BUF_INIT;
    batch_json(&b, &x);
    batch_respond_buf(req, 200, &b);
}

/* POST /v1/batches/{id}/cancel */
static void batch_cancel(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    struct state_batch x;
    if (!batch_jobs(req, st) || batch_get_batch(req, m, st, &x))
        return;
    struct batch_call *call = batch_call_new(req, st, JOBS_CMD_BATCH_CANCEL);
    if (!call)
        return;
    snprintf(call->cmd.id, sizeof call->cmd.id, "%s", x.id);
    jobs_command(st->jobs, &call->cmd);
}

struct batch_list {
    struct batch_page page;
    const struct api_state *st;
    const struct http_request *req;
};

static void batch_list_one(const struct state_batch *x, void *arg)
{
    struct batch_list *l = arg;
    if (batch_may_see(l->st, l->req, x->tenant) && batch_page_take(&l->page, x->id))
        batch_json(&l->page.b, x);
}

/* GET /v1/batches?after=&limit=: newest first, as OpenAI lists them. */
static void batch_list(struct http_request *req, const struct route_match *m, void *ctx)
{
    struct api_state *st = ctx;
    (void)m;
    if (!batch_jobs(req, st))
        return;
    static const char *const known[] = {"after", "limit"};
    if (api_query_check(req, known, 2, true, "GET /v1/batches") < 0)
        return;
    struct batch_list l = {.st = st, .req = req};
    if (batch_page_start(req, &l.page, 20, 100))
        return;
    struct error err = {0};
    int rc = state_batch_list(jobs_state(st->jobs), batch_list_one, &l, &err);
    batch_page_end(req, &l.page, rc, &err);
}

int api_batch_register(struct router *r, struct api_state *st, struct error *err)
{
    static const struct api_route routes[] = {
        {HTTP_M_POST, "/v1/files", batch_file_upload, NULL},
        {HTTP_M_GET, "/v1/files", batch_file_list, NULL},
        {HTTP_M_GET, "/v1/files/{id}", batch_file_get, NULL},
        {HTTP_M_GET, "/v1/files/{id}/content", batch_file_content, NULL},
        {HTTP_M_DELETE, "/v1/files/{id}", batch_file_delete, NULL},
        {HTTP_M_POST, "/v1/batches", batch_create, NULL},
        {HTTP_M_GET, "/v1/batches", batch_list, NULL},
        {HTTP_M_GET, "/v1/batches/{id}", batch_get, NULL},
        {HTTP_M_POST, "/v1/batches/{id}/cancel", batch_cancel, NULL},
    };
    return api_routes_add(r, st, routes, sizeof routes / sizeof routes[0], err);
}
