/* test_safetensors.c - the safetensors loader: valid files read back exactly,
 * and every kind of broken file rejected with a message naming the problem.
 *
 * Files are built here (header JSON + data) in a temp dir. The same cases,
 * written out with `test_safetensors --write-corpus DIR`, are committed under
 * tests/data/safetensors/ as fuzzer seeds; test_committed_corpus checks them,
 * together with python_reference.safetensors, written by the reference
 * Python library (scripts/make_safetensors_corpus.py).
 *
 * Over 700 lines because it is one binary per module: each malformed header,
 * offset, dtype and shape the loader must refuse has its own small case.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/buf.h"
#include "backends/safetensors.h"
#include "tests/unit/scratch.h"

/* ---- building files ---------------------------------------------------- */

/* 8-byte LE length, header JSON, pad bytes, data (0xa5 bytes when data is
 * NULL). hlen, when not NULL, overrides the length field. */
static void build(struct buf *b, const char *json, size_t json_len, size_t pad, char pad_char,
                  const uint64_t *hlen, const void *data, size_t data_len)
{
    unsigned char le[8];
    uint64_t n = hlen ? *hlen : json_len + pad;
    for (int i = 0; i < 8; i++)
        le[i] = (unsigned char)(n >> (8 * i));
    buf_reset(b);
    assert_int_equal(buf_append(b, le, 8), 0);
    assert_int_equal(buf_append(b, json, json_len), 0);
    for (size_t i = 0; i < pad; i++)
        assert_int_equal(buf_append(b, &pad_char, 1), 0);
    if (data_len) {
        if (data) {
            assert_int_equal(buf_append(b, data, data_len), 0);
        } else {
            assert_int_equal(buf_reserve(b, data_len), 0);
            memset(b->data + b->len, 0xa5, data_len);
            b->len += data_len;
        }
    }
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        fail_msg("cannot create %s: %s", path, strerror(errno));
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

struct fixture {
    char dir[256];
    char path[512];    /* the file of the test at hand */
};

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof *fx);
    if (!fx)
        return -1;
    test_scratch_template(fx->dir, sizeof fx->dir, "safetensors");
    if (!mkdtemp(fx->dir)) {
        free(fx);
        return -1;
    }
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    rmdir(fx->dir);
    free(fx);
    return 0;
}

/* Writes b to <dir>/<name> and returns that path (valid until the next call). */
static const char *put_file(struct fixture *fx, const char *name, const struct buf *b)
{
    snprintf(fx->path, sizeof fx->path, "%s/%s", fx->dir, name);
    write_bytes(fx->path, b->data, b->len);
    return fx->path;
}

#define ENTRY(name, dt, shape, b, e)                                                    \
    "\"" name "\": {\"dtype\": \"" dt "\", \"shape\": " shape ", \"data_offsets\": [" #b \
    ", " #e "]}"

/* ---- broken files ------------------------------------------------------ */

struct bad_case {
    const char *id;            /* also the corpus file name: bad_<id>.safetensors */
    const char *json;
    size_t data_len;
    int set_hlen;              /* when set, the length field is hlen */
    uint64_t hlen;
    int cut;                   /* when set, keep only the first `keep` bytes */
    size_t keep;
    size_t drop;               /* bytes cut off the end */
    size_t pad;                /* pad_char bytes after the JSON, counted in the length */
    char pad_char;
    const char *m1, *m2;       /* the message must mention both */
};

static const struct bad_case bad_cases[] = {
    {.id = "empty_file", .json = "{}", .cut = 1, .keep = 0, .m1 = "0 bytes", .m2 = "too short"},
    {.id = "short_file", .json = "{}", .cut = 1, .keep = 5, .m1 = "5 bytes", .m2 = "too short"},
    {.id = "length_only", .json = "{}", .cut = 1, .keep = 8, .m1 = "header length 2",
     .m2 = "only 0 bytes"},
    {.id = "header_len_zero", .json = "{}", .set_hlen = 1, .hlen = 0,
     .m1 = "header length is 0"},
    {.id = "header_len_absurd", .json = "{}", .set_hlen = 1, .hlen = 1ull << 63,
     .m1 = "header length 9223372036854775808", .m2 = "100000000-byte limit"},
    {.id = "header_len_past_file", .json = "{}", .set_hlen = 1, .hlen = 1000,
     .m1 = "header length 1000",
     .m2 = "only 2 bytes"},
    {.id = "cut_in_header", .json = "{" ENTRY("w", "F32", "[2]", 0, 8) "}", .data_len = 8,
     .cut = 1, .keep = 8 + 20, .m1 = "only 20 bytes", .m2 = "truncated"},
    {.id = "cut_in_data", .json = "{" ENTRY("w", "F32", "[6]", 0, 24) "}", .data_len = 24,
     .drop = 4, .m1 = "tensor \"w\": data_offsets [0, 24] end past the 20-byte data buffer"},
    {.id = "not_json", .json = "{\"w\": {\"dtype\": ", .m1 = "not valid JSON",
     .m2 = "header byte"},
    {.id = "not_utf8", .json = "{\"\xff\xfe\": {}}", .m1 = "not valid JSON"},
    {.id = "nul_padding", .json = "{}", .pad = 6, .pad_char = '\0', .m1 = "not valid JSON"},
    {.id = "trailing_garbage", .json = "{} x", .m1 = "not valid JSON"},
    {.id = "huge_integer", .json = "{" ENTRY("w", "F32", "[1]", 0, 18446744073709551616) "}",
     .data_len = 4, .m1 = "not valid JSON", .m2 = "too big"},
    {.id = "json_array", .json = "[1, 2]", .m1 = "must be a JSON object", .m2 = "an array"},
    {.id = "entry_not_object", .json = "{\"w\": [0, 4]}", .m1 = "tensor \"w\"",
     .m2 = "entry must be an object, not an array"},
    {.id = "missing_offsets", .json = "{\"w\": {\"dtype\": \"F32\", \"shape\": [1]}}",
     .m1 = "tensor \"w\"", .m2 = "missing \"data_offsets\""},
    {.id = "extra_field",
     .json = "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4], "
             "\"offsets\": [0, 4]}}",
     .data_len = 4, .m1 = "tensor \"w\"", .m2 = "unknown field \"offsets\""},
    {.id = "dtype_not_string",
     .json = "{\"w\": {\"dtype\": 4, \"shape\": [1], \"data_offsets\": [0, 4]}}", .data_len = 4,
     .m1 = "tensor \"w\"", .m2 = "dtype must be a string, not an integer"},
    {.id = "dtype_unknown", .json = "{" ENTRY("w", "F33", "[1]", 0, 4) "}", .data_len = 4,
     .m1 = "tensor \"w\"", .m2 = "unknown dtype \"F33\""},
    {.id = "dtype_lowercase", .json = "{" ENTRY("w", "f32", "[1]", 0, 4) "}", .data_len = 4,
     .m1 = "unknown dtype \"f32\""},
    {.id = "shape_not_array", .json = "{" ENTRY("w", "F32", "4", 0, 16) "}", .data_len = 16,
     .m1 = "tensor \"w\"", .m2 = "shape must be an array, not an integer"},
    {.id = "shape_negative", .json = "{" ENTRY("w", "F32", "[2, -3]", 0, 24) "}",
     .data_len = 24, .m1 = "tensor \"w\"", .m2 = "shape[1] is -3"},
    {.id = "shape_real", .json = "{" ENTRY("w", "F32", "[1.0]", 0, 4) "}", .data_len = 4,
     .m1 = "shape[0] must be a non-negative integer", .m2 = "a real number"},
    {.id = "shape_string", .json = "{" ENTRY("w", "F32", "[\"2\"]", 0, 8) "}", .data_len = 8,
     .m1 = "shape[0]", .m2 = "a string"},
    {.id = "too_many_dims", .json = "{" ENTRY("w", "F32", "[1, 1, 1, 1, 1, 1, 1, 1, 1]", 0, 4) "}",
     .data_len = 4, .m1 = "shape has 9 dimensions", .m2 = "at most 8"},
    {.id = "offsets_single",
     .json = "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4]}}", .data_len = 4,
     .m1 = "data_offsets [4] must be [begin, end]"},
    {.id = "offsets_negative", .json = "{" ENTRY("w", "F32", "[1]", -4, 0) "}", .data_len = 4,
     .m1 = "tensor \"w\"", .m2 = "data_offsets [-4, 0] must be [begin, end]"},
    {.id = "offsets_not_array",
     .json = "{\"w\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": \"0-4\"}}",
     .data_len = 4, .m1 = "data_offsets \"0-4\" must be"},
    {.id = "end_before_begin", .json = "{" ENTRY("w", "F32", "[1]", 8, 4) "}", .data_len = 8,
     .m1 = "tensor \"w\"", .m2 = "data_offsets [8, 4] end before begin"},
    {.id = "offsets_past_end", .json = "{" ENTRY("w", "F32", "[100]", 0, 400) "}",
     .data_len = 16, .m1 = "data_offsets [0, 400] end past the 16-byte data buffer"},
    {.id = "size_mismatch", .json = "{" ENTRY("0.weight", "F32", "[5, 6]", 0, 100) "}",
     .data_len = 100,
     .m1 = "tensor \"0.weight\": data_offsets [0, 100] hold 100 bytes but F32 [5, 6] needs 120"},
    {.id = "size_mismatch_scalar", .json = "{" ENTRY("s", "F16", "[]", 0, 4) "}", .data_len = 4,
     .m1 = "hold 4 bytes but F16 [] needs 2"},
    {.id = "product_overflow",
     .json = "{" ENTRY("w", "F32", "[1099511627776, 1099511627776]", 0, 4) "}", .data_len = 4,
     .m1 = "F32 [1099511627776, 1099511627776]", .m2 = "more elements than 64 bits"},
    {.id = "bytes_overflow", .json = "{" ENTRY("w", "F64", "[4611686018427387904]", 0, 8) "}",
     .data_len = 8, .m1 = "F64 [4611686018427387904]", .m2 = "overflows 64 bits"},
    {.id = "subbyte_partial", .json = "{" ENTRY("w", "F4", "[3]", 0, 2) "}", .data_len = 2,
     .m1 = "F4 [3] is 12 bits", .m2 = "whole number of bytes"},
    {.id = "overlap",
     .json = "{" ENTRY("a", "F32", "[2]", 0, 8) ", " ENTRY("b", "F32", "[2]", 4, 12) "}",
     .data_len = 12, .m1 = "tensors \"a\" [0, 8] and \"b\" [4, 12] overlap"},
    {.id = "overlap_same",
     .json = "{" ENTRY("a", "F32", "[2]", 0, 8) ", " ENTRY("b", "I32", "[2]", 0, 8) "}",
     .data_len = 8, .m1 = "[0, 8]", .m2 = "overlap"},
    {.id = "overlap_inside",
     .json = "{" ENTRY("big", "F32", "[4]", 0, 16) ", " ENTRY("x", "F16", "[1]", 20, 22) ", "
             ENTRY("small", "F16", "[2]", 8, 12) "}",
     .data_len = 22, .m1 = "tensors \"big\" [0, 16] and \"small\" [8, 12] overlap"},
    {.id = "duplicate_key",
     .json = "{" ENTRY("w", "F32", "[1]", 0, 4) ", " ENTRY("w", "F32", "[1]", 4, 8) "}",
     .data_len = 8, .m1 = "not valid JSON", .m2 = "duplicate"},
    {.id = "metadata_not_string",
     .json = "{\"__metadata__\": {\"format\": \"pt\", \"epoch\": 3}}",
     .m1 = "__metadata__ \"epoch\" must be a string, not an integer"},
    {.id = "metadata_not_object", .json = "{\"__metadata__\": [\"pt\"]}",
     .m1 = "__metadata__ must be an object of strings, not an array"},
};

static void make_bad(struct buf *b, const struct bad_case *c)
{
    build(b, c->json, strlen(c->json), c->pad, c->pad_char, c->set_hlen ? &c->hlen : NULL,
          NULL, c->data_len);
    if (c->cut)
        b->len = c->keep;
    b->len -= c->drop;
}

static void assert_mentions(const struct error *err, const char *a, const char *b)
{
    if ((a && !strstr(err->msg, a)) || (b && !strstr(err->msg, b)))
        fail_msg("error \"%s\" should mention \"%s\"%s%s", err->msg, a ? a : "",
                 b ? " and " : "", b ? b : "");
}

static void test_broken_files(void **state)
{
    struct fixture *fx = *state;
    struct buf b = BUF_INIT;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        const struct bad_case *c = &bad_cases[i];
        make_bad(&b, c);
        const char *path = put_file(fx, "bad.safetensors", &b);
        struct safetensors *st = (void *)1;
        struct error err = {0};
        int rc = safetensors_open(path, &st, &err);
        if (rc != -BG_EINVAL)
            fail_msg("case %s: expected -BG_EINVAL, got %d (%s)", c->id, rc, err.msg);
        assert_null(st);
        assert_int_equal(err.code, BG_EINVAL);
        assert_mentions(&err, path, NULL);
        assert_mentions(&err, c->m1, c->m2);
        unlink(path);
    }
    buf_free(&b);
}

static void test_cannot_open(void **state)
{
    struct fixture *fx = *state;
    struct safetensors *st;
    struct error err = {0};
    char path[320];
    snprintf(path, sizeof path, "%s/missing.safetensors", fx->dir);
    assert_int_equal(safetensors_open(path, &st, &err), -BG_EIO);
    assert_null(st);
    assert_mentions(&err, path, "cannot open");
    assert_int_equal(safetensors_open(fx->dir, &st, &err), -BG_EIO);
    assert_mentions(&err, fx->dir, "not a regular file");
}

/* A name from the file is shown cut short and without control bytes. */
static void test_hostile_name_in_message(void **state)
{
    struct fixture *fx = *state;
    struct buf json = BUF_INIT, b = BUF_INIT;
    assert_int_equal(buf_appendf(&json, "{\"evil\\nline\\u001b["), 0);
    for (int i = 0; i < 5000; i++)
        assert_int_equal(buf_append(&json, "x", 1), 0);
    assert_int_equal(buf_appendf(&json, "\": {\"dtype\": \"F99\", \"shape\": [], "
                                        "\"data_offsets\": [0, 4]}}"), 0);
    build(&b, json.data, json.len, 0, ' ', NULL, NULL, 4);
    const char *path = put_file(fx, "name.safetensors", &b);
    struct safetensors *st;
    struct error err = {0};
    assert_int_equal(safetensors_open(path, &st, &err), -BG_EINVAL);
    assert_mentions(&err, "tensor \"evil?line?[xxx", "...\": unknown dtype \"F99\"");
    assert_null(strchr(err.msg, '\n'));
    assert_null(strchr(err.msg, '\x1b'));
    unlink(path);
    buf_free(&json);
    buf_free(&b);
}

/* jansson bounds its nesting depth, so this is an error and not a stack overflow. */
static void test_deep_nesting(void **state)
{
    struct fixture *fx = *state;
    struct buf json = BUF_INIT, b = BUF_INIT;
    assert_int_equal(buf_append(&json, "{\"w\": ", 6), 0);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(buf_append(&json, "[", 1), 0);
    for (int i = 0; i < 100000; i++)
        assert_int_equal(buf_append(&json, "]", 1), 0);
    assert_int_equal(buf_append(&json, "}", 1), 0);
    build(&b, json.data, json.len, 0, ' ', NULL, NULL, 0);
    const char *path = put_file(fx, "deep.safetensors", &b);
    struct safetensors *st;
    struct error err = {0};
    assert_int_equal(safetensors_open(path, &st, &err), -BG_EINVAL);
    assert_mentions(&err, "not valid JSON", NULL);
    unlink(path);
    buf_free(&json);
    buf_free(&b);
}

/* ---- valid files ------------------------------------------------------- */

static void put_f32(unsigned char *p, float v) { memcpy(p, &v, 4); }
static void put_u16(unsigned char *p, uint16_t v) { memcpy(p, &v, 2); }

static float get_f32(const struct st_tensor *t, int64_t i)
{
    float v;
    memcpy(&v, (const unsigned char *)t->data + 4 * i, 4);
    return v;
}

static uint16_t get_u16(const struct st_tensor *t, int64_t i)
{
    uint16_t v;
    memcpy(&v, (const unsigned char *)t->data + 2 * i, 2);
    return v;
}

static const float w_values[6] = {-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f};
static const float h_values[4] = {1.0f, -2.5f, 65504.0f, 0.00006103515625f};
static const float b_values[4] = {1.0f, -0.5f, 256.0f, 0.1f};

/* The JSON lists tensors out of file order; an odd header length leaves
 * every tensor unaligned; spaces pad the header. The reference library
 * accepts this file too. */
static void make_model(struct buf *b)
{
    static const char json[] =
        "{\"__metadata__\": {\"format\": \"pt\", \"note\": \"gr\xc3\xbc\xc3\x9f\"}, "
        ENTRY("w", "F32", "[2, 3]", 4, 28) ", "
        ENTRY("s", "F32", "[]", 0, 4) ", "
        ENTRY("i", "I64", "[2]", 44, 60) ", "
        ENTRY("h", "F16", "[4]", 28, 36) ", "
        ENTRY("e", "F32", "[0, 3]", 60, 60) ", "
        ENTRY("b", "BF16", "[2, 2]", 36, 44) "}";
    unsigned char data[60];
    put_f32(data + 0, 3.25f);
    for (int k = 0; k < 6; k++)
        put_f32(data + 4 + 4 * k, w_values[k]);
    for (int k = 0; k < 4; k++)
        put_u16(data + 28 + 2 * k, dtype_f32_to_f16(h_values[k]));
    for (int k = 0; k < 4; k++)
        put_u16(data + 36 + 2 * k, dtype_f32_to_bf16(b_values[k]));
    int64_t iv[2] = {7, -9};
    memcpy(data + 44, iv, 16);
    size_t len = sizeof json - 1;
    size_t pad = 3;
    while ((8 + len + pad) % 8 != 1)
        pad++;
    build(b, json, len, pad, ' ', NULL, data, sizeof data);
}

static void check_model(const struct safetensors *st, size_t file_bytes)
{
    assert_int_equal(safetensors_count(st), 6);
    assert_int_equal(safetensors_file_bytes(st), file_bytes);
    static const char *const order[6] = {"s", "w", "h", "b", "i", "e"};
    for (int k = 0; k < 6; k++) {
        const struct st_tensor *t = safetensors_at(st, k);
        assert_non_null(t);
        assert_string_equal(t->name, order[k]);
        assert_ptr_equal(safetensors_find(st, order[k]), t);
    }
    assert_null(safetensors_at(st, 6));
    assert_null(safetensors_at(st, -1));
    assert_null(safetensors_find(st, "x"));
    assert_null(safetensors_find(st, "__metadata__"));

    const struct st_tensor *s = safetensors_find(st, "s");
    assert_int_equal(s->ndim, 0);
    assert_int_equal(s->nelem, 1);
    assert_int_equal(s->nbytes, 4);
    assert_true(s->usable);
    assert_int_equal(s->dtype, DTYPE_F32);
    assert_true(get_f32(s, 0) == 3.25f);

    const struct st_tensor *w = safetensors_find(st, "w");
    assert_string_equal(w->dtype_name, "F32");
    assert_int_equal(w->ndim, 2);
    assert_int_equal(w->shape[0], 2);
    assert_int_equal(w->shape[1], 3);
    assert_int_equal(w->nelem, 6);
    assert_int_equal(w->nbytes, 24);
    assert_ptr_equal((const char *)w->data, (const char *)s->data + 4);
    for (int k = 0; k < 6; k++)
        assert_true(get_f32(w, k) == w_values[k]);

    const struct st_tensor *h = safetensors_find(st, "h");
    assert_true(h->usable);
    assert_int_equal(h->dtype, DTYPE_F16);
    assert_int_equal(h->nbytes, 8);
    for (int k = 0; k < 4; k++)
        assert_true(dtype_f16_to_f32(get_u16(h, k)) == h_values[k]);

    const struct st_tensor *bf = safetensors_find(st, "b");
    assert_true(bf->usable);
    assert_int_equal(bf->dtype, DTYPE_BF16);
    assert_string_equal(bf->dtype_name, "BF16");
    for (int k = 0; k < 3; k++)
        assert_true(dtype_bf16_to_f32(get_u16(bf, k)) == b_values[k]);
    assert_int_equal(get_u16(bf, 3), 0x3dcd);            /* 0.1 rounded to BF16 */

    const struct st_tensor *i = safetensors_find(st, "i");
    assert_false(i->usable);
    assert_string_equal(i->dtype_name, "I64");
    int64_t iv[2];
    memcpy(iv, i->data, 16);
    assert_int_equal(iv[0], 7);
    assert_int_equal(iv[1], -9);

    const struct st_tensor *e = safetensors_find(st, "e");
    assert_int_equal(e->ndim, 2);
    assert_int_equal(e->shape[0], 0);
    assert_int_equal(e->nelem, 0);
    assert_int_equal(e->nbytes, 0);
}

static void test_model_values(void **state)
{
    struct fixture *fx = *state;
    struct buf b = BUF_INIT;
    make_model(&b);
    const char *path = put_file(fx, "model.safetensors", &b);
    struct safetensors *st = NULL;
    struct error err = {0};
    if (safetensors_open(path, &st, &err) != 0)
        fail_msg("%s", err.msg);
    assert_string_equal(safetensors_path(st), path);
    check_model(st, b.len);
    assert_true(((uintptr_t)safetensors_find(st, "s")->data & 3) != 0);   /* really unaligned */
    assert_true(((uintptr_t)safetensors_find(st, "w")->data & 3) != 0);

    assert_string_equal(safetensors_metadata(st, "format"), "pt");
    assert_string_equal(safetensors_metadata(st, "note"), "gr\xc3\xbc\xc3\x9f");
    assert_null(safetensors_metadata(st, "missing"));

    const struct st_tensor *t = NULL;
    assert_int_equal(safetensors_weight(st, "h", &t, &err), 0);
    assert_ptr_equal(t, safetensors_find(st, "h"));
    assert_int_equal(safetensors_weight(st, "i", &t, &err), -BG_EINVAL);
    assert_null(t);
    assert_mentions(&err, path, "tensor \"i\" is I64; weights must be F32, F16 or BF16");
    assert_int_equal(safetensors_weight(st, "nope", &t, &err), -BG_EINVAL);
    assert_mentions(&err, path, "no tensor \"nope\"");
    safetensors_close(st);
    safetensors_close(NULL);
    unlink(path);
    buf_free(&b);
}

/* Empty header, empty data buffer: nothing to map beyond the header. */
static void make_empty(struct buf *b) { build(b, "{}", 2, 0, ' ', NULL, NULL, 0); }

static void test_empty(void **state)
{
    struct fixture *fx = *state;
    struct buf b = BUF_INIT;
    static const char *const headers[] = {
        "{}", "{\"__metadata__\": {}}", "{\"__metadata__\": null}",
        "{" ENTRY("z", "F32", "[0]", 0, 0) ", " ENTRY("y", "BF16", "[3, 0, 2]", 0, 0) "}",
    };
    for (size_t k = 0; k < sizeof headers / sizeof headers[0]; k++) {
        build(&b, headers[k], strlen(headers[k]), k, ' ', NULL, NULL, 0);
        const char *path = put_file(fx, "empty.safetensors", &b);
        struct safetensors *st;
        struct error err = {0};
        if (safetensors_open(path, &st, &err) != 0)
            fail_msg("%s: %s", headers[k], err.msg);
        assert_int_equal(safetensors_count(st), k == 3 ? 2 : 0);
        assert_null(safetensors_metadata(st, "format"));
        for (int i = 0; i < safetensors_count(st); i++)
            assert_int_equal(safetensors_at(st, i)->nbytes, 0);
        safetensors_close(st);
        unlink(path);
    }
    buf_free(&b);
}

/* One tensor of every dtype the format has, shape [4], back to back. */
static void make_all_dtypes(struct buf *b)
{
    static const struct { const char *name; size_t bytes4; } dts[] = {
        {"BOOL", 4}, {"U8", 4}, {"I8", 4}, {"I16", 8}, {"U16", 8}, {"F16", 8}, {"BF16", 8},
        {"I32", 16}, {"U32", 16}, {"F32", 16}, {"F64", 32}, {"I64", 32}, {"U64", 32},
        {"C64", 32}, {"F8_E4M3", 4}, {"F8_E5M2", 4}, {"F8_E8M0", 4}, {"F8_E4M3FNUZ", 4},
        {"F8_E5M2FNUZ", 4}, {"F6_E2M3", 3}, {"F6_E3M2", 3}, {"F4", 2},
    };
    struct buf json = BUF_INIT;
    size_t off = 0;
    assert_int_equal(buf_appendf(&json, "{"), 0);
    for (size_t k = 0; k < sizeof dts / sizeof dts[0]; k++) {
        assert_int_equal(buf_appendf(&json, "%s\"t_%s\": {\"dtype\": \"%s\", \"shape\": [4], "
                                     "\"data_offsets\": [%zu, %zu]}", k ? ", " : "",
                                     dts[k].name, dts[k].name, off, off + dts[k].bytes4), 0);
        off += dts[k].bytes4;
    }
    assert_int_equal(buf_appendf(&json, "}"), 0);
    build(b, json.data, json.len, 0, ' ', NULL, NULL, off);
    buf_free(&json);
}

static void test_all_dtypes(void **state)
{
    struct fixture *fx = *state;
    struct buf b = BUF_INIT;
    make_all_dtypes(&b);
    const char *path = put_file(fx, "dtypes.safetensors", &b);
    struct safetensors *st;
    struct error err = {0};
    if (safetensors_open(path, &st, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(safetensors_count(st), 22);
    for (int k = 0; k < safetensors_count(st); k++) {
        const struct st_tensor *t = safetensors_at(st, k);
        assert_string_equal(t->name + 2, t->dtype_name);
        int usable = !strcmp(t->dtype_name, "F32") || !strcmp(t->dtype_name, "F16") ||
                     !strcmp(t->dtype_name, "BF16");
        assert_int_equal(t->usable, usable);
        assert_int_equal(t->nelem, 4);
        const struct st_tensor *w;
        assert_int_equal(safetensors_weight(st, t->name, &w, &err), usable ? 0 : -BG_EINVAL);
    }
    assert_int_equal(safetensors_find(st, "t_F4")->nbytes, 2);
    assert_int_equal(safetensors_find(st, "t_F6_E2M3")->nbytes, 3);
    assert_int_equal(safetensors_find(st, "t_C64")->nbytes, 32);
    assert_int_equal(safetensors_find(st, "t_BF16")->dtype, DTYPE_BF16);
    safetensors_close(st);
    unlink(path);
    buf_free(&b);
}

/* Layout the reference implementation refuses but that reads no byte out of
 * bounds or twice: gaps, trailing bytes, empty tensors anywhere, and a zero
 * dimension beside dimensions whose product alone would overflow. */
static void make_lenient(struct buf *b)
{
    static const char json[] =
        "{" ENTRY("a", "F32", "[2]", 4, 12) ", " ENTRY("inside", "F32", "[0]", 6, 6) ", "
        ENTRY("z1", "F16", "[0, 5]", 12, 12) ", " ENTRY("z2", "F16", "[0]", 12, 12) ", "
        ENTRY("huge0", "F32", "[1099511627776, 1099511627776, 0]", 20, 20) ", "
        ENTRY("c", "U8", "[3]", 16, 19) "}";
    build(b, json, sizeof json - 1, 0, ' ', NULL, NULL, 32);
}

static void test_lenient_layout(void **state)
{
    struct fixture *fx = *state;
    struct buf b = BUF_INIT;
    make_lenient(&b);
    const char *path = put_file(fx, "lenient.safetensors", &b);
    struct safetensors *st;
    struct error err = {0};
    if (safetensors_open(path, &st, &err) != 0)
        fail_msg("%s", err.msg);
    assert_int_equal(safetensors_count(st), 6);
    assert_string_equal(safetensors_at(st, 0)->name, "a");
    assert_string_equal(safetensors_at(st, 5)->name, "huge0");
    const struct st_tensor *h = safetensors_find(st, "huge0");
    assert_int_equal(h->nelem, 0);
    assert_int_equal(h->shape[0], 1099511627776LL);
    safetensors_close(st);
    unlink(path);
    buf_free(&b);
}

/* ---- the committed corpus ---------------------------------------------- */

/* tests/data/safetensors, found from this source file's path (CMake compiles
 * with absolute paths), so the test runs from any build directory. */
static void corpus_dir(char *out, size_t cap)
{
    const char *slash = strrchr(__FILE__, '/');
    int n = slash ? (int)(slash - __FILE__) : 1;
    snprintf(out, cap, "%.*s/../data/safetensors", n, slash ? __FILE__ : ".");
}

static void test_python_reference(void **state)
{
    (void)state;
    char dir[PATH_MAX], path[PATH_MAX + 64];
    corpus_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/python_reference.safetensors", dir);
    struct safetensors *st;
    struct error err = {0};
    if (safetensors_open(path, &st, &err) != 0)
        fail_msg("%s", err.msg);
    /* See scripts/make_safetensors_corpus.py for the values. */
    assert_int_equal(safetensors_count(st), 5);
    assert_string_equal(safetensors_metadata(st, "format"), "np");
    assert_string_equal(safetensors_metadata(st, "writer"), "safetensors");
    const struct st_tensor *w = safetensors_find(st, "w"), *s = safetensors_find(st, "s");
    const struct st_tensor *h = safetensors_find(st, "h"), *b = safetensors_find(st, "b");
    const struct st_tensor *i = safetensors_find(st, "i");
    assert_true(w && s && h && b && i);
    assert_int_equal(w->dtype, DTYPE_F32);
    assert_int_equal(w->shape[0], 2);
    assert_int_equal(w->shape[1], 3);
    for (int k = 0; k < 6; k++)
        assert_true(get_f32(w, k) == w_values[k]);
    assert_int_equal(s->ndim, 0);
    assert_true(get_f32(s, 0) == 3.25f);
    assert_int_equal(h->dtype, DTYPE_F16);
    for (int k = 0; k < 4; k++)
        assert_true(dtype_f16_to_f32(get_u16(h, k)) == h_values[k]);
    assert_int_equal(b->dtype, DTYPE_BF16);
    assert_int_equal(b->ndim, 2);
    for (int k = 0; k < 4; k++)
        assert_int_equal(get_u16(b, k), dtype_f32_to_bf16(b_values[k]));
    assert_false(i->usable);
    int64_t iv[2];
    memcpy(iv, i->data, 16);
    assert_int_equal(iv[0], 7);
    assert_int_equal(iv[1], -9);
    safetensors_close(st);
}

/* Every bad_* must be refused, every ok_* must open; and all cases of this
 * file must be there, so the corpus cannot silently fall behind. */
static void test_committed_corpus(void **state)
{
    (void)state;
    char dir[PATH_MAX];
    corpus_dir(dir, sizeof dir);
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("cannot open %s: %s", dir, strerror(errno));
    int bad = 0, ok = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        int is_bad = !strncmp(de->d_name, "bad_", 4), is_ok = !strncmp(de->d_name, "ok_", 3);
        if (!is_bad && !is_ok)
            continue;
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        struct safetensors *st = NULL;
        struct error err = {0};
        int rc = safetensors_open(path, &st, &err);
        if (rc != (is_bad ? -BG_EINVAL : 0))
            fail_msg("%s: got %d (%s)", de->d_name, rc, err.msg);
        for (int k = 0; st && k < safetensors_count(st); k++) {
            const struct st_tensor *t = safetensors_at(st, k);
            unsigned sum = 0;                    /* touch every byte: in bounds */
            for (size_t j = 0; j < t->nbytes; j++)
                sum += ((const unsigned char *)t->data)[j];
            (void)sum;
        }
        safetensors_close(st);
        bad += is_bad;
        ok += is_ok;
    }
    closedir(d);
    assert_int_equal(bad, sizeof bad_cases / sizeof bad_cases[0]);
    assert_int_equal(ok, 4);
}

/* safetensors_open_mem (the fuzzer's entry point) is the same loader: each
 * committed file, and each broken case, gives the same result and the same
 * message from memory as from its path. */
static void test_open_mem_matches_open(void **state)
{
    struct fixture *fx = *state;
    struct buf b = BUF_INIT;
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0] + 2; i++) {
        if (i < sizeof bad_cases / sizeof bad_cases[0])
            make_bad(&b, &bad_cases[i]);
        else if (i == sizeof bad_cases / sizeof bad_cases[0])
            make_model(&b);
        else
            make_lenient(&b);
        const char *path = put_file(fx, "mem.safetensors", &b);
        struct safetensors *a = NULL, *m = NULL;
        struct error ea = {0}, em = {0};
        int ra = safetensors_open(path, &a, &ea);
        int rm = safetensors_open_mem(path, b.data, b.len, &m, &em);
        assert_int_equal(ra, rm);
        assert_string_equal(ea.msg, em.msg);
        if (ra == 0) {
            assert_int_equal(safetensors_count(a), safetensors_count(m));
            assert_int_equal(safetensors_file_bytes(m), b.len);
            for (int k = 0; k < safetensors_count(a); k++) {
                const struct st_tensor *x = safetensors_at(a, k), *y = safetensors_at(m, k);
                assert_string_equal(x->name, y->name);
                assert_int_equal(x->nbytes, y->nbytes);
                assert_memory_equal(x->data, y->data, x->nbytes);
            }
        }
        safetensors_close(a);
        safetensors_close(m);
        unlink(path);
    }
    /* Shorter than the length field: refused, with nothing mapped or read. */
    struct safetensors *st = (void *)1;
    struct error err = {0};
    assert_int_equal(safetensors_open_mem("tiny", "\x01\x00", 2, &st, &err), -BG_EINVAL);
    assert_null(st);
    assert_mentions(&err, "tiny: file is 2 bytes", NULL);
    buf_free(&b);
}

/* ---- corpus writer ----------------------------------------------------- */

static int write_corpus(const char *dir)
{
    struct buf b = BUF_INIT;
    char path[PATH_MAX];
    for (size_t i = 0; i < sizeof bad_cases / sizeof bad_cases[0]; i++) {
        make_bad(&b, &bad_cases[i]);
        snprintf(path, sizeof path, "%s/bad_%s.safetensors", dir, bad_cases[i].id);
        write_bytes(path, b.data, b.len);
    }
    static const struct { const char *id; void (*make)(struct buf *); } oks[] = {
        {"model", make_model}, {"empty", make_empty}, {"all_dtypes", make_all_dtypes},
        {"lenient_layout", make_lenient},
    };
    for (size_t i = 0; i < sizeof oks / sizeof oks[0]; i++) {
        oks[i].make(&b);
        snprintf(path, sizeof path, "%s/ok_%s.safetensors", dir, oks[i].id);
        write_bytes(path, b.data, b.len);
    }
    buf_free(&b);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-corpus") == 0)
        return write_corpus(argv[2]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_values),
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_all_dtypes),
        cmocka_unit_test(test_lenient_layout),
        cmocka_unit_test(test_broken_files),
        cmocka_unit_test(test_cannot_open),
        cmocka_unit_test(test_hostile_name_in_message),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_python_reference),
        cmocka_unit_test(test_committed_corpus),
        cmocka_unit_test(test_open_mem_matches_open),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
