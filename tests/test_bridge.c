/* Suite "bridge": lib/bridge/abi.c's FP8 entries, which fattn-te's shim
 * calls for TE's tex.quantize (tools/te/fattn_te/bridge_fp8.py).
 *
 * cs_scale rows are recipe_common.cuh:14-49 (TE d0067d0) worked by hand:
 * FP8 max / max(amax, epsilon); 1 for a zero or non-finite amax; the float
 * maximum when the quotient overflows; pow-2 scales keep sign and exponent.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "fattn/bridge.h"
#include "fattn/fp8.h"
#include "fattn/status.h"
#include "fattn/tensor.h"
#include "fattn_test.h"

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

typedef struct cs_row {
    float amax;
    fattn_dtype dtype;
    int pow2;
    float eps;
    float want;
} cs_row;

static const cs_row cs_rows[] = {
    {1.0f, FATTN_DTYPE_FLOAT8_E4M3FN, 0, 0.0f, 448.0f},
    {2.0f, FATTN_DTYPE_FLOAT8_E5M2, 0, 0.0f, 28672.0f},
    {3.0f, FATTN_DTYPE_FLOAT8_E4M3FN, 0, 0.0f, 448.0f / 3.0f},
    {3.0f, FATTN_DTYPE_FLOAT8_E4M3FN, 1, 0.0f, 128.0f}, /* 149.33 -> 2^7 */
    {0.0f, FATTN_DTYPE_FLOAT8_E4M3FN, 0, 0.0f, 1.0f},
    {INFINITY, FATTN_DTYPE_FLOAT8_E4M3FN, 0, 0.0f, 1.0f},
    {NAN, FATTN_DTYPE_FLOAT8_E5M2, 0, 0.0f, 1.0f},
    {1e-40f, FATTN_DTYPE_FLOAT8_E5M2, 0, 0.0f, FLT_MAX}, /* 57344 / denormal overflows */
    {0.0f, FATTN_DTYPE_FLOAT8_E4M3FN, 0, 2.0f, 224.0f}, /* raised to epsilon */
};

START_TEST(cs_scale_rows)
{
    const cs_row *r = &cs_rows[_i];
    float got = fattn_bridge_fp8_cs_scale(r->amax, r->dtype, r->pow2, r->eps);
    ck_assert_msg(got == r->want, "row %d: scale %a, want %a", _i, (double)got, (double)r->want);
}
END_TEST

/* amax over a strided view skips a NaN (fmaxf) and reads only the view;
 * the cast is fattn_fp8_quantize element for element. */
START_TEST(amax_and_quantize_strided)
{
    float buf[8] = {0.5f, 99.0f, -3.0f, 99.0f, NAN, 99.0f, 2.0f, 99.0f};
    int64_t shape[1] = {4};
    fattn_tensor src = fattn_tensor_empty();
    src.data = buf;
    src.dtype = FATTN_DTYPE_FLOAT32;
    src.ndim = 1;
    src.shape[0] = shape[0];
    src.strides[0] = 2; /* every other element: 0.5, -3, NaN, 2 */
    float amax = -1.0f;
    ck_assert_int_eq(fattn_bridge_fp8_amax(&src, &amax), FATTN_OK);
    ck_assert_float_eq(amax, 3.0f);
    fattn_tensor dst;
    ck_assert_int_eq(fattn_tensor_alloc(&dst, FATTN_DTYPE_FLOAT8_E4M3FN, 1, shape), FATTN_OK);
    ck_assert_int_eq(fattn_bridge_fp8_quantize(&src, &dst, 16.0f), FATTN_OK);
    const float want[4] = {0.5f, -3.0f, NAN, 2.0f};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(((uint8_t *)dst.data)[i],
                         fattn_fp8_quantize(FATTN_DTYPE_FLOAT8_E4M3FN, want[i], 16.0f));
    fattn_tensor_free(&dst);
}
END_TEST

/* Errors as values: a destination that is not FP8, or of another size. */
START_TEST(quantize_refuses)
{
    float x[2] = {1.0f, 2.0f};
    int64_t two[1] = {2}, three[1] = {3};
    fattn_tensor src = fattn_tensor_empty(), f16, f8;
    src.data = x;
    src.dtype = FATTN_DTYPE_FLOAT32;
    src.ndim = 1;
    src.shape[0] = 2;
    src.strides[0] = 1;
    ck_assert_int_eq(fattn_tensor_alloc(&f16, FATTN_DTYPE_FLOAT16, 1, two), FATTN_OK);
    ck_assert_int_eq(fattn_tensor_alloc(&f8, FATTN_DTYPE_FLOAT8_E5M2, 1, three), FATTN_OK);
    ck_assert_int_eq(fattn_bridge_fp8_quantize(&src, &f16, 1.0f), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fattn_bridge_fp8_quantize(&src, &f8, 1.0f), FATTN_E_SHAPE);
    fattn_tensor_free(&f16);
    fattn_tensor_free(&f8);
}
END_TEST

static Suite *make_suite(void)
{
    Suite *s = suite_create("bridge");
    TCase *tc = tcase_create("fp8");
    tcase_add_loop_test(tc, cs_scale_rows, 0, NROWS(cs_rows));
    tcase_add_test(tc, amax_and_quantize_strided);
    tcase_add_test(tc, quantize_refuses);
    suite_add_tcase(s, tc);
    return s;
}

FATTN_TEST_MAIN(make_suite, fattn_test_no_ids)
