/* The legacy front end (fattn/legacy.h): TE's FusedAttnFunc before the
 * refactor — 36 positional inputs, 33 loose ctx attributes, the saved list
 * with the aux pack as a list, 36 grads.
 *
 * Uses only the engine API and core types. The split front end
 * (lib/split/) implements the same rules separately; code that looks alike
 * is marked "independent witness" and must not be unified.
 *
 * TE lines cited as file:line are at TE commit d0067d0:
 *   backends.py    transformer_engine/pytorch/attention/dot_product_attention/backends.py
 *   fused_attn.py  transformer_engine/pytorch/cpp_extensions/fused_attn.py
 *   attention.cpp  transformer_engine/pytorch/csrc/extensions/attention.cpp
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fattn/dtype.h"
#include "fattn/legacy.h"
#include "fattn/support.h"

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
}

static void lg_free_backward_buffers(fattn_legacy_ctx *ctx)
{
    for (int i = 0; i < 3; i++)
        fattn_tensor_free(&ctx->own_grad_storage[i]);
    fattn_tensor_free(&ctx->own_d_bias);
    fattn_tensor_free(&ctx->own_d_softmax_offset);
}

/* Allocate a poisoned output (the harness's poison, 0 = leave as is). */
static fattn_status lg_alloc_out(fattn_legacy_ctx *ctx, fattn_tensor *t, fattn_dtype dt,
                                 int ndim, const int64_t *shape)
{
    fattn_status st = fattn_tensor_alloc(t, dt, ndim, shape);
    if (st == FATTN_OK && ctx->poison != 0)
        fattn_tensor_fill_bits(t, ctx->poison);
    return st;
}

/* independent witness: mirrors lib/split/split.c sp_alloc_packed, do not
 * unify. One buffer holding `npack` tensors shaped like `like`, interleaved
 * by a pack dim inserted at position `at` (ndim-2: "3hd"/"2hd"; ndim-1:
 * "h3d"/"h2d"); views[m] is member m. As attention.cpp:398-452 builds dQKV. */
static fattn_status lg_alloc_packed(fattn_legacy_ctx *ctx, fattn_tensor *storage,
                                    fattn_dtype dt, const fattn_tensor *like, int npack,
                                    int at, fattn_tensor *views)
{
    int nd = like->ndim;
    if (npack == 1) {
        fattn_status st = lg_alloc_out(ctx, storage, dt, nd, like->shape);
        if (st == FATTN_OK)
            views[0] = *storage;
        return st;
    }
    int64_t shape[FATTN_MAX_DIMS];
    if (nd + 1 > FATTN_MAX_DIMS)
        return fattn_error(FATTN_E_SHAPE, "legacy: %d dims cannot be packed", nd);
    for (int a = 0, s = 0; a < nd + 1; a++)
        shape[a] = a == at ? npack : like->shape[s++];
    fattn_status st = lg_alloc_out(ctx, storage, dt, nd + 1, shape);
    if (st != FATTN_OK)
        return st;
    size_t esz = fattn_dtype_size(dt);
    for (int m = 0; m < npack; m++) {
        fattn_tensor w = fattn_tensor_empty();
        w.dtype = dt;
        w.device = storage->device;
        w.ndim = nd;
        for (int a = 0, s = 0; a < nd + 1; a++) {
            if (a == at)
                continue;
            w.shape[s] = storage->shape[a];
            w.strides[s] = storage->strides[a];
            s++;
        }
        w.data = (char *)storage->data + (size_t)m * (size_t)storage->strides[at] * esz;
        views[m] = w;
    }
    return FATTN_OK;
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
 * unify. The support table knows "cpu" and "cudnn"; test variants of the
 * CPU engine check as "cpu". */
static const char *lg_support_engine(const fattn_engine *e)
{
    return fattn_engine_support_column(e);
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
    const void *fp8_meta, const void *quantizers, bool deterministic,
    const fattn_tensor *softmax_offset, bool fp8_output, bool bf16_backward,
    int64_t layer_number, bool return_max_logit, const fattn_tensor *packed_qkv,
    const fattn_tensor *packed_kv, fattn_tensor *out, fattn_tensor *max_logit)
{
    (void)quantizers; /* f16 path: every quantizer is None */
    (void)packed_qkv; /* only FP8 combine_and_quantize reads them */
    (void)packed_kv;
    if (out)
        *out = fattn_tensor_empty();
    if (max_logit)
        *max_logit = fattn_tensor_empty();
    if (!ctx || !out)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_legacy_forward: NULL ctx or out");
    if (lg_none(q) || lg_none(k) || lg_none(v))
        return fattn_error(FATTN_E_INVALID_ARG, "legacy forward: q, k and v are required");
    if (!window_size)
        return fattn_error(FATTN_E_INVALID_ARG, "legacy forward: window_size is required");
    if (!rng_gen)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "legacy forward: rng_gen is None; fattn has no process-wide "
                           "default generator, pass one per case run");
    if (bottom_right_diagonal < -1 || bottom_right_diagonal > 1)
        return fattn_error(FATTN_E_INVALID_ARG,
                           "legacy forward: bottom_right_diagonal %d (use -1, 0 or 1)",
                           bottom_right_diagonal);

    /* The support table first (its own witness of TE's validity). */
    fattn_qkv_format qf = fattn_layout_q_format(qkv_layout);
    fattn_qkv_format kvf = fattn_layout_kv_format(qkv_layout);
    if (qf == FATTN_FORMAT_NOT_SET || kvf == FATTN_FORMAT_NOT_SET)
        return fattn_error(FATTN_E_LAYOUT, "legacy forward: qkv_layout %d is not a layout",
                           (int)qkv_layout);
    fattn_support_query sq;
    fattn_support_query_init(&sq);
    sq.q_dtype = q->dtype;
    sq.kv_dtype = k->dtype;
    sq.has_bias_tensor = !lg_none(attn_bias);
    sq.bias_dtype = sq.has_bias_tensor ? attn_bias->dtype : FATTN_DTYPE_INVALID;
    sq.layout = qkv_layout;
    sq.bias_type = attn_bias_type;
    sq.mask_type = attn_mask_type;
    sq.softmax_type = softmax_type;
    sq.dropout = dropout_p;
    sq.h = q->shape[lg_heads_dim(qf)];
    sq.hg = k->shape[lg_heads_dim(kvf)];
    sq.sq = max_seqlen_q;
    sq.skv = max_seqlen_kv;
    sq.d_qk = q->shape[q->ndim - 1];
    sq.d_v = v->shape[v->ndim - 1];
    sq.window_left = window_size[0];
    sq.window_right = window_size[1];
    sq.is_training = is_training;
    sq.return_max_logit = return_max_logit;
    sq.fp8 = fp8;
    fattn_status st = fattn_support_check(&sq, lg_support_engine(ctx->engine), NULL);
    if (st != FATTN_OK)
        return st;
    /* fused_attn.py:346-354: No_Backend raises. */
    if (fused_attention_backend != FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN)
        return fattn_error(FATTN_E_INVALID_CASE,
                           "legacy forward: fused_attention_backend %s cannot run the f16 "
                           "path (TE transformer_engine/pytorch/cpp_extensions/fused_attn.py:348)",
                           fattn_te_backend_name(fused_attention_backend)
                               ? fattn_te_backend_name(fused_attention_backend)
                               : "?");

    /* A new forward replaces the previous one. */
    lg_free_forward_buffers(ctx);
    lg_free_backward_buffers(ctx);
    ctx->has_forward = false;
    ctx->n_saved = 0;

    /* fused_attn.py:325-333: the defaults of None. */
    float scale = isnan(attn_scale) ? (float)(1.0 / sqrt((double)sq.d_qk)) : attn_scale;
    bool brd = bottom_right_diagonal < 0 ? fattn_bottom_right_default_fwd(attn_mask_type)
                                         : bottom_right_diagonal != 0;

    /* independent witness: mirrors lib/split/split.c sp_draw_rng_state, do not
     * unify. attention.cpp:231-236: rng_state = (seed, offset), then the
     * generator advances by 16 (philox_cuda_state(16), a multiple of 4). */
    int64_t two = 2;
    st = fattn_tensor_alloc(&ctx->own_rng_state, FATTN_DTYPE_INT64, 1, &two);
    if (st != FATTN_OK)
        return st;
    ((int64_t *)ctx->own_rng_state.data)[0] = (int64_t)rng_gen->seed;
    ((int64_t *)ctx->own_rng_state.data)[1] = (int64_t)rng_gen->offset;
    rng_gen->offset += FATTN_RNG_F16_INCREMENT;

    /* O: Q's shape with V's head dim, zeroed for THD (attention.cpp:173-176). */
    int64_t oshape[FATTN_MAX_DIMS];
    for (int i = 0; i < q->ndim; i++)
        oshape[i] = q->shape[i];
    oshape[q->ndim - 1] = sq.d_v;
    st = lg_alloc_out(ctx, &ctx->own_out, q->dtype, q->ndim, oshape);
    if (st != FATTN_OK)
        goto fail;
    if (qf == FATTN_FORMAT_THD)
        fattn_tensor_fill_bits(&ctx->own_out, 0);

    fattn_aux_pack aux;
    memset(&aux, 0, sizeof aux);
    fattn_fwd_params p;
    memset(&p, 0, sizeof p);
    p.q = *q;
    p.k = *k;
    p.v = *v;
    p.bias = lg_opt(attn_bias);
    p.softmax_offset = lg_opt(softmax_offset);
    p.o = ctx->own_out;
    p.aux = &aux;
    p.cu_seqlens_q = lg_opt(cu_seqlens_q);
    p.cu_seqlens_kv = lg_opt(cu_seqlens_kv);
    p.cu_seqlens_q_padded = lg_opt(cu_seqlens_q_padded);
    p.cu_seqlens_kv_padded = lg_opt(cu_seqlens_kv_padded);
    p.page_table_k = lg_opt(page_table_k);
    p.page_table_v = lg_opt(page_table_v);
    p.rng_state = ctx->own_rng_state;
    p.max_seqlen_q = max_seqlen_q;
    p.max_seqlen_kv = max_seqlen_kv;
    p.is_training = is_training;
    p.return_max_logit = return_max_logit;
    p.cuda_graph = false;
    p.attn_scale = scale;
    p.dropout = dropout_p;
    p.qkv_layout = qkv_layout;
    p.o_format = qf;
    p.bias_type = attn_bias_type;
    p.mask_type = attn_mask_type;
    p.softmax_type = softmax_type;
    p.window_size_left = window_size[0];
    p.window_size_right = window_size[1];
    p.bottom_right_diagonal = brd;

    /* Two-call protocol: sizes, allocate Stats (and Max), execute. */
    st = fattn_engine_fwd(ctx->engine, &p);
    if (st != FATTN_OK)
        goto fail;
    if (aux.n < 2 || aux.n > FATTN_AUX_MAX) {
        st = fattn_error(FATTN_E_INTERNAL, "legacy forward: engine sized %d aux entries", aux.n);
        goto fail;
    }
    st = lg_alloc_out(ctx, &ctx->own_stats, aux.t[0].dtype, aux.t[0].ndim, aux.t[0].shape);
    if (st != FATTN_OK)
        goto fail;
    aux.t[0] = ctx->own_stats;
    if (return_max_logit) {
        st = lg_alloc_out(ctx, &ctx->own_max, aux.t[1].dtype, aux.t[1].ndim, aux.t[1].shape);
        if (st != FATTN_OK)
            goto fail;
        aux.t[1] = ctx->own_max;
    }
    st = fattn_engine_fwd(ctx->engine, &p);
    if (st != FATTN_OK)
        goto fail;

    /* fused_attn.py:402-441: Max leaves the list and becomes max_logit. */
    fattn_tensor list[FATTN_AUX_MAX];
    int nlist = 0;
    for (int i = 0; i < aux.n; i++) {
        if (return_max_logit && i == 1)
            continue;
        list[nlist++] = aux.t[i];
    }
    if (return_max_logit) {
        st = lg_max_logit(&ctx->own_max, cu_seqlens_q, cu_seqlens_q_padded,
                          fattn_mask_has_padding(attn_mask_type), sq.h, q->dtype,
                          &ctx->own_max_logit);
        if (st != FATTN_OK)
            goto fail;
    }

    /* backends.py:1655-1665: the saved list, f16 path (fp8 tensors None). */
    fattn_tensor *s = ctx->tensor_objects;
    for (int i = 0; i < FATTN_LEGACY_SAVED_MAX; i++)
        s[i] = fattn_tensor_empty();
    s[4] = *q;
    s[5] = *k;
    s[6] = *v;
    s[7] = ctx->own_out;
    s[8] = lg_opt(cu_seqlens_q);
    s[9] = lg_opt(cu_seqlens_kv);
    s[10] = lg_opt(cu_seqlens_q_padded);
    s[11] = lg_opt(cu_seqlens_kv_padded);
    for (int i = 0; i < nlist; i++)
        s[FATTN_LEGACY_SAVED_AUX + i] = list[i];
    ctx->n_saved = FATTN_LEGACY_SAVED_AUX + nlist;

    /* backends.py:1635-1726: the 33 attributes (f16 path). */
    ctx->fp8_recipe = NULL;
    ctx->fp8 = false; /* is_bwd_fp8 = fp8 and NVTE_FP8_DPA_BWD; fp8 refused above */
    ctx->nominal_dtype = q->dtype;
    ctx->is_input_fp8 = false;
    ctx->is_output_fp8 = fp8_output;
    ctx->bf16_backward = bf16_backward;
    ctx->fp8_meta = fp8_meta;
    ctx->layer_number = layer_number;
    ctx->QKV_quantizer = ctx->O_quantizer = ctx->dQKV_quantizer = ctx->dO_quantizer =
        ctx->dP_quantizer = ctx->S_quantizer = NULL;
    ctx->qkv_type = NULL;
    ctx->max_seqlen_q = max_seqlen_q;
    ctx->max_seqlen_kv = max_seqlen_kv;
    ctx->attn_scale = scale;
    ctx->dropout_p = dropout_p;
    ctx->fast_zero_fill = fast_zero_fill;
    ctx->qkv_layout = qkv_layout;
    ctx->o_format = qf;
    ctx->qkv_scale_inv_format = FATTN_FORMAT_NOT_SET;
    ctx->dqkv_layout = qkv_layout; /* original_qkv_layout */
    ctx->attn_bias_type = attn_bias_type;
    ctx->attn_mask_type = attn_mask_type;
    ctx->softmax_type = softmax_type;
    ctx->window_size[0] = window_size[0];
    ctx->window_size[1] = window_size[1];
    ctx->bottom_right_diagonal = brd;
    ctx->fused_attention_backend = FATTN_TE_BACKEND_F16_ARBITRARY_SEQLEN;
    ctx->use_FAv2_bwd = use_FAv2_bwd;
    ctx->deterministic = deterministic;
    ctx->has_forward = true;

    *out = ctx->own_out;
    if (max_logit)
        *max_logit = return_max_logit ? ctx->own_max_logit : fattn_tensor_empty();
    return FATTN_OK;

fail:
    lg_free_forward_buffers(ctx);
    return st;
}

/* ------------------------------------------------------------------------ */
/* backward                                                                 */
/* ------------------------------------------------------------------------ */

fattn_status fattn_legacy_backward(fattn_legacy_ctx *ctx, const fattn_tensor *d_out,
                                   fattn_tensor grads[FATTN_LEGACY_NGRADS])
{
    if (!ctx || !grads)
        return fattn_error(FATTN_E_INVALID_ARG, "fattn_legacy_backward: NULL ctx or grads");
    for (int i = 0; i < FATTN_LEGACY_NGRADS; i++)
        grads[i] = fattn_tensor_empty();
    if (!ctx->has_forward)
        return fattn_error(FATTN_E_STATE, "legacy backward: no forward saved in this ctx");
    if (lg_none(d_out))
        return fattn_error(FATTN_E_INVALID_ARG, "legacy backward: d_out is required");
    if (ctx->use_FAv2_bwd)
        return fattn_error(FATTN_E_UNSUPPORTED,
                           "legacy backward: use_FAv2_bwd (flash-attn v2 backward, "
                           "backends.py:1775) is not available in fattn");
    if (ctx->fp8)
        return fattn_error(FATTN_E_UNSUPPORTED, "legacy backward: FP8 execution is not "
                                                "implemented");

    /* backends.py:1754-1768: unpack the saved list in its order. */
    const fattn_tensor *s = ctx->tensor_objects;
    fattn_tensor q = s[4], k = s[5], v = s[6], o = s[7];
    fattn_aux_pack aux;
    memset(&aux, 0, sizeof aux);
    aux.n = ctx->n_saved - FATTN_LEGACY_SAVED_AUX;
    if (aux.n < 2 || aux.n > FATTN_AUX_MAX)
        return fattn_error(FATTN_E_STATE, "legacy backward: aux list has %d entries", aux.n);
    for (int i = 0; i < aux.n; i++)
        aux.t[i] = s[FATTN_LEGACY_SAVED_AUX + i];

    lg_free_backward_buffers(ctx);
    fattn_qkv_format dqf = fattn_layout_q_format(ctx->dqkv_layout);
    fattn_qkv_format dkvf = fattn_layout_kv_format(ctx->dqkv_layout);

    /* attention.cpp:398-452: dQ/dK/dV as views into one buffer per group. */
    fattn_tensor dq = fattn_tensor_empty(), dk = fattn_tensor_empty(),
                 dv = fattn_tensor_empty(), views[3];
    fattn_dtype dt = ctx->nominal_dtype;
    fattn_status st = FATTN_OK;
    switch (fattn_layout_group(ctx->dqkv_layout)) {
    case FATTN_LAYOUT_GROUP_3HD:
    case FATTN_LAYOUT_GROUP_H3D:
        st = lg_alloc_packed(ctx, &ctx->own_grad_storage[0], dt, &q, 3,
                             fattn_layout_group(ctx->dqkv_layout) == FATTN_LAYOUT_GROUP_3HD
                                 ? q.ndim - 2
                                 : q.ndim - 1,
                             views);
        if (st == FATTN_OK)
            dq = views[0], dk = views[1], dv = views[2];
        break;
    case FATTN_LAYOUT_GROUP_HD_2HD:
    case FATTN_LAYOUT_GROUP_HD_H2D:
        st = lg_alloc_packed(ctx, &ctx->own_grad_storage[0], dt, &q, 1, 0, views);
        if (st == FATTN_OK) {
            dq = views[0];
            st = lg_alloc_packed(ctx, &ctx->own_grad_storage[1], dt, &k, 2,
                                 fattn_layout_group(ctx->dqkv_layout) ==
                                         FATTN_LAYOUT_GROUP_HD_2HD
                                     ? k.ndim - 2
                                     : k.ndim - 1,
                                 views);
        }
        if (st == FATTN_OK)
            dk = views[0], dv = views[1];
        break;
    case FATTN_LAYOUT_GROUP_HD_HD_HD:
    case FATTN_LAYOUT_GROUP_SD_SD_SD:
        st = lg_alloc_packed(ctx, &ctx->own_grad_storage[0], dt, &q, 1, 0, views);
        if (st == FATTN_OK) {
            dq = views[0];
            st = lg_alloc_packed(ctx, &ctx->own_grad_storage[1], dt, &k, 1, 0, views);
        }
        if (st == FATTN_OK) {
            dk = views[0];
            st = lg_alloc_packed(ctx, &ctx->own_grad_storage[2], dt, &v, 1, 0, views);
        }
        if (st == FATTN_OK)
            dv = views[0];
        break;
    default:
        st = fattn_error(FATTN_E_LAYOUT, "legacy backward: dqkv_layout %s not supported",
                         fattn_layout_name(ctx->dqkv_layout) ? fattn_layout_name(ctx->dqkv_layout)
                                                             : "?");
    }
    if (st != FATTN_OK)
        goto fail;
    /* attention.cpp:492-498: THD grads are zero-filled (f16 path). */
    if (dqf == FATTN_FORMAT_THD)
        fattn_tensor_fill_bits(&dq, 0);
    if (dkvf == FATTN_FORMAT_THD) {
        fattn_tensor_fill_bits(&dk, 0);
        fattn_tensor_fill_bits(&dv, 0);
    }

    /* attention.cpp:543-559: dBias shaped like the LAST aux entry, zeroed
     * for a THD layout. The support table refuses bias + sink (the last
     * entry would be the offset), so here the last entry is the bias. */
    fattn_tensor dbias = fattn_tensor_empty();
    if (ctx->attn_bias_type == FATTN_BIAS_PRE_SCALE_BIAS ||
        ctx->attn_bias_type == FATTN_BIAS_POST_SCALE_BIAS) {
        const fattn_tensor *last = &aux.t[aux.n - 1];
        st = lg_alloc_out(ctx, &ctx->own_d_bias, dt, last->ndim, last->shape);
        if (st != FATTN_OK)
            goto fail;
        if (fattn_layout_format(ctx->qkv_layout) == FATTN_FORMAT_THD)
            fattn_tensor_fill_bits(&ctx->own_d_bias, 0);
        dbias = ctx->own_d_bias;
    }
    /* attention.cpp:561-568: dSoftmaxOffset float32 [1,h,1,1]. */
    fattn_tensor doff = fattn_tensor_empty();
    if (ctx->softmax_type != FATTN_SOFTMAX_VANILLA) {
        int64_t os[4] = {1, q.shape[lg_heads_dim(fattn_layout_q_format(ctx->qkv_layout))], 1, 1};
        st = lg_alloc_out(ctx, &ctx->own_d_softmax_offset, FATTN_DTYPE_FLOAT32, 4, os);
        if (st != FATTN_OK)
            goto fail;
        doff = ctx->own_d_softmax_offset;
    }

    /* backends.py:1943-1977: the f16 fused_attn_bwd call. */
    fattn_bwd_params p;
    memset(&p, 0, sizeof p);
    p.q = q;
    p.k = k;
    p.v = v;
    p.o = o;
    p.d_o = *d_out;
    p.aux = &aux;
    p.dq = dq;
    p.dk = dk;
    p.dv = dv;
    p.d_bias = dbias;
    p.d_softmax_offset = doff;
    p.cu_seqlens_q = s[8];
    p.cu_seqlens_kv = s[9];
    p.cu_seqlens_q_padded = s[10];
    p.cu_seqlens_kv_padded = s[11];
    p.max_seqlen_q = ctx->max_seqlen_q;
    p.max_seqlen_kv = ctx->max_seqlen_kv;
    p.attn_scale = ctx->attn_scale;
    p.dropout = ctx->dropout_p;
    p.qkv_layout = ctx->qkv_layout;
    p.o_format = ctx->o_format;
    p.do_format = ctx->o_format; /* do_format = ctx.o_format */
    p.dqkv_layout = ctx->dqkv_layout;
    p.bias_type = ctx->attn_bias_type;
    p.mask_type = ctx->attn_mask_type;
    p.softmax_type = ctx->softmax_type;
    p.window_size_left = ctx->window_size[0];
    p.window_size_right = ctx->window_size[1];
    p.bottom_right_diagonal = ctx->bottom_right_diagonal;
    p.deterministic = ctx->deterministic;
    p.cuda_graph = false;
    st = fattn_engine_bwd(ctx->engine, &p);
    if (st != FATTN_OK)
        goto fail;

    /* backends.py:1979-1984 and 1985-2022: the 36-tuple. */
    grads[FATTN_LEGACY_GRAD_DQ] = dq;
    grads[FATTN_LEGACY_GRAD_DK] = dk;
    grads[FATTN_LEGACY_GRAD_DV] = dv;
    grads[FATTN_LEGACY_GRAD_DBIAS] = dbias;
    grads[FATTN_LEGACY_GRAD_DSOFTMAX_OFFSET] = doff;
    return FATTN_OK;

fail:
    lg_free_backward_buffers(ctx);
    return st;
}
