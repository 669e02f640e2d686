/* fattn/legacy.h — the legacy front end: TE's FusedAttnFunc before the
 * refactor, kept in its old shape on purpose.
 *
 * fattn_legacy_forward takes TE's 36 forward inputs positionally, in TE's
 * order (transformer_engine/pytorch/attention/dot_product_attention/
 * TE 2.19.0 backends.py:1398-1436), sets the 33 loose ctx attributes of
 * backends.py:1657-1748, saves the flat list
 *   [q_fp8, k_fp8, v_fp8, out_fp8, q, k, v, out,
 *    cu_seqlens_q, cu_seqlens_kv, cu_seqlens_q_padded, cu_seqlens_kv_padded,
 *    aux pack...]
 * with the aux pack as TE's variable-length list [Stats, rng_state, (Bias),
 * (SoftmaxOffset)] (Max stripped into max_logit), and fattn_legacy_backward
 * returns 36 grads, all empty except 9 dq, 10 dk, 11 dv, 12 d_bias and
 * 29 d_softmax_offset.
 *
 * Encodings of TE's Python values:
 *   a tensor None          NULL or the empty slot (fattn_tensor_empty())
 *   attn_scale None        FATTN_LEGACY_SCALE_NONE (NaN): (float)(1/sqrt(d_qk))
 *   bottom_right_diagonal  -1 None (fused_attn_fwd's default: true iff the
 *                          mask is *_bottom_right), 0 False, 1 True
 *   rng_gen                a generator; required (fattn has no process-wide
 *                          default generator: one per case run)
 *   fp8_meta               NULL None; else what FusedAttnFunc reads of the
 *                          dict (fattn/fp8.h fattn_fp8_meta)
 *   quantizers             NULL None; else DPA's six, written into as TE
 *                          writes its recipe state
 *   a Float8Tensor         its codes as a fattn_tensor of an FP8 dtype; its
 *                          _scale_inv and nominal dtype in the ctx fields
 *                          in_scale_inv / in_nominal_dtype (q, k, v) and
 *                          d_out_scale_inv, set by the caller before the call
 *
 * Memory: every tensor the front end allocates (O, max_logit, Stats, Max,
 * rng_state, dQ/dK/dV storage, dBias, dSoftmaxOffset) is owned by the ctx
 * and freed by fattn_legacy_ctx_free; the views handed back stay valid until
 * then, or until the next forward (all buffers) or backward (the grads) on
 * the same ctx replaces them. Allocated outputs are filled with ctx->poison (if non-zero) before
 * the engine runs, then zero-filled exactly where TE's pybind layer does
 * (THD O; THD dQ / dK,dV; dBias for a THD layout).
 */
#ifndef FATTN_LEGACY_H
#define FATTN_LEGACY_H

#include "fattn/api.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "fattn/engine.h"
#include "fattn/fp8.h"
#include "fattn/rng.h"
#include "fattn/status.h"
#include "fattn/te.h"
#include "fattn/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define FATTN_LEGACY_SCALE_NONE ((float)NAN)
#define FATTN_LEGACY_NGRADS 36
/* Positions of the non-empty grads (0-based over the 36 inputs). */
#define FATTN_LEGACY_GRAD_DQ 9
#define FATTN_LEGACY_GRAD_DK 10
#define FATTN_LEGACY_GRAD_DV 11
#define FATTN_LEGACY_GRAD_DBIAS 12
#define FATTN_LEGACY_GRAD_DSOFTMAX_OFFSET 29

/* The saved list (ctx.save_for_backward, TE 2.19.0 backends.py:1677-1687): 12 fixed
 * entries, then TE's aux pack as a list (2..4 entries) from
 * FATTN_LEGACY_SAVED_AUX on: [Stats, rng_state, (Bias), (SoftmaxOffset)].
 * This enum is the legacy front end's own; lib/split keeps its slots
 * separately (FATTN_SPLIT_SLOTS). */
typedef enum fattn_legacy_saved {
    FATTN_LEGACY_SAVED_Q_FP8 = 0,
    FATTN_LEGACY_SAVED_K_FP8,
    FATTN_LEGACY_SAVED_V_FP8,
    FATTN_LEGACY_SAVED_OUT_FP8,
    FATTN_LEGACY_SAVED_Q,
    FATTN_LEGACY_SAVED_K,
    FATTN_LEGACY_SAVED_V,
    FATTN_LEGACY_SAVED_OUT,
    FATTN_LEGACY_SAVED_CU_SEQLENS_Q,
    FATTN_LEGACY_SAVED_CU_SEQLENS_KV,
    FATTN_LEGACY_SAVED_CU_SEQLENS_Q_PADDED,
    FATTN_LEGACY_SAVED_CU_SEQLENS_KV_PADDED,
    FATTN_LEGACY_SAVED_AUX,                          /* 12: the aux list starts here */
    FATTN_LEGACY_SAVED_STATS = FATTN_LEGACY_SAVED_AUX, /* always first in it */
    FATTN_LEGACY_SAVED_RNG_STATE                     /* always second */
} fattn_legacy_saved;
/* The longest saved list: 12 fixed entries and an aux list of 4. */
#define FATTN_LEGACY_SAVED_MAX 16

typedef struct fattn_legacy_ctx {
    /* ---- not TE: where to run and how to poison ------------------------ */
    fattn_engine *engine; /* borrowed */
    uint64_t poison;      /* 0 = none */
    /* TE's module state: is_cpu_offload_enabled() with NVTE_CPU_OFFLOAD_V1
     * and this layer offloaded. Not modelled: forward refuses it
     * (FATTN_E_NOT_MODELLED, support rule cpu_offload_v1). */
    bool cpu_offload;
    /* How FusedAttnFunc is called: by a direct caller (true), not by
     * DotProductAttention, whose window rows then do not apply (support
     * query direct_call). */
    bool direct_call;
    bool has_forward;     /* forward ran and saved */
    /* backward restored tensor_objects: TE sets ctx.tensor_objects = None
     * (2.19.0 quantized_tensor.py:350), so a second backward raises. */
    bool tensor_objects_consumed;

    /* ---- TE's 33 ctx attributes (2.19.0 backends.py:1657-1748) ---------------- */
    fattn_fp8_recipe fp8_recipe;     /* never read by backward */
    bool fp8;                        /* is_bwd_fp8 */
    fattn_dtype nominal_dtype;
    bool is_input_fp8;
    bool is_output_fp8;              /* never read by backward */
    bool bf16_backward;
    /* tensor_objects: the saved list */
    fattn_tensor tensor_objects[FATTN_LEGACY_SAVED_MAX];
    int n_saved;
    const fattn_fp8_meta *fp8_meta;  /* never read by backward */
    int64_t layer_number;
    /* the caller's quantizers (None on the f16 path); S_quantizer is the
     * ctx's copy own_s_copy when backward runs in FP8 (backends.py:1696-1700) */
    fattn_fp8_quantizer *QKV_quantizer, *O_quantizer, *dQKV_quantizer, *dO_quantizer,
        *dP_quantizer, *S_quantizer;
    const char *qkv_type;            /* NULL for the f16 path */
    int64_t max_seqlen_q, max_seqlen_kv;
    float attn_scale;                /* as forward got it: NaN None */
    float dropout_p;
    bool fast_zero_fill;
    fattn_qkv_layout qkv_layout;
    fattn_qkv_format o_format;
    fattn_qkv_format qkv_scale_inv_format; /* NOT_SET on the f16 path */
    fattn_qkv_layout dqkv_layout;
    fattn_bias_type attn_bias_type;
    fattn_mask_type attn_mask_type;
    fattn_softmax_type softmax_type;
    int64_t window_size[2];
    int bottom_right_diagonal;       /* as forward got it: -1 None, 0, 1 */
    fattn_te_backend fused_attention_backend;
    bool use_FAv2_bwd;
    bool deterministic;

    /* ---- buffers owned by the ctx --------------------------------------- */
    fattn_tensor own_out, own_max_logit, own_stats, own_max, own_rng_state;
    fattn_tensor own_grad_storage[3], own_d_bias, own_d_softmax_offset;
    /* FP8: q/k/v quantised (up to three buffers), O quantised by a current
     * scaling O_quantizer, O dequantised, dO quantised, the FP8 grads */
    fattn_tensor own_qkv_fp8[3], own_out_fp8, own_out_f16, own_d_out_fp8;
    fattn_tensor own_grad_fp8[3];
    /* FP8 inputs: q, k, v dequantised for an F16 backward; dO dequantised */
    fattn_tensor own_qkv_f16[3], own_d_out_f16;
    fattn_fp8_quantizer own_s_copy;

    /* ---- FP8 state outside TE's ctx ------------------------------------- */
    /* TE's environment, read by forward: NVTE_FP8_DPA_BWD (per call,
     * backends.py:1467) and NVTE_DPA_FP8CS_O_in_F16 (at import,
     * backends.py:219). Both default true. */
    bool env_fp8_dpa_bwd, env_fp8cs_o_in_f16;
    /* The scale_inv a Float8Tensor carries, per saved entry (NaN: not an
     * FP8 tensor), and that of the tensor forward returned. */
    float tensor_scale_inv[FATTN_LEGACY_SAVED_MAX];
    float out_scale_inv;
    /* What a Float8Tensor argument carries and a fattn_tensor does not, set
     * by the caller: when q, k, v are FP8 (is_input_fp8) each one's
     * _scale_inv and their nominal dtype (q.dtype, float16 or bfloat16),
     * read by forward; when d_out is FP8, its _scale_inv, read by backward.
     * And what backward hands back with FP8 dq, dk, dv (is_input_fp8
     * without bf16_backward): the _scale_inv the three carry; NaN when the
     * grads are F16. */
    float in_scale_inv[3];
    fattn_dtype in_nominal_dtype;
    float d_out_scale_inv;
    float grads_scale_inv;
} fattn_legacy_ctx;

/* A zeroed ctx that will run on `engine` (borrowed). */
FATTN_API fattn_status fattn_legacy_ctx_init(fattn_legacy_ctx **out, fattn_engine *engine);
FATTN_API void fattn_legacy_ctx_free(fattn_legacy_ctx *ctx);

/* FusedAttnFunc.forward. `out` gets O (Q's format, V's head dim, Q's dtype);
 * `max_logit` (may be NULL) gets the [h] max logit in O's dtype when
 * return_max_logit, else the empty slot. Calling it again on the same ctx
 * replaces the previous forward. */
FATTN_API fattn_status fattn_legacy_forward(
    fattn_legacy_ctx *ctx,
    bool is_training,
    int64_t max_seqlen_q,
    int64_t max_seqlen_kv,
    const fattn_tensor *cu_seqlens_q,
    const fattn_tensor *cu_seqlens_kv,
    const fattn_tensor *cu_seqlens_q_padded,
    const fattn_tensor *cu_seqlens_kv_padded,
    const fattn_tensor *page_table_k,
    const fattn_tensor *page_table_v,
    const fattn_tensor *q,
    const fattn_tensor *k,
    const fattn_tensor *v,
    const fattn_tensor *attn_bias,
    float attn_scale,
    float dropout_p,
    bool fast_zero_fill,
    fattn_qkv_layout qkv_layout,
    fattn_bias_type attn_bias_type,
    fattn_mask_type attn_mask_type,
    fattn_softmax_type softmax_type,
    const int64_t window_size[2],
    int bottom_right_diagonal,
    fattn_rng_gen *rng_gen,
    fattn_te_backend fused_attention_backend,
    bool use_FAv2_bwd,
    bool fp8,
    const fattn_fp8_meta *fp8_meta,
    fattn_fp8_quantizers *quantizers,
    bool deterministic,
    const fattn_tensor *softmax_offset,
    bool fp8_output,
    bool bf16_backward,
    int64_t layer_number,
    bool return_max_logit,
    const fattn_tensor *packed_qkv,
    const fattn_tensor *packed_kv,
    fattn_tensor *out,
    fattn_tensor *max_logit);

/* FusedAttnFunc.backward: fills grads[0..35]. */
FATTN_API fattn_status fattn_legacy_backward(fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                             fattn_tensor grads[FATTN_LEGACY_NGRADS]);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_LEGACY_H */
