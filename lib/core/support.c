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
#include <stddef.h>
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
    if (q->direct_call)
        return false; /* no DotProductAttention, no check_set_window_size */
    return fattn_window_normalize(q->mask_type, true, in, out, NULL) != FATTN_OK;
}

static bool r_window_not_normalised(const fattn_support_query *q)
{
    int64_t in[2] = {q->window_left, q->window_right}, out[2];
    if (q->direct_call)
        return false; /* a direct caller's window reaches TE's C++ as given */
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

/* fused_attn.cpp:310-319: multiples of 8 always; at most 256 on sm_90 for
 * training (9.5). Inference above 256 is the 9.10.2 clause's (below). */
static bool r_head_dim(const fattn_support_query *q)
{
    return q->d_qk % 8 != 0 || q->d_v % 8 != 0 || q->d_qk < 8 || q->d_v < 8 ||
           (q->is_training && (q->d_qk > 256 || q->d_v > 256));
}

/* An inference call with a head dim above 256 (multiples of 8: head_dim's
 * business), which only fused_attn.cpp:323-329 (cuDNN >= 9.10.2, any arch,
 * forward only) admits on sm_90. */
static bool large_inference(const fattn_support_query *q)
{
    return !q->is_training && (q->d_qk > 256 || q->d_v > 256);
}

/* fused_attn.cpp:328-329: of a non-paged q of one token, the 9.10.2 clause
 * takes every mask but causal and padding_causal (top-left). */
static bool r_head_dim_large_decode(const fattn_support_query *q)
{
    return large_inference(q) && !fattn_layout_is_paged(q->layout) && q->sq == 1 &&
           (q->mask_type == FATTN_MASK_CAUSAL || q->mask_type == FATTN_MASK_PADDING_CAUSAL);
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

/* A THD q of one token per sequence against a bshd/sbhd KV cache with
 * more q heads than KV heads (decoding with GQA or MQA). */
static bool r_thd_cache_decode_gqa(const fattn_support_query *q)
{
    return !fattn_layout_is_paged(q->layout) &&
           fattn_layout_q_format(q->layout) == FATTN_FORMAT_THD &&
           fattn_layout_kv_format(q->layout) != FATTN_FORMAT_THD && q->sq == 1 && q->h > q->hg;
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

/* ---- the engines' own gaps (status FATTN_E_UNSUPPORTED) -------------------
 * What TE accepts, or what TE's own row already refuses at the front ends,
 * and an engine still cannot run: the dispatch (fattn_engine_fwd/_bwd)
 * checks these before the engine sees the call, so the engines keep no
 * refusals of their own. */

static bool is_fp8_dtype(fattn_dtype t)
{
    return t == FATTN_DTYPE_FLOAT8_E4M3FN || t == FATTN_DTYPE_FLOAT8_E5M2;
}

static bool r_fp8_descales(const fattn_support_query *q)
{
    return !q->fp8 && (is_fp8_dtype(q->q_dtype) || is_fp8_dtype(q->kv_dtype));
}

static bool r_fp8_thd(const fattn_support_query *q)
{
    return q->fp8 && is_thd(q);
}

static bool r_fp8_head_dim16(const fattn_support_query *q)
{
    return q->fp8 && (q->d_qk % 16 != 0 || q->d_v % 16 != 0);
}

static bool r_fp8_paged(const fattn_support_query *q)
{
    return q->fp8 && fattn_layout_is_paged(q->layout);
}

/* The cuDNN engine's FP8 graphs by GPU architecture (the rows give the
 * range): what cudnn-frontend's sdpa_fp8 does not build there, and one
 * measured gap. The dispatch fills the facts these read (o_dtype,
 * bottom_right_diagonal); at the front ends they keep their defaults. */

/* The band with a bottom-right diagonal, as the engine aligns it: causality
 * from the mask type (fattn_mask_band_right), and a bottom-right diagonal
 * with sq == skv and no padding is the top-left one. */
static bool r_fp8_band_bottom_right(const fattn_support_query *q)
{
    return q->fp8 && q->bottom_right_diagonal &&
           fattn_mask_band_right(q->mask_type, true, q->window_right) != -1 &&
           !(q->sq == q->skv && !fattn_mask_has_padding(q->mask_type));
}

/* The forward's O as float16 or bfloat16 (the backward reads O, whatever
 * its dtype). */
static bool r_fp8_o_f16(const fattn_support_query *q)
{
    return q->fp8 && !q->at_backward &&
           (q->o_dtype == FATTN_DTYPE_FLOAT16 || q->o_dtype == FATTN_DTYPE_BFLOAT16);
}

/* Dropout as applied: a training call's. */
static bool r_fp8_dropout(const fattn_support_query *q)
{
    return q->fp8 && q->is_training && q->dropout > 0.0f;
}

static bool r_fp8_bwd_head_dim(const fattn_support_query *q)
{
    return q->fp8 && (q->d_qk != 128 || q->d_v != 128);
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
 *   the cuDNN range: ANY_CUDNN, CUDNN_FROM(v), CUDNN_BELOW(v), and for an
 *   engine's gap on some GPU architectures only ANY_CUDNN_SM(from, below);
 *   the citations: AT(release, file, line), one per release where the line
 *   moved, oldest first; NOT_IN_TE for an engine's measured gap. */
#define REFUSAL(engines) engines, FATTN_SUPPORT_REFUSAL, FATTN_SUPPORT_AT_CALL
#define REFUSAL_AT_BACKWARD(engines) engines, FATTN_SUPPORT_REFUSAL, FATTN_SUPPORT_AT_BACKWARD
#define ROUTING FATTN_SUPPORT_ENGINE_ALL, FATTN_SUPPORT_ROUTING, FATTN_SUPPORT_AT_CALL
#define FROM_TE(first) FATTN_TE_RULES_##first, 0u
#define ANY_CUDNN 0L, 0L, ANY_SM_
#define CUDNN_FROM(v) (long)(v), 0L, ANY_SM_
#define CUDNN_BELOW(v) 0L, (long)(v), ANY_SM_
#define ANY_SM_ 0, 0
/* A row of an engine's gap on some GPU architectures only, at any cuDNN:
 * [from, below) in compute capability major * 10 + minor, 0 for no bound. */
#define ANY_CUDNN_SM(from, below) 0L, 0L, (from), (below)
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
     "head dims d_qk and d_v must be multiples of 8, and at most 256 for training on sm_90",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 310)}},
    /* What these two admit both engines run: the cuDNN engine's graph for a
     * head dim above 256 was measured right on an H100 with cuDNN 9.19.0
     * (docs/gpu-runs/2026-12-05-large-dims.txt), so no engine row narrows
     * them; a cuDNN that fails it gets a row of its version range. */
    {"head_dim_large_inference", large_inference, FATTN_E_INVALID_CASE,
     "inference with a head dim above 256 needs cuDNN >= 9.10.2 (any head dim, forward only)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), CUDNN_BELOW(91002), {AT(2_19, F_CPP, 326)}},
    {"head_dim_large_decode", r_head_dim_large_decode, FATTN_E_INVALID_CASE,
     "inference with a head dim above 256 and one query token (not paged) takes no causal "
     "or padding_causal mask (top-left)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, {AT(2_19, F_CPP, 328)}},
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
    /* FP8 inference with d_qk != d_v, which this admits (TE's tests: 192 /
     * 128), both engines run: the cuDNN engine's graph measured right on an
     * H100 with cuDNN 9.19.0 (docs/gpu-runs/2026-12-05-large-dims.txt). */
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
    /* Before max_logit_cudnn, which refuses every max_logit below 9.21:
     * this one holds at every cuDNN. */
    {"fp8_max_logit_cudnn", r_fp8_max_logit, FATTN_E_UNSUPPORTED,
     "return_max_logit with FP8: the cuDNN engine's FP8 graph has no Max output, at any "
     "cuDNN (TE's rule fp8_max_logit refuses it at the front ends)",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
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
    {"thd_cache_decode_gqa_cudnn", r_thd_cache_decode_gqa, FATTN_E_UNSUPPORTED,
     "a bshd/sbhd KV cache read by a THD q of one token per sequence with more q heads than "
     "KV heads leaves the Stats rows of every q head but the first of each KV head unwritten "
     "on cuDNN 9.19 (measured on the H100; newer cuDNN not measured, so refused on all; "
     "docs/gpu-runs/2026-12-05-dpa.txt)",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
    /* The engines' gaps that TE's own rows above (pre_scale_bias, fp8_*,
     * paged_fp8) mostly refuse at the front ends already: rows still, since
     * the engines are called directly too (the dispatch checks only the
     * rows of status FATTN_E_UNSUPPORTED). After TE's, so that a front end
     * names TE's rule first. */
    {"pre_scale_bias_engines", r_pre_scale_bias, FATTN_E_UNSUPPORTED,
     "pre_scale_bias is implemented by no engine: TE's F16 fused path has no such bias to "
     "mirror (rule pre_scale_bias)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
    {"fp8_descales_engines", r_fp8_descales, FATTN_E_UNSUPPORTED,
     "FP8 Q, K or V codes without their quantisation parameters (fp8 params NULL): a support "
     "fact, not a fault of the call's shapes — the codes with descale 1 would be a defined "
     "case, but no engine has a plain-FP8 mode (TE always passes FP8 data with its scale_inv, "
     "through the FP8 branch)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
    {"fp8_bias_engines", r_fp8_bias, FATTN_E_UNSUPPORTED,
     "FP8 attention with a bias is implemented by no engine (cuDNN's FP8 SDPA has none; "
     "rule fp8_bias)",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
    {"fp8_softmax_engines", r_fp8_softmax, FATTN_E_UNSUPPORTED,
     "FP8 attention with an off-by-one or learnable softmax is implemented by no engine "
     "(cuDNN's FP8 SDPA lowering has no sink), at any cuDNN",
     REFUSAL(ENG_ALL), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
    {"fp8_thd_cudnn", r_fp8_thd, FATTN_E_UNSUPPORTED,
     "FP8 attention with a THD q or kv: the cuDNN engine does not build it (cudnn-frontend: "
     "\"sdpa fp8 backward with THD is not supported on Hopper architecture\")",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
    {"fp8_head_dim_cudnn", r_fp8_head_dim16, FATTN_E_UNSUPPORTED,
     "FP8 attention needs head dims that are multiples of 16 on the cuDNN engine "
     "(cudnn-frontend: \"hidden_dim should be multiple of 16\")",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
    {"fp8_paged_cudnn", r_fp8_paged, FATTN_E_UNSUPPORTED,
     "FP8 over a paged KV cache: the cuDNN engine's paged cache load has no FP8 path",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN, NOT_IN_TE},
    /* The cuDNN engine's FP8 by its device's architecture. */
    {"fp8_arch_cudnn", r_fp8, FATTN_E_UNSUPPORTED,
     "FP8 attention on the cuDNN engine needs sm_90 or newer (cudnn-frontend: \"sdpa fp8 "
     "forward operation is only supported on Hopper architecture and newer\")",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN_SM(0, 90), NOT_IN_TE},
    {"fp8_bottom_right_sm90_cudnn", r_fp8_band_bottom_right, FATTN_E_UNSUPPORTED,
     "FP8 attention with a bottom-right diagonal on sm_90 (cudnn-frontend: bottom-right causal "
     "FP8 SDPA \"is only supported on Blackwell architecture and newer\")",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN_SM(90, 100), NOT_IN_TE},
    {"fp8_o_f16_sm90_cudnn", r_fp8_o_f16, FATTN_E_UNSUPPORTED,
     "FP8 attention with a float16 or bfloat16 O on sm_90 (cudnn-frontend: \"sdpa fp8 forward "
     "with HALF/BFLOAT16 output is only supported on Blackwell architecture with cuDNN version "
     "9.13.0 and newer\")",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN_SM(90, 100), NOT_IN_TE},
    /* Measured on the H200 (cuDNN 9.19, docs/cudnn-engine.md "FP8"): on the
     * two FP8 cases with dropout the forward kernel cuDNN picks wrote past
     * its shared memory under compute-sanitizer, and without it hit an
     * illegal memory access. Refused until the cause is known, rather than
     * run. */
    {"fp8_dropout_sm90_cudnn", r_fp8_dropout, FATTN_E_UNSUPPORTED,
     "FP8 attention with dropout on sm_90 (cuDNN 9.19's FP8 forward kernel for it wrote out of "
     "bounds of shared memory on the H200)",
     REFUSAL(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN_SM(90, 100), NOT_IN_TE},
    {"fp8_bwd_head_dim_sm90_cudnn", r_fp8_bwd_head_dim, FATTN_E_UNSUPPORTED,
     "FP8 attention backward needs d_qk = d_v = 128 on sm_90 (cudnn-frontend: \"hidden_dim "
     "shoud be equal to 128 and hidden_dim should be multiple of 16\")",
     REFUSAL_AT_BACKWARD(ENG_CUDNN), FROM_TE(2_19), ANY_CUDNN_SM(90, 100), NOT_IN_TE},
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
    q->sm = FATTN_SUPPORT_SM_REFERENCE;
    q->o_dtype = FATTN_DTYPE_INVALID;
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

fattn_status fattn_support_check(const fattn_support_query *q, unsigned engine,
                                 const fattn_support_rule **failed)
{
    return fattn__support_check_rows(rules, NRULES, q, engine, failed);
}

fattn_status fattn_support_check_engine(const fattn_support_query *q, unsigned engine,
                                        const fattn_support_rule **failed)
{
    return fattn__support_check_engine_rows(rules, NRULES, q, engine, failed);
}

int fattn_support_routed(const fattn_support_query *q, const fattn_support_rule **out, int max)
{
    return fattn__support_routed_rows(routes, NROUTES, q, out, max);
}

void fattn_support_route_note(const fattn_support_query *q, char *buf, size_t n)
{
    fattn__support_note_rows(rules, NRULES, routes, NROUTES, q, buf, n);
}
