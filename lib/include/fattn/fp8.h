/* fattn/fp8.h — FP8 quantisation as TE's quantizers and cuDNN's FP8 SDPA do it.
 *
 * fattn/dtype.h's fattn_f32_to_e4m3 / _e5m2 are the non-saturating casts
 * (PyTorch's .to(torch.float8_*), the OCP spec's non-saturating mode). TE's
 * quantizers and cuDNN's FP8 graphs convert with saturation instead:
 * TE's fp8e4m3/fp8e5m2 are CUDA's __nv_fp8_e4m3/__nv_fp8_e5m2, whose float
 * constructors call __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...) (CUDA 12
 * cuda_fp8.hpp), and on sm_89/sm_90 every f32 -> fp8 conversion is the PTX
 * instruction cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32, where .satfinite is
 * mandatory. Its rules, which the functions below follow:
 *   - round to nearest, ties to even, subnormals kept;
 *   - a finite value whose magnitude rounds past the largest finite one, and
 *     +-inf, become +-max (448 for e4m3fn, 57344 for e5m2);
 *   - NaN becomes 0x7f, the canonical NaN of both formats (sign dropped).
 * Decoding is exact (fattn_e4m3_to_f32 / fattn_e5m2_to_f32).
 */
#ifndef FATTN_FP8_H
#define FATTN_FP8_H

#include "fattn/api.h"

#include <stdbool.h>
#include <stdint.h>

#include "fattn/dtype.h"
#include "fattn/status.h"

#ifdef __cplusplus
extern "C" {
#endif

FATTN_API fattn_e4m3 fattn_f32_to_e4m3_sat(float f);
FATTN_API fattn_e5m2 fattn_f32_to_e5m2_sat(float f);

/* FATTN_DTYPE_FLOAT8_E4M3FN or FATTN_DTYPE_FLOAT8_E5M2. */
FATTN_API bool fattn_dtype_is_fp8(fattn_dtype t);
/* Largest finite value of an FP8 dtype (448, 57344); 0 for any other. */
FATTN_API float fattn_fp8_max(fattn_dtype t);
/* The saturating conversion of v to FP8 dtype t (t must be FP8). */
FATTN_API uint8_t fattn_fp8_encode(fattn_dtype t, float v);
/* Exact widening of code c of FP8 dtype t. */
FATTN_API float fattn_fp8_decode(fattn_dtype t, uint8_t c);
/* Quantise as a TE quantizer does: encode(v * scale). */
FATTN_API uint8_t fattn_fp8_quantize(fattn_dtype t, float v, float scale);
/* The value a quantised v stands for: decode(encode(v * scale)) * scale_inv,
 * the two products rounded to float32 each. */
FATTN_API float fattn_fp8_fake_quant(fattn_dtype t, float v, float scale, float scale_inv);

/* ---- TE's FP8 recipes and quantizers as values (docs/fp8-branches.md §3) ---- */

/* The recipe a quantizer belongs to. Hopper runs DELAYED (Float8Quantizer)
 * and CURRENT (Float8CurrentScalingQuantizer); MXFP8 is Blackwell-only and
 * BLOCK (Float8BlockScaling) is refused by TE's FusedAttnFunc itself; both
 * are kinds so that a front end can be handed them and refuse them. */
typedef enum fattn_fp8_recipe {
    FATTN_FP8_RECIPE_NONE = 0,
    FATTN_FP8_RECIPE_DELAYED = 1,
    FATTN_FP8_RECIPE_CURRENT = 2,
    FATTN_FP8_RECIPE_MXFP8 = 3,
    FATTN_FP8_RECIPE_BLOCK = 4
} fattn_fp8_recipe;

/* "delayed", "current", "mxfp8", "block"; NULL for NONE or outside the enum. */
FATTN_API const char *fattn_fp8_recipe_name(fattn_fp8_recipe r);
FATTN_API fattn_status fattn_fp8_recipe_parse(const char *s, fattn_fp8_recipe *out);

/* One quantizer. A delayed one holds views of its recipe state: `scale`
 * (scale[i], set at the autocast boundary, an input to FusedAttnFunc) and
 * `amax` (amax_history[0][i], written by the calls that use it). A current
 * one has no state: each call derives its scale from the amax it computes
 * (FP8-max / amax, recipe_common.cuh:14-49), with `amax_epsilon` and
 * `force_pow_2_scales` from the recipe; `amax` and `scale` then hold what
 * its last call computed (TE keeps them on the tensor, not the quantizer,
 * so they are recorded, never read back). */
typedef struct fattn_fp8_quantizer {
    fattn_fp8_recipe kind;
    fattn_dtype dtype;           /* E4M3 or E5M2 */
    float scale, amax;
    bool force_pow_2_scales;
    float amax_epsilon;
} fattn_fp8_quantizer;

/* The six quantizers get_attention_quantizers hands FusedAttnFunc
 * (U19:2718-2786): QKV, O, S from scaling_fwd, dO, dP, dQKV from
 * scaling_bwd. Under current scaling S and dP are delayed (DPA's [CS, DS]
 * recipe pair). Mutable: the calls write the amaxes into them, as TE
 * writes into its recipe state. */
typedef struct fattn_fp8_quantizers {
    fattn_fp8_quantizer QKV, O, S, dO, dP, dQKV;
} fattn_fp8_quantizers;

/* What FusedAttnFunc reads of the fp8_meta dict DotProductAttention hands
 * it, with the recipe it starts from (L:1446-1450, S:1604-1608):
 * fp8_recipe = FP8GlobalStateManager.get_fp8_recipe() (the autocast recipe;
 * DelayedScaling on Hopper when there is none, quantization.py:607-611),
 * replaced by fp8_meta["local_recipes"][0] when that key is set. DPA sets
 * it whenever FP8 is on: [DS] under delayed scaling, [CS, DS] under current
 * scaling (DPA20:1207-1223, 1290-1293), so [0] is the QKV quantizer's
 * recipe. The autocast recipe is TE's global state, not part of the dict;
 * it travels here because it is the other half of the same decision. */
typedef struct fattn_fp8_meta {
    fattn_fp8_recipe autocast_recipe; /* NONE: no autocast, the default (DELAYED) */
    int n_local_recipes;              /* 0: the dict has no "local_recipes" */
    fattn_fp8_recipe local_recipes[2];
} fattn_fp8_meta;

/* ---- TE's delayed-scaling recipe update ------------------------------------ */

/* DelayedScaling.amax_compute_algo (common/recipe/__init__.py:256): the
 * amax the scale is computed from, the history's largest or its newest. */
typedef enum fattn_fp8_amax_algo {
    FATTN_FP8_AMAX_MAX = 0,
    FATTN_FP8_AMAX_MOST_RECENT = 1
} fattn_fp8_amax_algo;

/* "max", "most_recent"; NULL outside the enum. */
FATTN_API const char *fattn_fp8_amax_algo_name(fattn_fp8_amax_algo a);
FATTN_API fattn_status fattn_fp8_amax_algo_parse(const char *s, fattn_fp8_amax_algo *out);

/* One direction's delayed-scaling state (DelayedScalingRecipeState,
 * quantization.py:1397-1451): n quantizers, each with its scale (scale[i])
 * and an amax history of `len` rows (amax_history[r * n + i], row-major
 * [len, n] as TE's tensor). Row 0 is where the casts write (a delayed
 * quantizer's amax is a view of amax_history[0][i]); TE initialises scale
 * to ones and the history to zeros. The caller owns both arrays. */
typedef struct fattn_fp8_recipe_state {
    int64_t len, n;
    float *scale;
    float *amax_history;
} fattn_fp8_recipe_state;

/* TE's amax and scale update after the amax reduction, for one state of
 * one direction: what FP8GlobalStateManager.reduce_and_update_fp8_tensors
 * (quantization.py:656-700) runs through
 * tex.fused_amax_and_scale_update_after_reduction, i.e.
 * nvte_delayed_scaling_recipe_amax_and_scale_update_after_reduction
 * (common/recipe/delayed_scaling.cu, kernel_bulk; TE release_v2.19, which
 * d0067d0 leaves unchanged). Per quantizer i:
 *   last = reduced[i] if reduced and reduced[i] != 0, else history[0][i];
 *   if last != 0 the history rolls: row r gets row r + 1 for 1 <= r <
 *   len - 1, row len - 1 gets last, row 0 becomes 0, and the MAX amax is
 *   the largest of rows 1..len-1 before the roll and last (fmaxf from 0:
 *   a NaN is passed over); if last == 0 nothing rolls and the MAX amax is
 *   0. MOST_RECENT: the amax is last.
 *   The scale becomes (fp8_max(dtype) * 2^-margin) / amax when the amax is
 *   finite and > 0, else stays; an infinite quotient becomes FLT_MAX.
 * `reduced` (NULL: none) is the reduction buffer: TE concatenates row 0 of
 * every registered state and, with torch.distributed on and reduce_amax,
 * max-reduces it across the group; in one process it equals row 0.
 * `dtype` is the direction's FP8 dtype (get_fp8_te_dtype: HYBRID gives E4M3
 * forward, E5M2 backward). Statuses: FATTN_E_INVALID_ARG for a state
 * without quantizers or history, a non-FP8 dtype, an algorithm outside the
 * enum or a margin that is not an integer in [-64, 64] (TE's recipe
 * margin is an int). Python's unfused update (NVTE_UNFUSED_FP8_UPDATE,
 * quantization.py:1067-1115) differs: it rolls whatever the amax, keeps
 * row 1 and divides twice; fattn models the fused one, TE's default. */
FATTN_API fattn_status fattn_fp8_delayed_update(const fattn_fp8_recipe_state *st, const float *reduced,
                                                fattn_fp8_amax_algo algo, fattn_dtype dtype, int margin);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_FP8_H */
