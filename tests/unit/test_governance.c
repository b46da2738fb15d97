/* test_governance.c - time windows: which window is active at an instant
 * (local time of a named zone, windows across midnight, days), the shares
 * each puts in force, every configuration error (overlaps name both
 * windows), the JSON of GET /v2/governance, and the governor thread
 * applying a replacement within a second. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "serving/governance.h"

static struct tenants_config tc;

static void tenants(void)
{
    memset(&tc, 0, sizeof tc);
    tc.n = 3;
    strcpy(tc.t[0].name, "default");
    strcpy(tc.t[1].name, "search");
    strcpy(tc.t[2].name, "research");
    tc.t[1].share = 0.5;
    tc.t[2].share = 0.25;
    tc.t[0].limit = 0.4;
}

static struct governance *parse(const char *text, struct error *err)
{
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    assert_non_null(j);
    struct governance *g = NULL;
    memset(err, 0, sizeof *err);
    governance_parse(j, &tc, "governance", &g, err);
    json_decref(j);
    return g;
}

/* Unix seconds of a UTC date and time. */
static int64_t utc(int y, int mo, int d, int h, int mi)
{
    struct tm tm = {.tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h,
                    .tm_min = mi};
    return (int64_t)timegm(&tm);
}

static const char *SAO_PAULO =
    "{\"timezone\": \"America/Sao_Paulo\", \"windows\": ["
    " {\"name\": \"day\", \"days\": [\"mon\",\"tue\",\"wed\",\"thu\",\"fri\"],"
    "  \"from\": \"08:00\", \"to\": \"20:00\", \"shares\": {\"search\": 0.8, \"research\": 0.2}},"
    " {\"name\": \"night\", \"days\": [\"fri\"], \"from\": \"20:00\", \"to\": \"08:00:30\","
    "  \"shares\": {\"search\": 0.3, \"research\": 0.2}, \"offline_share\": 0.5}]}";

static void test_active_window_by_local_time(void **state)
{
    (void)state;
    tenants();
    struct error err;
    struct governance *g = parse(SAO_PAULO, &err);
    assert_non_null(g);
    /* Sao Paulo is UTC-3 (no daylight saving since 2019). 2026-12-07 is a Monday. */
    assert_string_equal(governance_window_name(g, governance_active(g, utc(2026, 12, 7, 15, 0))), "day");
    assert_int_equal(governance_active(g, utc(2026, 12, 7, 10, 59)), -1);   /* 07:59 local */
    assert_int_equal(governance_active(g, utc(2026, 12, 7, 23, 0)), -1);    /* 20:00 local: day ended */
    /* Friday 2026-12-11 23:00 local and on past midnight into Saturday, to 08:00:30. */
    assert_string_equal(governance_window_name(g, governance_active(g, utc(2026, 12, 12, 2, 0))), "night");
    assert_string_equal(governance_window_name(g, governance_active(g, utc(2026, 12, 12, 11, 0))), "night");
    assert_int_equal(governance_active(g, utc(2026, 12, 12, 11, 1)), -1);   /* 08:01 Saturday */
    /* Thursday night is no one's: night is Friday's only. */
    assert_int_equal(governance_active(g, utc(2026, 12, 11, 2, 0)), -1);
    double share[TENANTS_MAX], off;
    governance_shares(g, governance_active(g, utc(2026, 12, 12, 2, 0)), &tc, share, &off);
    assert_true(share[0] == 0 && share[1] == 0.3 && share[2] == 0.2 && off == 0.5);
    governance_shares(g, -1, &tc, share, &off);   /* outside: the tenants' own */
    assert_true(share[1] == 0.5 && share[2] == 0.25 && off == 0);
    governance_free(g);
    /* SPEC.md's example, verbatim: the night's 0.3 + 0.7 for the tenants and
     * 0.5 for the jobs. The jobs keep their 0.5; the tenants split the rest
     * 3 to 7. */
    g = parse("{\"timezone\": \"America/Sao_Paulo\", \"windows\": ["
              " {\"name\": \"day\",   \"days\": [\"mon\",\"tue\",\"wed\",\"thu\",\"fri\"],"
              "  \"from\": \"08:00\", \"to\": \"20:00\","
              "  \"shares\": {\"search\": 0.8, \"research\": 0.2}, \"offline_share\": 0.0},"
              " {\"name\": \"night\", \"from\": \"20:00\", \"to\": \"08:00\","
              "  \"shares\": {\"search\": 0.3, \"research\": 0.7}, \"offline_share\": 0.5}]}",
              &err);
    if (!g)
        fail_msg("SPEC.md's governance example refused: %s", err.msg);
    governance_shares(g, governance_active(g, utc(2026, 12, 12, 2, 0)), &tc, share, &off);
    assert_true(fabs(share[1] - 0.15) < 1e-12 && fabs(share[2] - 0.35) < 1e-12 && off == 0.5);
    governance_shares(g, governance_active(g, utc(2026, 12, 7, 15, 0)), &tc, share, &off);
    assert_true(share[1] == 0.8 && share[2] == 0.2 && off == 0);   /* they fit: as given */
    governance_free(g);
    g = parse(SAO_PAULO, &err);
    struct buf b = BUF_INIT;
    governance_json(g, &tc, utc(2026, 12, 7, 15, 0), &b);
    buf_append(&b, "", 1);
    assert_non_null(strstr(b.data, "\"timezone\":\"America/Sao_Paulo\""));
    assert_non_null(strstr(b.data, "\"active\":\"day\""));
    assert_non_null(strstr(b.data, "\"shares\":{\"default\":0,\"search\":0.8,\"research\":0.2}"));
    assert_non_null(strstr(b.data, "\"to\":\"08:00:30\""));
    buf_free(&b);
    governance_free(g);
}

static void test_errors(void **state)
{
    (void)state;
    tenants();
    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00\",\"to\":\"20:00\"},"
         "{\"name\":\"b\",\"days\":[\"sat\"],\"from\":\"19:00\",\"to\":\"07:00\"}]}",
         "windows \"a\" and \"b\" overlap"},
        {"{\"windows\": [{\"name\":\"n\",\"days\":[\"sun\"],\"from\":\"22:00\",\"to\":\"02:00\"},"
         "{\"name\":\"m\",\"days\":[\"mon\"],\"from\":\"01:00\",\"to\":\"03:00\"}]}",
         "windows \"n\" and \"m\" overlap (both active mon 01:00"},
        /* The first instant they share, to the second where they name it. */
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00:30\",\"to\":\"09:00\"},"
         "{\"name\":\"b\",\"from\":\"07:00\",\"to\":\"08:00:31\"}]}",
         "windows \"a\" and \"b\" overlap (both active mon 08:00:30 local time)"},
        /* ... the earliest of the week, a Sunday window's Monday part too
         * (it named wed 22:00, the first pair of spans found). */
        {"{\"windows\": [{\"name\":\"a\",\"days\":[\"sun\",\"wed\"],\"from\":\"22:00\","
         "\"to\":\"02:00\"},{\"name\":\"b\",\"days\":[\"mon\",\"wed\"],\"from\":\"00:00\","
         "\"to\":\"23:30\"}]}",
         "windows \"a\" and \"b\" overlap (both active mon 00:00 local time)"},
        /* A value that is not a time is said so, apart from a missing one
         * (both read "are required" before). */
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"8:00\",\"to\":\"20:00\"}]}",
         "windows[0].from: not a time of day"},
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00\",\"to\":\"24:00\"}]}",
         "windows[0].to: not a time of day"},
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"25:00\",\"to\":\"01:00\"}]}",
         "windows[0].from: not a time of day"},
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00\"}]}", "windows[0].to: missing"},
        {"{\"windows\": [{\"name\":\"a\",\"days\":[\"monday\"],\"from\":\"08:00\",\"to\":\"09:00\"}]}",
         "days[0]: not one of"},
        {"{\"windows\": [{\"name\":\"a\",\"days\":[\"mon\",\"mon\"],\"from\":\"08:00\",\"to\":\"09:00\"}]}",
         "days[1]: \"mon\" a second time"},
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00\",\"to\":\"09:00\",\"shares\":{\"ads\":0.5}}]}",
         "no tenant \"ads\""},
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00\",\"to\":\"09:00\","
         "\"shares\":{\"search\":0.8,\"research\":0.3}}]}", "windows[0].shares: add up to 1.1;"},
        /* Above the tenant's limit: refused at start for its own share. */
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00\",\"to\":\"09:00\","
         "\"shares\":{\"default\":0.5}}]}",
         "windows[0].shares.default: 0.5 is above the tenant's limit 0.4"},
        /* A newline in a name wrote a forged line into the log. */
        {"{\"windows\": [{\"name\":\"a\\n2026 error forged\",\"from\":\"08:00\",\"to\":\"09:00\"}]}",
         "windows[0].name: may hold only letters, digits"},
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00\",\"to\":\"09:00\","
         "\"offline_share\":1.5}]}", "windows[0].offline_share: a number from 0 to 1"},
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00\",\"to\":\"09:00\",\"colour\":1}]}",
         "unknown field \"colour\""},
        {"{\"windows\": [{\"name\":\"a\",\"from\":\"08:00\",\"to\":\"09:00\"},"
         "{\"name\":\"a\",\"from\":\"10:00\",\"to\":\"11:00\"}]}", "a second window named \"a\""},
        {"{\"timezone\": \"Atlantis/Capital\"}", "cannot read"},
        {"{\"timezone\": \"../etc/passwd\"}", "not an IANA zone name"},
        {"{\"timezone\": \"\"}", "leave it out for the host's zone"},
        {"{\"timezone\": 3}", "an IANA zone name such as"},
        {"{\"zone\": \"UTC\"}", "unknown field \"zone\""},
        {NULL, "a list of at most 32 windows"},   /* 33 windows: built below */
    };
    /* One more window than GOV_WINDOWS_MAX, each an hour of Monday. */
    char many[8192];
    int n = snprintf(many, sizeof many, "{\"windows\": [");
    for (int w = 0; w <= GOV_WINDOWS_MAX; w++)
        n += snprintf(many + n, sizeof many - (size_t)n,
                      "%s{\"name\":\"w%d\",\"days\":[\"mon\"],\"from\":\"%02d:00\",\"to\":\"%02d:30\"}",
                      w ? "," : "", w, w % 24, w % 24);
    snprintf(many + n, sizeof many - (size_t)n, "]}");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct error err;
        struct governance *g = parse(bad[i].text ? bad[i].text : many, &err);
        if (g || !strstr(err.msg, bad[i].want))
            fail_msg("case %zu: want \"%s\", got %s \"%s\"", i, bad[i].want, g ? "accepted" : "",
                     err.msg);
    }
}

static _Atomic int applied;
static double applied_search;

static void on_apply(void *arg, const double *share, double offline_share, const char *window)
{
    (void)arg;
    (void)offline_share;
    (void)window;
    applied_search = share[1];
    atomic_fetch_add(&applied, 1);
}

static void test_governor_applies_a_replacement_within_a_second(void **state)
{
    (void)state;
    tenants();
    struct error err;
    struct governance *g = parse("{\"timezone\":\"UTC\"}", &err);
    assert_non_null(g);
    atomic_store(&applied, 0);
    struct governor *v = governor_start(g, &tc, on_apply, NULL, &err);
    assert_non_null(v);
    for (int i = 0; i < 200 && atomic_load(&applied) < 1; i++)
        usleep(10000);
    assert_int_equal(atomic_load(&applied), 1);
    assert_true(applied_search == 0.5);
    /* A window over the whole week, now. */
    struct governance *g2 = parse("{\"timezone\":\"UTC\",\"windows\":[{\"name\":\"all\",\"from\":"
                                  "\"00:00\",\"to\":\"00:00\",\"shares\":{\"search\":0.9}}]}", &err);
    assert_non_null(g2);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    governor_replace(v, g2);
    for (int i = 0; i < 200 && atomic_load(&applied) < 2; i++)
        usleep(5000);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    assert_int_equal(atomic_load(&applied), 2);
    assert_true(applied_search == 0.9);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    print_message("# replacement applied after %.3f s\n", s);
    assert_true(s < 1.0);
    struct buf b = BUF_INIT;
    governor_json(v, &b);
    buf_append(&b, "", 1);
    assert_non_null(strstr(b.data, "\"active\":\"all\""));
    buf_free(&b);
    governor_stop(v);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_active_window_by_local_time),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_governor_applies_a_replacement_within_a_second),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
