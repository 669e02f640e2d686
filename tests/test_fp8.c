/* FP8 conversions against an independent reference (ml_dtypes).
 *
 * tests/data/fp8_ml_dtypes.inc (made by tests/data/gen_fp8_table.py) holds
 * ml_dtypes' decoding of all 256 codes of each format and its encoding of
 * every float32 within 3 ulps of each representable value, each midpoint
 * (ties), the overflow thresholds and half the smallest subnormal, both
 * signs, plus zeros, infinities and NaNs; and the saturating encoding TE's
 * quantizer uses (ml_dtypes' cast of the input clipped to +-max, NaN ->
 * 0x7f). NaN conventions differ between implementations of the
 * non-saturating cast (ml_dtypes gives e5m2 NaN 0x7e, fattn 0x7f as
 * PyTorch does), so there a NaN code matches any NaN code; everything else,
 * including every saturating result, must match bit for bit.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fattn/fp8.h"
#include "fattn_test.h"

typedef struct fp8_ref_row {
    uint32_t in;
    uint8_t e4m3, e4m3_sat, e5m2, e5m2_sat;
} fp8_ref_row;

#include "data/fp8_ml_dtypes.inc"

#define N_ENCODE ((int)(sizeof ref_encode / sizeof ref_encode[0]))

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static bool code_is_nan(fattn_dtype t, uint8_t c)
{
    return isnan(fattn_fp8_decode(t, c));
}

typedef struct fmt_row {
    const char *id;
    fattn_dtype t;
    const uint32_t *decode;
} fmt_row;

static const fmt_row fmt_rows[] = {
    {"fp8.e4m3", FATTN_DTYPE_FLOAT8_E4M3FN, ref_e4m3_decode},
    {"fp8.e5m2", FATTN_DTYPE_FLOAT8_E5M2, ref_e5m2_decode},
};

START_TEST(decode_all_codes)
{
    const fmt_row *f = &fmt_rows[_i];
    for (int c = 0; c < 256; c++) {
        float got = fattn_fp8_decode(f->t, (uint8_t)c);
        float want = from_bits(f->decode[c]);
        if (isnan(want))
            ck_assert_msg(isnan(got), "%s code 0x%02x: %a, want NaN", f->id, c, got);
        else
            ck_assert_msg(bits_of(got) == f->decode[c], "%s code 0x%02x: 0x%08x, want 0x%08x",
                          f->id, c, bits_of(got), f->decode[c]);
    }
    char id[64];
    snprintf(id, sizeof id, "%s.decode", f->id);
    fattn_test_mark(id);
}
END_TEST

static uint8_t lib_cast(fattn_dtype t, float x)
{
    return t == FATTN_DTYPE_FLOAT8_E4M3FN ? fattn_f32_to_e4m3(x).bits
                                          : fattn_f32_to_e5m2(x).bits;
}

START_TEST(encode_reference)
{
    const fmt_row *f = &fmt_rows[_i];
    bool e4 = f->t == FATTN_DTYPE_FLOAT8_E4M3FN;
    int ties = 0, sat_differs = 0;
    for (int r = 0; r < N_ENCODE; r++) {
        const fp8_ref_row *row = &ref_encode[r];
        float x = from_bits(row->in);
        uint8_t want = e4 ? row->e4m3 : row->e5m2;
        uint8_t want_sat = e4 ? row->e4m3_sat : row->e5m2_sat;
        uint8_t got = lib_cast(f->t, x), got_sat = fattn_fp8_encode(f->t, x);
        if (code_is_nan(f->t, want))
            ck_assert_msg(code_is_nan(f->t, got), "%s cast 0x%08x: 0x%02x, want NaN", f->id,
                          row->in, got);
        else
            ck_assert_msg(got == want, "%s cast 0x%08x: 0x%02x, want 0x%02x", f->id, row->in,
                          got, want);
        ck_assert_msg(got_sat == want_sat, "%s saturating 0x%08x: 0x%02x, want 0x%02x",
                      f->id, row->in, got_sat, want_sat);
        /* the table really holds ties: inputs exactly between two codes */
        float lo = fattn_fp8_decode(f->t, (uint8_t)(want_sat & 0x7f));
        if (!isnan(x) && fabsf(x) != fabsf(lo) && fabsf(x) < fattn_fp8_max(f->t))
            ties += fabsf(x) == (fabsf(lo) + fattn_fp8_decode(f->t, (uint8_t)((want_sat & 0x7f) + 1))) / 2 ||
                    fabsf(x) == (fabsf(lo) + fattn_fp8_decode(f->t, (uint8_t)((want_sat & 0x7f) - 1))) / 2;
        sat_differs += want != want_sat;
    }
    ck_assert_msg(ties > 100, "%s: only %d ties in the table", f->id, ties);
    ck_assert_msg(sat_differs > 20, "%s: saturation exercised by %d rows", f->id, sat_differs);
    char id[64];
    snprintf(id, sizeof id, "%s.encode", f->id);
    fattn_test_mark(id);
}
END_TEST

/* Every 97th float32 pattern: the saturating encoder is the non-saturating
 * one wherever that gives a finite code, +-max where it overflows, 0x7f for
 * NaN; and every finite code survives decode -> encode. */
START_TEST(saturation_sweep)
{
    const fmt_row *f = &fmt_rows[_i];
    uint8_t max_code = f->t == FATTN_DTYPE_FLOAT8_E4M3FN ? 0x7e : 0x7b;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 97) {
        float x = from_bits((uint32_t)u);
        uint8_t sat = fattn_fp8_encode(f->t, x), plain = lib_cast(f->t, x);
        uint8_t want;
        if (isnan(x))
            want = 0x7f;
        else if (isnan(fattn_fp8_decode(f->t, plain)) || isinf(fattn_fp8_decode(f->t, plain)))
            want = (uint8_t)((signbit(x) ? 0x80 : 0) | max_code);
        else
            want = plain;
        if (sat != want)
            ck_abort_msg("%s 0x%08x: saturating 0x%02x, want 0x%02x", f->id, (uint32_t)u, sat,
                         want);
    }
    for (int c = 0; c < 256; c++) {
        float v = fattn_fp8_decode(f->t, (uint8_t)c);
        if (!isnan(v) && !isinf(v))
            ck_assert_uint_eq(fattn_fp8_encode(f->t, v), (uint8_t)c);
    }
    char id[64];
    snprintf(id, sizeof id, "%s.saturation_sweep", f->id);
    fattn_test_mark(id);
}
END_TEST

typedef struct quant_row {
    const char *id;
    fattn_dtype t;
    float v, scale, scale_inv;
    uint8_t code;
    float value;
} quant_row;

static const quant_row quant_rows[] = {
    {"fp8.quant.e4m3.scaled", FATTN_DTYPE_FLOAT8_E4M3FN, 0.75f, 4.0f, 0.25f, 0x44, 0.75f},
    {"fp8.quant.e4m3.saturates", FATTN_DTYPE_FLOAT8_E4M3FN, 300.0f, 2.0f, 0.5f, 0x7e, 224.0f},
    {"fp8.quant.e4m3.neg_inf", FATTN_DTYPE_FLOAT8_E4M3FN, -INFINITY, 1.0f, 1.0f, 0xfe, -448.0f},
    {"fp8.quant.e5m2.scaled", FATTN_DTYPE_FLOAT8_E5M2, 3.0f, 0.5f, 2.0f, 0x3e, 3.0f},
    {"fp8.quant.e5m2.saturates", FATTN_DTYPE_FLOAT8_E5M2, 1e5f, 1.0f, 1.0f, 0x7b, 57344.0f},
    {"fp8.quant.e5m2.underflow", FATTN_DTYPE_FLOAT8_E5M2, 1e-9f, 1.0f, 1.0f, 0x00, 0.0f},
};

START_TEST(quantize_rows)
{
    const quant_row *r = &quant_rows[_i];
    ck_assert_uint_eq(fattn_fp8_quantize(r->t, r->v, r->scale), r->code);
    ck_assert_float_eq(fattn_fp8_fake_quant(r->t, r->v, r->scale, r->scale_inv), r->value);
    fattn_test_mark(r->id);
}
END_TEST

START_TEST(fp8_dtype_facts)
{
    ck_assert(fattn_dtype_is_fp8(FATTN_DTYPE_FLOAT8_E4M3FN));
    ck_assert(fattn_dtype_is_fp8(FATTN_DTYPE_FLOAT8_E5M2));
    ck_assert(!fattn_dtype_is_fp8(FATTN_DTYPE_FLOAT16));
    ck_assert(!fattn_dtype_is_fp8(FATTN_DTYPE_UINT8));
    ck_assert_float_eq(fattn_fp8_max(FATTN_DTYPE_FLOAT8_E4M3FN), 448.0f);
    ck_assert_float_eq(fattn_fp8_max(FATTN_DTYPE_FLOAT8_E5M2), 57344.0f);
    ck_assert_float_eq(fattn_fp8_max(FATTN_DTYPE_BFLOAT16), 0.0f);
}
END_TEST

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *make_suite(void)
{
    Suite *s = suite_create("fp8");
    TCase *tc = tcase_create("fp8");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, decode_all_codes, 0, NROWS(fmt_rows));
    tcase_add_loop_test(tc, encode_reference, 0, NROWS(fmt_rows));
    tcase_add_loop_test(tc, saturation_sweep, 0, NROWS(fmt_rows));
    tcase_add_loop_test(tc, quantize_rows, 0, NROWS(quant_rows));
    tcase_add_test(tc, fp8_dtype_facts);
    suite_add_tcase(s, tc);
    return s;
}

static void list_ids(void)
{
    for (int i = 0; i < NROWS(fmt_rows); i++)
        printf("%s.decode\n%s.encode\n%s.saturation_sweep\n", fmt_rows[i].id, fmt_rows[i].id,
               fmt_rows[i].id);
    for (int i = 0; i < NROWS(quant_rows); i++)
        printf("%s\n", quant_rows[i].id);
}

FATTN_TEST_MAIN(make_suite, list_ids)
