/* jobs.h - offline batch jobs: the runner and the one thread that writes
 * the state database (state/state.h).
 *
 * A job is a file of JSON Lines, each a KServe v2 infer request. One runner
 * thread takes the oldest unfinished job, submits its lines to the model's
 * batcher as offline items (a bounded window in flight, so online queues
 * are never flooded; batcher/queue.h says when offline rows run), appends
 * each answer to the job's results file in line order and commits progress.
 *
 * Durability (docs/JOBS.md): after each group of result lines the results
 * file is fdatasync'ed, then (results size, input offset, lines done) are
 * committed in one SQLite transaction. On start the results file is cut
 * back to the committed size and reading resumes at the committed offset,
 * so whatever the process went through (SIGKILL included) each input line
 * ends with exactly one result line.
 *
 * OpenAI's Batch API runs on the same thread (jobs_batch.c): its files and
 * batches are rows of the same database, each line's result committed as
 * the line ends; the lines' calls are made by serving/llmbatch.h.
 *
 * IO threads never write the database nor the job files: they hand a
 * command (create, cancel) to the runner and get it back through `done`,
 * called on the runner thread. They do read (the GET routes: the read
 * connection, and the committed part of a results file). */
#ifndef BG_JOBS_H
#define BG_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "serving/tenant.h"
#include "state/state.h"

struct serving;
struct jobs;

struct jobs_config {
    const char *state_dir;
    const char *dir;                  /* "" or NULL: <state_dir>/jobs */
    size_t max_input_bytes;
    /* The tenants a job's lines run as (by the name the job was stored
     * with); NULL: every job is the tenant "default"'s. Outlives the runner. */
    const struct tenants_config *tenants;
    size_t max_file_bytes;            /* the Batch API: the largest /v1/files upload */
    int64_t file_expiry_s;            /* the Batch API: a file's lifetime when it names none; 0: never */
    int priority;                     /* the runner thread's (enum jobs_priority) */
    int64_t retention_s;              /* an ended job's row and files are kept so long; 0: ever */
};

/* The runner thread's share of a busy host CPU (docs/JOBS.md "Host CPU").
 * It decodes lines and encodes results, about 10 us of CPU a line, and a
 * device whose runner gets no CPU gets no job lines: LOW (nice 10) yields
 * to every normal thread nine to one yet still gets its few percent of a
 * core when the host is saturated; IDLE (SCHED_IDLE) runs only on a core
 * nothing else wants, so a host kept busy by anything starves the
 * harvest; NORMAL competes evenly. */
enum jobs_priority { JOBS_PRIORITY_LOW, JOBS_PRIORITY_IDLE, JOBS_PRIORITY_NORMAL };

enum jobs_cmd_kind {
    JOBS_CMD_CREATE,
    JOBS_CMD_CANCEL,
    /* OpenAI's Batch API (docs/LLM.md "Batch API"): */
    JOBS_CMD_FILE_CREATE,             /* body, filename, purpose, tenant -> id */
    JOBS_CMD_FILE_DELETE,             /* id */
    JOBS_CMD_BATCH_CREATE,            /* file_id, endpoint, window, metadata, tenant -> id */
    JOBS_CMD_BATCH_CANCEL,            /* id */
};

/* A request to the runner, owned by the caller until `done` runs. */
struct jobs_cmd {
    struct jobs_cmd *next;            /* the runner's queue */
    enum jobs_cmd_kind kind;
    char model[128];                  /* create */
    int version;                      /* create: the model version; 0: the model's own */
    char tenant[TENANT_NAME_MAX];     /* create: the submitter's tenant ("": "default") */
    char *body;                       /* create: the input lines (the runner frees it), or NULL */
    size_t body_len;
    char input_path[1024];            /* create from a file under jobs.dir (resolved) */
    char id[48];                      /* create: filled in; cancel: the job */
    int status;                       /* 0, or a -BG_E* code with `error` */
    char error[512];
    int http_status;                  /* with status: the answer's when not the code's */
    char param[64];                   /* with status: the field at fault (OpenAI's `param`) */
    /* The Batch API's: */
    char filename[256], purpose[32];
    char file_id[48], endpoint[32], window[16];
    char metadata[2048];              /* JSON text, or "" */
    /* file create: the file's lifetime; batch create: its output files';
     * seconds, 0 for the default (jobs_config.file_expiry_s) */
    int64_t expires_s;
    int state;                        /* the job's state after the command */
    void (*done)(struct jobs_cmd *c); /* runner thread */
    void *arg;
};

int jobs_open(const struct jobs_config *cfg, struct serving *s, struct jobs **out,
              struct error *err);
/* Starts the runner (after the models are loaded): unfinished jobs resume. */
int jobs_start(struct jobs *j, struct error *err);
/* Stops the runner before the batchers close: the lines in flight are taken
 * back, the results written so far committed; unfinished jobs stay for the
 * next start. */
void jobs_stop(struct jobs *j);
void jobs_free(struct jobs *j);

/* Any thread: queues a command; c->done runs on the runner thread. */
void jobs_command(struct jobs *j, struct jobs_cmd *c);

const char *jobs_dir(const struct jobs *j);
/* The state_dir its database is in (batchgate's own files: no job's input). */
const char *jobs_state_dir(const struct jobs *j);
size_t jobs_max_input_bytes(const struct jobs *j);
size_t jobs_max_file_bytes(const struct jobs *j);
struct state *jobs_state(struct jobs *j);
/* Result lines written for served model `i` since start: ok and failed. */
void jobs_lines(struct jobs *j, int i, uint64_t *ok, uint64_t *failed);
/* Any thread: the tenant's Batch API tokens today (UTC), for its
 * batch_tokens_per_day; 0 with no runner. */
int64_t jobs_batch_tokens_today(struct jobs *j, int tenant);

#endif
