/* test_batcher.c - the threaded batcher: a worker blocked in batcher_next
 * gets what is submitted; batcher_try_next never blocks and names when to
 * ask again; the waker rings on submit; cancel, expiry and close complete
 * each item exactly once with the right status. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "batcher/batcher.h"
#include "common/clock.h"

static _Atomic int completed;

static void on_complete(struct infer_item *it)
{
    (void)it;
    atomic_fetch_add(&completed, 1);
}

static struct model_batching cfg(int max_batch, int64_t delay_us)
{
    struct model_batching b;
    memset(&b, 0, sizeof b);
    b.max_batch_size = max_batch;
    b.max_queue_delay_us = delay_us;
    b.max_queue_size = 100;
    b.default_priority = 1;
    b.priority_aging_ms = 1000;
    strcpy(b.policy, "deadline");
    return b;
}

static void item_init(struct infer_item *it, int rows)
{
    memset(it, 0, sizeof *it);
    it->rows = rows;
    it->t_arrival_ns = now_ns();
    it->complete = on_complete;
}

static void test_try_next_and_waker(void **state)
{
    (void)state;
    struct error err = {0};
    struct model_batching c = cfg(4, 50000);   /* 50 ms delay */
    struct batcher *b = batcher_new("m", &c, 1, &err);
    assert_non_null(b);
    struct batch out;
    int64_t wake;
    assert_int_equal(batcher_try_next(b, 0, &out, &wake), 0);
    assert_true(wake == POLICY_NEVER);
    struct infer_item it[5];
    item_init(&it[0], 1);
    assert_int_equal(batcher_submit(b, &it[0], &err), 0);
    assert_int_equal(batcher_try_next(b, 0, &out, &wake), 0);
    assert_true(wake > now_ns() && wake <= it[0].t_arrival_ns + 50000000);
    for (int i = 1; i < 4; i++) {
        item_init(&it[i], 1);
        assert_int_equal(batcher_submit(b, &it[i], &err), 0);
    }
    /* Full: due at once, without waiting for the delay. */
    assert_int_equal(batcher_try_next(b, 0, &out, &wake), 1);
    assert_int_equal(out.rows, 4);
    assert_int_equal(out.nitems, 4);
    batcher_close(b);
    assert_int_equal(batcher_try_next(b, 0, &out, &wake), -1);
    batcher_free(b);
}

static void ring(void *arg) { atomic_fetch_add((_Atomic int *)arg, 1); }

static void test_waker_rings_on_submit(void **state)
{
    (void)state;
    struct error err = {0};
    struct model_batching c = cfg(8, 1000);
    struct batcher *b = batcher_new("m", &c, 1, &err);
    _Atomic int rings = 0;
    batcher_set_waker(b, ring, &rings);
    struct infer_item it[3];
    for (int i = 0; i < 3; i++) {
        item_init(&it[i], 1);
        assert_int_equal(batcher_submit(b, &it[i], &err), 0);
    }
    assert_int_equal(atomic_load(&rings), 3);
    atomic_store(&completed, 0);
    batcher_close(b);   /* queued items complete with BG_ESHUTDOWN */
    assert_int_equal(atomic_load(&completed), 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(it[i].status, BG_ESHUTDOWN);
    batcher_free(b);
}

struct worker {
    struct batcher *b;
    int batches, rows;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct batch out;
    while (batcher_next(w->b, 0, &out) == 0) {
        w->batches++;
        w->rows += out.rows;
        for (struct infer_item *it = out.head, *n; it; it = n) {
            n = it->next;
            work_complete(it, 0, NULL);
        }
    }
    return NULL;
}

static void test_blocking_worker_cancel_and_early_refusal(void **state)
{
    (void)state;
    struct error err = {0};
    struct model_batching c = cfg(4, 1000);
    struct batcher *b = batcher_new("m", &c, 1, &err);
    /* The latency model: a batch costs 20 ms. */
    batcher_seed(b, 0, 1, 0, 0, 20000000);
    batcher_seed(b, 0, 4, 0, 0, 20000000);
    atomic_store(&completed, 0);
    struct infer_item late, doomed, kept, gone;
    /* A 5 ms budget cannot be met by a 20 ms batch: refused at once. */
    item_init(&late, 1);
    late.deadline_ns = late.t_arrival_ns + 5000000;
    assert_int_equal(batcher_submit(b, &late, &err), -BG_EDEADLINE);
    /* Cancelled while queued: completes with BG_ECANCELLED, never computed. */
    item_init(&gone, 1);
    assert_int_equal(batcher_submit(b, &gone, &err), 0);
    batcher_cancel(b, &gone);
    assert_int_equal(gone.status, BG_ECANCELLED);
    struct worker w = {b, 0, 0};
    pthread_t t;
    pthread_create(&t, NULL, worker_main, &w);
    item_init(&kept, 2);
    assert_int_equal(batcher_submit(b, &kept, &err), 0);
    /* 300 ms budget, admitted; it is taken long before it could expire
     * (with 30 ms, a worker thread not scheduled for 10 ms on a loaded
     * 2-core machine let it expire now and then). */
    item_init(&doomed, 1);
    doomed.deadline_ns = doomed.t_arrival_ns + 300000000;
    assert_int_equal(batcher_submit(b, &doomed, &err), 0);
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    batcher_close(b);
    pthread_join(t, NULL);
    assert_int_equal(w.rows, 3);   /* kept + doomed; never the cancelled one */
    assert_int_equal(atomic_load(&completed), 3);   /* gone, kept, doomed: once each */
    batcher_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_try_next_and_waker),
        cmocka_unit_test(test_waker_rings_on_submit),
        cmocka_unit_test(test_blocking_worker_cancel_and_early_refusal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
