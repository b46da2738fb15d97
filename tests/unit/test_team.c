/* test_team.c - common/team: every member runs each step exactly once and
 * team_run returns only after all have (a step reads what the previous
 * one wrote, as the encoder's forward pass does); sleeping members wake. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <cmocka.h>

#include "common/team.h"

#define SLOTS 64

struct step {
    int64_t v[SLOTS];
    int round;
};

/* Member i adds to its slots what the previous step left in its neighbour's:
 * a member that ran early or late breaks the sums below. */
static void add_step(void *arg, int i, int n)
{
    struct step *s = arg;
    for (int k = i; k < SLOTS; k += n)
        s->v[k] += (k + s->round) % 7 + 1;
}

static void check(int members, int rounds, int sleep_every)
{
    struct team *t;
    assert_int_equal(team_new(members, &t), 0);
    assert_int_equal(team_size(t), members < 1 ? 1 : members);
    struct step s = {0};
    int64_t want[SLOTS] = {0};
    for (int r = 0; r < rounds; r++) {
        s.round = r;
        team_run(t, add_step, &s);
        for (int k = 0; k < SLOTS; k++) {
            want[k] += (k + r) % 7 + 1;
            assert_int_equal(s.v[k], want[k]);   /* all done when team_run returned */
        }
        if (sleep_every && r % sleep_every == 0) {
            struct timespec ts = {0, 2000000};   /* past the spin: members sleep */
            nanosleep(&ts, NULL);
        }
    }
    team_free(t);
}

static void test_team(void **state)
{
    (void)state;
    check(0, 10, 0);
    check(1, 10, 0);
    check(2, 2000, 0);
    check(4, 300, 0);
    check(3, 40, 4);
    team_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_team)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
