/* jobs.c - see jobs.h. One runner thread: it alone writes the database and
 * the job files, so progress needs no lock beyond the one that guards what
 * other threads hand it (commands, completed lines).
 *
 * One file of ~750 lines: the window, the current job and the durability
 * steps are that one thread's private state, and the commands (cancel)
 * end a job through the same steps; split, they would call each other
 * across files and share the state through an internal header. */
#include "serving/jobs.h"
#include "serving/jobs_impl.h"
#include "serving/lifecycle.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "backends/encoder.h"
#include "batcher/batcher.h"
#include "common/buf.h"
#include "common/log.h"
#include "serving/serving.h"

#include "serving/tensor_json.h"


static void jobs_model_loaded(void *arg);

static int jobs_mkdir(const char *d, const char *what, struct error *err)
{
    if (mkdir(d, 0755) != 0 && errno != EEXIST)
        return error_set(err, BG_ECONFIG, "%s %s: cannot create it: %s", what, d,
                         strerror(errno));
    /* One there already that this user cannot write in: said at the start,
     * not by the first job or upload (a 500 "Permission denied"). */
    if (access(d, W_OK | X_OK) != 0)
        return error_set(err, BG_ECONFIG, "%s %s: cannot write in it: %s", what, d,
                         strerror(errno));
    return 0;
}

int jobs_open(const struct jobs_config *cfg, struct serving *s, struct jobs **out,
              struct error *err)
{
    *out = NULL;
    struct jobs *j = calloc(1, sizeof *j);
    if (!j)
        return error_set(err, BG_ENOMEM, "out of memory");
    snprintf(j->state_dir, sizeof j->state_dir, "%s", cfg->state_dir);
    if (cfg->dir && cfg->dir[0])
        snprintf(j->dir, sizeof j->dir, "%s", cfg->dir);
    else
        snprintf(j->dir, sizeof j->dir, "%s/jobs", cfg->state_dir);
    snprintf(j->bdir, sizeof j->bdir, "%s/batch", j->dir);
    j->max_input_bytes = cfg->max_input_bytes;
    j->priority = cfg->priority;
    j->tenants = cfg->tenants;
    j->max_file_bytes = cfg->max_file_bytes ? cfg->max_file_bytes : ((size_t)200 << 20);
    j->file_expiry_s = cfg->file_expiry_s > 0 ? cfg->file_expiry_s : 0;
    j->retention_s = cfg->retention_s > 0 ? cfg->retention_s : 0;
    j->serving = s;
    j->nmodels = s ? serving_count(s) : 0;
    j->lines = calloc((size_t)j->nmodels + 1, sizeof *j->lines);
    pthread_mutex_init(&j->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    j->cmds_tail = &j->cmds;
    j->cur.out_fd = -1;
    int rc;
    if (!j->lines) {
        rc = error_set(err, BG_ENOMEM, "out of memory");
    } else if ((rc = state_open(j->state_dir, &j->st, err)) == 0 &&
               (rc = jobs_mkdir(j->dir, "jobs.dir", err)) == 0 &&
               (rc = jobs_mkdir(j->bdir, "jobs.dir/batch", err)) == 0) {
        if (s)
            serving_on_loaded(s, jobs_model_loaded, j);
        *out = j;
        return 0;
    }
    jobs_free(j);
    return rc;
}

const char *jobs_dir(const struct jobs *j) { return j->dir; }
const char *jobs_state_dir(const struct jobs *j) { return j->state_dir; }
size_t jobs_max_input_bytes(const struct jobs *j) { return j->max_input_bytes; }
size_t jobs_max_file_bytes(const struct jobs *j) { return j->max_file_bytes; }
struct state *jobs_state(struct jobs *j) { return j->st; }

void jobs_lines(struct jobs *j, int i, uint64_t *ok, uint64_t *failed)
{
    *ok = *failed = 0;
    if (i >= 0 && i < j->nmodels) {
        *ok = atomic_load_explicit(&j->lines[i][0], memory_order_relaxed);
        *failed = atomic_load_explicit(&j->lines[i][1], memory_order_relaxed);
    }
}

void jobs_command(struct jobs *j, struct jobs_cmd *c)
{
    c->next = NULL;
    pthread_mutex_lock(&j->mu);
    *j->cmds_tail = c;
    j->cmds_tail = &c->next;
    j->events++;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* ---- lines ---- */

static struct jobs_slot *jobs_slot_of(struct infer_item *it)
{
    return (struct jobs_slot *)((char *)it - offsetof(struct jobs_slot, item));
}

/* Any thread (a worker, or the batcher on cancel): the line is back. */
static void jobs_line_complete(struct infer_item *it)
{
    struct jobs_slot *sl = jobs_slot_of(it);
    struct jobs *j = sl->j;
    pthread_mutex_lock(&j->mu);
    sl->done = true;
    j->events++;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

static void jobs_slot_reset(struct jobs_slot *sl)
{
    free(sl->r.input);
    free(sl->output);
    buf_free(&sl->result);
    memset(sl, 0, sizeof *sl);
}

/* {"line":N,"id":...,"error":"..."} */
static void jobs_result_error(struct jobs_slot *sl, const char *id, const char *msg)
{
    buf_appendf(&sl->result, "{\"line\":%lld,\"id\":", (long long)sl->line);
    if (id)
        json_append_string(&sl->result, id, strlen(id));
    else
        buf_append(&sl->result, "null", 4);
    buf_append(&sl->result, ",\"error\":", 9);
    json_append_string(&sl->result, msg, strlen(msg));
    buf_append(&sl->result, "}\n", 2);
    sl->failed = true;
}

/* The answer of a computed line: the KServe answer's outputs, spliced. */
static void jobs_result_ok(struct jobs *j, struct jobs_slot *sl)
{
    const struct model_config *c = &j->cur.sm->model.cfg;
    struct buf enc = BUF_INIT;
    int64_t json_len;
    sl->r.binary_output = false;
    if (c->kind == MODEL_KIND_ENCODER && c->encoder.normalize)   /* as KServe answers */
        encoder_output_normalize(sl->output, sl->r.rows, (int)c->output.row_elems);
    const char *outs = NULL;
    if (tensor_encode_kserve(&j->cur.sm->model, j->cur.sm->version, &sl->r, sl->output, &enc, &json_len) == 0 &&
        enc.data)
        outs = memmem(enc.data, enc.len, ",\"outputs\":", 11);
    if (!outs) {
        jobs_result_error(sl, sl->r.has_id ? sl->r.id : NULL, "out of memory encoding the answer");
    } else {
        buf_appendf(&sl->result, "{\"line\":%lld,\"id\":", (long long)sl->line);
        if (sl->r.has_id)
            json_append_string(&sl->result, sl->r.id, strlen(sl->r.id));
        else
            buf_append(&sl->result, "null", 4);
        buf_append(&sl->result, outs, enc.len - (size_t)(outs - enc.data));
        buf_append(&sl->result, "\n", 1);
    }
    buf_free(&enc);
}


/* Reads the next non-blank line into a new slot and submits it (or makes
 * its error line at once). 0: a slot was filled; 1: end of input. */
static int jobs_feed_one(struct jobs *j)
{
    struct jobs_cur *cu = &j->cur;
    ssize_t n;
    for (;;) {
        n = getline(&cu->line, &cu->line_cap, cu->in);
        if (n < 0) {
            cu->eof = true;
            return 1;
        }
        cu->offset += n;
        if (!jobs_blank(cu->line, (size_t)n))
            break;
    }
    struct jobs_slot *sl = &j->slots[(cu->head + cu->count) % JOBS_WINDOW];
    jobs_slot_reset(sl);
    sl->j = j;
    sl->line = cu->next_line++;
    sl->end_offset = cu->offset;
    cu->count++;
    const struct model_config *c = &cu->sm->model.cfg;
    struct error err = {0};
    if (tensor_decode_kserve(&cu->sm->model, cu->line, (size_t)n, -1, &sl->r, &err) != 0) {
        /* The id, where the line got that far, still names the line. */
        jobs_result_error(sl, sl->r.has_id ? sl->r.id : NULL, err.msg);
        sl->done = true;
        return 0;
    }
    sl->output = malloc((size_t)sl->r.rows * (size_t)c->output.row_elems * sizeof(float));
    if (!sl->output) {
        jobs_result_error(sl, sl->r.has_id ? sl->r.id : NULL, "out of memory for the output");
        sl->done = true;
        return 0;
    }
    struct infer_item *it = &sl->item;
    it->rows = sl->r.rows;
    it->input = sl->r.input;
    if (c->kind == MODEL_KIND_ENCODER)
    {
        int64_t tokens;
        encoder_rows_cost(sl->r.input, (size_t)c->input.row_elems, sl->r.rows, &tokens,
                          &it->tokens_sq, &it->max_len);
        it->tokens = (int)tokens;
    }
    it->output = sl->output;
    it->offline = true;
    it->tenant = cu->tenant;
    it->t_arrival_ns = jobs_mono_ns();
    it->complete = jobs_line_complete;
    sl->submitted = true;
    served_touch(cu->sm);   /* a job's lines are use: idle unload and eviction go by it */
    int rc = batcher_submit(cu->sm->batcher, it, &err);
    if (rc) {
        sl->submitted = false;
        if (rc == -BG_ESHUTDOWN) {   /* not an answer: the line runs again after a restart */
            it->status = BG_ESHUTDOWN;
        } else {
            jobs_result_error(sl, sl->r.has_id ? sl->r.id : NULL, err.msg);
        }
        sl->done = true;
    }
    return 0;
}

/* ---- durability ---- */

/* Writes, syncs and commits the pending result lines. */
static int jobs_commit(struct jobs *j, struct error *err)
{
    struct jobs_cur *cu = &j->cur;
    if (cu->pending_lines == 0)
        return 0;
    size_t off = 0;
    while (off < cu->pending.len) {
        ssize_t w = write(cu->out_fd, cu->pending.data + off, cu->pending.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return error_set(err, BG_EIO, "cannot write the results file %s: %s",
                             cu->job.output_path, w < 0 ? strerror(errno) : "short write");
        off += (size_t)w;
    }
    if (fdatasync(cu->out_fd) != 0)
        return error_set(err, BG_EIO, "cannot sync the results file %s: %s",
                         cu->job.output_path, strerror(errno));
    int64_t size = cu->job.out_size + (int64_t)cu->pending.len;
    int64_t done = cu->job.lines_done + cu->pending_lines;
    int64_t failed = cu->job.lines_failed + cu->pending_failed;
    int rc = state_job_progress(j->st, cu->job.id, cu->pending_end_offset, size, done, failed, err);
    cu->db_refused = rc != 0;
    if (rc)
        return rc;
    cu->job.out_size = size;
    cu->job.lines_done = done;
    cu->job.lines_failed = failed;
    cu->job.in_offset = cu->pending_end_offset;
    if (cu->model_index >= 0 && cu->model_index < j->nmodels) {
        atomic_fetch_add_explicit(&j->lines[cu->model_index][0],
                                  (uint64_t)(cu->pending_lines - cu->pending_failed),
                                  memory_order_relaxed);
        atomic_fetch_add_explicit(&j->lines[cu->model_index][1], (uint64_t)cu->pending_failed,
                                  memory_order_relaxed);
    }
    cu->pending.len = 0;
    cu->pending_lines = cu->pending_failed = 0;
    cu->last_commit_ns = jobs_mono_ns();
    return 0;
}

/* The longest a job waits for its model's overloaded servers: their
 * Retry-After may be an hour of maintenance, and a look each minute costs
 * one batch. */
#define JOBS_HOLD_MAX_S 60
/* Holds in a row, no line answered between, before refused lines fail as
 * any other error: servers that never stop refusing (a balancer with no
 * server ready) would hold the job, and every job queued behind it, for
 * good. Five holds are 5 s to 5 min. */
#define JOBS_HOLDS_MAX 5

/* Moves the done lines at the window's head, in order, into `pending`.
 * A line that came back without an answer (taken back at stop or cancel)
 * ends the run: it and those after it are done again later. */
static void jobs_collect(struct jobs *j)
{
    struct jobs_cur *cu = &j->cur;
    while (cu->count > 0) {
        struct jobs_slot *sl = &j->slots[cu->head];
        pthread_mutex_lock(&j->mu);
        bool done = sl->done;
        pthread_mutex_unlock(&j->mu);
        if (!done)
            return;
        if (sl->submitted) {
            sl->submitted = false;
            int st = sl->item.status;
            if (st == BG_ECANCELLED || st == BG_ESHUTDOWN)
                return;
            if (st == BG_EUNAVAILABLE && j->holds_in_row < JOBS_HOLDS_MAX) {   /* jobs_hold */
                cu->overloaded_s = sl->item.retry_after_s > 0 ? sl->item.retry_after_s : 1;
                return;
            }
            if (st == 0) {
                j->holds_in_row = 0;
                jobs_result_ok(j, sl);
            } else {
                jobs_result_error(sl, sl->r.has_id ? sl->r.id : NULL, sl->item.error);
            }
        } else if (sl->result.len == 0) {
            return;   /* refused at submit as the batcher closed */
        }
        buf_append(&cu->pending, sl->result.data, sl->result.len);
        cu->pending_lines++;
        cu->pending_failed += sl->failed;
        cu->pending_end_offset = sl->end_offset;
        jobs_slot_reset(sl);
        cu->head = (cu->head + 1) % JOBS_WINDOW;
        cu->count--;
    }
}

/* Takes every line in flight back and waits for each to return. */
static void jobs_take_back(struct jobs *j)
{
    struct jobs_cur *cu = &j->cur;
    for (int i = 0; i < cu->count; i++) {
        struct jobs_slot *sl = &j->slots[(cu->head + i) % JOBS_WINDOW];
        pthread_mutex_lock(&j->mu);
        bool pending = sl->submitted && !sl->done;
        pthread_mutex_unlock(&j->mu);
        if (pending)
            batcher_cancel(cu->sm->batcher, &sl->item);
    }
    /* One taken by a worker finishes its batch first: bounded by the
     * batch watchdog. */
    pthread_mutex_lock(&j->mu);
    for (int i = 0; i < cu->count; i++) {
        struct jobs_slot *sl = &j->slots[(cu->head + i) % JOBS_WINDOW];
        while (sl->submitted && !sl->done)
            pthread_cond_wait(&j->cv, &j->mu);
    }
    pthread_mutex_unlock(&j->mu);
}

/* Closes the current job: the window is emptied first (taken back). */
static void jobs_close_cur(struct jobs *j)
{
    struct jobs_cur *cu = &j->cur;
    jobs_take_back(j);
    for (int i = 0; i < JOBS_WINDOW; i++)
        jobs_slot_reset(&j->slots[i]);
    if (cu->in)
        fclose(cu->in);
    if (cu->out_fd >= 0)
        close(cu->out_fd);
    buf_free(&cu->pending);
    free(cu->line);
    served_release(cu->sm);
    memset(cu, 0, sizeof *cu);
    cu->out_fd = -1;
}

/* The state database refused the job's progress (a full disk, a lock
 * held past the busy timeout): not the job's failure. It stays running
 * there and is taken up again after a pause, from its last committed line
 * (the results written past it are cut off then, as after a crash). */
static void jobs_suspend(struct jobs *j, const char *why)
{
    struct jobs_cur *cu = &j->cur;
    double s = jobs_db_trouble(j);
    log_error("job %s: %s; taken up again in %.0f s from line %lld", cu->job.id, why, s,
              (long long)cu->job.lines_done + 1);
    jobs_close_cur(j);
}


/* A line came back 503: the servers behind its model are overloaded (an
 * upstream model, docs/MODELS.md). Failing the line would lose it to a
 * passing busy spell of the night's run; instead the job stops here, its
 * lines done so far committed, and is taken up again from the line that
 * was refused once the servers' Retry-After has passed. */
static void jobs_hold(struct jobs *j)
{
    struct jobs_cur *cu = &j->cur;
    int s = cu->overloaded_s < JOBS_HOLD_MAX_S ? cu->overloaded_s : JOBS_HOLD_MAX_S;
    j->hold_until_ns = jobs_mono_ns() + (int64_t)s * 1000000000;
    j->holds_in_row++;
    log_warn("job %s: model %s's servers are overloaded (503); taken up again in %d s from "
             "line %lld (hold %d of %d: its refused lines fail after that)", cu->job.id,
             cu->job.model, s, (long long)cu->job.lines_done + 1, j->holds_in_row,
             JOBS_HOLDS_MAX);
    jobs_close_cur(j);
}

/* Ends the current job in `state` (reason for FAILED): the lines done so
 * far are made durable first where they can be. Returns the state recorded
 * (FAILED where the results could not be made durable), or a negative code
 * with err when the database recorded no end: the job is still running
 * there, taken up again after a pause (a cancel must not be answered
 * "cancelled" then: the job would run on to its end). */
static int jobs_finish(struct jobs *j, int state, const char *reason, struct error *out)
{
    struct jobs_cur *cu = &j->cur;
    struct error err = {0};
    j->holds_in_row = 0;   /* the next job's refusals are held afresh */
    if (state != STATE_JOB_FAILED) {
        jobs_take_back(j);
        jobs_collect(j);
        int rc = jobs_commit(j, &err);
        if (rc) {
            if (cu->db_refused) {
                jobs_suspend(j, err.msg);
                *out = err;
                return rc;
            }
            state = STATE_JOB_FAILED;
            reason = err.msg;
        }
    }
    /* A failed job's results file ends at its last committed line, as GET
     * .../results reads it: what a failed write left past it (a torn line)
     * is cut off, so that a reader of output_path finds whole lines. */
    struct stat sb;
    if (state == STATE_JOB_FAILED && cu->out_fd >= 0 && fstat(cu->out_fd, &sb) == 0 &&
        sb.st_size > cu->job.out_size && ftruncate(cu->out_fd, cu->job.out_size) == 0)
        (void)fdatasync(cu->out_fd);
    struct error e2 = {0};
    int rc = state_job_set_state(j->st, cu->job.id, state, cu->job.lines_total, reason, &e2);
    if (rc) {
        /* Still "running" in the database: it is taken up again from its
         * last committed line, after a pause (a full disk would otherwise
         * have it begun and ended again at once, forever). */
        double s = jobs_db_trouble(j);
        log_error("job %s: cannot record it %s (%s)%s%s; taken up again in %.0f s from line "
                  "%lld", cu->job.id, state_job_state_name(state), e2.msg,
                  reason ? ": " : "", reason ? reason : "", s,
                  (long long)cu->job.lines_done + 1);
    } else {
        jobs_db_ok(j);
        /* A job that failed is an operator's matter: a warning. */
        log_write(log_default(), state == STATE_JOB_FAILED ? LOG_WARN : LOG_INFO,
                  "job %s %s: %lld lines done (%lld failed)%s%s", cu->job.id,
                  state_job_state_name(state), (long long)cu->job.lines_done,
                  (long long)cu->job.lines_failed, reason ? ": " : "", reason ? reason : "");
    }
    jobs_close_cur(j);
    if (rc) {
        *out = e2;
        return rc;
    }
    return state;
}

static void jobs_fail(struct jobs *j, const char *reason)
{
    struct error err;
    (void)jobs_finish(j, STATE_JOB_FAILED, reason, &err);
}


/* Non-blank lines of the input: the job's total. */
static int64_t jobs_count_lines(FILE *f)
{
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int64_t total = 0;
    while ((n = getline(&line, &cap, f)) >= 0)
        total += !jobs_blank(line, (size_t)n);
    free(line);
    rewind(f);
    return total;
}


/* The lifecycle thread: the load the next job waits for ended. */
static void jobs_load_done(void *arg, int rc, const char *msg, struct served_model *sm)
{
    (void)rc;
    (void)msg;
    struct jobs *j = arg;
    served_release(sm);   /* asked again by the runner (the copy is the table's) */
    pthread_mutex_lock(&j->mu);
    atomic_store(&j->load_waiting, false);
    j->events++;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* The lifecycle thread (or the start's loads): a model loaded. Only the
 * runner touches the waits; it is woken to look at them. */
static void jobs_model_loaded(void *arg)
{
    struct jobs *j = arg;
    atomic_store(&j->model_loaded, true);
    pthread_mutex_lock(&j->mu);
    j->events++;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

/* The ids of the jobs still waiting for their model, into skip; those
 * whose time has come are dropped, to be tried again. */
static int jobs_waits_live(struct jobs *j, const char **skip)
{
    int64_t now = jobs_mono_ns();
    int n = 0;
    for (int i = 0; i < j->nwaits; i++)
        if (j->waits[i].until_ns > now)
            j->waits[n++] = j->waits[i];
    j->nwaits = n;
    for (int i = 0; i < n; i++)
        skip[i] = j->waits[i].id;
    return n;
}

/* The wait of job `id` (NULL: of every job) is over: jobs_waits_live
 * drops it before the next job is looked for, and with it its place among
 * the waits. */
static void jobs_wait_drop(struct jobs *j, const char *id)
{
    for (int i = 0; i < j->nwaits; i++)
        if (!id || strcmp(j->waits[i].id, id) == 0)
            j->waits[i].until_ns = 0;
}

/* The current job's model exists but cannot be served (its load failed: a
 * broken folder, a config being fixed): the job waits, queued or running as
 * it was, with the reason shown, and is tried again in JOBS_WAIT_NS; the
 * jobs behind it run meanwhile. Failed at once, a model broken at a restart
 * ended a night's job for good, and it could only be submitted again from
 * its first line. */
static void jobs_wait(struct jobs *j, const char *why)
{
    struct jobs_cur *cu = &j->cur;
    char reason[sizeof cu->job.reason];   /* as it reads back */
    snprintf(reason, sizeof reason, "waiting: %.400s; tried again when a model loads and every "
             "%lld s, the jobs behind it run meanwhile", why, JOBS_WAIT_NS / 1000000000);
    struct jobs_wait *w = &j->waits[j->nwaits++];
    snprintf(w->id, sizeof w->id, "%s", cu->job.id);
    w->until_ns = jobs_mono_ns() + JOBS_WAIT_NS;
    /* Said once, when it begins to wait; the same reason again is quiet. */
    if (strcmp(cu->job.reason, reason) != 0) {
        struct error err = {0};
        if (state_job_set_state(j->st, cu->job.id, cu->job.state, -1, reason, &err))
            log_error("job %s: cannot record that it waits: %s", cu->job.id, err.msg);
        log_warn("job %s %s", cu->job.id, reason);
    }
    cu->active = false;
}

/* The oldest job not waiting (queued, or running and given way) but for
 * the nskip (at most 64) in skip, passing over those on `model` (NULL:
 * none passed over): 1 and *out, 0 none, <0 the database's error. */
static int jobs_next_not_on(struct jobs *j, const char *const *skip, int nskip,
                            const char *model, struct state_job *out, struct error *err)
{
    const char *sk[64];
    char same[64][sizeof out->id];
    memcpy(sk, skip, (size_t)nskip * sizeof *sk);
    for (int k = 0;; k++) {
        int rc = state_job_next(j->st, sk, nskip, out, err);
        if (rc <= 0 || !model || strcmp(out->model, model) != 0)
            return rc;
        if (nskip == 64)
            return 0;
        snprintf(same[k], sizeof same[k], "%s", out->id);
        sk[nskip++] = same[k];
    }
}

/* Whether a job waits to run on a model other than the current job's (those
 * on the same model would starve alike). */
static bool jobs_other_model_waits(struct jobs *j)
{
    struct jobs_cur *cu = &j->cur;
    const char *skip[64];
    int n = jobs_waits_live(j, skip);
    skip[n++] = cu->job.id;
    struct state_job next;
    struct error err = {0};
    return jobs_next_not_on(j, skip, n, cu->job.model, &next, &err) > 0;
}

/* The current job's lines get no device time (its model's online requests
 * go first, docs/SCHEDULING.md) while a job on another model waits: it
 * gives way, its lines done so far committed, and waits as for a model
 * that cannot be served (tried again when a model loads and every
 * JOBS_WAIT_NS; taken up from its last committed line). One job on a busy
 * model held every job behind it, on every model and tenant, for as long
 * as the online traffic lasted. */
static void jobs_yield(struct jobs *j)
{
    struct jobs_cur *cu = &j->cur;
    struct error err = {0};
    jobs_take_back(j);
    jobs_collect(j);
    if (jobs_commit(j, &err)) {
        if (cu->db_refused)
            jobs_suspend(j, err.msg);
        else
            jobs_fail(j, err.msg);
        return;
    }
    char why[400];
    snprintf(why, sizeof why, "model %.128s gave its lines no device time for %lld s (its online "
             "requests go first)", cu->job.model, JOBS_STARVED_NS / 1000000000);
    snprintf(j->yielded_model, sizeof j->yielded_model, "%s", cu->job.model);
    j->yielded_until_ns = jobs_mono_ns() + JOBS_WAIT_NS;
    jobs_wait(j, why);
    jobs_close_cur(j);
}

/* Opens the oldest unfinished job where its last run left it. 1: one is
 * active, or one more waits for its model (look again at once); 0: none to
 * run (or its model is loading). */
static int jobs_begin_next(struct jobs *j)
{
    struct jobs_cur *cu = &j->cur;
    struct error err = {0};
    if (jobs_db_paused(j) || jobs_mono_ns() < j->hold_until_ns || atomic_load(&j->load_waiting))
        return 0;
    /* A model loaded (fixed, maybe): the waiting jobs are tried now, not
     * up to JOBS_WAIT_NS later; those whose model still fails wait again,
     * quietly. */
    if (atomic_exchange(&j->model_loaded, false))
        jobs_wait_drop(j, NULL);
    const char *skip[64];
    int nskip = jobs_waits_live(j, skip);
    /* Jobs on the model a job gave way on are passed over while its wait
     * lasts: taken next, the job behind it on the same model starved
     * alike, and the two took turns while the job on another model the
     * first gave way to never ran. */
    bool pass = j->yielded_until_ns > jobs_mono_ns();
    int rc = jobs_next_not_on(j, skip, nskip, pass ? j->yielded_model : NULL, &cu->job, &err);
    if (rc <= 0) {
        /* A database that cannot be read (a lock, a damaged file) is looked
         * at again after the pause, as one that refuses writes: it was
         * looked at, and said, every second for ever. */
        if (rc < 0)
            log_error("jobs: %s; looked at again in %.0f s", err.msg, jobs_db_trouble(j));
        return 0;
    }
    cu->active = true;
    cu->out_fd = -1;
    /* The job holds its model's copy to its end (a lazy or unloaded model
     * is loaded first): an unload waits for it, eviction passes it by. */
    struct error le = {0};
    bool loading = false;
    atomic_store(&j->load_waiting, true);   /* before: the load may end inside the call */
    cu->sm = j->serving ? serving_acquire_or_wait(j->serving, cu->job.model, strlen(cu->job.model),
                                                  cu->job.version, jobs_load_done, j, &loading,
                                                  &le)
                        : NULL;
    if (!loading)
        atomic_store(&j->load_waiting, false);
    if (loading) {   /* taken up again when the load ends, commands served meanwhile */
        cu->active = false;
        return 0;
    }
    cu->model_index = cu->sm ? served_index(cu->sm) : -1;
    cu->tenant = jobs_tenant_index(j, cu->job.tenant);
    char why[1400];
    if (!cu->sm && le.code == BG_ESHUTDOWN) {
        /* The server stops before its model could load (the drain takes no
         * new loads): the job is as it was, for the next start. Failed, a
         * SIGTERM ended it for good. */
        cu->active = false;
        return 0;
    }
    if (!cu->sm) {
        snprintf(why, sizeof why, "model %s is not served: %s", cu->job.model,
                 j->serving ? le.msg : "no model repository");
        /* A model not there (removed, or never) fails the job: nothing says
         * it comes back. */
        if (le.code == BG_ENOTREADY && j->nwaits < JOBS_WAITS_MAX)
            jobs_wait(j, why);
        else
            jobs_fail(j, why);
        return 1;
    }
    cu->in = fopen(cu->job.input_path, "r");
    if (!cu->in) {
        snprintf(why, sizeof why, "cannot open the input %.900s: %s", cu->job.input_path,
                 strerror(errno));
        jobs_fail(j, why);
        return 1;
    }
    /* Its lines are numbered and resumed by byte offset: an input changed
     * since it was submitted (rewritten in place by an editor, a script)
     * would give results under the wrong line numbers and ids. */
    struct stat in_sb;
    if (cu->job.input_size > 0 && fstat(fileno(cu->in), &in_sb) == 0 &&
        ((int64_t)in_sb.st_size != cu->job.input_size ||
         (int64_t)in_sb.st_mtim.tv_sec * 1000000000 + in_sb.st_mtim.tv_nsec !=
             cu->job.input_mtime_ns)) {
        snprintf(why, sizeof why, "the input %.900s changed since the job was submitted (%lld "
                 "bytes then, %lld now): its results would not match its lines; submit it again",
                 cu->job.input_path, (long long)cu->job.input_size, (long long)in_sb.st_size);
        jobs_fail(j, why);
        return 1;
    }
    if (cu->job.lines_total < 0)
        cu->job.lines_total = jobs_count_lines(cu->in);
    cu->out_fd = open(cu->job.output_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    /* Shorter than committed: lines said done are gone (the file was cut
     * or restored from an older copy). Truncating up would pad it with
     * NUL bytes and serve them as results; the job fails, saying so. */
    struct stat sb;
    if (cu->out_fd >= 0 && fstat(cu->out_fd, &sb) == 0 && sb.st_size < cu->job.out_size) {
        snprintf(why, sizeof why, "the results file %.900s has %lld bytes, fewer than the %lld "
                 "committed: it was changed outside batchgate, and lines said done are lost",
                 cu->job.output_path, (long long)sb.st_size, (long long)cu->job.out_size);
        jobs_fail(j, why);
        return 1;
    }
    /* What is past the committed size was written but never committed: its
     * lines are done again from the committed input offset. */
    if (cu->out_fd < 0 || ftruncate(cu->out_fd, cu->job.out_size) != 0 ||
        lseek(cu->out_fd, cu->job.out_size, SEEK_SET) < 0 ||
        fseeko(cu->in, cu->job.in_offset, SEEK_SET) != 0) {
        snprintf(why, sizeof why, "cannot resume the results file %.900s: %s", cu->job.output_path,
                 strerror(errno));
        jobs_fail(j, why);
        return 1;
    }
    if (cu->job.out_size == 0)
        jobs_sync_dir(j->dir);   /* the results file may be new */
    cu->offset = cu->job.in_offset;
    cu->pending_end_offset = cu->job.in_offset;
    cu->next_line = cu->job.lines_done + 1;
    cu->last_commit_ns = cu->last_done_ns = jobs_mono_ns();
    /* A job that waited for its model: its reason goes with the wait. */
    if (state_job_set_state(j->st, cu->job.id, STATE_JOB_RUNNING, cu->job.lines_total,
                            cu->job.reason[0] ? "" : NULL,
                            &err)) {
        /* The database refused the write (a lock, a full disk), as it
         * refuses progress: the job waits, it has not failed. Failed here,
         * a lock held past two busy timeouts (~11 s) ended a job for good. */
        jobs_suspend(j, err.msg);
        return 1;
    }
    cu->job.state = STATE_JOB_RUNNING;   /* as a wait records it (jobs_yield) */
    cu->job.reason[0] = '\0';
    log_info("job %s %s at line %lld of %lld", cu->job.id,
             cu->job.lines_done ? "resumes" : "starts", (long long)cu->next_line,
             (long long)cu->job.lines_total);
    return 1;
}

/* One pass over the current job: fill the window, collect, commit when a
 * group is due, finish at the end. Returns true when it made progress. */
static bool jobs_pump(struct jobs *j)
{
    struct jobs_cur *cu = &j->cur;
    bool progress = false;
    while (!cu->eof && cu->count < JOBS_WINDOW) {
        if (jobs_feed_one(j) == 0)
            progress = true;
    }
    int64_t before = cu->pending_lines;
    jobs_collect(j);
    int64_t now = jobs_mono_ns();
    if (cu->pending_lines != before) {
        progress = true;
        cu->last_done_ns = now;
    }
    bool end = cu->eof && cu->count == 0;
    if (cu->pending_lines >= JOBS_GROUP_LINES || end || cu->overloaded_s ||
        (cu->pending_lines > 0 && jobs_mono_ns() - cu->last_commit_ns >= JOBS_GROUP_NS)) {
        struct error err = {0};
        if (jobs_commit(j, &err)) {
            if (cu->db_refused)
                jobs_suspend(j, err.msg);
            else
                jobs_fail(j, err.msg);
            return true;
        }
    }
    if (cu->overloaded_s) {
        jobs_hold(j);
        return true;
    }
    if (end) {
        struct error err;
        (void)jobs_finish(j, STATE_JOB_COMPLETED, NULL, &err);
        return true;
    }
    if (cu->count > 0 && now - cu->last_done_ns >= JOBS_STARVED_NS &&
        j->nwaits < JOBS_WAITS_MAX) {
        cu->last_done_ns = now;   /* looked: again in JOBS_STARVED_NS */
        if (jobs_other_model_waits(j)) {
            jobs_yield(j);
            return true;
        }
    }
    return progress;
}

/* ---- commands ---- */



static void jobs_cmd_create(struct jobs *j, struct jobs_cmd *c)
{
    struct state_job job;
    memset(&job, 0, sizeof job);
    jobs_new_id("job-", job.id, sizeof job.id);
    snprintf(job.model, sizeof job.model, "%s", c->model);
    job.version = c->version;
    snprintf(job.tenant, sizeof job.tenant, "%s", c->tenant[0] ? c->tenant : "default");
    job.state = STATE_JOB_QUEUED;
    job.created_ms = jobs_unix_ms();
    snprintf(job.output_path, sizeof job.output_path, "%.900s/%s.results.jsonl", j->dir, job.id);
    struct error err = {0};
    int rc = 0;
    if (c->body) {
        snprintf(job.input_path, sizeof job.input_path, "%.900s/%s.input.jsonl", j->dir, job.id);
        rc = jobs_write_file(job.input_path, c->body, c->body_len, &err);
    } else {
        snprintf(job.input_path, sizeof job.input_path, "%s", c->input_path);
    }
    if (rc == 0 && c->body)
        jobs_sync_dir(j->dir);
    struct stat sb;
    if (rc == 0 && stat(job.input_path, &sb) == 0) {   /* what a resume checks */
        job.input_size = (int64_t)sb.st_size;
        job.input_mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    }
    if (rc == 0 && (rc = state_job_insert(j->st, &job, &err)) != 0 && c->body)
        unlink(job.input_path);
    free(c->body);
    c->body = NULL;
    c->status = rc;
    if (rc) {
        snprintf(c->error, sizeof c->error, "%.500s", err.msg);
        return;
    }
    snprintf(c->id, sizeof c->id, "%s", job.id);
    c->state = STATE_JOB_QUEUED;
    log_info("job %s queued for model %s by tenant %s (%s)", job.id, job.model, job.tenant,
             job.input_path);
}

static void jobs_cmd_cancel(struct jobs *j, struct jobs_cmd *c)
{
    struct state_job job;
    struct error err = {0};
    if (j->cur.active && strcmp(j->cur.job.id, c->id) == 0) {
        /* The state the database holds now: CANCELLED, or FAILED when its
         * results could not be kept; refused, the job runs on (503). */
        int rc = jobs_finish(j, STATE_JOB_CANCELLED, NULL, &err);
        c->status = rc < 0 ? rc : 0;
        if (rc < 0)
            snprintf(c->error, sizeof c->error, "the job is not cancelled: %.450s", err.msg);
        else
            c->state = rc;
        return;
    }
    int rc = state_job_get(j->st, c->id, &job, &err);
    if (rc == 0 && job.state <= STATE_JOB_RUNNING) {
        /* A job waiting for its model: its reason and its place among the
         * waits go (a cancelled job said "waiting", and its place, held to
         * its next look, failed one job too many). */
        rc = state_job_set_state(j->st, c->id, STATE_JOB_CANCELLED, -1, job.reason[0] ? "" : NULL,
                                 &err);
        if (rc == 0) {   /* the held job, maybe: those behind need not wait */
            j->hold_until_ns = 0;
            j->holds_in_row = 0;
            jobs_wait_drop(j, c->id);
        }
    }
    c->status = rc;
    if (rc) {
        snprintf(c->error, sizeof c->error, "%.500s", err.msg);
        return;
    }
    c->state = job.state <= STATE_JOB_RUNNING ? STATE_JOB_CANCELLED : job.state;
}

static void jobs_run_cmds(struct jobs *j, struct jobs_cmd *c)
{
    while (c) {
        struct jobs_cmd *next = c->next;
        if (c->kind == JOBS_CMD_CREATE)
            jobs_cmd_create(j, c);
        else if (c->kind == JOBS_CMD_CANCEL)
            jobs_cmd_cancel(j, c);
        else
            jobs_batch_cmd(j, c);
        c->done(c);
        c = next;
    }
}

/* A file of jobs.dir no job needs: a submission's input written, its row
 * never inserted (killed between the two: the file stayed for ever,
 * retention works from rows), or a results file whose row is gone. */
static bool jobs_orphan(struct jobs *j, const char *name)
{
    char id[48];
    struct state_job job;
    struct error err = {0};
    if (!jobs_own_name(name, "job-", ".input.jsonl", id, sizeof id) &&
        !jobs_own_name(name, "job-", ".results.jsonl", id, sizeof id))
        return false;
    return state_job_get(j->st, id, &job, &err) == -BG_ENOTFOUND;
}

/* ---- the thread ---- */

/* Jobs forgotten per look at most; a look that found this many looks
 * again at the next pass. */
#define JOBS_PURGE_MAX 32

struct jobs_ended {
    char id[JOBS_PURGE_MAX][40];
    char input[JOBS_PURGE_MAX][1024], output[JOBS_PURGE_MAX][1024];
    int n;
};

static void jobs_ended_one(const struct state_job *sj, void *arg)
{
    struct jobs_ended *x = arg;
    if (x->n == JOBS_PURGE_MAX)
        return;
    snprintf(x->id[x->n], sizeof x->id[0], "%s", sj->id);
    snprintf(x->input[x->n], sizeof x->input[0], "%s", sj->input_path);
    snprintf(x->output[x->n], sizeof x->output[0], "%s", sj->output_path);
    x->n++;
}

/* Jobs that ended over jobs.retention_s ago are forgotten, at start and
 * then every minute (or retention, when shorter): their results file,
 * the copy of a submitted body (never an input_path's file, the user's),
 * then their row. Kept, every job ever run stayed on disk and in the
 * database: 40 cancelled 3,000-line jobs left 174 MB in jobs.dir. The
 * files go first: a crash between leaves a row the next look forgets. */
static void jobs_purge(struct jobs *j)
{
    if (j->retention_s <= 0)
        return;
    int64_t now = jobs_unix_ms();
    if (!jobs_look_due(&j->jobs_checked_ms, now, (j->retention_s < 60 ? j->retention_s : 60) * 1000))
        return;
    struct jobs_ended *x = malloc(sizeof *x);
    if (!x)
        return;
    x->n = 0;
    struct error err = {0};
    if (state_job_ended_before(j->st, now - j->retention_s * 1000, JOBS_PURGE_MAX, jobs_ended_one,
                               x, &err)) {
        log_error("ended jobs: %s", err.msg);
        x->n = 0;
    }
    int gone = 0;
    for (int i = 0; i < x->n; i++) {
        char own[1100];
        snprintf(own, sizeof own, "%.900s/%s.input.jsonl", j->dir, x->id[i]);
        if ((unlink(x->output[i]) != 0 && errno != ENOENT) ||
            (strcmp(x->input[i], own) == 0 && unlink(own) != 0 && errno != ENOENT)) {
            log_error("job %s: its files could not be deleted (jobs.retention_s): %s", x->id[i],
                      strerror(errno));
            continue;
        }
        if (state_job_delete(j->st, x->id[i], &err)) {
            log_error("job %s: %s", x->id[i], err.msg);
            continue;
        }
        gone++;
    }
    if (gone)
        log_info("jobs: %d ended over %lld s ago forgotten, their files deleted "
                 "(jobs.retention_s)", gone, (long long)j->retention_s);
    if (x->n == JOBS_PURGE_MAX)
        j->jobs_checked_ms = 0;
    free(x);
}

/* How often the database's file is looked at, and its loss said again. */
#define JOBS_DB_CHECK_MS 2000
#define JOBS_DB_GONE_SAY_MS 600000

/* The database's file deleted or replaced under the running server (a
 * cleanup script, an rm in the wrong folder): everything recorded after
 * that went to a file nobody opens again, and the next start began with
 * an empty database, all without a word. */
static void jobs_check_db(struct jobs *j)
{
    int64_t now = jobs_unix_ms();
    if (!jobs_look_due(&j->db_checked_ms, now, JOBS_DB_CHECK_MS) || !state_file_gone(j->st) ||
        (j->db_gone_said_ms && now - j->db_gone_said_ms < JOBS_DB_GONE_SAY_MS))
        return;
    j->db_gone_said_ms = now;
    log_error("state database %s was deleted or replaced while batchgate runs: the jobs, "
              "batches and usage it records go on into the file it still has open, and are "
              "lost when it stops (that file can be copied back from /proc/%d/fd while it "
              "runs); a restart begins with whatever is at that path then (said again every "
              "%d minutes)", state_path(j->st), (int)getpid(), JOBS_DB_GONE_SAY_MS / 60000);
}

static void *jobs_main(void *arg)
{
    struct jobs *j = arg;
    uint64_t seen = 0;
    /* Job lines are work nobody waits for: decoding them and writing their
     * results should yield the host CPU to the IO threads' online requests,
     * but not starve, since the device they feed idles without them (jobs.h
     * says what each level does). Lowering its own priority needs no
     * privilege. */
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (j->priority == JOBS_PRIORITY_IDLE) {
        struct sched_param sp = {0};
        if (pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp) != 0)
            (void)!setpriority(PRIO_PROCESS, (id_t)tid, 19);
    } else if (j->priority == JOBS_PRIORITY_LOW) {
        (void)!setpriority(PRIO_PROCESS, (id_t)tid, 10);
    }
    jobs_sweep_dir(j, j->dir, jobs_orphan);
    jobs_batch_sweep(j);
    jobs_btok_restore(j);
    for (;;) {
        pthread_mutex_lock(&j->mu);
        struct jobs_cmd *cmds = j->cmds;
        j->cmds = NULL;
        j->cmds_tail = &j->cmds;
        bool stop = j->stop;
        seen = j->events;
        pthread_mutex_unlock(&j->mu);
        jobs_run_cmds(j, cmds);
        if (stop)
            break;
        bool progress;
        if (!j->cur.active)
            progress = jobs_begin_next(j);
        else
            progress = jobs_pump(j);
        progress |= jobs_batch_pump(j);
        jobs_purge(j);
        jobs_check_db(j);
        if (progress)
            continue;
        /* Nothing to do until a line comes back, a command arrives, or the
         * group's time is up (a running job) / a while (idle). */
        int64_t wait_ns = j->cur.active ? JOBS_GROUP_NS / 2 : 1000000000LL;
        if (jobs_batch_running(j) && wait_ns > 100000000LL)
            wait_ns = 100000000LL;   /* a batch's expiry is checked at least this often */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t at = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec + wait_ns;
        ts.tv_sec = (time_t)(at / 1000000000);
        ts.tv_nsec = (long)(at % 1000000000);
        pthread_mutex_lock(&j->mu);
        while (j->events == seen && !j->stop)
            if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) == ETIMEDOUT)
                break;
        pthread_mutex_unlock(&j->mu);
    }
    if (j->cur.active) {
        /* Paused, not finished: the lines taken back run after a restart. */
        jobs_take_back(j);
        jobs_collect(j);
        struct error err = {0};
        if (jobs_commit(j, &err))
            log_error("job %s: %s", j->cur.job.id, err.msg);
        log_info("job %s paused at line %lld", j->cur.job.id, (long long)j->cur.job.lines_done);
        jobs_close_cur(j);
    }
    jobs_batch_pause(j);
    return NULL;
}

int jobs_start(struct jobs *j, struct error *err)
{
    j->caller = llmbatch_new(jobs_batch_returned, j, err);
    if (!j->caller)
        return -err->code;
    int rc = pthread_create(&j->thread, NULL, jobs_main, j);
    if (rc)
        return error_set(err, BG_EINTERNAL, "cannot start the jobs thread: %s", strerror(rc));
    pthread_setname_np(j->thread, "bg-jobs");
    j->running = true;
    return 0;
}

void jobs_stop(struct jobs *j)
{
    if (!j || !j->running)
        return;
    pthread_mutex_lock(&j->mu);
    j->stop = true;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    pthread_join(j->thread, NULL);
    j->running = false;
    /* Commands that arrived too late are refused, so their callers answer. */
    pthread_mutex_lock(&j->mu);
    struct jobs_cmd *c = j->cmds;
    j->cmds = NULL;
    j->cmds_tail = &j->cmds;
    pthread_mutex_unlock(&j->mu);
    while (c) {
        struct jobs_cmd *next = c->next;
        free(c->body);
        c->body = NULL;
        c->status = -BG_ESHUTDOWN;
        snprintf(c->error, sizeof c->error, "the server is shutting down");
        c->done(c);
        c = next;
    }
}

void jobs_free(struct jobs *j)
{
    if (!j)
        return;
    jobs_stop(j);
    /* The lifecycle thread has stopped (serving_stop): nobody calls it now,
     * and a serving table that outlives the runner calls nothing freed. */
    if (j->serving)
        serving_on_loaded(j->serving, NULL, NULL);
    llmbatch_free(j->caller);
    jobs_batch_held_free(j);
    state_close(j->st);
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->lines);
    free(j);
}
