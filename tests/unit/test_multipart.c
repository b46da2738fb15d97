/* test_multipart.c - multipart/form-data bodies (gateway/multipart.h): the
 * openai client's upload, quoted boundaries and names, a preamble, parts
 * without headers, and bodies that are not what their Content-Type says. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "gateway/multipart.h"

#define CT "multipart/form-data; boundary=b0undary"

static int parse(const char *ct, const char *body, struct multipart_part *parts, int max)
{
    return multipart_parse(ct, strlen(ct), body, strlen(body), parts, max);
}

static void test_openai_upload(void **s)
{
    (void)s;
    /* As httpx sends it for client.files.create(file=..., purpose="batch"). */
    const char *body = "--b0undary\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n"
                       "batch\r\n--b0undary\r\nContent-Disposition: form-data; name=\"file\"; "
                       "filename=\"in.jsonl\"\r\nContent-Type: application/octet-stream\r\n\r\n"
                       "{\"a\":1}\n\r\n{\"b\":2}\r\n--b0undary--\r\n";
    struct multipart_part p[4];
    assert_int_equal(parse(CT, body, p, 4), 2);
    assert_string_equal(p[0].name, "purpose");
    assert_string_equal(p[0].filename, "");
    assert_int_equal(p[0].len, 5);
    assert_memory_equal(p[0].data, "batch", 5);
    assert_string_equal(p[1].name, "file");
    assert_string_equal(p[1].filename, "in.jsonl");
    /* CRLFs inside the content are content: only CRLF--boundary ends it. */
    assert_int_equal(p[1].len, strlen("{\"a\":1}\n\r\n{\"b\":2}"));
    assert_memory_equal(p[1].data, "{\"a\":1}\n\r\n{\"b\":2}", p[1].len);
    /* More parts than room: the first `max`, the count of those kept. */
    assert_int_equal(parse(CT, body, p, 1), 1);
}

static void test_quoting_preamble_and_bare_parts(void **s)
{
    (void)s;
    struct multipart_part p[4];
    const char *body = "preamble to ignore\r\n--x y\r\nCONTENT-DISPOSITION: form-data; "
                       "NAME=purpose\r\n\r\nbatch\r\n--x y  \r\n\r\nno headers\r\n--x y--";
    assert_int_equal(parse("Multipart/Form-Data; charset=utf-8; boundary=\"x y\"", body, p, 4),
                     2);
    assert_string_equal(p[0].name, "purpose");
    assert_memory_equal(p[0].data, "batch", 5);
    assert_string_equal(p[1].name, "");
    assert_int_equal(p[1].len, 10);
    /* An empty part. */
    assert_int_equal(parse(CT, "--b0undary\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n"
                               "\r\n--b0undary--", p, 4), 1);
    assert_int_equal(p[0].len, 0);
    char out[8];
    assert_true(multipart_param("a=1; key=\"v\"", 12, "key", out, sizeof out));
    assert_string_equal(out, "v");
    assert_false(multipart_param("a=1; key=\"v", 11, "key", out, sizeof out));
    assert_false(multipart_param("akey=1", 6, "key", out, sizeof out));
    /* A quoted value holding "; name=": not the parameter (a filename
     * "a; name=file;b" named the part "file"). */
    const char *qd = "form-data; filename=\"a; name=file;b\"; name=\"notes\"";
    assert_true(multipart_param(qd, strlen(qd), "name", out, sizeof out));
    assert_string_equal(out, "notes");
    const char *q2 = "form-data; filename=\"x\\\"; name=file\"";
    assert_false(multipart_param(q2, strlen(q2), "name", out, sizeof out));
    assert_false(multipart_param("key=toolongvalue", 16, "key", out, sizeof out));
    /* A quoted-string's quoted-pairs are undone (RFC 9110 5.6.4): httpx
     * sends C:\\d\\a, and a quote as \". */
    char name[32];
    static const char cd[] = "form-data; name=\"file\"; filename=\"C:\\\\d\\\\a\\\"b.jsonl\"";
    assert_true(multipart_param(cd, sizeof cd - 1, "filename", name, sizeof name));
    assert_string_equal(name, "C:\\d\\a\"b.jsonl");
    assert_false(multipart_param("filename=\"a\\\"", 14, "filename", name, sizeof name));
    /* Too long for the room, or never closed: given, but not kept. */
    struct multipart_part q[2];
    char long_body[600];
    snprintf(long_body, sizeof long_body, "--b0undary\r\nContent-Disposition: form-data; name=\"file\"; "
             "filename=\"%0300d\"\r\n\r\nx\r\n--b0undary--", 0);
    assert_int_equal(parse(CT, long_body, q, 2), 1);
    assert_string_equal(q[0].filename, "");
    assert_true(q[0].filename_cut);
    assert_int_equal(parse(CT, "--b0undary\r\nContent-Disposition: form-data; name=\"file\"\r\n"
                               "\r\nx\r\n--b0undary--", q, 2), 1);
    assert_false(q[0].filename_cut);
    /* An empty filename is one, empty; not one cut (it was said to be too
     * long, or to hold a control character). */
    assert_int_equal(parse(CT, "--b0undary\r\nContent-Disposition: form-data; name=\"file\"; "
                               "filename=\"\"\r\n\r\nx\r\n--b0undary--", q, 2), 1);
    assert_string_equal(q[0].filename, "");
    assert_false(q[0].filename_cut);
}

static void test_refused(void **s)
{
    (void)s;
    struct multipart_part p[4];
    const char *ok = "--b0undary\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nx\r\n"
                     "--b0undary--";
    assert_int_equal(parse(CT, ok, p, 4), 1);
    assert_int_equal(parse("application/json", ok, p, 4), -1);
    assert_int_equal(parse("multipart/form-data", ok, p, 4), -1);          /* no boundary */
    assert_int_equal(parse("multipart/form-data; boundary=", ok, p, 4), -1);
    assert_int_equal(parse("multipart/form-data; boundary=other", ok, p, 4), -1);
    /* Cut before the closing delimiter, in the headers, or in a part. */
    assert_int_equal(parse(CT, "--b0undary\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n"
                               "x\r\n", p, 4), -1);
    assert_int_equal(parse(CT, "--b0undary\r\nContent-Disposition: form-da", p, 4), -1);
    assert_int_equal(parse(CT, "--b0undary\r\n", p, 4), -1);
    assert_int_equal(parse(CT, "--b0undary", p, 4), -1);
    assert_int_equal(parse(CT, "", p, 4), -1);
    /* Junk after a delimiter instead of CRLF. */
    assert_int_equal(parse(CT, "--b0undaryjunk\r\n\r\nx\r\n--b0undary--", p, 4), -1);
    assert_int_equal(multipart_parse(NULL, 0, ok, strlen(ok), p, 4), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_openai_upload),
        cmocka_unit_test(test_quoting_preamble_and_bare_parts),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
