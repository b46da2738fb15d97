/* test_sha256.c - SHA-256 against the FIPS 180-4 / NIST example messages
 * (empty, "abc", the 448- and 896-bit messages, a million 'a'), messages
 * around the padding boundaries, and streaming split at every point. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/sha256.h"

static void assert_digest(const void *msg, size_t len, const char *want)
{
    uint8_t d[SHA256_DIGEST_LEN];
    char hex[2 * SHA256_DIGEST_LEN + 1];
    sha256(msg, len, d);
    sha256_hex(d, hex);
    if (strcmp(hex, want) != 0)
        fail_msg("sha256 of %zu bytes: got %s, want %s", len, hex, want);
}

static void test_nist_vectors(void **state)
{
    (void)state;
    assert_digest("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_digest("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    assert_digest(m448, strlen(m448),
                  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmno"
                       "ijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    assert_digest(m896, strlen(m896),
                  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

static void test_million_a(void **state)
{
    (void)state;
    char *m = malloc(1000000);
    assert_non_null(m);
    memset(m, 'a', 1000000);
    assert_digest(m, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* The same fed 1000 bytes at a time. */
    struct sha256 s;
    uint8_t d[SHA256_DIGEST_LEN];
    char hex[2 * SHA256_DIGEST_LEN + 1];
    sha256_init(&s);
    for (int i = 0; i < 1000; i++)
        sha256_update(&s, m + 1000 * i, 1000);
    sha256_final(&s, d);
    sha256_hex(d, hex);
    assert_string_equal(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(m);
}

/* 55 bytes is the most whose padding fits one block; 56..63 need a second. */
static void test_padding_boundaries(void **state)
{
    (void)state;
    static const struct {
        size_t n;
        const char *hex;
    } v[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
        {119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
        {120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55af904c21c"},
    };
    char m[128];
    memset(m, 'a', sizeof m);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        assert_digest(m, v[i].n, v[i].hex);
}

static void test_streaming_any_split(void **state)
{
    (void)state;
    uint8_t msg[200];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (uint8_t)(i * 7 + 3);
    uint8_t whole[SHA256_DIGEST_LEN];
    sha256(msg, sizeof msg, whole);
    for (size_t a = 0; a <= sizeof msg; a++) {
        for (size_t b = a; b <= sizeof msg; b += 17) {
            struct sha256 s;
            uint8_t d[SHA256_DIGEST_LEN];
            sha256_init(&s);
            sha256_update(&s, msg, a);
            sha256_update(&s, msg + a, b - a);
            sha256_update(&s, msg + b, sizeof msg - b);
            sha256_final(&s, d);
            if (memcmp(d, whole, sizeof d) != 0)
                fail_msg("split at %zu and %zu differs from the one-shot digest", a, b);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nist_vectors),
        cmocka_unit_test(test_million_a),
        cmocka_unit_test(test_padding_boundaries),
        cmocka_unit_test(test_streaming_any_split),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
