/* The legacy front end (fattn/legacy.h): TE's FusedAttnFunc before the
 * refactor — 36 positional inputs, 33 loose ctx attributes, the saved list
 * with the aux pack as a list, 36 grads.
 *
 * Uses only the engine API and core types. The split front end
 * (lib/split/) implements the same rules separately; code that looks alike
 * is marked "independent witness" and must not be unified.
 *
 * fattn_legacy_forward and fattn_legacy_backward read as the blocks of the
 * monolith FusedAttnFunc.forward / .backward, one static step each, named
 * lg_forward_<block> / lg_backward_<block> (docs/frontends.md traces them).
 *
 * TE lines cited as file:line are TE 2.19.0's (the PyPI wheel
 * transformer-engine==2.19.0), whose FusedAttnFunc is the monolith this
 * front end models:
 *   backends.py    transformer_engine/pytorch/attention/dot_product_attention/backends.py
 *   fused_attn.py  transformer_engine/pytorch/cpp_extensions/fused_attn.py
 * except the C++ pybind layer, which the wheel does not ship; it is cited at
 * TE commit d0067d0 (the snapshot fattn was first written against):
 *   attention.cpp  transformer_engine/pytorch/csrc/extensions/attention.cpp
 * 2.19.0's FusedAttnFunc is d0067d0's line for line, 22 lines further down
 * the file; fused_attn.py is the same file in both (docs/frontends.md).
 */
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/legacy.h"
#include "fattn/support.h"

#include "internal.h"

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

static fattn_tensor lg_opt(const fattn_tensor *t)
{
    return (t && !fattn_tensor_is_empty(t)) ? *t : fattn_tensor_empty();
}

static bool lg_none(const fattn_tensor *t)
{
    return !t || fattn_tensor_is_empty(t);
}

/* independent witness: mirrors lib/split/split.c sp_heads_dim, do not unify.
 * The heads dim of a tensor of format f: sbhd/bshd [.,.,H,D] -> 2,
 * bhsd [b,H,s,D] and thd [t,H,D] -> 1. */
static int lg_heads_dim(fattn_qkv_format f)
{
    return (f == FATTN_FORMAT_THD || f == FATTN_FORMAT_BHSD) ? 1 : 2;
}

static void lg_free_forward_buffers(fattn_legacy_ctx *ctx)
{
    fattn_tensor_free(&ctx->own_out);
    fattn_tensor_free(&ctx->own_max_logit);
    fattn_tensor_free(&ctx->own_stats);
    fattn_tensor_free(&ctx->own_max);
    fattn_tensor_free(&ctx->own_rng_state);
    fattn__legacy_fp8_free(ctx);
}

static void lg_free_backward_buffers(fattn_legacy_ctx *ctx)
{
    for (int i = 0; i < 3; i++)
        fattn_tensor_free(&ctx->own_grad_storage[i]);
    fattn_tensor_free(&ctx->own_d_bias);
    fattn_tensor_free(&ctx->own_d_softmax_offset);
}

/* independent witness: mirrors lib/split/split.c sp_max_logit, do not unify.
 * fused_attn.py:402-441: max_logit = amax of Max over every dim but h, cast
 * to O's dtype, shape [h]. THD (ragged Max [t_q,h,1]): only valid tokens
 * [start(b), start(b) + len(b)) count, start from cu_seqlens_q_padded when
 * given. bshd/sbhd/bhsd Max [b,h,sq,1]: with a padding mask only rows
 * i < len(b) count (fattn's rule: the rest is outside the engine's defined
 * region). NaN propagates as torch.amax does. */
static fattn_status lg_max_logit(const fattn_tensor *maxt, const fattn_tensor *cu_q,
                                 const fattn_tensor *cu_q_pad, bool padding, int64_t h,
                                 fattn_dtype odt, fattn_tensor *res)
{
    /* Max as the engine dispatch checked it: float32 [t_q,h,1] or [b,h,sq,1] */
    assert(maxt->dtype == FATTN_DTYPE_FLOAT32 && (maxt->ndim == 3 || maxt->ndim == 4));
    int64_t shape[1] = {h};
    fattn_status st = fattn_tensor_alloc(res, odt, 1, shape);
    if (st != FATTN_OK)
        return st;
    const float *base = maxt->data;
    const int32_t *cu = lg_none(cu_q) ? NULL : cu_q->data;
    const int32_t *cup = lg_none(cu_q_pad) ? NULL : cu_q_pad->data;
    for (int64_t n = 0; n < h; n++) {
        float m = -INFINITY;
        int64_t idx[FATTN_MAX_DIMS] = {0};
        if (maxt->ndim == 3) {
            int64_t t = maxt->shape[0];
            int64_t nb = lg_none(cu_q) ? 0 : cu_q->shape[0] - 1;
            for (int64_t b = 0; b < nb; b++) {
                int64_t len = (int64_t)cu[b + 1] - cu[b];
                int64_t start = cup ? cup[b] : cu[b];
                int64_t end = start + len < t ? start + len : t;
                for (int64_t tok = start < 0 ? 0 : start; tok < end; tok++) {
                    idx[0] = tok, idx[1] = n, idx[2] = 0;
                    float x = base[fattn_tensor_offset(maxt, idx)];
                    if (isnan(x) || x > m)
                        m = isnan(m) ? m : x;
                }
            }
        } else {
            int64_t nb = maxt->shape[0], sq = maxt->shape[2];
            for (int64_t b = 0; b < nb; b++) {
                int64_t len = sq;
                if (padding && cu)
                    len = (int64_t)cu[b + 1] - cu[b];
                for (int64_t i = 0; i < len && i < sq; i++) {
                    idx[0] = b, idx[1] = n, idx[2] = i, idx[3] = 0;
                    float x = base[fattn_tensor_offset(maxt, idx)];
                    if (isnan(x) || x > m)
                        m = isnan(m) ? m : x;
                }
            }
        }
        fattn_store_f32(res->data, odt, n, m);
    }
    return FATTN_OK;
}

/* independent witness: mirrors lib/split/split.c sp_support_engine, do not
 * unify. The support table's engine bit; test variants of the CPU engine
 * check as the CPU engine. */
static unsigned lg_support_engine(const fattn_engine *e)
{
    return fattn_engine_support_bit(e);
}

/* ------------------------------------------------------------------------ */
/* ctx                                                                      */
/* ------------------------------------------------------------------------ */

fattn_status fattn_legacy_ctx_init(fattn_legacy_ctx **out, fattn_engine *engine)
{
    if (!out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_legacy_ctx_init: out is NULL");
    *out = NULL;
    if (!engine)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_legacy_ctx_init: engine is NULL");
    fattn_legacy_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return fattn_error(FATTN_E_NOMEM, "legacy: cannot allocate a ctx");
    ctx->engine = engine;
    for (int i = 0; i < FATTN_LEGACY_SAVED_MAX; i++)
        ctx->tensor_objects[i] = fattn_tensor_empty();
    ctx->own_out = ctx->own_max_logit = ctx->own_stats = ctx->own_max =
        ctx->own_rng_state = fattn_tensor_empty();
    for (int i = 0; i < 3; i++)
        ctx->own_grad_storage[i] = fattn_tensor_empty();
    ctx->own_d_bias = ctx->own_d_softmax_offset = fattn_tensor_empty();
    ctx->qkv_layout = ctx->dqkv_layout = FATTN_LAYOUT_NOT_SET;
    ctx->o_format = ctx->qkv_scale_inv_format = FATTN_FORMAT_NOT_SET;
    for (int i = 0; i < 3; i++)
        ctx->own_qkv_fp8[i] = ctx->own_grad_fp8[i] = fattn_tensor_empty();
    ctx->own_out_fp8 = ctx->own_out_f16 = ctx->own_d_out_fp8 = fattn_tensor_empty();
    for (int i = 0; i < 3; i++) {
        ctx->own_qkv_f16[i] = fattn_tensor_empty();
        ctx->in_scale_inv[i] = NAN;
    }
    ctx->own_d_out_f16 = fattn_tensor_empty();
    ctx->in_nominal_dtype = FATTN_DTYPE_INVALID;
    ctx->d_out_scale_inv = ctx->grads_scale_inv = NAN;
    ctx->env_fp8_dpa_bwd = ctx->env_fp8cs_o_in_f16 = true;
    for (int i = 0; i < FATTN_LEGACY_SAVED_MAX; i++)
        ctx->tensor_scale_inv[i] = NAN;
    ctx->out_scale_inv = NAN;
    *out = ctx;
    return FATTN_OK;
}

void fattn_legacy_ctx_free(fattn_legacy_ctx *ctx)
{
    if (!ctx)
        return;
    lg_free_forward_buffers(ctx);
    lg_free_backward_buffers(ctx);
    free(ctx);
}

/* ------------------------------------------------------------------------ */
/* forward                                                                  */
/* ------------------------------------------------------------------------ */



/* The arguments TE would fail on before any kernel runs. */
static fattn_status lg_forward_check_args(const lg_forward_locals *f)
{
    if (lg_none(f->q) || lg_none(f->k) || lg_none(f->v))
        return fattn_error(FATTN_E_INVALID_ARG, "legacy forward: q, k and v are required");
    if (!f->window_size)
        return fattn_error(FATTN_E_INVALID_ARG, "legacy forward: window_size is required");
    if (f->fp8 && !f->quantizers)
        return fattn_error(FATTN_E_INVALID_ARG, "legacy forward: fp8 needs the quantizers "
                           "(get_attention_quantizers, backends.py:1470-1472)");
    bool q8 = fattn_dtype_is_fp8(f->q->dtype);
    if (fattn_dtype_is_fp8(f->k->dtype) != q8 || fattn_dtype_is_fp8(f->v->dtype) != q8)
        return fattn_error(FATTN_E_INVALID_ARG, "legacy forward: q, k, v must be of the same "
                           "class, e.g. torch.Tensor or QuantizedTensorStorage "
                           "(backends.py:1459-1461 asserts)");
    if (q8 && !f->fp8)
        return fattn_error(FATTN_E_NOT_MODELLED, "legacy forward: FP8 q, k, v with fp8 False "
                           "(the f16 path handed Float8Tensors) is not modelled by fattn");
    if (q8 && f->ctx->in_nominal_dtype != FATTN_DTYPE_FLOAT16 &&
        f->ctx->in_nominal_dtype != FATTN_DTYPE_BFLOAT16)
        return fattn_error(FATTN_E_INVALID_ARG, "legacy forward: FP8 q, k, v need their "
                           "nominal dtype (ctx->in_nominal_dtype float16 or bfloat16)");
    for (int i = 0; q8 && i < 3; i++)
        if (!(f->ctx->in_scale_inv[i] > 0.0f) || isinf(f->ctx->in_scale_inv[i]))
            return fattn_error(FATTN_E_INVALID_ARG, "legacy forward: FP8 %c needs its "
                               "_scale_inv (ctx->in_scale_inv[%d], finite and > 0)", "qkv"[i], i);
    if (!f->rng_gen)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "legacy forward: rng_gen is None; fattn has no process-wide "
                           "default generator, pass one per case run");
    if (f->bottom_right_diagonal < -1 || f->bottom_right_diagonal > 1)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "legacy forward: bottom_right_diagonal %d (use -1, 0 or 1)",
                           f->bottom_right_diagonal);
    return FATTN_OK;
}

/* The support table first (its own witness of TE's validity), then
 * fused_attn.py:346-354: a backend other than the f16 one raises. */
static fattn_status lg_forward_support(lg_forward_locals *f)
{
    f->qf = fattn_layout_q_format(f->qkv_layout);
    f->kvf = fattn_layout_kv_format(f->qkv_layout);
    if (f->qf == FATTN_FORMAT_NOT_SET || f->kvf == FATTN_FORMAT_NOT_SET)
        return fattn_error(FATTN_E_LAYOUT, "legacy forward: qkv_layout %d is not a layout",
                           (int)f->qkv_layout);
    fattn_support_query *sq = &f->sq;
    fattn_support_query_init(sq);
    sq->q_dtype = f->nominal; /* a Float8Tensor reports its nominal dtype (fused_attn.py:340) */
    sq->kv_dtype = f->is_input_fp8 ? f->nominal : f->k->dtype;
    sq->has_bias_tensor = !lg_none(f->attn_bias);
    sq->bias_dtype = sq->has_bias_tensor ? f->attn_bias->dtype : FATTN_DTYPE_INVALID;
    sq->layout = f->qkv_layout;
    sq->bias_type = f->attn_bias_type;
    sq->mask_type = f->attn_mask_type;
    sq->softmax_type = f->softmax_type;
    sq->dropout = f->dropout_p;
    sq->h = f->q->shape[lg_heads_dim(f->qf)];
    sq->hg = f->k->shape[lg_heads_dim(f->kvf)];
    sq->sq = f->max_seqlen_q;
    sq->skv = f->max_seqlen_kv;
    sq->d_qk = f->q->shape[f->q->ndim - 1];
    sq->d_v = f->v->shape[f->v->ndim - 1];
    sq->window_left = f->window_size[0];
    sq->window_right = f->window_size[1];
    sq->is_training = f->is_training;
    sq->return_max_logit = f->return_max_logit;
    sq->engine_cudnn_version = fattn_engine_cudnn_version(f->ctx->engine);
    sq->engine_sm = fattn_engine_sm(f->ctx->engine);
    sq->fp8 = f->fp8;
    sq->fp8_recipe = (f->fp8 && f->quantizers) ? f->quantizers->QKV.kind : FATTN_FP8_RECIPE_NONE;
    sq->cpu_offload = f->ctx->cpu_offload;
    sq->direct_call = f->ctx->direct_call;
    fattn_status st = fattn_support_check(sq, lg_support_engine(f->ctx->engine), NULL);
    if (st != FATTN_OK)
        return st;
    if (f->fp8)
        return FATTN_OK; /* backends.py:1488: the FP8 branch sets the backend itself */
    if (f->fused_attention_backend != FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN)
        return fattn_error(FATTN_E_INVALID_CASE,
                           "legacy forward: fused_attention_backend %s cannot run the f16 "
                           "path (TE transformer_engine/pytorch/cpp_extensions/fused_attn.py:348)",
                           fattn_te_backend_name(f->fused_attention_backend)
                               ? fattn_te_backend_name(f->fused_attention_backend)
                               : "?");
    return FATTN_OK;
}

/* independent witness: mirrors lib/split/split.c sp_forward_impl_rng_state,
 * do not unify. attention.cpp:231-236: rng_state = (seed, offset), then the
 * generator advances by 16 (philox_cuda_state(16), a multiple of 4). */
static fattn_status lg_forward_rng_state(lg_forward_locals *f)
{
    fattn_legacy_ctx *ctx = f->ctx;
    int64_t two = 2;
    fattn_status st = fattn_tensor_alloc(&ctx->own_rng_state, FATTN_DTYPE_INT64, 1, &two);
    if (st != FATTN_OK)
        return st;
    ((int64_t *)ctx->own_rng_state.data)[0] = (int64_t)f->rng_gen->seed;
    ((int64_t *)ctx->own_rng_state.data)[1] = (int64_t)f->rng_gen->offset;
    uint64_t incr = FATTN_RNG_F16_INCREMENT;
    if (f->fp8) {
        /* fused_attn.py:356-364: ceil(sq^2/128) on the FP8 backend, rounded
         * up to a multiple of 4 by philox_cuda_state (docs/fp8-branches.md F4) */
        uint64_t n = ((uint64_t)f->max_seqlen_q * (uint64_t)f->max_seqlen_q + 127u) / 128u;
        incr = (n + 3u) / 4u * 4u;
    }
    f->rng_gen->offset += incr;
    return FATTN_OK;
}

/* O: Q's shape with V's head dim, zeroed for THD (attention.cpp:173-176). */
static fattn_status lg_forward_alloc_out(lg_forward_locals *f)
{
    const fattn_tensor *q = f->q;
    int64_t oshape[FATTN_MAX_DIMS];
    for (int i = 0; i < q->ndim; i++)
        oshape[i] = q->shape[i];
    oshape[q->ndim - 1] = f->sq.d_v;
    fattn_status st = fattn__legacy_alloc_out(f->ctx, &f->ctx->own_out, f->nominal, q->ndim, oshape);
    if (st != FATTN_OK)
        return st;
    if (f->qf == FATTN_FORMAT_THD)
        fattn_tensor_fill_bits(&f->ctx->own_out, 0);
    return FATTN_OK;
}

/* ctx.save_for_backward (backends.py:1677-1687), f16 path: the fp8 tensors
 * None, then q, k, v, out, the cu_seqlens and the aux list, from which
 * fused_attn.py:402-441 took Max out (it became max_logit). */
static void lg_forward_save_for_backward(lg_forward_locals *f)
{
    fattn_legacy_ctx *ctx = f->ctx;
    /* fattn__legacy_forward_fused_attn_fwd (legacy_calls.c) checked the engine's list */
    assert(f->aux.n >= 2 && f->aux.n <= FATTN_AUX_MAX);
    fattn_tensor *s = ctx->tensor_objects;
    for (int i = 0; i < FATTN_LEGACY_SAVED_MAX; i++)
        s[i] = fattn_tensor_empty();
    s[FATTN_LEGACY_SAVED_Q] = *f->q;
    s[FATTN_LEGACY_SAVED_K] = *f->k;
    s[FATTN_LEGACY_SAVED_V] = *f->v;
    s[FATTN_LEGACY_SAVED_OUT] = ctx->own_out;
    s[FATTN_LEGACY_SAVED_CU_SEQLENS_Q] = lg_opt(f->cu_seqlens_q);
    s[FATTN_LEGACY_SAVED_CU_SEQLENS_KV] = lg_opt(f->cu_seqlens_kv);
    s[FATTN_LEGACY_SAVED_CU_SEQLENS_Q_PADDED] = lg_opt(f->cu_seqlens_q_padded);
    s[FATTN_LEGACY_SAVED_CU_SEQLENS_KV_PADDED] = lg_opt(f->cu_seqlens_kv_padded);
    int n = FATTN_LEGACY_SAVED_AUX;
    for (int i = 0; i < f->aux.n; i++) {
        if (f->return_max_logit && i == LG_PACK_MAX)
            continue;
        s[n++] = f->aux.t[i];
    }
    assert(n <= FATTN_LEGACY_SAVED_MAX);
    ctx->n_saved = n;
}

/* backends.py:1657-1748: the 33 attributes (f16 path), tensor_objects
 * aside (lg_forward_save_for_backward). */
static void lg_forward_ctx_attrs(lg_forward_locals *f)
{
    fattn_legacy_ctx *ctx = f->ctx;
    /* backends.py:1448-1450: the autocast recipe (DelayedScaling without
     * one), or fp8_meta["local_recipes"][0] */
    const fattn_fp8_meta *m = f->fp8_meta;
    ctx->fp8_recipe = FATTN_FP8_RECIPE_DELAYED;
    if (m && m->autocast_recipe != FATTN_FP8_RECIPE_NONE)
        ctx->fp8_recipe = m->autocast_recipe;
    if (m && m->n_local_recipes > 0)
        ctx->fp8_recipe = m->local_recipes[0];
    ctx->fp8 = false; /* the FP8 branch sets is_bwd_fp8 after this */
    ctx->nominal_dtype = f->nominal;
    ctx->is_input_fp8 = false;
    ctx->is_output_fp8 = f->fp8_output;
    ctx->bf16_backward = f->bf16_backward;
    ctx->fp8_meta = f->fp8_meta;
    ctx->layer_number = f->layer_number;
    ctx->QKV_quantizer = ctx->O_quantizer = ctx->dQKV_quantizer = ctx->dO_quantizer =
        ctx->dP_quantizer = ctx->S_quantizer = NULL;
    ctx->qkv_type = NULL;
    ctx->max_seqlen_q = f->max_seqlen_q;
    ctx->max_seqlen_kv = f->max_seqlen_kv;
    ctx->attn_scale = f->attn_scale; /* as given, None too: backward resolves it */
    ctx->dropout_p = f->dropout_p;
    ctx->fast_zero_fill = f->fast_zero_fill;
    ctx->qkv_layout = f->qkv_layout;
    ctx->o_format = f->qf;
    ctx->qkv_scale_inv_format = FATTN_FORMAT_NOT_SET;
    ctx->dqkv_layout = f->qkv_layout; /* original_qkv_layout */
    ctx->attn_bias_type = f->attn_bias_type;
    ctx->attn_mask_type = f->attn_mask_type;
    ctx->softmax_type = f->softmax_type;
    ctx->window_size[0] = f->window_size[0];
    ctx->window_size[1] = f->window_size[1];
    ctx->bottom_right_diagonal = f->bottom_right_diagonal; /* likewise */
    ctx->fused_attention_backend = FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    ctx->use_FAv2_bwd = f->use_FAv2_bwd;
    ctx->deterministic = f->deterministic;
}

fattn_status fattn_legacy_forward(
    fattn_legacy_ctx *ctx, bool is_training, int64_t max_seqlen_q, int64_t max_seqlen_kv,
    const fattn_tensor *cu_seqlens_q, const fattn_tensor *cu_seqlens_kv,
    const fattn_tensor *cu_seqlens_q_padded, const fattn_tensor *cu_seqlens_kv_padded,
    const fattn_tensor *page_table_k, const fattn_tensor *page_table_v,
    const fattn_tensor *q, const fattn_tensor *k, const fattn_tensor *v,
    const fattn_tensor *attn_bias, float attn_scale, float dropout_p, bool fast_zero_fill,
    fattn_qkv_layout qkv_layout, fattn_bias_type attn_bias_type,
    fattn_mask_type attn_mask_type, fattn_softmax_type softmax_type,
    const int64_t window_size[2], int bottom_right_diagonal, fattn_rng_gen *rng_gen,
    fattn_te_backend fused_attention_backend, bool use_FAv2_bwd, bool fp8,
    const fattn_fp8_meta *fp8_meta, fattn_fp8_quantizers *quantizers, bool deterministic,
    const fattn_tensor *softmax_offset, bool fp8_output, bool bf16_backward,
    int64_t layer_number, bool return_max_logit, const fattn_tensor *packed_qkv,
    const fattn_tensor *packed_kv, fattn_tensor *out, fattn_tensor *max_logit)
{
    (void)packed_qkv; /* only FP8 combine_and_quantize reads them */
    (void)packed_kv;
    if (out)
        *out = fattn_tensor_empty();
    if (max_logit)
        *max_logit = fattn_tensor_empty();
    if (!ctx || !out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_legacy_forward: NULL ctx or out");
    lg_forward_locals f = {
        .ctx = ctx, .is_training = is_training, .return_max_logit = return_max_logit,
        .max_seqlen_q = max_seqlen_q, .max_seqlen_kv = max_seqlen_kv,
        .cu_seqlens_q = cu_seqlens_q, .cu_seqlens_kv = cu_seqlens_kv,
        .cu_seqlens_q_padded = cu_seqlens_q_padded, .cu_seqlens_kv_padded = cu_seqlens_kv_padded,
        .page_table_k = page_table_k, .page_table_v = page_table_v,
        .q = q, .k = k, .v = v, .attn_bias = attn_bias, .softmax_offset = softmax_offset,
        .attn_scale = attn_scale, .dropout_p = dropout_p, .qkv_layout = qkv_layout,
        .attn_bias_type = attn_bias_type, .attn_mask_type = attn_mask_type,
        .softmax_type = softmax_type, .window_size = window_size,
        .bottom_right_diagonal = bottom_right_diagonal, .rng_gen = rng_gen,
        .fused_attention_backend = fused_attention_backend, .fast_zero_fill = fast_zero_fill,
        .use_FAv2_bwd = use_FAv2_bwd, .deterministic = deterministic, .fp8 = fp8,
        .fp8_output = fp8_output, .bf16_backward = bf16_backward, .fp8_meta = fp8_meta,
        .layer_number = layer_number, .quantizers = quantizers, .eq = q, .ek = k, .ev = v};
    fattn_status st = lg_forward_check_args(&f);
    if (st != FATTN_OK)
        return st;
    /* backends.py:1462, 1483: a Float8Tensor q reports its nominal dtype */
    f.is_input_fp8 = fattn_dtype_is_fp8(q->dtype);
    f.nominal = f.is_input_fp8 ? ctx->in_nominal_dtype : q->dtype;
    st = lg_forward_support(&f);
    if (st != FATTN_OK)
        return st;

    /* A new forward replaces the previous one. */
    lg_free_forward_buffers(ctx);
    lg_free_backward_buffers(ctx);
    ctx->has_forward = false;
    ctx->tensor_objects_consumed = false;
    ctx->n_saved = 0;

    /* fused_attn.py:325-333: the defaults of None. */
    f.scale = isnan(attn_scale) ? (float)(1.0 / sqrt((double)f.sq.d_qk)) : attn_scale;
    f.brd = bottom_right_diagonal < 0 ? fattn_bottom_right_default_fwd(attn_mask_type)
                                      : bottom_right_diagonal != 0;

    st = lg_forward_rng_state(&f);
    if (st != FATTN_OK)
        goto out;
    st = lg_forward_alloc_out(&f);
    if (st != FATTN_OK)
        goto out;
    st = fp8 ? fattn__legacy_fp8_forward(&f) : fattn__legacy_forward_fused_attn_fwd(&f);
    if (st != FATTN_OK)
        goto out;
    if (return_max_logit) {
        st = lg_max_logit(&ctx->own_max, cu_seqlens_q, cu_seqlens_q_padded,
                          fattn_mask_has_padding(attn_mask_type), f.sq.h, q->dtype,
                          &ctx->own_max_logit);
        if (st != FATTN_OK)
            goto out;
    }
    lg_forward_save_for_backward(&f);
    lg_forward_ctx_attrs(&f);
    ctx->out_scale_inv = NAN;
    for (int i = 0; i < FATTN_LEGACY_SAVED_MAX; i++)
        ctx->tensor_scale_inv[i] = NAN;
    f.out_ret = ctx->own_out;
    if (fp8)
        fattn__legacy_fp8_save_and_ctx(&f);
    ctx->has_forward = true;

    *out = f.out_ret;
    if (max_logit)
        *max_logit = return_max_logit ? ctx->own_max_logit : fattn_tensor_empty();
out:
    if (st != FATTN_OK)
        lg_free_forward_buffers(ctx);
    return st;
}

/* ------------------------------------------------------------------------ */
/* backward                                                                 */
/* ------------------------------------------------------------------------ */

/* attention.cpp:398-452: dQ/dK/dV as views into one buffer per group of the
 * dqkv layout, then attention.cpp:492-498: THD grads are zero-filled (f16
 * path). q and k give the shapes (k for a packed K/V). */
static fattn_status lg_backward_alloc_dqkv(fattn_legacy_ctx *ctx, const fattn_tensor *q,
                                           const fattn_tensor *k, const fattn_tensor *v,
                                           fattn_tensor *dq, fattn_tensor *dk, fattn_tensor *dv)
{
    fattn_tensor views[3];
    fattn_dtype dt = ctx->nominal_dtype;
    fattn_status st = FATTN_OK;
    switch (fattn_layout_group(ctx->dqkv_layout)) {
    case FATTN_LAYOUT_GROUP_3HD:
    case FATTN_LAYOUT_GROUP_H3D:
        st = fattn__legacy_alloc_packed(ctx, &ctx->own_grad_storage[0], dt, q, 3,
                             fattn_layout_group(ctx->dqkv_layout) == FATTN_LAYOUT_GROUP_3HD
                                 ? q->ndim - 2
                                 : q->ndim - 1,
                             views);
        if (st != FATTN_OK)
            return st;
        *dq = views[0], *dk = views[1], *dv = views[2];
        break;
    case FATTN_LAYOUT_GROUP_HD_2HD:
    case FATTN_LAYOUT_GROUP_HD_H2D:
        st = fattn__legacy_alloc_packed(ctx, &ctx->own_grad_storage[0], dt, q, 1, 0, views);
        if (st != FATTN_OK)
            return st;
        *dq = views[0];
        st = fattn__legacy_alloc_packed(ctx, &ctx->own_grad_storage[1], dt, k, 2,
                             fattn_layout_group(ctx->dqkv_layout) ==
                                     FATTN_LAYOUT_GROUP_HD_2HD
                                 ? k->ndim - 2
                                 : k->ndim - 1,
                             views);
        if (st != FATTN_OK)
            return st;
        *dk = views[0], *dv = views[1];
        break;
    case FATTN_LAYOUT_GROUP_HD_HD_HD:
    case FATTN_LAYOUT_GROUP_SD_SD_SD:
        st = fattn__legacy_alloc_packed(ctx, &ctx->own_grad_storage[0], dt, q, 1, 0, views);
        if (st != FATTN_OK)
            return st;
        *dq = views[0];
        st = fattn__legacy_alloc_packed(ctx, &ctx->own_grad_storage[1], dt, k, 1, 0, views);
        if (st != FATTN_OK)
            return st;
        *dk = views[0];
        st = fattn__legacy_alloc_packed(ctx, &ctx->own_grad_storage[2], dt, v, 1, 0, views);
        if (st != FATTN_OK)
            return st;
        *dv = views[0];
        break;
    default:
        return fattn_error(FATTN_E_LAYOUT, "legacy backward: dqkv_layout %s not supported",
                           fattn_layout_name(ctx->dqkv_layout)
                               ? fattn_layout_name(ctx->dqkv_layout)
                               : "?");
    }
    if (fattn_layout_q_format(ctx->dqkv_layout) == FATTN_FORMAT_THD)
        fattn_tensor_fill_bits(dq, 0);
    if (fattn_layout_kv_format(ctx->dqkv_layout) == FATTN_FORMAT_THD) {
        fattn_tensor_fill_bits(dk, 0);
        fattn_tensor_fill_bits(dv, 0);
    }
    return FATTN_OK;
}

/* attention.cpp:543-559: dBias shaped like the LAST aux entry, zeroed for a
 * THD layout. The support table refuses bias + sink (the last entry would
 * be the offset), so here the last entry is the bias. attention.cpp:561-568:
 * dSoftmaxOffset float32 [1,h,1,1]. Either stays empty when not needed. */
static fattn_status lg_backward_alloc_dbias(fattn_legacy_ctx *ctx, const fattn_aux_pack *aux,
                                            const fattn_tensor *q, fattn_tensor *dbias,
                                            fattn_tensor *doff)
{
    fattn_dtype dt = ctx->nominal_dtype;
    assert(aux->n >= 2 && aux->n <= FATTN_AUX_MAX); /* checked by fattn_legacy_backward */
    if (ctx->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
        ctx->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS) {
        const fattn_tensor *last = &aux->t[aux->n - 1];
        fattn_status st = fattn__legacy_alloc_out(ctx, &ctx->own_d_bias, dt, last->ndim, last->shape);
        if (st != FATTN_OK)
            return st;
        if (fattn_layout_format(ctx->qkv_layout) == FATTN_FORMAT_THD)
            fattn_tensor_fill_bits(&ctx->own_d_bias, 0);
        *dbias = ctx->own_d_bias;
    }
    if (ctx->softmax_type != FATTN_SOFTMAX_VANILLA) {
        int64_t os[4] = {1, q->shape[lg_heads_dim(fattn_layout_q_format(ctx->qkv_layout))], 1, 1};
        fattn_status st = fattn__legacy_alloc_out(ctx, &ctx->own_d_softmax_offset, FATTN_DTYPE_FLOAT32, 4,
                                       os);
        if (st != FATTN_OK)
            return st;
        *doff = ctx->own_d_softmax_offset;
    }
    return FATTN_OK;
}

/* The f16 fused_attn_bwd call. */
static fattn_status lg_backward_fused_attn_bwd(fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                               const fattn_aux_pack *aux,
                                               const fattn_tensor g[FATTN_LEGACY_NGRADS])
{
    fattn_bwd_params p;
    fattn__legacy_backward_params(ctx, d_out, aux, g, &p);
    return fattn_engine_bwd(ctx->engine, &p);
}

fattn_status fattn_legacy_backward(fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                   fattn_tensor grads[FATTN_LEGACY_NGRADS])
{
    if (!ctx || !grads)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_legacy_backward: NULL ctx or grads");
    for (int i = 0; i < FATTN_LEGACY_NGRADS; i++)
        grads[i] = fattn_tensor_empty();
    if (!ctx->has_forward)
        return fattn_error(FATTN_E_STATE, "legacy backward: no forward saved in this ctx");
    /* TE 2.19.0 backends.py:1790 restore_from_func_ctx, quantized_tensor.py:344-345: the
     * saved tensors can be restored once; autograd's retain_graph lets a caller try twice. */
    if (ctx->tensor_objects_consumed)
        return fattn_error(FATTN_E_STATE,
                           "legacy backward: ctx must have .tensor_objects to restore saved "
                           "tensors (a second backward on one ctx; TE 2.19.0 "
                           "quantized_tensor.py:345 raises AttributeError)");
    if (lg_none(d_out))
        return fattn_error(FATTN_E_INVALID_ARG, "legacy backward: d_out is required");
    if (fattn_dtype_is_fp8(d_out->dtype) &&
        (!(ctx->d_out_scale_inv > 0.0f) || isinf(ctx->d_out_scale_inv)))
        return fattn_error(FATTN_E_INVALID_ARG, "legacy backward: an FP8 d_out needs its "
                           "_scale_inv (ctx->d_out_scale_inv, finite and > 0)");
    if (ctx->use_FAv2_bwd)
        return fattn_error(FATTN_E_UNSUPPORTED,
                           "legacy backward: use_FAv2_bwd (flash-attn v2 backward, "
                           "TE 2.19.0 backends.py:1797) is not available in fattn");

    /* backends.py:1776-1792: unpack the saved list in its order. */
    const fattn_tensor *s = ctx->tensor_objects;
    ctx->grads_scale_inv = NAN;
    fattn_aux_pack aux;
    memset(&aux, 0, sizeof aux);
    aux.n = ctx->n_saved - FATTN_LEGACY_SAVED_AUX;
    if (aux.n < 2 || aux.n > FATTN_AUX_MAX)
        return fattn_error(FATTN_E_STATE, "legacy backward: aux list has %d entries", aux.n);
    for (int i = 0; i < aux.n; i++)
        aux.t[i] = s[FATTN_LEGACY_SAVED_AUX + i];
    ctx->tensor_objects_consumed = true; /* quantized_tensor.py:350, even if backward fails */

    lg_free_backward_buffers(ctx);
    /* The grads of the 36-tuple, built in place (backends.py:2001-2044). */
    fattn_tensor g[FATTN_LEGACY_NGRADS];
    for (int i = 0; i < FATTN_LEGACY_NGRADS; i++)
        g[i] = fattn_tensor_empty();
    int qkv = ctx->fp8 ? FATTN_LEGACY_SAVED_Q_FP8 : FATTN_LEGACY_SAVED_Q; /* shapes of q, k, v */
    if (lg_none(&s[qkv]) || lg_none(&s[qkv + 1]) || lg_none(&s[qkv + 2]))
        return fattn_error(FATTN_E_STATE, "legacy backward: the saved %s are None (ctx.fp8 "
                           "is %s)", ctx->fp8 ? "q_fp8, k_fp8, v_fp8" : "q, k, v",
                           ctx->fp8 ? "True" : "False");
    fattn_status st = lg_backward_alloc_dqkv(ctx, &s[qkv], &s[qkv + 1], &s[qkv + 2],
                                             &g[FATTN_LEGACY_GRAD_DQ], &g[FATTN_LEGACY_GRAD_DK],
                                             &g[FATTN_LEGACY_GRAD_DV]);
    if (st != FATTN_OK)
        goto out;
    st = lg_backward_alloc_dbias(ctx, &aux, &s[FATTN_LEGACY_SAVED_Q],
                                 &g[FATTN_LEGACY_GRAD_DBIAS],
                                 &g[FATTN_LEGACY_GRAD_DSOFTMAX_OFFSET]);
    if (st != FATTN_OK)
        goto out;
    const fattn_tensor *d_o = d_out;
    if (!ctx->fp8) {
        st = fattn__legacy_fp8_d_out_f16(ctx, d_out, &d_o);
        if (st != FATTN_OK)
            goto out;
    }
    st = ctx->fp8 ? fattn__legacy_fp8_backward(ctx, d_out, &aux, g)
                  : lg_backward_fused_attn_bwd(ctx, d_o, &aux, g);
    if (st != FATTN_OK)
        goto out;

    /* backends.py:2001-2006 and 2007-2044: the 36-tuple. */
    for (int i = 0; i < FATTN_LEGACY_NGRADS; i++)
        grads[i] = g[i];
out:
    if (st != FATTN_OK)
        lg_free_backward_buffers(ctx);
    return st;
}
