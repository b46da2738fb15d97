/* test_jobs_pause.c - the jobs runner's pause while the state database
 * refuses writes (jobs_util.c: jobs_db_trouble): 1 s, doubling to its
 * 30 s ceiling while the refusals go on, over at the first success. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "serving/jobs_impl.h"

static void test_pause_doubles_to_its_ceiling_and_ends(void **state)
{
    (void)state;
    static struct jobs j;   /* large: not on the stack */
    memset(&j, 0, sizeof j);
    assert_false(jobs_db_paused(&j));
    static const double want[] = {1, 2, 4, 8, 16, 30, 30};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_true(jobs_db_trouble(&j) == want[i]);
    assert_true(jobs_db_paused(&j));
    int64_t left = j.db_pause_until_ns - jobs_mono_ns();
    assert_true(left > 29000000000LL && left <= 30000000000LL);
    jobs_db_ok(&j);   /* a write went through: the next refusal starts over */
    assert_true(jobs_db_trouble(&j) == 1);
    j.db_pause_until_ns = jobs_mono_ns() - 1;   /* its second has passed */
    assert_false(jobs_db_paused(&j));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pause_doubles_to_its_ceiling_and_ends),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
