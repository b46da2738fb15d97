/* test_cpus.c - the CPU count a cgroup quota allows (common/cpus.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "common/cpus.h"

static void test_quota_lines(void **s)
{
    (void)s;
    assert_int_equal(cpus_from_quota("200000 100000\n"), 2);
    assert_int_equal(cpus_from_quota("150000 100000"), 2);   /* 1.5 CPUs: rounded up */
    assert_int_equal(cpus_from_quota("50000 100000"), 1);
    assert_int_equal(cpus_from_quota("max 100000\n"), 0);    /* no bound */
    assert_int_equal(cpus_from_quota("-1 100000"), 0);       /* v1's "none" */
    assert_int_equal(cpus_from_quota("100000 0"), 0);
    assert_int_equal(cpus_from_quota("12x 100000"), 0);
    assert_int_equal(cpus_from_quota(""), 0);
    assert_int_equal(cpus_from_quota(NULL), 0);
    assert_true(cpus_usable() >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_quota_lines)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
