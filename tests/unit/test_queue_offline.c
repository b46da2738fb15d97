/* test_queue_offline.c - the offline class of the queue (batcher/queue.h)
 * on a virtual clock: offline rows run alone when no online request is
 * queued, in the gap before the online work must start, or in the empty
 * rows of an online batch that they do not make late; they never count
 * against max_queue_size and aging never promotes them. And one rule of the
 * online side found by these traces: a waiting queue never names a wake
 * instant already past. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "batcher/queue.h"

#define MS 1000000LL

static struct latmodel lat;           /* exec(rows) = 1 ms + 0.1 ms x rows */
static struct infer_item items[64];

static void setup_queue(struct bqueue *q, int max_queue, int64_t delay_ns, int64_t aging_ns)
{
    struct bqueue_config c;
    memset(&c, 0, sizeof c);
    c.max_batch_size = 8;
    c.max_queue_delay_ns = delay_ns;
    c.max_queue_size = max_queue;
    c.default_priority = 1;
    c.aging_ns = aging_ns;
    c.kind = POLICY_DEADLINE;
    assert_int_equal(bqueue_init(q, &c), 0);
    latmodel_init(&lat);
    lat.a_ns = 1.0 * MS;
    lat.b_ns = 0.1 * MS;
    memset(items, 0, sizeof items);
}

static struct infer_item *push(struct bqueue *q, int i, bool offline, int64_t at, int64_t dl)
{
    struct infer_item *it = &items[i];
    it->rows = 1;
    it->offline = offline;
    it->t_arrival_ns = at;
    it->deadline_ns = dl;
    struct error err = {0};
    assert_int_equal(bqueue_push(q, it, at, &lat, &err), 0);
    return it;
}

static int count_offline(const struct batch *b)
{
    int n = 0;
    for (const struct infer_item *it = b->head; it; it = it->next)
        n += it->offline;
    return n;
}

static void test_aged_request_wakes_at_the_delay_not_in_the_past(void **state)
{
    (void)state;
    struct bqueue q;
    setup_queue(&q, 100, 10 * MS, 1 * MS);   /* aging 1 ms, well below the 10 ms delay */
    items[0].priority = 2;
    items[1].priority = 1;
    push(&q, 0, false, 0, 0);
    push(&q, 1, false, MS / 2, 0);
    struct batch b;
    int64_t wake;
    /* At 2 ms the low-priority request has aged and leads; two rows of
     * eight wait for the delay: the worker sleeps until 10 ms, not until
     * the aging instant of 1 ms, which has passed. */
    assert_int_equal(bqueue_take(&q, 2 * MS, &lat, &b, &wake), 0);
    assert_true(wake > 2 * MS);
    assert_int_equal(wake, 10 * MS);
    assert_int_equal(bqueue_take(&q, 10 * MS, &lat, &b, &wake), 1);
    assert_ptr_equal(b.head, &items[0]);   /* the aged one first */
    bqueue_free(&q);
}

static void test_offline_alone_takes_full_batches(void **state)
{
    (void)state;
    struct bqueue q;
    setup_queue(&q, 100, 10 * MS, 0);
    for (int i = 0; i < 10; i++)
        push(&q, i, true, 0, 0);
    struct batch b;
    int64_t wake;
    assert_int_equal(bqueue_take(&q, 0, &lat, &b, &wake), 1);
    assert_int_equal(b.rows, 8);
    assert_int_equal(count_offline(&b), 8);
    assert_ptr_equal(b.head, &items[0]);   /* FIFO */
    assert_int_equal(bqueue_take(&q, 0, &lat, &b, &wake), 1);
    assert_int_equal(b.rows, 2);
    assert_int_equal(bqueue_take(&q, 0, &lat, &b, &wake), 0);
    assert_int_equal(q.noff, 0);
    bqueue_free(&q);
}

static void test_offline_outside_max_queue_size(void **state)
{
    (void)state;
    struct bqueue q;
    setup_queue(&q, 2, 10 * MS, 0);
    for (int i = 0; i < 5; i++)
        push(&q, i, true, 0, 0);
    push(&q, 5, false, 0, 0);
    push(&q, 6, false, 0, 0);
    struct error err = {0};
    items[7].rows = 1;
    assert_int_equal(bqueue_push(&q, &items[7], 0, &lat, &err), -BG_EQUEUEFULL);
    bqueue_free(&q);
}

/* The online request must start by 2.5 - exec(1) = 1.4 ms: only an offline
 * batch that ends by then may go first (1 + 0.1 k <= 1.4: k = 4 rows). */
static void test_offline_batch_ends_before_online_must_start(void **state)
{
    (void)state;
    struct bqueue q;
    setup_queue(&q, 100, 10 * MS, 0);
    for (int i = 0; i < 10; i++)
        push(&q, i, true, 0, 0);
    push(&q, 20, false, 0, 25 * MS / 10);
    struct batch b;
    int64_t wake;
    assert_int_equal(bqueue_take(&q, 0, &lat, &b, &wake), 1);
    assert_int_equal(b.rows, 4);
    assert_int_equal(count_offline(&b), 4);
    /* At 1.4 ms the online request goes, alone: one more row would end past
     * its deadline. */
    assert_int_equal(bqueue_take(&q, 14 * MS / 10, &lat, &b, &wake), 1);
    assert_ptr_equal(b.head, &items[20]);
    assert_int_equal(b.rows, 1);
    assert_int_equal(q.noff, 6);
    bqueue_free(&q);
}

/* A batch cut at max_queue_delay (10 ms) with a member due at 11.5 ms:
 * 10 + 1 + 0.1 x rows <= 11.5 lets 4 offline rows join it, not more. */
static void test_offline_fills_online_batch_within_deadlines(void **state)
{
    (void)state;
    struct bqueue q;
    setup_queue(&q, 100, 10 * MS, 0);
    push(&q, 20, false, 0, 115 * MS / 10);
    /* Offline rows queued later than the online one arrived, so none ran
     * in the gap before (that is the previous test's case). */
    for (int i = 0; i < 10; i++)
        push(&q, i, true, 0, 0);
    struct batch b;
    int64_t wake;
    assert_int_equal(bqueue_take(&q, 10 * MS, &lat, &b, &wake), 1);
    assert_ptr_equal(b.head, &items[20]);
    assert_int_equal(b.rows, 5);
    assert_int_equal(count_offline(&b), 4);
    assert_true(b.head->t_planned_ns == 10 * MS + latmodel_predict(&lat, 5));
    assert_true(b.head->t_planned_ns <= b.head->deadline_ns);
    /* Without a deadline the empty rows all fill. */
    push(&q, 21, false, 20 * MS, 0);
    assert_int_equal(bqueue_take(&q, 30 * MS, &lat, &b, &wake), 1);
    assert_int_equal(b.rows, 7);   /* 1 online + the 6 offline left */
    bqueue_free(&q);
}

/* Offline rows that waited 10 s are not aged ahead of an online request
 * that must start now. */
static void test_aging_never_promotes_offline(void **state)
{
    (void)state;
    struct bqueue q;
    setup_queue(&q, 100, 10 * MS, 1 * MS);
    push(&q, 0, true, 0, 0);
    int64_t now = 10000 * MS;
    push(&q, 20, false, now, now + 11 * MS / 10);
    struct batch b;
    int64_t wake;
    assert_int_equal(bqueue_take(&q, now, &lat, &b, &wake), 1);
    assert_ptr_equal(b.head, &items[20]);
    assert_int_equal(count_offline(&b), 0);
    /* Then the device is free and the offline row runs. */
    assert_int_equal(bqueue_take(&q, now + 2 * MS, &lat, &b, &wake), 1);
    assert_ptr_equal(b.head, &items[0]);
    bqueue_free(&q);
}

static void test_drain_and_remove_offline(void **state)
{
    (void)state;
    struct bqueue q;
    setup_queue(&q, 100, 10 * MS, 0);
    push(&q, 0, true, 0, 0);
    push(&q, 1, true, 0, 0);
    push(&q, 2, false, 0, 0);
    bqueue_remove(&q, &items[0]);
    assert_false(items[0].queued);
    assert_int_equal(q.noff, 1);
    struct infer_item *left = bqueue_drain(&q);
    int n = 0;
    for (; left; left = left->next)
        n++;
    assert_int_equal(n, 2);
    assert_int_equal(q.n + q.noff, 0);
    bqueue_free(&q);
}

/* ---- seeded traces ---- */

static uint64_t rng_state;
static uint64_t rng_next(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#define TRACE_ITEMS 48

/* One instance on a virtual clock, online arrivals (some with deadlines)
 * and offline rows mixed at random. Whatever the trace: every offline item
 * is handed out exactly once and in FIFO order; an offline-only batch taken
 * while online work waits ends before every waiting request's deadline less
 * the execution of the online rows waiting; a batch carrying offline rows
 * with online members ends within each member's deadline; online admission
 * never sees the offline rows. */
static void test_seeded_traces(void **state)
{
    (void)state;
    static struct infer_item tr[TRACE_ITEMS];
    int gaps = 0, fills = 0;   /* the two cases below were met, not only passed */
    for (uint64_t seed = 1; seed <= 2000; seed++) {
        rng_state = seed * 0x9E3779B97F4A7C15ull;
        struct bqueue q;
        setup_queue(&q, 1000, (int64_t)(rng_next() % 5 + 1) * MS, (int64_t)(rng_next() % 2) * MS);
        memset(tr, 0, sizeof tr);
        int64_t at[TRACE_ITEMS];
        int64_t t = 0;
        for (int i = 0; i < TRACE_ITEMS; i++) {
            t += (int64_t)(rng_next() % (2 * MS));
            at[i] = t;
            tr[i].rows = 1 + (int)(rng_next() % 3);
            tr[i].offline = rng_next() % 2;
            tr[i].t_arrival_ns = t;
            if (!tr[i].offline && rng_next() % 3)
                tr[i].deadline_ns = t + 3 * MS + (int64_t)(rng_next() % (20 * MS));
        }
        int next = 0, next_off_seen = 0, handed[TRACE_ITEMS] = {0};
        int off_order[TRACE_ITEMS], noff = 0;
        for (int i = 0; i < TRACE_ITEMS; i++)
            if (tr[i].offline)
                off_order[noff++] = i;
        int64_t now = 0, busy_until = 0;
        for (int steps = 0; steps < 100000 && (next < TRACE_ITEMS || q.n + q.noff > 0); steps++) {
            while (next < TRACE_ITEMS && at[next] <= now) {
                struct error err = {0};
                int rc = bqueue_push(&q, &tr[next], now, &lat, &err);
                assert_true(rc == 0 || (rc == -BG_EDEADLINE && !tr[next].offline));
                next++;
            }
            struct infer_item *expired;
            bqueue_expire(&q, now, &lat, &expired);
            for (; expired; expired = expired->next)
                assert_false(expired->offline);
            int64_t wake = POLICY_NEVER;
            struct batch b;
            if (now >= busy_until && bqueue_take(&q, now, &lat, &b, &wake)) {
                int64_t end = now + latmodel_predict(&lat, b.rows);
                int online = 0;
                for (struct infer_item *it = b.head; it; it = it->next) {
                    int i = (int)(it - tr);
                    assert_int_equal(handed[i]++, 0);
                    if (it->offline) {
                        assert_int_equal(off_order[next_off_seen++], i);
                    } else {
                        online++;
                    }
                }
                assert_true(b.rows <= 8);
                if (online == 0 && q.n > 0) {
                    gaps++;
                    /* Every online request still waiting can still start in time. */
                    int rows = 0;
                    struct list *p;
                    list_foreach(p, &q.svc) rows += list_data(p, struct infer_item, q_svc)->rows;
                    if (rows > 8)
                        rows = 8;
                    list_foreach(p, &q.dl) {
                        const struct infer_item *w = list_data(p, struct infer_item, q_dl);
                        assert_true(end <= w->deadline_ns - latmodel_predict(&lat, rows));
                    }
                }
                fills += online > 0 && online < b.nitems;
                if (online > 0 && online < b.nitems)
                    for (struct infer_item *it = b.head; it; it = it->next)
                        if (!it->offline && it->deadline_ns)
                            assert_true(end <= it->deadline_ns);
                busy_until = end;
                continue;
            }
            /* Advance to the next event: an arrival, the end of the batch,
             * or the policy's next decision. */
            int64_t nx = next < TRACE_ITEMS ? at[next] : POLICY_NEVER;
            if (busy_until > now && busy_until < nx)
                nx = busy_until;
            if (now >= busy_until && wake < nx)
                nx = wake;
            if (next >= TRACE_ITEMS && q.n + q.noff == 0)
                break;   /* the last arrivals were refused or expired */
            assert_true(nx != POLICY_NEVER);
            /* With aging on, bqueue_take can name an aging instant already
             * past as its wake while the policy still waits (a decision
             * point that is no longer ahead): step on by 100 us then. */
            now = nx > now ? nx : now + 100000;
        }
        assert_int_equal(next_off_seen, noff);
        assert_int_equal(q.n + q.noff, 0);
        bqueue_free(&q);
    }
    assert_true(gaps > 100);
    assert_true(fills > 100);
}

/* The deadline policy holds a lone request until its latest start; at that
 * instant it is still servable, not expired (found by test_sim_offline: a
 * budget shorter than max_queue_delay used to end in 504). */
static void test_lone_request_at_its_latest_start_is_served(void **state)
{
    (void)state;
    struct bqueue q;
    setup_queue(&q, 16, 10 * MS, 0);
    push(&q, 0, false, 0, 5 * MS);
    struct batch b = {0};
    int64_t wake = 0;
    assert_int_equal(bqueue_take(&q, 0, &lat, &b, &wake), 0);
    int64_t latest = 5 * MS - latmodel_predict(&lat, 1);
    assert_int_equal(wake, latest);
    struct infer_item *expired = NULL;
    int64_t next = bqueue_expire(&q, wake, &lat, &expired);
    assert_null(expired);
    assert_int_equal(next, latest + 1);   /* hopeless only once its latest start passed */
    assert_int_equal(bqueue_take(&q, wake, &lat, &b, &wake), 1);
    assert_int_equal(b.nitems, 1);
    bqueue_free(&q);
}

/* A request that expires after the ranking held its tenant back since it
 * came is marked held (the tenant's refusal, 429); one that came after the
 * last hold, or of a tenant never held, is not (504). */
static void test_expired_after_a_hold_is_marked_held(void **state)
{
    (void)state;
    struct bqueue q;
    setup_queue(&q, 16, 0, 0);
    items[0].tenant = 1;
    struct infer_item *a = push(&q, 0, false, 0, 5 * MS);
    push(&q, 1, false, 0, 5 * MS);   /* tenant 0, never held */
    /* Tenant 1 has work and is left out of the ranking at 1 ms. */
    bool has[WORK_TENANTS_MAX] = {[0] = true, [1] = true};
    q.rank[0] = 0;
    q.nrank = 1;
    bqueue_note_held(&q, has, 1 * MS);
    items[2].tenant = 1;
    push(&q, 2, false, 2 * MS, 6 * MS);   /* tenant 1, came after the hold */
    struct infer_item *expired = NULL;
    bqueue_expire(&q, 10 * MS, &lat, &expired);
    int n = 0;
    for (struct infer_item *it = expired; it; it = it->next, n++)
        assert_int_equal(it->held, it == a);
    assert_int_equal(n, 3);
    bqueue_free(&q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lone_request_at_its_latest_start_is_served),
        cmocka_unit_test(test_aged_request_wakes_at_the_delay_not_in_the_past),
        cmocka_unit_test(test_offline_alone_takes_full_batches),
        cmocka_unit_test(test_offline_outside_max_queue_size),
        cmocka_unit_test(test_offline_batch_ends_before_online_must_start),
        cmocka_unit_test(test_offline_fills_online_batch_within_deadlines),
        cmocka_unit_test(test_aging_never_promotes_offline),
        cmocka_unit_test(test_drain_and_remove_offline),
        cmocka_unit_test(test_seeded_traces),
        cmocka_unit_test(test_expired_after_a_hold_is_marked_held),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
