/* test_hist.c - the load generator's histogram: every value from 1 us to
 * 100 s is reported within 1 %, quantiles of known distributions, merge. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "common/hist.h"

static void test_relative_error_over_the_range(void **state)
{
    (void)state;
    static struct hist h;
    for (double v = 1000; v <= 100e9; v *= 1.0037) {
        hist_reset(&h);
        hist_record(&h, (int64_t)v);
        hist_record(&h, (int64_t)v);
        double got = (double)hist_quantile(&h, 0.5);
        if (fabs(got - v) > 0.01 * v + 1)
            fail_msg("%.0f ns reported as %.0f (%.3f%% off)", v, got, 100 * fabs(got - v) / v);
    }
}

static void test_quantiles(void **state)
{
    (void)state;
    static struct hist h;
    hist_reset(&h);
    for (int i = 1; i <= 10000; i++)
        hist_record(&h, (int64_t)i * 1000);   /* 1 us .. 10 ms uniformly */
    assert_true(llabs(hist_quantile(&h, 0.5) - 5000000) < 50000);
    assert_true(llabs(hist_quantile(&h, 0.99) - 9900000) < 99000);
    assert_int_equal(hist_quantile(&h, 1.0), 10000000);
    assert_int_equal(h.count, 10000);
    assert_true(fabs(hist_mean(&h) - 5000500.0) < 1);
    static struct hist g;
    hist_reset(&g);
    hist_record(&g, 50000000000LL);
    hist_merge(&h, &g);
    assert_int_equal(h.count, 10001);
    assert_int_equal(hist_quantile(&h, 1.0), 50000000000LL);
    hist_reset(&g);
    assert_int_equal(hist_quantile(&g, 0.5), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_relative_error_over_the_range),
        cmocka_unit_test(test_quantiles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
