/* test_tz.c - time zones read from the tz database against glibc's own
 * reading of the same files (localtime_r with TZ set: fine here, this test
 * is single-threaded): every offset at a million-odd instants from 1900 to
 * 2100 across zones north and south, with and without daylight saving,
 * with half- and quarter-hour offsets, past the files' last transitions
 * (where the POSIX rule in the footer applies). And the refusals. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/tz.h"
#include "tests/unit/scratch.h"

static int32_t glibc_offset(int64_t t)
{
    time_t tt = (time_t)t;
    struct tm tm;
    localtime_r(&tt, &tm);
    return (int32_t)tm.tm_gmtoff;
}

static void test_matches_glibc(void **state)
{
    (void)state;
    static const char *zones[] = {"America/New_York", "America/Sao_Paulo", "Europe/London",
                                  "Europe/Berlin", "Australia/Sydney", "Asia/Kolkata",
                                  "Pacific/Chatham", "America/Santiago", "UTC",
                                  "Australia/Lord_Howe", "Asia/Tokyo"};
    uint64_t x = 0x1234567;
    long checked = 0;
    for (size_t k = 0; k < sizeof zones / sizeof zones[0]; k++) {
        struct tz *z = NULL;
        struct error err = {0};
        if (tz_load(zones[k], &z, &err) != 0)
            fail_msg("%s: %s", zones[k], err.msg);
        setenv("TZ", zones[k], 1);
        tzset();
        /* Every 6 hours from 1970 to 2100, and random instants back to 1900. */
        for (int64_t t = 0; t < 4102444800LL; t += 6 * 3600) {
            if (tz_offset(z, t) != glibc_offset(t))
                fail_msg("%s at %lld: %d, glibc %d", zones[k], (long long)t, tz_offset(z, t),
                         glibc_offset(t));
            checked++;
        }
        for (int i = 0; i < 20000; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            int64_t t = -2208988800LL + (int64_t)(x % 6311433600ULL);
            if (tz_offset(z, t) != glibc_offset(t))
                fail_msg("%s at %lld: %d, glibc %d", zones[k], (long long)t, tz_offset(z, t),
                         glibc_offset(t));
            checked++;
        }
        tz_free(z);
    }
    print_message("# %ld instants agree with glibc\n", checked);
}

static void test_refusals(void **state)
{
    (void)state;
    struct tz *z = NULL;
    struct error err = {0};
    assert_int_not_equal(tz_load("../../etc/passwd", &z, &err), 0);
    assert_null(z);
    assert_non_null(strstr(err.msg, "IANA"));
    assert_int_not_equal(tz_load("/etc/localtime", &z, &err), 0);
    assert_int_not_equal(tz_load("Mars/Olympus_Mons", &z, &err), 0);
    assert_non_null(strstr(err.msg, "cannot read"));
    /* A file that is not TZif, and one cut short, in a zone folder of our own. */
    char dir[512], path[1024];
    test_scratch_template(dir, sizeof dir, "tz");
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/Bad", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("# not a zone\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/Short", dir);
    f = fopen(path, "w");
    assert_non_null(f);
    fwrite("TZif2\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\5", 1, 45, f);
    fclose(f);
    setenv("TZDIR", dir, 1);
    assert_int_not_equal(tz_load("Bad", &z, &err), 0);
    assert_non_null(strstr(err.msg, "not a TZif file"));
    assert_int_not_equal(tz_load("Short", &z, &err), 0);
    assert_non_null(strstr(err.msg, "not a TZif file"));
    unsetenv("TZDIR");
    snprintf(path, sizeof path, "%s/Bad", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/Short", dir);
    unlink(path);
    rmdir(dir);
    /* A zone that counts leap seconds: its wall time would need the
     * table (windows ran 27 s ahead of the zone's clock): refused. */
    if (access("/usr/share/zoneinfo/right/Europe/Paris", R_OK) == 0) {
        assert_int_not_equal(tz_load("right/Europe/Paris", &z, &err), 0);
        assert_non_null(strstr(err.msg, "counts leap seconds"));
    }
    /* The host's zone loads. */
    assert_int_equal(tz_load(NULL, &z, &err), 0);
    tz_free(z);
}

/* The host's zone is TZ's when it names one (a container sets TZ, not
 * /etc/localtime): it was always /etc/localtime, "localtime" in
 * GET /v2/governance. TZ is read as glibc reads it: a POSIX rule too, and
 * set but empty is UTC. A TZ that is no zone is refused, naming it: it fell
 * back to /etc/localtime without a word. */
static void test_host_zone_from_tz(void **state)
{
    (void)state;
    struct tz *z;
    struct error err = {0};
    if (access("/usr/share/zoneinfo/Asia/Kolkata", R_OK) != 0) {
        print_message("# no tzdata: skipped\n");
        return;
    }
    static const char *const named[] = {"Asia/Kolkata", ":Asia/Kolkata",
                                        ":/usr/share/zoneinfo/Asia/Kolkata"};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        setenv("TZ", named[i], 1);
        assert_int_equal(tz_load("", &z, &err), 0);
        assert_int_equal(tz_offset(z, 1796515200), 19800);   /* +05:30, no DST */
        assert_non_null(strstr(tz_name(z), "Asia/Kolkata"));
        tz_free(z);
    }
    /* Given, the configuration's zone wins. */
    assert_int_equal(tz_load("UTC", &z, &err), 0);
    assert_int_equal(tz_offset(z, 1796515200), 0);
    tz_free(z);
    /* POSIX rules, with and without daylight saving; empty is UTC. */
    static const struct {
        const char *tz;
        int32_t winter, summer;   /* at 2026-12-06 and 2026-07-01 */
    } rules[] = {{"<+0530>-5:30", 19800, 19800}, {"XST-5:45", 20700, 20700},
                 {"EST5EDT,M3.2.0,M11.1.0", -18000, -14400},
                 {"AEST-10AEDT,M10.1.0,M4.1.0/3", 39600, 36000}, {"", 0, 0},
                 /* Jn and n dates, as glibc reads them (its date +%z):
                  * J60 is March 1st, day 100 April 11th in 2026. */
                 {"IST-5:30IDT,J60/2,J300", 19800, 23400},
                 {"XST3XDT,100,200", -10800, -7200}, {":", 0, 0}};
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        setenv("TZ", rules[i].tz, 1);
        if (tz_load(NULL, &z, &err) != 0)
            fail_msg("TZ=%s: %s", rules[i].tz, err.msg);
        if (tz_offset(z, 1796515200) != rules[i].winter || tz_offset(z, 1782864000) != rules[i].summer)
            fail_msg("TZ=%s: %d and %d", rules[i].tz, (int)tz_offset(z, 1796515200),
                     (int)tz_offset(z, 1782864000));
        assert_string_equal(tz_name(z), rules[i].tz[0] && strcmp(rules[i].tz, ":") ? rules[i].tz
                                                                                  : "UTC");
        tz_free(z);
    }
    static const char *const other[] = {"Mars/Olympus_Mons", "../etc/passwd", "Asia", "/tmp",
                                        "/etc/passwd", "XST5XDT", ":XST-5:45"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        setenv("TZ", other[i], 1);
        assert_int_equal(tz_load(NULL, &z, &err), -BG_ECONFIG);
        assert_null(z);
        if (!strstr(err.msg, "names no time zone batchgate can read") || !strstr(err.msg, other[i]))
            fail_msg("TZ=%s: %s", other[i], err.msg);
    }
    unsetenv("TZ");
    /* /etc/localtime alone, whatever TZ says, named by its link into a
     * zoneinfo folder (it said "localtime" for Europe/Paris). */
    setenv("TZ", "Mars/Olympus_Mons", 1);
    assert_int_equal(tz_load_localtime(&z, &err), 0);
    char target[4096];
    ssize_t n = readlink("/etc/localtime", target, sizeof target - 1);
    const char *zi = NULL;
    if (n > 0) {
        target[n] = '\0';
        zi = strstr(target, "zoneinfo/");
    }
    assert_string_equal(tz_name(z), zi && zi[9] ? zi + 9 : "localtime");
    tz_free(z);
    unsetenv("TZ");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_glibc),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_host_zone_from_tz),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
