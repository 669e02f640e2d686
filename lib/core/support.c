/* The support table (fattn/support.h): one row per rule, each citing the TE
 * line it mirrors at TE commit d0067d0, for sm_90 + cuDNN 9.19.
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
#include <stddef.h>
#include <string.h>

#include "core/registry.h"
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
static bool r_paged(const fattn_support_query *q)
{
    return fattn_layout_is_paged(q->layout);
}

static bool r_bias_sink(const fattn_support_query *q)
{
    return has_tensor_bias(q) && q->softmax_type != FATTN_SOFTMAX_VANILLA;
}

/* ---- the table -------------------------------------------------------- */

static const fattn_support_rule rules[] = {
    {"pre_scale_bias", r_pre_scale_bias, FATTN_E_INVALID_CASE,
     "pre_scale_bias is never selected on the F16 arbitrary-seqlen path "
     "(only no_bias, alibi and post_scale_bias are wired)",
     F_CPP, 354, FATTN_SUPPORT_ENGINE_ALL},
    {"bias_missing", r_bias_missing, FATTN_E_INVALID_CASE,
     "attn_bias cannot be None when attn_bias_type is pre/post_scale_bias",
     F_PY, 335, FATTN_SUPPORT_ENGINE_ALL},
    {"bias_dtype", r_bias_dtype, FATTN_E_INVALID_CASE,
     "attn_bias must have the same dtype as q", F_PY, 340, FATTN_SUPPORT_ENGINE_ALL},
    {"bias_padding", r_bias_padding, FATTN_E_INVALID_CASE,
     "post_scale_bias is refused with padding and padding_causal masks",
     F_CPP, 412, FATTN_SUPPORT_ENGINE_ALL},
    {"alibi_mask", r_alibi_mask, FATTN_E_INVALID_CASE,
     "alibi needs a causal or causal_bottom_right mask (not no_mask or a padding mask)",
     F_CPP, 358, FATTN_SUPPORT_ENGINE_ALL},
    {"window_mask", r_window_mask, FATTN_E_INVALID_CASE,
     "window_size is inconsistent with the mask: check_set_window_size asserts",
     F_UTILS, 2666, FATTN_SUPPORT_ENGINE_ALL},
    {"window_not_normalised", r_window_not_normalised, FATTN_E_INVALID_CASE,
     "window_size is not in check_set_window_size's normal form for the mask "
     "(DotProductAttention rewrites it, with a warning, before FusedAttnFunc runs)",
     F_UTILS, 2659, FATTN_SUPPORT_ENGINE_ALL},
    {"heads_divisible", r_heads_divisible, FATTN_E_INVALID_CASE,
     "the number of attention heads must be divisible by the number of GQA groups",
     F_DPA, 741, FATTN_SUPPORT_ENGINE_ALL},
    {"thd_padding", r_thd_padding, FATTN_E_INVALID_CASE,
     "qkv_format thd needs a padding, padding_causal or padding_causal_bottom_right mask",
     F_DPA, 1785, FATTN_SUPPORT_ENGINE_ALL},
    {"head_dim", r_head_dim, FATTN_E_INVALID_CASE,
     "head dims d_qk and d_v must be multiples of 8 and at most 256 on sm_90",
     F_CPP, 310, FATTN_SUPPORT_ENGINE_ALL},
    {"bottom_right_sq_gt_skv", r_bottom_right_sq_gt_skv, FATTN_E_INVALID_CASE,
     "a bottom-right causal mask with max_seqlen_q > max_seqlen_kv needs a padding "
     "mask, no bias and no dropout",
     F_CPP, 400, FATTN_SUPPORT_ENGINE_ALL},
    {"swa_restrictions", r_swa, FATTN_E_INVALID_CASE,
     "a sliding window other than (-1,-1)/(-1,0) needs max_seqlen_q <= max_seqlen_kv, "
     "no bias, no dropout and a mask cuDNN's SWA supports for the format",
     F_CPP, 430, FATTN_SUPPORT_ENGINE_ALL},
    {"dropout_range", r_dropout_range, FATTN_E_INVALID_CASE,
     "dropout_p must lie in [0, 1) (torch.nn.Dropout's range; p = 1 makes the "
     "1/(1-p) rescale infinite)",
     F_BACKENDS, 388, FATTN_SUPPORT_ENGINE_ALL},
    {"bias_sink_quirk", r_bias_sink, FATTN_E_UNSAFE_TE_QUIRK,
     "a bias together with a non-vanilla softmax: TE shapes dBias like the last aux "
     "entry (the [1,h,1,1] softmax offset), so writing dBias would go out of bounds",
     F_PYBIND, 548, FATTN_SUPPORT_ENGINE_ALL},
    {"fp8_execution", r_fp8, FATTN_E_UNSUPPORTED,
     "FP8 execution is not implemented by fattn's engines (args, slots and dedup exist)",
     F_CPP, 257, FATTN_SUPPORT_ENGINE_ALL},
    {"max_logit_cudnn", r_max_logit_cudnn, FATTN_E_UNSUPPORTED,
     "return_max_logit needs cuDNN >= 9.21; the reference platform has cuDNN 9.19",
     F_CPP, 479, FATTN_SUPPORT_ENGINE_CUDNN},
    {"paged_cpu", r_paged, FATTN_E_UNSUPPORTED,
     "paged KV layouts are not implemented by fattn's engines (CPU; cuDNN part 1)",
     F_CPP, 387, FATTN_SUPPORT_ENGINE_ALL},
    {"float32_cudnn", r_float32_cudnn, FATTN_E_UNSUPPORTED,
     "cuDNN's fused attention takes float16/bfloat16 io only (TE's F16 arbitrary-seqlen "
     "backend is selected only for those dtypes); float32 runs on the CPU engine",
     F_CPP, 296, FATTN_SUPPORT_ENGINE_CUDNN},
};

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
}

const fattn_support_rule *fattn_support_rules(int *count)
{
    if (count)
        *count = (int)(sizeof rules / sizeof rules[0]);
    return rules;
}

const fattn_support_rule *fattn_support_rule_find(const char *id)
{
    if (!id)
        return NULL;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (strcmp(rules[i].id, id) == 0)
            return &rules[i];
    return NULL;
}

fattn_status fattn_support_check(const fattn_support_query *q, const char *engine,
                                 const fattn_support_rule **failed)
{
    if (failed)
        *failed = NULL;
    if (!q || !engine)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_support_check: NULL argument");
    unsigned bit = fattn_engine_kind_support_bit(engine);
    if (!bit)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_support_check: unknown engine '%s'",
                           engine);
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        const fattn_support_rule *r = &rules[i];
        /* a row is a whole rule: what it refuses, with which status, citing TE */
        assert(r->id && r->refuses && r->message && r->te_file && r->te_line > 0);
        assert(r->status != FATTN_OK);
        if (!(r->engines & bit) || !r->refuses(q))
            continue;
        if (failed)
            *failed = r;
        return fattn_error(r->status, "rule %s: %s (TE %s:%d)", r->id, r->message,
                           r->te_file, r->te_line);
    }
    return FATTN_OK;
}
