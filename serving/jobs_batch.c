/* jobs_batch.c - OpenAI's Batch API on the jobs thread (docs/LLM.md "Batch
 * API"): files, batches, and the batches being run (up to
 * JOBS_BATCHES_ACTIVE side by side, taking turns in the caller).
 *
 * The jobs runner's thread is the one writer of the state database, so the
 * Batch API's writes are its commands and its pump, as the jobs' are: an
 * upload is written and fsync'ed and its row inserted before the answer; a
 * batch's input lines are validated whole at creation (a bad line is a 400
 * naming the line and the field, and no batch is made); while a batch runs
 * its lines go to the caller (llmbatch.h), which sends each only on an
 * endpoint's idle capacity, and each line's result is one transaction as
 * the line ends (a row of batch_results and the batch's counts). A line
 * whose result is committed never runs again (the row's key refuses a
 * second one); a line in flight at a crash runs again after the restart.
 * At the end the output and error files are written from those rows, in
 * line order, and the batch's final status and their ids committed
 * together, the rows dropped in the same transaction. */
#include "serving/jobs_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "common/hash.h"
#include "common/jsonfmt.h"
#include "common/log.h"
#include "common/tokens.h"
#include "serving/lifecycle.h"
#include "serving/llmbody.h"
#include "serving/llmpool.h"
#include "serving/modelstats.h"

/* Appends a string literal. */
#define JOBS_LIT(b, lit) buf_append((b), (lit), sizeof(lit) - 1)

/* Lines handed to the caller at once: those beyond what the endpoints take
 * wait there, in order, for idle capacity. */
#define JOBS_BATCH_WINDOW 256
/* OpenAI's limit per batch. */
#define JOBS_BATCH_MAX_LINES 50000

static int64_t jobs_batch_now_s(void) { return (int64_t)time(NULL); }

/* ---- the caller's side ---- */

void jobs_batch_returned(struct llmbatch_line *l, void *arg)
{
    struct jobs *j = arg;
    pthread_mutex_lock(&j->mu);
    l->next = j->returned;
    j->returned = l;
    j->events++;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void jobs_batch_line_free(struct llmbatch_line *l)
{
    free(l->body);
    free(l->arg);
    buf_free(&l->answer);
    free(l);
}

/* ---- validation ---- */

/* custom_ids seen (a set of strings by hash: open addressing). */
struct jobs_idset {
    char **slot;
    size_t cap, n;
};

static uint64_t jobs_idset_hash(const char *s) { return hash_str(s); }

/* 1: added; 0: already there; -1: no memory. */
static int jobs_idset_add(struct jobs_idset *set, const char *s)
{
    if (set->n * 2 >= set->cap) {
        size_t cap = set->cap ? set->cap * 2 : 1024;
        char **slot = calloc(cap, sizeof *slot);
        if (!slot)
            return -1;
        for (size_t i = 0; i < set->cap; i++)
            if (set->slot[i])
                for (size_t k = jobs_idset_hash(set->slot[i]) & (cap - 1);; k = (k + 1) & (cap - 1))
                    if (!slot[k]) {
                        slot[k] = set->slot[i];
                        break;
                    }
        free(set->slot);
        set->slot = slot;
        set->cap = cap;
    }
    size_t k = jobs_idset_hash(s) & (set->cap - 1);
    for (; set->slot[k]; k = (k + 1) & (set->cap - 1))
        if (strcmp(set->slot[k], s) == 0)
            return 0;
    if (!(set->slot[k] = strdup(s)))
        return -1;
    set->n++;
    return 1;
}

static void jobs_idset_free(struct jobs_idset *set)
{
    for (size_t i = 0; i < set->cap; i++)
        free(set->slot[i]);
    free(set->slot);
}

/* Every non-blank line of the input: {"custom_id", "method": "POST", "url"
 * (the batch's endpoint), "body": {"model", ...}}, custom_ids unique. The
 * count in *total; else 400 in c (the line's number and the field). */
/* Whether a batch may name `model` beside those seen (it is added): -1 for
 * a model past JOBS_BATCH_MAX_POOLS (its lines failed "does not exist"). */
static int jobs_batch_model_seen(char (*seen)[MODEL_NAME_MAX], int *n, const char *model)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(seen[i], model) == 0)
            return 0;
    if (*n == JOBS_BATCH_MAX_POOLS)
        return -1;
    snprintf(seen[(*n)++], MODEL_NAME_MAX, "%s", model);
    return 0;
}

static int jobs_batch_validate(const char *path, const char *endpoint, struct jobs_cmd *c,
                               int64_t *total)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(c->error, sizeof c->error, "cannot read the input file: %s", strerror(errno));
        return -BG_EIO;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t n = 0;
    int rc = 0;
    struct jobs_idset ids = {0};
    char models[JOBS_BATCH_MAX_POOLS][MODEL_NAME_MAX];
    int nmodels = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) >= 0) {
        if (jobs_blank(line, (size_t)len))
            continue;
        n++;
        json_error_t je;
        /* A line of more values than any call needs is not parsed (each
         * value a node of ~50 bytes: jsonfmt.h); the batch fails naming
         * it, and the run never reads it either. */
        uint64_t values = json_values_at_least(line, (size_t)len);
        json_t *root = values <= JSON_VALUES_ANY ? json_loadb(line, (size_t)len, 0, &je) : NULL;
        if (!root && values > JSON_VALUES_ANY)
            snprintf(je.text, sizeof je.text, "it holds %llu JSON values, more than %u: not read",
                     (unsigned long long)values, JSON_VALUES_ANY);
        const char *param = NULL, *why = NULL;
        char whybuf[200];
        json_t *cid = json_object_get(root, "custom_id");
        json_t *method = json_object_get(root, "method");
        json_t *url = json_object_get(root, "url");
        json_t *body = json_object_get(root, "body");
        if (!json_is_object(root)) {
            snprintf(whybuf, sizeof whybuf, "not a JSON object%s%s", root ? "" : ": ",
                     root ? "" : je.text);
            why = whybuf;
        } else if (!json_is_string(cid) || json_string_length(cid) == 0) {
            param = "custom_id";
            why = !cid ? "missing (each line needs a custom_id, a string unique in the file)"
                       : "must be a non-empty string, unique in the file";
        } else if (!json_is_string(method) || strcmp(json_string_value(method), "POST") != 0) {
            param = "method";
            why = "must be \"POST\"";
        } else if (!json_is_string(url) || strcmp(json_string_value(url), endpoint) != 0) {
            param = "url";
            snprintf(whybuf, sizeof whybuf, "must be the batch's endpoint, \"%s\"", endpoint);
            why = whybuf;
        } else if (!json_is_object(body)) {
            param = "body";
            why = "must be a JSON object (the request)";
        } else if (!json_is_string(json_object_get(body, "model"))) {
            param = "body.model";
            why = json_object_get(body, "model") ? "must be a string (the model's name)"
                                                 : "missing (the model each request is for)";
        } else if (jobs_batch_model_seen(models, &nmodels,
                                         json_string_value(json_object_get(body, "model"))) <
                   0) {
            param = "body.model";
            snprintf(whybuf, sizeof whybuf, "\"%.100s\" is a model more than the %d one batch "
                     "may name (split the file by model)",
                     json_string_value(json_object_get(body, "model")), JOBS_BATCH_MAX_POOLS);
            why = whybuf;
        } else {
            int added = jobs_idset_add(&ids, json_string_value(cid));
            if (added < 0) {
                rc = -BG_ENOMEM;
                snprintf(c->error, sizeof c->error, "out of memory");
            } else if (added == 0) {
                param = "custom_id";
                snprintf(whybuf, sizeof whybuf, "\"%.100s\" is used by an earlier line too "
                         "(custom_ids must be unique)", json_string_value(cid));
                why = whybuf;
            }
        }
        json_decref(root);
        if (why) {
            rc = -BG_EINVAL;
            snprintf(c->param, sizeof c->param, "%s", param ? param : "line");
            snprintf(c->error, sizeof c->error, "the input file's line %lld: %s%s%s", (long long)n,
                     param ? param : "", param ? ": " : "", why);
        }
        if (rc == 0 && n > JOBS_BATCH_MAX_LINES) {
            rc = -BG_EINVAL;
            snprintf(c->error, sizeof c->error, "the input file has more than %d requests; "
                     "split it into several batches", JOBS_BATCH_MAX_LINES);
        }
    }
    free(line);
    fclose(f);
    jobs_idset_free(&ids);
    if (rc == 0 && n == 0) {
        rc = -BG_EINVAL;
        snprintf(c->param, sizeof c->param, "input_file_id");
        snprintf(c->error, sizeof c->error, "the input file has no requests");
    }
    *total = n;
    return rc;
}

/* ---- commands ---- */

/* When a file created at `created` with a lifetime of `s` seconds (0: the
 * default, jobs.file_expiry_s) expires; 0: never. */
static int64_t jobs_batch_expires_at(const struct jobs *j, int64_t created, int64_t s)
{
    if (s <= 0)
        s = j->file_expiry_s;
    return s > 0 ? created + s : 0;
}

/* The file's row, then its bytes (the row first: a crash between leaves
 * bytes no row names, never a row without its bytes). A batch reading it
 * has its own link (jobs_batch_cmd_create). */
static int jobs_batch_file_remove(struct jobs *j, const struct state_file *f, struct error *err)
{
    int rc = state_file_delete(j->st, f->id, err);
    if (rc == 0)
        unlink(f->path);
    return rc;
}

static void jobs_batch_cmd_file_create(struct jobs *j, struct jobs_cmd *c)
{
    struct state_file f;
    memset(&f, 0, sizeof f);
    jobs_new_id("file-", f.id, sizeof f.id);
    snprintf(f.tenant, sizeof f.tenant, "%s", c->tenant[0] ? c->tenant : "default");
    snprintf(f.purpose, sizeof f.purpose, "%s", c->purpose);
    snprintf(f.filename, sizeof f.filename, "%s", c->filename);
    f.bytes = (int64_t)c->body_len;
    f.created_at = jobs_batch_now_s();
    f.expires_at = jobs_batch_expires_at(j, f.created_at, c->expires_s);
    snprintf(f.path, sizeof f.path, "%.900s/%s.jsonl", j->bdir, f.id);
    struct error err = {0};
    int rc = jobs_write_file(f.path, c->body ? c->body : "", c->body_len, &err);
    if (rc == 0) {
        jobs_sync_dir(j->bdir);
        if ((rc = state_file_insert(j->st, &f, &err)) != 0)
            unlink(f.path);
    }
    free(c->body);
    c->body = NULL;
    c->status = rc;
    if (rc) {
        snprintf(c->error, sizeof c->error, "%.500s", err.msg);
        return;
    }
    snprintf(c->id, sizeof c->id, "%s", f.id);
}

static void jobs_batch_cmd_file_delete(struct jobs *j, struct jobs_cmd *c)
{
    struct state_file f;
    struct error err = {0};
    int rc = state_file_get(j->st, c->id, &f, &err);
    if (rc == 0)
        rc = jobs_batch_file_remove(j, &f, &err);
    c->status = rc;
    if (rc)
        snprintf(c->error, sizeof c->error, "%.500s", err.msg);
}

static void jobs_batch_cmd_create(struct jobs *j, struct jobs_cmd *c)
{
    struct state_file f;
    struct error err = {0};
    int rc = state_file_get(j->st, c->file_id, &f, &err);
    if (rc) {
        c->status = rc;
        snprintf(c->param, sizeof c->param, "input_file_id");
        snprintf(c->error, sizeof c->error, "%.500s", err.msg);
        return;
    }
    int64_t total = 0;
    if ((c->status = jobs_batch_validate(f.path, c->endpoint, c, &total)) != 0)
        return;
    struct state_batch b;
    memset(&b, 0, sizeof b);
    jobs_new_id("batch_", b.id, sizeof b.id);
    snprintf(b.tenant, sizeof b.tenant, "%s", c->tenant[0] ? c->tenant : "default");
    snprintf(b.endpoint, sizeof b.endpoint, "%s", c->endpoint);
    snprintf(b.input_file_id, sizeof b.input_file_id, "%s", f.id);
    snprintf(b.completion_window, sizeof b.completion_window, "%s", c->window);
    snprintf(b.metadata, sizeof b.metadata, "%s", c->metadata[0] ? c->metadata : "null");
    b.status = STATE_BATCH_IN_PROGRESS;
    b.at[STATE_BATCH_AT_CREATED] = b.at[STATE_BATCH_IN_PROGRESS] = jobs_batch_now_s();
    b.at[STATE_BATCH_AT_EXPIRES] = b.at[STATE_BATCH_AT_CREATED] + 24 * 3600;
    b.total = total;
    b.output_expires_s = c->expires_s > 0 ? c->expires_s : j->file_expiry_s;
    /* The batch reads its own name of the input: deleting the file
     * (DELETE /v1/files/{id}) while it runs takes nothing from it. */
    snprintf(b.input_path, sizeof b.input_path, "%.900s/%s.input.jsonl", j->bdir, b.id);
    if (link(f.path, b.input_path) != 0)
        snprintf(b.input_path, sizeof b.input_path, "%s", f.path);
    else
        jobs_sync_dir(j->bdir);
    if ((rc = state_batch_insert(j->st, &b, &err)) != 0) {
        if (strcmp(b.input_path, f.path) != 0)
            unlink(b.input_path);
        c->status = rc;
        snprintf(c->error, sizeof c->error, "%.500s", err.msg);
        return;
    }
    snprintf(c->id, sizeof c->id, "%s", b.id);
    c->status = 0;
    j->batches_look = true;
    log_info("batch %s: %lld requests to %s, tenant %s", b.id, (long long)total, b.endpoint,
             b.tenant);
}

static void jobs_batch_finalize(struct jobs *j, struct jobs_bcur *bc, int status,
                                const char *errors);

/* The running batch of that id, or NULL. */
static struct jobs_bcur *jobs_batch_slot(struct jobs *j, const char *id)
{
    for (int i = 0; i < JOBS_BATCHES_ACTIVE; i++)
        if (j->bcur[i].active && strcmp(j->bcur[i].b.id, id) == 0)
            return &j->bcur[i];
    return NULL;
}

int jobs_batch_running(const struct jobs *j)
{
    int n = 0;
    for (int i = 0; i < JOBS_BATCHES_ACTIVE; i++)
        n += j->bcur[i].active;
    return n;
}

static void jobs_batch_cmd_cancel(struct jobs *j, struct jobs_cmd *c)
{
    struct state_batch b;
    struct error err = {0};
    int rc = state_batch_get(j->st, c->id, &b, &err);
    if (rc) {
        c->status = rc;
        snprintf(c->error, sizeof c->error, "%.500s", err.msg);
        return;
    }
    if (b.status >= STATE_BATCH_COMPLETED && b.status != STATE_BATCH_CANCELLING) {
        c->status = -BG_EINVAL;
        c->http_status = 409;
        snprintf(c->error, sizeof c->error, "Cannot cancel a batch with status '%s'.",
                 state_batch_status_name(b.status));
        return;
    }
    /* Cancelling first, so that a crash before the end still ends it.
     * Refused (a locked or full database), the cancel is not taken: it
     * was answered 200, and the batch, its end refused too, was taken up
     * again as it was and ran to its end. The caller asks again (503). */
    rc = state_batch_set_status(j->st, b.id, STATE_BATCH_CANCELLING, jobs_batch_now_s(), &err);
    if (rc) {
        c->status = rc;
        snprintf(c->error, sizeof c->error, "the batch is not cancelled: %.450s", err.msg);
        return;
    }
    struct jobs_bcur *bc = jobs_batch_slot(j, b.id);
    if (bc) {
        jobs_batch_finalize(j, bc, STATE_BATCH_CANCELLED, NULL);
    } else {
        /* Not running now (waiting for a place, a quota, the database): the
         * lines it did before still go to its files (they were ended
         * without any, and lost). Its own group, as an overdue batch's. */
        struct jobs_bcur idle = {.active = true, .group = ++j->bgroups, .b = b};
        jobs_batch_finalize(j, &idle, STATE_BATCH_CANCELLED, NULL);
    }
    c->status = 0;
    snprintf(c->id, sizeof c->id, "%s", b.id);
}

void jobs_batch_cmd(struct jobs *j, struct jobs_cmd *c)
{
    c->status = 0;
    switch (c->kind) {
    case JOBS_CMD_FILE_CREATE:
        jobs_batch_cmd_file_create(j, c);
        break;
    case JOBS_CMD_FILE_DELETE:
        jobs_batch_cmd_file_delete(j, c);
        break;
    case JOBS_CMD_BATCH_CREATE:
        jobs_batch_cmd_create(j, c);
        break;
    case JOBS_CMD_BATCH_CANCEL:
        jobs_batch_cmd_cancel(j, c);
        break;
    default:
        c->status = -BG_EINTERNAL;
        snprintf(c->error, sizeof c->error, "unknown command");
    }
}

/* ---- the batches being run ---- */

static void jobs_batch_close(struct jobs *j, struct jobs_bcur *bc)
{
    for (int i = 0; i < bc->npools; i++)
        if (bc->pools[i].sm)
            served_release(bc->pools[i].sm);
    if (bc->in)
        fclose(bc->in);
    free(bc->done);
    free(bc->line);
    memset(bc, 0, sizeof *bc);
    j->batches_look = true;   /* a place to run another */
}

/* Whether a line's answer survives being streamed and assembled
 * (llmstream.h): chat or text completions asking for no tool calls and no
 * log probabilities. */
static bool jobs_batch_streamable(const char *endpoint, json_t *body)
{
    static const char *const whole[] = {"tools", "functions", "logprobs", "top_logprobs"};
    if (strcmp(endpoint, "/v1/chat/completions") && strcmp(endpoint, "/v1/completions"))
        return false;
    for (size_t i = 0; i < sizeof whole / sizeof whole[0]; i++) {
        json_t *v = json_object_get(body, whole[i]);
        if (v && !json_is_null(v) && !json_is_false(v))
            return false;
    }
    return true;
}

/* The pool a line names (its name or an alias), loaded and held until the
 * batch ends; NULL when there is none. */
static struct served_model *jobs_batch_pool(struct jobs *j, struct jobs_bcur *bc,
                                            const char *name)
{
    for (int i = 0; i < bc->npools; i++)
        if (strcmp(bc->pools[i].name, name) == 0)
            return bc->pools[i].sm;
    if (bc->npools == (int)(sizeof bc->pools / sizeof bc->pools[0]) || !j->serving)
        return NULL;
    char canon[MODEL_NAME_MAX] = "";
    int n = serving_count(j->serving);
    for (int i = 0; i < n && !canon[0]; i++) {
        struct served_model *sm = serving_acquire_at(j->serving, i);
        if (sm && sm->model.cfg.kind == MODEL_KIND_POOL &&
            model_config_answers_to(&sm->model.cfg, name))
            snprintf(canon, sizeof canon, "%s", sm->model.cfg.name);
        if (sm)
            served_release(sm);
    }
    struct served_model *sm = NULL;
    if (canon[0]) {
        struct error err = {0};
        sm = serving_acquire_loaded(j->serving, canon, strlen(canon), 0, &err);
        if (sm && !sm->pool) {
            served_release(sm);
            sm = NULL;
        }
        if (!sm)
            log_warn("batch %s: model %s: %s", bc->b.id, canon, err.msg);
    }
    struct jobs_bpool *bp = &bc->pools[bc->npools++];
    snprintf(bp->name, sizeof bp->name, "%s", name);
    bp->sm = sm;
    return sm;
}

/* ---- batch_tokens_per_day ---- */

/* A new UTC day starts every tenant's count again. */
static void jobs_btok_roll(struct jobs *j)
{
    int64_t day = (int64_t)time(NULL) / 86400;
    if (day == j->btok_day)
        return;
    j->btok_day = day;
    for (int i = 0; i < TENANTS_MAX; i++) {
        atomic_store(&j->btok_used[i], 0);
        if (j->btok_blocked[i] && j->tenants && i < j->tenants->n)
            log_info("tenant %s: a new UTC day: its batches send lines again "
                     "(batch_tokens_per_day)", j->tenants->t[i].name);
        j->btok_blocked[i] = false;
    }
}

static int64_t jobs_btok_quota(const struct jobs *j, int tenant)
{
    return j->tenants && tenant >= 0 && tenant < j->tenants->n
               ? j->tenants->t[tenant].batch_tokens_per_day
               : 0;
}

/* Whether the batch may hand the caller one more line under its tenant's
 * batch_tokens_per_day: the day's tokens so far, plus the lines of the
 * tenant's batches already handed over and this one, each counted as this
 * batch's largest line so far, stay within it (one line at a time until a
 * line has told). So the count passes the quota only by what lines in
 * flight use beyond the largest so far. A tenant that cannot fit another
 * line is blocked until midnight UTC: its batches give up their places
 * (jobs_batch_pump). */
static bool jobs_btok_room(struct jobs *j, const struct jobs_bcur *bc)
{
    int64_t quota = jobs_btok_quota(j, bc->tenant);
    if (quota <= 0)
        return true;
    jobs_btok_roll(j);
    if (j->btok_blocked[bc->tenant])
        return false;
    int inflight = 0;
    for (int i = 0; i < JOBS_BATCHES_ACTIVE; i++)
        if (j->bcur[i].active && j->bcur[i].tenant == bc->tenant)
            inflight += j->bcur[i].inflight;
    int64_t used = atomic_load(&j->btok_used[bc->tenant]);
    int64_t per_line = bc->tok_max;
    if (bc->tok_lines ? used + per_line * (inflight + 1) <= quota
                      : inflight == 0 && used < quota)
        return true;
    if (inflight == 0) {
        /* Said once, whether a line told its size or the day's tokens were
         * spent before any did (counted back from the ledger at start: the
         * batch stayed in_progress with not a word of why). */
        j->btok_blocked[bc->tenant] = true;
        if (bc->tok_lines)
            log_info("tenant %s: batch_tokens_per_day (%lld) reached (%lld today, lines of up "
                     "to %lld): its batches send no more lines until midnight UTC",
                     j->tenants->t[bc->tenant].name, (long long)quota, (long long)used,
                     (long long)per_line);
        else
            log_info("tenant %s: batch_tokens_per_day (%lld) reached (%lld today): its batches "
                     "send no more lines until midnight UTC", j->tenants->t[bc->tenant].name,
                     (long long)quota, (long long)used);
    }
    return false;
}

/* The tenant of that name is blocked today (no warning for a tenant no
 * longer configured: it runs as the default, jobs_tenant_index). The day
 * was rolled by the caller. */
static bool jobs_btok_blocked_name(const struct jobs *j, const char *name)
{
    int t = tenants_find(j->tenants, name);
    return j->btok_blocked[t >= 0 ? t : 0];
}

struct jobs_btok_restore {
    struct jobs *j;
    int64_t rows;
};

static void jobs_btok_restore_row(const struct state_usage_row *r, void *arg)
{
    struct jobs_btok_restore *br = arg;
    struct jobs *j = br->j;
    if (r->rows <= 0 || strcmp(r->cls, "offline") != 0 || !j->serving)
        return;
    int t = tenants_find(j->tenants, r->tenant);
    /* An LLM pool's offline rows are its batch lines' tokens (other
     * models' are job lines' rows). */
    if (t < 0 || jobs_btok_quota(j, t) <= 0 || !serving_is_pool(j->serving, r->model))
        return;
    atomic_fetch_add(&j->btok_used[t], r->rows);
    br->rows++;
}

/* At the runner's start: today's batch tokens from the usage ledger, so a
 * restart does not hand a tenant its day again (what a crash loses is the
 * ledger's last usage.flush_s). */
void jobs_btok_restore(struct jobs *j)
{
    bool any = false;
    for (int i = 0; j->tenants && i < j->tenants->n; i++)
        any |= jobs_btok_quota(j, i) > 0;
    if (!any || !j->st)
        return;
    jobs_btok_roll(j);
    int64_t now = (int64_t)time(NULL), midnight = now - now % 86400;
    struct jobs_btok_restore br = {j, 0};
    struct error err = {0};
    if (state_usage_query(j->st, midnight, now + 60, 86400,
                          STATE_USAGE_BY_TENANT | STATE_USAGE_BY_MODEL | STATE_USAGE_BY_CLASS,
                          NULL, jobs_btok_restore_row, &br, &err) < 0) {
        log_error("batch_tokens_per_day: cannot read today's usage (%s): the tenants' batch "
                  "tokens count from zero", err.msg);
        return;
    }
    for (int i = 0; i < j->tenants->n; i++)
        if (jobs_btok_quota(j, i) > 0 && atomic_load(&j->btok_used[i]) > 0)
            log_info("tenant %s: %lld batch tokens today (of batch_tokens_per_day %lld), from the "
                     "usage ledger", j->tenants->t[i].name,
                     (long long)atomic_load(&j->btok_used[i]),
                     (long long)jobs_btok_quota(j, i));
}

int64_t jobs_batch_tokens_today(struct jobs *j, int tenant)
{
    if (!j || tenant < 0 || tenant >= TENANTS_MAX)
        return 0;
    /* Read across the day's turn: yesterday's count is not today's. */
    return j->btok_day == (int64_t)time(NULL) / 86400 ? atomic_load(&j->btok_used[tenant]) : 0;
}

/* Bytes of results held at most (jobs_batch_hold): past it a refused
 * result is let go, and its line runs again when the batch is taken up. */
#define JOBS_HELD_MAX_BYTES (64u << 20)

/* A result committed (rc 0; 1: the line had one already): the line is done. */
static void jobs_batch_line_done(struct jobs *j, struct jobs_bcur *bc, int64_t line, bool ok,
                                 int rc, int model)
{
    jobs_db_ok(j);
    if (bc->done && line >= 1 && line <= bc->b.total)
        bc->done[line] = 1;
    if (rc != 0)
        return;
    if (ok)
        bc->b.completed++;
    else
        bc->b.failed++;
    /* job_lines_total: the pool's, as a job's lines are their model's. */
    if (model >= 0 && model < j->nmodels)
        atomic_fetch_add_explicit(&j->lines[model][ok ? 0 : 1], 1, memory_order_relaxed);
}

/* Keeps a result the database refused, to commit when the batch is taken
 * up again: the line was answered (and paid for, upstream); run again, it
 * was paid for twice, and again at each retry while the refusal lasted. */
static void jobs_batch_hold(struct jobs *j, const struct jobs_bcur *bc, int64_t line, bool ok,
                            const struct buf *res, int model)
{
    struct jobs_held *h = j->held_bytes + res->len <= JOBS_HELD_MAX_BYTES
                              ? malloc(sizeof *h + res->len)
                              : NULL;
    if (!h)
        return;   /* not kept: the line runs again */
    h->next = j->held;
    snprintf(h->batch_id, sizeof h->batch_id, "%s", bc->b.id);
    h->line = line;
    h->ok = ok;
    h->model = model;
    h->len = res->len;
    memcpy(h->body, res->data, res->len);
    j->held = h;
    j->held_bytes += res->len;
}

/* Commits the results held for bc's batch, first thing when it is taken
 * up again: 0, or the database's refusal (those not committed stay held). */
static int jobs_batch_commit_held(struct jobs *j, struct jobs_bcur *bc, struct error *err)
{
    for (struct jobs_held **p = &j->held; *p;) {
        struct jobs_held *h = *p;
        if (strcmp(h->batch_id, bc->b.id) != 0) {
            p = &h->next;
            continue;
        }
        int rc = state_batch_result_add(j->st, bc->b.id, h->line, h->ok, h->body, h->len, err);
        if (rc < 0)
            return rc;
        jobs_batch_line_done(j, bc, h->line, h->ok, rc, h->model);
        *p = h->next;
        j->held_bytes -= h->len;
        free(h);
    }
    return 0;
}

void jobs_batch_held_free(struct jobs *j)
{
    while (j->held) {
        struct jobs_held *h = j->held;
        j->held = h->next;
        j->held_bytes -= h->len;
        free(h);
    }
}

/* The line's result, committed: the line is done. */
static void jobs_batch_commit(struct jobs *j, struct jobs_bcur *bc, int64_t line, bool ok,
                              const struct buf *res, const struct served_model *sm)
{
    struct error err = {0};
    int model = sm ? served_index(sm) : -1;
    if (bc->stalled && !bc->stalled_oom) {
        /* Refused once: the lines still in flight are held without asking
         * again. Each asked waited out the busy timeout (5 s) while a lock
         * lasted, one after another: a window of lines held a SIGTERM, or a
         * cancel, for minutes. */
        jobs_batch_hold(j, bc, line, ok, res, model);
        return;
    }
    int rc = state_batch_result_add(j->st, bc->b.id, line, ok, res->data, res->len, &err);
    if (rc < 0) {
        /* Not done: the batch stops taking lines, and is taken up again
         * after a pause (jobs_batch_pump), which commits the results held
         * and runs the lines with none. It ended "completed" without them.
         * Said once a stall: every line in flight came back to the same
         * refusal (1,242 lines in 40 s on a full disk). */
        log_error("batch %s: line %lld: %s (the lines still in flight are not said)",
                  bc->b.id, (long long)line, err.msg);
        bc->stalled = true;
        bc->stalled_oom = false;
        jobs_batch_hold(j, bc, line, ok, res, model);
        return;
    }
    jobs_batch_line_done(j, bc, line, ok, rc, model);
}

/* {"id","custom_id","response":null,"error":{"code","message"}} */
static void jobs_batch_error_line(struct buf *out, const char *custom_id, const char *code,
                                  const char *msg)
{
    char id[48];
    jobs_new_id("batch_req_", id, sizeof id);
    JOBS_LIT(out, "{\"id\":");
    json_append_string(out, id, strlen(id));
    JOBS_LIT(out, ",\"custom_id\":");
    json_append_string(out, custom_id, strlen(custom_id));
    JOBS_LIT(out, ",\"response\":null,\"error\":{\"code\":");
    json_append_string(out, code, strlen(code));
    JOBS_LIT(out, ",\"message\":");
    json_append_string(out, msg, strlen(msg));
    JOBS_LIT(out, "}}\n");
}

/* A line back from the caller: its result line, its tokens counted. */
static void jobs_batch_collect_one(struct jobs *j, struct jobs_bcur *bc, struct llmbatch_line *l)
{
    const char *custom_id = l->arg;
    struct buf res = BUF_INIT;
    bool ok = false;
    if (l->status == 0) {
        char msg[700];
        snprintf(msg, sizeof msg, "model %s: %s (after %d tr%s)", l->sm->model.cfg.name, l->error,
                 l->tries, l->tries == 1 ? "y" : "ies");
        jobs_batch_error_line(&res, custom_id, "server_error", msg);
    } else {
        ok = l->status >= 200 && l->status < 300;
        json_t *ans = json_loadb(l->answer.data ? l->answer.data : "", l->answer.len, 0, NULL);
        json_t *usage = json_object_get(ans, "usage");
        int64_t prompt = 0, completion = 0;
        if (ok && json_is_object(usage)) {
            json_t *p = json_object_get(usage, "prompt_tokens");
            json_t *k = json_object_get(usage, "completion_tokens");
            prompt = json_is_integer(p) ? json_integer_value(p) : 0;
            completion = json_is_integer(k) ? json_integer_value(k) : 0;
            if (!tokens_reported_ok(prompt) || !tokens_reported_ok(completion))
                prompt = completion = 0;   /* not believed (common/tokens.h) */
            llmpool_tokens(l->sm->pool, l->endpoint, bc->tenant, prompt, completion);
            jobs_btok_roll(j);
            atomic_fetch_add(&j->btok_used[bc->tenant], prompt + completion);
            bc->tok_lines++;
            if (prompt + completion > bc->tok_max)
                bc->tok_max = prompt + completion;
        }
        /* The usage ledger: the line's tokens and time, as the tenant's
         * offline use of the pool (an online call's are online). */
        modelstats_call(l->sm->stats, l->endpoint >= 0 ? l->endpoint : 0, bc->tenant, true,
                        prompt + completion);
        char id[48], rid[48];
        jobs_new_id("batch_req_", id, sizeof id);
        jobs_new_id("req_", rid, sizeof rid);
        JOBS_LIT(&res, "{\"id\":");
        json_append_string(&res, id, strlen(id));
        JOBS_LIT(&res, ",\"custom_id\":");
        json_append_string(&res, custom_id, strlen(custom_id));
        buf_appendf(&res, ",\"response\":{\"status_code\":%d,\"request_id\":\"%s\",\"body\":",
                    l->status, rid);
        char *body = ans ? json_dumps(ans, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
        if (body)
            buf_append(&res, body, strlen(body));
        else
            json_append_string(&res, l->answer.data ? l->answer.data : "", l->answer.len);
        free(body);
        json_decref(ans);
        JOBS_LIT(&res, "},\"error\":null}\n");
    }
    jobs_batch_commit(j, bc, l->line, ok, &res, l->sm);
    buf_free(&res);
}

/* Takes the lines the caller handed back; lines taken back (cancel, stop)
 * are dropped: not done. */
static bool jobs_batch_collect(struct jobs *j)
{
    pthread_mutex_lock(&j->mu);
    struct llmbatch_line *l = j->returned;
    j->returned = NULL;
    pthread_mutex_unlock(&j->mu);
    bool any = l != NULL;
    while (l) {
        struct llmbatch_line *next = l->next;
        struct jobs_bcur *bc = NULL;
        for (int i = 0; i < JOBS_BATCHES_ACTIVE && !bc; i++)
            if (j->bcur[i].active && j->bcur[i].group == l->group)
                bc = &j->bcur[i];
        if (bc) {   /* (none: its batch ended, the line was taken back) */
            bc->inflight--;
            if (l->status != 0 || l->error[0])
                jobs_batch_collect_one(j, bc, l);
        }
        jobs_batch_line_free(l);
        l = next;
    }
    return any;
}

/* The batch's lines in flight back from the caller (their calls closed);
 * NULL: every batch's. */
static void jobs_batch_take_back(struct jobs *j, struct jobs_bcur *bc)
{
    if (j->caller)
        llmbatch_cancel_group(j->caller, bc ? bc->group : 0);
    jobs_batch_collect(j);
}

/* OpenAI's `errors` of a failed batch: one server_error. */
static void jobs_batch_errors(struct buf *out, const char *msg)
{
    static const char head[] = "{\"object\":\"list\",\"data\":[{\"code\":\"server_error\","
                               "\"message\":";
    static const char tail[] = ",\"param\":null,\"line\":null}]}";
    buf_append(out, head, sizeof head - 1);
    json_append_string(out, msg, strlen(msg));
    buf_append(out, tail, sizeof tail);   /* with its NUL: the text is used as a C string */
    out->len--;
}

/* The output and error files from the committed results. */
struct jobs_batch_files {
    struct buf out, err;
    FILE *in;                         /* an expired batch's input, read along; else NULL */
    char *text;                       /* its line read last (getline's) */
    size_t cap;
    int64_t read;                     /* its lines read (blank ones not counted) */
    int64_t total;
    int64_t unrun;                    /* its lines that never ran, written as errors */
};

/* An expired batch's lines that never ran go to its error file, as OpenAI
 * writes them (they were in no file: a client could not tell them from
 * lines it never sent), in input order among the lines that failed. Read
 * from its input, still there, up to line `upto`, which has a result of
 * its own (total + 1: to the end); results come in line order. */
static void jobs_batch_unrun_until(struct jobs_batch_files *f, int64_t upto)
{
    while (f->in && f->read < upto && f->read < f->total) {
        ssize_t n = getline(&f->text, &f->cap, f->in);
        if (n < 0)
            break;
        if (jobs_blank(f->text, (size_t)n))
            continue;
        if (++f->read == upto)
            break;
        json_t *root = json_loadb(f->text, (size_t)n, 0, NULL);
        const char *cid = json_string_value(json_object_get(root, "custom_id"));
        jobs_batch_error_line(&f->err, cid ? cid : "", "batch_expired",
                              "This request could not be executed before the completion "
                              "window expired.");
        json_decref(root);
        f->unrun++;
    }
}

static void jobs_batch_files_one(int64_t line, bool ok, const char *body, size_t len, void *arg)
{
    struct jobs_batch_files *f = arg;
    jobs_batch_unrun_until(f, line);
    buf_append(ok ? &f->out : &f->err, body, len);
}

static int jobs_batch_file(struct jobs *j, const struct state_batch *b, const struct buf *data,
                           const char *kind, struct state_file *f, struct error *err)
{
    memset(f, 0, sizeof *f);
    jobs_new_id("file-", f->id, sizeof f->id);
    snprintf(f->tenant, sizeof f->tenant, "%s", b->tenant);
    snprintf(f->purpose, sizeof f->purpose, "batch_output");
    snprintf(f->filename, sizeof f->filename, "%s_%s.jsonl", b->id, kind);
    f->bytes = (int64_t)data->len;
    f->created_at = jobs_batch_now_s();
    f->expires_at = b->output_expires_s > 0 ? f->created_at + b->output_expires_s : 0;
    snprintf(f->path, sizeof f->path, "%.900s/%s.jsonl", j->bdir, f->id);
    return jobs_write_file(f->path, data->data ? data->data : "", data->len, err);
}

/* Ends the current batch in `status` with its files; `errors` (JSON text)
 * for a failed one. */
static void jobs_batch_finalize(struct jobs *j, struct jobs_bcur *bc, int status,
                                const char *errors)
{
    jobs_batch_take_back(j, bc);
    struct error err = {0};
    /* The answers held since the database refused their rows are results
     * (answered, and paid for upstream): a cancel or an expiry in the
     * meantime dropped them, and the output missed lines that had run.
     * Refused again, the batch is not ended now (below). */
    int rc = jobs_batch_commit_held(j, bc, &err);
    if (rc == 0 && status == STATE_BATCH_COMPLETED)
        state_batch_set_status(j->st, bc->b.id, STATE_BATCH_FINALIZING, jobs_batch_now_s(), &err);
    struct jobs_batch_files files = {BUF_INIT, BUF_INIT, NULL, NULL, 0, 0, bc->b.total, 0};
    if (status == STATE_BATCH_EXPIRED && bc->b.total > 0)
        files.in = fopen(bc->b.input_path, "r");
    struct state_file out, errf;
    bool has_out = false, has_err = false;
    if (rc == 0)
        rc = state_batch_results(j->st, bc->b.id, jobs_batch_files_one, &files, &err);
    /* Lines that never ran are in the error file, and so counted failed:
     * total = completed + failed, and failed the error file's lines. */
    if (rc == 0)
        jobs_batch_unrun_until(&files, bc->b.total + 1);
    int64_t unrun = files.unrun;
    if (files.in)
        fclose(files.in);
    free(files.text);
    if (rc == 0 && files.out.len)
        has_out = (rc = jobs_batch_file(j, &bc->b, &files.out, "output", &out, &err)) == 0;
    if (rc == 0 && files.err.len)
        has_err = (rc = jobs_batch_file(j, &bc->b, &files.err, "error", &errf, &err)) == 0;
    if (rc == 0 && (has_out || has_err))
        jobs_sync_dir(j->bdir);
    struct error e2 = {0};
    if (rc == 0 && state_batch_finish(j->st, bc->b.id, status, has_out ? &out : NULL,
                                      has_err ? &errf : NULL, errors, unrun, jobs_batch_now_s(),
                                      &e2)) {
        rc = -1;
        err = e2;
    }
    if (rc) {
        /* A full disk, a database that refuses writes: the batch is not
         * ended and keeps its results' rows and its input. It is ended
         * again (or resumed, as from a crash) after the pause the database
         * trouble sets. Failing it here threw away every result it had
         * (paid for upstream), and an end that could not be recorded
         * unlinked the input its resume then failed to read. Files written
         * for it have no row: they go. */
        if (has_out)
            unlink(out.path);
        if (has_err)
            unlink(errf.path);
        double s = jobs_db_trouble(j);
        log_error("batch %s: cannot end it %s: %s; its %lld results are kept, and it is ended "
                  "again in %.0f s", bc->b.id, state_batch_status_name(status), err.msg,
                  (long long)(bc->b.completed + bc->b.failed), s);
        buf_free(&files.out);
        buf_free(&files.err);
        jobs_batch_close(j, bc);
        j->batches_look = false;   /* not at once: after the pause */
        return;
    }
    jobs_db_ok(j);
    log_write(log_default(), status == STATE_BATCH_FAILED ? LOG_WARN : LOG_INFO,
              "batch %s %s: %lld of %lld requests completed, %lld failed (lines that gave way "
              "to online calls since start: %llu)", bc->b.id, state_batch_status_name(status),
              (long long)bc->b.completed, (long long)bc->b.total, (long long)(bc->b.failed + unrun),
              (unsigned long long)(j->caller ? llmbatch_preempted(j->caller) : 0));
    buf_free(&files.out);
    buf_free(&files.err);
    if (strstr(bc->b.input_path, bc->b.id))
        unlink(bc->b.input_path);   /* the batch's own link to its input */
    jobs_batch_close(j, bc);
}

static void jobs_batch_done_one(int64_t line, bool ok, const char *body, size_t len, void *arg)
{
    struct jobs_bcur *bc = arg;
    (void)ok;
    (void)body;
    (void)len;
    if (line >= 1 && line <= bc->b.total)
        bc->done[line] = 1;
}

/* Which unfinished batch runs next in a free place: the oldest of a
 * tenant with none running, else the oldest not running. */
struct jobs_batch_pick {
    const struct jobs *j;
    struct state_batch *out;
    int rank;                         /* of *out: 0 none, 1 not running, 2 its tenant idle too */
};

static void jobs_batch_pick_one(const struct state_batch *b, void *arg)
{
    struct jobs_batch_pick *p = arg;
    if (p->rank == 2)
        return;
    /* Its tenant's batch_tokens_per_day: not before midnight UTC (one that
     * expires meanwhile is ended by jobs_batch_end_overdue). */
    if (jobs_btok_blocked_name(p->j, b->tenant))
        return;
    int rank = 2;
    for (int i = 0; i < JOBS_BATCHES_ACTIVE; i++) {
        const struct jobs_bcur *bc = &p->j->bcur[i];
        if (!bc->active)
            continue;
        if (strcmp(bc->b.id, b->id) == 0)
            return;
        if (strcmp(bc->b.tenant, b->tenant) == 0)
            rank = 1;
    }
    if (rank > p->rank) {
        *p->out = *b;
        p->rank = rank;
    }
}

/* A running batch's weight in the turns at the pool's idle places: its
 * tenant's guaranteed share in force (`share`, as the governance's time
 * windows set it); tenants without one split what the shares leave (at
 * least 0.01 each, so that their batches still move), and without tenants
 * every batch weighs the same. */
static double jobs_batch_weight(const struct jobs *j, const double *share, int tenant)
{
    const struct tenants_config *tc = j->tenants;
    if (!tc || tenant < 0 || tenant >= tc->n)
        return 1;
    if (share[tenant] > 0)
        return share[tenant];
    double sum = 0;
    int unshared = 0;
    for (int i = 0; i < tc->n; i++) {
        sum += share[i];
        unshared += share[i] <= 0;
    }
    double w = (1 - sum) / (unshared ? unshared : 1);
    return w > 0.01 ? w : 0.01;
}

/* The tenants' shares in force (the governance's window), or as
 * configured without a serving table. */
static void jobs_batch_shares(const struct jobs *j, double *share)
{
    for (int i = 0; j->tenants && i < j->tenants->n; i++)
        share[i] = j->tenants->t[i].share;
    if (j->serving && j->tenants)
        serving_shares_in_force(j->serving, share);
}

/* Batches not running whose 24 hours passed: waiting for one of the
 * JOBS_BATCHES_ACTIVE places, or for midnight (their tenant's
 * batch_tokens_per_day). A running one is ended by jobs_batch_pump. And
 * batches not running left `cancelling` (a crash after the cancel was
 * recorded, or an end the database refused): they waited for a place, or
 * for midnight, to be ended. */
#define JOBS_OVERDUE_MAX 16

struct jobs_overdue {
    struct jobs *j;
    int64_t now;
    struct state_batch b[JOBS_OVERDUE_MAX];
    int n;
};

static void jobs_batch_overdue_one(const struct state_batch *b, void *arg)
{
    struct jobs_overdue *x = arg;
    if (x->n == JOBS_OVERDUE_MAX || jobs_batch_slot(x->j, b->id))
        return;
    if (b->status != STATE_BATCH_CANCELLING && x->now < b->at[STATE_BATCH_AT_EXPIRES])
        return;
    x->b[x->n++] = *b;
}

/* Ends them expired, with the files of what they did before they waited
 * (a batch that waited for a place from its start has none). */
static bool jobs_batch_end_overdue(struct jobs *j)
{
    struct jobs_overdue *x = malloc(sizeof *x);
    if (!x)
        return false;
    x->j = j;
    x->now = jobs_batch_now_s();
    x->n = 0;
    struct error err = {0};
    if (state_batch_unfinished(j->st, jobs_batch_overdue_one, x, &err))
        log_error("batches: %s; looked at again in %.0f s", err.msg, jobs_db_trouble(j));
    for (int i = 0; i < x->n; i++) {
        /* Its own group, which has no lines in the caller: finalizing takes
         * back none of the running batches' lines. */
        struct jobs_bcur bc = {.active = true, .group = ++j->bgroups, .b = x->b[i]};
        if (bc.b.status == STATE_BATCH_CANCELLING) {
            jobs_batch_finalize(j, &bc, STATE_BATCH_CANCELLED, NULL);
            continue;
        }
        log_info("batch %s passed its completion window while it waited to run", bc.b.id);
        jobs_batch_finalize(j, &bc, STATE_BATCH_EXPIRED, NULL);
    }
    bool ended = x->n > 0;
    free(x);
    return ended;
}

/* Opens the next batch (jobs_batch_pick_one) in the free place bc, where
 * its last run left it; false when none waits. */
static bool jobs_batch_begin(struct jobs *j, struct jobs_bcur *bc)
{
    jobs_btok_roll(j);   /* a new day unblocks tenants (jobs_batch_pick_one) */
    struct error err = {0};
    struct jobs_batch_pick pick = {j, &bc->b, 0};
    if (state_batch_unfinished(j->st, jobs_batch_pick_one, &pick, &err) != 0 || !pick.rank) {
        if (err.msg[0])
            log_error("batches: %s; looked at again in %.0f s", err.msg, jobs_db_trouble(j));
        return false;
    }
    bc->active = true;
    bc->group = ++j->bgroups;
    bc->tenant = jobs_tenant_index(j, bc->b.tenant);
    double share[TENANTS_MAX];
    jobs_batch_shares(j, share);
    bc->weight = bc->weight_told = jobs_batch_weight(j, share, bc->tenant);
    bc->next_line = 1;
    /* What was answered before the database refused it goes in first (a
     * cancelled batch's too: answered lines are its results). Refused
     * again: no line is sent meanwhile. */
    if (jobs_batch_commit_held(j, bc, &err) != 0) {
        double s = jobs_db_trouble(j);
        log_error("batch %s: %s; its results held are committed when it is taken up again "
                  "in %.0f s", bc->b.id, err.msg, s);
        jobs_batch_close(j, bc);
        j->batches_look = false;
        return true;
    }
    if (bc->b.status == STATE_BATCH_CANCELLING) {
        jobs_batch_finalize(j, bc, STATE_BATCH_CANCELLED, NULL);
        return true;
    }
    bc->done = calloc((size_t)bc->b.total + 1, 1);
    bc->in = fopen(bc->b.input_path, "r");
    if (bc->done && bc->in &&
        state_batch_results(j->st, bc->b.id, jobs_batch_done_one, bc, &err) != 0) {
        /* The database's trouble, not the batch's: it waits (it failed,
         * saying its input could not be read). */
        double s = jobs_db_trouble(j);
        log_error("batch %s: %s; taken up again in %.0f s", bc->b.id, err.msg, s);
        jobs_batch_close(j, bc);
        j->batches_look = false;
        return true;
    }
    if (!bc->done || !bc->in) {
        char msg[1600];
        snprintf(msg, sizeof msg, "cannot read the input file %.1000s: %.500s", bc->b.input_path,
                 bc->in ? "out of memory" : strerror(errno));
        struct buf why = BUF_INIT;
        jobs_batch_errors(&why, msg);
        jobs_batch_finalize(j, bc, STATE_BATCH_FAILED, why.data);
        buf_free(&why);
        return true;
    }
    if (bc->b.status == STATE_BATCH_VALIDATING)
        state_batch_set_status(j->st, bc->b.id, STATE_BATCH_IN_PROGRESS, jobs_batch_now_s(), &err);
    log_info("batch %s %s: %lld of %lld requests done (%d batches running)", bc->b.id,
             bc->b.completed + bc->b.failed ? "resumes" : "starts",
             (long long)(bc->b.completed + bc->b.failed), (long long)bc->b.total,
             jobs_batch_running(j));
    return true;
}

/* Reads the next line not done and hands it to the caller (or commits its
 * failure at once). false at the end of the input. */
static bool jobs_batch_feed_one(struct jobs *j, struct jobs_bcur *bc)
{
    ssize_t n;
    int64_t line;
    for (;;) {
        n = getline(&bc->line, &bc->line_cap, bc->in);
        if (n < 0) {
            bc->eof = true;
            return false;
        }
        if (jobs_blank(bc->line, (size_t)n))
            continue;
        line = bc->next_line++;
        if (line > bc->b.total || !bc->done[line])
            break;
    }
    if (line > bc->b.total) {   /* the input grew since it was counted: not ours */
        bc->eof = true;
        return false;
    }
    json_t *root = json_loadb(bc->line, (size_t)n, 0, NULL);
    const char *cid = json_string_value(json_object_get(root, "custom_id"));
    json_t *body = json_object_get(root, "body");
    const char *model = json_string_value(json_object_get(body, "model"));
    struct buf res = BUF_INIT;
    struct served_model *sm = model ? jobs_batch_pool(j, bc, model) : NULL;
    /* The batch's tenant may use the pool, as online (its `models` globs):
     * a line for another is refused as the online call would be, 403. */
    bool denied = sm && j->tenants && bc->tenant >= 0 && bc->tenant < j->tenants->n &&
                  !tenant_allows(&j->tenants->t[bc->tenant], sm->model.cfg.name);
    /* The fields an online call is refused for (llmbody.h): a line with
     * n 129 or "max_tokens": "5000" was sent, and paid for, as it was. */
    char bad_param[32] = "";
    struct error bad = {0};
    bool unchecked = sm && !denied && json_is_object(body) &&
                     llmbody_check(body, bad_param, sizeof bad_param, &bad) != 0;
    if (!cid || !json_is_object(body) || !sm || denied || unchecked) {
        char msg[300];
        const char *code = sm ? "invalid_request" : "model_not_found";
        if (!cid || !json_is_object(body)) {
            snprintf(msg, sizeof msg, "the line is not a request any more (the input changed?)");
        } else if (unchecked) {
            snprintf(msg, sizeof msg, "body.%.280s", bad.msg);
        } else if (denied) {
            snprintf(msg, sizeof msg, "tenant \"%s\" may not use model \"%.200s\"",
                     j->tenants->t[bc->tenant].name, model);
            code = "permission_error";
        } else {
            snprintf(msg, sizeof msg, "The model `%.200s` does not exist or is not an LLM pool",
                     model ? model : "");
        }
        jobs_batch_error_line(&res, cid ? cid : "", code, msg);
        jobs_batch_commit(j, bc, line, false, &res, sm);
        buf_free(&res);
        json_decref(root);
        return true;
    }
    /* As the online path rewrites it: the servers' name. Whole, not
     * streamed, unless lines give way to online calls (offline.preempt):
     * then streamed, so that the server notices a closed call at once
     * (llama-server finishes a whole one first), and assembled into the
     * whole answer (llmstream.h), which only tools and logprobs would not
     * survive: those lines stay whole. */
    json_object_set_new(body, "model", json_string(sm->model.cfg.pool.served_model_name));
    bool stream = sm->model.cfg.pool.offline_preempt && jobs_batch_streamable(bc->b.endpoint, body);
    json_object_set_new(body, "stream", json_boolean(stream));
    json_object_del(body, "stream_options");
    if (stream)
        json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    struct llmbatch_line *l = calloc(1, sizeof *l);
    if (l) {
        l->sm = sm;
        l->stream = stream;
        snprintf(l->path, sizeof l->path, "%s", bc->b.endpoint);
        l->body = json_dumps(body, JSON_COMPACT);
        l->len = l->body ? strlen(l->body) : 0;
        l->line = line;
        l->group = bc->group;
        l->weight = bc->weight;
        l->tenant = bc->tenant;
        l->arg = strdup(cid);
    }
    json_decref(root);
    if (!l || !l->body || !l->arg) {
        if (l)
            jobs_batch_line_free(l);
        /* Not the end of its input: taken for one, the batch ended
         * completed without the line and those after it. It is closed
         * once its lines in flight are back, and taken up again after a
         * pause, as when the database refuses a result. */
        log_error("batch %s: out of memory for line %lld", bc->b.id, (long long)line);
        bc->stalled = bc->stalled_oom = true;
        return false;
    }
    bc->inflight++;
    llmbatch_submit(j->caller, l);
    return true;
}

/* At most this many expired files are deleted per look; a look that
 * found this many looks again at the next pass. */
#define JOBS_EXPIRE_MAX 256

struct jobs_expired {
    struct state_file f[JOBS_EXPIRE_MAX];
    int n;
};

static void jobs_batch_expired_one(const struct state_file *f, void *arg)
{
    struct jobs_expired *x = arg;
    if (x->n < JOBS_EXPIRE_MAX)
        x->f[x->n++] = *f;
}

/* Files past their expires_at go, at start and then once a minute (the
 * routes already answer an expired file as gone). */
static void jobs_batch_expire(struct jobs *j)
{
    int64_t now = jobs_batch_now_s();
    if (!jobs_look_due(&j->files_checked_at, now, 60))
        return;
    struct jobs_expired *x = malloc(sizeof *x);
    if (!x)
        return;
    x->n = 0;
    struct error err = {0};
    if (state_file_expired(j->st, now, JOBS_EXPIRE_MAX, jobs_batch_expired_one, x, &err))
        log_error("expired files: %s", err.msg);
    for (int i = 0; i < x->n; i++) {
        if (jobs_batch_file_remove(j, &x->f[i], &err))
            log_error("file %s expired and could not be deleted: %s", x->f[i].id, err.msg);
        else
            log_info("file %s (%s, %lld bytes, tenant %s) expired: deleted", x->f[i].id,
                     x->f[i].purpose, (long long)x->f[i].bytes, x->f[i].tenant);
    }
    if (x->n == JOBS_EXPIRE_MAX)
        j->files_checked_at = 0;
    free(x);
}

/* A file of <jobs.dir>/batch no row needs: a file's bytes whose row was
 * never inserted, a batch's own link to its input once it ended. */
static bool jobs_batch_orphan(struct jobs *j, const char *name)
{
    char id[48];
    struct error err = {0};
    if (jobs_own_name(name, "file-", ".jsonl", id, sizeof id)) {
        struct state_file f;
        return state_file_get(j->st, id, &f, &err) == -BG_ENOTFOUND;
    }
    if (jobs_own_name(name, "batch_", ".input.jsonl", id, sizeof id)) {
        /* A batch's own link to its input, kept until the batch ends. */
        struct state_batch b;
        int rc = state_batch_get(j->st, id, &b, &err);
        return rc == -BG_ENOTFOUND || (rc == 0 && b.status >= STATE_BATCH_COMPLETED &&
                                       b.status != STATE_BATCH_CANCELLING);
    }
    return false;
}

void jobs_batch_sweep(struct jobs *j) { jobs_sweep_dir(j, j->bdir, jobs_batch_orphan); }

/* Looks for a batch to start at most this often when nothing was made or
 * ended since (a batch's creation or end looks at once). */
#define JOBS_BATCH_LOOK_NS 1000000000LL

bool jobs_batch_pump(struct jobs *j)
{
    jobs_batch_expire(j);
    if (!j->caller)
        return false;
    bool progress = jobs_batch_collect(j);
    int64_t now = jobs_mono_ns();
    if (!jobs_db_paused(j) &&
        (j->batches_look || now - j->batches_looked_ns >= JOBS_BATCH_LOOK_NS)) {
        j->batches_look = false;
        j->batches_looked_ns = now;
        progress |= jobs_batch_end_overdue(j);
        for (int i = 0; i < JOBS_BATCHES_ACTIVE && !jobs_db_paused(j); i++)
            if (!j->bcur[i].active && jobs_batch_begin(j, &j->bcur[i]))
                progress = true;
    }
    int running = jobs_batch_running(j);
    if (!running)
        return progress;
    /* Each running batch keeps its part of the window in the caller, by
     * weight as its turns there are (llmbatch_dispatch); weights follow the
     * shares in force (a time window's switch). */
    double share[TENANTS_MAX], wsum = 0;
    jobs_batch_shares(j, share);
    for (int i = 0; i < JOBS_BATCHES_ACTIVE; i++) {
        struct jobs_bcur *bc = &j->bcur[i];
        if (!bc->active)
            continue;
        bc->weight = jobs_batch_weight(j, share, bc->tenant);
        wsum += bc->weight;
        if (bc->weight != bc->weight_told) {   /* its lines waiting in the caller too */
            llmbatch_set_weight(j->caller, bc->group, bc->weight);
            bc->weight_told = bc->weight;
        }
    }
    for (int i = 0; i < JOBS_BATCHES_ACTIVE; i++) {
        struct jobs_bcur *bc = &j->bcur[i];
        if (!bc->active)
            continue;
        int lines = (int)(JOBS_BATCH_WINDOW * bc->weight / wsum);
        if (lines < 1)
            lines = 1;
        if (jobs_batch_now_s() >= bc->b.at[STATE_BATCH_AT_EXPIRES]) {
            jobs_batch_finalize(j, bc, STATE_BATCH_EXPIRED, NULL);
            progress = true;
            continue;
        }
        while (!bc->eof && !bc->stalled && bc->inflight < lines && jobs_btok_room(j, bc))
            progress |= jobs_batch_feed_one(j, bc);
        if (bc->stalled && bc->inflight == 0) {
            /* The pause counts from here, once the lines in flight are
             * back: counted from the first refusal, it was over before
             * they were ("in 0.0 s"), and the batch was taken up at once. */
            double in_s = jobs_db_trouble(j);
            if (bc->stalled_oom)
                log_warn("batch %s: %lld of %lld lines have a result; no memory for the next "
                         "line: taken up again in %.0f s", bc->b.id,
                         (long long)(bc->b.completed + bc->b.failed), (long long)bc->b.total,
                         in_s);
            else
                log_warn("batch %s: %lld of %lld lines have a result; the state database "
                         "refused the others'; those answered are held and committed when it "
                         "is taken up (in %.0f s), the rest run then", bc->b.id,
                         (long long)(bc->b.completed + bc->b.failed), (long long)bc->b.total,
                         in_s);
            jobs_batch_close(j, bc);
            j->batches_look = false;   /* not at once: after the pause */
            progress = true;
        } else if (bc->eof && bc->inflight == 0) {
            jobs_batch_finalize(j, bc, STATE_BATCH_COMPLETED, NULL);
            progress = true;
        } else if (bc->inflight == 0 && j->btok_blocked[bc->tenant]) {
            /* Its tenant's tokens for today are spent: the place goes to
             * another tenant's batch; this one resumes after midnight UTC. */
            log_info("batch %s waits for midnight UTC (tenant %s: batch_tokens_per_day)",
                     bc->b.id, bc->b.tenant);
            jobs_batch_close(j, bc);
            progress = true;
        }
    }
    return progress;
}

void jobs_batch_pause(struct jobs *j)
{
    if (!jobs_batch_running(j))
        return;
    jobs_batch_take_back(j, NULL);
    for (int i = 0; i < JOBS_BATCHES_ACTIVE; i++) {
        struct jobs_bcur *bc = &j->bcur[i];
        if (!bc->active)
            continue;
        log_info("batch %s paused: %lld of %lld requests done", bc->b.id,
                 (long long)(bc->b.completed + bc->b.failed), (long long)bc->b.total);
        jobs_batch_close(j, bc);
    }
}
