/* test_work.c - the unit of work: every item ends exactly once, whoever
 * tries to end it and however often; batches end each item with its own
 * status; offline rows are counted. The race a worker and the watchdog run
 * (both ending one batch) is run for real with threads. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "batcher/work.h"
#include "common/error.h"
#include "common/log.h"

static _Atomic int completions[64];

static void on_complete(struct infer_item *it) { atomic_fetch_add(&completions[it->rows], 1); }

static void item_init(struct infer_item *it, int id)
{
    memset(it, 0, sizeof *it);
    it->rows = id;   /* the id, for on_complete */
    it->complete = on_complete;
}

static void test_complete_once(void **state)
{
    (void)state;
    struct infer_item it;
    item_init(&it, 1);
    atomic_store(&completions[1], 0);
    assert_int_equal(work_complete(&it, BG_EDEADLINE, "late"), 0);
    assert_int_equal(it.status, BG_EDEADLINE);
    assert_string_equal(it.error, "late");
    /* A second end is refused and does not reach the submitter, nor
     * overwrite what the first one said. */
    assert_int_equal(work_complete(&it, 0, "fine"), -1);
    assert_int_equal(atomic_load(&completions[1]), 1);
    assert_int_equal(it.status, BG_EDEADLINE);
    assert_string_equal(it.error, "late");
}

static void test_batch_complete_keeps_each_status(void **state)
{
    (void)state;
    struct infer_item a, b, c;
    item_init(&a, 2);
    item_init(&b, 3);
    item_init(&c, 4);
    a.next = &b;
    b.next = &c;
    b.offline = true;
    b.status = BG_EBACKEND;
    strcpy(b.error, "bad row");
    struct batch bt = {.head = &a, .nitems = 3, .rows = 9};
    assert_int_equal(batch_offline_rows(&bt), 3);
    for (int i = 2; i <= 4; i++)
        atomic_store(&completions[i], 0);
    batch_complete(&bt);
    assert_null(bt.head);
    assert_int_equal(a.status, 0);
    assert_int_equal(b.status, BG_EBACKEND);
    assert_string_equal(b.error, "bad row");
    for (int i = 2; i <= 4; i++)
        assert_int_equal(atomic_load(&completions[i]), 1);
}

static void test_complete_list(void **state)
{
    (void)state;
    struct infer_item it[3];
    for (int i = 0; i < 3; i++) {
        item_init(&it[i], 5 + i);
        atomic_store(&completions[5 + i], 0);
        it[i].next = i < 2 ? &it[i + 1] : NULL;
    }
    work_complete_list(&it[0], BG_ESHUTDOWN, "bye");
    for (int i = 0; i < 3; i++) {
        assert_int_equal(atomic_load(&completions[5 + i]), 1);
        assert_int_equal(it[i].status, BG_ESHUTDOWN);
        assert_null(it[i].next);
    }
}

/* Two threads end the same items at once, as a worker finishing and the
 * watchdog abandoning would if nothing arbitrated: each item still ends
 * exactly once. */
#define RACE_ITEMS 32
#define RACE_ROUNDS 200

static struct infer_item race_items[RACE_ITEMS];
static _Atomic int race_go;

static void on_race_complete(struct infer_item *it)
{
    atomic_fetch_add(&completions[(it - race_items) + 16], 1);
}

static void *race_main(void *arg)
{
    int status = (int)(intptr_t)arg;
    while (!atomic_load(&race_go))
        ;
    for (int i = 0; i < RACE_ITEMS; i++)
        work_complete(&race_items[i], status, NULL);
    return NULL;
}

static void test_complete_race(void **state)
{
    (void)state;
    /* Every refused second end logs an error: thousands here, on purpose. */
    char msg[128];
    struct log *quiet = log_open("/dev/null", LOG_ERROR, msg, (int)sizeof msg);
    struct log *was = log_default();
    if (quiet)
        log_set_default(quiet);
    for (int round = 0; round < RACE_ROUNDS; round++) {
        for (int i = 0; i < RACE_ITEMS; i++) {
            memset(&race_items[i], 0, sizeof race_items[i]);
            race_items[i].complete = on_race_complete;
            atomic_store(&completions[i + 16], 0);
        }
        atomic_store(&race_go, 0);
        pthread_t t1, t2;
        assert_int_equal(pthread_create(&t1, NULL, race_main, (void *)(intptr_t)0), 0);
        assert_int_equal(pthread_create(&t2, NULL, race_main, (void *)(intptr_t)BG_EDEADLINE), 0);
        atomic_store(&race_go, 1);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        for (int i = 0; i < RACE_ITEMS; i++)
            assert_int_equal(atomic_load(&completions[i + 16]), 1);
    }
    log_set_default(was);
    log_close(quiet);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_complete_once),
        cmocka_unit_test(test_batch_complete_keeps_each_status),
        cmocka_unit_test(test_complete_list),
        cmocka_unit_test(test_complete_race),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
