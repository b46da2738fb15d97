/* test_state.c - the state database: schema version, a job's rows, the
 * progress commit, what a reopen sees, and a database from a newer
 * batchgate refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
    assert_int_equal(state_job_next(st, &g, &err), 1);
    assert_string_equal(g.id, "job-1");
    assert_int_equal(state_job_get(st, "nope", &g, &err), -BG_ENOTFOUND);
    assert_int_equal(state_job_set_state(st, "job-1", STATE_JOB_FAILED, -1, "disk full", &err), 0);
    assert_int_equal(state_job_next(st, &g, &err), 0);
    int64_t counts[STATE_JOB_NSTATES];
    assert_int_equal(state_job_counts(st, counts, &err), 0);
    assert_int_equal(counts[STATE_JOB_FAILED], 1);
    assert_int_equal(state_job_get(st, "job-1", &g, &err), 0);
    assert_string_equal(g.reason, "disk full");
    assert_true(g.finished_ms > 0);
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
    assert_int_equal(state_open(dir, &st, &err), -BG_ECONFIG);
    assert_non_null(strstr(err.msg, "newer"));
}

int main(void)
{
    test_scratch_template(dir, sizeof dir, "test-state");
    if (!mkdtemp(dir))
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_rows_and_reopen),
        cmocka_unit_test(test_newer_schema_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
