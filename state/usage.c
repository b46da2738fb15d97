/* usage.c - the usage ledger's rows in the state database (state.h;
 * SPEC.md "Usage and cost"): minutes first, rolled up to hours after the
 * minute retention, deleted after the hour retention, so that a year of
 * hourly rows stays small. */
#include "state/state.h"
#include "state/state_impl.h"

#include <stdio.h>
#include <string.h>

static int usage_fail(struct error *err, sqlite3 *db, const char *what)
{
    return error_set(err, BG_EIO, "usage ledger: %s: %s", what, sqlite3_errmsg(db));
}

static int usage_exec(sqlite3 *db, const char *sql, struct error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = error_set(err, BG_EIO, "usage ledger: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return rc;
    }
    return 0;
}

int state_usage_add(struct state *st, const struct state_usage_row *rows, int n,
                    struct error *err)
{
    sqlite3 *db = state_db_usage(st);
    static const char sql[] =
        "INSERT INTO usage_minute (start, tenant, model, class, device, requests, rows, busy_s,"
        " held_s, idle_s, cost, energy_j) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT (start, tenant, model, class, device) DO UPDATE SET"
        " requests = requests + excluded.requests, rows = rows + excluded.rows,"
        " busy_s = busy_s + excluded.busy_s, held_s = held_s + excluded.held_s,"
        " idle_s = idle_s + excluded.idle_s, cost = cost + excluded.cost,"
        " energy_j = energy_j + excluded.energy_j";
    sqlite3_stmt *s = NULL;
    int rc = usage_exec(db, "BEGIN IMMEDIATE", err);
    if (rc)
        return rc;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) {
        rc = usage_fail(err, db, "prepare");
        goto out;
    }
    for (int i = 0; i < n && rc == 0; i++) {
        const struct state_usage_row *r = &rows[i];
        sqlite3_bind_int64(s, 1, r->start);
        sqlite3_bind_text(s, 2, r->tenant, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 3, r->model, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, r->cls, -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 5, r->device, -1, SQLITE_STATIC);
        sqlite3_bind_int64(s, 6, r->requests);
        sqlite3_bind_int64(s, 7, r->rows);
        sqlite3_bind_double(s, 8, r->busy_s);
        sqlite3_bind_double(s, 9, r->held_s);
        sqlite3_bind_double(s, 10, r->idle_s);
        sqlite3_bind_double(s, 11, r->cost);
        sqlite3_bind_double(s, 12, r->energy_j);
        if (sqlite3_step(s) != SQLITE_DONE)
            rc = usage_fail(err, db, "insert");
        sqlite3_reset(s);
    }
out:
    sqlite3_finalize(s);
    if (rc == 0)
        return usage_exec(db, "COMMIT", err);
    usage_exec(db, "ROLLBACK", &(struct error){0});
    return rc;
}

int state_usage_rollup(struct state *st, int64_t minutes_before, int64_t hours_before,
                       struct error *err)
{
    sqlite3 *db = state_db_usage(st);
    char sql[1024];
    snprintf(sql, sizeof sql,
             "BEGIN IMMEDIATE;"
             "INSERT INTO usage_hour (start, tenant, model, class, device, requests, rows, busy_s,"
             " held_s, idle_s, cost, energy_j)"
             " SELECT start / 3600 * 3600 AS h, tenant, model, class, device, SUM(requests),"
             " SUM(rows), SUM(busy_s), SUM(held_s), SUM(idle_s), SUM(cost), SUM(energy_j)"
             " FROM usage_minute WHERE start < %lld GROUP BY h, tenant, model, class, device"
             " ON CONFLICT (start, tenant, model, class, device) DO UPDATE SET"
             " requests = requests + excluded.requests, rows = rows + excluded.rows,"
             " busy_s = busy_s + excluded.busy_s, held_s = held_s + excluded.held_s,"
             " idle_s = idle_s + excluded.idle_s, cost = cost + excluded.cost,"
             " energy_j = energy_j + excluded.energy_j;"
             "DELETE FROM usage_minute WHERE start < %lld;"
             "DELETE FROM usage_hour WHERE start < %lld;"
             "COMMIT;",
             (long long)minutes_before, (long long)minutes_before, (long long)hours_before);
    int rc = usage_exec(db, sql, err);
    if (rc)
        usage_exec(db, "ROLLBACK", &(struct error){0});
    return rc;
}

int state_usage_query(struct state *st, int64_t from, int64_t to, int64_t step, int group_by,
                      const char *tenant, state_usage_fn fn, void *arg, struct error *err)
{
    if (step <= 0 || to <= from)
        return error_set(err, BG_EINVAL, "usage ledger: a period needs to > from and step > 0");
    char keys[256];
    snprintf(keys, sizeof keys, "%s, %s, %s, %s",
             group_by & STATE_USAGE_BY_TENANT ? "tenant" : "''",
             group_by & STATE_USAGE_BY_MODEL ? "model" : "''",
             group_by & STATE_USAGE_BY_CLASS ? "class" : "''",
             group_by & STATE_USAGE_BY_DEVICE ? "device" : "''");
    char sql[1400];
    snprintf(sql, sizeof sql,
             "SELECT (start - ?1) / ?3 * ?3 + ?1 AS p, %s, SUM(requests), SUM(rows),"
             " SUM(busy_s), SUM(held_s), SUM(idle_s), SUM(cost), SUM(energy_j) FROM ("
             " SELECT * FROM usage_minute WHERE start >= ?1 AND start < ?2"
             " UNION ALL SELECT * FROM usage_hour WHERE start >= ?1 AND start < ?2)"
             " WHERE ?4 IS NULL OR tenant = ?4"
             " GROUP BY p, %s ORDER BY p, %s",
             keys, keys, keys);
    pthread_mutex_t *mu;
    sqlite3 *db = state_db_reader(st, &mu);
    pthread_mutex_lock(mu);
    sqlite3_stmt *s = NULL;
    int rc = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &s, NULL) != SQLITE_OK) {
        rc = usage_fail(err, db, "query");
        goto out;
    }
    sqlite3_bind_int64(s, 1, from);
    sqlite3_bind_int64(s, 2, to);
    sqlite3_bind_int64(s, 3, step);
    if (tenant)
        sqlite3_bind_text(s, 4, tenant, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(s, 4);
    int step_rc;
    while ((step_rc = sqlite3_step(s)) == SQLITE_ROW) {
        struct state_usage_row r = {.start = sqlite3_column_int64(s, 0)};
        snprintf(r.tenant, sizeof r.tenant, "%s", (const char *)sqlite3_column_text(s, 1));
        snprintf(r.model, sizeof r.model, "%s", (const char *)sqlite3_column_text(s, 2));
        snprintf(r.cls, sizeof r.cls, "%s", (const char *)sqlite3_column_text(s, 3));
        snprintf(r.device, sizeof r.device, "%s", (const char *)sqlite3_column_text(s, 4));
        r.requests = sqlite3_column_int64(s, 5);
        r.rows = sqlite3_column_int64(s, 6);
        r.busy_s = sqlite3_column_double(s, 7);
        r.held_s = sqlite3_column_double(s, 8);
        r.idle_s = sqlite3_column_double(s, 9);
        r.cost = sqlite3_column_double(s, 10);
        r.energy_j = sqlite3_column_double(s, 11);
        fn(&r, arg);
    }
    if (step_rc != SQLITE_DONE)
        rc = usage_fail(err, db, "query");
out:
    sqlite3_finalize(s);
    pthread_mutex_unlock(mu);
    return rc;
}
