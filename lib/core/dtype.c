/* Element types: names, sizes and exact float conversions.
 *
 * Every conversion here is integer bit manipulation on the IEEE binary32
 * representation; nothing relies on _Float16, on hardware conversion
 * instructions or on the floating-point environment, so the results are the
 * same on every platform and at every optimisation level.
 *
 * The three narrow float formats other than bfloat16 (float16, e4m3fn, e5m2)
 * share one parameterised encoder and one parameterised decoder, described by
 * a small format record (exponent bits, mantissa bits, bias, NaN/inf style).
 *
 * NaN policy on narrowing (the header's contract, made precise):
 *   float16   sign | 0x7c00 | 0x0200 | top 9 payload bits of the float32
 *             (quiet bit forced, so a quiet float16 NaN widened and narrowed
 *             again gives back its own bits; a signalling one comes back
 *             with the quiet bit 0x0200 set).
 *   bfloat16  sign | 0x7f80 | 0x0040 | top 6 payload bits (same idea).
 *   e4m3fn    sign | 0x7f (the format's only NaN encoding).
 *   e5m2      sign | 0x7f (all mantissa bits set: the canonical quiet NaN,
 *             which is what PyTorch's float -> float8_e5m2 produces).
 * Widening copies the payload bits unchanged (a signalling float16 NaN
 * becomes a signalling float32 NaN pattern).
 */
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fattn/dtype.h"

/* ---- names and sizes ------------------------------------------------------ */

typedef struct dtype_row {
    fattn_dtype t;
    const char *name;
    size_t size;
    bool is_float;
} dtype_row;

static const dtype_row dtype_table[] = {
    {FATTN_DTYPE_FLOAT32, "float32", 4, true},
    {FATTN_DTYPE_FLOAT16, "float16", 2, true},
    {FATTN_DTYPE_BFLOAT16, "bfloat16", 2, true},
    {FATTN_DTYPE_FLOAT8_E4M3FN, "float8_e4m3fn", 1, true},
    {FATTN_DTYPE_FLOAT8_E5M2, "float8_e5m2", 1, true},
    {FATTN_DTYPE_INT32, "int32", 4, false},
    {FATTN_DTYPE_INT64, "int64", 8, false},
    {FATTN_DTYPE_UINT8, "uint8", 1, false},
};

#define DTYPE_ROWS (sizeof dtype_table / sizeof dtype_table[0])
_Static_assert(DTYPE_ROWS == FATTN_DTYPE_COUNT - 1, "a row per dtype but FATTN_DTYPE_INVALID");

static const dtype_row *dtype_find(fattn_dtype t)
{
    for (size_t i = 0; i < DTYPE_ROWS; i++)
        if (dtype_table[i].t == t)
            return &dtype_table[i];
    return NULL;
}

const char *fattn_dtype_name(fattn_dtype t)
{
    const dtype_row *r = dtype_find(t);
    return r ? r->name : "invalid";
}

fattn_status fattn_dtype_parse(const char *name, fattn_dtype *out)
{
    if (name) {
        for (size_t i = 0; i < DTYPE_ROWS; i++) {
            if (strcmp(name, dtype_table[i].name) == 0) {
                if (out)
                    *out = dtype_table[i].t;
                return FATTN_OK;
            }
        }
    }
    char list[256];
    size_t used = 0;
    list[0] = '\0';
    for (size_t i = 0; i < DTYPE_ROWS && used < sizeof list; i++) {
        int n = snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                         dtype_table[i].name);
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return fattn_error(FATTN_E_PARSE, "unknown dtype \"%s\" (valid: %s)",
                       name ? name : "(null)", list);
}

size_t fattn_dtype_size(fattn_dtype t)
{
    const dtype_row *r = dtype_find(t);
    return r ? r->size : 0;
}

bool fattn_dtype_is_float(fattn_dtype t)
{
    const dtype_row *r = dtype_find(t);
    return r ? r->is_float : false;
}

/* ---- bit casts -------------------------------------------------------------- */

uint32_t fattn_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float fattn_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- the generic narrow format ------------------------------------------- */

typedef enum special_style {
    STYLE_IEEE, /* exponent all ones: inf (mantissa 0) or NaN */
    STYLE_FN    /* "finite, NaN": only exponent and mantissa all ones is NaN */
} special_style;

typedef struct narrow_fmt {
    int ebits;
    int mbits;
    int bias;
    special_style style;
    uint32_t nan_quiet; /* mantissa bits of a narrowed NaN (IEEE style only) */
    bool nan_keeps_payload;
} narrow_fmt;

static const narrow_fmt fmt_f16 = {5, 10, 15, STYLE_IEEE, 0x200u, true};
static const narrow_fmt fmt_e4m3 = {4, 3, 7, STYLE_FN, 0u, false};
static const narrow_fmt fmt_e5m2 = {5, 2, 15, STYLE_IEEE, 0x3u, false};

/* Decode `code` (sign in bit ebits+mbits) to float32 bits. Exact: every
 * narrow value is a float32 value. */
static uint32_t narrow_to_f32_bits(const narrow_fmt *f, uint32_t code)
{
    const int mb = f->mbits;
    const uint32_t emask = (1u << f->ebits) - 1u;
    const uint32_t mmask = (1u << mb) - 1u;
    uint32_t sign = ((code >> (f->ebits + mb)) & 1u) << 31;
    uint32_t e = (code >> mb) & emask;
    uint32_t m = code & mmask;

    if (e == emask) {
        if (f->style == STYLE_IEEE) /* inf or NaN, payload kept */
            return sign | 0x7f800000u | (m << (23 - mb));
        if (m == mmask) /* FN: the NaN encoding */
            return sign | 0x7fc00000u;
        /* FN: otherwise an ordinary normal number */
    }
    if (e == 0) {
        if (m == 0)
            return sign; /* +-0 */
        /* Subnormal: m * 2^(1 - bias - mb). Normalise so the leading one
         * becomes the implicit bit. */
        int32_t exp = 1 - f->bias;
        while (!(m & (1u << mb))) {
            m <<= 1;
            exp--;
        }
        m &= mmask;
        return sign | ((uint32_t)(exp + 127) << 23) | (m << (23 - mb));
    }
    return sign | ((uint32_t)((int32_t)e - f->bias + 127) << 23) | (m << (23 - mb));
}

/* Encode float32 bits as the nearest narrow value, ties to even. */
static uint32_t f32_bits_to_narrow(const narrow_fmt *f, uint32_t bits)
{
    const int mb = f->mbits;
    const int eb = f->ebits;
    const uint32_t sign = (bits >> 31) << (eb + mb);
    const uint32_t abs = bits & 0x7fffffffu;
    const uint32_t emask = (1u << eb) - 1u;
    const uint32_t mmask = (1u << mb) - 1u;
    const uint32_t nan_code = f->style == STYLE_FN ? ((emask << mb) | mmask)
                                                   : ((emask << mb) | f->nan_quiet);
    const uint32_t inf_code = emask << mb; /* IEEE only */
    /* Largest finite magnitude code. */
    const uint32_t max_code = f->style == STYLE_FN ? ((emask << mb) | (mmask - 1u))
                                                   : (((emask - 1u) << mb) | mmask);

    if (abs > 0x7f800000u) { /* NaN */
        uint32_t code = nan_code;
        if (f->nan_keeps_payload)
            code |= (abs & 0x007fffffu) >> (23 - mb);
        return sign | code;
    }
    if (abs == 0x7f800000u) /* inf */
        return sign | (f->style == STYLE_FN ? nan_code : inf_code);

    /* value = sig * 2^(exp - 23), sig < 2^24 */
    uint32_t e32 = abs >> 23;
    uint32_t sig = abs & 0x007fffffu;
    int32_t exp;
    if (e32 == 0) {
        if (sig == 0)
            return sign; /* +-0 */
        exp = -126;
    } else {
        sig |= 0x00800000u;
        exp = (int32_t)e32 - 127;
    }

    /* The result's exponent: exp itself, or the minimum normal exponent for
     * a result in the subnormal range. Keep mb fraction bits at that
     * exponent: drop `shift` low bits of sig. */
    const int32_t emin = 1 - f->bias;
    const int32_t eres = exp > emin ? exp : emin;
    const int32_t shift = (23 - mb) + (eres - exp); /* >= 23 - mb >= 13 */
    assert(shift >= 13);
    if (shift > 25) /* below half the smallest subnormal (sig < 2^24) */
        return sign;

    uint32_t kept = sig >> shift;
    uint32_t rem = sig & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (kept & 1u)))
        kept++;

    /* kept includes the implicit bit for normals (and may have carried into
     * the next binade), so adding it to (biased exponent - 1) << mb yields
     * the encoding directly; for the subnormal range that term is 0. Any
     * float32 exponent keeps this well inside 32 bits; a code past the
     * largest finite one is overflow. */
    uint32_t code = ((uint32_t)(eres + f->bias - 1) << mb) + kept;
    if (code > max_code)
        return sign | (f->style == STYLE_FN ? nan_code : inf_code);
    return sign | code;
}

/* ---- public conversions ---------------------------------------------------- */

float fattn_f16_to_f32(fattn_f16 h)
{
    return fattn_f32_from_bits(narrow_to_f32_bits(&fmt_f16, h.bits));
}

fattn_f16 fattn_f32_to_f16(float f)
{
    fattn_f16 h = {(uint16_t)f32_bits_to_narrow(&fmt_f16, fattn_f32_bits(f))};
    return h;
}

float fattn_bf16_to_f32(fattn_bf16 h)
{
    return fattn_f32_from_bits((uint32_t)h.bits << 16);
}

fattn_bf16 fattn_f32_to_bf16(float f)
{
    uint32_t u = fattn_f32_bits(f);
    fattn_bf16 r;
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        /* NaN: keep sign and the top payload bits, force the quiet bit. */
        r.bits = (uint16_t)((u >> 16) | 0x0040u);
        return r;
    }
    /* Round to nearest even on the low 16 bits. A carry out of the mantissa
     * moves to the next binade; out of the largest binade it gives exactly
     * the infinity pattern 0x7f80, which is IEEE overflow under RNE. Inf
     * itself has zero low bits and is unchanged. */
    uint32_t lsb = (u >> 16) & 1u;
    u += 0x7fffu + lsb;
    r.bits = (uint16_t)(u >> 16);
    return r;
}

float fattn_e4m3_to_f32(fattn_e4m3 h)
{
    return fattn_f32_from_bits(narrow_to_f32_bits(&fmt_e4m3, h.bits));
}

fattn_e4m3 fattn_f32_to_e4m3(float f)
{
    fattn_e4m3 r = {(uint8_t)f32_bits_to_narrow(&fmt_e4m3, fattn_f32_bits(f))};
    return r;
}

float fattn_e5m2_to_f32(fattn_e5m2 h)
{
    return fattn_f32_from_bits(narrow_to_f32_bits(&fmt_e5m2, h.bits));
}

fattn_e5m2 fattn_f32_to_e5m2(float f)
{
    fattn_e5m2 r = {(uint8_t)f32_bits_to_narrow(&fmt_e5m2, fattn_f32_bits(f))};
    return r;
}

/* ---- buffer access ------------------------------------------------------------ */

/* Non-float dtypes are outside the contract; load and round give NaN and
 * store writes nothing, so misuse shows up rather than passing silently. */

float fattn_load_f32(const void *base, fattn_dtype t, int64_t i)
{
    const unsigned char *p = base;
    switch (t) {
    case FATTN_DTYPE_FLOAT32: {
        float v;
        memcpy(&v, p + (ptrdiff_t)i * 4, sizeof v);
        return v;
    }
    case FATTN_DTYPE_FLOAT16: {
        fattn_f16 h;
        memcpy(&h.bits, p + (ptrdiff_t)i * 2, sizeof h.bits);
        return fattn_f16_to_f32(h);
    }
    case FATTN_DTYPE_BFLOAT16: {
        fattn_bf16 h;
        memcpy(&h.bits, p + (ptrdiff_t)i * 2, sizeof h.bits);
        return fattn_bf16_to_f32(h);
    }
    case FATTN_DTYPE_FLOAT8_E4M3FN: {
        fattn_e4m3 h = {p[i]};
        return fattn_e4m3_to_f32(h);
    }
    case FATTN_DTYPE_FLOAT8_E5M2: {
        fattn_e5m2 h = {p[i]};
        return fattn_e5m2_to_f32(h);
    }
    default:
        return NAN;
    }
}

void fattn_store_f32(void *base, fattn_dtype t, int64_t i, float v)
{
    unsigned char *p = base;
    switch (t) {
    case FATTN_DTYPE_FLOAT32:
        memcpy(p + (ptrdiff_t)i * 4, &v, sizeof v);
        break;
    case FATTN_DTYPE_FLOAT16: {
        fattn_f16 h = fattn_f32_to_f16(v);
        memcpy(p + (ptrdiff_t)i * 2, &h.bits, sizeof h.bits);
        break;
    }
    case FATTN_DTYPE_BFLOAT16: {
        fattn_bf16 h = fattn_f32_to_bf16(v);
        memcpy(p + (ptrdiff_t)i * 2, &h.bits, sizeof h.bits);
        break;
    }
    case FATTN_DTYPE_FLOAT8_E4M3FN:
        p[i] = fattn_f32_to_e4m3(v).bits;
        break;
    case FATTN_DTYPE_FLOAT8_E5M2:
        p[i] = fattn_f32_to_e5m2(v).bits;
        break;
    default:
        break;
    }
}

float fattn_round_f32(fattn_dtype t, float v)
{
    switch (t) {
    case FATTN_DTYPE_FLOAT32:
        return v;
    case FATTN_DTYPE_FLOAT16:
        return fattn_f16_to_f32(fattn_f32_to_f16(v));
    case FATTN_DTYPE_BFLOAT16:
        return fattn_bf16_to_f32(fattn_f32_to_bf16(v));
    case FATTN_DTYPE_FLOAT8_E4M3FN:
        return fattn_e4m3_to_f32(fattn_f32_to_e4m3(v));
    case FATTN_DTYPE_FLOAT8_E5M2:
        return fattn_e5m2_to_f32(fattn_f32_to_e5m2(v));
    default:
        return NAN;
    }
}
