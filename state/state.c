/* state.c - see state.h. */
#include "state/state.h"
#include "state/state_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "common/log.h"

struct state {
    sqlite3 *w;                       /* the writer's connection */
    sqlite3 *r;                       /* the readers', under rmu */
    pthread_mutex_t rmu;
    sqlite3 *u;                       /* the usage ledger's writer (usage.c) */
    char path[4200];                  /* the file opened, and which it was */
    dev_t dev;
    ino_t ino;
    bool misses_wal;                  /* read-only, as a snapshot, with a -wal beside it */
};

sqlite3 *state_db_usage(struct state *st) { return st->u; }
sqlite3 *state_db_reader(struct state *st, pthread_mutex_t **mu)
{
    *mu = &st->rmu;
    return st->r;
}

static const char *const state_names[STATE_JOB_NSTATES] = {
    "queued", "running", "completed", "failed", "cancelled",
};

const char *state_job_state_name(int s)
{
    return s >= 0 && s < STATE_JOB_NSTATES ? state_names[s] : "unknown";
}

static int64_t state_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A full disk or a lock another holds past the busy timeout passes: the
 * same call may succeed later (BG_ESTORAGE, answered 503 with Retry-After);
 * anything else is a fault of the database (BG_EIO). */
static int state_code(sqlite3 *db)
{
    int c = sqlite3_errcode(db);
    return c == SQLITE_BUSY || c == SQLITE_LOCKED || c == SQLITE_FULL ? BG_ESTORAGE : BG_EIO;
}

static int state_fail(struct error *err, sqlite3 *db, const char *what)
{
    return error_set(err, state_code(db), "state database: %s: %s", what, sqlite3_errmsg(db));
}

static int state_exec(sqlite3 *db, const char *sql, struct error *err)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = error_set(err, state_code(db), "state database: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return rc;
    }
    return 0;
}

/* Version 1. A later schema adds a step here and bumps user_version. */
static const char state_schema_v1[] =
    "CREATE TABLE IF NOT EXISTS jobs ("
    " id TEXT PRIMARY KEY, model TEXT NOT NULL, tenant TEXT NOT NULL DEFAULT '',"
    " state INTEGER NOT NULL, created_ms INTEGER NOT NULL, started_ms INTEGER NOT NULL DEFAULT 0,"
    " finished_ms INTEGER NOT NULL DEFAULT 0, lines_total INTEGER NOT NULL DEFAULT -1,"
    " input_path TEXT NOT NULL, output_path TEXT NOT NULL, reason TEXT NOT NULL DEFAULT '');"
    "CREATE TABLE IF NOT EXISTS progress ("
    " job_id TEXT PRIMARY KEY REFERENCES jobs(id), in_offset INTEGER NOT NULL DEFAULT 0,"
    " out_size INTEGER NOT NULL DEFAULT 0, lines_done INTEGER NOT NULL DEFAULT 0,"
    " lines_failed INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, created_ms);";

/* Version 3: the usage ledger (usage.c): keys stored once, minute rows of
 * integers, hour rows packed per 16 keys. Version 2's tables (one REAL row
 * per key) were never written by a release and are dropped. */
static const char state_schema_v3[] =
    "DROP TABLE IF EXISTS usage_minute; DROP TABLE IF EXISTS usage_hour;"
    "CREATE TABLE usage_key ("
    " id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, model TEXT NOT NULL, class TEXT NOT NULL,"
    " device TEXT NOT NULL, UNIQUE (tenant, model, class, device));"
    "CREATE TABLE usage_minute ("
    " start INTEGER NOT NULL, key INTEGER NOT NULL, requests INTEGER NOT NULL,"
    " rows INTEGER NOT NULL, busy_us INTEGER NOT NULL, idle_us INTEGER NOT NULL,"
    " cost_micro INTEGER NOT NULL, energy_mj INTEGER NOT NULL,"
    " PRIMARY KEY (start, key)) WITHOUT ROWID;"
    "CREATE TABLE usage_hour ("
    " start INTEGER NOT NULL, part INTEGER NOT NULL, entries BLOB NOT NULL,"
    " PRIMARY KEY (start, part)) WITHOUT ROWID;";

/* Version 4: OpenAI's Batch API. A batch's line results are rows of their
 * own, each committed as its line ends (SPEC.md "LLM pools"); the output and
 * error files are written from them when the batch ends. */
static const char state_schema_v4[] =
    "CREATE TABLE IF NOT EXISTS files ("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, purpose TEXT NOT NULL, filename TEXT NOT NULL,"
    " bytes INTEGER NOT NULL, created_at INTEGER NOT NULL, path TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS batches ("
    " id TEXT PRIMARY KEY, tenant TEXT NOT NULL, endpoint TEXT NOT NULL,"
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
    "CREATE INDEX IF NOT EXISTS batches_status ON batches(status, created_at);"
    "CREATE TABLE IF NOT EXISTS batch_results ("
    " batch_id TEXT NOT NULL, line INTEGER NOT NULL, ok INTEGER NOT NULL, body TEXT NOT NULL,"
    " PRIMARY KEY (batch_id, line)) WITHOUT ROWID;";

/* Version 5: files expire (OpenAI's `expires_after`; 0: never), and a
 * batch keeps its output files' lifetime until it writes them. */
static const char state_schema_v5[] =
    "ALTER TABLE files ADD COLUMN expires_at INTEGER NOT NULL DEFAULT 0;"
    "CREATE INDEX IF NOT EXISTS files_expiry ON files(expires_at) WHERE expires_at > 0;"
    "ALTER TABLE batches ADD COLUMN output_expires_s INTEGER NOT NULL DEFAULT 0;";
/* A job's input as submitted (size, modification time): a resume finds
 * out when it was changed since (0, 0: not recorded, a job of before). */
static const char state_schema_v6[] =
    "ALTER TABLE jobs ADD COLUMN input_size INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE jobs ADD COLUMN input_mtime_ns INTEGER NOT NULL DEFAULT 0;";

/* Version 7: a job pinned to a model version (/v2/models/{m}/versions/{v}/jobs). */
static const char state_schema_v7[] =
    "ALTER TABLE jobs ADD COLUMN version INTEGER NOT NULL DEFAULT 0;";

/* Indexes that change no row and no reader: made at every open, outside
 * the versions, so that an older batchgate still opens the database.
 * jobs_created: GET /v2/jobs pages in creation order. */
static const char state_indexes[] =
    "CREATE INDEX IF NOT EXISTS jobs_created ON jobs(created_ms);";

static int state_migrate(sqlite3 *db, struct error *err)
{
    sqlite3_stmt *s;
    int v = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, db, "user_version");
    if (sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    /* A runtime failure (exit 1), as `batchgate report` says of it: it
     * was a configuration error (2), the config file named in front. */
    if (v > STATE_SCHEMA_VERSION)
        return error_set(err, BG_EIO,
                         "state database: schema version %d is newer than this batchgate's (%d); "
                         "use a newer batchgate or another state_dir", v, STATE_SCHEMA_VERSION);
    if (v == STATE_SCHEMA_VERSION)
        return 0;
    /* Each step from the version found; one transaction. */
    char sql[sizeof state_schema_v1 + sizeof state_schema_v3 + sizeof state_schema_v4 +
             sizeof state_schema_v5 + sizeof state_schema_v6 + sizeof state_schema_v7 + 64];
    snprintf(sql, sizeof sql, "BEGIN;%s%s%s%s%s%sPRAGMA user_version=%d;COMMIT;",
             v < 1 ? state_schema_v1 : "", v < 3 ? state_schema_v3 : "",
             v < 4 ? state_schema_v4 : "", v < 5 ? state_schema_v5 : "",
             v < 6 ? state_schema_v6 : "", v < 7 ? state_schema_v7 : "", STATE_SCHEMA_VERSION);
    return state_exec(db, sql, err);
}

/* The per-line results of batches that ended: their output files hold
 * them (state_batch_finish drops them as it commits the end; these are
 * what databases kept before it did, every line of every batch ever run). */
static int state_batch_results_purge(sqlite3 *db, struct error *err)
{
    char sql[300];
    snprintf(sql, sizeof sql, "DELETE FROM batch_results WHERE batch_id IN (SELECT id FROM "
             "batches WHERE status IN (%d,%d,%d,%d))", STATE_BATCH_COMPLETED, STATE_BATCH_FAILED,
             STATE_BATCH_EXPIRED, STATE_BATCH_CANCELLED);
    return state_exec(db, sql, err);
}

static int state_connect(const char *path, sqlite3 **db, struct error *err)
{
    if (sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                      SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
        int rc = error_set(err, BG_EIO, "state database %s: %s", path,
                           *db ? sqlite3_errmsg(*db) : "cannot open");
        sqlite3_close(*db);
        *db = NULL;
        return rc;
    }
    sqlite3_busy_timeout(*db, 5000);
    /* WAL: readers never wait for the writer. synchronous=FULL: a commit
     * survives power loss too, not only a killed process. A small
     * checkpoint interval keeps the WAL file small. */
    return state_exec(*db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                           "PRAGMA wal_autocheckpoint=64;", err);
}

/* The pid the holder wrote, for the message; "?" where it cannot be read
 * (the lock file deleted, or an older build's empty one). */
static void claim_holder_pid(const char *path, char *pid, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? pread(fd, pid, cap - 1, 0) : -1;
    if (n == 0) {   /* two started together: the holder writes it just after its lock */
        usleep(50 * 1000);
        n = pread(fd, pid, cap - 1, 0);
    }
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        n = snprintf(pid, cap, "?");
    pid[n] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
}

static int claim_held(const char *dir, const char *what, const char *path, struct error *err)
{
    char pid[24];
    claim_holder_pid(path, pid, sizeof pid);
    return error_set(err, BG_EIO, "%s %s is in use by another batchgate (pid %s); "
                     "give each server its own %s", what, dir, pid, what);
}

void state_claim_init(struct state_claim *c)
{
    c->dir_fd = c->file_fd = -1;
    c->dev = c->ino = 0;
}

bool state_claim_covers(const struct state_claim *c, const char *dir)
{
    struct stat sb;
    return c->file_fd >= 0 && stat(dir, &sb) == 0 && (unsigned long long)sb.st_dev == c->dev &&
           (unsigned long long)sb.st_ino == c->ino;
}

void state_dir_release(struct state_claim *c)
{
    if (c->file_fd >= 0)
        close(c->file_fd);
    if (c->dir_fd >= 0)
        close(c->dir_fd);
    state_claim_init(c);
}

int state_dir_claim(const char *dir, const char *what, struct state_claim *out,
                    struct error *err)
{
    state_claim_init(out);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return error_set(err, BG_ECONFIG, "%s %s: cannot create it: %s", what, dir,
                         strerror(errno));
    char path[4200];
    snprintf(path, sizeof path, "%s/batchgate.lock", dir);
    /* The folder itself is locked first: the lock file can be deleted under
     * a running server (a clean-up script), and a second server would then
     * lock a new file of that name and share the folder. Where the file
     * system cannot lock a folder (NFS), the file's lock stands alone. */
    out->dir_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (out->dir_fd >= 0 && flock(out->dir_fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(out->dir_fd);
        out->dir_fd = -1;
        if (e == EWOULDBLOCK)
            return claim_held(dir, what, path, err);
        log_debug("%s %s: the folder cannot be locked (%s); the lock file alone holds it",
                  what, dir, strerror(e));
    }
    /* The file too: an older build locks only the file. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        state_dir_release(out);
        return error_set(err, BG_ECONFIG, "%s %s: cannot write in it: %s (its lock file %s)",
                         what, dir, strerror(e), path);
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        close(fd);
        state_dir_release(out);
        if (e == EWOULDBLOCK)
            return claim_held(dir, what, path, err);
        return error_set(err, BG_EIO, "%s %s: cannot lock %s: %s", what, dir, path,
                         strerror(e));
    }
    out->file_fd = fd;
    struct stat sb;
    if (stat(dir, &sb) == 0) {
        out->dev = (unsigned long long)sb.st_dev;
        out->ino = (unsigned long long)sb.st_ino;
    }
    char pid[24];
    int len = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        log_warn("%s %s: cannot write the pid into %s: %s", what, dir, path, strerror(errno));
    return 0;
}

int state_open(const char *dir, struct state **out, struct error *err)
{
    *out = NULL;
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return error_set(err, BG_ECONFIG, "state_dir %s: cannot create it: %s", dir,
                         strerror(errno));
    char path[4200];
    snprintf(path, sizeof path, "%s/batchgate.db", dir);
    struct state *st = calloc(1, sizeof *st);
    if (!st)
        return error_set(err, BG_ENOMEM, "out of memory");
    pthread_mutex_init(&st->rmu, NULL);
    int rc;
    if ((rc = state_connect(path, &st->w, err)) || (rc = state_migrate(st->w, err)) ||
        (rc = state_exec(st->w, state_indexes, err)) ||
        (rc = state_batch_results_purge(st->w, err)) ||
        (rc = state_connect(path, &st->r, err)) || (rc = state_connect(path, &st->u, err))) {
        /* Said of this file ("file is not a database" alone names none). */
        static const char pre[] = "state database: ";
        if (strncmp(err->msg, pre, sizeof pre - 1) == 0) {
            char was[200];
            snprintf(was, sizeof was, "%s", err->msg + sizeof pre - 1);
            snprintf(err->msg, sizeof err->msg, "state database %.290s: %.190s", path, was);
        }
        state_close(st);
        return rc;
    }
    struct stat sb;
    snprintf(st->path, sizeof st->path, "%s", path);
    if (stat(path, &sb) == 0) {
        st->dev = sb.st_dev;
        st->ino = sb.st_ino;
    }
    *out = st;
    return 0;
}

bool state_file_gone(const struct state *st)
{
    struct stat sb;
    if (!st->ino)
        return false;   /* not known at the start: nothing to compare */
    return stat(st->path, &sb) != 0 ? errno == ENOENT || errno == ENOTDIR
                                    : sb.st_dev != st->dev || sb.st_ino != st->ino;
}

const char *state_path(const struct state *st) { return st->path; }

int state_open_readonly(const char *dir, struct state **out, struct error *err)
{
    *out = NULL;
    char path[4200], uri[8600];
    snprintf(path, sizeof path, "%s/batchgate.db", dir);
    struct state *st = calloc(1, sizeof *st);
    if (!st)
        return error_set(err, BG_ENOMEM, "out of memory");
    pthread_mutex_init(&st->rmu, NULL);
    /* mode=ro first: it sees a running server's commits. Where SQLite
     * cannot read a WAL database so (it would make the -shm file: a
     * read-only folder), immutable=1, as a snapshot that nothing changes. */
    static const char *const modes[] = {"mode=ro", "immutable=1"};
    int rc = -BG_EIO;
    for (int i = 0; i < 2 && rc; i++) {
        sqlite3_close(st->r);
        st->r = NULL;
        size_t n = 0;
        n += (size_t)snprintf(uri + n, sizeof uri - n, "file:");
        for (const char *p = path; *p && n + 4 < sizeof uri; p++)   /* percent-encode ? # % */
            n += (size_t)(*p == '?' || *p == '#' || *p == '%'
                              ? snprintf(uri + n, sizeof uri - n, "%%%02X", (unsigned char)*p)
                              : snprintf(uri + n, sizeof uri - n, "%c", *p));
        snprintf(uri + n, sizeof uri - n, "?%s", modes[i]);
        int v = -1;
        sqlite3_stmt *s = NULL;
        if (sqlite3_open_v2(uri, &st->r, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI |
                                             SQLITE_OPEN_FULLMUTEX, NULL) == SQLITE_OK &&
            sqlite3_prepare_v2(st->r, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK &&
            sqlite3_step(s) == SQLITE_ROW)
            v = sqlite3_column_int(s, 0);
        sqlite3_finalize(s);
        if (v < 0)
            rc = error_set(err, BG_EIO, "state database %s: %s", path,
                           st->r ? sqlite3_errmsg(st->r) : "cannot open");
        else if (v < STATE_USAGE_SCHEMA_VERSION || v > STATE_SCHEMA_VERSION)
            rc = error_set(err, BG_EIO, "state database %s: schema version %d, this batchgate "
                           "reads %d to %d (a server of this version migrates it at its start)",
                           path, v, STATE_USAGE_SCHEMA_VERSION, STATE_SCHEMA_VERSION);
        else
            rc = 0;
        if (rc && v >= 0)
            break;   /* read, and not ours: immutable would say the same */
    }
    if (rc) {
        state_close(st);
        return rc;
    }
    /* Opened as a snapshot, SQLite reads the main file alone: commits
     * still in the write-ahead log beside it are not seen (a copy taken
     * with its -wal, in a read-only folder: 20 requests reported of 50). */
    char wal[4300];
    struct stat sb;
    snprintf(wal, sizeof wal, "%s-wal", path);
    st->misses_wal = strstr(uri, "immutable=1") && stat(wal, &sb) == 0 && sb.st_size > 0;
    sqlite3_busy_timeout(st->r, 5000);
    *out = st;
    return 0;
}

bool state_misses_wal(const struct state *st) { return st->misses_wal; }

void state_memory(struct state *st, struct state_memory *out)
{
    out->sqlite_bytes = sqlite3_memory_used();
    out->sqlite_peak_bytes = sqlite3_memory_highwater(0);
    out->cache_bytes = 0;
    sqlite3 *dbs[] = {st->w, st->r, st->u};
    for (size_t i = 0; i < sizeof dbs / sizeof dbs[0]; i++) {
        int cur = 0, hi = 0;
        if (sqlite3_db_status(dbs[i], SQLITE_DBSTATUS_CACHE_USED, &cur, &hi, 0) == SQLITE_OK)
            out->cache_bytes += cur;
    }
}

void state_close(struct state *st)
{
    if (!st)
        return;
    sqlite3_close(st->u);
    sqlite3_close(st->r);
    sqlite3_close(st->w);
    pthread_mutex_destroy(&st->rmu);
    free(st);
}

/* ---- writes ---- */

int state_job_insert(struct state *st, const struct state_job *j, struct error *err)
{
    sqlite3_stmt *s = NULL, *p = NULL;
    int rc = 0;
    int begun = state_exec(st->w, "BEGIN", err);
    if (begun)
        return begun;
    if (sqlite3_prepare_v2(st->w,
                           "INSERT INTO jobs(id,model,tenant,state,created_ms,input_path,"
                           "output_path,input_size,input_mtime_ns,version)"
                           " VALUES(?,?,?,?,?,?,?,?,?,?)",
                           -1, &s, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(st->w, "INSERT INTO progress(job_id) VALUES(?)", -1, &p, NULL) !=
            SQLITE_OK) {
        rc = state_fail(err, st->w, "insert job");
        goto out;
    }
    sqlite3_bind_text(s, 1, j->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, j->model, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, j->tenant, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 4, j->state);
    sqlite3_bind_int64(s, 5, j->created_ms);
    sqlite3_bind_text(s, 6, j->input_path, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 7, j->output_path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 8, j->input_size);
    sqlite3_bind_int64(s, 9, j->input_mtime_ns);
    sqlite3_bind_int(s, 10, j->version);
    sqlite3_bind_text(p, 1, j->id, -1, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE || sqlite3_step(p) != SQLITE_DONE) {
        rc = state_fail(err, st->w, "insert job");
        goto out;
    }
out:
    sqlite3_finalize(s);
    sqlite3_finalize(p);
    if (rc == 0)
        rc = state_exec(st->w, "COMMIT", err);
    if (rc)
        state_exec(st->w, "ROLLBACK", NULL);
    return rc;
}

int state_job_set_state(struct state *st, const char *id, int state, int64_t lines_total,
                        const char *reason, struct error *err)
{
    int64_t now = state_now_ms();
    bool final = state >= STATE_JOB_COMPLETED;
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->w,
                           "UPDATE jobs SET state=?1,"
                           " started_ms=CASE WHEN ?2 AND started_ms=0 THEN ?3 ELSE started_ms END,"
                           " finished_ms=CASE WHEN ?4 THEN ?3 ELSE finished_ms END,"
                           " lines_total=CASE WHEN ?5>=0 THEN ?5 ELSE lines_total END,"
                           " reason=CASE WHEN ?6 IS NOT NULL THEN ?6 ELSE reason END WHERE id=?7",
                           -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, st->w, "update job");
    sqlite3_bind_int(s, 1, state);
    sqlite3_bind_int(s, 2, state == STATE_JOB_RUNNING);
    sqlite3_bind_int64(s, 3, now);
    sqlite3_bind_int(s, 4, final);
    sqlite3_bind_int64(s, 5, lines_total);
    if (reason)
        sqlite3_bind_text(s, 6, reason, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 7, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s) == SQLITE_DONE ? 0 : state_fail(err, st->w, "update job");
    sqlite3_finalize(s);
    return rc;
}

int state_job_progress(struct state *st, const char *id, int64_t in_offset, int64_t out_size,
                       int64_t lines_done, int64_t lines_failed, struct error *err)
{
    sqlite3_stmt *s;
    /* One statement is one transaction in autocommit mode. */
    if (sqlite3_prepare_v2(st->w,
                           "UPDATE progress SET in_offset=?, out_size=?, lines_done=?,"
                           " lines_failed=? WHERE job_id=?", -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, st->w, "progress");
    sqlite3_bind_int64(s, 1, in_offset);
    sqlite3_bind_int64(s, 2, out_size);
    sqlite3_bind_int64(s, 3, lines_done);
    sqlite3_bind_int64(s, 4, lines_failed);
    sqlite3_bind_text(s, 5, id, -1, SQLITE_STATIC);
    int rc = sqlite3_step(s) == SQLITE_DONE ? 0 : state_fail(err, st->w, "progress");
    sqlite3_finalize(s);
    return rc;
}

/* ---- reads ---- */

#define STATE_JOB_COLUMNS                                                                     \
    "SELECT j.id, j.model, j.tenant, j.state, j.created_ms, j.started_ms, j.finished_ms,"     \
    " j.lines_total, j.input_path, j.output_path, j.reason, p.in_offset, p.out_size,"         \
    " p.lines_done, p.lines_failed, j.input_size, j.input_mtime_ns, j.version"              \
    " FROM jobs j JOIN progress p ON p.job_id = j.id "

static void state_copy(char *dst, size_t cap, sqlite3_stmt *s, int col)
{
    const unsigned char *t = sqlite3_column_text(s, col);
    snprintf(dst, cap, "%s", t ? (const char *)t : "");
}

static void state_row(sqlite3_stmt *s, struct state_job *j)
{
    memset(j, 0, sizeof *j);
    state_copy(j->id, sizeof j->id, s, 0);
    state_copy(j->model, sizeof j->model, s, 1);
    state_copy(j->tenant, sizeof j->tenant, s, 2);
    j->state = sqlite3_column_int(s, 3);
    j->created_ms = sqlite3_column_int64(s, 4);
    j->started_ms = sqlite3_column_int64(s, 5);
    j->finished_ms = sqlite3_column_int64(s, 6);
    j->lines_total = sqlite3_column_int64(s, 7);
    state_copy(j->input_path, sizeof j->input_path, s, 8);
    state_copy(j->output_path, sizeof j->output_path, s, 9);
    state_copy(j->reason, sizeof j->reason, s, 10);
    j->in_offset = sqlite3_column_int64(s, 11);
    j->out_size = sqlite3_column_int64(s, 12);
    j->lines_done = sqlite3_column_int64(s, 13);
    j->lines_failed = sqlite3_column_int64(s, 14);
    j->input_size = sqlite3_column_int64(s, 15);
    j->input_mtime_ns = sqlite3_column_int64(s, 16);
    j->version = sqlite3_column_int(s, 17);
}

int state_job_next(struct state *st, const char *const *skip, int nskip, struct state_job *out,
                   struct error *err)
{
    /* "NOT IN (?,?,...)": the callers skip a few (jobs.c: at most 32). */
    char sql[1024], marks[256] = "";
    if (nskip < 0 || nskip > 64)
        return error_set(err, BG_EINVAL, "next job: %d jobs to skip, at most 64", nskip);
    for (int i = 0; i < nskip; i++)
        strcat(marks, i ? ",?" : "?");
    snprintf(sql, sizeof sql, "%sWHERE j.state IN (0,1)%s%s%s ORDER BY j.created_ms, j.rowid "
             "LIMIT 1", STATE_JOB_COLUMNS, nskip ? " AND j.id NOT IN (" : "", marks,
             nskip ? ")" : "");
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->w, sql, -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, st->w, "next job");
    for (int i = 0; i < nskip; i++)
        sqlite3_bind_text(s, i + 1, skip[i], -1, SQLITE_STATIC);
    int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        state_row(s, out);
        rc = 1;
    } else {
        rc = rc == SQLITE_DONE ? 0 : state_fail(err, st->w, "next job");
    }
    sqlite3_finalize(s);
    return rc;
}

int state_job_get(struct state *st, const char *id, struct state_job *out, struct error *err)
{
    pthread_mutex_lock(&st->rmu);
    sqlite3_stmt *s;
    int rc;
    if (sqlite3_prepare_v2(st->r, STATE_JOB_COLUMNS "WHERE j.id=?", -1, &s, NULL) != SQLITE_OK) {
        rc = state_fail(err, st->r, "get job");
        goto out;
    }
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        state_row(s, out);
        rc = 0;
    } else if (rc == SQLITE_DONE) {
        rc = error_set(err, BG_ENOTFOUND, "no job \"%s\"", id);
    } else {
        rc = state_fail(err, st->r, "get job");
    }
    sqlite3_finalize(s);
out:
    pthread_mutex_unlock(&st->rmu);
    return rc;
}

static int state_step_done(sqlite3 *db, sqlite3_stmt *s, const char *what, struct error *err);

int state_job_ended_before(struct state *st, int64_t before_ms, int max, state_job_fn fn,
                           void *arg, struct error *err)
{
    char sql[600];
    snprintf(sql, sizeof sql, STATE_JOB_COLUMNS "WHERE j.state IN (%d,%d,%d) AND j.finished_ms > 0"
             " AND j.finished_ms < ? ORDER BY j.finished_ms LIMIT ?", STATE_JOB_COMPLETED,
             STATE_JOB_FAILED, STATE_JOB_CANCELLED);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->w, sql, -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, st->w, "jobs ended");
    sqlite3_bind_int64(s, 1, before_ms);
    sqlite3_bind_int(s, 2, max);
    struct state_job j;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        state_row(s, &j);
        fn(&j, arg);
    }
    int rc = step == SQLITE_DONE ? 0 : state_fail(err, st->w, "jobs ended");
    sqlite3_finalize(s);
    return rc;
}

int state_job_delete(struct state *st, const char *id, struct error *err)
{
    int begun = state_exec(st->w, "BEGIN", err);
    if (begun)
        return begun;
    int rc = 0;
    static const char *const sql[] = {"DELETE FROM progress WHERE job_id=?",
                                      "DELETE FROM jobs WHERE id=?"};
    for (int i = 0; i < 2 && rc == 0; i++) {
        sqlite3_stmt *s = NULL;
        if (sqlite3_prepare_v2(st->w, sql[i], -1, &s, NULL) != SQLITE_OK) {
            rc = state_fail(err, st->w, "delete job");
            break;
        }
        sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
        rc = state_step_done(st->w, s, "delete job", err);
    }
    if (rc == 0)
        rc = state_exec(st->w, "COMMIT", err);
    if (rc)
        state_exec(st->w, "ROLLBACK", NULL);
    return rc;
}

int state_job_list(struct state *st, const struct state_job_filter *f, state_job_fn fn,
                   void *arg, struct error *err)
{
    static const struct state_job_filter all = {.state = -1};
    if (!f)
        f = &all;
    pthread_mutex_lock(&st->rmu);
    sqlite3_stmt *s;
    int rc = 0;
    /* The place of `after` is its (created_ms, rowid), the list's order:
     * a page ends on a job and the next starts right behind it, whatever
     * was submitted meanwhile. */
    if (sqlite3_prepare_v2(st->r, STATE_JOB_COLUMNS
                           "WHERE (?1 IS NULL OR (CASE j.tenant WHEN '' THEN 'default'"
                           " ELSE j.tenant END) = ?1) AND (?2 IS NULL OR j.model = ?2)"
                           " AND (?3 < 0 OR j.state = ?3) AND (?4 IS NULL OR"
                           " (j.created_ms, j.rowid) > (SELECT created_ms, rowid FROM jobs"
                           " WHERE id = ?4)) ORDER BY j.created_ms, j.rowid LIMIT ?5",
                           -1, &s, NULL) != SQLITE_OK) {
        rc = state_fail(err, st->r, "list jobs");
        goto out;
    }
    sqlite3_bind_text(s, 1, f->tenant, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, f->model, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 3, f->state);
    sqlite3_bind_text(s, 4, f->after, -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 5, f->limit > 0 ? f->limit : -1);
    struct state_job j;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        state_row(s, &j);
        fn(&j, arg);
    }
    if (step != SQLITE_DONE)
        rc = state_fail(err, st->r, "list jobs");
    sqlite3_finalize(s);
out:
    pthread_mutex_unlock(&st->rmu);
    return rc;
}

/* Rows per value of a small integer column: counts[0..n). */
static int state_counts(struct state *st, const char *sql, int64_t *counts, int n,
                        struct error *err)
{
    memset(counts, 0, (size_t)n * sizeof *counts);
    pthread_mutex_lock(&st->rmu);
    sqlite3_stmt *s;
    int rc = 0;
    if (sqlite3_prepare_v2(st->r, sql, -1, &s, NULL) != SQLITE_OK) {
        rc = state_fail(err, st->r, "count rows");
        goto out;
    }
    while (sqlite3_step(s) == SQLITE_ROW) {
        int k = sqlite3_column_int(s, 0);
        if (k >= 0 && k < n)
            counts[k] = sqlite3_column_int64(s, 1);
    }
    sqlite3_finalize(s);
out:
    pthread_mutex_unlock(&st->rmu);
    return rc;
}

int state_job_counts(struct state *st, int64_t *counts, struct error *err)
{
    return state_counts(st, "SELECT state, count(*) FROM jobs GROUP BY state", counts,
                        STATE_JOB_NSTATES, err);
}

int state_batch_counts(struct state *st, int64_t *counts, struct error *err)
{
    return state_counts(st, "SELECT status, count(*) FROM batches GROUP BY status", counts,
                        STATE_BATCH_NSTATUS, err);
}

/* ---- OpenAI's Batch API: files and batches ---- */

static const char *const state_batch_names[STATE_BATCH_NSTATUS] = {
    "validating", "in_progress", "finalizing", "completed",
    "failed",     "expired",     "cancelling", "cancelled",
};
static const char *const state_batch_ats[9] = {
    "created_at", "in_progress_at", "finalizing_at", "completed_at", "failed_at",
    "expired_at", "cancelling_at",  "cancelled_at",  "expires_at",
};

const char *state_batch_status_name(int s)
{
    return s >= 0 && s < STATE_BATCH_NSTATUS ? state_batch_names[s] : "unknown";
}

const char *state_batch_at_name(int i) { return i >= 0 && i < 9 ? state_batch_ats[i] : "?"; }

static int state_step_done(sqlite3 *db, sqlite3_stmt *s, const char *what, struct error *err)
{
    int rc = sqlite3_step(s) == SQLITE_DONE ? 0 : state_fail(err, db, what);
    sqlite3_finalize(s);
    return rc;
}

static int state_file_bind_insert(sqlite3 *db, const struct state_file *f, struct error *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(db, "INSERT INTO files(id,tenant,purpose,filename,bytes,created_at,path,"
                               "expires_at) VALUES(?,?,?,?,?,?,?,?)", -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, db, "insert file");
    sqlite3_bind_text(s, 1, f->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, f->tenant, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, f->purpose, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, f->filename, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 5, f->bytes);
    sqlite3_bind_int64(s, 6, f->created_at);
    sqlite3_bind_text(s, 7, f->path, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 8, f->expires_at);
    return state_step_done(db, s, "insert file", err);
}

int state_file_insert(struct state *st, const struct state_file *f, struct error *err)
{
    return state_file_bind_insert(st->w, f, err);
}

int state_file_delete(struct state *st, const char *id, struct error *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->w, "DELETE FROM files WHERE id=?", -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, st->w, "delete file");
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    return state_step_done(st->w, s, "delete file", err);
}

#define STATE_FILE_COLUMNS \
    "SELECT id,tenant,purpose,filename,bytes,created_at,path,expires_at FROM files "

static void state_file_row(sqlite3_stmt *s, struct state_file *f)
{
    memset(f, 0, sizeof *f);
    state_copy(f->id, sizeof f->id, s, 0);
    state_copy(f->tenant, sizeof f->tenant, s, 1);
    state_copy(f->purpose, sizeof f->purpose, s, 2);
    state_copy(f->filename, sizeof f->filename, s, 3);
    f->bytes = sqlite3_column_int64(s, 4);
    f->created_at = sqlite3_column_int64(s, 5);
    state_copy(f->path, sizeof f->path, s, 6);
    f->expires_at = sqlite3_column_int64(s, 7);
}

int state_file_get(struct state *st, const char *id, struct state_file *out, struct error *err)
{
    pthread_mutex_lock(&st->rmu);
    sqlite3_stmt *s;
    int rc;
    if (sqlite3_prepare_v2(st->r, STATE_FILE_COLUMNS "WHERE id=?", -1, &s, NULL) != SQLITE_OK) {
        rc = state_fail(err, st->r, "get file");
        goto out;
    }
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        state_file_row(s, out);
        rc = 0;
    } else if (rc == SQLITE_DONE) {
        rc = error_set(err, BG_ENOTFOUND, "No such File object: %s", id);
    } else {
        rc = state_fail(err, st->r, "get file");
    }
    sqlite3_finalize(s);
out:
    pthread_mutex_unlock(&st->rmu);
    return rc;
}

/* Each row of a files query to fn; its parameters are a, then b (each when >= 0). */
static int state_file_rows(struct state *st, const char *sql, int64_t a, int64_t b,
                           state_file_fn fn, void *arg, struct error *err)
{
    pthread_mutex_lock(&st->rmu);
    sqlite3_stmt *s;
    int rc = 0;
    if (sqlite3_prepare_v2(st->r, sql, -1, &s, NULL) != SQLITE_OK) {
        rc = state_fail(err, st->r, "list files");
        goto out;
    }
    if (a >= 0)
        sqlite3_bind_int64(s, 1, a);
    if (b >= 0)
        sqlite3_bind_int64(s, 2, b);
    struct state_file f;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        state_file_row(s, &f);
        fn(&f, arg);
    }
    if (step != SQLITE_DONE)
        rc = state_fail(err, st->r, "list files");
    sqlite3_finalize(s);
out:
    pthread_mutex_unlock(&st->rmu);
    return rc;
}

int state_file_list(struct state *st, bool oldest_first, state_file_fn fn, void *arg,
                    struct error *err)
{
    return state_file_rows(st, oldest_first ? STATE_FILE_COLUMNS "ORDER BY created_at, rowid"
                                            : STATE_FILE_COLUMNS
                                              "ORDER BY created_at DESC, rowid DESC",
                           -1, -1, fn, arg, err);
}

int state_file_expired(struct state *st, int64_t now, int max, state_file_fn fn, void *arg,
                       struct error *err)
{
    return state_file_rows(st, STATE_FILE_COLUMNS "WHERE expires_at > 0 AND expires_at <= ? "
                               "ORDER BY expires_at LIMIT ?", now, max, fn, arg, err);
}

#define STATE_BATCH_COLUMNS                                                                   \
    "SELECT id,tenant,endpoint,input_file_id,input_path,completion_window,metadata,status,"   \
    "created_at,in_progress_at,finalizing_at,completed_at,failed_at,expired_at,cancelling_at," \
    "cancelled_at,expires_at,total,completed,failed,output_file_id,error_file_id,errors,"    \
    "output_expires_s "                                                                       \
    "FROM batches "

static void state_batch_row(sqlite3_stmt *s, struct state_batch *b)
{
    memset(b, 0, sizeof *b);
    state_copy(b->id, sizeof b->id, s, 0);
    state_copy(b->tenant, sizeof b->tenant, s, 1);
    state_copy(b->endpoint, sizeof b->endpoint, s, 2);
    state_copy(b->input_file_id, sizeof b->input_file_id, s, 3);
    state_copy(b->input_path, sizeof b->input_path, s, 4);
    state_copy(b->completion_window, sizeof b->completion_window, s, 5);
    state_copy(b->metadata, sizeof b->metadata, s, 6);
    b->status = sqlite3_column_int(s, 7);
    for (int i = 0; i < 9; i++)
        b->at[i] = sqlite3_column_int64(s, 8 + i);
    b->total = sqlite3_column_int64(s, 17);
    b->completed = sqlite3_column_int64(s, 18);
    b->failed = sqlite3_column_int64(s, 19);
    state_copy(b->output_file_id, sizeof b->output_file_id, s, 20);
    state_copy(b->error_file_id, sizeof b->error_file_id, s, 21);
    state_copy(b->errors, sizeof b->errors, s, 22);
    b->output_expires_s = sqlite3_column_int64(s, 23);
}

int state_batch_insert(struct state *st, const struct state_batch *b, struct error *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->w,
                           "INSERT INTO batches(id,tenant,endpoint,input_file_id,input_path,"
                           "completion_window,metadata,status,created_at,in_progress_at,"
                           "expires_at,total,output_expires_s) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, st->w, "insert batch");
    sqlite3_bind_text(s, 1, b->id, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, b->tenant, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 3, b->endpoint, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 4, b->input_file_id, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 5, b->input_path, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 6, b->completion_window, -1, SQLITE_STATIC);
    sqlite3_bind_text(s, 7, b->metadata[0] ? b->metadata : "null", -1, SQLITE_STATIC);
    sqlite3_bind_int(s, 8, b->status);
    sqlite3_bind_int64(s, 9, b->at[STATE_BATCH_AT_CREATED]);
    sqlite3_bind_int64(s, 10, b->at[STATE_BATCH_IN_PROGRESS]);
    sqlite3_bind_int64(s, 11, b->at[STATE_BATCH_AT_EXPIRES]);
    sqlite3_bind_int64(s, 12, b->total);
    sqlite3_bind_int64(s, 13, b->output_expires_s);
    return state_step_done(st->w, s, "insert batch", err);
}

int state_batch_set_status(struct state *st, const char *id, int status, int64_t now,
                           struct error *err)
{
    if (status <= STATE_BATCH_VALIDATING || status >= STATE_BATCH_NSTATUS)
        return error_set(err, BG_EINTERNAL, "batch status %d", status);
    char sql[200];
    snprintf(sql, sizeof sql, "UPDATE batches SET status=?, %s=? WHERE id=?",
             state_batch_ats[status]);
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->w, sql, -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, st->w, "update batch");
    sqlite3_bind_int(s, 1, status);
    sqlite3_bind_int64(s, 2, now);
    sqlite3_bind_text(s, 3, id, -1, SQLITE_STATIC);
    return state_step_done(st->w, s, "update batch", err);
}

int state_batch_result_add(struct state *st, const char *id, int64_t line, bool ok,
                           const char *body, size_t len, struct error *err)
{
    sqlite3_stmt *s = NULL, *u = NULL;
    int rc = 0;
    int begun = state_exec(st->w, "BEGIN", err);
    if (begun)
        return begun;
    if (sqlite3_prepare_v2(st->w, "INSERT OR IGNORE INTO batch_results(batch_id,line,ok,body)"
                                  " VALUES(?,?,?,?)", -1, &s, NULL) != SQLITE_OK) {
        rc = state_fail(err, st->w, "batch result");
        goto out;
    }
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, line);
    sqlite3_bind_int(s, 3, ok);
    sqlite3_bind_text(s, 4, body, (int)len, SQLITE_STATIC);
    if (sqlite3_step(s) != SQLITE_DONE) {
        rc = state_fail(err, st->w, "batch result");
        goto out;
    }
    if (sqlite3_changes(st->w) == 0) {
        rc = 1;
        goto out;
    }
    if (sqlite3_prepare_v2(st->w, ok ? "UPDATE batches SET completed=completed+1 WHERE id=?"
                                     : "UPDATE batches SET failed=failed+1 WHERE id=?",
                           -1, &u, NULL) != SQLITE_OK) {
        rc = state_fail(err, st->w, "batch result");
        goto out;
    }
    sqlite3_bind_text(u, 1, id, -1, SQLITE_STATIC);
    if (sqlite3_step(u) != SQLITE_DONE)
        rc = state_fail(err, st->w, "batch result");
out:
    sqlite3_finalize(s);
    sqlite3_finalize(u);
    int committed = rc >= 0 ? state_exec(st->w, "COMMIT", err) : 0;
    if (committed)
        rc = committed;
    if (rc < 0)
        state_exec(st->w, "ROLLBACK", NULL);
    return rc;
}

int state_batch_results(struct state *st, const char *id, state_result_fn fn, void *arg,
                        struct error *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->w, "SELECT line, ok, body FROM batch_results WHERE batch_id=?"
                                  " ORDER BY line", -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, st->w, "batch results");
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW)
        fn(sqlite3_column_int64(s, 0), sqlite3_column_int(s, 1) != 0,
           (const char *)sqlite3_column_text(s, 2), (size_t)sqlite3_column_bytes(s, 2), arg);
    int rc = step == SQLITE_DONE ? 0 : state_fail(err, st->w, "batch results");
    sqlite3_finalize(s);
    return rc;
}

int state_batch_finish(struct state *st, const char *id, int status, const struct state_file *out,
                       const struct state_file *errf, const char *errors, int64_t unrun,
                       int64_t now, struct error *err)
{
    int begun = state_exec(st->w, "BEGIN", err);
    if (begun)
        return begun;
    int rc = 0;
    if (out)
        rc = state_file_bind_insert(st->w, out, err);
    if (rc == 0 && errf)
        rc = state_file_bind_insert(st->w, errf, err);
    char sql[300];
    snprintf(sql, sizeof sql,
             "UPDATE batches SET status=?, %s=?, output_file_id=?, error_file_id=?,"
             " errors=CASE WHEN ? IS NOT NULL THEN ? ELSE errors END, failed=failed+?"
             " WHERE id=?",
             state_batch_ats[status > 0 && status < STATE_BATCH_NSTATUS ? status : 0]);
    sqlite3_stmt *s = NULL;
    if (rc == 0 && sqlite3_prepare_v2(st->w, sql, -1, &s, NULL) != SQLITE_OK)
        rc = state_fail(err, st->w, "finish batch");
    if (rc == 0) {
        sqlite3_bind_int(s, 1, status);
        sqlite3_bind_int64(s, 2, now);
        sqlite3_bind_text(s, 3, out ? out->id : "", -1, SQLITE_STATIC);
        sqlite3_bind_text(s, 4, errf ? errf->id : "", -1, SQLITE_STATIC);
        if (errors) {
            sqlite3_bind_text(s, 5, errors, -1, SQLITE_STATIC);
            sqlite3_bind_text(s, 6, errors, -1, SQLITE_STATIC);
        }
        sqlite3_bind_int64(s, 7, unrun > 0 ? unrun : 0);
        sqlite3_bind_text(s, 8, id, -1, SQLITE_STATIC);
        rc = state_step_done(st->w, s, "finish batch", err);
    }
    /* Its lines' results are in its files now (or it failed without them):
     * kept, every line of every batch stayed in the database for ever. */
    sqlite3_stmt *d = NULL;
    if (rc == 0 && sqlite3_prepare_v2(st->w, "DELETE FROM batch_results WHERE batch_id=?", -1, &d,
                                      NULL) != SQLITE_OK)
        rc = state_fail(err, st->w, "finish batch");
    if (rc == 0) {
        sqlite3_bind_text(d, 1, id, -1, SQLITE_STATIC);
        rc = state_step_done(st->w, d, "finish batch", err);
    }
    if (rc == 0)
        rc = state_exec(st->w, "COMMIT", err);
    if (rc)
        state_exec(st->w, "ROLLBACK", NULL);
    return rc;
}

int state_batch_unfinished(struct state *st, state_batch_fn fn, void *arg, struct error *err)
{
    sqlite3_stmt *s;
    if (sqlite3_prepare_v2(st->w, STATE_BATCH_COLUMNS "WHERE status IN (0,1,2,6)"
                                  " ORDER BY created_at, rowid", -1, &s, NULL) != SQLITE_OK)
        return state_fail(err, st->w, "unfinished batches");
    struct state_batch b;
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        state_batch_row(s, &b);
        fn(&b, arg);
    }
    rc = rc == SQLITE_DONE ? 0 : state_fail(err, st->w, "unfinished batches");
    sqlite3_finalize(s);
    return rc;
}

int state_batch_get(struct state *st, const char *id, struct state_batch *out, struct error *err)
{
    pthread_mutex_lock(&st->rmu);
    sqlite3_stmt *s;
    int rc;
    if (sqlite3_prepare_v2(st->r, STATE_BATCH_COLUMNS "WHERE id=?", -1, &s, NULL) != SQLITE_OK) {
        rc = state_fail(err, st->r, "get batch");
        goto out;
    }
    sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        state_batch_row(s, out);
        rc = 0;
    } else if (rc == SQLITE_DONE) {
        rc = error_set(err, BG_ENOTFOUND, "No such Batch object: %s", id);
    } else {
        rc = state_fail(err, st->r, "get batch");
    }
    sqlite3_finalize(s);
out:
    pthread_mutex_unlock(&st->rmu);
    return rc;
}

int state_batch_list(struct state *st, state_batch_fn fn, void *arg, struct error *err)
{
    pthread_mutex_lock(&st->rmu);
    sqlite3_stmt *s;
    int rc = 0;
    if (sqlite3_prepare_v2(st->r, STATE_BATCH_COLUMNS "ORDER BY created_at DESC, rowid DESC", -1,
                           &s, NULL) != SQLITE_OK) {
        rc = state_fail(err, st->r, "list batches");
        goto out;
    }
    struct state_batch b;
    int step;
    while ((step = sqlite3_step(s)) == SQLITE_ROW) {
        state_batch_row(s, &b);
        fn(&b, arg);
    }
    if (step != SQLITE_DONE)
        rc = state_fail(err, st->r, "list batches");
    sqlite3_finalize(s);
out:
    pthread_mutex_unlock(&st->rmu);
    return rc;
}
