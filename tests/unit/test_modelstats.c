/* test_modelstats.c - sharded statistics: what the threads record is what a
 * snapshot sums, histogram buckets and quantiles, a long batch's busy time
 * in the 10 s utilization and while it runs, concurrent writers. */
#include <pthread.h>
#include <stdatomic.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/clock.h"
#include "serving/modelstats.h"

/* A batch of `rows` rows, `offline` of them a job line's, ended on
 * instance inst (what batchrun_end records). */
static void end_batch(struct modelstats *s, int inst, int rows, int offline, int64_t input_ns,
                      int64_t exec_ns, int64_t output_ns)
{
    struct infer_item on, off;
    memset(&on, 0, sizeof on);
    memset(&off, 0, sizeof off);
    on.rows = rows - offline;
    off.rows = offline;
    off.offline = true;
    on.next = offline ? &off : NULL;
    struct batch b = {.head = rows - offline ? &on : &off, .nitems = 1 + (offline > 0),
                      .rows = rows};
    modelstats_batch_end(s, inst, NULL, &b, true, input_ns, exec_ns, output_ns);
}

/* batch_fill_ratio: rows over what each batch could hold when it was cut.
 * Divided by the max_batch_size in force, a reload from 8 to 32 made the
 * past read a quarter as full. */
static void test_fill_keeps_each_batch_cap(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 2, 32);
    struct infer_item it;
    memset(&it, 0, sizeof it);
    it.rows = 4;
    struct batch b = {.head = &it, .nitems = 1, .rows = 4, .max_rows = 8};
    struct modelstats_snapshot o;
    modelstats_snapshot(s, &o);
    assert_true(modelstats_fill(&o) == 0);   /* no batch yet */
    modelstats_snapshot_free(&o);
    modelstats_batch_end(s, 0, NULL, &b, true, 0, 1000, 0);
    modelstats_snapshot(s, &o);
    assert_true(fabs(modelstats_fill(&o) - 0.5) < 1e-9);
    modelstats_snapshot_free(&o);
    b.max_rows = 32;   /* reloaded with max_batch_size 32, on the other instance */
    modelstats_batch_end(s, 1, NULL, &b, true, 0, 1000, 0);
    modelstats_batch_end(s, 1, NULL, &b, false, 0, 1000, 0);   /* failed: no rows, no room */
    modelstats_snapshot(s, &o);
    assert_true(fabs(modelstats_fill(&o) - 8.0 / 40.0) < 1e-9);
    modelstats_snapshot_free(&o);
    modelstats_free(s);
}

static void test_sums_across_shards(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(3, 2, 8);
    assert_non_null(s);
    modelstats_loaded(s, 1);
    modelstats_request(s, 0, 200, 1000000, 400000, NULL);   /* 1 ms, 0.4 ms queued */
    modelstats_request(s, 1, 200, 3000000, 100000, NULL);
    modelstats_request(s, 2, 504, 2000000, -1, NULL);
    modelstats_reject(s, 2, MS_REJECT_DEADLINE);
    end_batch(s, 0, 3, 0, 1000, 500000, 2000);
    end_batch(s, 1, 8, 2, 1000, 700000, 2000);
    struct modelstats_snapshot snap;
    modelstats_snapshot(s, &snap);
    assert_int_equal(snap.codes[0], 2);                       /* 200 */
    assert_int_equal(snap.codes[9], 1);                       /* 504 */
    assert_int_equal(snap.rejected[MS_REJECT_DEADLINE], 1);
    assert_int_equal(snap.success_count, 2);
    assert_int_equal(snap.fail_count, 1);
    assert_int_equal(snap.request.count, 3);
    assert_true(snap.request.sum > 0.0059 && snap.request.sum < 0.0061);
    assert_int_equal(snap.queue.count, 2);
    assert_int_equal(snap.compute.count, 2);
    assert_int_equal(snap.batch.count, 2);
    assert_true(snap.batch.sum == 11.0);
    assert_int_equal(snap.batch_count_by_size[3], 1);
    assert_int_equal(snap.batch_count_by_size[8], 1);
    assert_int_equal(snap.batch_ns_by_size[8], 700000);
    assert_int_equal(snap.inst[0].rows + snap.inst[1].rows, 11);
    assert_true(snap.inst[0].busy_s > 0.00049 && snap.inst[0].busy_s < 0.00051);
    /* Instance 1's batch had 2 offline rows of 8: a quarter of its 0.7 ms. */
    assert_true(snap.inst[0].busy_offline_s == 0);
    assert_true(snap.inst[1].busy_offline_s > 0.000174 && snap.inst[1].busy_offline_s < 0.000176);
    assert_true(snap.last_inference_ms > 0);
    modelstats_snapshot_free(&snap);
    modelstats_free(s);
}

static void test_buckets_and_quantiles(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 1, 4);
    /* 100 requests at 80 us and 1 at 9 s: buckets resolve both ends. */
    for (int i = 0; i < 100; i++)
        modelstats_request(s, 0, 200, 80000, 0, NULL);
    modelstats_request(s, 0, 200, 9000000000LL, 0, NULL);
    struct modelstats_snapshot snap;
    modelstats_snapshot(s, &snap);
    assert_int_equal(snap.request.bucket[1], 100);   /* (50 us, 100 us] */
    assert_int_equal(snap.request.bucket[16], 1);    /* (5 s, 10 s] */
    double p50 = modelstats_quantile(&snap.request, 0.5);
    assert_true(p50 > 50e-6 && p50 <= 100e-6);
    double p999 = modelstats_quantile(&snap.request, 0.999);
    assert_true(p999 > 5.0 && p999 <= 10.0);
    modelstats_snapshot_free(&snap);
    modelstats_free(s);
}

/* Triton's statistics: requests count once whatever their rows and carry
 * their whole batch's gather, execution and scatter; batch_stats' sizes
 * add up to inference_count and execution_count; failures by reason. */
static void test_triton_counts(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(2, 1, 16);
    /* One batch of 4 rows: requests of 1 and 3 rows. */
    struct infer_item a = {.rows = 1, .t_input_ns = 10, .t_compute_ns = 1000, .t_output_ns = 20};
    struct infer_item b = a;
    b.rows = 3;
    end_batch(s, 0, 4, 0, 10, 1000, 20);
    modelstats_request(s, 0, 200, 5000, 300, &a);
    modelstats_request(s, 1, 200, 6000, 400, &b);
    /* A batch of 1 row. */
    struct infer_item c = {.rows = 1, .t_input_ns = 5, .t_compute_ns = 700, .t_output_ns = 6};
    end_batch(s, 0, 1, 0, 5, 700, 6);
    modelstats_request(s, 0, 200, 2000, 100, &c);
    /* Failures: a full queue, a backend error, a bad request. */
    modelstats_request(s, 1, 429, 50, -1, NULL);
    modelstats_request(s, 1, 500, 900, 100, NULL);
    modelstats_request(s, 0, 400, 30, -1, NULL);
    struct modelstats_snapshot snap;
    modelstats_snapshot(s, &snap);
    struct modelstats_triton t;
    modelstats_triton(&snap, &t);
    assert_int_equal(t.inference_count, 5);
    assert_int_equal(t.execution_count, 2);
    assert_int_equal(t.success.count, 3);
    assert_int_equal(t.success.ns, 13000);
    assert_int_equal(t.fail.count, 3);
    assert_int_equal(t.fail.ns, 980);
    assert_int_equal(t.queue.count, 3);
    assert_int_equal(t.queue.ns, 800);
    assert_int_equal(t.compute_input.count, 3);
    assert_int_equal(t.compute_input.ns, 25);
    assert_int_equal(t.compute_infer.count, 3);
    assert_int_equal(t.compute_infer.ns, 2700);
    assert_int_equal(t.compute_output.count, 3);
    assert_int_equal(t.compute_output.ns, 46);
    assert_int_equal(t.fail_by_reason[MS_FAIL_REJECTED], 1);
    assert_int_equal(t.fail_by_reason[MS_FAIL_BACKEND], 1);
    assert_int_equal(t.fail_by_reason[MS_FAIL_OTHER], 1);
    assert_int_equal(t.fail_by_reason[MS_FAIL_CANCELED], 0);
    assert_int_equal(snap.batch_count_by_size[4], 1);
    assert_int_equal(snap.batch_in_ns_by_size[4], 10);
    assert_int_equal(snap.batch_ns_by_size[4], 1000);
    assert_int_equal(snap.batch_out_ns_by_size[4], 20);
    assert_int_equal(snap.batch_count_by_size[1], 1);
    modelstats_snapshot_free(&snap);
    modelstats_free(s);
}

/* A batch that ran 3 s counts in the seconds it ran (common/busywin.h),
 * not all in the second it ended: at least 2 of those seconds are already
 * whole, whatever the clock's fraction of a second now. */
static void test_long_batch_spreads_over_its_seconds(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 1, 4);
    modelstats_loaded(s, 1);
    end_batch(s, 0, 4, 0, 0, 3000000000LL, 0);
    struct modelstats_snapshot snap;
    modelstats_snapshot(s, &snap);
    assert_true(snap.inst[0].busy_s > 2.999 && snap.inst[0].busy_s < 3.001);
    assert_true(snap.inst[0].util_10s >= 0.2 && snap.inst[0].util_10s <= 0.3);
    modelstats_snapshot_free(&snap);
    modelstats_free(s);
}

struct writer {
    struct modelstats *s;
    int thread;
};

static void *write_many(void *arg)
{
    struct writer *w = arg;
    for (int i = 0; i < 100000; i++) {
        modelstats_request(w->s, w->thread, 200, 1000, 10, NULL);
        end_batch(w->s, w->thread, 1, 0, 0, 1000, 0);
    }
    return NULL;
}

/* A batch's time split by rows over its tenants, and of that the job
 * lines' (offline) part: what the usage ledger charges. */
static void test_batch_by_tenant_and_class(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 2, 8);
    struct infer_item a, b, c;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    a.rows = 2;
    a.tenant = 1;
    b.rows = 1;
    b.tenant = 1;
    b.offline = true;
    c.rows = 1;
    c.tenant = 0;
    a.next = &b;
    b.next = &c;
    struct batch bt = {.head = &a, .nitems = 3, .rows = 4};
    modelstats_batch_end(s, 0, NULL, &bt, true, 0, 4000000, 0);   /* 4 ms: 1 ms per row */
    modelstats_batch_end(s, 1, NULL, &bt, true, 0, 4000000, 0);   /* another instance: summed */
    struct modelstats_snapshot o;
    modelstats_snapshot(s, &o);
    assert_int_equal(o.tenant_rows[1], 6);
    assert_int_equal(o.tenant_rows[0], 2);
    assert_true(o.tenant_busy_s[1] > 0.005999 && o.tenant_busy_s[1] < 0.006001);
    assert_true(o.tenant_offline_s[1] > 0.001999 && o.tenant_offline_s[1] < 0.002001);
    assert_true(o.tenant_offline_s[0] == 0);
    modelstats_snapshot_free(&o);
    modelstats_free(s);
}

/* A batch's time counts while it runs: the usage ledger samples every
 * second, and a 3 s batch counted at its end only read as 2 s of idle,
 * then 3 s of busy in one second. Its end adds at least what was seen
 * (the counters never go back); a failed batch or one the watchdog
 * answered (its items gone) is charged by the shares it began with. */
static void test_running_batch_counts_as_it_runs(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 1, 8);
    modelstats_loaded(s, 1);
    struct infer_item a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.rows = 3;
    a.tenant = 2;
    b.rows = 1;
    b.tenant = 5;
    b.offline = true;
    a.next = &b;
    struct batch bt = {.head = &a, .nitems = 2, .rows = 4};
    modelstats_run_begin(s, 0, &bt);
    struct timespec ts = {0, 60 * 1000000};
    nanosleep(&ts, NULL);
    struct modelstats_snapshot o;
    modelstats_snapshot(s, &o);
    double seen = o.inst[0].busy_s;
    assert_true(seen >= 0.059 && seen < 1.0);
    assert_true(o.tenant_busy_s[2] > seen * 0.74 && o.tenant_busy_s[2] < seen * 0.76);
    assert_true(o.tenant_offline_s[5] > seen * 0.24 && o.tenant_offline_s[5] < seen * 0.26);
    assert_true(o.inst[0].busy_offline_s > seen * 0.24 && o.inst[0].busy_offline_s < seen * 0.26);
    struct modelstats_tenant_use use[WORK_TENANTS_MAX];
    assert_int_equal(modelstats_tenant_use(s, use, 1), 1);
    assert_true(use[2].busy_s[0] >= seen * 0.75 - 1e-6 && use[5].busy_s[1] >= seen * 0.25 - 1e-6);
    modelstats_snapshot_free(&o);
    /* It ends, having reported 10 ms of execution (a device timer): the
     * time seen running stays. */
    modelstats_batch_end(s, 0, NULL, &bt, true, 0, 10 * 1000000, 0);
    modelstats_snapshot(s, &o);
    assert_true(o.inst[0].busy_s >= seen);
    assert_true(o.tenant_busy_s[2] >= seen * 0.75 - 1e-6);
    assert_int_equal(o.tenant_rows[2], 3);
    assert_int_equal(o.inst[0].batches, 1);
    double after_first = o.inst[0].busy_s;
    modelstats_snapshot_free(&o);
    /* Begun, then its items answered elsewhere (the watchdog): no batch
     * counted, its time charged by the begin's shares. */
    modelstats_run_begin(s, 0, &bt);
    modelstats_batch_end(s, 0, NULL, NULL, false, 0, 40 * 1000000, 0);
    modelstats_snapshot(s, &o);
    assert_true(o.inst[0].busy_s > after_first + 0.0399);
    assert_int_equal(o.inst[0].batches, 1);
    assert_int_equal(o.tenant_rows[2], 3);
    assert_true(o.tenant_busy_s[2] > (after_first + 0.04) * 0.75 - 0.001);
    modelstats_snapshot_free(&o);
    modelstats_free(s);
}

/* A pool's call (no batch): its time is the tenant's while it runs, by
 * class, and what a reader saw stays once it ends; two at once count
 * twice (each its own time). */
static void test_calls_count_as_they_run(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 2, 1);
    int64_t t0 = now_ns();
    modelstats_call_begin(s, 1, 3, false, t0);
    modelstats_call_begin(s, 1, 3, false, t0);
    modelstats_call_begin(s, 1, 4, true, t0);
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    struct modelstats_tenant_use use[2 * WORK_TENANTS_MAX];
    assert_int_equal(modelstats_tenant_use(s, use, 2), 2);
    struct modelstats_tenant_use *e1 = &use[WORK_TENANTS_MAX];
    double seen = e1[3].busy_s[0];
    assert_true(seen >= 2 * 0.049 && seen < 2.0);
    assert_true(e1[4].busy_s[1] >= 0.049 && e1[4].busy_s[0] == 0);
    assert_true(use[3].busy_s[0] == 0);   /* endpoint 0: nothing */
    modelstats_call_end(s, 1, 3, false, t0);
    modelstats_call_end(s, 1, 3, false, t0);
    modelstats_call_end(s, 1, 4, true, t0);
    modelstats_call(s, 1, 3, false, 70);
    nanosleep(&ts, NULL);
    assert_int_equal(modelstats_tenant_use(s, use, 2), 2);
    assert_true(e1[3].busy_s[0] >= seen && e1[3].busy_s[0] < seen + 0.09);   /* ended: no more */
    assert_int_equal(e1[3].rows[0], 70);
    assert_int_equal(e1[3].requests[0], 1);
    modelstats_free(s);
}

/* A loop backend's batches at its servers (instances 0 and 1): two in
 * flight at once at server 1, one moved to server 0 (a 503 there), their
 * time each tenant's by its rows while they fly, and their rows where
 * the batch ended. */
static void test_flights_count_as_they_fly(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 2, 8);
    struct infer_item a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    a.rows = 3;
    a.tenant = 1;
    b.rows = 1;
    b.tenant = 2;
    b.offline = true;
    a.next = &b;
    struct batch bt = {.head = &a, .nitems = 2, .rows = 4};
    struct modelstats_flight f1, f2;
    modelstats_flight_begin(s, &f1, 1, &bt);
    modelstats_flight_begin(s, &f2, 1, &bt);
    struct timespec ts = {0, 50 * 1000000};
    nanosleep(&ts, NULL);
    struct modelstats_tenant_use use[2 * WORK_TENANTS_MAX];
    assert_int_equal(modelstats_tenant_use(s, use, 2), 2);
    struct modelstats_tenant_use *s1 = &use[WORK_TENANTS_MAX];
    double t1 = s1[1].busy_s[0], t2 = s1[2].busy_s[1];
    assert_true(t1 >= 2 * 0.75 * 0.049 && t1 < 1.0);
    assert_true(t2 >= 2 * 0.25 * 0.049 && t2 < t1);
    assert_true(s1[2].busy_s[0] == 0 && use[1].busy_s[0] == 0);
    /* f1 goes on to server 0: its time at 1 stays there. */
    assert_true(modelstats_flight_end(s, &f1, &bt) >= 49 * 1000000LL);
    modelstats_flight_begin(s, &f1, 0, &bt);
    nanosleep(&ts, NULL);
    assert_int_equal(modelstats_tenant_use(s, use, 2), 2);
    assert_true(s1[1].busy_s[0] >= t1 + 0.75 * 0.049);   /* f2 flies on */
    assert_true(use[1].busy_s[0] >= 0.75 * 0.049);
    double left1 = s1[1].busy_s[0];
    modelstats_batch_end(s, 0, &f1, &bt, true, 0, 1000, 0);
    modelstats_batch_end(s, 0, &f2, &bt, false, 0, 1000, 0);   /* failed: its time, no rows */
    assert_int_equal(f1.instance, -1);
    nanosleep(&ts, NULL);
    assert_int_equal(modelstats_tenant_use(s, use, 2), 2);
    assert_int_equal(use[1].rows[0], 3);
    assert_int_equal(use[2].rows[1], 1);
    assert_int_equal(use[1].requests[0], 1);
    assert_int_equal(s1[1].rows[0], 0);
    assert_int_equal(s1[1].requests[0], 0);
    double ended = s1[1].busy_s[0];
    assert_true(ended >= left1 && ended < left1 + 0.02);   /* nothing in flight there now */
    modelstats_free(s);
}

/* Flights of a batch whose rows do not divide its time evenly (1, 7 and
 * 13 rows), begun and ended in a loop, beside a reader: no tenant's time
 * ever goes back (the usage ledger takes a step back for a reset). */
struct flight_watch {
    struct modelstats *s;
    _Atomic int stop;
    int backwards;
    long reads;
};

static void *watch_flights(void *arg)
{
    struct flight_watch *w = arg;
    double last[3] = {0};
    struct modelstats_tenant_use use[WORK_TENANTS_MAX];
    while (!atomic_load(&w->stop)) {
        modelstats_tenant_use(w->s, use, 1);
        for (int t = 0; t < 3; t++) {
            double v = use[t].busy_s[0] + use[t].busy_s[1];
            w->backwards += v < last[t];
            last[t] = v;
        }
        w->reads++;
    }
    return NULL;
}

static void test_flights_never_go_back(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 1, 32);
    struct flight_watch w = {.s = s};
    pthread_t t;
    pthread_create(&t, NULL, watch_flights, &w);
    struct infer_item it[3];
    memset(it, 0, sizeof it);
    int rows[3] = {1, 7, 13};
    for (int i = 0; i < 3; i++) {
        it[i].rows = rows[i];
        it[i].tenant = i;
        it[i].offline = i == 2;
        it[i].next = i < 2 ? &it[i + 1] : NULL;
    }
    struct batch bt = {.head = &it[0], .nitems = 3, .rows = 21};
    struct modelstats_flight f[3];
    int64_t until = now_ns() + 300 * 1000000LL;
    for (int k = 0; now_ns() < until; k++) {
        modelstats_flight_begin(s, &f[k % 3], 0, &bt);
        if (k >= 2)
            modelstats_batch_end(s, 0, &f[(k + 1) % 3], &bt, k % 2, 0, 1, 0);
    }
    atomic_store(&w.stop, 1);
    pthread_join(t, NULL);
    assert_true(w.reads > 0);
    assert_int_equal(w.backwards, 0);
    modelstats_free(s);
}

struct watcher {
    struct modelstats *s;
    _Atomic int stop;
    int backwards;
};

static void *watch_busy(void *arg)
{
    struct watcher *w = arg;
    double last = 0, last_t = 0;
    struct modelstats_tenant_use use[WORK_TENANTS_MAX];
    while (!atomic_load(&w->stop)) {
        struct modelstats_snapshot o;
        modelstats_snapshot(w->s, &o);
        modelstats_tenant_use(w->s, use, 1);
        w->backwards += o.inst[0].busy_s < last || use[0].busy_s[0] < last_t;
        last = o.inst[0].busy_s;
        last_t = use[0].busy_s[0];
        modelstats_snapshot_free(&o);
    }
    return NULL;
}

/* Readers while a worker begins and ends batches that report less time
 * than they ran (device timers): busy time never goes back. */
static void test_busy_never_goes_back(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 1, 8);
    struct watcher w = {.s = s};
    pthread_t t;
    pthread_create(&t, NULL, watch_busy, &w);
    struct infer_item a;
    memset(&a, 0, sizeof a);
    a.rows = 1;
    struct batch bt = {.head = &a, .nitems = 1, .rows = 1};
    int64_t until = now_ns() + 300 * 1000000LL;
    while (now_ns() < until) {
        modelstats_run_begin(s, 0, &bt);
        for (volatile int k = 0; k < 2000; k++)
            ;
        modelstats_batch_end(s, 0, NULL, &bt, true, 0, 1, 0);
    }
    atomic_store(&w.stop, 1);
    pthread_join(t, NULL);
    assert_int_equal(w.backwards, 0);
    modelstats_free(s);
}

/* The same with a batch of many items of one tenant beside another's:
 * the end added each item's time rounded down, up to (items - 1) ns less
 * than the running batch had shown by the tenant's whole part, so a
 * reader just before the end saw more than after (the usage ledger takes
 * a step back for a reset and charges the whole count again). */
#define MANY_ITEMS 2000
static void test_tenant_time_never_goes_back(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 1, MANY_ITEMS);
    struct watcher w = {.s = s};
    pthread_t t;
    pthread_create(&t, NULL, watch_busy, &w);
    struct infer_item *it = calloc(MANY_ITEMS, sizeof *it);
    for (int i = 0; i < MANY_ITEMS; i++) {
        it[i].rows = 1;
        it[i].tenant = i == MANY_ITEMS - 1;   /* one of tenant 1, the rest tenant 0's */
        it[i].next = i < MANY_ITEMS - 1 ? &it[i + 1] : NULL;
    }
    struct batch bt = {.head = &it[0], .nitems = MANY_ITEMS, .rows = MANY_ITEMS};
    int64_t until = now_ns() + 300 * 1000000LL;
    while (now_ns() < until) {
        modelstats_run_begin(s, 0, &bt);
        for (volatile int k = 0; k < 3000; k++)
            ;
        modelstats_batch_end(s, 0, NULL, &bt, true, 0, 1, 0);
    }
    atomic_store(&w.stop, 1);
    pthread_join(t, NULL);
    assert_int_equal(w.backwards, 0);
    free(it);
    modelstats_free(s);
}

/* Two workers on one shard (a reload: the old copy drains its last
 * batches while the new one runs) with a reader beside them: the reader
 * is never left waiting on an odd run_seq (it waited for good when the
 * two writers' increments crossed), and both writers' time counts. */
static void *drain_writer(void *arg)
{
    struct modelstats *s = arg;
    struct infer_item a;
    memset(&a, 0, sizeof a);
    a.rows = 1;
    struct batch bt = {.head = &a, .nitems = 1, .rows = 1};
    for (int i = 0; i < 20000; i++) {
        modelstats_run_begin(s, 0, &bt);
        modelstats_batch_end(s, 0, NULL, &bt, true, 0, 1000, 0);
    }
    return NULL;
}

static void test_two_copies_write_one_shard(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 1, 8);
    modelstats_loaded(s, 1);
    struct watcher w = {.s = s};
    pthread_t r, t[2];
    pthread_create(&r, NULL, watch_busy, &w);
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, drain_writer, s);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    atomic_store(&w.stop, 1);
    pthread_join(r, NULL);
    struct modelstats_snapshot o;
    modelstats_snapshot(s, &o);   /* returns: run_seq is even */
    assert_int_equal(o.inst[0].batches, 40000);
    assert_true(o.inst[0].busy_s >= 40000 * 1e-6);
    modelstats_snapshot_free(&o);
    modelstats_free(s);
}

static double held_after(struct modelstats *s, int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
    struct modelstats_snapshot o;
    modelstats_snapshot(s, &o);
    double h = o.inst[0].held_s;
    modelstats_snapshot_free(&o);
    return h;
}

/* Held time runs while some copy is loaded, stops while none is, and goes
 * on from where it was (it restarted from 0 at every load, so
 * device_idle_seconds_total fell at each reload); idle never shows less
 * than it showed, even when a batch's time outruns the held time. */
static void test_held_time_over_loads(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 1, 8);
    assert_true(held_after(s, 1) == 0);
    modelstats_loaded(s, 1);
    double h1 = held_after(s, 30);
    assert_true(h1 >= 0.029 && h1 < 1.0);
    modelstats_unloaded(s, 1);
    double h2 = held_after(s, 30);   /* nothing held: stopped */
    assert_true(h2 >= h1 && h2 < h1 + 0.01);
    modelstats_loaded(s, 1);            /* a reload: the new copy, then the old one goes */
    modelstats_loaded(s, 1);
    modelstats_unloaded(s, 1);
    double h3 = held_after(s, 30);
    assert_true(h3 >= h2 + 0.029 && h3 < h2 + 1.0);
    struct modelstats_snapshot o;
    modelstats_snapshot(s, &o);
    double idle = o.inst[0].idle_s;
    assert_true(idle > 0.05);
    modelstats_snapshot_free(&o);
    /* A batch that ran 10 s by its own clock (two copies' batches at once
     * can outrun the wall clock): busy passes held, idle stays. */
    struct infer_item a;
    memset(&a, 0, sizeof a);
    a.rows = 1;
    struct batch bt = {.head = &a, .nitems = 1, .rows = 1};
    modelstats_batch_end(s, 0, NULL, &bt, true, 0, 10LL * 1000000000, 0);
    modelstats_snapshot(s, &o);
    assert_true(o.inst[0].idle_s >= idle);
    modelstats_snapshot_free(&o);
    modelstats_unloaded(s, 1);
    modelstats_unloaded(s, 1);          /* one too many: held stays stopped, not negative */
    assert_true(held_after(s, 1) >= h3);
    modelstats_free(s);
}

/* A reload that raised max_batch_size replaced the model's statistics:
 * /metrics and the stats endpoint started again from zero (40 requests
 * then read 0, then 10; the idle time went down) and the draining copy's
 * batches, written to the old object, were never read. Every reader now
 * sums the newest object and those it replaced, and the held clock goes
 * on in the newest. */
static void test_a_replacement_goes_on_from_the_old_counters(void **state)
{
    (void)state;
    struct modelstats *old = modelstats_new(1, 1, 4);
    modelstats_loaded(old, 1);
    for (int i = 0; i < 40; i++)
        modelstats_request(old, 0, 200, 1000, 10, NULL);
    end_batch(old, 0, 4, 0, 0, 2000000, 0);
    struct modelstats_snapshot o;
    double held0 = held_after(old, 20);
    modelstats_snapshot(old, &o);
    double idle0 = o.inst[0].idle_s;
    modelstats_snapshot_free(&o);
    struct modelstats *s = modelstats_new(1, 2, 8);   /* more rows, another instance */
    modelstats_retire(s, old);
    assert_true(modelstats_continues(s, old));
    struct modelstats *other = modelstats_new(1, 1, 1);   /* a new model's: from zero */
    assert_false(modelstats_continues(s, other));
    modelstats_free(other);
    modelstats_loaded(s, 2);                 /* the new copy, of two instances */
    end_batch(old, 0, 3, 0, 0, 1000000, 0);   /* the old copy drains its last batch */
    modelstats_unloaded(old, 1);          /* and goes: the clock is s's, still held */
    for (int i = 0; i < 10; i++)
        modelstats_request(s, 0, 200, 1000, 10, NULL);
    end_batch(s, 0, 8, 0, 0, 1000000, 0);
    end_batch(s, 1, 6, 0, 0, 1000000, 0);
    struct modelstats *readers[] = {s, old};   /* whichever a copy points at */
    for (int k = 0; k < 2; k++) {
        modelstats_snapshot(readers[k], &o);
        assert_int_equal(o.success_count, 50);
        uint64_t answered = 0;
        for (int c = 0; c < MODELSTATS_CODES; c++)
            answered += o.codes[c];
        assert_int_equal(answered, 50);
        assert_int_equal(o.max_batch, 8);
        assert_int_equal(o.ninstances, 2);
        assert_int_equal(o.inst[0].rows, 4 + 3 + 8);
        assert_int_equal(o.inst[1].rows, 6);
        assert_int_equal(o.batch_count_by_size[4], 1);
        assert_int_equal(o.batch_count_by_size[3], 1);
        assert_int_equal(o.batch_count_by_size[8], 1);
        assert_int_equal(o.batch_count_by_size[6], 1);
        assert_true(o.inst[0].busy_s > 0.00399 && o.inst[0].busy_s < 0.00401);
        assert_true(o.inst[0].held_s >= held0);
        assert_true(o.inst[0].idle_s >= idle0);
        assert_int_equal(o.tenant_rows[0], 21);
        modelstats_snapshot_free(&o);
        struct modelstats_tenant_use u[2 * WORK_TENANTS_MAX];
        assert_int_equal(modelstats_tenant_use(readers[k], u, 2), 2);
        assert_int_equal(u[0].rows[0], 15);
        assert_int_equal(u[WORK_TENANTS_MAX].rows[0], 6);
    }
    double h1 = held_after(s, 20);
    assert_true(h1 >= held0 + 0.019);   /* the new copy holds it: the clock runs */
    modelstats_snapshot(s, &o);         /* instance 1 is held since the new copy only */
    assert_true(o.inst[1].held_s > 0.019 && o.inst[1].held_s < o.inst[0].held_s - held0 + 0.01);
    modelstats_snapshot_free(&o);
    /* A copy of one instance in its place: instance 1's clock stops (one
     * clock for the model charged it the time it did not exist). */
    modelstats_loaded(s, 1);
    modelstats_unloaded(s, 2);
    modelstats_snapshot(s, &o);
    double gone = o.inst[1].held_s, kept = o.inst[0].held_s;
    modelstats_snapshot_free(&o);
    struct timespec ts = {0, 30 * 1000000L};
    nanosleep(&ts, NULL);
    modelstats_snapshot(s, &o);
    assert_true(o.inst[1].held_s == gone);
    assert_true(o.inst[0].held_s >= kept + 0.029);
    modelstats_snapshot_free(&o);
    double h3 = held_after(s, 1);
    modelstats_unloaded(s, 1);
    double h2 = held_after(old, 20);    /* read through the old: stopped */
    assert_true(h2 >= h3 && h2 < h3 + 0.01);
    modelstats_free(s);                 /* frees old with it */
}

static void test_concurrent_writers_lose_nothing(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(4, 4, 4);
    pthread_t t[4];
    struct writer w[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (struct writer){s, i};
        pthread_create(&t[i], NULL, write_many, &w[i]);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    struct modelstats_snapshot snap;
    modelstats_snapshot(s, &snap);
    assert_int_equal(snap.request.count, 400000);
    assert_int_equal(snap.compute.count, 400000);
    assert_int_equal(snap.codes[0], 400000);
    modelstats_snapshot_free(&snap);
    modelstats_free(s);
}

struct offline_writer {
    struct modelstats *s;
    atomic_int stop;
};

static void *write_offline(void *arg)
{
    struct offline_writer *w = arg;
    while (!atomic_load(&w->stop))
        modelstats_call(w->s, 0, 1, true, 1000);   /* a Batch API line's tokens */
    return NULL;
}

/* Tenant 1 sends job lines only, while the ledger reads each tenant's use:
 * its online rows stay 0 and its offline rows never go back. Read as a
 * total less its offline part, the two read apart, online rows came out
 * one write high, then 0 again: the ledger took the step down for a
 * counter reset and charged every row since the start once more. */
static void test_tenant_rows_by_class_never_go_back(void **state)
{
    (void)state;
    struct modelstats *s = modelstats_new(1, 1, 8);
    struct offline_writer w = {.s = s};
    pthread_t t;
    pthread_create(&t, NULL, write_offline, &w);
    struct modelstats_tenant_use use[WORK_TENANTS_MAX];
    uint64_t prev = 0;
    int64_t end = now_ns() + 300 * 1000000LL;
    for (int i = 0; i < 1000000 && now_ns() < end; i++) {
        modelstats_tenant_use(s, use, 1);
        assert_int_equal(use[1].rows[0], 0);
        assert_true(use[1].rows[1] >= prev);
        prev = use[1].rows[1];
    }
    atomic_store(&w.stop, 1);
    pthread_join(t, NULL);
    assert_true(prev > 0);
    modelstats_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sums_across_shards),
        cmocka_unit_test(test_fill_keeps_each_batch_cap),
        cmocka_unit_test(test_buckets_and_quantiles),
        cmocka_unit_test(test_long_batch_spreads_over_its_seconds),
        cmocka_unit_test(test_triton_counts),
        cmocka_unit_test(test_batch_by_tenant_and_class),
        cmocka_unit_test(test_running_batch_counts_as_it_runs),
        cmocka_unit_test(test_calls_count_as_they_run),
        cmocka_unit_test(test_flights_count_as_they_fly),
        cmocka_unit_test(test_flights_never_go_back),
        cmocka_unit_test(test_busy_never_goes_back),
        cmocka_unit_test(test_tenant_time_never_goes_back),
        cmocka_unit_test(test_concurrent_writers_lose_nothing),
        cmocka_unit_test(test_two_copies_write_one_shard),
        cmocka_unit_test(test_held_time_over_loads),
        cmocka_unit_test(test_a_replacement_goes_on_from_the_old_counters),
        cmocka_unit_test(test_tenant_rows_by_class_never_go_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
