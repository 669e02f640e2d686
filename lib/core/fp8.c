/* Saturating FP8 conversion (fattn/fp8.h).
 *
 * Built on dtype.c's exact round-to-nearest-even encoder: clamping a
 * non-NaN input to +-max first gives exactly the saturating result, since
 * max is representable and every value past it (including inputs between
 * max and max + half an ulp, which round to max anyway) must come out as
 * max. That equals CUDA's __nv_cvt_double_to_fp8 with __NV_SATFINITE
 * (cuda_fp8.hpp: NaN -> 0x7f, |x| above max + ulp/2 -> max, else RNE),
 * including the e5m2 tie at max + ulp/2 = 61440, which it saturates.
 */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "fattn/fp8.h"

static float clamp_max(float f, float max)
{
    if (f > max)
        return max;
    if (f < -max)
        return -max;
    return f;
}

fattn_e4m3 fattn_f32_to_e4m3_sat(float f)
{
    if (isnan(f))
        return (fattn_e4m3){0x7fu};
    return fattn_f32_to_e4m3(clamp_max(f, 448.0f));
}

fattn_e5m2 fattn_f32_to_e5m2_sat(float f)
{
    if (isnan(f))
        return (fattn_e5m2){0x7fu};
    return fattn_f32_to_e5m2(clamp_max(f, 57344.0f));
}

bool fattn_dtype_is_fp8(fattn_dtype t)
{
    return t == FATTN_DTYPE_FLOAT8_E4M3FN || t == FATTN_DTYPE_FLOAT8_E5M2;
}

float fattn_fp8_max(fattn_dtype t)
{
    if (t == FATTN_DTYPE_FLOAT8_E4M3FN)
        return 448.0f;
    if (t == FATTN_DTYPE_FLOAT8_E5M2)
        return 57344.0f;
    return 0.0f;
}

uint8_t fattn_fp8_encode(fattn_dtype t, float v)
{
    assert(fattn_dtype_is_fp8(t));
    if (t == FATTN_DTYPE_FLOAT8_E4M3FN)
        return fattn_f32_to_e4m3_sat(v).bits;
    return fattn_f32_to_e5m2_sat(v).bits;
}

float fattn_fp8_decode(fattn_dtype t, uint8_t c)
{
    assert(fattn_dtype_is_fp8(t));
    if (t == FATTN_DTYPE_FLOAT8_E4M3FN)
        return fattn_e4m3_to_f32((fattn_e4m3){c});
    return fattn_e5m2_to_f32((fattn_e5m2){c});
}

uint8_t fattn_fp8_quantize(fattn_dtype t, float v, float scale)
{
    return fattn_fp8_encode(t, v * scale);
}

float fattn_fp8_fake_quant(fattn_dtype t, float v, float scale, float scale_inv)
{
    return fattn_fp8_decode(t, fattn_fp8_quantize(t, v, scale)) * scale_inv;
}

static const char *const recipe_names[] = {NULL, "delayed", "current", "mxfp8", "block"};
_Static_assert(sizeof recipe_names / sizeof recipe_names[0] == FATTN_FP8_RECIPE_BLOCK + 1,
               "a name per recipe, by its value");

const char *fattn_fp8_recipe_name(fattn_fp8_recipe r)
{
    return (r > FATTN_FP8_RECIPE_NONE && r <= FATTN_FP8_RECIPE_BLOCK) ? recipe_names[r] : NULL;
}

fattn_status fattn_fp8_recipe_parse(const char *s, fattn_fp8_recipe *out)
{
    for (int r = FATTN_FP8_RECIPE_DELAYED; s && r <= FATTN_FP8_RECIPE_BLOCK; r++)
        if (strcmp(s, recipe_names[r]) == 0) {
            *out = (fattn_fp8_recipe)r;
            return FATTN_OK;
        }
    return fattn_error(FATTN_E_PARSE, "unknown fp8 recipe \"%s\" (valid: delayed, current, "
                       "mxfp8, block)", s ? s : "(null)");
}

static const char *const amax_algo_names[] = {"max", "most_recent"};
_Static_assert(sizeof amax_algo_names / sizeof amax_algo_names[0] ==
                   FATTN_FP8_AMAX_MOST_RECENT + 1,
               "a name per amax algorithm, by its value");

const char *fattn_fp8_amax_algo_name(fattn_fp8_amax_algo a)
{
    return (a == FATTN_FP8_AMAX_MAX || a == FATTN_FP8_AMAX_MOST_RECENT) ? amax_algo_names[a]
                                                                         : NULL;
}

fattn_status fattn_fp8_amax_algo_parse(const char *s, fattn_fp8_amax_algo *out)
{
    for (int a = FATTN_FP8_AMAX_MAX; s && a <= FATTN_FP8_AMAX_MOST_RECENT; a++)
        if (strcmp(s, amax_algo_names[a]) == 0) {
            *out = (fattn_fp8_amax_algo)a;
            return FATTN_OK;
        }
    return fattn_error(FATTN_E_PARSE, "unknown amax_compute_algo \"%s\" (valid: max, "
                       "most_recent; TE's callable algorithms run its unfused Python update, "
                       "which fattn does not model)", s ? s : "(null)");
}

/* kernel_bulk's body for quantizer i of a state of stride n
 * (delayed_scaling.cu, release_v2.19: the roll and amax, the scale). The
 * kernel's threads roll the history in chunks with a barrier between
 * reading and writing each chunk, so every read sees the old row. */
static void delayed_update_one(float *hist, float *scale, int64_t len, int64_t n, int64_t i,
                               const float *reduced, fattn_fp8_amax_algo algo, float scaled_max)
{
    float *h = hist + i;
    float last = (reduced && reduced[i] != 0.0f) ? reduced[i] : h[0];
    float amax = 0.0f;
    if (last != 0.0f) {
        for (int64_t r = 0; r < len; r++) {
            float a = r < len - 1 ? h[(r + 1) * n] : last;
            amax = fmaxf(amax, a);
            h[r * n] = r > 0 ? a : 0.0f;
        }
    }
    if (algo == FATTN_FP8_AMAX_MOST_RECENT)
        amax = last;
    float sc = (isfinite(amax) && amax > 0.0f) ? scaled_max / amax : scale[i];
    /* a tiny amax: the scale would overflow float32; TE clamps it */
    scale[i] = isinf(sc) ? FLT_MAX : sc;
}

fattn_status fattn_fp8_delayed_update(const fattn_fp8_recipe_state *st, const float *reduced,
                                      fattn_fp8_amax_algo algo, fattn_dtype dtype, int margin)
{
    if (!st || st->len < 1 || st->n < 1 || !st->scale || !st->amax_history)
        return fattn_error(FATTN_E_INVALID_ARG, "fp8 delayed update: a state needs at least one "
                           "quantizer and one history row");
    if (!fattn_dtype_is_fp8(dtype))
        return fattn_error(FATTN_E_INVALID_ARG, "fp8 delayed update: %s is not an FP8 dtype",
                           fattn_dtype_name(dtype));
    if (!fattn_fp8_amax_algo_name(algo))
        return fattn_error(FATTN_E_INVALID_ARG, "fp8 delayed update: amax algorithm %d is not "
                           "max or most_recent", (int)algo);
    if (margin < -64 || margin > 64)
        return fattn_error(FATTN_E_INVALID_ARG, "fp8 delayed update: margin %d is outside "
                           "[-64, 64]", margin);
    /* fp8_dtype_max(dtype) * std::pow(2.f, -margin): exact for an integer
     * margin, which ldexpf computes without a libm power */
    float scaled_max = ldexpf(fattn_fp8_max(dtype), -margin);
    for (int64_t i = 0; i < st->n; i++)
        delayed_update_one(st->amax_history, st->scale, st->len, st->n, i, reduced, algo,
                           scaled_max);
    return FATTN_OK;
}
