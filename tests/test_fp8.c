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
#include <float.h>
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
/* TE's fused delayed-scaling update (delayed_scaling.cu kernel_bulk,
 * release_v2.19), one state per row: history [len][n] row-major and scales
 * before and after, worked out by hand from the kernel. */
#define UPD_MAX 12
typedef struct update_row {
    const char *id;
    int64_t len, n;
    fattn_fp8_amax_algo algo;
    fattn_dtype dtype;
    int margin;
    bool has_reduced;
    float reduced[UPD_MAX];
    float hist[UPD_MAX], scale[UPD_MAX];
    float want_hist[UPD_MAX], want_scale[UPD_MAX];
} update_row;

static const update_row update_rows[] = {
    /* amax_history_len 1, most_recent (TE's test_dpa_fp8_extra_state): the
     * newest amax makes the scale, row 0 is zeroed; an unused quantizer
     * (amax 0) keeps its scale and its row */
    {"fp8.update.len1.most_recent", 1, 3, FATTN_FP8_AMAX_MOST_RECENT, FATTN_DTYPE_FLOAT8_E4M3FN,
     0, false, {0}, {2.0f, 0.0f, 0.5f}, {1.0f, 3.0f, 1.0f}, {0.0f, 0.0f, 0.0f},
     {224.0f, 3.0f, 896.0f}},
    /* len 4, max, E5M2 margin 1: column 0 rolls (row 1 dropped, the newest
     * at the end) and takes the largest of rows 1..3 and the newest;
     * column 1's newest is 0, so nothing rolls and the scale stays */
    {"fp8.update.len4.max.margin", 4, 2, FATTN_FP8_AMAX_MAX, FATTN_DTYPE_FLOAT8_E5M2, 1, false,
     {0}, {3.0f, 0.0f, 1.0f, 5.0f, 8.0f, 6.0f, 2.0f, 7.0f}, {1.0f, 2.5f},
     {0.0f, 0.0f, 8.0f, 5.0f, 2.0f, 6.0f, 3.0f, 7.0f}, {3584.0f, 2.5f}},
    /* the reduction buffer's value wins where it is not 0 */
    {"fp8.update.reduced", 2, 2, FATTN_FP8_AMAX_MOST_RECENT, FATTN_DTYPE_FLOAT8_E4M3FN, 0, true,
     {6.0f, 0.0f}, {1.0f, 2.0f, 4.0f, 9.0f}, {1.0f, 1.0f}, {0.0f, 0.0f, 6.0f, 2.0f},
     {448.0f / 6.0f, 448.0f / 2.0f}},
    /* an amax so small that the quotient overflows: FLT_MAX; a negative
     * margin raises the target */
    {"fp8.update.tiny_amax", 1, 2, FATTN_FP8_AMAX_MAX, FATTN_DTYPE_FLOAT8_E4M3FN, -2, false, {0},
     {1e-45f, 7.0f}, {1.0f, 1.0f}, {0.0f, 0.0f}, {FLT_MAX, 1792.0f / 7.0f}},
    /* inf and NaN amaxes keep the scale (most_recent); under max a NaN
     * newest is passed over by fmaxf and the older rows decide */
    {"fp8.update.nonfinite", 2, 3, FATTN_FP8_AMAX_MOST_RECENT, FATTN_DTYPE_FLOAT8_E4M3FN, 0,
     false, {0}, {INFINITY, NAN, 1.0f, 2.0f, 2.0f, 2.0f}, {5.0f, 6.0f, 1.0f},
     {0.0f, 0.0f, 0.0f, INFINITY, NAN, 1.0f}, {5.0f, 6.0f, 448.0f}},
    {"fp8.update.nan_max", 3, 1, FATTN_FP8_AMAX_MAX, FATTN_DTYPE_FLOAT8_E4M3FN, 0, false, {0},
     {NAN, 4.0f, 7.0f}, {1.0f}, {0.0f, 7.0f, NAN}, {64.0f}},
};

static bool same_f32(float a, float b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

START_TEST(delayed_update_rows)
{
    const update_row *r = &update_rows[_i];
    float hist[UPD_MAX], scale[UPD_MAX];
    memcpy(hist, r->hist, sizeof hist);
    memcpy(scale, r->scale, sizeof scale);
    fattn_fp8_recipe_state st = {r->len, r->n, scale, hist};
    ck_assert_int_eq(fattn_fp8_delayed_update(&st, r->has_reduced ? r->reduced : NULL, r->algo,
                                              r->dtype, r->margin),
                     FATTN_OK);
    for (int64_t i = 0; i < r->len * r->n; i++)
        ck_assert_msg(same_f32(hist[i], r->want_hist[i]), "%s: history[%lld] %a, want %a", r->id,
                      (long long)i, hist[i], r->want_hist[i]);
    for (int64_t i = 0; i < r->n; i++)
        ck_assert_msg(same_f32(scale[i], r->want_scale[i]), "%s: scale[%lld] %a, want %a", r->id,
                      (long long)i, scale[i], r->want_scale[i]);
    fattn_test_mark(r->id);
}
END_TEST

START_TEST(delayed_update_refusals)
{
    float h[2] = {1.0f, 1.0f}, sc[2] = {1.0f, 1.0f};
    fattn_fp8_recipe_state ok = {1, 2, sc, h}, empty = {0, 2, sc, h};
    ck_assert_int_eq(fattn_fp8_delayed_update(&empty, NULL, FATTN_FP8_AMAX_MAX,
                                              FATTN_DTYPE_FLOAT8_E4M3FN, 0), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fattn_fp8_delayed_update(&ok, NULL, FATTN_FP8_AMAX_MAX,
                                              FATTN_DTYPE_BFLOAT16, 0), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fattn_fp8_delayed_update(&ok, NULL, (fattn_fp8_amax_algo)7,
                                              FATTN_DTYPE_FLOAT8_E4M3FN, 0), FATTN_E_INVALID_ARG);
    ck_assert_int_eq(fattn_fp8_delayed_update(&ok, NULL, FATTN_FP8_AMAX_MAX,
                                              FATTN_DTYPE_FLOAT8_E4M3FN, 65), FATTN_E_INVALID_ARG);
    /* nothing was touched by a refusal */
    ck_assert(h[0] == 1.0f && sc[0] == 1.0f);
    fattn_fp8_amax_algo a;
    ck_assert_int_eq(fattn_fp8_amax_algo_parse("most_recent", &a), FATTN_OK);
    ck_assert_int_eq(a, FATTN_FP8_AMAX_MOST_RECENT);
    ck_assert_int_eq(fattn_fp8_amax_algo_parse("mean", &a), FATTN_E_PARSE);
    ck_assert_str_eq(fattn_fp8_amax_algo_name(FATTN_FP8_AMAX_MAX), "max");
    fattn_test_mark("fp8.update.refusals");
}
END_TEST


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
    tcase_add_loop_test(tc, delayed_update_rows, 0, NROWS(update_rows));
    tcase_add_test(tc, delayed_update_refusals);
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
    for (int i = 0; i < NROWS(update_rows); i++)
        printf("%s\n", update_rows[i].id);
    printf("fp8.update.refusals\n");
}

FATTN_TEST_MAIN(make_suite, list_ids)
