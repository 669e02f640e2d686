/* fattn/split_types.h — the split front end's data and the helpers over
 * it (lib/split/args.c): the args structs and their unset encodings, the
 * sixteen saved-tensor slots, the to_save entries and their dedup, the
 * forward's result and the grads. fattn/split.h includes it and adds the
 * steps (forward_impl, setup_ctx, backward_impl) and the autograd wrapper;
 * it is its own header so that what the steps' helpers need points one
 * way, at it, and never back at the steps. The flow, dedup and memory rules
 * are fattn/split.h's comment. */
#ifndef FATTN_SPLIT_TYPES_H
#define FATTN_SPLIT_TYPES_H

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

#define FATTN_SPLIT_WINDOW_UNSET INT64_MIN
#define FATTN_SPLIT_SCALE_NONE ((float)NAN)

/* Which FP8 saved-tensor variant a forward uses (TE derives it from
 * qkv_type, NVTE_FP8_DPA_BWD and NVTE_DPA_FP8CS_O_in_F16: TE 2.20.2 backends.py:1760-1771). */
typedef enum fattn_split_save_variant {
    FATTN_SPLIT_SAVE_F16 = 0,       /* fp8 = (None)x4,         f16 = (q, k, v, out) */
    FATTN_SPLIT_SAVE_FP8_O_F16 = 1, /* fp8 = (q8, k8, v8, None), f16 = (None, None, None, out_f16) */
    FATTN_SPLIT_SAVE_FP8_O_FP8 = 2, /* fp8 = (q8, k8, v8, out8), f16 = (None)x4 */
    FATTN_SPLIT_SAVE_FP8_BWD_F16 = 3 /* fp8 = (None)x4,        f16 = (q, k, v, out_f16) */
} fattn_split_save_variant;

/* Every non-differentiable forward input, grouped. */
typedef struct fattn_fwd_args {
    /* -- differentiable inputs: read by setup_ctx to put deduplicated slots
     *    back; forward_impl takes them as parameters instead -- */
    fattn_tensor q, k, v, attn_bias, softmax_offset;
    fattn_tensor packed_qkv, packed_kv;   /* FP8 combine_and_quantize only; empty */

    /* -- sequences -- */
    int64_t max_seqlen_q, max_seqlen_kv;  /* REQUIRED (0 = unset) */
    fattn_tensor cu_seqlens_q, cu_seqlens_kv;               /* empty = None */
    fattn_tensor cu_seqlens_q_padded, cu_seqlens_kv_padded; /* empty = None */
    fattn_tensor page_table_k, page_table_v;                /* empty = None */

    /* -- attention configuration -- */
    int is_training;                      /* REQUIRED: 0/1 (-1 unset) */
    fattn_qkv_layout qkv_layout;          /* REQUIRED (NOT_SET) */
    fattn_bias_type attn_bias_type;       /* REQUIRED (-1) */
    fattn_mask_type attn_mask_type;       /* REQUIRED (-1) */
    fattn_softmax_type softmax_type;      /* REQUIRED (-1) */
    int64_t window_size[2];               /* REQUIRED (FATTN_SPLIT_WINDOW_UNSET) */
    int bottom_right_diagonal;            /* -1 None (default: mask is *_bottom_right), 0, 1 */
    float attn_scale;                     /* NaN None (default (float)(1/sqrt(d_qk))) */
    float dropout_p;                      /* default 0 */
    bool fast_zero_fill;                  /* default true */

    /* -- backend and numerics -- */
    fattn_te_backend fused_attention_backend; /* REQUIRED (NO_BACKEND = unset) */
    bool use_FAv2_bwd;                    /* default false */
    bool deterministic;                   /* default false */
    bool return_max_logit;                /* default false */
    fattn_rng_gen *rng_gen;               /* REQUIRED: the case run's generator */

    /* -- FP8 -- */
    bool fp8;                             /* default false */
    bool fp8_output;                      /* default false */
    bool bf16_backward;                   /* default false */
    const fattn_fp8_meta *fp8_meta;       /* default NULL (None) */
    fattn_fp8_quantizers *quantizers;     /* default NULL (None: the f16 path) */
    /* q, k, v as Float8Tensors (an FP8 dtype: is_input_fp8): what they carry
     * beside their codes, each one's _scale_inv and their nominal dtype
     * (q.dtype, float16 or bfloat16); unread for f16 inputs */
    float in_scale_inv[3];                /* default NaN (unset) */
    fattn_dtype in_nominal_dtype;         /* default INVALID (unset) */

    /* -- misc -- */
    int64_t layer_number;                 /* default 1 */

    /* -- fattn runtime (not TE) -- */
    fattn_engine *engine;                 /* REQUIRED, borrowed */
    uint64_t poison;                      /* fill for allocated outputs, 0 = none */
    /* TE's module state: CPU offload v1 on for this layer. Not modelled:
     * forward_impl refuses it (FATTN_E_NOT_MODELLED, rule cpu_offload_v1). */
    bool cpu_offload;
    /* How FusedAttnFunc is called: by a direct caller (true), not by
     * DotProductAttention, whose window rows then do not apply (support
     * query direct_call). */
    bool direct_call;
    /* TE's environment: NVTE_FP8_DPA_BWD (read per forward, S:1625) and
     * NVTE_DPA_FP8CS_O_in_F16 (read at import, S:234); default true. */
    bool nvte_fp8_dpa_bwd, nvte_dpa_fp8cs_o_in_f16;
} fattn_fwd_args;

/* What backward reads: the aux slots, the saved tensors, the configuration
 * (TE's ctx attributes minus fp8_recipe, fp8_meta, is_output_fp8) and d_out. */
typedef struct fattn_bwd_args {
    /* -- aux slots -- */
    fattn_tensor softmax_stats, rng_state, aux_bias, aux_softmax_offset;
    /* -- saved tensors -- */
    fattn_tensor q_fp8, k_fp8, v_fp8, out_fp8;
    fattn_tensor q, k, v, out;
    fattn_tensor cu_seqlens_q, cu_seqlens_kv, cu_seqlens_q_padded, cu_seqlens_kv_padded;
    /* -- the incoming gradient -- */
    fattn_tensor d_out;                   /* REQUIRED */
    float d_out_scale_inv;                /* d_out a Float8Tensor: its _scale_inv (NaN unset) */

    /* -- precision / FP8 -- */
    bool fp8;                             /* is_bwd_fp8 */
    fattn_dtype nominal_dtype;            /* REQUIRED (INVALID) */
    bool is_input_fp8;
    bool bf16_backward;
    int64_t layer_number;
    fattn_fp8_quantizer *QKV_quantizer, *O_quantizer, *dQKV_quantizer, *dO_quantizer,
        *dP_quantizer, *S_quantizer;
    const char *qkv_type;                 /* NULL on the f16 path */
    /* the scale_inv of q_fp8, k_fp8, v_fp8, out_fp8 (Float8Tensor._scale_inv;
     * NaN: None), and NVTE_DPA_FP8CS_O_in_F16 as the module read it */
    float fp8_scale_inv[4];
    bool nvte_dpa_fp8cs_o_in_f16;

    /* -- attention configuration -- */
    int64_t max_seqlen_q, max_seqlen_kv;  /* REQUIRED (0) */
    float attn_scale;                     /* NaN None: backward resolves it
                                           * (fused_attn.py:596-598) */
    float dropout_p;
    bool fast_zero_fill;
    fattn_qkv_layout qkv_layout;          /* REQUIRED (NOT_SET) */
    fattn_qkv_format o_format;            /* REQUIRED (NOT_SET) */
    fattn_qkv_format qkv_scale_inv_format; /* NOT_SET on the f16 path */
    fattn_qkv_layout dqkv_layout;         /* REQUIRED (NOT_SET) */
    fattn_bias_type attn_bias_type;       /* REQUIRED (-1) */
    fattn_mask_type attn_mask_type;       /* REQUIRED (-1) */
    fattn_softmax_type softmax_type;      /* REQUIRED (-1) */
    int64_t window_size[2];               /* REQUIRED (FATTN_SPLIT_WINDOW_UNSET) */
    int bottom_right_diagonal;            /* -1 None (backward resolves it,
                                           * fused_attn.py:591-595), 0, 1 */
    fattn_te_backend fused_attention_backend; /* REQUIRED (NO_BACKEND) */
    bool use_FAv2_bwd;
    bool deterministic;

    /* -- fattn runtime (not TE) -- */
    fattn_engine *engine;                 /* REQUIRED, borrowed */
    uint64_t poison;
} fattn_bwd_args;

FATTN_API void fattn_fwd_args_init(fattn_fwd_args *a);
FATTN_API void fattn_bwd_args_init(fattn_bwd_args *a);

/* The 16 fixed slots, in the order of setup_ctx's returned tuple
 * (backends.py:1987-2004) and of setup_saved_tensors' unpacking
 * (1545-1566): X(SUFFIX, name) per slot, where name is the slot's name
 * (fattn_split_slot_name) and the fattn_bwd_args field it is unpacked
 * into. The slot's enum constant is FATTN_SPLIT_SLOT_<SUFFIX>. This table
 * is the split front end's own; lib/legacy keeps its saved list separately. */
#define FATTN_SPLIT_SLOTS(X)                                                  \
    X(Q_FP8, q_fp8)                                                           \
    X(K_FP8, k_fp8)                                                           \
    X(V_FP8, v_fp8)                                                           \
    X(OUT_FP8, out_fp8)                                                       \
    X(Q, q)                                                                   \
    X(K, k)                                                                   \
    X(V, v)                                                                   \
    X(OUT, out)                                                               \
    X(CU_SEQLENS_Q, cu_seqlens_q)                                             \
    X(CU_SEQLENS_KV, cu_seqlens_kv)                                           \
    X(CU_SEQLENS_Q_PADDED, cu_seqlens_q_padded)                               \
    X(CU_SEQLENS_KV_PADDED, cu_seqlens_kv_padded)                             \
    X(SOFTMAX_STATS, softmax_stats)                                           \
    X(RNG_STATE, rng_state)                                                   \
    X(AUX_BIAS, aux_bias)                                                     \
    X(AUX_SOFTMAX_OFFSET, aux_softmax_offset)

typedef enum fattn_split_slot {
#define FATTN_SPLIT_SLOT_ENUM_(suffix, name) FATTN_SPLIT_SLOT_##suffix,
    FATTN_SPLIT_SLOTS(FATTN_SPLIT_SLOT_ENUM_)
#undef FATTN_SPLIT_SLOT_ENUM_
    FATTN_SPLIT_NSLOTS
} fattn_split_slot;

/* Sources a slot can be deduplicated to. */
typedef enum fattn_split_source {
    FATTN_SPLIT_SRC_NONE = 0,
    FATTN_SPLIT_SRC_Q,
    FATTN_SPLIT_SRC_K,
    FATTN_SPLIT_SRC_V,
    FATTN_SPLIT_SRC_ATTN_BIAS,
    FATTN_SPLIT_SRC_SOFTMAX_OFFSET,
    FATTN_SPLIT_SRC_OUT
} fattn_split_source;

/* "q_fp8", ..., "aux_softmax_offset"; NULL outside the enum. */
FATTN_API const char *fattn_split_slot_name(fattn_split_slot s);
/* "q", "k", "v", "attn_bias", "softmax_offset", "out"; NULL for NONE. */
FATTN_API const char *fattn_split_source_name(fattn_split_source s);

/* forward_impl's tensors_to_save (TE 2.20.2 backends.py:1842-1849): 12
 * entries, fp8 (q, k, v, out), f16 (q, k, v, out), softmax_stats,
 * rng_state, then two always None (the aux bias and softmax offset come
 * back from the inputs through saved_from). Entry i is the slot
 * fattn_split_to_save_slot(i) of the 16. No cu_seqlens: setup_ctx takes
 * them from the forward's args. */
#define FATTN_SPLIT_NTO_SAVE 12
typedef struct fattn_split_to_save {
    fattn_tensor t[FATTN_SPLIT_NTO_SAVE];
} fattn_split_to_save;

/* The slot (of the 16) that to_save entry i stands for; i in [0, 12). */
FATTN_API fattn_split_slot fattn_split_to_save_slot(int i);

/* What setup_ctx returns and FusedAttnFunc.forward hands save_for_backward
 * (backends.py:1987-2004): the 16 slots in FATTN_SPLIT_SLOTS order, which
 * is the order setup_saved_tensors unpacks them in (1545-1566). */
typedef struct fattn_split_saved {
    fattn_tensor t[FATTN_SPLIT_NSLOTS];
} fattn_split_saved;

/* What forward hands setup_ctx besides the tensors. */
typedef struct fattn_split_ctx_attrs {
    fattn_split_source saved_from[FATTN_SPLIT_NTO_SAVE]; /* per to_save entry */
    bool fp8;                      /* is_bwd_fp8 */
    fattn_dtype nominal_dtype;
    bool is_input_fp8;
    const char *qkv_type;
    fattn_qkv_layout qkv_layout;   /* as backward must read it */
    fattn_qkv_layout dqkv_layout;  /* the original layout */
    fattn_qkv_format o_format;
    fattn_qkv_format qkv_scale_inv_format;
    fattn_te_backend fused_attention_backend;
    fattn_fp8_quantizer *QKV_quantizer, *O_quantizer, *dQKV_quantizer, *dO_quantizer,
        *dP_quantizer, *S_quantizer;
    /* the scale_inv that q_fp8, k_fp8, v_fp8, out_fp8 carry (NaN: None) */
    float fp8_scale_inv[4];
} fattn_split_ctx_attrs;

typedef struct fattn_split_fwd_result {
    fattn_tensor out;              /* O */
    fattn_tensor max_logit;        /* [h] in O's dtype, or empty */
    fattn_split_to_save to_save;
    fattn_split_ctx_attrs ctx_attrs;
    /* FP8: the scale_inv the returned Float8Tensor carries (NaN: F16 O) */
    float out_scale_inv;
    /* owned */
    fattn_tensor own_out, own_max_logit, own_stats, own_max, own_rng_state;
    fattn_tensor own_qkv_fp8[3], own_out_fp8, own_out_f16;
    fattn_tensor own_qkv_f16[3];     /* FP8 inputs dequantised for an F16 backward */
    fattn_fp8_quantizer own_s_copy;  /* S_quantizer's copy (S:1856-1858) */
} fattn_split_fwd_result;

typedef struct fattn_split_grads {
    fattn_tensor dq, dk, dv, d_bias, d_softmax_offset;
    /* FP8 dq, dk, dv (is_input_fp8 without bf16_backward): the _scale_inv
     * the three carry; NaN when they are F16 */
    float grads_scale_inv;
    /* owned */
    fattn_tensor own_storage[3], own_d_bias, own_d_softmax_offset;
    fattn_tensor own_fp8[3], own_d_out_fp8; /* FP8: dQ/dK/dV as cuDNN writes them, dO */
    fattn_tensor own_d_out_f16;             /* an FP8 d_out dequantised for an F16 backward */
} fattn_split_grads;

FATTN_API void fattn_split_fwd_result_free(fattn_split_fwd_result *r);
FATTN_API void fattn_split_grads_free(fattn_split_grads *g);

/* The 12 entries for a save variant (backends.py:1760-1771, 1842-1849):
 * fp8[4] = (q8, k8, v8, out8), f16[4] = (q, k, v, out), then stats and
 * rng_state; entries the variant does not save and the last two are
 * empty. */
FATTN_API fattn_status fattn_split_fill_to_save(fattn_split_save_variant variant,
                                                const fattn_tensor fp8[4], const fattn_tensor f16[4],
                                                const fattn_tensor *softmax_stats,
                                                const fattn_tensor *rng_state,
                                                fattn_split_to_save *to_save);

/* The dedup step of forward_impl (backends.py:1830-1854): saved_from[i]
 * per entry — q (entries 0, 4) when the entry is q (fattn_tensor_same), k
 * (1, 5) when it is k, v (2, 6) when it is v, out (3, 7) when it is out;
 * never for stats and rng_state (8, 9); attn_bias for entry 10 when
 * has_bias, softmax_offset for 11 when has_softmax_offset. Entries with a
 * source are emptied (10 and 11 are empty anyway). Empty sources never
 * match. */
FATTN_API void fattn_split_dedup(fattn_split_to_save *to_save, const fattn_tensor *q,
                                 const fattn_tensor *k, const fattn_tensor *v, const fattn_tensor *out,
                                 bool has_bias, bool has_softmax_offset,
                                 fattn_split_source saved_from[FATTN_SPLIT_NTO_SAVE]);

/* The layout backward reloads tensors in when TE's legacy CPU offload
 * (NVTE_CPU_OFFLOAD_V1) moved an interleaved layer: each packed group is
 * rewritten to separate tensors (_reload_qkv_layout, TE 2.20.2
 * backends.py:1881-1894, used at 1938-1945), e.g. sb3hd ->
 * sbhd_sbhd_sbhd, bshd_bs2hd -> bshd_bshd_bshd; other layouts unchanged.
 * With offloaded = false the layout is returned as is. */
FATTN_API fattn_qkv_layout fattn_split_reload_layout(fattn_qkv_layout layout, bool offloaded);

#ifdef __cplusplus
}
#endif
#endif /* FATTN_SPLIT_TYPES_H */
