/* The legacy front end's blocks shared by legacy.c (the f16 path) and
 * legacy_fp8.c (the FP8 branches of TE 2.19.0 FusedAttnFunc). Private to
 * lib/legacy: the split front end has its own (independent witness). */
#ifndef FATTN_LEGACY_INTERNAL_H
#define FATTN_LEGACY_INTERNAL_H

#include "fattn/engine.h"
#include "fattn/fp8.h"
#include "fattn/legacy.h"
#include "fattn/support.h"

/* FusedAttnFunc.forward's arguments and the locals its blocks share. The
 * tensors are borrowed (q, k, v required; the rest NULL or empty for None);
 * every tensor the blocks allocate is owned by ctx. */
typedef struct lg_forward_locals {
    fattn_legacy_ctx *ctx;
    bool is_training, return_max_logit;
    int64_t max_seqlen_q, max_seqlen_kv;
    const fattn_tensor *cu_seqlens_q, *cu_seqlens_kv;
    const fattn_tensor *cu_seqlens_q_padded, *cu_seqlens_kv_padded;
    const fattn_tensor *page_table_k, *page_table_v;
    const fattn_tensor *q, *k, *v, *attn_bias, *softmax_offset;
    float attn_scale, dropout_p;
    fattn_qkv_layout qkv_layout;
    fattn_bias_type attn_bias_type;
    fattn_mask_type attn_mask_type;
    fattn_softmax_type softmax_type;
    const int64_t *window_size;  /* [2] */
    int bottom_right_diagonal;
    fattn_rng_gen *rng_gen;
    fattn_te_backend fused_attention_backend;
    bool fast_zero_fill, use_FAv2_bwd, deterministic;
    bool fp8, fp8_output, bf16_backward;
    const fattn_fp8_meta *fp8_meta;
    int64_t layer_number;
    /* -- locals -- */
    fattn_qkv_format qf, kvf;    /* formats of Q and of K/V */
    fattn_support_query sq;      /* the geometry too: h, d_qk, d_v */
    float scale;                 /* attn_scale resolved */
    fattn_dtype nominal;         /* q.dtype: q's, or its nominal one when q is FP8 */
    bool is_input_fp8;           /* q is a Float8Tensor (backends.py:1462) */
    bool brd;                    /* bottom_right_diagonal resolved */
    fattn_aux_pack aux;          /* the engine's list, [Stats, (Max), rng_state, ...] */
    /* -- FP8 (legacy_fp8.c) -- */
    fattn_fp8_quantizers *quantizers;
    const fattn_tensor *eq, *ek, *ev; /* what the engine gets: q, k, v or their fp8 */
    const fattn_fp8_fwd *fp8p;   /* the engine's FP8 scaling, NULL on the f16 path */
    fattn_tensor out_ret;        /* what forward returns */
    bool is_bwd_fp8;             /* fp8 and NVTE_FP8_DPA_BWD (backends.py:1467) */
    fattn_tensor qkv_fp8[3], out_fp8, out_f16;
    fattn_tensor qkv_f16[3];     /* what an F16 backward gets: q, k, v, or FP8 ones dequantised */
    float qkv_scale_inv[3], out_fp8_scale_inv;
} lg_forward_locals;

/* A poisoned output (the harness's poison, 0 = leave as is). */
fattn_status fattn__legacy_alloc_out(fattn_legacy_ctx *ctx, fattn_tensor *t, fattn_dtype dt,
                                    int ndim, const int64_t *shape);
/* One buffer holding npack tensors shaped like `like`, interleaved at `at`. */
fattn_status fattn__legacy_alloc_packed(fattn_legacy_ctx *ctx, fattn_tensor *storage,
                                       fattn_dtype dt, const fattn_tensor *like, int npack,
                                       int at, fattn_tensor *views);
/* fused_attn_fwd, both calls of the protocol, with f's engine tensors. */
fattn_status fattn__legacy_forward_fused_attn_fwd(lg_forward_locals *f);

/* The f16 fused_attn_bwd's arguments from the ctx (backends.py:1965-1999);
 * the FP8 branch starts from them. */
void fattn__legacy_backward_params(const fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                  const fattn_aux_pack *aux,
                                  const fattn_tensor g[FATTN_LEGACY_NGRADS],
                                  fattn_bwd_params *p);

/* The FP8 branch of forward (backends.py:1487-1613): quantise, the FP8
 * call, O for the caller and for backward; then its saved list and ctx. */
fattn_status fattn__legacy_fp8_forward(lg_forward_locals *f);
void fattn__legacy_fp8_save_and_ctx(lg_forward_locals *f);
/* The f16 backward's dO when d_out is a Float8Tensor: dequantised to the
 * nominal dtype (backends.py:1962-1963); *d_out otherwise. */
fattn_status fattn__legacy_fp8_d_out_f16(fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                        const fattn_tensor **use);
/* The FP8 branch of backward (backends.py:1758-1960), ctx->fp8 set. */
fattn_status fattn__legacy_fp8_backward(fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                       const fattn_aux_pack *aux,
                                       fattn_tensor g[FATTN_LEGACY_NGRADS]);
void fattn__legacy_fp8_free(fattn_legacy_ctx *ctx);

/* Positions in the engine's aux list that forward allocates: Stats first,
 * then Max when return_max_logit (fused_attn.py:402-441). */
enum lg_pack { LG_PACK_STATS = 0, LG_PACK_MAX = 1 };

#endif /* FATTN_LEGACY_INTERNAL_H */
