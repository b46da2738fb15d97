/* test_jscratch.c - jansson allocating from an IO thread's arena: a body
 * decodes inside it, values made outside it keep working and can be freed
 * inside it, a body larger than the first block grows the arena and is
 * released at the end, other threads are unaffected, and a block that
 * cannot be had fails the decode cleanly (failalloc.h). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "tests/oom/failalloc.h"
#include "gateway/jscratch.h"

static int setup(void **state)
{
    (void)state;
    jscratch_install();
    return 0;
}

static void test_decode_inside(void **state)
{
    (void)state;
    struct jscratch *s = jscratch_new(4096);
    assert_non_null(s);
    json_t *outside = json_pack("{s:i}", "kept", 7);   /* plain malloc */
    jscratch_begin(s);
    json_error_t e;
    json_t *doc = json_loads("{\"inputs\":[{\"data\":[1,2,3.5]}]}", 0, &e);
    assert_non_null(doc);
    assert_true(jscratch_used(s) > 0);
    json_t *data = json_object_get(json_array_get(json_object_get(doc, "inputs"), 0), "data");
    assert_true(json_real_value(json_array_get(data, 2)) == 3.5);
    json_decref(doc);   /* no-op frees */
    jscratch_end(s);
    /* Made before begin: still valid after end; freed by free(). */
    assert_int_equal(json_integer_value(json_object_get(outside, "kept")), 7);
    jscratch_begin(s);
    json_decref(outside);   /* not the arena's: really freed, inside begin/end */
    jscratch_end(s);
    jscratch_free(s);
}

static void test_large_body_grows_and_is_released(void **state)
{
    (void)state;
    struct jscratch *s = jscratch_new(1024);
    size_t n = 20000;
    char *body = malloc(n * 8 + 16);
    size_t len = 0;
    body[len++] = '[';
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(body + len, "%s%zu.5", i ? "," : "", i % 1000);
    body[len++] = ']';
    body[len] = 0;
    for (int round = 0; round < 3; round++) {
        jscratch_begin(s);
        json_error_t e;
        json_t *doc = json_loadb(body, len, 0, &e);
        assert_non_null(doc);
        assert_int_equal(json_array_size(doc), n);
        assert_true(json_real_value(json_array_get(doc, n - 1)) == (double)((n - 1) % 1000) + 0.5);
        assert_true(jscratch_used(s) > n * 16);   /* far beyond the first block */
        json_decref(doc);
        jscratch_end(s);   /* ASan/LSan: the extra blocks are freed here */
    }
    free(body);
    jscratch_free(s);
}

static void *other_thread(void *arg)
{
    /* No arena here: malloc as usual, even while the main thread is inside one. */
    json_t *v = json_string("elsewhere");
    *(json_t **)arg = v;
    return NULL;
}

static void test_other_threads_use_malloc(void **state)
{
    (void)state;
    struct jscratch *s = jscratch_new(4096);
    jscratch_begin(s);
    size_t before = jscratch_used(s);
    json_t *v = NULL;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, other_thread, &v), 0);
    pthread_join(t, NULL);
    assert_true(jscratch_used(s) == before);
    jscratch_end(s);
    assert_string_equal(json_string_value(v), "elsewhere");
    json_decref(v);
    jscratch_free(s);
}

/* Each growth of the arena failing in turn: jansson reports the decode as
 * failed, nothing of it survives jscratch_end, and the arena is usable for
 * the next body (LeakSanitizer checks the rest under make test-asan). */
static void test_out_of_memory(void **state)
{
    (void)state;
    static char text[16384];
    size_t len = (size_t)snprintf(text, sizeof text, "{\"inputs\":[{\"data\":[");
    for (int i = 0; i < 600; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%d.5", i ? "," : "", i);
    snprintf(text + len, sizeof text - len, "]}]}");
    struct jscratch *s = jscratch_new(256);
    assert_non_null(s);
    long k;
    for (k = 1; k < 100; k++) {
        failalloc_arm(k);
        jscratch_begin(s);
        json_error_t e;
        json_t *v = json_loads(text, 0, &e);
        int fired = failalloc_fired();
        if (fired)
            assert_null(v);   /* a value dropped for want of memory is a failed decode */
        json_decref(v);
        jscratch_end(s);
        failalloc_arm(0);
        if (!fired)
            break;            /* k is past the last allocation: every one has failed once */
    }
    assert_true(k > 3);       /* the body needed several blocks */
    /* Still whole: the next body decodes. */
    jscratch_begin(s);
    json_error_t e;
    json_t *v = json_loads("[1,2,3]", 0, &e);
    assert_non_null(v);
    json_decref(v);
    jscratch_end(s);
    jscratch_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_inside),
        cmocka_unit_test(test_large_body_grows_and_is_released),
        cmocka_unit_test(test_other_threads_use_malloc),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
