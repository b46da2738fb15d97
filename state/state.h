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

#include <stdint.h>

#include "common/error.h"

#define STATE_SCHEMA_VERSION 3

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
};

struct state;

const char *state_job_state_name(int s);

/* Opens (creating) `dir`/batchgate.db. */
int state_open(const char *dir, struct state **out, struct error *err);
void state_close(struct state *st);

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
/* The oldest job that is queued or running: 1 and *out, 0 none, <0 error. */
int state_job_next(struct state *st, struct state_job *out, struct error *err);

/* ---- any thread (the read connection) ---- */
/* 0 and *out, -BG_ENOTFOUND, or another error. */
int state_job_get(struct state *st, const char *id, struct state_job *out, struct error *err);
typedef void (*state_job_fn)(const struct state_job *j, void *arg);
/* Every job, oldest first. */
int state_job_list(struct state *st, state_job_fn fn, void *arg, struct error *err);
/* Jobs by state, counts[STATE_JOB_NSTATES]. */
int state_job_counts(struct state *st, int64_t *counts, struct error *err);

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
