/* jobs_impl.h - the jobs runner's state, shared by jobs.c (KServe v2 jobs)
 * and jobs_batch.c (OpenAI's Batch API), which run on the same thread: the
 * one that writes the state database. */
#ifndef BG_JOBS_IMPL_H
#define BG_JOBS_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "batcher/batcher.h"
#include "common/buf.h"
#include "serving/jobs.h"
#include "serving/llmbatch.h"
#include "serving/serving.h"
#include "serving/tensor_json.h"
#include "state/state.h"

/* Lines in flight per job: enough to fill a few batches, few enough that a
 * job never holds much memory or queue. */
#define JOBS_WINDOW 64
/* A group of result lines is made durable after this many lines or this
 * long, whichever first: one fdatasync + one commit per group. */
#define JOBS_GROUP_LINES 256
#define JOBS_GROUP_NS (50 * 1000000LL)
/* A job whose model failed to load waits, tried again when a model loads
 * (serving_on_loaded) and at least this often, while the jobs behind it
 * run; past this many waiting at once, one more fails. */
#define JOBS_WAIT_NS (10 * 1000000000LL)
/* A running job none of whose lines came back for this long (its model's
 * device busy with online requests, which go first) gives way to the next
 * job on another model (jobs_yield). */
#define JOBS_STARVED_NS (10 * 1000000000LL)
#define JOBS_WAITS_MAX 32

struct jobs_slot {
    struct infer_item item;           /* first member not required: see jobs_slot_of */
    struct jobs *j;
    int64_t line;                     /* 1-based number among the input's non-blank lines */
    int64_t end_offset;               /* input offset just past this line */
    struct infer_request r;
    float *output;
    bool submitted;                   /* handed to the batcher, not back yet */
    bool done;                        /* under mu: complete() ran, or never submitted */
    struct buf result;                /* the result line, once done (runner thread) */
    bool failed;                      /* an error line */
};

struct jobs_cur {                     /* the job being run (runner thread only) */
    bool active;
    struct state_job job;
    struct served_model *sm;
    int model_index;
    int tenant;                       /* the job's tenant in the tenants table: its lines' */
    FILE *in;
    int out_fd;
    int64_t offset;                   /* input read up to here */
    int64_t next_line;
    bool eof;
    int head, count;                  /* the window: ring of JOBS_WINDOW slots */
    struct buf pending;               /* result lines written, not yet durable */
    int64_t pending_lines, pending_failed, pending_end_offset;
    int64_t last_commit_ns;
    int64_t last_done_ns;             /* a line came back, or the job was taken up */
    bool db_refused;                  /* the last commit failed in the state database, not
                                       * the results file: the job pauses (jobs_suspend) */
    int overloaded_s;                 /* a line came back 503 (the model's servers are
                                       * overloaded): the job waits this long (jobs_hold) */
    char *line;
    size_t line_cap;
};

/* The batch being run (jobs thread only; jobs_batch.c). */
/* The models (pools, by the name the lines give) one batch's lines may name. */
#define JOBS_BATCH_MAX_POOLS 8

struct jobs_bpool {                   /* a pool its lines named, held while it runs */
    char name[128];
    struct served_model *sm;          /* NULL: not a pool (its lines fail) */
};
/* Batches run side by side, each its share of the lines in the caller: a
 * tenant's long batch does not hold another's back for its whole window. */
#define JOBS_BATCHES_ACTIVE 4
struct jobs_bcur {
    bool active;
    uint64_t group;                   /* its lines' llmbatch group (unique per run) */
    struct state_batch b;
    int tenant;
    double weight;                    /* in the turns: jobs_batch_weight */
    double weight_told;               /* what its lines in the caller were given */
    int64_t tok_lines, tok_max;       /* lines ended with a usage this run, the largest's tokens */
    FILE *in;
    int64_t next_line;                /* the number of the next non-blank line */
    bool eof;
    uint8_t *done;                    /* [total + 1]: line n's result is committed */
    int inflight;                     /* lines handed to the caller, not back */
    bool stalled;                     /* a result could not be committed: no more lines */
    bool stalled_oom;                 /* stalled by no memory for a line, not the database */
    char *line;
    size_t line_cap;
    struct jobs_bpool pools[JOBS_BATCH_MAX_POOLS];
    int npools;
};

struct jobs {
    char state_dir[4096];
    char dir[4096];
    char bdir[4200];                  /* <dir>/batch: the Batch API's files, its own */
    size_t max_input_bytes;
    int priority;                     /* enum jobs_priority: the runner thread's */
    const struct tenants_config *tenants;
    struct serving *serving;
    struct state *st;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct jobs_cmd *cmds, **cmds_tail;
    uint64_t events;                  /* bumped under mu by completions and commands */
    bool stop;
    pthread_t thread;
    bool running;
    struct jobs_cur cur;
    struct jobs_slot slots[JOBS_WINDOW];
    _Atomic uint64_t (*lines)[2];     /* per served model: ok, failed */
    int nmodels;
    /* The Batch API (jobs_batch.c): */
    size_t max_file_bytes;
    int64_t file_expiry_s;            /* 0: files never expire by default */
    int64_t files_checked_at;         /* Unix s of the last look for expired files */
    int64_t retention_s;              /* ended jobs are forgotten after it; 0: never */
    int64_t jobs_checked_ms;          /* Unix ms of the last look for them */
    int64_t db_checked_ms, db_gone_said_ms;   /* jobs_check_db's looks and lines */
    struct llmbatch *caller;          /* the lines' calls; NULL until jobs_start */
    struct llmbatch_line *returned;   /* under mu: lines the caller handed back */
    struct jobs_bcur bcur[JOBS_BATCHES_ACTIVE];
    uint64_t bgroups;                 /* the last group given */
    bool batches_look;                /* a batch was made or ended: look for one to run */
    int64_t batches_looked_ns;
    /* Batch lines' tokens today per tenant (batch_tokens_per_day): written
     * by the runner, read by /metrics. */
    _Atomic int64_t btok_day;         /* the UTC day they count (Unix s / 86400) */
    _Atomic int64_t btok_used[TENANTS_MAX];
    bool btok_blocked[TENANTS_MAX];   /* no line fits today: its batches wait (jobs_btok_room) */
    /* The state database refused a write (a full disk): jobs and batches
     * are taken up again only after db_pause_until (1 s, doubling to 30 s
     * while it goes on), not at once and forever (jobs_db_trouble). */
    int64_t db_pause_ns, db_pause_until_ns;
    /* Batch lines answered whose results the state database refused: kept
     * to commit when their batch is taken up again, rather than sent
     * upstream (and paid for) once more (jobs_batch_hold). */
    struct jobs_held *held;
    size_t held_bytes;
    /* The next job's model is loading: no job is begun until the load
     * ends (jobs_load_done). Waited for on this thread, a load held every
     * command (a submission, a cancel, an upload) until it ended. */
    _Atomic bool load_waiting;
    /* A job's model said its servers are overloaded: no job is begun
     * before this (jobs_hold); holds_in_row since a line last succeeded. */
    int64_t hold_until_ns;
    int holds_in_row;
    /* Jobs whose model exists but cannot be served (a failed load): each
     * is passed by until its time, then tried again (jobs_wait). */
    struct jobs_wait {
        char id[40];
        int64_t until_ns;
    } waits[JOBS_WAITS_MAX];
    int nwaits;
    _Atomic bool model_loaded;        /* since the waits were last looked at */
    /* The model of the job that last gave way (jobs_yield), passed over
     * until then: the next job on it starves alike. */
    char yielded_model[128];
    int64_t yielded_until_ns;
};

/* A batch line's result not committed yet (jobs->held). */
struct jobs_held {
    struct jobs_held *next;
    char batch_id[64];
    int64_t line;
    bool ok;
    int model;                        /* served_index of its model, -1: none */
    size_t len;
    char body[];
};

/* Batches running now (jobs_batch.c). */
int jobs_batch_running(const struct jobs *j);


int64_t jobs_mono_ns(void);
/* The wall clock in Unix milliseconds (the jobs table's times). */
int64_t jobs_unix_ms(void);
/* For a look done at most every `every` units of a wall clock (files'
 * expiry, jobs' retention): whether one is due at `now` (then *last =
 * now). A clock set back looks again at once. */
bool jobs_look_due(int64_t *last, int64_t now, int64_t every);
/* A state database write failed: starts or lengthens the pause, returns
 * it in seconds. jobs_db_ok: one succeeded (the pause ends). */
double jobs_db_trouble(struct jobs *j);
void jobs_db_ok(struct jobs *j);
/* Whether jobs and batches wait for the state database now. */
bool jobs_db_paused(const struct jobs *j);
bool jobs_blank(const char *s, size_t n);
/* A new file's name survives a power loss only once its folder is synced. */
void jobs_sync_dir(const char *dir);
/* The tenant of that name's index (a tenant no longer configured: the default's). */
int jobs_tenant_index(const struct jobs *j, const char *name);
/* Writes and fsyncs a new file (removed again on failure). */
int jobs_write_file(const char *path, const char *data, size_t len, struct error *err);
/* prefix + 16 random hex digits. */
void jobs_new_id(const char *prefix, char *id, size_t cap);
/* Whether `name` is `prefix` + 16 hex digits (jobs_new_id) + `suffix`;
 * the id (prefix and digits) into id. */
bool jobs_own_name(const char *name, const char *prefix, const char *suffix, char *id,
                   size_t cap);
/* At the runner's start: the files of dir that `orphan` says no row needs
 * (a crash between a file's write and its row, or a row's end and its
 * file's removal) are deleted, and counted in the log. */
void jobs_sweep_dir(struct jobs *j, const char *dir,
                    bool (*orphan)(struct jobs *j, const char *name));

/* ---- jobs_batch.c, on the jobs thread ---- */
/* The Batch API's commands (JOBS_CMD_FILE_*, JOBS_CMD_BATCH_*). */
void jobs_batch_cmd(struct jobs *j, struct jobs_cmd *c);
/* One pass over the running batches (and starts waiting ones). True on progress. */
bool jobs_batch_pump(struct jobs *j);
/* At the runner's start: the files of <jobs.dir>/batch that no row needs
 * any more (a crash between a row and its bytes) are deleted. */
void jobs_batch_sweep(struct jobs *j);
/* At the runner's start: today's batch tokens per tenant from the ledger. */
void jobs_btok_restore(struct jobs *j);
/* At stop: the lines in flight taken back (they run again at the next start). */
void jobs_batch_pause(struct jobs *j);
/* Frees the results held for batches (at the runner's end: lost, run again
 * at the next start). */
void jobs_batch_held_free(struct jobs *j);
/* The caller's `done` (its thread): the line back to the jobs thread. */
void jobs_batch_returned(struct llmbatch_line *l, void *arg);

#endif
