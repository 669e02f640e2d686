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
