/* modelstats.h - a served model's statistics, recorded on the hot path
 * without any lock shared across threads: every IO thread and every
 * instance worker writes only its own shard (relaxed atomics on memory no
 * other writer touches), and readers (/metrics, /v2/models/{m}/stats, the
 * dashboard) sum the shards when asked. */
#ifndef BG_MODELSTATS_H
#define BG_MODELSTATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "batcher/work.h"

/* Latency buckets (upper bounds), 50 us .. 30 s: resolves both 100 us and 10 s. */
#define MODELSTATS_LAT_BUCKETS 20
extern const double modelstats_lat_bounds_s[MODELSTATS_LAT_BUCKETS];
/* Batch size buckets: 1, 2, 4, ... 65536. */
#define MODELSTATS_ROW_BUCKETS 17
extern const double modelstats_row_bounds[MODELSTATS_ROW_BUCKETS];

/* Status codes counted per model (requests_total{code}); others count as "other". */
#define MODELSTATS_CODES 11
extern const int modelstats_codes[MODELSTATS_CODES];   /* 200, 400, ..., 0 = other */

enum modelstats_reason {
    MS_REJECT_QUEUE_FULL,
    MS_REJECT_DEADLINE,
    MS_REJECT_BAD_REQUEST,
    MS_REJECT_NOT_READY,
    MS_REJECT_SHUTDOWN,
    MS_REJECT_TOO_LONG,           /* 413: more tokens than the model or a batch holds */
    MS_REJECT_COUNT
};
extern const char *const modelstats_reason_names[MS_REJECT_COUNT];

struct modelstats;

/* A snapshot: the shards summed. Histograms have count and sum too. */
struct modelstats_hist {
    uint64_t bucket[MODELSTATS_LAT_BUCKETS];   /* non-cumulative; overflow in bucket[last] */
    uint64_t count;
    double sum;                                 /* seconds (or rows for batch size) */
};

struct modelstats_instance {
    double busy_s;                 /* a batch executing */
    double busy_offline_s;         /* of which offline rows' share (job lines) */
    double held_s;                 /* wall time a copy of the model held it, over all loads */
    double idle_s;                 /* held and not busy; never less than it was shown before */
    double util_10s;               /* busy fraction over the last 10 whole seconds (busywin.h) */
    uint64_t batches, rows;
    /* The rows those batches could have held: each one's max_batch_size
     * when it was cut (a reload may change it; the ratio of the past is
     * kept). */
    uint64_t max_rows;
    /* Tokens computed (= rows for models without them) and what a padded
     * layout would have held: rows x the longest row, per batch. */
    uint64_t tokens, padded_tokens;
};

struct modelstats_snapshot {
    uint64_t codes[MODELSTATS_CODES];
    uint64_t rejected[MS_REJECT_COUNT];
    uint64_t success_count, fail_count;
    uint64_t success_ns, fail_ns;              /* their requests' durations (arrival to answer) */
    /* Requests whose client left before the answer (not in the counts
     * above: nobody was answered): [0] before their batch (no device time
     * spent), [1] once in one (computed for nobody); and arrival to the
     * hang-up (or to the batch's end), summed. */
    uint64_t cancelled[2];
    uint64_t cancelled_ns;
    /* Of the successful requests, each one's own queue wait and its
     * batch's gather, execution and scatter, summed (Triton's queue,
     * compute_input, compute_infer, compute_output). */
    uint64_t req_queue_ns, req_input_ns, req_infer_ns, req_output_ns;
    struct modelstats_hist request;            /* arrival to answer queued */
    struct modelstats_hist queue;              /* arrival to taken into a batch */
    struct modelstats_hist compute;            /* one batch (per batch) */
    struct modelstats_hist batch;              /* rows per batch (row buckets) */
    uint64_t *batch_count_by_size;             /* [max_batch + 1], caller frees */
    uint64_t *batch_ns_by_size;                /* execution */
    uint64_t *batch_in_ns_by_size;             /* gather */
    uint64_t *batch_out_ns_by_size;            /* scatter */
    int max_batch;
    int ninstances;
    struct modelstats_instance *inst;          /* [ninstances], caller frees */
    /* By tenant (all rows are tenant 0, "default", without tenants): rows
     * computed and device time charged, all instances; of that time, job
     * lines' (offline). */
    uint64_t tenant_rows[WORK_TENANTS_MAX];
    double tenant_busy_s[WORK_TENANTS_MAX];
    double tenant_offline_s[WORK_TENANTS_MAX];
    int64_t last_inference_ms;                 /* unix ms of the last answer, 0 if none */
    /* Inference rows arriving per second over the last 10 whole seconds,
     * refused ones included (model_demand_rows_per_second). */
    double demand_rows_per_s;
};

/* Rows computed over the rows their batches could have held (each batch's
 * max_batch_size when it was cut), all instances; 0 before any batch. */
double modelstats_fill(const struct modelstats_snapshot *s);

struct modelstats *modelstats_new(int io_threads, int instances, int max_batch);
void modelstats_free(struct modelstats *s);
/* Whether s has room for a copy with these instances and batch sizes. */
bool modelstats_fits(const struct modelstats *s, int instances, int max_batch);
int modelstats_io_threads(const struct modelstats *s);
/* s (new, not yet shared) replaces old, which stays writable (copies of
 * the model still point at it) and is freed with s. Every reader of either
 * reads the sum of s and those it replaced, so the model's counters go on
 * (a reload that raised max_batch_size started them again from zero), and
 * the held clock goes on in s. s must have at least old's instances and
 * batch sizes. */
void modelstats_retire(struct modelstats *s, struct modelstats *old);
/* Whether s's counters go on from prev's: prev is s, or one s replaced
 * (else they are a new model's, from zero). */
bool modelstats_continues(const struct modelstats *s, const struct modelstats *prev);
/* A copy of the model holding its first `instances` instances finished
 * loading / was unloaded (the same count both times): each instance's
 * held (and so idle) time runs while at least one copy holds it, and
 * goes on from where it was when one holds it again. */
void modelstats_loaded(struct modelstats *s, int instances);
void modelstats_unloaded(struct modelstats *s, int instances);

/* IO thread `thread`: an inference request was answered with `status`.
 * queue_ns < 0 when it never reached a batch. `ran`: the request's item
 * when it was computed (status 200): its queue wait and its batch's times
 * go to Triton's per-request sums; NULL otherwise. */
void modelstats_request(struct modelstats *s, int thread, int status, int64_t total_ns,
                        int64_t queue_ns, const struct infer_item *ran);
void modelstats_reject(struct modelstats *s, int thread, enum modelstats_reason r);
/* IO thread `thread`: an inference request's client left before its
 * answer; `computed`: its batch had taken it (its rows ran, or run). */
void modelstats_cancelled(struct modelstats *s, int thread, bool computed, int64_t total_ns);
/* IO thread `thread`: an inference request of `rows` rows arrived (counted
 * whatever its answer); rows < 0: refused before its rows were known. */
void modelstats_arrival(struct modelstats *s, int thread, int rows);
/* Worker of `instance`: batch b starts executing now. Its time counts as
 * busy, and to its items' tenants, while it runs (every reader below and
 * the usage ledger see it grow), until modelstats_batch_end. */
void modelstats_run_begin(struct modelstats *s, int instance, const struct batch *b);
/* A loop backend's batch in flight at one of its servers (the statistics
 * have an instance per server): its time there counts to its items'
 * tenants while it is there, as a running batch's does on a device of
 * ours. Counted at the end alone, a 10 s call was its tenants' in its last
 * second only, and the nine before went to every tenant by share. The
 * caller owns the struct (one per batch in flight). */
struct modelstats_flight {
    int instance;                          /* the server's; -1: not in flight */
    int64_t t0;
    uint32_t w[2][WORK_TENANTS_MAX];       /* its items' shares, by class and tenant */
};
/* b was sent to `instance`'s server now. */
void modelstats_flight_begin(struct modelstats *s, struct modelstats_flight *f, int instance,
                             const struct batch *b);
/* f's try ended (the batch goes to another server, or ended): its time
 * there goes to b's items' tenants for good (a failed try held the
 * server too). Returns that time; 0 when f was not in flight. */
int64_t modelstats_flight_end(struct modelstats *s, struct modelstats_flight *f,
                              const struct batch *b);
/* The worker of `instance` (or a loop backend's feed): batch b ended. Its
 * time (exec_ns, or from modelstats_run_begin to now if that is longer)
 * goes to the instance's busy time and to its items' tenants on the
 * instance, succeeded or not (it held the device; b may be empty, its
 * items answered by the watchdog: the shares of the begin serve); with
 * `ok` its rows and statistics too: gathered in input_ns, run in exec_ns,
 * scattered in output_ns, its tokens, its rows by tenant. A loop backend's
 * batch passes its flight f (else NULL): its tenants get the time of its
 * last try and its rows go on the server's instance (modelstats_flight_end).
 * Returns the time charged to b's items, or to an empty b's by the shares
 * of its begin (0: none), which the scheduler's shares take
 * too, so that tenant_device_seconds_total adds up to the busy time. */
int64_t modelstats_batch_end(struct modelstats *s, int instance, struct modelstats_flight *f,
                             const struct batch *b, bool ok, int64_t input_ns, int64_t exec_ns,
                             int64_t output_ns);
/* Parts of modelstats_batch_end, without the time: a batch's statistics,
 * its tokens and rows x its longest row (batcher/work.h), its rows and
 * requests by tenant. */
void modelstats_batch(struct modelstats *s, int instance, int rows, int64_t input_ns,
                      int64_t exec_ns, int64_t output_ns);
void modelstats_batch_tokens(struct modelstats *s, int instance, int64_t tokens,
                             int64_t padded_tokens);
void modelstats_batch_tenants(struct modelstats *s, int instance, const struct batch *b);

/* One instance's use by one tenant, by class ([0] online requests, [1]
 * job lines): requests (a job line is one), rows, device time. */
/* One call of an LLM pool (which runs no batches here): a request and
 * `units` (its tokens, prompt and completion) to the tenant's use of the
 * instance (the endpoint it ended at), as a batch's rows are; the usage
 * ledger charges the pool's endpoints by them (serving/ledger.h). */
void modelstats_call(struct modelstats *s, int instance, int tenant, bool offline, int64_t units);
/* A try of a call in flight at endpoint `instance` since t0 (now_ns's
 * clock): its time counts to the tenant's use while it runs, as a running
 * batch's does, until modelstats_call_end adds it for good. Counted at
 * the end alone, a 10 s stream was the tenant's in its last second only,
 * and the others went to every tenant by share. */
void modelstats_call_begin(struct modelstats *s, int instance, int tenant, bool offline,
                           int64_t t0);
void modelstats_call_end(struct modelstats *s, int instance, int tenant, bool offline, int64_t t0);
struct modelstats_tenant_use {
    uint64_t requests[2], rows[2];
    double busy_s[2];
};
/* Each instance's use by tenant into out[instance * WORK_TENANTS_MAX +
 * tenant] for the first `cap` instances; how many were written. */
int modelstats_tenant_use(struct modelstats *s, struct modelstats_tenant_use *out, int cap);
int modelstats_instances(const struct modelstats *s);
int modelstats_max_batch(const struct modelstats *s);

void modelstats_snapshot(struct modelstats *s, struct modelstats_snapshot *out);

/* Triton's statistics (its statistics extension and its nv_inference_*
 * metrics) of one snapshot: the stats JSON and /metrics both take their
 * numbers from here, so the two agree for the same snapshot.
 * Requests (success, fail, queue, compute_*) count once whatever their
 * rows; inference_count counts rows and execution_count batches of what
 * the model computed (job lines' rows included, though a job line is not
 * an inference request: docs/METRICS.md). */
struct modelstats_duration {
    uint64_t count, ns;
};
enum modelstats_fail_reason {   /* nv_inference_request_failure{reason}, Triton's names */
    MS_FAIL_REJECTED,           /* 429: queue full, tenant limits */
    MS_FAIL_CANCELED,           /* the client left before its answer (modelstats_cancelled) */
    MS_FAIL_BACKEND,            /* 500, 502: the backend failed the batch */
    MS_FAIL_OTHER,              /* every other non-200 answer */
    MS_FAIL_COUNT
};
extern const char *const modelstats_fail_names[MS_FAIL_COUNT];
struct modelstats_triton {
    uint64_t inference_count, execution_count;
    struct modelstats_duration success, fail, queue, compute_input, compute_infer,
        compute_output;
    uint64_t fail_by_reason[MS_FAIL_COUNT];
};
void modelstats_triton(const struct modelstats_snapshot *s, struct modelstats_triton *out);
void modelstats_snapshot_free(struct modelstats_snapshot *snap);
/* The q-quantile (0..1) of a latency histogram, interpolated inside its
 * bucket (so within the bucket's resolution); 0 when empty. */
double modelstats_quantile(const struct modelstats_hist *h, double q);

#endif
