/* seeded.h - random test data that differs every run and replays: the
 * seed is BG_TEST_SEED when set, else the clock and the pid; a failure
 * says the seed (FAIL). One splitmix64 stream per test, so a test's data
 * does not depend on which tests ran before it. For the kernels' tests. */
#ifndef BG_TEST_SEEDED_H
#define BG_TEST_SEEDED_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static unsigned long long g_seed;   /* set once by seeded_init in main, read-only after */

#define FAIL(...)                                                                                \
    do {                                                                                         \
        char fail_buf_[512];                                                                     \
        snprintf(fail_buf_, sizeof fail_buf_, __VA_ARGS__);                                      \
        fail_msg("%s [seed %llu: rerun with BG_TEST_SEED=%llu]", fail_buf_, g_seed, g_seed);     \
    } while (0)

static inline void seeded_init(void)
{
    const char *env = getenv("BG_TEST_SEED");
    g_seed = env && *env ? strtoull(env, NULL, 0)
                         : (unsigned long long)time(NULL) * 1000003ull ^ (unsigned long long)getpid();
}

struct rng {
    uint64_t s;
};

static inline struct rng rng_for(const char *test)
{
    uint64_t h = 1469598103934665603ull;    /* FNV-1a of the test's name */
    for (const char *p = test; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    return (struct rng){g_seed ^ h};
}

static inline uint64_t rng_next(struct rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi). */
static inline float rng_uniform(struct rng *r, float lo, float hi)
{
    double u = (double)(rng_next(r) >> 11) / 9007199254740992.0;
    return (float)(lo + (hi - lo) * u);
}

#endif
