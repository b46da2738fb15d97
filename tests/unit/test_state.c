/* test_state.c - the state database: schema version, a job's rows, the
 * progress commit, what a reopen sees, the usage ledger's rows, queries and
 * rollup, and a database from a newer batchgate refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include <cmocka.h>
#include <sqlite3.h>

#include "state/state.h"
#include "tests/unit/scratch.h"

static char dir[200];

static void test_job_rows_and_reopen(void **s)
{
    (void)s;
    struct state *st;
    struct error err = {0};
    assert_int_equal(state_open(dir, &st, &err), 0);
    struct state_job j;
    memset(&j, 0, sizeof j);
    strcpy(j.id, "job-1");
    strcpy(j.model, "m");
    j.created_ms = 1000;
    strcpy(j.input_path, "/in");
    strcpy(j.output_path, "/out");
    j.version = 2;
    assert_int_equal(state_job_insert(st, &j, &err), 0);
    assert_int_equal(state_job_insert(st, &j, &err), -BG_EIO);   /* same id */
    assert_int_equal(state_job_set_state(st, "job-1", STATE_JOB_RUNNING, 10, NULL, &err), 0);
    assert_int_equal(state_job_progress(st, "job-1", 123, 456, 7, 2, &err), 0);
    state_close(st);

    assert_int_equal(state_open(dir, &st, &err), 0);
    struct state_job g;
    assert_int_equal(state_job_get(st, "job-1", &g, &err), 0);
    assert_int_equal(g.state, STATE_JOB_RUNNING);
    assert_true(g.started_ms > 0);
    assert_int_equal(g.lines_total, 10);
    assert_int_equal(g.in_offset, 123);
    assert_int_equal(g.out_size, 456);
    assert_int_equal(g.lines_done, 7);
    assert_int_equal(g.lines_failed, 2);
    assert_int_equal(g.version, 2);
    assert_int_equal(state_job_next(st, NULL, 0, &g, &err), 1);
    assert_string_equal(g.id, "job-1");
    /* A job waiting for its model is passed by. */
    const char *skip[] = {"job-1", "other"};
    assert_int_equal(state_job_next(st, skip, 2, &g, &err), 0);
    assert_int_equal(state_job_next(st, skip + 1, 1, &g, &err), 1);
    assert_string_equal(g.id, "job-1");
    const char *many[65];
    for (int i = 0; i < 65; i++)
        many[i] = "x";
    assert_int_equal(state_job_next(st, many, 65, &g, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "at most 64"));
    assert_int_equal(state_job_next(st, many, 64, &g, &err), 1);
    assert_int_equal(state_job_get(st, "nope", &g, &err), -BG_ENOTFOUND);
    assert_int_equal(state_job_set_state(st, "job-1", STATE_JOB_FAILED, -1, "disk full", &err), 0);
    assert_int_equal(state_job_next(st, NULL, 0, &g, &err), 0);
    int64_t counts[STATE_JOB_NSTATES];
    assert_int_equal(state_job_counts(st, counts, &err), 0);
    assert_int_equal(counts[STATE_JOB_FAILED], 1);
    assert_int_equal(state_job_get(st, "job-1", &g, &err), 0);
    assert_string_equal(g.reason, "disk full");
    assert_true(g.finished_ms > 0);
    state_close(st);
}

struct ids {
    char id[8][40];
    int n;
};

static void ids_collect(const struct state_job *j, void *arg)
{
    struct ids *x = arg;
    if (x->n < 8)
        snprintf(x->id[x->n++], sizeof x->id[0], "%s", j->id);
}

static char *ids_joined(const struct ids *x, char *out, size_t cap)
{
    out[0] = '\0';
    for (int i = 0; i < x->n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%s", i ? " " : "", x->id[i]);
    return out;
}

/* GET /v2/jobs's query: by owner (a row stored without one is the
 * default's), model and state, pages after a job's place in creation
 * order (ties in created_ms by insertion). */
static void test_job_list_filter(void **s)
{
    (void)s;
    struct state *st;
    struct error err = {0};
    assert_int_equal(state_open(dir, &st, &err), 0);
    static const struct {
        const char *id, *tenant, *model;
        int64_t created;
    } rows[] = {{"l1", "", "lm", 5000}, {"l2", "a", "lm", 5000}, {"l3", "default", "ln", 5000},
                {"l4", "a", "ln", 4000}, {"l5", "", "lm", 6000}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        struct state_job j;
        memset(&j, 0, sizeof j);
        strcpy(j.id, rows[i].id);
        strcpy(j.tenant, rows[i].tenant);
        strcpy(j.model, rows[i].model);
        j.created_ms = rows[i].created;
        strcpy(j.input_path, "/in");
        strcpy(j.output_path, "/out");
        assert_int_equal(state_job_insert(st, &j, &err), 0);
    }
    assert_int_equal(state_job_set_state(st, "l2", STATE_JOB_RUNNING, 1, NULL, &err), 0);
    static const struct {
        struct state_job_filter f;
        const char *want;
    } cases[] = {
        {{.model = "lm", .state = -1}, "l1 l2 l5"},
        {{.model = "ln", .state = -1}, "l4 l3"},
        {{.tenant = "default", .state = STATE_JOB_QUEUED}, "l1 l3 l5"},   /* not job-1 */
        {{.tenant = "a", .state = -1}, "l4 l2"},
        {{.tenant = "a", .state = STATE_JOB_RUNNING}, "l2"},
        {{.model = "lm", .state = STATE_JOB_QUEUED, .limit = 1}, "l1"},
        {{.model = "lm", .state = -1, .after = "l1", .limit = 1}, "l2"},
        {{.model = "lm", .state = -1, .after = "l2"}, "l5"},
        {{.model = "lm", .state = -1, .after = "l4"}, "l1 l2 l5"},   /* another model's place */
        {{.model = "lm", .state = -1, .after = "l5"}, ""},
        {{.model = "lm", .state = -1, .after = "nope"}, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct ids x = {0};
        char got[128];
        assert_int_equal(state_job_list(st, &cases[i].f, ids_collect, &x, &err), 0);
        if (strcmp(ids_joined(&x, got, sizeof got), cases[i].want) != 0)
            fail_msg("case %zu: got \"%s\", want \"%s\"", i, got, cases[i].want);
    }
    state_close(st);
}

/* ---- the usage ledger ---- */

static struct state_usage_row usage_row(int64_t start, const char *tenant, const char *model,
                                        const char *cls, double busy, double held)
{
    struct state_usage_row r;
    memset(&r, 0, sizeof r);
    r.start = start;
    snprintf(r.tenant, sizeof r.tenant, "%s", tenant);
    snprintf(r.model, sizeof r.model, "%s", model);
    snprintf(r.cls, sizeof r.cls, "%s", cls);
    snprintf(r.device, sizeof r.device, "cpu0");
    r.requests = 10;
    r.rows = 20;
    r.busy_s = busy;
    r.held_s = held;
    r.idle_s = held - busy;
    r.cost = held * 0.5;
    return r;
}

struct usage_got {
    struct state_usage_row r[64];
    int n;
};

static void usage_collect(const struct state_usage_row *r, void *arg)
{
    struct usage_got *g = arg;
    if (g->n < 64)
        g->r[g->n++] = *r;
}

/* Rows add up per minute and key, survive a reopen, group by any keys and
 * periods; a rollup keeps every total while minutes become hours; a
 * tenant sees its own rows only. */
static void test_usage_rows_query_and_rollup(void **s)
{
    (void)s;
    struct state *st;
    struct error err = {0};
    assert_int_equal(state_open(dir, &st, &err), 0);
    const int64_t h0 = 1764748800;   /* an hour's start (2025-12-03 08:00 UTC) */
    struct state_usage_row rows[] = {
        usage_row(h0, "a", "m1", "online", 10, 60),
        usage_row(h0, "b", "m1", "online", 20, 60),
        usage_row(h0 + 60, "a", "m1", "offline", 5, 60),
        usage_row(h0 + 3600, "a", "m2", "online", 30, 60),
    };
    assert_int_equal(state_usage_add(st, rows, 4, &err), 0);
    assert_int_equal(state_usage_add(st, rows, 1, &err), 0);   /* the same minute and key again */
    state_close(st);
    assert_int_equal(state_open(dir, &st, &err), 0);

    struct usage_got g = {.n = 0};
    assert_int_equal(state_usage_query(st, h0, h0 + 7200, 7200, 0, NULL, usage_collect, &g, &err),
                     0);
    assert_int_equal(g.n, 1);
    assert_true(g.r[0].busy_s == 10 + 20 + 5 + 30 + 10);
    assert_int_equal(g.r[0].requests, 50);
    assert_string_equal(g.r[0].tenant, "");

    g.n = 0;
    assert_int_equal(state_usage_query(st, h0, h0 + 7200, 3600, STATE_USAGE_BY_TENANT, NULL,
                                       usage_collect, &g, &err), 0);
    assert_int_equal(g.n, 3);   /* (h0, a), (h0, b), (h0 + 1 h, a) */
    assert_true(g.r[0].start == h0 && strcmp(g.r[0].tenant, "a") == 0 && g.r[0].busy_s == 25);
    assert_true(g.r[1].start == h0 && strcmp(g.r[1].tenant, "b") == 0 && g.r[1].busy_s == 20);
    assert_true(g.r[2].start == h0 + 3600 && g.r[2].busy_s == 30);

    g.n = 0;   /* a tenant's own rows only */
    assert_int_equal(state_usage_query(st, h0, h0 + 7200, 7200, STATE_USAGE_BY_CLASS, "a",
                                       usage_collect, &g, &err), 0);
    assert_int_equal(g.n, 2);
    assert_true(strcmp(g.r[0].cls, "offline") == 0 && g.r[0].busy_s == 5);
    assert_true(strcmp(g.r[1].cls, "online") == 0 && g.r[1].busy_s == 50);

    /* Minutes of the first hour become an hour row: totals unchanged. */
    assert_int_equal(state_usage_rollup(st, h0 + 3600, 0, &err), 0);
    g.n = 0;
    assert_int_equal(state_usage_query(st, h0, h0 + 7200, 7200,
                                       STATE_USAGE_BY_TENANT | STATE_USAGE_BY_MODEL |
                                           STATE_USAGE_BY_CLASS | STATE_USAGE_BY_DEVICE,
                                       NULL, usage_collect, &g, &err), 0);
    double busy = 0, held = 0, cost = 0;
    for (int i = 0; i < g.n; i++) {
        busy += g.r[i].busy_s;
        held += g.r[i].held_s;
        cost += g.r[i].cost;
    }
    assert_true(busy == 75 && held == 300 && cost == 150);
    /* Hours older than the retention go. */
    assert_int_equal(state_usage_rollup(st, h0 + 3600, h0 + 3600, &err), 0);
    g.n = 0;
    assert_int_equal(state_usage_query(st, h0, h0 + 7200, 7200, 0, NULL, usage_collect, &g, &err),
                     0);
    assert_int_equal(g.n, 1);
    assert_true(g.r[0].busy_s == 30);
    assert_int_equal(state_usage_query(st, h0, h0, 60, 0, NULL, usage_collect, &g, &err),
                     -BG_EINVAL);
    state_close(st);
}

/* A version-1 database (jobs only) and a version-2 one (the first ledger
 * tables, never written by a release) become the current version: jobs
 * kept, the ledger's tables in their current shape. */
static void test_old_databases_migrate(void **s)
{
    (void)s;
    char path[256];
    snprintf(path, sizeof path, "%s/batchgate.db", dir);
    /* (Neither had the Batch API's tables, which later versions alter.) */
    static const char *const downgrade[2] = {
        "DROP TABLE usage_key; DROP TABLE usage_minute; DROP TABLE usage_hour;"
        "DROP TABLE files; DROP TABLE batches; DROP TABLE batch_results;"
        "ALTER TABLE jobs DROP COLUMN input_size; ALTER TABLE jobs DROP COLUMN input_mtime_ns; ALTER TABLE jobs DROP COLUMN version;"
        "PRAGMA user_version=1",
        "DROP TABLE usage_key; DROP TABLE usage_minute; DROP TABLE usage_hour;"
        "DROP TABLE files; DROP TABLE batches; DROP TABLE batch_results;"
        "CREATE TABLE usage_minute (start INTEGER, tenant TEXT, busy_s REAL);"
        "CREATE TABLE usage_hour (start INTEGER, tenant TEXT, busy_s REAL);"
        "ALTER TABLE jobs DROP COLUMN input_size; ALTER TABLE jobs DROP COLUMN input_mtime_ns; ALTER TABLE jobs DROP COLUMN version;"
        "PRAGMA user_version=2",
    };
    for (int v = 0; v < 2; v++) {
        sqlite3 *db;
        assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
        assert_int_equal(sqlite3_exec(db, downgrade[v], NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        struct state *st;
        struct error err = {0};
        assert_int_equal(state_open(dir, &st, &err), 0);
        struct state_job g;
        assert_int_equal(state_job_get(st, "job-1", &g, &err), 0);
        struct state_usage_row r = usage_row(1764748800, "a", "m", "online", 1, 60);
        assert_int_equal(state_usage_add(st, &r, 1, &err), 0);
        assert_int_equal(state_usage_rollup(st, 1764748800 + 3600, 0, &err), 0);
        struct usage_got got = {.n = 0};
        assert_int_equal(state_usage_query(st, 1764748800, 1764748800 + 3600, 3600, 0, NULL,
                                           usage_collect, &got, &err), 0);
        assert_int_equal(got.n, 1);
        assert_true(got.r[0].busy_s == 1 && got.r[0].held_s == 60);
        state_close(st);
    }
}

/* Hour rows pack many keys (more than one blob's worth), sum with minutes
 * rolled into the same hour later, and keep milliseconds, millionths and
 * joules exactly. */
static void test_usage_hour_blobs(void **s)
{
    (void)s;
    struct state *st;
    struct error err = {0};
    assert_int_equal(state_open(dir, &st, &err), 0);
    const int64_t h0 = 1764748800 - 30 * 86400;
    struct state_usage_row rows[40];
    for (int i = 0; i < 40; i++) {
        char t[16], m[16];
        snprintf(t, sizeof t, "t%02d", i % 10);
        snprintf(m, sizeof m, "m%02d", i);
        rows[i] = usage_row(h0 + 60 * (i % 3), t, m, i % 2 ? "offline" : "online", 1.25, 2.5);
        rows[i].energy_j = 100;
        rows[i].cost = 0.000125;
    }
    assert_int_equal(state_usage_add(st, rows, 40, &err), 0);
    assert_int_equal(state_usage_rollup(st, h0 + 3600, 0, &err), 0);
    assert_int_equal(state_usage_add(st, rows, 40, &err), 0);   /* late minutes, same hour */
    assert_int_equal(state_usage_rollup(st, h0 + 3600, 0, &err), 0);
    struct usage_got g = {.n = 0};
    assert_int_equal(state_usage_query(st, h0, h0 + 3600, 3600, STATE_USAGE_BY_TENANT, NULL,
                                       usage_collect, &g, &err), 0);
    assert_int_equal(g.n, 10);
    for (int i = 0; i < 10; i++) {
        assert_true(g.r[i].busy_s == 2 * 4 * 1.25);
        assert_true(g.r[i].held_s == 2 * 4 * 2.5);
        assert_int_equal(g.r[i].requests, 2 * 4 * 10);
        assert_true(fabs(g.r[i].cost - 8 * 0.000125) < 1e-9);
        assert_true(g.r[i].energy_j == 800);
    }
    g.n = 0;
    assert_int_equal(state_usage_query(st, h0, h0 + 3600, 3600, STATE_USAGE_BY_MODEL, "t03",
                                       usage_collect, &g, &err), 0);
    assert_int_equal(g.n, 4);
    assert_string_equal(g.r[0].model, "m03");
    assert_string_equal(g.r[3].model, "m33");
    assert_string_equal(g.r[0].tenant, "");
    state_close(st);
}

struct results_got {
    int n;
    int64_t line[8];
    bool ok[8];
};

static void results_collect(int64_t line, bool ok, const char *body, size_t len, void *arg)
{
    struct results_got *g = arg;
    (void)body;
    assert_int_equal(len, 5);
    if (g->n < 8) {
        g->line[g->n] = line;
        g->ok[g->n++] = ok;
    }
}

static void batch_count(const struct state_batch *b, void *arg)
{
    (void)b;
    ++*(int *)arg;
}

/* The Batch API's rows: a version-3 database gains them; a line's result
 * is one transaction that counts it, and a second result for the same line
 * changes nothing; the end names the files and the status together. */
static void test_batch_rows(void **s)
{
    (void)s;
    char path[256];
    snprintf(path, sizeof path, "%s/batchgate.db", dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "DROP TABLE IF EXISTS files; DROP TABLE IF EXISTS batches;"
                                      "DROP TABLE IF EXISTS batch_results; ALTER TABLE jobs DROP COLUMN input_size;"
                                      "ALTER TABLE jobs DROP COLUMN input_mtime_ns; ALTER TABLE jobs DROP COLUMN version; PRAGMA user_version=3",
                                  NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    struct state *st;
    struct error err = {0};
    assert_int_equal(state_open(dir, &st, &err), 0);
    struct state_file f = {.bytes = 10, .created_at = 100};
    strcpy(f.id, "file-1");
    strcpy(f.tenant, "a");
    strcpy(f.purpose, "batch");
    strcpy(f.filename, "in.jsonl");
    strcpy(f.path, "/x/file-1.jsonl");
    assert_int_equal(state_file_insert(st, &f, &err), 0);
    struct state_batch b;
    memset(&b, 0, sizeof b);
    strcpy(b.id, "batch_1");
    strcpy(b.tenant, "a");
    strcpy(b.endpoint, "/v1/chat/completions");
    strcpy(b.input_file_id, "file-1");
    strcpy(b.completion_window, "24h");
    b.status = STATE_BATCH_IN_PROGRESS;
    b.at[STATE_BATCH_AT_CREATED] = b.at[STATE_BATCH_IN_PROGRESS] = 100;
    b.at[STATE_BATCH_AT_EXPIRES] = 100 + 86400;
    b.total = 3;
    assert_int_equal(state_batch_insert(st, &b, &err), 0);
    assert_int_equal(state_batch_result_add(st, "batch_1", 2, true, "two\n\n", 5, &err), 0);
    assert_int_equal(state_batch_result_add(st, "batch_1", 2, false, "TWO\n\n", 5, &err), 1);
    assert_int_equal(state_batch_result_add(st, "batch_1", 1, false, "one\n\n", 5, &err), 0);
    state_close(st);

    assert_int_equal(state_open(dir, &st, &err), 0);
    struct state_batch g;
    assert_int_equal(state_batch_get(st, "batch_1", &g, &err), 0);
    assert_int_equal(g.completed, 1);
    assert_int_equal(g.failed, 1);
    assert_string_equal(g.metadata, "null");
    int unfinished = 0;
    assert_int_equal(state_batch_unfinished(st, batch_count, &unfinished, &err), 0);
    assert_int_equal(unfinished, 1);
    struct results_got got = {0};
    assert_int_equal(state_batch_results(st, "batch_1", results_collect, &got, &err), 0);
    assert_int_equal(got.n, 2);
    assert_true(got.line[0] == 1 && !got.ok[0] && got.line[1] == 2 && got.ok[1]);
    struct state_file out = f;
    strcpy(out.id, "file-2");
    strcpy(out.purpose, "batch_output");
    assert_int_equal(state_batch_get(st, "batch_1", &g, &err), 0);
    int64_t failed_before = g.failed;
    /* Lines that never ran (an expired batch's) are counted failed. */
    assert_int_equal(state_batch_finish(st, "batch_1", STATE_BATCH_COMPLETED, &out, NULL, NULL,
                                        3, 200, &err), 0);
    assert_int_equal(state_batch_get(st, "batch_1", &g, &err), 0);
    assert_int_equal(g.failed, failed_before + 3);
    assert_int_equal(g.status, STATE_BATCH_COMPLETED);
    assert_int_equal(g.at[STATE_BATCH_COMPLETED], 200);
    assert_string_equal(g.output_file_id, "file-2");
    assert_string_equal(g.error_file_id, "");
    unfinished = 0;
    assert_int_equal(state_batch_unfinished(st, batch_count, &unfinished, &err), 0);
    assert_int_equal(unfinished, 0);
    /* Its lines' results went with the end (its files hold them): kept,
     * every line of every batch stayed in the database for ever. */
    memset(&got, 0, sizeof got);
    assert_int_equal(state_batch_results(st, "batch_1", results_collect, &got, &err), 0);
    assert_int_equal(got.n, 0);
    /* Rows an older batchgate left behind an ended batch go at the next open. */
    assert_int_equal(state_batch_result_add(st, "batch_1", 3, true, "three\n\n", 7, &err), 0);
    state_close(st);
    assert_int_equal(state_open(dir, &st, &err), 0);
    assert_int_equal(state_batch_results(st, "batch_1", results_collect, &got, &err), 0);
    assert_int_equal(got.n, 0);
    struct state_file fg;
    assert_int_equal(state_file_get(st, "file-2", &fg, &err), 0);
    assert_string_equal(fg.purpose, "batch_output");
    assert_int_equal(state_file_delete(st, "file-1", &err), 0);
    assert_int_equal(state_file_get(st, "file-1", &fg, &err), -BG_ENOTFOUND);
    assert_int_equal(state_batch_get(st, "nope", &g, &err), -BG_ENOTFOUND);
    state_close(st);
}

struct files_got {
    int n;
    char id[4][48];
};

static void files_collect(const struct state_file *f, void *arg)
{
    struct files_got *g = arg;
    if (g->n < 4)
        snprintf(g->id[g->n++], sizeof g->id[0], "%s", f->id);
}

/* Version 5: a version-4 database's files and batches gain their expiry
 * (0: never, as before); the expired files come first-to-expire first,
 * bounded, and never those without one. */
static void test_file_expiry_rows(void **s)
{
    (void)s;
    char path[256];
    snprintf(path, sizeof path, "%s/batchgate.db", dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    /* The version-4 shapes, with a row each. */
    assert_int_equal(sqlite3_exec(db,
        "DROP TABLE IF EXISTS files; DROP TABLE IF EXISTS batches;"
        "CREATE TABLE files (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, purpose TEXT NOT NULL,"
        " filename TEXT NOT NULL, bytes INTEGER NOT NULL, created_at INTEGER NOT NULL,"
        " path TEXT NOT NULL);"
        "CREATE TABLE batches (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, endpoint TEXT NOT NULL,"
        " input_file_id TEXT NOT NULL, input_path TEXT NOT NULL, completion_window TEXT NOT NULL,"
        " metadata TEXT NOT NULL DEFAULT 'null', status INTEGER NOT NULL,"
        " created_at INTEGER NOT NULL, in_progress_at INTEGER NOT NULL DEFAULT 0,"
        " finalizing_at INTEGER NOT NULL DEFAULT 0, completed_at INTEGER NOT NULL DEFAULT 0,"
        " failed_at INTEGER NOT NULL DEFAULT 0, expired_at INTEGER NOT NULL DEFAULT 0,"
        " cancelling_at INTEGER NOT NULL DEFAULT 0, cancelled_at INTEGER NOT NULL DEFAULT 0,"
        " expires_at INTEGER NOT NULL, total INTEGER NOT NULL,"
        " completed INTEGER NOT NULL DEFAULT 0, failed INTEGER NOT NULL DEFAULT 0,"
        " output_file_id TEXT NOT NULL DEFAULT '', error_file_id TEXT NOT NULL DEFAULT '',"
        " errors TEXT NOT NULL DEFAULT '');"
        "INSERT INTO files VALUES('file-old','a','batch','in.jsonl',1,10,'/x/old');"
        "INSERT INTO batches(id,tenant,endpoint,input_file_id,input_path,completion_window,"
        " status,created_at,expires_at,total) VALUES('batch_old','a','/v1/completions',"
        " 'file-old','/x/old','24h',1,10,86410,1);"
        "ALTER TABLE jobs DROP COLUMN input_size; ALTER TABLE jobs DROP COLUMN input_mtime_ns; ALTER TABLE jobs DROP COLUMN version;"
        "PRAGMA user_version=4", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    struct state *st;
    struct error err = {0};
    assert_int_equal(state_open(dir, &st, &err), 0);
    struct state_file f;
    assert_int_equal(state_file_get(st, "file-old", &f, &err), 0);
    assert_int_equal(f.expires_at, 0);
    struct state_batch b;
    assert_int_equal(state_batch_get(st, "batch_old", &b, &err), 0);
    assert_int_equal(b.output_expires_s, 0);
    b.output_expires_s = 3600;
    strcpy(b.id, "batch_new");
    assert_int_equal(state_batch_insert(st, &b, &err), 0);
    assert_int_equal(state_batch_get(st, "batch_new", &b, &err), 0);
    assert_int_equal(b.output_expires_s, 3600);
    const int64_t at[3] = {150, 50, 120};
    for (int i = 0; i < 3; i++) {
        snprintf(f.id, sizeof f.id, "file-%d", i);
        f.expires_at = at[i];
        assert_int_equal(state_file_insert(st, &f, &err), 0);
    }
    struct files_got g = {0};
    assert_int_equal(state_file_expired(st, 100, 4, files_collect, &g, &err), 0);
    assert_int_equal(g.n, 1);
    assert_string_equal(g.id[0], "file-1");
    g.n = 0;
    assert_int_equal(state_file_expired(st, 1000, 2, files_collect, &g, &err), 0);
    assert_int_equal(g.n, 2);
    assert_string_equal(g.id[0], "file-1");
    assert_string_equal(g.id[1], "file-2");
    g.n = 0;
    assert_int_equal(state_file_expired(st, 149, 4, files_collect, &g, &err), 0);
    assert_int_equal(g.n, 2);
    assert_int_equal(state_file_get(st, "file-0", &f, &err), 0);
    assert_int_equal(f.expires_at, 150);
    state_close(st);
}

static void test_newer_schema_refused(void **s)
{
    (void)s;
    char path[256];
    snprintf(path, sizeof path, "%s/batchgate.db", dir);
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db, "PRAGMA user_version=99", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    struct state *st;
    struct error err = {0};
    assert_int_equal(state_open(dir, &st, &err), -BG_EIO);   /* exit 1, as report's */
    assert_non_null(strstr(err.msg, "newer"));
}

int main(void)
{
    test_scratch_template(dir, sizeof dir, "test-state");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_rows_and_reopen),
        cmocka_unit_test(test_job_list_filter),
        cmocka_unit_test(test_usage_rows_query_and_rollup),
        cmocka_unit_test(test_usage_hour_blobs),
        cmocka_unit_test(test_old_databases_migrate),
        cmocka_unit_test(test_batch_rows),
        cmocka_unit_test(test_file_expiry_rows),
        cmocka_unit_test(test_newer_schema_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (test_scratch_remove(dir) != 0)
        rc = rc ? rc : 1;
    return rc;
}
