/* The layout of the engine API's structs, for callers that mirror them
 * outside C (tools/te/fattn_te/bridge.py through ctypes): they compare
 * their own sizes and offsets with these before the first call, so that a
 * change to fattn/engine.h fails loudly instead of passing garbage. Below
 * them, the FP8 cast the bridge's tex.quantize stands on. */
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fattn/bridge.h"
#include "fattn/dtype.h"
#include "fattn/engine.h"
#include "fattn/fp8.h"
#include "fattn/kv_cache.h"
#include "fattn/status.h"
#include "fattn/tensor.h"

#define FIELD(type, member) (int64_t) offsetof(type, member)

int fattn_bridge_abi(int64_t *out, int n)
{
    const int64_t rows[] = {
        (int64_t)sizeof(fattn_tensor),
        FIELD(fattn_tensor, dtype),
        FIELD(fattn_tensor, device),
        FIELD(fattn_tensor, shape),
        FIELD(fattn_tensor, strides),
        (int64_t)sizeof(fattn_aux_pack),
        (int64_t)sizeof(fattn_fwd_params),
        FIELD(fattn_fwd_params, aux),
        FIELD(fattn_fwd_params, rng_state),
        FIELD(fattn_fwd_params, attn.max_seqlen_q),
        FIELD(fattn_fwd_params, attn.attn_scale),
        FIELD(fattn_fwd_params, attn.qkv_layout),
        FIELD(fattn_fwd_params, attn.window_size_left),
        FIELD(fattn_fwd_params, attn.bottom_right_diagonal),
        (int64_t)sizeof(fattn_bwd_params),
        FIELD(fattn_bwd_params, aux),
        FIELD(fattn_bwd_params, dq),
        FIELD(fattn_bwd_params, attn.max_seqlen_q),
        FIELD(fattn_bwd_params, attn.qkv_layout),
        FIELD(fattn_bwd_params, attn.window_size_left),
        FIELD(fattn_bwd_params, deterministic),
        (int64_t)sizeof(fattn_engine_options),
        FIELD(fattn_fwd_params, fp8),
        FIELD(fattn_bwd_params, fp8),
        (int64_t)sizeof(fattn_fp8_fwd),
        FIELD(fattn_fp8_fwd, amax_s),
        FIELD(fattn_fp8_fwd, s_dtype),
        (int64_t)sizeof(fattn_fp8_bwd),
        FIELD(fattn_fp8_bwd, amax_dp),
        FIELD(fattn_fp8_bwd, dp_dtype),
        (int64_t)sizeof(fattn_kv_cache_copy_args),
        FIELD(fattn_kv_cache_copy_args, format),
        FIELD(fattn_kv_cache_copy_args, reindex),
        (int64_t)FATTN_CPU_MATH_VERSION,
    };
    int count = (int)(sizeof rows / sizeof rows[0]);
    for (int i = 0; out && i < n && i < count; i++)
        out[i] = rows[i];
    return count;
}

/* ---- TE's per-tensor FP8 cast, for the bridge's tex.quantize ----------
 * What TE's C++ `quantize` (pytorch/csrc/extensions/cast.cpp) launches for
 * a Float8Quantizer or Float8CurrentScalingQuantizer: max |x| over the
 * source, then each element scaled and cast with saturation. The cast is
 * fattn's (fattn_fp8_quantize, held to a table over every code); the
 * scale of a current-scaling call comes from fattn_bridge_fp8_cs_scale. */

/* Offset of element i (C order) of a strided view. */
static int64_t bridge_at(const fattn_tensor *t, int64_t i)
{
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->strides[d];
        i /= t->shape[d];
    }
    return off;
}

/* The amax kernel (common/recipe/current_scaling.cu, TE's
 * nvte_compute_amax): fmaxf over |x|, so a NaN element is passed over. */
fattn_status fattn_bridge_fp8_amax(const fattn_tensor *src, float *amax)
{
    int64_t n = fattn_tensor_numel(src);
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++)
        m = fmaxf(m, fabsf(fattn_load_f32(src->data, src->dtype, bridge_at(src, i))));
    *amax = m;
    return FATTN_OK;
}

fattn_status fattn_bridge_fp8_quantize(const fattn_tensor *src, fattn_tensor *dst, float scale)
{
    if (!fattn_dtype_is_fp8(dst->dtype))
        return fattn_error(FATTN_E_INVALID_ARG, "bridge quantize: the destination is %s, not "
                           "an FP8 dtype", fattn_dtype_name(dst->dtype));
    if (fattn_tensor_numel(src) != fattn_tensor_numel(dst))
        return fattn_error(FATTN_E_SHAPE, "bridge quantize: %lld elements into %lld",
                           (long long)fattn_tensor_numel(src), (long long)fattn_tensor_numel(dst));
    int64_t n = fattn_tensor_numel(src);
    for (int64_t i = 0; i < n; i++)
        ((uint8_t *)dst->data)[bridge_at(dst, i)] = fattn_fp8_quantize(
            dst->dtype, fattn_load_f32(src->data, src->dtype, bridge_at(src, i)), scale);
    return FATTN_OK;
}

/* recipe_common.cuh:14-49, compute_scale_from_amax: FP8 max over the amax
 * (raised to epsilon), 1 for a zero or non-finite amax, the float maximum
 * for an overflowing quotient, the mantissa cleared for pow-2 scales. */
float fattn_bridge_fp8_cs_scale(float amax, int dtype, int pow2, float epsilon)
{
    float a = fmaxf(amax, epsilon);
    float sc;
    if (a == 0.0f || !isfinite(a)) {
        sc = 1.0f;
    } else {
        sc = fattn_fp8_max((fattn_dtype)dtype) / a;
        sc = isinf(sc) ? FLT_MAX : (isnan(sc) ? 1.0f : sc);
    }
    if (pow2) {
        uint32_t u;
        memcpy(&u, &sc, 4);
        u &= 0xFF800000u; /* sign and exponent */
        memcpy(&sc, &u, 4);
    }
    return sc;
}
