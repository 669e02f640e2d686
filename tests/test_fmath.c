/* The CPU engine's own exp and log against double-precision libm.
 *
 * libm's double exp/log are accurate to well under a float ulp, so they
 * serve as the truth here; the property under test is "within 1 ulp of the
 * true value" plus exact special cases. Bit portability itself is proven in
 * test_cpu_bits.c (thread counts, -O0 vs -O2).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "fattn/dtype.h"
#include "fattn_test.h"

#include "cpu/fmath.h"

/* Distance in float ulps between a float result and the double truth. */
static double ulp_err(float got, double truth)
{
    if (truth > (double)FLT_MAX * (1.0 + 0x1p-25))
        return (isinf(got) && got > 0) ? 0.0 : 1e9;
    double at = fabs(truth);
    int e;
    frexp(at < 0x1p-126 ? 0x1p-126 : at, &e);
    double ulp = ldexp(1.0, e - 24);
    return fabs((double)got - truth) / ulp;
}

/* Every STEP-th float bit pattern in [lo_bits, hi_bits). */
typedef struct sweep {
    const char *id;
    int is_log;
    uint32_t lo_bits, hi_bits, step;
} sweep;

static const sweep sweeps[] = {
    /* exp: the whole interesting range of both signs, incl. subnormal results */
    {"fmath.exp.neg", 0, 0x80000000u, 0xC2E00000u /* -112 */, 61},
    {"fmath.exp.pos", 0, 0x00000000u, 0x42B20000u /* 89 */, 61},
    /* log: subnormals, normals up to FLT_MAX */
    {"fmath.log.subnormal", 1, 0x00000001u, 0x00800000u, 61},
    {"fmath.log.normal", 1, 0x00800000u, 0x7F800000u, 61},
};

START_TEST(test_sweep)
{
    const sweep *sw = &sweeps[_i];
    double worst = 0.0;
    float worst_x = 0.0f;
    for (uint64_t b = sw->lo_bits; b < sw->hi_bits; b += sw->step) {
        float x = fattn_f32_from_bits((uint32_t)b);
        float got = sw->is_log ? fattn__cpu_logf(x) : fattn_cpu_expf(x);
        double truth = sw->is_log ? log((double)x) : exp((double)x);
        double e = ulp_err(got, truth);
        if (e > worst) {
            worst = e;
            worst_x = x;
        }
    }
    ck_assert_msg(worst <= 1.0, "%s: %.3f ulp at x = %a", sw->id, worst, (double)worst_x);
    fattn_test_mark(sw->id);
}
END_TEST

typedef struct special {
    int is_log;
    float x;
    float want; /* compared bitwise; NaN compared as "is NaN" */
} special;

static const special specials[] = {
    {0, 0.0f, 1.0f},
    {0, -0.0f, 1.0f},
    {0, INFINITY, INFINITY},
    {0, -INFINITY, 0.0f},
    {0, 89.0f, INFINITY},
    {0, -104.0f, 0.0f},
    {0, NAN, NAN},
    {1, 1.0f, 0.0f},
    {1, 0.0f, -INFINITY},
    {1, -0.0f, -INFINITY},
    {1, -1.0f, NAN},
    {1, INFINITY, INFINITY},
    {1, NAN, NAN},
};

START_TEST(test_special)
{
    const special *c = &specials[_i];
    float got = c->is_log ? fattn__cpu_logf(c->x) : fattn_cpu_expf(c->x);
    if (isnan(c->want))
        ck_assert_msg(isnan(got), "%s(%a) = %a, want NaN", c->is_log ? "log" : "exp",
                      (double)c->x, (double)got);
    else
        ck_assert_msg(fattn_f32_bits(got) == fattn_f32_bits(c->want), "%s(%a) = %a, want %a",
                      c->is_log ? "log" : "exp", (double)c->x, (double)got, (double)c->want);
}
END_TEST

/* Both functions are monotone non-decreasing: a polynomial with a badly
 * placed reduction boundary would show up here as a step backwards. */
START_TEST(test_monotone)
{
    float prev_e = 0.0f, prev_l = -INFINITY;
    for (float x = -90.0f; x < 88.0f; x = nextafterf(x, INFINITY) + 0x1p-10f) {
        float e = fattn_cpu_expf(x);
        ck_assert_msg(e >= prev_e, "exp not monotone at %a", (double)x);
        prev_e = e;
    }
    for (float x = 1e-30f; x < 1e30f; x *= 1.0001f) {
        float l = fattn__cpu_logf(x);
        ck_assert_msg(l >= prev_l, "log not monotone at %a", (double)x);
        prev_l = l;
    }
}
END_TEST

static void list_ids(void)
{
    for (size_t i = 0; i < sizeof sweeps / sizeof sweeps[0]; i++)
        printf("%s\n", sweeps[i].id);
}

static Suite *make_suite(void)
{
    Suite *s = suite_create("fmath");
    TCase *tc = tcase_create("accuracy");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, test_sweep, 0, (int)(sizeof sweeps / sizeof sweeps[0]));
    tcase_add_loop_test(tc, test_special, 0, (int)(sizeof specials / sizeof specials[0]));
    tcase_add_test(tc, test_monotone);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, list_ids)
