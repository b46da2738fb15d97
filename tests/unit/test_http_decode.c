/* test_http_decode.c - http/decode: gzip, zlib and raw deflate bodies
 * inflate to what was compressed; a bomb stops at the limit (413) without
 * inflating further; corrupt, cut or trailing data is 400; an encoding not
 * served (or several stacked) is 415; identity is bounded too. And the
 * other way (http/encode.c): the coding an Accept-Encoding picks, and
 * answers compressed with one reused deflater inflate back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "common/buf.h"
#include "http/http.h"
#include "http/http_impl.h"

/* data compressed with windowBits wbits (31: gzip, 15: zlib, -15: raw). */
static size_t pack(const void *data, size_t len, int wbits, unsigned char *out, size_t cap)
{
    z_stream z = {0};
    assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, wbits, 9, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    size_t n = z.total_out;
    deflateEnd(&z);
    return n;
}

static int decode(const char *enc, const void *in, size_t len, size_t max, struct buf *out,
                  char *msg)
{
    buf_reset(out);
    return http_body_decode(enc, strlen(enc), in, len, max, out, msg, 256);
}

static void test_round_trips(void **state)
{
    (void)state;
    static const char text[] = "{\"inputs\":[{\"name\":\"x\",\"datatype\":\"FP32\",\"shape\":[1,4],"
                               "\"data\":[1,2,3,4]}]}";
    unsigned char z[512];
    char msg[256];
    struct buf out = BUF_INIT;
    static const struct {
        const char *enc;
        int wbits;
    } cases[] = {{"gzip", 31}, {"x-gzip", 31}, {" GZIP ", 31}, {"deflate", 15}, {"Deflate", -15}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = pack(text, sizeof text - 1, cases[i].wbits, z, sizeof z);
        assert_int_equal(decode(cases[i].enc, z, n, 1 << 20, &out, msg), 0);
        assert_int_equal(out.len, sizeof text - 1);
        assert_memory_equal(out.data, text, out.len);
    }
    assert_int_equal(decode("identity", text, 10, 1 << 20, &out, msg), 0);
    assert_int_equal(out.len, 10);
    assert_int_equal(decode("identity", text, 10, 9, &out, msg), 413);
    buf_free(&out);
}

static void test_refusals(void **state)
{
    (void)state;
    char msg[256];
    struct buf out = BUF_INIT;
    /* A bomb: 64 MiB of zeros in about 64 KiB, against a 1 MiB limit. */
    size_t big = 64u << 20;
    unsigned char *zeros = calloc(1, big), *z = malloc(1 << 20);
    assert_non_null(zeros);
    size_t n = pack(zeros, big, 31, z, 1 << 20);
    assert_true(n < 100000);
    assert_int_equal(decode("gzip", z, n, 1 << 20, &out, msg), 413);
    assert_non_null(strstr(msg, "inflates to more than limits.max_body_bytes (1048576 bytes)"));
    assert_int_equal(out.len, 0);
    assert_true(out.cap <= (4u << 20));   /* it stopped near the limit, far from 64 MiB */
    /* The same data exactly at the limit passes. */
    n = pack(zeros, 1 << 20, 31, z, 1 << 20);
    assert_int_equal(decode("gzip", z, n, 1 << 20, &out, msg), 0);
    assert_int_equal(out.len, 1 << 20);
    /* Cut short, corrupt, trailing bytes, not that format. */
    static const char text[] = "hello hello hello hello";
    n = pack(text, sizeof text - 1, 31, z, 1 << 20);
    assert_int_equal(decode("gzip", z, n - 5, 1 << 20, &out, msg), 400);
    assert_non_null(strstr(msg, "not valid gzip data"));
    unsigned char bad[64];
    memcpy(bad, z, n);
    bad[12] ^= 0x5a;
    assert_int_equal(decode("gzip", bad, n, 1 << 20, &out, msg), 400);
    memcpy(bad, z, n);
    memcpy(bad + n, "xyz", 3);
    assert_int_equal(decode("gzip", bad, n + 3, 1 << 20, &out, msg), 400);
    assert_non_null(strstr(msg, "3 bytes follow the end"));
    assert_int_equal(decode("gzip", text, sizeof text - 1, 1 << 20, &out, msg), 400);
    assert_non_null(strstr(msg, "no gzip header"));
    /* Members one after another are one body (RFC 1952 2.2), as gzip -d
     * reads them; the limit counts them all. */
    unsigned char two[128];
    memcpy(two, z, n);
    memcpy(two + n, z, n);
    assert_int_equal(decode("gzip", two, 2 * n, 1 << 20, &out, msg), 0);
    assert_int_equal(out.len, 2 * (sizeof text - 1));
    assert_memory_equal(out.data + sizeof text - 1, text, sizeof text - 1);
    assert_int_equal(decode("gzip", two, 2 * n, sizeof text, &out, msg), 413);
    assert_int_equal(decode("deflate", "\xff\xff\xff\xff", 4, 1 << 20, &out, msg), 400);
    /* Not served. */
    assert_int_equal(decode("br", text, 5, 1 << 20, &out, msg), 415);
    assert_non_null(strstr(msg, "\"br\" is not served"));
    assert_int_equal(decode("gzip, deflate", text, 5, 1 << 20, &out, msg), 415);
    free(zeros);
    free(z);
    buf_free(&out);
}

static void test_accept_encoding_pick(void **state)
{
    (void)state;
    static const struct {
        const char *v;
        enum http_coding want;
    } cases[] = {
        {"gzip", HTTP_CODING_GZIP},
        {"gzip, deflate", HTTP_CODING_GZIP},
        {"deflate, gzip", HTTP_CODING_GZIP},            /* a tie: gzip */
        {"deflate", HTTP_CODING_DEFLATE},
        {"identity,deflate,gzip", HTTP_CODING_GZIP},    /* grpc-accept-encoding */
        {"x-gzip", HTTP_CODING_GZIP},
        {"GZIP", HTTP_CODING_GZIP},
        {"gzip;q=0.5, deflate;q=0.8", HTTP_CODING_DEFLATE},
        {"gzip ; q=0.9 , deflate ; Q=0.3", HTTP_CODING_GZIP},
        {"gzip;q=0", HTTP_CODING_IDENTITY},
        {"gzip;q=0.000, deflate;q=0", HTTP_CODING_IDENTITY},
        {"*", HTTP_CODING_GZIP},
        {"*;q=0.1, gzip;q=0", HTTP_CODING_DEFLATE},   /* * covers what is not named */
        {"br, zstd", HTTP_CODING_IDENTITY},
        {"identity", HTTP_CODING_IDENTITY},
        {"", HTTP_CODING_IDENTITY},
        {" , ,, ", HTTP_CODING_IDENTITY},
        {"gzip;q=2", HTTP_CODING_IDENTITY},           /* not a qvalue: the element is dropped */
        {"gzip;q=0.5x, deflate", HTTP_CODING_DEFLATE},
        {"gzip;q=1.0001", HTTP_CODING_IDENTITY},
        {"gzip;level=9", HTTP_CODING_GZIP},           /* other parameters do not count */
        {"gzipx, deflatex", HTTP_CODING_IDENTITY},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum http_coding got = http_coding_pick(cases[i].v, strlen(cases[i].v));
        if (got != cases[i].want)
            fail_msg("\"%s\": %s, want %s", cases[i].v, http_coding_name(got),
                     http_coding_name(cases[i].want));
    }
}

static void test_encode_round_trips(void **state)
{
    (void)state;
    struct http_deflater *d = NULL;
    struct buf z = BUF_INIT, back = BUF_INIT;
    char msg[256];
    size_t n = 300000;
    char *text = malloc(n);
    assert_non_null(text);
    for (size_t i = 0; i < n; i++)
        text[i] = "{\"y\": [0.25, 1.5]}, "[i % 20] ^ (char)((i / 997) & 1);
    /* Both codings, each twice through the same deflater (reset, not
     * remade), at two levels, and sizes from one byte. */
    static const size_t sizes[] = {1, 100, 65536, 300000};
    for (int c = HTTP_CODING_GZIP; c <= HTTP_CODING_DEFLATE; c++)
        for (int rep = 0; rep < 2; rep++)
            for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
                buf_reset(&z);
                buf_reset(&back);
                assert_int_equal(buf_append(&z, "pre", 3), 0);   /* appended after it */
                assert_int_equal(http_coding_encode(&d, (enum http_coding)c, rep ? 9 : 1, text,
                                                    sizes[k], &z), 0);
                const char *name = http_coding_name((enum http_coding)c);
                assert_memory_equal(z.data, "pre", 3);
                assert_int_equal(http_body_decode(name, strlen(name), z.data + 3, z.len - 3,
                                                  1 << 20, &back, msg, sizeof msg), 0);
                assert_int_equal(back.len, sizes[k]);
                assert_memory_equal(back.data, text, sizes[k]);
                if (sizes[k] >= 65536)
                    assert_true(z.len - 3 < sizes[k] / 4);
            }
    assert_int_equal(http_coding_encode(&d, HTTP_CODING_IDENTITY, 1, text, 10, &z), -1);
    http_deflater_free(d);
    http_deflater_free(NULL);
    free(text);
    buf_free(&z);
    buf_free(&back);
}

/* What an answer leaves as: small, packed or refused-by-the-client
 * answers as they are; a deflater that fails (here an impossible level,
 * as out of memory would) falls back to the plain body, still with Vary. */
static void test_answer_encode(void **state)
{
    (void)state;
    struct http_compression on = {.responses = true, .min_bytes = 64, .level = 1};
    struct http_deflater *d = NULL;
    struct buf z = BUF_INIT, h = BUF_INIT;
    char body[4096];
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = "0.125, "[i % 7];
    const char *gz = "gzip";
    /* Compressed: Content-Encoding and Vary, the extra headers kept. */
    assert_int_equal(http_answer_encode(&on, &d, gz, 4, "application/json", body, sizeof body,
                                        "X-A: 1\r\n", &z, &h), 2);
    assert_string_equal(h.data, "X-A: 1\r\nVary: Accept-Encoding\r\nContent-Encoding: gzip\r\n");
    assert_true(z.len < sizeof body / 4);
    /* The client takes none: the body as it is, Vary still said. */
    buf_reset(&z);
    buf_reset(&h);
    assert_int_equal(http_answer_encode(&on, &d, NULL, 0, "application/json", body, sizeof body,
                                        NULL, &z, &h), 1);
    assert_string_equal(h.data, "Vary: Accept-Encoding\r\n");
    /* Too small, already packed, off, or its own Content-Encoding: untouched. */
    buf_reset(&h);
    assert_int_equal(http_answer_encode(&on, &d, gz, 4, "application/json", body, 63, NULL, &z,
                                        &h), 0);
    assert_int_equal(http_answer_encode(&on, &d, gz, 4, "image/png", body, sizeof body, NULL, &z,
                                        &h), 0);
    assert_int_equal(http_answer_encode(&on, &d, gz, 4, "text/plain", body, sizeof body,
                                        "Content-Encoding: br\r\n", &z, &h), 0);
    struct http_compression off = on;
    off.responses = false;
    assert_int_equal(http_answer_encode(&off, &d, gz, 4, "text/plain", body, sizeof body, NULL,
                                        &z, &h), 0);
    assert_int_equal(h.len, 0);
    /* The deflater fails: the plain body, no Content-Encoding. */
    struct http_compression broken = on;
    broken.level = 42;
    struct http_deflater *d2 = NULL;
    buf_reset(&z);
    assert_int_equal(http_answer_encode(&broken, &d2, gz, 4, "application/json", body,
                                        sizeof body, NULL, &z, &h), 1);
    assert_string_equal(h.data, "Vary: Accept-Encoding\r\n");
    /* Bytes that do not shrink leave as they are. */
    uint32_t x = 1;
    for (size_t i = 0; i < sizeof body; i++) {
        x = x * 1664525u + 1013904223u;
        body[i] = (char)(x >> 24);
    }
    buf_reset(&z);
    buf_reset(&h);
    assert_int_equal(http_answer_encode(&on, &d, gz, 4, "application/octet-stream", body,
                                        sizeof body, NULL, &z, &h), 1);
    assert_string_equal(h.data, "Vary: Accept-Encoding\r\n");
    http_deflater_free(d);
    http_deflater_free(d2);
    buf_free(&z);
    buf_free(&h);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_accept_encoding_pick),
        cmocka_unit_test(test_encode_round_trips),
        cmocka_unit_test(test_answer_encode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
