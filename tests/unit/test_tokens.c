/* test_tokens.c - token budgets (#20) in the latency model: the quadratic
 * term fitted where it shows and left out where it does not, and windows
 * of batches of one size. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "batcher/latmodel.h"

#define MS 1000000LL
#define US 1000LL

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* ---- the latency model ---- */

/* A batch of `rows` rows of random lengths 5..200: its tokens and squares. */
static void random_batch(uint64_t *s, int rows, int64_t *tokens, int64_t *sq)
{
    *tokens = *sq = 0;
    for (int r = 0; r < rows; r++) {
        int64_t len = 5 + (int64_t)(rnd(s) % 196);
        *tokens += len;
        *sq += len * len;
    }
}

static void test_latmodel_tokens_without_lengths_fit_as_rows(void **state)
{
    (void)state;
    struct latmodel a, b;
    latmodel_init(&a);
    latmodel_init(&b);
    uint64_t s = 7;
    for (int i = 0; i < 60; i++) {
        int64_t x = 1 + (int64_t)(rnd(&s) % 64), ns = 2 * MS + x * 100 * US + (int64_t)(rnd(&s) % 50000);
        latmodel_add(&a, x, ns);
        latmodel_add_sq(&b, x, 0, ns);
    }
    assert_true(a.a_ns == b.a_ns && a.b_ns == b.b_ns && a.margin_ns == b.margin_ns);
    assert_true(a.c_ns == 0 && b.c_ns == 0);
    assert_true(latmodel_predict(&a, 10) == latmodel_predict_sq(&b, 10, 12345));
}

/* exec = 1 ms + 10 us/token + 50 ns/len^2 (attention half of a 200-token
 * row's time): exact samples give the exact model; with 5% noise and one
 * batch in ten stalled 3x, c and b stay within 25% and the predictions of
 * a batch of long rows and of short rows beat the fit without lengths. */
static void test_latmodel_quadratic_term_where_it_shows(void **state)
{
    (void)state;
    const double A = 1.0 * MS, B = 10.0 * US, C = 50.0;
    struct latmodel exact, noisy, linear;
    latmodel_init(&exact);
    latmodel_init(&noisy);
    latmodel_init(&linear);
    uint64_t s = 42;
    for (int i = 0; i < 96; i++) {
        int64_t tok, sq;
        random_batch(&s, 1 + i % 32, &tok, &sq);
        double e = A + B * tok + C * sq;
        latmodel_add_sq(&exact, tok, sq, (int64_t)e);
        double noise = 1.0 + 0.05 * ((double)(rnd(&s) % 2001) / 1000.0 - 1.0);
        int64_t ns = (int64_t)(e * noise * (i % 10 == 3 ? 3.0 : 1.0));
        latmodel_add_sq(&noisy, tok, sq, ns);
        latmodel_add(&linear, tok, ns);
    }
    if (fabs(exact.c_ns - C) > 0.01 * C || fabs(exact.b_ns - B) > 0.01 * B ||
        fabs(exact.a_ns - A) > 0.01 * A)
        fail_msg("exact samples: a %.0f b %.1f c %.3f", exact.a_ns, exact.b_ns, exact.c_ns);
    if (fabs(noisy.c_ns - C) > 0.25 * C || fabs(noisy.b_ns - B) > 0.25 * B)
        fail_msg("noisy samples: a %.0f b %.1f c %.3f", noisy.a_ns, noisy.b_ns, noisy.c_ns);
    /* 10 rows of 200 tokens, and 40 rows of 20 (the margins aside). */
    int64_t long_true = (int64_t)(A + B * 2000 + C * 10 * 40000);
    int64_t short_true = (int64_t)(A + B * 800 + C * 40 * 400);
    int64_t long_q = latmodel_predict_sq(&noisy, 2000, 400000) - (int64_t)noisy.margin_ns;
    int64_t short_q = latmodel_predict_sq(&noisy, 800, 16000) - (int64_t)noisy.margin_ns;
    int64_t long_l = latmodel_predict(&linear, 2000) - (int64_t)linear.margin_ns;
    int64_t short_l = latmodel_predict(&linear, 800) - (int64_t)linear.margin_ns;
    if (llabs(long_q - long_true) >= llabs(long_l - long_true) ||
        llabs(short_q - short_true) >= llabs(short_l - short_true))
        fail_msg("with lengths %lld/%lld, without %lld/%lld, true %lld/%lld", (long long)long_q,
                 (long long)short_q, (long long)long_l, (long long)short_l,
                 (long long)long_true, (long long)short_true);
    assert_true(noisy.margin_ns < linear.margin_ns);
}

/* No quadratic cost in the device: the term is left out (its confidence
 * interval holds 0) in all but a few of 200 windows of noisy batches, and
 * where chance keeps it, batches of like lengths, long or short, are
 * still planned (margin included) for no less than 95% of their time, nor
 * more than 125%. */
static void test_latmodel_quadratic_term_left_out_where_it_does_not(void **state)
{
    (void)state;
    int kept = 0;
    for (uint64_t seed = 1; seed <= 200; seed++) {
        struct latmodel m;
        latmodel_init(&m);
        uint64_t s = seed * 2654435761u;
        for (int i = 0; i < 96; i++) {
            int64_t tok, sq;
            random_batch(&s, 1 + i % 32, &tok, &sq);
            double noise = 1.0 + 0.03 * ((double)(rnd(&s) % 2001) / 1000.0 - 1.0);
            latmodel_add_sq(&m, tok, sq, (int64_t)((1.0 * MS + 10.0 * US * tok) * noise));
        }
        if (m.c_ns == 0)
            continue;
        kept++;
        double lng = latmodel_predict_sq(&m, 2000, 400000) / (1.0 * MS + 10.0 * US * 2000);
        double shrt = latmodel_predict_sq(&m, 800, 16000) / (1.0 * MS + 10.0 * US * 800);
        if (lng < 0.95 || lng > 1.25 || shrt < 0.95 || shrt > 1.25)
            fail_msg("seed %llu: c %.3f b %.1f a %.0f margin %.0f plans %.3f and %.3f of the "
                     "time", (unsigned long long)seed, m.c_ns, m.b_ns, m.a_ns, m.margin_ns, lng,
                     shrt);
    }
    if (kept > 5)
        fail_msg("the term was kept in %d of 200 windows of a device without one", kept);
}

/* Every batch at the token cap and the time unrelated to the tokens (a
 * padded device: its time follows the longest row): the slope cannot be
 * told, and the model must still predict those batches as they ran rather
 * than overshoot, clamp the intercept and blow up its margin. */
static void test_latmodel_batches_of_one_size_keep_a_sane_margin(void **state)
{
    (void)state;
    struct latmodel m;
    latmodel_init(&m);
    uint64_t s = 3;
    for (int i = 0; i < 96; i++) {
        int64_t tok = 1900 + (int64_t)(rnd(&s) % 149);
        int64_t ns = 30 * MS + (int64_t)(rnd(&s) % (20 * MS));
        latmodel_add_sq(&m, tok, tok * 100, ns);
    }
    int64_t p = latmodel_predict_sq(&m, 2000, 200000);
    if (m.margin_ns > 20 * MS || p < 40 * MS || p > 70 * MS)
        fail_msg("a %.0f b %.1f c %.3f margin %.0f: exec(2000) predicted %lld", m.a_ns, m.b_ns,
                 m.c_ns, m.margin_ns, (long long)p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_latmodel_tokens_without_lengths_fit_as_rows),
        cmocka_unit_test(test_latmodel_quadratic_term_where_it_shows),
        cmocka_unit_test(test_latmodel_quadratic_term_left_out_where_it_does_not),
        cmocka_unit_test(test_latmodel_batches_of_one_size_keep_a_sane_margin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
