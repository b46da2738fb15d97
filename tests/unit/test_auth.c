/* test_auth.c - resolving API keys (gateway/auth.c): the right tenant for
 * each key, none for a wrong, truncated or differently-cased one; the
 * route classes; model globs; and the time of a lookup, measured: it must
 * not depend on how much of a digest matches a configured one. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/clock.h"
#include "common/sha256.h"
#include "gateway/auth.h"

static struct tenants_config tc;   /* large: off the stack */

static void tenants_reset(void)
{
    memset(&tc, 0, sizeof tc);
    snprintf(tc.t[0].name, sizeof tc.t[0].name, "default");
    tc.t[0].limit = 1;
    tc.n = 1;
}

static int tenant_add(const char *name, const char *const *keys, int nkeys)
{
    struct tenant_config *t = &tc.t[tc.n];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->limit = 1;
    for (int i = 0; i < nkeys; i++)
        sha256(keys[i], strlen(keys[i]), t->keys[t->nkeys++]);
    return tc.n++;
}

static int lookup(const struct auth *a, const char *key)
{
    return auth_key_tenant(a, key, strlen(key));
}

static void test_keys_name_their_tenant(void **state)
{
    (void)state;
    tenants_reset();
    const char *ka[] = {"sk-search-1", "sk-search-2"}, *kb[] = {"sk-research"};
    int a = tenant_add("search", ka, 2), b = tenant_add("research", kb, 1);
    struct error err = {0};
    struct auth *au = auth_new(&tc, NULL, &err);
    assert_non_null(au);
    assert_true(auth_keys_exist(au));
    assert_int_equal(lookup(au, "sk-search-1"), a);
    assert_int_equal(lookup(au, "sk-search-2"), a);
    assert_int_equal(lookup(au, "sk-research"), b);
    /* Wrong, truncated, longer, differently cased, empty. */
    assert_int_equal(lookup(au, "sk-search-3"), -1);
    assert_int_equal(lookup(au, "sk-search-"), -1);
    assert_int_equal(lookup(au, "sk-search-1 "), -1);
    assert_int_equal(lookup(au, "sk-search-11"), -1);
    assert_int_equal(lookup(au, "SK-SEARCH-1"), -1);
    assert_int_equal(lookup(au, "Sk-search-1"), -1);
    assert_int_equal(lookup(au, ""), -1);
    assert_string_equal(auth_tenant_name(au, a), "search");
    assert_false(auth_is_admin(au, a));
    tc.t[b].admin = true;
    assert_true(auth_is_admin(au, b));
    assert_false(auth_is_admin(au, 0));
    auth_free(au);
}

static void test_without_keys_everyone_is_admin(void **state)
{
    (void)state;
    tenants_reset();
    struct error err = {0};
    struct auth *au = auth_new(&tc, NULL, &err);
    assert_false(auth_keys_exist(au));
    assert_true(auth_is_admin(au, 0));
    assert_int_equal(lookup(au, "anything"), -1);
    auth_free(au);
}

static struct tenants_config next;   /* the file as SIGHUP rereads it */

static void next_keys(int tenant, const char *const *keys, int nkeys)
{
    next.t[tenant].nkeys = 0;
    for (int i = 0; i < nkeys; i++)
        sha256(keys[i], strlen(keys[i]), next.t[tenant].keys[next.t[tenant].nkeys++]);
}

static void test_keys_are_replaced_all_at_once(void **state)
{
    (void)state;
    tenants_reset();
    const char *ka[] = {"sk-a-old"}, *kb[] = {"sk-b-1", "sk-b-2"};
    int a = tenant_add("a", ka, 1), b = tenant_add("b", kb, 2);
    struct error err = {0};
    struct auth *au = auth_new(&tc, NULL, &err);
    assert_non_null(au);
    uint64_t changed = 0;
    /* The same keys in another order: nothing to replace. */
    next = tc;
    const char *kb2[] = {"sk-b-2", "sk-b-1"};
    next_keys(b, kb2, 2);
    assert_int_equal(auth_replace_keys(au, &next, &changed, &err), 0);
    assert_int_equal(changed, 0);
    /* a's new key beside its old one; one of b's moved to a. */
    const char *ka2[] = {"sk-a-old", "sk-a-new", "sk-b-2"}, *kb3[] = {"sk-b-1"};
    next_keys(a, ka2, 3);
    next_keys(b, kb3, 1);
    assert_int_equal(auth_replace_keys(au, &next, &changed, &err), 1);
    assert_int_equal(changed, (1u << a) | (1u << b));
    assert_int_equal(lookup(au, "sk-a-old"), a);
    assert_int_equal(lookup(au, "sk-a-new"), a);
    assert_int_equal(lookup(au, "sk-b-2"), a);
    assert_int_equal(lookup(au, "sk-b-1"), b);
    /* The old one out; then every key: none left, and the admin routes
     * stay an admin's (they were everyone's again). */
    next_keys(a, ka2 + 1, 2);
    assert_int_equal(auth_replace_keys(au, &next, &changed, &err), 1);
    assert_int_equal(changed, 1u << a);
    assert_int_equal(lookup(au, "sk-a-old"), -1);
    assert_int_equal(lookup(au, "sk-a-new"), a);
    next_keys(a, NULL, 0);
    next_keys(b, NULL, 0);
    assert_int_equal(auth_replace_keys(au, &next, &changed, &err), 1);
    assert_false(auth_keys_exist(au));
    assert_false(auth_is_admin(au, b));
    assert_false(auth_is_admin(au, 0));
    tc.t[b].admin = true;
    assert_true(auth_is_admin(au, b));
    assert_int_equal(lookup(au, "sk-b-1"), -1);
    auth_free(au);   /* with the sets replaced (ASan: none leaks) */
}

static void test_route_classes(void **state)
{
    (void)state;
    assert_int_equal(auth_route_class("/v2/health/live", HTTP_M_GET), AUTH_ROUTE_OPEN);
    assert_int_equal(auth_route_class("/v2/health/ready", HTTP_M_GET), AUTH_ROUTE_OPEN);
    assert_int_equal(auth_route_class("/metrics", HTTP_M_GET), AUTH_ROUTE_OPEN);
    assert_int_equal(auth_route_class("/dashboard", HTTP_M_GET), AUTH_ROUTE_OPEN);
    assert_int_equal(auth_route_class("/dashboard/data", HTTP_M_GET), AUTH_ROUTE_OPEN);
    assert_int_equal(auth_route_class("/debug/delay", HTTP_M_GET), AUTH_ROUTE_ADMIN);
    assert_int_equal(auth_route_class("/debug/fault", HTTP_M_POST), AUTH_ROUTE_ADMIN);
    assert_int_equal(auth_route_class("/v2/governance", HTTP_M_GET), AUTH_ROUTE_TENANT);
    assert_int_equal(auth_route_class("/v2/governance", HTTP_M_HEAD), AUTH_ROUTE_TENANT);
    assert_int_equal(auth_route_class("/v2/governance", HTTP_M_PUT), AUTH_ROUTE_ADMIN);
    assert_int_equal(auth_route_class("/v2/repository/index", HTTP_M_POST), AUTH_ROUTE_ADMIN);
    assert_int_equal(auth_route_class("/v2/repository/models/{model}/load", HTTP_M_POST),
                     AUTH_ROUTE_ADMIN);
    assert_int_equal(auth_route_class("/v2/systemsharedmemory/status", HTTP_M_GET),
                     AUTH_ROUTE_ADMIN);
    assert_int_equal(auth_route_class("/v2/models/{model}/infer", HTTP_M_POST),
                     AUTH_ROUTE_TENANT);
    assert_int_equal(auth_route_class("/v2/jobs/{id}", HTTP_M_DELETE), AUTH_ROUTE_TENANT);
    assert_int_equal(auth_route_class("/v2", HTTP_M_GET), AUTH_ROUTE_TENANT);
    /* Near misses are not the open routes. */
    assert_int_equal(auth_route_class("/metricsx", HTTP_M_GET), AUTH_ROUTE_TENANT);
    assert_int_equal(auth_route_class("/v2/healthz", HTTP_M_GET), AUTH_ROUTE_TENANT);
    assert_int_equal(auth_route_class("/debugx", HTTP_M_GET), AUTH_ROUTE_TENANT);
    assert_int_equal(auth_route_class(NULL, HTTP_M_GET), AUTH_ROUTE_TENANT);
}

static void test_model_globs(void **state)
{
    (void)state;
    tenants_reset();
    const char *k[] = {"k"};
    int a = tenant_add("a", k, 1);
    snprintf(tc.t[a].models[0], TENANT_GLOB_MAX, "digits");
    snprintf(tc.t[a].models[1], TENANT_GLOB_MAX, "bert-*");
    snprintf(tc.t[a].models[2], TENANT_GLOB_MAX, "v?");
    tc.t[a].nmodels = 3;
    struct error err = {0};
    struct auth *au = auth_new(&tc, NULL, &err);
#define MAY(t, m) auth_may_use_model(au, t, m, strlen(m))
    assert_true(MAY(a, "digits"));
    assert_true(MAY(a, "bert-base"));
    assert_true(MAY(a, "v1"));
    assert_false(MAY(a, "v12"));
    assert_false(MAY(a, "digits2"));
    assert_false(MAY(a, "Digits"));
    assert_false(MAY(a, "bert"));
    assert_true(auth_may_use_model(au, a, "digits:predict", 6));
    assert_true(MAY(0, "anything"));   /* no globs: every model */
    assert_false(MAY(7, "digits"));    /* no such tenant */
#undef MAY
    auth_free(au);
}

/* ---- timing ---- */

#define T_TENANTS 64
#define T_KEYS (T_TENANTS * TENANT_KEYS_MAX)
#define T_PROBES 3
#define T_SAMPLES 301
#define T_CALLS 40

/* What the lookup must not be: a compare that stops at the first
 * differing byte. Timed beside it, to show the measurement sees a leak. */
__attribute__((noinline)) static int leaky_lookup(const uint8_t (*keys)[TENANT_DIGEST_LEN], int n,
                                                  const uint8_t *d)
{
    for (int i = 0; i < n; i++) {
        int b = 0;
        while (b < TENANT_DIGEST_LEN && keys[i][b] == d[b])
            b++;
        if (b == TENANT_DIGEST_LEN)
            return i;
    }
    return -1;
}

static uint8_t t_keys[T_KEYS][TENANT_DIGEST_LEN];
static volatile int t_sink;

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Median ns per call of each probe, the probes interleaved sample by
 * sample so that a slow spell of the machine falls on all of them. */
static void time_probes(const struct auth *au, bool leaky, uint8_t probes[T_PROBES][32],
                        double med[T_PROBES])
{
    static int64_t s[T_PROBES][T_SAMPLES];
    for (int k = 0; k < T_SAMPLES; k++)
        for (int p = 0; p < T_PROBES; p++) {
            int64_t t0 = now_ns();
            for (int c = 0; c < T_CALLS; c++)
                t_sink = leaky ? leaky_lookup(t_keys, T_KEYS, probes[p])
                               : auth_digest_tenant(au, probes[p]);
            s[p][k] = now_ns() - t0;
        }
    for (int p = 0; p < T_PROBES; p++) {
        qsort(s[p], T_SAMPLES, sizeof s[p][0], cmp_i64);
        med[p] = (double)s[p][T_SAMPLES / 2] / T_CALLS;
    }
}

/* 1024 configured digests that share their first 30 bytes: a compare that
 * stops early does 1 byte of work per key for a probe that differs in its
 * first byte and 31 for one that differs in byte 30, so the two would be
 * far apart. The lookup must take the same time for both, and for the
 * digest that matches. Bound: 25% apart (generous: the machine is shared
 * and noisy; the leaky compare is several times apart on the same data). */
static void test_lookup_time_does_not_depend_on_the_match(void **state)
{
    (void)state;
    tenants_reset();
    for (int t = 1; t <= T_TENANTS - 1; t++) {
        snprintf(tc.t[t].name, sizeof tc.t[t].name, "t%d", t);
        tc.t[t].limit = 1;
    }
    tc.n = T_TENANTS;
    for (int i = 0; i < T_KEYS; i++) {
        memset(t_keys[i], 0x5a, TENANT_DIGEST_LEN);
        t_keys[i][30] = (uint8_t)(i >> 8);
        t_keys[i][31] = (uint8_t)i;
        struct tenant_config *t = &tc.t[i / TENANT_KEYS_MAX];
        memcpy(t->keys[t->nkeys++], t_keys[i], TENANT_DIGEST_LEN);
    }
    struct error err = {0};
    struct auth *au = auth_new(&tc, NULL, &err);
    assert_non_null(au);
    enum { EARLY, LATE, MATCH };
    uint8_t probes[T_PROBES][32];
    for (int p = 0; p < T_PROBES; p++)
        memcpy(probes[p], t_keys[500], 32);
    probes[EARLY][0] ^= 0xff;     /* differs from every key in byte 0 */
    probes[LATE][30] ^= 0x80;     /* agrees with every key on bytes 0..29 */
    assert_int_equal(auth_digest_tenant(au, probes[EARLY]), -1);
    assert_int_equal(auth_digest_tenant(au, probes[LATE]), -1);
    assert_int_equal(auth_digest_tenant(au, probes[MATCH]), 500 / TENANT_KEYS_MAX);
    assert_int_equal(leaky_lookup(t_keys, T_KEYS, probes[LATE]), -1);
    /* A real leak shows in every attempt; a noisy neighbour seldom in three. */
    double m[T_PROBES], leak[T_PROBES], spread = 0;
    for (int attempt = 0; attempt < 3; attempt++) {
        time_probes(au, false, probes, m);
        time_probes(au, true, probes, leak);
        double lo = m[0], hi = m[0];
        for (int p = 1; p < T_PROBES; p++) {
            lo = m[p] < lo ? m[p] : lo;
            hi = m[p] > hi ? m[p] : hi;
        }
        spread = hi / lo;
        print_message("lookup over %d digests, median ns per call: differs early %.0f, late "
                      "%.0f, matches %.0f (max/min %.3f); a compare that stops early: %.0f, "
                      "%.0f, %.0f (late/early %.1f)\n", T_KEYS, m[EARLY], m[LATE], m[MATCH],
                      spread, leak[EARLY], leak[LATE], leak[MATCH], leak[LATE] / leak[EARLY]);
        if (spread <= 1.25 && leak[LATE] / leak[EARLY] >= 2)
            break;
    }
    if (spread > 1.25)
        fail_msg("the lookup's time depends on the digest: %.0f / %.0f / %.0f ns", m[EARLY],
                 m[LATE], m[MATCH]);
    /* The measurement can see a leak of this kind at all. */
    if (leak[LATE] / leak[EARLY] < 2)
        fail_msg("the early-exit compare was not told apart (%.0f vs %.0f ns): the timing "
                 "cannot be trusted on this machine", leak[EARLY], leak[LATE]);
    auth_free(au);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys_name_their_tenant),
        cmocka_unit_test(test_without_keys_everyone_is_admin),
        cmocka_unit_test(test_keys_are_replaced_all_at_once),
        cmocka_unit_test(test_route_classes),
        cmocka_unit_test(test_model_globs),
        cmocka_unit_test(test_lookup_time_does_not_depend_on_the_match),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
