/* test_http_response.c - the response writer: status line, headers, HEAD, Date. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "http/response.h"

static const char *DATE = "Wed, 02 Dec 2026 10:15:03 GMT";

static char *render(const struct http_response *r, struct buf *b)
{
    buf_reset(b);
    assert_int_equal(http_response_write(b, r, DATE), 0);
    assert_int_equal(buf_append(b, "", 1), 0);
    return b->data;
}

static void test_basic(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    struct http_response r = {.status = 200, .content_type = "application/json",
                              .body = "{\"live\":true}", .body_len = 13};
    assert_string_equal(render(&r, &b), "HTTP/1.1 200 OK\r\n"
                                        "Server: batchgate\r\n"
                                        "Date: Wed, 02 Dec 2026 10:15:03 GMT\r\n"
                                        "Content-Type: application/json\r\n"
                                        "Content-Length: 13\r\n"
                                        "\r\n"
                                        "{\"live\":true}");
    buf_free(&b);
}

static void test_head_close_extra(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    struct http_response r = {.status = 405, .content_type = "application/json", .body = "{}",
                              .body_len = 2, .omit_body = true,
                              .extra_headers = "Allow: GET, HEAD\r\n", .conn = HTTP_CONN_CLOSE};
    assert_string_equal(render(&r, &b), "HTTP/1.1 405 Method Not Allowed\r\n"
                                        "Server: batchgate\r\n"
                                        "Date: Wed, 02 Dec 2026 10:15:03 GMT\r\n"
                                        "Content-Type: application/json\r\n"
                                        "Content-Length: 2\r\n"
                                        "Connection: close\r\n"
                                        "Allow: GET, HEAD\r\n"
                                        "\r\n");
    r.conn = HTTP_CONN_KEEP_ALIVE;
    r.omit_body = false;
    r.extra_headers = NULL;
    r.content_type = NULL;
    assert_non_null(strstr(render(&r, &b), "Connection: keep-alive\r\n\r\n{}"));
    assert_null(strstr(b.data, "Content-Type"));
    buf_free(&b);
}

static void test_appends_in_order(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    struct http_response r1 = {.status = 200, .body = "a", .body_len = 1};
    struct http_response r2 = {.status = 404, .body = "bb", .body_len = 2};
    assert_int_equal(http_response_write(&b, &r1, DATE), 0);
    assert_int_equal(http_response_write_continue(&b), 0);
    assert_int_equal(http_response_write(&b, &r2, DATE), 0);
    assert_int_equal(buf_append(&b, "", 1), 0);
    const char *first = strstr(b.data, "200 OK");
    const char *cont = strstr(b.data, "HTTP/1.1 100 Continue\r\n\r\n");
    const char *second = strstr(b.data, "404 Not Found");
    assert_true(first && cont && second && first < cont && cont < second);
    buf_free(&b);
}

static void test_large_body_and_reasons(void **state)
{
    (void)state;
    struct buf b = BUF_INIT;
    static char big[1 << 20];
    memset(big, 'z', sizeof big);
    struct http_response r = {.status = 200, .body = big, .body_len = sizeof big};
    render(&r, &b);
    assert_non_null(strstr(b.data, "Content-Length: 1048576\r\n"));
    assert_int_equal(b.len - 1 - (size_t)(strstr(b.data, "\r\n\r\n") + 4 - b.data), sizeof big);
    assert_string_equal(http_status_reason(431), "Request Header Fields Too Large");
    assert_string_equal(http_status_reason(408), "Request Timeout");
    assert_string_equal(http_status_reason(413), "Content Too Large");
    assert_string_equal(http_status_reason(504), "Gateway Timeout");
    assert_string_equal(http_status_reason(299), "Unknown");
    buf_free(&b);
}

static void test_date_format(void **state)
{
    (void)state;
    char d[32];
    http_date_format(0, d);
    assert_string_equal(d, "Thu, 01 Jan 1970 00:00:00 GMT");
    http_date_format(1796206503, d);   /* 2026-12-02T10:15:03Z */
    assert_string_equal(d, DATE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_head_close_extra),
        cmocka_unit_test(test_appends_in_order),
        cmocka_unit_test(test_large_body_and_reasons),
        cmocka_unit_test(test_date_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
