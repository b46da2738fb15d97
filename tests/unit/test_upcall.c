/* test_upcall.c - the upstream-call driver against loopback listeners: a
 * call lost with a reused connection is repeated when idempotent and not
 * otherwise, on another target (its own again only when no other is
 * usable, and once only), a refused target
 * is skipped for the next, a timeout ends the call without a repeat, a
 * timer libevent has no memory for ends it from the loop, and a call stops
 * when every target was tried. Every wait is bounded in rounds and time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "common/httpc.h"
#include "common/upcall.h"
#include "tests/unit/loopback.h"

/* libevent's allocations fail while this is set (the timer that cannot be armed). */
static bool fail_alloc;
static void *t_malloc(size_t n) { return fail_alloc ? NULL : malloc(n); }
static void *t_realloc(void *p, size_t n) { return fail_alloc ? NULL : realloc(p, n); }

/* ---- loopback servers ---- */

/* A port nothing listens on: connects are refused. */
static struct lsn refusing(void)
{
    struct lsn l = listener();
    close(l.fd);
    l.fd = -1;
    return l;
}

/* Runs the loop until one whole request (a blank line) has arrived on s. */
static void read_request(struct event_base *base, int s)
{
    char got[1024];
    size_t len = 0;
    for (int i = 0; i < 400; i++) {
        event_base_loop(base, EVLOOP_NONBLOCK);
        ssize_t n = recv(s, got + len, sizeof got - 1 - len, MSG_DONTWAIT);
        if (n > 0) {
            len += (size_t)n;
            got[len] = '\0';
            if (strstr(got, "\r\n\r\n"))
                return;
        }
        usleep(1000);
    }
    fail_msg("no whole request arrived");
}

#define OK_ANSWER "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

static void answer(int s)
{
    assert_int_equal(write(s, OK_ANSWER, sizeof OK_ANSWER - 1), (ssize_t)sizeof OK_ANSWER - 1);
}

/* ---- a client of the driver ---- */

struct cl {
    struct event_base *base;
    struct upcall *u;
    struct httpc_target *ts[2];
    struct httpc_pool *pools[2];
    int n;
    int sends, status, dones, fails, code;
    char msg[256];
};

static struct httpc_pool *cl_pool(void *arg, struct httpc_target *t, int index)
{
    (void)t;
    return ((struct cl *)arg)->pools[index];
}

static int cl_send(void *arg, struct upcall *u, const struct httpc_target *t)
{
    static const char req[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    (void)t;
    ((struct cl *)arg)->sends++;
    return upcall_send(u, req, sizeof req - 1);
}

static int cl_head(void *arg, const struct httpc_head *h)
{
    ((struct cl *)arg)->status = h->status;
    return 0;
}

static int cl_body(void *arg, const char *d, size_t n)
{
    (void)arg;
    (void)d;
    (void)n;
    return 0;
}

static void cl_done(void *arg) { ((struct cl *)arg)->dones++; }

static void cl_fail(void *arg, int code, const char *msg)
{
    struct cl *c = arg;
    c->fails++;
    c->code = code;
    snprintf(c->msg, sizeof c->msg, "%s", msg);
}

static const struct upcall_ops cl_ops = {cl_pool, cl_send, cl_head, cl_body, cl_done, cl_fail, NULL};

static void cl_open(struct cl *c, const struct lsn *ls, int n, int timeout_ms)
{
    memset(c, 0, sizeof *c);
    c->base = event_base_new();
    assert_non_null(c->base);
    c->n = n;
    for (int i = 0; i < n; i++) {
        struct error err = {0};
        c->ts[i] = httpc_target_new("127.0.0.1", ls[i].port, "test", "test", &err);
        assert_non_null(c->ts[i]);
        c->pools[i] = httpc_pool_new(c->ts[i], c->base, 4, 1);
        /* No connect timer: test_timer_cannot_arm wants the timer heap
         * never grown before the call's own timer (loopback connects at
         * once anyway). */
        httpc_pool_set_connect_timeout(c->pools[i], 0);
        assert_non_null(c->pools[i]);
    }
    c->u = upcall_new(c->base, &cl_ops, c, timeout_ms, "test.timeout_ms");
    assert_non_null(c->u);
}

static void cl_close(struct cl *c)
{
    upcall_free(c->u);
    for (int i = 0; i < c->n; i++) {
        httpc_pool_free(c->pools[i]);
        httpc_target_free(c->ts[i]);
    }
    event_base_free(c->base);
}

/* Starts a call; the counters count this call only. */
static void cl_start(struct cl *c, unsigned flags)
{
    c->sends = c->status = c->dones = c->fails = c->code = 0;
    c->msg[0] = '\0';
    struct error err = {0};
    assert_int_equal(upcall_start(c->u, c->ts, c->n, flags, &err), 0);
    upcall_arm(c->u);
}

/* Runs the loop until the call ended (at most ~2 s). */
static void cl_wait(struct cl *c)
{
    for (int i = 0; i < 2000 && c->dones + c->fails == 0; i++) {
        event_base_loop(c->base, EVLOOP_NONBLOCK);
        usleep(1000);
    }
    assert_int_equal(c->dones + c->fails, 1);
}

static uint64_t failures(struct httpc_target *t, enum httpc_fail why)
{
    struct httpc_target_stats st;
    httpc_target_stats(t, &st);
    return st.failures[why];
}

/* A first call leaves its connection idle in the pool of l's target; the
 * second goes out on it and the server closes it without an answer.
 * Returns the server's side of the connection the repeat came on at
 * `again`, or -1 when none came. */
static int lose_reused(struct cl *c, struct lsn *l, struct lsn *again, unsigned flags)
{
    cl_start(c, flags);
    int s1 = accept_one(c->base, l);
    read_request(c->base, s1);
    answer(s1);
    cl_wait(c);
    assert_int_equal(c->dones, 1);
    cl_start(c, flags);   /* on the idle connection: reused */
    read_request(c->base, s1);
    close(s1);            /* as a server whose keep-alive timeout struck */
    for (int i = 0; i < 400 && c->sends < 2 && c->fails == 0; i++) {
        event_base_loop(c->base, EVLOOP_NONBLOCK);
        usleep(1000);
    }
    return c->sends == 2 ? accept_one(c->base, again) : -1;
}

/* A lone server loses the call's reused connection; the repeat comes on a
 * fresh one, which the server answers, or loses too (`lose_again`): that
 * loss is the server's, and not repeated. */
static void lone_repeat(bool lose_again)
{
    struct lsn l = listener();
    struct cl c;
    cl_open(&c, &l, 1, 2000);
    int s2 = lose_reused(&c, &l, &l, UPCALL_IDEMPOTENT);
    assert_true(s2 >= 0);
    read_request(c.base, s2);
    if (lose_again)
        close(s2);
    else
        answer(s2);
    cl_wait(&c);
    assert_int_equal(c.dones, !lose_again);
    assert_int_equal(c.status, lose_again ? 0 : 200);
    assert_int_equal(c.code, lose_again ? BG_EUPSTREAM : 0);
    assert_int_equal(upcall_tries(c.u), 2);   /* once more, fresh, and never again */
    assert_int_equal(pending_connections(&l), 0);
    if (!lose_again)
        close(s2);
    cl_close(&c);
    close(l.fd);
}

static void test_reset_on_reused_repeated_when_idempotent(void **state)
{
    (void)state;
    lone_repeat(false);
}

static void test_lone_target_repeated_once(void **state)
{
    (void)state;
    lone_repeat(true);
}

static void test_reset_on_reused_not_repeated_otherwise(void **state)
{
    (void)state;
    struct lsn l = listener();
    struct cl c;
    cl_open(&c, &l, 1, 2000);
    assert_int_equal(lose_reused(&c, &l, &l, 0), -1);
    cl_wait(&c);
    assert_int_equal(c.fails, 1);
    assert_int_equal(c.code, BG_EUPSTREAM);
    assert_int_equal(upcall_tries(c.u), 1);
    assert_int_equal(pending_connections(&l), 0);
    assert_int_equal(failures(c.ts[0], HTTPC_FAIL_RESET), 1);
    cl_close(&c);
    close(l.fd);
}

/* Two servers; the first loses the call's reused connection. With the
 * second taken out (`other_out`) the repeat goes back to the first, fresh,
 * rather than to one known to be down; else to the second, never the
 * tried one again. */
static void repeat_among_two(bool other_out)
{
    struct lsn ls[2] = {listener(), listener()};
    int to = other_out ? 0 : 1;
    struct cl c;
    cl_open(&c, ls, 2, 2000);
    if (other_out)
        httpc_target_probe_result(c.ts[1], HTTPC_PROBE_UNREACHABLE, "test");
    else   /* tried before (one failure: still in), so the first wins both picks by order */
        httpc_target_failed(c.ts[1], HTTPC_FAIL_STATUS);
    int s2 = lose_reused(&c, &ls[0], &ls[to], UPCALL_IDEMPOTENT);
    assert_true(s2 >= 0);
    read_request(c.base, s2);
    answer(s2);
    cl_wait(&c);
    assert_int_equal(c.dones, 1);
    assert_ptr_equal(upcall_target(c.u), c.ts[to]);
    assert_int_equal(pending_connections(&ls[1 - to]), 0);
    close(s2);
    cl_close(&c);
    close(ls[0].fd);
    close(ls[1].fd);
}

static void test_reset_on_reused_goes_to_another_target(void **state)
{
    (void)state;
    repeat_among_two(false);
}

static void test_reset_on_reused_same_target_when_others_out(void **state)
{
    (void)state;
    repeat_among_two(true);
}

static void test_dead_target_skipped(void **state)
{
    (void)state;
    struct lsn ls[2] = {refusing(), listener()};
    struct cl c;
    cl_open(&c, ls, 2, 2000);
    cl_start(&c, 0);   /* even a call that may not be repeated: nothing was sent */
    int s = accept_one(c.base, &ls[1]);
    read_request(c.base, s);
    answer(s);
    cl_wait(&c);
    assert_int_equal(c.dones, 1);
    assert_int_equal(upcall_tries(c.u), 2);
    assert_ptr_equal(upcall_target(c.u), c.ts[1]);
    assert_int_equal(failures(c.ts[0], HTTPC_FAIL_CONNECT), 1);
    close(s);
    cl_close(&c);
    close(ls[1].fd);
}

/* A server killed mid-call: the first server reads the request on a fresh
 * connection and drops it before any answer. An idempotent call goes to
 * the other server (never the first again); any other call fails there. */
static void lost_on_fresh(unsigned flags)
{
    struct lsn ls[2] = {listener(), listener()};
    struct cl c;
    cl_open(&c, ls, 2, 2000);
    cl_start(&c, flags);
    int s = accept_one(c.base, &ls[0]);   /* both idle: the first wins the tie */
    read_request(c.base, s);
    close(s);
    if (flags & UPCALL_IDEMPOTENT) {
        int s2 = accept_one(c.base, &ls[1]);
        assert_true(s2 >= 0);
        read_request(c.base, s2);
        answer(s2);
        cl_wait(&c);
        assert_int_equal(c.dones, 1);
        assert_int_equal(upcall_tries(c.u), 2);
        assert_ptr_equal(upcall_target(c.u), c.ts[1]);
        close(s2);
    } else {
        cl_wait(&c);
        assert_int_equal(c.fails, 1);
        assert_int_equal(c.code, BG_EUPSTREAM);
        assert_int_equal(upcall_tries(c.u), 1);
        assert_int_equal(pending_connections(&ls[1]), 0);
    }
    assert_int_equal(failures(c.ts[0], HTTPC_FAIL_RESET), 1);
    assert_int_equal(pending_connections(&ls[0]), 0);   /* the same server never again */
    cl_close(&c);
    close(ls[0].fd);
    close(ls[1].fd);
}

static void test_lost_on_fresh_goes_elsewhere_when_idempotent(void **state)
{
    (void)state;
    lost_on_fresh(UPCALL_IDEMPOTENT);
}

static void test_lost_on_fresh_not_repeated_otherwise(void **state)
{
    (void)state;
    lost_on_fresh(0);
}

static void test_timeout_not_repeated(void **state)
{
    (void)state;
    struct lsn ls[2] = {listener(), listener()};
    struct cl c;
    cl_open(&c, ls, 2, 50);
    cl_start(&c, UPCALL_IDEMPOTENT);
    int s = accept_one(c.base, &ls[0]);   /* both idle: the first wins the tie */
    read_request(c.base, s);
    cl_wait(&c);   /* no answer */
    assert_int_equal(c.fails, 1);
    assert_int_equal(c.code, BG_EDEADLINE);
    assert_non_null(strstr(c.msg, "no answer within test.timeout_ms (50)"));
    assert_int_equal(upcall_tries(c.u), 1);
    assert_int_equal(failures(c.ts[0], HTTPC_FAIL_TIMEOUT), 1);
    assert_int_equal(pending_connections(&ls[1]), 0);   /* the other never saw it */
    /* The call's connection was closed: its late answer has no taker. */
    char x;
    int r = -1;
    for (int i = 0; i < 200 && (r = (int)recv(s, &x, 1, MSG_DONTWAIT)) < 0; i++)
        usleep(1000);
    assert_int_equal(r, 0);
    close(s);
    cl_close(&c);
    close(ls[0].fd);
    close(ls[1].fd);
}

static void test_timer_cannot_arm(void **state)
{
    (void)state;
    struct lsn l = listener();
    struct cl c;
    cl_open(&c, &l, 1, 60000);
    struct error err = {0};
    assert_int_equal(upcall_start(c.u, c.ts, 1, UPCALL_IDEMPOTENT, &err), 0);
    int s = accept_one(c.base, &l);
    fail_alloc = true;   /* the timer heap cannot grow */
    upcall_arm(c.u);
    fail_alloc = false;
    assert_int_equal(c.fails, 0);   /* never from inside the caller */
    cl_wait(&c);
    assert_int_equal(c.fails, 1);
    assert_int_equal(c.code, BG_ENOMEM);
    assert_non_null(strstr(c.msg, "out of memory arming test.timeout_ms"));
    assert_int_equal(failures(c.ts[0], HTTPC_FAIL_TIMEOUT), 0);   /* not the server's doing */
    /* The driver is whole again: the next call is timed. */
    cl_start(&c, 0);
    int s2 = accept_one(c.base, &l);
    read_request(c.base, s2);
    answer(s2);
    cl_wait(&c);
    assert_int_equal(c.dones, 1);
    close(s);
    close(s2);
    cl_close(&c);
    close(l.fd);
}

static void test_tried_set_exhausted(void **state)
{
    (void)state;
    struct lsn ls[2] = {refusing(), refusing()};
    struct cl c;
    cl_open(&c, ls, 2, 2000);
    cl_start(&c, UPCALL_IDEMPOTENT);
    cl_wait(&c);
    assert_int_equal(c.fails, 1);
    assert_int_equal(c.code, BG_EUPSTREAM);
    assert_non_null(strstr(c.msg, "connect"));
    assert_int_equal(upcall_tries(c.u), 2);   /* each once, neither again */
    assert_int_equal(failures(c.ts[0], HTTPC_FAIL_CONNECT), 1);
    assert_int_equal(failures(c.ts[1], HTTPC_FAIL_CONNECT), 1);
    /* No target at all is the caller's mistake, said at once. */
    struct error err = {0};
    assert_int_equal(upcall_start(c.u, c.ts, 0, 0, &err), -BG_EINTERNAL);
    assert_non_null(strstr(err.msg, "1 to 32 servers"));
    cl_close(&c);
}

int main(void)
{
    event_set_mem_functions(t_malloc, t_realloc, free);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reset_on_reused_repeated_when_idempotent),
        cmocka_unit_test(test_reset_on_reused_not_repeated_otherwise),
        cmocka_unit_test(test_lone_target_repeated_once),
        cmocka_unit_test(test_reset_on_reused_goes_to_another_target),
        cmocka_unit_test(test_reset_on_reused_same_target_when_others_out),
        cmocka_unit_test(test_dead_target_skipped),
        cmocka_unit_test(test_lost_on_fresh_goes_elsewhere_when_idempotent),
        cmocka_unit_test(test_lost_on_fresh_not_repeated_otherwise),
        cmocka_unit_test(test_timeout_not_repeated),
        cmocka_unit_test(test_timer_cannot_arm),
        cmocka_unit_test(test_tried_set_exhausted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
