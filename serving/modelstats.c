/* modelstats.c - see modelstats.h. Shards are cache-line aligned so two
 * writers never share a line. */
#include "serving/modelstats.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/busywin.h"
#include "common/clock.h"

const double modelstats_lat_bounds_s[MODELSTATS_LAT_BUCKETS] = {
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3,
    100e-3, 250e-3, 500e-3, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 1e30,
};
const double modelstats_row_bounds[MODELSTATS_ROW_BUCKETS] = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536,
};
const int modelstats_codes[MODELSTATS_CODES] = {200, 400, 404, 408, 413, 429, 500, 502, 503, 504, 0};
const char *const modelstats_reason_names[MS_REJECT_COUNT] = {
    "queue_full", "deadline", "bad_request", "not_ready", "shutdown", "input_too_long",
};
const char *const modelstats_fail_names[MS_FAIL_COUNT] = {
    "REJECTED", "CANCELED", "BACKEND", "OTHER",
};

struct hist {
    _Atomic uint64_t b[MODELSTATS_LAT_BUCKETS];
    _Atomic uint64_t count;
    _Atomic uint64_t sum;     /* ns, or rows */
};

struct io_shard {
    _Alignas(64) _Atomic uint64_t codes[MODELSTATS_CODES];
    _Atomic uint64_t rejected[MS_REJECT_COUNT];
    _Atomic uint64_t success, fail;
    _Atomic uint64_t success_ns, fail_ns;
    _Atomic uint64_t cancelled[2], cancelled_ns;
    /* Triton's per-request sums, successful requests only: queue wait,
     * and the gather, execution and scatter of the batch each rode in. */
    _Atomic uint64_t req_queue_ns, req_input_ns, req_infer_ns, req_output_ns;
    _Atomic int64_t last_ms;
    struct hist request, queue;
    /* Arrivals per second (busywin.h's slots counting): inference requests
     * and their rows once decoded, and the requests refused before their
     * rows were known (a full queue). */
    struct busywin arrived_reqs, arrived_rows, refused_early;
};

struct inst_shard {
    _Alignas(64) struct hist compute, batch;
    _Atomic uint64_t batches, rows, max_rows;
    _Atomic uint64_t tokens, padded_tokens;
    _Atomic int64_t idle_shown_ns;           /* the idle time last shown: it never goes back */
    /* How long a copy of the model has held this instance, over all its
     * loads, in one word readers take whole: even, 2 x the time held so
     * far, no copy holds it now; odd, 2 x (held so far - since) + 1, held
     * since `since` (the monotonic clock), so held = that + now. A
     * reload's copies overlap: the time runs while any holds it. Per
     * instance: a reload to fewer instances stops the others' clocks (one
     * model-wide clock charged an instance the 11 s it did not exist). */
    _Atomic int64_t held_mark;
    int holders;                             /* copies holding it now; under hold_lock */
    struct busywin busy;                     /* written by the instance's worker only */
    _Atomic uint64_t busy_offline_ns;        /* the offline rows' share of busy */
    _Atomic uint64_t *count_by_size, *ns_by_size, *in_ns_by_size, *out_ns_by_size;
    /* Rows by class, each its own counter: a total and its offline part,
     * read apart, gave "online = total - offline" one write high, then
     * lower at the next read, which the usage ledger took for a counter
     * reset and charged every row since the start again. */
    _Atomic uint64_t tenant_online_rows[WORK_TENANTS_MAX], tenant_ns[WORK_TENANTS_MAX];
    _Atomic uint64_t tenant_offline_ns[WORK_TENANTS_MAX];   /* of tenant_ns, job lines' */
    _Atomic uint64_t tenant_items[2][WORK_TENANTS_MAX];    /* requests [0], job lines [1] */
    _Atomic uint64_t tenant_offline_rows[WORK_TENANTS_MAX]; /* job lines' */
    /* The batch executing now, so that its time counts while it runs and
     * not only once it ended (a 3 s batch read as 2 s of idle, then 3 of
     * busy, by the usage ledger's 1 s samples): its start (0: none) and
     * its items' shares of its time by class and tenant, in parts of
     * MS_RUN_SCALE. The worker writes them and the busy and tenant time
     * of the batch's end between two increments of run_seq (a seqlock);
     * readers take the ended and the running time in one pass between
     * two equal even values (modelstats_inst_time). */
    _Atomic uint32_t run_seq;
    /* Writers take it around run_seq's odd stretch: a reload's old copy
     * draining its last batches and the new copy's worker write the same
     * shard, and two writers would leave run_seq odd for good (readers
     * then wait forever). Uncontended otherwise. */
    atomic_flag run_lock;
    _Atomic int64_t run_start_ns;
    _Atomic uint32_t run_share[2][WORK_TENANTS_MAX];
    /* Work in flight at the instance other than its running batch: a
     * pool's calls, a loop backend's batches at a server (several at
     * once). By class and tenant, the sum of their weights (a call's is
     * MS_RUN_SCALE, a batch's its items' shares) and of weight x start:
     * (w x now - wt0) / MS_RUN_SCALE is their time so far. The products
     * pass 2^63 (2^30 x a monotonic clock of days), so wt0 is 128 bits
     * wide, in two words. Written and read inside run_seq, as the running
     * batch is (a torn pair is read again). */
    _Atomic int64_t fl_w[2][WORK_TENANTS_MAX];
    _Atomic uint64_t fl_wt0_lo[2][WORK_TENANTS_MAX];
    _Atomic int64_t fl_wt0_hi[2][WORK_TENANTS_MAX];
};

/* A batch's shares are batch_parts'; a pool call's weight is the whole. */
#define MS_RUN_SCALE BATCH_PARTS_SCALE

static __int128 modelstats_wt0(struct inst_shard *sh, int c, int t)
{
    uint64_t lo = atomic_load_explicit(&sh->fl_wt0_lo[c][t], memory_order_relaxed);
    int64_t hi = atomic_load_explicit(&sh->fl_wt0_hi[c][t], memory_order_relaxed);
    return (__int128)(((unsigned __int128)(uint64_t)hi << 64) | lo);
}

/* Inside run_seq's odd stretch (one writer): weight w since t0, or
 * without it (w < 0). */
static void modelstats_flight_add(struct inst_shard *sh, int c, int t, int64_t w, int64_t t0)
{
    __int128 v = modelstats_wt0(sh, c, t) + (__int128)w * t0;
    atomic_store_explicit(&sh->fl_wt0_lo[c][t], (uint64_t)v, memory_order_relaxed);
    atomic_store_explicit(&sh->fl_wt0_hi[c][t], (int64_t)(v >> 64), memory_order_relaxed);
    atomic_store_explicit(&sh->fl_w[c][t],
                          atomic_load_explicit(&sh->fl_w[c][t], memory_order_relaxed) + w,
                          memory_order_relaxed);
}

/* A reader's view (inside its run_seq pass) of the time in flight. */
static uint64_t modelstats_flight_ns(struct inst_shard *sh, int c, int t, int64_t now)
{
    int64_t w = atomic_load_explicit(&sh->fl_w[c][t], memory_order_relaxed);
    if (w <= 0)
        return 0;
    __int128 x = ((__int128)w * now - modelstats_wt0(sh, c, t)) / MS_RUN_SCALE;
    return x > 0 ? (uint64_t)x : 0;
}

struct modelstats {
    int nio, ninst, max_batch;
    /* A reload that outgrew an object replaces it (modelstats_retire); the
     * model's counters are the sum over the newest and those it replaced
     * (the draining copy still writes its own), and readers given any of
     * them read from the newest (its successor chain), so no counter
     * starts again from zero. The held clock lives in the newest alone. */
    struct modelstats *retired;              /* replaced by this one, newest first */
    _Atomic(struct modelstats *) successor;  /* the one that replaced this; NULL: newest */
    atomic_flag hold_lock;                   /* around the instances' held clocks */
    struct io_shard *io;
    struct inst_shard *inst;
};

static void *modelstats_aligned_calloc(size_t n, size_t size)
{
    void *p = aligned_alloc(64, ((n * size + 63) / 64) * 64);
    if (p)
        memset(p, 0, ((n * size + 63) / 64) * 64);
    return p;
}

struct modelstats *modelstats_new(int io_threads, int instances, int max_batch)
{
    struct modelstats *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->nio = io_threads > 0 ? io_threads : 1;
    s->ninst = instances > 0 ? instances : 1;
    s->max_batch = max_batch;
    s->io = modelstats_aligned_calloc((size_t)s->nio, sizeof *s->io);
    s->inst = modelstats_aligned_calloc((size_t)s->ninst, sizeof *s->inst);
    if (!s->io || !s->inst)
        goto fail;
    for (int i = 0; i < s->ninst; i++) {
        s->inst[i].count_by_size = calloc((size_t)max_batch + 1, sizeof(uint64_t));
        s->inst[i].ns_by_size = calloc((size_t)max_batch + 1, sizeof(uint64_t));
        s->inst[i].in_ns_by_size = calloc((size_t)max_batch + 1, sizeof(uint64_t));
        s->inst[i].out_ns_by_size = calloc((size_t)max_batch + 1, sizeof(uint64_t));
        if (!s->inst[i].count_by_size || !s->inst[i].ns_by_size || !s->inst[i].in_ns_by_size ||
            !s->inst[i].out_ns_by_size)
            goto fail;
    }
    return s;
fail:
    modelstats_free(s);
    return NULL;
}

void modelstats_free(struct modelstats *s)
{
    if (!s)
        return;
    modelstats_free(s->retired);
    for (int i = 0; s->inst && i < s->ninst; i++) {
        free((void *)s->inst[i].count_by_size);
        free((void *)s->inst[i].ns_by_size);
        free((void *)s->inst[i].in_ns_by_size);
        free((void *)s->inst[i].out_ns_by_size);
    }
    free(s->io);
    free(s->inst);
    free(s);
}

double modelstats_fill(const struct modelstats_snapshot *s)
{
    double rows = 0, max_rows = 0;
    for (int i = 0; i < s->ninstances && s->inst; i++) {
        rows += (double)s->inst[i].rows;
        max_rows += (double)s->inst[i].max_rows;
    }
    return max_rows > 0 ? rows / max_rows : 0;
}

bool modelstats_fits(const struct modelstats *s, int instances, int max_batch)
{
    return s && instances <= s->ninst && max_batch <= s->max_batch;
}

int modelstats_io_threads(const struct modelstats *s) { return s->nio; }

/* The newest of the objects s was replaced by (s itself when none). */
static struct modelstats *modelstats_head(const struct modelstats *s)
{
    struct modelstats *n;
    while ((n = atomic_load_explicit(&s->successor, memory_order_acquire)))
        s = n;
    return (struct modelstats *)s;
}

int modelstats_instances(const struct modelstats *s) { return modelstats_head(s)->ninst; }
int modelstats_max_batch(const struct modelstats *s) { return modelstats_head(s)->max_batch; }

bool modelstats_continues(const struct modelstats *s, const struct modelstats *prev)
{
    for (const struct modelstats *x = modelstats_head(s); x; x = x->retired)
        if (x == prev)
            return true;
    return false;
}

static void modelstats_hold_lock(struct modelstats *s)
{
    while (atomic_flag_test_and_set_explicit(&s->hold_lock, memory_order_acquire))
        sched_yield();
}

static void modelstats_hold_unlock(struct modelstats *s)
{
    atomic_flag_clear_explicit(&s->hold_lock, memory_order_release);
}

void modelstats_retire(struct modelstats *s, struct modelstats *old)
{
    /* The held clock goes on in s: taken with the copies holding it,
     * under old's lock, so a load or unload of a copy of old either went
     * before (and is in what s takes) or finds the successor and goes to
     * s (modelstats_hold). */
    modelstats_hold_lock(old);
    for (int i = 0; i < s->ninst && i < old->ninst; i++) {   /* the idle time shown too */
        struct inst_shard *to = &s->inst[i], *from = &old->inst[i];
        atomic_store_explicit(&to->held_mark,
                              atomic_load_explicit(&from->held_mark, memory_order_relaxed),
                              memory_order_relaxed);
        to->holders = from->holders;
        atomic_store_explicit(&to->idle_shown_ns,
                              atomic_load_explicit(&from->idle_shown_ns, memory_order_relaxed),
                              memory_order_relaxed);
    }
    s->retired = old;   /* old keeps its own retired chain */
    atomic_store_explicit(&old->successor, s, memory_order_release);
    modelstats_hold_unlock(old);
}

static int64_t modelstats_held_ns(const struct inst_shard *sh, int64_t now)
{
    int64_t m = atomic_load_explicit(&sh->held_mark, memory_order_relaxed);
    return m & 1 ? (m - 1) / 2 + now : m / 2;
}

/* A copy holding the first n instances was loaded (+1) or stopped (-1). */
static void modelstats_hold(struct modelstats *s, int n, int delta)
{
    for (;;) {   /* the newest object's clocks (modelstats_retire) */
        modelstats_hold_lock(s);
        struct modelstats *next = atomic_load_explicit(&s->successor, memory_order_acquire);
        if (!next)
            break;
        modelstats_hold_unlock(s);
        s = next;
    }
    int64_t now = now_ns();
    for (int i = 0; i < n && i < s->ninst; i++) {
        struct inst_shard *sh = &s->inst[i];
        int64_t held = modelstats_held_ns(sh, now);
        bool was = sh->holders > 0;
        sh->holders = sh->holders + delta > 0 ? sh->holders + delta : 0;
        if (!was && sh->holders > 0)
            atomic_store_explicit(&sh->held_mark, 2 * (held - now) + 1, memory_order_relaxed);
        else if (was && sh->holders == 0)
            atomic_store_explicit(&sh->held_mark, 2 * held, memory_order_relaxed);
    }
    modelstats_hold_unlock(s);
}

void modelstats_loaded(struct modelstats *s, int instances) { modelstats_hold(s, instances, 1); }

void modelstats_unloaded(struct modelstats *s, int instances)
{
    modelstats_hold(s, instances, -1);
}

static void modelstats_hist_add(struct hist *h, int bucket, uint64_t v)
{
    atomic_fetch_add_explicit(&h->b[bucket], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, v, memory_order_relaxed);
}

static int modelstats_lat_bucket(int64_t ns)
{
    double s = (double)ns / 1e9;
    int i = 0;
    while (i < MODELSTATS_LAT_BUCKETS - 1 && s > modelstats_lat_bounds_s[i])
        i++;
    return i;
}

static int modelstats_row_bucket(int rows)
{
    int i = 0;
    while (i < MODELSTATS_ROW_BUCKETS - 1 && rows > modelstats_row_bounds[i])
        i++;
    return i;
}

static int modelstats_code_index(int status)
{
    for (int i = 0; i < MODELSTATS_CODES - 1; i++)
        if (modelstats_codes[i] == status)
            return i;
    return MODELSTATS_CODES - 1;
}

static void modelstats_add_ns(_Atomic uint64_t *c, int64_t ns)
{
    atomic_fetch_add_explicit(c, ns > 0 ? (uint64_t)ns : 0, memory_order_relaxed);
}

void modelstats_request(struct modelstats *s, int thread, int status, int64_t total_ns,
                        int64_t queue_ns, const struct infer_item *ran)
{
    struct io_shard *sh = &s->io[thread % s->nio];
    atomic_fetch_add_explicit(&sh->codes[modelstats_code_index(status)], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(status == 200 ? &sh->success : &sh->fail, 1, memory_order_relaxed);
    if (total_ns < 0)
        total_ns = 0;
    modelstats_add_ns(status == 200 ? &sh->success_ns : &sh->fail_ns, total_ns);
    if (status == 200 && ran) {
        modelstats_add_ns(&sh->req_queue_ns, queue_ns);
        modelstats_add_ns(&sh->req_input_ns, ran->t_input_ns);
        modelstats_add_ns(&sh->req_infer_ns, ran->t_compute_ns);
        modelstats_add_ns(&sh->req_output_ns, ran->t_output_ns);
    }
    modelstats_hist_add(&sh->request, modelstats_lat_bucket(total_ns), (uint64_t)total_ns);
    if (queue_ns >= 0)
        modelstats_hist_add(&sh->queue, modelstats_lat_bucket(queue_ns), (uint64_t)queue_ns);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    atomic_store_explicit(&sh->last_ms, (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000,
                          memory_order_relaxed);
}

void modelstats_cancelled(struct modelstats *s, int thread, bool computed, int64_t total_ns)
{
    struct io_shard *sh = &s->io[thread % s->nio];
    atomic_fetch_add_explicit(&sh->cancelled[computed], 1, memory_order_relaxed);
    modelstats_add_ns(&sh->cancelled_ns, total_ns);
}

void modelstats_arrival(struct modelstats *s, int thread, int rows)
{
    struct io_shard *sh = &s->io[thread % s->nio];
    int64_t now = now_ns();
    if (rows < 0) {
        busywin_count(&sh->refused_early, now, 1);
        return;
    }
    busywin_count(&sh->arrived_reqs, now, 1);
    busywin_count(&sh->arrived_rows, now, (uint64_t)rows);
}

void modelstats_reject(struct modelstats *s, int thread, enum modelstats_reason r)
{
    atomic_fetch_add_explicit(&s->io[thread % s->nio].rejected[r], 1, memory_order_relaxed);
}

void modelstats_batch_tokens(struct modelstats *s, int instance, int64_t tokens,
                             int64_t padded_tokens)
{
    struct inst_shard *sh = &s->inst[instance % s->ninst];
    atomic_fetch_add_explicit(&sh->tokens, (uint64_t)tokens, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->padded_tokens, (uint64_t)padded_tokens, memory_order_relaxed);
}

/* The writer's half of run_seq: odd while the running batch's state, or
 * the time its end adds, changes. */
static void modelstats_run_enter(struct inst_shard *sh)
{
    while (atomic_flag_test_and_set_explicit(&sh->run_lock, memory_order_acquire))
        sched_yield();
    uint32_t q = atomic_load_explicit(&sh->run_seq, memory_order_relaxed);
    atomic_store_explicit(&sh->run_seq, q + 1, memory_order_relaxed);
    /* A full fence, not a release one: the end reads the clock next, and
     * that read must not pass the odd value on its way out (a store
     * buffer lets loads go first). Else a reader could pass its check
     * with a clock later than the end's, see more running time than the
     * end then adds, and the counter would step back (test_modelstats
     * caught it about one run in six). */
    atomic_thread_fence(memory_order_seq_cst);
}

static void modelstats_run_leave(struct inst_shard *sh)
{
    uint32_t q = atomic_load_explicit(&sh->run_seq, memory_order_relaxed);
    atomic_store_explicit(&sh->run_seq, q + 1, memory_order_release);
    atomic_flag_clear_explicit(&sh->run_lock, memory_order_release);
}

void modelstats_run_begin(struct modelstats *s, int instance, const struct batch *b)
{
    struct inst_shard *sh = &s->inst[instance % s->ninst];
    uint32_t share[2][WORK_TENANTS_MAX];
    batch_parts(b, share);
    modelstats_run_enter(sh);
    for (int c = 0; c < 2; c++)
        for (int t = 0; t < WORK_TENANTS_MAX; t++)
            atomic_store_explicit(&sh->run_share[c][t], share[c][t], memory_order_relaxed);
    atomic_store_explicit(&sh->run_start_ns, now_ns(), memory_order_relaxed);
    modelstats_run_leave(sh);
}

/* An instance's busy time, its offline part, and its time by tenant: the
 * batches ended and the one running, read in one consistent pass. */
struct modelstats_time {
    uint64_t busy_ns, offline_ns;
    uint64_t tenant_ns[WORK_TENANTS_MAX], tenant_offline_ns[WORK_TENANTS_MAX];
};

static void modelstats_inst_time(struct inst_shard *sh, struct modelstats_time *o)
{
    for (;;) {
        uint32_t q = atomic_load_explicit(&sh->run_seq, memory_order_acquire);
        if (q & 1) {
            sched_yield();   /* a worker inside its few stores */
            continue;
        }
        /* Read after q: earlier than the clock of any end not yet seen, so
         * the running batch never shows more time than its end adds. */
        int64_t now = now_ns();
        int64_t start = atomic_load_explicit(&sh->run_start_ns, memory_order_relaxed);
        uint64_t run = start > 0 && now > start ? (uint64_t)(now - start) : 0;
        o->busy_ns = busywin_total_ns(&sh->busy) + run;
        o->offline_ns = atomic_load_explicit(&sh->busy_offline_ns, memory_order_relaxed);
        for (int t = 0; t < WORK_TENANTS_MAX; t++) {
            uint64_t on = run ? atomic_load_explicit(&sh->run_share[0][t], memory_order_relaxed)
                              : 0;
            uint64_t off = run ? atomic_load_explicit(&sh->run_share[1][t], memory_order_relaxed)
                               : 0;
            uint64_t run_on = run * on / MS_RUN_SCALE + modelstats_flight_ns(sh, 0, t, now);
            uint64_t run_off = run * off / MS_RUN_SCALE + modelstats_flight_ns(sh, 1, t, now);
            o->tenant_ns[t] =
                atomic_load_explicit(&sh->tenant_ns[t], memory_order_relaxed) + run_on + run_off;
            o->tenant_offline_ns[t] =
                atomic_load_explicit(&sh->tenant_offline_ns[t], memory_order_relaxed) + run_off;
            o->offline_ns += run_off;
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&sh->run_seq, memory_order_relaxed) == q)
            return;
    }
}

/* ns of a batch's time to its tenants on sh by its parts (batch_parts),
 * each rounded up; returns the offline (job lines') part. A reader saw
 * floor(run x part / scale) of it while it ran (or flew), with run <= ns,
 * so the end adds at least that and the counters never step back: rounded
 * down item by item, the end could add a few ns less than the running
 * batch had shown, which the usage ledger and Prometheus take for a
 * counter reset (the whole count charged again). */
static uint64_t modelstats_parts_charge(struct inst_shard *sh,
                                        const uint32_t part[2][WORK_TENANTS_MAX], int64_t ns)
{
    uint64_t off_total = 0;
    for (int t = 0; t < WORK_TENANTS_MAX; t++) {
        uint64_t c[2];
        for (int k = 0; k < 2; k++)
            c[k] = (uint64_t)(((__int128)ns * part[k][t] + MS_RUN_SCALE - 1) / MS_RUN_SCALE);
        if (c[0] + c[1])
            atomic_fetch_add_explicit(&sh->tenant_ns[t], c[0] + c[1], memory_order_relaxed);
        if (c[1])
            atomic_fetch_add_explicit(&sh->tenant_offline_ns[t], c[1], memory_order_relaxed);
        off_total += c[1];
    }
    return off_total;
}

void modelstats_flight_begin(struct modelstats *s, struct modelstats_flight *f, int instance,
                             const struct batch *b)
{
    batch_parts(b, f->w);
    f->instance = instance >= 0 ? instance % s->ninst : 0;
    struct inst_shard *sh = &s->inst[f->instance];
    modelstats_run_enter(sh);
    f->t0 = now_ns();
    for (int c = 0; c < 2; c++)
        for (int t = 0; t < WORK_TENANTS_MAX; t++)
            if (f->w[c][t])
                modelstats_flight_add(sh, c, t, f->w[c][t], f->t0);
    modelstats_run_leave(sh);
}

int64_t modelstats_flight_end(struct modelstats *s, struct modelstats_flight *f,
                              const struct batch *b)
{
    if (f->instance < 0)
        return 0;
    struct inst_shard *sh = &s->inst[f->instance];
    modelstats_run_enter(sh);
    /* Inside the stretch: later than any reader's clock that saw it in
     * flight, so its time for good is at least what they saw. */
    int64_t ns = now_ns() - f->t0;
    for (int c = 0; c < 2; c++)
        for (int t = 0; t < WORK_TENANTS_MAX; t++)
            if (f->w[c][t])
                modelstats_flight_add(sh, c, t, -(int64_t)f->w[c][t], f->t0);
    (void)b;   /* its parts were taken at the begin (the running view's) */
    modelstats_parts_charge(sh, f->w, ns);
    modelstats_run_leave(sh);
    f->instance = -1;
    return ns;
}

/* The batch's time into the instance's busy time and its tenants' (the
 * worker's, inside run_seq): from the running batch's start when one was
 * begun, so that the end adds at least what readers saw it run; its
 * shares as begun when the batch's items are gone (the watchdog answered
 * them). */
/* Returns the time charged to b's items (0: none, b empty). */
static int64_t modelstats_time_end(struct inst_shard *sh, struct inst_shard *charged,
                                   const struct batch *b, int64_t exec_ns)
{
    int64_t to_items = 0;
    int64_t end = now_ns();
    int64_t start = atomic_load_explicit(&sh->run_start_ns, memory_order_relaxed);
    int64_t busy = start > 0 && end - start > exec_ns ? end - start : exec_ns;
    busywin_add(&sh->busy, end - busy, end);
    /* By the parts it began with, as readers saw it run (its items may be
     * gone: the watchdog answered them); a batch never begun, by its own. */
    uint32_t part[2][WORK_TENANTS_MAX];
    bool charge = start > 0;
    if (charge) {
        for (int c = 0; c < 2; c++)
            for (int t = 0; t < WORK_TENANTS_MAX; t++)
                part[c][t] = atomic_load_explicit(&sh->run_share[c][t], memory_order_relaxed);
    } else if (b && b->head && b->rows > 0) {
        batch_parts(b, part);
        charge = true;
    }
    if (charge) {
        to_items = busy;
        uint64_t off = 0;
        if (charged) {
            off = modelstats_parts_charge(charged, part, busy);
        } else {
            for (int t = 0; t < WORK_TENANTS_MAX; t++)
                off += (uint64_t)(((__int128)busy * part[1][t] + MS_RUN_SCALE - 1) /
                                  MS_RUN_SCALE);
        }
        if (off)
            atomic_fetch_add_explicit(&sh->busy_offline_ns, off, memory_order_relaxed);
    }
    atomic_store_explicit(&sh->run_start_ns, 0, memory_order_relaxed);
    return to_items;
}

int64_t modelstats_batch_end(struct modelstats *s, int instance, struct modelstats_flight *f,
                             const struct batch *b, bool ok, int64_t input_ns, int64_t exec_ns,
                             int64_t output_ns)
{
    int64_t to_items = 0, flown = 0;
    int charged = instance;
    bool flew = f && f->instance >= 0;
    if (flew) {   /* its tenants' time: the last try's, at its server */
        charged = f->instance;
        flown = modelstats_flight_end(s, f, b);
    }
    struct inst_shard *sh = &s->inst[instance % s->ninst];
    modelstats_run_enter(sh);
    /* Device time counts whether the batch succeeded or not: it held the
     * device. Its rows and statistics only when it computed them. A loop
     * backend's failed batch adds no busy time here (a call to a server
     * behind, never begun here), but its tenants had the server's time of
     * its tries, as above (docs/USAGE.md). */
    if (ok || atomic_load_explicit(&sh->run_start_ns, memory_order_relaxed) > 0)
        to_items = modelstats_time_end(sh, flew ? NULL : &s->inst[charged % s->ninst], b, exec_ns);
    if (!to_items)
        to_items = flown;
    if (ok && b) {
        modelstats_batch(s, instance, b->rows, input_ns, exec_ns, output_ns);
        atomic_fetch_add_explicit(&sh->max_rows, (uint64_t)(b->max_rows > 0 ? b->max_rows : b->rows),
                                  memory_order_relaxed);
        modelstats_batch_tokens(s, instance, b->tokens,
                                (int64_t)b->rows * (b->max_len > 0 ? b->max_len : 1));
        modelstats_batch_tenants(s, charged, b);
    }
    modelstats_run_leave(sh);
    return to_items;
}

void modelstats_batch(struct modelstats *s, int instance, int rows, int64_t input_ns,
                      int64_t exec_ns, int64_t output_ns)
{
    struct inst_shard *sh = &s->inst[instance % s->ninst];
    modelstats_hist_add(&sh->compute, modelstats_lat_bucket(exec_ns), (uint64_t)exec_ns);
    modelstats_hist_add(&sh->batch, modelstats_row_bucket(rows), (uint64_t)rows);
    atomic_fetch_add_explicit(&sh->batches, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->rows, (uint64_t)rows, memory_order_relaxed);
    if (rows >= 0 && rows <= s->max_batch) {
        atomic_fetch_add_explicit(&sh->count_by_size[rows], 1, memory_order_relaxed);
        modelstats_add_ns(&sh->ns_by_size[rows], exec_ns);
        modelstats_add_ns(&sh->in_ns_by_size[rows], input_ns);
        modelstats_add_ns(&sh->out_ns_by_size[rows], output_ns);
    }
}

void modelstats_batch_tenants(struct modelstats *s, int instance, const struct batch *b)
{
    struct inst_shard *sh = &s->inst[instance % s->ninst];
    if (b->rows <= 0)
        return;
    for (const struct infer_item *it = b->head; it; it = it->next) {
        int t = it->tenant >= 0 && it->tenant < WORK_TENANTS_MAX ? it->tenant : 0;
        atomic_fetch_add_explicit(it->offline ? &sh->tenant_offline_rows[t]
                                              : &sh->tenant_online_rows[t],
                                  (uint64_t)it->rows, memory_order_relaxed);
        atomic_fetch_add_explicit(&sh->tenant_items[it->offline][t], 1, memory_order_relaxed);
    }
}

void modelstats_call(struct modelstats *s, int instance, int tenant, bool offline, int64_t units)
{
    struct inst_shard *sh = &s->inst[instance % s->ninst];
    int t = tenant >= 0 && tenant < WORK_TENANTS_MAX ? tenant : 0;
    uint64_t u = units > 0 ? (uint64_t)units : 0;
    atomic_fetch_add_explicit(offline ? &sh->tenant_offline_rows[t] : &sh->tenant_online_rows[t],
                              u, memory_order_relaxed);
    atomic_fetch_add_explicit(&sh->tenant_items[offline][t], 1, memory_order_relaxed);
}

void modelstats_call_begin(struct modelstats *s, int instance, int tenant, bool offline,
                           int64_t t0)
{
    struct inst_shard *sh = &s->inst[(instance >= 0 ? instance : 0) % s->ninst];
    int t = tenant >= 0 && tenant < WORK_TENANTS_MAX ? tenant : 0;
    modelstats_run_enter(sh);
    modelstats_flight_add(sh, offline, t, MS_RUN_SCALE, t0);
    modelstats_run_leave(sh);
}

void modelstats_call_end(struct modelstats *s, int instance, int tenant, bool offline, int64_t t0)
{
    struct inst_shard *sh = &s->inst[(instance >= 0 ? instance : 0) % s->ninst];
    int t = tenant >= 0 && tenant < WORK_TENANTS_MAX ? tenant : 0;
    modelstats_run_enter(sh);
    /* Inside the stretch: later than any reader's clock that saw it run,
     * so its time for good is at least what they saw (never a step back). */
    int64_t now = now_ns();
    uint64_t d = now > t0 ? (uint64_t)(now - t0) : 0;
    modelstats_flight_add(sh, offline, t, -(int64_t)MS_RUN_SCALE, t0);
    atomic_fetch_add_explicit(&sh->tenant_ns[t], d, memory_order_relaxed);
    if (offline)
        atomic_fetch_add_explicit(&sh->tenant_offline_ns[t], d, memory_order_relaxed);
    modelstats_run_leave(sh);
}

int modelstats_tenant_use(struct modelstats *s, struct modelstats_tenant_use *out, int cap)
{
    s = modelstats_head(s);
    int n = s->ninst < cap ? s->ninst : cap;
    memset(out, 0, (size_t)n * WORK_TENANTS_MAX * sizeof *out);
    struct modelstats_time tm;
    for (struct modelstats *x = s; x; x = x->retired) {
        int m = x->ninst < n ? x->ninst : n;   /* the newest has the most (served_stats_fit) */
        for (int i = 0; i < m; i++) {
            struct inst_shard *sh = &x->inst[i];
            modelstats_inst_time(sh, &tm);
            for (int t = 0; t < WORK_TENANTS_MAX; t++) {
                struct modelstats_tenant_use *u = &out[(size_t)i * WORK_TENANTS_MAX + t];
                uint64_t ns = tm.tenant_ns[t], off_ns = tm.tenant_offline_ns[t];
                off_ns = off_ns < ns ? off_ns : ns;
                for (int c = 0; c < 2; c++)
                    u->requests[c] +=
                        atomic_load_explicit(&sh->tenant_items[c][t], memory_order_relaxed);
                u->rows[0] += atomic_load_explicit(&sh->tenant_online_rows[t],
                                                   memory_order_relaxed);
                u->rows[1] += atomic_load_explicit(&sh->tenant_offline_rows[t],
                                                   memory_order_relaxed);
                u->busy_s[0] += (double)(ns - off_ns) / 1e9;
                u->busy_s[1] += (double)off_ns / 1e9;
            }
        }
    }
    return n;
}

static void modelstats_hist_sum(struct modelstats_hist *dst, struct hist *src, double unit)
{
    for (int i = 0; i < MODELSTATS_LAT_BUCKETS; i++)
        dst->bucket[i] += atomic_load_explicit(&src->b[i], memory_order_relaxed);
    dst->count += atomic_load_explicit(&src->count, memory_order_relaxed);
    dst->sum += (double)atomic_load_explicit(&src->sum, memory_order_relaxed) * unit;
}

/* One object's counters added into o, its instances into the first of
 * o's (busy_ns[i] the time, for the idle time once all are in). */
static void modelstats_snapshot_add(struct modelstats *s, struct modelstats_snapshot *o,
                                    int64_t now, uint64_t *busy_ns)
{
    for (int t = 0; t < s->nio; t++) {
        struct io_shard *sh = &s->io[t];
        for (int i = 0; i < MODELSTATS_CODES; i++)
            o->codes[i] += atomic_load_explicit(&sh->codes[i], memory_order_relaxed);
        for (int i = 0; i < MS_REJECT_COUNT; i++)
            o->rejected[i] += atomic_load_explicit(&sh->rejected[i], memory_order_relaxed);
        o->success_count += atomic_load_explicit(&sh->success, memory_order_relaxed);
        o->fail_count += atomic_load_explicit(&sh->fail, memory_order_relaxed);
        o->success_ns += atomic_load_explicit(&sh->success_ns, memory_order_relaxed);
        o->fail_ns += atomic_load_explicit(&sh->fail_ns, memory_order_relaxed);
        for (int i = 0; i < 2; i++)
            o->cancelled[i] += atomic_load_explicit(&sh->cancelled[i], memory_order_relaxed);
        o->cancelled_ns += atomic_load_explicit(&sh->cancelled_ns, memory_order_relaxed);
        o->req_queue_ns += atomic_load_explicit(&sh->req_queue_ns, memory_order_relaxed);
        o->req_input_ns += atomic_load_explicit(&sh->req_input_ns, memory_order_relaxed);
        o->req_infer_ns += atomic_load_explicit(&sh->req_infer_ns, memory_order_relaxed);
        o->req_output_ns += atomic_load_explicit(&sh->req_output_ns, memory_order_relaxed);
        int64_t last = atomic_load_explicit(&sh->last_ms, memory_order_relaxed);
        if (last > o->last_inference_ms)
            o->last_inference_ms = last;
        modelstats_hist_sum(&o->request, &sh->request, 1e-9);
        modelstats_hist_sum(&o->queue, &sh->queue, 1e-9);
    }
    /* Demand: arrivals over the sliding last 10 s; a request refused before
     * its rows were known counts as the mean request of that window (one
     * row when there is none to go by). */
    double reqs = 0, rows = 0, early = 0;
    for (int t = 0; t < s->nio; t++) {
        reqs += busywin_rate(&s->io[t].arrived_reqs, now, BUSYWIN_UTIL_S);
        rows += busywin_rate(&s->io[t].arrived_rows, now, BUSYWIN_UTIL_S);
        early += busywin_rate(&s->io[t].refused_early, now, BUSYWIN_UTIL_S);
    }
    o->demand_rows_per_s += rows + early * (reqs > 0 ? rows / reqs : 1);
    struct modelstats_time tm;
    int ninst = s->ninst < o->ninstances ? s->ninst : o->ninstances;
    int maxb = s->max_batch < o->max_batch ? s->max_batch : o->max_batch;
    for (int i = 0; i < ninst; i++) {
        struct inst_shard *sh = &s->inst[i];
        modelstats_hist_sum(&o->compute, &sh->compute, 1e-9);
        modelstats_hist_sum(&o->batch, &sh->batch, 1.0);
        modelstats_inst_time(sh, &tm);
        for (int t = 0; t < WORK_TENANTS_MAX; t++) {
            o->tenant_rows[t] +=
                atomic_load_explicit(&sh->tenant_online_rows[t], memory_order_relaxed) +
                atomic_load_explicit(&sh->tenant_offline_rows[t], memory_order_relaxed);
            o->tenant_busy_s[t] += (double)tm.tenant_ns[t] / 1e9;
            o->tenant_offline_s[t] += (double)tm.tenant_offline_ns[t] / 1e9;
        }
        if (o->batch_count_by_size)
            for (int r = 0; r <= maxb; r++) {
                o->batch_count_by_size[r] += atomic_load_explicit(&sh->count_by_size[r], memory_order_relaxed);
                o->batch_ns_by_size[r] += atomic_load_explicit(&sh->ns_by_size[r], memory_order_relaxed);
                o->batch_in_ns_by_size[r] +=
                    atomic_load_explicit(&sh->in_ns_by_size[r], memory_order_relaxed);
                o->batch_out_ns_by_size[r] +=
                    atomic_load_explicit(&sh->out_ns_by_size[r], memory_order_relaxed);
            }
        busy_ns[i] += tm.busy_ns;
        if (!o->inst)
            continue;
        struct modelstats_instance *mi = &o->inst[i];
        mi->busy_s += (double)tm.busy_ns / 1e9;
        mi->busy_offline_s += (double)tm.offline_ns / 1e9;
        mi->batches += atomic_load_explicit(&sh->batches, memory_order_relaxed);
        mi->tokens += atomic_load_explicit(&sh->tokens, memory_order_relaxed);
        mi->padded_tokens += atomic_load_explicit(&sh->padded_tokens, memory_order_relaxed);
        mi->rows += atomic_load_explicit(&sh->rows, memory_order_relaxed);
        mi->max_rows += atomic_load_explicit(&sh->max_rows, memory_order_relaxed);
        mi->util_10s += busywin_fraction(&sh->busy, now, BUSYWIN_UTIL_S);
    }
}

void modelstats_snapshot(struct modelstats *s, struct modelstats_snapshot *o)
{
    memset(o, 0, sizeof *o);
    s = modelstats_head(s);
    o->max_batch = s->max_batch;
    o->ninstances = s->ninst;
    o->inst = calloc((size_t)s->ninst, sizeof *o->inst);
    o->batch_count_by_size = calloc((size_t)s->max_batch + 1, sizeof(uint64_t));
    o->batch_ns_by_size = calloc((size_t)s->max_batch + 1, sizeof(uint64_t));
    o->batch_in_ns_by_size = calloc((size_t)s->max_batch + 1, sizeof(uint64_t));
    o->batch_out_ns_by_size = calloc((size_t)s->max_batch + 1, sizeof(uint64_t));
    if (!o->batch_count_by_size || !o->batch_ns_by_size || !o->batch_in_ns_by_size ||
        !o->batch_out_ns_by_size) {
        /* All or none: the by-size readers then see no batch sizes. */
        free(o->batch_count_by_size);
        free(o->batch_ns_by_size);
        free(o->batch_in_ns_by_size);
        free(o->batch_out_ns_by_size);
        o->batch_count_by_size = o->batch_ns_by_size = NULL;
        o->batch_in_ns_by_size = o->batch_out_ns_by_size = NULL;
    }
    uint64_t *busy_ns = calloc((size_t)s->ninst, sizeof *busy_ns);
    if (!busy_ns) {
        free(o->inst);
        o->inst = NULL;
        o->ninstances = 0;
        return;
    }
    int64_t now = now_ns();
    for (struct modelstats *x = s; x; x = x->retired)
        modelstats_snapshot_add(x, o, now, busy_ns);
    for (int i = 0; i < s->ninst && o->inst; i++) {
        struct modelstats_instance *mi = &o->inst[i];
        struct inst_shard *sh = &s->inst[i];
        int64_t held = modelstats_held_ns(sh, now);
        mi->held_s = (double)held / 1e9;
        mi->util_10s = mi->util_10s < 1 ? mi->util_10s : 1;   /* a reload's two copies */
        /* Idle is held minus busy, which two copies' batches on the same
         * shard (a reload's overlap) can outrun for a moment: what is shown
         * is the most ever shown, a counter's promise. */
        int64_t idle = held > (int64_t)busy_ns[i] ? held - (int64_t)busy_ns[i] : 0;
        int64_t shown = atomic_load_explicit(&sh->idle_shown_ns, memory_order_relaxed);
        while (idle > shown && !atomic_compare_exchange_weak_explicit(
                                   &sh->idle_shown_ns, &shown, idle, memory_order_relaxed,
                                   memory_order_relaxed))
            ;
        mi->idle_s = (double)(idle > shown ? idle : shown) / 1e9;
    }
    free(busy_ns);
}

void modelstats_snapshot_free(struct modelstats_snapshot *snap)
{
    free(snap->inst);
    free(snap->batch_count_by_size);
    free(snap->batch_ns_by_size);
    free(snap->batch_in_ns_by_size);
    free(snap->batch_out_ns_by_size);
    snap->inst = NULL;
    snap->batch_count_by_size = snap->batch_ns_by_size = NULL;
    snap->batch_in_ns_by_size = snap->batch_out_ns_by_size = NULL;
}

void modelstats_triton(const struct modelstats_snapshot *s, struct modelstats_triton *o)
{
    memset(o, 0, sizeof *o);
    /* From the per-size counts, so that sum(size x count) = inference_count
     * and sum(count) = execution_count hold exactly in every snapshot. */
    for (int r = 1; r <= s->max_batch && s->batch_count_by_size; r++) {
        o->inference_count += (uint64_t)r * s->batch_count_by_size[r];
        o->execution_count += s->batch_count_by_size[r];
    }
    o->success = (struct modelstats_duration){s->success_count, s->success_ns};
    /* A request cancelled by its client is Triton's failure too, of reason
     * CANCELED (its time: arrival to the hang-up). */
    uint64_t cancelled = s->cancelled[0] + s->cancelled[1];
    o->fail = (struct modelstats_duration){s->fail_count + cancelled,
                                           s->fail_ns + s->cancelled_ns};
    /* Only computed requests answer 200, each recorded with its times in
     * one call: these counts are the success count. */
    o->queue = (struct modelstats_duration){s->success_count, s->req_queue_ns};
    o->compute_input = (struct modelstats_duration){s->success_count, s->req_input_ns};
    o->compute_infer = (struct modelstats_duration){s->success_count, s->req_infer_ns};
    o->compute_output = (struct modelstats_duration){s->success_count, s->req_output_ns};
    uint64_t rejected = 0, backend = 0;
    for (int i = 0; i < MODELSTATS_CODES; i++) {
        if (modelstats_codes[i] == 429)
            rejected += s->codes[i];
        else if (modelstats_codes[i] == 500 || modelstats_codes[i] == 502)
            backend += s->codes[i];
    }
    /* Read shard by shard, the codes may be ahead of fail_count. */
    if (rejected > s->fail_count)
        rejected = s->fail_count;
    if (backend > s->fail_count - rejected)
        backend = s->fail_count - rejected;
    o->fail_by_reason[MS_FAIL_REJECTED] = rejected;
    o->fail_by_reason[MS_FAIL_BACKEND] = backend;
    o->fail_by_reason[MS_FAIL_OTHER] = s->fail_count - rejected - backend;
    o->fail_by_reason[MS_FAIL_CANCELED] = cancelled;
}

double modelstats_quantile(const struct modelstats_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    double target = q * (double)h->count, seen = 0;
    for (int i = 0; i < MODELSTATS_LAT_BUCKETS; i++) {
        double n = (double)h->bucket[i];
        if (seen + n >= target && n > 0) {
            double lo = i ? modelstats_lat_bounds_s[i - 1] : 0;
            double hi = i < MODELSTATS_LAT_BUCKETS - 1 ? modelstats_lat_bounds_s[i] : lo * 2;
            return lo + (hi - lo) * ((target - seen) / n);
        }
        seen += n;
    }
    return modelstats_lat_bounds_s[MODELSTATS_LAT_BUCKETS - 2];
}
