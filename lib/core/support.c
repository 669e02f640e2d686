/* The support table (fattn/support.h): one row per rule, each citing the TE
 * line it mirrors in every release it applies to, for sm_90 + cuDNN 9.19.
 *
 * Where the lines were read: the Python files in the wheels
 * transformer-engine 2.19.0 and 2.20.2 (pure Python); the C++ files
 * (fused_attn.cpp, attention.cpp), which those wheels do not hold, in the
 * TE repository: for 2.19.0 at the commit that set VERSION 2.19.0
 * (55b2cba79), whose two files are byte-identical to main at d0067d0
 * (2.20.0.dev0); the 2.20.2 C++ source was not available, so its rows cite
 * d0067d0, the newest C++ read, and say so (rev "d0067d0").
 *
 * Abbreviations of the cited files:
 *   fused_attn.cpp  transformer_engine/common/fused_attn/fused_attn.cpp
 *                   (nvte_get_fused_attn_backend, F16 arbitrary-seqlen branch
 *                   from line 296)
 *   fused_attn.py   transformer_engine/pytorch/cpp_extensions/fused_attn.py
 *   utils.py        transformer_engine/pytorch/attention/dot_product_attention/utils.py
 *   dot_product_attention.py, backends.py  same directory as utils.py
 *   attention.cpp   transformer_engine/pytorch/csrc/extensions/attention.cpp
 */
#include <assert.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "core/support_rows.h"
#include "fattn/support.h"

#define F_CPP "transformer_engine/common/fused_attn/fused_attn.cpp"
#define F_PY "transformer_engine/pytorch/cpp_extensions/fused_attn.py"
#define F_UTILS "transformer_engine/pytorch/attention/dot_product_attention/utils.py"
#define F_DPA "transformer_engine/pytorch/attention/dot_product_attention/dot_product_attention.py"
#define F_BACKENDS "transformer_engine/pytorch/attention/dot_product_attention/backends.py"
#define F_PYBIND "transformer_engine/pytorch/csrc/extensions/attention.cpp"

static bool has_tensor_bias(const fattn_support_query *q)
{
    return q->bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
           q->bias_type == FATTN_BIAS_POST_SCALE_BIAS;
}

static bool is_thd(const fattn_support_query *q)
{
    return fattn_layout_q_format(q->layout) == FATTN_FORMAT_THD ||
           fattn_layout_kv_format(q->layout) == FATTN_FORMAT_THD;
}

/* ---- predicates: true means the rule refuses ------------------------- */

static bool r_fp8(const fattn_support_query *q)
{
    return q->fp8 || q->q_dtype == FATTN_DTYPE_FLOAT8_E4M3FN ||
           q->q_dtype == FATTN_DTYPE_FLOAT8_E5M2;
}

static bool r_pre_scale_bias(const fattn_support_query *q)
{
    return q->bias_type == FATTN_BIAS_PRE_SCALE_BIAS;
}

static bool r_bias_missing(const fattn_support_query *q)
{
    return has_tensor_bias(q) && !q->has_bias_tensor;
}

static bool r_bias_dtype(const fattn_support_query *q)
{
    return has_tensor_bias(q) && q->has_bias_tensor && q->bias_dtype != q->q_dtype;
}

static bool r_bias_padding(const fattn_support_query *q)
{
    return q->bias_type == FATTN_BIAS_POST_SCALE_BIAS &&
           (q->mask_type == FATTN_MASK_PADDING || q->mask_type == FATTN_MASK_PADDING_CAUSAL);
}

static bool r_alibi_mask(const fattn_support_query *q)
{
    return q->bias_type == FATTN_BIAS_ALIBI &&
           (q->mask_type == FATTN_MASK_NO_MASK || q->mask_type == FATTN_MASK_PADDING ||
            q->mask_type == FATTN_MASK_PADDING_CAUSAL ||
            q->mask_type == FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT);
}

static bool r_window_mask(const fattn_support_query *q)
{
    int64_t in[2] = {q->window_left, q->window_right}, out[2];
    return fattn_window_normalize(q->mask_type, true, in, out, NULL) != FATTN_OK;
}

static bool r_window_not_normalised(const fattn_support_query *q)
{
    int64_t in[2] = {q->window_left, q->window_right}, out[2];
    if (fattn_window_normalize(q->mask_type, true, in, out, NULL) != FATTN_OK)
        return false; /* window_mask's business */
    return out[0] != in[0] || out[1] != in[1];
}

static bool r_heads_divisible(const fattn_support_query *q)
{
    return q->hg < 1 || q->h < 1 || q->h % q->hg != 0;
}

static bool r_thd_padding(const fattn_support_query *q)
{
    return is_thd(q) && !fattn_mask_has_padding(q->mask_type);
}

static bool r_head_dim(const fattn_support_query *q)
{
    return q->d_qk % 8 != 0 || q->d_v % 8 != 0 || q->d_qk > 256 || q->d_v > 256 ||
           q->d_qk < 8 || q->d_v < 8;
}

static bool r_bottom_right_sq_gt_skv(const fattn_support_query *q)
{
    if (q->sq <= q->skv)
        return false;
    if (q->mask_type == FATTN_MASK_CAUSAL_BOTTOM_RIGHT)
        return true;
    return q->mask_type == FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT &&
           (q->bias_type != FATTN_BIAS_NO_BIAS || q->dropout != 0.0f);
}

/* fused_attn.cpp:430-465 at cuDNN 9.19: a window other than (-1,-1) or
 * (-1,0) is accepted by the 9.2 branch (right = 0, mask no_mask / causal /
 * causal_bottom_right with sq == skv, bshd/sbhd) or the 9.6 branch (mask
 * causal_bottom_right / no_mask / padding / padding_causal /
 * padding_causal_bottom_right); both need sq <= skv, no bias, no dropout. */
static bool r_swa(const fattn_support_query *q)
{
    bool left_ok = q->window_left >= -1, right_ok = q->window_right >= -1;
    if (q->window_left == -1 && (q->window_right == -1 || q->window_right == 0))
        return false;
    if (!left_ok || !right_ok)
        return false; /* window_mask's business */
    if (q->sq > q->skv || q->bias_type != FATTN_BIAS_NO_BIAS || q->dropout != 0.0f)
        return true;
    fattn_qkv_format f = fattn_layout_format(q->layout);
    bool b92 = q->window_right == 0 &&
               (q->mask_type == FATTN_MASK_NO_MASK || q->mask_type == FATTN_MASK_CAUSAL ||
                (q->mask_type == FATTN_MASK_CAUSAL_BOTTOM_RIGHT && q->sq == q->skv)) &&
               (f == FATTN_FORMAT_BSHD || f == FATTN_FORMAT_SBHD);
    bool b96 = q->mask_type == FATTN_MASK_CAUSAL_BOTTOM_RIGHT ||
               q->mask_type == FATTN_MASK_NO_MASK || q->mask_type == FATTN_MASK_PADDING ||
               q->mask_type == FATTN_MASK_PADDING_CAUSAL ||
               q->mask_type == FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT;
    return !(b92 || b96);
}

static bool r_dropout_range(const fattn_support_query *q)
{
    return !(q->dropout >= 0.0f && q->dropout < 1.0f);
}

static bool r_max_logit_cudnn(const fattn_support_query *q)
{
    return q->return_max_logit;
}

static bool r_float32_cudnn(const fattn_support_query *q)
{
    return q->q_dtype == FATTN_DTYPE_FLOAT32;
}

/* Paged KV: DotProductAttention's KV cache, the only caller that fills the
 * page tables (backends.py FusedAttention.forward). */
static bool r_paged_padding(const fattn_support_query *q)
{
    return fattn_layout_is_paged(q->layout) && !fattn_mask_has_padding(q->mask_type);
}

static bool r_paged_training(const fattn_support_query *q)
{
    return fattn_layout_is_paged(q->layout) && q->is_training;
}

static bool r_paged_fp8(const fattn_support_query *q)
{
    return fattn_layout_is_paged(q->layout) && r_fp8(q);
}

/* A backward with a sink computes dSoftmaxOffset (TE always asks for it). */
static bool r_dsink_thd(const fattn_support_query *q)
{
    return q->softmax_type != FATTN_SOFTMAX_VANILLA &&
           fattn_layout_q_format(q->layout) == FATTN_FORMAT_THD;
}

/* A paged cache read by a THD q of one token per sequence (decoding). */
static bool r_thd_paged_decode(const fattn_support_query *q)
{
    return fattn_layout_is_paged(q->layout) &&
           fattn_layout_q_format(q->layout) == FATTN_FORMAT_THD && q->sq == 1;
}

static bool r_bias_sink(const fattn_support_query *q)
{
    return has_tensor_bias(q) && q->softmax_type != FATTN_SOFTMAX_VANILLA;
}

/* fused_attn.cpp:349-353: the "9.11+ bug" exclusion inside the head-dim
 * clause — training on sm_90 with cuDNN >= 9.11 refuses both head dims
 * >= 128 and unequal, except d_qk 192 / d_v 128. */
static bool r_mla_hopper_training(const fattn_support_query *q)
{
    return q->is_training && q->d_qk >= 128 && q->d_v >= 128 && q->d_qk != q->d_v &&
           !(q->d_qk == 192 && q->d_v == 128);
}

/* CPU offload v1 (is_cpu_offload_enabled() with NVTE_CPU_OFFLOAD_V1, this
 * layer offloaded): forward marks q, k, v, out and the aux pack for
 * offload and backward reads them back de-interleaved under another
 * layout (2.19.0 backends.py:1663, 1708-1716; 2.20.2 1816-1823,
 * 1938-1945). fattn has no host round trip to model it with. */
static bool r_cpu_offload(const fattn_support_query *q)
{
    return q->cpu_offload;
}

/* FP8 on sm_90 + cuDNN 9.19 (docs/fp8-branches.md §10). Each is true only
 * for an FP8 call. */
static bool r_fp8_mxfp8(const fattn_support_query *q)
{
    return q->fp8 && q->fp8_recipe == FATTN_FP8_RECIPE_MXFP8;
}

static bool r_fp8_block(const fattn_support_query *q)
{
    return q->fp8 && q->fp8_recipe == FATTN_FP8_RECIPE_BLOCK;
}

/* fused_attn.cpp:286-291: bshd or sbhd, one format for q and kv (THD and
 * the mixed formats fail it). */
static bool r_fp8_format(const fattn_support_query *q)
{
    fattn_qkv_format qf = fattn_layout_q_format(q->layout);
    return q->fp8 && (qf != fattn_layout_kv_format(q->layout) ||
                      (qf != FATTN_FORMAT_BSHD && qf != FATTN_FORMAT_SBHD));
}

static bool r_fp8_bias(const fattn_support_query *q)
{
    return q->fp8 && q->bias_type != FATTN_BIAS_NO_BIAS;
}

static bool r_fp8_softmax(const fattn_support_query *q)
{
    return q->fp8 && q->softmax_type != FATTN_SOFTMAX_VANILLA;
}

static bool r_fp8_bottom_right(const fattn_support_query *q)
{
    return q->fp8 && (q->mask_type == FATTN_MASK_CAUSAL_BOTTOM_RIGHT ||
                      q->mask_type == FATTN_MASK_PADDING_CAUSAL_BOTTOM_RIGHT);
}

/* fused_attn.cpp:266-273: training needs d_qk = d_v = 128; inference d <=
 * 256 and a multiple of 16. */
static bool r_fp8_head_dim(const fattn_support_query *q)
{
    if (!q->fp8)
        return false;
    if (q->is_training)
        return q->d_qk != 128 || q->d_v != 128;
    return q->d_qk > 256 || q->d_v > 256 || q->d_qk % 16 != 0 || q->d_v % 16 != 0;
}

static bool r_fp8_max_logit(const fattn_support_query *q)
{
    return q->fp8 && q->return_max_logit;
}

static bool r_fp8_window(const fattn_support_query *q)
{
    bool plain = q->window_left == -1 && (q->window_right == -1 || q->window_right == 0);
    return q->fp8 && !plain;
}

/* ---- routing predicates: true means DPA would not choose FusedAttention -- */

static bool is_f16_path(const fattn_support_query *q)
{
    return !r_fp8(q) && (q->q_dtype == FATTN_DTYPE_FLOAT16 || q->q_dtype == FATTN_DTYPE_BFLOAT16);
}

static bool t_det_sink(const fattn_support_query *q)
{
    return q->deterministic && q->softmax_type != FATTN_SOFTMAX_VANILLA;
}

/* The clause also holds for sm < 9.0 (and, in 2.19.0, cuDNN < 8.9.5):
 * neither is true of sm_90 + cuDNN 9.19, so only the bias half is left. */
static bool t_det_bias_grad(const fattn_support_query *q)
{
    return q->deterministic && q->is_training && is_f16_path(q) && has_tensor_bias(q) &&
           q->bias_requires_grad;
}

/* TE's qkv_format "thd": both sides THD. The product is taken in double
 * (exact up to 2^53), so huge geometries cannot wrap past the cap. */
static bool t_det_thd_bhss(const fattn_support_query *q)
{
    bool thd = fattn_layout_q_format(q->layout) == FATTN_FORMAT_THD &&
               fattn_layout_kv_format(q->layout) == FATTN_FORMAT_THD;
    double bhss = (double)q->b * (double)q->h * (double)q->sq * (double)q->skv;
    return q->deterministic && q->is_training && is_f16_path(q) && thd && bhss >= 0x1p30;
}

/* Which [1,1,1,skv] bias is "111s" moved: 2.19.0 names every one so
 * (dot_product_attention.py:2012-2014), 2.20.2 only when max_seqlen_q is not
 * 1, calling the rest "11ss" (utils.py:1562). */
static bool t_bias_111s_grad(const fattn_support_query *q)
{
    bool s111 = q->bias_shape[0] == 1 && q->bias_shape[1] == 1 && q->bias_shape[2] == 1 &&
                (q->te_rules == FATTN_TE_RULES_2_19 || q->sq != 1);
    return q->bias_type == FATTN_BIAS_POST_SCALE_BIAS && q->has_bias_tensor && s111 &&
           q->bias_requires_grad;
}

static bool t_float32(const fattn_support_query *q)
{
    return !r_fp8(q) && !is_f16_path(q);
}

/* TE strips b, s and t from the layout name and wants "hd_hd_hd" left:
 * the groups hd_hd_hd and sd_sd_sd (bhsd) pass, packed and paged do not. */
static bool t_mla_layout(const fattn_support_query *q)
{
    fattn_qkv_layout_group g = fattn_layout_group(q->layout);
    return q->d_qk != q->d_v && g != FATTN_LAYOUT_GROUP_HD_HD_HD &&
           g != FATTN_LAYOUT_GROUP_SD_SD_SD;
}

/* ---- the tables -------------------------------------------------------- */

/* A row's columns after the message:
 *   REFUSAL(engines) / ROUTING, and BWD_ONLY for a refusal checked only at
 *   an engine's backward;
 *   the TE range: FROM_TE(first) (every release since), or TE(first, last);
 *   the cuDNN range: ANY_CUDNN, CUDNN_FROM(v), CUDNN_BELOW(v);
 *   the citations: AT(release, file, line), one per release where the line
 *   moved, oldest first; NOT_IN_TE for an engine's measured gap. */
#define REFUSAL(engines) engines, FATTN_SUPPORT_REFUSAL, FATTN_SUPPORT_AT_CALL
#define REFUSAL_AT_BACKWARD(engines) engines, FATTN_SUPPORT_REFUSAL, FATTN_SUPPORT_AT_BACKWARD
#define ROUTING FATTN_SUPPORT_ENGINE_ALL, FATTN_SUPPORT_ROUTING, FATTN_SUPPORT_AT_CALL
#define FROM_TE(first) FATTN_TE_RULES_##first, 0u
#define ANY_CUDNN 0L, 0L
#define CUDNN_FROM(v) (long)(v), 0L
#define CUDNN_BELOW(v) 0L, (long)(v)
#define AT(rel, file, line) {FATTN_TE_RULES_##rel, file, line}
#define NOT_IN_TE {{0u, NULL, 0}}
#define ENG_ALL FATTN_SUPPORT_ENGINE_ALL
#define ENG_CPU FATTN_SUPPORT_ENGINE_CPU
#define ENG_CUDNN FATTN_SUPPORT_ENGINE_CUDNN

static const fattn_support_rule rules[] = {
    {"pre_scale_bias", r_pre_scale_bias, FATTN_E_INVALID_CASE,
     "pre_scale_bias is never selected on the F16 arbitrary-seqlen path "
     "(only no_bias, alibi and post_scale_bias are wired)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 354)}},
    {"bias_missing", r_bias_missing, FATTN_E_INVALID_CASE,
     "attn_bias cannot be None when attn_bias_type is pre/post_scale_bias",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_PY, 335)}},
    {"bias_dtype", r_bias_dtype, FATTN_E_INVALID_CASE, "attn_bias must have the same dtype as q",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_PY, 340)}},
    {"bias_padding", r_bias_padding, FATTN_E_INVALID_CASE,
     "post_scale_bias is refused with padding and padding_causal masks",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 412)}},
    {"alibi_mask", r_alibi_mask, FATTN_E_INVALID_CASE,
     "alibi needs a causal or causal_bottom_right mask (not no_mask or a padding mask)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 358)}},
    {"window_mask", r_window_mask, FATTN_E_INVALID_CASE,
     "window_size is inconsistent with the mask: check_set_window_size asserts",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 2697), AT(2_20, F_UTILS, 3016)}},
    {"window_not_normalised", r_window_not_normalised, FATTN_E_INVALID_CASE,
     "window_size is not in check_set_window_size's normal form for the mask "
     "(DotProductAttention rewrites it, with a warning, before FusedAttnFunc runs)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 2690), AT(2_20, F_UTILS, 3009)}},
    {"heads_divisible", r_heads_divisible, FATTN_E_INVALID_CASE,
     "the number of attention heads must be divisible by the number of GQA groups",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_DPA, 748), AT(2_20, F_DPA, 928)}},
    {"thd_padding", r_thd_padding, FATTN_E_INVALID_CASE,
     "qkv_format thd needs a padding, padding_causal or padding_causal_bottom_right mask",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_DPA, 1800), AT(2_20, F_DPA, 2450)}},
    {"paged_padding", r_paged_padding, FATTN_E_INVALID_CASE,
     "KV caching requires a padding mask: DotProductAttention asserts it before it makes "
     "the paged_kv_* layout and passes the cache's page table",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_DPA, 1834), AT(2_20, F_DPA, 2537)}},
    {"paged_training", r_paged_training, FATTN_E_NOT_MODELLED,
     "training over a paged KV cache: fused_attn_bwd takes no page tables, so its backward "
     "would read the page containers as dense K and V; TE's KV cache is an inference path "
     "and fattn does not model a backward of it",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_PY, 448)}},
    {"paged_fp8", r_paged_fp8, FATTN_E_NOT_MODELLED,
     "FP8 over a paged KV cache: DotProductAttention disables FusedAttention for FP8 KV "
     "caching, and FusedAttnFunc's FP8 branch drops the paged_kv_ prefix and the page tables",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 868), AT(2_20, F_UTILS, 969)}},
    {"head_dim", r_head_dim, FATTN_E_INVALID_CASE,
     "head dims d_qk and d_v must be multiples of 8 and at most 256 on sm_90",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 310)}},
    {"mla_hopper_training", r_mla_hopper_training, FATTN_E_INVALID_CASE,
     "training with unequal head dims d_qk, d_v both >= 128 (other than 192/128) is "
     "excluded on sm_90 with cuDNN >= 9.11 (a cuDNN backward bug)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), CUDNN_FROM(91100), {AT(2_19, F_CPP, 349)}},
    {"bottom_right_sq_gt_skv", r_bottom_right_sq_gt_skv, FATTN_E_INVALID_CASE,
     "a bottom-right causal mask with max_seqlen_q > max_seqlen_kv needs a padding "
     "mask, no bias and no dropout",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 400)}},
    {"swa_restrictions", r_swa, FATTN_E_INVALID_CASE,
     "a sliding window other than (-1,-1)/(-1,0) needs max_seqlen_q <= max_seqlen_kv, "
     "no bias, no dropout and a mask cuDNN's SWA supports for the format",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 430)}},
    {"dropout_range", r_dropout_range, FATTN_E_INVALID_CASE,
     "dropout_p must lie in [0, 1) (torch.nn.Dropout's range; p = 1 makes the "
     "1/(1-p) rescale infinite)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_BACKENDS, 397), AT(2_20, F_BACKENDS, 412)}},
    {"bias_sink_quirk", r_bias_sink, FATTN_E_UNSAFE_TE_QUIRK,
     "a bias together with a non-vanilla softmax: TE shapes dBias like the last aux "
     "entry (the [1,h,1,1] softmax offset), so writing dBias would go out of bounds",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_PYBIND, 548)}},
    {"cpu_offload_v1", r_cpu_offload, FATTN_E_NOT_MODELLED,
     "CPU offload v1 (backward reloads q, k, v de-interleaved, in another layout) is not "
     "modelled by fattn",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_BACKENDS, 1708), AT(2_20, F_BACKENDS, 1939)}},
    {"fp8_mxfp8_blackwell", r_fp8_mxfp8, FATTN_E_INVALID_CASE,
     "the MXFP8 recipe is Blackwell-only (sm >= 100): FusedAttention is off for it on "
     "sm_90, and its per-block scales have no field in the engine API",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 703), AT(2_20, F_UTILS, 774)}},
    {"fp8_quantizer_type", r_fp8_block, FATTN_E_INVALID_CASE,
     "a quantizer that is not Float8Quantizer, Float8CurrentScalingQuantizer or "
     "MXFP8Quantizer (Float8BlockScaling, NVFP4): get_attention_quantizers raises TypeError",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 2776), AT(2_20, F_UTILS, 3095)}},
    {"fp8_qkv_format", r_fp8_format, FATTN_E_INVALID_CASE,
     "the FP8 backend needs q and kv in one format, bshd or sbhd, before cuDNN 9.21 (no "
     "THD, no mixed formats)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), CUDNN_BELOW(92100), {AT(2_19, F_CPP, 286)}},
    {"fp8_bias", r_fp8_bias, FATTN_E_INVALID_CASE, "the FP8 backend takes no bias",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 258)}},
    {"fp8_softmax", r_fp8_softmax, FATTN_E_INVALID_CASE,
     "the FP8 backend takes only the vanilla softmax before cuDNN 9.21",
     REFUSAL(ENG_ALL), FROM_TE(2_19), CUDNN_BELOW(92100), {AT(2_19, F_CPP, 286)}},
    {"fp8_bottom_right", r_fp8_bottom_right, FATTN_E_INVALID_CASE,
     "the FP8 backend takes a bottom-right causal mask only on sm >= 100",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 279)}},
    {"fp8_head_dim", r_fp8_head_dim, FATTN_E_INVALID_CASE,
     "FP8 training needs d_qk = d_v = 128; FP8 inference head dims at most 256 and "
     "multiples of 16",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 266)}},
    {"fp8_max_logit", r_fp8_max_logit, FATTN_E_INVALID_CASE,
     "return_max_logit with fp8: the FP8 branch computes no max_logit (legacy then raises "
     "TypeError unpacking None, split returns None; DotProductAttention routes it away)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_BACKENDS, 1750), AT(2_20, F_BACKENDS, 2275)}},
    {"fp8_window", r_fp8_window, FATTN_E_NOT_MODELLED,
     "a sliding window with fp8: DPA routes it away on sm_90 and the FP8 kernel's handling "
     "of it was not read, so fattn does not model it",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 1342), AT(2_20, F_UTILS, 1443)}},
    {"max_logit_cudnn", r_max_logit_cudnn, FATTN_E_UNSUPPORTED,
     "return_max_logit needs cuDNN >= 9.21 (the cuDNN engine's Max comes from its softmax "
     "operation, which 9.21 builds)",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), CUDNN_BELOW(92100), {AT(2_19, F_CPP, 479)}},
    {"float32_cudnn", r_float32_cudnn, FATTN_E_UNSUPPORTED,
     "cuDNN's fused attention takes float16/bfloat16 io only (TE's F16 arbitrary-seqlen "
     "backend is selected only for those dtypes); float32 runs on the CPU engine",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 296)}},
    /* Measured on the H200 with cuDNN 9.19.0 (docs/determinism.md): the
     * fused backward's dSoftmaxOffset is wrong for every head (by ~0.4 at
     * the matrix sizes) while dQ, dK and dV are right. Checked at the
     * backward only, so the forward is still compared. */
    {"dsink_thd_cudnn", r_dsink_thd, FATTN_E_UNSUPPORTED,
     "dSoftmaxOffset with a THD (ragged) q is wrong on cuDNN <= 9.19 (measured, "
     "docs/determinism.md)",
     REFUSAL_AT_BACKWARD(ENG_CUDNN), FROM_TE(2_19), CUDNN_BELOW(91901), NOT_IN_TE},
    {"thd_paged_decode_cudnn", r_thd_paged_decode, FATTN_E_UNSUPPORTED,
     "a paged KV cache read by a THD q of one token per sequence leaves the Stats rows of "
     "every head but the first unwritten on cuDNN 9.19 (measured on the H200; 9.28.1 writes "
     "them, docs/gpu-runs/2026-12-04-cudnn928.txt)",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), CUDNN_BELOW(92801), NOT_IN_TE},
};

/* DotProductAttention's filters that matter on sm_90 + cuDNN 9.19. The
 * matrix default deterministic: true trips det_sink and det_bias_grad for
 * every sink case and every training case with a bias. */
static const fattn_support_rule routes[] = {
    {"det_sink", t_det_sink, FATTN_OK,
     "deterministic execution disables FusedAttention for an off-by-one or learnable softmax",
     ROUTING, FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 1534), AT(2_20, F_UTILS, 1761)}},
    {"det_bias_grad", t_det_bias_grad, FATTN_OK,
     "deterministic F16/BF16 training disables FusedAttention for a bias that needs dBias",
     ROUTING, FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 1554), AT(2_20, F_UTILS, 1781)}},
    {"det_thd_bhss", t_det_thd_bhss, FATTN_OK,
     "deterministic F16/BF16 THD training on sm_90 disables FusedAttention when "
     "b*h*max_seqlen_q*max_seqlen_kv >= 2^30 (cuDNN's backward workspace)",
     ROUTING, FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 1578), AT(2_20, F_UTILS, 1801)}},
    {"bias_111s_grad", t_bias_111s_grad, FATTN_OK,
     "a 111s post_scale_bias that needs dBias disables FusedAttention (cuDNN computes no "
     "dBias for it)",
     ROUTING, FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 1449), AT(2_20, F_UTILS, 1575)}},
    {"float32_module", t_float32, FATTN_OK,
     "FusedAttention.forward asserts float16/bfloat16 (or quantized) q, k and v",
     ROUTING, FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_BACKENDS, 2147), AT(2_20, F_BACKENDS, 2406)}},
    {"mla_layout", t_mla_layout, FATTN_OK,
     "d_qk != d_v disables FusedAttention for a packed or paged qkv_layout",
     ROUTING, FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_UTILS, 906), AT(2_20, F_UTILS, 1007)}},
};

#define NRULES (sizeof rules / sizeof rules[0])
#define NROUTES (sizeof routes / sizeof routes[0])

/* ---- releases ------------------------------------------------------------- */

typedef struct te_release {
    unsigned bit;
    const char *name, *release, *cpp_rev;
} te_release;

#define RELEASE_ROW(id, name, rel, cpp) {FATTN_TE_RULES_##id, name, rel, cpp},
#define RELEASE_SEP()
static const te_release releases[FATTN_TE_RULES_COUNT] = {
    FATTN_TE_RELEASES(RELEASE_ROW, RELEASE_SEP)};

static int release_index(unsigned one)
{
    for (int i = 0; i < FATTN_TE_RULES_COUNT; i++)
        if (releases[i].bit == one)
            return i;
    return -1;
}

fattn_status fattn_te_rules_parse(const char *s, unsigned *out)
{
    for (int i = 0; s && i < FATTN_TE_RULES_COUNT; i++)
        if (strcmp(s, releases[i].name) == 0) {
            *out = releases[i].bit;
            return FATTN_OK;
        }
    return fattn_error(FATTN_E_INVALID_ARG, "unknown TE rules '%s' (known: " FATTN_TE_RULES_KNOWN
                       ")", s ? s : "(null)");
}

const char *fattn_te_rules_name(unsigned one)
{
    int i = release_index(one);
    return i < 0 ? NULL : releases[i].name;
}

const char *fattn_te_rules_release(unsigned one)
{
    int i = release_index(one);
    return i < 0 ? NULL : releases[i].release;
}

/* ---- queries -------------------------------------------------------------- */

void fattn_support_query_init(fattn_support_query *q)
{
    memset(q, 0, sizeof *q);
    q->q_dtype = q->kv_dtype = FATTN_DTYPE_FLOAT16;
    q->bias_dtype = FATTN_DTYPE_INVALID;
    q->layout = FATTN_LAYOUT_BSHD_BSHD_BSHD;
    q->bias_type = FATTN_BIAS_NO_BIAS;
    q->mask_type = FATTN_MASK_NO_MASK;
    q->softmax_type = FATTN_SOFTMAX_VANILLA;
    q->h = q->hg = 1;
    q->sq = q->skv = 16;
    q->d_qk = q->d_v = 64;
    q->window_left = q->window_right = -1;
    q->b = 1;
    q->te_rules = FATTN_TE_RULES_NEWEST;
    q->cudnn_version = FATTN_SUPPORT_CUDNN_REFERENCE;
}

const fattn_support_rule *fattn_support_rules(int *count)
{
    if (count)
        *count = (int)NRULES;
    return rules;
}

const fattn_support_rule *fattn_support_routes(int *count)
{
    if (count)
        *count = (int)NROUTES;
    return routes;
}

static const fattn_support_rule *find_row(const fattn_support_rule *rows, size_t n,
                                          const char *id)
{
    if (!id)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strcmp(rows[i].id, id) == 0)
            return &rows[i];
    return NULL;
}

const fattn_support_rule *fattn_support_rule_find(const char *id)
{
    return find_row(rules, NRULES, id);
}

const fattn_support_rule *fattn_support_route_find(const char *id)
{
    return find_row(routes, NROUTES, id);
}

bool fattn_support_rule_holds(const fattn_support_rule *r, unsigned one)
{
    int i = release_index(one);
    int first = release_index(r->te_first);
    int last = r->te_last ? release_index(r->te_last) : FATTN_TE_RULES_COUNT - 1;
    return i >= 0 && first >= 0 && last >= 0 && i >= first && i <= last;
}

static bool cudnn_holds(const fattn_support_rule *r, long v)
{
    return (!r->cudnn_from || v >= r->cudnn_from) && (!r->cudnn_below || v < r->cudnn_below);
}

static bool is_cpp(const char *file)
{
    size_t n = strlen(file);
    return n > 4 && strcmp(file + n - 4, ".cpp") == 0;
}

bool fattn_support_rule_cite(const fattn_support_rule *r, unsigned one,
                             fattn_support_cite *out)
{
    memset(out, 0, sizeof *out);
    if (!r || !fattn_support_rule_holds(r, one))
        return false;
    int i = release_index(one);
    const fattn_support_where *w = NULL;
    for (int k = 0; k < FATTN_SUPPORT_MAX_WHERE && r->where[k].since; k++)
        if (release_index(r->where[k].since) <= i)
            w = &r->where[k];
    if (!w)
        return false; /* an engine's measured gap: no TE line */
    out->rev = is_cpp(w->file) ? releases[i].cpp_rev : releases[i].release;
    out->file = w->file;
    out->line = w->line;
    return true;
}

/* "TE 2.20 rules only" for a row some releases lack; "" for one all have. */
static void only_text(const fattn_support_rule *r, char *buf, size_t n)
{
    buf[0] = '\0';
    bool all = true;
    for (int i = 0; i < FATTN_TE_RULES_COUNT; i++)
        all = all && fattn_support_rule_holds(r, releases[i].bit);
    if (all)
        return;
    size_t k = (size_t)snprintf(buf, n, "TE");
    for (int i = 0; i < FATTN_TE_RULES_COUNT && k < n; i++)
        if (fattn_support_rule_holds(r, releases[i].bit))
            k += (size_t)snprintf(buf + k, n - k, " %s", releases[i].name);
    if (k < n)
        snprintf(buf + k, n - k, " rules only");
}

/* A row is a whole rule: what it tests, which releases and cuDNN versions,
 * where in TE from which release on. Only an engine's own gap may cite no
 * TE line. */
static void assert_row(const fattn_support_rule *r, fattn_support_class cls)
{
    assert(r->id && r->refuses && r->message && r->cls == cls);
    assert(release_index(r->te_first) >= 0);
    assert(!r->te_last || release_index(r->te_last) >= release_index(r->te_first));
    assert(!r->cudnn_from || !r->cudnn_below || r->cudnn_from < r->cudnn_below);
    assert(r->engines && (r->engines & ~FATTN_SUPPORT_ENGINE_ALL) == 0);
    assert(cls == FATTN_SUPPORT_ROUTING ? r->status == FATTN_OK : r->status != FATTN_OK);
    assert(r->stage == FATTN_SUPPORT_AT_CALL || r->status == FATTN_E_UNSUPPORTED);
    assert(r->where[0].since == r->te_first ||
           (r->where[0].since == 0 && r->status == FATTN_E_UNSUPPORTED));
    for (int k = 0; k < FATTN_SUPPORT_MAX_WHERE && r->where[k].since; k++) {
        assert(r->where[k].file && r->where[k].line > 0);
        assert(k == 0 || release_index(r->where[k].since) > release_index(r->where[k - 1].since));
    }
    (void)r;
    (void)cls;
}

/* The cuDNN version a refusal row is tested at: an engine's own gap at the
 * engine's cuDNN where the query names it, TE's rules at the platform's. */
static long row_cudnn_version(const fattn_support_rule *r, const fattn_support_query *q)
{
    return r->status == FATTN_E_UNSUPPORTED && q->engine_cudnn_version ? q->engine_cudnn_version
                                                                      : q->cudnn_version;
}

static bool one_engine(unsigned engine)
{
    return engine && (engine & (engine - 1)) == 0 && (engine & ~FATTN_SUPPORT_ENGINE_ALL) == 0;
}

/* The refusal rows that hold for q and the engine, in table order; the
 * first that refuses wins. engine_only: the engine's own gaps, the
 * AT_BACKWARD rows included when q->at_backward (the dispatch); else every
 * AT_CALL row (the front ends). */
static fattn_status check_rows_for(const fattn_support_rule *rows, size_t n,
                                   const fattn_support_query *q, unsigned engine,
                                   bool engine_only, const fattn_support_rule **failed)
{
    if (failed)
        *failed = NULL;
    if (!q)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_support_check: NULL argument");
    if (!one_engine(engine))
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_support_check: engine bits %#x are not "
                           "one engine", engine);
    if (release_index(q->te_rules) < 0)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_support_check: te_rules %u is not one "
                           "release (known: " FATTN_TE_RULES_KNOWN ")", q->te_rules);
    for (size_t i = 0; i < n; i++) {
        const fattn_support_rule *r = &rows[i];
        assert_row(r, FATTN_SUPPORT_REFUSAL);
        bool stage_ok = r->stage == FATTN_SUPPORT_AT_CALL || (engine_only && q->at_backward);
        if (!stage_ok || (engine_only && r->status != FATTN_E_UNSUPPORTED) ||
            !fattn_support_rule_holds(r, q->te_rules) || !(r->engines & engine) ||
            !cudnn_holds(r, row_cudnn_version(r, q)) || !r->refuses(q))
            continue;
        if (failed)
            *failed = r;
        fattn_support_cite c;
        if (!fattn_support_rule_cite(r, q->te_rules, &c))
            return fattn_error(r->status, "rule %s: %s", r->id, r->message);
        char only[64];
        only_text(r, only, sizeof only);
        return fattn_error(r->status, "rule %s: %s (TE %s %s:%d%s%s)", r->id, r->message, c.rev,
                           c.file, c.line, only[0] ? "; " : "", only);
    }
    return FATTN_OK;
}

fattn_status fattn_support_check_rows(const fattn_support_rule *rows, size_t n,
                                      const fattn_support_query *q, unsigned engine,
                                      const fattn_support_rule **failed)
{
    return check_rows_for(rows, n, q, engine, false, failed);
}

fattn_status fattn_support_check(const fattn_support_query *q, unsigned engine,
                                 const fattn_support_rule **failed)
{
    return check_rows_for(rules, NRULES, q, engine, false, failed);
}

fattn_status fattn_support_check_engine(const fattn_support_query *q, unsigned engine,
                                        const fattn_support_rule **failed)
{
    return check_rows_for(rules, NRULES, q, engine, true, failed);
}

int fattn_support_routed_rows(const fattn_support_rule *rows, size_t n,
                              const fattn_support_query *q, const fattn_support_rule **out,
                              int max)
{
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        const fattn_support_rule *r = &rows[i];
        assert_row(r, FATTN_SUPPORT_ROUTING);
        if (!fattn_support_rule_holds(r, q->te_rules) || !cudnn_holds(r, q->cudnn_version) ||
            !r->refuses(q))
            continue;
        if (k < max && out)
            out[k] = r;
        k++;
    }
    return k;
}

int fattn_support_routed(const fattn_support_query *q, const fattn_support_rule **out, int max)
{
    return fattn_support_routed_rows(routes, NROUTES, q, out, max);
}

/* Appending to a fixed buffer; a note that does not fit is cut. */
typedef struct note_buf {
    char *p;
    size_t n, len;
} note_buf;

static void note_add(note_buf *b, const char *fmt, ...)
{
    if (b->len + 1 >= b->n)
        return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(b->p + b->len, b->n - b->len, fmt, ap);
    va_end(ap);
    if (w > 0)
        b->len = b->len + (size_t)w < b->n ? b->len + (size_t)w : b->n - 1;
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* "rule <id>, <file>:<line>" for each routing row q trips under `one`,
 * those `skip` trips as well left out. */
static int note_routes(note_buf *b, const fattn_support_rule *rows, size_t n,
                       const fattn_support_query *q, unsigned one, const fattn_support_query *skip,
                       const char *lead)
{
    fattn_support_query at = *q;
    at.te_rules = one;
    int k = 0;
    for (size_t i = 0; i < n; i++) {
        const fattn_support_rule *r = &rows[i];
        assert_row(r, FATTN_SUPPORT_ROUTING);
        if (!fattn_support_rule_holds(r, one) || !cudnn_holds(r, q->cudnn_version) ||
            !r->refuses(&at))
            continue;
        if (skip && fattn_support_rule_holds(r, skip->te_rules))
            continue; /* the selected release has it too: already said */
        fattn_support_cite c;
        bool cited = fattn_support_rule_cite(r, one, &c);
        assert(cited); /* routing rows are TE's */
        (void)cited;
        note_add(b, "%s%s%srule %s, %s:%d", b->len ? "; " : "", k ? "" : lead, k ? "" : " ",
                 r->id, base_name(c.file), c.line);
        k++;
    }
    return k;
}

void fattn_support_note_rows(const fattn_support_rule *refusals, size_t nr,
                             const fattn_support_rule *routing, size_t nt,
                             const fattn_support_query *q, char *buf, size_t n)
{
    assert(buf && n > 0);
    buf[0] = '\0';
    int sel = release_index(q->te_rules);
    if (sel < 0)
        return;
    note_buf b = {buf, n, 0};
    char lead[96];
    snprintf(lead, sizeof lead, "DPA %s would not route here:", releases[sel].name);
    note_routes(&b, routing, nt, q, q->te_rules, NULL, lead);
    /* What only newer releases add: routing rows, then the first refusal. */
    for (int i = sel + 1; i < FATTN_TE_RULES_COUNT; i++) {
        unsigned one = releases[i].bit;
        snprintf(lead, sizeof lead, "TE %s rules only: DPA %s would not route here:",
                 releases[i].name, releases[i].name);
        note_routes(&b, routing, nt, q, one, q, lead);
        fattn_support_query at = *q;
        at.te_rules = one;
        for (size_t j = 0; j < nr; j++) {
            const fattn_support_rule *r = &refusals[j];
            /* TE's own refusals only: what an engine lacks is no release's rule */
            fattn_support_cite c;
            if (r->status == FATTN_E_UNSUPPORTED || r->stage != FATTN_SUPPORT_AT_CALL ||
                fattn_support_rule_holds(r, q->te_rules) || !cudnn_holds(r, q->cudnn_version) ||
                !fattn_support_rule_cite(r, one, &c) || !r->refuses(&at))
                continue;
            note_add(&b, "%sTE %s rules only: refused by rule %s, %s:%d", b.len ? "; " : "",
                     releases[i].name, r->id, base_name(c.file), c.line);
            break;
        }
    }
}

void fattn_support_route_note(const fattn_support_query *q, char *buf, size_t n)
{
    fattn_support_note_rows(rules, NRULES, routes, NROUTES, q, buf, n);
}
