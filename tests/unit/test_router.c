/* test_router.c - pattern matching, captures, 404 vs 405, Allow formatting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "http/http.h"

static int hits[8];
static void h0(struct http_request *r, const struct route_match *m, void *c) { (void)r; (void)m; (void)c; hits[0]++; }
static void h1(struct http_request *r, const struct route_match *m, void *c) { (void)r; (void)m; (void)c; hits[1]++; }
static void h2(struct http_request *r, const struct route_match *m, void *c) { (void)r; (void)m; (void)c; hits[2]++; }

static struct router *build(void)
{
    struct router *r = router_new();
    struct error err = {0};
    assert_non_null(r);
    assert_int_equal(router_add(r, HTTP_M_GET, "/v2/health/live", h0, (void *)1, &err), 0);
    assert_int_equal(router_add(r, HTTP_M_GET, "/v2/models/{model}", h1, (void *)2, &err), 0);
    assert_int_equal(router_add(r, HTTP_M_POST, "/v2/models/{model}/infer", h2, (void *)3, &err), 0);
    assert_int_equal(router_add(r, HTTP_M_POST, "/v2/models/{model}/versions/{version}/infer", h2,
                                (void *)4, &err), 0);
    assert_int_equal(router_add(r, HTTP_M_GET, "/v2", h0, (void *)5, &err), 0);
    return r;
}

static enum router_result match(struct router *r, int method, const char *path, void **ctx,
                                struct route_match *m, int *allowed)
{
    route_handler_fn fn;
    return router_match(r, method, path, strlen(path), &fn, ctx, m, allowed);
}

static void test_literal_and_head(void **state)
{
    (void)state;
    struct router *r = build();
    void *ctx = NULL;
    struct route_match m;
    int allowed = 0;
    assert_int_equal(match(r, HTTP_M_GET, "/v2/health/live", &ctx, &m, &allowed), ROUTER_FOUND);
    assert_ptr_equal(ctx, (void *)1);
    assert_int_equal(m.nparams, 0);
    /* HEAD rides on GET. */
    assert_int_equal(match(r, HTTP_M_HEAD, "/v2/health/live", &ctx, &m, &allowed), ROUTER_FOUND);
    assert_int_equal(match(r, HTTP_M_GET, "/v2", &ctx, &m, &allowed), ROUTER_FOUND);
    assert_ptr_equal(ctx, (void *)5);
    router_free(r);
}

static void test_captures(void **state)
{
    (void)state;
    struct router *r = build();
    void *ctx = NULL;
    struct route_match m;
    int allowed = 0;
    assert_int_equal(match(r, HTTP_M_GET, "/v2/models/digits", &ctx, &m, &allowed), ROUTER_FOUND);
    assert_ptr_equal(ctx, (void *)2);
    const struct route_param *p = route_match_param(&m, "model");
    assert_non_null(p);
    assert_int_equal(p->len, 6);
    assert_memory_equal(p->value, "digits", 6);
    assert_int_equal(match(r, HTTP_M_POST, "/v2/models/a.b-c/versions/3/infer", &ctx, &m, &allowed),
                     ROUTER_FOUND);
    assert_ptr_equal(ctx, (void *)4);
    assert_memory_equal(route_match_param(&m, "version")->value, "3", 1);
    assert_null(route_match_param(&m, "nope"));
    /* The pattern as registered: what rules about routes (auth) compare against. */
    assert_string_equal(m.pattern, "/v2/models/{model}/versions/{version}/infer");
    router_free(r);
}

static void test_not_found(void **state)
{
    (void)state;
    struct router *r = build();
    void *ctx = NULL;
    struct route_match m;
    int allowed = 0;
    static const char *paths[] = {"/",  "/v2/",  "/v2/health", "/v2/health/live/", "/v2/models/",
                                  "/v2/models//infer", "/v3", "", "v2", "/v2/models/a/b/c/d/e"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (match(r, HTTP_M_GET, paths[i], &ctx, &m, &allowed) != ROUTER_NOT_FOUND)
            fail_msg("\"%s\" should be 404", paths[i]);
    router_free(r);
}

static void test_method_not_allowed(void **state)
{
    (void)state;
    struct router *r = build();
    void *ctx = NULL;
    struct route_match m;
    int allowed = 0;
    assert_int_equal(match(r, HTTP_M_POST, "/v2/health/live", &ctx, &m, &allowed),
                     ROUTER_METHOD_NOT_ALLOWED);
    assert_int_equal(allowed, HTTP_M_GET | HTTP_M_HEAD);
    assert_int_equal(match(r, HTTP_M_GET, "/v2/models/x/infer", &ctx, &m, &allowed),
                     ROUTER_METHOD_NOT_ALLOWED);
    assert_int_equal(allowed, HTTP_M_POST);
    char buf[64];
    router_format_allow(HTTP_M_GET | HTTP_M_HEAD | HTTP_M_POST, buf, sizeof buf);
    assert_string_equal(buf, "GET, HEAD, POST");
    router_format_allow(HTTP_M_GET | HTTP_M_HEAD | HTTP_M_POST, buf, 10);
    assert_string_equal(buf, "GET, HEAD");
    router_free(r);
}

static void test_bad_patterns(void **state)
{
    (void)state;
    struct router *r = router_new();
    struct error err = {0};
    assert_int_equal(router_add(r, HTTP_M_GET, "nope", h0, NULL, &err), -BG_EINVAL);
    assert_non_null(strstr(err.msg, "nope"));
    assert_int_equal(router_add(r, HTTP_M_GET, "/a{b}", h0, NULL, &err), -BG_EINVAL);
    assert_int_equal(router_add(r, HTTP_M_GET, "/{a}/{b}/{c}/{d}/{e}", h0, NULL, &err), -BG_EINVAL);
    assert_int_equal(router_add(r, HTTP_M_GET, "/1/2/3/4/5/6/7/8/9/10/11/12/13", h0, NULL, &err),
                     -BG_EINVAL);
    router_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literal_and_head), cmocka_unit_test(test_captures),
        cmocka_unit_test(test_not_found),        cmocka_unit_test(test_method_not_allowed),
        cmocka_unit_test(test_bad_patterns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
