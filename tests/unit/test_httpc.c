/* test_httpc.c - the outbound HTTP client: URL parsing, server choice and
 * health, and whole calls over a socketpair (httpc_adopt): framing of the
 * answer, keep-alive back to the pool, busy-time and failure accounting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "httpc.h"

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
    static const char *const bad[] = {"https://h:1", "http://h", "http://:80", "http://h:",
                                      "http://h:0", "http://h:65536", "http://h:8x", "h:80",
                                      NULL};
    for (int i = 0; bad[i]; i++)
        assert_int_equal(httpc_url_parse(bad[i], host, sizeof host, &port, &path), -1);
    char tiny[4];
    assert_int_equal(httpc_url_parse("http://longhost:1", tiny, sizeof tiny, &port, NULL), -1);
}

static struct httpc_target *target(int port)
{
    struct error err = {0};
    struct httpc_target *t = httpc_target_new("127.0.0.1", port, &err);
    assert_non_null(t);
    return t;
}

static void test_pick_and_health(void **state)
{
    (void)state;
    struct httpc_target *ts[3] = {target(1), target(2), target(3)};
    int i = -1;
    assert_ptr_equal(httpc_pick(ts, 3, 0, &i), ts[0]);
    assert_ptr_equal(httpc_pick(ts, 3, 1u, &i), ts[1]);
    assert_int_equal(i, 1);
    assert_null(httpc_pick(ts, 3, 7u, &i));
    /* Three failures in a row take a server out; a success in between does not. */
    httpc_target_failed(ts[0], HTTPC_FAIL_RESET);
    httpc_target_failed(ts[0], HTTPC_FAIL_RESET);
    httpc_target_succeeded(ts[0]);
    httpc_target_failed(ts[0], HTTPC_FAIL_STATUS);
    httpc_target_failed(ts[0], HTTPC_FAIL_STATUS);
    assert_ptr_equal(httpc_pick(ts, 3, 0, &i), ts[0]);
    httpc_target_failed(ts[0], HTTPC_FAIL_TIMEOUT);
    assert_ptr_equal(httpc_pick(ts, 3, 0, &i), ts[1]);
    struct httpc_target_stats st;
    httpc_target_stats(ts[0], &st);
    assert_false(st.healthy);
    assert_int_equal(st.failures[HTTPC_FAIL_RESET], 2);
    assert_int_equal(st.failures[HTTPC_FAIL_STATUS], 2);
    assert_int_equal(st.failures[HTTPC_FAIL_TIMEOUT], 1);
    /* All out: the one back first is still named (a trial beats a refusal). */
    for (int k = 0; k < 3; k++)
        httpc_target_failed(ts[1], HTTPC_FAIL_CONNECT);
    httpc_target_probe_result(ts[2], false);   /* out until a probe passes */
    assert_ptr_equal(httpc_pick(ts, 3, 0, &i), ts[0]);
    /* Probed back in. */
    httpc_target_probe_result(ts[2], true);
    assert_ptr_equal(httpc_pick(ts, 3, 0, &i), ts[2]);
    /* With probes on, passive failures keep it out until the next good probe. */
    for (int k = 0; k < 3; k++)
        httpc_target_failed(ts[2], HTTPC_FAIL_RESET);
    httpc_target_succeeded(ts[2]);
    httpc_target_stats(ts[2], &st);
    assert_false(st.healthy);
    httpc_target_probe_result(ts[2], true);
    httpc_target_stats(ts[2], &st);
    assert_true(st.healthy);
    for (int k = 0; k < 3; k++)
        httpc_target_free(ts[k]);
}

/* ---- whole calls over a socketpair ---- */

struct call {
    int status, dones, errors;
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
    struct httpc_conn *c = httpc_adopt(pool, sv[0], &cb, out, flags, &err);
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
    struct httpc_pool *pool = httpc_pool_new(t, base, 4);
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
    struct httpc_conn *k = httpc_open(pool, &cb, &c2, 0, &reused, &err);
    assert_non_null(k);
    assert_true(reused);
    httpc_abort(k);
    httpc_target_stats(t, &st);
    assert_int_equal(st.inflight, 0);

    httpc_pool_free(pool);
    for (int i = 0; i < 6; i++)
        close(fds[i]);
    httpc_target_free(t);
    event_base_free(base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_parse),
        cmocka_unit_test(test_pick_and_health),
        cmocka_unit_test(test_calls),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
