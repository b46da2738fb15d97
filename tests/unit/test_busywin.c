/* test_busywin.c - busy windows on a clock of the test's own: an interval
 * counts in every second it covers, the window slides by whole seconds,
 * overlapping intervals (several instances) add up, and readers run beside
 * a writer without a lock. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/busywin.h"

#define S 1000000000LL
#define MS 1000000LL
/* Far from zero, as a monotonic clock is. */
#define T0 (1000 * S)

static void test_interval_counts_in_each_second_it_covers(void **state)
{
    (void)state;
    struct busywin w;
    memset(&w, 0, sizeof w);
    /* A 3-second batch from 1000.5 s to 1003.5 s. */
    busywin_add(&w, T0 + S / 2, T0 + 3 * S + S / 2);
    assert_int_equal(busywin_total_ns(&w), 3 * S);
    /* Second by second: half of 1000, all of 1001 and 1002, half of 1003. */
    assert_int_equal(busywin_recent_ns(&w, T0 + 1 * S + 1, 1), S / 2);
    assert_int_equal(busywin_recent_ns(&w, T0 + 2 * S + 1, 1), S);
    assert_int_equal(busywin_recent_ns(&w, T0 + 3 * S + 1, 1), S);
    assert_int_equal(busywin_recent_ns(&w, T0 + 4 * S + 1, 1), S / 2);
    /* Over 10 s: 3 s of 10, never more than 1 s in one second. */
    assert_int_equal(busywin_recent_ns(&w, T0 + 4 * S + S / 5, 10), 3 * S);
    assert_true(busywin_fraction(&w, T0 + 4 * S + S / 5, 10) > 0.2999 &&
                busywin_fraction(&w, T0 + 4 * S + S / 5, 10) < 0.3001);
    /* The second in progress is not in the window yet. */
    assert_int_equal(busywin_recent_ns(&w, T0 + 3 * S + S / 2, 10), 2 * S + S / 2);
}

static void test_window_slides_by_whole_seconds(void **state)
{
    (void)state;
    struct busywin w;
    memset(&w, 0, sizeof w);
    busywin_add(&w, T0 + 100 * MS, T0 + 600 * MS);   /* 0.5 s in second 1000 */
    busywin_add(&w, T0 + 5 * S, T0 + 6 * S);          /* all of second 1005 */
    assert_int_equal(busywin_recent_ns(&w, T0 + 6 * S, 10), S + S / 2);
    assert_int_equal(busywin_recent_ns(&w, T0 + 10 * S + 999 * MS, 10), S + S / 2);
    /* At 1011 s the window is [1001, 1011): second 1000 left it. */
    assert_int_equal(busywin_recent_ns(&w, T0 + 11 * S, 10), S);
    assert_int_equal(busywin_recent_ns(&w, T0 + 16 * S, 10), 0);
    /* Second 1016 takes the slot of 1000: the old count does not carry over. */
    busywin_add(&w, T0 + 16 * S, T0 + 16 * S + 250 * MS);
    assert_int_equal(busywin_recent_ns(&w, T0 + 17 * S, 1), S / 4);
    assert_int_equal(busywin_recent_ns(&w, T0 + 17 * S, 12), S + S / 4);   /* 1005 and 1016 */
    assert_int_equal(busywin_total_ns(&w), S / 2 + S + S / 4);
    /* A window longer than the slots can answer for is cut to BUSYWIN_MAX_S. */
    assert_int_equal(busywin_recent_ns(&w, T0 + 17 * S, 1000), S + S / 4);
}

/* Counting events (rows arriving): a steady 100 a second reads 100 a
 * second over a sliding 10 s at any point of a second; a step to 300 is
 * followed pro rata, and fully once 10 s of it are in the window. */
static void test_counts_and_the_sliding_rate(void **state)
{
    (void)state;
    struct busywin w;
    memset(&w, 0, sizeof w);
    for (int s = 0; s < 20; s++)
        for (int k = 0; k < 10; k++)
            busywin_count(&w, T0 + s * S + k * 100 * MS, 10);   /* 100 a second */
    assert_int_equal(busywin_total_ns(&w), 20 * 100);
    /* At 1019.95 s: 1010..1018 whole, 1019 so far (all of its events), and
     * 1009 for the 0.05 s of it still inside: 100.5 a second. */
    double r = busywin_rate(&w, T0 + 19 * S + 950 * MS, 10);
    assert_true(r > 99 && r < 101);
    /* 300 a second from 1020 on: after 5 s, half the window has it. */
    for (int s = 20; s < 25; s++)
        for (int k = 0; k < 10; k++)
            busywin_count(&w, T0 + s * S + k * 100 * MS, 30);
    r = busywin_rate(&w, T0 + 25 * S, 10);   /* 1015..1019 at 100, 1020..1024 at 300 */
    assert_true(r > 199 && r < 201);
    for (int s = 25; s < 30; s++)
        for (int k = 0; k < 10; k++)
            busywin_count(&w, T0 + s * S + k * 100 * MS, 30);
    r = busywin_rate(&w, T0 + 30 * S, 10);
    assert_true(r > 299 && r < 301);
    /* The whole-seconds reader counts the same events. */
    assert_int_equal(busywin_recent_ns(&w, T0 + 30 * S, 10), 3000);
}

static void test_long_and_stale_intervals(void **state)
{
    (void)state;
    struct busywin w;
    memset(&w, 0, sizeof w);
    /* 100 s busy: all in the total, the window sees its last 10 s full. */
    busywin_add(&w, T0, T0 + 100 * S);
    assert_int_equal(busywin_total_ns(&w), 100 * S);
    assert_int_equal(busywin_recent_ns(&w, T0 + 100 * S + S / 2, 10), 10 * S);
    assert_true(busywin_fraction(&w, T0 + 100 * S + S / 2, 10) == 1.0);
    /* An interval older than its slot's second (recorded late) is in the
     * total only: it cannot be in any window any more. */
    busywin_add(&w, T0 + 80 * S, T0 + 80 * S + S / 2);   /* slot of 1096 */
    assert_int_equal(busywin_total_ns(&w), 100 * S + S / 2);
    assert_int_equal(busywin_recent_ns(&w, T0 + 100 * S + S / 2, 10), 10 * S);
    /* Empty and backwards intervals are nothing. */
    busywin_add(&w, T0 + 200 * S, T0 + 200 * S);
    busywin_add(&w, T0 + 201 * S, T0 + 200 * S);
    assert_int_equal(busywin_total_ns(&w), 100 * S + S / 2);
}

/* Two instances busy at once: one window fed by both sums them (a fraction
 * up to 2); each instance's own window stays within 1, and their sum is the
 * same figure. */
static void test_overlapping_intervals_add_up(void **state)
{
    (void)state;
    struct busywin both, a, b;
    memset(&both, 0, sizeof both);
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    for (int i = 0; i < 10; i++) {
        int64_t t = T0 + i * S;
        busywin_add(&a, t, t + 900 * MS);
        busywin_add(&both, t, t + 900 * MS);
        /* b's batches began before a's: recorded after, into a past second. */
        busywin_add(&b, t - 50 * MS, t + 900 * MS);
        busywin_add(&both, t - 50 * MS, t + 900 * MS);
    }
    int64_t now = T0 + 10 * S + 1;
    double fa = busywin_fraction(&a, now, 10), fb = busywin_fraction(&b, now, 10);
    double fboth = busywin_fraction(&both, now, 10);
    assert_true(fa <= 1.0 && fb <= 1.0);
    assert_true(fboth > 1.0 && fboth <= 2.0);
    assert_true(fboth > fa + fb - 1e-9 && fboth < fa + fb + 1e-9);
    assert_int_equal(busywin_total_ns(&both), busywin_total_ns(&a) + busywin_total_ns(&b));
}

/* Writers record on a shared virtual clock, each into its own window (one
 * per instance), while readers sum the windows: nothing is lost, and no
 * reader sees an instance more than fully busy (ThreadSanitizer runs this). */
#define NWRITERS 3
#define NREADERS 2
#define NINTERVALS 200000

static struct busywin g_win[NWRITERS];
static _Atomic int64_t g_clock;
static _Atomic int g_writers_left;
static _Atomic int g_bad_reads;

static void *writer_main(void *arg)
{
    struct busywin *w = arg;
    /* 1 ms busy in every 2 ms: half busy. */
    for (int64_t i = 0; i < NINTERVALS; i++) {
        int64_t t = T0 + i * 2 * MS;
        busywin_add(w, t, t + MS);
        int64_t c = atomic_load(&g_clock);
        while (c < t + 2 * MS && !atomic_compare_exchange_weak(&g_clock, &c, t + 2 * MS))
            ;
    }
    atomic_fetch_sub(&g_writers_left, 1);
    return NULL;
}

static void *reader_main(void *arg)
{
    (void)arg;
    while (atomic_load(&g_writers_left) > 0) {
        int64_t now = atomic_load(&g_clock);
        for (int i = 0; i < NWRITERS; i++)
            if (busywin_fraction(&g_win[i], now, 1) > 1.0 + 1e-9)
                atomic_fetch_add(&g_bad_reads, 1);
    }
    return NULL;
}

static void test_readers_beside_writers(void **state)
{
    (void)state;
    memset(g_win, 0, sizeof g_win);
    atomic_store(&g_clock, T0);
    atomic_store(&g_writers_left, NWRITERS);
    pthread_t w[NWRITERS], r[NREADERS];
    for (int i = 0; i < NREADERS; i++)
        assert_int_equal(pthread_create(&r[i], NULL, reader_main, NULL), 0);
    for (int i = 0; i < NWRITERS; i++)
        assert_int_equal(pthread_create(&w[i], NULL, writer_main, &g_win[i]), 0);
    for (int i = 0; i < NWRITERS; i++)
        pthread_join(w[i], NULL);
    for (int i = 0; i < NREADERS; i++)
        pthread_join(r[i], NULL);
    assert_int_equal(atomic_load(&g_bad_reads), 0);
    int64_t end = T0 + (int64_t)NINTERVALS * 2 * MS;   /* 1400 s: whole seconds */
    double device = 0;
    for (int i = 0; i < NWRITERS; i++) {
        assert_int_equal(busywin_total_ns(&g_win[i]), (uint64_t)NINTERVALS * MS);
        double f = busywin_fraction(&g_win[i], end, 10);
        assert_true(f > 0.4999 && f < 0.5001);
        device += f;
    }
    /* Three half-busy instances: 1.5 of a device's worth. */
    assert_true(device > 1.4999 && device < 1.5001);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interval_counts_in_each_second_it_covers),
        cmocka_unit_test(test_window_slides_by_whole_seconds),
        cmocka_unit_test(test_counts_and_the_sliding_rate),
        cmocka_unit_test(test_long_and_stale_intervals),
        cmocka_unit_test(test_overlapping_intervals_add_up),
        cmocka_unit_test(test_readers_beside_writers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
