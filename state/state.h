/* state.h - the process's durable state: one SQLite database in state_dir
 * (WAL mode) holding the offline jobs and their progress, and the usage
 * ledger.
 *
 * Three connections: the jobs writer (only the jobs runner's thread calls
 * the state_job_* writes, so SQLite never waits on a lock on the request
 * path), the usage ledger's writer (only its thread calls state_usage_add
 * and _rollup, once a minute), and a reader for the GET routes (its own
 * mutex; WAL lets it read while the writers write). Every write a restart
 * depends on is one transaction.
 *
 * The schema's version is PRAGMA user_version (STATE_SCHEMA_VERSION); a
 * database from a newer batchgate is refused rather than misread. */
#ifndef BG_STATE_H
#define BG_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define STATE_SCHEMA_VERSION 7
/* The oldest version whose usage ledger tables read as this one's
 * (state_open_readonly: batchgate report before a server migrated it). */
#define STATE_USAGE_SCHEMA_VERSION 3

enum state_job_state {
    STATE_JOB_QUEUED,
    STATE_JOB_RUNNING,
    STATE_JOB_COMPLETED,
    STATE_JOB_FAILED,
    STATE_JOB_CANCELLED,
    STATE_JOB_NSTATES
};

/* One job row and its progress row. Times are Unix milliseconds, 0: not yet. */
struct state_job {
    char id[40];
    char model[128];
    char tenant[64];                  /* empty until tenants exist */
    int state;                        /* enum state_job_state */
    int64_t created_ms, started_ms, finished_ms;
    int64_t lines_total;              /* -1 until the input was counted */
    char input_path[1024];
    char output_path[1024];
    char reason[512];                 /* why it failed; empty otherwise */
    /* progress: what the results file holds, committed together */
    int64_t in_offset;                /* input bytes consumed by the lines done */
    int64_t out_size;                 /* results file bytes for those lines */
    int64_t lines_done, lines_failed; /* failed: counted in done too */
    /* the input as submitted: a resume refuses one changed since (0: not
     * recorded, a job submitted before they were) */
    int64_t input_size, input_mtime_ns;
    int version;                      /* the model version it runs on; 0: the model's own
                                         (the highest served) */
};

struct state;

const char *state_job_state_name(int s);

/* The server's own hold on `dir` (creating it), for its lifetime: an
 * exclusive flock on the folder and on `dir`/batchgate.lock, which holds
 * its pid. Two servers on one state_dir would both resume the same jobs and
 * Batch API batches and write the same result files; the second is
 * refused, naming the first's pid. The folder's lock keeps holding when the
 * lock file is deleted; the file's is what older builds take. The same for
 * a jobs.dir of its own (the second would delete the first's Batch API
 * files as a crash's leftovers). `what` names the setting in messages
 * ("state_dir", "jobs.dir"). The kernel lets go when the holder dies (kill
 * -9 included), so a restart never finds a stale lock. Readers (batchgate
 * report) do not claim. state_dir_release lets go.
 * Errors: BG_EIO when another holds it, BG_ECONFIG when the folder or the
 * file cannot be made or opened. */
struct state_claim {
    int dir_fd;
    int file_fd;
    unsigned long long dev, ino;   /* the folder held */
};

void state_claim_init(struct state_claim *c);
int state_dir_claim(const char *dir, const char *what, struct state_claim *out,
                    struct error *err);
void state_dir_release(struct state_claim *c);
/* Whether `dir` is the folder `c` holds (a jobs.dir set to the state_dir
 * itself is held already: a second claim would refuse the server itself). */
bool state_claim_covers(const struct state_claim *c, const char *dir);

/* Opens (creating) `dir`/batchgate.db. */
int state_open(const char *dir, struct state **out, struct error *err);
/* Opens `dir`/batchgate.db to read only, writing nothing (batchgate
 * report): a snapshot, a backup, a read-only mount or another user's copy.
 * Only the readers (state_usage_query, ...) may be used on it. A database
 * of another schema version is refused, saying which. */
int state_open_readonly(const char *dir, struct state **out, struct error *err);
/* Whether state_open_readonly could read the database only as a snapshot
 * (a read-only folder: SQLite would have to make the -shm file) while a
 * write-ahead log lies beside it: its commits are not seen. */
bool state_misses_wal(const struct state *st);
void state_close(struct state *st);
/* Whether the database file at its path is no longer the one opened
 * (deleted, or replaced): what is written now goes to a file nobody will
 * open again, and the next start begins with an empty database. */
bool state_file_gone(const struct state *st);
const char *state_path(const struct state *st);

/* What SQLite holds, for GET /debug/memory: all of its heap in the process
 * and that heap's peak, and of it the page caches of this database's
 * connections (each bounded by SQLite's cache_size, 2 MiB by default, so a
 * long run's heap can tell a cache filling up from a leak). Any thread. */
struct state_memory {
    int64_t sqlite_bytes, sqlite_peak_bytes, cache_bytes;
};
void state_memory(struct state *st, struct state_memory *out);

/* ---- the writer thread only ---- */
int state_job_insert(struct state *st, const struct state_job *j, struct error *err);
/* Sets the state (and started_ms when RUNNING, finished_ms when final, the
 * reason when FAILED) and lines_total (when >= 0). */
int state_job_set_state(struct state *st, const char *id, int state, int64_t lines_total,
                        const char *reason, struct error *err);
/* The results file's committed size, the input offset and the counts, in
 * one transaction: what a restart resumes from. */
int state_job_progress(struct state *st, const char *id, int64_t in_offset, int64_t out_size,
                       int64_t lines_done, int64_t lines_failed, struct error *err);
/* The oldest job that is queued or running, but for the nskip ids in skip
 * (jobs waiting for their model): 1 and *out, 0 none, <0 error. */
int state_job_next(struct state *st, const char *const *skip, int nskip, struct state_job *out,
                   struct error *err);
typedef void (*state_job_fn)(const struct state_job *j, void *arg);
/* Up to `max` jobs that ended (completed, failed, cancelled) before
 * before_ms, the earliest ended first. */
int state_job_ended_before(struct state *st, int64_t before_ms, int max, state_job_fn fn,
                           void *arg, struct error *err);
/* Forgets a job: its row and its progress, in one transaction. */
int state_job_delete(struct state *st, const char *id, struct error *err);

/* ---- any thread (the read connection) ---- */
/* 0 and *out, -BG_ENOTFOUND, or another error. */
int state_job_get(struct state *st, const char *id, struct state_job *out, struct error *err);
/* Which jobs state_job_list yields. A NULL or negative field selects all. */
struct state_job_filter {
    const char *tenant;   /* the owner; "default" also owns rows stored without one */
    const char *model;
    int state;            /* enum state_job_state, or -1 */
    const char *after;    /* only the jobs created after this one's place */
    int limit;            /* at most this many; <= 0: no limit */
};
/* The jobs the filter selects, oldest first (f NULL: every job). */
int state_job_list(struct state *st, const struct state_job_filter *f, state_job_fn fn,
                   void *arg, struct error *err);
/* Jobs by state, counts[STATE_JOB_NSTATES]. */
int state_job_counts(struct state *st, int64_t *counts, struct error *err);

/* ---- OpenAI's Batch API (serving/jobs.h, docs/LLM.md "Batch API"): files
 * and batches. Times are Unix seconds (OpenAI's), 0: not yet. ---- */

struct state_file {
    char id[48];                      /* "file-..." */
    char tenant[64];
    char purpose[32];                 /* "batch", "batch_output" */
    char filename[256];
    int64_t bytes, created_at;
    char path[1024];
    int64_t expires_at;               /* 0: never */
};

enum state_batch_status {
    STATE_BATCH_VALIDATING,
    STATE_BATCH_IN_PROGRESS,
    STATE_BATCH_FINALIZING,
    STATE_BATCH_COMPLETED,
    STATE_BATCH_FAILED,
    STATE_BATCH_EXPIRED,
    STATE_BATCH_CANCELLING,
    STATE_BATCH_CANCELLED,
    STATE_BATCH_NSTATUS
};

struct state_batch {
    char id[48];                      /* "batch_..." */
    char tenant[64];
    char endpoint[32];                /* "/v1/chat/completions", ... */
    char input_file_id[48];
    char input_path[1024];
    char completion_window[16];
    char metadata[2048];              /* JSON text: an object, or "null" */
    int status;                       /* enum state_batch_status */
    /* created_at, in_progress_at, finalizing_at, completed_at, failed_at,
     * expired_at, cancelling_at, cancelled_at, expires_at */
    int64_t at[9];
    int64_t total, completed, failed;
    char output_file_id[48], error_file_id[48];
    char errors[1024];                /* JSON text of OpenAI's `errors`, or "" */
    int64_t output_expires_s;         /* its output files expire that long after they are written; 0: never */
};
enum { STATE_BATCH_AT_CREATED, STATE_BATCH_AT_EXPIRES = 8 };

const char *state_batch_status_name(int s);
/* The *_at field name of a status ("in_progress_at"); created_at for VALIDATING. */
const char *state_batch_at_name(int i);

/* The jobs thread (the writer): */
int state_file_insert(struct state *st, const struct state_file *f, struct error *err);
int state_file_delete(struct state *st, const char *id, struct error *err);
int state_batch_insert(struct state *st, const struct state_batch *b, struct error *err);
/* The status, its *_at set to now (seconds). */
int state_batch_set_status(struct state *st, const char *id, int status, int64_t now,
                           struct error *err);
/* One line's result, and the batch's counts, in one transaction: a line
 * whose result is committed is never run again. 1: it was already (nothing changed). */
int state_batch_result_add(struct state *st, const char *id, int64_t line, bool ok,
                           const char *body, size_t len, struct error *err);
typedef void (*state_result_fn)(int64_t line, bool ok, const char *body, size_t len, void *arg);
/* The committed results of a batch in line order. */
int state_batch_results(struct state *st, const char *id, state_result_fn fn, void *arg,
                        struct error *err);
/* The end of a batch in one transaction: the output and error files' rows
 * (either NULL: none), their ids on the batch, its final status and errors;
 * `unrun` lines that never ran (an expired batch's, in its error file) are
 * added to its failed count. */
int state_batch_finish(struct state *st, const char *id, int status, const struct state_file *out,
                       const struct state_file *errf, const char *errors, int64_t unrun,
                       int64_t now, struct error *err);
/* The batches in_progress (or validating, cancelling, finalizing), oldest
 * first, to fn. */
typedef void (*state_batch_fn)(const struct state_batch *b, void *arg);
int state_batch_unfinished(struct state *st, state_batch_fn fn, void *arg, struct error *err);

/* Any thread (the read connection): */
int state_file_get(struct state *st, const char *id, struct state_file *out, struct error *err);
typedef void (*state_file_fn)(const struct state_file *f, void *arg);
/* Newest first, or oldest first. */
int state_file_list(struct state *st, bool oldest_first, state_file_fn fn, void *arg,
                    struct error *err);
/* Files whose expires_at is set and at most `now`, the first to expire
 * first, at most `max` of them. */
int state_file_expired(struct state *st, int64_t now, int max, state_file_fn fn, void *arg,
                       struct error *err);
int state_batch_get(struct state *st, const char *id, struct state_batch *out, struct error *err);
/* Batches per status: counts[STATE_BATCH_NSTATUS]. */
int state_batch_counts(struct state *st, int64_t *counts, struct error *err);
/* Newest first (OpenAI's order). */
int state_batch_list(struct state *st, state_batch_fn fn, void *arg, struct error *err);

/* ---- the usage ledger's storage (usage.c; SPEC.md "Usage and cost"),
 * filled by serving/ledger.c ---- */

/* One ledger row: a period (a minute's or an hour's start, Unix seconds)
 * and a (tenant, model, class, device) key; a query's row has "" for the
 * keys it does not group by. */
struct state_usage_row {
    int64_t start;
    char tenant[64], model[128], cls[16], device[128];
    int64_t requests, rows;
    double busy_s, held_s, idle_s, cost, energy_j;
};
/* The ledger thread only: adds rows to their minutes (a row already there
 * is summed with), all in one transaction. Stored as busy and idle (held
 * is their sum) in microseconds, cost in millionths, energy in mJ. */
int state_usage_add(struct state *st, const struct state_usage_row *rows, int n,
                    struct error *err);
/* The ledger thread only: minute rows that started before `minutes_before`
 * become hour rows (summed by hour and key), hour rows that started before
 * `hours_before` are deleted; one transaction. */
int state_usage_rollup(struct state *st, int64_t minutes_before, int64_t hours_before,
                       struct error *err);

enum {
    STATE_USAGE_BY_TENANT = 1,
    STATE_USAGE_BY_MODEL = 2,
    STATE_USAGE_BY_CLASS = 4,
    STATE_USAGE_BY_DEVICE = 8,
};
typedef void (*state_usage_fn)(const struct state_usage_row *r, void *arg);
/* Any thread: rows summed by period of `step` seconds (from `from`, the
 * last one cut at `to`) and the keys in `group_by`, in [from, to), in
 * period then key order; `tenant` non-NULL keeps that tenant's rows only.
 * An hour row counts in the period its hour starts in. */
int state_usage_query(struct state *st, int64_t from, int64_t to, int64_t step, int group_by,
                      const char *tenant, state_usage_fn fn, void *arg, struct error *err);

#endif
