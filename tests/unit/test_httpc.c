/* test_httpc.c - the outbound HTTP client: URL parsing, server choice and
 * health, and whole calls over a socketpair (httpc_adopt): framing of the
 * answer, keep-alive back to the pool, busy-time and failure accounting;
 * pipelined calls against a loopback listener: one connection and one send
 * for the calls of one pass, answers in order, losses and abandoned calls. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "common/httpc.h"
#include "common/httpc_impl.h"
#include "tests/unit/loopback.h"

static void test_url_parse(void **state)
{
    (void)state;
    char host[64];
    int port = 0;
    const char *path = NULL;
    assert_int_equal(httpc_url_parse("http://127.0.0.1:8500", host, sizeof host, &port, &path), 0);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 8500);
    assert_null(path);
    assert_int_equal(httpc_url_parse("http://model-a:1/v2", host, sizeof host, &port, &path), 0);
    assert_string_equal(host, "model-a");
    assert_string_equal(path, "/v2");
    /* IPv6: bracketed, as RFC 3986 writes it; the host is the address. */
    assert_int_equal(httpc_url_parse("http://[::1]:8000", host, sizeof host, &port, &path), 0);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 8000);
    assert_int_equal(httpc_url_parse("http://[fd00::a:1]:1/", host, sizeof host, &port, &path), 0);
    assert_string_equal(host, "fd00::a:1");
    assert_string_equal(path, "/");
    static const char *const bad[] = {"https://h:1", "http://h", "http://:80", "http://h:",
                                      "http://h:0", "http://h:65536", "http://h:8x", "h:80",
                                      "http://::1:8000", "http://[::1]", "http://[::1]8000",
                                      "http://[]:80", "http://[::1:80", "http://[fe80::1%eth0]:80",
                                      "http://[::1]:", "http://[h]:80", "http://[127.0.0.1]:80",
                                      NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(httpc_url_parse(bad[i], host, sizeof host, &port, &path), -1);
    char tiny[4];
    assert_int_equal(httpc_url_parse("http://longhost:1", tiny, sizeof tiny, &port, NULL), -1);
}

static struct httpc_target *target(int port)
{
    struct error err = {0};
    struct httpc_target *t = httpc_target_new("127.0.0.1", port, "test", "test", &err);
    assert_non_null(t);
    return t;
}

/* A reload's new copy goes on with its old copy's server when it is the
 * same one: one target, two owners, retired with the last. */
static void test_target_continues_across_a_reload(void **state)
{
    (void)state;
    struct error err = {0};
    struct httpc_target *old = httpc_target_new("127.0.0.1", 9, "model m", "endpoints[0]", &err);
    assert_non_null(old);
    httpc_target_failed(old, HTTPC_FAIL_RESET);   /* state that must go on */
    struct httpc_target *t = httpc_target_new("127.0.0.1", 9, "model m", "endpoints[0]", &err);
    assert_ptr_equal(httpc_target_continue(t, old), old);   /* t freed */
    struct httpc_target_stats st;
    httpc_target_stats(old, &st);
    assert_int_equal(st.failures[HTTPC_FAIL_RESET], 1);
    httpc_target_free(old);   /* the old copy lets go: the new one still uses it */
    assert_false(httpc_target_retired(old));
    /* Another place, port or owner: a server of its own. */
    struct httpc_target *other = httpc_target_new("127.0.0.1", 9, "model m", "endpoints[1]",
                                                  &err);
    assert_ptr_equal(httpc_target_continue(other, old), other);
    struct httpc_target *p2 = httpc_target_new("127.0.0.1", 10, "model m", "endpoints[0]", &err);
    assert_ptr_equal(httpc_target_continue(p2, old), p2);
    httpc_target_free(other);
    httpc_target_free(p2);
    httpc_target_ref(old);   /* a pool's, to see the retirement */
    httpc_target_free(old);   /* its last owner */
    assert_true(httpc_target_retired(old));
    httpc_target_unref(old);
}

/* By speed: a server more than twice as slow as another in expected wait
 * takes nothing; within twice, the fewest in flight; with a budget, only
 * those expected within it when one is. A server routed around for its
 * speed has the ratio of the fastest's time to its own. */
static void test_pick_by_speed_and_budget(void **state)
{
    (void)state;
    struct httpc_target *ts[2] = {target(1), target(2)};
    int i = -1;
    httpc_target_answered(ts[0], 40000000, 200);    /* 40 ms an answer */
    httpc_target_answered(ts[1], 120000000, 200);   /* 120 ms */
    assert_ptr_equal(httpc_pick(ts, 2, 0, 0, &i), ts[0]);
    assert_true(httpc_target_speed_ratio(ts, 2, 1, 100000000) < 0.34);
    assert_true(httpc_target_speed_ratio(ts, 2, 0, 50000000) == 1);
    /* The fast one's call of 300 ms: it turned slow (its average lags). */
    assert_true(fabs(httpc_target_speed_ratio(ts, 2, 0, 300000000) - 0.4) < 1e-9);
    assert_true(httpc_target_speed_ratio(ts, 1, 0, 300000000) == 1);   /* alone */
    /* A call in flight on the fast one: 80 ms against 120, within twice. */
    httpc_target_begin(ts[0], false);
    assert_ptr_equal(httpc_pick(ts, 2, 0, 0, &i), ts[1]);
    /* Wanted within 100 ms: the one that can (the slow one answered late). */
    assert_ptr_equal(httpc_pick(ts, 2, 0, 100000000, &i), ts[0]);
    /* Within 50 ms neither can: the soonest answer then (80 ms). */
    assert_ptr_equal(httpc_pick(ts, 2, 0, 50000000, &i), ts[0]);
    httpc_target_end(ts[0]);
    httpc_target_free(ts[0]);
    httpc_target_free(ts[1]);
}

/* Only a usable answer measures a server: one answering 429 in a
 * millisecond was the fastest, every call to the other was learned as 1 ms
 * and budgets it could not meet were taken (the re-test), and a server
 * whose last call failed is no measure of the others until it answers. A
 * 404 is the request's: it changes nothing. */
static void test_errors_do_not_measure_speed(void **state)
{
    (void)state;
    struct httpc_target *ts[2] = {target(1), target(2)};
    int i = -1;
    httpc_target_answered(ts[1], 40000000, 200);
    for (int k = 0; k < 8; k++)
        httpc_target_answered(ts[0], 1000000, 429);   /* 429s in 1 ms */
    assert_true(httpc_target_speed_ratio(ts, 2, 1, 40000000) == 1);
    /* Not measured: a candidate as one not answered yet, by calls in flight. */
    httpc_target_begin(ts[1], false);
    assert_ptr_equal(httpc_pick(ts, 2, 0, 0, &i), ts[0]);
    httpc_target_end(ts[1]);
    /* Fast once, failing now: no measure of the other either. */
    httpc_target_answered(ts[0], 1000000, 200);
    assert_true(httpc_target_speed_ratio(ts, 2, 1, 40000000) < 0.1);
    httpc_target_answered(ts[0], 1000000, 503);
    assert_true(httpc_target_speed_ratio(ts, 2, 1, 40000000) == 1);
    httpc_target_answered(ts[0], 1000000, 200);
    assert_true(httpc_target_speed_ratio(ts, 2, 1, 40000000) < 0.1);
    httpc_target_failed(ts[0], HTTPC_FAIL_TIMEOUT);
    assert_true(httpc_target_speed_ratio(ts, 2, 1, 40000000) == 1);
    /* As loaded: one never tried first (a fast server after a slow one
     * never got a call), then by order, whatever their last call. */
    struct httpc_target *fresh = target(3), *three[3] = {ts[0], ts[1], fresh};
    assert_ptr_equal(httpc_pick(three, 3, 0, 0, &i), fresh);
    assert_ptr_equal(httpc_pick(three, 3, 4u, 0, &i), ts[0]);   /* failed last, first */
    httpc_target_free(fresh);
    httpc_target_answered(ts[0], 1000000, 200);
    /* A client's 404, or a connection lost on reuse: still measured. */
    httpc_target_answered(ts[0], 900000000, 404);
    httpc_target_count_failure(ts[0], HTTPC_FAIL_RESET);
    assert_true(httpc_target_speed_ratio(ts, 2, 1, 40000000) < 0.1);
    httpc_target_free(ts[0]);
    httpc_target_free(ts[1]);
}

static void test_pick_and_health(void **state)
{
    (void)state;
    struct httpc_target *ts[3] = {target(1), target(2), target(3)};
    int i = -1;
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[0]);
    assert_ptr_equal(httpc_pick(ts, 3, 1u, 0, &i), ts[1]);
    assert_int_equal(i, 1);
    assert_null(httpc_pick(ts, 3, 7u, 0, &i));
    /* Three failures in a row take a server out; a success in between does
     * not. Each call says whether it changed anything (the log line). */
    assert_int_equal(httpc_target_failed(ts[0], HTTPC_FAIL_RESET), 0);
    assert_int_equal(httpc_target_failed(ts[0], HTTPC_FAIL_RESET), 0);
    assert_int_equal(httpc_target_succeeded(ts[0]), 0);
    assert_int_equal(httpc_target_failed(ts[0], HTTPC_FAIL_STATUS), 0);
    assert_int_equal(httpc_target_failed(ts[0], HTTPC_FAIL_STATUS), 0);
    /* Still in, but as loaded as the others, which were never tried: they go first. */
    assert_ptr_equal(httpc_pick(ts, 3, 6u, 0, &i), ts[0]);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[1]);
    assert_int_equal(httpc_target_failed(ts[0], HTTPC_FAIL_TIMEOUT), -1);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[1]);
    /* The trial calls of a server still failing are not news. */
    assert_int_equal(httpc_target_failed(ts[0], HTTPC_FAIL_TIMEOUT), 0);
    struct httpc_target_stats st;
    httpc_target_stats(ts[0], &st);
    assert_false(st.healthy);
    assert_int_equal(st.failures[HTTPC_FAIL_RESET], 2);
    assert_int_equal(st.failures[HTTPC_FAIL_STATUS], 2);
    assert_int_equal(st.failures[HTTPC_FAIL_TIMEOUT], 2);
    /* All out: the one back first is still named (a trial beats a refusal). */
    for (int k = 0; k < 3; k++)
        httpc_target_failed(ts[1], HTTPC_FAIL_CONNECT);
    /* Probes: failures short of HTTPC_PROBE_FAILS_TO_DOWN in a row keep it
     * in; a pass in between starts the count again; the last one takes it
     * out until a probe passes, and each call says what changed. */
    for (int k = 0; k < HTTPC_PROBE_FAILS_TO_DOWN - 1; k++)
        assert_int_equal(httpc_target_probe_result(ts[2], HTTPC_PROBE_FAIL, "test"), 0);
    assert_int_equal(httpc_target_probe_result(ts[2], HTTPC_PROBE_PASS, "test"), 0);
    for (int k = 0; k < HTTPC_PROBE_FAILS_TO_DOWN - 1; k++)
        assert_int_equal(httpc_target_probe_result(ts[2], HTTPC_PROBE_FAIL, "test"), 0);
    httpc_target_stats(ts[2], &st);
    assert_true(st.healthy);
    assert_int_equal(httpc_target_probe_result(ts[2], HTTPC_PROBE_FAIL, "test"), -1);
    assert_int_equal(httpc_target_probe_result(ts[2], HTTPC_PROBE_FAIL, "test"), 0);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[0]);
    /* Probed back in. */
    assert_int_equal(httpc_target_probe_result(ts[2], HTTPC_PROBE_PASS, "test"), 1);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[2]);
    /* Nothing listening: out at the first probe. */
    assert_int_equal(httpc_target_probe_result(ts[2], HTTPC_PROBE_UNREACHABLE, "test"), -1);
    assert_int_equal(httpc_target_probe_result(ts[2], HTTPC_PROBE_PASS, "test"), 1);
    /* With probes on, passive failures keep it out until the next good
     * probe: a call that succeeds in between does not bring it back. */
    for (int k = 0; k < 3; k++)
        assert_int_equal(httpc_target_failed(ts[2], HTTPC_FAIL_RESET), k == 2 ? -1 : 0);
    assert_int_equal(httpc_target_succeeded(ts[2]), 0);
    httpc_target_stats(ts[2], &st);
    assert_false(st.healthy);
    httpc_target_probe_result(ts[2], HTTPC_PROBE_PASS, "test");
    httpc_target_stats(ts[2], &st);
    assert_true(st.healthy);
    /* Without probes, a call that succeeds (a trial after the pause, or one
     * sent before the take-out) brings it back, once. */
    httpc_target_stats(ts[1], &st);
    assert_false(st.healthy);
    assert_int_equal(httpc_target_succeeded(ts[1]), 1);
    assert_int_equal(httpc_target_succeeded(ts[1]), 0);
    httpc_target_stats(ts[1], &st);
    assert_true(st.healthy);
    for (int k = 0; k < 3; k++)
        httpc_target_free(ts[k]);
}

/* A server that said it is overloaded (a 503 or 429 and its Retry-After)
 * is passed by while another is usable: as loaded and listed first, it was
 * asked, and refused, first by every batch. It stays healthy, is asked
 * when no other is (before one taken out for longer), and a call it
 * answers ends the hold. */
static void test_pick_passes_a_held_server_by(void **state)
{
    (void)state;
    struct httpc_target *ts[3] = {target(1), target(2), target(3)};
    int i = -1;
    httpc_target_hold(ts[0], 7);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[1]);
    assert_ptr_equal(httpc_pick(ts, 3, 2u, 0, &i), ts[2]);
    struct httpc_target_stats st;
    httpc_target_stats(ts[0], &st);
    assert_true(st.healthy);
    /* None other left for this call: the held one is still asked. */
    assert_ptr_equal(httpc_pick(ts, 3, 6u, 0, &i), ts[0]);
    /* Both others held too: the hold that ends first (3 s before 7 s). */
    httpc_target_hold(ts[1], 30);
    httpc_target_hold(ts[2], 3);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[2]);
    /* Past the most a hold lasts (60 s), an hour's Retry-After is 60 s: one
     * held 30 s goes before it. */
    httpc_target_hold(ts[2], 3600);
    assert_ptr_equal(httpc_pick(ts, 3, 1u, 0, &i), ts[1]);
    /* Taken out for 2 s (3 failures, no probes; its 1 s hold ends
     * sooner) comes back before a 7 s hold and a 60 s one. */
    for (int k = 0; k < 3; k++)
        httpc_target_failed(ts[1], HTTPC_FAIL_RESET);
    httpc_target_hold(ts[1], 1);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[1]);
    httpc_target_hold(ts[2], 1);   /* its latest word decides: 1 s now */
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[2]);
    /* A call sent before the refusal (begun 1 s ago) does not end the
     * hold; one sent after it does: first listed, and as loaded, again. */
    httpc_target_answered(ts[0], 1000000000, 200);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[2]);
    httpc_target_answered(ts[0], 1, 200);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[0]);
    /* Another refusal is no answer: the hold stands. */
    httpc_target_hold(ts[0], 5);
    httpc_target_answered(ts[0], 1000000, 429);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[2]);
    /* A Retry-After of 0 still holds it for the least there is, 1 s. */
    httpc_target_answered(ts[0], 1, 200);
    httpc_target_hold(ts[0], 0);
    assert_ptr_equal(httpc_pick(ts, 3, 0, 0, &i), ts[2]);
    for (int k = 0; k < 3; k++)
        httpc_target_free(ts[k]);
}

/* n calls one at a time to ts[0] (answering in 50 ms) and ts[1] (5 ms):
 * how many went to ts[0]. */
static int calls_to_slow(struct httpc_target *ts[2], int n)
{
    int slow = 0, i;
    for (int k = 0; k < n; k++) {
        struct httpc_target *t = httpc_pick(ts, 2, 0, 0, &i);
        slow += t == ts[0];
        httpc_target_answered(t, t == ts[0] ? 50000000 : 5000000, 200);
    }
    return slow;
}

/* A server passed by for a slow spell got no call to measure it again.
 * Passed by 64 times and for 2 s since its last measure, it gets one
 * call (one at a time), whose time replaces its average (blended 1/8 a
 * time, 190 ms took 24 tries to come back under twice 5), unless its
 * measure says it would miss the call's deadline. Both counts are
 * needed: trials by time alone after every pause, and a fast server
 * counted stale beside them, locked a client sending one call at a time
 * onto the slow server (the re-test: 97 of 97). Each trial that leaves it
 * as slow doubles both (one call in 64 to a slow server was the p99 of a
 * client under 32 calls a second, the second re-test). */
static void test_pick_tries_a_stale_measure_again(void **state)
{
    (void)state;
    struct httpc_target *ts[2] = {target(1), target(2)};
    int i = -1;
    httpc_target_answered(ts[0], 190000000, 200);   /* a slow spell: 190 ms */
    httpc_target_answered(ts[1], 5000000, 200);     /* 5 ms */
    for (int k = 0; k < 100; k++)   /* passed by often, but not for long */
        assert_ptr_equal(httpc_pick(ts, 2, 0, 0, &i), ts[1]);
    usleep(2100000);
    /* Passed by for long now, and often: tried, but not by a call with a
     * deadline its measure (190 ms) would miss. */
    httpc_target_answered(ts[1], 5000000, 200);
    assert_ptr_equal(httpc_pick(ts, 2, 0, 100000000, &i), ts[1]);
    assert_ptr_equal(httpc_pick(ts, 2, 0, 0, &i), ts[0]);
    /* One trial at a time. */
    httpc_target_begin(ts[0], false);
    assert_ptr_equal(httpc_pick(ts, 2, 0, 0, &i), ts[1]);
    httpc_target_end(ts[0]);
    /* Answered in 5 ms: that is its time now, and as loaded and listed
     * first it takes the next call. */
    httpc_target_answered(ts[0], 5000000, 200);
    assert_ptr_equal(httpc_pick(ts, 2, 0, 0, &i), ts[0]);
    assert_true(httpc_target_speed_ratio(ts, 2, 0, 5000000) == 1);
    /* Slow for real (50 ms): after a pause, a client's calls one at a
     * time go to the fast one, the slow one tried once in 64. */
    httpc_target_answered(ts[0], 50000000, 200);
    usleep(2100000);
    assert_int_equal(calls_to_slow(ts, 128), 1);
    /* That trial left it as slow: the next needs twice as many passes and
     * twice as long (128 and 4 s), so 2 s and 128 passes give none. */
    usleep(2100000);
    assert_int_equal(calls_to_slow(ts, 128), 0);
    httpc_target_free(ts[0]);
    httpc_target_free(ts[1]);
}

/* Under calls that all have deadlines within its old measure, a server
 * passed by for a slow spell gets no trial from httpc_pick, and was never
 * measured again: a copy of a call is owed to it instead. */
static void test_pick_owes_a_copy_trial_under_deadlines(void **state)
{
    (void)state;
    struct httpc_target *ts[2] = {target(1), target(2)};
    int i = -1;
    const int64_t budget = 100000000;
    httpc_target_answered(ts[0], 190000000, 200);   /* a slow spell: 190 ms */
    httpc_target_answered(ts[1], 5000000, 200);     /* 5 ms */
    for (int k = 0; k < 100; k++)   /* passed by often, but not for long */
        assert_ptr_equal(httpc_pick(ts, 2, 0, budget, &i), ts[1]);
    assert_int_equal(httpc_pick_copy_trial(ts, 2, 1), -1);
    usleep(2100000);
    httpc_target_answered(ts[1], 5000000, 200);
    assert_ptr_equal(httpc_pick(ts, 2, 0, budget, &i), ts[1]);
    /* Not to the call's own server, not while a call is in flight to it. */
    assert_int_equal(httpc_pick_copy_trial(ts, 2, 0), -1);
    httpc_target_begin(ts[0], false);
    assert_int_equal(httpc_pick_copy_trial(ts, 2, 1), -1);
    httpc_target_end(ts[0]);
    /* Owed once: the next is twice as far off. */
    assert_int_equal(httpc_pick_copy_trial(ts, 2, 1), 0);
    assert_int_equal(httpc_pick_copy_trial(ts, 2, 1), -1);
    /* The copy's own call picks among it alone: that is no pick on its
     * speed, and its trials still double (they were reset: a copy every
     * 2 s for ever, the re-test). */
    assert_ptr_equal(httpc_pick(ts, 1, 0, 0, &i), ts[0]);
    /* It failed: a fast 200 that did not parse, timed by httpc before it
     * was read. The old measure is back, calls with deadlines still pass
     * it by (cleared, or left at the copy's 1 ms, it took every call:
     * 502s, the re-tests). */
    httpc_target_answered(ts[0], 1000000, 200);
    httpc_target_failed(ts[0], HTTPC_FAIL_MALFORMED);
    httpc_target_trial_failed(ts[0]);
    for (int k = 0; k < 200; k++)
        assert_ptr_equal(httpc_pick(ts, 2, 0, budget, &i), ts[1]);
    usleep(2100000);
    httpc_target_answered(ts[1], 5000000, 200);
    assert_int_equal(httpc_pick_copy_trial(ts, 2, 1), -1);   /* 4 s from the last now */
    usleep(2000000);
    assert_int_equal(httpc_pick_copy_trial(ts, 2, 1), 0);
    /* The copy answered in 5 ms: calls with deadlines go to it again (as
     * loaded and listed first). */
    httpc_target_answered(ts[0], 5000000, 200);
    assert_ptr_equal(httpc_pick(ts, 2, 0, budget, &i), ts[0]);
    httpc_target_free(ts[0]);
    httpc_target_free(ts[1]);
}

/* A server whose average one slow answer lifted past twice the other's
 * (41 ms against 5 ms), within a call's 100 ms deadline: that call was
 * its trial, and late when the server had turned slow for good (295 ms,
 * the re-test). A call with a deadline is never a trial: it owes a copy. */
static void test_a_call_with_a_deadline_is_never_a_trial(void **state)
{
    (void)state;
    struct httpc_target *ts[2] = {target(1), target(2)};
    int i = -1;
    httpc_target_answered(ts[0], 41000000, 200);
    httpc_target_answered(ts[1], 5000000, 200);
    for (int k = 0; k < 100; k++)
        assert_ptr_equal(httpc_pick(ts, 2, 0, 100000000, &i), ts[1]);
    usleep(2100000);
    httpc_target_answered(ts[1], 5000000, 200);
    assert_ptr_equal(httpc_pick(ts, 2, 0, 100000000, &i), ts[1]);
    assert_int_equal(httpc_pick_copy_trial(ts, 2, 1), 0);
    httpc_target_free(ts[0]);
    httpc_target_free(ts[1]);
}

/* ---- whole calls over a socketpair ---- */

struct call {
    int status, dones, errors;
    bool abandoned;                  /* its caller ended it: nothing more comes */
    enum httpc_fail why;
    char body[256];
    size_t len;
};

static int c_head(void *arg, const struct httpc_head *h)
{
    ((struct call *)arg)->status = h->status;
    return 0;
}

static int c_body(void *arg, const char *d, size_t n)
{
    struct call *c = arg;
    if (c->len + n < sizeof c->body) {
        memcpy(c->body + c->len, d, n);
        c->len += n;
    }
    return 0;
}

static void c_done(void *arg) { ((struct call *)arg)->dones++; }
static void c_error(void *arg, enum httpc_fail why, const char *msg)
{
    (void)msg;
    ((struct call *)arg)->errors++;
    ((struct call *)arg)->why = why;
}

static const struct httpc_cb cb = {c_head, c_body, c_done, c_error, NULL};

/* Runs one call: the "server" writes `answer` (then closes when asked). */
static void run_call(struct httpc_pool *pool, struct event_base *base, const char *answer,
                     int close_after, unsigned flags, struct call *out, int *server_fd)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
    struct error err = {0};
    memset(out, 0, sizeof *out);
    struct httpc_call *c = httpc_adopt(pool, sv[0], &cb, out, flags, &err);
    assert_non_null(c);
    assert_int_equal(httpc_send(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27), 0);
    usleep(2000);   /* a little busy time to account */
    assert_int_equal(write(sv[1], answer, strlen(answer)), (ssize_t)strlen(answer));
    if (close_after)
        shutdown(sv[1], SHUT_WR);
    for (int i = 0; i < 100 && out->dones + out->errors == 0; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    *server_fd = sv[1];
}

static void test_calls(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct httpc_target *t = target(9);
    struct httpc_pool *pool = httpc_pool_new(t, base, 4, 1);
    struct call c;
    int fds[6];

    run_call(pool, base, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", 0, 0, &c, &fds[0]);
    assert_int_equal(c.dones, 1);
    assert_int_equal(c.status, 200);
    assert_int_equal(c.len, 5);
    assert_memory_equal(c.body, "hello", 5);

    run_call(pool, base, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
             0, 0, &c, &fds[1]);
    assert_int_equal(c.dones, 1);
    assert_memory_equal(c.body, "abcde", 5);

    run_call(pool, base, "HTTP/1.1 200 OK\r\n\r\nuntil the close", 1, 0, &c, &fds[2]);
    assert_int_equal(c.dones, 1);
    assert_int_equal(c.len, 15);

    run_call(pool, base, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n", 0, 0, &c,
             &fds[3]);
    assert_int_equal(c.dones, 1);
    assert_int_equal(c.status, 204);

    run_call(pool, base, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 1, 0, &c, &fds[4]);
    assert_int_equal(c.errors, 1);
    assert_int_equal(c.why, HTTPC_FAIL_RESET);

    run_call(pool, base, "not http at all\r\n\r\n", 0, 0, &c, &fds[5]);
    assert_int_equal(c.errors, 1);
    assert_int_equal(c.why, HTTPC_FAIL_MALFORMED);

    struct httpc_target_stats st;
    httpc_target_stats(t, &st);
    assert_int_equal(st.calls, 6);
    assert_int_equal(st.inflight, 0);
    assert_int_equal(st.failures[HTTPC_FAIL_RESET], 1);
    assert_int_equal(st.failures[HTTPC_FAIL_MALFORMED], 1);
    assert_true(st.busy_s >= 6 * 0.002 * 0.9);   /* each call was in flight >= 2 ms */
    assert_true(st.busy_s <= st.age_s);

    /* Two kept-alive connections went back to the pool; the next call reuses one. */
    struct error err = {0};
    bool reused = false;
    struct call c2 = {0};
    struct httpc_call *k = httpc_open(pool, &cb, &c2, 0, &reused, &err);
    assert_non_null(k);
    assert_true(reused);
    httpc_abort(k);
    /* A fresh call never takes the idle one left (a repeat after a stale loss). */
    k = httpc_open(pool, &cb, &c2, HTTPC_FRESH, &reused, &err);
    assert_non_null(k);
    assert_false(reused);
    httpc_abort(k);
    httpc_target_stats(t, &st);
    assert_int_equal(st.inflight, 0);

    httpc_pool_free(pool);
    for (int i = 0; i < 6; i++)
        close(fds[i]);
    httpc_target_free(t);
    event_base_free(base);
}

/* A kept-alive connection the server closed as idle just as the next
 * request went out (the keep-alive race): a reset, counted, but not
 * against the server's health; three in a row took a healthy one out. */
static void test_stale_keepalive_losses_keep_the_server_in(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct httpc_target *t = target(9);
    struct httpc_pool *pool = httpc_pool_new(t, base, 4, 1);
    /* Three connections answered and kept alive, idle in the pool... */
    int fds[3];
    for (int i = 0; i < 3; i++) {
        struct call c;
        run_call(pool, base, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 0, 0, &c,
                 &fds[i]);
        assert_int_equal(c.dones, 1);
    }
    /* ... which the server closes as the next three requests go out. */
    for (int i = 0; i < 3; i++)
        close(fds[i]);
    struct call c2[3];
    memset(c2, 0, sizeof c2);
    for (int i = 0; i < 3; i++) {
        struct error err = {0};
        bool reused = false;
        struct httpc_call *k = httpc_open(pool, &cb, &c2[i], 0, &reused, &err);
        assert_non_null(k);
        assert_true(reused);
        assert_int_equal(httpc_send(k, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27), 0);
    }
    for (int j = 0; j < 100 && c2[0].errors + c2[1].errors + c2[2].errors < 3; j++)
        event_base_loop(base, EVLOOP_NONBLOCK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(c2[i].errors, 1);
        assert_int_equal(c2[i].why, HTTPC_FAIL_RESET);
    }
    struct httpc_target_stats st;
    httpc_target_stats(t, &st);
    assert_int_equal(st.failures[HTTPC_FAIL_RESET], 3);
    assert_true(st.healthy);
    httpc_pool_free(pool);
    httpc_target_free(t);
    event_base_free(base);
}

/* ---- pipelining, against a loopback listener ---- */

/* Reads what the server got until `want` requests (blank-line ends) are in;
 * returns how many reads that took. */
static int read_requests(struct event_base *base, int s, int want, char *got, size_t cap)
{
    size_t len = 0;
    int reads = 0;
    for (int i = 0; i < 400; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        ssize_t n = recv(s, got + len, cap - 1 - len, MSG_DONTWAIT);
        if (n > 0) {
            len += (size_t)n;
            reads++;
            got[len] = '\0';
            int ends = 0;
            for (const char *p = got; (p = strstr(p, "\r\n\r\n")); p += 4)
                ends++;
            if (ends >= want)
                return reads;
        }
        usleep(500);
    }
    fail_msg("only part of the requests arrived: %s", got);
    return reads;
}

static void spin(struct event_base *base, struct call *calls, int n)
{
    for (int i = 0; i < 400; i++) {
        int ended = 0;
        for (int k = 0; k < n; k++)
            ended += calls[k].abandoned || calls[k].dones + calls[k].errors;
        if (ended >= n)
            return;
        event_base_loop(base, EVLOOP_NONBLOCK);
        usleep(500);
    }
}

static struct httpc_call *open_get(struct httpc_pool *pool, struct call *k, const char *path,
                                   unsigned flags, bool *reused)
{
    struct error err = {0};
    memset(k, 0, sizeof *k);
    struct httpc_call *c = httpc_open(pool, &cb, k, flags, reused, &err);
    assert_non_null(c);
    char req[128];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path);
    assert_int_equal(httpc_send(c, req, (size_t)n), 0);
    return c;
}

#define ANSWER(body) "HTTP/1.1 200 OK\r\nContent-Length: " #body "\r\n\r\n"

/* A pool of `pipeline` on its own event base, calling a loopback listener
 * (or, with `refuse`, a port nothing listens on any more). */
struct fx {
    struct event_base *base;
    struct lsn l;
    struct httpc_target *t;
    struct httpc_pool *pool;
};

static void fx_open(struct fx *f, int pipeline, bool refuse)
{
    f->base = event_base_new();
    f->l = listener();
    if (refuse) {
        close(f->l.fd);
        f->l.fd = -1;
    }
    f->t = target(f->l.port);
    f->pool = httpc_pool_new(f->t, f->base, 4, pipeline);
}

static void fx_close(struct fx *f)
{
    httpc_pool_free(f->pool);
    httpc_target_free(f->t);
    if (f->l.fd >= 0)
        close(f->l.fd);
    event_base_free(f->base);
}

static void test_pipeline_one_send_answers_in_order(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 4, false);
    struct call k[6];
    bool reused[6];
    /* Five calls in one pass: four share a connection, the fifth opens the next. */
    for (int i = 0; i < 5; i++) {
        char path[16];
        snprintf(path, sizeof path, "/%d", i);
        open_get(f.pool, &k[i], path, HTTPC_PIPELINE, &reused[i]);
    }
    assert_false(reused[0]);
    assert_true(reused[1] && reused[2] && reused[3]);
    assert_false(reused[4]);
    int s1 = accept_one(f.base, &f.l), s2 = accept_one(f.base, &f.l);
    char got[2048];
    /* Nothing is written before the pass ends, then the four go in one send. */
    assert_int_equal(read_requests(f.base, s1, 4, got, sizeof got), 1);
    assert_non_null(strstr(got, "GET /0 "));
    assert_true(strstr(got, "GET /0 ") < strstr(got, "GET /1 "));
    assert_true(strstr(got, "GET /2 ") < strstr(got, "GET /3 "));
    assert_int_equal(read_requests(f.base, s2, 1, got, sizeof got), 1);
    assert_non_null(strstr(got, "GET /4 "));
    assert_int_equal(pending_connections(&f.l), 0);
    /* All four answers in one write: each call gets its own, in order. */
    static const char four[] = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\na"
                               "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nbb\r\n0\r\n\r\n"
                               "HTTP/1.1 204 No Content\r\n\r\n"
                               "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\ndddd";
    assert_int_equal(write(s1, four, sizeof four - 1), (ssize_t)sizeof four - 1);
    assert_int_equal(write(s2, ANSWER(1) "e", sizeof ANSWER(1) "e" - 1), (ssize_t)sizeof ANSWER(1));
    spin(f.base, k, 5);
    static const char *const want[] = {"a", "bb", "", "dddd", "e"};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(k[i].dones, 1);
        assert_int_equal(k[i].errors, 0);
        assert_int_equal(k[i].status, i == 2 ? 204 : 200);
        assert_int_equal(k[i].len, strlen(want[i]));
        assert_memory_equal(k[i].body, want[i], k[i].len);
    }
    /* Both connections are idle again; a call of a later pass reuses one
     * alone, and one opened after the flush never joins a busy connection. */
    open_get(f.pool, &k[0], "/a", HTTPC_PIPELINE, &reused[0]);
    assert_true(reused[0]);
    event_base_loop(f.base, EVLOOP_NONBLOCK);   /* the flush: /a is on its way */
    open_get(f.pool, &k[1], "/b", HTTPC_PIPELINE, &reused[1]);
    assert_true(reused[1]);                   /* the other idle connection */
    open_get(f.pool, &k[2], "/c", 0, &reused[2]);
    assert_false(reused[2]);                  /* not pipelined, none idle: a new one */
    int s3 = accept_one(f.base, &f.l);
    assert_int_equal(read_requests(f.base, s3, 1, got, sizeof got), 1);
    assert_non_null(strstr(got, "GET /c "));
    struct httpc_target_stats st;
    httpc_target_stats(f.t, &st);
    assert_int_equal(st.inflight, 3);
    assert_int_equal(st.calls, 8);
    assert_int_equal(st.pipelined, 3);   /* /1, /2, /3 went behind /0 */
    /* Closing the server sides fails the three with a reset. */
    close(s1);
    close(s2);
    close(s3);
    spin(f.base, k, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(k[i].errors, 1);
    httpc_target_stats(f.t, &st);
    assert_int_equal(st.inflight, 0);
    fx_close(&f);
}

/* Three pipelined calls on one connection; the server sends `answer`, then
 * closes when asked. */
static void pipeline_three(const char *answer, bool close_after, int abort_mask, struct call *k,
                           struct httpc_target_stats *st)
{
    struct fx f;
    fx_open(&f, 8, false);
    struct httpc_call *c[3];
    for (int i = 0; i < 3; i++)
        c[i] = open_get(f.pool, &k[i], "/", HTTPC_PIPELINE, NULL);
    int s = accept_one(f.base, &f.l);
    char got[1024];
    read_requests(f.base, s, 3, got, sizeof got);
    for (int i = 0; i < 3; i++)
        if (abort_mask & (1 << i)) {
            httpc_abort(c[i]);
            k[i].abandoned = true;   /* ends here, for spin */
        }
    if (abort_mask == 7) {
        /* Nobody waits: the connection closes at once. */
        char x;
        for (int i = 0; i < 200 && recv(s, &x, 1, MSG_DONTWAIT) < 0; i++)
            usleep(500);
        assert_int_equal(recv(s, &x, 1, MSG_DONTWAIT), 0);
    }
    if (answer)
        assert_int_equal(write(s, answer, strlen(answer)), (ssize_t)strlen(answer));
    if (close_after)
        shutdown(s, SHUT_WR);
    spin(f.base, k, 3);
    httpc_target_stats(f.t, st);
    close(s);
    fx_close(&f);
}

static void test_pipeline_losses(void **state)
{
    (void)state;
    struct call k[3];
    struct httpc_target_stats st;

    /* Closed after the first answer: the two behind learn theirs never came. */
    pipeline_three(ANSWER(2) "ok", true, 0, k, &st);
    assert_int_equal(k[0].dones, 1);
    assert_memory_equal(k[0].body, "ok", 2);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(k[i].errors, 1);
        assert_int_equal(k[i].why, HTTPC_FAIL_RESET);
    }
    assert_int_equal(st.inflight, 0);
    assert_int_equal(st.failures[HTTPC_FAIL_RESET], 1);   /* one lost connection, one failure */

    /* The first answer says the server closes after it: not a failure of
     * the server, and the rest are told at once (no wait for the close). */
    pipeline_three("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\nx", false, 0,
                   k, &st);
    assert_int_equal(k[0].dones, 1);
    assert_int_equal(k[1].errors + k[2].errors, 2);
    assert_int_equal(k[1].why, HTTPC_FAIL_RESET);
    assert_int_equal(st.failures[HTTPC_FAIL_RESET], 0);
    assert_int_equal(st.inflight, 0);

    /* Garbage in the second answer: the first stands, the second is
     * malformed, the third was lost with the connection. */
    pipeline_three(ANSWER(1) "a" "bogus\r\n\r\n", false, 0, k, &st);
    assert_int_equal(k[0].dones, 1);
    assert_int_equal(k[1].why, HTTPC_FAIL_MALFORMED);
    assert_int_equal(k[2].why, HTTPC_FAIL_RESET);
    assert_int_equal(k[1].errors + k[2].errors, 2);
    assert_int_equal(st.failures[HTTPC_FAIL_MALFORMED], 1);
    assert_int_equal(st.inflight, 0);
}

/* The server answers before reading the whole request (a 413 for a body
 * too large) and closes: its answer is the call's. The send failed first
 * and the call failed as a reset, retried as a server fault. */
static void early_close(bool answer, struct call *k, struct httpc_target_stats *st);

static void test_early_answer_then_close(void **state)
{
    (void)state;
    struct call k = {0};
    struct httpc_target_stats st;
    early_close(true, &k, &st);
    assert_int_equal(k.errors, 0);
    assert_int_equal(k.dones, 1);
    assert_int_equal(k.status, 413);
    assert_memory_equal(k.body, "no", 2);
    assert_int_equal(st.inflight, 0);
    assert_int_equal(st.failures[HTTPC_FAIL_RESET], 0);
    /* Closed without a word: the send's failure is the call's, a reset. */
    early_close(false, &k, &st);
    assert_int_equal(k.dones, 0);
    assert_int_equal(k.errors, 1);
    assert_int_equal(k.why, HTTPC_FAIL_RESET);
    assert_int_equal(st.inflight, 0);
}

/* A call sending 16 MiB to a server that reads a little, answers 413 (or
 * not) and closes with the rest unread. */
static void early_close(bool answer, struct call *k, struct httpc_target_stats *st)
{
    struct fx f;
    fx_open(&f, 1, false);
    memset(k, 0, sizeof *k);
    struct error err = {0};
    struct httpc_call *c = httpc_open(f.pool, &cb, k, 0, NULL, &err);
    assert_non_null(c);
    size_t body = 16u << 20;   /* far past the socket buffers */
    char *req = malloc(body + 128);
    assert_non_null(req);
    int hl = snprintf(req, 128, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %zu\r\n\r\n", body);
    memset(req + hl, 'x', body);
    assert_int_equal(httpc_send(c, req, (size_t)hl + body), 0);
    free(req);
    int s = accept_one(f.base, &f.l);
    char got[4096];
    for (int i = 0; i < 200; i++) {   /* the head, and some of the body */
        event_base_loop(f.base, EVLOOP_NONBLOCK);
        if (recv(s, got, sizeof got, MSG_DONTWAIT) > 0)
            break;
        usleep(500);
    }
    static const char ans[] = "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 2\r\n"
                              "Connection: close\r\n\r\nno";
    if (answer)
        assert_int_equal(write(s, ans, sizeof ans - 1), (ssize_t)(sizeof ans - 1));
    close(s);   /* unread bytes: a reset */
    spin(f.base, k, 1);
    httpc_target_stats(f.t, st);
    fx_close(&f);
}

static void test_pipeline_abandoned_calls(void **state)
{
    (void)state;
    struct call k[3];
    struct httpc_target_stats st;
    static const char three[] = ANSWER(1) "a" ANSWER(2) "bb" ANSWER(3) "ccc";

    /* The middle call's caller gave up: its answer is read and dropped, the
     * others get theirs. */
    pipeline_three(three, false, 2, k, &st);
    assert_int_equal(k[0].dones, 1);
    assert_memory_equal(k[0].body, "a", 1);
    assert_int_equal(k[1].dones + k[1].errors + k[1].status, 0);
    assert_int_equal(k[2].dones, 1);
    assert_memory_equal(k[2].body, "ccc", 3);
    assert_int_equal(st.inflight, 0);

    /* The first gave up: the same, ahead of the others. */
    pipeline_three(three, false, 1, k, &st);
    assert_int_equal(k[0].dones + k[0].errors + k[0].status, 0);
    assert_int_equal(k[1].dones, 1);
    assert_memory_equal(k[1].body, "bb", 2);
    assert_int_equal(k[2].dones, 1);
    assert_int_equal(st.inflight, 0);

    /* All gave up: the connection closes at once (checked inside). */
    pipeline_three(NULL, false, 7, k, &st);
    assert_int_equal(st.inflight, 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(k[i].dones + k[i].errors, 0);
}

static void test_pipeline_refused(void **state)
{
    (void)state;
    struct fx f;
    fx_open(&f, 4, true);
    struct call k[3];
    for (int i = 0; i < 3; i++)
        open_get(f.pool, &k[i], "/", HTTPC_PIPELINE, NULL);
    spin(f.base, k, 3);
    /* Nothing reached a server: every call may go elsewhere. */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(k[i].errors, 1);
        assert_int_equal(k[i].why, HTTPC_FAIL_CONNECT);
    }
    struct httpc_target_stats st;
    httpc_target_stats(f.t, &st);
    assert_int_equal(st.inflight, 0);
    fx_close(&f);
}

static void test_pipeline_off(void **state)
{
    (void)state;
    /* A pool with pipeline 1 gives each call its own connection whatever
     * the call asks. */
    struct fx f;
    fx_open(&f, 1, false);
    struct call k[2];
    bool reused[2];
    open_get(f.pool, &k[0], "/", HTTPC_PIPELINE, &reused[0]);
    open_get(f.pool, &k[1], "/", HTTPC_PIPELINE, &reused[1]);
    assert_false(reused[0] || reused[1]);
    int s1 = accept_one(f.base, &f.l), s2 = accept_one(f.base, &f.l);
    close(s1);
    close(s2);
    spin(f.base, k, 2);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_parse),
        cmocka_unit_test(test_pick_and_health),
        cmocka_unit_test(test_pick_by_speed_and_budget),
        cmocka_unit_test(test_pick_passes_a_held_server_by),
        cmocka_unit_test(test_pick_tries_a_stale_measure_again),
        cmocka_unit_test(test_pick_owes_a_copy_trial_under_deadlines),
        cmocka_unit_test(test_a_call_with_a_deadline_is_never_a_trial),
        cmocka_unit_test(test_errors_do_not_measure_speed),
        cmocka_unit_test(test_target_continues_across_a_reload),
        cmocka_unit_test(test_calls),
        cmocka_unit_test(test_stale_keepalive_losses_keep_the_server_in),
        cmocka_unit_test(test_pipeline_one_send_answers_in_order),
        cmocka_unit_test(test_pipeline_losses),
        cmocka_unit_test(test_pipeline_abandoned_calls),
        cmocka_unit_test(test_early_answer_then_close),
        cmocka_unit_test(test_pipeline_refused),
        cmocka_unit_test(test_pipeline_off),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
