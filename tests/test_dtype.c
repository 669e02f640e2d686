/* Suite "dtype": names, sizes and the exact float conversions.
 *
 * The expected values here never come from lib/core/dtype.c: every decode is
 * recomputed from the format definition with ldexp, and every rounding check
 * uses an independent nearest-value search over the format's code table.
 *
 * Signalling NaNs: widening copies the payload bits (a signalling float16 or
 * bfloat16 NaN becomes a float32 NaN with the quiet bit still clear);
 * narrowing always sets the quiet bit, so a signalling NaN comes back as
 * its own bits with the quiet bit (0x0200 for float16, 0x0040 for bfloat16)
 * added. fp8 NaNs narrow to the canonical sign|0x7f in both formats.
 */
#include <math.h>
#include <stdint.h>

#include "fattn/dtype.h"
#include "fattn_test.h"

/* Check's ck_assert* records a mark point (a write to the runner) on every
 * success; in the loops over millions of values that dominates the run time,
 * so hot loops use this form, which only calls into Check on failure. */
#define EXPECT(cond, ...)                                                      \
    do {                                                                       \
        if (!(cond))                                                           \
            ck_abort_msg(__VA_ARGS__);                                         \
    } while (0)

/* ---- independent format model -------------------------------------------- */

typedef struct fmt_model {
    const char *id; /* "f16", "bf16", "e4m3", "e5m2" */
    int ebits, mbits, bias;
    bool fn; /* e4m3fn: no inf, only all-ones is NaN */
} fmt_model;

static const fmt_model model_f16 = {"f16", 5, 10, 15, false};
static const fmt_model model_bf16 = {"bf16", 8, 7, 127, false};
static const fmt_model model_e4m3 = {"e4m3", 4, 3, 7, true};
static const fmt_model model_e5m2 = {"e5m2", 5, 2, 15, false};

/* Value of `code` from sign/exponent/mantissa; NaN for NaN codes. When
 * `as_normal` is set, an all-ones exponent is decoded like a normal one
 * (used for the "one past max" virtual code of the rounding reference). */
static double model_decode(const fmt_model *f, uint32_t code, bool as_normal)
{
    uint32_t nbits = (uint32_t)(f->ebits + f->mbits);
    uint32_t sign = (code >> nbits) & 1u;
    uint32_t e = (code >> f->mbits) & ((1u << f->ebits) - 1u);
    uint32_t m = code & ((1u << f->mbits) - 1u);
    uint32_t emax = (1u << f->ebits) - 1u;
    double v;
    if (!as_normal && f->fn && e == emax && m == (1u << f->mbits) - 1u)
        return NAN;
    if (!as_normal && !f->fn && e == emax)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp((double)m, 1 - f->bias - f->mbits);
    else
        v = ldexp((double)((1u << f->mbits) + m), (int)e - f->bias - f->mbits);
    return sign ? -v : v;
}

static uint32_t model_max_code(const fmt_model *f)
{
    uint32_t emax = (1u << f->ebits) - 1u;
    uint32_t mmax = (1u << f->mbits) - 1u;
    return f->fn ? ((emax << f->mbits) | (mmax - 1u)) : (((emax - 1u) << f->mbits) | mmax);
}

/* Values of the non-negative codes 0 .. max+1 (decoded as normals), built
 * once per format: a sorted table for the rounding reference. */
static const double *model_values(const fmt_model *f)
{
    static double *cache[4];
    static const fmt_model *owner[4];
    for (int i = 0; i < 4; i++) {
        if (owner[i] == f)
            return cache[i];
        if (!owner[i]) {
            uint32_t top = model_max_code(f) + 1u;
            double *v = malloc(sizeof(double) * (top + 1u));
            ck_assert_ptr_nonnull(v);
            for (uint32_t c = 0; c <= top; c++)
                v[c] = model_decode(f, c, true);
            owner[i] = f;
            cache[i] = v;
            return v;
        }
    }
    ck_abort_msg("too many formats");
    return NULL;
}

/* Nearest code to non-NaN x, ties to the even code; the code one past the
 * largest finite one stands for overflow (returned as-is). Exact: midpoints
 * of adjacent codes are exact doubles and x is a float. */
static uint32_t model_round(const fmt_model *f, float x)
{
    uint32_t nbits = (uint32_t)(f->ebits + f->mbits);
    uint32_t sign = signbit(x) ? (1u << nbits) : 0u;
    double a = fabs((double)x);
    uint32_t top = model_max_code(f) + 1u; /* the overflow code */
    const double *val = model_values(f);
    if (isinf(a) || a >= val[top])
        return sign | top;
    /* largest code with value <= a */
    uint32_t lo = 0, hi = top;
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (val[mid] <= a)
            lo = mid;
        else
            hi = mid;
    }
    double vlo = val[lo];
    double vhi = val[hi];
    double midv = (vlo + vhi) / 2;
    uint32_t c;
    if (a < midv)
        c = lo;
    else if (a > midv)
        c = hi;
    else
        c = (lo & 1u) ? hi : lo;
    return sign | c;
}

/* What the library must produce for non-NaN x, per the header. */
static uint32_t model_expected(const fmt_model *f, float x)
{
    uint32_t nbits = (uint32_t)(f->ebits + f->mbits);
    uint32_t c = model_round(f, x);
    uint32_t mag = c & ((1u << nbits) - 1u);
    if (mag == model_max_code(f) + 1u) {
        uint32_t sign = c & (1u << nbits);
        uint32_t emax = (1u << f->ebits) - 1u;
        /* IEEE: inf; e4m3fn: NaN (0x7f) */
        return sign | (f->fn ? ((emax << f->mbits) | ((1u << f->mbits) - 1u))
                             : (emax << f->mbits));
    }
    return c;
}

static uint32_t lib_narrow(const fmt_model *f, float x)
{
    if (f == &model_f16)
        return fattn_f32_to_f16(x).bits;
    if (f == &model_bf16)
        return fattn_f32_to_bf16(x).bits;
    if (f == &model_e4m3)
        return fattn_f32_to_e4m3(x).bits;
    return fattn_f32_to_e5m2(x).bits;
}

static float lib_widen(const fmt_model *f, uint32_t code)
{
    if (f == &model_f16) {
        fattn_f16 h = {(uint16_t)code};
        return fattn_f16_to_f32(h);
    }
    if (f == &model_bf16) {
        fattn_bf16 h = {(uint16_t)code};
        return fattn_bf16_to_f32(h);
    }
    if (f == &model_e4m3) {
        fattn_e4m3 h = {(uint8_t)code};
        return fattn_e4m3_to_f32(h);
    }
    fattn_e5m2 h = {(uint8_t)code};
    return fattn_e5m2_to_f32(h);
}

static uint32_t bits_of(float f) { return fattn_f32_bits(f); }
static float from_bits(uint32_t u) { return fattn_f32_from_bits(u); }

/* ---- round trips of every bit pattern ------------------------------------ */

static void check_all_patterns(const fmt_model *f)
{
    uint32_t nbits = (uint32_t)(f->ebits + f->mbits);
    uint32_t count = 1u << (nbits + 1);
    uint32_t quiet = f->fn ? 0u : (1u << (f->mbits - 1));
    for (uint32_t code = 0; code < count; code++) {
        float w = lib_widen(f, code);
        double ref = model_decode(f, code, false);
        uint32_t back = lib_narrow(f, w);
        if (isnan(ref)) {
            EXPECT(isnan(w), "%s 0x%x widened to non-NaN %a", f->id, code, (double)w);
            EXPECT((signbit(w) != 0) == (((code >> nbits) & 1u) != 0),
                          "%s 0x%x NaN sign lost", f->id, code);
            uint32_t expect;
            if (f == &model_f16 || f == &model_bf16)
                expect = code | quiet; /* payload kept, quiet bit forced */
            else
                expect = (code & (1u << nbits)) | 0x7fu; /* canonical fp8 NaN */
            EXPECT(back == expect, "%s NaN 0x%x narrowed to 0x%x, want 0x%x", f->id,
                          code, back, expect);
            if (f == &model_f16 || f == &model_bf16) {
                /* widening keeps the payload bits exactly */
                uint32_t shift = 23u - (uint32_t)f->mbits;
                uint32_t want_bits = ((code >> nbits) << 31) | 0x7f800000u |
                                     ((code & ((1u << f->mbits) - 1u)) << shift);
                EXPECT((bits_of(w) | (quiet << shift)) == (want_bits | (quiet << shift)),
                              "%s NaN 0x%x widened to 0x%08x", f->id, code, bits_of(w));
            }
            continue;
        }
        /* widening is exact and equals the definition (incl. -0, inf) */
        EXPECT(bits_of(w) == bits_of((float)ref), "%s 0x%x -> %a, want %a", f->id,
                      code, (double)w, ref);
        EXPECT(back == code, "%s 0x%x -> %a -> 0x%x", f->id, code, (double)w, back);
    }
}

START_TEST(f16_roundtrip)
{
    check_all_patterns(&model_f16);
    fattn_test_mark("dtype.f16.roundtrip");
}
END_TEST

START_TEST(bf16_roundtrip)
{
    check_all_patterns(&model_bf16);
    /* bfloat16 is the top half of binary32, bit for bit */
    for (uint32_t c = 0; c < 65536; c++) {
        fattn_bf16 h = {(uint16_t)c};
        EXPECT(bits_of(fattn_bf16_to_f32(h)) == c << 16, "bf16 0x%x", c);
    }
    fattn_test_mark("dtype.bf16.roundtrip");
}
END_TEST

START_TEST(e4m3_roundtrip)
{
    check_all_patterns(&model_e4m3);
    /* only 0x7f/0xff are NaN; no pattern is infinite */
    for (uint32_t c = 0; c < 256; c++) {
        float w = lib_widen(&model_e4m3, c);
        ck_assert(!isinf(w));
        ck_assert_int_eq(isnan(w) != 0, (c & 0x7f) == 0x7f);
    }
    fattn_test_mark("dtype.e4m3.roundtrip");
}
END_TEST

START_TEST(e5m2_roundtrip)
{
    check_all_patterns(&model_e5m2);
    ck_assert(isinf(lib_widen(&model_e5m2, 0x7c)) && lib_widen(&model_e5m2, 0x7c) > 0);
    ck_assert(isinf(lib_widen(&model_e5m2, 0xfc)) && lib_widen(&model_e5m2, 0xfc) < 0);
    for (uint32_t c = 0x7d; c <= 0x7f; c++) {
        ck_assert(isnan(lib_widen(&model_e5m2, c)));
        ck_assert(isnan(lib_widen(&model_e5m2, c | 0x80)));
    }
    fattn_test_mark("dtype.e5m2.roundtrip");
}
END_TEST

/* ---- rounding against the reference model --------------------------------- */

static void check_narrow(const fmt_model *f, float x)
{
    uint32_t got = lib_narrow(f, x);
    uint32_t want = model_expected(f, x);
    EXPECT(got == want, "%s(%a = 0x%08x) = 0x%x, want 0x%x", f->id, (double)x,
                  bits_of(x), got, want);
}

static const fmt_model *const all_models[] = {&model_f16, &model_bf16, &model_e4m3,
                                              &model_e5m2};

/* Every midpoint between adjacent codes (and the two floats either side),
 * including the one between the largest finite value and the overflow
 * value, for both signs. */
START_TEST(rounding_midpoints)
{
    const fmt_model *f = all_models[_i];
    uint32_t top = model_max_code(f) + 1u;
    for (uint32_t c = 0; c < top; c++) {
        double mid = (model_decode(f, c, true) + model_decode(f, c + 1, true)) / 2;
        float m = (float)mid;
        EXPECT((double)m == mid, "%s midpoint %u not a float", f->id, c);
        float xs[3] = {m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
        for (int k = 0; k < 3; k++) {
            check_narrow(f, xs[k]);
            check_narrow(f, -xs[k]);
        }
    }
}
END_TEST

/* A stride through all positive float32 patterns (both signs), finite and
 * infinite. */
START_TEST(rounding_sweep)
{
    const fmt_model *f = all_models[_i];
    for (uint64_t u = 0; u <= 0x7f800000u; u += 509) {
        float x = from_bits((uint32_t)u);
        check_narrow(f, x);
        check_narrow(f, -x);
    }
    check_narrow(f, INFINITY);
    check_narrow(f, -INFINITY);
    check_narrow(f, from_bits(0x7f7fffffu));
    check_narrow(f, from_bits(0x00000001u));
    check_narrow(f, from_bits(0x80000001u));
}
END_TEST

/* Hand-written rows: input float32 bits -> expected narrow bits. */
typedef struct round_row {
    const fmt_model *fmt;
    uint32_t in;
    uint32_t want;
    const char *what;
} round_row;

static const round_row round_rows[] = {
    /* float16 */
    {&model_f16, 0x3f800000u, 0x3c00u, "1.0"},
    {&model_f16, 0x3f801000u, 0x3c00u, "1+2^-11 tie -> even (down)"},
    {&model_f16, 0x3f803000u, 0x3c02u, "1+3*2^-11 tie -> even (up)"},
    {&model_f16, 0x3f801001u, 0x3c01u, "just above half"},
    {&model_f16, 0x3f800fffu, 0x3c00u, "just below half"},
    {&model_f16, 0x477fe000u, 0x7bffu, "65504 max"},
    {&model_f16, 0x477fefffu, 0x7bffu, "65520-ulp -> max"},
    {&model_f16, 0x477ff000u, 0x7c00u, "65520 tie -> inf"},
    {&model_f16, 0x501502f9u, 0x7c00u, "1e10 -> inf"},
    {&model_f16, 0xd01502f9u, 0xfc00u, "-1e10 -> -inf"},
    {&model_f16, 0x7f800000u, 0x7c00u, "inf"},
    {&model_f16, 0xff800000u, 0xfc00u, "-inf"},
    {&model_f16, 0x33800000u, 0x0001u, "2^-24 min subnormal"},
    {&model_f16, 0x33000000u, 0x0000u, "2^-25 tie -> 0"},
    {&model_f16, 0x33000001u, 0x0001u, "just above 2^-25"},
    {&model_f16, 0x33c00000u, 0x0002u, "1.5*2^-24 tie -> 2"},
    {&model_f16, 0x34200000u, 0x0002u, "2.5*2^-24 tie -> 2"},
    {&model_f16, 0x387fc000u, 0x03ffu, "max subnormal"},
    {&model_f16, 0x387fe000u, 0x0400u, "1023.5*2^-24 tie -> min normal"},
    {&model_f16, 0x38800000u, 0x0400u, "2^-14 min normal"},
    {&model_f16, 0x80000000u, 0x8000u, "-0"},
    {&model_f16, 0xb2800000u, 0x8000u, "-2^-26 -> -0"},
    {&model_f16, 0x00000001u, 0x0000u, "f32 min subnormal -> 0"},
    {&model_f16, 0x80000001u, 0x8000u, "-f32 min subnormal -> -0"},
    {&model_f16, 0x7fc00000u, 0x7e00u, "qNaN"},
    {&model_f16, 0xffc00000u, 0xfe00u, "-qNaN"},
    {&model_f16, 0x7f800001u, 0x7e00u, "sNaN low payload -> quiet"},
    {&model_f16, 0x7fa00000u, 0x7f00u, "sNaN top payload kept"},
    {&model_f16, 0xffffffffu, 0xffffu, "-NaN all payload"},
    /* bfloat16 */
    {&model_bf16, 0x3f808000u, 0x3f80u, "1+2^-8 tie -> even (down)"},
    {&model_bf16, 0x3f818000u, 0x3f82u, "1+3*2^-8 tie -> even (up)"},
    {&model_bf16, 0x3f808001u, 0x3f81u, "just above half"},
    {&model_bf16, 0x3f807fffu, 0x3f80u, "just below half"},
    {&model_bf16, 0x7f7f0000u, 0x7f7fu, "max"},
    {&model_bf16, 0x7f7f7fffu, 0x7f7fu, "just below overflow tie"},
    {&model_bf16, 0x7f7f8000u, 0x7f80u, "overflow tie -> inf"},
    {&model_bf16, 0x7f7fffffu, 0x7f80u, "FLT_MAX -> inf"},
    {&model_bf16, 0xff7fffffu, 0xff80u, "-FLT_MAX -> -inf"},
    {&model_bf16, 0x7f800000u, 0x7f80u, "inf"},
    {&model_bf16, 0x00008000u, 0x0000u, "subnormal tie -> 0"},
    {&model_bf16, 0x00008001u, 0x0001u, "just above"},
    {&model_bf16, 0x00018000u, 0x0002u, "1.5 subnormal tie -> 2"},
    {&model_bf16, 0x007f8000u, 0x0080u, "max subnormal tie -> min normal"},
    {&model_bf16, 0x80000000u, 0x8000u, "-0"},
    {&model_bf16, 0x80008000u, 0x8000u, "-tiny -> -0"},
    {&model_bf16, 0x7fc00000u, 0x7fc0u, "qNaN"},
    {&model_bf16, 0xffc00001u, 0xffc0u, "-qNaN low payload"},
    {&model_bf16, 0x7f800001u, 0x7fc0u, "sNaN -> quiet"},
    {&model_bf16, 0x7f810000u, 0x7fc1u, "sNaN top payload kept"},
    /* e4m3fn */
    {&model_e4m3, 0x3f800000u, 0x38u, "1.0"},
    {&model_e4m3, 0x3f880000u, 0x38u, "1+1/16 tie -> even (down)"},
    {&model_e4m3, 0x3f980000u, 0x3au, "1+3/16 tie -> even (up)"},
    {&model_e4m3, 0x43e00000u, 0x7eu, "448 max"},
    {&model_e4m3, 0xc3e00000u, 0xfeu, "-448"},
    {&model_e4m3, 0x43e80000u, 0x7eu, "464 tie -> 448"},
    {&model_e4m3, 0x43e80001u, 0x7fu, "just above 464 -> NaN"},
    {&model_e4m3, 0x43f00000u, 0x7fu, "480 -> NaN"},
    {&model_e4m3, 0x49742400u, 0x7fu, "1e6 -> NaN"},
    {&model_e4m3, 0xc9742400u, 0xffu, "-1e6 -> -NaN"},
    {&model_e4m3, 0x7f800000u, 0x7fu, "inf -> NaN"},
    {&model_e4m3, 0xff800000u, 0xffu, "-inf -> -NaN"},
    {&model_e4m3, 0x7fc00000u, 0x7fu, "NaN"},
    {&model_e4m3, 0xffc00000u, 0xffu, "-NaN"},
    {&model_e4m3, 0x3b000000u, 0x01u, "2^-9 min subnormal"},
    {&model_e4m3, 0x3a800000u, 0x00u, "2^-10 tie -> 0"},
    {&model_e4m3, 0x3b400000u, 0x02u, "1.5*2^-9 tie -> 2"},
    {&model_e4m3, 0x3c600000u, 0x07u, "7*2^-9 max subnormal"},
    {&model_e4m3, 0x3c700000u, 0x08u, "7.5*2^-9 tie -> min normal"},
    {&model_e4m3, 0x3c800000u, 0x08u, "2^-6 min normal"},
    {&model_e4m3, 0x80000000u, 0x80u, "-0"},
    {&model_e4m3, 0xba000000u, 0x80u, "-2^-11 -> -0"},
    /* e5m2 */
    {&model_e5m2, 0x3f800000u, 0x3cu, "1.0"},
    {&model_e5m2, 0x3f900000u, 0x3cu, "1+1/8 tie -> even (down)"},
    {&model_e5m2, 0x3fb00000u, 0x3eu, "1+3/8 tie -> even (up)"},
    {&model_e5m2, 0x47600000u, 0x7bu, "57344 max"},
    {&model_e5m2, 0x476fffffu, 0x7bu, "just below 61440"},
    {&model_e5m2, 0x47700000u, 0x7cu, "61440 tie -> inf"},
    {&model_e5m2, 0x49742400u, 0x7cu, "1e6 -> inf"},
    {&model_e5m2, 0xff800000u, 0xfcu, "-inf"},
    {&model_e5m2, 0x7fc00000u, 0x7fu, "NaN"},
    {&model_e5m2, 0xffc00000u, 0xffu, "-NaN"},
    {&model_e5m2, 0x7f800001u, 0x7fu, "sNaN -> canonical"},
    {&model_e5m2, 0x37800000u, 0x01u, "2^-16 min subnormal"},
    {&model_e5m2, 0x37000000u, 0x00u, "2^-17 tie -> 0"},
    {&model_e5m2, 0x37c00000u, 0x02u, "1.5*2^-16 tie -> 2"},
    {&model_e5m2, 0x38600000u, 0x04u, "3.5*2^-16 tie -> min normal"},
    {&model_e5m2, 0x38800000u, 0x04u, "2^-14 min normal"},
    {&model_e5m2, 0x80000000u, 0x80u, "-0"},
};

START_TEST(rounding_rows)
{
    const round_row *r = &round_rows[_i];
    uint32_t got = lib_narrow(r->fmt, from_bits(r->in));
    ck_assert_msg(got == r->want, "%s %s: 0x%08x -> 0x%x, want 0x%x", r->fmt->id, r->what,
                  r->in, got, r->want);
    /* the model agrees with the hand-written row (non-NaN inputs) */
    if (!isnan(from_bits(r->in)))
        ck_assert_uint_eq(model_expected(r->fmt, from_bits(r->in)), r->want);
}
END_TEST

START_TEST(max_finite)
{
    fattn_f16 h = {0x7bff};
    fattn_bf16 b = {0x7f7f};
    fattn_e4m3 e4 = {0x7e};
    fattn_e5m2 e5 = {0x7b};
    ck_assert(fattn_f16_to_f32(h) == 65504.0f);
    ck_assert(fattn_bf16_to_f32(b) == (float)ldexp(255.0, 120));
    ck_assert(fattn_e4m3_to_f32(e4) == 448.0f);
    ck_assert(fattn_e5m2_to_f32(e5) == 57344.0f);
    ck_assert_uint_eq(fattn_f32_to_f16(65504.0f).bits, 0x7bff);
    ck_assert_uint_eq(fattn_f32_to_bf16((float)ldexp(255.0, 120)).bits, 0x7f7f);
    ck_assert_uint_eq(fattn_f32_to_e4m3(448.0f).bits, 0x7e);
    ck_assert_uint_eq(fattn_f32_to_e5m2(57344.0f).bits, 0x7b);
}
END_TEST

START_TEST(negative_zero)
{
    ck_assert_uint_eq(fattn_f32_to_f16(-0.0f).bits, 0x8000);
    ck_assert_uint_eq(fattn_f32_to_bf16(-0.0f).bits, 0x8000);
    ck_assert_uint_eq(fattn_f32_to_e4m3(-0.0f).bits, 0x80);
    ck_assert_uint_eq(fattn_f32_to_e5m2(-0.0f).bits, 0x80);
    fattn_f16 h = {0x8000};
    fattn_bf16 b = {0x8000};
    fattn_e4m3 e4 = {0x80};
    fattn_e5m2 e5 = {0x80};
    ck_assert_uint_eq(bits_of(fattn_f16_to_f32(h)), 0x80000000u);
    ck_assert_uint_eq(bits_of(fattn_bf16_to_f32(b)), 0x80000000u);
    ck_assert_uint_eq(bits_of(fattn_e4m3_to_f32(e4)), 0x80000000u);
    ck_assert_uint_eq(bits_of(fattn_e5m2_to_f32(e5)), 0x80000000u);
}
END_TEST

/* ---- names, sizes, buffer access ---------------------------------------------- */

typedef struct dtype_expect {
    fattn_dtype t;
    const char *name;
    size_t size;
    bool is_float;
} dtype_expect;

static const dtype_expect dtype_rows[] = {
    {FATTN_DTYPE_FLOAT32, "float32", 4, true},
    {FATTN_DTYPE_FLOAT16, "float16", 2, true},
    {FATTN_DTYPE_BFLOAT16, "bfloat16", 2, true},
    {FATTN_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn", 1, true},
    {FATTN_DTYPE_FLOAT8_E5M2, "float8_e5m2", 1, true},
    {FATTN_DTYPE_INT32, "int32", 4, false},
    {FATTN_DTYPE_INT64, "int64", 8, false},
    {FATTN_DTYPE_UINT8, "uint8", 1, false},
};

START_TEST(names_sizes)
{
    const dtype_expect *r = &dtype_rows[_i];
    ck_assert_str_eq(fattn_dtype_name(r->t), r->name);
    fattn_dtype t = FATTN_DTYPE_INVALID;
    ck_assert_int_eq(fattn_dtype_parse(r->name, &t), FATTN_OK);
    ck_assert_int_eq(t, r->t);
    ck_assert_uint_eq(fattn_dtype_size(r->t), r->size);
    ck_assert_int_eq(fattn_dtype_is_float(r->t), r->is_float);
}
END_TEST

START_TEST(names_invalid)
{
    ck_assert_uint_eq(fattn_dtype_size(FATTN_DTYPE_INVALID), 0);
    ck_assert(!fattn_dtype_is_float(FATTN_DTYPE_INVALID));
    ck_assert_ptr_nonnull(fattn_dtype_name(FATTN_DTYPE_INVALID));
    ck_assert_ptr_nonnull(fattn_dtype_name(FATTN_DTYPE_COUNT));
    const char *bad[] = {"", "float", "Float32", "fp16", "float8_e4m3", "bf16", "int8"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        fattn_dtype t = FATTN_DTYPE_FLOAT32;
        fattn_clear_error();
        ck_assert_int_eq(fattn_dtype_parse(bad[i], &t), FATTN_E_PARSE);
        ck_assert_int_eq(t, FATTN_DTYPE_FLOAT32); /* untouched */
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), "bfloat16"));
        char quoted[64];
        snprintf(quoted, sizeof quoted, "\"%s\"", bad[i]);
        ck_assert_ptr_nonnull(strstr(fattn_last_error(), quoted));
    }
}
END_TEST

START_TEST(load_store_round)
{
    const fattn_dtype types[] = {FATTN_DTYPE_FLOAT32, FATTN_DTYPE_FLOAT16,
                                 FATTN_DTYPE_BFLOAT16, FATTN_DTYPE_FLOAT8_E4M3FN,
                                 FATTN_DTYPE_FLOAT8_E5M2};
    const float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, 0.1f, 300.0f, 1e-3f, -1e5f};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        unsigned char buf[8 * 4 + 1];
        memset(buf, 0xa5, sizeof buf);
        size_t esz = fattn_dtype_size(types[t]);
        for (size_t i = 0; i < 8; i++)
            fattn_store_f32(buf, types[t], (int64_t)i, vals[i]);
        ck_assert_uint_eq(buf[8 * esz], 0xa5); /* nothing past element 7 */
        for (size_t i = 0; i < 8; i++) {
            float r = fattn_round_f32(types[t], vals[i]);
            float l = fattn_load_f32(buf, types[t], (int64_t)i);
            ck_assert_msg(bits_of(l) == bits_of(r), "%s[%zu]", fattn_dtype_name(types[t]), i);
            /* rounding is idempotent */
            ck_assert_uint_eq(bits_of(fattn_round_f32(types[t], r)), bits_of(r));
        }
    }
    ck_assert(fattn_round_f32(FATTN_DTYPE_FLOAT16, 0.1f) == fattn_f16_to_f32(fattn_f32_to_f16(0.1f)));
    ck_assert(isnan(fattn_round_f32(FATTN_DTYPE_FLOAT8_E4M3FN, 1000.0f)));
    ck_assert(isinf(fattn_round_f32(FATTN_DTYPE_FLOAT8_E5M2, 1e6f)));
    /* little-endian-independent: float16 element holds the bits natively */
    uint16_t h[2];
    fattn_store_f32(h, FATTN_DTYPE_FLOAT16, 1, 1.0f);
    ck_assert_uint_eq(h[1], 0x3c00);
}
END_TEST

START_TEST(bit_casts)
{
    ck_assert_uint_eq(fattn_f32_bits(1.0f), 0x3f800000u);
    ck_assert_uint_eq(fattn_f32_bits(-0.0f), 0x80000000u);
    ck_assert(fattn_f32_from_bits(0x40490fdbu) == 3.14159274f);
    for (uint64_t u = 0; u <= 0xffffffffu; u += 0x00f0f0f1u)
        if (!isnan(fattn_f32_from_bits((uint32_t)u)))
            ck_assert_uint_eq(fattn_f32_bits(fattn_f32_from_bits((uint32_t)u)), u);
}
END_TEST

#define NROWS(a) ((int)(sizeof(a) / sizeof((a)[0])))

static Suite *make_suite(void)
{
    Suite *s = suite_create("dtype");

    TCase *tc = tcase_create("roundtrip");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_test(tc, f16_roundtrip);
    tcase_add_test(tc, bf16_roundtrip);
    tcase_add_test(tc, e4m3_roundtrip);
    tcase_add_test(tc, e5m2_roundtrip);
    suite_add_tcase(s, tc);

    tc = tcase_create("rounding");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_LONG);
    tcase_add_loop_test(tc, rounding_rows, 0, NROWS(round_rows));
    tcase_add_loop_test(tc, rounding_midpoints, 0, NROWS(all_models));
    tcase_add_loop_test(tc, rounding_sweep, 0, NROWS(all_models));
    tcase_add_test(tc, max_finite);
    tcase_add_test(tc, negative_zero);
    suite_add_tcase(s, tc);

    tc = tcase_create("names");
    tcase_set_timeout(tc, FATTN_TEST_TIMEOUT_SHORT);
    tcase_add_loop_test(tc, names_sizes, 0, NROWS(dtype_rows));
    tcase_add_test(tc, names_invalid);
    tcase_add_test(tc, load_store_round);
    tcase_add_test(tc, bit_casts);
    suite_add_tcase(s, tc);
    return s;
}

static void list_ids(void)
{
    puts("dtype.f16.roundtrip");
    puts("dtype.bf16.roundtrip");
    puts("dtype.e4m3.roundtrip");
    puts("dtype.e5m2.roundtrip");
}

FATTN_TEST_MAIN(make_suite, list_ids)
